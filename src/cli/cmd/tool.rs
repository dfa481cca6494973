//! `tool list`, `tool run`, `policy check`, `policy show`.

use crate::cli::approve::TtyApprover;
use crate::cli::ctx::{Ctx, print_json};
use crate::config::{Autonomy, Config};
use crate::error::{Error, Kind, Outcome, Result, exit};
use crate::runtime::Runtime;
use crate::security::Gate;
use crate::tools::ToolName;
use serde_json::{Value, json};

/// `tool stats`: per tool, from the stored rounds.
pub fn stats(ctx: &Ctx, since: Option<i64>, json: bool) -> Result<i32> {
    let stats = match ctx.read_memory()? {
        Some(m) => m.tool_stats(since)?,
        None => Vec::new(),
    };
    if json {
        let rows: Vec<Value> = stats
            .iter()
            .map(|s| {
                json!({
                    "tool": s.tool,
                    "calls": s.calls,
                    "succeeded": s.succeeded,
                    "success_rate": (s.success_rate() * 10.0).round() / 10.0,
                    "timed": s.durations_ms.len(),
                    "avg_ms": s.average_ms().map(|a| (a * 10.0).round() / 10.0),
                    "p95_ms": s.p95_ms(),
                })
            })
            .collect();
        print_json(&rows);
        return Ok(exit::OK);
    }
    if stats.is_empty() {
        eprintln!("no tool calls stored yet");
        return Ok(exit::OK);
    }
    let ms = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = stats
        .iter()
        .map(|s| {
            vec![
                s.tool.clone(),
                s.calls.to_string(),
                format!("{:.1}%", s.success_rate()),
                ms(s.average_ms().map(|a| format!("{a:.1}"))),
                ms(s.p95_ms().map(|p| p.to_string())),
            ]
        })
        .collect();
    println!(
        "{}",
        crate::cli::ctx::table(
            &["TOOL", "CALLS", "SUCCESS", "AVG MS", "P95 MS"],
            &rows,
            &[1, 2, 3, 4]
        )
    );
    Ok(exit::OK)
}

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let mut rows: Vec<Value> = ToolName::ALL
        .into_iter()
        .map(|name| {
            json!({
                "name": name,
                "enabled": cfg.channels.cli.tools_allow.contains(&name),
                "built": crate::features::tool_missing(name).is_none(),
                "risk": crate::security::risk_summary(name),
                "description": crate::tools::tool(name).description(),
                "parameters": crate::tools::schema_with_defaults(crate::tools::tool(name)),
                "source": "built-in",
            })
        })
        .collect();
    // Then the plugins' tools: offered when approved and not disabled.
    let external = crate::plugins::registry(&cfg);
    for t in &external.tools {
        let offered = external.offered(&cfg).any(|o| o.name == t.name);
        rows.push(json!({
            "name": t.name,
            "enabled": offered,
            "built": true,
            "risk": format!("{}{}", t.risk.as_str(), if t.read_only { ", read-only" } else { "" }),
            "description": t.description,
            "parameters": t.schema,
            "source": t.origin(),
            "approved": t.unapproved.is_none(),
            // Declares hosts the config grants none of: every call refused.
            "network_granted": t.network.is_empty() || !t.granted.is_empty(),
        }));
    }
    if json {
        print_json(&rows);
        return Ok(exit::OK);
    }
    // Columns as wide as their longest entry, so they line up.
    let width = |key: &str, head: &str| {
        rows.iter()
            .map(|r| r[key].as_str().map_or(0, |s| s.chars().count()))
            .max()
            .unwrap_or(0)
            .max(head.len())
    };
    let (name_w, risk_w) = (width("name", "TOOL"), width("risk", "RISK"));
    // A tool this build lacks says so where "yes" or "no" would be.
    let enabled = |r: &Value| match (&r["built"], &r["enabled"]) {
        (Value::Bool(false), _) => "not built",
        _ if r["approved"] == false => "unapproved",
        _ if r["network_granted"] == false => "no grant",
        (_, Value::Bool(true)) => "yes",
        _ => "no",
    };
    let enabled_w = rows
        .iter()
        .map(|r| enabled(r).len())
        .max()
        .unwrap_or(0)
        .max(7);
    println!(
        "{:name_w$}  {:enabled_w$}  {:risk_w$}  DESCRIPTION",
        "TOOL", "ENABLED", "RISK"
    );
    for r in &rows {
        println!(
            "{:name_w$}  {:enabled_w$}  {:risk_w$}  {}",
            r["name"].as_str().unwrap_or(""),
            enabled(r),
            r["risk"].as_str().unwrap_or(""),
            crate::util::printable(r["description"].as_str().unwrap_or(""))
        );
    }
    Ok(exit::OK)
}

