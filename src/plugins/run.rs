//! One call of a plugin's tool: its executable started in the sandbox
//! every child gets (`security::confine`, as the shell's children: its own
//! namespaces and view of the file system, no network, no capabilities,
//! the socket filter, Landlock), its directory read-only and nothing else
//! of the state dir or home in view, an environment of `PATH` and the
//! variables it declares only. The arguments go as JSON on stdin; the
//! answer is one JSON object on stdout, `{"output": …}` or `{"error": …}`.
//! Everything else — a nonzero exit, a signal, the deadline, more than
//! `STDOUT_MAX` bytes, malformed JSON — is a failed call with a reason the
//! model reads. Its processes end with the call (the PID namespace; its
//! process group where there are no namespaces).

use crate::external::ExternalTool;
use crate::security::confine;
use crate::tools::{ToolCtx, ToolResult};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most a plugin may write on stdout: its answer is one JSON object,
/// read whole before it is cut to `tool_output_max_bytes`.
pub const STDOUT_MAX: usize = 1024 * 1024;
/// What is kept of its stderr (the rest is read and dropped), for errors.
const STDERR_KEPT: usize = 4096;
/// How often the estop file is looked at while the plugin runs.
const ESTOP_POLL: Duration = Duration::from_millis(100);

/// Why a call was stopped before its plugin ended on its own.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stopped {
    Timeout,
    Cancelled,
    Estop,
    Flood,
}

/// Runs `command` of the plugin in `dir` with `args`, within the call's
/// deadline (`ctx.deadline`: `[tools."NAME"] timeout_secs`, the manifest's
/// `timeout_secs` or `tool_timeout_secs`, and the run's `--timeout`).
pub fn call(
    tool: &ExternalTool,
    dir: &Path,
    command: &Path,
    args: &Value,
    ctx: &ToolCtx,
) -> ToolResult {
    let ws = match ctx.gate.workspace() {
        Ok(w) => w.to_path_buf(),
        Err(e) => return ToolResult::err(e.reason),
    };
    let mut spec = confine::Spec::new(ctx.cfg, &ws, ctx.gate.autonomy(), None);
    spec.read_only_dirs = vec![dir.to_path_buf()];
    // The hosts granted, through the proxy (kept until the call returns).
    let egress = if tool.granted.is_empty() {
        None
    } else {
        match confine::egress::Egress::start(&tool.granted, &tool.source) {
            Ok(e) => Some(e),
            Err(e) => return ToolResult::err(format!("not run: {e}")),
        }
    };
    spec.egress = egress.as_ref().map(confine::egress::Egress::net);
    let walls = match confine::prepare(&spec) {
        Ok(p) => p,
        Err(e) => return ToolResult::err(format!("not run: {e}")),
    };
    walls.ready(&[confine::view::Kind::Other]);
    let mut cmd = Command::new(command);
    cmd.env_clear()
        .envs(ctx.gate.external_env(&tool.env))
        .envs(egress.iter().flat_map(confine::egress::Egress::env))
        .current_dir(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    walls.install(&mut cmd);
    let started = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return ToolResult::err(format!(
                "plugin \"{}\": cannot start {}: {}",
                tool.provider,
                command.display(),
                crate::security::confine::start_failure(&e)
            ));
        }
    };
    let pid = child.id() as i32;
    let input = args.to_string();
    let mut made = Ok(());
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that never reads its stdin must not block the call.
        made = made.and(
            crate::util::thread("plugin-stdin", move || {
                // A plugin that exits without reading fails its call, not latchclaw.
                crate::sys::signal::QuietPipes::for_this_thread();
                let _ = stdin.write_all(input.as_bytes());
            })
            .map(drop),
        );
    }
    let flood = Arc::new(AtomicBool::new(false));
    let (out_tx, out_rx) = mpsc::channel();
    if let Some(mut out) = child.stdout.take() {
        let flood = Arc::clone(&flood);
        made = made.and(
            crate::util::thread("plugin-stdout", move || {
                let mut buf = Vec::new();
                let over = (&mut out)
                    .take(STDOUT_MAX as u64 + 1)
                    .read_to_end(&mut buf)
                    .is_ok()
                    && buf.len() > STDOUT_MAX;
                if over {
                    flood.store(true, Ordering::SeqCst);
                    buf.truncate(STDOUT_MAX);
                }
                let _ = out_tx.send(buf);
            })
            .map(drop),
        );
    }
    let (err_tx, err_rx) = mpsc::channel();
    if let Some(mut err) = child.stderr.take() {
        made = made.and(
            crate::util::thread("plugin-stderr", move || {
                let mut kept = Vec::new();
                let _ = (&mut err).take(STDERR_KEPT as u64).read_to_end(&mut kept);
                // The rest is drained, so a plugin writing stderr without end
                // is stopped by its deadline, not by a full pipe.
                let _ = std::io::copy(&mut err, &mut std::io::sink());
                let _ = err_tx.send(kept);
            })
            .map(drop),
        );
    }
    if let Err(e) = made {
        let _ = child.kill();
        let _ = crate::sys::process::kill_group(pid);
        let _ = child.wait();
        return ToolResult::err(format!(
            "plugin \"{}\": {e}; the plugin was stopped",
            tool.provider
        ));
    }
    let deadline = ctx.deadline;
    let mut stopped = None;
    let mut nap = Duration::from_micros(200);
    let mut estop_checked = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(_) => break None,
        }
        let now = Instant::now();
        stopped = if flood.load(Ordering::SeqCst) {
            Some(Stopped::Flood)
        } else if now >= deadline {
            Some(Stopped::Timeout)
        } else if ctx.control.cancelled() {
            Some(Stopped::Cancelled)
        } else if now.duration_since(estop_checked) >= ESTOP_POLL {
            estop_checked = now;
            crate::security::estop_engaged(ctx.gate.estop_path()).map(|_| Stopped::Estop)
        } else {
            None
        };
        if stopped.is_some() {
            let _ = child.kill();
            let _ = crate::sys::process::kill_group(pid);
            break child.wait().ok();
        }
        std::thread::sleep(nap.min(deadline.saturating_duration_since(now)));
        nap = (nap * 2).min(Duration::from_millis(10));
    };
    // What it left (a daemon, a double fork): its PID namespace died with
    // it; without namespaces, its process group goes now.
    if !walls.has_namespaces() {
        let _ = crate::sys::process::kill_group(pid);
    }
    // Its output ends when its processes do; a bound all the same.
    let grace = Duration::from_secs(2);
    let stdout = out_rx.recv_timeout(grace).unwrap_or_default();
    let stderr = err_rx.recv_timeout(grace).unwrap_or_default();
    let duration_ms = started.elapsed().as_millis() as u64;
    let code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
    if flood.load(Ordering::SeqCst) {
        stopped = Some(Stopped::Flood);
    }
    let metadata = json!({
        "plugin": tool.provider,
        "tool": tool.tool,
        "exit_code": code,
        "duration_ms": duration_ms,
        "timed_out": stopped == Some(Stopped::Timeout),
    });
    let fail = |why: String| {
        let mut why = format!("plugin \"{}\" tool \"{}\": {why}", tool.provider, tool.tool);
        let tail = String::from_utf8_lossy(&stderr);
        let tail = crate::util::one_line(tail.trim(), 300);
        if !tail.is_empty() {
            why.push_str(&format!(" [stderr: {tail}]"));
        }
        ToolResult {
            metadata: Some(metadata.clone()),
            estop: stopped == Some(Stopped::Estop),
            ..ToolResult::err(why)
        }
    };
    match stopped {
        Some(Stopped::Timeout) => {
            let secs = deadline.saturating_duration_since(started).as_secs_f64();
            return fail(format!(
                "timed out after {secs:.1} s ([tools.{0}] timeout_secs, the manifest's \
                 timeout_secs or tool_timeout_secs, or the run's --timeout); it and every \
                 process it started were killed",
                tool.name
            ));
        }
        Some(Stopped::Cancelled) => {
            return fail("cancelled (Ctrl-C or a signal); its processes were killed".into());
        }
        Some(Stopped::Estop) => {
            return fail("stopped by the emergency stop; its processes were killed".into());
        }
        Some(Stopped::Flood) => {
            return fail(format!(
                "wrote more than {STDOUT_MAX} bytes on stdout (the output cap); it was stopped"
            ));
        }
        None => {}
    }
    let answer = parse_answer(&stdout);
    match (code, signal) {
        (_, Some(sig)) => fail(format!("crashed (killed by signal {sig})")),
        (Some(0), _) => match answer {
            Ok(Ok(output)) => ToolResult {
                metadata: Some(metadata.clone()),
                ..ToolResult::ok(crate::util::truncate_middle(
                    &output,
                    ctx.cfg.tool_output_max_bytes,
                ))
            },
            Ok(Err(error)) => fail(format!("answered an error: {error}")),
            Err(why) => fail(why),
        },
        (Some(c), _) => match answer {
            Ok(Err(error)) => fail(format!("exited with code {c}: {error}")),
            _ => fail(format!("exited with code {c}")),
        },
        (None, None) => fail("its exit status could not be read".into()),
    }
}

