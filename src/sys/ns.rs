//! The kernel calls of the namespace sandbox: unshare, the user-namespace
//! maps, the fork that makes a PID namespace's init, mounts, pivot_root,
//! and dropping every capability. `security::confine::view` decides what
//! a child sees; this only makes the calls.
//!
//! Everything here is hook-safe (see `process::set_pre_exec`): paths and
//! data arrive as `CStr`s built in the parent, and no function allocates.
//! `libc` for mount, fork and waitpid: rustix has mount only with typed
//! flags that cannot say MS_REMOUNT|MS_BIND, and no safe fork.

use std::ffi::{CStr, CString};
use std::io;

/// The namespaces a sandboxed child gets (`CLONE_NEW*` bits).
pub const NEWUSER: i32 = libc::CLONE_NEWUSER;
pub const NEWNS: i32 = libc::CLONE_NEWNS;
pub const NEWPID: i32 = libc::CLONE_NEWPID;
pub const NEWIPC: i32 = libc::CLONE_NEWIPC;
pub const NEWUTS: i32 = libc::CLONE_NEWUTS;
pub const NEWNET: i32 = libc::CLONE_NEWNET;

fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn opt(s: Option<&CStr>) -> *const libc::c_char {
    s.map_or(std::ptr::null(), CStr::as_ptr)
}

/// Hook-safe: unshare(2) of `flags` (`CLONE_NEW*` only: never CLONE_FILES
/// or CLONE_VM, so no other thread's view of memory or descriptors moves).
pub fn unshare(flags: i32) -> io::Result<()> {
    let only_namespaces = NEWUSER | NEWNS | NEWPID | NEWIPC | NEWUTS | NEWNET;
    if flags & !only_namespaces != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: integer argument; namespace flags change only which
    // namespaces this process (and its later children) belongs to.
    check(unsafe { libc::unshare(flags) })
}

/// Hook-safe: writes `data` to the existing file `path` in one write(2)
/// (the user-namespace maps must arrive in one).
pub fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let n = rustix::io::write(&fd, data)?;
    if n == data.len() {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

/// Hook-safe: fork(2). `Ok(None)` in the child, `Ok(Some(pid))` in the
/// parent.
pub fn fork() -> io::Result<Option<i32>> {
    // SAFETY: called only between fork and exec of a `std::process` child
    // (single-threaded from then on), and both sides keep to hook-safe
    // calls afterwards: the child goes on to exec, the parent to
    // `exit_like`.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Some(pid)),
    }
}

/// Hook-safe, and touches no thread-local state (errno): waits for the
/// child `pid`, reaping any other child that ends meanwhile (a namespace's
/// init inherits orphans); its wait status, or `None` when waiting failed.
pub fn wait_for(pid: i32) -> Option<i32> {
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some((p, status))) if p.as_raw_nonzero().get() == pid => {
                return Some(status.as_raw());
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
}

/// Hook-safe: ends this process the way the wait status `status` says a
/// process ended: the same exit code, or the same signal (128+N if the
/// signal would not kill). Never returns.
pub fn exit_with(status: i32) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: restores the default action of `sig` (no handler runs in
        // this process again) and sends it to this process; _exit ends it
        // if the signal does not.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig)
        }
    }
    // SAFETY: _exit ends the process at once; nothing to unwind.
    unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
}

/// Hook-safe: [`wait_for`] then [`exit_with`] (127 if waiting failed).
pub fn exit_like(pid: i32) -> ! {
    match wait_for(pid) {
        Some(status) => exit_with(status),
        // SAFETY: _exit ends the process at once; nothing to unwind.
        None => unsafe { libc::_exit(127) },
    }
}

/// Hook-safe, no errno: SIGKILL to every process this one may signal but
/// itself; from a PID namespace's init, every other process in the
/// namespace.
pub fn kill_all_others() {
    // SAFETY: integer arguments; signals other processes, touches no memory.
    unsafe {
        raw_syscall(
            libc::SYS_kill,
            -1isize as usize,
            libc::SIGKILL as usize,
            0,
            0,
        );
    }
}

