//! The `discovery` bench's settings and the loopback setup its parts share: the command
//! line ([`DiscoveryArgs`]), nodes and their links, the endpoint layouts (deterministic, so
//! the expected matches are computed from what was created, never assumed) and the match
//! check. Parts 1 and 2 and the report are [`crate::discovery_bench`]'s, part 3
//! [`crate::control_cpu`]'s, the hostile part [`crate::hostile`]'s; each imports this file,
//! which imports none of them.
//!
//! **Owns:** the settings, the loopback topologies and the endpoint layouts. **Must not
//! touch:** the mesh's internals: nodes are driven through `shoal-mesh`'s public API and
//! matches are read from [`Mesh::topics`].

use crate::demo::RunError;
use crate::shoal::{wait_for, NodeArgs, SetupError};
use shoal_mesh::topics::{EndpointGuid, Reader, Topic, TopicsConfig, Writer};
use shoal_mesh::{EventReceiver, Mesh, MeshBuilder, MeshError};
use std::time::Duration;

/// Which parts to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// The three measurements (latency, match, cpu), in order.
    All,
    /// Reader creation to its first sample.
    Latency,
    /// Endpoints on several nodes until every node has every match.
    Match,
    /// The control thread's CPU on a node knowing many remote endpoints.
    Cpu,
    /// A stranger floods the worst records the limits allow while a real node links and
    /// matches ([`crate::hostile`]).
    Hostile,
}

/// The command line of `discovery`.
#[derive(Debug, Clone, clap::Args)]
pub struct DiscoveryArgs {
    /// Which part to run.
    #[arg(long, value_enum, default_value = "all")]
    pub part: Part,
    /// Announce period of every node, ms (the participant lease is ten of them).
    #[arg(long, default_value_t = 1000)]
    pub announce_ms: u64,
    /// Latency: trials (create a reader, time its first sample, drop it, wait for the
    /// writer's node to see it unmatched).
    #[arg(long, default_value_t = 100)]
    pub trials: usize,
    /// Latency: the writer writes one sample every this many µs.
    #[arg(long, default_value_t = 1000)]
    pub write_every_us: u64,
    /// Match: nodes (a ring of static peers).
    #[arg(long, default_value_t = 10)]
    pub match_nodes: usize,
    /// Match: endpoints per node (half writers, half readers).
    #[arg(long, default_value_t = 100)]
    pub match_endpoints: usize,
    /// Match: topics the endpoints are spread over.
    #[arg(long, default_value_t = 20)]
    pub match_topics: usize,
    /// CPU: helper nodes (a star around the first) that hold the remote endpoints.
    #[arg(long, default_value_t = 20)]
    pub cpu_helpers: usize,
    /// CPU: endpoints per helper node.
    #[arg(long, default_value_t = 500)]
    pub cpu_helper_endpoints: usize,
    /// CPU: the measured node's own endpoints.
    #[arg(long, default_value_t = 100)]
    pub cpu_endpoints: usize,
    /// CPU: topics every endpoint is spread over.
    #[arg(long, default_value_t = 500)]
    pub cpu_topics: usize,
    /// CPU: helpers the measured node is linked to (1: a leaf, it re-floods nothing; more:
    /// it also relays and drops duplicates).
    #[arg(long, default_value_t = 1)]
    pub cpu_links: usize,
    /// CPU: measured seconds (after every node has every match).
    #[arg(long, default_value_t = 10)]
    pub cpu_seconds: u64,
    /// Every node's membership re-flood period, ms (its timeout: four of them; default: the
    /// mesh's own, 2000 ms). Each refresh is a new membership record on every node.
    #[arg(long)]
    pub membership_ms: Option<u64>,
    /// Hostile: how long the stranger floods, s.
    #[arg(long, default_value_t = 10)]
    pub hostile_seconds: u64,
    /// Hostile: endpoint records per Discovery frame (half writers, half readers).
    #[arg(long, default_value_t = 24)]
    pub hostile_records: usize,
    /// Hostile: partition names (writers) or patterns (readers) per endpoint.
    #[arg(long, default_value_t = 8)]
    pub hostile_names: usize,
    /// Hostile: partition bytes per endpoint (default: the most an endpoint may carry,
    /// `[topics] max_partition_bytes`).
    #[arg(long)]
    pub hostile_partition_bytes: Option<usize>,
    /// Longest wait for any one condition (connections, matches, a trial's sample), s.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
}

impl DiscoveryArgs {
    /// The announce period.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.announce_ms)
    }

    /// The `[topics]` settings of every node: the announce period, a lease of ten periods,
    /// and tables and per-participant quotas large enough for `endpoints` endpoints and
    /// `matches` matches.
    pub fn topics_config(&self, endpoints: usize, matches: usize) -> TopicsConfig {
        let d = TopicsConfig::default();
        TopicsConfig {
            announce_period: self.period(),
            participant_lease: self.period() * 10,
            max_local_endpoints: d.max_local_endpoints.max(endpoints),
            max_remote_writers: d.max_remote_writers.max(endpoints),
            max_remote_readers: d.max_remote_readers.max(endpoints),
            max_matches: d.max_matches.max(matches),
            // One node may hold all `endpoints`: its peers must not refuse them (~600
            // bytes of footprint each; 1 KiB leaves room).
            max_endpoints_per_participant: d.max_endpoints_per_participant.max(endpoints),
            max_bytes_per_participant: d.max_bytes_per_participant.max(endpoints << 10),
            max_remote_endpoint_bytes: d.max_remote_endpoint_bytes.max(endpoints << 10),
            max_lease: d.max_lease.max(self.period() * 10),
            ..d
        }
    }
}

