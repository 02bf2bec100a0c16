//! Fuzzes the topic control plane: one node (its real control core and one shard core,
//! wired as the driver wires them) with four plaintext links to peers played by the input,
//! which sends any sequence of frames, advances time and takes links down and up. After
//! every step an invariant checker looks at the node (see `check`): every discovery table
//! within its (small) capacity, the per-origin state of the topics core bounded, the
//! membership records bounded, the shard's parked and reliable state bounded, and the
//! node's own endpoints (created at start) still there and still matched to each other.
//!
//! Input: a sequence of operations (at most 48), each an opcode byte, a slot byte and the
//! operation's arguments (a missing argument reads as zero); `mesh/fuzz/seed_control_plane.py`
//! writes the seeds in the same format. The slot byte names a peer (`% 4`); its top bit puts
//! the operation on that peer's second connection, which op 7 opens while the first is up
//! (a dial race: one of the two is retired; or, past the race window, a late claim refused).
//!
//! | op % 9 | arguments | what |
//! |---|---|---|
//! | 0 | slot, len u16, bytes | raw bytes read on the slot's link |
//! | 1 | slot, Discovery fields | a well-formed Discovery frame built from the input |
//! | 2 | slot, kind, writer, reader, numbers | Heartbeat / AckNack / Repair / Gap |
//! | 3 | slot, origin, version, neighbours, signed | Membership or SignedMembership |
//! | 4 | slot, writer, first seq, count | a Samples run |
//! | 5 | u16 | time advances (every timer due on the way fires): `& 0x3ff` ms, or with bit 15 `(& 0x3f) + 1` s; bit 14 silences the peers (their links time out) |
//! | 6 | slot | the peer closes the link |
//! | 7 | slot | the peer connects (a new handshake; also while linked, on the second connection) |
//! | 8 | slot | the link is lost (read error) |
//!
//! Length: one file: the node's wiring, the checker and the input grammar. The `control_plane`
//! target runs it under libFuzzer; `mesh/proto/tests/fuzz_seeds.rs` replays the seeds on stable. `CONTROL_PLANE_TRACE=1` prints a line per operation.

use bytes::{Bytes, BytesMut};
use shoal_discovery::graph::Table;
use shoal_discovery::qos::{DurabilityKind, EndpointQos, History, QosDuration, ReliabilityKind};
use shoal_discovery::record::{encode_endpoint, encode_participant};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, ParticipantInfo, Partitions, TopicName,
    TypeHash, TypeName,
};
use shoal_proto::config::MeshConfig;
use shoal_proto::control::{ControlCore, ControlInit};
use shoal_proto::shard::{Delivered, DeliverySink, ShardAction, ShardConfig, ShardCore, WriteStep};
use shoal_proto::stats::Counters;
use shoal_proto::topics::{EndpointGuid, TopicsConfig};
use shoal_proto::wire::{
    AckNack, Discovery, DiscoveryEntry, Features, Frame, Gap, Heartbeat, Hello, Membership,
    RecordSignature, Repair, Samples, SeqSet, ShoalExtension, SignedMembership, PROTOCOL_VERSION,
    SHOAL_EXT_VERSION,
};
use shoal_proto::{LinkId, PeerId};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WALL: u64 = 1_700_000_000_000;
const ME: PeerId = PeerId([0x11; 16]);
/// Operations taken from one input at most (a long input is not a slow one).
const MAX_OPS: usize = 48;
/// Timers fired within one time advance at most (the rest fire together at its end).
const MAX_TIMER_STEPS: usize = 32;
/// Rounds of control ↔ shard hand-offs one input call may take before it is called a
/// livelock.
const MAX_PUMP_ROUNDS: usize = 10_000;

/// The small tables the checker holds the node to.
const MAX_LOCAL: usize = 8;
const MAX_PARTICIPANTS: usize = 4;
const MAX_WRITERS: usize = 6;
const MAX_READERS: usize = 6;
const MAX_MATCHES: usize = 24;
const MAX_DEDUP: usize = 6;
const MAX_REPORTED: usize = 8;
const MAX_RECORDS: usize = 6;
const MAX_NEIGHBOURS: usize = 5;
const MAX_PARKED: usize = 2048;

