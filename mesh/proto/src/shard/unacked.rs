//! What a link's kernel holds of the messages written to it: a write returns once the kernel
//! took the bytes, and a link that then closes abruptly (its path dead past the heartbeat
//! timeout, the peer reset, a write failed) loses what its peer had not acknowledged
//! without the queue here knowing. The ledger keeps, per write, where in the link's byte
//! stream it ended and how many messages it carried, until the peer's acknowledgements
//! pass it; what is left when the link closes is counted (`unacked_link_closed`).
//!
//! The peer's acknowledgements come from the kernel (`tcpi_bytes_acked`), sampled by the
//! link's driver: before the first write, by its writer at most every
//! [`crate::budget::SEND_QUEUE_SAMPLE`], its timer whenever it fires, its reader and writer
//! once more when the connection fails. The ledger is the link's one record of that count:
//! whether it grew since the last look is what keeps a silent link that still delivers
//! (`Link::on_delivered`). The count covers the whole connection (its opening and the
//! handshake's bytes too), so the driver first says where this shard's writes begin
//! ([`Ledger::start`]); without that (a kernel that does not count acknowledged bytes, a
//! probe that failed) the ledger keeps no writes and counts nothing.
//!
//! A write acknowledged in part counts whole, so the count may include a message the peer
//! received; a connection closed without a reset may still deliver some of it as it goes.
//! The count is an upper bound of what the close lost, never less.
//!
//! **Owns:** one link's count of bytes acknowledged and the ledger of its writes. **Must
//! not touch:** the link's queue or the writes themselves (`write`), or when a link closes
//! (`links`).

use std::collections::VecDeque;

/// Writes the ledger keeps apart at most; past this, neighbouring writes are merged two by
/// two (the count is then coarser at the edge, never short). A link whose kernel buffer holds
/// megabytes of small writes would otherwise keep an entry for each.
pub(super) const LEDGER_ENTRIES: usize = 1024;

/// One link's writes its peer has not acknowledged yet.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// The kernel's count of bytes acknowledged at the last look (0 before the first).
    seen: u64,
    /// Where this shard's writes begin in what the kernel counts as acknowledged (its opening
    /// and the handshake's bytes before them); `None`: not known, nothing is kept.
    base: Option<u64>,
    /// Bytes this shard wrote to the link.
    written: u64,
    /// Of those, the bytes the peer acknowledged as of the last sample.
    acked: u64,
    /// `(end, messages)` of each write not acknowledged whole yet, oldest first: `end` is
    /// `written` after it.
    writes: VecDeque<(u64, u64)>,
}

impl Ledger {
    /// The driver read the connection before this shard's first write: the kernel counted
    /// `bytes_acked` acknowledged (the opening as one) and held `send_queue` bytes unacknowledged.
    /// A connection whose opening counts nothing is on a kernel that does not count
    /// acknowledged bytes: the ledger stays off.
    pub(super) fn start(&mut self, bytes_acked: u64, send_queue: u64) {
        self.seen = self.seen.max(bytes_acked);
        if bytes_acked > 0 && self.written == 0 {
            self.base = Some(bytes_acked + send_queue);
        }
    }

    /// A write of `bytes` carrying `messages` went to the kernel.
    pub(super) fn on_written(&mut self, bytes: usize, messages: u64) {
        if self.base.is_none() {
            return;
        }
        self.written += bytes as u64;
        if messages == 0 {
            return;
        }
        if self.writes.len() >= LEDGER_ENTRIES {
            self.coarsen();
        }
        self.writes.push_back((self.written, messages));
    }

    /// The kernel said the peer acknowledged `bytes_acked` bytes of the connection; true if
    /// that grew since an earlier look (the first look is only a baseline: what was
    /// acknowledged before it may be long ago).
    pub(super) fn on_acked(&mut self, bytes_acked: u64) -> bool {
        let grew = self.seen != 0 && bytes_acked > self.seen;
        self.seen = self.seen.max(bytes_acked);
        let Some(base) = self.base else {
            return grew;
        };
        let acked = bytes_acked.saturating_sub(base).min(self.written);
        if acked > self.acked {
            self.acked = acked;
            while self.writes.front().is_some_and(|&(end, _)| end <= acked) {
                self.writes.pop_front();
            }
        }
        grew
    }

