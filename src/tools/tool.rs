//! What every tool is and gets: the `Tool` trait, the `ToolCtx` a call
//! runs with (the gate's decision, the run's control, the `User` whom
//! `ask_user` asks) and the `ToolResult` it returns. A leaf of `tools`:
//! each tool and the table (`mod.rs`) use it.

use crate::config::Config;
use crate::control::RunControl;
use crate::memory::Memory;
use crate::security::redact::{Counts, Redactor};
use crate::security::{Decision, Gate};
use crate::types::ToolName;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::time::Instant;

pub struct ToolCtx<'a> {
    pub cfg: &'a Config,
    pub gate: &'a Gate,
    pub memory: &'a Memory,
    /// The conversation the call belongs to (a stored note records it).
    pub conversation_id: &'a str,
    /// The gate's decision: the resolved path or argv the tool must use.
    pub decision: &'a Decision,
    /// The run's deadline and cancellation: a tool that waits polls it.
    pub control: &'a crate::control::RunControl,
    /// When this call must end: `tool_timeout_secs` or the run's deadline,
    /// whichever comes first.
    pub deadline: std::time::Instant,
    /// Whom `ask_user` asks (the operator's terminal, or nobody).
    pub user: &'a dyn User,
    /// Who runs a tool a tool asks for (`code_run`'s `tool()`): the
    /// runtime, through the whole call path, or nobody.
    pub host: &'a dyn Host,
    /// Processes this call must leave alone: the snippet whose `tool()`
    /// call it is (the shell kills every other descendant of latchclaw).
    pub spare: &'a [i32],
}

impl ToolCtx<'_> {
    pub fn path(&self) -> Option<&Path> {
        self.decision.path.as_deref()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolResult {
    pub success: bool,
    pub output: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<String>,
    /// What the runtime measured of the call that made it (not the tool):
    /// in the outcome receipt, the stored round and `tool stats`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    /// The emergency stop ended the run.
    #[serde(skip)]
    pub estop: bool,
}

/// One call's duration, whether its result was cut, and its size in
/// tokens as a model would count them, roughly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Measured {
    pub duration_ms: u64,
    pub truncated: bool,
    pub tokens_est: u64,
    /// Answered from the run's result cache (`cache_ttl_secs`), not run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
}

impl Measured {
    /// As an outcome receipt's `measured` holds it.
    pub fn text(&self) -> String {
        format!(
            "duration_ms={} truncated={} tokens_est={}{}",
            self.duration_ms,
            self.truncated,
            self.tokens_est,
            if self.cached { " cached=true" } else { "" }
        )
    }
}

