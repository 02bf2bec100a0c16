//! The secured mesh on live nodes over 127.0.0.1: PSK handshake and records, refusals (other
//! PSK, other mode, identities), broken record streams (through a byte-level proxy), identity
//! names across a bridge and revocation.

mod node_support;

use node_support::*;
use shoal_mesh::crypto::Identity;
use shoal_mesh::{ErrorKind, Event, MeshBuilder, PeerId};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PAYLOAD: &str = "distinctive-payload-7f3a9c1e-never-in-clear";

/// What the proxy does to the first record it forwards after being armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tamper {
    /// Flip one ciphertext byte.
    Flip,
    /// Send the record twice.
    Replay,
    /// Swap it with the next record.
    Reorder,
    /// Send half of it, then end the stream.
    Truncate,
}

/// A TCP forwarder between a dialer and `target`, recording every byte in both directions.
/// The dialer-to-target direction is parsed as length-prefixed units (the two plaintext
/// handshake frames, then records in a secured mesh), so one record can be tampered with.
struct Proxy {
    port: u16,
    recorded: Arc<Mutex<Vec<u8>>>,
    armed: Arc<Mutex<Option<Tamper>>>,
    /// Connections accepted so far.
    conns: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let armed = Arc::new(Mutex::new(None));
        let conns = Arc::new(AtomicUsize::new(0));
        let (rec, arm, n) = (recorded.clone(), armed.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
                    continue;
                };
                n.fetch_add(1, Ordering::SeqCst);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (rec_up, rec_down, arm) = (rec.clone(), rec.clone(), arm.clone());
                std::thread::spawn(move || upstream(client, server, rec_up, arm));
                std::thread::spawn(move || downstream(s2, c2, rec_down));
            }
        });
        Proxy {
            port,
            recorded,
            armed,
            conns,
        }
    }

    fn arm(&self, t: Tamper) {
        *self.armed.lock().unwrap() = Some(t);
    }

    fn is_armed(&self) -> bool {
        self.armed.lock().unwrap().is_some()
    }

    fn saw(&self, needle: &[u8]) -> bool {
        let r = self.recorded.lock().unwrap();
        r.windows(needle.len()).any(|w| w == needle)
    }
}

