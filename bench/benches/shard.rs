//! The receiving shard's work per message, without sockets or threads: a read buffer holding
//! 1 024 Data frames from one established peer is handed to
//! `ShardCore::read_frames`, which parses, dedups, routes and delivers every frame to a sink
//! that keeps what it is given (as the live node's event outbox does). The live 64 B
//! throughput bench spends about a quarter of its CPU here; this one isolates it so a change
//! to the message path can be measured without the loopback's noise.
//!
//! `cargo bench -p shoal-bench --bench shard -- --warm-up-time 1 --measurement-time 3`
//!
//! Cases: `broadcast_in/{64,1024}`, the receiver of a two-node mesh: every frame new (the
//! dedup cache at its default ceiling evicts one id per insert once full), delivered, none
//! forwarded; `broadcast_in/64_busy_writer`, the same while the link's writer has frames of
//! this node's own in hand (the node also sends on that link); `broadcast_in/64_relayed_to_2`,
//! a node with two more neighbours, each frame also forwarded to both (their writers idle at
//! the start of each read, as after a write); `broadcast_in/64_path_checked`, the `64` case with
//! the reverse-path check on: a table of 256 origins (the peer and 255 nodes behind it) is
//! pushed first (issue 24; compare with `64` in the same run); `broadcast_in/64_mixed` and
//! `64_mixed_path_checked`, frames of 16 origins behind the peer taking turns frame by frame,
//! so that every frame's check is a table lookup (the router remembers the last origin's).

use std::cell::RefCell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use shoal_mesh::proto::budget::LinkBudget;
use shoal_mesh::proto::cmd::{NewLink, ToShard};
use shoal_mesh::proto::link::{Link, LinkTimers};
use shoal_mesh::proto::reverse_path::{PathTable, ReversePaths};
use shoal_mesh::proto::shard::{
    Delivered, DeliverySink, ReadStep, ShardAction, ShardConfig, ShardCore, WriteStep,
};
use shoal_mesh::proto::LinkId;
use shoal_mesh::wire::{encode_data_into, Frame, Hello, INITIAL_TTL, PROTOCOL_VERSION};
use shoal_mesh::{MeshConfig, MsgId, PeerId};

const ME: PeerId = PeerId([0x01; 16]);
const PEER: PeerId = PeerId([0x0a; 16]);
const LINK: LinkId = LinkId(1);
/// Frames per read buffer: a 64 B read of 128 KiB holds about this many.
const FRAMES: usize = 1024;

/// Keeps every delivery, as the node's outbox does until the batch ends.
#[derive(Clone, Default)]
struct Keep(Rc<RefCell<Vec<Delivered>>>);

impl DeliverySink for Keep {
    #[inline]
    fn try_deliver(&mut self, d: Delivered) -> Result<(), Delivered> {
        self.0.borrow_mut().push(d);
        Ok(())
    }
}

fn hello(node_id: PeerId) -> Hello {
    Hello {
        node_id,
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 7000,
        group_name: "default".into(),
        nonce: 1,
        eph_pub_key: None,
        identity: None,
        shoal: None,
    }
}

/// A shard core serving one established link from [`PEER`] (plus `relay_to` more links to
/// other neighbours, routed), delivering into `sink`. With `writer_busy`, the frames the
/// handshake queued on [`LINK`] stay queued, as on a link that this node also sends on (its
/// writer is in a write); otherwise every writer took its frames and went idle.
fn core(sink: Keep, relay_to: u8, writer_busy: bool, t0: Instant) -> ShardCore {
    let cfg = ShardConfig::new(ME, &MeshConfig::default());
    let mut core = ShardCore::new(0, 1, cfg, Arc::default(), 7, t0, Box::new(sink));
    for i in 0..=relay_to {
        let (link, peer) = (LinkId(LINK.0 + u64::from(i)), PeerId([0x0a + i; 16]));
        serve(&mut core, link, peer, t0);
        if !(writer_busy && link == LINK) {
            drain(&mut core, link, t0);
        }
    }
    core
}

/// Serves and routes `link` to `peer`, established.
fn serve(core: &mut ShardCore, link: LinkId, peer: PeerId, t0: Instant) {
    let timers = LinkTimers {
        heartbeat_interval: Duration::from_secs(3600),
        heartbeat_timeout: Duration::from_secs(7200),
        handshake_timeout: Duration::from_secs(3600),
    };
    let mut state = Link::acceptor(link, hello(ME), timers, t0);
    state.on_frame(&Frame::Hello(hello(peer)), t0);
    let budget = Arc::new(LinkBudget::new(1 << 30, t0));
    let nl = NewLink {
        link,
        peer,
        conn: (),
        leftover: BytesMut::new(),
        secure: None,
        state,
        budget: budget.clone(),
    };
    let mut out = Vec::new();
    core.on_command(ToShard::AddLink(Box::new(nl)), t0, &mut out);
    let install: ToShard<()> = ToShard::Install {
        peer,
        link,
        owner: 0,
        budget,
    };
    core.on_command(install, t0, &mut out);
}

