//! Data generators: stored turns and receipt logs of a given size, made once
//! and cached under `target/bench-data/` (a changed generator gets a new
//! version in the file name, so a stale cache is never reused).
//!
//! The text is meant to look like years of agent use: Zipf-distributed words
//! (common English and tool vocabulary first, then a long tail of rarer
//! made-up words), sentence and message lengths that vary by role, paths and
//! numbers, many conversations, timestamps spread over nearly six years.

use latchclaw::{receipts, util};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const VERSION: u32 = 2;
/// Receipt logs: 3 writes a started receipt before each call that ran; 4
/// keys every receipt with `BENCH_KEY`.
const RECEIPTS_VERSION: u32 = 4;
/// The receipt key of the generated logs (a bench's state dir gets a copy).
pub const BENCH_KEY: [u8; receipts::KEY_LEN] = *b"latchclaw bench receipt key 0001";
/// 2021-01-01T00:00:00Z to 2026-11-01T00:00:00Z.
const FIRST_TS: i64 = 1_609_459_200;
const LAST_TS: i64 = 1_793_491_200;

#[rustfmt::skip]
const COMMON: &[&str] = &[
    "the", "to", "and", "a", "of", "in", "is", "it", "you", "that", "for", "on", "with", "this",
    "file", "can", "be", "are", "not", "have", "as", "at", "or", "from", "was", "if", "but", "all",
    "please", "what", "there", "run", "when", "your", "an", "which", "will", "one", "do", "we",
    "error", "about", "list", "time", "would", "so", "them", "out", "then", "up", "new", "config",
    "how", "check", "other", "into", "some", "could", "make", "than", "first", "been", "its",
    "directory", "who", "now", "find", "use", "any", "these", "two", "may", "way", "like", "log",
    "server", "build", "test", "tests", "output", "command", "shell", "memory", "report", "backup",
    "deploy", "release", "version", "branch", "commit", "changes", "script", "cron", "job", "disk",
    "space", "network", "request", "response", "timeout", "retry", "database", "query", "index",
    "table", "schema", "migration", "user", "password", "token", "key", "secret", "policy", "rule",
    "workspace", "project", "readme", "notes", "meeting", "summary", "today", "yesterday",
    "tomorrow", "week", "month", "year", "morning", "evening", "weather", "forecast", "rain",
    "garden", "kitchen", "recipe", "dinner", "groceries", "budget", "invoice", "payment", "bank",
    "account", "email", "message", "reply", "draft", "calendar", "appointment", "doctor", "school",
    "homework", "book", "chapter", "page", "photo", "music", "playlist", "video", "movie",
    "travel", "train", "flight", "hotel", "ticket", "map", "route", "car", "bike", "repair",
    "install", "update", "upgrade", "package", "library", "module", "function", "variable",
    "struct", "trait", "compile", "warning", "panic", "stack", "trace", "thread", "process",
    "signal", "socket", "port", "address", "host", "domain", "certificate", "proxy", "firewall",
    "kernel", "driver", "device", "printer", "battery", "screen", "keyboard", "mouse", "laptop",
    "phone", "tablet", "router", "switch", "cable", "power", "energy", "solar", "heating",
    "temperature", "sensor", "camera", "alarm", "door", "window", "light", "lamp", "plant",
    "water", "coffee", "tea", "bread", "cheese", "apple", "orange", "lemon", "sugar", "salt",
    "quickly", "slowly", "carefully", "again", "still", "already", "never", "always", "often",
    "maybe", "probably", "exactly", "almost", "really", "good", "bad", "great", "small", "large",
    "old", "recent", "missing", "broken", "fixed", "done", "pending", "failed", "passed",
    "denied", "allowed", "approved", "latest", "previous", "next", "last", "every", "each",
];

const ONSETS: &[&str] = &[
    "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "ch",
    "cl", "dr", "gr", "pl", "st", "tr", "sh", "th",
];
const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y"];
const CODAS: &[&str] = &["", "", "n", "r", "s", "t", "l", "m", "nd", "rk", "st", "x"];

