//! Conversation memory in SQLite: every turn persisted, FTS5 search.
//!
//! WAL mode and a busy timeout let several `latchclaw` processes (cron jobs
//! overlapping a REPL) share the database. The schema version lives in
//! `PRAGMA user_version`; migrations only move forward.

use crate::error::{Error, Result};
use crate::security::Risk;
use crate::security::redact::Redactor;
use crate::util;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub mod call_counts;
pub mod calls;
pub mod code_runs;
/// One tool's calls as `tool stats` shows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolStat {
    pub tool: String,
    pub calls: u64,
    pub succeeded: u64,
    /// Of the calls that ran, sorted.
    pub durations_ms: Vec<u64>,
}

impl ToolStat {
    /// Succeeded calls in percent of all.
    pub fn success_rate(&self) -> f64 {
        if self.calls == 0 {
            return 0.0;
        }
        self.succeeded as f64 * 100.0 / self.calls as f64
    }
    pub fn average_ms(&self) -> Option<f64> {
        (!self.durations_ms.is_empty())
            .then(|| self.durations_ms.iter().sum::<u64>() as f64 / self.durations_ms.len() as f64)
    }
    /// The nearest-rank 95th percentile.
    pub fn p95_ms(&self) -> Option<u64> {
        let n = self.durations_ms.len();
        (n > 0).then(|| self.durations_ms[(n * 95).div_ceil(100).max(1) - 1])
    }
}

pub mod notes;
pub mod sop_runs;
pub mod summaries;
pub mod tasks;
pub use crate::types::args::{
    NOTE_MAX_BYTES, NOTE_MAX_TAGS, NOTE_TAG_MAX_CHARS, NoteFilter, Store, check_category,
    check_note, normalize_tags, parse_date,
};

/// Forward migrations; entry `i` moves the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE conversations (
    id         TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    updated_unix INTEGER NOT NULL
);
CREATE TABLE turns (
    id              INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id),
    turn_id         TEXT NOT NULL UNIQUE,
    timestamp       TEXT NOT NULL,
    ts_unix         INTEGER NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content         TEXT NOT NULL,
    tool_calls      TEXT,
    tool_results    TEXT,
    provider        TEXT,
    model           TEXT,
    metadata        TEXT
);
CREATE INDEX turns_by_conversation ON turns(conversation_id, id);
CREATE INDEX conversations_by_update ON conversations(updated_unix);
CREATE VIRTUAL TABLE turns_fts USING fts5(
    content, content = 'turns', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER turns_fts_insert AFTER INSERT ON turns BEGIN
    INSERT INTO turns_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER turns_fts_delete AFTER DELETE ON turns BEGIN
    INSERT INTO turns_fts(turns_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
"#,
    r#"
CREATE TABLE approvals (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    tool            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    args_hash       TEXT NOT NULL,
    reason          TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used')),
    decided_at      TEXT,
    used_at         TEXT
);
CREATE INDEX approvals_by_call ON approvals(conversation_id, tool, args_hash, status);
"#,
    r#"
CREATE TABLE runs (
    id              TEXT PRIMARY KEY,
    started_at      TEXT NOT NULL,
    ended_at        TEXT,
    exit_code       INTEGER,
    exit_reason     TEXT,
    conversation_id TEXT,
    lock_name       TEXT,
    pid             INTEGER NOT NULL,
    command         TEXT NOT NULL
);
CREATE INDEX runs_by_start ON runs(started_at);
"#,
    // The operator deciding later is shown the risk the gate saw.
    "ALTER TABLE approvals ADD COLUMN risk TEXT NOT NULL DEFAULT 'medium';",
    // Token counts per run, as the provider reported them.
    "ALTER TABLE runs ADD COLUMN prompt_tokens INTEGER;
     ALTER TABLE runs ADD COLUMN completion_tokens INTEGER;
     ALTER TABLE runs ADD COLUMN cached_tokens INTEGER;",
    // Notes the model keeps (`memory_store`). AUTOINCREMENT: an id is never
    // reused, so a `memory_forget` approved later cannot delete a newer note
    // that took a forgotten one's number.
    r#"
CREATE TABLE notes (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at      TEXT NOT NULL,
    created_unix    INTEGER NOT NULL,
    category        TEXT NOT NULL,
    tags            TEXT NOT NULL DEFAULT '[]',
    text            TEXT NOT NULL,
    conversation_id TEXT,
    source          TEXT NOT NULL
);
CREATE INDEX notes_by_category ON notes(category, id);
CREATE VIRTUAL TABLE notes_fts USING fts5(
    text, tags, content = 'notes', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER notes_fts_insert AFTER INSERT ON notes BEGIN
    INSERT INTO notes_fts(rowid, text, tags) VALUES (new.id, new.text, new.tags);
END;
CREATE TRIGGER notes_fts_delete AFTER DELETE ON notes BEGIN
    INSERT INTO notes_fts(notes_fts, rowid, text, tags) VALUES ('delete', old.id, old.text, old.tags);
END;
"#,
    // The calls of rate-limited tools (`rate_limit.per_hour`), kept an
    // hour: what every run counts against.
    r#"
CREATE TABLE tool_calls (
    tool  TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX tool_calls_by_tool ON tool_calls(tool, at_ms);
"#,
    // "Always for this conversation": calls of `tool` whose programs are
    // `scope` (a shell plan's, sorted; empty for other tools), in one
    // workspace, up to `risk`, run without asking until revoked.
    r#"
CREATE TABLE standing_approvals (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    workspace       TEXT NOT NULL,
    tool            TEXT NOT NULL,
    scope           TEXT NOT NULL,
    risk            TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    revoked_at      TEXT
);
CREATE INDEX standing_by_call ON standing_approvals(conversation_id, tool, scope);
"#,
    // The workspace a pending call was asked in (its hash covers it too):
    // for the operator to see, and for `--resume` to run it only there.
    r#"
ALTER TABLE approvals ADD COLUMN workspace TEXT;
"#,
    // SOP runs (`memory::sop_runs`): the SOP's hash, each step's state and
    // output, written before and after each step's effect.
    r#"
CREATE TABLE sop_runs (
    id         TEXT PRIMARY KEY,
    sop        TEXT NOT NULL,
    path       TEXT NOT NULL,
    sop_hash   TEXT NOT NULL,
    workspace  TEXT NOT NULL,
    status     TEXT NOT NULL,
    error      TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX sop_runs_by_start ON sop_runs(created_at);
CREATE TABLE sop_steps (
    run_id      TEXT NOT NULL REFERENCES sop_runs(id),
    idx         INTEGER NOT NULL,
    step_id     TEXT NOT NULL,
    kind        TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'started', 'done', 'failed',
                                               'skipped', 'waiting_approval', 'unknown')),
    output      TEXT,
    error       TEXT,
    attempts    INTEGER NOT NULL DEFAULT 0,
    approval_id TEXT,
    started_at  TEXT,
    ended_at    TEXT,
    PRIMARY KEY (run_id, idx)
);
CREATE INDEX sop_steps_by_approval ON sop_steps(approval_id);
"#,
    // `code_run`'s record (`memory::code_runs`): each snippet, how it
    // ended, and the tool calls and requests it made.
    r#"
CREATE TABLE code_runs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    language        TEXT NOT NULL,
    code_sha256     TEXT NOT NULL,
    code            TEXT NOT NULL,
    exit_code       INTEGER,
    duration_ms     INTEGER NOT NULL,
    error_category  TEXT,
    error           TEXT,
    calls           TEXT NOT NULL,
    receipts        TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX code_runs_by_start ON code_runs(created_at);
"#,
    // Two stores in the notes table: every existing note is `user_memory`.
    // A summary's type is its category, its period `period_key` (the days
    // it spans in `period_start`..`period_end`, Unix seconds, for time
    // filters), the conversations it covers `covers`. One summary per type,
    // key and chat: `memory summarize` relies on it to never write twice.
    // A conversation's session name (`/new NAME`, `--new-session NAME`).
    // (No CHECK on added columns: this SQLite checks them against existing
    // rows with a pragma it is built without.)
    r#"
ALTER TABLE notes ADD COLUMN store TEXT NOT NULL DEFAULT 'user_memory';
ALTER TABLE notes ADD COLUMN priority INTEGER;
ALTER TABLE notes ADD COLUMN period_key TEXT;
ALTER TABLE notes ADD COLUMN period_start INTEGER;
ALTER TABLE notes ADD COLUMN period_end INTEGER;
ALTER TABLE notes ADD COLUMN chat_id TEXT;
ALTER TABLE notes ADD COLUMN covers TEXT;
CREATE UNIQUE INDEX summaries_by_period
    ON notes(category, period_key, coalesce(chat_id, '')) WHERE store = 'summaries';
CREATE INDEX notes_by_store ON notes(store, category, id);
CREATE INDEX turns_by_time ON turns(ts_unix);
ALTER TABLE conversations ADD COLUMN session TEXT;
"#,
    // The hour's calls moved to a file beside the database (`call_counts`).
    "DROP TABLE tool_calls;",
    // A `plan` call's tree (`memory::tasks`): a root row (depth 0) for the
    // call, a row per task under it; a task's state is committed before it
    // runs and after, so a killed tree resumes without re-running a done
    // task.
    r#"
CREATE TABLE tasks (
    path         TEXT PRIMARY KEY,
    root         TEXT NOT NULL,
    conversation TEXT NOT NULL,
    parent       TEXT,
    idx          INTEGER NOT NULL,
    depth        INTEGER NOT NULL,
    title        TEXT NOT NULL,
    purpose      TEXT NOT NULL,
    instructions TEXT NOT NULL,
    evaluation   TEXT NOT NULL,
    tools        TEXT,
    corrects     TEXT,
    skill        TEXT,
    state        TEXT NOT NULL,
    result       TEXT,
    budget       TEXT,
    limits       TEXT,
    rounds       INTEGER NOT NULL DEFAULT 0,
    tokens       INTEGER NOT NULL DEFAULT 0,
    attempts     INTEGER NOT NULL DEFAULT 0,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE INDEX tasks_by_root ON tasks(root, depth, idx);
CREATE INDEX tasks_by_conversation ON tasks(conversation, created_at);
"#,
];

/// The local day (days since 1970-01-01) a Unix time falls in, a day
/// starting at `hour` o'clock local time (0: midnight).
pub fn local_day(secs: i64, hour: u32) -> i64 {
    let (off, _) = crate::sys::time::local_offset(secs);
    (secs + off - i64::from(hour) * 3600).div_euclid(86_400)
}

/// The Unix time a local day starts, at `hour` o'clock local time.
pub fn local_day_start(day: i64, hour: u32) -> i64 {
    let naive = day * 86_400 + i64::from(hour) * 3600;
    // The offset in force then: asked twice, for a day a clock change starts.
    let (off, _) = crate::sys::time::local_offset(naive);
    let (off, _) = crate::sys::time::local_offset(naive - off);
    naive - off
}

pub struct Memory {
    conn: Connection,
    /// A run whose record is written with the next turn, in the same
    /// transaction (one commit fewer per run).
    pending_run: std::cell::RefCell<Option<RunStart>>,
    /// `agent --no-memory`: this run's turns stay in the process (so a
    /// REPL conversation still has its context) and are never written.
    scratch: Option<std::cell::RefCell<Vec<Turn>>>,
    /// What every read-out (show, search, notes, history) passes through:
    /// text stored before a secret was configured may hold it.
    redactor: Arc<Redactor>,
}

struct RunStart {
    id: String,
    started_at: String,
    command: String,
    lock_name: Option<String>,
}

/// Who a stored turn is from. `System` is latchclaw's own words (a limit
/// reached, a cancel): shown to the user, never sent to a model as if the
/// assistant had said them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnRole {
    System,
    #[default]
    User,
    Assistant,
    Tool,
}

impl TurnRole {
    pub const fn as_str(self) -> &'static str {
        match self {
            TurnRole::System => "system",
            TurnRole::User => "user",
            TurnRole::Assistant => "assistant",
            TurnRole::Tool => "tool",
        }
    }

    /// Who said a turn of `conversation`, for a reader who is not its
    /// model: a plan's task's message (`CONV/msg-HASH/task-1`) is the
    /// model's own plan relayed by latchclaw, never the user's words.
    pub fn speaker(self, conversation: &str) -> &'static str {
        match self {
            TurnRole::User if crate::security::policy::origin_of(conversation) == "task" => {
                "plan task (written by the assistant, not the user)"
            }
            r => r.as_str(),
        }
    }

    pub fn parse(s: &str) -> Option<TurnRole> {
        [
            TurnRole::System,
            TurnRole::User,
            TurnRole::Assistant,
            TurnRole::Tool,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for TurnRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl rusqlite::types::ToSql for TurnRole {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl rusqlite::types::FromSql for TurnRole {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let s = v.as_str()?;
        TurnRole::parse(s).ok_or_else(|| unknown_value("role", s))
    }
}

/// A stored value latchclaw does not know: an error naming it, never a
/// guess (the schema's CHECK constraints keep these out of a database
/// latchclaw wrote).
fn unknown_value(what: &str, s: &str) -> rusqlite::types::FromSqlError {
    rusqlite::types::FromSqlError::Other(format!("unknown {what} \"{s}\" in the database").into())
}

/// Where a pending approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Waiting for `latchclaw approve` or `deny`.
    Pending,
    /// Approved; the call runs when the model repeats it.
    Approved,
    Denied,
    /// Approved and run.
    Used,
}

impl ApprovalStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Used => "used",
        }
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl rusqlite::types::FromSql for ApprovalStatus {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let s = v.as_str()?;
        [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Denied,
            ApprovalStatus::Used,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
        .ok_or_else(|| unknown_value("approval status", s))
    }
}

/// Read as the gate's `Risk`; an unknown one is an error, not "high".
struct StoredRisk(Risk);

impl rusqlite::types::FromSql for StoredRisk {
    fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let s = v.as_str()?;
        Risk::parse(s)
            .map(StoredRisk)
            .ok_or_else(|| unknown_value("risk", s))
    }
}

