//! One snippet: written to the call's tmp, its interpreter started in the
//! sandbox with the prelude's directory read-only and two pipes kept open
//! (requests in, answers out), its requests served on this thread (a
//! `tool()` runs through the runtime here, so the call path stays one
//! thread's), its output capped, its end classified, its run recorded.

use super::jobs::{Buffer, Job};
use crate::config::Config;
use crate::memory::code_runs::NewCodeRun;
use crate::security::redact::Redactor;
use crate::security::{Gate, SAFE_PATH, confine};
use crate::tools::tool::{Host, ToolCtx, ToolResult};
use serde::Serialize;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const PRELUDE_PY: &str = include_str!("prelude.py");
pub const PRELUDE_JS: &str = include_str!("prelude.js");

/// The longest request line a snippet may send (an `http()` body, a
/// tool's arguments); a longer one stops the run.
const REQUEST_MAX: usize = 8 * 1024 * 1024;
/// Answers a snippet may leave unread (beyond what its pipe holds) before
/// it is stopped: the prelude reads each before its next request, and one
/// that keeps asking without reading would grow them without bound.
const ANSWERS_UNREAD: usize = 64;
/// How often the emergency stop and Ctrl-C are looked at while a snippet runs.
const POLL: Duration = Duration::from_millis(50);

/// How a run ended, for the model, the record and `code stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// The code did not parse.
    Syntax,
    /// It raised or exited nonzero.
    Runtime,
    /// It failed after the gate or the operator refused one of its calls.
    Denied,
    /// Past its deadline (`timeout_secs`, the tool's, the run's).
    Timeout,
    /// Killed by a signal (out of memory, its own `kill`).
    Killed,
    /// More output than `[tools.code_run] max_output_bytes`.
    OutputLimit,
    /// Ctrl-C or a signal to latchclaw.
    Cancelled,
    /// The emergency stop.
    Estop,
    /// The language's interpreter is not installed.
    InterpreterMissing,
    /// The sandbox or the interpreter could not be started.
    NotStarted,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Syntax => "syntax",
            Category::Runtime => "runtime",
            Category::Denied => "denied",
            Category::Timeout => "timeout",
            Category::Killed => "killed",
            Category::OutputLimit => "output_limit",
            Category::Cancelled => "cancelled",
            Category::Estop => "estop",
            Category::InterpreterMissing => "interpreter_missing",
            Category::NotStarted => "not_started",
        }
    }
}

/// What the snippet's process and the readers report to the serving loop.
enum Event {
    Request(Vec<u8>),
    /// A request line over `REQUEST_MAX`.
    TooLong,
    Exited(Option<ExitStatus>),
}

/// The interpreter and the file name of each language.
fn interpreter(language: &str) -> (&'static str, &'static str) {
    match language {
        "node" => ("node", "snippet.js"),
        _ => ("python3", "snippet.py"),
    }
}

/// The prelude's directory under the state dir, written once per version:
/// bound read-only into the sandbox, as a plugin's directory is.
fn prelude_dir(state_dir: &Path) -> Result<PathBuf, String> {
    let hash = crate::util::sha256_hex(format!("{PRELUDE_PY}\0{PRELUDE_JS}").as_bytes());
    let base = state_dir.join("code");
    let dir = base.join(format!("prelude-{}", &hash[..16]));
    if dir.join("latchclaw.js").is_file() {
        return Ok(dir);
    }
    let fail = |e: std::io::Error| format!("cannot write the prelude into {}: {e}", base.display());
    crate::util::private_dir(&base).map_err(|e| format!("{e}"))?;
    // Made whole beside it, then renamed: a run never sees half a prelude.
    let tmp = base.join(format!(".prelude-{:08x}", fastrand::u32(..)));
    std::fs::create_dir(&tmp).map_err(fail)?;
    let written = std::fs::write(tmp.join("latchclaw.py"), PRELUDE_PY)
        .and_then(|()| std::fs::write(tmp.join("latchclaw.js"), PRELUDE_JS));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(fail(e));
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another run made it first.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if dir.join("latchclaw.js").is_file() {
        Ok(dir)
    } else {
        Err(format!("cannot write the prelude into {}", dir.display()))
    }
}

/// One call of `tool()` or `http()`, as the record keeps it.
#[derive(Debug, Clone, Serialize)]
struct CallNote {
    kind: &'static str,
    /// The tool's name, or the request's method and URL.
    what: String,
    status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    receipt_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// What the serving loop knows of a run, and what it answers with.
struct Served<'c> {
    gate: &'c Gate,
    cfg: &'c Config,
    redactor: &'c Redactor,
    /// Who runs `tool()`, and for which conversation; none in a
    /// background run (the runtime is the turn's, not the job's).
    host: Option<(&'c dyn Host, &'c str)>,
    /// Whether the run is stopping (Ctrl-C, a signal, `--timeout`).
    stopping: &'c dyn Fn() -> bool,
    /// The snippet's process (its tool calls leave it alone).
    pid: i32,
    deadline: Instant,
    output: Option<Value>,
    calls: Vec<CallNote>,
    receipts: Vec<String>,
    denied: bool,
}

