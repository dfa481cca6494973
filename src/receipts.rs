//! The tamper-evident receipt chain: one JSON line per attempted tool call,
//! each carrying the SHA-256 of the one before it.
//!
//! `receipt_hash = SHA256(canonical JSON of the receipt without receipt_hash)`,
//! where canonical JSON is compact with keys sorted (serde_json's default map
//! is a BTreeMap). Appends hold an exclusive lock on the log from reading the
//! last hash until the new line is on disk, so overlapping cron jobs keep one
//! valid chain.

use crate::error::{Error, IoContext, Kind, Result};
use crate::util;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

pub const STATUSES: &[&str] = &["allowed", "approved", "denied", "failed"];

/// Bytes of log verified per block (bounds memory, amortises thread start).
const VERIFY_BLOCK: usize = 8 << 20;

/// Fills `buf` as far as the file allows; 0 means end of file.
fn read_full(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

pub struct ReceiptLog {
    path: PathBuf,
}

/// What a caller knows about one attempted call.
pub struct NewReceipt<'a> {
    pub conversation_id: &'a str,
    pub tool: &'a str,
    pub args: &'a Value,
    pub result: &'a Value,
    pub status: &'a str,
    pub risk: &'a str,
    pub reason: &'a str,
}

#[derive(Debug, Clone)]
pub struct Written {
    pub id: String,
    pub receipt_hash: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verify {
    Ok {
        count: u64,
        head: String,
    },
    Broken {
        position: u64,
        count: u64,
        why: String,
    },
}

pub fn canonical_json(v: &Value) -> String {
    // serde_json without `preserve_order` keeps object keys sorted.
    v.to_string()
}

pub fn hash_value(v: &Value) -> String {
    util::sha256_hex(canonical_json(v).as_bytes())
}

impl ReceiptLog {
    pub fn new(path: &Path) -> ReceiptLog {
        ReceiptLog {
            path: path.to_path_buf(),
        }
    }

    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one receipt under an exclusive lock and flushes it to disk.
    pub fn append(&self, r: &NewReceipt) -> Result<Written> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).ctx(|| format!("cannot create {}", dir.display()))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&self.path)
            .ctx(|| format!("cannot open receipts log {}", self.path.display()))?;
        file.lock()
            .ctx(|| format!("cannot lock receipts log {}", self.path.display()))?;
        let result = self.append_locked(&mut file, r);
        let _ = file.unlock();
        result
    }

    fn append_locked(&self, file: &mut File, r: &NewReceipt) -> Result<Written> {
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        let previous_hash = self.last_hash(file, len)?;
        let id = util::new_id("receipt");
        let mut stored = Stored {
            args_hash: hash_value(r.args).into(),
            conversation_id: r.conversation_id.into(),
            id: id.as_str().into(),
            previous_hash: previous_hash.into(),
            reason: r.reason.into(),
            receipt_hash: None,
            result_hash: hash_value(r.result).into(),
            risk: r.risk.into(),
            status: r.status.into(),
            timestamp: util::now_rfc3339().into(),
            tool: r.tool.into(),
        };
        let receipt_hash = stored.hash();
        stored.receipt_hash = Some(receipt_hash.as_str().into());
        let mut line = serde_json::to_string(&stored)
            .map_err(|e| Error::new(Kind::Internal, format!("cannot encode a receipt: {e}")))?;
        line.push('\n');
        let written = file
            .write_all(line.as_bytes())
            .and_then(|_| file.sync_data());
        if let Err(e) = written {
            // Cut off whatever part of the line landed so no torn line stays.
            let _ = file.set_len(len);
            return Err(Error::runtime(format!(
                "cannot write receipt to {}: {e}",
                self.path.display()
            )));
        }
        log::info!(target: "event::receipt_written", "id={id} tool={} status={}", r.tool, r.status);
        Ok(Written { id, receipt_hash })
    }

    /// Fails when the next append would be refused (torn or altered tail),
    /// so a tool is not run only to find its receipt cannot be written.
    pub fn check_appendable(&self) -> Result<()> {
        let Some(file) = self.open_for_read()? else {
            return Ok(());
        };
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        self.last_hash(&file, len).map(|_| ())
    }

    /// Reads the hash of the last receipt, refusing to build on a torn or
    /// altered last line.
    fn last_hash(&self, file: &File, len: u64) -> Result<String> {
        if len == 0 {
            return Ok(GENESIS.to_string());
        }
        let mut chunk = 4096u64;
        loop {
            let start = len.saturating_sub(chunk);
            let mut buf = vec![0u8; (len - start) as usize];
            file.read_exact_at(&mut buf, start)
                .ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
            if buf.last() != Some(&b'\n') {
                return Err(Error::new(
                    Kind::Integrity,
                    format!(
                        "receipts log {} ends with a torn line (a crash mid-write?); \
                         no receipt is appended until it is repaired — see `latchclaw receipt verify`",
                        self.path.display()
                    ),
                ));
            }
            let body = &buf[..buf.len() - 1];
            match body.iter().rposition(|&b| b == b'\n') {
                Some(i) => return self.hash_of_line(&body[i + 1..]),
                None if start == 0 => return self.hash_of_line(body),
                None => chunk *= 4,
            }
        }
    }

    fn hash_of_line(&self, line: &[u8]) -> Result<String> {
        let mut l = line.to_vec();
        l.push(b'\n');
        check_self(&l).map(|(_, hash)| hash).map_err(|why| {
            Error::new(
                Kind::Integrity,
                format!(
                    "the last receipt in {} is damaged ({why}); no receipt is appended on top of it — \
                     see `latchclaw receipt verify`",
                    self.path.display()
                ),
            )
        })
    }

    /// Opens the log with a shared lock, so a reader never sees the half of
    /// a line another process is appending under its exclusive lock.
    fn open_for_read(&self) -> Result<Option<File>> {
        match File::open(&self.path) {
            Ok(f) => {
                f.lock_shared()
                    .ctx(|| format!("cannot lock receipts log {}", self.path.display()))?;
                Ok(Some(f))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::runtime(format!(
                "cannot read receipts log {}: {e}",
                self.path.display()
            ))),
        }
    }

    /// Replays the whole log in one streaming pass; memory stays flat.
    pub fn verify(&self) -> Result<Verify> {
        self.verify_in_blocks(VERIFY_BLOCK)
    }

    fn verify_in_blocks(&self, block: usize) -> Result<Verify> {
        let Some(mut file) = self.open_for_read()? else {
            return Ok(Verify::Ok {
                count: 0,
                head: GENESIS.into(),
            });
        };
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8);
        let mut prev = GENESIS.to_string();
        let mut position = 0u64;
        let mut first_break: Option<(u64, String)> = None;
        // The log is read in fixed-size blocks, so memory stays flat: each
        // block's whole lines are hashed on all cores, then linked in order.
        let mut buf: Vec<u8> = Vec::with_capacity(block);
        let mut eof = false;
        while !eof {
            let start = buf.len();
            buf.resize(block.max(start * 2), 0);
            let n = read_full(&mut file, &mut buf[start..])
                .ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
            buf.truncate(start + n);
            eof = n == 0;
            // Whole lines only, except at the end, where a torn line is judged.
            let end = match memchr::memrchr(b'\n', &buf) {
                Some(i) if !eof => i + 1,
                _ if eof => buf.len(),
                _ => continue,
            };
            if end == 0 {
                break;
            }
            let mut lines: Vec<&[u8]> = Vec::with_capacity(end / 256);
            let mut from = 0;
            for newline in memchr::memchr_iter(b'\n', &buf[..end]) {
                lines.push(&buf[from..=newline]);
                from = newline + 1;
            }
            if from < end {
                lines.push(&buf[from..end]);
            }
            let chunk = lines.len().div_ceil(workers).max(1);
            let results: Vec<_> = if first_break.is_some() {
                Vec::new()
            } else {
                std::thread::scope(|s| {
                    let handles: Vec<_> = lines
                        .chunks(chunk)
                        .map(|c| {
                            s.spawn(move || c.iter().map(|l| check_self(l)).collect::<Vec<_>>())
                        })
                        .collect();
                    handles
                        .into_iter()
                        .flat_map(|h| h.join().unwrap_or_default())
                        .collect()
                })
            };
            if first_break.is_some() {
                position += lines.len() as u64;
            }
            for r in results {
                position += 1;
                if first_break.is_some() {
                    continue;
                }
                match r.and_then(|(stated, hash)| link(&stated, &prev).map(|_| hash)) {
                    Ok(hash) => prev = hash,
                    Err(why) => first_break = Some((position, why)),
                }
            }
            buf.drain(..end);
        }
        Ok(match first_break {
            None => Verify::Ok {
                count: position,
                head: prev,
            },
            Some((p, why)) => Verify::Broken {
                position: p,
                count: position,
                why,
            },
        })
    }

    /// Every line, parsed where possible (`Err` holds the raw text).
    pub fn list(&self) -> Result<Vec<std::result::Result<Value, String>>> {
        let Some(file) = self.open_for_read()? else {
            return Ok(Vec::new());
        };
        let reader = BufReader::new(file);
        let mut out = Vec::new();
        for line in reader.split(b'\n') {
            let line = line.ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
            out.push(
                serde_json::from_slice::<Value>(&line)
                    .map_err(|_| String::from_utf8_lossy(&line).into_owned()),
            );
        }
        Ok(out)
    }
}

