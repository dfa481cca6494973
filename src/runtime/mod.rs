//! The agent loop and the one path every tool call takes:
//! gate → (approval) → started receipt → tool → outcome receipt → memory.

use crate::control::{RunControl, Stop};
use crate::error::{Error, Kind, Outcome, Result};
use crate::memory::{NewTurn, Round, RoundResult, TurnRole};
use crate::providers::visible::Visible;
use crate::providers::{
    ChatRequest, ChatResponse, Message, Provider, ProviderErrorKind, Role, StreamSink, ToolCall,
    ToolSpec, Usage,
};
use crate::receipts::{ReceiptLog, Status};
use crate::tools;
use serde::Serialize;
use serde_json::{Value, json};
use std::time::Instant;

mod call;
mod checks;
#[cfg(feature = "mcp")]
mod mcp;
mod pick;
mod plan;
mod run;

pub use crate::providers::textcalls::looks_like_tool_text;
pub use call::{CallRecord, scope_of};
use checks::claimed_effect;
pub use pick::pick_tools;
pub use run::{Approval, Approver, Runtime};
use run::{Scope, summarize_args};

/// What a channel shows while a turn runs (`Runtime::agent_turn_with`).
/// Every method does nothing unless the channel says otherwise.
pub trait Progress {
    /// A provider call starts (0 for the first of the turn).
    fn round_start(&self, round: u32) {
        let _ = round;
    }
    /// More of this round's answer as it streams in, safe to show: never
    /// `<think>` reasoning or tool-call syntax.
    fn text(&self, delta: &str) {
        let _ = delta;
    }
    /// A tool call is about to be decided and run; `summary` is its main
    /// argument, short and printable.
    fn tool_start(&self, tool: &str, summary: &str) {
        let _ = (tool, summary);
    }
    /// The call ended: `allowed`, `approved`, `denied`, `failed`,
    /// `repeated` (not run again) or `cancelled`.
    fn tool_end(&self, tool: &str, status: &str, ms: u128) {
        let _ = (tool, status, ms);
    }
    /// `count` notes from memory go with the message.
    fn notes(&self, count: usize) {
        let _ = count;
    }
}

/// Shows nothing (`--json`, tests, anything without a screen).
pub struct NoProgress;

impl Progress for NoProgress {}

/// One provider call's view of the turn: what of its text may be shown
/// (and, should the stream be cut, is its partial answer: no reasoning, no
/// half-written tool call), and when to stop (the run's deadline, Ctrl-C).
struct RoundSink<'p> {
    visible: Visible<'p>,
    shown: String,
    progress: &'p dyn Progress,
    control: &'p RunControl,
}

impl StreamSink for RoundSink<'_> {
    fn text(&mut self, delta: &str) {
        // Once the run must stop (Ctrl-C, the deadline), nothing more of
        // the stream is shown, nor kept as the partial answer: a piece
        // read while the stop was on its way would print after it.
        if self.control.stop().is_some() {
            return;
        }
        let shown = self.visible.push(delta);
        if !shown.is_empty() {
            self.progress.text(&shown);
            self.shown.push_str(&shown);
        }
    }

    fn stop(&mut self) -> Option<String> {
        self.control.stop().map(|s| self.control.why(s))
    }
}

/// The answer and outcome of a turn the run's control stopped.
fn stopped(control: &RunControl, stop: Stop) -> (String, Outcome) {
    match stop {
        Stop::Cancelled => (control.why(stop), Outcome::Cancelled),
        Stop::Timeout => (format!("stopped: {}", control.why(stop)), Outcome::Timeout),
    }
}

/// A turn the run's control stopped (`--timeout`, Ctrl-C): what of the
/// answer had arrived, and latchclaw's note on why it stopped. A channel
/// shows these apart (README: a quiet stop); the stored answer holds both.
#[derive(Debug, Clone, PartialEq)]
pub struct Stopped {
    pub partial: String,
    pub note: String,
}

#[derive(Debug, Serialize)]
pub struct TurnOutcome {
    pub conversation_id: String,
    pub answer: String,
    pub provider: String,
    pub model: String,
    pub tool_calls: Vec<CallRecord>,
    pub rounds: u32,
    /// Why the turn stopped (`turn_reason` in `agent --json`).
    pub exit_reason: Outcome,
    pub usage: Usage,
    pub duration_ms: u128,
    /// The receipt chain's head after this turn (when it wrote receipts).
    pub receipts_head: Option<String>,
    /// How tools went to the model in the turn's last request (`native`,
    /// `text`, `structured`; none for the mock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_mode: Option<&'static str>,
    /// Set when the run's control stopped the turn.
    #[serde(skip)]
    pub stopped: Option<Stopped>,
}

impl TurnOutcome {
    /// How the run ended (README: exit codes). When several apply, the
    /// emergency stop beats a refusal, which beats why the turn stopped: a
    /// model that repeats a refused call until the rounds run out was
    /// refused, and an unattended run should say so.
    pub fn outcome(&self) -> Outcome {
        if self.tool_calls.iter().any(|c| c.estop) {
            Outcome::Estop
        } else if self
            .tool_calls
            .iter()
            .any(|c| c.status == Status::Denied || c.pending_approval.is_some())
        {
            Outcome::Refused
        } else if self.tool_calls.iter().any(|c| c.budget.is_some()) {
            Outcome::PlanBudget
        } else {
            self.exit_reason
        }
    }

    pub fn exit_code(&self) -> i32 {
        self.outcome().code()
    }
}

impl<'a> Runtime<'a> {
    /// For a run that may call tools: creates the receipt key when the
    /// state directory exists and the key does not (`receipts::ensure_key`).
    pub fn prepare_receipts(&mut self) {
        if self.receipts.is_some() {
            self.receipts = Some(ReceiptLog::for_run(
                &self.cfg.receipts.path,
                &self.cfg.receipt_key_path(),
                self.cfg.receipts.anchor_file.as_deref(),
            ));
        }
    }

