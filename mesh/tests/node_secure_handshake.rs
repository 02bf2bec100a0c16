//! A live secured node against a hand-driven peer: a raw TCP client that runs the crate's own
//! sans-I/O handshake but lies in its Hello. The node must refuse the link with the right
//! error kind and keep serving everyone else.

mod node_support;

use bytes::BytesMut;
use node_support::*;
use shoal_mesh::crypto::{Handshake, Identity, IdentityPolicy, PskKeys, SecureContext};
use shoal_mesh::wire::{take_frame, Frame, Hello};
use shoal_mesh::{ErrorKind, MeshBuilder, PeerId};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

const PSK: &str = "raw-handshake";
const MAX: u32 = 16 * 1024 * 1024;

fn secured_node() -> MeshBuilder {
    fast()
        .psk(PSK)
        .identity_seed_hex(hex::encode([1u8; 32]))
        .node_name("a")
}

fn client_ctx(identity_seed: Option<u8>) -> Arc<SecureContext> {
    let ctx = SecureContext::new(
        PskKeys::derive(PSK.as_bytes()).unwrap(),
        b"default", // the node's group
    )
    .unwrap();
    Arc::new(match identity_seed {
        Some(b) => ctx.with_identity(
            Identity::from_seed(&[b; 32], "liar").unwrap(),
            IdentityPolicy::open(false),
        ),
        None => ctx,
    })
}

fn hello(hs: &mut Handshake) -> Hello {
    let mut h = plain_hello();
    hs.fill_hello(&mut h);
    h
}

fn send(s: &mut TcpStream, f: Frame) {
    let mut out = Vec::new();
    f.encode(&mut out).unwrap();
    s.write_all(&out).unwrap();
}

/// The next plaintext frame from the node, or None once it closed the connection.
fn next_frame(s: &mut TcpStream, buf: &mut BytesMut) -> Option<Frame> {
    loop {
        if let Some(f) = take_frame(buf, MAX).expect("the node sends valid frames") {
            return Some(f);
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("the node neither answered nor closed: {e}"),
        }
    }
}

/// Reads until the node closes the connection; panics on a timeout.
fn assert_closed(s: &mut TcpStream, buf: &mut BytesMut, what: &str) {
    while let Some(f) = next_frame(s, buf) {
        assert!(
            !matches!(f, Frame::Data(_)),
            "{what}: the node sent data to a refused peer"
        );
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn still_serves(a: &Node) {
    let b = Node::start(
        fast()
            .psk(PSK)
            .identity_seed_hex(hex::encode([2u8; 32]))
            .static_peer(ep(a.port())),
    );
    // Both ends: b refuses to send (NoRoute) until its own side of the link is up.
    wait_until(10, "an honest peer still joins", || {
        a.mesh.connected_peers().contains(&b.id()) && b.mesh.connected_peers().contains(&a.id())
    });
    b.mesh.send_blocking(a.id(), "hello-a").unwrap();
    wait_until(10, "and its message arrives", || {
        a.rec
            .messages()
            .iter()
            .any(|m| m.1 == b"hello-a".as_slice())
    });
}

#[test]
fn low_order_ephemeral_key_is_refused_by_a_live_node() {
    // The client shows no identity: admit that (an identity mesh refuses it by default), so
    // the key check is what refuses it.
    let a = Node::start(secured_node().require_identity(false));
    for bad in [[0u8; 32], {
        let mut one = [0u8; 32];
        one[0] = 1;
        one
    }] {
        let mut hs = Handshake::new(client_ctx(None), &mut rand::thread_rng());
        let mut h = hello(&mut hs);
        h.eph_pub_key = Some(bad);
        let mut s = connect(a.port());
        send(&mut s, Frame::Hello(h));
        let mut buf = BytesMut::new();
        assert_closed(&mut s, &mut buf, "low-order key");
    }
    wait_until(10, "two crypto errors", || {
        errors_of(&a, ErrorKind::Crypto) >= 2
    });
    assert!(a.mesh.connected_peers().is_empty());
    still_serves(&a);
}

#[test]
fn node_id_that_is_not_the_hash_of_the_key_is_refused_by_a_live_node() {
    let a = Node::start(secured_node());
    let mut hs = Handshake::new(client_ctx(Some(3)), &mut rand::thread_rng());
    let mut h = hello(&mut hs);
    let honest = h.node_id;
    h.node_id = PeerId([0x5a; 16]); // not BLAKE2b-16 of the key it sends
    assert_ne!(h.node_id, honest);
    let mut s = connect(a.port());
    send(&mut s, Frame::Hello(h));
    let mut buf = BytesMut::new();
    // The node's HelloAck, then (after it checked our Hello) its AuthConfirm.
    let ack = match next_frame(&mut s, &mut buf).expect("the node answers the Hello") {
        Frame::HelloAck(ack) => ack,
        other => panic!("expected HelloAck, got {other:?}"),
    };
    let confirm = hs
        .on_peer_hello(&ack)
        .expect("the node's HelloAck is honest");
    send(&mut s, Frame::AuthConfirm(confirm));
    assert_closed(&mut s, &mut buf, "lying node id");
    wait_until(10, "an identity error", || {
        errors_of(&a, ErrorKind::Identity) >= 1
    });
    assert!(!a.mesh.connected_peers().contains(&PeerId([0x5a; 16])));
    assert!(!a.mesh.connected_peers().contains(&honest));
    still_serves(&a);
}
