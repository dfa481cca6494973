//! `shell`: runs the plan the gate judged (`security::plan`), with
//! `std::process` and no shell: the same argv strings, the same resolved
//! programs, the redirection files the gate checked, pipes between the
//! commands of a pipeline, `&&`/`||`/`;` decided here on exit statuses.
//!
//! Every child gets the environment the plan names (nothing inherited), no
//! stdin, the plan's directory, and a parent-death signal. latchclaw is a
//! child subreaper, so a child that double-forks or calls `setsid` stays
//! latchclaw's descendant, and when the call ends — exit, timeout,
//! emergency stop, Ctrl-C — every descendant is killed.

use super::beneath;
use super::tool::{Tool, ToolCtx, ToolResult};
use crate::security::grammar::Connector;
use crate::security::plan::{Cmd, GitAccess, OpenMode, Plan, Redir, Step};
use crate::security::{confine, estop_engaged};
use crate::sys;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// How often a running call looks at the ESTOP file and Ctrl-C. Completion
/// itself is signalled at once by the runner thread; this only bounds how
/// late a stop takes effect.
const ESTOP_POLL: Duration = Duration::from_millis(50);

pub struct Shell;

/// A terminating signal that arrived during a call (0: none).
static CAUGHT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_terminate(sig: i32) {
    CAUGHT.store(sig, Ordering::SeqCst);
    // The turn stops, and latchclaw dies of the signal on its way out.
    crate::control::signal_from_handler(sig);
}

/// For the length of a call, SIGINT, SIGTERM and SIGHUP are caught so the
/// call's processes die before latchclaw does (a handler the REPL set for
/// Ctrl-C is left alone: it cancels the turn instead).
struct SignalGuard {
    caught: Vec<i32>,
}

impl SignalGuard {
    fn install() -> SignalGuard {
        let caught = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
            .into_iter()
            .filter(|&sig| sys::signal::catch_if_default(sig, on_terminate))
            .collect();
        SignalGuard { caught }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for &sig in &self.caught {
            sys::signal::set_default(sig);
        }
        CAUGHT.store(0, Ordering::SeqCst);
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

    /// Whether bytes were left out.
    fn cut(&self) -> bool {
        self.total > self.head.len() + self.tail.len()
    }

    fn text(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if self.total <= self.head.len() + self.tail.len() {
            return format!("{head}{}", String::from_utf8_lossy(&tail));
        }
        format!(
            "{head}\n…[truncated: {} of {} bytes omitted]…\n{}",
            self.total - self.head.len() - self.tail.len(),
            self.total,
            String::from_utf8_lossy(&tail)
        )
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    // Close-on-exec both ends, as std makes them.
    let (r, w) = std::io::pipe()?;
    Ok((r.into(), w.into()))
}

/// Makes orphaned descendants latchclaw's children instead of init's, so
/// `setsid` and double forks cannot leave the call's process tree.
fn become_subreaper() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let _ = sys::process::become_subreaper();
    });
}

/// Every descendant process of latchclaw, from the parent links in /proc,
/// but for `spare` and theirs.
fn descendants(spare: &[i32]) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may contain anything.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let (_state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<i32>().ok()));
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![me];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid) in &parent_of {
            if ppid == p && pid != me && !out.contains(&pid) && !spare.contains(&pid) {
                out.push(pid);
                frontier.push(pid);
            }
        }
    }
    out
}

