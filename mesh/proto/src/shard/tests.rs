//! Unit tests of the shard core, driven as a simulation would: no sockets, no tasks, virtual
//! time, `C = ()`.
//!
//! Here the shared harness (`Sim`) and the message path's tests: routing, hops, batches and
//! the delivery sink; a Block publisher's waits and the slow-link rule are in
//! `tests/backpressure.rs`, the links' own tests in `tests/links.rs`, the sample path's in
//! `tests/samples.rs`, reliable topics' in `tests/reliable.rs`.

use super::read::READ_CHUNK;
use super::write::{seal_batch, Taken};
use super::*;
use crate::budget::SlowLinkAction;
use crate::cmd::{NewLink, Out};
use crate::crypto::{RecordOpener, RecordReader, RecordSealer};
use crate::link::{Link, LinkTimers};
use crate::wire::{encode_data_into, Data, DataHeader, Frame, Hello, PROTOCOL_VERSION};
use crate::{dedup_shard, MsgId};
use bytes::{Bytes, BytesMut};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

pub(super) const ME: PeerId = PeerId([1; 16]);
pub(super) const PA: PeerId = PeerId([0xa; 16]);
const PB: PeerId = PeerId([0xb; 16]);
const PC: PeerId = PeerId([0xc; 16]);
const A: LinkId = LinkId(1);
const B: LinkId = LinkId(2);

fn hello(id: PeerId) -> Hello {
    Hello {
        node_id: id,
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 7000,
        group_name: "default".into(),
        nonce: 42,
        eph_pub_key: None,
        identity: None,
        shoal: None,
    }
}

fn timers() -> LinkTimers {
    LinkTimers {
        heartbeat_interval: Duration::from_secs(1),
        heartbeat_timeout: Duration::from_secs(3),
        handshake_timeout: Duration::from_secs(2),
    }
}

/// A link state machine past its handshake, with nothing left to send.
pub(super) fn established(id: LinkId, peer: PeerId, t0: Instant) -> Link {
    let mut l = Link::acceptor(id, hello(ME), timers(), t0);
    l.on_frame(&Frame::Hello(hello(peer)), t0);
    while l.poll_transmit().is_some() {}
    while l.poll_event().is_some() {}
    l
}

/// The harness's [`DeliverySink`]: it takes every delivery and records it, in order (a
/// driver with an event queue that never fills).
#[derive(Clone, Default)]
pub(super) struct Record(Rc<RefCell<Vec<Delivered>>>);

impl DeliverySink for Record {
    fn try_deliver(&mut self, d: Delivered) -> Result<(), Delivered> {
        self.0.borrow_mut().push(d);
        Ok(())
    }
}

/// The actions of the core's calls since the last [`Sim::take`] (this derefs to them), and
/// what the application was handed meanwhile, in its order: what the sink took, then what it
/// gave back (the actions' [`ShardAction::Deliver`]s, which the driver carries out after the
/// call).
#[derive(Debug, Default)]
pub(super) struct Handed {
    actions: Vec<ShardAction>,
    delivered: Vec<Delivered>,
}

impl Handed {
    /// Everything handed to the application, in order.
    pub(super) fn delivered(&self) -> impl Iterator<Item = &Delivered> {
        let given_back = self.actions.iter().filter_map(|a| match a {
            ShardAction::Deliver(d) => Some(d),
            _ => None,
        });
        self.delivered.iter().chain(given_back)
    }
}

impl std::ops::Deref for Handed {
    type Target = Vec<ShardAction>;
    fn deref(&self) -> &Vec<ShardAction> {
        &self.actions
    }
}

impl IntoIterator for Handed {
    type Item = ShardAction;
    type IntoIter = std::vec::IntoIter<ShardAction>;
    fn into_iter(self) -> Self::IntoIter {
        self.actions.into_iter()
    }
}

impl std::ops::DerefMut for Handed {
    fn deref_mut(&mut self) -> &mut Vec<ShardAction> {
        &mut self.actions
    }
}

struct Sim {
    core: ShardCore,
    t0: Instant,
    out: Vec<ShardAction>,
    rec: Record,
}

impl Sim {
    fn new(idx: usize, shards: usize, policy: OverflowPolicy) -> Sim {
        let mut cfg = ShardConfig::new(ME, &MeshConfig::default());
        cfg.policy = policy;
        cfg.slow_link = SlowLinkPolicy {
            after: Duration::from_millis(100),
            action: SlowLinkAction::Drop,
        };
        Sim::with_config(idx, shards, cfg)
    }

