//! The REPL's terminal on stdin and stderr: raw mode with bracketed paste
//! while a line is read, the SIGTERM and SIGHUP handlers that put the
//! terminal back and wake the reader, the window's width, and the waits and
//! reads of keys. Termios, poll, read and the pipe are rustix; the
//! handlers are sigaction(2) (`libc`: rustix has none).

use super::poll::timeout;
use super::signal;
use rustix::event::{PollFd, PollFlags};
use rustix::stdio::{stderr, stdin};
use rustix::termios::{self, InputModes, LocalModes, OptionalActions, SpecialCodeIndex, Termios};
use std::cell::UnsafeCell;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// The modes to put back, for a signal handler: written only while `RAW`
/// is false, read only by whoever turns `RAW` from true to false.
struct Saved(UnsafeCell<MaybeUninit<Termios>>);

// SAFETY: access is ordered by `RAW` as described above.
unsafe impl Sync for Saved {}

static SAVED: Saved = Saved(UnsafeCell::new(MaybeUninit::uninit()));
static RAW: AtomicBool = AtomicBool::new(false);

/// Puts the terminal back as it was if it is in raw mode (ending a line on
/// the screen): for the panic hook and any path that exits the process.
/// Async-signal-safe.
pub fn restore_terminal() {
    if RAW.swap(false, Ordering::SeqCst) {
        // SAFETY: SAVED was written (initialised) before RAW became true,
        // and this caller is the one that turned RAW back to false.
        let saved = unsafe { (*SAVED.0.get()).assume_init_ref() };
        // Both are single system calls (an ioctl, a write): signal-safe.
        let _ = termios::tcsetattr(stdin(), OptionalActions::Now, saved);
        let _ = rustix::io::write(stderr(), b"\x1b[?2004l\r\n");
    }
}

/// SIGTERM or SIGHUP that arrived while a line was read (0: none).
static STOP: AtomicI32 = AtomicI32::new(0);
/// The pipe (read end, write end) a handler wakes the reader through; `None`
/// when it could not be made (a signal then cuts the wait short instead).
static WAKE: OnceLock<Option<(OwnedFd, OwnedFd)>> = OnceLock::new();
/// The handlers that were in place before ours, called after it.
static PREV: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
const CAUGHT: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGHUP];

fn wake_pipe() -> Option<&'static (OwnedFd, OwnedFd)> {
    WAKE.get_or_init(|| {
        let flags = rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK;
        rustix::pipe::pipe_with(flags).ok()
    })
    .as_ref()
}

