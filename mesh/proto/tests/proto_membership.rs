//! Membership gossip over simulated meshes: learning members through a bridge, losing them
//! after a cut once their records expire, and a restarted node outranking its old record.

mod proto_sim;

use proto_sim::*;
use shoal_proto::control::ControlEvent;
use std::time::Duration;

#[test]
fn members_are_learned_through_a_bridge() {
    // B(1) – A(0) – C(2): B and C are not neighbours but see each other as members.
    let mut sim = topology(11, 3, &[(0, 1), (0, 2)]);
    sim.run_for(Duration::from_millis(50));
    let (a, b, c) = (sim.id(0), sim.id(1), sim.id(2));
    assert!(!sim.connected(1).contains(&c));
    let mut want_b = vec![a, c];
    want_b.sort();
    assert_eq!(sim.members(1), want_b);
    let mut want_c = vec![a, b];
    want_c.sort();
    assert_eq!(sim.members(2), want_c);
    assert!(sim.nodes[1]
        .member_events
        .contains(&ControlEvent::MemberJoined { peer: c }));
    // Stable: periodic floods and expiry keep the view unchanged.
    sim.run_for(Duration::from_secs(20));
    assert_eq!(sim.members(1), want_b);
    assert_eq!(
        sim.nodes[1]
            .member_events
            .iter()
            .filter(|e| matches!(e, ControlEvent::MemberLeft { peer: _ }))
            .count(),
        0
    );
}

#[test]
fn member_leaves_after_a_cut_once_its_record_expires() {
    // A(0) – B(1) – C(2); then the B–C link is cut and never comes back (C's static dial
    // target is B, and B is cut off from C for good).
    let mut sim = topology(12, 3, &[(0, 1), (1, 2)]);
    let c = sim.id(2);
    let a = sim.id(0);
    assert!(sim.members(0).contains(&c));
    sim.partition(1, 2);
    sim.cut(1, 2);
    let timeout = sim.nodes[0].cfg.membership_timeout;
    // Union graph: C's own (now stale) record still lists B, so C stays a member until it
    // expires; it must be gone one timeout (plus a flood's travel) later, and stay gone.
    sim.run_for(timeout + Duration::from_millis(100));
    assert!(!sim.members(0).contains(&c), "C must have left A's view");
    assert!(sim.nodes[0]
        .member_events
        .contains(&ControlEvent::MemberLeft { peer: c }));
    assert!(!sim.members(2).contains(&a), "A must have left C's view");
    sim.run_for(Duration::from_secs(10));
    assert!(!sim.members(0).contains(&c));
    assert_eq!(sim.members(0), vec![sim.id(1)]);
}

#[test]
fn healed_cut_rejoins() {
    let mut sim = topology(13, 3, &[(0, 1), (1, 2)]);
    let c = sim.id(2);
    sim.partition(1, 2);
    sim.cut(1, 2);
    sim.run_for(Duration::from_secs(8));
    assert!(!sim.members(0).contains(&c));
    sim.heal(1, 2);
    // C's static target redials B with backoff (at most 30 s + jitter).
    sim.run_for(Duration::from_secs(40));
    assert!(sim.members(0).contains(&c));
    let joins = sim.nodes[0]
        .member_events
        .iter()
        .filter(|e| **e == ControlEvent::MemberJoined { peer: c })
        .count();
    assert_eq!(joins, 2);
}

