//! `discovery --part hostile`: a stranger on a node's link announcing the worst Discovery
//! records the limits allow, as fast as its link carries them, while a real node links to
//! the same node and matches (issue 24). The stranger is a raw TCP peer posing as a Shoal
//! node (its Hello advertises extended frames); half its frames come as itself, half under
//! a new made-up origin each (a new participant every frame), every record an endpoint on
//! the victim's topic with as many partition bytes as an endpoint may carry, patterns that
//! make a naive matcher backtrack (`*aaaa…ab*`) against long names.
//!
//! Measured on the victim, over the attack: its control thread's CPU (per cent of a core),
//! its shard threads', the process's peak resident memory, how long the real node took to
//! link and to match, and the victim's discovery counters (what it refused and why).
//!
//! **Owns:** the stranger (its frames and socket) and the report. **Must not touch:** the
//! mesh's internals: the victim and the real node are driven through `shoal-mesh`'s public
//! API; the stranger only speaks the wire format.

use crate::control_cpu::{thread_cpu, threads_named, CONTROL_COMM, SHARD_COMM};
use crate::demo::RunError;
use crate::discovery_setup::{mesh_err, node_builder, DiscoveryArgs};
use crate::shoal::wait_for;
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use shoal_discovery::graph::Table;
use shoal_discovery::qos::EndpointQos;
use shoal_discovery::record::{encode_endpoint, encode_participant};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, ParticipantInfo, Partitions, TopicName,
    TypeHash, TypeName,
};
use shoal_mesh::topics::{Topic, TopicsConfig};
use shoal_mesh::wire::{Discovery, DiscoveryEntry, Frame, Hello, ShoalExtension};
use shoal_mesh::{Mesh, PeerId};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The topic the victim, the real node and the stranger's records share.
const TOPIC: &str = "hostile/t";
const TYPE: &str = "T";

/// The hostile part's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostileReport {
    /// The attack's length, s.
    pub window_s: f64,
    /// Discovery frames the stranger wrote.
    pub frames_sent: u64,
    /// Their bytes, MiB.
    pub mib_sent: f64,
    /// Endpoint records per frame, and partition bytes per endpoint record.
    pub records_per_frame: usize,
    /// Partition bytes per record.
    pub partition_bytes: usize,
    /// The victim's control thread, per cent of one core over the attack.
    pub control_cpu_pct: f64,
    /// Its shard threads together, per cent of one core.
    pub shard_cpu_pct: f64,
    /// The process's peak resident memory, MiB (victim, real node and stranger).
    pub peak_rss_mib: f64,
    /// From the real node's start to both ends listing the link, ms.
    pub real_link_ms: f64,
    /// From the real node's writer's creation to the victim listing its match, ms.
    pub real_match_ms: f64,
    /// The victim closed the stranger's link.
    pub stranger_closed: bool,
    /// Victim counters over the attack: frames in, refused off-path, held seq jumps, over
    /// budget, prefix conflicts, duplicates.
    pub frames_in: u64,
    /// Dropped by the reverse-path check.
    pub off_path: u64,
    /// Held seq jumps.
    pub seq_jumps_held: u64,
    /// Dropped over a work budget by the control plane.
    pub budget_dropped: u64,
    /// Dropped on the victim's shard while the stranger's link was paused (budget spent).
    pub shard_dropped_over_budget: u64,
    /// Refused for another origin's prefix.
    pub prefix_conflicts: u64,
    /// Records refused by the discovery graph's admission (tables, quotas, caps).
    pub rejections: u64,
    /// Remote participants and endpoints the victim held at the end.
    pub participants: usize,
    /// Endpoints it held.
    pub endpoints: usize,
}

/// The stranger's partition lists: `n` names (or patterns) filling `bytes` bytes.
fn partitions(kind: EndpointKind, n: usize, bytes: usize) -> Partitions {
    let each = (bytes / n.max(1)).clamp(3, 256);
    let names = (0..n).map(|i| match kind {
        // Long names of `a`s: the patterns below scan each of them.
        EndpointKind::Writer => {
            let mut s = "a".repeat(each - 1);
            s.push(char::from(b'0' + (i % 10) as u8));
            s
        }
        // `*aaaa…ab*`: never matches an `aaaa…` name, and a backtracking matcher tries every
        // split before it says so.
        EndpointKind::Reader => format!("*{}b*", "a".repeat(each - 3)),
    });
    Partitions::new(names).unwrap_or_default()
}

