//! A small HTTP/1.1 server on `std::net`, split so that no worker ever
//! waits on a client it has not admitted.
//!
//! - **The poller** (the thread that calls [`serve`]) holds every
//!   connection between requests, on non-blocking sockets under poll(2):
//!   it accepts, reads request heads, and queues a connection for the
//!   workers only once its whole head is buffered. The deadlines are its
//!   own: a head must arrive within `header_timeout` however slowly it
//!   dribbles (408, from the poller), an idle kept-alive connection is
//!   closed after `idle_timeout`, and it finishes writing answers a client
//!   reads slowly and lingers on closing connections. A thousand silent or
//!   slow sockets cost it file descriptors, not threads.
//! - **Workers** (`workers` threads, one FIFO queue) take a connection with
//!   its head, check the framing and ask the handler to admit it (the
//!   token) before reading any body or sending `100 Continue`, read an
//!   admitted body by its own deadline (408), answer, and give the
//!   connection back to the poller instead of waiting for its next
//!   request. A pipelining or kept-alive client thus queues behind the
//!   others for every request, and is closed after [`MAX_REQUESTS`].
//!
//! Also bounded: connections (`max_connections`; beyond it the longest
//! idle or closing one is closed for the newcomer, else 503 at once), a
//! head (16 KiB, 64 headers: 431), a body (`max_body`: 413 unread).
//!
//! Every body goes out through the redactor [`serve`] is given, where it
//! is written: secrets a request carried do not come back in an echo.

use crate::security::redact::{Counts, Redactor};
use crate::sys::poll::{PollSet, Want};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Largest request head (request line and headers).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// Requests one connection may make; then it is closed.
pub const MAX_REQUESTS: u32 = 1000;
/// A client that does not read its response is given up on after this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a closing connection is read from, at most.
const LINGER: Duration = Duration::from_millis(500);
/// How often the poller looks at the stop flag.
const TICK: Duration = Duration::from_millis(200);
const CHUNK: usize = 8192;

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
    /// Private: only [`render`] turns it into bytes, through the server's
    /// redactor.
    body: Body,
}

/// A body as built, redacted when it is written: a JSON value string by
/// string (an escaped secret would not match in its text), text whole.
#[derive(Debug)]
enum Body {
    Json(Value),
    Text(String),
}

impl Response {
    pub fn json(status: u16, v: &Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: Body::Json(v.clone()),
        }
    }

    pub fn text(status: u16, content_type: &'static str, body: String) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: Body::Text(body),
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

/// What the server calls for each request, and for each answer.
pub trait Handler: Send + Sync + 'static {
    /// Looks at a request's head (its body empty) before any of the body
    /// is read or `100 Continue` is sent. A response refuses the request:
    /// it is sent as is and the connection closed, the body unread.
    fn admit(&self, head: &Request) -> Option<Response>;
    /// An admitted request, with its body.
    fn handle(&self, req: &Request) -> Response;
    /// Every answer, also those the server gave itself (`path` is `None`
    /// when no request line was read).
    fn served(&self, path: Option<&str>, status: u16, took: Duration);
}

/// One of `max_connections`, given back wherever the connection is dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Conn {
    /// Non-blocking, always: no read or write of it waits.
    stream: TcpStream,
    /// Read and not used yet: a head in progress, or what followed one.
    buf: Vec<u8>,
    served: u32,
    _slot: Slot,
}

struct Head {
    method: String,
    target: String,
    /// HTTP/1.1 (else 1.0).
    v11: bool,
    headers: Vec<(String, String)>,
}

/// A connection whose whole head is read, for a worker.
struct Job {
    conn: Conn,
    head: Head,
    at: Instant,
}

/// A connection a worker answered, back to the poller with what it could
/// not write at once.
struct Back {
    conn: Conn,
    out: Vec<u8>,
    then: After,
}

/// What becomes of a connection once its answer is written.
#[derive(Clone, Copy)]
enum After {
    /// Kept for the next request.
    Keep,
    /// Closed: the client sent nothing more.
    Close,
    /// Closed once the client stops sending (the rest of a refused
    /// request), briefly: a close with unread bytes resets the connection,
    /// and the client may lose the answer.
    Linger,
}

