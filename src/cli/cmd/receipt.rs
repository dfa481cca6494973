//! `receipt list`, `receipt verify`, `receipt head`, `receipt repair`,
//! `receipt anchor`.

use crate::cli::ctx::{Ctx, print_json};
use crate::config::Config;
use crate::error::{Error, Kind, Outcome, Result, exit};
use crate::receipts::{Anchored, Auth, Expect, ReceiptLog, Repair, Verify, span};
use crate::util::one_line;
use serde_json::{Value, json};
use std::path::PathBuf;

/// The log with its key, if the key exists (these commands never make
/// one), checked against its anchor file when it has one.
fn log(cfg: &Config) -> ReceiptLog {
    ReceiptLog::open(&cfg.receipts.path, &cfg.receipt_key_path())
        .anchored(cfg.receipts.anchor_file.as_deref())
}

/// The last head in `receipts.anchor_file`, when one is set and has one.
fn anchored(cfg: &Config) -> Result<Option<(PathBuf, Anchored)>> {
    let Some(file) = &cfg.receipts.anchor_file else {
        return Ok(None);
    };
    Ok(log(cfg)
        .read_anchor_locked(file)?
        .map(|a| (file.clone(), a)))
}

/// `expect`, and the anchored head.
fn with_anchor(expect: &[Expect], anchor: Option<&(PathBuf, Anchored)>) -> Vec<Expect> {
    let mut all = expect.to_vec();
    all.extend(anchor.and_then(|(file, a)| Expect::anchored(file, a)));
    all
}

pub fn list(ctx: &Ctx, json: bool, jsonl: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let rows = log(&cfg).list()?;
    if jsonl {
        // One receipt a line, for grep, jq and tail.
        for r in rows {
            let v = r.unwrap_or_else(|raw| json!({"unparsable": raw}));
            println!("{}", crate::util::json_visible(&v.to_string()));
        }
        return Ok(exit::OK);
    }
    if json {
        let v: Vec<Value> = rows
            .into_iter()
            .map(|r| r.unwrap_or_else(|raw| json!({"unparsable": raw})))
            .collect();
        print_json(&v);
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        eprintln!("no receipts yet ({})", cfg.receipts.path.display());
    }
    for (i, r) in rows.iter().enumerate() {
        match r {
            Ok(v) => println!(
                "{:>5}  {}  {}  {:14} {:9} {:7} {}",
                i + 1,
                v["id"].as_str().unwrap_or("?"),
                v["timestamp"].as_str().unwrap_or("?"),
                v["tool"].as_str().unwrap_or("?"),
                v["status"].as_str().unwrap_or("?"),
                v["risk"].as_str().unwrap_or("?"),
                one_line(v["reason"].as_str().unwrap_or(""), 70)
            ),
            Err(raw) => println!("{:>5}  <unparsable: {}>", i + 1, one_line(raw, 60)),
        }
    }
    Ok(exit::OK)
}

/// What a verified chain's keys say, in words; `Err` when keyed receipts
/// cannot be authenticated (no key to check them with).
fn authenticated(
    cfg: &Config,
    count: u64,
    auth: Auth,
) -> std::result::Result<Option<String>, String> {
    let key = cfg.receipt_key_path();
    let Auth {
        unkeyed,
        keyed,
        checked,
    } = auth;
    if count == 0 {
        return Ok(None);
    }
    if keyed > 0 && !checked {
        return Err(format!(
            "cannot authenticate: {} carry an hmac, but the receipt key {} is missing (moved \
             or deleted?); restore it to check them",
            span(unkeyed + 1, count),
            key.display()
        ));
    }
    Ok(Some(match (unkeyed, keyed) {
        (_, 0) => format!(
            "not authenticated: no receipt carries an hmac and there is no receipt key ({}); \
             `latchclaw init` or the next `agent` or `tool run` creates it, and receipts from \
             then on are keyed",
            key.display()
        ),
        (0, _) => format!(
            "keyed: every receipt carries an hmac, each checked with the receipt key {}",
            key.display()
        ),
        (n, _) => format!(
            "keyed: {} {} written before the receipt key existed (not authenticated); {}–{count} \
             keyed, each hmac checked with {}",
            span(1, n),
            if n == 1 { "was" } else { "were" },
            n + 1,
            key.display()
        ),
    }))
}

/// Prints a chain that does not verify; exit 7.
fn broken(json: bool, position: u64, count: u64, why: &str) -> i32 {
    if json {
        let at = (position > 0).then_some(position);
        print_json(&json!({"ok": false, "receipts": count, "broken_at": at, "reason": why}));
    } else if position > 0 {
        println!("broken: receipt {position} of {count}: {why}");
    } else {
        println!(
            "broken: {why} ({})",
            crate::cli::ctx::count(count, "receipt")
        );
    }
    Outcome::Failed(Kind::Integrity).code()
}

