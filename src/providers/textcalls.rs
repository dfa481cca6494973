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

/// JSON on one line with a space after each `:` and `,`, the way the
/// prompts' own examples are written (`{"path": "."}`), for the examples
/// and repair notes a model copies.
pub fn spaced_json(v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(spaced_json).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(o) => {
            let inner: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{}: {}", json!(k), spaced_json(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
        other => other.to_string(),
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
    // `{{"name": …, "arguments": {…}}}`: one brace too many on each side
    // (a 1.5B model wrote it so).
    if trimmed.len() >= 4 && trimmed.starts_with("{{") && trimmed.ends_with("}}") {
        let calls = objects_naming(&trimmed[1..trimmed.len() - 1], known, first);
        if !calls.is_empty() {
            return calls;
        }
    }
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

/// One tool in a prompt's list: name, description, arguments, and (when
/// it has one) an example call in the mode's own form.
pub fn tool_line(t: &ToolSpec, example: &str) -> String {
    let mut line = format!(
        "- {}: {} Arguments: {}",
        t.name,
        t.description,
        arguments_line(t)
    );
    if !t.example.is_null() {
        line.push_str(if line.ends_with('.') { " " } else { ". " });
        line.push_str("Example: ");
        line.push_str(example);
    }
    line.push('\n');
    line
}

/// A schema's properties as one short line, `path (string, required):
/// file, relative to the workspace; …`: the same facts as the JSON schema
/// in about half the bytes (a one-tool turn with the default tools stays under 3.5 KB).
fn arguments_line(t: &ToolSpec) -> String {
    let required = required(&t.parameters);
    let props = argument_order(t);
    if props.is_empty() {
        return "none".into();
    }
    props
        .iter()
        .map(|(name, p)| {
            let mut kind = p["type"].as_str().unwrap_or("any").to_string();
            if required.contains(name) {
                kind.push_str(", required");
            }
            match p["description"].as_str() {
                Some(d) => format!("{name} ({kind}): {d}"),
                None => format!("{name} ({kind})"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn required(schema: &Value) -> Vec<&str> {
    schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A tool's arguments in the order a model should write them: those of
/// its example first, then the required, then the rest by name. A small
/// model fills in the arguments in the order it is shown them (sorted,
/// `file_list`'s `depth` came first and a 1.5B model gave it 0).
pub fn argument_order(t: &ToolSpec) -> Vec<(&str, &Value)> {
    let required = required(&t.parameters);
    let mut props: Vec<(&str, &Value)> = t.parameters["properties"]
        .as_object()
        .map(|p| p.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default();
    let rank = |k: &str| {
        if t.example.get(k).is_some() {
            0
        } else if required.contains(&k) {
            1
        } else {
            2
        }
    };
    // Stable: within a rank, by name.
    crate::util::sort::sort_by_key(&mut props, |(k, _)| rank(k));
    props
}

/// Text that only looks like a tool call or a tool result, of any shape:
/// markup the models write (`<tool_call>`, `<tool_result>`, `<function=…>`,
/// a ```` ```tool_call ```` fence, a chat template's own tokens,
/// latchclaw's own requests echoed back); a JSON object naming one of the
/// tools; any object with a key that names (`name`, `tool`, `function`)
/// and one that carries arguments (`arguments`, `parameters`, `params`),
/// whatever it names and however many braces wrap it (`{{"name": "add",
/// "arguments": {…}}}`, seen from a 1.5B model), fenced or bare, alone or
/// inside prose; the structured form (`"action": "call"`); or a reply that
/// is nothing but some tool's arguments. Printed with exit 0 it would pass
/// for an answer.
pub fn looks_like_tool_text(text: &str, tools: &[ToolSpec]) -> bool {
    // Besides what opens a call: closing tags, a chat template's own
    // tokens, and `[latchclaw:`, our own request echoed back (seen from a
    // 1.5B model), or the words of our repair notes and reminders without
    // it (a 1.5B model answered with a repair note's first lines).
    const MORE: [&str; 8] = [
        "</tool_call",
        "</tool_result",
        "<|im_start|>",
        "[latchclaw:",
        "the call did not run:",
        "write the call exactly in this form",
        "this note is for you",
        "you answered without calling a tool",
    ];
    let lower = text.to_ascii_lowercase();
    let opens = CALL_OPENERS.iter();
    if opens.chain(MORE.iter()).any(|m| lower.contains(m)) {
        return true;
    }
    // `{"name": "time", …}` and the `{"tool": …}` spelling, any spacing.
    let squeezed: String = lower.chars().filter(|c| !c.is_whitespace()).collect();
    let named = tools.iter().any(|t| {
        let name = t.name.to_ascii_lowercase();
        ["name", "tool", "function"]
            .iter()
            .any(|k| squeezed.contains(&format!("\"{k}\":\"{name}\"")))
    });
    let has = |keys: &[&str]| keys.iter().any(|k| squeezed.contains(&format!("\"{k}\":")));
    let call_keys =
        has(&["name", "tool", "function"]) && has(&["arguments", "parameters", "params"]);
    let structured_call = squeezed.contains("\"action\":\"call\"");
    // A reply that is only arguments (`{"path": "."}`, fenced or not) whose
    // keys are all some tool's parameters: a call with its name left out.
    let body = text.trim();
    let body = body
        .strip_prefix("```")
        .map(|b| b.trim_start_matches(|c: char| c.is_ascii_alphabetic()))
        .and_then(|b| b.trim_end().strip_suffix("```"))
        .unwrap_or(body);
    let bare_arguments = serde_json::from_str::<Value>(body.trim())
        .ok()
        .and_then(|v| v.as_object().cloned())
        .is_some_and(|o| {
            !o.is_empty()
                && tools.iter().any(|t| {
                    let props = t.parameters["properties"].as_object();
                    o.keys().all(|k| props.is_some_and(|p| p.contains_key(k)))
                })
        });
    named || call_keys || structured_call || bare_arguments || invented_result(text, tools)
}

/// A fenced JSON object inside prose whose keys (two or more) are all the
/// offered tools' argument names or a result's (`content`, `output`, …):
/// an invented call or result ("file_read was called with … and returned:
/// ```json {"path": …, "end_line": 10, "content": …}```", seen from a 1.5B
/// model in native mode). A JSON answer of the user's own keys is not one.
fn invented_result(text: &str, tools: &[ToolSpec]) -> bool {
    const RESULT: [&str; 7] = [
        "content",
        "output",
        "result",
        "error",
        "stdout",
        "stderr",
        "exit_code",
    ];
    let params: std::collections::HashSet<&str> = tools
        .iter()
        .filter_map(|t| t.parameters["properties"].as_object())
        .flat_map(|p| p.keys().map(String::as_str))
        .collect();
    // Inside a fence: every other piece between ``` marks, its info string
    // (`json`) dropped.
    text.split("```").skip(1).step_by(2).any(|block| {
        let body = block.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
        top_keys(body).is_some_and(|keys| {
            keys.len() >= 2
                && keys.iter().any(|k| params.contains(k))
                && keys
                    .iter()
                    .all(|k| params.contains(k) || RESULT.contains(k))
        })
    })
}

/// The keys of an object's top level, read loosely: a model's invented
/// result is not always valid JSON (a raw tab inside a string, as the
/// 1.5B model wrote a numbered file's lines). None: not one object.
fn top_keys(body: &str) -> Option<Vec<&str>> {
    let body = body.trim();
    if !(body.starts_with('{') && body.ends_with('}')) {
        return None;
    }
    let (mut keys, mut depth, mut string_at) = (Vec::new(), 0usize, None);
    let mut last_string = None;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        if let Some(start) = string_at {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    string_at = None;
                    last_string = (depth == 1).then(|| &body[start + 1..i]);
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => string_at = Some(i),
            ':' => keys.extend(last_string.take()),
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.checked_sub(1)?,
            c if c.is_whitespace() => continue,
            _ => {}
        }
        if c != '"' {
            last_string = None;
        }
    }
    (depth == 0 && string_at.is_none()).then_some(keys)
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
            example: Value::Null,
            bounds: serde_json::Value::Null,
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
    fn a_call_in_double_braces_is_read() {
        let (c, rest) = calls("{{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}}");
        assert_eq!(c, [("file_list".into(), json!({"path": "."}))]);
        assert_eq!(rest, "");
        let (c, _) = calls("```json\n{{\"name\": \"time\", \"arguments\": {}}}\n```");
        assert_eq!(c, [("time".into(), json!({}))]);
        // An unknown name stays text (the runtime asks for a repair).
        assert!(
            calls("{{\"name\": \"add\", \"arguments\": {}}}")
                .0
                .is_empty()
        );
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
    fn top_keys_reads_one_level_loosely() {
        assert_eq!(
            top_keys("{\"a\": {\"b\": 1}, \"c\": \"x:\\\"y}\", \"d\": [\"e\", {\"f\": 2}]}"),
            Some(vec!["a", "c", "d"])
        );
        assert_eq!(top_keys("{\"t\": \"a\tb\"}"), Some(vec!["t"]));
        assert_eq!(top_keys("{}"), Some(vec![]));
        for bad in ["[1]", "{\"a\": 1", "{\"a\": \"}", "{]}}", "x"] {
            assert_eq!(top_keys(bad), None, "{bad}");
        }
    }

    #[test]
    fn tool_text_is_recognised_and_prose_is_not() {
        let tools: Vec<ToolSpec> = ["time", "file_list"]
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: String::new(),
                parameters: json!({"properties": {"path": {}}}),
                example: Value::Null,
                bounds: serde_json::Value::Null,
            })
            .collect();
        for t in [
            "<tool_result>12:00</tool_result> It is noon.",
            "</TOOL_CALL>",
            "<function=time>{}</function>",
            "<|im_start|>assistant",
            "[latchclaw: tools will not run again in this turn.]",
            "Here: { \"name\" : \"time\", \"arguments\": {} }",
            "{\"tool\": \"file_list\"}",
            "```json\n{\"path\": \".\"}\n```",
            "```json\n{\"name\": \"greeting.txt\", \"arguments\": {\"content\": \"hi\"}}\n```",
            " {\"path\": \"a\"} ",
            // Any call-shaped object, whatever it names, however braced.
            "{{\"name\": \"add\", \"arguments\": {\"num1\": \"10\", \"num2\": \"20\"}}}",
            "To add them: {{ \"name\": \"add\", \"parameters\": {} }} done",
            "{\"function\": \"sum\", \"params\": [1, 2]}",
            "```\n{\"tool\": \"calc\", \"arguments\": {}}\n```",
            "{\"action\": \"call\", \"tool\": \"time\", \"arguments\": {}}",
            // An invented result in prose, its keys the tools' own (a raw
            // tab in a string: not JSON, still one).
            "`file_read` was called and returned:\n```json\n{\n  \"content\": \"1\tdef plus\",\n  \
             \"exit_code\": 0,\n  \"path\": \"src/calc.py\"\n}\n```",
            "file_read was called and returned:\n```json\n{\n  \"content\": \"def plus\",\n  \
             \"path\": \"src/calc.py\"\n}\n```",
            // A repair note's words, echoed as an answer.
            "The call did not run: invalid arguments: git log: argument \"refs\" does not apply",
        ] {
            assert!(looks_like_tool_text(t, &tools), "{t}");
        }
        for t in [
            "It is noon.",
            "{\"name\": \"Ada\", \"age\": 3}",
            "```json\n{\"age\": 3}\n```",
            // A JSON answer with the user's own keys, one a tool's among them.
            "Your config:\n```json\n{\"path\": \"/srv\", \"port\": 8080}\n```",
            "```\n{\"path\": \"a\", \"content\": 1}\nnot json\n```",
            "Use {\"path\": \".\"} next time.",
            "The time tool says 12:00; file_list shows a.txt.",
            "",
        ] {
            assert!(!looks_like_tool_text(t, &tools), "{t}");
        }
        let mut rng = fastrand::Rng::with_seed(9);
        for _ in 0..5_000 {
            let t = crate::util::arbitrary::text(&mut rng, &["<tool", "\"name\":", "time"], 12);
            let _ = looks_like_tool_text(&t, &tools);
        }
    }

    #[test]
    fn spaced_json_reads_back_the_same() {
        let v = json!({"b": [1, "x, y"], "a": {"c": null, "d": "q\"uote"}, "e": {}});
        let text = spaced_json(&v);
        assert_eq!(
            text,
            "{\"a\": {\"c\": null, \"d\": \"q\\\"uote\"}, \"b\": [1, \"x, y\"], \"e\": {}}"
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
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
