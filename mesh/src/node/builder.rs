//! Building a node: [`MeshBuilder`] (settings from code or TOML, with its `[node]` table),
//! the [`NodeOptions`] that are not protocol settings, and the secured-mesh context made once
//! at [`MeshBuilder::build`]. Owns validation and the construction of a not-yet-started
//! [`Mesh`]; it must not start executors or touch a running node (that is `mod.rs`).

use super::event::{Callback, Event, EventHub};
use super::shared::{NodeShared, SnapshotCell};
use super::{Inner, Mesh, MeshError, RunState};
use crate::config::{ConfigError, MeshConfig};
use crate::crypto::{Identity, IdentityPolicy, PskKeys, SecureContext};
use crate::PeerId;
use shoal_proto::{OverflowPolicy, SlowLinkAction, SlowLinkPolicy};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Settings of the live node that are not protocol settings (those are in [`MeshConfig`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOptions {
    /// Number of data shards. Default 1.
    pub shards: usize,
    /// Pin shard `i` to `cpus[i % len]` and the control plane to the last listed CPU; `None`
    /// (default) leaves every thread unpinned.
    pub pin_cpus: Option<Vec<usize>>,
    /// Niceness of the node's executor threads (shards and control plane), -20..=19; `None`
    /// (default): the niceness of the thread that starts the node. See
    /// [`MeshBuilder::nice`].
    pub nice: Option<i32>,
    /// Address the TCP listener binds (with `MeshConfig::listen_port`). Default `0.0.0.0`.
    pub listen_addr: IpAddr,
    /// What a full outbound queue does. Default [`OverflowPolicy::Block`].
    pub overflow_policy: OverflowPolicy,
    /// Under `Block`: when a congested link is declared slow and what happens to it. Default
    /// [`SlowLinkPolicy::default`] (slow after 1 s, then dropped for until it catches up).
    pub slow_link: SlowLinkPolicy,
    /// Ceiling of the event queue, in events. Default 65536. A ceiling, not an allocation:
    /// the queue's entries are allocated as they fill.
    pub event_queue_capacity: usize,
    /// Ceiling of the payload bytes that queued Message and Sample events hold (each holds
    /// its read buffer until the application drops it). Default 64 MiB. Checked before each
    /// admission, so passed by at most one message (or run) and 64 KiB per shard.
    pub event_queue_bytes: usize,
    /// Ceiling (messages) of the application's ingress queue. Default 4096.
    pub publish_queue_capacity: usize,
    /// How long each executor keeps polling after its last task before it parks, and an
    /// application thread blocked in [`EventReceiver::recv_timeout`] polls the event queue
    /// before it sleeps (default zero: park at once). Trades CPU for latency (both yield the
    /// core to other runnable threads while they poll); see `bench/notes/runtime.md` ("Spin
    /// before park") and `bench/notes/latency.md` ("Latency and throughput between two
    /// processes").
    ///
    /// [`EventReceiver::recv_timeout`]: crate::EventReceiver::recv_timeout
    pub spin_before_park: Duration,
    /// Secured mesh: a link's writer cuts a record, between two frames, once it holds this
    /// many plaintext bytes (a larger frame is a record of its own, up to the receiver's
    /// limit). Smaller records are opened by the receiver while they are still in its cache
    /// and cost more per-record overhead. Default
    /// [`DEFAULT_RECORD_BYTES`](crate::proto::shard::DEFAULT_RECORD_BYTES) (64 KiB).
    pub record_bytes: usize,
}

/// The default of [`NodeOptions::record_bytes`] (BENCHMARKS.md, "Record size").
pub const DEFAULT_RECORD_BYTES: usize = shoal_proto::shard::DEFAULT_RECORD_BYTES;

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            shards: 1,
            pin_cpus: None,
            nice: None,
            listen_addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            overflow_policy: OverflowPolicy::Block,
            slow_link: SlowLinkPolicy::default(),
            event_queue_capacity: 65_536,
            event_queue_bytes: 64 << 20,
            publish_queue_capacity: 4096,
            spin_before_park: Duration::ZERO,
            record_bytes: DEFAULT_RECORD_BYTES,
        }
    }
}

