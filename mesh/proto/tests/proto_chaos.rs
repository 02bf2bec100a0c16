//! Whole meshes under trouble, in the simulation that drives the real control and shard
//! cores: ten nodes on a ring with chords, every ring edge dialed from both ends at once
//! (dial races), 10 % frame loss on every link, a link cut, a node restarted mid-run; then
//! the loss stops and the mesh must converge. Checked for several seeds each of a plaintext
//! mesh (a lost Data/Membership frame is cut out of the stream), a PSK mesh and a PSK mesh
//! with identities (identity records, the same id after a restart); in a secured mesh a loss
//! is what TCP makes of it, a retransmission delay (see `proto_sim::datapath`). Checked:
//! membership converges on every node, no message is delivered twice anywhere, every
//! `PeerConnected` came after its shard applied the route, and no handshake failed.

mod proto_sim;

use proto_sim::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::PeerId;
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

const N: usize = 10;

/// Edges (i, j): node j dials node i. Ring edges are listed both ways (simultaneous dials).
fn edges() -> Vec<(usize, usize)> {
    let mut e = Vec::new();
    for i in 0..N {
        let j = (i + 1) % N;
        e.push((i, j));
        e.push((j, i));
        if i % 2 == 0 {
            e.push((i, (i + 3) % N));
        }
    }
    e
}

fn neighbours(i: usize) -> BTreeSet<usize> {
    edges()
        .into_iter()
        .filter_map(|(a, b)| {
            if a == i {
                Some(b)
            } else if b == i {
                Some(a)
            } else {
                None
            }
        })
        .collect()
}

/// What protects the mesh.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Psk,
    Identity,
}

fn build(seed: u64, mode: Mode) -> Sim {
    let mut sim = Sim::new(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    for j in 0..N {
        let mut c = cfg();
        if mode != Mode::Plain {
            c.psk = "chaos-psk-0123456789".into();
        }
        c.static_peers = edges()
            .iter()
            .filter(|(_, b)| *b == j)
            .map(|(a, _)| format!("node{a}:{PORT}"))
            .collect();
        if mode == Mode::Identity {
            c.identity_seed_hex = hex::encode(rng.gen::<[u8; 32]>());
            c.node_name = format!("node{j}");
        }
        sim.add_node(c);
    }
    sim
}

/// Broadcasts `count` unique messages from random live nodes over `span`.
fn traffic(sim: &mut Sim, rng: &mut StdRng, tag: &str, count: usize, span: Duration) {
    for k in 0..count {
        let from = rng.gen_range(0..N);
        sim.broadcast(from, format!("{tag}-{k}"));
        sim.run_for(span / count as u32);
    }
}

fn assert_at_most_once(sim: &Sim, seed: u64) {
    for (i, n) in sim.nodes.iter().enumerate() {
        let ids: HashSet<_> = n.delivered_ids.iter().collect();
        assert_eq!(
            ids.len(),
            n.delivered_ids.len(),
            "seed {seed}: node {i} got a message twice"
        );
        let payloads: HashSet<_> = n.delivered.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(payloads.len(), n.delivered.len(), "seed {seed}: node {i}");
    }
}

fn run(seed: u64, mode: Mode) {
    let mut sim = build(seed, mode);
    let mut rng = StdRng::seed_from_u64(seed);
    sim.set_loss(0.10);
    sim.start_all();
    // Chaos: lossy links, traffic, a cut, a restart.
    traffic(&mut sim, &mut rng, "a", 40, Duration::from_secs(4));
    sim.cut(2, 3);
    traffic(&mut sim, &mut rng, "b", 20, Duration::from_secs(2));
    let old = sim.id(6);
    sim.restart_node(6);
    traffic(&mut sim, &mut rng, "c", 40, Duration::from_secs(6));
    assert!(
        sim.nodes.iter().map(|n| n.lost_frames).sum::<u64>() > 0,
        "seed {seed}: the loss took frames"
    );
    // Calm: no loss; the old incarnation's record expires, everything converges.
    sim.set_loss(0.0);
    sim.run_for(Duration::from_secs(20));
    let ids: BTreeSet<PeerId> = (0..N).map(|i| sim.id(i)).collect();
    if mode == Mode::Identity {
        assert_eq!(sim.id(6), old, "an identity node keeps its key's id");
    } else {
        assert!(!ids.contains(&old));
    }
    for i in 0..N {
        let want: Vec<PeerId> = ids.iter().copied().filter(|p| *p != sim.id(i)).collect();
        assert_eq!(sim.members(i), want, "seed {seed}: node {i}'s members");
        let linked: BTreeSet<PeerId> = neighbours(i).into_iter().map(|j| sim.id(j)).collect();
        let connected: BTreeSet<PeerId> = sim.connected(i).into_iter().collect();
        assert_eq!(connected, linked, "seed {seed}: node {i}'s neighbours");
        assert_eq!(
            sim.link_count(i),
            linked.len(),
            "seed {seed}: node {i} keeps one link per neighbour (races resolved)"
        );
        let n = &sim.nodes[i];
        assert_eq!(n.held_violations, 0, "seed {seed}: node {i}");
        assert!(n.errors.is_empty(), "seed {seed}: node {i}: {:?}", n.errors);
        assert_eq!(n.core.stats().auth_failures, 0);
        assert_eq!(
            n.shard.secured_links > 0,
            mode != Mode::Plain,
            "seed {seed}: node {i}: links are secured exactly in a secured mesh"
        );
    }
    let races: u64 = sim
        .nodes
        .iter()
        .map(|n| n.core.peers().stats().races_resolved)
        .sum();
    assert!(races > 0, "seed {seed}: simultaneous dials raced");
    // Converged and lossless: a broadcast reaches every node exactly once.
    for k in 0..5 {
        sim.broadcast(k, format!("calm-{k}"));
    }
    sim.run_for(Duration::from_millis(200));
    for i in 0..N {
        for k in 0..5 {
            let want = usize::from(i != k);
            let got = sim.count_delivered(i, format!("calm-{k}").as_bytes());
            assert_eq!(got, want, "seed {seed}: node {i}, calm-{k}");
        }
    }
    assert_at_most_once(&sim, seed);
}

#[test]
fn plaintext_mesh_with_loss_races_and_a_restart_converges() {
    for seed in [21, 22, 23] {
        run(seed, Mode::Plain);
    }
}

#[test]
fn secured_mesh_with_loss_races_and_a_restart_converges_psk() {
    for seed in [1, 2, 3] {
        run(seed, Mode::Psk);
    }
}

#[test]
fn secured_mesh_with_loss_races_and_a_restart_converges_identity() {
    for seed in [11, 12, 13] {
        run(seed, Mode::Identity);
    }
}
