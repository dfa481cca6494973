//! `sop list | validate | run | resume | approve | deny | runs | show`.
//! With `--json`, one compact object (or array) on stdout however a run
//! ends; the exit code is an agent run's (README: exit codes).

use crate::cli::approve::TtyApprover;
use crate::cli::ctx::{Ctx, print_json, table};
use crate::config::Config;
use crate::control::RunControl;
use crate::error::{Error, Kind, Outcome, Result, exit};
use crate::memory::sop_runs::{RunStatus, SopRun, StepState};
use crate::runtime::Runtime;
use crate::sop::{Report, Resume, Runner};
use crate::util::one_line;
use serde_json::{Value, json};
use std::sync::Arc;

/// The version of the `--json` objects of `sop run` and `sop resume`.
pub const SCHEMA: u32 = 1;

#[derive(Debug, Default)]
pub struct Opts {
    pub json: bool,
    pub lock: Option<String>,
    pub timeout: Option<u64>,
    pub retry_step: Option<String>,
    pub skip_step: Option<String>,
}

/// The config with this run's workspace, as `tool run` chooses it.
fn config_here(ctx: &Ctx, workspace: Option<&std::path::Path>) -> Result<Config> {
    let mut cfg = ctx.load_config()?;
    crate::cli::workspace::choose(&mut cfg, workspace)?;
    Ok(cfg)
}

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = config_here(ctx, None)?;
    let rows: Vec<Value> = crate::sop::found(&cfg)
        .iter()
        .map(|f| match crate::sop::check(&cfg, f) {
            Ok(s) => json!({
                "name": s.name, "valid": true, "steps": s.steps.len(),
                "description": s.description, "version": s.version,
                "path": f.path.display().to_string(), "hash": s.hash,
            }),
            Err(errors) => json!({
                "name": f.name, "valid": false, "errors": errors,
                "path": f.path.display().to_string(),
            }),
        })
        .collect();
    if json {
        print_json(&rows);
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        eprintln!(
            "no SOPs; write one in {}/NAME/SOP.toml or {}/NAME/SOP.toml",
            cfg.workspace_dir.join("sops").display(),
            cfg.state_dir.join("sops").display()
        );
        return Ok(exit::OK);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r["name"].as_str().unwrap_or("").to_string(),
                r["steps"].as_u64().map_or("-".into(), |n| n.to_string()),
                if r["valid"] == true { "yes" } else { "no" }.into(),
                one_line(r["description"].as_str().unwrap_or(""), 60),
                r["path"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["SOP", "STEPS", "VALID", "DESCRIPTION", "FILE"],
            &cells,
            &[1]
        )
    );
    Ok(exit::OK)
}

