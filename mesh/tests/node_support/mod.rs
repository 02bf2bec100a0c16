//! Helpers shared by the live-node tests: fast timers, loopback nodes, event recorders and
//! bounded waits with clear failure messages.
#![allow(dead_code)]

pub mod samples;
pub mod secure_peer;
pub mod shard_tasks;
pub mod wiring;

use shoal_mesh::wire::{Hello, PROTOCOL_VERSION};
use shoal_mesh::{ErrorKind, Event, EventReceiver, Mesh, MeshBuilder, PeerId};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A builder with multicast off, loopback listener and short timers so tests stay fast.
pub fn fast() -> MeshBuilder {
    Mesh::builder()
        .scouting(false)
        .listen_addr(LOCALHOST)
        .heartbeat_interval(Duration::from_millis(200))
        .heartbeat_timeout(Duration::from_millis(1500))
        .handshake_timeout(Duration::from_millis(1000))
        .reconnect_base(Duration::from_millis(100))
        .reconnect_max(Duration::from_millis(800))
        .peer_lost_timeout(Duration::from_millis(1500))
        .membership_interval(Duration::from_millis(300))
        .membership_timeout(Duration::from_millis(1500))
        .reverse_path_settle(Duration::from_millis(600))
}

/// [`fast`] with everything periodic slow (heartbeats, membership gossip, announcements every
/// `announce`), so what a test watches is not hidden by background traffic.
pub fn quiet(announce: Duration) -> MeshBuilder {
    fast()
        .heartbeat_interval(Duration::from_secs(5))
        .heartbeat_timeout(Duration::from_secs(30))
        .membership_interval(Duration::from_secs(10))
        .membership_timeout(Duration::from_secs(60))
        .peer_lost_timeout(Duration::from_secs(60))
        .topics(shoal_mesh::topics::TopicsConfig {
            announce_period: announce,
            participant_lease: Duration::from_secs(60),
            ..Default::default()
        })
}

/// [`fast`] with multicast scouting on loopback, on a port of its own and in a group of its
/// own (so parallel tests never hear each other); returns the builder and the port.
pub fn loopback_scouting(group: &str) -> (MeshBuilder, u16) {
    let port = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let b = fast()
        .scouting(true)
        .group_name(format!("{group}-{}", rand::random::<u64>()))
        .multicast_interface(Ipv4Addr::LOCALHOST)
        .multicast_port(port);
    (b, port)
}

/// A port that was free a moment ago (for topologies that need ports before start).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn ep(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// A `/proc/self/status` figure in KiB (`"VmRSS:"`, `"VmSize:"`...): the memory tests read
/// this process's own.
pub fn proc_status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{key} line in /proc/self/status"))
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after `secs` seconds.
pub fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Drains a node's events on a helper thread into a shared log.
pub struct Recorder {
    pub log: Arc<Mutex<Vec<Event>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    pub fn new(mut rx: EventReceiver) -> Recorder {
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (log.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                match rx.recv_timeout(Duration::from_millis(20)) {
                    Some(ev) => l.lock().unwrap().push(ev),
                    // Timed out, or the node stopped (then recv returns at once).
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Recorder {
            log,
            stop,
            thread: Some(thread),
        }
    }

    pub fn events(&self) -> Vec<Event> {
        self.log.lock().unwrap().clone()
    }

    /// Payloads of Message events, with their originator and broadcast flag.
    pub fn messages(&self) -> Vec<(PeerId, Vec<u8>, bool)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Message {
                    from,
                    payload,
                    broadcast,
                } => Some((from, payload.to_vec(), broadcast)),
                _ => None,
            })
            .collect()
    }

    pub fn has(&self, pred: impl Fn(&Event) -> bool) -> bool {
        self.log.lock().unwrap().iter().any(pred)
    }

    /// Position of the first event matching `pred`.
    pub fn position(&self, pred: impl Fn(&Event) -> bool) -> Option<usize> {
        self.log.lock().unwrap().iter().position(pred)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A started node with its event recorder.
pub struct Node {
    pub mesh: Mesh,
    pub rec: Recorder,
}

impl Node {
    pub fn start(b: MeshBuilder) -> Node {
        let mesh = b.build().expect("valid config");
        let rec = Recorder::new(mesh.events());
        mesh.start().expect("node starts");
        Node { mesh, rec }
    }

    pub fn id(&self) -> PeerId {
        self.mesh.id()
    }

    pub fn port(&self) -> u16 {
        self.mesh.listen_port()
    }

    pub fn connected_to(&self, other: &Node) -> bool {
        self.mesh.connected_peers().contains(&other.id())
    }

    /// Links currently attached to shards (opened minus closed).
    pub fn open_links(&self) -> u64 {
        let t = self.mesh.stats().total;
        t.links_opened - t.links_closed
    }
}

/// Starts a receiver from `receiver` (its events taken before start, so none is missed) and
/// a sender from `sender` with the receiver as static peer; returns once the sender's side of
/// the link is up: `(sender, receiver, receiver's events)`.
pub fn sender_and_receiver(
    sender: MeshBuilder,
    receiver: MeshBuilder,
) -> (Node, Mesh, EventReceiver) {
    let r = receiver.build().expect("valid config");
    let rx = r.events();
    r.start().expect("node starts");
    let s = Node::start(sender.static_peer(ep(r.listen_port())));
    wait_until(10, "sender connected to receiver", || {
        s.mesh.connected_peers().contains(&r.id())
    });
    (s, r, rx)
}

/// Waits until every pair listed is connected on both sides.
pub fn wait_connected(nodes: &[Node], pairs: &[(usize, usize)]) {
    for &(a, b) in pairs {
        wait_until(
            10,
            &format!("node {a} and node {b} connected both ways"),
            || nodes[a].connected_to(&nodes[b]) && nodes[b].connected_to(&nodes[a]),
        );
    }
}

/// How many Error events of `kind` the node has raised so far.
pub fn errors_of(n: &Node, kind: ErrorKind) -> usize {
    n.rec
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Error { kind: k, .. } if *k == kind))
        .count()
}

/// A plaintext Hello from a random node id in the default group: a raw client's first frame.
pub fn plain_hello() -> Hello {
    Hello {
        node_id: PeerId::random(),
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 1,
        group_name: "default".into(),
        nonce: 7,
        eph_pub_key: None,
        identity: None,
        shoal: None,
    }
}

/// Polls `f` on this thread (no executor) for at most `secs` seconds.
pub fn block_on<F: std::future::Future>(f: F, secs: u64) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "future not ready after {secs}s"
        );
        std::thread::park_timeout(std::time::Duration::from_millis(20));
    }
}
