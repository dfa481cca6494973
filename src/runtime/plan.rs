//! The `plan` tool's runner: a tree of tasks stored in SQLite
//! (`memory::tasks`, paths `CONV/msg-HASH/task-1/task-1.2`) and run depth
//! first, synchronously. A leaf is one agent turn in a conversation of its
//! own (its path), offered only the tools it names (the gate refuses any
//! other, `Gate::within_task`), its context its ancestors' purpose and
//! instructions and its earlier siblings' results, its assistant the skill
//! whose description best matches it (BM25; below `skill_min_score`, the
//! base prompt). A parent's children are checked against its `evaluation`
//! with one model call, which may add one corrective subtask per failed
//! child. Budgets (`[tools.plan]`) stop the subtree they are hit in and
//! are named; the emergency stop, `--timeout` and Ctrl-C stop the tree.
//! Each task's state is committed before it runs and after, so a killed
//! tree called again (`agent --resume`) runs no done task twice.

use super::run::{Runtime, Scope, Tree};
use crate::error::{Error, Outcome, Result};
use crate::memory::tasks::{NewTask, Task, TaskEnd, TaskState};
use crate::providers::{ChatRequest, Message, Provider, Role, StreamSink};
use crate::tools::ToolResult;
use crate::types::args::{PlanTask, plan_count, plan_depth, plan_tasks};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The most of the tree's outcome the calling turn reads.
const OUTCOME_MAX_BYTES: usize = 6000;
/// The most of one task's result in the outcome and in context.
const RESULT_CHARS: usize = 300;

/// The evaluator's system prompt: a parent's one model call.
const EVALUATOR: &str = "You check the results of subtasks against their parent task's \
evaluation. Reply with one JSON object and nothing else.";

/// How a task ended.
struct Ended {
    state: TaskState,
    result: String,
    budget: Option<&'static str>,
    estop: bool,
    /// A call of the task waits for the operator's approval (its id).
    pending: Option<String>,
}

impl Ended {
    fn stopped(result: String, budget: Option<&'static str>, estop: bool) -> Ended {
        Ended {
            state: TaskState::Stopped,
            result,
            budget,
            estop,
            pending: None,
        }
    }
}

/// A provider call that shows nothing and stops with the run.
struct Quiet<'c>(&'c crate::control::RunControl);

impl StreamSink for Quiet<'_> {
    fn text(&mut self, _: &str) {}
    fn stop(&mut self) -> Option<String> {
        self.0.stop().map(|s| self.0.why(s))
    }
}

/// The last segment of a task's path (`task-1.2`), as the model and the
/// outcome name it.
fn id_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A debug build's `LATCHCLAW_TEST_KILL=POINT:TASK_ID` SIGKILLs this
/// process at that point — `task_started:ID` (marked running, nothing
/// run), `task_done:ID` (its outcome committed, the next task not
/// started) — the boundaries a kill from outside cannot time.
fn fault(point: &str, path: &str) {
    if cfg!(debug_assertions)
        && std::env::var("LATCHCLAW_TEST_KILL").is_ok_and(|v| {
            v.split_once(':')
                .is_some_and(|(p, t)| p == point && t == id_of(path))
        })
    {
        let _ = crate::sys::process::kill(std::process::id() as i32);
    }
}

/// The rows to store for `tasks` under `parent` (whose id is `parent_id`,
/// empty for a root), depth first.
struct Row<'t> {
    path: String,
    parent: String,
    index: usize,
    depth: usize,
    task: &'t PlanTask,
}

fn rows<'t>(
    tasks: &'t [PlanTask],
    parent: &str,
    parent_id: &str,
    first: usize,
    depth: usize,
    out: &mut Vec<Row<'t>>,
) {
    for (i, t) in tasks.iter().enumerate() {
        let n = first + i + 1;
        let id = match parent_id.strip_prefix("task-") {
            Some(p) => format!("task-{p}.{n}"),
            None => format!("task-{n}"),
        };
        let path = format!("{parent}/{id}");
        out.push(Row {
            path: path.clone(),
            parent: parent.to_string(),
            index: first + i,
            depth,
            task: t,
        });
        rows(&t.subtasks, &path, &id, 0, depth + 1, out);
    }
}