struct Stranger {
    id: PeerId,
    sock: TcpStream,
    rng: rand::rngs::StdRng,
    seq: u64,
    next_entity: u32,
    records: usize,
    names: usize,
    partition_bytes: usize,
}

impl Stranger {
    fn dial(
        port: u16,
        records: usize,
        names: usize,
        partition_bytes: usize,
    ) -> std::io::Result<Self> {
        let sock = TcpStream::connect(("127.0.0.1", port))?;
        sock.set_nodelay(true)?;
        let id = PeerId::random();
        let hello = Hello {
            node_id: id,
            protocol_version: shoal_mesh::wire::PROTOCOL_VERSION,
            tcp_listen_port: 1,
            group_name: crate::shoal::NodeArgs::loopback().group,
            nonce: 7,
            eph_pub_key: None,
            identity: None,
            shoal: Some(ShoalExtension::current()),
        };
        let mut s = Stranger {
            id,
            sock,
            rng: rand::rngs::StdRng::seed_from_u64(24),
            seq: 1,
            next_entity: 1,
            records,
            names,
            partition_bytes,
        };
        s.send(&Frame::Hello(hello))?;
        Ok(s)
    }

    fn send(&mut self, f: &Frame) -> std::io::Result<usize> {
        let mut b = Vec::with_capacity(f.encoded_len());
        f.encode(&mut b)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        self.sock.write_all(&b)?;
        Ok(b.len())
    }

    /// The next frame: as itself on even turns, as a made-up origin on odd ones.
    fn frame(&mut self, turn: u64) -> Discovery {
        let origin = if turn % 2 == 0 {
            self.id
        } else {
            let mut o = [0u8; 16];
            self.rng.fill(&mut o);
            PeerId(o)
        };
        let mut prefix = [0u8; 12];
        prefix.copy_from_slice(&origin.0[..12]);
        let prefix = GuidPrefix(prefix);
        let mut entries = Vec::with_capacity(self.records + 1);
        let mut p = ParticipantInfo::new(prefix, "stranger");
        // An infinite lease: the victim must cap it.
        p.lease_duration = shoal_discovery::qos::QosDuration::INFINITE;
        if let Ok(rec) = encode_participant(&p) {
            entries.push(DiscoveryEntry::Record(rec));
        }
        for i in 0..self.records {
            let kind = if i % 2 == 0 {
                EndpointKind::Writer
            } else {
                EndpointKind::Reader
            };
            let e = self.next_entity;
            self.next_entity = self.next_entity.wrapping_add(1);
            let b = e.to_be_bytes();
            let low = if kind == EndpointKind::Writer {
                0x02
            } else {
                0x07
            };
            let guid = Guid::new(prefix, EntityId([b[1], b[2], b[3], low]));
            let (Ok(topic), Ok(ty)) = (TopicName::new(TOPIC), TypeName::new(TYPE)) else {
                continue;
            };
            let mut info = EndpointInfo::new(guid, kind, topic, ty, type_hash());
            info.qos = EndpointQos::default_for(kind);
            info.partitions = partitions(kind, self.names, self.partition_bytes);
            if let Ok(rec) = encode_endpoint(&info) {
                entries.push(DiscoveryEntry::Record(Bytes::from(rec.to_vec())));
            }
        }
        self.seq += 1;
        Discovery {
            origin,
            seq: self.seq,
            ttl: 8,
            cycle: 0,
            part: 0,
            parts: 0,
            entries,
        }
    }
}

/// The type hash the topic's endpoints use (the default: a hash of the type name).
fn type_hash() -> TypeHash {
    shoal_mesh::topics::type_hash_of(TYPE)
}

/// Reads and drops what the victim sends until the link closes or `stop`. It never writes:
/// the stranger's frames keep its link alive, and a second writer would interleave bytes.
fn drain(mut sock: TcpStream, stop: Arc<AtomicBool>, closed: Arc<AtomicBool>) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Acquire) {
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    closed.store(!stop.load(Ordering::Acquire), Ordering::Release);
}

