//! Secrets out of everything a tool call leaves behind: the one redactor
//! that tool results (output, error, metadata) pass through before the
//! model, the receipts, memory or a log line sees them, and that provider
//! errors, memory read-outs and log lines pass through before they are
//! shown or cut short.
//!
//! Two kinds of secret:
//! - **known values**: the value of every provider's `api_key_env` variable,
//!   of `[tools.web_search] api_key_env` and of every variable named in
//!   `[security] secret_env`, matched
//!   exactly wherever they appear. A value shorter than
//!   [`MIN_SECRET_BYTES`] is not matched (it would match ordinary text);
//!   at a cut (the start or end of the text, a `…[truncated` marker) a
//!   piece of [`MIN_SECRET_BYTES`] or more of a known value is redacted
//!   too, so a secret split by truncation does not leak in halves.
//! - **patterns**: AWS access key ids and secrets, `sk-…` keys, GitHub,
//!   GitLab and Slack tokens, JWTs, PEM private-key blocks (also cut short,
//!   with no END), `password=` / `token:` style assignments (the value only)
//!   and the userinfo of URLs (`https://user:pass@host`).
//!
//! Each is replaced by `[REDACTED:kind]`. The scanner is hand-written and
//! linear: it looks only at a few trigger bytes, every rule reads a bounded
//! distance or consumes what it read, and a rule that failed over a run of
//! bytes is not tried again inside that run.
//!
//! There is no process-wide redactor to look up: one is made where the
//! process starts (`main.rs`), shared as an `Arc<Redactor>` with the logger
//! and the command, and handed to whatever shows or keeps text (memory,
//! providers, the runtime, the gateway). Secrets learned later (the
//! config's, when the command loads it; the gateway's token, when a request
//! presents it) are added to that shared one ([`Redactor::learn`]), so
//! every holder redacts them from then on.

use crate::config::Config;
use memchr::memmem;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{RwLock, RwLockReadGuard};

/// Known values shorter than this are not redacted by exact match: eight
/// bytes of a random key are still unguessable, and shorter values
/// ("admin", a PIN) would blank out ordinary words.
pub const MIN_SECRET_BYTES: usize = 8;

/// What replaces a secret: `[REDACTED:kind]`.
pub const MARK: &str = "[REDACTED:";

/// Where a tool cut its output (`util::truncate_middle`, the shell's
/// capture, `file_read`, `file_list`).
const CUT: &[u8] = "\n…[truncated".as_bytes();

/// How many redactions of each kind; `kind` as in `[REDACTED:kind]`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts(BTreeMap<String, u32>);

impl Counts {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn total(&self) -> u32 {
        self.0.values().sum()
    }

    pub fn get(&self, kind: &str) -> u32 {
        self.0.get(kind).copied().unwrap_or(0)
    }

    fn add(&mut self, kind: &str) {
        *self.0.entry(kind.to_string()).or_default() += 1;
    }

