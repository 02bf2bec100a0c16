//! Topics: DDS-style writers and readers on the mesh (issue 12). Declare a [`Topic`] (name,
//! type name, type hash, QoS, partitions), open a [`Writer`] with [`Mesh::writer`] or a
//! [`Reader`] with [`Mesh::reader`], and receive samples as [`Event::Sample`] with the
//! writer's GUID, its per-writer sequence number and the payload (a zero-copy slice).
//! [`Event::Matched`], [`Event::Unmatched`] and [`Event::Incompatible`] say which pairs match
//! and, once per pair, why a pair does not ([`Reasons`]); [`Mesh::topics`] lists the topics,
//! endpoints and matches this node knows, with per-topic counters.
//!
//! ```no_run
//! use shoal_mesh::topics::Topic;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mesh = shoal_mesh::Mesh::builder().build()?;
//! mesh.start()?;
//! let imu = Topic::new("sensors/imu", "Imu")
//!     .reliable()
//!     .history_keep_last(10)
//!     .partitions(["robot/*"]);
//! let mut writer = mesh.writer(imu.clone())?;
//! let reader = mesh.reader(imu)?;
//! writer.write_blocking(b"sample")?;
//! writer.flush_blocking()?;
//! # let _ = reader; Ok(()) }
//! ```
//!
//! The QoS types are `shoal-discovery`'s, re-exported here under the same names (one name,
//! one meaning): every policy it models can be set, and its matching rules decide.
//!
//! Length: about 480 lines of code and docs (the declaration's builder methods each carry a
//! doc comment for users) and 120 of tests of the synchronous validation.
//!
//! **Owns:** the application's topic vocabulary: the [`Topic`] declaration and its
//! synchronous validation ([`TopicSpecError`]), the default type hash ([`type_hash_of`]),
//! the match-event reasons ([`Reasons`]) and the introspection snapshot
//! ([`TopicsSnapshot`]). **Must not touch:** matching, admission and routes (the control
//! core's `shoal_proto::topics`), the sample path (the shard core), QoS semantics
//! (`shoal-discovery`).
//!
//! [`Mesh::writer`]: crate::Mesh::writer
//! [`Mesh::reader`]: crate::Mesh::reader
//! [`Mesh::topics`]: crate::Mesh::topics
//! [`Event::Sample`]: crate::Event::Sample
//! [`Event::Matched`]: crate::Event::Matched
//! [`Event::Unmatched`]: crate::Event::Unmatched
//! [`Event::Incompatible`]: crate::Event::Incompatible

pub use crate::node::topics::{Reader, Writer};
pub use shoal_discovery::matching::{Incompatibility, QosRule};
pub use shoal_discovery::qos::{
    AccessScope, Deadline, DestinationOrderKind, DurabilityKind, EndpointQos, History,
    LatencyBudget, Lifespan, Limit, Liveliness, LivelinessKind, OwnershipKind, Policy,
    Presentation, QosDuration, QosError, Reliability, ReliabilityKind, ResourceLimits,
};
pub use shoal_discovery::types::{EndpointKind, TypeHash, TypesError};
pub use shoal_proto::stats::{TopicCounters, TopicStats};
pub use shoal_proto::topics::{
    DiscoveryStats, EndpointGuid, EndpointView, LocalSide, TopicError, TopicsConfig, TopicsView,
};

use shoal_discovery::types::{Partitions, TopicName, TypeName};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a [`Topic`] declaration is unusable; raised synchronously by [`crate::Mesh::writer`]
/// and [`crate::Mesh::reader`] before anything reaches the control plane.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicSpecError {
    /// The topic name, the type name or a partition name is empty or too long, or there are
    /// too many partitions.
    #[error("invalid topic declaration: {0}")]
    Name(#[from] TypesError),
    /// A QoS value is out of range, or two policies contradict each other (a keep-last depth
    /// above `max_samples_per_instance`, ...).
    #[error("invalid QoS: {0}")]
    Qos(#[from] QosError),
    /// The type hash is all zeros: the "unknown type" value, which never matches anything.
    #[error("the all-zero type hash means \"unknown\" and never matches")]
    UnknownTypeHash,
}

/// A writer or reader declaration: topic name, type name, type hash, QoS and partitions.
/// Cheap to clone; the same declaration opens a writer or a reader (each gets the QoS
/// defaults of its kind, `shoal-discovery`'s: writers reliable, readers best effort, then
/// every policy set here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    name: String,
    type_name: String,
    type_hash: Option<TypeHash>,
    base: Option<EndpointQos>,
    edits: Vec<Edit>,
    partitions: Vec<String>,
}

