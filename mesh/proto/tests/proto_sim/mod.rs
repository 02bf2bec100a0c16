//! A deterministic in-memory network of complete mesh nodes built from the sans-I/O state
//! machines of `shoal_proto`, driven the way the real I/O driver is meant to drive them.
//! Time is virtual, frames travel with a per-direction latency in FIFO order (TCP), links can
//! be cut cleanly (EOF) or silently (black hole), nodes can stop, crash and restart.

#![allow(dead_code)]

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::config::MeshConfig;
use shoal_proto::wire::{Beacon, BeaconFilter, Data, Frame, Hello, PROTOCOL_VERSION};
use shoal_proto::*;
use shoal_proto::{MsgId, PeerId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

pub const PORT: u16 = 7000;

pub struct SimLink {
    pub link: Link,
    /// The other end: (node index, its link id), once connected.
    pub remote: Option<(usize, LinkId)>,
}

pub struct Node {
    pub name: String,
    pub ip: Ipv4Addr,
    pub id: PeerId,
    pub alive: bool,
    pub cfg: MeshConfig,
    pub pm: PeerManager<StdRng>,
    pub links: BTreeMap<LinkId, SimLink>,
    pub table: NeighbourLinks,
    pub router: Router,
    pub ids: MsgIdGen,
    pub membership: MemberGraph,
    pub announce: BeaconSchedule,
    pub rng: StdRng,
    /// (originator, payload) in delivery order.
    pub delivered: Vec<(PeerId, Bytes)>,
    /// Ids of the delivered messages, same order.
    pub delivered_ids: Vec<MsgId>,
    pub peer_events: Vec<PeerEvent>,
    pub member_events: Vec<MemberEvent>,
    pub close_reasons: Vec<CloseReason>,
    /// (when, target) of every dial issued.
    pub dial_log: Vec<(Instant, DialTarget)>,
    /// When each entry of `member_events` happened, same order.
    pub member_event_at: Vec<Instant>,
    /// Frames and bytes this node wrote to its links.
    pub tx: Traffic,
    /// Frames and bytes that arrived at this node's links.
    pub rx: Traffic,
}

/// Wire bytes by kind (plaintext framing: length prefix, type, body).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Data frames.
    pub data_frames: u64,
    pub data_bytes: u64,
    /// Everything else: Hello, Heartbeat, Goodbye, MemberGraph, AuthConfirm, IdentityRecord.
    pub ctl_frames: u64,
    pub ctl_bytes: u64,
    /// The MemberGraph part of `ctl_*`.
    pub membership_frames: u64,
    pub membership_bytes: u64,
}

impl Traffic {
    fn count(&mut self, f: &Frame) {
        let len = f.encoded_len() as u64;
        match f {
            Frame::Data(_) => {
                self.data_frames += 1;
                self.data_bytes += len;
            }
            _ => {
                self.ctl_frames += 1;
                self.ctl_bytes += len;
                if matches!(f, Frame::Membership(_)) {
                    self.membership_frames += 1;
                    self.membership_bytes += len;
                }
            }
        }
    }
}

enum Ev {
    Beacon {
        to: usize,
        from_ip: Ipv4Addr,
        datagram: Vec<u8>,
    },
    Accept {
        to: usize,
        dialer: (usize, LinkId),
    },
    Connected {
        to: usize,
        link: LinkId,
        remote: (usize, LinkId),
    },
    DialFailed {
        to: usize,
        link: LinkId,
    },
    Frame {
        to: usize,
        link: LinkId,
        frame: Frame,
    },
    Eof {
        to: usize,
        link: LinkId,
    },
}

