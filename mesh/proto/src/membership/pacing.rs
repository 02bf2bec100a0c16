//! Pacing of the own floods caused by neighbour changes (see [`FLOOD_GAP`]): a burst goes out
//! at once, later changes at most once per gap, each flood carrying every change since.
//!
//! **Owns:** the flood credit. **Must not touch:** what a flood carries (the parent module).

use super::{Dest, MemberGraph};
use std::time::{Duration, Instant};

/// Default pace of the floods of this node's own record caused by neighbour changes
/// ([`MemberGraph::with_flood_gap`]): [`FLOOD_BURST`] changes flood at once, then one flood
/// per gap, carrying every change made meanwhile. N nodes starting at once in a full
/// mesh otherwise flood N − 1 versions each, one per new link, to every link: about N³
/// frames of up to 16·N bytes, which saturated a 2-core host at 40–60 nodes
/// (`bench/notes/membership-scale.md`, "Storm"). The control plane's tick is 100 ms too.
pub const FLOOD_GAP: Duration = Duration::from_millis(100);

/// Change-driven own floods that go out at once before the flood gap paces them: a node's
/// first links (a join, a bridge forming) are announced without delay, as before.
pub const FLOOD_BURST: u32 = 2;

impl MemberGraph {
    /// Sets the least time between two floods of the own record caused by neighbour changes
    /// (default [`FLOOD_GAP`]; zero floods every change at once, as before issue 29).
    pub fn with_flood_gap(mut self, gap: Duration) -> MemberGraph {
        self.flood_gap = gap;
        self
    }

    /// Changes the flood gap of a running graph (see [`with_flood_gap`](Self::with_flood_gap)):
    /// a flood already deferred still goes out when it was due. For simulations that bring a
    /// large mesh up paced and then measure it with the configured gap.
    pub fn set_flood_gap(&mut self, gap: Duration) {
        self.flood_gap = gap;
    }

    /// The neighbour set changed: flood the own record now while the credit lasts, else when
    /// the next credit comes (that flood carries this change and any others until then).
    pub(super) fn flood_changed(&mut self, wall_ms: u64, now: Instant) {
        if self.flood_due.is_some() {
            self.stats.floods_deferred += 1;
            return;
        }
        self.refill_credit(now);
        if self.flood_credit > 0 {
            self.flood_credit -= 1;
            self.flood_own(wall_ms, now, Dest::All);
        } else {
            self.stats.floods_deferred += 1;
            self.flood_due = Some(self.credit_at + self.flood_gap);
        }
    }

    /// One flood credit per flood gap since `credit_at`, up to [`FLOOD_BURST`].
    pub(super) fn refill_credit(&mut self, now: Instant) {
        if self.flood_gap.is_zero() {
            self.flood_credit = FLOOD_BURST;
            return;
        }
        while self.flood_credit < FLOOD_BURST && now >= self.credit_at + self.flood_gap {
            self.flood_credit += 1;
            self.credit_at += self.flood_gap;
        }
        if self.flood_credit >= FLOOD_BURST {
            self.credit_at = now;
        }
    }
}
