//! `approvals list`, `approve`, `deny`, `runs list`.

use crate::cli::approve::describe_with;
use crate::cli::ctx::{Ctx, print_json, table};
use crate::error::{Error, Result, exit};
use crate::memory::ApprovalStatus;
use crate::util::one_line;
use std::io::Write;

pub fn list(ctx: &Ctx, all: bool, json: bool) -> Result<i32> {
    let (list, standing) = match ctx.read_memory()? {
        Some(m) => (m.approvals(all)?, m.standings(all)?),
        None => (Vec::new(), Vec::new()),
    };
    if json {
        // The "always for this conversation" answers follow, status
        // `always` (or `revoked`), with what they cover.
        let previews = Previews::new(ctx);
        let mut out: Vec<serde_json::Value> = list
            .iter()
            .map(|p| {
                let mut v = serde_json::to_value(p).unwrap_or_default();
                if let Some(d) = previews.of(p) {
                    v["preview"] = d.into();
                }
                v
            })
            .collect();
        out.extend(standing.iter().map(|a| {
            let mut v = serde_json::to_value(a).unwrap_or_default();
            v["status"] = if a.revoked_at.is_some() {
                "revoked"
            } else {
                "always"
            }
            .into();
            v
        }));
        print_json(&out);
        return Ok(exit::OK);
    }
    for a in &standing {
        println!(
            "{}  {}  {}  {}",
            a.id,
            if a.revoked_at.is_some() {
                "revoked"
            } else {
                "always"
            },
            a.created_at,
            a.conversation_id
        );
        println!(
            "  {} {} up to {} risk in {} (`latchclaw deny {}` revokes it)",
            a.tool,
            if a.scope.is_empty() {
                "(every call)".to_string()
            } else {
                format!("running `{}`", a.scope.replace(',', "`, `"))
            },
            a.risk.as_str(),
            a.workspace,
            a.id
        );
    }
    if list.is_empty() {
        if standing.is_empty() {
            eprintln!("no {}approvals", if all { "" } else { "pending " });
        }
    } else {
        // Every argument in full, wrapped: the operator approves what the
        // whole command does, not its first 80 characters.
        let previews = Previews::new(ctx);
        for p in list {
            println!(
                "{}  {}  {}  {}",
                p.id, p.status, p.created_at, p.conversation_id
            );
            if let Some(w) = &p.workspace {
                println!("    workspace: {w}");
            }
            print!(
                "{}",
                describe_with(
                    &p.tool,
                    p.risk.as_str(),
                    &p.reason,
                    &p.arguments,
                    previews.of(&p).as_deref(),
                    "    "
                )
            );
        }
    }
    Ok(exit::OK)
}

pub fn decide(ctx: &Ctx, id: &str, approve: bool, yes: bool) -> Result<i32> {
    let memory = ctx.open_memory()?;
    // `last`: the newest pending approval, named before it is decided.
    let newest;
    let id = if id == "last" {
        newest = memory
            .approvals(false)?
            .pop()
            .map(|p| p.id)
            .ok_or_else(|| {
                Error::usage(
                    "no pending approvals; `latchclaw approvals list --all` shows decided ones",
                )
            })?;
        newest.as_str()
    } else {
        id
    };
    if id.starts_with("always-") {
        if approve {
            return Err(Error::usage(format!(
                "{id} is an \"always for this conversation\" answer, in force until revoked \
                 (`latchclaw deny {id}`)"
            )));
        }
        if !memory.revoke_standing(id)? {
            return Err(Error::usage(format!(
                "no standing approval \"{id}\" in force; `latchclaw approvals list` shows them"
            )));
        }
        println!("revoked {id}: its calls ask again");
        return Ok(exit::OK);
    }
    let Some(p) = memory.approval(id)? else {
        return Err(Error::usage(format!(
            "no approval \"{id}\"; `latchclaw approvals list` shows them"
        )));
    };
    // The whole call, before the operator is asked (or --yes decides).
    if p.status == ApprovalStatus::Pending {
        println!(
            "{} {id} in {}:",
            if approve { "approving" } else { "denying" },
            p.conversation_id
        );
        print!(
            "{}",
            describe_with(
                &p.tool,
                p.risk.as_str(),
                &p.reason,
                &p.arguments,
                Previews::new(ctx).of(&p).as_deref(),
                "  "
            )
        );
        let _ = std::io::stdout().flush();
    }
    if approve && !yes {
        // A person at a terminal, or --yes typed by the operator.
        crate::cli::approve::confirm(id)?;
    }
    memory.decide_approval(id, approve)?;
    // The call runs where it was asked: resumed from elsewhere, -w says where.
    let ws = p
        .workspace
        .as_deref()
        .map(|w| format!(" -w {}", crate::util::shell_quote(w)))
        .unwrap_or_default();
    // A SOP's step goes on with its run, not a conversation.
    let next = match crate::sop::run_of_conversation(&p.conversation_id) {
        Some(run) => format!("; run `latchclaw sop resume {run}`"),
        // `tool run` asked: the same command runs the approved call.
        None if p.conversation_id == "cli-tool-run" => format!(
            "; run the same `latchclaw tool run {}{ws} --json …` again",
            p.tool
        ),
        None => format!("; run `latchclaw agent --resume {}{ws}`", p.conversation_id),
    };
    println!(
        "{} {id}: {} in {}{}",
        if approve { "approved" } else { "denied" },
        p.tool,
        p.conversation_id,
        if approve { next } else { String::new() }
    );
    Ok(exit::OK)
}

