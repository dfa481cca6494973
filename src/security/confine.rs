//! Kernel confinement of shell commands with Linux Landlock.
//!
//! The gate decides what may run; this is the wall behind it, for when the
//! gate misjudges a command. Each child the shell tool starts is put in a
//! Landlock domain before it executes anything: it may read and execute the
//! system's program directories, read a handful of files programs need,
//! use the workspace (read-only under `readonly` autonomy) and a per-call
//! temporary directory, and nothing else: not the home directory, not
//! latchclaw's state, not `/etc` as a whole, no TCP, no signals or abstract
//! UNIX sockets outside its own domain. latchclaw itself stays outside the
//! domain, so Landlock's ptrace rule also keeps a confined child out of
//! `/proc/<latchclaw>/environ` (the provider keys); for a root child that
//! holds only once CAP_SYS_ADMIN and CAP_PERFMON are gone (see
//! [`BYPASS_CAPS`]).
//!
//! Landlock before ABI 9 and 10 leaves UDP and pathname UNIX socket
//! connects open, so the child also gets a seccomp filter ([`seccomp`]):
//! it cannot create a socket at all (only `AF_UNIX` stream pairs), nor set
//! up io_uring.
//!
//! The ruleset is built in the parent with the `landlock` crate, the filter
//! by hand ([`prepare`]); the child only calls `prctl`, `seccomp` and
//! `landlock_restrict_self` between fork and exec ([`Prepared::install`]).
//!
//! Errors here (and in `view.rs`) are set-up failures said in words, not
//! refusals: there is no kind to carry and every caller shows the text
//! (the shell tool fails the call; `git/ask.rs` makes it a `Confinement`
//! refusal), so they stay `String`.

pub mod egress;
pub mod seccomp;
mod spec;
pub mod view;

pub use crate::config::Confinement as Mode;
use spec::{DEV_READ, ETC_FILES, SYSTEM_DIRS};
pub use spec::{EgressNet, Spec};

use crate::config::{Autonomy, Config};
use crate::sys;
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The newest Landlock ABI whose rights are requested. On an older kernel
/// the crate drops what the kernel does not know (its best-effort mode);
/// on a newer one, rights added after this ABI stay unhandled (allowed).
const TARGET: ABI = ABI::V10;

/// What the running kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The kernel's Landlock ABI version; `None` when Landlock is missing
    /// or disabled.
    pub abi: Option<u32>,
    /// Why `abi` is `None`.
    pub unavailable: Option<&'static str>,
    /// File-system rules (ABI 1; renames across directories: ABI 2).
    pub fs: bool,
    /// Truncation is a right of its own (ABI 3).
    pub truncate: bool,
    /// TCP bind and connect (ABI 4).
    pub net_tcp: bool,
    /// ioctl on devices (ABI 5).
    pub ioctl_dev: bool,
    /// Signals and abstract UNIX sockets stay inside the domain (ABI 6).
    pub scoping: bool,
    /// Connecting to pathname UNIX sockets (ABI 9).
    pub unix_connect: bool,
    /// UDP bind and send (ABI 10).
    pub net_udp: bool,
}

impl Status {
    pub fn from_abi(abi: u32) -> Status {
        Status {
            abi: Some(abi),
            unavailable: None,
            fs: abi >= 1,
            truncate: abi >= 3,
            net_tcp: abi >= 4,
            ioctl_dev: abi >= 5,
            scoping: abi >= 6,
            unix_connect: abi >= 9,
            net_udp: abi >= 10,
        }
    }

    /// A kernel without Landlock, for `why`.
    pub fn missing(why: &'static str) -> Status {
        Status {
            abi: None,
            unavailable: Some(why),
            ..Status::from_abi(0)
        }
    }

    /// What this kernel does not enforce of what latchclaw asks for.
    fn lacking(&self) -> Vec<&'static str> {
        [
            (self.truncate, "truncation (ABI 3)"),
            (self.net_tcp, "TCP (ABI 4)"),
            (self.ioctl_dev, "device ioctl (ABI 5)"),
            (self.scoping, "signal and abstract-socket scoping (ABI 6)"),
            (self.unix_connect, "pathname UNIX socket connect (ABI 9)"),
            (self.net_udp, "UDP (ABI 10)"),
        ]
        .into_iter()
        .filter(|(has, _)| !has)
        .map(|(_, what)| what)
        .collect()
    }
}

/// The kernel's Landlock support, probed once per process.
pub fn status() -> Status {
    static STATUS: OnceLock<Status> = OnceLock::new();
    *STATUS.get_or_init(probe)
}

fn probe() -> Status {
    match crate::sys::sandbox::landlock_abi() {
        Ok(v) => Status::from_abi(v),
        Err(e) => Status::missing(match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) => {
                "Landlock is built in but not enabled; add it to the lsm= boot parameter"
            }
            Some(libc::ENOSYS) => "the kernel is older than 5.13 or built without Landlock",
            _ => "the Landlock probe failed (a seccomp filter?)",
        }),
    }
}

/// A ruleset and a socket filter ready for [`Prepared::install`], and what
/// they enforce.
#[derive(Debug)]
pub struct Prepared {
    ruleset: Option<OwnedFd>,
    filter: Option<&'static [seccomp::Insn]>,
    /// The namespace view; `None` where namespaces are unavailable (or off).
    view: Option<std::sync::Arc<view::View>>,
    mode: Mode,
    description: String,
}

/// What `policy show` says of the socket filter when it is in force.
pub const SOCKET_RULE: &str = "no sockets (seccomp): socket() of every family \
     (AF_INET/AF_INET6/AF_UNIX/AF_NETLINK/AF_PACKET/...) → EACCES; socketpair only \
     AF_UNIX stream/seqpacket; io_uring refused (ENOSYS); pidfd_getfd refused (EPERM)";

/// What `policy show` says of the system-call filter's other half.
pub const PRIVILEGED_RULE: &str = "refused (seccomp, EPERM): reboot, kexec, module loading, \
     mount/umount/pivot_root, swap, clock setting, device mknod, ptrace, process_vm_*, keyctl, \
     bpf, perf_event_open, userfaultfd, open_by_handle_at, iopl/ioperm, unshare/setns, \
     clone with namespace flags and prlimit of another process";

/// Builds the ruleset for `spec` in the parent (see [`Prepared::install`]).
/// `Err`, the call must not run: under `confinement = "required"` where
/// a wall is missing, and in every mode where one this machine has cannot
/// be set up now.
pub fn prepare(spec: &Spec) -> Result<Prepared, String> {
    prepare_with(spec, &status())
}

/// [`prepare`] as if the kernel were `st` (tests simulate a kernel without
/// Landlock; the ruleset itself is always built for the running kernel).
pub fn prepare_with(spec: &Spec, st: &Status) -> Result<Prepared, String> {
    prepare_both(spec, st, seccomp::available())
}

