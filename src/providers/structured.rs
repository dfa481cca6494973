//! `tool_mode = "structured"`: every request carries `response_format`, a
//! JSON Schema that admits one object per offered tool,
//! `{"action": "call", "tool": NAME, "arguments": {…that tool's schema…}}`,
//! and `{"action": "answer", "text": "…"}`. A server that enforces it
//! (llama.cpp turns it into a grammar; Ollama, vLLM and OpenAI accept it)
//! cannot let a model invent a tool, misspell an argument or write a call
//! in a form nobody reads. The reply is read back into a call or an answer;
//! one that does not fit (a server that ignored the schema) is read as a
//! text-mode reply.

use super::provider::{ToolCall, ToolSpec};
use super::textcalls::{decode_arguments, parse_text_calls};
use serde::Serialize;
use serde_json::{Value, json};

/// The `response_format` of a request offering `tools` (none: an answer
/// is the only shape). A struct, not a `Value`, so the keys go out in this
/// order: llama.cpp generates an object's properties in the order the
/// schema lists them, and a model that names its tool before writing the
/// arguments writes arguments that fit it (serde_json's `Value` would sort
/// them, `arguments` before `tool`).
#[derive(Debug, Serialize)]
pub struct ResponseFormat<'t> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: Named<'t>,
}

#[derive(Debug, Serialize)]
struct Named<'t> {
    name: &'static str,
    schema: AnyOf<'t>,
}

#[derive(Debug, Serialize)]
struct AnyOf<'t> {
    #[serde(rename = "anyOf")]
    any_of: Vec<Shape<'t>>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Shape<'t> {
    Call(Object<CallProps<'t>>),
    Answer(Object<AnswerProps>),
}

#[derive(Debug, Serialize)]
struct Object<P> {
    #[serde(rename = "type")]
    kind: &'static str,
    properties: P,
    required: &'static [&'static str],
    #[serde(rename = "additionalProperties")]
    additional: bool,
}

#[derive(Debug, Serialize)]
struct CallProps<'t> {
    action: Const<'static>,
    tool: Const<'t>,
    arguments: Arguments<'t>,
}

/// A tool's parameters, closed to other keys, its properties in the order
/// a model should write them (`textcalls::argument_order`): llama.cpp
/// generates required properties first and offers the optional ones in
/// the order given.
#[derive(Debug, Serialize)]
struct Arguments<'t> {
    #[serde(rename = "type")]
    kind: &'static str,
    properties: Ordered<'t>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    required: Vec<&'t str>,
    #[serde(rename = "additionalProperties")]
    additional: bool,
}

#[derive(Debug)]
struct Ordered<'t>(Vec<(&'t str, Value)>);

impl Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(Debug, Serialize)]
struct AnswerProps {
    action: Const<'static>,
    text: Type,
}

#[derive(Debug, Serialize)]
struct Const<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(rename = "const")]
    value: &'a str,
}

#[derive(Debug, Serialize)]
struct Type {
    #[serde(rename = "type")]
    kind: &'static str,
}

fn object<P>(properties: P, required: &'static [&'static str]) -> Object<P> {
    Object {
        kind: "object",
        properties,
        required,
        additional: false,
    }
}

/// The schema name servers see (OpenAI requires one).
pub const SCHEMA_NAME: &str = "latchclaw_reply";

/// `answer`: whether an answer fits (not after a reminder to look first,
/// unless no tool is offered).
pub fn response_format(tools: &[ToolSpec], answer: bool) -> ResponseFormat<'_> {
    let mut any_of: Vec<Shape> = tools
        .iter()
        .flat_map(|t| {
            variants(t).into_iter().map(|arguments| {
                Shape::Call(object(
                    CallProps {
                        action: Const {
                            kind: "string",
                            value: "call",
                        },
                        tool: Const {
                            kind: "string",
                            value: &t.name,
                        },
                        arguments,
                    },
                    &["action", "tool", "arguments"],
                ))
            })
        })
        .collect();
    if answer || tools.is_empty() {
        any_of.push(Shape::Answer(object(
            AnswerProps {
                action: Const {
                    kind: "string",
                    value: "answer",
                },
                text: Type { kind: "string" },
            },
            &["action", "text"],
        )));
    }
    ResponseFormat {
        kind: "json_schema",
        json_schema: Named {
            name: SCHEMA_NAME,
            schema: AnyOf { any_of },
        },
    }
}