impl ToolResult {
    /// Notes what the runtime measured: `truncated` from the tool's own
    /// `metadata.truncated`; tokens at four bytes each (English text and
    /// code average three to four bytes a token in common tokenizers).
    pub fn measure(&mut self, duration: std::time::Duration) {
        let truncated = self
            .metadata
            .as_ref()
            .and_then(|m| m.get("truncated"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let bytes = self.output.len() + self.error.as_ref().map_or(0, String::len);
        self.measured = Some(Measured {
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            truncated,
            tokens_est: (bytes as u64).div_ceil(4),
            cached: false,
        });
    }

    /// A tool's result, before anything else sees it: output, error and
    /// metadata strings. What was replaced is counted into the metadata's
    /// `redacted` (`{"kind": n}`), which the outcome receipt hashes.
    pub fn redact(&mut self, redactor: &Redactor) -> Counts {
        let mut counts = Counts::default();
        redactor.redact_string(&mut self.output, &mut counts);
        if let Some(e) = &mut self.error {
            redactor.redact_string(e, &mut counts);
        }
        if let Some(m) = &mut self.metadata {
            redactor.redact_json(m, &mut counts);
        }
        if !counts.is_empty() {
            let redacted = counts.to_json();
            match &mut self.metadata {
                Some(Value::Object(m)) => {
                    m.insert("redacted".into(), redacted);
                }
                None => self.metadata = Some(serde_json::json!({"redacted": redacted})),
                Some(other) => {
                    let old = other.take();
                    *other = serde_json::json!({"value": old, "redacted": redacted});
                }
            }
        }
        counts
    }

    pub fn ok(output: String) -> ToolResult {
        ToolResult {
            success: true,
            output,
            error: None,
            metadata: None,
            receipt_id: None,
            measured: None,
            estop: false,
        }
    }
    pub fn err(error: impl Into<String>) -> ToolResult {
        ToolResult {
            success: false,
            output: String::new(),
            error: Some(error.into()),
            metadata: None,
            receipt_id: None,
            measured: None,
            estop: false,
        }
    }
    /// What the model reads as the tool message.
    pub fn for_model(&self) -> String {
        match &self.error {
            Some(e) if self.output.is_empty() => format!("error: {e}"),
            Some(e) => format!("error: {e}\n{}", self.output),
            None => self.output.clone(),
        }
    }
}

pub trait Tool: Sync {
    fn name(&self) -> ToolName;
    fn description(&self) -> &'static str;
    fn parameters(&self) -> Value;
    /// Each optional argument's default, `{"name": value}`: shown by `tool
    /// list --json`, never sent to a model (every request carries the
    /// schema; the defaults cost bytes and change nothing it does).
    fn defaults(&self) -> Value {
        Value::Object(Default::default())
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult;
    /// False for tools that change nothing and send nothing anywhere: cut
    /// off mid-call they leave no effect, so they need no `started` receipt
    /// (and its fsync) before they run.
    fn takes_effect(&self) -> bool {
        true
    }
}

/// What came back from the terminal.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Answer(String),
    /// End of input (Ctrl-D) instead of a line.
    NoAnswer,
    /// No terminal to ask on (cron, a pipe with no controlling terminal).
    NoUser,
    /// The call's deadline, the run's `--timeout` or Ctrl-C came first; why.
    Stopped(String),
    /// The terminal could not be written or read; why.
    Failed(String),
}

/// Someone a question can be put to. Only the runtime hands one to a tool.
pub trait User {
    /// Shows `question` (already safe to print) and waits for one line,
    /// until `deadline` or until `control` says the run stops.
    fn ask_user(&self, question: &str, control: &RunControl, deadline: Instant) -> Reply;
}

/// Nobody: every question is answered "no user present".
pub struct Nobody;

impl User for Nobody {
    fn ask_user(&self, _: &str, _: &RunControl, _: Instant) -> Reply {
        Reply::NoUser
    }
}

/// A tool call a tool makes on its caller's behalf, as it ended.
#[derive(Debug, Clone)]
pub struct HostCall {
    /// The outcome receipt's status: `allowed`, `approved`, `denied`, `failed`.
    pub status: String,
    /// Refused by the gate or the operator, or waiting for approval.
    pub denied: bool,
    pub result: ToolResult,
    /// The call's outcome receipt.
    pub receipt_id: Option<String>,
}

/// Runs a tool for another tool, exactly as the model's own calls run
/// (gate, approval, rate limits, receipts, redaction). Only the runtime
/// hands a real one to a tool.
pub trait Host {
    /// `running`: the caller's process, which the call must leave alone.
    fn call_tool(
        &self,
        conversation_id: &str,
        name: &str,
        args: &Value,
        running: i32,
    ) -> Result<HostCall, String>;

    /// Runs a `plan` call's tree (its arguments judged by the gate).
    fn plan(&self, conversation_id: &str, args: &Value) -> ToolResult {
        let _ = (conversation_id, args);
        ToolResult::err("a plan cannot run here: no model to run its tasks")
    }

    /// The run's background snippets (`code_run`'s `background`), if it
    /// keeps any.
    fn jobs(&self) -> Option<&crate::tools::code::jobs::Jobs> {
        None
    }

    /// The sandbox prepared for this call while its started receipt was
    /// written, if any (taken once).
    fn take_ahead(&self) -> Option<crate::security::confine::Ahead> {
        None
    }
}

/// No one to run a tool: every call is refused.
pub struct NoHost;

impl Host for NoHost {
    fn call_tool(&self, _: &str, name: &str, _: &Value, _: i32) -> Result<HostCall, String> {
        Err(format!("tool \"{name}\" cannot be called from here"))
    }
}
