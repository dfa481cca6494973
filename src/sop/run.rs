//! One SOP run: each step marked `started` in SQLite before its effect and
//! its outcome after; tool steps through `Runtime::execute_tool` (the
//! gate decides, approvals, receipts: the started receipt's conversation
//! names the SOP, its hash, the run and the step); agent steps as one
//! agent turn; approval steps asked at a terminal or parked. A leaf of
//! `sop`.

use super::format::{Kind, OnFailure, Sop, Step, template_refs};
use crate::config::Config;
use crate::control::{RunControl, Stop};
use crate::error::{Error, Kind as ErrKind, Outcome, Result};
use crate::memory::ApprovalStatus;
use crate::memory::sop_runs::{RunStatus, SopRun, StepState};
use crate::providers::Provider;
use crate::runtime::{Approval, Approver, NoProgress, Runtime};
use serde_json::{Value, json};
use std::time::Duration;

/// The person an approval step asks: `Unavailable` when nobody is there
/// (cron), and the run parks.
pub trait Operator {
    fn confirm(&self, sop: &str, step: &str, prompt: &str, control: &RunControl) -> Approval;
}

/// What the operator said about a step cut off mid-effect.
#[derive(Debug, Default, Clone)]
pub struct Resume {
    pub retry_step: Option<String>,
    pub skip_step: Option<String>,
}

/// How a run (or this part of it) ended.
#[derive(Debug)]
pub struct Report {
    pub run: SopRun,
    pub outcome: Outcome,
    /// What happened, and what to do next.
    pub message: String,
}

/// The conversation a step's tool calls are made in (and their receipts
/// carry): the SOP's name, the first 16 hex of its hash, the run, the step.
pub fn conversation_id(sop: &str, hash: &str, run: &str, step: &str) -> String {
    format!("sop:{sop}:{}:{run}:{step}", &hash[..hash.len().min(16)])
}

pub fn new_run_id() -> String {
    crate::util::new_id("sop")
}

/// The run a step's conversation belongs to.
pub fn run_of_conversation(conv: &str) -> Option<&str> {
    let rest = conv.strip_prefix("sop:")?;
    let parts: Vec<&str> = rest.split(':').collect();
    (parts.len() == 4).then_some(parts[2])
}

/// `<state>/sops/runs/RUN.lock`, held while a run moves: a second
/// `sop resume` of it is refused at once (exit 8), never queued.
pub fn run_lock(cfg: &Config, run: &str) -> Result<std::fs::File> {
    crate::util::lock_or_refuse(
        &cfg.state_dir.join("sops").join("runs"),
        &format!("{run}.lock"),
        |_| format!("another latchclaw is running SOP run {run}; not starting"),
    )
}

/// What one attempt of a step came to.
enum End {
    Done(String),
    /// `refused`: the gate or the operator said no (no retry).
    Failed {
        error: String,
        refused: bool,
    },
    /// Waits for approval `id`.
    Parked(String),
    /// `ran`: the step may have taken effect (else it is pending again).
    Stopped(Outcome, String, bool),
}

pub struct Runner<'r, 'a> {
    pub rt: &'r Runtime<'a>,
    pub approver: &'r dyn Approver,
    pub operator: &'r dyn Operator,
    pub provider: &'r dyn Provider,
}

impl Runner<'_, '_> {
    /// A new run `id` (`new_run_id`) of `sop`: its state written, then
    /// its steps from the first.
    pub fn start(&self, sop: &Sop, id: &str) -> Result<Report> {
        let lock = run_lock(self.rt.cfg, id)?;
        let steps: Vec<(&str, &str)> = sop
            .steps
            .iter()
            .map(|s| (s.id.as_str(), s.kind.as_str()))
            .collect();
        self.rt.memory.sop_run_create(
            id,
            &sop.name,
            &sop.path.to_string_lossy(),
            &sop.hash,
            &self.rt.cfg.workspace_dir.to_string_lossy(),
            &steps,
        )?;
        fault("created", "run");
        let report = self
            .load(id)
            .and_then(|state| self.drive(sop, state, &Resume::default()));
        drop(lock);
        report
    }

