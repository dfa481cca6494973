//! Notes the model keeps on purpose (`memory_store`), beside the turns, in
//! two stores: `user_memory` (a category from the seed's nine or
//! `memory.categories`, a 0–100 priority for goals, projects and open
//! loops) and `summaries` (a summary type and its period key; written by
//! `memory summarize` too). Tags, and text that went through the redactor
//! before it was stored. Searched with the same FTS5 candidates and BM25 +
//! recency scoring as turns, and drawn on first by the prompt's memory
//! layer.

use super::{Memory, Term, context_words, fts_query_with, scores, terms};
use crate::error::{Error, Result};
use crate::types::args::{NoteFilter, Store};
use crate::util;
use rusqlite::{OptionalExtension, params_from_iter, types::Value as Sql};
use serde::Serialize;

/// The `pursuingPriority` from which an open loop, goal or project goes
/// with every message the memory layer is sent with.
pub const HIGH_PRIORITY: i64 = 50;

/// About how many notes there are, for BM25 and the rare-word bar: the
/// highest id (ids are never reused), read from the end of the table,
/// where `count(*)` reads all of it (18 ms at a million notes).
const NOTES_TOTAL: &str = "SELECT coalesce(max(id), 0) FROM notes";

/// Where counting a word's notes stops (for its BM25 weight).
const DF_CAP: i64 = 5000;

/// Matches scored per query step (newest first), as for turns.
const CANDIDATES: u32 = 2000;

/// A note about to be stored; [`check_note`] has passed it.
#[derive(Debug, Clone)]
pub struct NewNote<'a> {
    pub text: &'a str,
    pub category: &'a str,
    pub tags: &'a [String],
    pub conversation_id: Option<&'a str>,
    /// Who stored it: "memory_store" for the tool.
    pub source: &'a str,
    pub store: Store,
    pub priority: Option<u8>,
    /// A summary's period: its key and its Unix seconds `[start, end)`.
    pub period: Option<(&'a str, i64, i64)>,
    pub chat_id: Option<&'a str>,
    /// The conversations a summary covers.
    pub covers: &'a [String],
}

