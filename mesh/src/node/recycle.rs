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
//! Spares follow the traffic. [`Recycler::trim`], on the owner's timer, lets go of every
//! spare no one took since its previous round (rounds at least [`ROUND`] apart, whatever
//! wakes the timer): under load the spares in use are taken again
//! and again, once the load stops they are freed within two rounds. And a buffer may leave a
//! block much larger than it needs when its owner says so ([`Recycler::make_room`]'s
//! `leave_above`: a link whose read came after a quiet spell, a publisher after a large
//! message). Without either, one 8 MiB message, once dropped, left 1.7–2× its size held for
//! as long as the node ran (the spares its read grew through, and the block an idle link went
//! on reading small frames into). Large blocks are still reused while large frames keep
//! coming: allocating and faulting in a 1 MiB block per message halved the rate of 1 MiB
//! messages.

use bytes::BytesMut;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The shortest time between two rounds of [`Recycler::trim`]: a spare in steady use is
/// taken again well within it. An owner's timer may wake far more often (a reliable
/// writer's deadlines): rounds that short would free spares a busy link is about to take.
pub(crate) const ROUND: Duration = Duration::from_secs(1);

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
    /// When [`trim`](Self::trim) may run its next round (`None`: at once).
    next_round: Option<Instant>,
    /// Blocks allocated because no spare could be reclaimed (for tests and tuning).
    allocated: u64,
}

/// True when `buf`'s block is larger than `size` and nothing else uses it, or its room alone
/// is larger. A view does not tell its block's size; asking to reclaim more than `size` does:
/// it succeeds exactly then (and reclaims, which changes nothing for a buffer about to be let
/// go, moved out of, or kept free).
fn larger_and_free(buf: &mut BytesMut, size: usize) -> bool {
    buf.try_reclaim(size.saturating_add(1))
}

impl Recycler {
    /// Keeps at most `max` spare blocks.
    pub(crate) fn new(max: usize) -> Recycler {
        Recycler {
            spare: VecDeque::with_capacity(max),
            max,
            next_round: None,
            allocated: 0,
        }
    }

    /// Keeps at most `max` spares from now on (the oldest beyond it are let go now).
    pub(crate) fn set_max(&mut self, max: usize) {
        self.max = max;
        while self.spare.len() > max {
            self.spare.pop_front();
        }
    }

    /// A round, if [`ROUND`] passed since the last: lets go of every spare that is free and
    /// was not taken since the round before (see the [module docs](self)). Cheap: an atomic
    /// load a spare, and nothing at all between rounds.
    pub(crate) fn trim(&mut self, now: Instant) {
        if self.next_round.is_some_and(|t| now < t) {
            return;
        }
        self.next_round = Some(now + ROUND);
        self.spare.retain_mut(|s| {
            let unused = s.seen && s.buf.try_reclaim(1);
            s.seen = true;
            !unused
        });
    }

    /// [`take_within`](Self::take_within) with no limit.
    #[cfg(test)]
    fn take(&mut self, want: usize, block: usize) -> BytesMut {
        self.take_within(want, block, usize::MAX)
    }

