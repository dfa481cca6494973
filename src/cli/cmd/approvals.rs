//! `approvals list`, `approve`, `deny`, `runs list`.

use crate::cli::{Ctx, one_line, print_json};
use crate::error::{Error, Result, exit};

pub fn list(ctx: &Ctx, all: bool, json: bool) -> Result<i32> {
    let list = ctx.open_memory()?.approvals(all)?;
    if json {
        print_json(&list);
    } else if list.is_empty() {
        eprintln!("no {}approvals", if all { "" } else { "pending " });
    } else {
        for p in list {
            println!(
                "{}  {:8}  {:6}  {}  {}  {} {}",
                p.id,
                p.status,
                p.risk,
                p.created_at,
                p.conversation_id,
                p.tool,
                one_line(&p.arguments.to_string(), 80)
            );
        }
    }
    Ok(exit::OK)
}

pub fn decide(ctx: &Ctx, id: &str, approve: bool, yes: bool) -> Result<i32> {
    let memory = ctx.open_memory()?;
    let Some(p) = memory.approval(id)? else {
        return Err(Error::usage(format!(
            "no approval \"{id}\"; `latchclaw approvals list` shows them"
        )));
    };
    if approve && !yes {
        // A person at a terminal, or --yes typed by the operator.
        crate::cli::approve::confirm(id, &p)?;
    }
    memory.decide_approval(id, approve)?;
    println!(
        "{} {id}: {} {} in {}{}",
        if approve { "approved" } else { "denied" },
        p.tool,
        one_line(&p.arguments.to_string(), 80),
        p.conversation_id,
        if approve {
            format!("; run `latchclaw agent --resume {}`", p.conversation_id)
        } else {
            String::new()
        }
    );
    Ok(exit::OK)
}

pub fn runs(ctx: &Ctx, limit: Option<u32>, json: bool) -> Result<i32> {
    let runs = ctx.open_memory()?.runs(limit.unwrap_or(50))?;
    if json {
        print_json(&runs);
    } else if runs.is_empty() {
        eprintln!("no runs yet");
    } else {
        println!(
            "{:28} {:24} {:>4}  {:>17}  {:12} {:32} COMMAND",
            "RUN", "STARTED", "EXIT", "TOKENS IN/CACHED", "LOCK", "CONVERSATION"
        );
        for r in runs {
            let tokens = match (r.prompt_tokens, r.cached_tokens) {
                (Some(p), c) => format!("{p}/{}", c.unwrap_or(0)),
                _ => "-".to_string(),
            };
            println!(
                "{:28} {:24} {:>4}  {tokens:>17}  {:12} {:32} {}",
                r.id,
                r.started_at,
                r.exit_code.map_or("-".to_string(), |c| c.to_string()),
                r.lock_name.as_deref().unwrap_or("-"),
                r.conversation_id.as_deref().unwrap_or("-"),
                one_line(&r.command, 50)
            );
        }
    }
    Ok(exit::OK)
}
