//! The gateway's one bearer token: made by `latchclaw gateway token`,
//! shown once, kept only as its SHA-256 in `<state>/gateway.token` (0600).
//! A request's token is hashed and compared with the stored hash in
//! constant time; the file is read again when it changes, so `--rotate`
//! takes effect at the next request without a restart.

use crate::error::{Error, IoContext, Kind, Result};
use crate::security::redact::Redactor;
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub const TOKEN_FILE: &str = "gateway.token";
/// Tokens start with it, so a scanner (or a person) can tell one.
const PREFIX: &str = "lcgw_";

/// Creates a token: 32 bytes from the kernel's random source, its hash
/// written atomically (refused if a token exists, unless `rotate`).
/// Returns the token, which is nowhere else.
pub fn create(state_dir: &Path, rotate: bool) -> Result<String> {
    let path = state_dir.join(TOKEN_FILE);
    if !rotate && std::fs::symlink_metadata(&path).is_ok() {
        return Err(Error::usage(format!(
            "a token exists ({}); --rotate replaces it (the old one stops working)",
            path.display()
        )));
    }
    crate::util::private_dir(state_dir)?;
    let token = format!(
        "{PREFIX}{}",
        crate::util::hex(&crate::receipts::random_key()?)
    );
    let text = format!("{}\n", crate::util::sha256_hex(token.as_bytes()));
    // Without --rotate, link(2) fails if another `gateway token` won the race.
    if let Err(e) = crate::util::write_file_atomic(&path, text.as_bytes(), 0o600, rotate) {
        return Err(if e.kind() == std::io::ErrorKind::AlreadyExists {
            Error::usage(format!(
                "a token exists ({}); --rotate replaces it (the old one stops working)",
                path.display()
            ))
        } else {
            Error::runtime(format!("cannot write {}: {e}", path.display()))
        });
    }
    Ok(token)
}

/// What identifies one version of the file.
type Stamp = (u64, i64, i64, u64);

/// The stored hash, read again whenever the file changes.
pub struct TokenFile {
    path: PathBuf,
    cached: Mutex<Option<(Stamp, [u8; 32])>>,
    /// The hash of the token last given to the redactor.
    redacted: Mutex<Option<[u8; 32]>>,
    /// The gateway's redactor, which learns a token once it is presented.
    redactor: Arc<Redactor>,
    /// Why the file was last refused (logged once).
    refused: Mutex<Option<String>>,
}

impl TokenFile {
    pub fn new(state_dir: &Path, redactor: Arc<Redactor>) -> TokenFile {
        TokenFile {
            path: state_dir.join(TOKEN_FILE),
            cached: Mutex::new(None),
            redacted: Mutex::new(None),
            redactor,
            refused: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored hash: `Ok(None)` when there is no token; an error for a
    /// file latchclaw did not write or that others may change.
    pub fn load(&self) -> Result<Option<[u8; 32]>> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = None;
                return Ok(None);
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "cannot read {}: {e}",
                    self.path.display()
                )));
            }
        };
        // On every stat, not only when the file changed: chmod and chown
        // leave the stamp as it was.
        let uid = crate::sys::process::effective_uid();
        if meta.mode() & 0o022 != 0 || meta.uid() != uid {
            return Err(Error::new(
                Kind::Integrity,
                format!(
                    "{} may be written by others (mode {:o}, owner uid {}; this user is {uid}): \
                     anyone could put their own token in, so none is accepted; `chmod 600 {0}` \
                     as its owner, or `latchclaw gateway token --rotate`",
                    self.path.display(),
                    meta.mode() & 0o777,
                    meta.uid()
                ),
            ));
        }
        let stamp = (meta.ino(), meta.mtime(), meta.mtime_nsec(), meta.len());
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, h)) = *cached
            && s == stamp
        {
            return Ok(Some(h));
        }
        let text = std::fs::read_to_string(&self.path)
            .ctx(|| format!("cannot read {}", self.path.display()))?;
        let hash = parse_hash(text.trim()).ok_or_else(|| {
            Error::new(
                Kind::Integrity,
                format!(
                    "{} does not hold a SHA-256 (64 hex digits); `latchclaw gateway token \
                     --rotate` writes a new one",
                    self.path.display()
                ),
            )
        })?;
        *cached = Some((stamp, hash));
        Ok(Some(hash))
    }

    /// Whether `authorization` (the header's value) is `Bearer TOKEN` with
    /// the stored token: the scheme as written, then spaces or tabs (ASCII
    /// only), then the token and nothing else.
    pub fn check(&self, authorization: Option<&str>) -> bool {
        let Some(token) = authorization
            .and_then(|v| v.strip_prefix("Bearer"))
            .filter(|t| t.starts_with([' ', '\t']))
            .map(|t| t.trim_matches([' ', '\t']))
        else {
            return false;
        };
        let stored = match self.load() {
            Ok(Some(h)) => {
                *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
                h
            }
            Ok(None) => return false,
            Err(e) => {
                // Logged once per reason, not per request.
                let mut last = self.refused.lock().unwrap_or_else(|e| e.into_inner());
                if last.as_deref() != Some(e.msg.as_str()) {
                    log::error!(target: "event::gateway_token", "every request is refused: {}", e.msg);
                    *last = Some(e.msg);
                }
                return false;
            }
        };
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if !constant_time_eq(&presented, &stored) {
            return false;
        }
        // From now on the gateway's redactor (the process's) knows it: out
        // of responses, logs, tool results and memory read-outs, should a
        // message carry it.
        let mut redacted = self.redacted.lock().unwrap_or_else(|e| e.into_inner());
        if *redacted != Some(stored) {
            redact_token(token, &self.redactor);
            *redacted = Some(stored);
        }
        true
    }
}

