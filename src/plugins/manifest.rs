//! `manifest.toml` read and checked: every problem in one pass, each
//! naming its key path (`tools[0].schema: …`), unknown keys refused. A
//! leaf of `plugins`: install, load and approve all read a manifest here.

use crate::security::Risk;
use crate::types::{ToolName, valid_tool_name};
use serde_json::Value;
use std::path::{Component, Path, PathBuf};

pub const FILE: &str = "manifest.toml";
/// The longest manifest read (a manifest is a few hundred bytes).
const MAX_BYTES: u64 = 256 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub tools: Vec<PluginTool>,
}

/// One `[[tools]]` entry, as declared.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginTool {
    pub name: String,
    pub description: String,
    /// Relative to the plugin's directory, normalised, inside it.
    pub command: PathBuf,
    pub schema: Value,
    pub risk: Risk,
    pub read_only: bool,
    pub network: Vec<String>,
    pub timeout_secs: Option<u64>,
    pub env: Vec<String>,
}

impl PluginTool {
    /// The tool as declared, as JSON (what is pinned, and `plugin show`).
    pub fn value(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "schema": self.schema,
            "risk": self.risk.as_str(),
            "read_only": self.read_only,
            "network": self.network,
            "env": self.env,
            "timeout_secs": self.timeout_secs,
            "command": self.command.display().to_string(),
        })
    }
}

/// A plugin's name: a directory name under `<state>/plugins` and a word in
/// commands.
pub fn valid_plugin_name(name: &str) -> bool {
    valid_tool_name(name) && !name.starts_with(['-', '.'])
}

/// Whether `name` is a built-in's, in any case: a model must never be
/// offered a tool that reads like a built-in.
pub fn shadows_builtin(name: &str) -> Option<ToolName> {
    ToolName::ALL
        .into_iter()
        .find(|t| t.as_str().eq_ignore_ascii_case(name))
}

/// Reads `<dir>/manifest.toml`; `Err` holds every problem, with its key
/// path, prefixed by nothing (the caller names the file).
pub fn read(dir: &Path) -> Result<Manifest, Vec<String>> {
    let path = dir.join(FILE);
    let text = match std::fs::symlink_metadata(&path) {
        Ok(md) if !md.is_file() => return Err(vec![format!("{FILE}: not a regular file")]),
        Ok(md) if md.len() > MAX_BYTES => {
            return Err(vec![format!("{FILE}: over {MAX_BYTES} bytes")]);
        }
        Ok(_) => std::fs::read_to_string(&path).map_err(|e| vec![format!("{FILE}: {e}")])?,
        Err(e) => return Err(vec![format!("{FILE}: {e}")]),
    };
    parse(&text)
}

/// A manifest's text, checked.
pub fn parse(text: &str) -> Result<Manifest, Vec<String>> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| vec![format!("malformed TOML: {}", e.message().trim())])?;
    let mut errors = Vec::new();
    let mut top = table;
    let name = take_string(&mut top, "", "name", &mut errors).unwrap_or_default();
    let version = take_string(&mut top, "", "version", &mut errors).unwrap_or_default();
    match top.remove("capabilities") {
        None => errors.push("capabilities: missing; give capabilities = [\"tool\"]".into()),
        Some(toml::Value::Array(caps)) => {
            if caps.is_empty() {
                errors.push("capabilities: empty; give capabilities = [\"tool\"]".into());
            }
            for (i, c) in caps.iter().enumerate() {
                if c.as_str() != Some("tool") {
                    errors.push(format!(
                        "capabilities[{i}]: {} is not supported; the one capability is \"tool\"",
                        shown(c)
                    ));
                }
            }
        }
        Some(_) => errors.push("capabilities: expected an array such as [\"tool\"]".into()),
    }
    let mut tools = Vec::new();
    match top.remove("tools") {
        None => errors.push("tools: missing; a plugin declares one [[tools]] or more".into()),
        Some(toml::Value::Array(list)) if list.is_empty() => {
            errors.push("tools: empty; a plugin declares one [[tools]] or more".into())
        }
        Some(toml::Value::Array(list)) => {
            for (i, t) in list.into_iter().enumerate() {
                let at = format!("tools[{i}]");
                match t {
                    toml::Value::Table(t) => {
                        if let Some(tool) = read_tool(t, &at, &mut errors) {
                            if tools.iter().any(|o: &PluginTool| o.name == tool.name) {
                                errors.push(format!(
                                    "{at}.name: \"{}\" is declared twice",
                                    tool.name
                                ));
                            }
                            tools.push(tool);
                        }
                    }
                    _ => errors.push(format!("{at}: expected a table ([[tools]])")),
                }
            }
        }
        Some(_) => errors.push("tools: expected [[tools]] tables".into()),
    }
    unknown(&top, "", &mut errors);
    if !name.is_empty() && !valid_plugin_name(&name) {
        errors.push(format!(
            "name: \"{}\" is not a plugin name (letters, digits, _ and -, 1 to 64, not \
             starting with - or .)",
            crate::util::printable(&name)
        ));
    }
    if errors.is_empty() {
        Ok(Manifest {
            name,
            version,
            tools,
        })
    } else {
        Err(errors)
    }
}

