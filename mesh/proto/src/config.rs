//! Mesh settings: every knob of the v1 wire (`mesh/proto/protocol/v1-wire.md`) with the C++
//! library's defaults, plus the few ceilings Shoal adds so that every table stays bounded.
//!
//! **Owns:** the settings of a mesh, their defaults, validation and TOML form. **Must not touch:**
//! the node's runtime options (shards, queues, policies: `shoal-mesh`'s builder).
//!
//! Length: one settings struct with a doc comment per setting, its defaults, its builder (one
//! setter per setting, by a macro the node's builder shares) and one validation; about a third of the file is docs, the tests are in
//! `config/tests.rs`.
//!
//! Loadable from TOML (`#[serde(default)]`, so a file names only what it changes; durations are
//! written in milliseconds with an `_ms` suffix), buildable with [`MeshConfigBuilder`], and
//! checked by [`MeshConfig::validate`].
//!
//! Membership timing follows the C++ library's config header (its documented defaults table
//! does not list it): `membership_interval_ms = 2000` (a node re-floods its adjacency record
//! this often even when nothing changed, so records lost to a cut link are repaired within one
//! interval) and `membership_timeout_ms = 8000` (four intervals: a vanished node leaves the
//! member set after at most this long, and three lost floods in a row do not make a live member
//! flap).
//!
//! `require_identity` follows the C++ library too: unset, it is on exactly when this node has
//! an identity (an identity mesh refuses identity-less peers unless told otherwise).
//!
//! Settings the C++ library does not have and Shoal had to pick:
//! - `announce_idle_interval_ms = 2000`: the beacon interval once nothing changed for five
//!   `announce_interval`s (no peer discovered, no link lost), capped so that two announces
//!   fit in `peer_lost_timeout` (`scouting`).
//! - `max_peers = 1024`, `max_membership_records = 4096`: ceilings for the peer table and the
//!   membership store (the C++ library is tuned for tens of nodes);
//!   `max_membership_neighbours = 1024`: the longest neighbour list a record may carry.
//! - `require_signed_membership = false`: in identity mode, unsigned Membership records are
//!   still taken from links that cannot sign (multimaster peers) about origins not known to
//!   sign; true refuses them all (`mesh/proto/protocol/signed-records.md`).
//! - `new_peer_rate = 50`, `new_peer_rate_per_source = 10`: how many never-linked peers the
//!   node admits from announces and dials per second, node-wide and per source address (see
//!   [`crate::admission`]). A legitimate mesh meets a handful of new peers per second;
//!   a flood of fake announces gets at most this many outbound connections.
//! - `max_pending_handshakes = 256`: inbound connections that have not finished their
//!   handshake. When full, a new connection evicts the oldest such connection from the source
//!   address holding the most of them (a peer completes its Hello within a round trip; an
//!   idle socket only waits for the handshake timeout), so idle sockets cannot lock legitimate
//!   peers out.
//! - `stop_grace_ms = 1000`: how long a stopping node lets a link still sending its queue (to
//!   a peer reading slower than the node wrote) run before closing it; a drained link closes
//!   at once. A link that sent its FIN stays open, reading, until the peer closes too, for at
//!   most `heartbeat_timeout` (or the stop grace): closing it with the peer's frames unread
//!   would reset the connection and lose what the peer had received but not read yet.
//! - `reverse_path_check = true`: a Data frame of a known origin X is taken only from a link
//!   toward X in the membership graph ([`crate::reverse_path`]), so a stranger cannot spend
//!   X's next message ids (issue 24). It costs the copies that come around other paths while
//!   a link is down or lossy (the fault suite's numbers are in BENCHMARKS.md); `false` takes
//!   every link's copy, as the v1 wire does. The same switch governs Discovery frames, whose
//!   origin's frames are taken only from links toward it over the topic-capable nodes
//!   (`topics::core`).
//! - `record_suite = "auto"`: a secured node offers AES-256-GCM records to Shoal peers when
//!   its CPU has AES instructions, and a link uses them when both sides offered
//!   ([`crate::crypto::suite`]); multimaster links stay ChaCha20-Poly1305.
//! - `reverse_path_settle_ms = 4000`: for this long after an origin's links change, its Data
//!   frames are taken from any link (the dedup cache drops the second copy): nodes whose
//!   graph the change has not reached yet judge by the old one, and two neighbours judging
//!   by different graphs could each refuse the only copy the other sends (a ring booting lost
//!   broadcasts that way). Two membership intervals: a record lost on the way is re-flooded
//!   within one.
//! - `membership_flood_gap_ms = 0`: when above zero, a node floods its own membership record
//!   for its first two link changes at once, then at most once per gap (carrying every change
//!   since); 100 halves the time a 40-process full mesh on one host takes to form
//!   (`bench/notes/membership-scale.md`), but routes meanwhile judge by the older graph.
//! - `membership_relay_gap_ms = 100`: between Shoal nodes (digest links away from any
//!   multimaster node), the versions of one origin's record that follow its last relay within
//!   this gap are relayed as one, the newest, at the gap's end (a node linking to 60 others
//!   mints a version per link; relayed at once, 87 % of the copies arrived after a newer
//!   one: `bench/notes/start60.md`). 0 relays every version at once. The price: in a sparse
//!   graph forming at once, a member set far from an origin is exact up to one gap later
//!   (a simulated 64-node 4-regular boot: 11 → 127 ms); joins, crashes and cuts unchanged.
//! - `membership_digest = true`: between Shoal nodes that both set it, a node floods its own
//!   membership record only when it changes and neighbours compare digests of their stores
//!   every `membership_interval` to repair what was missed; records of reachable nodes do not
//!   expire. Links to multimaster peers (and to Shoal peers with it off) keep every periodic
//!   re-flood (`crate::membership::sync`). False: every link floods as mesh-v1 does.
//! - `relay_pruning = true`: with the check on, a node relaying a broadcast of origin X skips
//!   the links to neighbours no farther from X than itself (they would refuse the copy; never
//!   a multimaster peer or a neighbour without a record; while X's links settle, only X, its
//!   neighbours and the skips already in force), so a full mesh carries each broadcast once
//!   per link from its first table on (the 3- and 6-node demos: 0.01 % duplicates against
//!   95-390 % flooding, 1.4-5× the messages; `bench/notes/relay-pruning.md`). A neighbour
//!   behind a link its origin declared slow is taken off the origin's record meanwhile, so
//!   the relays carry it the origin's frames (`control::slow`, whatever this setting). On the
//!   fault suite, subscribers behind 30 %-lossy links got 0.98-0.99× (61 interleaved pairs)
//!   of what flooding delivers them, whose relays carry copies of what the origin drops for
//!   them all along; since a relapsing slow link is judged on its pace, 0.994 ± 0.007× (30
//!   pairs). False: every link relays every broadcast as mesh-v1 does.
//! - `relay_redundancy = 3`: with `relay_pruning`, of the relays of an origin X's broadcasts
//!   toward a node N (the nodes linked to N one hop nearer to X), the first three by
//!   `reverse_path::relay_rank` send N X's broadcasts and the others skip it; every node
//!   ranks alike, so no word is exchanged. A neighbour X unlisted for its slow link used to
//!   get a copy from every relay (n - 2 copies of each frame in a full mesh of n, the load of
//!   flooding on the one node already behind), and in a sparse mesh most nodes a copy from
//!   each neighbour one hop nearer (simulated, 32 nodes of degree 6: 2.32 copies per
//!   delivery, 2.10 with three relays, 1.00 with one). Three are what the six-host fault
//!   suite has toward such a subscriber, so its figures stand (two cost its 30 %-lossy
//!   subscribers ~2 % on a loaded machine: `bench/notes/relay-pruning.md`), and the spares
//!   carry on while a relay's link is lossy or dark. Discovery frames go from the first relay
//!   only once the origin's paths settled (a lost cycle is repaired by the next: an idle
//!   sparse mesh's cycles crossed ~2 links into each node). 0: every relay sends, as before,
//!   Discovery frames too. Nodes of a mesh may differ: N gets at least the smallest
//!   setting's copies.
//! - `max_links = 0`: no cap, every discovered peer is dialed (the full mesh multicast
//!   discovery builds). Above zero, a node keeps about that many links to discovered Shoal
//!   peers and knows the others without dialing them ([`crate::degree`] has the rules: it
//!   dials while under the cap, refuses inbound links at the cap plus a slack, heals a
//!   partition whatever the cap). 1 is refused ([`ConfigError::MaxLinksTooSmall`]): nodes
//!   that each keep one link pair off and no mesh of three or more forms.
//! - `tcp_congestion = ""`: the host's default congestion control on every mesh connection.
//!   A name (`"bbr"`, `"cubic"`, `"reno"`: those in
//!   `/proc/sys/net/ipv4/tcp_available_congestion_control`) is set on the listener and every
//!   connection (`TCP_CONGESTION`; a process without `CAP_NET_ADMIN` may only choose those in
//!   `tcp_allowed_congestion_control`); one the kernel refuses makes the node's start fail.
//!   On the fault suite's 30 %-lossy links the subscribers got 0.86-0.89x under CUBIC (most
//!   distributions' default) what they got under BBR (`bench/notes/relay-pruning.md`).

