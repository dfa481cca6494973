//! What one run holds and what the loop (`mod.rs`) and a call's steps
//! (`call.rs`) share: the `Runtime` (config, gate, memory, receipt log,
//! the approver, the run's control), the operator it asks (`Approver`),
//! the tool lock and a call's one-line summary. A leaf of `runtime`.

use crate::config::Config;
use crate::control::RunControl;
use crate::error::{Error, IoContext, Kind, Result};
use crate::memory::{Memory, Round};
use crate::providers::Usage;
use crate::receipts::ReceiptLog;
use crate::security::redact::Redactor;
use crate::security::{Decision, Gate};
use crate::tools;
use serde_json::Value;
use std::cell::RefCell;
use std::time::Instant;

#[derive(Debug, PartialEq)]
pub enum Approval {
    Approved,
    /// Approved, and calls like it in this conversation from now on
    /// (`call::scope_of` says which are alike).
    Always,
    Denied(String),
    /// Nobody to ask (no terminal): the call waits as a pending approval.
    Unavailable(String),
}

/// Asks a person whether a call may run. Only the runtime calls it, so
/// nothing in a model's output can answer for the operator. The same
/// person answers `ask_user` questions (`tools::User`).
pub trait Approver: tools::User {
    /// Gives up when `control` says the run must stop. `always`: the
    /// answer "always for this conversation" may be offered. `preview`:
    /// what the call would change (a write's unified diff), shown in place
    /// of the content it writes.
    fn ask(
        &self,
        tool: &str,
        decision: &Decision,
        args: &Value,
        preview: Option<&str>,
        always: bool,
        control: &RunControl,
    ) -> Approval;
}

/// The main argument of a call, on one short line, for a status line.
pub fn summarize_args(args: &Value) -> String {
    let main = ["command", "path", "url", "query"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str));
    let text = match main {
        Some(s) => s.to_string(),
        None if args.as_object().is_some_and(|o| o.is_empty()) => String::new(),
        None => args.to_string(),
    };
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let printable = crate::util::printable(&one_line);
    match printable.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &printable[..i]),
        None => printable,
    }
}

/// What one run holds. Its fields are the runtime's: the loop (`mod.rs`)
/// and a call's steps (`call.rs`) read them.
pub struct Runtime<'a> {
    pub cfg: &'a Config,
    pub gate: Gate,
    /// Every tool result passes through it before anything else sees it.
    pub redactor: std::sync::Arc<Redactor>,
    pub memory: Memory,
    pub(super) receipts: Option<ReceiptLog>,
    pub(super) approver: &'a dyn Approver,
    /// Hash of the last receipt this process wrote.
    pub(super) receipts_head: RefCell<Option<String>>,
    /// `--hint` for a router provider.
    pub hint: Option<String>,
    /// `agent -o`: sent with every request of the run.
    pub options: crate::providers::ModelOptions,
    /// The run's deadline (`--timeout`) and cancellation (Ctrl-C).
    pub control: RunControl,
    /// The command that runs this call again, for a caller that is not a
    /// conversation (`tool run`): after `latchclaw approve ID` the operator
    /// gives it again, instead of resuming a conversation.
    pub rerun: Option<String>,
    /// Tokens the provider reported over every turn of this run.
    pub run_usage: RefCell<Usage>,
    /// The conversation a turn is working on, as soon as it is known, for
    /// the run's record when the turn fails without an outcome.
    pub conversation: RefCell<Option<String>>,
    /// The tool round being run: stored whole when it ends, however it
    /// ends, each call without a result given one saying so.
    pub round: RefCell<Option<Round>>,
    /// The system prompt's previous-conversation layer, made at the run's
    /// first turn and kept, so every turn of the run sends the same bytes.
    pub(super) previous: RefCell<Option<String>>,
    /// `cache_ttl_secs`: read-only results by the judged call (tool,
    /// arguments, resolved path or plan), with when they were made; emptied
    /// by any call that may change something.
    pub(super) cache:
        RefCell<std::collections::HashMap<String, (Instant, crate::tools::ToolResult)>>,
    /// When this run's calls of rate-limited tools were admitted
    /// (`rate_limit.per_minute` counts these).
    pub(super) calls_in_run: RefCell<Vec<(String, Instant)>>,
    /// The external tools (MCP servers', plugins') this run knows, read once.
    pub external: crate::external::Registry,
    /// The MCP servers this run started, stopped when it ends.
    #[cfg(feature = "mcp")]
    pub mcp: super::mcp::McpServers,
    /// Provider calls of this run that failed: the gateway adds them to
    /// its metrics and answers a turn that failed after one with 502.
    pub provider_errors: std::cell::Cell<u64>,
    /// Whether stored notes and other conversations' turns go with a
    /// message (`[memory] recall`; a one-shot run sets it off under
    /// `repl`, `--no-memory` always).
    pub recall: bool,
    /// ` -w DIR` when the run's workspace is not `workspace_dir` (the git
    /// work tree it started in): the resume command it suggests says where.
    pub workspace_flag: String,
    /// "Always for this conversation" answers are offered and honoured:
    /// `agent` at a terminal's conversations only, never `tool run` (one
    /// shared conversation) or the gateway (no operator there).
    pub standing: bool,
    /// The tool lock a running `code_run` holds, for the calls it makes.
    pub(super) held_lock: RefCell<Option<std::fs::File>>,
    /// The sandbox of the shell or git call about to run, prepared while
    /// its started receipt was written (`tools::shell::prepare_ahead`).
    pub(super) ahead: RefCell<Option<crate::security::confine::Ahead>>,
    /// The running snippets whose `tool()` calls are under way: no call
    /// they make kills them with its own leftovers.
    pub(super) spared: RefCell<Vec<i32>>,
    /// `code_run`'s background snippets: they end when the run does.
    pub(super) jobs: crate::tools::code::jobs::Jobs,
    /// The provider the run's turns ask, by name: a plan's tasks ask it too.
    pub(super) provider_name: RefCell<Option<String>>,
    /// The tasks of a plan running now, by their conversation (the task's
    /// path), with the tools each names: the gate refuses any other.
    pub(super) task_tools: RefCell<Vec<(String, Vec<String>)>>,
    /// The plan tree under way, for a plan a task calls (`plan.rs`).
    pub(super) tree: RefCell<Option<Tree>>,
}