/// A turn about to be stored.
#[derive(Debug, Default, Clone)]
pub struct NewTurn<'a> {
    pub conversation_id: &'a str,
    pub role: TurnRole,
    pub content: &'a str,
    pub tool_calls: Option<String>,
    pub tool_results: Option<String>,
    pub provider: Option<&'a str>,
    pub model: Option<&'a str>,
    pub metadata: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Turn {
    pub conversation_id: String,
    pub turn_id: String,
    pub timestamp: String,
    pub role: TurnRole,
    pub content: String,
    pub tool_calls: Option<serde_json::Value>,
    pub tool_results: Option<serde_json::Value>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub metadata: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConversationSummary {
    pub conversation_id: String,
    pub turns: i64,
    pub created_at: String,
    pub last_activity: String,
    pub first_message: String,
    /// Its session's name (`/new NAME`, `--new-session NAME`).
    pub session: Option<String>,
    /// The ids of its `conversation-summary` items.
    pub summaries: Vec<i64>,
}

/// A tool call that needed approval when nobody was there to give it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingApproval {
    pub id: String,
    pub conversation_id: String,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub risk: Risk,
    pub reason: String,
    pub created_at: String,
    pub status: ApprovalStatus,
    pub decided_at: Option<String>,
    pub used_at: Option<String>,
    /// Where it was asked (none for a call asked before this was kept).
    pub workspace: Option<String>,
}

/// An "always for this conversation" answer, as `approvals list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Standing {
    pub id: String,
    pub conversation_id: String,
    pub workspace: String,
    pub tool: String,
    /// The programs of a shell plan it covers (comma-separated); empty:
    /// every call of the tool.
    pub scope: String,
    pub risk: Risk,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// One `agent` run, as `runs list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub id: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub exit_code: Option<i64>,
    pub exit_reason: Option<String>,
    pub conversation_id: Option<String>,
    pub lock_name: Option<String>,
    pub pid: i64,
    pub command: String,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub cached_tokens: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub conversation_id: String,
    pub turn_id: String,
    pub timestamp: String,
    pub role: TurnRole,
    pub snippet: String,
    pub score: f64,
}

/// Columns: conversation_id, turn_id, timestamp, role, snippet, score
/// (bm25-based, lower is better).
fn hit_from_row(r: &rusqlite::Row) -> rusqlite::Result<Hit> {
    Ok(Hit {
        conversation_id: r.get(0)?,
        turn_id: r.get(1)?,
        timestamp: r.get(2)?,
        role: r.get(3)?,
        snippet: r.get(4)?,
        score: -r.get::<_, f64>(5)?,
    })
}

/// A stored turn as it is read out: turns stored before redaction existed
/// (or before a secret was configured) may hold secrets. Call ids stay as
/// they are: they pair results with calls.
fn redacted_turn(r: &Redactor, mut t: Turn) -> Turn {
    let mut counts = Default::default();
    r.redact_string(&mut t.content, &mut counts);
    if let Some(v) = &mut t.tool_results {
        r.redact_json(v, &mut counts);
    }
    if let Some(serde_json::Value::Object(m)) = &mut t.metadata {
        for (k, v) in m.iter_mut() {
            if k != "tool_call_id" {
                r.redact_json(v, &mut counts);
            }
        }
    }
    t
}

fn json_col(s: Option<String>) -> Option<serde_json::Value> {
    s.map(|s| serde_json::from_str(&s).unwrap_or(serde_json::Value::String(s)))
}

fn insert_run(conn: &Connection, run: &RunStart) -> rusqlite::Result<usize> {
    conn.execute(
        "INSERT OR IGNORE INTO runs (id, started_at, lock_name, pid, command) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![run.id, run.started_at, run.lock_name, std::process::id(), run.command],
    )
}

/// A tool round while it runs: the assistant turn that made the calls and
/// the results so far, stored whole by [`Memory::add_round`] when the round
/// ends, however it ends.
#[derive(Debug, Clone, Default)]
pub struct Round {
    pub conversation_id: String,
    /// The assistant's text beside its calls.
    pub content: String,
    /// The calls as stored: a JSON array of `{id, name, arguments}`.
    pub tool_calls: String,
    /// Each call's id, in order (one entry per call, repeats kept).
    pub call_ids: Vec<String>,
    pub provider: String,
    pub model: String,
    pub metadata: String,
    pub results: Vec<RoundResult>,
}

/// One call's result in a [`Round`].
#[derive(Debug, Clone, Default)]
pub struct RoundResult {
    pub call_id: String,
    pub content: String,
    pub tool_results: Option<String>,
    /// Stored as the tool turn's metadata; holds `tool_call_id`.
    pub metadata: String,
}

/// Turns read beyond `context_turns` so the window can widen back to the
/// call whose results it starts among (a round of more calls than this
/// loses its leading results instead).
const ROUND_SLACK: u32 = 64;

/// What the model reads for a call whose result was never stored (a
/// process killed mid-round, or one written before rounds were stored
/// whole).
pub const NO_RESULT: &str = "no result: the run was cut off before this call finished \
(latchclaw was killed or crashed); it may or may not have taken effect";

/// The ids of an assistant turn's calls, when every call has an id, a
/// name and arguments (what the runtime can send back); None otherwise.
fn call_ids(t: &Turn) -> Option<Vec<String>> {
    t.tool_calls
        .as_ref()?
        .as_array()?
        .iter()
        .map(|c| {
            let ok = c.get("name").is_some_and(serde_json::Value::is_string)
                && c.get("arguments").is_some();
            c.get("id")
                .and_then(serde_json::Value::as_str)
                .filter(|_| ok)
                .map(String::from)
        })
        .collect()
}

fn tool_call_id(t: &Turn) -> Option<&str> {
    t.metadata.as_ref()?.get("tool_call_id")?.as_str()
}