fn id(b: u8) -> PeerId {
    PeerId([b; 16])
}

/// An id sharing `p`'s 12-byte GUID prefix.
fn twin(p: PeerId, tail: u8) -> PeerId {
    let mut q = p;
    q.0[12..].copy_from_slice(&[0xa0, 0, 0, tail]);
    q
}

/// The peers of the four link slots: two Shoal peers, one whose id shares this node's GUID
/// prefix, one multimaster peer (no extension: it may send Discovery frames only as junk).
fn slot_peer(slot: usize) -> (PeerId, bool) {
    match slot {
        0 => (id(0x20), true),
        1 => (id(0x30), true),
        2 => (twin(ME, 1), true),
        _ => (id(0x40), false),
    }
}

fn cfg() -> MeshConfig {
    let topics = TopicsConfig {
        max_local_endpoints: MAX_LOCAL,
        max_remote_participants: MAX_PARTICIPANTS,
        max_remote_writers: MAX_WRITERS,
        max_remote_readers: MAX_READERS,
        max_matches: MAX_MATCHES,
        max_dedup_origins: MAX_DEDUP,
        max_reported_incompatible: MAX_REPORTED,
        max_parked_sample_bytes: MAX_PARKED,
        max_history_samples: 16,
        max_history_bytes: 4096,
        max_reader_buffer_samples: 16,
        max_reader_buffer_bytes: 4096,
        max_endpoints_per_participant: 4,
        max_bytes_per_participant: 8192,
        max_remote_endpoint_bytes: 16384,
        max_partition_bytes: 256,
        ..TopicsConfig::default()
    };
    MeshConfig {
        scouting: false,
        max_membership_records: MAX_RECORDS,
        max_membership_neighbours: MAX_NEIGHBOURS,
        max_message_bytes: 64 * 1024,
        topics,
        ..MeshConfig::default()
    }
}

/// The input, read front to back; past its end every number is zero.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        (u64::from(self.u32()) << 32) | u64::from(self.u32())
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn arr<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0; N];
        for b in &mut a {
            *b = self.u8();
        }
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The shard's delivery sink: it takes every delivery and drops it (the checker watches the
/// control plane, not what reaches the application).
struct Discard;

impl DeliverySink for Discard {
    fn try_deliver(&mut self, _: Delivered) -> Result<(), Delivered> {
        Ok(())
    }
}

/// A link slot.
#[derive(Default)]
struct Slot {
    /// The link while it is up (on the shard).
    link: Option<LinkId>,
    /// A second connection of the same peer while it is up (a dial race, or a late claim the
    /// node refused).
    second: Option<LinkId>,
    /// Connections made so far (the peer's address changes with each, as a new socket).
    tries: u8,
}

struct Node {
    core: ControlCore,
    shard: ShardCore,
    slots: [Slot; 4],
    /// The operation in progress is on its slot's second connection (the slot byte's top bit).
    on_second: bool,
    now: Instant,
    start: Instant,
    /// This node's endpoints created at start, and the pairs of them that match.
    own: Vec<EndpointGuid>,
    own_pairs: Vec<(EndpointGuid, EndpointGuid)>,
    /// The last `seq` / version sent per origin (frames that follow it pass the checks).
    seqs: HashMap<PeerId, u64>,
    acts: Vec<ShardAction>,
    bufs: Vec<Bytes>,
}