    /// The hash of the last receipt this process wrote.
    pub fn receipts_head(&self) -> Option<String> {
        self.receipts_head.borrow().clone()
    }

    /// After a run that wrote receipts: appends the chain's head (the last
    /// receipt this run wrote, when the anchor placed it) to
    /// `receipts.anchor_file`, when one is set.
    pub fn anchor_head(&self) -> Result<()> {
        let (Some(anchor), Some(log)) = (&self.cfg.receipts.anchor_file, &self.receipts) else {
            return Ok(());
        };
        if self.receipts_head.borrow().is_none() {
            return Ok(());
        }
        let (count, head) = log.head_to_anchor()?;
        log.anchor_under_lock(anchor, count, &head)
    }

    /// Tools the model is told about: implemented and enabled on the channel.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        tools::ToolName::ALL
            .into_iter()
            .filter(|t| self.cfg.channels.cli.tools_allow.contains(t))
            .map(crate::tools::tool)
            .map(|t| ToolSpec {
                name: t.name().as_str().into(),
                description: t.description().into(),
                parameters: t.parameters(),
                example: tools::example(t.name()),
                bounds: tools::bounds_schema(t.name()),
            })
            // Then the external tools approved as they are now.
            .chain(self.external.offered(self.cfg).map(|t| t.spec()))
            .collect()
    }

    /// The system prompt (see `prompt.rs`): the same bytes every turn.
    pub fn system_prompt(&self) -> Result<String> {
        let previous = self.previous.borrow();
        crate::prompt::build(self.cfg, &self.gate, previous.as_deref().unwrap_or(""))
    }

    /// The previous-conversation layer for a run that continues
    /// `conversation` (empty for a new one).
    pub fn previous_layer(&self, conversation: Option<&str>) -> Result<String> {
        match conversation {
            Some(id) => crate::prompt::previous(&self.memory, id),
            None => Ok(String::new()),
        }
    }

    /// A round's calls as memory stores them: arguments redacted, so a
    /// secret the model saw and passes on (to `memory_store`, say) is not
    /// kept in the history; ids and names stay, they pair the results.
    fn stored_calls(&self, calls: &[crate::providers::ToolCall]) -> String {
        let mut counts = Default::default();
        let calls: Vec<crate::providers::ToolCall> = calls
            .iter()
            .cloned()
            .map(|mut c| {
                self.redactor.redact_json(&mut c.arguments, &mut counts);
                c
            })
            .collect();
        serde_json::to_string(&calls).unwrap_or_default()
    }

    /// Memory notes for a message (see `prompt::memory_notes`) and how
    /// many there are; none when this run does not recall.
    pub fn memory_notes(
        &self,
        message: &str,
        conversation: Option<&str>,
    ) -> Result<(Option<String>, usize)> {
        if !self.recall {
            return Ok((None, 0));
        }
        crate::prompt::memory_notes(self.cfg, &self.memory, message, conversation)
    }

    /// Earlier turns of a conversation as provider messages, every call
    /// with its result and no result without its call (`memory::paired`).
    fn history(&self, conversation_id: &str) -> Result<Vec<Message>> {
        let turns = self
            .memory
            .history(conversation_id, self.cfg.memory.context_turns)?;
        let mut out: Vec<Message> = Vec::new();
        for t in turns {
            let role = match t.role {
                TurnRole::User => Role::User,
                TurnRole::Assistant => Role::Assistant,
                TurnRole::Tool => Role::Tool,
                // latchclaw's own words are never the model's.
                TurnRole::System => continue,
            };
            let tool_calls: Vec<ToolCall> = t
                .tool_calls
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            let tool_call_id = t
                .metadata
                .as_ref()
                .and_then(|m| m.get("tool_call_id"))
                .and_then(Value::as_str)
                .map(String::from);
            out.push(Message {
                tool_calls,
                tool_call_id,
                ..Message::new(role, t.content)
            });
        }
        Ok(out)
    }

    /// The slot of the round being run.
    fn round_slot(&self) -> std::cell::RefMut<'_, Option<Round>> {
        self.round.borrow_mut()
    }

    /// Stores the round being run, its calls without a result answered by
    /// `missing`.
    fn store_round(&self, missing: &str) -> Result<()> {
        let taken = self.round_slot().take();
        match taken {
            Some(round) => self.memory.add_round(&round, missing).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Persists the final answer and reports the turn. Latchclaw's own
    /// words (a limit, a cancel) are stored as a `system` turn: never sent
    /// back to the model as if it had said them, never a memory note.
    fn finish(&self, turn: Turn, end: Ending) -> Result<TurnOutcome> {
        let (provider, model) = end.who;
        self.memory.add_turn(&NewTurn {
            conversation_id: &turn.conv,
            role: if end.reason == Outcome::Completed {
                TurnRole::Assistant
            } else {
                TurnRole::System
            },
            content: &end.answer,
            provider: Some(&provider),
            model: Some(&model),
            metadata: end.meta,
            ..Default::default()
        })?;
        Ok(TurnOutcome {
            conversation_id: turn.conv,
            answer: end.answer,
            provider,
            model,
            tool_calls: turn.calls,
            rounds: turn.rounds,
            exit_reason: end.reason,
            usage: turn.usage,
            duration_ms: turn.started.elapsed().as_millis(),
            receipts_head: self.receipts_head.borrow().clone(),
            tool_mode: turn.tool_mode.map(|m| m.as_str()),
            stopped: end.stopped,
        })
    }

    /// A provider call cut mid-answer. Its partial answer is kept as the
    /// turn's assistant message, marked `"cut": true`. Cut by the run's
    /// deadline or Ctrl-C, the turn ends as a timeout or cancel does;
    /// otherwise (the server closed or failed mid-stream) it is a provider
    /// error.
    fn cut(
        &self,
        turn: Turn,
        e: crate::providers::ProviderError,
        partial: String,
    ) -> Result<TurnOutcome> {
        let meta = json!({"answered_by": e.provider, "round": turn.rounds, "cut": true,
                          "error": e.message})
        .to_string();
        let model = self
            .cfg
            .provider(&e.provider)
            .map_or_else(|_| self.cfg.default_model.clone(), |p| p.model.clone());
        if let Some(stop) = self.control.stop() {
            let (note, reason) = stopped(&self.control, stop);
            let answer = if partial.is_empty() {
                note.to_string()
            } else {
                format!("{partial}\n[{note}]")
            };
            // The operator's own Ctrl-C, or the deadline they set: no
            // warning, the channel's marker says why (README: a quiet stop).
            log::info!(target: "event::provider_cut", "{e}");
            let who = (e.provider.clone(), model);
            let end = Ending::new(answer, who, Some(meta), reason).stopped(partial, note);
            return self.finish(turn, end);
        }
        self.provider_errors.set(self.provider_errors.get() + 1);
        log::error!(target: "event::provider_error", "{e}");
        let conv = &turn.conv;
        self.memory.add_turn(&NewTurn {
            conversation_id: conv,
            role: TurnRole::Assistant,
            content: &partial,
            provider: Some(&e.provider),
            model: Some(&model),
            metadata: Some(meta),
            ..Default::default()
        })?;
        Err(Error::new(
            Kind::Runtime,
            format!(
                "{e}; the partial answer ({} chars) is saved in conversation {conv}, marked cut",
                partial.chars().count()
            ),
        ))
    }

    /// One user turn: provider ↔ tools until a text answer or the round
    /// limit, telling `progress` what happens as it happens.
    pub fn agent_turn_with(
        &self,
        provider: &dyn Provider,
        conversation_id: Option<&str>,
        message: &str,
        progress: &dyn Progress,
    ) -> Result<TurnOutcome> {
        // A plan's tasks are asked of the provider the turn asks.
        *self.provider_name.borrow_mut() = Some(provider.name().to_string());
        self.turn_in(provider, conversation_id, message, progress, None)
    }

    /// A task's sub-conversation (`plan.rs`): the loop within its scope.
    fn scoped_turn(
        &self,
        provider: &dyn Provider,
        message: &str,
        scope: &Scope,
    ) -> Result<TurnOutcome> {
        self.turn_in(provider, None, message, &NoProgress, Some(scope))
    }

    fn turn_in(
        &self,
        provider: &dyn Provider,
        conversation_id: Option<&str>,
        message: &str,
        progress: &dyn Progress,
        scope: Option<&Scope>,
    ) -> Result<TurnOutcome> {
        // A task's conversation run again goes on like a resumed one.
        let continued = match (conversation_id, scope) {
            (Some(_), _) => true,
            (None, Some(s)) => self.memory.conversation_exists(&s.conversation)?,
            (None, None) => false,
        };
        let mut turn = self.begin_turn(provider, conversation_id, message, progress, scope)?;
        if continued {
            self.run_approved(&mut turn)?;
        }
        loop {
            if let Some(stop) = self.control.stop() {
                let (answer, reason) = stopped(&self.control, stop);
                let who = (provider.name().to_string(), turn.model.clone());
                let end =
                    Ending::new(answer.clone(), who, None, reason).stopped(String::new(), answer);
                return self.finish(turn, end);
            }
            let tree = self.tree.borrow().as_ref().map_or(0, |t| t.tokens);
            if let Some(budget) = scope.and_then(|s| s.spent(&turn.usage, tree)) {
                let answer = stopped_text(
                    &format!("stopped: the task's {budget} budget is spent"),
                    &turn.findings(),
                );
                let who = (provider.name().to_string(), turn.model.clone());
                let meta = json!({"budget": budget}).to_string();
                let end = Ending::new(answer, who, Some(meta), Outcome::PlanBudget);
                return self.finish(turn, end);
            }
            self.last_request(&mut turn);
            let resp = match self.ask_provider(&mut turn)? {
                Answered::Whole(resp) => resp,
                Answered::Cut(e, partial) => return self.cut(turn, e, partial),
            };
            let meta = json!({"answered_by": resp.provider, "round": turn.rounds,
                              "finish_reason": resp.finish_reason})
            .to_string();
            if resp.tool_calls.is_empty() {
                match self.text_reply(&mut turn, resp, meta) {
                    Some(end) => return self.finish(turn, end),
                    None => continue,
                }
            }
            if turn.rounds >= turn.max_rounds {
                let end = self.out_of_rounds(&turn, resp, meta);
                return self.finish(turn, end);
            }
            if turn.repaired
                && let Some(problem) = resp
                    .tool_calls
                    .iter()
                    .filter(|c| turn.repeat_of(c).is_none())
                    .find_map(|c| self.call_problem(c))
            {
                let end = self.unrepaired(&mut turn, resp, meta, &problem)?;
                return self.finish(turn, end);
            }
            self.tool_round(&mut turn, resp, meta)?;
        }
    }

    /// Why a call cannot run as the model wrote it: a tool that does not
    /// exist, or arguments its schema refuses (`None`: it may go to the
    /// gate). The model's mistake, corrected once (`checks::repair_note`).
    fn call_problem(&self, call: &ToolCall) -> Option<checks::Problem> {
        let Some(name) = tools::ToolName::parse(&call.name) else {
            // An external tool's arguments against its schema; one not
            // approved is the gate's to refuse.
            if let Some(ext) = self.external.find(&call.name) {
                return tools::check_schema(&call.name, &ext.schema, &call.arguments)
                    .err()
                    .map(|e| {
                        let e = format!("invalid arguments: {e}");
                        checks::Problem::BadExternal(call.name.clone(), ext.schema.clone(), e)
                    });
            }
            return Some(checks::Problem::UnknownTool(call.name.clone()));
        };
        let tool = tools::tool(name);
        tools::check_args(tool, &call.arguments)
            .and_then(|()| tools::check_bounds(tool, &call.arguments))
            .err()
            .map(|e| checks::Problem::BadArguments(name, format!("invalid arguments: {e}")))
    }

    /// A malformed call after the one repair: nothing runs; every call of
    /// the reply is answered as not run in the stored round (the model's
    /// text kept there), and the turn ends as an unusable reply.
    fn unrepaired(
        &self,
        turn: &mut Turn,
        resp: ChatResponse,
        meta: String,
        problem: &checks::Problem,
    ) -> Result<Ending> {
        log::warn!(
            target: "event::unusable_reply",
            "the model's tool call could not run again after one correction: {}",
            problem.error(&self.offered_names())
        );
        *self.round_slot() = Some(Round {
            conversation_id: turn.conv.clone(),
            content: resp.final_text.clone(),
            tool_calls: self.stored_calls(&resp.tool_calls),
            call_ids: resp.tool_calls.iter().map(|c| c.id.clone()).collect(),
            provider: resp.provider.clone(),
            model: resp.model.clone(),
            metadata: meta.clone(),
            results: Vec::new(),
        });
        self.store_round(NOT_REPAIRED)?;
        let answer = stopped_text(
            &format!(
                "stopped: the model's tool call could not run again after one correction ({})",
                problem.error(&self.offered_names())
            ),
            &turn.findings(),
        );
        let who = (resp.provider, resp.model);
        Ok(Ending::new(answer, who, Some(meta), Outcome::UnusableReply))
    }

    /// The names of the tools offered on the channel.
    fn offered_names(&self) -> Vec<&str> {
        self.cfg
            .channels
            .cli
            .tools_allow
            .iter()
            .map(|t| t.as_str())
            .chain(self.external.offered(self.cfg).map(|t| t.name.as_str()))
            .collect()
    }

    /// A turn's start: its conversation (a new one, or an earlier one with
    /// its history), the user's message stored, and the first request.
    fn begin_turn<'t>(
        &self,
        provider: &'t dyn Provider,
        conversation_id: Option<&str>,
        message: &str,
        progress: &'t dyn Progress,
        scope: Option<&'t Scope>,
    ) -> Result<Turn<'t>> {
        let started = Instant::now();
        // A new conversation has no history to read (one statement less to
        // compile on every one-shot run).
        let (conv, mut messages) = match (conversation_id, scope) {
            (Some(id), _) => {
                if !self.memory.conversation_exists(id)? {
                    return Err(Error::usage(format!(
                        "no conversation \"{id}\"; `latchclaw memory list` shows them"
                    )));
                }
                (id.to_string(), self.history(id)?)
            }
            // A task's own conversation, named by its path: a task run
            // again after a kill goes on from what it had done.
            (None, Some(s)) => {
                let history = match self.memory.conversation_exists(&s.conversation)? {
                    true => self.history(&s.conversation)?,
                    false => Vec::new(),
                };
                (s.conversation.clone(), history)
            }
            (None, None) => {
                let id = crate::util::new_id("conv");
                log::info!(target: "event::conversation_started", "conversation={id}");
                (id, Vec::new())
            }
        };
        *self.conversation.borrow_mut() = Some(conv.clone());
        // Made once, before this turn's message is stored: the conversation
        // as the run found it.
        if self.previous.borrow().is_none() && scope.is_none() {
            let layer = self.previous_layer(conversation_id)?;
            *self.previous.borrow_mut() = Some(layer);
        }
        let configured = self.cfg.provider(provider.name()).ok();
        let model = configured.map_or_else(|| self.cfg.default_model.clone(), |p| p.model.clone());
        self.memory.add_turn(&NewTurn {
            conversation_id: &conv,
            role: TurnRole::User,
            content: message,
            provider: Some(provider.name()),
            model: Some(&model),
            ..Default::default()
        })?;
        // A task's context is its message; notes are the outer turn's.
        let (notes, count) = match scope {
            Some(_) => (None, 0),
            None => self.memory_notes(message, Some(&conv))?,
        };
        if count > 0 {
            progress.notes(count);
        }
        messages.push(Message {
            notes,
            ..Message::new(Role::User, message)
        });
        let mut tools = self.tool_specs();
        if let Some(s) = scope {
            tools.retain(|t| s.tools.contains(&t.name));
        }
        if let Some(n) = configured.and_then(|p| p.max_tools) {
            tools = pick_tools(tools, message, n);
        }
        let system_prompt = match scope {
            Some(s) => s.system_prompt.clone(),
            None => self.system_prompt()?,
        };
        let req = ChatRequest {
            system_prompt,
            messages,
            tools,
            model: model.clone(),
            temperature: configured.and_then(|p| p.temperature()),
            options: self.options,
            metadata: self
                .hint
                .iter()
                .map(|h| ("hint".to_string(), h.clone()))
                .collect(),
            calls_only: false,
        };
        Ok(Turn {
            provider,
            progress,
            max_rounds: scope.map_or(self.cfg.max_tool_rounds, |s| s.max_rounds),
            in_task: scope.is_some(),
            conv,
            model,
            req,
            calls: Vec::new(),
            usage: Usage::default(),
            rounds: 0,
            started,
            last_call: None,
            last_results: Vec::new(),
            asked_plain: false,
            asked_last: false,
            message: message.to_string(),
            looked: false,
            repaired: false,
            reminded: false,
            tool_mode: None,
        })
    }

    /// Calls of this conversation the operator approved that have not
    /// run: latchclaw runs them now, as a round of its own before the model
    /// is asked, and the model continues from their results. A model that
    /// does not repeat an approved call can then neither leave it unrun
    /// nor have the run claim a success it did not have; each approval is
    /// used once, here (a repeat by the model is answered from this
    /// result, not run again).
    fn run_approved(&self, turn: &mut Turn) -> Result<()> {
        // Those asked in this workspace: elsewhere the same call is another.
        let here = self.cfg.workspace_dir.to_string_lossy();
        let approved: Vec<_> = self
            .memory
            .approved_unused(&turn.conv)?
            .into_iter()
            .filter(|p| p.workspace.as_deref().is_none_or(|w| w == here))
            .collect();
        if approved.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = approved.iter().map(|p| p.id.as_str()).collect();
        let meta =
            json!({"answered_by": "latchclaw", "round": turn.rounds, "approved": ids}).to_string();
        let resp = ChatResponse {
            final_text: String::new(),
            tool_calls: approved
                .iter()
                .map(|p| ToolCall {
                    id: crate::util::new_id("call"),
                    name: p.tool.clone(),
                    arguments: p.arguments.clone(),
                })
                .collect(),
            usage: None,
            provider: "latchclaw".into(),
            model: turn.model.clone(),
            finish_reason: None,
            tool_mode: None,
        };
        self.tool_round(turn, resp, meta)
    }

    /// The last request: tools will not run after it, and small models
    /// answer when told so instead of asking again.
    fn last_request(&self, turn: &mut Turn) {
        let max_rounds = turn.max_rounds;
        if turn.rounds == max_rounds
            && turn.rounds > 0
            && !turn.last_results.is_empty()
            && !turn.asked_last
        {
            turn.asked_last = true;
            turn.req.messages.push(Message::runtime(LAST_ROUND));
            // No tools on offer either: with them, a 0.5B model called
            // one more tool even when told that none would run.
            turn.req.tools.clear();
        }
    }

    /// One provider call, streamed to the channel; its usage added to the
    /// turn's and the run's.
    fn ask_provider(&self, turn: &mut Turn) -> Result<Answered> {
        turn.progress.round_start(turn.rounds);
        let mut sink = RoundSink {
            visible: Visible::new(&turn.req.tools),
            shown: String::new(),
            progress: turn.progress,
            control: &self.control,
        };
        let resp = match turn.provider.chat_streaming(&turn.req, &mut sink) {
            Ok(r) => r,
            Err(e) if e.kind == ProviderErrorKind::StreamCut => {
                return Ok(Answered::Cut(e, sink.shown));
            }
            Err(e) => {
                // The error itself is returned and printed once by main;
                // the event is for the log (LATCHCLAW_LOG_LEVEL=info).
                self.provider_errors.set(self.provider_errors.get() + 1);
                log::info!(target: "event::provider_error", "{e}");
                return Err(Error::new(Kind::Runtime, e.to_string()));
            }
        };
        if let Some(u) = &resp.usage {
            turn.usage.add(u);
            self.run_usage.borrow_mut().add(u);
            // A task's tokens count against its tree as they are spent, so
            // the tasks of a plan it calls meanwhile see them, and it sees
            // theirs.
            if turn.in_task
                && let Some(t) = self.tree.borrow_mut().as_mut()
            {
                t.tokens += u.prompt_tokens + u.completion_tokens;
            }
        }
        if resp.tool_mode.is_some() {
            turn.tool_mode = resp.tool_mode;
        }
        // Held to a call for one request only.
        turn.req.calls_only = false;
        Ok(Answered::Whole(resp))
    }

    /// A reply without tool calls: the answer, or (once each) a request
    /// for an answer instead of an empty reply, a repair of tool-call text
    /// latchclaw cannot read, or a reminder that an effect the answer
    /// claims never happened (`None`: ask again).
    fn text_reply(&self, turn: &mut Turn, resp: ChatResponse, meta: String) -> Option<Ending> {
        let who = (resp.provider, resp.model);
        let meta = Some(meta);
        // An empty reply after tools ran (a 1.5B model stopped at
        // once after its write): asked once for the answer, then the
        // user gets what the tools returned rather than nothing.
        if resp.final_text.trim().is_empty() && !turn.last_results.is_empty() {
            if !turn.asked_plain {
                turn.asked_plain = true;
                turn.req.messages.push(Message::new(Role::Assistant, ""));
                turn.req.messages.push(Message::runtime(NO_ANSWER));
                return None;
            }
            let answer = stopped_text("the model gave no answer", &turn.findings());
            return Some(Ending::new(answer, who, meta, Outcome::NoAnswer));
        }
        if looks_like_tool_text(&resp.final_text, &turn.req.tools) {
            // Tool-call or tool-result markup that is not a call latchclaw
            // reads (an invented result, a half-written call, a made-up
            // tool) is never the answer: the model gets one repair.
            log::warn!(target: "event::unusable_reply", "the reply holds tool-call text that is not a call");
            if !turn.repaired {
                turn.repaired = true;
                let note = checks::text_repair_note(
                    &resp.final_text,
                    &turn.req.tools,
                    &self.offered_names(),
                    turn.tool_mode,
                );
                turn.req
                    .messages
                    .push(Message::new(Role::Assistant, resp.final_text));
                turn.req.messages.push(Message::runtime(note));
                turn.req.calls_only = true;
                return None;
            }
            let answer = stopped_text(
                "stopped: the model answered with tool-call text that latchclaw could not run",
                &turn.findings(),
            );
            return Some(Ending::new(answer, who, meta, Outcome::UnusableReply));
        }
        let Some(claim) =
            claimed_effect(&resp.final_text, &turn.req.tools).filter(|c| !c.made_by(&turn.calls))
        else {
            // An answer before any call to a question a tool answers (a
            // file the message names, the time): one reminder to look.
            if turn.rounds == 0
                && turn.calls.is_empty()
                && !turn.looked
                && !turn.req.tools.is_empty()
                && let Some((what, tool)) =
                    checks::asks_about(&turn.message, &self.cfg.workspace_dir)
            {
                turn.looked = true;
                let offered = turn.req.tools.iter().any(|t| t.name == tool);
                let note = checks::look_first(what, offered.then_some(tool));
                turn.req
                    .messages
                    .push(Message::new(Role::Assistant, resp.final_text));
                turn.req.messages.push(Message::runtime(note));
                // Structured and native mode can hold the next reply to a
                // call; text mode only asks.
                turn.req.calls_only = offered;
                return None;
            }
            return Some(Ending::new(resp.final_text, who, meta, Outcome::Completed));
        };
        // "DONE has been written into status.txt" with no write in the
        // turn: the model is reminded once; said again, the answer is
        // shown for what it is, with a warning and no exit 0.
        if !turn.reminded {
            turn.reminded = true;
            turn.req
                .messages
                .push(Message::new(Role::Assistant, resp.final_text));
            turn.req.messages.push(Message::runtime(claim.reminder()));
            return None;
        }
        log::warn!(
            target: "event::claimed_effect",
            "the answer says {} but no {} call succeeded in this turn; nothing of the kind was done",
            claim.what(),
            claim.tools().join(" or ")
        );
        Some(Ending::new(
            resp.final_text,
            who,
            meta,
            Outcome::UnusableReply,
        ))
    }

    /// Tool calls past the round limit: not run; the turn stops with what
    /// the last round's tools returned.
    fn out_of_rounds(&self, turn: &Turn, resp: ChatResponse, meta: String) -> Ending {
        let max_rounds = turn.max_rounds;
        let key = match turn.in_task {
            false => "max_tool_rounds",
            true => "tools.plan.task_rounds",
        };
        let answer = stopped_text(
            &format!(
                "stopped after {max_rounds} tool rounds ({key}): the model \
                 asked for more tools instead of answering"
            ),
            &turn.findings(),
        );
        let who = (resp.provider, resp.model);
        Ending::new(answer, who, Some(meta), Outcome::MaxToolRounds)
    }

    /// A round of tool calls, each with its result; the round is stored
    /// whole before the next provider call.
    fn tool_round(&self, turn: &mut Turn, resp: ChatResponse, meta: String) -> Result<()> {
        turn.last_results.clear();
        turn.rounds += 1;
        *self.round_slot() = Some(Round {
            conversation_id: turn.conv.clone(),
            content: resp.final_text.clone(),
            tool_calls: self.stored_calls(&resp.tool_calls),
            call_ids: resp.tool_calls.iter().map(|c| c.id.clone()).collect(),
            provider: resp.provider.clone(),
            model: resp.model.clone(),
            metadata: meta,
            results: Vec::new(),
        });
        turn.req.messages.push(Message {
            tool_calls: resp.tool_calls.clone(),
            ..Message::new(Role::Assistant, resp.final_text.clone())
        });
        let mut failed = None;
        let mut repeated = None;
        for call in &resp.tool_calls {
            match self.round_call(turn, call) {
                Ok(None) => {}
                Ok(Some(earlier)) => repeated = Some((call.name.clone(), earlier)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some((name, earlier)) = repeated {
            turn.req
                .messages
                .push(Message::runtime(repeat_note(&name, earlier)));
        }
        // The round is one transaction (see `Memory::add_round`), written
        // before the next provider call, and also when a call failed:
        // the calls after it are answered as not run.
        self.store_round(AFTER_ERROR)?;
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One call of a round, its result given to the model and the round.
    /// A repeat of the last call is answered from its earlier result (and
    /// how that call ended is returned); past the deadline or a cancel
    /// nothing more starts.
    fn round_call(&self, turn: &mut Turn, call: &ToolCall) -> Result<Option<CallEnd>> {
        let call_started = Instant::now();
        turn.progress
            .tool_start(&call.name, &summarize_args(&call.arguments));
        let mut repeat = None;
        let mut mistaken = false;
        // What memory keeps of a mistaken call: its error, not the note.
        let mut stored_as = None;
        // A cancelled call is not attempted, so it gets no receipt; the
        // history still gets a result for every call made.
        let (content, tool_results, reported) = if let Some(last) = turn.repeat_of(call) {
            // Small models repeat a call after its result; running it
            // again would loop until the round limit. They answer
            // when a user-role line tells them to use what they have
            // (measured with Qwen2.5-Coder-1.5B: the same words inside
            // the tool result were ignored).
            repeat = Some(last.ended);
            (last.content.clone(), None, Reported::Repeated)
        } else if let Some(stop) = self.control.stop() {
            let text = match stop {
                Stop::Cancelled => "error: not run: the turn was cancelled by the operator",
                Stop::Timeout => {
                    "no result: not run, the run was stopped (--timeout) before it started"
                }
            };
            (text.to_string(), None, Reported::Cancelled)
        } else {
            let problem = self.call_problem(call);
            match self.run_call(turn, call, problem.as_ref()) {
                // A call that could not run as written: the model reads
                // how to write it (the one repair, `checks::repair_note`);
                // the receipt and the stored round keep the error.
                Ok((content, results, reported)) => match problem {
                    Some(p) => {
                        turn.repaired = true;
                        // The model meant a call: the next reply is held to
                        // one where the mode can (a 1.5B model answered
                        // with the note's own words otherwise).
                        turn.req.calls_only = true;
                        mistaken = true;
                        stored_as = Some(content);
                        let note = p.repair_note(&self.offered_names(), turn.tool_mode);
                        (note, results, reported)
                    }
                    None => (content, results, reported),
                },
                Err(e) => {
                    let failed = Reported::Error(e.msg.clone());
                    self.call_failed(turn, call, call_started, failed);
                    return Err(e);
                }
            }
        };
        let ms = call_started.elapsed().as_millis();
        turn.progress.tool_end(&call.name, reported.as_str(), ms);
        turn.req.messages.push(Message {
            tool_call_id: Some(call.id.clone()),
            ..Message::new(Role::Tool, content.clone())
        });
        turn.last_results.push(LastResult {
            tool: call.name.clone(),
            content: content.clone(),
            mistaken,
        });
        if let Some(round) = self.round_slot().as_mut() {
            round.results.push(RoundResult {
                call_id: call.id.clone(),
                content: stored_as.unwrap_or(content),
                tool_results,
                metadata: reported.metadata(&call.id),
            });
        }
        Ok(repeat)
    }

    /// A call through `execute_tool`: what the model reads, the tool
    /// results stored, and how it ended (the last call, which a repeat is
    /// answered from).
    fn run_call(
        &self,
        turn: &mut Turn,
        call: &ToolCall,
        problem: Option<&checks::Problem>,
    ) -> Result<(String, Option<String>, Reported)> {
        let (record, result) = match problem {
            // Not judged: a call the model must write again is no refusal.
            Some(p) => self.refuse_malformed(
                &turn.conv,
                &call.name,
                &call.arguments,
                p.error(&self.offered_names()),
            )?,
            None => self.execute_tool(&turn.conv, &call.name, &call.arguments)?,
        };
        let reported = Reported::Ran(record.status, record.receipt_id.clone());
        let ended = CallEnd::of(record.status);
        turn.calls.push(record);
        let results = json!([{"tool": call.name, "result": result}]).to_string();
        let content = result.for_model();
        turn.last_call = Some(LastCall {
            name: call.name.clone(),
            args: call.arguments.clone(),
            content: content.clone(),
            ended,
        });
        Ok((content, Some(results), reported))
    }

    /// A call latchclaw failed on. The error goes to the operator; the
    /// model, should the conversation go on, reads that the call has no
    /// result (not the operator's commands, which a small model tries to
    /// run).
    fn call_failed(&self, turn: &Turn, call: &ToolCall, call_started: Instant, failed: Reported) {
        let ms = call_started.elapsed().as_millis();
        turn.progress.tool_end(&call.name, failed.as_str(), ms);
        if let Some(round) = self.round_slot().as_mut() {
            round.results.push(RoundResult {
                call_id: call.id.clone(),
                content: CALL_ERROR.into(),
                tool_results: None,
                metadata: failed.metadata(&call.id),
            });
        }
    }
}

/// A turn under way: its request, and what it has done so far.
struct Turn<'t> {
    provider: &'t dyn Provider,
    progress: &'t dyn Progress,
    /// `max_tool_rounds`, or a task's `task_rounds`.
    max_rounds: u32,
    /// A plan's task's turn (`Scope`).
    in_task: bool,
    conv: String,
    /// The configured model.
    model: String,
    req: ChatRequest,
    calls: Vec<CallRecord>,
    usage: Usage,
    rounds: u32,
    started: Instant,
    /// The last call made, which a repeat is answered from.
    last_call: Option<LastCall>,
    /// What the model got back in the last round, for a turn that stops.
    last_results: Vec<LastResult>,
    asked_plain: bool,
    asked_last: bool,
    /// The one repair of a malformed call or call text was used.
    repaired: bool,
    /// The one reminder of a claimed effect was used.
    reminded: bool,
    /// The user's message (with what was piped or attached).
    message: String,
    /// The one reminder to look before answering was used.
    looked: bool,
    /// How the last request sent tools (the provider's report).
    tool_mode: Option<crate::config::ToolMode>,
}

/// One result of the last round.
struct LastResult {
    tool: String,
    content: String,
    /// The call could not run as the model wrote it: the result is a
    /// repair note for the model, never shown to the user.
    mistaken: bool,
}

impl Turn<'_> {
    /// What the last round's tools returned, for a turn that stops: the
    /// results of calls that ran (a repair note is the model's).
    fn findings(&self) -> Vec<(String, String)> {
        self.last_results
            .iter()
            .filter(|r| !r.mistaken)
            .map(|r| (r.tool.clone(), r.content.clone()))
            .collect()
    }

    /// The last call, when `call` repeats it. A tool that takes no
    /// arguments, called again after it worked, is the same call whatever
    /// a model makes up for them (a 0.5B model passed the last time).
    fn repeat_of(&self, call: &ToolCall) -> Option<&LastCall> {
        self.last_call.as_ref().filter(|last| {
            last.name == call.name
                && (last.args == call.arguments
                    || last.ended == CallEnd::Ok && takes_nothing(&last.name))
        })
    }
}

/// The last call made: its name and arguments, what the model got back,
/// and how it ended.
struct LastCall {
    name: String,
    args: Value,
    content: String,
    ended: CallEnd,
}

/// How a call ended, as a repeat of it is answered: repeated as it is, a
/// refused call is refused again (asking again would queue another
/// approval) and a failed one fails again; small models loop on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallEnd {
    Ok,
    Refused,
    Failed,
}