enum Phase {
    /// Kept alive between requests, nothing of the next one read.
    Idle,
    /// Reading a head.
    Head,
    /// Writing the rest of a response.
    Flush(Vec<u8>, After),
    /// Answered and shut for writing: what the client still sends is read
    /// and dropped (`After::Linger`).
    Closing,
}

struct Polled {
    conn: Conn,
    phase: Phase,
    deadline: Instant,
    since: Instant,
}

struct Shared {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    back: Mutex<Vec<Back>>,
    /// A byte here wakes the poller: something was given back.
    wake: UnixStream,
    /// Workers still running.
    live: AtomicUsize,
    stopping: AtomicBool,
    /// Every body passes through it as it is written.
    redactor: Arc<Redactor>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serves `listener` until `stop` says so, then stops accepting and lets
/// the requests being served finish for up to `grace`. The calling thread
/// is the poller. Every response body is written through `redactor`.
pub fn serve(
    listener: TcpListener,
    limits: Limits,
    handler: Arc<dyn Handler>,
    redactor: Arc<Redactor>,
    stop: &dyn Fn() -> bool,
    grace: Duration,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let (wake_rx, wake_tx) = UnixStream::pair()?;
    wake_rx.set_nonblocking(true)?;
    wake_tx.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        jobs: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        back: Mutex::new(Vec::new()),
        wake: wake_tx,
        live: AtomicUsize::new(limits.workers),
        stopping: AtomicBool::new(false),
        redactor,
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
    let mut p = Poller {
        shared: Arc::clone(&shared),
        handler,
        limits,
        held: Arc::new(AtomicUsize::new(0)),
        conns: Vec::new(),
    };
    let mut fds = PollSet::default();
    let mut sink = [0u8; 64];
    while !stop() {
        p.take_back();
        let now = Instant::now();
        let mut next = now + TICK;
        fds.clear();
        fds.push(&listener, Want::Read);
        fds.push(&wake_rx, Want::Read);
        for c in &p.conns {
            next = next.min(c.deadline);
            let want = match c.phase {
                Phase::Flush(..) => Want::Write,
                _ => Want::Read,
            };
            fds.push(&c.conn.stream, want);
        }
        let ms = next.saturating_duration_since(now).as_millis() as i32 + 1;
        if fds.wait(ms).is_err() {
            continue; // EINTR: look at `stop` again
        }
        if fds.ready(1) {
            while matches!((&wake_rx).read(&mut sink), Ok(n) if n > 0) {}
        }
        p.step(|i| fds.ready(2 + i));
        if fds.ready(0) {
            p.accept(&listener);
        }
    }
    drop(listener);
    drop(p);
    shared.stopping.store(true, Ordering::SeqCst);
    shared.ready.notify_all();
    let until = Instant::now() + grace;
    while shared.live.load(Ordering::SeqCst) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The connections between requests, and the deadlines on them.
struct Poller {
    shared: Arc<Shared>,
    handler: Arc<dyn Handler>,
    limits: Limits,
    /// Connections held anywhere: here, queued or with a worker.
    held: Arc<AtomicUsize>,
    conns: Vec<Polled>,
}

impl Poller {
    fn take_back(&mut self) {
        let back = std::mem::take(&mut *lock(&self.shared.back));
        let now = Instant::now();
        for b in back {
            if let Some(p) = self.answered(b.conn, b.out, b.then, now) {
                self.conns.push(p);
            }
        }
    }

    /// After a response of which `out` is still to be written: flushed,
    /// then as `then` says.
    fn answered(&self, conn: Conn, out: Vec<u8>, then: After, now: Instant) -> Option<Polled> {
        let polled = |conn, phase, after| Polled {
            conn,
            phase,
            deadline: now + after,
            since: now,
        };
        if !out.is_empty() {
            return Some(polled(conn, Phase::Flush(out, then), WRITE_TIMEOUT));
        }
        match then {
            After::Keep => {}
            After::Close => return None,
            After::Linger => {
                let _ = conn.stream.shutdown(std::net::Shutdown::Write);
                return Some(polled(conn, Phase::Closing, LINGER));
            }
        }
        if conn.buf.is_empty() {
            return Some(polled(conn, Phase::Idle, self.limits.idle_timeout));
        }
        // Pipelined: the next head may be here already.
        self.parse(polled(conn, Phase::Head, self.limits.header_timeout), now)
    }

    /// Moves every connection on by what poll(2) said (`ready(i)` is
    /// `conns[i]`'s) and by the clock.
    fn step(&mut self, ready: impl Fn(usize) -> bool) {
        let now = Instant::now();
        for i in (0..self.conns.len()).rev() {
            let p = self.conns.swap_remove(i);
            if let Some(p) = self.advance(p, ready(i), now) {
                self.conns.push(p);
            }
        }
    }

    fn advance(&self, mut p: Polled, ready: bool, now: Instant) -> Option<Polled> {
        match p.phase {
            Phase::Idle | Phase::Head => {
                if ready {
                    let room = MAX_HEAD_BYTES + 1 - p.conn.buf.len().min(MAX_HEAD_BYTES);
                    match read_some(&mut p.conn.stream, &mut p.conn.buf, room.min(CHUNK)) {
                        None => return None,
                        Some(0) => {}
                        Some(_) => {
                            if matches!(p.phase, Phase::Idle) {
                                p.phase = Phase::Head;
                                p.deadline = now + self.limits.header_timeout;
                            }
                            return self.parse(p, now);
                        }
                    }
                }
                if now < p.deadline {
                    Some(p)
                } else if matches!(p.phase, Phase::Idle) {
                    None
                } else {
                    self.refuse(
                        p.conn,
                        Response::error(
                            408,
                            "timeout",
                            "the request head did not arrive in time (gateway.header_timeout_ms)",
                        ),
                        now,
                    )
                }
            }
            Phase::Flush(mut out, then) => {
                if ready {
                    match (&p.conn.stream).write(&out) {
                        Ok(n) => drop(out.drain(..n)),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => return None,
                    }
                    if out.is_empty() {
                        return self.answered(p.conn, out, then, now);
                    }
                }
                p.phase = Phase::Flush(out, then);
                (now < p.deadline).then_some(p)
            }
            Phase::Closing => {
                let mut sink = [0u8; CHUNK];
                if ready {
                    match (&p.conn.stream).read(&mut sink) {
                        Ok(0) => return None,
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                ErrorKind::WouldBlock | ErrorKind::Interrupted
                            ) => {}
                        Err(_) => return None,
                    }
                }
                (now < p.deadline).then_some(p)
            }
        }
    }

    /// A whole head goes to the workers; a partial one waits for more.
    fn parse(&self, mut p: Polled, now: Instant) -> Option<Polled> {
        match parse_head(&p.conn.buf) {
            Ok(None) => Some(p),
            Ok(Some((head, n))) => {
                p.conn.buf.drain(..n);
                lock(&self.shared.jobs).push_back(Job {
                    conn: p.conn,
                    head,
                    at: now,
                });
                self.shared.ready.notify_one();
                None
            }
            Err(r) => self.refuse(p.conn, r, now),
        }
    }

    /// Answers `r` itself and closes.
    fn refuse(&self, mut conn: Conn, r: Response, now: Instant) -> Option<Polled> {
        self.handler.served(None, r.status, Duration::ZERO);
        let out = send(&mut conn.stream, &r, false, &self.shared.redactor)?;
        self.answered(conn, out, After::Linger, now)
    }

    fn accept(&mut self, listener: &TcpListener) {
        // A bounded batch: the others wait for the next round.
        for _ in 0..64 {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    return;
                }
                Err(e) => {
                    // Out of descriptors, most likely: wait for some to close.
                    log::warn!(target: "event::gateway_accept", "{e}");
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            let max = self.limits.max_connections;
            let held = Arc::clone(&self.held);
            let take = || {
                held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n < max).then_some(n + 1)
                })
                .is_ok()
            };
            // Connections given back meanwhile may be done with.
            if !take() && !(self.take_back(), take()).1 && !self.evict() {
                let mut stream = stream;
                let r = Response::error(
                    503,
                    "overloaded",
                    "the gateway holds as many connections as it may (gateway.max_connections); \
                     retry shortly",
                )
                .with("Retry-After", "1");
                self.handler.served(None, 503, Duration::ZERO);
                let _ = send(&mut stream, &r, false, &self.shared.redactor);
                // Closes that came in meanwhile are seen before the next.
                return;
            }
            let now = Instant::now();
            let p = Polled {
                conn: Conn {
                    stream,
                    buf: Vec::new(),
                    served: 0,
                    _slot: Slot(Arc::clone(&self.held)),
                },
                phase: Phase::Head,
                deadline: now + self.limits.header_timeout,
                since: now,
            };
            // The request often came with the connection: one poll less.
            if let Some(p) = self.advance(p, true, now) {
                self.conns.push(p);
            }
        }
    }

    /// Closes the longest-waiting idle or closing connection for a new one
    /// (its slot passes to the new one); false when there is none.
    fn evict(&mut self) -> bool {
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c.phase, Phase::Idle | Phase::Closing))
            .min_by_key(|(_, c)| c.since)
            .map(|(i, _)| i);
        let Some(i) = oldest else {
            return false;
        };
        self.conns.swap_remove(i);
        self.held.fetch_add(1, Ordering::SeqCst);
        true
    }
}