pub fn validate(ctx: &Ctx, name: Option<&str>, json: bool) -> Result<i32> {
    let cfg = config_here(ctx, None)?;
    let mut found = crate::sop::found(&cfg);
    if let Some(n) = name {
        if !found.iter().any(|f| f.name == n) {
            // The "no SOP" error with its suggestion.
            crate::sop::load(&cfg, n)?;
        }
        found.retain(|f| f.name == n);
    }
    let mut errors = Vec::new();
    let mut ok = Vec::new();
    for f in &found {
        match crate::sop::check(&cfg, f) {
            Ok(s) => ok.push(s.name),
            Err(e) => errors.extend(e),
        }
    }
    if json {
        print_json(&json!({"valid": ok, "errors": errors}));
    } else {
        for e in &errors {
            eprintln!("latchclaw: error: {e}");
        }
        for n in &ok {
            println!("{n}: valid");
        }
        if found.is_empty() {
            eprintln!("no SOPs to check");
        }
    }
    if errors.is_empty() {
        Ok(exit::OK)
    } else {
        if !json {
            eprintln!(
                "latchclaw: {} error{} in SOP files",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
        }
        Ok(exit::USAGE)
    }
}

/// A run's ending: `--json`'s object or lines, the exit code. A signal
/// other than Ctrl-C ends it as the agent's does (128 + N).
fn finish(rt: &Runtime, report: Result<Report>, run_id: &str, json: bool) -> Result<i32> {
    if let Err(e) = rt.anchor_head() {
        eprintln!("latchclaw: {e}");
    }
    let report = match report {
        Ok(r) => r,
        Err(e) if json => {
            let msg = rt.redactor.redact(&e.msg).into_owned();
            let outcome = Outcome::Failed(e.kind);
            print_json(&json!({
                "schema": SCHEMA, "run_id": run_id, "exit_code": outcome.code(),
                "exit_reason": outcome.reason(), "error": msg,
            }));
            return Ok(outcome.code());
        }
        Err(e) => return Err(e),
    };
    let mut outcome = report.outcome;
    let signal = rt.control.signal();
    if signal != 0 && signal != libc::SIGINT && outcome == Outcome::Cancelled {
        outcome = Outcome::Signal(signal);
    }
    if json {
        let mut v = run_value(&report.run);
        v["schema"] = SCHEMA.into();
        v["exit_code"] = outcome.code().into();
        v["exit_reason"] = outcome.reason().into();
        v["message"] = report.message.clone().into();
        if let Some(a) = report
            .run
            .steps
            .iter()
            .find(|s| s.state == StepState::WaitingApproval)
            .and_then(|s| s.approval_id.clone())
        {
            v["approval_id"] = a.into();
        }
        print_json(&v);
    } else {
        print_steps(&report.run);
        if outcome == Outcome::Completed {
            eprintln!("latchclaw: {}", report.message);
        } else {
            eprintln!("latchclaw: {}: {}", outcome.reason(), report.message);
        }
    }
    Ok(outcome.code())
}

fn run_value(run: &SopRun) -> Value {
    let mut v = serde_json::to_value(run).unwrap_or_default();
    v["run_id"] = run.id.clone().into();
    v
}

fn print_steps(run: &SopRun) {
    println!(
        "run {}  sop {}  status {}",
        run.id,
        run.sop,
        run.status.as_str()
    );
    for s in &run.steps {
        let out = s
            .output
            .as_deref()
            .or(s.error.as_deref())
            .map(|o| format!("  {}", one_line(o, 80)))
            .unwrap_or_default();
        println!("  {:<16} {:<16}{out}", s.id, s.state.as_str());
    }
}

pub fn run(ctx: &Ctx, name: &str, o: Opts, workspace: Option<&std::path::Path>) -> Result<i32> {
    let cfg = config_here(ctx, workspace)?;
    let sop = crate::sop::load(&cfg, name)?;
    let id = crate::sop::new_run_id();
    drive(ctx, &cfg, &o, &id, |runner| runner.start(&sop, &id))
}

/// The runtime, provider, signals and locks around one part of a run.
fn drive(
    ctx: &Ctx,
    cfg: &Config,
    o: &Opts,
    id: &str,
    go: impl FnOnce(&Runner) -> Result<Report>,
) -> Result<i32> {
    let provider = crate::providers::build(cfg, &cfg.default_provider, &ctx.redactor)?;
    let approver = TtyApprover;
    let mut rt = Runtime::new(cfg, &approver, Arc::clone(&ctx.redactor))?;
    if !cfg.workspace_dir.exists() {
        return Err(Error::runtime(format!(
            "the workspace {} does not exist; create it (mkdir -p {0}) or run `latchclaw init`",
            cfg.workspace_dir.display()
        )));
    }
    rt.prepare_receipts();
    rt.rerun = Some(format!("latchclaw sop resume {id}"));
    rt.recall = false;
    rt.control = RunControl::new(o.timeout.map(std::time::Duration::from_secs));
    let _signals = rt.control.install();
    let _lock = match &o.lock {
        Some(name) => Some(crate::cli::lock::acquire(cfg, name)?),
        None => None,
    };
    let runner = Runner {
        rt: &rt,
        approver: &approver,
        operator: &approver,
        provider: provider.as_ref(),
    };
    let report = go(&runner);
    finish(&rt, report, id, o.json)
}

fn stored_run(ctx: &Ctx, id: &str) -> Result<SopRun> {
    let none = || {
        Error::usage(format!(
            "no SOP run \"{}\"; `latchclaw sop runs` lists them",
            crate::util::printable(id)
        ))
    };
    let memory = ctx.read_memory()?.ok_or_else(none)?;
    memory.sop_run(id)?.ok_or_else(none)
}

fn stored_run_head(ctx: &Ctx, id: &str) -> Result<SopRun> {
    let none = || {
        Error::usage(format!(
            "no SOP run \"{}\"; `latchclaw sop runs` lists them",
            crate::util::printable(id)
        ))
    };
    let memory = ctx.read_memory()?.ok_or_else(none)?;
    memory.sop_run_head(id)?.ok_or_else(none)
}

pub fn resume(ctx: &Ctx, id: &str, o: Opts) -> Result<i32> {
    // Its SOP and workspace; the steps are read once, by the runner.
    let run = stored_run_head(ctx, id)?;
    // The run goes on where it started.
    let cfg = config_here(ctx, Some(std::path::Path::new(&run.workspace)))?;
    let sop = match crate::sop::load(&cfg, &run.sop) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "latchclaw: refused: SOP \"{}\" of run {id} cannot be read as it was: {}",
                run.sop, e.msg
            );
            return Ok(Outcome::Refused.code());
        }
    };
    let lock = crate::sop::run_lock(&cfg, id)?;
    let how = Resume {
        retry_step: o.retry_step.clone(),
        skip_step: o.skip_step.clone(),
    };
    let code = drive(ctx, &cfg, &o, id, |runner| runner.resume(&sop, id, &how));
    drop(lock);
    code
}

