//! SOP runs in SQLite (`sop` writes them, extending `Memory`): a run with
//! the SOP's hash, each step's state and output. A step is marked
//! `started` in its own commit before its effect, and its outcome in
//! another after it, so a run cut off by a kill is found as it was.

use super::Memory;
use crate::error::{Error, Result};
use crate::util;
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

/// One step's state. `Started` with no outcome after a kill: `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Pending,
    Started,
    Done,
    Failed,
    Skipped,
    WaitingApproval,
    Unknown,
}

impl StepState {
    pub const ALL: [StepState; 7] = [
        StepState::Pending,
        StepState::Started,
        StepState::Done,
        StepState::Failed,
        StepState::Skipped,
        StepState::WaitingApproval,
        StepState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Pending => "pending",
            StepState::Started => "started",
            StepState::Done => "done",
            StepState::Failed => "failed",
            StepState::Skipped => "skipped",
            StepState::WaitingApproval => "waiting_approval",
            StepState::Unknown => "unknown",
        }
    }

    fn parse(s: &str) -> Option<StepState> {
        StepState::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// How a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    /// Parked at an approval (an approval step or a tool step the gate
    /// asks about): `sop approve|deny RUN`, then `sop resume RUN`.
    WaitingApproval,
    /// A step cut off mid-effect: `sop resume RUN --retry-step|--skip-step`.
    WaitingOperator,
    /// Stopped by `--timeout`, Ctrl-C, a signal or the emergency stop;
    /// `sop resume RUN` continues it.
    Stopped,
    Completed,
    Failed,
    Denied,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Running,
        RunStatus::WaitingApproval,
        RunStatus::WaitingOperator,
        RunStatus::Stopped,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Denied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::WaitingApproval => "waiting_approval",
            RunStatus::WaitingOperator => "waiting_operator",
            RunStatus::Stopped => "stopped",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Denied => "denied",
        }
    }

    fn parse(s: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Nothing more will run.
    pub fn finished(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Denied
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SopStep {
    pub index: i64,
    pub id: String,
    pub kind: String,
    pub state: StepState,
    pub output: Option<String>,
    pub error: Option<String>,
    pub attempts: i64,
    pub approval_id: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SopRun {
    pub id: String,
    pub sop: String,
    pub path: String,
    pub sop_hash: String,
    pub workspace: String,
    pub status: RunStatus,
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub steps: Vec<SopStep>,
}

fn bad(what: &str, v: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("unknown {what} \"{v}\" in the memory database").into(),
    )
}

impl Memory {
    /// A new run with every step pending, in one commit.
    pub fn sop_run_create(
        &self,
        id: &str,
        sop: &str,
        path: &str,
        hash: &str,
        workspace: &str,
        steps: &[(&str, &str)],
    ) -> Result<()> {
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )?;
        let now = util::now_rfc3339();
        tx.execute(
            "INSERT INTO sop_runs (id, sop, path, sop_hash, workspace, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?6)",
            params![id, sop, path, hash, workspace, now],
        )?;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO sop_steps (run_id, idx, step_id, kind, state) VALUES (?1, ?2, ?3, ?4, 'pending')",
            )?;
            for (i, (step, kind)) in steps.iter().enumerate() {
                stmt.execute(params![id, i as i64, step, kind])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Marks a step `started` (one attempt more), committed before its effect.
    pub fn sop_step_started(&self, run: &str, index: usize) -> Result<()> {
        let now = util::now_rfc3339();
        self.conn.execute(
            "UPDATE sop_steps SET state = 'started', attempts = attempts + 1, started_at = ?3,
                                  ended_at = NULL, error = NULL
             WHERE run_id = ?1 AND idx = ?2",
            params![run, index as i64, now],
        )?;
        Ok(())
    }

    /// A step's outcome (or its parking), committed with the run's time.
    pub fn sop_step_set(
        &self,
        run: &str,
        index: usize,
        state: StepState,
        output: Option<&str>,
        error: Option<&str>,
        approval_id: Option<&str>,
    ) -> Result<()> {
        let now = util::now_rfc3339();
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )?;
        tx.execute(
            "UPDATE sop_steps SET state = ?3, output = coalesce(?4, output), error = ?5,
                                  approval_id = coalesce(?6, approval_id), ended_at = ?7
             WHERE run_id = ?1 AND idx = ?2",
            params![
                run,
                index as i64,
                state.as_str(),
                output,
                error,
                approval_id,
                now
            ],
        )?;
        tx.execute(
            "UPDATE sop_runs SET updated_at = ?2 WHERE id = ?1",
            params![run, now],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn sop_run_status(&self, run: &str, status: RunStatus, error: Option<&str>) -> Result<()> {
        self.conn.execute(
            "UPDATE sop_runs SET status = ?2, error = ?3, updated_at = ?4 WHERE id = ?1",
            params![run, status.as_str(), error, util::now_rfc3339()],
        )?;
        Ok(())
    }

    /// One run with its steps in order.
    pub fn sop_run(&self, id: &str) -> Result<Option<SopRun>> {
        let Some(mut run) = self.select_sop_runs("id = ?1", params![id], 1)?.pop() else {
            return Ok(None);
        };
        let mut stmt = self.conn.prepare_cached(
            "SELECT idx, step_id, kind, state, output, error, attempts, approval_id, started_at, ended_at
             FROM sop_steps WHERE run_id = ?1 ORDER BY idx",
        )?;
        let rows = stmt.query_map([id], |r| {
            let state: String = r.get(3)?;
            Ok(SopStep {
                index: r.get(0)?,
                id: r.get(1)?,
                kind: r.get(2)?,
                state: StepState::parse(&state).ok_or_else(|| bad("step state", &state))?,
                output: r.get(4)?,
                error: r.get(5)?,
                attempts: r.get(6)?,
                approval_id: r.get(7)?,
                started_at: r.get(8)?,
                ended_at: r.get(9)?,
            })
        })?;
        run.steps = rows.collect::<rusqlite::Result<_>>()?;
        Ok(Some(run))
    }

    /// One run without its steps (what a resume needs before it starts).
    pub fn sop_run_head(&self, id: &str) -> Result<Option<SopRun>> {
        Ok(self.select_sop_runs("id = ?1", params![id], 1)?.pop())
    }

    /// The newest runs first, without their steps.
    pub fn sop_runs(&self, limit: u32) -> Result<Vec<SopRun>> {
        self.select_sop_runs("1", params![], limit)
    }

    /// The run waiting on approval `id`, if one is.
    pub fn sop_run_of_approval(&self, approval_id: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT run_id FROM sop_steps WHERE approval_id = ?1",
                [approval_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn select_sop_runs(
        &self,
        filter: &str,
        args: impl rusqlite::Params,
        limit: u32,
    ) -> Result<Vec<SopRun>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT id, sop, path, sop_hash, workspace, status, error, created_at, updated_at
             FROM sop_runs WHERE {filter} ORDER BY created_at DESC, rowid DESC LIMIT {limit}"
        ))?;
        let rows = stmt.query_map(args, |r| {
            let status: String = r.get(5)?;
            Ok(SopRun {
                id: r.get(0)?,
                sop: r.get(1)?,
                path: r.get(2)?,
                sop_hash: r.get(3)?,
                workspace: r.get(4)?,
                status: RunStatus::parse(&status).ok_or_else(|| bad("run status", &status))?,
                error: r.get(6)?,
                created_at: r.get(7)?,
                updated_at: r.get(8)?,
                steps: Vec::new(),
            })
        })?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| Error::runtime(format!("memory database error: {e}")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_run_and_its_steps_round_trip() {
        let dir = std::env::temp_dir().join(util::new_id("latchclaw-sop"));
        let m = Memory::open(&dir.join("m.sqlite"), 1000, Default::default()).unwrap();
        m.sop_run_create(
            "r1",
            "s",
            "/p",
            "h",
            "/w",
            &[("a", "tool"), ("b", "approval")],
        )
        .unwrap();
        m.sop_step_started("r1", 0).unwrap();
        m.sop_step_set("r1", 0, StepState::Done, Some("out"), None, None)
            .unwrap();
        m.sop_step_set(
            "r1",
            1,
            StepState::WaitingApproval,
            None,
            None,
            Some("approval-1"),
        )
        .unwrap();
        m.sop_run_status("r1", RunStatus::WaitingApproval, None)
            .unwrap();
        let r = m.sop_run("r1").unwrap().unwrap();
        assert_eq!(r.status, RunStatus::WaitingApproval);
        assert_eq!(r.steps[0].state, StepState::Done);
        assert_eq!(r.steps[0].output.as_deref(), Some("out"));
        assert_eq!(r.steps[0].attempts, 1);
        assert_eq!(r.steps[1].approval_id.as_deref(), Some("approval-1"));
        assert_eq!(
            m.sop_run_of_approval("approval-1").unwrap().as_deref(),
            Some("r1")
        );
        assert_eq!(m.sop_runs(10).unwrap().len(), 1);
        assert!(m.sop_run("nope").unwrap().is_none());
        let _ = std::fs::remove_dir_all(dir);
    }
}
