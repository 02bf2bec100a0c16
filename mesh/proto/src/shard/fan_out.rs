//! The fan-out that Data frames, topic samples (`samples`) and reliability frames
//! (`reliable`) all leave a shard through, and the Data path that leads to it: a Data frame
//! is judged by the [`crate::gossip`] rules, then delivered, fanned out or dropped here.
//!
//! A Data frame is routed on the shard that owns its originator's dedup state
//! ([`dedup_shard`]): when that is the reading shard — always for a message straight from its
//! originator — nothing leaves the shard; otherwise the frame hops once
//! ([`ShardToShard::HopData`]).
//!
//! The fan-out ([`ShardCore::fan_out_with`]) sends on one link, on every routed link but the
//! inbound one (a flood), or on a writer's route ([`Targets::Route`], counted per topic too).
//! It reserves each link's bytes in its [`LinkBudget`] before anything is queued, so a policy
//! always acts on a whole new frame, never on one already queued: what does not fit is
//! dropped and counted (full queue, slow link, link gone), or, for a publish of this node's
//! own under the Block policy, waits. Sending on a link of another shard is one more hop
//! ([`ShardToShard::Transmit`]) with the bytes already reserved.
//!
//! **Owns:** carrying out the gossip verdict on a Data frame (deliver, fan out, drop and count), the
//! reservation of link room and the queuing on links. **Must not touch:** waiting (a Block
//! publish that finds no room becomes a [`ShardAction::Block`]; see `backpressure`), or
//! where samples and reliability frames go (`samples`, `reliable` pick the targets).

use super::action::{Blocked, Delivered, Delivery, IfBusy, ShardAction};
use super::{ShardCore, Stop};
use crate::budget::{LinkBudget, OverflowPolicy};
use crate::cmd::{Out, ShardToShard};
use crate::gossip::{DataMeta, DataVerdict, DropReason};
use crate::stats::{add, add_dropped, inc, raise, TopicCounters};
use crate::wire::{Data, DataHeader, DATA_HEADER_LEN};
use crate::{dedup_shard, LinkId, PeerId};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

/// Which input routes a frame, which decides what it may wait for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Path {
    /// The application's publish: may wait for link room (Block) and ring room.
    Origin,
    /// A link's reader: may wait for ring room (that only stalls this link).
    Reader,
    /// The shard's inbox: never waits for another shard's ring, since that shard's inbox
    /// may be waiting for ours; a hop that does not fit is dropped and counted.
    Inbox,
}

impl ShardCore {
    /// A Data frame read on `from`: routed here, or handed (a hop) to the shard owning its dedup
    /// state.
    pub(super) fn route_in(
        &mut self,
        from: LinkId,
        d: Data,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let owner = dedup_shard(&d.msg_id, self.shards);
        if owner != self.idx {
            inc(&self.counters.hops_out);
            out.push(ShardAction::Post {
                to: owner,
                msg: ShardToShard::HopData { from, data: d },
                busy: IfBusy::Wait,
            });
            return;
        }
        self.route(from, d, Path::Reader, now, out);
    }

    /// Routes a Data frame received on `from` whose dedup state is on this shard.
    pub(super) fn route(
        &mut self,
        from: LinkId,
        d: Data,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let meta = DataMeta {
            src: d.src,
            dst: d.dst,
            msg_id: d.msg_id,
            ttl: d.ttl,
        };
        let c = &self.counters;
        let settling = self.gossip.taken_while_settling();
        let verdict = self.gossip.on_data(&self.table, from, &meta, now);
        if self.gossip.taken_while_settling() != settling {
            inc(&c.taken_while_settling);
        }
        match verdict {
            DataVerdict::Deliver => self.deliver(d, out),
            DataVerdict::DeliverAndForward { except, ttl } => {
                let to = Targets::Relay {
                    except,
                    origin: meta.src,
                };
                self.fan_out(&meta, &d.payload, to, ttl, path, now, out);
                self.deliver(d, out);
            }
            DataVerdict::Forward { except, ttl } => {
                let to = Targets::AllExcept(except);
                self.fan_out(&meta, &d.payload, to, ttl, path, now, out)
            }
            DataVerdict::Unicast { link, ttl } => {
                self.fan_out(&meta, &d.payload, Targets::Only(link), ttl, path, now, out)
            }
            DataVerdict::Drop(DropReason::Duplicate) => inc(&c.dropped_duplicate),
            DataVerdict::Drop(DropReason::TtlExpired) => inc(&c.dropped_ttl),
            DataVerdict::Drop(DropReason::NoRoute) => inc(&c.dropped_no_route),
            DataVerdict::Drop(DropReason::TooOld) => inc(&c.dropped_too_old),
            DataVerdict::Drop(DropReason::OffPath) => inc(&c.dropped_off_path),
            DataVerdict::Drop(DropReason::ForeignMsgId) => inc(&c.dropped_foreign_msg_id),
        }
    }

