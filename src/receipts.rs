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
//! `receipt_hash = SHA256(C)` and `hmac = HMAC-SHA256(receipt key, C)`, where
//! C is the canonical JSON of the receipt without `receipt_hash` and `hmac`:
//! compact with keys sorted (serde_json's default map is a BTreeMap) and
//! absent fields left out. The hash chain proves order; the hmac, that a
//! process holding the key wrote the receipt. Receipts written before the
//! key existed carry no hmac: they may only come first, followed by the
//! `keyed` receipt `ensure_key` writes. Appends hold an exclusive lock on
//! the log from reading the last hash until the new line is on disk, so
//! overlapping cron jobs keep one valid chain.

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

mod anchor;

pub use anchor::{AnchorLine, Anchored, Expect, append_anchor, read_anchor, span};

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
    /// The receipt key was created for a log that already held receipts:
    /// the first keyed receipt, so those before it are known to predate
    /// the key (README: keyed receipts).
    Keyed,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Started,
        Status::Allowed,
        Status::Approved,
        Status::Denied,
        Status::Failed,
        Status::Repaired,
        Status::Keyed,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Started => "started",
            Status::Allowed => "allowed",
            Status::Approved => "approved",
            Status::Denied => "denied",
            Status::Failed => "failed",
            Status::Repaired => "repaired",
            Status::Keyed => "keyed",
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
    keying: Keying,
    /// `receipts.anchor_file`: appends refuse a log that no longer holds
    /// the head last anchored there.
    anchor: Option<anchor::Anchor>,
}

/// The receipt key's file name in the state directory.
pub const KEY_FILE: &str = crate::config::RECEIPT_KEY_FILE;
/// Bytes of key: HMAC-SHA-256's block is 64, its output 32; 32 random
/// bytes are as strong as the MAC.
pub const KEY_LEN: usize = 32;

/// HMAC-SHA-256 (RFC 2104) with the key's two padded blocks absorbed once,
/// so each receipt costs only its own bytes: twenty lines over `sha2`,
/// held to RFC 4231's test vectors.
#[derive(Clone)]
struct HmacSha256 {
    inner: Sha256,
    outer: Sha256,
}

impl HmacSha256 {
    const BLOCK: usize = 64;

    fn new(key: &[u8]) -> HmacSha256 {
        // A key longer than the block is hashed; a shorter one zero-padded.
        let mut block = [0u8; Self::BLOCK];
        if key.len() > Self::BLOCK {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let pad = |byte: u8| {
            let mut h = Sha256::new();
            h.update(block.map(|k| k ^ byte));
            h
        };
        HmacSha256 {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    fn tag<'a>(&self, parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
        let mut inner = self.inner.clone();
        for p in parts {
            inner.update(p);
        }
        let mut outer = self.outer.clone();
        outer.update(inner.finalize());
        outer.finalize().into()
    }
}

/// Equal in time independent of where they differ: a forger learns
/// nothing from how long a wrong tag took to refuse.
fn same_tag(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The receipt key, ready to MAC.
#[derive(Clone)]
pub struct Key {
    /// Boxed: two hash states, kept beside small variants in `Keying`.
    mac: Box<HmacSha256>,
    /// Where it was read from, for messages.
    path: Option<PathBuf>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the bytes.
        write!(f, "Key({:?})", self.path)
    }
}

impl Key {
    pub fn from_bytes(bytes: &[u8; KEY_LEN]) -> Key {
        Key {
            mac: Box::new(HmacSha256::new(bytes)),
            path: None,
        }
    }

    /// Reads the key file: None when it does not exist. A file that is not
    /// 32 bytes, or that others may read, is refused.
    pub fn load(path: &Path) -> Result<Option<Key>> {
        use std::os::unix::fs::MetadataExt;
        let mut file = match File::open(path) {
            Ok(f) => f,
            // Not a directory: no key can be there either.
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(None);
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "cannot read the receipt key {}: {e}",
                    path.display()
                )));
            }
        };
        let meta = file
            .metadata()
            .ctx(|| format!("cannot stat the receipt key {}", path.display()))?;
        if meta.mode() & 0o077 != 0 {
            return Err(Error::new(
                Kind::Integrity,
                format!(
                    "the receipt key {} may be read by others (mode {:o}): anyone who can read it \
                     can forge receipts; `chmod 600 {0}` (and consider it leaked)",
                    path.display(),
                    meta.mode() & 0o777
                ),
            ));
        }
        let mut bytes = [0u8; KEY_LEN + 1];
        let n = read_full(&mut file, &mut bytes)
            .ctx(|| format!("cannot read the receipt key {}", path.display()))?;
        let Ok(key) = <&[u8; KEY_LEN]>::try_from(&bytes[..n]) else {
            return Err(Error::new(
                Kind::Integrity,
                format!(
                    "the receipt key {} is not a key latchclaw wrote ({}{} bytes, not {KEY_LEN})",
                    path.display(),
                    if n > KEY_LEN { "more than " } else { "" },
                    n.min(KEY_LEN)
                ),
            ));
        };
        let mut k = Key::from_bytes(key);
        k.path = Some(path.to_path_buf());
        Ok(Some(k))
    }

    /// The hmac of canonical bytes, as stored: lowercase hex.
    pub fn mac_hex(&self, canonical: &[u8]) -> String {
        util::hex(&self.mac.tag([canonical]))
    }

    fn verify(&self, canonical: &Canonical, tag: &[u8; 32]) -> bool {
        same_tag(&self.mac.tag(canonical.iter().copied()), tag)
    }
}

/// Whether this log's receipts are keyed.
#[derive(Debug, Clone)]
enum Keying {
    Key(Key),
    /// No key: the key file does not exist (yet), or the log was opened
    /// without one (`ReceiptLog::new`).
    Missing(Option<PathBuf>),
    /// The key exists but cannot be used: nothing is appended.
    Unusable(String),
}

impl Keying {
    fn key(&self) -> Option<&Key> {
        match self {
            Keying::Key(k) => Some(k),
            _ => None,
        }
    }
}

/// 32 bytes from the kernel's random source (getrandom(2), /dev/urandom
/// where it is missing): the receipt key, the gateway's token.
pub(crate) fn random_key() -> Result<[u8; KEY_LEN]> {
    let mut buf = [0u8; KEY_LEN];
    let mut got = 0;
    while got < KEY_LEN {
        let err = match crate::sys::rand::getrandom(&mut buf[got..]) {
            Ok(n) if n > 0 => {
                got += n;
                continue;
            }
            Ok(_) => std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            Err(e) => e,
        };
        match err.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::ENOSYS) => {
                let mut f = File::open("/dev/urandom").ctx(|| "cannot open /dev/urandom".into())?;
                std::io::Read::read_exact(&mut f, &mut buf)
                    .ctx(|| "cannot read /dev/urandom".into())?;
                return Ok(buf);
            }
            _ => return Err(Error::runtime(format!("getrandom failed: {err}"))),
        }
    }
    Ok(buf)
}

/// What `ensure_key` did.
#[derive(Debug)]
pub struct KeyReady {
    pub key: Key,
    /// The key was made now (else it existed).
    pub created: bool,
    /// Receipts the log held when the key was made (a `keyed` receipt
    /// followed them); 0 when it existed.
    pub unkeyed: u64,
}

/// Makes sure the receipt key exists, creating it when it does not: 32
/// random bytes, 0600, created with O_EXCL and never overwritten. When the
/// log already holds receipts, a `keyed` receipt (the first keyed one) is
/// appended before the key appears under its name, so a log whose receipts
/// all lack an hmac while the key exists can only be a stripped one.
/// Creators serialise on a lock on the key's directory; a crash anywhere
/// leaves `receipt.key.new`, which the next call finishes with. The
/// `keyed` receipt is checked against `anchor` as any append is.
pub fn ensure_key(key_path: &Path, log: &Path, anchor: Option<&Path>) -> Result<KeyReady> {
    if let Some(key) = Key::load(key_path)? {
        return Ok(KeyReady {
            key,
            created: false,
            unkeyed: 0,
        });
    }
    let dir = key_path.parent().unwrap_or(Path::new("/"));
    let dir_file = File::open(dir).ctx(|| format!("cannot open {}", dir.display()))?;
    dir_file
        .lock()
        .ctx(|| format!("cannot lock {}", dir.display()))?;
    let ready = create_key_locked(key_path, log, anchor);
    let _ = dir_file.unlock();
    ready
}

