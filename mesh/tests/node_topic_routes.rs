//! Topic routes across live nodes on loopback (issue 12): samples follow shortest-path trees
//! (each crosses a link once, relays deliver nothing), matches converge (late readers, nodes
//! that stop and restart, a cut link whose relay path takes over), the seed's partition
//! table end to end, a plain multimaster v1 peer among topic nodes, and a stranger's forged
//! run.
//! Counting is done with the nodes' own counters (`Mesh::stats`, per-topic stats) and events;
//! every wait is for a condition (bounded), never a fixed sleep.
//!
//! Length: seven scenarios with their shared counting helpers; splitting them would scatter
//! one issue's acceptance list over several files.

mod node_support;

use node_support::wiring::{CutProxy, RawPeer};
use node_support::{ep, fast, wait_connected, wait_until, Node};
use shoal_mesh::topics::{
    EndpointGuid, Incompatibility, Reasons, Topic, TopicStats, TopicsConfig, Writer,
};
use shoal_mesh::wire::{Frame, Samples};
use shoal_mesh::{Event, MeshBuilder, PeerId, ShardStats};
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

const T: &str = "routes/blob";
/// Bytes a Samples frame adds to a run of one sample: length, type, ttl, flags, writer,
/// first seq, count, the sample's length prefix.
const ONE_SAMPLE_OVERHEAD: u64 = 4 + 1 + 1 + 1 + 16 + 8 + 2 + 4;
/// The least a sample costs on the wire inside a longer run: its length prefix.
const SAMPLE_LEN_PREFIX: u64 = 4;

/// [`fast`] with a quick announce cycle and a short lease.
fn topo(period_ms: u64, lease_ms: u64) -> MeshBuilder {
    fast().topics(TopicsConfig {
        announce_period: Duration::from_millis(period_ms),
        participant_lease: Duration::from_millis(lease_ms),
        ..TopicsConfig::default()
    })
}

/// Starts `n` nodes from `b(i)`, linked as `links` says (a link is dialed by its later node).
fn topology(n: usize, links: &[(usize, usize)], b: impl Fn(usize) -> MeshBuilder) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::with_capacity(n);
    for i in 0..n {
        let mut builder = b(i);
        for &(x, y) in links {
            let other = match (x == i, y == i) {
                (true, false) => y,
                (false, true) => x,
                _ => continue,
            };
            if other < i {
                builder = builder.static_peer(ep(nodes[other].port()));
            }
        }
        nodes.push(Node::start(builder));
    }
    wait_connected(&nodes, links);
    wait_graph(&nodes, links);
    nodes
}

/// Waits until every node's membership graph holds exactly `links`: routes are computed from
/// it, and a node links faster than its records travel (a node's own record is flooded at
/// once for its first links, then at most once per `FLOOD_GAP`), so a route computed before
/// then may still relay what a later graph sends straight.
fn wait_graph(nodes: &[Node], links: &[(usize, usize)]) {
    let ids: Vec<_> = nodes.iter().map(Node::id).collect();
    let mut want: Vec<(_, _)> = links
        .iter()
        .flat_map(|&(x, y)| [(ids[x], ids[y]), (ids[y], ids[x])])
        .collect();
    want.sort();
    wait_until(20, "every node knows every link", || {
        nodes.iter().all(|n| {
            let Ok(view) = n.mesh.nodes() else {
                return false;
            };
            let mut got: Vec<(_, _)> = view
                .nodes
                .iter()
                .flat_map(|v| v.links.iter().map(move |l| (v.id, l.peer)))
                .collect();
            got.sort();
            got == want
        })
    });
}

/// The (writer, seq) of every sample `n` delivered to `reader`, in delivery order.
fn seqs(n: &Node, reader: EndpointGuid) -> Vec<(EndpointGuid, u64)> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Sample {
                reader: r,
                writer,
                seq,
                ..
            } if r == reader => Some((writer, seq)),
            _ => None,
        })
        .collect()
}

/// Every Sample event `n` raised, for any reader.
fn all_samples(n: &Node) -> usize {
    n.rec
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Sample { .. }))
        .count()
}

