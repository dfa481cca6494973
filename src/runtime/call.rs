//! One tool call, a value that moves through typed states, each step a
//! function taking the previous state by value:
//!
//! `Call` →`validate`→ `Valid` →`judge`→ `Judged` →`approve`→ `Approved`
//! →`admit`→ `Admitted` →`start`→ `Started` →`invoke`→ `Ran` →`ran`→
//! `Ended` →`record`→ `Recorded`
//!
//! A step that ends the call before it runs (an invalid call, a denial, a
//! pending approval, the files changed while the operator was asked, a
//! rate limit) returns its `Ended` instead (`Next::End`), which `record`
//! writes like any other. Only `start` makes a `Started`, by writing the
//! call's `started` receipt (or, for a tool that changes nothing, by
//! finding the receipt log appendable), and only `invoke` runs a tool,
//! taking a `Started` by value: no path runs a tool without its receipt.

use super::run::{Approval, Runtime, summarize_args, tool_lock};
use crate::error::{Error, Kind, Result};
use crate::receipts::{NewReceipt, Status};
use crate::security::{Decision, Risk, Verdict};
use crate::tools::{self, Tool, ToolCtx, ToolName, ToolResult};
use serde::Serialize;
use serde_json::Value;
use std::cell::RefCell;
use std::fs::File;
use std::time::Instant;

use started::Started;

/// One attempted tool call, as reported to the user.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    pub tool: String,
    pub arguments: Value,
    pub status: Status,
    pub risk: Risk,
    pub reason: String,
    /// The outcome receipt (the call's last).
    pub receipt_id: Option<String>,
    /// The receipt written before the tool ran (calls that ran only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_receipt_id: Option<String>,
    /// Set when the call waits for an operator (`latchclaw approve ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_approval: Option<String>,
    /// A `plan` whose tree a budget stopped: which (`[tools.plan]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    #[serde(skip)]
    pub estop: bool,
}

/// A call as the model (or `tool run`) made it.
#[derive(Clone, Copy)]
struct Call<'c> {
    conversation_id: &'c str,
    name: &'c str,
    args: &'c Value,
}

/// What a call names: a built-in, or an external tool (a plugin's).
#[derive(Clone, Copy)]
enum Target<'c> {
    Builtin(ToolName, &'static dyn Tool),
    External(&'c crate::external::ExternalTool),
}

/// A call that names a tool, with arguments its schema accepts.
struct Valid<'c> {
    call: Call<'c>,
    target: Target<'c>,
}

impl Valid<'_> {
    /// The built-in it names, if it names one.
    fn builtin(&self) -> Option<ToolName> {
        match self.target {
            Target::Builtin(t, _) => Some(t),
            Target::External(_) => None,
        }
    }

    fn takes_effect(&self) -> bool {
        match self.target {
            Target::Builtin(_, tool) => tool.takes_effect(),
            // Its own word is not taken for it: every call of a process
            // latchclaw does not know gets its started receipt first.
            Target::External(_) => true,
        }
    }
}

/// The gate's decision, and `<state>/tools.lock` taken before it: one call
/// at a time among the processes sharing the state directory, from its
/// decision to its last receipt, so another latchclaw (an overlapping cron
/// run, a second session) cannot change the files between what the gate
/// judged and what runs. A call that is denied needs no lock (an unusable
/// state dir is then still an estop denial), so a failure to take it is
/// kept; one that would run does not run without it.
struct Judged<'c> {
    call: Valid<'c>,
    decision: Decision,
    lock: Result<File>,
}

/// The lock as an approved call holds it.
enum Lock {
    /// Held since before the decision (or why it could not be taken).
    Held(Result<File>),
    /// Let go while the operator was asked: nobody else's call waits on
    /// this one's operator. Taken again before the call runs, and the call
    /// decided again.
    LetGo,
}

/// Allowed by policy, or approved by the operator (earlier, through
/// `latchclaw approve`, or at the prompt).
struct Approved<'c> {
    call: Valid<'c>,
    decision: Decision,
    /// `Allowed` or `Approved`.
    status: Status,
    /// The gate's reason, and who approved.
    reason: String,
    lock: Lock,
}

/// Ready to run: the lock held, the call counted against its rate limit.
struct Admitted<'c> {
    call: Valid<'c>,
    /// The gate's decision (its risk is the outcome receipt's).
    decision: Decision,
    /// Decided again after the lock was taken again, what the tool acts on.
    fresh: Option<Decision>,
    status: Status,
    reason: String,
    lock: File,
}

impl Admitted<'_> {
    /// The decision the tool acts on (the resolved path, the judged plan).
    fn acting(&self) -> &Decision {
        self.fresh.as_ref().unwrap_or(&self.decision)
    }
}

/// The token a tool runs on.
mod started {
    use super::{Admitted, Runtime, Target};
    use crate::error::Result;
    use crate::receipts::{NewReceipt, Status};

    /// A call whose `started` receipt is on disk, or, for a tool that
    /// changes nothing (it gets its one receipt afterwards), whose receipt
    /// log was found appendable. Its fields are private to this module:
    /// `Runtime::start` is the only way to make one.
    pub(super) struct Started<'c> {
        admitted: Admitted<'c>,
        id: Option<String>,
    }

    impl<'c> Started<'c> {
        /// The admitted call and its started receipt's id.
        pub(super) fn into_parts(self) -> (Admitted<'c>, Option<String>) {
            (self.admitted, self.id)
        }
    }

    impl Runtime<'_> {
        /// The started receipt is on disk before the tool can take effect,
        /// so a call cut off by a kill or a crash still has a receipt; a
        /// tool whose receipt cannot be written does not run.
        pub(super) fn start<'c>(&self, admitted: Admitted<'c>) -> Result<Started<'c>> {
            let c = admitted.call.call;
            // A tool that starts children, or a plugin's: the shared
            // namespaces get made beside the receipt.
            if matches!(admitted.call.target, Target::External(_))
                || admitted
                    .call
                    .builtin()
                    .is_some_and(crate::types::ToolName::starts_children)
            {
                crate::security::confine::start_early(self.cfg.security.confinement);
            }
            self.prepare_ahead(&admitted.call, admitted.acting());
            let id = if admitted.call.takes_effect() {
                self.append_receipt(&NewReceipt {
                    conversation_id: c.conversation_id,
                    tool: c.name,
                    args: c.args,
                    result: None,
                    status: Status::Started,
                    risk: admitted.acting().risk,
                    reason: &admitted.reason,
                    started_id: None,
                    measured: None,
                })
                .inspect_err(|_| self.set_ahead(None))?
            } else {
                if let Some(log) = &self.receipts {
                    log.check_appendable()?;
                }
                None
            };
            Ok(Started { admitted, id })
        }
    }
}