/// Words by rank, with Zipf (s = 1) cumulative weights for sampling.
pub struct Vocabulary {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocabulary {
    pub fn new(size: usize) -> Vocabulary {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut words: Vec<String> = COMMON.iter().map(|w| w.to_string()).collect();
        let mut seen: std::collections::HashSet<String> = words.iter().cloned().collect();
        while words.len() < size {
            let syllables = 1 + rng.usize(..4);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push_str(ONSETS[rng.usize(..ONSETS.len())]);
                w.push_str(VOWELS[rng.usize(..VOWELS.len())]);
            }
            w.push_str(CODAS[rng.usize(..CODAS.len())]);
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        let mut total = 0.0;
        let cumulative = (1..=words.len())
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Vocabulary { words, cumulative }
    }

    pub fn word(&self, rank: usize) -> &str {
        &self.words[rank]
    }

    fn sample(&self, rng: &mut fastrand::Rng) -> &str {
        let total = *self.cumulative.last().unwrap();
        let u = rng.f64() * total;
        let i = self.cumulative.partition_point(|&c| c < u);
        &self.words[i.min(self.words.len() - 1)]
    }

    /// Sentences of 4 to 18 words until about `words` words are written,
    /// with the odd path or number mixed in.
    pub fn text(&self, rng: &mut fastrand::Rng, words: usize) -> String {
        let mut out = String::with_capacity(words * 7);
        let mut written = 0;
        while written < words {
            let len = 4 + rng.usize(..15);
            for i in 0..len {
                if i > 0 {
                    out.push(' ');
                }
                match rng.u8(..40) {
                    0 => out.push_str(&format!(
                        "{}/{}.{}",
                        self.sample(rng),
                        self.sample(rng),
                        ["rs", "toml", "md", "log", "txt"][rng.usize(..5)]
                    )),
                    1 => out.push_str(&rng.u32(..100_000).to_string()),
                    _ => {
                        let w = self.sample(rng);
                        if i == 0 {
                            let mut c = w.chars();
                            if let Some(f) = c.next() {
                                out.extend(f.to_uppercase());
                                out.push_str(c.as_str());
                            }
                        } else {
                            out.push_str(w);
                        }
                    }
                }
            }
            out.push_str([". ", "? ", "! ", ". ", ". "][rng.usize(..5)]);
            written += len;
        }
        out.truncate(out.trim_end().len());
        out
    }
}

fn cache_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&dir).expect("create target/bench-data");
    dir
}

fn hex_id(rng: &mut fastrand::Rng, prefix: &str) -> String {
    format!("{prefix}-{:016x}{:08x}", rng.u64(..), rng.u32(..))
}

