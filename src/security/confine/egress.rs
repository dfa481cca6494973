//! The only way out for a child granted hosts (an MCP server's or a
//! plugin's `network`): an HTTP proxy latchclaw runs for it.
//!
//! The child gets a network namespace of its own ([`view::egress_namespace`])
//! with nothing in it but a loopback device and one listening socket, which
//! latchclaw holds: a socket stays in the namespace it was made in, so
//! latchclaw accepts there and connects out from its own. Landlock lets the
//! child connect to that port only and the socket filter lets it make TCP
//! sockets only. The child is told where the proxy is through the usual
//! variables (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, lower case too);
//! a program that ignores them reaches nothing.
//!
//! The proxy takes `CONNECT host:port` (a tunnel: TLS passes through
//! untouched) and plain-HTTP requests in absolute form (`GET
//! http://host/path`: forwarded in origin form with `Connection: close`,
//! one request per connection). Each target is judged by
//! [`net::egress_addrs`] against the grants and connected to at the
//! addresses judged; anything else is answered `403` with the reason. No
//! other process can reach the listening socket: nothing but the call's
//! own children is in that namespace.

use super::spec::EgressNet;
use super::view;
use crate::security::net::{self, Grant};
use crate::sys;
use crate::transport::Sockets;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The longest request head read before it is refused.
const HEAD_MAX: usize = 16 * 1024;
/// Connections served at once; more are answered `503`.
const CONNECTIONS_MAX: usize = 32;
/// How long a head may take to arrive, and a connection to a host.
const WAIT: Duration = Duration::from_secs(10);
/// How often a waiting thread looks whether the call is over.
const TICK_MS: i32 = 100;

/// A running proxy. Dropping it ends the proxy and every connection
/// through it (within [`TICK_MS`]); the children it served are ended by
/// their call.
#[derive(Debug)]
pub struct Egress {
    net: EgressNet,
    /// Every socket of the connections being served (the child's end and
    /// the host's): shut when the call is over, so a thread blocked writing
    /// to an upstream that does not read, or connecting, ends then instead
    /// of holding the socket and its buffers past the call. Closed is also
    /// what tells the threads to end.
    sockets: Arc<Sockets>,
}

impl Egress {
    /// Starts a proxy for `hosts` (grants as configured), for children
    /// `who` names in the log (`MCP server "x"`). `Err`: a grant that does
    /// not parse, or no network namespace on this machine (then the child
    /// must not run: it would have the host's network or none).
    pub fn start(hosts: &[String], who: &str) -> Result<Egress, String> {
        let grants = hosts
            .iter()
            .map(|h| Grant::parse(h))
            .collect::<Result<Vec<_>, _>>()?;
        let (netns, listener) = view::egress_namespace().map_err(|e| {
            format!("{who} is granted hosts, which needs a network namespace of its own: {e}")
        })?;
        let listener = TcpListener::from(listener);
        let port = listener
            .local_addr()
            .map_err(|e| format!("the proxy's socket: {e}"))?
            .port();
        let sockets = Arc::new(Sockets::default());
        let tracked = Arc::clone(&sockets);
        let who = who.to_string();
        std::thread::Builder::new()
            .name("egress".into())
            .spawn(move || accept_loop(&listener, &Arc::new(grants), &tracked, &who))
            .map_err(|e| format!("cannot start the proxy's thread: {e}"))?;
        Ok(Egress {
            net: EgressNet {
                port,
                netns: Arc::new(netns),
            },
            sockets,
        })
    }

    /// What the child's sandbox is given (`Spec::egress`).
    pub fn net(&self) -> EgressNet {
        self.net.clone()
    }

    /// The variables that point the child's HTTP clients at the proxy.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let url = format!("http://127.0.0.1:{}", self.net.port);
        let mut out: Vec<(&'static str, String)> = [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ]
        .into_iter()
        .map(|k| (k, url.clone()))
        .collect();
        // Node 24 and later read the variables only when asked to.
        out.push(("NODE_USE_ENV_PROXY", "1".into()));
        out
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.sockets.shutdown_all();
    }
}