/// One QoS setting of the builder, applied in call order onto the kind's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Reliability(ReliabilityKind),
    MaxBlocking(QosDuration),
    Durability(DurabilityKind),
    Deadline(QosDuration),
    LatencyBudget(QosDuration),
    Ownership(OwnershipKind),
    OwnershipStrength(i32),
    Liveliness(LivelinessKind, QosDuration),
    DestinationOrder(DestinationOrderKind),
    Presentation(Presentation),
    History(History),
    ResourceLimits(ResourceLimits),
    Lifespan(QosDuration),
}

/// The default type hash of a type name: FNV-1a (128 bit) of `"shoal-type:" ++ name`, so two
/// programs that name a type alike agree without sharing code. Set a real structural hash
/// with [`Topic::type_hash`] when the type's layout can change under one name.
pub fn type_hash_of(type_name: &str) -> TypeHash {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    for &b in b"shoal-type:".iter().chain(type_name.as_bytes()) {
        h ^= u128::from(b);
        h = h.wrapping_mul(PRIME);
    }
    let h = h.to_be_bytes();
    // The all-zero hash means "unknown"; FNV-1a cannot be steered there by a name in
    // practice, but the guarantee costs one comparison.
    TypeHash(if h == [0; 16] { [1; 16] } else { h })
}

fn qos_duration(d: Duration) -> QosDuration {
    u64::try_from(d.as_nanos()).map_or(QosDuration::INFINITE, QosDuration::from_nanos)
}

impl Topic {
    /// A declaration of topic `name` carrying `type_name`, with the QoS defaults of its kind,
    /// the default partition and [`type_hash_of`]`(type_name)` as type hash.
    pub fn new(name: impl Into<String>, type_name: impl Into<String>) -> Topic {
        Topic {
            name: name.into(),
            type_name: type_name.into(),
            type_hash: None,
            base: None,
            edits: Vec::new(),
            partitions: Vec::new(),
        }
    }

    /// The topic name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The type name.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// Sets the type hash (16 bytes, e.g. of the type's layout; all zeros is refused: it
    /// means "unknown" and never matches).
    pub fn type_hash(mut self, hash: [u8; 16]) -> Topic {
        self.type_hash = Some(TypeHash(hash));
        self
    }

    /// Replaces every policy at once (the per-policy setters called later still apply).
    pub fn qos(mut self, qos: EndpointQos) -> Topic {
        self.base = Some(qos);
        self.edits.clear();
        self
    }

    fn edit(mut self, e: Edit) -> Topic {
        self.edits.push(e);
        self
    }

    /// Reliability `Reliable` (a reliable reader matches only reliable writers).
    pub fn reliable(self) -> Topic {
        self.edit(Edit::Reliability(ReliabilityKind::Reliable))
    }

    /// Reliability `BestEffort`.
    pub fn best_effort(self) -> Topic {
        self.edit(Edit::Reliability(ReliabilityKind::BestEffort))
    }

    /// Reliability kind and how long a reliable write may block.
    pub fn reliability(self, r: Reliability) -> Topic {
        self.edit(Edit::Reliability(r.kind))
            .edit(Edit::MaxBlocking(r.max_blocking_time))
    }

    /// Durability (offered ≥ requested matches).
    pub fn durability(self, d: DurabilityKind) -> Topic {
        self.edit(Edit::Durability(d))
    }

    /// Deadline period (must be positive; offered ≤ requested matches).
    pub fn deadline(self, period: Duration) -> Topic {
        self.edit(Edit::Deadline(qos_duration(period)))
    }