impl CallEnd {
    fn of(status: Status) -> CallEnd {
        match status {
            Status::Denied => CallEnd::Refused,
            Status::Failed => CallEnd::Failed,
            _ => CallEnd::Ok,
        }
    }
}

/// What a round reports of one call: `Progress::tool_end`, and the
/// `status` of its stored result.
enum Reported {
    /// Through `execute_tool`: its outcome receipt's status and id.
    Ran(Status, Option<String>),
    /// The last call again: answered from its result, not run.
    Repeated,
    /// Not attempted: the run was stopped.
    Cancelled,
    /// Latchclaw failed on it (a receipt not written, the lock not
    /// taken); why.
    Error(String),
}

impl Reported {
    fn as_str(&self) -> &'static str {
        match self {
            Reported::Ran(status, _) => status.as_str(),
            Reported::Repeated => "repeated",
            Reported::Cancelled => "cancelled",
            Reported::Error(_) => "failed",
        }
    }

    /// The stored result's metadata.
    fn metadata(&self, call_id: &str) -> String {
        let mut meta = json!({"tool_call_id": call_id, "status": self.as_str()});
        match self {
            Reported::Ran(_, receipt_id) => meta["receipt_id"] = json!(receipt_id),
            Reported::Error(e) => meta["error"] = json!(e),
            Reported::Repeated | Reported::Cancelled => {}
        }
        meta.to_string()
    }
}