    /// Continues run `id` (its lock held by the caller's `run_lock`).
    pub fn resume(&self, sop: &Sop, id: &str, how: &Resume) -> Result<Report> {
        let run = self.load(id)?;
        if run.sop_hash != sop.hash {
            return Ok(Report {
                message: changed(&run, sop),
                run,
                outcome: Outcome::Refused,
            });
        }
        for (flag, named) in [
            ("--retry-step", &how.retry_step),
            ("--skip-step", &how.skip_step),
        ] {
            if let Some(step) = named {
                match run.steps.iter().find(|s| &s.id == step) {
                    Some(s) if matches!(s.state, StepState::Unknown | StepState::Started) => {}
                    Some(s) => {
                        return Err(Error::usage(format!(
                            "{flag}: step \"{step}\" is {}, not unknown; only a step cut off \
                             mid-effect is retried or skipped",
                            s.state.as_str()
                        )));
                    }
                    None => {
                        return Err(Error::usage(format!(
                            "{flag}: run {id} has no step \"{}\"",
                            crate::util::printable(step)
                        )));
                    }
                }
            }
        }
        if run.status.finished() {
            let outcome = outcome_of(run.status);
            return Ok(Report {
                message: format!("run {id} is already {}", run.status.as_str()),
                run,
                outcome,
            });
        }
        self.rt
            .memory
            .sop_run_status(id, RunStatus::Running, None)?;
        self.drive(sop, run, how)
    }

    fn load(&self, id: &str) -> Result<SopRun> {
        self.rt.memory.sop_run(id)?.ok_or_else(|| {
            Error::usage(format!(
                "no SOP run \"{}\"; `latchclaw sop runs` lists them",
                crate::util::printable(id)
            ))
        })
    }