fn sum_cpu(tids: &BTreeSet<u32>) -> Duration {
    tids.iter().filter_map(|t| thread_cpu(*t).ok()).sum()
}

/// Runs the hostile part.
pub fn run(a: &DiscoveryArgs) -> Result<HostileReport, RunError> {
    if a.hostile_seconds == 0 || a.hostile_records == 0 || a.hostile_names == 0 {
        return Err(RunError::Usage(
            "--hostile-seconds, --hostile-records and --hostile-names must be above 0".into(),
        ));
    }
    let cfg = TopicsConfig {
        announce_period: a.period(),
        participant_lease: a.period() * 10,
        ..TopicsConfig::default()
    };
    let partition_bytes = a.hostile_partition_bytes.unwrap_or(cfg.max_partition_bytes);
    let (control_before, shards_before) = (threads_named(CONTROL_COMM), threads_named(SHARD_COMM));
    let victim = node_builder(a, Vec::new(), &cfg)?
        .build()
        .map_err(mesh_err)?;
    victim.start().map_err(mesh_err)?;
    let control: BTreeSet<u32> = threads_named(CONTROL_COMM)
        .difference(&control_before)
        .copied()
        .collect();
    let shards: BTreeSet<u32> = threads_named(SHARD_COMM)
        .difference(&shards_before)
        .copied()
        .collect();
    let result = attack(a, &victim, &cfg, partition_bytes, &control, &shards);
    victim.stop();
    result
}

