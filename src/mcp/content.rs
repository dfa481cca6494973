//! What a server says, made fit for a model and an operator: the names a
//! model sees (`mcp_<server>_<tool>`, valid function names), descriptions
//! with control characters and escape sequences removed and capped, and a
//! tool result's content as text. A leaf of `mcp`.

use serde_json::Value;

/// One tool a server offers and the config allows.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// The server's own name for it (what `tools/call` sends).
    pub name: String,
    /// The name a model sees: `mcp_<server>_<tool>`, a valid function name.
    pub model_name: String,
    /// Sanitised and capped ([`sanitize`]); not yet framed as data.
    pub description: String,
    /// The JSON Schema of its arguments (an object).
    pub input_schema: Value,
    /// Listed in the server's `read_only_tools`.
    pub read_only: bool,
    /// SHA-256 (hex) of the definition as the server sent it — its name,
    /// raw description and input schema, as compact JSON with sorted keys —
    /// for pinning: a changed definition has another hash.
    pub definition_sha256: String,
}

impl McpTool {
    /// The tool as pinned and listed: its names, description, schema and
    /// definition hash (not `read_only`: that is the config's, not the
    /// server's).
    pub fn definition(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "model_name": self.model_name,
            "description": self.description,
            "input_schema": self.input_schema,
            "definition_sha256": self.definition_sha256,
        })
    }
}

/// Longest name a model sees (OpenAI's function-name rule).
pub const MODEL_NAME_MAX: usize = 64;

/// Longest description a model sees, in chars.
pub const DESCRIPTION_MAX_CHARS: usize = 1024;

/// The name a model sees for `server`'s tool `tool`: `mcp_<server>_<tool>`
/// with every character outside `[a-zA-Z0-9_-]` made `_`; when that is
/// longer than 64, cut and ended with a hash of the tool's own name, so
/// two long names stay apart. Always matches `^[a-zA-Z0-9_-]{1,64}$`, and
/// never a built-in's name (none starts with `mcp_`).
pub fn model_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let name = format!("mcp_{}_{}", clean(server), clean(tool));
    if name.len() <= MODEL_NAME_MAX {
        return name;
    }
    with_hash(&name, tool)
}

/// `name` cut to leave room for `_` and 8 hex digits of `seed`'s hash.
pub fn with_hash(name: &str, seed: &str) -> String {
    let hash = crate::util::sha256_hex(seed.as_bytes());
    let keep = MODEL_NAME_MAX - 9;
    format!("{}_{}", &name[..keep.min(name.len())], &hash[..8])
}

pub use crate::util::sanitize;

/// Whether `name` is a valid function name for a model.
pub fn valid_model_name(name: &str) -> bool {
    (1..=MODEL_NAME_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A tool result's `content` as the text a model reads: text parts as
/// they are, every other kind (image, audio, an embedded resource, a
/// resource link, anything newer) said in one line. `structured` stands in
/// when there is no content at all.
pub fn content_text(content: Option<&Value>, structured: Option<&Value>) -> String {
    let mut parts: Vec<String> = Vec::new();
    for item in content.and_then(Value::as_array).into_iter().flatten() {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
        let one = |s: &str| crate::util::one_line(&sanitize(s, 200), 200);
        let part = match s("type") {
            "text" => s("text").to_string(),
            t @ ("image" | "audio") => format!(
                "[{t}: {}, {} bytes of base64 not shown]",
                one(s("mimeType")),
                s("data").len()
            ),
            "resource" => {
                let r = item.get("resource").cloned().unwrap_or_default();
                let rs = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                match r.get("text").and_then(Value::as_str) {
                    Some(text) => format!(
                        "[resource {} ({}), {} chars:]\n{text}",
                        one(&rs("uri")),
                        one(&rs("mimeType")),
                        text.chars().count()
                    ),
                    None => format!(
                        "[resource {} ({}): {} bytes of binary not shown]",
                        one(&rs("uri")),
                        one(&rs("mimeType")),
                        rs("blob").len()
                    ),
                }
            }
            "resource_link" => format!(
                "[resource link: {} {} ({})]",
                one(s("uri")),
                one(s("name")),
                one(s("mimeType"))
            ),
            other => format!("[content of type \"{}\" not shown]", one(other)),
        };
        parts.push(part);
    }
    if parts.is_empty()
        && let Some(v) = structured
    {
        return v.to_string();
    }
    parts.join("\n")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn model_names_are_valid_and_distinct() {
        assert_eq!(model_name("git", "git_log"), "mcp_git_git_log");
        assert_eq!(model_name("fs", "read.file/x y"), "mcp_fs_read_file_x_y");
        assert_eq!(model_name("evil", "shell"), "mcp_evil_shell");
        let long_a = model_name("s", &"a".repeat(100));
        let long_b = model_name("s", &format!("{}b", "a".repeat(99)));
        assert!(valid_model_name(&long_a) && valid_model_name(&long_b));
        assert_ne!(long_a, long_b);
        assert!(valid_model_name(&model_name("s", "ünï€ødé")));
        assert!(!valid_model_name("a b") && !valid_model_name(""));
    }

    #[test]
    fn descriptions_lose_escapes_controls_and_length() {
        let d =
            "Reads\u{1b}[31m red\u{1b}[0m\u{1b}]0;title\u{7} a\u{202e}b\u{200b}c\n\n\tfile\u{0}s";
        assert_eq!(sanitize(d, 100), "Reads red abc files");
        assert_eq!(
            sanitize(&"x".repeat(2000), 10),
            format!("{}…", "x".repeat(10))
        );
        assert_eq!(sanitize("\u{1b}]8;;http://e\u{1b}\\link", 100), "link");
    }

    #[test]
    fn content_other_than_text_is_one_line() {
        let c = json!([
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "text/plain", "text": "body"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
            {"type": "hologram"}
        ]);
        let t = content_text(Some(&c), None);
        assert!(
            t.starts_with("hello\n[image: image/png, 4 bytes of base64 not shown]\n"),
            "{t}"
        );
        assert!(
            t.contains("[resource file:///a (text/plain), 4 chars:]\nbody"),
            "{t}"
        );
        assert!(t.contains("[resource link: file:///b b ()]"), "{t}");
        assert!(
            t.ends_with("[content of type \"hologram\" not shown]"),
            "{t}"
        );
        assert_eq!(content_text(None, Some(&json!({"a": 1}))), "{\"a\":1}");
    }
}