fn answer_ok(v: Value) -> Value {
    json!({ "ok": v })
}

fn answer_err(kind: &str, why: impl Into<String>) -> Value {
    json!({ "error": why.into(), "kind": kind })
}

impl Served<'_> {
    fn answer(&mut self, line: &[u8]) -> Value {
        let req: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => return answer_err("failed", format!("malformed request: {e}")),
        };
        let text = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or("");
        match text("op") {
            "secret" => {
                let name = text("name");
                if self.gate.code_secret_known(name) {
                    answer_ok(json!(crate::security::code::placeholder(name)))
                } else {
                    let names = self.gate.code_secret_names();
                    answer_err(
                        "failed",
                        format!(
                            "unknown secret \"{}\"; [tools.code_run.secrets] names: {}",
                            crate::util::printable(name),
                            if names.is_empty() {
                                "none".to_string()
                            } else {
                                names.join(", ")
                            }
                        ),
                    )
                }
            }
            "secrets" => answer_ok(json!(self.gate.code_secret_names())),
            "output" => {
                self.output = Some(req.get("value").cloned().unwrap_or(Value::Null));
                answer_ok(Value::Null)
            }
            "sleep" => {
                let secs = req.get("secs").and_then(Value::as_f64).unwrap_or(-1.0);
                if !secs.is_finite() || secs < 0.0 {
                    return answer_err("failed", "sleep takes a number of seconds, 0 or more");
                }
                let until = Instant::now()
                    .checked_add(Duration::from_secs_f64(secs.min(86_400.0)))
                    .unwrap_or(self.deadline)
                    .min(self.deadline);
                while Instant::now() < until && !(self.stopping)() {
                    std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
                }
                answer_ok(Value::Null)
            }
            "tool" => self.tool(text("name"), req.get("args").unwrap_or(&Value::Null)),
            "http" => self.http(&req),
            other => answer_err(
                "failed",
                format!(
                    "unknown request \"{}\"; the prelude asks for secret, secrets, http, tool, \
                     output, sleep",
                    crate::util::printable(other)
                ),
            ),
        }
    }

    fn tool(&mut self, name: &str, args: &Value) -> Value {
        let args = if args.is_null() {
            json!({})
        } else {
            args.clone()
        };
        let Some((host, conversation_id)) = self.host else {
            return answer_err(
                "failed",
                "tool() is not available in a background run; run the snippet in the \
                 foreground to call tools",
            );
        };
        match host.call_tool(conversation_id, name, &args, self.pid) {
            Err(e) => {
                self.denied = true;
                self.calls.push(CallNote {
                    kind: "tool",
                    what: name.to_string(),
                    status: "denied".into(),
                    receipt_id: None,
                    reason: Some(e.clone()),
                });
                answer_err("denied", e)
            }
            Ok(call) => {
                if let Some(id) = &call.receipt_id {
                    self.receipts.push(id.clone());
                }
                let why = call.result.error.clone();
                self.calls.push(CallNote {
                    kind: "tool",
                    what: name.to_string(),
                    status: call.status.clone(),
                    receipt_id: call.receipt_id.clone(),
                    reason: why.clone(),
                });
                if call.denied {
                    self.denied = true;
                    answer_err("denied", why.unwrap_or_else(|| "denied".into()))
                } else if !call.result.success {
                    answer_err("failed", call.result.for_model())
                } else {
                    answer_ok(json!(call.result.output))
                }
            }
        }
    }

    fn http(&mut self, req: &Value) -> Value {
        let text = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or("");
        let (method, url, body) = (text("method"), text("url"), text("body"));
        let headers: Vec<(String, String)> = req
            .get("headers")
            .and_then(Value::as_object)
            .map(|h| {
                h.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let what = format!("{} {}", method.to_ascii_uppercase(), url);
        let judged = self.gate.code_request(method, url, &headers, body);
        let request = match judged {
            Ok(r) => r,
            Err(refused) => {
                self.denied = true;
                log::info!(target: "event::code_http_denied", "{what}: {}", refused.reason);
                self.calls.push(CallNote {
                    kind: "http",
                    what,
                    status: "denied".into(),
                    receipt_id: None,
                    reason: Some(refused.reason.clone()),
                });
                return answer_err("denied", format!("denied by policy: {}", refused.reason));
            }
        };
        let sent = send(&request, self.gate, self.cfg, self.deadline);
        let redactor = self.redactor;
        let mut counts = crate::security::redact::Counts::default();
        match sent {
            Ok(mut resp) => {
                redactor.redact_json(&mut resp, &mut counts);
                self.calls.push(CallNote {
                    kind: "http",
                    what,
                    status: resp["status"].to_string(),
                    receipt_id: None,
                    reason: None,
                });
                answer_ok(resp)
            }
            Err(e) => {
                let e = redactor.redact(&e).into_owned();
                self.calls.push(CallNote {
                    kind: "http",
                    what,
                    status: "failed".into(),
                    receipt_id: None,
                    reason: Some(e.clone()),
                });
                answer_err("failed", e)
            }
        }
    }
}

/// Sends what the gate let through, connecting only where the network
/// policy allows (checked at connect time) and following no redirect (a
/// redirect would carry the secret to another host): the status, the
/// headers and the body as text.
fn send(
    r: &crate::security::code::Request,
    gate: &Gate,
    cfg: &Config,
    deadline: Instant,
) -> Result<Value, String> {
    crate::features::check_url(&r.url).map_err(|e| format!("{} {}: {e}", r.method, r.url))?;
    let own = cfg
        .tools
        .of(crate::types::ToolName::Http)
        .timeout_secs
        .unwrap_or(cfg.http_timeout_secs);
    let timeout = Duration::from_secs(own).min(deadline.saturating_duration_since(Instant::now()));
    let agent = crate::tools::http::checked_agent(gate.net_policy(), timeout);
    let mut builder = ureq::http::Request::builder()
        .method(r.method.as_str())
        .uri(r.url.as_str());
    for (k, v) in &r.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder
        .body(r.body.clone().into_bytes())
        .map_err(|e| format!("{} {}: {e}", r.method, r.url))?;
    let mut resp = agent
        .run(request)
        .map_err(|e| format!("{} {} failed: {e}", r.method, r.url))?;
    let status = resp.status().as_u16();
    let headers: serde_json::Map<String, Value> = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                json!(String::from_utf8_lossy(v.as_bytes())),
            )
        })
        .collect();
    let limit = cfg.max_response_bytes;
    let mut body = Vec::new();
    resp.body_mut()
        .as_reader()
        .take(limit)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading {}: {e}", r.url))?;
    Ok(json!({
        "status": status,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    }))
}

