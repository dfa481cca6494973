//! What summaries are made from and how they are kept: the conversations
//! of a span of time, a summary written or replaced in one transaction,
//! sessions (a conversation's name and where it divides).

use super::notes::{NewNote, Note};
use super::{Memory, TurnRole};
use crate::config::Session;
use crate::error::Result;
use rusqlite::OptionalExtension;

/// One conversation's turns within a span: user and assistant text only.
#[derive(Debug, Clone)]
pub struct Transcript {
    pub conversation_id: String,
    pub turns: Vec<(TurnRole, String)>,
}

/// The session a Unix time falls in: its local day, or the first day of
/// its ISO week, days starting at `hour` local time; none for `none`.
pub fn session_of(secs: i64, session: Session, hour: u32) -> Option<i64> {
    let day = super::local_day(secs, hour);
    match session {
        Session::None => None,
        Session::Daily => Some(day),
        Session::Weekly => Some(day - (day + 3).rem_euclid(7)),
    }
}

/// A session's name (`--new-session`, the REPL's `/new NAME`).
pub fn check_session_name(n: &str) -> std::result::Result<(), String> {
    if n.is_empty() || n.chars().count() > 64 || n.chars().any(char::is_control) {
        return Err(format!(
            "\"{}\" is not a session name; allowed: 1 to 64 characters, no control characters",
            crate::util::printable(n)
        ));
    }
    Ok(())
}

impl Memory {
    /// Whether a conversation's session is over: its last turn was in an
    /// earlier session than now (never under `session = "none"`).
    pub fn session_over(&self, conversation_id: &str, session: Session, hour: u32) -> Result<bool> {
        let (now, _) = crate::util::clock_now();
        let Some(current) = session_of(now, session, hour) else {
            return Ok(false);
        };
        Ok(match self.last_activity(conversation_id)? {
            Some(last) => session_of(last, session, hour) != Some(current),
            None => false,
        })
    }

    /// The conversations with user or assistant text in `[start, end)`
    /// (Unix seconds), in the order they began, their text read out through
    /// the redactor.
    pub fn transcripts(&self, start: i64, end: i64) -> Result<Vec<Transcript>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT conversation_id, role, content FROM turns
             WHERE ts_unix >= ?1 AND ts_unix < ?2 AND role IN ('user', 'assistant')
               AND content != ''
             ORDER BY id",
        )?;
        let rows = stmt.query_map(rusqlite::params![start, end], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, TurnRole>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out: Vec<Transcript> = Vec::new();
        for row in rows {
            let (conv, role, content) = row?;
            let text = self.redactor.redact(&content).into_owned();
            match out.iter_mut().find(|t| t.conversation_id == conv) {
                Some(t) => t.turns.push((role, text)),
                None => out.push(Transcript {
                    conversation_id: conv,
                    turns: vec![(role, text)],
                }),
            }
        }
        Ok(out)
    }

    /// The stored summary of this type, key and chat.
    pub fn summary(&self, kind: &str, key: &str, chat_id: Option<&str>) -> Result<Option<Note>> {
        match self.summary_id(kind, key, chat_id)? {
            Some(id) => self.note(id),
            None => Ok(None),
        }
    }

    /// Stores a summary, replacing the one of its type, key and chat when
    /// `replace` is set, in one transaction: a kill leaves the old one or
    /// the new one, never neither.
    pub fn put_summary(&self, n: &NewNote, replace: bool) -> Result<Note> {
        let tx = self.conn.unchecked_transaction()?;
        if replace && let Some((key, _, _)) = n.period {
            tx.execute(
                "DELETE FROM notes WHERE store = 'summaries' AND category = ?1
                 AND period_key = ?2 AND coalesce(chat_id, '') = coalesce(?3, '')",
                rusqlite::params![n.category, key, n.chat_id],
            )?;
        }
        let note = self.add_note(n)?;
        tx.commit()?;
        Ok(note)
    }

    /// Names a conversation's session (`/new NAME`, `--new-session NAME`).
    pub fn set_session(&self, conversation_id: &str, name: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE conversations SET session = ?2 WHERE id = ?1",
            rusqlite::params![conversation_id, name],
        )?;
        Ok(())
    }

    /// When a conversation last had a turn (Unix seconds).
    pub fn last_activity(&self, conversation_id: &str) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT updated_unix FROM conversations WHERE id = ?1",
                [conversation_id],
                |r| r.get(0),
            )
            .optional()?)
    }
}
