//! Waking a task from a thread that may be unwinding from a panic.
//!
//! compio aborts the process when one of its task wakers is woken on a thread that is
//! panicking (its remote-schedule path has an abort-on-panic guard). Wakes happen in `Drop`
//! impls, and those run during exactly such unwinds: a task panics and its channel ends
//! drop, or an application thread panics and drops a node or one of its handles.
//!
//! **Owns:** the two ways around that quirk: [`wake_or_defer`] for a bare wake on a hot path
//! (the channels' notify: parked, delivered by [`flush_deferred_wakes`] once the unwind was
//! caught), and [`outside_unwind`] for work that wakes tasks and may wait on them (handing
//! over to or stopping an executor), run on a helper thread while unwinding.
//! **Must not touch:** what the wakes are for: it runs closures and wakes wakers.

use std::cell::RefCell;
use std::task::Waker;

/// Runs `f` now on this thread, or, if this thread is unwinding from a panic, on a helper
/// thread that is not (and waits for it): `f` may then wake tasks of any executor and wait
/// for them to answer. Call it for work that `Drop` does and that reaches an executor (a
/// hand-over, a command, a shutdown).
///
/// `None` only while unwinding, when the helper could not be started or `f` panicked on it
/// (this thread cannot panic again without aborting): the caller counts what was not done.
/// Outside an unwind a panic in `f` propagates as usual.
pub fn outside_unwind<R: Send>(f: impl FnOnce() -> R + Send) -> Option<R> {
    if !std::thread::panicking() {
        return Some(f());
    }
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("shoal-unwind-helper".into())
            .spawn_scoped(s, f);
        match helper {
            Ok(h) => h.join().ok(),
            Err(err) => {
                tracing::warn!(%err, "no helper thread for work dropped during a panic");
                None
            }
        }
    })
}

/// Wakers whose wake had to wait until this thread stopped unwinding.
struct Deferred(RefCell<Vec<Waker>>);

impl Drop for Deferred {
    fn drop(&mut self) {
        for w in self.0.get_mut().drain(..) {
            w.wake();
        }
    }
}

thread_local! {
    static DEFERRED: Deferred = const { Deferred(RefCell::new(Vec::new())) };
}

/// Wakes `w`, unless this thread is unwinding from a panic: then the wake is parked in a
/// thread-local list and delivered by [`flush_deferred_wakes`] once the unwind was caught (an
/// executor catches its tasks' panics), or when the thread exits. Costs one thread-local
/// check, so channel notifies can call it on every wake.
pub(crate) fn wake_or_defer(w: Waker) {
    if !std::thread::panicking() {
        w.wake();
        return;
    }
    if let Err(err) = DEFERRED.try_with(|d| d.0.borrow_mut().push(w.clone())) {
        // Thread-local storage is being torn down: hand the wake to a thread that is not
        // panicking.
        tracing::debug!(%err, "waking on a helper thread");
        outside_unwind(|| w.wake());
    }
}

/// Delivers wakes deferred by [`wake_or_defer`]; call after a caught panic.
pub(crate) fn flush_deferred_wakes() {
    let pending = DEFERRED.try_with(|d| std::mem::take(&mut *d.0.borrow_mut()));
    for w in pending.into_iter().flatten() {
        w.wake();
    }
}
