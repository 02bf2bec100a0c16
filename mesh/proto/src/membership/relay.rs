//! Where a [`MemberGraph`] relays a record it stored (a local choice: the records and their
//! bytes are the wire protocol's, unchanged).
//!
//! The protocol floods a record "to every link except the inbound one"; in a dense mesh that
//! sends every record over every link, `N³` bytes per interval in a full mesh. Every origin
//! floods its own record to all its direct neighbours itself, and those are exactly the
//! neighbours the record lists, so relaying a record to its origin or to a node the record
//! lists only repeats what that node already received from the origin: such relays are
//! skipped (counted in [`MemberStats::relays_pruned`](super::MemberStats::relays_pruned)).
//! When that link breaks the origin floods a new version without that neighbour, which is
//! relayed to it normally. The same rule trims the catch-up sent to a new neighbour
//! (`neighbour_up`). A relay that skips some links comes out as one
//! [`Dest::Link`] transmit per target.
//!
//! A node the record does not list still hears it from every listed node it is linked to:
//! when a node joins a full mesh its links come up one by one, each a new version, and a
//! member it has not linked yet gets version `k` from `k` relays, then from every other
//! unlinked member (`~N³/2` frames per join; 7.3 M at 256 nodes in the simulation). So
//! toward a quiet digest neighbour `n` (one that repairs what it missed at the next Summary
//! and has no multimaster node near), a relay leaves the copy to the lowest-id node that the
//! origin lists and that is linked to `n` by both their records, when it is not itself such
//! a node of lower id
//! ([`MemberStats::relays_deferred`](super::MemberStats::relays_deferred)): the record
//! crosses one link into each node two hops from its origin, as a broadcast does with
//! `relay_pruning`. Where two stores disagree, `n` gets two copies or none; none is repaired
//! by the digest exchange within a `membership_interval`, and the next version usually comes
//! anyway.
//!
//! **Owns:** which links a stored record is relayed on. **Must not touch:** whether a record
//! is stored (the parent module), the own floods (`pacing`) or the digest exchange (`sync`).

use super::{Dest, MemberGraph, MemberTransmit, Record, Stored};
use crate::{LinkId, PeerId};

impl MemberGraph {
    /// Relays the newly stored record of `origin` (as stored: its sorted list and its
    /// signature) to every link except the inbound one, the origin's and those of the
    /// neighbours the record lists (they have it from the origin); a `refresh` (a new
    /// version, the same neighbours) only to links that want refreshes.
    pub(super) fn relay(&mut self, from: LinkId, origin: PeerId, refresh: bool) {
        let Some(stored) = self.records.get(&origin) else {
            return;
        };
        let mut targets = std::mem::take(&mut self.link_scratch);
        targets.clear();
        let mut pruned = 0;
        let mut withheld = 0;
        let mut deferred = 0;
        for (p, l) in &self.links {
            if *l == from {
                continue;
            }
            // A link that wants no refreshes is a quiet digest link: it repairs a missed
            // record at the next Summary, so it can be left to another relay.
            let quiet = !self.refresh_wanted(*l);
            if *p == origin || stored.lists(p) {
                pruned += 1;
            } else if refresh && quiet {
                withheld += 1;
            } else if quiet && self.defers_to_lower(&origin, stored, p) {
                deferred += 1;
            } else {
                targets.push(*l);
            }
        }
        self.stats.sync.refreshes_withheld += withheld;
        self.stats.relays_deferred += deferred;
        let pruned = pruned + deferred;
        let record = Record {
            origin,
            version: stored.version,
            neighbours: stored.sorted.clone(),
        };
        let signature = stored.sig;
        if pruned == 0 && withheld == 0 {
            self.transmits.push_back(MemberTransmit {
                dest: Dest::AllExcept(from),
                record,
                signature,
            });
        } else {
            self.stats.relays_pruned += pruned;
            // Deterministic order for simulations (the map's order is not).
            targets.sort_unstable();
            let dest = match targets[..] {
                [] => None,
                [l] => Some(Dest::Link(l)),
                _ => Some(Dest::Links(targets.clone())),
            };
            if let Some(dest) = dest {
                self.transmits.push_back(MemberTransmit {
                    dest,
                    record,
                    signature,
                });
            }
        }
        self.link_scratch = targets;
    }

    /// True when a relay of `origin`'s record (`rec`) to neighbour `n` is another node's to
    /// send: a node `v` the origin lists that is linked to `n` by both their records (as
    /// stored here) has it from the origin and sends it on. If this node is listed too, it
    /// is one of `n`'s candidate relays and leaves the copy only to a lower id (every
    /// candidate applies the same rule, so with agreeing stores the lowest sends); if it is
    /// not, `n` is no farther from the origin than this node and any such `v` will do.
    fn defers_to_lower(&self, origin: &PeerId, rec: &Stored, n: &PeerId) -> bool {
        let Some(at_n) = self.records.get(n) else {
            return false;
        };
        // The edge rule (`edge_with`) with both records known: a node whose record this
        // node lacks may not have the origin's record either.
        let linked = |v: &PeerId| v != origin && at_n.lists(v) && self.side_of(v, n) == Some(true);
        if rec.lists(&self.me) {
            at_n.lists(&self.me) && rec.sorted.iter().take_while(|v| **v < self.me).any(linked)
        } else {
            rec.sorted.iter().any(linked)
        }
    }
}

#[cfg(test)]
mod tests;
