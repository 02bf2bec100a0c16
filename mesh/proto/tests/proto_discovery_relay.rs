//! Discovery relays along the broadcast relay's tree (issue 29: "forward a flooded frame —
//! broadcast Data, Membership, Discovery — only where it is needed"). With `relay_pruning`
//! a relay of an origin's Discovery frame skips the links a broadcast relay of that origin
//! skips (neighbours no farther from the origin, which take its Discovery frames only from
//! links toward it), and the farther neighbours another relay ranks before it for (one
//! relay into each node: a lost cycle is repaired by the next). Before, only the neighbours the origin's record lists were skipped, so in
//! a sparse mesh (what `max_links` builds) every node's 1 s cycle reached each node over most of
//! its links: a 60-process storm with `max_links = 8` received ~440 control frames per node
//! per second idle, with or without `relay_pruning`.

mod proto_sim;

use proto_sim::*;
use shoal_discovery::types::EndpointKind;
use std::time::Duration;

const N: usize = 16;

/// A circulant graph on `N` nodes, offsets 1, 2 and 5: degree 6, connected, not full.
fn edges() -> Vec<(usize, usize)> {
    let mut e = Vec::new();
    for i in 0..N {
        for d in [1, 2, 5] {
            let j = (i + d) % N;
            e.push((i.min(j), i.max(j)));
        }
    }
    e.sort_unstable();
    e.dedup();
    e
}

/// Discovery frames received by all nodes over a 10 s window of a settled mesh (every
/// origin's paths settled), and whether every node then knew every other participant.
fn idle_discovery(prune: bool) -> (u64, bool) {
    let mut sim = Sim::new(29);
    // The cycle at 1 s throughout (its idle stretch off): the count is per cycle.
    add_topology(&mut sim, N, &edges(), |c| {
        c.relay_pruning = prune;
        c.topics.announce_idle_period = c.topics.announce_period;
    });
    sim.start_all();
    sim.run_for(Duration::from_millis(200));
    for i in 0..N {
        sim.create_endpoint(i, EndpointKind::Writer, "t", &[]);
    }
    // Past `reverse_path_settle` (4 s) after the last link change.
    sim.run_for(Duration::from_secs(8));
    let frames = |s: &Sim| -> u64 {
        (0..N)
            .map(|i| s.nodes[i].core.discovery_stats().frames_in)
            .sum()
    };
    let before = frames(&sim);
    sim.run_for(Duration::from_secs(10));
    let got = frames(&sim) - before;
    let all_known = (0..N).all(|i| sim.nodes[i].core.topics().remotes_len() == N - 1);
    (got, all_known)
}

#[test]
fn with_relay_pruning_discovery_follows_the_relay_tree_and_still_reaches_everyone() {
    let (flood, flood_known) = idle_discovery(false);
    let (tree, tree_known) = idle_discovery(true);
    eprintln!(
        "Discovery frames received in 10 s, {N} nodes of degree 6: flooding {flood}, tree {tree}"
    );
    assert!(flood_known && tree_known, "a node missed a participant");
    // One cycle per origin per second reaches each of the other N - 1 nodes at least once.
    let least = 10 * (N * (N - 1)) as u64;
    assert!(
        tree >= least,
        "fewer frames than one copy per node: {tree} < {least}"
    );
    // Along the tree each node gets an origin's frame from the first of its relays by rank
    // once the origin's paths settled (2 400 here: one copy per node per cycle; from every
    // neighbour one hop nearer, 5 760 before relays were ranked, 4 960 with three ranked as
    // broadcasts are); flooding sends it over most links (the record-listed neighbours
    // aside): 9 440. A tenth more allows for a cycle at the window's edge.
    assert!(
        tree <= least + least / 10,
        "the tree should carry one copy per node per cycle: {tree} against {least}"
    );
}

/// The topics core checks Discovery frames against reverse paths over the topic-capable
/// nodes. Once every node of the graph is capable those are the control core's paths of the
/// whole graph, which it builds anyway: the topics core takes them and builds none of its own
/// (at 60 nodes starting at once its own builds were ~5 % of the machine), and Discovery
/// still reaches every node after the graph changes.
#[test]
fn once_every_node_is_topic_capable_the_topics_core_takes_the_control_cores_paths() {
    let mut sim = Sim::new(31);
    add_topology(&mut sim, N, &edges(), |_| {});
    sim.start_all();
    sim.run_for(Duration::from_secs(8));
    assert!((0..N).all(|i| sim.nodes[i].core.topics().remotes_len() == N - 1));
    let stats = |s: &Sim| -> Vec<(u64, u64)> {
        (0..N)
            .map(|i| {
                let d = s.nodes[i].core.discovery_stats();
                (d.paths_rebuilt, d.paths_shared)
            })
            .collect()
    };
    let before = stats(&sim);
    // Two links go: every node's graph changes shape.
    sim.cut(0, 1);
    sim.cut(3, 8);
    sim.run_for(Duration::from_secs(8));
    let after = stats(&sim);
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(a.0, b.0, "node {i} built paths of its own: {b:?} -> {a:?}");
        assert!(
            a.1 > b.1,
            "node {i} took no paths after the change: {b:?} -> {a:?}"
        );
    }
    // A writer created after the change is known at every node.
    sim.create_endpoint(0, EndpointKind::Writer, "after", &[]);
    sim.run_for(Duration::from_secs(3));
    for i in 1..N {
        assert_eq!(
            sim.nodes[i].core.topics().graph().endpoint_count(),
            1,
            "node {i} missed the writer"
        );
    }
}
