//! Live nodes over 127.0.0.1: gossip broadcast and targeted routing, dial races, membership.

mod node_support;

use node_support::*;
use shoal_mesh::{Event, PeerId};
use std::collections::HashMap;

/// Starts `n` nodes linked as `links` says. Each node listens on a port the kernel picks when
/// it binds, and dials the nodes of its links that already run: a link is dialled by its later
/// node. (Picking ports up front raced with other tests' sockets: a port free a moment ago
/// could be taken by the time the node bound it.)
fn topology(n: usize, shards: usize, links: &[(usize, usize)]) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::with_capacity(n);
    for i in 0..n {
        let mut b = fast().shards(shards);
        if shards > 1 {
            // Ids whose shard hash alternates along the line, so that originating,
            // relaying and delivering all cross shards somewhere.
            b = b.node_id(PeerId([i as u8 + 1; 16]));
        }
        for &(a, z) in links {
            let other = match (a == i, z == i) {
                (true, false) => z,
                (false, true) => a,
                _ => continue,
            };
            if other < i {
                b = b.static_peer(ep(nodes[other].port()));
            }
        }
        nodes.push(Node::start(b));
    }
    nodes
}

/// Every node broadcasts one message; every other node must deliver each exactly once.
fn broadcast_exactly_once(nodes: &[Node]) {
    for (i, n) in nodes.iter().enumerate() {
        n.mesh
            .broadcast_blocking(format!("hello from {i}"))
            .expect("broadcast accepted");
    }
    let expected = nodes.len() - 1;
    for (i, n) in nodes.iter().enumerate() {
        wait_until(
            10,
            &format!("node {i} delivers {expected} broadcasts"),
            || n.rec.messages().len() >= expected,
        );
    }
    // Let any duplicate that is still travelling arrive before judging.
    let ids: Vec<PeerId> = nodes.iter().map(Node::id).collect();
    for n in nodes {
        n.mesh.broadcast_blocking("fence").unwrap();
    }
    for (i, n) in nodes.iter().enumerate() {
        wait_until(10, &format!("node {i} delivers the fences"), || {
            n.rec.messages().iter().filter(|m| m.1 == b"fence").count() == expected
        });
        let mut seen: HashMap<(PeerId, Vec<u8>), usize> = HashMap::new();
        for (from, payload, broadcast) in n.rec.messages() {
            assert!(
                broadcast,
                "node {i}: a broadcast arrived flagged as targeted"
            );
            assert_ne!(from, ids[i], "node {i} delivered its own broadcast");
            *seen.entry((from, payload)).or_default() += 1;
        }
        for (j, id) in ids.iter().enumerate().filter(|(j, _)| *j != i) {
            let key = (*id, format!("hello from {j}").into_bytes());
            assert_eq!(
                seen.get(&key),
                Some(&1),
                "node {i} must deliver node {j}'s broadcast exactly once"
            );
        }
        assert!(
            seen.values().all(|c| *c == 1),
            "node {i} delivered a duplicate: {seen:?}"
        );
        let s = n.mesh.stats().total;
        assert_eq!(s.malformed_frames + s.oversize_frames, 0);
    }
}

#[test]
fn broadcast_reaches_every_node_once_in_a_line() {
    let line = [(1, 0), (2, 1), (3, 2)];
    let nodes = topology(4, 1, &line);
    wait_connected(&nodes, &line);
    broadcast_exactly_once(&nodes);
}

#[test]
fn broadcast_reaches_every_node_once_in_a_ring() {
    let ring = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)];
    let nodes = topology(5, 1, &ring);
    wait_connected(&nodes, &ring);
    broadcast_exactly_once(&nodes);
    // The copy that would come around the other way: while the paths settle it is sent and
    // dropped by the dedup cache (or refused off path); once they settled, the relay next
    // to the far side does not send it (its neighbour is no farther from the origin).
    let spared: u64 = nodes
        .iter()
        .map(|n| {
            let t = n.mesh.stats().total;
            t.dropped_duplicate + t.dropped_off_path + t.relay_copies_skipped
        })
        .sum();
    assert!(
        spared > 0,
        "a ring must make some node drop a second copy or not send it"
    );
}