/// Reads `pipe` to its end into `buf`, keeping at most `cap` bytes; past
/// it, `over` is raised and the rest is read and dropped (the run is
/// stopped). The receiver hears when the pipe ended.
fn capped_reader(
    mut pipe: impl Read + Send + 'static,
    cap: usize,
    over: Arc<AtomicBool>,
    buf: Buffer,
) -> Result<mpsc::Receiver<()>, String> {
    let (tx, rx) = mpsc::channel();
    crate::util::thread("code-output", move || {
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            let n = match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
            let room = cap.saturating_sub(b.len());
            b.extend_from_slice(&chunk[..n.min(room)]);
            if n > room {
                over.store(true, Ordering::SeqCst);
                drop(b);
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                break;
            }
        }
        let _ = tx.send(());
    })?;
    Ok(rx)
}

/// A copy of what `buf` holds now.
pub fn taken(buf: &Buffer) -> Vec<u8> {
    buf.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The prelude's placeholders out of what a snippet printed or returned:
/// only the names stay.
fn unplace(text: &str) -> String {
    let mut out = text.to_string();
    for name in crate::security::code::placeholders(text) {
        out = out.replace(
            &crate::security::code::placeholder(name),
            &format!("[REDACTED:placeholder:{name}]"),
        );
    }
    out
}

fn unplace_json(v: &mut Value) {
    match v {
        Value::String(s) => *s = unplace(s),
        Value::Array(a) => a.iter_mut().for_each(unplace_json),
        Value::Object(o) => o.values_mut().for_each(unplace_json),
        _ => {}
    }
}

/// Why a snippet that exited nonzero failed, from what its interpreter
/// printed: a file that did not parse is a syntax error (Python prints no
/// traceback for it; Node's stack is in its compiler), anything else a
/// runtime error, unless one of its calls was refused.
fn classify(language: &str, code: Option<i32>, stderr: &str, denied: bool) -> Category {
    if code.is_some_and(|c| c > 128) {
        return Category::Killed;
    }
    let last = stderr.trim_end().lines().last().unwrap_or("");
    let syntax = match language {
        "node" => {
            stderr.contains("SyntaxError")
                && (stderr.contains("wrapSafe") || stderr.contains("internalCompileFunction"))
        }
        _ => {
            !stderr.contains("Traceback (most recent call last)")
                && ["SyntaxError", "IndentationError", "TabError"]
                    .iter()
                    .any(|k| last.starts_with(k))
        }
    };
    if syntax {
        Category::Syntax
    } else if denied {
        Category::Denied
    } else {
        Category::Runtime
    }
}

/// Runs one `code_run` call: in the foreground, serving the snippet until
/// it ends; with `background`, handed to a job of the run's and answered
/// with its id at once.
pub fn run(args: &Value, ctx: &ToolCtx) -> ToolResult {
    let a = match crate::types::args::code_args(args) {
        Ok(a) => a,
        Err(e) => return ToolResult::err(e),
    };
    let started = Instant::now();
    let deadline = match a.timeout_secs {
        Some(s) => ctx.deadline.min(started + Duration::from_secs(s)),
        None => ctx.deadline,
    };
    let (program, file) = interpreter(a.language);
    let not_run = |category: Category, why: String| {
        let error = format!(
            "{} snippet not run ({}): {why}",
            a.language,
            category.as_str()
        );
        let run = Ran {
            code: None,
            category: Some(category),
            error: Some(&error),
            calls: &[],
            receipts: &[],
            started,
        };
        record(ctx.memory, ctx.conversation_id, &a, &run);
        ToolResult {
            metadata: Some(json!({"language": a.language, "error_category": category})),
            ..ToolResult::err(error.clone())
        }
    };
    let Some(exe) = ctx.gate.lookup_program(program) else {
        let why = format!(
            "the interpreter \"{program}\" for language \"{}\" is not installed on {SAFE_PATH}",
            a.language
        );
        return not_run(Category::InterpreterMissing, why);
    };
    if a.background && ctx.host.jobs().is_none() {
        return ToolResult::err("code_run: background runs need an agent run to belong to");
    }
    let spawned = match spawn(&a, &exe, file, ctx) {
        Ok(s) => s,
        Err(why) => return not_run(Category::NotStarted, why),
    };
    if a.background {
        return background(&a, spawned, ctx, deadline, started);
    }
    let cancelled = || ctx.control.cancelled();
    let mut served = Served {
        gate: ctx.gate,
        cfg: ctx.cfg,
        redactor: ctx.memory.redactor(),
        host: Some((ctx.host, ctx.conversation_id)),
        stopping: &cancelled,
        pid: spawned.pid,
        deadline,
        output: None,
        calls: Vec::new(),
        receipts: Vec::new(),
        denied: false,
    };
    let end = serve_loop(&mut served, spawned, ctx.gate.estop_path());
    let (body, category, error) = summarize(&a, &served, &end, started, ctx.cfg);
    let run = Ran {
        code: end.status.and_then(|s| s.code()),
        category,
        error: error.as_deref(),
        calls: &served.calls,
        receipts: &served.receipts,
        started,
    };
    record(ctx.memory, ctx.conversation_id, &a, &run);
    ToolResult {
        success: category.is_none(),
        output: body.to_string(),
        error,
        metadata: Some(json!({
            "language": a.language,
            "exit": body["exit"],
            "duration_ms": body["duration_ms"],
            "error_category": category,
        })),
        receipt_id: None,
        estop: end.stopped == Some(Category::Estop),
        measured: None,
    }
}

/// A background run: the snippet served from a thread of its own (no
/// `tool()`: the runtime stays the turn's), its output kept for
/// `code_status`, its end recorded; it ends at its deadline, at the
/// emergency stop, and with the run (the runtime's `Jobs` kill what is
/// left when it goes, and the snippet's namespace dies with latchclaw).
fn background(
    a: &crate::types::args::CodeArgs,
    spawned: Spawned,
    ctx: &ToolCtx,
    deadline: Instant,
    started: Instant,
) -> ToolResult {
    let Some(jobs) = ctx.host.jobs() else {
        return ToolResult::err("code_run: background runs need an agent run to belong to");
    };
    let id = jobs.next_id();
    let end: Arc<Mutex<Option<Value>>> = Arc::default();
    let (pid, out, err) = (
        spawned.pid,
        Arc::clone(&spawned.out),
        Arc::clone(&spawned.err),
    );
    let cfg = ctx.cfg.clone();
    let redactor = ctx.memory.redactor().clone();
    let (language, code) = (a.language.to_string(), a.code.to_string());
    let conversation = ctx.conversation_id.to_string();
    let finished = Arc::clone(&end);
    let tmp = spawned.tmp.clone();
    let thread = crate::util::thread("code-job", move || {
        let gate = Gate::new(&cfg, &cfg.channels.cli.tools_allow);
        // Ctrl-C ends the run, and the run its jobs.
        let never = || false;
        let mut served = Served {
            gate: &gate,
            cfg: &cfg,
            redactor: &redactor,
            host: None,
            stopping: &never,
            pid,
            deadline,
            output: None,
            calls: Vec::new(),
            receipts: Vec::new(),
            denied: false,
        };
        let a = crate::types::args::CodeArgs {
            language: &language,
            code: &code,
            stdin: None,
            timeout_secs: None,
            background: true,
        };
        let ended = serve_loop(&mut served, spawned, &cfg.estop_path());
        let (body, category, error) = summarize(&a, &served, &ended, started, &cfg);
        let memory = crate::memory::Memory::open(
            &cfg.memory.path,
            cfg.memory.busy_timeout_ms,
            Arc::new(redactor.clone()),
        );
        match memory {
            Ok(m) => {
                let run = Ran {
                    code: ended.status.and_then(|s| s.code()),
                    category,
                    error: error.as_deref(),
                    calls: &served.calls,
                    receipts: &served.receipts,
                    started,
                };
                record(&m, &conversation, &a, &run);
            }
            Err(e) => log::warn!(target: "event::code_run_unrecorded", "{e}"),
        }
        let mut body = body;
        body["error"] = json!(error);
        *finished.lock().unwrap_or_else(|e| e.into_inner()) = Some(body);
    });
    let thread = match thread {
        Ok(t) => t,
        Err(e) => {
            // Its waiter reaps it.
            let _ = crate::sys::process::kill(pid);
            let _ = crate::sys::process::kill_group(pid);
            crate::tools::shell::remove_tmp(Some(&tmp));
            return ToolResult::err(format!("code_run: {e}; the snippet was stopped"));
        }
    };
    jobs.add(Job {
        id: id.clone(),
        pid,
        language: a.language.to_string(),
        started,
        out,
        err,
        end,
        thread: Some(thread),
    });
    ToolResult::ok(
        json!({
            "job": id,
            "state": "running",
            "language": a.language,
            "next": format!("code_status {{\"job\": \"{id}\"}}: its output so far, then its result"),
        })
        .to_string(),
    )
}

/// `code_status`: a background run's state and output so far, or its
/// result once it ended.
pub fn status(args: &Value, ctx: &ToolCtx) -> ToolResult {
    let id = match crate::types::args::job_id(args) {
        Ok(id) => id,
        Err(e) => return ToolResult::err(e),
    };
    let Some(jobs) = ctx.host.jobs() else {
        return ToolResult::err("code_status: no background runs here");
    };
    let half = ctx.cfg.tool_output_max_bytes / 2;
    let shown = jobs.with(id, |job| {
        if let Some(end) = job.end.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            let mut end = end;
            end["job"] = json!(job.id);
            end["state"] = json!("done");
            return end;
        }
        let text = |b: &Buffer| {
            crate::util::truncate_middle(&unplace(&String::from_utf8_lossy(&taken(b))), half)
        };
        json!({
            "job": job.id,
            "state": "running",
            "language": job.language,
            "duration_ms": job.started.elapsed().as_millis() as u64,
            "stdout": text(&job.out),
            "stderr": text(&job.err),
        })
    });
    match shown {
        Some(v) => ToolResult::ok(v.to_string()),
        None => ToolResult::err(format!(
            "no background run \"{}\" in this run; its jobs: {}",
            crate::util::printable(id),
            match jobs.ids() {
                ids if ids.is_empty() => "none".to_string(),
                ids => ids.join(", "),
            }
        )),
    }
}