pub fn verify(ctx: &Ctx, json: bool, expect: &[Expect]) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let anchor = anchored(&cfg)?;
    let report = log(&cfg).verify_expecting(&with_anchor(expect, anchor.as_ref()))?;
    let (count, head, unfinished, auth) = match report {
        Verify::Ok {
            count,
            head,
            unfinished,
            auth,
        } => (count, head, unfinished, auth),
        Verify::Broken {
            position,
            count,
            why,
        } => return Ok(broken(json, position, count, &why)),
    };
    let said = authenticated(&cfg, count, auth);
    let key = cfg.receipt_key_path().display().to_string();
    if json {
        // A call cut off mid-run is a fact the chain records, not damage.
        let calls: Vec<Value> = unfinished
            .iter()
            .map(|c| {
                json!({"position": c.position, "id": c.id, "tool": c.tool,
                       "conversation_id": c.conversation_id, "timestamp": c.timestamp,
                       "status": UNFINISHED})
            })
            .collect();
        let anchor = anchor.as_ref().map(|(file, a)| {
            json!({"file": file.display().to_string(), "receipts": a.count, "head": a.head,
                   "at": a.at})
        });
        let mut v = json!({"ok": said.is_ok(), "receipts": count, "head": head,
                           "unfinished": calls, "unkeyed": auth.unkeyed, "keyed": auth.keyed,
                           "hmac_checked": auth.checked, "key": key, "anchor": anchor});
        if let Err(why) = &said {
            v["reason"] = why.clone().into();
        }
        print_json(&v);
    } else {
        match &said {
            Ok(line) => {
                println!(
                    "ok: {}, head {head}",
                    crate::cli::ctx::count(count, "receipt")
                );
                if let Some(line) = line {
                    println!("{line}");
                }
            }
            Err(why) => println!(
                "{why}. The chain itself links: {}, head {head}",
                crate::cli::ctx::count(count, "receipt")
            ),
        }
        for e in expect {
            match e.position {
                Some(p) => println!("since: receipt {p} still has {}", e.hash),
                None => println!("expected head: {} is in the chain", e.hash),
            }
        }
        if let Some((file, a)) = &anchor {
            match a.count {
                0 => println!(
                    "anchor: an empty log, anchored in {} at {}",
                    file.display(),
                    a.at
                ),
                n => println!(
                    "anchor: receipt {n} still has {}, as anchored in {} at {}",
                    a.head,
                    file.display(),
                    a.at
                ),
            }
        }
        for c in &unfinished {
            println!(
                "{UNFINISHED}: receipt {} of {count}, tool {}, id {}, conversation {}, at {}",
                c.position, c.tool, c.id, c.conversation_id, c.timestamp
            );
        }
    }
    Ok(match said {
        Ok(_) => exit::OK,
        Err(_) => Outcome::Failed(Kind::Integrity).code(),
    })
}

/// `N HASH` of a chain that verifies (and, when keyed, authenticates).
pub fn head(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let anchor = anchored(&cfg)?;
    let (count, head, auth) =
        match log(&cfg).verify_expecting(&with_anchor(&[], anchor.as_ref()))? {
            Verify::Ok {
                count, head, auth, ..
            } => (count, head, auth),
            Verify::Broken {
                position,
                count,
                why,
            } => return Ok(broken(json, position, count, &why)),
        };
    if let Err(why) = authenticated(&cfg, count, auth) {
        if json {
            print_json(&json!({"ok": false, "receipts": count, "reason": why}));
        } else {
            println!("{why}; no head printed");
        }
        return Ok(Outcome::Failed(Kind::Integrity).code());
    }
    if json {
        print_json(&json!({"receipts": count, "head": head}));
    } else {
        println!("{count} {head}");
    }
    Ok(exit::OK)
}

