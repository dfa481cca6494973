//! `receipts.anchor_file`, read back. After every run that wrote receipts a
//! line `TIMESTAMP N HASH` is appended there; the last one is what the log
//! must still hold: `receipt verify` fails a log whose receipt N is gone or
//! has another hash, and no receipt is appended to such a log, so dropping
//! the newest receipts is found instead of built on.
//!
//! Cheap on every append: only the anchor file's tail is read, and the log's
//! lines are counted only when its last receipt is neither the anchored one
//! nor one this log placed itself under that anchor (another process
//! appended since, or the anchor's write failed). A log whose last line is
//! the anchored receipt but whose middle was cut has a broken link, which is
//! `receipt verify`'s to find.
//!
//! A leaf of `receipts`: the file's lines, the heads a chain must hold
//! (`Expect`, from it or from a flag) and the words for what is missing;
//! the log's checks against it are `ReceiptLog`'s, in `receipts.rs`.

use crate::error::{Error, IoContext, Kind, Result};
use crate::util;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The last line of an anchor file: receipt `count` of the log had the
/// hash `head` when it was written at `at`. `0 GENESIS` (written by
/// `receipt anchor --reset` for an empty log) holds for any log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchored {
    pub at: String,
    pub count: u64,
    pub head: String,
}

/// Bytes read from the end of an anchor file: a line latchclaw writes is
/// under 100.
const TAIL: u64 = 4096;

/// Appends `TIMESTAMP N HASH` to an anchor file (created 0600 if missing):
/// the head `receipt verify` and every append check the log against.
pub fn append_anchor(path: &Path, count: u64, head: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .ctx(|| format!("cannot open the anchor file {}", path.display()))?;
    // After a torn or NUL-padded last line, on a line of its own.
    let len = f.metadata().map_or(0, |m| m.len());
    let mut last = [b'\n'];
    if len > 0 {
        let _ = f.read_exact_at(&mut last, len - 1);
    }
    let fresh = if last[0] == b'\n' { "" } else { "\n" };
    let line = format!("{fresh}{} {count} {head}\n", util::now_rfc3339());
    // One write(2) of a short line to an O_APPEND file: lines of runs that
    // end together do not interleave.
    f.write_all(line.as_bytes())
        .and_then(|_| f.sync_data())
        .ctx(|| format!("cannot append to the anchor file {}", path.display()))
}

/// The last head in an anchor file; None while there is none (no file, or
/// an empty one: no run has anchored yet). Only its last 4 KiB are read,
/// so the file may grow for ever. A last line latchclaw would not have
/// written is an integrity error: nothing is checked, or appended, against
/// a head that cannot be read.
pub fn read_anchor(path: &Path) -> Result<Option<Anchored>> {
    let cannot = |e: std::io::Error| {
        Error::runtime(format!(
            "cannot read the anchor file {}: {e}",
            path.display()
        ))
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cannot(e)),
    };
    let len = file.metadata().map_err(cannot)?.len();
    let start = len.saturating_sub(TAIL);
    let mut buf = vec![0u8; (len - start) as usize];
    file.read_exact_at(&mut buf, start).map_err(cannot)?;
    // Only newlines after the last line: an editor's extra one is no damage.
    let end = buf.iter().rposition(|&b| b != b'\n').map_or(0, |i| i + 1);
    let line = match memchr::memrchr(b'\n', &buf[..end]) {
        Some(i) => &buf[i + 1..end],
        None if start == 0 && end == 0 => return Ok(None),
        None if start == 0 => &buf[..end],
        None => return Err(malformed(path, &buf[..end.min(80)], "longer than 4 KiB")),
    };
    parse(line)
        .map(Some)
        .map_err(|why| malformed(path, line, &why))
}

fn malformed(path: &Path, line: &[u8], why: &str) -> Error {
    let text = String::from_utf8_lossy(&line[..line.len().min(120)]);
    Error::new(
        Kind::Integrity,
        format!(
            "the anchor file {} does not end with a head latchclaw wrote: its last line \
             \"{}\" is not `TIMESTAMP N HASH` ({why}); receipts are not checked against it, \
             and none is appended, until it is: restore the file from a copy, or accept the \
             log as it is with `latchclaw receipt anchor --reset`",
            path.display(),
            util::printable(&text)
        ),
    )
}

