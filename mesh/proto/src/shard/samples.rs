//! Topic samples on a shard: what a local writer wrote, and runs of samples read from links,
//! sent along their writer's route and delivered to the matched local readers.
//!
//! A run (one Samples frame: consecutive sequence numbers of one writer) is handled whole:
//! one route lookup by writer GUID in the control plane's latest
//! [`SampleRoutes`](crate::topics::SampleRoutes) table, one sequence check against the
//! writer's state (`super::seq`: by the route's stable slot, so it survives a new table),
//! one reservation per link and one hand-off per local reader. A run's
//! sequence state lives on one shard, that of its writer's node id prefix
//! ([`samples_shard`]): for a node's own writers that is the origin shard, where they
//! publish; a run read on another shard hops there once. A writer that left keeps its last
//! route a while for its runs still on their way ([`super::retired`]).
//!
//! Sequence numbers make delivery exact and bounded: a run whose numbers were all seen is a
//! duplicate (a copy over a second path while views of the graph differ), dropped and
//! counted; the seen head of a run that overlaps is cut off; numbers skipped over are counted
//! as missed. Nothing reaches a reader twice.
//!
//! **Owns:** the sample path's decisions (route, fan-out, delivery, counters; the sequence
//! check is `super::seq`'s).
//! **Must not touch:** how routes are computed (the control plane's `topics`) or how a
//! delivery reaches the application (the driver's [`super::DeliverySink`]).

use super::action::{Delivered, IfBusy, SampleRun, ShardAction};
use super::fan_out::{Path, Targets};
use super::seq::SeqAt;
use super::ShardCore;
use crate::cmd::{Out, ShardToShard};
use crate::stats::{add, inc, TopicCounterSet};
use crate::topics::{EndpointGuid, WriterRoute};
use crate::wire::{last_seq_of_own_samples, split_own_samples, Samples};
use crate::LinkId;
use bytes::{Bytes, BytesMut};
use std::time::Instant;

/// The shard (of `shards`) that keeps the sequence state of `writer`'s samples: its node's
/// ([`crate::id::node_shard`]), so a node's own writers are checked where they publish.
pub fn samples_shard(writer: &EndpointGuid, shards: usize) -> usize {
    crate::id::node_shard(writer, shards)
}

/// Runs read from links whose writer the shard's route table does not know yet, oldest
/// first, waiting for a table that does (a writer's first samples can overtake its
/// announcement, which reaches the shards only through the control plane). Bounded in bytes
/// and in age; what goes at either bound is counted as unrouted.
#[derive(Debug, Default)]
pub(super) struct Parked {
    runs: std::collections::VecDeque<(Instant, Held)>,
    bytes: usize,
}

impl Parked {
    /// Body bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// A parked run.
#[derive(Debug)]
enum Held {
    /// Read from link `from`.
    In(LinkId, Samples),
    /// Written by this node's writer (its table had not reached the origin shard yet).
    Own(EndpointGuid, Bytes, usize),
}

impl Held {
    fn writer(&self) -> &EndpointGuid {
        match self {
            Held::In(_, s) => &s.writer,
            Held::Own(w, ..) => w,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Held::In(_, s) => s.body.len(),
            Held::Own(_, b, _) => b.len(),
        }
    }

    fn samples(&self) -> u64 {
        match self {
            Held::In(_, s) => u64::from(s.count),
            Held::Own(_, _, n) => *n as u64,
        }
    }
}

impl Parked {
    /// When the oldest run expires.
    pub(super) fn next_expiry(&self, timeout: std::time::Duration) -> Option<Instant> {
        self.runs.front().map(|(at, ..)| *at + timeout)
    }
}

impl ShardCore {
    /// A Samples frame read on `from`: routed here, or handed to the shard that keeps its
    /// writer's sequence state.
    pub(super) fn route_samples_in(
        &mut self,
        from: LinkId,
        s: Samples,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let owner = samples_shard(&s.writer, self.shards);
        if owner != self.idx {
            inc(&self.counters.hops_out);
            out.push(ShardAction::Post {
                to: owner,
                msg: ShardToShard::HopSamples { from, samples: s },
                busy: IfBusy::Wait,
            });
            return;
        }
        self.route_samples(from, s, Path::Reader, now, out);
    }

    /// Routes a run received on `from` whose writer's sequence state is on this shard.
    pub(super) fn route_samples(
        &mut self,
        from: LinkId,
        s: Samples,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        self.route_held(Held::In(from, s), path, now, out);
    }

