//! `ask_user`: the model puts a question to the person at the terminal.
//! The terminal itself is the channel's (`cli::approve`, where the approval
//! prompt asks too); the tool reaches it through [`super::User`], and with no one
//! there it answers at once instead of waiting.

use super::tool::{Reply, Tool, ToolCtx, ToolResult};
use crate::types::ToolName;
use serde_json::{Value, json};

/// Longest question a model may ask.
pub use crate::types::args::{MAX_QUESTION_BYTES, question};

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
