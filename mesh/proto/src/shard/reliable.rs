//! Reliable topics on a shard: the state of the reliable writers and readers whose samples
//! this shard sequences, the routing of the four reliability frames, and the hand-off of
//! what the reliability core decides (deliveries in order, frames to send, losses).
//!
//! Where things live: a writer's samples are sequenced on the shard of its node's id
//! ([`super::samples_shard`]), on every node. So that shard also keeps, on the writer's
//! node, the writer's history ([`ReliableWriter`], one per local reliable writer with a
//! reliable reader or a transient-local history) and, on a reader's node, one
//! [`ReliableReader`] per local reliable reader of it. Every reliability frame names its
//! writer and hops to that shard first, as a run of samples does.
//!
//! Directions (the seed's rule: requests use the writer's address): Heartbeats, Repairs and
//! Gaps go down the writer's tree (its route's links, as samples do); AckNacks go up, hop by
//! hop, on each node's [`WriterRoute::upstream`] link, until the writer's node. A Repair or
//! Gap for a reader on this node stops here; one for another node's reader goes on down.
//!
//! Best-effort readers pay nothing: a route without a reliable side ([`WriterRoute::reliable`]
//! `None`) takes none of these paths, and a best-effort reader of a writer that also has
//! reliable readers is delivered as before.
//!
//! Length: the per-slot state and the routing of the four frames share one take-out /
//! put-back of the slot and one flush of what the states want sent; split by frame, each
//! part would repeat them.
//!
//! **Owns:** the per-slot reliable state, the reliability frames' routing, the conversion of
//! reliable deliveries to [`SampleRun`]s and the write credit's value. **Must not touch:** the
//! reliability protocol itself (`crate::reliable`), routes (the control plane's), delivery to
//! the application (the sink / driver).

use super::action::{Delivered, IfBusy, SamplesLost, ShardAction};
use super::fan_out::{Path, Targets};
use super::samples::samples_shard;
use super::ShardCore;
use crate::cmd::{Out, RelFrame, ShardToShard};
use crate::reliable::{HistoryKind, ReaderEvent, ReliableReader, ReliableWriter, WriterOut};
use crate::stats::{add, inc, TopicCounterSet};
use crate::topics::routes::toward_link;
use crate::topics::{EndpointGuid, ReliableRoute, SampleRoutes, WriterCredit, WriterRoute};
use crate::wire::{Frame, Gap, Repair, Samples};
use crate::LinkId;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Instant;

/// The reliable state of one writer on its shard.
#[derive(Debug)]
struct Slot {
    writer: EndpointGuid,
    /// The route side it was last brought in line with.
    spec: Arc<ReliableRoute>,
    /// The table it was last seen in.
    epoch: u64,
    /// This node's own writer: its history.
    w: Option<WriterSide>,
    /// This node's reliable readers of another node's writer, sorted by GUID.
    readers: Vec<(EndpointGuid, ReliableReader)>,
}

#[derive(Debug)]
struct WriterSide {
    state: ReliableWriter,
    credit: Arc<WriterCredit>,
    keep_all: bool,
    /// The writer's counters when they were last added to the shard's.
    seen: crate::reliable::WriterStats,
    /// The route's links toward its readers' nodes as the last table had them
    /// ([`WriterRoute::toward`]): a node whose link changed gets its resends again at once
    /// ([`ReliableWriter::path_changed`]).
    toward: Vec<([u8; 12], LinkId)>,
}

impl WriterSide {
    /// Moves the credit to what the history has room for now.
    fn update_credit(&self) {
        if !self.keep_all {
            return;
        }
        let room = self.state.room();
        let limit = if room == u32::MAX {
            u64::MAX
        } else {
            (self.state.next_seq() - 1).saturating_add(u64::from(room))
        };
        self.credit.set(limit);
    }
}

impl Drop for WriterSide {
    fn drop(&mut self) {
        // Nobody acknowledges any more (no reliable reader left, or the writer went): the
        // writer's handle must not wait for them.
        self.credit.set(u64::MAX);
    }
}

