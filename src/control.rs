//! When a run must stop: its deadline (`agent --timeout`) and cancellation
//! (Ctrl-C, SIGTERM, SIGHUP). One `RunControl` per run, passed by reference
//! to the runtime, the provider's stream sink, the tool lock, the approval
//! prompt and the tools. Every wait polls it, so a run ends by its own code
//! path — the call's processes killed, its receipt and the run record
//! written — and nothing exits the process from a side thread.

use crate::sys::signal::{self, Shared};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Ctrl-C or a terminating signal.
    Cancelled,
    /// The run's deadline passed.
    Timeout,
}

#[derive(Default)]
struct Flags {
    cancelled: AtomicBool,
    /// The terminating signal that cancelled the run (0: none).
    signal: AtomicI32,
}

pub struct RunControl {
    /// `--timeout`, and the instant it runs out.
    limit: Option<(Duration, Instant)>,
    flags: Arc<Flags>,
}

/// The control signal handlers report to. A handler may only touch atomics,
/// so it reaches the run through this slot, set while a control is
/// installed (`RunControl::install`).
static CURRENT: Shared<Flags> = Shared::new();

/// A terminating signal caught during the run, re-raised by `main` on the
/// way out so the parent sees the process die of it.
static EXIT_SIGNAL: AtomicI32 = AtomicI32::new(0);

impl RunControl {
    /// A run that must end `timeout` from now, if given.
    pub fn new(timeout: Option<Duration>) -> RunControl {
        RunControl {
            limit: timeout.map(|t| (t, Instant::now() + t)),
            flags: Arc::default(),
        }
    }

    /// A run with its own deadline that is cancelled with this one (the
    /// gateway's turns, stopped by the signal that stops the gateway).
    pub fn child(&self, timeout: Option<Duration>) -> RunControl {
        RunControl {
            limit: timeout.map(|t| (t, Instant::now() + t)),
            flags: Arc::clone(&self.flags),
        }
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.limit.map(|(_, d)| d)
    }

    /// The end of a step that may take `limit`: the sooner of that and the
    /// run's deadline.
    pub fn until(&self, limit: Duration) -> Instant {
        let own = Instant::now() + limit;
        self.deadline().map_or(own, |d| d.min(own))
    }

    /// Why the run stops, in words for a tool result or an answer.
    pub fn why(&self, stop: Stop) -> String {
        match (stop, self.limit) {
            (Stop::Cancelled, _) => "cancelled by the operator (Ctrl-C)".into(),
            (Stop::Timeout, Some((t, _))) => {
                format!("the run's --timeout of {} s was reached", t.as_secs())
            }
            (Stop::Timeout, None) => "the run's deadline was reached".into(),
        }
    }

    pub fn cancelled(&self) -> bool {
        self.flags.cancelled.load(Ordering::SeqCst)
    }

    pub fn timed_out(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// Whether the run must stop now, and why (a cancel beats the clock).
    pub fn stop(&self) -> Option<Stop> {
        if self.cancelled() {
            Some(Stop::Cancelled)
        } else if self.timed_out() {
            Some(Stop::Timeout)
        } else {
            None
        }
    }

    /// The REPL's next turn after one was cancelled.
    pub fn reset(&self) {
        self.flags.cancelled.store(false, Ordering::SeqCst);
    }

    /// The terminating signal that cancelled this run (0: none).
    pub fn signal(&self) -> i32 {
        self.flags.signal.load(Ordering::SeqCst)
    }

    /// Makes this the control that signal handlers report to, for the
    /// guard's life, and catches SIGINT, SIGTERM and SIGHUP where nothing
    /// else does: the first one stops the run by its own code path (the
    /// call's processes killed, its receipt and the run record written);
    /// a second one ends the process at once.
    pub fn install(&self) -> Installed {
        let flags = Arc::clone(&self.flags);
        CURRENT.set(&flags);
        let caught = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
            .into_iter()
            .filter(|&sig| signal::catch_if_default(sig, on_signal))
            .collect();
        Installed { flags, caught }
    }
}

pub struct Installed {
    flags: Arc<Flags>,
    /// The signals caught here, given back their default action on drop
    /// (one ignored under nohup, or a handler of the embedding program,
    /// was left alone).
    caught: Vec<i32>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        for &sig in &self.caught {
            signal::set_default(sig);
        }
        CURRENT.clear(&self.flags);
    }
}

/// The handler only touches atomics, signal(2) and raise(3).
extern "C" fn on_signal(sig: i32) {
    if EXIT_SIGNAL.load(Ordering::SeqCst) != 0 {
        // Asked twice: stop waiting for the run to wind down.
        signal::die_of(sig);
    }
    signal_from_handler(sig);
}

fn with_current(f: impl FnOnce(&Flags)) {
    CURRENT.with(f);
}

/// For a signal handler: Ctrl-C at the REPL cancels the turn, nothing more.
/// Async-signal-safe (atomic stores only).
pub fn cancel_from_handler() {
    with_current(|f| f.cancelled.store(true, Ordering::SeqCst));
}

/// For a signal handler: a terminating signal cancels the run, which then
/// ends the way the signal would have (see `exit_signal`). Async-signal-safe.
pub fn signal_from_handler(sig: i32) {
    EXIT_SIGNAL.store(sig, Ordering::SeqCst);
    with_current(|f| {
        f.signal.store(sig, Ordering::SeqCst);
        f.cancelled.store(true, Ordering::SeqCst);
    });
}

/// The signal the process must die of once the run is cleaned up (0: none).
pub fn exit_signal() -> i32 {
    EXIT_SIGNAL.load(Ordering::SeqCst)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn stop_says_cancel_before_timeout_and_reset_clears_it() {
        let c = RunControl::new(Some(Duration::ZERO));
        assert_eq!(c.stop(), Some(Stop::Timeout));
        assert_eq!(
            c.why(Stop::Timeout),
            "the run's --timeout of 0 s was reached"
        );
        c.flags.cancelled.store(true, Ordering::SeqCst);
        assert_eq!(c.stop(), Some(Stop::Cancelled));
        c.reset();
        assert_eq!(c.stop(), Some(Stop::Timeout));
        let free = RunControl::new(None);
        assert_eq!(free.stop(), None);
        let far = Instant::now() + Duration::from_secs(3600);
        assert!(free.until(Duration::from_secs(1)) < far);
        let soon = RunControl::new(Some(Duration::from_millis(5)));
        assert!(soon.until(Duration::from_secs(60)) <= Instant::now() + Duration::from_millis(5));
    }

    #[test]
    fn a_handler_reaches_only_the_installed_control() {
        let a = RunControl::new(None);
        let b = RunControl::new(None);
        cancel_from_handler();
        assert!(!a.cancelled() && !b.cancelled());
        {
            let _g = b.install();
            cancel_from_handler();
        }
        assert!(!a.cancelled() && b.cancelled());
        // Uninstalled: a later signal reaches nobody.
        b.reset();
        cancel_from_handler();
        assert!(!b.cancelled());
    }
}