impl Runtime<'_> {
    /// A `plan` call (from `tools::Host::plan`): a new tree, the unfinished
    /// tree of the same call in this conversation resumed, or, from a
    /// task, subtasks of that task within the running tree's budgets.
    pub(super) fn run_plan(&self, conversation: &str, args: &Value) -> ToolResult {
        let tasks = match plan_tasks(args) {
            Ok(t) => t,
            Err(e) => return ToolResult::err(format!("invalid arguments: {e}")),
        };
        // The tree and its results live in the memory database, which
        // `--no-memory` keeps this run's words out of.
        if self.memory.turns_in_process() {
            return ToolResult::err(
                "not run: a plan keeps its tasks and their results in the memory database, \
                 and this run keeps nothing there (--no-memory); do the work without a plan",
            );
        }
        // The calling turn's round and conversation, which the tasks'
        // turns take the slots of, are put back after.
        let round = self.round.borrow_mut().take();
        let conv = self.conversation.borrow().clone();
        let nested = self.tree.borrow().is_some();
        let ran = match nested {
            true => self.nested_plan(conversation, &tasks),
            false => self.new_plan(conversation, args, &tasks),
        };
        *self.round.borrow_mut() = round;
        *self.conversation.borrow_mut() = conv;
        ran.unwrap_or_else(|e| ToolResult::err(e.to_string()))
    }

    fn new_plan(&self, conversation: &str, args: &Value, tasks: &[PlanTask]) -> Result<ToolResult> {
        let limits = self.cfg.tools.plan;
        let depth = plan_depth(tasks);
        let count = plan_count(tasks);
        if depth > limits.max_depth as usize {
            return Ok(over_budget(
                "depth",
                format!(
                    "the plan is {depth} levels deep; tools.plan.max_depth is {}",
                    limits.max_depth
                ),
            ));
        }
        if count > limits.max_tasks as usize {
            return Ok(over_budget(
                "tasks",
                format!(
                    "the plan has {count} tasks; tools.plan.max_tasks is {}",
                    limits.max_tasks
                ),
            ));
        }
        let name = self
            .provider_name
            .borrow()
            .clone()
            .unwrap_or_else(|| self.cfg.default_provider.clone());
        let provider: Rc<dyn Provider> =
            Rc::from(crate::providers::build(self.cfg, &name, &self.redactor)?);
        // The same call in the same conversation is the same tree: one
        // left unfinished (a kill, a stop) goes on; a finished one is
        // planned anew.
        let hash = crate::util::sha256_hex(args.to_string().as_bytes());
        let base = format!("{conversation}/msg-{}", &hash[..12]);
        let mut root_path = base.clone();
        let mut n = 1;
        let found = loop {
            match self.memory.task(&root_path)? {
                Some(t) if t.state == TaskState::Done => {
                    n += 1;
                    root_path = format!("{base}-{n}");
                }
                other => break other,
            }
        };
        let root = match found {
            Some(root) => root,
            None => {
                let limits_json = json!({
                    "max_depth": limits.max_depth, "max_tasks": limits.max_tasks,
                    "task_rounds": limits.task_rounds, "task_tokens": limits.task_tokens,
                    "tree_tokens": limits.tree_tokens, "wall_clock_secs": limits.wall_clock_secs,
                });
                let mut new = vec![NewTask {
                    path: &root_path,
                    root: &root_path,
                    conversation,
                    parent: None,
                    index: 0,
                    depth: 0,
                    title: "plan",
                    purpose: "",
                    instructions: "",
                    evaluation: "",
                    tools: None,
                    corrects: None,
                    limits: Some(&limits_json),
                }];
                let mut out = Vec::new();
                rows(tasks, &root_path, "", 0, 1, &mut out);
                new.extend(out.iter().map(|r| new_task(r, &root_path, conversation)));
                self.memory.tasks_add(&new)?;
                self.memory
                    .task(&root_path)?
                    .ok_or_else(|| Error::runtime(format!("task {root_path} was not stored")))?
            }
        };
        // A resumed tree has spent what its leaves spent.
        let subtree = self.memory.task_subtree(&root.path)?;
        let (rounds, tokens) = subtree
            .iter()
            .filter(|t| t.depth > 0)
            .filter(|t| !subtree.iter().any(|c| c.parent.as_ref() == Some(&t.path)))
            .fold((0, 0), |(r, k), t| {
                (r + t.rounds.max(0) as u64, k + t.tokens.max(0) as u64)
            });
        *self.tree.borrow_mut() = Some(Tree {
            root: root.path.clone(),
            deadline: Instant::now() + Duration::from_secs(limits.wall_clock_secs),
            limits,
            tasks: subtree.len().saturating_sub(1) as u32,
            tokens,
            rounds,
            provider,
            skills: Rc::new(self.plan_skills()),
            hits: Vec::new(),
        });
        let ended = self.run_task(&root);
        let tree = self.tree.borrow_mut().take();
        let ended = ended?;
        let (tokens, rounds) = tree.map_or((0, 0), |t| (t.tokens, t.rounds));
        self.memory.task_ended(
            &root.path,
            &TaskEnd {
                state: ended.state,
                result: Some(&ended.result),
                budget: ended.budget,
                skill: None,
                rounds,
                tokens,
            },
        )?;
        self.outcome(&root.path, &ended)
    }

    /// A plan a task calls: its subtasks, within the tree's budgets.
    fn nested_plan(&self, caller: &str, tasks: &[PlanTask]) -> Result<ToolResult> {
        let Some(parent) = self
            .memory
            .task(caller)?
            .filter(|_| self.task_tools.borrow().iter().any(|(p, _)| p == caller))
        else {
            return Ok(ToolResult::err(
                "a plan is already running; only its tasks may add subtasks",
            ));
        };
        let (limits, stored, root) = {
            let tree = self.tree.borrow();
            let Some(t) = tree.as_ref() else {
                return Ok(ToolResult::err("no plan is running"));
            };
            (t.limits, t.tasks, t.root.clone())
        };
        let depth = parent.depth as usize + plan_depth(tasks);
        let count = plan_count(tasks);
        let hit = if depth > limits.max_depth as usize {
            Some((
                "depth",
                format!(
                    "these subtasks would reach level {depth}; tools.plan.max_depth is {}",
                    limits.max_depth
                ),
            ))
        } else if stored as usize + count > limits.max_tasks as usize {
            Some((
                "tasks",
                format!(
                    "the tree has {stored} tasks and these would add {count}; \
                     tools.plan.max_tasks is {}",
                    limits.max_tasks
                ),
            ))
        } else {
            None
        };
        if let Some((budget, why)) = hit {
            self.hit(caller, budget);
            return Ok(over_budget(budget, why));
        }
        let first = self.memory.task_children(caller)?.len();
        let mut out = Vec::new();
        rows(
            tasks,
            caller,
            id_of(caller),
            first,
            parent.depth as usize + 1,
            &mut out,
        );
        let new: Vec<NewTask> = out
            .iter()
            .map(|r| new_task(r, &root, &parent.conversation))
            .collect();
        self.memory.tasks_add(&new)?;
        if let Some(t) = self.tree.borrow_mut().as_mut() {
            t.tasks += new.len() as u32;
        }
        // The new top-level ones, each with its subtree, then the outcome
        // of those alone.
        let mut ended = Vec::new();
        for r in out.iter().filter(|r| r.parent == caller) {
            let task = self
                .memory
                .task(&r.path)?
                .ok_or_else(|| Error::runtime(format!("task {} was not stored", r.path)))?;
            let e = self.run_task(&task)?;
            let stop = e.state == TaskState::Stopped && e.budget.is_none();
            ended.push((r.path.clone(), e));
            if stop {
                break;
            }
        }
        let budget = ended.iter().find_map(|(_, e)| e.budget);
        if let Some(b) = budget {
            self.hit(caller, b);
        }
        let mut text = String::new();
        for (path, _) in &ended {
            text.push_str(&self.outcome_lines(path)?);
        }
        let all_done = ended.iter().all(|(_, e)| e.state == TaskState::Done);
        let mut r = match all_done {
            true => ToolResult::ok(text),
            false => {
                let mut r = ToolResult::err("not every subtask is done");
                r.output = text;
                r
            }
        };
        r.estop = ended.iter().any(|(_, e)| e.estop);
        let pending = ended.iter().find_map(|(_, e)| e.pending.clone());
        r.metadata = Some(json!({"budget": budget, "pending_approval": pending}));
        Ok(r)
    }

    fn hit(&self, path: &str, budget: &'static str) {
        if let Some(t) = self.tree.borrow_mut().as_mut() {
            t.hits.push((path.to_string(), budget));
        }
    }

    /// Why the tree must not start another task, if it must not.
    fn tree_stop(&self, task: &Task) -> Option<Ended> {
        if let Some(stop) = self.control.stop() {
            return Some(Ended::stopped(
                format!("stopped: {}", self.control.why(stop)),
                None,
                false,
            ));
        }
        if let Some(why) = crate::security::estop_engaged(&self.cfg.estop_path()) {
            return Some(Ended::stopped(format!("stopped: {why}"), None, true));
        }
        let tree = self.tree.borrow();
        let t = tree.as_ref()?;
        let (budget, why) = if Instant::now() >= t.deadline {
            (
                "wall_clock",
                format!(
                    "the tree ran past tools.plan.wall_clock_secs ({})",
                    t.limits.wall_clock_secs
                ),
            )
        } else if t.tokens >= t.limits.tree_tokens {
            (
                "tree_tokens",
                format!(
                    "the tree spent {} tokens; tools.plan.tree_tokens is {}",
                    t.tokens, t.limits.tree_tokens
                ),
            )
        } else if task.depth > i64::from(t.limits.max_depth) {
            (
                "depth",
                format!(
                    "task {} is at level {}; tools.plan.max_depth is {}",
                    id_of(&task.path),
                    task.depth,
                    t.limits.max_depth
                ),
            )
        } else {
            return None;
        };
        Some(Ended::stopped(
            format!("stopped before it ran: {why}"),
            Some(budget),
            false,
        ))
    }

    /// One task and, for a parent, its subtree. A done task is not run.
    fn run_task(&self, task: &Task) -> Result<Ended> {
        if task.state == TaskState::Done {
            return Ok(Ended {
                state: TaskState::Done,
                result: task.result.clone().unwrap_or_default(),
                budget: None,
                estop: false,
                pending: None,
            });
        }
        if let Some(stop) = self.tree_stop(task) {
            if task.depth > 0 {
                self.end_task(task, &stop, None, 0, 0)?;
            }
            return Ok(stop);
        }
        let children = self.memory.task_children(&task.path)?;
        if children.is_empty() && task.depth > 0 {
            self.run_leaf(task)
        } else {
            self.run_parent(task, children)
        }
    }

    fn end_task(
        &self,
        task: &Task,
        e: &Ended,
        skill: Option<&str>,
        rounds: u64,
        tokens: u64,
    ) -> Result<()> {
        self.memory.task_ended(
            &task.path,
            &TaskEnd {
                state: e.state,
                result: Some(&e.result),
                budget: e.budget,
                skill,
                rounds,
                tokens,
            },
        )?;
        log::info!(
            target: "event::task_ended",
            "task={} state={} budget={}",
            task.path,
            e.state.as_str(),
            e.budget.unwrap_or("-")
        );
        fault("task_done", &task.path);
        Ok(())
    }

    fn run_leaf(&self, task: &Task) -> Result<Ended> {
        self.memory.task_started(&task.path)?;
        log::info!(target: "event::task_started", "task={}", task.path);
        fault("task_started", &task.path);
        let (provider, skills, limits, deadline) = {
            let tree = self.tree.borrow();
            let t = tree
                .as_ref()
                .ok_or_else(|| Error::runtime("no plan is running"))?;
            (
                Rc::clone(&t.provider),
                Rc::clone(&t.skills),
                t.limits,
                t.deadline,
            )
        };
        let skill = self.assistant(task, &skills, limits.skill_min_score);
        let mut system_prompt = crate::prompt::build(self.cfg, &self.gate, "")?;
        if let Some(s) = skill.filter(|s| !self.cfg.skills.enabled.contains(&s.name)) {
            system_prompt.push_str("\n\n");
            system_prompt.push_str(&crate::skills::layer(std::slice::from_ref(s)));
        }
        let tools = task.tools.clone().unwrap_or_default();
        let scope = Scope {
            conversation: task.path.clone(),
            system_prompt,
            tools: tools.clone(),
            max_rounds: limits.task_rounds,
            task_tokens: limits.task_tokens,
            tree_tokens: limits.tree_tokens,
            deadline,
        };
        let message = self.task_message(task, &tools)?;
        self.task_tools
            .borrow_mut()
            .push((task.path.clone(), tools));
        let ran = self.scoped_turn(&*provider, &message, &scope);
        self.task_tools
            .borrow_mut()
            .retain(|(p, _)| p != &task.path);
        let skill_name = skill.map(|s| s.name.as_str());
        let out = match ran {
            Ok(out) => out,
            // Latchclaw failed (the provider after its fallbacks, a receipt
            // or the database): the task fails and the tree stops with the
            // error; called again, it goes on from this task.
            Err(e) => {
                let ended = Ended {
                    state: TaskState::Failed,
                    result: format!("failed: {e}"),
                    budget: None,
                    estop: false,
                    pending: None,
                };
                self.end_task(task, &ended, skill_name, 0, 0)?;
                return Err(e);
            }
        };
        // Its tokens were added to the tree's as they were spent.
        let tokens = out.usage.prompt_tokens + out.usage.completion_tokens;
        let tree_tokens = match self.tree.borrow_mut().as_mut() {
            Some(t) => {
                t.rounds += u64::from(out.rounds);
                t.tokens
            }
            None => tokens,
        };
        let (mut state, mut budget) = match out.exit_reason {
            Outcome::Completed | Outcome::NoAnswer => (TaskState::Done, None),
            Outcome::MaxToolRounds => (TaskState::Stopped, Some("rounds")),
            Outcome::PlanBudget => (
                TaskState::Stopped,
                Some(scope.spent(&out.usage, tree_tokens).unwrap_or("tokens")),
            ),
            Outcome::Timeout | Outcome::Cancelled => (TaskState::Stopped, None),
            _ => (TaskState::Failed, None),
        };
        let estop = out.tool_calls.iter().any(|c| c.estop);
        if estop {
            state = TaskState::Stopped;
        }
        // Stopped until the operator answers: the call runs when the plan
        // is called again (`agent --resume`), before the task goes on.
        let pending = out
            .tool_calls
            .iter()
            .find_map(|c| c.pending_approval.clone());
        let mut result = out.answer;
        if let Some(id) = &pending {
            state = TaskState::Stopped;
            result = format!("waiting for the operator's approval {id}: {result}");
        }
        let hit = self.tree.borrow_mut().as_mut().and_then(|t| {
            let i = t.hits.iter().position(|(p, _)| p == &task.path)?;
            Some(t.hits.remove(i).1)
        });
        if let Some(b) = hit {
            state = TaskState::Stopped;
            budget = budget.or(Some(b));
        }
        let ended = Ended {
            state,
            result,
            budget,
            estop,
            pending,
        };
        self.end_task(task, &ended, skill_name, u64::from(out.rounds), tokens)?;
        Ok(ended)
    }

    fn run_parent(&self, task: &Task, children: Vec<Task>) -> Result<Ended> {
        self.memory.task_started(&task.path)?;
        log::info!(target: "event::task_started", "task={}", task.path);
        let mut stopped: Option<Ended> = None;
        for child in &children {
            let e = self.run_task(child)?;
            if e.state == TaskState::Stopped && stopped.is_none() {
                let whole = e.budget.is_none();
                stopped = Some(e);
                // The emergency stop, --timeout, Ctrl-C: the whole tree.
                if whole {
                    break;
                }
            }
        }
        let mut note = String::new();
        let already = children.iter().any(|c| c.corrects.is_some());
        // The evaluation is a model call of the tree's: not once a budget
        // is spent or the run must stop.
        if stopped.is_none() && !task.evaluation.is_empty() && !already {
            stopped = self.tree_stop(task).map(|s| Ended {
                result: s
                    .result
                    .replacen("stopped before it ran", "its evaluation did not run", 1),
                ..s
            });
        }
        if stopped.is_none() && !task.evaluation.is_empty() && !already {
            let now = self.memory.task_children(&task.path)?;
            match self.evaluate(task, &now)? {
                Ok(failed) => {
                    for (child, why, fix) in failed {
                        let Some(fix) = fix else {
                            note.push_str(&format!("\n{child} failed the evaluation: {why}"));
                            continue;
                        };
                        if let Some(e) = self.correct(task, &child, &why, &fix, &mut note)?
                            && e.state == TaskState::Stopped
                            && stopped.is_none()
                        {
                            stopped = Some(e);
                        }
                    }
                }
                Err(why) => note.push_str(&format!("\nthe evaluation failed: {why}")),
            }
        }
        let now = self.memory.task_children(&task.path)?;
        let ended = match stopped {
            Some(s) => Ended {
                state: TaskState::Stopped,
                result: format!(
                    "stopped{}: {}",
                    s.budget
                        .map(|b| format!(" (budget {b})"))
                        .unwrap_or_default(),
                    crate::util::one_line(&s.result, RESULT_CHARS)
                ),
                ..s
            },
            None => {
                let failed: Vec<String> = now
                    .iter()
                    .filter(|c| c.corrects.is_none())
                    .filter(|c| !child_passed(c, &now))
                    .map(|c| id_of(&c.path).to_string())
                    .collect();
                let done = now.len() - failed.len();
                let state = match failed.is_empty() && note.is_empty() {
                    true => TaskState::Done,
                    false => TaskState::Failed,
                };
                let mut result = format!("{done} of {} subtasks done", now.len());
                if !failed.is_empty() {
                    result.push_str(&format!("; not done: {}", failed.join(", ")));
                }
                result.push_str(&note);
                Ended {
                    state,
                    result,
                    budget: None,
                    estop: false,
                    pending: None,
                }
            }
        };
        if task.depth > 0 {
            let (rounds, tokens) = now.iter().fold((0, 0), |(r, t), c| {
                (r + c.rounds.max(0) as u64, t + c.tokens.max(0) as u64)
            });
            self.end_task(task, &ended, None, rounds, tokens)?;
        }
        Ok(ended)
    }

    /// One corrective subtask of `parent` for its failed child `child`,
    /// stored and run; `None` when the fix cannot be a task here (why, in
    /// `note`).
    fn correct(
        &self,
        parent: &Task,
        child: &str,
        why: &str,
        fix: &Value,
        note: &mut String,
    ) -> Result<Option<Ended>> {
        let args = json!({"tasks": [fix]});
        // Judged as a task's plan call is: a fix names no tool the run
        // lacks, and a new task the operator would be asked about (a plan
        // call under `supervised`, a policy rule that asks) is not added
        // unasked: the operator approved the tree as it was.
        let d = self
            .gate
            .decide_from(crate::types::ToolName::Plan, &args, "task");
        if !matches!(d.verdict, crate::security::Verdict::Allow) {
            log::info!(target: "event::plan_fix_refused", "task={child} {}", d.reason);
            note.push_str(&format!(
                "
{child} failed the evaluation: {why}; its corrective subtask was not added: {}",
                crate::util::one_line(&d.reason, RESULT_CHARS)
            ));
            return Ok(None);
        }
        let Ok(mut tasks) = plan_tasks(&args) else {
            return Ok(None);
        };
        let mut fix = tasks.remove(0);
        // One level: a correction is a leaf.
        fix.subtasks.clear();
        let budget = {
            let tree = self.tree.borrow();
            tree.as_ref().and_then(|t| {
                (t.tasks >= t.limits.max_tasks).then_some(("tasks", t.limits.max_tasks))
            })
        };
        if let Some((b, max)) = budget {
            return Ok(Some(Ended::stopped(
                format!("no corrective subtask: tools.plan.max_tasks is {max}"),
                Some(b),
                false,
            )));
        }
        let first = self.memory.task_children(&parent.path)?.len();
        let mut out = Vec::new();
        let fixes = [fix];
        rows(
            &fixes,
            &parent.path,
            id_of(&parent.path),
            first,
            parent.depth as usize + 1,
            &mut out,
        );
        let Some(row) = out.first() else {
            return Ok(None);
        };
        let path_of_child = format!("{}/{child}", parent.path);
        let mut new = new_task(row, &parent.root, &parent.conversation);
        new.corrects = Some(&path_of_child);
        self.memory.tasks_add(&[new])?;
        if let Some(t) = self.tree.borrow_mut().as_mut() {
            t.tasks += 1;
        }
        log::info!(target: "event::plan_corrective", "task={child} why={why}");
        let task = self
            .memory
            .task(&row.path)?
            .ok_or_else(|| Error::runtime(format!("task {} was not stored", row.path)))?;
        self.run_task(&task).map(Some)
    }

    /// The parent's one model call: which children failed its evaluation,
    /// why, and the fix for each (`Err`: the reply could not be read).
    #[allow(clippy::type_complexity)]
    fn evaluate(
        &self,
        task: &Task,
        children: &[Task],
    ) -> Result<std::result::Result<Vec<(String, String, Option<Value>)>, String>> {
        let provider = match self.tree.borrow().as_ref() {
            Some(t) => Rc::clone(&t.provider),
            None => return Err(Error::runtime("no plan is running")),
        };
        let mut listing = String::new();
        for c in children {
            listing.push_str(&format!(
                "{} {}: {}\nevaluation: {}\nstate: {}\nresult: {}\n\n",
                id_of(&c.path),
                c.title,
                c.purpose,
                c.evaluation,
                c.state.as_str(),
                crate::util::truncate_middle(c.result.as_deref().unwrap_or(""), 1500)
            ));
        }
        let message = format!(
            "Evaluate the subtasks of task {} \"{}\" against its evaluation: {}\n\n{}\n\n\
             Reply with one JSON object: {{\"failed\": [{{\"task\": \"<id>\", \"why\": \"...\", \
             \"fix\": {{\"title\": \"...\", \"purpose\": \"...\", \"instructions\": \"...\", \
             \"evaluation\": \"...\", \"tools\": [\"...\"]}}}}]}}, with \"failed\": [] when every \
             subtask passes.",
            id_of(&task.path),
            task.title,
            task.evaluation,
            crate::util::frame("task_context", &[("kind", "results")], listing.trim_end())
        );
        let configured = self.cfg.provider(provider.name()).ok();
        let req = ChatRequest {
            system_prompt: EVALUATOR.into(),
            messages: vec![Message::new(Role::User, message)],
            tools: Vec::new(),
            model: configured.map_or_else(|| self.cfg.default_model.clone(), |p| p.model.clone()),
            temperature: configured.and_then(|p| p.temperature()),
            options: self.options,
            metadata: Default::default(),
            calls_only: false,
        };
        let resp = match provider.chat_streaming(&req, &mut Quiet(&self.control)) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e.to_string())),
        };
        if let Some(u) = &resp.usage {
            self.run_usage.borrow_mut().add(u);
            if let Some(t) = self.tree.borrow_mut().as_mut() {
                t.tokens += u.prompt_tokens + u.completion_tokens;
            }
        }
        Ok(read_verdict(&resp.final_text, children))
    }

    /// The skill whose description best matches the task, above the bar.
    fn assistant<'s>(
        &self,
        task: &Task,
        skills: &'s [crate::skills::Skill],
        bar: f64,
    ) -> Option<&'s crate::skills::Skill> {
        if skills.is_empty() {
            return None;
        }
        let docs: Vec<Vec<String>> = skills
            .iter()
            .map(|s| super::pick::words(&s.description).collect())
            .collect();
        let text = format!("{} {} {}", task.title, task.purpose, task.instructions);
        let query: BTreeSet<String> = super::pick::words(&text).collect();
        let scores = super::pick::bm25(&docs, &query);
        let (best, score) = scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))?;
        (*score >= bar && *score > 0.0).then(|| &skills[best])
    }

    /// Every well-formed skill whose tools the channel offers.
    fn plan_skills(&self) -> Vec<crate::skills::Skill> {
        let Ok(listed) = crate::skills::list(self.cfg) else {
            return Vec::new();
        };
        listed
            .into_iter()
            .filter(|l| !l.shadowed)
            .filter_map(|l| l.skill.ok())
            .filter(|s| {
                s.tools.iter().all(|t| {
                    crate::types::ToolName::parse(t)
                        .is_some_and(|t| self.cfg.channels.cli.tools_allow.contains(&t))
                })
            })
            .collect()
    }

    /// A leaf's message: the task, its ancestors' purpose and
    /// instructions, and what its earlier siblings found.
    fn task_message(&self, task: &Task, tools: &[String]) -> Result<String> {
        let mut ancestors = Vec::new();
        let mut up = task.parent.clone();
        while let Some(p) = up {
            let Some(t) = self.memory.task(&p)? else {
                break;
            };
            if t.depth > 0 {
                ancestors.push(format!(
                    "{} {}: {} {}",
                    id_of(&t.path),
                    t.title,
                    t.purpose,
                    t.instructions
                ));
            }
            up = t.parent;
        }
        ancestors.reverse();
        let mut siblings = Vec::new();
        if let Some(p) = &task.parent {
            for s in self.memory.task_children(p)? {
                if s.index < task.index && matches!(s.state, TaskState::Done | TaskState::Failed) {
                    siblings.push(format!(
                        "{} {} ({}): {}",
                        id_of(&s.path),
                        s.title,
                        s.state.as_str(),
                        crate::util::one_line(s.result.as_deref().unwrap_or(""), RESULT_CHARS)
                    ));
                }
            }
        }
        let mut m = format!(
            "Task {}: {}\nPurpose: {}\nInstructions: {}\nDone when: {}\nTools for this task: {}\n",
            id_of(&task.path),
            task.title,
            task.purpose,
            task.instructions,
            task.evaluation,
            if tools.is_empty() {
                "none".to_string()
            } else {
                tools.join(", ")
            }
        );
        for (kind, lines) in [("parent tasks", &ancestors), ("earlier results", &siblings)] {
            if !lines.is_empty() {
                m.push('\n');
                m.push_str(&crate::util::frame(
                    "task_context",
                    &[("kind", kind)],
                    &lines.join("\n"),
                ));
                m.push('\n');
            }
        }
        m.push_str("\nDo this task only, then answer with its result.");
        Ok(m)
    }

    /// A subtree's tasks, one line each, indented by level.
    fn outcome_lines(&self, path: &str) -> Result<String> {
        let mut out = String::new();
        let tasks = self.memory.task_subtree(path)?;
        let top = tasks.first().map_or(0, |t| t.depth);
        for t in tasks.iter().filter(|t| t.depth > 0) {
            out.push_str(&format!(
                "{}{} [{}{}] {}: {}\n",
                "  ".repeat((t.depth - top.max(1)).max(0) as usize),
                id_of(&t.path),
                t.state.as_str(),
                t.budget
                    .as_deref()
                    .map(|b| format!(", budget {b}"))
                    .unwrap_or_default(),
                crate::util::one_line(&t.title, 80),
                crate::util::one_line(t.result.as_deref().unwrap_or(""), RESULT_CHARS)
            ));
        }
        Ok(out)
    }

    /// The tree's outcome for the calling turn: every task's state and
    /// result, bounded.
    fn outcome(&self, root: &str, ended: &Ended) -> Result<ToolResult> {
        let stored = self.memory.task(root)?;
        let (tokens, rounds) = stored.as_ref().map_or((0, 0), |t| (t.tokens, t.rounds));
        let head = format!(
            "plan {root}: {}{} ({rounds} tool rounds, {tokens} tokens)\n",
            ended.state.as_str(),
            ended
                .budget
                .map(|b| format!(", stopped by budget {b}"))
                .unwrap_or_default()
        );
        let text = crate::util::truncate_middle(
            &format!("{head}{}", self.outcome_lines(root)?),
            OUTCOME_MAX_BYTES,
        );
        let mut r = match ended.state {
            TaskState::Done => ToolResult::ok(text),
            state => {
                let mut r = ToolResult::err(format!(
                    "the plan is {}{}: {}",
                    state.as_str(),
                    ended
                        .budget
                        .map(|b| format!(" (budget {b})"))
                        .unwrap_or_default(),
                    crate::util::one_line(&ended.result, RESULT_CHARS)
                ));
                r.output = text;
                r
            }
        };
        r.estop = ended.estop;
        r.metadata = Some(json!({
            "root": root,
            "state": ended.state.as_str(),
            "budget": ended.budget,
            "pending_approval": ended.pending,
        }));
        Ok(r)
    }
}