/// SIGKILLs every descendant but `spare` (a running snippet whose `tool()`
/// call this is) and theirs. With `reap`, also waits for the ones that
/// became latchclaw's own children, until none is left; only when no other
/// thread is waiting for its children (with a snippet spared, one is: its
/// exit is its own waiter's to take).
fn kill_descendants(reap: bool, spare: &[i32]) {
    let reap = reap && spare.is_empty();
    for _ in 0..if reap { 200 } else { 3 } {
        if reap {
            // No child at all: every descendant would have been reparented
            // to us, so there is nothing left (the common, cheap case).
            match sys::process::reap_one() {
                sys::process::Reaped::NoChildren => return,
                sys::process::Reaped::One => continue,
                sys::process::Reaped::Running => {}
            }
        }
        let all = descendants(spare);
        if all.is_empty() && !reap {
            return;
        }
        for &p in &all {
            let _ = sys::process::kill(p);
        }
        if reap {
            // A blocking wait for any child: they were just killed.
            sys::process::wait_any();
        } else {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A named thread of the call's, or why none could be made.
fn thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<std::thread::JoinHandle<T>, String> {
    crate::util::thread(name, f).map_err(|e| format!("{e}; nothing ran"))
}

/// A directory of the call's own for temporary files (`sort` spills there):
/// the sandbox grants it, and it goes when the call ends.
pub(super) fn private_tmp() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    sweep_once(&base);
    for _ in 0..4 {
        let p = base.join(format!(
            "{CALL_DIR}{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        if std::fs::DirBuilder::new().mode(0o700).create(&p).is_ok() {
            return Some(p);
        }
    }
    None
}

/// A call dir's name: this, the pid of the latchclaw that made it, `-`, a
/// random part.
const CALL_DIR: &str = "latchclaw-call-";
/// A call dir is only taken for abandoned once untouched this long: a
/// latchclaw in another PID namespace sharing this tmp may have a pid that
/// looks dead from here. Also how often a user's tmp dir is swept.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);
/// The most entries of the tmp dir one sweep reads.
const SWEEP_MAX: usize = 10_000;

/// How long ago `m` was modified (none for a time in the future).
fn untouched_for(m: &std::fs::Metadata) -> Option<Duration> {
    m.modified().ok()?.elapsed().ok()
}

/// Removes the call dirs of latchclaw processes that are gone: one killed
/// (SIGKILL, OOM) during a call could not remove its own. Only this user's,
/// only where no process has the pid in the name, only when untouched for
/// [`ABANDONED_AFTER`]. At most once per process, and once an hour per
/// user and tmp dir (a stamp file's age: listing a large tmp dir on every
/// one-shot call cost 0.45 ms on a test machine's /tmp).
fn sweep_once(base: &std::path::Path) {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::Relaxed) {
        return;
    }
    let me = sys::process::effective_uid();
    let stamp = base.join(format!("latchclaw-swept-{me}"));
    let recent = std::fs::symlink_metadata(&stamp).is_ok_and(|m| {
        m.is_file() && m.uid() == me && untouched_for(&m).is_some_and(|t| t < ABANDONED_AFTER)
    });
    if recent {
        return;
    }
    // Not through a link another user planted; its age is all it holds.
    if let Ok(f) = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&stamp)
    {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.take(SWEEP_MAX).flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CALL_DIR))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let path = e.path();
        let abandoned = std::fs::symlink_metadata(&path).is_ok_and(|m| {
            m.is_dir()
                && m.uid() == me
                && untouched_for(&m).is_some_and(|t| t >= ABANDONED_AFTER)
                && !sys::process::exists(pid)
        });
        if abandoned {
            remove_tmp(Some(&path));
        }
    }
}

/// The spec of a call that runs `plan` (without its tmp).
fn spec_for(
    cfg: &crate::config::Config,
    ws: &std::path::Path,
    autonomy: crate::config::Autonomy,
    plan: &Plan,
) -> confine::Spec {
    let mut spec = confine::Spec::new(cfg, ws, autonomy, None);
    spec.cwd = Some(plan.cwd.clone());
    spec
}

/// The views `plan`'s commands run in.
fn kinds_of(plan: &Plan) -> Vec<confine::view::Kind> {
    plan.steps
        .iter()
        .flat_map(|s| &s.commands)
        .map(|c| view_kind(c.git))
        .collect()
}