/// A tool's parameters with no room for other keys (what `check_args`
/// refuses, the grammar then cannot produce), in the order to write them.
fn arguments(t: &ToolSpec) -> Arguments<'_> {
    Arguments {
        kind: "object",
        properties: Ordered(
            super::textcalls::argument_order(t)
                .into_iter()
                .map(|(k, v)| (k, bounded(v, &t.bounds[k])))
                .collect(),
        ),
        required: t.parameters["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default(),
        additional: false,
    }
}

/// A tool whose arguments depend on one of them (`git`'s on its command:
/// the bounds' `$variants`, `{"key": "command", "takes": {"log": ["n",
/// …]}}`) gets one arguments object per value, holding only what that
/// value takes, so `refs` on a `log` cannot be generated either.
fn variants(t: &ToolSpec) -> Vec<Arguments<'_>> {
    let all = arguments(t);
    let v = &t.bounds["$variants"];
    let (Some(key), Some(takes)) = (v["key"].as_str(), v["takes"].as_object()) else {
        return vec![all];
    };
    takes
        .iter()
        .map(|(value, keys)| {
            let keeps = |k: &str| {
                k == key
                    || keys
                        .as_array()
                        .is_some_and(|ks| ks.iter().any(|x| x.as_str() == Some(k)))
            };
            Arguments {
                kind: "object",
                properties: Ordered(
                    all.properties
                        .0
                        .iter()
                        .filter(|(k, _)| keeps(k))
                        .map(|(k, s)| {
                            let s = if *k == key {
                                json!({"type": "string", "const": value})
                            } else {
                                s.clone()
                            };
                            (*k, s)
                        })
                        .collect(),
                ),
                required: all.required.iter().copied().filter(|k| keeps(k)).collect(),
                additional: false,
            }
        })
        .collect()
}

/// An argument's schema with the tool's bounds on it (`minimum`,
/// `maximum`, `enum`: a grammar then cannot produce what the tool refuses).
fn bounded(schema: &Value, bounds: &Value) -> Value {
    let mut s = schema.clone();
    if let (Some(s), Some(b)) = (s.as_object_mut(), bounds.as_object()) {
        for (k, v) in b {
            s.insert(k.clone(), v.clone());
        }
    }
    s
}

/// A call written in this mode's form (the history sent back, examples).
pub fn call_text(name: &str, arguments: &Value) -> String {
    format!(
        "{{\"action\": \"call\", \"tool\": {}, \"arguments\": {arguments}}}",
        json!(name)
    )
}

/// A call as an example or a repair note shows it (spaced, as the
/// prompt's own forms are).
pub fn example_text(name: &str, arguments: &Value) -> String {
    format!(
        "{{\"action\": \"call\", \"tool\": {}, \"arguments\": {}}}",
        json!(name),
        super::textcalls::spaced_json(arguments)
    )
}

/// An answer written in this mode's form.
pub fn answer_text(text: &str) -> String {
    format!("{{\"action\": \"answer\", \"text\": {}}}", json!(text))
}

