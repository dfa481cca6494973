//! The namespace wall: what a sandboxed child sees and which kernel
//! objects it shares with the host.
//!
//! Each child gets new mount, PID, IPC and UTS namespaces, and joins an
//! empty network namespace (and a user namespace when latchclaw is not
//! root) that every child of the process shares. Its root is a fresh,
//! read-only tmpfs holding only bind mounts: the system's program
//! directories and a few `/etc` files read-only, `/dev/{null,zero,random,
//! urandom}`, a `/proc` of its own PID namespace (read-only), the
//! workspace (read-only under `readonly` autonomy) and the call's own tmp
//! directory. Home, latchclaw's state and the rest of `/tmp` are not there.
//! Inside the workspace, every `.git` and `.latchclaw` is bound read-only
//! over itself (an approved git write gets `.git` writable but for what
//! makes code run later: `config`, `hooks`, `info`, …), and every
//! secret-named file, forbidden path and the state directory has an empty
//! read-only file or directory bound over it. None of this depends on what
//! the gate decided: a child the gate misjudged sees the same.
//!
//! The plan of system calls is built in the parent from one walk of the
//! workspace ([`build`]). For a call of one command the view is its
//! child's alone ([`View::direct`]): as root it is made at once on a
//! thread of latchclaw's (a shell call's, beside its started receipt) and
//! the child only enters it; without root its init runs the plan. For
//! more, a maker child that never executes anything sets it up once per
//! call and kind of child, before the call's first child runs, and holds
//! the resulting mount namespace ([`View::base`]); each child joins it and
//! takes a copy of its own ([`View::enter`], which allocates nothing). The
//! PID namespace takes one more fork: the child that unshares stays
//! outside and exits as the program did; its child is the namespace's
//! init (PID 1), which starts the program (sharing its memory until the
//! exec, as posix_spawn does: nothing of latchclaw is copied for it),
//! reports its end, kills what it left and dies with its parent — and
//! when init dies the kernel kills everything left in the namespace, so
//! no process a call started outlives it.

use super::spec::{DEV_READ, ETC_FILES, SYSTEM_DIRS, Spec};
use crate::sys;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Where the new root is staged before `pivot_root`: hidden by it only in
/// the child's own mount namespace, and found again under `OLD` after.
const STAGE: &str = "/tmp";
const OLD: &str = "/oldroot";
/// The empty things bound over what a child must not read.
const EMPTY_FILE: &str = "/.latchclaw-masked";
/// The host's /proc in the base, until a child's own is mounted.
const HOST_PROC: &str = "/.latchclaw-host-proc";
const EMPTY_DIR: &str = "/.latchclaw-masked.d";

/// Entries of the workspace looked at for masks before the walk gives up.
const WALK_MAX: usize = 100_000;
const DEPTH_MAX: usize = 128;

/// Entries of a git directory that an approved git write still may not
/// change: each makes a program run, or points git at other files.
const GIT_CODE: &[&str] = &[
    "config",
    "config.worktree",
    "hooks",
    "info",
    "modules",
    "worktrees",
    "commondir",
    "gitdir",
    "objects/info/alternates",
    "shallow",
];

#[derive(Debug, Clone)]
enum Step {
    Dir(CString),
    File(CString),
    Link {
        target: CString,
        path: CString,
    },
    Mount {
        src: Option<CString>,
        dst: CString,
        fstype: Option<CString>,
        flags: u64,
        data: Option<CString>,
    },
    ReadOnly {
        dst: CString,
        recursive: bool,
    },
    /// `src` bound over `dst`, read-only (`src == dst`: `dst` made
    /// read-only in place). When `dst` is gone (renamed or removed since
    /// the walk) the child is refused (`ESTALE`), but for latchclaw's own
    /// files: what it covered may now be elsewhere, uncovered, and the
    /// call is run again, walked again.
    Cover {
        src: CString,
        dst: CString,
        /// latchclaw's own file (a journal comes and goes): gone, it is
        /// skipped (its directory is covered too).
        own: bool,
        /// The object the walk found at `dst` (st_dev, st_ino): covered
        /// only if `dst` still is it, by descriptor (`sys::ns::cover_object`),
        /// else the child is refused (`ESTALE`). A process of an earlier
        /// call still running (a background `code_run`, an MCP server) can
        /// swap directories of the workspace between the walk and the
        /// cover; a cover by path would then land on its decoy.
        id: Option<Id>,
    },
    /// A procfs of the child's PID namespace at /proc, without entries for
    /// processes the child may not trace (init), or the host's bound when
    /// the kernel refuses a new one (it does in a user namespace when the
    /// host's /proc has parts masked, as in many containers).
    Proc,
    Pivot,
}

/// What one child runs as: which parts of `.git` it may write, and
/// whether git's own secret-named config is masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Kind {
    /// Any program: `.git` read-only and its `config` masked.
    Other,
    /// git reading: `.git` read-only, its config readable.
    GitRead,
    /// git writing what the gate approved: `.git` writable but for
    /// [`GIT_CODE`].
    GitWrite,
}

/// A call's view, ready for [`View::enter`]: the base every child of the
/// call shares, made once before the first child starts, and what a git
/// child's own copy adds (its /proc).
#[derive(Debug)]
pub struct View {
    shared: &'static Shared,
    /// A network namespace of the call's own (its loopback up, latchclaw's
    /// egress proxy listening there: `egress`) instead of the shared empty
    /// one.
    net: Option<std::sync::Arc<OwnedFd>>,
    /// The bases, one per [`Kind`]: the new root, the binds, every mask,
    /// every protected directory read-only (a git child's own without
    /// `.git/config` masked; a git writer's with `.git` writable but for
    /// [`GIT_CODE`]). Each is made once per call by [`View::base`]'s maker
    /// before any child of the call runs ([`super::Prepared::ready`]), so
    /// no child can move a path between the walk and its cover, and none
    /// is changed by path after a child ran (covers are mounts on the
    /// directory entries: they follow a rename).
    bases: [Vec<Step>; 3],
    made: [OnceLock<Result<Base, Unmade>>; 3],
    /// Set by [`View::direct`]: the next child of this kind builds the
    /// view in its own init instead of joining a base.
    direct: [AtomicBool; 3],
    cwd: CString,
    /// As root, the view a call's one child of each kind takes, made
    /// ahead on a thread by [`View::direct`] (the child then only mounts
    /// its /proc).
    made_ahead: [std::sync::Mutex<Option<OwnedFd>>; 3],
    /// Workspace paths with an empty thing bound over them.
    pub masked: Vec<PathBuf>,
    /// latchclaw's files inside the workspace that were not there to cover
    /// when the view was planned.
    missing: Vec<PathBuf>,
}

/// Why a call's base view could not be made.
#[derive(Debug, Clone)]
pub struct Unmade {
    pub why: String,
    /// The workspace changed under it since the walk (`ESTALE`).
    pub stale: bool,
}

impl From<String> for Unmade {
    fn from(why: String) -> Unmade {
        Unmade { why, stale: false }
    }
}