/// A shard's reliable state (see the [module docs](self)).
#[derive(Debug, Default)]
pub(super) struct Reliable {
    /// By route slot.
    slots: Vec<Option<Box<Slot>>>,
    /// The earliest deadline of any state (may be early: a wake-up finds nothing due).
    next_timer: Option<Instant>,
    /// Deliveries of one reader call, reused.
    scratch: Vec<(u64, Bytes)>,
}

impl Reliable {
    /// Writer states and reader states kept.
    pub(super) fn states(&self) -> (usize, usize) {
        self.slots.iter().flatten().fold((0, 0), |(w, r), s| {
            (w + usize::from(s.w.is_some()), r + s.readers.len())
        })
    }

    /// When some state has work next.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.next_timer
    }

    fn note_timer(&mut self, at: Option<Instant>) {
        if let Some(t) = at {
            self.next_timer = Some(self.next_timer.map_or(t, |n| n.min(t)));
        }
    }
}

impl ShardCore {
    /// A new route table: the reliable states of the writers sequenced here are created,
    /// brought in line with their route (readers matched or gone), or dropped.
    pub(super) fn sync_reliable(&mut self, now: Instant, out: &mut Vec<ShardAction>) {
        let table = self.sample_routes.take();
        if let Some(t) = table.as_deref() {
            self.sync_reliable_with(t, now, out);
        }
        self.sample_routes = table;
    }

    fn sync_reliable_with(&mut self, t: &SampleRoutes, now: Instant, out: &mut Vec<ShardAction>) {
        let epoch = t.epoch();
        for route in t.routes() {
            let Some(rel) = &route.reliable else { continue };
            if samples_shard(&route.writer, self.shards) != self.idx {
                continue;
            }
            let i = route.slot as usize;
            if i >= self.reliable.slots.len() {
                self.reliable.slots.resize_with(i + 1, || None);
            }
            let mut slot = match self.reliable.slots[i].take() {
                Some(s) if s.writer == route.writer => s,
                _ => Box::new(Slot {
                    writer: route.writer,
                    spec: rel.clone(),
                    epoch,
                    w: None,
                    readers: Vec::new(),
                }),
            };
            slot.epoch = epoch;
            self.align(&mut slot, route, rel, now);
            slot.spec = rel.clone();
            self.flush_slot(&mut slot, route, now, out);
            self.reliable.slots[i] = Some(slot);
        }
        for s in self.reliable.slots.iter_mut() {
            if s.as_ref().is_some_and(|s| s.epoch != epoch) {
                *s = None;
            }
        }
    }

    /// Brings `slot` in line with its route's reliable side.
    fn align(&mut self, slot: &mut Slot, route: &WriterRoute, rel: &ReliableRoute, now: Instant) {
        match &rel.writer {
            Some(spec) if route.local => {
                let same = slot
                    .w
                    .as_ref()
                    .is_some_and(|w| Arc::ptr_eq(&w.credit, &spec.credit))
                    && slot.spec.writer.as_ref().is_some_and(|old| {
                        old.keep_last == spec.keep_last
                            && old.max_samples == spec.max_samples
                            && old.lifespan == spec.lifespan
                            && old.transient_local == spec.transient_local
                    });
                if !same {
                    let cfg = self.cfg.reliable.writer(spec);
                    let keep_all = cfg.history == HistoryKind::KeepAll;
                    // A writer whose first reliable reader matches mid-stream: its history
                    // starts at the next sample it writes.
                    let next = self.next_seq_of(route).max(1);
                    slot.w = Some(WriterSide {
                        state: ReliableWriter::starting_at(route.writer, cfg, next),
                        credit: spec.credit.clone(),
                        keep_all,
                        seen: Default::default(),
                        toward: Vec::new(),
                    });
                }
                let w = slot.w.as_mut().expect("just set");
                if w.toward != route.toward {
                    for node in moved(&w.toward, &route.toward) {
                        w.state.path_changed(&node);
                    }
                    w.toward.clone_from(&route.toward);
                }
                let readers: Vec<(EndpointGuid, bool)> = spec
                    .readers
                    .iter()
                    .map(|g| (*g, spec.durable_readers.binary_search(g).is_ok()))
                    .collect();
                w.state.set_readers_durable(&readers, now);
                w.state
                    .set_reader_leases(&spec.readers, &spec.reader_leases);
                w.update_credit();
            }
            _ => slot.w = None,
        }
        // Readers: keep the states of those still listed, start the new ones.
        let mut old = std::mem::take(&mut slot.readers);
        for g in &rel.local_readers {
            match old.iter().position(|(r, _)| r == g) {
                Some(p) => slot.readers.push(old.swap_remove(p)),
                None => slot.readers.push((
                    *g,
                    ReliableReader::new(route.writer, *g, self.cfg.reliable.reader(), now),
                )),
            }
        }
        slot.readers.sort_unstable_by_key(|(g, _)| *g);
    }