fn targeted_line(shards: usize) -> Vec<Node> {
    let line = [(1, 0), (2, 1), (3, 2)];
    let nodes = topology(4, shards, &line);
    wait_connected(&nodes, &line);
    let d = nodes[3].id();
    for k in 0..20 {
        nodes[0]
            .mesh
            .send_blocking(d, format!("for D #{k}"))
            .expect("send accepted");
    }
    wait_until(10, "D delivers 20 targeted messages", || {
        nodes[3].rec.messages().len() >= 20
    });
    // A broadcast behind them proves the path drained before judging the bystanders.
    nodes[0].mesh.broadcast_blocking("fence").unwrap();
    for (i, n) in nodes.iter().enumerate().skip(1) {
        wait_until(10, &format!("node {i} gets the fence"), || {
            n.rec.messages().iter().any(|m| m.1 == b"fence")
        });
    }
    let got: Vec<_> = nodes[3]
        .rec
        .messages()
        .into_iter()
        .filter(|m| !m.2)
        .collect();
    assert_eq!(
        got.len(),
        20,
        "D delivers each targeted message exactly once"
    );
    assert!(got.iter().all(|m| m.0 == nodes[0].id()));
    let mut payloads: Vec<Vec<u8>> = got.into_iter().map(|m| m.1).collect();
    payloads.sort();
    let mut expect: Vec<Vec<u8>> = (0..20)
        .map(|k| format!("for D #{k}").into_bytes())
        .collect();
    expect.sort();
    assert_eq!(payloads, expect);
    for (i, n) in nodes.iter().enumerate().take(3) {
        assert!(
            n.rec.messages().iter().all(|m| m.2),
            "node {i} delivered a message targeted at D"
        );
    }
    nodes
}

#[test]
fn targeted_reaches_only_its_destination_across_a_line() {
    let nodes = targeted_line(1);
    assert!(nodes.iter().all(|n| n.mesh.stats().total.hops_out == 0));
}

#[test]
fn targeted_and_broadcast_across_two_shards_per_node() {
    let nodes = targeted_line(2);
    let hops: u64 = nodes.iter().map(|n| n.mesh.stats().total.hops_out).sum();
    assert!(
        hops > 0,
        "with alternating shards some traffic must hop between shards"
    );
    drop(nodes);
    let line = [(1, 0), (2, 1), (3, 2)];
    let nodes = topology(4, 2, &line);
    wait_connected(&nodes, &line);
    broadcast_exactly_once(&nodes);
}

/// Two nodes of `shards` data shards each given the other as a static peer, started
/// together: both dial at once.
/// Both nodes must know each other's port before either starts, so the ports are picked up
/// front; one taken meanwhile by another test's socket means a fresh pair, not a failure.
fn dialing_each_other(shards: usize) -> [Node; 2] {
    (0..5)
        .find_map(|_| {
            let (pa, pb) = (free_port(), free_port());
            let ba = fast()
                .shards(shards)
                .listen_port(pa)
                .static_peer(ep(pb))
                .reconnect_base(std::time::Duration::from_millis(50));
            let bb = fast()
                .shards(shards)
                .listen_port(pb)
                .static_peer(ep(pa))
                .reconnect_base(std::time::Duration::from_millis(50));
            let (ma, mb) = (ba.build().unwrap(), bb.build().unwrap());
            let (ra, rb) = (Recorder::new(ma.events()), Recorder::new(mb.events()));
            let (ma2, mb2) = (ma.clone(), mb.clone());
            let ta = std::thread::spawn(move || ma2.start());
            let tb = std::thread::spawn(move || mb2.start());
            let (sa, sb) = (ta.join().unwrap(), tb.join().unwrap());
            match (sa, sb) {
                (Ok(()), Ok(())) => Some([Node { mesh: ma, rec: ra }, Node { mesh: mb, rec: rb }]),
                (a, b) => {
                    eprintln!("ports {pa}/{pb} not usable ({a:?}, {b:?}); another pair");
                    ma.stop();
                    mb.stop();
                    None
                }
            }
        })
        .expect("two free ports within five tries")
}

#[test]
fn simultaneous_dials_end_with_one_link_on_both_sides() {
    let nodes = dialing_each_other(1);
    wait_connected(&nodes, &[(0, 1)]);
    wait_until(10, "one link per side", || {
        nodes[0].open_links() == 1 && nodes[1].open_links() == 1
    });
    nodes[0].mesh.broadcast_blocking("one").unwrap();
    nodes[1].mesh.broadcast_blocking("two").unwrap();
    wait_until(10, "both messages delivered", || {
        nodes[0].rec.messages().len() == 1 && nodes[1].rec.messages().len() == 1
    });
    assert_eq!(nodes[0].mesh.connected_peers(), vec![nodes[1].id()]);
    assert_eq!(nodes[1].mesh.connected_peers(), vec![nodes[0].id()]);
    assert_eq!((nodes[0].open_links(), nodes[1].open_links()), (1, 1));
}

