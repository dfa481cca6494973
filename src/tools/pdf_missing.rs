//! `pdf_extract` in a build without the `pdf` feature: still a `ToolName`
//! (configs, receipts and `tool list` name it), never offered or run
//! (`crate::features::tool_missing`).

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::types::ToolName;
use serde_json::{Value, json};

pub struct PdfExtract;

impl Tool for PdfExtract {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> ToolName {
        ToolName::PdfExtract
    }
    fn description(&self) -> &'static str {
        "Text of a PDF file in the workspace, page by page (not in this build)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn invoke(&self, _args: &Value, _ctx: &ToolCtx) -> ToolResult {
        ToolResult::err(crate::features::tool_not_built(ToolName::PdfExtract).unwrap_or_default())
    }
}
