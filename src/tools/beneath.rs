//! Opening paths beneath a directory descriptor, so that a directory on the
//! path swapped for a symlink after the gate decided cannot lead the open
//! somewhere else.
//!
//! Mechanism only: [`crate::security::Gate`] decides what may be opened; this
//! makes the open reach what was decided. `openat2(2)` with `RESOLVE_BENEATH
//! | RESOLVE_NO_MAGICLINKS` does it in the kernel (Linux 5.6 and later).
//! Where that system call is missing or filtered (older kernels, seccomp
//! profiles that return ENOSYS or EPERM), the path is walked one component at
//! a time with `openat(O_NOFOLLOW)`, holding a descriptor for every directory
//! passed, so `..` pops back to a directory already held instead of looking
//! anything up. Both give the same answers: EXDEV for a path or symlink that
//! leads out of the root, ELOOP for a refused symlink.

use crate::sys;
use crate::sys::fs::{file_type, on_procfs, openat as sys_openat, openat2, readlinkat};
use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What happens at a symlink met on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Every symlink fails with ELOOP (`RESOLVE_NO_SYMLINKS`), except a final
    /// one opened with `O_PATH | O_NOFOLLOW`, which is returned itself. For
    /// paths that were canonical when checked: a symlink there now was
    /// planted since.
    Refuse,
    /// Relative symlinks are followed while they stay beneath the root;
    /// absolute ones, and ones whose `..` climbs above it, fail with EXDEV.
    /// Magic links (`/proc/PID/root`, `/proc/PID/fd/N`, …) fail with ELOOP;
    /// the walk refuses every symlink inside procfs, the kernel only the
    /// magic ones.
    Beneath,
}

/// The kernel's own limit (MAXSYMLINKS).
const MAX_HOPS: u32 = 40;
/// A rename elsewhere during a `..` makes openat2 answer EAGAIN; after this
/// many tries the walk answers instead.
const EAGAIN_TRIES: u32 = 8;
/// Set once openat2 answered ENOSYS: it will not start working later.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
thread_local! {
    static FORCE_WALK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Tests: while the guard lives, this thread's opens take the walk.
#[cfg(test)]
pub(crate) struct WalkOnly(bool);

#[cfg(test)]
impl WalkOnly {
    pub(crate) fn set(on: bool) -> WalkOnly {
        WalkOnly(FORCE_WALK.with(|f| f.replace(on)))
    }
}

#[cfg(test)]
impl Drop for WalkOnly {
    fn drop(&mut self) {
        FORCE_WALK.with(|f| f.set(self.0));
    }
}

fn openat2_wanted() -> bool {
    #[cfg(test)]
    if FORCE_WALK.with(|f| f.get()) {
        return false;
    }
    !NO_OPENAT2.load(Ordering::Relaxed)
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Where a path the gate resolved (absolute, no links) is opened from:
/// the workspace when it lies inside it, else `/` (`workspace_only =
/// false`); and the rest of the path below that base.
pub fn split<'a>(ws: &'a Path, p: &'a Path) -> (&'a Path, &'a Path) {
    match p.strip_prefix(ws) {
        Ok(rel) => (ws, rel),
        Err(_) => (Path::new("/"), p.strip_prefix("/").unwrap_or(p)),
    }
}

/// Opens a directory to use as the root of later opens (`O_PATH`: it grants
/// nothing by itself). `ws` should be canonical: it is opened as written.
pub fn open_workspace(ws: &Path) -> io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(ws)?;
    Ok(f.into())
}