fn matched_at(n: &Node, w: EndpointGuid, r: EndpointGuid) -> Option<usize> {
    n.rec.position(
        |e| matches!(e, Event::Matched { writer, reader, .. } if *writer == w && *reader == r),
    )
}

fn matched(n: &Node, w: EndpointGuid, r: EndpointGuid) -> bool {
    matched_at(n, w, r).is_some()
}

fn unmatched_at(n: &Node, w: EndpointGuid, r: EndpointGuid) -> Option<usize> {
    n.rec.position(
        |e| matches!(e, Event::Unmatched { writer, reader, .. } if *writer == w && *reader == r),
    )
}

/// The reasons of every `Incompatible` event `n` raised for the pair.
fn incompatible(n: &Node, w: EndpointGuid, r: EndpointGuid) -> Vec<Reasons> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Incompatible {
                writer,
                reader,
                reasons,
                ..
            } if writer == w && reader == r => Some(reasons),
            _ => None,
        })
        .collect()
}

/// This node's counters of `topic` (zero while no route of it passes here).
fn tstats(n: &Node, topic: &str) -> TopicStats {
    n.mesh
        .topics()
        .topic(topic)
        .map(|t| t.stats)
        .unwrap_or_default()
}

fn total(n: &Node) -> ShardStats {
    n.mesh.stats().total
}

/// Writes one sample at a time until every `(node, reader)` has received at least one: the
/// routes are then installed on every shard along the way (a sample written before its
/// route reached the shard is dropped there, counted as unrouted). Returns how many it wrote.
fn prime(w: &mut Writer, readers: &[(&Node, EndpointGuid)]) -> u64 {
    let mut written = 0;
    wait_until(20, "a first sample reaches every reader", || {
        if readers.iter().all(|(n, r)| !seqs(n, *r).is_empty()) {
            return true;
        }
        w.write_blocking(b"prime").unwrap();
        w.flush_blocking().unwrap();
        written += 1;
        false
    });
    written
}

/// Payload of sample `i`: `len` bytes starting with `i`.
fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0x5a; len];
    p[..8].copy_from_slice(&i.to_be_bytes());
    p
}

/// Writes `n` samples of `len` bytes and flushes; returns their sequence numbers.
fn write_n(w: &mut Writer, n: u64, len: usize) -> RangeInclusive<u64> {
    let first = w.next_seq();
    for i in 0..n {
        assert_eq!(w.write_blocking(&payload(i, len)).unwrap(), first + i);
    }
    w.flush_blocking().unwrap();
    first..=first + n - 1
}

/// Waits until `reader` on `n` got sequence number `last` (or a later one).
fn wait_seq(n: &Node, reader: EndpointGuid, last: u64, what: &str) {
    wait_until(30, what, || {
        seqs(n, reader).last().is_some_and(|(_, s)| *s >= last)
    });
}

/// Asserts that everything `reader` on `n` got came from `w` in strictly increasing order
/// (never a sample twice), and that it got every sequence number of `want`.
fn exactly_once_in_order(
    n: &Node,
    reader: EndpointGuid,
    w: EndpointGuid,
    want: RangeInclusive<u64>,
    who: &str,
) {
    let got = seqs(n, reader);
    assert!(
        got.iter().all(|(g, _)| *g == w),
        "{who}: a stranger's sample"
    );
    let s: Vec<u64> = got.iter().map(|(_, s)| *s).collect();
    assert!(
        s.windows(2).all(|p| p[0] < p[1]),
        "{who}: a sample twice or out of order: {s:?}"
    );
    let inside: Vec<u64> = s.iter().copied().filter(|x| want.contains(x)).collect();
    assert_eq!(
        inside,
        want.clone().collect::<Vec<_>>(),
        "{who}: every sample of {want:?} once, in order"
    );
}

/// The growth of every byte counter between two snapshots.
fn bytes_delta(before: &ShardStats, after: &ShardStats) -> (u64, u64) {
    (
        after.bytes_out - before.bytes_out,
        after.bytes_in - before.bytes_in,
    )
}

/// Bytes of everything but samples a link may carry while a test writes (heartbeats,
/// membership and discovery at these timers, over a few seconds): far below one extra copy
/// of the samples, so a sample sent twice cannot hide in it.
const CONTROL_SLACK: u64 = 128 * 1024;

