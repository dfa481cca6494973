//! MCP over Streamable HTTP: a server reached at `[mcp.servers.NAME] url`
//! instead of started. Each message the client queues is POSTed to the
//! endpoint on a thread of its own (so a cancel goes out while a call's
//! stream is still open); the answer is one JSON object or an event
//! stream (`text/event-stream`) whose events are messages, and each goes
//! through the same classifier as a stdio server's lines (`wire`):
//! responses to the client, the server's own requests refused, its
//! notifications counted and dropped. The session id the server gives at
//! `initialize` and the protocol version agreed are sent with every later
//! message; stopping sends `DELETE` for the session.
//!
//! Where it may go: a loopback address (or `localhost`), or over https a
//! host the server's `network` grants, resolving to public addresses
//! (`security::net::egress_addrs`). No process is started, so there is
//! nothing to confine; what the server answers is judged and redacted
//! like any server's.

use super::error::{ErrorKind, McpError};
use super::wire::{self, Incoming, Stats};
use crate::config::McpServerConfig;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Messages in flight at once; past this a message waits for one to end.
const IN_FLIGHT_MAX: usize = 8;

/// The endpoint and what every message to it carries.
struct Endpoint {
    agent: ureq::Agent,
    /// For the session's `DELETE` only: its own connections, untouched by
    /// the stop that shut the others.
    end_agent: ureq::Agent,
    url: String,
    token: Option<String>,
    session: Mutex<Option<String>>,
    protocol: Mutex<Option<String>>,
    /// Every connection the agent opened: shut when the server is stopped,
    /// so no request in flight outlives it.
    sockets: Arc<crate::transport::Sockets>,
    stopping: AtomicBool,
}

/// How long the session's `DELETE` may take at the end.
const DELETE_WAIT: Duration = Duration::from_secs(1);

/// Checks where `s.url` points (see the module's text) and makes the
/// agent that talks to it.
fn endpoint(s: &McpServerConfig, url: &str) -> Result<Endpoint, McpError> {
    let config_err = |m: String| McpError::new(ErrorKind::Config, m);
    let parsed: ureq::http::Uri = url
        .parse()
        .map_err(|e| config_err(format!("mcp.servers.{}.url: {e}", s.name)))?;
    let https = parsed.scheme_str() == Some("https");
    let host = parsed.host().unwrap_or_default().trim_matches(['[', ']']);
    let port = parsed.port_u16().unwrap_or(if https { 443 } else { 80 });
    // The addresses judged are the ones connected to: `localhost` is the
    // loopback addresses, not whatever a resolver says; a name is resolved
    // once, here (a second answer could point elsewhere).
    let literal = host.parse::<std::net::IpAddr>().ok();
    let addrs: Vec<std::net::SocketAddr> = if host.eq_ignore_ascii_case("localhost") {
        vec![
            ([127, 0, 0, 1], port).into(),
            (std::net::Ipv6Addr::LOCALHOST, port).into(),
        ]
    } else {
        literal
            .filter(|ip| ip.is_loopback())
            .map(|ip| vec![(ip, port).into()])
            .unwrap_or_default()
    };
    let addrs = if !addrs.is_empty() {
        addrs
    } else {
        if !https {
            return Err(config_err(format!(
                "mcp.servers.{}.url: plain http only to a loopback address (127.0.0.1, ::1, \
                 localhost); use https for {}",
                s.name,
                crate::util::printable(host)
            )));
        }
        let grants = s
            .network
            .iter()
            .map(|h| crate::security::net::Grant::parse(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| config_err(format!("mcp.servers.{}.network: {e}", s.name)))?;
        crate::security::net::egress_addrs(&grants, host, port)
            .map_err(|e| config_err(format!("mcp.servers.{}.url: {e}", s.name)))?
    };
    let token = match &s.bearer_token_env {
        None => None,
        Some(name) => match std::env::var(name) {
            Ok(v) if !v.is_empty() => Some(v),
            _ => {
                return Err(config_err(format!(
                    "mcp.servers.{}.bearer_token_env: ${name} is not set",
                    s.name
                )));
            }
        },
    };
    let timeout = Duration::from_secs(s.timeout_secs);
    // Not through latchclaw's own HTTP(S)_PROXY: the addresses judged are
    // the ones connected to.
    let config = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(timeout + Duration::from_secs(5)))
        .timeout_connect(Some(timeout.min(Duration::from_secs(10))))
        .user_agent(format!("latchclaw/{}", env!("CARGO_PKG_VERSION")));
    let config = crate::transport::with_tls(config, Some(url)).build();
    let sockets = Arc::new(crate::transport::Sockets::default());
    let end_agent = crate::transport::agent_pinned(
        config.clone(),
        addrs.clone(),
        Arc::new(crate::transport::Sockets::default()),
    );
    Ok(Endpoint {
        agent: crate::transport::agent_pinned(config, addrs, Arc::clone(&sockets)),
        end_agent,
        url: url.to_string(),
        token,
        session: Mutex::new(None),
        protocol: Mutex::new(None),
        sockets,
        stopping: AtomicBool::new(false),
    })
}

