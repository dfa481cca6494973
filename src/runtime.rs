//! The agent loop and the one path every tool call takes:
//! gate → (approval) → started receipt → tool → outcome receipt → memory.

use crate::config::Config;
use crate::control::{RunControl, Stop};
use crate::error::{Error, IoContext, Kind, Outcome, Result};
use crate::memory::{Memory, NewTurn, Round, RoundResult, TurnRole};
use crate::providers::visible::Visible;
use crate::providers::{
    ChatRequest, Message, Provider, ProviderErrorKind, Role, StreamSink, ToolCall, ToolSpec, Usage,
};
use crate::receipts::{NewReceipt, ReceiptLog, Status};
use crate::security::redact::Redactor;
use crate::security::{Decision, Gate, Risk, Verdict};
use crate::tools::{self, ToolCtx, ToolResult};
use serde::Serialize;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::time::Instant;

/// Provider calls that failed in this process (the gateway's metrics).
static PROVIDER_ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(feature = "gateway")]
pub fn provider_errors() -> u64 {
    PROVIDER_ERRORS.load(std::sync::atomic::Ordering::Relaxed)
}

pub enum Approval {
    Approved,
    Denied(String),
    /// Nobody to ask (no terminal): the call waits as a pending approval.
    Unavailable(String),
}

/// Asks a person whether a call may run. Only the runtime calls it, so
/// nothing in a model's output can answer for the operator. The same
/// person answers `ask_user` questions (`tools::ask_user::User`).
pub trait Approver: tools::ask_user::User {
    /// Gives up when `control` says the run must stop.
    fn ask(&self, tool: &str, decision: &Decision, args: &Value, control: &RunControl) -> Approval;
}

/// What a channel shows while a turn runs (`Runtime::agent_turn_with`).
/// Every method does nothing unless the channel says otherwise.
pub trait Progress {
    /// A provider call starts (0 for the first of the turn).
    fn round_start(&self, round: u32) {
        let _ = round;
    }
    /// More of this round's answer as it streams in, safe to show: never
    /// `<think>` reasoning or tool-call syntax.
    fn text(&self, delta: &str) {
        let _ = delta;
    }
    /// A tool call is about to be decided and run; `summary` is its main
    /// argument, short and printable.
    fn tool_start(&self, tool: &str, summary: &str) {
        let _ = (tool, summary);
    }
    /// The call ended: `allowed`, `approved`, `denied`, `failed`,
    /// `repeated` (not run again) or `cancelled`.
    fn tool_end(&self, tool: &str, status: &str, ms: u128) {
        let _ = (tool, status, ms);
    }
}

/// Shows nothing (`--json`, tests, anything without a screen).
pub struct NoProgress;

impl Progress for NoProgress {}

/// One provider call's view of the turn: what of its text may be shown
/// (and, should the stream be cut, is its partial answer: no reasoning, no
/// half-written tool call), and when to stop (the run's deadline, Ctrl-C).
struct RoundSink<'p> {
    visible: Visible<'p>,
    shown: String,
    progress: &'p dyn Progress,
    control: &'p RunControl,
}

impl StreamSink for RoundSink<'_> {
    fn text(&mut self, delta: &str) {
        let shown = self.visible.push(delta);
        if !shown.is_empty() {
            self.progress.text(&shown);
            self.shown.push_str(&shown);
        }
    }

    fn stop(&mut self) -> Option<String> {
        self.control.stop().map(|s| self.control.why(s))
    }
}

/// The answer and outcome of a turn the run's control stopped.
fn stopped(control: &RunControl, stop: Stop) -> (String, Outcome) {
    match stop {
        Stop::Cancelled => (control.why(stop), Outcome::Cancelled),
        Stop::Timeout => (format!("stopped: {}", control.why(stop)), Outcome::Timeout),
    }
}

/// The main argument of a call, on one short line, for a status line.
pub fn summarize_args(args: &Value) -> String {
    let main = ["command", "path", "url", "query"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str));
    let text = match main {
        Some(s) => s.to_string(),
        None if args.as_object().is_some_and(|o| o.is_empty()) => String::new(),
        None => args.to_string(),
    };
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let printable = crate::util::printable(&one_line);
    match printable.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &printable[..i]),
        None => printable,
    }
}

pub struct Runtime<'a> {
    pub cfg: &'a Config,
    pub gate: Gate,
    /// Every tool result passes through it before anything else sees it.
    pub redactor: std::sync::Arc<Redactor>,
    pub memory: Memory,
    receipts: Option<ReceiptLog>,
    approver: &'a dyn Approver,
    /// Hash of the last receipt this process wrote.
    receipts_head: RefCell<Option<String>>,
    /// `--hint` for a router provider.
    pub hint: Option<String>,
    /// The run's deadline (`--timeout`) and cancellation (Ctrl-C).
    pub control: RunControl,
    /// The command that runs this call again, for a caller that is not a
    /// conversation (`tool run`): after `latchclaw approve ID` the operator
    /// gives it again, instead of resuming a conversation.
    pub rerun: Option<String>,
    /// Tokens the provider reported over every turn of this run.
    pub run_usage: RefCell<Usage>,
    /// The conversation a turn is working on, as soon as it is known, for
    /// the run's record when the turn fails without an outcome.
    pub conversation: RefCell<Option<String>>,
    /// The tool round being run: stored whole when it ends, however it
    /// ends, each call without a result given one saying so.
    pub round: RefCell<Option<Round>>,
    /// When this run's calls of rate-limited tools were admitted
    /// (`rate_limit.per_minute` counts these).
    calls_in_run: RefCell<Vec<(tools::ToolName, Instant)>>,
}

/// The counter the gate's rate limits read: this run's calls in the
/// process, every run's in the memory database.
struct CallLog<'a> {
    memory: &'a Memory,
    in_run: &'a RefCell<Vec<(tools::ToolName, Instant)>>,
}