/// The terminating signal that ended a read at the prompt, if one did.
pub fn stop_signal() -> Option<i32> {
    Some(STOP.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// Puts the terminal back and wakes the reader, which ends the REPL by
/// its own path (the run recorded); a handler that was there before is
/// told too. A second signal ends the process at once.
extern "C" fn on_terminate(sig: libc::c_int) {
    restore_terminal();
    if STOP.swap(sig, Ordering::SeqCst) != 0 {
        signal::die_of(sig);
        return;
    }
    // Set before the handlers were installed; `get` is an atomic load.
    if let Some(Some((_, w))) = WAKE.get() {
        // One byte into our own non-blocking pipe.
        let _ = rustix::io::write(w, b"!");
    }
    let i = usize::from(sig != CAUGHT[0]);
    let prev = PREV[i].load(Ordering::SeqCst);
    if prev != libc::SIG_DFL && prev != libc::SIG_IGN && prev != libc::SIG_ERR {
        // SAFETY: a one-argument handler (SA_SIGINFO ones are not kept),
        // installed by this program for this signal.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev) };
        f(sig);
    }
}

/// Raw mode for as long as it lives: no echo, no line discipline, keys
/// (Ctrl-C and Ctrl-Z included) arrive as bytes, bracketed paste on.
/// SIGTERM and SIGHUP put the terminal back and end the wait for keys (an
/// ignored one stays ignored). Never entered twice at once.
pub struct RawMode {
    old_actions: Vec<(libc::c_int, libc::sigaction)>,
}

impl RawMode {
    pub fn enter() -> io::Result<RawMode> {
        // Made before a handler can want it.
        wake_pipe();
        let t = termios::tcgetattr(stdin())?;
        // SAFETY: RAW is false (raw mode is never entered twice), so no
        // handler reads SAVED while it is written.
        unsafe { (*SAVED.0.get()).write(t.clone()) };
        let mut guard = RawMode {
            old_actions: Vec::new(),
        };
        for (i, &sig) in CAUGHT.iter().enumerate() {
            // SAFETY: sigaction reads and fills structs of our own (plain
            // integers and masks, valid all-zero); the handler only makes
            // async-signal-safe calls. No SA_RESTART: a wait the signal
            // cuts short returns.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut old);
                if old.sa_sigaction == libc::SIG_IGN {
                    continue;
                }
                let prev = if old.sa_flags & libc::SA_SIGINFO != 0 {
                    libc::SIG_DFL
                } else {
                    old.sa_sigaction
                };
                PREV[i].store(prev, Ordering::SeqCst);
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = on_terminate as *const () as libc::sighandler_t;
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(sig, &new, std::ptr::null_mut());
                guard.old_actions.push((sig, old));
            }
        }
        RAW.store(true, Ordering::SeqCst);
        let mut raw = t;
        raw.input_modes -= InputModes::ICRNL
            | InputModes::INLCR
            | InputModes::IGNCR
            | InputModes::IXON
            | InputModes::ISTRIP;
        raw.local_modes -=
            LocalModes::ICANON | LocalModes::ECHO | LocalModes::ISIG | LocalModes::IEXTEN;
        raw.special_codes[SpecialCodeIndex::VMIN] = 1;
        raw.special_codes[SpecialCodeIndex::VTIME] = 0;
        // Output processing stays on: `\n` still ends a line properly.
        // TCSANOW keeps typed-ahead input.
        termios::tcsetattr(stdin(), OptionalActions::Now, &raw)?;
        write_err(b"\x1b[?2004h")?;
        Ok(guard)
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if RAW.swap(false, Ordering::SeqCst) {
            let _ = write_err(b"\x1b[?2004l");
            // SAFETY: SAVED holds the modes read in `enter`, and this is the
            // caller that turned RAW back to false.
            let saved = unsafe { (*SAVED.0.get()).assume_init_ref() };
            let _ = termios::tcsetattr(stdin(), OptionalActions::Now, saved);
        }
        for (sig, old) in &self.old_actions {
            // SAFETY: puts back the action there before.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

fn write_err(bytes: &[u8]) -> io::Result<()> {
    let mut err = io::stderr().lock();
    err.write_all(bytes)?;
    err.flush()
}

/// The width in columns of the terminal on stderr, if it is one.
pub fn stderr_width() -> Option<usize> {
    width(stderr())
}

/// The width in columns of the terminal on stdin, if it is one.
pub fn stdin_width() -> Option<usize> {
    width(stdin())
}

fn width(fd: std::os::fd::BorrowedFd) -> Option<usize> {
    let ws = termios::tcgetwinsize(fd).ok()?;
    (ws.ws_col > 0).then_some(ws.ws_col as usize)
}

/// What ended a [`wait_input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Stdin has bytes to read (or hung up).
    Ready,
    /// The time given passed first.
    TimedOut,
    /// A handler woke the wait (see [`stop_signal`]).
    Woken,
}

/// Waits for keys on stdin up to `ms` milliseconds (negative: no limit).
/// A signal that cuts the wait short comes back as an error of kind
/// `Interrupted`.
pub fn wait_input(ms: i32) -> io::Result<Input> {
    let tty = stdin();
    let limit = timeout(ms);
    let ready = match wake_pipe() {
        Some((r, _)) => {
            let mut fds = [
                PollFd::new(&tty, PollFlags::IN),
                PollFd::new(r, PollFlags::IN),
            ];
            if rustix::event::poll(&mut fds, limit.as_ref())? == 0 {
                return Ok(Input::TimedOut);
            }
            !fds[0].revents().is_empty()
        }
        None => {
            let mut fds = [PollFd::new(&tty, PollFlags::IN)];
            if rustix::event::poll(&mut fds, limit.as_ref())? == 0 {
                return Ok(Input::TimedOut);
            }
            !fds[0].revents().is_empty()
        }
    };
    Ok(if ready { Input::Ready } else { Input::Woken })
}

/// read(2) from stdin into `buf`: 0 at the end of input.
pub fn read_input(buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::io::read(stdin(), buf)?)
}
