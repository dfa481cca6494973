//! A fake HTTP server on 127.0.0.1 for provider and http-tool tests: it
//! replays scripted replies in order (the last one repeats) and records
//! every request it receives, and how long it took over each (the
//! benchmark suite uses it too, to take the server's own time out of a
//! client's).
//!
//! It writes like real servers do (Python's http.server, cpp-httplib as
//! llama-server builds it, many proxies): HTTP/1.1 keep-alive, the head and
//! the body in separate writes, TCP_NODELAY off. A client that delays its
//! ACKs meets Nagle's algorithm here; that is the client's problem to solve.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Accept, read the request, then never answer.
    pub hang: bool,
    /// A `text/event-stream` body, chunked: each (delay in ms, raw bytes)
    /// is one chunk, written after its delay.
    pub sse: Option<Vec<(u64, String)>>,
    /// With `sse`: close the connection after the last event, without the
    /// chunked body's end (a stream cut off).
    pub cut: bool,
    /// Send the body `Transfer-Encoding: chunked` in this many chunks, each
    /// its own write, then the last chunk in another (0: `Content-Length`).
    pub chunks: usize,
    /// Say `Connection: close` and close after the body, which has no
    /// length of its own (it ends with the connection, as HTTP/1.0-style
    /// servers send it) unless it is chunked.
    pub close: bool,
}

impl Reply {
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into(),
            hang: false,
            sse: None,
            cut: false,
            chunks: 0,
            close: false,
        }
    }
    /// A reply whose body is `fixtures/openai/NAME`.
    pub fn fixture(status: u16, name: &str) -> Reply {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/openai")
            .join(name);
        Reply::json(status, std::fs::read(p).unwrap())
    }
    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
    /// Server-sent events (see `sse`), each written as its own chunk.
    pub fn sse(events: Vec<(u64, String)>) -> Reply {
        Reply {
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            sse: Some(events),
            ..Reply::json(200, "")
        }
    }
    /// Like `sse`, but the connection closes after the last event without
    /// ending the body.
    pub fn sse_cut(events: Vec<(u64, String)>) -> Reply {
        Reply {
            cut: true,
            ..Reply::sse(events)
        }
    }
    pub fn hang() -> Reply {
        Reply {
            hang: true,
            ..Reply::json(200, "")
        }
    }
    /// The body in `n` chunks (at least one).
    pub fn chunked(mut self, n: usize) -> Reply {
        self.chunks = n.max(1);
        self
    }
    /// `Connection: close`, then close.
    pub fn close(mut self) -> Reply {
        self.close = true;
        self
    }
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The client's port: requests with the same port came on one connection.
    pub peer_port: u16,
    /// When its first bytes were read.
    pub received: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Picks the reply to a request, given the request and how many came
/// before it (on any connection).
pub type Responder = dyn Fn(&Recorded, usize) -> Reply + Send + Sync;

pub struct FakeServer {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// Per answered request: from its first bytes read to the reply
    /// written.
    pub handled: Arc<Mutex<Vec<Duration>>>,
}

impl FakeServer {
    pub fn start(replies: Vec<Reply>) -> FakeServer {
        Self::start_on("127.0.0.1:0", replies)
    }

    pub fn start_on(addr: &str, replies: Vec<Reply>) -> FakeServer {
        Self::start_with(addr, move |_, n| replies[n.min(replies.len() - 1)].clone())
    }

