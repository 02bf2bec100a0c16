//! A deterministic in-memory network of complete mesh nodes, each the node's real control core
//! ([`ControlCore`]: peer table, dial races, membership, scouting, the plaintext and secured
//! handshakes, identity, the held-event ordering) plus a data path ([`datapath`]: the node's
//! real shard core, one shard, driven as `shoal-mesh`'s shard driver drives it, deliveries
//! through a delivery sink included). Time is virtual; every TCP connection is two FIFO byte
//! streams with a per-direction latency; scouting datagrams, dials, accepts and EOFs travel the
//! same way; the control core and its shard talk through the typed commands of
//! `shoal_proto::cmd` with a small local delay, as on two executors. Links can be cut cleanly
//! (EOF) or silently (black hole), frames on links can be lost, nodes can stop, crash and
//! restart. Everything follows from the seed.
//!
//! Length: the network's event loop and its node bookkeeping share the run's state; nodes,
//! the network's links, the data path, a node's life (`lifecycle.rs`), the faults a test
//! puts on links (`faults.rs`) and the tests' set-up helpers (`setup.rs`) live in their own
//! files.

#![allow(dead_code)]

pub mod datapath;
mod faults;
mod lifecycle;
mod net;
mod node;
mod setup;

use net::Ev;
pub use node::{secure_context, Node, Traffic};
use node::{End, Sock};
pub use setup::*;