/// Reads at most `max` bytes onto `buf`: how many (0: none there yet), or
/// `None` when the client closed or the socket failed.
fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>, max: usize) -> Option<usize> {
    let mut chunk = [0u8; CHUNK];
    match stream.read(&mut chunk[..max.clamp(1, CHUNK)]) {
        Ok(0) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(n)
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Some(0),
        Err(_) => None,
    }
}

/// The head at the start of `buf` and its length; `None` while partial.
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, Response> {
    let too_large = || {
        Response::error(
            431,
            "head_too_large",
            &format!("the request head is over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} headers"),
        )
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD_BYTES => Ok(Some((
            Head {
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
            },
            n,
        ))),
        Ok(httparse::Status::Complete(_)) => Err(too_large()),
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => Err(too_large()),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(too_large()),
        Err(e) => Err(Response::error(
            400,
            "bad_request",
            &format!("malformed request head: {e}"),
        )),
    }
}

fn worker(shared: &Shared, handler: &dyn Handler, limits: &Limits) {
    loop {
        let job = {
            let mut q = lock(&shared.jobs);
            loop {
                if let Some(j) = q.pop_front() {
                    break j;
                }
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                q = shared
                    .ready
                    .wait_timeout(q, Duration::from_millis(200))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        if let Some(b) = request(shared, handler, limits, job) {
            if b.out.is_empty() && matches!(b.then, After::Close) {
                continue; // closed here, its slot free at once
            }
            lock(&shared.back).push(b);
            // Full means a wake-up is pending already.
            let _ = (&shared.wake).write(&[1]);
        }
    }
}

/// `1*DIGIT`, nothing else (no sign, no space inside).
fn content_length(v: &str) -> Option<u64> {
    let v = v.trim_matches([' ', '\t']);
    (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse().ok())
        .flatten()
}

/// How long the body is, or why the request cannot be read.
fn framing(req: &Request) -> Result<u64, Response> {
    let bad = |msg: &str| Err(Response::error(400, "bad_request", msg));
    if req.header("transfer-encoding").is_some() {
        return Err(Response::error(
            411,
            "length_required",
            "chunked request bodies are not accepted; send Content-Length",
        ));
    }
    let mut lengths = req.headers.iter().filter(|(n, _)| n == "content-length");
    match (lengths.next(), lengths.next()) {
        (None, _) => Ok(0),
        (Some(_), Some(_)) => bad("more than one Content-Length header"),
        (Some((_, v)), None) => match content_length(v) {
            Some(n) => Ok(n),
            None => {
                bad("invalid Content-Length: allowed is a decimal number of bytes (digits only)")
            }
        },
    }
}

/// Serves the request of `job`: the connection goes back to the poller
/// (`None`: it is gone).
fn request(shared: &Shared, handler: &dyn Handler, limits: &Limits, job: Job) -> Option<Back> {
    let Job { mut conn, head, at } = job;
    conn.served += 1;
    let (path, query) = match head.target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (head.target, String::new()),
    };
    let mut req = Request {
        method: head.method,
        path,
        query,
        headers: head.headers,
        body: Vec::new(),
    };
    let asked = match req.header("connection").map(str::to_ascii_lowercase) {
        Some(v) if v.contains("close") => false,
        Some(v) if v.contains("keep-alive") => true,
        _ => head.v11,
    };
    // Refused before the body is read: the connection cannot be reused.
    let refuse = |mut conn: Conn, r: Response, req: &Request| {
        // Counted before it is written: a client that reads /metrics right
        // after its answer sees its own request.
        handler.served(Some(&req.path), r.status, at.elapsed());
        let out = send(&mut conn.stream, &r, false, &shared.redactor)?;
        Some(Back {
            conn,
            out,
            then: After::Linger,
        })
    };
    let len = match framing(&req) {
        Ok(n) => n,
        Err(r) => return refuse(conn, r, &req),
    };
    if let Some(r) = handler.admit(&req) {
        return refuse(conn, r, &req);
    }
    if len > limits.max_body {
        let msg = format!(
            "the body is {len} bytes; the limit is {} (gateway.max_body_bytes)",
            limits.max_body
        );
        return refuse(conn, Response::error(413, "body_too_large", &msg), &req);
    }
    let len = len as usize;
    let continues = req
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
    if continues && len > conn.buf.len() && (&conn.stream).write(CONTINUE).ok()? < CONTINUE.len() {
        return None;
    }
    match read_body(&mut conn, len, Instant::now() + limits.header_timeout) {
        Ok(body) => req.body = body,
        Err(true) => {
            let r = Response::error(
                408,
                "timeout",
                "the request body did not arrive in time (gateway.header_timeout_ms)",
            );
            return refuse(conn, r, &req);
        }
        Err(false) => return None,
    }
    let r = handler.handle(&req);
    let keep = asked && conn.served < MAX_REQUESTS && !shared.stopping.load(Ordering::SeqCst);
    handler.served(Some(&req.path), r.status, at.elapsed());
    let out = send(&mut conn.stream, &r, keep, &shared.redactor)?;
    let then = match (keep, conn.buf.is_empty()) {
        (true, _) => After::Keep,
        (false, true) => After::Close,
        (false, false) => After::Linger,
    };
    Some(Back { conn, out, then })
}

/// Exactly `len` body bytes (the first of them maybe in `conn.buf`) by
/// `deadline`; `Err(true)` when it passed, `Err(false)` when the client is
/// gone.
fn read_body(conn: &mut Conn, len: usize, deadline: Instant) -> Result<Vec<u8>, bool> {
    let mut body = Vec::with_capacity(len);
    let from_buf = len.min(conn.buf.len());
    body.extend(conn.buf.drain(..from_buf));
    while body.len() < len {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(true);
        }
        let ms = left.as_millis().min(1000) as i32 + 1;
        if !readable(&conn.stream, ms) {
            continue;
        }
        let want = len - body.len();
        match read_some(&mut conn.stream, &mut body, want) {
            Some(_) => {}
            None => return Err(false),
        }
    }
    Ok(body)
}