    /// The steps from the first not done, until the run ends or parks.
    fn drive(&self, sop: &Sop, state: SopRun, how: &Resume) -> Result<Report> {
        let mem = &self.rt.memory;
        let id = state.id.as_str();
        if state.steps.len() != sop.steps.len() {
            return Err(Error::new(
                ErrKind::Integrity,
                format!(
                    "run {id} has {} steps, its SOP {}",
                    state.steps.len(),
                    sop.steps.len()
                ),
            ));
        }
        let mut outputs: Vec<(String, String)> = state
            .steps
            .iter()
            .filter(|s| s.state == StepState::Done)
            .map(|s| (s.id.clone(), s.output.clone().unwrap_or_default()))
            .collect();
        for (i, step) in sop.steps.iter().enumerate() {
            let stored = &state.steps[i];
            match stored.state {
                StepState::Done | StepState::Skipped | StepState::Failed => continue,
                StepState::Started | StepState::Unknown => {
                    if how.skip_step.as_deref() == Some(&step.id) {
                        mem.sop_step_set(
                            id,
                            i,
                            StepState::Skipped,
                            None,
                            Some("skipped by the operator after it was cut off"),
                            None,
                        )?;
                        continue;
                    }
                    let again = how.retry_step.as_deref() == Some(&step.id)
                        || step.idempotent
                        || step.read_only(self.rt.cfg);
                    if !again {
                        let why = format!(
                            "step \"{step}\" was cut off mid-effect (latchclaw was killed or \
                             stopped): its effect may or may not have happened; check \
                             `latchclaw receipt list` for conversation {conv}, then \
                             `latchclaw sop resume {id} --retry-step {step}` or `--skip-step {step}`",
                            step = step.id,
                            conv = conversation_id(&sop.name, &sop.hash, id, &step.id),
                        );
                        mem.sop_step_set(id, i, StepState::Unknown, None, Some(&why), None)?;
                        mem.sop_run_status(id, RunStatus::WaitingOperator, Some(&why))?;
                        return self.report(id, Outcome::Refused, why);
                    }
                }
                StepState::WaitingApproval => {
                    let approval = stored
                        .approval_id
                        .as_deref()
                        .map(|a| mem.approval(a))
                        .transpose()?
                        .flatten();
                    let Some(a) = approval else {
                        return Err(Error::new(
                            ErrKind::Integrity,
                            format!(
                                "run {id}: step \"{}\" waits on an approval that is gone",
                                step.id
                            ),
                        ));
                    };
                    match a.status {
                        ApprovalStatus::Pending => {
                            let why = parked_message(id, &step.id, &a.id);
                            mem.sop_run_status(id, RunStatus::WaitingApproval, Some(&why))?;
                            return self.report(id, Outcome::Refused, why);
                        }
                        ApprovalStatus::Denied => {
                            let why =
                                format!("step \"{}\": denied by the operator ({})", step.id, a.id);
                            mem.sop_step_set(id, i, StepState::Failed, None, Some(&why), None)?;
                            mem.sop_run_status(id, RunStatus::Denied, Some(&why))?;
                            return self.report(id, Outcome::Refused, why);
                        }
                        ApprovalStatus::Approved | ApprovalStatus::Used => {
                            if let Kind::Approval { .. } = step.kind {
                                let out = format!("approved by the operator ({})", a.id);
                                mem.sop_step_set(id, i, StepState::Done, Some(&out), None, None)?;
                                outputs.push((step.id.clone(), out));
                                continue;
                            }
                            // A tool step: it runs now, taking the approval once.
                        }
                    }
                }
                StepState::Pending => {}
            }
            if let Some(stop) = self.rt.control.stop() {
                return self.stopped(id, stop_outcome(stop), self.rt.control.why(stop));
            }
            match self.step(sop, id, i, step, &outputs)? {
                End::Done(out) => outputs.push((step.id.clone(), out)),
                End::Parked(approval) => {
                    let why = parked_message(id, &step.id, &approval);
                    mem.sop_step_set(
                        id,
                        i,
                        StepState::WaitingApproval,
                        None,
                        None,
                        Some(&approval),
                    )?;
                    mem.sop_run_status(id, RunStatus::WaitingApproval, Some(&why))?;
                    return self.report(id, Outcome::Refused, why);
                }
                End::Stopped(outcome, why, ran) => {
                    // Cut off by the run's control: a step that may have
                    // taken effect is unknown; one that never ran, pending.
                    let state = if ran {
                        StepState::Unknown
                    } else {
                        StepState::Pending
                    };
                    mem.sop_step_set(id, i, state, None, Some(&why), None)?;
                    return self.stopped(id, outcome, why);
                }
                End::Failed { error, refused } => {
                    mem.sop_step_set(id, i, StepState::Failed, None, Some(&error), None)?;
                    if step.on_failure == OnFailure::Continue {
                        continue;
                    }
                    let why = format!("step \"{}\" failed: {error}", step.id);
                    let (status, outcome) = if refused {
                        (RunStatus::Denied, Outcome::Refused)
                    } else {
                        (RunStatus::Failed, Outcome::Failed(ErrKind::Runtime))
                    };
                    mem.sop_run_status(id, status, Some(&why))?;
                    return self.report(id, outcome, why);
                }
            }
        }
        mem.sop_run_status(id, RunStatus::Completed, None)?;
        self.report(id, Outcome::Completed, format!("run {id} completed"))
    }

    fn stopped(&self, id: &str, outcome: Outcome, why: String) -> Result<Report> {
        let why = format!("{why}; `latchclaw sop resume {id}` continues it");
        self.rt
            .memory
            .sop_run_status(id, RunStatus::Stopped, Some(&why))?;
        self.report(id, outcome, why)
    }

    fn report(&self, id: &str, outcome: Outcome, message: String) -> Result<Report> {
        Ok(Report {
            run: self.load(id)?,
            outcome,
            message,
        })
    }

