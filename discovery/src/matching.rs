//! Writer/reader compatibility: the pure test behind Match-Writer, and the
//! explanation users get when two endpoints do not match.
//!
//! [`compatible`] is the test behind the matching scan (the graph runs it on
//! partition lists it prepared once per endpoint, so the scan allocates
//! nothing); [`explain`] evaluates the same rules but reports every failing
//! one. A test keeps the two in agreement.

use std::fmt;

use crate::partition::{overlap, CompiledPartitions};
use crate::qos::{EndpointQos, Policy, QosError};
use crate::types::{EndpointInfo, EndpointKind};

/// One request/offered rule of a policy. Some policies have several rules
/// (liveliness: kind and lease; presentation: scope, coherent, ordered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QosRule {
    /// Offered reliability kind ≥ requested.
    ReliabilityKind,
    /// Offered durability ≥ requested.
    Durability,
    /// Offered deadline period ≤ requested.
    DeadlinePeriod,
    /// Offered latency budget ≤ requested.
    LatencyBudget,
    /// Ownership kinds equal.
    OwnershipKind,
    /// Offered liveliness kind ≥ requested.
    LivelinessKind,
    /// Offered liveliness lease ≤ requested.
    LivelinessLease,
    /// Offered destination order ≥ requested.
    DestinationOrder,
    /// Offered presentation access scope ≥ requested.
    PresentationScope,
    /// Coherent access requested ⇒ offered.
    PresentationCoherent,
    /// Ordered access requested ⇒ offered.
    PresentationOrdered,
}

impl QosRule {
    /// The policy this rule belongs to.
    pub fn policy(self) -> Policy {
        match self {
            Self::ReliabilityKind => Policy::Reliability,
            Self::Durability => Policy::Durability,
            Self::DeadlinePeriod => Policy::Deadline,
            Self::LatencyBudget => Policy::LatencyBudget,
            Self::OwnershipKind => Policy::Ownership,
            Self::LivelinessKind | Self::LivelinessLease => Policy::Liveliness,
            Self::DestinationOrder => Policy::DestinationOrder,
            Self::PresentationScope | Self::PresentationCoherent | Self::PresentationOrdered => {
                Policy::Presentation
            }
        }
    }
}

/// Evaluates every rule, writer's offer against reader's request.
/// Comparisons only: cheap enough to compute all of them every time.
fn rules(o: &EndpointQos, r: &EndpointQos) -> [(QosRule, bool); 11] {
    use QosRule::*;
    [
        (ReliabilityKind, o.reliability.kind >= r.reliability.kind),
        (Durability, o.durability >= r.durability),
        (DeadlinePeriod, o.deadline.period <= r.deadline.period),
        (
            LatencyBudget,
            o.latency_budget.duration <= r.latency_budget.duration,
        ),
        (OwnershipKind, o.ownership == r.ownership),
        (LivelinessKind, o.liveliness.kind >= r.liveliness.kind),
        (
            LivelinessLease,
            o.liveliness.lease_duration <= r.liveliness.lease_duration,
        ),
        (DestinationOrder, o.destination_order >= r.destination_order),
        (
            PresentationScope,
            o.presentation.access_scope >= r.presentation.access_scope,
        ),
        (
            PresentationCoherent,
            o.presentation.coherent_access || !r.presentation.coherent_access,
        ),
        (
            PresentationOrdered,
            o.presentation.ordered_access || !r.presentation.ordered_access,
        ),
    ]
}

fn describe(rule: QosRule, q: &EndpointQos) -> String {
    use QosRule::*;
    match rule {
        ReliabilityKind => format!("{:?}", q.reliability.kind),
        Durability => format!("{:?}", q.durability),
        DeadlinePeriod => fmt_dur(q.deadline.period),
        LatencyBudget => fmt_dur(q.latency_budget.duration),
        OwnershipKind => format!("{:?}", q.ownership),
        LivelinessKind => format!("{:?}", q.liveliness.kind),
        LivelinessLease => fmt_dur(q.liveliness.lease_duration),
        DestinationOrder => format!("{:?}", q.destination_order),
        PresentationScope => format!("{:?}", q.presentation.access_scope),
        PresentationCoherent => format!("coherent_access={}", q.presentation.coherent_access),
        PresentationOrdered => format!("ordered_access={}", q.presentation.ordered_access),
    }
}

fn fmt_dur(d: crate::qos::QosDuration) -> String {
    if d.is_infinite() {
        "infinite".to_owned()
    } else {
        format!("{}ns", d.as_nanos())
    }
}

/// True if an offered QoS satisfies a requested one.
pub fn qos_compatible(offered: &EndpointQos, requested: &EndpointQos) -> bool {
    rules(offered, requested).iter().all(|&(_, ok)| ok)
}

