//! Live nodes over 127.0.0.1: stop, disconnect, Lost, static peers and restarts.

mod node_support;

use node_support::*;
use shoal_mesh::Event;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn stop_is_seen_as_disconnected_then_lost_but_static_peers_are_never_lost() {
    let s = Node::start(fast());
    let a = Node::start(fast().static_peer(ep(s.port())));
    let b = Node::start(fast().seed_peer(ep(a.port())));
    let (b_id, s_id) = (b.id(), s.id());
    wait_until(10, "A connected to B and S", || {
        a.connected_to(&b) && a.connected_to(&s)
    });

    b.mesh.stop();
    b.mesh.stop(); // idempotent
    s.mesh.stop();
    wait_until(10, "A sees B lost", || {
        a.rec.has(|e| *e == Event::PeerLost { peer: b_id })
    });
    let disc = a
        .rec
        .position(|e| *e == Event::PeerDisconnected { peer: b_id });
    let lost = a.rec.position(|e| *e == Event::PeerLost { peer: b_id });
    assert!(
        disc.is_some() && disc < lost,
        "disconnected must come before lost: {:?}",
        a.rec.events()
    );
    wait_until(10, "A sees S disconnected", || {
        a.rec.has(|e| *e == Event::PeerDisconnected { peer: s_id })
    });
    // Twice the lost timeout after S went away, it is still known and not lost.
    std::thread::sleep(2 * a.mesh.config().peer_lost_timeout);
    assert!(
        !a.rec.has(|e| *e == Event::PeerLost { peer: s_id }),
        "a static peer is never lost"
    );
    assert!(a.mesh.known_peers().contains(&s_id));
    assert!(!a.mesh.known_peers().contains(&b_id));
    // The stopped side said Goodbye: A saw no malformed input.
    let st = a.mesh.stats().total;
    assert_eq!(st.malformed_frames + st.oversize_frames, 0);
}

/// A node whose last handle goes with a panicking thread stops (its executors are woken
/// outside the unwind: waking one from a panicking thread would abort the process).
#[test]
fn a_node_dropped_while_unwinding_stops() {
    let a = Node::start(fast());
    let b = Node::start(fast().static_peer(ep(a.port())));
    let b_id = b.id();
    wait_until(10, "A connected to B", || a.connected_to(&b));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _b = b;
        panic!("unwinding with a running node");
    }));
    assert!(
        caught.is_err(),
        "the closure panicked, and the process is still here"
    );
    wait_until(10, "A sees B disconnected", || {
        a.rec.has(|e| *e == Event::PeerDisconnected { peer: b_id })
    });
}

#[test]
fn static_peer_restarted_with_a_new_id_is_reconnected() {
    let b = Node::start(fast());
    let port = b.port();
    let a = Node::start(fast().static_peer(ep(port)));
    wait_until(10, "A connected to B", || a.connected_to(&b));
    let old = b.id();
    b.mesh.stop();
    wait_until(10, "A sees B disconnected", || {
        a.rec.has(|e| *e == Event::PeerDisconnected { peer: old })
    });
    let b2 = Node::start(fast().listen_port(port));
    assert_ne!(b2.id(), old);
    wait_until(15, "A reconnects to the restarted B", || {
        a.connected_to(&b2) && b2.connected_to(&a)
    });
    a.mesh.broadcast_blocking("again").unwrap();
    wait_until(10, "restarted B delivers", || b2.rec.messages().len() == 1);
}

#[test]
fn publishing_without_peers_or_after_stop_says_why() {
    let a = fast().build().unwrap();
    assert_eq!(a.try_broadcast("x"), Err(shoal_mesh::PublishError::Stopped));
    a.start().unwrap();
    assert_ne!(a.listen_port(), 0);
    assert_eq!(a.try_broadcast("x"), Err(shoal_mesh::PublishError::NoRoute));
    let too_big = vec![0u8; a.config().max_message_bytes as usize];
    assert!(matches!(
        a.try_send(shoal_mesh::PeerId::random(), too_big),
        Err(shoal_mesh::PublishError::TooLarge { .. })
    ));
    assert!(matches!(
        a.start(),
        Err(shoal_mesh::MeshError::AlreadyStarted)
    ));
    a.stop();
    assert_eq!(
        a.broadcast_blocking("x"),
        Err(shoal_mesh::PublishError::Stopped)
    );
    let mut rx = a.events();
    assert_eq!(rx.recv_timeout(Duration::from_millis(50)), None);
}

