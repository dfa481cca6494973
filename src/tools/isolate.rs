//! Parsers of hostile input run apart: `grep`'s regular expressions and the
//! PDF reader work in a child, latchclaw itself run again from
//! `/proc/self/exe` as `latchclaw __parse KIND`, which reads requests on
//! stdin and answers each on stdout.
//!
//! Why a process: no check between steps can bound one step taken inside
//! a crate. regex-lite is linear in the text but not in the pattern, and
//! asked once per matching line it is quadratic in the file; a PDF reader
//! walks whatever structure the file claims. So the call bounds the process
//! instead: it waits for each answer a [`TICK`] at a time and kills the
//! child the moment the call's deadline passes, the run is cancelled
//! (Ctrl-C, a signal) or the emergency stop is engaged (by any process:
//! the `ESTOP` file is looked at every tick). Whatever the input costs, the
//! call ends within a tick of that, and the tool lock is let go with it.
//!
//! The child shares two pipes with latchclaw and nothing else: a fresh
//! address space (no provider or receipt key in its memory, no other
//! call's data), an empty environment, `/` as its directory, no descriptor
//! but stdin, stdout and a null stderr. It dies with the thread that
//! started it, and before it reads a byte it gives up privileges
//! (no_new_privs), sockets (the shell's seccomp filter) and the whole
//! filesystem (a Landlock ruleset that allows nothing), each where the
//! kernel has it.

use super::tool::ToolCtx;
use crate::control::RunControl;
use serde_json::Value;
use std::cell::Cell;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// A parser child's first argument.
pub const ARG: &str = "__parse";

/// How often a waiting call looks at its deadline, the run and the
/// emergency stop: the most it overruns any of them by.
pub const TICK: Duration = Duration::from_millis(10);

/// No frame is larger: a request carries a file (grep's 16 MiB, a PDF's
/// 32 MiB), an answer at most the tool's output (16 MiB) escaped as JSON.
const MAX_FRAME: u64 = 128 << 20;

/// What a child parses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Matches of one regular expression, file after file.
    Grep,
    /// One PDF's text.
    #[cfg(feature = "pdf")]
    Pdf,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Grep => "grep",
            #[cfg(feature = "pdf")]
            Kind::Pdf => "pdf",
        }
    }

    fn parse(s: &OsStr) -> Option<Kind> {
        [
            Kind::Grep,
            #[cfg(feature = "pdf")]
            Kind::Pdf,
        ]
        .into_iter()
        .find(|k| s == OsStr::new(k.as_str()))
    }
}

/// Why a call was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The call's deadline (`tool_timeout_secs`, the run's `--timeout`).
    Timeout,
    /// Ctrl-C or a terminating signal.
    Cancelled,
    /// The emergency stop file exists.
    Estop,
}

impl Stopped {
    pub fn why(self) -> &'static str {
        match self {
            Stopped::Timeout => "the call's time limit was reached (tool_timeout_secs)",
            Stopped::Cancelled => "the run was stopped",
            Stopped::Estop => "stopped by the emergency stop",
        }
    }
}

/// What ends a call from outside: its deadline, the run's cancellation and
/// the emergency stop. Cheap to ask often: the `ESTOP` file is looked at
/// once a [`TICK`] at most, the rest are a clock read and an atomic load.
pub struct Watch<'a> {
    deadline: Instant,
    control: &'a RunControl,
    estop: &'a Path,
    /// When the `ESTOP` file was last looked at.
    looked: Cell<Option<Instant>>,
}

impl<'a> Watch<'a> {
    pub fn of(ctx: &'a ToolCtx<'a>) -> Watch<'a> {
        Watch {
            deadline: ctx.deadline,
            control: ctx.control,
            estop: ctx.gate.estop_path(),
            looked: Cell::new(None),
        }
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the call must stop now, the deadline taken `grace` later.
    pub fn stop_after(&self, grace: Duration) -> Option<Stopped> {
        let now = Instant::now();
        if self.looked.get().is_none_or(|t| now >= t + TICK) {
            self.looked.set(Some(now));
            if crate::security::estop_engaged(self.estop).is_some() {
                return Some(Stopped::Estop);
            }
        }
        if self.control.cancelled() {
            return Some(Stopped::Cancelled);
        }
        // The call's deadline is never later than the run's.
        (now >= self.deadline + grace).then_some(Stopped::Timeout)
    }