/// One receipt as stored. Fields are declared in sorted key order, so
/// serializing it gives canonical JSON (compact, keys sorted); the hash
/// covers that serialization with `receipt_hash` left out. Writing and
/// verifying both go through this one type.
#[derive(serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct Stored<'a> {
    #[serde(borrow)]
    args_hash: Cow<'a, str>,
    #[serde(borrow)]
    conversation_id: Cow<'a, str>,
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    previous_hash: Cow<'a, str>,
    #[serde(borrow)]
    reason: Cow<'a, str>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    receipt_hash: Option<Cow<'a, str>>,
    #[serde(borrow)]
    result_hash: Cow<'a, str>,
    #[serde(borrow)]
    risk: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    timestamp: Cow<'a, str>,
    #[serde(borrow)]
    tool: Cow<'a, str>,
}

impl Stored<'_> {
    /// SHA-256 of the canonical JSON. Called while `receipt_hash` is unset,
    /// so it is not covered.
    fn hash(&self) -> String {
        debug_assert!(self.receipt_hash.is_none());
        let mut buf = Vec::with_capacity(512);
        self.canonical_into(&mut buf);
        util::hex(&Sha256::digest(&buf))
    }

    /// The bytes serde_json writes for this receipt without `receipt_hash`
    /// (a test holds the two equal), built directly: verification spends
    /// most of its time here, and serde_json's escaping and many small
    /// writes cost twice as much as copying strings that need no escaping.
    fn canonical_into(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut first = true;
        for (key, value) in LINE_KEYS.iter().zip(self.values()) {
            let Some(value) = value else { continue };
            if !first {
                out.push(b',');
            }
            first = false;
            out.push(b'"');
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":");
            if value.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
                // Writing a string into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, value);
            } else {
                out.push(b'"');
                out.extend_from_slice(value.as_bytes());
                out.push(b'"');
            }
        }
        out.push(b'}');
    }

    /// The fields in `LINE_KEYS` order (`receipt_hash` may be unset).
    fn values(&self) -> [Option<&str>; 11] {
        [
            Some(&self.args_hash),
            Some(&self.conversation_id),
            Some(&self.id),
            Some(&self.previous_hash),
            Some(&self.reason),
            self.receipt_hash.as_deref(),
            Some(&self.result_hash),
            Some(&self.risk),
            Some(&self.status),
            Some(&self.timestamp),
            Some(&self.tool),
        ]
    }

    /// A receipt from its fields in `LINE_KEYS` order.
    fn from_values(values: [&str; 11]) -> Stored<'_> {
        let [
            args_hash,
            conversation_id,
            id,
            previous_hash,
            reason,
            receipt_hash,
            result_hash,
            risk,
            status,
            timestamp,
            tool,
        ] = values.map(Cow::Borrowed);
        Stored {
            args_hash,
            conversation_id,
            id,
            previous_hash,
            reason,
            receipt_hash: Some(receipt_hash),
            result_hash,
            risk,
            status,
            timestamp,
            tool,
        }
    }
}