    /// Sends what `slot`'s states want sent, reports their losses, moves the credit, and
    /// notes their next deadline.
    fn flush_slot(
        &mut self,
        slot: &mut Slot,
        route: &WriterRoute,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let ttl = self.cfg.initial_ttl;
        if let Some(w) = slot.w.as_mut() {
            while let Some(o) = w.state.poll_transmit(now) {
                let frame = match o {
                    WriterOut::Heartbeat(mut h) => {
                        h.ttl = ttl;
                        inc(&self.counters.reliable_heartbeats);
                        Frame::WriterHeartbeat(h)
                    }
                    WriterOut::Repair(mut r) => {
                        r.ttl = ttl;
                        add(&self.counters.samples_repaired, u64::from(r.count));
                        add(&route.topic.shard(self.idx).repaired, u64::from(r.count));
                        Frame::Repair(r)
                    }
                    WriterOut::Gap(mut g) => {
                        g.ttl = ttl;
                        inc(&self.counters.reliable_gaps);
                        Frame::Gap(g)
                    }
                };
                self.send_down(route, &frame, None, now, out);
            }
            // The writer's own counters, as deltas since the last flush (whatever call moved
            // them: a write, an acknowledgement, a timer).
            let st = w.state.stats();
            add(
                &self.counters.repairs_deferred,
                st.repair_deferred - w.seen.repair_deferred,
            );
            add(&self.counters.samples_expired, st.expired - w.seen.expired);
            add(
                &self.counters.reliable_readers_released,
                st.readers_released - w.seen.readers_released,
            );
            w.seen = st;
            w.update_credit();
            let t = w.state.poll_timeout();
            self.reliable.note_timer(t);
        }
        for (reader, r) in slot.readers.iter_mut() {
            while let Some(mut a) = r.poll_transmit(now) {
                a.ttl = ttl;
                inc(&self.counters.reliable_acknacks);
                self.send_up(route, &Frame::AckNack(a), None, now, out);
            }
            while let Some(ReaderEvent::Lost { first, last }) = r.poll_event() {
                let c = route.topic.shard(self.idx);
                self.deliver_lost(*reader, route.writer, first, last, c, out);
            }
            let t = r.poll_timeout();
            self.reliable.note_timer(t);
        }
    }

    /// The next sequence number the shard expects of `route`'s writer (0: none seen).
    fn next_seq_of(&self, route: &WriterRoute) -> u64 {
        self.writer_seq_next(route)
    }