pub fn repair(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    match log(&cfg).repair()? {
        Repair::Intact { count, head } => {
            if json {
                print_json(
                    &json!({"ok": true, "repaired": false, "receipts": count, "head": head}),
                );
            } else {
                println!(
                    "ok: {}, head {head}; nothing to repair (nothing changed, no backup made)",
                    crate::cli::ctx::count(count, "receipt")
                );
            }
            Ok(exit::OK)
        }
        Repair::Repaired {
            count,
            kept,
            dropped,
            dropped_sha256,
            added_newline,
            backup,
            receipt_id,
            head,
        } => {
            if json {
                print_json(&json!({"ok": true, "repaired": true, "receipts": count,
                                   "head": head, "kept": kept, "dropped_bytes": dropped,
                                   "dropped_sha256": dropped_sha256,
                                   "added_newline": added_newline,
                                   "backup": backup.display().to_string(),
                                   "receipt_id": receipt_id}));
                return Ok(exit::OK);
            }
            if added_newline {
                println!(
                    "repaired: receipt {kept} was whole but lacked its newline; added it \
                     (nothing dropped)"
                );
            } else {
                println!(
                    "repaired: dropped a torn last line after receipt {kept}: {}, sha256 \
                     {dropped_sha256}",
                    crate::cli::ctx::count(dropped, "byte")
                );
            }
            println!("backup: {} (the log as it was)", backup.display());
            println!(
                "appended receipt {count} ({receipt_id}, status repaired); ok: {}, head {head}",
                crate::cli::ctx::count(count, "receipt")
            );
            Ok(exit::OK)
        }
        Repair::Refused {
            position,
            count,
            why,
        } => {
            if json {
                print_json(&json!({"ok": false, "repaired": false, "receipts": count,
                                   "broken_at": position, "reason": why}));
                return Ok(Outcome::Failed(Kind::Integrity).code());
            }
            let what = match position {
                0 => why,
                p => format!("receipt {p} of {count} is damaged: {why}"),
            };
            let anchor = match cfg.receipts.anchor_file {
                Some(_) => " and record its start with `latchclaw receipt anchor --reset`",
                None => "",
            };
            Err(Error::new(
                Kind::Integrity,
                format!(
                    "not repaired: {what}. `receipt repair` only drops a torn last line (a crash \
                     mid-append); it never rewrites or removes a receipt, so the log is \
                     unchanged. Keep it as evidence; to start a new chain, move it aside \
                     (receipts.path){anchor}"
                ),
            ))
        }
    }
}

/// Appends the head of a chain that verifies to `receipts.anchor_file`, as
/// a run does after writing receipts. The log must still hold the last
/// anchored head, unless `reset`: then the operator accepts the log as it
/// is (restored from an older backup, or a new chain after the old one was
/// moved aside), and the anchor file keeps the head it no longer holds.
pub fn anchor(ctx: &Ctx, json: bool, reset: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let Some(file) = cfg.receipts.anchor_file.clone() else {
        return Err(Error::usage(
            "receipt anchor: receipts.anchor_file is not set in the config (README: anchored \
             heads)",
        ));
    };
    // A last line that cannot be read is one more thing --reset accepts.
    let last = match log(&cfg).read_anchor_locked(&file) {
        Err(e) if reset && e.kind == Kind::Integrity => {
            eprintln!("latchclaw: {}", e.msg);
            None
        }
        other => other?,
    };
    let log = log(&cfg);
    let held = last.as_ref().and_then(|a| Expect::anchored(&file, a));
    let mut report = log.verify_expecting(held.as_slice())?;
    let mut replaced = None;
    if reset && held.is_some() && matches!(report, Verify::Broken { .. }) {
        report = log.verify()?;
        replaced = last.clone();
    }
    let (count, head, auth) = match report {
        Verify::Ok {
            count, head, auth, ..
        } => (count, head, auth),
        Verify::Broken {
            position,
            count,
            why,
        } => return Ok(broken(json, position, count, &why)),
    };
    if let Err(why) = authenticated(&cfg, count, auth) {
        if json {
            print_json(&json!({"ok": false, "receipts": count, "reason": why}));
        } else {
            println!("{why}; nothing anchored");
        }
        return Ok(Outcome::Failed(Kind::Integrity).code());
    }
    let already = last
        .as_ref()
        .is_some_and(|a| a.count == count && a.head == head);
    if !already {
        log.anchor_under_lock(&file, count, &head)?;
    }
    if json {
        let replaced = replaced
            .as_ref()
            .map(|a| json!({"receipts": a.count, "head": a.head, "at": a.at}));
        let v = json!({"ok": true, "anchored": !already, "receipts": count, "head": head,
                       "file": file.display().to_string(), "replaced": replaced});
        print_json(&v);
        return Ok(exit::OK);
    }
    if already {
        println!(
            "ok: {count} {head} is already the last head in {}",
            file.display()
        );
    } else {
        println!("anchored: {count} {head} in {}", file.display());
    }
    if let Some(a) = replaced {
        println!(
            "reset: the log no longer holds receipt {} {} (anchored at {}); that line stays in \
             the anchor file, the new one after it",
            a.count, a.head, a.at
        );
    }
    Ok(exit::OK)
}

const UNFINISHED: &str = "started, no outcome (the process was cut off)";