/// How a child gets its mount namespace ([`View::enter`]).
pub enum Start<'a> {
    /// Joins the call's base, then takes a copy of its own.
    Join(BorrowedFd<'a>),
    /// Enters the view made ahead for it ([`View::direct`]), its own.
    Made(BorrowedFd<'a>),
    /// Builds the view of this kind itself.
    Build(Kind),
}

/// A call's base mount namespace, and the process that holds it until the
/// call is over (so that the kernel's teardown of it, which waits for RCU,
/// happens in that process's exit, not in latchclaw's).
#[derive(Debug)]
struct Base {
    ns: OwnedFd,
    holder: Option<std::process::Child>,
    release: Option<OwnedFd>,
}

impl Drop for Base {
    fn drop(&mut self) {
        // Closing the pipe ends the holder; it is reaped off this thread.
        self.release = None;
        if let Some(mut holder) = self.holder.take() {
            let _ = std::thread::Builder::new()
                .name("view-reaper".into())
                .spawn(move || {
                    let _ = holder.wait();
                });
        }
    }
}

fn cstr(p: impl AsRef<OsStr>) -> Result<CString, String> {
    CString::new(p.as_ref().as_bytes()).map_err(|_| format!("{:?} holds a NUL byte", p.as_ref()))
}

fn old(p: &Path) -> Result<CString, String> {
    cstr(Path::new(OLD).join(p.strip_prefix("/").unwrap_or(p)))
}

const MS_BIND: u64 = libc::MS_BIND;
const MS_REC: u64 = libc::MS_REC;

/// Whether latchclaw can make namespaces without a user namespace (root
/// with CAP_SYS_ADMIN); otherwise it needs an unprivileged one.
pub fn needs_user_namespace() -> bool {
    sys::process::effective_uid() != 0 || !sys::sandbox::has_sys_admin()
}

/// The namespaces a child gets, named.
pub fn namespaces_shown(user: bool) -> String {
    let mut v = vec![];
    if user {
        v.push("user");
    }
    v.extend(["mount", "pid", "ipc", "uts", "net"]);
    v.join("+")
}

struct Builder {
    steps: Vec<Step>,
    /// Directories already made in the new root.
    made: Vec<PathBuf>,
}

impl Builder {
    /// Mount points for `p` and every directory above it.
    fn dirs_to(&mut self, p: &Path) -> Result<(), String> {
        let mut acc = PathBuf::from("/");
        for c in p.components().skip(1) {
            acc.push(c);
            if !self.made.contains(&acc) {
                self.made.push(acc.clone());
                self.steps.push(Step::Dir(cstr(&acc)?));
            }
        }
        Ok(())
    }

    fn parent_dirs(&mut self, p: &Path) -> Result<(), String> {
        match p.parent() {
            Some(parent) => self.dirs_to(parent),
            None => Ok(()),
        }
    }

    /// Binds the host's `p` at the same place, read-only unless `write`;
    /// a symbolic link is recreated as one. `Ok(false)` when `p` is
    /// missing.
    fn bind(&mut self, p: &Path, write: bool) -> Result<bool, String> {
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return Ok(false);
        };
        self.parent_dirs(p)?;
        if md.file_type().is_symlink() {
            let target = std::fs::read_link(p).map_err(|e| format!("{}: {e}", p.display()))?;
            self.steps.push(Step::Link {
                target: cstr(&target)?,
                path: cstr(p)?,
            });
            return Ok(true);
        }
        if md.is_dir() {
            self.dirs_to(p)?;
        } else {
            self.steps.push(Step::File(cstr(p)?));
        }
        self.steps.push(Step::Mount {
            src: Some(old(p)?),
            dst: cstr(p)?,
            fstype: None,
            flags: MS_BIND | MS_REC,
            data: None,
        });
        if !write {
            self.steps.push(Step::ReadOnly {
                dst: cstr(p)?,
                recursive: true,
            });
        }
        Ok(true)
    }
}

/// A bind of `p` over itself, read-only (inside an already bound tree).
fn read_only_over_itself(p: &Path, id: Option<Id>, out: &mut Vec<Step>) -> Result<(), String> {
    let c = cstr(p)?;
    out.push(Step::Cover {
        src: c.clone(),
        dst: c,
        own: false,
        id,
    });
    Ok(())
}

/// An empty read-only file or directory bound over `p`.
fn mask(p: &Path, dir: bool, own: bool, id: Option<Id>, out: &mut Vec<Step>) -> Result<(), String> {
    out.push(Step::Cover {
        src: cstr(if dir { EMPTY_DIR } else { EMPTY_FILE })?,
        dst: cstr(p)?,
        own,
        id,
    });
    Ok(())
}

/// A file's st_dev and st_ino: which object a path led to.
type Id = (u64, u64);

/// The object at `p` (not following a link at its end).
fn id_of(p: &Path) -> Option<Id> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// What the walk of the workspace found, each with the object it was.
#[derive(Default)]
struct Found {
    /// (path, is a directory, object) to mask in every child.
    masks: Vec<(PathBuf, bool, Option<Id>)>,
    /// Secret-named files inside git directories (git's config, a
    /// submodule's, a worktree's): masked for every program but git.
    git_masks: Vec<(PathBuf, Option<Id>)>,
    /// `.git` and `.latchclaw` entries, and git directories by shape.
    protected: Vec<(PathBuf, Option<Id>)>,
}

/// Walks the workspace for what to mask and protect. Fails closed: a
/// directory it cannot read, a tree deeper than [`DEPTH_MAX`] or more than
/// [`WALK_MAX`] entries refuse the call (a child could otherwise hide a
/// secret or a repository where the walk does not look).
fn walk(spec: &Spec, ws: &Path) -> Result<Found, String> {
    for _ in 0..WALK_TRIES {
        if let Some(found) = walk_once(spec, ws)? {
            return Ok(found);
        }
    }
    Err(format!(
        "the workspace {} kept changing while it was walked to find what to mask \
         ({WALK_TRIES} tries: a directory gone, or changed while it was listed); run the \
         call again",
        ws.display()
    ))
}

/// Walks to do before a workspace that keeps changing refuses the call.
const WALK_TRIES: usize = 4;