/// [`prepare_with`] with the socket filter given (tests simulate a kernel
/// that cannot install it).
fn prepare_both(
    spec: &Spec,
    st: &Status,
    filter: Result<&'static [seccomp::Insn], &'static str>,
) -> Result<Prepared, String> {
    // Hosts are held only by a network namespace of the child's own: a
    // child without one would have the host's network.
    if spec.egress.is_some() && spec.mode == Mode::Off {
        return Err(
            "a child granted network hosts runs only in the namespace sandbox, and \
             security.confinement = \"off\" would give it the host's whole network; not run"
                .into(),
        );
    }
    if spec.mode == Mode::Off {
        return Ok(Prepared {
            ruleset: None,
            filter: None,
            view: None,
            mode: Mode::Off,
            description: "off (shell commands run without a kernel sandbox)".into(),
        });
    }
    if let (Mode::Required, None) = (spec.mode, st.abi) {
        let why = st.unavailable.unwrap_or("Landlock is unavailable");
        return Err(format!(
            "confinement = \"required\" but this kernel has no Landlock ({why}); \
             shell calls are refused (security.confinement = \"best_effort\" runs them unconfined)"
        ));
    }
    let filter = match filter {
        // A child granted hosts may make TCP sockets (its network
        // namespace holds it to the proxy); the filter that cannot be
        // assembled leaves it with none.
        Ok(f) if spec.egress.is_some() => Ok(seccomp::tcp_program().unwrap_or(f)),
        Ok(f) => Ok(f),
        Err(why) if spec.mode == Mode::Required => {
            return Err(format!(
                "confinement = \"required\" but the seccomp filter cannot be installed \
                 ({why}); shell calls are refused (security.confinement = \"best_effort\" runs \
                 them without it)"
            ));
        }
        Err(why) => {
            warn_once(0, &format!("shell commands may open sockets: {why}"));
            Err(why)
        }
    };
    let (view, ns_lines) = namespaces_for(spec)?;
    if spec.egress.is_some() && view.is_none() {
        return Err(
            "a child granted network hosts runs only in the namespace sandbox, which this \
             machine does not give; not run"
                .into(),
        );
    }
    let unconfined = |why: String| {
        warn_once(
            1,
            &format!("shell commands run unconfined by Landlock: {why}"),
        );
        let mut description = format!("{} (unconfined by Landlock: {why}):", spec.mode.as_str());
        description.push_str(&ns_lines);
        match filter {
            Ok(_) => {
                description.push_str("\n  ");
                description.push_str(SOCKET_RULE);
                description.push_str("\n  ");
                description.push_str(PRIVILEGED_RULE);
                description.push_str("\n  no new privileges; every capability dropped");
            }
            Err(f) => description.push_str(&format!("\n  no seccomp filter either: {f}")),
        }
        Prepared {
            ruleset: None,
            filter: filter.ok(),
            view: view.clone(),
            mode: spec.mode,
            description,
        }
    };
    let Some(abi) = st.abi else {
        let why = st.unavailable.unwrap_or("Landlock is unavailable");
        return Ok(unconfined(format!("this kernel has no Landlock: {why}")));
    };
    match build(spec) {
        Ok((fd, rules)) => Ok(Prepared {
            ruleset: Some(fd),
            filter: filter.ok(),
            view: view.clone(),
            mode: spec.mode,
            description: describe(spec, st, abi, &rules, filter.err(), &ns_lines),
        }),
        // This kernel has Landlock: a ruleset it will not build (no
        // descriptor or memory left, a workspace gone) is no reason to run
        // behind fewer walls, whatever the mode.
        Err(e) => Err(format!(
            "the Landlock ruleset could not be built ({e}); the call is refused rather than run \
             behind fewer walls"
        )),
    }
}

/// Logs `what` once per process for each `slot`: every shell call would
/// repeat it.
fn warn_once(slot: usize, what: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];
    if let Some(w) = WARNED.get(slot)
        && !w.swap(true, Ordering::Relaxed)
    {
        log::warn!(target: "event::confinement_unavailable", "{what}");
    }
}

/// Starts making the namespaces every child of this process shares, on a
/// thread of its own, for a call that will start children: the empty
/// network namespace is about a millisecond of kernel work, which then
/// runs beside the call's started receipt and the workspace walk instead
/// of before the first child. Nothing if they are made or `mode` is off.
pub fn start_early(mode: crate::config::Confinement) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STARTED: AtomicBool = AtomicBool::new(false);
    if mode == crate::config::Confinement::Off
        || view::shared_made()
        || STARTED.swap(true, Ordering::Relaxed)
    {
        return;
    }
    // Without the thread the first child makes them, as before.
    let _ = std::thread::Builder::new()
        .name("namespaces".into())
        .spawn(|| view::shared().map(|_| ()));
}

/// A call's sandbox being prepared on a thread of its own ([`Ahead::start`])
/// while latchclaw does the rest of the call's work before its first child
/// (loading its state, judging the call, writing and syncing its started
/// receipt): its tmp, then the walls for the spec (the workspace walk, the
/// view's plan and, as root, the view itself; the Landlock ruleset).
/// Nothing runs in it. One that is not taken removes its tmp when dropped.
#[derive(Debug)]
pub struct Ahead {
    spec: Spec,
    kinds: Vec<view::Kind>,
    made: Option<std::thread::JoinHandle<Made>>,
    remove: fn(Option<&Path>),
}

/// What [`Ahead`] makes: the call's tmp, and its walls.
type Made = (Option<PathBuf>, Result<Prepared, String>);

impl Ahead {
    /// Starts preparing `spec`'s walls for children of `kinds`, its tmp
    /// made by `tmp` first (and removed by `remove` if it is not taken).
    pub fn start(
        spec: Spec,
        kinds: Vec<view::Kind>,
        tmp: fn() -> Option<PathBuf>,
        remove: fn(Option<&Path>),
    ) -> Option<Ahead> {
        let mut theirs = spec.clone();
        let ready = kinds.clone();
        let made = std::thread::Builder::new()
            .name("sandbox-ahead".into())
            .spawn(move || {
                let dir = tmp();
                theirs.tmp_dir.clone_from(&dir);
                let prepared = prepare(&theirs);
                if let Ok(p) = &prepared {
                    p.ready(&ready);
                }
                (dir, prepared)
            })
            .ok()?;
        Some(Ahead {
            spec,
            kinds,
            made: Some(made),
            remove,
        })
    }

    /// Whether it is being made for `spec` (a spec without its tmp) and
    /// children of `kinds`.
    pub fn is_for(&self, spec: &Spec, kinds: &[view::Kind]) -> bool {
        let a = &self.spec;
        a.workspace == spec.workspace
            && a.workspace_writable == spec.workspace_writable
            && a.cwd == spec.cwd
            && a.mode == spec.mode
            && a.state_dir == spec.state_dir
            && a.forbidden == spec.forbidden
            && a.read_only_dirs == spec.read_only_dirs
            && a.egress.is_none()
            && spec.egress.is_none()
            && self.kinds == kinds
    }

    /// Its tmp and walls, when it was made for `spec` and `kinds` (else
    /// `None`, and it is thrown away).
    pub fn take(mut self, spec: &Spec, kinds: &[view::Kind]) -> Option<Made> {
        if !self.is_for(spec, kinds) {
            return None;
        }
        let (tmp, prepared) = self.made.take()?.join().ok()?;
        // One of latchclaw's files it could not cover has appeared since
        // (the started receipt made the receipts log): made again.
        if let Ok(p) = &prepared
            && p.view.as_ref().is_some_and(|v| v.stale())
        {
            (self.remove)(tmp.as_deref());
            return None;
        }
        Some((tmp, prepared))
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        if let Some(Ok((tmp, _))) = self.made.take().map(|h| h.join()) {
            (self.remove)(tmp.as_deref());
        }
    }
}

/// Whether this machine lets latchclaw give a child namespaces of its own
/// (see [`view::shared`]).
pub fn namespace_status() -> Result<(), String> {
    view::shared().map(|_| ()).map_err(String::from)
}