/// The last `limit` of `turns` as a provider may be sent them, following
/// OpenAI's rule that an assistant turn's calls are answered by tool turns,
/// one per call id, before anything else, and that a tool turn answers a
/// call just before it:
/// - a window that starts among a round's results widens back to the
///   assistant turn that made the calls;
/// - a call left without a result gets one saying so ([`NO_RESULT`]),
///   placed with the round's other results;
/// - a tool turn answering no open call (its call is outside the window or
///   unreadable, or it answers one twice) is dropped;
/// - calls that cannot be read back are dropped from their turn, and
///   `system` turns are left out.
pub fn paired(turns: Vec<Turn>, limit: usize) -> Vec<Turn> {
    let mut start = turns.len().saturating_sub(limit);
    while start > 0 && start < turns.len() && turns[start].role == TurnRole::Tool {
        start -= 1;
    }
    let mut out: Vec<Turn> = Vec::with_capacity(turns.len() - start);
    // The calls of the last assistant turn still waiting for a result, and
    // that turn (for the results made up for them).
    let mut open: Vec<String> = Vec::new();
    let mut opened_by: Option<(String, String)> = None;
    let close = |out: &mut Vec<Turn>, open: &mut Vec<String>, by: &Option<(String, String)>| {
        for id in open.drain(..) {
            let (conversation_id, timestamp) = by.clone().unwrap_or_default();
            log::info!(target: "event::history_repaired", "conversation={conversation_id} call={id}: no result stored; one saying so is sent");
            out.push(Turn {
                conversation_id,
                turn_id: String::new(),
                timestamp,
                role: TurnRole::Tool,
                content: NO_RESULT.into(),
                tool_calls: None,
                tool_results: None,
                provider: None,
                model: None,
                metadata: Some(serde_json::json!({"tool_call_id": id, "status": "no_result"})),
            });
        }
    };
    for mut t in turns.into_iter().skip(start) {
        match t.role {
            TurnRole::Tool => {
                let answers = tool_call_id(&t).and_then(|id| open.iter().position(|o| o == id));
                match answers {
                    Some(i) => {
                        open.remove(i);
                        out.push(t);
                    }
                    None => {
                        log::info!(target: "event::history_repaired", "conversation={} turn={}: a tool result that answers no call is not sent", t.conversation_id, t.turn_id);
                    }
                }
            }
            TurnRole::User | TurnRole::Assistant => {
                close(&mut out, &mut open, &opened_by);
                if t.role == TurnRole::Assistant {
                    match call_ids(&t) {
                        Some(ids) => open = ids,
                        None => {
                            if t.tool_calls.is_some() {
                                log::info!(target: "event::history_repaired", "conversation={} turn={}: unreadable tool calls are not sent", t.conversation_id, t.turn_id);
                            }
                            t.tool_calls = None;
                        }
                    }
                    opened_by = Some((t.conversation_id.clone(), t.timestamp.clone()));
                }
                out.push(t);
            }
            _ => {}
        }
    }
    close(&mut out, &mut open, &opened_by);
    out
}

/// Turns free text into an FTS5 query that cannot be a syntax error: only
/// letter/digit runs survive, each quoted as a phrase with prefix match, so
/// operators (`NEAR`, `OR`, `-`, `:`, `*`, quotes) are searched as words.
pub fn fts_query(input: &str, join: &str) -> Option<String> {
    fts_query_with(input, join, true)
}

fn fts_query_with(input: &str, join: &str, prefix: bool) -> Option<String> {
    let terms = terms(input, prefix);
    (!terms.is_empty()).then(|| terms.iter().map(Term::fts).collect::<Vec<_>>().join(join))
}

/// The words of a text as FTS5's unicode61 tokenizer splits it: runs of
/// letters and digits (not yet lower-cased).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
}

/// How many of the most recent matches are scored. Scoring every match of
/// a common word (and looking each up in `turns`) is what makes search slow
/// on a large memory; FTS5 walks matches newest first and stops here. Each
/// candidate costs a row read (measured at 1M turns: 1000 candidates 8 ms,
/// 300 about 2.5 ms).
const CANDIDATES: u32 = 300;

/// A search candidate: the hit to show, and what scoring needs.
struct Candidate {
    hit: Hit,
    content: String,
    ts_unix: i64,
    rowid: i64,
}

/// One query word as FTS5 sees it: lower-cased, whole or as a prefix.
struct Term {
    word: String,
    prefix: bool,
}

impl Term {
    fn fts(&self) -> String {
        format!("\"{}\"{}", self.word, if self.prefix { "*" } else { "" })
    }

    fn matches(&self, token: &str) -> bool {
        if self.prefix {
            token.starts_with(&self.word)
        } else {
            token == self.word
        }
    }
}

/// The distinct words of a query, lower-cased, each a prefix when `prefix`
/// is set and it is long enough: the FTS query is built from these, and
/// scoring counts them, so both see the same terms.
fn terms(query: &str, prefix: bool) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    for t in words(query) {
        let word = t.to_lowercase();
        if !out.iter().any(|o| o.word == word) {
            // A prefix of up to three letters matches much of the vocabulary
            // and would make the query scan most of the index.
            let prefix = prefix && word.chars().count() >= 4;
            out.push(Term { word, prefix });
        }
    }
    out
}

/// Words in a snippet.
const SNIPPET_TOKENS: usize = 16;
/// Words in a memory note (a note is read by the model, not skimmed).
const NOTE_TOKENS: usize = 40;

/// Words that say nothing about what a message is about.
const STOP_WORDS: &[&str] = &[
    "about", "above", "after", "again", "all", "also", "and", "any", "are", "ask", "been",
    "before", "being", "below", "but", "can", "could", "did", "does", "doing", "done", "down",
    "each", "few", "file", "files", "for", "from", "get", "give", "got", "had", "has", "have",
    "having", "her", "here", "him", "his", "how", "into", "its", "just", "know", "let", "like",
    "list", "look", "make", "many", "may", "more", "most", "much", "must", "need", "not", "now",
    "off", "once", "one", "only", "other", "our", "out", "over", "own", "please", "same", "say",
    "says", "see", "she", "should", "show", "some", "such", "tell", "than", "thank", "thanks",
    "that", "the", "their", "them", "then", "there", "these", "they", "thing", "this", "those",
    "through", "too", "under", "until", "use", "used", "very", "want", "was", "way", "were",
    "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would",
    "yes", "you", "your", "yours",
];

fn is_stop_word(w: &str) -> bool {
    STOP_WORDS.binary_search(&w).is_ok()
}

/// The words of a message that may be rare enough to say what it is about:
/// not stop words, at least three letters, longest first (the likeliest to
/// be rare), at most twelve (one lookup each).
fn context_words(query: &str) -> Vec<String> {
    let mut candidates: Vec<String> = words(query)
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 3 && !is_stop_word(w))
        .collect();
    crate::util::sort::sort_by(&mut candidates, |a, b| {
        b.chars().count().cmp(&a.chars().count()).then(a.cmp(b))
    });
    candidates.dedup();
    candidates.truncate(12);
    candidates
}

/// The `width`-word window of `text` holding the most query words, with
/// those words in [brackets] when `mark`, and "…" where text was cut. FTS5's snippet()
/// does the same, but as one more MATCH query per hit, which costs ~1 ms
/// each on a large memory; the text is already at hand here.
fn snippet(text: &str, terms: &[Term], width: usize, mark: bool) -> String {
    let mut tokens: Vec<(usize, usize, bool)> = Vec::new();
    let mut start = None;
    for (i, ch) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (ch.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let word = text[s..i].to_lowercase();
                tokens.push((s, i, terms.iter().any(|t| t.matches(&word))));
                start = None;
            }
            _ => {}
        }
    }
    if tokens.is_empty() {
        return crate::util::truncate_middle(text, 200);
    }
    // The window with the most hits, the earliest on ties.
    let width = width.min(tokens.len());
    let mut best = (0, 0);
    let mut hits = tokens[..width].iter().filter(|t| t.2).count();
    best.1 = hits;
    for first in 1..=tokens.len() - width {
        hits = hits + usize::from(tokens[first + width - 1].2) - usize::from(tokens[first - 1].2);
        if hits > best.1 {
            best = (first, hits);
        }
    }
    let window = &tokens[best.0..best.0 + width];
    let mut out = String::new();
    if best.0 > 0 {
        out.push('…');
    }
    let mut at = window[0].0;
    for &(s, e, hit) in window {
        out.push_str(&text[at..s]);
        if hit && mark {
            out.push('[');
            out.push_str(&text[s..e]);
            out.push(']');
        } else {
            out.push_str(&text[s..e]);
        }
        at = e;
    }
    if best.0 + width < tokens.len() {
        out.push('…');
    }
    out
}

/// Orders candidates by BM25 (k1 = 1.2, b = 0.75, as FTS5's bm25()) with
/// recent turns boosted: up to ×2 for a turn from now, fading over about a
/// month. Best first; `hit.score` is the boosted score.
fn rank(rows: &mut [Candidate], terms: &[Term], idf: &[f64], now: i64) {
    let docs: Vec<(&str, i64)> = rows
        .iter()
        .map(|c| (c.content.as_str(), c.ts_unix))
        .collect();
    let scores = scores(&docs, terms, idf, now);
    for (c, s) in rows.iter_mut().zip(scores) {
        c.hit.score = s;
    }
    // Ties (and tokens FTS5 matched that this split did not) go to the newest.
    crate::util::sort::sort_by(rows, |a, b| {
        b.hit
            .score
            .total_cmp(&a.hit.score)
            .then(b.rowid.cmp(&a.rowid))
    });
}

/// BM25 with the recency boost for each `(text, unix time)`; see [`rank`].
fn scores(docs: &[(&str, i64)], terms: &[Term], idf: &[f64], now: i64) -> Vec<f64> {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let mut freqs: Vec<(Vec<f64>, f64)> = Vec::with_capacity(docs.len());
    for (content, _) in docs {
        let mut tf = vec![0.0; terms.len()];
        let mut len = 0.0;
        let lower = content.to_lowercase();
        for token in words(&lower) {
            len += 1.0;
            for (f, term) in tf.iter_mut().zip(terms) {
                if term.matches(token) {
                    *f += 1.0;
                }
            }
        }
        freqs.push((tf, len));
    }
    let avg = (freqs.iter().map(|f| f.1).sum::<f64>() / docs.len().max(1) as f64).max(1.0);
    docs.iter()
        .zip(&freqs)
        .map(|((_, ts), (tf, len))| {
            let bm25: f64 = tf
                .iter()
                .zip(idf)
                .map(|(&f, &idf)| idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * len / avg)))
                .sum();
            let age = (now - ts).max(0) as f64;
            bm25 * (1.0 + 1.0 / (1.0 + age / 2_592_000.0))
        })
        .collect()
}

