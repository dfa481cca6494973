//! JSON-RPC 2.0 over a child's stdin and stdout, one message a line: the
//! thread that reads the server's output ([`read_loop`]) and the one that
//! writes to its input ([`write_loop`]). A leaf of `mcp`.
//!
//! The reader keeps at most one line (capped at [`MAX_LINE`]) and hands
//! the client only responses, through a bounded channel; notifications are
//! counted and dropped, and a request from the server (sampling,
//! elicitation, roots, anything) is answered at once with -32601, so no
//! flood grows memory or stalls a call. The writer owns the child's stdin,
//! so a server that stops reading blocks that thread and never the caller.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};

/// Longest line read from a server (a result with a large file in it fits;
/// a stream with no line end does not).
pub const MAX_LINE: usize = 8 << 20;

/// Messages waiting for the writer: past this, a reply to the server is
/// dropped and a request fails as stalled.
pub const WRITE_QUEUE: usize = 64;

/// Responses waiting for the client: past this, the reader waits.
pub const READ_QUEUE: usize = 16;

/// What the client queues to close the server's stdin (the reader holds a
/// sender of its own for its replies, so dropping the client's is not
/// enough).
pub const CLOSE: Vec<u8> = Vec::new();

/// What the reader hands the client.
#[derive(Debug)]
pub enum Incoming {
    /// A response to the request with this id (ids latchclaw sends are
    /// numbers; any other id matches nothing).
    Response {
        id: u64,
        result: Result<Value, RpcError>,
    },
    /// A line that is not a JSON-RPC message (said in a few words).
    Malformed(String),
    /// A line longer than [`MAX_LINE`]: the reader stops there.
    TooLong,
    /// The server closed its output (or reading it failed).
    Closed,
    /// The request with this id got no response over HTTP, and why
    /// (`super::http`).
    Failed { id: u64, why: String },
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

/// Counters the reader keeps (for `mcp test` and the logs).
#[derive(Debug, Default)]
pub struct Stats {
    pub notifications: AtomicU64,
    pub server_requests: AtomicU64,
    pub unmatched: AtomicU64,
    pub malformed: AtomicU64,
}

/// One message as a line.
pub fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Reads lines from `out` until it closes, a line is too long or the client
/// is gone.
pub fn read_loop(
    out: impl Read,
    to_client: SyncSender<Incoming>,
    to_server: SyncSender<Vec<u8>>,
    stats: Arc<Stats>,
) {
    let mut r = BufReader::with_capacity(64 * 1024, out);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let (done, used) = match r.fill_buf() {
            Ok([]) | Err(_) => {
                let _ = to_client.send(Incoming::Closed);
                return;
            }
            Ok(chunk) => match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    buf.extend_from_slice(&chunk[..i]);
                    (true, i + 1)
                }
                None => {
                    buf.extend_from_slice(chunk);
                    (false, chunk.len())
                }
            },
        };
        r.consume(used);
        if buf.len() > MAX_LINE {
            let _ = to_client.send(Incoming::TooLong);
            return;
        }
        if !done {
            continue;
        }
        let msg = std::mem::take(&mut buf);
        if let Some(incoming) = classify(&msg, &to_server, &stats)
            && to_client.send(incoming).is_err()
        {
            return;
        }
        // A line's worth of capacity is not kept for the next one.
        if buf.capacity() > 1 << 20 {
            buf = Vec::new();
        }
    }
}