/// The config with this run's workspace (`-w`, the git work tree it is
/// started in, or `workspace_dir`, named on stderr when it is elsewhere).
fn config_here(
    ctx: &Ctx,
    workspace: Option<&std::path::Path>,
) -> Result<(crate::config::Config, crate::cli::workspace::From)> {
    let mut cfg = ctx.load_config()?;
    let from = crate::cli::workspace::choose(&mut cfg, workspace)?;
    if let Some(note) = crate::cli::workspace::note(&cfg, &from) {
        log::warn!(target: "event::workspace_configured", "{note}");
    }
    Ok((cfg, from))
}

pub fn run(
    ctx: &Ctx,
    name: &str,
    raw: Option<&str>,
    workspace: Option<&std::path::Path>,
) -> Result<i32> {
    let (cfg, from) = config_here(ctx, workspace)?;
    let external = crate::plugins::registry(&cfg);
    let (tool, args) = parse_tool_args(name, raw, &external, &cfg)?;
    // A tool that starts children: the namespaces they share are made on a
    // thread of their own while the call is judged and receipted.
    if tool.is_none_or(ToolName::starts_children) {
        crate::security::confine::start_early(cfg.security.confinement);
    }

    // `policy check` leaves this out: it shows what the gate alone decides.
    match tool {
        Some(t) => crate::tools::check_args(crate::tools::tool(t), &args),
        None => external.find(name).map_or(Ok(()), |e| {
            crate::tools::check_schema(name, &e.schema, &args)
        }),
    }
    .map_err(|e| Error::usage(format!("--json: {e}")))?;
    let approver = TtyApprover;
    let mut rt = Runtime::new(&cfg, &approver, std::sync::Arc::clone(&ctx.redactor))?;
    rt.prepare_receipts();
    let _signals = rt.control.install();
    let config = match &ctx.config {
        Some(p) => format!(
            " --config {}",
            crate::util::shell_quote(&p.display().to_string())
        ),
        None => String::new(),
    };
    // Run again from anywhere, it works in the same workspace.
    let ws = match from {
        crate::cli::workspace::From::Config(_) => String::new(),
        _ => format!(
            " -w {}",
            crate::util::shell_quote(&cfg.workspace_dir.display().to_string())
        ),
    };
    rt.rerun = Some(format!(
        "latchclaw{config} tool run {name}{ws} --json {}",
        crate::util::shell_quote(&args.to_string())
    ));
    let executed = rt.execute_tool("cli-tool-run", name, &args);
    if let Err(e) = rt.anchor_head() {
        eprintln!("latchclaw: {e}");
    }
    let (record, result) = executed?;
    print_json(&json!({
        "tool": name,
        "status": record.status,
        "risk": record.risk,
        "reason": record.reason,
        "receipt_id": record.receipt_id,
        "started_receipt_id": record.started_receipt_id,
        "receipts_head": rt.receipts_head(),
        "success": result.success,
        "output": result.output,
        "error": result.error,
        "metadata": result.metadata,
        "measured": result.measured,
    }));
    // The emergency stop wins whether it refused the call or killed it.
    let outcome = match record.status {
        _ if record.estop => Outcome::Estop,
        crate::receipts::Status::Denied => Outcome::Refused,
        _ if record.pending_approval.is_some() => Outcome::Refused,
        _ if record.budget.is_some() => Outcome::PlanBudget,
        crate::receipts::Status::Failed => Outcome::Failed(Kind::Runtime),
        _ => Outcome::Completed,
    };
    Ok(outcome.code())
}

/// The built-in `name` names (`None`: an external tool's), and the
/// arguments.
fn parse_tool_args(
    name: &str,
    raw: Option<&str>,
    external: &crate::external::Registry,
    cfg: &crate::config::Config,
) -> Result<(Option<ToolName>, Value)> {
    let tool = ToolName::parse(name);
    if tool.is_none() && external.find(name).is_none() {
        // A tool of a configured MCP server whose tools were never approved.
        if let Some(server) = cfg.mcp.servers.keys().find(|s| {
            name.strip_prefix("mcp_")
                .and_then(|r| r.strip_prefix(s.as_str()))
                .is_some_and(|r| r.starts_with('_'))
        }) {
            return Err(Error::usage(format!(
                "unknown tool \"{name}\": MCP server \"{server}\"'s tools were never approved, \
                 so none is known yet; `latchclaw mcp approve {server}` lists and approves them"
            )));
        }
        let names = ToolName::ALL
            .iter()
            .map(|t| t.as_str())
            .chain(external.tools.iter().map(|t| t.name.as_str()));
        let near = crate::util::suggest::nearest(name, names)
            .map(|t| format!(" did you mean \"{t}\"?"))
            .unwrap_or_default();
        let mut known = ToolName::list();
        for t in &external.tools {
            known.push_str(", ");
            known.push_str(&t.name);
        }
        return Err(Error::usage(format!(
            "unknown tool \"{name}\";{near} known tools: {known}"
        )));
    }
    let raw = raw.unwrap_or("{}");
    let args: Value = serde_json::from_str(raw).map_err(|e| {
        Error::usage(format!(
            "--json: invalid JSON ({e}); give the arguments as a JSON object, e.g. '{{\"path\": \".\"}}'"
        ))
    })?;
    if !args.is_object() {
        return Err(Error::usage(
            "--json: the arguments must be a JSON object, e.g. '{\"path\": \".\"}'",
        ));
    }
    Ok((tool, args))
}