impl Node {
    fn new() -> Node {
        let now = Instant::now();
        let cfg = cfg();
        cfg.validate().expect("the fuzz settings are valid");
        let mut core = ControlCore::new(
            ControlInit {
                me: ME,
                cfg: cfg.clone(),
                shards: 1,
                listen_port: 7000,
                secure: None,
                seed: [7; 32],
                epoch: now,
                listen_addrs: vec!["10.0.0.1:7000".parse().expect("an address")],
            },
            now,
            WALL,
        );
        let shard = ShardCore::new(
            0,
            1,
            ShardConfig::new(ME, &cfg),
            Arc::new(Counters::default()),
            7,
            now,
            Box::new(Discard),
        );
        core.start(now, WALL);
        let mut own = Vec::new();
        let mut endpoint = |kind, topic: &str, reliable: bool, keep_all: bool| {
            let mut q = EndpointQos::default_for(kind);
            q.reliability.kind = if reliable {
                ReliabilityKind::Reliable
            } else {
                ReliabilityKind::BestEffort
            };
            if keep_all {
                q.history = History::KeepAll;
            }
            let g = core
                .create_endpoint(kind, topic, "T", [7; 16], q, &[], now, WALL)
                .expect("the node's own endpoints are created");
            own.push(g);
        };
        // A reliable keep-all pair on "t", a best-effort pair on "u".
        endpoint(EndpointKind::Writer, "t", true, true);
        endpoint(EndpointKind::Reader, "t", true, false);
        endpoint(EndpointKind::Writer, "u", false, false);
        endpoint(EndpointKind::Reader, "u", false, false);
        let own_pairs = vec![(own[0], own[1]), (own[2], own[3])];
        let mut n = Node {
            core,
            shard,
            slots: Default::default(),
            on_second: false,
            now,
            start: now,
            own,
            own_pairs,
            seqs: HashMap::new(),
            acts: Vec::new(),
            bufs: Vec::new(),
        };
        n.pump();
        for s in 0..4 {
            n.connect(s);
        }
        n.check();
        n
    }

    fn wall(&self) -> u64 {
        WALL + u64::try_from((self.now - self.start).as_millis()).unwrap_or(u64::MAX / 2)
    }