/// A stream its publisher begins as soon as it sees its peer, while the two race to link:
/// every message arrives, once (the race's loser stays open until the peer resolved the race
/// too, what comes on it handled as come on the winner, which took its queue). With two
/// shards a node's publishes cross from their origin shard to the links', and a publish on
/// a shard whose table still names the loser after its owner shard closed it waits for the
/// table to name the winner. Order is printed, not asserted: the receiver reads the winner
/// after the loser has ended (about 4 runs in 100 with two busy loops beside read a few
/// frames out of order before; none in 750 since), but when its own handshake of the loser
/// ends after the winner's (the peer's the other way round), the winner's first frames may
/// be read before the loser is known at all. The simulation and the shard's tests check the
/// order.
#[test]
fn a_stream_begun_while_two_nodes_race_to_link_arrives_whole() {
    for shards in [1, 2] {
        stream_across_a_race(shards);
    }
}

fn stream_across_a_race(shards: usize) {
    const N: u32 = 20_000;
    let nodes = dialing_each_other(shards);
    let publisher = nodes[0].mesh.clone();
    let t = std::thread::spawn(move || {
        while publisher.connected_peers().is_empty() {
            std::thread::yield_now();
        }
        for i in 0..N {
            publisher
                .broadcast_blocking(i.to_be_bytes().to_vec())
                .unwrap();
        }
    });
    t.join().unwrap();
    // A fence after the stream; once it is in, a moment more for frames of the race's loser
    // read after the winner's (the rare case above, where the loser was not known in time).
    nodes[0].mesh.broadcast_blocking("fence").unwrap();
    wait_until(20, "the fence delivered", || {
        nodes[1].rec.messages().iter().any(|m| m.1 == b"fence")
    });
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while nodes[1].rec.messages().len() <= N as usize && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let got: Vec<u32> = nodes[1]
        .rec
        .messages()
        .iter()
        .filter(|m| m.1 != b"fence")
        .map(|(_, p, _)| u32::from_be_bytes(p[..].try_into().unwrap()))
        .collect();
    // Seen with `--nocapture` (see above).
    let reordered = got.windows(2).filter(|w| w[1] < w[0]).count();
    if reordered > 0 {
        eprintln!("{shards} shards: {reordered} frames read out of order");
    }
    let seen: std::collections::HashSet<u32> = got.iter().copied().collect();
    let missing = (0..N).filter(|i| !seen.contains(i)).count();
    let first_missing = (0..N).find(|i| !seen.contains(i));
    let drops = |n: &Node| {
        let t = n.mesh.stats().total;
        let v: Vec<String> = t
            .counters()
            .into_iter()
            .filter(|c| c.name.starts_with("dropped_") && c.value > 0)
            .map(|c| format!("{}={}", c.name, c.value))
            .collect();
        v.join(" ")
    };
    assert_eq!(
        missing,
        0,
        "{shards} shards: {missing} of {N} lost (the first: {first_missing:?}); publisher \
         dropped: {}; subscriber dropped: {}",
        drops(&nodes[0]),
        drops(&nodes[1])
    );
    assert_eq!(got.len(), N as usize, "{shards} shards: each message once");
}

#[test]
fn membership_crosses_a_bridge() {
    // B - A - C: B and C only know A.
    let a = Node::start(fast());
    let b = Node::start(fast().seed_peer(ep(a.port())));
    let c = Node::start(fast().seed_peer(ep(a.port())));
    wait_until(10, "B sees C as a member", || {
        b.mesh.members().contains(&c.id())
    });
    wait_until(10, "C sees B as a member", || {
        c.mesh.members().contains(&b.id())
    });
    wait_until(10, "B reports C joined", || {
        b.rec.has(|e| *e == Event::MemberJoined { peer: c.id() })
    });
    assert!(
        !b.mesh.connected_peers().contains(&c.id()),
        "B and C are not neighbours"
    );
    let mut members = a.mesh.members();
    members.sort();
    let mut expect = vec![b.id(), c.id()];
    expect.sort();
    assert_eq!(members, expect);
}
