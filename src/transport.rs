//! The TCP connections under our ureq agents (the openai-compatible
//! provider, the http tool): ureq's own TCP transport, with delayed ACKs
//! turned off before each read.
//!
//! Why: many servers write a response's head and body in two writes with
//! Nagle's algorithm on (Python's http.server, cpp-httplib as llama-server
//! builds it, many proxies). Nagle holds the body until the head is
//! ACKed; on a reused keep-alive connection Linux has marked ours
//! interactive and delays that ACK by 40 ms, hoping to piggyback it on data
//! we never send. Every request of a turn after the first lost 40 ms.
//! `TCP_QUICKACK` leaves that mode, so reading the head ACKs it at once; the
//! kernel goes back to delaying once we send again, so it is set before
//! every read, not once. It sits under TLS (rustls reads through this
//! transport), and a CONNECT proxy's tunnel is one of these connections too.
//!
//! TCP_NODELAY stays on (as ureq has it) for the same reason in the other
//! direction: ureq writes a request's head and body separately.
//!
//! The provider's agent also takes an IP address in the URL as is, rather
//! than through ureq's resolver (see `LiteralFirst`).
//!
//! https trusts the system's CA certificates (`tls_config`), as curl and git
//! do, rather than a copy of Mozilla's list compiled in: the operator's own
//! CAs work, the list follows the system's updates, and the binary is
//! 100 KB smaller. A build without the `tls` feature has no TLS at all: an
//! https request is refused before it connects (`RefuseHttps`), with
//! `features::NO_TLS`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
#[cfg(feature = "tls")]
use ureq::unversioned::transport::RustlsConnector;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    ShutdownHandle, Transport,
};

type AgentConfig = ureq::config::ConfigBuilder<ureq::typestate::AgentScope>;

/// An agent's settings with the TLS settings for requests to `url` (`None`:
/// any URL, redirects included).
#[cfg(feature = "tls")]
pub fn with_tls(b: AgentConfig, url: Option<&str>) -> AgentConfig {
    b.tls_config(match url {
        Some(url) => tls_config_for(url),
        None => tls_config(),
    })
}

/// A build without `tls` has no TLS settings: https is refused
/// (`RefuseHttps`).
#[cfg(not(feature = "tls"))]
pub fn with_tls(b: AgentConfig, _url: Option<&str>) -> AgentConfig {
    b
}

/// Where systems keep their trust roots, the first that exists wins;
/// `SSL_CERT_FILE` names another (as for OpenSSL).
#[cfg(feature = "tls")]
const CA_BUNDLES: &[&str] = &[
    // Debian, Ubuntu, Arch, Alpine, Gentoo
    "/etc/ssl/certs/ca-certificates.crt",
    // Fedora, RHEL
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    // openSUSE
    "/etc/ssl/ca-bundle.pem",
    // Alpine, the BSDs, macOS
    "/etc/ssl/cert.pem",
];

/// TLS settings for an agent that only ever asks `url` (no redirects):
/// the system's roots for https; none for http, so a run against a local
/// http model doesn't read them (1.5 ms).
#[cfg(feature = "tls")]
fn tls_config_for(url: &str) -> ureq::tls::TlsConfig {
    let https = url
        .get(..6)
        .is_some_and(|s| s.eq_ignore_ascii_case("https:"));
    if https {
        return tls_config();
    }
    ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(Vec::new())))
        .build()
}

/// TLS settings trusting the system's CA certificates, read once per
/// process.
#[cfg(feature = "tls")]
pub fn tls_config() -> ureq::tls::TlsConfig {
    use std::sync::OnceLock;
    static ROOTS: OnceLock<Arc<Vec<ureq::tls::Certificate<'static>>>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let chosen = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
        let candidates: Vec<std::path::PathBuf> = match chosen {
            Some(p) => vec![p],
            None => CA_BUNDLES.iter().map(std::path::PathBuf::from).collect(),
        };
        let (roots, problem) = load_roots(&candidates);
        if let Some(problem) = problem {
            log::warn!("{problem}; https connections will fail to verify");
        }
        Arc::new(roots)
    });
    ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(roots.clone()))
        .build()
}

