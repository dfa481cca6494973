//! The hour's tool calls of every run, for the per-hour rate limits: a
//! small append-only file beside the database (`memory.db.calls`), one
//! line `AT_MS TOOL` per admitted call, read, counted and appended under
//! an exclusive `flock`.
//!
//! Not a SQLite table: a commit per call grew the WAL by several pages
//! each tool round and brought its checkpoints (and their fsyncs) into
//! nearly every run, about 3 ms a round. The file needs no fsync either: a
//! crash can forget the last few calls, which only lets as many more run.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Stale lines tolerated before the file is rewritten without them.
const COMPACT_AT: usize = 256;

/// Under the file's lock: `decide` gets the calls of `tool` and of every
/// tool made in the last `window_ms` before `now_ms`; when it returns true
/// one call of `tool` is recorded at `now_ms`. Returns what it said.
pub fn admit(
    path: &Path,
    tool: &str,
    now_ms: i64,
    window_ms: i64,
    decide: &mut dyn FnMut(u32, u32) -> bool,
) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    file.lock()?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let since = now_ms - window_ms;
    let (mut n, mut all, mut stale) = (0u32, 0u32, 0usize);
    let mut live = Vec::new();
    for line in text.lines() {
        // A line cut short by a crash, or foreign text, counts as stale.
        let Some((at, name)) = line.split_once(' ') else {
            stale += 1;
            continue;
        };
        match at.parse::<i64>() {
            Ok(at) if at > since => {
                all += 1;
                n += u32::from(name == tool);
                live.push(line);
            }
            _ => stale += 1,
        }
    }
    let admitted = decide(n, all);
    // Names are the registry's (no spaces or newlines); a stray one is
    // kept out of the line format all the same.
    let entry = format!(
        "{now_ms} {}\n",
        tool.replace(|c: char| c.is_whitespace(), "_")
    );
    if stale >= COMPACT_AT && stale >= live.len() {
        let mut kept = String::with_capacity(text.len() / 2);
        for line in live {
            kept.push_str(line);
            kept.push('\n');
        }
        if admitted {
            kept.push_str(&entry);
        }
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(kept.as_bytes())?;
    } else if admitted {
        file.write_all(entry.as_bytes())?;
    }
    Ok(admitted)
}

/// The counts file of the database at `db`.
pub fn path_for(db: &Path) -> std::path::PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".calls");
    p.into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lc-calls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("counts")
    }

    #[test]
    fn counts_the_window_and_only_admitted_calls() {
        let p = tmp("window");
        let under = |limit: u32| move |n: u32, _: u32| n < limit;
        assert!(admit(&p, "shell", 1_000, 500, &mut under(2)).unwrap());
        assert!(admit(&p, "shell", 1_100, 500, &mut under(2)).unwrap());
        assert!(!admit(&p, "shell", 1_200, 500, &mut under(2)).unwrap());
        assert!(admit(&p, "http", 1_200, 500, &mut under(2)).unwrap());
        let mut seen = (0, 0);
        admit(&p, "shell", 1_300, 500, &mut |n, a| {
            seen = (n, a);
            false
        })
        .unwrap();
        assert_eq!(seen, (2, 3), "refused calls are not counted");
        // At 1_550 the call at 1_000 has left the 500 ms window.
        admit(&p, "shell", 1_550, 500, &mut |n, a| {
            seen = (n, a);
            false
        })
        .unwrap();
        assert_eq!(seen, (1, 2));
        let _ = std::fs::remove_dir_all(p.parent().unwrap());
    }

    #[test]
    fn stale_lines_are_dropped_and_torn_ones_ignored() {
        let p = tmp("compact");
        let mut old = String::new();
        for i in 0..300 {
            old.push_str(&format!("{i} shell\n"));
        }
        old.push_str("99999 she"); // torn by a crash: no newline, still parsed
        old.push_str("\ngarbage\n");
        std::fs::write(&p, old).unwrap();
        let mut seen = (0, 0);
        admit(&p, "shell", 100_000, 1_000, &mut |n, a| {
            seen = (n, a);
            true
        })
        .unwrap();
        assert_eq!(seen, (0, 1), "only the line inside the window counts");
        let left = std::fs::read_to_string(&p).unwrap();
        assert_eq!(left, "99999 she\n100000 shell\n");
        let _ = std::fs::remove_dir_all(p.parent().unwrap());
    }

    #[test]
    fn concurrent_admissions_never_exceed_the_limit() {
        let p = tmp("race");
        let admitted = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..20 {
                        if admit(&p, "shell", 5_000, 60_000, &mut |n, _| n < 50).unwrap() {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 50);
        let _ = std::fs::remove_dir_all(p.parent().unwrap());
    }
}
