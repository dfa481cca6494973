//! Built-in tools. A tool describes itself (name, description, JSON-schema
//! parameters) and does its work; whether it may run was already decided by
//! [`crate::security::Gate::decide`], whose resolved path it must use.

pub mod ask_user;
pub mod beneath;
mod files;
pub mod git;
mod glob;
mod grep;
mod http;
pub mod memory;
#[cfg(feature = "pdf")]
mod pdf;
/// `pdf_extract` in a build without the `pdf` feature: still a `ToolName`
/// (configs, receipts and `tool list` name it), never offered or run
/// (`crate::features::tool_missing`).
#[cfg(not(feature = "pdf"))]
mod pdf {
    use super::{Tool, ToolCtx, ToolName, ToolResult};
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
            ToolResult::err(
                crate::features::tool_not_built(ToolName::PdfExtract).unwrap_or_default(),
            )
        }
    }
}
pub mod shell;
pub mod web_search;

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
    pub user: &'a dyn ask_user::User,
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
    fn name(&self) -> ToolName;
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

/// Every built-in tool. `tool list`, the schemas a model is offered, the
/// config's `tools_allow` check and the gate's decision are all derived from
/// this one list: adding a tool is a variant here, and the compiler then
/// points at each `match` that has to say what the new tool means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolName {
    Time,
    FileList,
    FileRead,
    FileWrite,
    Shell,
    Http,
    MemorySearch,
    Git,
    MemoryStore,
    MemoryRecall,
    MemoryForget,
    Grep,
    AskUser,
    WebSearch,
    PdfExtract,
}

impl ToolName {
    /// In the order `tool list` shows them.
    pub const ALL: [ToolName; 15] = [
        ToolName::Time,
        ToolName::FileList,
        ToolName::FileRead,
        ToolName::FileWrite,
        ToolName::Shell,
        ToolName::Http,
        ToolName::MemorySearch,
        ToolName::Git,
        ToolName::MemoryStore,
        ToolName::MemoryRecall,
        ToolName::MemoryForget,
        ToolName::Grep,
        ToolName::AskUser,
        ToolName::WebSearch,
        ToolName::PdfExtract,
    ];

    /// The name models, configs, receipts and the command line use.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolName::Time => "time",
            ToolName::FileList => "file_list",
            ToolName::FileRead => "file_read",
            ToolName::FileWrite => "file_write",
            ToolName::Shell => "shell",
            ToolName::Http => "http",
            ToolName::MemorySearch => "memory_search",
            ToolName::Git => "git",
            ToolName::MemoryStore => "memory_store",
            ToolName::MemoryRecall => "memory_recall",
            ToolName::MemoryForget => "memory_forget",
            ToolName::Grep => "grep",
            ToolName::AskUser => "ask_user",
            ToolName::WebSearch => "web_search",
            ToolName::PdfExtract => "pdf_extract",
        }
    }

    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Offered on the CLI when `channels.cli.tools_allow` is absent: the
    /// tools that write files or reach the network are opt-in, and so are
    /// the note tools (each schema sent costs every request bytes) and
    /// `ask_user` (a run the operator left alone should not stop to ask);
    /// `web_search` is offered once a provider is configured.
    pub const fn on_by_default(self) -> bool {
        !matches!(
            self,
            ToolName::FileWrite
                | ToolName::Http
                | ToolName::MemoryStore
                | ToolName::MemoryRecall
                | ToolName::MemoryForget
                | ToolName::AskUser
                | ToolName::WebSearch
                | ToolName::PdfExtract
        )
    }

    pub fn tool(self) -> &'static dyn Tool {
        match self {
            ToolName::Time => &Time,
            ToolName::FileList => &files::FileList,
            ToolName::FileRead => &files::FileRead,
            ToolName::FileWrite => &files::FileWrite,
            ToolName::Shell => &shell::Shell,
            ToolName::Http => &http::Http,
            ToolName::MemorySearch => &MemorySearch,
            ToolName::Git => &git::Git,
            ToolName::MemoryStore => &memory::MemoryStore,
            ToolName::MemoryRecall => &memory::MemoryRecall,
            ToolName::MemoryForget => &memory::MemoryForget,
            ToolName::Grep => &grep::Grep,
            ToolName::AskUser => &ask_user::AskUser,
            ToolName::WebSearch => &web_search::WebSearch,
            ToolName::PdfExtract => &pdf::PdfExtract,
        }
    }

    /// "time, file_list, …" for errors that say what is allowed.
    pub fn list() -> String {
        let names: Vec<&str> = ToolName::ALL.iter().map(|t| t.as_str()).collect();
        names.join(", ")
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ToolName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

pub fn find(name: &str) -> Option<&'static dyn Tool> {
    ToolName::parse(name).map(ToolName::tool)
}