/// The channels a connected server is talked to through, as a started
/// one's (`child.rs`), and what stops it.
pub struct Connected {
    pub exit: Receiver<ExitStatus>,
    pub stop: Stop,
}

/// Ends everything in flight to a server: its requests' connections are
/// shut (a stream still being read ends), and nothing queued is sent but
/// the session's `DELETE`.
pub struct Stop(Arc<Endpoint>);

impl Stop {
    pub fn stop(&self) {
        self.0.stopping.store(true, Ordering::SeqCst);
        self.0.sockets.shutdown_all();
    }
}

/// Connects `s` (its `url`): the thread that sends what the client queues
/// on `from_client` and hands answers to `to_client`. Nothing is sent
/// until the client's first message (`initialize`).
pub fn connect(
    s: &McpServerConfig,
    url: &str,
    from_client: Receiver<Vec<u8>>,
    to_client: SyncSender<Incoming>,
    replies: SyncSender<Vec<u8>>,
    stats: Arc<Stats>,
) -> Result<Connected, McpError> {
    let ep = Arc::new(endpoint(s, url)?);
    let stop = Stop(Arc::clone(&ep));
    let (exit_tx, exit) = std::sync::mpsc::sync_channel(1);
    let name = s.name.clone();
    std::thread::Builder::new()
        .name("mcp-http".into())
        .spawn(move || {
            send_loop(&ep, from_client, &to_client, &replies, &stats, &name);
            use std::os::unix::process::ExitStatusExt;
            let _ = exit_tx.send(ExitStatus::from_raw(0));
        })
        .map_err(|e| {
            McpError::new(
                ErrorKind::Spawn,
                format!("cannot start a thread for the server: {e}"),
            )
        })?;
    Ok(Connected { exit, stop })
}

