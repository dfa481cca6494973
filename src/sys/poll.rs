//! Waiting for descriptors: one at a time (rustix), or a set rebuilt each
//! round from descriptors whose owners cannot stay borrowed ([`PollSet`]).

use rustix::event::{PollFd, PollFlags, Timespec};
use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// A poll(2) timeout in milliseconds (negative: none) as rustix takes it.
pub(super) fn timeout(ms: i32) -> Option<Timespec> {
    (ms >= 0).then(|| Timespec {
        tv_sec: i64::from(ms / 1000),
        tv_nsec: i64::from(ms % 1000) * 1_000_000,
    })
}

/// Whether `fd` has something to read, or hung up, within `ms`
/// milliseconds (negative: no limit). EINTR comes back as an error of
/// kind `Interrupted`.
pub fn readable(fd: impl AsFd, ms: i32) -> io::Result<bool> {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let n = rustix::event::poll(&mut fds, timeout(ms).as_ref())?;
    Ok(n > 0)
}

/// What to wait for on one descriptor of a [`PollSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Read,
    Write,
}

/// The descriptors one poll(2) waits on, kept as numbers so that the
/// owners (connections a later step reads, writes and drops) are not held
/// borrowed across the wait. That is why this is `libc::poll` and not
/// rustix's, whose `PollFd` borrows: poll(2) reads nothing through a
/// descriptor, and one that was closed meanwhile only comes back
/// `POLLNVAL`.
#[derive(Default)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl PollSet {
    pub fn clear(&mut self) {
        self.fds.clear();
    }

    /// Adds `fd`; its index is the number of descriptors added before it.
    pub fn push(&mut self, fd: &impl AsRawFd, want: Want) {
        self.fds.push(libc::pollfd {
            fd: fd.as_raw_fd(),
            events: match want {
                Want::Read => libc::POLLIN,
                Want::Write => libc::POLLOUT,
            },
            revents: 0,
        });
    }

    /// Waits up to `ms` milliseconds (negative: no limit) for any of them:
    /// how many are ready.
    pub fn wait(&mut self, ms: i32) -> io::Result<usize> {
        // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfds,
        // which the kernel reads and whose `revents` it writes.
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Whether the descriptor at `i` is ready (or hung up, or failed) after
    /// the last [`wait`](Self::wait).
    pub fn ready(&self, i: usize) -> bool {
        self.fds.get(i).is_some_and(|p| p.revents != 0)
    }
}
