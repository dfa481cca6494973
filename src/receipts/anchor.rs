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

use super::{AnchorLine, Expect, GENESIS, ReceiptLog, check_self, span};
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
    if (count == 0) != (head == GENESIS) {
        return Err("only receipt 0 has the hash of 64 zeros".into());
    }
    Ok(Anchored {
        at: at.to_string(),
        count,
        head,
    })
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
fn repair_path(n: u64) -> String {
    format!(
        "keep this log as evidence and restore the one holding receipt {n} from a backup \
         (`latchclaw receipt verify` checks it against the anchor); or, to accept the loss and \
         go on with this log, `latchclaw receipt anchor --reset` records its head as the new \
         anchor"
    )
}

/// `1 receipt`, `2 receipts`.
fn receipts(n: u64) -> String {
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

/// A log's appends checked against its anchor file.
pub(super) struct Anchor {
    file: PathBuf,
    /// The last receipt this log checked or wrote under an anchored head:
    /// while the log still ends there, its lines need no counting.
    known: Mutex<Option<Placed>>,
}

/// The log's last receipt, its position, and the anchored head the log was
/// found to hold.
#[derive(Debug, Clone)]
pub(super) struct Placed {
    anchored: Anchored,
    count: u64,
    hash: String,
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

impl ReceiptLog {
    /// Appends refuse a log that no longer holds the last head anchored in
    /// `file` (`receipts.anchor_file`), if one is given.
    pub fn anchored(mut self, file: Option<&Path>) -> ReceiptLog {
        self.anchor = file.map(|f| Anchor {
            file: f.to_path_buf(),
            known: Mutex::new(None),
        });
        self
    }

    /// What the anchor asks of the chain, for a whole verify.
    pub(super) fn anchor_expect(&self) -> Result<Vec<Expect>> {
        let Some(anchor) = &self.anchor else {
            return Ok(Vec::new());
        };
        Ok(read_anchor(&anchor.file)?
            .and_then(|a| Expect::anchored(&anchor.file, &a))
            .into_iter()
            .collect())
    }

    /// Before an append (under the log's lock, `len` its length and `tail`
    /// its last receipt's hash): the log must still hold the anchored
    /// head. Returns where the last receipt stands, when an anchor says.
    pub(super) fn check_anchor(
        &self,
        file: Option<&File>,
        len: u64,
        tail: &str,
    ) -> Result<Option<Placed>> {
        let Some(anchor) = &self.anchor else {
            return Ok(None);
        };
        let Some(anchored) = read_anchor(&anchor.file)? else {
            return Ok(None);
        };
        let placed = |count| Placed {
            anchored: anchored.clone(),
            count,
            hash: tail.to_string(),
        };
        if tail == anchored.head {
            return Ok(Some(placed(anchored.count)));
        }
        if let Some(k) = anchor.known.lock().ok().and_then(|k| k.clone())
            && k.anchored == anchored
            && k.hash == tail
        {
            return Ok(Some(k));
        }
        let (count, line) = match file {
            Some(f) => self.count_to(f, len, anchored.count)?,
            None => (0, None),
        };
        let n = anchored.count;
        let why = match line {
            _ if n == 0 => return Ok(Some(placed(count))),
            None => format!(
                "holds {}, but the anchor file {} records receipt {n} with the hash {} \
                 (anchored {}): {} {} cut off, or this is another log",
                receipts(count),
                anchor.file.display(),
                anchored.head,
                anchored.at,
                span(count + 1, n),
                if count + 1 == n { "was" } else { "were" },
            ),
            Some(line) => {
                let found = match check_self(&line, None) {
                    Ok(c) if c.hash == anchored.head => return Ok(Some(placed(count))),
                    Ok(c) => format!("has the hash {}", c.hash),
                    Err(why) => format!("is damaged ({why})"),
                };
                format!(
                    "has receipt {n}, but it {found}, not {} as the anchor file {} records \
                     (anchored {}): the log was rewritten at or before receipt {n}",
                    anchored.head,
                    anchor.file.display(),
                    anchored.at
                )
            }
        };
        Err(Error::new(
            Kind::Integrity,
            format!(
                "the receipts log {} {why}; no receipt is appended: {}",
                self.path.display(),
                repair_path(n)
            ),
        ))
    }

    /// Keeps where the log's last receipt stands for the next append.
    pub(super) fn remember(&self, placed: Option<Placed>) {
        if let Some(anchor) = &self.anchor
            && let Ok(mut known) = anchor.known.lock()
        {
            *known = placed;
        }
    }

    /// `N HASH` to anchor after a run: the last receipt this log wrote
    /// when its position is known from the anchor (no counting), else the
    /// log's head (`head`).
    pub fn head_to_anchor(&self) -> Result<(u64, String)> {
        let known = self
            .anchor
            .as_ref()
            .and_then(|a| a.known.lock().ok().and_then(|k| k.clone()));
        match known {
            Some(k) => Ok((k.count, k.hash)),
            None => self.head(),
        }
    }

    /// The receipts (newlines) in the first `len` bytes, and receipt `n`'s
    /// line with its newline when the log holds it (`n` 0: none): one pass
    /// at memchr's speed, nothing hashed.
    pub(super) fn count_to(&self, file: &File, len: u64, n: u64) -> Result<(u64, Option<Vec<u8>>)> {
        let read_err = || format!("cannot read receipts log {}", self.path.display());
        let mut buf = vec![0u8; 1 << 20];
        let (mut at, mut count) = (0u64, 0u64);
        let (mut start, mut end) = (0u64, None);
        while at < len {
            let want = buf.len().min((len - at) as usize);
            file.read_exact_at(&mut buf[..want], at).ctx(read_err)?;
            for i in memchr::memchr_iter(b'\n', &buf[..want]) {
                count += 1;
                if count + 1 == n {
                    start = at + i as u64 + 1;
                } else if count == n {
                    end = Some(at + i as u64 + 1);
                }
            }
            at += want as u64;
        }
        let Some(end) = end else {
            return Ok((count, None));
        };
        let mut line = vec![0u8; (end - start) as usize];
        file.read_exact_at(&mut line, start).ctx(read_err)?;
        Ok((count, Some(line)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::receipts::{NewReceipt, Status};
    use crate::security::Risk;

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

    #[test]
    fn count_to_finds_receipt_n_across_blocks() {
        let tmp = Tmp::new();
        let path = tmp.0.join("r.log");
        // Lines of 1000 bytes: some cross the 1 MiB read blocks.
        let lines: Vec<String> = (0..2500).map(|i| format!("{i:0>999}\n")).collect();
        std::fs::write(&path, lines.concat()).unwrap();
        let log = ReceiptLog::new(&path);
        let f = File::open(&path).unwrap();
        let len = f.metadata().unwrap().len();
        for n in [1, 2, 1048, 1049, 2500] {
            let (count, line) = log.count_to(&f, len, n).unwrap();
            assert_eq!(count, 2500);
            assert_eq!(line.unwrap(), lines[n as usize - 1].as_bytes(), "{n}");
        }
        assert_eq!(log.count_to(&f, len, 2501).unwrap(), (2500, None));
        assert_eq!(log.count_to(&f, len, 0).unwrap(), (2500, None));
        assert_eq!(log.count_to(&f, 0, 1).unwrap(), (0, None));
    }

    fn append(log: &ReceiptLog) -> Result<String> {
        log.append(&NewReceipt {
            conversation_id: "c",
            tool: "time",
            args: &serde_json::json!({}),
            result: Some(&serde_json::json!("ok")),
            status: Status::Allowed,
            risk: Risk::Low,
            reason: "test",
            started_id: None,
        })
        .map(|w| w.receipt_hash)
    }

    #[test]
    fn appends_go_on_from_the_anchor_and_refuse_a_log_cut_short_of_it() {
        let tmp = Tmp::new();
        let path = tmp.0.join("r.log");
        let file = tmp.0.join("anchor.log");
        let log = ReceiptLog::new(&path).anchored(Some(&file));
        // No anchor yet: nothing to hold; the head is counted.
        let heads: Vec<String> = (0..5).map(|_| append(&log).unwrap()).collect();
        assert_eq!(log.head_to_anchor().unwrap(), (5, heads[4].clone()));
        // Anchored behind the head (another run's anchor, a failed write):
        // counted once, then known.
        append_anchor(&file, 3, &heads[2]).unwrap();
        let fresh = ReceiptLog::new(&path).anchored(Some(&file));
        fresh.check_appendable().unwrap();
        let h6 = append(&fresh).unwrap();
        assert_eq!(fresh.head_to_anchor().unwrap(), (6, h6.clone()));
        append_anchor(&file, 6, &h6).unwrap();
        let bytes = std::fs::read(&path).unwrap();

        // Cut by its last two receipts: every append refuses, nothing written.
        let cut: usize = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(3)
            .unwrap()
            .0
            + 1;
        std::fs::write(&path, &bytes[..cut]).unwrap();
        for l in [&fresh, &ReceiptLog::new(&path).anchored(Some(&file))] {
            let e = append(l).unwrap_err();
            assert_eq!(e.kind, Kind::Integrity);
            assert!(
                e.msg.contains("holds 4 receipts, but the anchor file")
                    && e.msg.contains("receipts 5–6 were cut off")
                    && e.msg.contains("restore the one holding receipt 6"),
                "{}",
                e.msg
            );
            assert_eq!(l.check_appendable().unwrap_err().msg, e.msg);
        }
        assert_eq!(std::fs::read(&path).unwrap(), &bytes[..cut]);
        // Grown back to 7 with another receipt 6: rewritten.
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let plain = ReceiptLog::new(&path);
        for _ in 0..3 {
            append(&plain).unwrap();
        }
        let e = append(&fresh).unwrap_err();
        assert!(
            e.msg.contains("has receipt 6, but it has the hash")
                && e.msg.contains(&format!("not {h6} as the anchor file")),
            "{}",
            e.msg
        );
        // The log as it was: appends go on.
        std::fs::write(&path, &bytes).unwrap();
        append(&fresh).unwrap();
        // No anchor file: nothing to hold.
        let elsewhere = ReceiptLog::new(&path).anchored(Some(&tmp.0.join("none")));
        append(&elsewhere).unwrap();
    }
}