impl<'a> NewNote<'a> {
    /// A `user_memory` note with no priority.
    pub fn note(
        text: &'a str,
        category: &'a str,
        tags: &'a [String],
        conversation_id: Option<&'a str>,
        source: &'a str,
    ) -> NewNote<'a> {
        NewNote {
            text,
            category,
            tags,
            conversation_id,
            source,
            store: Store::UserMemory,
            priority: None,
            period: None,
            chat_id: None,
            covers: &[],
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Note {
    pub id: i64,
    pub created_at: String,
    pub category: String,
    pub tags: Vec<String>,
    pub text: String,
    pub conversation_id: Option<String>,
    pub source: String,
    pub store: Store,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    /// The conversations a summary covers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub covers: Vec<String>,
    /// BM25 + recency when found by a query (higher is better).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

const COLUMNS: &str = "n.id, n.created_at, n.category, n.tags, n.text, n.conversation_id, \
     n.source, n.created_unix, n.store, n.priority, n.period_key, n.chat_id, n.covers";

/// A note row (see [`COLUMNS`]) as read out: redacted again, since a note
/// may predate a secret being configured.
fn note_from_row(
    redactor: &crate::security::redact::Redactor,
    r: &rusqlite::Row,
) -> rusqlite::Result<(Note, i64)> {
    let tags: String = r.get(3)?;
    let text: String = r.get(4)?;
    Ok((
        Note {
            id: r.get(0)?,
            created_at: r.get(1)?,
            category: r.get(2)?,
            tags: serde_json::from_str::<Vec<String>>(&tags)
                .unwrap_or_default()
                .into_iter()
                .map(|t| redactor.redact(&t).into_owned())
                .collect(),
            text: redactor.redact(&text).into_owned(),
            conversation_id: r.get(5)?,
            source: r.get(6)?,
            store: if r.get::<_, String>(8)? == "summaries" {
                Store::Summaries
            } else {
                Store::UserMemory
            },
            priority: r.get::<_, Option<i64>>(9)?.map(|p| p.clamp(0, 100) as u8),
            period_key: r.get(10)?,
            chat_id: r.get(11)?,
            covers: r
                .get::<_, Option<String>>(12)?
                .and_then(|c| serde_json::from_str(&c).ok())
                .unwrap_or_default(),
            score: None,
        },
        r.get(7)?,
    ))
}

impl Memory {
    /// Stores a note, its text and tags through the redactor first: a
    /// model cannot keep a secret it saw. The caller has run
    /// [`check_note`].
    pub fn add_note(&self, n: &NewNote) -> Result<Note> {
        let text = self.redactor.redact(n.text).into_owned();
        let tags: Vec<String> = n
            .tags
            .iter()
            .map(|t| self.redactor.redact(t).into_owned())
            .collect();
        let (secs, nanos) = util::clock_now();
        let created_at = util::rfc3339(secs, nanos, 0);
        let covers = (!n.covers.is_empty())
            .then(|| serde_json::to_string(n.covers).unwrap_or_else(|_| "[]".into()));
        let inserted = self.conn.execute(
            "INSERT INTO notes (created_at, created_unix, category, tags, text, conversation_id,
                                source, store, priority, period_key, period_start, period_end,
                                chat_id, covers)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            rusqlite::params![
                created_at,
                secs,
                n.category,
                serde_json::to_string(&tags).unwrap_or_else(|_| "[]".into()),
                text,
                n.conversation_id,
                n.source,
                n.store.as_str(),
                n.priority,
                n.period.map(|p| p.0),
                n.period.map(|p| p.1),
                n.period.map(|p| p.2),
                n.chat_id,
                covers,
            ],
        );
        if let Err(rusqlite::Error::SqliteFailure(e, _)) = &inserted
            && e.code == rusqlite::ErrorCode::ConstraintViolation
            && let Some((key, _, _)) = n.period
        {
            let held = self.summary_id(n.category, key, n.chat_id)?.unwrap_or(0);
            return Err(Error::usage(format!(
                "a {} for {key}{} is already stored (id {held}); forget it first to replace it",
                n.category,
                n.chat_id.map(|c| format!(" of {c}")).unwrap_or_default()
            )));
        }
        inserted?;
        let id = self.conn.last_insert_rowid();
        log::info!(target: "event::note_stored", "note={id} store={} category={}", n.store.as_str(), n.category);
        Ok(Note {
            id,
            created_at,
            category: n.category.to_string(),
            tags,
            text,
            conversation_id: n.conversation_id.map(String::from),
            source: n.source.to_string(),
            store: n.store,
            priority: n.priority,
            period_key: n.period.map(|p| p.0.to_string()),
            chat_id: n.chat_id.map(String::from),
            covers: n.covers.to_vec(),
            score: None,
        })
    }

    /// The id of the summary of this type, key and chat, if one is stored.
    pub fn summary_id(&self, kind: &str, key: &str, chat_id: Option<&str>) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM notes WHERE store = 'summaries' AND category = ?1
                 AND period_key = ?2 AND coalesce(chat_id, '') = coalesce(?3, '')",
                rusqlite::params![kind, key, chat_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    pub fn note(&self, id: i64) -> Result<Option<Note>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM notes n WHERE n.id = ?1"),
                [id],
                |r| note_from_row(&self.redactor, r),
            )
            .optional()?
            .map(|(n, _)| n))
    }

    /// Deletes a note; returns it, or an error naming the id when there is
    /// none.
    pub fn forget_note(&self, id: i64) -> Result<Note> {
        let Some(note) = self.note(id)? else {
            return Err(Error::usage(format!(
                "no note {id}; `latchclaw memory notes` lists them"
            )));
        };
        self.conn.execute("DELETE FROM notes WHERE id = ?1", [id])?;
        log::info!(target: "event::note_forgotten", "note={id}");
        Ok(note)
    }

