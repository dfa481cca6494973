//! `agent`: one turn or the REPL, recorded as a run. With `--json`, one
//! compact object on stdout however the run ends (README: "agent --json").

use crate::channels::{Channel, CliChannel, TermProgress};
use crate::cli::Ctx;
use crate::cli::approve::TtyApprover;
use crate::cli::parse::{Agent, Continue};
use crate::config::Config;
use crate::error::{Error, Kind, Result, exit};
use crate::memory::Memory;
use crate::providers::Provider;
use crate::runtime::{NoProgress, Progress, Runtime, TurnOutcome};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};

/// The version of the `--json` object: raised when a field changes meaning
/// or goes away (new fields may appear without it).
pub const SCHEMA: u32 = 1;

/// How a run ended, as `--json` and the run record say it.
#[derive(Debug, PartialEq)]
struct Ending {
    code: i32,
    reason: String,
    error: Option<String>,
}

impl Ending {
    /// The run record's `exit_reason`: the reason, then the error.
    fn record(&self) -> String {
        match &self.error {
            Some(e) => format!("{}: {e}", self.reason),
            None => self.reason.clone(),
        }
    }

    /// The `--json` object: the turn's fields when a turn ran (its own
    /// stop reason as `turn_reason`), then the run's.
    fn object(&self, outcome: Option<&TurnOutcome>, conversation: Option<&str>) -> Value {
        let mut v = match outcome.map(serde_json::to_value) {
            Some(Ok(Value::Object(m))) => m,
            _ => Map::new(),
        };
        if let Some(r) = v.remove("exit_reason") {
            v.insert("turn_reason".into(), r);
        }
        v.insert("schema".into(), SCHEMA.into());
        v.insert("exit_code".into(), self.code.into());
        v.insert("exit_reason".into(), self.reason.clone().into());
        if let Some(e) = &self.error {
            v.insert("error".into(), e.clone().into());
        }
        if !v.contains_key("conversation_id") {
            v.insert("conversation_id".into(), conversation.into());
        }
        Value::Object(v)
    }
}

/// What an error's kind is called in `exit_reason`.
fn kind_reason(k: Kind) -> &'static str {
    match k {
        Kind::Usage => "usage",
        Kind::Runtime => "error",
        Kind::Integrity => "integrity",
        Kind::Locked => "locked",
        Kind::Internal => "internal",
    }
}

/// The run's ending from what the turn returned and the signal that
/// interrupted it (0: none).
fn ending(result: &Result<i32>, outcome: Option<&TurnOutcome>, signal: i32) -> Ending {
    let code = match result {
        Err(e) => {
            return Ending {
                code: e.exit_code(),
                reason: kind_reason(e.kind).into(),
                error: Some(e.msg.clone()),
            };
        }
        Ok(c) => *c,
    };
    if signal != 0 {
        // main.rs ends the process by the signal: the shell sees 128 + it.
        let (reason, error) = if signal == libc::SIGINT {
            (
                "cancelled",
                "cancelled by the operator (Ctrl-C)".to_string(),
            )
        } else {
            ("signal", format!("stopped by signal {signal}"))
        };
        return Ending {
            code: 128 + signal,
            reason: reason.into(),
            error: Some(error),
        };
    }
    let refused = |estop: bool| {
        outcome
            .and_then(|o| {
                o.tool_calls
                    .iter()
                    .find(|c| if estop { c.estop } else { c.status == "denied" })
            })
            .map(|c| format!("{}: {}", c.tool, c.reason))
    };
    let turn = outcome.map(|o| o.exit_reason);
    let (reason, error) = match (code, turn) {
        (exit::POLICY, _) => ("refused", refused(false)),
        (exit::ESTOP, _) => ("estop", refused(true)),
        (_, Some("completed")) => ("completed", None),
        // latchclaw's own words: the first line says why it stopped.
        (_, Some(r)) => (
            r,
            outcome.and_then(|o| o.answer.lines().next().map(String::from)),
        ),
        (exit::OK, None) => ("completed", None),
        (_, None) => ("error", None),
    };
    Ending {
        code,
        reason: reason.into(),
        error,
    }
}

/// Prints the `--json` object once: the main thread when the run ends, or
/// the `--timeout` watchdog, whichever comes first.
#[derive(Clone)]
struct Reporter {
    json: bool,
    done: Arc<Mutex<bool>>,
}

impl Reporter {
    fn print(&self, end: &Ending, outcome: Option<&TurnOutcome>, conversation: Option<&str>) {
        if self.json {
            crate::cli::print_json(&end.object(outcome, conversation));
        }
    }

    /// A run that failed before it had a record.
    fn fail(&self, e: Error) -> Result<i32> {
        let end = ending(&Err(e), None, 0);
        self.print(&end, None, None);
        Err(Error::new(
            match end.code {
                exit::USAGE => Kind::Usage,
                exit::LOCKED => Kind::Locked,
                exit::INTEGRITY => Kind::Integrity,
                exit::INTERNAL => Kind::Internal,
                _ => Kind::Runtime,
            },
            end.error.unwrap_or_default(),
        ))
    }
}