/// What a provider call came to: a whole reply, or a stream cut with the
/// part of it already shown.
enum Answered {
    Whole(ChatResponse),
    Cut(crate::providers::ProviderError, String),
}

/// How a turn ends: the answer, who gave it, and why it stopped.
struct Ending {
    answer: String,
    /// The provider and model.
    who: (String, String),
    meta: Option<String>,
    reason: Outcome,
    stopped: Option<Stopped>,
}

impl Ending {
    fn new(answer: String, who: (String, String), meta: Option<String>, reason: Outcome) -> Self {
        Ending {
            answer,
            who,
            meta,
            reason,
            stopped: None,
        }
    }

    /// The run's control stopped the turn: `partial` had arrived.
    fn stopped(self, partial: String, note: String) -> Self {
        Ending {
            stopped: Some(Stopped { partial, note }),
            ..self
        }
    }
}

/// The request after a round that repeated `name`'s last call, by how
/// that call ended.
fn repeat_note(name: &str, earlier: CallEnd) -> String {
    match earlier {
        CallEnd::Refused => format!(
            "[latchclaw: you called {name} again with the same arguments; it was \
             refused before, so it was not tried again. Do not retry it. Answer the \
             user now, in plain text, and say it was refused and why.]"
        ),
        CallEnd::Failed => format!(
            "[latchclaw: you called {name} again with the same arguments; it failed \
             before (the error is above), so it was not run again. Call it with \
             different arguments, or answer the user now in plain text.]"
        ),
        CallEnd::Ok => format!(
            "[latchclaw: you called {name} again with the same arguments; it was not \
             run again and its result is above. Answer the user now, in plain text, \
             from that result.]"
        ),
    }
}