/// What one line means for the client; `None` when it is handled here.
pub(super) fn classify(
    raw: &[u8],
    to_server: &SyncSender<Vec<u8>>,
    stats: &Stats,
) -> Option<Incoming> {
    let text = raw.trim_ascii();
    if text.is_empty() {
        return None;
    }
    // Only a response to latchclaw is read whole: anything else is looked
    // at without building it (a tree of values takes tens of times the
    // line's size, and a server may send many).
    if !text.starts_with(b"{") {
        stats.malformed.fetch_add(1, Ordering::Relaxed);
        return Some(Incoming::Malformed(
            match serde_json::from_slice::<serde::de::IgnoredAny>(text) {
                Err(e) => format!("not JSON ({e})"),
                Ok(_) => format!(
                    "a JSON {} where a JSON-RPC message belongs",
                    kind_of_start(text[0])
                ),
            },
        ));
    }
    let peek = match serde_json::from_slice::<Peek>(text) {
        Ok(p) => p,
        Err(e) => {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            return Some(Incoming::Malformed(if e.is_syntax() || e.is_eof() {
                format!("not JSON ({e})")
            } else {
                format!("not a JSON-RPC message ({e})")
            }));
        }
    };
    if let Some(method) = &peek.method {
        let method = match method {
            Method::Name(m) => m.as_str(),
            Method::Other => "?",
        };
        let id = match peek.id {
            None | Some(Id::Null) => None,
            Some(Id::Num(n)) => Some(Value::Number(n)),
            Some(Id::Str(s)) => Some(Value::String(s)),
            // An id too long or not a number or string: no answer can
            // carry it back.
            Some(Id::Other) => {
                stats.server_requests.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        return server_message(id.as_ref(), method, to_server, stats);
    }
    let v: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            return Some(Incoming::Malformed(format!("not JSON ({e})")));
        }
    };
    let Some(obj) = v.as_object() else {
        stats.malformed.fetch_add(1, Ordering::Relaxed);
        return Some(Incoming::Malformed(format!(
            "a JSON {} where a JSON-RPC message belongs",
            kind_of(&v)
        )));
    };
    let id = obj.get("id").filter(|i| !i.is_null());
    if let Some(method) = obj.get("method") {
        return server_message(id, method.as_str().unwrap_or("?"), to_server, stats);
    }
    let Some(id) = id else {
        stats.malformed.fetch_add(1, Ordering::Relaxed);
        return Some(Incoming::Malformed(
            "a message with neither a method nor an id".into(),
        ));
    };
    let Some(id) = id.as_u64() else {
        stats.unmatched.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let result = match (obj.get("result"), obj.get("error")) {
        (Some(r), None) => Ok(r.clone()),
        (_, Some(e)) => Err(RpcError {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        }),
        (None, None) => {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            return Some(Incoming::Malformed(
                "a response with neither a result nor an error".into(),
            ));
        }
    };
    Some(Incoming::Response { id, result })
}

/// What a message is first read for: its id and whether it has a method
/// (present even as `null`), neither built beyond a short string.
#[derive(serde::Deserialize)]
struct Peek {
    #[serde(default)]
    id: Option<Id>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Method>,
}

/// The longest string id answered (a longer one gets no answer).
const ID_MAX: usize = 256;

enum Id {
    Null,
    Num(serde_json::Number),
    Str(String),
    /// Too long, or neither a number nor a string.
    Other,
}

enum Method {
    Name(String),
    Other,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Method>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

/// A visitor that keeps a number or a short string, and skips anything
/// else without building it.
struct Small;

enum Scalar {
    Null,
    Num(serde_json::Number),
    Str(String),
    Other,
}

impl<'de> serde::de::Visitor<'de> for Small {
    type Value = Scalar;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::Num(v.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::Num(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Scalar::Other, Scalar::Num))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
        Ok(if v.len() <= ID_MAX {
            Scalar::Str(v.to_string())
        } else {
            Scalar::Other
        })
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Scalar, A::Error> {
        while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Scalar, A::Error> {
        while a
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Scalar::Other)
    }
}

impl<'de> serde::Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        Ok(match d.deserialize_any(Small)? {
            Scalar::Null => Id::Null,
            Scalar::Num(n) => Id::Num(n),
            Scalar::Str(s) => Id::Str(s),
            Scalar::Other => Id::Other,
        })
    }
}

impl<'de> serde::Deserialize<'de> for Method {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Method, D::Error> {
        Ok(match d.deserialize_any(Small)? {
            Scalar::Str(s) => Method::Name(s),
            _ => Method::Other,
        })
    }
}

/// What a JSON text starting with `b` is, for an error.
fn kind_of_start(b: u8) -> &'static str {
    match b {
        b'[' => "array (a batch)",
        b'"' => "string",
        b't' | b'f' => "boolean",
        b'n' => "null",
        _ => "number",
    }
}

