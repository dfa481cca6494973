//! `git`: read-only git for code questions. The gate builds a fixed argv
//! from its arguments (`security::git::tool_args`, never a command string) and
//! judges that argv exactly as it judges `git …` typed into the shell tool — the option
//! table, the path and secret-file checks, the repository's config vetted
//! and every program-starting setting pinned off — and the shell's runner
//! runs the judged plan, confined, within the call's deadline.

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::types::ToolName;
use serde_json::{Value, json};

pub struct Git;

impl Tool for Git {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> ToolName {
        ToolName::Git
    }
    fn description(&self) -> &'static str {
        "Read-only git: status, log, diff, show (a file at ref), blame, branch."
    }
    fn parameters(&self) -> Value {
        // Terse on purpose: every request carries it (README: request budget).
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": ["status", "log", "diff", "show", "blame", "branch"]},
                "n": {"type": "integer"},
                "path": {"type": "string"},
                "since": {"type": "string", "description": "e.g. 2 weeks ago"},
                "author": {"type": "string"},
                "grep": {"type": "string"},
                "include_diff": {"type": "boolean"},
                "staged": {"type": "boolean"},
                "refs": {"type": "array", "items": {"type": "string"}, "description": "diff: 0-2 commits"},
                "ref": {"type": "string"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"}
            },
            "required": ["command"]
        })
    }
    fn defaults(&self) -> Value {
        json!({"n": 10, "include_diff": false, "staged": false, "ref": "HEAD"})
    }
    fn invoke(&self, _args: &Value, ctx: &ToolCtx) -> ToolResult {
        super::shell::run_judged_plan(ctx)
    }
}
