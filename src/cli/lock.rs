//! `--lock NAME`: one run per name at a time, refused rather than queued.

use crate::config::Config;
use crate::error::Result;

/// Holds `<state>/locks/NAME.lock` for the life of the process; a second
/// run with the same name is refused at once (exit 8), never queued.
pub fn acquire(cfg: &Config, name: &str) -> Result<std::fs::File> {
    crate::util::lock_or_refuse(
        &cfg.state_dir.join("locks"),
        &format!("{name}.lock"),
        |path| {
            format!(
                "another run holds the lock \"{name}\" ({}); not starting",
                path.display()
            )
        },
    )
}