    /// The peer of `slot` connects (its Hello arrives at once); the link goes to the shard.
    /// The slot's peer connects (a new socket and handshake); on the second connection, while
    /// the first is up: a dial race, or a late claim once the race window has passed.
    fn connect(&mut self, slot: usize) {
        let s = &self.slots[slot];
        let taken = match self.on_second {
            false => s.link.is_some(),
            true => s.link.is_none() || s.second.is_some(),
        };
        if taken {
            return;
        }
        let (peer, capable) = slot_peer(slot);
        let s = &mut self.slots[slot];
        s.tries = s.tries.wrapping_add(1);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 1 + slot as u8, s.tries, 2));
        let wall = self.wall();
        let Some(link) = self.core.on_accepted(Some(ip), self.now, wall) else {
            return;
        };
        let hello = Hello {
            node_id: peer,
            protocol_version: PROTOCOL_VERSION,
            tcp_listen_port: 7100 + slot as u16,
            group_name: "default".into(),
            nonce: u64::from(self.slots[slot].tries),
            eph_pub_key: None,
            identity: None,
            shoal: capable.then(|| {
                ShoalExtension::new(
                    SHOAL_EXT_VERSION,
                    Features::EXTENDED_FRAMES.union(Features::SIGNED_RECORDS),
                )
            }),
        };
        let mut b = BytesMut::new();
        Frame::Hello(hello).encode(&mut b).expect("a Hello encodes");
        self.core.on_bytes(link, &b, self.now, wall);
        self.pump();
        if self.shard.served().any(|l| l == link) {
            match self.on_second {
                false => self.slots[slot].link = Some(link),
                true => self.slots[slot].second = Some(link),
            }
        }
    }

    /// The link the operation in progress is on.
    fn link_of(&self, slot: usize) -> Option<LinkId> {
        match self.on_second {
            false => self.slots[slot].link,
            true => self.slots[slot].second,
        }
    }

    /// Bytes read on `slot`'s link.
    fn read(&mut self, slot: usize, bytes: &[u8]) {
        let Some(link) = self.link_of(slot) else {
            return;
        };
        let Some((mut buf, _)) = self.shard.read_buffer(link) else {
            return;
        };
        buf.extend_from_slice(bytes);
        self.shard.on_read(link, buf, bytes.len(), self.now);
        self.read_frames(link);
        self.pump();
    }

    fn read_frames(&mut self, link: LinkId) {
        let mut acts = std::mem::take(&mut self.acts);
        for _ in 0..MAX_PUMP_ROUNDS {
            let step = self.shard.read_frames(link, self.now, &mut acts);
            self.apply(&mut acts);
            if step != shoal_proto::shard::ReadStep::More {
                self.acts = acts;
                return;
            }
        }
        panic!("read_frames never ran out of frames");
    }

    fn frame(&mut self, slot: usize, f: Frame) {
        let mut b = BytesMut::new();
        if f.encode(&mut b).is_ok() {
            self.read(slot, &b);
        }
    }

    /// Carries out the shard's actions: reports go to the control core, ended links free
    /// their slot, a held reader told to read on reads what it holds.
    fn apply(&mut self, acts: &mut Vec<ShardAction>) {
        let mut read_on = Vec::new();
        for a in acts.drain(..) {
            match a {
                ShardAction::Report { msg, .. } => {
                    let wall = self.wall();
                    self.core.on_shard_report(msg, self.now, wall);
                }
                ShardAction::Ended(link, _) => {
                    for s in &mut self.slots {
                        if s.link == Some(link) {
                            s.link = s.second.take();
                        }
                        if s.second == Some(link) {
                            s.second = None;
                        }
                    }
                }
                ShardAction::Post { .. } => panic!("one shard: nothing to post to another"),
                ShardAction::ReadOn(link) => read_on.push(link),
                ShardAction::Block(_) => {}
                _ => {}
            }
        }
        for link in read_on {
            self.read_frames(link);
        }
    }

    /// Moves commands and reports between the control core and the shard, and drains every
    /// link's writes (the peers read nothing back), until both are quiet.
    fn pump(&mut self) {
        let mut acts = std::mem::take(&mut self.acts);
        for _ in 0..MAX_PUMP_ROUNDS {
            let mut busy = false;
            while self.core.poll_action().is_some() {}
            while let Some((_, cmd)) = self.core.poll_to_shard() {
                busy = true;
                if let Some((link, ())) = self.shard.on_command(cmd, self.now, &mut acts) {
                    self.apply(&mut acts);
                    self.acts = std::mem::take(&mut acts);
                    self.read_frames(link);
                    acts = std::mem::take(&mut self.acts);
                }
                self.apply(&mut acts);
            }
            let links: Vec<LinkId> = self.shard.served().collect();
            for link in links {
                loop {
                    self.bufs.clear();
                    match self
                        .shard
                        .next_write(link, &mut self.bufs, self.now, &mut acts)
                    {
                        WriteStep::Write => {
                            busy = true;
                            let n = self.bufs.iter().map(|b| b.len()).sum();
                            self.shard.on_written(link, n, self.now);
                        }
                        WriteStep::Shutdown => {
                            busy = true;
                            self.shard.on_link_lost(link, self.now, &mut acts);
                            break;
                        }
                        WriteStep::Idle | WriteStep::Gone => break,
                    }
                }
                self.apply(&mut acts);
            }
            if !busy && !self.core.has_shard_posts() {
                self.acts = acts;
                return;
            }
        }
        panic!("control core and shard never went quiet");
    }

    /// Time advances by `d`: every timer due on the way fires at its time. `alive`: before
    /// a link's timer fires, its peer sends a link Heartbeat (else the link times out).
    fn advance(&mut self, d: Duration, alive: bool) {
        let end = self.now + d;
        for _ in 0..MAX_TIMER_STEPS {
            let (next, link_slot) = self.next_timer();
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            if let (true, Some(slot)) = (alive, link_slot) {
                self.frame(slot, Frame::Heartbeat);
            }
            self.fire();
        }
        self.now = end;
        if alive {
            for slot in 0..self.slots.len() {
                self.frame(slot, Frame::Heartbeat);
            }
        }
        self.fire();
    }

    /// The next timer, and the slot whose link it is when it is a link's.
    fn next_timer(&self) -> (Instant, Option<usize>) {
        let mut t = (
            self.core.poll_timeout().min(self.shard.poll_timeout()),
            None,
        );
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(d) = s.link.and_then(|l| self.shard.link_timeout(l, self.now)) {
                if d < t.0 {
                    t = (d, Some(i));
                }
            }
        }
        t
    }

    fn fire(&mut self) {
        let wall = self.wall();
        self.core.handle_timeout(self.now, wall);
        let mut acts = std::mem::take(&mut self.acts);
        self.shard.handle_timeout(self.now, &mut acts);
        self.apply(&mut acts);
        let links: Vec<LinkId> = self.shard.served().collect();
        for link in links {
            if self
                .shard
                .link_timeout(link, self.now)
                .is_some_and(|d| d <= self.now)
            {
                self.shard.on_link_timer(link, self.now, &mut acts);
                self.apply(&mut acts);
            }
        }
        self.acts = acts;
        self.pump();
    }

    fn close(&mut self, slot: usize, lost: bool) {
        let Some(link) = self.link_of(slot) else {
            return;
        };
        let mut acts = std::mem::take(&mut self.acts);
        if lost {
            self.shard.on_link_lost(link, self.now, &mut acts);
        } else if let Some((buf, _)) = self.shard.read_buffer(link) {
            self.shard.on_eof(link, buf, self.now, &mut acts);
        }
        self.apply(&mut acts);
        self.acts = acts;
        self.pump();
    }

    /// The invariants (see the module docs).
    fn check(&self) {
        let t = self.core.topics();
        let g = t.graph();
        if let Err(e) = g.check_invariants() {
            panic!("discovery graph: {e}");
        }
        for table in Table::ALL {
            let (n, cap) = t.occupancy(table);
            assert!(n <= cap, "{table:?}: {n} > {cap}");
        }
        assert!(t.occupancy(Table::LocalEndpoints).1 == MAX_LOCAL);
        assert!(
            g.match_count() <= MAX_MATCHES,
            "matches {}",
            g.match_count()
        );
        assert!(
            t.remotes_len() <= MAX_PARTICIPANTS,
            "remotes {}",
            t.remotes_len()
        );
        // Pinned origins are the admitted participants'; the rest is the LRU.
        assert!(
            t.dedup_len() <= MAX_DEDUP + MAX_PARTICIPANTS,
            "origins {}",
            t.dedup_len()
        );
        assert!(
            t.cycles_len() <= MAX_PARTICIPANTS,
            "cycles {}",
            t.cycles_len()
        );
        assert!(
            t.reported_len() <= MAX_REPORTED,
            "reported {}",
            t.reported_len()
        );
        // Membership: the own record and at most the configured number of others, none
        // longer than the configured neighbour list.
        let mut records = 0;
        for (origin, ns) in self.core.membership().adjacency() {
            if *origin != ME {
                records += 1;
                assert!(
                    ns.len() <= MAX_NEIGHBOURS,
                    "record of {} neighbours",
                    ns.len()
                );
            }
        }
        assert!(records <= MAX_RECORDS, "{records} membership records");
        assert!(
            self.core.connecting() <= 64,
            "{} connecting",
            self.core.connecting()
        );
        assert!(self.shard.parked_bytes() <= MAX_PARKED);
        let (writers, readers) = self.shard.reliable_states();
        assert!(writers <= MAX_LOCAL && readers <= MAX_LOCAL * (MAX_WRITERS + MAX_LOCAL));
        // The own endpoints, still local, still matched to each other.
        let ep = |b: &EndpointGuid| {
            let guid = guid_of(b);
            let e = g
                .endpoint_id(&guid)
                .unwrap_or_else(|| panic!("own endpoint {b:02x?} gone"));
            assert_eq!(g.is_local(e), Some(true), "own endpoint {b:02x?} not local");
            e
        };
        for o in &self.own {
            ep(o);
        }
        for (w, r) in &self.own_pairs {
            assert!(
                g.is_matched(ep(w), ep(r)),
                "own pair {w:02x?} → {r:02x?} unmatched"
            );
        }
    }
}