    pub fn stop(&self) -> Option<Stopped> {
        self.stop_after(Duration::ZERO)
    }
}

/// How a request to a child failed.
#[derive(Debug)]
pub enum Failure {
    /// Stopped from outside; the child was killed.
    Stopped(Stopped),
    /// The child could not be started, died or answered nonsense.
    Failed(String),
}

/// A running parser child, killed and reaped when dropped.
pub struct Child {
    proc: std::process::Child,
    to: ChildStdin,
    from: ChildStdout,
    /// Answer bytes read and not yet taken.
    buf: Vec<u8>,
    kind: Kind,
}

impl Child {
    pub fn spawn(kind: Kind) -> Result<Child, String> {
        // A unit test's `/proc/self/exe` is the test harness, which would
        // take the arguments as a filter and run the tests again.
        if cfg!(test) {
            return Err("no parser child in unit tests".into());
        }
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("latchclaw")
            .arg(ARG)
            .arg(kind.as_str())
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let parent = std::process::id();
        // Hook-safe calls only (system calls, no allocation): dies with the
        // thread that spawns it, and never outlives a latchclaw that died
        // before the line that asks for that.
        crate::sys::process::set_pre_exec(&mut cmd, move || {
            let _ = crate::sys::process::die_with_parent();
            if crate::sys::process::parent_id() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
        let mut proc = cmd
            .spawn()
            .map_err(|e| format!("cannot start the {} parser: {e}", kind.as_str()))?;
        let (Some(to), Some(from)) = (proc.stdin.take(), proc.stdout.take()) else {
            let _ = proc.kill();
            let _ = proc.wait();
            return Err("the parser's pipes are missing".into());
        };
        Ok(Child {
            proc,
            to,
            from,
            buf: Vec::new(),
            kind,
        })
    }

    /// Sends `head` and the body (`parts`, one after the other), and waits
    /// for the answer, killing the child when `watch` says the call must
    /// stop (the deadline `grace` later: time for a child that watches the
    /// deadline itself to answer with what it has).
    pub fn ask(
        &mut self,
        watch: &Watch,
        head: &Value,
        parts: &[&[u8]],
        grace: Duration,
    ) -> Result<Value, Failure> {
        if let Some(s) = watch.stop_after(grace) {
            self.kill();
            return Err(Failure::Stopped(s));
        }
        // The child reads a whole request before it works on it, so this
        // write cannot wait on its work.
        let quiet = crate::sys::signal::QuietPipes::new();
        let sent = write_frame(&mut self.to, &[head.to_string().as_bytes()])
            .and_then(|()| write_frame(&mut self.to, parts));
        drop(quiet);
        if let Err(e) = sent {
            return Err(self.failed(watch, grace, &e.to_string()));
        }
        loop {
            if let Some(frame) = take_frame(&mut self.buf).map_err(Failure::Failed)? {
                return serde_json::from_slice(&frame).map_err(|e| {
                    self.kill();
                    Failure::Failed(format!("the {} parser answered badly: {e}", self.name()))
                });
            }
            if let Some(s) = watch.stop_after(grace) {
                self.kill();
                return Err(Failure::Stopped(s));
            }
            let left = (watch.deadline + grace).saturating_duration_since(Instant::now());
            let ms = TICK.min(left).as_millis().max(1) as i32;
            match crate::sys::poll::readable(&self.from, ms) {
                Ok(false) => {}
                Ok(true) => {
                    let mut chunk = [0u8; 64 * 1024];
                    match self.from.read(&mut chunk) {
                        Ok(0) => return Err(self.failed(watch, grace, "it ended")),
                        Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(self.failed(watch, grace, &e.to_string())),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(watch, grace, &e.to_string())),
            }
        }
    }

    fn name(&self) -> &'static str {
        self.kind.as_str()
    }

    /// The child is gone or unreachable: stopped from outside (a Ctrl-C
    /// reaches the whole process group), or broken.
    fn failed(&mut self, watch: &Watch, grace: Duration, what: &str) -> Failure {
        self.kill();
        if let Some(s) = watch.stop_after(grace) {
            return Failure::Stopped(s);
        }
        let status = self
            .proc
            .try_wait()
            .ok()
            .flatten()
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        Failure::Failed(format!("the {} parser failed: {what}{status}", self.name()))
    }

    fn kill(&mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One frame: its length (8 bytes, little-endian), then `parts`.
fn write_frame(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    w.write_all(&(len as u64).to_le_bytes())?;
    for p in parts {
        w.write_all(p)?;
    }
    w.flush()
}

/// A whole frame from the front of `buf`, if it holds one.
fn take_frame(buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>, String> {
    let Some(len) = buf.first_chunk::<8>().map(|b| u64::from_le_bytes(*b)) else {
        return Ok(None);
    };
    if len > MAX_FRAME {
        return Err(format!("a parser answer claims {len} bytes"));
    }
    let end = 8 + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let frame = buf[8..end].to_vec();
    buf.drain(..end);
    Ok(Some(frame))
}

/// The next frame from `r`; `None` at the end of input before one starts.
fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 8];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("a request claims {len} bytes")));
    }
    let mut frame = Vec::new();
    r.take(len).read_to_end(&mut frame)?;
    if frame.len() as u64 != len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(frame))
}

