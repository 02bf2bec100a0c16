//! Giving the executor back: a task that always finds its input ready never returns
//! `Pending` on its own, and on a single-threaded executor it then starves every other task
//! of its thread until its input runs dry.
//!
//! **Owns:** [`YieldNow`]. **Must not touch:** when to yield (each loop decides).

/// Returns `Pending` once (after waking itself), so the executor runs its other tasks.
pub(crate) struct YieldNow(pub(crate) bool);

impl std::future::Future for YieldNow {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}