fn guid_of(b: &EndpointGuid) -> Guid {
    let mut p = [0; 12];
    p.copy_from_slice(&b[..12]);
    let mut e = [0; 4];
    e.copy_from_slice(&b[12..]);
    Guid::new(GuidPrefix(p), EntityId(e))
}

/// An id from a small pool (this node, its prefix twin, the slot peers, nodes behind them,
/// twins of those) or from the input.
fn pick_id(n: &Node, inp: &mut Input<'_>) -> PeerId {
    let k = inp.u8();
    match k % 12 {
        0 => ME,
        1 => twin(ME, k / 12),
        2..=5 => slot_peer(usize::from(k % 12 - 2)).0,
        6 => id(0x50),
        7 => id(0x60),
        8 => twin(id(0x20), k / 12),
        9 => twin(id(0x50), k / 12),
        10 => {
            // An origin the node holds a mark for (the last one used, if any).
            n.seqs.keys().max().copied().unwrap_or(ME)
        }
        _ => PeerId(inp.arr()),
    }
}

/// A GUID: one of the node's own, or an entity of a picked id's prefix.
fn pick_guid(n: &Node, inp: &mut Input<'_>) -> EndpointGuid {
    let k = inp.u8();
    if k % 3 == 0 {
        return n.own[usize::from(k / 3) % n.own.len()];
    }
    let p = pick_id(n, inp);
    let mut g = [0; 16];
    g[..12].copy_from_slice(&p.0[..12]);
    let e: u32 = match k % 3 {
        1 => [0x102, 0x107, 0x202, 0x207][usize::from(k / 3) % 4],
        _ => inp.u32(),
    };
    g[12..].copy_from_slice(&e.to_be_bytes());
    g
}

