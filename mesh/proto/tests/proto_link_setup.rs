//! A link's setup on a busy node: the hand-over of a new link to its shard must not wait behind
//! the frames the control plane queued for the shards before it (issue 29: in a full mesh of
//! 40 processes started together on one host, links died on the heartbeat timeout while they
//! were handed over).

mod proto_sim;

use proto_sim::*;
use shoal_proto::link::CloseReason;
use std::time::Duration;

#[test]
fn a_busy_full_mesh_starting_together_keeps_every_link() {
    // 16 nodes started 100 ms apart (as a storm's processes come up one after the other) that
    // find each other by scouting: every node dials every node it hears, the full mesh a LAN
    // builds. Each shard takes 8 ms per control-plane command: a shard short of CPU, whose
    // outbox the start-up burst of Membership frames fills (own record flooded on every new
    // link, every new neighbour caught up). A link established while the outbox is deep was
    // handed to its shard only after every frame queued before it, seconds after the peer
    // had established its end and started its heartbeat timeout: the peer closed it for
    // silence (before the fix: 39 such closes, at nodes 5, 6, 13, 14 and 15).
    let n = 16;
    let mut sim = Sim::new(29);
    sim.shard_cmd_cost = Duration::from_millis(8);
    for _ in 0..n {
        let mut c = cfg();
        c.scouting = true;
        sim.add_node(c);
    }
    for i in 0..n {
        sim.start_node(i);
        sim.run_for(Duration::from_millis(100));
    }
    sim.run_for(Duration::from_secs(20));
    let timeout = sim.nodes[0].cfg.heartbeat_timeout;
    // The condition is there: some outbox held more than a heartbeat timeout of shard work.
    let deepest = sim.nodes.iter().map(|x| x.max_backlog).max().unwrap_or(0);
    assert!(
        sim.shard_cmd_cost * deepest as u32 > timeout,
        "the deepest outbox ({deepest} commands) is under {timeout:?} of shard work"
    );
    let silent: Vec<(usize, usize)> = (0..n)
        .map(|i| {
            let reasons = &sim.nodes[i].close_reasons;
            let c = reasons
                .iter()
                .filter(|r| **r == CloseReason::HeartbeatTimeout)
                .count();
            (i, c)
        })
        .filter(|(_, c)| *c > 0)
        .collect();
    assert!(
        silent.is_empty(),
        "links closed after {timeout:?} of silence (node, count): {silent:?}"
    );
    for i in 0..n {
        let refused = sim.nodes[i].core.peers().stats().claims_refused;
        assert_eq!(refused, 0, "node {i} refused late claims");
        assert_eq!(sim.connected(i).len(), n - 1, "node {i} linked to all");
        assert_eq!(sim.members(i).len(), n - 1, "node {i} knows every member");
    }
}