fn close_both(a: &TcpStream, b: &TcpStream) {
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

/// Target to dialer: plain copy.
fn downstream(mut from: TcpStream, mut to: TcpStream, rec: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                rec.lock().unwrap().extend_from_slice(&buf[..n]);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    close_both(&from, &to);
}

fn read_unit(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let n = u32::from_be_bytes(len) as usize;
    let mut unit = vec![0u8; 4 + n];
    unit[..4].copy_from_slice(&len);
    s.read_exact(&mut unit[4..]).ok()?;
    Some(unit)
}

/// Dialer to target, unit by unit; the first two units (Hello, AuthConfirm) are never touched.
fn upstream(
    mut from: TcpStream,
    mut to: TcpStream,
    rec: Arc<Mutex<Vec<u8>>>,
    armed: Arc<Mutex<Option<Tamper>>>,
) {
    let mut index = 0usize;
    let send = |to: &mut TcpStream, b: &[u8]| -> bool {
        rec.lock().unwrap().extend_from_slice(b);
        to.write_all(b).is_ok()
    };
    while let Some(mut unit) = read_unit(&mut from) {
        index += 1;
        let action = if index > 2 {
            armed.lock().unwrap().take()
        } else {
            None
        };
        let ok = match action {
            None => send(&mut to, &unit),
            Some(Tamper::Flip) => {
                let at = unit.len() / 2;
                unit[at] ^= 0x40;
                send(&mut to, &unit)
            }
            Some(Tamper::Replay) => send(&mut to, &unit) && send(&mut to, &unit),
            Some(Tamper::Reorder) => match read_unit(&mut from) {
                Some(next) => send(&mut to, &next) && send(&mut to, &unit),
                None => false,
            },
            Some(Tamper::Truncate) => {
                send(&mut to, &unit[..unit.len() / 2]);
                // End only the direction to the target: it must see the cut record.
                let _ = to.shutdown(Shutdown::Write);
                std::thread::sleep(Duration::from_millis(500));
                false
            }
        };
        if !ok {
            break;
        }
    }
    close_both(&from, &to);
}

fn secured(psk: &str) -> MeshBuilder {
    fast().psk(psk)
}

fn seed_hex(b: u8) -> String {
    hex::encode([b; 32])
}

fn key_hex(b: u8) -> String {
    hex::encode(Identity::from_seed(&[b; 32], "").unwrap().public_key())
}

/// A secured node with the identity of seed `b` named `name`.
fn with_identity(b: u8, name: &str) -> MeshBuilder {
    secured("id-mesh")
        .identity_seed_hex(seed_hex(b))
        .node_name(name)
}

fn ever_connected(n: &Node, peer: PeerId) -> bool {
    n.rec
        .has(|e| matches!(e, Event::PeerConnected { peer: p } if *p == peer))
}

fn exchange_messages(a: &Node, b: &Node, tag: &str) {
    let bc = format!("{PAYLOAD}-broadcast-{tag}");
    let to_a = format!("{PAYLOAD}-to-a-{tag}");
    let to_b = format!("{PAYLOAD}-to-b-{tag}");
    b.mesh.broadcast_blocking(bc.clone()).unwrap();
    b.mesh.send_blocking(a.id(), to_a.clone()).unwrap();
    a.mesh.send_blocking(b.id(), to_b.clone()).unwrap();
    let has = |n: &Node, p: &str, bcast: bool| {
        n.rec
            .messages()
            .iter()
            .any(|m| m.1 == p.as_bytes() && m.2 == bcast)
    };
    wait_until(10, &format!("A delivers the broadcast ({tag})"), || {
        has(a, &bc, true)
    });
    wait_until(10, &format!("A delivers the targeted ({tag})"), || {
        has(a, &to_a, false)
    });
    wait_until(10, &format!("B delivers the targeted ({tag})"), || {
        has(b, &to_b, false)
    });
}

#[test]
fn same_psk_delivers_and_encrypts_the_wire() {
    for psk in ["s3cret-psk", ""] {
        let a = Node::start(fast().psk(psk));
        let proxy = Proxy::start(a.port());
        let b = Node::start(fast().psk(psk).static_peer(ep(proxy.port)));
        wait_until(10, "A and B connected through the proxy", || {
            a.connected_to(&b) && b.connected_to(&a)
        });
        exchange_messages(&a, &b, "wire");
        // Something bigger than one read and spanning many records' worth of frames too.
        let big = format!("{PAYLOAD}-{}", "x".repeat(300_000));
        b.mesh.broadcast_blocking(big.clone()).unwrap();
        wait_until(10, "A delivers the big broadcast", || {
            a.rec.messages().iter().any(|m| m.1 == big.as_bytes())
        });
        let clear = proxy.saw(PAYLOAD.as_bytes());
        if psk.is_empty() {
            assert!(clear, "plaintext mode: the proxy must see the payload");
        } else {
            assert!(
                !clear,
                "secured mode: the payload crossed the wire in clear"
            );
        }
        for n in [&a, &b] {
            let s = n.mesh.stats().total;
            assert_eq!(s.record_failures + s.auth_failures, 0);
            assert_eq!(s.malformed_frames, 0);
        }
    }
}

#[test]
fn wrong_psk_never_joins() {
    let a = Node::start(secured("psk-one"));
    let b = Node::start(secured("psk-two").static_peer(ep(a.port())));
    wait_until(10, "both sides report the failed handshake", || {
        errors_of(&a, ErrorKind::Crypto) > 0 && errors_of(&b, ErrorKind::Crypto) > 0
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(!ever_connected(&a, b.id()) && !ever_connected(&b, a.id()));
    assert!(a.mesh.connected_peers().is_empty());
    assert!(a.mesh.stats().total.auth_failures > 0);
}

#[test]
fn plaintext_and_secured_refuse_each_other_both_ways() {
    // Secured dials plaintext, and plaintext dials secured.
    for secured_dials in [true, false] {
        let (listener, dialer) = if secured_dials {
            (fast(), secured("k"))
        } else {
            (secured("k"), fast())
        };
        let a = Node::start(listener);
        let b = Node::start(dialer.static_peer(ep(a.port())));
        wait_until(10, "both sides report the mode mismatch", || {
            errors_of(&a, ErrorKind::ModeMismatch) > 0 && errors_of(&b, ErrorKind::ModeMismatch) > 0
        });
        std::thread::sleep(Duration::from_secs(2));
        assert!(!ever_connected(&a, b.id()) && !ever_connected(&b, a.id()));
    }
}

#[test]
fn broken_record_stream_drops_only_that_link() {
    for tamper in [
        Tamper::Flip,
        Tamper::Replay,
        Tamper::Reorder,
        Tamper::Truncate,
    ] {
        let a = Node::start(secured("k"));
        let c = Node::start(secured("k").static_peer(ep(a.port())));
        let proxy = Proxy::start(a.port());
        let b = Node::start(secured("k").static_peer(ep(proxy.port)));
        wait_until(10, "A connected to B (proxied) and C", || {
            a.connected_to(&b) && b.connected_to(&a) && a.connected_to(&c)
        });
        exchange_messages(&a, &b, "before");
        proxy.arm(tamper);
        // Heartbeats flow every 200 ms, so a record passes soon even without traffic.
        b.mesh.broadcast_blocking("after-arm").unwrap();
        wait_until(10, &format!("A reports the {tamper:?} record"), || {
            errors_of(&a, ErrorKind::Crypto) > 0
        });
        assert!(!proxy.is_armed());
        let err = a.rec.events().into_iter().find_map(|e| match e {
            Event::Error {
                kind: ErrorKind::Crypto,
                peer,
                message,
            } => Some((peer, message)),
            _ => None,
        });
        let (peer, message) = err.unwrap();
        assert_eq!(peer, Some(b.id()), "{tamper:?}: the error names B");
        if tamper == Tamper::Truncate {
            assert!(message.contains("inside a record"), "{message}");
        } else {
            assert!(message.contains("authentication failed"), "{message}");
        }
        assert!(a.mesh.stats().total.record_failures >= 1);
        // The node goes on: B reconnects (a fresh connection through the proxy) and C's
        // link was never touched.
        wait_until(10, "B reconnects through the proxy", || {
            proxy.conns.load(Ordering::SeqCst) >= 2 && a.connected_to(&b) && b.connected_to(&a)
        });
        exchange_messages(&a, &b, "after");
        assert!(
            !a.rec
                .has(|e| matches!(e, Event::PeerDisconnected { peer } if *peer == c.id())),
            "{tamper:?}: C's link must survive"
        );
    }
}

#[test]
fn unlisted_identity_is_rejected() {
    let a = Node::start(with_identity(1, "a").trusted_key(key_hex(3), "c"));
    let b = Node::start(with_identity(2, "b").static_peer(ep(a.port())));
    wait_until(10, "A refuses B's identity", || {
        errors_of(&a, ErrorKind::Identity) > 0
    });
    let c = Node::start(with_identity(3, "c").static_peer(ep(a.port())));
    wait_until(10, "A accepts the listed C", || {
        a.connected_to(&c) && c.connected_to(&a)
    });
    assert!(!ever_connected(&a, b.id()));
    assert_eq!(a.mesh.node_name(c.id()).as_deref(), Some("c"));
}

#[test]
fn revoked_key_is_dropped_and_cannot_rejoin() {
    let a = Node::start(with_identity(1, "a").trusted_key(key_hex(2), "bee"));
    let b = Node::start(with_identity(2, "b").static_peer(ep(a.port())));
    wait_until(10, "A and B connected", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
    assert_eq!(a.mesh.node_name(b.id()).as_deref(), Some("b"));
    let key = b.mesh.identity_public_key().unwrap();
    assert_eq!(hex::encode(key), key_hex(2));
    assert!(a.mesh.revoke_key(&key).unwrap(), "the key was listed");
    wait_until(10, "A drops B's link", || !a.connected_to(&b));
    assert_eq!(a.mesh.node_name(b.id()), None);
    let refusals = errors_of(&a, ErrorKind::Identity);
    wait_until(10, "B's redial is refused", || {
        errors_of(&a, ErrorKind::Identity) > refusals
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(!a.connected_to(&b), "a revoked key rejoined");
    // Revoking also works without an allowlist.
    let c = Node::start(with_identity(5, "open"));
    let d = Node::start(with_identity(6, "d").static_peer(ep(c.port())));
    wait_until(10, "C and D connected", || c.connected_to(&d));
    assert!(!c
        .mesh
        .revoke_key(&d.mesh.identity_public_key().unwrap())
        .unwrap());
    wait_until(10, "C drops D", || !c.connected_to(&d));
    wait_until(10, "D's redial is refused", || {
        errors_of(&c, ErrorKind::Identity) > 0
    });
    assert!(!c.connected_to(&d));
}

#[test]
fn identityless_peer_rejected_when_identity_required() {
    // An identity mesh requires identities by default (the C++ library's behaviour).
    let a = Node::start(with_identity(1, "a"));
    let b = Node::start(secured("id-mesh").static_peer(ep(a.port())));
    wait_until(10, "A refuses the identity-less B", || {
        errors_of(&a, ErrorKind::Identity) > 0
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(!ever_connected(&a, b.id()));
    // With require_identity = false the same peer is accepted (PSK only, no signature).
    let c = Node::start(with_identity(4, "c").require_identity(false));
    let d = Node::start(secured("id-mesh").static_peer(ep(c.port())));
    wait_until(10, "C accepts the identity-less D", || {
        c.connected_to(&d) && d.connected_to(&c)
    });
    assert_eq!(c.mesh.node_name(d.id()), None);
}

#[test]
fn names_cross_a_bridge() {
    // B - A - C: B and C are not neighbours; B learns C's signed name from gossip.
    let a = Node::start(with_identity(1, "alpha"));
    let b = Node::start(with_identity(2, "bravo").static_peer(ep(a.port())));
    let c = Node::start(with_identity(3, "charlie").static_peer(ep(a.port())));
    wait_until(10, "B-A-C connected", || {
        a.connected_to(&b) && a.connected_to(&c)
    });
    wait_until(10, "B learns C's name", || {
        b.mesh.node_name(c.id()).as_deref() == Some("charlie")
    });
    wait_until(10, "C learns B's name", || {
        c.mesh.node_name(b.id()).as_deref() == Some("bravo")
    });
    assert!(!b.connected_to(&c), "B and C are not neighbours");
    assert_eq!(a.mesh.node_name(b.id()).as_deref(), Some("bravo"));
    assert_eq!(b.mesh.node_name(b.id()).as_deref(), Some("bravo"));
    // The node id is the hash of the key.
    assert_eq!(b.id(), Identity::from_seed(&[2; 32], "").unwrap().node_id());
    exchange_messages(&a, &b, "identity");
    for n in [&a, &b, &c] {
        assert_eq!(n.mesh.stats().total.identity_records_dropped, 0);
    }
}

#[test]
fn identity_file_is_created_private_and_reused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("shoal-node-id-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.key");
    let build = || {
        secured("k")
            .identity_file(Some(path.clone()))
            .node_name("filed")
            .build()
            .unwrap()
    };
    let first = build();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let again = build();
    assert_eq!(
        first.id(),
        again.id(),
        "the same file gives the same identity"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn secured_announces_are_maced_and_other_modes_dropped() {
    let port = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let group = format!("node-secure-discovery-{}", rand::random::<u64>());
    let node = |psk: &str| {
        Node::start(
            fast()
                .psk(psk)
                .scouting(true)
                .group_name(group.clone())
                .multicast_interface(Ipv4Addr::LOCALHOST)
                .multicast_port(port)
                .announce_interval(Duration::from_millis(100)),
        )
    };
    let (a, b) = (node("k"), node("k"));
    let plain = node("");
    let other_psk = node("other");
    wait_until(10, "the secured pair discovers and connects", || {
        a.connected_to(&b) && b.connected_to(&a)
    });
    wait_until(10, "every node drops the others' announces", || {
        [&a, &plain, &other_psk]
            .iter()
            .all(|n| n.mesh.stats().total.announces_dropped > 0)
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!a.mesh.known_peers().contains(&plain.id()));
    assert!(!a.mesh.known_peers().contains(&other_psk.id()));
    assert!(plain.mesh.known_peers().is_empty());
    assert!(other_psk.mesh.known_peers().is_empty());
}
