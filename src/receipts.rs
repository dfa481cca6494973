//! The tamper-evident receipt chain: one JSON line per step of a tool call,
//! each carrying the SHA-256 of the one before it.
//!
//! A call that runs leaves two receipts: `started`, on disk before the tool
//! can take effect, and its outcome (`allowed`, `approved` or `failed`),
//! whose `started_id` names the started receipt. So a call cut off by a
//! kill, a crash or a power cut still has a receipt; `verify` reports such a
//! call as unfinished without calling the chain broken. A call that never
//! runs (`denied`) leaves one receipt. Logs written before `started` existed
//! (outcomes with no `started_id`) still verify. `repair` cuts off a torn
//! last line (a crash mid-append) and records that it did with a
//! `repaired` receipt; it refuses any other damage.
//!
//! `receipt_hash = SHA256(canonical JSON of the receipt without receipt_hash)`,
//! where canonical JSON is compact with keys sorted (serde_json's default map
//! is a BTreeMap) and absent fields are left out. Appends hold an exclusive
//! lock on the log from reading the last hash until the new line is on disk,
//! so overlapping cron jobs keep one valid chain.

use crate::error::{Error, IoContext, Kind, Result};
use crate::security::Risk;
use crate::util;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A receipt's status: how far one call got, or a repair of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Written before a call that can take effect runs.
    Started,
    /// Ran without asking (allowed by policy).
    Allowed,
    /// Ran after the operator approved it.
    Approved,
    /// Did not run: refused by policy or the operator, or waiting for
    /// approval.
    Denied,
    /// Ran, or was to run, and failed.
    Failed,
    /// `receipt repair` cut a torn last line.
    Repaired,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Started,
        Status::Allowed,
        Status::Approved,
        Status::Denied,
        Status::Failed,
        Status::Repaired,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Started => "started",
            Status::Allowed => "allowed",
            Status::Approved => "approved",
            Status::Denied => "denied",
            Status::Failed => "failed",
            Status::Repaired => "repaired",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl serde::Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Bytes of log verified per block (bounds memory, amortises thread start).
const VERIFY_BLOCK: usize = 8 << 20;

/// Fills `buf` as far as the file allows; 0 means end of file.
fn read_full(file: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
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

/// What a caller knows about one step of a call.
pub struct NewReceipt<'a> {
    pub conversation_id: &'a str,
    pub tool: &'a str,
    pub args: &'a Value,
    /// None exactly for `started`: the tool has not run yet.
    pub result: Option<&'a Value>,
    pub status: Status,
    pub risk: Risk,
    pub reason: &'a str,
    /// An outcome's started receipt; None for `started` and `denied`.
    pub started_id: Option<&'a str>,
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
        /// Started receipts no outcome refers to, in log order.
        unfinished: Vec<Unfinished>,
    },
    Broken {
        position: u64,
        count: u64,
        why: String,
    },
}

/// A call whose started receipt has no outcome: latchclaw was cut off
/// (killed, crashed, power lost, `--timeout`'s hard stop) while it ran, so
/// whether and how far it took effect is unknown.
#[derive(Debug, Clone, PartialEq)]
pub struct Unfinished {
    /// 1-based line of the started receipt.
    pub position: u64,
    pub id: String,
    pub tool: String,
    pub conversation_id: String,
    pub timestamp: String,
}

pub fn canonical_json(v: &Value) -> String {
    // serde_json without `preserve_order` keeps object keys sorted.
    v.to_string()
}

pub fn hash_value(v: &Value) -> String {
    util::sha256_hex(canonical_json(v).as_bytes())
}

