//! `plugin list`, `plugin show`, `plugin install`, `plugin remove`,
//! `plugin approve`.

use crate::cli::ctx::{Ctx, print_json};
use crate::config::Config;
use crate::error::{Result, exit};
use crate::plugins::{self, Installed};
use crate::util::printable;
use serde_json::{Value, json};
use std::path::Path;

/// One plugin as data: what `list` and `show` print.
fn row(cfg: &Config, p: &Installed) -> Value {
    let allowed = cfg
        .plugin_network
        .get(&p.name)
        .map_or(&[][..], Vec::as_slice);
    let tools: Vec<Value> = match &p.manifest {
        Ok(m) => m
            .tools
            .iter()
            .map(|t| {
                let mut v = t.value();
                v["description"] = json!(crate::external::sanitize(&t.description));
                // What `[plugins.NAME] network` lets it reach of `network`.
                v["granted"] = json!(crate::security::net::granted(&t.network, allowed));
                v
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let (version, problems) = match &p.manifest {
        Ok(m) => (Some(m.version.clone()), Vec::new()),
        Err(e) => (None, e.clone()),
    };
    let unapproved = p.unapproved();
    let changes = match (&p.current, unapproved.is_some()) {
        (Some(c), true) => plugins::differences(p.pinned.as_ref(), c),
        _ => Vec::new(),
    };
    json!({
        "name": p.name,
        "version": version,
        "dir": p.dir.display().to_string(),
        "approved": unapproved.is_none(),
        "unapproved": unapproved,
        "changes": changes,
        "problems": problems,
        "tools": tools,
    })
}

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let rows: Vec<Value> = plugins::installed(&cfg)?
        .iter()
        .map(|p| row(&cfg, p))
        .collect();
    if json {
        print_json(&rows);
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        println!(
            "no plugins: `latchclaw plugin install PATH` installs one into {} (README: plugins)",
            plugins::plugins_dir(&cfg).display()
        );
        return Ok(exit::OK);
    }
    let text = |v: &Value| v.as_str().map(printable).unwrap_or_else(|| "-".into());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let tools: Vec<String> = r["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| text(&t["name"]))
                .collect();
            vec![
                text(&r["name"]),
                text(&r["version"]),
                if tools.is_empty() {
                    "-".into()
                } else {
                    tools.join(",")
                },
                if r["approved"] == true {
                    "approved".into()
                } else if r["problems"].as_array().is_some_and(|p| !p.is_empty()) {
                    "broken manifest".into()
                } else {
                    "changed: `latchclaw plugin approve NAME`".into()
                },
            ]
        })
        .collect();
    println!(
        "{}",
        crate::cli::ctx::table(&["PLUGIN", "VERSION", "TOOLS", "STATE"], &cells, &[])
    );
    Ok(exit::OK)
}

pub fn show(ctx: &Ctx, name: &str, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let p = plugins::find(&cfg, name)?;
    let r = row(&cfg, &p);
    if json {
        print_json(&r);
        return Ok(exit::OK);
    }
    let text = |v: &Value| v.as_str().map(printable).unwrap_or_else(|| "-".into());
    println!("name: {}", text(&r["name"]));
    println!("version: {}", text(&r["version"]));
    println!("dir: {}", text(&r["dir"]));
    match r["unapproved"].as_str() {
        None => println!("approved: yes"),
        Some(why) => println!("approved: no: {}", printable(why)),
    }
    for problem in r["problems"].as_array().into_iter().flatten() {
        println!("problem: {}", text(problem));
    }
    for change in r["changes"].as_array().into_iter().flatten() {
        println!("changed: {}", text(change));
    }
    for t in r["tools"].as_array().into_iter().flatten() {
        println!(
            "\ntool {}: risk {}{}, timeout {}, command {}",
            text(&t["name"]),
            text(&t["risk"]),
            if t["read_only"] == true {
                ", read-only"
            } else {
                ""
            },
            t["timeout_secs"]
                .as_u64()
                .map_or("tool_timeout_secs".to_string(), |n| format!("{n} s")),
            text(&t["command"]),
        );
        let list = |k: &str| {
            let v: Vec<String> = t[k].as_array().into_iter().flatten().map(text).collect();
            if v.is_empty() {
                "none".into()
            } else {
                v.join(", ")
            }
        };
        println!(
            "  network: {} (granted: {}); env: {}",
            list("network"),
            list("granted"),
            list("env")
        );
        println!("  description: {}", text(&t["description"]));
        println!("  schema: {}", printable(&t["schema"].to_string()));
    }
    Ok(exit::OK)
}

pub fn install(ctx: &Ctx, path: &Path, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let done = plugins::install(&cfg, path)?;
    // Hosts its tools declare that the config does not grant yet: their
    // calls are refused until it does.
    let granted = cfg
        .plugin_network
        .get(&done.name)
        .map_or(&[][..], Vec::as_slice);
    let mut ungranted: Vec<String> = Vec::new();
    if let Ok(Ok(m)) = plugins::find(&cfg, &done.name).map(|p| p.manifest) {
        for h in m.tools.iter().flat_map(|t| &t.network) {
            if crate::security::net::granted(std::slice::from_ref(h), granted).is_empty()
                && !ungranted.contains(h)
            {
                ungranted.push(h.clone());
            }
        }
    }
    if json {
        print_json(&json!({
            "name": done.name,
            "dir": done.dir.display().to_string(),
            "tools": done.tools,
            "approved": true,
            "network_not_granted": ungranted,
        }));
    } else {
        println!(
            "installed plugin \"{}\" in {}, approved as it is now; its tools: {}",
            done.name,
            done.dir.display(),
            done.tools.join(", ")
        );
        if !ungranted.is_empty() {
            let list: Vec<String> = ungranted
                .iter()
                .map(|h| format!("\"{}\"", printable(h)))
                .collect();
            println!(
                "its tools declare network hosts the config does not grant, so calls that need \
                 them are refused; to grant them, add to the config:\n[plugins.{}]\nnetwork = [{}]",
                done.name,
                list.join(", ")
            );
        }
    }
    Ok(exit::OK)
}

pub fn remove(ctx: &Ctx, name: &str, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let dir = plugins::remove(&cfg, name)?;
    if json {
        print_json(&json!({"name": name, "removed": dir.display().to_string()}));
    } else {
        println!("removed plugin \"{name}\" ({})", dir.display());
    }
    Ok(exit::OK)
}

pub fn approve(ctx: &Ctx, name: &str, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let a = plugins::approve(&cfg, name)?;
    if json {
        print_json(&json!({"name": name, "changes": a.changes, "hash": a.hash}));
        return Ok(exit::OK);
    }
    if a.changes.is_empty() {
        println!("plugin \"{name}\": nothing changed; approved as it is");
    } else {
        println!("plugin \"{name}\": what changed since it was approved:");
        for c in &a.changes {
            println!("  {c}");
        }
        println!("approved as it is now");
    }
    Ok(exit::OK)
}