fn link(stated_prev: &str, prev: &str) -> std::result::Result<(), String> {
    if stated_prev != prev {
        return Err(format!(
            "broken link: previous_hash {stated_prev} does not match the hash of the receipt before it ({prev})"
        ));
    }
    Ok(())
}

/// Keys in the order latchclaw writes them (sorted, as `Stored` declares
/// its fields): the one list the canonical writer and the fast-path parser
/// share.
const LINE_KEYS: [&str; 11] = [
    "args_hash",
    "conversation_id",
    "id",
    "previous_hash",
    "reason",
    "receipt_hash",
    "result_hash",
    "risk",
    "status",
    "timestamp",
    "tool",
];

/// The fast path of verification: a line exactly as latchclaw writes it
/// (keys in order, no whitespace, no escapes in any value) is its own
/// canonical JSON once the `receipt_hash` member is cut out, so the hash is
/// taken over the line's bytes with no parse-and-reserialize. Any other
/// line returns None and goes through serde_json and `Stored::hash`, which
/// give the same verdict the slow way.
fn parse_canonical(body: &[u8]) -> Option<(Stored<'_>, String)> {
    let text = std::str::from_utf8(body).ok()?;
    let mut values: [&str; 11] = [""; 11];
    let mut at = 1;
    let mut cut = (0, 0);
    if body.first() != Some(&b'{') {
        return None;
    }
    for (i, key) in LINE_KEYS.iter().enumerate() {
        let start = at;
        if i > 0 {
            at += usize::from(body.get(at) == Some(&b','));
            if at == start {
                return None;
            }
        }
        let rest = body.get(at..)?;
        let head = rest.strip_prefix(b"\"")?.strip_prefix(key.as_bytes())?;
        let value = head.strip_prefix(b"\":\"")?;
        let from = body.len() - value.len();
        let len = memchr::memchr(b'"', value)?;
        // No early exit, so the check vectorises; an escape or control
        // character sends the line down the slow path.
        if value[..len]
            .iter()
            .fold(false, |bad, &b| bad | (b == b'\\') | (b < 0x20))
        {
            return None;
        }
        values[i] = &text[from..from + len];
        at = from + len + 1;
        if *key == "receipt_hash" {
            cut = (start, at);
        }
    }
    if at + 1 != body.len() || body[at] != b'}' {
        return None;
    }
    let hash = Sha256::new()
        .chain_update(&body[..cut.0])
        .chain_update(&body[cut.1..])
        .finalize();
    Some((Stored::from_values(values), util::hex(&hash)))
}

