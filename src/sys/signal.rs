//! Signal dispositions, and a value a handler may read.
//!
//! rustix has no signal(2) or sigaction(2), so these are `libc`. A
//! [`Handler`] runs on whichever thread the kernel picks, at any point of
//! it: it may only touch atomics and call functions documented here (or
//! elsewhere in `sys`) as async-signal-safe.

use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// A signal handler: async-signal-safe calls only.
pub type Handler = extern "C" fn(i32);

/// Makes `handler` catch `sig` (signal(2): restarting, the signal blocked
/// while it runs).
pub fn catch(sig: i32, handler: Handler) {
    // SAFETY: installs a plain one-argument handler; what the handler does
    // is its own contract (see `Handler`).
    unsafe { libc::signal(sig, handler as libc::sighandler_t) };
}

/// Makes `handler` catch `sig` if it has the default action now; leaves
/// it alone (ignored under nohup, a handler of the embedding program)
/// otherwise. Whether it was caught: the caller puts the default back with
/// [`set_default`] when it is done.
pub fn catch_if_default(sig: i32, handler: Handler) -> bool {
    // SAFETY: as in `catch`.
    let prev = unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    if prev == libc::SIG_DFL {
        return true;
    }
    // SAFETY: puts back the disposition that was there.
    unsafe { libc::signal(sig, prev) };
    false
}

/// Gives `sig` its default action again. Async-signal-safe.
pub fn set_default(sig: i32) {
    // SAFETY: setting the default disposition has no preconditions.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// raise(3): sends `sig` to the calling thread. Async-signal-safe.
pub fn raise(sig: i32) {
    // SAFETY: raise takes an integer and only sends a signal.
    unsafe { libc::raise(sig) };
}

/// Gives `sig` its default action and raises it: the process dies of it,
/// at once or, inside that signal's own handler (where it is blocked), as
/// the handler returns. Async-signal-safe.
pub fn die_of(sig: i32) {
    set_default(sig);
    raise(sig);
}

/// SIGPIPE blocked in the calling thread while this lives: a write to a
/// pipe a child closed fails with EPIPE here instead of killing latchclaw
/// (SIGPIPE keeps its default action for stdout, `main.rs`, and a broken
/// pipe's signal goes to the thread that wrote). On drop a SIGPIPE the
/// writes left pending is taken and the thread's mask put back.
pub struct QuietPipes {
    /// SIGPIPE was blocked already (nothing to put back).
    was_blocked: bool,
}

fn sigpipe_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set it is given; sigaddset adds a
    // valid signal number to it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        set
    }
}

impl QuietPipes {
    pub fn new() -> QuietPipes {
        let set = sigpipe_set();
        // SAFETY: pthread_sigmask reads `set` and writes the old mask into
        // `old`, both live on this frame.
        let was_blocked = unsafe {
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            libc::sigismember(&old, libc::SIGPIPE) == 1
        };
        QuietPipes { was_blocked }
    }

    /// For a thread that only writes to a child: blocked for its life (a
    /// pending SIGPIPE goes with the thread).
    pub fn for_this_thread() {
        std::mem::forget(QuietPipes::new());
    }
}

impl Default for QuietPipes {
    fn default() -> QuietPipes {
        QuietPipes::new()
    }
}

impl Drop for QuietPipes {
    fn drop(&mut self) {
        if self.was_blocked {
            return;
        }
        let set = sigpipe_set();
        // SAFETY: takes a pending SIGPIPE of this thread without waiting
        // (zero timeout), then unblocks it; both read `set` on this frame.
        unsafe {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

/// A value signal handlers reach while its owner has it [`set`](Self::set):
/// an atomic pointer to a shared `T`, and a count of the handlers reading
/// it, so that [`clear`](Self::clear) lets go of the value only once no
/// handler on another thread can still be looking at it.
pub struct Shared<T> {
    ptr: AtomicPtr<T>,
    readers: AtomicUsize,
}

impl<T: Send + Sync> Shared<T> {
    pub const fn new() -> Self {
        Shared {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            readers: AtomicUsize::new(0),
        }
    }

    /// Makes `value` the one handlers see (it keeps a reference of its own)
    /// until it is cleared or another is set.
    pub fn set(&self, value: &Arc<T>) {
        let new = Arc::into_raw(Arc::clone(value)).cast_mut();
        let old = self.ptr.swap(new, Ordering::SeqCst);
        self.release(old);
    }

    /// Handlers no longer see `value`, if it is still the one set.
    pub fn clear(&self, value: &Arc<T>) {
        let mine = Arc::as_ptr(value).cast_mut();
        if self
            .ptr
            .compare_exchange(
                mine,
                std::ptr::null_mut(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            self.release(mine);
        }
    }

    /// Drops the reference `set` took for `old`, once no handler reads it.
    fn release(&self, old: *mut T) {
        if old.is_null() {
            return;
        }
        // A handler that loaded `old` counted itself in before the swap
        // that removed it (both SeqCst): wait for it to finish.
        while self.readers.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
        // SAFETY: `old` came from `Arc::into_raw` in `set` and was taken out
        // of `ptr` exactly once (by the swap or compare_exchange); no
        // handler holds it any more (above), so this gives back the
        // reference `set` kept.
        drop(unsafe { Arc::from_raw(old) });
    }

    /// Calls `f` with the value set, if one is. Async-signal-safe (atomics
    /// only) when `f` is.
    pub fn with(&self, f: impl FnOnce(&T)) {
        self.readers.fetch_add(1, Ordering::SeqCst);
        let p = self.ptr.load(Ordering::SeqCst);
        // SAFETY: a non-null `p` holds the reference `set` kept, which
        // `release` gives back only after `readers` drops to zero, and this
        // reader is counted until after its last use of `p`.
        if let Some(value) = unsafe { p.as_ref() } {
            f(value);
        }
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<T: Send + Sync> Default for Shared<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_shared_value_is_seen_while_set_and_let_go_when_cleared() {
        static SLOT: Shared<AtomicBool> = Shared::new();
        let a = Arc::new(AtomicBool::new(false));
        let b = Arc::new(AtomicBool::new(false));
        SLOT.with(|v| v.store(true, Ordering::SeqCst));
        SLOT.set(&a);
        assert_eq!(Arc::strong_count(&a), 2);
        SLOT.with(|v| v.store(true, Ordering::SeqCst));
        assert!(a.load(Ordering::SeqCst));
        // Not the one set: nothing changes.
        SLOT.clear(&b);
        assert_eq!(Arc::strong_count(&a), 2);
        SLOT.set(&b);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 2));
        SLOT.clear(&b);
        assert_eq!(Arc::strong_count(&b), 1);
        SLOT.with(|v| v.store(true, Ordering::SeqCst));
        assert!(!b.load(Ordering::SeqCst));
    }
}
