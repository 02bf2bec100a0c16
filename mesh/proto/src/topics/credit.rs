//! A reliable keep-all writer's write credit: the highest sequence number its application
//! may write now, shared between the writer's handle (which waits on it) and the shard that
//! keeps the writer's history (which moves it as readers acknowledge).
//!
//! **Owns:** the credit value and its wake-ups. **Must not touch:** how the limit is
//! computed (the shard's reliable writer) or how long a write waits (the handle).
//!
//! The limit is a sequence number, not a count of free places: the handle numbers samples
//! itself and hands them over in batches, so samples it wrote but the shard has not seen yet
//! are covered without either side counting them twice.

use event_listener::{Event, EventListener};
use std::sync::atomic::{AtomicU64, Ordering};

/// See the [module docs](self).
#[derive(Debug)]
pub struct WriterCredit {
    /// The highest sequence number that may be written (`u64::MAX`: no bound).
    limit: AtomicU64,
    raised: Event,
}

impl Default for WriterCredit {
    fn default() -> Self {
        WriterCredit::new()
    }
}

impl WriterCredit {
    /// A credit with no bound yet (no reliable reader matched: nothing to wait for).
    pub fn new() -> WriterCredit {
        WriterCredit {
            limit: AtomicU64::new(u64::MAX),
            raised: Event::new(),
        }
    }

    /// The highest sequence number that may be written now.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// True when sample `seq` may be written now.
    #[inline]
    pub fn allows(&self, seq: u64) -> bool {
        seq <= self.limit()
    }

    /// Sets the limit (it may fall: a new reader joined); wakes the waiting writer when it
    /// rose.
    pub fn set(&self, limit: u64) {
        // Called after every batch the shard takes in: a write only when the value moves, so
        // the line the writer's thread reads per sample is not taken from it each time.
        if self.limit.load(Ordering::Relaxed) == limit {
            return;
        }
        let old = self.limit.swap(limit, Ordering::AcqRel);
        if limit > old {
            self.raised.notify(usize::MAX);
        }
    }

    /// A listener woken by the next rise; register it, then check [`allows`](Self::allows)
    /// again before waiting on it (a rise in between is not missed).
    pub fn listen(&self) -> EventListener {
        self.raised.listen()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_listener::Listener;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_rise_wakes_a_listener_registered_before_it() {
        let c = Arc::new(WriterCredit::new());
        assert!(c.allows(u64::MAX));
        c.set(5);
        assert!(c.allows(5) && !c.allows(6));
        let l = c.listen();
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.set(9));
        assert!(l.wait_timeout(Duration::from_secs(20)).is_some());
        t.join().unwrap();
        assert!(c.allows(9));
    }
}