    /// Latency budget (offered ≤ requested matches).
    pub fn latency_budget(self, budget: Duration) -> Topic {
        self.edit(Edit::LatencyBudget(qos_duration(budget)))
    }

    /// Ownership kind (must be equal on both sides).
    pub fn ownership(self, kind: OwnershipKind) -> Topic {
        self.edit(Edit::Ownership(kind))
    }

    /// Ownership strength (writers).
    pub fn ownership_strength(self, strength: i32) -> Topic {
        self.edit(Edit::OwnershipStrength(strength))
    }

    /// Liveliness kind and lease (the lease must be positive).
    pub fn liveliness(self, kind: LivelinessKind, lease: Duration) -> Topic {
        self.edit(Edit::Liveliness(kind, qos_duration(lease)))
    }

    /// Destination order.
    pub fn destination_order(self, kind: DestinationOrderKind) -> Topic {
        self.edit(Edit::DestinationOrder(kind))
    }

    /// Presentation (scope, coherent and ordered access).
    pub fn presentation(self, p: Presentation) -> Topic {
        self.edit(Edit::Presentation(p))
    }

    /// History: keep the newest `depth` samples per instance (`depth ≥ 1`).
    pub fn history_keep_last(self, depth: u32) -> Topic {
        self.edit(Edit::History(History::KeepLast { depth }))
    }

    /// History: keep everything the resource limits allow.
    pub fn history_keep_all(self) -> Topic {
        self.edit(Edit::History(History::KeepAll))
    }

    /// Resource limits (each finite limit ≥ 1, per instance ≤ total, keep-last depth ≤ per
    /// instance).
    pub fn resource_limits(self, limits: ResourceLimits) -> Topic {
        self.edit(Edit::ResourceLimits(limits))
    }

    /// Lifespan of a written sample (writers; must be positive).
    pub fn lifespan(self, d: Duration) -> Topic {
        self.edit(Edit::Lifespan(qos_duration(d)))
    }

    /// Replaces the partitions: names or `*` / `?` patterns (none: the default partition).
    pub fn partitions<I, S>(mut self, names: I) -> Topic
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.partitions = names.into_iter().map(Into::into).collect();
        self
    }

    /// Adds one partition name or pattern.
    pub fn partition(mut self, name: impl Into<String>) -> Topic {
        self.partitions.push(name.into());
        self
    }

    /// The QoS an endpoint of `kind` gets from this declaration (not yet validated).
    pub fn qos_for(&self, kind: EndpointKind) -> EndpointQos {
        let mut q = self.base.unwrap_or_else(|| EndpointQos::default_for(kind));
        for e in &self.edits {
            match *e {
                Edit::Reliability(k) => q.reliability.kind = k,
                Edit::MaxBlocking(d) => q.reliability.max_blocking_time = d,
                Edit::Durability(d) => q.durability = d,
                Edit::Deadline(d) => q.deadline.period = d,
                Edit::LatencyBudget(d) => q.latency_budget.duration = d,
                Edit::Ownership(k) => q.ownership = k,
                Edit::OwnershipStrength(s) => q.ownership_strength = s,
                Edit::Liveliness(kind, lease) => {
                    q.liveliness = Liveliness {
                        kind,
                        lease_duration: lease,
                    }
                }
                Edit::DestinationOrder(k) => q.destination_order = k,
                Edit::Presentation(p) => q.presentation = p,
                Edit::History(h) => q.history = h,
                Edit::ResourceLimits(r) => q.resource_limits = r,
                Edit::Lifespan(d) => q.lifespan.duration = d,
            }
        }
        q
    }

    /// Checks the declaration for an endpoint of `kind` with `shoal-discovery`'s rules (the
    /// ones the control plane applies again): names, partitions, QoS ranges and consistency,
    /// a known type hash.
    pub fn validate(&self, kind: EndpointKind) -> Result<EndpointSpec, TopicSpecError> {
        TopicName::new(self.name.as_str())?;
        TypeName::new(self.type_name.as_str())?;
        Partitions::new(self.partitions.iter().map(String::as_str))?;
        let qos = self.qos_for(kind);
        qos.consistent()?;
        let type_hash = self
            .type_hash
            .unwrap_or_else(|| type_hash_of(&self.type_name));
        if !type_hash.is_known() {
            return Err(TopicSpecError::UnknownTypeHash);
        }
        Ok(EndpointSpec {
            kind,
            topic: self.name.clone(),
            type_name: self.type_name.clone(),
            type_hash,
            qos,
            partitions: self.partitions.clone(),
        })
    }
}

