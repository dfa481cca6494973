//! `SOP.toml` read and checked in one pass: every error found, each
//! naming the file, the step and the key. A leaf of `sop`.

use crate::config::Config;
use crate::tools::ToolName;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The most attempts an `until` check or a retry may ask for.
pub const MAX_ATTEMPTS: u64 = 100;

/// What one step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Tool {
        tool: ToolName,
        /// A JSON object; `content_from` and `{{steps.ID.output}}` are
        /// filled in from earlier steps when the step runs.
        args: Value,
        until: Option<Until>,
    },
    Agent {
        prompt: String,
        /// The steps whose outputs go with the prompt (default: the step
        /// before, when there is one).
        inputs: Vec<String>,
        /// The turn's own tool budget (default: `max_tool_rounds`).
        max_tool_rounds: Option<u32>,
    },
    Approval {
        prompt: String,
    },
}

impl Kind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::Tool { .. } => "tool",
            Kind::Agent { .. } => "agent",
            Kind::Approval { .. } => "approval",
        }
    }
}

/// Repeat a read-only tool step until its output holds `contains`.
#[derive(Debug, Clone, PartialEq)]
pub struct Until {
    pub contains: String,
    pub max_attempts: u64,
    pub interval_secs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnFailure {
    Abort,
    Continue,
    Retry { retries: u64, backoff_secs: u64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: String,
    pub kind: Kind,
    pub on_failure: OnFailure,
    /// Declared safe to run twice: an interrupted run repeats it.
    pub idempotent: bool,
    pub description: Option<String>,
}

impl Step {
    /// A step that changes nothing: run again when a kill cut it off.
    pub fn read_only(&self, cfg: &Config) -> bool {
        match &self.kind {
            Kind::Tool { tool, .. } => !crate::tools::tool(*tool).takes_effect(),
            Kind::Agent {
                max_tool_rounds, ..
            } => max_tool_rounds.unwrap_or(cfg.max_tool_rounds) == 0,
            Kind::Approval { .. } => true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Sop {
    pub name: String,
    pub description: Option<String>,
    pub version: Option<String>,
    pub steps: Vec<Step>,
    pub path: PathBuf,
    /// SHA-256 of the file's bytes: a run and its approvals are bound to it.
    pub hash: String,
}

const TOP_KEYS: &[&str] = &["name", "description", "version", "steps"];
const TOOL_KEYS: &[&str] = &[
    "id",
    "kind",
    "description",
    "tool",
    "args",
    "on_failure",
    "until",
    "idempotent",
];
const AGENT_KEYS: &[&str] = &[
    "id",
    "kind",
    "description",
    "prompt",
    "inputs",
    "max_tool_rounds",
    "on_failure",
    "idempotent",
];
const APPROVAL_KEYS: &[&str] = &["id", "kind", "description", "prompt"];

/// A wrong value as an error shows it: a number as itself, else its type.
fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        other => type_name(other).to_string(),
    }
}

fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// The references a string argument makes: `{{steps.ID.output}}`.
pub fn template_refs(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("{{steps.") {
        let after = &rest[i + 8..];
        match after.find(".output}}") {
            Some(j) if !after[..j].contains('}') => {
                out.push(after[..j].to_string());
                rest = &after[j + 9..];
            }
            _ => rest = after,
        }
    }
    out
}

/// Every string inside a JSON value.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

fn to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

/// A SOP file's bytes. One in the workspace is read with no symbolic link
/// followed below the workspace: a model can make links there (a
/// `SOP.toml` or a directory leading out), and latchclaw would read, run
/// and quote in its errors whatever they point at. The state directory's
/// are the operator's own.
fn read(cfg: &Config, path: &Path) -> std::io::Result<Vec<u8>> {
    use crate::tools::beneath::{Symlinks, open_beneath, open_workspace};
    use std::io::Read;
    use std::os::fd::AsFd;
    let Ok(rel) = path.strip_prefix(&cfg.workspace_dir) else {
        return std::fs::read(path);
    };
    let root = open_workspace(&cfg.workspace_dir)?;
    let fd = open_beneath(root.as_fd(), rel, libc::O_RDONLY, 0, Symlinks::Refuse)?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads and checks one SOP file; `Err` holds every error found.
pub fn load(path: &Path, dir_name: &str, cfg: &Config) -> Result<Sop, Vec<String>> {
    let bytes = read(cfg, path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    parse(&bytes, path, dir_name, cfg)
}

/// The checks of `load`, on the file's bytes.
pub fn parse(bytes: &[u8], path: &Path, dir_name: &str, cfg: &Config) -> Result<Sop, Vec<String>> {
    let file = path.display().to_string();
    let text = std::str::from_utf8(bytes).map_err(|_| vec![format!("{file}: not UTF-8 text")])?;
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        vec![format!(
            "{file}: not valid TOML: {}",
            crate::util::one_line(&e.to_string(), 300)
        )]
    })?;
    let mut errors = Vec::new();
    let mut err = |step: Option<&str>, key: &str, msg: String| {
        errors.push(match step {
            Some(s) => format!("{file}: step \"{s}\": {key}: {msg}"),
            None => format!("{file}: {key}: {msg}"),
        });
    };
    for k in table.keys() {
        if !TOP_KEYS.contains(&k.as_str()) {
            let near = crate::util::suggest::nearest(k, TOP_KEYS.iter().copied())
                .map(|n| format!(" (did you mean \"{n}\"?)"))
                .unwrap_or_default();
            err(
                None,
                k,
                format!("unknown key{near}; allowed: {}", TOP_KEYS.join(", ")),
            );
        }
    }
    let top_string = |k: &str, err: &mut dyn FnMut(Option<&str>, &str, String)| match table.get(k) {
        None => None,
        Some(toml::Value::String(s)) => Some(s.clone()),
        Some(v) => {
            err(None, k, format!("must be a string, not {}", type_name(v)));
            None
        }
    };
    let name = top_string("name", &mut err);
    match &name {
        None if !table.contains_key("name") => {
            err(None, "name", format!("missing; give name = \"{dir_name}\""))
        }
        Some(n) if n != dir_name => err(
            None,
            "name",
            format!("\"{n}\" differs from its directory's name \"{dir_name}\""),
        ),
        _ => {}
    }
    let description = top_string("description", &mut err);
    let version = match table.get("version") {
        None => None,
        Some(toml::Value::String(s)) => Some(s.clone()),
        Some(toml::Value::Integer(i)) => Some(i.to_string()),
        Some(v) => {
            err(
                None,
                "version",
                format!("must be a string or an integer, not {}", type_name(v)),
            );
            None
        }
    };
    let no_steps = Vec::new();
    let raw_steps: &Vec<toml::Value> = match table.get("steps") {
        Some(toml::Value::Array(a)) if !a.is_empty() => a,
        Some(toml::Value::Array(_)) | None => {
            err(
                None,
                "steps",
                "no steps; give at least one [[steps]] table".into(),
            );
            &no_steps
        }
        Some(v) => {
            err(
                None,
                "steps",
                format!(
                    "must be an array of tables ([[steps]]), not {}",
                    type_name(v)
                ),
            );
            &no_steps
        }
    };
    let mut steps = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (i, raw) in raw_steps.iter().enumerate() {
        let label_n = format!("#{}", i + 1);
        let Some(t) = raw.as_table() else {
            err(
                Some(&label_n),
                "steps",
                format!("must be a table, not {}", type_name(raw)),
            );
            continue;
        };
        let id = match t.get("id") {
            Some(toml::Value::String(s)) if valid_id(s) => Some(s.clone()),
            Some(toml::Value::String(s)) => {
                err(
                    Some(&label_n),
                    "id",
                    format!(
                        "\"{}\" is not a step id: letters, digits, - and _, at most 64",
                        crate::util::printable(s)
                    ),
                );
                None
            }
            Some(v) => {
                err(
                    Some(&label_n),
                    "id",
                    format!("must be a string, not {}", type_name(v)),
                );
                None
            }
            None => {
                err(Some(&label_n), "id", "missing".into());
                None
            }
        };
        let label = id.clone().unwrap_or(label_n);
        let label = label.as_str();
        if let Some(id) = &id
            && seen.contains(id)
        {
            err(
                Some(label),
                "id",
                format!("\"{id}\" is used by an earlier step; step ids are unique"),
            );
        }
        let prior = seen.len();
        if let Some(id) = &id {
            seen.push(id.clone());
        }
        let earlier = &seen[..prior];
        let string = |k: &str, err: &mut dyn FnMut(Option<&str>, &str, String)| match t.get(k) {
            None => None,
            Some(toml::Value::String(s)) => Some(s.clone()),
            Some(v) => {
                err(
                    Some(label),
                    k,
                    format!("must be a string, not {}", type_name(v)),
                );
                None
            }
        };
        let kind_name = string("kind", &mut err);
        let allowed: &[&str] = match kind_name.as_deref() {
            Some("tool") => TOOL_KEYS,
            Some("agent") => AGENT_KEYS,
            Some("approval") => APPROVAL_KEYS,
            Some(other) => {
                err(
                    Some(label),
                    "kind",
                    format!(
                        "\"{}\" is not a step kind; allowed values: tool, agent, approval",
                        crate::util::printable(other)
                    ),
                );
                continue;
            }
            None => {
                if !t.contains_key("kind") {
                    err(
                        Some(label),
                        "kind",
                        "missing; allowed values: tool, agent, approval".into(),
                    );
                }
                continue;
            }
        };
        let kind_name = kind_name.unwrap_or_default();
        for k in t.keys() {
            if !allowed.contains(&k.as_str()) {
                let near = crate::util::suggest::nearest(k, allowed.iter().copied())
                    .map(|n| format!(" (did you mean \"{n}\"?)"))
                    .unwrap_or_default();
                err(
                    Some(label),
                    k,
                    format!(
                        "unknown key for a {kind_name} step{near}; allowed: {}",
                        allowed.join(", ")
                    ),
                );
            }
        }
        let description = string("description", &mut err);
        let idempotent = match t.get("idempotent") {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(v) => {
                err(
                    Some(label),
                    "idempotent",
                    format!("must be true or false, not {}", type_name(v)),
                );
                false
            }
        };
        let on_failure = match t.get("on_failure") {
            None => OnFailure::Abort,
            Some(toml::Value::String(s)) if s == "abort" => OnFailure::Abort,
            Some(toml::Value::String(s)) if s == "continue" => OnFailure::Continue,
            Some(toml::Value::Table(r)) => {
                let mut bad = false;
                for k in r.keys() {
                    if k != "retry" && k != "backoff_secs" {
                        bad = true;
                        err(
                            Some(label),
                            &format!("on_failure.{k}"),
                            "unknown key; allowed: retry, backoff_secs".into(),
                        );
                    }
                }
                let int =
                    |k: &str, max: u64, err: &mut dyn FnMut(Option<&str>, &str, String)| match r
                        .get(k)
                    {
                        None => None,
                        Some(toml::Value::Integer(n)) if *n >= 0 && (*n as u64) <= max => {
                            Some(*n as u64)
                        }
                        Some(v) => {
                            err(
                                Some(label),
                                &format!("on_failure.{k}"),
                                format!("must be an integer from 0 to {max}, not {}", shown(v)),
                            );
                            None
                        }
                    };
                let retries = int("retry", MAX_ATTEMPTS, &mut err);
                let backoff = int("backoff_secs", 3600, &mut err).unwrap_or(1);
                if retries.is_none() && !r.contains_key("retry") {
                    bad = true;
                    err(
                        Some(label),
                        "on_failure.retry",
                        "missing; give { retry = N, backoff_secs = S }".into(),
                    );
                }
                if bad {
                    OnFailure::Abort
                } else {
                    OnFailure::Retry {
                        retries: retries.unwrap_or(0),
                        backoff_secs: backoff,
                    }
                }
            }
            Some(v) => {
                err(
                    Some(label),
                    "on_failure",
                    format!(
                        "must be \"abort\", \"continue\" or {{ retry = N, backoff_secs = S }}, not {}",
                        match v {
                            toml::Value::String(s) => format!("\"{}\"", crate::util::printable(s)),
                            _ => type_name(v).to_string(),
                        }
                    ),
                );
                OnFailure::Abort
            }
        };
        let known = |r: &str| earlier.iter().any(|e| e == r);
        let kind = match kind_name.as_str() {
            "tool" => {
                let tool = match string("tool", &mut err) {
                    None => {
                        if !t.contains_key("tool") {
                            err(Some(label), "tool", "missing; name the tool to run".into());
                        }
                        None
                    }
                    Some(n) => match ToolName::parse(&n) {
                        None => {
                            let near = crate::util::suggest::nearest(
                                &n,
                                ToolName::ALL.iter().map(|t| t.as_str()),
                            )
                            .map(|t| format!(" did you mean \"{t}\"?"))
                            .unwrap_or_default();
                            err(
                                Some(label),
                                "tool",
                                format!(
                                    "no tool \"{}\";{near} known tools: {}",
                                    crate::util::printable(&n),
                                    ToolName::list()
                                ),
                            );
                            None
                        }
                        Some(tn) if !cfg.channels.cli.tools_allow.contains(&tn) => {
                            err(
                                Some(label),
                                "tool",
                                format!(
                                    "\"{n}\" is not enabled (channels.cli.tools_allow in {})",
                                    cfg.config_path.display()
                                ),
                            );
                            None
                        }
                        Some(tn) => match crate::features::tool_missing(tn) {
                            Some(feature) => {
                                err(
                                    Some(label),
                                    "tool",
                                    format!("\"{n}\" is not in this build (feature {feature})"),
                                );
                                None
                            }
                            None => Some(tn),
                        },
                    },
                };
                let args = match t.get("args") {
                    None => Value::Object(Default::default()),
                    Some(v @ toml::Value::Table(_)) => to_json(v),
                    Some(v) => {
                        err(
                            Some(label),
                            "args",
                            format!("must be a table, not {}", type_name(v)),
                        );
                        Value::Object(Default::default())
                    }
                };
                if let Some(from) = args.get("content_from") {
                    match from.as_str() {
                        Some(r) if known(r) => {}
                        Some(r) => err(
                            Some(label),
                            "args.content_from",
                            format!(
                                "\"{}\" is not an earlier step; it names the step whose output is the content",
                                crate::util::printable(r)
                            ),
                        ),
                        None => err(
                            Some(label),
                            "args.content_from",
                            "must be a string: an earlier step's id".into(),
                        ),
                    }
                    if args.get("content").is_some() {
                        err(
                            Some(label),
                            "args.content_from",
                            "give content or content_from, not both".into(),
                        );
                    }
                }
                let mut texts = Vec::new();
                strings(&args, &mut texts);
                for s in &texts {
                    for r in template_refs(s) {
                        if !known(&r) {
                            err(
                                Some(label),
                                "args",
                                format!(
                                    "{{{{steps.{}.output}}}} names no earlier step",
                                    crate::util::printable(&r)
                                ),
                            );
                        }
                    }
                }
                let until = match t.get("until") {
                    None => None,
                    Some(toml::Value::Table(u)) => {
                        for k in u.keys() {
                            if !["contains", "max_attempts", "interval_secs"].contains(&k.as_str())
                            {
                                err(
                                    Some(label),
                                    &format!("until.{k}"),
                                    "unknown key; allowed: contains, max_attempts, interval_secs"
                                        .into(),
                                );
                            }
                        }
                        let contains = match u.get("contains") {
                            Some(toml::Value::String(s)) => Some(s.clone()),
                            _ => {
                                err(
                                    Some(label),
                                    "until.contains",
                                    "missing or not a string: the text the output must hold".into(),
                                );
                                None
                            }
                        };
                        let n = |k: &str, d: u64, max: u64, err: &mut dyn FnMut(Option<&str>, &str, String)| match u.get(k) {
                            None => d,
                            Some(toml::Value::Integer(n)) if *n >= 1 && (*n as u64) <= max => *n as u64,
                            Some(v) => {
                                err(
                                    Some(label),
                                    &format!("until.{k}"),
                                    format!("must be an integer from 1 to {max}, not {}", shown(v)),
                                );
                                d
                            }
                        };
                        let max_attempts = n("max_attempts", 5, MAX_ATTEMPTS, &mut err);
                        let interval_secs = n("interval_secs", 1, 3600, &mut err);
                        if let Some(tn) = tool
                            && crate::tools::tool(tn).takes_effect()
                        {
                            err(
                                Some(label),
                                "until",
                                format!(
                                    "only a read-only tool step repeats; \"{}\" takes effect",
                                    tn.as_str()
                                ),
                            );
                        }
                        contains.map(|contains| Until {
                            contains,
                            max_attempts,
                            interval_secs,
                        })
                    }
                    Some(v) => {
                        err(
                            Some(label),
                            "until",
                            format!(
                                "must be a table {{ contains = \"…\", max_attempts = N, interval_secs = S }}, not {}",
                                type_name(v)
                            ),
                        );
                        None
                    }
                };
                tool.map(|tool| Kind::Tool { tool, args, until })
            }
            "agent" => {
                let prompt = string("prompt", &mut err).filter(|p| !p.trim().is_empty());
                if prompt.is_none() && !matches!(t.get("prompt"), Some(v) if !v.is_str()) {
                    err(
                        Some(label),
                        "prompt",
                        "missing or empty: what the agent is asked".into(),
                    );
                }
                let inputs = match t.get("inputs") {
                    None => earlier.last().cloned().into_iter().collect(),
                    Some(toml::Value::Array(a)) => {
                        let mut v = Vec::new();
                        for x in a {
                            match x.as_str() {
                                Some(r) if known(r) => v.push(r.to_string()),
                                Some(r) => err(
                                    Some(label),
                                    "inputs",
                                    format!(
                                        "\"{}\" is not an earlier step",
                                        crate::util::printable(r)
                                    ),
                                ),
                                None => err(
                                    Some(label),
                                    "inputs",
                                    format!("must hold step ids, not {}", type_name(x)),
                                ),
                            }
                        }
                        v
                    }
                    Some(v) => {
                        err(
                            Some(label),
                            "inputs",
                            format!("must be an array of step ids, not {}", type_name(v)),
                        );
                        Vec::new()
                    }
                };
                let max_tool_rounds = match t.get("max_tool_rounds") {
                    None => None,
                    Some(toml::Value::Integer(n)) if (0..=100).contains(n) => Some(*n as u32),
                    Some(v) => {
                        err(
                            Some(label),
                            "max_tool_rounds",
                            format!("must be an integer from 0 to 100, not {}", shown(v)),
                        );
                        None
                    }
                };
                prompt.map(|prompt| Kind::Agent {
                    prompt,
                    inputs,
                    max_tool_rounds,
                })
            }
            _ => {
                let prompt = string("prompt", &mut err).filter(|p| !p.trim().is_empty());
                if prompt.is_none() && !matches!(t.get("prompt"), Some(v) if !v.is_str()) {
                    err(
                        Some(label),
                        "prompt",
                        "missing or empty: an approval step asks the operator this".into(),
                    );
                }
                prompt.map(|prompt| Kind::Approval { prompt })
            }
        };
        if let (Some(id), Some(kind)) = (id, kind) {
            steps.push(Step {
                id,
                kind,
                on_failure,
                idempotent,
                description,
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Sop {
        name: name.unwrap_or_default(),
        description,
        version,
        steps,
        path: path.to_path_buf(),
        hash: crate::util::sha256_hex(bytes),
    })
}

/// Letters, digits, `-` and `_`, 1 to 64 of them: a step id or SOP name.
pub fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        let mut c = Config::defaults("/nonexistent/config.toml".into(), "/nonexistent".into());
        c.channels.cli.tools_allow = ToolName::ALL.to_vec();
        c
    }

    fn check(text: &str) -> Result<Sop, Vec<String>> {
        parse(text.as_bytes(), Path::new("s/SOP.toml"), "s", &cfg())
    }

    #[test]
    fn the_seed_format_reads() {
        let s = check(
            r#"name = "s"
description = "d"
[[steps]]
id = "list"
kind = "tool"
tool = "file_list"
args = { path = "." }
[[steps]]
id = "summarize"
kind = "agent"
prompt = "Summarize."
[[steps]]
id = "approval"
kind = "approval"
prompt = "Continue?"
[[steps]]
id = "write"
kind = "tool"
tool = "file_write"
args = { path = "x.txt", content_from = "summarize" }
"#,
        )
        .unwrap();
        assert_eq!(s.steps.len(), 4);
        assert_eq!(
            s.steps[1].kind,
            Kind::Agent {
                prompt: "Summarize.".into(),
                inputs: vec!["list".into()],
                max_tool_rounds: None
            }
        );
    }

    #[test]
    fn five_kinds_of_error_in_one_pass() {
        let e = check(
            r#"name = "s"
[[steps]]
id = "a"
kind = "tool"
tool = "no_such_tool"
[[steps]]
id = "a"
kind = "approval"
[[steps]]
id = "b"
kind = "tool"
tool = "file_write"
args = { path = "x", content_from = "later" }
colour = "red"
[[steps]]
id = "later"
kind = "agent"
prompt = 3
"#,
        )
        .unwrap_err();
        let all = e.join("\n");
        assert!(
            all.contains("step \"a\": tool: no tool \"no_such_tool\""),
            "{all}"
        );
        assert!(
            all.contains("step \"a\": id: \"a\" is used by an earlier step"),
            "{all}"
        );
        assert!(all.contains("step \"a\": prompt: missing"), "{all}");
        assert!(
            all.contains("step \"b\": args.content_from: \"later\" is not an earlier step"),
            "{all}"
        );
        assert!(all.contains("step \"b\": colour: unknown key"), "{all}");
        assert!(
            all.contains("step \"later\": prompt: must be a string, not an integer"),
            "{all}"
        );
        assert!(e.iter().all(|l| l.starts_with("s/SOP.toml: ")), "{all}");
    }

    #[test]
    fn templates_name_earlier_steps() {
        assert_eq!(
            template_refs("a {{steps.x.output}} b {{steps.y-2.output}} {{steps.z}}"),
            ["x", "y-2"]
        );
        let e = check(
            "name = \"s\"\n[[steps]]\nid = \"a\"\nkind = \"tool\"\ntool = \"file_write\"\nargs = { path = \"{{steps.a.output}}\", content = \"\" }\n",
        )
        .unwrap_err();
        assert!(
            e.iter().any(|l| l.contains("names no earlier step")),
            "{e:?}"
        );
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        for text in [
            "",
            "steps = 3",
            "[[steps]]\nid=1",
            "name = \"t\"\nsteps = [1]",
            "\u{0}",
        ] {
            assert!(check(text).is_err(), "{text}");
        }
        assert!(parse(&[0xff, 0xfe], Path::new("x"), "x", &cfg()).is_err());
    }
}
