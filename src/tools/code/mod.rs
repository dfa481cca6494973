//! `code_run`: a Python or Node snippet the model writes, run in the one
//! sandbox (`security::confine`: its own namespaces, no network, the
//! environment cleared, the workspace read-only under `readonly`, a tmp of
//! the call's own), with a prelude it imports (`latchclaw`, `prelude.py` /
//! `prelude.js`) that talks to latchclaw over two inherited pipes:
//! `secret`/`secrets` (placeholders, never values), `http` (judged and
//! sent by latchclaw, `security::code`), `tool` (the runtime's whole call
//! path, through `ToolCtx::host`), `output` and `sleep`. `run.rs` runs one
//! snippet and serves its requests; every run is recorded in
//! `memory::code_runs`.

pub mod jobs;
mod run;

use super::tool::{Tool, ToolCtx, ToolResult};
use serde_json::{Value, json};

pub use run::{Category, PRELUDE_JS, PRELUDE_PY};

pub struct CodeRun;

impl Tool for CodeRun {
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::CodeRun
    }
    fn description(&self) -> &'static str {
        "Run a Python or Node snippet in a sandbox (no network, workspace as cwd). \
         `import latchclaw` (node: require(\"latchclaw\")) gives secret(NAME) (a placeholder), \
         secrets(), http(method, url, headers, body), tool(name, args), output(value), sleep(s). \
         Returns exit, stdout, stderr, duration_ms, error_category and output."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "language": {"type": "string", "description": "python or node"},
                "code": {"type": "string"},
                "stdin": {"type": "string"},
                "timeout_secs": {"type": "integer"},
                "background": {"type": "boolean"}
            },
            "required": ["language", "code"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        // Without the feature (never offered, refused by the gate) the
        // constant branch lets the linker drop the runner.
        if !cfg!(feature = "code") {
            return ToolResult::err(
                crate::features::tool_not_built(self.name()).unwrap_or_default(),
            );
        }
        run::run(args, ctx)
    }
}

/// `code_status`: a background run's state, its output so far, and its
/// result once it ended.
pub struct CodeStatus;

impl Tool for CodeStatus {
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::CodeStatus
    }
    fn description(&self) -> &'static str {
        "State of a code_run started with background: true: running (with its output so far) \
         or done (with exit, stdout, stderr, error_category and output)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"job": {"type": "string", "description": "the id code_run answered"}},
            "required": ["job"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        if !cfg!(feature = "code") {
            return ToolResult::err(
                crate::features::tool_not_built(self.name()).unwrap_or_default(),
            );
        }
        run::status(args, ctx)
    }
    fn takes_effect(&self) -> bool {
        false
    }
}