/// A plan's tree under way (`plan.rs` runs it): its budgets and what it
/// has spent, the provider its tasks ask, the skills they may run as.
pub(super) struct Tree {
    pub root: String,
    pub deadline: Instant,
    pub limits: crate::config::PlanConfig,
    /// Tasks stored under the root.
    pub tasks: u32,
    pub tokens: u64,
    pub rounds: u64,
    pub provider: std::rc::Rc<dyn crate::providers::Provider>,
    pub skills: std::rc::Rc<Vec<crate::skills::Skill>>,
    /// Budgets hit by a plan a task called, by that task's path.
    pub hits: Vec<(String, &'static str)>,
}

/// What a task's sub-conversation is held to (`plan.rs` makes it, the
/// loop in `mod.rs` obeys it).
pub(super) struct Scope {
    /// The task's path, its conversation's id.
    pub conversation: String,
    pub system_prompt: String,
    /// The tools offered, by name.
    pub tools: Vec<String>,
    pub max_rounds: u32,
    /// Tokens the task may spend, and the whole tree may
    /// (`tools.plan.tree_tokens`).
    pub task_tokens: u64,
    pub tree_tokens: u64,
    /// The tree's wall clock.
    pub deadline: Instant,
}

impl Scope {
    /// The budget a turn that has used `usage` has spent, if any, when
    /// the whole tree has spent `tree` tokens by now (this turn's, the
    /// tasks of a plan it called and their evaluations included: read
    /// anew each round, never what was left when the task started).
    pub fn spent(&self, usage: &crate::providers::Usage, tree: u64) -> Option<&'static str> {
        let used = usage.prompt_tokens + usage.completion_tokens;
        if Instant::now() >= self.deadline {
            Some("wall_clock")
        } else if tree >= self.tree_tokens {
            Some("tree_tokens")
        } else if used >= self.task_tokens {
            Some("tokens")
        } else {
            None
        }
    }
}

/// An exclusive lock on `<state>/tools.lock`, held while one tool call is
/// re-judged and runs; released when the guard drops.
pub(super) fn tool_lock(cfg: &Config, control: &RunControl) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = cfg.state_dir.join("tools.lock");
    let _ = crate::util::private_dir(&cfg.state_dir);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .ctx(|| format!("cannot open {}", path.display()))?;
    // Waits for the other call, but not past the run's deadline or Ctrl-C.
    loop {
        // flock(2), LOCK_EX | LOCK_NB.
        let err = match file.try_lock() {
            Ok(()) => break,
            Err(e) => e,
        };
        let waiting = matches!(err, std::fs::TryLockError::WouldBlock);
        if !waiting || control.stop().is_some() {
            let why = match err {
                std::fs::TryLockError::WouldBlock => "another latchclaw call holds it".to_string(),
                std::fs::TryLockError::Error(e) => e.to_string(),
            };
            return Err(Error::new(
                Kind::Runtime,
                format!("cannot lock {}: {why}", path.display()),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(file)
}

impl<'a> Runtime<'a> {
    /// `redactor`: the process's, which knows the secrets `cfg` names.
    pub fn new(
        cfg: &'a Config,
        approver: &'a dyn Approver,
        redactor: std::sync::Arc<Redactor>,
    ) -> Result<Runtime<'a>> {
        crate::config::usable_state_dir(&cfg.state_dir)?;
        let memory = Memory::open(
            &cfg.memory.path,
            cfg.memory.busy_timeout_ms,
            std::sync::Arc::clone(&redactor),
        )?;
        Ok(Runtime {
            cfg,
            gate: Gate::new(cfg, &cfg.channels.cli.tools_allow),
            redactor,
            memory,
            receipts: cfg.receipts.enabled.then(|| {
                ReceiptLog::open(&cfg.receipts.path, &cfg.receipt_key_path())
                    .anchored(cfg.receipts.anchor_file.as_deref())
            }),
            approver,
            receipts_head: RefCell::new(None),
            hint: None,
            options: Default::default(),
            control: RunControl::new(None),
            rerun: None,
            run_usage: RefCell::new(Usage::default()),
            conversation: Default::default(),
            round: Default::default(),
            previous: Default::default(),
            cache: Default::default(),
            calls_in_run: Default::default(),
            external: crate::plugins::registry(cfg),
            #[cfg(feature = "mcp")]
            mcp: Default::default(),
            provider_errors: Default::default(),
            recall: cfg.memory.recall != crate::config::Recall::Never,
            workspace_flag: String::new(),
            standing: false,
            held_lock: RefCell::new(None),
            ahead: RefCell::new(None),
            spared: RefCell::new(Vec::new()),
            jobs: Default::default(),
            provider_name: Default::default(),
            task_tools: Default::default(),
            tree: Default::default(),
        })
    }
}
