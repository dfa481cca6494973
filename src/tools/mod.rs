//! Built-in tools. A tool describes itself (name, description, JSON-schema
//! parameters) and does its work; whether it may run was already decided by
//! [`crate::security::Gate::decide`], whose resolved path it must use.

pub mod ask_user;
pub mod beneath;
pub mod code;
pub mod diff;
mod files;
pub use files::write_preview;
pub mod git;
mod glob;
mod grep;
mod http;
pub mod isolate;
pub mod memory;
#[cfg(feature = "pdf")]
mod pdf;
/// `pdf_extract` in a build without the `pdf` feature.
#[cfg(not(feature = "pdf"))]
#[path = "pdf_missing.rs"]
mod pdf;
pub mod plan;
pub mod shell;
mod tool;
pub mod web_search;

use serde_json::{Value, json};

pub use crate::types::ToolName;
pub use tool::{Host, HostCall, NoHost, Nobody, Reply, Tool, ToolCtx, ToolResult, User};

/// The `Tool` behind each row of the tool table (`types::ToolName`).
pub fn tool(name: ToolName) -> &'static dyn Tool {
    match name {
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
        ToolName::Plan => &plan::Plan,
        ToolName::CodeRun => &code::CodeRun,
        ToolName::CodeStatus => &code::CodeStatus,
    }
}

/// One short call of each tool, the arguments only: text and structured
/// tool modes show it with the tool (a small model copies a form it has
/// seen far more reliably than it follows a schema).
pub fn example(name: ToolName) -> Value {
    match name {
        ToolName::Time => json!({}),
        ToolName::FileList => json!({"path": "."}),
        ToolName::FileRead => json!({"path": "notes.txt"}),
        ToolName::FileWrite => json!({"path": "notes.txt", "content": "hello\n"}),
        ToolName::Shell => json!({"command": "wc -l notes.txt"}),
        ToolName::Http => json!({"url": "https://example.com/"}),
        ToolName::MemorySearch => json!({"query": "backup plan"}),
        ToolName::Git => json!({"command": "log", "n": 3}),
        ToolName::MemoryStore => json!({"text": "prefers tabs", "category": "preference"}),
        ToolName::MemoryRecall => json!({"query": "tabs"}),
        ToolName::MemoryForget => json!({"id": 3}),
        ToolName::Grep => json!({"pattern": "TODO", "path": "."}),
        ToolName::AskUser => json!({"question": "Which branch?"}),
        ToolName::WebSearch => json!({"query": "rust release notes"}),
        ToolName::PdfExtract => json!({"path": "report.pdf"}),
        ToolName::Plan => json!({"tasks": [{"title": "Summarise", "purpose": "a summary",
            "instructions": "read README.md", "evaluation": "names every section"}]}),
        ToolName::CodeRun => json!({"language": "python", "code": "print(6 * 7)"}),
        ToolName::CodeStatus => json!({"job": "job-1"}),
    }
}

/// A parser child's whole life (`latchclaw __parse KIND`, from `main.rs`):
/// `isolate::serve` with the parser of `kind`. Its exit code.
pub fn serve_parser(kind: Option<&std::ffi::OsStr>) -> i32 {
    isolate::serve(kind, |kind| -> Box<dyn isolate::Parser> {
        match kind {
            isolate::Kind::Grep => Box::<grep::Matcher>::default(),
            #[cfg(feature = "pdf")]
            isolate::Kind::Pdf => Box::new(pdf::Reader),
        }
    })
}

pub fn find(name: &str) -> Option<&'static dyn Tool> {
    ToolName::parse(name).map(tool)
}

/// What the tools check of their own arguments beyond their JSON types:
/// integer ranges and the strings allowed. Kept out of the schemas offered
/// to a model (every request would carry them, README: request budget);
/// the agent checks a model's call against them (`check_bounds`), so a
/// value out of range is a repair for the model (README: Small local
/// models), not a tool's error handed on as the answer. The tools still
/// check them themselves (`tool run` reports their errors).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    Int(u64, u64),
    OneOf(&'static [&'static str]),
}

