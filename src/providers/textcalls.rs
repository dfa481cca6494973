//! Tool calls written as text by models without native tool calling (or
//! that fall back to text): `<tool_call>` blocks and fenced blocks, and
//! `<think>` reasoning to drop. Model text is arbitrary Unicode: every
//! offset here comes from the text itself, never from a transformed copy.

use super::ToolCall;
use serde_json::{Value, json};

/// Arguments arrive as a JSON string (OpenAI) or an object (some servers).
/// Anything unparsable stays a string, which the gate refuses with a reason
/// the model can read.
pub(crate) fn decode_arguments(v: &Value) -> Value {
    match v {
        Value::String(s) if s.trim().is_empty() => json!({}),
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        Value::Null => json!({}),
        other => other.clone(),
    }
}

/// Drops `<think>…</think>` reasoning; a closing tag with no opening one
/// (some templates open it in the prompt) drops everything before it.
pub fn strip_think(text: &str) -> String {
    let mut out = text.to_string();
    loop {
        match (find_ci(&out, "<think>"), find_ci(&out, "</think>")) {
            (Some(a), Some(b)) if a < b => out.replace_range(a..b + "</think>".len(), ""),
            (None, Some(b)) | (Some(_), Some(b)) => out.replace_range(..b + "</think>".len(), ""),
            (Some(a), None) => {
                out.truncate(a);
                break;
            }
            (None, None) => break,
        }
    }
    out
}

/// Byte offset of an ASCII `needle` in `hay`, ignoring ASCII case. Offsets
/// come from `hay` itself: lowercasing a copy can change its length (`İ`
/// is two bytes, its lowercase three), and slicing with the copy's offsets
/// panics or cuts the wrong place.
fn find_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.is_empty() || h.len() < n.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

pub(crate) fn has_text_call(text: &str) -> bool {
    find_ci(text, "<tool_call>").is_some() || find_ci(text, "```tool_call").is_some()
}

/// Reads `<tool_call>{…}</tool_call>` blocks and ```` ```tool_call ```` fences.
/// Bare JSON in prose is never a call. Returns the calls and the text left.
pub fn parse_text_calls(text: &str) -> (Vec<ToolCall>, String) {
    let mut calls = Vec::new();
    let mut rest = String::new();
    let mut s = text;
    loop {
        let tag = find_ci(s, "<tool_call>");
        let fence = find_ci(s, "```tool_call");
        let (start, open_len, close) = match (tag, fence) {
            (Some(t), Some(f)) if f < t => (f, "```tool_call".len(), "```"),
            (Some(t), _) => (t, "<tool_call>".len(), "</tool_call>"),
            (None, Some(f)) => (f, "```tool_call".len(), "```"),
            (None, None) => {
                rest.push_str(s);
                break;
            }
        };
        rest.push_str(&s[..start]);
        let after = &s[start + open_len..];
        let (inner, next) = match find_ci(after, close) {
            Some(end) => (&after[..end], &after[end + close.len()..]),
            None => (after, ""),
        };
        calls.push(text_call(
            inner.trim().trim_start_matches("json").trim(),
            calls.len(),
        ));
        s = next;
    }
    (calls, rest)
}

fn text_call(inner: &str, index: usize) -> ToolCall {
    let id = format!("call_text_{index}");
    match serde_json::from_str::<Value>(inner) {
        // `{"name", "arguments"}`, and the `{"tool", "params"}` spelling
        // small models also write.
        Ok(v) => ToolCall {
            id,
            name: v["name"]
                .as_str()
                .or_else(|| v["tool"].as_str())
                .unwrap_or("")
                .to_string(),
            arguments: decode_arguments(
                v.get("arguments")
                    .or_else(|| v.get("parameters"))
                    .or_else(|| v.get("params"))
                    .unwrap_or(&Value::Null),
            ),
        },
        Err(_) => ToolCall {
            id,
            name: String::new(),
            arguments: Value::String(inner.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_and_params_spelling_is_a_call() {
        let (calls, _) = parse_text_calls(
            "<tool_call>{\"tool\": \"file_read\", \"params\": {\"path\": \"a\"}}</tool_call>",
        );
        assert_eq!(calls[0].name, "file_read");
        assert_eq!(calls[0].arguments, json!({"path": "a"}));
    }

    #[test]
    fn text_with_length_changing_case_never_panics() {
        // `İ` lowercases to three bytes: offsets from a lowercased copy
        // would cut the original in the wrong place (or mid-character).
        let (calls, rest) = parse_text_calls(
            "İİİ <TOOL_CALL>{\"name\": \"time\", \"arguments\": {}}</Tool_Call> İ tail",
        );
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "time");
        assert_eq!(rest, "İİİ  İ tail");
        assert_eq!(strip_think("İİ<think>İ hidden</think>shown"), "İİshown");
        assert_eq!(strip_think("İİ reasoning</THINK>answer"), "answer");
        let mut rng = fastrand::Rng::with_seed(11);
        let parts = [
            "İ",
            "ẞ",
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "```tool_call",
            "```",
            "{\"name\":",
            "x",
            "é",
        ];
        for _ in 0..5_000 {
            let n = rng.usize(0..12);
            let t: String = (0..n).map(|_| parts[rng.usize(..parts.len())]).collect();
            let _ = parse_text_calls(&t);
            let _ = strip_think(&t);
        }
    }

    #[test]
    fn text_calls_in_tags_and_fences() {
        let (calls, rest) = parse_text_calls(
            "Sure.\n<tool_call>{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}</tool_call>\n\
             ```tool_call\n{\"name\": \"time\", \"arguments\": \"{}\"}\n```\nDone.",
        );
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].name.as_str(), &calls[0].arguments),
            ("file_list", &json!({"path": "."}))
        );
        assert_eq!(
            (calls[1].name.as_str(), &calls[1].arguments),
            ("time", &json!({}))
        );
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>(),
            ["Sure.", "Done."]
        );
        let (calls, _) =
            parse_text_calls("<TOOL_CALL>{\"name\": \"x\", \"parameters\": {\"a\": 1}}");
        assert_eq!(
            (calls[0].name.as_str(), &calls[0].arguments),
            ("x", &json!({"a": 1}))
        );
        let (calls, _) = parse_text_calls("<tool_call>{not json</tool_call>");
        assert_eq!(calls[0].arguments, Value::String("{not json".into()));
        let (calls, rest) = parse_text_calls("Here is JSON: {\"name\": \"rm\", \"arguments\": {}}");
        assert!(
            calls.is_empty() && rest.contains("JSON"),
            "bare JSON is not a call"
        );
    }

    #[test]
    fn think_blocks_are_removed() {
        assert_eq!(strip_think("<think>hmm</think>Answer"), "Answer");
        assert_eq!(strip_think("reasoning...</think>Answer"), "Answer");
        assert_eq!(strip_think("A<think>x</think>B<think>y</think>C"), "ABC");
        assert_eq!(strip_think("Answer<think>unfinished"), "Answer");
    }

    #[test]
    fn argument_decoding() {
        assert_eq!(decode_arguments(&json!("{\"a\":1}")), json!({"a": 1}));
        assert_eq!(decode_arguments(&json!("")), json!({}));
        assert_eq!(decode_arguments(&json!({"a": 1})), json!({"a": 1}));
        assert_eq!(decode_arguments(&json!("{oops")), json!("{oops"));
    }
}