pub fn policy_check(
    ctx: &Ctx,
    name: &str,
    raw: Option<&str>,
    autonomy: Option<Autonomy>,
    workspace: Option<&std::path::Path>,
) -> Result<i32> {
    use crate::security::plan::{OpenMode, Redir};
    let (cfg, _) = config_here(ctx, workspace)?;
    let external = crate::plugins::registry(&cfg);
    let (tool, args) = parse_tool_args(name, raw, &external, &cfg)?;
    let mut gate = Gate::new(&cfg, &cfg.channels.cli.tools_allow);
    if let Some(autonomy) = autonomy {
        gate = gate.with_autonomy(autonomy);
    }
    let d = match (tool, external.find(name)) {
        (Some(t), _) => gate.decide(t, &args),
        (None, Some(e)) => gate.decide_external(&e.judged(), &args),
        (None, None) => return Err(Error::usage(format!("unknown tool \"{name}\""))),
    };
    let mut out = json!({"tool": name, "risk": d.risk.as_str(), "decision": d.verdict.as_str(), "reason": d.reason, "rule": d.rule});
    if let crate::security::Verdict::Deny(kind) = d.verdict {
        out["refusal"] = kind.as_str().into();
    }
    // What would run, exactly: one argv per command, in order.
    if let Some(plan) = &d.plan {
        out["plan"] = plan
            .steps
            .iter()
            .flat_map(|s| &s.commands)
            .map(|c| {
                let redirs: Vec<String> = c
                    .redirs
                    .iter()
                    .map(|r| match r {
                        Redir::Open { fd, path, mode } => {
                            let op = match mode {
                                OpenMode::Read => "<",
                                OpenMode::Truncate => ">",
                                OpenMode::Append => ">>",
                            };
                            format!("{fd}{op}{}", path.display())
                        }
                        Redir::Dup { fd, to } => format!("{fd}>&{to}"),
                        Redir::Close { fd } => format!("{fd}>&-"),
                    })
                    .collect();
                json!({"program": c.program, "argv": c.argv, "redirections": redirs})
            })
            .collect();
    }
    print_json(&out);
    Ok(exit::OK)
}

pub fn policy_show(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let gate = Gate::new(&cfg, &cfg.channels.cli.tools_allow);
    if json {
        print_json(&policy_value(&cfg, &gate));
    } else {
        println!("{}", gate.describe(&cfg));
    }
    Ok(exit::OK)
}

/// The policy `policy show` prints, as data. A workspace that cannot be
/// resolved is `null`, with why in `workspace_error`.
fn policy_value(cfg: &Config, gate: &Gate) -> Value {
    let paths = |v: &[std::path::PathBuf]| -> Vec<String> {
        v.iter().map(|p| p.display().to_string()).collect()
    };
    let (workspace, workspace_error) = match gate.workspace() {
        Ok(w) => (Some(w.display().to_string()), None),
        Err(e) => (None, Some(e.reason)),
    };
    let confinement = match gate.workspace() {
        Ok(ws) => crate::security::confine::describe_for(cfg, ws, gate.autonomy()),
        Err(_) => "nothing to confine: no usable workspace".into(),
    };
    json!({
        "autonomy": gate.autonomy().as_str(),
        "workspace": workspace,
        "workspace_error": workspace_error,
        "workspace_only": cfg.security.workspace_only,
        "forbidden_paths": paths(&cfg.security.forbidden_paths),
        "forbidden_commands": cfg.security.forbidden_commands,
        "secret_files": crate::security::secret_files::RULES.iter().map(|r| r.shown).collect::<Vec<_>>(),
        "secret_files_allow": cfg.security.secret_files_allow,
        "dotfiles_allow": cfg.security.dotfiles_allow,
        "shell_allowlist": cfg.security.shell_allowlist,
        "tools_enabled": cfg.channels.cli.tools_allow,
        "features": crate::features::built(),
        "state_dir": cfg.state_dir.display().to_string(),
        "confinement": {"mode": cfg.security.confinement.as_str(), "description": confinement},
        "estop": cfg.estop_path().exists(),
        "policy_rules": cfg.policy.rules.iter().map(|r| json!({
            "name": r.name,
            "effect": r.effect.as_str(),
            "reason": r.reason,
            "matches": crate::security::policy::describe(r),
            "examples": r.examples.len(),
        })).collect::<Vec<_>>(),
        "policy_file": cfg.policy.file,
    })
}