/// The certificates of the first bundle in `paths` that holds any, and what
/// went wrong when none does.
#[cfg(feature = "tls")]
fn load_roots(
    paths: &[std::path::PathBuf],
) -> (Vec<ureq::tls::Certificate<'static>>, Option<String>) {
    for path in paths {
        let Ok(pem) = std::fs::read(path) else {
            continue;
        };
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if !certs.is_empty() {
            return (certs, None);
        }
    }
    let looked = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    (
        Vec::new(),
        Some(format!(
            "no CA certificates found (looked in {looked}); install the system's \
             ca-certificates package or set SSL_CERT_FILE to a PEM bundle"
        )),
    )
}

/// ureq's default chain (CONNECT proxy, TCP, rustls) with our TCP.
pub fn connector() -> impl Connector<()> {
    connector_tracked(None)
}

/// [`connector`], each socket it opens recorded in `track`.
#[cfg(feature = "tls")]
fn connector_tracked(track: Option<Arc<Sockets>>) -> impl Connector<()> {
    ().chain(ConnectProxyConnector::default())
        .chain(QuickAckConnector { track })
        .chain(RustlsConnector::default())
}

/// Without TLS: https refused before anything connects, then ureq's chain
/// (CONNECT proxy, TCP) with our TCP.
#[cfg(not(feature = "tls"))]
fn connector_tracked(track: Option<Arc<Sockets>>) -> impl Connector<()> {
    ().chain(RefuseHttps)
        .chain(ConnectProxyConnector::default())
        .chain(QuickAckConnector { track })
}

/// An https request in a build without TLS: `features::NO_TLS`, before a
/// connection is made (ureq would connect, then find no TLS to speak).
#[cfg(not(feature = "tls"))]
#[derive(Debug)]
struct RefuseHttps;

#[cfg(not(feature = "tls"))]
impl<In: Transport> Connector<In> for RefuseHttps {
    type Out = In;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<In>, ureq::Error> {
        if details.needs_tls() {
            return Err(ureq::Error::Io(io::Error::new(
                io::ErrorKind::Unsupported,
                crate::features::NO_TLS,
            )));
        }
        Ok(chained)
    }
}

/// An agent on [`connector`] that takes an IP address in the URL as is.
pub fn agent(config: ureq::config::Config) -> ureq::Agent {
    ureq::Agent::with_parts(config, connector(), LiteralFirst)
}

/// The sockets an agent opened, so that they can be shut down from
/// outside while a request on them is still being read (a stopped MCP
/// server's streams).
#[derive(Debug, Default)]
pub struct Sockets(std::sync::Mutex<(Vec<Weak<TcpStream>>, bool)>);

impl Sockets {
    /// Records `s`; one opened after [`Sockets::shutdown_all`] is shut at
    /// once (a request that was still connecting then), and false.
    pub fn add(&self, s: &Arc<TcpStream>) -> bool {
        let Ok(mut guard) = self.0.lock() else {
            return false;
        };
        let (list, closed) = &mut *guard;
        if *closed {
            let _ = s.shutdown(std::net::Shutdown::Both);
            return false;
        }
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(s));
        true
    }

    /// Whether [`Sockets::shutdown_all`] ran.
    pub fn is_closed(&self) -> bool {
        self.0.lock().map_or(true, |g| g.1)
    }

    /// Shuts every socket still open, and every one opened later: what
    /// reads or writes on them fails.
    pub fn shutdown_all(&self) {
        if let Ok(mut guard) = self.0.lock() {
            let (list, closed) = &mut *guard;
            *closed = true;
            for s in list.drain(..).filter_map(|w| w.upgrade()) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// An agent that connects to `addrs` only, whatever the URL's host
/// resolves to now (they were judged already: a second DNS answer could
/// point elsewhere), recording its sockets in `track`.
pub fn agent_pinned(
    config: ureq::config::Config,
    addrs: Vec<SocketAddr>,
    track: Arc<Sockets>,
) -> ureq::Agent {
    ureq::Agent::with_parts(config, connector_tracked(Some(track)), Pinned(addrs))
}

#[derive(Debug)]
struct Pinned(Vec<SocketAddr>);

impl Resolver for Pinned {
    fn resolve(
        &self,
        _: &ureq::http::Uri,
        _: &ureq::config::Config,
        _: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut out = self.empty();
        // ureq keeps at most 16 addresses a name.
        for a in self.0.iter().take(16) {
            out.push(*a);
        }
        Ok(out)
    }
}

/// ureq resolves the host before every request, kept-alive connection or
/// not, and with a timeout set does it in a thread of its own: a thread
/// per request even for `127.0.0.1`. An address is its own answer; names
/// go to ureq's resolver.
#[derive(Debug)]
struct LiteralFirst;

impl Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let literal = uri.authority().and_then(|a| {
            let ip: IpAddr = a.host().trim_matches(['[', ']']).parse().ok()?;
            let port = match uri.scheme_str()? {
                "http" => a.port_u16().unwrap_or(80),
                "https" => a.port_u16().unwrap_or(443),
                _ => return None,
            };
            Some(SocketAddr::new(ip, port))
        });
        match literal {
            Some(addr) => {
                let mut addrs = self.empty();
                addrs.push(addr);
                Ok(addrs)
            }
            None => DefaultResolver::default().resolve(uri, config, timeout),
        }
    }
}

