//! Reuse of buffer blocks whose slices travel to other threads.
//!
//! **Owns:** reuse of read buffer blocks once the application dropped every slice. **Must not
//! touch:** reading.
//!
//! A shard reads into a block and hands slices of it (message payloads) to the application;
//! a batching publisher fills a block and hands slices of it (batches) to a shard. The block
//! is freed by whichever thread drops its last slice, usually not the one that allocated it.
//! With glibc's allocator that pattern is expensive: the free goes back to the allocating
//! thread's arena, which then trims the memory above its top chunk (`madvise`), so the next
//! block allocated there is page-faulted and zeroed in again. At 1 KiB messages that churn
//! took ~10 % of the CPU (page faults, `clear_page`, unmapping on the dropping thread).
//!
//! A [`Recycler`] keeps the blocks it handed out instead, in the order they were given
//! back: slices are mostly consumed in order (a link's queue, the event queue), so the oldest
//! spares are the first to have no slice left, and once one has none
//! [`BytesMut::try_reclaim`] takes it back whole; the dropping thread only ever decrements a
//! reference count. A block is allocated only when none of the oldest spares is free, so in
//! steady state the spares are about as many as the blocks in flight, which the queue bounds
//! already limit; `max` caps them besides (beyond it the oldest spare is let go and freed
//! normally).
//!
//! A block larger than `max_block` is large: made for one large frame (a read growing with
//! the frame, a large message published). Large blocks are reused while large frames keep
//! coming (allocating and faulting in a 1 MiB block per message halved the rate of 1 MiB
//! messages), but they must not outlive the traffic that needed them: an 8 MiB message, once
//! dropped, left 1.7–2× its size held for as long as the node ran (spares, and the block an
//! idle link went on reading small frames into). So a buffer in a large block leaves it when
//! its owner says it may (a link whose read came after a quiet spell) and what it holds fits
//! an ordinary block, taking an ordinary one; and [`Recycler::trim`], on the owner's timer,
//! lets go of large spares no one took since the trim before.

use bytes::BytesMut;
use std::collections::VecDeque;

/// Spares [`Recycler::take`] looks at, oldest first. Slices are mostly released in order, but
/// not always (a relayed payload waits on another link's queue, a slow receiver holds one
/// batch): looking past a front that is still in use keeps free blocks from piling up behind
/// it. Each look is one atomic load.
const SCAN: usize = 16;

/// A spare block, and whether a [`Recycler::trim`] has passed since it came back.
#[derive(Debug)]
struct Spare {
    buf: BytesMut,
    seen: bool,
}

/// A bounded set of spare blocks (see the [module docs](self)). Single-threaded.
#[derive(Debug)]
pub(crate) struct Recycler {
    spare: VecDeque<Spare>,
    max: usize,
    /// Blocks larger than this are large (see the [module docs](self)).
    max_block: usize,
    /// Blocks allocated because no spare could be reclaimed (for tests and tuning).
    allocated: u64,
}

impl Recycler {
    /// Keeps at most `max` spare blocks; those larger than `max_block` bytes are large.
    pub(crate) fn new(max: usize, max_block: usize) -> Recycler {
        Recycler {
            spare: VecDeque::with_capacity(max),
            max,
            max_block,
            allocated: 0,
        }
    }

    /// [`new`](Self::new)'s limits from now on (the oldest spares beyond `max` are let go
    /// now).
    pub(crate) fn set_limits(&mut self, max: usize, max_block: usize) {
        self.max = max;
        self.max_block = max_block;
        while self.spare.len() > max {
            self.spare.pop_front();
        }
    }

    /// True when `buf`'s block is larger than `max_block` and nothing else uses it, or its
    /// room alone is larger. A view does not tell its block's size; asking to reclaim more
    /// than `max_block` does: it succeeds exactly then (and reclaims, which changes nothing
    /// for a buffer about to be let go or moved out of).
    fn large_and_free(buf: &mut BytesMut, max_block: usize) -> bool {
        buf.try_reclaim(max_block.saturating_add(1))
    }

    /// Lets go of every large spare that is free and was not taken since the trim before:
    /// reused while large frames keep coming, freed within two periods of the owner's timer
    /// once they stop. Cheap (an atomic load a spare).
    pub(crate) fn trim(&mut self) {
        let max_block = self.max_block;
        self.spare.retain_mut(|s| {
            let idle = s.seen && Self::large_and_free(&mut s.buf, max_block);
            s.seen = true;
            !idle
        });
    }