    /// One step, with its retries: `started` committed before each attempt.
    fn step(
        &self,
        sop: &Sop,
        id: &str,
        i: usize,
        step: &Step,
        outputs: &[(String, String)],
    ) -> Result<End> {
        let mut attempt: u64 = 0;
        loop {
            attempt += 1;
            self.rt.memory.sop_step_started(id, i)?;
            fault("started", &step.id);
            // What is stored and read by later steps, with no secret in
            // it (a tool's result is already; an agent's answer, an error).
            let attempted = self.attempt(sop, id, step, outputs)?;
            fault("ran", &step.id);
            let end = match attempted {
                End::Done(o) => End::Done(self.rt.redactor.redact(&o).into_owned()),
                End::Failed { error, refused } => End::Failed {
                    error: self.rt.redactor.redact(&error).into_owned(),
                    refused,
                },
                other => other,
            };
            if let End::Done(out) = &end {
                self.rt
                    .memory
                    .sop_step_set(id, i, StepState::Done, Some(out), None, None)?;
                fault("done", &step.id);
            }
            match (&end, step.on_failure) {
                (
                    End::Failed { refused: false, .. },
                    OnFailure::Retry {
                        retries,
                        backoff_secs,
                    },
                ) if attempt <= retries => {
                    let wait = backoff_secs.saturating_mul(1 << (attempt - 1).min(10));
                    if let Some(stop) = self.pause(Duration::from_secs(wait)) {
                        // The failed attempt's outcome is known: it runs again.
                        return Ok(End::Stopped(
                            stop_outcome(stop),
                            self.rt.control.why(stop),
                            false,
                        ));
                    }
                }
                _ => return Ok(end),
            }
        }
    }

    /// Sleeps, unless the run is stopped first (then says why).
    fn pause(&self, d: Duration) -> Option<Stop> {
        let until = std::time::Instant::now() + d;
        while std::time::Instant::now() < until {
            if let Some(stop) = self.rt.control.stop() {
                return Some(stop);
            }
            std::thread::sleep(Duration::from_millis(20).min(d));
        }
        self.rt.control.stop()
    }