/// The sandbox of a call that will run `decision`'s plan, prepared on a
/// thread ([`confine::Ahead`]) for the runtime to hand to the call's
/// runner ([`run_judged_plan`], through [`ToolCtx::host`]): `current`
/// (one started when the call was judged) when it is for this plan, or a
/// new one. Called with the call's tool lock held since `current` was
/// started: no other call starts between the walk and this call's first
/// child.
pub(crate) fn prepare_ahead(
    cfg: &crate::config::Config,
    gate: &crate::security::Gate,
    decision: &crate::security::Decision,
    current: Option<confine::Ahead>,
) -> Option<confine::Ahead> {
    let plan = decision.plan.as_ref()?;
    if cfg.security.confinement == crate::config::Confinement::Off {
        return None;
    }
    let ws = gate.workspace().ok()?;
    let spec = spec_for(cfg, ws, gate.autonomy(), plan);
    let kinds = kinds_of(plan);
    if let Some(a) = current.filter(|a| a.is_for(&spec, &kinds)) {
        return Some(a);
    }
    confine::Ahead::start(spec, kinds, private_tmp, remove_tmp)
}

pub(super) fn remove_tmp(p: Option<&std::path::Path>) {
    let Some(p) = p else { return };
    if std::fs::remove_dir_all(p).is_ok() {
        return;
    }
    // A command may have left a directory it cannot be walked into (`chmod
    // 000`): opened up again (it is the call's own), then removed.
    use std::os::unix::fs::PermissionsExt;
    let mut dirs = vec![p.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(e.path());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(p);
}

/// The three standard descriptors of one command.
struct Fds {
    slots: [Option<OwnedFd>; 3],
}

fn null() -> std::io::Result<OwnedFd> {
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?
        .into())
}

/// Opens a redirection target the gate resolved, beneath the workspace
/// descriptor with no symlink followed anywhere on the path, so a
/// directory swapped for a link after the decision cannot redirect it.
fn open_redir(call: &CallEnv, path: &std::path::Path, mode: OpenMode) -> std::io::Result<OwnedFd> {
    use super::beneath::{Symlinks, open_beneath};
    // Truncated only once the file is known to be the one to write.
    let flags = match mode {
        OpenMode::Read => libc::O_RDONLY,
        OpenMode::Truncate => libc::O_WRONLY | libc::O_CREAT,
        OpenMode::Append => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
    };
    if path == std::path::Path::new("/dev/null") {
        return null();
    }
    let (base, rel) = beneath::split(&call.ws, path);
    let f = std::fs::File::from(open_beneath(
        call.fd_for(base),
        rel,
        flags,
        0o644,
        Symlinks::Refuse,
    )?);
    // Opened when its command starts, by path: a process an earlier call
    // left running may have swapped a directory on that path since the
    // gate judged it (a decoy then, a hard link to a secret now). What was
    // opened is held to the gate's rule again, before a byte is read or
    // written.
    let md = f.metadata()?;
    if let Some(why) = crate::security::linked_refusal("it", &md) {
        return Err(std::io::Error::other(why));
    }
    if mode == OpenMode::Truncate && md.is_file() {
        f.set_len(0)?;
    }
    Ok(OwnedFd::from(f))
}

impl Fds {
    fn apply(&mut self, call: &CallEnv, redirs: &[Redir]) -> Result<(), String> {
        for r in redirs {
            match r {
                Redir::Open { fd, path, mode } => {
                    let f = open_redir(call, path, *mode)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    self.slots[*fd as usize] = Some(f);
                }
                Redir::Dup { fd, to } => {
                    let copy = match &self.slots[*to as usize] {
                        Some(f) => Some(f.try_clone().map_err(|e| e.to_string())?),
                        None => None,
                    };
                    self.slots[*fd as usize] = copy;
                }
                Redir::Close { fd } => {
                    self.slots[*fd as usize] = Some(null().map_err(|e| e.to_string())?)
                }
            }
        }
        Ok(())
    }
}