fn send_loop(
    ep: &Arc<Endpoint>,
    from_client: Receiver<Vec<u8>>,
    to_client: &SyncSender<Incoming>,
    replies: &SyncSender<Vec<u8>>,
    stats: &Arc<Stats>,
    name: &str,
) {
    let flying = Arc::new(AtomicUsize::new(0));
    loop {
        let received = from_client.recv_timeout(Duration::from_millis(100));
        // Looked at after the wait: a message taken just after a stop is
        // not sent.
        let stopping = ep.stopping.load(Ordering::SeqCst);
        let msg = match received {
            Ok(m) if m == wire::CLOSE => {
                end_session(ep);
                return;
            }
            // A cancel or a reply queued before the stop: not sent.
            Ok(_) if stopping => continue,
            Ok(m) => m,
            // Stopped, and the close did not fit in the queue.
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if stopping => {
                end_session(ep);
                return;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        };
        while flying.load(Ordering::SeqCst) >= IN_FLIGHT_MAX {
            std::thread::sleep(Duration::from_millis(5));
        }
        flying.fetch_add(1, Ordering::SeqCst);
        let (shared, to_client, replies, stats, flying) = (
            Arc::clone(ep),
            to_client.clone(),
            replies.clone(),
            Arc::clone(stats),
            Arc::clone(&flying),
        );
        let (headed, head) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("mcp-http-post".into())
            .spawn(move || {
                post(&shared, &msg, &headed, &to_client, &replies, &stats);
                flying.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            log::warn!(target: "event::mcp_http", "server={name}: cannot start a thread to send a message");
            return;
        }
        // In order, as over stdio: the next message goes once the server
        // has answered this one's head (`notifications/initialized` before
        // `tools/list`: servers add tools when initialized), while a
        // streamed answer is still read beside it.
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            head.recv_timeout(Duration::from_millis(50))
        {
            if ep.stopping.load(Ordering::SeqCst) {
                break;
            }
        }
    }
}

/// `DELETE` of the session, if the server gave one (best effort: a
/// server may answer 405 when it does not let clients end sessions).
fn end_session(ep: &Endpoint) {
    let Some(session) = ep.session.lock().ok().and_then(|s| s.clone()) else {
        return;
    };
    let mut req = ep
        .end_agent
        .delete(&ep.url)
        .config()
        .timeout_global(Some(DELETE_WAIT))
        .build()
        .header("Mcp-Session-Id", &session);
    if let Some(t) = &ep.token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let _ = req.call();
}

/// Sends one message and hands on what comes back. A request that gets
/// no response (an HTTP error, a refused connection, a stream that ends
/// without it) gets an error response in its place, so the client never
/// waits for nothing.
fn post(
    ep: &Endpoint,
    msg: &[u8],
    headed: &SyncSender<()>,
    to_client: &SyncSender<Incoming>,
    replies: &SyncSender<Vec<u8>>,
    stats: &Stats,
) {
    if ep.stopping.load(Ordering::SeqCst) {
        let _ = headed.send(());
        return;
    }
    let v: Value = serde_json::from_slice(msg).unwrap_or(Value::Null);
    let method = v.get("method").and_then(Value::as_str).map(str::to_string);
    let id = v
        .get("id")
        .and_then(Value::as_u64)
        .filter(|_| method.is_some());
    let fail = |why: String| {
        if let Some(id) = id {
            let _ = to_client.send(Incoming::Failed { id, why });
        }
    };
    let mut req = ep
        .agent
        .post(&ep.url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    if let Some(s) = ep.session.lock().ok().and_then(|s| s.clone()) {
        req = req.header("Mcp-Session-Id", &s);
    }
    if let Some(p) = ep.protocol.lock().ok().and_then(|p| p.clone()) {
        req = req.header("MCP-Protocol-Version", &p);
    }
    if let Some(t) = &ep.token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let sent = req.send(msg.trim_ascii_end());
    // `initialize` holds the next message until its answer is read: that
    // message must carry the session id and the protocol version agreed.
    let initialize = method.as_deref() == Some("initialize");
    if !initialize {
        let _ = headed.send(());
    }
    let _held = Release(initialize.then_some(headed));
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot reach the server: {e}")),
    };
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        let body = resp
            .body_mut()
            .with_config()
            .limit(4096)
            .read_to_string()
            .unwrap_or_default();
        let had_session = ep.session.lock().map(|s| s.is_some()).unwrap_or(false);
        let why = if status == 404 && had_session {
            "the server ended the session (HTTP 404)".to_string()
        } else if status == 401 || status == 403 {
            format!(
                "HTTP {status}: the server refused the credentials ({})",
                if ep.token.is_some() {
                    "check the token bearer_token_env names"
                } else {
                    "it may want a token: bearer_token_env"
                }
            )
        } else {
            format!(
                "HTTP {status}{}{}",
                if body.trim().is_empty() { "" } else { ": " },
                crate::util::printable(&body.chars().take(200).collect::<String>())
            )
        };
        return fail(why);
    }
    if id.is_none() {
        // A notification or a reply: 202 and nothing to read.
        return;
    }
    if method.as_deref() == Some("initialize")
        && let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|h| h.to_str().ok())
            .filter(|s| {
                !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| (0x21..0x7f).contains(&b))
            })
        && let Ok(mut slot) = ep.session.lock()
    {
        *slot = Some(s.to_string());
    }
    let stream = resp
        .headers()
        .get("content-type")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream"));
    let answered = std::cell::Cell::new(false);
    let hand_on = |data: &[u8]| -> bool {
        match wire::classify(data, replies, stats) {
            Some(incoming) => {
                if let Incoming::Response { id: got, result } = &incoming
                    && Some(*got) == id
                {
                    answered.set(true);
                    if method.as_deref() == Some("initialize")
                        && let Ok(r) = result
                        && let Some(p) = r.get("protocolVersion").and_then(Value::as_str)
                        && let Ok(mut slot) = ep.protocol.lock()
                    {
                        *slot = Some(p.to_string());
                    }
                }
                to_client.send(incoming).is_ok()
            }
            None => true,
        }
    };
    let body = resp.into_body();
    if stream {
        let reader = body.into_reader();
        // The stream ends at the response (a server may keep it open).
        if let Err(e) = events(reader, &mut |data| hand_on(data) && !answered.get())
            && !answered.get()
        {
            return fail(e);
        }
    } else {
        match body
            .into_with_config()
            .limit(wire::MAX_LINE as u64)
            .read_to_vec()
        {
            Ok(bytes) => {
                hand_on(&bytes);
            }
            Err(e) => return fail(format!("reading the answer: {e}")),
        }
    }
    if !answered.get() {
        fail("the server's answer held no response to the request".into());
    }
}