/// Which optional fields a status requires or forbids: the one rule the
/// writer and the verifier both apply.
fn check_shape(status: Status, result: bool, started_id: bool) -> std::result::Result<(), String> {
    match status {
        Status::Started if result => Err(
            "invalid receipt: a started receipt has no result_hash (the tool has not run)".into(),
        ),
        Status::Repaired if result => {
            Err("invalid receipt: a repaired receipt has no result_hash (no tool ran)".into())
        }
        Status::Started | Status::Denied | Status::Repaired if started_id => Err(format!(
            "invalid receipt: a {} receipt has no started_id (only an outcome refers to its start)",
            status.as_str()
        )),
        Status::Started | Status::Repaired => Ok(()),
        _ if !result => Err("invalid receipt: missing field `result_hash`".into()),
        _ => Ok(()),
    }
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

    /// Refuses (as `append` would) a log whose last line is torn or altered,
    /// without writing: a tool with no effect of its own runs only if its
    /// receipt can be written afterwards.
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

    /// Appends one receipt under an exclusive lock and flushes it to disk.
    pub fn append(&self, r: &NewReceipt) -> Result<Written> {
        check_shape(r.status, r.result.is_some(), r.started_id.is_some()).map_err(|why| {
            Error::new(
                Kind::Internal,
                format!("refusing to write a receipt: {why}"),
            )
        })?;
        if let Some(dir) = self.path.parent() {
            crate::util::private_dir(dir)?;
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
            result_hash: r.result.map(|v| hash_value(v).into()),
            risk: r.risk.as_str().into(),
            started_id: r.started_id.map(Cow::Borrowed),
            status: r.status.as_str().into(),
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
        log::info!(target: "event::receipt_written", "id={id} tool={} status={}", r.tool, r.status.as_str());
        Ok(Written { id, receipt_hash })
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
                         no receipt is appended until it is repaired: `latchclaw receipt repair` \
                         drops it, keeping a backup of the log",
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
        check_self(&l).map(|c| c.hash).map_err(|why| {
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
                unfinished: Vec::new(),
            });
        };
        self.verify_from(&mut file, block)
    }

    /// Verifies the log as `file` reads it (the whole log, or the part of
    /// it before a torn last line).
    fn verify_from(&self, file: &mut impl std::io::Read, block: usize) -> Result<Verify> {
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8);
        let mut prev = GENESIS.to_string();
        let mut position = 0u64;
        let mut first_break: Option<(u64, String)> = None;
        let mut calls = OpenCalls::default();
        // The log is read in fixed-size blocks, so memory stays flat: each
        // block's whole lines are hashed on all cores, then linked in order.
        let mut buf: Vec<u8> = Vec::with_capacity(block);
        let mut eof = false;
        while !eof {
            let start = buf.len();
            buf.resize(block.max(start * 2), 0);
            let n = read_full(file, &mut buf[start..])
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
                let linked = r.and_then(|c| {
                    link(&c.previous_hash, &prev)?;
                    calls.track(position, c.step)?;
                    Ok(c.hash)
                });
                match linked {
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
                unfinished: calls.unfinished(),
            },
            Some((p, why)) => Verify::Broken {
                position: p,
                count: position,
                why,
            },
        })
    }

    /// Ends the exit-7 loop a crash mid-append leaves: under the append
    /// lock, when everything before the last newline verifies and what
    /// follows it is a torn line (the start of a receipt, possibly padded
    /// with NUL bytes), copies the whole log to a new backup beside it
    /// (`NAME.bak-YYYYMMDDTHHMMSSZ`, 0600, never overwriting one), cuts the
    /// torn line off, and appends a `repaired` receipt recording the bytes
    /// dropped (length and SHA-256) and the backup, so the chain says a
    /// repair happened. A last line that is a whole, valid, linked receipt
    /// missing only its newline gets the newline (nothing dropped). Any
    /// other damage is refused and nothing is written: a repair never
    /// rewrites or removes a receipt.
    pub fn repair(&self) -> Result<Repair> {
        let mut file = match OpenOptions::new().read(true).append(true).open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Ok(Repair::Intact {
                    count: 0,
                    head: GENESIS.into(),
                });
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "cannot open receipts log {}: {e}",
                    self.path.display()
                )));
            }
        };
        file.lock()
            .ctx(|| format!("cannot lock receipts log {}", self.path.display()))?;
        let result = self.repair_locked(&mut file);
        let _ = file.unlock();
        result
    }

    fn repair_locked(&self, file: &mut File) -> Result<Repair> {
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        let cut = self.after_last_newline(file, len)?;
        let mut whole = std::io::Read::take(self.rewound(file)?, cut);
        let (count, head, unfinished) = match self.verify_from(&mut whole, VERIFY_BLOCK)? {
            Verify::Ok {
                count,
                head,
                unfinished,
            } => (count, head, unfinished),
            Verify::Broken {
                position,
                count,
                why,
            } => {
                let torn_after = u64::from(cut < len);
                return Ok(Repair::Refused {
                    position,
                    count: count + torn_after,
                    why,
                });
            }
        };
        if cut == len {
            return Ok(Repair::Intact { count, head });
        }
        let mut tail = vec![0u8; (len - cut) as usize];
        file.read_exact_at(&mut tail, cut)
            .ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
        let whole_line = match judge_tail(&tail, &head, &unfinished) {
            Ok(whole) => whole,
            Err(why) => {
                return Ok(Repair::Refused {
                    position: count + 1,
                    count: count + 1,
                    why,
                });
            }
        };
        let backup = self.backup(file, len)?;
        let dropped = if whole_line { 0 } else { tail.len() as u64 };
        let dropped_sha256 = util::sha256_hex(&tail[..dropped as usize]);
        let changed = if whole_line {
            file.write_all(b"\n").and_then(|_| file.sync_all())
        } else {
            file.set_len(cut).and_then(|_| file.sync_all())
        };
        changed.ctx(|| format!("cannot repair receipts log {}", self.path.display()))?;
        let kept = count + u64::from(whole_line);
        let what = if whole_line {
            format!(
                "receipt repair: receipt {kept} was whole but lacked its newline; the newline \
                 was added, nothing dropped"
            )
        } else {
            format!(
                "receipt repair: dropped a torn last line after receipt {kept}: {dropped} bytes, \
                 sha256 {dropped_sha256}"
            )
        };
        let reason = format!("{what}; the log before the repair is {}", backup.display());
        let args = serde_json::json!({"backup": backup.display().to_string(),
                                      "dropped_bytes": dropped, "dropped_sha256": dropped_sha256});
        let written = self.append_locked(
            file,
            &NewReceipt {
                conversation_id: "cli-receipt-repair",
                tool: "receipt repair",
                args: &args,
                result: None,
                status: Status::Repaired,
                risk: Risk::High,
                reason: &reason,
                started_id: None,
            },
        )?;
        sync_dir(&self.path);
        Ok(Repair::Repaired {
            count: kept + 1,
            kept,
            dropped,
            dropped_sha256,
            added_newline: whole_line,
            backup,
            receipt_id: written.id,
            head: written.receipt_hash,
        })
    }

    /// The file, read from its start.
    fn rewound<'f>(&self, file: &'f File) -> Result<&'f File> {
        let mut f = file;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0))
            .ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
        Ok(file)
    }

    /// Where the log's last line without a newline starts (`len` when the
    /// log ends with one).
    fn after_last_newline(&self, file: &File, len: u64) -> Result<u64> {
        let mut end = len;
        while end > 0 {
            let start = end.saturating_sub(64 << 10);
            let mut buf = vec![0u8; (end - start) as usize];
            file.read_exact_at(&mut buf, start)
                .ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
            if let Some(i) = memchr::memrchr(b'\n', &buf) {
                return Ok(start + i as u64 + 1);
            }
            end = start;
        }
        Ok(0)
    }

    /// Copies the first `len` bytes of the log to a backup beside it that
    /// did not exist before, on disk before anything is changed.
    fn backup(&self, file: &File, len: u64) -> Result<PathBuf> {
        let now = util::now_rfc3339();
        let stamp: String = now[..19]
            .chars()
            .filter(|c| *c != '-' && *c != ':')
            .collect();
        let name = self.path.file_name().map_or_else(
            || "receipts.log".into(),
            |n| n.to_string_lossy().into_owned(),
        );
        for n in 1..1000 {
            let suffix = if n == 1 {
                String::new()
            } else {
                format!("-{n}")
            };
            let path = self
                .path
                .with_file_name(format!("{name}.bak-{stamp}Z{suffix}"));
            let mut out = match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(Error::runtime(format!(
                        "cannot create the backup {}: {e}; nothing was changed",
                        path.display()
                    )));
                }
            };
            let copied = self
                .rewound(file)
                .map_err(|e| std::io::Error::other(e.msg))
                .and_then(|f| std::io::copy(&mut std::io::Read::take(f, len), &mut out))
                .and_then(|n| {
                    if n == len {
                        Ok(())
                    } else {
                        Err(std::io::Error::other(format!("copied {n} of {len} bytes")))
                    }
                })
                .and_then(|_| out.sync_all());
            if let Err(e) = copied {
                let _ = std::fs::remove_file(&path);
                return Err(Error::runtime(format!(
                    "cannot write the backup {}: {e}; nothing was changed",
                    path.display()
                )));
            }
            sync_dir(&path);
            return Ok(path);
        }
        Err(Error::runtime(format!(
            "cannot find a free backup name for {}; nothing was changed",
            self.path.display()
        )))
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

