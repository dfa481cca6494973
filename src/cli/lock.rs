//! `--lock NAME`: one run per name at a time, refused rather than queued.

use crate::config::Config;
use crate::error::{Error, Result};

/// Holds `<state>/locks/NAME.lock` for the life of the process; a second
/// run with the same name is refused at once (exit 8), never queued.
pub fn acquire(cfg: &Config, name: &str) -> Result<std::fs::File> {
    let dir = cfg.state_dir.join("locks");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::runtime(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::runtime(format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::new(
            crate::error::Kind::Locked,
            format!(
                "another run holds the lock \"{name}\" ({}); not starting",
                path.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::runtime(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}
