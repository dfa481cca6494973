//! A `plan` call's tree in SQLite (`runtime`'s plan runner writes it,
//! extending `Memory`): a root row for the call (`CONV/msg-HASH`), a row
//! per task under it (`…/task-1/task-1.2`). A task is marked `running` in
//! its own commit before it runs and its outcome in another after, so a
//! tree cut off by a kill is found as it was and a resume runs no done
//! task again.

use super::Memory;
use crate::error::Result;
use crate::util;
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

/// One task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Pending,
    /// Marked before it runs; found so after a kill, it runs again.
    Running,
    Done,
    Failed,
    /// A budget, the emergency stop, `--timeout` or Ctrl-C stopped it.
    Stopped,
}

impl TaskState {
    pub const ALL: [TaskState; 5] = [
        TaskState::Pending,
        TaskState::Running,
        TaskState::Done,
        TaskState::Failed,
        TaskState::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Done => "done",
            TaskState::Failed => "failed",
            TaskState::Stopped => "stopped",
        }
    }

    fn parse(s: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// A task (or a tree's root) as stored.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    pub path: String,
    pub root: String,
    pub conversation: String,
    pub parent: Option<String>,
    /// Its place among its siblings, from 0.
    pub index: i64,
    /// 0 for the root, 1 for a top-level task.
    pub depth: i64,
    pub title: String,
    pub purpose: String,
    pub instructions: String,
    pub evaluation: String,
    /// The tools a leaf may call.
    pub tools: Option<Vec<String>>,
    /// The task whose failed evaluation this one corrects.
    pub corrects: Option<String>,
    /// The skill it ran as.
    pub skill: Option<String>,
    pub state: TaskState,
    pub result: Option<String>,
    /// The budget that stopped it (`depth`, `tasks`, `rounds`, `tokens`,
    /// `tree_tokens`, `wall_clock`).
    pub budget: Option<String>,
    /// A root's budgets as they were when the tree started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<serde_json::Value>,
    /// Tool rounds and tokens it spent (a root: the whole tree's).
    pub rounds: i64,
    pub tokens: i64,
    pub attempts: i64,
    pub created_at: String,
    pub updated_at: String,
}

/// A task to store.
pub struct NewTask<'a> {
    pub path: &'a str,
    pub root: &'a str,
    pub conversation: &'a str,
    pub parent: Option<&'a str>,
    pub index: usize,
    pub depth: usize,
    pub title: &'a str,
    pub purpose: &'a str,
    pub instructions: &'a str,
    pub evaluation: &'a str,
    pub tools: Option<&'a [String]>,
    pub corrects: Option<&'a str>,
    pub limits: Option<&'a serde_json::Value>,
}

/// How a task ended, to store.
pub struct TaskEnd<'a> {
    pub state: TaskState,
    pub result: Option<&'a str>,
    pub budget: Option<&'a str>,
    pub skill: Option<&'a str>,
    pub rounds: u64,
    pub tokens: u64,
}

const COLUMNS: &str = "path, root, conversation, parent, idx, depth, title, purpose, instructions, \
evaluation, tools, corrects, skill, state, result, budget, limits, rounds, tokens, attempts, \
created_at, updated_at";

fn bad(what: &str, v: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("unknown {what} \"{v}\" in the memory database").into(),
    )
}

fn row(r: &rusqlite::Row) -> rusqlite::Result<Task> {
    let state: String = r.get(13)?;
    let json = |i: usize| -> rusqlite::Result<Option<serde_json::Value>> {
        let text: Option<String> = r.get(i)?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    };
    Ok(Task {
        path: r.get(0)?,
        root: r.get(1)?,
        conversation: r.get(2)?,
        parent: r.get(3)?,
        index: r.get(4)?,
        depth: r.get(5)?,
        title: r.get(6)?,
        purpose: r.get(7)?,
        instructions: r.get(8)?,
        evaluation: r.get(9)?,
        tools: json(10)?.and_then(|v| serde_json::from_value(v).ok()),
        corrects: r.get(11)?,
        skill: r.get(12)?,
        state: TaskState::parse(&state).ok_or_else(|| bad("task state", &state))?,
        result: r.get(14)?,
        budget: r.get(15)?,
        limits: json(16)?,
        rounds: r.get(17)?,
        tokens: r.get(18)?,
        attempts: r.get(19)?,
        created_at: r.get(20)?,
        updated_at: r.get(21)?,
    })
}

impl Memory {
    /// A stored result as it is read out: through the redactor, for text
    /// kept before a secret was configured.
    fn read_out(&self, mut t: Task) -> Task {
        if let Some(r) = &mut t.result {
            *r = self.redactor.redact(r).into_owned();
        }
        t
    }

