//! A fake HTTP server on 127.0.0.1 for provider and http-tool tests: it
//! replays scripted replies in order (the last one repeats) and records
//! every request it receives, and how long it took over each (the
//! benchmark suite uses it too, to take the server's own time out of a
//! client's).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
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
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
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

pub struct FakeServer {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// Per answered request: from accepting the connection to the reply
    /// written.
    pub handled: Arc<Mutex<Vec<Duration>>>,
}

impl FakeServer {
    pub fn start(replies: Vec<Reply>) -> FakeServer {
        Self::start_on("127.0.0.1:0", replies)
    }

    pub fn start_on(addr: &str, replies: Vec<Reply>) -> FakeServer {
        let listener = TcpListener::bind(addr).unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handled = Arc::new(Mutex::new(Vec::new()));
        let (rec, times) = (requests.clone(), handled.clone());
        let replies = Arc::new(replies);
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let accepted = Instant::now();
                let Ok(stream) = stream else { continue };
                let reply = replies[n.min(replies.len() - 1)].clone();
                let (rec, times) = (rec.clone(), times.clone());
                std::thread::spawn(move || {
                    if serve(stream, reply, rec) {
                        times.lock().unwrap().push(accepted.elapsed());
                    }
                });
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

/// Reads one request, records it, answers; false if nothing was answered.
fn serve(mut stream: TcpStream, reply: Reply, rec: Arc<Mutex<Vec<Recorded>>>) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
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
    rec.lock().unwrap().push(Recorded {
        method: first.first().unwrap_or(&"").to_string(),
        path: first.get(1).unwrap_or(&"").to_string(),
        headers,
        body: String::from_utf8_lossy(&buf[head_end..]).into_owned(),
    });
    if reply.hang {
        std::thread::sleep(Duration::from_secs(30));
        return false;
    }
    if let Some(events) = &reply.sse {
        return write_sse(&mut stream, &reply, events);
    }
    let mut out = format!(
        "HTTP/1.1 {} Test\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    // One write: head and body in separate small writes wait on Nagle's
    // algorithm and the client's delayed ACK (measured: +2 ms a request).
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&reply.body);
    let _ = stream.write_all(&bytes);
    let _ = stream.flush();
    true
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
