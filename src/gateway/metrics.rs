//! `GET /metrics`: counters of this gateway process in the Prometheus text
//! format 0.0.4, and the receipt chain's state, kept incrementally: the
//! whole log is verified once at start, then only what was appended since
//! the last look (`receipts::ReceiptLog::verify_appended`).

use crate::config::Config;
use crate::receipts::{Checkpoint, ReceiptLog};
use crate::runtime::CallRecord;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// The paths requests are counted under; anything else is `other`, so a
/// scanner cannot grow the label set.
pub const PATHS: &[&str] = &[
    "/health",
    "/status",
    "/tools",
    "/chat",
    "/memory/search",
    "/receipts",
    "/estop",
    "/metrics",
];

/// Upper bounds (seconds) of the request duration histogram.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Counters {
    conversations: u64,
    /// Provider calls that failed, summed over every turn's own count.
    provider_errors: u64,
    tool_calls: BTreeMap<(String, &'static str), u64>,
    denials: BTreeMap<String, u64>,
    http: BTreeMap<(&'static str, u16), u64>,
    durations: BTreeMap<&'static str, Histogram>,
}

/// Where the receipt chain was last seen valid, or why it is not.
pub type Chain = std::result::Result<Checkpoint, String>;

pub struct Metrics {
    counters: Mutex<Counters>,
    chain: Mutex<Option<Chain>>,
}

pub fn path_label(path: Option<&str>) -> &'static str {
    path.and_then(|p| PATHS.iter().find(|k| **k == p).copied())
        .unwrap_or("other")
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            counters: Mutex::default(),
            chain: Mutex::new(None),
        }
    }

    pub fn request(&self, path: Option<&str>, status: u16, took: Duration) {
        let label = path_label(path);
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        *c.http.entry((label, status)).or_default() += 1;
        let h = c.durations.entry(label).or_default();
        let secs = took.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// A turn's calls; `new_conversation` when it started one.
    pub fn turn(&self, new_conversation: bool, calls: &[CallRecord]) {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        if new_conversation {
            c.conversations += 1;
        }
        for call in calls {
            // A name a model made up is not a label value.
            let tool = match crate::tools::ToolName::parse(&call.tool) {
                Some(t) => t.as_str().to_string(),
                None => "unknown".to_string(),
            };
            if call.status == crate::receipts::Status::Denied {
                *c.denials.entry(tool.clone()).or_default() += 1;
            }
            *c.tool_calls
                .entry((tool, call.status.as_str()))
                .or_default() += 1;
        }
    }

    /// A turn's failed provider calls (`Runtime::provider_errors`).
    pub fn provider_errors(&self, n: u64) {
        if n > 0 {
            self.counters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .provider_errors += n;
        }
    }

    /// The chain now: verified whole the first time, then only what was
    /// appended. A broken chain stays broken until a restart.
    pub fn chain(&self, cfg: &Config) -> Option<Chain> {
        if !cfg.receipts.enabled {
            return None;
        }
        let mut chain = self.chain.lock().unwrap_or_else(|e| e.into_inner());
        let log = ReceiptLog::open(&cfg.receipts.path, &cfg.receipt_key_path());
        let next = match chain.as_ref() {
            None => log.checkpoint(),
            Some(Ok(at)) => log.verify_appended(at),
            Some(Err(why)) => Ok(Err(why.clone())),
        };
        let next = next.unwrap_or_else(|e| Err(e.msg));
        *chain = Some(next.clone());
        Some(next)
    }

    pub fn render(&self, cfg: &Config) -> String {
        let chain = self.chain(cfg);
        let c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::with_capacity(4096);
        family(
            &mut out,
            "latchclaw_conversations_total",
            "counter",
            "Conversations started through this gateway.",
        );
        let _ = writeln!(out, "latchclaw_conversations_total {}", c.conversations);
        family(
            &mut out,
            "latchclaw_tool_calls_total",
            "counter",
            "Tool calls made in gateway turns, by tool and outcome.",
        );
        for ((tool, status), n) in &c.tool_calls {
            let _ = writeln!(
                out,
                "latchclaw_tool_calls_total{{tool=\"{}\",status=\"{}\"}} {n}",
                escape(tool),
                escape(status)
            );
        }
        family(
            &mut out,
            "latchclaw_tool_denials_total",
            "counter",
            "Tool calls denied (policy, operator, estop, rate limit) in gateway turns.",
        );
        for (tool, n) in &c.denials {
            let _ = writeln!(
                out,
                "latchclaw_tool_denials_total{{tool=\"{}\"}} {n}",
                escape(tool)
            );
        }
        family(
            &mut out,
            "latchclaw_provider_errors_total",
            "counter",
            "Provider calls that failed in this process.",
        );
        let _ = writeln!(out, "latchclaw_provider_errors_total {}", c.provider_errors);
        family(
            &mut out,
            "latchclaw_receipt_chain_valid",
            "gauge",
            "1 while the receipts log verifies (checked incrementally), else 0.",
        );
        if let Some(chain) = &chain {
            let _ = writeln!(
                out,
                "latchclaw_receipt_chain_valid {}",
                u8::from(chain.is_ok())
            );
        }
        family(
            &mut out,
            "latchclaw_receipts",
            "gauge",
            "Receipts in the log when last verified.",
        );
        if let Some(Ok(at)) = &chain {
            let _ = writeln!(out, "latchclaw_receipts {}", at.count);
        }
        family(
            &mut out,
            "latchclaw_http_requests_total",
            "counter",
            "HTTP requests answered, by path and status code.",
        );
        for ((path, code), n) in &c.http {
            let _ = writeln!(
                out,
                "latchclaw_http_requests_total{{path=\"{}\",code=\"{code}\"}} {n}",
                escape(path)
            );
        }
        family(
            &mut out,
            "latchclaw_http_request_duration_seconds",
            "histogram",
            "Time from the first byte of a request to its answer, by path.",
        );
        for (path, h) in &c.durations {
            let path = escape(path);
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "latchclaw_http_request_duration_seconds_bucket{{path=\"{path}\",le=\"{le}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "latchclaw_http_request_duration_seconds_bucket{{path=\"{path}\",le=\"+Inf\"}} {}\n\
                 latchclaw_http_request_duration_seconds_sum{{path=\"{path}\"}} {}\n\
                 latchclaw_http_request_duration_seconds_count{{path=\"{path}\"}} {}",
                h.count, h.sum, h.count
            );
        }
        out
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value as the text format writes it.
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_paths_bounded() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(path_label(Some("/health")), "/health");
        assert_eq!(path_label(Some("/etc/passwd")), "other");
        assert_eq!(path_label(None), "other");
    }

    #[test]
    fn every_sample_follows_its_help_and_type() {
        let m = Metrics::new();
        m.request(Some("/health"), 200, Duration::from_millis(3));
        m.request(Some("/x\"y"), 404, Duration::from_millis(30));
        let cfg = Config::defaults("/nonexistent/c.toml".into(), "/nonexistent/state".into());
        let text = m.render(&cfg);
        let mut typed = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "{name}");
                }
                typed.push(name.to_string());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(
                    typed.iter().any(|t| name == t
                        || name
                            .strip_prefix(t.as_str())
                            .is_some_and(|s| { ["_bucket", "_sum", "_count"].contains(&s) })),
                    "{line}"
                );
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert!(text.contains(
            "latchclaw_http_request_duration_seconds_bucket{path=\"/health\",le=\"0.005\"} 1"
        ));
        assert!(text.contains("latchclaw_http_requests_total{path=\"other\",code=\"404\"} 1"));
        assert!(text.contains("latchclaw_receipt_chain_valid 1"), "{text}");
    }
}
