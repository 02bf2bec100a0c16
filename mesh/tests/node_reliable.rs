//! Reliable topics on live nodes in one process, on loopback: a reliable reader gets every
//! sample it is owed exactly once, in order, across a cut link, a relay that dies and is
//! replaced, and a reader cut off for a while; a keep-all writer waits for a stalled reader
//! until the reader's lease expires; a keep-last writer's replaced samples are reported
//! lost; a late transient-local reader gets the history first; a best-effort reader of the
//! same writer keeps its own path. Every wait is for a condition (bounded), never a sleep.

mod node_support;

use node_support::wiring::CutProxy;
use node_support::{block_on, ep, fast, wait_connected, wait_until, Node};
use shoal_mesh::topics::{
    DurabilityKind, EndpointGuid, Limit, QosDuration, Reader, Reliability, ReliabilityKind,
    ResourceLimits, Topic, TopicsConfig, Writer,
};
use shoal_mesh::{Event, MeshBuilder, PublishError};
use std::time::{Duration, Instant};

const T: &str = "reliable/stream";

/// [`fast`] with a quick announce cycle and a lease of `lease_ms`.
fn node(lease_ms: u64) -> MeshBuilder {
    fast().topics(TopicsConfig {
        announce_period: Duration::from_millis(200),
        participant_lease: Duration::from_millis(lease_ms),
        ..TopicsConfig::default()
    })
}

fn reliable_topic() -> Topic {
    Topic::new(T, "Blob").reliable()
}

/// A reliable keep-all writer's topic whose writes wait at most `blocking`.
fn keep_all(max_samples: u32, blocking: Duration) -> Topic {
    reliable_topic()
        .history_keep_all()
        .resource_limits(ResourceLimits {
            max_samples: Limit::AtMost(max_samples),
            ..ResourceLimits::default()
        })
        .reliability(Reliability {
            kind: ReliabilityKind::Reliable,
            max_blocking_time: QosDuration::from_nanos(blocking.as_nanos() as u64),
        })
}

/// The seqs `n` delivered to `reader` (from writer `w` only), in delivery order.
fn seqs(n: &Node, reader: EndpointGuid, w: EndpointGuid) -> Vec<u64> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Sample {
                reader: r,
                writer,
                seq,
                payload,
            } if r == reader && writer == w => {
                assert_eq!(&payload[..8], &seq.to_be_bytes(), "sample {seq}'s payload");
                Some(seq)
            }
            _ => None,
        })
        .collect()
}

/// The `SamplesLost` ranges `n` raised for `reader`.
fn lost(n: &Node, reader: EndpointGuid) -> Vec<(u64, u64)> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::SamplesLost {
                reader: r,
                first,
                last,
                ..
            } if r == reader => Some((first, last)),
            _ => None,
        })
        .collect()
}

fn matched(n: &Node, w: EndpointGuid, r: EndpointGuid) -> bool {
    n.rec
        .has(|e| matches!(e, Event::Matched { writer, reader, .. } if *writer == w && *reader == r))
}

fn unmatched(n: &Node, w: EndpointGuid, r: EndpointGuid) -> bool {
    n.rec.has(
        |e| matches!(e, Event::Unmatched { writer, reader, .. } if *writer == w && *reader == r),
    )
}

