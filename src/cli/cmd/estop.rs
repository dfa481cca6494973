//! `estop`: the emergency stop file.

use crate::cli::Ctx;
use crate::error::{Error, Result, exit};

pub fn run(ctx: &Ctx, clear: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let path = cfg.estop_path();
    if clear {
        match std::fs::remove_file(&path) {
            Ok(()) => println!("emergency stop cleared ({} removed)", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("emergency stop was not on")
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "cannot remove {}: {e}",
                    path.display()
                )));
            }
        }
        return Ok(exit::OK);
    }
    std::fs::create_dir_all(&cfg.state_dir)
        .map_err(|e| Error::runtime(format!("cannot create {}: {e}", cfg.state_dir.display())))?;
    std::fs::write(&path, format!("engaged {}\n", crate::util::now_rfc3339()))
        .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))?;
    log::warn!(target: "event::estop_triggered", "path={}", path.display());
    println!(
        "emergency stop on: every tool call is refused until `latchclaw estop --clear` ({})",
        path.display()
    );
    Ok(exit::OK)
}