/// The child's side of one request: what to do (JSON), and the bytes.
pub struct Request {
    pub head: Value,
    pub body: Vec<u8>,
}

/// What a child runs: one answer (JSON) per request.
pub trait Parser {
    fn answer(&mut self, req: Request) -> Value;
}

/// A child's whole life (`latchclaw __parse KIND`, through
/// `tools::serve_parser`): confined, it answers each request on stdin with
/// what `kind`'s parser (made by `parser_for`) makes of it, until stdin
/// ends. Its exit code.
pub fn serve(kind: Option<&OsStr>, parser_for: impl FnOnce(Kind) -> Box<dyn Parser>) -> i32 {
    let Some(kind) = kind.and_then(Kind::parse) else {
        return 2;
    };
    confine_self();
    let mut parser = parser_for(kind);
    let mut input = io::stdin().lock();
    let mut output = io::stdout().lock();
    loop {
        let request = match read_frame(&mut input) {
            Ok(None) => return 0,
            Ok(Some(head)) => match (serde_json::from_slice(&head), read_frame(&mut input)) {
                (Ok(head), Ok(Some(body))) => Request { head, body },
                _ => return 1,
            },
            Err(_) => return 1,
        };
        let answer = parser.answer(request);
        if write_frame(&mut output, &[answer.to_string().as_bytes()]).is_err() {
            return 1;
        }
    }
}

/// What the child gives up before it reads its input: gaining privileges,
/// making sockets, and every file (Landlock: all filesystem access handled,
/// none granted; Unix sockets and signals scoped to itself). It keeps the
/// descriptors it has. Best effort: a kernel without a wall leaves the
/// child the others, and the kill still bounds it.
fn confine_self() {
    use crate::security::confine::seccomp;
    use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, Scope};
    let _ = crate::sys::sandbox::set_no_new_privs();
    if let Ok(prog) = seccomp::available() {
        let _ = seccomp::install(prog);
    }
    let abi = ABI::V10;
    let _ = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.handle_access(AccessNet::from_all(abi)))
        .and_then(|r| r.scope(Scope::from_all(abi)))
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self());
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_are_bounded() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &[b"he", b"ad"]).unwrap();
        write_frame(&mut wire, &[]).unwrap();
        let mut r = &wire[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"head");
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"");
        assert!(read_frame(&mut r).unwrap().is_none());
        // Taken a piece at a time, as a pipe delivers it.
        let mut buf = Vec::new();
        for b in &wire {
            buf.push(*b);
            if let Some(f) = take_frame(&mut buf).unwrap() {
                assert!(f == b"head" || f.is_empty());
            }
        }
        assert!(buf.is_empty());
        let mut huge = (MAX_FRAME + 1).to_le_bytes().to_vec();
        assert!(take_frame(&mut huge).is_err());
        assert!(read_frame(&mut &huge[..]).is_err());
        // Cut short: an error, not a short frame.
        let mut cut = 10u64.to_le_bytes().to_vec();
        cut.extend_from_slice(b"abc");
        assert!(read_frame(&mut &cut[..]).is_err());
    }

    #[test]
    fn kinds_parse_back() {
        assert_eq!(Kind::parse(OsStr::new("grep")), Some(Kind::Grep));
        assert_eq!(Kind::parse(OsStr::new("sh")), None);
    }
}