/// A (writer's node) and B, B dialing A through a proxy that can cut and heal their link.
fn pair_through_proxy(lease_ms: u64) -> ([Node; 2], CutProxy) {
    let a = Node::start(node(lease_ms));
    let proxy = CutProxy::start(a.port());
    let b = Node::start(node(lease_ms).static_peer(ep(proxy.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    (nodes, proxy)
}

/// A writer of `wt` on `a` and a reader of `rt` on `b`, matched on both sides.
fn open(a: &Node, b: &Node, wt: Topic, rt: Topic) -> (Writer, Reader) {
    let w = a.mesh.writer(wt).unwrap();
    let r = b.mesh.reader(rt).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(a, wg, rg) && matched(b, wg, rg)
    });
    (w, r)
}

/// Cuts the proxied link and waits until A sees it gone.
fn cut(proxy: &CutProxy, a: &Node, b: &Node) {
    proxy.cut();
    wait_until(20, "A sees the link gone", || !a.connected_to(b));
}

/// Heals the proxied link and waits until both ends are linked again.
fn heal(proxy: &CutProxy, a: &Node, b: &Node) {
    proxy.heal();
    wait_until(30, "B is back", || a.connected_to(b) && b.connected_to(a));
}

/// Sample `seq`'s payload: its number, then filler.
fn payload(seq: u64) -> Vec<u8> {
    let mut p = vec![0x5a; 64];
    p[..8].copy_from_slice(&seq.to_be_bytes());
    p
}

/// Writes samples numbered up to `last` (blocking), flushing every `batch`.
fn write_to(w: &mut Writer, last: u64, batch: u64) {
    while w.next_seq() <= last {
        let seq = w.next_seq();
        assert_eq!(w.write_blocking(&payload(seq)).unwrap(), seq);
        if seq % batch == 0 {
            w.flush_blocking().unwrap();
        }
    }
    w.flush_blocking().unwrap();
}

/// Waits until `reader` has every seq of `1..=last` exactly once, in order.
fn wait_complete(n: &Node, reader: EndpointGuid, w: EndpointGuid, last: u64, secs: u64) {
    wait_until(secs, &format!("the reader has 1..={last}"), || {
        seqs(n, reader, w).len() as u64 >= last
    });
    let got = seqs(n, reader, w);
    let want: Vec<u64> = (1..=last).collect();
    assert_eq!(got.len(), want.len(), "no sample twice");
    if got != want {
        let first_bad = got.iter().zip(&want).position(|(a, b)| a != b);
        panic!("every sample once, in order; first difference at index {first_bad:?}");
    }
}

/// A writer on A, a reliable reader on C, links A–B, B–C and A–C (through a proxy): the
/// direct link is cut in the middle of a 10 000-sample stream and the relay path takes over.
#[test]
fn a_cut_link_in_mid_stream_loses_nothing_and_duplicates_nothing() {
    const N: u64 = 10_000;
    let a = Node::start(node(5000));
    let proxy = CutProxy::start(a.port());
    let b = Node::start(node(5000).static_peer(ep(a.port())));
    let c = Node::start(
        node(5000)
            .static_peer(ep(b.port()))
            .static_peer(ep(proxy.port())),
    );
    let nodes = [a, b, c];
    wait_connected(&nodes, &[(0, 1), (1, 2), (0, 2)]);
    let (a, c) = (&nodes[0], &nodes[2]);
    let mut w = a
        .mesh
        .writer(keep_all(4096, Duration::from_secs(20)))
        .unwrap();
    let r = c.mesh.reader(reliable_topic()).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(a, wg, rg) && matched(c, wg, rg)
    });
    write_to(&mut w, N / 4, 50);
    wait_until(30, "C has the first quarter", || {
        seqs(c, rg, wg).len() as u64 >= N / 8
    });
    proxy.cut();
    write_to(&mut w, N, 50);
    wait_complete(c, rg, wg, N, 60);
    assert!(lost(c, rg).is_empty(), "nothing reported lost");
    drop((w, r));
}

/// A line A – B – C: the relay B is stopped in the middle of the stream and a new relay
/// takes its place; the reader still gets everything once, in order.
#[test]
fn a_relay_killed_and_replaced_loses_nothing() {
    const N: u64 = 6_000;
    let a = Node::start(node(10_000));
    let c = Node::start(node(10_000));
    let b = Node::start(
        node(10_000)
            .static_peer(ep(a.port()))
            .static_peer(ep(c.port())),
    );
    let mut nodes = vec![a, c, b];
    wait_connected(&nodes, &[(0, 2), (1, 2)]);
    let mut w = nodes[0]
        .mesh
        .writer(keep_all(8192, Duration::from_secs(30)))
        .unwrap();
    let r = nodes[1].mesh.reader(reliable_topic()).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(&nodes[0], wg, rg) && matched(&nodes[1], wg, rg)
    });
    write_to(&mut w, N / 3, 50);
    wait_until(30, "C has some", || !seqs(&nodes[1], rg, wg).is_empty());
    let old = nodes.pop().expect("the relay");
    old.mesh.stop();
    drop(old);
    // Written while no path exists: kept in A's history (keep-all, room for all of it).
    write_to(&mut w, 2 * N / 3, 50);
    let b2 = Node::start(
        node(10_000)
            .static_peer(ep(nodes[0].port()))
            .static_peer(ep(nodes[1].port())),
    );
    nodes.push(b2);
    wait_connected(&nodes, &[(0, 2), (1, 2)]);
    write_to(&mut w, N, 50);
    wait_complete(&nodes[1], rg, wg, N, 60);
    assert!(lost(&nodes[1], rg).is_empty());
    drop((w, r));
}