fn stdio(fd: Option<OwnedFd>) -> Stdio {
    fd.map_or_else(Stdio::null, Stdio::from)
}

/// What a runner thread writes for a command that could not start.
fn report(err: &OwnedFd, msg: &str) {
    if let Ok(f) = err.try_clone() {
        let mut f = std::fs::File::from(f);
        let _ = writeln!(f, "latchclaw: {msg}");
    }
}

struct Outputs {
    out: OwnedFd,
    err: OwnedFd,
}

/// What every child of one call shares: its directory, the kernel
/// sandbox and a private temporary directory.
struct CallEnv {
    ws: std::path::PathBuf,
    ws_fd: OwnedFd,
    root_fd: OwnedFd,
    /// The plan's directory, opened when the call starts; children enter it
    /// by descriptor, so a swap of its path for a link changes nothing.
    cwd_fd: Arc<OwnedFd>,
    confine: crate::security::confine::Prepared,
    tmp: Option<std::path::PathBuf>,
}

impl CallEnv {
    /// The open descriptor of a base `beneath::split` chose.
    fn fd_for(&self, base: &std::path::Path) -> std::os::fd::BorrowedFd<'_> {
        if base == self.ws {
            self.ws_fd.as_fd()
        } else {
            self.root_fd.as_fd()
        }
    }
}

/// The sandbox's view a command runs in.
fn view_kind(git: GitAccess) -> confine::view::Kind {
    match git {
        GitAccess::None => confine::view::Kind::Other,
        GitAccess::Read => confine::view::Kind::GitRead,
        GitAccess::Write => confine::view::Kind::GitWrite,
    }
}

/// A command's process: started by `std::process`, or, as root with the
/// namespace sandbox, its namespace's init started by the sandbox itself.
enum Proc {
    Std(Child),
    Direct(confine::Spawned),
}

impl Proc {
    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Proc::Std(c) => c.wait(),
            Proc::Direct(c) => c.wait(),
        }
    }
}

fn spawn(cmd: &Cmd, fds: Fds, call: &CallEnv) -> std::io::Result<Proc> {
    let [i, o, e] = fds.slots;
    let mut c = Command::new(&cmd.program);
    c.arg0(&cmd.argv[0])
        .args(&cmd.argv[1..])
        .env_clear()
        .envs(cmd.env.iter().map(|(k, v)| (k, v)));
    if let Some(t) = &call.tmp {
        c.env("TMPDIR", t);
    }
    if call.confine.spawns_direct() {
        let null = match (&i, &o, &e) {
            (Some(_), Some(_), Some(_)) => None,
            _ => Some(null()?),
        };
        let [Some(si), Some(so), Some(se)] = [&i, &o, &e].map(|f| f.as_ref().or(null.as_ref()))
        else {
            return Err(std::io::Error::from_raw_os_error(libc::EBADF));
        };
        return call
            .confine
            .spawn_direct(
                &mut c,
                view_kind(cmd.git),
                Some(cmd.argv[0].as_ref()),
                [si.as_fd(), so.as_fd(), se.as_fd()],
                Vec::new(),
            )
            .map(Proc::Direct);
    }
    c.stdin(stdio(i))
        .stdout(stdio(o))
        .stderr(stdio(e))
        .process_group(0);
    let cwd = Arc::clone(&call.cwd_fd);
    // Hook-safe calls only (see `sys::process::set_pre_exec`).
    sys::process::set_pre_exec(&mut c, move || {
        sys::process::fchdir(&*cwd)?;
        // Dies with the runner thread that started it, should latchclaw
        // itself be killed.
        sys::process::die_with_parent()
    });
    call.confine
        .install_as(&mut c, view_kind(cmd.git), Some(cmd.argv[0].as_ref()));
    c.spawn().map(Proc::Std)
}