/// Hook-safe, no errno: from a PID namespace's init, once every other
/// process was sent SIGKILL: waits until none is left (each orphan is
/// init's to reap), so nothing the call started can still act when init
/// reports.
pub fn reap_all() {
    let all = rustix::process::WaitOptions::from_bits_retain(libc::__WALL as u32);
    loop {
        match rustix::process::wait(all) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

/// A system call made without libc, so no thread-local errno is written:
/// for a child that shares this process's memory and the thread-local
/// storage of the thread that made it ([`clone_vm_into`]). The result, or
/// `-errno`; a call that takes fewer arguments ignores the rest.
///
/// # Safety
/// As the system call `nr` with these arguments.
#[cfg(target_arch = "x86_64")]
unsafe fn raw_syscall(nr: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 Linux system-call convention: number and result
    // in rax, arguments in rdi, rsi, rdx, r10; rcx and r11 clobbered.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// As the system call `nr` with these arguments.
#[cfg(target_arch = "aarch64")]
unsafe fn raw_syscall(nr: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 Linux system-call convention: number in x8,
    // arguments in x0-x3, result in x0.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") a as isize => ret,
            in("x1") b,
            in("x2") c,
            in("x3") d,
            options(nostack),
        );
    }
    ret
}

/// Elsewhere through libc, which may write errno on failure.
///
/// # Safety
/// As the system call `nr` with these arguments.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn raw_syscall(nr: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: as the caller's.
    unsafe { libc::syscall(nr, a, b, c, d) as isize }
}

/// Hook-safe: a close-on-exec pipe (read end, write end).
pub fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Hook-safe: makes `fd` this process's stdin (which survives
/// [`close_from`]).
pub fn onto_stdin(fd: impl std::os::fd::AsFd) -> io::Result<()> {
    Ok(rustix::stdio::dup2_stdin(fd)?)
}

/// Hook-safe: writes a wait status to stdin (made a pipe's write end).
pub fn send_status(status: i32) {
    let _ = rustix::io::write(rustix::stdio::stdin(), &status.to_ne_bytes());
}

/// Hook-safe: reads a wait status from stdin (made a pipe's read end);
/// `None` at end of file.
pub fn receive_status() -> Option<i32> {
    read_status(rustix::stdio::stdin())
}

