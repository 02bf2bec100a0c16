//! Quality-of-service policies, their defaults and their valid ranges.
//!
//! Shared with the record codec (edge helper): keep changes additive.
//!
//! A policy absent from a record means the default given here; a policy
//! present with a value outside the range documented here makes the whole
//! record invalid ([`EndpointQos::validate`]). Request/offered compatibility
//! lives in [`crate::matching`].

use crate::kind::EndpointKind;

/// A QoS duration in nanoseconds; [`QosDuration::INFINITE`] means "never".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct QosDuration(u64);

impl QosDuration {
    /// Zero.
    pub const ZERO: Self = Self(0);
    /// Infinite: larger than every finite duration.
    pub const INFINITE: Self = Self(u64::MAX);
    /// From nanoseconds (`u64::MAX` is infinite).
    pub const fn from_nanos(n: u64) -> Self {
        Self(n)
    }
    /// From milliseconds, saturating to infinite.
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms.saturating_mul(1_000_000))
    }
    /// From seconds, saturating to infinite.
    pub const fn from_secs(s: u64) -> Self {
        Self(s.saturating_mul(1_000_000_000))
    }
    /// Nanoseconds (`u64::MAX` when infinite).
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// True for [`QosDuration::INFINITE`].
    pub const fn is_infinite(self) -> bool {
        self.0 == u64::MAX
    }
}

/// Names each policy, for errors and match explanations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    /// [`Reliability`].
    Reliability,
    /// [`DurabilityKind`].
    Durability,
    /// [`Deadline`].
    Deadline,
    /// [`LatencyBudget`].
    LatencyBudget,
    /// [`OwnershipKind`] and strength.
    Ownership,
    /// [`Liveliness`].
    Liveliness,
    /// [`DestinationOrderKind`].
    DestinationOrder,
    /// [`Presentation`].
    Presentation,
    /// [`History`].
    History,
    /// [`ResourceLimits`].
    ResourceLimits,
    /// [`Lifespan`].
    Lifespan,
}

/// A policy value out of range, or two policies of one endpoint contradicting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    /// A value outside its documented range.
    #[error("{policy:?} out of range: {reason}")]
    OutOfRange {
        /// The policy.
        policy: Policy,
        /// Which rule.
        reason: &'static str,
    },
    /// History keeps more samples per instance than resource limits allow.
    #[error("history depth {depth} exceeds max_samples_per_instance {limit}")]
    DepthExceedsLimit {
        /// Declared keep-last depth.
        depth: u32,
        /// Declared per-instance limit.
        limit: u32,
    },
    /// Per-instance limit larger than the total limit.
    #[error("max_samples_per_instance {per_instance} exceeds max_samples {total}")]
    PerInstanceExceedsTotal {
        /// Declared per-instance limit.
        per_instance: u32,
        /// Declared total limit.
        total: u32,
    },
}

/// Reliability kinds, ordered weakest first (offered ≥ requested matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReliabilityKind {
    /// Samples may be lost.
    BestEffort,
    /// Lost samples are repaired.
    Reliable,
}

/// Reliability policy. Default: writers `Reliable`, readers `BestEffort`;
/// `max_blocking_time` 100 ms, any value valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reliability {
    /// Kind.
    pub kind: ReliabilityKind,
    /// How long a reliable write may block when resources are full.
    pub max_blocking_time: QosDuration,
}

/// Durability kinds, ordered weakest first (offered ≥ requested matches).
/// Default `Volatile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum DurabilityKind {
    /// No history for late joiners.
    #[default]
    Volatile,
    /// The writer keeps history for late joiners.
    TransientLocal,
    /// A service keeps history beyond the writer.
    Transient,
    /// History survives restarts.
    Persistent,
}

/// Deadline policy: maximum period between samples of one instance.
/// Default infinite; valid range: > 0. Matches when offered ≤ requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Deadline {
    /// The period.
    pub period: QosDuration,
}

/// Latency budget: tolerated delivery delay. Default zero; any value valid.
/// Matches when offered ≤ requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LatencyBudget {
    /// The budget.
    pub duration: QosDuration,
}

/// Ownership kind; must be equal on both sides. Default `Shared`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum OwnershipKind {
    /// Every writer's samples are delivered.
    #[default]
    Shared,
    /// Only the strongest writer per instance is delivered.
    Exclusive,
}