#[test]
fn in_a_line_every_sample_crosses_each_link_once_and_the_relay_delivers_nothing() {
    const N: u64 = 300;
    const P: usize = 2000;
    let nodes = topology(3, &[(1, 0), (2, 1)], |_| topo(250, 3000));
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut w = a
        .mesh
        .writer(Topic::new(T, "Blob"))
        .unwrap()
        .with_batch_bytes(0);
    let r = c.mesh.reader(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "A's writer and C's reader match on both ends", || {
        matched(a, w.guid(), r.guid()) && matched(c, w.guid(), r.guid())
    });
    prime(&mut w, &[(c, r.guid())]);
    let (ta, tb, tc) = (tstats(a, T), tstats(b, T), tstats(c, T));
    let (sa, sb, sc) = (total(a), total(b), total(c));
    let sent = write_n(&mut w, N, P);
    wait_seq(c, r.guid(), *sent.end(), "C has every sample");
    let (ta2, tb2, tc2) = (tstats(a, T), tstats(b, T), tstats(c, T));
    let (sa2, sb2, sc2) = (total(a), total(b), total(c));

    // One copy per link: A puts each on A–B, B puts each on B–C, C sends nothing on.
    assert_eq!(ta2.forwarded - ta.forwarded, N, "A: one copy each, on A–B");
    assert_eq!(tb2.forwarded - tb.forwarded, N, "B: one copy each, on B–C");
    assert_eq!(tc2.forwarded - tc.forwarded, 0, "C relays nothing");
    assert_eq!(tc2.delivered - tc.delivered, N, "C delivers each once");
    assert_eq!(ta2.written - ta.written, N, "A wrote N");
    // B relays without delivering: no local reader, no event, no counter.
    assert_eq!(tb2.delivered, 0, "B delivered locally: {tb2:?}");
    assert_eq!(all_samples(b), 0, "B raised Sample events");
    assert_eq!(all_samples(a), 0, "A raised Sample events");
    // Counted over the samples written once the routes were up (priming may lose some to
    // routes not yet in place, counted as such).
    for (n, s0, s) in [("A", ta, ta2), ("B", tb, tb2), ("C", tc, tc2)] {
        assert_eq!(
            (
                s.dropped_duplicate - s0.dropped_duplicate,
                s.missed - s0.missed,
                s.dropped_queue_full - s0.dropped_queue_full,
                s.dropped_no_route - s0.dropped_no_route
            ),
            (0, 0, 0, 0),
            "{n}: nothing duplicated, missed or dropped: {s:?}"
        );
    }
    exactly_once_in_order(c, r.guid(), w.guid(), sent, "C");

    // The bytes agree: each sample's bytes cross A–B once and B–C once.
    let (lo, hi) = (
        N * (P as u64 + SAMPLE_LEN_PREFIX),
        N * (P as u64 + ONE_SAMPLE_OVERHEAD) + CONTROL_SLACK,
    );
    let (a_out, _) = bytes_delta(&sa, &sa2);
    let (b_out, b_in) = bytes_delta(&sb, &sb2);
    let (c_out, c_in) = bytes_delta(&sc, &sc2);
    for (what, v) in [
        ("A out", a_out),
        ("B in", b_in),
        ("B out", b_out),
        ("C in", c_in),
    ] {
        assert!(
            (lo..=hi).contains(&v),
            "{what}: {v} bytes, want one copy of the samples: {lo}..={hi}"
        );
    }
    assert!(
        c_out < CONTROL_SLACK,
        "C sent {c_out} bytes: samples went back"
    );
    drop(r);
}

