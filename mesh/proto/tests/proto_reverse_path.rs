//! The reverse-path check of Data frames (issue 24, finding 12), in the simulation that drives
//! the real control and shard cores: a stranger linked to one node sends Data frames carrying
//! a real origin's next message ids before the origin sends them. With the check the forgeries
//! are dropped where they enter (counted) and every real message reaches every node; without
//! it (`reverse_path_check = false`, the plain v1 behaviour) the forgeries are delivered and
//! flooded, and the real messages are dropped everywhere as duplicates.

mod proto_sim;

use bytes::{Bytes, BytesMut};
use proto_sim::*;
use shoal_proto::config::MeshConfig;
use shoal_proto::wire::{Data, Frame};
use shoal_proto::{MsgId, PeerId};
use std::time::Duration;

const X: usize = 0;
const A: usize = 1;
const V: usize = 2;
const B: usize = 3;
const S: usize = 4;
const FORGED: u64 = 10;

/// X - A - V - B, and the stranger S linked to V only (a full node that speaks the protocol,
/// whose frames the test writes by hand). Edges (i, j): j dials i.
fn mesh(seed: u64, check: bool) -> Sim {
    let edges = [(X, A), (A, V), (V, B), (V, S)];
    let mut sim = Sim::new(seed);
    add_topology(&mut sim, 5, &edges, |c| c.reverse_path_check = check);
    sim.start_all();
    sim.run_for(Duration::from_millis(500));
    for i in 0..5 {
        assert_eq!(sim.members(i).len(), 4, "node {i} sees the whole mesh");
    }
    // Until the paths settle, every origin's off-path copies are still taken (see
    // `ring_boot`): the attack below is on a settled mesh.
    sim.run_for(cfg().reverse_path_settle);
    sim
}

fn data(src: PeerId, dst: PeerId, counter: u64, payload: &str) -> Bytes {
    let mut b = BytesMut::new();
    Frame::Data(Data {
        src,
        dst,
        msg_id: MsgId::new(&src, counter),
        ttl: 8,
        payload: Bytes::copy_from_slice(payload.as_bytes()),
    })
    .encode(&mut b)
    .unwrap();
    b.freeze()
}

/// Runs the attack; returns the mesh afterwards.
fn attack(seed: u64, check: bool) -> Sim {
    let mut sim = mesh(seed, check);
    let (x, b) = (sim.id(X), sim.id(B));
    if check {
        // V takes X's frames from A only; the stranger is toward nobody.
        let rp = sim.nodes[V].core.reverse_paths();
        assert_eq!(rp.accepted(&x), Some(&[sim.id(A)][..]));
        assert!(sim.nodes[V].core.path_tables_pushed() > 0);
    }
    // The stranger learns X's ids from the flood.
    sim.broadcast(X, "warm");
    sim.run_for(Duration::from_millis(50));
    let last = *sim.nodes[S]
        .delivered_ids
        .iter()
        .rev()
        .find(|id| id.0[..8] == x.0[..8])
        .expect("the stranger saw X's broadcast");
    let c = last.counter();
    let mut forged = BytesMut::new();
    for n in 1..=FORGED {
        forged.extend_from_slice(&data(x, PeerId::ZERO, c + n, &format!("forged-{n}")));
    }
    forged.extend_from_slice(&data(x, b, c + FORGED + 1, "forged-t"));
    sim.inject(S, V, forged.freeze());
    sim.run_for(Duration::from_millis(50));
    // Now X sends for real: the same ids.
    for n in 1..=FORGED {
        sim.broadcast(X, format!("real-{n}"));
    }
    sim.send(X, b, "real-t");
    sim.run_for(Duration::from_millis(200));
    sim
}

fn count(sim: &Sim, i: usize, prefix: &str) -> usize {
    sim.nodes[i]
        .delivered
        .iter()
        .filter(|(_, p)| p.starts_with(prefix.as_bytes()))
        .count()
}

