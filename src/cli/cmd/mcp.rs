//! `mcp list`, `mcp tools NAME`, `mcp test NAME`, `mcp approve NAME`: the
//! configured MCP servers, and one started in the sandbox to list its
//! tools, time its steps, or approve its tools' definitions (`mcp::pins`:
//! only approved tools are offered to a model).

use crate::cli::ctx::{Ctx, print_json};
use crate::config::{Config, McpServerConfig};
use crate::error::{Error, Result, exit};
use crate::mcp::{Launch, McpError, Server, pins};
use crate::util::printable;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Whether `s`'s tools are offered: `approved`, `changed` (refused until
/// approved again) or `not approved`.
fn approval(cfg: &Config, s: &McpServerConfig) -> &'static str {
    match (
        pins::read(cfg, &s.name).is_some(),
        pins::changed(cfg, &s.name).is_some(),
    ) {
        (false, _) => "not approved",
        (true, true) => "changed",
        (true, false) => "approved",
    }
}

fn server<'c>(cfg: &'c Config, name: &str) -> Result<&'c McpServerConfig> {
    if let Some(s) = cfg.mcp.servers.get(name) {
        return Ok(s);
    }
    let hint = crate::util::suggest::nearest(name, cfg.mcp.servers.keys().map(String::as_str))
        .map(|n| format!(" (did you mean \"{n}\"?)"))
        .unwrap_or_default();
    let known = if cfg.mcp.servers.is_empty() {
        "none is configured: add [mcp.servers.NAME] to the config (README: MCP servers)".into()
    } else {
        format!(
            "configured: {}",
            cfg.mcp
                .servers
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Err(Error::usage(format!(
        "no MCP server \"{}\"{hint}; {known}",
        printable(name)
    )))
}

/// Which tools the config lets through, in words.
fn allowed(s: &McpServerConfig) -> String {
    let mut out = match &s.tools_allow {
        None => "all".to_string(),
        Some(a) if a.is_empty() => "none".to_string(),
        Some(a) => a.join(","),
    };
    if !s.tools_deny.is_empty() {
        out.push_str(&format!(" but {}", s.tools_deny.join(",")));
    }
    out
}

fn server_value(cfg: &Config, s: &McpServerConfig) -> Value {
    let approval = approval(cfg, s);
    json!({
        "name": s.name,
        "command": s.command,
        "url": s.url,
        "bearer_token_env": s.bearer_token_env,
        "args": s.args,
        "env": s.env,
        "cwd": s.cwd.as_ref().map(|p| p.display().to_string()),
        "network": s.network,
        "timeout_secs": s.timeout_secs,
        "tools_allow": s.tools_allow,
        "tools_deny": s.tools_deny,
        "risk": s.risk.as_str(),
        "read_only_tools": s.read_only_tools,
        "read_paths": s.read_paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "approval": approval,
        "offered_to_model": approval == "approved",
    })
}

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    if json {
        let rows: Vec<Value> = cfg
            .mcp
            .servers
            .values()
            .map(|s| server_value(&cfg, s))
            .collect();
        print_json(&rows);
        return Ok(exit::OK);
    }
    if cfg.mcp.servers.is_empty() {
        println!("no MCP servers: add [mcp.servers.NAME] to the config (README: MCP servers)");
        return Ok(exit::OK);
    }
    let cells: Vec<Vec<String>> = cfg
        .mcp
        .servers
        .values()
        .map(|s| {
            let mut command = vec![s.url.clone().unwrap_or_else(|| s.command.clone())];
            command.extend(s.args.iter().map(|a| crate::util::shell_quote(a)));
            vec![
                printable(&s.name),
                printable(&command.join(" ")),
                printable(&allowed(s)),
                s.risk.as_str().to_string(),
                format!("{}s", s.timeout_secs),
                if s.env.is_empty() {
                    "-".into()
                } else {
                    s.env.join(",")
                },
                approval(&cfg, s).to_string(),
            ]
        })
        .collect();
    println!(
        "{}",
        crate::cli::ctx::table(
            &[
                "SERVER", "COMMAND", "TOOLS", "RISK", "TIMEOUT", "ENV", "APPROVAL"
            ],
            &cells,
            &[]
        )
    );
    if cfg
        .mcp
        .servers
        .values()
        .any(|s| approval(&cfg, s) != "approved")
    {
        println!("only approved servers' tools are offered: `latchclaw mcp approve NAME`");
    }
    Ok(exit::OK)
}