    /// Hands a message to the application ([`ShardCore::hand_over`]).
    #[inline]
    pub(super) fn deliver(&mut self, d: Data, out: &mut Vec<ShardAction>) {
        inc(&self.counters.delivered);
        let d = Delivered::Message(Delivery {
            from: d.src,
            msg_id: d.msg_id,
            broadcast: d.dst.is_zero(),
            payload: d.payload,
        });
        self.hand_over(d, out);
    }

    /// Sends one Data frame (with `ttl`) on `only`, or on every routed link except `except`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fan_out(
        &mut self,
        meta: &DataMeta,
        payload: &Bytes,
        to: Targets<'_>,
        ttl: u8,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let Ok(header) = DataHeader::new(&meta.src, &meta.dst, &meta.msg_id, ttl, payload.len())
        else {
            inc(&self.counters.oversize_frames);
            return;
        };
        let n = DATA_HEADER_LEN + payload.len();
        self.fan_out_with(n, 1, to, path, now, out, || {
            Out::Data(header, payload.clone())
        });
    }

    /// Queues what `make` builds (`n` bytes holding `frames` messages) on the links of `to`
    /// (counting per topic too for samples). Reserves each link's bytes first; what does not
    /// fit is dropped and counted, except that an originated message under the Block policy
    /// waits for room ([`ShardAction::Block`]), unless the link is slow.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fan_out_with(
        &mut self,
        n: usize,
        frames: u64,
        to: Targets<'_>,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
        make: impl Fn() -> Out,
    ) {
        // The routing tables are only read (no budget `Arc` is cloned per target) while the
        // links are written.
        let ShardCore {
            idx,
            counters: c,
            table,
            owners,
            links,
            cfg,
            gossip,
            stop,
            ..
        } = self;
        let running = *stop == Stop::Running;
        let mut q = Queuer {
            idx: *idx,
            c,
            links,
            now,
        };
        let policy = cfg.policy;
        let topics = to.topic();
        let topic = topics.map(|t| t.shard(*idx));
        let mut send = |link: LinkId| {
            let Some((owner, budget)) = owners.get(&link) else {
                // A sample route can still name a link this shard has uninstalled (the
                // control plane's next table drops it); a flood only walks installed links.
                add_dropped(
                    &q.c.dropped_no_route,
                    topic.map(|t| &t.dropped_no_route),
                    frames,
                );
                return;
            };
            let Some(total) = budget.try_reserve(n) else {
                let blocks = path == Path::Origin && policy == OverflowPolicy::Block;
                let closed = budget.is_closed();
                // Closed on its shard while this shard's table still routes over it: the
                // control plane's next `Install` (a dial race's winner, which took the loser's
                // queue) or `Uninstall` is on its way, and the publisher waits for it (see
                // `unblock`) rather than lose what a winner would carry. Nobody waits for a
                // slow link (see `SlowLinkPolicy`).
                let waits = blocks && if closed { running } else { !budget.is_slow() };
                if waits {
                    if !closed {
                        // The congestion clock starts now, not when the driver first looks
                        // at this wait: it awaits a publish's waits one after the other, and
                        // a publish that found two links full waited the second out for a
                        // whole `after` once the first was settled, every other link held
                        // meanwhile.
                        budget.congested(cfg.slow_link.after, now);
                    }
                    out.push(ShardAction::Block(Box::new(Blocked::new(
                        link,
                        *owner,
                        budget.clone(),
                        make(),
                        frames,
                        topics.cloned(),
                    ))));
                } else if blocks && !closed {
                    add_dropped(
                        &q.c.dropped_slow_link,
                        topic.map(|t| &t.dropped_slow_link),
                        frames,
                    );
                } else if closed {
                    add_dropped(
                        &q.c.dropped_no_route,
                        topic.map(|t| &t.dropped_no_route),
                        frames,
                    );
                } else {
                    add_dropped(
                        &q.c.dropped_queue_full,
                        topic.map(|t| &t.dropped_queue_full),
                        frames,
                    );
                    if let OverflowPolicy::Disconnect { after } = policy {
                        budget.note_full(after, now);
                    }
                }
                return;
            };
            if let Some(t) = topic {
                add(&t.forwarded, frames);
            }
            q.transmit(link, *owner, budget, make(), frames, total, path, out);
        };
        let mut skipped = 0;
        match to {
            Targets::Only(l) => send(l),
            Targets::AllExcept(except) => {
                for &l in table.links() {
                    if Some(l) != except {
                        send(l);
                    }
                }
            }
            Targets::Relay { except, origin } => {
                let skip = gossip.skipped_links(&origin, now).unwrap_or_default();
                for &l in table.links() {
                    if l == except {
                        continue;
                    }
                    if skip.binary_search(&l).is_ok() {
                        skipped += 1;
                    } else {
                        send(l);
                    }
                }
            }
            Targets::Route {
                links,
                except,
                topic: _,
            } => {
                for &l in links {
                    if Some(l) != except {
                        send(l);
                    }
                }
            }
        }
        if skipped > 0 {
            add(&c.relay_copies_skipped, skipped);
        }
    }

    /// `ShardToShard::Transmit`: queues reserved bytes on a link of this shard (or on its
    /// successor, if it lost a dial race meanwhile: [`ShardCore::take_over`]).
    pub(super) fn enqueue_reserved(
        &mut self,
        link: LinkId,
        o: Out,
        frames: u64,
        originated: bool,
        now: Instant,
    ) {
        // One lookup on the message path; the hand-over only when the link is no longer
        // plainly open.
        if let Some(l) = self.links.get_mut(link) {
            if !l.closing && !l.replaced && l.retiring.is_none() {
                return l.push(o, originated, now);
            }
        }
        let link = self.take_over(link, o.held());
        let ShardCore {
            idx,
            counters: c,
            owners,
            links,
            ..
        } = self;
        let budget = owners.get(&link).map(|(_, b)| &**b);
        Queuer {
            idx: *idx,
            c,
            links,
            now,
        }
        .enqueue(link, o, frames, originated, budget);
    }
}

