//! Identities, names and addresses carried by discovery announcements.
//!
//! Shared with the record codec (edge helper): keep changes additive.
//!
//! Every bounded field has its bound here as a constant, so the codec can
//! reject an out-of-range record with the same rule the graph applies.

use crate::qos::{EndpointQos, QosDuration};

pub use crate::kind::EndpointKind;

/// Longest topic, type, partition or participant name, in bytes.
pub const MAX_NAME_LEN: usize = 256;
/// Most partition names one endpoint may declare.
pub const MAX_PARTITIONS: usize = 64;
/// Most locators one participant or endpoint may advertise per list.
pub const MAX_LOCATORS: usize = 16;
/// Most links one participant may report about itself ([`ParticipantInfo::links`]); a node
/// with more reports the first ones by peer id.
pub const MAX_LINK_REPORTS: usize = 64;

/// Why a name, list or record is outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypesError {
    /// A topic or type name was empty.
    #[error("{what} must not be empty")]
    EmptyName {
        /// Which field.
        what: &'static str,
    },
    /// A name exceeded [`MAX_NAME_LEN`].
    #[error("{what} is {len} bytes, more than {MAX_NAME_LEN}")]
    NameTooLong {
        /// Which field.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// More than [`MAX_PARTITIONS`] partition names.
    #[error("{0} partition names, more than {MAX_PARTITIONS}")]
    TooManyPartitions(usize),
    /// More than [`MAX_LOCATORS`] locators in one list.
    #[error("{0} locators, more than {MAX_LOCATORS}")]
    TooManyLocators(usize),
    /// More than [`MAX_LINK_REPORTS`] link reports in a participant record.
    #[error("{0} link reports, more than {MAX_LINK_REPORTS}")]
    TooManyLinkReports(usize),
    /// A locator kind code that is not one of [`LocatorKind`].
    #[error("unknown locator kind code {0}")]
    UnknownLocatorKind(i32),
    /// An endpoint's QoS is out of range or contradicts itself.
    #[error(transparent)]
    Qos(#[from] crate::qos::QosError),
}

/// The 12-byte prefix that every GUID of one participant shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GuidPrefix(pub [u8; 12]);

/// The 4-byte identifier of an entity inside its participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EntityId(pub [u8; 4]);

/// A globally unique endpoint (or participant) identity: prefix plus entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Guid {
    /// The owning participant's prefix.
    pub prefix: GuidPrefix,
    /// The entity within that participant.
    pub entity: EntityId,
}

impl Guid {
    /// Builds a GUID from its two halves.
    pub const fn new(prefix: GuidPrefix, entity: EntityId) -> Self {
        Self { prefix, entity }
    }
}

fn check_name(what: &'static str, s: &str, allow_empty: bool) -> Result<(), TypesError> {
    if s.is_empty() && !allow_empty {
        return Err(TypesError::EmptyName { what });
    }
    if s.len() > MAX_NAME_LEN {
        return Err(TypesError::NameTooLong { what, len: s.len() });
    }
    Ok(())
}

/// A topic name: non-empty, at most [`MAX_NAME_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicName(String);