fn create_key_locked(key_path: &Path, log_path: &Path, anchor: Option<&Path>) -> Result<KeyReady> {
    // Another process may have made it while this one waited.
    if let Some(key) = Key::load(key_path)? {
        return Ok(KeyReady {
            key,
            created: false,
            unkeyed: 0,
        });
    }
    let mut pending = key_path.as_os_str().to_owned();
    pending.push(".new");
    let pending = PathBuf::from(pending);
    let mut key = match Key::load(&pending) {
        Ok(Some(k)) => k,
        // None, or a torn one from a crash mid-write: start over.
        _ => {
            let _ = std::fs::remove_file(&pending);
            let bytes = random_key()?;
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&pending)
                .ctx(|| format!("cannot create {}", pending.display()))?;
            f.write_all(&bytes)
                .and_then(|_| f.sync_all())
                .ctx(|| format!("cannot write {}", pending.display()))?;
            Key::from_bytes(&bytes)
        }
    };
    key.path = Some(key_path.to_path_buf());
    let log = ReceiptLog::with_key(log_path, key.clone()).anchored(anchor);
    let unkeyed = match log.mark_keyed() {
        Ok(n) => n,
        Err(e) => {
            if e.kind == Kind::Integrity {
                // No receipt is keyed with it: it is nobody's key.
                let _ = std::fs::remove_file(&pending);
            }
            return Err(e);
        }
    };
    // link(2) never replaces a file: the key is never overwritten.
    std::fs::hard_link(&pending, key_path)
        .ctx(|| format!("cannot create the receipt key {}", key_path.display()))?;
    let _ = std::fs::remove_file(&pending);
    sync_dir(key_path);
    log::info!(target: "event::receipt_key_created", "path={} unkeyed={unkeyed}", key_path.display());
    Ok(KeyReady {
        key,
        created: true,
        unkeyed,
    })
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
    /// What the runtime measured of a call that ran (`Measured::text`).
    pub measured: Option<&'a str>,
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
        auth: Auth,
    },
    Broken {
        /// 1-based; 0 when no one receipt is at fault (a recorded head
        /// missing from the chain, a key with no keyed receipt).
        position: u64,
        count: u64,
        why: String,
    },
}

/// Which receipts of a chain that links are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Auth {
    /// Receipts 1..=unkeyed carry no hmac: written before the key existed.
    pub unkeyed: u64,
    /// The receipts after them, each with an hmac.
    pub keyed: u64,
    /// Their hmacs were checked under the key (false: there was no key to
    /// check them with, so they are not authenticated).
    pub checked: bool,
}

/// One line of the log: parsed, or its raw text.
pub type Line = std::result::Result<Value, String>;

/// Where a verified log ended: its length in bytes, its receipts, the
/// last one's hash and whether it carries an hmac.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub offset: u64,
    pub count: u64,
    pub head: String,
    pub keyed: bool,
}

impl Default for Checkpoint {
    fn default() -> Checkpoint {
        Checkpoint {
            offset: 0,
            count: 0,
            head: GENESIS.into(),
            keyed: false,
        }
    }
}

/// Tracks the keyed part of the chain in log order: an unkeyed prefix,
/// then keyed receipts only, the first of them the `keyed` receipt when
/// there is a prefix.
#[derive(Default)]
struct KeyedRun {
    unkeyed: u64,
    keyed: u64,
}

impl KeyedRun {
    fn track(
        &mut self,
        position: u64,
        keyed: bool,
        status: Status,
    ) -> std::result::Result<(), String> {
        match (keyed, self.keyed > 0) {
            (false, true) => Err(format!(
                "receipt {position} has no hmac, but the receipts before it from {} on are \
                 keyed: its hmac was stripped (latchclaw writes every receipt under the key \
                 once it exists)",
                self.unkeyed + 1
            )),
            (false, false) => {
                self.unkeyed += 1;
                Ok(())
            }
            (true, false) if self.unkeyed > 0 && status != Status::Keyed => Err(format!(
                "receipt {position} is the first with an hmac, but not the `keyed` receipt \
                 latchclaw writes when it creates the key for a log that has receipts: the \
                 hmacs of {} were stripped",
                span(1, self.unkeyed)
            )),
            (true, _) => {
                self.keyed += 1;
                Ok(())
            }
        }
    }
}

/// The recorded heads, checked as the chain is replayed.
struct Expected<'a> {
    expect: &'a [Expect],
    found: Vec<bool>,
}

impl Expected<'_> {
    fn check(&mut self, position: u64, hash: &str) -> std::result::Result<(), String> {
        for (e, found) in self.expect.iter().zip(self.found.iter_mut()) {
            match e.position {
                Some(p) if p == position && e.hash != hash => {
                    return Err(match &e.anchor {
                        Some(a) => anchor::rewritten(p, hash, &e.hash, a),
                        None => format!(
                            "receipt {p} has the hash {hash}, not {} as recorded (--since {p}:{}): \
                             the log was rewritten at or before receipt {p}",
                            e.hash, e.hash
                        ),
                    });
                }
                Some(p) if p != position => {}
                _ if e.hash == hash => *found = true,
                _ => {}
            }
        }
        Ok(())
    }

    /// The first recorded head the whole chain did not hold.
    fn missing(&self, count: u64) -> Option<String> {
        let (e, _) = self
            .expect
            .iter()
            .zip(&self.found)
            .find(|(_, found)| !**found)?;
        Some(match (e.position, &e.anchor) {
            (Some(p), Some(a)) => anchor::cut_short(count, p, &e.hash, a),
            (Some(p), None) => format!(
                "the log holds {count} receipts, but receipt {p} was recorded with the hash {} \
                 (--since {p}:{}): receipts were removed, or this is another log",
                e.hash, e.hash
            ),
            (None, _) => format!(
                "the recorded head {} (--expect-head) is in no receipt of the chain: the log \
                 was rewritten or cut short, or this is another log",
                e.hash
            ),
        })
    }
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
        Status::Repaired | Status::Keyed if result => Err(format!(
            "invalid receipt: a {} receipt has no result_hash (no tool ran)",
            status.as_str()
        )),
        Status::Started | Status::Denied | Status::Repaired | Status::Keyed if started_id => {
            Err(format!(
                "invalid receipt: a {} receipt has no started_id (only an outcome refers to its start)",
                status.as_str()
            ))
        }
        Status::Started | Status::Repaired | Status::Keyed => Ok(()),
        _ if !result => Err("invalid receipt: missing field `result_hash`".into()),
        _ => Ok(()),
    }
}

/// The last receipt of a log, as an append needs it.
struct Tail {
    hash: String,
    keyed: bool,
}

impl ReceiptLog {
    /// A log opened without a key: receipts are written without an hmac,
    /// and the hmacs of keyed ones are not checked.
    pub fn new(path: &Path) -> ReceiptLog {
        ReceiptLog {
            path: path.to_path_buf(),
            keying: Keying::Missing(None),
            anchor: None,
        }
    }

    /// A log whose receipts are keyed with the key at `key_path`, if it
    /// exists (it is never created here: see `ensure_key`). A key that
    /// cannot be used is reported by every append and by `verify`.
    pub fn open(path: &Path, key_path: &Path) -> ReceiptLog {
        let keying = match Key::load(key_path) {
            Ok(Some(k)) => Keying::Key(k),
            Ok(None) => Keying::Missing(Some(key_path.to_path_buf())),
            Err(e) => Keying::Unusable(e.msg),
        };
        ReceiptLog {
            path: path.to_path_buf(),
            keying,
            anchor: None,
        }
    }

    /// A log keyed with `key`.
    pub fn with_key(path: &Path, key: Key) -> ReceiptLog {
        ReceiptLog {
            path: path.to_path_buf(),
            keying: Keying::Key(key),
            anchor: None,
        }
    }