/// The view for `spec`, and its lines for the description. `Err` under
/// `required` without namespaces, and in every mode when they or the
/// view cannot be made now.
#[allow(clippy::type_complexity)]
fn namespaces_for(spec: &Spec) -> Result<(Option<std::sync::Arc<view::View>>, String), String> {
    let required = spec.mode == Mode::Required;
    // Built before asking whether namespaces hold here, so the walk runs
    // while they are still being made (unless they are known not to).
    let built = (!view::shared_refused()).then(|| view::build(spec));
    let why = match view::shared().map(|_| ()) {
        // This workspace's view, not the machine: refused whatever the mode
        // (falling back would drop the masks a child may have set out to
        // defeat).
        Ok(()) => match built.unwrap_or_else(|| view::build(spec)) {
            Ok(v) => {
                let lines = view_lines(spec, &v);
                return Ok((Some(std::sync::Arc::new(v)), lines));
            }
            Err(e) => {
                return Err(format!(
                    "the sandbox's view of the workspace cannot be built: {e}; the call is \
                     refused"
                ));
            }
        },
        // A failure of the moment, not this kernel's refusal: no fallback
        // (a call that caused it would otherwise make the next ones run
        // behind fewer walls).
        Err(u) if !u.lasting => {
            return Err(format!(
                "the sandbox's namespaces cannot be made now ({}); the call is refused rather \
                 than run behind fewer walls (the next call tries again)",
                u.why
            ));
        }
        Err(u) => u.why,
    };
    if required {
        return Err(format!(
            "confinement = \"required\" but children cannot get namespaces of their own here \
             ({why}); shell calls are refused (security.confinement = \"best_effort\" runs \
             them behind Landlock and seccomp only)"
        ));
    }
    warn_once(2, &format!("shell commands run without namespaces: {why}"));
    Ok((
        None,
        format!(
            "\n  no namespaces ({why}): a call's processes share the host's mounts, PIDs and \
             network, .git is not read-only and secret-named files are not masked by the \
             kernel; a call's end kills its processes one by one"
        ),
    ))
}