/// Opens `rel` beneath `root` with open(2) `flags` (O_CLOEXEC is added) and
/// `mode` (used with O_CREAT). `rel` must be relative: an absolute path, or
/// one that climbs above `root`, fails with EXDEV; an empty one opens `root`
/// itself.
pub fn open_beneath(
    root: BorrowedFd,
    rel: &Path,
    flags: i32,
    mode: u32,
    links: Symlinks,
) -> io::Result<OwnedFd> {
    if rel.is_absolute() {
        return Err(errno(libc::EXDEV));
    }
    if openat2_wanted() {
        let path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let c = cstr(path.as_os_str())?;
        let mut resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
        if links == Symlinks::Refuse {
            resolve |= libc::RESOLVE_NO_SYMLINKS;
        }
        for _ in 0..EAGAIN_TRIES {
            match openat2(root, &c, flags, mode, resolve) {
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    break;
                }
                // A seccomp filter's answer, or a real EPERM (O_NOATIME, an
                // immutable file) that the walk will give back as well.
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => break,
                r => return r,
            }
        }
    }
    walk(root, rel, flags, mode, links)
}

/// Opens the directory `rel` beneath `root` for reading its entries.
pub fn open_dir_beneath(root: BorrowedFd, rel: &Path, links: Symlinks) -> io::Result<OwnedFd> {
    open_beneath(root, rel, libc::O_RDONLY | libc::O_DIRECTORY, 0, links)
}

/// What `rel` beneath `root` is, without following a final symlink and
/// without following any on the way; from the descriptor, not the name.
pub fn metadata_beneath(root: BorrowedFd, rel: &Path) -> io::Result<Metadata> {
    let fd = open_beneath(
        root,
        rel,
        libc::O_PATH | libc::O_NOFOLLOW,
        0,
        Symlinks::Refuse,
    )?;
    File::from(fd).metadata()
}

/// The names in a directory opened with [`open_dir_beneath`], without `.`
/// and `..`, in the order the file system gives them.
pub fn read_dir(dir: BorrowedFd) -> io::Result<Vec<OsString>> {
    Ok(read_dir_typed(dir)?.into_iter().map(|(n, _)| n).collect())
}

pub use crate::sys::fs::Kind;

/// [`read_dir`] with each entry's [`Kind`], for walks that would
/// otherwise stat every entry.
pub fn read_dir_typed(dir: BorrowedFd) -> io::Result<Vec<(OsString, Kind)>> {
    sys::fs::read_dir_typed(dir)
}

/// A single directory entry's name: no `/`, not `.` or `..`, not empty.
fn plain_name(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("\"{}\" is not a single file name", name.to_string_lossy()),
        ));
    }
    cstr(name)
}

/// The target of the symlink `name` in `dir`.
pub fn read_link_at(dir: BorrowedFd, name: &OsStr) -> io::Result<PathBuf> {
    readlinkat(dir, &plain_name(name)?)
}

/// Opens the directory `rel` beneath `root` for reading (and so for fsync),
/// creating missing components one at a time with mkdirat. Refuses every
/// symlink on the way; `rel` must be plain names.
pub fn create_dirs_beneath(root: BorrowedFd, rel: &Path) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
    match open_beneath(root, rel, flags, 0, Symlinks::Refuse) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        r => return r,
    }
    let mut cur: Option<OwnedFd> = None;
    for c in rel.components() {
        let name = match c {
            Component::Normal(n) => n,
            Component::CurDir => continue,
            _ => return Err(errno(libc::EXDEV)),
        };
        let dir = cur.as_ref().map_or(root, |d| d.as_fd());
        let next = match open_beneath(dir, Path::new(name), flags, 0, Symlinks::Refuse) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let c = plain_name(name)?;
                if let Err(e) = sys::fs::mkdirat(dir, &c, 0o777) {
                    // Someone else made it meanwhile: open whatever is there
                    // under the same rules.
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
                open_beneath(dir, Path::new(name), flags, 0, Symlinks::Refuse)?
            }
            r => r?,
        };
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => open_beneath(root, Path::new(""), flags, 0, Symlinks::Refuse),
    }
}

