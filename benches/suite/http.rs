//! A minimal HTTP/1.1 client for the gateway figures: one kept-alive
//! connection, reopened when the server closes it. The gateway frames every
//! response with `Content-Length`, so that is all this reads.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct Reply {
    pub status: u16,
    pub body: String,
}

pub struct Client {
    addr: String,
    /// Extra header lines, each ending in CRLF (the token).
    headers: String,
    conn: Option<BufReader<TcpStream>>,
    /// Connections opened, the first included.
    pub connects: usize,
}

/// How a request failed: before the server sent a byte on a reused
/// connection (it had closed it: send again), or for real.
enum Failure {
    Stale,
    Error(String),
}

impl Client {
    pub fn new(addr: &str, headers: &str) -> Client {
        Client {
            addr: addr.to_string(),
            headers: headers.to_string(),
            conn: None,
            connects: 0,
        }
    }

    /// Sends one request; a connection the server closed between requests
    /// is reopened and the request sent once more (the server closes a
    /// kept-alive connection only while waiting for the next request, so
    /// the first one was never read).
    pub fn send(&mut self, method: &str, path: &str, body: Option<&str>) -> Result<Reply, String> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: bench\r\n{}",
            self.headers
        );
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body.unwrap_or(""));
        let reused = self.conn.is_some();
        match self.exchange(req.as_bytes()) {
            Ok(r) => Ok(r),
            Err(Failure::Stale) if reused => {
                self.conn = None;
                self.exchange(req.as_bytes()).map_err(|f| match f {
                    Failure::Stale => "the server closed a fresh connection unanswered".into(),
                    Failure::Error(e) => e,
                })
            }
            Err(Failure::Stale) => Err("the server closed a fresh connection unanswered".into()),
            Err(Failure::Error(e)) => Err(e),
        }
    }

    fn exchange(&mut self, req: &[u8]) -> Result<Reply, Failure> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr)
                .map_err(|e| Failure::Error(format!("connect: {e}")))?;
            let _ = s.set_nodelay(true);
            let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
            self.conn = Some(BufReader::new(s));
            self.connects += 1;
        }
        let conn = self.conn.as_mut().unwrap();
        // A write to a socket the server has closed may still succeed; the
        // read after it tells.
        if let Err(e) = conn.get_mut().write_all(req) {
            self.conn = None;
            return Err(stale_or(e));
        }
        let mut status_line = String::new();
        match conn.read_line(&mut status_line) {
            Ok(0) => {
                self.conn = None;
                return Err(Failure::Stale);
            }
            Ok(_) => {}
            Err(e) => {
                self.conn = None;
                return Err(stale_or(e));
            }
        }
        let result = read_rest(conn, &status_line);
        match &result {
            Ok((_, keep)) if *keep => {}
            _ => self.conn = None,
        }
        result.map(|(r, _)| r).map_err(Failure::Error)
    }
}

fn stale_or(e: std::io::Error) -> Failure {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::UnexpectedEof => {
            Failure::Stale
        }
        _ => Failure::Error(e.to_string()),
    }
}

/// The rest of a response after its status line; whether the connection
/// stays open.
fn read_rest(conn: &mut impl BufRead, status_line: &str) -> Result<(Reply, bool), String> {
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let (mut len, mut keep) = (None, true);
    loop {
        let mut l = String::new();
        if conn.read_line(&mut l).map_err(|e| format!("head: {e}"))? == 0 {
            return Err("the connection closed inside the head".into());
        }
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').ok_or(format!("bad header {l:?}"))?;
        let v = v.trim();
        if n.eq_ignore_ascii_case("content-length") {
            len = Some(
                v.parse::<usize>()
                    .map_err(|_| format!("bad length {v:?}"))?,
            );
        } else if n.eq_ignore_ascii_case("connection") {
            keep = !v.eq_ignore_ascii_case("close");
        }
    }
    let mut body = vec![0; len.ok_or("no Content-Length")?];
    conn.read_exact(&mut body)
        .map_err(|e| format!("body: {e}"))?;
    let body = String::from_utf8(body).map_err(|_| "the body is not UTF-8".to_string())?;
    Ok((Reply { status, body }, keep))
}