#[test]
fn callbacks_and_the_async_receiver_see_events() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let a = Node::start(fast().on_event(move |e| {
        if matches!(e, Event::Message { .. }) {
            s2.fetch_add(1, Ordering::Relaxed);
        }
    }));
    let b = fast().static_peer(ep(a.port())).build().unwrap();
    let mut rx = b.events();
    b.start().unwrap();
    wait_until(10, "A and B connected", || {
        a.mesh.connected_peers().contains(&b.id()) && b.connected_peers().contains(&a.id())
    });
    b.broadcast_blocking("to a").unwrap();
    wait_until(10, "A's callback saw the message", || {
        seen.load(Ordering::Relaxed) == 1
    });
    let a2 = a.mesh.clone();
    block_on(async move { a2.broadcast("to b").await }, 10).unwrap();
    let got = block_on(
        async {
            loop {
                match rx.recv().await {
                    Some(Event::Message { payload, from, .. }) => break (from, payload),
                    Some(_) => continue,
                    None => panic!("event stream ended"),
                }
            }
        },
        10,
    );
    assert_eq!(got, (a.id(), bytes::Bytes::from_static(b"to b")));
    b.stop();
    // After stop the stream yields what was queued, then ends.
    block_on(async { while rx.recv().await.is_some() {} }, 10);
}

#[test]
fn static_peer_given_by_host_name_is_resolved_and_connected() {
    let a = Node::start(fast());
    let b = Node::start(fast().static_peer(format!("localhost:{}", a.port())));
    wait_until(10, "B reaches A by name", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
}

/// The congestion control of every established TCP connection on `port` (either end), as
/// `ss` reports it.
fn congestion_on(port: u16) -> Vec<String> {
    let out = std::process::Command::new("ss")
        .args(["-tinH", "state", "established"])
        .arg(format!("( sport = :{port} or dport = :{port} )"))
        .output()
        .expect("ss (iproute2) runs");
    assert!(out.status.success(), "ss failed: {out:?}");
    // Each connection: an address line, then an indented line of TCP info that starts with
    // the algorithm's name (and options such as `ts sack`).
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_whitespace()))
        .map(|l| {
            l.split_whitespace()
                .find(|w| ["reno", "cubic", "bbr", "htcp", "vegas", "dctcp"].contains(w))
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

#[test]
fn tcp_congestion_is_set_on_every_mesh_connection_and_a_refused_one_fails_the_start() {
    // Reno is in every kernel and allowed to every process; the host's default is not reno
    // on the machines this runs on (cubic or bbr), so the assertion sees the setting.
    let b = Node::start(fast().tcp_congestion("reno"));
    let a = Node::start(fast().tcp_congestion("reno").static_peer(ep(b.port())));
    wait_until(10, "A and B linked both ways", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
    a.mesh.broadcast_blocking("over reno").unwrap();
    wait_until(10, "B delivers", || b.rec.messages().len() == 1);
    let ccs = congestion_on(b.port());
    assert_eq!(ccs.len(), 2, "both ends of the one link: {ccs:?}");
    assert!(
        ccs.iter().all(|c| c == "reno"),
        "dialed and accepted ends: {ccs:?}"
    );

    // A name the kernel does not offer: the start fails and says why.
    let m = fast()
        .tcp_congestion("no_such_cc")
        .build()
        .expect("a well-formed name");
    let err = m.start().expect_err("no such algorithm").to_string();
    assert!(err.contains("tcp_congestion"), "{err}");
    // Not a name at all: refused when built.
    assert!(fast().tcp_congestion("BBR; reno").build().is_err());
}