/// The result's body, its category and its error, from how it ended.
fn summarize(
    a: &crate::types::args::CodeArgs,
    served: &Served,
    end: &End,
    started: Instant,
    cfg: &Config,
) -> (Value, Option<Category>, Option<String>) {
    let stdout = unplace(&String::from_utf8_lossy(&end.stdout));
    let stderr = unplace(&String::from_utf8_lossy(&end.stderr));
    let code = end.status.and_then(|s| s.code());
    let signal = end.status.and_then(|s| s.signal());
    let category = match end.stopped {
        Some(c) => Some(c),
        None if signal.is_some() => Some(Category::Killed),
        None if code == Some(0) => None,
        None => Some(classify(a.language, code, &stderr, served.denied)),
    };
    let half = cfg.tool_output_max_bytes / 2;
    let mut output = served.output.clone().unwrap_or(Value::Null);
    unplace_json(&mut output);
    let body = json!({
        "exit": code,
        "signal": signal,
        "stdout": crate::util::truncate_middle(&stdout, half),
        "stderr": crate::util::truncate_middle(&stderr, half),
        "duration_ms": started.elapsed().as_millis() as u64,
        "error_category": category,
        "output": output,
        "calls": served.calls,
    });
    let error = category.map(|c| {
        let tail = crate::util::one_line(stderr.trim(), 300);
        let how = match c {
            Category::Timeout => format!(
                "timed out after {:.1} s (timeout_secs, [tools.code_run] timeout_secs or \
                 tool_timeout_secs, or the run's --timeout); it and every process it \
                 started were killed",
                served
                    .deadline
                    .saturating_duration_since(started)
                    .as_secs_f64()
            ),
            Category::OutputLimit => format!(
                "wrote more than {} bytes on stdout or stderr \
                 ([tools.code_run] max_output_bytes), a request line over {} MiB, or \
                 requests whose answers it left unread (more than {ANSWERS_UNREAD}); \
                 it was stopped",
                cfg.tools.code_run.max_output_bytes,
                REQUEST_MAX >> 20
            ),
            Category::Cancelled => "cancelled (Ctrl-C or a signal); killed".into(),
            Category::Estop => "stopped by the emergency stop; killed".into(),
            Category::Killed => match signal {
                Some(s) => format!("killed by signal {s}"),
                None => format!("killed (exit {})", code.unwrap_or(-1)),
            },
            _ => format!("exit {}: {tail}", code.unwrap_or(-1)),
        };
        format!("{} snippet failed ({}): {how}", a.language, c.as_str())
    });
    (body, category, error)
}