/// Whether a tool takes no arguments at all (`time`).
fn takes_nothing(name: &str) -> bool {
    tools::find(name).is_some_and(|t| {
        t.parameters()["properties"]
            .as_object()
            .is_none_or(|p| p.is_empty())
    })
}

/// A call's result when latchclaw failed on it (a receipt that could not
/// be written, a lock that could not be taken).
const CALL_ERROR: &str = "no result: the run stopped on an error before this call's result was \
recorded; it may or may not have taken effect";

/// The result of the calls after one latchclaw failed on.
const AFTER_ERROR: &str = "no result: not run, the run stopped on an error at an earlier call";

/// The last request of a turn, sent when the round limit is reached.
const LAST_ROUND: &str = "[latchclaw: tools will not run again in this turn. Answer the user now, \
in plain text, from the tool results above.]";

/// Sent once when a reply after tool results is empty.
const NO_ANSWER: &str = "[latchclaw: your reply was empty. Answer the user now, in plain text, \
from the tool results above.]";

/// The result of calls not run because a malformed call came after the
/// one repair.
const NOT_REPAIRED: &str = "no result: not run, the reply held a malformed call again and the \
turn ended";

/// How much of the last results a stopped turn shows the user.
const STOPPED_RESULTS_BYTES: usize = 4000;

