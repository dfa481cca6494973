//! Descriptor-relative file operations, for `tools::beneath`'s opens beneath
//! a directory: `openat`, `openat2` with resolve flags, `mkdirat`, a rename
//! and an unlink inside one directory, `fstat`, `fstatfs`, `readlinkat`, and
//! directory entries with their type; and `access` for whether the state
//! directory can be written. All through rustix: no `unsafe` here.
//!
//! Flags and modes are open(2)'s own integers (`libc::O_*`), as the callers
//! build them.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use std::ffi::{CStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

fn oflags(flags: i32) -> OFlags {
    OFlags::from_bits_retain(flags as u32)
}

/// Retries `f` while it fails with EINTR.
fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// openat(2) of `name` in `dir` with open(2) `flags` (O_CLOEXEC is added)
/// and `mode` (used with O_CREAT).
pub fn openat(dir: BorrowedFd, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let flags = oflags(flags) | OFlags::CLOEXEC;
    retry(|| rustix::fs::openat(dir, name, flags, Mode::from_bits_retain(mode)))
}

/// openat2(2) of `path` beneath `dir`, with `resolve` (`RESOLVE_*` bits).
/// O_CLOEXEC is added; `mode` is passed only with O_CREAT or O_TMPFILE,
/// the kernel refuses it otherwise. ENOSYS on kernels before 5.6.
pub fn openat2(
    dir: BorrowedFd,
    path: &CStr,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let creates = flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    let mode = Mode::from_bits_retain(if creates { mode } else { 0 });
    let flags = oflags(flags) | OFlags::CLOEXEC;
    let resolve = ResolveFlags::from_bits_retain(resolve);
    retry(|| rustix::fs::openat2(dir, path, flags, mode, resolve))
}

/// mkdirat(2): the directory `name` in `dir`.
pub fn mkdirat(dir: BorrowedFd, name: &CStr, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(
        dir,
        name,
        Mode::from_bits_retain(mode),
    )?)
}

/// Whether this process may create files in the directory `dir`:
/// access(2) with W_OK and X_OK, which also says EROFS for a read-only
/// mount (root passes the mode bits, not that).
pub fn writable_dir(dir: &std::path::Path) -> io::Result<()> {
    use rustix::fs::Access;
    Ok(rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK)?)
}

/// renameat(2) of `from` over `to`, both in `dir`.
pub fn rename_in(dir: BorrowedFd, from: &CStr, to: &CStr) -> io::Result<()> {
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

/// unlinkat(2) of the file `name` in `dir`.
pub fn unlinkat(dir: BorrowedFd, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
}

/// fsync(2), for a directory opened for reading as well as a file.
pub fn fsync(fd: BorrowedFd) -> io::Result<()> {
    Ok(rustix::fs::fsync(fd)?)
}

/// The `S_IFMT` bits of what `fd` refers to (fstat(2); an `O_PATH`
/// descriptor of a symlink gives `S_IFLNK`).
pub fn file_type(fd: BorrowedFd) -> io::Result<u32> {
    Ok(rustix::fs::fstat(fd)?.st_mode as u32 & libc::S_IFMT)
}

/// The target of the symlink `name` in `dir` (with the empty name, of the
/// symlink `dir` itself refers to); ENAMETOOLONG past `PATH_MAX`.
pub fn readlinkat(dir: BorrowedFd, name: &CStr) -> io::Result<PathBuf> {
    let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
    let bytes = target.into_bytes();
    if bytes.len() > libc::PATH_MAX as usize {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    Ok(PathBuf::from(OsString::from_vec(bytes)))
}

/// Whether `dir` is on procfs, the home of magic links (fstatfs(2)).
pub fn on_procfs(dir: BorrowedFd) -> io::Result<bool> {
    // PROC_SUPER_MAGIC (the field's type changes across targets).
    Ok(rustix::fs::fstatfs(dir)?.f_type as i64 == 0x9fa0)
}

/// What a directory entry is, from `d_type` (no symlink followed); file
/// systems that leave it unknown get an `fstatat` without following.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

fn kind_of(t: FileType) -> Kind {
    match t {
        FileType::Directory => Kind::Dir,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// The entries of the directory `dir` (opened for reading), without `.` and
/// `..`, in the order the file system gives them, each with its [`Kind`].
pub fn read_dir_typed(dir: BorrowedFd) -> io::Result<Vec<(OsString, Kind)>> {
    // The stream reads through a descriptor of its own.
    let own = openat(
        dir,
        c".",
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )?;
    let mut d = rustix::fs::Dir::new(own)?;
    let mut names = Vec::new();
    while let Some(ent) = d.read() {
        let ent = ent?;
        let name = ent.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let kind = match ent.file_type() {
            FileType::Unknown => {
                match rustix::fs::statat(d.fd()?.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => kind_of(FileType::from_raw_mode(st.st_mode as _)),
                    Err(_) => Kind::Other,
                }
            }
            t => kind_of(t),
        };
        names.push((OsString::from_vec(bytes.to_vec()), kind));
    }
    Ok(names)
}