/// Teaches `redactor` the token and the forms it is likely to be quoted
/// in: without its prefix, and upper-cased (hex is case-insensitive to many
/// readers).
pub fn redact_token(token: &str, redactor: &Redactor) {
    let hex = token.strip_prefix(PREFIX).unwrap_or(token);
    for v in [
        token,
        hex,
        &hex.to_ascii_uppercase(),
        &token.to_ascii_uppercase(),
    ] {
        redactor.learn("gateway_token", v);
    }
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// Equal or not, in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keeps the compiler from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// A token bucket: `per_minute` requests a minute, as a burst or spread.
pub struct RateLimit {
    per_minute: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimit {
    pub fn new(per_minute: u32) -> RateLimit {
        RateLimit {
            per_minute: per_minute as f64,
            state: Mutex::new((per_minute as f64, Instant::now())),
        }
    }

    /// Takes one request, or says in how many seconds one is allowed.
    pub fn take(&self) -> std::result::Result<(), u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let per_sec = self.per_minute / 60.0;
        s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * per_sec).min(self.per_minute);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - s.0) / per_sec).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lc-gw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_token_is_stored_as_its_hash_and_checked_whole() {
        let dir = temp_dir("auth");
        let token = create(&dir, false).unwrap();
        assert!(token.starts_with(PREFIX) && token.len() == PREFIX.len() + 64);
        let stored = std::fs::read_to_string(dir.join(TOKEN_FILE)).unwrap();
        assert!(!stored.contains(&token[PREFIX.len()..]));
        assert_eq!(stored.trim(), crate::util::sha256_hex(token.as_bytes()));
        let mode = std::fs::metadata(dir.join(TOKEN_FILE)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let redactor = Arc::new(Redactor::new());
        let f = TokenFile::new(&dir, Arc::clone(&redactor));
        assert!(f.check(Some(&format!("Bearer {token}"))));
        // Once presented, the token is a secret the gateway's redactor knows.
        assert!(
            !redactor
                .redact(&format!("said {token}"))
                .contains(&token[PREFIX.len()..])
        );
        assert!(f.check(Some(&format!("Bearer\t {token}\t "))));
        for bad in [
            format!("Bearer\u{a0}{token}"),
            format!("Bearer {token}\u{85}"),
            format!("Bearer{token}"),
            String::new(),
            token.clone(),
            format!("Bearer {}", &token[..token.len() - 1]),
            format!("Bearer {token}x"),
            format!("bearer {token}"),
            format!("Bearer {}", token.to_uppercase()),
            "Bearer ".into(),
        ] {
            assert!(!f.check(Some(&bad)), "{bad}");
        }
        assert!(!f.check(None));
        let e = create(&dir, false).unwrap_err();
        assert!(e.msg.contains("--rotate replaces it"), "{}", e.msg);
        let new = create(&dir, true).unwrap();
        assert!(!f.check(Some(&format!("Bearer {token}"))));
        assert!(f.check(Some(&format!("Bearer {new}"))));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_rate_limit_refills_and_says_when() {
        let r = RateLimit::new(2);
        assert_eq!((r.take(), r.take()), (Ok(()), Ok(())));
        assert_eq!(r.take(), Err(30));
    }
}