fn view_lines(spec: &Spec, v: &view::View) -> String {
    let mut out = format!(
        "\n  namespaces: {} (a call ends by killing its PID namespace: no process it \
         started outlives it; {})",
        view::namespaces_shown(v.user_namespace()),
        match &spec.egress {
            Some(e) => format!(
                "a network namespace of its own: only 127.0.0.1:{} (latchclaw's proxy, which \
                 holds it to the hosts granted)",
                e.port
            ),
            None => "no network: an empty network namespace".to_string(),
        }
    );
    out.push_str(&format!(
        "\n  file system: a root of its own: {} and /etc/{{{}}} read-only, /dev/{{null,zero,random,urandom}}, \
         its own /proc read-only, the workspace {}, the call's tmp dir; not home, not the \
         state dir, not the rest of /tmp",
        SYSTEM_DIRS.join(" "),
        ETC_FILES.join(","),
        if spec.workspace_writable {
            "read+write"
        } else {
            "read-only (readonly autonomy)"
        }
    ));
    out.push_str(&format!(
        "\n  read-only in the workspace, in every child: {} (an approved git write may change \
         .git but not its config, hooks, info, modules, worktrees)",
        super::paths::PROTECTED_WORKSPACE_DIRS
            .iter()
            .map(|d| d.name)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    out.push_str(&format!(
        "\n  masked (an empty read-only file bound over each): {} secret-named files, \
         forbidden paths and the state dir inside the workspace",
        v.masked.len()
    ));
    out
}

/// The paths given a rule, for the description.
struct Rules {
    system: Vec<&'static str>,
    etc: Vec<&'static str>,
    dev_read: Vec<&'static str>,
    dev_null: bool,
}

fn build(spec: &Spec) -> Result<(OwnedFd, Rules), String> {
    let all = AccessFs::from_all(TARGET);
    let read_exec = AccessFs::from_read(TARGET);
    let read: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
    let read_file: BitFlags<AccessFs> = AccessFs::ReadFile.into();
    let e = |e: landlock::RulesetError| e.to_string();
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(e)?
        .handle_access(AccessNet::from_all(TARGET))
        .map_err(e)?
        .scope(Scope::from_all(TARGET))
        .map_err(e)?
        .create()
        .map_err(e)?;
    // A rule for `path`; `Ok(false)` when an optional path does not exist.
    let mut add = |path: &Path, access: BitFlags<AccessFs>, optional: bool| {
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            Err(landlock::PathFdError::OpenCall { source, .. })
                if optional && source.kind() == io::ErrorKind::NotFound =>
            {
                return Ok(false);
            }
            Err(e) => return Err(e.to_string()),
        };
        (&mut ruleset)
            .add_rule(PathBeneath::new(fd, access))
            .map_err(e)?;
        Ok(true)
    };
    let mut rules = Rules {
        system: Vec::new(),
        etc: Vec::new(),
        dev_read: Vec::new(),
        dev_null: false,
    };
    for &dir in SYSTEM_DIRS {
        if add(Path::new(dir), read_exec, true)? {
            rules.system.push(dir);
        }
    }
    for &name in ETC_FILES {
        let p = Path::new("/etc").join(name);
        // A file rule may hold file rights only.
        let access = match std::fs::metadata(&p) {
            Ok(md) if md.is_dir() => read,
            Ok(_) => read_file,
            Err(_) => continue,
        };
        if add(&p, access, true)? {
            rules.etc.push(name);
        }
    }
    add(Path::new("/proc"), read, true)?;
    // `>/dev/null` opens with O_TRUNC, a right of its own since ABI 3.
    let null = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    rules.dev_null = add(Path::new("/dev/null"), null, true)?;
    for &dev in DEV_READ {
        if add(Path::new(dev), read_file, true)? {
            rules.dev_read.push(dev);
        }
    }
    let ws = if spec.workspace_writable {
        all
    } else {
        read_exec
    };
    add(&spec.workspace, ws, false)?;
    if let Some(tmp) = &spec.tmp_dir {
        add(tmp, all & !AccessFs::Execute, false)?;
    }
    for dir in &spec.read_only_dirs {
        add(dir, read_exec, false)?;
    }
    // The proxy's port is the one TCP connect allowed (the child's own
    // network namespace has nothing else to reach).
    if let Some(egress) = &spec.egress {
        ruleset = ruleset
            .add_rule(NetPort::new(egress.port, AccessNet::ConnectTcp))
            .map_err(e)?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    let fd = fd.ok_or("the kernel created no ruleset")?;
    Ok((fd, rules))
}

/// `no_filter`: why the socket filter is not in force, if it is not.
fn describe(
    spec: &Spec,
    st: &Status,
    abi: u32,
    rules: &Rules,
    no_filter: Option<&str>,
    ns_lines: &str,
) -> String {
    let mut out = format!(
        "{} (Landlock ABI {abi}; every shell command runs inside):{ns_lines}",
        spec.mode.as_str()
    );
    let mut line = |s: String| {
        out.push_str("\n  ");
        out.push_str(&s);
    };
    line(format!("read+exec: {}", rules.system.join(" ")));
    let mut read = Vec::new();
    if !rules.etc.is_empty() {
        read.push(format!("/etc/{{{}}}", rules.etc.join(",")));
    }
    read.push("/proc (not the environ or memory of processes outside)".into());
    read.extend(rules.dev_read.iter().map(|d| d.to_string()));
    line(format!("read: {}", read.join(" ")));
    if rules.dev_null {
        line("read+write: /dev/null".into());
    }
    line(format!(
        "workspace {}: {}",
        spec.workspace.display(),
        if spec.workspace_writable {
            "read+write+exec"
        } else {
            "read+exec (readonly autonomy)"
        }
    ));
    if let Some(tmp) = &spec.tmp_dir {
        line(format!("tmp dir {}: read+write", tmp.display()));
    }
    line("anything else: refused (home, latchclaw's state, the rest of /etc, /tmp, /var)".into());
    match (&spec.egress, st.net_tcp) {
        (Some(e), true) => line(format!(
            "network: TCP connect to port {} only (the proxy), bind refused{}",
            e.port,
            if st.net_udp { ", UDP too" } else { "" }
        )),
        (None, true) => line(format!(
            "network: TCP bind and connect refused{}",
            if st.net_udp { ", UDP too" } else { "" }
        )),
        _ => {}
    }
    match no_filter {
        None if spec.egress.is_some() => {
            line(seccomp::TCP_SOCKET_RULE.into());
            line(PRIVILEGED_RULE.into());
        }
        None => {
            line(SOCKET_RULE.into());
            line(PRIVILEGED_RULE.into());
        }
        Some(why) => line(format!("no seccomp filter: {why}")),
    }
    if st.scoping {
        line("scoped: no signals or abstract UNIX sockets beyond its own processes".into());
    }
    line("no new privileges; every capability dropped".into());
    let lacking = st.lacking();
    if !lacking.is_empty() {
        let covered = if no_filter.is_none() && !(st.net_udp && st.unix_connect) {
            "; the socket filter above refuses the sockets they need"
        } else {
            ""
        };
        line(format!(
            "not on this kernel's Landlock: {}{covered}",
            lacking.join(", ")
        ));
    }
    if let Some(state) = &spec.state_dir
        && inside(state, &spec.workspace)
    {
        line(format!(
            "note: the state directory {} is inside the workspace: Landlock cannot keep it \
             out; {}",
            state.display(),
            if ns_lines.contains("namespaces: ") {
                "the namespace view masks it"
            } else {
                "without namespaces only the gate does"
            }
        ));
    }
    out
}

fn inside(p: &Path, dir: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    canon(p).starts_with(canon(dir))
}

impl Prepared {
    /// True when a Landlock ruleset will be applied.
    pub fn is_confined(&self) -> bool {
        self.ruleset.is_some()
    }

    /// True when the seccomp socket filter will be applied.
    pub fn filters_sockets(&self) -> bool {
        self.filter.is_some()
    }

    /// What is in force, one rule a line (for `policy show` and logs).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Whether children get namespaces of their own (the view).
    pub fn has_namespaces(&self) -> bool {
        self.view.is_some()
    }

    /// The walls below the namespaces alone (Landlock, seccomp, the rest):
    /// for tests that hold each wall on its own.
    pub fn without_namespaces(mut self) -> Prepared {
        self.view = None;
        self
    }

    /// Makes the call's base views for `kinds` now: before the first child
    /// of the call runs, so that no child can change the workspace between
    /// the walk and the covers. A base not made here is made at the first
    /// install of its kind.
    pub fn ready(&self, kinds: &[view::Kind]) {
        if let Some(v) = &self.view {
            if let [only] = kinds {
                v.direct(*only);
                return;
            }
            for &k in kinds {
                if let Err(e) = v.base(k) {
                    log::warn!(target: "event::confinement_unavailable", "{}", e.why);
                }
            }
        }
    }

    /// [`Prepared::install_as`] for a program that is not git.
    pub fn install(&self, cmd: &mut Command) {
        self.install_as(cmd, view::Kind::Other, None);
    }

    /// [`Prepared::install`], and `keep` (the ends of the pipes a snippet
    /// talks to latchclaw over, `code_run`'s prelude) left open across the
    /// exec, at the numbers they have here: the one hole in "no descriptor
    /// but stdin, stdout and stderr", and a pipe's, never a socket's.
    pub fn install_keeping(&self, cmd: &mut Command, keep: Vec<std::sync::Arc<OwnedFd>>) {
        use std::os::fd::AsRawFd;
        let numbers = keep.iter().map(|fd| fd.as_raw_fd()).collect();
        self.install_with(cmd, view::Kind::Other, None, numbers);
        // Without namespaces, runs after the walls (hooks run in order) in
        // the process std executes: clears the flag they set. With them,
        // the program is executed by init, which clears it there.
        sys::process::set_pre_exec(cmd, move || {
            for fd in &keep {
                sys::process::keep_across_exec(fd.as_fd())?;
            }
            Ok(())
        });
    }

    /// Makes `cmd`'s child, between fork and exec: die with latchclaw
    /// (`PR_SET_PDEATHSIG`, which follows the spawning *thread*: spawn from
    /// a thread that outlives the child), enter namespaces of its own and
    /// the view ([`view`], as `kind` runs), gain no privileges on exec
    /// (`PR_SET_NO_NEW_PRIVS`: setuid programs do not elevate), lose every
    /// capability, keep no descriptor but stdin, stdout and stderr across
    /// exec, take the seccomp filter ([`seccomp`]) and enter the Landlock
    /// ruleset. A failure to enter the namespaces fails the spawn (they
    /// were probed); of the rest, under `required` a failure fails the
    /// spawn, under `best_effort` the child runs without the part that
    /// failed. With `off` nothing is added.
    ///
    /// With namespaces the program is executed from the namespace's init,
    /// not by `std::process`: from `cmd`'s program (searched for on the
    /// `PATH` it sets when it has no `/`), its arguments after `arg0` (or
    /// the program), and the environment set on it (latchclaw's own is
    /// cleared here, for either path), so hooks set after this one do not
    /// run in the program's process.
    pub fn install_as(&self, cmd: &mut Command, kind: view::Kind, arg0: Option<&OsStr>) {
        self.install_with(cmd, kind, arg0, Vec::new());
    }

    /// As root with namespaces: starts `cmd` as [`Prepared::install_as`]
    /// and `spawn` would, with its stdin, stdout and stderr `stdio`, in
    /// a process group of its own (and `keep`, descriptor numbers left
    /// open across the exec, as [`Prepared::install_keeping`]), but with
    /// the namespace's init as latchclaw's own child
    /// ([`view::View::spawn`]): no copy of latchclaw stands between them.
    /// Only where [`Prepared::spawns_direct`].
    pub fn spawn_direct(
        &self,
        cmd: &mut Command,
        kind: view::Kind,
        arg0: Option<&OsStr>,
        stdio: [std::os::fd::BorrowedFd; 3],
        keep: Vec<i32>,
    ) -> io::Result<Spawned> {
        let Some(v) = self.view.as_ref().filter(|_| self.spawns_direct()) else {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        };
        only_its_own_environment(cmd);
        let exec =
            exec_of(cmd, arg0, keep).map_err(|()| io::Error::from_raw_os_error(libc::E2BIG))?;
        let start = child_start(v, kind)?;
        let ruleset = self.ruleset.as_ref().map(|fd| fd.try_clone());
        let rs = ruleset
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .map(|fd| fd.as_fd());
        let (filter, required) = (self.filter, self.mode == Mode::Required);
        v.spawn(
            start.borrow(),
            rs,
            || walls(ruleset.as_ref(), filter, required),
            &exec,
            stdio,
        )
        .map(|(pid, report, stack)| Spawned {
            pid,
            report: Some(report),
            stack: Some(stack),
        })
    }

    /// Whether children start through [`Prepared::spawn_direct`] here: as
    /// root with the namespace sandbox (else `install_as` and
    /// `std::process`).
    pub fn spawns_direct(&self) -> bool {
        self.mode != Mode::Off && self.view.as_ref().is_some_and(|v| !v.user_namespace())
    }

    fn install_with(
        &self,
        cmd: &mut Command,
        kind: view::Kind,
        arg0: Option<&OsStr>,
        keep: Vec<i32>,
    ) {
        if self.mode == Mode::Off {
            return;
        }
        only_its_own_environment(cmd);
        let exec = self.view.as_ref().map(|_| exec_of(cmd, arg0, keep));
        let required = self.mode == Mode::Required;
        let parent = std::process::id();
        // The hook owns a duplicate, so `self` may be dropped before the spawn.
        let ruleset = self.ruleset.as_ref().map(|fd| fd.try_clone());
        let filter = self.filter;
        let view = self.view.clone();
        // How this child gets its view (the call's base is made now, before
        // this child, the first of the call, or after the others), owned by
        // the hook.
        let start = view.as_ref().map(|v| child_start(v, kind));
        // The hook makes system calls only (`sys`'s hook-safe functions): no
        // allocation, no lock, which is all that is safe after fork in a
        // multithreaded parent.
        sys::process::set_pre_exec(cmd, move || {
            let _ = sys::process::die_with_parent();
            // latchclaw died before the line above: nothing would bound this run.
            if sys::process::parent_id() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            let ruleset = ruleset.as_ref();
            match &view {
                // The rest runs in the namespace's init, before it forks
                // the program: both are confined.
                Some(v) => {
                    let start = match &start {
                        Some(Ok(s)) => s.borrow(),
                        Some(Err(e)) => {
                            return Err(io::Error::from_raw_os_error(
                                e.raw_os_error().unwrap_or(libc::EPERM),
                            ));
                        }
                        None => return Err(io::Error::from_raw_os_error(libc::EPERM)),
                    };
                    let rs = ruleset.and_then(|r| r.as_ref().ok()).map(|fd| fd.as_fd());
                    let Some(Ok(exec)) = &exec else {
                        return Err(io::Error::from_raw_os_error(libc::E2BIG));
                    };
                    Err(v.enter(start, rs, || walls(ruleset, filter, required), exec))
                }
                None => walls(ruleset, filter, required),
            }
        });
    }
}

/// How a child gets its mount namespace, its descriptors owned (a hook
/// keeps them until the fork): see [`view::Start`].
enum ChildStart {
    Join(OwnedFd),
    Made(OwnedFd),
    Build(view::Kind),
}

impl ChildStart {
    fn borrow(&self) -> view::Start<'_> {
        match self {
            ChildStart::Join(fd) => view::Start::Join(fd.as_fd()),
            ChildStart::Made(fd) => view::Start::Made(fd.as_fd()),
            ChildStart::Build(kind) => view::Start::Build(*kind),
        }
    }
}

/// How the next child of `kind` gets its view: the one made ahead for the
/// call's one child, or built by its init; else the call's base (made now
/// if it is not yet).
fn child_start(v: &view::View, kind: view::Kind) -> io::Result<ChildStart> {
    if v.takes_direct(kind) {
        return Ok(v
            .made_ahead(kind)
            .map_or(ChildStart::Build(kind), ChildStart::Made));
    }
    let base = v.base(kind).map_err(|e| {
        log::warn!(target: "event::confinement_unavailable", "{}", e.why);
        io::Error::from_raw_os_error(if e.stale { libc::ESTALE } else { libc::EPERM })
    })?;
    Ok(ChildStart::Join(base.try_clone_to_owned()?))
}

/// A child started by [`Prepared::spawn_direct`]: the namespace's init,
/// which ends as its program did.
#[derive(Debug)]
pub struct Spawned {
    pid: i32,
    /// Where init reports the program's end (see [`view::View::spawn`]).
    report: Option<std::os::fd::OwnedFd>,
    /// The stack init runs on, in latchclaw's memory: freed only once init
    /// is reaped.
    stack: Option<sys::ns::ChildStack>,
}

impl Spawned {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Waits for the program to end, and everything it started with it:
    /// its wait status as init reports it. Init itself is then reaped on a
    /// thread of its own while the kernel tears its namespaces down. An
    /// init that ends without a report (killed: a timeout, estop) is
    /// waited for here, and its own status returned.
    pub fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(status) = self
            .report
            .take()
            .and_then(|r| sys::ns::read_status(r.as_fd()))
        {
            if !self.reap_apart() {
                // No thread to spare: init is ending, waited for here.
                let _ = self.reap_here();
            }
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        self.reap_here().map(std::process::ExitStatus::from_raw)
    }

    /// Waits for init here, then frees its stack: reaped, or not ours to
    /// wait for, it is gone either way.
    fn reap_here(&mut self) -> io::Result<i32> {
        let waited = sys::ns::wait_child(self.pid);
        drop(self.stack.take());
        waited
    }

    /// Hands init and its stack to a thread that reaps it, then frees the
    /// stack; false (the stack still here) when no thread could be made.
    fn reap_apart(&mut self) -> bool {
        let pid = self.pid;
        // The stack goes over once the thread runs: a closure dropped by a
        // failed spawn would unmap it under a running init.
        let (give, take) = std::sync::mpsc::channel::<Option<sys::ns::ChildStack>>();
        let reaper = std::thread::Builder::new()
            .name("sandbox-reaper".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let stack = take.recv().ok().flatten();
                let _ = sys::ns::wait_child(pid);
                drop(stack);
            });
        if reaper.is_err() {
            return false;
        }
        match give.send(self.stack.take()) {
            Ok(()) => true,
            Err(std::sync::mpsc::SendError(stack)) => {
                self.stack = stack;
                false
            }
        }
    }
}