/// A keep-all writer of 100 samples whose only reliable reader is cut off: its writes wait
/// (and fail after `max_blocking_time`, `try_write` at once) until the reader's lease
/// expires and it is unmatched, which releases them.
#[test]
fn a_stalled_reader_makes_keep_all_writes_wait_until_its_lease_expires() {
    let (nodes, proxy) = pair_through_proxy(2500);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (mut w, r) = open(
        a,
        b,
        keep_all(100, Duration::from_millis(300)),
        reliable_topic(),
    );
    let (wg, rg) = (w.guid(), r.guid());
    // Acknowledged samples leave room: 300 go through a history of 100.
    write_to(&mut w, 300, 10);
    wait_until(30, "B has the first 300", || seqs(b, rg, wg).len() >= 300);
    cut(&proxy, a, b);
    // Now nobody acknowledges: at most 100 more fit.
    let mut accepted = 0;
    let full = loop {
        match w.try_write(&payload(w.next_seq())) {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        assert!(
            accepted <= 100,
            "the history holds 100 unacknowledged samples"
        );
    };
    assert!(
        matches!(full, PublishError::HistoryFull { .. }),
        "try_write says why: {full:?}"
    );
    let t0 = Instant::now();
    let e = w.write_blocking(&payload(w.next_seq())).unwrap_err();
    assert!(
        matches!(e, PublishError::HistoryFull { waited } if waited >= Duration::from_millis(300)),
        "a blocking write waits max_blocking_time, then says why: {e:?}"
    );
    assert!(t0.elapsed() >= Duration::from_millis(300));
    // The async form waits the same way, whatever runs it.
    let e = block_on(w.write(&payload(w.next_seq())), 20).unwrap_err();
    assert!(
        matches!(e, PublishError::HistoryFull { waited } if waited >= Duration::from_millis(300)),
        "an async write waits max_blocking_time too: {e:?}"
    );
    // The reader's lease runs out: unmatched, the writer is free again.
    wait_until(30, "A unmatches the stalled reader", || {
        unmatched(a, wg, rg)
    });
    wait_until(10, "writes go through again", || {
        w.try_write(&payload(w.next_seq())).is_ok()
    });
    drop((w, r));
}

/// Keep-last 20: a reader cut off while 900 samples are written gets, once healed, an
/// explicit loss report for what the history replaced, then the last 20, in order.
#[test]
fn keep_last_replaced_samples_are_reported_lost_then_the_rest_arrive_in_order() {
    let (nodes, proxy) = pair_through_proxy(10_000);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (mut w, r) = open(
        a,
        b,
        reliable_topic().history_keep_last(20),
        reliable_topic(),
    );
    let (wg, rg) = (w.guid(), r.guid());
    write_to(&mut w, 100, 10);
    wait_until(30, "B has the first 100", || seqs(b, rg, wg).len() >= 100);
    cut(&proxy, a, b);
    write_to(&mut w, 1000, 10);
    heal(&proxy, a, b);
    wait_until(30, "B has the last sample", || {
        seqs(b, rg, wg).last() == Some(&1000)
    });
    let got = seqs(b, rg, wg);
    let ls = lost(b, rg);
    // Everything up to 100, then the history's last 20; what lies between was reported.
    let kept: Vec<u64> = got.iter().copied().filter(|s| *s > 100).collect();
    assert_eq!(
        kept,
        (981..=1000).collect::<Vec<_>>(),
        "the last 20, in order"
    );
    assert_eq!(&got[..100], &(1..=100).collect::<Vec<_>>()[..]);
    assert_eq!(
        ls,
        vec![(101, 980)],
        "one loss report for the replaced samples"
    );
    // In the stream's order: after sample 100, before sample 981.
    let order: Vec<i64> = b
        .rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Sample { reader, seq, .. } if reader == rg => Some(seq as i64),
            Event::SamplesLost { reader, .. } if reader == rg => Some(-1),
            _ => None,
        })
        .collect();
    let at = order.iter().position(|x| *x == -1).expect("the report");
    assert_eq!((order[at - 1], order[at + 1]), (100, 981), "{order:?}");
    // Counted per topic on both sides: lost on the reader's, resent on the writer's.
    let topic = |n: &Node| {
        n.mesh
            .topics()
            .topic(T)
            .map(|t| t.stats)
            .unwrap_or_default()
    };
    assert_eq!(topic(b).lost, 880);
    assert_eq!(b.mesh.stats().total.samples_lost, 880);
    assert!(
        topic(a).repaired >= 20,
        "the last 20 were resent: {:?}",
        topic(a)
    );
    drop((w, r));
}

