//! `policy replay`: every recorded call judged again, nothing run.

use crate::cli::ctx::{Ctx, count, print_json};
use crate::config::Config;
use crate::error::{Error, Result, exit};
use crate::memory::calls::RecordedCall;
use crate::security::{Decision, Gate, Verdict};
use crate::types::ToolName;
use crate::util::for_stdout;
use serde_json::{Map, Value, json};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::collections::HashMap;

/// Where the replay starts: a date, or a receipt number.
enum Since {
    All,
    Unix(i64),
    Receipt(u64),
}

fn since(raw: Option<&str>) -> Result<Since> {
    let Some(raw) = raw else {
        return Ok(Since::All);
    };
    if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        return match raw.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Since::Receipt(n)),
            _ => Err(Error::usage(format!(
                "--since: \"{raw}\" is not a receipt number (1 or more) or a date"
            ))),
        };
    }
    crate::memory::parse_date(raw, false)
        .map(Since::Unix)
        .map_err(|e| Error::usage(format!("--since: {e}; or a receipt number (1 or more)")))
}

/// A recorded call's verdict as it was: what its stored status says the
/// gate answered (`None`: the status does not say).
fn recorded_verdict(status: Option<&str>) -> Option<&'static str> {
    match status? {
        "allowed" => Some("allow"),
        "approved" => Some("ask"),
        "denied" => Some("deny"),
        _ => None,
    }
}

/// What a replay keeps of a decision.
#[derive(Clone)]
struct Judged {
    verdict: Verdict,
    rule: Option<Box<str>>,
    reason: String,
}

impl From<Decision> for Judged {
    fn from(d: Decision) -> Judged {
        Judged {
            verdict: d.verdict,
            rule: d.rule,
            reason: d.reason,
        }
    }
}

/// The judge of one config: its gate and the plugins' tools it knows.
struct Judge {
    gate: Gate,
    external: crate::external::Registry,
    /// Decisions by call (origin, tool, arguments): nothing runs during a
    /// replay, so the files a decision looks at stay as they are and the
    /// same call is judged the same; logs repeat calls a lot.
    seen: RefCell<HashMap<String, Option<Judged>>>,
}

impl Judge {
    fn new(cfg: &Config) -> Judge {
        Judge {
            gate: Gate::new(cfg, &cfg.channels.cli.tools_allow),
            external: crate::plugins::registry(cfg),
            seen: RefCell::new(HashMap::new()),
        }
    }

    fn decide(&self, c: &RecordedCall) -> Option<Judged> {
        let origin = crate::security::policy::origin_of(&c.conversation_id);
        let key = format!("{origin}\0{}\0{}", c.tool, c.args);
        if let Some(j) = self.seen.borrow().get(&key) {
            return j.clone();
        }
        let judged = match ToolName::parse(&c.tool) {
            Some(t) => Some(self.gate.decide_from(t, &c.args, origin)),
            None => self
                .external
                .find(&c.tool)
                .map(|e| self.gate.decide_external_from(&e.judged(), &c.args, origin)),
        }
        .map(Judged::from);
        self.seen.borrow_mut().insert(key, judged.clone());
        judged
    }

    fn distinct(&self) -> usize {
        self.seen.borrow().len()
    }
}

/// What the operator reads of a call: its command, path or URL.
fn shown(c: &RecordedCall) -> String {
    let s = |k: &str| c.args.get(k).and_then(Value::as_str);
    let text = s("command")
        .or_else(|| s("url"))
        .or_else(|| s("path"))
        .map(String::from)
        .unwrap_or_else(|| c.args.to_string());
    crate::util::one_line(&text, 160)
}