/// Lets the send loop go on when dropped (whatever way `post` returns).
struct Release<'a>(Option<&'a SyncSender<()>>);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.0 {
            let _ = h.send(());
        }
    }
}

/// Reads server-sent events from `r`, handing each event's data to `each`
/// until it returns false or the stream ends. An event larger than
/// [`wire::MAX_LINE`] ends the stream with an error.
fn events(r: impl Read, each: &mut dyn FnMut(&[u8]) -> bool) -> Result<(), String> {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut data: Vec<u8> = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(wire::MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading the event stream: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > wire::MAX_LINE {
            return Err(format!("an event longer than {} bytes", wire::MAX_LINE));
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            if !data.is_empty() {
                let keep_going = each(&data);
                data.clear();
                if !keep_going {
                    return Ok(());
                }
            }
            continue;
        }
        if let Some(rest) = text.strip_prefix(b"data:") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
            if data.len() > wire::MAX_LINE {
                return Err(format!("an event longer than {} bytes", wire::MAX_LINE));
            }
        }
        // `event:`, `id:`, `retry:` and comments change nothing here.
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_joined_and_capped() {
        let stream = b": comment\nevent: message\ndata: {\"a\":\ndata: 1}\n\nid: 3\r\ndata:{\"b\":2}\r\n\r\ndata: tail-without-end";
        let mut got = Vec::new();
        events(&stream[..], &mut |d| {
            got.push(String::from_utf8(d.to_vec()).unwrap());
            true
        })
        .unwrap();
        assert_eq!(got, ["{\"a\":\n1}", "{\"b\":2}"]);
        let mut n = 0;
        events(&b"data: 1\n\ndata: 2\n\n"[..], &mut |_| {
            n += 1;
            false
        })
        .unwrap();
        assert_eq!(n, 1, "stops when told");
    }
}