/// What `ReceiptLog::repair` did.
#[derive(Debug, Clone, PartialEq)]
pub enum Repair {
    /// The chain verifies: nothing was changed, no backup made.
    Intact { count: u64, head: String },
    Repaired {
        /// Receipts now, the `repaired` one included.
        count: u64,
        /// Receipts kept from before the repair.
        kept: u64,
        dropped: u64,
        dropped_sha256: String,
        /// The last line was a whole receipt missing only its newline.
        added_newline: bool,
        backup: PathBuf,
        receipt_id: String,
        head: String,
    },
    /// Damage a repair does not touch; the log is unchanged.
    Refused {
        position: u64,
        count: u64,
        why: String,
    },
}

/// Judges what follows the log's last newline, after a chain that verifies
/// up to `head`: Ok(false) for a torn line (the start of a receipt cut off
/// mid-write, possibly followed by NUL bytes a crash can leave), Ok(true)
/// for a whole receipt that verifies and links but lacks its newline, Err
/// for anything else.
fn judge_tail(
    tail: &[u8],
    head: &str,
    unfinished: &[Unfinished],
) -> std::result::Result<bool, String> {
    let text = tail.strip_suffix(&[0][..]).map_or(tail, |_| {
        let keep = tail.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &tail[..keep]
    });
    const START: &[u8] = b"{\"args_hash\":\"";
    let starts_like_a_receipt = text.starts_with(START) || START.starts_with(text);
    match serde_json::from_slice::<Value>(text) {
        Err(e) if e.classify() == serde_json::error::Category::Eof && starts_like_a_receipt => {
            return Ok(false);
        }
        Err(e) => {
            return Err(format!(
                "the last line has no newline and is not the start of a receipt ({e}); \
                 it was not written by latchclaw as it is"
            ));
        }
        Ok(_) if text.len() < tail.len() => {
            return Err(
                "the last line is a whole receipt followed by NUL bytes; it was not written \
                 by latchclaw as it is"
                    .into(),
            );
        }
        Ok(_) => {}
    }
    let mut line = tail.to_vec();
    line.push(b'\n');
    let checked = check_self(&line)
        .and_then(|c| {
            link(&c.previous_hash, head)?;
            match &c.step {
                Step::Outcome(id) if !unfinished.iter().any(|u| u.id == *id) => Err(format!(
                    "outcome without a start: started_id {id} names no earlier started receipt \
                     still waiting for its outcome"
                )),
                Step::Started(call) if unfinished.iter().any(|u| u.id == call.id) => Err(format!(
                    "invalid receipt: a second started receipt with id {}",
                    call.id
                )),
                _ => Ok(()),
            }
        })
        .map_err(|why| format!("the last line is a whole receipt but does not verify: {why}"));
    checked.map(|()| true)
}

