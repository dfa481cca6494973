//! `memory list`, `memory search`, `memory show`, `memory clear`, `memory notes`,
//! `memory forget`, `memory summarize`.

use crate::cli::ctx::{Ctx, count, print_json, table};
use crate::error::{Error, Result, exit};
use crate::memory::TurnRole;
use crate::util::for_stdout;
use crate::util::one_line;

pub fn list(ctx: &Ctx, limit: Option<u32>, json: bool) -> Result<i32> {
    let list = match ctx.read_memory()? {
        Some(m) => m.list(limit.unwrap_or(50))?,
        None => Vec::new(),
    };
    if json {
        print_json(&list);
    } else if list.is_empty() {
        eprintln!("no conversations yet");
    } else {
        let rows: Vec<Vec<String>> = list
            .into_iter()
            .map(|c| {
                vec![
                    c.conversation_id,
                    for_stdout(&one_line(c.session.as_deref().unwrap_or("-"), 24)).into_owned(),
                    c.turns.to_string(),
                    c.last_activity,
                    if c.summaries.is_empty() {
                        "-".to_string()
                    } else {
                        c.summaries
                            .iter()
                            .map(i64::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                    for_stdout(&one_line(&c.first_message, 60)).into_owned(),
                ]
            })
            .collect();
        println!(
            "{}",
            table(
                &[
                    "CONVERSATION",
                    "SESSION",
                    "TURNS",
                    "LAST ACTIVITY",
                    "SUMMARY",
                    "FIRST MESSAGE"
                ],
                &rows,
                &[2]
            )
        );
    }
    Ok(exit::OK)
}

pub fn search(ctx: &Ctx, query: &str, limit: Option<u32>, json: bool) -> Result<i32> {
    let hits = match ctx.read_memory()? {
        Some(m) => m.search(query, limit.unwrap_or(20))?,
        None => Vec::new(),
    };
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
                for_stdout(&one_line(&h.snippet, 100))
            );
        }
    }
    Ok(exit::OK)
}

pub fn show(ctx: &Ctx, id: &str, json: bool) -> Result<i32> {
    if id == "last" {
        return last_answer(ctx, json);
    }
    let turns = match ctx.read_memory()? {
        Some(m) => m.turns(id, None)?,
        None => Vec::new(),
    };
    if turns.is_empty() {
        return Err(Error::usage(format!(
            "no conversation \"{id}\"; `latchclaw memory list` shows them"
        )));
    }
    if json {
        print_json(&turns);
    } else {
        for t in turns {
            println!("[{}] {}: {}", t.timestamp, t.role, for_stdout(&t.content));
            if let Some(calls) = t.tool_calls {
                println!("    tool calls: {}", for_stdout(&calls.to_string()));
            }
        }
    }
    Ok(exit::OK)
}

/// `memory show last`: the last answer of the most recent conversation,
/// alone (no jq pipeline to get it again); `--json`: that turn.
fn last_answer(ctx: &Ctx, json: bool) -> Result<i32> {
    let none = || Error::usage("no answer yet: `latchclaw memory list` shows the conversations");
    let memory = ctx.read_memory()?.ok_or_else(none)?;
    let conv = memory.latest_conversation()?.ok_or_else(none)?;
    // The model's answer or latchclaw's note on why it stopped; never a
    // round's message that only called tools.
    let answer = memory
        .turns(&conv, None)?
        .into_iter()
        .rev()
        .find(|t| {
            matches!(t.role, TurnRole::Assistant | TurnRole::System)
                && t.tool_calls
                    .as_ref()
                    .is_none_or(|c| c.as_array().is_none_or(Vec::is_empty))
        })
        .ok_or_else(none)?;
    if json {
        print_json(&answer);
    } else {
        println!("{}", for_stdout(&answer.content));
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

pub fn notes(ctx: &Ctx, category: Option<&str>, limit: Option<u32>, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    if let Some(c) = category {
        crate::memory::check_category(c, &cfg.memory.all_categories())
            .map_err(|e| Error::usage(format!("--category: {e}")))?;
    }
    let memory = crate::memory::Memory::open_existing(
        &cfg.memory.path,
        cfg.memory.busy_timeout_ms,
        std::sync::Arc::clone(&ctx.redactor),
    )?;
    let notes = match memory {
        Some(m) => m.notes(&crate::memory::NoteFilter {
            category: category.map(String::from),
            limit: limit.unwrap_or(50),
            ..Default::default()
        })?,
        None => Vec::new(),
    };
    if json {
        print_json(&notes);
    } else if notes.is_empty() {
        eprintln!("no notes yet");
    } else {
        for n in &notes {
            println!("{}", for_stdout(&crate::tools::memory::note_line(n)));
        }
    }
    Ok(exit::OK)
}

pub fn forget(ctx: &Ctx, id: &str) -> Result<i32> {
    let n: i64 = id.parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
        Error::usage(format!(
            "\"{}\" is not a note id (an integer from 1); `latchclaw memory notes` lists them",
            crate::util::printable(id)
        ))
    })?;
    let cfg = ctx.load_config()?;
    let Some(m) = crate::memory::Memory::open_existing(
        &cfg.memory.path,
        cfg.memory.busy_timeout_ms,
        std::sync::Arc::clone(&ctx.redactor),
    )?
    else {
        return Err(Error::usage(format!(
            "no note {n}; `latchclaw memory notes` lists them"
        )));
    };
    let note = m.forget_note(n)?;
    println!("forgot note {} ({})", note.id, note.category);
    Ok(exit::OK)
}

/// `memory summarize`: a period's summary (and the finer ones it needs), or
/// a conversation's. One run at a time (exit 8 for a second): two would
/// pay for the same model calls.
pub fn summarize(
    ctx: &Ctx,
    period: Option<crate::types::period::Period>,
    key: Option<&str>,
    conversation: Option<&str>,
    redo: bool,
    json: bool,
) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let _lock = crate::util::lock_or_refuse(
        &cfg.state_dir.join("locks"),
        "memory-summarize.lock",
        |path| {
            format!(
                "another memory summarize is running (it holds {}); not starting",
                path.display()
            )
        },
    )?;
    let memory = crate::memory::Memory::open(
        &cfg.memory.path,
        cfg.memory.busy_timeout_ms,
        std::sync::Arc::clone(&ctx.redactor),
    )?;
    let provider = crate::providers::build(&cfg, &cfg.default_provider, &ctx.redactor)?;
    let mut r = crate::rollup::Rollup::new(&cfg, &memory, provider.as_ref())?;
    match (period, conversation) {
        (_, Some(id)) => r.conversation(id, redo)?,
        (Some(p), None) => {
            let span = r.span(p, key)?;
            r.summarize(&span, redo)?;
        }
        (None, None) => return Err(Error::usage("give --period PERIOD or --conversation ID")),
    }
    if json {
        print_json(&serde_json::json!({"summaries": r.done, "model_calls": r.calls}));
    } else {
        for d in &r.done {
            let id = d.id.map(|i| format!(" (id {i})")).unwrap_or_default();
            let of = d
                .chat_id
                .as_deref()
                .map(|c| format!(" of {c}"))
                .unwrap_or_default();
            println!(
                "{:7} {} {}{of}{id}: {}",
                d.status,
                d.kind,
                d.period_key,
                count(d.covers.len() as u64, "conversation")
            );
        }
    }
    Ok(exit::OK)
}