#[derive(Debug)]
struct QuickAckConnector {
    track: Option<Arc<Sockets>>,
}

impl<In: Transport> Connector<In> for QuickAckConnector {
    type Out = Either<In, QuickAckTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(t) = chained {
            return Ok(Some(Either::A(t)));
        }
        let stream = Arc::new(connect(details)?);
        if let Some(t) = &self.track {
            t.add(&stream);
        }
        stream.set_nodelay(true)?;
        (details.register_shutdown)(Arc::downgrade(&stream) as Weak<dyn ShutdownHandle>)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(QuickAckTransport { stream, buffers })))
    }
}

/// Tries the resolved addresses in turn: each but the last gets half the
/// time left (so one silent address cannot use it all), the last the rest.
fn connect(details: &ConnectionDetails) -> Result<TcpStream, ureq::Error> {
    let deadline = details.timeout.not_zero().map(|t| Instant::now() + *t);
    let addrs = &details.addrs;
    let mut last = None;
    for (i, addr) in addrs.iter().enumerate() {
        let attempt = match deadline {
            None => TcpStream::connect(addr),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                let share = if i + 1 < addrs.len() { left / 2 } else { left };
                TcpStream::connect_timeout(addr, share.max(Duration::from_millis(10)))
            }
        };
        match attempt {
            Ok(s) => return Ok(s),
            Err(e) => {
                log::debug!("connect to {addr}: {e}");
                last = Some(e);
            }
        }
    }
    Err(match last {
        Some(e) if e.kind() == io::ErrorKind::TimedOut => {
            ureq::Error::Timeout(ureq::Timeout::Connect)
        }
        Some(e) => e.into(),
        None => io::Error::new(io::ErrorKind::NotFound, "no address to connect to").into(),
    })
}

/// ureq's TCP transport (which does not expose its socket) less its
/// timeout caching, plus the quick ACK.
struct QuickAckTransport {
    /// Shared with the agent's shutdown handle.
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
}

impl std::fmt::Debug for QuickAckTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuickAckTransport")
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

/// When `timeout` runs out, or None if never; an error if it already has.
fn deadline(timeout: &NextTimeout) -> Result<Option<Instant>, ureq::Error> {
    if timeout.after.is_not_happening() {
        return Ok(None);
    }
    let after = *timeout.after;
    if after.is_zero() {
        return Err(ureq::Error::Timeout(timeout.reason));
    }
    Ok(Some(Instant::now() + after))
}

fn io_error(e: io::Error, timeout: &NextTimeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ureq::Error::Timeout(timeout.reason),
        _ => e.into(),
    }
}

