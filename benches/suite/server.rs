//! A loopback OpenAI-compatible server that answers every request with one
//! fixed chat completion and records how long it spent on each (from the
//! connection's first read to the reply written), so its own time can be
//! taken out of the client's.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const BODY: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#;

pub struct FakeServer {
    pub port: u16,
    times: Arc<Mutex<Vec<f64>>>,
}

impl FakeServer {
    pub fn start() -> FakeServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let times = Arc::new(Mutex::new(Vec::new()));
        let log = times.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let start = Instant::now();
                read_request(&mut s);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BODY}",
                    BODY.len()
                );
                let _ = s.write_all(reply.as_bytes());
                log.lock()
                    .unwrap()
                    .push(start.elapsed().as_secs_f64() * 1e3);
            }
        });
        FakeServer { port, times }
    }

    /// The server's median time per request so far, in milliseconds.
    pub fn median_ms(&self) -> f64 {
        super::measure::percentile(&self.times.lock().unwrap(), 50)
    }
}

/// Reads one request: headers, then as many body bytes as Content-Length says.
fn read_request(s: &mut std::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    while let Ok(n) = s.read(&mut chunk) {
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse::<usize>().unwrap_or(0));
        if buf.len() >= end + 4 + len {
            break;
        }
    }
}
