//! The MCP servers of one run: each started in the sandbox when the run
//! first calls one of its tools (never before: a run that calls none
//! starts none), checked against what the operator approved
//! (`mcp::pins`), kept for the run's later calls and stopped when the run
//! ends, with everything it started. A server that hung, crashed or broke
//! the protocol is stopped at once; the next call starts a fresh one.

use crate::external::ExternalTool;
use crate::mcp::{ErrorKind, Launch, Server, pins};
use crate::security::redact::Redactor;
use crate::tools::{ToolCtx, ToolResult};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

#[derive(Default)]
pub struct McpServers {
    running: RefCell<BTreeMap<String, Server>>,
    /// Servers found listing other definitions than approved: refused for
    /// the rest of the run without being started again.
    changed: RefCell<BTreeMap<String, String>>,
}

impl McpServers {
    /// Calls `tool` of `server` for the external tool `ext` (the gate
    /// allowed it, its started receipt is written): the server started
    /// first if this run has not yet, all within the call's deadline.
    pub fn call(
        &self,
        ext: &ExternalTool,
        server: &str,
        tool: &str,
        args: &Value,
        ctx: &ToolCtx,
        redactor: &Arc<Redactor>,
    ) -> ToolResult {
        let t0 = Instant::now();
        if let Some(why) = self.changed.borrow().get(server) {
            return ToolResult::err(why.clone());
        }
        let mut running = self.running.borrow_mut();
        let started_now = !running.contains_key(server);
        if started_now {
            match start(server, ctx, redactor) {
                Ok(s) => {
                    running.insert(server.to_string(), s);
                }
                Err(Refused::Changed(why)) => {
                    self.changed
                        .borrow_mut()
                        .insert(server.to_string(), why.clone());
                    return ToolResult::err(why);
                }
                Err(Refused::Failed(why)) => return ToolResult::err(why),
            }
        }
        let Some(s) = running.get_mut(server) else {
            return ToolResult::err(format!("MCP server \"{server}\" is not running"));
        };
        let stop = crate::mcp::run_stop(ctx.control, ctx.gate.estop_path());
        let outcome = s.call(tool, args, ctx.deadline, &stop);
        let metadata = json!({
            "mcp_server": server,
            "tool": tool,
            "started_server": started_now,
            "duration_ms": t0.elapsed().as_millis() as u64,
        });
        let with = |r: ToolResult| ToolResult {
            metadata: Some(metadata.clone()),
            ..r
        };
        match outcome {
            Ok(r) if !r.is_error => with(ToolResult::ok(r.text)),
            Ok(r) => with(ToolResult::err(format!(
                "{} reported an error: {}",
                ext.source,
                crate::util::one_line(&r.text, 2000)
            ))),
            Err(e) => {
                // Nothing later can trust a server that hung or broke the
                // protocol: it goes now, with everything it started.
                if !matches!(e.kind, ErrorKind::Rpc | ErrorKind::UnknownTool)
                    && let Some(s) = running.remove(server)
                {
                    s.stop();
                }
                let estop = e.kind == ErrorKind::Cancelled
                    && crate::security::estop_engaged(ctx.gate.estop_path()).is_some();
                let mut r = with(ToolResult::err(format!("{}: {e}", ext.source)));
                r.estop = estop;
                if let Some(m) = r.metadata.as_mut() {
                    m["mcp_error"] = json!(e.kind.as_str());
                }
                r
            }
        }
    }
}

/// Starts `server` and checks its tools against its pin: a server that
/// lists other definitions than were approved is stopped, marked changed
/// (its tools refused from now on, in this run and the next) and not
/// called.
enum Refused {
    Changed(String),
    /// Why it could not be started, for the model.
    Failed(String),
}

fn start(server: &str, ctx: &ToolCtx, redactor: &Arc<Redactor>) -> Result<Server, Refused> {
    let cfg = ctx.cfg;
    let Some(config) = cfg.mcp.servers.get(server) else {
        return Err(Refused::Failed(format!(
            "MCP server \"{server}\" is no longer configured"
        )));
    };
    let workspace = ctx
        .gate
        .workspace()
        .map_err(|e| Refused::Failed(e.reason))?;
    let launch = Launch {
        cfg,
        workspace,
        autonomy: ctx.gate.autonomy(),
        redactor: Arc::clone(redactor),
    };
    let s = Server::start(config, &launch, ctx.deadline).map_err(|e| {
        Refused::Failed(format!("MCP server \"{server}\" could not be started: {e}"))
    })?;
    log::info!(
        target: "event::mcp_started",
        "server={server} spawn_ms={} initialize_ms={} list_ms={}",
        s.timings.spawn.as_millis(),
        s.timings.initialize.as_millis(),
        s.timings.list.as_millis()
    );
    let approved = pins::read(cfg, server);
    if approved
        .as_ref()
        .is_some_and(|p| pins::matches(p, config, s.tools()))
    {
        return Ok(s);
    }
    let now = pins::definitions(server, s.tools());
    s.stop();
    let why = match pins::mark_changed(cfg, server, &now) {
        Ok(()) => "its tools are refused until".to_string(),
        Err(e) => format!("(the change could not be recorded: {e}); approve it with"),
    };
    log::warn!(
        target: "event::mcp_definitions_changed",
        "MCP server \"{server}\" lists other tool definitions than were approved"
    );
    Err(Refused::Changed(format!(
        "MCP server \"{server}\" lists other tool definitions than were approved, so none of \
         its tools runs; {why} `latchclaw mcp approve {server}` shows the difference and \
         approves them"
    )))
}
