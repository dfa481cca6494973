//! The server's process: started in the sandbox every child of latchclaw
//! gets (`security::confine`), its stdin and stdout handed to the wire's
//! threads, its stderr to the log, and stopped so that nothing it started
//! is left running. Uses the leaves `error` and `wire`.

use super::error::{ErrorKind, McpError};
use super::wire::{self, Incoming, Stats};
use crate::config::{Autonomy, Config, McpServerConfig};
use crate::security::confine;
use crate::security::redact::Redactor;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server's `PATH` (the shell's fixed one), after the `bin`
/// directories of its `read_paths`.
pub const SERVER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Variables every server gets besides its declared ones: `PATH` (above),
/// `HOME` and `TMPDIR` (its own temporary directory), `LANG` (latchclaw's,
/// else `C.UTF-8`).
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "TMPDIR", "LANG"];

/// Stderr written to the log per server, in bytes; the rest is read and
/// dropped (counted).
pub const STDERR_LOG_MAX: usize = 64 * 1024;

/// Stderr kept for error messages, in bytes.
const STDERR_TAIL: usize = 2048;

/// How long a server has to exit once its stdin is closed.
const STOP_GRACE: Duration = Duration::from_millis(300);

/// What a call needs to start a server.
pub struct Launch<'a> {
    pub cfg: &'a Config,
    /// The workspace the server sees (read-only under `readonly`).
    pub workspace: &'a Path,
    pub autonomy: Autonomy,
    /// Redacts the server's stderr and what the client quotes of it.
    pub redactor: Arc<Redactor>,
}

/// The tail of a server's stderr and how much of it there was.
#[derive(Debug, Default)]
pub struct StderrLog {
    pub tail: String,
    pub bytes: u64,
    /// Read to its end (every process holding it has exited).
    pub closed: bool,
}

/// A running server.
pub struct Child {
    pid: i32,
    to_server: Option<SyncSender<Vec<u8>>>,
    pub from_server: Receiver<Incoming>,
    exit: Receiver<ExitStatus>,
    exited: Option<ExitStatus>,
    pub stats: Arc<Stats>,
    pub stderr: Arc<Mutex<StderrLog>>,
    tmp: Option<PathBuf>,
    /// Kept for the life of the server (the view's holder, if any); none
    /// for a server reached at a url.
    _confine: Option<confine::Prepared>,
    /// The proxy to the hosts it is granted, for the life of the server.
    _egress: Option<confine::egress::Egress>,
    /// A server reached at a url: what ends its requests in flight.
    http_stop: Option<super::http::Stop>,
}

fn config_err(msg: String) -> McpError {
    McpError::new(ErrorKind::Config, msg)
}

/// `p` canonical, or a config error naming `what`.
fn canonical(p: &Path, what: &str) -> Result<PathBuf, McpError> {
    std::fs::canonicalize(p).map_err(|e| config_err(format!("{what} {}: {e}", p.display())))
}

/// Where the sandbox shows files: the system's program directories, the
/// workspace and the server's `read_paths`.
fn visible(p: &Path, ws: &Path, read: &[PathBuf]) -> bool {
    let system = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"];
    system.iter().any(|d| {
        std::fs::canonicalize(d)
            .map(|d| p.starts_with(d))
            .unwrap_or(false)
    }) || p.starts_with(ws)
        || read.iter().any(|r| p.starts_with(r))
}