/// The reverse-path table of a node whose one neighbour [`PEER`] has 255 more nodes behind it.
fn path_table() -> Arc<PathTable> {
    let behind: Vec<PeerId> = (1..=255u8).map(behind).collect();
    let mut peer_list = behind.clone();
    peer_list.push(ME);
    let me_list = [PEER];
    let back = [PEER];
    let adjacency = std::iter::once((&ME, &me_list[..]))
        .chain(std::iter::once((&PEER, &peer_list[..])))
        .chain(behind.iter().map(|b| (b, &back[..])));
    let rp = ReversePaths::build(
        ME,
        adjacency,
        |_| true,
        MeshConfig::default().relay_redundancy,
    );
    let t = PathTable::new(&rp, &[(PEER, LINK)]);
    assert_eq!(t.len(), 256);
    assert_eq!(
        t.check(&PEER, LINK, Instant::now()),
        shoal_mesh::proto::reverse_path::PathCheck::Toward
    );
    Arc::new(t)
}

/// Everything queued on `link` is written; its writer goes idle, as a live one does.
fn drain(core: &mut ShardCore, link: LinkId, now: Instant) {
    let mut bufs = Vec::new();
    while core.next_write(link, &mut bufs, now, &mut Vec::new()) == WriteStep::Write {
        let n = bufs.drain(..).map(|b| b.len()).sum();
        core.on_written(link, n, now);
    }
}

/// The `i`-th node behind [`PEER`] (1..=255).
fn behind(i: u8) -> PeerId {
    let mut id = [0u8; 16];
    id[0] = 0x80;
    id[1] = i;
    PeerId(id)
}

/// `FRAMES` broadcasts from [`PEER`] with ids `first..`, encoded as they arrive; `mixed`:
/// from 16 nodes behind it in turn instead (each origin's ids still count up by one).
fn frames(first: u64, size: usize, mixed: bool) -> BytesMut {
    let mut b = BytesMut::with_capacity(FRAMES * (size + 64));
    let payload = vec![7u8; size];
    for n in first..first + FRAMES as u64 {
        let (src, counter) = if mixed {
            (behind(1 + (n % 16) as u8), n / 16)
        } else {
            (PEER, n)
        };
        let id = MsgId::new(&src, counter);
        encode_data_into(&mut b, &src, &PeerId::ZERO, &id, INITIAL_TTL, &payload).expect("encodes");
    }
    b
}

/// Hands `bytes` to the core as one read and lets it handle every frame.
fn read_all(core: &mut ShardCore, bytes: BytesMut, now: Instant, out: &mut Vec<ShardAction>) {
    let (mut buf, _) = core.read_buffer(LINK).expect("the link is served");
    let n = bytes.len();
    buf.unsplit(bytes);
    core.on_read(LINK, buf, n, now);
    loop {
        match core.read_frames(LINK, now, out) {
            ReadStep::More => out.clear(),
            ReadStep::NeedBytes => break,
            ReadStep::Gone | ReadStep::Hold => panic!("the link went or waits"),
        }
    }
    assert!(out.is_empty(), "nothing but deliveries: {out:?}");
}

fn broadcast_in(c: &mut Criterion) {
    let mut g = c.benchmark_group("broadcast_in");
    g.throughput(Throughput::Elements(FRAMES as u64));
    for (name, size, relay_to, busy, checked, mixed) in [
        ("64", 64usize, 0u8, false, false, false),
        ("64_path_checked", 64, 0, false, true, false),
        ("64_mixed", 64, 0, false, false, true),
        ("64_mixed_path_checked", 64, 0, false, true, true),
        ("1024", 1024, 0, false, false, false),
        ("64_busy_writer", 64, 0, true, false, false),
        ("64_relayed_to_2", 64, 2, false, false, false),
    ] {
        let t0 = Instant::now();
        let kept = Keep::default();
        let mut c = core(kept.clone(), relay_to, busy, t0);
        if checked {
            c.on_command(
                ToShard::<()>::ReversePaths(path_table()),
                t0,
                &mut Vec::new(),
            );
        }
        let core = RefCell::new(c);
        let mut out = Vec::new();
        let mut next = 0u64;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    kept.0.borrow_mut().clear();
                    for i in 1..=relay_to {
                        drain(&mut core.borrow_mut(), LinkId(LINK.0 + u64::from(i)), t0);
                    }
                    next += FRAMES as u64;
                    frames(next, size, mixed)
                },
                |bytes| {
                    read_all(&mut core.borrow_mut(), bytes, t0, &mut out);
                    black_box(kept.0.borrow().len())
                },
                BatchSize::PerIteration,
            )
        });
        let s = core.borrow().counters().snapshot();
        assert_eq!(s.delivered, next, "every frame was delivered once");
        assert_eq!(s.dropped_off_path, 0);
    }
    g.finish();
}

fn benches() {
    let mut c = Criterion::default().configure_from_args();
    broadcast_in(&mut c);
}

criterion_main!(benches);