    /// Encodes `f` and queues it on `route`'s tree links (except `except`): a Repair or a
    /// Gap only on the one toward its reader's node (all of them if the route does not know
    /// it). Never waits: what does not fit a link is dropped (a lost heartbeat or repair is
    /// asked for again).
    fn send_down(
        &mut self,
        route: &WriterRoute,
        f: &Frame,
        except: Option<LinkId>,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        // A Repair or a Gap is for one reader: only the branch toward its node.
        let one = match f {
            Frame::Repair(r) => route.link_toward(&r.reader),
            Frame::Gap(g) => route.link_toward(&g.reader),
            _ => None,
        };
        let single = one.filter(|l| Some(*l) != except).map(|l| [l]);
        let links: &[LinkId] = match &single {
            Some(l) => l,
            None => &route.links,
        };
        if links.iter().all(|l| Some(*l) == except) {
            return;
        }
        let Some(bytes) = encode(f, &self.counters) else {
            return;
        };
        let n = bytes.len();
        let to = Targets::Route {
            links,
            except,
            topic: &route.topic,
        };
        self.fan_out_with(n, 0, to, Path::Inbox, now, out, || {
            Out::Raw(bytes.clone(), n, 0)
        });
    }

    /// Encodes `f` and queues it on `route`'s upstream link (toward the writer's node).
    fn send_up(
        &mut self,
        route: &WriterRoute,
        f: &Frame,
        from: Option<LinkId>,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let Some(up) = route.upstream.filter(|u| Some(*u) != from) else {
            inc(&self.counters.reliable_unrouted);
            return;
        };
        let Some(bytes) = encode(f, &self.counters) else {
            return;
        };
        let n = bytes.len();
        self.fan_out_with(n, 0, Targets::Only(up), Path::Inbox, now, out, || {
            Out::Raw(bytes.clone(), n, 0)
        });
    }

    /// A reliability frame read on `from`: handled here, or handed to the shard that keeps
    /// its writer's state.
    pub(super) fn reliable_in(
        &mut self,
        from: LinkId,
        f: RelFrame,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let owner = samples_shard(f.writer(), self.shards);
        if owner != self.idx {
            inc(&self.counters.hops_out);
            out.push(ShardAction::Post {
                to: owner,
                msg: ShardToShard::HopReliable { from, frame: f },
                busy: IfBusy::Wait,
            });
            return;
        }
        self.route_reliable(from, f, now, out);
    }

    /// Routes a reliability frame whose writer's state is on this shard.
    pub(super) fn route_reliable(
        &mut self,
        from: LinkId,
        f: RelFrame,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let table = self.sample_routes.take();
        match table.as_deref().and_then(|t| t.get(f.writer())) {
            Some(route) if !comes_its_way(route, from, &f) => {
                inc(&self.counters.reliable_wrong_link)
            }
            Some(route) => self.route_reliable_on(route, from, f, now, out),
            None => inc(&self.counters.reliable_unrouted),
        }
        self.sample_routes = table;
    }

    fn route_reliable_on(
        &mut self,
        route: &WriterRoute,
        from: LinkId,
        f: RelFrame,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let mut slot = self
            .reliable
            .slots
            .get_mut(route.slot as usize)
            .and_then(|s| s.take_if(|s| s.writer == route.writer));
        match f {
            RelFrame::AckNack(mut a) => {
                if route.local {
                    match slot.as_mut().and_then(|s| s.w.as_mut()) {
                        Some(w) => {
                            let ignored = |s: crate::reliable::WriterStats| {
                                s.acks_ignored_unknown_reader
                                    + s.acks_ignored_future
                                    + s.acks_ignored_stale
                                    + s.acks_ignored_far
                            };
                            let before = ignored(w.state.stats());
                            w.state.on_acknack(&a, now);
                            add(
                                &self.counters.reliable_acks_ignored,
                                ignored(w.state.stats()) - before,
                            );
                        }
                        // No history here (no reliable reader matched as far as this node
                        // knows): nothing to repair.
                        None => inc(&self.counters.reliable_unrouted),
                    }
                } else if a.ttl > 1 {
                    a.ttl -= 1;
                    self.send_up(route, &Frame::AckNack(a), Some(from), now, out);
                } else {
                    inc(&self.counters.dropped_ttl);
                }
            }
            RelFrame::Heartbeat(mut h) => {
                if let Some(s) = slot.as_mut() {
                    for (_, r) in s.readers.iter_mut() {
                        let held = r.stats().heartbeats_held;
                        r.on_heartbeat(&h, now);
                        add(
                            &self.counters.reliable_held,
                            r.stats().heartbeats_held - held,
                        );
                    }
                }
                if h.ttl > 1 {
                    h.ttl -= 1;
                    self.send_down(route, &Frame::WriterHeartbeat(h), Some(from), now, out);
                }
            }
            RelFrame::Repair(r) => {
                let reader = r.reader;
                let forward = || {
                    (r.ttl > 1).then(|| {
                        Frame::Repair(Repair {
                            ttl: r.ttl - 1,
                            ..r.clone()
                        })
                    })
                };
                self.deliver_or_pass_down(
                    route,
                    slot.as_deref_mut(),
                    reader,
                    from,
                    now,
                    out,
                    forward,
                    |st, d| st.on_repair(&r, now, d),
                );
            }
            RelFrame::Gap(g) => {
                let forward = || {
                    (g.ttl > 1).then(|| {
                        Frame::Gap(Gap {
                            ttl: g.ttl - 1,
                            ..g
                        })
                    })
                };
                self.deliver_or_pass_down(
                    route,
                    slot.as_deref_mut(),
                    g.reader,
                    from,
                    now,
                    out,
                    forward,
                    |st, d| st.on_gap(&g, now, d),
                );
            }
        }
        if let Some(mut s) = slot {
            self.flush_slot(&mut s, route, now, out);
            self.reliable.slots[route.slot as usize] = Some(s);
        }
    }