/// One reason a writer and a reader do not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incompatibility {
    /// The pair is not one writer and one reader.
    NotWriterReader {
        /// Kind of the first endpoint given.
        first: EndpointKind,
        /// Kind of the second.
        second: EndpointKind,
    },
    /// The writer's own policies contradict each other.
    WriterInconsistent(QosError),
    /// The reader's own policies contradict each other.
    ReaderInconsistent(QosError),
    /// Different topics.
    Topic {
        /// Writer's topic.
        writer: String,
        /// Reader's topic.
        reader: String,
    },
    /// Different type names.
    TypeName {
        /// Writer's type.
        writer: String,
        /// Reader's type.
        reader: String,
    },
    /// One side's type hash is the all-zero "unknown" value.
    TypeHashUnknown,
    /// Both type hashes known, but different.
    TypeHashMismatch,
    /// A request/offered rule fails.
    Qos {
        /// Which rule.
        rule: QosRule,
        /// What the writer offers.
        offered: String,
        /// What the reader requests.
        requested: String,
    },
    /// The partition lists do not overlap.
    Partitions {
        /// Writer's partitions (empty = default).
        writer: Vec<String>,
        /// Reader's partitions (empty = default).
        reader: Vec<String>,
    },
    /// Both endpoints are remote and the graph matches only pairs with a
    /// local side ([`crate::graph::MatchScope::LocalOnly`]).
    NoLocalSide,
    /// Both endpoints belong to one remote participant and the graph matches only pairs
    /// across participants ([`crate::graph::MatchScope::AcrossParticipants`]): that node
    /// matches them itself.
    SameRemoteParticipant,
    /// The endpoint is not in the graph.
    UnknownEndpoint,
}

impl Incompatibility {
    /// The QoS policy responsible, when a policy is.
    pub fn policy(&self) -> Option<Policy> {
        match self {
            Self::Qos { rule, .. } => Some(rule.policy()),
            Self::WriterInconsistent(e) | Self::ReaderInconsistent(e) => Some(match e {
                QosError::OutOfRange { policy, .. } => *policy,
                QosError::DepthExceedsLimit { .. } => Policy::History,
                QosError::PerInstanceExceedsTotal { .. } => Policy::ResourceLimits,
            }),
            _ => None,
        }
    }
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotWriterReader { first, second } => {
                write!(f, "not a writer/reader pair ({first:?}, {second:?})")
            }
            Self::WriterInconsistent(e) => write!(f, "writer QoS inconsistent: {e}"),
            Self::ReaderInconsistent(e) => write!(f, "reader QoS inconsistent: {e}"),
            Self::Topic { writer, reader } => {
                write!(f, "topic: writer {writer:?}, reader {reader:?}")
            }
            Self::TypeName { writer, reader } => {
                write!(f, "type name: writer {writer:?}, reader {reader:?}")
            }
            Self::TypeHashUnknown => write!(f, "type hash unknown (zero) on at least one side"),
            Self::TypeHashMismatch => write!(f, "type hashes differ"),
            Self::Qos {
                rule,
                offered,
                requested,
            } => write!(
                f,
                "{:?} ({rule:?}): writer offers {offered}, reader requests {requested}",
                rule.policy()
            ),
            Self::Partitions { writer, reader } => {
                write!(
                    f,
                    "partitions do not overlap: writer {writer:?}, reader {reader:?}"
                )
            }
            Self::NoLocalSide => write!(f, "neither endpoint is local"),
            Self::SameRemoteParticipant => write!(f, "both endpoints are on one remote node"),
            Self::UnknownEndpoint => write!(f, "endpoint not known"),
        }
    }
}

/// The full compatibility test: kinds, consistency, topic, type name, known and equal
/// type hash, QoS, partitions. Allocation-free except for preparing partition patterns
/// (the graph prepares them once per endpoint instead).
pub fn compatible(w: &EndpointInfo, r: &EndpointInfo) -> bool {
    w.kind == EndpointKind::Writer
        && r.kind == EndpointKind::Reader
        && w.topic == r.topic
        && w.qos.consistent().is_ok()
        && r.qos.consistent().is_ok()
        && compatible_on_topic(w, None, r, None, &mut 0)
}

/// The part of [`compatible`] left once the graph has established the rest:
/// `w` a writer and `r` a reader of the same topic, both admitted (so both
/// consistent). Cheapest and most selective tests first. `wc`/`rc` are the lists'
/// prepared forms when the caller holds them (`None` prepares them here); partition
/// work is added to `work`.
pub(crate) fn compatible_on_topic(
    w: &EndpointInfo,
    wc: Option<&CompiledPartitions>,
    r: &EndpointInfo,
    rc: Option<&CompiledPartitions>,
    work: &mut u64,
) -> bool {
    if !(w.type_hash == r.type_hash
        && w.type_hash.is_known()
        && qos_compatible(&w.qos, &r.qos)
        && w.type_name == r.type_name)
    {
        return false;
    }
    partitions_overlap(w, wc, r, rc, work)
}