/// A `seq` (or version) for `origin`: mostly the next one, sometimes a jump or junk.
fn pick_seq(n: &mut Node, origin: PeerId, inp: &mut Input<'_>) -> u64 {
    let last = *n.seqs.get(&origin).unwrap_or(&WALL);
    let k = inp.u8();
    let s = match k % 8 {
        0..=2 => last.wrapping_add(1),
        3 => last.wrapping_add(u64::from(inp.u16())),
        4 => last,
        5 => u64::MAX,
        6 => u64::from(k / 8),
        _ => inp.u64(),
    };
    // Only a progression is remembered: an honest frame after an attack still follows on.
    if k % 8 <= 3 && (n.seqs.len() < 32 || n.seqs.contains_key(&origin)) {
        n.seqs.insert(origin, s);
    }
    s
}

fn qos(kind: EndpointKind, k: u8) -> EndpointQos {
    let mut q = EndpointQos::default_for(kind);
    q.reliability.kind = if k & 1 == 1 {
        ReliabilityKind::Reliable
    } else {
        ReliabilityKind::BestEffort
    };
    if k & 2 == 2 {
        q.durability = DurabilityKind::TransientLocal;
    }
    q.history = match (k >> 2) & 3 {
        0 => History::KeepLast { depth: 1 },
        1 => History::KeepAll,
        d => History::KeepLast {
            depth: u32::from(d) * 7,
        },
    };
    q
}