    /// A Repair or a Gap (`feed`) for `reader`: fed to its state when it is on this node,
    /// else sent on down toward its node with one hop less (`forward`, `None` without hops
    /// left).
    #[allow(clippy::too_many_arguments)]
    fn deliver_or_pass_down(
        &mut self,
        route: &WriterRoute,
        slot: Option<&mut Slot>,
        reader: EndpointGuid,
        from: LinkId,
        now: Instant,
        out: &mut Vec<ShardAction>,
        forward: impl FnOnce() -> Option<Frame>,
        feed: impl FnOnce(&mut ReliableReader, &mut dyn FnMut(u64, Bytes)),
    ) {
        let here = slot.and_then(|s| s.readers.iter_mut().find(|(g, _)| *g == reader));
        match here {
            Some((_, state)) => {
                let mut got = std::mem::take(&mut self.reliable.scratch);
                let held = state.stats().gaps_held;
                feed(state, &mut |seq, p| got.push((seq, p)));
                add(&self.counters.reliable_held, state.stats().gaps_held - held);
                let c = route.topic.shard(self.idx);
                self.deliver_ordered(route.writer, reader, state, got, c, out);
            }
            None => match forward() {
                Some(f) => self.send_down(route, &f, Some(from), now, out),
                None => inc(&self.counters.dropped_ttl),
            },
        }
    }

    /// A fresh run for `route`'s local readers, some of them reliable: each reliable one
    /// gets it through its reader state (in order, exactly once), the others directly.
    pub(super) fn deliver_run_reliable(
        &mut self,
        route: &WriterRoute,
        rel: &ReliableRoute,
        s: Samples,
        c: &TopicCounterSet,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let n = u64::from(s.count);
        let mut slot = self
            .reliable
            .slots
            .get_mut(route.slot as usize)
            .and_then(|x| x.take_if(|x| x.writer == route.writer));
        for reader in &route.readers {
            if rel.local_readers.binary_search(reader).is_err() {
                self.deliver_samples(*reader, s.clone(), c, n, out);
                continue;
            }
            let Some(state) = slot
                .as_mut()
                .and_then(|x| x.readers.iter_mut().find(|(g, _)| g == reader))
                .map(|(_, st)| st)
            else {
                // The table names the reader but its state is not here yet (it is created
                // with the table): deliver as best effort rather than lose it.
                self.deliver_samples(*reader, s.clone(), c, n, out);
                continue;
            };
            if state.accept_in_order(s.first_seq, s.count, now) {
                // In order, as it came (the common case): the run itself, no payload walked.
                self.deliver_samples(*reader, s.clone(), c, n, out);
                continue;
            }
            let mut got = std::mem::take(&mut self.reliable.scratch);
            state.on_samples(s.first_seq, s.payloads(), now, &mut |seq, p| {
                got.push((seq, p))
            });
            self.deliver_ordered(route.writer, *reader, state, got, c, out);
        }
        if let Some(mut x) = slot {
            self.flush_slot(&mut x, route, now, out);
            self.reliable.slots[route.slot as usize] = Some(x);
        }
    }

