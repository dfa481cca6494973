//! Tool calls written as text by models without native tool calling (or
//! that fall back to text): `<tool_call>` blocks and fenced blocks, and
//! `<think>` reasoning to drop. Model text is arbitrary Unicode: every
//! offset here comes from the text itself, never from a transformed copy.

use super::provider::{ToolCall, ToolSpec};
use serde_json::{Value, json};

/// Markup that opens a tool call written as text, in the forms models use
/// (lower case; matched ignoring ASCII case). The streaming display shows
/// nothing of a round after one; the runtime never prints one as an answer.
pub const CALL_OPENERS: &[&str] = &[
    "<tool_call",
    "<tool_result",
    "<function=",
    "[tool_calls]",
    "<|python_tag|>",
    "```tool_call",
];

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
pub(crate) fn find_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.is_empty() || h.len() < n.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Reads the tool calls a model wrote as text, in every form small models
/// use: `<tool_call>{…}</tool_call>` blocks (an unclosed one runs to the
/// end), ```` ```tool_call ```` fences, ```` ```json ```` (or bare ```` ``` ````)
/// fences holding `{"name", "arguments"}` objects, and a reply that is
/// nothing but such objects. Objects may say `tool`/`params` or
/// `parameters` instead, and their arguments may be a JSON string.
///
/// A tag or a `tool_call` fence is a call whatever it names (an unknown
/// name comes back to the model as an error it can read); a plain fence or
/// bare JSON is a call only when it names one of `known`, so JSON the
/// model shows the user stays text. An object with no name whose keys fit
/// exactly one tool's parameters (`{"command": "wc -l a"}`: small models
/// drop the wrapper) is a call to that tool. Returns the calls and the text left;
/// when there are calls, invented `<tool_result>` blocks are dropped from
/// that text (the real results come from the tools).
pub fn parse_text_calls(text: &str, known: &[ToolSpec]) -> (Vec<ToolCall>, String) {
    let mut calls = Vec::new();
    let mut rest = String::new();
    let mut s = text;
    // Inside a fence of something else: the next ``` closes it.
    let mut in_code = false;
    loop {
        let tag = find_ci(s, "<tool_call>");
        let fence = find_ci(s, "```");
        if let Some(f) = fence.filter(|&f| in_code && tag.is_none_or(|t| f < t)) {
            rest.push_str(&s[..f + 3]);
            s = &s[f + 3..];
            in_code = false;
            continue;
        }
        let (start, open_len, close, any_name) = match (tag, fence) {
            (Some(t), Some(f)) if f < t => fence_open(s, f),
            (Some(t), _) => (t, "<tool_call>".len(), "</tool_call>", true),
            (None, Some(f)) => fence_open(s, f),
            (None, None) => {
                rest.push_str(s);
                break;
            }
        };
        let after = &s[start + open_len..];
        let (inner, next) = match find_ci(after, close) {
            Some(end) => (&after[..end], &after[end + close.len()..]),
            None => (after, ""),
        };
        let found = if any_name {
            vec![text_call(inner.trim(), calls.len())]
        } else {
            objects_naming(inner, known, calls.len())
        };
        if found.is_empty() {
            // A fence of something else is text: keep its opening mark and
            // read on inside it (it may hold a `<tool_call>` tag).
            rest.push_str(&s[..start + 3]);
            s = &s[start + 3..];
            in_code = true;
            continue;
        }
        rest.push_str(&s[..start]);
        calls.extend(found);
        s = next;
    }
    if calls.is_empty() {
        // A reply that is nothing but call objects.
        calls = objects_naming(&rest, known, 0);
        if !calls.is_empty() {
            rest.clear();
        }
    }
    if !calls.is_empty() {
        rest = drop_blocks(&rest, "<tool_result", "</tool_result>");
    }
    (calls, rest)
}

/// A fence at `f`: (start, opening length, closing mark, any name?). The
/// opening runs to the end of its line (```` ```json ````, ```` ```tool_call ````).
fn fence_open(s: &str, f: usize) -> (usize, usize, &'static str, bool) {
    let after = &s[f + 3..];
    let word = after
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(after.len());
    let any_name = after[..word].eq_ignore_ascii_case("tool_call");
    // The info word, then the end of the line or (no line break) a `{`;
    // anything else (```` ```` ````, ```` ```x y ````) opens no call: its
    // inside then does not start with `{` and stays text.
    let rest = &after[word..];
    let spaces = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    let open_len = match rest[spaces..].chars().next() {
        Some('{') => 3 + word + spaces,
        Some('\r' | '\n') | None => 3 + word + spaces,
        Some(_) => 3,
    };
    (f, open_len, "```", any_name)
}