pub fn runs(ctx: &Ctx, limit: Option<u32>, json: bool) -> Result<i32> {
    let runs = match ctx.read_memory()? {
        Some(m) => m.runs(limit.unwrap_or(50))?,
        None => Vec::new(),
    };
    if json {
        print_json(&runs);
    } else if runs.is_empty() {
        eprintln!("no runs yet");
    } else {
        let rows: Vec<Vec<String>> = runs
            .into_iter()
            .map(|r| {
                let tokens = match (r.prompt_tokens, r.cached_tokens) {
                    (Some(p), c) => format!("{p}/{}", c.unwrap_or(0)),
                    _ => "-".to_string(),
                };
                // A run still going (or killed outright) has no end yet.
                let reason = match (&r.exit_reason, &r.ended_at) {
                    (Some(why), _) => one_line(why, 60),
                    (None, None) => "running or killed".into(),
                    (None, Some(_)) => "-".into(),
                };
                vec![
                    r.id,
                    r.started_at,
                    r.exit_code.map_or("-".to_string(), |c| c.to_string()),
                    reason,
                    tokens,
                    r.lock_name.unwrap_or_else(|| "-".into()),
                    r.conversation_id.unwrap_or_else(|| "-".into()),
                    one_line(&r.command, 60),
                ]
            })
            .collect();
        println!(
            "{}",
            table(
                &[
                    "RUN",
                    "STARTED",
                    "EXIT",
                    "REASON",
                    "TOKENS IN/CACHED",
                    "LOCK",
                    "CONVERSATION",
                    "COMMAND"
                ],
                &rows,
                &[2, 4]
            )
        );
    }
    Ok(exit::OK)
}

/// A pending write's diff against the file as it is now, judged by the
/// gate of this configuration (a call asked in another workspace: none).
struct Previews {
    gate: Option<(crate::security::Gate, std::path::PathBuf)>,
}

impl Previews {
    fn new(ctx: &Ctx) -> Previews {
        Previews {
            gate: ctx.load_config().ok().map(|cfg| {
                (
                    crate::security::Gate::new(&cfg, &cfg.channels.cli.tools_allow),
                    cfg.workspace_dir.clone(),
                )
            }),
        }
    }

    fn of(&self, p: &crate::memory::PendingApproval) -> Option<String> {
        let (gate, ws) = self.gate.as_ref()?;
        if p.tool != "file_write" || p.workspace.as_deref() != Some(&*ws.to_string_lossy()) {
            return None;
        }
        let path = p.arguments.get("path")?.as_str()?;
        let content = p.arguments.get("content")?.as_str()?;
        let resolved = gate.check_write_path(path).ok()?;
        Some(crate::tools::write_preview(gate, &resolved, content))
    }
}