    /// Notes matching a filter. With a query: ranked like turn search
    /// (whole words, then prefixes; all words, then any; BM25 + recency),
    /// or a substring match when the query has no words; without one,
    /// newest first.
    pub fn notes(&self, f: &NoteFilter) -> Result<Vec<Note>> {
        let limit = f.limit.max(1);
        let query = f.query.as_deref().map(str::trim).filter(|q| !q.is_empty());
        let Some(query) = query else {
            return self.select_notes(None, f, limit);
        };
        if fts_query_with(query, " ", false).is_none() {
            let escaped: String = query
                .chars()
                .flat_map(|c| match c {
                    '%' | '_' | '\\' => vec!['\\', c],
                    c => vec![c],
                })
                .collect();
            let like = format!("%{escaped}%");
            return self.select_notes(Some(("n.text LIKE ? ESCAPE '\\'", like)), f, limit);
        }
        let steps = [(" ", false), (" ", true), (" OR ", false), (" OR ", true)];
        let mut tried: Vec<String> = Vec::new();
        for (join, prefix) in steps {
            let Some(q) = fts_query_with(query, join, prefix) else {
                break;
            };
            if tried.contains(&q) {
                continue;
            }
            let found = self.ranked_notes(&q, &terms(query, prefix), f, limit)?;
            if !found.is_empty() {
                return Ok(found);
            }
            tried.push(q);
        }
        Ok(Vec::new())
    }

    /// Notes relevant to a message for the prompt's memory layer, by the
    /// same bar as turns (`search_context`): they share a rare word with
    /// it, one found in at most `max(3, notes / 50)` notes.
    pub fn notes_context(&self, message: &str, limit: u32) -> Result<Vec<Note>> {
        let candidates = context_words(message);
        if candidates.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let total: i64 = self.conn.query_row(NOTES_TOTAL, [], |r| r.get(0))?;
        if total == 0 {
            return Ok(Vec::new());
        }
        let bound = (total / 50).max(3);
        let mut rare = Vec::new();
        for word in candidates {
            let term = Term {
                word,
                prefix: false,
            };
            if (1..=bound).contains(&self.note_df(&term, bound + 1)?) {
                rare.push(term);
            }
        }
        if rare.is_empty() {
            return Ok(Vec::new());
        }
        let q = rare.iter().map(Term::fts).collect::<Vec<_>>().join(" OR ");
        let filter = NoteFilter::default();
        self.ranked_notes(&q, &rare, &filter, limit)
    }