/// The JSON objects in `inner` (one, an array, or several in a row) that
/// name a known tool; none unless *all* of `inner` is such objects.
fn objects_naming(inner: &str, known: &[ToolSpec], first: usize) -> Vec<ToolCall> {
    let trimmed = inner.trim();
    if !trimmed.starts_with('{') && !trimmed.starts_with('[') {
        return Vec::new();
    }
    let mut values = Vec::new();
    for v in serde_json::Deserializer::from_str(trimmed).into_iter::<Value>() {
        match v {
            Ok(Value::Array(items)) => values.extend(items),
            Ok(v) => values.push(v),
            Err(_) => return Vec::new(),
        }
    }
    let calls: Vec<ToolCall> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut call = call_from(v, first + i);
            if call.name.is_empty()
                && let Some(tool) = tool_for_arguments(v, known)
            {
                call.name = tool.to_string();
                call.arguments = v.clone();
            }
            call
        })
        .collect();
    if calls.is_empty() || !calls.iter().all(|c| known.iter().any(|t| t.name == c.name)) {
        return Vec::new();
    }
    calls
}

/// The one tool whose parameters an unnamed object fits: every key is one
/// of its properties and every required property is there. None when no
/// tool or several fit.
pub fn tool_for_arguments<'a>(v: &Value, known: &'a [ToolSpec]) -> Option<&'a str> {
    let obj = v.as_object().filter(|o| !o.is_empty())?;
    if ["name", "tool", "function"]
        .iter()
        .any(|k| obj.contains_key(*k))
    {
        return None;
    }
    let mut fits = known.iter().filter(|t| {
        let props = t.parameters["properties"].as_object();
        let has = |k: &str| props.is_some_and(|p| p.contains_key(k));
        let required = t.parameters["required"].as_array();
        obj.keys().all(|k| has(k))
            && required.is_none_or(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .all(|k| obj.contains_key(k))
            })
    });
    let one = fits.next()?;
    fits.next().is_none().then_some(one.name.as_str())
}

/// Removes `open…close` blocks (an unclosed one runs to the end).
fn drop_blocks(text: &str, open: &str, close: &str) -> String {
    let mut out = String::new();
    let mut s = text;
    while let Some(a) = find_ci(s, open) {
        out.push_str(&s[..a]);
        s = match find_ci(&s[a..], close) {
            Some(b) => &s[a + b + close.len()..],
            None => "",
        };
    }
    out.push_str(s);
    out
}

fn text_call(inner: &str, index: usize) -> ToolCall {
    let inner = inner.strip_prefix("json").unwrap_or(inner).trim();
    match serde_json::from_str::<Value>(inner) {
        Ok(v) => call_from(&v, index),
        Err(_) => ToolCall {
            id: format!("call_text_{index}"),
            name: String::new(),
            arguments: Value::String(inner.to_string()),
        },
    }
}