fn attack(
    a: &DiscoveryArgs,
    victim: &Mesh,
    cfg: &TopicsConfig,
    partition_bytes: usize,
    control: &BTreeSet<u32>,
    shards: &BTreeSet<u32>,
) -> Result<HostileReport, RunError> {
    let topic = Topic::new(TOPIC, TYPE).partitions(["*"]);
    let _reader = victim.reader(topic.clone()).map_err(mesh_err)?;
    let mut stranger = Stranger::dial(
        victim.listen_port(),
        a.hostile_records,
        a.hostile_names,
        partition_bytes,
    )
    .map_err(|e| RunError::Usage(format!("the stranger could not dial the victim: {e}")))?;
    let stranger_id = stranger.id;
    wait_for(a.timeout_s, "the victim to link the stranger", || {
        victim.connected_peers().contains(&stranger_id)
    })?;
    let (stop, closed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let reader = {
        let s = stranger
            .sock
            .try_clone()
            .map_err(|e| RunError::Usage(e.to_string()))?;
        let (stop, closed) = (stop.clone(), closed.clone());
        std::thread::spawn(move || drain(s, stop, closed))
    };
    // Shut down at the end: the writer may be blocked on a full socket.
    let closer = stranger
        .sock
        .try_clone()
        .map_err(|e| RunError::Usage(e.to_string()))?;
    let (sent, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writer = {
        let (stop, sent, bytes) = (stop.clone(), sent.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut turn = 0u64;
            while !stop.load(Ordering::Acquire) {
                let f = stranger.frame(turn);
                turn += 1;
                match stranger.send(&Frame::Discovery(f)) {
                    Ok(n) => {
                        sent.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(_) => break,
                }
            }
        })
    };
    let stats = || victim.topics().discovery;
    let paused = || victim.stats().total.dropped_discovery_over_budget;
    let (s0, p0, c0, sh0, t0) = (
        stats(),
        paused(),
        sum_cpu(control),
        sum_cpu(shards),
        Instant::now(),
    );
    // Let the flood build up before the real node comes.
    let warm = Duration::from_secs(1).min(Duration::from_secs(a.hostile_seconds) / 2);
    wait_for(a.timeout_s, "the stranger's first frames", || {
        t0.elapsed() >= warm && sent.load(Ordering::Relaxed) > 0
    })?;
    let real_start = Instant::now();
    let port = victim.listen_port();
    let real = node_builder(a, vec![format!("127.0.0.1:{port}")], cfg)?
        .build()
        .map_err(mesh_err)?;
    real.start().map_err(mesh_err)?;
    let (real_id, victim_id) = (real.id(), victim.id());
    let linked = wait_for(a.timeout_s, "the real node to link with the victim", || {
        victim.connected_peers().contains(&real_id) && real.connected_peers().contains(&victim_id)
    });
    let real_link_ms = real_start.elapsed().as_secs_f64() * 1e3;
    let match_start = Instant::now();
    let w = real.writer(topic).map_err(mesh_err)?;
    let guid = w.guid();
    let matched = linked.and_then(|()| {
        wait_for(
            a.timeout_s,
            "the victim to match the real node's writer",
            || {
                victim
                    .topics()
                    .view
                    .is_some_and(|v| v.matches.iter().any(|(wr, _)| *wr == guid))
            },
        )
    });
    let real_match_ms = match_start.elapsed().as_secs_f64() * 1e3;
    // The rest of the window: nothing to wait for but time.
    let window = Duration::from_secs(a.hostile_seconds);
    std::thread::sleep(window.saturating_sub(t0.elapsed()));
    let (s1, p1, c1, sh1, window_s) = (
        stats(),
        paused(),
        sum_cpu(control),
        sum_cpu(shards),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Release);
    let _ = closer.shutdown(std::net::Shutdown::Both);
    drop(w);
    real.stop();
    let _ = writer.join();
    let _ = reader.join();
    matched?;
    let view = victim.topics().view;
    let pct = |d: Duration| d.as_secs_f64() * 100.0 / window_s;
    Ok(HostileReport {
        window_s,
        frames_sent: sent.load(Ordering::Relaxed),
        mib_sent: bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
        records_per_frame: a.hostile_records,
        partition_bytes,
        control_cpu_pct: pct(c1.saturating_sub(c0)),
        shard_cpu_pct: pct(sh1.saturating_sub(sh0)),
        peak_rss_mib: crate::usage::Usage::now().peak_rss_kib as f64 / 1024.0,
        real_link_ms,
        real_match_ms,
        stranger_closed: closed.load(Ordering::Acquire),
        frames_in: s1.frames_in - s0.frames_in,
        off_path: s1.off_path - s0.off_path,
        seq_jumps_held: s1.seq_jumps_held - s0.seq_jumps_held,
        budget_dropped: s1.budget_dropped - s0.budget_dropped,
        shard_dropped_over_budget: p1 - p0,
        prefix_conflicts: s1.prefix_conflicts - s0.prefix_conflicts,
        rejections: view.as_ref().map_or(0, |v| v.rejections.total()),
        participants: view.as_ref().map_or(0, |v| {
            v.occupancy
                .iter()
                .find(|(t, _, _)| *t == Table::RemoteParticipants)
                .map_or(0, |(_, n, _)| *n)
        }),
        endpoints: view.as_ref().map_or(0, |v| v.endpoints.len()),
    })
}

/// Prints the hostile part as markdown.
pub fn print(h: &HostileReport) {
    println!();
    println!(
        "Hostile stranger: {:.1} s, {} Discovery frames ({:.1} MiB) of {} endpoint records with {} partition bytes each:",
        h.window_s, h.frames_sent, h.mib_sent, h.records_per_frame, h.partition_bytes
    );
    println!();
    println!("| victim control thread | shard threads | peak RSS (process) | real node linked | real node matched | stranger's link closed |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| **{:.1} %** | {:.1} % | {:.0} MiB | {:.0} ms | **{:.0} ms** | {} |",
        h.control_cpu_pct,
        h.shard_cpu_pct,
        h.peak_rss_mib,
        h.real_link_ms,
        h.real_match_ms,
        if h.stranger_closed { "yes" } else { "no" }
    );
    println!();
    println!(
        "Victim: {} frames reached its control plane ({} over budget there, {} off-path, {} seq jumps held, {} prefix conflicts), {} more dropped on its shard while the link was paused; {} records refused by admission; {} participants and {} endpoints held.",
        h.frames_in, h.budget_dropped, h.off_path, h.seq_jumps_held, h.prefix_conflicts, h.shard_dropped_over_budget, h.rejections, h.participants, h.endpoints
    );
    println!("Issue 24's targets: control thread under 20 % of a core, the real node linked and matched within 1 s.");
}