    /// An empty buffer with room for at least `want` bytes: the oldest spare if its slices
    /// are all gone, passing over free ones larger than `limit` (left for a busier buffer, or
    /// for the trim), or else a new block of `block` bytes (at least `want`).
    fn take_within(&mut self, want: usize, block: usize, limit: usize) -> BytesMut {
        let mut i = 0;
        while i < self.spare.len().min(SCAN) {
            let b = &mut self.spare[i].buf;
            if limit != usize::MAX && larger_and_free(b, limit) {
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
    /// With `leave_above`, a buffer in a block larger than that, which nothing else uses,
    /// moves to an ordinary one, room or not, when its contents and `want` fit one (see the
    /// [module docs](self)).
    pub(crate) fn make_room(
        &mut self,
        buf: &mut BytesMut,
        want: usize,
        block: usize,
        leave_above: Option<usize>,
    ) {
        let need = buf.len() + want;
        let limit = leave_above.filter(|&l| need <= l && larger_and_free(buf, l));
        if limit.is_none() {
            if buf.capacity() - buf.len() >= want {
                return;
            }
            if buf.try_reclaim(want) {
                return;
            }
        }
        let mut next = self.take_within(need, block, limit.unwrap_or(usize::MAX));
        next.extend_from_slice(buf);
        let old = std::mem::replace(buf, next);
        self.give(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::OnceLock;

    /// The instant of round `k` (rounds [`ROUND`] apart).
    fn round(k: u32) -> Instant {
        static T0: OnceLock<Instant> = OnceLock::new();
        *T0.get_or_init(Instant::now) + ROUND * k
    }

    #[test]
    fn spares_are_capped_in_bytes_of_publisher_blocks_and_a_lower_cap_trims_at_once() {
        use crate::node::publisher::{spare_blocks, SPARE_BYTES};
        // The default batches (32 KiB, four per block) keep what 256 blocks of 16 KiB
        // batches kept.
        assert_eq!(spare_blocks(4 * (32 << 10)) * 4 * (32 << 10), SPARE_BYTES);
        assert_eq!(spare_blocks(4 * (16 << 10)), 256);
        assert_eq!(spare_blocks(4), 256, "batching off: a block per message");
        assert_eq!(spare_blocks(4 * (4 << 20)), 4, "huge batches keep a few");
        let mut r = Recycler::new(8);
        let held: Vec<BytesMut> = (0..8).map(|_| r.take(10, 10)).collect();
        for b in held {
            r.give(b);
        }
        assert_eq!(r.spare.len(), 8);
        r.set_max(3);
        assert_eq!(r.spare.len(), 3);
        let held: Vec<BytesMut> = (0..5).map(|_| r.take(10, 10)).collect();
        for b in held {
            r.give(b);
        }
        assert_eq!(r.spare.len(), 3, "the new cap holds");
    }

    #[test]
    fn a_block_is_reused_once_its_slices_are_gone_and_not_before() {
        let mut r = Recycler::new(2);
        let mut buf = r.take(100, 1000);
        assert_eq!(r.allocated, 1);
        buf.extend_from_slice(&[1; 900]);
        let slice = buf.split_to(900).freeze();
        // Not enough room left: a new block, the old one kept as a spare.
        r.make_room(&mut buf, 500, 1000, None);
        assert_eq!(r.allocated, 2);
        assert!(buf.capacity() >= 500);
        // The spare's slice is alive: it cannot be reclaimed yet, and it is kept (its view
        // still has 100 bytes of room, which must not pass for a free block).
        let other = r.take(500, 1000);
        assert_eq!(r.allocated, 3);
        assert_eq!(r.spare.len(), 1, "the spare in use is kept");
        let first = slice.as_ptr();
        drop(slice);
        let again = r.take(500, 1000);
        assert_eq!(r.allocated, 3, "the first block came back");
        assert_eq!(again.as_ptr(), first, "the first block, from its start");
        assert!(again.capacity() >= 1000);
        drop(other);
    }

    #[test]
    fn make_room_carries_the_partial_frame_over() {
        let mut r = Recycler::new(1);
        let mut buf = r.take(16, 16);
        buf.extend_from_slice(b"0123456789abcdef");
        let head = buf.split_to(10).freeze();
        r.make_room(&mut buf, 64, 64, None);
        assert_eq!(&buf[..], b"abcdef");
        assert!(buf.capacity() - buf.len() >= 64);
        assert_eq!(&head[..], b"0123456789");
    }

    #[test]
    fn a_unique_buffer_is_reclaimed_in_place() {
        let mut r = Recycler::new(1);
        let mut buf = r.take(64, 64);
        buf.extend_from_slice(&[7; 60]);
        drop(buf.split_to(60));
        r.make_room(&mut buf, 64, 64, None);
        assert_eq!(r.allocated, 1, "no new block while the old one is free");
    }

    #[test]
    fn a_free_spare_too_small_is_let_go_instead_of_holding_up_the_others() {
        let mut r = Recycler::new(4);
        let small = r.take(16, 16);
        r.give(small);
        let big = r.take(1000, 1000);
        assert_eq!(r.allocated, 2);
        assert!(r.spare.is_empty(), "the free small block was dropped");
        r.give(big);
        assert!(r.take(1000, 1000).capacity() >= 1000);
        assert_eq!(r.allocated, 2, "the big one came back");
    }

    #[test]
    fn a_free_spare_behind_a_busy_one_is_reused() {
        let mut r = Recycler::new(4);
        let mut busy = r.take(64, 64);
        busy.extend_from_slice(&[1; 64]);
        let held = busy.split().freeze();
        r.give(busy);
        let free = r.take(64, 64);
        r.give(free);
        assert_eq!(r.allocated, 2);
        let again = r.take(64, 64);
        assert_eq!(r.allocated, 2, "the free second spare, not a new block");
        assert!(again.capacity() >= 64);
        drop(held);
    }

    #[test]
    fn spares_are_bounded() {
        let mut r = Recycler::new(2);
        let mut held = Vec::new();
        for _ in 0..5 {
            let mut b = r.take(8, 8);
            b.extend_from_slice(&[0; 8]);
            held.push(b.split().freeze());
            r.give(b);
        }
        assert_eq!(r.spare.len(), 2);
        assert_eq!(r.allocated, 5);
    }

    /// A buffer that grew with a large frame (a block of 4 000), the frame handed on and
    /// still held.
    fn after_a_large_frame(r: &mut Recycler) -> (BytesMut, Bytes) {
        let mut buf = r.take(4000, 4000);
        buf.extend_from_slice(&[3; 3000]);
        let frame = buf.split_to(3000).freeze();
        (buf, frame)
    }

    #[test]
    fn a_buffer_leaves_a_large_block_when_asked_and_what_it_holds_fits_a_small_one() {
        let mut r = Recycler::new(4);
        let (mut buf, frame) = after_a_large_frame(&mut r);
        buf.extend_from_slice(b"part");
        r.make_room(&mut buf, 50, 50, None);
        assert!(
            buf.capacity() >= 900,
            "not asked to: reads on into the large block"
        );
        r.make_room(&mut buf, 50, 50, Some(100));
        assert_eq!(&buf[..], b"part", "the partial frame carried over");
        assert!(buf.capacity() <= 100, "a small block");
        assert_eq!(
            r.spare.len(),
            1,
            "the large block, kept while its frame is held"
        );
        drop(frame);
        r.trim(round(1));
        r.trim(round(2));
        assert!(
            r.spare.is_empty(),
            "let go two rounds after it came back, unused"
        );
    }

    #[test]
    fn a_large_spare_is_passed_over_by_a_buffer_leaving_large_blocks_and_serves_a_large_one() {
        let mut r = Recycler::new(4);
        let (buf, frame) = after_a_large_frame(&mut r);
        drop(frame);
        r.give(buf);
        let n = r.allocated;
        let small = r.take_within(50, 50, 100);
        assert_eq!(r.allocated, n + 1, "a small block asked for: a new one");
        assert!(small.capacity() < 1000);
        let large = r.take(3000, 3000);
        assert_eq!(r.allocated, n + 1, "the large spare serves a large buffer");
        assert!(large.capacity() >= 3000);
    }

    #[test]
    fn spares_follow_the_traffic() {
        let mut r = Recycler::new(8);
        let mut blocks: Vec<BytesMut> = (0..4).map(|_| r.take(64, 64)).collect();
        blocks[0].extend_from_slice(&[1; 64]);
        let held = blocks[0].split().freeze();
        for b in blocks {
            r.give(b);
        }
        r.trim(round(1));
        assert_eq!(r.spare.len(), 4, "given back this round: kept");
        let used = r.take(64, 64);
        r.give(used);
        r.trim(round(2));
        assert_eq!(
            r.spare.len(),
            2,
            "the one in use and the one taken this round stay, the unused go"
        );
        drop(held);
        r.trim(round(3));
        assert!(r.spare.is_empty(), "no traffic for a round: none left");
    }

    #[test]
    fn a_large_frame_in_progress_keeps_its_block() {
        let mut r = Recycler::new(4);
        let mut buf = r.take(4000, 4000);
        buf.extend_from_slice(&[3; 3000]);
        let before = r.allocated;
        r.make_room(&mut buf, 500, 500, Some(100));
        assert_eq!(
            r.allocated, before,
            "the frame still needs the large block's room"
        );
        assert_eq!(buf.len(), 3000);
    }

    #[test]
    fn a_timer_waking_often_trims_no_more_than_once_a_round() {
        let mut r = Recycler::new(4);
        let b = r.take(64, 64);
        r.give(b);
        r.trim(round(1));
        for ms in [1, 10, 500, 999] {
            r.trim(round(1) + Duration::from_millis(ms));
            assert_eq!(r.spare.len(), 1, "{ms} ms after a round: no round yet");
        }
        r.trim(round(2));
        assert!(r.spare.is_empty(), "a round later: unused, let go");
    }
}
