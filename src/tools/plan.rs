//! `plan`: nested tasks run depth first as sub-conversations. Not
//! implemented yet: the name exists (configs, receipts, `tool list`), the
//! schema says what a call will carry, and every call is refused by the
//! gate (`security::Gate::decide`) and never offered to a model.

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::types::ToolName;
use serde_json::{Value, json};

pub use crate::types::args::PLAN_NOT_IMPLEMENTED as NOT_IMPLEMENTED;

pub struct Plan;

impl Tool for Plan {
    fn takes_effect(&self) -> bool {
        true
    }
    fn name(&self) -> ToolName {
        ToolName::Plan
    }
    fn description(&self) -> &'static str {
        "Break a task into nested subtasks run one by one (not implemented yet)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "tasks": {
                    "type": "array",
                    "description": "tasks: {title, purpose, instructions, evaluation, tools?, subtasks?}",
                    "items": {"type": "object"}
                }
            },
            "required": ["tasks"]
        })
    }
    fn invoke(&self, _args: &Value, _ctx: &ToolCtx) -> ToolResult {
        ToolResult::err(NOT_IMPLEMENTED)
    }
}