    /// Hands `got` (consecutive or not, in delivery order) to `reader` as runs of
    /// consecutive samples, with the loss reports its reader `state` raised meanwhile in
    /// between, in the reader's sample order (a report comes before the samples above its
    /// range); gives the scratch vector back.
    fn deliver_ordered(
        &mut self,
        writer: EndpointGuid,
        reader: EndpointGuid,
        state: &mut ReliableReader,
        mut got: Vec<(u64, Bytes)>,
        c: &TopicCounterSet,
        out: &mut Vec<ShardAction>,
    ) {
        let mut i = 0;
        while let Some(ReaderEvent::Lost { first, last }) = state.poll_event() {
            let j = got[i..]
                .iter()
                .position(|(seq, _)| *seq > last)
                .map_or(got.len(), |k| i + k);
            self.deliver_runs(writer, reader, &got[i..j], c, out);
            i = j;
            self.deliver_lost(reader, writer, first, last, c, out);
        }
        self.deliver_runs(writer, reader, &got[i..], c, out);
        got.clear();
        self.reliable.scratch = got;
    }

    /// Hands `got` (in delivery order) to `reader` as runs of consecutive samples.
    fn deliver_runs(
        &mut self,
        writer: EndpointGuid,
        reader: EndpointGuid,
        got: &[(u64, Bytes)],
        c: &TopicCounterSet,
        out: &mut Vec<ShardAction>,
    ) {
        let mut i = 0;
        while i < got.len() {
            let mut j = i + 1;
            while j < got.len() && got[j].0 == got[j - 1].0 + 1 && j - i < usize::from(u16::MAX) {
                j += 1;
            }
            match Samples::new(0, writer, got[i].0, got[i..j].iter().map(|(_, p)| p)) {
                Ok(run) => {
                    let n = u64::from(run.count);
                    self.deliver_samples(reader, run, c, n, out)
                }
                Err(_) => inc(&self.counters.oversize_frames),
            }
            i = j;
        }
    }

    /// Hands `reader`'s loss report (`first ..= last` of `writer`) to the application, in
    /// line with its samples ([`ShardCore::hand_over`]), counted.
    fn deliver_lost(
        &mut self,
        reader: EndpointGuid,
        writer: EndpointGuid,
        first: u64,
        last: u64,
        c: &TopicCounterSet,
        out: &mut Vec<ShardAction>,
    ) {
        add(&self.counters.samples_lost, last - first + 1);
        add(&c.lost, last - first + 1);
        let lost = SamplesLost {
            reader,
            writer,
            first,
            last,
        };
        self.hand_over(Delivered::Lost(lost), out);
    }

    /// What this node's reliable writer wrote (one Samples frame of its batch), into its
    /// history; the credit and what the history wants sent follow.
    pub(super) fn record_written(
        &mut self,
        route: &WriterRoute,
        s: &Samples,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let Some(mut slot) = self
            .reliable
            .slots
            .get_mut(route.slot as usize)
            .and_then(|x| x.take_if(|x| x.writer == route.writer))
        else {
            return;
        };
        if let Some(w) = slot.w.as_mut() {
            let over = w.state.stats().held_over_limit;
            if let Err((taken, _)) = w.state.on_written_run(s.first_seq, &s.body, s.count, now) {
                // Not the writer's next samples, or a malformed batch (neither comes from the
                // handle): sent, but not held for repair.
                add(&self.counters.history_refused, u64::from(s.count - taken));
            }
            add(
                &self.counters.history_over_limit,
                w.state.stats().held_over_limit - over,
            );
        }
        self.flush_slot(&mut slot, route, now, out);
        self.reliable.slots[route.slot as usize] = Some(slot);
    }

