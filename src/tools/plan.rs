//! `plan`: nested tasks run depth first as sub-conversations. The tool is
//! the call's edge: the gate judged the tree (`security::Gate::decide`),
//! and the runtime, through `ToolCtx::host`, runs it (`runtime/plan.rs`),
//! every call of every task through the same call path.

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::types::ToolName;
use serde_json::{Value, json};

pub struct Plan;

impl Tool for Plan {
    fn takes_effect(&self) -> bool {
        true
    }
    fn name(&self) -> ToolName {
        ToolName::Plan
    }
    fn description(&self) -> &'static str {
        "Break a task into nested subtasks, each run as its own conversation with only the tools \
         it names; a parent checks its subtasks' results against its evaluation. Returns each \
         task's state and result."
    }
    fn parameters(&self) -> Value {
        let task = json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "purpose": {"type": "string", "description": "why the task exists"},
                "instructions": {"type": "string", "description": "what to do"},
                "evaluation": {"type": "string", "description": "how its result is judged"},
                "tools": {"type": "array", "items": {"type": "string"},
                          "description": "the tools a leaf task may call"},
                "subtasks": {"type": "array", "items": {"type": "object"},
                             "description": "tasks of the same shape; none for a leaf"}
            },
            "required": ["title", "purpose", "instructions", "evaluation"]
        });
        json!({
            "type": "object",
            "properties": {
                "tasks": {"type": "array", "items": task}
            },
            "required": ["tasks"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        ctx.host.plan(ctx.conversation_id, args)
    }
}
