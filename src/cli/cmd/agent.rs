//! `agent`: one turn or the REPL, recorded as a run.

use crate::channels::{Channel, CliChannel, TtyApprover};
use crate::cli::Ctx;
use crate::cli::parse::{Agent, Continue};
use crate::config::Config;
use crate::error::{Error, Result, exit};
use crate::memory::Memory;
use crate::runtime::Runtime;

pub fn run(ctx: &Ctx, a: Agent) -> Result<i32> {
    let mut cfg = ctx.load_config()?;
    if !cfg.cli_enabled {
        return Err(Error::usage(
            "the cli channel is disabled (channels.cli.enabled = false)",
        ));
    }
    if a.no_stream {
        for p in cfg.providers.values_mut() {
            p.stream = false;
        }
    }
    let message = match (&a.conversation, a.message.as_deref()) {
        // Resuming: the operator's decisions are the new turn.
        (Continue::Resume(_), None) => Some(
            "The operator has decided on the pending tool calls of this conversation. \
             Continue the task: repeat a call that was approved and it will run."
                .to_string(),
        ),
        (_, m) => crate::channels::one_shot_input(m, cfg.max_input_bytes)?,
    };
    let provider = crate::providers::build(&cfg, &cfg.default_provider)?;
    let approver = TtyApprover;
    let mut rt = Runtime::new(&cfg, &approver)?;
    rt.hint = a.hint.clone();
    let conversation = match a.conversation {
        Continue::New => None,
        Continue::Latest => Some(
            rt.memory
                .latest_conversation()?
                .ok_or_else(|| Error::usage("--continue: there is no earlier conversation"))?,
        ),
        Continue::Conversation(id) | Continue::Resume(id) => Some(id),
    };
    let _lock = match &a.lock {
        Some(name) => Some(crate::cli::lock::acquire(&cfg, name)?),
        None => None,
    };
    let run_id = rt.memory.run_started(&ctx.line, a.lock.as_deref())?;
    if let Some(secs) = a.timeout {
        rt.deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(secs));
        watchdog(&cfg, &run_id, secs);
    }
    let mut channel = CliChannel {
        message,
        conversation,
        json: a.json,
    };
    let result = channel.start(&rt, provider.as_ref());
    let (code, reason) = match &result {
        Ok(c) => (*c, "finished".to_string()),
        Err(e) => (e.exit_code(), e.msg.clone()),
    };
    // The run's own outcome matters more than failing to record it.
    let usage = rt.run_usage.borrow().clone();
    let _ = rt.memory.run_finished(
        &run_id,
        code,
        &reason,
        channel.conversation.as_deref(),
        Some(&usage),
    );
    result
}

/// The hard stop for `--timeout`: if the run is still going a second after
/// its deadline (stuck in a provider call), kill the running shell command,
/// record the run and exit 6.
fn watchdog(cfg: &Config, run_id: &str, secs: u64) {
    let (path, busy, run_id) = (
        cfg.memory_path.clone(),
        cfg.memory_busy_timeout_ms,
        run_id.to_string(),
    );
    std::thread::spawn(move || {
        std::thread::sleep(
            std::time::Duration::from_secs(secs) + std::time::Duration::from_secs(1),
        );
        crate::tools::shell::kill_current();
        if let Ok(m) = Memory::open(&path, busy) {
            let _ = m.run_finished(&run_id, exit::LIMIT, "timeout (--timeout)", None, None);
        }
        eprintln!("latchclaw: error: the run's --timeout of {secs} s was reached; stopping");
        std::process::exit(exit::LIMIT);
    });
}
