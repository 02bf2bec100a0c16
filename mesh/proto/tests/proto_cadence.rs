//! The Discovery cycle's idle stretch over simulated meshes of real cores (issue 29: "a
//! quiet mesh costs almost nothing"): in a full mesh, where every neighbour holds a node's
//! lease by link (Hello feature bit 4), an idle node announces once per
//! `announce_idle_period` instead of once per `announce_period`, keeps every participant
//! and match, and a crashed node still leaves one lease after its links; in a sparse mesh
//! the cycle stays within a third of the lease and nothing expires either.

mod proto_sim;

use proto_sim::*;
use shoal_discovery::types::EndpointKind;
use shoal_proto::MeshConfig;
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);

fn full(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect()
}

/// A mesh of `n` nodes linked by `edges`, each with a writer and a reader on "t", settled
/// for 30 s (the cycle's period at its longest after the last change).
fn idle_mesh(n: usize, edges: &[(usize, usize)], configure: impl Fn(&mut MeshConfig)) -> Sim {
    let mut sim = Sim::new(41);
    add_topology(&mut sim, n, edges, configure);
    sim.start_all();
    sim.run_for(Duration::from_millis(300));
    for i in 0..n {
        sim.create_endpoint(i, EndpointKind::Writer, "t", &[]);
        sim.create_endpoint(i, EndpointKind::Reader, "t", &[]);
    }
    sim.run_for(SEC * 30);
    sim
}

fn frames_in(sim: &Sim) -> u64 {
    sim.nodes
        .iter()
        .map(|n| n.core.discovery_stats().frames_in)
        .sum()
}

fn expired(sim: &Sim) -> u64 {
    sim.nodes
        .iter()
        .map(|n| n.core.discovery_stats().participants_expired)
        .sum()
}

/// Every node knows every other participant and holds every match: each writer with each
/// reader, but a remote node's writer with its own reader (that node's business).
fn all_matched(sim: &Sim, n: usize) -> bool {
    sim.nodes.iter().all(|node| {
        node.core.topics().remotes_len() == n - 1
            && node.core.topics().graph().match_count() == n * n - (n - 1)
    })
}

#[test]
fn an_idle_full_mesh_announces_once_per_idle_period_and_keeps_every_match() {
    const N: usize = 8;
    let window = SEC * 60;
    let count = |stretch: bool| {
        let mut sim = idle_mesh(N, &full(N), |c| {
            if !stretch {
                c.topics.announce_idle_period = c.topics.announce_period;
            }
        });
        assert!(all_matched(&sim, N), "settled");
        let (f0, e0) = (frames_in(&sim), expired(&sim));
        sim.run_for(window);
        assert!(all_matched(&sim, N), "every participant and match kept");
        assert_eq!(expired(&sim), e0, "no lease ran out");
        frames_in(&sim) - f0
    };
    let every_second = count(false);
    let stretched = count(true);
    eprintln!(
        "Discovery frames received in 60 s idle, full mesh of {N}: cycle every 1 s \
         {every_second}, stretched to 10 s {stretched}"
    );
    // Each origin's cycle reaches its N - 1 neighbours directly (relays skip the nodes the
    // origin's record lists): one frame per neighbour per cycle.
    let per_cycle = (N * (N - 1)) as u64;
    assert!(every_second >= per_cycle * 59, "{every_second}");
    assert!(
        (per_cycle * 5..=per_cycle * 7).contains(&stretched),
        "one cycle per 10 s: {stretched} frames, {per_cycle} per round of cycles"
    );
}

#[test]
fn a_crashed_node_of_an_idle_full_mesh_leaves_one_lease_after_its_links() {
    const N: usize = 6;
    let mut sim = idle_mesh(N, &full(N), |_| {});
    assert!(all_matched(&sim, N));
    let lease = MeshConfig::default().topics.participant_lease;
    sim.crash_node(N - 1);
    let mut waited = Duration::ZERO;
    let step = Duration::from_millis(100);
    while (0..N - 1).any(|i| sim.nodes[i].core.topics().remotes_len() == N - 1) {
        sim.run_for(step);
        waited += step;
        // The lease runs from the last renewal by link, at most one expiry pass (1 s) before
        // the link's end, and the pass that finds it out runs once a second.
        assert!(waited <= lease + SEC * 2, "still held after {waited:?}");
    }
    assert!(waited >= lease - SEC, "gone before its lease: {waited:?}");
    for i in 0..N - 1 {
        assert_eq!(sim.nodes[i].core.topics().remotes_len(), N - 2);
    }
}

#[test]
fn a_sparse_mesh_keeps_its_cycle_within_a_third_of_the_lease_and_loses_no_participant() {
    // A ring of 8: most participants are heard only through relays, which renew their
    // leases only from frames.
    const N: usize = 8;
    let ring: Vec<(usize, usize)> = (0..N)
        .map(|i| (i.min((i + 1) % N), i.max((i + 1) % N)))
        .collect();
    let mut sim = idle_mesh(N, &ring, |_| {});
    assert!(all_matched(&sim, N), "settled");
    let e0 = expired(&sim);
    sim.run_for(SEC * 60);
    assert!(all_matched(&sim, N), "every participant and match kept");
    assert_eq!(expired(&sim), e0, "no lease ran out");
    let lease = MeshConfig::default().topics.participant_lease;
    for node in &sim.nodes {
        assert!(node.core.topics().announce_period_now() <= lease / 3);
    }
}