    /// Messages written whose bytes the peer has not all acknowledged.
    pub(super) fn unacked(&self) -> u64 {
        self.writes.iter().map(|&(_, m)| m).sum()
    }

    /// Merges neighbouring writes two by two (each pair ends where its later one did).
    fn coarsen(&mut self) {
        let old = std::mem::take(&mut self.writes);
        let mut pairs = old.into_iter();
        while let Some((first_end, m)) = pairs.next() {
            match pairs.next() {
                Some((end, n)) => self.writes.push_back((end, m + n)),
                None => self.writes.push_back((first_end, m)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_leave_the_ledger_once_the_peer_acknowledged_all_their_bytes() {
        let mut l = Ledger::default();
        // The opening (1) and a 40-byte handshake acknowledged, 10 bytes of it not yet.
        l.start(31, 10);
        l.on_written(100, 3);
        l.on_written(20, 0); // a heartbeat: bytes, no message
        l.on_written(100, 5);
        assert_eq!(l.unacked(), 8);
        // The handshake's last 10 and 99 of the first write: it stays, whole.
        l.on_acked(41 + 99);
        assert_eq!(l.unacked(), 8);
        l.on_acked(41 + 100);
        assert_eq!(l.unacked(), 5);
        // A sample older than the last one changes nothing.
        l.on_acked(41);
        assert_eq!(l.unacked(), 5);
        l.on_acked(41 + 219);
        assert_eq!(l.unacked(), 5, "one byte short");
        l.on_acked(41 + 220);
        assert_eq!(l.unacked(), 0);
        // Acknowledged beyond what this shard wrote (a Goodbye's FIN): nothing breaks.
        l.on_acked(1 << 40);
        l.on_written(10, 1);
        assert_eq!(l.unacked(), 1);
    }

    #[test]
    fn growth_counts_from_the_first_look_on_whatever_the_ledger_keeps() {
        let mut l = Ledger::default();
        assert!(!l.on_acked(500), "the first look is a baseline");
        assert!(!l.on_acked(500));
        assert!(l.on_acked(520), "without a start too");
        assert!(!l.on_acked(510), "an older sample");
        let mut started = Ledger::default();
        started.start(61, 0);
        assert!(started.on_acked(62), "the start is the baseline");
    }

    #[test]
    fn without_a_start_or_on_a_kernel_that_counts_nothing_the_ledger_keeps_nothing() {
        let mut l = Ledger::default();
        l.on_written(100, 3);
        l.on_acked(0);
        assert_eq!(l.unacked(), 0);
        let mut old_kernel = Ledger::default();
        old_kernel.start(0, 0);
        old_kernel.on_written(100, 3);
        assert_eq!(old_kernel.unacked(), 0);
    }

    /// A ledger past its ceiling by one: `LEDGER_ENTRIES + 1` writes of 10 bytes, one
    /// message each, after an opening of one byte.
    fn overfull() -> Ledger {
        let mut l = Ledger::default();
        l.start(1, 0);
        for _ in 0..LEDGER_ENTRIES + 1 {
            l.on_written(10, 1);
        }
        l
    }

    #[test]
    fn a_full_ledger_merges_writes_and_never_counts_short() {
        let all = LEDGER_ENTRIES as u64 + 1;
        let mut l = overfull();
        assert!(
            l.writes.len() <= LEDGER_ENTRIES / 2 + 1,
            "{}",
            l.writes.len()
        );
        assert_eq!(l.unacked(), all);
        // Acknowledged up to the middle of a merged pair: the pair stays, whole.
        l.on_acked(1 + 15);
        assert_eq!(l.unacked(), all);
        l.on_acked(1 + 20);
        assert_eq!(l.unacked(), all - 2);
        // Every message the peer has not acknowledged whole is still counted, and at most
        // one more (the other half of a merged pair).
        for acked in (0..10 * all).step_by(7) {
            let mut m = overfull();
            m.on_acked(1 + acked);
            let left = all - acked / 10;
            assert!((left..=left + 1).contains(&m.unacked()), "{acked}");
        }
    }
}