impl Ev {
    /// The node whose state handling this event changes.
    fn target(&self) -> usize {
        match self {
            Ev::Beacon { to, .. }
            | Ev::Accept { to, .. }
            | Ev::Connected { to, .. }
            | Ev::DialFailed { to, .. }
            | Ev::Frame { to, .. }
            | Ev::Eof { to, .. } => *to,
        }
    }
}

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
            rng: StdRng::seed_from_u64(seed),
        }
    }

    pub fn wall_ms(&self) -> u64 {
        1_700_000_000_000 + (self.now - self.start).as_millis() as u64
    }

    /// Adds a node; call [`Sim::start_node`] to boot it.
    pub fn add_node(&mut self, cfg: MeshConfig) -> usize {
        let i = self.nodes.len();
        // 10.0.0.1, 10.0.0.2, ... carrying into the higher octets past 255 nodes.
        let k = i as u32 + 1;
        let ip = Ipv4Addr::new(10, (k >> 16) as u8, (k >> 8) as u8, k as u8);
        let node = self.make_node(format!("node{i}"), ip, cfg, None);
        self.nodes.push(node);
        i
    }

    fn make_node(
        &mut self,
        name: String,
        ip: Ipv4Addr,
        cfg: MeshConfig,
        keep: Option<PeerId>,
    ) -> Node {
        let id = keep.unwrap_or_else(|| loop {
            let id = PeerId(self.rng.gen());
            if !id.is_zero() {
                break id;
            }
        });
        let now = self.now;
        let wall = self.wall_ms();
        Node {
            name,
            ip,
            id,
            alive: false,
            pm: PeerManager::new(id, &cfg, StdRng::seed_from_u64(self.rng.gen()), now),
            links: BTreeMap::new(),
            table: NeighbourLinks::new(),
            router: Router::new(
                id,
                cfg.initial_ttl,
                cfg.max_dedup_entries,
                cfg.dedup_ttl,
                now,
            ),
            ids: MsgIdGen::new(id, self.rng.gen()),
            membership: MemberGraph::new(
                id,
                cfg.membership_interval,
                cfg.membership_timeout,
                cfg.max_membership_records,
                wall,
                now,
            ),
            announce: BeaconSchedule::new(cfg.announce_interval, now),
            rng: StdRng::seed_from_u64(self.rng.gen()),
            cfg,
            delivered: Vec::new(),
            delivered_ids: Vec::new(),
            peer_events: Vec::new(),
            member_events: Vec::new(),
            close_reasons: Vec::new(),
            dial_log: Vec::new(),
            member_event_at: Vec::new(),
            tx: Traffic::default(),
            rx: Traffic::default(),
        }
    }

    pub fn start_node(&mut self, i: usize) {
        self.nodes[i].alive = true;
        let now = self.now;
        self.nodes[i].pm.start(now);
        self.pump(i);
    }

    /// Boots every node at the same instant (all listening before anyone dials).
    pub fn start_all(&mut self) {
        for n in &mut self.nodes {
            n.alive = true;
        }
        for i in 0..self.nodes.len() {
            self.start_node(i);
        }
    }

    /// Graceful stop: Goodbye on every link, no more announces.
    pub fn stop_node(&mut self, i: usize) {
        self.nodes[i].pm.shutdown();
        self.pump(i);
        self.nodes[i].alive = false;
    }

    /// The process dies and comes back with a new id at the same name and address; its old
    /// sockets are closed by the kernel (the peers see EOF).
    pub fn restart_node(&mut self, i: usize) {
        self.reboot(i, false);
    }

    /// A stopped (or running) node comes back with fresh state but the same id.
    pub fn revive_node(&mut self, i: usize) {
        self.reboot(i, true);
    }

    fn reboot(&mut self, i: usize, keep_id: bool) {
        let links: Vec<(LinkId, Option<(usize, LinkId)>)> = self.nodes[i]
            .links
            .iter()
            .map(|(l, s)| (*l, s.remote))
            .collect();
        for (_, remote) in links {
            if let Some((r, rl)) = remote {
                self.schedule(i, r, Ev::Eof { to: r, link: rl });
            }
        }
        let (name, ip, cfg) = {
            let n = &self.nodes[i];
            (n.name.clone(), n.ip, n.cfg.clone())
        };
        let keep = keep_id.then_some(self.nodes[i].id);
        self.nodes[i] = self.make_node(name, ip, cfg, keep);
        self.start_node(i);
    }

    /// The process dies for good: the kernel closes its sockets (every peer sees EOF after
    /// what was already sent), it never comes back.
    pub fn crash_node(&mut self, i: usize) {
        let links = std::mem::take(&mut self.nodes[i].links);
        for (_, sl) in links {
            if let Some((r, rl)) = sl.remote {
                self.schedule(i, r, Ev::Eof { to: r, link: rl });
            }
        }
        self.nodes[i].alive = false;
    }

    /// Closes the TCP connection between `a` and `b` (both see EOF).
    pub fn cut(&mut self, a: usize, b: usize) {
        let pairs: Vec<(LinkId, LinkId)> = self.nodes[a]
            .links
            .iter()
            .filter_map(|(l, s)| s.remote.filter(|(r, _)| *r == b).map(|(_, rl)| (*l, rl)))
            .collect();
        for (la, lb) in pairs {
            self.schedule(b, a, Ev::Eof { to: a, link: la });
            self.schedule(a, b, Ev::Eof { to: b, link: lb });
        }
    }

    /// Makes everything between `a` and `b` vanish, in both directions (no EOF).
    pub fn partition(&mut self, a: usize, b: usize) {
        self.blackholed.insert((a, b));
        self.blackholed.insert((b, a));
    }

    pub fn heal(&mut self, a: usize, b: usize) {
        self.blackholed.remove(&(a, b));
        self.blackholed.remove(&(b, a));
    }

    pub fn broadcast(&mut self, i: usize, payload: &'static [u8]) -> MsgId {
        self.send(i, PeerId::ZERO, payload)
    }

    pub fn send(&mut self, i: usize, dst: PeerId, payload: &'static [u8]) -> MsgId {
        let n = &mut self.nodes[i];
        let id = n.ids.next_id();
        let route = n.router.originate(&n.table, dst);
        let data = Data {
            src: n.id,
            dst,
            msg_id: id,
            ttl: n.router.initial_ttl(),
            payload: Bytes::from_static(payload),
        };
        self.execute_route(i, route, data, None);
        self.pump(i);
        id
    }

    fn lat(&self, from: usize, to: usize) -> Duration {
        *self.latency_of.get(&(from, to)).unwrap_or(&self.latency)
    }

    fn schedule(&mut self, from: usize, to: usize, ev: Ev) {
        if let Ev::Frame { frame, .. } = &ev {
            self.nodes[from].tx.count(frame);
        }
        let blocked = self.blackholed.contains(&(from, to));
        if blocked {
            return;
        }
        self.seq += 1;
        let at = self.now + self.lat(from, to);
        self.queue.insert((at, self.seq), ev);
    }

    fn schedule_local(&mut self, _to: usize, ev: Ev) {
        self.seq += 1;
        let at = self.now + self.latency;
        self.queue.insert((at, self.seq), ev);
    }

    fn local_hello(&mut self, i: usize) -> Hello {
        let nonce = self.rng.gen();
        let n = &self.nodes[i];
        Hello {
            node_id: n.id,
            protocol_version: PROTOCOL_VERSION,
            tcp_listen_port: PORT,
            group_name: n.cfg.group_name.clone(),
            nonce,
            eph_pub_key: n.cfg.secured().then_some([9; 32]),
            identity: None,
            shoal: Some(shoal_proto::wire::ShoalExtension::current()),
        }
    }

    fn resolve(&self, target: &DialTarget) -> Option<usize> {
        self.nodes.iter().position(|n| {
            n.alive
                && match target {
                    DialTarget::Addr(a) => a.ip() == IpAddr::V4(n.ip) && a.port() == PORT,
                    DialTarget::Endpoint(e) => *e == format!("{}:{PORT}", n.name),
                }
        })
    }

    fn send_frame(&mut self, i: usize, link: LinkId, frame: Frame) {
        let Some(sl) = self.nodes[i].links.get_mut(&link) else {
            return;
        };
        let now = self.now;
        sl.link.on_sent(now);
        if let Some((r, rl)) = sl.remote {
            self.schedule(
                i,
                r,
                Ev::Frame {
                    to: r,
                    link: rl,
                    frame,
                },
            );
        }
    }

    fn deliver(&mut self, i: usize, data: &Data) {
        let n = &mut self.nodes[i];
        n.delivered.push((data.src, data.payload.clone()));
        n.delivered_ids.push(data.msg_id);
    }

    fn execute_route(
        &mut self,
        i: usize,
        route: DataVerdict,
        mut data: Data,
        from: Option<LinkId>,
    ) {
        let targets: Vec<LinkId> = match route {
            DataVerdict::Deliver => {
                self.deliver(i, &data);
                return;
            }
            DataVerdict::DeliverAndForward { except, ttl } => {
                self.deliver(i, &data);
                data.ttl = ttl;
                self.nodes[i]
                    .table
                    .links()
                    .iter()
                    .copied()
                    .filter(|l| *l != except)
                    .collect()
            }
            DataVerdict::Forward { except, ttl } => {
                data.ttl = ttl;
                self.nodes[i]
                    .table
                    .links()
                    .iter()
                    .copied()
                    .filter(|l| Some(*l) != except)
                    .collect()
            }
            DataVerdict::Unicast { link, ttl } => {
                data.ttl = ttl;
                vec![link]
            }
            DataVerdict::Drop(_) => return,
        };
        let _ = from;
        for l in targets {
            self.send_frame(i, l, Frame::Data(data.clone()));
        }
    }

    /// Runs every state machine of node `i` until it has nothing more to say.
    pub fn pump(&mut self, i: usize) {
        let now = self.now;
        loop {
            let mut progress = false;
            // Links: control frames and events.
            let ids: Vec<LinkId> = self.nodes[i].links.keys().copied().collect();
            for l in ids {
                while let Some(f) = self.nodes[i]
                    .links
                    .get_mut(&l)
                    .and_then(|s| s.link.poll_transmit())
                {
                    progress = true;
                    let remote = self.nodes[i].links[&l].remote;
                    if let Some((r, rl)) = remote {
                        self.schedule(
                            i,
                            r,
                            Ev::Frame {
                                to: r,
                                link: rl,
                                frame: f,
                            },
                        );
                    }
                }
                while let Some(ev) = self.nodes[i]
                    .links
                    .get_mut(&l)
                    .and_then(|s| s.link.poll_event())
                {
                    progress = true;
                    match ev {
                        LinkEvent::Established {
                            peer, listen_port, ..
                        } => {
                            let ip = self.nodes[i].links[&l]
                                .remote
                                .map(|(r, _)| IpAddr::V4(self.nodes[r].ip));
                            self.nodes[i].pm.on_handshake(l, peer, ip, listen_port, now);
                        }
                        LinkEvent::AuthRequired { .. } => {
                            // The simulated crypto layer accepts every peer of the same mode.
                            self.nodes[i]
                                .links
                                .get_mut(&l)
                                .unwrap()
                                .link
                                .auth_confirmed(now);
                        }
                        LinkEvent::Closed(reason) => {
                            self.nodes[i].close_reasons.push(reason);
                            // Flush what the link still wants to say (Goodbye), then close.
                            let mut sl = self.nodes[i].links.remove(&l).unwrap();
                            while let Some(f) = sl.link.poll_transmit() {
                                if let Some((r, rl)) = sl.remote {
                                    self.schedule(
                                        i,
                                        r,
                                        Ev::Frame {
                                            to: r,
                                            link: rl,
                                            frame: f,
                                        },
                                    );
                                }
                            }
                            if let Some((r, rl)) = sl.remote {
                                self.schedule(i, r, Ev::Eof { to: r, link: rl });
                            }
                            self.nodes[i].pm.on_closed(l, now);
                            break;
                        }
                    }
                }
            }
            // Peer table.
            while let Some(a) = self.nodes[i].pm.poll_action() {
                progress = true;
                match a {
                    PeerAction::Dial { link, target } => {
                        self.nodes[i].dial_log.push((now, target.clone()));
                        let hello = self.local_hello(i);
                        let timers = LinkTimers::from_config(&self.nodes[i].cfg);
                        self.nodes[i].links.insert(
                            link,
                            SimLink {
                                link: Link::dialer(link, hello, timers, now),
                                remote: None,
                            },
                        );
                        match self.resolve(&target) {
                            Some(r) if r != usize::MAX => {
                                self.schedule(
                                    i,
                                    r,
                                    Ev::Accept {
                                        to: r,
                                        dialer: (i, link),
                                    },
                                );
                                if self.blackholed.contains(&(i, r)) {
                                    self.schedule_local(i, Ev::DialFailed { to: i, link });
                                }
                            }
                            _ => self.schedule_local(i, Ev::DialFailed { to: i, link }),
                        }
                    }
                    PeerAction::Install { peer, link } => self.nodes[i].table.insert(peer, link),
                    PeerAction::Uninstall { peer, link } => {
                        self.nodes[i].table.remove(&peer, link);
                    }
                    PeerAction::Close { link, goodbye } => {
                        if let Some(sl) = self.nodes[i].links.get_mut(&link) {
                            sl.link.close(goodbye, now);
                        }
                    }
                }
            }
            let wall = self.wall_ms();
            while let Some(e) = self.nodes[i].pm.poll_event() {
                progress = true;
                match &e {
                    PeerEvent::Connected { peer, link } => self.nodes[i]
                        .membership
                        .neighbour_up(*peer, *link, wall, now),
                    PeerEvent::Disconnected { peer } => {
                        self.nodes[i].membership.neighbour_down(peer, wall, now)
                    }
                    _ => {}
                }
                self.nodes[i].peer_events.push(e);
            }
            while let Some(t) = self.nodes[i].membership.poll_transmit() {
                progress = true;
                let links: Vec<LinkId> = match t.dest {
                    Dest::All => self.nodes[i].table.links().to_vec(),
                    Dest::AllExcept(x) => self.nodes[i]
                        .table
                        .links()
                        .iter()
                        .copied()
                        .filter(|l| *l != x)
                        .collect(),
                    Dest::Link(l) => vec![l],
                };
                for l in links {
                    self.send_frame(i, l, Frame::Membership(t.record.clone()));
                }
            }
            while let Some(e) = self.nodes[i].membership.poll_event() {
                progress = true;
                self.nodes[i].member_events.push(e);
                self.nodes[i].member_event_at.push(now);
            }
            if !progress {
                break;
            }
        }
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Beacon {
                to,
                from_ip,
                datagram,
            } => {
                let n = &self.nodes[to];
                if !n.alive || !n.cfg.scouting {
                    return;
                }
                let filter = BeaconFilter {
                    secured: n.cfg.secured(),
                    protocol_version: PROTOCOL_VERSION,
                    group_name: &n.cfg.group_name,
                    own_id: n.id,
                };
                let src = SocketAddr::new(IpAddr::V4(from_ip), 45454);
                if let Ok(a) = accept_beacon(&datagram, src, &filter, |_, _| true) {
                    self.nodes[to].pm.on_announce(a.peer, a.dial_addr, now);
                }
                self.pump(to);
            }
            Ev::Accept { to, dialer } => {
                if !self.nodes[to].alive {
                    self.schedule_local(
                        dialer.0,
                        Ev::DialFailed {
                            to: dialer.0,
                            link: dialer.1,
                        },
                    );
                    return;
                }
                let from = Some(IpAddr::V4(self.nodes[dialer.0].ip));
                let Some(l) = self.nodes[to].pm.on_accepted(from, now) else {
                    self.schedule(
                        to,
                        dialer.0,
                        Ev::Eof {
                            to: dialer.0,
                            link: dialer.1,
                        },
                    );
                    return;
                };
                let hello = self.local_hello(to);
                let timers = LinkTimers::from_config(&self.nodes[to].cfg);
                // The dialer learns its connect completed before any byte arrives.
                self.schedule(
                    to,
                    dialer.0,
                    Ev::Connected {
                        to: dialer.0,
                        link: dialer.1,
                        remote: (to, l),
                    },
                );
                self.nodes[to].links.insert(
                    l,
                    SimLink {
                        link: Link::acceptor(l, hello, timers, now),
                        remote: Some(dialer),
                    },
                );
                self.pump(to);
            }
            Ev::Connected { to, link, remote } => {
                if let Some(sl) = self.nodes[to].links.get_mut(&link) {
                    sl.remote = Some(remote);
                    sl.link.on_connected(now);
                } else {
                    self.schedule(
                        to,
                        remote.0,
                        Ev::Eof {
                            to: remote.0,
                            link: remote.1,
                        },
                    );
                }
                self.pump(to);
            }
            Ev::DialFailed { to, link } => {
                if self.nodes[to].links.remove(&link).is_some() {
                    self.nodes[to].pm.on_closed(link, now);
                    self.pump(to);
                }
            }
            Ev::Frame { to, link, frame } => {
                self.nodes[to].rx.count(&frame);
                let Some(sl) = self.nodes[to].links.get_mut(&link) else {
                    return;
                };
                let action = sl.link.on_frame(&frame, now);
                if action == FrameAction::Process {
                    let n = &mut self.nodes[to];
                    match frame {
                        Frame::Data(d) => {
                            let meta = DataMeta {
                                src: d.src,
                                dst: d.dst,
                                msg_id: d.msg_id,
                                ttl: d.ttl,
                            };
                            let route = n.router.on_data(&n.table, link, &meta, now);
                            self.execute_route(to, route, d, Some(link));
                        }
                        Frame::Membership(m) => {
                            let wall = self.wall_ms();
                            self.nodes[to].membership.on_record(link, &m, wall, now);
                        }
                        _ => {}
                    }
                }
                self.pump(to);
            }
            Ev::Eof { to, link } => {
                if let Some(mut sl) = self.nodes[to].links.remove(&link) {
                    sl.link.close(false, now);
                    self.nodes[to]
                        .close_reasons
                        .push(CloseReason::ProtocolViolation("eof"));
                    self.nodes[to].pm.on_closed(link, now);
                    self.pump(to);
                }
            }
        }
    }

    fn timeouts(&mut self, i: usize) {
        let now = self.now;
        let wall = self.wall_ms();
        if !self.nodes[i].alive {
            return;
        }
        let ids: Vec<LinkId> = self.nodes[i].links.keys().copied().collect();
        for l in ids {
            self.nodes[i]
                .links
                .get_mut(&l)
                .unwrap()
                .link
                .handle_timeout(now);
        }
        let n = &mut self.nodes[i];
        n.pm.handle_timeout(now);
        n.membership.handle_timeout(wall, now);
        n.router.handle_timeout(now);
        if n.cfg.scouting && n.announce.handle_timeout(now, &mut n.rng) {
            let mut d = Vec::new();
            Beacon::new(n.id, PORT, &n.cfg.group_name, n.cfg.secured())
                .encode_body(&mut d)
                .unwrap();
            if n.cfg.secured() {
                d.extend_from_slice(&[0; 16]);
            }
            let ip = n.ip;
            for j in 0..self.nodes.len() {
                if j != i {
                    self.schedule(
                        i,
                        j,
                        Ev::Beacon {
                            to: j,
                            from_ip: ip,
                            datagram: d.clone(),
                        },
                    );
                }
            }
        }
        self.pump(i);
    }

    fn deadline(&self, i: usize) -> Option<Instant> {
        let n = &self.nodes[i];
        if !n.alive {
            return None;
        }
        let mut t = n.membership.poll_timeout().min(n.router.poll_timeout());
        if n.cfg.scouting {
            t = t.min(n.announce.poll_timeout());
        }
        if let Some(p) = n.pm.poll_timeout() {
            t = t.min(p);
        }
        for sl in n.links.values() {
            if let Some(l) = sl.link.poll_timeout() {
                t = t.min(l);
            }
        }
        Some(t)
    }

    /// Advances virtual time to `self.now + d`, processing everything due on the way.
    /// Received frames are always processed before timers of the same instant.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        // Only a node that handled an event or a timer can have moved its deadline, so the
        // deadlines are cached and refreshed for those (hundreds of nodes stay cheap).
        let mut deadlines: Vec<Option<Instant>> =
            (0..self.nodes.len()).map(|i| self.deadline(i)).collect();
        let mut touched: Vec<usize> = Vec::new();
        loop {
            let q = self.queue.keys().next().map(|(t, _)| *t);
            let timers = deadlines.iter().flatten().min().copied();
            let next = match (q, timers) {
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
                deadlines[i] = self.deadline(i);
            }
            for (i, due) in deadlines.iter_mut().enumerate() {
                if due.is_some_and(|t| t <= self.now) {
                    self.timeouts(i);
                    *due = self.deadline(i);
                }
            }
            // Anything still due now would spin: step at least 1 ms.
            let still = deadlines.iter().flatten().min();
            if still.is_some_and(|t| *t <= self.now)
                && self.queue.keys().next().is_none_or(|(t, _)| *t > self.now)
            {
                self.now += Duration::from_millis(1);
            }
        }
    }

    pub fn id(&self, i: usize) -> PeerId {
        self.nodes[i].id
    }

    pub fn connected(&self, i: usize) -> Vec<PeerId> {
        let mut v: Vec<PeerId> = self.nodes[i].pm.connected_peers().copied().collect();
        v.sort();
        v
    }

    pub fn members(&self, i: usize) -> Vec<PeerId> {
        let mut v: Vec<PeerId> = self.nodes[i].membership.members().copied().collect();
        v.sort();
        v
    }

    /// Number of live links of node `i` (any state).
    pub fn link_count(&self, i: usize) -> usize {
        self.nodes[i].links.len()
    }

    pub fn count_delivered(&self, i: usize, payload: &[u8]) -> usize {
        self.nodes[i]
            .delivered
            .iter()
            .filter(|(_, p)| &p[..] == payload)
            .count()
    }
}

/// A config for simulations: discovery off unless asked, static peers wire the topology.
pub fn cfg() -> MeshConfig {
    MeshConfig {
        scouting: false,
        ..MeshConfig::default()
    }
}

/// Builds a mesh whose links are exactly `edges` (node j dials node i statically for each
/// edge (i, j)), starts it and runs until the handshakes settled.
pub fn topology(seed: u64, n: usize, edges: &[(usize, usize)]) -> Sim {
    let mut sim = Sim::new(seed);
    for j in 0..n {
        let mut c = cfg();
        c.static_peers = edges
            .iter()
            .filter(|(_, b)| *b == j)
            .map(|(a, _)| format!("node{a}:{PORT}"))
            .collect();
        sim.add_node(c);
    }
    sim.start_all();
    sim.run_for(Duration::from_millis(100));
    sim
}