impl TopicName {
    /// Validates and wraps a topic name.
    pub fn new(name: impl Into<String>) -> Result<Self, TypesError> {
        let name = name.into();
        check_name("topic name", &name, false)?;
        Ok(Self(name))
    }
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A type name: non-empty, at most [`MAX_NAME_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeName(String);

impl TypeName {
    /// Validates and wraps a type name.
    pub fn new(name: impl Into<String>) -> Result<Self, TypesError> {
        let name = name.into();
        check_name("type name", &name, false)?;
        Ok(Self(name))
    }
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A 16-byte hash of a type's structure.
///
/// The all-zero value means "unknown": an endpoint with it is stored but never
/// matched, because two unknown hashes prove nothing about agreement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TypeHash(pub [u8; 16]);

impl TypeHash {
    /// The "unknown type" value, which never matches.
    pub const UNKNOWN: Self = Self([0; 16]);
    /// True unless this is [`TypeHash::UNKNOWN`].
    pub fn is_known(&self) -> bool {
        self.0 != [0; 16]
    }
}

/// An endpoint's partition names, each possibly a `*`/`?` pattern.
///
/// An empty list means the default partition `""` (see
/// [`crate::partition::partitions_match`]), not "any partition".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Partitions(Vec<String>);

impl Partitions {
    /// Validates count (≤ [`MAX_PARTITIONS`]) and length (≤ [`MAX_NAME_LEN`] each).
    pub fn new<I, S>(names: I) -> Result<Self, TypesError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        if names.len() > MAX_PARTITIONS {
            return Err(TypesError::TooManyPartitions(names.len()));
        }
        for n in &names {
            check_name("partition name", n, true)?;
        }
        Ok(Self(names))
    }
    /// The default partition: an empty list.
    pub fn default_partition() -> Self {
        Self(Vec::new())
    }
    /// The names as declared (empty means the default partition).
    pub fn names(&self) -> &[String] {
        &self.0
    }
    /// True when no name is declared.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Transport of a locator. Codes follow the RTPS locator kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LocatorKind {
    /// UDP over IPv4 (code 1).
    UdpV4,
    /// UDP over IPv6 (code 2).
    UdpV6,
    /// TCP over IPv4 (code 4).
    TcpV4,
    /// TCP over IPv6 (code 8).
    TcpV6,
    /// Same-host shared memory (code 16).
    Shm,
}

impl LocatorKind {
    /// The wire code of this kind.
    pub const fn code(self) -> i32 {
        match self {
            Self::UdpV4 => 1,
            Self::UdpV6 => 2,
            Self::TcpV4 => 4,
            Self::TcpV6 => 8,
            Self::Shm => 16,
        }
    }
    /// The kind for a wire code.
    pub fn from_code(code: i32) -> Result<Self, TypesError> {
        Ok(match code {
            1 => Self::UdpV4,
            2 => Self::UdpV6,
            4 => Self::TcpV4,
            8 => Self::TcpV6,
            16 => Self::Shm,
            other => return Err(TypesError::UnknownLocatorKind(other)),
        })
    }
    /// True for the IPv4 kinds, whose address lives in the last 4 bytes.
    pub const fn is_v4(self) -> bool {
        matches!(self, Self::UdpV4 | Self::TcpV4)
    }
}

/// One transport address as announced: kind, 16-byte address, port.
///
/// IPv4 addresses occupy the last four bytes, the rest zero (RTPS layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Locator {
    /// Transport.
    pub kind: LocatorKind,
    /// Address bytes.
    pub address: [u8; 16],
    /// Port.
    pub port: u32,
}

impl Locator {
    /// A UDPv4 locator.
    pub fn udp_v4(ip: [u8; 4], port: u32) -> Self {
        let mut address = [0; 16];
        address[12..].copy_from_slice(&ip);
        Self {
            kind: LocatorKind::UdpV4,
            address,
            port,
        }
    }
    /// A UDPv6 locator.
    pub fn udp_v6(address: [u8; 16], port: u32) -> Self {
        Self {
            kind: LocatorKind::UdpV6,
            address,
            port,
        }
    }
    /// The IPv4 octets, for the v4 kinds.
    pub fn ipv4(&self) -> Option<[u8; 4]> {
        self.kind.is_v4().then(|| {
            let mut ip = [0; 4];
            ip.copy_from_slice(&self.address[12..]);
            ip
        })
    }
    /// 127.0.0.0/8 or ::1.
    pub fn is_loopback(&self) -> bool {
        match self.ipv4() {
            Some(ip) => ip[0] == 127,
            None => {
                self.kind != LocatorKind::Shm
                    && self.address == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
            }
        }
    }
    /// 0.0.0.0 or :: (the "any" address).
    pub fn is_wildcard(&self) -> bool {
        match self.ipv4() {
            Some(ip) => ip == [0; 4],
            None => self.kind != LocatorKind::Shm && self.address == [0; 16],
        }
    }
    /// 224.0.0.0/4 or ff00::/8.
    pub fn is_multicast(&self) -> bool {
        match self.ipv4() {
            Some(ip) => (224..=239).contains(&ip[0]),
            None => self.kind != LocatorKind::Shm && self.address[0] == 0xff,
        }
    }
}

/// Checks a locator list against [`MAX_LOCATORS`].
pub fn check_locators(list: &[Locator]) -> Result<(), TypesError> {
    if list.len() > MAX_LOCATORS {
        return Err(TypesError::TooManyLocators(list.len()));
    }
    Ok(())
}

/// Where a candidate address came from; learned addresses sort first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LocatorOrigin {
    /// Announced by the peer itself.
    Learned,
    /// Written into local configuration as a fallback.
    Fallback,
}

/// A locator with the attributes Select-Locators sorts by:
/// (origin, priority, address, port) — lower priority value sorts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LocatorCandidate {
    /// The address itself.
    pub locator: Locator,
    /// Learned from the peer or configured as fallback.
    pub origin: LocatorOrigin,
    /// Preference, lower first.
    pub priority: u16,
}

impl LocatorCandidate {
    /// The deterministic sort key of Select-Locators.
    pub fn sort_key(&self) -> (LocatorOrigin, u16, LocatorKind, [u8; 16], u32) {
        (
            self.origin,
            self.priority,
            self.locator.kind,
            self.locator.address,
            self.locator.port,
        )
    }
}

/// A point in time passed in by the caller, in nanoseconds since an epoch of
/// its choosing. The crate never reads a clock itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Time(pub u64);

impl Time {
    /// From nanoseconds.
    pub const fn from_nanos(n: u64) -> Self {
        Self(n)
    }
    /// From milliseconds (saturating).
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms.saturating_mul(1_000_000))
    }
    /// This time plus a duration; an infinite duration gives "never".
    pub fn saturating_add(self, d: QosDuration) -> Self {
        Self(self.0.saturating_add(d.as_nanos()))
    }
}

/// What a participant announces about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantInfo {
    /// Its GUID prefix, shared by all its endpoints.
    pub prefix: GuidPrefix,
    /// Human-readable name (≤ [`MAX_NAME_LEN`] bytes, may be empty).
    pub name: String,
    /// How long its announcements are trusted; infinite never expires.
    pub lease_duration: QosDuration,
    /// Where discovery traffic reaches it (≤ [`MAX_LOCATORS`]).
    pub discovery_locators: Vec<Locator>,
    /// Its default address for user traffic (≤ [`MAX_LOCATORS`]).
    pub user_locators: Vec<Locator>,
    /// Whether it offers shared-memory transport to same-host peers.
    pub shared_memory: bool,
    /// When it started, in wall-clock milliseconds since the Unix epoch (its own clock;
    /// `None`: not said). Observers show uptime from it.
    pub started_ms: Option<u64>,
    /// Its own links as it sees them (≤ [`MAX_LINK_REPORTS`]): for observers only, never
    /// used for routing or matching.
    pub links: Vec<LinkReport>,
}

/// One link a participant reports about itself, as measured at its own end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkReport {
    /// The neighbour's node id.
    pub peer: [u8; 16],
    /// The round-trip time of the link in microseconds as measured at this end; 0 when not
    /// measured yet.
    pub rtt_us: u32,
    /// The neighbour advertised Shoal's extended frames in its Hello (false: it speaks only
    /// the multimaster v1 frames).
    pub extended: bool,
}

impl ParticipantInfo {
    /// A participant with the given prefix and name, no addresses, and a
    /// 10-second lease.
    pub fn new(prefix: GuidPrefix, name: impl Into<String>) -> Self {
        Self {
            prefix,
            name: name.into(),
            lease_duration: QosDuration::from_secs(10),
            discovery_locators: Vec::new(),
            user_locators: Vec::new(),
            shared_memory: false,
            started_ms: None,
            links: Vec::new(),
        }
    }
    /// Checks every bounded field.
    pub fn validate(&self) -> Result<(), TypesError> {
        check_name("participant name", &self.name, true)?;
        check_locators(&self.discovery_locators)?;
        check_locators(&self.user_locators)?;
        if self.links.len() > MAX_LINK_REPORTS {
            return Err(TypesError::TooManyLinkReports(self.links.len()));
        }
        if self.lease_duration == QosDuration::ZERO {
            return Err(crate::qos::QosError::OutOfRange {
                policy: crate::qos::Policy::Liveliness,
                reason: "participant lease duration must be positive",
            }
            .into());
        }
        Ok(())
    }
}

/// What a participant announces about one of its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    /// Endpoint identity; its prefix names the owning participant.
    pub guid: Guid,
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Topic.
    pub topic: TopicName,
    /// Type name.
    pub type_name: TypeName,
    /// Type structure hash; [`TypeHash::UNKNOWN`] never matches.
    pub type_hash: TypeHash,
    /// Partition names or patterns (empty = default partition).
    pub partitions: Partitions,
    /// Every policy the endpoint offers (writer) or requests (reader).
    pub qos: EndpointQos,
    /// The endpoint's own addresses; empty means "use the participant's".
    pub locators: Vec<Locator>,
}

impl EndpointInfo {
    /// An endpoint with default QoS for its kind, default partition, and no
    /// locators of its own.
    pub fn new(
        guid: Guid,
        kind: EndpointKind,
        topic: TopicName,
        type_name: TypeName,
        type_hash: TypeHash,
    ) -> Self {
        Self {
            guid,
            kind,
            topic,
            type_name,
            type_hash,
            partitions: Partitions::default_partition(),
            qos: EndpointQos::default_for(kind),
            locators: Vec::new(),
        }
    }
    /// Checks ranges of every field (QoS ranges included, but not the
    /// cross-policy consistency rule; see [`EndpointQos::consistent`]).
    pub fn validate(&self) -> Result<(), TypesError> {
        check_locators(&self.locators)?;
        self.qos.validate()?;
        Ok(())
    }
}