/// A transient-local keep-last writer wrote 100 samples before a reliable transient-local
/// reader appears: the reader gets the 50 still held, in order, before what comes next. A
/// best-effort reader matched at the same time gets only new samples.
#[test]
fn a_late_transient_local_reader_gets_the_history_first() {
    let a = Node::start(node(10_000));
    let b = Node::start(node(10_000).static_peer(ep(a.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let durable = reliable_topic().durability(DurabilityKind::TransientLocal);
    let mut w = a
        .mesh
        .writer(durable.clone().history_keep_last(50))
        .unwrap();
    write_to(&mut w, 100, 10);
    let r = b.mesh.reader(durable).unwrap();
    let be = b.mesh.reader(Topic::new(T, "Blob")).unwrap();
    let vol = b.mesh.reader(reliable_topic()).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(a, wg, rg)
            && matched(b, wg, rg)
            && matched(b, wg, be.guid())
            && matched(a, wg, vol.guid())
    });
    wait_until(30, "the history reached the reader", || {
        seqs(b, rg, wg).len() >= 50
    });
    write_to(&mut w, 110, 10);
    wait_until(30, "the new samples too", || {
        seqs(b, rg, wg).last() == Some(&110)
    });
    assert_eq!(seqs(b, rg, wg), (51..=110).collect::<Vec<_>>());
    assert!(lost(b, rg).is_empty(), "what was never held is not owed");
    let plain = seqs(b, be.guid(), wg);
    assert!(
        plain.iter().all(|s| *s > 100),
        "the best-effort reader gets no history: {plain:?}"
    );
    // A reliable but volatile reader is owed what came after it matched, all of it.
    wait_until(30, "the volatile reader has the new samples", || {
        seqs(b, vol.guid(), wg).last() == Some(&110)
    });
    assert_eq!(
        seqs(b, vol.guid(), wg),
        (101..=110).collect::<Vec<_>>(),
        "no history for a volatile reader, nothing after it lost"
    );
    drop((w, r, be, vol));
}

/// A quiet mesh (slow heartbeats, gossip and announcements): a keep-all writer of 50
/// samples streams 2000 through a reader whose acknowledgements wait for its shard's own
/// timer (`ack_period`). That timer once was re-armed only by control-plane commands, so
/// each full history waited for the next gossip round and the writes timed out.
#[test]
fn acknowledgements_flow_on_their_own_timers_in_a_quiet_mesh() {
    let quiet = || node_support::quiet(Duration::from_secs(10));
    let a = Node::start(quiet());
    let b = Node::start(quiet().static_peer(ep(a.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (mut w, r) = open(a, b, keep_all(50, Duration::from_secs(3)), reliable_topic());
    let (wg, rg) = (w.guid(), r.guid());
    for seq in 1..=2000u64 {
        match w.write_blocking(&payload(seq)) {
            Ok(s) => assert_eq!(s, seq),
            Err(e) => panic!("sample {seq}: {e} (acknowledgements did not come)"),
        }
    }
    w.flush_blocking().unwrap();
    wait_complete(b, rg, wg, 2000, 30);
    drop((w, r));
}

/// Lifespan 300 ms: samples a cut-off reader missed and that expired meanwhile are not
/// repaired once it is back, but reported lost; the writer's node counts them expired.
#[test]
fn samples_past_their_lifespan_are_not_repaired_but_reported_lost() {
    let (nodes, proxy) = pair_through_proxy(10_000);
    let (a, b) = (&nodes[0], &nodes[1]);
    let topic = reliable_topic()
        .history_keep_last(1000)
        .lifespan(Duration::from_millis(300));
    let (mut w, r) = open(a, b, topic, reliable_topic());
    let (wg, rg) = (w.guid(), r.guid());
    write_to(&mut w, 50, 10);
    wait_until(30, "B has the first 50", || seqs(b, rg, wg).len() >= 50);
    cut(&proxy, a, b);
    write_to(&mut w, 100, 10);
    wait_until(20, "A's history let the 50 expire", || {
        a.mesh.stats().total.samples_expired >= 50
    });
    heal(&proxy, a, b);
    wait_until(30, "B hears of the loss", || !lost(b, rg).is_empty());
    assert_eq!(lost(b, rg), vec![(51, 100)]);
    assert_eq!(
        seqs(b, rg, wg),
        (1..=50).collect::<Vec<_>>(),
        "nothing expired delivered"
    );
    write_to(&mut w, 101, 10);
    wait_until(30, "a new sample after the loss", || {
        seqs(b, rg, wg).last() == Some(&101)
    });
    drop((w, r));
}