impl Transport for QuickAckTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let deadline = deadline(&timeout)?;
        self.stream
            .set_write_timeout(deadline.map(|d| d.saturating_duration_since(Instant::now())))
            .map_err(|e| io_error(e, &timeout))?;
        let output = &self.buffers.output()[..amount];
        (&*self.stream)
            .write_all(output)
            .map_err(|e| io_error(e, &timeout))?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        let deadline = deadline(&timeout)?;
        quick_ack(&self.stream);
        let input = self.buffers.input_append_buf();
        let amount = loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(ureq::Error::Timeout(timeout.reason));
            }
            self.stream
                .set_read_timeout(left)
                .map_err(|e| io_error(e, &timeout))?;
            match (&*self.stream).read(input) {
                // A signal cuts a read short even with SA_RESTART once a
                // timeout is set; with no timeout, leave it to the caller.
                Err(e) if e.kind() == io::ErrorKind::Interrupted && left.is_some() => continue,
                r => break r.map_err(|e| io_error(e, &timeout))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    /// Pooled connections are checked before reuse: nothing may be waiting
    /// to be read, and the peer must not have closed.
    fn is_open(&mut self) -> bool {
        let mut s = &*self.stream;
        if s.set_nonblocking(true).is_err() {
            return false;
        }
        let idle = matches!(s.read(&mut [0u8]), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        idle && s.set_nonblocking(false).is_ok()
    }
}

/// Best effort: a socket that refuses it only reads as before.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn quick_ack(sock: &TcpStream) {
    crate::sys::net::quick_ack(sock);
}

