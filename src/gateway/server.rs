//! A small HTTP/1.1 server on `std::net`: one acceptor thread and a fixed
//! pool of workers fed by a bounded queue. What a stranger on the socket
//! can hold is bounded: connections (`max_connections`, then 503 at once),
//! the time a request head may take (an absolute deadline over the whole
//! head, not per read: a client dribbling a byte a second is cut at it),
//! the head's size (16 KiB, 431), the body's (`max_body_bytes`, 413 before
//! reading it), and a kept-alive connection's idleness (closed as soon as
//! another connection waits for a worker).

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Largest request head (request line and headers).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// A client that does not read its response is given up on after this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often waits look at the queue and the stop flag.
const SLICE_MS: i32 = 50;

#[derive(Debug, Clone)]
pub struct Limits {
    pub workers: usize,
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_body: u64,
}

#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// Without the query.
    pub path: String,
    pub query: String,
    /// Names in lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A query parameter, percent-decoded (`+` is a space).
    pub fn param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k) == name).then(|| decode(v))
        })
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, v: &Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: v.to_string().into_bytes(),
        }
    }

    /// `{"error": ..., "code": ...}`.
    pub fn error(status: u16, code: &str, msg: &str) -> Response {
        Response::json(status, &json!({"error": msg, "code": code}))
    }

    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// What the server calls for each request it read, and for each answer.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: &Request) -> Response;
    /// Every answer, also those the server gave itself (`path` is `None`
    /// when no request line was read).
    fn served(&self, path: Option<&str>, status: u16, took: Duration);
}

struct Shared {
    queue: Mutex<VecDeque<TcpStream>>,
    ready: Condvar,
    /// Connections queued or being served.
    held: AtomicUsize,
    /// Workers still running.
    live: AtomicUsize,
    stopping: AtomicBool,
}

