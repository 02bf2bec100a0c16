//! Live nodes over 127.0.0.1, the reverse-path check of Data frames (issue 24, finding 12): a
//! stranger links to one node, reads an origin's message ids from the flood and sends Data
//! frames carrying that origin's next ids before the origin does. With the check (the
//! default) they are dropped where they enter and counted (`dropped_off_path`), and every
//! real message still reaches every node; with `reverse_path_check(false)` the forgeries are
//! delivered everywhere and the real messages dropped as duplicates.

mod node_support;

use node_support::*;
use shoal_mesh::wire::{Data, Frame};
use shoal_mesh::{MsgId, PeerId};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FORGED: u64 = 10;

/// Every Data frame the stranger was sent: `(src, msgId, payload)`.
type Seen = Arc<Mutex<Vec<(PeerId, MsgId, Vec<u8>)>>>;

/// A hand-driven plain v1 peer: says Hello, heartbeats, and records the `(src, msgId,
/// payload)` of every Data frame it is sent (the shared raw peer keeps no ids).
struct Stranger {
    id: PeerId,
    out: Arc<Mutex<TcpStream>>,
    seen: Seen,
    stop: Arc<AtomicBool>,
}

impl Stranger {
    fn dial(port: u16) -> Stranger {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let hello = plain_hello();
        let st = Stranger {
            id: hello.node_id,
            out: Arc::new(Mutex::new(s.try_clone().unwrap())),
            seen: Arc::default(),
            stop: Arc::default(),
        };
        st.send(&Frame::Hello(hello));
        let (out, seen, stop) = (st.out.clone(), st.seen.clone(), st.stop.clone());
        std::thread::spawn(move || read_loop(s, out, seen, stop));
        st
    }

    fn send(&self, f: &Frame) {
        let mut b = Vec::new();
        f.encode(&mut b).unwrap();
        let _ = self.out.lock().unwrap().write_all(&b);
    }

    /// The id of the last Data frame from `src` with `payload`.
    fn id_of(&self, src: PeerId, payload: &[u8]) -> Option<MsgId> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .rev()
            .find(|(s, _, p)| *s == src && p == payload)
            .map(|(_, id, _)| *id)
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn read_loop(mut s: TcpStream, out: Arc<Mutex<TcpStream>>, seen: Seen, stop: Arc<AtomicBool>) {
    let mut heartbeat = Vec::new();
    Frame::Heartbeat.encode(&mut heartbeat).unwrap();
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Acquire) {
        if out.lock().unwrap().write_all(&heartbeat).is_err() {
            return;
        }
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        while buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let frame: Vec<u8> = buf.drain(..4 + len).collect();
            // Data body: src 16 | dst 16 | msgId 16 | ttl 1 | payloadLen 4 | payload.
            if frame[4] == 4 && frame.len() >= 5 + 53 {
                let b = &frame[5..];
                let src = PeerId(b[..16].try_into().unwrap());
                let id = MsgId(b[32..48].try_into().unwrap());
                seen.lock().unwrap().push((src, id, b[53..].to_vec()));
            }
        }
    }
}

fn data(src: PeerId, dst: PeerId, id: MsgId, payload: &str) -> Frame {
    Frame::Data(Data {
        src,
        dst,
        msg_id: id,
        ttl: 8,
        payload: payload.as_bytes().to_vec().into(),
    })
}

/// X - A - V - B over loopback, each link dialled by its later node.
fn line(check: bool) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..4 {
        // One shard: every message X originates takes ids from one generator, in order.
        let mut b = fast().shards(1).reverse_path_check(check);
        if i > 0 {
            b = b.static_peer(ep(nodes[i - 1].port()));
        }
        nodes.push(Node::start(b));
    }
    wait_connected(&nodes, &[(0, 1), (1, 2), (2, 3)]);
    for (i, n) in nodes.iter().enumerate() {
        wait_until(10, &format!("node {i} sees the other three"), || {
            n.mesh.members().len() == 3
        });
    }
    nodes
}

fn off_path(n: &Node) -> u64 {
    n.mesh.stats().total.dropped_off_path
}

fn delivered(n: &Node, payload: &str) -> usize {
    n.rec
        .messages()
        .iter()
        .filter(|m| m.1 == payload.as_bytes())
        .count()
}

