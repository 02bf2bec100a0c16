//! Issue 24 finding 10, live: a stranger that claims the id of a linked peer, once the link is
//! older than the race window, gets Goodbye and leaves the link alone, however often it tries;
//! the peer stays connected at both ends and traffic keeps flowing.

mod node_support;

use node_support::*;
use shoal_mesh::wire::Frame;
use shoal_mesh::{Event, PeerId};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Dials `port` with a plaintext Hello claiming `id`, reads until the node closes the
/// connection (at most 10 s) and returns the type bytes of the frames it was sent.
fn claim(port: u16, id: PeerId) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut hello = plain_hello();
    hello.node_id = id;
    let mut bytes = Vec::new();
    Frame::Hello(hello).encode(&mut bytes).unwrap();
    s.write_all(&bytes).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        assert!(
            Instant::now() < deadline,
            "the node kept the claiming connection open"
        );
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        }
    }
    let mut types = Vec::new();
    let mut at = 0;
    while buf.len() >= at + 5 {
        let len = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        types.push(buf[at + 4]);
        at += 4 + len;
    }
    types
}

#[test]
fn a_stranger_claiming_a_linked_peers_id_never_displaces_its_link() {
    // V dials P, and P's id is the lower: multimaster's rule alone would hand P's id to any
    // inbound connection claiming it.
    let lo = PeerId([0x01; 16]);
    let hi = PeerId([0xf0; 16]);
    let p = Node::start(fast().node_id(lo));
    let v = Node::start(
        fast()
            .node_id(hi)
            .handshake_timeout(Duration::from_millis(500))
            .static_peer(ep(p.port())),
    );
    wait_until(10, "V and P linked at both ends", || {
        v.connected_to(&p) && p.connected_to(&v)
    });
    // The link is older than V's race window (2 x handshake_timeout) from here on: a claim is
    // no dial race any more. (A wait for a time bound to pass, not for a thread to run.)
    std::thread::sleep(Duration::from_millis(1000) + Duration::from_millis(200));
    for i in 1..=3u64 {
        let types = claim(v.port(), lo);
        // HelloAck (sent on accept), then Goodbye, then the close.
        assert_eq!(
            types.last(),
            Some(&5),
            "claim {i}: Goodbye expected, got frame types {types:?}"
        );
        wait_until(10, "the claim counted", || {
            v.mesh.stats().control.claims_refused >= i
        });
    }
    assert!(v.connected_to(&p) && p.connected_to(&v));
    let dropped = |n: &Node| n.rec.has(|e| matches!(e, Event::PeerDisconnected { .. }));
    assert!(!dropped(&v), "V lost its link to P: {:?}", v.rec.events());
    assert!(!dropped(&p), "P lost its link to V: {:?}", p.rec.events());
    // The link still carries traffic both ways.
    v.mesh.broadcast_blocking("from V").unwrap();
    p.mesh.broadcast_blocking("from P").unwrap();
    wait_until(10, "both broadcasts delivered", || {
        let got = |n: &Node, want: &[u8]| n.rec.messages().iter().any(|(_, m, _)| m == want);
        got(&p, b"from V") && got(&v, b"from P")
    });
}