/// Hook-safe: reads a wait status from `fd` (a pipe's read end); `None`
/// at end of file.
pub fn read_status(fd: std::os::fd::BorrowedFd) -> Option<i32> {
    let mut b = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match rustix::io::read(fd, &mut b[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    Some(i32::from_ne_bytes(b))
}

/// Hook-safe, no errno: closes (not just marks) every descriptor from
/// `first` up, so this process holds no pipe end that a reader waits to
/// see closed (from 1: not the output of a program it started either).
pub fn close_from(first: u32) {
    // SAFETY: integer system call; closes descriptors, touches no memory.
    unsafe {
        raw_syscall(
            libc::SYS_close_range,
            first as usize,
            libc::c_uint::MAX as usize,
            0,
            0,
        );
    }
}

/// Hook-safe: mount(2) as the kernel takes it (`flags` are `MS_*` bits).
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: u64,
    data: Option<&CStr>,
) -> io::Result<()> {
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call, or null where mount(2) allows it; the kernel only reads them.
    check(unsafe {
        libc::mount(
            opt(source),
            target.as_ptr(),
            opt(fstype),
            flags as libc::c_ulong,
            opt(data).cast(),
        )
    })
}

/// Hook-safe: makes the mount at `target` (and, with `recursive`, every
/// mount below it) read-only, leaving its other flags as they are
/// (`mount_setattr`, Linux 5.12). ENOSYS on older kernels.
pub fn set_read_only(target: &CStr, recursive: bool) -> io::Result<()> {
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    set_read_only_at(libc::AT_FDCWD, target, flags)
}

const AT_RECURSIVE: libc::c_uint = 0x8000;
const AT_EMPTY_PATH: libc::c_uint = libc::AT_EMPTY_PATH as libc::c_uint;

/// mount_setattr(2) of `dir`/`target` with `flags` (`AT_*`): read-only.
fn set_read_only_at(dir: libc::c_int, target: &CStr, flags: libc::c_uint) -> io::Result<()> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the path is NUL-terminated and `attr` is the kernel's
    // `struct mount_attr` (size passed), both alive across the call; the
    // kernel only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir,
            target.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hook-safe: binds `src` (or, when `src` is `None`, the object itself)
/// read-only over the file or directory at `dst`, only if that is still
/// the object `id` (st_dev, st_ino) found before. `dst` is opened with no
/// symbolic link followed anywhere on its path and the bind is attached to
/// that descriptor (open_tree, mount_setattr, move_mount), so a directory
/// renamed, swapped or replaced by a link since the object was found cannot
/// send the bind elsewhere. ESTALE when `dst` is another object now, ELOOP
/// when a link is on its path; ENOSYS before Linux 5.12.
pub fn cover_object(src: Option<&CStr>, dst: &CStr, id: (u64, u64)) -> io::Result<()> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
    use rustix::mount::{MoveMountFlags, OpenTreeFlags};
    use std::os::fd::AsRawFd;
    let target = rustix::fs::openat2(
        CWD,
        dst,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    let st = rustix::fs::fstat(&target)?;
    // `as`: st_dev and st_ino are u64 on every 64-bit Linux, not on all.
    #[allow(clippy::unnecessary_cast)]
    let object = (st.st_dev as u64, st.st_ino as u64);
    if object != id {
        return Err(io::Error::from_raw_os_error(libc::ESTALE));
    }
    let clone = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_RECURSIVE;
    let tree = match src {
        Some(src) => rustix::mount::open_tree(CWD, src, clone)?,
        None => rustix::mount::open_tree(&target, c"", clone | OpenTreeFlags::AT_EMPTY_PATH)?,
    };
    set_read_only_at(tree.as_raw_fd(), c"", AT_EMPTY_PATH | AT_RECURSIVE)?;
    Ok(rustix::mount::move_mount(
        &tree,
        c"",
        &target,
        c"",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?)
}

/// Hook-safe: pivot_root(2).
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> io::Result<()> {
    Ok(rustix::process::pivot_root(new_root, put_old)?)
}

/// Hook-safe: chdir(2).
pub fn chdir(path: &CStr) -> io::Result<()> {
    Ok(rustix::process::chdir(path)?)
}

/// Hook-safe: mkdir(2); an existing entry is fine.
pub fn mkdir(path: &CStr, mode: u32) -> io::Result<()> {
    match rustix::fs::mkdir(path, rustix::fs::Mode::from_bits_retain(mode)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Hook-safe: creates the empty file `path` (a mount point for a file);
/// an existing one is fine.
pub fn touch(path: &CStr, mode: u32) -> io::Result<()> {
    use rustix::fs::OFlags;
    rustix::fs::open(
        path,
        OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        rustix::fs::Mode::from_bits_retain(mode),
    )?;
    Ok(())
}

/// Hook-safe: drops every capability from the bounding, ambient,
/// effective, permitted and inheritable sets. True when none is left
/// (checked by reading the sets back).
pub fn drop_all_capabilities() -> bool {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    // 64 covers every capability a kernel may know (CAP_LAST_CAP is 40
    // today); numbers it does not know fail with EINVAL and are skipped.
    for cap in 0..64u32 {
        let bit = CapabilitySet::from_bits_retain(1u64 << cap);
        let _ = rustix::thread::remove_capability_from_bounding_set(bit);
    }
    let _ = rustix::thread::clear_ambient_capability_set();
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    let _ = rustix::thread::set_capabilities(None, none);
    rustix::thread::capabilities(None)
        .is_ok_and(|s| s.effective.is_empty() && s.permitted.is_empty() && s.inheritable.is_empty())
}

/// Hook-safe: the symbolic link `path` → `target`; an existing entry is
/// fine.
pub fn symlink(target: &CStr, path: &CStr) -> io::Result<()> {
    match rustix::fs::symlink(target, path) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Hook-safe: adds "`access` beneath the directory `path`" to the Landlock
/// ruleset `ruleset` (for a file system mounted after the ruleset was
/// built in the parent: the sandbox's own /proc).
pub fn landlock_allow_beneath(
    ruleset: std::os::fd::BorrowedFd,
    path: &CStr,
    access: u64,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    #[repr(C, packed)]
    struct PathBeneathAttr {
        allowed_access: u64,
        parent_fd: i32,
    }
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    let dir = rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )?;
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: dir.as_raw_fd(),
    };
    // SAFETY: `attr` is the kernel's packed `landlock_path_beneath_attr`,
    // alive across the call, which only reads it; both descriptors are
    // open for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hook-safe: setns(2) into the namespace `fd` refers to (`nstype` one of
/// the `NEW*` bits, checked by the kernel against what `fd` is).
pub fn setns(fd: std::os::fd::BorrowedFd, nstype: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: integer arguments; the descriptor is borrowed for the call.
    check(unsafe { libc::setns(fd.as_raw_fd(), nstype) })
}

/// Hook-safe: opens `path` (a /proc/self/ns file) read-only.
pub fn open_ns(path: &CStr) -> io::Result<std::os::fd::OwnedFd> {
    Ok(rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// Hook-safe: sends `fds` over the UNIX socket `sock` (SCM_RIGHTS), with a
/// one-byte message; the control buffer is on the stack.
pub fn send_fds(sock: std::os::fd::BorrowedFd, fds: &[std::os::fd::BorrowedFd]) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    if fds.len() > 2 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
    }
    rustix::net::sendmsg(
        sock,
        &[io::IoSlice::new(b"n")],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// Receives the descriptors [`send_fds`] sent (in order).
pub fn recv_fds(sock: std::os::fd::BorrowedFd) -> io::Result<Vec<std::os::fd::OwnedFd>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut out = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            out.extend(fds);
        }
    }
    Ok(out)
}

/// Hook-safe: reads stdin until it ends (the writer closed it or died),
/// then exits. For a process whose only job is to hold namespaces until
/// its creator is done with them.
pub fn hold_until_stdin_closes() -> ! {
    let mut buf = [0u8; 16];
    loop {
        match rustix::io::read(rustix::stdio::stdin(), &mut buf) {
            Ok(0) => break,
            Ok(_) | Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    // SAFETY: _exit ends the process at once; nothing to unwind.
    unsafe { libc::_exit(0) }
}

/// A program ready to be executed from a hook: its path, argv and
/// environment as the NUL-terminated arrays execve(2) takes, and the
/// descriptors to let through the exec. Built in the parent (it
/// allocates); read-only afterwards.
#[derive(Debug)]
pub struct Exec {
    program: CString,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    keep: Vec<i32>,
}

// SAFETY: the pointers point into `_strings`' heap buffers, which the same
// value owns and never changes (moving a `CString` does not move its
// bytes); nothing writes through them.
unsafe impl Send for Exec {}
// SAFETY: as above: shared, it is only read.
unsafe impl Sync for Exec {}

impl Exec {
    /// `program` run with `argv` (its first item is argv[0]) and exactly
    /// the environment `env`; `keep`: descriptor numbers to leave open
    /// across the exec.
    pub fn new(program: CString, argv: Vec<CString>, env: Vec<CString>, keep: Vec<i32>) -> Exec {
        let n = argv.len();
        let mut strings = argv;
        strings.extend(env);
        let ptrs = |s: &[CString]| {
            let mut v: Vec<*const libc::c_char> = s.iter().map(|c| c.as_ptr()).collect();
            v.push(std::ptr::null());
            v
        };
        Exec {
            program,
            argv: ptrs(&strings[..n]),
            envp: ptrs(&strings[n..]),
            _strings: strings,
            keep,
        }
    }
}

/// What the child of [`spawn_exec`] reads: the program, and the signal
/// mask to restore just before the exec.
struct ExecArg<'a> {
    exec: &'a Exec,
    mask: libc::sigset_t,
}

/// The stack the child of [`spawn_exec`] runs on until its exec: part of
/// the caller's frame, which stays put because the caller is suspended
/// until then.
#[repr(C, align(16))]
struct Stack([u8; 32 * 1024]);

/// Hook-safe: starts `exec` as a child that shares this process's memory
/// until its exec (`CLONE_VM | CLONE_VFORK`, as posix_spawn does), so
/// nothing of this process is copied: returns its pid once it has
/// executed the program, or exited because it could not (status 127, or
/// 126 when the file is not executable, the reason on its stderr).
pub fn spawn_exec(exec: &Exec) -> io::Result<i32> {
    let mut stack = Stack([0; 32 * 1024]);
    // SAFETY: plain value types; sigfillset/sigprocmask write only the
    // sets they are given. Every signal stays blocked in this process
    // until the child has executed (or ended), so no handler runs on the
    // memory the two share; the child restores the mask it had.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut arg = ExecArg {
        exec,
        // SAFETY: as above.
        mask: unsafe { std::mem::zeroed() },
    };
    // SAFETY: as above.
    unsafe {
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut arg.mask);
    }
    // SAFETY: the child runs `exec_child` on `stack`, which lives in this
    // frame, and reads `arg`, which does too; CLONE_VFORK suspends this
    // thread (the only one: a hook runs in a forked child) until the child
    // has executed or exited, so both outlive its use of them, and it
    // writes nothing this process reads but its own stack.
    let pid = unsafe {
        let top = stack.0.as_mut_ptr().add(stack.0.len());
        libc::clone(
            exec_child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut arg).cast(),
        )
    };
    let e = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::sigprocmask(libc::SIG_SETMASK, &arg.mask, std::ptr::null_mut());
    }
    std::hint::black_box(&mut stack);
    if pid == -1 { Err(e) } else { Ok(pid) }
}

