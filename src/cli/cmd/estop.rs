//! `estop`: the emergency stop file.

use crate::cli::ctx::Ctx;
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