    /// Shard `idx` of `shards` configured with `cfg`, delivering into a [`Record`].
    fn with_config(idx: usize, shards: usize, cfg: ShardConfig) -> Sim {
        let t0 = Instant::now();
        let rec = Record::default();
        let core = ShardCore::new(
            idx,
            shards,
            cfg,
            Arc::default(),
            7,
            t0,
            Box::new(rec.clone()),
        );
        Sim {
            core,
            t0,
            out: Vec::new(),
            rec,
        }
    }

    /// A core serving `A` to `PA` and `B` to `PB` (1 MiB queues, Block), its set-up actions
    /// taken; `B`'s budget.
    fn two_links() -> (Sim, Arc<LinkBudget>) {
        let mut s = Sim::new(0, 1, OverflowPolicy::Block);
        s.serve(A, PA, 1 << 20);
        let b = s.serve(B, PB, 1 << 20);
        s.take();
        (s, b)
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn stats(&self) -> crate::stats::ShardStats {
        self.core.counters().snapshot()
    }

    /// Serves `link` to `peer` on this shard and routes `peer` over it.
    fn serve(&mut self, link: LinkId, peer: PeerId, max: usize) -> Arc<LinkBudget> {
        self.serve_with(link, peer, max, None)
    }

    /// Serves B (to PB) with room for 1 MiB, which it drained by 50 ms: the link that
    /// outpaces a congested one (the slow-link rule needs one that drains twice as fast).
    fn serve_fast(&mut self) -> Arc<LinkBudget> {
        let fast = self.serve(B, PB, 1 << 20);
        fast.written(1 << 20, self.at(50));
        fast
    }

    fn serve_with(
        &mut self,
        link: LinkId,
        peer: PeerId,
        max: usize,
        secure: Option<(RecordSealer, RecordOpener)>,
    ) -> Arc<LinkBudget> {
        let budget = Arc::new(LinkBudget::new(max, self.t0));
        let nl = NewLink {
            link,
            peer,
            conn: (),
            leftover: BytesMut::new(),
            secure,
            state: established(link, peer, self.t0),
            budget: budget.clone(),
        };
        let got = self
            .core
            .on_command(ToShard::AddLink(Box::new(nl)), self.t0, &mut self.out);
        assert_eq!(got, Some((link, ())));
        self.install(link, peer, self.core.idx(), &budget);
        budget
    }

    /// Routes `peer` over `link` served by shard `owner`.
    fn install(&mut self, link: LinkId, peer: PeerId, owner: usize, budget: &Arc<LinkBudget>) {
        let cmd: ToShard<()> = ToShard::Install {
            peer,
            link,
            owner,
            budget: budget.clone(),
        };
        assert!(self.core.on_command(cmd, self.t0, &mut self.out).is_none());
    }

    /// `bytes` arrive on `link`; returns whether it is still up.
    fn feed(&mut self, link: LinkId, bytes: &[u8], now: Instant) -> bool {
        let (mut buf, want) = self.core.read_buffer(link).expect("served");
        assert!(want >= READ_CHUNK);
        buf.extend_from_slice(bytes);
        self.core.on_read(link, buf, bytes.len(), now);
        self.read_on(link, now)
    }

    /// `link`'s reader handles what is buffered (after a read, or told
    /// [`ShardAction::ReadOn`]); returns whether the link is still up (a held one is).
    fn read_on(&mut self, link: LinkId, now: Instant) -> bool {
        loop {
            match self.core.read_frames(link, now, &mut self.out) {
                ReadStep::More => continue,
                ReadStep::NeedBytes | ReadStep::Hold => return true,
                ReadStep::Gone => return false,
            }
        }
    }

    /// Everything `link`'s writer would put on the socket now (all writes succeed).
    fn written(&mut self, link: LinkId, now: Instant) -> Vec<u8> {
        let mut wire = Vec::new();
        let mut bufs = Vec::new();
        while self.core.next_write(link, &mut bufs, now, &mut self.out) == WriteStep::Write {
            let n: usize = bufs.iter().map(Bytes::len).sum();
            for b in bufs.drain(..) {
                wire.extend_from_slice(&b);
            }
            self.core.on_written(link, n, now);
        }
        wire
    }

    fn take(&mut self) -> Handed {
        Handed {
            actions: std::mem::take(&mut self.out),
            delivered: std::mem::take(&mut *self.rec.0.borrow_mut()),
        }
    }

    fn publish(&mut self, dst: PeerId, payload: &'static [u8], now: Instant) {
        let p = Publish::One {
            dst,
            payload: Bytes::from_static(payload),
        };
        self.core.publish(p, now, &mut self.out);
    }
}

fn data_frame(src: PeerId, dst: PeerId, counter: u64, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    let id = MsgId::new(&src, counter);
    encode_data_into(&mut b, &src, &dst, &id, ttl, payload).unwrap();
    b.to_vec()
}

/// The Data frames in `wire`.
fn frames(wire: &[u8]) -> Vec<Data> {
    let mut b = BytesMut::from(wire);
    let mut v = Vec::new();
    while let Some(f) = crate::wire::take_frame(&mut b, u32::MAX).unwrap() {
        if let Frame::Data(d) = f {
            v.push(d);
        }
    }
    assert!(b.is_empty());
    v
}

/// The messages handed to the application, in order.
fn deliveries(t: &Handed) -> Vec<&Delivery> {
    t.delivered()
        .filter_map(|d| match d {
            Delivered::Message(m) => Some(m),
            _ => None,
        })
        .collect()
}

#[test]
fn a_broadcast_is_delivered_once_and_forwarded_to_the_other_links_only() {
    let (mut s, _) = Sim::two_links();
    let f = data_frame(PC, PeerId::ZERO, 1, 8, b"hello");
    assert!(s.feed(A, &f, s.at(1)));
    let acts = s.take();
    let d = deliveries(&acts);
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].from, d[0].broadcast), (PC, true));
    assert_eq!(&d[0].payload[..], b"hello");
    assert!(s.written(A, s.at(1)).is_empty(), "split horizon");
    let on_b = frames(&s.written(B, s.at(1)));
    assert_eq!(on_b.len(), 1);
    assert_eq!((on_b[0].ttl, &on_b[0].payload[..]), (7, &b"hello"[..]));

    // The same message again, on the other link: a duplicate, dropped and counted.
    assert!(s.feed(B, &f, s.at(2)));
    assert!(deliveries(&s.take()).is_empty());
    assert!(s.written(A, s.at(2)).is_empty());
    let st = s.stats();
    assert_eq!(
        (
            st.delivered,
            st.dropped_duplicate,
            st.frames_queued,
            st.frames_in
        ),
        (1, 1, 1, 2)
    );
    assert_eq!(st.bytes_in, 2 * f.len() as u64);
}