/// A stopped turn's answer: why, then what the last round's tools returned
/// (the user still gets what was found).
fn stopped_text(why: &str, last_results: &[(String, String)]) -> String {
    let mut out = why.to_string();
    if !last_results.is_empty() {
        out.push_str(". The last tool results:");
        let each = STOPPED_RESULTS_BYTES / last_results.len();
        for (tool, content) in last_results {
            out.push_str(&format!(
                "\n\n[{tool}]\n{}",
                crate::util::truncate_middle(content, each)
            ));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_reported_by_one_status_and_repeats_weigh_how_it_ended() {
        let meta = |r: Reported| r.metadata("call-1");
        let ran = Reported::Ran(Status::Approved, Some("receipt-1".into()));
        assert_eq!(ran.as_str(), "approved");
        assert_eq!(
            meta(ran),
            json!({"tool_call_id": "call-1", "status": "approved", "receipt_id": "receipt-1"})
                .to_string()
        );
        assert_eq!(
            meta(Reported::Ran(Status::Denied, None)),
            json!({"tool_call_id": "call-1", "status": "denied", "receipt_id": null}).to_string()
        );
        assert_eq!(
            meta(Reported::Repeated),
            json!({"tool_call_id": "call-1", "status": "repeated"}).to_string()
        );
        assert_eq!(
            meta(Reported::Cancelled),
            json!({"tool_call_id": "call-1", "status": "cancelled"}).to_string()
        );
        assert_eq!(
            meta(Reported::Error("cannot lock".into())),
            json!({"tool_call_id": "call-1", "status": "failed", "error": "cannot lock"})
                .to_string()
        );
        for (status, ended) in [
            (Status::Allowed, CallEnd::Ok),
            (Status::Approved, CallEnd::Ok),
            (Status::Denied, CallEnd::Refused),
            (Status::Failed, CallEnd::Failed),
        ] {
            assert_eq!(CallEnd::of(status), ended);
        }
        assert!(repeat_note("shell", CallEnd::Refused).contains("it was refused before"));
        assert!(repeat_note("shell", CallEnd::Failed).contains("it failed before"));
        assert!(repeat_note("time", CallEnd::Ok).contains("its result is above"));
    }

    #[test]
    fn a_stopped_turn_shows_the_last_results_within_bounds() {
        let big = "x".repeat(10_000);
        let text = stopped_text(
            "stopped",
            &[
                ("shell".into(), big.clone()),
                ("time".into(), "noon".into()),
            ],
        );
        assert!(text.starts_with("stopped. The last tool results:"));
        assert!(text.contains("[shell]") && text.contains("[time]\nnoon"));
        assert!(text.len() < STOPPED_RESULTS_BYTES + 200, "{}", text.len());
        assert_eq!(stopped_text("stopped", &[]), "stopped");
    }
}