/// One walk; `None` when a directory vanished between its parent's listing
/// and its own (renamed or removed meanwhile: a walk that skipped it could
/// miss what it holds, now elsewhere).
fn walk_once(spec: &Spec, ws: &Path) -> Result<Option<Found>, String> {
    use std::collections::HashSet;
    use std::os::unix::fs::MetadataExt;
    let allow = &spec.secret_allow;
    let mut found = Found::default();
    let mut secret_inodes: HashSet<(u64, u64)> = HashSet::new();
    let mut linked: Vec<(PathBuf, (u64, u64))> = Vec::new();
    let mut stack = vec![(ws.to_path_buf(), 0usize, false)];
    let mut seen = 0usize;
    // A directory changed while it was listed may have had an entry moved
    // past the listing (a rename inside it): walked again.
    let stamp = |d: &Path| {
        std::fs::symlink_metadata(d).ok().map(|m| {
            (
                m.ino(),
                m.ctime(),
                m.ctime_nsec(),
                m.mtime(),
                m.mtime_nsec(),
            )
        })
    };
    // Every directory listed, as it was: looked at again once all are, since
    // an entry moved from a directory not yet listed into one already
    // listed (a process of an earlier call may be renaming meanwhile) is
    // seen in neither.
    let mut listed = Vec::new();
    while let Some((dir, depth, in_git)) = stack.pop() {
        let before = stamp(&dir);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "{} cannot be read to find what to mask in it ({e})",
                    dir.display()
                ));
            }
        };
        for e in rd {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            seen += 1;
            if seen > WALK_MAX {
                return Err(format!(
                    "the workspace holds more than {WALK_MAX} entries, more than latchclaw \
                     walks to find what to mask"
                ));
            }
            let path = e.path();
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name();
            let lower = name.to_string_lossy().to_lowercase();
            let rel = path.strip_prefix(ws).unwrap_or(&path);
            let protected = !in_git
                && crate::security::paths::PROTECTED_WORKSPACE_DIRS
                    .iter()
                    .any(|d| lower == d.name);
            let secret = super::super::secret_files::rule_for(rel)
                .is_some_and(|r| !allow.lifts(r, rel, Some(rel)));
            if ft.is_symlink() {
                // A mount follows the link: what it leads to is covered,
                // when that is inside the workspace (elsewhere is not in
                // the view at all).
                if (protected || secret)
                    && let Ok(to) = std::fs::canonicalize(&path)
                    && to.starts_with(ws)
                    && to != ws
                {
                    let id = id_of(&to);
                    if protected {
                        found.protected.push((to, id));
                    } else {
                        let dir = to.is_dir();
                        found.masks.push((to, dir, id));
                    }
                }
                continue;
            }
            if ft.is_dir() {
                // A git directory by its shape, whatever its name (a
                // gitfile's target, a bare repository): its hooks and
                // config run code.
                let by_shape =
                    !in_git && !protected && crate::security::paths::git_dir_by_shape(&path);
                if protected || by_shape {
                    found.protected.push((path.clone(), id_of(&path)));
                }
                // Its config may hold credentials, as `.git/config` does
                // (masked by name): masked for every program but git.
                if by_shape {
                    let config = path.join("config");
                    let by_name = super::super::secret_files::rule_for(
                        config.strip_prefix(ws).unwrap_or(&config),
                    )
                    .is_some();
                    if !by_name && let Some(id) = id_of(&config) {
                        found.git_masks.push((config, Some(id)));
                    }
                }
                // Object stores too: a child can move a secret's directory
                // into one.
                if depth + 1 > DEPTH_MAX {
                    return Err(format!(
                        "{} is deeper than {DEPTH_MAX} levels, deeper than latchclaw walks to \
                         find what to mask",
                        path.display()
                    ));
                }
                let git = in_git || by_shape || (protected && lower == ".git");
                stack.push((path, depth + 1, git));
                continue;
            }
            let mut object = None;
            if ft.is_file()
                && let Ok(md) = e.metadata()
            {
                let id = (md.dev(), md.ino());
                object = Some(id);
                if secret {
                    secret_inodes.insert(id);
                } else if md.nlink() > 1 {
                    linked.push((path.clone(), id));
                }
            }
            if secret {
                let object = object.or_else(|| id_of(&path));
                if in_git {
                    found.git_masks.push((path, object));
                } else {
                    found.masks.push((path, false, object));
                }
            }
        }
        if before.is_none() || stamp(&dir) != before {
            return Ok(None);
        }
        listed.push((dir, before));
    }
    if listed.iter().any(|(d, was)| stamp(d) != *was) {
        return Ok(None);
    }
    // A hard link is the same file under a name no rule matches.
    for (p, id) in linked {
        if secret_inodes.contains(&id) {
            found.masks.push((p, false, Some(id)));
        }
    }
    Ok(Some(found))
}

/// A file of /proc/self and what to write there.
type Map = (CString, Vec<u8>);

/// The namespaces every child of this process joins instead of making its
/// own: the user namespace (when latchclaw is not root) and an empty
/// network namespace. Making a network namespace costs about a millisecond
/// and its teardown holds up the next one; an empty one is as good shared
/// (nothing in it but a loopback that is down, and the socket filter).
#[derive(Debug)]
pub struct Shared {
    user: Option<OwnedFd>,
    net: OwnedFd,
}

/// Why children get no namespaces of their own here.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub why: String,
    /// This kernel or its policy: known for the rest of the process, and
    /// the walls below hold alone. Else a failure of the moment (out of
    /// processes, memory, descriptors in flight): the call is refused and
    /// the next one tries again, so a call that causes one cannot make the
    /// calls after it, in this process or another, run behind fewer walls.
    pub lasting: bool,
}

impl From<Unavailable> for String {
    fn from(u: Unavailable) -> String {
        u.why
    }
}

/// The shared namespaces, made once per process (see [`apart`]), or why
/// this machine gives children none (then the walls below them hold
/// alone). `LATCHCLAW_SIMULATE_NO_NAMESPACES` set makes it say no, and
/// `LATCHCLAW_SIMULATE_NAMESPACES_BUSY` that it cannot now (for tests).
pub fn shared() -> Result<&'static Shared, Unavailable> {
    remembered(&SHARED, &MAKING, make_shared)
}

/// What `slot` holds, else what `make` gives, kept when it lasts: the
/// namespaces once made, or a refusal of this kernel's; not a shortage.
/// One maker at a time (`making`); a reader never waits for it.
fn remembered<'a>(
    slot: &'a OnceLock<Result<Shared, String>>,
    making: &Mutex<()>,
    make: impl FnOnce() -> Result<Shared, Unavailable>,
) -> Result<&'a Shared, Unavailable> {
    let kept = |r: &'a Result<Shared, String>| {
        r.as_ref().map_err(|why| Unavailable {
            why: why.clone(),
            lasting: true,
        })
    };
    if let Some(r) = slot.get() {
        return kept(r);
    }
    let _one = making.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = slot.get() {
        return kept(r);
    }
    match make() {
        Ok(made) => kept(slot.get_or_init(|| Ok(made))),
        Err(u) if u.lasting => kept(slot.get_or_init(|| Err(u.why))),
        Err(u) => Err(u),
    }
}

/// Whether [`shared`] has its lasting answer already (never waits while
/// the namespaces are being made).
pub fn shared_made() -> bool {
    SHARED.get().is_some()
}

/// Whether [`shared`] has answered that this machine gives no namespaces.
pub fn shared_refused() -> bool {
    matches!(SHARED.get(), Some(Err(_)))
}

/// Only lasting answers: a failure of the moment is not kept.
static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
/// Makes one maker at a time of the shared namespaces.
static MAKING: Mutex<()> = Mutex::new(());

/// Whether `e` is this kernel's lasting refusal of namespaces (a policy,
/// a missing feature, user namespaces turned off) and not a failure of
/// the moment. Anything else, from a shortage of processes or memory to a
/// descriptor that could not be passed back (`ETOOMANYREFS`, which other
/// processes of the same user can cause), refuses only the call: the next
/// one tries again, and nothing falls back to fewer walls for it.
fn lasting_refusal(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES | libc::EINVAL | libc::ENOSYS | libc::EUSERS) => true,
        // The count of user namespaces: turned off when its limit is 0.
        Some(libc::ENOSPC) => std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .is_ok_and(|v| v.trim() == "0"),
        _ => false,
    }
}

