//! `latchclaw gateway`: a small local HTTP server over the same runtime,
//! gate and receipts as the CLI (README: gateway). `server` is the HTTP
//! part (bounded workers and limits), `auth` the bearer token and the rate
//! limit, `routes` the endpoints, `metrics` the Prometheus text.

pub mod auth;
pub mod metrics;
mod routes;
pub mod server;

use crate::config::Config;
use crate::control::RunControl;
use crate::error::{Error, Result, exit};
use crate::security::redact::Redactor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long running requests may go on once a signal stops the gateway.
const GRACE: Duration = Duration::from_secs(5);

/// The gateway's state, shared by its workers.
pub struct Gateway {
    cfg: Config,
    token: auth::TokenFile,
    limit: auth::RateLimit,
    metrics: metrics::Metrics,
    /// Stopped by SIGTERM/SIGINT; each turn's control is its child.
    control: RunControl,
    /// `policy show`'s confinement line, worked out once.
    confinement: String,
    /// The process's redactor: turns, memory read-outs, and every response
    /// body go through it; it learns the token when a request presents it.
    redactor: Arc<Redactor>,
}

/// Whether binding `addr` is allowed: loopback always; anything else only
/// with `allow_public_bind` and a token.
pub fn check_bind(addr: SocketAddr, allow_public: bool, has_token: bool) -> Result<()> {
    if addr.ip().is_loopback() || (allow_public && has_token) {
        return Ok(());
    }
    Err(Error::usage(format!(
        "refusing to bind {addr}: it is not a loopback address; that needs both \
         [gateway] allow_public_bind = true (it is {allow_public}) and a token (`latchclaw \
         gateway token`; {}). Use 127.0.0.1 or ::1 otherwise",
        if has_token {
            "one exists"
        } else {
            "none exists yet"
        }
    )))
}

/// `latchclaw gateway [--bind ADDR:PORT]`: serves until SIGTERM or Ctrl-C.
/// `redactor`: the process's, which knows the secrets `cfg` names.
pub fn run(cfg: Config, bind: Option<SocketAddr>, redactor: Arc<Redactor>) -> Result<i32> {
    let addr = bind.unwrap_or(cfg.gateway.bind);
    let token = auth::TokenFile::new(&cfg.state_dir, Arc::clone(&redactor));
    let has_token = token.load()?.is_some();
    check_bind(addr, cfg.gateway.allow_public_bind, has_token)?;
    if !has_token {
        return Err(Error::usage(format!(
            "no gateway token ({} does not exist): `latchclaw gateway token` creates one",
            token.path().display()
        )));
    }
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| Error::runtime(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::runtime(format!("cannot read the bound address: {e}")))?;
    let limits = server::Limits {
        workers: cfg.gateway.workers as usize,
        max_connections: cfg.gateway.max_connections as usize,
        header_timeout: Duration::from_millis(cfg.gateway.header_timeout_ms),
        idle_timeout: Duration::from_millis(cfg.gateway.idle_timeout_ms),
        max_body: cfg.gateway.max_body_bytes,
    };
    let confinement = {
        let gate = crate::security::Gate::new(&cfg, &cfg.channels.cli.tools_allow);
        match gate.workspace() {
            Ok(ws) => crate::security::confine::describe_for(&cfg, ws, gate.autonomy()),
            Err(_) => "nothing to confine: no usable workspace".into(),
        }
    };
    let gateway = Arc::new(Gateway {
        limit: auth::RateLimit::new(cfg.gateway.rate_limit_per_minute),
        token,
        metrics: metrics::Metrics::new(),
        control: RunControl::new(None),
        confinement,
        cfg,
        redactor: Arc::clone(&redactor),
    });
    let signals = gateway.control.install();
    // The whole log once now; then only what is appended (metrics).
    if let Some(Err(why)) = gateway.metrics.chain(&gateway.cfg) {
        log::error!(target: "event::gateway_chain", "the receipt chain does not verify: {why}");
    }
    {
        use std::io::Write;
        // The one line a caller reads to learn the port (with port 0).
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {local}");
        let _ = out.flush();
    }
    log::info!(target: "event::gateway_started", "addr={local}");
    let control = &gateway.control;
    let stop = || control.cancelled();
    let served = server::serve(
        listener,
        limits,
        Arc::clone(&gateway) as Arc<dyn server::Handler>,
        redactor,
        &stop,
        GRACE,
    );
    drop(signals);
    served.map_err(|e| Error::runtime(format!("the gateway failed: {e}")))?;
    eprintln!("latchclaw: gateway stopped");
    Ok(exit::OK)
}

/// `latchclaw gateway token [--rotate]`: prints a new token once (and no
/// log line after it shows it: `redactor` learns it).
pub fn token(cfg: &Config, rotate: bool, redactor: &Redactor) -> Result<i32> {
    let token = auth::create(&cfg.state_dir, rotate)?;
    auth::redact_token(&token, redactor);
    println!("{token}");
    eprintln!(
        "latchclaw: the gateway token above is shown once; only its SHA-256 is kept ({}).{} \
         Send it as `Authorization: Bearer TOKEN`.",
        cfg.state_dir.join(auth::TOKEN_FILE).display(),
        if rotate {
            " The old token stops working now, also in a running gateway."
        } else {
            ""
        }
    );
    Ok(exit::OK)
}
