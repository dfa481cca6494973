//! `agent`: one turn or the REPL, recorded as a run. With `--json`, one
//! compact object on stdout however the run ends (README: "agent --json").

use crate::channels::{Channel, CliChannel, TermProgress};
use crate::cli::approve::TtyApprover;
use crate::cli::ctx::Ctx;
use crate::cli::parse::{Agent, Continue};
use crate::config::Config;
use crate::control::RunControl;
use crate::error::{Error, Kind, Outcome, Result};
use crate::providers::Provider;
use crate::runtime::{NoProgress, Progress, Runtime, TurnOutcome};
use crate::security::redact::Redactor;
use serde_json::{Map, Value};

/// The version of the `--json` object: raised when a field changes meaning
/// or goes away (new fields may appear without it).
pub const SCHEMA: u32 = 1;

/// How a run ended, as `--json` and the run record say it.
#[derive(Debug, PartialEq)]
struct Ending {
    outcome: Outcome,
    error: Option<String>,
}

impl Ending {
    fn code(&self) -> i32 {
        self.outcome.code()
    }

    /// The run record's `exit_reason`: the reason, then the error.
    fn record(&self) -> String {
        match &self.error {
            Some(e) => format!("{}: {e}", self.outcome.reason()),
            None => self.outcome.reason().to_string(),
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
        v.insert("exit_code".into(), self.code().into());
        v.insert("exit_reason".into(), self.outcome.reason().into());
        if let Some(e) = &self.error {
            v.insert("error".into(), e.clone().into());
        }
        if !v.contains_key("conversation_id") {
            v.insert("conversation_id".into(), conversation.into());
        }
        Value::Object(v)
    }
}

/// The run's ending from what the turn returned and the signal that
/// interrupted it (0: none).
fn ending(
    result: &Result<i32>,
    turn: Option<&TurnOutcome>,
    signal: i32,
    redactor: &Redactor,
) -> Ending {
    let code = match result {
        Err(e) => {
            return Ending {
                outcome: Outcome::Failed(e.kind),
                // For the run record and `--json`, which outlive the run.
                error: Some(redactor.redact(&e.msg).into_owned()),
            };
        }
        Ok(c) => *c,
    };
    if signal != 0 {
        // main.rs ends the process by the signal: the shell sees 128 + it.
        return if signal == libc::SIGINT {
            Ending {
                outcome: Outcome::Cancelled,
                error: Some("cancelled by the operator (Ctrl-C)".into()),
            }
        } else {
            Ending {
                outcome: Outcome::Signal(signal),
                error: Some(format!("stopped by signal {signal}")),
            }
        };
    }
    let Some(t) = turn else {
        // The REPL: it ends when its input does.
        return Ending {
            outcome: if code == 0 {
                Outcome::Completed
            } else {
                Outcome::Failed(Kind::Runtime)
            },
            error: None,
        };
    };
    let outcome = t.outcome();
    let call = |estop: bool| {
        t.tool_calls
            .iter()
            .find(|c| {
                if estop {
                    c.estop
                } else {
                    c.status == crate::receipts::Status::Denied
                }
            })
            .map(|c| format!("{}: {}", c.tool, c.reason))
    };
    let error = match outcome {
        Outcome::Completed => None,
        Outcome::Refused => call(false),
        Outcome::Estop => call(true),
        // latchclaw's own words: the first line says why it stopped.
        _ => t.answer.lines().next().map(String::from),
    };
    Ending { outcome, error }
}

/// Prints the `--json` object, once, on every exit path.
struct Reporter {
    json: bool,
}

impl Reporter {
    fn print(&self, end: &Ending, outcome: Option<&TurnOutcome>, conversation: Option<&str>) {
        if self.json {
            crate::cli::ctx::print_json(&end.object(outcome, conversation));
        }
    }

