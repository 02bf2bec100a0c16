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
//! crosses one link into each node two hops from its origin (a broadcast crosses
//! `relay_redundancy` links there, 3 by default, ranked by `reverse_path::relay_rank`). Where two stores disagree, `n` gets two copies or none; none is repaired
//! by the digest exchange within a `membership_interval`, and the next version usually comes
//! anyway.
//!
//! Toward quiet digest neighbours a record is also paced per origin
//! ([`MemberGraph::with_relay_gap`], default [`RELAY_GAP`]): the first version of an origin
//! goes at once, and the versions that follow within the gap are folded into one relay of
//! the newest at the gap's end (rounded up to a grid of a quarter gap, so that the relays of
//! many origins go in one control round), its targets chosen again then (a neighbour the
//! newest lists has it from the origin by then). A node whose links come up one by one mints
//! a version per link; relayed at once each, they chased one another, and at 60 nodes
//! starting at once ~87 % of the relays' copies arrived after a newer version of the same
//! record (`bench/notes/start60.md`). Legacy links (and links wanting refreshes) still get every
//! version at once, so a multimaster node sees what it saw before. A node that sends many
//! versions of one origin's record makes this node relay at most one per gap to quiet links.
//!
//! **Owns:** which links a stored record is relayed on, and when. **Must not touch:** whether
//! a record is stored (the parent module), the own floods (`pacing`) or the digest exchange
//! (`sync`).

use super::{Dest, MemberGraph, MemberTransmit, Record, Stored};
use crate::{LinkId, PeerId};
use std::time::{Duration, Instant};

/// The default least time between two relays of one origin's record toward quiet digest
/// neighbours (see the module docs): about the pace at which a forming full mesh's nodes
/// gain links (60 nodes: ~40 a second each), so a burst of versions goes out as two.
pub const RELAY_GAP: Duration = Duration::from_millis(100);

/// Which of a node's links a relay considers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Toward {
    /// Every link: a version relayed at once.
    All,
    /// Only the links that want refreshes (legacy links and those near one): a version
    /// whose relay toward the quiet links waits for the relay gap.
    Wanting,
    /// Only the quiet links: the paced relay of the newest version at the gap's end.
    Quiet,
}

impl MemberGraph {
    /// Sets the least time between two relays of one origin's record toward quiet digest
    /// neighbours (default [`RELAY_GAP`]; zero relays every version at once, as before).
    pub fn with_relay_gap(mut self, gap: Duration) -> MemberGraph {
        self.relay_gap = gap;
        self
    }

    /// Relays the newly stored record of `origin`, which came on `from` (see
    /// [`relay_toward`](Self::relay_toward)): at once, or toward the quiet links at the end of
    /// the relay gap when this origin's record went to them less than a gap ago.
    pub(super) fn relay(&mut self, from: LinkId, origin: PeerId, refresh: bool, now: Instant) {
        let gap = self.relay_gap;
        let Some(stored) = self.records.get_mut(&origin) else {
            return;
        };
        stored.relay_from = from;
        if refresh {
            // Quiet links take no refreshes; a pending relay sends the newest version anyway.
            self.relay_toward(from, origin, true, Toward::All);
            return;
        }
        let due = stored.relayed_at.map(|t| t + gap).filter(|due| now < *due);
        match due {
            Some(due) if self.sync.is_some() => {
                if !stored.relay_pending {
                    stored.relay_pending = true;
                    // On a grid of a quarter gap: every timer fired is a control round, so
                    // the paced relays of many origins due about together go in one.
                    let due = crate::grid::on_grid(self.relay_epoch, due, gap / 4);
                    self.relay_due.insert((due, origin));
                }
                self.stats.relays_paced += 1;
                self.relay_toward(from, origin, false, Toward::Wanting);
            }
            _ => {
                stored.relayed_at = Some(now);
                self.relay_toward(from, origin, false, Toward::All);
            }
        }
    }

    /// The earliest paced relay due.
    pub(super) fn next_relay_due(&self) -> Option<Instant> {
        self.relay_due.first().map(|(t, _)| *t)
    }

    /// Sends the paced relays due by `now`: the newest stored version of each origin toward
    /// the quiet links, its targets chosen now.
    pub(super) fn relay_paced(&mut self, now: Instant) {
        while let Some(&(due, origin)) = self.relay_due.first() {
            if due > now {
                break;
            }
            self.relay_due.pop_first();
            // Gone (expired) or already flushed: an entry left from an earlier record.
            let Some(stored) = self.records.get_mut(&origin) else {
                continue;
            };
            if !stored.relay_pending {
                continue;
            }
            stored.relay_pending = false;
            stored.relayed_at = Some(now);
            let from = stored.relay_from;
            self.relay_toward(from, origin, false, Toward::Quiet);
        }
    }

    /// Relays the stored record of `origin` (as stored: its sorted list and its signature) to
    /// the links `toward` names except the inbound one, the origin's and those of the
    /// neighbours the record lists (they have it from the origin); a `refresh` (a new
    /// version, the same neighbours) only to links that want refreshes.
    fn relay_toward(&mut self, from: LinkId, origin: PeerId, refresh: bool, toward: Toward) {
        let Some(stored) = self.records.get(&origin) else {
            return;
        };
        let mut targets = std::mem::take(&mut self.link_scratch);
        targets.clear();
        let mut pruned = 0;
        let mut withheld = 0;
        let mut deferred = 0;
        // Links left to a relay of another kind (`toward`): no AllExcept then.
        let mut skipped = false;
        for (p, l) in &self.links {
            if *l == from {
                continue;
            }
            // A link that wants no refreshes is a quiet digest link: it repairs a missed
            // record at the next Summary, so it can be left to another relay.
            let quiet = !self.refresh_wanted(*l);
            if (toward == Toward::Wanting && quiet) || (toward == Toward::Quiet && !quiet) {
                skipped = true;
                continue;
            }
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
        if pruned == 0 && withheld == 0 && !skipped {
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