/// `{"name", "arguments"}`, and the `{"tool", "params"}` and `parameters`
/// spellings small models also write.
fn call_from(v: &Value, index: usize) -> ToolCall {
    ToolCall {
        id: format!("call_text_{index}"),
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
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::util::arbitrary;

    fn known() -> Vec<ToolSpec> {
        let spec = |name: &str, parameters: Value| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters,
        };
        vec![
            spec("time", json!({"type": "object", "properties": {}})),
            spec(
                "file_list",
                json!({"properties": {"path": {"type": "string"}}}),
            ),
            spec(
                "file_read",
                json!({"properties": {"path": {}}, "required": ["path"]}),
            ),
            spec(
                "shell",
                json!({"properties": {"command": {}}, "required": ["command"]}),
            ),
        ]
    }

    fn calls(text: &str) -> (Vec<(String, Value)>, String) {
        let (calls, rest) = parse_text_calls(text, &known());
        (
            calls.into_iter().map(|c| (c.name, c.arguments)).collect(),
            rest,
        )
    }

    #[test]
    fn tool_and_params_spelling_is_a_call() {
        let (c, _) = calls(
            "<tool_call>{\"tool\": \"file_read\", \"params\": {\"path\": \"a\"}}</tool_call>",
        );
        assert_eq!(c, [("file_read".into(), json!({"path": "a"}))]);
    }

    #[test]
    fn text_calls_in_tags_and_fences() {
        let (c, rest) = calls(
            "Sure.\n<tool_call>{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}</tool_call>\n\
             ```tool_call\n{\"name\": \"time\", \"arguments\": \"{}\"}\n```\nDone.",
        );
        assert_eq!(
            c,
            [
                ("file_list".into(), json!({"path": "."})),
                ("time".into(), json!({}))
            ]
        );
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>(),
            ["Sure.", "Done."]
        );
        let (c, _) = calls("<TOOL_CALL>{\"name\": \"x\", \"parameters\": {\"a\": 1}}");
        assert_eq!(c, [("x".into(), json!({"a": 1}))]);
        let (c, _) = calls("<tool_call>{not json</tool_call>");
        assert_eq!(c, [(String::new(), Value::String("{not json".into()))]);
    }

    #[test]
    fn fenced_json_the_way_qwen_coder_writes_it() {
        // The form these models write in text mode, one or several calls.
        let (c, rest) =
            calls("```json\n{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}\n```");
        assert_eq!(c, [("file_list".into(), json!({"path": "."}))]);
        assert_eq!(rest.trim(), "");
        let (c, _) = calls(
            "I will check.\n```json\n[{\"name\": \"time\", \"arguments\": {}},\n\
             {\"name\": \"shell\", \"arguments\": \"{\\\"command\\\": \\\"wc -l a\\\"}\"}]\n```",
        );
        assert_eq!(
            c,
            [
                ("time".into(), json!({})),
                ("shell".into(), json!({"command": "wc -l a"}))
            ]
        );
        let (c, _) =
            calls("```\n{\"name\": \"time\", \"arguments\": {}}\n{\"name\": \"time\"}\n```");
        assert_eq!(c.len(), 2);
        // No line break after the info word, no closing fence.
        let (c, _) = calls("```json{\"name\": \"time\", \"arguments\": {}}");
        assert_eq!(c, [("time".into(), json!({}))]);
    }

    #[test]
    fn json_that_is_not_a_call_stays_text() {
        // Unknown names, other objects, JSON inside prose, other fences.
        for t in [
            "Here is JSON: {\"name\": \"rm\", \"arguments\": {}}",
            "```json\n{\"name\": \"Ada\", \"age\": 36}\n```",
            "```json\n{\"name\": \"time\"} trailing words\n```",
            "```python\nprint({\"name\": \"time\"})\n```",
            "{\"name\": \"time\", \"arguments\": {}} and then some prose",
        ] {
            let (c, rest) = calls(t);
            assert!(c.is_empty(), "{t}: {c:?}");
            assert_eq!(rest, t);
        }
        // A bare reply that is only a call is one.
        let (c, rest) = calls("  {\"name\": \"time\", \"arguments\": {}}\n");
        assert_eq!((c.len(), rest.as_str()), (1, ""));
        // A tag inside a fence of something else is still read.
        let (c, _) = calls("```\n<tool_call>{\"name\": \"time\"}</tool_call>\n```");
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn an_unnamed_object_that_fits_one_tool_calls_it() {
        let (c, _) = calls("```json\n{\n  \"command\": \"wc -l notes.txt\"\n}\n```");
        assert_eq!(c, [("shell".into(), json!({"command": "wc -l notes.txt"}))]);
        // `path` fits file_list and file_read: no guess.
        let (c, _) = calls("```json\n{\"path\": \".\"}\n```");
        assert!(c.is_empty());
        // Keys no tool has, an empty object: no call.
        for t in [
            "```json\n{\"command\": \"ls\", \"x\": 1}\n```",
            "```json\n{}\n```",
        ] {
            assert!(calls(t).0.is_empty(), "{t}");
        }
    }

    #[test]
    fn invented_results_go_with_a_call_and_stay_without_one() {
        let (c, rest) = calls(
            "<tool_call>{\"name\": \"time\"}</tool_call><tool_result>12:00</tool_result>It is 12:00.",
        );
        assert_eq!(c.len(), 1);
        assert_eq!(rest, "It is 12:00.");
        // Without a call the text is left whole (the runtime refuses it).
        let (c, rest) = calls("<tool_result>12:00</tool_result>It is 12:00.");
        assert!(c.is_empty() && rest.contains("<tool_result>"));
    }

    #[test]
    fn text_with_length_changing_case_never_panics() {
        // `İ` lowercases to three bytes: offsets from a lowercased copy
        // would cut the original in the wrong place (or mid-character).
        let (c, rest) =
            calls("İİİ <TOOL_CALL>{\"name\": \"time\", \"arguments\": {}}</Tool_Call> İ tail");
        assert_eq!(c, [("time".into(), json!({}))]);
        assert_eq!(rest, "İİİ  İ tail");
        assert_eq!(strip_think("İİ<think>İ hidden</think>shown"), "İİshown");
        assert_eq!(strip_think("İİ reasoning</THINK>answer"), "answer");
    }

    /// Property: random Unicode mixed with markup, and every truncation of
    /// real call texts, never panic; text with no markup comes back whole.
    #[test]
    fn random_and_truncated_input_never_panics() {
        let mut rng = fastrand::Rng::with_seed(11);
        let pieces = [
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "```tool_call",
            "```json\n",
            "```",
            "{\"name\":",
            "\"time\"",
            "\"arguments\":",
            "{",
            "}",
            "[",
            "]",
            ",",
            "<tool_result>",
            "</tool_result>",
            "\n",
        ];
        for _ in 0..20_000 {
            let t = arbitrary::text(&mut rng, &pieces, 14);
            let (c, rest) = parse_text_calls(&t, &known());
            let _ = strip_think(&t);
            if !t.contains("```") && !t.to_ascii_lowercase().contains("<tool_call>") {
                let bare = t.trim_start().starts_with(['{', '[']);
                assert!(bare || (c.is_empty() && rest == t), "{t:?}");
            }
        }
        let whole = [
            "<tool_call>{\"name\": \"shell\", \"arguments\": {\"command\": \"wc -l İ.txt\"}}</tool_call>",
            "```json\n[{\"name\": \"time\", \"arguments\": \"{}\"}]\n```",
            "<think>ẞ</think>{\"tool\": \"file_read\", \"params\": {\"path\": \"é\"}}",
        ];
        for w in whole {
            for p in arbitrary::prefixes(w) {
                let (c, _) = parse_text_calls(&strip_think(p), &known());
                assert!(c.len() <= 1, "{p:?}");
            }
        }
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