impl Drop for Spawned {
    /// Never waited for (an error between its start and its wait): init
    /// may still run on its stack. Reaped apart, or killed and reaped here.
    fn drop(&mut self) {
        if self.stack.is_some() && !self.reap_apart() {
            let _ = sys::process::kill(self.pid);
            let _ = self.reap_here();
        }
    }
}

/// Leaves `cmd` only the variables set on it: latchclaw's own environment
/// (which may hold provider keys) never reaches a sandboxed child,
/// whichever way it is started.
fn only_its_own_environment(cmd: &mut Command) {
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    cmd.env_clear().envs(env);
}

/// What init executes for `cmd` (see [`Prepared::install_as`]); an error
/// for a NUL byte inside a string.
fn exec_of(cmd: &Command, arg0: Option<&OsStr>, keep: Vec<i32>) -> Result<sys::ns::Exec, ()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| ());
    let env: Vec<(&OsStr, &OsStr)> = cmd.get_envs().filter_map(|(k, v)| Some((k, v?))).collect();
    let program = cmd.get_program();
    let path = if program.as_bytes().contains(&b'/') {
        PathBuf::from(program)
    } else {
        let search = env
            .iter()
            .find(|(k, _)| *k == "PATH")
            .map_or(OsStr::new("/usr/bin:/bin"), |(_, v)| v);
        std::env::split_paths(search)
            .map(|d| d.join(program))
            .find(|p| {
                use std::os::unix::fs::PermissionsExt;
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| PathBuf::from(program))
    };
    let mut argv = vec![c(arg0.unwrap_or(program))?];
    for a in cmd.get_args() {
        argv.push(c(a)?);
    }
    let mut envp = Vec::with_capacity(env.len());
    for (k, v) in env {
        let mut kv = k.to_os_string();
        kv.push("=");
        kv.push(v);
        envp.push(c(&kv)?);
    }
    Ok(sys::ns::Exec::new(c(path.as_os_str())?, argv, envp, keep))
}