    /// The open loops, goals and projects of at least `HIGH_PRIORITY`,
    /// highest first (open loops first among equals), for the prompt.
    pub fn priorities(&self, limit: u32) -> Result<Vec<Note>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM notes n
             WHERE n.store = 'user_memory' AND n.category IN ('open-loop', 'life-goal', 'project')
               AND n.priority >= ?1
             ORDER BY n.priority DESC, n.category = 'open-loop' DESC, n.id DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(rusqlite::params![HIGH_PRIORITY, limit], |r| {
            note_from_row(&self.redactor, r)
        })?;
        rows.map(|r| Ok(r?.0)).collect()
    }

    /// How many notes hold a term, counting up to `cap`.
    fn note_df(&self, term: &Term, cap: i64) -> Result<i64> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT count(*) FROM
               (SELECT rowid FROM notes_fts WHERE notes_fts MATCH ?1 LIMIT ?2)",
        )?;
        Ok(stmt.query_row(rusqlite::params![term.fts(), cap], |r| r.get(0))?)
    }

    /// The newest [`CANDIDATES`] notes matching an FTS query that pass the
    /// filter, scored and cut to `limit`.
    fn ranked_notes(
        &self,
        q: &str,
        terms: &[Term],
        f: &NoteFilter,
        limit: u32,
    ) -> Result<Vec<Note>> {
        // The FTS candidates drive: `+` keeps SQLite from walking a store's
        // or category's index instead (a million rows for a common store).
        let (mut conds, mut args) = filter_sql(f);
        for c in &mut conds {
            *c = c
                .replace("n.store", "+n.store")
                .replace("n.category", "+n.category");
        }
        conds.insert(
            0,
            "n.id IN (SELECT rowid FROM notes_fts WHERE notes_fts MATCH ? ORDER BY rowid DESC LIMIT ?)"
                .into(),
        );
        args.insert(0, Sql::Text(q.to_string()));
        args.insert(1, Sql::Integer(i64::from(CANDIDATES)));
        let sql = format!(
            "SELECT {COLUMNS} FROM notes n WHERE {} ORDER BY n.id DESC",
            conds.join(" AND ")
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows: Vec<(Note, i64)> = stmt
            .query_map(params_from_iter(args), |r| note_from_row(&self.redactor, r))?
            .collect::<rusqlite::Result<_>>()?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let total: i64 = self.conn.query_row(NOTES_TOTAL, [], |r| r.get(0))?;
        let idf: Vec<f64> = terms
            .iter()
            .map(|t| {
                // Counted up to a cap: counting every note holding a common
                // word took 100 ms at a million notes; past the cap the
                // word weighs little whatever its exact count.
                let df = self.note_df(t, DF_CAP)? as f64;
                let total = total.max(1) as f64;
                Ok(((total - df + 0.5) / (df + 0.5)).ln().max(1e-6))
            })
            .collect::<Result<_>>()?;
        let docs: Vec<String> = rows
            .iter()
            .map(|(n, _)| format!("{} {}", n.text, n.tags.join(" ")))
            .collect();
        let docs: Vec<(&str, i64)> = docs
            .iter()
            .zip(&rows)
            .map(|(d, (_, ts))| (d.as_str(), *ts))
            .collect();
        let (now, _) = util::now_unix();
        let s = scores(&docs, terms, &idf, now);
        let mut notes: Vec<Note> = rows
            .into_iter()
            .zip(s)
            .map(|((n, _), score)| Note {
                score: Some(score),
                ..n
            })
            .collect();
        // Best first; ties to the newest (rows came newest first, the sort
        // is stable).
        crate::util::sort::sort_by(&mut notes, |a, b| {
            b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0))
        });
        notes.truncate(limit as usize);
        Ok(notes)
    }

    /// Notes passing the filter (and one extra condition), newest first.
    fn select_notes(
        &self,
        extra: Option<(&str, String)>,
        f: &NoteFilter,
        limit: u32,
    ) -> Result<Vec<Note>> {
        let (mut conds, mut args) = filter_sql(f);
        if let Some((cond, arg)) = extra {
            conds.push(cond.to_string());
            args.push(Sql::Text(arg));
        }
        if conds.is_empty() {
            conds.push("1".into());
        }
        args.push(Sql::Integer(i64::from(limit)));
        let sql = format!(
            "SELECT {COLUMNS} FROM notes n WHERE {} ORDER BY n.id DESC LIMIT ?",
            conds.join(" AND ")
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(args), |r| note_from_row(&self.redactor, r))?;
        rows.map(|r| Ok(r?.0)).collect()
    }
}