use serde::Deserialize;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Why a configuration was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The TOML text did not parse or had a field of the wrong type.
    #[error("invalid TOML: {0}")]
    Toml(String),
    /// A duration that must be positive is zero.
    #[error("{0} must be greater than zero")]
    ZeroDuration(&'static str),
    /// A count or size that must be positive is zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// The group name does not fit a wire `str` (255 bytes).
    #[error("group_name is {0} bytes, at most 255 fit on the wire")]
    GroupNameTooLong(usize),
    /// `heartbeat_timeout` must exceed `heartbeat_interval`, or every idle link would die.
    #[error("heartbeat_timeout ({timeout:?}) must exceed heartbeat_interval ({interval:?})")]
    HeartbeatTimeoutTooShort {
        /// Configured interval.
        interval: Duration,
        /// Configured timeout.
        timeout: Duration,
    },
    /// `membership_timeout` must exceed `membership_interval`, or live records would expire.
    #[error("membership_timeout ({timeout:?}) must exceed membership_interval ({interval:?})")]
    MembershipTimeoutTooShort {
        /// Configured interval.
        interval: Duration,
        /// Configured timeout.
        timeout: Duration,
    },
    /// `reconnect_base` is above `reconnect_max`.
    #[error("reconnect_base ({base:?}) exceeds reconnect_max ({max:?})")]
    ReconnectBaseAboveMax {
        /// Configured base.
        base: Duration,
        /// Configured maximum.
        max: Duration,
    },
    /// `max_message_bytes` cannot even hold a Data header.
    #[error("max_message_bytes {0} is below the 58-byte Data frame header")]
    MaxMessageTooSmall(u32),
    /// A static or seed endpoint is not `host:port`.
    #[error("endpoint {0:?} is not host:port")]
    BadEndpoint(String),
    /// An identity (or an identity setting) is configured without a PSK: the identity mesh
    /// is a secured mesh.
    #[error("{0} requires a psk (the identity mesh is a secured mesh)")]
    IdentityWithoutPsk(&'static str),
    /// Trust settings (`trusted_keys`, `require_identity`) without an identity of our own:
    /// peers' identities are only verified by a node that has one.
    #[error("{0} requires an identity (identity_file or identity_seed_hex)")]
    TrustWithoutIdentity(&'static str),
    /// Both `identity_file` and `identity_seed_hex` are set.
    #[error("identity_file and identity_seed_hex are exclusive")]
    IdentityTwice,
    /// `identity_seed_hex` is not 64 hex characters.
    #[error("identity_seed_hex must be 64 hex characters")]
    BadIdentitySeed,
    /// A `trusted_keys` entry is not 64 hex characters of a valid Ed25519 key.
    #[error("trusted key {0:?} is not 64 hex characters of a valid Ed25519 key")]
    BadTrustedKey(String),
    /// `node_name` does not fit a wire `str` (255 bytes).
    #[error("node_name is {0} bytes, at most 255 fit on the wire")]
    NodeNameTooLong(usize),
    /// `record_suite` is set (not `auto`) in a plaintext mesh, which has no records.
    #[error("record_suite = {0:?} requires a psk (records exist only in a secured mesh)")]
    SuiteWithoutPsk(&'static str),
    /// `tcp_congestion` is not a kernel algorithm name (1-15 of `a-z`, `0-9`, `_`).
    #[error("tcp_congestion {0:?} is not an algorithm name (1-15 of a-z, 0-9, _)")]
    BadTcpCongestion(String),
    /// `max_links = 1`: every node would keep one link, pairs form and nothing joins them.
    #[error("max_links = 1 cannot connect more than two nodes: use 0 (no cap) or at least 2")]
    MaxLinksTooSmall,
    /// The `[topics]` table is invalid.
    #[error(transparent)]
    Topics(#[from] crate::topics::TopicsConfigError),
}

/// One `trusted_keys` entry: an identity public key and the local label shown for it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedKey {
    /// The Ed25519 public key, 64 hex characters.
    pub key: String,
    /// Local label (for logs and display; not sent on the wire).
    #[serde(default)]
    pub label: String,
}

impl TrustedKey {
    /// An entry from a hex key and a label.
    pub fn new(key: impl Into<String>, label: impl Into<String>) -> TrustedKey {
        TrustedKey {
            key: key.into(),
            label: label.into(),
        }
    }
}

/// All settings of one mesh node. See the module docs for the values Shoal picked itself.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MeshConfig {
    /// Mesh group name; nodes of different groups ignore each other. Default `"default"`.
    pub group_name: String,
    /// Pre-shared key; empty (the default) means a plaintext mesh, anything else a secured one.
    pub psk: String,
    /// TCP listen port; 0 (default) lets the OS pick one, which is then announced.
    pub listen_port: u16,
    /// Whether multicast discovery runs at all. Default true.
    pub scouting: bool,
    /// Discovery multicast group. Default 239.255.42.99.
    pub multicast_group: Ipv4Addr,
    /// Discovery UDP port. Default 45454.
    pub multicast_port: u16,
    /// IP TTL of announces. Default 1 (stay on the local link).
    pub multicast_ttl: u32,
    /// Interface address used to join and send multicast; `None` lets the kernel choose
    /// (name 127.0.0.1 explicitly for loopback-only meshes).
    pub multicast_interface: Option<Ipv4Addr>,
    /// Mean period between announces (each is jittered by ±20%). Default 1000 ms.
    #[serde(rename = "announce_interval_ms", with = "millis")]
    pub announce_interval: Duration,
    /// Mean period between announces once nothing changed for five `announce_interval`s
    /// (no peer discovered, no link lost): a linked mesh needs no beacons, a newcomer's
    /// own make the others dial it. Used within `[announce_interval,
    /// peer_lost_timeout / 2.4]` ([`idle_beacon_interval`](Self::idle_beacon_interval)):
    /// two announces, jittered up by a fifth, still fit in `peer_lost_timeout`. Default
    /// 2000 ms.
    #[serde(rename = "announce_idle_interval_ms", with = "millis")]
    pub announce_idle_interval: Duration,
    /// A discovered peer with no announce for this long is Lost. Default 5000 ms.
    #[serde(rename = "peer_lost_timeout_ms", with = "millis")]
    pub peer_lost_timeout: Duration,
    /// How long a stopping node lets its links send what is queued on them (and say
    /// Goodbye) before it closes them; what is still queued then is discarded and counted
    /// (`dropped_link_closed`). A link whose queue drained closes at once, so this is only
    /// waited out for a peer that reads slower than the node wrote. Default 1000 ms.
    #[serde(rename = "stop_grace_ms", with = "millis")]
    pub stop_grace: Duration,
    /// A link with nothing sent for this long sends a Heartbeat. Default 1000 ms.
    #[serde(rename = "heartbeat_interval_ms", with = "millis")]
    pub heartbeat_interval: Duration,
    /// A link with nothing received for this long is dead. Default 3000 ms. While its peer
    /// still acknowledges new data (a lossy path whose retransmissions delay the peer's
    /// frames, not a dead one), up to [`crate::link::DELIVERING_GRACE`] times this.
    #[serde(rename = "heartbeat_timeout_ms", with = "millis")]
    pub heartbeat_timeout: Duration,
    /// A connection not through its handshake after this long is dropped. Default 2000 ms.
    #[serde(rename = "handshake_timeout_ms", with = "millis")]
    pub handshake_timeout: Duration,
    /// First reconnect delay; doubled per failed attempt. Default 500 ms.
    #[serde(rename = "reconnect_base_ms", with = "millis")]
    pub reconnect_base: Duration,
    /// Ceiling of the reconnect delay (before jitter). Default 30000 ms.
    #[serde(rename = "reconnect_max_ms", with = "millis")]
    pub reconnect_max: Duration,
    /// TTL of originated messages. Default 8.
    pub initial_ttl: u8,
    /// How long a message id is remembered for deduplication. Default 30000 ms.
    #[serde(rename = "dedup_ttl_ms", with = "millis")]
    pub dedup_ttl: Duration,
    /// Ceiling of the dedup cache (per node; split across shards). Default 100000.
    pub max_dedup_entries: usize,
    /// Ceiling of the dedup cache's per-stream floors (per node; split across shards), which
    /// keep a copy delayed past `max_dedup_entries` / `dedup_ttl` from being delivered twice
    /// (see `proto::dedup`). Default 65536 (40 bytes each).
    pub max_dedup_streams: usize,
    /// Ceiling of one link's outbound queue. Default 8 MiB.
    pub max_outbound_queue_bytes: usize,
    /// Largest accepted frame `length`. Default 16 MiB.
    pub max_message_bytes: u32,
    /// Period of the unconditional re-flood of the own adjacency record. Default 2000 ms.
    #[serde(rename = "membership_interval_ms", with = "millis")]
    pub membership_interval: Duration,
    /// An adjacency record not refreshed for this long expires. Default 8000 ms (the C++
    /// library's documented default).
    #[serde(rename = "membership_timeout_ms", with = "millis")]
    pub membership_timeout: Duration,
    /// Ceiling of the peer table (discovered, connected and static peers). Default 1024.
    /// When full, peers that were only announced and never linked give way to new ones.
    pub max_peers: usize,
    /// Never-linked peers admitted from announces and dialed per second, node-wide (a
    /// bucket of one second's worth). Default 50.
    pub new_peer_rate: u32,
    /// Like `new_peer_rate`, per source IP address of the announces. Default 10. A new peer
    /// that then completes a handshake from that address under its announced id gives the
    /// source its token back (several nodes of one host; see [`crate::admission`]).
    pub new_peer_rate_per_source: u32,
    /// Ceiling of inbound connections still in their handshake; when full the oldest one from
    /// the busiest source address is closed for the new one. Default 256.
    pub max_pending_handshakes: usize,
    /// Ceiling of the membership record store. Default 4096.
    pub max_membership_records: usize,
    /// `host:port` endpoints kept connected forever (re-resolved on every attempt).
    pub static_peers: Vec<String>,
    /// `host:port` bootstrap endpoints, dialed at start and while the node is isolated.
    pub seed_peers: Vec<String>,
    /// Identity mesh: file holding this node's Ed25519 seed as 64 hex characters, created
    /// with mode 0600 and a random seed when absent. Requires a PSK.
    pub identity_file: Option<std::path::PathBuf>,
    /// Identity mesh: the seed inline as 64 hex characters (exclusive with `identity_file`).
    /// Secret: never logged.
    pub identity_seed_hex: String,
    /// The name this node signs and sends with its identity (at most 255 bytes), and the
    /// name its topics participant record announces to observers in any mode (empty: its
    /// id in hex there).
    pub node_name: String,
    /// Identity keys this node accepts, with local labels; empty accepts any key. Requires
    /// an identity. The list applies to peers that show an identity; a peer that shows none
    /// is refused too unless `require_identity` is set to false (`secured.md`, "Identity").
    pub trusted_keys: Vec<TrustedKey>,
    /// Refuse peers that show no identity. Unset (the default) means: refuse them exactly when
    /// this node has an identity, as the C++ library does; `Some(false)` admits identity-less
    /// peers into an identity mesh (PSK only). `Some(true)` requires an identity of our own.
    /// See [`requires_identity`](Self::requires_identity).
    pub require_identity: Option<bool>,
    /// Ceiling of the book of identities learned from gossiped identity records, and of the
    /// book of signing keys learned from signed records (each). Default 4096.
    pub max_identity_records: usize,
    /// Topics (discovery, matching, routes): the `[topics]` table.
    pub topics: crate::topics::TopicsConfig,
    /// Identity mode: refuse every unsigned Membership record (type 6), even a multimaster
    /// neighbour's own. Default false: an unsigned record is taken from a link that cannot
    /// sign (a multimaster peer, a Shoal peer without identity) about an origin not known to
    /// sign (`mesh/proto/protocol/signed-records.md`). Set it in a mesh of Shoal identity
    /// nodes only. Requires an identity.
    pub require_signed_membership: bool,
    /// Ceiling of the neighbours one Membership record may list; a longer record is refused
    /// (counted in `membership_records_refused`), the link stays. Default 1024 (the wire
    /// allows 65 535); with `max_membership_records` it bounds the store to
    /// `max_membership_records × max_membership_neighbours × 16` bytes.
    pub max_membership_neighbours: usize,
    /// Take a Data or Discovery frame of a known origin only from a link toward that origin
    /// in the membership graph (see the module docs). Default true.
    pub reverse_path_check: bool,
    /// Secured mesh: which record suite this node offers Shoal peers, `"auto"` (the default:
    /// AES-256-GCM when the CPU has AES instructions), `"chacha20-poly1305"` (never offer
    /// AES: every link ChaCha20-Poly1305) or `"aes-256-gcm"` (offer it even without AES
    /// instructions). A link is AES-256-GCM only when both ends offered it; links to
    /// multimaster peers are always ChaCha20-Poly1305.
    pub record_suite: crate::crypto::RecordSuitePolicy,
    /// How long an origin whose links changed still takes Data frames from links not toward
    /// it, while the change reaches every node's graph ([`crate::reverse_path::PathTable`]).
    /// Default 4000 ms (two default membership intervals: a record lost on the way is
    /// re-flooded within one); keep it at least two `membership_interval`s.
    #[serde(rename = "reverse_path_settle_ms", with = "millis")]
    pub reverse_path_settle: Duration,
    /// With `reverse_path_check`: a relay of a broadcast skips the neighbours no farther from
    /// its origin than itself, which would refuse the copy (see the module docs and
    /// [`crate::reverse_path::PathTable`]); a relay of a topic Discovery frame skips the same
    /// links. Default true; false sends on every link as mesh-v1 does (a duplicate per extra
    /// link for every broadcast, and about 0.5 % more for subscribers behind lossy links: see
    /// the module docs).
    pub relay_pruning: bool,
    /// With `relay_pruning`: how many relays carry an origin's broadcasts to a node, of the
    /// nodes linked to it one hop nearer to the origin (the rest skip it; see
    /// [`crate::reverse_path::ReversePaths::spared`]). Default 3 (spares while a relay's link
    /// is lossy or dark; see the module docs); 0: every one of them (a neighbour its origin
    /// unlisted in a full mesh of n nodes then gets n - 2 copies of each frame).
    pub relay_redundancy: usize,
    /// Membership anti-entropy between Shoal nodes (see the module docs and
    /// `crate::membership::sync`): advertised in the Hello extension; default true.
    pub membership_digest: bool,
    /// Least time between two floods of this node's own membership record caused by link
    /// changes, after the first two go out at once ([`crate::membership::FLOOD_GAP`] is the
    /// measured choice for many nodes starting at once). Default 0 (every change floods at
    /// once): pacing delays a node's later link announcements, and routes computed from the
    /// older graph meanwhile refuse topic samples on links they did not expect (a 4-node
    /// full-mesh fan-out lost samples that way).
    #[serde(rename = "membership_flood_gap_ms", with = "millis")]
    pub membership_flood_gap: Duration,
    /// Least time between two relays of one origin's membership record toward quiet digest
    /// links (see the module docs; [`crate::membership::RELAY_GAP`] by default, 0 relays
    /// every version at once).
    #[serde(rename = "membership_relay_gap_ms", with = "millis")]
    pub membership_relay_gap: Duration,
    /// Bounded degree: the links to discovered Shoal peers this node keeps (about; see
    /// [`crate::degree`]). 0 (the default) dials every discovered peer: the full mesh. Above
    /// zero, the other discovered peers are known but not dialed; inbound links are taken up
    /// to the cap plus a slack (`max(1, max_links / 4)`), a node outside this node's component
    /// always (a partition heals). Static peers and multimaster peers are always linked and
    /// not counted. 1 is refused (no mesh of three nodes could form).
    pub max_links: usize,
    /// The congestion control algorithm of every mesh connection (`TCP_CONGESTION`, Linux),
    /// empty (the default) for the host's own. See the module docs: an algorithm the kernel
    /// does not offer this process makes the node's start fail.
    pub tcp_congestion: String,
}

impl Default for MeshConfig {
    fn default() -> Self {
        MeshConfig {
            group_name: "default".to_owned(),
            psk: String::new(),
            listen_port: 0,
            scouting: true,
            multicast_group: Ipv4Addr::new(239, 255, 42, 99),
            multicast_port: 45454,
            multicast_ttl: 1,
            multicast_interface: None,
            announce_interval: Duration::from_millis(1000),
            announce_idle_interval: Duration::from_millis(2000),
            peer_lost_timeout: Duration::from_millis(5000),
            stop_grace: Duration::from_millis(1000),
            heartbeat_interval: Duration::from_millis(1000),
            heartbeat_timeout: Duration::from_millis(3000),
            handshake_timeout: Duration::from_millis(2000),
            reconnect_base: Duration::from_millis(500),
            reconnect_max: Duration::from_millis(30000),
            initial_ttl: 8,
            dedup_ttl: Duration::from_millis(30000),
            max_dedup_entries: 100_000,
            max_dedup_streams: crate::DEFAULT_MAX_STREAMS,
            max_outbound_queue_bytes: 8 * 1024 * 1024,
            max_message_bytes: 16 * 1024 * 1024,
            membership_interval: Duration::from_millis(2000),
            membership_timeout: Duration::from_millis(8000),
            max_peers: 1024,
            new_peer_rate: 50,
            new_peer_rate_per_source: 10,
            max_pending_handshakes: 256,
            max_membership_records: 4096,
            static_peers: Vec::new(),
            seed_peers: Vec::new(),
            identity_file: None,
            identity_seed_hex: String::new(),
            node_name: String::new(),
            trusted_keys: Vec::new(),
            require_identity: None,
            max_identity_records: 4096,
            topics: crate::topics::TopicsConfig::default(),
            require_signed_membership: false,
            max_membership_neighbours: crate::membership::DEFAULT_MAX_NEIGHBOURS,
            reverse_path_check: true,
            record_suite: crate::crypto::RecordSuitePolicy::Auto,
            reverse_path_settle: Duration::from_millis(4000),
            membership_flood_gap: Duration::ZERO,
            membership_relay_gap: crate::membership::RELAY_GAP,
            relay_pruning: true,
            relay_redundancy: 3,
            max_links: 0,
            membership_digest: true,
            tcp_congestion: String::new(),
        }
    }
}

// The PSK must never reach a log line.
impl fmt::Debug for MeshConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeshConfig")
            .field("group_name", &self.group_name)
            .field("secured", &self.secured())
            .field("listen_port", &self.listen_port)
            .field("scouting", &self.scouting)
            .field("multicast_group", &self.multicast_group)
            .field("multicast_port", &self.multicast_port)
            .field("announce_interval", &self.announce_interval)
            .field("announce_idle_interval", &self.announce_idle_interval)
            .field("peer_lost_timeout", &self.peer_lost_timeout)
            .field("stop_grace", &self.stop_grace)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("reconnect_base", &self.reconnect_base)
            .field("reconnect_max", &self.reconnect_max)
            .field("initial_ttl", &self.initial_ttl)
            .field("dedup_ttl", &self.dedup_ttl)
            .field("max_dedup_entries", &self.max_dedup_entries)
            .field("max_dedup_streams", &self.max_dedup_streams)
            .field("membership_interval", &self.membership_interval)
            .field("membership_timeout", &self.membership_timeout)
            .field("static_peers", &self.static_peers)
            .field("seed_peers", &self.seed_peers)
            .field("identity_file", &self.identity_file)
            .field("has_identity", &self.has_identity())
            .field("node_name", &self.node_name)
            .field("trusted_keys", &self.trusted_keys)
            .field("require_identity", &self.requires_identity())
            .field("topics", &self.topics)
            .field("require_signed_membership", &self.require_signed_membership)
            .field("max_membership_neighbours", &self.max_membership_neighbours)
            .field("reverse_path_check", &self.reverse_path_check)
            .field("record_suite", &self.record_suite)
            .field("reverse_path_settle", &self.reverse_path_settle)
            .field("membership_flood_gap", &self.membership_flood_gap)
            .field("membership_relay_gap", &self.membership_relay_gap)
            .field("relay_pruning", &self.relay_pruning)
            .field("relay_redundancy", &self.relay_redundancy)
            .field("max_links", &self.max_links)
            .field("membership_digest", &self.membership_digest)
            .field("tcp_congestion", &self.tcp_congestion)
            .finish_non_exhaustive()
    }
}