/// The config with this run's workspace, and `name`'s server started.
fn start(ctx: &Ctx, name: &str) -> Result<(Config, std::result::Result<Server, McpError>)> {
    let mut cfg = ctx.load_config()?;
    server(&cfg, name)?;
    let from = crate::cli::workspace::choose(&mut cfg, None)?;
    if let Some(note) = crate::cli::workspace::note(&cfg, &from) {
        log::warn!(target: "event::workspace_configured", "{note}");
    }
    let s = server(&cfg, name)?.clone();
    let launch = Launch {
        cfg: &cfg,
        workspace: &cfg.workspace_dir,
        autonomy: cfg.security.autonomy,
        redactor: std::sync::Arc::clone(&ctx.redactor),
    };
    let deadline = Instant::now() + Duration::from_secs(s.timeout_secs);
    let started = Server::start(&s, &launch, deadline);
    Ok((cfg, started))
}

fn error_value(e: &McpError) -> Value {
    json!({"kind": e.kind.as_str(), "message": e.message})
}

/// `mcp COMMAND NAME` when the server could not be started or listed: said
/// on stderr (or as `--json`), exit 3.
fn not_started(command: &str, name: &str, e: &McpError, then: &str, json: bool) -> i32 {
    if json {
        print_json(&json!({"server": name, "ok": false, "error": error_value(e)}));
    } else {
        eprintln!("latchclaw: mcp {command} {}: {e}{then}", printable(name));
    }
    exit::RUNTIME
}