/// A validated declaration of one endpoint, as handed to the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSpec {
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Topic name.
    pub topic: String,
    /// Type name.
    pub type_name: String,
    /// Type hash (known).
    pub type_hash: TypeHash,
    /// Every policy.
    pub qos: EndpointQos,
    /// Partition names or patterns.
    pub partitions: Vec<String>,
}

/// Why a writer and a reader do not match ([`crate::Event::Incompatible`]): every failing
/// rule of `shoal-discovery`'s matching, in its fixed order. `Display` joins them in one
/// line (`partitions do not overlap: ...; Reliability (ReliabilityKind): writer offers ...`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reasons(pub Vec<Incompatibility>);

impl Reasons {
    /// The reasons, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Incompatibility> {
        self.0.iter()
    }

    /// The QoS policies responsible, in order (a policy once).
    pub fn policies(&self) -> Vec<Policy> {
        let mut v: Vec<Policy> = Vec::new();
        for p in self.0.iter().filter_map(Incompatibility::policy) {
            if !v.contains(&p) {
                v.push(p);
            }
        }
        v
    }

    /// True when the partition lists do not overlap.
    pub fn partitions(&self) -> bool {
        self.0
            .iter()
            .any(|r| matches!(r, Incompatibility::Partitions { .. }))
    }

    /// True when the types differ (name or hash).
    pub fn type_mismatch(&self) -> bool {
        self.0.iter().any(|r| {
            matches!(
                r,
                Incompatibility::TypeName { .. }
                    | Incompatibility::TypeHashMismatch
                    | Incompatibility::TypeHashUnknown
            )
        })
    }
}

impl fmt::Display for Reasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no reason given");
        }
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl From<Vec<Incompatibility>> for Reasons {
    fn from(v: Vec<Incompatibility>) -> Reasons {
        Reasons(v)
    }
}

/// Why `writer` and `reader` do not match, by the rules the control plane applies (`Ok`
/// when they do): for any pair a [`TopicsSnapshot`] lists, remote ones included,
/// which raise no [`crate::Event::Incompatible`] here (only pairs with a local side do).
/// Two endpoints that are not one writer and one reader give that as their reason.
pub fn explain(writer: &EndpointView, reader: &EndpointView) -> Result<(), Reasons> {
    let info = |e: &EndpointView| -> Option<shoal_discovery::types::EndpointInfo> {
        let mut prefix = [0; 12];
        prefix.copy_from_slice(&e.guid[..12]);
        let mut entity = [0; 4];
        entity.copy_from_slice(&e.guid[12..]);
        let mut i = shoal_discovery::types::EndpointInfo::new(
            shoal_discovery::types::Guid::new(
                shoal_discovery::types::GuidPrefix(prefix),
                shoal_discovery::types::EntityId(entity),
            ),
            e.kind,
            TopicName::new(e.topic.as_str()).ok()?,
            TypeName::new(e.type_name.as_str()).ok()?,
            e.type_hash,
        );
        i.partitions = Partitions::new(e.partitions.iter().map(String::as_str)).ok()?;
        i.qos = e.qos;
        Some(i)
    };
    match (info(writer), info(reader)) {
        (Some(w), Some(r)) => shoal_discovery::matching::explain(&w, &r).map_err(Reasons),
        // A view holds only admitted endpoints, whose names and partitions are valid.
        _ => Err(Reasons(vec![Incompatibility::UnknownEndpoint])),
    }
}

/// An endpoint GUID as 32 hex digits (node prefix, then entity id), for logs and examples.
pub fn guid_hex(guid: &EndpointGuid) -> String {
    hex::encode(guid)
}