/// Replaces `name` in `dir` (a directory opened for reading, as
/// [`create_dirs_beneath`] returns) with `data`: a new temporary file beside
/// it, synced, renamed over it with renameat in that same directory, then
/// the directory synced. A symlink at `name` is replaced, never written
/// through. The temporary file is removed on failure.
pub fn replace_file(dir: BorrowedFd, name: &OsStr, data: &[u8], mode: u32) -> io::Result<()> {
    let target = plain_name(name)?;
    let hint: String = name.to_string_lossy().chars().take(64).collect();
    let tmp = cstr(OsStr::new(&format!(
        ".{}.latchclaw-{:08x}.tmp",
        hint.replace('/', "_"),
        fastrand::u32(..)
    )))?;
    let fd = sys_openat(
        dir,
        &tmp,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        mode,
    )?;
    let result = (|| {
        let mut f = File::from(fd);
        f.write_all(data)?;
        f.sync_all()?;
        sys::fs::rename_in(dir, &tmp, &target)?;
        sys::fs::fsync(dir)
    })();
    if result.is_err() {
        // ENOENT (already renamed) is fine.
        let _ = sys::fs::unlinkat(dir, &tmp);
    }
    result
}

/// Queues the components of `p` ahead of what is left.
fn push_front(queue: &mut VecDeque<OsString>, p: &Path) -> io::Result<()> {
    if p.is_absolute() {
        return Err(errno(libc::EXDEV));
    }
    let parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect();
    for part in parts.into_iter().rev() {
        queue.push_front(part);
    }
    Ok(())
}

/// The target of the symlink `link` (an O_PATH descriptor of it) found in
/// `parent`, if the rules let the walk follow it.
fn follow(
    parent: BorrowedFd,
    link: BorrowedFd,
    links: Symlinks,
    hops: &mut u32,
) -> io::Result<PathBuf> {
    if links == Symlinks::Refuse {
        return Err(errno(libc::ELOOP));
    }
    *hops += 1;
    if *hops > MAX_HOPS || on_procfs(parent)? {
        return Err(errno(libc::ELOOP));
    }
    // The empty name reads the link the descriptor itself refers to.
    readlinkat(link, c"")
}

