//! `latchclaw code stats|failures`: what `code_run`'s record says
//! (`memory::code_runs`).

use crate::cli::ctx::{Ctx, print_json, table};
use crate::error::Result;
use crate::util::one_line;

pub fn stats(ctx: &Ctx, json: bool) -> Result<i32> {
    let stats = match ctx.read_memory()? {
        Some(m) => m.code_stats()?,
        None => Default::default(),
    };
    if json {
        print_json(&stats);
        return Ok(0);
    }
    if stats.runs == 0 {
        eprintln!("no code_run snippets yet");
        return Ok(0);
    }
    println!(
        "runs: {}  failures: {}  failure rate: {:.1} %",
        stats.runs,
        stats.failures,
        stats.failure_rate * 100.0
    );
    let rows: Vec<Vec<String>> = stats
        .by_language
        .iter()
        .map(|l| {
            vec![
                l.language.clone(),
                l.runs.to_string(),
                l.failures.to_string(),
                format!("{:.1} %", l.failure_rate * 100.0),
                format!("{:.0}", l.mean_duration_ms),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["LANGUAGE", "RUNS", "FAILURES", "RATE", "MEAN MS"],
            &rows,
            &[1, 2, 3, 4]
        )
    );
    if !stats.by_category.is_empty() {
        let rows: Vec<Vec<String>> = stats
            .by_category
            .iter()
            .map(|c| vec![c.category.clone(), c.failures.to_string()])
            .collect();
        println!("{}", table(&["CATEGORY", "FAILURES"], &rows, &[1]));
    }
    Ok(0)
}

pub fn failures(ctx: &Ctx, limit: Option<u32>, json: bool) -> Result<i32> {
    let rows = match ctx.read_memory()? {
        Some(m) => m.code_failures(limit.unwrap_or(20))?,
        None => Vec::new(),
    };
    if json {
        print_json(&rows);
        return Ok(0);
    }
    if rows.is_empty() {
        eprintln!("no failed code_run snippets");
        return Ok(0);
    }
    let shown: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.created_at.clone(),
                r.language.clone(),
                r.error_category.clone().unwrap_or_default(),
                r.exit_code.map_or("-".into(), |c| c.to_string()),
                r.duration_ms.to_string(),
                one_line(r.error.as_deref().unwrap_or(""), 80),
                one_line(&r.code, 40),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "ID", "WHEN", "LANGUAGE", "CATEGORY", "EXIT", "MS", "ERROR", "CODE"
            ],
            &shown,
            &[0, 4, 5]
        )
    );
    Ok(0)
}