#[test]
fn a_frame_whose_dedup_state_is_elsewhere_hops_once_to_its_shard() {
    let id = MsgId::new(&PC, 1);
    let owner = dedup_shard(&id, 2);
    let mut s = Sim::new(1 - owner, 2, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.take();
    assert!(s.feed(A, &data_frame(PC, PeerId::ZERO, 1, 8, b"x"), s.at(1)));
    let acts = s.take();
    assert!(
        matches!(&acts[..], [ShardAction::Post { to, msg: ShardToShard::HopData { from: A, data }, busy: IfBusy::Wait }]
            if *to == owner && data.msg_id == id),
        "{acts:?}"
    );
    assert_eq!(s.stats().hops_out, 1);
    assert_eq!(s.stats().delivered, 0, "routed by the owner only");
}

#[test]
fn fan_out_to_a_link_of_another_shard_is_a_reserved_transmit() {
    let mut s = Sim::new(0, 2, OverflowPolicy::Block);
    let remote = Arc::new(LinkBudget::new(1 << 20, s.t0));
    s.install(B, PB, 1, &remote);
    s.publish(PeerId::ZERO, b"abc", s.at(1));
    let acts = s.take();
    let [ShardAction::Post {
        to: 1,
        msg:
            ShardToShard::Transmit {
                link: B,
                out,
                frames: 1,
                originated: true,
            },
        busy: IfBusy::Wait,
    }] = &acts[..]
    else {
        panic!("{acts:?}")
    };
    assert_eq!(out.held(), 58 + 3);
    assert_eq!(remote.queued(), 58 + 3, "reserved before it hops");

    // A frame that hopped here, routed by the inbox, never waits for a ring: it is given back if full.
    let d = Data {
        src: PC,
        dst: PeerId::ZERO,
        msg_id: MsgId::new(&PC, 9),
        ttl: 8,
        payload: Bytes::from_static(b"zz"),
    };
    s.core.on_hop(
        ShardToShard::HopData { from: A, data: d },
        s.at(2),
        &mut s.out,
    );
    let mut acts = s.take();
    assert_eq!(deliveries(&acts).len(), 1);
    let Some(ShardAction::Post { msg, busy, .. }) = acts.drain(..1).next() else {
        panic!("{acts:?}")
    };
    assert_eq!(busy, IfBusy::Drop);
    s.core.unposted(msg, true);
    assert_eq!(s.stats().dropped_queue_full, 1);
    assert_eq!(
        remote.queued(),
        58 + 3,
        "the dropped frame's bytes are back"
    );
}

#[test]
fn a_batch_is_routed_once_and_queued_whole() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    let mut run = BytesMut::new();
    for i in 0..3u8 {
        let id = MsgId::new(&ME, i as u64);
        encode_data_into(&mut run, &ME, &PeerId::ZERO, &id, 8, &[i; 10]).unwrap();
    }
    let bytes = run.to_vec();
    let p = Publish::Batch {
        dst: PeerId::ZERO,
        frames: run,
        count: 3,
    };
    assert_eq!(p.weight(), 3);
    s.core.publish(p, s.at(1), &mut s.out);
    assert!(s.take().is_empty());
    assert_eq!(s.written(A, s.at(1)), bytes);
    assert_eq!(s.written(B, s.at(1)), bytes);
    let st = s.stats();
    assert_eq!((st.originated, st.frames_queued), (3, 6));

    // A batch for this node itself is delivered message by message.
    let mut run = BytesMut::new();
    for i in 0..2u8 {
        let id = MsgId::new(&ME, 10 + i as u64);
        encode_data_into(&mut run, &ME, &ME, &id, 8, &[i; 4]).unwrap();
    }
    let p = Publish::Batch {
        dst: ME,
        frames: run,
        count: 2,
    };
    s.core.publish(p, s.at(2), &mut s.out);
    let acts = s.take();
    let d = deliveries(&acts);
    assert_eq!(d.len(), 2);
    assert!(d.iter().all(|d| d.from == ME && !d.broadcast));
}