#[test]
fn in_a_full_mesh_the_writers_node_sends_one_copy_per_reader_node_and_nobody_gets_two() {
    const N: u64 = 200;
    const P: usize = 2000;
    let links = [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)];
    let nodes = topology(4, &links, |_| topo(250, 3000));
    let a = &nodes[0];
    let mut w = a
        .mesh
        .writer(Topic::new(T, "Blob"))
        .unwrap()
        .with_batch_bytes(0);
    let readers: Vec<_> = nodes[1..]
        .iter()
        .map(|n| n.mesh.reader(Topic::new(T, "Blob")).unwrap())
        .collect();
    for (i, r) in readers.iter().enumerate() {
        wait_until(20, &format!("reader on node {} matched", i + 1), || {
            matched(a, w.guid(), r.guid()) && matched(&nodes[i + 1], w.guid(), r.guid())
        });
    }
    let pairs: Vec<(&Node, EndpointGuid)> = nodes[1..]
        .iter()
        .zip(&readers)
        .map(|(n, r)| (n, r.guid()))
        .collect();
    prime(&mut w, &pairs);
    let ts: Vec<TopicStats> = nodes.iter().map(|n| tstats(n, T)).collect();
    let ss: Vec<ShardStats> = nodes.iter().map(total).collect();
    let sent = write_n(&mut w, N, P);
    for (n, r) in &pairs {
        wait_seq(n, *r, *sent.end(), "every reader has every sample");
    }
    let ts2: Vec<TopicStats> = nodes.iter().map(|n| tstats(n, T)).collect();
    let ss2: Vec<ShardStats> = nodes.iter().map(total).collect();

    assert_eq!(
        ts2[0].forwarded - ts[0].forwarded,
        3 * N,
        "A: one copy per reader node, straight to it"
    );
    for i in 1..4 {
        assert_eq!(
            ts2[i].forwarded - ts[i].forwarded,
            0,
            "node {i} relayed samples that every reader had first hand"
        );
        assert_eq!(
            ts2[i].delivered - ts[i].delivered,
            N,
            "node {i} delivers each once"
        );
        assert_eq!(ts2[i].dropped_duplicate, 0, "node {i} received a duplicate");
        exactly_once_in_order(
            &nodes[i],
            readers[i - 1].guid(),
            w.guid(),
            sent.clone(),
            "reader",
        );
    }
    let per_link_lo = N * (P as u64 + SAMPLE_LEN_PREFIX);
    let per_link_hi = N * (P as u64 + ONE_SAMPLE_OVERHEAD);
    let (a_out, _) = bytes_delta(&ss[0], &ss2[0]);
    assert!(
        (3 * per_link_lo..=3 * per_link_hi + CONTROL_SLACK).contains(&a_out),
        "A sent {a_out} bytes, want 3 copies of the samples ({}..={})",
        3 * per_link_lo,
        3 * per_link_hi + CONTROL_SLACK
    );
    for i in 1..4 {
        let (out, inb) = bytes_delta(&ss[i], &ss2[i]);
        assert!(
            out < CONTROL_SLACK,
            "node {i} sent {out} bytes: it re-sent samples"
        );
        assert!(
            (per_link_lo..=per_link_hi + CONTROL_SLACK).contains(&inb),
            "node {i} read {inb} bytes: want exactly one copy"
        );
    }
}

#[test]
fn a_late_reader_matches_within_two_announce_periods() {
    const PERIOD: Duration = Duration::from_millis(1000);
    let nodes = topology(3, &[(1, 0), (2, 1)], |_| topo(1000, 4000));
    let (a, c) = (&nodes[0], &nodes[2]);
    let w = a.mesh.writer(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "C knows A's writer (two hops away)", || {
        c.mesh.topics().writers().any(|e| e.guid == w.guid())
    });
    // The writer has been announced; now the reader comes late.
    let t0 = Instant::now();
    let r = c.mesh.reader(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "the writer's node matches the late reader", || {
        matched(a, w.guid(), r.guid())
    });
    let took = t0.elapsed();
    assert!(
        took <= 2 * PERIOD,
        "matched after {took:?}: more than two announce periods ({PERIOD:?} each)"
    );
    // The reader's node reports it too (its event waits for the route table that carries
    // the writer's samples to the reader, planned at most `route_plan_interval` later).
    wait_until(20, "the reader's node matches too", || {
        matched(c, w.guid(), r.guid())
    });
    let took = t0.elapsed();
    assert!(took <= 2 * PERIOD, "matched on C after {took:?}");
}