fn accept_loop(
    listener: &TcpListener,
    grants: &Arc<Vec<Grant>>,
    sockets: &Arc<Sockets>,
    who: &str,
) {
    let active = Arc::new(AtomicUsize::new(0));
    while !sockets.is_closed() {
        match sys::poll::readable(listener, TICK_MS) {
            Ok(false) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
            Ok(true) => {}
        }
        let Ok((client, _)) = listener.accept() else {
            continue;
        };
        if active.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = answer(&client, "503 Service Unavailable", "too many connections");
            continue;
        }
        let client = Arc::new(client);
        if !sockets.add(&client) {
            active.fetch_sub(1, Ordering::SeqCst);
            break;
        }
        let (grants, sockets, counted, who) = (
            Arc::clone(grants),
            Arc::clone(sockets),
            Arc::clone(&active),
            who.to_string(),
        );
        let spawned = std::thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                serve(&client, &grants, &sockets, &who);
                counted.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The closure never ran: its count goes here (its socket with it).
            active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A refusal or failure, said to the child's client and closed.
fn answer(mut client: &TcpStream, status: &str, why: &str) -> io::Result<()> {
    let body = format!("latchclaw egress proxy: {why}\n");
    write!(
        client,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}",
        body.len()
    )
}

/// One request from the child: what it asks for, judged.
struct Request {
    tunnel: bool,
    host: String,
    port: u16,
    /// For plain HTTP: the head to send on, in origin form.
    head: Vec<u8>,
}

fn serve(client: &TcpStream, grants: &[Grant], sockets: &Sockets, who: &str) {
    let _ = client.set_read_timeout(Some(WAIT));
    let _ = client.set_write_timeout(Some(WAIT));
    let (head, rest) = match read_head(client) {
        Ok(h) => h,
        Err(why) => {
            let _ = answer(client, "400 Bad Request", &why);
            return;
        }
    };
    let req = match parse(&head) {
        Ok(r) => r,
        Err(why) => {
            let _ = answer(client, "400 Bad Request", &why);
            return;
        }
    };
    let addrs = match net::egress_addrs(grants, &req.host, req.port) {
        Ok(a) => a,
        Err(why) => {
            log::warn!(target: "event::egress_refused", "{who}: {why}");
            let _ = answer(client, "403 Forbidden", &why);
            return;
        }
    };
    let Some(upstream) = connect(&addrs) else {
        let why = format!(
            "cannot connect to {}:{}",
            crate::util::printable(&req.host),
            req.port
        );
        let _ = answer(client, "502 Bad Gateway", &why);
        return;
    };
    // The call may have ended while this connected: nothing is sent then.
    let upstream = Arc::new(upstream);
    if !sockets.add(&upstream) {
        return;
    }
    let (mut to_client, mut to_upstream) = (client, &*upstream);
    let _ = upstream.set_write_timeout(Some(WAIT));
    log::info!(
        target: "event::egress",
        "{who}: {} {}:{}",
        if req.tunnel { "tunnel to" } else { "request to" },
        crate::util::printable(&req.host),
        req.port
    );
    let sent = if req.tunnel {
        to_client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
    } else {
        to_upstream.write_all(&req.head)
    };
    if sent.is_err() || to_upstream.write_all(&rest).is_err() {
        return;
    }
    splice(client, &upstream, sockets);
}

/// The request head (through its blank line) and what came after it.
fn read_head(mut client: &TcpStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > HEAD_MAX {
            return Err(format!("a request head longer than {HEAD_MAX} bytes"));
        }
        match client.read(&mut chunk) {
            Ok(0) => return Err("the connection closed before the request head ended".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
}

fn parse(head: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(head).map_err(|_| "a request head that is not UTF-8")?;
    // Lines end in CRLF and nowhere else: a bare CR or LF would make one
    // line here and two at the server (a Host of its own among them).
    let body = text.strip_suffix("\r\n\r\n").unwrap_or(text);
    if body.split("\r\n").any(|l| l.contains(['\r', '\n'])) {
        return Err("a request head with a bare CR or LF".into());
    }
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a request line that is not METHOD TARGET VERSION".into());
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!(
            "{}: HTTP/1.x only",
            crate::util::printable(version)
        ));
    }
    if method == "CONNECT" {
        let (host, port) = authority(target)?;
        let port = port.ok_or("CONNECT needs host:port")?;
        return Ok(Request {
            tunnel: true,
            host,
            port,
            head: Vec::new(),
        });
    }
    let lower = target.to_ascii_lowercase();
    let Some(after) = lower.strip_prefix("http://").map(|_| &target[7..]) else {
        return Err(if lower.starts_with("https://") {
            "https through this proxy goes by CONNECT".into()
        } else {
            "a proxy request names the whole URL (http://host/path)".into()
        });
    };
    let split = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (auth, path) = after.split_at(split);
    let (host, port) = authority(auth)?;
    let path = match path {
        "" => "/",
        p if p.starts_with('/') => p,
        p => {
            return Err(format!(
                "{}: a path must start with /",
                crate::util::printable(p)
            ));
        }
    };
    // The Host the URL names (a different one would reach another site
    // on the granted address: virtual hosting).
    let mut out = format!("{method} {path} {version}\r\nHost: {auth}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        let hop = [
            "host",
            "connection",
            "proxy-connection",
            "proxy-authorization",
            "keep-alive",
        ];
        if !hop.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        tunnel: false,
        host,
        port: port.unwrap_or(80),
        head: out.into_bytes(),
    })
}