impl crate::security::rate::CallCounter for CallLog<'_> {
    fn admit(
        &self,
        tool: tools::ToolName,
        hourly: bool,
        record: bool,
        decide: &mut dyn FnMut(crate::security::rate::Counts) -> Option<String>,
    ) -> Result<Option<String>> {
        let now = Instant::now();
        let minute = std::time::Duration::from_millis(crate::security::rate::MINUTE_MS as u64);
        let minute_in_run = self
            .in_run
            .borrow()
            .iter()
            .filter(|(t, at)| *t == tool && now.duration_since(*at) < minute)
            .count() as u32;
        let mut verdict = None;
        let mut judge = |hour_all_runs| {
            verdict = decide(crate::security::rate::Counts {
                minute_in_run,
                hour_all_runs,
            });
            verdict.is_none() && record
        };
        if hourly {
            self.memory.admit_tool_call(
                tool.as_str(),
                crate::security::rate::HOUR_MS,
                &mut judge,
            )?;
        } else {
            judge(0);
        }
        if verdict.is_none() && record {
            self.in_run.borrow_mut().push((tool, now));
        }
        Ok(verdict)
    }
}

/// An exclusive lock on `<state>/tools.lock`, held while one tool call is
/// re-judged and runs; released when the guard drops.
fn tool_lock(cfg: &Config, control: &RunControl) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let path = cfg.state_dir.join("tools.lock");
    let _ = crate::util::private_dir(&cfg.state_dir);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .ctx(|| format!("cannot open {}", path.display()))?;
    // Waits for the other call, but not past the run's deadline or Ctrl-C.
    loop {
        // SAFETY: flock(2) on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        let waiting = err.raw_os_error() == Some(libc::EWOULDBLOCK);
        if !waiting || control.stop().is_some() {
            let why = if waiting {
                "another latchclaw call holds it".to_string()
            } else {
                err.to_string()
            };
            return Err(Error::new(
                Kind::Runtime,
                format!("cannot lock {}: {why}", path.display()),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(file)
}

/// How a call ended, before its outcome receipt is written.
struct CallEnd {
    status: Status,
    risk: Risk,
    reason: String,
    started_id: Option<String>,
    pending: Option<String>,
    estop: bool,
}

/// One attempted tool call, as reported to the user.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    pub tool: String,
    pub arguments: Value,
    pub status: Status,
    pub risk: Risk,
    pub reason: String,
    /// The outcome receipt (the call's last).
    pub receipt_id: Option<String>,
    /// The receipt written before the tool ran (calls that ran only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_receipt_id: Option<String>,
    /// Set when the call waits for an operator (`latchclaw approve ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_approval: Option<String>,
    #[serde(skip)]
    pub estop: bool,
}

#[derive(Debug, Serialize)]
pub struct TurnOutcome {
    pub conversation_id: String,
    pub answer: String,
    pub provider: String,
    pub model: String,
    pub tool_calls: Vec<CallRecord>,
    pub rounds: u32,
    /// Why the turn stopped (`turn_reason` in `agent --json`).
    pub exit_reason: Outcome,
    pub usage: Usage,
    pub duration_ms: u128,
    /// The receipt chain's head after this turn (when it wrote receipts).
    pub receipts_head: Option<String>,
}

impl TurnOutcome {
    /// How the run ended (README: exit codes). When several apply, the
    /// emergency stop beats a refusal, which beats why the turn stopped: a
    /// model that repeats a refused call until the rounds run out was
    /// refused, and an unattended run should say so.
    pub fn outcome(&self) -> Outcome {
        if self.tool_calls.iter().any(|c| c.estop) {
            Outcome::Estop
        } else if self.tool_calls.iter().any(|c| c.status == Status::Denied) {
            Outcome::Refused
        } else {
            self.exit_reason
        }
    }

    pub fn exit_code(&self) -> i32 {
        self.outcome().code()
    }
}

impl<'a> Runtime<'a> {
    pub fn new(cfg: &'a Config, approver: &'a dyn Approver) -> Result<Runtime<'a>> {
        let memory = Memory::open(&cfg.memory.path, cfg.memory.busy_timeout_ms)?;
        Ok(Runtime {
            cfg,
            gate: Gate::new(cfg, &cfg.channels.cli.tools_allow),
            redactor: crate::security::redact::for_config(cfg),
            memory,
            receipts: cfg
                .receipts
                .enabled
                .then(|| ReceiptLog::open(&cfg.receipts.path, &cfg.receipt_key_path())),
            approver,
            receipts_head: RefCell::new(None),
            hint: None,
            control: RunControl::new(None),
            rerun: None,
            run_usage: RefCell::new(Usage::default()),
            conversation: Default::default(),
            round: Default::default(),
            calls_in_run: Default::default(),
        })
    }

    /// For a run that may call tools: creates the receipt key when the
    /// state directory exists and the key does not (`receipts::ensure_key`).
    pub fn prepare_receipts(&mut self) {
        if self.receipts.is_some() {
            self.receipts = Some(ReceiptLog::for_run(
                &self.cfg.receipts.path,
                &self.cfg.receipt_key_path(),
            ));
        }
    }

    /// The hash of the last receipt this process wrote.
    pub fn receipts_head(&self) -> Option<String> {
        self.receipts_head.borrow().clone()
    }

    /// After a run that wrote receipts: appends the chain's head to
    /// `receipts.anchor_file`, when one is set.
    pub fn anchor_head(&self) -> Result<()> {
        let (Some(anchor), Some(log)) = (&self.cfg.receipts.anchor_file, &self.receipts) else {
            return Ok(());
        };
        if self.receipts_head.borrow().is_none() {
            return Ok(());
        }
        let (count, head) = log.head()?;
        crate::receipts::append_anchor(anchor, count, &head)
    }

    /// Tools the model is told about: implemented and enabled on the channel.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        tools::ToolName::ALL
            .into_iter()
            .filter(|t| self.cfg.channels.cli.tools_allow.contains(t))
            .map(|name| name.tool())
            .map(|t| ToolSpec {
                name: t.name().as_str().into(),
                description: t.description().into(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// The system prompt (see `prompt.rs`): the same bytes every turn.
    pub fn system_prompt(&self) -> Result<String> {
        crate::prompt::build(self.cfg, &self.gate)
    }

    /// A round's calls as memory stores them: arguments redacted, so a
    /// secret the model saw and passes on (to `memory_store`, say) is not
    /// kept in the history; ids and names stay, they pair the results.
    fn stored_calls(&self, calls: &[crate::providers::ToolCall]) -> String {
        let mut counts = Default::default();
        let calls: Vec<crate::providers::ToolCall> = calls
            .iter()
            .cloned()
            .map(|mut c| {
                self.redactor.redact_json(&mut c.arguments, &mut counts);
                c
            })
            .collect();
        serde_json::to_string(&calls).unwrap_or_default()
    }

    /// Memory notes for a message (see `prompt::memory_notes`).
    pub fn memory_notes(
        &self,
        message: &str,
        conversation: Option<&str>,
    ) -> Result<Option<String>> {
        crate::prompt::memory_notes(self.cfg, &self.memory, message, conversation)
    }

    /// Gate → approval → started receipt → tool → outcome receipt. Denials
    /// and failures are results the model can read; only a receipt that
    /// cannot be written is an error.
    pub fn execute_tool(
        &self,
        conversation_id: &str,
        name: &str,
        args: &Value,
    ) -> Result<(CallRecord, ToolResult)> {
        log::info!(target: "event::tool_requested", "conversation={conversation_id} tool={name}");
        let Some(tool_name) = tools::ToolName::parse(name) else {
            let offered: Vec<&str> = self
                .cfg
                .channels
                .cli
                .tools_allow
                .iter()
                .map(|t| t.as_str())
                .collect();
            let e = format!(
                "unknown tool \"{name}\"; the tools on this channel: {}",
                offered.join(", ")
            );
            return self.invalid_call(conversation_id, name, args, e);
        };
        if let Some(e) = crate::features::tool_not_built(tool_name) {
            return self.invalid_call(conversation_id, name, args, e);
        }
        let tool = tool_name.tool();
        if let Err(e) = tools::check_args(tool, args) {
            return self.invalid_call(
                conversation_id,
                name,
                args,
                format!("invalid arguments: {e}"),
            );
        }
        // One call at a time among the processes sharing this state
        // directory, from its decision to its last receipt: another
        // latchclaw (an overlapping cron run, a second session) cannot
        // change the files between what the gate judged and what runs.
        // A call that is denied needs no lock (an unusable state dir is then
        // still an estop denial); one that would run does not run without it.
        let lock = RefCell::new(Some(tool_lock(self.cfg, &self.control)));
        let d = self.gate.decide(tool_name, args);
        let calls = CallLog {
            memory: &self.memory,
            in_run: &self.calls_in_run,
        };
        // A call over its rate limit is refused before the operator is
        // asked about it; it is counted only when it runs (in `run`).
        let d = match d.verdict {
            Verdict::Ask => match self.gate.rate_limited(tool_name, &calls, false)? {
                Some(why) => Decision {
                    verdict: Verdict::Deny,
                    reason: why,
                    ..d
                },
                None => d,
            },
            _ => d,
        };
        let rate_refusal = RefCell::new(None);
        let mut reason = d.reason.clone();
        let mut pending = None;
        let mut started_id = None;
        let mut run = |status: Status, reason: &str| -> Result<(Status, ToolResult)> {
            // The lock was let go while the operator was asked: take it
            // again and decide again, since the files may have changed.
            let relocked = lock.borrow().is_none();
            if relocked {
                *lock.borrow_mut() = Some(tool_lock(self.cfg, &self.control));
            }
            if let Some(Err(e)) = &*lock.borrow() {
                return Err(Error::new(Kind::Runtime, e.to_string()));
            }
            let fresh;
            let d = if relocked {
                fresh = self.gate.decide(tool_name, args);
                if fresh.verdict == Verdict::Deny || fresh.risk > d.risk {
                    return Ok((
                        Status::Denied,
                        ToolResult::err(format!(
                            "denied by policy: the files changed while the operator was asked: {}",
                            fresh.reason
                        )),
                    ));
                }
                &fresh
            } else {
                &d
            };
            if let Some(why) = self.gate.rate_limited(tool_name, &calls, true)? {
                let result = ToolResult::err(format!("denied by policy: {why}"));
                *rate_refusal.borrow_mut() = Some(why);
                return Ok((Status::Denied, result));
            }
            // The started receipt is on disk before the tool can take effect,
            // so a call cut off by a kill or a crash still has a receipt; a
            // tool whose receipt cannot be written does not run. A tool that
            // changes nothing gets its one receipt afterwards.
            if tool.takes_effect() {
                started_id = self.append_receipt(&NewReceipt {
                    conversation_id,
                    tool: name,
                    args,
                    result: None,
                    status: Status::Started,
                    risk: d.risk,
                    reason,
                    started_id: None,
                })?;
            } else if let Some(log) = &self.receipts {
                log.check_appendable()?;
            }
            // `tool_timeout_secs` (or the tool's own `timeout_secs`) bounds
            // every call; a tool's own timeout (shell, http) and the run's
            // `--timeout` can only cut it shorter.
            let limit = std::time::Duration::from_secs(
                self.cfg
                    .tools
                    .of(tool_name)
                    .timeout_secs
                    .unwrap_or(self.cfg.tool_timeout_secs),
            );
            let ctx = ToolCtx {
                cfg: self.cfg,
                gate: &self.gate,
                memory: &self.memory,
                conversation_id,
                decision: d,
                control: &self.control,
                deadline: self.control.until(limit),
                user: self.approver,
            };
            // A question touches no file: nobody else's call waits while
            // the user thinks.
            if tool_name == tools::ToolName::AskUser {
                lock.borrow_mut().take();
            }
            let mut result = tool.invoke(args, &ctx);
            // Before the model, the receipts, memory or a log line sees it.
            let redacted = self.redactor.redact_result(&mut result);
            if !redacted.is_empty() {
                log::info!(
                    target: "event::tool_redacted",
                    "tool={name} redacted={} ({})",
                    redacted.total(),
                    redacted.summary()
                );
            }
            if result.success {
                log::info!(target: "event::tool_completed", "tool={name}");
                Ok((status, result))
            } else {
                log::info!(target: "event::tool_failed", "tool={name} error={}", result.error.as_deref().unwrap_or(""));
                Ok((Status::Failed, result))
            }
        };
        // Nobody else's call waits on this one's operator.
        let ask_operator = || {
            lock.borrow_mut().take();
            self.approver.ask(name, &d, args, &self.control)
        };
        let (status, result) = match d.verdict {
            Verdict::Allow => {
                let ran = run(Status::Allowed, &reason)?;
                // Nobody was asked, so say it happened: a write under `full`
                // leaves a line on stderr (cron mails it, a terminal shows it).
                if ran.0 == Status::Allowed
                    && tool_name == tools::ToolName::FileWrite
                    && self.gate.autonomy() == crate::config::Autonomy::Full
                {
                    log::warn!(
                        target: "event::wrote_without_asking",
                        "file_write {} ran without asking (autonomy full)",
                        summarize_args(args)
                    );
                }
                ran
            }
            Verdict::Ask => match self.memory.take_approved(conversation_id, name, args)? {
                Some(id) => {
                    log::info!(target: "event::tool_approved", "tool={name} approval={id}");
                    reason = format!("{reason}; approved by the operator ({id})");
                    run(Status::Approved, &reason)?
                }
                None => match ask_operator() {
                    Approval::Approved => {
                        log::info!(target: "event::tool_approved", "tool={name}");
                        reason = format!("{reason}; approved by the operator");
                        run(Status::Approved, &reason)?
                    }
                    Approval::Denied(why) => {
                        reason = format!("{reason}; {why}");
                        (Status::Denied, ToolResult::err(format!("denied: {reason}")))
                    }
                    Approval::Unavailable(why) => {
                        let id = self.memory.add_pending(
                            conversation_id,
                            name,
                            args,
                            d.risk,
                            &d.reason,
                        )?;
                        let then = match &self.rerun {
                            Some(cmd) => format!("run `{cmd}` again"),
                            None => format!("`latchclaw agent --resume {conversation_id}`"),
                        };
                        // The model is not shown the operator's commands:
                        // given them, a 1.5B model tried to run them with
                        // the shell tool.
                        let for_model = format!(
                            "not run: it waits for the operator's approval ({}; {why}); \
                             nothing happened yet. Tell the user it is waiting for approval; \
                             do not try to approve or run it another way.",
                            d.reason
                        );
                        reason = format!(
                            "{reason}; {why}; waiting as pending approval {id} \
                             (`latchclaw approve {id}`, then {then})"
                        );
                        pending = Some(id);
                        (Status::Denied, ToolResult::err(for_model))
                    }
                },
            },
            Verdict::Deny => (
                Status::Denied,
                ToolResult::err(format!("denied by policy: {reason}")),
            ),
        };
        if let Some(why) = rate_refusal.take() {
            reason = why;
        }
        // A call that ran and failed is reported by its error: the gate's
        // reason ("low risk under supervised") says why it was let run, not
        // what went wrong. The started receipt keeps the gate's reason.
        if status == Status::Failed {
            reason = format!(
                "failed: {}",
                result
                    .error
                    .as_deref()
                    .unwrap_or("the tool reported a failure")
            );
        }
        if status == Status::Denied {
            let line = format!("tool={name} risk={} reason={reason}", d.risk.as_str());
            if self.cfg.security.audit_log {
                log::warn!(target: "event::tool_denied", "{line}");
            } else {
                log::info!(target: "event::tool_denied", "{line}");
            }
        }
        let outcome = CallEnd {
            status,
            risk: d.risk,
            reason,
            started_id,
            pending,
            estop: d.estop || result.estop,
        };
        self.record_outcome(conversation_id, name, args, outcome, result)
    }

    /// The outcome receipt of a call (naming its started one, if any) and
    /// the record the user sees; the result carries the receipt's id.
    fn record_outcome(
        &self,
        conversation_id: &str,
        name: &str,
        args: &Value,
        mut o: CallEnd,
        mut result: ToolResult,
    ) -> Result<(CallRecord, ToolResult)> {
        // Denials and made-up errors quote arguments and gate reasons: short
        // texts, scrubbed here too (a tool's own output already was).
        if let Some(e) = &mut result.error {
            *e = self.redactor.redact(e).into_owned();
        }
        o.reason = self.redactor.redact(&o.reason).into_owned();
        // The receipt says that output was redacted, and of what kind; the
        // counts are also in the result it hashes.
        if let Some(kinds) = result
            .metadata
            .as_ref()
            .and_then(|m| m.get("redacted"))
            .and_then(Value::as_object)
        {
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            o.reason = format!("{}; output redacted: {}", o.reason, kinds.join(", "));
        }
        let result_value = serde_json::to_value(&result).unwrap_or(Value::Null);
        let receipt_id = self.append_receipt(&NewReceipt {
            conversation_id,
            tool: name,
            args,
            result: Some(&result_value),
            status: o.status,
            risk: o.risk,
            reason: &o.reason,
            started_id: o.started_id.as_deref(),
        })?;
        result.receipt_id = receipt_id.clone();
        Ok((
            CallRecord {
                tool: name.to_string(),
                arguments: args.clone(),
                status: o.status,
                risk: o.risk,
                reason: o.reason,
                receipt_id,
                started_receipt_id: o.started_id,
                pending_approval: o.pending,
                estop: o.estop,
            },
            result,
        ))
    }

    /// A call whose arguments do not fit its tool's schema: not judged, not
    /// run; the model reads what to fix, and the receipt records the attempt.
    fn invalid_call(
        &self,
        conversation_id: &str,
        name: &str,
        args: &Value,
        error: String,
    ) -> Result<(CallRecord, ToolResult)> {
        log::info!(target: "event::tool_failed", "tool={name} error={error}");
        let reason = error;
        let result = ToolResult::err(reason.clone());
        let outcome = CallEnd {
            status: Status::Failed,
            risk: Risk::Low,
            reason,
            started_id: None,
            pending: None,
            estop: false,
        };
        self.record_outcome(conversation_id, name, args, outcome, result)
    }

    /// Appends a receipt when receipts are on; returns its id.
    fn append_receipt(&self, r: &NewReceipt) -> Result<Option<String>> {
        let Some(log) = &self.receipts else {
            return Ok(None);
        };
        let written = log.append(r)?;
        *self.receipts_head.borrow_mut() = Some(written.receipt_hash);
        Ok(Some(written.id))
    }

    /// Earlier turns of a conversation as provider messages, every call
    /// with its result and no result without its call (`memory::paired`).
    fn history(&self, conversation_id: &str) -> Result<Vec<Message>> {
        let turns = self
            .memory
            .history(conversation_id, self.cfg.memory.context_turns)?;
        let mut out: Vec<Message> = Vec::new();
        for t in turns {
            let role = match t.role {
                TurnRole::User => Role::User,
                TurnRole::Assistant => Role::Assistant,
                TurnRole::Tool => Role::Tool,
                // latchclaw's own words are never the model's.
                TurnRole::System => continue,
            };
            let tool_calls: Vec<ToolCall> = t
                .tool_calls
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            let tool_call_id = t
                .metadata
                .as_ref()
                .and_then(|m| m.get("tool_call_id"))
                .and_then(Value::as_str)
                .map(String::from);
            out.push(Message {
                tool_calls,
                tool_call_id,
                ..Message::new(role, t.content)
            });
        }
        Ok(out)
    }

    /// The slot of the round being run.
    fn round_slot(&self) -> std::cell::RefMut<'_, Option<Round>> {
        self.round.borrow_mut()
    }

    /// Stores the round being run, its calls without a result answered by
    /// `missing`.
    fn store_round(&self, missing: &str) -> Result<()> {
        let taken = self.round_slot().take();
        match taken {
            Some(round) => self.memory.add_round(&round, missing).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Persists the final answer and reports the turn. Latchclaw's own
    /// words (a limit, a cancel) are stored as a `system` turn: never sent
    /// back to the model as if it had said them, never a memory note.
    fn finish(
        &self,
        conversation_id: String,
        answer: String,
        (provider, model): (String, String),
        metadata: Option<String>,
        exit_reason: Outcome,
        (tool_calls, usage, rounds, started): (Vec<CallRecord>, Usage, u32, Instant),
    ) -> Result<TurnOutcome> {
        self.memory.add_turn(&NewTurn {
            conversation_id: &conversation_id,
            role: if exit_reason == Outcome::Completed {
                TurnRole::Assistant
            } else {
                TurnRole::System
            },
            content: &answer,
            provider: Some(&provider),
            model: Some(&model),
            metadata,
            ..Default::default()
        })?;
        Ok(TurnOutcome {
            conversation_id,
            answer,
            provider,
            model,
            tool_calls,
            rounds,
            exit_reason,
            usage,
            duration_ms: started.elapsed().as_millis(),
            receipts_head: self.receipts_head.borrow().clone(),
        })
    }

    /// A provider call cut mid-answer. Its partial answer is kept as the
    /// turn's assistant message, marked `"cut": true`. Cut by the run's
    /// deadline or Ctrl-C, the turn ends as a timeout or cancel does;
    /// otherwise (the server closed or failed mid-stream) it is a provider
    /// error.
    fn cut(
        &self,
        conv: String,
        e: crate::providers::ProviderError,
        partial: String,
        round: u32,
        (calls, usage, started): (Vec<CallRecord>, Usage, Instant),
    ) -> Result<TurnOutcome> {
        let meta = json!({"answered_by": e.provider, "round": round, "cut": true,
                          "error": e.message})
        .to_string();
        let model = self
            .cfg
            .provider(&e.provider)
            .map_or_else(|_| self.cfg.default_model.clone(), |p| p.model.clone());
        if let Some(stop) = self.control.stop() {
            let (note, reason) = stopped(&self.control, stop);
            let answer = if partial.is_empty() {
                note.to_string()
            } else {
                format!("{partial}\n[{note}]")
            };
            log::warn!(target: "event::provider_cut", "{e}");
            return self.finish(
                conv,
                answer,
                (e.provider.clone(), model),
                Some(meta),
                reason,
                (calls, usage, round, started),
            );
        }
        PROVIDER_ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        log::error!(target: "event::provider_error", "{e}");
        self.memory.add_turn(&NewTurn {
            conversation_id: &conv,
            role: TurnRole::Assistant,
            content: &partial,
            provider: Some(&e.provider),
            model: Some(&model),
            metadata: Some(meta),
            ..Default::default()
        })?;
        Err(Error::new(
            Kind::Runtime,
            format!(
                "{e}; the partial answer ({} chars) is saved in conversation {conv}, marked cut",
                partial.chars().count()
            ),
        ))
    }

    /// One user turn: provider ↔ tools until a text answer or the round
    /// limit, telling `progress` what happens as it happens.
    pub fn agent_turn_with(
        &self,
        provider: &dyn Provider,
        conversation_id: Option<&str>,
        message: &str,
        progress: &dyn Progress,
    ) -> Result<TurnOutcome> {
        let started = Instant::now();
        // A new conversation has no history to read (one statement less to
        // compile on every one-shot run).
        let (conv, mut messages) = match conversation_id {
            Some(id) => {
                if !self.memory.conversation_exists(id)? {
                    return Err(Error::usage(format!(
                        "no conversation \"{id}\"; `latchclaw memory list` shows them"
                    )));
                }
                (id.to_string(), self.history(id)?)
            }
            None => {
                let id = crate::util::new_id("conv");
                log::info!(target: "event::conversation_started", "conversation={id}");
                (id, Vec::new())
            }
        };
        *self.conversation.borrow_mut() = Some(conv.clone());
        let configured = self.cfg.provider(provider.name()).ok();
        let model = configured.map_or_else(|| self.cfg.default_model.clone(), |p| p.model.clone());
        self.memory.add_turn(&NewTurn {
            conversation_id: &conv,
            role: TurnRole::User,
            content: message,
            provider: Some(provider.name()),
            model: Some(&model),
            ..Default::default()
        })?;
        // Calls the operator approved since the last turn are named to the
        // model exactly, so it repeats them as they were (on a bare
        // "continue" a 1.5B model did not).
        if conversation_id.is_some() {
            let approved: Vec<String> = self
                .memory
                .approved_unused(&conv)?
                .into_iter()
                .map(|p| json!({"name": p.tool, "arguments": p.arguments}).to_string())
                .collect();
            if !approved.is_empty() {
                messages.push(Message::runtime(format!(
                    "[latchclaw: the operator approved {}: {}. Call {} again exactly as written \
                     to run {}.]",
                    if approved.len() == 1 {
                        "this call"
                    } else {
                        "these calls"
                    },
                    approved.join(", "),
                    if approved.len() == 1 { "it" } else { "each" },
                    if approved.len() == 1 { "it" } else { "them" },
                )));
            }
        }
        messages.push(Message {
            notes: self.memory_notes(message, Some(&conv))?,
            ..Message::new(Role::User, message)
        });
        let tools = self.tool_specs();
        let mut req = ChatRequest {
            system_prompt: self.system_prompt()?,
            messages,
            tools,
            model: model.clone(),
            temperature: configured.and_then(|p| p.temperature()),
            metadata: self
                .hint
                .iter()
                .map(|h| ("hint".to_string(), h.clone()))
                .collect(),
        };
        let max_rounds = self.cfg.max_tool_rounds;
        let mut calls = Vec::new();
        let mut usage = Usage::default();
        let mut rounds = 0;
        // The last call that ran: (name, arguments, what the model got back).
        // The last call made: (name, arguments, what the model got back,
        // how it ended: "ok", "refused" or "failed").
        let mut last_call: Option<(String, Value, String, &str)> = None;
        // What the model got back in the last round, for a turn that stops.
        let mut last_results: Vec<(String, String)> = Vec::new();
        let mut asked_plain = false;
        let mut asked_last = false;
        loop {
            if let Some(stop) = self.control.stop() {
                let (answer, reason) = stopped(&self.control, stop);
                let who = (provider.name().to_string(), model);
                return self.finish(
                    conv,
                    answer,
                    who,
                    None,
                    reason,
                    (calls, usage, rounds, started),
                );
            }
            // The last request: tools will not run after it, and small
            // models answer when told so instead of asking again.
            if rounds == max_rounds && rounds > 0 && !last_results.is_empty() && !asked_last {
                asked_last = true;
                req.messages.push(Message::runtime(LAST_ROUND));
                // No tools on offer either: with them, a 0.5B model called
                // one more tool even when told that none would run.
                req.tools.clear();
            }
            progress.round_start(rounds);
            let mut sink = RoundSink {
                visible: Visible::new(&req.tools),
                shown: String::new(),
                progress,
                control: &self.control,
            };
            let answered = provider.chat_streaming(&req, &mut sink);
            let resp = match answered {
                Ok(r) => r,
                Err(e) if e.kind == ProviderErrorKind::StreamCut => {
                    return self.cut(conv, e, sink.shown, rounds, (calls, usage, started));
                }
                Err(e) => {
                    // The error itself is returned and printed once by main;
                    // the event is for the log (LATCHCLAW_LOG_LEVEL=info).
                    PROVIDER_ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    log::info!(target: "event::provider_error", "{e}");
                    return Err(Error::new(Kind::Runtime, e.to_string()));
                }
            };
            if let Some(u) = &resp.usage {
                usage.add(u);
                self.run_usage.borrow_mut().add(u);
            }
            let meta = json!({"answered_by": resp.provider, "round": rounds,
                              "finish_reason": resp.finish_reason})
            .to_string();
            if resp.tool_calls.is_empty() {
                let who = (resp.provider, resp.model);
                // An empty reply after tools ran (a 1.5B model stopped at
                // once after its write): asked once for the answer, then the
                // user gets what the tools returned rather than nothing.
                if resp.final_text.trim().is_empty() && !last_results.is_empty() {
                    if !asked_plain {
                        asked_plain = true;
                        req.messages.push(Message::new(Role::Assistant, ""));
                        req.messages.push(Message::runtime(NO_ANSWER));
                        continue;
                    }
                    let answer = stopped_text("the model gave no answer", &last_results);
                    return self.finish(
                        conv,
                        answer,
                        who,
                        Some(meta),
                        Outcome::NoAnswer,
                        (calls, usage, rounds, started),
                    );
                }
                if !looks_like_tool_text(&resp.final_text, &req.tools) {
                    return self.finish(
                        conv,
                        resp.final_text,
                        who,
                        Some(meta),
                        Outcome::Completed,
                        (calls, usage, rounds, started),
                    );
                }
                // Tool-call or tool-result markup that is not a call latchclaw
                // reads (an invented result, a half-written call) is never
                // the answer: the model is asked once for plain text.
                log::warn!(target: "event::unusable_reply", "the reply holds tool-call text that is not a call");
                if !asked_plain {
                    asked_plain = true;
                    req.messages
                        .push(Message::new(Role::Assistant, resp.final_text.clone()));
                    req.messages.push(Message::runtime(PLAIN_TEXT));
                    continue;
                }
                let answer = stopped_text(
                    "stopped: the model answered with tool-call text that latchclaw could not run",
                    &last_results,
                );
                return self.finish(
                    conv,
                    answer,
                    who,
                    Some(meta),
                    Outcome::UnusableReply,
                    (calls, usage, rounds, started),
                );
            }
            if rounds >= max_rounds {
                let answer = stopped_text(
                    &format!(
                        "stopped after {max_rounds} tool rounds (max_tool_rounds): the model \
                         asked for more tools instead of answering"
                    ),
                    &last_results,
                );
                let who = (resp.provider, resp.model);
                return self.finish(
                    conv,
                    answer,
                    who,
                    Some(meta),
                    Outcome::MaxToolRounds,
                    (calls, usage, rounds, started),
                );
            }
            last_results.clear();
            rounds += 1;
            *self.round_slot() = Some(Round {
                conversation_id: conv.clone(),
                content: resp.final_text.clone(),
                tool_calls: self.stored_calls(&resp.tool_calls),
                call_ids: resp.tool_calls.iter().map(|c| c.id.clone()).collect(),
                provider: resp.provider.clone(),
                model: resp.model.clone(),
                metadata: meta,
                results: Vec::new(),
            });
            req.messages.push(Message {
                tool_calls: resp.tool_calls.clone(),
                ..Message::new(Role::Assistant, resp.final_text.clone())
            });
            let mut failed = None;
            let mut repeated = None;
            for call in &resp.tool_calls {
                let call_started = Instant::now();
                progress.tool_start(&call.name, &summarize_args(&call.arguments));
                let repeat = last_call.as_ref().filter(|(name, args, _, ended)| {
                    // A tool that takes no arguments, called again after
                    // it worked, is the same call whatever a model makes
                    // up for them (a 0.5B model passed the last time).
                    *name == call.name
                        && (*args == call.arguments || *ended == "ok" && takes_nothing(name))
                });
                // A cancelled call is not attempted, so it gets no receipt;
                // the history still gets a result for every call made.
                let (content, tool_results, meta) = if let Some((_, _, earlier, refused)) = repeat {
                    // Small models repeat a call after its result; running it
                    // again would loop until the round limit. They answer
                    // when a user-role line tells them to use what they have
                    // (measured with Qwen2.5-Coder-1.5B: the same words inside
                    // the tool result were ignored).
                    repeated = Some((call.name.clone(), *refused));
                    let status = json!({"tool_call_id": call.id, "status": "repeated"});
                    (earlier.clone(), None, status)
                } else if let Some(stop) = self.control.stop() {
                    // Past the deadline or a cancel nothing more starts.
                    let status = json!({"tool_call_id": call.id, "status": "cancelled"});
                    let text = match stop {
                        Stop::Cancelled => "error: not run: the turn was cancelled by the operator",
                        Stop::Timeout => {
                            "no result: not run, the run was stopped (--timeout) before it started"
                        }
                    };
                    (text.to_string(), None, status)
                } else {
                    match self.execute_tool(&conv, &call.name, &call.arguments) {
                        Ok((record, result)) => {
                            let meta = json!({"tool_call_id": call.id, "status": record.status,
                                              "receipt_id": record.receipt_id});
                            // Repeated as it is, a refused call is refused again
                            // (asking again would queue another approval) and a
                            // failed one fails again: small models loop on both.
                            let ended = match record.status {
                                Status::Denied => "refused",
                                Status::Failed => "failed",
                                _ => "ok",
                            };
                            calls.push(record);
                            let results =
                                json!([{"tool": call.name, "result": result}]).to_string();
                            let content = result.for_model();
                            let args = call.arguments.clone();
                            last_call = Some((call.name.clone(), args, content.clone(), ended));
                            (content, Some(results), meta)
                        }
                        Err(e) => {
                            let ms = call_started.elapsed().as_millis();
                            progress.tool_end(&call.name, "failed", ms);
                            // The error goes to the operator; the model,
                            // should the conversation go on, reads that the
                            // call has no result (not the operator's
                            // commands, which a small model tries to run).
                            if let Some(round) = self.round_slot().as_mut() {
                                round.results.push(RoundResult {
                                    call_id: call.id.clone(),
                                    content: CALL_ERROR.into(),
                                    tool_results: None,
                                    metadata: json!({"tool_call_id": call.id, "status": "failed",
                                                     "error": e.msg})
                                    .to_string(),
                                });
                            }
                            failed = Some(e);
                            break;
                        }
                    }
                };
                let status = meta["status"].as_str().unwrap_or("");
                progress.tool_end(&call.name, status, call_started.elapsed().as_millis());
                req.messages.push(Message {
                    tool_call_id: Some(call.id.clone()),
                    ..Message::new(Role::Tool, content.clone())
                });
                last_results.push((call.name.clone(), content.clone()));
                if let Some(round) = self.round_slot().as_mut() {
                    round.results.push(RoundResult {
                        call_id: call.id.clone(),
                        content,
                        tool_results,
                        metadata: meta.to_string(),
                    });
                }
            }
            if let Some((name, ended)) = repeated {
                req.messages.push(Message::runtime(if ended == "refused" {
                    format!(
                        "[latchclaw: you called {name} again with the same arguments; it was \
                         refused before, so it was not tried again. Do not retry it. Answer the \
                         user now, in plain text, and say it was refused and why.]"
                    )
                } else if ended == "failed" {
                    format!(
                        "[latchclaw: you called {name} again with the same arguments; it failed \
                         before (the error is above), so it was not run again. Call it with \
                         different arguments, or answer the user now in plain text.]"
                    )
                } else {
                    format!(
                        "[latchclaw: you called {name} again with the same arguments; it was not \
                         run again and its result is above. Answer the user now, in plain text, \
                         from that result.]"
                    )
                }));
            }
            // The round is one transaction (see `Memory::add_round`), written
            // before the next provider call, and also when a call failed:
            // the calls after it are answered as not run.
            self.store_round(AFTER_ERROR)?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
}

/// Whether a tool takes no arguments at all (`time`).
fn takes_nothing(name: &str) -> bool {
    tools::find(name).is_some_and(|t| {
        t.parameters()["properties"]
            .as_object()
            .is_none_or(|p| p.is_empty())
    })
}

/// A call's result when latchclaw failed on it (a receipt that could not
/// be written, a lock that could not be taken).
const CALL_ERROR: &str = "no result: the run stopped on an error before this call's result was \
recorded; it may or may not have taken effect";

/// The result of the calls after one latchclaw failed on.
const AFTER_ERROR: &str = "no result: not run, the run stopped on an error at an earlier call";

/// The last request of a turn, sent when the round limit is reached.
const LAST_ROUND: &str = "[latchclaw: tools will not run again in this turn. Answer the user now, \
in plain text, from the tool results above.]";

/// Sent once when a reply after tool results is empty.
const NO_ANSWER: &str = "[latchclaw: your reply was empty. Answer the user now, in plain text, \
from the tool results above.]";

/// Sent once when a reply holds tool-call text that is not a call.
const PLAIN_TEXT: &str = "[latchclaw: your reply holds tool-call or tool-result markup, which \
was not run and is not shown to the user. Call a tool properly if you need one; otherwise \
answer the user in plain text.]";

/// How much of the last results a stopped turn shows the user.
const STOPPED_RESULTS_BYTES: usize = 4000;

/// A stopped turn's answer: why, then what the last round's tools returned
/// (the user still gets what was found).
fn stopped_text(why: &str, last_results: &[(String, String)]) -> String {
    let mut out = why.to_string();
    if !last_results.is_empty() {
        out.push_str(". The last tool results:");
        let each = STOPPED_RESULTS_BYTES / last_results.len();
        for (tool, content) in last_results {
            out.push_str(&format!(
                "\n\n[{tool}]\n{}",
                crate::util::truncate_middle(content, each)
            ));
        }
    }
    out
}

/// Text that only looks like a tool call or a tool result: markup the
/// models write (`<tool_call>`, `<tool_result>`, `<function=…>`, a
/// ```` ```tool_call ```` fence, a chat template's own tokens, latchclaw's
/// own requests echoed back) or a JSON
/// object naming one of the tools. Printed with exit 0 it would pass for
/// an answer.
pub fn looks_like_tool_text(text: &str, tools: &[ToolSpec]) -> bool {
    // Besides what opens a call: closing tags, a chat template's own
    // tokens, and `[latchclaw:`, our own request echoed back (seen from a
    // 1.5B model).
    const MORE: [&str; 4] = [
        "</tool_call",
        "</tool_result",
        "<|im_start|>",
        "[latchclaw:",
    ];
    let lower = text.to_ascii_lowercase();
    let opens = crate::providers::textcalls::CALL_OPENERS.iter();
    if opens.chain(MORE.iter()).any(|m| lower.contains(m)) {
        return true;
    }
    // `{"name": "time", …}` and the `{"tool": …}` spelling, any spacing.
    let squeezed: String = lower.chars().filter(|c| !c.is_whitespace()).collect();
    let named = tools.iter().any(|t| {
        let name = t.name.to_ascii_lowercase();
        ["name", "tool", "function"]
            .iter()
            .any(|k| squeezed.contains(&format!("\"{k}\":\"{name}\"")))
    });
    // A reply that is only arguments (`{"path": "."}`, fenced or not) whose
    // keys are all some tool's parameters: a call with its name left out.
    let body = text.trim();
    let body = body
        .strip_prefix("```")
        .map(|b| b.trim_start_matches(|c: char| c.is_ascii_alphabetic()))
        .and_then(|b| b.trim_end().strip_suffix("```"))
        .unwrap_or(body);
    let bare_arguments = serde_json::from_str::<Value>(body.trim())
        .ok()
        .and_then(|v| v.as_object().cloned())
        .is_some_and(|o| {
            let has = |keys: &[&str]| keys.iter().any(|k| o.contains_key(*k));
            // A call naming something that is not a tool (a 0.5B model
            // named the file it meant to write).
            let call_shaped =
                has(&["name", "tool", "function"]) && has(&["arguments", "parameters", "params"]);
            call_shaped
                || !o.is_empty()
                    && tools.iter().any(|t| {
                        let props = t.parameters["properties"].as_object();
                        o.keys().all(|k| props.is_some_and(|p| p.contains_key(k)))
                    })
        });
    named || bare_arguments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(names: &[&str]) -> Vec<ToolSpec> {
        names
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: String::new(),
                parameters: json!({"properties": {"path": {}}}),
            })
            .collect()
    }

    #[test]
    fn tool_text_is_recognised_and_prose_is_not() {
        let tools = specs(&["time", "file_list"]);
        for t in [
            "<tool_result>12:00</tool_result> It is noon.",
            "</TOOL_CALL>",
            "<function=time>{}</function>",
            "<|im_start|>assistant",
            "[latchclaw: tools will not run again in this turn.]",
            "Here: { \"name\" : \"time\", \"arguments\": {} }",
            "{\"tool\": \"file_list\"}",
            "```json\n{\"path\": \".\"}\n```",
            "```json\n{\"name\": \"greeting.txt\", \"arguments\": {\"content\": \"hi\"}}\n```",
            " {\"path\": \"a\"} ",
        ] {
            assert!(looks_like_tool_text(t, &tools), "{t}");
        }
        for t in [
            "It is noon.",
            "{\"name\": \"Ada\", \"age\": 3}",
            "```json\n{\"age\": 3}\n```",
            "Use {\"path\": \".\"} next time.",
            "The time tool says 12:00; file_list shows a.txt.",
            "",
        ] {
            assert!(!looks_like_tool_text(t, &tools), "{t}");
        }
        let mut rng = fastrand::Rng::with_seed(9);
        for _ in 0..5_000 {
            let t = crate::util::arbitrary::text(&mut rng, &["<tool", "\"name\":", "time"], 12);
            let _ = looks_like_tool_text(&t, &tools);
        }
    }

    #[test]
    fn a_stopped_turn_shows_the_last_results_within_bounds() {
        let big = "x".repeat(10_000);
        let text = stopped_text(
            "stopped",
            &[
                ("shell".into(), big.clone()),
                ("time".into(), "noon".into()),
            ],
        );
        assert!(text.starts_with("stopped. The last tool results:"));
        assert!(text.contains("[shell]") && text.contains("[time]\nnoon"));
        assert!(text.len() < STOPPED_RESULTS_BYTES + 200, "{}", text.len());
        assert_eq!(stopped_text("stopped", &[]), "stopped");
    }
}