#[test]
fn forged_next_ids_from_a_stranger_do_not_silence_the_origin() {
    for seed in [1, 2, 3] {
        let sim = attack(seed, true);
        for i in [A, V, B, S] {
            for n in 1..=FORGED {
                assert_eq!(
                    sim.count_delivered(i, format!("real-{n}").as_bytes()),
                    1,
                    "seed {seed}: node {i} got X's real message {n} once"
                );
            }
            assert_eq!(count(&sim, i, "forged"), 0, "seed {seed}: node {i}");
        }
        assert_eq!(sim.count_delivered(B, b"real-t"), 1, "seed {seed}");
        let v = sim.nodes[V].shard.counters().snapshot();
        assert_eq!(v.dropped_off_path, FORGED + 1, "seed {seed}: counted at V");
        assert_eq!(v.dropped_foreign_msg_id, 0);
        // Nothing genuine was refused anywhere.
        for i in [X, A, B, S] {
            let c = sim.nodes[i].shard.counters().snapshot();
            assert_eq!(c.dropped_off_path, 0, "seed {seed}: node {i}");
        }
    }
}

/// The same attack with the check off: the forgeries win everywhere (what the check is for).
#[test]
fn without_the_check_the_forgeries_win() {
    let sim = attack(1, false);
    for i in [A, V, B] {
        for n in 1..=FORGED {
            let (forged, real) = (format!("forged-{n}"), format!("real-{n}"));
            assert_eq!(sim.count_delivered(i, forged.as_bytes()), 1, "node {i}");
            assert_eq!(sim.count_delivered(i, real.as_bytes()), 0, "node {i}");
        }
    }
    assert_eq!(sim.count_delivered(B, b"real-t"), 0);
    assert_eq!(sim.count_delivered(B, b"forged-t"), 1);
    let v = sim.nodes[V].shard.counters().snapshot();
    assert_eq!(v.dropped_off_path, 0);
}

/// A frame under one's own `src` spending another node's id is refused whatever the setting.
#[test]
fn another_nodes_id_under_ones_own_src_is_refused() {
    for check in [true, false] {
        let mut sim = mesh(4, check);
        let (x, s) = (sim.id(X), sim.id(S));
        sim.broadcast(X, "warm");
        sim.run_for(Duration::from_millis(50));
        let c = sim.nodes[S]
            .delivered_ids
            .iter()
            .rev()
            .find(|id| id.0[..8] == x.0[..8])
            .expect("seen")
            .counter();
        let mut b = BytesMut::new();
        Frame::Data(Data {
            src: s,
            dst: PeerId::ZERO,
            msg_id: MsgId::new(&x, c + 1),
            ttl: 8,
            payload: Bytes::from_static(b"forged"),
        })
        .encode(&mut b)
        .unwrap();
        sim.inject(S, V, b.freeze());
        sim.run_for(Duration::from_millis(50));
        sim.broadcast(X, "real");
        sim.run_for(Duration::from_millis(100));
        for i in [A, V, B, S] {
            assert_eq!(
                sim.count_delivered(i, b"real"),
                1,
                "node {i}, check {check}"
            );
            assert_eq!(
                sim.count_delivered(i, b"forged"),
                0,
                "node {i}, check {check}"
            );
        }
        let v = sim.nodes[V].shard.counters().snapshot();
        assert_eq!(v.dropped_foreign_msg_id, 1, "check {check}");
    }
}

/// A ring of five booting with uneven link latencies, every node broadcasting every few
/// milliseconds from the start: every broadcast must reach every other node exactly once.
/// Returns the broadcasts some node missed. With `settle` zero (the check as first written)
/// nodes judging by graphs the latest records have not all reached refused each other's only
/// copies (the live ring test failed that way on CI); while an origin's links settle,
/// off-path copies are taken.
fn ring_boot(seed: u64, settle: Duration) -> Vec<String> {
    ring_boot_counted(seed, settle, false).0
}