/// Flushes a directory entry (a new backup, a log cut short) to disk; best
/// effort, as the file itself is already synced.
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
}

/// Started receipts still waiting for their outcome, by id.
#[derive(Default)]
struct OpenCalls(HashMap<String, Box<Unfinished>>);

impl OpenCalls {
    /// Pairs outcomes with their starts, in log order. An outcome naming no
    /// open start is a break: latchclaw never writes one.
    fn track(&mut self, position: u64, step: Step) -> std::result::Result<(), String> {
        match step {
            Step::Single => Ok(()),
            Step::Started(mut call) => {
                call.position = position;
                let id = std::mem::take(&mut call.id);
                match self.0.entry(id) {
                    std::collections::hash_map::Entry::Occupied(e) => Err(format!(
                        "invalid receipt: a second started receipt with id {} (the first is receipt {})",
                        e.key(),
                        e.get().position
                    )),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(call);
                        Ok(())
                    }
                }
            }
            Step::Outcome(id) => match self.0.remove(id.as_ref()) {
                Some(_) => Ok(()),
                None => Err(format!(
                    "outcome without a start: started_id {id} names no earlier started receipt \
                     still waiting for its outcome"
                )),
            },
        }
    }

    fn unfinished(self) -> Vec<Unfinished> {
        let mut left: Vec<Unfinished> = self
            .0
            .into_iter()
            .map(|(id, call)| Unfinished { id, ..*call })
            .collect();
        left.sort_by_key(|c| c.position);
        left
    }
}

/// One receipt as stored. Fields are declared in sorted key order, so
/// serializing it gives canonical JSON (compact, keys sorted, absent fields
/// left out); the hash covers that serialization with `receipt_hash` left
/// out. Writing and verifying both go through this one type.
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
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    receipt_hash: Option<Cow<'a, str>>,
    /// Absent on `started` (no result yet).
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    result_hash: Option<Cow<'a, str>>,
    #[serde(borrow)]
    risk: Cow<'a, str>,
    /// On an outcome: the id of its `started` receipt.
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    started_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    timestamp: Cow<'a, str>,
    #[serde(borrow)]
    tool: Cow<'a, str>,
}

/// An optional field is absent or a string; `null` is not a way to leave it
/// out (it would be a second spelling of the same hashed receipt).
fn present<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Cow<'a, str>>, D::Error> {
    #[derive(serde::Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    <Text as serde::Deserialize>::deserialize(d).map(|t| Some(t.0))
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

    /// The fields in `LINE_KEYS` order (None: absent).
    fn values(&self) -> [Option<&str>; KEYS] {
        [
            Some(&self.args_hash),
            Some(&self.conversation_id),
            Some(&self.id),
            Some(&self.previous_hash),
            Some(&self.reason),
            self.receipt_hash.as_deref(),
            self.result_hash.as_deref(),
            Some(&self.risk),
            self.started_id.as_deref(),
            Some(&self.status),
            Some(&self.timestamp),
            Some(&self.tool),
        ]
    }

    /// A receipt from its fields in `LINE_KEYS` order; None when a field
    /// every receipt has is missing.
    fn from_values(values: [Option<&str>; KEYS]) -> Option<Stored<'_>> {
        let [
            args_hash,
            conversation_id,
            id,
            previous_hash,
            reason,
            receipt_hash,
            result_hash,
            risk,
            started_id,
            status,
            timestamp,
            tool,
        ] = values.map(|v| v.map(Cow::Borrowed));
        Some(Stored {
            args_hash: args_hash?,
            conversation_id: conversation_id?,
            id: id?,
            previous_hash: previous_hash?,
            reason: reason?,
            receipt_hash,
            result_hash,
            risk: risk?,
            started_id,
            status: status?,
            timestamp: timestamp?,
            tool: tool?,
        })
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

const KEYS: usize = 12;

/// Keys in the order latchclaw writes them (sorted, as `Stored` declares
/// its fields): the one list the canonical writer and the fast-path parser
/// share.
const LINE_KEYS: [&str; KEYS] = [
    "args_hash",
    "conversation_id",
    "id",
    "previous_hash",
    "reason",
    "receipt_hash",
    "result_hash",
    "risk",
    "started_id",
    "status",
    "timestamp",
    "tool",
];

/// Keys a stored line may leave out (which ones a status needs is
/// `check_shape`'s business).
const OPTIONAL_KEYS: [&str; 2] = ["result_hash", "started_id"];