    /// An empty buffer with room for at least `want` bytes: the oldest spare whose slices
    /// are all gone (not a large one if `ordinary`), or else a new block of `block` bytes (at
    /// least `want`).
    pub(crate) fn take(&mut self, want: usize, block: usize, ordinary: bool) -> BytesMut {
        let mut i = 0;
        while i < self.spare.len().min(SCAN) {
            let b = &mut self.spare[i].buf;
            if ordinary && Self::large_and_free(b, self.max_block) {
                // Left for a busy reader, or for the trim.
                i += 1;
                continue;
            }
            if b.try_reclaim(want) {
                return self.spare.remove(i).expect("index in range").buf;
            }
            if b.try_reclaim(1) {
                // Free (it could take one byte back) but too small for `want`, a larger read
                // or frame than usual: let it go rather than keep it.
                self.spare.remove(i);
                continue;
            }
            i += 1;
        }
        self.allocated += 1;
        BytesMut::with_capacity(block.max(want))
    }

    /// Keeps `old` (cleared; its slices may still be in use) to be reclaimed later; beyond
    /// `max` spares the oldest is let go.
    pub(crate) fn give(&mut self, mut old: BytesMut) {
        if self.max == 0 {
            return;
        }
        old.clear();
        // Kept as a view with no room: `try_reclaim` then always asks whether the block is
        // free. A view with room left answers "yes" to a small request without looking, so
        // blocks still in flight were taken for free ones that were too small and let go:
        // nearly every block was allocated anew and freed by the thread that dropped its
        // last slice, the churn this type exists to avoid (spares stayed at 1 or 2).
        drop(old.split_off(0));
        if self.spare.len() == self.max {
            self.spare.pop_front();
        }
        self.spare.push_back(Spare {
            buf: old,
            seen: false,
        });
    }