/// [`ring_boot`], with relays pruning (`prune`) or not, and the copies all nodes took while
/// settling (`taken_while_settling`).
fn ring_boot_counted(seed: u64, settle: Duration, prune: bool) -> (Vec<String>, u64) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let edges = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)];
    let mut sim = Sim::new(seed);
    for &(a, b) in &edges {
        for (x, y) in [(a, b), (b, a)] {
            sim.latency_of
                .insert((x, y), Duration::from_millis(rng.gen_range(1..40)));
        }
    }
    add_topology(&mut sim, 5, &edges, |c| {
        c.reverse_path_settle = settle;
        c.relay_pruning = prune;
    });
    sim.start_all();
    // From the moment every link is up at both ends (as the live test waits): the records
    // naming the last links are still on their way.
    while (0..5).any(|i| sim.connected(i).len() < 2) {
        sim.run_for(Duration::from_millis(1));
    }
    let mut sent = Vec::new();
    for round in 0..80 {
        for i in 0..5 {
            let m = format!("b-{i}-{round}");
            sim.broadcast(i, &m);
            sent.push((i, m));
        }
        sim.run_for(Duration::from_millis(5));
    }
    sim.run_for(Duration::from_secs(2));
    let mut missed = Vec::new();
    for (i, m) in &sent {
        for j in (0..5).filter(|j| j != i) {
            let n = sim.count_delivered(j, m.as_bytes());
            if n != 1 {
                missed.push(format!("{m} at node {j}: {n}"));
            }
        }
    }
    let taken = (0..5)
        .map(|i| {
            sim.nodes[i]
                .shard
                .counters()
                .snapshot()
                .taken_while_settling
        })
        .sum();
    (missed, taken)
}

#[test]
fn a_booting_ring_loses_no_broadcast_while_its_paths_settle() {
    let mut settling = 0;
    for seed in 0..40 {
        let (missed, taken) = ring_boot_counted(seed, cfg().reverse_path_settle, false);
        assert!(missed.is_empty(), "seed {seed}: {missed:?}");
        settling += taken;
    }
    assert!(settling > 0, "no off-path copy was taken while settling");
}

/// The same boots with relays pruning while the paths settle (issue 29): a relay holds back
/// at once only the copies for the origin and its neighbours, and those it skipped before;
/// the others wait for settling. Nothing is lost.
#[test]
fn a_booting_ring_with_relay_pruning_loses_no_broadcast() {
    for seed in 0..40 {
        let (missed, _) = ring_boot_counted(seed, cfg().reverse_path_settle, true);
        assert!(missed.is_empty(), "seed {seed}: {missed:?}");
    }
}

/// The same boots judged strictly (no settling): some broadcast is lost (what settling is
/// for; the ring test on CI failed this way about one run in eight under load).
#[test]
fn without_settling_a_booting_ring_loses_broadcasts() {
    let lost: usize = (0..40)
        .map(|seed| ring_boot(seed, Duration::ZERO).len())
        .sum();
    assert!(lost > 0, "strict judging lost nothing in 40 boots");
}