    /// A server whose replies `respond` picks per request.
    pub fn start_with(
        addr: &str,
        respond: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> FakeServer {
        let listener = TcpListener::bind(addr).unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handled = Arc::new(Mutex::new(Vec::new()));
        let (rec, times) = (requests.clone(), handled.clone());
        let respond: Arc<Responder> = Arc::new(respond);
        let count = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (respond, count) = (respond.clone(), count.clone());
                let (rec, times) = (rec.clone(), times.clone());
                std::thread::spawn(move || serve(stream, &*respond, &count, &rec, &times));
            }
        });
        FakeServer {
            port,
            requests,
            handled,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// A server that enforces OpenAI's rule for tool calls before `respond`
/// sees a request: an assistant message with `tool_calls` must be followed
/// by `tool` messages answering every `tool_call_id`, and a `tool` message
/// must answer a call of the assistant message before it. A request that
/// breaks it gets the 400 OpenAI sends (`pairing_error`).
pub fn strict_openai(
    respond: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
) -> FakeServer {
    FakeServer::start_with("127.0.0.1:0", move |req, n| {
        pairing_error(&req.json()).unwrap_or_else(|| respond(req, n))
    })
}

/// OpenAI's reply to a chat request whose tool messages do not pair with
/// the calls before them (the texts are OpenAI's, typo included), or None.
pub fn pairing_error(body: &serde_json::Value) -> Option<Reply> {
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);
    let error = |message: String, at: usize| {
        let body = serde_json::json!({"error": {
            "message": message,
            "type": "invalid_request_error",
            "param": format!("messages.[{at}].role"),
            "code": null,
        }});
        Some(Reply::json(400, body.to_string()))
    };
    let orphan = |at| {
        error(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding \
             message with 'tool_calls'."
                .into(),
            at,
        )
    };
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        match m["role"].as_str() {
            Some("tool") => return orphan(i),
            Some("assistant") => {
                let mut open: Vec<&str> = m["tool_calls"]
                    .as_array()
                    .unwrap_or(&empty)
                    .iter()
                    .map(|c| c["id"].as_str().unwrap_or(""))
                    .collect();
                let at = i;
                i += 1;
                while i < messages.len() && messages[i]["role"] == "tool" {
                    let id = messages[i]["tool_call_id"].as_str().unwrap_or("");
                    match open.iter().position(|o| *o == id) {
                        Some(p) => open.remove(p),
                        None => return orphan(i),
                    };
                    i += 1;
                }
                if !open.is_empty() {
                    return error(
                        format!(
                            "An assistant message with 'tool_calls' must be followed by tool \
                             messages responding to each 'tool_call_id'. The following \
                             tool_call_ids did not have response messages: {}",
                            open.join(", ")
                        ),
                        at,
                    );
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Answers requests on one connection until the client closes it, asks to
/// close it, or a reply closes it.
fn serve(
    mut stream: TcpStream,
    respond: &Responder,
    count: &AtomicUsize,
    rec: &Mutex<Vec<Recorded>>,
    times: &Mutex<Vec<Duration>>,
) {
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let peer_port = stream.peer_addr().map_or(0, |a| a.port());
    let mut buf = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buf, peer_port) else {
            return;
        };
        let started = request.received;
        let reply = respond(&request, count.fetch_add(1, Ordering::SeqCst));
        let client_close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        rec.lock().unwrap().push(request);
        if reply.hang {
            std::thread::sleep(Duration::from_secs(30));
            return;
        }
        if let Some(events) = &reply.sse {
            // A stream ends its connection (see `write_sse`).
            if write_sse(&mut stream, &reply, events) {
                times.lock().unwrap().push(started.elapsed());
            }
            return;
        }
        if write_reply(&mut stream, &reply).is_err() {
            return;
        }
        times.lock().unwrap().push(started.elapsed());
        if reply.close || client_close {
            return;
        }
    }
}

/// Reads one request (keeping any bytes past it in `buf` for the next);
/// None once the client is gone.
fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>, peer_port: u16) -> Option<Recorded> {
    let mut chunk = [0u8; 8192];
    let mut started = (!buf.is_empty()).then(Instant::now);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        started.get_or_insert_with(Instant::now);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let first: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let end = buf.len().min(head_end + len);
    let body = String::from_utf8_lossy(&buf[head_end..end]).into_owned();
    buf.drain(..end);
    let request = Recorded {
        method: first.first().unwrap_or(&"").to_string(),
        path: first.get(1).unwrap_or(&"").to_string(),
        headers,
        body,
        peer_port,
        received: started.unwrap_or_else(Instant::now),
    };
    Some(request)
}

/// The head in one write, the body in another (or one per chunk).
fn write_reply(stream: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} Test\r\n", reply.status);
    if reply.chunks > 0 {
        head.push_str("Transfer-Encoding: chunked\r\n");
    } else if !reply.close {
        head.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
    }
    if reply.close {
        head.push_str("Connection: close\r\n");
    }
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if reply.chunks > 0 {
        let size = reply.body.len().div_ceil(reply.chunks).max(1);
        for piece in reply.body.chunks(size) {
            let mut c = format!("{:x}\r\n", piece.len()).into_bytes();
            c.extend_from_slice(piece);
            c.extend_from_slice(b"\r\n");
            stream.write_all(&c)?;
        }
        stream.write_all(b"0\r\n\r\n")?;
    } else if !reply.body.is_empty() {
        stream.write_all(&reply.body)?;
    }
    stream.flush()
}

/// Writes a `text/event-stream` reply: the head, then each event as one
/// chunk after its delay (nodelay, so each leaves at once).
fn write_sse(stream: &mut TcpStream, reply: &Reply, events: &[(u64, String)]) -> bool {
    let _ = stream.set_nodelay(true);
    let mut head = format!(
        "HTTP/1.1 {} Test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n",
        reply.status
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).is_err() {
        return false;
    }
    for (delay, raw) in events {
        std::thread::sleep(Duration::from_millis(*delay));
        // A chunk of length 0 would end the body.
        if raw.is_empty() {
            continue;
        }
        let chunk = format!("{:x}\r\n{raw}\r\n", raw.len());
        if stream.write_all(chunk.as_bytes()).is_err() {
            return false;
        }
    }
    if !reply.cut {
        let _ = stream.write_all(b"0\r\n\r\n");
    }
    let _ = stream.flush();
    true
}