#[test]
fn restarted_node_with_same_id_outranks_its_old_record() {
    // Versions come from the wall clock, so a node restarted with the same id (identity
    // mesh) floods a record that beats everything its previous run flooded.
    use shoal_proto::PeerId;
    use shoal_proto::{LinkId, MemberGraph, RecordOutcome};
    use std::time::Instant;
    let now = Instant::now();
    let (a, b, c) = (PeerId([1; 16]), PeerId([2; 16]), PeerId([3; 16]));
    let d = Duration::from_secs(2);
    let mut at_a = MemberGraph::new(a, d, d * 3, 64, 1_000_000, now);
    let mut b_run1 = MemberGraph::new(b, d, d * 3, 64, 1_000_000, now);
    for k in 0..50 {
        b_run1.neighbour_up(PeerId([10 + k; 16]), LinkId(k as u64), 1_000_000, now);
    }
    b_run1.neighbour_up(c, LinkId(99), 1_000_000, now);
    assert_eq!(
        at_a.on_record(LinkId(1), &b_run1.own_record(), 1_000_000, now),
        RecordOutcome::Stored
    );
    // 5 s later B restarts: its first record must not be taken for an old one.
    let mut b_run2 = MemberGraph::new(b, d, d * 3, 64, 1_005_000, now);
    b_run2.neighbour_up(a, LinkId(1), 1_005_000, now);
    assert_eq!(
        at_a.on_record(LinkId(1), &b_run2.own_record(), 1_005_000, now),
        RecordOutcome::Stored
    );
    assert!(!at_a.is_member(&c), "the restarted B no longer links to C");
}

#[test]
fn own_record_echoed_by_a_faster_path_is_not_an_outranking() {
    // Triangle 0–1–2 where 0→1 is slower than 0→2→1: node 1 stores 0's record from node 2
    // first and relays it on every other link, back to 0. That echo carries 0's current
    // version; taking it for a record of an earlier run made 0 flood a new version, which
    // echoed again: a flood loop at the triangle's round-trip rate, forever.
    let mut sim = Sim::new(21);
    for j in 0..3 {
        let mut c = cfg();
        c.static_peers = (0..j).map(|a| format!("node{a}:{PORT}")).collect();
        sim.add_node(c);
    }
    sim.latency_of.insert((0, 1), Duration::from_millis(5));
    sim.start_all();
    sim.run_for(Duration::from_secs(1));
    let floods = |sim: &Sim| sim.nodes[0].core.membership().stats().own_floods;
    let before = floods(&sim);
    let interval = sim.nodes[0].cfg.membership_interval;
    sim.run_for(interval * 10);
    // One periodic flood per interval (and one of slack for the phase).
    assert!(
        floods(&sim) - before <= 11,
        "{} own floods in 10 intervals",
        floods(&sim) - before
    );
    assert_eq!(sim.members(0).len(), 2);
}

#[test]
fn a_full_mesh_starting_at_once_floods_each_own_record_a_few_times_not_once_per_link() {
    // 16 nodes started together, every pair linked: each node sees 15 links come up within a
    // few ms. Flooding a new own version on every one sent 15 versions to up to 15 links per
    // node (about N³ frames in all: at 40–60 processes on one host, the start-up burst that
    // saturated it and starved heartbeats). The flood pacing sends the first two changes at once
    // and folds the rest into one flood per gap (here: one more).
    let n = 16;
    let edges: Vec<(usize, usize)> = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect();
    let mut sim = Sim::new(29);
    add_topology(&mut sim, n, &edges, |_| {});
    sim.start_all();
    // Half a membership interval: only change-driven floods so far, no periodic one.
    let interval = sim.nodes[0].cfg.membership_interval;
    sim.run_for(interval / 2);
    for i in 0..n {
        let s = sim.nodes[i].core.membership().stats();
        assert_eq!(sim.connected(i).len(), n - 1, "node {i} linked to all");
        assert_eq!(sim.members(i).len(), n - 1, "node {i} knows every member");
        assert!(
            s.own_floods <= 4,
            "node {i}: {} own floods for {} new links ({} deferred)",
            s.own_floods,
            n - 1,
            s.floods_deferred
        );
    }
    // Every node's stored record of every other lists all its neighbours: the last (deferred)
    // flood carried the whole burst.
    for i in 0..n {
        let m = sim.nodes[i].core.membership();
        for (origin, ns) in m.adjacency() {
            assert_eq!(ns.len(), n - 1, "node {i}'s record of {origin}");
        }
    }
}