fn record_entry(n: &Node, inp: &mut Input<'_>, origin: PeerId) -> Option<DiscoveryEntry> {
    let k = inp.u8();
    Some(match k % 5 {
        0 => {
            // A participant record, mostly of the frame's own origin.
            let who = if k & 0x80 == 0 {
                origin
            } else {
                pick_id(n, inp)
            };
            let mut prefix = [0; 12];
            prefix.copy_from_slice(&who.0[..12]);
            let mut p = ParticipantInfo::new(GuidPrefix(prefix), "p");
            p.lease_duration = match (k >> 3) & 3 {
                0 => QosDuration::from_secs(3),
                1 => QosDuration::INFINITE,
                2 => QosDuration::from_millis(u64::from(inp.u16())),
                _ => QosDuration::from_secs(30),
            };
            DiscoveryEntry::Record(encode_participant(&p).ok()?)
        }
        1 | 2 => {
            // An endpoint record, mostly under the frame's origin's prefix.
            let mut guid = pick_guid(n, inp);
            if k & 0x80 == 0 {
                guid[..12].copy_from_slice(&origin.0[..12]);
            }
            let kind = if k % 5 == 1 {
                EndpointKind::Writer
            } else {
                EndpointKind::Reader
            };
            let topic = ["t", "u", "v"][usize::from(k >> 5) % 3];
            let mut info = EndpointInfo::new(
                guid_of(&guid),
                kind,
                TopicName::new(topic).ok()?,
                TypeName::new("T").ok()?,
                TypeHash([7; 16]),
            );
            info.qos = qos(kind, inp.u8());
            let parts = inp.u8();
            info.partitions = match parts % 4 {
                0 => Partitions::default(),
                1 => Partitions::new(["p"]).ok()?,
                2 => Partitions::new(["*"]).ok()?,
                _ => {
                    let len = usize::from(parts >> 2);
                    let name = String::from_utf8_lossy(inp.bytes(len)).into_owned();
                    Partitions::new([name]).ok()?
                }
            };
            DiscoveryEntry::Record(encode_endpoint(&info).ok()?)
        }
        3 => DiscoveryEntry::Withdraw(pick_guid(n, inp)),
        _ => {
            // Record bytes as they come (mostly malformed: they close the link).
            let len = usize::from(inp.u8());
            DiscoveryEntry::Record(Bytes::copy_from_slice(inp.bytes(len)))
        }
    })
}

fn discovery(n: &mut Node, inp: &mut Input<'_>) -> Discovery {
    let origin = pick_id(n, inp);
    let seq = pick_seq(n, origin, inp);
    let ttl = inp.u8() % 6;
    let c = inp.u8();
    let (cycle, part, parts) = (u32::from(c >> 4), u16::from(c & 3), u16::from((c >> 2) & 3));
    let count = inp.u8() % 6;
    let mut entries = Vec::new();
    for _ in 0..count {
        if let Some(e) = record_entry(n, inp, origin) {
            entries.push(e);
        }
    }
    if c & 0x80 == 0x80 {
        // A signature entry of junk: verified (and refused) even without identity.
        entries.push(DiscoveryEntry::Signature(RecordSignature {
            key: inp.arr(),
            sig: inp.arr(),
        }));
    }
    Discovery {
        origin,
        seq,
        ttl,
        cycle,
        part,
        parts,
        entries,
    }
}

fn reliable(n: &mut Node, inp: &mut Input<'_>) -> Frame {
    let k = inp.u8();
    let writer = pick_guid(n, inp);
    let reader = pick_guid(n, inp);
    let ttl = 1 + inp.u8() % 4;
    let a = match inp.u8() % 4 {
        0 => 1,
        1 => u64::from(inp.u8()),
        2 => u64::MAX,
        _ => inp.u64(),
    };
    let b = a.saturating_add(u64::from(inp.u8()));
    match k % 4 {
        0 => Frame::WriterHeartbeat(Heartbeat {
            ttl,
            writer,
            first: a,
            last: b,
        }),
        1 => {
            let mut missing = SeqSet::new();
            for _ in 0..inp.u8() % 4 {
                missing.insert(u16::from(inp.u8()));
            }
            let count = match k >> 2 & 3 {
                0 => u32::from(inp.u8()),
                1 => u32::MAX,
                _ => inp.u32(),
            };
            Frame::AckNack(AckNack {
                ttl,
                writer,
                reader,
                count,
                base: a,
                missing,
            })
        }
        2 => {
            let payloads: Vec<Vec<u8>> =
                (0..inp.u8() % 4).map(|i| vec![i; usize::from(i)]).collect();
            match Repair::new(ttl, writer, reader, a.max(1), payloads) {
                Ok(r) => Frame::Repair(r),
                Err(_) => Frame::Heartbeat,
            }
        }
        _ => Frame::Gap(Gap {
            ttl,
            writer,
            reader,
            first: a.max(1),
            last: b.max(a.max(1)),
        }),
    }
}