#[test]
fn a_stopped_node_is_unmatched_after_its_lease_and_matched_again_when_it_restarts() {
    const LEASE: Duration = Duration::from_millis(1500);
    let cfg = || topo(250, LEASE.as_millis() as u64);
    let c_id = PeerId([0xc3; 16]);
    let nodes = topology(3, &[(1, 0), (2, 0)], |i| {
        if i == 2 {
            cfg().node_id(c_id)
        } else {
            cfg()
        }
    });
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut w = a.mesh.writer(Topic::new(T, "Blob")).unwrap();
    let rb = b.mesh.reader(Topic::new(T, "Blob")).unwrap();
    let rc = c.mesh.reader(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "both readers matched", || {
        matched(a, w.guid(), rb.guid()) && matched(a, w.guid(), rc.guid())
    });

    let t0 = Instant::now();
    c.mesh.stop();
    wait_until(20, "A unmatches the stopped node's reader", || {
        unmatched_at(a, w.guid(), rc.guid()).is_some()
    });
    let took = t0.elapsed();
    // The lease is the bound; a goodbye may end it sooner. Two announce periods of
    // scheduling on a busy machine on top.
    assert!(
        took <= LEASE + Duration::from_millis(2 * 250 + 1000),
        "unmatched {took:?} after the stop: more than its lease ({LEASE:?})"
    );
    assert!(
        unmatched_at(a, w.guid(), rb.guid()).is_none(),
        "the live reader stays matched"
    );
    let gone = unmatched_at(a, w.guid(), rc.guid()).unwrap();
    drop(rc);

    // The same node comes back (same id, new process state).
    let c2 = Node::start(cfg().node_id(c_id).static_peer(ep(a.port())));
    let rc2 = c2.mesh.reader(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "A matches the restarted node's reader", || {
        a.rec
            .events()
            .iter()
            .enumerate()
            .skip(gone + 1)
            .any(|(_, e)| {
                matches!(e, Event::Matched { writer, reader, .. }
                    if *writer == w.guid() && *reader == rc2.guid())
            })
    });
    let before_b = seqs(b, rb.guid()).len();
    prime(&mut w, &[(&c2, rc2.guid())]);
    wait_until(20, "B still receives", || {
        seqs(b, rb.guid()).len() > before_b
    });
    drop(nodes);
}

/// A writer on A, a reader on C, links A–B, B–C and A–C (through a [`CutProxy`]); samples
/// flow, the A–C link is cut, samples resume over B. Returns the three nodes (for the
/// counters) after the checks every run makes.
fn cut_and_reroute() -> [Node; 3] {
    const N: u64 = 50;
    let a = Node::start(topo(250, 3000));
    let proxy = CutProxy::start(a.port());
    let b = Node::start(topo(250, 3000).static_peer(ep(a.port())));
    let c = Node::start(
        topo(250, 3000)
            .static_peer(ep(b.port()))
            .static_peer(ep(proxy.port())),
    );
    let nodes = [a, b, c];
    wait_connected(&nodes, &[(0, 1), (1, 2), (0, 2)]);
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut w = a.mesh.writer(Topic::new(T, "Blob")).unwrap();
    let r = c.mesh.reader(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "matched", || matched(a, w.guid(), r.guid()));
    prime(&mut w, &[(c, r.guid())]);
    let tb = tstats(b, T);
    let sent = write_n(&mut w, N, 64);
    wait_seq(c, r.guid(), *sent.end(), "C has the first samples");
    exactly_once_in_order(c, r.guid(), w.guid(), sent, "C, direct");
    assert_eq!(
        tstats(b, T).forwarded - tb.forwarded,
        0,
        "the direct link A–C is the shortest path"
    );

    proxy.cut();
    wait_until(20, "A and C see the direct link gone", || {
        !a.connected_to(c) && !c.connected_to(a)
    });
    let cut_at = seqs(c, r.guid()).len();
    // Samples written before the new tree reaches A's shard may be lost (counted); keep
    // writing until they come through B.
    wait_until(20, "samples resume over B", || {
        if seqs(c, r.guid()).len() > cut_at {
            return true;
        }
        w.write_blocking(b"after the cut").unwrap();
        w.flush_blocking().unwrap();
        false
    });
    let tb = tstats(b, T);
    let sent = write_n(&mut w, N, 64);
    wait_seq(
        c,
        r.guid(),
        *sent.end(),
        "C has the samples written after the switch",
    );
    assert!(
        tstats(b, T).forwarded - tb.forwarded >= N,
        "B carries the samples now: {:?}",
        tstats(b, T)
    );
    assert_eq!(all_samples(b), 0, "B relays, never delivers");
    // Never a sample twice across the switch, and nothing lost once the relay path is up.
    exactly_once_in_order(c, r.guid(), w.guid(), sent, "C, over B");
    drop((w, r));
    nodes
}

