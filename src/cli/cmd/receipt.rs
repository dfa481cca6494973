//! `receipt list`, `receipt verify`, `receipt repair`.

use crate::cli::{Ctx, one_line, print_json};
use crate::error::{Error, Kind, Outcome, Result, exit};
use crate::receipts::{ReceiptLog, Repair, Verify};
use serde_json::{Value, json};

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let rows = ReceiptLog::new(&cfg.receipts.path).list()?;
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

pub fn verify(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let report = ReceiptLog::new(&cfg.receipts.path).verify()?;
    match report {
        Verify::Ok {
            count,
            head,
            unfinished,
        } => {
            // A call cut off mid-run is a fact the chain records, not damage.
            if json {
                let calls: Vec<Value> = unfinished
                    .iter()
                    .map(|c| {
                        json!({"position": c.position, "id": c.id, "tool": c.tool,
                               "conversation_id": c.conversation_id, "timestamp": c.timestamp,
                               "status": UNFINISHED})
                    })
                    .collect();
                print_json(
                    &json!({"ok": true, "receipts": count, "head": head, "unfinished": calls}),
                );
            } else {
                println!("ok: {}, head {head}", crate::cli::count(count, "receipt"));
                for c in &unfinished {
                    println!(
                        "{UNFINISHED}: receipt {} of {count}, tool {}, id {}, conversation {}, at {}",
                        c.position, c.tool, c.id, c.conversation_id, c.timestamp
                    );
                }
            }
            Ok(exit::OK)
        }
        Verify::Broken {
            position,
            count,
            why,
        } => {
            if json {
                print_json(
                    &json!({"ok": false, "receipts": count, "broken_at": position, "reason": why}),
                );
            } else {
                println!("broken: receipt {position} of {count}: {why}");
            }
            Ok(Outcome::Failed(Kind::Integrity).code())
        }
    }
}

pub fn repair(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    match ReceiptLog::new(&cfg.receipts.path).repair()? {
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