/// `host[:port]` of a request: no user part, a port from 1 to 65535.
fn authority(a: &str) -> Result<(String, Option<u16>), String> {
    if a.is_empty() || a.contains(['@', ' ', '/', '\\']) || a.chars().any(char::is_control) {
        return Err(format!("{}: not host[:port]", crate::util::printable(a)));
    }
    let (host, port) = net::split_host_port(a).map_err(|r| r.reason)?;
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

fn connect(addrs: &[SocketAddr]) -> Option<TcpStream> {
    addrs
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, WAIT).ok())
}

/// Copies both ways until both are closed, a side fails, or the call is
/// over.
fn splice(client: &TcpStream, upstream: &TcpStream, sockets: &Sockets) {
    let _ = client.set_read_timeout(None);
    let _ = upstream.set_read_timeout(None);
    let ends = [client, upstream];
    let mut open = [true, true];
    let mut set = sys::poll::PollSet::default();
    let mut buf = vec![0u8; 16 * 1024];
    while open.iter().any(|o| *o) && !sockets.is_closed() {
        set.clear();
        let live: Vec<usize> = (0..2).filter(|&i| open[i]).collect();
        for &i in &live {
            set.push(ends[i], sys::poll::Want::Read);
        }
        match set.wait(TICK_MS) {
            Ok(0) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
            Ok(_) => {}
        }
        for (slot, &i) in live.iter().enumerate() {
            if !set.ready(slot) {
                continue;
            }
            let (mut from, mut to) = (ends[i], ends[1 - i]);
            match from.read(&mut buf) {
                Ok(0) => {
                    open[i] = false;
                    let _ = to.shutdown(Shutdown::Write);
                }
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_as_a_proxy_reads_them() {
        let r = parse(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(r.tunnel);
        assert_eq!((r.host.as_str(), r.port), ("api.example.com", 443));
        let r = parse(
            b"GET http://h.example:8080/a?b HTTP/1.1\r\nHost: h.example:8080\r\nProxy-Connection: \
              keep-alive\r\nProxy-Authorization: Basic eA==\r\n\r\n",
        )
        .unwrap();
        assert!(!r.tunnel);
        assert_eq!((r.host.as_str(), r.port), ("h.example", 8080));
        assert_eq!(
            String::from_utf8(r.head).unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: h.example:8080\r\nConnection: close\r\n\r\n"
        );
        // Another Host than the URL's is replaced by the URL's.
        let r = parse(b"GET http://h.example/ HTTP/1.1\r\nHost: other.example\r\n\r\n").unwrap();
        assert_eq!(
            String::from_utf8(r.head).unwrap(),
            "GET / HTTP/1.1\r\nHost: h.example\r\nConnection: close\r\n\r\n"
        );
        let r = parse(b"GET http://[::1]:81 HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("::1", 81));
        for bad in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"GET https://h/ HTTP/1.1\r\n\r\n",
            b"CONNECT h HTTP/1.1\r\n\r\n",
            b"CONNECT user@h:443 HTTP/1.1\r\n\r\n",
            b"CONNECT h:0 HTTP/1.1\r\n\r\n",
            b"CONNECT h:443 HTTP/2\r\n\r\n",
            b"GET http://h/ HTTP/1.1 extra\r\n\r\n",
            b"GET http://h\\@evil/ HTTP/1.1\r\n\r\n",
            b"GET http://h\nX-Injected:1/ HTTP/1.1\r\n\r\n",
            b"GET http://h/ HTTP/1.1\r\nX-A: a\nHost: other\r\n\r\n",
            b"GET http://h/ HTTP/1.1\r\nX-A: a\rHost: other\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