/// Runs in the forked child: hook-safe calls only. A failure to enter the
/// seccomp filter or the Landlock ruleset (given only where this kernel
/// has them) fails the spawn in every mode; of the steps before them, only
/// under `required`.
fn walls(
    ruleset: Option<&io::Result<OwnedFd>>,
    filter: Option<&[seccomp::Insn]>,
    required: bool,
) -> io::Result<()> {
    if let Err(e) = sys::sandbox::set_no_new_privs()
        && required
    {
        return Err(e);
    }
    // Root's powers (CAP_SYS_ADMIN and CAP_PERFMON would also read another
    // process's `environ` past Landlock's ptrace rule); a child in a user
    // namespace drops the ones it holds there.
    if !sys::ns::drop_all_capabilities() && required {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    // A socket latchclaw inherited without FD_CLOEXEC would otherwise pass
    // the socket filter by already existing (the exec-error pipe of
    // `std::process` is close-on-exec already: failures are still reported).
    if !sys::sandbox::close_inherited() && required {
        return Err(io::Error::from_raw_os_error(libc::EMFILE));
    }
    // Needs no_new_privs (set above) now that CAP_SYS_ADMIN is gone. The
    // filter and the ruleset are here only where this kernel has them:
    // failing to enter one (out of memory this moment) fails the spawn in
    // every mode, never runs the child behind fewer walls.
    if let Some(prog) = filter {
        seccomp::install(prog)?;
    }
    match ruleset {
        None => Ok(()),
        Some(Ok(fd)) => {
            // The one raw call: the crate's `restrict_self` builds a status
            // value and error types (it allocates), which is not safe after
            // fork in a multithreaded process. The crate built the ruleset
            // in the parent; entering it is this single syscall.
            sys::sandbox::landlock_restrict_self(fd.as_fd())
        }
        // The ruleset could not be handed to the child (no descriptor).
        Some(Err(e)) => Err(io::Error::from_raw_os_error(
            e.raw_os_error().unwrap_or(libc::EBADF),
        )),
    }
}

/// Why a child could not be started in the sandbox, for its caller's
/// error: a workspace that changed under the view being made (a masked
/// file or a protected directory no longer where the walk found it) says
/// so instead of the bare errno.
pub fn start_failure(e: &io::Error) -> String {
    if e.raw_os_error() == Some(libc::ESTALE) {
        "the workspace changed while its sandbox was being made (a directory holding a \
         masked or protected entry was renamed, swapped or replaced by a link since it was \
         walked, perhaps by a process an earlier call left running); nothing ran: run the \
         call again"
            .to_string()
    } else {
        e.to_string()
    }
}

/// What `policy show` prints for shell confinement under `cfg`.
pub fn describe_for(cfg: &Config, workspace: &Path, autonomy: Autonomy) -> String {
    match prepare(&Spec::new(cfg, workspace, autonomy, None)) {
        Ok(p) => p.description,
        Err(e) => format!("{} (refused: {e})", cfg.security.confinement.as_str()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Stdio;

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp() -> TempDir {
        let d = std::env::temp_dir().join(crate::util::new_id("latchclaw-confine"));
        std::fs::create_dir_all(d.join("ws")).unwrap();
        TempDir(std::fs::canonicalize(&d).unwrap())
    }

    fn spec(ws: &Path, mode: Mode) -> Spec {
        Spec::bare(ws, mode)
    }

    /// This process's NoNewPrivs flag as a child started with `p` sees it.
    fn child_no_new_privs(p: &Prepared) -> String {
        let mut cmd = Command::new("/bin/cat");
        cmd.arg("/proc/self/status").stdout(Stdio::piped());
        p.install(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("NoNewPrivs:"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    }

    fn landlock_or_skip() -> Option<u32> {
        let st = status();
        if st.abi.is_none() {
            eprintln!(
                "SKIPPED: this kernel has no Landlock ({})",
                st.unavailable.unwrap_or("?")
            );
        }
        st.abi
    }

    #[test]
    fn status_is_probed_once_and_consistent() {
        let a = status();
        assert_eq!(a, status());
        match a.abi {
            Some(abi) => {
                assert!(abi >= 1 && a.fs && a.unavailable.is_none());
                assert_eq!(a.net_tcp, abi >= 4);
                assert_eq!(a.scoping, abi >= 6);
            }
            None => assert!(a.unavailable.is_some() && !a.fs),
        }
        let m = Status::missing("gone");
        assert_eq!((m.abi, m.fs, m.unavailable), (None, false, Some("gone")));
        assert_eq!(Status::from_abi(3).lacking().len(), 5);
        assert!(Status::from_abi(10).lacking().is_empty());
    }

    #[test]
    fn required_without_landlock_refuses_with_the_reason() {
        let d = temp();
        let err = prepare_with(
            &spec(&d.0.join("ws"), Mode::Required),
            &Status::missing("built without Landlock"),
        )
        .unwrap_err();
        assert!(
            err.starts_with("confinement = \"required\" but this kernel has no Landlock"),
            "{err}"
        );
        assert!(err.contains("built without Landlock"), "{err}");
        assert!(err.contains("shell calls are refused"), "{err}");
    }

    #[test]
    fn best_effort_without_landlock_runs_unconfined_but_without_new_privileges() {
        let d = temp();
        let p = prepare_with(
            &spec(&d.0.join("ws"), Mode::BestEffort),
            &Status::missing("disabled"),
        )
        .unwrap();
        assert!(!p.is_confined());
        assert!(
            p.description().contains("unconfined"),
            "{}",
            p.description()
        );
        assert_eq!(child_no_new_privs(&p), "1");
    }

    #[test]
    fn off_adds_nothing_to_the_child() {
        let d = temp();
        let p = prepare(&spec(&d.0.join("ws"), Mode::Off)).unwrap();
        assert!(!p.is_confined());
        assert!(p.description().starts_with("off"), "{}", p.description());
        // Only when this test process has not set it itself.
        if !sys::sandbox::no_new_privs().unwrap() {
            assert_eq!(child_no_new_privs(&p), "0");
        }
    }

    #[test]
    fn a_ruleset_that_cannot_be_built_refuses_in_every_mode() {
        if landlock_or_skip().is_none() {
            return;
        }
        let d = temp();
        let missing = d.0.join("no-such-workspace");
        let err = prepare(&spec(&missing, Mode::Required)).unwrap_err();
        assert!(err.contains("no-such-workspace"), "{err}");
        if namespace_status().is_ok() {
            // The namespace view is built first, and its failure refuses
            // the call in every mode: a missing workspace has no view.
            assert!(
                err.contains("view of the workspace cannot be built"),
                "{err}"
            );
            let err = prepare(&spec(&missing, Mode::BestEffort)).unwrap_err();
            assert!(
                err.contains("view of the workspace cannot be built"),
                "{err}"
            );
            return;
        }
        // Without namespaces the ruleset refuses it, in every mode: this
        // kernel has Landlock, so nothing falls back.
        for mode in [Mode::Required, Mode::BestEffort] {
            let err = prepare(&spec(&missing, mode)).unwrap_err();
            assert!(err.contains("could not be built"), "{err}");
        }
    }

    #[test]
    fn a_failed_restrict_fails_the_spawn_in_every_mode() {
        // Not a ruleset: landlock_restrict_self refuses it in the child.
        let bogus = || Some(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let required = Prepared {
            ruleset: bogus(),
            filter: None,
            view: None,
            mode: Mode::Required,
            description: String::new(),
        };
        let mut cmd = Command::new("/bin/true");
        required.install(&mut cmd);
        assert!(cmd.status().is_err(), "the child must not run");
        let best = Prepared {
            ruleset: bogus(),
            filter: None,
            view: None,
            mode: Mode::BestEffort,
            description: String::new(),
        };
        let mut cmd = Command::new("/bin/true");
        best.install(&mut cmd);
        assert!(cmd.status().is_err(), "the child must not run");
    }

    #[test]
    fn description_names_the_rules_in_force() {
        let Some(abi) = landlock_or_skip() else {
            return;
        };
        let d = temp();
        let ws = d.0.join("ws");
        let mut s = spec(&ws, Mode::BestEffort);
        s.workspace_writable = false;
        s.tmp_dir = Some(d.0.clone());
        s.state_dir = Some(ws.join(".state"));
        let p = prepare(&s).unwrap();
        assert!(p.is_confined());
        let text = p.description();
        for want in [
            format!("best_effort (Landlock ABI {abi}"),
            "read+exec: /usr".into(),
            "/etc/{".into(),
            "read+write: /dev/null".into(),
            format!("workspace {}: read+exec (readonly autonomy)", ws.display()),
            format!("tmp dir {}: read+write", d.0.display()),
            "state directory".into(),
        ] {
            assert!(text.contains(&want), "{want:?} missing from:\n{text}");
        }
        assert!(!text.contains("passwd"), "{text}");
        assert_eq!(text.contains("TCP bind and connect refused"), abi >= 4);
        assert_eq!(text.contains("scoped:"), abi >= 6);
        assert!(p.filters_sockets());
        assert!(text.contains(SOCKET_RULE), "{text}");
        assert_eq!(
            text.contains("; the socket filter above refuses the sockets they need"),
            abi < 10,
            "{text}"
        );
        // The prepared ruleset survives its owner: the hook holds a duplicate.
        let mut cmd = Command::new("/bin/true");
        p.install(&mut cmd);
        drop(p);
        assert!(cmd.status().unwrap().success());
    }

    fn filter_or_skip() -> Option<&'static [seccomp::Insn]> {
        match seccomp::available() {
            Ok(f) => Some(f),
            Err(why) => {
                eprintln!("SKIPPED: {why}");
                None
            }
        }
    }

    /// Sends a datagram with bash's /dev/udp under `p`; whether it arrived.
    fn udp_arrives(p: &Prepared) -> (bool, std::process::Output) {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let port = rx.local_addr().unwrap().port();
        let mut cmd = Command::new("bash");
        cmd.args(["-c", &format!("echo ping > /dev/udp/127.0.0.1/{port}")]);
        p.install(&mut cmd);
        let out = cmd.output().unwrap();
        (rx.recv(&mut [0u8; 8]).is_ok(), out)
    }

    #[test]
    fn the_filter_alone_refuses_sockets_whatever_landlock_covers() {
        let Some(filter) = filter_or_skip() else {
            return;
        };
        let bare = |filter| Prepared {
            ruleset: None,
            filter,
            view: None,
            mode: Mode::Required,
            description: String::new(),
        };
        let (arrived, out) = udp_arrives(&bare(None));
        assert!(arrived && out.status.success(), "control: {out:?}");
        let (arrived, out) = udp_arrives(&bare(Some(filter)));
        assert!(!arrived, "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("Permission denied"),
            "{err}"
        );
    }

    #[test]
    fn required_without_the_socket_filter_refuses_with_the_reason() {
        let d = temp();
        let err = prepare_both(
            &spec(&d.0.join("ws"), Mode::Required),
            &status(),
            Err("the kernel refused the filter"),
        )
        .unwrap_err();
        assert!(
            err.starts_with(
                "confinement = \"required\" but the seccomp filter cannot be installed"
            ),
            "{err}"
        );
        assert!(err.contains("the kernel refused the filter"), "{err}");
        assert!(err.contains("shell calls are refused"), "{err}");
    }

    #[test]
    fn best_effort_runs_without_the_parts_the_kernel_lacks() {
        let Some(filter) = filter_or_skip() else {
            return;
        };
        let d = temp();
        let s = spec(&d.0.join("ws"), Mode::BestEffort);
        // No Landlock, but the filter: sockets are still refused.
        let p = prepare_both(&s, &Status::missing("disabled"), Ok(filter)).unwrap();
        assert!(!p.is_confined() && p.filters_sockets());
        let text = p.description();
        assert!(text.contains("unconfined by Landlock: this kernel has no Landlock: disabled"));
        assert!(text.contains(SOCKET_RULE), "{text}");
        let (arrived, out) = udp_arrives(&p);
        assert!(!arrived && !out.status.success(), "{out:?}");
        // Neither: the description says so, and the datagram goes through
        // unless the child has a network namespace of its own.
        let p = prepare_both(&s, &Status::missing("disabled"), Err("no seccomp")).unwrap();
        assert!(!p.is_confined() && !p.filters_sockets());
        assert!(
            p.description()
                .ends_with("\n  no seccomp filter either: no seccomp")
        );
        let (arrived, out) = udp_arrives(&p);
        if p.has_namespaces() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !arrived && err.contains("Network is unreachable"),
                "{out:?}"
            );
        } else {
            assert!(arrived && out.status.success(), "{out:?}");
        }
        // Landlock without the filter: its own rules, and the gap named.
        if landlock_or_skip().is_some() {
            let p = prepare_both(&s, &status(), Err("no seccomp")).unwrap();
            assert!(p.is_confined() && !p.filters_sockets());
            assert!(
                p.description()
                    .contains("\n  no seccomp filter: no seccomp")
            );
            assert!(!p.description().contains(SOCKET_RULE));
        }
    }

    #[test]
    fn a_failed_filter_fails_the_spawn_in_every_mode() {
        // Not a BPF instruction: seccomp(2) refuses the program in the child.
        static BOGUS: [seccomp::Insn; 1] = [libc::sock_filter {
            code: 0xffff,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let with = |mode| Prepared {
            ruleset: None,
            filter: Some(&BOGUS),
            view: None,
            mode,
            description: String::new(),
        };
        let mut cmd = Command::new("/bin/true");
        with(Mode::Required).install(&mut cmd);
        let err = cmd.status().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        let mut cmd = Command::new("/bin/true");
        with(Mode::BestEffort).install(&mut cmd);
        let err = cmd.status().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    }

    /// What the namespace view adds to a spawn, printed for the record
    /// (`cargo test --release --lib cost_of_the_namespaces -- --ignored
    /// --nocapture`): medians of spawn+wait of /bin/true with the whole
    /// sandbox and with everything but the namespaces, interleaved.
    #[test]
    #[ignore]
    fn cost_of_the_namespaces() {
        if namespace_status().is_err() {
            eprintln!("SKIPPED: no namespaces here");
            return;
        }
        let d = temp();
        let s = spec(&d.0.join("ws"), Mode::BestEffort);
        let with = prepare(&s).unwrap();
        assert!(with.has_namespaces());
        let mut without = prepare(&s).unwrap();
        without.view = None;
        let time = |p: &Prepared| {
            let mut cmd = Command::new("/bin/true");
            p.install(&mut cmd);
            let t = std::time::Instant::now();
            assert!(cmd.status().unwrap().success());
            t.elapsed()
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            a.push(time(&without));
            b.push(time(&with));
        }
        a.sort();
        b.sort();
        let t = std::time::Instant::now();
        for _ in 0..20 {
            let _ = view::build(&s).unwrap();
        }
        println!(
            "namespaces (medians): spawn+wait /bin/true {} µs without, {} µs with; building \
             the view {} µs",
            a[100].as_micros(),
            b[100].as_micros(),
            t.elapsed().as_micros() / 20,
        );
    }

    /// What the socket filter adds, printed for the record (`cargo test
    /// --lib cost_of_the_socket_filter -- --ignored --nocapture`): medians of
    /// spawns with and without it, interleaved so load that comes and goes
    /// cancels. A measurement, not part of `make test`: on a loaded machine
    /// a 5 ms bound on a median spawn is noise, not a finding.
    #[test]
    #[ignore]
    fn cost_of_the_socket_filter() {
        let (Some(_), Some(filter)) = (landlock_or_skip(), filter_or_skip()) else {
            return;
        };
        let d = temp();
        let s = spec(&d.0.join("ws"), Mode::BestEffort);
        let with = prepare(&s).unwrap();
        let without = prepare_both(&s, &status(), Err("measured without")).unwrap();
        assert!(with.filters_sockets() && !without.filters_sockets());
        let bare = |filter| Prepared {
            ruleset: None,
            filter,
            view: None,
            mode: Mode::Required,
            description: String::new(),
        };
        let median = |mut v: Vec<std::time::Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let time = |p: &Prepared, program: &str, args: &[&str]| {
            let mut cmd = Command::new(program);
            cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null());
            p.install(&mut cmd);
            let t = std::time::Instant::now();
            assert!(cmd.status().unwrap().success());
            t.elapsed()
        };
        let pair = |a: &Prepared, b: &Prepared, program: &str, args: &[&str], n: usize| {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            for _ in 0..n {
                x.push(time(a, program, args));
                y.push(time(b, program, args));
            }
            (median(x), median(y))
        };
        let (spawn_without, spawn_with) = pair(&without, &with, "/bin/true", &[], 200);
        let (spawn_none, spawn_filter) =
            pair(&bare(None), &bare(Some(filter)), "/bin/true", &[], 200);
        // A syscall-bound child: 100,000 one-byte reads and as many writes.
        let dd = [
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            "count=100000",
            "status=none",
        ];
        let (dd_without, dd_with) = pair(&without, &with, "dd", &dd, 15);
        println!(
            "socket filter (medians): spawn+wait /bin/true {} µs with Landlock only, {} µs with \
             Landlock and the filter; {} µs with neither, {} µs with the filter only; \
             dd 200k syscalls {} ms without, {} ms with ({:.0} ns a syscall)",
            spawn_without.as_micros(),
            spawn_with.as_micros(),
            spawn_none.as_micros(),
            spawn_filter.as_micros(),
            dd_without.as_millis(),
            dd_with.as_millis(),
            (dd_with.as_nanos() as f64 - dd_without.as_nanos() as f64) / 200_000.0,
        );
        assert!(
            spawn_with < spawn_without + std::time::Duration::from_millis(5),
            "{spawn_with:?} vs {spawn_without:?}"
        );
    }

    /// Installs `prog` in a forked child, which then tries `socket()`: 0
    /// when that was refused with EACCES, else the install's errno, or 120
    /// when the socket was made.
    fn in_a_child(prog: &'static [seccomp::Insn]) -> i32 {
        // What the hook fails the spawn with when the socket was made: an
        // errno neither prctl nor seccomp(2) gives.
        const MADE: i32 = libc::ENOTRECOVERABLE;
        let mut cmd = std::process::Command::new("/bin/true");
        crate::sys::process::set_pre_exec(&mut cmd, move || {
            let _ = crate::sys::sandbox::set_no_new_privs();
            seccomp::install(prog)?;
            let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            match std::net::UdpSocket::bind(any) {
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => Ok(()),
                _ => Err(io::Error::from_raw_os_error(MADE)),
            }
        });
        match cmd.status() {
            Ok(status) => {
                assert!(status.success(), "{status}");
                0
            }
            Err(e) if e.raw_os_error() == Some(MADE) => 120,
            Err(e) => e.raw_os_error().unwrap_or(119).clamp(1, 119),
        }
    }

    #[test]
    fn the_filter_of_a_child_granted_hosts_lets_tcp_through_and_nothing_else() {
        if seccomp::available().is_err() {
            eprintln!("SKIPPED: no seccomp filter on this machine");
            return;
        }
        let prog = seccomp::tcp_program().expect("assembles where the other does");
        const WRONG: i32 = libc::ENOTRECOVERABLE;
        let mut cmd = std::process::Command::new("/bin/true");
        crate::sys::process::set_pre_exec(&mut cmd, move || {
            let _ = crate::sys::sandbox::set_no_new_privs();
            seccomp::install(prog)?;
            let lo = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let refused =
                |r: io::Result<()>| r.err().and_then(|e| e.raw_os_error()) == Some(libc::EACCES);
            // TCP: the socket is made (where it may connect is Landlock's
            // and the namespace's to hold, not this filter's).
            let tcp_made = !crate::sys::net::socket_refused(libc::AF_INET, libc::SOCK_STREAM, 0)
                && !crate::sys::net::socket_refused(libc::AF_INET6, libc::SOCK_STREAM, 6);
            let udp = refused(std::net::UdpSocket::bind(lo).map(|_| ()));
            // MPTCP: a stream, but not TCP to Landlock's port rule.
            let mptcp = crate::sys::net::socket_refused(libc::AF_INET, libc::SOCK_STREAM, 262);
            let unix = refused(std::os::unix::net::UnixDatagram::unbound().map(|_| ()));
            let fast = crate::sys::net::fast_paths_refused();
            if tcp_made && udp && unix && mptcp && fast == [true; 3] {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(WRONG))
            }
        });
        let status = cmd.status();
        assert!(status.as_ref().is_ok_and(|s| s.success()), "{status:?}");
    }

    #[test]
    fn the_probe_agrees_with_installing_the_filter() {
        let probed = seccomp::available().map(<[seccomp::Insn]>::as_ptr);
        assert_eq!(
            probed,
            seccomp::available().map(<[seccomp::Insn]>::as_ptr),
            "probed once"
        );
        let Some(prog) = seccomp::program() else {
            assert!(probed.is_err());
            return;
        };
        let installed = in_a_child(prog);
        assert_eq!(
            probed.is_ok(),
            installed == 0,
            "{probed:?}, child exit {installed}"
        );
        if status().abi.is_some() {
            // Landlock needs 5.13; seccomp filters and their actions are older.
            assert_eq!(installed, 0);
        }
        // And the probe left this process unfiltered.
        assert!(!crate::sys::sandbox::seccomp_active().unwrap());
    }
}