    /// A run that failed before it had a record.
    fn fail(&self, e: Error) -> Result<i32> {
        let end = Ending {
            outcome: Outcome::Failed(e.kind),
            error: Some(e.msg.clone()),
        };
        self.print(&end, None, None);
        Err(e)
    }
}

/// The config with this run's flags applied; the provider to use.
fn configure(ctx: &Ctx, a: &Agent) -> Result<(Config, String, String)> {
    let mut cfg = ctx.load_config()?;
    if !cfg.channels.cli.enabled {
        return Err(Error::usage(
            "the cli channel is disabled (channels.cli.enabled = false)",
        ));
    }
    let name = match &a.provider {
        Some(n) => ctx.provider_name(&cfg, n).to_string(),
        None => cfg.default_provider.clone(),
    };
    if a.provider.is_some() && !cfg.providers.contains_key(&name) {
        let near = crate::util::suggest::nearest(&name, cfg.providers.keys().map(String::as_str))
            .map(|p| format!(" did you mean \"{p}\"?"))
            .unwrap_or_default();
        return Err(Error::usage(format!(
            "--provider: no provider \"{name}\";{near} configured providers: {}",
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
            p.set_stream(false);
        }
    }
    cfg.prompt.base_text = match &a.system_file {
        Some(path) => Some(system_file(path, cfg.max_input_bytes)?),
        None => a.system.clone(),
    };
    // After the configured ones, each once: the skills layer checks them
    // as it does `[skills] enabled` (found, well formed, tools enabled).
    for name in &a.skills {
        if !cfg.skills.enabled.contains(name) {
            cfg.skills.enabled.push(name.clone());
        }
    }
    let from = crate::cli::workspace::choose(&mut cfg, a.workspace.as_deref())?;
    // The configured workspace is created after the state dir is known to
    // be usable (`run`), so that nothing is made before that.
    let flag = if let crate::cli::workspace::From::Config(_) = from {
        if let Some(note) = crate::cli::workspace::note(&cfg, &from)
            && !a.quiet
        {
            log::warn!(target: "event::workspace_configured", "{note}");
        }
        String::new()
    } else {
        format!(
            " -w {}",
            crate::util::shell_quote(&cfg.workspace_dir.to_string_lossy())
        )
    };
    Ok((cfg, name, flag))
}

/// `--system-file PATH`: UTF-8 text, not empty, at most `max` bytes.
fn system_file(path: &std::path::Path, max: usize) -> Result<String> {
    let text = crate::channels::read_file(path, max)
        .map_err(|e| Error::usage(format!("--system-file: {e}")))?;
    if text.trim().is_empty() {
        return Err(Error::usage(format!(
            "--system-file: {} is empty; give a file holding the prompt text",
            path.display()
        )));
    }
    Ok(text.trim().to_string())
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
    let reporter = Reporter { json: a.json };
    let (cfg, provider_name, workspace_flag) = match configure(ctx, &a) {
        Ok(c) => c,
        Err(e) => return reporter.fail(e),
    };
    let message = match (&a.conversation, a.message.as_deref()) {
        // Resuming: the operator's decisions are the new turn.
        (Continue::Resume(_), None) => Ok(Some(
            "The operator has decided on the pending tool calls of this conversation; \
             the approved ones have run and their results follow. Continue the task from \
             them."
                .to_string(),
        )),
        (_, m) => crate::channels::one_shot_input(m, cfg.max_input_bytes),
    };
    let message = match message.and_then(|m| attach(m, &a.files, cfg.max_input_bytes)) {
        Ok(m) => m,
        Err(e) => return reporter.fail(e),
    };
    let provider = match crate::providers::build(&cfg, &provider_name, &ctx.redactor) {
        Ok(p) => p,
        Err(e) => return reporter.fail(e),
    };
    let approver = TtyApprover;
    // The state directory first (Runtime::new checks it): nothing is
    // created when it cannot be used.
    let mut rt = match Runtime::new(&cfg, &approver, std::sync::Arc::clone(&ctx.redactor)) {
        Ok(rt) => rt,
        Err(e) => return reporter.fail(e),
    };
    if a.workspace.is_none()
        && let Err(e) = create_workspace(&cfg, a.quiet)
    {
        return reporter.fail(e);
    }
    rt.prepare_receipts();
    rt.workspace_flag = workspace_flag;
    rt.standing = true;
    if a.no_memory {
        rt.memory.keep_turns_in_process();
    }
    // The same input gives the same request: a one-shot or piped run
    // recalls nothing unless `[memory] recall = "always"`.
    let one_shot = message.is_some();
    if a.no_memory || (one_shot && cfg.memory.recall == crate::config::Recall::Repl) {
        rt.recall = false;
    }
    rt.hint = a.hint.clone();
    rt.options = a.options;
    let run_id = match rt.memory.run_started(&ctx.line, a.lock.as_deref()) {
        Ok(id) => id,
        Err(e) => return reporter.fail(e),
    };
    rt.control = RunControl::new(a.timeout.map(std::time::Duration::from_secs));
    let signals = rt.control.install();
    let mut outcome = None;
    let result = turns(&rt, &a, message, provider.as_ref(), &mut outcome);
    drop(signals);
    if let Err(e) = rt.anchor_head() {
        // The run's receipts are written; the anchor is a copy of its head.
        eprintln!("latchclaw: {e}");
    }
    let end = ending(&result, outcome.as_ref(), rt.control.signal(), &rt.redactor);
    let conversation = outcome
        .as_ref()
        .map(|o| o.conversation_id.clone())
        .or_else(|| rt.conversation.borrow().clone());
    // The run's own outcome matters more than failing to record it.
    let usage = rt.run_usage.borrow().clone();
    let _ = rt.memory.run_finished(
        &run_id,
        end.code(),
        &end.record(),
        conversation.as_deref(),
        Some(&usage),
    );
    reporter.print(&end, outcome.as_ref(), conversation.as_deref());
    result
}

/// `-f` files after the message; they need one (the REPL has none to
/// attach them to).
fn attach(
    message: Option<String>,
    files: &[std::path::PathBuf],
    max: usize,
) -> Result<Option<String>> {
    match message {
        _ if files.is_empty() => Ok(message),
        Some(m) => crate::channels::attach_files(m, files, max).map(Some),
        None => Err(Error::usage(
            "-f/--file attaches files to a message: give one too (latchclaw agent -f PATH \"what does it do?\", -m, or piped stdin)",
        )),
    }
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
        Continue::Latest => {
            let latest = rt
                .memory
                .latest_conversation()?
                .ok_or_else(|| Error::usage("--continue: there is no earlier conversation"))?;
            // `[memory] session`: past the boundary, -c begins a new one.
            let m = &rt.cfg.memory;
            if rt.memory.session_over(&latest, m.session, m.session_hour)? {
                if !a.quiet {
                    eprintln!("[new session: the {} boundary passed]", m.session.as_str());
                }
                None
            } else {
                Some(latest)
            }
        }
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
        if let Some(name) = &a.new_session {
            rt.memory.set_session(&o.conversation_id, name)?;
        }
        let code = o.exit_code();
        *outcome = Some(o);
        return Ok(code);
    }
    let mut channel = CliChannel {
        message,
        conversation,
        json: a.json,
        quiet: a.quiet,
        partial: a.partial,
        outcome: None,
        session_name: a.new_session.clone(),
    };
    let result = channel.start(rt, provider);
    *outcome = channel.outcome.take();
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_signals_have_their_reason_and_code() {
        let e = ending(&Err(Error::usage("bad")), None, 0, &Redactor::new());
        assert_eq!(
            (e.code(), e.outcome.reason(), e.error.as_deref()),
            (2, "usage", Some("bad"))
        );
        let e = ending(
            &Err(Error::new(Kind::Locked, "held")),
            None,
            0,
            &Redactor::new(),
        );
        assert_eq!((e.code(), e.outcome.reason()), (8, "locked"));
        let e = ending(&Ok(0), None, libc::SIGINT, &Redactor::new());
        assert_eq!((e.code(), e.outcome.reason()), (130, "cancelled"));
        let e = ending(&Ok(0), None, libc::SIGTERM, &Redactor::new());
        assert_eq!((e.code(), e.outcome.reason()), (143, "signal"));
        let e = ending(&Ok(0), None, 0, &Redactor::new());
        assert_eq!(
            (e.code(), e.outcome.reason(), e.error),
            (0, "completed", None)
        );
        assert_eq!(
            Ending {
                outcome: Outcome::Failed(Kind::Runtime),
                error: Some("boom".into())
            }
            .record(),
            "error: boom"
        );
    }

    #[test]
    fn the_object_has_schema_code_reason_and_error_without_a_turn() {
        let e = Ending {
            outcome: Outcome::Timeout,
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
