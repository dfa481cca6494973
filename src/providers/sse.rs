//! Server-sent events from a streaming chat completion: the byte stream
//! cut into events (`\n` or `\r\n` line ends, `:` comments, multi-line
//! `data:` joined, `data: [DONE]`), and the chunks put back together as the
//! one response a non-streaming call would have returned.

use super::provider::Usage;
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The `data:` of one event (its lines joined with `\n`).
    Data(String),
    /// `data: [DONE]`: the stream is over.
    Done,
}

/// Cuts a byte stream into events, whatever the chunk boundaries.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The line read so far (no line end yet).
    line: Vec<u8>,
    /// `data:` lines of the event in progress.
    data: Option<String>,
}

impl Decoder {
    /// Feeds the next bytes; complete events are appended to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Event>) {
        let mut rest = bytes;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            self.line.extend_from_slice(&rest[..i]);
            rest = &rest[i + 1..];
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.take_line(&line, out);
        }
        self.line.extend_from_slice(rest);
    }

    fn take_line(&mut self, line: &[u8], out: &mut Vec<Event>) {
        if line.is_empty() {
            if let Some(d) = self.data.take() {
                out.push(event(d));
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        // `event:`, `id:` and `retry:` carry nothing a chat completion needs.
        if field == b"data" {
            let v = String::from_utf8_lossy(value);
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&v);
                }
                None => self.data = Some(v.into_owned()),
            }
        }
    }

    /// The stream ended. An event the server did not close with a blank
    /// line still counts when it is whole (`[DONE]` or complete JSON);
    /// otherwise `Err` holds how many bytes of the unfinished event arrived.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<(), usize> {
        let line = std::mem::take(&mut self.line);
        let mut cut = 0;
        if !line.iter().all(u8::is_ascii_whitespace) && line[0] != b':' {
            self.take_line(&line, out);
            cut = line.len();
        }
        match self.data.take() {
            Some(d) if d.trim() == "[DONE]" || serde_json::from_str::<Value>(&d).is_ok() => {
                out.push(event(d));
                Ok(())
            }
            Some(d) => Err(d.len().max(cut)),
            None if cut > 0 => Err(cut),
            None => Ok(()),
        }
    }
}

fn event(data: String) -> Event {
    if data.trim() == "[DONE]" {
        Event::Done
    } else {
        Event::Data(data)
    }
}

/// One tool call put together from its deltas.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CallParts {
    pub index: u64,
    pub id: String,
    pub name: String,
    /// The `arguments` fragments, concatenated.
    pub arguments: String,
}

/// The chunks of one streamed chat completion, assembled.
#[derive(Debug, Default)]
pub struct Assembly {
    pub content: String,
    /// In the order they began.
    pub calls: Vec<CallParts>,
    pub finish_reason: Option<String>,
    /// From the last chunk that reported usage.
    pub usage: Option<Usage>,
    pub model: Option<String>,
    pub chunks: usize,
}

