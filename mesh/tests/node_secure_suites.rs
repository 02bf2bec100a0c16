//! Record suites on live nodes over 127.0.0.1: Shoal–Shoal links on AES-256-GCM when both
//! offer it, a multimaster peer on ChaCha20-Poly1305, and a relay carrying messages between
//! the two kinds of link; the `record_suite` setting decides between Shoal nodes; a man in the
//! middle that changes an offer breaks the link, one that strips both leaves ChaCha20-Poly1305.

mod node_support;

use bytes::BytesMut;
use node_support::secure_peer::SecurePeer;
use node_support::*;
use shoal_mesh::crypto::{aes_accelerated, RecordSuite, RecordSuitePolicy};
use shoal_mesh::wire::{take_frame, Data, Features, Frame, Hello};
use shoal_mesh::{ErrorKind, LinkInfo, MeshBuilder, MsgId, PeerId};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};

const PSK: &str = "suite-psk";

fn secured(suite: RecordSuitePolicy) -> MeshBuilder {
    fast().psk(PSK).record_suite(suite)
}

/// The suite of `n`'s link to `peer`, once the link is listed.
fn suite_of(n: &Node, peer: PeerId) -> Option<RecordSuite> {
    n.mesh
        .links()
        .iter()
        .find(|l| l.peer == peer)
        .and_then(|l| l.suite)
}

fn wait_suite(n: &Node, peer: PeerId, want: RecordSuite) {
    wait_until(10, &format!("link to {peer} listed as {want}"), || {
        suite_of(n, peer).is_some()
    });
    assert_eq!(suite_of(n, peer), Some(want), "{:?}", n.mesh.links());
}

#[test]
fn a_relay_joins_an_aes_link_and_a_multimaster_chacha_link() {
    let aes = RecordSuitePolicy::Aes256Gcm;
    let relay = Node::start(secured(aes));
    let a = Node::start(secured(aes).static_peer(ep(relay.port())));
    wait_until(10, "A and the relay linked both ways", || {
        a.connected_to(&relay) && relay.connected_to(&a)
    });
    // A multimaster node with an identity: no Shoal extension, so nothing to offer with.
    let m = SecurePeer::dial_multimaster(relay.port(), PSK, 9);
    wait_until(10, "the relay lists the multimaster peer", || {
        relay.mesh.connected_peers().contains(&m.id)
    });

    wait_suite(&relay, a.id(), RecordSuite::Aes256Gcm);
    wait_suite(&a, relay.id(), RecordSuite::Aes256Gcm);
    wait_suite(&relay, m.id, RecordSuite::ChaCha20Poly1305);
    let at_relay =
        |p: PeerId| -> LinkInfo { *relay.mesh.links().iter().find(|l| l.peer == p).unwrap() };
    assert!(at_relay(a.id()).extended_frames);
    assert!(!at_relay(m.id).extended_frames);
    // The same in the relay's metrics, one series per link.
    #[cfg(feature = "prometheus")]
    {
        let page = shoal_mesh::metrics::render_mesh(&relay.mesh);
        for (peer, suite) in [(a.id(), "aes-256-gcm"), (m.id, "chacha20-poly1305")] {
            let line = format!("shoal_link_suite{{peer=\"{peer}\",suite=\"{suite}\"}} 1");
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
    }

    // Multimaster → relay (ChaCha) → A (AES).
    m.send_frame(Frame::Data(Data {
        src: m.id,
        dst: PeerId::ZERO,
        msg_id: MsgId::new(&m.id, 1),
        ttl: 8,
        payload: b"from-multimaster".to_vec().into(),
    }));
    wait_until(10, "A received the multimaster peer's message", || {
        a.rec
            .messages()
            .iter()
            .any(|(from, p, _)| *from == m.id && p == b"from-multimaster")
    });
    // A (AES) → relay → multimaster (ChaCha).
    a.mesh.broadcast_blocking(&b"from-shoal"[..]).unwrap();
    wait_until(10, "the multimaster peer received A's message", || {
        m.frames().iter().any(
            |f| matches!(f, Frame::Data(d) if d.src == a.id() && &d.payload[..] == b"from-shoal"),
        )
    });
    assert!(relay
        .rec
        .messages()
        .iter()
        .any(|(from, p, _)| *from == a.id() && p == b"from-shoal"));
    assert!(!m.closed(), "the multimaster link stayed up");
}

#[test]
fn the_setting_decides_between_shoal_nodes() {
    use RecordSuitePolicy::{Aes256Gcm, Auto, ChaCha20Poly1305};
    let auto = if aes_accelerated() {
        RecordSuite::Aes256Gcm
    } else {
        RecordSuite::ChaCha20Poly1305
    };
    for (x, y, want) in [
        (Aes256Gcm, ChaCha20Poly1305, RecordSuite::ChaCha20Poly1305),
        (
            ChaCha20Poly1305,
            ChaCha20Poly1305,
            RecordSuite::ChaCha20Poly1305,
        ),
        (Auto, Auto, auto),
        (Auto, Aes256Gcm, auto),
    ] {
        let (s, r, rx) = sender_and_receiver(secured(x), secured(y));
        let r = Node {
            mesh: r,
            rec: Recorder::new(rx),
        };
        wait_suite(&s, r.id(), want);
        wait_suite(&r, s.id(), want);
        s.mesh.broadcast_blocking(&b"over the link"[..]).unwrap();
        wait_until(10, "the message crossed", || {
            r.rec
                .messages()
                .iter()
                .any(|(_, p, _)| p == b"over the link")
        });
    }
    // A plaintext mesh has no records, so no suite.
    let (s, r, _rx) = sender_and_receiver(fast(), fast());
    wait_until(10, "plaintext link listed", || !s.mesh.links().is_empty());
    assert_eq!(suite_of(&s, r.id()), None);
}

/// A man in the middle of every connection to `target`: it rewrites the first frame of each
/// direction (the Hello, then the HelloAck) with `to_target` / `to_dialer`, and forwards
/// everything else as it is.
fn hello_rewriter(target: u16, to_target: fn(&mut Hello), to_dialer: fn(&mut Hello)) -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
                continue;
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || forward(client, server, to_target));
            std::thread::spawn(move || forward(s2, c2, to_dialer));
        }
    });
    port
}

