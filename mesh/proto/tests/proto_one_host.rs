//! Many nodes on one host (issue 29): tests, the loadgen storm and a user running several
//! processes all announce from one address. The per-source new-peer budget
//! (`new_peer_rate_per_source`) bounds what a stranger spamming fake announces from one address
//! costs; it must not make a host's own real nodes wait seconds to link.

mod proto_sim;

use proto_sim::*;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Runs until every node is linked to every other (or `limit`); the simulated time it took.
fn until_all_linked(sim: &mut Sim, limit: Duration) -> Option<Duration> {
    let n = sim.nodes.len();
    let t0 = sim.now;
    while sim.now - t0 < limit {
        if (0..n).all(|i| sim.connected(i).len() == n - 1) {
            return Some(sim.now - t0);
        }
        sim.run_for(Duration::from_millis(10));
    }
    None
}

#[test]
fn twenty_four_nodes_of_one_host_link_to_all_once_they_heard_each_other() {
    // 24 nodes on 127.0.0.1, each its own port, started together, linking by scouting with
    // the default settings (`new_peer_rate_per_source = 10`). Every node has heard every
    // other's first announce within the announce interval (1 s, +20 % jitter). Before the
    // fix each node admitted 10 new peers from that one address, then 10 a second, so the
    // full mesh of links took seconds more (the storm: 4-6 s at 40-60 processes).
    let n = 24;
    let mut sim = Sim::new(29);
    for _ in 0..n {
        let mut c = cfg();
        c.scouting = true;
        sim.add_node_on_host(c, Ipv4Addr::LOCALHOST);
    }
    sim.start_all();
    let took = until_all_linked(&mut sim, Duration::from_secs(5));
    let limited: u64 = (0..n)
        .map(|i| sim.nodes[i].core.peers().stats().announces_rate_limited)
        .sum();
    eprintln!("all linked after {took:?}, announces rate-limited {limited}");
    assert!(
        took.is_some_and(|t| t <= Duration::from_millis(1500)),
        "every node linked to all after {took:?} (announces rate-limited: {limited})"
    );
    for i in 0..n {
        assert_eq!(sim.members(i).len(), n - 1, "node {i} knows every member");
    }
}

/// Beacons sent by all nodes during `d` of simulated time.
fn beacons_during(sim: &mut Sim, d: Duration) -> u64 {
    let sent = |s: &Sim| -> u64 { s.nodes.iter().map(|n| n.core.beacons_sent()).sum() };
    let before = sent(sim);
    sim.run_for(d);
    sent(sim) - before
}

#[test]
fn a_linked_host_beacons_at_the_idle_interval_and_still_links_newcomers_restarts_and_cuts() {
    // Issue 29, "quiet means quiet": each node's beacon reaches every other node on the host
    // (N − 1 wake-ups a second each); once every node is linked to all, beacons only serve
    // newcomers, whose own beacons make the others dial them.
    let n = 12;
    let mut sim = Sim::new(31);
    let mut c = cfg();
    c.scouting = true;
    for _ in 0..n {
        sim.add_node_on_host(c.clone(), Ipv4Addr::LOCALHOST);
    }
    sim.start_all();
    assert!(until_all_linked(&mut sim, Duration::from_secs(5)).is_some());
    sim.run_for(Duration::from_secs(10));
    let window = Duration::from_secs(20);
    let idle = beacons_during(&mut sim, window);
    // 2 s apart on average: 10 per node in 20 s (1 s apart: 20).
    eprintln!("beacons in 20 s idle, {n} nodes: {idle}");
    assert!(
        (n as u64 * 8..=n as u64 * 12).contains(&idle),
        "idle beacons: {idle} from {n} nodes in {window:?}"
    );
    // A newcomer links to every node as fast as at the start.
    sim.add_node_on_host(c.clone(), Ipv4Addr::LOCALHOST);
    sim.start_node(n);
    let took = until_all_linked(&mut sim, Duration::from_secs(5));
    assert!(
        took.is_some_and(|t| t <= Duration::from_millis(1500)),
        "newcomer linked to all after {took:?}"
    );
    // A restarted node, too.
    sim.run_for(Duration::from_secs(15));
    sim.restart_node(3);
    let took = until_all_linked(&mut sim, Duration::from_secs(5));
    assert!(
        took.is_some_and(|t| t <= Duration::from_millis(2500)),
        "restarted node linked to all after {took:?}"
    );
    // A cut link comes back (both ends redial a peer announced within `peer_lost_timeout`).
    sim.run_for(Duration::from_secs(15));
    sim.cut(1, 2);
    let took = until_all_linked(&mut sim, Duration::from_secs(10));
    assert!(took.is_some(), "the cut link came back");
}