/// How one run ended, as the record keeps it.
struct Ran<'r> {
    code: Option<i32>,
    category: Option<Category>,
    error: Option<&'r str>,
    calls: &'r [CallNote],
    receipts: &'r [String],
    started: Instant,
}

fn record(
    memory: &crate::memory::Memory,
    conversation_id: &str,
    a: &crate::types::args::CodeArgs,
    run: &Ran,
) {
    let calls = serde_json::to_value(run.calls).unwrap_or(Value::Null);
    let stored = memory.add_code_run(&NewCodeRun {
        conversation_id,
        language: a.language,
        code: a.code,
        exit_code: run.code,
        duration_ms: run.started.elapsed().as_millis() as u64,
        error_category: run.category.map(Category::as_str),
        error: run.error,
        calls: &calls,
        receipts: run.receipts,
    });
    if let Err(e) = stored {
        log::warn!(target: "event::code_run_unrecorded", "{e}");
    }
}

/// How the snippet's process ended.
struct End {
    status: Option<ExitStatus>,
    /// Why latchclaw stopped it, if it did.
    stopped: Option<Category>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// A snippet started: what the serving loop needs of it (all of it can
/// move to a background run's thread).
struct Spawned {
    pid: i32,
    /// Its requests and its exit.
    events: mpsc::Receiver<Event>,
    answers: mpsc::SyncSender<String>,
    flood: Arc<AtomicBool>,
    out: Buffer,
    err: Buffer,
    out_done: mpsc::Receiver<()>,
    err_done: mpsc::Receiver<()>,
    has_namespaces: bool,
    /// The call's tmp, removed when the snippet's run ends.
    tmp: PathBuf,
}

/// Writes the snippet into a tmp of the call's own and starts it in the
/// sandbox (from this thread, which outlives it: its death signal follows
/// the thread that spawned it).
fn spawn(
    a: &crate::types::args::CodeArgs,
    exe: &Path,
    file: &str,
    ctx: &ToolCtx,
) -> Result<Spawned, String> {
    let ws = ctx.gate.workspace().map_err(|e| e.reason)?.to_path_buf();
    let prelude = prelude_dir(&ctx.cfg.state_dir)?;
    let tmp =
        crate::tools::shell::private_tmp().ok_or("cannot make the call's temporary directory")?;
    let started = (|| {
        let snippet = tmp.join(file);
        std::fs::write(&snippet, a.code).map_err(|e| format!("cannot write the snippet: {e}"))?;
        let mut spec = confine::Spec::new(ctx.cfg, &ws, ctx.gate.autonomy(), Some(&tmp));
        spec.read_only_dirs = vec![prelude.clone()];
        let walls = confine::prepare(&spec).map_err(|e| format!("sandbox: {e}"))?;
        walls.ready(&[confine::view::Kind::Other]);
        start(a, exe, &snippet, &prelude, &tmp, &ws, &walls, ctx.cfg)
    })();
    match started {
        Ok(mut s) => {
            s.tmp = tmp;
            Ok(s)
        }
        Err(e) => {
            crate::tools::shell::remove_tmp(Some(&tmp));
            Err(e)
        }
    }
}

/// A snippet's process, however it was started: its pid, the ends of its
/// stdio pipes that latchclaw keeps, and how to wait for it.
struct Started {
    pid: i32,
    stdin: Option<Box<dyn Write + Send>>,
    stdout: Option<Box<dyn Read + Send>>,
    stderr: Option<Box<dyn Read + Send>>,
    wait: Box<dyn FnOnce() -> Option<std::process::ExitStatus> + Send>,
}

/// Where `walls.spawns_direct()`: the snippet started with its
/// namespace's init as latchclaw's own child (`Prepared::spawn_direct`),
/// its stdio on pipes made here and `keep` left open across the exec.
fn direct(
    cmd: &mut Command,
    walls: &confine::Prepared,
    stdin: bool,
    keep: [&Arc<std::os::fd::OwnedFd>; 2],
) -> std::io::Result<Started> {
    use std::os::fd::{AsFd, AsRawFd};
    let pipes = (|| {
        let input = if stdin {
            let (r, w) = crate::sys::process::pipe()?;
            (r, Some(w))
        } else {
            (std::fs::File::open("/dev/null")?.into(), None)
        };
        let out = crate::sys::process::pipe()?;
        let err = crate::sys::process::pipe()?;
        Ok::<_, std::io::Error>((input, out, err))
    })();
    let ((in_r, in_w), (out_r, out_w), (err_r, err_w)) = pipes?;
    let mut s = walls.spawn_direct(
        cmd,
        confine::view::Kind::Other,
        None,
        [in_r.as_fd(), out_w.as_fd(), err_w.as_fd()],
        keep.iter().map(|fd| fd.as_raw_fd()).collect(),
    )?;
    // The child's ends go with this frame: the readers see the end of file
    // when the snippet's processes are gone.
    Ok(Started {
        pid: s.id() as i32,
        stdin: in_w.map(|w| Box::new(std::fs::File::from(w)) as Box<dyn Write + Send>),
        stdout: Some(Box::new(std::fs::File::from(out_r))),
        stderr: Some(Box::new(std::fs::File::from(err_r))),
        wait: Box::new(move || s.wait().ok()),
    })
}

#[allow(clippy::too_many_arguments)]
fn start(
    a: &crate::types::args::CodeArgs,
    exe: &Path,
    snippet: &Path,
    prelude: &Path,
    tmp: &Path,
    ws: &Path,
    walls: &confine::Prepared,
    cfg: &Config,
) -> Result<Spawned, String> {
    use std::os::fd::AsRawFd;
    let pipe = |what: &str| {
        crate::sys::process::pipe().map_err(|e| format!("cannot make the {what} pipe: {e}"))
    };
    let (req_r, req_w) = pipe("request")?;
    let (resp_r, resp_w) = pipe("answer")?;
    let (req_w, resp_r) = (Arc::new(req_w), Arc::new(resp_r));
    let mut cmd = Command::new(exe);
    if a.language == "python" {
        // No bytecode written, no user site-packages.
        cmd.args(["-B", "-s"]);
    }
    cmd.arg(snippet)
        .env_clear()
        .env("PATH", SAFE_PATH)
        .env("HOME", tmp)
        .env("TMPDIR", tmp)
        .env("LANG", "C.UTF-8")
        .env("PYTHONPATH", prelude)
        .env("PYTHONIOENCODING", "utf-8")
        .env("NODE_PATH", prelude)
        .env(
            "LATCHCLAW_CODE_FDS",
            format!("{},{}", req_w.as_raw_fd(), resp_r.as_raw_fd()),
        )
        .current_dir(ws)
        .stdin(if a.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let cannot = |e: std::io::Error| {
        format!(
            "cannot start {}: {}",
            exe.display(),
            crate::security::confine::start_failure(&e)
        )
    };
    let started = if walls.spawns_direct() {
        direct(&mut cmd, walls, a.stdin.is_some(), [&req_w, &resp_r]).map_err(cannot)?
    } else {
        walls.install_keeping(&mut cmd, vec![Arc::clone(&req_w), Arc::clone(&resp_r)]);
        let spawned = cmd.spawn();
        // The child's ends go now (the command's hook holds them too):
        // the readers see the end of file when the snippet's processes
        // are gone.
        drop(cmd);
        let mut child = spawned.map_err(cannot)?;
        Started {
            pid: child.id() as i32,
            stdin: child
                .stdin
                .take()
                .map(|p| Box::new(p) as Box<dyn Write + Send>),
            stdout: child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            stderr: child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            wait: Box::new(move || child.wait().ok()),
        }
    };
    drop((req_w, resp_r));
    let pid = started.pid;
    // Held by the waiter thread, or taken back here when a thread cannot be
    // made: the snippet is then stopped and reaped in place.
    let wait = Arc::new(Mutex::new(Some(started.wait)));
    let fail = |e: String| {
        let _ = crate::sys::process::kill(pid);
        let _ = crate::sys::process::kill_group(pid);
        let taken = wait.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = taken {
            w();
        }
        format!("{e}; the snippet was stopped")
    };
    let (tx, events) = mpsc::channel();
    let waiter = {
        let (wait, tx) = (Arc::clone(&wait), tx.clone());
        crate::util::thread("code-wait", move || {
            let taken = wait.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(w) = taken {
                let _ = tx.send(Event::Exited(w()));
            }
        })
    };
    waiter.map_err(fail)?;
    if let (Some(mut stdin), Some(input)) = (started.stdin, a.stdin) {
        let input = input.to_string();
        // A snippet that never reads its stdin must not block the call.
        crate::util::thread("code-stdin", move || {
            crate::sys::signal::QuietPipes::for_this_thread();
            let _ = stdin.write_all(input.as_bytes());
        })
        .map_err(fail)?;
    }
    let cap = cfg.tools.code_run.max_output_bytes;
    let flood = Arc::new(AtomicBool::new(false));
    let (out, err): (Buffer, Buffer) = (Arc::default(), Arc::default());
    let done = |pipe: Option<Box<dyn Read + Send>>, buf: &Buffer| match pipe {
        Some(p) => capped_reader(p, cap, Arc::clone(&flood), Arc::clone(buf)),
        None => {
            let (tx, rx) = mpsc::channel();
            let _ = tx.send(());
            Ok(rx)
        }
    };
    let out_done = done(started.stdout, &out).map_err(fail)?;
    let err_done = done(started.stderr, &err).map_err(fail)?;
    reader(req_r, tx).map_err(fail)?;
    let answers = writer(resp_w).map_err(fail)?;
    Ok(Spawned {
        pid,
        events,
        answers,
        flood,
        out,
        err,
        out_done,
        err_done,
        has_namespaces: walls.has_namespaces(),
        tmp: PathBuf::new(),
    })
}

/// Serves the snippet's requests until it ends, or stops it: past its
/// deadline, over its output cap, at Ctrl-C (`served.stopping`) or the
/// emergency stop. Then its output, and its tmp removed.
fn serve_loop(served: &mut Served, s: Spawned, estop: &Path) -> End {
    let pid = s.pid;
    let mut stopped = None;
    let mut estop_checked = Instant::now();
    let status = loop {
        let now = Instant::now();
        let stop = if s.flood.load(Ordering::SeqCst) {
            Some(Category::OutputLimit)
        } else if now >= served.deadline {
            Some(Category::Timeout)
        } else if (served.stopping)() {
            Some(Category::Cancelled)
        } else if now.duration_since(estop_checked) >= POLL * 2 {
            estop_checked = now;
            crate::security::estop_engaged(estop).map(|_| Category::Estop)
        } else {
            None
        };
        if stop.is_some() {
            stopped = stop;
            let _ = crate::sys::process::kill(pid);
            let _ = crate::sys::process::kill_group(pid);
            break wait_exit(&s.events);
        }
        let wait = POLL.min(served.deadline.saturating_duration_since(now));
        match s.events.recv_timeout(wait) {
            Ok(Event::Exited(st)) => break st,
            Ok(Event::Request(line)) => {
                let answer = served.answer(&line);
                // Disconnected: it closed its end; nothing to keep.
                if let Err(mpsc::TrySendError::Full(_)) = s.answers.try_send(answer.to_string()) {
                    s.flood.store(true, Ordering::SeqCst);
                }
            }
            Ok(Event::TooLong) => {
                s.flood.store(true, Ordering::SeqCst);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break None,
        }
    };
    // What it left (a daemon, a double fork): its PID namespace died with
    // it; without namespaces, its process group goes now.
    if !s.has_namespaces {
        let _ = crate::sys::process::kill_group(pid);
    }
    drop(s.answers);
    // Its output ends when its processes do; a bound all the same.
    let grace = Duration::from_secs(2);
    let _ = s.out_done.recv_timeout(grace);
    let _ = s.err_done.recv_timeout(grace);
    if stopped.is_none() && s.flood.load(Ordering::SeqCst) {
        stopped = Some(Category::OutputLimit);
    }
    crate::tools::shell::remove_tmp(Some(&s.tmp));
    End {
        status,
        stopped,
        stdout: taken(&s.out),
        stderr: taken(&s.err),
    }
}

/// The exit after a kill (requests still queued are dropped).
fn wait_exit(events: &mpsc::Receiver<Event>) -> Option<ExitStatus> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Event::Exited(st)) => return st,
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

/// The snippet's requests, a line each, onto the loop's channel.
fn reader(pipe: OwnedFd, tx: mpsc::Sender<Event>) -> Result<(), String> {
    crate::util::thread("code-requests", move || {
        let mut r = BufReader::new(std::fs::File::from(pipe));
        loop {
            let mut line = Vec::new();
            match (&mut r)
                .take(REQUEST_MAX as u64 + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => return,
                Ok(_) if line.len() > REQUEST_MAX => {
                    let _ = tx.send(Event::TooLong);
                    return;
                }
                Ok(_) => {
                    if tx.send(Event::Request(line)).is_err() {
                        return;
                    }
                }
            }
        }
    })?;
    Ok(())
}

/// Answers, a line each, to the snippet: written from a thread of their
/// own, so a snippet that stops reading cannot stall the loop.
fn writer(pipe: OwnedFd) -> Result<mpsc::SyncSender<String>, String> {
    let (tx, rx) = mpsc::sync_channel::<String>(ANSWERS_UNREAD);
    crate::util::thread("code-answers", move || {
        crate::sys::signal::QuietPipes::for_this_thread();
        let mut w = std::fs::File::from(pipe);
        for mut line in rx {
            line.push('\n');
            if w.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    })?;
    Ok(tx)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn endings_are_classified() {
        let py_syntax = "  File \"/tmp/x/snippet.py\", line 1\n    def (\n        ^\nSyntaxError: invalid syntax\n";
        assert_eq!(
            classify("python", Some(1), py_syntax, false),
            Category::Syntax
        );
        let py_runtime = "Traceback (most recent call last):\n  File \"s.py\", line 1\nZeroDivisionError: division by zero\n";
        assert_eq!(
            classify("python", Some(1), py_runtime, false),
            Category::Runtime
        );
        assert_eq!(
            classify("python", Some(1), py_runtime, true),
            Category::Denied
        );
        let node_syntax = "/tmp/s.js:1\nfoo(\nSyntaxError: missing ) after argument list\n    at internalCompileFunction (node:internal/vm:76:18)\n    at wrapSafe (node:internal/modules/cjs/loader:1283:20)\n";
        assert_eq!(
            classify("node", Some(1), node_syntax, false),
            Category::Syntax
        );
        let node_json = "SyntaxError: Unexpected token x in JSON at position 0\n    at JSON.parse (<anonymous>)\n";
        assert_eq!(
            classify("node", Some(1), node_json, false),
            Category::Runtime
        );
        assert_eq!(classify("node", Some(137), "", false), Category::Killed);
    }

    #[test]
    fn placeholders_leave_only_names() {
        let p = crate::security::code::placeholder("TOKEN");
        assert_eq!(
            unplace(&format!("a {p} b")),
            "a [REDACTED:placeholder:TOKEN] b"
        );
    }
}
