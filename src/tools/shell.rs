//! `shell`: runs a command the gate approved. A plain argv runs with no
//! shell in between; anything else runs under `/bin/sh -c`. The child gets a
//! minimal environment, no stdin, the workspace as working directory and a
//! process group of its own, which is killed (TERM, then KILL) on timeout,
//! on emergency stop, and after the command exits, so nothing is left behind.

use super::{Tool, ToolCtx, ToolResult};
use crate::security::estop_engaged;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
const POLL: Duration = Duration::from_millis(20);
const GRACE: Duration = Duration::from_millis(500);
/// Variables passed to every command (when set), besides `PATH`.
const BASE_ENV: &[&str] = &[
    "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
];

pub struct Shell;

/// The process group of the shell command running now (0: none), so the
/// run watchdog can kill it when `--timeout` expires mid-call.
pub static CURRENT_GROUP: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Kills the running shell command's process group, if any.
pub fn kill_current() {
    let pgid = CURRENT_GROUP.swap(0, std::sync::atomic::Ordering::SeqCst);
    if pgid > 0 {
        signal_group(pgid, libc::SIGKILL);
    }
}

/// Keeps the first and last `half` bytes of a stream and counts the rest.
struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    half: usize,
    total: usize,
}

impl Capture {
    fn read_all(mut r: impl Read, cap: usize) -> Capture {
        let half = cap / 2;
        let mut c = Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            half,
            total: 0,
        };
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            c.push(&buf[..n]);
        }
        c
    }

    fn push(&mut self, mut data: &[u8]) {
        self.total += data.len();
        let room = self.half.saturating_sub(self.head.len());
        let take = room.min(data.len());
        self.head.extend_from_slice(&data[..take]);
        data = &data[take..];
        self.tail.extend(data);
        while self.tail.len() > self.half {
            self.tail.pop_front();
        }
    }

    fn text(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        if self.total <= self.head.len() + self.tail.len() {
            let tail: Vec<u8> = self.tail.iter().copied().collect();
            return format!("{head}{}", String::from_utf8_lossy(&tail));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        format!(
            "{head}\n…[truncated: {} of {} bytes omitted]…\n{}",
            self.total - self.head.len() - self.tail.len(),
            self.total,
            String::from_utf8_lossy(&tail)
        )
    }
}

fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill(2) with a negative pid signals that process group only.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

impl Tool for Shell {
    fn name(&self) -> &'static str {
        "shell"
    }
    fn description(&self) -> &'static str {
        "Runs a shell command in the workspace under the command policy (allowlisted programs; no sudo, no destructive commands). Returns stdout, stderr and the exit code."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command line, e.g. \"ls -la\""}},
            "required": ["command"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(command) = args.get("command").and_then(Value::as_str) else {
            return ToolResult::err("\"command\" (a string) is required");
        };
        let ws = match ctx.gate.workspace() {
            Ok(w) => w.to_path_buf(),
            Err(e) => return ToolResult::err(e),
        };
        let (mut cmd, mode) = match &ctx.decision.argv {
            Some(argv) if !argv.is_empty() => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                (c, "argv")
            }
            _ => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c").arg(command);
                (c, "sh")
            }
        };
        let secrets: Vec<&str> = ctx
            .cfg
            .providers
            .values()
            .filter_map(|p| p.api_key_env.as_deref())
            .collect();
        cmd.current_dir(&ws)
            .env_clear()
            .env("PATH", SAFE_PATH)
            .env("TERM", "dumb")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for name in BASE_ENV.iter().copied().chain(
            ctx.cfg
                .security
                .shell_env_passthrough
                .iter()
                .map(String::as_str),
        ) {
            if secrets.contains(&name) {
                continue;
            }
            if let Some(v) = std::env::var_os(name) {
                cmd.env(name, v);
            }
        }
        let started = Instant::now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return ToolResult::err(format!("cannot start `{command}`: {e}")),
        };
        let pgid = child.id() as i32;
        let cap = ctx.cfg.tool_output_max_bytes;
        let out = child
            .stdout
            .take()
            .map(|s| std::thread::spawn(move || Capture::read_all(s, cap)));
        let err = child
            .stderr
            .take()
            .map(|s| std::thread::spawn(move || Capture::read_all(s, cap / 4)));
        let mut timeout = Duration::from_secs(ctx.cfg.shell_timeout_secs);
        if let Some(d) = ctx.deadline {
            timeout = timeout.min(d.saturating_duration_since(Instant::now()));
        }
        CURRENT_GROUP.store(pgid, std::sync::atomic::Ordering::SeqCst);
        let estop_path = ctx.gate.estop_path().to_path_buf();
        let mut stopped: Option<&str> = None;
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) => {}
                Err(_) => break None,
            }
            if estop_engaged(&estop_path).is_some() {
                stopped = Some("estop");
            } else if started.elapsed() >= timeout {
                stopped = Some("timeout");
            }
            if stopped.is_some() {
                signal_group(pgid, libc::SIGTERM);
                let grace_end = Instant::now() + GRACE;
                while Instant::now() < grace_end {
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    std::thread::sleep(POLL);
                }
                signal_group(pgid, libc::SIGKILL);
                break child.wait().ok();
            }
            std::thread::sleep(POLL);
        };
        // Whatever the command left running in its group goes too.
        signal_group(pgid, libc::SIGKILL);
        CURRENT_GROUP.store(0, std::sync::atomic::Ordering::SeqCst);
        let stdout = out
            .and_then(|h| h.join().ok())
            .map(|c| c.text())
            .unwrap_or_default();
        let stderr = err
            .and_then(|h| h.join().ok())
            .map(|c| c.text())
            .unwrap_or_default();
        let duration_ms = started.elapsed().as_millis() as u64;
        let code = status.and_then(|s| s.code());
        let mut output = stdout;
        if !stderr.is_empty() {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str("[stderr]\n");
            output.push_str(&stderr);
        }
        let metadata = json!({
            "exit_code": code,
            "duration_ms": duration_ms,
            "mode": mode,
            "timed_out": stopped == Some("timeout"),
            "estop": stopped == Some("estop"),
        });
        let error = match (stopped, code) {
            (Some("timeout"), _) => Some(format!(
                "timed out after {} s (shell_timeout_secs or the run's --timeout); \
                 the process group was killed",
                timeout.as_secs()
            )),
            (Some(_), _) => {
                Some("stopped by the emergency stop; the process group was killed".to_string())
            }
            (None, Some(0)) => None,
            (None, Some(c)) => Some(format!("exit code {c}")),
            (None, None) => Some("killed by a signal".to_string()),
        };
        ToolResult {
            success: error.is_none(),
            output,
            error,
            metadata: Some(metadata),
            receipt_id: None,
            estop: stopped == Some("estop"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            half: 4,
            total: 0,
        };
        c.push(b"abcdefghijklmnop");
        let t = c.text();
        assert!(
            t.starts_with("abcd") && t.ends_with("mnop") && t.contains("8 of 16"),
            "{t}"
        );
        let mut small = Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            half: 4,
            total: 0,
        };
        small.push(b"abcdef");
        assert_eq!(small.text(), "abcdef");
    }
}