/// Everything about a line that does not depend on the line before it:
/// returns its stated previous_hash and its own (verified) hash.
fn check_self(line: &[u8]) -> std::result::Result<(String, String), String> {
    let Some(body) = line.strip_suffix(b"\n") else {
        return Err("torn line: the last line has no newline (a crash mid-write?)".into());
    };
    let (mut r, canonical_hash) = match parse_canonical(body) {
        Some((r, hash)) => (r, Some(hash)),
        None => {
            let r: Stored = serde_json::from_slice(body).map_err(|e| {
                if e.is_data() {
                    format!("invalid receipt: {e}")
                } else {
                    format!("unparsable line: {e}")
                }
            })?;
            (r, None)
        }
    };
    if !STATUSES.contains(&r.status.as_ref()) {
        return Err(format!("unknown status \"{}\"", r.status));
    }
    let Some(stated) = r.receipt_hash.take() else {
        return Err("invalid receipt: missing field `receipt_hash`".into());
    };
    let actual = canonical_hash.unwrap_or_else(|| r.hash());
    if stated != actual {
        return Err(format!(
            "bad hash: receipt_hash {stated} does not match its contents ({actual}); the receipt was altered"
        ));
    }
    Ok((r.previous_hash.into_owned(), actual))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_bytes_are_serde_jsons_bytes() {
        // Every ASCII character (control characters, quotes, backslashes),
        // multi-byte UTF-8 and an empty string, in every field.
        let ascii: String = (0u8..128).map(char::from).collect();
        for text in [ascii.as_str(), "é ✓ 𝄞 \u{2028}", "", "plain"] {
            let mut r = Stored {
                args_hash: text.into(),
                conversation_id: text.into(),
                id: text.into(),
                previous_hash: text.into(),
                reason: text.into(),
                receipt_hash: None,
                result_hash: text.into(),
                risk: text.into(),
                status: text.into(),
                timestamp: text.into(),
                tool: text.into(),
            };
            let mut fast = Vec::new();
            r.canonical_into(&mut fast);
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                serde_json::to_string(&r).unwrap()
            );
            r.tool = "time".into();
            let mut fast = Vec::new();
            r.canonical_into(&mut fast);
            assert_eq!(fast, serde_json::to_vec(&r).unwrap());
        }
    }

    fn log_with(n: usize) -> (ReceiptLog, PathBuf) {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-rcpt"));
        let log = ReceiptLog::new(&dir.join("r.log"));
        for i in 0..n {
            log.append(&NewReceipt {
                conversation_id: "c",
                tool: "time",
                args: &json!({ "i": i }),
                result: &json!("ok"),
                status: "allowed",
                risk: "low",
                reason: "test",
            })
            .unwrap();
        }
        (log, dir)
    }

    fn lines(log: &ReceiptLog) -> Vec<String> {
        std::fs::read_to_string(log.path())
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }

    fn write_lines(log: &ReceiptLog, l: &[String], trailing_newline: bool) {
        let mut s = l.join("\n");
        if trailing_newline {
            s.push('\n');
        }
        std::fs::write(log.path(), s).unwrap();
    }

    fn broken_at(log: &ReceiptLog) -> (u64, String) {
        match log.verify().unwrap() {
            Verify::Broken { position, why, .. } => (position, why),
            ok => panic!("expected broken, got {ok:?}"),
        }
    }

    #[test]
    fn canonical_json_sorts_keys() {
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": {"d": 2, "c": 3}})),
            r#"{"a":{"c":3,"d":2},"b":1}"#
        );
    }

    #[test]
    fn chain_verifies_and_links() {
        let (log, dir) = log_with(3);
        let l = lines(&log);
        let v: Vec<Value> = l.iter().map(|s| serde_json::from_str(s).unwrap()).collect();
        assert_eq!(v[0]["previous_hash"], GENESIS);
        assert_eq!(v[1]["previous_hash"], v[0]["receipt_hash"]);
        assert!(v[0]["id"].as_str().unwrap().starts_with("receipt-"));
        // Lines are canonical JSON: what any reader re-serialising them gets.
        for (line, value) in l.iter().zip(&v) {
            assert_eq!(&canonical_json(value), line);
        }
        match log.verify().unwrap() {
            Verify::Ok { count, head } => assert_eq!(
                (count, head.as_str()),
                (3, v[2]["receipt_hash"].as_str().unwrap())
            ),
            b => panic!("{b:?}"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn fast_and_slow_verification_agree() {
        let (log, _dir) = log_with(2);
        log.append(&NewReceipt {
            conversation_id: "c",
            tool: "shell",
            args: &json!({}),
            result: &json!({}),
            status: "denied",
            risk: "high",
            reason: "a \"quoted\"\tword",
        })
        .unwrap();
        let orig = lines(&log);
        for (i, line) in orig.iter().enumerate() {
            let slow: Stored = serde_json::from_str(line).unwrap();
            let fast = parse_canonical(line.as_bytes());
            // The escaped reason takes the slow path; plain lines the fast one.
            assert_eq!(fast.is_some(), i < 2, "{line}");
            if let Some((r, hash)) = fast {
                assert_eq!(Some(hash), slow.receipt_hash.map(|h| h.into_owned()));
                assert_eq!((r.reason, r.timestamp), (slow.reason, slow.timestamp));
            }
        }
        // Whitespace or an edit leaves the fast path; a valid receipt still
        // verifies the slow way, an altered one still fails.
        let spaced = orig[1].replacen("\"risk\":", "\"risk\": ", 1);
        assert!(parse_canonical(spaced.as_bytes()).is_none());
        let mut edited = orig.clone();
        edited[1] = spaced.clone();
        write_lines(&log, &edited, true);
        assert!(matches!(log.verify().unwrap(), Verify::Ok { count: 3, .. }));
        edited[1] = spaced.replace("\"low\"", "\"high\"");
        write_lines(&log, &edited, true);
        assert_eq!(broken_at(&log).0, 2);
        for bad in [
            "",
            "{",
            "{}",
            "{\"args_hash\":\"x\"}",
            &orig[0][..orig[0].len() - 1],
        ] {
            assert!(parse_canonical(bad.as_bytes()).is_none(), "{bad}");
        }
    }

    #[test]
    fn tampering_is_located() {
        let (log, dir) = log_with(3);
        let orig = lines(&log);

        let mut edited = orig.clone();
        edited[1] = edited[1].replace("\"allowed\"", "\"approved\"");
        write_lines(&log, &edited, true);
        let (p, why) = broken_at(&log);
        assert_eq!(p, 2);
        assert!(why.starts_with("bad hash"), "{why}");

        write_lines(&log, &[orig[0].clone(), orig[2].clone()], true);
        let (p, why) = broken_at(&log);
        assert_eq!((p, why.starts_with("broken link")), (2, true), "{why}");

        write_lines(
            &log,
            &[orig[1].clone(), orig[0].clone(), orig[2].clone()],
            true,
        );
        assert_eq!(broken_at(&log).0, 1);

        let mut torn = orig.clone();
        torn[2].truncate(40);
        write_lines(&log, &torn, false);
        let (p, why) = broken_at(&log);
        assert_eq!((p, why.starts_with("torn")), (3, true), "{why}");
        // The next append refuses to build on the torn line.
        let err = log
            .append(&NewReceipt {
                conversation_id: "c",
                tool: "time",
                args: &json!({}),
                result: &json!(null),
                status: "allowed",
                risk: "low",
                reason: "",
            })
            .unwrap_err();
        assert!(err.msg.contains("torn"), "{err}");
        assert_eq!(lines(&log).len(), 3, "nothing appended");

        write_lines(
            &log,
            &[orig[0].clone(), "garbage".into(), orig[2].clone()],
            true,
        );
        let (p, why) = broken_at(&log);
        assert_eq!((p, why.starts_with("unparsable")), (2, true));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn verification_is_the_same_across_block_boundaries() {
        let (log, dir) = log_with(12);
        let whole = log.verify().unwrap();
        for block in [1, 100, 333, 1000, 4096] {
            assert_eq!(log.verify_in_blocks(block).unwrap(), whole, "block {block}");
        }
        let mut l = lines(&log);
        l[7] = l[7].replace("\"low\"", "\"high\"");
        write_lines(&log, &l, true);
        for block in [1, 100, 333, 4096] {
            match log.verify_in_blocks(block).unwrap() {
                Verify::Broken {
                    position, count, ..
                } => assert_eq!((position, count), (8, 12)),
                ok => panic!("{ok:?}"),
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn empty_or_missing_log_is_ok() {
        let log = ReceiptLog::new(Path::new("/nonexistent-latchclaw/r.log"));
        assert_eq!(
            log.verify().unwrap(),
            Verify::Ok {
                count: 0,
                head: GENESIS.into()
            }
        );
    }
}