    /// Replaces `buf` by a buffer with room for `want` more bytes that holds `buf`'s
    /// contents (a partial frame, typically): `buf` itself when it has that room, otherwise
    /// a reclaimed or new block, `buf`'s old block kept as a spare.
    ///
    /// With `may_leave`, a buffer in a large block that nothing else uses moves to an ordinary
    /// one, room or not, when its contents and `want` fit one.
    pub(crate) fn make_room(
        &mut self,
        buf: &mut BytesMut,
        want: usize,
        block: usize,
        may_leave: bool,
    ) {
        let need = buf.len() + want;
        let leave =
            may_leave && need <= self.max_block && Self::large_and_free(buf, self.max_block);
        if !leave {
            if buf.capacity() - buf.len() >= want {
                return;
            }
            if buf.try_reclaim(want) {
                return;
            }
        }
        let mut next = self.take(need, block, leave);
        next.extend_from_slice(buf);
        let old = std::mem::replace(buf, next);
        self.give(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn spares_are_capped_in_bytes_of_publisher_blocks_and_a_lower_cap_trims_at_once() {
        use crate::node::publisher::{spare_blocks, SPARE_BYTES};
        // The default batches (32 KiB, four per block) keep what 256 blocks of 16 KiB
        // batches kept.
        assert_eq!(spare_blocks(4 * (32 << 10)) * 4 * (32 << 10), SPARE_BYTES);
        assert_eq!(spare_blocks(4 * (16 << 10)), 256);
        assert_eq!(spare_blocks(4), 256, "batching off: a block per message");
        assert_eq!(spare_blocks(4 * (4 << 20)), 4, "huge batches keep a few");
        let mut r = Recycler::new(8, usize::MAX);
        let held: Vec<BytesMut> = (0..8).map(|_| r.take(10, 10, false)).collect();
        for b in held {
            r.give(b);
        }
        assert_eq!(r.spare.len(), 8);
        r.set_limits(3, usize::MAX);
        assert_eq!(r.spare.len(), 3);
        let held: Vec<BytesMut> = (0..5).map(|_| r.take(10, 10, false)).collect();
        for b in held {
            r.give(b);
        }
        assert_eq!(r.spare.len(), 3, "the new cap holds");
    }

    #[test]
    fn a_block_is_reused_once_its_slices_are_gone_and_not_before() {
        let mut r = Recycler::new(2, usize::MAX);
        let mut buf = r.take(100, 1000, false);
        assert_eq!(r.allocated, 1);
        buf.extend_from_slice(&[1; 900]);
        let slice = buf.split_to(900).freeze();
        // Not enough room left: a new block, the old one kept as a spare.
        r.make_room(&mut buf, 500, 1000, false);
        assert_eq!(r.allocated, 2);
        assert!(buf.capacity() >= 500);
        // The spare's slice is alive: it cannot be reclaimed yet, and it is kept (its view
        // still has 100 bytes of room, which must not pass for a free block).
        let other = r.take(500, 1000, false);
        assert_eq!(r.allocated, 3);
        assert_eq!(r.spare.len(), 1, "the spare in use is kept");
        let first = slice.as_ptr();
        drop(slice);
        let again = r.take(500, 1000, false);
        assert_eq!(r.allocated, 3, "the first block came back");
        assert_eq!(again.as_ptr(), first, "the first block, from its start");
        assert!(again.capacity() >= 1000);
        drop(other);
    }

    #[test]
    fn make_room_carries_the_partial_frame_over() {
        let mut r = Recycler::new(1, usize::MAX);
        let mut buf = r.take(16, 16, false);
        buf.extend_from_slice(b"0123456789abcdef");
        let head = buf.split_to(10).freeze();
        r.make_room(&mut buf, 64, 64, false);
        assert_eq!(&buf[..], b"abcdef");
        assert!(buf.capacity() - buf.len() >= 64);
        assert_eq!(&head[..], b"0123456789");
    }

    #[test]
    fn a_unique_buffer_is_reclaimed_in_place() {
        let mut r = Recycler::new(1, usize::MAX);
        let mut buf = r.take(64, 64, false);
        buf.extend_from_slice(&[7; 60]);
        drop(buf.split_to(60));
        r.make_room(&mut buf, 64, 64, false);
        assert_eq!(r.allocated, 1, "no new block while the old one is free");
    }

    #[test]
    fn a_free_spare_too_small_is_let_go_instead_of_holding_up_the_others() {
        let mut r = Recycler::new(4, usize::MAX);
        let small = r.take(16, 16, false);
        r.give(small);
        let big = r.take(1000, 1000, false);
        assert_eq!(r.allocated, 2);
        assert!(r.spare.is_empty(), "the free small block was dropped");
        r.give(big);
        assert!(r.take(1000, 1000, false).capacity() >= 1000);
        assert_eq!(r.allocated, 2, "the big one came back");
    }

    #[test]
    fn a_free_spare_behind_a_busy_one_is_reused() {
        let mut r = Recycler::new(4, usize::MAX);
        let mut busy = r.take(64, 64, false);
        busy.extend_from_slice(&[1; 64]);
        let held = busy.split().freeze();
        r.give(busy);
        let free = r.take(64, 64, false);
        r.give(free);
        assert_eq!(r.allocated, 2);
        let again = r.take(64, 64, false);
        assert_eq!(r.allocated, 2, "the free second spare, not a new block");
        assert!(again.capacity() >= 64);
        drop(held);
    }

    #[test]
    fn spares_are_bounded() {
        let mut r = Recycler::new(2, usize::MAX);
        let mut held = Vec::new();
        for _ in 0..5 {
            let mut b = r.take(8, 8, false);
            b.extend_from_slice(&[0; 8]);
            held.push(b.split().freeze());
            r.give(b);
        }
        assert_eq!(r.spare.len(), 2);
        assert_eq!(r.allocated, 5);
    }

    /// A buffer that grew with a large frame (a block of 4 000 where blocks are 100 at most),
    /// the frame handed on and still held.
    fn after_a_large_frame(r: &mut Recycler) -> (BytesMut, Bytes) {
        let mut buf = r.take(4000, 4000, false);
        buf.extend_from_slice(&[3; 3000]);
        let frame = buf.split_to(3000).freeze();
        (buf, frame)
    }

    #[test]
    fn a_buffer_leaves_a_large_block_when_allowed_and_what_it_holds_fits_an_ordinary_one() {
        let mut r = Recycler::new(4, 100);
        let (mut buf, frame) = after_a_large_frame(&mut r);
        buf.extend_from_slice(b"part");
        r.make_room(&mut buf, 50, 50, false);
        assert!(
            buf.capacity() >= 900,
            "not allowed to: reads on into the large block"
        );
        r.make_room(&mut buf, 50, 50, true);
        assert_eq!(&buf[..], b"part", "the partial frame carried over");
        assert!(buf.capacity() <= 100, "an ordinary block");
        assert_eq!(
            r.spare.len(),
            1,
            "the large block, kept while its frame is held"
        );
        drop(frame);
        r.trim();
        r.trim();
        assert!(
            r.spare.is_empty(),
            "let go two trims after it came back, unused"
        );
    }

    #[test]
    fn a_large_spare_serves_large_frames_only_and_goes_once_unused_for_a_trim() {
        let mut r = Recycler::new(4, 100);
        let (buf, frame) = after_a_large_frame(&mut r);
        drop(frame);
        r.give(buf);
        let n = r.allocated;
        let small = r.take(50, 50, true);
        assert_eq!(r.allocated, n + 1, "an ordinary block asked for: a new one");
        assert!(small.capacity() < 1000);
        assert_eq!(r.spare.len(), 1);
        r.trim();
        let large = r.take(3000, 3000, false);
        assert_eq!(r.allocated, n + 1, "the large spare serves a large frame");
        assert!(large.capacity() >= 3000);
        r.give(large);
        r.trim();
        assert_eq!(r.spare.len(), 1, "used since the last trim: kept");
        r.trim();
        assert!(r.spare.is_empty(), "unused for a whole trim period: let go");
    }

    #[test]
    fn a_large_frame_in_progress_keeps_its_block() {
        let mut r = Recycler::new(4, 100);
        let mut buf = r.take(4000, 4000, false);
        buf.extend_from_slice(&[3; 3000]);
        let before = r.allocated;
        r.make_room(&mut buf, 500, 500, true);
        assert_eq!(
            r.allocated, before,
            "the frame still needs the large block's room"
        );
        assert_eq!(buf.len(), 3000);
    }
}
