//! Topic samples on a shard: what a local writer wrote, and runs of samples read from links,
//! sent along their writer's route and delivered to the matched local readers.
//!
//! A run (one Samples frame: consecutive sequence numbers of one writer) is handled whole:
//! one route lookup by writer GUID in the control plane's latest [`SampleRoutes`] table, one
//! sequence check against the writer's state (indexed by the route's stable slot, so it
//! survives a new table), one reservation per link and one hand-off per local reader. A run's
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
//! **Owns:** the sample path's decisions (route, sequence check, fan-out, delivery, counters).
//! **Must not touch:** how routes are computed (the control plane's `topics`) or how a
//! delivery reaches the application (the driver's [`super::DeliverySink`]).

use super::action::{Delivered, IfBusy, SampleRun, ShardAction};
use super::fan_out::{Path, Targets};
use super::ShardCore;
use crate::cmd::{Out, ShardToShard};
use crate::stats::{add, inc, TopicCounterSet};
use crate::topics::{EndpointGuid, SampleRoutes, WriterRoute};
use crate::wire::{last_seq_of_own_samples, split_own_samples, Samples};
use crate::LinkId;
use bytes::{Bytes, BytesMut};
use std::time::Instant;

/// The shard (of `shards`) that keeps the sequence state of `writer`'s samples: its node's
/// ([`crate::id::node_shard`]), so a node's own writers are checked where they publish.
pub fn samples_shard(writer: &EndpointGuid, shards: usize) -> usize {
    crate::id::node_shard(writer, shards)
}

/// One writer's sequence state on its shard.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WriterSeq {
    /// The writer whose state this is (a slot is reused only after its writer is gone).
    writer: EndpointGuid,
    /// The next sequence number expected (0: nothing seen yet).
    next: u64,
    /// A run ended at `u64::MAX` (the decoder's bound): nothing can follow, and `next`
    /// stays at `u64::MAX` instead of overflowing.
    ended: bool,
}

impl WriterSeq {
    /// The state of `writer` before any of its samples.
    fn new(writer: EndpointGuid) -> WriterSeq {
        WriterSeq {
            writer,
            next: 0,
            ended: false,
        }
    }

    /// The sequence check of run `s`: counts duplicates and gaps in `c` and advances the
    /// state; `None` when every sample of the run was seen before.
    fn admit(&mut self, s: &Samples, c: &TopicCounterSet) -> Option<Fresh> {
        let last = s.last_seq();
        if self.next > last || self.ended {
            add(&c.dropped_duplicate, u64::from(s.count));
            return None;
        }
        let skip = self.next.saturating_sub(s.first_seq);
        if skip > 0 {
            add(&c.dropped_duplicate, skip);
        } else if self.next != 0 && s.first_seq > self.next {
            add(&c.missed, s.first_seq - self.next);
        }
        self.next = last.saturating_add(1);
        self.ended = last == u64::MAX;
        // `skip` < count here: `next <= last`.
        Some(Fresh { skip: skip as u16 })
    }
}

