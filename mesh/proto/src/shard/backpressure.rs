//! The waits of a Block-policy publisher, and the slow-link rule that bounds them.
//!
//! An originated frame that finds its link full under [`OverflowPolicy::Block`] becomes a
//! [`Blocked`]: the driver waits for room (the budget's room signal) or for the deadline the
//! core names, then asks again ([`ShardCore::unblock`]). The publisher never waits for a link
//! that holds the rest hostage ([`SlowLinkPolicy`]): once it has been congested for `after`
//! while another link drains at least twice as fast (a quarter of `after`, on a relapse soon
//! after its last slow period: [`LinkBudget::congested`]), it is declared slow, once:
//! counted, reported, and closed if the policy says so. A fifth of that allowance before (a
//! relapse: from its first look), a link outpaced so far is marked slow soon and reported (its
//! peer is unlisted ahead of the declaration: [`UNLIST_LEAD`]). A wait also starts the clock
//! of every other link more than half full ([`LinkBudget::congested_if_backed_up`]): links
//! jammed together are waited out together. When the links drain alike the publisher is
//! simply faster than the mesh and waits (plain backpressure; a single link is never slow).
//! A link whose queue is deep but not full can lag as badly: one backlogged (here and in its
//! kernel) past `LAG_FLOOR` for `after` while this node's frames go on it and another link
//! drains twice as fast is marked lagging and reported when the driver samples its kernel
//! ([`ShardCore::on_send_queue`]; `budget/lag.rs`).
//!
//! **Owns:** the decision to keep waiting, to queue, or to give up on a link. **Must not
//! touch:** the waiting itself (the driver's).
//!
//! [`OverflowPolicy::Block`]: crate::OverflowPolicy::Block
//! [`SlowLinkPolicy`]: crate::SlowLinkPolicy

use super::action::{Blocked, IfBusy, LinkError, LinkFault, ShardAction};
use super::fan_out::{Path, Queuer};
use super::{ShardCore, Stop};
use crate::budget::{LinkBudget, OverflowPolicy, SlowLinkAction, UNLIST_LEAD};
use crate::cmd::ToControl;
use crate::stats::{add, add_dropped, inc};
use crate::LinkId;
use ahash::AHashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What [`ShardCore::unblock`] decided.
#[derive(Debug)]
pub enum Unblock {
    /// Queued, or given up (and counted).
    Done,
    /// Still waiting: wait for [`Blocked::listen`] (taken before the call) or `until`, then
    /// call [`ShardCore::unblock`] again.
    Wait(Box<Blocked>, Instant),
}

impl ShardCore {
    /// Tries a [`Blocked`] frame again: queues it if its link has room, gives up (counted)
    /// when the link closed or is (now declared) slow, or names the next deadline.
    pub fn unblock(
        &mut self,
        mut b: Box<Blocked>,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) -> Unblock {
        let policy = self.cfg.slow_link;
        let topic = b.topic.as_ref().map(|t| t.shard(self.idx));
        if !self.owners.contains_key(&b.link) {
            // The link lost a dial race while the publisher waited: wait for the winner.
            let winner = self.installed_instead_of(b.link);
            if let Some((w, (owner, budget))) =
                winner.and_then(|w| self.owners.get(&w).map(|o| (w, o.clone())))
            {
                (b.link, b.owner, b.budget, b.deadline) = (w, owner, budget, None);
            }
        }
        if let Some(total) = b.budget.try_reserve(b.out.held()) {
            if let Some(t) = topic {
                add(&t.forwarded, b.frames);
            }
            let Blocked {
                link,
                owner,
                budget,
                out: o,
                frames,
                ..
            } = *b;
            let ShardCore {
                idx,
                counters: c,
                links,
                ..
            } = self;
            Queuer {
                idx: *idx,
                c,
                links,
                now,
            }
            .transmit(link, owner, &budget, o, frames, total, Path::Origin, out);
            return Unblock::Done;
        }
        if b.budget.is_closed() && self.owners.contains_key(&b.link) && self.stop == Stop::Running {
            // Closed on its shard, still routed here: this shard's table changes soon (the
            // change wakes this wait: `LinkBudget::route_changed`); given up after `after`.
            let until = *b.closed_since.get_or_insert(now) + policy.after;
            if now < until {
                return Unblock::Wait(b, until);
            }
        }
        if b.budget.is_closed() {
            add_dropped(
                &self.counters.dropped_no_route,
                topic.map(|t| &t.dropped_no_route),
                b.frames,
            );
            return Unblock::Done;
        }
        if b.budget.is_slow() {
            add_dropped(
                &self.counters.dropped_slow_link,
                topic.map(|t| &t.dropped_slow_link),
                b.frames,
            );
            return Unblock::Done;
        }
        if b.deadline.is_none() {
            // The publisher sends nothing while it waits: a link backed up with this one would
            // be found full only once it resumes, and waited out for a whole `after` again.
            for (l, (_, other)) in &self.owners {
                if *l != b.link {
                    other.congested_if_backed_up(now);
                }
            }
        }
        if let Some(d) = b.deadline {
            if now < d {
                return Unblock::Wait(b, d);
            }
        }
        // Also at the first look: the link's clock may have run out while the driver awaited
        // another wait of the same publish (or a link backed up since an earlier wait).
        if b.budget.congested(policy.after, now).is_zero() && self.outpaced(b.link, &b.budget, now)
        {
            self.declare_slow(b.link, &b.budget, now, out);
            add_dropped(
                &self.counters.dropped_slow_link,
                topic.map(|t| &t.dropped_slow_link),
                b.frames,
            );
            return Unblock::Done;
        }
        let recheck = (policy.after / 4).max(Duration::from_millis(10));
        let left = b.budget.congested(policy.after, now);
        let wait = if left.is_zero() {
            recheck
        } else {
            // Ahead of the declaration (`UNLIST_LEAD`): outpaced with the lead left, the
            // link is slow soon and its peer unlisted while the publisher still waits; with
            // more left, look again when only the lead is (at the first look the link has
            // written nothing since its jam, so this is where its pace is first judged). A
            // relapse is unlisted from its first look: its quarter allowance is about as
            // long as the relays take to act on the record, and an unlisting that turns out
            // needless costs only a few relay copies until the link drains.
            let allowance = b.budget.allowance(policy.after);
            let lead = if allowance < policy.after {
                allowance
            } else {
                allowance / UNLIST_LEAD
            };
            match self.outpaced(b.link, &b.budget, now) {
                true if left <= lead => {
                    self.slow_soon(b.link, &b.budget, out);
                    left
                }
                true => left - lead,
                false => left,
            }
        };
        let d = now + wait;
        b.deadline = Some(d);
        Unblock::Wait(b, d)
    }