/// A memory database holding `n` turns; returns its path and whether it was
/// made now (and how long that took).
pub fn turns_db(vocab: &Vocabulary, n: usize) -> (PathBuf, Option<f64>) {
    let path = cache_dir().join(format!("turns-{n}-v{VERSION}.sqlite"));
    if path.exists() {
        return (path, None);
    }
    let start = Instant::now();
    let tmp = path.with_extension("partial");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
    }
    // The schema comes from latchclaw itself, so the benchmark searches the
    // same tables, indexes and FTS5 configuration a real install has.
    drop(
        latchclaw::memory::Memory::open(&tmp, 5000, Default::default())
            .expect("create memory database"),
    );
    let conn = rusqlite::Connection::open(&tmp).unwrap();
    conn.execute_batch("PRAGMA synchronous = OFF; BEGIN")
        .unwrap();
    let mut rng = fastrand::Rng::with_seed(n as u64);
    let span = (LAST_TS - FIRST_TS) as f64;
    let mut i = 0usize;
    {
        let mut conv = conn
            .prepare(
                "INSERT INTO conversations (id, created_at, updated_at, updated_unix)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .unwrap();
        let mut turn = conn
            .prepare(
                "INSERT INTO turns (conversation_id, turn_id, timestamp, ts_unix, role, content,
                                    tool_calls, tool_results, provider, model, metadata)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .unwrap();
        while i < n {
            let id = hex_id(&mut rng, "conv");
            let len = (2 + rng.usize(..39)).min(n - i);
            let first = FIRST_TS + (span * i as f64 / n as f64) as i64;
            // Stamps first: the conversation row must exist before its turns.
            let mut ts = first;
            let stamps: Vec<(i64, String)> = (0..len)
                .map(|_| {
                    let stamp = (ts, util::rfc3339(ts, rng.u32(..1_000_000_000), 0));
                    ts += 2 + rng.i64(0..120);
                    stamp
                })
                .collect();
            conv.execute(rusqlite::params![
                id,
                stamps[0].1,
                stamps[len - 1].1,
                stamps[len - 1].0
            ])
            .unwrap();
            for (k, (ts, stamp)) in stamps.iter().enumerate() {
                let role = match k % 4 {
                    0 => "user",
                    1 | 3 => "assistant",
                    _ => "tool",
                };
                let words = match role {
                    "user" => 3 + rng.usize(..40),
                    "tool" => 5 + rng.usize(..80),
                    _ => 10 + rng.usize(..190),
                };
                let content = vocab.text(&mut rng, words);
                let (calls, results) = if k % 4 == 1 {
                    (
                        Some(r#"[{"name":"file_list","arguments":{"path":"."}}]"#),
                        None,
                    )
                } else if role == "tool" {
                    (None, Some(r#"[{"ok":true}]"#))
                } else {
                    (None, None)
                };
                turn.execute(rusqlite::params![
                    id,
                    hex_id(&mut rng, "turn"),
                    stamp,
                    ts,
                    role,
                    content,
                    calls,
                    results,
                    "mock",
                    "mock-1",
                    None::<String>,
                ])
                .unwrap();
            }
            i += len;
        }
    }
    conn.execute_batch("COMMIT; PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    drop(conn);
    std::fs::rename(&tmp, &path).unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
    }
    (path, Some(start.elapsed().as_secs_f64()))
}

#[rustfmt::skip]
const TOOLS: &[(&str, &str)] = &[
    ("time", "low"), ("file_list", "low"), ("file_read", "low"), ("memory_search", "low"),
    ("file_write", "medium"), ("shell", "medium"), ("http", "low"), ("shell", "high"),
];

/// A receipt log of `n` valid, chained receipts, written the way latchclaw
/// stores them (hashes from the library's own canonical JSON): a call that
/// ran is a started receipt and its outcome, a denied call one receipt.
pub fn receipts_log(vocab: &Vocabulary, n: usize) -> (PathBuf, Option<f64>) {
    let path = cache_dir().join(format!("receipts-{n}-v{RECEIPTS_VERSION}.log"));
    if path.exists() {
        return (path, None);
    }
    let start = Instant::now();
    let tmp = path.with_extension("partial");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp).unwrap());
    let mut rng = fastrand::Rng::with_seed(n as u64 ^ 0x5eed);
    let span = (LAST_TS - FIRST_TS) as f64;
    let mut prev = receipts::GENESIS.to_string();
    let key = receipts::Key::from_bytes(&BENCH_KEY);
    let mut conversation = hex_id(&mut rng, "conv");
    let mut written = 0;
    while written < n {
        if rng.u8(..6) == 0 {
            conversation = hex_id(&mut rng, "conv");
        }
        let (tool, risk) = TOOLS[rng.usize(..TOOLS.len())];
        let (status, reason) = match (risk, rng.u8(..20)) {
            ("high", 0..=14) => (
                "denied",
                format!("{} is not allowed", vocab.text(&mut rng, 3)),
            ),
            ("high", _) => ("approved", "approved by the operator".to_string()),
            (_, 0) => (
                "failed",
                format!("tool failed: {}", vocab.text(&mut rng, 6)),
            ),
            _ => ("allowed", "allowed by policy".to_string()),
        };
        let args = json!({ "path": vocab.text(&mut rng, 2), "n": rng.u32(..1000) });
        let result = json!({ "ok": status != "failed", "text": vocab.text(&mut rng, 8) });
        let ran = status != "denied" && written + 2 <= n;
        let mut line = |fields: serde_json::Value, rng: &mut fastrand::Rng| {
            let ts = FIRST_TS + (span * written as f64 / n as f64) as i64;
            let mut r = json!({
                "args_hash": receipts::hash_value(&args),
                "conversation_id": conversation,
                "id": hex_id(rng, "receipt"),
                "previous_hash": prev,
                "reason": reason,
                "risk": risk,
                "timestamp": util::rfc3339(ts, rng.u32(..1_000_000_000), 0),
                "tool": tool,
            });
            r.as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            let canonical = receipts::canonical_json(&r);
            let hash = util::sha256_hex(canonical.as_bytes());
            r["hmac"] = json!(key.mac_hex(canonical.as_bytes()));
            r["receipt_hash"] = json!(hash);
            writeln!(out, "{}", receipts::canonical_json(&r)).unwrap();
            prev = hash;
            written += 1;
            r["id"].as_str().unwrap().to_string()
        };
        let outcome = json!({ "status": status, "result_hash": receipts::hash_value(&result) });
        if ran {
            let started = line(json!({ "status": "started" }), &mut rng);
            let mut outcome = outcome;
            outcome["started_id"] = json!(started);
            line(outcome, &mut rng);
        } else {
            line(outcome, &mut rng);
        }
    }
    out.into_inner().unwrap().sync_all().unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    (path, Some(start.elapsed().as_secs_f64()))
}

/// Version of the grep tree: a changed layout gets a new directory.
const GREP_TREE_VERSION: u32 = 1;
/// The word planted in every 97th file of the grep tree, on one line.
pub const GREP_NEEDLE: &str = "latchclawneedle";

/// A source-like tree of `n` small text files (100 per directory, 100
/// directories per top directory, about 500 bytes each), every 97th with
/// [`GREP_NEEDLE`] on one line; made once, then reused.
pub fn grep_tree(vocab: &Vocabulary, n: usize) -> (PathBuf, Option<f64>) {
    let dir = cache_dir().join(format!("grep-tree-{n}-v{GREP_TREE_VERSION}"));
    let done = dir.with_extension("done");
    if done.exists() {
        return (dir, None);
    }
    let start = Instant::now();
    let _ = std::fs::remove_dir_all(&dir);
    let mut rng = fastrand::Rng::with_seed(n as u64 ^ 0x9e37);
    for i in 0..n {
        let sub = dir.join(format!("m{:02}/d{:03}", i / 10_000, (i / 100) % 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        let mut text = String::new();
        let needle_line = (i % 97 == 0).then(|| rng.usize(..8));
        for l in 0..8 {
            if needle_line == Some(l) {
                text.push_str(&format!("    let x = {GREP_NEEDLE}({l});\n"));
            } else {
                text.push_str(&vocab.text(&mut rng, 6));
                text.push('\n');
            }
        }
        std::fs::write(sub.join(format!("f{:02}.rs", i % 100)), text).unwrap();
    }
    std::fs::write(&done, "").unwrap();
    (dir, Some(start.elapsed().as_secs_f64()))
}

/// Memory items: `n` in both stores, the way years of use leave them —
/// mostly `user_memory` notes across the seed's categories (goals,
/// projects and open loops with a priority), and ten years of summaries
/// (one per day, week, month, quarter and year: the store holds one per
/// period key) with a conversation summary a day.
const ITEMS_VERSION: u32 = 1;

pub fn items_db(vocab: &Vocabulary, n: usize) -> (PathBuf, Option<f64>) {
    use latchclaw::types::period::{Period, span_of};
    let path = cache_dir().join(format!("items-{n}-v{ITEMS_VERSION}.sqlite"));
    if path.exists() {
        return (path, None);
    }
    let start = Instant::now();
    let tmp = path.with_extension("partial");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
    }
    drop(
        latchclaw::memory::Memory::open(&tmp, 5000, Default::default())
            .expect("create memory database"),
    );
    let conn = rusqlite::Connection::open(&tmp).unwrap();
    conn.execute_batch("PRAGMA synchronous = OFF; BEGIN")
        .unwrap();
    let mut rng = fastrand::Rng::with_seed(n as u64 ^ 0x5eed);
    const CATS: [&str; 9] = latchclaw::types::args::SEED_CATEGORIES;
    // Ten years of days up to 2026-10-31, in order, so ids follow time.
    let first_day = (FIRST_TS - 5 * 365 * 86_400) / 86_400;
    let last_day = LAST_TS / 86_400 - 1;
    let days = (last_day - first_day + 1) as usize;
    let summaries: usize = days * 2 + days / 7 + 120 + 40 + 10;
    let notes = n.saturating_sub(summaries);
    {
        let mut ins = conn
            .prepare(
                "INSERT INTO notes (created_at, created_unix, category, tags, text, conversation_id,
                                    source, store, priority, period_key, period_start, period_end,
                                    chat_id, covers)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )
            .unwrap();
        let mut written = 0usize;
        let per_day = notes as f64 / days as f64;
        let mut owed = 0.0;
        for d in 0..days as i64 {
            let day = first_day + d;
            let at = day * 86_400 + 20 * 3600;
            let stamp = util::rfc3339(at, 0, 0);
            owed += per_day;
            while owed >= 1.0 && written < notes {
                owed -= 1.0;
                written += 1;
                let cat = CATS[rng.usize(..CATS.len())];
                let priority =
                    matches!(cat, "life-goal" | "project" | "open-loop").then(|| rng.i64(0..=100));
                let words = 6 + rng.usize(..30);
                let text = vocab.text(&mut rng, words);
                ins.execute(rusqlite::params![
                    stamp,
                    at,
                    cat,
                    "[]",
                    text,
                    None::<String>,
                    "memory_store",
                    "user_memory",
                    priority,
                    None::<String>,
                    None::<i64>,
                    None::<i64>,
                    None::<String>,
                    None::<String>
                ])
                .unwrap();
            }
            let mut summary = |kind: &str, key: String, s: i64, e: i64, chat: Option<String>| {
                let words = 60 + rng.usize(..120);
                let text = vocab.text(&mut rng, words);
                ins.execute(rusqlite::params![
                    stamp,
                    at + 3600,
                    kind,
                    "[]",
                    text,
                    None::<String>,
                    "memory summarize",
                    "summaries",
                    None::<i64>,
                    key,
                    s * 86_400,
                    e * 86_400,
                    chat,
                    None::<String>
                ])
                .unwrap();
            };
            let chat = format!("conv-{day}");
            let d_span = span_of(Period::Day, day);
            summary(
                "conversation-summary",
                d_span.key.clone(),
                day,
                day + 1,
                Some(chat),
            );
            summary("daily-summary", d_span.key, day, day + 1, None);
            for (p, kind) in [
                (Period::Week, "weekly-summary"),
                (Period::Month, "monthly-summary"),
                (Period::Quarter, "quarterly-summary"),
                (Period::Year, "yearly-summary"),
            ] {
                let s = span_of(p, day);
                if s.end == day + 1 {
                    summary(kind, s.key, s.start, s.end, None);
                }
            }
        }
    }
    conn.execute_batch("COMMIT; PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    drop(conn);
    std::fs::rename(&tmp, &path).unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
    }
    (path, Some(start.elapsed().as_secs_f64()))
}

/// A memory database holding one day (2026-11-02, 08:00 to 16:00 UTC, so
/// the same local day in any zone within ±8 hours) of `n` conversations of
/// two to twelve turns.
pub fn day_db(vocab: &Vocabulary, n: usize, path: &Path) {
    drop(
        latchclaw::memory::Memory::open(path, 5000, Default::default())
            .expect("create memory database"),
    );
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("BEGIN").unwrap();
    let mut rng = fastrand::Rng::with_seed(n as u64);
    let start = 1_793_606_400 + 8 * 3600;
    for c in 0..n {
        let id = format!("conv-day-{c:04}");
        let mut ts = start + (c as i64 * 8 * 3600) / n as i64;
        let stamp = util::rfc3339(ts, 0, 0);
        conn.execute(
            "INSERT INTO conversations (id, created_at, updated_at, updated_unix) VALUES (?1, ?2, ?2, ?3)",
            rusqlite::params![id, stamp, ts],
        )
        .unwrap();
        for k in 0..2 + rng.usize(..11) {
            let role = if k % 2 == 0 { "user" } else { "assistant" };
            let words = if k % 2 == 0 {
                5 + rng.usize(..30)
            } else {
                20 + rng.usize(..120)
            };
            let content = vocab.text(&mut rng, words);
            conn.execute(
                "INSERT INTO turns (conversation_id, turn_id, timestamp, ts_unix, role, content)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                rusqlite::params![
                    id,
                    format!("turn-{c}-{k}"),
                    util::rfc3339(ts, 0, 0),
                    ts,
                    role,
                    content
                ],
            )
            .unwrap();
            ts += 5 + rng.i64(0..60);
        }
    }
    conn.execute_batch("COMMIT").unwrap();
}