/// A sink with room for `room` deliveries in all, that keeps order as the trait asks: once it
/// gave one back, it gives back the rest of the call.
#[derive(Clone, Default)]
struct RoomSink {
    taken: Rc<RefCell<Vec<Delivery>>>,
    room: Rc<std::cell::Cell<usize>>,
    calls: Rc<std::cell::Cell<usize>>,
    refused: bool,
}

impl DeliverySink for RoomSink {
    fn begin_call(&mut self) {
        self.calls.set(self.calls.get() + 1);
        self.refused = false;
    }

    fn try_deliver(&mut self, d: Delivered) -> Result<(), Delivered> {
        if self.refused || self.room.get() == 0 {
            self.refused = true;
            return Err(d);
        }
        self.room.set(self.room.get() - 1);
        if let Delivered::Message(m) = d {
            self.taken.borrow_mut().push(m);
        }
        Ok(())
    }
}

#[test]
fn deliveries_go_to_the_sink_in_place_and_what_it_gives_back_follows_as_actions_in_order() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let sink = RoomSink::default();
    sink.room.set(3);
    let cfg = ShardConfig::new(ME, &MeshConfig::default());
    s.core = ShardCore::new(0, 1, cfg, Arc::default(), 1, s.t0, Box::new(sink.clone()));
    s.serve(A, PA, 1 << 20);
    let mut wire = Vec::new();
    for n in 1..=5u64 {
        wire.extend(data_frame(PA, PeerId::ZERO, n, 1, &[n as u8]));
    }
    assert!(s.feed(A, &wire, s.at(1)));
    // Three fit the sink and became no action; the other two follow, in order, as actions.
    let taken: Vec<u8> = sink.taken.borrow().iter().map(|d| d.payload[0]).collect();
    assert_eq!(taken, vec![1, 2, 3]);
    let actions = s.take();
    let queued: Vec<u8> = deliveries(&actions).iter().map(|d| d.payload[0]).collect();
    assert_eq!(queued, vec![4, 5]);
    assert_eq!(s.stats().delivered, 5, "every delivery is counted once");
    // Room again: the next read's deliveries go to the sink, not behind old actions.
    sink.room.set(10);
    let calls = sink.calls.get();
    assert!(s.feed(A, &data_frame(PA, PeerId::ZERO, 6, 1, &[6]), s.at(2)));
    assert!(sink.calls.get() > calls, "each input call begins anew");
    assert_eq!(sink.taken.borrow().last().map(|d| d.payload[0]), Some(6));
    assert!(deliveries(&s.take()).is_empty());
}

mod backpressure;
mod kernel;
mod links;
mod races;
mod reliable;
mod retired;
mod samples;