/// A settled mesh of `n` nodes linked by `edges` (i < j: j dials i), each node broadcasting
/// `per_node` messages: (every message delivered exactly once at every other node, duplicates
/// dropped, relay copies skipped), over all nodes.
fn settled_broadcasts(
    seed: u64,
    n: usize,
    edges: &[(usize, usize)],
    check: bool,
    prune: bool,
    per_node: usize,
) -> (bool, u64, u64) {
    let mut sim = Sim::new(seed);
    add_topology(&mut sim, n, edges, |c| {
        c.reverse_path_check = check;
        c.relay_pruning = prune;
    });
    sim.start_all();
    sim.run_for(Duration::from_millis(500));
    sim.run_for(cfg().reverse_path_settle);
    let before: Vec<_> = (0..n)
        .map(|i| sim.nodes[i].shard.counters().snapshot())
        .collect();
    for k in 0..per_node {
        for i in 0..n {
            sim.broadcast(i, format!("m-{i}-{k}"));
        }
        sim.run_for(Duration::from_millis(5));
    }
    sim.run_for(Duration::from_millis(500));
    let once = (0..n).all(|i| {
        (0..n).filter(|j| *j != i).all(|j| {
            (0..per_node).all(|k| sim.count_delivered(i, format!("m-{j}-{k}").as_bytes()) == 1)
        })
    });
    let (mut dups, mut skipped) = (0, 0);
    for (i, b) in before.iter().enumerate() {
        let c = sim.nodes[i].shard.counters().snapshot();
        dups += c.dropped_duplicate - b.dropped_duplicate;
        skipped += c.relay_copies_skipped - b.relay_copies_skipped;
    }
    (once, dups, skipped)
}

/// Issue 29's full mesh (the shape multicast discovery builds): flooding makes every relay
/// send every other neighbour a copy, each dropped as a duplicate; relaying only to the
/// neighbours farther from the origin sends none, and loses nothing.
#[test]
fn a_settled_full_mesh_relays_no_broadcast_copy() {
    let n = 5;
    let edges: Vec<(usize, usize)> = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect();
    let (once, dups, skipped) = settled_broadcasts(1, n, &edges, true, true, 20);
    assert!(once, "every broadcast delivered once everywhere");
    assert_eq!(dups, 0, "no copy crossed a link twice");
    // Each of the 100 messages reaches 4 nodes, each of which skips its 3 other links.
    assert_eq!(skipped, 100 * 4 * 3);
    let (once, dups, skipped) = settled_broadcasts(1, n, &edges, false, true, 20);
    assert!(once);
    assert_eq!(
        (dups, skipped),
        (100 * 4 * 3, 0),
        "flooding: every copy a duplicate"
    );
    // `relay_pruning = false`: the copies are sent and refused off path instead.
    let (once, dups, skipped) = settled_broadcasts(1, n, &edges, true, false, 20);
    assert!(once);
    assert_eq!((dups, skipped), (0, 0));
}

/// Random connected meshes, settled: every broadcast still reaches every node exactly once,
/// with fewer duplicates than flooding the same mesh.
#[test]
fn settled_random_meshes_lose_no_broadcast_and_drop_fewer_copies() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let (mut pruned, mut flooded) = (0, 0);
    for seed in 0..6 {
        let n: usize = rng.gen_range(4..=8);
        let mut edges: Vec<(usize, usize)> = (1..n).map(|b| (rng.gen_range(0..b), b)).collect();
        for _ in 0..n {
            let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
            if a != b && !edges.contains(&(a.min(b), a.max(b))) {
                edges.push((a.min(b), a.max(b)));
            }
        }
        let (once, dups, _) = settled_broadcasts(seed, n, &edges, true, true, 5);
        assert!(once, "seed {seed}: {edges:?}");
        let (once, flood_dups, _) = settled_broadcasts(seed, n, &edges, false, true, 5);
        assert!(once, "seed {seed}: flooding {edges:?}");
        pruned += dups;
        flooded += flood_dups;
    }
    assert!(
        pruned * 2 < flooded,
        "relaying dropped {pruned} duplicates, flooding {flooded}"
    );
}

/// A full mesh of `n` booting (`configure` on every node's config), run until every node's
/// graph holds every link and the last change reached the shards (one rebuild interval).
fn boot_full_mesh_edges(seed: u64, n: usize, configure: impl Fn(&mut MeshConfig)) -> Sim {
    let mut sim = Sim::new(seed);
    add_topology(&mut sim, n, &full_mesh_edges(n), configure);
    sim.start_all();
    let deadline = sim.now + Duration::from_secs(2);
    while !graph_is_full(&sim, n) {
        assert!(sim.now < deadline, "seed {seed}: the mesh never formed");
        sim.run_for(Duration::from_millis(1));
    }
    sim.run_for(Duration::from_millis(20));
    sim
}