/// The links a fan-out sends on.
#[derive(Clone, Copy)]
pub(super) enum Targets<'a> {
    /// One link (a targeted message to a neighbour).
    Only(LinkId),
    /// Every routed link except the one it came on (a flood).
    AllExcept(Option<LinkId>),
    /// A broadcast relayed: every routed link except the one it came on and those to
    /// neighbours no farther from `origin` than this node, which would refuse the copy
    /// ([`crate::reverse_path::PathTable::skipped_links`]; while the origin's links settle,
    /// the origin, its neighbours and the skips already in force only).
    Relay { except: LinkId, origin: PeerId },
    /// A writer's route from this node (topic samples), except the one it came on; what is
    /// queued and dropped is counted for its topic too.
    Route {
        links: &'a [LinkId],
        except: Option<LinkId>,
        topic: &'a Arc<TopicCounters>,
    },
}

impl<'a> Targets<'a> {
    fn topic(&self) -> Option<&'a Arc<TopicCounters>> {
        match self {
            Targets::Route { topic, .. } => Some(topic),
            _ => None,
        }
    }
}

/// The parts of a shard that queuing on a link writes (split from the routing tables, which
/// a fan-out reads meanwhile).
pub(super) struct Queuer<'a> {
    pub(super) idx: usize,
    pub(super) c: &'a crate::stats::Counters,
    pub(super) links: &'a mut super::links::Links,
    pub(super) now: Instant,
}

impl Queuer<'_> {
    /// Queues reserved bytes holding `frames` Data frames (`total` now queued on the link): on
    /// this shard directly, or as a hop to the link's shard.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn transmit(
        &mut self,
        link: LinkId,
        owner: usize,
        budget: &LinkBudget,
        o: Out,
        frames: u64,
        total: usize,
        path: Path,
        out: &mut Vec<ShardAction>,
    ) {
        raise(&self.c.peak_queued_bytes, total as u64);
        add(&self.c.frames_queued, frames);
        let originated = path == Path::Origin;
        if owner == self.idx {
            self.enqueue(link, o, frames, originated, Some(budget));
            return;
        }
        inc(&self.c.hops_out);
        out.push(ShardAction::Post {
            to: owner,
            msg: ShardToShard::Transmit {
                link,
                out: o,
                frames,
                originated,
            },
            busy: if path == Path::Inbox {
                IfBusy::Drop
            } else {
                IfBusy::Wait
            },
        });
    }

    /// Queues bytes holding `frames` Data frames (`originated` by this node), already reserved
    /// on a link of this shard; if the link is gone or closing meanwhile, gives the bytes back
    /// (to `budget` if the link is gone) and counts the frames as dropped.
    pub(super) fn enqueue(
        &mut self,
        link: LinkId,
        o: Out,
        frames: u64,
        originated: bool,
        budget: Option<&LinkBudget>,
    ) {
        let n = o.held();
        if let Some(l) = self.links.get_mut(link) {
            if !l.closing {
                return l.push(o, originated, self.now);
            }
            l.budget.release(n);
        } else if let Some(b) = budget {
            b.release(n);
        }
        add(&self.c.dropped_no_route, frames);
    }
}