fn make_shared() -> Result<Shared, Unavailable> {
    let lasting = |why: String| Unavailable { why, lasting: true };
    if std::env::var_os("LATCHCLAW_SIMULATE_NO_NAMESPACES").is_some() {
        return Err(lasting("LATCHCLAW_SIMULATE_NO_NAMESPACES is set".into()));
    }
    if std::env::var_os("LATCHCLAW_SIMULATE_NAMESPACES_BUSY").is_some() {
        return Err(Unavailable {
            why: "LATCHCLAW_SIMULATE_NAMESPACES_BUSY is set".into(),
            lasting: false,
        });
    }
    let user = needs_user_namespace();
    let mut flags = sys::ns::NEWNET;
    let mut maps: Vec<Map> = Vec::new();
    if user {
        flags |= sys::ns::NEWUSER;
        let (uid, gid) = sys::process::ids();
        maps.push((
            cstr("/proc/self/setgroups").map_err(lasting)?,
            b"deny".to_vec(),
        ));
        maps.push((
            cstr("/proc/self/uid_map").map_err(lasting)?,
            format!("{uid} {uid} 1").into_bytes(),
        ));
        maps.push((
            cstr("/proc/self/gid_map").map_err(lasting)?,
            format!("{gid} {gid} 1").into_bytes(),
        ));
    }
    let fds = apart(user, move || {
        sys::ns::unshare(flags)?;
        if !maps.is_empty() {
            // latchclaw is not dumpable, which makes /proc/self root's;
            // the maps are written by this process's own user.
            sys::process::set_dumpable()?;
            let written = maps
                .iter()
                .try_for_each(|(path, data)| sys::ns::write_file(path, data));
            sys::process::set_undumpable()?;
            written?;
        }
        let net = sys::ns::open_ns(c"/proc/thread-self/ns/net")?;
        Ok(if user {
            [Some(sys::ns::open_ns(c"/proc/self/ns/user")?), Some(net)]
        } else {
            [Some(net), None]
        })
    })
    .map_err(|e| Unavailable {
        why: why_not(&e),
        lasting: lasting_refusal(&e),
    })?;
    let mut fds = fds.into_iter();
    let mut next = || {
        fds.next().ok_or_else(|| Unavailable {
            why: "the namespace maker sent too few descriptors".into(),
            lasting: false,
        })
    };
    Ok(Shared {
        user: if user { Some(next()?) } else { None },
        net: next()?,
    })
}

/// A network namespace of its own for a child granted hosts (`egress`),
/// owned by the shared user namespace when there is one: its loopback is
/// up and a TCP socket listens on 127.0.0.1 there, at a port the kernel
/// chose. Returns the namespace and the listening socket; nothing else
/// in the namespace reaches anything, so whatever connects to that socket
/// is a child of the call it was made for.
pub fn egress_namespace() -> Result<(OwnedFd, OwnedFd), String> {
    let shared = shared()?;
    let user = match &shared.user {
        Some(u) => Some(u.try_clone().map_err(|e| format!("a descriptor: {e}"))?),
        None => None,
    };
    let fds = apart(user.is_some(), move || {
        if let Some(u) = &user {
            sys::ns::setns(u.as_fd(), sys::ns::NEWUSER)?;
        }
        sys::ns::unshare(sys::ns::NEWNET)?;
        sys::net::loopback_up()?;
        let listener = sys::net::listen_loopback()?;
        Ok([
            Some(sys::ns::open_ns(c"/proc/thread-self/ns/net")?),
            Some(listener),
        ])
    })
    .map_err(|e| format!("cannot make a network namespace for the proxy: {e}"))?;
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next()) {
        (Some(ns), Some(listener)) => Ok((ns, listener)),
        _ => Err("the namespace maker sent too few descriptors".into()),
    }
}

/// What a namespace maker hands over: one or two descriptors, in order.
type Opened = [Option<OwnedFd>; 2];

/// Starts a child that never executes anything: `setup` (hook-safe) makes
/// namespaces in it and opens them, and the child hands them to latchclaw
/// over a socket (latchclaw could not open another process's /proc/PID/ns:
/// neither is dumpable). Without `hold` the child then ends; with it, the
/// child keeps the namespaces until the pipe's other end closes, and is
/// returned.
fn hand_over(
    mut setup: impl FnMut() -> io::Result<Opened> + Send + Sync + 'static,
    hold: Option<std::io::PipeReader>,
) -> io::Result<(Vec<OwnedFd>, Option<std::process::Child>)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let theirs = OwnedFd::from(theirs);
    // An errno no step of the set-up returns: the child got to the end.
    const DONE: i32 = libc::ENOTRECOVERABLE;
    let holds = hold.is_some();
    let mut cmd = std::process::Command::new("/");
    cmd.stdin(hold.map_or_else(std::process::Stdio::null, std::process::Stdio::from))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    sys::process::set_pre_exec(&mut cmd, move || {
        match setup()? {
            [Some(a), Some(b)] => sys::ns::send_fds(theirs.as_fd(), &[a.as_fd(), b.as_fd()])?,
            [Some(a), None] => sys::ns::send_fds(theirs.as_fd(), &[a.as_fd()])?,
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
        if holds {
            // Closing std's exec-error pipe tells the parent it is done.
            sys::ns::close_from(3);
            sys::ns::hold_until_stdin_closes()
        }
        Err(io::Error::from_raw_os_error(DONE))
    });
    let child = match cmd.spawn() {
        Err(e) if !holds && e.raw_os_error() == Some(DONE) => None,
        Err(e) => return Err(e),
        Ok(child) if holds => Some(child),
        Ok(mut child) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(
                "the namespace maker ran a program it should not have",
            ));
        }
    };
    Ok((sys::ns::recv_fds(ours.as_fd())?, child))
}

/// Runs `setup`, which makes namespaces, where they touch nothing of
/// latchclaw's: with `user` (a user namespace to make or enter, which
/// only a single-threaded process may) in a child as [`hand_over`] does;
/// as root on a thread of its own that ends after it, which saves copying
/// latchclaw's process and tearing the copy down (a network namespace
/// unshared by a thread is that thread's alone, and lives on in the
/// descriptors it opened).
fn apart(
    user: bool,
    setup: impl FnMut() -> io::Result<Opened> + Send + Sync + 'static,
) -> io::Result<Vec<OwnedFd>> {
    if user {
        return Ok(hand_over(setup, None)?.0);
    }
    let opened = std::thread::Builder::new()
        .name("namespaces".into())
        .spawn(setup)?
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))??;
    Ok(opened.into_iter().flatten().collect())
}

fn why_not(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => format!(
            "the kernel refused new namespaces ({e}): unprivileged user namespaces are off \
             (kernel.unprivileged_userns_clone, user.max_user_namespaces, or an \
             AppArmor/container policy)"
        ),
        Some(libc::ENOSPC | libc::EUSERS) => format!("no namespaces are left ({e})"),
        Some(libc::EINVAL | libc::ENOSYS) => {
            format!("this kernel lacks a namespace latchclaw needs ({e})")
        }
        _ => format!("making namespaces failed ({e})"),
    }
}