/// Exit status of one pipeline, as sh reports it (128+N for a signal).
fn run_pipeline(step: &Step, call: &CallEnv, io: &Outputs, stop: &AtomicBool) -> i32 {
    let mut children: Vec<Option<Proc>> = Vec::new();
    let mut next_stdin: Option<OwnedFd> = None;
    let n = step.commands.len();
    for (i, cmd) in step.commands.iter().enumerate() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stdin = next_stdin.take();
        let mut stdout = None;
        if i + 1 < n {
            match pipe() {
                Ok((r, w)) => {
                    next_stdin = Some(r);
                    stdout = Some(w);
                }
                Err(e) => {
                    report(&io.err, &format!("cannot create a pipe: {e}"));
                    children.push(None);
                    continue;
                }
            }
        } else if let Ok(o) = io.out.try_clone() {
            stdout = Some(o);
        }
        let stderr = io.err.try_clone().ok();
        let mut fds = Fds {
            slots: [stdin.or_else(|| null().ok()), stdout, stderr],
        };
        if let Err(e) = fds.apply(call, &cmd.redirs) {
            report(&io.err, &e);
            children.push(None);
            continue;
        }
        match spawn(cmd, fds, call) {
            Ok(c) => children.push(Some(c)),
            Err(e) => {
                report(
                    &io.err,
                    &format!(
                        "cannot start `{}`: {}",
                        cmd.argv[0],
                        confine::start_failure(&e)
                    ),
                );
                children.push(None);
            }
        }
    }
    drop(next_stdin);
    let mut status = 1;
    let count = children.len();
    for (i, c) in children.iter_mut().enumerate() {
        let code = match c {
            Some(c) => match c.wait() {
                Ok(st) => st
                    .code()
                    .or_else(|| st.signal().map(|s| 128 + s))
                    .unwrap_or(1),
                Err(_) => 1,
            },
            None => 127,
        };
        if i + 1 == count {
            status = code;
        }
    }
    if count < n {
        status = 1;
    }
    if step.negate {
        status = i32::from(status == 0);
    }
    status
}

fn run_plan(plan: &Plan, call: &CallEnv, io: &Outputs, stop: &AtomicBool) -> i32 {
    let mut last = 0;
    for step in &plan.steps {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let skip = match step.connector {
            Connector::Seq => false,
            Connector::And => last != 0,
            Connector::Or => last == 0,
        };
        if !skip {
            last = run_pipeline(step, call, io, stop);
        }
    }
    last
}

impl Tool for Shell {
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::Shell
    }
    fn description(&self) -> &'static str {
        "Runs a command line in the workspace: pipes, && || ;, redirections, $VAR, globs (no subshells). Returns output and exit code."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the command line, e.g. ls -la"},
                "cwd": {"type": "string"},
                "timeout_ms": {"type": "integer"},
                "max_output_chars": {"type": "integer"}
            },
            "required": ["command"]
        })
    }
    fn defaults(&self) -> Value {
        json!({"cwd": ".", "timeout_ms": "shell_timeout_secs × 1000",
               "max_output_chars": "tool_output_max_bytes"})
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        match crate::types::args::shell_args(args) {
            Ok(a) => run_judged_plan_with(
                ctx,
                a.timeout_ms.map(Duration::from_millis),
                a.max_output_chars.map(|n| n as usize),
            ),
            Err(e) => ToolResult::err(e),
        }
    }
}

/// Runs the plan in `ctx.decision` exactly as judged, confined, within
/// `shell_timeout_secs` and the call's deadline, its output capped at
/// `tool_output_max_bytes`: the runner of every tool that starts programs.
pub(crate) fn run_judged_plan(ctx: &ToolCtx) -> ToolResult {
    run_judged_plan_with(ctx, None, None)
}

