//! When this node announces and how long it holds what its neighbours announced.
//!
//! The announce cycle's period is `announce_period` after a change other nodes must hear
//! soon (an own endpoint, a capable link up or down, a participant heard that is not a
//! neighbour) and doubles with every cycle after it, up to `announce_idle_period`. Past a
//! third of this node's lease only when every participant it hears is a neighbour that
//! promised (Hello feature bit 4) to hold its lease while linked: a receiver that renews a
//! lease only from frames must get one well within it. That holding is the other half,
//! done here for every capable neighbour: an up link (its heartbeats, sent by the neighbour
//! itself) renews the neighbour's lease at every expiry pass, so a lease runs out at most
//! one lease (plus one pass) after the last link to it went.
//!
//! An idle full mesh thus carries one cycle per node per `announce_idle_period` instead of
//! one per `announce_period`, and a cycle that a lost frame made incomplete is repaired
//! within that period (a link that comes back gets a catch-up at once).
//!
//! **Owns:** the cycle's period and the lease renewal by link. **Must not touch:** what a
//! cycle holds (`announce`) or how frames are taken (`receive`).

use super::{prefix_of, TopicsCore};
use crate::{MemberGraph, PeerId};
use ahash::AHashSet;
use shoal_discovery::types::Time;
use std::time::{Duration, Instant};

impl TopicsCore {
    /// Other nodes should hear this node's cycle soon: the period goes back to
    /// `announce_period`, counted from the next call that knows the time (the round's
    /// `routes_due`, or the timer; for the callers that do not know it: link changes).
    pub(super) fn announce_soon(&mut self) {
        self.period = self.cfg.announce_period;
        self.rearm = true;
    }

    /// [`announce_soon`](Self::announce_soon), counted from `now`.
    pub(super) fn announce_soon_at(&mut self, now: Instant) {
        self.period = self.cfg.announce_period;
        self.next_announce = self.next_announce.min(now + self.cfg.announce_period);
    }

    /// Applies [`announce_soon`](Self::announce_soon) at `now`: the next cycle is due
    /// within `announce_period`.
    pub(super) fn rearm_announce(&mut self, now: Instant) {
        if std::mem::take(&mut self.rearm) {
            self.next_announce = self.next_announce.min(now + self.cfg.announce_period);
        }
    }

    /// After a cycle at `now`: the next is due one period later, and the period after that
    /// is twice as long (within [`period_cap`](Self::period_cap)).
    pub(super) fn schedule_next_cycle(&mut self, now: Instant) {
        let cap = self.period_cap();
        self.period = self.period.min(cap);
        self.next_announce = now + self.period;
        self.period = self.period.saturating_mul(2).min(cap);
    }

    /// The longest period the cycle may have now: `announce_idle_period` while every node
    /// of the mesh (membership's members, and every participant admitted) is a neighbour
    /// holding this node's lease by link, else within a third of its own lease (never
    /// below `announce_period`). A member that is not a participant (a multimaster node)
    /// counts as not holding: a mixed mesh keeps the shorter period.
    pub(super) fn period_cap(&self) -> Duration {
        let base = self.cfg.announce_period;
        let idle = self.cfg.announce_idle_period.max(base);
        let holders = self.lease_holders();
        if self.members_held && self.remotes.values().all(|r| holders.contains(&r.node)) {
            idle
        } else {
            idle.min((self.cfg.participant_lease / 3).max(base))
        }
    }

    /// The capable neighbours holding this node's lease by link.
    fn lease_holders(&self) -> AHashSet<&PeerId> {
        self.links
            .values()
            .filter(|l| l.holds_lease)
            .map(|l| &l.peer)
            .collect()
    }

    /// Notes whether every member of `membership` is a neighbour holding this node's lease
    /// (called with each round's membership; recomputed only when its shape or this
    /// node's links changed).
    pub(super) fn note_members(&mut self, membership: &MemberGraph) {
        let key = (membership.shape(), self.links_epoch);
        if self.members_key == Some(key) {
            return;
        }
        self.members_key = Some(key);
        let holders = self.lease_holders();
        self.members_held = membership.members().all(|m| holders.contains(m));
    }

    /// The period the next cycle after the coming one will have (for tests and
    /// observers).
    pub fn announce_period_now(&self) -> Duration {
        self.period
    }

    /// Renews, as heard at `t`, the lease of every admitted participant a capable link
    /// reaches directly (see the module docs).
    pub(super) fn renew_linked(&mut self, t: Time) {
        let linked: AHashSet<PeerId> = self.links.values().map(|l| l.peer).collect();
        for node in linked {
            let prefix = prefix_of(&node);
            let Some(r) = self.remotes.get_mut(&prefix) else {
                continue;
            };
            if r.node != node {
                continue;
            }
            if let Some(expires) = self.graph.renew_participant(&prefix, t) {
                r.expires = expires;
            }
        }
    }

    /// Whether `node` is a capable neighbour that holds this node's lease by link.
    pub(super) fn holds_lease_by_link(&self, node: &PeerId) -> bool {
        self.links
            .values()
            .any(|l| l.peer == *node && l.holds_lease)
    }
}