fn forward(mut from: TcpStream, mut to: TcpStream, rewrite: fn(&mut Hello)) {
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 16 * 1024];
    let first = loop {
        if let Ok(Some(f)) = take_frame(&mut buf, 1 << 20) {
            break f;
        }
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let first = match first {
        Frame::Hello(mut h) => {
            rewrite(&mut h);
            Frame::Hello(h)
        }
        Frame::HelloAck(mut h) => {
            rewrite(&mut h);
            Frame::HelloAck(h)
        }
        other => other,
    };
    let mut out = Vec::new();
    first.encode(&mut out).unwrap();
    out.extend_from_slice(&buf);
    if to.write_all(&out).is_err() {
        return;
    }
    loop {
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&chunk[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

fn untouched(_: &mut Hello) {}

fn strip_offer(h: &mut Hello) {
    if let Some(e) = h.shoal.as_mut() {
        e.features = Features(e.features.0 & !Features::AES_GCM_RECORDS.0);
    }
}

fn flip_signed_records(h: &mut Hello) {
    if let Some(e) = h.shoal.as_mut() {
        e.features = Features(e.features.0 ^ Features::SIGNED_RECORDS.0);
    }
}

#[test]
fn a_man_in_the_middle_can_break_an_offer_or_strip_both_but_not_downgrade_silently() {
    let aes = RecordSuitePolicy::Aes256Gcm;
    // Both offers stripped: a working ChaCha20-Poly1305 link.
    let r = Node::start(secured(aes));
    let mitm = hello_rewriter(r.port(), strip_offer, strip_offer);
    let a = Node::start(secured(aes).static_peer(ep(mitm)));
    wait_suite(&a, r.id(), RecordSuite::ChaCha20Poly1305);
    wait_suite(&r, a.id(), RecordSuite::ChaCha20Poly1305);
    a.mesh.broadcast_blocking(&b"downgraded"[..]).unwrap();
    wait_until(10, "the message crossed the ChaCha link", || {
        r.rec.messages().iter().any(|(_, p, _)| p == b"downgraded")
    });

    // One offer stripped, or another bit of a block changed: no link, a Crypto error at both
    // ends (the AuthConfirm tags disagree).
    for (to_target, to_dialer) in [
        (strip_offer as fn(&mut Hello), untouched as fn(&mut Hello)),
        (untouched, strip_offer),
        (flip_signed_records, untouched),
    ] {
        let r = Node::start(secured(aes));
        let mitm = hello_rewriter(r.port(), to_target, to_dialer);
        let a = Node::start(secured(aes).static_peer(ep(mitm)));
        wait_until(10, "a Crypto error at both ends", || {
            errors_of(&a, ErrorKind::Crypto) >= 1 && errors_of(&r, ErrorKind::Crypto) >= 1
        });
        assert!(a.mesh.links().is_empty() && r.mesh.links().is_empty());
        assert!(a.mesh.connected_peers().is_empty() && r.mesh.connected_peers().is_empty());
    }
}