#[test]
fn a_cut_link_hands_the_route_to_the_relay_path() {
    cut_and_reroute();
}

#[test]
fn samples_lost_while_a_route_changes_are_all_counted() {
    let nodes = cut_and_reroute();
    let (a, c) = (&nodes[0], &nodes[2]);
    let (ta, tc) = (tstats(a, T), tstats(c, T));
    let sa = total(a);
    // A's writer has one remote reader and none local: every sample it wrote went on one
    // link or was counted as dropped there.
    assert_eq!(
        ta.written,
        ta.forwarded + ta.dropped_no_route + ta.dropped_queue_full,
        "A wrote samples it neither sent nor counted as dropped: {ta:?}"
    );
    // What C missed across the switch was counted by the node that lost it.
    let counted = ta.dropped_no_route
        + ta.dropped_queue_full
        + sa.dropped_unrouted_samples
        + sa.dropped_link_closed;
    assert!(
        tc.missed <= counted,
        "C missed {} samples but only {counted} were counted as dropped: A {ta:?}",
        tc.missed
    );
}

#[test]
fn the_seeds_partition_table_on_live_nodes() {
    const N: u64 = 10;
    let nodes = topology(3, &[(1, 0), (2, 0)], |_| topo(250, 3000));
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut w = a
        .mesh
        .writer(Topic::new(T, "Blob").partitions(["robot/*", "diagnostics"]))
        .unwrap();
    let reader = |n: &Node, parts: &[&str]| {
        n.mesh
            .reader(Topic::new(T, "Blob").partitions(parts.iter().copied()))
            .unwrap()
    };
    let arm = reader(b, &["robot/arm"]);
    let tele = reader(b, &["telemetry", "diagnostics"]);
    let robot = reader(c, &["robot"]);
    let default = reader(c, &[]);
    for (r, n) in [(&arm, b), (&tele, b)] {
        wait_until(20, "a matching reader matches on both ends", || {
            matched(a, w.guid(), r.guid()) && matched(n, w.guid(), r.guid())
        });
    }
    let writer_parts = ["robot/*".to_owned(), "diagnostics".to_owned()];
    for (r, what, want) in [(&robot, "⟨robot⟩", vec!["robot"]), (&default, "⟨⟩", vec![])] {
        for n in [a, c] {
            wait_until(20, &format!("{what} is reported incompatible"), || {
                !incompatible(n, w.guid(), r.guid()).is_empty()
            });
            let why = incompatible(n, w.guid(), r.guid());
            assert_eq!(why.len(), 1, "{what}: once per pair: {why:?}");
            assert!(why[0].partitions(), "{what}: names partitions: {}", why[0]);
            assert!(
                why[0].policies().is_empty(),
                "{what}: no policy: {}",
                why[0]
            );
            let named = why[0].iter().find_map(|i| match i {
                Incompatibility::Partitions { writer, reader } => Some((writer, reader)),
                _ => None,
            });
            let (wp, rp) = named.expect("a Partitions reason");
            assert_eq!(wp, &writer_parts, "{what}: the writer's partitions");
            // The default partition may be spelled as no name or as the empty name.
            let rp: Vec<&str> = rp
                .iter()
                .map(String::as_str)
                .filter(|p| !p.is_empty())
                .collect();
            assert_eq!(rp, want, "{what}: the reader's partitions");
            let text = why[0].to_string();
            assert!(text.contains("robot/*"), "{what}: {text}");
        }
        assert!(!matched(a, w.guid(), r.guid()), "{what} must not match");
    }
    for r in [&arm, &tele] {
        assert!(incompatible(a, w.guid(), r.guid()).is_empty());
    }
    prime(&mut w, &[(b, arm.guid()), (b, tele.guid())]);
    let ta = tstats(a, T);
    let tb = tstats(b, T);
    let sent = write_n(&mut w, N, 32);
    for r in [&arm, &tele] {
        wait_seq(
            b,
            r.guid(),
            *sent.end(),
            "a matching reader has every sample",
        );
        exactly_once_in_order(b, r.guid(), w.guid(), sent.clone(), "a matching reader");
    }
    assert_eq!(
        tstats(a, T).forwarded - ta.forwarded,
        N,
        "one copy each toward B, none toward C"
    );
    assert_eq!(tstats(b, T).delivered - tb.delivered, 2 * N);
    assert_eq!(all_samples(c), 0, "C's readers match nothing");
}