pub fn bounds(name: ToolName) -> &'static [(&'static str, Bound)] {
    const LINE: Bound = Bound::Int(1, u32::MAX as u64);
    match name {
        ToolName::FileList => &[
            ("depth", Bound::Int(1, files::MAX_DEPTH)),
            ("sort", Bound::OneOf(&["name", "mtime", "size"])),
            ("limit", Bound::Int(1, files::MAX_LIMIT)),
        ],
        ToolName::FileRead => &[
            ("start_line", LINE),
            ("end_line", LINE),
            ("max_lines", Bound::Int(1, files::MAX_MAX_LINES)),
        ],
        ToolName::MemorySearch => &[("limit", Bound::Int(1, 50))],
        ToolName::Shell => &[
            (
                "timeout_ms",
                Bound::Int(1, crate::types::args::SHELL_MAX_TIMEOUT_MS),
            ),
            (
                "max_output_chars",
                Bound::Int(1, crate::types::args::SHELL_MAX_OUTPUT_CHARS),
            ),
        ],
        ToolName::Grep => &[
            ("context", Bound::Int(0, grep::MAX_CONTEXT)),
            ("max_matches", Bound::Int(1, grep::MAX_MATCHES)),
        ],
        ToolName::WebSearch => &[("limit", Bound::Int(1, crate::types::args::MAX_RESULTS))],
        ToolName::MemoryRecall => &[("limit", Bound::Int(1, crate::types::args::RECALL_MAX))],
        ToolName::MemoryForget => &[("id", Bound::Int(1, i64::MAX as u64))],
        ToolName::CodeRun => &[
            ("language", Bound::OneOf(crate::types::args::CODE_LANGUAGES)),
            ("timeout_secs", Bound::Int(1, 3600)),
        ],
        _ => &[],
    }
}

/// Checks a call's arguments against the tool's parameter schema, before
/// the gate sees them: a misspelt or mistyped field is the model's mistake
/// to fix, not a call to judge. Covers the subset the tools use: an object
/// with `properties` of type string, integer, boolean (or object), and
/// `required`. The error names the field and what is allowed.
pub fn check_args(tool: &dyn Tool, args: &Value) -> Result<(), String> {
    // A tool this build lacks has no schema to fit: say why it cannot run.
    if let Some(why) = crate::features::tool_not_built(tool.name()) {
        return Err(why);
    }
    check_schema(tool.name().as_str(), &tool.parameters(), args)
}

/// A tool's schema with each optional argument's `default` written in, as
/// `tool list --json` shows it.
pub fn schema_with_defaults(tool: &dyn Tool) -> Value {
    let mut schema = tool.parameters();
    if let (Some(props), Value::Object(defaults)) = (
        schema.get_mut("properties").and_then(Value::as_object_mut),
        tool.defaults(),
    ) {
        for (k, v) in defaults {
            if let Some(Value::Object(p)) = props.get_mut(&k) {
                p.insert("default".into(), v);
            }
        }
    }
    schema
}