fn new_task<'r>(r: &'r Row, root: &'r str, conversation: &'r str) -> NewTask<'r> {
    NewTask {
        path: &r.path,
        root,
        conversation,
        parent: Some(&r.parent),
        index: r.index,
        depth: r.depth,
        title: &r.task.title,
        purpose: &r.task.purpose,
        instructions: &r.task.instructions,
        evaluation: &r.task.evaluation,
        tools: r.task.tools.as_deref(),
        corrects: None,
        limits: None,
    }
}

/// A plan refused for a budget before anything ran.
fn over_budget(budget: &'static str, why: String) -> ToolResult {
    let mut r = ToolResult::err(format!("not run: budget {budget}: {why}"));
    r.metadata = Some(json!({"state": "stopped", "budget": budget}));
    r
}

/// Whether a child is done, or its corrective subtask is.
fn child_passed(child: &Task, siblings: &[Task]) -> bool {
    match siblings
        .iter()
        .find(|s| s.corrects.as_deref() == Some(child.path.as_str()))
    {
        Some(fix) => fix.state == TaskState::Done,
        None => child.state == TaskState::Done,
    }
}

/// The evaluator's reply: `{"failed": [{"task", "why", "fix"}]}`, in the
/// text or a fenced block of it; each failed child once, named by its id.
#[allow(clippy::type_complexity)]
fn read_verdict(
    text: &str,
    children: &[Task],
) -> std::result::Result<Vec<(String, String, Option<Value>)>, String> {
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return Err("the evaluator's reply holds no JSON object".into());
    };
    let v: Value = serde_json::from_str(text.get(start..=end).unwrap_or(""))
        .map_err(|e| format!("the evaluator's reply is not JSON: {e}"))?;
    let Some(failed) = v.get("failed").and_then(Value::as_array) else {
        return Err("the evaluator's reply has no \"failed\" list".into());
    };
    let mut out: Vec<(String, String, Option<Value>)> = Vec::new();
    for f in failed {
        let Some(id) = f.get("task").and_then(Value::as_str) else {
            continue;
        };
        // A corrective subtask is not corrected again.
        let known = children
            .iter()
            .any(|c| id_of(&c.path) == id && c.corrects.is_none());
        if !known || out.iter().any(|(i, ..)| i == id) {
            continue;
        }
        let why = f
            .get("why")
            .and_then(Value::as_str)
            .unwrap_or("no reason given");
        out.push((id.to_string(), why.to_string(), f.get("fix").cloned()));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_number_tasks_by_level() {
        let t = |title: &str, subtasks: Vec<PlanTask>| PlanTask {
            title: title.into(),
            purpose: String::new(),
            instructions: String::new(),
            evaluation: String::new(),
            tools: None,
            subtasks,
        };
        let tasks = vec![
            t("a", vec![t("a1", vec![t("a11", vec![])]), t("a2", vec![])]),
            t("b", vec![]),
        ];
        let mut out = Vec::new();
        rows(&tasks, "c/msg-1", "", 0, 1, &mut out);
        let paths: Vec<(&str, usize)> = out.iter().map(|r| (r.path.as_str(), r.depth)).collect();
        assert_eq!(
            paths,
            [
                ("c/msg-1/task-1", 1),
                ("c/msg-1/task-1/task-1.1", 2),
                ("c/msg-1/task-1/task-1.1/task-1.1.1", 3),
                ("c/msg-1/task-1/task-1.2", 2),
                ("c/msg-1/task-2", 1),
            ]
        );
        // Subtasks added later to a task go on from its last child.
        let mut more = Vec::new();
        rows(&tasks[1..], "c/msg-1/task-1", "task-1", 2, 2, &mut more);
        assert_eq!(more[0].path, "c/msg-1/task-1/task-1.3");
    }

    #[test]
    fn a_verdict_names_each_failed_child_once() {
        let child = |path: &str, corrects: Option<&str>| Task {
            path: path.into(),
            root: "r".into(),
            conversation: "c".into(),
            parent: Some("r".into()),
            index: 0,
            depth: 1,
            title: String::new(),
            purpose: String::new(),
            instructions: String::new(),
            evaluation: String::new(),
            tools: None,
            corrects: corrects.map(String::from),
            skill: None,
            state: TaskState::Done,
            result: None,
            budget: None,
            limits: None,
            rounds: 0,
            tokens: 0,
            attempts: 1,
            created_at: String::new(),
            updated_at: String::new(),
        };
        let kids = [child("r/task-1", None), child("r/task-2", Some("r/task-1"))];
        let v = read_verdict(
            "Here:\n```json\n{\"failed\": [{\"task\": \"task-1\", \"why\": \"short\", \"fix\": {\"title\": \"t\"}}, \
             {\"task\": \"task-1\"}, {\"task\": \"task-2\"}, {\"task\": \"task-9\"}]}\n```",
            &kids,
        )
        .unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].0.as_str(), v[0].1.as_str()), ("task-1", "short"));
        assert!(v[0].2.is_some());
        assert_eq!(read_verdict("{\"failed\": []}", &kids).unwrap().len(), 0);
        assert!(read_verdict("all good", &kids).is_err());
        assert!(read_verdict("{\"ok\": true}", &kids).is_err());
    }
}