pub fn tools(ctx: &Ctx, name: &str, json: bool) -> Result<i32> {
    let (cfg, started) = start(ctx, name)?;
    let s = match started {
        Ok(s) => s,
        Err(e) => return Ok(not_started("tools", name, &e, "", json)),
    };
    let tools: Vec<Value> = s
        .tools()
        .iter()
        .map(|t| {
            let mut v = t.definition();
            v["read_only"] = json!(t.read_only);
            v
        })
        .collect();
    let skipped: Vec<Value> = s
        .skipped()
        .iter()
        .map(|k| json!({"name": k.name, "why": k.why}))
        .collect();
    let (server_name, server_version) = s.server_info();
    let (server_name, server_version) = (server_name.to_string(), server_version.to_string());
    let out = json!({
        "server": name,
        "ok": true,
        "protocol_version": s.protocol_version(),
        "server_info": {"name": server_name, "version": server_version},
        "tools": tools,
        "skipped": skipped,
        "approval": approval(&cfg, server(&cfg, name)?),
    });
    s.stop();
    if json {
        print_json(&out);
        return Ok(exit::OK);
    }
    println!(
        "{name}: {} {} (protocol {}), {}",
        printable(&server_name),
        printable(&server_version),
        out["protocol_version"].as_str().unwrap_or(""),
        crate::cli::ctx::count(tools.len() as u64, "tool")
    );
    for t in &tools {
        let text = |k: &str| printable(t[k].as_str().unwrap_or(""));
        println!(
            "  {}{}  ({})\n      {}",
            text("model_name"),
            if t["read_only"] == true {
                " [read-only]"
            } else {
                ""
            },
            text("name"),
            match text("description") {
                d if d.is_empty() => "(no description)".to_string(),
                d => d,
            }
        );
    }
    for k in &skipped {
        println!(
            "  left out: {}: {}",
            printable(k["name"].as_str().unwrap_or("")),
            printable(k["why"].as_str().unwrap_or(""))
        );
    }
    println!(
        "approval: {}",
        out["approval"].as_str().unwrap_or("not approved")
    );
    Ok(exit::OK)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

pub fn test(ctx: &Ctx, name: &str, json: bool) -> Result<i32> {
    let t0 = Instant::now();
    let (cfg, started) = start(ctx, name)?;
    let timeout = Duration::from_secs(server(&cfg, name)?.timeout_secs);
    let mut steps: Vec<Value> = Vec::new();
    let mut failed: Option<McpError> = None;
    match started {
        Err(e) => {
            steps.push(json!({"step": "start", "ok": false, "ms": ms(t0.elapsed()), "error": error_value(&e)}));
            failed = Some(e);
        }
        Ok(mut s) => {
            let t = s.timings;
            steps.push(json!({"step": "start", "ok": true, "ms": ms(t.spawn)}));
            steps.push(json!({"step": "initialize", "ok": true, "ms": ms(t.initialize), "protocol_version": s.protocol_version()}));
            steps.push(json!({"step": "tools/list", "ok": true, "ms": ms(t.list), "tools": s.tools().len(), "skipped": s.skipped().len()}));
            match s.ping(Instant::now() + timeout) {
                Ok(d) => steps.push(json!({"step": "ping", "ok": true, "ms": ms(d)})),
                Err(e) => {
                    steps.push(json!({"step": "ping", "ok": false, "error": error_value(&e)}));
                    failed = Some(e);
                }
            }
            let pid = s.pid();
            let t = Instant::now();
            s.stop();
            let left = std::path::Path::new(&format!("/proc/{pid}/status")).exists();
            steps.push(json!({"step": "stop", "ok": !left, "ms": ms(t.elapsed())}));
        }
    }
    let ok = failed.is_none();
    if json {
        print_json(&json!({
            "server": name,
            "ok": ok,
            "steps": steps,
            "total_ms": ms(t0.elapsed()),
        }));
    } else {
        for st in &steps {
            let step = st["step"].as_str().unwrap_or("");
            match &st["error"] {
                Value::Null => {
                    let extra = match step {
                        "initialize" => format!(
                            " (protocol {})",
                            st["protocol_version"].as_str().unwrap_or("")
                        ),
                        "tools/list" => format!(
                            " ({}, {} left out)",
                            crate::cli::ctx::count(st["tools"].as_u64().unwrap_or(0), "tool"),
                            st["skipped"]
                        ),
                        _ => String::new(),
                    };
                    println!(
                        "ok    {step:<11} {:>9.2} ms{extra}",
                        st["ms"].as_f64().unwrap_or(0.0)
                    );
                }
                e => println!(
                    "FAIL  {step:<11} {} ({})",
                    printable(e["message"].as_str().unwrap_or("")),
                    e["kind"].as_str().unwrap_or("")
                ),
            }
        }
        println!(
            "{name}: {} in {:.0} ms",
            if ok { "ok" } else { "failed" },
            ms(t0.elapsed())
        );
    }
    Ok(if ok { exit::OK } else { exit::RUNTIME })
}

/// Starts the server, lists its tools and records their definitions as
/// approved, after saying what changed since the last approval. Nothing
/// is recorded when the server cannot be started or listed.
pub fn approve(ctx: &Ctx, name: &str, json: bool) -> Result<i32> {
    let (cfg, started) = start(ctx, name)?;
    let s = match started {
        Ok(s) => s,
        Err(e) => return Ok(not_started("approve", name, &e, "; nothing approved", json)),
    };
    let current = pins::definitions(name, s.tools());
    let names: Vec<String> = s.tools().iter().map(|t| t.model_name.clone()).collect();
    s.stop();
    let before = pins::read(&cfg, name);
    let changes = crate::external::differences(before.as_ref(), &current);
    pins::approve(&cfg, name, &current)
        .map_err(|e| Error::runtime(format!("cannot record the approval: {e}")))?;
    log::info!(target: "event::mcp_approved", "server={name} changes={}", changes.len());
    if json {
        print_json(&json!({
            "server": name,
            "ok": true,
            "changes": changes,
            "hash": current["hash"],
            "tools": names,
        }));
        return Ok(exit::OK);
    }
    if changes.is_empty() {
        println!("MCP server \"{name}\": nothing changed; approved as it is");
    } else {
        println!("MCP server \"{name}\": what changed since it was approved:");
        for c in &changes {
            println!("  {c}");
        }
    }
    println!(
        "approved: {} offered to the model{}{}",
        crate::cli::ctx::count(names.len() as u64, "tool"),
        if names.is_empty() { "" } else { ": " },
        names.join(", ")
    );
    Ok(exit::OK)
}
