//! What the operator approved of a server: its tools' definitions as they
//! were listed (`<state>/pins/mcp/NAME.json`), from which a run offers
//! them without starting the server; and, once a started server lists
//! other definitions, a mark (`NAME.changed.json`, what it listed) that
//! keeps its tools refused until `latchclaw mcp approve NAME`. A leaf of
//! `mcp`: paths, the file format and the comparison.

use super::content::McpTool;
use crate::config::{Config, McpServerConfig};
use serde_json::{Value, json};
use std::path::PathBuf;

fn dir(cfg: &Config) -> PathBuf {
    cfg.state_dir.join("pins").join("mcp")
}

pub fn pin_path(cfg: &Config, server: &str) -> PathBuf {
    dir(cfg).join(format!("{server}.json"))
}

fn changed_path(cfg: &Config, server: &str) -> PathBuf {
    dir(cfg).join(format!("{server}.changed.json"))
}

/// The definitions of `tools` as pinned: each tool's server name, the name
/// a model calls, its description (sanitised), its schema and the hash of
/// its definition as the server sent it; and the hash of them all.
pub fn definitions(server: &str, tools: &[McpTool]) -> Value {
    let tools = Value::Array(tools.iter().map(McpTool::definition).collect());
    let hash = crate::util::sha256_hex(tools.to_string().as_bytes());
    json!({"server": server, "hash": hash, "tools": tools})
}

fn read_json(path: &std::path::Path) -> Option<Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// The approved definitions (`None`: never approved).
pub fn read(cfg: &Config, server: &str) -> Option<Value> {
    read_json(&pin_path(cfg, server))
}

/// What a started server listed that differs from its pin, if a run found
/// that (its tools are refused until approved again).
pub fn changed(cfg: &Config, server: &str) -> Option<Value> {
    read_json(&changed_path(cfg, server))
}

fn write(path: &std::path::Path, cfg: &Config, v: &Value) -> Result<(), String> {
    for d in [cfg.state_dir.join("pins"), dir(cfg)] {
        crate::util::private_dir(&d).map_err(|e| e.to_string())?;
    }
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    crate::util::write_file_atomic(path, text.as_bytes(), 0o600, true).map_err(|e| e.to_string())
}

/// Records `current` as approved and forgets any change found.
pub fn approve(cfg: &Config, server: &str, current: &Value) -> Result<(), String> {
    write(&pin_path(cfg, server), cfg, current)?;
    match std::fs::remove_file(changed_path(cfg, server)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
        _ => Ok(()),
    }
}

/// Marks the server's definitions changed: what it listed now.
pub fn mark_changed(cfg: &Config, server: &str, current: &Value) -> Result<(), String> {
    write(&changed_path(cfg, server), cfg, current)
}

/// Forgets a server's pin and mark (`mcp approve --forget`, a removed server).
pub fn forget(cfg: &Config, server: &str) {
    let _ = std::fs::remove_file(pin_path(cfg, server));
    let _ = std::fs::remove_file(changed_path(cfg, server));
}

/// Whether the tools a started server offers now are the ones approved:
/// each one pinned with the same definition, and each pinned one that the
/// config still allows still listed. A config that allows fewer tools
/// than were approved is no change; a tool newly listed or newly allowed is.
pub fn matches(pinned: &Value, config: &McpServerConfig, now: &[McpTool]) -> bool {
    let empty = Vec::new();
    let old = pinned["tools"].as_array().unwrap_or(&empty);
    let same = |t: &McpTool| {
        old.iter().any(|p| {
            p["name"] == t.name.as_str() && p["definition_sha256"] == t.definition_sha256.as_str()
        })
    };
    let listed = |p: &Value| {
        let name = p["name"].as_str().unwrap_or("");
        !config.tool_allowed(name) || now.iter().any(|t| t.name == name)
    };
    now.iter().all(same) && old.iter().all(listed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tool(name: &str, def: &str) -> McpTool {
        McpTool {
            name: name.into(),
            model_name: format!("mcp_s_{name}"),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            read_only: false,
            definition_sha256: def.into(),
        }
    }

    fn config(deny: &[&str]) -> McpServerConfig {
        McpServerConfig {
            url: None,
            bearer_token_env: None,
            name: "s".into(),
            command: "x".into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            network: Vec::new(),
            timeout_secs: 30,
            tools_allow: None,
            tools_deny: deny.iter().map(|s| s.to_string()).collect(),
            risk: Default::default(),
            read_only_tools: Vec::new(),
            read_paths: Vec::new(),
        }
    }

    #[test]
    fn a_changed_added_or_vanished_tool_is_a_change_a_narrower_config_is_not() {
        let pin = definitions("s", &[tool("a", "1"), tool("b", "2")]);
        let open = config(&[]);
        assert!(matches(&pin, &open, &[tool("a", "1"), tool("b", "2")]));
        // Its description or schema changed: another definition hash.
        assert!(!matches(&pin, &open, &[tool("a", "1"), tool("b", "3")]));
        assert!(!matches(
            &pin,
            &open,
            &[tool("a", "1"), tool("b", "2"), tool("c", "4")]
        ));
        assert!(!matches(&pin, &open, &[tool("a", "1")]));
        // Denied by the operator since: not listed, and no change.
        assert!(matches(&pin, &config(&["b"]), &[tool("a", "1")]));
    }
}
