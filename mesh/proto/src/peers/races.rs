//! Which of two connections to one peer survives: dial races and late claims.
//!
//! Two connections to one peer are a **dial race** when the second one began (accepted, or
//! dialed by this node) before the first was established, or at most [`race_window`] after:
//! both ends dialed before either saw the other's link. A race is resolved by multimaster's
//! rule (the v1 wire's: the connection initiated by the lower node id wins; same initiator, the
//! older wins), so both ends keep the same connection, whatever their implementation. Each end
//! resolves the race when its own second handshake ends, so a peer may send on the loser for
//! a while after this node dropped it, and may have no other link yet. So the loser is
//! retired ([`PeerAction::Retire`]), not cut: kept open, what comes on it handled as come on
//! the winner (which also took what was queued on it), until the peer closes it or sends on
//! the winner (then it has resolved the race too, and the loser closes politely), at most
//! the longer of `heartbeat_timeout` and `handshake_timeout`. Cut at once, it lost what the
//! peer had sent on it, and a peer that had not resolved yet saw its only link end and lost
//! what it published until the winner came up (10 of 100 live runs of a stream begun during
//! a race lost messages that way; none since). The sender keeps the order across the switch
//! (the winner writes after the loser's last write), and so does the receiver: it reads the
//! winner only once the loser has ended (`shard/race_order.rs`; before, ~4 loaded live runs
//! in 100 read a few of the winner's first frames before the loser's last). Not when its own
//! handshake of the loser ended after it had read the winner's first frames: the loser was
//! not known yet.
//!
//! A connection that began later than that is no race: the peer already had its link when it
//! was opened. Without identity such a newcomer may be anyone claiming the peer's id (the id
//! is only what its Hello says), and multimaster's rule would let it displace the live link
//! whenever the claimed id is lower, again and again. So a **late claim** never displaces an
//! established link: the newcomer gets Goodbye and is counted (`claims_refused`); the link
//! keeps its place until it ends (Goodbye, EOF, or `heartbeat_timeout` without input, so a
//! peer that restarted with the same id waits at most that long). Where multimaster's rule
//! would keep the established link anyway, nothing changes.
//!
//! Both ends of a Shoal link reach the same verdict: a late connection is late at both ends,
//! and each keeps the established one. The exception is this node's own late dial of a static
//! endpoint (redialed because its first dial failed while the peer dialed in: the only dial
//! made while its peer may be linked) that reached a peer without Shoal's extension: that
//! peer follows multimaster's rule, so this node does too. Any other late claim is refused
//! whatever its Hello says: an inbound one is the claim a stranger makes, and so is a
//! discovered address (announced by anyone, under a fresh id) answering with a linked
//! peer's id.
//!
//! Identity mode uses the same rule. There the newcomer proved the key, so it can only be the
//! peer itself; but one rule for every mode is one verdict at both ends of a link whatever
//! their settings, and the only cost (a restarted peer waits for its stale link to end) is
//! bounded by `heartbeat_timeout`.
//!
//! **Owns:** the verdict on a second connection to a linked peer. **Must not touch:** the
//! links themselves (the control core and the shards retire, install and close them).
//!
//! [`race_window`]: PeerManager::race_window

use super::{Origin, PeerAction, PeerManager};
use crate::{LinkId, PeerId};

impl<R: rand::RngCore> PeerManager<R> {
    /// The handshake of `link` to `peer` completed while `existing` is its link: a dial race
    /// (one kept, the loser retired) or a late claim (refused).
    pub(super) fn resolve_race(
        &mut self,
        peer: PeerId,
        link: LinkId,
        existing: LinkId,
        shoal_peer: bool,
    ) {
        let keep_new = self.prefer(peer, link, existing);
        if keep_new && self.late_claim(peer, link, shoal_peer) {
            self.stats.claims_refused += 1;
            tracing::debug!(%peer, kept = ?existing, refused = ?link, "late claim on a live link refused");
            self.conns.remove(&link);
            self.actions.push_back(PeerAction::Close {
                link,
                goodbye: true,
            });
            return;
        }
        self.stats.races_resolved += 1;
        let p = self.peers.get_mut(&peer).expect("present");
        let loser = if keep_new {
            p.link = Some(link);
            self.actions.push_back(PeerAction::Install { peer, link });
            existing
        } else {
            link
        };
        tracing::debug!(%peer, winner = ?p.link, ?loser, "dial race resolved");
        self.conns.remove(&loser);
        self.actions
            .push_back(PeerAction::Retire { peer, link: loser });
    }

    /// True if connection `a` should be kept over `b` (both to `peer`): the one initiated by
    /// the byte-wise lower node id wins; same initiator, the older (lower id) wins.
    fn prefer(&self, peer: PeerId, a: LinkId, b: LinkId) -> bool {
        let initiator = |l: LinkId| {
            if self.conns[&l].outbound() {
                self.me
            } else {
                peer
            }
        };
        let (ia, ib) = (initiator(a), initiator(b));
        if ia != ib {
            ia < ib
        } else {
            a < b
        }
    }

    /// True when `link` to `peer` began more than the race window after the peer's link was
    /// established: not a dial race, so it must not displace that link. This node's own dial
    /// of a static endpoint that reached a peer without Shoal's extension is judged by
    /// multimaster's rule alone, as that peer judges it. (Only a static endpoint is dialed
    /// while its peer may be linked; a discovered address that answers with a linked peer's
    /// id is a claim like any other: a stranger can announce its address under a fresh id.)
    fn late_claim(&self, peer: PeerId, link: LinkId, shoal_peer: bool) -> bool {
        let conn = &self.conns[&link];
        if matches!(conn.origin, Origin::Static(_)) && !shoal_peer {
            return false;
        }
        let linked_at = self.peers[&peer].linked_at;
        conn.started.saturating_duration_since(linked_at) > self.race_window
    }
}