fn read_tool(mut t: toml::Table, at: &str, errors: &mut Vec<String>) -> Option<PluginTool> {
    let before = errors.len();
    let name = take_string(&mut t, at, "name", errors).unwrap_or_default();
    if !name.is_empty() {
        if !valid_tool_name(&name) {
            errors.push(format!(
                "{at}.name: \"{}\" is not a name a model can call (^[a-zA-Z0-9_-]{{1,64}}$)",
                crate::util::printable(&name)
            ));
        } else if let Some(b) = shadows_builtin(&name) {
            errors.push(format!(
                "{at}.name: \"{name}\" is the built-in tool \"{b}\"'s name; a plugin's tool \
                 never shadows a built-in"
            ));
        }
    }
    let description = take_string(&mut t, at, "description", errors).unwrap_or_default();
    let command = match take_string(&mut t, at, "command", errors) {
        Some(c) => match relative_inside(&c) {
            Ok(p) => p,
            Err(why) => {
                errors.push(format!("{at}.command: {why}"));
                PathBuf::new()
            }
        },
        None => PathBuf::new(),
    };
    let schema = match t.remove("schema") {
        None => {
            errors.push(format!(
                "{at}.schema: missing; give a JSON Schema object, e.g. schema = {{ type = \
                 \"object\", properties = {{}} }}"
            ));
            Value::Null
        }
        Some(toml::Value::Table(s)) => {
            let v = serde_json::to_value(&s).unwrap_or(Value::Null);
            match v.get("type") {
                Some(Value::String(k)) if k == "object" => {}
                None => errors.push(format!(
                    "{at}.schema.type: missing; the arguments are a JSON object: type = \"object\""
                )),
                Some(other) => errors.push(format!(
                    "{at}.schema.type: {other} is not \"object\"; a tool's arguments are a JSON object"
                )),
            }
            if let Some(p) = v.get("properties")
                && !p.is_object()
            {
                errors.push(format!("{at}.schema.properties: expected a table"));
            }
            v
        }
        Some(other) => {
            errors.push(format!(
                "{at}.schema: {} is not a JSON Schema object (a table)",
                other.type_str()
            ));
            Value::Null
        }
    };
    let risk = match t.remove("risk") {
        None => Risk::Medium,
        Some(toml::Value::String(s)) => Risk::parse(&s).unwrap_or_else(|| {
            errors.push(format!(
                "{at}.risk: \"{}\" is not low, medium or high",
                crate::util::printable(&s)
            ));
            Risk::Medium
        }),
        Some(_) => {
            errors.push(format!(
                "{at}.risk: expected \"low\", \"medium\" or \"high\""
            ));
            Risk::Medium
        }
    };
    let read_only = match t.remove("read_only") {
        None => false,
        Some(toml::Value::Boolean(b)) => b,
        Some(_) => {
            errors.push(format!("{at}.read_only: expected true or false"));
            false
        }
    };
    // Read as the proxy will hold them (a port out of range refused here).
    let network = strings(&mut t, at, "network", errors, |h| {
        (h.len() <= 253 && crate::security::net::Grant::parse(h).is_ok())
            .then_some(())
            .ok_or("not a host name")
    });
    let env = strings(&mut t, at, "env", errors, |n| {
        let ok = !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        ok.then_some(()).ok_or("not an environment variable name")
    });
    let timeout_secs = match t.remove("timeout_secs") {
        None => None,
        Some(toml::Value::Integer(n)) if (1..=3600).contains(&n) => Some(n as u64),
        Some(toml::Value::Integer(n)) => {
            errors.push(format!(
                "{at}.timeout_secs: {n} is out of range; allowed: 1 to 3600"
            ));
            None
        }
        Some(_) => {
            errors.push(format!("{at}.timeout_secs: expected an integer"));
            None
        }
    };
    unknown(&t, at, errors);
    (errors.len() == before).then_some(PluginTool {
        name,
        description,
        command,
        schema,
        risk,
        read_only,
        network,
        timeout_secs,
        env,
    })
}

/// `command` as a path inside the plugin's directory: relative, and no
/// `..` that climbs out of it.
fn relative_inside(c: &str) -> Result<PathBuf, String> {
    let p = Path::new(c);
    if c.is_empty() || p.is_absolute() {
        return Err(format!(
            "\"{}\" is not a path relative to the plugin's directory",
            crate::util::printable(c)
        ));
    }
    let mut out = PathBuf::new();
    for part in p.components() {
        match part {
            Component::Normal(x) => out.push(x),
            Component::CurDir => {}
            Component::ParentDir if out.pop() => {}
            _ => {
                return Err(format!(
                    "\"{}\" leaves the plugin's directory",
                    crate::util::printable(c)
                ));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err("names the plugin's directory itself, not a file in it".into());
    }
    Ok(out)
}

fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("\"{}\"", crate::util::printable(s)),
        other => other.type_str().to_string(),
    }
}