/// Issue 29: a full mesh booting with `relay_pruning`, every node broadcasting from the moment
/// every node's graph holds every link, while every origin's paths still settle
/// (`reverse_path_settle`, measured from the first table). Each neighbour of the origin takes
/// its frames from the origin's own link, which the origin floods and every node accepts
/// whatever its graph says, so a relay sends it nothing, settling or not: no copy is sent that
/// would be dropped (the 3-node demo dropped ~4.8 M duplicates in its first 4.5 s while relays
/// flooded during settling), and every broadcast still arrives once everywhere.
#[test]
fn a_full_mesh_relays_no_copy_while_its_paths_settle() {
    let n = 5;
    let per_node = 20;
    for seed in 0..4 {
        let mut sim = boot_full_mesh_edges(seed, n, |c| c.relay_pruning = true);
        assert!(
            sim.now - sim.start + Duration::from_millis(500) < cfg().reverse_path_settle,
            "seed {seed}: the test must run while the paths settle"
        );
        let before: Vec<_> = (0..n)
            .map(|i| sim.nodes[i].shard.counters().snapshot())
            .collect();
        for k in 0..per_node {
            for i in 0..n {
                sim.broadcast(i, format!("s-{i}-{k}"));
            }
            sim.run_for(Duration::from_millis(5));
        }
        sim.run_for(Duration::from_millis(200));
        for i in 0..n {
            for j in (0..n).filter(|j| *j != i) {
                for k in 0..per_node {
                    let m = format!("s-{j}-{k}");
                    assert_eq!(
                        sim.count_delivered(i, m.as_bytes()),
                        1,
                        "seed {seed}: {m} at node {i}"
                    );
                }
            }
        }
        let (mut wasted, mut skipped) = (0, 0);
        for (i, b) in before.iter().enumerate() {
            let c = sim.nodes[i].shard.counters().snapshot();
            wasted += c.dropped_duplicate - b.dropped_duplicate;
            wasted += c.dropped_off_path - b.dropped_off_path;
            skipped += c.relay_copies_skipped - b.relay_copies_skipped;
        }
        assert_eq!(wasted, 0, "seed {seed}: copies sent and dropped");
        let msgs = (n * per_node) as u64;
        assert_eq!(
            skipped,
            msgs * (n as u64 - 1) * (n as u64 - 2),
            "seed {seed}"
        );
    }
}

/// Issue 29: while a full mesh forms, each link comes up before its edge counts (both records
/// must list it), and a path table names only links to counted neighbours: the table a link
/// change would build then is the one the node has. None is built or posted for it, only for
/// the edge once it counts (a 60-process start built every table twice). Broadcasts after
/// the mesh formed still arrive once everywhere with the tables this leaves.
#[test]
fn a_link_its_graph_does_not_count_yet_builds_no_path_table() {
    let n = 8;
    let mut sim = boot_full_mesh_edges(3, n, |_| {});
    for i in 0..n {
        let core = &sim.nodes[i].core;
        let (pushed, unchanged) = (core.path_tables_pushed(), core.path_tables_unchanged());
        eprintln!("node {i}: {pushed} tables posted, {unchanged} link changes needed none");
        assert!(unchanged > 0, "node {i}: every link change built a table");
        assert!(pushed > 0, "node {i}");
    }
    for i in 0..n {
        sim.broadcast(i, format!("after-{i}"));
    }
    sim.run_for(Duration::from_millis(200));
    for i in 0..n {
        for j in (0..n).filter(|j| *j != i) {
            let m = format!("after-{j}");
            assert_eq!(sim.count_delivered(i, m.as_bytes()), 1, "{m} at node {i}");
        }
    }
}