/// What the system prompt says in this mode: the two shapes, then the
/// tools (the server never shows the schema to the model).
pub fn instructions(tools: &[ToolSpec]) -> String {
    if tools.is_empty() {
        return "\n\nReply with exactly one JSON object and nothing else:\n\
                {\"action\": \"answer\", \"text\": \"your answer\"}\n"
            .into();
    }
    let mut s = String::from(
        "\n\nReply with exactly one JSON object and nothing else. To call a tool:\n\
         {\"action\": \"call\", \"tool\": \"TOOL_NAME\", \"arguments\": {...}}\n\
         The result comes back in the next message. To answer the user:\n\
         {\"action\": \"answer\", \"text\": \"your answer\"}\nTools:\n",
    );
    for t in tools {
        s.push_str(&super::textcalls::tool_line(
            t,
            &example_text(&t.name, &t.example),
        ));
    }
    s
}

/// Reads a reply: one call, or the answer's text. Anything else (no JSON,
/// another shape: a server that did not enforce the schema) is read as a
/// text-mode reply, calls written as text included.
pub fn read_reply(content: &str, known: &[ToolSpec]) -> (Vec<ToolCall>, String) {
    let body = unfenced(content.trim());
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(body) {
        match o.get("action").and_then(Value::as_str) {
            Some("answer") => {
                if let Some(text) = o.get("text").and_then(Value::as_str) {
                    return (Vec::new(), text.to_string());
                }
            }
            Some("call") => {
                if let Some(name) = o
                    .get("tool")
                    .or_else(|| o.get("name"))
                    .and_then(Value::as_str)
                {
                    let call = ToolCall {
                        id: "call_json_0".into(),
                        name: name.to_string(),
                        arguments: decode_arguments(o.get("arguments").unwrap_or(&Value::Null)),
                    };
                    return (vec![call], String::new());
                }
            }
            _ => {}
        }
    }
    parse_text_calls(content, known)
}

/// The inside of a ```` ```json ```` fence around the whole reply
/// (llama.cpp's grammar allows one).
fn unfenced(s: &str) -> &str {
    s.strip_prefix("```")
        .map(|b| b.trim_start_matches(|c: char| c.is_ascii_alphanumeric()))
        .and_then(|b| b.trim_end().strip_suffix("```"))
        .map_or(s, str::trim)
}

/// The text of an answer as it streams in: nothing until the reply is
/// known to be `{"action": "answer", "text": "`, then the string's
/// characters, unescaped, as they arrive; nothing of a call or any other
/// object. A reply that is not JSON at all (a server that ignored the
/// schema) passes through as it came, to be shown as text mode shows it.
#[derive(Debug, Default)]
pub struct AnswerStream {
    /// What has arrived and is not decided yet.
    raw: String,
    state: StreamState,
}

#[derive(Debug, Default, PartialEq)]
enum StreamState {
    /// Matching the opening against `OPENING`, this far.
    #[default]
    Opening,
    Text(usize),
    /// Not JSON: everything passes through.
    Pass,
    Done,
}

/// The opening of an answer, token by token; blank space may come between
/// any two (and a ```` ```json ```` fence before them).
const OPENING: [&str; 8] = [
    "{",
    "\"action\"",
    ":",
    "\"answer\"",
    ",",
    "\"text\"",
    ":",
    "\"",
];

impl AnswerStream {
    /// Takes the next raw piece; returns the answer text it completes.
    pub fn push(&mut self, delta: &str) -> String {
        self.raw.push_str(delta);
        let mut out = String::new();
        loop {
            match self.state {
                StreamState::Done => {
                    self.raw.clear();
                    return out;
                }
                StreamState::Pass => {
                    out.push_str(&self.raw);
                    self.raw.clear();
                    return out;
                }
                StreamState::Opening => match opening(&self.raw) {
                    Opening::Partial => return out,
                    Opening::Not if self.raw.trim_start().starts_with('{') => {
                        self.state = StreamState::Done;
                    }
                    Opening::Not => self.state = StreamState::Pass,
                    Opening::Whole(at) => {
                        self.raw.drain(..at);
                        self.state = StreamState::Text(0);
                    }
                },
                StreamState::Text(_) => {
                    let (text, used, closed) = unescape(&self.raw);
                    out.push_str(&text);
                    self.raw.drain(..used);
                    if closed {
                        self.state = StreamState::Done;
                    } else {
                        return out;
                    }
                }
            }
        }
    }
}

