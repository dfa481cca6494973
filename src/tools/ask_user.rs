//! `ask_user`: the model puts a question to the person at the terminal.
//! The terminal itself is the channel's (`cli::approve`, where the approval
//! prompt asks too); the tool reaches it through [`User`], and with no one
//! there it answers at once instead of waiting.

use super::{Tool, ToolCtx, ToolName, ToolResult};
use crate::control::RunControl;
use serde_json::{Value, json};
use std::time::Instant;

/// Longest question a model may ask.
pub use crate::types::args::{MAX_QUESTION_BYTES, question};

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

pub struct AskUser;

impl Tool for AskUser {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> ToolName {
        ToolName::AskUser
    }
    fn description(&self) -> &'static str {
        "Asks the user one question on their terminal and returns the answer. Only when you cannot go on without it."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"question": {"type": "string"}},
            "required": ["question"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let q = match question(args) {
            Ok(q) => q,
            Err(e) => return ToolResult::err(e),
        };
        // A model must not be able to move the cursor, retitle the terminal
        // or hide text: controls (but line ends) are shown as escapes.
        let shown = crate::util::for_terminal(q.trim());
        let answered = |output: String, answered: bool| ToolResult {
            metadata: Some(json!({"answered": answered})),
            ..ToolResult::ok(output)
        };
        match ctx.user.ask_user(&shown, ctx.control, ctx.deadline) {
            Reply::Answer(a) => answered(a, true),
            Reply::NoAnswer => answered(
                "user gave no answer (end of input): go on without it, or say in your reply what you need"
                    .into(),
                false,
            ),
            Reply::NoUser => answered(
                "no user present (no terminal to ask on): go on without an answer, or say in your \
                 reply what you need"
                    .into(),
                false,
            ),
            Reply::Stopped(why) => ToolResult::err(format!("no answer: {why}")),
            Reply::Failed(why) => ToolResult::err(why),
        }
    }
}