/// A stranger posing as a Shoal node (its Hello advertises extended frames) sends a reader's
/// node a run of a real remote writer numbered far ahead. It comes on a link the writer's
/// samples do not come from, so it is dropped and counted, never delivered, and the writer's
/// real samples after it still reach the reader. (Before, the one frame was delivered and made
/// every later sample of the writer look seen there: the writer was silenced for good.)
#[test]
fn a_strangers_run_for_a_real_writer_neither_reaches_a_reader_nor_silences_the_writer() {
    let nodes = topology(2, &[(1, 0)], |_| topo(250, 3000));
    let (a, b) = (&nodes[0], &nodes[1]);
    let stranger = RawPeer::dial_capable(b.port());
    wait_until(10, "B links with the stranger", || {
        b.mesh.connected_peers().contains(&stranger.id)
    });
    let mut w = a
        .mesh
        .writer(Topic::new(T, "Blob"))
        .unwrap()
        .with_batch_bytes(0);
    let r = b.mesh.reader(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "matched", || matched(a, w.guid(), r.guid()));
    prime(&mut w, &[(b, r.guid())]);
    let before = total(b).dropped_wrong_link;
    let forged = Samples::new(8, w.guid(), 1 << 62, [b"forged".as_slice()]).unwrap();
    stranger.send_frame(Frame::Samples(forged));
    let forged_delivered = || seqs(b, r.guid()).iter().any(|(_, s)| *s >= 1 << 62);
    wait_until(20, "B handles the stranger's run", || {
        forged_delivered() || total(b).dropped_wrong_link > before
    });
    assert!(!forged_delivered(), "the forged run reached the reader");
    assert_eq!(
        total(b).dropped_wrong_link - before,
        1,
        "one sample, counted"
    );
    assert_eq!(tstats(b, T).dropped_wrong_link, 1, "for its topic too");
    let sent = write_n(&mut w, 50, 64);
    wait_seq(
        b,
        r.guid(),
        *sent.end(),
        "the writer's samples still arrive",
    );
    exactly_once_in_order(b, r.guid(), w.guid(), sent, "after the stranger's run");
    assert!(!stranger.closed(), "a well-formed frame keeps its link");
}

