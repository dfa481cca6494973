//! The one place the gate starts git: to ask it which repository it will
//! use and what that repository's configuration says, so that latchclaw
//! never reads git's files with a parser of its own. Each query runs the
//! git the call will run, with the call's hardened environment, in the
//! kernel sandbox with the workspace read-only, stdin empty (or the bytes
//! given), its output capped and a deadline after which it is killed.

use crate::security::confine;
use crate::security::gate::Gate;
use crate::security::refusal::{Refusal, Refused};
use crate::sys::poll::{PollSet, Want};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the queries of one judgement may take together: far more
/// than git needs to read a configuration, short enough that a config
/// pointing at a FIFO or a slow device fails fast.
const DEADLINE: Duration = Duration::from_secs(5);
/// The most of git's answer kept: a configuration larger than this is
/// refused. stderr is only quoted, so less is kept.
const MAX_OUT: usize = 8 << 20;
const MAX_ERR: usize = 4 << 10;

/// One git invocation: its arguments (after `git`) and what it reads on
/// stdin (nothing: /dev/null).
pub(super) struct Query<'a> {
    pub args: Vec<String>,
    pub stdin: Option<&'a [u8]>,
}

/// What git answered one [`Query`].
#[derive(Debug)]
pub(super) struct Answer {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// git's complaint, one printable line (config paths and values are
    /// the repository's, so escaped), for a refusal.
    pub fn message(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr);
        let line = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        match (line.is_empty(), self.code) {
            (false, _) => crate::util::one_line(&crate::util::printable(&line), 400),
            (true, Some(c)) => format!("git exited with code {c}"),
            (true, None) => "git was killed by a signal".into(),
        }
    }
}

/// Runs `program` (the git the call will run) once per query, all at once,
/// in `cwd` with exactly `env`, confined with the workspace read-only and
/// nowhere to write. Every query ends within [`DEADLINE`] or is killed; an
/// answer past [`MAX_OUT`] is an error.
pub(super) fn ask_git(
    program: &Path,
    cwd: &Path,
    env: &[(String, String)],
    queries: &[Query<'_>],
    gate: &Gate,
) -> Result<Vec<Answer>, Refused> {
    let ws = gate.workspace()?;
    let spec = confine::Spec {
        workspace: ws.to_path_buf(),
        workspace_writable: false,
        tmp_dir: None,
        mode: gate.confinement,
        state_dir: None,
        secret_allow: gate.secret_allow.clone(),
        forbidden: gate.forbidden().to_vec(),
        egress: None,
        // The view enters it by path (std's `current_dir` is the host's).
        cwd: Some(cwd.to_path_buf()),
        read_only_dirs: Vec::new(),
    };
    // The sandbox git is asked in could not be set up: a refusal of
    // confinement (the text is `confine`'s own).
    let prepared = confine::prepare(&spec).map_err(|e| Refused::new(Refusal::Confinement, e))?;
    let mut running: Vec<Running> = Vec::with_capacity(queries.len());
    for q in queries {
        let mut cmd = Command::new(program);
        cmd.arg0("git")
            .args(&q.args)
            .current_dir(cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(if q.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // As the real call will run: git reads its own config (masked for
        // every other program), and changes nothing.
        prepared.install_as(&mut cmd, confine::view::Kind::GitRead, Some("git".as_ref()));
        let spawned = cmd.spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                for r in &mut running {
                    r.kill();
                    let _ = r.child.wait();
                }
                return Err(Refused::command(format!(
                    "cannot start {} to ask which repository it will use: {e}",
                    program.display()
                )));
            }
        };
        running.push(Running {
            stdin: child.stdin.take().map(|s| (s, q.stdin.unwrap_or_default())),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            out: Vec::new(),
            err: Vec::new(),
            child,
        });
    }
    let result = pump(&mut running);
    if result.is_err() {
        for r in &mut running {
            r.kill();
        }
    }
    // Reaped whatever happened, so no query outlives the judgement. Once
    // git has closed its output it is exiting: the wait is short.
    let mut answers = Vec::with_capacity(running.len());
    for mut r in running {
        let status = r.child.wait();
        answers.push(Answer {
            code: status.ok().and_then(|s| s.code()),
            stdout: r.out,
            stderr: r.err,
        });
    }
    result?;
    Ok(answers)
}

/// One started query and its pipes, each dropped once done.
struct Running<'a> {
    child: Child,
    stdin: Option<(ChildStdin, &'a [u8])>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    out: Vec<u8>,
    err: Vec<u8>,
}

impl Running<'_> {
    fn kill(&mut self) {
        let _ = self.child.kill();
    }
}