fn membership(n: &mut Node, inp: &mut Input<'_>) -> Frame {
    let origin = pick_id(n, inp);
    let version = pick_seq(n, origin, inp);
    let k = inp.u8();
    let mut neighbours: Vec<PeerId> = (0..k % 8).map(|_| pick_id(n, inp)).collect();
    let record = Membership {
        origin,
        version,
        neighbours: neighbours.clone(),
    };
    if k & 0x80 == 0 {
        return Frame::Membership(record);
    }
    neighbours.sort_unstable();
    neighbours.dedup();
    Frame::SignedMembership(SignedMembership {
        record: Membership {
            neighbours,
            ..record
        },
        signature: RecordSignature {
            key: inp.arr(),
            sig: inp.arr(),
        },
    })
}

fn samples(n: &mut Node, inp: &mut Input<'_>) -> Frame {
    let writer = pick_guid(n, inp);
    let first = match inp.u8() % 3 {
        0 => 1,
        1 => u64::from(inp.u16()),
        _ => inp.u64().max(1),
    };
    let count = inp.u8() % 5;
    let payloads: Vec<Vec<u8>> = (0..count).map(|i| vec![i; usize::from(i) * 3]).collect();
    match Samples::new(1 + inp.u8() % 4, writer, first, payloads) {
        Ok(s) => Frame::Samples(s),
        Err(_) => Frame::Heartbeat,
    }
}

/// Runs one input: its operations on a fresh node, the invariants checked after each.
pub fn run(data: &[u8]) {
    let mut n = Node::new();
    let mut inp = Input(data);
    let mut ops = 0;
    while !inp.is_empty() && ops < MAX_OPS {
        ops += 1;
        let op = inp.u8();
        let raw = inp.u8();
        let slot = usize::from(raw % 4);
        n.on_second = raw & 0x80 != 0;
        match op % 9 {
            0 => {
                let len = usize::from(inp.u16() % 2048);
                let b = inp.bytes(len).to_vec();
                n.read(slot, &b);
            }
            1 => {
                let d = discovery(&mut n, &mut inp);
                n.frame(slot, Frame::Discovery(d));
            }
            2 => {
                let f = reliable(&mut n, &mut inp);
                n.frame(slot, f);
            }
            3 => {
                let f = membership(&mut n, &mut inp);
                n.frame(slot, f);
            }
            4 => {
                let f = samples(&mut n, &mut inp);
                n.frame(slot, f);
            }
            5 => {
                let ms = u64::from(inp.u16());
                // Mostly short steps; the top bit makes it seconds (leases run out), the
                // next one silences the peers (their links time out).
                let d = if ms & 0x8000 == 0 {
                    Duration::from_millis(ms & 0x3ff)
                } else {
                    Duration::from_secs((ms & 0x3f) + 1)
                };
                n.advance(d, ms & 0x4000 == 0);
            }
            6 => n.close(slot, false),
            7 => n.connect(slot),
            _ => n.close(slot, true),
        }
        n.check();
        if trace() {
            n.trace(op % 9);
        }
    }
}

/// `CONTROL_PLANE_TRACE=1`: one line per operation (what the seeds reach).
fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("CONTROL_PLANE_TRACE").is_some())
}

impl Node {
    fn trace(&self, op: u8) {
        let t = self.core.topics();
        let s = t.stats();
        let c = self.core.stats();
        eprintln!(
            "op {op}: links {:?} endpoints {} matches {} participants {} origins {} \
             cycles {} members {} | {s:?} | {c:?} | {:?}",
            self.slots
                .iter()
                .map(|s| s.link.is_some())
                .collect::<Vec<_>>(),
            t.graph().endpoint_count(),
            t.graph().match_count(),
            t.remotes_len(),
            t.dedup_len(),
            t.cycles_len(),
            self.core.members().count(),
            self.shard.counters(),
        );
    }
}