/// A tool that ran, its result redacted.
struct Ran<'c> {
    call: Valid<'c>,
    decision: Decision,
    status: Status,
    reason: String,
    started_id: Option<String>,
    result: ToolResult,
    lock: Option<File>,
}

/// How a call ended, before its outcome receipt is written.
struct Ended<'c> {
    call: Call<'c>,
    status: Status,
    risk: Risk,
    reason: String,
    started_id: Option<String>,
    pending: Option<String>,
    estop: bool,
    result: ToolResult,
    /// Held until the outcome receipt is written.
    lock: Option<File>,
}

impl<'c> Ended<'c> {
    /// A call that ends without running.
    fn early(
        call: Call<'c>,
        d: &Decision,
        status: Status,
        reason: String,
        result: ToolResult,
        lock: Option<File>,
    ) -> Ended<'c> {
        Ended {
            call,
            status,
            risk: d.risk,
            reason,
            started_id: None,
            pending: None,
            estop: d.estop || result.estop,
            result,
            lock,
        }
    }
}

/// The outcome receipt written: what the user sees, and what the model reads.
struct Recorded {
    record: CallRecord,
    result: ToolResult,
}

/// What a step returns: the call's next state, or how it ended. (`T` is
/// generic, so clippy cannot see that the states are as large as `Ended`;
/// each is moved once, by the step that takes it.)
#[allow(clippy::large_enum_variant)]
enum Next<'c, T> {
    Go(T),
    End(Ended<'c>),
}

/// The counter the gate's rate limits read: this run's calls in the
/// process, every run's in the memory database.
struct CallLog<'a> {
    memory: &'a crate::memory::Memory,
    in_run: &'a RefCell<Vec<(String, Instant)>>,
}

impl crate::security::rate::CallCounter for CallLog<'_> {
    fn admit(
        &self,
        tool: &str,
        hourly: bool,
        record: bool,
        decide: &mut dyn FnMut(&crate::security::rate::Counts) -> Option<String>,
    ) -> Result<Option<String>> {
        let now = Instant::now();
        let minute = std::time::Duration::from_millis(crate::security::rate::MINUTE_MS as u64);
        let (mut ages, mut all_ages) = (Vec::new(), Vec::new());
        for (t, at) in self.in_run.borrow().iter() {
            let age = u64::try_from(now.duration_since(*at).as_millis()).unwrap_or(u64::MAX);
            if t == tool {
                ages.push(age);
            }
            all_ages.push(age);
        }
        let in_minute =
            |a: &[u64]| a.iter().filter(|&&a| a < minute.as_millis() as u64).count() as u32;
        let mut counts = crate::security::rate::Counts {
            minute_in_run: in_minute(&ages),
            all_minute_in_run: in_minute(&all_ages),
            ages_ms: ages,
            all_ages_ms: all_ages,
            ..Default::default()
        };
        let mut verdict = None;
        let mut judge = |hour_all_runs, all_hour_all_runs| {
            counts.hour_all_runs = hour_all_runs;
            counts.all_hour_all_runs = all_hour_all_runs;
            verdict = decide(&counts);
            verdict.is_none() && record
        };
        if hourly {
            self.memory
                .admit_tool_call(tool, crate::security::rate::HOUR_MS, &mut judge)?;
        } else {
            judge(0, 0);
        }
        if verdict.is_none() && record {
            self.in_run.borrow_mut().push((tool.to_string(), now));
        }
        Ok(verdict)
    }
}

/// A call that names no tool, or whose arguments do not fit its tool's
/// schema: not judged, not run; the model reads what to fix, and the
/// receipt records the attempt.
fn invalid(call: Call<'_>, error: String) -> Ended<'_> {
    log::info!(target: "event::tool_failed", "tool={} error={error}", call.name);
    Ended {
        call,
        status: Status::Failed,
        risk: Risk::Low,
        result: ToolResult::err(error.clone()),
        reason: error,
        started_id: None,
        pending: None,
        estop: false,
        lock: None,
    }
}

impl Runtime<'_> {
    /// `<state>/tools.lock`, or, for a call a running `code_run` makes, a
    /// duplicate of the one that call holds.
    fn tool_lock(&self) -> Result<File> {
        if let Some(held) = self.held_lock.borrow().as_ref() {
            return held.try_clone().map_err(|e| {
                Error::new(Kind::Runtime, format!("cannot share the tool lock: {e}"))
            });
        }
        tool_lock(self.cfg, &self.control)
    }
}

impl Runtime<'_> {
    /// Keeps `ahead` for the call about to run (dropping one that was not
    /// taken removes its tmp).
    fn set_ahead(&self, ahead: Option<crate::security::confine::Ahead>) {
        self.ahead.replace(ahead);
    }

    /// A shell or git call's sandbox, prepared from now on (the one kept
    /// if it is for this decision's plan), under the lock the call holds.
    fn prepare_ahead(&self, call: &Valid<'_>, d: &Decision) {
        if matches!(call.builtin(), Some(ToolName::Shell | ToolName::Git)) {
            let kept = self.ahead.take();
            self.set_ahead(crate::tools::shell::prepare_ahead(
                self.cfg, &self.gate, d, kept,
            ));
        }
    }
}

