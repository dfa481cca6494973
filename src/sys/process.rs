//! Processes: the hook a child runs between fork and exec, this process's
//! own flags (dumpable, subreaper), and signalling and reaping the
//! descendants of a shell call. rustix throughout, but for the hook itself.

use rustix::process::{Pid, Signal, WaitOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Runs `hook` in `cmd`'s child after fork, before exec; an error fails
/// the spawn with it.
///
/// The child of a multithreaded parent has only the forking thread, and
/// any lock another thread held (the allocator's among them) stays held, so
/// `hook` must be async-signal-safe: no allocation, no lock, no panic
/// (nothing that formats), only system calls — the functions of `sys`
/// documented as async-signal-safe or as hook-safe. It must not close or
/// replace descriptors that `std::process` owns.
pub fn set_pre_exec<F>(cmd: &mut Command, hook: F)
where
    F: FnMut() -> io::Result<()> + Send + Sync + 'static,
{
    // SAFETY: `pre_exec` is unsafe because of what a hook may do after
    // fork; this function's contract (above) puts those rules on `hook`,
    // and every hook in the crate keeps to system calls.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Hook-safe: lets `fd` through the coming exec (clears its close-on-exec
/// flag), after the sandbox marked every descriptor above stderr.
pub fn keep_across_exec(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?)
}

/// A pipe whose two ends are close-on-exec: (read, write).
pub fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Hook-safe: chdir to the directory `dir` is open on.
pub fn fchdir(dir: impl AsFd) -> io::Result<()> {
    Ok(rustix::process::fchdir(dir)?)
}

/// Hook-safe: SIGKILL this process when the thread that forked it ends
/// (`PR_SET_PDEATHSIG`).
pub fn die_with_parent() -> io::Result<()> {
    Ok(rustix::process::set_parent_process_death_signal(Some(
        Signal::KILL,
    ))?)
}

/// Hook-safe: the parent's process id (0 when it is outside this pid
/// namespace).
pub fn parent_id() -> u32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
}

/// Makes this process non-dumpable: its /proc entries belong to root, so
/// other processes of the same user cannot read them (or attach).
pub fn set_undumpable() -> io::Result<()> {
    Ok(rustix::process::set_dumpable_behavior(
        rustix::process::DumpableBehavior::NotDumpable,
    )?)
}

/// Hook-safe: makes this process dumpable again, so that its /proc files
/// belong to its own user (a user namespace's maps are written there).
pub fn set_dumpable() -> io::Result<()> {
    Ok(rustix::process::set_dumpable_behavior(
        rustix::process::DumpableBehavior::Dumpable,
    )?)
}

/// Makes orphaned descendants this process's children instead of init's
/// (`PR_SET_CHILD_SUBREAPER`).
pub fn become_subreaper() -> io::Result<()> {
    // Any pid turns it on; rustix takes the flag as one.
    Ok(rustix::process::set_child_subreaper(Some(Pid::INIT))?)
}

/// SIGKILLs the process `pid` (nothing for pids that are not positive).
pub fn kill(pid: i32) -> io::Result<()> {
    match Pid::from_raw(pid) {
        Some(p) if pid > 0 => Ok(rustix::process::kill_process(p, Signal::KILL)?),
        _ => Err(io::Error::from_raw_os_error(libc::ESRCH)),
    }
}

/// Whether a process `pid` exists (this user's or not): kill(pid, 0).
pub fn exists(pid: i32) -> bool {
    match Pid::from_raw(pid) {
        Some(p) if pid > 0 => match rustix::process::test_kill_process(p) {
            Ok(()) => true,
            Err(e) => e != rustix::io::Errno::SRCH,
        },
        _ => false,
    }
}

/// SIGKILLs every process of the process group `pgid`.
pub fn kill_group(pgid: i32) -> io::Result<()> {
    match Pid::from_raw(pgid) {
        Some(p) if pgid > 0 => Ok(rustix::process::kill_process_group(p, Signal::KILL)?),
        _ => Err(io::Error::from_raw_os_error(libc::ESRCH)),
    }
}

/// What [`reap_one`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaped {
    /// A child that had ended was reaped.
    One,
    /// Children remain, none has ended.
    Running,
    /// This process has no child at all (or waiting failed).
    NoChildren,
}

/// waitpid(-1, WNOHANG): reaps one ended child, if any, without waiting.
pub fn reap_one() -> Reaped {
    // `wait` is waitpid(-1): rustix's `waitpid(None)` is waitpid(0), this
    // process group only, and daemons leave it.
    match rustix::process::wait(WaitOptions::NOHANG) {
        Ok(Some(_)) => Reaped::One,
        Ok(None) => Reaped::Running,
        Err(_) => Reaped::NoChildren,
    }
}

/// waitpid(-1, __WALL): waits for any child, of any kind, to end.
pub fn wait_any() {
    let _ = rustix::process::wait(WaitOptions::from_bits_retain(libc::__WALL as u32));
}

/// This process's effective user id.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// This process's effective user and group ids.
pub fn ids() -> (u32, u32) {
    (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    )
}