    /// The log for a run: the key is created first when the state
    /// directory exists and the key does not (`ensure_key`); a key that
    /// cannot be made or read leaves the log refusing appends, so no tool
    /// runs unrecorded. Its appends are checked against `anchor`
    /// (`receipts.anchor_file`), the `keyed` receipt's too.
    pub fn for_run(path: &Path, key_path: &Path, anchor: Option<&Path>) -> ReceiptLog {
        let state_dir_exists = key_path.parent().is_some_and(Path::is_dir);
        let log = if !state_dir_exists {
            ReceiptLog::open(path, key_path)
        } else {
            match ensure_key(key_path, path, anchor) {
                Ok(ready) => ReceiptLog::with_key(path, ready.key),
                Err(e) => ReceiptLog {
                    path: path.to_path_buf(),
                    keying: Keying::Unusable(e.msg),
                    anchor: None,
                },
            }
        };
        log.anchored(anchor)
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
            return self.check_anchor(None, 0, GENESIS).map(|_| ());
        };
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        let tail = self.last_hash(&file, len)?;
        self.key_for_append(&tail, len, false)?;
        let placed = self.check_anchor(Some(&file), len, &tail.hash)?;
        self.remember(placed);
        Ok(())
    }

    /// The key a new receipt is written with, or why none may be written:
    /// a keyed log goes on keyed, an unkeyed one only until the key exists.
    fn key_for_append(&self, tail: &Tail, len: u64, marker: bool) -> Result<Option<&Key>> {
        match &self.keying {
            Keying::Unusable(why) => Err(Error::new(
                Kind::Integrity,
                format!("{why} (no receipt is appended)"),
            )),
            Keying::Key(k) if len > 0 && !tail.keyed && !marker => Err(Error::new(
                Kind::Integrity,
                format!(
                    "the receipt key {} exists but the last receipt in {} has no hmac: a log \
                     is keyed from the `keyed` receipt written when its key is made, so hmacs \
                     were stripped (see `latchclaw receipt verify`); no receipt is appended",
                    k.path
                        .as_deref()
                        .map_or_else(String::new, |p| p.display().to_string()),
                    self.path.display()
                ),
            )),
            Keying::Key(k) => Ok(Some(k)),
            Keying::Missing(key_path) if tail.keyed => Err(Error::new(
                Kind::Integrity,
                format!(
                    "the last receipt in {} carries an hmac but the receipt key {}is missing: \
                     restore it (a receipt without an hmac after keyed ones reads as a stripped \
                     hmac); no receipt is appended",
                    self.path.display(),
                    key_path
                        .as_deref()
                        .map(|p| format!("{} ", p.display()))
                        .unwrap_or_default()
                ),
            )),
            Keying::Missing(_) => Ok(None),
        }
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

    /// Appends `count head` to the anchor file `anchor` holding the log's
    /// lock: an append reads the anchor under that lock, and a read of a
    /// file racing a write to it may see the line half written (the write
    /// lands a page at a time), which would read as a damaged anchor.
    pub fn anchor_under_lock(&self, anchor: &Path, count: u64, head: &str) -> Result<()> {
        let _held = self.open_exclusive()?;
        append_anchor(anchor, count, head)
    }

    /// The anchor file's last head, read holding the log's shared lock: a
    /// run appends it under the exclusive one (`anchor_under_lock`), so
    /// `receipt verify` beside a running cron job never reads half a line.
    pub fn read_anchor_locked(&self, anchor: &Path) -> Result<Option<Anchored>> {
        let _held = self.open_for_read()?;
        read_anchor(anchor)
    }

    /// Under the log's lock, for `ensure_key`: appends the `keyed` receipt
    /// when the log holds receipts without an hmac; returns how many.
    fn mark_keyed(&self) -> Result<u64> {
        match self.open_exclusive()? {
            Some(mut file) => self.mark_keyed_locked(&mut file),
            None => Ok(0),
        }
    }

    /// Opens the existing log to append under its exclusive lock, which
    /// goes when the file is closed (None: there is no log yet).
    fn open_exclusive(&self) -> Result<Option<File>> {
        match OpenOptions::new().read(true).append(true).open(&self.path) {
            Ok(f) => {
                f.lock()
                    .ctx(|| format!("cannot lock receipts log {}", self.path.display()))?;
                Ok(Some(f))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::runtime(format!(
                "cannot open receipts log {}: {e}",
                self.path.display()
            ))),
        }
    }

    fn mark_keyed_locked(&self, file: &mut File) -> Result<u64> {
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        if len == 0 {
            return Ok(0);
        }
        let tail = ReceiptLog::new(&self.path).last_hash(file, len)?;
        let count = self.count_lines(file, len)?;
        if tail.keyed {
            // Verified under this key: an earlier attempt, cut off before
            // the key got its name, wrote the `keyed` receipt.
            return match self.last_hash(file, len) {
                Ok(_) => Ok(count - 1),
                Err(_) => Err(Error::new(
                    Kind::Integrity,
                    format!(
                        "the receipts log {} is keyed (its last receipt carries an hmac), but the \
                         receipt key {} is missing: restore it. A new key would fail every keyed \
                         receipt; to start a new chain, move the log aside (receipts.path)",
                        self.path.display(),
                        self.keying
                            .key()
                            .and_then(|k| k.path.as_deref())
                            .map_or_else(String::new, |p| p.display().to_string())
                    ),
                )),
            };
        }
        let key_path = self
            .keying
            .key()
            .and_then(|k| k.path.as_deref())
            .map_or_else(String::new, |p| p.display().to_string());
        let args = serde_json::json!({"key": key_path, "unkeyed": count});
        let reason = format!(
            "the receipt key {key_path} was created: {} before this one {} written without it \
             (not authenticated); every receipt from this one on carries an hmac",
            if count == 1 {
                "receipt 1".to_string()
            } else {
                format!("receipts 1–{count}")
            },
            if count == 1 { "was" } else { "were" }
        );
        self.append_locked(
            file,
            &NewReceipt {
                conversation_id: "cli-receipt-key",
                tool: "receipt key",
                args: &args,
                result: None,
                status: Status::Keyed,
                risk: Risk::Low,
                reason: &reason,
                started_id: None,
                measured: None,
            },
        )?;
        Ok(count)
    }

    /// Newlines in the first `len` bytes.
    fn count_lines(&self, file: &File, len: u64) -> Result<u64> {
        self.count_to(file, len, 0).map(|(n, _)| n)
    }

    /// The number of receipts and the last one's hash, without replaying
    /// the chain: the last line is checked on its own (hash, and hmac under
    /// the key). What an anchor records after a run.
    pub fn head(&self) -> Result<(u64, String)> {
        let Some(file) = self.open_for_read()? else {
            return Ok((0, GENESIS.into()));
        };
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        let tail = self.last_hash(&file, len)?;
        Ok((self.count_lines(&file, len)?, tail.hash))
    }

    fn append_locked(&self, file: &mut File, r: &NewReceipt) -> Result<Written> {
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        let tail = self.last_hash(file, len)?;
        let key = self.key_for_append(&tail, len, r.status == Status::Keyed)?;
        let placed = self.check_anchor(Some(file), len, &tail.hash)?;
        let id = util::new_id("receipt");
        let mut stored = Stored {
            args_hash: hash_value(r.args).into(),
            conversation_id: r.conversation_id.into(),
            hmac: None,
            id: id.as_str().into(),
            measured: r.measured.map(Cow::Borrowed),
            previous_hash: tail.hash.into(),
            reason: r.reason.into(),
            receipt_hash: None,
            result_hash: r.result.map(|v| hash_value(v).into()),
            risk: r.risk.as_str().into(),
            started_id: r.started_id.map(Cow::Borrowed),
            status: r.status.as_str().into(),
            timestamp: util::now_rfc3339().into(),
            tool: r.tool.into(),
        };
        let mut canonical = Vec::with_capacity(512);
        stored.canonical_into(&mut canonical);
        let receipt_hash = util::hex(&Sha256::digest(&canonical));
        stored.receipt_hash = Some(receipt_hash.as_str().into());
        stored.hmac = key.map(|k| k.mac_hex(&canonical).into());
        let mut line = Vec::with_capacity(canonical.len() + 180);
        stored.emit(Members::All, &mut line);
        line.push(b'\n');
        let written = file.write_all(&line).and_then(|_| file.sync_data());
        if let Err(e) = written {
            // Cut off whatever part of the line landed so no torn line stays.
            let _ = file.set_len(len);
            return Err(Error::runtime(format!(
                "cannot write receipt to {}: {e}",
                self.path.display()
            )));
        }
        log::info!(target: "event::receipt_written", "id={id} tool={} status={}", r.tool, r.status.as_str());
        self.remember(placed.map(|p| p.next(&receipt_hash)));
        Ok(Written { id, receipt_hash })
    }

    /// Reads the hash of the last receipt, refusing to build on a torn or
    /// altered last line (or one whose hmac fails under the key).
    fn last_hash(&self, file: &File, len: u64) -> Result<Tail> {
        if len == 0 {
            return Ok(Tail {
                hash: GENESIS.to_string(),
                keyed: false,
            });
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

    fn hash_of_line(&self, line: &[u8]) -> Result<Tail> {
        let mut l = line.to_vec();
        l.push(b'\n');
        let checked = check_self(&l, self.keying.key()).map(|c| Tail {
            hash: c.hash,
            keyed: c.keyed,
        });
        checked.map_err(|why| {
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
        self.verify_expecting(&[])
    }

    /// `verify`, and every recorded head in `expect` must still be in the
    /// chain.
    pub fn verify_expecting(&self, expect: &[Expect]) -> Result<Verify> {
        self.verify_in_blocks(VERIFY_BLOCK, expect)
    }

    fn verify_in_blocks(&self, block: usize, expect: &[Expect]) -> Result<Verify> {
        match self.open_for_read()? {
            Some(mut file) => self.verify_from(&mut file, block, expect),
            None => self.verify_from(&mut std::io::empty(), block, expect),
        }
    }

    /// Verifies the log as `file` reads it (the whole log, or the part of
    /// it before a torn last line).
    fn verify_from(
        &self,
        file: &mut impl std::io::Read,
        block: usize,
        expect: &[Expect],
    ) -> Result<Verify> {
        if let Keying::Unusable(why) = &self.keying {
            return Err(Error::new(
                Kind::Integrity,
                format!("cannot authenticate the receipts: {why}"),
            ));
        }
        let key = self.keying.key();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8);
        let mut prev = GENESIS.to_string();
        let mut position = 0u64;
        let mut first_break: Option<(u64, String)> = None;
        let mut calls = OpenCalls::default();
        let mut run = KeyedRun::default();
        let mut expected = Expected {
            expect,
            found: vec![false; expect.len()],
        };
        // The log is read in fixed-size blocks, so memory stays flat: each
        // block's whole lines are hashed on all cores, then linked in order.
        // The buffer is zeroed once (it grows only for a line longer than
        // half of it); `filled` bytes of it hold the log.
        let mut whole = vec![0u8; block];
        let mut filled = 0;
        let mut eof = false;
        while !eof {
            if whole.len() < block.max(filled * 2) {
                whole.resize(filled * 2, 0);
            }
            let n = read_full(file, &mut whole[filled..])
                .ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
            filled += n;
            eof = n == 0;
            let buf = &whole[..filled];
            // Whole lines only, except at the end, where a torn line is judged.
            let end = match memchr::memrchr(b'\n', buf) {
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
                            s.spawn(move || {
                                c.iter().map(|l| check_self(l, key)).collect::<Vec<_>>()
                            })
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
                    run.track(position, c.keyed, c.status)?;
                    calls.track(position, c.step)?;
                    expected.check(position, &c.hash)?;
                    Ok(c.hash)
                });
                match linked {
                    Ok(hash) => prev = hash,
                    Err(why) => first_break = Some((position, why)),
                }
            }
            whole.copy_within(end..filled, 0);
            filled -= end;
        }
        if first_break.is_none() {
            first_break = expected.missing(position).map(|why| (0, why));
        }
        if first_break.is_none()
            && let Some(k) = key
            && position > 0
            && run.keyed == 0
        {
            first_break = Some((
                0,
                format!(
                    "the receipt key {}exists, but none of the {position} receipts carries an \
                     hmac: latchclaw writes a keyed `keyed` receipt before it creates the key for \
                     a log that has receipts, so the hmacs were stripped",
                    k.path
                        .as_deref()
                        .map(|p| format!("{} ", p.display()))
                        .unwrap_or_default()
                ),
            ));
        }
        Ok(match first_break {
            None => Verify::Ok {
                count: position,
                head: prev,
                unfinished: calls.unfinished(),
                auth: Auth {
                    unkeyed: run.unkeyed,
                    keyed: run.keyed,
                    checked: key.is_some(),
                },
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
        match self.open_exclusive()? {
            Some(mut file) => self.repair_locked(&mut file),
            None => Ok(Repair::Intact {
                count: 0,
                head: GENESIS.into(),
            }),
        }
    }

    fn repair_locked(&self, file: &mut File) -> Result<Repair> {
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        let cut = self.after_last_newline(file, len)?;
        // A log cut short of its anchor is not a torn write: refused before
        // anything changes.
        let anchored = self.anchor_expect()?;
        let mut whole = std::io::Read::take(self.rewound(file)?, cut);
        let (count, head, unfinished, keyed_before) =
            match self.verify_from(&mut whole, VERIFY_BLOCK, &anchored)? {
                Verify::Ok {
                    auth:
                        Auth {
                            unkeyed,
                            keyed,
                            checked: false,
                        },
                    ..
                } if keyed > 0 => {
                    // Checked before anything changes: the `repaired` receipt
                    // could not be keyed.
                    return Err(Error::new(
                        Kind::Integrity,
                        format!(
                            "not repaired: {} carry an hmac but there is no receipt key to check \
                         them with or to key the `repaired` receipt; restore the key; the log \
                         is unchanged",
                            span(unkeyed + 1, unkeyed + keyed)
                        ),
                    ));
                }
                Verify::Ok {
                    count,
                    head,
                    unfinished,
                    auth,
                } => (count, head, unfinished, auth.keyed > 0),
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
        let whole_line =
            match judge_tail(&tail, &head, &unfinished, keyed_before, self.keying.key()) {
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
                measured: None,
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

    /// Verifies the whole log once (as `verify`) and says where it ends,
    /// for `verify_appended` to go on from; `Err(why)` when it is broken.
    pub fn checkpoint(&self) -> Result<std::result::Result<Checkpoint, String>> {
        let Some(mut file) = self.open_for_read()? else {
            return Ok(Ok(Checkpoint::default()));
        };
        // The shared lock holds appends off: the length is what is read.
        let len = file
            .metadata()
            .ctx(|| format!("cannot stat {}", self.path.display()))?
            .len();
        Ok(match self.verify_from(&mut file, VERIFY_BLOCK, &[])? {
            Verify::Ok {
                count, head, auth, ..
            } => Ok(Checkpoint {
                offset: len,
                count,
                head,
                keyed: auth.keyed > 0,
            }),
            Verify::Broken { position, why, .. } => Err(format!("receipt {position}: {why}")),
        })
    }

    /// Checks only what was appended after `from` (a `checkpoint` or an
    /// earlier return of this): each new receipt's own hash and hmac, its
    /// link to the one before, no hmac stripped after keyed ones; and that
    /// the receipt `from` ended on is still there with its hash. Earlier
    /// receipts are not read again (`checkpoint` does that), and calls are
    /// not paired with their outcomes here.
    pub fn verify_appended(
        &self,
        from: &Checkpoint,
    ) -> Result<std::result::Result<Checkpoint, String>> {
        let Some(file) = self.open_for_read()? else {
            return Ok(if from.count == 0 {
                Ok(Checkpoint::default())
            } else {
                Err(format!("the log is gone (it had {} receipts)", from.count))
            });
        };
        let read_err = || format!("cannot read receipts log {}", self.path.display());
        let len = file.metadata().ctx(read_err)?.len();
        if len < from.offset {
            return Ok(Err(format!(
                "the log is {len} bytes, shorter than the {} already verified: cut or rewritten",
                from.offset
            )));
        }
        let key = self.keying.key();
        if from.offset > 0 {
            // The last verified receipt must still end there, unchanged.
            let start = from.offset.saturating_sub(64 * 1024);
            let mut buf = vec![0u8; (from.offset - start) as usize];
            file.read_exact_at(&mut buf, start).ctx(read_err)?;
            let body = &buf[..buf.len().saturating_sub(1)];
            let line_start = memchr::memrchr(b'\n', body).map_or(0, |i| i + 1);
            match check_self(&buf[line_start..], key) {
                Ok(c) if c.hash == from.head => {}
                _ => {
                    return Ok(Err(format!(
                        "receipt {} no longer has the hash {} it had: the log was rewritten",
                        from.count, from.head
                    )));
                }
            }
        }
        let mut at = from.clone();
        let mut reader = BufReader::new(&file);
        std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(from.offset)).ctx(read_err)?;
        let mut line = Vec::with_capacity(1024);
        while at.offset < len {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).ctx(read_err)?;
            if n == 0 {
                break;
            }
            let position = at.count + 1;
            let checked = check_self(&line, key).and_then(|c| {
                link(&c.previous_hash, &at.head)?;
                if at.keyed && !c.keyed {
                    return Err("no hmac after keyed receipts: it was stripped".into());
                }
                Ok(c)
            });
            match checked {
                Ok(c) => {
                    at.head = c.hash;
                    at.keyed = c.keyed;
                    at.count = position;
                    at.offset += n as u64;
                }
                Err(why) => return Ok(Err(format!("receipt {position}: {why}"))),
            }
        }
        Ok(Ok(at))
    }

    /// Receipts `since + 1 ..= since + limit` (1-based positions), parsed
    /// where possible (`Err` holds the raw text), read without keeping the
    /// rest of the log; and how many receipts the log holds.
    pub fn page(&self, since: u64, limit: usize) -> Result<(Vec<(u64, Line)>, u64)> {
        let Some(file) = self.open_for_read()? else {
            return Ok((Vec::new(), 0));
        };
        let mut reader = BufReader::new(file);
        let mut out = Vec::new();
        let mut line = Vec::new();
        let mut position = 0u64;
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .ctx(|| format!("cannot read receipts log {}", self.path.display()))?;
            if n == 0 {
                break;
            }
            position += 1;
            if position > since && out.len() < limit {
                let text = line.strip_suffix(b"\n").unwrap_or(&line);
                out.push((
                    position,
                    serde_json::from_slice::<Value>(text)
                        .map_err(|_| String::from_utf8_lossy(text).into_owned()),
                ));
            }
        }
        Ok((out, position))
    }

    /// Every line, parsed where possible (`Err` holds the raw text).
    pub fn list(&self) -> Result<Vec<Line>> {
        let (lines, _) = self.page(0, usize::MAX)?;
        Ok(lines.into_iter().map(|(_, line)| line).collect())
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
    keyed_before: bool,
    key: Option<&Key>,
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
    let checked = check_self(&line, key)
        .and_then(|c| {
            link(&c.previous_hash, head)?;
            if keyed_before && !c.keyed {
                return Err("it has no hmac, after keyed receipts (a stripped hmac)".into());
            }
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
        crate::util::sort::sort_by_key(&mut left, |c| c.position);
        left
    }
}

/// One receipt as stored. `Stored::emit` is the one definition of its
/// bytes: the line written, and the canonical bytes hashed and MAC'd (the
/// line without `hmac` and `receipt_hash`). They are canonical JSON as
/// `canonical_json` writes it (compact, keys sorted, serde_json's escaping,
/// absent fields left out; a test holds `emit` equal to serde_json's
/// serialization of this struct, whose fields are declared in sorted key
/// order). serde_json reads a line `parse_canonical` does not take.
#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(deny_unknown_fields)]
struct Stored<'a> {
    #[serde(borrow)]
    args_hash: Cow<'a, str>,
    #[serde(borrow)]
    conversation_id: Cow<'a, str>,
    /// HMAC-SHA-256 under the receipt key of the bytes `receipt_hash` is
    /// the SHA-256 of; absent on a receipt written before the key existed.
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    hmac: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Cow<'a, str>,
    /// On an outcome of a call that ran: `duration_ms=N truncated=B
    /// tokens_est=N`; absent on every other receipt and on older ones.
    #[serde(
        borrow,
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    measured: Option<Cow<'a, str>>,
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
    /// Writes the receipt into `out`: every member (the line), or all but
    /// `hmac` and `receipt_hash` (the canonical bytes). The one writer of
    /// receipt bytes: `append` writes a line with it, and verification
    /// hashes what it writes, or checks that a line is what it writes.
    /// Strings that need no escaping (almost all) are copied as they are;
    /// serde_json's escaper writes the others.
    fn emit(&self, members: Members, out: &mut impl Sink) {
        out.put_byte(b'{');
        let mut first = true;
        for (i, (key, value)) in KEY_FRAMES.iter().zip(self.values()).enumerate() {
            let sealing = i == HMAC || i == RECEIPT_HASH;
            let Some(value) = value.filter(|_| members == Members::All || !sealing) else {
                continue;
            };
            if sealing {
                out.seal_starts();
            }
            if !first {
                out.put_byte(b',');
            }
            first = false;
            out.put(key);
            if needs_escape(value.as_bytes()) {
                let mut escaped = Vec::with_capacity(value.len() + 16);
                // Writing a string into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut escaped, value);
                out.put(&escaped);
            } else {
                out.put_quoted(value.as_bytes());
            }
            if sealing {
                out.seal_ends();
            }
        }
        out.put_byte(b'}');
    }

    /// The canonical bytes: what the hash and the hmac are taken over.
    fn canonical_into(&self, out: &mut Vec<u8>) {
        self.emit(Members::Canonical, out);
    }

    /// The fields in `KEY_FRAMES` order (None: absent).
    fn values(&self) -> [Option<&str>; KEYS] {
        [
            Some(&self.args_hash),
            Some(&self.conversation_id),
            self.hmac.as_deref(),
            Some(&self.id),
            self.measured.as_deref(),
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

    /// A receipt from its fields in `KEY_FRAMES` order; None when a field
    /// every receipt has is missing.
    fn from_values(values: [Option<&str>; KEYS]) -> Option<Stored<'_>> {
        let [
            args_hash,
            conversation_id,
            hmac,
            id,
            measured,
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
            hmac,
            id: id?,
            measured,
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

const KEYS: usize = 14;
/// Where `hmac` and `receipt_hash` sit in `KEY_FRAMES`: the members the
/// canonical bytes leave out (the seals).
const HMAC: usize = 2;
const RECEIPT_HASH: usize = 7;
/// The other keys a line may leave out (which ones a status needs is
/// `check_shape`'s business).
const MEASURED: usize = 4;
const RESULT_HASH: usize = 8;
const STARTED_ID: usize = 10;

/// Each key as a line spells it before its value (`"key":`), in the order
/// latchclaw writes them: sorted, as `Stored` declares its fields.
const KEY_FRAMES: [&[u8]; KEYS] = [
    b"\"args_hash\":",
    b"\"conversation_id\":",
    b"\"hmac\":",
    b"\"id\":",
    b"\"measured\":",
    b"\"previous_hash\":",
    b"\"reason\":",
    b"\"receipt_hash\":",
    b"\"result_hash\":",
    b"\"risk\":",
    b"\"started_id\":",
    b"\"status\":",
    b"\"timestamp\":",
    b"\"tool\":",
];

/// Which members `Stored::emit` writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Members {
    /// The line as stored.
    All,
    /// The canonical bytes: all but the seals (`hmac`, `receipt_hash`).
    Canonical,
}

/// Whether serde_json escapes a string with these bytes: it escapes `"`,
/// `\` and control characters, and writes everything else as it is.
fn needs_escape(s: &[u8]) -> bool {
    // Eight bytes at a time: `below(w, n)` is nonzero when a byte of `w`
    // is below `n` (n <= 0x80), so `below(w ^ c, 1)` when one equals `c`.
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    #[inline(always)]
    fn below(w: u64, n: u8) -> u64 {
        w.wrapping_sub(ONES * u64::from(n)) & !w & HIGH
    }
    #[inline(always)]
    fn flagged(w: u64) -> u64 {
        below(w, 0x20)
            | below(w ^ (ONES * u64::from(b'"')), 1)
            | below(w ^ (ONES * u64::from(b'\\')), 1)
    }
    let mut words = s.chunks_exact(8);
    let mut bad = 0;
    for w in &mut words {
        bad |= flagged(u64::from_ne_bytes(w.try_into().unwrap_or_default()));
    }
    let mut last = [b' '; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    (bad | flagged(u64::from_ne_bytes(last))) != 0
}

/// Where `Stored::emit` puts a receipt's bytes.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
    fn put_byte(&mut self, b: u8) {
        self.put(&[b]);
    }
    /// A string that needs no escaping, between quotes.
    fn put_quoted(&mut self, s: &[u8]) {
        self.put_byte(b'"');
        self.put(s);
        self.put_byte(b'"');
    }
    /// A seal member (`hmac`, `receipt_hash`) starts or ends here.
    fn seal_starts(&mut self) {}
    fn seal_ends(&mut self) {}
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Checks that a line holds exactly what `Stored::emit` writes, and notes
/// where its seal members are.
struct Matches<'l> {
    line: &'l [u8],
    at: usize,
    ok: bool,
    /// Where each seal member starts (at its comma) and ends, in order.
    seals: [Option<(usize, usize)>; 2],
    open_seal: Option<usize>,
}

impl<'l> Matches<'l> {
    fn new(line: &'l [u8]) -> Matches<'l> {
        Matches {
            line,
            at: 0,
            ok: true,
            seals: [None; 2],
            open_seal: None,
        }
    }

    /// The whole line was matched: where the seals were.
    fn finish(self) -> Option<[Option<(usize, usize)>; 2]> {
        (self.ok && self.at == self.line.len()).then_some(self.seals)
    }
}

impl Sink for Matches<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        // A value taken from the line is already where it is expected:
        // the same bytes, with no compare.
        self.ok &= self
            .line
            .get(self.at..end)
            .is_some_and(|here| std::ptr::eq(here, bytes) || here.iter().eq(bytes));
        self.at = end;
    }

    fn put_byte(&mut self, b: u8) {
        self.ok &= self.line.get(self.at) == Some(&b);
        self.at += 1;
    }

    fn put_quoted(&mut self, s: &[u8]) {
        let end = self.at + s.len() + 2;
        self.ok &= self.line.get(self.at..end).is_some_and(|here| {
            here[0] == b'"'
                && here[here.len() - 1] == b'"'
                && (std::ptr::eq(&here[1..here.len() - 1], s) || here[1..here.len() - 1] == *s)
        });
        self.at = end;
    }

    fn seal_starts(&mut self) {
        self.open_seal = Some(self.at);
    }

    fn seal_ends(&mut self) {
        if let Some(start) = self.open_seal.take()
            && let Some(slot) = self.seals.iter_mut().find(|s| s.is_none())
        {
            *slot = Some((start, self.at));
        }
    }
}

/// The canonical bytes of a receipt: the line's own bytes with the `hmac`
/// and `receipt_hash` members cut out (three pieces), or bytes built anew.
type Canonical<'a> = [&'a [u8]; 3];

/// The fast path of verification, a pre-check: a line exactly as latchclaw
/// writes it is its own canonical JSON once the seal members are cut out,
/// so hash and hmac are taken over the line's bytes with no
/// parse-and-reserialize. The fields are taken by position (`split`), and
/// the line is accepted only when `Stored::emit` writes those fields back
/// as exactly its bytes, so what it accepts is what serde_json reads from
/// it, and its canonical bytes are what `emit` writes. Any other line
/// (whitespace, other key order, escapes, a value serde_json would spell
/// otherwise, a missing `receipt_hash`) returns None and goes through
/// serde_json and `Stored::canonical_into`.
fn parse_canonical(body: &[u8]) -> Option<(Stored<'_>, Canonical<'_>)> {
    let receipt = Stored::from_values(split(body)?)?;
    let mut line = Matches::new(body);
    receipt.emit(Members::All, &mut line);
    // `hmac` comes before `receipt_hash`; a line without an hmac has one
    // seal. An absent `receipt_hash` is for serde_json to report.
    let ((h_from, h_to), (r_from, r_to)) = match line.finish()? {
        [Some(hmac), Some(hash)] => (hmac, hash),
        [Some(hash), None] if receipt.hmac.is_none() => ((hash.0, hash.0), hash),
        _ => return None,
    };
    let canonical = [&body[..h_from], &body[h_to..r_from], &body[r_to..]];
    Some((receipt, canonical))
}

/// The fields of a line where latchclaw writes them, by position only:
/// `"key":"` for each of `KEY_FRAMES` in order (an optional one may be
/// missing), its value up to the next quote. A proposal `parse_canonical`
/// checks by writing them back; None when the line is not UTF-8.
fn split(body: &[u8]) -> Option<[Option<&str>; KEYS]> {
    let text = std::str::from_utf8(body).ok()?;
    let mut values: [Option<&str>; KEYS] = [None; KEYS];
    let mut at = 1;
    for (i, key) in KEY_FRAMES.iter().enumerate() {
        // Every member but the first follows a comma; its value starts
        // after the key and a quote. Only whether an optional key is there
        // is looked at: the rest is `parse_canonical`'s check.
        let from = at + usize::from(i > 0) + key.len() + 1;
        let optional = matches!(i, HMAC | MEASURED | RESULT_HASH | STARTED_ID);
        if optional && body.get(at + usize::from(i > 0)..from - 1) != Some(*key) {
            continue;
        }
        let value = body.get(from..)?;
        let len = memchr::memchr(b'"', value)?;
        values[i] = Some(text.get(from..from + len)?);
        at = from + len + 1;
    }
    Some(values)
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
    status: Status,
    /// It carries an hmac (checked when there was a key to check it with).
    keyed: bool,
}

/// Everything about a line that does not depend on the lines before it;
/// its hmac is checked under `key` when it has one. The one check of a
/// line: whole verifies, `verify_appended`, `repair`, `head` and every
/// append (through `last_hash`) go through it. The hash and the hmac are
/// taken over the canonical bytes `Stored::emit` writes for the receipt the
/// line holds: the line's own bytes when it is exactly what `emit` writes
/// (`parse_canonical`), else bytes `emit` writes anew from what serde_json
/// reads. A line spelled otherwise (whitespace, key order, escapes) is read
/// as the receipt it spells, and verifies only with the hash of that
/// receipt's canonical bytes, never with a hash of its own spelling.
fn check_self<'a>(line: &'a [u8], key: Option<&Key>) -> std::result::Result<Checked<'a>, String> {
    let Some(body) = line.strip_suffix(b"\n") else {
        return Err(
            "torn line: the last line has no newline (a crash mid-write?); \
                    `latchclaw receipt repair` drops it, keeping a backup of the log"
                .into(),
        );
    };
    let mut built = Vec::new();
    let (r, canonical) = match parse_canonical(body) {
        Some(fast) => fast,
        None => {
            let r: Stored = serde_json::from_slice(body).map_err(|e| {
                if e.is_data() {
                    format!("invalid receipt: {e}")
                } else {
                    format!("unparsable line: {e}")
                }
            })?;
            built.reserve(body.len());
            r.canonical_into(&mut built);
            (r, [built.as_slice(), &[][..], &[][..]])
        }
    };
    let Some(status) = Status::parse(&r.status) else {
        return Err(format!("unknown status \"{}\"", r.status));
    };
    let Some(stated) = r.receipt_hash.as_deref() else {
        return Err("invalid receipt: missing field `receipt_hash`".into());
    };
    let mut sha = Sha256::new();
    for part in canonical {
        sha.update(part);
    }
    // Compared as bytes: hex-encoding every receipt's hash was a fifth of
    // verify's time.
    let digest: [u8; 32] = sha.finalize().into();
    if unhex32(stated) != Some(digest) {
        return Err(format!(
            "bad hash: receipt_hash {stated} does not match its contents ({}); the receipt was altered",
            util::hex(&digest)
        ));
    }
    if let Some(stated) = r.hmac.as_deref() {
        let Some(tag) = unhex32(stated) else {
            return Err(format!(
                "invalid receipt: hmac \"{stated}\" is not 64 lowercase hex digits"
            ));
        };
        if let Some(key) = key
            && !key.verify(&canonical, &tag)
        {
            return Err(format!(
                "bad hmac: the hmac does not match the receipt under the receipt key{}: it was \
                 rewritten by someone without the key (its receipt_hash recomputed), or written \
                 under another key",
                key.path
                    .as_deref()
                    .map(|p| format!(" {}", p.display()))
                    .unwrap_or_default()
            ));
        }
    } else if status == Status::Keyed {
        return Err("invalid receipt: a keyed receipt carries an hmac".into());
    }
    // After the hash: a hand edit reads as an alteration, not as a shape.
    check_shape(status, r.result_hash.is_some(), r.started_id.is_some())?;
    let keyed = r.hmac.is_some();
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
        // Equal to the contents' hash, as checked above.
        hash: stated.to_owned(),
        step,
        status,
        keyed,
    })
}

/// 64 lowercase hex digits as 32 bytes; None for anything else (one
/// spelling per hmac, as for every hashed field).
fn unhex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    #[inline(always)]
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// The log against its anchor file (`receipts/anchor.rs`): what the
/// anchor asks of a verify, and each append checked against it.
impl ReceiptLog {
    /// Appends refuse a log that no longer holds the last head anchored in
    /// `file` (`receipts.anchor_file`), if one is given.
    pub fn anchored(mut self, file: Option<&Path>) -> ReceiptLog {
        self.anchor = file.map(|f| anchor::Anchor {
            file: f.to_path_buf(),
            known: std::sync::Mutex::new(None),
        });
        self
    }

    /// What the anchor asks of the chain, for a whole verify.
    fn anchor_expect(&self) -> Result<Vec<Expect>> {
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
    fn check_anchor(
        &self,
        file: Option<&File>,
        len: u64,
        tail: &str,
    ) -> Result<Option<anchor::Placed>> {
        let Some(anchor) = &self.anchor else {
            return Ok(None);
        };
        let Some(anchored) = read_anchor(&anchor.file)? else {
            return Ok(None);
        };
        let placed = |count| anchor::Placed {
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
                anchor::receipts(count),
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
                anchor::repair_path(n)
            ),
        ))
    }

    /// Keeps where the log's last receipt stands for the next append.
    fn remember(&self, placed: Option<anchor::Placed>) {
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
    fn count_to(&self, file: &File, len: u64, n: u64) -> Result<(u64, Option<Vec<u8>>)> {
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
    use serde_json::json;

    #[test]
    fn hmac_sha256_meets_rfc_4231_and_the_block_boundary() {
        let long_key = [0xaau8; 131];
        let first: Vec<u8> = (0u8..64).collect();
        let over: Vec<u8> = (0u8..65).collect();
        let cases: [(&[u8], &[u8], &str); 8] = [
            (&[0x0b; 20], b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            (&[0xaa; 20], &[0xdd; 50], "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
            (&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25], &[0xcd; 50], "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
            (&long_key, b"Test Using Larger Than Block-Size Key - Hash Key First", "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
            (&long_key, b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.", "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
            // A key of exactly one block is used as it is; one byte more is hashed.
            (&first, b"block", "0c4195064dd4ca79599d2b8508c3f4c5f3805080dd6b451ca30e7d2da73a2c3d"),
            (&over, b"block", "14f952ab1b86c57b32f958d5d1eff16dcf0b87097624748296dc953e05da894b"),
        ];
        for (key, data, want) in cases {
            let mac = HmacSha256::new(key);
            assert_eq!(util::hex(&mac.tag([data])), want);
            // In parts, as verification feeds a line's pieces.
            let (a, b) = data.split_at(data.len() / 2);
            assert_eq!(util::hex(&mac.tag([a, b])), want);
        }
        let tag = HmacSha256::new(b"k").tag([&b"x"[..]]);
        assert!(same_tag(&tag, &tag));
        for i in 0..32 {
            let mut other = tag;
            other[i] ^= 0x80;
            assert!(!same_tag(&tag, &other));
        }
    }

    #[test]
    fn canonical_bytes_are_serde_jsons_bytes() {
        // Every ASCII character (control characters, quotes, backslashes),
        // multi-byte UTF-8 and an empty string, in every field.
        let ascii: String = (0u8..128).map(char::from).collect();
        for text in [ascii.as_str(), "é ✓ 𝄞 \u{2028}", "", "plain"] {
            let mut r = Stored {
                args_hash: text.into(),
                conversation_id: text.into(),
                hmac: None,
                id: text.into(),
                measured: Some(text.into()),
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
            // Neither the hmac nor the hash is part of the bytes hashed.
            r.hmac = Some(text.into());
            r.receipt_hash = Some(text.into());
            let mut again = Vec::new();
            r.canonical_into(&mut again);
            assert_eq!(again, fast);
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
                measured: None,
            })
            .unwrap();
        }
        (log, dir)
    }

    fn sha_of(parts: Canonical) -> String {
        let mut sha = Sha256::new();
        for p in parts {
            sha.update(p);
        }
        util::hex(&sha.finalize())
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

    fn keyed_log(n: usize) -> (ReceiptLog, PathBuf) {
        let (plain, dir) = log_with(0);
        let log = ReceiptLog::with_key(plain.path(), Key::from_bytes(&[7; KEY_LEN]));
        for i in 0..n {
            let a = started(&log, "shell");
            if i % 3 == 1 {
                log.append(&NewReceipt {
                    conversation_id: "c",
                    tool: "shell",
                    args: &json!({}),
                    result: Some(&json!({})),
                    status: Status::Denied,
                    risk: Risk::High,
                    reason: "a \"quoted\"\tword",
                    started_id: None,
                    measured: None,
                })
                .unwrap();
            }
            outcome(&log, "shell", "allowed", &a);
        }
        (log, dir)
    }

    #[test]
    fn appended_receipts_are_verified_from_a_checkpoint_alone() {
        let (log, dir) = keyed_log(2);
        let at = log.checkpoint().unwrap().unwrap();
        let len = std::fs::metadata(log.path()).unwrap().len();
        assert_eq!((at.offset, at.count, at.keyed), (len, 5, true));
        // Nothing new: the same place.
        assert_eq!(log.verify_appended(&at).unwrap().unwrap(), at);
        let a = started(&log, "shell");
        outcome(&log, "shell", "allowed", &a);
        let next = log.verify_appended(&at).unwrap().unwrap();
        assert_eq!(next.count, 7);
        assert_eq!(
            next,
            log.checkpoint().unwrap().unwrap(),
            "the same as a whole verify"
        );
        // An appended line with a broken link is caught.
        let mut l = lines(&log);
        let last: Value = serde_json::from_str(&l[6]).unwrap();
        l[6] = l[6].replace(last["previous_hash"].as_str().unwrap(), &"0".repeat(64));
        write_lines(&log, &l, true);
        let why = log.verify_appended(&next).unwrap().unwrap_err();
        assert!(why.contains("no longer has the hash"), "{why}");
        let why = log.verify_appended(&at).unwrap().unwrap_err();
        assert!(why.starts_with("receipt 7:"), "{why}");
        // A stripped hmac after keyed receipts.
        let mut l = lines(&log);
        let mut v: Value = serde_json::from_str(&l[5]).unwrap();
        v.as_object_mut().unwrap().remove("hmac");
        l[5] = v.to_string();
        write_lines(&log, &l[..6], true);
        assert!(log.verify_appended(&at).unwrap().is_err());
        // A log cut shorter than what was verified.
        write_lines(&log, &l[..3], true);
        let why = log.verify_appended(&at).unwrap().unwrap_err();
        assert!(why.contains("shorter"), "{why}");
        let (page, total) = log.page(1, 1).unwrap();
        assert_eq!((page.len(), page[0].0, total), (1, 2, 3));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn keyed_lines_verify_the_same_on_both_paths_and_in_any_block() {
        let (log, dir) = keyed_log(6);
        let whole = log.verify().unwrap();
        let Verify::Ok { count, auth, .. } = &whole else {
            panic!("{whole:?}")
        };
        assert_eq!(
            (*count, *auth),
            (
                14,
                Auth {
                    unkeyed: 0,
                    keyed: 14,
                    checked: true
                }
            )
        );
        for block in [1, 100, 333, 4096] {
            assert_eq!(
                log.verify_in_blocks(block, &[]).unwrap(),
                whole,
                "block {block}"
            );
        }
        let key = log.keying.key().unwrap();
        let other = Key::from_bytes(&[8; KEY_LEN]);
        for line in lines(&log) {
            let v: Value = serde_json::from_str(&line).unwrap();
            let mut o = v.as_object().unwrap().clone();
            o.remove("hmac");
            o.remove("receipt_hash");
            let canonical = canonical_json(&Value::Object(o));
            // The hmac is over exactly the bytes the hash is over.
            assert_eq!(
                v["hmac"],
                json!(key.mac_hex(canonical.as_bytes())),
                "{line}"
            );
            assert_eq!(
                v["receipt_hash"],
                json!(util::sha256_hex(canonical.as_bytes()))
            );
            let spaced = line.replacen(':', ": ", 1);
            for l in [&line, &spaced] {
                let l = format!("{l}\n");
                assert!(check_self(l.as_bytes(), Some(key)).unwrap().keyed);
                // Unchecked without a key; refused under another.
                assert!(check_self(l.as_bytes(), None).unwrap().keyed);
                let why = check_self(l.as_bytes(), Some(&other)).unwrap_err();
                assert!(why.starts_with("bad hmac"), "{why}");
            }
            let upper = line.replace(
                v["hmac"].as_str().unwrap(),
                &v["hmac"].as_str().unwrap().to_uppercase(),
            );
            let why = check_self(format!("{upper}\n").as_bytes(), None).unwrap_err();
            assert!(why.contains("not 64 lowercase hex digits"), "{why}");
        }
        // Opened without the key: the chain links, nothing is authenticated,
        // and nothing unkeyed may follow.
        let keyless = ReceiptLog::new(log.path());
        match keyless.verify().unwrap() {
            Verify::Ok { auth, .. } => assert_eq!((auth.keyed, auth.checked), (14, false)),
            b => panic!("{b:?}"),
        }
        let err = keyless
            .append(&NewReceipt {
                conversation_id: "c",
                tool: "time",
                args: &json!({}),
                result: Some(&json!({})),
                status: Status::Allowed,
                risk: Risk::Low,
                reason: "",
                started_id: None,
                measured: None,
            })
            .unwrap_err();
        assert!(
            err.msg.contains("carries an hmac but the receipt key"),
            "{err}"
        );
        assert_eq!(lines(&log).len(), 14);
        // A keyed receipt must carry its hmac.
        assert!(check_shape(Status::Keyed, true, false).is_err());
        assert!(check_shape(Status::Keyed, false, true).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn ensure_key_marks_an_unkeyed_log_once_and_finishes_a_cut_off_creation() {
        let (plain, dir) = log_with(3);
        let key_path = dir.join(KEY_FILE);
        let ready = ensure_key(&key_path, plain.path(), None).unwrap();
        assert_eq!((ready.created, ready.unkeyed), (true, 3));
        let again = ensure_key(&key_path, plain.path(), None).unwrap();
        assert_eq!((again.created, again.unkeyed), (false, 0));
        let l = lines(&plain);
        assert_eq!(l.len(), 4);
        let keyed: Value = serde_json::from_str(&l[3]).unwrap();
        assert_eq!(
            (keyed["status"].as_str(), keyed["tool"].as_str()),
            (Some("keyed"), Some("receipt key"))
        );
        let log = ReceiptLog::open(plain.path(), &key_path);
        match log.verify().unwrap() {
            Verify::Ok { auth, .. } => assert_eq!(
                auth,
                Auth {
                    unkeyed: 3,
                    keyed: 1,
                    checked: true
                }
            ),
            b => panic!("{b:?}"),
        }
        // Cut off after the `keyed` receipt, before the key got its name:
        // the next call finishes with the same key and no second receipt.
        let mut pending = key_path.as_os_str().to_owned();
        pending.push(".new");
        std::fs::rename(&key_path, &pending).unwrap();
        let ready = ensure_key(&key_path, plain.path(), None).unwrap();
        assert_eq!((ready.created, ready.unkeyed), (true, 3));
        assert_eq!(lines(&plain).len(), 4);
        assert!(!Path::new(&pending).exists());
        assert!(matches!(log.verify().unwrap(), Verify::Ok { .. }));
        std::fs::remove_dir_all(dir).unwrap();
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
                ..
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
            measured: None,
        })
        .unwrap();
        let orig = lines(&log);
        for (i, line) in orig.iter().enumerate() {
            let slow: Stored = serde_json::from_str(line).unwrap();
            let fast = parse_canonical(line.as_bytes());
            // The escaped reason takes the slow path; plain lines the fast one.
            assert_eq!(fast.is_some(), i < 2, "{line}");
            if let Some((r, parts)) = fast {
                assert_eq!(
                    Some(sha_of(parts)),
                    slow.receipt_hash.map(|h| h.into_owned())
                );
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
                measured: None,
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
            assert_eq!(
                log.verify_in_blocks(block, &[]).unwrap(),
                whole,
                "block {block}"
            );
        }
        let mut l = lines(&log);
        l[7] = l[7].replace("\"low\"", "\"high\"");
        write_lines(&log, &l, true);
        for block in [1, 100, 333, 4096] {
            match log.verify_in_blocks(block, &[]).unwrap() {
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
                auth: Auth::default(),
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
            assert_eq!(
                judge_tail(&line[..n], &h, &open, false, None),
                Ok(false),
                "{n}"
            );
            let padded = [&line[..n], &[0u8; 7][..]].concat();
            assert_eq!(
                judge_tail(&padded, &h, &open, false, None),
                Ok(false),
                "{n}"
            );
        }
        assert_eq!(judge_tail(&[0u8; 3], &h, &open, false, None), Ok(false));
        // Whole: kept (given its newline) only if it verifies and links.
        assert_eq!(judge_tail(line, &h, &open, false, None), Ok(true));
        assert!(
            judge_tail(line, GENESIS, &open, false, None)
                .unwrap_err()
                .contains("broken link")
        );
        let no_start = judge_tail(line, &h, &[], false, None).unwrap_err();
        assert!(no_start.contains("outcome without a start"), "{no_start}");
        let altered = String::from_utf8(line.to_vec())
            .unwrap()
            .replace("\"failed\"", "\"allowed\"");
        let why = judge_tail(altered.as_bytes(), &h, &open, false, None).unwrap_err();
        assert!(why.contains("bad hash"), "{why}");
        let padded = [line, &[0u8; 2][..]].concat();
        assert!(judge_tail(&padded, &h, &open, false, None).is_err());
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
            measured: None,
        })
        .unwrap();
        let more = std::fs::read(log.path()).unwrap();
        let escaped = &more[all.len()..more.len() - 1];
        assert!(parse_canonical(escaped).is_none(), "the slow path");
        for n in 1..escaped.len() {
            assert_eq!(
                judge_tail(&escaped[..n], &h2, &open2, false, None),
                Ok(false),
                "{n}"
            );
        }
        assert_eq!(judge_tail(escaped, &h2, &open2, false, None), Ok(true));
        // Not the start of a receipt.
        for tail in [
            &b"x"[..],
            b"{\"tool\":\"t",
            b"{\"args_hash\":1",
            b"[",
            b"{}",
        ] {
            assert!(
                judge_tail(tail, &h, &open, false, None).is_err(),
                "{tail:?}"
            );
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
            measured: None,
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
            measured: None,
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
                ..
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
                let why = check_self(format!("{line}\n").as_bytes(), None).unwrap_err();
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
                    measured: None,
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
                    measured: None,
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
            let checked = check_self(with_newline.as_bytes(), None).unwrap();
            match parse_canonical(line.as_bytes()) {
                Some((fast, hash)) => {
                    assert_eq!(Some(sha_of(hash).as_str()), slow.receipt_hash.as_deref());
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
            let again = check_self(respelled.as_bytes(), None).unwrap();
            assert_eq!(
                (again.hash, again.previous_hash),
                (checked.hash, checked.previous_hash)
            );
            v["tool"] = json!("other");
            let edited = serde_json::to_string(&v).unwrap();
            assert!(
                check_self(format!("{edited}\n").as_bytes(), None)
                    .unwrap_err()
                    .starts_with("bad hash")
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn needs_escape_is_serde_jsons_rule() {
        // serde_json escapes a character exactly when the rule says so.
        for c in (0u32..0x80)
            .map(|c| char::from_u32(c).unwrap())
            .chain(['é', '✓', '\u{2028}', '\u{7f}'])
        {
            let s = c.to_string();
            let escaped = serde_json::to_string(&s).unwrap() != format!("\"{s}\"");
            assert_eq!(needs_escape(s.as_bytes()), escaped, "{c:?}");
        }
        // Any byte, and any two neighbouring bytes, anywhere in a word or
        // in the bytes after the last whole word.
        let naive = |s: &[u8]| s.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
        for len in 0..20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    assert_eq!(needs_escape(&s), naive(&s), "{s:?}");
                }
            }
        }
        for at in 0..15 {
            for pair in 0..=u16::MAX {
                let mut s = [b'a'; 16];
                s[at..at + 2].copy_from_slice(&pair.to_le_bytes());
                assert_eq!(needs_escape(&s), naive(&s), "{s:?}");
            }
        }
    }

    #[test]
    fn one_writer_makes_the_line_and_the_canonical_bytes() {
        let keys = KEY_FRAMES.map(|f| f.strip_prefix(b"\"").unwrap().strip_suffix(b"\":").unwrap());
        assert!(keys.is_sorted());
        assert_eq!(KEY_FRAMES.map(|f| f.len()), keys.map(|k| k.len() + 3));
        let (log, dir) = mixed_log();
        let (keyed, keyed_dir) = keyed_log(2);
        for line in lines(&log).iter().chain(&lines(&keyed)) {
            let r: Stored = serde_json::from_str(line).unwrap();
            let mut written = Vec::new();
            r.emit(Members::All, &mut written);
            assert_eq!(String::from_utf8(written).unwrap(), *line);
            // The canonical bytes: the receipt as canonical_json writes it,
            // without its seals.
            let mut v: Value = serde_json::from_str(line).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("hmac");
            o.remove("receipt_hash");
            let mut canonical = Vec::new();
            r.canonical_into(&mut canonical);
            assert_eq!(
                String::from_utf8(canonical.clone()).unwrap(),
                canonical_json(&v)
            );
            if let Some((_, parts)) = parse_canonical(line.as_bytes()) {
                assert_eq!(parts.concat(), canonical, "{line}");
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(keyed_dir).unwrap();
    }

    /// What the fast path takes from a line is what serde_json reads from
    /// it, whatever the line is: it never reads a line otherwise.
    #[test]
    fn the_fast_path_accepts_only_what_serde_json_reads_the_same() {
        let (log, dir) = mixed_log();
        let mut accepted = 0;
        for line in lines(&log) {
            for at in 0..line.len() {
                for with in [
                    &b"x"[..],
                    b"\"",
                    b"\\",
                    b",",
                    b"}",
                    b" ",
                    "é".as_bytes(),
                    b"\x01",
                    &[],
                ] {
                    let mut l = line.as_bytes().to_vec();
                    l.splice(at..at + 1, with.iter().copied());
                    let Some((fast, parts)) = parse_canonical(&l) else {
                        continue;
                    };
                    accepted += 1;
                    let slow: Stored = serde_json::from_slice(&l).unwrap();
                    assert_eq!(fast.values(), slow.values());
                    let mut canonical = Vec::new();
                    slow.canonical_into(&mut canonical);
                    assert_eq!(parts.concat(), canonical);
                }
            }
        }
        // Edits inside values that need no escaping keep a line canonical.
        assert!(accepted > 1000, "{accepted}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_line_not_spelled_canonically_is_never_hashed_as_spelled() {
        let (log, dir) = keyed_log(2);
        let key = log.keying.key().unwrap().clone();
        let l = lines(&log);
        // The members of a receipt's canonical bytes, reordered or spelled
        // otherwise: valid JSON that serde_json reads as the same receipt.
        type Respell = (&'static str, fn(&str) -> String);
        let respell: [Respell; 7] = [
            ("a space after a colon", |c| {
                c.replacen("\":\"", "\": \"", 1)
            }),
            ("spaces around the object", |c| format!(" {c} ")),
            ("a tab after a comma", |c| c.replacen("\",\"", "\",\t\"", 1)),
            ("keys in reverse order", |c| {
                let v: serde_json::Map<String, Value> = serde_json::from_str(c).unwrap();
                let members: Vec<String> = v
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("{}:{v}", json!(k)))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
            ("a letter as \\u escape", |c| {
                c.replacen("\"tool\":\"s", "\"tool\":\"\\u0073", 1)
            }),
            ("a key as \\u escape", |c| {
                c.replacen("\"risk\"", "\"\\u0072isk\"", 1)
            }),
            ("a tab as \\u escape, upper-case hex", |c| {
                c.replacen("\\t", "\\u0009", 1)
                    .replacen("\"risk\"", "\"ris\\u006B\"", 1)
            }),
        ];
        for (i, line) in l.iter().enumerate() {
            let v: Value = serde_json::from_str(line).unwrap();
            let r: Stored = serde_json::from_str(line).unwrap();
            let mut canonical = Vec::new();
            r.canonical_into(&mut canonical);
            let canonical = String::from_utf8(canonical).unwrap();
            let seals = |c: &str| {
                format!(
                    ",\"hmac\":\"{}\",\"receipt_hash\":\"{}\"}}",
                    key.mac_hex(c.as_bytes()),
                    util::sha256_hex(c.as_bytes())
                )
            };
            for (what, f) in &respell {
                let spelled = f(&canonical);
                if spelled == canonical {
                    continue;
                }
                let same: Value = serde_json::from_str(&spelled).unwrap();
                let mut o = v.as_object().unwrap().clone();
                o.remove("hmac");
                o.remove("receipt_hash");
                assert_eq!(same, Value::Object(o), "{what}");
                let open = spelled.trim_end().strip_suffix('}').unwrap();
                // Sealed over its own spelling, as a forger hashing the
                // bytes as written would: refused.
                let forged = format!("{open}{}\n", seals(&spelled));
                assert!(
                    parse_canonical(forged.trim_end().as_bytes()).is_none(),
                    "{what}"
                );
                let why = check_self(forged.as_bytes(), Some(&key)).unwrap_err();
                assert!(why.starts_with("bad hash"), "{what}: {why}");
                let mut edited = l.clone();
                edited[i] = forged.trim_end().to_string();
                write_lines(&log, &edited, true);
                let (p, why) = broken_at(&log);
                assert_eq!(p, i as u64 + 1, "{what}");
                assert!(why.starts_with("bad hash"), "{what}: {why}");
                // Sealed over the canonical bytes of what it spells: the
                // same receipt, with the same hash.
                let same = format!("{open}{}\n", seals(&canonical));
                assert_eq!(
                    check_self(same.as_bytes(), Some(&key)).unwrap().hash,
                    v["receipt_hash"].as_str().unwrap(),
                    "{what}"
                );
            }
            // Receipts hold no numbers: a number where a string belongs, in
            // any spelling, is refused however it is sealed.
            for number in ["1", "1.0", "1e0", "-0"] {
                let spelled = canonical
                    .replacen("\"risk\":\"medium\"", &format!("\"risk\":{number}"), 1)
                    .replacen("\"risk\":\"high\"", &format!("\"risk\":{number}"), 1);
                let open = spelled.strip_suffix('}').unwrap();
                let forged = format!("{open}{}\n", seals(&spelled));
                let why = check_self(forged.as_bytes(), Some(&key)).unwrap_err();
                assert!(why.starts_with("invalid receipt"), "{number}: {why}");
            }
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
            assert_eq!(
                log.verify_in_blocks(block, &[]).unwrap(),
                whole,
                "block {block}"
            );
        }
        // A break after the cut-off start wins over reporting it.
        let mut l = lines(&log);
        let before = l[11].clone();
        l[11] = l[11].replace("\"allowed\"", "\"failed\"");
        assert_ne!(l[11], before);
        write_lines(&log, &l, true);
        for block in [1, 100, 333, 4096] {
            match log.verify_in_blocks(block, &[]).unwrap() {
                Verify::Broken {
                    position, count, ..
                } => assert_eq!((position, count), (12, 12)),
                ok => panic!("{ok:?}"),
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A fresh directory, removed when dropped.
    struct Tmp(PathBuf);

    impl Tmp {
        fn new() -> Tmp {
            let dir = std::env::temp_dir().join(util::new_id("latchclaw-anchor"));
            std::fs::create_dir_all(&dir).unwrap();
            Tmp(dir)
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
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
            measured: None,
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