/// The namespaces each child makes for itself (and, after the fork, its
/// init a mount namespace).
const OWN: i32 = sys::ns::NEWPID | sys::ns::NEWIPC | sys::ns::NEWUTS;

/// The stack init runs on when it shares latchclaw's memory: reserved,
/// only what it touches is allocated (an unoptimised build's frames are
/// large; the program's own start takes 32 KiB of it).
const INIT_STACK: usize = 1024 * 1024;

/// The first steps of every view: no mount propagation either way, and an
/// empty tmpfs as the new root, the old one under [`OLD`] until the end.
fn stage() -> Result<Builder, String> {
    let mut b = Builder {
        steps: Vec::new(),
        made: vec![PathBuf::from("/")],
    };
    b.steps.push(Step::Mount {
        src: None,
        dst: cstr("/")?,
        fstype: None,
        flags: MS_REC | libc::MS_PRIVATE,
        data: None,
    });
    b.steps.push(Step::Mount {
        src: Some(cstr("tmpfs")?),
        dst: cstr(STAGE)?,
        fstype: Some(cstr("tmpfs")?),
        flags: libc::MS_NOSUID | libc::MS_NODEV,
        data: Some(cstr("mode=0755")?),
    });
    b.steps
        .push(Step::Dir(cstr(Path::new(STAGE).join(&OLD[1..]))?));
    b.steps.push(Step::Pivot);
    // Each child mounts its own PID namespace's /proc here. In a user
    // namespace the kernel lets it only where a procfs is already in full
    // view: the host's, bound aside, which each child unmounts once its
    // own is up.
    b.dirs_to(Path::new("/proc"))?;
    b.dirs_to(Path::new(HOST_PROC))?;
    b.steps.push(Step::Mount {
        src: Some(old(Path::new("/proc"))?),
        dst: cstr(HOST_PROC)?,
        fstype: None,
        flags: MS_BIND | MS_REC,
        data: None,
    });
    b.steps.push(Step::ReadOnly {
        dst: cstr(HOST_PROC)?,
        recursive: true,
    });
    Ok(b)
}

/// The steps every view starts with, whatever the call: the new root, the
/// system's directories and files, /dev.
fn generic() -> Result<Builder, String> {
    let mut b = stage()?;
    b.steps.push(Step::File(cstr(EMPTY_FILE)?));
    b.steps.push(Step::Dir(cstr(EMPTY_DIR)?));
    for dir in SYSTEM_DIRS {
        b.bind(Path::new(dir), false)?;
    }
    for name in ETC_FILES {
        b.bind(&Path::new("/etc").join(name), false)?;
    }
    for dev in DEV_READ {
        b.bind(Path::new(dev), false)?;
    }
    b.bind(Path::new("/dev/null"), true)?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        b.steps.push(Step::Link {
            target: cstr(target)?,
            path: cstr(Path::new("/dev").join(name))?,
        });
    }
    Ok(b)
}

/// Builds the view of one call's children (see the module comment). The
/// walk runs first: the shared namespaces may still be in the making on
/// their own thread ([`super::start_early`]), and are waited for last.
pub fn build(spec: &Spec) -> Result<View, String> {
    let canon = |p: &Path| std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()));
    let ws = canon(&spec.workspace)?;
    let mut b = generic()?;
    if !b.bind(&ws, spec.workspace_writable)? {
        return Err(format!("the workspace {} does not exist", ws.display()));
    }
    if let Some(tmp) = &spec.tmp_dir {
        b.bind(&canon(tmp)?, true)?;
    }
    for dir in &spec.read_only_dirs {
        if !b.bind(&canon(dir)?, false)? {
            return Err(format!("{} does not exist", dir.display()));
        }
    }
    let found = walk(spec, &ws)?;
    // latchclaw's own state where the workspace holds it (the state dir,
    // a config, the receipts log and its anchor, the memory database and
    // its journals) and the forbidden paths: covered, a file's directory
    // too (a journal that does not exist yet would be read when it does).
    // latchclaw finds these by path next time, so every directory between
    // the workspace and them is pinned (bound over itself: a mount point
    // cannot be renamed) before anything is covered, lest a child move the
    // real one aside and put its own in its place.
    let mut state: Vec<(PathBuf, bool)> = Vec::new();
    let mut missing = Vec::new();
    for p in spec.forbidden.iter().chain(&spec.state_dir) {
        let Ok(p) = std::fs::canonicalize(p) else {
            // Not there to cover now (a receipts log before its first
            // receipt): a view made before it is there is not used after
            // (see `View::stale`).
            if p.ancestors()
                .find_map(|a| std::fs::canonicalize(a).ok())
                .is_some_and(|a| a.starts_with(&ws))
            {
                missing.push(p.clone());
            }
            continue;
        };
        if !p.starts_with(&ws) || p == ws {
            continue;
        }
        let dir = p.is_dir();
        state.push((p.clone(), dir));
        if !dir
            && let Some(parent) = p.parent()
            && parent != ws
            && parent.starts_with(&ws)
        {
            state.push((parent.to_path_buf(), true));
        }
    }
    let mut pins: Vec<PathBuf> = Vec::new();
    for (p, _) in &state {
        for a in p.ancestors().skip(1) {
            if a == ws || !a.starts_with(&ws) {
                break;
            }
            if !pins.iter().any(|q| q == a) {
                pins.push(a.to_path_buf());
            }
        }
    }
    // Outermost first: a bind over a directory hides what is mounted below.
    crate::util::sort::sort_by_key(&mut pins, |p| p.components().count());
    for p in &pins {
        let c = cstr(p)?;
        b.steps.push(Step::Mount {
            src: Some(c.clone()),
            dst: c,
            fstype: None,
            flags: MS_BIND,
            data: None,
        });
    }
    let mut masked = Vec::new();
    for (p, dir, id) in &found.masks {
        mask(p, *dir, false, *id, &mut b.steps)?;
        masked.push(p.clone());
    }
    for (p, dir) in &state {
        mask(p, *dir, true, None, &mut b.steps)?;
        masked.push(p.clone());
    }
    let common = b.steps;
    let mut other = common.clone();
    let mut git_read = common.clone();
    let mut git_write = common;
    for (p, id) in &found.protected {
        read_only_over_itself(p, *id, &mut other)?;
        read_only_over_itself(p, *id, &mut git_read)?;
        let is_git = p
            .file_name()
            .is_some_and(|n| n.eq_ignore_ascii_case(".git"));
        if is_git && p.is_dir() {
            for c in GIT_CODE {
                let q = p.join(c);
                if let Some(id) = id_of(&q) {
                    read_only_over_itself(&q, Some(id), &mut git_write)?;
                }
            }
        } else {
            read_only_over_itself(p, *id, &mut git_write)?;
        }
    }
    for (p, id) in &found.git_masks {
        mask(p, false, false, *id, &mut other)?;
        masked.push(p.clone());
    }
    // The old root stays mounted, read-only, under an empty cover: an
    // unmount waits for the kernel's RCU grace period (milliseconds, on the
    // call's path), and nothing after this point unmounts anything (no
    // child has the capability, seccomp refuses umount, and no step runs
    // by path once a child has run).
    let finish = [
        Step::ReadOnly {
            dst: cstr(OLD)?,
            recursive: true,
        },
        Step::Cover {
            src: cstr(EMPTY_DIR)?,
            dst: cstr(OLD)?,
            own: false,
            id: None,
        },
        Step::ReadOnly {
            dst: cstr("/")?,
            recursive: false,
        },
    ];
    for steps in [&mut other, &mut git_read, &mut git_write] {
        steps.extend(finish.iter().cloned());
    }
    let cwd = cstr(spec.cwd.as_deref().unwrap_or(&ws))?;
    Ok(View {
        shared: shared()?,
        net: spec
            .egress
            .as_ref()
            .map(|e| std::sync::Arc::clone(&e.netns)),
        bases: [other, git_read, git_write],
        made: Default::default(),
        direct: Default::default(),
        cwd,
        made_ahead: Default::default(),
        masked,
        missing,
    })
}

