//! `memory list`, `memory search`, `memory show`, `memory clear`.

use crate::cli::{Ctx, count, one_line, print_json};
use crate::error::{Error, Result, exit};

pub fn list(ctx: &Ctx, limit: Option<u32>, json: bool) -> Result<i32> {
    let list = ctx.open_memory()?.list(limit.unwrap_or(50))?;
    if json {
        print_json(&list);
    } else if list.is_empty() {
        eprintln!("no conversations yet");
    } else {
        println!(
            "{:32} {:>5}  {:24}  FIRST MESSAGE",
            "CONVERSATION", "TURNS", "LAST ACTIVITY"
        );
        for c in list {
            println!(
                "{:32} {:>5}  {:24}  {}",
                c.conversation_id,
                c.turns,
                c.last_activity,
                one_line(&c.first_message, 60)
            );
        }
    }
    Ok(exit::OK)
}

pub fn search(ctx: &Ctx, query: &str, limit: Option<u32>, json: bool) -> Result<i32> {
    let hits = ctx.open_memory()?.search(query, limit.unwrap_or(20))?;
    if json {
        print_json(&hits);
    } else if hits.is_empty() {
        eprintln!("no matches for \"{query}\"");
    } else {
        for h in hits {
            println!(
                "{}  {}  {:9}  {}",
                h.conversation_id,
                h.timestamp,
                h.role,
                one_line(&h.snippet, 100)
            );
        }
    }
    Ok(exit::OK)
}

pub fn show(ctx: &Ctx, id: &str, json: bool) -> Result<i32> {
    let turns = ctx.open_memory()?.turns(id, None)?;
    if turns.is_empty() {
        return Err(Error::usage(format!(
            "no conversation \"{id}\"; `latchclaw memory list` shows them"
        )));
    }
    if json {
        print_json(&turns);
    } else {
        for t in turns {
            println!("[{}] {}: {}", t.timestamp, t.role, t.content);
            if let Some(calls) = t.tool_calls {
                println!("    tool calls: {calls}");
            }
        }
    }
    Ok(exit::OK)
}

pub fn clear(ctx: &Ctx, yes: bool) -> Result<i32> {
    if !yes {
        return Err(Error::usage(
            "memory clear deletes every conversation; add --yes to confirm",
        ));
    }
    let n = ctx.open_memory()?.clear()?;
    println!("deleted {}", count(n as u64, "turn"));
    Ok(exit::OK)
}