/// A snippet's `tool()`: the whole call path, as a model's call takes it.
impl crate::tools::Host for Runtime<'_> {
    fn take_ahead(&self) -> Option<crate::security::confine::Ahead> {
        self.ahead.take()
    }

    fn call_tool(
        &self,
        conversation_id: &str,
        name: &str,
        args: &Value,
        running: i32,
    ) -> std::result::Result<crate::tools::HostCall, String> {
        // One snippet at a time: a snippet's snippet would hold the lock
        // and the sandbox twice over for nothing the first cannot do.
        if name == ToolName::CodeRun.as_str() || name == ToolName::Plan.as_str() {
            return Err(format!("{name} cannot be called from a snippet"));
        }
        self.spared.borrow_mut().push(running);
        let ran = self.execute_tool(conversation_id, name, args);
        self.spared.borrow_mut().retain(|p| *p != running);
        let (record, result) = ran.map_err(|e| e.to_string())?;
        Ok(crate::tools::HostCall {
            status: record.status.as_str().to_string(),
            denied: record.status == Status::Denied,
            result,
            receipt_id: record.receipt_id,
        })
    }

    fn jobs(&self) -> Option<&crate::tools::code::jobs::Jobs> {
        Some(&self.jobs)
    }

    fn plan(&self, conversation_id: &str, args: &Value) -> ToolResult {
        // Unreachable without the feature (never offered, refused by the
        // gate); the constant branch lets the linker drop the runner.
        if !cfg!(feature = "plan") {
            let why = crate::features::tool_not_built(ToolName::Plan);
            return ToolResult::err(why.unwrap_or_default());
        }
        self.run_plan(conversation_id, args)
    }
}

