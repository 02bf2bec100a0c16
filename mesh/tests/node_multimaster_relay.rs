//! A plain multimaster v1 node inside a Shoal mesh, with relay pruning on and off (issue 29:
//! "toward multimaster peers nothing changes"): it is sent every broadcast of a Shoal node
//! it is not linked to, on each of its links at most once, and its own floods reach every
//! Shoal node exactly once. The multimaster node is played by two [`RawPeer`] links under
//! one id (to A and to B), which flood each message on both links under one message id and
//! never relay, as a leaf of the C++ library would; A, B and C are Shoal nodes in a full
//! mesh.

mod node_support;

use node_support::wiring::RawPeer;
use node_support::{ep, fast, wait_connected, wait_until, Node};
use shoal_mesh::PeerId;
use std::collections::HashMap;

const COUNT: usize = 200;

fn payload(tag: &str, i: usize) -> Vec<u8> {
    format!("{tag}-{i:04}").into_bytes()
}

/// How many times each of the `COUNT` payloads tagged `tag` is in `got`.
fn copies(got: impl Iterator<Item = Vec<u8>>, tag: &str) -> Vec<usize> {
    let mut n: HashMap<Vec<u8>, usize> = HashMap::new();
    for p in got {
        *n.entry(p).or_default() += 1;
    }
    (0..COUNT)
        .map(|i| n.get(&payload(tag, i)).copied().unwrap_or(0))
        .collect()
}

/// Whether `at` knows the multimaster node `x` as linked to both `a` and `b`.
fn knows_x(at: &Node, x: PeerId, a: PeerId, b: PeerId) -> bool {
    let Ok(v) = at.mesh.nodes() else {
        return false;
    };
    v.node(&x).is_some_and(|n| {
        let peers: Vec<PeerId> = n.links.iter().map(|l| l.peer).collect();
        peers.contains(&a) && peers.contains(&b)
    })
}

fn a_multimaster_node_gets_every_broadcast_and_reaches_everyone(pruning: bool) {
    let b = || fast().relay_pruning(pruning);
    let mut nodes = vec![Node::start(b())];
    nodes.push(Node::start(b().static_peer(ep(nodes[0].port()))));
    nodes.push(Node::start(
        b().static_peer(ep(nodes[0].port()))
            .static_peer(ep(nodes[1].port())),
    ));
    wait_connected(&nodes, &[(0, 1), (0, 2), (1, 2)]);
    let x = PeerId::random();
    let to_a = RawPeer::dial_as(nodes[0].port(), x);
    let to_b = RawPeer::dial_as(nodes[1].port(), x);
    let (a, bb) = (nodes[0].id(), nodes[1].id());
    wait_until(20, "every Shoal node knows X linked to A and B", || {
        nodes.iter().all(|n| knows_x(n, x, a, bb))
    });
    wait_until(
        20,
        "every Shoal node counts the other three as members",
        || nodes.iter().all(|n| n.mesh.members().len() == 3),
    );

    // C, linked to neither of X's links, broadcasts: A and B relay to X.
    for i in 0..COUNT {
        nodes[2]
            .mesh
            .broadcast_blocking(payload("from-c", i))
            .unwrap();
    }
    let at_x = || {
        copies(
            to_a.data()
                .into_iter()
                .chain(to_b.data())
                .filter(|d| d.0 == nodes[2].id() && d.1 == PeerId::ZERO)
                .map(|d| d.2),
            "from-c",
        )
    };
    wait_until(20, "X got every broadcast of C", || {
        at_x().iter().all(|&n| n >= 1)
    });
    for (link, name) in [(&to_a, "A"), (&to_b, "B")] {
        let per_link = copies(link.data().into_iter().map(|d| d.2), "from-c");
        assert!(
            per_link.iter().all(|&n| n <= 1),
            "X's link to {name} carried a broadcast more than once: {per_link:?}"
        );
    }

    // X floods its own broadcasts on both links under one message id each.
    for i in 0..COUNT {
        let p = payload("from-x", i);
        to_a.send_data(PeerId::ZERO, &p);
        to_b.send_data(PeerId::ZERO, &p);
    }
    let from_x = |n: &Node| {
        copies(
            n.rec
                .messages()
                .into_iter()
                .filter(|m| m.0 == x && m.2)
                .map(|m| m.1),
            "from-x",
        )
    };
    wait_until(
        20,
        "every Shoal node delivered every broadcast of X",
        || nodes.iter().all(|n| from_x(n).iter().all(|&c| c >= 1)),
    );
    for (i, n) in nodes.iter().enumerate() {
        assert!(
            from_x(n).iter().all(|&c| c == 1),
            "node {i} delivered a broadcast of X twice"
        );
    }
    let skipped: u64 = nodes
        .iter()
        .map(|n| n.mesh.stats().total.relay_copies_skipped)
        .sum();
    if pruning {
        assert!(skipped > 0, "pruning on, and no relay copy was skipped");
    } else {
        assert_eq!(skipped, 0, "flooding skips nothing");
    }
}

#[test]
fn with_relay_pruning_a_multimaster_node_gets_every_broadcast_and_reaches_everyone() {
    a_multimaster_node_gets_every_broadcast_and_reaches_everyone(true);
}

#[test]
fn with_flooding_a_multimaster_node_gets_every_broadcast_and_reaches_everyone() {
    a_multimaster_node_gets_every_broadcast_and_reaches_everyone(false);
}