/// Partitions-Match of two endpoints, preparing a list here when its prepared form is
/// not given.
fn partitions_overlap(
    w: &EndpointInfo,
    wc: Option<&CompiledPartitions>,
    r: &EndpointInfo,
    rc: Option<&CompiledPartitions>,
    work: &mut u64,
) -> bool {
    let (own_w, own_r);
    let wc = match wc {
        Some(c) => Some(c),
        None => {
            own_w = CompiledPartitions::new(&w.partitions);
            own_w.as_ref()
        }
    };
    let rc = match rc {
        Some(c) => Some(c),
        None => {
            own_r = CompiledPartitions::new(&r.partitions);
            own_r.as_ref()
        }
    };
    overlap(&w.partitions, wc, &r.partitions, rc, work)
}

/// Every reason writer `w` and reader `r` do not match; `Ok(())` if they do.
/// Reasons come in a fixed order: kinds, consistency, topic, type, QoS rules
/// (in [`QosRule`] order), partitions.
pub fn explain(w: &EndpointInfo, r: &EndpointInfo) -> Result<(), Vec<Incompatibility>> {
    explain_prepared(w, None, r, None)
}

/// [`explain`] with the partition lists' prepared forms when the caller holds them (the
/// graph does), so explaining a stored pair compiles nothing.
pub(crate) fn explain_prepared(
    w: &EndpointInfo,
    wc: Option<&CompiledPartitions>,
    r: &EndpointInfo,
    rc: Option<&CompiledPartitions>,
) -> Result<(), Vec<Incompatibility>> {
    let mut why = Vec::new();
    if w.kind != EndpointKind::Writer || r.kind != EndpointKind::Reader {
        why.push(Incompatibility::NotWriterReader {
            first: w.kind,
            second: r.kind,
        });
        return Err(why);
    }
    if let Err(e) = w.qos.consistent() {
        why.push(Incompatibility::WriterInconsistent(e));
    }
    if let Err(e) = r.qos.consistent() {
        why.push(Incompatibility::ReaderInconsistent(e));
    }
    if w.topic != r.topic {
        why.push(Incompatibility::Topic {
            writer: w.topic.as_str().to_owned(),
            reader: r.topic.as_str().to_owned(),
        });
    }
    if w.type_name != r.type_name {
        why.push(Incompatibility::TypeName {
            writer: w.type_name.as_str().to_owned(),
            reader: r.type_name.as_str().to_owned(),
        });
    }
    if !w.type_hash.is_known() || !r.type_hash.is_known() {
        why.push(Incompatibility::TypeHashUnknown);
    } else if w.type_hash != r.type_hash {
        why.push(Incompatibility::TypeHashMismatch);
    }
    for (rule, ok) in rules(&w.qos, &r.qos) {
        if !ok {
            why.push(Incompatibility::Qos {
                rule,
                offered: describe(rule, &w.qos),
                requested: describe(rule, &r.qos),
            });
        }
    }
    if !partitions_overlap(w, wc, r, rc, &mut 0) {
        why.push(Incompatibility::Partitions {
            writer: w.partitions.names().to_vec(),
            reader: r.partitions.names().to_vec(),
        });
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::*;
    use crate::types::*;

    fn ep(kind: EndpointKind, n: u8) -> EndpointInfo {
        EndpointInfo::new(
            Guid::new(GuidPrefix([n; 12]), EntityId([0, 0, n, 2])),
            kind,
            TopicName::new("t").unwrap(),
            TypeName::new("T").unwrap(),
            TypeHash([7; 16]),
        )
    }

    fn rules_failing(w: &EndpointInfo, r: &EndpointInfo) -> Vec<QosRule> {
        match explain(w, r) {
            Ok(()) => vec![],
            Err(v) => v
                .into_iter()
                .filter_map(|i| match i {
                    Incompatibility::Qos { rule, .. } => Some(rule),
                    _ => None,
                })
                .collect(),
        }
    }

    #[test]
    fn defaults_match() {
        let (w, r) = (ep(EndpointKind::Writer, 1), ep(EndpointKind::Reader, 2));
        assert!(compatible(&w, &r));
        assert_eq!(explain(&w, &r), Ok(()));
    }

    #[test]
    fn each_policy_reported_by_name() {
        let base_w = ep(EndpointKind::Writer, 1);
        let base_r = ep(EndpointKind::Reader, 2);
        type Edit = fn(&mut EndpointQos, &mut EndpointQos);
        let cases: [(Edit, QosRule); 11] = [
            (
                |w, r| {
                    w.reliability.kind = ReliabilityKind::BestEffort;
                    r.reliability.kind = ReliabilityKind::Reliable;
                },
                QosRule::ReliabilityKind,
            ),
            (
                |_, r| r.durability = DurabilityKind::TransientLocal,
                QosRule::Durability,
            ),
            (
                |w, r| {
                    w.deadline.period = QosDuration::from_millis(20);
                    r.deadline.period = QosDuration::from_millis(10);
                },
                QosRule::DeadlinePeriod,
            ),
            (
                |w, _| w.latency_budget.duration = QosDuration::from_millis(1),
                QosRule::LatencyBudget,
            ),
            (
                |w, _| w.ownership = OwnershipKind::Exclusive,
                QosRule::OwnershipKind,
            ),
            (
                |_, r| r.liveliness.kind = LivelinessKind::ManualByTopic,
                QosRule::LivelinessKind,
            ),
            (
                |_, r| r.liveliness.lease_duration = QosDuration::from_secs(1),
                QosRule::LivelinessLease,
            ),
            (
                |_, r| r.destination_order = DestinationOrderKind::BySourceTimestamp,
                QosRule::DestinationOrder,
            ),
            (
                |_, r| r.presentation.access_scope = AccessScope::Group,
                QosRule::PresentationScope,
            ),
            (
                |_, r| r.presentation.coherent_access = true,
                QosRule::PresentationCoherent,
            ),
            (
                |_, r| r.presentation.ordered_access = true,
                QosRule::PresentationOrdered,
            ),
        ];
        for (edit, rule) in cases {
            let (mut w, mut r) = (base_w.clone(), base_r.clone());
            edit(&mut w.qos, &mut r.qos);
            assert!(!compatible(&w, &r), "{rule:?}");
            assert_eq!(rules_failing(&w, &r), vec![rule]);
            // The stronger offer on the writer side fixes it.
            let (mut w2, r2) = (w.clone(), r.clone());
            w2.qos = r2.qos;
            w2.qos.reliability.kind = ReliabilityKind::Reliable;
            assert!(compatible(&w2, &r2), "{rule:?} mirrored offer should match");
        }
    }

    #[test]
    fn offering_more_than_requested_matches() {
        let mut w = ep(EndpointKind::Writer, 1);
        let r = ep(EndpointKind::Reader, 2);
        w.qos.durability = DurabilityKind::Persistent;
        w.qos.deadline.period = QosDuration::from_millis(5);
        w.qos.liveliness.kind = LivelinessKind::ManualByTopic;
        w.qos.liveliness.lease_duration = QosDuration::from_secs(1);
        w.qos.destination_order = DestinationOrderKind::BySourceTimestamp;
        w.qos.presentation = Presentation {
            access_scope: AccessScope::Group,
            coherent_access: true,
            ordered_access: true,
        };
        assert_eq!(explain(&w, &r), Ok(()));
    }

    #[test]
    fn names_hashes_partitions_and_consistency() {
        let w = ep(EndpointKind::Writer, 1);
        let mut r = ep(EndpointKind::Reader, 2);
        r.type_hash = TypeHash::UNKNOWN;
        assert_eq!(explain(&w, &r), Err(vec![Incompatibility::TypeHashUnknown]));
        let mut w0 = w.clone();
        w0.type_hash = TypeHash::UNKNOWN;
        let mut r0 = r.clone();
        r0.type_hash = TypeHash::UNKNOWN;
        assert!(!compatible(&w0, &r0), "two unknown hashes never match");
        r.type_hash = TypeHash([8; 16]);
        assert_eq!(
            explain(&w, &r),
            Err(vec![Incompatibility::TypeHashMismatch])
        );
        let mut r = ep(EndpointKind::Reader, 2);
        r.topic = TopicName::new("u").unwrap();
        r.type_name = TypeName::new("U").unwrap();
        r.partitions = Partitions::new(["x"]).unwrap();
        let why = explain(&w, &r).unwrap_err();
        assert_eq!(why.len(), 3);
        assert!(matches!(why[0], Incompatibility::Topic { .. }));
        assert!(matches!(why[1], Incompatibility::TypeName { .. }));
        assert!(matches!(why[2], Incompatibility::Partitions { .. }));
        let mut w = ep(EndpointKind::Writer, 1);
        w.qos.history = History::KeepLast { depth: 9 };
        w.qos.resource_limits.max_samples_per_instance = Limit::AtMost(3);
        let why = explain(&w, &ep(EndpointKind::Reader, 2)).unwrap_err();
        assert_eq!(why[0].policy(), Some(Policy::History));
        assert!(explain(&w, &w).is_err());
        let text = why[0].to_string();
        assert!(text.contains("history depth 9"), "{text}");
    }
}
