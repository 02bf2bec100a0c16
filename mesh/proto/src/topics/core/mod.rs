//! The topics state machine of one node ([`TopicsCore`]), owned and driven by the control
//! core: this node's endpoints and their announcement, the Discovery flood, the discovery
//! graph (admission, matching, lease expiry), the events the application sees and the sample
//! route tables.
//!
//! Length: the core's state and its input methods stay together; announcing, receiving, events, route planning and the view live in the submodules.
//!
//! **Owns:** every topics decision of the control plane. **Must not touch:** sockets, the
//! clock, the OS random source, the wire codec (it takes and returns [`Discovery`] structs;
//! the control core encodes them), the shards (it returns route tables; the control core
//! posts them).
//!
//! # Identity
//!
//! The participant GUID prefix is this node's `PeerId` bytes `0..12`. Endpoint GUIDs are the
//! prefix and a 4-byte entity id: a 24-bit counter seeded from the core's random seed, then
//! `0x02` for a writer or `0x07` for a reader. A restarted node therefore gives its endpoints
//! new GUIDs: a new writer incarnation, whose sample sequence numbers restart at 1.
//!
//! # Driving it
//!
//! Inputs (each with `now`): [`create_endpoint`](TopicsCore::create_endpoint),
//! [`remove_endpoint`](TopicsCore::remove_endpoint), a Discovery frame from a link
//! ([`on_discovery`](TopicsCore::on_discovery)), capable links coming and going
//! ([`link_up`](TopicsCore::link_up), [`link_down`](TopicsCore::link_down)), the timer
//! ([`handle_timeout`](TopicsCore::handle_timeout) at
//! [`poll_timeout`](TopicsCore::poll_timeout)). Outputs: [`poll_output`](TopicsCore::poll_output)
//! (frames to flood, links to close, participants to dial), [`poll_event`](TopicsCore::poll_event)
//! (matched / unmatched / incompatible), and once per round
//! [`routes_due`](TopicsCore::routes_due): a new route table when anything it depends on
//! changed.
//!
//! Length: the core's state and its small entry points (~330 lines of code) with their docs;
//! frames (`announce`, `receive`), events, routes and the view live in submodules.

mod announce;
mod cadence;
mod events;
mod origins;
mod plan;
mod receive;
#[cfg(test)]
mod tests;
mod view;

pub use origins::SEQ_WINDOW;
pub use plan::{PlannerStats, RouteInput, RoutePlanner, TreePlanner, WriterDemand};
use view::ViewKey;
pub use view::{EndpointView, TopicView, TopicsView};

use super::config::TopicsConfig;
use super::routes::EndpointGuid;
use crate::reverse_path::ReversePaths;
use crate::stats::TopicCounters;
use crate::wire::Discovery;
use crate::{LinkId, PeerId};
use ahash::{AHashMap, AHashSet};
use shoal_discovery::announce::{AnnounceError, Announcer};
use shoal_discovery::graph::{AdmitError, DiscoveryGraph, GraphConfig, MatchScope, Table};
use shoal_discovery::locators::SelectionPolicy;
use shoal_discovery::matching::Incompatibility;
use shoal_discovery::qos::{EndpointQos, QosDuration, QosError};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, LinkReport, Locator, LocatorKind,
    ParticipantInfo, Partitions, Time, TopicName, TypeHash, TypeName, TypesError,
};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Which side of a matched pair lives on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LocalSide {
    /// The writer only.
    Writer,
    /// The reader only.
    Reader,
    /// Both.
    Both,
}

impl LocalSide {
    fn of(writer_local: bool, reader_local: bool) -> Option<LocalSide> {
        match (writer_local, reader_local) {
            (true, true) => Some(LocalSide::Both),
            (true, false) => Some(LocalSide::Writer),
            (false, true) => Some(LocalSide::Reader),
            (false, false) => None,
        }
    }
}

/// What the topics core tells the application (the control core forwards each as the
/// `ControlEvent` of the same name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicEvent {
    /// A writer and a reader, at least one of them local, now match.
    Matched {
        /// The writer.
        writer: EndpointGuid,
        /// The reader.
        reader: EndpointGuid,
        /// Their topic.
        topic: String,
        /// Which side is this node's.
        local: LocalSide,
    },
    /// A writer and a reader, at least one of them local, no longer match (one was removed,
    /// withdrawn, expired or changed).
    Unmatched {
        /// The writer.
        writer: EndpointGuid,
        /// The reader.
        reader: EndpointGuid,
        /// Their topic.
        topic: String,
        /// Which side is this node's.
        local: LocalSide,
    },
    /// A writer and a reader on the same topic, at least one of them local, do not match;
    /// said once per pair.
    Incompatible {
        /// The writer.
        writer: EndpointGuid,
        /// The reader.
        reader: EndpointGuid,
        /// Their topic.
        topic: String,
        /// Why (which policy, which partitions, type mismatch).
        reasons: Vec<Incompatibility>,
    },
}