impl Memory {
    /// The database at `path`, reading out through `redactor` (the one the
    /// process's config made: there is no Memory without it).
    pub fn open(path: &Path, busy_timeout_ms: u64, redactor: Arc<Redactor>) -> Result<Memory> {
        if let Some(dir) = path.parent() {
            util::private_dir(dir)?;
        }
        // Created owner-only: SQLite gives the -wal and -shm files the mode
        // of the database file.
        {
            use std::os::unix::fs::OpenOptionsExt;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
            {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(Error::runtime(format!(
                        "cannot create memory database {}: {e}",
                        path.display()
                    )));
                }
            }
        }
        let conn = Connection::open(path).map_err(|e| {
            Error::runtime(format!(
                "cannot open memory database {}: {e}",
                path.display()
            ))
        })?;
        conn.busy_timeout(Duration::from_millis(busy_timeout_ms))?;
        let mem = Memory {
            conn,
            pending_run: std::cell::RefCell::new(None),
            scratch: None,
            redactor,
        };
        // Switching to WAL needs a moment of exclusive access, and SQLite
        // reports some lock conflicts without calling the busy handler, so
        // processes racing to create the database retry here.
        let deadline = std::time::Instant::now() + Duration::from_millis(busy_timeout_ms);
        loop {
            match mem.migrate() {
                Err(e) if e.busy && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5 + fastrand::u64(..10)));
                }
                other => return other.map(|_| mem),
            }
        }
    }

    fn version(&self) -> Result<usize> {
        let v: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        Ok(v as usize)
    }

    fn migrate(&self) -> Result<()> {
        let v = self.version()?;
        if v > MIGRATIONS.len() {
            return Err(Error::runtime(format!(
                "memory database schema version {v} is newer than this latchclaw supports ({}); upgrade latchclaw",
                MIGRATIONS.len()
            )));
        }
        if v < MIGRATIONS.len() {
            // WAL is persistent in the file, so it is set once, with the schema.
            let mode: String = self
                .conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::runtime(format!(
                    "memory database: cannot switch to WAL mode (got {mode})"
                )));
            }
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            let result = (|| {
                // Another process may have migrated while we waited for the lock.
                let now = self.version()?;
                for (i, sql) in MIGRATIONS.iter().enumerate().skip(now) {
                    self.conn.execute_batch(sql)?;
                    self.conn
                        .execute_batch(&format!("PRAGMA user_version = {}", i + 1))?;
                }
                Ok::<(), Error>(())
            })();
            match result {
                Ok(()) => self.conn.execute_batch("COMMIT")?,
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    return Err(e);
                }
            }
        }
        // WAL + NORMAL: a commit is atomic and survives a process crash; only
        // the last commits before a power cut may be lost. Receipts, the
        // audit trail, are fsynced on every append instead.
        // A shortish WAL: the first connection of a process rebuilds the WAL
        // index by reading every frame, so a long WAL slows each one-shot
        // start, while a short one checkpoints (two fsyncs) every run or two.
        // Measured (agent -m, median): 1000 pages 6.8 ms; 64 pages 4.8 ms
        // text / 11.8 ms five tool rounds; 256 pages 3.9 / 9.5 ms.
        self.conn
            .execute_batch("PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 256")?;
        // A one-shot process is usually the last connection, and checkpointing
        // on close would cost two fsyncs per run; the auto-checkpoint above
        // keeps the WAL short instead.
        self.conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
        Ok(())
    }

    /// The database if it exists; `None` creates nothing (for commands
    /// that only read).
    pub fn open_existing(
        path: &Path,
        busy_timeout_ms: u64,
        redactor: Arc<Redactor>,
    ) -> Result<Option<Memory>> {
        if !path.exists() {
            return Ok(None);
        }
        Memory::open(path, busy_timeout_ms, redactor).map(Some)
    }

    /// From now on turns are kept in this process only (`--no-memory`);
    /// run records and pending approvals are still written.
    /// The redactor every read-out passes through (a tool redacting what
    /// it hands on before the runtime sees it).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    pub fn keep_turns_in_process(&mut self) {
        self.scratch = Some(std::cell::RefCell::new(Vec::new()));
    }

    /// This run's turns are kept in the process only (`--no-memory`).
    pub fn turns_in_process(&self) -> bool {
        self.scratch.is_some()
    }

    pub fn conversation_exists(&self, id: &str) -> Result<bool> {
        if let Some(s) = &self.scratch
            && s.borrow().iter().any(|t| t.conversation_id == id)
        {
            return Ok(true);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM conversations WHERE id = ?1",
                [id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Stores a tool round in one transaction: the assistant turn that made
    /// the calls, the results it has, and for every call without one a
    /// result saying so (`missing`, e.g. "no result: the run was stopped
    /// (--timeout) before this call finished"). So the conversation never
    /// holds a call without its result, however the round ended.
    pub fn add_round(&self, round: &Round, missing: &str) -> Result<Vec<String>> {
        let mut unanswered = round.call_ids.clone();
        for r in &round.results {
            if let Some(i) = unanswered.iter().position(|id| *id == r.call_id) {
                unanswered.remove(i);
            }
        }
        let no_result: Vec<String> = unanswered
            .iter()
            .map(|id| serde_json::json!({"tool_call_id": id, "status": "no_result"}).to_string())
            .collect();
        let mut turns = vec![NewTurn {
            conversation_id: &round.conversation_id,
            role: TurnRole::Assistant,
            content: &round.content,
            tool_calls: Some(round.tool_calls.clone()),
            provider: Some(&round.provider),
            model: Some(&round.model),
            metadata: Some(round.metadata.clone()),
            ..Default::default()
        }];
        turns.extend(round.results.iter().map(|r| NewTurn {
            conversation_id: &round.conversation_id,
            role: TurnRole::Tool,
            content: &r.content,
            tool_results: r.tool_results.clone(),
            metadata: Some(r.metadata.clone()),
            ..Default::default()
        }));
        turns.extend(no_result.into_iter().map(|meta| NewTurn {
            conversation_id: &round.conversation_id,
            role: TurnRole::Tool,
            content: missing,
            metadata: Some(meta),
            ..Default::default()
        }));
        self.add_turns(&turns)
    }

    /// What a resumed conversation sends the model: its last `limit` turns
    /// made whole by [`paired`] (user, assistant and tool turns; latchclaw's
    /// own `system` notes are never sent). A few turns more are read so a
    /// window that starts among a round's results can reach back to the
    /// call that opened it.
    pub fn history(&self, conversation_id: &str, limit: u32) -> Result<Vec<Turn>> {
        let turns = self.turns(conversation_id, Some(limit.saturating_add(ROUND_SLACK)))?;
        Ok(paired(turns, limit as usize))
    }

    /// Stores one turn (creating its conversation if new); returns its id.
    pub fn add_turn(&self, t: &NewTurn) -> Result<String> {
        Ok(self.add_turns(std::slice::from_ref(t))?.remove(0))
    }

    /// Stores turns in one transaction; returns their ids. A tool round (the
    /// model's calls and their results) is written this way: each commit
    /// rewrites the pages it touched and starts a new FTS5 segment, so one
    /// commit per round instead of one per turn halves the pages written.
    pub fn add_turns(&self, turns: &[NewTurn]) -> Result<Vec<String>> {
        if let Some(scratch) = &self.scratch {
            return Ok(self.keep(scratch, turns));
        }
        let tx = self.conn.unchecked_transaction()?;
        let mut ids = Vec::with_capacity(turns.len());
        for t in turns {
            let turn_id = util::new_id("turn");
            let (secs, nanos) = util::clock_now();
            let ts = util::rfc3339(secs, nanos, 0);
            tx.prepare_cached(
                "INSERT INTO conversations (id, created_at, updated_at, updated_unix) VALUES (?1, ?2, ?2, ?3)
                 ON CONFLICT(id) DO UPDATE SET updated_at = ?2, updated_unix = ?3",
            )?
            .execute(params![t.conversation_id, ts, secs])?;
            tx.prepare_cached(
                "INSERT INTO turns (conversation_id, turn_id, timestamp, ts_unix, role, content,
                                    tool_calls, tool_results, provider, model, metadata)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                t.conversation_id,
                turn_id,
                ts,
                secs,
                t.role,
                t.content,
                t.tool_calls,
                t.tool_results,
                t.provider,
                t.model,
                t.metadata
            ])?;
            ids.push(turn_id);
        }
        if let Some(run) = self.pending_run.borrow_mut().take() {
            insert_run(&tx, &run)?;
        }
        tx.commit()?;
        for (t, id) in turns.iter().zip(&ids) {
            log::info!(target: "event::memory_persisted", "conversation={} turn={id} role={}", t.conversation_id, t.role);
        }
        Ok(ids)
    }

    /// `--no-memory`: the turns kept in the process; the run record that
    /// would have gone with them is written alone.
    fn keep(&self, scratch: &std::cell::RefCell<Vec<Turn>>, turns: &[NewTurn]) -> Vec<String> {
        if let Some(run) = self.pending_run.borrow_mut().take() {
            let _ = insert_run(&self.conn, &run);
        }
        let parse = |s: &Option<String>| json_col(s.clone());
        turns
            .iter()
            .map(|t| {
                let turn_id = util::new_id("turn");
                scratch.borrow_mut().push(Turn {
                    conversation_id: t.conversation_id.to_string(),
                    turn_id: turn_id.clone(),
                    timestamp: util::now_rfc3339(),
                    role: t.role,
                    content: t.content.to_string(),
                    tool_calls: parse(&t.tool_calls),
                    tool_results: parse(&t.tool_results),
                    provider: t.provider.map(String::from),
                    model: t.model.map(String::from),
                    metadata: parse(&t.metadata),
                });
                turn_id
            })
            .collect()
    }

    /// The last `limit` turns of a conversation, oldest first.
    pub fn turns(&self, conversation_id: &str, limit: Option<u32>) -> Result<Vec<Turn>> {
        let mut all = self.stored_turns(conversation_id, limit)?;
        if let Some(s) = &self.scratch {
            all.extend(
                s.borrow()
                    .iter()
                    .filter(|t| t.conversation_id == conversation_id)
                    .cloned(),
            );
            if let Some(n) = limit {
                let cut = all.len().saturating_sub(n as usize);
                all.drain(..cut);
            }
        }
        Ok(all)
    }

    fn stored_turns(&self, conversation_id: &str, limit: Option<u32>) -> Result<Vec<Turn>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT * FROM (
                SELECT id, conversation_id, turn_id, timestamp, role, content, tool_calls,
                       tool_results, provider, model, metadata
                FROM turns WHERE conversation_id = ?1 ORDER BY id DESC LIMIT ?2
             ) ORDER BY id",
        )?;
        let limit = limit.map_or(-1, i64::from);
        let rows = stmt.query_map(params![conversation_id, limit], |r| {
            Ok(Turn {
                conversation_id: r.get(1)?,
                turn_id: r.get(2)?,
                timestamp: r.get(3)?,
                role: r.get(4)?,
                content: r.get(5)?,
                tool_calls: json_col(r.get(6)?),
                tool_results: json_col(r.get(7)?),
                provider: r.get(8)?,
                model: r.get(9)?,
                metadata: json_col(r.get(10)?),
            })
        })?;
        rows.map(|t| Ok(redacted_turn(&self.redactor, t?)))
            .collect::<Result<_>>()
    }

    /// Conversations, most recently active first.
    pub fn list(&self, limit: u32) -> Result<Vec<ConversationSummary>> {
        let mut stmt = self.conn.prepare(
            "SELECT c.id, c.created_at, c.updated_at,
                    (SELECT count(*) FROM turns t WHERE t.conversation_id = c.id),
                    coalesce((SELECT content FROM turns t WHERE t.conversation_id = c.id
                              AND t.role = 'user' ORDER BY t.id LIMIT 1), ''),
                    c.session,
                    coalesce((SELECT group_concat(n.id) FROM notes n
                              WHERE n.store = 'summaries' AND n.chat_id = c.id), '')
             FROM conversations c ORDER BY c.updated_unix DESC, c.rowid DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit], |r| {
            Ok(ConversationSummary {
                conversation_id: r.get(0)?,
                created_at: r.get(1)?,
                last_activity: r.get(2)?,
                turns: r.get(3)?,
                first_message: r.get(4)?,
                session: r.get(5)?,
                summaries: r
                    .get::<_, String>(6)?
                    .split(',')
                    .filter_map(|i| i.parse().ok())
                    .collect(),
            })
        })?;
        rows.map(|c| {
            let mut c = c?;
            c.first_message = self.redactor.redact(&c.first_message).into_owned();
            Ok(c)
        })
        .collect::<Result<_>>()
    }

    /// Ranked search over the newest matches (whole words, then prefixes; all
    /// words, then any): FTS5 bm25 with recent turns boosted (up to ×2 for a
    /// turn from now, fading over about a month).
    /// Input with no words at all is a plain case-insensitive substring match.
    pub fn search(&self, query: &str, limit: u32) -> Result<Vec<Hit>> {
        if fts_query(query, " ").is_none() {
            return self.search_substring(query, limit);
        }
        // Whole words before prefixes, all words before any word: each step
        // runs only when the stricter one found nothing.
        let steps = [(" ", false), (" ", true), (" OR ", false), (" OR ", true)];
        self.search_steps(query, &steps, limit, CANDIDATES.max(limit * 5), None)
    }

    /// Turns of other conversations worth showing with a message as notes:
    /// only user and assistant turns (no tool output, nothing latchclaw
    /// wrote itself), and only those sharing a *rare* word with the
    /// message: not a stop word, at least three letters, and found in few
    /// turns (at most `max(3, turns / 50)`). "what", "files" or "please"
    /// match half the memory and say nothing about relevance. Snippets
    /// carry no highlight marks.
    pub fn search_context(
        &self,
        query: &str,
        limit: u32,
        exclude: Option<&str>,
    ) -> Result<Vec<Hit>> {
        let candidates = context_words(query);
        if candidates.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let span = self.rowid_span()?;
        let bound = ((span.1 - span.0 + 1) / 50).max(3);
        let mut count = self.conn.prepare_cached(
            "SELECT count(*) FROM
               (SELECT rowid FROM turns_fts WHERE turns_fts MATCH ?1 LIMIT ?2)",
        )?;
        let mut rare = Vec::new();
        for word in candidates {
            let term = Term {
                word,
                prefix: false,
            };
            let n: i64 = count.query_row(params![term.fts(), bound + 1], |r| r.get(0))?;
            if (1..=bound).contains(&n) {
                rare.push(term);
            }
        }
        if rare.is_empty() {
            return Ok(Vec::new());
        }
        let q = rare.iter().map(Term::fts).collect::<Vec<_>>().join(" OR ");
        let exclude = Some(exclude.unwrap_or(""));
        let mut rows = self.candidates(&q, limit * 20, exclude)?;
        let (now, _) = util::now_unix();
        let idf: Vec<f64> = rare
            .iter()
            .map(|t| self.idf(t, limit * 20, span))
            .collect::<Result<_>>()?;
        rank(&mut rows, &rare, &idf, now);
        rows.truncate(limit as usize);
        Ok(rows
            .into_iter()
            .map(|c| Hit {
                snippet: snippet(&self.redactor.redact(&c.content), &rare, NOTE_TOKENS, false),
                ..c.hit
            })
            .collect())
    }

    /// Runs FTS queries built from `query` by `steps` (join, prefix) until
    /// one finds something; each scores the newest `candidates` matches.
    /// `context` (the conversation to leave out) also leaves out tool turns.
    fn search_steps(
        &self,
        query: &str,
        steps: &[(&str, bool)],
        limit: u32,
        candidates: u32,
        context: Option<&str>,
    ) -> Result<Vec<Hit>> {
        let (now, _) = util::now_unix();
        let mut tried: Vec<String> = Vec::new();
        for &(join, prefix) in steps {
            let Some(q) = fts_query_with(query, join, prefix) else {
                break;
            };
            // A single word, or words too short for prefixes, repeat a step.
            if tried.contains(&q) {
                continue;
            }
            let mut rows = self.candidates(&q, candidates, context)?;
            if rows.is_empty() {
                tried.push(q);
                continue;
            }
            let terms = terms(query, prefix);
            let span = self.rowid_span()?;
            let idf: Vec<f64> = terms
                .iter()
                .map(|t| self.idf(t, candidates, span))
                .collect::<Result<_>>()?;
            rank(&mut rows, &terms, &idf, now);
            rows.truncate(limit as usize);
            return Ok(rows
                .into_iter()
                .map(|c| Hit {
                    snippet: snippet(
                        &self.redactor.redact(&c.content),
                        &terms,
                        SNIPPET_TOKENS,
                        true,
                    ),
                    ..c.hit
                })
                .collect());
        }
        Ok(Vec::new())
    }

    /// The newest `limit` turns matching an FTS query, with their text for
    /// scoring. FTS5 walks its doclists newest first and stops at the
    /// limit, so this costs the same for a rare word as for "the".
    fn candidates(&self, q: &str, limit: u32, context: Option<&str>) -> Result<Vec<Candidate>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.conversation_id, t.turn_id, t.timestamp, t.role, t.content, t.ts_unix, t.id
             FROM (SELECT rowid FROM turns_fts WHERE turns_fts MATCH ?1
                   ORDER BY rowid DESC LIMIT ?2) AS c
             JOIN turns t ON t.id = c.rowid
             WHERE t.role != 'system'
               AND NOT (t.role = 'tool' AND (t.tool_results LIKE '%\"tool\":\"memory_search\"%'
                                         OR t.tool_results LIKE '%\"tool\":\"memory_recall\"%'))
               AND (?3 IS NULL OR (t.conversation_id != ?3 AND t.role IN ('user', 'assistant')))",
        )?;
        let rows = stmt.query_map(params![q, limit, context], |r| {
            Ok(Candidate {
                hit: Hit {
                    conversation_id: r.get(0)?,
                    turn_id: r.get(1)?,
                    timestamp: r.get(2)?,
                    role: r.get(3)?,
                    snippet: String::new(),
                    score: 0.0,
                },
                content: r.get(4)?,
                ts_unix: r.get(5)?,
                rowid: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The first and last turn rowids: how many turns there are, near enough
    /// (deleted turns leave gaps), without counting them.
    fn rowid_span(&self) -> Result<(i64, i64)> {
        // Two subqueries: SQLite answers a lone min() or max() from the
        // b-tree's ends, but scans the table for both in one SELECT.
        let mut stmt = self
            .conn
            .prepare_cached("SELECT (SELECT min(id) FROM turns), (SELECT max(id) FROM turns)")?;
        let (first, last): (Option<i64>, Option<i64>) =
            stmt.query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok((first.unwrap_or(0), last.unwrap_or(0)))
    }

    /// BM25's inverse document frequency of one term. FTS5's own bm25()
    /// counts every turn holding each term, which for a common word in a
    /// million turns takes ~100 ms; here the count stops at `sample` and,
    /// past that, is estimated from how densely the newest `sample` matches
    /// lie among all turns.
    fn idf(&self, term: &Term, sample: u32, (first, last): (i64, i64)) -> Result<f64> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT count(*), min(rowid) FROM
               (SELECT rowid FROM turns_fts WHERE turns_fts MATCH ?1 ORDER BY rowid DESC LIMIT ?2)",
        )?;
        let (n, oldest): (i64, Option<i64>) =
            stmt.query_row(params![term.fts(), sample], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let total = (last - first + 1).max(1) as f64;
        let df = match oldest {
            Some(oldest) if n >= i64::from(sample) => {
                (n as f64 * total / (last - oldest + 1).max(1) as f64).min(total)
            }
            _ => n as f64,
        };
        // FTS5's bm25 idf, with its floor for terms in over half the turns.
        Ok(((total - df + 0.5) / (df + 0.5)).ln().max(1e-6))
    }

    fn search_substring(&self, query: &str, limit: u32) -> Result<Vec<Hit>> {
        let needle = query.trim();
        if needle.is_empty() {
            return Ok(Vec::new());
        }
        let escaped: String = needle
            .chars()
            .flat_map(|c| match c {
                '%' | '_' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let mut stmt = self.conn.prepare(
            "SELECT conversation_id, turn_id, timestamp, role, content
             , 0.0 FROM turns WHERE content LIKE '%' || ?1 || '%' ESCAPE '\\'
             ORDER BY id DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![escaped, limit], hit_from_row)?;
        // Redacted whole, then cut: a cut never leaves half a secret.
        rows.map(|h| {
            let mut h = h?;
            let clean = self.redactor.redact(&h.snippet);
            h.snippet = clean.chars().take(200).collect();
            Ok(h)
        })
        .collect::<Result<_>>()
    }

    /// Deletes every conversation; returns how many turns went.
    pub fn clear(&self) -> Result<usize> {
        let tx = self.conn.unchecked_transaction()?;
        let n = tx.execute("DELETE FROM turns", [])?;
        tx.execute("DELETE FROM conversations", [])?;
        // A plan's tasks and results are its conversation's.
        tx.execute("DELETE FROM tasks", [])?;
        tx.commit()?;
        Ok(n)
    }

    /// Records a call that waits for an operator; an identical pending call
    /// in the same conversation is reused, not duplicated.
    pub fn add_pending(
        &self,
        conversation_id: &str,
        workspace: &std::path::Path,
        tool: &str,
        args: &serde_json::Value,
        risk: Risk,
        reason: &str,
    ) -> Result<String> {
        let canonical = crate::receipts::canonical_json(args);
        let hash = call_hash(&canonical, workspace);
        if let Some(id) = self
            .conn
            .query_row(
                "SELECT id FROM approvals WHERE conversation_id = ?1 AND tool = ?2 AND args_hash = ?3
                 AND status = 'pending'",
                params![conversation_id, tool, hash],
                |r| r.get::<_, String>(0),
            )
            .optional()?
        {
            return Ok(id);
        }
        let id = util::new_id("approval");
        self.conn.execute(
            "INSERT INTO approvals (id, conversation_id, tool, arguments, args_hash, risk, reason,
                                    created_at, status, workspace)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9)",
            params![
                id,
                conversation_id,
                tool,
                canonical,
                hash,
                risk.as_str(),
                reason,
                util::now_rfc3339(),
                workspace.to_string_lossy()
            ],
        )?;
        Ok(id)
    }

    /// Pending approvals, or all of them with `all`.
    pub fn approvals(&self, all: bool) -> Result<Vec<PendingApproval>> {
        self.select_approvals("?1 OR status = 'pending'", params![all])
    }

    /// Calls of one conversation the operator approved that have not run.
    pub fn approved_unused(&self, conversation_id: &str) -> Result<Vec<PendingApproval>> {
        self.select_approvals(
            "conversation_id = ?1 AND status = 'approved'",
            params![conversation_id],
        )
    }

    pub fn approval(&self, id: &str) -> Result<Option<PendingApproval>> {
        Ok(self.select_approvals("id = ?1", params![id])?.pop())
    }

    fn select_approvals(
        &self,
        filter: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<PendingApproval>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT id, conversation_id, tool, arguments, risk, reason, created_at, status,
                    decided_at, used_at, workspace
             FROM approvals WHERE {filter} ORDER BY created_at, rowid"
        ))?;
        let rows = stmt.query_map(args, |r| {
            Ok(PendingApproval {
                id: r.get(0)?,
                conversation_id: r.get(1)?,
                tool: r.get(2)?,
                arguments: json_col(r.get(3)?).unwrap_or_default(),
                risk: r.get::<_, StoredRisk>(4)?.0,
                reason: r.get(5)?,
                created_at: r.get(6)?,
                status: r.get(7)?,
                decided_at: r.get(8)?,
                used_at: r.get(9)?,
                workspace: r.get(10)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Records "always for this conversation" for calls like this one.
    pub fn add_standing(
        &self,
        conversation_id: &str,
        workspace: &std::path::Path,
        tool: &str,
        scope: &str,
        risk: Risk,
    ) -> Result<String> {
        let id = util::new_id("always");
        self.conn.execute(
            "INSERT INTO standing_approvals (id, conversation_id, workspace, tool, scope, risk,
                                             created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                id,
                conversation_id,
                workspace.to_string_lossy(),
                tool,
                scope,
                risk.as_str(),
                util::now_rfc3339()
            ],
        )?;
        Ok(id)
    }

    /// The standing approval that covers a call of `risk`, if one does.
    pub fn standing_for(
        &self,
        conversation_id: &str,
        workspace: &std::path::Path,
        tool: &str,
        scope: &str,
        risk: Risk,
    ) -> Result<Option<String>> {
        Ok(self
            .standings(false)?
            .into_iter()
            .find(|a| {
                a.conversation_id == conversation_id
                    && a.workspace == workspace.to_string_lossy()
                    && a.tool == tool
                    && a.scope == scope
                    && risk <= a.risk
            })
            .map(|a| a.id))
    }

    /// Standing approvals in force, or all of them (revoked too) with `all`.
    pub fn standings(&self, all: bool) -> Result<Vec<Standing>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, conversation_id, workspace, tool, scope, risk, created_at, revoked_at
             FROM standing_approvals WHERE ?1 OR revoked_at IS NULL ORDER BY created_at, rowid",
        )?;
        let rows = stmt.query_map(params![all], |r| {
            Ok((
                Standing {
                    id: r.get(0)?,
                    conversation_id: r.get(1)?,
                    workspace: r.get(2)?,
                    tool: r.get(3)?,
                    scope: r.get(4)?,
                    risk: Risk::Low,
                    created_at: r.get(6)?,
                    revoked_at: r.get(7)?,
                },
                r.get::<_, String>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (mut a, risk) = row?;
            a.risk = Risk::parse(&risk).ok_or_else(|| {
                Error::new(
                    crate::error::Kind::Integrity,
                    format!("standing approval {}: unknown risk \"{risk}\"", a.id),
                )
            })?;
            out.push(a);
        }
        Ok(out)
    }

    /// Revokes a standing approval; false when there is none in force.
    pub fn revoke_standing(&self, id: &str) -> Result<bool> {
        Ok(self.conn.execute(
            "UPDATE standing_approvals SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![id, util::now_rfc3339()],
        )? == 1)
    }

    /// Approves or denies a pending call; anything not pending is refused.
    pub fn decide_approval(&self, id: &str, approve: bool) -> Result<()> {
        let n = self.conn.execute(
            "UPDATE approvals SET status = ?2, decided_at = ?3 WHERE id = ?1 AND status = 'pending'",
            params![
                id,
                if approve {
                    ApprovalStatus::Approved
                } else {
                    ApprovalStatus::Denied
                }
                .as_str(),
                util::now_rfc3339()
            ],
        )?;
        if n == 1 {
            return Ok(());
        }
        Err(match self.approval(id)? {
            Some(a) => Error::usage(format!(
                "approval {id} is already {}; only pending ones can be decided",
                a.status
            )),
            None => Error::usage(format!(
                "no approval \"{id}\"; `latchclaw approvals list` shows them"
            )),
        })
    }

    /// Consumes an approval for exactly this call in this conversation, so
    /// it runs once; returns its id.
    pub fn take_approved(
        &self,
        conversation_id: &str,
        workspace: &std::path::Path,
        tool: &str,
        args: &serde_json::Value,
    ) -> Result<Option<String>> {
        let hash = call_hash(&crate::receipts::canonical_json(args), workspace);
        Ok(self
            .conn
            .query_row(
                "UPDATE approvals SET status = 'used', used_at = ?4
                 WHERE id = (SELECT id FROM approvals WHERE conversation_id = ?1 AND tool = ?2
                             AND args_hash = ?3 AND status = 'approved' ORDER BY rowid LIMIT 1)
                 RETURNING id",
                params![conversation_id, tool, hash, util::now_rfc3339()],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Atomically against other processes (so two runs cannot both take
    /// the last call of an allowance): `decide` gets the calls of `tool`
    /// and of every tool recorded in the last `window_ms`, and one call is
    /// recorded now when it returns true. Returns what `decide` said.
    pub fn admit_tool_call(
        &self,
        tool: &str,
        window_ms: i64,
        decide: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<bool> {
        let (secs, nanos) = util::now_unix();
        let now = secs * 1000 + i64::from(nanos / 1_000_000);
        let db = self.conn.path().unwrap_or_default();
        let path = call_counts::path_for(Path::new(db));
        call_counts::admit(&path, tool, now, window_ms, decide)
            .map_err(|e| Error::runtime(format!("tool call counts {}: {e}", path.display())))
    }

    /// Each tool's calls in the stored rounds since `since` (Unix seconds):
    /// how many, how many succeeded, and the durations of those that ran,
    /// read from each result's `measured` (older rounds have none and
    /// count as calls only). By name.
    pub fn tool_stats(&self, since: Option<i64>) -> Result<Vec<ToolStat>> {
        let mut stmt = self.conn.prepare(
            "SELECT tool_results FROM turns
             WHERE role = 'tool' AND tool_results IS NOT NULL AND ts_unix >= ?1",
        )?;
        let rows = stmt.query_map([since.unwrap_or(i64::MIN)], |r| r.get::<_, String>(0))?;
        let mut by: std::collections::BTreeMap<String, ToolStat> = Default::default();
        for row in rows {
            // `[{"tool": NAME, "result": {...}}]`, as `runtime` stores it.
            let v: serde_json::Value = serde_json::from_str(&row?).unwrap_or_default();
            let first = &v[0];
            let Some(tool) = first["tool"].as_str().map(String::from) else {
                continue;
            };
            let ok = first["result"]["success"].as_bool();
            let ms = first["result"]["measured"]["duration_ms"].as_i64();
            let s = by.entry(tool.clone()).or_insert_with(|| ToolStat {
                tool,
                ..Default::default()
            });
            s.calls += 1;
            s.succeeded += u64::from(ok == Some(true));
            if let Some(ms) = ms {
                s.durations_ms.push(ms.max(0) as u64);
            }
        }
        Ok(by
            .into_values()
            .map(|mut s| {
                crate::util::sort::sort(&mut s.durations_ms);
                s
            })
            .collect())
    }

    /// Starts a run record; it is written with the run's first turn, or by
    /// `run_finished` if there is none.
    pub fn run_started(&self, command: &str, lock_name: Option<&str>) -> Result<String> {
        let id = util::new_id("run");
        *self.pending_run.borrow_mut() = Some(RunStart {
            id: id.clone(),
            started_at: util::now_rfc3339(),
            command: command.to_string(),
            lock_name: lock_name.map(String::from),
        });
        Ok(id)
    }

    pub fn run_finished(
        &self,
        id: &str,
        exit_code: i32,
        reason: &str,
        conversation_id: Option<&str>,
        usage: Option<&crate::types::Usage>,
    ) -> Result<()> {
        if let Some(run) = self.pending_run.borrow_mut().take() {
            insert_run(&self.conn, &run)?;
        }
        self.conn.execute(
            "UPDATE runs SET ended_at = ?2, exit_code = ?3, exit_reason = ?4,
                             conversation_id = coalesce(?5, conversation_id),
                             prompt_tokens = ?6, completion_tokens = ?7, cached_tokens = ?8
             WHERE id = ?1",
            params![
                id,
                util::now_rfc3339(),
                exit_code,
                reason,
                conversation_id,
                usage.map(|u| u.prompt_tokens as i64),
                usage.map(|u| u.completion_tokens as i64),
                usage.map(|u| u.cached_tokens as i64)
            ],
        )?;
        Ok(())
    }

    /// The most recent runs, newest first.
    pub fn runs(&self, limit: u32) -> Result<Vec<Run>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, started_at, ended_at, exit_code, exit_reason, conversation_id, lock_name, pid, command,
                    prompt_tokens, completion_tokens, cached_tokens
             FROM runs ORDER BY started_at DESC, rowid DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit], |r| {
            Ok(Run {
                id: r.get(0)?,
                started_at: r.get(1)?,
                ended_at: r.get(2)?,
                exit_code: r.get(3)?,
                exit_reason: r.get(4)?,
                conversation_id: r.get(5)?,
                lock_name: r.get(6)?,
                pid: r.get(7)?,
                command: r.get(8)?,
                prompt_tokens: r.get(9)?,
                completion_tokens: r.get(10)?,
                cached_tokens: r.get(11)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The most recently active conversation, if any.
    pub fn latest_conversation(&self) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM conversations ORDER BY updated_unix DESC, rowid DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?)
    }
}

/// What an approval is for: the call's canonical arguments and the
/// workspace it was asked in. The same arguments do something else in
/// another directory (a run works in the git work tree it starts in), so
/// an approval given in one is never used in another.
fn call_hash(canonical_args: &str, workspace: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = canonical_args.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(workspace.as_os_str().as_bytes());
    util::sha256_hex(&bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn mem() -> (Memory, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-mem"));
        let m = Memory::open(&dir.join("m.sqlite"), 1000, Default::default()).unwrap();
        (m, dir)
    }

    fn add(m: &Memory, conv: &str, role: &str, content: &str) {
        m.add_turn(&NewTurn {
            conversation_id: conv,
            role: TurnRole::parse(role).unwrap(),
            content,
            ..Default::default()
        })
        .unwrap();
    }

    #[test]
    fn a_round_is_stored_in_order_in_one_go() {
        let (m, dir) = mem();
        add(&m, "c", "user", "list the files");
        let turn = |role: &str, content| NewTurn {
            conversation_id: "c",
            role: TurnRole::parse(role).unwrap(),
            content,
            ..Default::default()
        };
        let ids = m
            .add_turns(&[
                turn("assistant", ""),
                turn("tool", "a.txt"),
                turn("tool", "b.txt"),
            ])
            .unwrap();
        assert_eq!(ids.len(), 3);
        let stored = m.turns("c", None).unwrap();
        let got: Vec<(&str, &str)> = stored
            .iter()
            .map(|t| (t.role.as_str(), t.turn_id.as_str()))
            .skip(1)
            .collect();
        let want: Vec<(&str, &str)> = ["assistant", "tool", "tool"]
            .into_iter()
            .zip(ids.iter().map(String::as_str))
            .collect();
        assert_eq!(got, want);
        // A turn the database refuses rolls the whole round back.
        m.conn
            .execute_batch(
                "CREATE TEMP TRIGGER refuse BEFORE INSERT ON turns WHEN new.content = 'x'
                 BEGIN SELECT RAISE(ABORT, 'refused'); END;",
            )
            .unwrap();
        assert!(
            m.add_turns(&[turn("tool", "c.txt"), turn("tool", "x")])
                .is_err()
        );
        assert_eq!(m.turns("c", None).unwrap().len(), 4);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A stored turn for `paired`: `calls` on an assistant turn, the call
    /// id it answers on a tool turn.
    fn turn(role: &str, content: &str, calls: &[&str], answers: Option<&str>) -> Turn {
        Turn {
            conversation_id: "c".into(),
            turn_id: format!("turn-{content}"),
            timestamp: "t".into(),
            role: TurnRole::parse(role).unwrap(),
            content: content.into(),
            tool_calls: (!calls.is_empty()).then(|| {
                serde_json::Value::Array(
                    calls
                        .iter()
                        .map(|id| serde_json::json!({"id": id, "name": "time", "arguments": {}}))
                        .collect(),
                )
            }),
            tool_results: None,
            provider: None,
            model: None,
            metadata: answers.map(|id| serde_json::json!({"tool_call_id": id})),
        }
    }

    /// The shape of what `paired` returns: `role:content` or, for a tool
    /// turn, `tool:ID=content`.
    fn shape(turns: &[Turn]) -> Vec<String> {
        turns
            .iter()
            .map(|t| match tool_call_id(t) {
                Some(id) => format!("tool:{id}={}", t.content),
                None => format!("{}:{}", t.role, t.content),
            })
            .collect()
    }

    /// OpenAI's rule, as the tests' strict server applies it: each call
    /// answered by the tool turns right after it, no tool turn without a call.
    fn follows_the_pairing_rule(turns: &[Turn]) -> bool {
        let mut i = 0;
        while i < turns.len() {
            match turns[i].role.as_str() {
                "tool" => return false,
                "assistant" => {
                    let mut open = call_ids(&turns[i]).unwrap_or_default();
                    i += 1;
                    while i < turns.len() && turns[i].role == TurnRole::Tool {
                        match tool_call_id(&turns[i])
                            .and_then(|id| open.iter().position(|o| o == id))
                        {
                            Some(p) => open.remove(p),
                            None => return false,
                        };
                        i += 1;
                    }
                    if !open.is_empty() {
                        return false;
                    }
                }
                _ => i += 1,
            }
        }
        true
    }

    #[test]
    fn history_gives_every_call_a_result_and_drops_orphans() {
        let t = turn;
        // A process killed mid-round before rounds were stored whole: the
        // call b has no result, then the conversation went on.
        let stored = vec![
            t("user", "u1", &[], None),
            t("assistant", "", &["a", "b"], None),
            t("tool", "ra", &[], Some("a")),
            t("user", "u2", &[], None),
            t("tool", "stray", &[], Some("a")),
            t("system", "stopped", &[], None),
            t("assistant", "", &["c"], None),
        ];
        let got = paired(stored.clone(), 100);
        assert_eq!(
            shape(&got),
            [
                "user:u1".to_string(),
                "assistant:".into(),
                "tool:a=ra".into(),
                format!("tool:b={NO_RESULT}"),
                "user:u2".into(),
                "assistant:".into(),
                format!("tool:c={NO_RESULT}"),
            ]
        );
        assert!(follows_the_pairing_rule(&got));
        assert!(!follows_the_pairing_rule(&stored));
        // A result answering a call twice, or a call id nobody made, goes.
        let got = paired(
            vec![
                t("assistant", "", &["x"], None),
                t("tool", "r1", &[], Some("x")),
                t("tool", "r2", &[], Some("x")),
                t("tool", "r3", &[], Some("nobody")),
                t("tool", "r4", &[], None),
            ],
            100,
        );
        assert_eq!(shape(&got), ["assistant:", "tool:x=r1"]);
        // The same id in two rounds (servers that number calls per reply)
        // pairs with the nearest call; a repeated id in one reply needs a
        // result per call.
        let got = paired(
            vec![
                t("assistant", "", &["call_0"], None),
                t("tool", "r1", &[], Some("call_0")),
                t("assistant", "", &["call_0", "call_0"], None),
                t("tool", "r2", &[], Some("call_0")),
            ],
            100,
        );
        assert!(follows_the_pairing_rule(&got), "{:?}", shape(&got));
        assert_eq!(got.len(), 5);
        // Calls that cannot be sent back (no id) are dropped with their
        // results; the text stays.
        let mut unreadable = t("assistant", "text", &[], None);
        unreadable.tool_calls = Some(serde_json::json!([{"name": "time"}]));
        let got = paired(vec![unreadable, t("tool", "r", &[], Some("call_0"))], 100);
        assert_eq!(shape(&got), ["assistant:text"]);
        assert!(got[0].tool_calls.is_none());
    }

    #[test]
    fn the_context_window_never_starts_between_a_call_and_its_results() {
        let t = turn;
        let stored = vec![
            t("user", "u1", &[], None),
            t("assistant", "", &["a", "b", "c"], None),
            t("tool", "ra", &[], Some("a")),
            t("tool", "rb", &[], Some("b")),
            t("tool", "rc", &[], Some("c")),
            t("assistant", "done", &[], None),
        ];
        // The last 3 turns start at rb: the window reaches back to the call.
        assert_eq!(
            shape(&paired(stored.clone(), 3)),
            [
                "assistant:",
                "tool:a=ra",
                "tool:b=rb",
                "tool:c=rc",
                "assistant:done"
            ]
        );
        assert_eq!(shape(&paired(stored.clone(), 1)), ["assistant:done"]);
        assert!(paired(stored.clone(), 0).is_empty());
        // Read with too little slack to reach the call: the results go.
        assert_eq!(shape(&paired(stored[3..].to_vec(), 3)), ["assistant:done"]);
        // Property: any window of any mix is sent whole.
        let mut rng = fastrand::Rng::with_seed(12);
        for _ in 0..2_000 {
            let mut turns = Vec::new();
            for i in 0..rng.usize(0..12) {
                let id = ["a", "b", "c"][rng.usize(0..3)];
                turns.push(match rng.usize(0..5) {
                    0 => t("user", "u", &[], None),
                    1 => t("assistant", "", &[], None),
                    2 => t("assistant", "", &[["a", "b", "c"][i % 3], id], None),
                    3 => t("system", "s", &[], None),
                    _ => t("tool", "r", &[], Some(id)),
                });
            }
            let got = paired(turns.clone(), rng.usize(0..14));
            assert!(
                follows_the_pairing_rule(&got),
                "{:?} -> {:?}",
                shape(&turns),
                shape(&got)
            );
        }
    }

    #[test]
    fn a_round_is_stored_whole_whatever_its_calls_got() {
        let (m, dir) = mem();
        add(&m, "c", "user", "run two things");
        let round = Round {
            conversation_id: "c".into(),
            content: String::new(),
            tool_calls: serde_json::json!([
                {"id": "a", "name": "shell", "arguments": {}},
                {"id": "b", "name": "time", "arguments": {}}
            ])
            .to_string(),
            call_ids: vec!["a".into(), "b".into()],
            provider: "p".into(),
            model: "m".into(),
            metadata: "{}".into(),
            results: vec![RoundResult {
                call_id: "a".into(),
                content: "ok".into(),
                tool_results: None,
                metadata: serde_json::json!({"tool_call_id": "a", "status": "allowed"}).to_string(),
            }],
        };
        m.add_round(&round, "no result: stopped").unwrap();
        let stored = m.turns("c", None).unwrap();
        assert_eq!(
            shape(&stored),
            [
                "user:run two things",
                "assistant:",
                "tool:a=ok",
                "tool:b=no result: stopped"
            ]
        );
        assert_eq!(stored[3].metadata.as_ref().unwrap()["status"], "no_result");
        assert!(follows_the_pairing_rule(&m.history("c", 20).unwrap()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn hostile_queries_never_raise_fts_errors() {
        let (m, dir) = mem();
        add(
            &m,
            "c1",
            "user",
            "The Aardvark adapter: NEAR the \"quoted\" *star* - minus",
        );
        for q in [
            "",
            " ",
            "\"",
            "\"\"\"",
            "*",
            "-",
            ":",
            "NEAR",
            "NEAR(",
            "a OR",
            "AND",
            "NOT x",
            "col:val",
            "^x",
            "(",
            ")",
            "{}",
            "'",
            "é",
            "日本語",
            "🦀",
            "x*y",
            "-aardvark",
            "\u{0}",
            "content:aardvark",
            "aardvark\"",
            "%",
            "_",
            "\\",
        ] {
            m.search(q, 10).unwrap_or_else(|e| panic!("{q:?}: {e}"));
        }
        let hits = m.search("aardvark", 10).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].conversation_id, "c1");
        assert_eq!(m.search("AARDVARK adapter", 10).unwrap().len(), 1);
        assert_eq!(m.search("NEAR", 10).unwrap().len(), 1);
        assert_eq!(m.search("*star*", 10).unwrap().len(), 1);
        assert_eq!(m.search("aardv", 10).unwrap().len(), 1, "prefix match");
        assert_eq!(m.search("\"", 10).unwrap().len(), 1, "substring fallback");
        assert_eq!(m.search("zebra", 10).unwrap().len(), 0);
        // Property: random Unicode and FTS syntax never make an error.
        let mut rng = fastrand::Rng::with_seed(3);
        let pieces = [
            "NEAR", "OR", "\"", "*", "(", ")", ":", "-", "^", " ", "aardvark", "AND",
        ];
        for _ in 0..2_000 {
            let q = crate::util::arbitrary::text(&mut rng, &pieces, 10);
            m.search(&q, 5).unwrap_or_else(|e| panic!("{q:?}: {e}"));
            m.search_context(&q, 5, Some("c9"))
                .unwrap_or_else(|e| panic!("{q:?}: {e}"));
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn context_search_counts_a_repeated_word_once() {
        let (m, dir) = mem();
        add(&m, "old", "user", "a note about hhhh");
        // Nine distinct words and a repeat: the eight kept must be distinct,
        // so "hhhh" is among them.
        let msg = "aaaa bbbb aaaa cccc dddd eeee ffff gggg hhhh iiii";
        let hits = m.search_context(msg, 5, Some("new")).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].conversation_id, "old");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn snippets_mark_the_best_window() {
        let t = terms("rust borrow", true);
        let text = "one two three four Rust five six borrowing seven eight nine ten";
        assert_eq!(snippet(text, &t, 4, true), "…[Rust] five six [borrowing]…");
        assert_eq!(
            snippet(text, &t, 100, true),
            "one two three four [Rust] five six [borrowing] seven eight nine ten"
        );
        assert_eq!(snippet("Rust, é-rust!", &t, 2, true), "[Rust], é…");
        assert_eq!(
            snippet("Ünïcode ruST", &terms("rust", false), 16, true),
            "Ünïcode [ruST]"
        );
        assert_eq!(snippet("¿¡", &t, 16, true), "¿¡");
    }

    #[test]
    fn ranking_prefers_relevance_then_any_term() {
        let (m, dir) = mem();
        add(&m, "a", "user", "weather report for monday");
        add(&m, "b", "user", "rust rust rust borrow checker rust");
        add(
            &m,
            "c",
            "user",
            "a note mentioning rust once among many other words here",
        );
        let hits = m.search("rust", 10).unwrap();
        assert_eq!(
            hits.iter()
                .map(|h| h.conversation_id.as_str())
                .collect::<Vec<_>>(),
            ["b", "c"]
        );
        // No turn has both words, so any-term matching takes over.
        let hits = m.search("monday borrow", 10).unwrap();
        assert_eq!(hits.len(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_version_1_database_migrates_forward() {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-mig"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.sqlite");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(MIGRATIONS[0]).unwrap();
            c.execute_batch("PRAGMA user_version = 1").unwrap();
            c.execute("INSERT INTO conversations VALUES ('old', 't', 't', 0)", [])
                .unwrap();
        }
        let m = Memory::open(&path, 1000, Default::default()).unwrap();
        assert_eq!(m.version().unwrap(), MIGRATIONS.len());
        assert!(m.conversation_exists("old").unwrap(), "data kept");
        let id = m
            .add_pending(
                "old",
                std::path::Path::new("/w"),
                "shell",
                &serde_json::json!({"command": "ls"}),
                Risk::High,
                "r",
            )
            .unwrap();
        let listed = &m.approvals(false).unwrap()[0];
        assert_eq!(listed.id, id);
        assert_eq!(
            (listed.risk, listed.status),
            (Risk::High, ApprovalStatus::Pending)
        );
        // A risk the gate does not know is an error naming it, never read
        // as some risk (it used to be taken as "high").
        m.conn
            .execute("UPDATE approvals SET risk = 'catastrophic'", [])
            .unwrap();
        let e = m.approvals(false).unwrap_err();
        assert!(e.msg.contains("unknown risk \"catastrophic\""), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn list_show_clear_and_migration_version() {
        let (m, dir) = mem();
        add(&m, "c1", "user", "hi");
        add(&m, "c1", "assistant", "hello");
        add(&m, "c2", "user", "later");
        assert_eq!(m.version().unwrap(), MIGRATIONS.len());
        let l = m.list(10).unwrap();
        assert_eq!(l.len(), 2);
        let c1 = l.iter().find(|c| c.conversation_id == "c1").unwrap();
        assert_eq!((c1.turns, c1.first_message.as_str()), (2, "hi"));
        let t = m.turns("c1", None).unwrap();
        assert_eq!(
            t.iter().map(|t| t.role.as_str()).collect::<Vec<_>>(),
            ["user", "assistant"]
        );
        assert_eq!(m.turns("c1", Some(1)).unwrap()[0].content, "hello");
        assert_eq!(m.clear().unwrap(), 3);
        assert!(m.list(10).unwrap().is_empty());
        assert!(m.search("hello", 10).unwrap().is_empty());
        // Reopening an up-to-date database is a no-op; a newer one is refused.
        drop(m);
        let m = Memory::open(&dir.join("m.sqlite"), 1000, Default::default()).unwrap();
        m.conn.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(m);
        let err = Memory::open(&dir.join("m.sqlite"), 1000, Default::default())
            .err()
            .unwrap();
        assert!(err.msg.contains("newer"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Two connections (two runs) count against one allowance; refused
    /// calls are not recorded; rows older than the window are pruned.
    #[test]
    fn tool_calls_are_counted_across_connections() {
        let dir = std::env::temp_dir().join(format!("lc-mem-calls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.sqlite");
        let a = Memory::open(&path, 1000, Default::default()).unwrap();
        let b = Memory::open(&path, 1000, Default::default()).unwrap();
        let under = |limit: u32| move |n: u32, _all: u32| n < limit;
        assert!(
            a.admit_tool_call("shell", 3_600_000, &mut under(2))
                .unwrap()
        );
        assert!(
            b.admit_tool_call("shell", 3_600_000, &mut under(2))
                .unwrap()
        );
        assert!(
            !a.admit_tool_call("shell", 3_600_000, &mut under(2))
                .unwrap()
        );
        assert!(
            !b.admit_tool_call("shell", 3_600_000, &mut under(2))
                .unwrap()
        );
        assert!(b.admit_tool_call("http", 3_600_000, &mut under(2)).unwrap());
        let mut seen = 0;
        let mut all = 0;
        b.admit_tool_call("shell", 3_600_000, &mut |n, a| {
            (seen, all) = (n, a);
            false
        })
        .unwrap();
        assert_eq!(seen, 2, "refused calls are not counted");
        assert_eq!(all, 3, "every tool's calls: two shell, one http");
        // Every call an hour old: the allowance is back.
        let counts = call_counts::path_for(&path);
        let aged: String = std::fs::read_to_string(&counts)
            .unwrap()
            .lines()
            .map(|l| {
                let (at, tool) = l.split_once(' ').unwrap();
                format!("{} {tool}\n", at.parse::<i64>().unwrap() - 3_600_001)
            })
            .collect();
        std::fs::write(&counts, aged).unwrap();
        assert!(
            a.admit_tool_call("shell", 3_600_000, &mut under(1))
                .unwrap()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
