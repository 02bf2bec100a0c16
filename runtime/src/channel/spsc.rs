//! The bounded single-producer single-consumer ring under every cross-executor channel.
//!
//! Layout: a power-of-two array of `UnsafeCell<MaybeUninit<T>>` slots, a consumer index
//! `head` and a producer index `tail`, each on its own cache line. Indices grow without
//! bound (wrapping `usize`) and are masked on access, so `tail - head` is the fill level.
//! Each side caches the other side's index and re-reads it only when the cached value
//! says full/empty, so a steady stream costs one shared-line read per batch, not per
//! message.
//!
//! The ring never blocks; wakers live in [`Notify`](super::notify::Notify): the consumer
//! side's notify may be shared by many rings (a mesh receiver), the producer side's room
//! notify belongs to this ring.

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::notify::Notify;

/// Shared state of one ring.
pub(crate) struct Ring<T> {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// Set when the producer handle is dropped.
    pub(crate) tx_closed: AtomicBool,
    /// Set when the consumer handle is dropped.
    pub(crate) rx_closed: AtomicBool,
    /// Wakes the consumer (possibly shared with other rings into the same receiver).
    pub(crate) rx_notify: Arc<Notify>,
    /// Wakes the producer when room appears or the consumer leaves.
    pub(crate) tx_notify: Notify,
}

// SAFETY: the ring moves `T`s from the producer's thread to the consumer's thread, so
// `T: Send` is required and sufficient. Each slot is accessed by exactly one side at a
// time: the producer only writes slots in `[tail, head + cap)` (free), the consumer only
// reads slots in `[head, tail)` (full), and ownership of a slot changes hands only through
// the Release store / Acquire load of `tail` (producer -> consumer) or `head`
// (consumer -> producer). The producer and consumer handles are neither `Clone` nor
// `Sync`, so there is exactly one of each.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: see above; shared access goes only through atomics and the slot protocol.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> Ring<T> {
    /// A ring holding at least `capacity` messages (rounded up to a power of two, min 1).
    pub(crate) fn new(capacity: usize, rx_notify: Arc<Notify>) -> Self {
        let cap = capacity.max(1).next_power_of_two();
        let slots = (0..cap)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        Self {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots,
            mask: cap - 1,
            tx_closed: AtomicBool::new(false),
            rx_closed: AtomicBool::new(false),
            rx_notify,
            tx_notify: Notify::default(),
        }
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.mask + 1
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // Both handles are gone (we hold the last Arc), so no one races us: drop whatever
        // the consumer never took.
        let head = *self.head.get_mut();
        let tail = *self.tail.get_mut();
        for i in head..tail {
            // SAFETY: slots in [head, tail) were written by the producer and not yet read
            // by the consumer, so each holds an initialised `T` that nobody else owns.
            unsafe { (*self.slots[i & self.mask].get()).assume_init_drop() };
        }
    }
}

/// Producer-side view: the only code that writes slots and `tail`.
pub(crate) struct Producer<T> {
    pub(crate) ring: Arc<Ring<T>>,
    /// Our own `tail` (only we write it).
    tail: Cell<usize>,
    /// Last `head` we read; the ring has at least `cap - (tail - head_cache)` free slots.
    head_cache: Cell<usize>,
}

impl<T> Producer<T> {
    pub(crate) fn new(ring: Arc<Ring<T>>) -> Self {
        Self {
            ring,
            tail: Cell::new(0),
            head_cache: Cell::new(0),
        }
    }

    /// Pushes `value`, or hands it back if the ring is full.
    #[inline]
    pub(crate) fn push(&self, value: T) -> Result<(), T> {
        let tail = self.tail.get();
        let cap = self.ring.capacity();
        if tail.wrapping_sub(self.head_cache.get()) >= cap {
            self.head_cache.set(self.ring.head.load(Ordering::Acquire));
            if tail.wrapping_sub(self.head_cache.get()) >= cap {
                return Err(value);
            }
        }
        // SAFETY: `tail - head < cap`, so slot `tail & mask` is free: the consumer has
        // finished with it (its Release store of `head` past it was observed by our Acquire
        // load) and will not touch it until we publish `tail + 1`.
        unsafe { (*self.ring.slots[tail & self.ring.mask].get()).write(value) };
        let next = tail.wrapping_add(1);
        self.tail.set(next);
        self.ring.tail.store(next, Ordering::Release);
        Ok(())
    }

    /// True when no message fits right now (re-reads the consumer index).
    pub(crate) fn is_full(&self) -> bool {
        self.head_cache.set(self.ring.head.load(Ordering::Acquire));
        self.tail.get().wrapping_sub(self.head_cache.get()) >= self.ring.capacity()
    }
}

/// Consumer-side view: the only code that reads slots and writes `head`.
pub(crate) struct Consumer<T> {
    pub(crate) ring: Arc<Ring<T>>,
    head: Cell<usize>,
    tail_cache: Cell<usize>,
}

impl<T> Consumer<T> {
    pub(crate) fn new(ring: Arc<Ring<T>>) -> Self {
        Self {
            ring,
            head: Cell::new(0),
            tail_cache: Cell::new(0),
        }
    }

    /// Pops the oldest message, if any. Does not wake the producer (see `release`).
    #[inline]
    pub(crate) fn pop_quiet(&self) -> Option<T> {
        let head = self.head.get();
        if head == self.tail_cache.get() {
            self.tail_cache.set(self.ring.tail.load(Ordering::Acquire));
            if head == self.tail_cache.get() {
                return None;
            }
        }
        // SAFETY: `head < tail` as published by the producer's Release store of `tail`
        // (observed by our Acquire load), so the slot holds an initialised `T`; the
        // producer will not rewrite it until we publish `head + 1`, and we read it once.
        let value = unsafe { (*self.ring.slots[head & self.ring.mask].get()).assume_init_read() };
        let next = head.wrapping_add(1);
        self.head.set(next);
        self.ring.head.store(next, Ordering::Release);
        Some(value)
    }

    /// Tells a producer waiting for room that room exists. Called once per drained batch.
    #[inline]
    pub(crate) fn release(&self) {
        self.ring.tx_notify.notify();
    }

    /// True when nothing is queued (re-reads the producer index).
    pub(crate) fn is_empty(&self) -> bool {
        self.tail_cache.set(self.ring.tail.load(Ordering::Acquire));
        self.head.get() == self.tail_cache.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_wraps_and_reports_full() {
        let ring = Arc::new(Ring::new(3, Arc::default()));
        assert_eq!(ring.capacity(), 4);
        let p = Producer::new(ring.clone());
        let c = Consumer::new(ring);
        for round in 0..10u32 {
            for i in 0..4 {
                p.push(round * 10 + i).unwrap();
            }
            assert_eq!(p.push(99), Err(99));
            for i in 0..4 {
                assert_eq!(c.pop_quiet(), Some(round * 10 + i));
            }
            assert_eq!(c.pop_quiet(), None);
        }
    }

    #[test]
    fn drops_unread_messages() {
        let marker = Arc::new(());
        let ring = Arc::new(Ring::new(4, Arc::default()));
        let p = Producer::new(ring.clone());
        p.push(marker.clone()).unwrap();
        p.push(marker.clone()).unwrap();
        let c = Consumer::new(ring);
        drop(c.pop_quiet());
        drop((p, c));
        assert_eq!(Arc::strong_count(&marker), 1);
    }
}