impl MeshConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> MeshConfigBuilder {
        MeshConfigBuilder(MeshConfig::default())
    }

    /// Parses TOML text (missing keys keep their defaults) and validates the result.
    pub fn from_toml_str(text: &str) -> Result<MeshConfig, ConfigError> {
        let cfg: MeshConfig = toml::from_str(text).map_err(|e| ConfigError::Toml(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// True when a PSK is set (secured mesh).
    pub fn secured(&self) -> bool {
        !self.psk.is_empty()
    }

    /// True when an identity is configured (identity mesh).
    pub fn has_identity(&self) -> bool {
        self.identity_file.is_some() || !self.identity_seed_hex.is_empty()
    }

    /// Whether peers that show no identity are refused: `require_identity` if set, else
    /// whether this node has an identity.
    pub fn requires_identity(&self) -> bool {
        self.require_identity.unwrap_or_else(|| self.has_identity())
    }

    /// The trusted keys parsed (validated by [`validate`](Self::validate)).
    pub fn parsed_trusted_keys(&self) -> Result<Vec<([u8; 32], String)>, ConfigError> {
        self.trusted_keys
            .iter()
            .map(|t| {
                crate::crypto::parse_public_key_hex(&t.key)
                    .map(|k| (k, t.label.clone()))
                    .map_err(|_| ConfigError::BadTrustedKey(t.key.clone()))
            })
            .collect()
    }

    fn validate_identity(&self) -> Result<(), ConfigError> {
        if self.node_name.len() > crate::crypto::identity::MAX_NAME_LEN {
            return Err(ConfigError::NodeNameTooLong(self.node_name.len()));
        }
        if self.identity_file.is_some() && !self.identity_seed_hex.is_empty() {
            return Err(ConfigError::IdentityTwice);
        }
        if !self.identity_seed_hex.is_empty() {
            let mut seed = zeroize::Zeroizing::new([0u8; 32]);
            hex::decode_to_slice(self.identity_seed_hex.trim(), &mut seed[..])
                .map_err(|_| ConfigError::BadIdentitySeed)?;
        }
        if self.has_identity() && !self.secured() {
            let what = if self.identity_file.is_some() {
                "identity_file"
            } else {
                "identity_seed_hex"
            };
            return Err(ConfigError::IdentityWithoutPsk(what));
        }
        if !self.has_identity() {
            if !self.trusted_keys.is_empty() {
                return Err(ConfigError::TrustWithoutIdentity("trusted_keys"));
            }
            if self.require_identity == Some(true) {
                return Err(ConfigError::TrustWithoutIdentity("require_identity"));
            }
            if self.require_signed_membership {
                return Err(ConfigError::TrustWithoutIdentity(
                    "require_signed_membership",
                ));
            }
        }
        self.parsed_trusted_keys().map(drop)
    }

    /// The idle announce interval in use: `announce_idle_interval`, at most
    /// `peer_lost_timeout / 2.4` (two announces at the longest jitter before a peer that
    /// heard the first would count this node Lost), at least `announce_interval`.
    pub fn idle_beacon_interval(&self) -> Duration {
        self.announce_idle_interval
            .min(self.peer_lost_timeout.div_f64(2.4))
            .max(self.announce_interval)
    }

    /// Checks the relations between settings that the types alone cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_identity()?;
        let cc = &self.tcp_congestion;
        if !cc.is_empty()
            && (cc.len() > 15
                || !cc
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
        {
            return Err(ConfigError::BadTcpCongestion(cc.clone()));
        }
        if self.group_name.len() > 255 {
            return Err(ConfigError::GroupNameTooLong(self.group_name.len()));
        }
        for (name, d) in [
            ("announce_interval", self.announce_interval),
            ("peer_lost_timeout", self.peer_lost_timeout),
            ("heartbeat_interval", self.heartbeat_interval),
            ("handshake_timeout", self.handshake_timeout),
            ("reconnect_base", self.reconnect_base),
            ("dedup_ttl", self.dedup_ttl),
            ("membership_interval", self.membership_interval),
        ] {
            if d.is_zero() {
                return Err(ConfigError::ZeroDuration(name));
            }
        }
        for (name, n) in [
            ("initial_ttl", self.initial_ttl as usize),
            ("max_dedup_entries", self.max_dedup_entries),
            ("max_dedup_streams", self.max_dedup_streams),
            ("max_outbound_queue_bytes", self.max_outbound_queue_bytes),
            ("max_peers", self.max_peers),
            ("max_membership_records", self.max_membership_records),
            ("max_identity_records", self.max_identity_records),
            ("max_membership_neighbours", self.max_membership_neighbours),
            ("new_peer_rate", self.new_peer_rate as usize),
            (
                "new_peer_rate_per_source",
                self.new_peer_rate_per_source as usize,
            ),
            ("max_pending_handshakes", self.max_pending_handshakes),
        ] {
            if n == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.heartbeat_timeout <= self.heartbeat_interval {
            return Err(ConfigError::HeartbeatTimeoutTooShort {
                interval: self.heartbeat_interval,
                timeout: self.heartbeat_timeout,
            });
        }
        if self.membership_timeout <= self.membership_interval {
            return Err(ConfigError::MembershipTimeoutTooShort {
                interval: self.membership_interval,
                timeout: self.membership_timeout,
            });
        }
        if self.reconnect_base > self.reconnect_max {
            return Err(ConfigError::ReconnectBaseAboveMax {
                base: self.reconnect_base,
                max: self.reconnect_max,
            });
        }
        if self.max_message_bytes < 58 {
            return Err(ConfigError::MaxMessageTooSmall(self.max_message_bytes));
        }
        for ep in self.static_peers.iter().chain(&self.seed_peers) {
            if !is_host_port(ep) {
                return Err(ConfigError::BadEndpoint(ep.clone()));
            }
        }
        if self.max_links == 1 {
            return Err(ConfigError::MaxLinksTooSmall);
        }
        if !self.secured() && self.record_suite != crate::crypto::RecordSuitePolicy::Auto {
            return Err(ConfigError::SuiteWithoutPsk(self.record_suite.name()));
        }
        self.topics.validate()?;
        Ok(())
    }
}

/// `host:port` with a non-empty host and a non-zero numeric port (`[v6]:port` included).
fn is_host_port(ep: &str) -> bool {
    match ep.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0),
        None => false,
    }
}

/// Builds a [`MeshConfig`] from the defaults; [`build`](Self::build) validates.
#[derive(Debug, Clone)]
pub struct MeshConfigBuilder(MeshConfig);

/// Expands to one builder setter per [`MeshConfig`] field, writing `self.<cfg>.<field>`.
/// Shared by [`MeshConfigBuilder`] and the node's `MeshBuilder`, so the list of settings is
/// written once. Exported for `shoal-mesh` only (hidden from the docs).
#[doc(hidden)]
#[macro_export]
macro_rules! mesh_config_setters {
    ($cfg:tt) => {
        $crate::mesh_config_setters!(@emit $cfg;
        /// Sets `group_name`.
        group_name: String,
        /// Sets `psk` (non-empty = secured mesh).
        psk: String,
        /// Sets `listen_port`.
        listen_port: u16,
        /// Enables or disables multicast discovery.
        scouting: bool,
        /// Sets `multicast_group`.
        multicast_group: Ipv4Addr,
        /// Sets `multicast_port`.
        multicast_port: u16,
        /// Sets `multicast_ttl`.
        multicast_ttl: u32,
        /// Sets `multicast_interface`.
        multicast_interface: Option<Ipv4Addr>,
        /// Sets `announce_interval`.
        announce_interval: Duration,
        /// Sets `announce_idle_interval`.
        announce_idle_interval: Duration,
        /// Sets `peer_lost_timeout`.
        peer_lost_timeout: Duration,
        /// Sets `stop_grace`.
        stop_grace: Duration,
        /// Sets `heartbeat_interval`.
        heartbeat_interval: Duration,
        /// Sets `heartbeat_timeout`.
        heartbeat_timeout: Duration,
        /// Sets `handshake_timeout`.
        handshake_timeout: Duration,
        /// Sets `reconnect_base`.
        reconnect_base: Duration,
        /// Sets `reconnect_max`.
        reconnect_max: Duration,
        /// Sets `initial_ttl`.
        initial_ttl: u8,
        /// Sets `dedup_ttl`.
        dedup_ttl: Duration,
        /// Sets `max_dedup_entries`.
        max_dedup_entries: usize,
        /// Sets `max_dedup_streams`.
        max_dedup_streams: usize,
        /// Sets `max_outbound_queue_bytes`.
        max_outbound_queue_bytes: usize,
        /// Sets `max_message_bytes`.
        max_message_bytes: u32,
        /// Sets `membership_interval`.
        membership_interval: Duration,
        /// Sets `membership_timeout`.
        membership_timeout: Duration,
        /// Sets `max_peers`.
        max_peers: usize,
        /// Sets `new_peer_rate`.
        new_peer_rate: u32,
        /// Sets `new_peer_rate_per_source`.
        new_peer_rate_per_source: u32,
        /// Sets `max_pending_handshakes`.
        max_pending_handshakes: usize,
        /// Sets `max_membership_records`.
        max_membership_records: usize,
        /// Sets `static_peers`.
        static_peers: Vec<String>,
        /// Sets `seed_peers`.
        seed_peers: Vec<String>,
        /// Sets `identity_file` (identity mesh; requires a PSK).
        identity_file: Option<std::path::PathBuf>,
        /// Sets `identity_seed_hex` (identity mesh; requires a PSK).
        identity_seed_hex: String,
        /// Sets `node_name`.
        node_name: String,
        /// Sets `trusted_keys`.
        trusted_keys: Vec<$crate::config::TrustedKey>,
        /// Sets `require_identity` (`true`/`false`, or `None` for the default).
        require_identity: Option<bool>,
        /// Sets `max_identity_records`.
        max_identity_records: usize,
        /// Sets the `[topics]` settings.
        topics: $crate::topics::TopicsConfig,
        /// Sets `require_signed_membership` (identity mode only).
        require_signed_membership: bool,
        /// Sets `max_membership_neighbours`.
        max_membership_neighbours: usize,
        /// Enables or disables the reverse-path check of Data frames.
        reverse_path_check: bool,
        /// Sets `record_suite` (secured mesh: the record suite offered to Shoal peers).
        record_suite: $crate::crypto::RecordSuitePolicy,
        /// Sets `reverse_path_settle`.
        reverse_path_settle: Duration,
        /// Sets `membership_flood_gap`.
        membership_flood_gap: Duration,
        /// Sets `membership_relay_gap`.
        membership_relay_gap: Duration,
        /// Enables or disables skipping, on a broadcast's relay, the neighbours that would
        /// refuse the copy.
        relay_pruning: bool,
        /// Sets `relay_redundancy` (0: every relay).
        relay_redundancy: usize,
        /// Sets `max_links` (0: no cap, the full mesh; see [`crate::degree`]).
        max_links: usize,
        /// Enables or disables membership anti-entropy between Shoal nodes.
        membership_digest: bool,
        /// Sets `tcp_congestion` (empty: the host's default).
        tcp_congestion: String,
        );
    };
    (@emit $cfg:tt; $($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, v: impl Into<$ty>) -> Self {
                self.$cfg.$name = v.into();
                self
            }
        )*
    };
}

impl MeshConfigBuilder {
    crate::mesh_config_setters!(0);

    /// Validates and returns the configuration.
    pub fn build(self) -> Result<MeshConfig, ConfigError> {
        self.0.validate()?;
        Ok(self.0)
    }
}

/// Durations as integer milliseconds in TOML.
mod millis {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests;