impl View {
    /// Whether a file of latchclaw's inside the workspace has appeared
    /// since the view was planned (it would not be covered): a view made
    /// ahead is then thrown away and made again.
    pub fn stale(&self) -> bool {
        self.missing.iter().any(|p| p.symlink_metadata().is_ok())
    }

    /// The call's base mount namespace, made on first use: by the parent,
    /// before the first child of the call starts.
    pub fn base(&self, kind: Kind) -> Result<BorrowedFd<'_>, Unmade> {
        let i = kind as usize;
        match self.made[i].get_or_init(|| self.make_base(&self.bases[i])) {
            Ok(b) => Ok(b.ns.as_fd()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The call has one child, of `kind`: it gets the view alone, not a
    /// copy of a base (nothing else of the call runs between the walk and
    /// its mounts, which is all a base gives; most calls are one command).
    /// As root the view is made now, on a thread of its own (a thread may
    /// make a mount namespace and leave it in a descriptor; when this runs
    /// beside the call's started receipt, so does the view), and the child
    /// only enters it. Otherwise the child's init builds it from the same
    /// steps (only a single-threaded process may enter a user namespace).
    pub fn direct(&self, kind: Kind) {
        let i = kind as usize;
        if self.direct[i].swap(true, Ordering::SeqCst) || self.shared.user.is_some() {
            return;
        }
        let steps = self.bases[i].clone();
        let made = apart(false, move || {
            sys::ns::unshare(sys::ns::NEWNS)?;
            // Opened while the host's /proc is still in view.
            let ns = sys::ns::open_ns(c"/proc/thread-self/ns/mnt")?;
            for step in &steps {
                run(step, None)?;
            }
            Ok([Some(ns), None])
        });
        // Unmade, the child builds it (and meets the same error, if any).
        if let (Ok(mut fds), Ok(mut slot)) = (made, self.made_ahead[i].lock()) {
            *slot = fds.pop();
        }
    }

    /// Whether the next child of `kind` builds its own view (once: a
    /// second child of the kind joins a base).
    pub fn takes_direct(&self, kind: Kind) -> bool {
        self.direct[kind as usize].swap(false, Ordering::SeqCst)
    }

    /// For the child that gets the view alone: the view made ahead for
    /// it, if any (see [`View::direct`]).
    pub fn made_ahead(&self, kind: Kind) -> Option<OwnedFd> {
        self.made_ahead[kind as usize].lock().ok()?.take()
    }

    fn make_base(&self, base: &[Step]) -> Result<Base, Unmade> {
        let (hold, release) = std::io::pipe().map_err(|e| Unmade::from(format!("a pipe: {e}")))?;
        let user = match &self.shared.user {
            Some(u) => Some(
                u.try_clone()
                    .map_err(|e| Unmade::from(format!("the user namespace: {e}")))?,
            ),
            None => None,
        };
        let steps = base.to_vec();
        let (mut fds, holder) = hand_over(
            move || {
                if let Some(u) = &user {
                    sys::ns::setns(u.as_fd(), sys::ns::NEWUSER)?;
                }
                sys::ns::unshare(sys::ns::NEWNS)?;
                // Opened while the host's /proc is still in view.
                let ns = sys::ns::open_ns(c"/proc/self/ns/mnt")?;
                for step in &steps {
                    run(step, None)?;
                }
                Ok([Some(ns), None])
            },
            Some(hold),
        )
        .map_err(|e| Unmade {
            why: format!("the call's view could not be set up: {e}"),
            stale: e.raw_os_error() == Some(libc::ESTALE),
        })?;
        let ns = fds
            .pop()
            .ok_or_else(|| Unmade::from("the call's view was not handed over".to_string()))?;
        Ok(Base {
            ns,
            holder,
            release: Some(OwnedFd::from(release)),
        })
    }

    /// Whether this view makes a user namespace.
    pub fn user_namespace(&self) -> bool {
        self.shared.user.is_some()
    }

    /// Hook-safe: runs in the forked child. Enters the namespaces; the
    /// process that called it stays outside the PID namespace, waits for
    /// the namespace's init and exits as it does. Init sets up the view,
    /// starts the program (`exec`) in a child that shares its memory until
    /// the exec (nothing of latchclaw is copied for it) and, in turn, waits
    /// for it. Returns only an error, in the process that called it.
    /// `ruleset`: the Landlock ruleset to give the new /proc. `walls` runs
    /// in init once the view is up, before the program starts, so the
    /// program inherits them and init is held by them too.
    pub fn enter(
        &self,
        start: Start,
        ruleset: Option<BorrowedFd>,
        walls: impl FnOnce() -> io::Result<()>,
        exec: &sys::ns::Exec,
    ) -> io::Error {
        let Err(e) = self.enter_and_exec(start, ruleset, walls, exec);
        e
    }

    fn enter_and_exec(
        &self,
        start: Start,
        ruleset: Option<BorrowedFd>,
        walls: impl FnOnce() -> io::Result<()>,
        exec: &sys::ns::Exec,
    ) -> io::Result<std::convert::Infallible> {
        if let Some(user) = &self.shared.user {
            sys::ns::setns(user.as_fd(), sys::ns::NEWUSER)?;
        }
        let net = self.net.as_deref().unwrap_or(&self.shared.net);
        sys::ns::setns(net.as_fd(), sys::ns::NEWNET)?;
        sys::ns::unshare(OWN)?;
        // Init reports the program's end through this pipe and dies after
        // it: this process answers for the call at once, while the kernel
        // tears the namespaces down behind it (which waits for RCU, some
        // milliseconds no one needs to wait for).
        let (report, reporter) = sys::ns::pipe()?;
        if let Some(init) = sys::ns::fork()? {
            drop(reporter);
            let _ = sys::ns::onto_stdin(&report);
            sys::ns::close_from(3);
            match sys::ns::receive_status() {
                Some(status) => sys::ns::exit_with(status),
                None => sys::ns::exit_like(init),
            }
        }
        drop(report);
        self.init(start, ruleset, walls, exec, reporter.as_fd())
    }

    /// As [`View::enter`], with no process between latchclaw and the
    /// namespace's init: called in the parent (root only: a child of a
    /// multithreaded process cannot enter a user namespace), it makes the
    /// init with clone(2) straight into new PID, IPC and UTS namespaces,
    /// sharing latchclaw's memory ([`sys::ns::clone_vm_into`]: nothing is
    /// copied for it) on a stack of its own, returned: keep it until init
    /// is reaped. Init takes `stdio` as its stdin, stdout and stderr, leads
    /// a process group of its own and reports the program's end (its wait
    /// status) on the pipe returned, once nothing else in the namespace is
    /// left. Returns once the program has been executed (or with the error
    /// of the set-up).
    pub fn spawn(
        &self,
        start: Start,
        ruleset: Option<BorrowedFd>,
        walls: impl FnOnce() -> io::Result<()>,
        exec: &sys::ns::Exec,
        stdio: [BorrowedFd; 3],
    ) -> io::Result<(i32, OwnedFd, sys::ns::ChildStack)> {
        if self.shared.user.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let net = self.net.as_deref().unwrap_or(&self.shared.net);
        let (report, reporter) = sys::ns::pipe()?;
        let reporter_fd = reporter.as_fd();
        let stack = sys::ns::ChildStack::new(INIT_STACK)?;
        let init = sys::ns::clone_vm_into(OWN, &stack, |fail| {
            // The child: no allocation, hook-safe calls only.
            let Err(e) = (|| {
                sys::ns::onto_stdio(stdio)?;
                sys::ns::own_group_no_mask()?;
                sys::process::die_with_parent()?;
                // latchclaw died before the line above: nothing would
                // bound this run.
                if sys::ns::reader_gone(fail) {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                sys::ns::setns(net.as_fd(), sys::ns::NEWNET)?;
                self.init(start, ruleset, walls, exec, reporter_fd)
            })();
            e
        })?;
        drop(reporter);
        Ok((init, report, stack))
    }

    /// The namespace's init (PID 1): sets up the view and walls, starts
    /// the program, waits for it, kills and reaps what it left and reports
    /// its end through `reporter`, then exits: whoever started it answers
    /// for the call at once, while the kernel tears the namespaces down
    /// behind it (unmounting the view waits for RCU: time no one needs to
    /// wait for).
    fn init(
        &self,
        start: Start,
        ruleset: Option<BorrowedFd>,
        walls: impl FnOnce() -> io::Result<()>,
        exec: &sys::ns::Exec,
        reporter: BorrowedFd,
    ) -> io::Result<std::convert::Infallible> {
        // Init: dies with its parent (the process above, or latchclaw's
        // thread that started it), and the namespace with it. It is a
        // copy of latchclaw's memory, or (`View::spawn`) shares it: not
        // dumpable, so no process in the namespace reads or writes it
        // through /proc/1 (that takes CAP_SYS_PTRACE, dropped with the
        // rest; ptrace itself is refused by seccomp).
        sys::process::die_with_parent()?;
        sys::process::set_undumpable()?;
        // The call's base for this kind, then a copy of its own (its own
        // /proc): the base stays as it is for the others. Or, for the one
        // child of a call, the base's steps here.
        match start {
            Start::Join(fd) => {
                sys::ns::setns(fd, sys::ns::NEWNS)?;
                sys::ns::unshare(sys::ns::NEWNS)?;
            }
            // Made for this child alone: no copy.
            Start::Made(fd) => sys::ns::setns(fd, sys::ns::NEWNS)?,
            Start::Build(kind) => {
                sys::ns::unshare(sys::ns::NEWNS)?;
                for step in &self.bases[kind as usize] {
                    run(step, None)?;
                }
            }
        }
        // Its own /proc, read-only; the host's, held for the fallback of
        // `Step::Proc`, covered, not unmounted (see `build`). Nothing here
        // allocates: init may share latchclaw's memory.
        run(&Step::Proc, ruleset)?;
        read_only(c"/proc", true)?;
        cover(
            c"/.latchclaw-masked.d",
            c"/.latchclaw-host-proc",
            false,
            None,
        )?;
        sys::ns::chdir(&self.cwd)?;
        walls()?;
        let program = sys::ns::spawn_exec(exec)?;
        let _ = sys::ns::onto_stdin(reporter);
        // Init holds none of the program's output either: it is read to
        // its end when the program's processes are gone.
        sys::ns::close_from(1);
        let status = sys::ns::wait_for(program).unwrap_or(127 << 8);
        // Nothing the program left behind outlives the report.
        sys::ns::kill_all_others();
        sys::ns::reap_all();
        sys::ns::send_status(status);
        sys::ns::exit_with(0);
    }
}

fn run(step: &Step, ruleset: Option<BorrowedFd>) -> io::Result<()> {
    match step {
        Step::Dir(p) => sys::ns::mkdir(p, 0o755),
        Step::File(p) => sys::ns::touch(p, 0o444),
        Step::Link { target, path } => sys::ns::symlink(target, path),
        Step::Mount {
            src,
            dst,
            fstype,
            flags,
            data,
        } => sys::ns::mount(
            src.as_deref(),
            dst,
            fstype.as_deref(),
            *flags,
            data.as_deref(),
        ),
        Step::Cover { src, dst, own, id } => cover(src, dst, *own, *id),
        Step::ReadOnly { dst, recursive } => read_only(dst, *recursive),
        Step::Proc => {
            let proc_ = c"/proc";
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            // hidepid=4 ("ptraceable", Linux 5.8): a process the child
            // may not trace has no entry there: init (not dumpable), whose
            // /proc/1 would otherwise show latchclaw's command line, and
            // its memory use as it changes when init shares latchclaw's
            // memory. Before 5.8, hidepid=2, which exempts group 0 (a root
            // child still sees init there).
            let procfs = |data| sys::ns::mount(Some(c"proc"), proc_, Some(c"proc"), flags, data);
            let einval =
                |r: &io::Result<()>| matches!(r, Err(e) if e.raw_os_error() == Some(libc::EINVAL));
            let mut made = procfs(Some(c"hidepid=4"));
            if einval(&made) {
                made = procfs(Some(c"hidepid=2"));
            }
            if einval(&made) {
                made = procfs(None);
            }
            match made {
                Ok(()) => {
                    if let Some(r) = ruleset {
                        sys::ns::landlock_allow_beneath(r, proc_, LANDLOCK_READ)?;
                    }
                    Ok(())
                }
                Err(_) => sys::ns::mount(
                    Some(c"/.latchclaw-host-proc"),
                    proc_,
                    None,
                    MS_BIND | MS_REC,
                    None,
                ),
            }
        }
        Step::Pivot => {
            // STAGE and STAGE/OLD.
            sys::ns::pivot_root(c"/tmp", c"/tmp/oldroot")?;
            sys::ns::chdir(c"/")
        }
    }
}

/// `src` bound over `dst`, read-only (see [`Step::Cover`]).
fn cover(src: &std::ffi::CStr, dst: &std::ffi::CStr, own: bool, id: Option<Id>) -> io::Result<()> {
    if let Some(id) = id {
        let from = (src != dst).then_some(src);
        match sys::ns::cover_object(from, dst, id) {
            // Before Linux 5.12: by path, below.
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
            // Gone, or a link now on its path: what the walk found may be
            // elsewhere, uncovered.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                ) =>
            {
                return Err(io::Error::from_raw_os_error(libc::ESTALE));
            }
            r => return r,
        }
    }
    match sys::ns::mount(Some(src), dst, None, MS_BIND | MS_REC, None) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            if own {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(libc::ESTALE))
            }
        }
        Err(e) => Err(e),
        Ok(()) => read_only(dst, true),
    }
}

