//! The MCP client over stdio (and Streamable HTTP: `http.rs`): a server
//! from `[mcp.servers.NAME]` started in the sandbox (`child.rs`), spoken
//! to in JSON-RPC 2.0 a line at a time (`wire.rs`), its tools listed with the names and descriptions a model
//! may see (`content.rs`), and called within a deadline. Synchronous:
//! threads and channels, no async runtime.
//!
//! The seam for the runtime: [`Server::start`], [`Server::tools`],
//! [`Server::call`], [`Server::stop`]. Nothing here decides whether a call
//! may run (the gate does) or records it (receipts do); MCP tools are not
//! offered to a model yet.
//!
//! Files: `error.rs` (the kinds), `wire.rs` (reader and writer threads),
//! `content.rs` (names, descriptions, results as text), `child.rs` (the
//! process in the sandbox), `http.rs` (a server reached at its url), this
//! file the protocol.

mod child;
mod content;
mod error;
mod http;
pub mod pins;
mod wire;

pub use child::{BASE_ENV, Launch, SERVER_PATH, STDERR_LOG_MAX};
pub use content::{
    DESCRIPTION_MAX_CHARS, MODEL_NAME_MAX, McpTool, content_text, model_name, sanitize,
    valid_model_name,
};
pub use error::{ErrorKind, McpError};
pub use wire::MAX_LINE;

use crate::config::McpServerConfig;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};
use wire::Incoming;

/// The protocol version offered first, and every one accepted.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// `tools/list` pages read before the list is refused as endless.
pub const MAX_PAGES: usize = 32;
/// Tools a server may list.
pub const MAX_TOOLS: usize = 512;
/// Longest tool name taken from a server, in bytes.
const TOOL_NAME_MAX: usize = 128;

/// How often a waiting call looks at its cancel function.
const POLL: Duration = Duration::from_millis(20);

/// The cancel check a run gives [`Server::call`]: Ctrl-C or a terminating
/// signal (`control`, whose handlers the run installed), or the emergency
/// stop (`estop`: `Config::estop_path`, looked at on every poll, a stat).
pub fn run_stop<'a>(
    control: &'a crate::control::RunControl,
    estop: &'a std::path::Path,
) -> impl Fn() -> bool + 'a {
    move || control.cancelled() || crate::security::estop_engaged(estop).is_some()
}

/// A tool the server listed that is not offered, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub name: String,
    pub why: String,
}

/// A `tools/call` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// `isError: true`: the tool failed; `text` says how (for the model).
    pub is_error: bool,
    /// The content as text ([`content_text`]), capped at
    /// `tool_output_max_bytes`. Not yet redacted: the runtime redacts every
    /// tool result.
    pub text: String,
    pub structured: Option<Value>,
}

/// How long the steps of [`Server::start`] took.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub spawn: Duration,
    pub initialize: Duration,
    pub list: Duration,
}

/// A started, initialised server.
pub struct Server {
    config: McpServerConfig,
    child: child::Child,
    redactor: std::sync::Arc<crate::security::redact::Redactor>,
    max_output: usize,
    next_id: u64,
    protocol_version: String,
    server_name: String,
    server_version: String,
    tools: Vec<McpTool>,
    skipped: Vec<Skipped>,
    /// Set once the server cannot be talked to any more: every later
    /// request fails with it.
    broken: Option<McpError>,
    pub timings: Timings,
}