/// One topic of a [`TopicsSnapshot`], with its counters as they are now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSummary {
    /// The topic name.
    pub name: String,
    /// Writers known on it (local and remote).
    pub writers: usize,
    /// Readers known on it (local and remote).
    pub readers: usize,
    /// This node's counters of the topic: samples written, delivered, forwarded, dropped by
    /// cause (zero until a route used the topic).
    pub stats: TopicStats,
}

/// What this node knows about topics ([`crate::Mesh::topics`]): published by the control
/// plane after every change, read without asking it; the counters are read when the
/// snapshot is taken.
#[derive(Debug, Clone)]
pub struct TopicsSnapshot {
    /// Every topic with at least one endpoint, by name.
    pub topics: Vec<TopicSummary>,
    /// The control core's whole view: endpoints, matches, rejections by table and cause,
    /// table occupancy, discovery counters. `None` before the node started.
    pub view: Option<Arc<TopicsView>>,
    /// The discovery counters (frames in, duplicates, cycles, route tables, ...) as of the
    /// control plane's last step: current, unlike a view that only changes with what it
    /// lists.
    pub discovery: DiscoveryStats,
}

impl TopicsSnapshot {
    pub(crate) fn of(view: Option<Arc<TopicsView>>, discovery: DiscoveryStats) -> TopicsSnapshot {
        let topics = view
            .iter()
            .flat_map(|v| v.topics.iter())
            .map(|t| TopicSummary {
                name: t.name.clone(),
                writers: t.writers,
                readers: t.readers,
                stats: t
                    .counters
                    .as_ref()
                    .map(|c| c.snapshot())
                    .unwrap_or_default(),
            })
            .collect();
        TopicsSnapshot {
            topics,
            view,
            discovery,
        }
    }

