//! Small helpers shared by several modules: time stamps, ids, hashing, output caps,
//! what the operator is shown (`hidden`, `printable`), data framed for a model (`frame`)
//! and the valid name nearest a mistyped one (`suggest`).

use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};

mod frame;
mod shown;
pub mod sort;
pub mod suggest;
mod unicode_tables;

pub use frame::{fenced, frame};
pub use shown::{
    for_stdout, for_terminal, hidden, hidden_count, json_visible, printable, sanitize,
};

/// `s` as one word for a POSIX shell (the commands latchclaw tells the
/// operator to run).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A named thread, or why none could be made: at the system's process or
/// memory limit `std::thread::spawn` panics, and one call could then take
/// a gateway down.
pub fn thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<std::thread::JoinHandle<T>, String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| {
            format!("cannot start a thread ({e}): the system is out of processes or memory")
        })
}

/// Seconds and nanoseconds since the Unix epoch (0 if the clock is before it).
pub fn now_unix() -> (i64, u32) {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(_) => (0, 0),
    }
}

/// The time memory stamps turns, notes and summaries with: now, or for
/// tests only, `LATCHCLAW_TEST_NOW` (Unix seconds), so a test can script a
/// week of conversations without waiting a week. Nothing else reads it.
pub fn clock_now() -> (i64, u32) {
    match std::env::var("LATCHCLAW_TEST_NOW") {
        Ok(v) => match v.trim().parse::<i64>() {
            Ok(s) => (s, 0),
            Err(_) => now_unix(),
        },
        Err(_) => now_unix(),
    }
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a Unix time; `offset_secs` shifts to local
/// time and replaces `Z` with `+HH:MM`.
pub fn rfc3339(secs: i64, nanos: u32, offset_secs: i64) -> String {
    let t = secs + offset_secs;
    let (y, mo, d) = civil_from_days(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    let zone = if offset_secs == 0 {
        "Z".to_string()
    } else {
        let sign = if offset_secs < 0 { '-' } else { '+' };
        let o = offset_secs.abs();
        format!("{sign}{:02}:{:02}", o / 3600, (o % 3600) / 60)
    };
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}{zone}",
        s / 3600,
        (s % 3600) / 60,
        s % 60,
        nanos / 1_000_000
    )
}

/// Creates `dir` and its missing parents owner-only (0700), as `init`
/// does for the state directory; an existing directory is left as it is.
pub fn private_dir(dir: &std::path::Path) -> crate::error::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| crate::error::Error::runtime(format!("cannot create {}: {e}", dir.display())))
}

/// `DIR/FILE` (0600, in a private `DIR`) locked for the life of the
/// returned handle, or at once an `ErrKind::Locked` error (exit 8) saying
/// `busy(path)`: a second run is refused, never queued. The kernel lets
/// the lock go when its holder dies, however it dies.
pub fn lock_or_refuse(
    dir: &std::path::Path,
    file: &str,
    busy: impl FnOnce(&std::path::Path) -> String,
) -> crate::error::Result<std::fs::File> {
    use crate::error::Error;
    use std::os::unix::fs::OpenOptionsExt;
    private_dir(dir)?;
    let path = dir.join(file);
    let f = std::fs::OpenOptions::new()
        .mode(0o600)
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::runtime(format!("cannot open {}: {e}", path.display())))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(Error::new(crate::error::Kind::Locked, busy(&path)))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(Error::runtime(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}

/// Writes a whole file by way of a temporary beside it, synced, with
/// exactly `mode` whatever the umask: a crash leaves the old file or the
/// new one. With `replace` false it is put in place by link(2), which fails
/// with `AlreadyExists` if the file appeared meanwhile.
pub fn write_file_atomic(
    path: &std::path::Path,
    data: &[u8],
    mode: u32,
    replace: bool,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| {
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            f.write_all(data)?;
            f.sync_all()
        })
        .and_then(|()| {
            if replace {
                std::fs::rename(&tmp, path)
            } else {
                std::fs::hard_link(&tmp, path).and_then(|()| std::fs::remove_file(&tmp))
            }
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

pub fn now_rfc3339() -> String {
    let (s, n) = now_unix();
    rfc3339(s, n, 0)
}

/// A short random id with a prefix and the UTC date, e.g. `conv-20261121-3f9a0c1d2b4e`.
pub fn new_id(prefix: &str) -> String {
    let (s, _) = now_unix();
    let (y, m, d) = civil_from_days(s.div_euclid(86_400));
    format!(
        "{prefix}-{y:04}{m:02}{d:02}-{:012x}",
        fastrand::u64(..) >> 16
    )
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Largest index `<= i` that is a char boundary of `s`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Caps `s` at about `max` bytes, keeping the head and the tail around a
/// visible marker so the model and the user can see that something was cut.
pub fn truncate_middle(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let head = floor_boundary(s, max / 2);
    let mut tail = s.len() - (max - head);
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n…[truncated: {} of {} bytes omitted]…\n{}",
        &s[..head],
        tail - head,
        s.len(),
        &s[tail..]
    )
}

/// Home directory from `$HOME`; `None` when unset or empty.
pub fn home_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::PathBuf::from)
}

/// `s` on one line, cut to `max` chars.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0, 0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(951_782_400, 5_000_000, 0),
            "2000-02-29T00:00:00.005Z"
        );
        assert_eq!(
            rfc3339(1_795_305_600, 0, 3600),
            "2026-11-22T01:00:00.000+01:00"
        );
        assert_eq!(
            rfc3339(0, 0, -5 * 3600 - 1800),
            "1969-12-31T18:30:00.000-05:30"
        );
    }

    #[test]
    fn sha256_matches_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn truncation_keeps_head_tail_and_marker() {
        let s = "a".repeat(100) + &"é".repeat(100) + &"z".repeat(100);
        let t = truncate_middle(&s, 64);
        assert!(t.starts_with("aaaa"));
        assert!(t.ends_with("zzzz"));
        assert!(t.contains("truncated"));
        assert_eq!(truncate_middle("short", 64), "short");
    }

    /// The approval prompt of the finding: a visible line, then 68 tag
    /// characters (U+E0000 + ASCII) spelling an instruction.
    #[test]
    fn ids_are_prefixed_and_distinct() {
        let a = new_id("conv");
        let b = new_id("conv");
        assert!(a.starts_with("conv-"));
        assert_ne!(a, b);
    }
}

/// Random model-like text for the parsers' property tests: markup pieces
/// mixed with arbitrary Unicode (multi-byte letters whose case changes
/// their length, combining marks, controls, NUL, emoji).
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub mod arbitrary {
    pub fn text(rng: &mut fastrand::Rng, pieces: &[&str], max_parts: usize) -> String {
        const ODD: [&str; 12] = [
            "İ", "ẞ", "ﬁ", "Σ", "é", "e\u{301}", "\u{0}", "\r\n", "\u{202e}", "😀", "\\", "\"",
        ];
        let n = rng.usize(0..=max_parts);
        let mut out = String::new();
        for _ in 0..n {
            match rng.u8(0..4) {
                0 => out.push_str(ODD[rng.usize(..ODD.len())]),
                1 => out.push(rng.char(..)),
                _ if !pieces.is_empty() => out.push_str(pieces[rng.usize(..pieces.len())]),
                _ => out.push(rng.alphanumeric()),
            }
        }
        out
    }

    /// Every prefix of `text` that ends on a character boundary.
    pub fn prefixes(text: &str) -> impl Iterator<Item = &str> {
        (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .map(move |i| &text[..i])
    }
}