/// `check_args` for any tool by its schema (an external tool's too).
pub fn check_schema(name: &str, schema: &Value, args: &Value) -> Result<(), String> {
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

/// The tool's `bounds` as JSON Schema keywords by argument (`minimum` and
/// `maximum`, `enum`), for a schema a grammar follows; null: none.
pub fn bounds_schema(name: ToolName) -> Value {
    // `git`: what each command takes, from the gate's own table (one
    // arguments object per command in structured mode).
    if name == ToolName::Git {
        let takes: serde_json::Map<String, Value> = crate::security::git::tool_args::COMMANDS
            .iter()
            .map(|(c, keys)| (c.to_string(), json!(keys)))
            .collect();
        return json!({"$variants": {"key": "command", "takes": takes}});
    }
    let b = bounds(name);
    if b.is_empty() {
        return Value::Null;
    }
    b.iter()
        .map(|(key, bound)| {
            let keywords = match bound {
                Bound::Int(lo, hi) if *hi >= u32::MAX as u64 => json!({"minimum": lo}),
                Bound::Int(lo, hi) => json!({"minimum": lo, "maximum": hi}),
                Bound::OneOf(values) => json!({"enum": values}),
            };
            (key.to_string(), keywords)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A call's values against the tool's `bounds` and its schema's `enum`s
/// (after `check_args`, which checked their types).
pub fn check_bounds(tool: &dyn Tool, args: &Value) -> Result<(), String> {
    let schema = tool.parameters();
    let name = tool.name().as_str();
    let Some(given) = args.as_object() else {
        return Ok(());
    };
    // `git`'s arguments depend on its command: the gate's own table says
    // which (a model that fills in every argument gets a repair, not a
    // refusal).
    if tool.name() == ToolName::Git
        && let Some(command) = given.get("command").and_then(Value::as_str)
        && let Some((_, takes)) = crate::security::git::tool_args::COMMANDS
            .iter()
            .find(|(c, _)| *c == command)
        && let Some(key) = given
            .keys()
            .find(|k| *k != "command" && !takes.contains(&k.as_str()))
    {
        let allowed = if takes.is_empty() {
            "it takes no other argument".to_string()
        } else {
            format!("it takes {}", takes.join(", "))
        };
        return Err(format!(
            "git {command}: argument \"{}\" does not apply; {allowed}",
            crate::util::printable(key)
        ));
    }
    for (key, value) in given {
        let prop = &schema["properties"][key];
        let listed: Vec<&str> = prop["enum"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let bound = bounds(tool.name())
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, b)| *b)
            .or_else(|| (!listed.is_empty()).then_some(Bound::OneOf(&[])));
        let key = crate::util::printable(key);
        match bound {
            Some(Bound::Int(lo, hi)) if value.as_u64().is_none_or(|n| n < lo || n > hi) => {
                let range = if hi >= u32::MAX as u64 {
                    format!("{lo} or more")
                } else {
                    format!("from {lo} to {hi}")
                };
                return Err(format!(
                    "{name}: argument \"{key}\" must be an integer {range}, not {value}"
                ));
            }
            Some(Bound::OneOf(allowed)) => {
                let allowed = if allowed.is_empty() {
                    &listed[..]
                } else {
                    allowed
                };
                if !value.as_str().is_some_and(|v| allowed.contains(&v)) {
                    return Err(format!(
                        "{name}: argument \"{key}\" must be one of {}, not {}",
                        allowed.join(", "),
                        crate::util::printable(&value.to_string())
                    ));
                }
            }
            _ => {}
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
        "Local and UTC time, time zone."
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
    crate::sys::time::local_offset(secs)
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
        "Searches earlier conversations."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"}
            },
            "required": ["query"]
        })
    }
    fn defaults(&self) -> Value {
        json!({"limit": 5})
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn results_count_what_went_and_say_nothing_else() {
        let r =
            crate::security::redact::Redactor::new().with_secret("LC_KEY", "Zq8vL2pX0wR5tY7uK3mN");
        // Built at run time, so no scanner of this repository takes them for real secrets.
        let sk = format!("sk-{}", "proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z");
        let aws_id = format!("AKIA{}", "IOSFODNN7EXAMPLE");
        let pem = format!(
            "-----BEGIN RSA {}-----\nMIIEpAIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aozN3tihPmljnnudb9G3HcTjJ\n\
             BA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC7+9z5Pad7OejecsQ0bu3aozN3t==\n\
             -----END RSA PRIVATE KEY-----",
            "PRIVATE KEY"
        );
        let mut res = ToolResult {
            metadata: Some(json!({"exit_code": 0, "note": ["Zq8vL2pX0wR5tY7uK3mN"]})),
            error: Some(format!("exit code 1: {aws_id}")),
            ..ToolResult::ok(format!("{pem}\nline\n{sk}"))
        };
        let counts = res.redact(&r);
        assert_eq!(counts.total(), 4);
        assert_eq!(
            (counts.get("private_key"), counts.get("openai_key")),
            (1, 1)
        );
        assert_eq!(
            counts.summary(),
            "aws_access_key_id 1, env:LC_KEY 1, openai_key 1, private_key 1"
        );
        assert_eq!(
            res.output,
            "[REDACTED:private_key]\nline\n[REDACTED:openai_key]"
        );
        assert_eq!(
            res.error.as_deref(),
            Some("exit code 1: [REDACTED:aws_access_key_id]")
        );
        let m = res.metadata.unwrap();
        assert_eq!(m["note"][0], "[REDACTED:env:LC_KEY]");
        assert_eq!(m["exit_code"], 0);
        assert_eq!(m["redacted"]["private_key"], 1);
        // Nothing to redact: nothing added.
        let mut clean = ToolResult::ok("fine".into());
        assert!(clean.redact(&r).is_empty());
        assert!(clean.metadata.is_none());
        let mut bare = ToolResult::ok(sk);
        bare.redact(&r);
        assert_eq!(bare.metadata, Some(json!({"redacted": {"openai_key": 1}})));
    }

    fn check(tool: &str, args: Value) -> Result<(), String> {
        let tool = find(tool).unwrap();
        check_args(tool, &args).and_then(|()| check_bounds(tool, &args))
    }

    /// Structured mode's per-command objects for `git` come from the
    /// gate's own table, every command of the schema's enum included.
    #[test]
    fn git_bounds_name_what_each_command_takes() {
        let b = bounds_schema(ToolName::Git);
        let takes = b["$variants"]["takes"].as_object().unwrap();
        assert_eq!(b["$variants"]["key"], "command");
        assert_eq!(
            takes["log"],
            json!(["n", "path", "since", "author", "grep", "include_diff"])
        );
        assert_eq!(takes["status"], json!([]));
        let listed = tool(ToolName::Git).parameters()["properties"]["command"]["enum"].clone();
        let mut names: Vec<&String> = takes.keys().collect();
        let mut want: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        names.sort();
        want.sort();
        assert_eq!(names, want);
    }

    #[test]
    fn values_out_of_bounds_are_named_with_what_is_allowed() {
        assert_eq!(
            check("file_list", json!({"depth": 0})).unwrap_err(),
            "file_list: argument \"depth\" must be an integer from 1 to 10, not 0"
        );
        assert_eq!(
            check("file_list", json!({"sort": "date"})).unwrap_err(),
            "file_list: argument \"sort\" must be one of name, mtime, size, not \"date\""
        );
        assert_eq!(
            check("file_read", json!({"path": "a", "start_line": 0})).unwrap_err(),
            "file_read: argument \"start_line\" must be an integer 1 or more, not 0"
        );
        // The schema's own enum.
        let e = check("git", json!({"command": "push"})).unwrap_err();
        assert!(
            e.contains("must be one of status, log, diff, show, blame, branch"),
            "{e}"
        );
        assert_eq!(
            check("git", json!({"command": "log", "n": 1, "refs": ["HEAD"]})).unwrap_err(),
            "git log: argument \"refs\" does not apply; it takes n, path, since, author, grep, include_diff"
        );
        assert_eq!(check("git", json!({"command": "log", "n": 1})), Ok(()));
        assert_eq!(
            check("file_list", json!({"depth": 5, "sort": "size"})),
            Ok(())
        );
        assert_eq!(check("grep", json!({"pattern": "x", "context": 0})), Ok(()));
    }

    #[test]
    fn every_example_fits_its_tool() {
        for name in ToolName::ALL {
            if crate::features::tool_not_built(name).is_none() {
                assert_eq!(check_args(tool(name), &example(name)), Ok(()), "{name}");
            }
        }
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
            "file_read: unknown argument \"lines\"; allowed: end_line (integer), line_numbers (boolean), max_lines (integer), path (string), start_line (integer)"
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