impl Assembly {
    /// Adds one chunk; returns the text it carried, to pass on at once.
    pub fn add<'v>(&mut self, chunk: &'v Value) -> &'v str {
        self.chunks += 1;
        if let Some(m) = chunk["model"].as_str().filter(|m| !m.is_empty()) {
            self.model = Some(m.to_string());
        }
        if let Some(u) = usage_of(chunk) {
            self.usage = Some(u);
        }
        // Only the first choice is read (latchclaw never asks for `n` > 1).
        let choice = match chunk["choices"].as_array() {
            Some(cs) => cs
                .iter()
                .find(|c| c["index"].as_u64() == Some(0))
                .or(cs.first()),
            None => None,
        };
        let Some(choice) = choice else { return "" };
        if let Some(f) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(f.to_string());
        }
        let delta = choice
            .get("delta")
            .filter(|d| d.is_object())
            // A few servers send whole messages in their chunks.
            .or_else(|| choice.get("message"))
            .unwrap_or(&Value::Null);
        if let Some(tcs) = delta["tool_calls"].as_array() {
            for tc in tcs {
                self.add_call(tc["index"].as_u64(), tc);
            }
        } else if let Some(f) = delta.get("function_call").filter(|f| f.is_object()) {
            self.add_call(Some(0), &json!({"function": f}));
        }
        match &delta["content"] {
            Value::String(s) => {
                self.content.push_str(s);
                s
            }
            _ => "",
        }
    }

    fn add_call(&mut self, index: Option<u64>, tc: &Value) {
        let id = tc["id"].as_str().unwrap_or("");
        // Without an index, a new id starts a new call; anything else
        // continues the last one.
        let index = index.unwrap_or_else(|| match self.calls.last() {
            Some(last) if id.is_empty() || last.id == id => last.index,
            Some(_) => self.calls.iter().map(|c| c.index).max().unwrap_or(0) + 1,
            None => 0,
        });
        let pos = match self.calls.iter().position(|c| c.index == index) {
            Some(p) => p,
            None => {
                self.calls.push(CallParts {
                    index,
                    ..Default::default()
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[pos];
        if call.id.is_empty() && !id.is_empty() {
            call.id = id.to_string();
        }
        let f = &tc["function"];
        // The name arrives once; servers that repeat it are not doubled.
        if let Some(n) = f["name"].as_str()
            && call.name.is_empty()
        {
            call.name = n.to_string();
        }
        match &f["arguments"] {
            Value::String(s) => call.arguments.push_str(s),
            Value::Null => {}
            // Some servers send the arguments as one object.
            other => call.arguments = other.to_string(),
        }
    }

    /// The answer as the non-streaming response body it stands for, so one
    /// parser reads both.
    pub fn to_response(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            let mut calls = self.calls.clone();
            crate::util::sort::sort_by_key(&mut calls, |c| c.index);
            message["tool_calls"] = calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
        }
        let mut v = json!({
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        });
        if let Some(m) = &self.model {
            v["model"] = json!(m);
        }
        if let Some(u) = &self.usage {
            v["usage"] = json!({
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
            });
        }
        v
    }
}

/// Token counts, when the server reports them. Cached prompt tokens are
/// `usage.prompt_tokens_details.cached_tokens` (OpenAI, recent llama.cpp)
/// or llama.cpp's own `timings.cache_n`.
pub(super) fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| v["timings"]["cache_n"].as_u64())
        .unwrap_or(0);
    Some(Usage {
        prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
        cached_tokens: cached,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn decode_in_pieces(bytes: &[u8], piece: usize) -> (Vec<Event>, Result<(), usize>) {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        for c in bytes.chunks(piece.max(1)) {
            d.push(c, &mut out);
        }
        let end = d.finish(&mut out);
        (out, end)
    }

    #[test]
    fn events_whatever_the_chunking_and_line_ends() {
        let lf = b": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\nid: 7\ndata: {\"b\":\ndata: 2}\n\ndata: [DONE]\n\n";
        let crlf: Vec<u8> = String::from_utf8_lossy(lf)
            .replace('\n', "\r\n")
            .into_bytes();
        let want = vec![
            Event::Data("{\"a\":1}".into()),
            Event::Data("{\"b\":\n2}".into()),
            Event::Done,
        ];
        for bytes in [&lf[..], &crlf[..]] {
            for piece in [1, 2, 3, 7, 1000] {
                let (events, end) = decode_in_pieces(bytes, piece);
                assert_eq!(events, want, "piece {piece}");
                assert_eq!(end, Ok(()));
            }
        }
        // `data:` without a space, and a multibyte char split across chunks.
        let (events, _) = decode_in_pieces("data:{\"t\":\"é😀\"}\n\n".as_bytes(), 1);
        assert_eq!(events, vec![Event::Data("{\"t\":\"é😀\"}".into())]);
    }

    #[test]
    fn the_end_of_the_stream() {
        // The last event without its blank line still counts when whole.
        let (events, end) = decode_in_pieces(b"data: {\"a\":1}\n", 4);
        assert_eq!(
            (events, end),
            (vec![Event::Data("{\"a\":1}".into())], Ok(()))
        );
        let (events, end) = decode_in_pieces(b"data: [DONE]", 4);
        assert_eq!((events, end), (vec![Event::Done], Ok(())));
        // Cut mid-event: in the middle of a line, or of a JSON value.
        let (events, end) = decode_in_pieces(b"data: {\"a\":1}\n\ndata: {\"cho", 5);
        assert_eq!(events, vec![Event::Data("{\"a\":1}".into())]);
        assert_eq!(end, Err(11));
        let (_, end) = decode_in_pieces(b"data: {\"b\":\n", 5);
        assert!(end.is_err());
        assert_eq!(decode_in_pieces(b"data: 1\n\nda", 5).1, Err(2));
        // Trailing blank space is not an event.
        assert_eq!(decode_in_pieces(b"data: 1\n\n\r\n  ", 3).1, Ok(()));
        assert_eq!(decode_in_pieces(b": only a comment", 3).1, Ok(()));
    }

    fn chunk(delta: Value) -> Value {
        json!({"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    }

    #[test]
    fn content_and_tool_calls_by_index() {
        let mut a = Assembly::default();
        assert_eq!(
            a.add(&chunk(json!({"role": "assistant", "content": "Let "}))),
            "Let "
        );
        assert_eq!(a.add(&chunk(json!({"content": "me look."}))), "me look.");
        let parts = [
            json!({"tool_calls": [{"index": 0, "id": "call_A", "type": "function",
                                   "function": {"name": "file_list", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"pa"}}]}),
            json!({"tool_calls": [{"index": 1, "id": "call_B",
                                   "function": {"name": "time", "arguments": "{}"}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "th\": \".\"}"}}]}),
        ];
        for p in &parts {
            assert_eq!(a.add(&chunk(p.clone())), "");
        }
        a.add(&json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
        a.add(
            &json!({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 9,
                       "prompt_tokens_details": {"cached_tokens": 40}}}),
        );
        assert_eq!(a.content, "Let me look.");
        assert_eq!(a.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            a.calls,
            vec![
                CallParts {
                    index: 0,
                    id: "call_A".into(),
                    name: "file_list".into(),
                    arguments: "{\"path\": \".\"}".into()
                },
                CallParts {
                    index: 1,
                    id: "call_B".into(),
                    name: "time".into(),
                    arguments: "{}".into()
                },
            ]
        );
        let u = a.usage.clone().unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (50, 9, 40)
        );
        let r = a.to_response();
        assert_eq!(
            r["choices"][0]["message"]["tool_calls"][1]["function"]["name"],
            "time"
        );
        assert_eq!(r["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(r["model"], "m");
        let back = usage_of(&r).unwrap();
        assert_eq!(back.cached_tokens, 40);
    }

    #[test]
    fn odd_servers() {
        // No index: a new id is a new call; a repeated name is not doubled;
        // arguments as an object; llama.cpp's cache count in `timings`.
        let mut a = Assembly::default();
        a.add(&chunk(
            json!({"tool_calls": [{"id": "x", "function": {"name": "a", "arguments": "{\"k\""}}]}),
        ));
        a.add(&chunk(
            json!({"tool_calls": [{"function": {"name": "a", "arguments": ": 1}"}}]}),
        ));
        a.add(&chunk(
            json!({"tool_calls": [{"id": "y", "function": {"name": "b", "arguments": {"q": 2}}}]}),
        ));
        a.add(
            &json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                      "usage": {"prompt_tokens": 10, "completion_tokens": 2},
                      "timings": {"cache_n": 8}}),
        );
        assert_eq!(a.calls.len(), 2);
        assert_eq!(
            (a.calls[0].name.as_str(), a.calls[0].arguments.as_str()),
            ("a", "{\"k\": 1}")
        );
        assert_eq!(
            (a.calls[1].name.as_str(), a.calls[1].arguments.as_str()),
            ("b", "{\"q\":2}")
        );
        assert_eq!(a.usage.unwrap().cached_tokens, 8);
        // The legacy `function_call` delta; chunks with no choices at all.
        let mut a = Assembly::default();
        assert_eq!(a.add(&json!({"object": "x"})), "");
        a.add(&chunk(
            json!({"function_call": {"name": "time", "arguments": "{}"}}),
        ));
        assert_eq!(a.calls[0].name, "time");
        assert!(a.finish_reason.is_none());
    }
}