    /// `{"kind": n, …}` for a result's metadata.
    pub fn to_json(&self) -> Value {
        self.0
            .iter()
            .map(|(k, n)| (k.clone(), Value::from(*n)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// `aws_access_key_id 1, private_key 2`: names the kinds, never a value.
    pub fn summary(&self) -> String {
        self.0
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A value matched exactly, and the variable it came from.
#[derive(Clone)]
struct Known {
    label: String,
    value: Vec<u8>,
    finder: memmem::Finder<'static>,
}

/// The redactor: the known values and the patterns. The known values sit
/// behind a lock so that a shared redactor (`Arc<Redactor>`) can learn a
/// secret while others redact with it; values are only ever added.
#[derive(Default)]
pub struct Redactor {
    known: RwLock<Vec<Known>>,
    /// Variables whose values were too short to match (names only).
    short: Vec<String>,
}

impl Clone for Redactor {
    fn clone(&self) -> Redactor {
        Redactor {
            known: RwLock::new(self.known().clone()),
            short: self.short.clone(),
        }
    }
}

impl std::fmt::Debug for Redactor {
    // Never prints a value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.known();
        let names: Vec<&str> = known.iter().map(|k| k.label.as_str()).collect();
        f.debug_struct("Redactor").field("known", &names).finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Index into `Redactor::known` (sorts first: a known value names its
    /// variable, which says more than a pattern's kind).
    Known(usize),
    Pattern(&'static str),
}

#[derive(Clone, Copy, Debug)]
struct Span {
    start: usize,
    end: usize,
    kind: Kind,
}

impl Redactor {
    /// Patterns only, no known values.
    pub fn new() -> Redactor {
        Redactor::default()
    }

    /// The known values (a poisoned lock still holds whole values: they
    /// are only pushed).
    fn known(&self) -> RwLockReadGuard<'_, Vec<Known>> {
        self.known.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a known value, labelled `env:NAME`. Values shorter than
    /// [`MIN_SECRET_BYTES`] are left out (returns false); a value already
    /// known is not added twice.
    pub fn add_secret(&mut self, name: &str, value: &str) -> bool {
        let known = self.known.get_mut().unwrap_or_else(|e| e.into_inner());
        push_known(known, name, value)
    }

    /// [`Redactor::add_secret`] on a shared redactor: every holder of it
    /// redacts the value from now on (the gateway's token, once a request
    /// presents it).
    pub fn learn(&self, name: &str, value: &str) -> bool {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        push_known(&mut known, name, value)
    }

    /// Learns every secret `cfg` names ([`Redactor::from_config`]); returns
    /// the variables left out as too short, for the caller to mention.
    pub fn learn_config(&self, cfg: &Config) -> Vec<String> {
        let from = Redactor::from_config(cfg);
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        for k in from.known().iter() {
            if !known.iter().any(|o| o.value == k.value) {
                known.push(k.clone());
            }
        }
        from.short
    }

    /// This redactor and one more known value.
    pub fn with_secret(&self, name: &str, value: &str) -> Redactor {
        let mut r = self.clone();
        r.add_secret(name, value);
        r
    }

    /// Every secret the config names: each provider's `api_key_env`,
    /// web_search's, each `security.secret_env` variable, `code_run`'s
    /// secrets and each MCP server's `bearer_token_env`, read from the
    /// environment now.
    pub fn from_config(cfg: &Config) -> Redactor {
        Redactor::from_config_with(cfg, |name| std::env::var(name).ok())
    }

    /// [`Redactor::from_config`] with the variables read by `lookup`.
    pub fn from_config_with(cfg: &Config, lookup: impl Fn(&str) -> Option<String>) -> Redactor {
        let mut r = Redactor::new();
        let names = cfg
            .providers
            .values()
            .filter_map(|p| p.api_key_env())
            .chain(
                cfg.tools
                    .web_search
                    .as_ref()
                    .and_then(|w| w.api_key_env.as_deref()),
            )
            .chain(cfg.security.secret_env.iter().map(String::as_str))
            .chain(cfg.tools.code_run.secrets.values().map(|s| s.env.as_str()))
            .chain(
                cfg.mcp
                    .servers
                    .values()
                    .filter_map(|s| s.bearer_token_env.as_deref()),
            );
        for name in names {
            let Some(value) = lookup(name) else {
                continue;
            };
            if !value.is_empty() && !r.add_secret(name, &value) {
                r.short.push(name.to_string());
            }
        }
        r
    }

    /// The variables `from_config` left out: set, but shorter than
    /// [`MIN_SECRET_BYTES`].
    pub fn too_short(&self) -> &[String] {
        &self.short
    }

    /// How many known values it matches exactly.
    pub fn known_count(&self) -> usize {
        self.known().len()
    }

    /// `text` with every secret replaced by `[REDACTED:kind]`; borrowed
    /// when there was none.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.redact_counted(text, &mut Counts::default())
    }

    /// Like [`Redactor::redact`], adding what it replaced to `counts`.
    pub fn redact_counted<'t>(&self, text: &'t str, counts: &mut Counts) -> Cow<'t, str> {
        let known = self.known();
        let spans = Redactor::spans(&known, text);
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len() + 16 * spans.len());
        let mut last = 0;
        for s in spans {
            let label = match s.kind {
                Kind::Known(i) => known[i].label.as_str(),
                Kind::Pattern(k) => k,
            };
            out.push_str(&text[last..s.start]);
            out.push_str(MARK);
            out.push_str(label);
            out.push(']');
            counts.add(label);
            last = s.end;
        }
        out.push_str(&text[last..]);
        Cow::Owned(out)
    }

    /// Redacts in place; true when something was replaced.
    pub fn redact_string(&self, s: &mut String, counts: &mut Counts) -> bool {
        match self.redact_counted(s, counts) {
            Cow::Borrowed(_) => false,
            Cow::Owned(o) => {
                *s = o;
                true
            }
        }
    }

    /// Every string in a JSON value (object keys stay).
    pub fn redact_json(&self, v: &mut Value, counts: &mut Counts) {
        match v {
            Value::String(s) => {
                self.redact_string(s, counts);
            }
            Value::Array(a) => a.iter_mut().for_each(|v| self.redact_json(v, counts)),
            Value::Object(m) => m.values_mut().for_each(|v| self.redact_json(v, counts)),
            _ => {}
        }
    }

    /// For an error or a log line: redacted, made printable, and only then
    /// cut to `max_chars` (with `…`), so a cut never leaves part of a
    /// secret behind.
    pub fn scrub_cut(&self, text: &str, max_chars: usize) -> String {
        let clean = crate::util::printable(&self.redact(text));
        match clean.char_indices().nth(max_chars) {
            Some((i, _)) => format!("{}…", &clean[..i]),
            None => clean,
        }
    }

    /// The spans to replace, sorted, not overlapping.
    fn spans(known: &[Known], text: &str) -> Vec<Span> {
        let b = text.as_bytes();
        let mut spans = Scan::new(b).run();
        for (i, k) in known.iter().enumerate() {
            spans.extend(k.finder.find_iter(b).map(|at| Span {
                start: at,
                end: at + k.value.len(),
                kind: Kind::Known(i),
            }));
        }
        if !known.is_empty() {
            Redactor::pieces_at_cuts(known, text, &mut spans);
        }
        if spans.is_empty() {
            return spans;
        }
        crate::util::sort::sort_by_key(&mut spans, |s| (s.start, std::cmp::Reverse(s.end), s.kind));
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for s in spans {
            match merged.last_mut() {
                Some(m) if s.start < m.end => m.end = m.end.max(s.end),
                _ => merged.push(s),
            }
        }
        merged
    }

    /// Pieces (at least `MIN_SECRET_BYTES`) of a known value that end where
    /// the text was cut or ends, or start where it resumes or begins.
    fn pieces_at_cuts(known: &[Known], text: &str, spans: &mut Vec<Span>) {
        let b = text.as_bytes();
        let mut ends = vec![b.len()];
        let mut starts = vec![0];
        for at in memmem::find_iter(b, CUT) {
            ends.push(at);
            let line = at + 1;
            let resume = memchr::memchr(b'\n', &b[line..]).map_or(b.len(), |n| line + n + 1);
            starts.push(resume);
        }
        for (i, k) in known.iter().enumerate() {
            let v = &k.value;
            for &e in &ends {
                let found = (MIN_SECRET_BYTES..v.len())
                    .rev()
                    .find(|&n| n <= e && b[e - n..e] == v[..n]);
                if let Some(n) = found {
                    let mut start = e - n;
                    while !text.is_char_boundary(start) {
                        start -= 1;
                    }
                    spans.push(Span {
                        start,
                        end: e,
                        kind: Kind::Known(i),
                    });
                }
            }
            for &s in &starts {
                let found = (MIN_SECRET_BYTES..v.len())
                    .rev()
                    .find(|&n| b[s..].starts_with(&v[v.len() - n..]));
                if let Some(n) = found {
                    let mut end = s + n;
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    spans.push(Span {
                        start: s,
                        end,
                        kind: Kind::Known(i),
                    });
                }
            }
        }
    }
}

/// Adds `value` as `env:NAME` unless it is too short (false) or known.
fn push_known(known: &mut Vec<Known>, name: &str, value: &str) -> bool {
    if value.len() < MIN_SECRET_BYTES {
        return false;
    }
    if !known.iter().any(|k| k.value == value.as_bytes()) {
        known.push(Known {
            label: format!("env:{name}"),
            value: value.as_bytes().to_vec(),
            finder: memmem::Finder::new(value.as_bytes()).into_owned(),
        });
    }
    true
}

// ---------------------------------------------------------------------------
// The pattern scanner.

/// The rules that remember where they last failed.
const SK: usize = 0;
const GLPAT: usize = 1;
const XOX: usize = 2;
const GH: usize = 3;
const GHPAT: usize = 4;
const JWT: usize = 5;
const ASSIGN: usize = 6;
const URL: usize = 7;
const RULES: usize = 8;

/// The bytes at which some rule may match (its prefix's last byte or its
/// separator); everything else is skipped over.
static TRIGGER: [bool; 256] = {
    let mut t = [false; 256];
    t[b'-' as usize] = true;
    t[b'_' as usize] = true;
    t[b'=' as usize] = true;
    t[b':' as usize] = true;
    t[b'J' as usize] = true;
    t[b'K' as usize] = true;
    t[b'S' as usize] = true;
    t
};

/// Character classes, one table lookup each (the scanner's inner loops).
const ALNUM: u16 = 1;
/// Letters, digits, `-`, `_`: `sk-` keys, GitLab tokens, JWT parts.
const TOKEN: u16 = 1 << 1;
/// Letters, digits, `_`.
const WORD: u16 = 1 << 2;
/// Letters, digits, `-`: Slack tokens.
const SLACK: u16 = 1 << 3;
/// Base64 without padding.
const BASE64: u16 = 1 << 4;
/// Base64 with padding: a PEM body line.
const PEM: u16 = 1 << 5;
/// What a key name is made of: letters, digits, `_`, `-`, `.`.
const KEY: u16 = 1 << 6;
/// Where a bare value ends: space, control, quotes, delimiters.
const VALUE_END: u16 = 1 << 7;
/// Where a URL's authority ends.
const AUTHORITY_END: u16 = 1 << 8;
/// Upper-case letters and digits: an AWS key id.
const UPPER: u16 = 1 << 9;

static CLASS: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let mut k = 0;
        let alnum = b.is_ascii_alphanumeric();
        if alnum {
            k |= ALNUM | TOKEN | WORD | SLACK | BASE64 | PEM | KEY;
        }
        if b.is_ascii_uppercase() || b.is_ascii_digit() {
            k |= UPPER;
        }
        if b == b'-' {
            k |= TOKEN | SLACK | KEY;
        }
        if b == b'_' {
            k |= TOKEN | WORD | KEY;
        }
        if b == b'.' {
            k |= KEY;
        }
        if b == b'+' || b == b'/' {
            k |= BASE64 | PEM;
        }
        if b == b'=' {
            k |= PEM;
        }
        if b <= b' ' || b == 0x7f {
            k |= VALUE_END | AUTHORITY_END;
        }
        if matches!(
            b,
            b'"' | b'\'' | b'`' | b',' | b';' | b'&' | b'<' | b'>' | b')' | b'}' | b']'
        ) {
            k |= VALUE_END;
        }
        if matches!(
            b,
            b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>' | b'`' | b'\\'
        ) {
            k |= AUTHORITY_END;
        }
        t[c] = k;
        c += 1;
    }
    t
};

fn is(c: u8, class: u16) -> bool {
    CLASS[c as usize] & class != 0
}

fn has_digit_or_upper(s: &[u8]) -> bool {
    s.iter()
        .any(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
}
fn has_digit(s: &[u8]) -> bool {
    s.iter().any(u8::is_ascii_digit)
}
fn any(_: &[u8]) -> bool {
    true
}

/// A prefixed token: its prefix, body characters, shortest body, and a
/// test on the body.
struct Token {
    rule: usize,
    prefix: usize,
    body: u16,
    min: usize,
    test: fn(&[u8]) -> bool,
}

/// A token's body may be shorter where the text was cut right after it.
const MIN_AT_CUT: usize = 8;

struct Scan<'b> {
    b: &'b [u8],
    out: Vec<Span>,
    /// Per rule: a candidate starting before this already failed.
    skip: [usize; RULES],
    /// The end of the last span: nothing before it is looked at again.
    done: usize,
}

impl<'b> Scan<'b> {
    fn new(b: &'b [u8]) -> Scan<'b> {
        Scan {
            b,
            out: Vec::new(),
            skip: [0; RULES],
            done: 0,
        }
    }

    fn run(mut self) -> Vec<Span> {
        let b = self.b;
        let n = b.len();
        let mut i = 0;
        while i < n {
            if !TRIGGER[b[i] as usize] {
                i += 1;
                continue;
            }
            if i < self.done {
                i = self.done;
                continue;
            }
            match b[i] {
                b'-' => self.dash(i),
                b'_' => self.underscore(i),
                b'J' => self.jwt(i),
                b'K' | b'S' => self.aws(i),
                c => {
                    if c == b':' && b[i + 1..].starts_with(b"//") {
                        self.url(i);
                    }
                    if i >= self.done {
                        self.assignment(i);
                    }
                }
            }
            i += 1;
        }
        self.out
    }

    fn push(&mut self, start: usize, end: usize, kind: &'static str) {
        self.out.push(Span {
            start,
            end,
            kind: Kind::Pattern(kind),
        });
        self.done = self.done.max(end);
    }

    fn run_of(&self, from: usize, class: u16) -> usize {
        let mut j = from;
        while j < self.b.len() && is(self.b[j], class) {
            j += 1;
        }
        j
    }

    fn starts_word(&self, start: usize) -> bool {
        start == 0 || !is(self.b[start - 1], ALNUM)
    }

    /// Whether the text was cut (or ends) right at `at`.
    fn cut_at(&self, at: usize) -> bool {
        at == self.b.len() || self.b[at..].starts_with(CUT)
    }

    /// A prefixed token starting at `start`; returns its kind's span.
    fn token(&mut self, start: usize, t: &Token, kind: fn(&[u8]) -> &'static str) {
        if start < self.skip[t.rule] || !self.starts_word(start) {
            return;
        }
        let from = start + t.prefix;
        let end = self.run_of(from, t.body);
        let body = &self.b[from..end];
        let min = if self.cut_at(end) {
            t.min.min(MIN_AT_CUT)
        } else {
            t.min
        };
        if body.len() >= min && (t.test)(body) {
            self.push(start, end, kind(body));
        } else {
            // Any later start inside this run has a suffix of this body:
            // it fails too.
            self.skip[t.rule] = end;
        }
    }

    fn dash(&mut self, i: usize) {
        let b = self.b;
        if b[i..].starts_with(b"-----BEGIN ") {
            self.pem_begin(i);
        } else if b[i..].starts_with(b"-----END ") {
            self.pem_end(i);
        } else if i >= 2 && &b[i - 2..i] == b"sk" {
            let t = Token {
                rule: SK,
                prefix: 3,
                body: TOKEN,
                min: 20,
                test: has_digit_or_upper,
            };
            self.token(i - 2, &t, |body| {
                if body.starts_with(b"ant-") {
                    "anthropic_key"
                } else {
                    "openai_key"
                }
            });
        } else if i >= 5 && &b[i - 5..i] == b"glpat" {
            let t = Token {
                rule: GLPAT,
                prefix: 6,
                body: TOKEN,
                min: 20,
                test: any,
            };
            self.token(i - 5, &t, |_| "gitlab_token");
        } else if i >= 4 && &b[i - 4..i - 1] == b"xox" && b"abprs".contains(&b[i - 1]) {
            let t = Token {
                rule: XOX,
                prefix: 5,
                body: SLACK,
                min: 10,
                test: has_digit,
            };
            self.token(i - 4, &t, |_| "slack_token");
        }
    }

    fn underscore(&mut self, i: usize) {
        let b = self.b;
        if i >= 3 && &b[i - 3..i - 1] == b"gh" && b"pousr".contains(&b[i - 1]) {
            let t = Token {
                rule: GH,
                prefix: 4,
                body: ALNUM,
                min: 30,
                test: any,
            };
            self.token(i - 3, &t, |_| "github_token");
        } else if i >= 10 && &b[i - 10..i] == b"github_pat" {
            let t = Token {
                rule: GHPAT,
                prefix: 11,
                body: WORD,
                min: 40,
                test: any,
            };
            self.token(i - 10, &t, |_| "github_token");
        }
    }

    /// `eyJ…` `.` `…` `.` `…`: a JSON Web Token (header, claims, signature).
    fn jwt(&mut self, i: usize) {
        let b = self.b;
        if i < 2 || &b[i - 2..i] != b"ey" {
            return;
        }
        let start = i - 2;
        if start < self.skip[JWT] || !self.starts_word(start) {
            return;
        }
        let header = self.run_of(start, TOKEN);
        if header - start < 10 || b.get(header) != Some(&b'.') {
            self.skip[JWT] = header;
            return;
        }
        let claims = self.run_of(header + 1, TOKEN);
        if claims - header - 1 < 4 || b.get(claims) != Some(&b'.') {
            self.skip[JWT] = claims;
            return;
        }
        let end = self.run_of(claims + 1, TOKEN);
        self.push(start, end, "jwt");
    }

    /// `AKIA`/`ASIA` and 16 upper-case letters or digits; an AWS secret (40
    /// base64 characters) right after it (a CSV row, `id:secret`) goes too.
    fn aws(&mut self, i: usize) {
        let b = self.b;
        if i < 1 || b[i - 1] != b'A' || !b[i + 1..].starts_with(b"IA") {
            return;
        }
        let start = i - 1;
        let end = start + 20;
        if !self.starts_word(start)
            || end > b.len()
            || !b[start + 4..end].iter().all(|&c| is(c, UPPER))
            || b.get(end).is_some_and(|&c| is(c, ALNUM))
        {
            return;
        }
        self.push(start, end, "aws_access_key_id");
        let mut p = end;
        while p < b.len() && p < end + 8 && b" \t,:;=|\"'".contains(&b[p]) {
            p += 1;
        }
        let q = self.run_of(p, BASE64);
        if q - p == 40 && !b.get(q).is_some_and(|&c| is(c, PEM)) {
            self.push(p, q, "aws_secret_access_key");
        }
    }

    /// `scheme://user:pass@host`: the userinfo goes, scheme and host stay.
    /// A bare user name (`ssh://git@host`) is not a secret.
    fn url(&mut self, i: usize) {
        let b = self.b;
        if i == 0 || !b[i - 1].is_ascii_alphabetic() || i + 3 < self.skip[URL] {
            return;
        }
        let from = i + 3;
        let mut at = None;
        let mut j = from;
        while j < b.len() {
            let c = b[j];
            if is(c, AUTHORITY_END) {
                break;
            }
            if c == b'@' {
                at = Some(j);
            }
            j += 1;
        }
        self.skip[URL] = j;
        let Some(at) = at else { return };
        let user = &b[from..at];
        if user.is_empty() || user.starts_with(MARK.as_bytes()) {
            return;
        }
        if user.contains(&b':') || user.len() >= 16 {
            self.push(from, at, "url_userinfo");
        }
    }

    /// `KEY=value`, `KEY: value`, `"key": "value"`, `key := value`,
    /// `key => value` where KEY names a password, token, secret or API key:
    /// the value goes, the key stays.
    fn assignment(&mut self, i: usize) {
        let b = self.b;
        if i < self.skip[ASSIGN] {
            return;
        }
        let sep = b[i];
        let next = b.get(i + 1).copied();
        // `==`, `!=`, `<=`, `>=` compare; `:=` is read at its `:`.
        if sep == b'=' && (next == Some(b'=') || i > 0 && b"=!<>:".contains(&b[i - 1])) {
            return;
        }
        let value_from = match (sep, next) {
            (b':', Some(b'=')) | (b'=', Some(b'>')) => i + 2,
            _ => i + 1,
        };
        // The key: back over a little space and a closing quote.
        let mut j = i;
        let mut spaces = 0;
        while j > 0 && matches!(b[j - 1], b' ' | b'\t') && spaces < 8 {
            j -= 1;
            spaces += 1;
        }
        if j > 0 && matches!(b[j - 1], b'"' | b'\'') {
            j -= 1;
        }
        let key_end = j;
        // Quick refusal: every key this rule knows ends in one of these.
        if key_end < 2 {
            return;
        }
        let last2 = [
            b[key_end - 2].to_ascii_lowercase(),
            b[key_end - 1].to_ascii_lowercase(),
        ];
        if !matches!(
            &last2,
            b"rd" | b"wd" | b"se" | b"et" | b"ey" | b"en" | b"on"
        ) {
            return;
        }
        while j > 0 && is(b[j - 1], KEY) && key_end - j < 64 {
            j -= 1;
        }
        let Some(kind) = key_kind(&b[j..key_end]) else {
            return;
        };
        let (mut start, mut end, quoted) = self.value(value_from);
        // `Authorization: Bearer TOKEN`: the scheme stays, the token goes.
        let mut scheme = false;
        if quoted {
            if let Some(n) = scheme_prefix(&b[start..end]) {
                start += n;
                scheme = true;
            }
        } else if b.get(end) == Some(&b' ')
            && scheme_prefix(&b[start..=end]) == Some(end + 1 - start)
        {
            let (s, e, _) = self.value(end + 1);
            if e > s {
                (start, end) = (s, e);
                scheme = true;
            }
        }
        let value = &b[start..end];
        let prose = !quoted
            && !scheme
            && sep == b':'
            && value.iter().all(|c| c.is_ascii_alphabetic() || *c == b'\'')
            && b.get(end) == Some(&b' ')
            && b.get(end + 1).is_some_and(u8::is_ascii_alphabetic);
        if value.is_empty() || prose || not_a_secret(value) {
            self.skip[ASSIGN] = end;
            return;
        }
        let (buf, n) = normalize(&b[j..key_end]);
        let key = &buf[..n];
        let aws = memmem::find(key, b"secretaccesskey").is_some()
            || memmem::find(key, b"aws").is_some() && memmem::find(key, b"secret").is_some();
        let kind = if aws && value.len() == 40 && value.iter().all(|&c| is(c, BASE64)) {
            "aws_secret_access_key"
        } else if value.starts_with(b"-----BEGIN") {
            "private_key"
        } else {
            kind
        };
        self.push(start, end, kind);
    }

    /// The value after a separator: quoted (to its closing quote, escapes
    /// skipped, at most to the line's end) or bare (to a space or a
    /// delimiter). Returns (start, end, quoted).
    fn value(&self, from: usize) -> (usize, usize, bool) {
        let b = self.b;
        let mut p = from;
        while p < b.len() && matches!(b[p], b' ' | b'\t') {
            p += 1;
        }
        match b.get(p) {
            Some(&q @ (b'"' | b'\'')) => {
                let start = p + 1;
                let mut j = start;
                while j < b.len() && b[j] != q && b[j] != b'\n' {
                    j += if b[j] == b'\\' && q == b'"' { 2 } else { 1 };
                }
                (start, j.min(b.len()), true)
            }
            _ => {
                let mut j = p;
                while j < b.len() && !is(b[j], VALUE_END) {
                    j += 1;
                }
                (p, j, false)
            }
        }
    }

    /// `-----BEGIN … PRIVATE KEY-----` and its body, through its END line
    /// or, cut short, to the last line that looks like key material.
    fn pem_begin(&mut self, i: usize) {
        let Some(header_end) = self.pem_label(i + 11) else {
            return;
        };
        let b = self.b;
        let (first, newline) = self.separators(header_end);
        if !newline && first < b.len() {
            // Flattened onto one line (spaces for line breaks): through the
            // END on that line, else to the line's end.
            let eol = memchr::memchr(b'\n', &b[first..]).map_or(b.len(), |n| first + n);
            let end = match memmem::find(&b[first..eol], b"-----END ") {
                Some(e) => self.pem_label(first + e + 9).unwrap_or(first + e + 9),
                None => eol,
            };
            self.push(i, end, "private_key");
            return;
        }
        let mut last = header_end;
        let mut p = first;
        let mut headers = true;
        loop {
            if b[p..].starts_with(b"-----END ") {
                last = self.pem_label(p + 9).unwrap_or(p + 9);
                break;
            }
            // An encrypted key's headers (RFC 1421) come first.
            if headers && (b[p..].starts_with(b"Proc-Type:") || b[p..].starts_with(b"DEK-Info:")) {
                let eol = memchr::memchr(b'\n', &b[p..]).map_or(b.len(), |n| p + n);
                last = eol;
                p = self.separators(eol).0;
                continue;
            }
            headers = false;
            let q = self.run_of(p, PEM);
            if q == p {
                break;
            }
            let (next, newline) = self.separators(q);
            let line_ends = q == b.len() || newline || b[q..].starts_with(b"-----END ");
            // A long run is key material even with something after it.
            if line_ends || q - p >= 16 {
                last = q;
            }
            if !line_ends {
                break;
            }
            p = next;
        }
        self.push(i, last, "private_key");
    }

    /// An END line with no BEGIN before it (the head of the block was cut
    /// off): the whole lines of key material right before it go with it.
    fn pem_end(&mut self, i: usize) {
        let Some(end) = self.pem_label(i + 9) else {
            return;
        };
        let b = self.b;
        let floor = self.done;
        let mut start = i;
        let mut p = i;
        loop {
            let q = self.separators_back(p, floor);
            let mut r = q;
            while r > floor && is(b[r - 1], PEM) {
                r -= 1;
            }
            if r == q || !self.line_starts_at(r, floor) {
                break;
            }
            start = r;
            p = r;
        }
        if start < i {
            self.push(start, end, "private_key");
        }
    }

    /// Whether `at` starts a line (after indentation), or is where the
    /// text or the last span ends.
    fn line_starts_at(&self, at: usize, floor: usize) -> bool {
        let b = self.b;
        let mut p = at;
        while p > floor && matches!(b[p - 1], b' ' | b'\t') {
            p -= 1;
        }
        p == 0
            || p == floor
            || matches!(b[p - 1], b'\n' | b'\r')
            || p - floor >= 2 && (&b[p - 2..p] == b"\\n" || &b[p - 2..p] == b"\\r")
    }

    /// Reads `LABEL-----` from `from` for a label ending in `PRIVATE KEY`
    /// (or `PRIVATE KEY BLOCK`); returns where the closing dashes end.
    fn pem_label(&self, from: usize) -> Option<usize> {
        let b = self.b;
        let mut j = from;
        while j < b.len() && j - from < 64 && (is(b[j], UPPER) || b[j] == b' ') {
            j += 1;
        }
        let label = &b[from..j];
        let private = label.ends_with(b"PRIVATE KEY") || label.ends_with(b"PRIVATE KEY BLOCK");
        (private && b[j..].starts_with(b"-----")).then_some(j + 5)
    }

    /// Past line breaks (real ones, and `\n` written out inside a JSON or
    /// shell string) and the indentation after them; says whether a line
    /// ended.
    fn separators(&self, from: usize) -> (usize, bool) {
        let b = self.b;
        let mut p = from;
        let mut newline = false;
        loop {
            if p < b.len() && (b[p] == b'\n' || b[p] == b'\r') {
                p += 1;
                newline = true;
            } else if b[p..].starts_with(b"\\n") || b[p..].starts_with(b"\\r") {
                p += 2;
                newline = true;
            } else if newline && p < b.len() && (b[p] == b' ' || b[p] == b'\t') {
                p += 1;
            } else {
                return (p, newline);
            }
        }
    }

    /// Back over line breaks and indentation, not below `floor`.
    fn separators_back(&self, from: usize, floor: usize) -> usize {
        let b = self.b;
        let mut p = from;
        while p > floor {
            if matches!(b[p - 1], b'\n' | b'\r' | b' ' | b'\t') {
                p -= 1;
            } else if p - floor >= 2 && (&b[p - 2..p] == b"\\n" || &b[p - 2..p] == b"\\r") {
                p -= 2;
            } else {
                break;
            }
        }
        p
    }
}

/// The kind of secret a key names, by how it ends (`DB_PASSWORD`,
/// `githubToken`, `x-api-key`, `client_secret`), or None. A bare `pass`
/// (`LC_PASS`, `bypass`) is too often something else.
fn key_kind(key: &[u8]) -> Option<&'static str> {
    if key.is_empty() {
        return None;
    }
    let (buf, n) = normalize(key);
    let norm = &buf[..n];
    const ENDS: [(&[u8], &str); 10] = [
        (b"password", "password"),
        (b"passwd", "password"),
        (b"passphrase", "password"),
        (b"secret", "secret"),
        (b"secretkey", "secret"),
        (b"privatekey", "secret"),
        (b"accesskey", "secret"),
        (b"token", "token"),
        (b"authorization", "token"),
        (b"apikey", "api_key"),
    ];
    ENDS.iter()
        .find(|(end, _)| norm.ends_with(end))
        .map(|(_, kind)| *kind)
}

/// Lower case, letters and digits only: `DB_PASSWORD`, `db-password` and
/// `dbPassword` read alike. Keys are at most 64 bytes (`assignment`).
fn normalize(key: &[u8]) -> ([u8; 64], usize) {
    let mut buf = [0u8; 64];
    let mut n = 0;
    for &c in key.iter().filter(|c| c.is_ascii_alphanumeric()).take(64) {
        buf[n] = c.to_ascii_lowercase();
        n += 1;
    }
    (buf, n)
}

/// Values that say nothing secret: already redacted, booleans, nulls.
fn not_a_secret(v: &[u8]) -> bool {
    if v.starts_with(MARK.as_bytes()) {
        return true;
    }
    const PLAIN: [&[u8]; 8] = [
        b"true",
        b"false",
        b"null",
        b"none",
        b"nil",
        b"yes",
        b"no",
        b"undefined",
    ];
    PLAIN.iter().any(|p| v.eq_ignore_ascii_case(p))
}

/// The length of `Bearer `, `Basic ` or `token ` at the start of a value.
fn scheme_prefix(v: &[u8]) -> Option<usize> {
    ["bearer ", "basic ", "token "]
        .iter()
        .find(|s| v.len() >= s.len() && v[..s.len()].eq_ignore_ascii_case(s.as_bytes()))
        .map(|s| s.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