/// Feeds stdin and reads stdout and stderr of every query until each has
/// closed them, in one thread (poll), within [`DEADLINE`].
fn pump(running: &mut [Running<'_>]) -> Result<(), Refused> {
    // git exiting before it read its stdin fails the query, not latchclaw.
    let _quiet = crate::sys::signal::QuietPipes::new();
    let end = Instant::now() + DEADLINE;
    let mut set = PollSet::default();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        set.clear();
        // Which pipe each entry of the set is: (query, 0 stdin / 1 out / 2 err).
        let mut slots: Vec<(usize, u8)> = Vec::new();
        for (i, r) in running.iter().enumerate() {
            if let Some((s, _)) = &r.stdin {
                set.push(s, Want::Write);
                slots.push((i, 0));
            }
            if let Some(s) = &r.stdout {
                set.push(s, Want::Read);
                slots.push((i, 1));
            }
            if let Some(s) = &r.stderr {
                set.push(s, Want::Read);
                slots.push((i, 2));
            }
        }
        if slots.is_empty() {
            return Ok(());
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refused::command(format!(
                "git did not answer within {} s; latchclaw does not run git on a repository \
                 whose configuration it cannot read",
                DEADLINE.as_secs()
            )));
        }
        match set.wait(left.as_millis().min(i32::MAX as u128) as i32) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Refused::command(format!("waiting for git: {e}"))),
        }
        for (k, &(i, which)) in slots.iter().enumerate() {
            if !set.ready(k) {
                continue;
            }
            let r = &mut running[i];
            match which {
                0 => {
                    let Some((pipe, data)) = &mut r.stdin else {
                        continue;
                    };
                    // At most what poll promised fits (PIPE_BUF), so the
                    // write does not block.
                    let n = data.len().min(4096);
                    match pipe.write(&data[..n]) {
                        Ok(w) if w < data.len() => *data = &data[w..],
                        // All written, or git closed its end: done either way.
                        _ => r.stdin = None,
                    }
                }
                1 => {
                    if !drain(&mut r.stdout, &mut r.out, MAX_OUT, &mut buf) {
                        return Err(Refused::command(format!(
                            "git's answer is larger than {} MiB; latchclaw does not run git on \
                             a configuration that large",
                            MAX_OUT >> 20
                        )));
                    }
                }
                _ => {
                    // stderr is only quoted: what is past the cap is dropped.
                    drain(&mut r.stderr, &mut r.err, MAX_ERR, &mut buf);
                }
            }
        }
    }
}

/// One read from a ready pipe into `into`, the pipe dropped at its end;
/// false when the read brought `into` past `cap`.
fn drain(pipe: &mut Option<impl Read>, into: &mut Vec<u8>, cap: usize, buf: &mut [u8]) -> bool {
    let Some(p) = pipe else {
        return true;
    };
    match p.read(buf) {
        Ok(0) | Err(_) => {
            *pipe = None;
            true
        }
        Ok(n) => {
            let keep = n.min(cap.saturating_sub(into.len()));
            into.extend_from_slice(&buf[..keep]);
            keep == n
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_one_escaped_line() {
        let a = Answer {
            code: Some(128),
            stdout: Vec::new(),
            stderr: b"fatal: bad config line 1 in file .git/\x1b[31mconfig\n\nmore\n".to_vec(),
        };
        let m = a.message();
        assert!(!m.contains('\x1b') && !m.contains('\n'), "{m}");
        assert!(
            m.starts_with("fatal: bad config line 1") && m.ends_with("; more"),
            "{m}"
        );
        let quiet = Answer {
            code: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        assert_eq!(quiet.message(), "git was killed by a signal");
    }
}