/// Liveliness kinds, ordered weakest first (offered ≥ requested matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum LivelinessKind {
    /// The infrastructure asserts liveliness.
    #[default]
    Automatic,
    /// The application asserts it per participant.
    ManualByParticipant,
    /// The application asserts it per writer.
    ManualByTopic,
}

/// Liveliness policy. Default `Automatic`, infinite lease; valid lease: > 0.
/// Matches when offered kind ≥ requested kind and offered lease ≤ requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Liveliness {
    /// Kind.
    pub kind: LivelinessKind,
    /// Lease.
    pub lease_duration: QosDuration,
}

/// Destination order kinds, ordered weakest first. Default by reception.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum DestinationOrderKind {
    /// Order of arrival.
    #[default]
    ByReceptionTimestamp,
    /// Order of the writer's timestamp.
    BySourceTimestamp,
}

/// Presentation access scopes, ordered weakest first. Default `Instance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum AccessScope {
    /// Per instance.
    #[default]
    Instance,
    /// Per topic.
    Topic,
    /// Per group of topics.
    Group,
}

/// Presentation policy. Default: `Instance`, not coherent, not ordered.
/// Matches when offered scope ≥ requested and every requested flag is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Presentation {
    /// Scope.
    pub access_scope: AccessScope,
    /// Coherent changes.
    pub coherent_access: bool,
    /// Ordered changes.
    pub ordered_access: bool,
}

/// History policy. Default `KeepLast { depth: 1 }`; valid depth: ≥ 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum History {
    /// Keep the newest `depth` samples per instance.
    KeepLast {
        /// How many.
        depth: u32,
    },
    /// Keep everything resource limits allow.
    KeepAll,
}

/// A resource limit: unlimited, or at most `n` with `n ≥ 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Limit {
    /// No limit.
    #[default]
    Unlimited,
    /// At most this many; valid: ≥ 1.
    AtMost(u32),
}

/// Resource limits. Default all unlimited; each finite value ≥ 1, and
/// `max_samples_per_instance ≤ max_samples` when both are finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ResourceLimits {
    /// Total samples.
    pub max_samples: Limit,
    /// Instances.
    pub max_instances: Limit,
    /// Samples per instance.
    pub max_samples_per_instance: Limit,
}

/// Lifespan: how long a written sample stays valid. Default infinite;
/// valid: > 0. Writer-side only, not part of matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lifespan {
    /// The duration.
    pub duration: QosDuration,
}

/// Every policy one endpoint holds. Writer-only fields (`ownership_strength`,
/// `lifespan`) are carried but ignored on readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointQos {
    /// Reliability.
    pub reliability: Reliability,
    /// Durability.
    pub durability: DurabilityKind,
    /// Deadline.
    pub deadline: Deadline,
    /// Latency budget.
    pub latency_budget: LatencyBudget,
    /// Ownership kind.
    pub ownership: OwnershipKind,
    /// Ownership strength (writers); any value valid, default 0.
    pub ownership_strength: i32,
    /// Liveliness.
    pub liveliness: Liveliness,
    /// Destination order.
    pub destination_order: DestinationOrderKind,
    /// Presentation.
    pub presentation: Presentation,
    /// History.
    pub history: History,
    /// Resource limits.
    pub resource_limits: ResourceLimits,
    /// Lifespan (writers).
    pub lifespan: Lifespan,
}

impl EndpointQos {
    /// Defaults for a writer (reliable).
    pub fn writer_default() -> Self {
        Self {
            reliability: Reliability {
                kind: ReliabilityKind::Reliable,
                max_blocking_time: QosDuration::from_millis(100),
            },
            durability: DurabilityKind::Volatile,
            deadline: Deadline {
                period: QosDuration::INFINITE,
            },
            latency_budget: LatencyBudget::default(),
            ownership: OwnershipKind::Shared,
            ownership_strength: 0,
            liveliness: Liveliness {
                kind: LivelinessKind::Automatic,
                lease_duration: QosDuration::INFINITE,
            },
            destination_order: DestinationOrderKind::ByReceptionTimestamp,
            presentation: Presentation::default(),
            history: History::KeepLast { depth: 1 },
            resource_limits: ResourceLimits::default(),
            lifespan: Lifespan {
                duration: QosDuration::INFINITE,
            },
        }
    }