/// Something the control core must do for the topics core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicsOutput {
    /// Encode `frame` and send it on every capable link except `except`.
    Flood {
        /// The frame.
        frame: Discovery,
        /// The link it came from (a re-flood), if any.
        except: Option<LinkId>,
    },
    /// Encode `frame` (one of this node's own, `ttl = 1`) and send it on these capable
    /// links only: the catch-up of new neighbours, which nobody passes on.
    Send {
        /// The frame.
        frame: Discovery,
        /// The links (each capable when the frame was built).
        links: Vec<LinkId>,
    },
    /// A Discovery frame on this link carried a record that does not decode: a protocol
    /// error, the link is closed.
    CloseLink(LinkId),
    /// The link's work budget is spent until `until`: its shard drops its Discovery frames
    /// until then instead of handing each over (one such output per spell).
    PauseDiscovery {
        /// The link.
        link: LinkId,
        /// When its budget has credit again.
        until: Instant,
    },
    /// `dial_participants`: a participant heard through discovery whose node has no link;
    /// dial it here (through the peer table, which skips a node it has a link to).
    Dial {
        /// The participant's node.
        peer: PeerId,
        /// The address [`select_locators`](shoal_discovery::locators::select_locators) picked.
        addr: SocketAddr,
    },
}

/// Why an endpoint was not created or removed. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// A name or a partition list is out of range.
    #[error("invalid endpoint: {0}")]
    Invalid(#[from] TypesError),
    /// The QoS is out of range or contradicts itself (history depth over its resource
    /// limit).
    #[error("invalid QoS: {0}")]
    Qos(#[from] QosError),
    /// The discovery graph refused it (its table or the match table is full).
    #[error("refused: {0}")]
    Refused(#[from] AdmitError),
    /// The record could not be built.
    #[error("announcement: {0}")]
    Announce(#[from] AnnounceError),
    /// No local endpoint has this GUID.
    #[error("no local endpoint {0:02x?}")]
    UnknownEndpoint(EndpointGuid),
}

/// Declares [`DiscoveryStats`] and its [`counters`](DiscoveryStats::counters) list from one list of
/// fields (each with its doc comment, which exporters use as help text).
macro_rules! discovery_stats {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// The topics core's discovery counters (monotonic): Discovery frames and records in,
        /// refused, relayed; not to be confused with a topic's sample counters
        /// ([`crate::stats::TopicStats`]).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct DiscoveryStats {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl DiscoveryStats {
            /// Every counter, in declaration order, with its name and doc comment, so
            /// exporters (`shoal_mesh::metrics`) follow new counters without a list of
            /// their own.
            pub fn counters(&self) -> Vec<crate::stats::StatCounter> {
                vec![$(crate::stats::StatCounter {
                    name: stringify!($name),
                    doc: concat!($($doc),*),
                    value: self.$name,
                }),*]
            }
        }
    };
}

discovery_stats! {
    /// Discovery frames received (before dedup).
    frames_in,
    /// Discovery frames this node built (announcements, withdrawals).
    frames_built,
    /// Frames passed on to other links (ttl left).
    frames_reflooded,
    /// Our own frames coming back over another path.
    echoes,
    /// Frames dropped as duplicates (seq not above the highest seen of their origin).
    duplicates,
    /// Frames dropped because their seq jumped beyond the origin's window and nothing
    /// confirmed the jump (see `SEQ_WINDOW`).
    seq_jumps_held,
    /// Frames dropped because the link they came on is not toward their origin in the
    /// membership graph (the reverse-path check).
    off_path,
    /// Frames dropped because their link's or their origin's control-plane work budget was
    /// spent (`origin_work_per_sec`, `link_work_per_sec`).
    budget_dropped,
    /// Frames refused whole because another origin holds their origin's GUID prefix.
    prefix_conflicts,
    /// Origins forgotten by the dedup table at its bound (their next frame counts as new).
    dedup_evicted,
    /// Records or withdrawals refused for describing another participant's endpoints.
    foreign_refused,
    /// Links closed for a record that did not decode or was out of range.
    malformed_records,
    /// Complete announce cycles received.
    cycles_completed,
    /// Incomplete announce cycles given up (not completed within two announce periods).
    cycles_expired,
    /// Endpoints removed because a complete cycle of their origin no longer listed them.
    endpoints_pruned,
    /// Remote endpoints removed by a withdrawal.
    endpoints_withdrawn,
    /// Participants whose lease ran out.
    participants_expired,
    /// Reverse paths over the topic-capable nodes rebuilt (at most one per
    /// `route_plan_interval`).
    paths_rebuilt,
    /// Reverse paths taken from the control core instead (every node of the graph
    /// topic-capable: the same paths).
    paths_shared,
    /// Endpoints removed with an expired participant.
    endpoints_expired,
    /// Incompatible pairs not reported: the reported-pairs set was full.
    incompatible_unreported,
    /// Route tables built.
    route_tables,
    /// Relays of a frame not sent to a neighbour that has it from its origin (the origin's
    /// membership record lists it).
    relays_pruned,
    /// Dials asked for (`dial_participants`).
    dials,
    /// Participants heard that no selected locator could be dialed at.
    no_dialable_locator,
}

/// A remote participant this node admitted.
#[derive(Debug)]
struct Remote {
    node: PeerId,
    /// The graph's expiry (`now + lease` at the last record): kept here so the endpoints an
    /// expiry takes are known before the graph drops them (their unmatched events).
    expires: Time,
    locators: Vec<Locator>,
}

/// One origin's announce cycle being collected (at most one per admitted origin).
#[derive(Debug, Default)]
struct Cycle {
    cycle: u32,
    parts: u16,
    /// One bit per part received.
    got: Vec<u64>,
    missing: usize,
    listed: AHashSet<Guid>,
    /// It listed more endpoints than a node may have: it completes, but prunes nothing.
    overflow: bool,
    /// When its first part arrived (an incomplete cycle is given up after two periods).
    started: Option<Instant>,
}

impl Cycle {
    fn new(cycle: u32, parts: u16, now: Instant) -> Cycle {
        Cycle {
            cycle,
            parts,
            got: vec![0; usize::from(parts).div_ceil(64)],
            missing: usize::from(parts),
            listed: AHashSet::new(),
            overflow: false,
            started: Some(now),
        }
    }

    fn mark(&mut self, part: u16) {
        let (w, b) = (usize::from(part) / 64, part % 64);
        if self.got[w] & (1 << b) == 0 {
            self.got[w] |= 1 << b;
            self.missing -= 1;
        }
    }
}

/// A capable placed link: its peer, and the work budget of the frames it brings.
#[derive(Debug)]
struct CapableLink {
    peer: PeerId,
    budget: origins::Bucket,
    /// Its Discovery frames are dropped on its shard until then (budget spent).
    paused: Option<Instant>,
    /// The peer set Hello feature bit 4: it holds this node's lease while linked
    /// (`cadence`).
    holds_lease: bool,
}

/// The largest cycle whose completeness is tracked (a bigger one repairs nothing; leases
/// and withdrawals still do).
const MAX_TRACKED_PARTS: u16 = 1024;

/// The topics state machine (see the module docs).
#[derive(Debug)]
pub struct TopicsCore {
    me: PeerId,
    prefix: GuidPrefix,
    cfg: TopicsConfig,
    policy: SelectionPolicy,
    fallbacks: Vec<SocketAddr>,
    ttl: u8,
    shards: usize,
    origin: Instant,
    graph: DiscoveryGraph,
    announcer: Announcer,
    /// This node's endpoints (GUID → kind), for removal and the routes of local writers.
    local: BTreeMap<Guid, EndpointKind>,
    /// The write credits of this node's reliable writers (shared with their handles).
    credits: AHashMap<Guid, Arc<crate::topics::WriterCredit>>,
    next_entity: u32,
    seq: u64,
    cycle: u32,
    next_announce: Instant,
    /// The period of the cycle after the next one (`cadence`).
    period: std::time::Duration,
    /// A change asked for the cycle within `announce_period` (`cadence::announce_soon`).
    rearm: bool,
    /// Every member of the mesh holds this node's lease by link (`cadence::note_members`).
    members_held: bool,
    /// What `members_held` was computed from: membership's shape and `links_epoch`.
    members_key: Option<(u64, u64)>,
    /// Rises with every change of `links`.
    links_epoch: u64,
    next_expiry: Instant,
    /// Capable placed links (their peer advertised extended frames).
    links: BTreeMap<LinkId, CapableLink>,
    /// Capable links that came up since the last announce: each gets this node's cycle out
    /// of turn at the next timer tick (bounded by `links`).
    catch_up: Vec<LinkId>,
    /// Admitted remote participants, each bound to the origin that first announced it.
    remotes: AHashMap<GuidPrefix, Remote>,
    cycles: AHashMap<PeerId, Cycle>,
    /// Per origin: the flood's dedup mark, a held jump, the work budget.
    origins: origins::Origins,
    /// Take an origin's frames only from links toward it (`reverse_path_check`).
    reverse_path: bool,
    /// Relays toward a node farther from an origin (`MeshConfig::relay_redundancy`).
    relay_redundancy: usize,
    /// The neighbours toward each origin over the topic-capable nodes.
    paths: Arc<ReversePaths>,
    /// The control core's paths of the whole graph, offered for this round
    /// ([`offer_paths`](Self::offer_paths)).
    offered: Option<Arc<ReversePaths>>,
    /// What `paths` was built from: the membership shape, and whether the capable set
    /// changed since (`None`: rebuild).
    paths_shape: Option<u64>,
    /// Before this the paths are not rebuilt again (`plan::refresh_paths`).
    next_paths: Instant,
    /// A rebuild waits for `next_paths` (the timer fires for it).
    paths_waiting: bool,
    /// (writer, reader) pairs already reported incompatible.
    reported: AHashSet<(Guid, Guid)>,
    /// The same pairs by endpoint, both ways: what a removal must forget, found without a
    /// walk over every reported pair.
    reported_by: AHashMap<Guid, Vec<Guid>>,
    counters: AHashMap<TopicName, Arc<TopicCounters>>,
    planner: Box<dyn RoutePlanner>,
    routes_epoch: u64,
    /// The writers the last table routed, sorted (what the next one says is gone).
    routed_writers: Vec<EndpointGuid>,
    routes_dirty: bool,
    /// When the next route table may be planned.
    next_plan: Instant,
    membership_mark: Option<u64>,
    view: Option<Arc<TopicsView>>,
    /// What the view was built from (see `TopicsCore::view`).
    view_key: ViewKey,
    events: VecDeque<TopicEvent>,
    out: VecDeque<TopicsOutput>,
    stats: DiscoveryStats,
}

/// What a topics core starts with.
#[derive(Debug)]
pub struct TopicsInit {
    /// This node.
    pub me: PeerId,
    /// The settings (validated by `MeshConfig::validate`).
    pub cfg: TopicsConfig,
    /// Hop limit of the frames this node builds (`MeshConfig::initial_ttl`).
    pub ttl: u8,
    /// Data shards (one counter set each per topic).
    pub shards: usize,
    /// This node's TCP listen addresses, announced in its participant record.
    pub listen_addrs: Vec<SocketAddr>,
    /// Wall clock in ms: seeds the frame sequence so a restarted node outranks itself, and is
    /// announced as this node's start time (observers show its uptime).
    pub wall_ms: u64,
    /// The name announced in the participant record (`MeshConfig::node_name`); empty: the
    /// node id in hex.
    pub name: String,
    /// Seeds the endpoint entity counter.
    pub entity_seed: u32,
    /// Computes the route tables.
    pub planner: Box<dyn RoutePlanner>,
    /// Take an origin's Discovery frames only from links toward it in the membership graph
    /// (`MeshConfig::reverse_path_check`).
    pub reverse_path: bool,
    /// How many relays carry an origin's Discovery frames to a node, of those one hop nearer
    /// to it (`MeshConfig::relay_redundancy`).
    pub relay_redundancy: usize,
}

fn tcp_locator(a: &SocketAddr) -> Locator {
    let (kind, address) = match a.ip() {
        std::net::IpAddr::V4(ip) => {
            let mut address = [0; 16];
            address[12..].copy_from_slice(&ip.octets());
            (LocatorKind::TcpV4, address)
        }
        std::net::IpAddr::V6(ip) => (LocatorKind::TcpV6, ip.octets()),
    };
    Locator {
        kind,
        address,
        port: u32::from(a.port()),
    }
}

/// The participant prefix of a node.
pub fn prefix_of(peer: &PeerId) -> GuidPrefix {
    let mut p = [0; 12];
    p.copy_from_slice(&peer.0[..12]);
    GuidPrefix(p)
}

fn guid_bytes(g: &Guid) -> EndpointGuid {
    let mut b = [0; 16];
    b[..12].copy_from_slice(&g.prefix.0);
    b[12..].copy_from_slice(&g.entity.0);
    b
}

fn guid_of(b: &EndpointGuid) -> Guid {
    let mut p = [0; 12];
    p.copy_from_slice(&b[..12]);
    let mut e = [0; 4];
    e.copy_from_slice(&b[12..]);
    Guid::new(GuidPrefix(p), EntityId(e))
}

impl TopicsCore {
    /// A core at `now`. Fails only on a configuration `TopicsConfig::validate` refuses.
    pub fn new(init: TopicsInit, now: Instant) -> Result<TopicsCore, super::TopicsConfigError> {
        let TopicsInit {
            me,
            cfg,
            ttl,
            shards,
            listen_addrs,
            wall_ms,
            name,
            entity_seed,
            planner,
            reverse_path,
            relay_redundancy,
        } = init;
        cfg.validate()?;
        let prefix = prefix_of(&me);
        let mut graph = DiscoveryGraph::new(GraphConfig {
            capacities: cfg.capacities(),
            scope: MatchScope::AcrossParticipants,
        });
        let name = if name.is_empty() {
            hex::encode(me.0)
        } else {
            name
        };
        let mut info = ParticipantInfo::new(prefix, name);
        info.started_ms = Some(wall_ms);
        info.lease_duration = QosDuration::from_nanos(
            u64::try_from(cfg.participant_lease.as_nanos()).unwrap_or(u64::MAX),
        );
        info.user_locators = listen_addrs
            .iter()
            .take(shoal_discovery::types::MAX_LOCATORS)
            .map(tcp_locator)
            .collect();
        graph
            .add_local_participant(info.clone())
            .expect("a fresh graph admits its one local participant");
        let announcer = Announcer::new(info, cfg.max_local_endpoints)
            .expect("a participant record of bounded fields encodes");
        Ok(TopicsCore {
            me,
            prefix,
            policy: cfg.selection_policy()?,
            fallbacks: cfg.fallbacks()?,
            ttl: ttl.max(1),
            shards: shards.max(1),
            origin: now,
            graph,
            announcer,
            local: BTreeMap::new(),
            credits: AHashMap::new(),
            next_entity: entity_seed & 0x00ff_ffff,
            seq: wall_ms,
            cycle: 0,
            next_announce: now + cfg.announce_period,
            period: cfg.announce_period,
            rearm: false,
            members_held: false,
            members_key: None,
            links_epoch: 0,
            next_expiry: now + cfg.announce_period,
            links: BTreeMap::new(),
            catch_up: Vec::new(),
            remotes: AHashMap::new(),
            cycles: AHashMap::new(),
            origins: origins::Origins::new(cfg.max_dedup_origins),
            reverse_path,
            relay_redundancy,
            paths: Arc::new(ReversePaths::new(me)),
            offered: None,
            paths_shape: None,
            next_paths: now,
            paths_waiting: false,
            reported: AHashSet::new(),
            reported_by: AHashMap::new(),
            counters: AHashMap::new(),
            planner,
            routes_epoch: 0,
            routed_writers: Vec::new(),
            routes_dirty: false,
            next_plan: now,
            membership_mark: None,
            view: None,
            view_key: ViewKey::default(),
            events: VecDeque::new(),
            out: VecDeque::new(),
            stats: DiscoveryStats::default(),
            cfg,
        })
    }

    fn time(&self, now: Instant) -> Time {
        let ns = now.saturating_duration_since(self.origin).as_nanos();
        Time::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Counters.
    pub fn stats(&self) -> DiscoveryStats {
        self.stats
    }

    /// Next output for the control core.
    pub fn poll_output(&mut self) -> Option<TopicsOutput> {
        self.out.pop_front()
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<TopicEvent> {
        self.events.pop_front()
    }

    /// The discovery graph (read only).
    pub fn graph(&self) -> &DiscoveryGraph {
        &self.graph
    }

    /// The capable links (their peer advertised extended frames): the only links a
    /// Discovery frame is ever sent on.
    pub fn capable_links(&self) -> impl Iterator<Item = (&LinkId, &PeerId)> {
        self.links.iter().map(|(l, c)| (l, &c.peer))
    }

    /// Creates a local writer or reader and announces it at once. A self-contradicting
    /// endpoint (history depth over its resource limit) is rejected on the spot.
    #[allow(clippy::too_many_arguments)]
    pub fn create_endpoint(
        &mut self,
        kind: EndpointKind,
        topic: &str,
        type_name: &str,
        type_hash: [u8; 16],
        qos: EndpointQos,
        partitions: &[String],
        now: Instant,
    ) -> Result<EndpointGuid, TopicError> {
        let topic = TopicName::new(topic)?;
        let type_name = TypeName::new(type_name)?;
        let partitions = Partitions::new(partitions.iter().map(String::as_str))?;
        qos.validate()?;
        qos.consistent()?;
        let guid = self.fresh_guid(kind);
        let mut info = EndpointInfo::new(guid, kind, topic, type_name, TypeHash(type_hash));
        info.partitions = partitions;
        info.qos = qos;
        let adm = self.graph.add_local_endpoint(info.clone())?;
        if let Err(e) = self.announcer.upsert_endpoint(info) {
            self.graph.remove_endpoint(&guid);
            return Err(e.into());
        }
        self.local.insert(guid, kind);
        if kind == EndpointKind::Writer
            && qos.reliability.kind == shoal_discovery::qos::ReliabilityKind::Reliable
        {
            self.credits
                .insert(guid, Arc::new(crate::topics::WriterCredit::new()));
        }
        self.matched_events(adm.id, &adm.matched);
        self.incompatible_events(adm.id);
        self.announce_now(Some(guid), None);
        self.announce_soon_at(now);
        self.changed();
        Ok(guid_bytes(&guid))
    }

    /// Removes a local endpoint: its matches end (unmatched events) and a withdrawal goes
    /// out at once.
    pub fn remove_endpoint(&mut self, guid: EndpointGuid, now: Instant) -> Result<(), TopicError> {
        let g = guid_of(&guid);
        if !self.local.contains_key(&g) {
            return Err(TopicError::UnknownEndpoint(guid));
        }
        self.remove_endpoints(&[g]);
        self.local.remove(&g);
        self.credits.remove(&g);
        self.announcer.remove_endpoint(&g);
        self.announce_now(None, Some(g));
        self.announce_soon_at(now);
        self.changed();
        Ok(())
    }

    /// The write credit of this node's reliable writer `guid` (its handle waits on it when
    /// the writer keeps all its history and readers lag); `None` for other endpoints.
    pub fn writer_credit(&self, guid: &EndpointGuid) -> Option<Arc<crate::topics::WriterCredit>> {
        self.credits.get(&guid_of(guid)).cloned()
    }

    fn fresh_guid(&mut self, kind: EndpointKind) -> Guid {
        let low = match kind {
            EndpointKind::Writer => 0x02,
            EndpointKind::Reader => 0x07,
        };
        loop {
            let c = self.next_entity;
            self.next_entity = (c + 1) & 0x00ff_ffff;
            let e = EntityId([(c >> 16) as u8, (c >> 8) as u8, c as u8, low]);
            let g = Guid::new(self.prefix, e);
            // Capacity is far below 2^24, so a free id is always near.
            if self.graph.endpoint_id(&g).is_none() {
                return g;
            }
        }
    }

    /// Something the view or the routes depend on changed. The view is rebuilt once the
    /// routes are planned (a new table epoch changes its key; see `view`).
    fn changed(&mut self) {
        self.routes_dirty = true;
    }

    /// A placed link whose peer advertised extended frames (`capable`); others are
    /// ignored (a multimaster peer never receives a frame type it does not know).
    ///
    /// A new capable neighbour hears a full cycle at once (the next timer tick) rather than
    /// up to a period later: until a node's participant record is admitted it is not
    /// topic-capable, and a relay with no endpoints announces nothing else. That catch-up
    /// goes to the new links only (`announce_catch_up`): flooding a whole cycle per new
    /// link made a forming full mesh of N nodes flood ~N² cycles to everyone.
    pub fn link_up(&mut self, link: LinkId, peer: PeerId, capable: bool) {
        if capable {
            self.link_up_with(link, peer, false);
        }
    }

    /// [`link_up`](Self::link_up) of a capable link; `holds_lease`: its peer set Hello
    /// feature bit 4 (it holds this node's lease while linked, see `cadence`).
    pub fn link_up_with(&mut self, link: LinkId, peer: PeerId, holds_lease: bool) {
        if self.links.get(&link).is_some_and(|l| l.peer == peer) {
            return;
        }
        // Full from the start (it refills from `origin` up to the burst on first use).
        let budget = origins::Bucket::new(self.cfg.link_work_burst, self.origin);
        self.links.insert(
            link,
            CapableLink {
                peer,
                budget,
                paused: None,
                holds_lease,
            },
        );
        self.links_epoch += 1;
        if !self.catch_up.contains(&link) {
            self.catch_up.push(link);
        }
        // It hears this node's records by the catch-up; one that does not hold leases by
        // link lowers the period's cap, and must hear a cycle within a third of the lease.
        if !holds_lease {
            self.announce_soon();
        }
        self.changed();
    }

    /// A link went away.
    pub fn link_down(&mut self, link: LinkId) {
        self.catch_up.retain(|l| *l != link);
        if self.links.remove(&link).is_some() {
            self.links_epoch += 1;
            // The neighbour may now hear this node only through frames (its lease by link
            // is gone), and the participant record lists one link less.
            self.announce_soon();
            self.changed();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) has work next.
    pub fn poll_timeout(&self) -> Instant {
        if !self.catch_up.is_empty() {
            // Due at once (the next timer tick batches every link that came up meanwhile).
            return self.origin;
        }
        self.next_announce.min(self.next_expiry)
    }

    /// When a route table that waits for the planning interval may be planned, or the
    /// reverse paths rebuilt (`None`: nothing waits). The caller arms its timer for it and
    /// calls
    /// [`routes_due`](Self::routes_due) then.
    pub fn plan_timeout(&self) -> Option<Instant> {
        let plan = self.routes_dirty.then_some(self.next_plan);
        let paths = self.paths_waiting.then_some(self.next_paths);
        plan.into_iter().chain(paths).min()
    }

    /// Whether the next [`handle_timeout`](Self::handle_timeout) at `now` runs an announce
    /// cycle or a new neighbour's catch-up (the control core then refreshes
    /// [`report_links`](Self::report_links) first).
    pub fn announce_due(&self, now: Instant) -> bool {
        now >= self.next_announce || !self.catch_up.is_empty()
    }

    /// This node's links as its participant record reports them to observers (peer, RTT,
    /// extended frames): sorted by peer, at most `MAX_LINK_REPORTS`. The record is
    /// re-encoded only when the list differs, and goes out with the next announce cycle
    /// (records are built once per change, never per frame).
    pub fn report_links(&mut self, mut links: Vec<LinkReport>) {
        links.sort_unstable();
        links.dedup_by_key(|l| l.peer);
        links.truncate(shoal_discovery::types::MAX_LINK_REPORTS);
        if self.announcer.participant().links == links {
            return;
        }
        let mut info = self.announcer.participant().clone();
        info.links = links;
        if let Err(e) = self.announcer.set_participant(info) {
            // Bounded above, so unreachable; the old record keeps going out.
            tracing::debug!(error = %e, "participant record not updated");
        }
    }

    /// The participant record node `node` announced, as admitted here (its own word: name,
    /// addresses, start time, links); this node's own for `node == me`. `None` when none
    /// arrived (a multimaster node, or one whose Discovery frames cannot reach this node).
    pub fn participant_of(&self, node: &PeerId) -> Option<&ParticipantInfo> {
        if *node == self.me {
            return Some(self.announcer.participant());
        }
        let prefix = prefix_of(node);
        match self.remotes.get(&prefix) {
            Some(r) if r.node == *node => self.graph.participant(&prefix),
            _ => None,
        }
    }

    /// Runs a due announce cycle (or else a due catch-up of new links) and lease expiry
    /// (after renewing the leases of the participants linked directly: `cadence`).
    pub fn handle_timeout(&mut self, now: Instant) {
        if now >= self.next_expiry {
            self.next_expiry = now + self.cfg.announce_period;
            self.renew_linked(self.time(now));
            self.expire(now);
            self.expire_cycles(now);
        }
        self.rearm_announce(now);
        if now >= self.next_announce {
            self.schedule_next_cycle(now);
            self.announce_cycle();
        }
        self.announce_catch_up();
    }

    /// Lease expiry: a participant silent for its lease loses all its endpoints in one
    /// pass; its matches go with them, and its node is no longer topic-capable.
    fn expire(&mut self, now: Instant) {
        let t = self.time(now);
        let mut gone: Vec<GuidPrefix> = self
            .remotes
            .iter()
            .filter(|(_, r)| r.expires < t)
            .map(|(p, _)| *p)
            .collect();
        if gone.is_empty() {
            return;
        }
        gone.sort_unstable();
        let mut ids = Vec::new();
        for p in &gone {
            ids.extend(self.graph.endpoints_of(p));
        }
        self.unmatched_events(&ids);
        let removal = self.graph.expire(t);
        debug_assert_eq!(removal.participants, gone);
        self.stats.participants_expired += removal.participants.len() as u64;
        self.stats.endpoints_expired += removal.endpoints.len() as u64;
        let removed: AHashSet<Guid> = removal.endpoints.iter().map(|(_, g)| *g).collect();
        self.forget_reported(&removed);
        for p in &gone {
            if let Some(r) = self.remotes.remove(p) {
                self.cycles.remove(&r.node);
                // Resets with the lease: the origin's next frame starts a new mark.
                self.origins.forget(&r.node);
            }
        }
        self.capable_changed();
        self.changed();
    }

    /// Gives up the cycles not completed within two announce periods (a part was lost;
    /// the next cycle starts afresh), so an origin that starts cycles it never ends keeps
    /// nothing.
    fn expire_cycles(&mut self, now: Instant) {
        let limit = self.cfg.announce_period * 2;
        let before = self.cycles.len();
        self.cycles.retain(|_, c| {
            c.started
                .is_some_and(|s| now.saturating_duration_since(s) <= limit)
        });
        self.stats.cycles_expired += (before - self.cycles.len()) as u64;
    }

    /// Forgets everything node `node` announced (its key was revoked): its participant,
    /// its endpoints (with their unmatched events), its cycle and its frames' mark.
    pub fn forget_node(&mut self, node: &PeerId) {
        let prefix = prefix_of(node);
        if self.remotes.get(&prefix).is_none_or(|r| r.node != *node) {
            return;
        }
        let ids = self.graph.endpoints_of(&prefix);
        let guids: Vec<Guid> = ids
            .iter()
            .filter_map(|id| self.graph.endpoint(*id).map(|e| e.guid))
            .collect();
        self.remove_endpoints(&guids);
        self.graph.remove_participant(&prefix);
        self.remotes.remove(&prefix);
        self.cycles.remove(node);
        self.origins.forget(node);
        self.capable_changed();
        self.changed();
    }

    /// The topic-capable set changed: the reverse paths over it are rebuilt next round.
    fn capable_changed(&mut self) {
        self.paths_shape = None;
    }

    /// The topic's counters (one per topic, shared by its route entries).
    fn counters_of(&mut self, topic: &TopicName) -> Arc<TopicCounters> {
        let shards = self.shards;
        self.counters
            .entry(topic.clone())
            .or_insert_with(|| Arc::new(TopicCounters::new(shards)))
            .clone()
    }

    /// Occupancy and capacity of a discovery table.
    pub fn occupancy(&self, table: Table) -> (usize, usize) {
        let c = self.cfg.capacities();
        let cap = match table {
            Table::LocalParticipants => c.local_participants,
            Table::RemoteParticipants => c.remote_participants,
            Table::LocalEndpoints => c.local_endpoints,
            Table::RemoteWriters => c.remote_writers,
            Table::RemoteReaders => c.remote_readers,
        };
        (self.graph.occupancy(table), cap)
    }

    /// Counts relays the control core skipped (see [`DiscoveryStats::relays_pruned`]).
    pub fn count_relays_pruned(&mut self, n: u64) {
        self.stats.relays_pruned += n;
    }

    /// Origins held by the flood's dedup table.
    pub fn dedup_len(&self) -> usize {
        self.origins.len()
    }

    /// Pairs held by the reported-incompatible set.
    pub fn reported_len(&self) -> usize {
        self.reported.len()
    }

    /// Origins with an announce cycle in progress (bounded by the admitted participants:
    /// a cycle is tracked only for the origin bound to its prefix).
    pub fn cycles_len(&self) -> usize {
        self.cycles.len()
    }

    /// Remote participants admitted, each bound to its origin.
    pub fn remotes_len(&self) -> usize {
        self.remotes.len()
    }

    /// The frame a cycle or an immediate announcement starts from.
    fn frame(&mut self, cycle: u32, part: u16, parts: u16) -> Discovery {
        self.seq += 1;
        self.stats.frames_built += 1;
        Discovery {
            origin: self.me,
            seq: self.seq,
            ttl: self.ttl,
            cycle,
            part,
            parts,
            entries: Vec::new(),
        }
    }
}