/// Builds a [`Mesh`]: every protocol setting of the v1 wire (`mesh/proto/protocol/v1-wire.md`,
/// through [`MeshConfig`], also loadable with [`MeshConfig::from_toml_str`]) plus the node
/// options.
pub struct MeshBuilder {
    cfg: MeshConfig,
    opts: NodeOptions,
    callbacks: Vec<Callback>,
    id: Option<PeerId>,
}

impl std::fmt::Debug for MeshBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshBuilder")
            .field("cfg", &self.cfg)
            .field("opts", &self.opts)
            .field("callbacks", &self.callbacks.len())
            .finish()
    }
}

/// The `[node]` table of [`MeshBuilder::from_toml_str`].
#[derive(serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct NodeToml {
    shards: usize,
    pin_cpus: Option<Vec<usize>>,
    nice: Option<i32>,
    listen_addr: IpAddr,
    overflow_policy: PolicyName,
    disconnect_after_ms: u64,
    slow_link_after_ms: u64,
    slow_link_action: SlowActionName,
    event_queue_capacity: usize,
    event_queue_bytes: usize,
    publish_queue_capacity: usize,
    spin_before_park_us: u64,
    record_bytes: usize,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum SlowActionName {
    Drop,
    Disconnect,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum PolicyName {
    Block,
    DropNewest,
    Disconnect,
}

impl Default for NodeToml {
    fn default() -> Self {
        let d = NodeOptions::default();
        NodeToml {
            shards: d.shards,
            pin_cpus: d.pin_cpus,
            nice: d.nice,
            listen_addr: d.listen_addr,
            overflow_policy: PolicyName::Block,
            disconnect_after_ms: 5000,
            slow_link_after_ms: d.slow_link.after.as_millis() as u64,
            slow_link_action: SlowActionName::Drop,
            event_queue_capacity: d.event_queue_capacity,
            event_queue_bytes: d.event_queue_bytes,
            publish_queue_capacity: d.publish_queue_capacity,
            spin_before_park_us: d.spin_before_park.as_micros() as u64,
            record_bytes: d.record_bytes,
        }
    }
}

impl MeshBuilder {
    /// An empty builder: default settings, no callbacks ([`Mesh::builder`] is the public way).
    pub(super) fn new() -> Self {
        MeshBuilder {
            cfg: MeshConfig::default(),
            opts: NodeOptions::default(),
            callbacks: Vec::new(),
            id: None,
        }
    }

    /// A builder from TOML: the [`MeshConfig`] keys at top level (see
    /// [`MeshConfig::from_toml_str`]) and the node options in an optional `[node]` table:
    /// `shards`, `pin_cpus = [..]`, `nice`, `listen_addr = "127.0.0.1"`,
    /// `overflow_policy = "block" | "drop_newest" | "disconnect"`, `disconnect_after_ms`
    /// (default 5000), `slow_link_after_ms` (default 1000), `slow_link_action = "drop" |
    /// "disconnect"` (see [`SlowLinkPolicy`]), `event_queue_capacity`, `event_queue_bytes`,
    /// `publish_queue_capacity`, `spin_before_park_us`, `record_bytes`. The topics
    /// settings are the `[topics]` table of [`MeshConfig`] (see
    /// [`TopicsConfig`](crate::topics::TopicsConfig): announce period, lease, every table's
    /// admission limit, locator allow/deny lists and gates; also settable with
    /// [`topics`](Self::topics)). Missing keys keep their defaults; unknown keys are errors.
    pub fn from_toml_str(text: &str) -> Result<MeshBuilder, MeshError> {
        let bad = |e: &dyn std::fmt::Display| MeshError::Config(ConfigError::Toml(e.to_string()));
        let mut table: toml::Table = text.parse().map_err(|e| bad(&e))?;
        let node: NodeToml = match table.remove("node") {
            Some(v) => v.try_into().map_err(|e| bad(&e))?,
            None => NodeToml::default(),
        };
        let cfg = MeshConfig::from_toml_str(&toml::to_string(&table).map_err(|e| bad(&e))?)?;
        let overflow_policy = match node.overflow_policy {
            PolicyName::Block => OverflowPolicy::Block,
            PolicyName::DropNewest => OverflowPolicy::DropNewest,
            PolicyName::Disconnect => OverflowPolicy::Disconnect {
                after: Duration::from_millis(node.disconnect_after_ms),
            },
        };
        Ok(Mesh::builder().config(cfg).options(NodeOptions {
            shards: node.shards,
            pin_cpus: node.pin_cpus,
            nice: node.nice,
            listen_addr: node.listen_addr,
            overflow_policy,
            slow_link: SlowLinkPolicy {
                after: Duration::from_millis(node.slow_link_after_ms),
                action: match node.slow_link_action {
                    SlowActionName::Drop => SlowLinkAction::Drop,
                    SlowActionName::Disconnect => SlowLinkAction::Disconnect,
                },
            },
            event_queue_capacity: node.event_queue_capacity,
            event_queue_bytes: node.event_queue_bytes,
            publish_queue_capacity: node.publish_queue_capacity,
            spin_before_park: Duration::from_micros(node.spin_before_park_us),
            record_bytes: node.record_bytes,
        }))
    }

    /// Replaces every mesh setting (e.g. from [`MeshConfig::from_toml_str`]).
    pub fn config(mut self, cfg: MeshConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// Replaces the node options.
    pub fn options(mut self, opts: NodeOptions) -> Self {
        self.opts = opts;
        self
    }

    shoal_proto::mesh_config_setters!(cfg);

    /// Adds a static peer (`host:port`, kept connected forever, never Lost).
    pub fn static_peer(mut self, endpoint: impl Into<String>) -> Self {
        self.cfg.static_peers.push(endpoint.into());
        self
    }

    /// Adds a seed peer (`host:port`, dialed at start and while isolated).
    pub fn seed_peer(mut self, endpoint: impl Into<String>) -> Self {
        self.cfg.seed_peers.push(endpoint.into());
        self
    }

    /// Number of data shards (default 1).
    pub fn shards(mut self, n: usize) -> Self {
        self.opts.shards = n;
        self
    }

    /// Keeps every executor of the node polling for `spin` after its last task before it
    /// parks, and a thread blocked in [`EventReceiver::recv_timeout`] polling the event
    /// queue for as long before it sleeps (default zero). Cuts wake-up latency at the cost
    /// of busy cores; see [`NodeOptions::spin_before_park`].
    ///
    /// [`EventReceiver::recv_timeout`]: crate::EventReceiver::recv_timeout
    pub fn spin_before_park(mut self, spin: Duration) -> Self {
        self.opts.spin_before_park = spin;
        self
    }

    /// Pins shard `i` to `cpus[i % cpus.len()]` and the control-plane executor to the last
    /// listed CPU (shared with a shard when no CPU is left over). Default: nothing is pinned.
    pub fn pin_to_cpus(mut self, cpus: Vec<usize>) -> Self {
        self.opts.pin_cpus = Some(cpus);
        self
    }

    /// Runs the node's executor threads (its shards and its control plane, not the
    /// application's threads) at niceness `nice` (-20..=19). Default: the niceness of the
    /// thread that starts the node. A positive value lets the host's other programs have
    /// the cores first when they are all busy, and costs nothing when they are not: 60 nodes
    /// starting at once on 2 cores made a program beside them wake 38.7 ms late at p90, 1.35
    /// ms with the nodes at 10 (their full membership came sooner, every link 1.3× later;
    /// see `tuning/README.md`). Raising priority (negative) needs `CAP_SYS_NICE`; without it
    /// [`Mesh::start`] fails with the runtime's error.
    pub fn nice(mut self, nice: i32) -> Self {
        self.opts.nice = Some(nice);
        self
    }

    /// Address the TCP listener binds (default `0.0.0.0`).
    pub fn listen_addr(mut self, addr: IpAddr) -> Self {
        self.opts.listen_addr = addr;
        self
    }

    /// Full-queue policy (default [`OverflowPolicy::Block`]).
    pub fn overflow_policy(mut self, p: OverflowPolicy) -> Self {
        self.opts.overflow_policy = p;
        self
    }

    /// Under `Block`: how a link that cannot take its share is handled (see
    /// [`SlowLinkPolicy`]).
    pub fn slow_link(mut self, p: SlowLinkPolicy) -> Self {
        self.opts.slow_link = p;
        self
    }

    /// Secured mesh: plaintext bytes after which a writer cuts a record (default
    /// [`DEFAULT_RECORD_BYTES`](crate::proto::shard::DEFAULT_RECORD_BYTES)); see [`NodeOptions::record_bytes`].
    pub fn record_bytes(mut self, bytes: usize) -> Self {
        self.opts.record_bytes = bytes;
        self
    }

    /// Ceiling of the event queue, in events (default 65536; allocated as they fill).
    pub fn event_queue_capacity(mut self, n: usize) -> Self {
        self.opts.event_queue_capacity = n;
        self
    }

    /// Ceiling of the payload bytes queued Message and Sample events hold (default 64 MiB);
    /// see [`NodeOptions::event_queue_bytes`].
    pub fn event_queue_bytes(mut self, bytes: usize) -> Self {
        self.opts.event_queue_bytes = bytes;
        self
    }

    /// Ceiling of the application's ingress queue, in messages (default 4096).
    pub fn publish_queue_capacity(mut self, n: usize) -> Self {
        self.opts.publish_queue_capacity = n;
        self
    }

    /// Trusts one more identity key (64 hex characters) with a local label; see
    /// `trusted_keys`.
    pub fn trusted_key(mut self, key_hex: impl Into<String>, label: impl Into<String>) -> Self {
        self.cfg
            .trusted_keys
            .push(crate::config::TrustedKey::new(key_hex, label));
        self
    }

    /// Uses this node id instead of a random one. In an identity mesh the id is the hash of
    /// the identity key; a different explicit id is an error at [`build`](Self::build).
    pub fn node_id(mut self, id: PeerId) -> Self {
        self.id = Some(id);
        self
    }

    /// Registers an event callback; see the module docs for the thread it runs on and what it
    /// may do.
    pub fn on_event(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.callbacks.push(Arc::new(f));
        self
    }

    /// Validates the settings and creates the (not yet started) node.
    pub fn build(self) -> Result<Mesh, MeshError> {
        self.cfg.validate()?;
        if self.opts.shards == 0 {
            return Err(MeshError::Option("shards must be at least 1"));
        }
        if self.opts.pin_cpus.as_ref().is_some_and(Vec::is_empty) {
            return Err(MeshError::Option("pin_cpus needs at least one CPU"));
        }
        if self.opts.nice.is_some_and(|n| !(-20..=19).contains(&n)) {
            return Err(MeshError::Option("nice must be in -20..=19"));
        }
        if self.opts.event_queue_bytes == 0 {
            return Err(MeshError::Option("event_queue_bytes must be at least 1"));
        }
        if self.opts.record_bytes == 0 {
            return Err(MeshError::Option("record_bytes must be at least 1"));
        }
        if self.opts.publish_queue_capacity == 0 {
            return Err(MeshError::Option(
                "publish_queue_capacity must be at least 1",
            ));
        }
        let secure = secure_context(&self.cfg)?;
        if !self.cfg.trusted_keys.is_empty() && !self.cfg.requires_identity() {
            tracing::warn!(
                "trusted_keys is set with require_identity = false: peers that show no \
                 identity are still admitted (leave require_identity unset to admit only the \
                 listed keys)"
            );
        }
        let derived = secure
            .as_ref()
            .and_then(|c| c.identity())
            .map(Identity::node_id);
        let me = match (derived, self.id.filter(|id| !id.is_zero())) {
            (Some(derived), Some(configured)) if configured != derived => {
                return Err(MeshError::NodeIdConflict {
                    configured,
                    derived,
                })
            }
            (Some(derived), _) => derived,
            (None, Some(id)) => id,
            (None, None) => PeerId::random(),
        };
        let shards = self.opts.shards;
        let ns = Arc::new(NodeShared {
            me,
            policy: self.opts.overflow_policy,
            slow_link: self.opts.slow_link,
            record_bytes: self.opts.record_bytes,
            shards,
            counters: (0..=shards).map(|_| Arc::default()).collect(),
            hub: Arc::new(
                EventHub::new(
                    self.opts.event_queue_capacity,
                    self.opts.event_queue_bytes,
                    self.callbacks,
                )
                .with_receive_spin(self.opts.spin_before_park),
            ),
            snapshot: SnapshotCell::new(),
            connected: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            unflushed_discarded: std::sync::atomic::AtomicU64::new(0),
            shard_task_panics: std::sync::atomic::AtomicU64::new(0),
            shard_task_busy_us: std::sync::atomic::AtomicU64::new(0),
            shard_task_long_polls: std::sync::atomic::AtomicU64::new(0),
            forwarding: Default::default(),
            epoch: Instant::now(),
            cfg: self.cfg,
            secure: secure.map(|c| RwLock::new(Arc::new(c))),
            trust_changed: event_listener::Event::new(),
            names: Mutex::new(ahash::AHashMap::new()),
            discovery_stats: Mutex::new(Default::default()),
        });
        Ok(Mesh {
            inner: Arc::new(Inner {
                ns,
                opts: self.opts,
                publish: OnceLock::new(),
                cmd: OnceLock::new(),
                listen_port: AtomicU16::new(0),
                state: Mutex::new(RunState::Built),
            }),
        })
    }
}

/// The handshake context of a secured configuration (`None` for a plaintext mesh): PSK keys,
/// and in an identity mesh the identity (loaded or created once here) and the trust policy.
fn secure_context(cfg: &MeshConfig) -> Result<Option<SecureContext>, MeshError> {
    if !cfg.secured() {
        return Ok(None);
    }
    let keys = PskKeys::derive(cfg.psk.as_bytes()).map_err(|_| MeshError::NotSecured)?;
    let ctx = SecureContext::new(keys, cfg.group_name.as_bytes())?
        .with_max_message_bytes(cfg.max_message_bytes as usize)
        .with_record_suite(cfg.record_suite);
    tracing::info!(
        record_suite = cfg.record_suite.name(),
        offers_aes = ctx.offers_aes(),
        aes_instructions = shoal_proto::crypto::aes_accelerated(),
        "secured mesh: record suite"
    );
    let identity = if let Some(path) = &cfg.identity_file {
        Some(crate::identity_file::load_or_create(
            path,
            &cfg.node_name,
            &mut rand::rngs::OsRng,
        )?)
    } else if !cfg.identity_seed_hex.is_empty() {
        Some(Identity::from_seed_hex(
            &cfg.identity_seed_hex,
            &cfg.node_name,
        )?)
    } else {
        None
    };
    let Some(identity) = identity else {
        return Ok(Some(ctx));
    };
    let policy = if cfg.trusted_keys.is_empty() {
        IdentityPolicy::open(cfg.requires_identity())
    } else {
        IdentityPolicy::allowlist(cfg.parsed_trusted_keys()?, cfg.requires_identity())
    };
    tracing::info!(id = %identity.node_id(), name = identity.name(), "identity loaded");
    Ok(Some(ctx.with_identity(identity, policy)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_ceilings_are_refused_at_build() {
        let e = Mesh::builder().event_queue_bytes(0).build().unwrap_err();
        assert!(e.to_string().contains("event_queue_bytes"), "{e}");
        let e = Mesh::builder()
            .publish_queue_capacity(0)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("publish_queue_capacity"), "{e}");
    }

    #[test]
    fn toml_form_sets_mesh_and_node_settings() {
        let b = MeshBuilder::from_toml_str(
            "group_name = \"lab\"\nheartbeat_interval_ms = 250\nstatic_peers = [\"10.0.0.1:7000\"]\n\
             [node]\nshards = 2\nlisten_addr = \"127.0.0.1\"\noverflow_policy = \"disconnect\"\n\
             disconnect_after_ms = 750\nevent_queue_bytes = 1048576\nrecord_bytes = 16384\n",
        )
        .unwrap();
        assert_eq!(b.cfg.group_name, "lab");
        assert_eq!(b.cfg.heartbeat_interval, Duration::from_millis(250));
        assert_eq!(b.cfg.static_peers, vec!["10.0.0.1:7000".to_owned()]);
        assert_eq!(b.opts.shards, 2);
        assert_eq!(b.opts.listen_addr, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(
            b.opts.overflow_policy,
            OverflowPolicy::Disconnect {
                after: Duration::from_millis(750)
            }
        );
        assert_eq!(
            b.opts.event_queue_capacity,
            NodeOptions::default().event_queue_capacity
        );
        assert_eq!(b.opts.event_queue_bytes, 1 << 20);
        assert_eq!(b.opts.record_bytes, 16 * 1024);
        let d = MeshBuilder::from_toml_str("").unwrap();
        assert_eq!(d.opts, NodeOptions::default());
        assert_eq!(d.cfg, MeshConfig::default());
    }

    #[test]
    fn the_topics_table_and_setter_reach_the_node() {
        use crate::topics::TopicsConfig;
        let b = MeshBuilder::from_toml_str(
            "[topics]\nannounce_period_ms = 250\nparticipant_lease_ms = 3000\n\
             max_local_endpoints = 7\nmax_remote_writers = 9\nlocators_deny = [\"10.9.0.0/16\"]\n\
             locators_loopback = false\n[node]\nshards = 2\n",
        )
        .unwrap();
        let t = &b.cfg.topics;
        assert_eq!(t.announce_period, Duration::from_millis(250));
        assert_eq!(t.participant_lease, Duration::from_millis(3000));
        assert_eq!((t.max_local_endpoints, t.max_remote_writers), (7, 9));
        assert_eq!(t.locators_deny, vec!["10.9.0.0/16".to_owned()]);
        assert!(!t.locators_loopback);
        assert_eq!(b.opts.shards, 2);
        let m = b.build().unwrap();
        assert_eq!(m.config().topics.max_local_endpoints, 7);
        let cfg = TopicsConfig {
            max_matches: 11,
            ..TopicsConfig::default()
        };
        let m = Mesh::builder().topics(cfg.clone()).build().unwrap();
        assert_eq!(m.config().topics, cfg);
        for bad in [
            "[topics]\nannounce_period_ms = 0\n",
            "[topics]\nannounce_period_ms = 5000\nparticipant_lease_ms = 1000\n",
            "[topics]\nmax_local_endpointz = 1\n",
            "[topics]\nlocators_allow = [\"not a prefix\"]\n",
        ] {
            assert!(
                matches!(MeshBuilder::from_toml_str(bad), Err(MeshError::Config(_))),
                "{bad:?} must be rejected"
            );
        }
        let bad = TopicsConfig {
            max_matches: 0,
            ..TopicsConfig::default()
        };
        assert!(matches!(
            Mesh::builder().topics(bad).build(),
            Err(MeshError::Config(_))
        ));
    }

    #[test]
    fn toml_form_rejects_unknown_keys_and_bad_values() {
        for bad in [
            "[node]\nshardz = 2\n",
            "[node]\noverflow_policy = \"drop_oldest\"\n",
            "heartbeat_timeout_ms = 10\n",
            "no_such_key = 1\n",
        ] {
            assert!(
                matches!(MeshBuilder::from_toml_str(bad), Err(MeshError::Config(_))),
                "{bad:?} must be rejected"
            );
        }
        assert!(Mesh::builder().psk("secret").build().is_ok());
        assert!(matches!(
            Mesh::builder().identity_seed_hex("11".repeat(32)).build(),
            Err(MeshError::Config(ConfigError::IdentityWithoutPsk(
                "identity_seed_hex"
            )))
        ));
        assert!(matches!(
            Mesh::builder()
                .psk("k")
                .identity_seed_hex("11".repeat(32))
                .node_id(PeerId([7; 16]))
                .build(),
            Err(MeshError::NodeIdConflict { .. })
        ));
        let m = Mesh::builder()
            .psk("k")
            .identity_seed_hex("11".repeat(32))
            .node_name("eleven")
            .build()
            .unwrap();
        // Seed 11x32 gives this node id (vector V3; `mesh/proto/protocol/secured.md`, Identity).
        assert_eq!(m.id().to_string(), "c0c5ecd7f1ee33f526dd27d34c3e1daa");
        assert_eq!(m.node_name(m.id()).as_deref(), Some("eleven"));
        assert!(m.identity_public_key().is_some());
        assert!(matches!(
            Mesh::builder().build().unwrap().revoke_key(&[1; 32]),
            Err(MeshError::NotSecured)
        ));
        assert!(matches!(
            Mesh::builder().shards(0).build(),
            Err(MeshError::Option(_))
        ));
    }
}
