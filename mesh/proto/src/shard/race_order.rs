//! A dial race's winner is read after its loser: what the peer sent on the loser before it
//! switched to the winner is handled before anything it sent on the winner.
//!
//! Each end of a dial race moves its stream from the loser to the winner as it resolves the
//! race, and the sender keeps the order across the switch (`ShardCore::pass_queue`). The
//! receiver reads two connections, though, and a loaded one may read the winner's first
//! frames before the loser's last (a stream begun during a race, live, beside two busy
//! loops: a few frames out of order in ~4 runs of 100). So once the winner has bytes while
//! the loser is still served, the winner's reader waits ([`ReadStep::Hold`]) and the loser
//! is closed politely: the peer sent on the winner, so it resolved the race too, and sends
//! nothing more on the loser. The loser is read to its end (the peer's FIN follows its last
//! frame there), what comes on it handled as come on the winner, and then the winner's
//! reader goes on ([`ShardAction::ReadOn`]). A loser not ended within
//! [`ShardConfig::race_hold`] of the winner's first bytes (its peer silent with the
//! connection open) no longer holds the winner back.
//!
//! **Owns:** which winners wait for which losers, and until when. **Must not touch:** a
//! link's lifecycle (`links`: this only asks it to close the loser) or its bytes (`read`).
//!
//! [`ReadStep::Hold`]: super::ReadStep::Hold
//! [`ShardConfig::race_hold`]: super::ShardConfig::race_hold

use super::action::ShardAction;
use super::read::Rx;
use super::ShardCore;
use crate::LinkId;
use std::time::Instant;

/// A winner whose frames come after its loser's.
#[derive(Debug)]
pub(super) struct Behind {
    loser: LinkId,
    winner: LinkId,
    /// No longer held after this: set by the winner's first bytes.
    until: Option<Instant>,
    /// The winner's reader was told to wait: it is told to read on when the hold ends.
    held: bool,
}

impl ShardCore {
    /// `winner` took the place of `loser` (both served here; at the winner's `Install`, or
    /// at the loser's `Retire`): the winner's frames wait for the loser's end.
    pub(super) fn order_behind(&mut self, loser: LinkId, winner: LinkId) {
        let behind = &mut self.handover.behind;
        match behind.iter_mut().find(|b| b.loser == loser) {
            Some(b) => b.winner = winner,
            None => behind.push(Behind {
                loser,
                winner,
                until: None,
                held: false,
            }),
        }
    }

    /// True when `link`'s reader is to wait ([`ReadStep::Hold`](super::ReadStep::Hold)):
    /// it is a dial race's winner with bytes read while its loser is still served. The
    /// first time, the loser is closed (politely: the peer now sends on the winner).
    pub(super) fn held_for_loser(&mut self, link: LinkId, now: Instant) -> bool {
        let Some(i) = self.handover.behind.iter().position(|b| b.winner == link) else {
            return false;
        };
        let Some(w) = self.links.get(link) else {
            return false;
        };
        let buffered = match &w.rx {
            Rx::Plain(buf) => !buf.is_empty(),
            Rx::Secure(rr) => !rr.plaintext().is_empty() || rr.pending_ciphertext() > 0,
        };
        if !buffered {
            return false;
        }
        let hold = self.cfg.race_hold;
        let b = &mut self.handover.behind[i];
        let until = *b.until.get_or_insert(now + hold);
        if until <= now {
            self.hold_expired(i);
            return false;
        }
        let first = !std::mem::replace(&mut b.held, true);
        let loser = b.loser;
        if first && self.links.get(loser).is_some_and(|l| !l.closing) {
            self.close(loser, true, now);
        }
        if let Some(w) = self.links.get_mut(link) {
            w.stalled = true;
        }
        true
    }

    /// `link` leaves the shard: a winner held for it reads on; a hold of its own ends.
    pub(super) fn race_link_ended(&mut self, link: LinkId, out: &mut Vec<ShardAction>) {
        let mut i = 0;
        while i < self.handover.behind.len() {
            let b = &self.handover.behind[i];
            if b.loser != link && b.winner != link {
                i += 1;
                continue;
            }
            let b = self.handover.behind.swap_remove(i);
            if b.loser == link {
                self.read_on(b, out);
            }
        }
    }

    /// When `link`'s hold ends if its loser does not end first.
    pub(super) fn hold_deadline(&self, link: LinkId) -> Option<Instant> {
        self.handover
            .behind
            .iter()
            .find(|b| b.winner == link && b.held)
            .and_then(|b| b.until)
    }

    /// `link`'s timer fired: a hold past its deadline ends.
    pub(super) fn hold_timer(&mut self, link: LinkId, now: Instant, out: &mut Vec<ShardAction>) {
        let Some(i) = self
            .handover
            .behind
            .iter()
            .position(|b| b.winner == link && b.held && b.until.is_some_and(|t| t <= now))
        else {
            return;
        };
        let b = self.hold_expired(i);
        self.read_on(b, out);
    }

    /// The hold `i` ran out before its loser ended: the winner is no longer held.
    fn hold_expired(&mut self, i: usize) -> Behind {
        let b = self.handover.behind.swap_remove(i);
        tracing::debug!(shard = self.idx, loser = ?b.loser, winner = ?b.winner, "a dial race's loser did not end in time: its winner reads on");
        if let Some(w) = self.links.get_mut(b.winner) {
            w.stalled = false;
        }
        b
    }

    /// The hold `b` ended: its winner's reader, if told to wait, reads on.
    fn read_on(&mut self, b: Behind, out: &mut Vec<ShardAction>) {
        if !b.held {
            return;
        }
        if let Some(w) = self.links.get_mut(b.winner) {
            w.stalled = false;
            out.push(ShardAction::ReadOn(b.winner));
        }
    }
}
