//! Hostile input aimed at the control plane (issue 15): idle sockets holding the connection
//! table, junk datagrams on the discovery port. Each test checks that a legitimate peer still
//! gets in and that the node's counters say what it refused or evicted.

mod node_support;

use node_support::*;
use std::io::Read;
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::time::Duration;

/// True once the node closed `s` (EOF or reset); false while it is still open.
fn closed_by_node(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// Issue 15 item 9: sockets that connect and never say Hello fill the connection table. The
/// handshake timeout would close them, but an attacker renews them; the table must prefer
/// connections that complete their handshake, so a real peer links at once, and the evicted
/// sockets are really closed.
#[test]
fn idle_sockets_in_the_handshake_give_way_to_a_real_peer() {
    // 64 peers: a connection table of 128. Handshakes may take 30 s: only eviction lets a
    // newcomer in while the idle sockets are there.
    let a = Node::start(
        fast()
            .max_peers(64usize)
            .handshake_timeout(Duration::from_secs(30)),
    );
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(("127.0.0.1", a.port())).expect("connect"))
        .collect();
    let ctl = || a.mesh.stats().control;
    wait_until(10, "A accepted every idle socket", || {
        ctl().handshakes_evicted + ctl().connections_refused >= 300 - 128
    });
    let b = Node::start(fast().static_peer(ep(a.port())));
    wait_until(10, "B links to A past the idle sockets", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
    let s = ctl();
    assert_eq!(s.connections_refused, 0, "{s:?}");
    assert!(
        s.handshakes_evicted > 300 - 128,
        "B evicted one more: {s:?}"
    );
    for i in &mut idle {
        i.set_nonblocking(true).unwrap();
    }
    wait_until(
        10,
        "the evicted sockets are closed, not just forgotten",
        || {
            idle.iter_mut().map(closed_by_node).filter(|c| *c).count() as u64
                >= s.handshakes_evicted - 1
        },
    );
    exchange_messages(&a, &b, "after-idle-flood");
}

fn exchange_messages(a: &Node, b: &Node, tag: &str) {
    a.mesh.broadcast_blocking(format!("a-{tag}")).unwrap();
    wait_until(10, "B delivers", || {
        b.rec
            .messages()
            .iter()
            .any(|m| m.1 == format!("a-{tag}").as_bytes())
    });
}

/// Issue 15 item 8: on a plaintext mesh, datagrams on the discovery port that are not valid
/// announces are counted (they were dropped without a trace); our own echoes and other
/// groups' announces are not junk.
#[test]
fn junk_on_the_discovery_port_is_counted_in_plaintext_mode() {
    let (b, port) = loopback_scouting("junk");
    let a = Node::start(b.announce_interval(Duration::from_millis(100)));
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let to = ("127.0.0.1", port);
    let dropped = || a.mesh.stats().control.announces_dropped;
    wait_until(10, "A's discovery socket is up", || {
        tx.send_to(b"probe", to).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        dropped() >= 1
    });
    let announce = |id: shoal_mesh::PeerId, group: &str| {
        let mut d = Vec::new();
        shoal_mesh::wire::Beacon::new(id, 7, group, false)
            .encode_body(&mut d)
            .unwrap();
        d
    };
    let other_group = announce(shoal_mesh::PeerId::random(), "elsewhere");
    let mut bad_version = announce(shoal_mesh::PeerId::random(), "x");
    bad_version[4] = 2;
    let junk: [&[u8]; 4] = [b"", b"not an announce at all", &[0xff; 300], &bad_version];
    let mut expected = dropped();
    // In batches, so the socket's receive buffer never overflows (a lost datagram is no
    // datagram to count).
    for batch in 0..40 {
        for i in 0..25 {
            tx.send_to(junk[(batch + i) % junk.len()], to).unwrap();
            tx.send_to(&other_group, to).unwrap();
        }
        expected += 25;
        wait_until(10, "the batch is counted", || dropped() >= expected);
    }
    // Datagrams are handled in order: once a valid announce sent last is seen, every earlier
    // one was handled.
    let marker = shoal_mesh::PeerId::random();
    let own_group = a.mesh.config().group_name.clone();
    tx.send_to(&announce(marker, &own_group), to).unwrap();
    wait_until(10, "the marker announce is seen", || {
        a.mesh.known_peers().contains(&marker)
    });
    assert_eq!(dropped(), expected, "junk counted, other groups not");
    assert!(expected >= 1000);
}