/// Elsewhere there is no per-socket switch; reads are as ureq makes them.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn quick_ack(_: &TcpStream) {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "tls")]
    fn roots_come_from_the_first_bundle_that_holds_certificates() {
        let dir = std::env::temp_dir().join(format!("lc-roots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificates here\n").unwrap();
        let ca = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls/ca.pem"),
        )
        .unwrap();
        let two = dir.join("two.pem");
        std::fs::write(&two, format!("junk\n{ca}\n# comment\n{ca}")).unwrap();
        let (roots, problem) = load_roots(&[dir.join("missing.pem"), empty.clone(), two.clone()]);
        assert_eq!(roots.len(), 2);
        assert!(problem.is_none());
        let (roots, problem) = load_roots(&[dir.join("missing.pem"), empty]);
        assert!(roots.is_empty());
        let problem = problem.unwrap();
        assert!(
            problem.contains("missing.pem") && problem.contains("SSL_CERT_FILE"),
            "{problem}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// Answers requests on every connection like a real server: keep-alive,
    /// head and body in two writes, Nagle on. Sends each request's peer port.
    fn two_write_server() -> (u16, mpsc::Receiver<u16>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let (mut s, tx) = (stream.unwrap(), tx.clone());
                std::thread::spawn(move || {
                    let peer = s.peer_addr().unwrap().port();
                    let mut buf = [0u8; 4096];
                    // GET requests: one read holds one request head.
                    while matches!(s.read(&mut buf), Ok(n) if n > 0) {
                        tx.send(peer).unwrap();
                        let body = b"{\"ok\":true}";
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        s.write_all(head.as_bytes()).unwrap();
                        s.write_all(body).unwrap();
                    }
                });
            }
        });
        (port, rx)
    }

    fn config() -> ureq::config::Config {
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
    }

    /// The median time of requests 2..=n on one agent.
    fn median_reused(agent: &ureq::Agent, url: &str, n: usize) -> Duration {
        let mut times: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                let body = agent.get(url).call().unwrap().body_mut().read_to_string();
                assert_eq!(body.unwrap(), "{\"ok\":true}");
                t.elapsed()
            })
            .skip(1)
            .collect();
        times.sort();
        times[times.len() / 2]
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_reused_connection_gets_a_two_write_reply_without_the_delayed_ack() {
        let (port, peers) = two_write_server();
        let url = format!("http://127.0.0.1:{port}/");
        let ours = median_reused(&agent(config()), &url, 7);
        let seen: Vec<u16> = peers.try_iter().collect();
        assert!(
            seen.iter().all(|&p| p == seen[0]),
            "one connection: {seen:?}"
        );
        // The same exchange on ureq's own transport waits a delayed ACK
        // (40 ms) per reused request: this server does reproduce the stall.
        let delayed_ack = Duration::from_millis(40);
        let theirs = median_reused(&config().new_agent(), &url, 4);
        assert!(theirs >= delayed_ack, "control: {theirs:?}");
        assert!(ours < delayed_ack, "ours: {ours:?}");
    }

    #[test]
    fn a_socket_opened_after_the_shutdown_is_shut_at_once() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let track = Sockets::default();
        let before = Arc::new(TcpStream::connect(at).unwrap());
        track.add(&before);
        track.shutdown_all();
        let after = Arc::new(TcpStream::connect(at).unwrap());
        track.add(&after);
        for s in [&before, &after] {
            let mut buf = [0u8; 1];
            assert_eq!((&**s).read(&mut buf).unwrap(), 0, "shut: reads end");
        }
    }

    #[test]
    fn addresses_are_tried_in_turn() {
        // A port bound but not listening refuses connections, and stays
        // ours while the socket is open (a port freed by dropping a listener
        // could be taken by a test running alongside).
        let (fd, closed) = {
            use rustix::net::{AddressFamily, SocketType, bind, getsockname, socket};
            let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
            let local = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
            bind(&fd, &local).unwrap();
            let bound = std::net::SocketAddrV4::try_from(getsockname(&fd).unwrap()).unwrap();
            (fd, SocketAddr::from(([127, 0, 0, 1], bound.port())))
        };
        let (port, _peers) = two_write_server();
        let open: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let agent = ureq::Agent::with_parts(config(), connector(), Pinned(vec![closed, open]));
        let mut resp = agent.get("http://example.test/").call().unwrap();
        assert_eq!(resp.body_mut().read_to_string().unwrap(), "{\"ok\":true}");
        let agent = ureq::Agent::with_parts(config(), connector(), Pinned(vec![closed, closed]));
        let err = agent.get("http://example.test/").call().unwrap_err();
        assert!(
            matches!(&err, ureq::Error::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused),
            "{err:?}"
        );
        drop(fd);
    }

    #[test]
    fn a_silent_server_is_a_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let _held: Vec<_> = listener.incoming().take(1).collect();
            std::thread::sleep(Duration::from_secs(5));
        });
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(300)))
            .build();
        let t = Instant::now();
        let err = agent(config)
            .get(&format!("http://127.0.0.1:{port}/"))
            .call()
            .unwrap_err();
        assert!(matches!(err, ureq::Error::Timeout(_)), "{err:?}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    #[cfg(feature = "tls")]
    fn https_is_tls_over_our_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let first = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut b = [0u8; 3];
            s.read_exact(&mut b).unwrap();
            b
        });
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .tls_config(tls_config())
            .build();
        let err = agent(config)
            .get(&format!("https://127.0.0.1:{port}/"))
            .call();
        assert!(err.is_err());
        // A TLS handshake record (a ClientHello), TLS 1.x.
        assert_eq!(first.join().unwrap()[..2], [0x16, 0x03]);
    }

    /// Without TLS an https request is refused before it connects.
    #[test]
    #[cfg(not(feature = "tls"))]
    fn https_is_refused_before_connecting() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let err = agent(config())
            .get(&format!("https://127.0.0.1:{port}/"))
            .call()
            .unwrap_err();
        assert!(err.to_string().contains(crate::features::NO_TLS), "{err}");
        assert!(listener.accept().is_err(), "nothing connected");
    }

    #[test]
    fn an_address_in_the_url_is_not_looked_up() {
        let cfg = config();
        let addrs = |url: &str| {
            let uri: ureq::http::Uri = url.parse().unwrap();
            LiteralFirst
                .resolve(&uri, &cfg, NextTimeout::default())
                .map(|a| a.iter().copied().collect::<Vec<_>>())
        };
        assert_eq!(
            addrs("http://127.0.0.1:8080/v1").unwrap(),
            ["127.0.0.1:8080".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(
            addrs("https://[::1]/v1").unwrap(),
            ["[::1]:443".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(
            addrs("http://10.0.0.2/").unwrap(),
            ["10.0.0.2:80".parse::<SocketAddr>().unwrap()]
        );
        // Names still go to the system resolver.
        let local = addrs("http://localhost:9/").unwrap();
        assert!(
            local.iter().all(|a| a.ip().is_loopback() && a.port() == 9),
            "{local:?}"
        );
    }
}