pub fn replay(ctx: &Ctx, since_raw: Option<&str>, json_out: bool) -> Result<i32> {
    let since = since(since_raw)?;
    let mut cfg = ctx.load_config()?;
    crate::cli::workspace::choose(&mut cfg, None)?;
    // With `--config FILE` the file is the proposal, judged against the
    // config in force; without it, the config in force against what the
    // calls' records say happened.
    let current = match &ctx.config {
        Some(_) => {
            let mut c = Config::load(None)?;
            crate::cli::workspace::choose(&mut c, None)?;
            Some(c)
        }
        None => None,
    };
    let memory = crate::memory::Memory::open_existing(
        &cfg.memory.path,
        cfg.memory.busy_timeout_ms,
        std::sync::Arc::clone(&ctx.redactor),
    )?;
    let mut calls = match &memory {
        Some(m) => m.recorded_calls(match since {
            Since::Unix(t) => Some(t),
            _ => None,
        })?,
        None => Vec::new(),
    };
    if let Since::Receipt(n) = since {
        let log = crate::receipts::ReceiptLog::open(&cfg.receipts.path, &cfg.receipt_key_path());
        let (lines, _) = log.page(n - 1, usize::MAX)?;
        let ids: std::collections::HashSet<String> = lines
            .iter()
            .filter_map(|(_, l)| l.as_ref().ok()?.get("id")?.as_str().map(String::from))
            .collect();
        calls.retain(|c| c.receipt_id.as_ref().is_some_and(|id| ids.contains(id)));
    }
    let after = Judge::new(&cfg);
    let before = current.as_ref().map(Judge::new);
    let started = std::time::Instant::now();
    let (mut judged, mut skipped) = (0u64, 0u64);
    let mut changes: Vec<Value> = Vec::new();
    let mut by_rule: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut by_change: BTreeMap<String, u64> = BTreeMap::new();
    for c in &calls {
        let Some(now) = after.decide(c) else {
            skipped += 1;
            continue;
        };
        let (was, was_rule) = match &before {
            Some(b) => match b.decide(c) {
                Some(d) => (d.verdict.as_str(), d.rule),
                None => {
                    skipped += 1;
                    continue;
                }
            },
            None => match recorded_verdict(c.status.as_deref()) {
                Some(v) => (v, None),
                None => {
                    skipped += 1;
                    continue;
                }
            },
        };
        judged += 1;
        let is = now.verdict.as_str();
        if was == is {
            continue;
        }
        let change = format!("{was}->{is}");
        let rule = now.rule.clone().or(was_rule);
        let rule_key = rule.as_deref().unwrap_or("(built-in)").to_string();
        *by_rule
            .entry(rule_key)
            .or_default()
            .entry(change.clone())
            .or_default() += 1;
        *by_change.entry(change).or_default() += 1;
        let mut row = json!({
            "conversation_id": c.conversation_id,
            "call_id": c.call_id,
            "timestamp": c.timestamp,
            "receipt_id": c.receipt_id,
            "tool": c.tool,
            "call": ctx.redactor.redact(&shown(c)),
            "before": was,
            "after": is,
            "rule": rule,
            "reason": ctx.redactor.redact(&now.reason),
        });
        if let Verdict::Deny(kind) = now.verdict {
            row["refusal"] = kind.as_str().into();
        }
        changes.push(row);
    }
    let elapsed = started.elapsed();
    let to_map = |m: &BTreeMap<String, u64>| -> Map<String, Value> {
        m.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
    };
    if json_out {
        print_json(&json!({
            "calls": calls.len(),
            "judged": judged,
            "skipped": skipped,
            "baseline": match &current {
                Some(c) => json!(c.config_path),
                None => json!("recorded"),
            },
            "config": cfg.config_path,
            "changed": changes.len(),
            "by_change": to_map(&by_change),
            "by_rule": by_rule.iter().map(|(k, v)| (k.clone(), Value::Object(to_map(v)))).collect::<Map<_, _>>(),
            "changes": changes,
            "distinct": after.distinct(),
            "elapsed_ms": elapsed.as_secs_f64() * 1000.0,
        }));
        return Ok(exit::OK);
    }
    for c in &changes {
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        let rule = match c["rule"].as_str() {
            Some(r) => format!("  (rule {r})"),
            None => String::new(),
        };
        println!(
            "{}  {} -> {}  {} {}{rule}",
            s("timestamp"),
            s("before"),
            s("after"),
            s("tool"),
            for_stdout(&s("call"))
        );
    }
    let against = match &current {
        Some(c) => format!("the config in force ({})", c.config_path.display()),
        None => "what was recorded".into(),
    };
    println!(
        "{} of {} judged would change under {} against {against}{}",
        changes.len(),
        count(judged, "call"),
        cfg.config_path.display(),
        if skipped > 0 {
            format!(" ({skipped} skipped: no recorded verdict or an unknown tool)")
        } else {
            String::new()
        }
    );
    for (rule, changes) in &by_rule {
        let parts: Vec<String> = changes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("  {rule}: {}", parts.join(", "));
    }
    Ok(exit::OK)
}
