//! Gossip routing over simulated meshes: exactly-once broadcast for several topologies,
//! targeted delivery across a line, TTL expiry.

mod proto_sim;

use proto_sim::*;
use rand::{Rng, SeedableRng};
use shoal_proto::DropReason;
use std::time::Duration;

fn assert_links_match(sim: &Sim, n: usize, edges: &[(usize, usize)]) {
    for i in 0..n {
        let mut expect: Vec<_> = edges
            .iter()
            .filter_map(|&(a, b)| {
                if a == i {
                    Some(sim.id(b))
                } else if b == i {
                    Some(sim.id(a))
                } else {
                    None
                }
            })
            .collect();
        expect.sort();
        expect.dedup();
        assert_eq!(sim.connected(i), expect, "neighbours of node {i}");
        assert_eq!(
            sim.link_count(i),
            expect.len(),
            "one link per neighbour at node {i}"
        );
    }
}

fn broadcast_exactly_once(seed: u64, n: usize, edges: &[(usize, usize)]) {
    let mut sim = topology(seed, n, edges);
    assert_links_match(&sim, n, edges);
    const MSGS: [&[u8]; 6] = [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"];
    for (k, msg) in MSGS.iter().enumerate() {
        sim.broadcast(k % n, msg);
    }
    sim.run_for(Duration::from_millis(200));
    for (k, msg) in MSGS.iter().enumerate() {
        for i in 0..n {
            let want = usize::from(i != k % n);
            assert_eq!(sim.count_delivered(i, msg), want, "node {i}, message {k}");
        }
    }
}

fn line(n: usize) -> Vec<(usize, usize)> {
    (1..n).map(|i| (i - 1, i)).collect()
}

#[test]
fn broadcast_line() {
    broadcast_exactly_once(1, 6, &line(6));
}

#[test]
fn broadcast_ring() {
    let mut e = line(7);
    e.push((6, 0));
    broadcast_exactly_once(2, 7, &e);
}

#[test]
fn broadcast_full_mesh() {
    let n = 6;
    let e: Vec<_> = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect();
    broadcast_exactly_once(3, n, &e);
}

#[test]
fn broadcast_random_graphs() {
    for seed in 0..4u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let n = 9;
        // A random spanning tree (connected, diameter well under the TTL) plus random chords.
        let mut e: Vec<(usize, usize)> = (1..n).map(|b| (rng.gen_range(0..b), b)).collect();
        for _ in 0..6 {
            let a = rng.gen_range(0..n);
            let b = rng.gen_range(0..n);
            if a < b && !e.contains(&(a, b)) {
                e.push((a, b));
            }
        }
        broadcast_exactly_once(100 + seed, n, &e);
    }
}

#[test]
fn targeted_reaches_only_its_destination_across_a_line() {
    let mut sim = topology(5, 4, &line(4));
    let dst = sim.id(3);
    sim.send(0, dst, b"to-d");
    sim.run_for(Duration::from_millis(50));
    assert_eq!(
        (0..4)
            .map(|i| sim.count_delivered(i, b"to-d"))
            .collect::<Vec<_>>(),
        [0, 0, 0, 1]
    );
    // B relayed by flooding (D is not its neighbour); C unicast to its neighbour D.
    assert_eq!(sim.nodes[1].shard.gossip().stats().forwarded, 1);
    assert_eq!(sim.nodes[2].shard.gossip().stats().unicast, 1);
    // And back the other way, to a direct neighbour: a unicast from the start.
    let c = sim.id(2);
    sim.send(3, c, b"to-c");
    sim.run_for(Duration::from_millis(50));
    assert_eq!(
        (0..4)
            .map(|i| sim.count_delivered(i, b"to-c"))
            .collect::<Vec<_>>(),
        [0, 0, 1, 0]
    );
}

#[test]
fn ttl_expiry_is_counted() {
    let mut sim = Sim::new(7);
    let n = 6;
    for j in 0..n {
        let mut c = cfg();
        c.initial_ttl = 3;
        if j > 0 {
            c.static_peers = vec![format!("node{}:{PORT}", j - 1)];
        }
        sim.add_node(c);
    }
    sim.start_all();
    sim.run_for(Duration::from_millis(100));
    sim.broadcast(0, b"short");
    sim.run_for(Duration::from_millis(50));
    // TTL 3: received with 3, 2, 1 by nodes 1, 2, 3; node 3 does not forward.
    assert_eq!(
        (0..n)
            .map(|i| sim.count_delivered(i, b"short"))
            .collect::<Vec<_>>(),
        [0, 1, 1, 1, 0, 0]
    );
    assert_eq!(sim.nodes[3].shard.gossip().stats().ttl_exhausted, 1);
    let far = sim.id(5);
    sim.send(0, far, b"far");
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.count_delivered(5, b"far"), 0);
    assert_eq!(sim.nodes[3].shard.gossip().stats().dropped_ttl, 1);
    let _ = DropReason::TtlExpired;
}

#[test]
fn duplicates_from_a_ring_are_dropped_not_delivered() {
    let mut e = line(4);
    e.push((3, 0));
    let mut sim = topology(9, 4, &e);
    sim.broadcast(0, b"loop");
    sim.run_for(Duration::from_millis(50));
    let dups: u64 = (0..4)
        .map(|i| sim.nodes[i].shard.gossip().stats().dropped_duplicate)
        .sum();
    assert!(
        dups >= 1,
        "the ring must produce at least one duplicate arrival"
    );
    assert!((1..4).all(|i| sim.count_delivered(i, b"loop") == 1));
}

#[test]
fn at_most_once_under_link_churn() {
    // Links are cut (EOF) while messages are in flight; static targets redial them. No node
    // may ever deliver a message twice or deliver its own.
    const MSGS: [&[u8]; 8] = [b"c0", b"c1", b"c2", b"c3", b"c4", b"c5", b"c6", b"c7"];
    let n = 7;
    let mut e = line(n);
    e.extend([(0, 3), (2, 5), (1, 6), (6, 0)]);
    let mut sim = topology(8, n, &e);
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    for round in 0..40 {
        let msg = MSGS[round % MSGS.len()];
        sim.broadcast(rng.gen_range(0..n), msg);
        let (a, b) = e[rng.gen_range(0..e.len())];
        if round % 3 == 0 {
            sim.cut(a, b);
        }
        sim.run_for(Duration::from_millis(rng.gen_range(0..3)));
    }
    sim.run_for(Duration::from_secs(5));
    for i in 0..n {
        let mut ids = std::collections::HashSet::new();
        for id in &sim.nodes[i].delivered_ids {
            assert!(ids.insert(*id), "node {i} delivered {id:?} twice");
        }
        for (src, _) in &sim.nodes[i].delivered {
            assert_ne!(*src, sim.id(i), "no self-echo at node {i}");
        }
    }
    let delivered: usize = (0..n).map(|i| sim.nodes[i].delivered.len()).sum();
    assert!(
        delivered > 40 * (n - 1) / 2,
        "most messages got through: {delivered}"
    );
    // After the churn the mesh heals and a new broadcast reaches everyone exactly once.
    sim.broadcast(0, b"after-churn");
    sim.run_for(Duration::from_millis(50));
    for i in 1..n {
        assert_eq!(sim.count_delivered(i, b"after-churn"), 1, "node {i}");
    }
}