extern "C" fn exec_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ExecArg` of `spawn_exec`, alive while this
    // child runs (its parent is suspended until the exec).
    let arg = unsafe { &*(arg as *const ExecArg) };
    let e = arg.exec;
    for &fd in &e.keep {
        // SAFETY: a descriptor number the caller keeps open for the spawn.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).is_err() {
            // SAFETY: _exit ends this child at once.
            unsafe { libc::_exit(127) }
        }
    }
    // SAFETY: the pointers are NUL-terminated arrays of NUL-terminated
    // strings owned by `e`; the mask is a plain value.
    let err = unsafe {
        libc::sigprocmask(libc::SIG_SETMASK, &arg.mask, std::ptr::null_mut());
        libc::execve(e.program.as_ptr(), e.argv.as_ptr(), e.envp.as_ptr());
        *libc::__errno_location()
    };
    let mut digits = [0u8; 12];
    let mut n = digits.len();
    let mut v = err.unsigned_abs();
    loop {
        n -= 1;
        digits[n] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let stderr = rustix::stdio::stderr();
    for part in [
        &b"latchclaw: cannot execute "[..],
        e.program.to_bytes(),
        b" (errno ",
        &digits[n..],
        b")\n",
    ] {
        let _ = rustix::io::write(stderr, part);
    }
    let code = if err == libc::EACCES || err == libc::ENOEXEC {
        126
    } else {
        127
    };
    // SAFETY: _exit ends this child at once (its parent then resumes).
    unsafe { libc::_exit(code) }
}

/// The stack of a child that shares this process's memory
/// ([`clone_vm_into`]): an anonymous mapping, a guard page below it. It
/// must outlive the child: drop it only once the child is reaped.
#[derive(Debug)]
pub struct ChildStack {
    base: usize,
    len: usize,
}

impl ChildStack {
    /// `len` bytes (reserved, not committed: only the pages the child
    /// touches are ever allocated).
    pub fn new(len: usize) -> io::Result<ChildStack> {
        // SAFETY: a new anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack {
            base: base as usize,
            len,
        };
        // SAFETY: the lowest page of the mapping just made: an overflow
        // faults there instead of writing below it.
        check(unsafe { libc::mprotect(base, 4096, libc::PROT_NONE) })?;
        Ok(stack)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made and owns; no child runs on
        // it any more (see the type's doc).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// What a child of [`clone_vm_into`] starts with, written at the top of
/// its own stack (nothing else uses that memory).
struct VmStart<F> {
    child: F,
    fail: i32,
}

/// Starts `child` in a new process made in new namespaces (`CLONE_NEW*`
/// bits of `flags`: with a new PID namespace it is its init) that shares
/// this process's memory (CLONE_VM, without CLONE_VFORK: this thread goes
/// on) and runs on `stack`: nothing of latchclaw is copied for it, and
/// none of latchclaw's pages become copy-on-write. It is a process of its
/// own otherwise: its own descriptors, signal handlers (reset to the
/// default before `child` runs), credentials and namespaces.
///
/// `child` gets the write end of a close-on-exec pipe. It returns an
/// error to have it written there (the child then exits 127), or closes
/// it once it uses nothing of the caller's any more but its own stack
/// (every descriptor from 3: [`close_from`]); this call returns then,
/// with the child's pid, or with the error. Until then this thread waits,
/// so what `child` borrows stays put. The child may not allocate, and
/// after closing the pipe it may make only calls that write no errno: it
/// shares this thread's thread-local storage. `stack` must outlive it.
pub fn clone_vm_into<F>(flags: i32, stack: &ChildStack, child: F) -> io::Result<i32>
where
    F: FnOnce(std::os::fd::BorrowedFd<'_>) -> io::Error,
{
    use std::os::fd::AsRawFd;
    let only_namespaces = NEWNS | NEWPID | NEWIPC | NEWUTS | NEWNET;
    if flags & !only_namespaces != 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let (failed, fail) = pipe()?;
    let start = VmStart {
        child,
        fail: fail.as_raw_fd(),
    };
    let top = stack.base + stack.len;
    let at = (top - std::mem::size_of::<VmStart<F>>()) & !(std::mem::align_of::<VmStart<F>>() - 1);
    // The child's frames start below what it reads, 16-byte aligned.
    let sp = at & !15;
    if sp < stack.base + 4096 * 2 {
        return Err(io::Error::from_raw_os_error(libc::ENOMEM));
    }
    // SAFETY: `at` is inside the mapping, aligned for `VmStart<F>`, and
    // nothing else uses it; the child takes the value from there.
    unsafe { std::ptr::write(at as *mut VmStart<F>, start) };
    // SAFETY: plain value types; every signal stays blocked in this
    // thread across the clone, so the child starts with all blocked and
    // no handler of latchclaw's runs in it before it resets them.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: the child runs `vm_child::<F>` on `stack` (mapped, owned by
    // the caller until the child is reaped) and reads the `VmStart` at
    // `at`, above its stack pointer; what `child` borrows stays alive
    // because this thread waits below until the child has released it.
    let pid = unsafe {
        libc::clone(
            vm_child::<F>,
            sp as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD | flags,
            at as *mut libc::c_void,
        )
    };
    let e = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    if pid == -1 {
        // SAFETY: no child took the value: it is dropped here, once.
        unsafe { std::ptr::drop_in_place(at as *mut VmStart<F>) };
        return Err(e);
    }
    drop(fail);
    // End of file: the child released what it borrowed.
    let mut errno = [0u8; 4];
    let read = loop {
        match rustix::io::read(&failed, &mut errno) {
            Err(rustix::io::Errno::INTR) => {}
            r => break r,
        }
    };
    if let Ok(4) = read {
        let _ = wait_child(pid);
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)));
    }
    Ok(pid)
}

extern "C" fn vm_child<F>(arg: *mut libc::c_void) -> libc::c_int
where
    F: FnOnce(std::os::fd::BorrowedFd<'_>) -> io::Error,
{
    // SAFETY: `arg` is the `VmStart<F>` written for this child alone;
    // taken once, here.
    let start = unsafe { std::ptr::read(arg as *const VmStart<F>) };
    // Handlers are latchclaw's code, on latchclaw's memory: none runs
    // here, libc's own (which its `sigaction` will not touch) included.
    // Then the signals the parent had blocked are let through again by
    // the caller (`own_group_no_mask`).
    for sig in 1..=64usize {
        // The kernel's struct sigaction: the handler first, then flags,
        // restorer and mask; all zero is SIG_DFL.
        let mut cur = [0u64; 4];
        let dfl = [0u64; 4];
        // SAFETY: rt_sigaction reads `dfl` and writes `cur`, both on this
        // stack and as large as the kernel's struct with an 8-byte mask.
        unsafe {
            let got = raw_syscall(libc::SYS_rt_sigaction, sig, 0, cur.as_mut_ptr() as usize, 8);
            let handler = cur[0] as usize;
            if got == 0 && handler != libc::SIG_DFL && handler != libc::SIG_IGN {
                raw_syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr() as usize, 0, 8);
            }
        }
    }
    // SAFETY: the pipe's write end, open in this child's descriptor table
    // (copied at the clone) until the child closes it.
    let fail = unsafe { std::os::fd::BorrowedFd::borrow_raw(start.fail) };
    let e = (start.child)(fail);
    fail_with(fail, &e)
}

/// Hook-safe: makes `fds` this process's stdin, stdout and stderr (each
/// moved above 2 first, so that none is overwritten before it is read).
pub fn onto_stdio(fds: [std::os::fd::BorrowedFd; 3]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut high = [-1; 3];
    for (i, fd) in fds.iter().enumerate() {
        // SAFETY: integer arguments; makes a new descriptor.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        high[i] = r;
    }
    for (i, fd) in high.into_iter().enumerate() {
        // SAFETY: integer arguments; dup2 leaves the copy without
        // close-on-exec, which is what stdio needs.
        if unsafe { libc::dup2(fd, i as libc::c_int) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Hook-safe: whether nobody reads the pipe `fd` writes to any more (its
/// reader died).
pub fn reader_gone(fd: std::os::fd::BorrowedFd) -> bool {
    let mut p = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::OUT,
    )];
    matches!(rustix::event::poll(&mut p, None), Ok(1))
        && p[0]
            .revents()
            .intersects(rustix::event::PollFlags::ERR | rustix::event::PollFlags::HUP)
}

/// Hook-safe: puts this process in a process group of its own, and clears
/// its signal mask (what `std::process` does before a hook).
pub fn own_group_no_mask() -> io::Result<()> {
    rustix::process::setpgid(None, None)?;
    // SAFETY: an empty set on the stack; sigprocmask only reads it.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    Ok(())
}

/// Hook-safe: writes an errno to `fd` (a spawn's error pipe), then exits.
pub fn fail_with(fd: std::os::fd::BorrowedFd, e: &io::Error) -> ! {
    let code = e.raw_os_error().unwrap_or(libc::EIO);
    let _ = rustix::io::write(fd, &code.to_ne_bytes());
    // SAFETY: _exit ends the process at once; nothing to unwind.
    unsafe { libc::_exit(127) }
}

/// Waits for the child `pid` (EINTR retried): its wait status.
pub fn wait_child(pid: i32) -> io::Result<i32> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: writes the one integer `status`, which outlives the call.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The child writes the parent's memory, not a copy of it; the parent
    /// goes on once it has closed its descriptors, before it exits.
    #[test]
    fn a_vm_child_shares_memory_and_releases_its_caller_before_it_ends() {
        let seen = AtomicU32::new(0);
        let (go_r, go_w) = pipe().unwrap();
        let stack = ChildStack::new(256 * 1024).unwrap();
        let pid = clone_vm_into(0, &stack, |_fail| {
            seen.store(7, Ordering::SeqCst);
            // Stays in this child's copy of the table past the release.
            let _ = onto_stdin(&go_r);
            close_from(3);
            // Ends only when the parent says so: it got here first.
            let mut b = [0u8; 1];
            let _ = rustix::io::read(rustix::stdio::stdin(), &mut b);
            let ended = if seen.load(Ordering::SeqCst) == 8 {
                0
            } else {
                3
            };
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(ended) }
        })
        .unwrap();
        assert_eq!(
            seen.load(Ordering::SeqCst),
            7,
            "the child's write is seen here"
        );
        seen.store(8, Ordering::SeqCst);
        drop(go_w);
        drop(go_r);
        let status = wait_child(pid).unwrap();
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the parent's write was seen there"
        );
        drop(stack);
    }

    /// An error the child returns is the caller's (the child reaped).
    #[test]
    fn a_vm_child_that_fails_hands_its_error_back() {
        let stack = ChildStack::new(256 * 1024).unwrap();
        let e = clone_vm_into(0, &stack, |_fail| {
            io::Error::from_raw_os_error(libc::EACCES)
        })
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES));
    }

    /// None of this process's handlers is left in the child (they are
    /// latchclaw's code on latchclaw's memory); ignored signals stay so.
    #[test]
    fn a_vm_child_runs_no_handler_of_its_parents() {
        extern "C" fn handler(_: libc::c_int) {}
        let sig = libc::SIGWINCH;
        // SAFETY: a handler that does nothing, for a signal no test sends;
        // restored below.
        let before = unsafe { libc::signal(sig, handler as *const () as libc::sighandler_t) };
        // SAFETY: a query into a value on this stack.
        let pipe_before = unsafe {
            let mut b: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut b);
            b.sa_sigaction
        };
        let stack = ChildStack::new(256 * 1024).unwrap();
        let pid = clone_vm_into(0, &stack, |_fail| {
            // SAFETY: queries only, into values on this stack.
            let (own, pipe) = unsafe {
                let mut a: libc::sigaction = std::mem::zeroed();
                let mut b: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut a);
                libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut b);
                (a.sa_sigaction, b.sa_sigaction)
            };
            close_from(3);
            let ok = own == libc::SIG_DFL
                && (pipe == pipe_before || ![libc::SIG_DFL, libc::SIG_IGN].contains(&pipe_before));
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 4 }) }
        })
        .unwrap();
        let status = wait_child(pid).unwrap();
        // SAFETY: restores what was there.
        unsafe { libc::signal(sig, before) };
        assert_eq!(libc::WEXITSTATUS(status), 0, "{status:#x}");
    }

    /// Only namespace flags: a caller cannot make it share more.
    #[test]
    fn a_vm_child_takes_namespace_flags_only() {
        let stack = ChildStack::new(64 * 1024).unwrap();
        let e = clone_vm_into(libc::CLONE_FILES, &stack, |_fail| {
            io::Error::from_raw_os_error(libc::EIO)
        })
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
