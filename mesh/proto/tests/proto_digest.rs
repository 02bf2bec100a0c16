//! Membership anti-entropy between Shoal nodes over simulated meshes (`membership::sync`):
//! an idle mesh of Shoal nodes sends no periodic Membership floods and keeps every record, a
//! record lost on the way is repaired by the digest exchange, a crashed node still leaves
//! and its record expires, and a node without the digest (a legacy link) keeps getting the
//! periodic refreshes, also from origins several hops away.

mod proto_sim;

use proto_sim::*;
use shoal_proto::control::ControlEvent;
use std::time::Duration;

fn full(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect()
}

fn membership_tx(sim: &Sim, i: usize) -> u64 {
    sim.nodes[i].tx.membership_frames
}

fn left_events(sim: &Sim, i: usize) -> usize {
    sim.nodes[i]
        .member_events
        .iter()
        .filter(|e| matches!(e, ControlEvent::MemberLeft { .. }))
        .count()
}

#[test]
fn an_idle_shoal_mesh_sends_no_periodic_floods_and_keeps_every_record() {
    let n = 6;
    let mut sim = topology(31, n, &full(n));
    sim.run_for(Duration::from_secs(1));
    let before: Vec<u64> = (0..n).map(|i| membership_tx(&sim, i)).collect();
    let timeout = sim.nodes[0].cfg.membership_timeout;
    // Three expiry periods with no Membership frame at all.
    sim.run_for(timeout * 3);
    for (i, b) in before.iter().enumerate() {
        assert_eq!(
            membership_tx(&sim, i),
            *b,
            "node {i} sent Membership frames"
        );
        let m = sim.nodes[i].core.membership();
        assert_eq!(m.members().count(), n - 1, "node {i}");
        assert_eq!(
            m.stats().expired,
            0,
            "node {i}: a live origin's record expired"
        );
        assert_eq!(m.adjacency().count(), n, "node {i} holds every record");
        assert!(m.stats().sync.summaries_sent > 0);
        assert!(m.stats().sync.quiet_rounds > 0);
        assert_eq!(left_events(&sim, i), 0);
    }
}

#[test]
fn a_lost_record_is_repaired_by_the_digests() {
    // Chain 0 – 1 – 2 – 3; node 4 links to 3 while every Membership frame is lost (as if
    // dropped at a full outbox or link queue), so nobody but 3 and 4 hear of the new link.
    let mut sim = Sim::new(32);
    add_topology(&mut sim, 5, &[(0, 1), (1, 2), (2, 3), (3, 4)], |_| {});
    for i in 0..4 {
        sim.start_node(i);
    }
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.members(0).len(), 3);
    sim.set_loss(1.0);
    sim.start_node(4);
    sim.run_for(Duration::from_millis(500));
    sim.set_loss(0.0);
    let floods: Vec<u64> = (0..5)
        .map(|i| sim.nodes[i].core.membership().stats().own_floods)
        .collect();
    assert!(
        !sim.members(0).contains(&sim.id(4)),
        "the loss must have hidden node 4 from node 0"
    );
    // No periodic flood goes anywhere: only the digests can repair it.
    let interval = sim.nodes[0].cfg.membership_interval;
    sim.run_for(interval * 3);
    for (i, f) in floods.iter().enumerate() {
        assert_eq!(sim.members(i).len(), 4, "node {i}: {:?}", sim.members(i));
        assert_eq!(
            sim.nodes[i].core.membership().stats().own_floods,
            *f,
            "node {i} flooded its record: the repair must not need it"
        );
    }
    let pushed: u64 = (0..5)
        .map(|i| sim.nodes[i].core.membership().stats().sync.pushed)
        .sum();
    assert!(pushed > 0);
}

#[test]
fn a_crashed_node_leaves_and_its_record_expires() {
    let n = 5;
    let mut sim = topology(33, n, &full(n));
    sim.run_for(Duration::from_secs(1));
    let gone = sim.id(4);
    sim.crash_node(4);
    sim.run_for(Duration::from_millis(200));
    for i in 0..4 {
        assert!(!sim.members(i).contains(&gone), "node {i}");
    }
    let timeout = sim.nodes[0].cfg.membership_timeout;
    sim.run_for(timeout * 2 + Duration::from_secs(1));
    for i in 0..4 {
        let m = sim.nodes[i].core.membership();
        assert!(
            m.adjacency().all(|(o, _)| *o != gone),
            "node {i} still holds the crashed node's record"
        );
        assert!(m.stats().expired >= 1, "node {i}");
    }
}

#[test]
fn a_node_without_the_digest_keeps_getting_periodic_refreshes_from_far_origins() {
    // Chain 0 – 1 – 2 – 3 where node 3 has the digest off (it floods and expires as mesh-v1
    // does): node 0's record must keep reaching it through 1 and 2, fresh within its expiry.
    let mut sim = Sim::new(34);
    add_topology(&mut sim, 3, &[(0, 1), (1, 2)], |_| {});
    let mut c = cfg();
    c.membership_digest = false;
    c.static_peers = vec![format!("node2:{PORT}")];
    sim.add_node(c);
    sim.start_all();
    sim.run_for(Duration::from_secs(1));
    assert!(!sim.nodes[3].core.membership().digest_enabled());
    assert!(sim.nodes[0].core.membership().digest_enabled());
    let timeout = sim.nodes[0].cfg.membership_timeout;
    let rx0 = sim.nodes[3].rx.membership_frames;
    sim.run_for(timeout * 3);
    assert_eq!(sim.members(3).len(), 3, "{:?}", sim.members(3));
    assert_eq!(
        left_events(&sim, 3),
        0,
        "a record expired at the legacy node"
    );
    assert_eq!(sim.nodes[3].core.membership().stats().expired, 0);
    // About three records per interval arrive (0's, 1's, 2's refreshes).
    let intervals = (timeout * 3).as_secs() / sim.nodes[0].cfg.membership_interval.as_secs();
    assert!(
        sim.nodes[3].rx.membership_frames - rx0 >= 3 * (intervals - 1),
        "{} Membership frames in {intervals} intervals",
        sim.nodes[3].rx.membership_frames - rx0
    );
    // Node 0 learned it is 3 hops from a legacy link.
    assert!(sim.nodes[0].core.membership().legacy_hops() <= 3);
}