/// The one JSON object a plugin answers: `Ok(Ok(output))`,
/// `Ok(Err(error))`, or why the answer is not one.
fn parse_answer(stdout: &[u8]) -> Result<Result<String, String>, String> {
    const SHAPE: &str =
        "a plugin answers one JSON object on stdout: {\"output\": …} or {\"error\": …}";
    let text = std::str::from_utf8(stdout)
        .map_err(|_| format!("answered bytes that are not UTF-8; {SHAPE}"))?;
    if text.trim().is_empty() {
        return Err(format!("answered nothing; {SHAPE}"));
    }
    let v: Value = serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "answered malformed JSON ({e}): {}; {SHAPE}",
            crate::util::one_line(text.trim(), 120)
        )
    })?;
    let as_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match v.as_object() {
        Some(o) if o.len() == 1 && o.contains_key("output") => Ok(Ok(as_text(&o["output"]))),
        Some(o) if o.len() == 1 && o.contains_key("error") => Ok(Err(as_text(&o["error"]))),
        _ => Err(format!(
            "answered {}, not the expected object; {SHAPE}",
            crate::util::one_line(text.trim(), 120)
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::parse_answer;

    #[test]
    fn answers_are_one_object_with_output_or_error() {
        assert_eq!(parse_answer(b"{\"output\": \"hi\"}\n"), Ok(Ok("hi".into())));
        assert_eq!(
            parse_answer(b"{\"output\": {\"n\": 1}}"),
            Ok(Ok("{\"n\":1}".into()))
        );
        assert_eq!(parse_answer(b"{\"error\": \"no\"}"), Ok(Err("no".into())));
        for bad in [
            &b""[..],
            b"{",
            b"[1]",
            b"{\"output\": 1, \"error\": 2}",
            b"{\"x\": 1}",
            b"\xff",
        ] {
            assert!(parse_answer(bad).is_err(), "{bad:?}");
        }
    }
}