/// A loopback node's builder with `cfg`, dialing `peers`, with `a`'s membership period.
pub fn node_builder(
    a: &DiscoveryArgs,
    peers: Vec<String>,
    cfg: &TopicsConfig,
) -> Result<MeshBuilder, RunError> {
    let mut args = NodeArgs::loopback();
    args.static_peers = peers;
    let mut b = args.builder()?.topics(cfg.clone());
    if let Some(ms) = a.membership_ms {
        let every = Duration::from_millis(ms.max(1));
        b = b.membership_interval(every).membership_timeout(every * 4);
    }
    Ok(b)
}

pub(crate) fn mesh_err(e: MeshError) -> RunError {
    RunError::Setup(SetupError::Mesh(e))
}

/// Starts `n` loopback nodes with `cfg`, linked as `links` says (the later node of a link
/// dials the earlier), and waits until every node has all its links. With `events`, each
/// node's event receiver is taken before it starts.
pub fn start_nodes(
    a: &DiscoveryArgs,
    n: usize,
    links: &[(usize, usize)],
    cfg: &TopicsConfig,
    events: bool,
) -> Result<Vec<(Mesh, Option<EventReceiver>)>, RunError> {
    let timeout_s = a.timeout_s;
    let mut nodes: Vec<(Mesh, Option<EventReceiver>)> = Vec::with_capacity(n);
    for i in 0..n {
        let peers = links
            .iter()
            .filter_map(|&(a, b)| match (a.max(b) == i, a.min(b)) {
                (true, other) if other != i => Some(other),
                _ => None,
            })
            .map(|other| format!("127.0.0.1:{}", nodes[other].0.listen_port()))
            .collect();
        let mesh = node_builder(a, peers, cfg)?.build().map_err(mesh_err)?;
        let rx = events.then(|| mesh.events());
        mesh.start().map_err(mesh_err)?;
        nodes.push((mesh, rx));
    }
    let degree = |i: usize| links.iter().filter(|&&(a, b)| a == i || b == i).count();
    wait_for(timeout_s, "every node linked to its peers", || {
        nodes
            .iter()
            .enumerate()
            .all(|(i, (m, _))| m.connected_peers().len() >= degree(i))
    })?;
    Ok(nodes)
}

/// A ring over `n` nodes (a line for 2, nothing for 1).
pub fn ring(n: usize) -> Vec<(usize, usize)> {
    match n {
        0 | 1 => Vec::new(),
        2 => vec![(0, 1)],
        _ => (0..n).map(|i| (i, (i + 1) % n)).collect(),
    }
}

/// The topic of layout index `t`.
pub fn layout_topic(prefix: &str, t: usize) -> Topic {
    Topic::new(format!("{prefix}/{t}"), "shoal-loadgen/Discovery")
}

/// Endpoints one node opened, with their topic index and kind.
#[derive(Default)]
pub struct Opened {
    /// Writers and their topic index.
    pub writers: Vec<(usize, Writer)>,
    /// Readers and their topic index.
    pub readers: Vec<(usize, Reader)>,
}

/// Opens endpoint `g` (global layout index) on `mesh`: even indices write, odd ones read,
/// pair `g / 2` is on topic `(g / 2) % topics` — so each topic gets writers and readers in
/// equal numbers whatever the node count.
pub fn open_layout(
    mesh: &Mesh,
    prefix: &str,
    range: std::ops::Range<usize>,
    topics: usize,
) -> Result<Opened, MeshError> {
    let mut o = Opened::default();
    for g in range {
        let t = (g / 2) % topics;
        if g % 2 == 0 {
            o.writers.push((t, mesh.writer(layout_topic(prefix, t))?));
        } else {
            o.readers.push((t, mesh.reader(layout_topic(prefix, t))?));
        }
    }
    Ok(o)
}

/// Opens `per` endpoints on each of `meshes` at once (one thread per node), node `i` the
/// layout indices `i * per..(i + 1) * per`.
pub fn open_all(
    meshes: &[Mesh],
    prefix: &str,
    per: usize,
    topics: usize,
) -> Result<Vec<Opened>, RunError> {
    std::thread::scope(|s| {
        let handles: Vec<_> = meshes
            .iter()
            .enumerate()
            .map(|(i, m)| s.spawn(move || open_layout(m, prefix, i * per..(i + 1) * per, topics)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| RunError::Panicked)?.map_err(mesh_err))
            .collect()
    })
}

/// Every (writer, reader) pair on a common topic, sorted as [`Mesh::topics`] lists matches.
pub fn expected_matches(opened: &[Opened], topics: usize) -> Vec<(EndpointGuid, EndpointGuid)> {
    let mut w: Vec<Vec<EndpointGuid>> = vec![Vec::new(); topics];
    let mut r: Vec<Vec<EndpointGuid>> = vec![Vec::new(); topics];
    for o in opened {
        for (t, x) in &o.writers {
            w[*t].push(x.guid());
        }
        for (t, x) in &o.readers {
            r[*t].push(x.guid());
        }
    }
    let mut pairs = Vec::new();
    for t in 0..topics {
        for a in &w[t] {
            for b in &r[t] {
                pairs.push((*a, *b));
            }
        }
    }
    pairs.sort_unstable();
    pairs
}

/// True when `mesh` lists exactly `expected` as its matches, less the pairs of two
/// endpoints of one other node: that node matches those itself (their samples never cross
/// this one), so a node does not keep them.
pub fn has_exactly(mesh: &Mesh, expected: &[(EndpointGuid, EndpointGuid)]) -> bool {
    let me = &mesh.id().0[..12];
    let topics = mesh.topics();
    let listed = topics.matches();
    let mut want = expected
        .iter()
        .filter(|(w, r)| w[..12] != r[..12] || &w[..12] == me);
    listed.len() == want.clone().count() && listed.iter().all(|p| want.next() == Some(p))
}