#[test]
fn a_plain_v1_peer_among_topic_nodes_gets_traffic_and_never_a_frame_above_8() {
    let nodes = topology(3, &[(1, 0), (2, 0)], |_| topo(250, 3000));
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let raw = RawPeer::dial(a.port());
    wait_until(10, "A links with the raw peer", || {
        a.mesh.connected_peers().contains(&raw.id)
    });
    // Topic traffic through A, the raw peer's only neighbour: discovery floods and samples
    // relayed B → A → C, with A's own reader too.
    let mut w = b
        .mesh
        .writer(Topic::new(T, "Blob"))
        .unwrap()
        .with_batch_bytes(0);
    let ra = a.mesh.reader(Topic::new(T, "Blob")).unwrap();
    let rc = c.mesh.reader(Topic::new(T, "Blob")).unwrap();
    wait_until(20, "matched across A", || {
        matched(b, w.guid(), ra.guid()) && matched(b, w.guid(), rc.guid())
    });
    prime(&mut w, &[(a, ra.guid()), (c, rc.guid())]);
    let sent = write_n(&mut w, 100, 256);
    wait_seq(c, rc.guid(), *sent.end(), "samples relayed through A");
    assert!(tstats(a, T).forwarded >= 100, "A relayed samples");

    // Broadcast and targeted, to and from the raw peer.
    b.mesh.broadcast_blocking("b-to-all").unwrap();
    a.mesh.send_blocking(raw.id, "a-to-raw").unwrap();
    c.mesh.send_blocking(raw.id, "c-to-raw").unwrap();
    let heard = |src: PeerId, dst: PeerId, p: &str| {
        raw.data()
            .iter()
            .any(|(s, d, x)| *s == src && *d == dst && x == p.as_bytes())
    };
    wait_until(
        20,
        "the raw peer gets broadcast and targeted messages",
        || {
            heard(b.id(), PeerId::ZERO, "b-to-all")
                && heard(a.id(), raw.id, "a-to-raw")
                && heard(c.id(), raw.id, "c-to-raw")
        },
    );
    raw.send_data(PeerId::ZERO, b"raw-to-all");
    raw.send_data(c.id(), b"raw-to-c");
    for (i, n) in nodes.iter().enumerate() {
        wait_until(
            20,
            &format!("node {i} gets the raw peer's broadcast"),
            || {
                n.rec
                    .messages()
                    .iter()
                    .any(|(f, p, bc)| *f == raw.id && p == b"raw-to-all" && *bc)
            },
        );
    }
    wait_until(20, "C gets the raw peer's targeted message", || {
        c.rec
            .messages()
            .iter()
            .any(|(f, p, bc)| *f == raw.id && p == b"raw-to-c" && !*bc)
    });
    // More topic traffic after the exchange, then judge everything the raw peer read.
    let sent = write_n(&mut w, 20, 256);
    wait_seq(c, rc.guid(), *sent.end(), "samples still flow");
    a.mesh.send_blocking(raw.id, "fence").unwrap();
    wait_until(20, "the fence reaches the raw peer", || {
        heard(a.id(), raw.id, "fence")
    });
    let types = raw.types();
    assert!(!raw.closed(), "the node closed the raw peer's link");
    assert!(a.mesh.connected_peers().contains(&raw.id));
    let above: Vec<u8> = types.iter().copied().filter(|t| *t > 8).collect();
    assert!(
        above.is_empty(),
        "the plain v1 peer was sent frame types above 8: {above:?}"
    );
    assert!(types.contains(&2), "HelloAck read");
    assert!(
        types.contains(&6),
        "membership flooded to it, as to any v1 peer"
    );
    for n in &nodes {
        let s = total(n);
        assert_eq!(s.malformed_frames, 0, "nobody saw a malformed frame");
    }
}

/// What a user sees of a match is routed: a writer that starts writing as soon as its node
/// shows the matches (in `Mesh::topics()`, or by its `Matched` events) loses none of its first
/// samples. (The fan-out benchmark lost the first ~200 ms of samples when the snapshot showed
/// a match whose route table was still waiting for its planning interval.)
#[test]
fn the_first_samples_after_a_match_is_shown_reach_every_reader() {
    const N: u64 = 300;
    let links = [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2)];
    let nodes = topology(4, &links, |_| topo(250, 3000));
    let a = &nodes[0];
    let readers: Vec<_> = nodes[1..]
        .iter()
        .map(|n| n.mesh.reader(Topic::new(T, "Blob")).unwrap())
        .collect();
    let mut w = a
        .mesh
        .writer(Topic::new(T, "Blob"))
        .unwrap()
        .with_batch_bytes(0);
    wait_until(20, "A's snapshot lists every match", || {
        let t = a.mesh.topics();
        readers
            .iter()
            .all(|r| t.matches().contains(&(w.guid(), r.guid())))
    });
    let sent = write_n(&mut w, N, 64);
    assert_eq!(*sent.start(), 1, "nothing written before");
    for (i, r) in readers.iter().enumerate() {
        let n = &nodes[i + 1];
        wait_seq(n, r.guid(), N, "every sample reaches the reader");
        exactly_once_in_order(
            n,
            r.guid(),
            w.guid(),
            sent.clone(),
            &format!("node {}", i + 1),
        );
    }
}