/// `TIMESTAMP N HASH`, as `append_anchor` writes it.
fn parse(line: &[u8]) -> std::result::Result<Anchored, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8 text".to_string())?;
    let fields: Vec<&str> = text.split(' ').collect();
    let [at, count, head] = fields[..] else {
        return Err(format!("{} space-separated fields, not 3", fields.len()));
    };
    if at.is_empty() || !at.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("no timestamp".into());
    }
    let count: u64 = match count.bytes().all(|b| b.is_ascii_digit()) {
        true => count
            .parse()
            .map_err(|_| format!("N \"{count}\" is not a receipt count"))?,
        false => return Err(format!("N \"{count}\" is not a receipt count")),
    };
    if head.len() != 64 || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("HASH is not 64 hex digits".into());
    }
    let head = head.to_ascii_lowercase();
    // Receipt 0 is the chain's start, `GENESIS`: 64 zeros.
    if (count == 0) != head.bytes().all(|b| b == b'0') {
        return Err("only receipt 0 has the hash of 64 zeros".into());
    }
    Ok(Anchored {
        at: at.to_string(),
        count,
        head,
    })
}

/// A head recorded earlier (`receipt head`, an anchor) that the chain must
/// still hold: the receipt at `position` has `hash`, or with no position,
/// some receipt has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    pub position: Option<u64>,
    pub hash: String,
    /// The anchor file it is the last line of; None for a flag given.
    pub anchor: Option<AnchorLine>,
}

/// Where an anchored head came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnchorLine {
    pub file: PathBuf,
    pub at: String,
}

impl Expect {
    /// What an anchored head asks of the chain: receipt N has the hash
    /// (nothing, for `0 GENESIS`).
    pub fn anchored(file: &Path, a: &Anchored) -> Option<Expect> {
        (a.count > 0).then(|| Expect {
            position: Some(a.count),
            hash: a.head.clone(),
            anchor: Some(AnchorLine {
                file: file.to_path_buf(),
                at: a.at.clone(),
            }),
        })
    }
}

/// What to do about a log that no longer holds its anchored receipt `n`.
pub(super) fn repair_path(n: u64) -> String {
    format!(
        "keep this log as evidence and restore the one holding receipt {n} from a backup \
         (`latchclaw receipt verify` checks it against the anchor); or, to accept the loss and \
         go on with this log, `latchclaw receipt anchor --reset` records its head as the new \
         anchor"
    )
}

/// `1 receipt`, `2 receipts`.
pub(super) fn receipts(n: u64) -> String {
    format!("{n} receipt{}", if n == 1 { "" } else { "s" })
}

/// Receipt `p` is there with another hash than the one anchored.
pub(super) fn rewritten(p: u64, hash: &str, anchored: &str, a: &AnchorLine) -> String {
    format!(
        "receipt {p} has the hash {hash}, not {anchored} as anchored in {} at {}: the log was \
         rewritten at or before receipt {p}; {}",
        a.file.display(),
        a.at,
        repair_path(p)
    )
}

/// The log ends before the anchored receipt `p`.
pub(super) fn cut_short(count: u64, p: u64, anchored: &str, a: &AnchorLine) -> String {
    let missing = span(count + 1, p);
    format!(
        "the log holds {}, but receipt {p} was anchored with the hash {anchored} in {} at {}: \
         {missing} {} missing (cut off), or this is another log; {}",
        receipts(count),
        a.file.display(),
        a.at,
        if count + 1 == p { "is" } else { "are" },
        repair_path(p)
    )
}

/// `receipt 4`, `receipts 1–4`.
pub fn span(from: u64, to: u64) -> String {
    if from == to {
        format!("receipt {from}")
    } else {
        format!("receipts {from}–{to}")
    }
}

/// A log's appends checked against its anchor file.
pub(super) struct Anchor {
    pub(super) file: PathBuf,
    /// The last receipt this log checked or wrote under an anchored head:
    /// while the log still ends there, its lines need no counting.
    pub(super) known: Mutex<Option<Placed>>,
}

/// The log's last receipt, its position, and the anchored head the log was
/// found to hold.
#[derive(Debug, Clone)]
pub(super) struct Placed {
    pub(super) anchored: Anchored,
    pub(super) count: u64,
    pub(super) hash: String,
}

