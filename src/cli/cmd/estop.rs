//! `estop`, `estop status`: the emergency stop file.

use crate::cli::ctx::{Ctx, print_json};
use crate::error::{Result, exit};

pub fn run(ctx: &Ctx, clear: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let path = cfg.estop_path();
    if clear {
        if crate::security::clear_estop(&cfg)? {
            println!("emergency stop cleared ({} removed)", path.display());
        } else {
            println!("emergency stop was not on");
        }
        return Ok(exit::OK);
    }
    crate::security::engage_estop(&cfg, "")?;
    println!(
        "emergency stop on: every tool call is refused until `latchclaw estop --clear` ({})",
        path.display()
    );
    Ok(exit::OK)
}

/// `estop status`: whether it is on, and its file's first line (when and
/// why it was engaged). Exit 0 either way: a question, not a refusal.
pub fn status(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let path = cfg.estop_path();
    let on = crate::security::estop_engaged(&path).is_some();
    let reason = on.then(|| {
        use std::io::Read;
        let mut buf = Vec::new();
        if let Ok(f) = std::fs::File::open(&path) {
            let _ = f.take(1024).read_to_end(&mut buf);
        }
        let text = String::from_utf8_lossy(&buf);
        crate::util::one_line(
            &crate::util::printable(text.lines().next().unwrap_or("")),
            300,
        )
    });
    if json {
        print_json(&serde_json::json!({
            "estop": on,
            "path": path,
            "reason": reason,
        }));
    } else if let Some(r) = reason {
        println!(
            "on: {} ({}; `latchclaw estop --clear` lifts it)",
            if r.is_empty() { "engaged" } else { &r },
            path.display()
        );
    } else {
        println!("off");
    }
    Ok(exit::OK)
}
