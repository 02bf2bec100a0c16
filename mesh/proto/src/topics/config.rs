//! The `[topics]` settings: announce period, participant lease, the capacity of every
//! discovery table, the bounds of the flood's dedup table and of the set of incompatible
//! pairs already reported, the address selection policy and whether participants heard
//! through discovery are dialed, and what one remote participant may make this node hold:
//! partition bytes per endpoint, endpoints and bytes per participant, bytes in all, and
//! the longest lease.
//!
//! **Owns:** the topics settings, their defaults, validation and TOML form. **Must not
//! touch:** what the settings drive (`topics::core`).
//!
//! In TOML every key is optional (`#[serde(default)]`), unknown keys are rejected, and
//! durations are integer milliseconds with an `_ms` suffix, as in the rest of the file:
//!
//! ```toml
//! [topics]
//! announce_period_ms = 1000
//! announce_idle_period_ms = 10000
//! participant_lease_ms = 10000
//! max_local_endpoints = 4096
//! max_matches = 262144
//! max_remote_participants = 1024
//! max_remote_writers = 65536
//! max_remote_readers = 65536
//! max_dedup_origins = 4096
//! max_reported_incompatible = 65536
//! max_discovery_frame_bytes = 61440
//! dial_participants = false
//! locators_allow = ["10.0.0.0/8"]
//! locators_deny = ["10.9.0.0/16"]
//! locators_loopback = true
//! locators_wildcard = false
//! locators_multicast = false
//! fallback_locators = ["10.0.0.7:7000"]
//! max_parked_sample_bytes = 1048576
//! parked_sample_timeout_ms = 1000
//! route_plan_interval_ms = 10
//! # reliable topics
//! heartbeat_period_ms = 100
//! ack_period_ms = 20
//! ack_every = 4096
//! nack_delay_ms = 5
//! sync_retry_ms = 200
//! repair_budget = 4096
//! repair_period_ms = 10
//! nack_suppression_ms = 100
//! max_history_samples = 65536
//! max_history_bytes = 67108864
//! max_reader_buffer_samples = 65536
//! max_reader_buffer_bytes = 67108864
//! ack_timeout_ms = 60000
//! # control-plane work budgets (units: about a nanosecond of control-plane CPU each)
//! origin_work_per_sec = 20000000
//! origin_work_burst = 100000000
//! link_work_per_sec = 100000000
//! link_work_burst = 300000000
//! # what remote participants may make this node hold
//! max_partition_bytes = 2048
//! max_endpoints_per_participant = 4096
//! max_bytes_per_participant = 8388608
//! max_remote_endpoint_bytes = 134217728
//! max_lease_ms = 60000
//! ```

use serde::Deserialize;
use shoal_discovery::graph::Capacities;
use shoal_discovery::locators::{LocatorError, SelectionPolicy};
use shoal_discovery::qos::QosDuration;
use shoal_discovery::record::MAX_RECORD_LEN;
use std::net::SocketAddr;
use std::time::Duration;

/// Bytes of a Discovery frame besides its entries: the TCP length and type, then origin,
/// seq, ttl, cycle, part, parts, count.
pub const DISCOVERY_HEADER_LEN: usize = 4 + 1 + 16 + 8 + 1 + 4 + 2 + 2 + 2;
/// Bytes of one entry besides its value: kind and length.
pub const ENTRY_HEADER_LEN: usize = 1 + 2;
/// The smallest frame bound that still fits one record of the largest size and the signature
/// entry an identity-mode node appends.
pub const MIN_DISCOVERY_FRAME_BYTES: usize = DISCOVERY_HEADER_LEN
    + ENTRY_HEADER_LEN
    + MAX_RECORD_LEN
    + crate::wire::DISCOVERY_SIGNATURE_ENTRY_LEN;