/// The config with this run's flags applied; the provider to use.
fn configure(ctx: &Ctx, a: &Agent) -> Result<(Config, String)> {
    let mut cfg = ctx.load_config()?;
    if !cfg.cli_enabled {
        return Err(Error::usage(
            "the cli channel is disabled (channels.cli.enabled = false)",
        ));
    }
    let name = a
        .provider
        .clone()
        .unwrap_or_else(|| cfg.default_provider.clone());
    if a.provider.is_some() && !cfg.providers.contains_key(&name) {
        return Err(Error::usage(format!(
            "--provider: no provider \"{name}\"; configured providers: {}",
            cfg.providers.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    if let Some(m) = &a.model
        && let Some(p) = cfg.providers.get_mut(&name)
    {
        p.model = m.clone();
    }
    if a.no_stream {
        for p in cfg.providers.values_mut() {
            p.stream = false;
        }
    }
    cfg.prompt_base_text = a.system.clone();
    match &a.workspace {
        Some(dir) => cfg.workspace_dir = run_workspace(&cfg, dir)?,
        None => create_workspace(&cfg, a.quiet)?,
    }
    Ok((cfg, name))
}

/// `-w DIR`: it must exist (a typo should not become a new empty
/// workspace) and lie outside the state directory.
fn run_workspace(cfg: &Config, dir: &std::path::Path) -> Result<std::path::PathBuf> {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !abs.is_dir() {
        return Err(Error::usage(format!(
            "--workspace: {} {}; create it first (mkdir -p {0}) or give another directory",
            abs.display(),
            if abs.exists() {
                "is not a directory"
            } else {
                "does not exist"
            }
        )));
    }
    if abs.starts_with(&cfg.state_dir) {
        return Err(Error::usage(format!(
            "--workspace: {} is inside the state directory {}, which tools can never reach",
            abs.display(),
            cfg.state_dir.display()
        )));
    }
    Ok(abs)
}

/// The configured workspace is created on first use, as `init` would, so
/// a run with no setup works; the gate would otherwise refuse every file.
fn create_workspace(cfg: &Config, quiet: bool) -> Result<()> {
    let ws = &cfg.workspace_dir;
    if ws.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(ws).map_err(|e| {
        Error::runtime(format!(
            "the workspace {} does not exist and cannot be created: {e}; create it \
             (mkdir -p {0}) or set workspace_dir in {}",
            ws.display(),
            cfg.config_path.display()
        ))
    })?;
    if !quiet {
        eprintln!("latchclaw: created the workspace {}", ws.display());
    }
    Ok(())
}

pub fn run(ctx: &Ctx, a: Agent) -> Result<i32> {
    let reporter = Reporter {
        json: a.json,
        done: Arc::new(Mutex::new(false)),
    };
    let (cfg, provider_name) = match configure(ctx, &a) {
        Ok(c) => c,
        Err(e) => return reporter.fail(e),
    };
    let message = match (&a.conversation, a.message.as_deref()) {
        // Resuming: the operator's decisions are the new turn.
        (Continue::Resume(_), None) => Ok(Some(
            "The operator has decided on the pending tool calls of this conversation. \
             Continue the task: repeat a call that was approved and it will run."
                .to_string(),
        )),
        (_, m) => crate::channels::one_shot_input(m, cfg.max_input_bytes),
    };
    let message = match message {
        Ok(m) => m,
        Err(e) => return reporter.fail(e),
    };
    let provider = match crate::providers::build(&cfg, &provider_name) {
        Ok(p) => p,
        Err(e) => return reporter.fail(e),
    };
    let approver = TtyApprover;
    let mut rt = match Runtime::new(&cfg, &approver) {
        Ok(rt) => rt,
        Err(e) => return reporter.fail(e),
    };
    if a.no_memory {
        rt.memory.keep_turns_in_process();
    }
    rt.hint = a.hint.clone();
    let run_id = match rt.memory.run_started(&ctx.line, a.lock.as_deref()) {
        Ok(id) => id,
        Err(e) => return reporter.fail(e),
    };
    if let Some(secs) = a.timeout {
        rt.deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(secs));
        // The watchdog finishes the record from its own connection.
        if let Err(e) = rt.memory.flush_run() {
            return reporter.fail(e);
        }
        watchdog(
            &cfg,
            &run_id,
            secs,
            reporter.clone(),
            rt.conversation.clone(),
        );
    }
    let mut outcome = None;
    let result = turns(&rt, &a, message, provider.as_ref(), &mut outcome);
    // From here the watchdog stays quiet; if it got here first it is
    // ending the process and this waits for that.
    let mut done = reporter.done.lock().unwrap_or_else(|e| e.into_inner());
    *done = true;
    let signal = crate::tools::shell::PENDING_SIGNAL.load(std::sync::atomic::Ordering::SeqCst);
    let end = ending(&result, outcome.as_ref(), signal);
    let conversation = outcome
        .as_ref()
        .map(|o| o.conversation_id.clone())
        .or_else(|| rt.conversation.lock().ok().and_then(|c| c.clone()));
    // The run's own outcome matters more than failing to record it.
    let usage = rt.run_usage.borrow().clone();
    let _ = rt.memory.run_finished(
        &run_id,
        end.code,
        &end.record(),
        conversation.as_deref(),
        Some(&usage),
    );
    reporter.print(&end, outcome.as_ref(), conversation.as_deref());
    drop(done);
    result
}

/// The turn (one-shot) or the REPL, after the conversation and the lock.
fn turns(
    rt: &Runtime,
    a: &Agent,
    message: Option<String>,
    provider: &dyn Provider,
    outcome: &mut Option<TurnOutcome>,
) -> Result<i32> {
    let conversation = match &a.conversation {
        Continue::New => None,
        Continue::Latest => Some(
            rt.memory
                .latest_conversation()?
                .ok_or_else(|| Error::usage("--continue: there is no earlier conversation"))?,
        ),
        Continue::Conversation(id) | Continue::Resume(id) => Some(id.clone()),
    };
    let _lock = match &a.lock {
        Some(name) => Some(crate::cli::lock::acquire(rt.cfg, name)?),
        None => None,
    };
    if let (Some(m), true) = (&message, a.json) {
        // The object is printed by `run`, whatever happens; the display
        // is status lines on a terminal at most.
        let progress: Box<dyn Progress> = if a.quiet {
            Box::new(NoProgress)
        } else {
            Box::new(TermProgress::new(true))
        };
        let o = rt.agent_turn_with(provider, conversation.as_deref(), m, progress.as_ref())?;
        let code = o.exit_code();
        *outcome = Some(o);
        return Ok(code);
    }
    let mut channel = CliChannel {
        message,
        conversation,
        json: a.json,
        quiet: a.quiet,
        outcome: None,
    };
    let result = channel.start(rt, provider);
    *outcome = channel.outcome.take();
    result
}

/// The hard stop for `--timeout`: if the run is still going a second after
/// its deadline (stuck in a provider call), kill the running shell command,
/// record the run, print its `--json` object and exit 6.
fn watchdog(
    cfg: &Config,
    run_id: &str,
    secs: u64,
    reporter: Reporter,
    conversation: Arc<Mutex<Option<String>>>,
) {
    let (path, busy, run_id) = (
        cfg.memory_path.clone(),
        cfg.memory_busy_timeout_ms,
        run_id.to_string(),
    );
    std::thread::spawn(move || {
        std::thread::sleep(
            std::time::Duration::from_secs(secs) + std::time::Duration::from_secs(1),
        );
        let mut done = reporter.done.lock().unwrap_or_else(|e| e.into_inner());
        if *done {
            return;
        }
        *done = true;
        crate::tools::shell::kill_current();
        let conversation = conversation.lock().ok().and_then(|c| c.clone());
        let end = Ending {
            code: exit::LIMIT,
            reason: "timeout".into(),
            error: Some(format!("the run's --timeout of {secs} s was reached")),
        };
        if let Ok(m) = Memory::open(&path, busy) {
            let _ = m.run_finished(
                &run_id,
                end.code,
                &end.record(),
                conversation.as_deref(),
                None,
            );
        }
        // The REPL may be waiting for a line in raw mode.
        crate::channels::lineedit::restore_terminal();
        reporter.print(&end, None, conversation.as_deref());
        let _ = std::io::Write::flush(&mut std::io::stdout());
        eprintln!("latchclaw: error: the run's --timeout of {secs} s was reached; stopping");
        std::process::exit(exit::LIMIT);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_signals_have_their_reason_and_code() {
        let e = ending(&Err(Error::usage("bad")), None, 0);
        assert_eq!(
            (e.code, e.reason.as_str(), e.error.as_deref()),
            (2, "usage", Some("bad"))
        );
        let e = ending(&Err(Error::new(Kind::Locked, "held")), None, 0);
        assert_eq!((e.code, e.reason.as_str()), (8, "locked"));
        let e = ending(&Ok(0), None, libc::SIGINT);
        assert_eq!((e.code, e.reason.as_str()), (130, "cancelled"));
        let e = ending(&Ok(0), None, 0);
        assert_eq!((e.code, e.reason.as_str(), e.error), (0, "completed", None));
        assert_eq!(
            Ending {
                code: 3,
                reason: "error".into(),
                error: Some("boom".into())
            }
            .record(),
            "error: boom"
        );
    }

    #[test]
    fn the_object_has_schema_code_reason_and_error_without_a_turn() {
        let e = Ending {
            code: 6,
            reason: "timeout".into(),
            error: Some("late".into()),
        };
        let v = e.object(None, Some("conv-1"));
        assert_eq!(v["schema"], 1);
        assert_eq!(v["exit_code"], 6);
        assert_eq!(v["exit_reason"], "timeout");
        assert_eq!(v["error"], "late");
        assert_eq!(v["conversation_id"], "conv-1");
        assert!(!v.to_string().contains('\n'));
    }
}