impl Placed {
    /// The receipt appended after this one.
    pub(super) fn next(self, hash: &str) -> Placed {
        Placed {
            count: self.count + 1,
            hash: hash.to_string(),
            anchored: self.anchored,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The chain's start (`receipts::GENESIS`).
    const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    const H: &str = "5d07aa0000000000000000000000000000000000000000000000000000000001";

    /// A fresh directory, removed when dropped.
    struct Tmp(PathBuf);

    impl Tmp {
        fn new() -> Tmp {
            let dir = std::env::temp_dir().join(util::new_id("latchclaw-anchor"));
            std::fs::create_dir_all(&dir).unwrap();
            Tmp(dir)
        }

        fn file(&self, text: &[u8]) -> PathBuf {
            let path = self.0.join("anchor.log");
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_last_line_is_the_anchor() {
        let tmp = Tmp::new();
        let text = format!(
            "2026-11-22T23:51:04.147Z 4 {}\n2026-11-22T23:52:04.147Z 52 {H}\n",
            &H.replace('5', "6")
        );
        let a = read_anchor(&tmp.file(text.as_bytes())).unwrap().unwrap();
        assert_eq!(
            (a.at.as_str(), a.count, a.head.as_str()),
            ("2026-11-22T23:52:04.147Z", 52, H)
        );
        // Newlines after it, none at all, upper-case hex: the same head.
        for t in [
            format!("x 52 {H}\n\n\n"),
            format!("x 52 {H}"),
            format!("x 52 {}\n", H.to_uppercase()),
        ] {
            let a = read_anchor(&tmp.file(t.as_bytes())).unwrap().unwrap();
            assert_eq!((a.count, a.head.as_str()), (52, H), "{t}");
        }
        let path = tmp.file(format!("x 0 {GENESIS}\n").as_bytes());
        let a = read_anchor(&path).unwrap().unwrap();
        assert_eq!(a.count, 0);
        assert_eq!(Expect::anchored(&path, &a), None);
    }

    #[test]
    fn no_file_or_an_empty_one_is_no_anchor_yet() {
        let tmp = Tmp::new();
        assert_eq!(read_anchor(&tmp.0.join("none")).unwrap(), None);
        assert_eq!(read_anchor(&tmp.file(b"")).unwrap(), None);
        assert_eq!(read_anchor(&tmp.file(b"\n\n")).unwrap(), None);
        // A directory is not an anchor file: an error, not "none yet".
        let e = read_anchor(&tmp.0).unwrap_err();
        assert_eq!(e.kind, Kind::Runtime, "{e:?}");
    }

    #[test]
    fn a_last_line_latchclaw_did_not_write_is_refused_by_name() {
        let tmp = Tmp::new();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                format!("x 52 {}\n", &H[..40]).into(),
                "HASH is not 64 hex digits",
            ),
            (
                format!("x 5x {H}\n").into(),
                "N \"5x\" is not a receipt count",
            ),
            (
                format!("x -5 {H}\n").into(),
                "N \"-5\" is not a receipt count",
            ),
            (
                format!("x 99999999999999999999999 {H}\n").into(),
                "is not a receipt count",
            ),
            (
                format!("52 {H}\n").into(),
                "2 space-separated fields, not 3",
            ),
            (format!("x  52 {H}\n").into(), "4 space-separated fields"),
            (format!("x 0 {H}\n").into(), "only receipt 0"),
            (format!("x 3 {GENESIS}\n").into(), "only receipt 0"),
            (
                format!("x 1 {H}\n\0\0\0\0").into(),
                "1 space-separated fields",
            ),
            (b"\xff\xfe 1 2\n".to_vec(), "not UTF-8 text"),
            (
                format!("x 1 {H}\n{}", "y".repeat(5000)).into(),
                "longer than 4 KiB",
            ),
        ];
        for (text, why) in cases {
            let path = tmp.file(&text);
            let e = read_anchor(&path).unwrap_err();
            assert_eq!(e.kind, Kind::Integrity, "{e:?}");
            assert!(
                e.msg.contains(why)
                    && e.msg.contains(&path.display().to_string())
                    && e.msg.contains("`latchclaw receipt anchor --reset`"),
                "{why}: {}",
                e.msg
            );
        }
    }
}