/// Links the stranger to V, learns X's last id from the flood, and sends X's next ids
/// (broadcasts `forged-1..`, then one targeted at B) before X does.
fn forge(nodes: &[Node], check: bool) -> Stranger {
    let (x, v, b) = (&nodes[0], &nodes[2], &nodes[3]);
    let s = Stranger::dial(v.port());
    wait_until(10, "V links the stranger", || {
        v.mesh.connected_peers().contains(&s.id)
    });
    if check {
        // V's table must know X and have settled before the test means anything: a probe
        // under X's name with an id far from X's counter (spending nothing X will use) until
        // V refuses one.
        let mut k = 0u64;
        wait_until(10, "V refuses a probe from the stranger's link", || {
            k += 1;
            if k % 5 == 1 {
                let id = MsgId::new(&x.id(), rand::random::<u64>());
                s.send(&data(x.id(), PeerId::ZERO, id, "probe"));
            }
            off_path(v) > 0
        });
    }
    x.mesh.broadcast_blocking("warm").unwrap();
    wait_until(10, "the stranger sees X's broadcast", || {
        s.id_of(x.id(), b"warm").is_some()
    });
    let c = s.id_of(x.id(), b"warm").unwrap().counter();
    for n in 1..=FORGED {
        let id = MsgId::new(&x.id(), c + n);
        s.send(&data(x.id(), PeerId::ZERO, id, &format!("forged-{n}")));
    }
    let id = MsgId::new(&x.id(), c + FORGED + 1);
    s.send(&data(x.id(), b.id(), id, "forged-t"));
    s
}

#[test]
fn a_strangers_forged_next_ids_do_not_silence_the_origin() {
    let nodes = line(true);
    let (x, v, b) = (&nodes[0], &nodes[2], &nodes[3]);
    let probes = off_path(v);
    let _s = forge(&nodes, true);
    wait_until(10, "V drops the forgeries as off its path to X", || {
        off_path(v) > probes + FORGED
    });
    for n in 1..=FORGED {
        x.mesh.broadcast_blocking(format!("real-{n}")).unwrap();
    }
    x.mesh.send_blocking(b.id(), "real-t").unwrap();
    for (i, n) in nodes.iter().enumerate().skip(1) {
        wait_until(10, &format!("node {i} delivers X's real messages"), || {
            (1..=FORGED).all(|k| delivered(n, &format!("real-{k}")) == 1)
        });
    }
    wait_until(10, "B delivers X's real targeted message", || {
        delivered(b, "real-t") == 1
    });
    for (i, n) in nodes.iter().enumerate() {
        let forged = n
            .rec
            .messages()
            .iter()
            .filter(|m| m.1.starts_with(b"forged"))
            .count();
        assert_eq!(forged, 0, "node {i} delivered a forgery");
    }
    // Genuine traffic was never refused: only V, where the stranger is, dropped anything,
    // but the probes V took while its paths to X still settled (`reverse_path_settle`) and
    // flooded on, which A (next to X, long settled) refuses as coming from V's side.
    for i in [0, 3] {
        assert_eq!(off_path(&nodes[i]), 0, "node {i}");
    }
    let taken = delivered(v, "probe") as u64;
    assert!(
        off_path(&nodes[1]) <= taken,
        "A refused {} frames, V took {taken} probes",
        off_path(&nodes[1])
    );
}

/// The same attack with the check off: the forgeries are delivered and X's real messages with
/// those ids reach nobody (what the check is for, and proof the setting turns it off).
#[test]
fn without_the_check_the_forgeries_win() {
    let nodes = line(false);
    let (x, b) = (&nodes[0], &nodes[3]);
    let _s = forge(&nodes, false);
    wait_until(10, "B delivers the forgeries", || {
        delivered(b, &format!("forged-{FORGED}")) == 1 && delivered(b, "forged-t") == 1
    });
    for n in 1..=FORGED {
        x.mesh.broadcast_blocking(format!("real-{n}")).unwrap();
    }
    x.mesh.send_blocking(b.id(), "real-t").unwrap();
    // X's later messages take the same path in order: once the fence is everywhere, so would
    // the real ones be.
    x.mesh.broadcast_blocking("fence").unwrap();
    for (i, n) in nodes.iter().enumerate().skip(1) {
        wait_until(10, &format!("node {i} delivers the fence"), || {
            delivered(n, "fence") == 1
        });
        for k in 1..=FORGED {
            assert_eq!(delivered(n, &format!("forged-{k}")), 1, "node {i}");
            assert_eq!(delivered(n, &format!("real-{k}")), 0, "node {i}");
        }
    }
    assert_eq!(delivered(b, "real-t"), 0);
    assert!(nodes.iter().all(|n| off_path(n) == 0));
}
