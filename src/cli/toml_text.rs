//! TOML text for what latchclaw writes itself: `init`/`onboard`'s config
//! and `config show`. A few dozen lines instead of the `toml` crate's
//! writer (its `display` feature): the values are strings, numbers,
//! booleans, lists of those and tables.

use serde_json::Value;
use std::fmt::Write;

/// A TOML basic string.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A key: bare when TOML allows it, quoted otherwise.
fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { k.to_string() } else { string(k) }
}

/// A value that fits on one line (not a table).
fn inline(v: &Value) -> Result<String, String> {
    Ok(match v {
        Value::String(s) => string(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            // `{:?}` writes the shortest form that reads back the same, with
            // a `.0` on whole numbers (a TOML float needs its point).
            format!("{f:?}")
        }
        Value::Number(n) => n.to_string(),
        Value::Array(items) => {
            let parts: Result<Vec<String>, String> = items.iter().map(inline).collect();
            format!("[{}]", parts?.join(", "))
        }
        Value::Object(m) => {
            let parts: Result<Vec<String>, String> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| Ok(format!("{} = {}", key(k), inline(v)?)))
                .collect();
            format!("{{ {} }}", parts?.join(", "))
        }
        Value::Null => return Err("a null has no TOML form".into()),
    })
}

/// A document from a JSON object: each table's plain keys, then its tables
/// as `[dotted.headers]`. Nulls are left out.
pub fn document(v: &Value) -> Result<String, String> {
    let mut out = String::new();
    table(&mut out, &mut Vec::new(), v)?;
    Ok(out)
}

fn table(out: &mut String, path: &mut Vec<String>, v: &Value) -> Result<(), String> {
    let Value::Object(m) = v else {
        return Err("a TOML document is a table".into());
    };
    let (tables, plain): (Vec<_>, Vec<_>) = m
        .iter()
        .filter(|(_, v)| !v.is_null())
        .partition(|(_, v)| v.is_object());
    if !path.is_empty() && (!plain.is_empty() || tables.is_empty()) {
        let _ = writeln!(out, "\n[{}]", path.join("."));
    }
    for (k, v) in plain {
        let _ = writeln!(out, "{} = {}", key(k), inline(v)?);
    }
    for (k, v) in tables {
        path.push(key(k));
        table(out, path, v)?;
        path.pop();
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_the_same() {
        let v = serde_json::json!({
            "top": "a \"quoted\" \\ path\nwith\ttabs \u{1}",
            "n": 3, "f": 0.5, "whole": 2.0, "on": true, "gone": null,
            "list": ["x", "y z"],
            "empty": {},
            "t": {"k": 1, "inner": {"odd key": "v", "rate": {"per_minute": 3}}},
        });
        let text = document(&v).unwrap();
        let back: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut expect = v.clone();
        expect.as_object_mut().unwrap().remove("gone");
        assert_eq!(serde_json::to_value(back).unwrap(), expect, "{text}");
    }
}
