//! An idle mesh costs little (issue 29): heartbeats go only on a link direction that sent
//! nothing else for a heartbeat interval, and an idle node's timers wake it only for the
//! periodic work it has (announces, records, one look at its links per period), not on a
//! polling period per link or per thread.

mod proto_sim;

use proto_sim::*;
use shoal_proto::config::MeshConfig;
use shoal_proto::wire::FrameType;
use shoal_proto::LinkId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A full mesh of `n` nodes (static links), each with [`cfg`] as `configure` changes it,
/// started and run until every node is linked to all.
fn full_mesh(seed: u64, n: usize, configure: impl Fn(&mut MeshConfig)) -> Sim {
    let edges = full_mesh_edges(n);
    let mut sim = Sim::new(seed);
    add_topology(&mut sim, n, &edges, configure);
    sim.start_all();
    for _ in 0..100 {
        sim.run_for(Duration::from_millis(100));
        if (0..n).all(|i| sim.connected(i).len() == n - 1 && sim.members(i).len() == n - 1) {
            return sim;
        }
    }
    panic!("the full mesh of {n} did not form");
}

/// Runs `sim` for `window` with every node's written frames logged; per node, per link, in
/// order: (when, frame type).
fn log_frames(sim: &mut Sim, window: Duration) -> Vec<BTreeMap<LinkId, Vec<(Instant, u8)>>> {
    for n in sim.nodes.iter_mut() {
        n.shard.sent_log = Some(Vec::new());
    }
    sim.run_for(window);
    sim.nodes
        .iter_mut()
        .map(|n| {
            let mut by_link: BTreeMap<LinkId, Vec<(Instant, u8)>> = BTreeMap::new();
            for (t, link, ty) in n.shard.sent_log.take().unwrap_or_default() {
                by_link.entry(link).or_default().push((t, ty));
            }
            by_link
        })
        .collect()
}

/// Checks that every Heartbeat in `log` went out at least `interval` after the frame before
/// it on its link; returns the heartbeats and the frames seen.
fn heartbeats_only_after_silence(
    log: &[BTreeMap<LinkId, Vec<(Instant, u8)>>],
    interval: Duration,
) -> (usize, usize) {
    let (mut beats, mut frames) = (0, 0);
    for (node, links) in log.iter().enumerate() {
        for (link, sent) in links {
            frames += sent.len();
            for w in sent.windows(2) {
                let ((t0, _), (t1, ty)) = (w[0], w[1]);
                if ty == FrameType::Heartbeat as u8 {
                    beats += 1;
                    let gap = t1 - t0;
                    assert!(
                        gap >= interval,
                        "node {node} link {link:?}: a Heartbeat {gap:?} after another frame \
                         (the link had sent something within the interval)"
                    );
                }
            }
        }
    }
    (beats, frames)
}

#[test]
fn an_idle_link_that_carries_other_frames_sends_no_heartbeat() {
    // Every link carries its end's Discovery announce each second (the idle stretch of
    // the cycle off) and its Membership record every two: no heartbeat is needed, and
    // none may go within a heartbeat interval of another frame on the same link direction.
    let mut sim = full_mesh(29, 6, |c| {
        c.topics.announce_idle_period = c.topics.announce_period;
    });
    sim.run_for(Duration::from_secs(5));
    let hb = MeshConfig::default().heartbeat_interval;
    let log = log_frames(&mut sim, Duration::from_secs(10));
    let (beats, frames) = heartbeats_only_after_silence(&log, hb);
    // 6 nodes × 5 links × 10 s: ~10 announces and ~5 records per link direction.
    assert!(
        frames > 6 * 5 * 10,
        "the links carried their periodic frames: {frames}"
    );
    assert!(
        beats * 20 <= frames,
        "heartbeats are the exception on links that carry announces: {beats} of {frames}"
    );
}

#[test]
fn a_link_with_gaps_gets_heartbeats_only_in_the_gaps() {
    // Announces every 3 s and records every 2 s leave seconds with nothing sent: those get a
    // heartbeat (the peer's 3 s timeout needs one), the others none.
    let mut sim = full_mesh(30, 5, |c| {
        c.topics.announce_period = Duration::from_secs(3);
        c.topics.participant_lease = Duration::from_secs(12);
    });
    sim.run_for(Duration::from_secs(5));
    let hb = MeshConfig::default().heartbeat_interval;
    let log = log_frames(&mut sim, Duration::from_secs(12));
    let (beats, _) = heartbeats_only_after_silence(&log, hb);
    assert!(beats > 0, "the gaps were filled with heartbeats");
    for i in 0..5 {
        assert_eq!(
            sim.connected(i).len(),
            4,
            "no link died for want of a heartbeat"
        );
    }
}

#[test]
fn an_idle_node_wakes_for_timers_only_for_its_periodic_work() {
    // An idle full mesh of 8: per second a node has one announce cycle, half a Membership
    // flood, and one look at its links (their heartbeat deadlines, all on one grid, all
    // moved by the same announce). Its control core and its data path each ask to be woken
    // a few times a second, whatever its number of links; the data path used to wake every
    // 200 ms for each link to look for a slow-peer kill.
    let n = 8;
    let mut sim = full_mesh(31, n, |_| {});
    sim.run_for(Duration::from_secs(10));
    for node in sim.nodes.iter_mut() {
        node.control_wakes = 0;
        node.shard_wakes = 0;
    }
    let secs = 20;
    sim.run_for(Duration::from_secs(secs));
    for (i, node) in sim.nodes.iter().enumerate() {
        let control = node.control_wakes as f64 / secs as f64;
        let shard = node.shard_wakes as f64 / secs as f64;
        eprintln!("node {i}: control {control:.2}/s, shard {shard:.2}/s");
        assert!(
            control <= 3.0,
            "node {i}: control core woken {control:.2} times a second"
        );
        assert!(
            shard <= 2.0,
            "node {i}: data path woken {shard:.2} times a second"
        );
        assert_eq!(sim.connected(i).len(), n - 1, "node {i} kept every link");
    }
}
