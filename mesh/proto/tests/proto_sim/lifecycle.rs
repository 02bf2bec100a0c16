//! A simulated node's life: added (its address, its config), started, stopped politely,
//! restarted under a new id or revived under its own, crashed.
//!
//! **Owns:** those transitions of [`Sim`]. **Must not touch:** the network's events (`mod.rs`)
//! or what a fault does to a link (`faults.rs`).

use super::*;

impl Sim {
    /// Adds a node; call [`Sim::start_node`] to boot it.
    pub fn add_node(&mut self, cfg: MeshConfig) -> usize {
        let i = self.nodes.len();
        // 10.0.0.1, 10.0.0.2, ... carrying into the higher octets past 255 nodes.
        let k = i as u32 + 1;
        let ip = Ipv4Addr::new(10, (k >> 16) as u8, (k >> 8) as u8, k as u8);
        let node = self.make_node(format!("node{i}"), (ip, PORT), cfg, None, 0);
        self.nodes.push(node);
        i
    }

    /// Adds a node on the host `ip`, listening on its own port (`PORT` + its index): several
    /// processes of one host, whose announces all come from that one address.
    pub fn add_node_on_host(&mut self, cfg: MeshConfig, ip: Ipv4Addr) -> usize {
        let i = self.nodes.len();
        let port = PORT + i as u16;
        let node = self.make_node(format!("node{i}"), (ip, port), cfg, None, 0);
        self.nodes.push(node);
        i
    }

    fn make_node(
        &mut self,
        name: String,
        (ip, port): (Ipv4Addr, u16),
        cfg: MeshConfig,
        keep: Option<PeerId>,
        gen: u64,
    ) -> Node {
        let secure = secure_context(&cfg);
        let from_key = secure
            .as_ref()
            .and_then(|c| c.identity().map(|i| i.node_id()));
        let id = from_key.or(keep).unwrap_or_else(|| loop {
            let id = PeerId(self.rng.gen());
            if !id.is_zero() {
                break id;
            }
        });
        let now = self.now;
        let wall = self.wall_ms();
        let mut seed = [0u8; 32];
        self.rng.fill(&mut seed);
        let core = ControlCore::new(
            ControlInit {
                me: id,
                cfg: cfg.clone(),
                shards: 1,
                listen_port: port,
                secure,
                seed,
                epoch: self.start,
                listen_addrs: vec![std::net::SocketAddr::new(ip.into(), port)],
            },
            now,
            wall,
        );
        let mut shard = DataPath::new(id, &cfg, self.rng.gen(), now);
        shard.loss = self.loss;
        Node {
            name,
            ip,
            port,
            id,
            alive: false,
            gen,
            core,
            shard,
            socks: BTreeMap::new(),
            cfg,
            delivered: Vec::new(),
            delivered_ids: Vec::new(),
            samples: Vec::new(),
            peer_events: Vec::new(),
            member_events: Vec::new(),
            member_event_at: Vec::new(),
            errors: Vec::new(),
            topic_events: Vec::new(),
            close_reasons: Vec::new(),
            dial_log: Vec::new(),
            tx: Traffic::default(),
            rx: Traffic::default(),
            connected_released: HashMap::new(),
            held_violations: 0,
            lost_frames: 0,
            pumping: false,
            max_backlog: 0,
            control_wakes: 0,
            shard_wakes: 0,
            armed: (now, now),
        }
    }

    pub fn start_node(&mut self, i: usize) {
        self.nodes[i].alive = true;
        let (now, wall) = (self.now, self.wall_ms());
        self.nodes[i].core.start(now, wall);
        self.drive(i);
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

    /// Graceful stop: Goodbye on every link, no more announces. The node's control plane and
    /// shard finish their exchange at once (the node then leaves the network).
    pub fn stop_node(&mut self, i: usize) {
        let (now, wall) = (self.now, self.wall_ms());
        self.inline = Some(VecDeque::new());
        self.nodes[i].core.stop(now, wall);
        self.drive(i);
        while let Some(ev) = self.inline.as_mut().and_then(|q| q.pop_front()) {
            self.handle(ev);
        }
        self.inline = None;
        self.nodes[i].alive = false;
    }

    /// The process dies and comes back with a new id (an identity node keeps its key's id) at
    /// the same name and address; its old sockets are closed by the kernel (peers see EOF).
    pub fn restart_node(&mut self, i: usize) {
        self.reboot(i, false);
    }

    /// A stopped (or running) node comes back with fresh state but the same id.
    pub fn revive_node(&mut self, i: usize) {
        self.reboot(i, true);
    }

    fn reboot(&mut self, i: usize, keep_id: bool) {
        self.kill(i);
        let (name, addr, cfg, gen) = {
            let n = &self.nodes[i];
            (n.name.clone(), (n.ip, n.port), n.cfg.clone(), n.gen + 1)
        };
        let keep = keep_id.then_some(self.nodes[i].id);
        self.nodes[i] = self.make_node(name, addr, cfg, keep, gen);
        self.start_node(i);
    }

    /// The process dies for good: the kernel closes its sockets (every peer sees EOF after
    /// what was already sent), it never comes back.
    pub fn crash_node(&mut self, i: usize) {
        self.kill(i);
    }

    fn kill(&mut self, i: usize) {
        let socks = std::mem::take(&mut self.nodes[i].socks);
        for (_, s) in socks {
            if let Some(r) = s.remote {
                self.schedule(i, r.node, Ev::Eof { to: r });
            }
        }
        self.nodes[i].alive = false;
    }
}