/// A message of the server's own (it has a method): a request, refused;
/// a notification, counted. Nothing for the client either way.
fn server_message(
    id: Option<&Value>,
    method: &str,
    to_server: &SyncSender<Vec<u8>>,
    stats: &Stats,
) -> Option<Incoming> {
    match id {
        // A request of the server's own: nothing is supported.
        Some(id) => {
            stats.server_requests.fetch_add(1, Ordering::Relaxed);
            let reply = json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": -32601,
                    "message": format!("not supported: latchclaw does not offer {}", cut(method, 80)),
                },
            });
            // A server that does not read its input loses the reply (one
            // that closed it ends the reader: the send fails the same).
            let _ = to_server.try_send(line(&reply));
        }
        None => {
            stats.notifications.fetch_add(1, Ordering::Relaxed);
        }
    }
    None
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "array (a batch)",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
        Value::Object(_) => "object",
    }
}

/// `s` cut to `max` chars.
pub fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Writes each message to the server's input until the client is gone,
/// sends [`CLOSE`] or the server closed it; dropping `input` then closes
/// the server's stdin.
pub fn write_loop(mut input: impl Write, from_client: Receiver<Vec<u8>>) {
    // A server that closed its stdin ends this loop, not latchclaw.
    crate::sys::signal::QuietPipes::for_this_thread();
    for msg in from_client {
        if msg == CLOSE {
            return;
        }
        if input.write_all(&msg).and_then(|()| input.flush()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    fn run(input: &[u8]) -> (Vec<Incoming>, Vec<Vec<u8>>, Arc<Stats>) {
        let (tx, rx) = sync_channel(1000);
        let (wtx, wrx) = sync_channel(1000);
        let stats = Arc::new(Stats::default());
        read_loop(input, tx, wtx, Arc::clone(&stats));
        (rx.try_iter().collect(), wrx.try_iter().collect(), stats)
    }

    #[test]
    fn responses_pass_requests_are_refused_notifications_dropped() {
        let (got, replies, stats) = run(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\
              {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"sampling/createMessage\"}\n\
              \n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"x\":1}}\n\
              {\"jsonrpc\":\"2.0\",\"id\":\"zz\",\"result\":{}}\n\
              {\"jsonrpc\":\"2.0\",\"id\":8,\"error\":{\"code\":-32602,\"message\":\"bad\"}}\n\
              not json\n[1,2]\n",
        );
        assert!(matches!(&got[0], Incoming::Response { id: 7, result: Ok(v) } if v["x"] == 1));
        assert!(
            matches!(&got[1], Incoming::Response { id: 8, result: Err(e) } if e.code == -32602)
        );
        assert!(matches!(&got[2], Incoming::Malformed(m) if m.starts_with("not JSON")));
        assert!(matches!(&got[3], Incoming::Malformed(m) if m.contains("batch")));
        assert!(matches!(got[4], Incoming::Closed));
        assert_eq!(got.len(), 5);
        let reply: Value = serde_json::from_slice(&replies[0]).unwrap();
        assert_eq!(reply["id"], "s1");
        assert_eq!(reply["error"]["code"], -32601);
        assert_eq!(stats.notifications.load(Ordering::Relaxed), 1);
        assert_eq!(stats.unmatched.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_servers_own_message_is_not_built_and_only_a_short_id_is_answered() {
        let long = "i".repeat(ID_MAX + 1);
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"{long}\",\"method\":\"sampling/createMessage\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":[1,[2,[3]]],\"method\":\"roots/list\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":null,\"params\":[[[[]]]]}}\n\
             {{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"method\":\"b\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{{}}}}\n"
        );
        let (got, replies, stats) = run(input.as_bytes());
        // The long and the structured ids get no answer; the null method is
        // a request all the same (answered); the duplicate key is malformed.
        assert_eq!(replies.len(), 1, "{replies:?}");
        let reply: Value = serde_json::from_slice(&replies[0]).unwrap();
        assert_eq!(reply["id"], 5);
        assert_eq!(stats.server_requests.load(Ordering::Relaxed), 3);
        assert!(
            matches!(&got[0], Incoming::Malformed(m) if m.contains("duplicate field")),
            "{got:?}"
        );
        assert!(
            matches!(&got[1], Incoming::Response { id: 9, .. }),
            "{got:?}"
        );
    }

    #[test]
    fn a_line_over_the_cap_stops_the_reader() {
        let mut big = vec![b'x'; MAX_LINE + 10];
        big.push(b'\n');
        big.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
        let (got, _, _) = run(&big);
        assert!(matches!(got[0], Incoming::TooLong));
        assert_eq!(got.len(), 1);
    }
}