impl Runtime<'_> {
    /// Gate → approval → started receipt → tool → outcome receipt. Denials
    /// and failures are results the model can read; only a receipt that
    /// cannot be written is an error.
    pub fn execute_tool(
        &self,
        conversation_id: &str,
        name: &str,
        args: &Value,
    ) -> Result<(CallRecord, ToolResult)> {
        log::info!(target: "event::tool_requested", "conversation={conversation_id} tool={name}");
        let call = Call {
            conversation_id,
            name,
            args,
        };
        let ended = match self.validate(call) {
            Next::Go(valid) => self.through(valid)?,
            Next::End(ended) => ended,
        };
        let recorded = self.record(ended)?;
        Ok((recorded.record, recorded.result))
    }

    /// A call the model wrote that cannot run as written (`runtime::checks`:
    /// an unknown tool, arguments its schema or its bounds refuse): not
    /// judged, not run; its outcome receipt records the attempt as failed,
    /// with `error`.
    pub(super) fn refuse_malformed(
        &self,
        conversation_id: &str,
        name: &str,
        args: &Value,
        error: String,
    ) -> Result<(CallRecord, ToolResult)> {
        log::info!(target: "event::tool_requested", "conversation={conversation_id} tool={name}");
        let call = Call {
            conversation_id,
            name,
            args,
        };
        let recorded = self.record(invalid(call, error))?;
        Ok((recorded.record, recorded.result))
    }

    /// A valid call from the gate to its end, before its outcome receipt.
    fn through<'c>(&self, valid: Valid<'c>) -> Result<Ended<'c>> {
        let judged = self.judge(valid)?;
        let approved = match self.approve(judged)? {
            Next::Go(approved) => approved,
            Next::End(ended) => return Ok(ended),
        };
        let admitted = match self.admit(approved)? {
            Next::Go(admitted) => admitted,
            Next::End(ended) => return Ok(ended),
        };
        let started = self.start(admitted)?;
        Ok(self.ran(self.invoke(started)))
    }

    /// A tool the table knows, with arguments its schema accepts (a tool
    /// not enabled on the channel is the gate's to refuse).
    fn validate<'c>(&'c self, call: Call<'c>) -> Next<'c, Valid<'c>> {
        let Some(tool_name) = ToolName::parse(call.name) else {
            if let Some(ext) = self.external.find(call.name) {
                if let Err(e) = tools::check_schema(call.name, &ext.schema, call.args) {
                    return Next::End(invalid(call, format!("invalid arguments: {e}")));
                }
                return Next::Go(Valid {
                    call,
                    target: Target::External(ext),
                });
            }
            let offered: Vec<&str> = self
                .cfg
                .channels
                .cli
                .tools_allow
                .iter()
                .map(|t| t.as_str())
                .chain(self.external.offered(self.cfg).map(|t| t.name.as_str()))
                .collect();
            let e = format!(
                "unknown tool \"{}\"; the tools on this channel: {}",
                call.name,
                offered.join(", ")
            );
            return Next::End(invalid(call, e));
        };
        let tool = tools::tool(tool_name);
        if let Err(e) = tools::check_args(tool, call.args) {
            return Next::End(invalid(call, format!("invalid arguments: {e}")));
        }
        Next::Go(Valid {
            call,
            target: Target::Builtin(tool_name, tool),
        })
    }

    /// The gate's decision on a call.
    fn decide(&self, call: &Valid<'_>) -> Decision {
        let c = call.call;
        let origin = crate::security::policy::origin_of(c.conversation_id);
        let d = match call.target {
            Target::Builtin(t, _) => self.gate.decide_from(t, c.args, origin),
            Target::External(ext) => self
                .gate
                .decide_external_from(&ext.judged(), c.args, origin),
        };
        // Inside a plan's task: only the tools the task names.
        match self
            .task_tools
            .borrow()
            .iter()
            .find(|(task, _)| task == c.conversation_id)
        {
            Some((task, named)) => self.gate.within_task(d, c.name, task, named),
            None => d,
        }
    }

    /// The cache key of a call whose tool keeps results
    /// (`[tools.NAME] cache_ttl_secs`, read-only tools only) and how long.
    fn cache_key(&self, call: &Valid<'_>, d: &Decision) -> Option<(String, std::time::Duration)> {
        let tool = call.builtin()?;
        let ttl = self.cfg.tools.of(tool).cache_ttl_secs?;
        if !crate::config::CACHEABLE.contains(&tool) || call.takes_effect() {
            return None;
        }
        let key = format!(
            "{}\n{}\n{:?}\n{:?}",
            tool.as_str(),
            call.call.args,
            d.path,
            d.plan
        );
        Some((key, std::time::Duration::from_secs(ttl)))
    }

    fn call_log(&self) -> CallLog<'_> {
        CallLog {
            memory: &self.memory,
            in_run: &self.calls_in_run,
        }
    }

    /// The lock, then the gate's decision. A call over its rate limit is
    /// refused before the operator is asked about it; it is counted only
    /// when it runs (`admit`).
    fn judge<'c>(&self, call: Valid<'c>) -> Result<Judged<'c>> {
        // A sandbox prepared ahead is only ever this call's, made under
        // the lock it holds from here to its child (never one from before
        // a wait for the operator, when other calls may have run).
        self.set_ahead(None);
        let lock = self.tool_lock();
        let d = self.decide(&call);
        // Allowed as it stands: the call keeps the lock through to its
        // start, so its sandbox can be prepared from now on, beside the
        // rest of its admission and its started receipt.
        if lock.is_ok() && matches!(d.verdict, Verdict::Allow) {
            self.prepare_ahead(&call, &d);
        }
        let decision = match d.verdict {
            Verdict::Ask => match self
                .gate
                .rate_limited(call.call.name, &self.call_log(), false)?
            {
                Some(why) => Decision {
                    verdict: Verdict::Deny(crate::security::Refusal::RateLimit),
                    reason: why,
                    ..d
                },
                None => d,
            },
            _ => d,
        };
        Ok(Judged {
            call,
            decision,
            lock,
        })
    }

    /// Allowed by policy, approved earlier (`latchclaw approve`), or asked
    /// about; or the call ends here, denied by policy.
    fn approve<'c>(&self, judged: Judged<'c>) -> Result<Next<'c, Approved<'c>>> {
        let Judged {
            call,
            decision: d,
            lock,
        } = judged;
        let c = call.call;
        let (status, reason) = match d.verdict {
            Verdict::Deny(_) => {
                let result = ToolResult::err(format!("denied by policy: {}", d.reason));
                let reason = d.reason.clone();
                let ended = Ended::early(c, &d, Status::Denied, reason, result, lock.ok());
                return Ok(Next::End(ended));
            }
            Verdict::Allow => (Status::Allowed, d.reason.clone()),
            Verdict::Ask => match self.memory.take_approved(
                c.conversation_id,
                &self.cfg.workspace_dir,
                c.name,
                c.args,
            )? {
                Some(id) => {
                    log::info!(target: "event::tool_approved", "tool={} approval={id}", c.name);
                    let reason = format!("{}; approved by the operator ({id})", d.reason);
                    (Status::Approved, reason)
                }
                None if !self.standing => {
                    drop(lock);
                    return self.ask_operator(call, d);
                }
                None => match self.memory.standing_for(
                    c.conversation_id,
                    &self.cfg.workspace_dir,
                    c.name,
                    &scope_of(&d),
                    d.risk,
                )? {
                    Some(id) => {
                        log::info!(target: "event::tool_approved", "tool={} approval={id}", c.name);
                        let reason = format!(
                            "{}; approved by the operator for this conversation ({id})",
                            d.reason
                        );
                        (Status::Approved, reason)
                    }
                    None => {
                        // Nobody else's call waits on this one's operator.
                        drop(lock);
                        return self.ask_operator(call, d);
                    }
                },
            },
        };
        Ok(Next::Go(Approved {
            call,
            decision: d,
            status,
            reason,
            lock: Lock::Held(lock),
        }))
    }

    /// The operator approves or denies the call; with nobody to ask, it
    /// waits as a pending approval (`latchclaw approve ID`).
    fn ask_operator<'c>(&self, call: Valid<'c>, d: Decision) -> Result<Next<'c, Approved<'c>>> {
        let c = call.call;
        // "Always" only where the operator answers for a conversation at a
        // terminal (`agent`), and only for medium risk.
        let offer = self.standing && d.risk == crate::security::Risk::Medium;
        let preview = preview(call.builtin(), &d, c.args, &self.gate);
        let why =
            match self
                .approver
                .ask(c.name, &d, c.args, preview.as_deref(), offer, &self.control)
            {
                answer @ (Approval::Approved | Approval::Always) => {
                    log::info!(target: "event::tool_approved", "tool={}", c.name);
                    let mut reason = format!("{}; approved by the operator", d.reason);
                    // Only medium risk is offered "always": high risk asks each time.
                    if answer == Approval::Always && offer {
                        let id = self.memory.add_standing(
                            c.conversation_id,
                            &self.cfg.workspace_dir,
                            c.name,
                            &scope_of(&d),
                            d.risk,
                        )?;
                        reason.push_str(&format!(" for this conversation ({id})"));
                    }
                    return Ok(Next::Go(Approved {
                        call,
                        decision: d,
                        status: Status::Approved,
                        reason,
                        lock: Lock::LetGo,
                    }));
                }
                Approval::Denied(why) => {
                    let reason = format!("{}; {why}", d.reason);
                    let result = ToolResult::err(format!("denied: {reason}"));
                    let ended = Ended::early(c, &d, Status::Denied, reason, result, None);
                    return Ok(Next::End(ended));
                }
                Approval::Unavailable(why) => why,
            };
        let id = self.memory.add_pending(
            c.conversation_id,
            &self.cfg.workspace_dir,
            c.name,
            c.args,
            d.risk,
            &d.reason,
        )?;
        // A plan's task goes on when its plan is called again, in the
        // conversation the plan was called from.
        let conversation = match crate::security::policy::origin_of(c.conversation_id) {
            "task" => c
                .conversation_id
                .split("/msg-")
                .next()
                .unwrap_or(c.conversation_id),
            _ => c.conversation_id,
        };
        let then = match &self.rerun {
            Some(cmd) => format!("run `{cmd}` again"),
            None => format!(
                "`latchclaw agent --resume {conversation}{}`",
                self.workspace_flag
            ),
        };
        // The model is not shown the operator's commands: given them, a
        // 1.5B model tried to run them with the shell tool.
        let for_model = format!(
            "not run: it waits for the operator's approval ({}; {why}); \
             nothing happened yet. Tell the user it is waiting for approval; \
             do not try to approve or run it another way.",
            d.reason
        );
        let reason = format!(
            "{}; {why}; waiting as pending approval {id} \
             (`latchclaw approve {id}`, then {then})",
            d.reason
        );
        let result = ToolResult::err(for_model);
        let ended = Ended::early(c, &d, Status::Denied, reason, result, None);
        Ok(Next::End(Ended {
            pending: Some(id),
            ..ended
        }))
    }

    /// The lock held, taken again after the operator was asked, and then
    /// the call decided again, since the files may have changed; and the
    /// call counted against its rate limit (whose refusal is the reason).
    fn admit<'c>(&self, approved: Approved<'c>) -> Result<Next<'c, Admitted<'c>>> {
        let Approved {
            call,
            decision,
            status,
            reason,
            lock,
        } = approved;
        let c = call.call;
        let (lock, relocked) = match lock {
            Lock::Held(lock) => (lock, false),
            Lock::LetGo => {
                self.set_ahead(None);
                (self.tool_lock(), true)
            }
        };
        let lock = lock.map_err(|e| Error::new(Kind::Runtime, e.to_string()))?;
        let fresh = if relocked {
            let fresh = self.decide(&call);
            if matches!(fresh.verdict, Verdict::Deny(_)) || fresh.risk > decision.risk {
                let result = ToolResult::err(format!(
                    "denied by policy: the files changed while the operator was asked: {}",
                    fresh.reason
                ));
                let ended = Ended::early(c, &decision, Status::Denied, reason, result, Some(lock));
                return Ok(Next::End(ended));
            }
            Some(fresh)
        } else {
            None
        };
        if let Some(why) = self.gate.rate_limited(c.name, &self.call_log(), true)? {
            let result = ToolResult::err(format!("denied by policy: {why}"));
            let ended = Ended::early(c, &decision, Status::Denied, why, result, Some(lock));
            return Ok(Next::End(ended));
        }
        Ok(Next::Go(Admitted {
            call,
            decision,
            fresh,
            status,
            reason,
            lock,
        }))
    }

    /// Runs the tool on what the gate resolved, within its time limit, and
    /// redacts the result before the model, the receipts, memory or a log
    /// line sees it.
    fn invoke<'c>(&self, started: Started<'c>) -> Ran<'c> {
        let (admitted, started_id) = started.into_parts();
        let Admitted {
            call,
            decision,
            fresh,
            status,
            reason,
            lock,
        } = admitted;
        // `tool_timeout_secs` (or the tool's own `timeout_secs`) bounds
        // every call; a tool's own timeout (shell, http) and the run's
        // `--timeout` can only cut it shorter.
        let own = match call.target {
            Target::Builtin(..) => None,
            Target::External(ext) => ext.timeout_secs,
        };
        let limit = std::time::Duration::from_secs(
            self.cfg
                .tools
                .of_name(call.call.name)
                .timeout_secs
                .or(own)
                .unwrap_or(self.cfg.tool_timeout_secs),
        );
        let spare = self.spared.borrow().clone();
        // A call of a plan's task ends at the tree's wall clock
        // (`tools.plan.wall_clock_secs`) too: no effect of the tree after it.
        let mut deadline = self.control.until(limit);
        let in_task = self
            .task_tools
            .borrow()
            .iter()
            .any(|(task, _)| task == call.call.conversation_id);
        if in_task && let Some(t) = self.tree.borrow().as_ref() {
            deadline = deadline.min(t.deadline);
        }
        let ctx = ToolCtx {
            cfg: self.cfg,
            gate: &self.gate,
            memory: &self.memory,
            conversation_id: call.call.conversation_id,
            decision: fresh.as_ref().unwrap_or(&decision),
            control: &self.control,
            deadline,
            user: self.approver,
            host: self,
            spare: &spare,
        };
        // A question touches no file: nobody else's call waits while the
        // user thinks. Nor does a plan: each call of its tasks takes the
        // lock for itself.
        let lock = if matches!(call.builtin(), Some(ToolName::AskUser | ToolName::Plan)) {
            drop(lock);
            None
        } else {
            Some(lock)
        };
        // A snippet's own tool calls run while this one holds the lock:
        // they take a duplicate of it (the same open file, already locked)
        // instead of waiting for themselves.
        let nests = call.builtin() == Some(ToolName::CodeRun);
        if nests {
            *self.held_lock.borrow_mut() = lock.as_ref().and_then(|l| l.try_clone().ok());
        }
        let began = Instant::now();
        // The judged call, not the words: the same arguments resolving to
        // another file are another call.
        let cache = self.cache_key(&call, ctx.decision);
        let hit = cache.as_ref().and_then(|(key, ttl)| {
            self.cache
                .borrow()
                .get(key)
                .filter(|(at, _)| at.elapsed() < *ttl)
                .map(|(_, r)| r.clone())
        });
        let cached = hit.is_some();
        let mut result = match (hit, call.target) {
            (Some(r), _) => r,
            (None, Target::Builtin(_, tool)) => tool.invoke(call.call.args, &ctx),
            (None, Target::External(ext)) => match &ext.kind {
                #[cfg(feature = "plugins")]
                crate::external::Kind::Plugin { dir, command } => {
                    crate::plugins::call(ext, dir, command, call.call.args, &ctx)
                }
                #[cfg(feature = "mcp")]
                crate::external::Kind::Mcp { server, tool } => {
                    self.mcp
                        .call(ext, server, tool, call.call.args, &ctx, &self.redactor)
                }
                // The registry of a build without the feature holds none.
                #[allow(unreachable_patterns)]
                _ => ToolResult::err(ext.kind.not_built()),
            },
        };
        if nests {
            *self.held_lock.borrow_mut() = None;
        }
        // A sandbox prepared ahead that the tool did not take (it ended
        // before starting anything) goes with its tmp.
        self.set_ahead(None);
        let redacted = if cached {
            Default::default()
        } else {
            result.redact(&self.redactor)
        };
        if call.takes_effect() {
            // Whatever it did may change what a read would read.
            self.cache.borrow_mut().clear();
        } else if let Some((key, _)) = cache.filter(|_| !cached && result.success) {
            self.cache
                .borrow_mut()
                .insert(key, (Instant::now(), result.clone()));
        }
        result.measure(began.elapsed());
        if let Some(m) = result.measured.as_mut() {
            m.cached = cached;
        }
        if !redacted.is_empty() {
            log::info!(
                target: "event::tool_redacted",
                "tool={} redacted={} ({})",
                call.call.name,
                redacted.total(),
                redacted.summary()
            );
        }
        Ran {
            call,
            decision,
            status,
            reason,
            started_id,
            result,
            lock,
        }
    }

    /// How a call that ran ended. One that failed is reported by its
    /// error: the gate's reason ("low risk under supervised") says why it
    /// was let run, not what went wrong (its started receipt keeps that).
    fn ran<'c>(&self, ran: Ran<'c>) -> Ended<'c> {
        let Ran {
            call,
            decision,
            status,
            reason,
            started_id,
            result,
            lock,
        } = ran;
        let name = call.call.name;
        let (status, reason) = if result.success {
            log::info!(target: "event::tool_completed", "tool={name}");
            // Nobody was asked, so say it happened: a write under `full`
            // leaves a line on stderr (cron mails it, a terminal shows it).
            if status == Status::Allowed
                && call.builtin() == Some(ToolName::FileWrite)
                && self.gate.autonomy() == crate::config::Autonomy::Full
            {
                log::warn!(
                    target: "event::wrote_without_asking",
                    "file_write {} ran without asking (autonomy full)",
                    summarize_args(call.call.args)
                );
            }
            (status, reason)
        } else {
            let error = result.error.as_deref();
            log::info!(target: "event::tool_failed", "tool={name} error={}", error.unwrap_or(""));
            let why = error.unwrap_or("the tool reported a failure");
            (Status::Failed, format!("failed: {why}"))
        };
        Ended {
            call: call.call,
            status,
            risk: decision.risk,
            reason,
            started_id,
            pending: None,
            estop: decision.estop || result.estop,
            result,
            lock,
        }
    }

    /// The outcome receipt of a call (naming its started one, if any) and
    /// the record the user sees; the result carries the receipt's id. The
    /// tool lock, when held, is let go after it.
    fn record(&self, ended: Ended<'_>) -> Result<Recorded> {
        let Ended {
            call,
            status,
            risk,
            mut reason,
            started_id,
            pending,
            estop,
            mut result,
            lock,
        } = ended;
        if status == Status::Denied {
            let line = format!("tool={} risk={} reason={reason}", call.name, risk.as_str());
            if self.cfg.security.audit_log {
                log::warn!(target: "event::tool_denied", "{line}");
            } else {
                log::info!(target: "event::tool_denied", "{line}");
            }
        }
        // Denials and made-up errors quote arguments and gate reasons: short
        // texts, scrubbed here too (a tool's own output already was).
        if let Some(e) = &mut result.error {
            *e = self.redactor.redact(e).into_owned();
        }
        reason = self.redactor.redact(&reason).into_owned();
        // The receipt says that output was redacted, and of what kind; the
        // counts are also in the result it hashes.
        if let Some(kinds) = result
            .metadata
            .as_ref()
            .and_then(|m| m.get("redacted"))
            .and_then(Value::as_object)
        {
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            reason = format!("{reason}; output redacted: {}", kinds.join(", "));
        }
        let result_value = serde_json::to_value(&result).unwrap_or(Value::Null);
        let measured = result.measured.map(|m| m.text());
        let receipt_id = self.append_receipt(&NewReceipt {
            conversation_id: call.conversation_id,
            tool: call.name,
            args: call.args,
            result: Some(&result_value),
            status,
            risk,
            reason: &reason,
            started_id: started_id.as_deref(),
            measured: measured.as_deref(),
        })?;
        drop(lock);
        result.receipt_id = receipt_id.clone();
        // A plan's tree stopped by a budget, or by a task's call that
        // waits for the operator: the calling turn ends as those do.
        let of_plan = |key: &str| match ToolName::parse(call.name) {
            Some(ToolName::Plan) => result
                .metadata
                .as_ref()
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .map(String::from),
            _ => None,
        };
        let budget = of_plan("budget");
        let pending = pending.or_else(|| of_plan("pending_approval"));
        let record = CallRecord {
            tool: call.name.to_string(),
            arguments: call.args.clone(),
            status,
            risk,
            reason,
            receipt_id,
            started_receipt_id: started_id,
            pending_approval: pending,
            budget,
            estop,
        };
        Ok(Recorded { record, result })
    }

    /// Appends a receipt when receipts are on; returns its id.
    fn append_receipt(&self, r: &NewReceipt) -> Result<Option<String>> {
        let Some(log) = &self.receipts else {
            return Ok(None);
        };
        let written = log.append(r)?;
        *self.receipts_head.borrow_mut() = Some(written.receipt_hash);
        Ok(Some(written.id))
    }
}