enum Opening {
    /// It may still become the opening.
    Partial,
    /// It cannot.
    Not,
    /// The whole opening, ending at this byte.
    Whole(usize),
}

fn opening(raw: &str) -> Opening {
    let mut s = raw.trim_start();
    if let Some(rest) = s.strip_prefix("```") {
        let info = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
        if !info.starts_with(|c: char| c.is_whitespace()) && !info.starts_with('{') {
            return if info.is_empty() {
                Opening::Partial
            } else {
                Opening::Not
            };
        }
        s = info;
    } else if "```".starts_with(s) && !s.is_empty() {
        return Opening::Partial;
    }
    for token in OPENING {
        s = s.trim_start();
        if s.is_empty() {
            return Opening::Partial;
        }
        if let Some(rest) = s.strip_prefix(token) {
            s = rest;
        } else if token.starts_with(s) {
            return Opening::Partial;
        } else {
            return Opening::Not;
        }
    }
    Opening::Whole(raw.len() - s.len())
}

/// Decodes a JSON string's inside from the start of `raw`: the text, the
/// bytes used, and whether its closing quote came. An escape cut off at
/// the end waits for the rest.
fn unescape(raw: &str) -> (String, usize, bool) {
    let mut out = String::new();
    let mut chars = raw.char_indices().peekable();
    let mut used = 0;
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, i + 1, true),
            '\\' => {
                let Some(&(_, e)) = chars.peek() else {
                    return (out, i, false);
                };
                chars.next();
                let simple = match e {
                    'n' => Some('\n'),
                    't' => Some('\t'),
                    'r' => Some('\r'),
                    'b' => Some('\u{8}'),
                    'f' => Some('\u{c}'),
                    '"' | '\\' | '/' => Some(e),
                    _ => None,
                };
                if let Some(s) = simple {
                    out.push(s);
                    used = i + 2;
                    continue;
                }
                if e != 'u' {
                    // Not JSON: show nothing more (the whole reply is
                    // printed when the turn ends).
                    return (out, raw.len(), true);
                }
                // \uXXXX, maybe a surrogate pair \uD83D\uDE00.
                match unicode_escape(&raw[i..]) {
                    Escape::Cut => return (out, i, false),
                    Escape::Bad => return (out, raw.len(), true),
                    Escape::Char(ch, len) => {
                        out.push(ch);
                        used = i + len;
                        while chars.peek().is_some_and(|&(j, _)| j < i + len) {
                            chars.next();
                        }
                    }
                }
            }
            c => {
                out.push(c);
                used = i + c.len_utf8();
            }
        }
    }
    (out, used, false)
}

enum Escape {
    Cut,
    Bad,
    /// The character and the escape's length in bytes.
    Char(char, usize),
}