/// The fallback: one component at a time, never following a symlink the
/// kernel's way, directories held open so `..` needs no lookup.
fn walk(
    root: BorrowedFd,
    rel: &Path,
    flags: i32,
    mode: u32,
    links: Symlinks,
) -> io::Result<OwnedFd> {
    let mut queue = VecDeque::new();
    push_front(&mut queue, rel)?;
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let mut hops = 0;
    let mut retries = 0;
    let follow_last = flags & libc::O_NOFOLLOW == 0;
    loop {
        let cur = dirs.last().map_or(root, |d| d.as_fd());
        let Some(name) = queue.pop_front() else {
            return sys_openat(cur, c".", flags | libc::O_NOFOLLOW, mode);
        };
        if name == ".." {
            if dirs.pop().is_none() {
                return Err(errno(libc::EXDEV));
            }
            continue;
        }
        let c = cstr(&name)?;
        if !queue.is_empty() {
            let fd = sys_openat(cur, &c, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
            match file_type(fd.as_fd())? {
                libc::S_IFDIR => dirs.push(fd),
                libc::S_IFLNK => {
                    let target = follow(cur, fd.as_fd(), links, &mut hops)?;
                    push_front(&mut queue, &target)?;
                }
                _ => return Err(errno(libc::ENOTDIR)),
            }
            continue;
        }
        let link = match sys_openat(cur, &c, flags | libc::O_NOFOLLOW, mode) {
            // O_PATH | O_NOFOLLOW opens a symlink itself rather than failing.
            Ok(fd) if flags & libc::O_PATH != 0 && follow_last => {
                if file_type(fd.as_fd())? != libc::S_IFLNK {
                    return Ok(fd);
                }
                fd
            }
            Ok(fd) => return Ok(fd),
            // A final symlink fails with ELOOP, or ENOTDIR under O_DIRECTORY.
            Err(e)
                if follow_last && matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) =>
            {
                let Ok(probe) = sys_openat(cur, &c, libc::O_PATH | libc::O_NOFOLLOW, 0) else {
                    return Err(e);
                };
                match file_type(probe.as_fd())? {
                    libc::S_IFLNK => probe,
                    // Not the symlink the open met any more (swapped between
                    // the two lookups): look again, as the kernel would have
                    // seen only one of them.
                    libc::S_IFDIR if retries < MAX_HOPS => {
                        retries += 1;
                        queue.push_front(name);
                        continue;
                    }
                    _ if e.raw_os_error() == Some(libc::ELOOP) && retries < MAX_HOPS => {
                        retries += 1;
                        queue.push_front(name);
                        continue;
                    }
                    _ => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let target = follow(cur, link.as_fd(), links, &mut hops)?;
        push_front(&mut queue, &target)?;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::symlink;

    struct Fx {
        top: PathBuf,
        root: OwnedFd,
    }

    impl Drop for Fx {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.top);
        }
    }

    /// top/root is the root; top/outside holds what must stay out of reach.
    fn fixture() -> Fx {
        let top = std::env::temp_dir().join(crate::util::new_id("latchclaw-beneath"));
        std::fs::create_dir_all(top.join("root/a/b")).unwrap();
        std::fs::create_dir_all(top.join("outside")).unwrap();
        let top = std::fs::canonicalize(&top).unwrap();
        let r = top.join("root");
        std::fs::write(r.join("a/b/f.txt"), "f").unwrap();
        std::fs::write(r.join("file.txt"), "file").unwrap();
        std::fs::write(top.join("outside/secret.txt"), "secret").unwrap();
        symlink(top.join("outside/secret.txt"), r.join("abs")).unwrap();
        symlink(top.join("outside"), r.join("absdir")).unwrap();
        symlink("a/b/f.txt", r.join("rel")).unwrap();
        symlink("../file.txt", r.join("a/up")).unwrap();
        symlink("a", r.join("reldir")).unwrap();
        symlink("../outside/secret.txt", r.join("esc")).unwrap();
        symlink("a/../../outside", r.join("escdir")).unwrap();
        symlink("loop2", r.join("loop1")).unwrap();
        symlink("loop1", r.join("loop2")).unwrap();
        symlink("/proc/self/root", r.join("procroot")).unwrap();
        let root = open_workspace(&r).unwrap();
        Fx { top, root }
    }

    /// What an open gave, in a form both mechanisms must agree on.
    fn outcome(root: BorrowedFd, rel: &str, flags: i32, links: Symlinks) -> Result<String, i32> {
        let fd = open_beneath(root, Path::new(rel), flags, 0o600, links)
            .map_err(|e| e.raw_os_error().unwrap_or(-1))?;
        Ok(match file_type(fd.as_fd()).unwrap() {
            libc::S_IFDIR => "dir".into(),
            libc::S_IFLNK => "link".into(),
            _ if flags & libc::O_PATH != 0 => "path".into(),
            _ => {
                let mut s = String::new();
                File::from(fd).read_to_string(&mut s).unwrap();
                s
            }
        })
    }

    use Symlinks::{Beneath, Refuse};
    use std::io::Read;

    const RD: i32 = libc::O_RDONLY;
    const DIR: i32 = libc::O_RDONLY | libc::O_DIRECTORY;
    const LINK: i32 = libc::O_PATH | libc::O_NOFOLLOW;
    const OK: fn(&str) -> Result<String, i32> = |s| Ok(s.to_string());

    /// Each case through openat2 and through the walk: the same answer.
    fn check(cases: &[(&str, i32, Symlinks, Result<String, i32>)]) {
        let fx = fixture();
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            for (rel, flags, links, want) in cases {
                let got = outcome(fx.root.as_fd(), rel, *flags, *links);
                assert_eq!(&got, want, "{rel} {links:?} (walk: {walk})");
            }
        }
        assert!(
            !NO_OPENAT2.load(Ordering::Relaxed),
            "openat2 is unavailable here (old kernel or seccomp): only the walk was tested"
        );
    }

    #[test]
    fn plain_paths_open_beneath_the_root() {
        check(&[
            ("a/b/f.txt", RD, Refuse, OK("f")),
            ("file.txt", RD, Beneath, OK("file")),
            ("", DIR, Refuse, OK("dir")),
            (".", DIR, Refuse, OK("dir")),
            ("a/b", DIR, Refuse, OK("dir")),
            // `..` that stays beneath is fine.
            ("a/../file.txt", RD, Refuse, OK("file")),
            ("a/b/../../file.txt", RD, Refuse, OK("file")),
            ("a/b/f.txt/x", RD, Refuse, Err(libc::ENOTDIR)),
            ("a/missing.txt", RD, Refuse, Err(libc::ENOENT)),
            ("file.txt", DIR, Refuse, Err(libc::ENOTDIR)),
        ]);
    }

    #[test]
    fn dotdot_and_absolute_paths_cannot_leave() {
        check(&[
            ("..", DIR, Beneath, Err(libc::EXDEV)),
            ("../outside/secret.txt", RD, Beneath, Err(libc::EXDEV)),
            ("a/../../outside/secret.txt", RD, Beneath, Err(libc::EXDEV)),
            ("a/b/../../../root/file.txt", RD, Beneath, Err(libc::EXDEV)),
            ("/etc/hostname", RD, Beneath, Err(libc::EXDEV)),
        ]);
    }

    #[test]
    fn absolute_symlinks_are_refused() {
        check(&[
            ("abs", RD, Beneath, Err(libc::EXDEV)),
            ("absdir/secret.txt", RD, Beneath, Err(libc::EXDEV)),
            ("abs", RD, Refuse, Err(libc::ELOOP)),
            ("absdir/secret.txt", RD, Refuse, Err(libc::ELOOP)),
            // O_PATH | O_NOFOLLOW names the link itself, in both modes.
            ("abs", LINK, Refuse, OK("link")),
            ("abs", LINK, Beneath, OK("link")),
        ]);
    }

    /// The choice: `Beneath` follows a relative symlink while it stays
    /// beneath the root (RESOLVE_BENEATH); `Refuse`, which the file tools
    /// use, follows none.
    #[test]
    fn relative_symlinks_follow_only_beneath_and_only_when_asked() {
        check(&[
            ("rel", RD, Beneath, OK("f")),
            ("a/up", RD, Beneath, OK("file")),
            ("reldir/b/f.txt", RD, Beneath, OK("f")),
            ("reldir", DIR, Beneath, OK("dir")),
            ("esc", RD, Beneath, Err(libc::EXDEV)),
            ("escdir/secret.txt", RD, Beneath, Err(libc::EXDEV)),
            ("loop1", RD, Beneath, Err(libc::ELOOP)),
            ("rel", RD, Refuse, Err(libc::ELOOP)),
            ("a/up", RD, Refuse, Err(libc::ELOOP)),
            ("reldir/b/f.txt", RD, Refuse, Err(libc::ELOOP)),
            ("reldir", DIR, Refuse, Err(libc::ELOOP)),
            ("rel", LINK, Refuse, OK("link")),
            // O_NOFOLLOW still means the last component, as for open(2).
            ("rel", RD | libc::O_NOFOLLOW, Beneath, Err(libc::ELOOP)),
            // O_EXCL never follows a final symlink.
            (
                "rel",
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                Beneath,
                Err(libc::EEXIST),
            ),
        ]);
    }

    #[test]
    fn magic_links_are_refused() {
        let fx = fixture();
        let proc_self = open_workspace(Path::new("/proc/self")).unwrap();
        let secret = File::open(fx.top.join("outside/secret.txt")).unwrap();
        let fd_link = format!("fd/{}", secret.as_raw_fd());
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            for rel in ["root/etc/hostname", "cwd", "exe", fd_link.as_str()] {
                for links in [Beneath, Refuse] {
                    let got = outcome(proc_self.as_fd(), rel, RD, links);
                    assert_eq!(got, Err(libc::ELOOP), "{rel} {links:?} (walk: {walk})");
                }
            }
            // A link to a magic link is absolute, so it is out as well.
            let got = outcome(fx.root.as_fd(), "procroot/etc/hostname", RD, Beneath);
            assert_eq!(got, Err(libc::EXDEV), "walk: {walk}");
        }
    }

    #[test]
    fn creating_and_replacing_stay_in_the_directory_opened() {
        let fx = fixture();
        let r = fx.top.join("root");
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            let tag = if walk { "w" } else { "k" };
            let dir =
                create_dirs_beneath(fx.root.as_fd(), Path::new(&format!("{tag}/x/y"))).unwrap();
            replace_file(dir.as_fd(), OsStr::new("n.txt"), b"one", 0o640).unwrap();
            replace_file(dir.as_fd(), OsStr::new("n.txt"), b"two", 0o640).unwrap();
            let written = r.join(format!("{tag}/x/y/n.txt"));
            assert_eq!(std::fs::read_to_string(&written).unwrap(), "two");
            let md = metadata_beneath(fx.root.as_fd(), written.strip_prefix(&r).unwrap()).unwrap();
            assert!(md.is_file() && md.len() == 3);
            // Existing directories are reused; symlinks on the way are refused.
            create_dirs_beneath(fx.root.as_fd(), Path::new(&format!("{tag}/x"))).unwrap();
            for (rel, code) in [
                ("reldir/new", libc::ELOOP),
                ("absdir/new", libc::ELOOP),
                ("a/../../outside/new", libc::EXDEV),
            ] {
                let e = create_dirs_beneath(fx.root.as_fd(), Path::new(rel)).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(code), "{rel} (walk: {walk})");
            }
            // A symlink as the target is replaced, not written through.
            let a = open_dir_beneath(fx.root.as_fd(), Path::new(""), Refuse).unwrap();
            replace_file(a.as_fd(), OsStr::new("abs"), b"mine", 0o644).unwrap();
            assert!(std::fs::symlink_metadata(r.join("abs")).unwrap().is_file());
            std::fs::remove_file(r.join("abs")).unwrap();
            symlink(fx.top.join("outside/secret.txt"), r.join("abs")).unwrap();
        }
        assert!(!fx.top.join("outside/new").exists());
        assert_eq!(
            std::fs::read_to_string(fx.top.join("outside/secret.txt")).unwrap(),
            "secret"
        );
        // No temporary file is left behind, and names are checked.
        let names = read_dir(
            open_dir_beneath(fx.root.as_fd(), Path::new("k/x/y"), Refuse)
                .unwrap()
                .as_fd(),
        )
        .unwrap();
        assert_eq!(names, [OsString::from("n.txt")]);
        let root_dir = open_dir_beneath(fx.root.as_fd(), Path::new(""), Refuse).unwrap();
        for bad in ["", ".", "..", "a/b"] {
            let e = replace_file(root_dir.as_fd(), OsStr::new(bad), b"x", 0o644).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn listing_and_links_are_read_from_the_descriptor() {
        let fx = fixture();
        let dir = open_dir_beneath(fx.root.as_fd(), Path::new("a"), Refuse).unwrap();
        let mut names = read_dir(dir.as_fd()).unwrap();
        names.sort();
        assert_eq!(names, [OsString::from("b"), OsString::from("up")]);
        assert_eq!(
            read_link_at(dir.as_fd(), OsStr::new("up")).unwrap(),
            Path::new("../file.txt")
        );
        let md = metadata_beneath(dir.as_fd(), Path::new("up")).unwrap();
        assert!(md.file_type().is_symlink());
        assert!(read_link_at(dir.as_fd(), OsStr::new("b/x")).is_err());
    }
}