    fn attempt(
        &self,
        sop: &Sop,
        id: &str,
        step: &Step,
        outputs: &[(String, String)],
    ) -> Result<End> {
        let conv = conversation_id(&sop.name, &sop.hash, id, &step.id);
        match &step.kind {
            Kind::Tool { tool, args, until } => {
                let args = resolve(args, outputs);
                let mut tries = 0;
                loop {
                    tries += 1;
                    let (record, result) = self.rt.execute_tool(&conv, tool.as_str(), &args)?;
                    if let Some(a) = record.pending_approval {
                        return Ok(End::Parked(a));
                    }
                    // A call refused or killed by the emergency stop, or cut
                    // off by the run's control: it may have taken effect
                    // when its started receipt was written.
                    let ran = record.started_receipt_id.is_some();
                    if !result.success && (record.estop || result.estop) {
                        return Ok(End::Stopped(
                            Outcome::Estop,
                            format!("the emergency stop: {}", record.reason),
                            ran,
                        ));
                    }
                    if !result.success
                        && let Some(stop) = self.rt.control.stop()
                    {
                        return Ok(End::Stopped(
                            stop_outcome(stop),
                            self.rt.control.why(stop),
                            ran,
                        ));
                    }
                    if !result.success {
                        let refused = record.status == crate::receipts::Status::Denied;
                        let error = result.error.unwrap_or(record.reason);
                        return Ok(End::Failed { error, refused });
                    }
                    let Some(u) = until else {
                        return Ok(End::Done(result.output));
                    };
                    if result.output.contains(&u.contains) {
                        return Ok(End::Done(result.output));
                    }
                    if tries >= u.max_attempts {
                        return Ok(End::Failed {
                            error: format!(
                                "until: the output did not hold \"{}\" after {tries} attempts",
                                u.contains
                            ),
                            refused: false,
                        });
                    }
                    if let Some(stop) = self.pause(Duration::from_secs(u.interval_secs)) {
                        return Ok(End::Stopped(
                            stop_outcome(stop),
                            self.rt.control.why(stop),
                            false,
                        ));
                    }
                }
            }
            Kind::Agent {
                prompt,
                inputs,
                max_tool_rounds,
            } => {
                let mut message = prompt.clone();
                for name in inputs {
                    if let Some((_, out)) = outputs.iter().rev().find(|(s, _)| s == name) {
                        // Fenced as data (as piped stdin is): nothing in it can
                        // end the fence.
                        message.push_str(&format!(
                            "\n\nThe output of step \"{name}\":\n{}",
                            crate::util::fenced(out)
                        ));
                    }
                }
                let own;
                let rt_own;
                let rt = match max_tool_rounds {
                    Some(n) if *n != self.rt.cfg.max_tool_rounds => {
                        own = Config {
                            max_tool_rounds: *n,
                            ..self.rt.cfg.clone()
                        };
                        let mut r = Runtime::new(
                            &own,
                            self.approver,
                            std::sync::Arc::clone(&self.rt.redactor),
                        )?;
                        r.prepare_receipts();
                        // Cancelled with the run, by its deadline too.
                        let left = self
                            .rt
                            .control
                            .deadline()
                            .map(|d| d.saturating_duration_since(std::time::Instant::now()));
                        r.control = self.rt.control.child(left);
                        r.recall = false;
                        rt_own = r;
                        &rt_own
                    }
                    _ => self.rt,
                };
                let o = rt.agent_turn_with(self.provider, None, &message, &NoProgress)?;
                let outcome = o.outcome();
                match outcome {
                    Outcome::Completed => Ok(End::Done(o.answer)),
                    Outcome::Estop | Outcome::Timeout | Outcome::Cancelled | Outcome::Signal(_) => {
                        // Its calls that wrote a started receipt may have
                        // taken effect; a turn with none changed nothing.
                        let ran = o.tool_calls.iter().any(|c| c.started_receipt_id.is_some());
                        Ok(End::Stopped(
                            outcome,
                            format!("the agent turn: {}", outcome.reason()),
                            ran,
                        ))
                    }
                    Outcome::Refused => Ok(End::Failed {
                        error: "the agent turn had a tool call refused or waiting for approval"
                            .into(),
                        refused: true,
                    }),
                    other => Ok(End::Failed {
                        error: format!("the agent turn ended with {}", other.reason()),
                        refused: false,
                    }),
                }
            }
            Kind::Approval { prompt } => {
                match self
                    .operator
                    .confirm(&sop.name, &step.id, prompt, &self.rt.control)
                {
                    Approval::Approved | Approval::Always => {
                        Ok(End::Done("approved by the operator".into()))
                    }
                    Approval::Denied(why) => Ok(End::Failed {
                        error: why,
                        refused: true,
                    }),
                    Approval::Unavailable(why) => {
                        let args = json!({
                            "sop": sop.name,
                            "step": step.id,
                            "run": id,
                            "sop_hash": sop.hash,
                            "prompt": prompt,
                        });
                        let a = self.rt.memory.add_pending(
                            &conv,
                            &self.rt.cfg.workspace_dir,
                            "sop_approval",
                            &args,
                            crate::security::Risk::Medium,
                            &format!("SOP {} step {}: {prompt} ({why})", sop.name, step.id)
                                .replace("): denied)", "))"),
                        )?;
                        Ok(End::Parked(a))
                    }
                }
            }
        }
    }
}