impl Server {
    /// Starts `config`'s server in the sandbox, initialises it (protocol
    /// version negotiated), sends `notifications/initialized` and lists its
    /// tools, all by `deadline`. On any error the server is stopped.
    pub fn start(
        config: &McpServerConfig,
        launch: &Launch,
        deadline: Instant,
    ) -> Result<Server, McpError> {
        let t0 = Instant::now();
        let child = child::Child::spawn(config, launch)?;
        let mut server = Server {
            config: config.clone(),
            child,
            redactor: std::sync::Arc::clone(&launch.redactor),
            max_output: launch.cfg.tool_output_max_bytes,
            next_id: 1,
            protocol_version: String::new(),
            server_name: String::new(),
            server_version: String::new(),
            tools: Vec::new(),
            skipped: Vec::new(),
            broken: None,
            timings: Timings::default(),
        };
        server.timings.spawn = t0.elapsed();
        let t1 = Instant::now();
        let has_tools = server.initialize(deadline)?;
        server.timings.initialize = t1.elapsed();
        let t2 = Instant::now();
        if has_tools {
            server.list_tools(deadline)?;
        }
        server.timings.list = t2.elapsed();
        Ok(server)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The version both sides speak.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// The server's `serverInfo` name and version, sanitised.
    pub fn server_info(&self) -> (&str, &str) {
        (&self.server_name, &self.server_version)
    }

    /// The tools offered: listed by the server, allowed by the config.
    pub fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    /// Listed tools left out (by `tools_allow`/`tools_deny`, or unusable).
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The tool a model calls `model_name`.
    pub fn tool_by_model_name(&self, model_name: &str) -> Option<&McpTool> {
        self.tools.iter().find(|t| t.model_name == model_name)
    }

    /// Notifications the server sent (ignored), and requests of its own it
    /// made (refused).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.child.stats.notifications.load(Ordering::Relaxed),
            self.child.stats.server_requests.load(Ordering::Relaxed),
        )
    }

    /// The last of the server's stderr, redacted.
    pub fn stderr_tail(&self) -> String {
        self.child.stderr_tail()
    }

    /// The server's process id (outside its PID namespace).
    pub fn pid(&self) -> i32 {
        self.child.pid()
    }

    /// A `ping`; the round trip's time.
    pub fn ping(&mut self, deadline: Instant) -> Result<Duration, McpError> {
        let t = Instant::now();
        self.request("ping", None, deadline, &|| false)?;
        Ok(t.elapsed())
    }

    /// Calls the server's tool `tool` (its own name, one of
    /// [`Server::tools`]) with `args` by `deadline`; `cancel` is asked
    /// every few milliseconds (Ctrl-C, the emergency stop) and, like the
    /// deadline, ends the call with `notifications/cancelled` sent.
    /// `Ok` with `is_error` for a tool's own failure; `Err` for everything
    /// else. The server keeps running after an error; [`Server::stop`]
    /// ends it.
    pub fn call(
        &mut self,
        tool: &str,
        args: &Value,
        deadline: Instant,
        cancel: &dyn Fn() -> bool,
    ) -> Result<CallResult, McpError> {
        if !self.tools.iter().any(|t| t.name == tool) {
            return Err(McpError::new(
                ErrorKind::UnknownTool,
                format!(
                    "server {} offers no tool \"{}\"",
                    self.config.name,
                    crate::util::printable(&wire::cut(tool, 100))
                ),
            ));
        }
        let args = match args {
            Value::Null => json!({}),
            Value::Object(_) => args.clone(),
            _ => {
                return Err(McpError::new(
                    ErrorKind::Protocol,
                    "a tool's arguments must be a JSON object",
                ));
            }
        };
        let params = json!({"name": tool, "arguments": args});
        let result = self.request("tools/call", Some(params), deadline, cancel)?;
        let Some(obj) = result.as_object() else {
            return Err(self.protocol("a tools/call result that is not an object"));
        };
        let is_error = obj.get("isError").and_then(Value::as_bool) == Some(true);
        let structured = obj.get("structuredContent").cloned();
        let text = content_text(obj.get("content"), structured.as_ref());
        let text = crate::util::truncate_middle(&text, self.max_output);
        Ok(CallResult {
            is_error,
            text,
            structured,
        })
    }

    /// Closes the server's stdin, waits briefly, then kills its sandbox:
    /// nothing it started is left running. Also on drop.
    pub fn stop(mut self) {
        self.child.stop();
    }

    fn initialize(&mut self, deadline: Instant) -> Result<bool, McpError> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "latchclaw", "version": env!("CARGO_PKG_VERSION")},
        });
        let r = self.request("initialize", Some(params), deadline, &|| false)?;
        let Some(version) = r.get("protocolVersion").and_then(Value::as_str) else {
            return Err(self.protocol("an initialize result with no protocolVersion"));
        };
        if !PROTOCOL_VERSIONS.contains(&version) {
            let e = McpError::new(
                ErrorKind::Version,
                format!(
                    "server {} speaks MCP protocol version \"{}\"; latchclaw speaks {}",
                    self.config.name,
                    crate::util::printable(&wire::cut(version, 40)),
                    PROTOCOL_VERSIONS.join(", ")
                ),
            );
            self.broken = Some(e.clone());
            return Err(e);
        }
        self.protocol_version = version.to_string();
        let info = |k: &str| {
            r.pointer(&format!("/serverInfo/{k}"))
                .and_then(Value::as_str)
                .map(|s| sanitize(s, 80))
                .unwrap_or_default()
        };
        self.server_name = info("name");
        self.server_version = info("version");
        self.child.send(wire::line(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ))?;
        Ok(r.pointer("/capabilities/tools").is_some())
    }

    fn list_tools(&mut self, deadline: Instant) -> Result<(), McpError> {
        let mut cursor: Option<String> = None;
        let mut seen_cursors: Vec<String> = Vec::new();
        let mut listed = 0usize;
        for _ in 0..MAX_PAGES {
            let params = cursor.as_ref().map(|c| json!({"cursor": c}));
            let r = self.request("tools/list", params, deadline, &|| false)?;
            let Some(tools) = r.get("tools").and_then(Value::as_array) else {
                return Err(self.protocol("a tools/list result with no tools array"));
            };
            listed += tools.len();
            if listed > MAX_TOOLS {
                return Err(self.protocol(&format!("more than {MAX_TOOLS} tools listed")));
            }
            for t in tools {
                self.take_tool(t);
            }
            match r.get("nextCursor").and_then(Value::as_str) {
                Some(c) if !c.is_empty() => {
                    if seen_cursors.iter().any(|s| s == c) {
                        return Err(self.protocol("tools/list repeats a cursor"));
                    }
                    seen_cursors.push(c.to_string());
                    cursor = Some(c.to_string());
                }
                _ => return Ok(()),
            }
        }
        Err(self.protocol(&format!("tools/list runs past {MAX_PAGES} pages")))
    }

    /// One listed tool: offered, or skipped with why.
    fn take_tool(&mut self, t: &Value) {
        let raw = t.get("name").and_then(Value::as_str).unwrap_or("");
        let shown = crate::util::printable(&wire::cut(raw, 80));
        let mut skip = |why: String| {
            self.skipped.push(Skipped {
                name: shown.clone(),
                why,
            })
        };
        if raw.is_empty() || raw.len() > TOOL_NAME_MAX {
            return skip(format!(
                "a name of {} bytes (1 to {TOOL_NAME_MAX})",
                raw.len()
            ));
        }
        if !self.config.tool_allowed(raw) {
            return skip("left out by tools_allow/tools_deny".into());
        }
        let schema = match t.get("inputSchema") {
            None => json!({"type": "object"}),
            Some(s @ Value::Object(_)) => s.clone(),
            Some(_) => return skip("an inputSchema that is not an object".into()),
        };
        if self.tools.iter().any(|x| x.name == raw) {
            return skip("listed twice".into());
        }
        let mut model = model_name(&self.config.name, raw);
        if self.tools.iter().any(|x| x.model_name == model) {
            model = content::with_hash(&model, raw);
        }
        let description = t.get("description").and_then(Value::as_str).unwrap_or("");
        let definition = json!({
            "name": raw,
            "description": description,
            "inputSchema": t.get("inputSchema").cloned().unwrap_or(Value::Null),
        });
        let definition_sha256 = crate::util::sha256_hex(definition.to_string().as_bytes());
        let description = sanitize(&self.redactor.redact(description), DESCRIPTION_MAX_CHARS);
        self.tools.push(McpTool {
            name: raw.to_string(),
            model_name: model,
            description,
            input_schema: schema,
            read_only: self.config.read_only_tools.iter().any(|r| r == raw),
            definition_sha256,
        });
    }

    fn protocol(&self, what: &str) -> McpError {
        McpError::new(
            ErrorKind::Protocol,
            format!("server {}: {what}", self.config.name),
        )
    }

    /// Sends a request and waits for its response by `deadline`; on the
    /// deadline or `cancel`, sends `notifications/cancelled` (never for
    /// `initialize`). Responses to other ids are dropped.
    fn request(
        &mut self,
        method: &str,
        params: Option<Value>,
        deadline: Instant,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Value, McpError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        // Left from an earlier call that ended first: stale.
        while let Ok(m) = self.child.from_server.try_recv() {
            if let Some(e) = self.fatal(m) {
                return Err(e);
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = params {
            msg["params"] = p;
        }
        self.child.send(wire::line(&msg))?;
        let name = self.config.name.clone();
        loop {
            let now = Instant::now();
            if now >= deadline || cancel() {
                let timed_out = now >= deadline;
                if method != "initialize" {
                    let reason = if timed_out { "timeout" } else { "cancelled" };
                    let _ = self.child.send(wire::line(&json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": reason},
                    })));
                }
                return Err(if timed_out {
                    McpError::new(
                        ErrorKind::Timeout,
                        format!("server {name} did not answer {method} in time"),
                    )
                } else {
                    McpError::new(
                        ErrorKind::Cancelled,
                        format!("{method} to server {name} was cancelled"),
                    )
                });
            }
            let wait = POLL.min(deadline - now);
            match self.child.from_server.recv_timeout(wait) {
                Ok(Incoming::Response { id: got, result }) if got == id => {
                    return result.map_err(|e| {
                        McpError::new(
                            ErrorKind::Rpc,
                            format!(
                                "server {name} answered {method} with error {}: {}",
                                e.code,
                                self.redactor.scrub_cut(&e.message, 300)
                            ),
                        )
                    });
                }
                Ok(Incoming::Failed { id: got, why }) if got == id => {
                    return Err(McpError::new(
                        ErrorKind::Http,
                        format!(
                            "server {name}: {method}: {}",
                            self.redactor.scrub_cut(&why, 300)
                        ),
                    ));
                }
                Ok(Incoming::Response { .. } | Incoming::Failed { .. }) => {
                    self.child.stats.unmatched.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Incoming::Malformed(what)) => {
                    return Err(McpError::new(
                        ErrorKind::Protocol,
                        format!("server {name} wrote {what} while answering {method}"),
                    ));
                }
                Ok(m @ (Incoming::TooLong | Incoming::Closed)) => {
                    return Err(self.fatal(m).unwrap_or_else(|| self.gone()));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let e = self.gone();
                    self.broken = Some(e.clone());
                    return Err(e);
                }
            }
        }
    }

    /// The error a message means for every later request, if it means one
    /// (the output closed, or a line too long to read past).
    fn fatal(&mut self, m: Incoming) -> Option<McpError> {
        let e = match m {
            Incoming::TooLong => McpError::new(
                ErrorKind::Protocol,
                format!(
                    "server {} wrote a line longer than {} MiB",
                    self.config.name,
                    MAX_LINE >> 20
                ),
            ),
            Incoming::Closed => self.gone(),
            _ => return None,
        };
        self.broken = Some(e.clone());
        Some(e)
    }

    /// The server ended: how, and the last of its stderr.
    fn gone(&mut self) -> McpError {
        let status = self.child.exit_status(Duration::from_millis(200));
        self.child.settle_stderr(Duration::from_millis(200));
        let how = match status {
            Some(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(c), _) => format!("exited with code {c}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                _ => "exited".to_string(),
            },
            None => "closed its output".to_string(),
        };
        let tail = self.child.stderr_tail();
        let tail = tail.trim();
        let mut msg = format!("server {} {how}", self.config.name);
        if !tail.is_empty() {
            let last: Vec<&str> = tail.lines().rev().take(3).collect();
            let last: Vec<&str> = last.into_iter().rev().collect();
            msg.push_str(&format!("; its stderr ends: {}", last.join(" | ")));
        }
        McpError::new(ErrorKind::Exited, msg)
    }
}
