//! The tool calls stored in rounds, read back whole: each call as the
//! model made it (tool and arguments) with what became of it (the stored
//! result's `status` and receipt), for `policy replay`.

use super::Memory;
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;

/// One call of a stored round.
#[derive(Debug, Clone)]
pub struct RecordedCall {
    pub conversation_id: String,
    pub timestamp: String,
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    /// The stored result's status (`allowed`, `approved`, `denied`,
    /// `failed`, `repeated`, `cancelled`, `no_result`); `None`: no result
    /// stored.
    pub status: Option<String>,
    pub receipt_id: Option<String>,
}

impl Memory {
    /// Every call in the stored rounds, oldest first; `since_unix`: only
    /// those made at or after it.
    pub fn recorded_calls(&self, since_unix: Option<i64>) -> Result<Vec<RecordedCall>> {
        let db = |e: rusqlite::Error| Error::runtime(format!("memory: {e}"));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT conversation_id, timestamp, role, tool_calls, metadata FROM turns \
                 WHERE role IN ('assistant', 'tool') AND ts_unix >= ?1 ORDER BY id",
            )
            .map_err(db)?;
        let mut rows = stmt.query([since_unix.unwrap_or(i64::MIN)]).map_err(db)?;
        let mut out: Vec<RecordedCall> = Vec::new();
        // Per conversation: the calls of its last round still unanswered
        // (index into `out`, by call id; ids repeat across rounds).
        let mut open: HashMap<String, Vec<(String, usize)>> = HashMap::new();
        while let Some(row) = rows.next().map_err(db)? {
            let conv: String = row.get(0).map_err(db)?;
            let role: String = row.get(2).map_err(db)?;
            if role == "assistant" {
                let Some(calls) = row.get::<_, Option<String>>(3).map_err(db)? else {
                    continue;
                };
                let Ok(Value::Array(calls)) = serde_json::from_str::<Value>(&calls) else {
                    continue;
                };
                let timestamp: String = row.get(1).map_err(db)?;
                let pending = open.entry(conv.clone()).or_default();
                pending.clear();
                for c in calls {
                    let id = c
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    pending.push((id.clone(), out.len()));
                    out.push(RecordedCall {
                        conversation_id: conv.clone(),
                        timestamp: timestamp.clone(),
                        call_id: id,
                        tool: c.get("name").and_then(Value::as_str).unwrap_or("").into(),
                        args: c.get("arguments").cloned().unwrap_or(Value::Null),
                        status: None,
                        receipt_id: None,
                    });
                }
            } else {
                let Some(meta) = row.get::<_, Option<String>>(4).map_err(db)? else {
                    continue;
                };
                let Ok(meta) = serde_json::from_str::<Value>(&meta) else {
                    continue;
                };
                let id = meta
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let Some(pending) = open.get_mut(&conv) else {
                    continue;
                };
                if let Some(i) = pending.iter().position(|(p, _)| p == id) {
                    let (_, at) = pending.remove(i);
                    let s = |k: &str| meta.get(k).and_then(Value::as_str).map(String::from);
                    out[at].status = s("status");
                    out[at].receipt_id = s("receipt_id");
                }
            }
        }
        Ok(out)
    }
}