    /// Marks `link` slow soon (once per congestion episode) and tells the control plane,
    /// which unlists its peer (the same report as a declaration: the control core looks at
    /// every link's marks).
    fn slow_soon(&mut self, link: LinkId, budget: &LinkBudget, out: &mut Vec<ShardAction>) {
        if budget.mark_slow_soon() {
            out.push(ShardAction::Report {
                msg: ToControl::LinkSlow { link },
                busy: IfBusy::Detach,
            });
        }
    }

    /// True if some other open link drains at least twice as fast as `link` has since its
    /// congestion began.
    fn outpaced(&self, link: LinkId, budget: &LinkBudget, now: Instant) -> bool {
        outpaced(&self.owners, link, budget.congested_rate(now), now)
    }

    /// Declares `link` slow (once per congestion episode): counted, and reported or closed
    /// as the policy says.
    fn declare_slow(
        &mut self,
        link: LinkId,
        budget: &LinkBudget,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        if !budget.mark_slow(now) {
            return;
        }
        let policy = self.cfg.slow_link;
        inc(&self.counters.slow_links);
        match policy.action {
            // The link's shard closes it and reports the SlowPeer error.
            SlowLinkAction::Disconnect => budget.kill(),
            SlowLinkAction::Drop => {
                let peer = self.table.peer_on(link);
                let message = format!(
                    "link congested for {:?}: dropping for it until it catches up",
                    policy.after
                );
                tracing::warn!(shard = self.idx, ?peer, %message, "slow link");
                out.push(ShardAction::Report {
                    msg: ToControl::LinkSlow { link },
                    busy: IfBusy::Detach,
                });
                out.push(ShardAction::Error(LinkError {
                    peer,
                    fault: LinkFault::SlowPeer,
                    message,
                }));
            }
        }
    }
}

/// True if some other open link of `owners` drains at least twice as fast as `mine` (bytes
/// per millisecond) on `link`.
fn outpaced(
    owners: &AHashMap<LinkId, (usize, Arc<LinkBudget>)>,
    link: LinkId,
    mine: f64,
    now: Instant,
) -> bool {
    let mine = mine.max(0.001);
    owners
        .iter()
        .any(|(l, (_, b))| *l != link && !b.is_closed() && b.drain_rate(now) >= 2.0 * mine)
}

impl ShardCore {
    /// The driver sampled the link's kernel send queue (`bytes` unacknowledged: the writer
    /// after a write, at most every [`SEND_QUEUE_SAMPLE`] unless the control plane watches
    /// it; the timer each time it fires). Recorded in the budget; a backlog that drained
    /// ends its lag, and one past `LAG_FLOOR` for `after` is looked at (`budget/lag.rs`): if
    /// this node originated frames on the link since the last look, under the Block policy,
    /// and another link drains at least twice as fast, the link is marked lagging, once an
    /// episode: counted, logged, and reported to the control plane, which unlists its peer
    /// (the same report as a slow link's: the control core looks at every link's marks).
    ///
    /// [`SEND_QUEUE_SAMPLE`]: crate::budget::SEND_QUEUE_SAMPLE
    pub fn on_send_queue(
        &mut self,
        link: LinkId,
        bytes: usize,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if l.budget.set_send_queue(bytes) {
            l.budget.slow_ended(now);
        }
        if !l.budget.backlog_due(self.cfg.slow_link.after, now)
            || !std::mem::take(&mut l.originated)
        {
            return;
        }
        if self.cfg.policy == OverflowPolicy::Block
            && outpaced(&self.owners, link, l.budget.backlog_rate(now), now)
            && l.budget.mark_lagging(now)
        {
            inc(&self.counters.links_lagging);
            tracing::info!(
                shard = self.idx,
                peer = %l.peer,
                "link lagging: its backlog stays deep while others drain"
            );
            out.push(ShardAction::Report {
                msg: ToControl::LinkSlow { link },
                busy: IfBusy::Detach,
            });
        }
    }
}