/// Checks a call's arguments against the tool's parameter schema, before
/// the gate sees them: a misspelt or mistyped field is the model's mistake
/// to fix, not a call to judge. Covers the subset the tools use: an object
/// with `properties` of type string, integer, boolean (or object), and
/// `required`. The error names the field and what is allowed.
pub fn check_args(tool: &dyn Tool, args: &Value) -> Result<(), String> {
    let schema = tool.parameters();
    let name = tool.name().as_str();
    let Some(given) = args.as_object() else {
        return Err(format!(
            "{name}: the arguments must be a JSON object, not {}",
            kind_of(args)
        ));
    };
    let empty = serde_json::Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let allowed = || {
        if props.is_empty() {
            "it takes no arguments".to_string()
        } else {
            let fields: Vec<String> = props
                .iter()
                .map(|(k, p)| format!("{k} ({})", p["type"].as_str().unwrap_or("any")))
                .collect();
            format!("allowed: {}", fields.join(", "))
        }
    };
    for (key, value) in given {
        let Some(prop) = props.get(key) else {
            return Err(format!(
                "{name}: unknown argument \"{}\"; {}",
                crate::util::printable(key),
                allowed()
            ));
        };
        let want = prop.get("type").and_then(Value::as_str).unwrap_or("");
        let fits = match want {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "boolean" => value.is_boolean(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            _ => true,
        };
        if !fits {
            return Err(format!(
                "{name}: argument \"{}\" must be {} {want}, not {}",
                crate::util::printable(key),
                if matches!(want, "integer" | "array") {
                    "an"
                } else {
                    "a"
                },
                kind_of(value)
            ));
        }
    }
    let required = schema.get("required").and_then(Value::as_array);
    for key in required.into_iter().flatten().filter_map(Value::as_str) {
        if !given.contains_key(key) {
            let want = props[key]["type"].as_str().unwrap_or("value");
            return Err(format!(
                "{name}: missing required argument \"{key}\" ({want}); {}",
                allowed()
            ));
        }
    }
    Ok(())
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number with a fraction",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

struct Time;

impl Tool for Time {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> ToolName {
        ToolName::Time
    }
    fn description(&self) -> &'static str {
        "Local time, UTC time and the time zone."
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
    fn name(&self) -> ToolName {
        ToolName::MemorySearch
    }
    fn description(&self) -> &'static str {
        "Searches earlier conversations; returns snippets with conversation and time."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "description": "1-50, default 5"}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(tool: &str, args: Value) -> Result<(), String> {
        check_args(find(tool).unwrap(), &args)
    }

    #[test]
    fn arguments_that_fit_the_schema_pass() {
        assert_eq!(check("time", json!({})), Ok(()));
        assert_eq!(check("file_list", json!({})), Ok(()));
        assert_eq!(check("file_list", json!({"path": "src"})), Ok(()));
        assert_eq!(
            check("memory_search", json!({"query": "x", "limit": 3})),
            Ok(())
        );
        assert_eq!(
            check("file_write", json!({"path": "a", "content": ""})),
            Ok(())
        );
    }

    #[test]
    fn unknown_mistyped_and_missing_fields_are_named() {
        let e = check("file_read", json!({"path": "a", "lines": 3})).unwrap_err();
        assert_eq!(
            e,
            "file_read: unknown argument \"lines\"; allowed: end_line (integer), line_numbers (boolean), path (string), start_line (integer)"
        );
        let e = check("time", json!({"zone": "UTC"})).unwrap_err();
        assert!(
            e.contains("\"zone\"") && e.contains("takes no arguments"),
            "{e}"
        );
        let e = check("memory_search", json!({"query": "x", "limit": "3"})).unwrap_err();
        assert_eq!(
            e,
            "memory_search: argument \"limit\" must be an integer, not a string"
        );
        let e = check("memory_search", json!({"query": "x", "limit": 2.5})).unwrap_err();
        assert!(e.contains("not a number with a fraction"), "{e}");
        let e = check("shell", json!({"command": ["ls"]})).unwrap_err();
        assert!(e.contains("must be a string, not an array"), "{e}");
        let e = check("file_write", json!({"path": "a"})).unwrap_err();
        assert_eq!(
            e,
            "file_write: missing required argument \"content\" (string); allowed: content (string), path (string)"
        );
        let e = check("shell", json!(["ls"])).unwrap_err();
        assert!(e.contains("must be a JSON object, not an array"), "{e}");
        let e = check("file_read", json!({"pa\u{1b}th": "a"})).unwrap_err();
        assert!(!e.contains('\u{1b}'), "{e}");
    }
}
