//! Built-in tools. A tool describes itself (name, description, JSON-schema
//! parameters) and does its work; whether it may run was already decided by
//! [`crate::security::Gate::decide`], whose resolved path it must use.

pub mod beneath;
mod files;
mod http;
pub mod shell;

use crate::config::Config;
use crate::memory::Memory;
use crate::security::{Decision, Gate};
use serde::Serialize;
use serde_json::{Value, json};
use std::path::Path;

pub struct ToolCtx<'a> {
    pub cfg: &'a Config,
    pub gate: &'a Gate,
    pub memory: &'a Memory,
    /// The gate's decision: the resolved path or argv the tool must use.
    pub decision: &'a Decision,
    /// The end of the whole run (`agent --timeout`), if bounded.
    pub deadline: Option<std::time::Instant>,
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
    /// The emergency stop ended the run.
    #[serde(skip)]
    pub estop: bool,
}

impl ToolResult {
    pub fn ok(output: String) -> ToolResult {
        ToolResult {
            success: true,
            output,
            error: None,
            metadata: None,
            receipt_id: None,
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
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn parameters(&self) -> Value;
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult;
    /// False for tools that change nothing and send nothing anywhere: cut
    /// off mid-call they leave no effect, so they need no `started` receipt
    /// (and its fsync) before they run.
    fn takes_effect(&self) -> bool {
        true
    }
}

static TOOLS: &[&dyn Tool] = &[
    &Time,
    &files::FileList,
    &files::FileRead,
    &files::FileWrite,
    &shell::Shell,
    &http::Http,
    &MemorySearch,
];

/// Implemented tools, in a stable order.
pub fn all() -> &'static [&'static dyn Tool] {
    TOOLS
}

pub fn find(name: &str) -> Option<&'static dyn Tool> {
    TOOLS.iter().copied().find(|t| t.name() == name)
}

struct Time;

impl Tool for Time {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "time"
    }
    fn description(&self) -> &'static str {
        "Current local time, UTC time and the local time zone."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn invoke(&self, _args: &Value, _ctx: &ToolCtx) -> ToolResult {
        let (secs, nanos) = crate::util::now_unix();
        let (offset, zone) = local_offset(secs);
        let local = crate::util::rfc3339(secs, nanos, offset);
        let utc = crate::util::rfc3339(secs, nanos, 0);
        let zone_text = zone.clone().unwrap_or_else(|| "unknown".into());
        ToolResult {
            metadata: Some(
                json!({"local": local, "utc": utc, "zone": zone, "offset_secs": offset}),
            ),
            ..ToolResult::ok(format!(
                "Local time: {local} (time zone {zone_text})\nUTC time: {utc}"
            ))
        }
    }
}

/// The local UTC offset and zone abbreviation, from the C library's view of
/// `TZ` and /etc/localtime.
fn local_offset(secs: i64) -> (i64, Option<String>) {
    let t = secs as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which we own; tm_zone points
    // at static storage inside the C library.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return (0, None);
        }
        let zone = (!tm.tm_zone.is_null()).then(|| {
            std::ffi::CStr::from_ptr(tm.tm_zone)
                .to_string_lossy()
                .into_owned()
        });
        (tm.tm_gmtoff as i64, zone)
    }
}

struct MemorySearch;

impl Tool for MemorySearch {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "memory_search"
    }
    fn description(&self) -> &'static str {
        "Searches earlier conversations; returns matching snippets with their conversation and time."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to look for"},
                "limit": {"type": "integer", "description": "1 to 50, default 5"}
            },
            "required": ["query"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(query) = args.get("query").and_then(Value::as_str) else {
            return ToolResult::err("\"query\" (a string) is required");
        };
        let limit = match args.get("limit") {
            None => 5,
            Some(v) => match v.as_u64() {
                Some(n @ 1..=50) => n as u32,
                _ => return ToolResult::err("\"limit\" must be an integer from 1 to 50"),
            },
        };
        match ctx.memory.search(query, limit) {
            Ok(hits) if hits.is_empty() => ToolResult::ok(format!("no memory matches \"{query}\"")),
            Ok(hits) => {
                let text = hits
                    .iter()
                    .map(|h| {
                        format!(
                            "{} {} {}: {}",
                            h.conversation_id, h.timestamp, h.role, h.snippet
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                ToolResult::ok(crate::util::truncate_middle(
                    &text,
                    ctx.cfg.tool_output_max_bytes,
                ))
            }
            Err(e) => ToolResult::err(e.to_string()),
        }
    }
}