fn key(at: &str, k: &str) -> String {
    if at.is_empty() {
        k.to_string()
    } else {
        format!("{at}.{k}")
    }
}

fn take_string(t: &mut toml::Table, at: &str, k: &str, errors: &mut Vec<String>) -> Option<String> {
    match t.remove(k) {
        Some(toml::Value::String(s)) if !s.trim().is_empty() => Some(s),
        Some(toml::Value::String(_)) => {
            errors.push(format!("{}: empty", key(at, k)));
            None
        }
        Some(other) => {
            errors.push(format!(
                "{}: expected a string, not {}",
                key(at, k),
                other.type_str()
            ));
            None
        }
        None => {
            errors.push(format!("{}: missing", key(at, k)));
            None
        }
    }
}

fn strings(
    t: &mut toml::Table,
    at: &str,
    k: &str,
    errors: &mut Vec<String>,
    check: impl Fn(&str) -> Result<(), &'static str>,
) -> Vec<String> {
    let mut out = Vec::new();
    match t.remove(k) {
        None => {}
        Some(toml::Value::Array(list)) => {
            for (i, v) in list.iter().enumerate() {
                match v.as_str() {
                    Some(s) => match check(s) {
                        Ok(()) => out.push(s.to_string()),
                        Err(why) => errors.push(format!(
                            "{}[{i}]: \"{}\" is {why}",
                            key(at, k),
                            crate::util::printable(s)
                        )),
                    },
                    None => errors.push(format!("{}[{i}]: expected a string", key(at, k))),
                }
            }
        }
        Some(_) => errors.push(format!("{}: expected an array of strings", key(at, k))),
    }
    out
}

fn unknown(t: &toml::Table, at: &str, errors: &mut Vec<String>) {
    for k in t.keys() {
        errors.push(format!(
            "{}: unknown key",
            key(at, &crate::util::printable(k))
        ));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const ECHO: &str = r#"
name = "echo"
version = "0.1.0"
capabilities = ["tool"]
[[tools]]
name = "echo"
description = "Echoes its text."
command = "./bin/echo.sh"
schema = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }
risk = "low"
read_only = true
"#;

    #[test]
    fn the_seed_manifest_reads_with_defaults() {
        let m = parse(ECHO).unwrap();
        assert_eq!((m.name.as_str(), m.version.as_str()), ("echo", "0.1.0"));
        let t = &m.tools[0];
        assert_eq!(t.command, PathBuf::from("bin/echo.sh"));
        assert_eq!((t.risk, t.read_only), (Risk::Low, true));
        assert!(t.network.is_empty() && t.env.is_empty() && t.timeout_secs.is_none());
        assert_eq!(t.schema["properties"]["text"]["type"], "string");
        let m = parse(&ECHO.replace("risk = \"low\"\nread_only = true\n", "")).unwrap();
        assert_eq!(
            (m.tools[0].risk, m.tools[0].read_only),
            (Risk::Medium, false)
        );
    }

    #[test]
    fn every_problem_is_named_by_its_key_path_in_one_pass() {
        let text = r#"
name = "bad name"
capabilities = ["tool", "gpu"]
colour = "blue"
[[tools]]
name = "Shell"
description = ""
command = "../outside.sh"
schema = "object"
risk = "extreme"
read_only = "yes"
network = ["example.com", "https://example.com/"]
env = ["OK_NAME", "9BAD"]
timeout_secs = 0
extra = 1
[[tools]]
name = "x"
description = "d"
command = "/bin/sh"
schema = { type = "array" }
"#;
        let e = parse(text).unwrap_err();
        let want = [
            "version: missing",
            "capabilities[1]: \"gpu\" is not supported; the one capability is \"tool\"",
            "tools[0].name: \"Shell\" is the built-in tool \"shell\"'s name; a plugin's tool never shadows a built-in",
            "tools[0].description: empty",
            "tools[0].command: \"../outside.sh\" leaves the plugin's directory",
            "tools[0].schema: string is not a JSON Schema object (a table)",
            "tools[0].risk: \"extreme\" is not low, medium or high",
            "tools[0].read_only: expected true or false",
            "tools[0].network[1]: \"https://example.com/\" is not a host name",
            "tools[0].env[1]: \"9BAD\" is not an environment variable name",
            "tools[0].timeout_secs: 0 is out of range; allowed: 1 to 3600",
            "tools[0].extra: unknown key",
            "tools[1].command: \"/bin/sh\" is not a path relative to the plugin's directory",
            "tools[1].schema.type: \"array\" is not \"object\"",
            "colour: unknown key",
            "name: \"bad name\" is not a plugin name",
        ];
        for w in want {
            assert!(e.iter().any(|l| l.starts_with(w)), "{w}\n{e:#?}");
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }

    #[test]
    fn commands_stay_inside() {
        assert_eq!(relative_inside("a/../b.sh").unwrap(), PathBuf::from("b.sh"));
        assert!(relative_inside("a/../../b.sh").is_err());
        assert!(relative_inside(".").is_err());
    }
}
