//! `Mesh::nodes` on live loopback nodes (issue 28): every member with its name, listen
//! address, start time, which frames it speaks and whose word that is, and its links with
//! round-trip times, measured here for this node's own links and reported by the other
//! nodes' participant records for theirs. Every wait is for a condition, never a sleep.

mod node_support;

use node_support::wiring::RawPeer;
use node_support::{ep, fast, wait_connected, wait_until, Node};
use shoal_mesh::nodes::{NodesView, Speaks};
use shoal_mesh::topics::TopicsConfig;
use shoal_mesh::{Mesh, MeshBuilder, MeshError, PeerId};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn named(name: &str) -> MeshBuilder {
    fast().node_name(name).topics(TopicsConfig {
        announce_period: Duration::from_millis(200),
        participant_lease: Duration::from_secs(5),
        ..TopicsConfig::default()
    })
}

fn link_rtt(v: &NodesView, a: PeerId, b: PeerId) -> Option<(Duration, PeerId)> {
    let l = v.node(&a)?.links.iter().find(|l| l.peer == b)?;
    Some((l.rtt?, l.measured_by?))
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A — B — C in a line, and a plain multimaster v1 peer on B: A knows all four, the names,
/// addresses and start times of the Shoal nodes from their records, the v1 peer as v1 on
/// B's word, its own link's RTT by its own measurement and B—C's from B's or C's record.
#[test]
fn an_observer_sees_every_member_with_names_links_rtts_and_protocols() {
    let before = wall_ms();
    let nodes = vec![Node::start(named("alpha"))];
    let mut nodes = nodes;
    nodes.push(Node::start(named("bravo").static_peer(ep(nodes[0].port()))));
    nodes.push(Node::start(
        named("charlie").static_peer(ep(nodes[1].port())),
    ));
    wait_connected(&nodes, &[(0, 1), (1, 2)]);
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let raw = RawPeer::dial(b.port());
    wait_until(10, "B links with the raw peer", || {
        b.mesh.connected_peers().contains(&raw.id)
    });
    let view = || a.mesh.nodes().expect("a running node answers");
    wait_until(20, "A knows every member, both links measured", || {
        let v = view();
        v.nodes.len() == 4
            && link_rtt(&v, a.id(), b.id()).is_some()
            && link_rtt(&v, b.id(), c.id()).is_some_and(|l| l.1 == b.id())
            && link_rtt(&v, c.id(), b.id()).is_some_and(|l| l.1 == c.id())
            && v.node(&raw.id).is_some_and(|n| n.speaks == Speaks::V1Only)
            && v.node(&c.id()).is_some_and(|n| n.started_ms.is_some())
    });
    let v = view();
    assert_eq!(v.me, a.id());
    assert!(
        v.nodes[0].this_node && v.nodes[0].id == a.id(),
        "this node first"
    );
    for (n, name) in [(a, "alpha"), (b, "bravo"), (c, "charlie")] {
        let got = v.node(&n.id()).unwrap();
        assert_eq!(got.name.as_deref(), Some(name));
        assert_eq!(got.speaks, Speaks::Extensions);
        assert_eq!(got.speaks_per, Some(n.id()), "its own record says so");
        assert!(got.topic_records);
        let addr = format!("127.0.0.1:{}", n.port()).parse().unwrap();
        assert!(got.addresses.contains(&addr), "{:?}", got.addresses);
        let started = got.started_ms.unwrap();
        assert!(
            (before..=v.wall_ms).contains(&started),
            "{name} started at {started}, not within the test ({before}..={})",
            v.wall_ms
        );
    }
    assert!(v.node(&b.id()).unwrap().neighbour);
    assert!(!v.node(&c.id()).unwrap().neighbour, "C is two hops away");
    // A's own link, measured here; B—C, measured by one of its ends and announced.
    assert_eq!(link_rtt(&v, a.id(), b.id()).unwrap().1, a.id());
    // Under each node, its own end's measurement (both ends announce theirs).
    assert_eq!(link_rtt(&v, b.id(), c.id()).unwrap().1, b.id());
    assert_eq!(link_rtt(&v, c.id(), b.id()).unwrap().1, c.id());
    let r = v.node(&raw.id).unwrap();
    assert_eq!(
        (r.speaks_per, r.topic_records, r.name.as_deref()),
        (Some(b.id()), false, None),
        "the raw peer: v1 on B's word, no record of its own"
    );
    assert!(r.links.iter().any(|l| l.peer == b.id()));
    // No link that the membership graph does not have.
    let c_links: Vec<PeerId> = v
        .node(&c.id())
        .unwrap()
        .links
        .iter()
        .map(|l| l.peer)
        .collect();
    assert_eq!(c_links, vec![b.id()]);
}

#[test]
fn nodes_needs_a_running_node() {
    let m = Mesh::builder().scouting(false).build().unwrap();
    assert!(matches!(m.nodes(), Err(MeshError::NotRunning)));
    m.start().unwrap();
    let v = m.nodes().unwrap();
    assert_eq!(v.nodes.len(), 1, "alone: itself");
    assert_eq!(v.nodes[0].name, Some(hex::encode(m.id().0)), "no name set");
    m.stop();
    assert!(matches!(m.nodes(), Err(MeshError::NotRunning)));
}

/// In an identity mesh every member shows its verified key and signed name.
#[test]
fn identity_nodes_show_their_verified_key_and_signed_name() {
    let id = |seed: &str, name: &str| {
        named(name)
            .psk("nodes-test")
            .identity_seed_hex(seed.repeat(32))
            .node_name(name)
    };
    let a = Node::start(id("11", "alpha"));
    let b = Node::start(id("22", "bravo").static_peer(ep(a.port())));
    wait_until(20, "A knows B's identity", || {
        a.mesh
            .nodes()
            .unwrap()
            .node(&b.id())
            .is_some_and(|n| n.identity.is_some())
    });
    let v = a.mesh.nodes().unwrap();
    let got = v.node(&b.id()).unwrap().identity.clone().unwrap();
    assert_eq!(got.key, b.mesh.identity_public_key().unwrap());
    assert_eq!(got.name, "bravo");
    let me = v.node(&a.id()).unwrap().identity.clone().unwrap();
    assert_eq!(
        (me.key, me.name.as_str()),
        (a.mesh.identity_public_key().unwrap(), "alpha")
    );
}