use bytes::Bytes;
use datapath::{DataPath, Kind, ShardOut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::config::MeshConfig;
use shoal_proto::control::{Action, ControlCore, ControlEvent, ControlInit};
use shoal_proto::PeerId;
use shoal_proto::*;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

pub const PORT: u16 = 7000;
/// Delay between a node's control plane and its shard (each way): they run on two executors.
pub const LOCAL: Duration = Duration::from_micros(50);

pub struct Sim {
    pub start: Instant,
    pub now: Instant,
    pub nodes: Vec<Node>,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    pub latency: Duration,
    /// Per-direction latency overrides.
    pub latency_of: HashMap<(usize, usize), Duration>,
    /// Directed pairs whose frames, dials and announces vanish.
    pub blackholed: HashSet<(usize, usize)>,
    /// Probability that a Data, Membership or identity frame sent on a link is lost.
    loss: f64,
    /// When the last bytes (or the end) sent to each socket arrive: later ones never earlier.
    stream_tail: HashMap<End, Instant>,
    /// While a node stops: its local commands run at once, in order.
    inline: Option<VecDeque<Ev>>,
    /// Shard time each control-plane command takes (zero: the shard takes them all at once).
    /// Non-zero models a busy shard: the driver's pump hands over the next command of the
    /// control core's outbox only when the shard took the previous one, as the live pump
    /// does through its bounded channel, so whatever the outbox holds waits its turn.
    pub shard_cmd_cost: Duration,
    rng: StdRng,
}

impl Sim {
    pub fn new(seed: u64) -> Sim {
        let start = Instant::now();
        Sim {
            start,
            now: start,
            nodes: Vec::new(),
            queue: BTreeMap::new(),
            seq: 0,
            latency: Duration::from_millis(1),
            latency_of: HashMap::new(),
            blackholed: HashSet::new(),
            loss: 0.0,
            stream_tail: HashMap::new(),
            inline: None,
            shard_cmd_cost: Duration::ZERO,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    pub fn wall_ms(&self) -> u64 {
        1_700_000_000_000 + (self.now - self.start).as_millis() as u64
    }

    /// Sets the frame loss of every link (now and after restarts).
    pub fn set_loss(&mut self, p: f64) {
        self.loss = p;
        for n in &mut self.nodes {
            n.shard.loss = p;
        }
    }

    /// Creates a writer or reader of type "T" on node `i` (default QoS for its kind).
    pub fn create_endpoint(
        &mut self,
        i: usize,
        kind: shoal_discovery::types::EndpointKind,
        topic: &str,
        partitions: &[&str],
    ) -> shoal_proto::topics::EndpointGuid {
        let (now, wall) = (self.now, self.wall_ms());
        let parts: Vec<String> = partitions.iter().map(|p| p.to_string()).collect();
        let qos = shoal_discovery::qos::EndpointQos::default_for(kind);
        let g = self.nodes[i]
            .core
            .create_endpoint(kind, topic, "T", [7; 16], qos, &parts, now, wall)
            .expect("a valid endpoint");
        self.drive(i);
        g
    }

    /// Node `i`'s writer `writer` writes samples `first_seq..` (ttl from its config).
    pub fn write_samples(
        &mut self,
        i: usize,
        writer: [u8; 16],
        first_seq: u64,
        payloads: &[&[u8]],
    ) {
        let mut out = Vec::new();
        let (now, ttl) = (self.now, self.nodes[i].cfg.initial_ttl);
        self.nodes[i]
            .shard
            .write_samples(writer, first_seq, payloads, ttl, now, &mut out);
        self.apply_shard(i, out);
    }

    pub fn broadcast(&mut self, i: usize, payload: impl AsRef<[u8]>) {
        self.send(i, PeerId::ZERO, payload)
    }

    pub fn send(&mut self, i: usize, dst: PeerId, payload: impl AsRef<[u8]>) {
        let mut out = Vec::new();
        let now = self.now;
        self.nodes[i]
            .shard
            .originate(dst, Bytes::copy_from_slice(payload.as_ref()), now, &mut out);
        self.apply_shard(i, out);
    }

    /// Writes `bytes` (whole frames) on node `from`'s established link to node `to`, between
    /// the writes of its shard: what a hand-driven peer at `from` would send. Panics without
    /// such a link.
    pub fn inject(&mut self, from: usize, to: usize, bytes: Bytes) {
        let n = &self.nodes[from];
        let (link, r) = n
            .socks
            .iter()
            .find_map(|(l, s)| {
                s.remote
                    .filter(|r| r.node == to && n.shard.owns(*l))
                    .map(|r| (*l, r))
            })
            .expect("an established link between the two nodes");
        self.schedule_stream(from, link, r, bytes, Duration::ZERO);
    }

    fn lat(&self, from: usize, to: usize) -> Duration {
        *self.latency_of.get(&(from, to)).unwrap_or(&self.latency)
    }

    fn schedule(&mut self, from: usize, to: usize, ev: Ev) {
        self.schedule_after(from, to, ev, Duration::ZERO);
    }

    /// Schedules `ev` `extra` later than the latency; what travels on a connection (bytes,
    /// its end) never overtakes what was sent on it before (TCP order).
    fn schedule_after(&mut self, from: usize, to: usize, ev: Ev, extra: Duration) {
        if self.blackholed.contains(&(from, to)) {
            return;
        }
        self.seq += 1;
        let mut at = self.now + self.lat(from, to) + extra;
        if let Ev::Bytes { to: end, .. } | Ev::Eof { to: end } = &ev {
            let tail = self.stream_tail.entry(*end).or_insert(at);
            at = at.max(*tail);
            *tail = at;
        }
        self.queue.insert((at, self.seq), ev);
    }

    /// Bytes a data path wrote on its socket `link` toward `r`, `delay` late (a retransmission).
    fn schedule_stream(&mut self, i: usize, _link: LinkId, r: End, bytes: Bytes, delay: Duration) {
        self.schedule_after(i, r.node, Ev::Bytes { to: r, bytes }, delay);
    }

    /// An event within one node (dial failure, control plane ↔ shard).
    fn schedule_local(&mut self, ev: Ev) {
        if let Some(q) = self.inline.as_mut() {
            q.push_back(ev);
            return;
        }
        self.seq += 1;
        self.queue.insert((self.now + LOCAL, self.seq), ev);
    }

    fn end(&self, i: usize, link: LinkId) -> End {
        End {
            node: i,
            gen: self.nodes[i].gen,
            link,
        }
    }

    fn resolve(&self, target: &DialTarget) -> Option<usize> {
        self.nodes.iter().position(|n| {
            n.alive
                && match target {
                    DialTarget::Addr(a) => a.ip() == IpAddr::V4(n.ip) && a.port() == n.port,
                    DialTarget::Endpoint(e) => *e == format!("{}:{PORT}", n.name),
                }
        })
    }

    /// Carries out what node `i`'s control core asked for.
    fn drive(&mut self, i: usize) {
        while let Some(a) = self.nodes[i].core.poll_action() {
            match a {
                Action::Dial { link, target } => {
                    let now = self.now;
                    self.nodes[i].dial_log.push((now, target.clone()));
                    self.nodes[i].socks.insert(link, Sock::default());
                    let me = self.end(i, link);
                    match self.resolve(&target) {
                        Some(r) if !self.blackholed.contains(&(i, r)) => {
                            self.schedule(i, r, Ev::Accept { to: r, dialer: me })
                        }
                        _ => self.schedule_local(Ev::DialFailed { to: me }),
                    }
                }
                Action::Write { link, bytes } => {
                    self.nodes[i].tx.count(Kind::Other, bytes.len() as u64);
                    if let Some(r) = self.nodes[i].socks.get(&link).and_then(|s| s.remote) {
                        self.schedule(i, r.node, Ev::Bytes { to: r, bytes });
                    }
                }
                Action::Close { link } => self.close_sock(i, link),
                Action::Beacon(datagram) => {
                    let from_ip = self.nodes[i].ip;
                    for j in 0..self.nodes.len() {
                        if j != i {
                            let datagram = datagram.clone();
                            self.schedule(
                                i,
                                j,
                                Ev::Beacon {
                                    to: j,
                                    from_ip,
                                    datagram,
                                },
                            );
                        }
                    }
                }
                Action::Event(e) => self.record(i, e),
                Action::Name { .. } | Action::Warn { .. } | Action::Stopped => {}
            }
        }
        let gen = self.nodes[i].gen;
        if self.shard_cmd_cost.is_zero() || self.inline.is_some() {
            while let Some((_, cmd)) = self.nodes[i].core.poll_to_shard() {
                self.schedule_local(Ev::ToShard { node: i, gen, cmd });
            }
        } else if !self.nodes[i].pumping && self.nodes[i].core.has_shard_posts() {
            self.nodes[i].pumping = true;
            self.seq += 1;
            self.queue
                .insert((self.now, self.seq), Ev::Pump { node: i, gen });
        }
    }

    /// One step of node `i`'s pump (see [`Sim::shard_cmd_cost`]).
    pub(super) fn pump(&mut self, i: usize, gen: u64) {
        let n = &mut self.nodes[i];
        if n.gen != gen || !n.alive {
            return;
        }
        let Some((_, cmd)) = n.core.poll_to_shard() else {
            n.pumping = false;
            return;
        };
        n.max_backlog = n.max_backlog.max(n.core.shard_posts() + 1);
        self.schedule_local(Ev::ToShard { node: i, gen, cmd });
        self.seq += 1;
        let next = self.now + self.shard_cmd_cost;
        self.queue
            .insert((next, self.seq), Ev::Pump { node: i, gen });
    }

    fn record(&mut self, i: usize, e: ControlEvent) {
        let now = self.now;
        let n = &mut self.nodes[i];
        match &e {
            ControlEvent::PeerConnected { peer } => {
                let released = n.connected_released.entry(*peer).or_insert(0);
                *released += 1;
                if *released > n.shard.installs.get(peer).copied().unwrap_or(0) {
                    n.held_violations += 1;
                }
                n.peer_events.push(e);
            }
            ControlEvent::PeerDiscovered { .. }
            | ControlEvent::PeerDisconnected { .. }
            | ControlEvent::PeerLost { .. } => n.peer_events.push(e),
            ControlEvent::MemberJoined { .. } | ControlEvent::MemberLeft { .. } => {
                n.member_events.push(e);
                n.member_event_at.push(now);
            }
            ControlEvent::Error { .. } => n.errors.push(e),
            ControlEvent::Topic(_) => n.topic_events.push(e),
            // The driver's answer to a create command, not an application event.
            ControlEvent::EndpointReady { .. } => {}
        }
    }

    fn close_sock(&mut self, i: usize, link: LinkId) {
        if let Some(s) = self.nodes[i].socks.remove(&link) {
            if let Some(r) = s.remote.filter(|_| !s.wr_closed) {
                self.schedule(i, r.node, Ev::Eof { to: r });
            }
        }
    }

    /// Sends the end of `link`'s stream; the socket still reads.
    fn shutdown_write(&mut self, i: usize, link: LinkId) {
        let Some(s) = self.nodes[i].socks.get_mut(&link) else {
            return;
        };
        if let Some(r) = s.remote.filter(|_| !s.wr_closed) {
            s.wr_closed = true;
            self.schedule(i, r.node, Ev::Eof { to: r });
        }
    }

    /// Carries out what node `i`'s data path asked for.
    fn apply_shard(&mut self, i: usize, out: Vec<ShardOut>) {
        let gen = self.nodes[i].gen;
        for o in out {
            match o {
                ShardOut::Send { link, bytes, delay } => {
                    if let Some(r) = self.nodes[i].socks.get(&link).and_then(|s| s.remote) {
                        self.schedule_stream(i, link, r, bytes, delay);
                    }
                }
                ShardOut::Traffic {
                    tx: true,
                    kind,
                    len,
                } => self.nodes[i].tx.count(kind, len),
                ShardOut::Traffic {
                    tx: false,
                    kind,
                    len,
                } => self.nodes[i].rx.count(kind, len),
                ShardOut::Close { link } => self.close_sock(i, link),
                ShardOut::ShutdownWrite { link } => self.shutdown_write(i, link),
                ShardOut::Report(report) => self.schedule_local(Ev::ToControl {
                    node: i,
                    gen,
                    report,
                }),
                ShardOut::Deliver(d) => {
                    let n = &mut self.nodes[i];
                    n.delivered.push((d.from, d.payload));
                    n.delivered_ids.push(d.msg_id);
                }
                ShardOut::Samples(r) => self.nodes[i].samples.push(r),
                ShardOut::Closed(reason) => self.nodes[i].close_reasons.push(reason),
                ShardOut::Lost => self.nodes[i].lost_frames += 1,
            }
        }
    }

    /// True when `e` reaches a live node's current incarnation.
    fn current(&self, e: &End) -> bool {
        let n = &self.nodes[e.node];
        n.alive && n.gen == e.gen
    }

    fn timeouts(&mut self, i: usize) {
        if !self.nodes[i].alive {
            return;
        }
        let (now, wall) = (self.now, self.wall_ms());
        let n = &mut self.nodes[i];
        n.control_wakes += u64::from(n.armed.0 <= now);
        n.shard_wakes += u64::from(n.armed.1 <= now);
        let mut out = Vec::new();
        self.nodes[i].shard.handle_timeout(now, &mut out);
        self.apply_shard(i, out);
        self.nodes[i].core.handle_timeout(now, wall);
        self.drive(i);
    }

    /// Node `i`'s next deadline; each part's is kept for counting wake-ups (see
    /// [`Node::control_wakes`]).
    fn deadline(&mut self, i: usize) -> Option<Instant> {
        let now = self.now;
        let n = &mut self.nodes[i];
        if !n.alive {
            return None;
        }
        let (c, s) = (n.core.poll_timeout(), n.shard.poll_timeout(now));
        n.armed = (c, s);
        Some(c.min(s))
    }

    /// Advances virtual time to `self.now + d`, processing everything due on the way.
    /// Received bytes are always processed before timers of the same instant.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        // Only a node that handled an event or a timer can have moved its deadline, so the
        // deadlines are cached, refreshed for those, and kept in a heap (entries that no longer
        // match the cache are skipped): an event costs the nodes it touched, not every node.
        let mut timers = Timers {
            due: (0..self.nodes.len()).map(|i| self.deadline(i)).collect(),
            heap: BinaryHeap::new(),
        };
        for i in 0..timers.due.len() {
            if let Some(t) = timers.due[i] {
                timers.heap.push(Reverse((t, i)));
            }
        }
        let mut touched: Vec<usize> = Vec::new();
        let mut fire: Vec<usize> = Vec::new();
        loop {
            let q = self.queue.keys().next().map(|(t, _)| *t);
            let next = match (q, timers.first()) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(end),
            }
            .max(self.now);
            if next > end {
                self.now = end;
                return;
            }
            self.now = next;
            while let Some((&(t, s), _)) = self.queue.iter().next() {
                if t > self.now {
                    break;
                }
                let ev = self.queue.remove(&(t, s)).unwrap();
                touched.push(ev.target());
                self.handle(ev);
            }
            for i in touched.drain(..) {
                let d = self.deadline(i);
                timers.set(i, d);
            }
            // The nodes due now, in node order.
            while let Some(Reverse((t, i))) = timers.heap.peek().copied() {
                if t > self.now {
                    break;
                }
                timers.heap.pop();
                if timers.due[i] == Some(t) {
                    timers.due[i] = None;
                    fire.push(i);
                }
            }
            fire.sort_unstable();
            for i in fire.drain(..) {
                self.timeouts(i);
                let d = self.deadline(i);
                timers.set(i, d);
            }
            // Anything still due now would spin: step at least 1 ms.
            if timers.first().is_some_and(|t| t <= self.now)
                && self.queue.keys().next().is_none_or(|(t, _)| *t > self.now)
            {
                self.now += Duration::from_millis(1);
            }
        }
    }

    pub fn id(&self, i: usize) -> PeerId {
        self.nodes[i].id
    }

    /// The peers node `i` shows the application as connected.
    pub fn connected(&self, i: usize) -> Vec<PeerId> {
        let mut v: Vec<PeerId> = self.nodes[i].core.connected_peers().copied().collect();
        v.sort();
        v
    }

    pub fn members(&self, i: usize) -> Vec<PeerId> {
        let mut v: Vec<PeerId> = self.nodes[i].core.members().copied().collect();
        v.sort();
        v
    }

    /// Number of open sockets of node `i` (dialing, handshaking or on the shard).
    pub fn link_count(&self, i: usize) -> usize {
        self.nodes[i].socks.len()
    }

    pub fn count_delivered(&self, i: usize, payload: &[u8]) -> usize {
        self.nodes[i]
            .delivered
            .iter()
            .filter(|(_, p)| &p[..] == payload)
            .count()
    }
}

/// Every node's next deadline (see [`Sim::run_for`]): the cached value, and a heap of
/// `(deadline, node)` whose entries count only while they match it.
struct Timers {
    due: Vec<Option<Instant>>,
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
}

impl Timers {
    fn set(&mut self, i: usize, d: Option<Instant>) {
        if self.due[i] != d {
            self.due[i] = d;
            if let Some(t) = d {
                self.heap.push(Reverse((t, i)));
            }
        }
    }

    /// The earliest deadline (stale heap entries dropped on the way).
    fn first(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            if self.due[i] == Some(t) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }
}
