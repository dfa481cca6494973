//! `latchclaw task list [CONV] | show PATH`: the trees `plan` calls stored
//! (`memory::tasks`).

use crate::cli::ctx::{Ctx, print_json, table};
use crate::error::{Error, Result, exit};
use crate::memory::tasks::Task;
use crate::util::{one_line, printable};
use serde_json::json;

pub fn list(ctx: &Ctx, conversation: Option<&str>, limit: Option<u32>, json: bool) -> Result<i32> {
    let memory = ctx.read_memory()?;
    let mut rows = Vec::new();
    if let Some(m) = &memory {
        for root in m.task_roots(conversation, limit.unwrap_or(50))? {
            let tasks = m.task_subtree(&root.path)?.len().saturating_sub(1);
            rows.push((root, tasks));
        }
    }
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(r, n)| {
                json!({"path": r.path, "conversation": r.conversation, "state": r.state,
                       "budget": r.budget, "tasks": n, "rounds": r.rounds, "tokens": r.tokens,
                       "created_at": r.created_at, "updated_at": r.updated_at})
            })
            .collect();
        print_json(&v);
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        eprintln!("no plans yet");
        return Ok(exit::OK);
    }
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(r, n)| {
            vec![
                printable(&r.path),
                r.state.as_str().to_string(),
                n.to_string(),
                r.rounds.to_string(),
                r.tokens.to_string(),
                r.budget.clone().unwrap_or_default(),
                r.updated_at.clone(),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "PATH", "STATE", "TASKS", "ROUNDS", "TOKENS", "BUDGET", "UPDATED"
            ],
            &table_rows,
            &[2, 3, 4]
        )
    );
    Ok(exit::OK)
}

pub fn show(ctx: &Ctx, path: &str, json: bool) -> Result<i32> {
    let none = || {
        Error::usage(format!(
            "no task \"{}\"; `latchclaw task list` lists the plans",
            printable(path)
        ))
    };
    let memory = ctx.read_memory()?.ok_or_else(none)?;
    let tasks = memory.task_subtree(path)?;
    if tasks.is_empty() {
        return Err(none());
    }
    if json {
        print_json(&json!({"path": path, "tasks": tasks}));
        return Ok(exit::OK);
    }
    let top = tasks[0].depth;
    for t in &tasks {
        print_task(t, (t.depth - top).max(0) as usize);
    }
    Ok(exit::OK)
}

fn print_task(t: &Task, level: usize) {
    let pad = "  ".repeat(level);
    let id = t.path.rsplit('/').next().unwrap_or(&t.path);
    let mut head = format!(
        "{pad}{} [{}]",
        if t.depth == 0 {
            printable(&t.path)
        } else {
            format!("{} {}", printable(id), one_line(&printable(&t.title), 80))
        },
        t.state.as_str()
    );
    if let Some(b) = &t.budget {
        head.push_str(&format!(" stopped by budget {b}"));
    }
    println!("{head}");
    let mut facts = vec![
        format!("rounds {}", t.rounds),
        format!("tokens {}", t.tokens),
    ];
    if let Some(tools) = &t.tools {
        facts.push(format!("tools {}", printable(&tools.join(","))));
    }
    if let Some(s) = &t.skill {
        facts.push(format!("skill {}", printable(s)));
    }
    if let Some(c) = &t.corrects {
        facts.push(format!(
            "corrects {}",
            printable(c.rsplit('/').next().unwrap_or(c))
        ));
    }
    if let Some(l) = &t.limits {
        facts.push(format!("budgets {l}"));
    }
    println!("{pad}  {}", facts.join("  "));
    if let Some(r) = t.result.as_deref().filter(|r| !r.is_empty()) {
        println!("{pad}  result: {}", one_line(&printable(r), 300));
    }
}