    /// Defaults for a reader (best effort).
    pub fn reader_default() -> Self {
        let mut q = Self::writer_default();
        q.reliability.kind = ReliabilityKind::BestEffort;
        q
    }

    /// Defaults for the given endpoint kind.
    pub fn default_for(kind: EndpointKind) -> Self {
        match kind {
            EndpointKind::Writer => Self::writer_default(),
            EndpointKind::Reader => Self::reader_default(),
        }
    }

    /// Checks each value against its documented range. A decoder calls this
    /// and rejects the whole record on error.
    pub fn validate(&self) -> Result<(), QosError> {
        let oor = |policy, reason| Err(QosError::OutOfRange { policy, reason });
        if self.deadline.period == QosDuration::ZERO {
            return oor(Policy::Deadline, "period must be positive");
        }
        if self.liveliness.lease_duration == QosDuration::ZERO {
            return oor(Policy::Liveliness, "lease duration must be positive");
        }
        if self.lifespan.duration == QosDuration::ZERO {
            return oor(Policy::Lifespan, "duration must be positive");
        }
        if self.history == (History::KeepLast { depth: 0 }) {
            return oor(Policy::History, "keep-last depth must be at least 1");
        }
        let rl = &self.resource_limits;
        for l in [
            rl.max_samples,
            rl.max_instances,
            rl.max_samples_per_instance,
        ] {
            if l == Limit::AtMost(0) {
                return oor(Policy::ResourceLimits, "a finite limit must be at least 1");
            }
        }
        Ok(())
    }

    /// The seed's `Consistent`: ranges valid and no policy contradicting
    /// another. An inconsistent endpoint can never match and is rejected
    /// before it enters any scan.
    pub fn consistent(&self) -> Result<(), QosError> {
        self.validate()?;
        let rl = &self.resource_limits;
        if let (History::KeepLast { depth }, Limit::AtMost(limit)) =
            (self.history, rl.max_samples_per_instance)
        {
            if depth > limit {
                return Err(QosError::DepthExceedsLimit { depth, limit });
            }
        }
        if let (Limit::AtMost(per_instance), Limit::AtMost(total)) =
            (rl.max_samples_per_instance, rl.max_samples)
        {
            if per_instance > total {
                return Err(QosError::PerInstanceExceedsTotal {
                    per_instance,
                    total,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_consistent() {
        for q in [EndpointQos::writer_default(), EndpointQos::reader_default()] {
            q.consistent().unwrap();
        }
        assert_eq!(
            EndpointQos::reader_default().reliability.kind,
            ReliabilityKind::BestEffort
        );
    }

    #[test]
    fn depth_beyond_limit_is_inconsistent_but_in_range() {
        let mut q = EndpointQos::writer_default();
        q.history = History::KeepLast { depth: 10 };
        q.resource_limits.max_samples_per_instance = Limit::AtMost(5);
        q.validate().unwrap();
        assert_eq!(
            q.consistent(),
            Err(QosError::DepthExceedsLimit {
                depth: 10,
                limit: 5
            })
        );
        q.resource_limits.max_samples_per_instance = Limit::AtMost(10);
        q.consistent().unwrap();
        q.resource_limits.max_samples = Limit::AtMost(9);
        assert!(matches!(
            q.consistent(),
            Err(QosError::PerInstanceExceedsTotal { .. })
        ));
    }

    #[test]
    fn out_of_range_values_rejected() {
        let base = EndpointQos::writer_default();
        let mut q = base;
        q.history = History::KeepLast { depth: 0 };
        assert!(q.validate().is_err());
        let mut q = base;
        q.deadline.period = QosDuration::ZERO;
        assert!(q.validate().is_err());
        let mut q = base;
        q.liveliness.lease_duration = QosDuration::ZERO;
        assert!(q.validate().is_err());
        let mut q = base;
        q.resource_limits.max_instances = Limit::AtMost(0);
        assert!(q.validate().is_err());
        let mut q = base;
        q.lifespan.duration = QosDuration::ZERO;
        assert!(q.validate().is_err());
    }
}
