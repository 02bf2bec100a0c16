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