fn unicode_escape(s: &str) -> Escape {
    let hex = |s: &str| -> Option<Option<u32>> {
        let digits = s.get(2..6)?;
        Some(u32::from_str_radix(digits, 16).ok())
    };
    let Some(first) = hex(s) else {
        return if s.len() < 6 {
            Escape::Cut
        } else {
            Escape::Bad
        };
    };
    let Some(first) = first else {
        return Escape::Bad;
    };
    if (0xD800..0xDC00).contains(&first) {
        let rest = &s[6..];
        if rest.len() < 6 {
            return if "\\u".starts_with(&rest[..rest.len().min(2)]) {
                Escape::Cut
            } else {
                Escape::Bad
            };
        }
        if !rest.starts_with("\\u") {
            return Escape::Bad;
        }
        return match hex(rest) {
            Some(Some(low)) if (0xDC00..0xE000).contains(&low) => {
                let c = 0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00);
                char::from_u32(c).map_or(Escape::Bad, |c| Escape::Char(c, 12))
            }
            _ => Escape::Bad,
        };
    }
    char::from_u32(first).map_or(Escape::Bad, |c| Escape::Char(c, 6))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn specs() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "time".into(),
                description: "Local time.".into(),
                parameters: json!({"type": "object", "properties": {}}),
                example: json!({}),
                bounds: serde_json::Value::Null,
            },
            ToolSpec {
                name: "file_read".into(),
                description: "Reads a file.".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}},
                                   "required": ["path"]}),
                example: json!({"path": "notes.txt"}),
                bounds: serde_json::Value::Null,
            },
        ]
    }

    #[test]
    fn the_schema_names_each_tool_before_its_arguments() {
        let tools = specs();
        let text = serde_json::to_string(&response_format(&tools, true)).unwrap();
        // The order a grammar follows: action, tool, arguments.
        let a = text.find("\"action\"").unwrap();
        let t = text.find("\"tool\"").unwrap();
        let g = text.find("\"arguments\"").unwrap();
        assert!(a < t && t < g, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["type"], "json_schema");
        assert_eq!(v["json_schema"]["name"], SCHEMA_NAME);
        let shapes = v["json_schema"]["schema"]["anyOf"].as_array().unwrap();
        assert_eq!(shapes.len(), 3);
        assert_eq!(shapes[1]["properties"]["tool"]["const"], "file_read");
        // The example's keys first on the wire.
        let list = ToolSpec {
            name: "file_list".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"depth": {"type": "integer"},
                "glob": {"type": "string"}, "path": {"type": "string"}}}),
            example: json!({"path": "."}),
            bounds: serde_json::Value::Null,
        };
        let wire =
            serde_json::to_string(&response_format(std::slice::from_ref(&list), true)).unwrap();
        assert!(
            wire.contains("\"properties\":{\"path\":{\"type\":\"string\"},\"depth\""),
            "{wire}"
        );
        let args = &shapes[1]["properties"]["arguments"];
        assert_eq!(args["additionalProperties"], false);
        assert_eq!(args["required"], json!(["path"]));
        assert_eq!(shapes[2]["properties"]["action"]["const"], "answer");
        assert_eq!(shapes[2]["required"], json!(["action", "text"]));
        // No tools: only an answer fits.
        // Calls only: no answer shape (but with no tool, only the answer).
        let calls = serde_json::to_value(response_format(&tools, false)).unwrap();
        assert_eq!(
            calls["json_schema"]["schema"]["anyOf"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let only = serde_json::to_value(response_format(&[], false)).unwrap();
        assert_eq!(
            only["json_schema"]["schema"]["anyOf"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    /// A `git`-like spec: one arguments object per command, holding only
    /// what that command takes, the command a `const`.
    #[test]
    fn a_tool_whose_arguments_depend_on_its_command_gets_one_object_per_command() {
        let spec = ToolSpec {
            name: "git".into(),
            description: String::new(),
            parameters: json!({"type": "object", "required": ["command"], "properties": {
                "command": {"type": "string", "enum": ["status", "log", "diff"]},
                "n": {"type": "integer"}, "path": {"type": "string"},
                "refs": {"type": "array", "items": {"type": "string"}},
                "since": {"type": "string"}, "staged": {"type": "boolean"}}}),
            example: json!({"command": "log", "n": 3}),
            bounds: json!({"$variants": {"key": "command", "takes": {
                "status": [], "log": ["n", "path", "since"],
                "diff": ["staged", "refs", "path"]}}}),
        };
        let v = serde_json::to_value(response_format(std::slice::from_ref(&spec), false)).unwrap();
        let shapes = v["json_schema"]["schema"]["anyOf"].as_array().unwrap();
        let by_command = |c: &str| {
            shapes
                .iter()
                .map(|s| &s["properties"]["arguments"])
                .find(|a| a["properties"]["command"]["const"] == c)
                .unwrap_or_else(|| panic!("no {c} in {v}"))
                .clone()
        };
        assert_eq!(shapes.len(), 3, "{v}");
        let keys = |a: &Value| {
            let mut k: Vec<String> = a["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            k.sort();
            k
        };
        let log = by_command("log");
        assert_eq!(keys(&log), ["command", "n", "path", "since"], "{log}");
        assert_eq!(log["required"], json!(["command"]));
        assert_eq!(log["additionalProperties"], false);
        assert_eq!(
            keys(&by_command("diff")),
            ["command", "path", "refs", "staged"]
        );
        assert_eq!(keys(&by_command("status")), ["command"]);
    }

    #[test]
    fn replies_are_read_as_a_call_or_an_answer() {
        let tools = specs();
        let (calls, text) = read_reply(
            "{\"action\": \"call\", \"tool\": \"file_read\", \"arguments\": {\"path\": \"a\"}}",
            &tools,
        );
        assert_eq!(
            (calls[0].name.as_str(), &calls[0].arguments, text.as_str()),
            ("file_read", &json!({"path": "a"}), "")
        );
        let (calls, text) = read_reply(
            "```json\n{\"action\": \"answer\", \"text\": \"It is \\\"noon\\\".\"}\n```",
            &tools,
        );
        assert!(calls.is_empty());
        assert_eq!(text, "It is \"noon\".");
        // A server that ignored the schema: read as text mode reads it.
        let (calls, text) = read_reply("It is noon.", &tools);
        assert!(calls.is_empty());
        assert_eq!(text, "It is noon.");
        let (calls, _) = read_reply(
            "```json\n{\"name\": \"time\", \"arguments\": {}}\n```",
            &tools,
        );
        assert_eq!(calls[0].name, "time");
        // Another object is the text it is.
        let (calls, text) = read_reply("{\"action\": \"dance\"}", &tools);
        assert!(calls.is_empty());
        assert_eq!(text, "{\"action\": \"dance\"}");
    }

    fn streamed(pieces: &[&str]) -> String {
        let mut s = AnswerStream::default();
        pieces.iter().map(|p| s.push(p)).collect()
    }

    #[test]
    fn an_answer_streams_unescaped_and_a_call_not_at_all() {
        let whole = "{\"action\": \"answer\", \"text\": \"Line 1\\nsays \\\"hi\\\" \\u00e9\\ud83d\\ude00 done\"}";
        let want = "Line 1\nsays \"hi\" é😀 done";
        assert_eq!(streamed(&[whole]), want);
        // Every cut into two pieces, and one character at a time.
        for (i, _) in whole.char_indices() {
            assert_eq!(streamed(&[&whole[..i], &whole[i..]]), want, "cut at {i}");
        }
        let chars: Vec<String> = whole.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(streamed(&refs), want);
        assert_eq!(
            streamed(&["```json\n{ \"action\" :\"answer\",\n\"text\":\"ok\"}\n```"]),
            "ok"
        );
        for other in [
            "{\"action\": \"call\", \"tool\": \"time\", \"arguments\": {}}",
            "{\"text\": \"x\", \"action\": \"answer\"}",
            " {\"action\": \"ans",
        ] {
            assert_eq!(streamed(&[other]), "", "{other}");
        }
        // Not JSON: as it came (the display's own filter hides calls).
        for text in [
            "Plain text.",
            "```python\nprint(1)\n```",
            "<think>x</think>Hi",
        ] {
            assert_eq!(streamed(&[text]), text, "{text}");
            let (a, b) = text.split_at(3);
            assert_eq!(streamed(&[a, b]), text, "{text}");
        }
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..3_000 {
            let t = crate::util::arbitrary::text(
                &mut rng,
                &[
                    "{",
                    "\"action\"",
                    ":",
                    "\"answer\"",
                    ",",
                    "\"text\"",
                    "\"",
                    "\\",
                    "u",
                    "d83d",
                    "é",
                    " ",
                ],
                12,
            );
            let _ = streamed(&[&t]);
        }
    }
}