/// Why a `[topics]` configuration was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicsConfigError {
    /// A duration that must be positive is zero.
    #[error("topics.{0} must be greater than zero")]
    ZeroDuration(&'static str),
    /// A capacity or bound that must be positive is zero.
    #[error("topics.{0} must be greater than zero")]
    Zero(&'static str),
    /// The lease would expire between two announcements of a live participant.
    #[error("topics.participant_lease ({lease:?}) must exceed announce_period ({period:?})")]
    LeaseTooShort {
        /// Configured period.
        period: Duration,
        /// Configured lease.
        lease: Duration,
    },
    /// A reader would be released between two heartbeats asking it to acknowledge.
    #[error("topics.ack_timeout ({timeout:?}) must exceed heartbeat_period ({period:?})")]
    AckTimeoutTooShort {
        /// Configured heartbeat period.
        period: Duration,
        /// Configured timeout.
        timeout: Duration,
    },
    /// A Discovery frame must fit at least one record of the largest size.
    #[error("topics.max_discovery_frame_bytes {0} is below {MIN_DISCOVERY_FRAME_BYTES}")]
    FrameTooSmall(usize),
    /// An allow or deny prefix list is invalid.
    #[error("topics.locators_*: {0}")]
    Locators(#[from] LocatorError),
    /// A fallback locator is not `ip:port`.
    #[error("topics.fallback_locators: {0:?} is not ip:port")]
    BadFallback(String),
    /// The cap on remote leases is below this node's own lease: nodes sharing this
    /// configuration would expire each other between announcements' leases.
    #[error("topics.max_lease ({max_lease:?}) must be at least participant_lease ({lease:?})")]
    LeaseCapBelowLease {
        /// Configured own lease.
        lease: Duration,
        /// Configured cap.
        max_lease: Duration,
    },
}

/// Topics settings (see the [module docs](self) for the TOML form).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicsConfig {
    /// Period of the announce cycle (every own record resent) after a change: an own
    /// endpoint created or removed, a capable link up or down, a participant heard that
    /// is not a neighbour. Default 1000 ms.
    #[serde(rename = "announce_period_ms", with = "millis")]
    pub announce_period: Duration,
    /// Longest period of the announce cycle while nothing changes: each unchanged cycle
    /// doubles the period from `announce_period` up to this. It goes beyond a third of
    /// `participant_lease` only while every participant this node hears is a neighbour
    /// that holds its lease while linked (Hello feature bit 4): the full mesh multicast
    /// discovery builds; elsewhere the cycle must renew the lease. A cycle repairs what a
    /// lost frame missed, so this is also the longest a loss that no link change repairs
    /// can last. A value below `announce_period` counts as `announce_period`. Default
    /// 10000 ms.
    #[serde(rename = "announce_idle_period_ms", with = "millis")]
    pub announce_idle_period: Duration,
    /// Lease this node's participant record carries: a receiver that hears nothing from it
    /// for this long drops all its endpoints (a receiver linked to it directly counts the
    /// link as hearing it, and counts the lease from the link's end). Default 10000 ms.
    #[serde(rename = "participant_lease_ms", with = "millis")]
    pub participant_lease: Duration,
    /// This node's writers and readers together. Default 4096.
    pub max_local_endpoints: usize,
    /// Stored matches (every pair, remote–remote included: relays route them). Default 262144.
    pub max_matches: usize,
    /// Participants (nodes) heard through discovery. Default 1024.
    pub max_remote_participants: usize,
    /// Remote writers. Default 65536.
    pub max_remote_writers: usize,
    /// Remote readers. Default 65536.
    pub max_remote_readers: usize,
    /// Origins remembered by the flood's dedup table (highest seq per origin); at the bound
    /// the least recently refreshed origin is forgotten, counted. Default 4096.
    pub max_dedup_origins: usize,
    /// Writer/reader pairs already reported incompatible (each pair is reported once); at
    /// the bound further pairs are not reported, counted. Default 65536.
    pub max_reported_incompatible: usize,
    /// Largest Discovery frame this node builds (records are packed into as few frames of
    /// at most this size as fit). Default 61440 (60 KiB).
    pub max_discovery_frame_bytes: usize,
    /// Dial a participant heard through discovery whose node has no link. Default false (a
    /// line of static peers stays a line).
    pub dial_participants: bool,
    /// Address selection: prefixes a dialed locator must be in (empty: any).
    pub locators_allow: Vec<String>,
    /// Address selection: prefixes never dialed (deny wins).
    pub locators_deny: Vec<String>,
    /// Address selection: loopback addresses may be dialed. Default true.
    pub locators_loopback: bool,
    /// Address selection: wildcard addresses may be dialed. Default false.
    pub locators_wildcard: bool,
    /// Address selection: multicast addresses may be dialed. Default false (a TCP dial to a
    /// multicast address cannot succeed).
    pub locators_multicast: bool,
    /// `ip:port` addresses tried after a participant's own locators.
    pub fallback_locators: Vec<String>,
    /// Per data shard: bytes of sample runs held while their writer is not in the shard's
    /// route table yet (a writer's first samples can overtake its announcement through this
    /// node's control plane); the oldest go first at the bound, counted as unrouted.
    /// Default 1 MiB; 0 drops such runs at once.
    pub max_parked_sample_bytes: usize,
    /// How long such a run is held for a route table naming its writer; also how long a
    /// removed writer's route outlives the table that dropped it, for its samples still on
    /// their way through this node (written before the removal reached its control plane).
    /// Default 1000 ms.
    #[serde(rename = "parked_sample_timeout_ms", with = "millis")]
    pub parked_sample_timeout: Duration,
    /// Least time between two route tables: a burst of changes is planned once (each plan
    /// walks every writer's tree). Default 10 ms.
    #[serde(rename = "route_plan_interval_ms", with = "millis")]
    pub route_plan_interval: Duration,
    /// Reliable writers: how often a writer's node says which samples it still holds while
    /// a reader has not acknowledged everything (nothing is sent when all is acknowledged).
    /// Default 100 ms.
    #[serde(rename = "heartbeat_period_ms", with = "millis")]
    pub heartbeat_period: Duration,
    /// Reliable readers: least time between two acknowledgements of one reader (they are
    /// sent only when something changed). Default 20 ms.
    #[serde(rename = "ack_period_ms", with = "millis")]
    pub ack_period: Duration,
    /// Reliable readers: acknowledge at once, whatever the period, when delivery moved this
    /// many samples past the last acknowledgement (frees a keep-all writer's history while
    /// the reader keeps up). Default 4096.
    pub ack_every: u32,
    /// Reliable readers: how long a gap waits for a reordered sample before it is asked
    /// for. Default 5 ms.
    #[serde(rename = "nack_delay_ms", with = "millis")]
    pub nack_delay: Duration,
    /// Reliable readers: how often a reader that has not heard from its writer yet asks
    /// where to start. Default 200 ms.
    #[serde(rename = "sync_retry_ms", with = "millis")]
    pub sync_retry: Duration,
    /// Reliable writers: most samples one writer resends per `repair_period`, whatever the
    /// repair requests (a flood of them cannot make it resend more). Default 4096.
    pub repair_budget: u32,
    /// The period of `repair_budget`. Default 10 ms.
    #[serde(rename = "repair_period_ms", with = "millis")]
    pub repair_period: Duration,
    /// Reliable writers: a sample resent to a reader is not resent to it again within this
    /// time, however often it is asked for (the repair is still on its way over a slow link;
    /// copies behind it would only keep the link full). Default 100 ms.
    #[serde(rename = "nack_suppression_ms", with = "millis")]
    pub nack_suppression: Duration,
    /// Reliable keep-all writers without a `max_samples` resource limit: the most samples
    /// not acknowledged by every reader before writes wait. Also bounds keep-last depths.
    /// Default 65 536.
    pub max_history_samples: u32,
    /// Payload bytes one reliable writer's history holds at most. Default 64 MiB.
    pub max_history_bytes: usize,
    /// Out-of-order samples one reliable reader holds while it waits for a repair. Default
    /// 65 536.
    pub max_reader_buffer_samples: u32,
    /// Their payload bytes. Default 64 MiB.
    pub max_reader_buffer_bytes: usize,
    /// Control-plane work one Discovery origin may cause per second, in work units of
    /// about a nanosecond of control-plane CPU each: an entry costs its bytes plus 64, the
    /// matching its endpoints cause costs the discovery graph's `MatchWork::units` (pairs
    /// examined and partition steps, refused admissions included), a signature's
    /// verification 100 000 (see `topics::core::origins`). Frames of an origin past its
    /// budget are dropped before they are verified or decoded, counted (`budget_dropped`);
    /// its next announce cycle repairs them. Default 20 000 000 (about 2 % of a core).
    pub origin_work_per_sec: u64,
    /// How much of that an origin may spend at once. Default 100 000 000.
    pub origin_work_burst: u64,
    /// The same budget per link, for every origin whose frames it carries (a relay
    /// carries many, so it is larger): one neighbour cannot keep the control plane busy
    /// whatever origins it claims. Default 100 000 000 (about 10 % of a core).
    pub link_work_per_sec: u64,
    /// How much of that a link may spend at once. Default 300 000 000.
    pub link_work_burst: u64,
    /// Reliable keep-all writers: the longest a writer waits for a matched reader that owes
    /// an acknowledgement (its acknowledgements have not moved since it last had
    /// everything) before it stops waiting for it (counted, `reliable_readers_released`),
    /// so one stuck or lying reader cannot keep the history full for ever. Each reader is
    /// waited for at most its node's lease as admitted (capped at `max_lease_ms`) if that is
    /// shorter: no longer than a dead one's lease would hold the writes; but that lease
    /// counts only while the path toward its node delivers (a connection whose peer
    /// acknowledges nothing new holds the reader's samples, not the reader), so a reader
    /// behind a stalled path is waited for up to this. The reader is still answered and is
    /// waited for again once it catches up. Must exceed `heartbeat_period`. Default 60000 ms
    /// (the default `max_lease_ms`).
    #[serde(rename = "ack_timeout_ms", with = "millis")]
    pub ack_timeout: Duration,
    /// Most bytes of partition names (their text, summed) one endpoint may declare: it
    /// bounds what matching one writer/reader pair can cost. Creating a local endpoint
    /// over it is an error; a remote endpoint over it is refused and counted (its node
    /// keeps its link). Default 2048.
    pub max_partition_bytes: usize,
    /// Most endpoints one remote participant (node) may have here; more are refused,
    /// counted. Keep it at least the peers' `max_local_endpoints`. Default 4096.
    pub max_endpoints_per_participant: usize,
    /// Most bytes one remote participant's endpoints may take here (the discovery
    /// crate's `footprint::endpoint_footprint`: ~550 bytes for a plain endpoint, more
    /// for long names, locators and partition patterns); more are refused, counted.
    /// Default 8 MiB.
    pub max_bytes_per_participant: usize,
    /// Most bytes all remote endpoints together may take here (same measure); more are
    /// refused, counted. Default 128 MiB.
    pub max_remote_endpoint_bytes: usize,
    /// Longest lease a remote participant is held with when it goes silent: a longer
    /// one, infinite included, counts as this. At least `participant_lease`. Default
    /// 60000 ms.
    #[serde(rename = "max_lease_ms", with = "millis")]
    pub max_lease: Duration,
}

impl Default for TopicsConfig {
    fn default() -> Self {
        let c = Capacities::default();
        TopicsConfig {
            announce_period: Duration::from_millis(1000),
            announce_idle_period: Duration::from_millis(10_000),
            participant_lease: Duration::from_millis(10_000),
            max_local_endpoints: c.local_endpoints,
            max_matches: c.matches,
            max_remote_participants: c.remote_participants,
            max_remote_writers: c.remote_writers,
            max_remote_readers: c.remote_readers,
            max_dedup_origins: 4096,
            max_reported_incompatible: 65_536,
            max_discovery_frame_bytes: 60 * 1024,
            dial_participants: false,
            locators_allow: Vec::new(),
            locators_deny: Vec::new(),
            locators_loopback: true,
            locators_wildcard: false,
            locators_multicast: false,
            fallback_locators: Vec::new(),
            max_parked_sample_bytes: 1 << 20,
            parked_sample_timeout: Duration::from_millis(1000),
            route_plan_interval: Duration::from_millis(10),
            heartbeat_period: Duration::from_millis(100),
            ack_period: Duration::from_millis(20),
            ack_every: 4096,
            nack_delay: Duration::from_millis(5),
            sync_retry: Duration::from_millis(200),
            repair_budget: 4096,
            repair_period: Duration::from_millis(10),
            nack_suppression: Duration::from_millis(100),
            max_history_samples: 65_536,
            max_history_bytes: 64 << 20,
            max_reader_buffer_samples: 65_536,
            max_reader_buffer_bytes: 64 << 20,
            origin_work_per_sec: 20_000_000,
            origin_work_burst: 100_000_000,
            link_work_per_sec: 100_000_000,
            link_work_burst: 300_000_000,
            ack_timeout: Duration::from_millis(60_000),
            max_partition_bytes: c.endpoint_partition_bytes,
            max_endpoints_per_participant: c.participant_endpoints,
            max_bytes_per_participant: c.participant_bytes,
            max_remote_endpoint_bytes: c.remote_endpoint_bytes,
            max_lease: Duration::from_nanos(c.max_lease.as_nanos()),
        }
    }
}

impl TopicsConfig {
    /// The discovery graph's capacities (one local participant: this node).
    pub fn capacities(&self) -> Capacities {
        Capacities {
            local_participants: 1,
            remote_participants: self.max_remote_participants,
            local_endpoints: self.max_local_endpoints,
            remote_writers: self.max_remote_writers,
            remote_readers: self.max_remote_readers,
            matches: self.max_matches,
            endpoint_partition_bytes: self.max_partition_bytes,
            participant_endpoints: self.max_endpoints_per_participant,
            participant_bytes: self.max_bytes_per_participant,
            remote_endpoint_bytes: self.max_remote_endpoint_bytes,
            max_lease: QosDuration::from_nanos(
                u64::try_from(self.max_lease.as_nanos()).unwrap_or(u64::MAX),
            ),
        }
    }

    /// The address selection policy.
    pub fn selection_policy(&self) -> Result<SelectionPolicy, TopicsConfigError> {
        Ok(
            SelectionPolicy::new(&self.locators_allow, &self.locators_deny)?
                .with_loopback(self.locators_loopback)
                .with_wildcard(self.locators_wildcard)
                .with_multicast(self.locators_multicast),
        )
    }

    /// The fallback locators parsed.
    pub fn fallbacks(&self) -> Result<Vec<SocketAddr>, TopicsConfigError> {
        self.fallback_locators
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|_| TopicsConfigError::BadFallback(s.clone()))
            })
            .collect()
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<(), TopicsConfigError> {
        for (name, d) in [
            ("announce_period", self.announce_period),
            ("announce_idle_period", self.announce_idle_period),
            ("participant_lease", self.participant_lease),
            ("heartbeat_period", self.heartbeat_period),
            ("ack_period", self.ack_period),
            ("sync_retry", self.sync_retry),
            ("repair_period", self.repair_period),
            ("max_lease", self.max_lease),
        ] {
            if d.is_zero() {
                return Err(TopicsConfigError::ZeroDuration(name));
            }
        }
        for (name, n) in [
            ("max_local_endpoints", self.max_local_endpoints),
            ("max_matches", self.max_matches),
            ("max_remote_participants", self.max_remote_participants),
            ("max_remote_writers", self.max_remote_writers),
            ("max_remote_readers", self.max_remote_readers),
            ("max_dedup_origins", self.max_dedup_origins),
            ("max_reported_incompatible", self.max_reported_incompatible),
            ("repair_budget", self.repair_budget as usize),
            ("ack_every", self.ack_every as usize),
            ("max_history_samples", self.max_history_samples as usize),
            ("max_history_bytes", self.max_history_bytes),
            (
                "max_reader_buffer_samples",
                self.max_reader_buffer_samples as usize,
            ),
            ("max_reader_buffer_bytes", self.max_reader_buffer_bytes),
            ("origin_work_per_sec", usize_of(self.origin_work_per_sec)),
            ("origin_work_burst", usize_of(self.origin_work_burst)),
            ("link_work_per_sec", usize_of(self.link_work_per_sec)),
            ("link_work_burst", usize_of(self.link_work_burst)),
            ("max_partition_bytes", self.max_partition_bytes),
            (
                "max_endpoints_per_participant",
                self.max_endpoints_per_participant,
            ),
            ("max_bytes_per_participant", self.max_bytes_per_participant),
            ("max_remote_endpoint_bytes", self.max_remote_endpoint_bytes),
        ] {
            if n == 0 {
                return Err(TopicsConfigError::Zero(name));
            }
        }
        if self.participant_lease <= self.announce_period {
            return Err(TopicsConfigError::LeaseTooShort {
                period: self.announce_period,
                lease: self.participant_lease,
            });
        }
        if self.ack_timeout <= self.heartbeat_period {
            return Err(TopicsConfigError::AckTimeoutTooShort {
                period: self.heartbeat_period,
                timeout: self.ack_timeout,
            });
        }
        if self.max_lease < self.participant_lease {
            return Err(TopicsConfigError::LeaseCapBelowLease {
                lease: self.participant_lease,
                max_lease: self.max_lease,
            });
        }
        if self.max_discovery_frame_bytes < MIN_DISCOVERY_FRAME_BYTES {
            return Err(TopicsConfigError::FrameTooSmall(
                self.max_discovery_frame_bytes,
            ));
        }
        self.selection_policy()?;
        self.fallbacks()?;
        Ok(())
    }
}