    /// Routes `h` on its writer's route: the table's; else, for a writer that left after
    /// `h` was sent, its retired route (`super::retired`); else `h` waits for a table that
    /// names the writer.
    fn route_held(&mut self, h: Held, path: Path, now: Instant, out: &mut Vec<ShardAction>) {
        // The table is taken out for the run rather than reference-counted: every shard
        // holds the same `Arc`, and a count per run would bounce its cache line between them.
        let table = self.sample_routes.take();
        if let Some(route) = table.as_deref().and_then(|t| t.get(h.writer())) {
            self.held_on(route, SeqAt::Slot, h, path, now, out);
        } else if let Some(mut r) = self.retired.take(h.writer()) {
            inc(&self.counters.sample_runs_after_removal);
            let at = SeqAt::Retired(&mut r.seq);
            self.held_on(&r.route, at, h, path, now, out);
            self.retired.put_back(r);
        } else {
            self.park(h, now);
        }
        self.sample_routes = table;
    }

    fn held_on(
        &mut self,
        route: &WriterRoute,
        at: SeqAt<'_>,
        h: Held,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        match h {
            Held::In(from, s) => self.route_on(route, at, from, s, path, now, out),
            Held::Own(_, batch, count) => {
                self.originate_on(route, at, batch, count, path, now, out)
            }
        }
    }

    /// Routes a run on its writer's `route`, its sequence state at `seq`.
    #[allow(clippy::too_many_arguments)]
    fn route_on(
        &mut self,
        route: &WriterRoute,
        mut seq: SeqAt<'_>,
        from: LinkId,
        s: Samples,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        // Before the sequence check: a run from a link its writer's samples do not come
        // from (any link, for a local writer) must not move the writer's sequence state (a
        // forged far-ahead number would make every real sample after it look seen).
        let c = route.topic.shard(self.idx);
        if !route.accepts_from(from) {
            add(&self.counters.dropped_wrong_link, u64::from(s.count));
            add(&c.dropped_wrong_link, u64::from(s.count));
            return;
        }
        let Some(fresh) = self.check_seq(route, &s, c, &mut seq) else {
            return;
        };
        let s = if fresh.skip > 0 {
            s.skip(fresh.skip)
        } else {
            s
        };
        if !route.links.is_empty() {
            if s.ttl > 1 {
                self.forward_run(route, &s, Some(from), path, now, out);
            } else {
                add(&self.counters.dropped_ttl, u64::from(s.count));
            }
        }
        self.deliver_run(route, s, c, now, out);
    }

    /// Holds a run of a writer the table does not know (see [`Parked`]); the oldest runs
    /// give way at the byte bound.
    fn park(&mut self, h: Held, now: Instant) {
        let n = h.bytes();
        let max = self.cfg.max_parked_sample_bytes;
        if n > max {
            add(&self.counters.dropped_unrouted_samples, h.samples());
            return;
        }
        while self.parked.bytes + n > max {
            let Some((_, old)) = self.parked.runs.pop_front() else {
                break;
            };
            self.parked.bytes -= old.bytes();
            add(&self.counters.dropped_unrouted_samples, old.samples());
        }
        inc(&self.counters.sample_runs_parked);
        self.parked.bytes += n;
        self.parked.runs.push_back((now, h));
    }

    /// A new route table: the parked runs it knows the writer of are routed now, in the order
    /// they arrived (by the inbox's rules: what does not fit a link is dropped, counted,
    /// never waited for); the others keep waiting.
    pub(super) fn replay_parked(&mut self, now: Instant, out: &mut Vec<ShardAction>) {
        if self.parked.runs.is_empty() {
            return;
        }
        let runs = std::mem::take(&mut self.parked.runs);
        self.parked.bytes = 0;
        for (at, h) in runs {
            let known = self
                .sample_routes
                .as_ref()
                .is_some_and(|t| t.get(h.writer()).is_some());
            if !known {
                self.parked.bytes += h.bytes();
                self.parked.runs.push_back((at, h));
                continue;
            }
            self.route_held(h, Path::Inbox, now, out);
        }
    }

    /// Drops (counted) the parked runs older than the timeout.
    pub(super) fn expire_parked(&mut self, now: Instant) {
        let timeout = self.cfg.parked_sample_timeout;
        while let Some((at, _)) = self.parked.runs.front() {
            if now < *at + timeout {
                break;
            }
            let (_, old) = self.parked.runs.pop_front().expect("front exists");
            self.parked.bytes -= old.bytes();
            add(&self.counters.dropped_unrouted_samples, old.samples());
        }
    }