    /// Tells `w` which of its readers' nodes the route reaches over a link whose peer
    /// acknowledges nothing new ([`LinkBudget::is_unanswered`], whichever shard serves the
    /// link): their readers are waited for through it ([`ReliableWriter::path_stalled`]).
    /// Looked at on the writer's timers (every heartbeat period while a reader owes an
    /// acknowledgement), never per write.
    ///
    /// [`LinkBudget::is_unanswered`]: crate::budget::LinkBudget::is_unanswered
    fn note_stalled_paths(&self, w: &mut WriterSide, now: Instant) {
        if !w.state.awaits_readers() {
            return;
        }
        for (node, link) in &w.toward {
            if self
                .owners
                .get(link)
                .is_some_and(|(_, b)| b.is_unanswered())
            {
                w.state.path_stalled(node, now);
            }
        }
    }

    /// Timers of the reliable states (heartbeats, acknowledgements, repairs, sync requests).
    pub(super) fn reliable_timeout(&mut self, now: Instant, out: &mut Vec<ShardAction>) {
        if self.reliable.next_timer.is_none_or(|t| now < t) {
            return;
        }
        self.reliable.next_timer = None;
        let table = self.sample_routes.take();
        if let Some(t) = table.as_deref() {
            for i in 0..self.reliable.slots.len() {
                let Some(mut slot) = self.reliable.slots[i].take() else {
                    continue;
                };
                // A writer gone from the table leaves its state behind (dropped here).
                if let Some(route) = t.get(&slot.writer) {
                    if let Some(w) = slot.w.as_mut() {
                        self.note_stalled_paths(w, now);
                        w.state.handle_timeout(now);
                    }
                    for (_, r) in slot.readers.iter_mut() {
                        r.handle_timeout(now);
                    }
                    self.flush_slot(&mut slot, route, now, out);
                    self.reliable.slots[i] = Some(slot);
                }
            }
        }
        self.sample_routes = table;
    }
}

/// `f` as bytes, or `None` (counted) if it cannot be encoded.
fn encode(f: &Frame, counters: &crate::stats::Counters) -> Option<Bytes> {
    let mut b = BytesMut::with_capacity(f.encoded_len());
    match f.encode(&mut b) {
        Ok(()) => Some(b.freeze()),
        Err(_) => {
            inc(&counters.oversize_frames);
            None
        }
    }
}

/// The reader nodes whose link differs between two [`WriterRoute::toward`] lists: another
/// link, or listed in one only. Sorted.
pub(super) fn moved(old: &[([u8; 12], LinkId)], new: &[([u8; 12], LinkId)]) -> Vec<[u8; 12]> {
    let mut out: Vec<[u8; 12]> = old
        .iter()
        .chain(new)
        .map(|(node, _)| *node)
        .filter(|node| toward_link(old, node) != toward_link(new, node))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// True when `f`, read on `from`, travels the way its kind does for `route`'s writer: an
/// AckNack comes up from the route's link toward its reader's node
/// ([`WriterRoute::link_toward`]: on the writer's node and on every relay, only that link
/// carries that reader's acknowledgements; a reader the route does not lead to has none); a
/// Heartbeat, Repair or Gap comes down from where the writer's samples come
/// ([`WriterRoute::accept_from`]; never in on a link for a local writer). Anything else is a
/// forgery or a copy along a tree this node does not see yet: a stranger's Gap would make a
/// reader skip samples it can still get, its AckNack (naming another node's reader) release
/// history that reader still needs, or, with a count far ahead, make that reader's own
/// AckNacks look stale.
fn comes_its_way(route: &WriterRoute, from: LinkId, f: &RelFrame) -> bool {
    match f {
        RelFrame::AckNack(a) => route.link_toward(&a.reader) == Some(from),
        RelFrame::Heartbeat(_) | RelFrame::Repair(_) | RelFrame::Gap(_) => route.accepts_from(from),
    }
}