/// Where the sequence state of a route's writer is kept.
enum SeqAt<'a> {
    /// This shard's state, at the route's slot.
    Slot,
    /// A retired route's own copy (its slot may be another writer's now).
    Retired(&'a mut WriterSeq),
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

/// What a sequence check lets through of a run.
struct Fresh {
    /// Samples at the head of the run already seen.
    skip: u16,
}

impl ShardCore {
    /// The sequence state of `route`'s writer at `at`.
    fn seq_state<'a>(
        &'a mut self,
        route: &WriterRoute,
        at: &'a mut SeqAt<'_>,
    ) -> &'a mut WriterSeq {
        match at {
            SeqAt::Retired(st) => st,
            SeqAt::Slot => {
                let slot = route.slot as usize;
                if slot >= self.writer_seqs.len() {
                    self.writer_seqs.resize(slot + 1, WriterSeq::default());
                }
                let st = &mut self.writer_seqs[slot];
                if st.writer != route.writer {
                    *st = WriterSeq::new(route.writer);
                }
                st
            }
        }
    }

    /// The sequence check of a run of `route`'s writer (see [`WriterSeq::admit`]).
    fn check_seq(
        &mut self,
        route: &WriterRoute,
        s: &Samples,
        c: &TopicCounterSet,
        at: &mut SeqAt<'_>,
    ) -> Option<Fresh> {
        self.seq_state(route, at).admit(s, c)
    }

    /// The next sequence number this shard expects of `route`'s writer (0: none seen).
    pub(super) fn writer_seq_next(&self, route: &WriterRoute) -> u64 {
        self.writer_seqs
            .get(route.slot as usize)
            .filter(|st| st.writer == route.writer)
            .map_or(0, |st| st.next)
    }

    /// Moves `route`'s writer's state to expect `next` (this node's own writer, whose runs
    /// are consecutive).
    fn advance_seq(&mut self, route: &WriterRoute, next: u64, at: &mut SeqAt<'_>) {
        *self.seq_state(route, at) = WriterSeq {
            writer: route.writer,
            next,
            ended: false,
        };
    }

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
        // The table is taken out for the run rather than reference-counted: every shard
        // holds the same `Arc`, and a count per run would bounce its cache line between them.
        let table = self.sample_routes.take();
        self.route_run(table.as_deref(), from, s, path, now, out);
        self.sample_routes = table;
    }

    fn route_run(
        &mut self,
        routes: Option<&SampleRoutes>,
        from: LinkId,
        s: Samples,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        if let Some(route) = routes.and_then(|t| t.get(&s.writer)) {
            return self.route_on(route, SeqAt::Slot, from, s, path, now, out);
        }
        match self.retired.take(&s.writer) {
            Some(mut r) => {
                inc(&self.counters.sample_runs_after_removal);
                self.route_on(
                    &r.route,
                    SeqAt::Retired(&mut r.seq),
                    from,
                    s,
                    path,
                    now,
                    out,
                );
                self.retired.put_back(r);
            }
            None => self.park(Held::In(from, s), now),
        }
    }

    /// Routes a run on its writer's `route`, its sequence state `at`.
    #[allow(clippy::too_many_arguments)]
    fn route_on(
        &mut self,
        route: &WriterRoute,
        mut at: SeqAt<'_>,
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
        let Some(fresh) = self.check_seq(route, &s, c, &mut at) else {
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
            match h {
                Held::In(from, s) => self.route_samples(from, s, Path::Inbox, now, out),
                Held::Own(w, b, n) => self.originate_samples_on(w, b, n, Path::Inbox, now, out),
            }
        }
    }

    /// A new route table `new` replaces the current one: the writers it says are gone
    /// ([`SampleRoutes::removed`]) whose runs are checked here keep their last route a
    /// while ([`super::retired`]); those it names again come back with the sequence state
    /// their retired route reached.
    pub(super) fn retire_dropped(&mut self, new: &SampleRoutes, now: Instant) {
        if !self.retired.is_empty() {
            for route in new.routes() {
                let Some(r) = self.retired.take(&route.writer) else {
                    continue;
                };
                let mut slot = SeqAt::Slot;
                let st = self.seq_state(route, &mut slot);
                if st.next < r.seq.next || r.seq.ended {
                    *st = r.seq;
                }
            }
        }
        if new.removed().is_empty() || self.cfg.parked_sample_timeout.is_zero() {
            return;
        }
        let Some(old) = self.sample_routes.take() else {
            return;
        };
        for w in new.removed() {
            if samples_shard(w, self.shards) != self.idx {
                continue;
            }
            let Some(route) = old.get(w) else { continue };
            let seq = self
                .writer_seqs
                .get(route.slot as usize)
                .filter(|st| st.writer == route.writer)
                .copied()
                .unwrap_or(WriterSeq::new(route.writer));
            let max = self.cfg.max_retired_routes;
            self.retired.retire(route.clone(), seq, now, max);
        }
        self.sample_routes = Some(old);
    }

    /// Forgets the retired routes older than the timeout.
    pub(super) fn expire_retired(&mut self, now: Instant) {
        self.retired.expire(now, self.cfg.parked_sample_timeout);
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
        self.originate_samples_on(writer, frames.freeze(), count, Path::Origin, now, out)
    }

    fn originate_samples_on(
        &mut self,
        writer: EndpointGuid,
        batch: Bytes,
        count: usize,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        // Taken out for the batch, as in `route_samples`.
        let table = self.sample_routes.take();
        self.originate_run(table.as_deref(), writer, batch, count, path, now, out);
        self.sample_routes = table;
    }

    #[allow(clippy::too_many_arguments)]
    fn originate_run(
        &mut self,
        routes: Option<&SampleRoutes>,
        writer: EndpointGuid,
        batch: Bytes,
        count: usize,
        path: Path,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        if let Some(route) = routes.and_then(|t| t.get(&writer)) {
            return self.originate_on(route, SeqAt::Slot, batch, count, path, now, out);
        }
        match self.retired.take(&writer) {
            // Written before the writer's removal reached the control plane.
            Some(mut r) => {
                inc(&self.counters.sample_runs_after_removal);
                let at = SeqAt::Retired(&mut r.seq);
                self.originate_on(&r.route, at, batch, count, path, now, out);
                self.retired.put_back(r);
            }
            // The table naming a new writer has not reached the shard yet: held until one
            // names it, or counted.
            None => self.park(Held::Own(writer, batch, count), now),
        }
    }

    /// Sends and delivers a batch of this node's writer on its `route`, its sequence state
    /// `at`.
    #[allow(clippy::too_many_arguments)]
    fn originate_on(
        &mut self,
        route: &WriterRoute,
        mut seq_at: SeqAt<'_>,
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
                self.advance_seq(route, next, &mut seq_at);
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
            if self.check_seq(route, &s, c, &mut seq_at).is_some() {
                self.deliver_run(route, s, c, now, out);
            }
        }
    }
}