/// The fast path of verification: a line exactly as latchclaw writes it
/// (keys in order, no whitespace, no escapes in any value) is its own
/// canonical JSON once the `receipt_hash` member is cut out, so the hash is
/// taken over the line's bytes with no parse-and-reserialize. Any other
/// line returns None and goes through serde_json and `Stored::hash`, which
/// give the same verdict the slow way.
fn parse_canonical(body: &[u8]) -> Option<(Stored<'_>, String)> {
    let text = std::str::from_utf8(body).ok()?;
    let mut values: [Option<&str>; KEYS] = [None; KEYS];
    let mut at = 1;
    let mut cut = None;
    if body.first() != Some(&b'{') {
        return None;
    }
    for (i, key) in LINE_KEYS.iter().enumerate() {
        let start = at;
        // Every member but the first follows a comma.
        let sep = usize::from(i > 0);
        let member = body
            .get(at + sep..)
            .and_then(|rest| rest.strip_prefix(b"\""))
            .and_then(|rest| rest.strip_prefix(key.as_bytes()))
            .and_then(|rest| rest.strip_prefix(b"\":\""));
        let value = match member {
            Some(value) if sep == 0 || body[at] == b',' => value,
            _ if OPTIONAL_KEYS.contains(key) => continue,
            _ => return None,
        };
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
        values[i] = Some(&text[from..from + len]);
        at = from + len + 1;
        if *key == "receipt_hash" {
            cut = Some((start, at));
        }
    }
    let (cut_from, cut_to) = cut?;
    if at + 1 != body.len() || body[at] != b'}' {
        return None;
    }
    let hash = Sha256::new()
        .chain_update(&body[..cut_from])
        .chain_update(&body[cut_to..])
        .finalize();
    Some((Stored::from_values(values)?, util::hex(&hash)))
}

/// What a line is in its call.
#[derive(Debug)]
enum Step<'a> {
    /// A denial, or an outcome written before `started` existed.
    Single,
    Started(Box<Unfinished>),
    /// The started receipt's id.
    Outcome(Cow<'a, str>),
}

/// Everything `check_self` learns from a line alone.
#[derive(Debug)]
struct Checked<'a> {
    previous_hash: Cow<'a, str>,
    /// The line's own (verified) hash.
    hash: String,
    step: Step<'a>,
}