fn usize_of(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
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
mod tests {
    use super::*;

    fn parse(toml: &str) -> Result<TopicsConfig, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            topics: TopicsConfig,
        }
        let f: File = toml::from_str(&format!("[topics]\n{toml}")).map_err(|e| e.to_string())?;
        f.topics.validate().map_err(|e| e.to_string())?;
        Ok(f.topics)
    }

    /// The module docs' example is the whole table: it parses and validates, and names
    /// the defaults.
    #[test]
    fn doc_example_parses_with_the_new_bounds() {
        let doc = include_str!("config.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! [topics]"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start().to_owned() + "\n")
            .collect();
        let t = parse(&example).unwrap();
        let d = TopicsConfig::default();
        assert_eq!(t.max_partition_bytes, d.max_partition_bytes);
        assert_eq!(
            t.max_endpoints_per_participant,
            d.max_endpoints_per_participant
        );
        assert_eq!(t.max_bytes_per_participant, d.max_bytes_per_participant);
        assert_eq!(t.max_remote_endpoint_bytes, d.max_remote_endpoint_bytes);
        assert_eq!(t.max_lease, d.max_lease);
    }

    #[test]
    fn new_bounds_reach_the_graph() {
        let t = parse(
            "max_partition_bytes = 100\nmax_endpoints_per_participant = 7\n\
             max_bytes_per_participant = 9000\nmax_remote_endpoint_bytes = 90000\n\
             max_lease_ms = 15000\n",
        )
        .unwrap();
        let c = t.capacities();
        assert_eq!(c.endpoint_partition_bytes, 100);
        assert_eq!(c.participant_endpoints, 7);
        assert_eq!(c.participant_bytes, 9000);
        assert_eq!(c.remote_endpoint_bytes, 90_000);
        assert_eq!(c.max_lease, QosDuration::from_millis(15_000));
        assert_eq!(
            TopicsConfig::default().capacities(),
            Capacities {
                local_participants: 1,
                ..Capacities::default()
            }
        );
    }

    #[test]
    fn new_bounds_are_validated() {
        for key in [
            "max_partition_bytes",
            "max_endpoints_per_participant",
            "max_bytes_per_participant",
            "max_remote_endpoint_bytes",
        ] {
            let e = parse(&format!("{key} = 0")).unwrap_err();
            assert!(e.contains(key), "{e}");
        }
        assert!(parse("max_lease_ms = 0").unwrap_err().contains("max_lease"));
        let e = parse("participant_lease_ms = 20000\nmax_lease_ms = 19999").unwrap_err();
        assert!(e.contains("at least participant_lease"), "{e}");
        parse("participant_lease_ms = 20000\nmax_lease_ms = 20000").unwrap();
        assert!(parse("max_lease = 5").is_err(), "durations carry _ms");
    }
}