/// `run_judged_plan` with a call's own `timeout_ms` and `max_output_chars`,
/// each only ever shorter than the configured limit.
fn run_judged_plan_with(
    ctx: &ToolCtx,
    timeout_ms: Option<Duration>,
    max_chars: Option<usize>,
) -> ToolResult {
    let Some(plan) = ctx.decision.plan.clone() else {
        return ToolResult::err("the gate returned no plan for this command");
    };
    let ws = match ctx.gate.workspace() {
        Ok(w) => w.to_path_buf(),
        Err(e) => return ToolResult::err(e.reason),
    };
    let mut spec = spec_for(ctx.cfg, &ws, ctx.gate.autonomy(), &plan);
    let kinds = kinds_of(&plan);
    let ahead = ctx.host.take_ahead().and_then(|a| a.take(&spec, &kinds));
    let (tmp, prepared) = ahead.unwrap_or_else(|| {
        let tmp = private_tmp();
        spec.tmp_dir.clone_from(&tmp);
        let prepared = confine::prepare(&spec);
        (tmp, prepared)
    });
    let confine = match prepared {
        Ok(p) => p,
        Err(e) => {
            remove_tmp(tmp.as_deref());
            return ToolResult::err(e);
        }
    };
    // Without namespaces, orphans must stay latchclaw's to be killed; with
    // them, a call's processes die with its PID namespace, and a dying
    // namespace's init is left to the system to reap.
    let namespaced = confine.has_namespaces();
    if !namespaced {
        become_subreaper();
    }
    let opened = beneath::open_workspace(&ws).and_then(|ws_fd| {
        let root_fd = beneath::open_workspace(std::path::Path::new("/"))?;
        // The directory the gate judged, by the same route as every
        // other path: beneath the workspace, or from `/` outside it.
        let (base, rel) = beneath::split(&ws, &plan.cwd);
        let from = if base == ws {
            ws_fd.as_fd()
        } else {
            root_fd.as_fd()
        };
        let cwd_fd = beneath::open_dir_beneath(from, rel, beneath::Symlinks::Refuse)?;
        Ok((ws_fd, root_fd, cwd_fd))
    });
    let (ws_fd, root_fd, cwd_fd) = match opened {
        Ok(fds) => fds,
        Err(e) => {
            remove_tmp(tmp.as_deref());
            return ToolResult::err(format!(
                "cannot open the command's directory {} beneath the workspace: {e}",
                plan.cwd.display()
            ));
        }
    };
    // Every view the plan's commands need, before the first one runs (done
    // already when prepared ahead; again is nothing).
    confine.ready(&kinds);
    let call = CallEnv {
        ws,
        ws_fd,
        root_fd,
        cwd_fd: Arc::new(cwd_fd),
        confine,
        tmp,
    };
    let cap = ctx.cfg.tool_output_max_bytes;
    let tmp = call.tmp.clone();
    let (Ok((out_r, out_w)), Ok((err_r, err_w))) = (pipe(), pipe()) else {
        remove_tmp(tmp.as_deref());
        return ToolResult::err("cannot create pipes for the command's output");
    };
    // Out of processes (a call may fill the system's pid space), a thread
    // cannot be made: that ends this call, never latchclaw (a gateway
    // serves other conversations).
    let readers = thread("shell-stdout", move || {
        Capture::read_all(std::fs::File::from(out_r), cap)
    })
    .and_then(|out| {
        thread("shell-stderr", move || {
            Capture::read_all(std::fs::File::from(err_r), cap / 4)
        })
        .map(|err| (out, err))
    });
    let (out_reader, err_reader) = match readers {
        Ok(r) => r,
        Err(e) => {
            remove_tmp(tmp.as_deref());
            return ToolResult::err(e);
        }
    };
    let own = ctx.cfg.tools.of(crate::types::ToolName::Shell).timeout_secs;
    let timeout = Duration::from_secs(own.unwrap_or(ctx.cfg.shell_timeout_secs))
        .min(timeout_ms.unwrap_or(Duration::MAX))
        .min(ctx.deadline.saturating_duration_since(Instant::now()));
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let signals = SignalGuard::install();
    let worker = {
        let stop = Arc::clone(&stop);
        thread("shell-runner", move || {
            let io = Outputs {
                out: out_w,
                err: err_w,
            };
            let code = run_plan(&plan, &call, &io, &stop);
            drop(io);
            remove_tmp(call.tmp.as_deref());
            let _ = tx.send(code);
        })
    };
    // Not started: nothing ran; its output pipes went with it, so the
    // readers end.
    let worker = match worker {
        Ok(w) => w,
        Err(e) => {
            remove_tmp(tmp.as_deref());
            let _ = out_reader.join();
            let _ = err_reader.join();
            return ToolResult::err(e);
        }
    };
    let estop_path = ctx.gate.estop_path().to_path_buf();
    let mut stopped: Option<&str> = None;
    let code = loop {
        let wait = ESTOP_POLL.min(timeout.saturating_sub(started.elapsed()));
        match rx.recv_timeout(wait) {
            Ok(code) => break Some(code),
            Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if stopped.is_some() {
            continue;
        }
        if ctx.control.cancelled() || CAUGHT.load(Ordering::SeqCst) != 0 {
            stopped = Some("cancelled");
        } else if estop_engaged(&estop_path).is_some() {
            stopped = Some("estop");
        } else if started.elapsed() >= timeout {
            stopped = Some("timeout");
        }
        if stopped.is_some() {
            stop.store(true, Ordering::SeqCst);
            kill_descendants(false, ctx.spare);
        }
    };
    let _ = worker.join();
    // Whatever the command left behind (daemons, double forks) goes too;
    // in namespaces, each init saw to that before it reported.
    if !namespaced {
        kill_descendants(true, ctx.spare);
    }
    drop(signals);
    let (stdout, out_cut) = out_reader
        .join()
        .map(|c| (c.text(), c.cut()))
        .unwrap_or_default();
    let (stderr, err_cut) = err_reader
        .join()
        .map(|c| (c.text(), c.cut()))
        .unwrap_or_default();
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut output = stdout;
    if !stderr.is_empty() {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str("[stderr]\n");
        output.push_str(&stderr);
    }
    let mut truncated = out_cut || err_cut;
    if let Some(max) = max_chars
        && let Some((at, _)) = output.char_indices().nth(max)
    {
        let total = output.chars().count();
        output.truncate(at);
        output.push_str(&format!(
            "\n…[truncated: showing the first {max} of {total} characters (max_output_chars)]"
        ));
        truncated = true;
    }
    let metadata = json!({
        "exit_code": code,
        "duration_ms": duration_ms,
        "timed_out": stopped == Some("timeout"),
        "estop": stopped == Some("estop"),
        "truncated": truncated,
    });
    let error = match (stopped, code) {
        (Some("timeout"), _) => Some(format!(
            "timed out after {} s (tools.shell.timeout_secs or shell_timeout_secs, tool_timeout_secs \
                 or the run's --timeout); \
                 every process it started was killed",
            // What was left of the deadline when the call began: 1.98 s
            // of a 2 s limit reads as 2.
            timeout.as_millis().div_ceil(1000)
        )),
        (Some("cancelled"), _) => {
            Some("cancelled (Ctrl-C or a signal); every process it started was killed".to_string())
        }
        (Some(_), _) => {
            Some("stopped by the emergency stop; every process it started was killed".to_string())
        }
        (None, Some(0)) => None,
        (None, Some(c)) => Some(format!("exit code {c}")),
        (None, None) => Some("the runner stopped unexpectedly".to_string()),
    };
    ToolResult {
        success: error.is_none(),
        output,
        error,
        metadata: Some(metadata),
        receipt_id: None,
        measured: None,
        estop: stopped == Some("estop"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
