//! A deadline future that works under any executor (the application's async writes may run
//! on tokio, async-std or Shoal's own runtime): one process-wide timer thread wakes the
//! futures whose deadline passed.
//!
//! **Owns:** the timer thread and its heap of wake-ups. **Must not touch:** what waits
//! (the writer's credit wait races it).
//!
//! The thread starts with the first deadline that has to wait and sleeps while nothing is
//! due; a wake-up is one heap entry, dropped once fired (a future dropped before its deadline
//! leaves its entry until then: bounded by the writes waiting at once).

use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

struct Entry(Instant, Waker);

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Earliest first out of the max-heap.
        o.0.cmp(&self.0)
    }
}

fn timer() -> &'static Mutex<mpsc::Sender<Entry>> {
    static TX: OnceLock<Mutex<mpsc::Sender<Entry>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Entry>();
        std::thread::Builder::new()
            .name("shoal-deadline".into())
            .spawn(move || run(rx))
            .expect("spawn the deadline thread");
        Mutex::new(tx)
    })
}

fn run(rx: mpsc::Receiver<Entry>) {
    let mut heap: BinaryHeap<Entry> = BinaryHeap::new();
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|e| e.0 <= now) {
            heap.pop().expect("peeked").1.wake();
        }
        let got = match heap.peek() {
            Some(e) => rx.recv_timeout(e.0.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(e) => heap.push(e),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Completes at `at` (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Deadline {
    at: Instant,
    armed: bool,
}

impl Deadline {
    pub(crate) fn new(at: Instant) -> Deadline {
        Deadline { at, armed: false }
    }
}

impl Future for Deadline {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        if !self.armed {
            self.armed = true;
            let tx = timer().lock().unwrap_or_else(|e| e.into_inner());
            // The thread never exits while the sender lives (a static).
            let _ = tx.send(Entry(self.at, cx.waker().clone()));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;
    use std::time::Duration;

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    #[test]
    fn completes_after_its_deadline_and_not_before() {
        let at = Instant::now() + Duration::from_millis(30);
        let mut f = std::pin::pin!(Deadline::new(at));
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut polls = 0;
        while f.as_mut().poll(&mut cx).is_pending() {
            polls += 1;
            assert!(Instant::now() < at, "pending after its deadline");
            // Woken by the timer thread (a spurious unpark only costs another poll).
            std::thread::park();
        }
        assert!(Instant::now() >= at && polls >= 1);
    }
}