/// Everything about a line that does not depend on the lines before it.
fn check_self(line: &[u8]) -> std::result::Result<Checked<'_>, String> {
    let Some(body) = line.strip_suffix(b"\n") else {
        return Err(
            "torn line: the last line has no newline (a crash mid-write?); \
                    `latchclaw receipt repair` drops it, keeping a backup of the log"
                .into(),
        );
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
    let Some(status) = Status::parse(&r.status) else {
        return Err(format!("unknown status \"{}\"", r.status));
    };
    let Some(stated) = r.receipt_hash.take() else {
        return Err("invalid receipt: missing field `receipt_hash`".into());
    };
    let hash = canonical_hash.unwrap_or_else(|| r.hash());
    if stated != hash {
        return Err(format!(
            "bad hash: receipt_hash {stated} does not match its contents ({hash}); the receipt was altered"
        ));
    }
    // After the hash: a hand edit reads as an alteration, not as a shape.
    check_shape(status, r.result_hash.is_some(), r.started_id.is_some())?;
    let step = match (status, r.started_id) {
        (Status::Started, _) => Step::Started(Box::new(Unfinished {
            position: 0,
            id: r.id.into_owned(),
            tool: r.tool.into_owned(),
            conversation_id: r.conversation_id.into_owned(),
            timestamp: r.timestamp.into_owned(),
        })),
        (_, Some(id)) => Step::Outcome(id),
        (_, None) => Step::Single,
    };
    Ok(Checked {
        previous_hash: r.previous_hash,
        hash,
        step,
    })
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
                result_hash: Some(text.into()),
                risk: text.into(),
                started_id: Some(text.into()),
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
            // Absent optional fields are left out the same way.
            r.result_hash = None;
            r.started_id = None;
            let mut fast = Vec::new();
            r.canonical_into(&mut fast);
            assert_eq!(fast, serde_json::to_vec(&r).unwrap());
        }
    }

    /// A log at a fresh path; `log_with(n)` holds `n` outcomes in the
    /// format written before `started` existed (no `started_id`).
    fn log_with(n: usize) -> (ReceiptLog, PathBuf) {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-rcpt"));
        let log = ReceiptLog::new(&dir.join("r.log"));
        for i in 0..n {
            log.append(&NewReceipt {
                conversation_id: "c",
                tool: "time",
                args: &json!({ "i": i }),
                result: Some(&json!("ok")),
                status: Status::Allowed,
                risk: Risk::Low,
                reason: "test",
                started_id: None,
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
            Verify::Ok {
                count,
                head,
                unfinished,
            } => assert_eq!(
                (count, head.as_str(), unfinished.len()),
                (3, v[2]["receipt_hash"].as_str().unwrap(), 0)
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
            result: Some(&json!({})),
            status: Status::Denied,
            risk: Risk::High,
            reason: "a \"quoted\"\tword",
            started_id: None,
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
                result: Some(&json!(null)),
                status: Status::Allowed,
                risk: Risk::Low,
                reason: "",
                started_id: None,
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
                head: GENESIS.into(),
                unfinished: Vec::new(),
            }
        );
    }

    #[test]
    fn every_cut_of_a_line_is_a_torn_tail_and_nothing_else_is() {
        let (log, dir) = log_with(1);
        let start = started(&log, "shell");
        let head = |log: &ReceiptLog| match log.verify().unwrap() {
            Verify::Ok {
                head, unfinished, ..
            } => (head, unfinished),
            b => panic!("{b:?}"),
        };
        let (h, open) = head(&log);
        // An outcome whose start is open.
        let whole = std::fs::read(log.path()).unwrap();
        outcome(&log, "shell", "failed", &start);
        let all = std::fs::read(log.path()).unwrap();
        let line = &all[whole.len()..all.len() - 1];
        for n in 1..line.len() {
            assert_eq!(judge_tail(&line[..n], &h, &open), Ok(false), "{n}");
            let padded = [&line[..n], &[0u8; 7][..]].concat();
            assert_eq!(judge_tail(&padded, &h, &open), Ok(false), "{n}");
        }
        assert_eq!(judge_tail(&[0u8; 3], &h, &open), Ok(false));
        // Whole: kept (given its newline) only if it verifies and links.
        assert_eq!(judge_tail(line, &h, &open), Ok(true));
        assert!(
            judge_tail(line, GENESIS, &open)
                .unwrap_err()
                .contains("broken link")
        );
        let no_start = judge_tail(line, &h, &[]).unwrap_err();
        assert!(no_start.contains("outcome without a start"), "{no_start}");
        let altered = String::from_utf8(line.to_vec())
            .unwrap()
            .replace("\"failed\"", "\"allowed\"");
        let why = judge_tail(altered.as_bytes(), &h, &open).unwrap_err();
        assert!(why.contains("bad hash"), "{why}");
        let padded = [line, &[0u8; 2][..]].concat();
        assert!(judge_tail(&padded, &h, &open).is_err());
        // A line with escapes and multi-byte text: every cut is torn too.
        let (h2, open2) = head(&log);
        log.append(&NewReceipt {
            conversation_id: "c",
            tool: "shell",
            args: &json!({}),
            result: Some(&json!({})),
            status: Status::Denied,
            risk: Risk::High,
            reason: "a \"quoted\"\tword, é ✓ \\ end",
            started_id: None,
        })
        .unwrap();
        let more = std::fs::read(log.path()).unwrap();
        let escaped = &more[all.len()..more.len() - 1];
        assert!(parse_canonical(escaped).is_none(), "the slow path");
        for n in 1..escaped.len() {
            assert_eq!(judge_tail(&escaped[..n], &h2, &open2), Ok(false), "{n}");
        }
        assert_eq!(judge_tail(escaped, &h2, &open2), Ok(true));
        // Not the start of a receipt.
        for tail in [
            &b"x"[..],
            b"{\"tool\":\"t",
            b"{\"args_hash\":1",
            b"[",
            b"{}",
        ] {
            assert!(judge_tail(tail, &h, &open).is_err(), "{tail:?}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn repair_cuts_the_tear_backs_up_and_chains_a_repaired_receipt() {
        let (log, dir) = log_with(2);
        let whole = std::fs::read(log.path()).unwrap();
        assert!(matches!(
            log.repair().unwrap(),
            Repair::Intact { count: 2, .. }
        ));
        let torn = [whole.as_slice(), b"{\"args_hash\":\"0123"].concat();
        std::fs::write(log.path(), &torn).unwrap();
        assert!(
            log.check_appendable()
                .unwrap_err()
                .msg
                .contains("receipt repair")
        );
        let Repair::Repaired {
            count,
            kept,
            dropped,
            dropped_sha256,
            added_newline,
            backup,
            receipt_id,
            head,
        } = log.repair().unwrap()
        else {
            panic!("not repaired")
        };
        assert_eq!((count, kept, dropped, added_newline), (3, 2, 18, false));
        assert_eq!(dropped_sha256, util::sha256_hex(b"{\"args_hash\":\"0123"));
        assert_eq!(std::fs::read(&backup).unwrap(), torn);
        let after = std::fs::read(log.path()).unwrap();
        assert!(after.starts_with(&whole));
        let last: Value = serde_json::from_slice(&after[whole.len()..]).unwrap();
        assert_eq!(
            (last["id"].as_str(), last["status"].as_str()),
            (Some(receipt_id.as_str()), Some("repaired"))
        );
        assert_eq!(
            last["args_hash"],
            hash_value(&json!({"backup": backup.display().to_string(),
                               "dropped_bytes": 18, "dropped_sha256": dropped_sha256}))
        );
        match log.verify().unwrap() {
            Verify::Ok {
                count: 3, head: h, ..
            } => assert_eq!(h, head),
            b => panic!("{b:?}"),
        }
        // A repaired receipt with a result or a start is not one latchclaw writes.
        assert!(check_shape(Status::Repaired, true, false).is_err());
        assert!(check_shape(Status::Repaired, false, true).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn started(log: &ReceiptLog, tool: &str) -> String {
        log.append(&NewReceipt {
            conversation_id: "c",
            tool,
            args: &json!({"command": "sleep 5"}),
            result: None,
            status: Status::Started,
            risk: Risk::Medium,
            reason: "allowed by policy",
            started_id: None,
        })
        .unwrap()
        .id
    }

    fn outcome(log: &ReceiptLog, tool: &str, status: &str, started_id: &str) -> Written {
        let status = Status::parse(status).unwrap();
        log.append(&NewReceipt {
            conversation_id: "c",
            tool,
            args: &json!({"command": "sleep 5"}),
            result: Some(&json!({"success": true})),
            status,
            risk: Risk::Medium,
            reason: "allowed by policy",
            started_id: Some(started_id),
        })
        .unwrap()
    }

    fn unfinished(log: &ReceiptLog) -> Vec<(u64, String, String)> {
        match log.verify().unwrap() {
            Verify::Ok { unfinished, .. } => unfinished
                .into_iter()
                .map(|c| (c.position, c.id, c.tool))
                .collect(),
            b => panic!("expected ok, got {b:?}"),
        }
    }

    #[test]
    fn started_and_outcome_pair_up_and_a_cut_off_call_is_not_a_break() {
        // Old-format outcomes first: a log that predates `started` goes on.
        let (log, dir) = log_with(1);
        let a = started(&log, "shell");
        let b = started(&log, "file_write");
        // Outcomes in another order than their starts (overlapping processes).
        outcome(&log, "file_write", "approved", &b);
        outcome(&log, "shell", "failed", &a);
        assert_eq!(unfinished(&log), []);
        let l = lines(&log);
        let v: Vec<Value> = l.iter().map(|s| serde_json::from_str(s).unwrap()).collect();
        assert_eq!(v[1]["status"], "started");
        assert!(v[1].get("result_hash").is_none(), "{}", l[1]);
        assert!(v[1].get("started_id").is_none(), "{}", l[1]);
        assert_eq!(
            (v[3]["started_id"].as_str(), v[4]["started_id"].as_str()),
            (Some(b.as_str()), Some(a.as_str()))
        );
        for (line, value) in l.iter().zip(&v) {
            assert_eq!(&canonical_json(value), line);
        }

        // The process is cut off: a start and nothing after it.
        let cut = started(&log, "shell");
        assert_eq!(unfinished(&log), [(6, cut.clone(), "shell".to_string())]);
        // The next call chains on top; the cut-off call stays reported.
        let next = started(&log, "time");
        let last = outcome(&log, "time", "allowed", &next);
        match log.verify().unwrap() {
            Verify::Ok {
                count,
                head,
                unfinished,
            } => {
                assert_eq!((count, head), (8, last.receipt_hash));
                assert_eq!(unfinished.len(), 1);
                assert_eq!(
                    (
                        unfinished[0].conversation_id.as_str(),
                        unfinished[0].timestamp.is_empty()
                    ),
                    ("c", false)
                );
            }
            b => panic!("{b:?}"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_outcome_must_close_an_open_start() {
        let (log, dir) = log_with(0);
        let a = started(&log, "shell");
        outcome(&log, "shell", "allowed", &a);
        // A second outcome for the same call, then one naming no start.
        outcome(&log, "shell", "allowed", &a);
        let (p, why) = broken_at(&log);
        assert_eq!(p, 3);
        assert!(why.starts_with("outcome without a start"), "{why}");
        let mut l = lines(&log);
        l.pop();
        write_lines(&log, &l, true);
        outcome(&log, "shell", "allowed", "receipt-20250101-000000000000");
        assert_eq!(broken_at(&log).0, 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A line rewritten with a consistent hash, as a forger would.
    fn rehash(line: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("receipt_hash");
        edit(o);
        let hash = hash_value(&v);
        v["receipt_hash"] = json!(hash);
        canonical_json(&v)
    }

    #[test]
    fn each_status_has_its_fields() {
        let (log, dir) = log_with(0);
        let a = started(&log, "shell");
        let done = outcome(&log, "shell", "allowed", &a);
        let l = lines(&log);
        let bad_lines = [
            (
                rehash(&l[0], |o| {
                    o.insert("result_hash".into(), json!("ab"));
                }),
                "has no result_hash",
            ),
            (
                rehash(&l[0], |o| {
                    o.insert("started_id".into(), json!(a));
                }),
                "has no started_id",
            ),
            (
                rehash(&l[1], |o| {
                    o.remove("result_hash");
                }),
                "missing field `result_hash`",
            ),
            (
                rehash(&l[1], |o| {
                    o.insert("status".into(), json!("denied"));
                }),
                "has no started_id",
            ),
            (
                rehash(&l[1], |o| {
                    o.insert("status".into(), json!("running"));
                }),
                "unknown status",
            ),
            // null is not a way to leave a field out.
            (
                l[0].replacen("\"risk\"", "\"result_hash\":null,\"risk\"", 1),
                "invalid receipt",
            ),
            (
                rehash(&l[1], |o| {
                    o.insert("started_id".into(), json!(7));
                }),
                "invalid receipt",
            ),
        ];
        let mut fast = 0;
        for (bad, want) in &bad_lines {
            // Canonical lines take the fast path; with a space added, the
            // slow one. Both give the same verdict.
            fast += usize::from(parse_canonical(bad.as_bytes()).is_some());
            let spaced = bad.replacen(':', ": ", 1);
            for line in [bad, &spaced] {
                let why = check_self(format!("{line}\n").as_bytes()).unwrap_err();
                assert!(why.contains(want), "{line}: {why}");
                write_lines(&log, &[l[0].clone(), line.clone()], true);
                assert_eq!(broken_at(&log).0, 2, "{line}");
            }
        }
        assert_eq!(fast, 5, "the rehashed string-valued lines are canonical");
        // The writer refuses the same shapes, and writes nothing.
        write_lines(&log, &l, true);
        // (An unknown status cannot be written: `Status` has none.)
        for (status, result, started_id) in [
            (Status::Started, Some(&json!(1)), None),
            (Status::Started, None, Some("x")),
            (Status::Denied, Some(&json!(1)), Some("x")),
            (Status::Allowed, None, Some(a.as_str())),
        ] {
            let err = log
                .append(&NewReceipt {
                    conversation_id: "c",
                    tool: "shell",
                    args: &json!({}),
                    result,
                    status,
                    risk: Risk::Low,
                    reason: "",
                    started_id,
                })
                .unwrap_err();
            assert!(err.msg.contains("refusing to write a receipt"), "{err}");
        }
        assert_eq!(lines(&log), l);
        match log.verify().unwrap() {
            Verify::Ok { head, .. } => assert_eq!(head, done.receipt_hash),
            b => panic!("{b:?}"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A log mixing every shape: old outcomes, pairs, a denial with an
    /// escaped reason (slow path), a cut-off start.
    fn mixed_log() -> (ReceiptLog, PathBuf) {
        let (log, dir) = log_with(2);
        for i in 0..5 {
            let a = started(&log, "shell");
            if i == 2 {
                log.append(&NewReceipt {
                    conversation_id: "c",
                    tool: "shell",
                    args: &json!({}),
                    result: Some(&json!({})),
                    status: Status::Denied,
                    risk: Risk::High,
                    reason: "a \"quoted\"\tword",
                    started_id: None,
                })
                .unwrap();
            }
            if i != 3 {
                outcome(&log, "shell", "allowed", &a);
            }
        }
        (log, dir)
    }

    #[test]
    fn fast_and_slow_paths_agree_on_every_shape() {
        let (log, dir) = mixed_log();
        let l = lines(&log);
        for line in &l {
            let slow: Stored = serde_json::from_str(line).unwrap();
            let with_newline = format!("{line}\n");
            let checked = check_self(with_newline.as_bytes()).unwrap();
            match parse_canonical(line.as_bytes()) {
                Some((fast, hash)) => {
                    assert_eq!(Some(hash.as_str()), slow.receipt_hash.as_deref());
                    assert_eq!(fast.values(), slow.values(), "{line}");
                }
                None => assert!(
                    line.contains("\\\""),
                    "only the escaped line is slow: {line}"
                ),
            }
            // The same line spelled differently verifies the same way.
            let mut v: Value = serde_json::from_str(line).unwrap();
            let respelled = serde_json::to_string_pretty(&v).unwrap().replace('\n', " ");
            assert!(parse_canonical(respelled.as_bytes()).is_none());
            let respelled = format!("{respelled}\n");
            let again = check_self(respelled.as_bytes()).unwrap();
            assert_eq!(
                (again.hash, again.previous_hash),
                (checked.hash, checked.previous_hash)
            );
            v["tool"] = json!("other");
            let edited = serde_json::to_string(&v).unwrap();
            assert!(
                check_self(format!("{edited}\n").as_bytes())
                    .unwrap_err()
                    .starts_with("bad hash")
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn unfinished_calls_are_the_same_across_block_boundaries() {
        let (log, dir) = mixed_log();
        let whole = log.verify().unwrap();
        let Verify::Ok {
            ref unfinished,
            count,
            ..
        } = whole
        else {
            panic!("{whole:?}")
        };
        assert_eq!((count, unfinished.len()), (12, 1));
        for block in [1, 100, 333, 1000, 4096] {
            assert_eq!(log.verify_in_blocks(block).unwrap(), whole, "block {block}");
        }
        // A break after the cut-off start wins over reporting it.
        let mut l = lines(&log);
        let before = l[11].clone();
        l[11] = l[11].replace("\"allowed\"", "\"failed\"");
        assert_ne!(l[11], before);
        write_lines(&log, &l, true);
        for block in [1, 100, 333, 4096] {
            match log.verify_in_blocks(block).unwrap() {
                Verify::Broken {
                    position, count, ..
                } => assert_eq!((position, count), (12, 12)),
                ok => panic!("{ok:?}"),
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