/// The filter's conditions and their arguments, in order.
fn filter_sql(f: &NoteFilter) -> (Vec<String>, Vec<Sql>) {
    let mut conds = Vec::new();
    let mut args = Vec::new();
    if let Some(c) = &f.category {
        conds.push("n.category = ?".to_string());
        args.push(Sql::Text(c.clone()));
    }
    // A store is searched unless the filter leaves it out: by `store`, or
    // by naming only the other store's kinds.
    let user = f.store != Some(Store::Summaries)
        && (!f.categories.is_empty() || f.summary_types.is_empty());
    let summaries = f.store != Some(Store::UserMemory)
        && (!f.summary_types.is_empty() || f.categories.is_empty());
    let either = |store: &str, kinds: &[String], args: &mut Vec<Sql>| {
        if kinds.is_empty() {
            return format!("n.store = '{store}'");
        }
        args.extend(kinds.iter().map(|k| Sql::Text(k.clone())));
        format!(
            "(n.store = '{store}' AND n.category IN ({}))",
            vec!["?"; kinds.len()].join(", ")
        )
    };
    match (user, summaries) {
        (true, true) if f.categories.is_empty() && f.summary_types.is_empty() => {}
        (true, true) => {
            let a = either("user_memory", &f.categories, &mut args);
            let b = either("summaries", &f.summary_types, &mut args);
            conds.push(format!("({a} OR {b})"));
        }
        (true, false) => conds.push(either("user_memory", &f.categories, &mut args)),
        (false, true) => conds.push(either("summaries", &f.summary_types, &mut args)),
        (false, false) => conds.push("0".into()),
    }
    if let Some(p) = &f.period_key_prefix {
        conds.push("substr(n.period_key, 1, ?) = ?".to_string());
        args.push(Sql::Integer(p.len() as i64));
        args.push(Sql::Text(p.clone()));
    }
    for t in &f.tags {
        // This SQLite has no JSON functions; tags hold no quotes (see
        // `normalize_tags`), so `"tag"` is found only as a whole element.
        conds.push("instr(n.tags, ?) > 0".to_string());
        args.push(Sql::Text(format!("\"{t}\"")));
    }
    // A summary is in a time range when its period overlaps it; a note
    // when it was stored in it.
    if let Some(s) = f.since {
        conds.push("coalesce(n.period_end - 1, n.created_unix) >= ?".to_string());
        args.push(Sql::Integer(s));
    }
    if let Some(u) = f.until {
        conds.push("coalesce(n.period_start, n.created_unix) <= ?".to_string());
        args.push(Sql::Integer(u));
    }
    (conds, args)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::MIGRATIONS;
    use crate::types::args::{check_note, parse_date};
    use rusqlite::Connection;

    fn mem() -> (Memory, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-notes"));
        let m = Memory::open(&dir.join("m.sqlite"), 1000, Default::default()).unwrap();
        (m, dir)
    }

    fn cats() -> Vec<String> {
        ["fact", "preference", "task", "note"]
            .map(String::from)
            .to_vec()
    }

    fn store(m: &Memory, text: &str, category: &str, tags: &[&str]) -> Note {
        let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        let tags = check_note(text, category, &tags, &cats()).unwrap();
        m.add_note(&NewNote {
            text,
            category,
            tags: &tags,
            conversation_id: Some("c1"),
            source: "memory_store",
            ..NewNote::note("", "", &[], None, "")
        })
        .unwrap()
    }

    fn ids(notes: &[Note]) -> Vec<i64> {
        notes.iter().map(|n| n.id).collect()
    }

    #[test]
    fn notes_are_recalled_by_query_category_tags_and_date() {
        let (m, dir) = mem();
        let a = store(
            &m,
            "The user prefers vim over emacs",
            "preference",
            &["Editor"],
        );
        let b = store(
            &m,
            "Deploy the website on Friday",
            "task",
            &["web", "deploy"],
        );
        let c = store(&m, "The staging server is called kestrel", "fact", &["web"]);
        assert_eq!(a.tags, ["editor"], "tags are lower-cased");
        let f = |q: Option<&str>, cat: Option<&str>, tags: &[&str]| NoteFilter {
            query: q.map(String::from),
            category: cat.map(String::from),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            limit: 10,
            ..Default::default()
        };
        assert_eq!(
            ids(&m.notes(&f(None, None, &[])).unwrap()),
            [c.id, b.id, a.id]
        );
        assert_eq!(ids(&m.notes(&f(Some("vim"), None, &[])).unwrap()), [a.id]);
        // Prefixes after whole words; any word after all words.
        assert_eq!(ids(&m.notes(&f(Some("deplo"), None, &[])).unwrap()), [b.id]);
        assert_eq!(
            ids(&m.notes(&f(Some("zzz"), None, &[])).unwrap()),
            Vec::<i64>::new()
        );
        assert_eq!(
            ids(&m.notes(&f(Some("deplo website"), None, &[])).unwrap()),
            [b.id]
        );
        assert_eq!(
            ids(&m.notes(&f(Some("kestrel emacs"), None, &[])).unwrap()).len(),
            2
        );
        assert_eq!(ids(&m.notes(&f(None, Some("task"), &[])).unwrap()), [b.id]);
        assert_eq!(
            ids(&m.notes(&f(None, None, &["web"])).unwrap()),
            [c.id, b.id]
        );
        assert_eq!(
            ids(&m.notes(&f(None, None, &["web", "deploy"])).unwrap()),
            [b.id]
        );
        assert_eq!(
            ids(&m.notes(&f(Some("server"), Some("task"), &[])).unwrap()),
            Vec::<i64>::new()
        );
        // A tag is searchable text too.
        assert_eq!(
            ids(&m.notes(&f(Some("editor"), None, &[])).unwrap()),
            [a.id]
        );
        // No words: a substring match.
        assert_eq!(
            ids(&m.notes(&f(Some("--"), None, &[])).unwrap()),
            Vec::<i64>::new()
        );
        let today = &a.created_at[..10];
        let mut d = f(None, None, &[]);
        d.since = Some(parse_date(today, false).unwrap());
        d.until = Some(parse_date(today, true).unwrap());
        assert_eq!(m.notes(&d).unwrap().len(), 3);
        d.since = Some(parse_date("2999-01-01", false).unwrap());
        assert!(m.notes(&d).unwrap().is_empty());
        d.since = None;
        d.until = Some(parse_date("2000-01-01T00:00:00Z", true).unwrap());
        assert!(m.notes(&d).unwrap().is_empty());
        // Forgotten: gone from listing and search; the id is never reused.
        assert_eq!(m.forget_note(c.id).unwrap().text, c.text);
        assert!(m.notes(&f(Some("kestrel"), None, &[])).unwrap().is_empty());
        let e = m.forget_note(c.id).unwrap_err();
        assert!(e.msg.contains(&format!("no note {}", c.id)), "{e}");
        let d2 = store(&m, "another", "note", &[]);
        assert!(d2.id > c.id);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn ranking_is_bm25_with_recency() {
        let (m, dir) = mem();
        let weak = store(
            &m,
            "kestrel is one word among many other words here today",
            "fact",
            &[],
        );
        let strong = store(&m, "kestrel kestrel", "fact", &[]);
        let got = m
            .notes(&NoteFilter {
                query: Some("kestrel".into()),
                limit: 5,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(ids(&got), [strong.id, weak.id]);
        assert!(got[0].score.unwrap() > got[1].score.unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn context_notes_need_a_rare_shared_word() {
        let (m, dir) = mem();
        assert!(
            m.notes_context("anything about kestrel", 5)
                .unwrap()
                .is_empty()
        );
        let k = store(&m, "The staging server is called kestrel", "fact", &[]);
        for i in 0..6 {
            store(&m, &format!("server note number {i}"), "note", &[]);
        }
        assert_eq!(
            ids(&m.notes_context("Which server is kestrel?", 5).unwrap()),
            [k.id]
        );
        // "server" is in 7 of 7 notes: not rare, so it brings nothing.
        assert!(m.notes_context("restart the server", 5).unwrap().is_empty());
        assert!(m.notes_context("what about this", 5).unwrap().is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_database_with_notes_keeps_every_one_as_user_memory() {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-mig-stores"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.sqlite");
        let before = MIGRATIONS.len() - 1;
        {
            let c = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..before] {
                c.execute_batch(sql).unwrap();
            }
            c.execute_batch(&format!("PRAGMA user_version = {before}"))
                .unwrap();
            for i in 1..=50 {
                c.execute(
                    "INSERT INTO notes (created_at, created_unix, category, tags, text,
                                        conversation_id, source)
                     VALUES ('2026-01-01T00:00:00.000Z', ?1, ?2, '[\"t\"]', ?3, 'c', 'memory_store')",
                    rusqlite::params![1_767_225_600 + i, ["fact", "task", "note"][i as usize % 3], format!("old note {i} kestrel")],
                )
                .unwrap();
            }
            c.execute("DELETE FROM notes WHERE id = 7", []).unwrap();
        }
        let m = Memory::open(&path, 1000, Default::default()).unwrap();
        assert_eq!(m.version().unwrap(), MIGRATIONS.len());
        let all = m
            .notes(&NoteFilter {
                limit: 1000,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(all.len(), 49);
        for n in &all {
            assert_eq!(n.store, Store::UserMemory);
            assert_eq!((n.priority, n.period_key.as_deref()), (None, None));
            assert_eq!(n.text, format!("old note {} kestrel", n.id));
            assert_eq!(n.tags, ["t"]);
            assert_eq!(n.conversation_id.as_deref(), Some("c"));
        }
        // Still searchable, filterable by store; a new note takes a fresh id.
        let found = m
            .notes(&NoteFilter {
                query: Some("kestrel".into()),
                store: Some(Store::UserMemory),
                limit: 50,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(found.len(), 49);
        let none = m
            .notes(&NoteFilter {
                store: Some(Store::Summaries),
                limit: 50,
                ..Default::default()
            })
            .unwrap();
        assert!(none.is_empty());
        let n = store(&m, "new", "fact", &[]);
        assert_eq!(n.id, 51);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_version_5_database_migrates_to_notes() {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-mig5"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.sqlite");
        {
            let c = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..5] {
                c.execute_batch(sql).unwrap();
            }
            c.execute_batch("PRAGMA user_version = 5").unwrap();
        }
        {
            let m = Memory::open(&path, 1000, Default::default()).unwrap();
            // Open the database as the previous version left it, with a turn.
            assert_eq!(m.version().unwrap(), MIGRATIONS.len());
            drop(m);
        }
        let c = Connection::open(&path).unwrap();
        let has_notes: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name IN ('notes', 'notes_fts')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(has_notes, 2);
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
        // Again with data in it: the turn stays searchable, notes work.
        std::fs::create_dir_all(&dir).unwrap();
        {
            let c = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..5] {
                c.execute_batch(sql).unwrap();
            }
            c.execute_batch(
                "PRAGMA user_version = 5;
                 INSERT INTO conversations VALUES ('old', 't', 't', 0);
                 INSERT INTO turns (conversation_id, turn_id, timestamp, ts_unix, role, content)
                 VALUES ('old', 'turn-1', 't', 0, 'user', 'about the kestrel server');",
            )
            .unwrap();
        }
        let m = Memory::open(&path, 1000, Default::default()).unwrap();
        assert_eq!(m.version().unwrap(), MIGRATIONS.len());
        assert_eq!(m.search("kestrel", 5).unwrap().len(), 1);
        let n = m
            .add_note(&NewNote {
                text: "kestrel is staging",
                category: "fact",
                tags: &[],
                conversation_id: None,
                source: "memory_store",
                ..NewNote::note("", "", &[], None, "")
            })
            .unwrap();
        assert_eq!(n.id, 1);
        let found = m
            .notes(&NoteFilter {
                query: Some("kestrel".into()),
                limit: 5,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(found.len(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