/// Whether `fd` has something to read (or hung up) within `ms`.
fn readable(fd: &TcpStream, ms: i32) -> bool {
    crate::sys::poll::readable(fd, ms).unwrap_or(false)
}

/// Writes what the socket takes now; returns the rest (for the poller), or
/// `None` when the socket failed.
fn send(stream: &mut TcpStream, r: &Response, keep: bool, redactor: &Redactor) -> Option<Vec<u8>> {
    let out = render(r, keep, redactor);
    let mut at = 0;
    while at < out.len() {
        match stream.write(&out[at..]) {
            Ok(0) => return None,
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return None,
        }
    }
    Some(out[at..].to_vec())
}

/// The response's bytes, its body through `redactor`.
fn render(r: &Response, keep: bool, redactor: &Redactor) -> Vec<u8> {
    let body = match &r.body {
        Body::Json(v) => {
            let mut v = v.clone();
            redactor.redact_json(&mut v, &mut Counts::default());
            v.to_string()
        }
        Body::Text(t) => redactor.redact(t).into_owned(),
    };
    let mut out = Vec::with_capacity(160 + body.len());
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        body.len(),
        if keep { "keep-alive" } else { "close" }
    );
    for (n, v) in &r.headers {
        // Header values are ours, but never let one split the head.
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        let _ = write!(out, "{n}: {v}\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