impl Shared {
    fn others_waiting(&self) -> bool {
        !self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

/// Serves `listener` until `stop` says so, then stops accepting and lets
/// the requests being served finish for up to `grace`.
pub fn serve(
    listener: TcpListener,
    limits: Limits,
    handler: Arc<dyn Handler>,
    stop: &dyn Fn() -> bool,
    grace: Duration,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        held: AtomicUsize::new(0),
        live: AtomicUsize::new(limits.workers),
        stopping: AtomicBool::new(false),
    });
    for i in 0..limits.workers {
        let (own, handler, limits) = (Arc::clone(&shared), Arc::clone(&handler), limits.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("gateway-{i}"))
            .spawn(move || {
                worker(&own, handler.as_ref(), &limits);
                own.live.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            shared.live.fetch_sub(1, Ordering::SeqCst);
            shared.stopping.store(true, Ordering::SeqCst);
            shared.ready.notify_all();
            return Err(e);
        }
    }
    while !stop() {
        if !readable(listener.as_raw_fd(), 200) {
            continue;
        }
        match listener.accept() {
            Ok((stream, _)) => admit(&shared, &limits, handler.as_ref(), stream),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors, most likely: wait for some to close.
                log::warn!(target: "event::gateway_accept", "{e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    drop(listener);
    shared.stopping.store(true, Ordering::SeqCst);
    shared.ready.notify_all();
    let until = Instant::now() + grace;
    while shared.live.load(Ordering::SeqCst) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Queues a new connection, or answers 503 at once when the server holds
/// as many as it may.
fn admit(shared: &Shared, limits: &Limits, handler: &dyn Handler, stream: TcpStream) {
    let taken = shared
        .held
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < limits.max_connections).then_some(n + 1)
        });
    if taken.is_err() {
        let mut stream = stream;
        // Small enough for the socket buffer: the acceptor does not wait.
        let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
        let r = Response::error(
            503,
            "overloaded",
            "the gateway holds as many connections as it may (gateway.max_connections); retry shortly",
        )
        .with("Retry-After", "1");
        let _ = write_response(&mut stream, &r, false);
        handler.served(None, 503, Duration::ZERO);
        return;
    }
    let _ = stream.set_nodelay(true);
    shared
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back(stream);
    shared.ready.notify_one();
}

fn worker(shared: &Shared, handler: &dyn Handler, limits: &Limits) {
    loop {
        let stream = {
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(s) = q.pop_front() {
                    break Some(s);
                }
                if shared.stopping.load(Ordering::SeqCst) {
                    break None;
                }
                q = shared
                    .ready
                    .wait_timeout(q, Duration::from_millis(200))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        let Some(stream) = stream else {
            return;
        };
        connection(shared, handler, limits, stream);
        shared.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether `fd` has something to read (or hung up) within `ms`.
fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd this function owns.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

enum HeadError {
    /// The client closed, or the socket failed: nothing to answer.
    Gone,
    Timeout,
    TooLarge,
    Bad(String),
}

struct Head {
    method: String,
    target: String,
    /// HTTP/1.1 (else 1.0).
    v11: bool,
    headers: Vec<(String, String)>,
}

/// Reads a request head into `buf` (which may already hold the start of
/// it: pipelined bytes) by the absolute `deadline`; the head's bytes are
/// taken out of `buf`, what follows stays.
fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<Head, HeadError> {
    let mut chunk = [0u8; 4096];
    loop {
        if !buf.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(buf) {
                Ok(httparse::Status::Complete(n)) => {
                    if n > MAX_HEAD_BYTES {
                        return Err(HeadError::TooLarge);
                    }
                    let head = Head {
                        method: req.method.unwrap_or("").to_string(),
                        target: req.path.unwrap_or("").to_string(),
                        v11: req.version == Some(1),
                        headers: req
                            .headers
                            .iter()
                            .map(|h| {
                                (
                                    h.name.to_ascii_lowercase(),
                                    String::from_utf8_lossy(h.value).into_owned(),
                                )
                            })
                            .collect(),
                    };
                    buf.drain(..n);
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
                Err(e) => return Err(HeadError::Bad(format!("malformed request head: {e}"))),
            }
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(HeadError::Timeout);
        }
        let _ = stream.set_read_timeout(Some(deadline - now));
        match stream.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(HeadError::Timeout);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(HeadError::Gone),
        }
    }
}

/// Reads exactly `len` body bytes (the first of them maybe in `buf`) by
/// `deadline`; `None` when the client is gone or too slow.
fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    len: usize,
    deadline: Instant,
) -> Option<Vec<u8>> {
    let mut body = Vec::with_capacity(len);
    let from_buf = len.min(buf.len());
    body.extend(buf.drain(..from_buf));
    let mut chunk = [0u8; 8192];
    while body.len() < len {
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        let _ = stream.set_read_timeout(Some(deadline - now));
        let want = (len - body.len()).min(chunk.len());
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return None,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(body)
}

/// Serves one connection's requests until it closes, fails, idles, or
/// another connection needs the worker.
fn connection(shared: &Shared, handler: &dyn Handler, limits: &Limits, mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut buf = Vec::new();
    let mut first = true;
    loop {
        if !first && buf.is_empty() && !wait_for_request(shared, limits, &stream) {
            return;
        }
        first = false;
        let started = Instant::now();
        let head = match read_head(&mut stream, &mut buf, started + limits.header_timeout) {
            Ok(h) => h,
            Err(e) => {
                let r = match e {
                    HeadError::Gone => return,
                    HeadError::Timeout => Response::error(
                        408,
                        "timeout",
                        "the request head did not arrive in time (gateway.header_timeout_ms)",
                    ),
                    HeadError::TooLarge => Response::error(
                        431,
                        "head_too_large",
                        &format!(
                            "the request head is over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} headers"
                        ),
                    ),
                    HeadError::Bad(why) => Response::error(400, "bad_request", &why),
                };
                let _ = write_response(&mut stream, &r, false);
                handler.served(None, r.status, started.elapsed());
                return;
            }
        };
        let (path, query) = match head.target.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (head.target.clone(), String::new()),
        };
        let connection_says = head
            .headers
            .iter()
            .find(|(n, _)| n == "connection")
            .map(|(_, v)| v.to_ascii_lowercase());
        let mut keep = match &connection_says {
            Some(v) if v.contains("close") => false,
            Some(v) if v.contains("keep-alive") => true,
            _ => head.v11,
        };
        let refuse = |status, code, msg: &str| Some(Response::error(status, code, msg));
        let lengths: Vec<&str> = head
            .headers
            .iter()
            .filter(|(n, _)| n == "content-length")
            .map(|(_, v)| v.trim())
            .collect();
        let chunked = head.headers.iter().any(|(n, _)| n == "transfer-encoding");
        let mut body_len = 0usize;
        let mut early = None;
        if chunked {
            early = refuse(
                411,
                "length_required",
                "chunked request bodies are not accepted; send Content-Length",
            );
        } else if let Some(first_len) = lengths.first() {
            match first_len.parse::<u64>() {
                Ok(n) if lengths.iter().all(|l| l == first_len) => {
                    if n > limits.max_body {
                        early = refuse(
                            413,
                            "body_too_large",
                            &format!(
                                "the body is {n} bytes; the limit is {} (gateway.max_body_bytes)",
                                limits.max_body
                            ),
                        );
                    } else {
                        body_len = n as usize;
                    }
                }
                _ => early = refuse(400, "bad_request", "invalid Content-Length"),
            }
        }
        if let Some(r) = early {
            // The body is not read: the connection cannot be reused.
            let _ = write_response(&mut stream, &r, false);
            handler.served(Some(&path), r.status, started.elapsed());
            drain(&mut stream);
            return;
        }
        let expects_continue = head
            .headers
            .iter()
            .any(|(n, v)| n == "expect" && v.eq_ignore_ascii_case("100-continue"));
        if expects_continue
            && body_len > buf.len()
            && stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_err()
        {
            return;
        }
        let Some(body) = read_body(
            &mut stream,
            &mut buf,
            body_len,
            Instant::now() + limits.header_timeout,
        ) else {
            return;
        };
        let req = Request {
            method: head.method,
            path,
            query,
            headers: head.headers,
            body,
        };
        let r = handler.handle(&req);
        if shared.stopping.load(Ordering::SeqCst) {
            keep = false;
        }
        let written = write_response(&mut stream, &r, keep);
        handler.served(Some(&req.path), r.status, started.elapsed());
        if written.is_err() || !keep {
            return;
        }
    }
}

/// Reads and drops what the client is still sending, briefly, so closing
/// with unread bytes does not reset the connection before the client has
/// read the answer.
fn drain(stream: &mut TcpStream) {
    let until = Instant::now() + Duration::from_millis(200);
    let mut chunk = [0u8; 8192];
    let mut left = 1usize << 20;
    while left > 0 && Instant::now() < until {
        let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => left = left.saturating_sub(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// Waits for the next request on a kept-alive connection: false when it
/// closed, stayed idle past `idle_timeout`, or another connection is
/// waiting for a worker (an idle client must not hold one).
fn wait_for_request(shared: &Shared, limits: &Limits, stream: &TcpStream) -> bool {
    let until = Instant::now() + limits.idle_timeout;
    let fd = stream.as_raw_fd();
    loop {
        // What is already there first: a client sending its next request
        // at once keeps its connection even under load.
        if readable(fd, 0) {
            return true;
        }
        if Instant::now() >= until
            || shared.others_waiting()
            || shared.stopping.load(Ordering::SeqCst)
        {
            return false;
        }
        if readable(fd, SLICE_MS) {
            return true;
        }
    }
}

fn write_response(stream: &mut TcpStream, r: &Response, keep: bool) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(160 + r.body.len());
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
        if keep { "keep-alive" } else { "close" }
    );
    for (n, v) in &r.headers {
        // Header values are ours, but never let one split the head.
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        let _ = write!(out, "{n}: {v}\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&r.body);
    stream.write_all(&out)?;
    if !keep {
        // Lets the client read the answer before the close resets it.
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        let r = Request {
            method: "GET".into(),
            path: "/x".into(),
            query: "q=a+b%21&limit=3&bad=%zz&end=%4".into(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        assert_eq!(r.param("q").as_deref(), Some("a b!"));
        assert_eq!(r.param("limit").as_deref(), Some("3"));
        assert_eq!(r.param("bad").as_deref(), Some("%zz"));
        assert_eq!(r.param("end").as_deref(), Some("%4"));
        assert_eq!(r.param("none"), None);
    }
}
