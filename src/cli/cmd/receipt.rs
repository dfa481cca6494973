//! `receipt list`, `receipt verify`, `receipt head`, `receipt repair`.

use crate::cli::{Ctx, one_line, print_json};
use crate::config::Config;
use crate::error::{Error, Kind, Outcome, Result, exit};
use crate::receipts::{Auth, Expect, ReceiptLog, Repair, Verify, span};
use serde_json::{Value, json};

/// The log with its key, if the key exists (these commands never make one).
fn log(cfg: &Config) -> ReceiptLog {
    ReceiptLog::open(&cfg.receipts.path, &cfg.receipt_key_path())
}

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let rows = log(&cfg).list()?;
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
        println!("broken: {why} ({})", crate::cli::count(count, "receipt"));
    }
    Outcome::Failed(Kind::Integrity).code()
}

pub fn verify(ctx: &Ctx, json: bool, expect: &[Expect]) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let report = log(&cfg).verify_expecting(expect)?;
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
        let mut v = json!({"ok": said.is_ok(), "receipts": count, "head": head,
                           "unfinished": calls, "unkeyed": auth.unkeyed, "keyed": auth.keyed,
                           "hmac_checked": auth.checked, "key": key});
        if let Err(why) = &said {
            v["reason"] = why.clone().into();
        }
        print_json(&v);
    } else {
        match &said {
            Ok(line) => {
                println!("ok: {}, head {head}", crate::cli::count(count, "receipt"));
                if let Some(line) = line {
                    println!("{line}");
                }
            }
            Err(why) => println!(
                "{why}. The chain itself links: {}, head {head}",
                crate::cli::count(count, "receipt")
            ),
        }
        for e in expect {
            match e.position {
                Some(p) => println!("since: receipt {p} still has {}", e.hash),
                None => println!("expected head: {} is in the chain", e.hash),
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
    let (count, head, auth) = match log(&cfg).verify()? {
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
                    crate::cli::count(count, "receipt")
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
                    crate::cli::count(dropped, "byte")
                );
            }
            println!("backup: {} (the log as it was)", backup.display());
            println!(
                "appended receipt {count} ({receipt_id}, status repaired); ok: {}, head {head}",
                crate::cli::count(count, "receipt")
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
            Err(Error::new(
                Kind::Integrity,
                format!(
                    "not repaired: receipt {position} of {count} is damaged: {why}. \
                     `receipt repair` only drops a torn last line (a crash mid-append); it never \
                     rewrites or removes a receipt, so the log is unchanged. Keep it as evidence; \
                     to start a new chain, move it aside (receipts.path)"
                ),
            ))
        }
    }
}

const UNFINISHED: &str = "started, no outcome (the process was cut off)";
