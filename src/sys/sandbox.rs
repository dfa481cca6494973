//! The kernel calls of the shell sandbox: Landlock's version probe and
//! `landlock_restrict_self`, seccomp's probe and filter install,
//! no_new_privs, the capability drop, and closing inherited descriptors.
//! `security::confine` decides what the sandbox allows and when a failure
//! is fatal; this only makes the calls.
//!
//! Everything marked hook-safe runs in a forked child before exec (see
//! `process::set_pre_exec`): a system call or two, no allocation. rustix
//! has no Landlock, seccomp or close_range, so those stay raw `libc`
//! syscalls; no_new_privs and the capabilities go through rustix.

use rustix::thread::CapabilitySet;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One classic-BPF instruction of a seccomp filter.
pub type SockFilter = libc::sock_filter;

/// The kernel's Landlock ABI version (`landlock_create_ruleset` with the
/// VERSION flag). EOPNOTSUPP: built in but not enabled; ENOSYS: missing.
pub fn landlock_abi() -> io::Result<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call
    // only returns the ABI version; it reads and writes no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v > 0 {
        Ok(v as u32)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hook-safe: puts this process in the Landlock domain of `ruleset`, for
/// good (`landlock_restrict_self`).
pub fn landlock_restrict_self(ruleset: BorrowedFd) -> io::Result<()> {
    // SAFETY: integer arguments only; the descriptor is borrowed for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_restrict_self,
            ruleset.as_raw_fd(),
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hook-safe: `PR_SET_NO_NEW_PRIVS` (exec gains no privileges: setuid
/// programs do not elevate); for good.
pub fn set_no_new_privs() -> io::Result<()> {
    Ok(rustix::thread::set_no_new_privs(true)?)
}

/// Whether this process has no_new_privs set.
pub fn no_new_privs() -> io::Result<bool> {
    Ok(rustix::thread::no_new_privs()?)
}

/// Whether this process is under a seccomp filter (or strict mode).
pub fn seccomp_active() -> io::Result<bool> {
    Ok(!matches!(
        rustix::thread::secure_computing_mode()?,
        rustix::thread::SecureComputingMode::Disabled
    ))
}

/// Hook-safe: marks every descriptor above stderr close-on-exec, so an exec
/// keeps the three standard ones and nothing else. False when some may be
/// left (over 65536 open on a kernel before 5.11).
///
/// `libc`: besides close_range, which rustix lacks, the fallback names
/// descriptor numbers nothing in this process owns (inherited ones), which
/// rustix's I/O-safe calls cannot take.
pub fn close_inherited() -> bool {
    // SAFETY: integer system calls only: close_range and fcntl change
    // descriptor flags, never memory; getrlimit writes the stack value.
    unsafe {
        let r = libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if r == 0 {
            return true;
        }
        // Before Linux 5.11: one by one, up to the descriptor limit.
        const MOST: libc::rlim_t = 1 << 16;
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return false;
        }
        for fd in 3..lim.rlim_cur.min(MOST) as libc::c_int {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        lim.rlim_cur <= MOST
    }
}

/// Hook-safe: puts this process under the seccomp filter `prog`, for good.
/// The caller has set no_new_privs (or the kernel wants CAP_SYS_ADMIN).
pub fn seccomp_install(prog: &[SockFilter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: the kernel copies the program `fprog` points to (`len`
    // instructions of `prog`), which lives across the call; it writes none.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this kernel takes seccomp filters, without installing one: a
/// null program makes a kernel with filters fault reading it (EFAULT)
/// before it looks at anything else. `Ok` on that EFAULT; otherwise the
/// error the kernel gave (ENOSYS: no seccomp; EINVAL: no filters; EPERM or
/// EACCES: not permitted), or one without an errno when it answered
/// something unexpected.
pub fn seccomp_probe() -> io::Result<()> {
    // SAFETY: the kernel only tries to read the (null) pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            std::ptr::null::<libc::sock_fprog>(),
        )
    };
    let err = io::Error::last_os_error();
    match (r, err.raw_os_error()) {
        (-1, Some(libc::EFAULT)) => Ok(()),
        (-1, _) => Err(err),
        _ => Err(io::Error::other("seccomp accepted a null program")),
    }
}

/// Whether the kernel supports the filter return `action`
/// (`SECCOMP_GET_ACTION_AVAIL`).
pub fn seccomp_action_available(action: u32) -> bool {
    // SAFETY: the kernel reads the one integer, which lives across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0 as libc::c_uint,
            &action as *const u32,
        )
    };
    r == 0
}

/// Whether this process holds CAP_SYS_ADMIN (it can make namespaces
/// without a user namespace of its own).
pub fn has_sys_admin() -> bool {
    rustix::thread::capabilities(None).is_ok_and(|s| s.effective.contains(CapabilitySet::SYS_ADMIN))
}