/// The mount at `dst` made read-only (and the ones below it: `recursive`).
fn read_only(dst: &std::ffi::CStr, recursive: bool) -> io::Result<()> {
    match sys::ns::set_read_only(dst, recursive) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            // Before Linux 5.12: a remount, which covers the one mount.
            sys::ns::mount(
                None,
                dst,
                None,
                libc::MS_REMOUNT | MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
                None,
            )
        }
        r => r,
    }
}

/// Landlock's READ_FILE and READ_DIR rights.
const LANDLOCK_READ: u64 = (1 << 2) | (1 << 3);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A shortage is not remembered: the next call tries again. The
    /// namespaces once made, or this kernel's refusal, are.
    #[test]
    fn only_lasting_answers_about_namespaces_are_remembered() {
        let fake = || Shared {
            user: None,
            net: std::fs::File::open("/dev/null").unwrap().into(),
        };
        let short = || {
            Err(Unavailable {
                why: "out of processes".into(),
                lasting: false,
            })
        };
        let making = Mutex::new(());
        let slot = OnceLock::new();
        let e = remembered(&slot, &making, short).unwrap_err();
        assert!(!e.lasting && e.why == "out of processes");
        assert!(slot.get().is_none());
        assert!(remembered(&slot, &making, || Ok(fake())).is_ok());
        let again = remembered(&slot, &making, || -> Result<Shared, Unavailable> {
            panic!("made twice")
        });
        assert!(again.is_ok());
        let refused = OnceLock::new();
        let no = || {
            Err(Unavailable {
                why: "user namespaces are off".into(),
                lasting: true,
            })
        };
        assert!(remembered(&refused, &making, no).is_err());
        let e = remembered(&refused, &making, || Ok(fake())).unwrap_err();
        assert!(e.lasting && e.why == "user namespaces are off");
        for (errno, lasting) in [
            (libc::EPERM, true),
            (libc::EACCES, true),
            (libc::EINVAL, true),
            (libc::ENOSYS, true),
            (libc::EAGAIN, false),
            (libc::ENOMEM, false),
            (libc::ETOOMANYREFS, false),
            (libc::EMFILE, false),
            (libc::ENOBUFS, false),
            (libc::EINTR, false),
        ] {
            let e = io::Error::from_raw_os_error(errno);
            assert_eq!(lasting_refusal(&e), lasting, "{errno}");
        }
        // A maker that died says no errno: not this kernel's answer either.
        assert!(!lasting_refusal(&io::Error::other("the maker died")));
    }

    /// A namespace made apart is made on a thread that ends (as root) or
    /// in a child: never on the calling thread, whose connections
    /// (providers, `http`) would then reach nothing.
    #[test]
    fn a_namespace_made_apart_moves_no_thread_of_latchclaw() {
        if needs_user_namespace() {
            eprintln!("SKIPPED: not root: the child's way is tested as another user");
            return;
        }
        let ino = |p: &str| std::fs::metadata(p).unwrap().ino();
        let (process, thread) = (ino("/proc/self/ns/net"), ino("/proc/thread-self/ns/net"));
        let made = apart(false, || {
            sys::ns::unshare(sys::ns::NEWNET)?;
            Ok([Some(sys::ns::open_ns(c"/proc/thread-self/ns/net")?), None])
        });
        let fds = match made {
            Ok(fds) => fds,
            Err(e) => {
                eprintln!("SKIPPED: no network namespaces here: {e}");
                return;
            }
        };
        let new = std::fs::File::from(fds.into_iter().next().unwrap())
            .metadata()
            .unwrap()
            .ino();
        assert_ne!(new, thread, "the namespace handed back is a new one");
        assert_eq!(ino("/proc/thread-self/ns/net"), thread);
        assert_eq!(ino("/proc/self/ns/net"), process);
    }

    /// A directory renamed back and forth while the workspace is walked
    /// (a concurrent child hiding a secret from the walk): every walk that
    /// succeeds found the secret under one name or the other.
    #[test]
    fn a_walk_raced_by_renames_misses_nothing_it_returns() {
        let root = std::env::temp_dir().join(format!("lc-walk-{}", std::process::id()));
        let ws = root.join("ws");
        for i in 0..200 {
            std::fs::create_dir_all(ws.join(format!("pad{i:03}"))).unwrap();
        }
        std::fs::create_dir_all(ws.join("d1/deep")).unwrap();
        std::fs::write(ws.join("d1/deep/id_rsa"), "k").unwrap();
        let spec = Spec::bare(&ws, crate::config::Confinement::BestEffort);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let renamer = {
            let (stop, ws) = (std::sync::Arc::clone(&stop), ws.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(ws.join("d1"), ws.join("d2"));
                    let _ = std::fs::rename(ws.join("d2"), ws.join("d1"));
                }
            })
        };
        let (mut ok, mut refused) = (0, 0);
        for _ in 0..300 {
            match walk(&spec, &ws) {
                Ok(found) => {
                    ok += 1;
                    assert!(
                        found
                            .masks
                            .iter()
                            .any(|(p, _, _)| p.ends_with("deep/id_rsa")),
                        "a walk missed the secret: {:?}",
                        found.masks
                    );
                }
                Err(e) => {
                    refused += 1;
                    assert!(e.contains("kept changing"), "{e}");
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        renamer.join().unwrap();
        let _ = std::fs::remove_dir_all(&root);
        assert!(ok + refused == 300);
    }

    /// The secret moved between two directories, back and forth: a walk
    /// that lists the one it is about to enter, then the one it just left,
    /// sees it in neither; every directory is looked at again at the end.
    #[test]
    fn a_walk_raced_by_a_move_between_directories_misses_nothing_it_returns() {
        let root = std::env::temp_dir().join(format!("lc-walk2-{}", std::process::id()));
        let ws = root.join("ws");
        for i in 0..100 {
            std::fs::create_dir_all(ws.join(format!("x/pad{i:03}"))).unwrap();
            std::fs::create_dir_all(ws.join(format!("y/pad{i:03}"))).unwrap();
        }
        std::fs::write(ws.join("x/pad050/.env"), "k").unwrap();
        let spec = Spec::bare(&ws, crate::config::Confinement::BestEffort);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mover = {
            let (stop, ws) = (std::sync::Arc::clone(&stop), ws.clone());
            std::thread::spawn(move || {
                let (a, b) = (ws.join("x/pad050/.env"), ws.join("y/pad050/.env"));
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(&a, &b);
                    std::thread::sleep(std::time::Duration::from_micros(700));
                    let _ = std::fs::rename(&b, &a);
                    std::thread::sleep(std::time::Duration::from_micros(700));
                }
            })
        };
        let mut ok = 0;
        for _ in 0..400 {
            if let Ok(found) = walk(&spec, &ws) {
                ok += 1;
                assert!(
                    found.masks.iter().any(|(p, _, _)| p.ends_with(".env")),
                    "a walk missed the secret"
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        mover.join().unwrap();
        let _ = std::fs::remove_dir_all(&root);
        eprintln!("walks that returned: {ok} of 400");
    }
}