/// What the operator is shown of a call's effect before it runs: for a
/// `file_write`, the diff against the file the gate resolved.
pub fn preview(
    tool: Option<ToolName>,
    d: &Decision,
    args: &Value,
    gate: &crate::security::Gate,
) -> Option<String> {
    match (tool, &d.path, args.get("content").and_then(Value::as_str)) {
        (Some(ToolName::FileWrite), Some(path), Some(content)) => {
            Some(crate::tools::write_preview(gate, path, content))
        }
        _ => None,
    }
}

/// git's subcommand in a judged argv: the first word that is not a global
/// option or the value of one.
fn git_subcommand(argv: &[String]) -> Option<&str> {
    let mut words = argv.iter().skip(1);
    while let Some(a) = words.next() {
        match a.as_str() {
            "-C" | "-c" | "--namespace" | "--config-env" | "--attr-source" | "--git-dir"
            | "--work-tree" | "--list-cmds" => {
                words.next();
            }
            a if a.starts_with('-') => {}
            a => return Some(a),
        }
    }
    None
}

/// Which calls an "always for this conversation" covers: for a plan, the
/// programs it runs (sorted, by name; git with its subcommand), so
/// approving `touch` does not approve `cp`, nor `git add` `git clean`; for
/// any other tool, every call of it.
pub fn scope_of(d: &crate::security::Decision) -> String {
    let Some(plan) = &d.plan else {
        return String::new();
    };
    let mut names: Vec<String> = plan
        .steps
        .iter()
        .flat_map(|s| &s.commands)
        .filter_map(|c| {
            let name = c.program.file_name()?.to_string_lossy().into_owned();
            // git is many programs: `git add` approved is not `git clean`.
            Some(match (name.as_str(), git_subcommand(&c.argv)) {
                ("git", Some(sub)) => format!("git {sub}"),
                _ => name,
            })
        })
        .collect();
    crate::util::sort::sort(&mut names);
    names.dedup();
    names.join(",")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::{Autonomy, Config};
    use crate::control::RunControl;
    use crate::receipts::ReceiptLog;
    use crate::runtime::run::Approver;
    use crate::tools::{Reply, User};
    use serde_json::json;
    use std::cell::Cell;
    use std::path::{Path, PathBuf};

    /// The operator: answers with `answer`, after checking, when `free` is
    /// set, that nobody holds the tool lock while they are asked.
    struct Operator<'a> {
        answer: &'a dyn Fn() -> Approval,
        asked: Cell<u32>,
        lock_free_when_asked: Cell<Option<bool>>,
        cfg: &'a Config,
    }

    impl Approver for Operator<'_> {
        fn ask(
            &self,
            _: &str,
            _: &Decision,
            _: &Value,
            _: Option<&str>,
            _: bool,
            _: &RunControl,
        ) -> Approval {
            self.asked.set(self.asked.get() + 1);
            let soon = RunControl::new(Some(std::time::Duration::from_millis(20)));
            self.lock_free_when_asked
                .set(Some(tool_lock(self.cfg, &soon).is_ok()));
            (self.answer)()
        }
    }

    impl User for Operator<'_> {
        fn ask_user(&self, _: &str, _: &RunControl, _: Instant) -> Reply {
            Reply::NoUser
        }
    }

    fn config(name: &str, autonomy: Autonomy) -> (Config, PathBuf) {
        let dir = std::env::temp_dir().join(format!("lc-call-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ws = dir.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut cfg = Config::defaults(dir.join("config.toml"), dir.join("state"));
        cfg.workspace_dir = ws.clone();
        cfg.security.autonomy = autonomy;
        cfg.channels.cli.tools_allow = ToolName::ALL.to_vec();
        (cfg, ws)
    }

    fn operator<'a>(cfg: &'a Config, answer: &'a dyn Fn() -> Approval) -> Operator<'a> {
        Operator {
            answer,
            asked: Cell::new(0),
            lock_free_when_asked: Cell::new(None),
            cfg,
        }
    }

    fn receipts(cfg: &Config) -> Vec<Value> {
        ReceiptLog::open(&cfg.receipts.path, &cfg.receipt_key_path())
            .list()
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    fn write(rt: &Runtime, path: &str) -> Result<(CallRecord, ToolResult)> {
        let args = json!({"path": path, "content": "hello"});
        rt.execute_tool("conv-test", "file_write", &args)
    }

    fn exists(ws: &Path, name: &str) -> bool {
        ws.join(name).exists()
    }

    #[test]
    fn a_denied_call_writes_one_receipt_and_never_runs() {
        let (cfg, ws) = config("denied", Autonomy::ReadOnly);
        let answer = || Approval::Approved;
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        let (record, result) = write(&rt, "a.txt").unwrap();
        assert_eq!(record.status, Status::Denied);
        assert!(record.started_receipt_id.is_none());
        assert!(!result.success && result.error.unwrap().starts_with("denied by policy: "));
        assert!(!exists(&ws, "a.txt"), "the tool ran");
        assert_eq!(op.asked.get(), 0);
        let r = receipts(&cfg);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0]["status"], "denied");
        assert_eq!(r[0]["id"].as_str(), record.receipt_id.as_deref());
        assert!(r[0].get("started_id").is_none());
    }

    #[test]
    fn an_allowed_effectful_call_writes_started_then_an_outcome_naming_it() {
        let (cfg, ws) = config("allowed", Autonomy::Full);
        let answer = || Approval::Denied("no".into());
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        let (record, result) = write(&rt, "a.txt").unwrap();
        assert!(result.success, "{result:?}");
        assert_eq!(record.status, Status::Allowed);
        assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "hello");
        let r = receipts(&cfg);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(
            (r[0]["status"].as_str(), r[1]["status"].as_str()),
            (Some("started"), Some("allowed"))
        );
        assert_eq!(r[1]["started_id"], r[0]["id"]);
        assert_eq!(record.started_receipt_id.as_deref(), r[0]["id"].as_str());
        assert_eq!(record.receipt_id.as_deref(), r[1]["id"].as_str());
        assert_eq!(result.receipt_id, record.receipt_id);
        assert_eq!(op.asked.get(), 0);
    }

    #[test]
    fn a_call_whose_started_receipt_cannot_be_written_does_not_run() {
        let (mut cfg, ws) = config("unwritable", Autonomy::Full);
        // The log's directory is a regular file: no one, root included,
        // can create the log.
        let blocker = ws.parent().unwrap().join("blocker");
        std::fs::write(&blocker, "").unwrap();
        cfg.receipts.path = blocker.join("tool_receipts.log");
        let answer = || Approval::Approved;
        let op = operator(&cfg, &answer);
        let rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        assert!(write(&rt, "a.txt").is_err());
        assert!(!exists(&ws, "a.txt"), "the tool ran without its receipt");
        assert!(rt.receipts_head().is_none());
    }

    #[test]
    fn the_operator_is_asked_without_the_lock_and_an_approval_runs_the_call() {
        let (cfg, ws) = config("approved", Autonomy::Supervised);
        let answer = || Approval::Approved;
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        let (record, result) = write(&rt, "a.txt").unwrap();
        assert!(result.success, "{result:?}");
        assert_eq!(op.asked.get(), 1);
        assert_eq!(op.lock_free_when_asked.get(), Some(true));
        assert_eq!(record.status, Status::Approved);
        assert!(
            record.reason.ends_with("; approved by the operator"),
            "{}",
            record.reason
        );
        assert!(exists(&ws, "a.txt"));
        let r = receipts(&cfg);
        let statuses: Vec<_> = r.iter().map(|r| r["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["started", "approved"]);
        assert_eq!(r[1]["started_id"], r[0]["id"]);
    }

    #[test]
    fn a_call_is_decided_again_after_the_operator_approved_it() {
        let (cfg, ws) = config("changed", Autonomy::Supervised);
        // While the operator is asked, the emergency stop is engaged: the
        // call, decided again under the lock, is refused.
        let estop = cfg.estop_path();
        let answer = || {
            std::fs::write(&estop, "").unwrap();
            Approval::Approved
        };
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        let (record, result) = write(&rt, "a.txt").unwrap();
        assert_eq!(record.status, Status::Denied);
        let error = result.error.unwrap();
        assert!(
            error.starts_with("denied by policy: the files changed while the operator was asked: "),
            "{error}"
        );
        assert!(!exists(&ws, "a.txt"), "the tool ran");
        let r = receipts(&cfg);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0]["status"], "denied");
    }

    #[test]
    fn a_call_the_operator_denies_or_cannot_answer_does_not_run() {
        let (cfg, ws) = config("refused", Autonomy::Supervised);
        let answer = || Approval::Denied("denied by the operator".into());
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        let (record, result) = write(&rt, "a.txt").unwrap();
        assert_eq!(record.status, Status::Denied);
        assert!(
            record.reason.ends_with("; denied by the operator"),
            "{}",
            record.reason
        );
        assert!(result.error.unwrap().starts_with("denied: "));
        assert!(record.pending_approval.is_none());

        let answer = || Approval::Unavailable("no terminal".into());
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        let (record, result) = write(&rt, "a.txt").unwrap();
        assert_eq!(record.status, Status::Denied);
        let id = record.pending_approval.expect("a pending approval");
        assert!(
            record
                .reason
                .contains(&format!("waiting as pending approval {id}"))
        );
        assert!(result.error.unwrap().starts_with("not run: it waits"));
        assert!(!exists(&ws, "a.txt"), "the tool ran");
        let r = receipts(&cfg);
        let statuses: Vec<_> = r.iter().map(|r| r["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["denied", "denied"]);
    }

    #[test]
    fn a_call_over_its_rate_limit_is_refused_when_it_would_run() {
        let (mut cfg, ws) = config("rate", Autonomy::Full);
        let mut limited = crate::config::Middleware::default();
        limited.rate_limit.per_minute = Some(1);
        cfg.tools.middleware.insert(ToolName::FileWrite, limited);
        let answer = || Approval::Approved;
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        assert!(write(&rt, "a.txt").unwrap().1.success);
        let (record, result) = write(&rt, "b.txt").unwrap();
        assert_eq!(record.status, Status::Denied);
        assert_eq!(
            result.error.unwrap(),
            format!("denied by policy: {}", record.reason)
        );
        assert!(!exists(&ws, "b.txt"), "the tool ran");
        let r = receipts(&cfg);
        let statuses: Vec<_> = r.iter().map(|r| r["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["started", "allowed", "denied"]);
    }

    #[test]
    fn a_call_naming_no_tool_fails_unjudged_with_one_receipt() {
        let (cfg, _) = config("unknown", Autonomy::Full);
        let answer = || Approval::Approved;
        let op = operator(&cfg, &answer);
        let mut rt = Runtime::new(&cfg, &op, Default::default()).unwrap();
        rt.prepare_receipts();
        let (record, result) = rt.execute_tool("conv-test", "nope", &json!({})).unwrap();
        assert_eq!((record.status, record.risk), (Status::Failed, Risk::Low));
        assert!(result.error.unwrap().starts_with("unknown tool \"nope\""));
        let r = receipts(&cfg);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0]["status"], "failed");
    }
}
