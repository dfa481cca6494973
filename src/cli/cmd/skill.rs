//! `skill list`, `skill show`.

use crate::cli::ctx::{Ctx, print_json};
use crate::config::Config;
use crate::error::{Result, exit};
use crate::skills::{self, Source};
use crate::util::{for_terminal, printable};
use serde_json::{Value, json};

/// "yes (2)": enabled, second in `[skills] enabled`.
fn position(cfg: &Config, name: &str) -> Option<usize> {
    cfg.skills
        .enabled
        .iter()
        .position(|n| n == name)
        .map(|i| i + 1)
}

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let mut rows: Vec<Value> = skills::list(&cfg)?
        .into_iter()
        .map(|l| {
            let pos = position(&cfg, &l.name).filter(|_| !l.shadowed);
            let (tools, description, error) = match &l.skill {
                Ok(s) => (s.tools.clone(), Some(s.description.clone()), None),
                Err(e) => (Vec::new(), None, Some(e.clone())),
            };
            let version = l.skill.as_ref().ok().and_then(|s| s.version.clone());
            json!({
                "name": l.name,
                "enabled": pos.is_some(),
                "position": pos,
                "source": l.source.as_str(),
                "shadowed": l.shadowed,
                "path": l.path.display().to_string(),
                "tools": tools,
                "description": description,
                "version": version,
                "error": error,
            })
        })
        .collect();
    // An enabled name with no skill behind it is listed too: it is what
    // `config validate` will refuse.
    for (i, name) in cfg.skills.enabled.iter().enumerate() {
        if !rows.iter().any(|r| r["name"] == name.as_str()) {
            rows.push(json!({
                "name": name, "enabled": true, "position": i + 1, "source": null,
                "shadowed": false, "path": null, "tools": [], "description": null,
                "error": "not found",
            }));
        }
    }
    if json {
        print_json(&rows);
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        println!(
            "no skills: a skill is {} (README: skills)",
            cfg.state_dir.join("skills/NAME/SKILL.md").display()
        );
    } else {
        let text = |v: &Value| v.as_str().map(printable).unwrap_or_default();
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let tools: Vec<String> = r["tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(text)
                    .collect();
                vec![
                    text(&r["name"]),
                    match r["position"].as_u64() {
                        Some(p) => format!("yes ({p})"),
                        None => "no".into(),
                    },
                    match (r["source"].as_str(), r["shadowed"] == true) {
                        (Some(s), true) => format!("{s} (shadowed)"),
                        (Some(s), false) => s.to_string(),
                        (None, _) => "-".into(),
                    },
                    if tools.is_empty() {
                        "-".into()
                    } else {
                        tools.join(",")
                    },
                    match r["error"].as_str() {
                        Some(e) => format!("unusable: {}", printable(e)),
                        None => text(&r["description"]),
                    },
                ]
            })
            .collect();
        println!(
            "{}",
            crate::cli::ctx::table(
                &["SKILL", "ENABLED", "SOURCE", "TOOLS", "DESCRIPTION"],
                &cells,
                &[]
            )
        );
    }
    let ws_dir = cfg.workspace_dir.join(".latchclaw/skills");
    if !cfg.skills.workspace && std::fs::symlink_metadata(&ws_dir).is_ok_and(|m| m.is_dir()) {
        println!(
            "(skills in {} are not used: [skills] workspace = false)",
            ws_dir.display()
        );
    }
    Ok(exit::OK)
}

pub fn show(ctx: &Ctx, name: &str, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let s = skills::find(&cfg, name)?;
    let pos = position(&cfg, &s.name);
    if json {
        print_json(&json!({
            "name": s.name,
            "description": s.description,
            "version": s.version,
            "tools": s.tools,
            "source": s.source.as_str(),
            "path": s.path.display().to_string(),
            "enabled": pos.is_some(),
            "position": pos,
            "body": s.body,
        }));
        return Ok(exit::OK);
    }
    let source = match s.source {
        Source::State => "state",
        Source::Workspace => "workspace",
    };
    println!("name: {}", s.name);
    println!("description: {}", printable(&s.description));
    if let Some(v) = &s.version {
        println!("version: {v}");
    }
    println!(
        "tools: {}",
        if s.tools.is_empty() {
            "none".into()
        } else {
            s.tools.join(", ")
        }
    );
    println!(
        "source: {source} ({})",
        printable(&s.path.display().to_string())
    );
    match pos {
        Some(p) => println!(
            "enabled: yes ({p} of {} in [skills] enabled)",
            cfg.skills.enabled.len()
        ),
        None => println!("enabled: no"),
    }
    println!("\n{}", for_terminal(&s.body));
    Ok(exit::OK)
}
