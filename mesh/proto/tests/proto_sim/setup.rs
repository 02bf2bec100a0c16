//! How tests build a simulation: the config they start from, a mesh wired to exactly the
//! edges asked, the full mesh's edges and the check that every graph is full, and helpers
//! for a bare peer table.
//!
//! **Owns:** those helpers. **Must not touch:** the simulation itself.

use super::*;

/// Every pair of `0..n` (the full mesh multicast discovery builds), for [`add_topology`].
pub fn full_mesh_edges(n: usize) -> Vec<(usize, usize)> {
    (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect()
}

/// True once every node's graph puts every other node one hop away.
pub fn graph_is_full(sim: &Sim, n: usize) -> bool {
    (0..n).all(|i| {
        let rp = sim.nodes[i].core.reverse_paths();
        (0..n)
            .filter(|j| *j != i)
            .all(|j| rp.hops(&sim.id(j)) == Some(1))
    })
}

/// A config for simulations: discovery off unless asked, static peers wire the topology.
pub fn cfg() -> MeshConfig {
    MeshConfig {
        scouting: false,
        ..MeshConfig::default()
    }
}

/// Builds a mesh whose links are exactly `edges` (node j dials node i statically for each
/// edge (i, j)), starts it and runs until the handshakes settled.
pub fn topology(seed: u64, n: usize, edges: &[(usize, usize)]) -> Sim {
    let mut sim = Sim::new(seed);
    add_topology(&mut sim, n, edges, |_| {});
    sim.start_all();
    sim.run_for(Duration::from_millis(100));
    sim
}

/// Adds `n` nodes whose links are exactly `edges` (node j dials node i statically for each
/// edge (i, j)), each with [`cfg`] as `configure` changes it; starts nothing.
pub fn add_topology(
    sim: &mut Sim,
    n: usize,
    edges: &[(usize, usize)],
    configure: impl Fn(&mut MeshConfig),
) {
    for j in 0..n {
        let mut c = cfg();
        configure(&mut c);
        c.static_peers = edges
            .iter()
            .filter(|(_, b)| *b == j)
            .map(|(a, _)| format!("node{a}:{PORT}"))
            .collect();
        sim.add_node(c);
    }
}

/// The actions a peer table has queued, in order.
pub fn drain(pm: &mut PeerManager<StdRng>) -> Vec<PeerAction> {
    std::iter::from_fn(|| pm.poll_action()).collect()
}

/// The events a peer table has queued, in order.
pub fn events(pm: &mut PeerManager<StdRng>) -> Vec<PeerEvent> {
    std::iter::from_fn(|| pm.poll_event()).collect()
}

/// A fake peer address, distinct per `i`.
pub fn addr(i: u32) -> std::net::SocketAddr {
    std::net::SocketAddr::new(IpAddr::from(i.to_be_bytes()), 7000)
}
