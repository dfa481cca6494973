//! Logs go to stderr only, so stdout stays the answer. `LATCHCLAW_LOG=json`
//! gives one JSON object per line. Events are log records whose
//! target is `event::NAME`. Every line passes through the redactor the
//! logger is given (`security::redact`) before it is written. A text line
//! bound for a file or a pipe (a cron log) starts with its time; one on a
//! terminal does not (the reader is there as it happens).

use crate::security::redact::Redactor;
use std::io::Write;
use std::sync::Arc;

/// The process's logger (`log` has one per process), owning `redactor`:
/// the process's shared one, so a secret it learns later (the config's,
/// the gateway's token) is out of every line written after.
pub fn init(redactor: Arc<Redactor>) {
    let spec = std::env::var("LATCHCLAW_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".into());
    let json = std::env::var("LATCHCLAW_LOG").is_ok_and(|v| v == "json");
    let mut b = env_logger::Builder::new();
    b.parse_filters(&spec).target(env_logger::Target::Stderr);
    // At trace the HTTP and TLS crates dump what they send as hex beside
    // text: a key split across a dump's lines, or in hex, is out of the
    // redactor's reach. Their trace never reaches the log.
    if spec.to_ascii_lowercase().contains("trace") {
        for noisy in ["ureq", "ureq_proto", "rustls"] {
            b.filter_module(noisy, log::LevelFilter::Debug);
        }
    }
    if json {
        b.format(move |buf, r| {
            let target = r.target();
            let mut obj = serde_json::json!({
                "ts": crate::util::now_rfc3339(),
                "level": r.level().as_str().to_ascii_lowercase(),
                "target": target,
                "msg": redactor.redact(&r.args().to_string()),
            });
            if let Some(event) = target.strip_prefix("event::") {
                obj["event"] = event.into();
            }
            writeln!(buf, "{obj}")
        });
    } else {
        let stamped = !std::io::IsTerminal::is_terminal(&std::io::stderr());
        b.format(move |buf, r| {
            let label = r.target().strip_prefix("event::").unwrap_or("");
            let level = r.level().as_str().to_ascii_lowercase();
            let msg = crate::util::printable(&redactor.redact(&r.args().to_string()));
            if stamped {
                write!(buf, "{} ", crate::util::now_rfc3339())?;
            }
            if label.is_empty() {
                writeln!(buf, "latchclaw: {level}: {msg}")
            } else {
                writeln!(buf, "latchclaw: {level}: [{label}] {msg}")
            }
        });
    }
    let _ = b.try_init();
}
