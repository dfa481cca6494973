//! `code_run`'s record in SQLite (extending `Memory`): every snippet run,
//! its code and hash, how it ended (exit, duration, error category), the
//! tool calls and requests it made and their receipts; and what
//! `latchclaw code stats|failures` read back.

use super::Memory;
use crate::error::Result;
use crate::util;
use rusqlite::params;
use serde::Serialize;
use serde_json::Value;

/// One run as the tool ends it.
pub struct NewCodeRun<'a> {
    pub conversation_id: &'a str,
    pub language: &'a str,
    pub code: &'a str,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// `None` for a run that ended with exit 0.
    pub error_category: Option<&'a str>,
    pub error: Option<&'a str>,
    /// The `tool()` and `http()` calls, in order.
    pub calls: &'a Value,
    /// The outcome receipts of its `tool()` calls.
    pub receipts: &'a [String],
}

/// One stored run.
#[derive(Debug, Clone, Serialize)]
pub struct CodeRunRow {
    pub id: i64,
    pub created_at: String,
    pub conversation_id: String,
    pub language: String,
    pub code_sha256: String,
    pub code: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub error_category: Option<String>,
    pub error: Option<String>,
    pub calls: Value,
    pub receipts: Value,
}

/// Runs and failures, overall, by category and by language.
#[derive(Debug, Clone, Serialize, Default)]
pub struct CodeStats {
    pub runs: u64,
    pub failures: u64,
    /// Failures over runs, 0 with no run.
    pub failure_rate: f64,
    /// Failures by error category.
    pub by_category: Vec<Count>,
    pub by_language: Vec<LanguageStats>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Count {
    pub category: String,
    pub failures: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LanguageStats {
    pub language: String,
    pub runs: u64,
    pub failures: u64,
    pub failure_rate: f64,
    pub mean_duration_ms: f64,
}

fn rate(failures: u64, runs: u64) -> f64 {
    if runs == 0 {
        0.0
    } else {
        failures as f64 / runs as f64
    }
}

impl Memory {
    /// Records one run (its text passes the redactor first, as every read-out
    /// does); its id.
    pub fn add_code_run(&self, run: &NewCodeRun) -> Result<i64> {
        let code = self.redactor.redact(run.code);
        let error = run.error.map(|e| self.redactor.redact(e).into_owned());
        let mut calls = run.calls.clone();
        self.redactor
            .redact_json(&mut calls, &mut crate::security::redact::Counts::default());
        self.conn.execute(
            "INSERT INTO code_runs (conversation_id, language, code_sha256, code, exit_code,
                 duration_ms, error_category, error, calls, receipts, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                run.conversation_id,
                run.language,
                util::sha256_hex(run.code.as_bytes()),
                code,
                run.exit_code,
                run.duration_ms as i64,
                run.error_category,
                error,
                calls.to_string(),
                serde_json::to_string(run.receipts).unwrap_or_else(|_| "[]".into()),
                util::now_rfc3339(),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn code_stats(&self) -> Result<CodeStats> {
        let mut stats = CodeStats::default();
        let mut stmt = self.conn.prepare(
            "SELECT language, COUNT(*), SUM(error_category IS NOT NULL), AVG(duration_ms)
             FROM code_runs GROUP BY language ORDER BY language",
        )?;
        let rows = stmt.query_map([], |r| {
            let runs: i64 = r.get(1)?;
            let failures: i64 = r.get(2)?;
            Ok(LanguageStats {
                language: r.get(0)?,
                runs: runs as u64,
                failures: failures as u64,
                failure_rate: rate(failures as u64, runs as u64),
                mean_duration_ms: r.get::<_, Option<f64>>(3)?.unwrap_or(0.0),
            })
        })?;
        stats.by_language = rows.collect::<rusqlite::Result<_>>()?;
        stats.runs = stats.by_language.iter().map(|l| l.runs).sum();
        stats.failures = stats.by_language.iter().map(|l| l.failures).sum();
        stats.failure_rate = rate(stats.failures, stats.runs);
        let mut stmt = self.conn.prepare(
            "SELECT error_category, COUNT(*) FROM code_runs
             WHERE error_category IS NOT NULL
             GROUP BY error_category ORDER BY COUNT(*) DESC, error_category",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Count {
                category: r.get(0)?,
                failures: r.get::<_, i64>(1)? as u64,
            })
        })?;
        stats.by_category = rows.collect::<rusqlite::Result<_>>()?;
        Ok(stats)
    }

    /// The latest runs that failed, newest first.
    pub fn code_failures(&self, limit: u32) -> Result<Vec<CodeRunRow>> {
        self.code_runs_where("error_category IS NOT NULL", limit)
    }

    /// The latest runs, newest first.
    pub fn code_runs(&self, limit: u32) -> Result<Vec<CodeRunRow>> {
        self.code_runs_where("1", limit)
    }

    fn code_runs_where(&self, filter: &str, limit: u32) -> Result<Vec<CodeRunRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT id, created_at, conversation_id, language, code_sha256, code, exit_code,
                    duration_ms, error_category, error, calls, receipts
             FROM code_runs WHERE {filter} ORDER BY id DESC LIMIT ?1"
        ))?;
        let json = |s: String| serde_json::from_str(&s).unwrap_or(Value::Null);
        let rows = stmt.query_map([limit], |r| {
            Ok(CodeRunRow {
                id: r.get(0)?,
                created_at: r.get(1)?,
                conversation_id: r.get(2)?,
                language: r.get(3)?,
                code_sha256: r.get(4)?,
                code: self.redactor.redact(&r.get::<_, String>(5)?).into_owned(),
                exit_code: r.get(6)?,
                duration_ms: r.get::<_, i64>(7)? as u64,
                error_category: r.get(8)?,
                error: r.get(9)?,
                calls: json(r.get(10)?),
                receipts: json(r.get(11)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