/// Debug builds (the tests' binary) only: `LATCHCLAW_TEST_KILL=POINT:STEP`
/// SIGKILLs this process at that point — `created:run` (the run's state
/// written, no step started), `started:ID` (the step marked started, its
/// tool not yet called), `ran:ID` (its tool call ended, receipts written,
/// the step not yet marked done), `done:ID` (marked done, the next step
/// not started) — the exact boundaries a kill from outside cannot time.
fn fault(point: &str, step: &str) {
    if cfg!(debug_assertions)
        && std::env::var("LATCHCLAW_TEST_KILL").is_ok_and(|v| {
            v.split_once(':')
                .is_some_and(|(p, s)| p == point && s == step)
        })
    {
        let _ = crate::sys::process::kill(std::process::id() as i32);
    }
}

fn parked_message(run: &str, step: &str, approval: &str) -> String {
    format!(
        "step \"{step}\" waits for the operator's approval {approval}: `latchclaw sop approve \
         {run}` (or `sop deny {run}`), then `latchclaw sop resume {run}`"
    )
}

fn changed(run: &SopRun, sop: &Sop) -> String {
    format!(
        "refused: SOP \"{}\" changed since run {} started (its hash was {}…, the file {} is now \
         {}…); the run and its approvals are bound to the old file. Start a new run with \
         `latchclaw sop run {0}`",
        sop.name,
        run.id,
        &run.sop_hash[..run.sop_hash.len().min(16)],
        sop.path.display(),
        &sop.hash[..16.min(sop.hash.len())]
    )
}

/// The exit of a run already finished, for a repeated `sop resume`.
fn outcome_of(status: RunStatus) -> Outcome {
    match status {
        RunStatus::Completed => Outcome::Completed,
        RunStatus::Failed => Outcome::Failed(ErrKind::Runtime),
        RunStatus::Stopped | RunStatus::Running => Outcome::Failed(ErrKind::Runtime),
        RunStatus::Denied | RunStatus::WaitingApproval | RunStatus::WaitingOperator => {
            Outcome::Refused
        }
    }
}

fn stop_outcome(stop: Stop) -> Outcome {
    match stop {
        Stop::Cancelled => Outcome::Cancelled,
        Stop::Timeout => Outcome::Timeout,
    }
}

/// A tool step's arguments with earlier outputs filled in:
/// `content_from = "ID"` becomes `content`, `{{steps.ID.output}}` in any
/// string its output.
pub fn resolve(args: &Value, outputs: &[(String, String)]) -> Value {
    let out = |id: &str| {
        outputs
            .iter()
            .rev()
            .find(|(s, _)| s == id)
            .map(|(_, o)| o.clone())
            .unwrap_or_default()
    };
    fn fill(v: &Value, out: &dyn Fn(&str) -> String) -> Value {
        match v {
            Value::String(s) => {
                let mut s = s.clone();
                for r in template_refs(&s.clone()) {
                    s = s.replace(&format!("{{{{steps.{r}.output}}}}"), &out(&r));
                }
                Value::String(s)
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| fill(x, out)).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, x)| (k.clone(), fill(x, out))).collect())
            }
            other => other.clone(),
        }
    }
    let mut v = fill(args, &out);
    if let Some(o) = v.as_object_mut()
        && let Some(Value::String(from)) = o.remove("content_from")
    {
        o.insert("content".into(), Value::String(out(&from)));
    }
    v
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn arguments_take_earlier_outputs() {
        let outs = vec![
            ("a".to_string(), "A1".to_string()),
            ("b".into(), "B".into()),
        ];
        let v = resolve(
            &json!({"path": "{{steps.a.output}}.txt", "content_from": "b", "n": 3,
                    "l": ["x {{steps.b.output}}"]}),
            &outs,
        );
        assert_eq!(
            v,
            json!({"path": "A1.txt", "content": "B", "n": 3, "l": ["x B"]})
        );
    }

    #[test]
    fn a_conversation_names_its_run() {
        let c = conversation_id("daily", &"ab".repeat(32), "sop-1", "write");
        assert_eq!(c, format!("sop:daily:{}:sop-1:write", "ab".repeat(8)));
        assert_eq!(run_of_conversation(&c), Some("sop-1"));
        assert_eq!(run_of_conversation("conv-1"), None);
    }
}