pub fn decide(ctx: &Ctx, id: &str, approve: bool, yes: bool, json: bool) -> Result<i32> {
    let run = stored_run(ctx, id)?;
    let Some((index, step)) = run
        .steps
        .iter()
        .enumerate()
        .find(|(_, s)| s.state == StepState::WaitingApproval)
    else {
        return Err(Error::usage(format!(
            "run {id} waits for no approval (it is {}); `latchclaw sop show {id}` shows it",
            run.status.as_str()
        )));
    };
    let Some(approval) = step.approval_id.clone() else {
        return Err(Error::new(
            Kind::Integrity,
            format!("run {id}: step \"{}\" waits with no approval id", step.id),
        ));
    };
    let cfg = config_here(ctx, Some(std::path::Path::new(&run.workspace)))?;
    if approve {
        // Bound to the SOP's hash: an edited file's approval is refused.
        let now = crate::sop::load(&cfg, &run.sop).map(|s| s.hash);
        if now.as_deref().ok() != Some(run.sop_hash.as_str()) {
            let why = format!(
                "refused: SOP \"{}\" changed since run {id} started (or cannot be read now); \
                 approval {approval} is bound to the file as it was (hash {}…). Start a new run \
                 with `latchclaw sop run {0}`",
                run.sop,
                &run.sop_hash[..run.sop_hash.len().min(16)]
            );
            if json {
                print_json(
                    &json!({"run_id": id, "approval_id": approval, "decided": false,
                                   "exit_code": exit::POLICY, "error": why}),
                );
            } else {
                eprintln!("latchclaw: {why}");
            }
            return Ok(exit::POLICY);
        }
    }
    let memory = ctx.open_memory()?;
    if let Some(p) = memory.approval(&approval)?
        && !json
    {
        println!(
            "{} {approval}: SOP {} step {} (run {id}):",
            if approve { "approving" } else { "denying" },
            run.sop,
            step.id
        );
        print!(
            "{}",
            crate::cli::approve::describe(&p.tool, p.risk.as_str(), &p.reason, &p.arguments, "  ")
        );
    }
    if approve && !yes {
        crate::cli::approve::confirm(&approval)?;
    }
    memory.decide_approval(&approval, approve)?;
    if !approve {
        // The run ends here, as denied; nothing is running it (the lock).
        let _lock = crate::sop::run_lock(&cfg, id)?;
        let why = format!("step \"{}\": denied by the operator ({approval})", step.id);
        memory.sop_step_set(id, index, StepState::Failed, None, Some(&why), None)?;
        memory.sop_run_status(id, RunStatus::Denied, Some(&why))?;
    }
    let next = if approve {
        format!("; run `latchclaw sop resume {id}`")
    } else {
        "; the run ends denied".into()
    };
    if json {
        print_json(
            &json!({"run_id": id, "approval_id": approval, "step": step.id,
                           "decided": true, "approved": approve, "exit_code": exit::OK}),
        );
    } else {
        println!(
            "{} {approval}: SOP {} step {}{next}",
            if approve { "approved" } else { "denied" },
            run.sop,
            step.id
        );
    }
    Ok(exit::OK)
}

pub fn runs(ctx: &Ctx, limit: Option<u32>, json: bool) -> Result<i32> {
    let runs = match ctx.read_memory()? {
        Some(m) => m.sop_runs(limit.unwrap_or(50))?,
        None => Vec::new(),
    };
    if json {
        let v: Vec<Value> = runs.iter().map(run_value).collect();
        print_json(&v);
    } else if runs.is_empty() {
        eprintln!("no SOP runs yet");
    } else {
        let rows: Vec<Vec<String>> = runs
            .into_iter()
            .map(|r| {
                vec![
                    r.id,
                    r.sop,
                    r.status.as_str().into(),
                    r.updated_at,
                    one_line(r.error.as_deref().unwrap_or(""), 60),
                ]
            })
            .collect();
        println!(
            "{}",
            table(&["RUN", "SOP", "STATUS", "UPDATED", "NOTE"], &rows, &[])
        );
    }
    Ok(exit::OK)
}

pub fn show(ctx: &Ctx, id: &str, json: bool) -> Result<i32> {
    let run = stored_run(ctx, id)?;
    if json {
        print_json(&run_value(&run));
    } else {
        print_steps(&run);
        println!("  sop_hash {}", run.sop_hash);
        println!("  file     {}", run.path);
        println!("  workspace {}", run.workspace);
        if let Some(e) = &run.error {
            println!("  note     {}", one_line(e, 400));
        }
    }
    Ok(exit::OK)
}