/// The program to run: a path as written, or a name looked up in the
/// `bin` of each read path, then on [`SERVER_PATH`].
fn program(s: &McpServerConfig, read: &[PathBuf]) -> Result<PathBuf, McpError> {
    if s.command.contains('/') {
        let p = PathBuf::from(&s.command);
        return match p.is_file() {
            true => Ok(p),
            false => Err(config_err(format!(
                "mcp.servers.{}.command: {} is not a file",
                s.name,
                p.display()
            ))),
        };
    }
    let dirs: Vec<PathBuf> = read
        .iter()
        .map(|r| r.join("bin"))
        .chain(SERVER_PATH.split(':').map(PathBuf::from))
        .collect();
    for d in &dirs {
        let p = d.join(&s.command);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(config_err(format!(
        "mcp.servers.{}.command: \"{}\" is not found in {}",
        s.name,
        crate::util::printable(&s.command),
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    )))
}

impl Child {
    /// Starts `s` in the sandbox: the environment cleared but for
    /// [`BASE_ENV`] and the names `s.env` declares, no network, the
    /// workspace (read-only under `readonly`), a temporary directory of
    /// its own, the system's program directories and `s.read_paths`
    /// read-only; not home, not the state directory.
    pub fn spawn(s: &McpServerConfig, launch: &Launch) -> Result<Child, McpError> {
        if let Some(url) = &s.url {
            return Child::connect(s, url);
        }
        let ws = canonical(launch.workspace, "the workspace")?;
        let mut read = Vec::new();
        for (i, p) in s.read_paths.iter().enumerate() {
            read.push(canonical(
                p,
                &format!("mcp.servers.{}.read_paths[{i}]:", s.name),
            )?);
        }
        let prog = program(s, &read)?;
        let real = canonical(&prog, &format!("mcp.servers.{}.command:", s.name))?;
        if !visible(&real, &ws, &read) {
            return Err(config_err(format!(
                "mcp.servers.{}.command: {} is outside what the sandbox shows a server (the \
                 system's program directories, the workspace, read_paths); add its \
                 installation's directory to read_paths",
                s.name,
                real.display()
            )));
        }
        let cwd = match &s.cwd {
            Some(c) => canonical(c, &format!("mcp.servers.{}.cwd:", s.name))?,
            None => ws.clone(),
        };
        if !cwd.starts_with(&ws) && !read.iter().any(|r| cwd.starts_with(r)) {
            return Err(config_err(format!(
                "mcp.servers.{}.cwd: {} is neither in the workspace nor in read_paths",
                s.name,
                cwd.display()
            )));
        }
        let tmp = private_tmp().map_err(|e| {
            McpError::new(
                ErrorKind::Spawn,
                format!("cannot make the server's temporary directory: {e}"),
            )
        })?;
        let mut spec = confine::Spec::new(launch.cfg, &ws, launch.autonomy, Some(&tmp));
        spec.cwd = Some(cwd.clone());
        spec.read_only_dirs = read.clone();
        // Its `network`, through the proxy; none otherwise.
        let egress = if s.network.is_empty() {
            None
        } else {
            match confine::egress::Egress::start(&s.network, &format!("MCP server \"{}\"", s.name))
            {
                Ok(e) => Some(e),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    return Err(McpError::new(ErrorKind::Spawn, e));
                }
            }
        };
        spec.egress = egress.as_ref().map(confine::egress::Egress::net);
        let prepared = match confine::prepare(&spec) {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(McpError::new(ErrorKind::Spawn, e));
            }
        };
        prepared.ready(&[confine::view::Kind::Other]);
        let mut path: Vec<String> = read
            .iter()
            .map(|r| r.join("bin"))
            .filter(|b| b.is_dir())
            .map(|b| b.display().to_string())
            .collect();
        path.push(SERVER_PATH.to_string());
        let lang = std::env::var("LANG")
            .ok()
            .filter(|l| !l.is_empty() && l.is_ascii())
            .unwrap_or_else(|| "C.UTF-8".into());
        let mut cmd = Command::new(&prog);
        cmd.args(&s.args)
            .env_clear()
            .env("PATH", path.join(":"))
            .env("HOME", &tmp)
            .env("TMPDIR", &tmp)
            .env("LANG", lang)
            .current_dir(&cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for name in &s.env {
            if let Some(v) = std::env::var_os(name) {
                cmd.env(name, v);
            }
        }
        if let Some(e) = &egress {
            cmd.envs(e.env());
        }
        crate::sys::process::set_pre_exec(&mut cmd, crate::sys::process::die_with_parent);
        prepared.install_as(&mut cmd, confine::view::Kind::Other, None);

        // The thread that forks the server outlives it (the kernel's
        // parent-death signal follows the forking thread): it waits for
        // the server and reports its end.
        let (started_tx, started_rx) = sync_channel(1);
        let (exit_tx, exit_rx) = sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-{}", s.name))
            .spawn(move || match cmd.spawn() {
                Ok(mut child) => {
                    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
                    let _ = started_tx.send(Ok((child.id(), pipes)));
                    if let Ok(st) = child.wait() {
                        let _ = exit_tx.send(st);
                    }
                }
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                }
            });
        let fail = |msg: String| {
            let _ = std::fs::remove_dir_all(&tmp);
            McpError::new(ErrorKind::Spawn, msg)
        };
        if let Err(e) = spawned {
            return Err(fail(format!("cannot start a thread for the server: {e}")));
        }
        let (pid, (stdin, stdout, stderr)) = match started_rx.recv() {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => {
                return Err(fail(format!(
                    "cannot start {} in the sandbox: {}",
                    prog.display(),
                    crate::security::confine::start_failure(&e)
                )));
            }
            Err(_) => return Err(fail("the server's thread ended before it started".into())),
        };
        let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
            return Err(fail("the server's pipes were not made".into()));
        };
        let (to_server, writer_rx) = sync_channel::<Vec<u8>>(wire::WRITE_QUEUE);
        let (client_tx, from_server) = sync_channel(wire::READ_QUEUE);
        let stats = Arc::new(Stats::default());
        let log = Arc::new(Mutex::new(StderrLog::default()));
        let threads = [
            std::thread::Builder::new()
                .name("mcp-write".into())
                .spawn(move || wire::write_loop(stdin, writer_rx))
                .is_ok(),
            {
                let replies = to_server.clone();
                let stats = Arc::clone(&stats);
                std::thread::Builder::new()
                    .name("mcp-read".into())
                    .spawn(move || wire::read_loop(stdout, client_tx, replies, stats))
                    .is_ok()
            },
            {
                let log = Arc::clone(&log);
                let redactor = Arc::clone(&launch.redactor);
                let name = s.name.clone();
                std::thread::Builder::new()
                    .name("mcp-stderr".into())
                    .spawn(move || stderr_loop(stderr, &name, &redactor, &log))
                    .is_ok()
            },
        ];
        let mut child = Child {
            pid: pid as i32,
            to_server: Some(to_server),
            from_server,
            exit: exit_rx,
            exited: None,
            stats,
            stderr: log,
            tmp: Some(tmp),
            _confine: Some(prepared),
            _egress: egress,
            http_stop: None,
        };
        if threads.contains(&false) {
            child.stop();
            return Err(McpError::new(
                ErrorKind::Spawn,
                "cannot start the threads that talk to the server",
            ));
        }
        log::info!(target: "event::mcp_start", "server={} pid={pid} program={}", s.name, prog.display());
        Ok(child)
    }

    /// A Streamable HTTP server (`super::http`): no process; its messages
    /// go by POST, through the same channels a started server's lines do.
    fn connect(s: &McpServerConfig, url: &str) -> Result<Child, McpError> {
        let (to_server, from_client) = sync_channel::<Vec<u8>>(wire::WRITE_QUEUE);
        let (client_tx, from_server) = sync_channel(wire::READ_QUEUE);
        let stats = Arc::new(Stats::default());
        let connected = super::http::connect(
            s,
            url,
            from_client,
            client_tx,
            to_server.clone(),
            Arc::clone(&stats),
        )?;
        log::info!(target: "event::mcp_start", "server={} url={}", s.name, crate::util::printable(url));
        Ok(Child {
            pid: 0,
            to_server: Some(to_server),
            from_server,
            exit: connected.exit,
            exited: None,
            stats,
            stderr: Arc::new(Mutex::new(StderrLog {
                closed: true,
                ..StderrLog::default()
            })),
            tmp: None,
            _confine: None,
            _egress: None,
            http_stop: Some(connected.stop),
        })
    }

    /// Queues `msg` for the server's stdin; `Err` when the server has not
    /// read what was queued before (or its input is closed).
    pub fn send(&self, msg: Vec<u8>) -> Result<(), McpError> {
        let Some(tx) = &self.to_server else {
            return Err(McpError::new(ErrorKind::Exited, "the server was stopped"));
        };
        tx.try_send(msg).map_err(|e| match e {
            std::sync::mpsc::TrySendError::Full(_) => McpError::new(
                ErrorKind::Stalled,
                "the server does not read its input (stdin full)",
            ),
            std::sync::mpsc::TrySendError::Disconnected(_) => {
                McpError::new(ErrorKind::Exited, "the server closed its input")
            }
        })
    }

    /// How the server ended, waiting up to `wait` for it.
    pub fn exit_status(&mut self, wait: Duration) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.exit.recv_timeout(wait).ok();
        }
        self.exited
    }

    /// Waits up to `wait` for the server's stderr to be read to its end: a
    /// server that wrote its last words and exited is quoted with them (the
    /// reader thread may still hold them when the exit is seen).
    pub fn settle_stderr(&self, wait: Duration) {
        let until = std::time::Instant::now() + wait;
        while std::time::Instant::now() < until
            && !self.stderr.lock().map(|l| l.closed).unwrap_or(true)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The last of the server's stderr (redacted), for an error message.
    pub fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .map(|l| l.tail.clone())
            .unwrap_or_default()
    }

    /// Closes the server's stdin, gives it [`STOP_GRACE`] to exit, then
    /// kills it: with namespaces, its PID namespace goes with it (nothing
    /// it started survives); without, its process group.
    pub fn stop(&mut self) {
        let Some(tx) = self.to_server.take() else {
            return;
        };
        if let Some(h) = &self.http_stop {
            h.stop();
        }
        let _ = tx.try_send(wire::CLOSE);
        drop(tx);
        if self.pid <= 0 {
            // Reached at a url: no process (the session's DELETE is sent).
            self.exit_status(STOP_GRACE);
            return;
        }
        if self.exit_status(STOP_GRACE).is_none() {
            let _ = crate::sys::process::kill_group(self.pid);
            let _ = crate::sys::process::kill(self.pid);
            self.exit_status(Duration::from_secs(2));
        }
        // Whatever left the process group (a daemon that made its own
        // session) without namespaces to end it: the group is gone, and so
        // is the leader; the namespace's kill covers the rest.
        let _ = crate::sys::process::kill_group(self.pid);
        if let Some(t) = self.tmp.take() {
            let _ = std::fs::remove_dir_all(t);
        }
        log::info!(target: "event::mcp_stop", "pid={} status={:?}", self.pid, self.exited);
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A directory of the server's own for temporary files (and its `HOME`).
fn private_tmp() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(crate::util::new_id("latchclaw-mcp"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    std::fs::canonicalize(&dir)
}

/// Reads the server's stderr to its end: each line redacted into the log
/// until [`STDERR_LOG_MAX`] bytes, the rest read and counted; the last
/// [`STDERR_TAIL`] bytes kept for errors.
fn stderr_loop(mut err: impl Read, name: &str, redactor: &Redactor, log: &Mutex<StderrLog>) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut logged = 0usize;
    let mut partial = Vec::new();
    loop {
        let n = match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if let Ok(mut l) = log.lock() {
            l.bytes += n as u64;
        }
        if logged >= STDERR_LOG_MAX {
            continue;
        }
        partial.extend_from_slice(chunk);
        while let Some(i) = partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = partial.drain(..=i).collect();
            emit(&line, name, redactor, log, &mut logged);
        }
        if partial.len() > 4096 {
            let line = std::mem::take(&mut partial);
            emit(&line, name, redactor, log, &mut logged);
        }
        if logged >= STDERR_LOG_MAX {
            log::warn!(target: "event::mcp_stderr", "server={name} wrote more than {STDERR_LOG_MAX} bytes to stderr; the rest is not logged");
        }
    }
    if !partial.is_empty() && logged < STDERR_LOG_MAX {
        emit(&partial, name, redactor, log, &mut logged);
    }
    if let Ok(mut l) = log.lock() {
        l.closed = true;
    }
}

fn emit(line: &[u8], name: &str, redactor: &Redactor, log: &Mutex<StderrLog>, logged: &mut usize) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    *logged += line.len();
    if text.is_empty() {
        return;
    }
    let clean = redactor.scrub_cut(text, 1000);
    log::info!(target: "event::mcp_stderr", "server={name} {clean}");
    if let Ok(mut l) = log.lock() {
        l.tail.push_str(&clean);
        l.tail.push('\n');
        if l.tail.len() > STDERR_TAIL {
            let mut cut = l.tail.len() - STDERR_TAIL;
            while !l.tail.is_char_boundary(cut) {
                cut += 1;
            }
            l.tail.drain(..cut);
        }
    }
}