    /// The topic named `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicSummary> {
        self.topics.iter().find(|t| t.name == name)
    }

    fn endpoints(&self) -> impl Iterator<Item = &EndpointView> {
        self.view.iter().flat_map(|v| v.endpoints.iter())
    }

    /// Every writer known (local and remote).
    pub fn writers(&self) -> impl Iterator<Item = &EndpointView> {
        self.endpoints().filter(|e| e.kind == EndpointKind::Writer)
    }

    /// Every reader known (local and remote).
    pub fn readers(&self) -> impl Iterator<Item = &EndpointView> {
        self.endpoints().filter(|e| e.kind == EndpointKind::Reader)
    }

    /// The matched (writer, reader) pairs, sorted.
    pub fn matches(&self) -> &[(EndpointGuid, EndpointGuid)] {
        self.view.as_ref().map_or(&[], |v| &v.matches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_and_reader_get_their_kind_defaults_then_the_settings() {
        let t = Topic::new("a/b", "T");
        let w = t.validate(EndpointKind::Writer).unwrap();
        let r = t.validate(EndpointKind::Reader).unwrap();
        assert_eq!(w.qos.reliability.kind, ReliabilityKind::Reliable);
        assert_eq!(r.qos.reliability.kind, ReliabilityKind::BestEffort);
        assert_eq!(w.type_hash, type_hash_of("T"));
        let t = t
            .reliable()
            .history_keep_last(10)
            .deadline(Duration::from_millis(5))
            .partitions(["robot/*"])
            .partition("x?");
        let r = t.validate(EndpointKind::Reader).unwrap();
        assert_eq!(r.qos.reliability.kind, ReliabilityKind::Reliable);
        assert_eq!(r.qos.history, History::KeepLast { depth: 10 });
        assert_eq!(r.qos.deadline.period, QosDuration::from_millis(5));
        assert_eq!(r.partitions, vec!["robot/*".to_owned(), "x?".to_owned()]);
    }

    #[test]
    fn bad_declarations_are_typed_errors() {
        let bad = |t: Topic| t.validate(EndpointKind::Writer).unwrap_err();
        assert!(matches!(
            bad(Topic::new("", "T")),
            TopicSpecError::Name(TypesError::EmptyName { .. })
        ));
        assert!(matches!(
            bad(Topic::new("t", "")),
            TopicSpecError::Name(TypesError::EmptyName { .. })
        ));
        assert!(matches!(
            bad(Topic::new("t".repeat(300), "T")),
            TopicSpecError::Name(TypesError::NameTooLong { .. })
        ));
        assert!(matches!(
            bad(Topic::new("t", "T").partitions((0..65).map(|i| i.to_string()))),
            TopicSpecError::Name(TypesError::TooManyPartitions(65))
        ));
        assert_eq!(
            bad(Topic::new("t", "T").history_keep_last(0)),
            TopicSpecError::Qos(QosError::OutOfRange {
                policy: Policy::History,
                reason: "keep-last depth must be at least 1"
            })
        );
        let limits = ResourceLimits {
            max_samples_per_instance: Limit::AtMost(4),
            ..ResourceLimits::default()
        };
        assert_eq!(
            bad(Topic::new("t", "T")
                .history_keep_last(10)
                .resource_limits(limits)),
            TopicSpecError::Qos(QosError::DepthExceedsLimit {
                depth: 10,
                limit: 4
            })
        );
        assert!(matches!(
            bad(Topic::new("t", "T").deadline(Duration::ZERO)),
            TopicSpecError::Qos(QosError::OutOfRange {
                policy: Policy::Deadline,
                ..
            })
        ));
        assert_eq!(
            bad(Topic::new("t", "T").type_hash([0; 16])),
            TopicSpecError::UnknownTypeHash
        );
    }

    #[test]
    fn the_default_type_hash_depends_on_the_name_only() {
        assert_eq!(type_hash_of("Imu"), type_hash_of("Imu"));
        assert_ne!(type_hash_of("Imu"), type_hash_of("Imu2"));
        assert!(type_hash_of("").is_known());
        // Pinned (computed independently from the doc comment's definition): other
        // implementations must reproduce it.
        assert_eq!(
            hex::encode(type_hash_of("Imu").0),
            "b676c68e3d8982748cf0e78c4ee5f7f6"
        );
    }

    #[test]
    fn reasons_read_as_one_line_and_name_their_policies() {
        let r = Reasons(vec![
            Incompatibility::Partitions {
                writer: vec!["a".into()],
                reader: vec!["b".into()],
            },
            Incompatibility::Qos {
                rule: QosRule::ReliabilityKind,
                offered: "BestEffort".into(),
                requested: "Reliable".into(),
            },
        ]);
        let s = r.to_string();
        assert!(s.contains("partitions do not overlap"), "{s}");
        assert!(s.contains("; Reliability"), "{s}");
        assert!(r.partitions());
        assert!(!r.type_mismatch());
        assert_eq!(r.policies(), vec![Policy::Reliability]);
        assert_eq!(Reasons::default().to_string(), "no reason given");
    }

    fn view(kind: EndpointKind, t: &Topic, n: u8) -> EndpointView {
        let spec = t.validate(kind).unwrap();
        EndpointView {
            guid: [n; 16],
            kind,
            topic: spec.topic,
            type_name: spec.type_name,
            type_hash: spec.type_hash,
            qos: spec.qos,
            partitions: spec.partitions,
            local: false,
            node: shoal_proto::PeerId([n; 16]),
        }
    }

    #[test]
    fn explain_gives_the_reasons_of_any_listed_pair() {
        let w = view(EndpointKind::Writer, &Topic::new("a", "T").best_effort(), 1);
        let ok = view(EndpointKind::Reader, &Topic::new("a", "T"), 2);
        assert_eq!(explain(&w, &ok), Ok(()));
        let picky = Topic::new("a", "T2").reliable().partitions(["p"]);
        let r = view(EndpointKind::Reader, &picky, 3);
        let why = explain(&w, &r).unwrap_err();
        assert!(why.type_mismatch() && why.partitions(), "{why}");
        assert_eq!(why.policies(), vec![Policy::Reliability]);
        assert!(matches!(
            explain(&ok, &w).unwrap_err().0[..],
            [Incompatibility::NotWriterReader { .. }]
        ));
    }

    #[test]
    fn an_empty_snapshot_lists_nothing() {
        let s = TopicsSnapshot::of(None, Default::default());
        assert!(s.topics.is_empty());
        assert_eq!(s.writers().count(), 0);
        assert!(s.matches().is_empty());
        assert!(s.topic("x").is_none());
    }
}