    /// Tasks stored together, each `pending`, in one commit.
    pub fn tasks_add(&self, tasks: &[NewTask]) -> Result<()> {
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )?;
        let now = util::now_rfc3339();
        {
            let mut stmt = tx.prepare(
                "INSERT INTO tasks (path, root, conversation, parent, idx, depth, title, purpose,
                                    instructions, evaluation, tools, corrects, state, limits,
                                    created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending', ?13, ?14, ?14)",
            )?;
            for t in tasks {
                let tools = t
                    .tools
                    .map(|l| serde_json::to_string(l).unwrap_or_default());
                stmt.execute(params![
                    t.path,
                    t.root,
                    t.conversation,
                    t.parent,
                    t.index as i64,
                    t.depth as i64,
                    t.title,
                    t.purpose,
                    t.instructions,
                    t.evaluation,
                    tools,
                    t.corrects,
                    t.limits.map(|l| l.to_string()),
                    now
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Marks a task `running` (one attempt more), committed before it runs.
    pub fn task_started(&self, path: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE tasks SET state = 'running', attempts = attempts + 1, budget = NULL,
                              updated_at = ?2
             WHERE path = ?1",
            params![path, util::now_rfc3339()],
        )?;
        Ok(())
    }

    /// A task's outcome; its result redacted before it is kept.
    pub fn task_ended(&self, path: &str, end: &TaskEnd) -> Result<()> {
        let result = end.result.map(|r| self.redactor.redact(r).into_owned());
        self.conn.execute(
            "UPDATE tasks SET state = ?2, result = ?3, budget = ?4, skill = coalesce(?5, skill),
                              rounds = ?6, tokens = ?7, updated_at = ?8
             WHERE path = ?1",
            params![
                path,
                end.state.as_str(),
                result,
                end.budget,
                end.skill,
                end.rounds as i64,
                end.tokens as i64,
                util::now_rfc3339()
            ],
        )?;
        Ok(())
    }

    pub fn task(&self, path: &str) -> Result<Option<Task>> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM tasks WHERE path = ?1"),
                [path],
                row,
            )
            .optional()?
            .map(|t| self.read_out(t)))
    }

    /// A task and every task under it, parents before children, siblings
    /// in order.
    pub fn task_subtree(&self, path: &str) -> Result<Vec<Task>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks
             WHERE path = ?1 OR substr(path, 1, length(?1) + 1) = ?1 || '/'
             ORDER BY depth, idx"
        ))?;
        let rows = stmt
            .query_map([path], row)?
            .map(|t| t.map(|t| self.read_out(t)))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(depth_first(rows, path))
    }

    /// The children of a task, in order.
    pub fn task_children(&self, path: &str) -> Result<Vec<Task>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE parent = ?1 ORDER BY idx"
        ))?;
        let rows = stmt.query_map([path], row)?;
        Ok(rows
            .map(|t| t.map(|t| self.read_out(t)))
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Trees (their root rows), newest first; those of one conversation
    /// when it is given.
    pub fn task_roots(&self, conversation: Option<&str>, limit: u32) -> Result<Vec<Task>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks
             WHERE parent IS NULL AND (?1 IS NULL OR conversation = ?1)
             ORDER BY created_at DESC, rowid DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![conversation, limit], row)?;
        Ok(rows
            .map(|t| t.map(|t| self.read_out(t)))
            .collect::<rusqlite::Result<_>>()?)
    }
}

/// `rows` (by depth, then index) in depth-first order from `top`.
fn depth_first(rows: Vec<Task>, top: &str) -> Vec<Task> {
    let mut out = Vec::with_capacity(rows.len());
    let mut by_parent: std::collections::HashMap<Option<String>, Vec<Task>> = Default::default();
    let mut head = None;
    for t in rows {
        if t.path == top {
            head = Some(t);
        } else {
            by_parent.entry(t.parent.clone()).or_default().push(t);
        }
    }
    let Some(head) = head else { return out };
    let mut stack = vec![head];
    while let Some(t) = stack.pop() {
        if let Some(mut kids) = by_parent.remove(&Some(t.path.clone())) {
            crate::util::sort::sort_by_key(&mut kids, |k| k.index);
            stack.extend(kids.into_iter().rev());
        }
        out.push(t);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn new<'a>(path: &'a str, parent: Option<&'a str>, index: usize, depth: usize) -> NewTask<'a> {
        NewTask {
            path,
            root: "c/msg-1",
            conversation: "c",
            parent,
            index,
            depth,
            title: path,
            purpose: "p",
            instructions: "i",
            evaluation: "e",
            tools: None,
            corrects: None,
            limits: None,
        }
    }

    #[test]
    fn a_tree_reads_back_depth_first_with_its_states() {
        let dir = std::env::temp_dir().join(format!("lc-tasks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let m = Memory::open(&dir.join("m.db"), 1000, Default::default()).unwrap();
        let r = "c/msg-1";
        let t2 = "c/msg-1/task-2";
        let t1 = "c/msg-1/task-1";
        let t11 = "c/msg-1/task-1/task-1.1";
        m.tasks_add(&[
            new(r, None, 0, 0),
            new(t1, Some(r), 0, 1),
            new(t2, Some(r), 1, 1),
            new(t11, Some(t1), 0, 2),
        ])
        .unwrap();
        m.task_started(t11).unwrap();
        let end = TaskEnd {
            state: TaskState::Done,
            result: Some("ok"),
            budget: None,
            skill: Some("s"),
            rounds: 2,
            tokens: 30,
        };
        m.task_ended(t11, &end).unwrap();
        let paths: Vec<String> = m
            .task_subtree(r)
            .unwrap()
            .into_iter()
            .map(|t| t.path)
            .collect();
        assert_eq!(paths, [r, t1, t11, t2]);
        let done = m.task(t11).unwrap().unwrap();
        assert_eq!(
            (done.state, done.attempts, done.tokens),
            (TaskState::Done, 1, 30)
        );
        assert_eq!(m.task_subtree(t1).unwrap().len(), 2);
        assert_eq!(m.task_roots(Some("c"), 10).unwrap().len(), 1);
        assert!(m.task_roots(Some("other"), 10).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
