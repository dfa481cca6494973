//! Logs go to stderr only, so stdout stays the answer. `LATCHCLAW_LOG=json`
//! gives one JSON object per line. Events are log records whose
//! target is `event::NAME`. Every line passes through the process's
//! redactor (`security::redact`) before it is written.

use crate::security::redact;
use std::io::Write;

pub fn init() {
    let spec = std::env::var("LATCHCLAW_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".into());
    let json = std::env::var("LATCHCLAW_LOG").is_ok_and(|v| v == "json");
    let mut b = env_logger::Builder::new();
    b.parse_filters(&spec).target(env_logger::Target::Stderr);
    if json {
        b.format(|buf, r| {
            let target = r.target();
            let mut obj = serde_json::json!({
                "ts": crate::util::now_rfc3339(),
                "level": r.level().as_str().to_ascii_lowercase(),
                "target": target,
                "msg": redact::scrub(&r.args().to_string()),
            });
            if let Some(event) = target.strip_prefix("event::") {
                obj["event"] = event.into();
            }
            writeln!(buf, "{obj}")
        });
    } else {
        b.format(|buf, r| {
            let label = r.target().strip_prefix("event::").unwrap_or("");
            let level = r.level().as_str().to_ascii_lowercase();
            let msg = crate::util::printable(&redact::scrub(&r.args().to_string()));
            if label.is_empty() {
                writeln!(buf, "latchclaw: {level}: {msg}")
            } else {
                writeln!(buf, "latchclaw: {level}: [{label}] {msg}")
            }
        });
    }
    let _ = b.try_init();
}