    /// Sends a run on its writer's route (except `except`), with one hop less.
    fn forward_run(
        &mut self,
        route: &WriterRoute,
        s: &Samples,
        except: Option<LinkId>,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let Ok(mut header) = s.header() else {
            inc(&self.counters.oversize_frames);
            return;
        };
        header.set_ttl(s.ttl - 1);
        let n = header.0.len() + s.body.len();
        let frames = u64::from(s.count);
        let to = Targets::Route {
            links: &route.links,
            except,
            topic: &route.topic,
        };
        self.fan_out_with(n, frames, to, path, now, out, || {
            Out::Samples(header, s.body.clone(), frames)
        });
    }

    /// Hands a run to every local reader of its writer's route.
    fn deliver_run(
        &mut self,
        route: &WriterRoute,
        s: Samples,
        c: &TopicCounterSet,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        if let Some(rel) = route.reliable.as_deref() {
            if !rel.local_readers.is_empty() {
                return self.deliver_run_reliable(route, rel, s, c, now, out);
            }
        }
        let n = u64::from(s.count);
        let Some((last, rest)) = route.readers.split_last() else {
            return;
        };
        for reader in rest {
            self.deliver_samples(*reader, s.clone(), c, n, out);
        }
        self.deliver_samples(*last, s, c, n, out);
    }

    /// Hands `samples` (`n` of them) to the local `reader` ([`ShardCore::hand_over`]),
    /// counted for its topic.
    pub(super) fn deliver_samples(
        &mut self,
        reader: EndpointGuid,
        samples: Samples,
        c: &TopicCounterSet,
        n: u64,
        out: &mut Vec<ShardAction>,
    ) {
        add(&c.delivered, n);
        self.hand_over(Delivered::Samples(SampleRun { reader, samples }), out);
    }

    /// What this node's writer `writer` wrote: `count` samples packed as whole Samples
    /// frames by its handle. Queued on the writer's route as one buffer (untouched, as a
    /// `Publisher` batch) and delivered to the local readers it is matched with.
    pub(super) fn originate_samples(
        &mut self,
        writer: EndpointGuid,
        frames: BytesMut,
        count: usize,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let h = Held::Own(writer, frames.freeze(), count);
        self.route_held(h, Path::Origin, now, out)
    }

    /// Sends and delivers a batch of this node's writer on its `route`, its sequence state
    /// at `seq`.
    #[allow(clippy::too_many_arguments)]
    fn originate_on(
        &mut self,
        route: &WriterRoute,
        mut seq: SeqAt<'_>,
        batch: Bytes,
        count: usize,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let c = route.topic.shard(self.idx);
        add(&c.written, count as u64);
        if route.unreached > 0 {
            let lost = count as u64 * u64::from(route.unreached);
            add(&c.dropped_no_route, lost);
            add(&self.counters.dropped_no_route, lost);
        }
        if !route.links.is_empty() {
            let n = batch.len();
            let frames = count as u64;
            let to = Targets::Route {
                links: &route.links,
                except: None,
                topic: &route.topic,
            };
            self.fan_out_with(n, frames, to, path, now, out, || {
                Out::Raw(batch.clone(), n, frames)
            });
        }
        let history = route
            .reliable
            .as_deref()
            .is_some_and(|r| r.writer.is_some());
        if route.readers.is_empty() && !history {
            // Nothing to deliver here: only the writer's sequence state moves (so a copy that
            // comes back over a loop while routes change is a duplicate), read off the last
            // frame's header without walking the samples.
            if let Some(next) = last_seq_of_own_samples(&batch).and_then(|l| l.checked_add(1)) {
                self.advance_seq(route, next, &mut seq);
            }
            return;
        }
        // Each run passes the sequence check too; the handle numbers runs consecutively,
        // so the check never cuts one of its own.
        let mut at = 0;
        while at < batch.len() {
            let Some((s, len)) = split_own_samples(&batch, at) else {
                // The handle packs whole Samples frames; anything else is a bug there, and
                // what is left of the batch cannot be delivered.
                debug_assert!(false, "a writer's batch holds only Samples frames");
                break;
            };
            at += len;
            if history {
                self.record_written(route, &s, now, out);
            }
            if self.check_seq(route, &s, c, &mut seq).is_some() {
                self.deliver_run(route, s, c, now, out);
            }
        }
    }
}
