//! Record bytes back to participant and endpoint descriptions.
//!
//! Absent optional fields take their defaults; a present field that is
//! malformed or out of range rejects the whole record. Nothing here panics
//! on any input (the fuzz target in `discovery/fuzz` holds it to that).

use super::wire::ValueReader;
use super::{
    endpoint_field as ef, participant_field as pf, DecodeError, Field, RawRecord, Record,
    RecordKind, LOCATOR_LEN, MUST_UNDERSTAND,
};
use crate::qos::{
    AccessScope, Deadline, DestinationOrderKind, DurabilityKind, EndpointQos, History,
    LatencyBudget, Lifespan, Limit, Liveliness, LivelinessKind, OwnershipKind, Policy,
    Presentation, QosDuration, Reliability, ReliabilityKind,
};
use crate::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, LinkReport, Locator, LocatorKind,
    ParticipantInfo, Partitions, TopicName, TypeHash, TypeName, TypesError, MAX_LINK_REPORTS,
    MAX_LOCATORS, MAX_NAME_LEN, MAX_PARTITIONS,
};

/// Decodes a record of either kind.
pub fn decode(buf: &[u8]) -> Result<Record, DecodeError> {
    let raw = RawRecord::parse(buf)?;
    match raw.kind() {
        RecordKind::Participant => participant_body(&raw).map(Record::Participant),
        RecordKind::Endpoint => endpoint_body(&raw).map(Record::Endpoint),
    }
}

/// Decodes a participant record; any other kind is an error.
pub fn decode_participant(buf: &[u8]) -> Result<ParticipantInfo, DecodeError> {
    let raw = RawRecord::parse(buf)?;
    expect_kind(&raw, RecordKind::Participant)?;
    participant_body(&raw)
}

/// Decodes an endpoint record; any other kind is an error.
pub fn decode_endpoint(buf: &[u8]) -> Result<EndpointInfo, DecodeError> {
    let raw = RawRecord::parse(buf)?;
    expect_kind(&raw, RecordKind::Endpoint)?;
    endpoint_body(&raw)
}

fn expect_kind(raw: &RawRecord<'_>, expected: RecordKind) -> Result<(), DecodeError> {
    if raw.kind() == expected {
        Ok(())
    } else {
        Err(DecodeError::WrongKind {
            expected,
            actual: raw.kind(),
        })
    }
}

/// Walks the fields, skipping unknown ones (unless must-understand) and
/// rejecting duplicates of known ones; hands each known field to `on_field`.
fn for_known_fields<'a>(
    raw: &RawRecord<'a>,
    known: &[u16],
    mut on_field: impl FnMut(Field<'a>) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    // Known-field lists are shorter than 32 entries, so a bitmask suffices.
    debug_assert!(known.len() <= 32);
    let mut seen = 0u32;
    for f in raw.fields() {
        let f = f?;
        let Some(idx) = known.iter().position(|&id| id == f.id) else {
            if f.id & MUST_UNDERSTAND != 0 {
                return Err(DecodeError::UnknownCriticalField(f.id));
            }
            continue;
        };
        let bit = 1u32 << idx;
        if seen & bit != 0 {
            return Err(DecodeError::DuplicateField(f.id));
        }
        seen |= bit;
        on_field(f)?;
    }
    Ok(())
}

fn participant_body(raw: &RawRecord<'_>) -> Result<ParticipantInfo, DecodeError> {
    let mut prefix = None;
    let mut p = ParticipantInfo::new(GuidPrefix::default(), String::new());
    for_known_fields(raw, &pf::ALL, |f| {
        match f.id {
            pf::GUID_PREFIX => prefix = Some(GuidPrefix(exact(f.value, "guid prefix")?)),
            pf::NAME => p.name = text(f.value, "participant name")?.to_owned(),
            pf::LEASE_DURATION => {
                p.lease_duration = QosDuration::from_nanos(u64_value(f.value, "lease duration")?)
            }
            pf::DISCOVERY_LOCATORS => {
                p.discovery_locators = locators(f.value, "discovery locators")?
            }
            pf::USER_LOCATORS => p.user_locators = locators(f.value, "user locators")?,
            pf::SHARED_MEMORY => p.shared_memory = bool_value(f.value, "shared memory")?,
            pf::STARTED => p.started_ms = Some(u64_value(f.value, "started")?),
            pf::LINKS => p.links = link_reports(f.value)?,
            _ => unreachable!("for_known_fields passes only ids in pf::ALL"),
        }
        Ok(())
    })?;
    p.prefix = prefix.ok_or(DecodeError::MissingField("guid prefix"))?;
    p.validate()?;
    Ok(p)
}

/// QoS fields as found, before defaults fill the gaps.
#[derive(Default)]
struct QosFields {
    reliability: Option<Reliability>,
    durability: Option<DurabilityKind>,
    deadline: Option<Deadline>,
    latency_budget: Option<LatencyBudget>,
    ownership: Option<OwnershipKind>,
    ownership_strength: Option<i32>,
    liveliness: Option<Liveliness>,
    destination_order: Option<DestinationOrderKind>,
    presentation: Option<Presentation>,
    history: Option<History>,
    resource_limits: Option<crate::qos::ResourceLimits>,
    lifespan: Option<Lifespan>,
}

impl QosFields {
    /// The endpoint's QoS: each present policy as sent, each absent one the
    /// default for `kind`.
    fn resolve(self, kind: EndpointKind) -> EndpointQos {
        let d = EndpointQos::default_for(kind);
        EndpointQos {
            reliability: self.reliability.unwrap_or(d.reliability),
            durability: self.durability.unwrap_or(d.durability),
            deadline: self.deadline.unwrap_or(d.deadline),
            latency_budget: self.latency_budget.unwrap_or(d.latency_budget),
            ownership: self.ownership.unwrap_or(d.ownership),
            ownership_strength: self.ownership_strength.unwrap_or(d.ownership_strength),
            liveliness: self.liveliness.unwrap_or(d.liveliness),
            destination_order: self.destination_order.unwrap_or(d.destination_order),
            presentation: self.presentation.unwrap_or(d.presentation),
            history: self.history.unwrap_or(d.history),
            resource_limits: self.resource_limits.unwrap_or(d.resource_limits),
            lifespan: self.lifespan.unwrap_or(d.lifespan),
        }
    }
}

fn out_of_range(policy: Policy, reason: &'static str) -> DecodeError {
    DecodeError::PolicyOutOfRange { policy, reason }
}

fn endpoint_body(raw: &RawRecord<'_>) -> Result<EndpointInfo, DecodeError> {
    let mut guid = None;
    let mut kind = None;
    let mut topic = None;
    let mut type_name = None;
    let mut type_hash = TypeHash::UNKNOWN;
    let mut partitions = Partitions::default_partition();
    let mut own_locators = Vec::new();
    let mut q = QosFields::default();
    for_known_fields(raw, &ef::ALL, |f| {
        let v = f.value;
        match f.id {
            ef::GUID => {
                let g: [u8; 16] = exact(v, "guid")?;
                let mut prefix = [0; 12];
                prefix.copy_from_slice(&g[..12]);
                let mut entity = [0; 4];
                entity.copy_from_slice(&g[12..]);
                guid = Some(Guid::new(GuidPrefix(prefix), EntityId(entity)));
            }
            ef::KIND => {
                kind = Some(match exact::<1>(v, "endpoint kind")?[0] {
                    0 => EndpointKind::Writer,
                    1 => EndpointKind::Reader,
                    _ => {
                        return Err(DecodeError::Malformed {
                            field: "endpoint kind",
                            reason: "must be 0 (writer) or 1 (reader)",
                        })
                    }
                })
            }
            ef::TOPIC => topic = Some(TopicName::new(text(v, "topic name")?)?),
            ef::TYPE_NAME => type_name = Some(TypeName::new(text(v, "type name")?)?),
            ef::TYPE_HASH => type_hash = TypeHash(exact(v, "type hash")?),
            ef::PARTITIONS => partitions = partition_list(v)?,
            ef::LOCATORS => own_locators = locators(v, "endpoint locators")?,
            ef::RELIABILITY => {
                let mut r = ValueReader::new(v, "reliability");
                let k = match r.u8()? {
                    0 => ReliabilityKind::BestEffort,
                    1 => ReliabilityKind::Reliable,
                    _ => return Err(out_of_range(Policy::Reliability, "unknown kind code")),
                };
                let max_blocking_time = QosDuration::from_nanos(r.u64()?);
                r.end()?;
                q.reliability = Some(Reliability {
                    kind: k,
                    max_blocking_time,
                });
            }
            ef::DURABILITY => {
                q.durability = Some(match exact::<1>(v, "durability")?[0] {
                    0 => DurabilityKind::Volatile,
                    1 => DurabilityKind::TransientLocal,
                    2 => DurabilityKind::Transient,
                    3 => DurabilityKind::Persistent,
                    _ => return Err(out_of_range(Policy::Durability, "unknown kind code")),
                })
            }
            ef::DEADLINE => {
                q.deadline = Some(Deadline {
                    period: QosDuration::from_nanos(u64_value(v, "deadline")?),
                })
            }
            ef::LATENCY_BUDGET => {
                q.latency_budget = Some(LatencyBudget {
                    duration: QosDuration::from_nanos(u64_value(v, "latency budget")?),
                })
            }
            ef::OWNERSHIP => {
                q.ownership = Some(match exact::<1>(v, "ownership")?[0] {
                    0 => OwnershipKind::Shared,
                    1 => OwnershipKind::Exclusive,
                    _ => return Err(out_of_range(Policy::Ownership, "unknown kind code")),
                })
            }
            ef::OWNERSHIP_STRENGTH => {
                let mut r = ValueReader::new(v, "ownership strength");
                q.ownership_strength = Some(r.i32()?);
                r.end()?;
            }
            ef::LIVELINESS => {
                let mut r = ValueReader::new(v, "liveliness");
                let k = match r.u8()? {
                    0 => LivelinessKind::Automatic,
                    1 => LivelinessKind::ManualByParticipant,
                    2 => LivelinessKind::ManualByTopic,
                    _ => return Err(out_of_range(Policy::Liveliness, "unknown kind code")),
                };
                let lease_duration = QosDuration::from_nanos(r.u64()?);
                r.end()?;
                q.liveliness = Some(Liveliness {
                    kind: k,
                    lease_duration,
                });
            }
            ef::DESTINATION_ORDER => {
                q.destination_order = Some(match exact::<1>(v, "destination order")?[0] {
                    0 => DestinationOrderKind::ByReceptionTimestamp,
                    1 => DestinationOrderKind::BySourceTimestamp,
                    _ => return Err(out_of_range(Policy::DestinationOrder, "unknown kind code")),
                })
            }
            ef::PRESENTATION => {
                let [scope, coherent, ordered] = exact::<3>(v, "presentation")?;
                let access_scope = match scope {
                    0 => AccessScope::Instance,
                    1 => AccessScope::Topic,
                    2 => AccessScope::Group,
                    _ => return Err(out_of_range(Policy::Presentation, "unknown access scope")),
                };
                let flag = |b: u8| match b {
                    0 => Ok(false),
                    1 => Ok(true),
                    _ => Err(out_of_range(Policy::Presentation, "flag must be 0 or 1")),
                };
                q.presentation = Some(Presentation {
                    access_scope,
                    coherent_access: flag(coherent)?,
                    ordered_access: flag(ordered)?,
                });
            }
            ef::HISTORY => {
                let mut r = ValueReader::new(v, "history");
                let k = r.u8()?;
                let depth = r.u32()?;
                r.end()?;
                q.history = Some(match (k, depth) {
                    (0, depth) => History::KeepLast { depth },
                    (1, 0) => History::KeepAll,
                    (1, _) => {
                        return Err(out_of_range(Policy::History, "keep-all depth must be 0"))
                    }
                    _ => return Err(out_of_range(Policy::History, "unknown kind code")),
                });
            }
            ef::RESOURCE_LIMITS => {
                let mut r = ValueReader::new(v, "resource limits");
                let mut limit = || -> Result<Limit, DecodeError> {
                    match (r.u8()?, r.u32()?) {
                        (0, 0) => Ok(Limit::Unlimited),
                        (0, _) => Err(out_of_range(
                            Policy::ResourceLimits,
                            "unlimited must carry value 0",
                        )),
                        (1, n) => Ok(Limit::AtMost(n)),
                        _ => Err(out_of_range(Policy::ResourceLimits, "unknown limit tag")),
                    }
                };
                let rl = crate::qos::ResourceLimits {
                    max_samples: limit()?,
                    max_instances: limit()?,
                    max_samples_per_instance: limit()?,
                };
                r.end()?;
                q.resource_limits = Some(rl);
            }
            ef::LIFESPAN => {
                q.lifespan = Some(Lifespan {
                    duration: QosDuration::from_nanos(u64_value(v, "lifespan")?),
                })
            }
            _ => unreachable!("for_known_fields passes only ids in ef::ALL"),
        }
        Ok(())
    })?;
    let kind = kind.ok_or(DecodeError::MissingField("endpoint kind"))?;
    let e = EndpointInfo {
        guid: guid.ok_or(DecodeError::MissingField("guid"))?,
        kind,
        topic: topic.ok_or(DecodeError::MissingField("topic name"))?,
        type_name: type_name.ok_or(DecodeError::MissingField("type name"))?,
        type_hash,
        partitions,
        qos: q.resolve(kind),
        locators: own_locators,
    };
    // Ranges only: an endpoint whose policies contradict each other is
    // still a faithful description, and the graph rejects it on admission.
    e.validate()?;
    Ok(e)
}

fn exact<const N: usize>(v: &[u8], field: &'static str) -> Result<[u8; N], DecodeError> {
    let mut r = ValueReader::new(v, field);
    let a = r.array::<N>()?;
    r.end()?;
    Ok(a)
}

fn u64_value(v: &[u8], field: &'static str) -> Result<u64, DecodeError> {
    Ok(u64::from_be_bytes(exact(v, field)?))
}

fn bool_value(v: &[u8], field: &'static str) -> Result<bool, DecodeError> {
    match exact::<1>(v, field)?[0] {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Malformed {
            field,
            reason: "bool must be 0 or 1",
        }),
    }
}

fn text<'a>(v: &'a [u8], field: &'static str) -> Result<&'a str, DecodeError> {
    if v.len() > MAX_NAME_LEN {
        return Err(TypesError::NameTooLong {
            what: field,
            len: v.len(),
        }
        .into());
    }
    std::str::from_utf8(v).map_err(|_| DecodeError::Malformed {
        field,
        reason: "not UTF-8",
    })
}

fn locators(v: &[u8], field: &'static str) -> Result<Vec<Locator>, DecodeError> {
    if v.len() % LOCATOR_LEN != 0 {
        return Err(DecodeError::Malformed {
            field,
            reason: "length is not a multiple of 21",
        });
    }
    let n = v.len() / LOCATOR_LEN;
    if n > MAX_LOCATORS {
        return Err(TypesError::TooManyLocators(n).into());
    }
    let mut out = Vec::with_capacity(n);
    for chunk in v.chunks_exact(LOCATOR_LEN) {
        // An unknown transport is skipped, not fatal: a newer peer may
        // advertise transports this build does not speak.
        let Ok(kind) = LocatorKind::from_code(i32::from(chunk[0])) else {
            continue;
        };
        let port = u32::from_be_bytes([chunk[1], chunk[2], chunk[3], chunk[4]]);
        let mut address = [0; 16];
        address.copy_from_slice(&chunk[5..]);
        out.push(Locator {
            kind,
            address,
            port,
        });
    }
    Ok(out)
}

fn link_reports(v: &[u8]) -> Result<Vec<LinkReport>, DecodeError> {
    let malformed = |reason| DecodeError::Malformed {
        field: "links",
        reason,
    };
    let Some((count, rest)) = v.split_first_chunk::<2>() else {
        return Err(malformed("shorter than its count"));
    };
    let n = usize::from(u16::from_be_bytes(*count));
    if n > MAX_LINK_REPORTS {
        return Err(TypesError::TooManyLinkReports(n).into());
    }
    if rest.len() != n * pf::LINK_REPORT_LEN {
        return Err(malformed("length does not match its count"));
    }
    Ok(rest
        .chunks_exact(pf::LINK_REPORT_LEN)
        .map(|c| {
            let mut peer = [0; 16];
            peer.copy_from_slice(&c[..16]);
            LinkReport {
                peer,
                rtt_us: u32::from_be_bytes([c[16], c[17], c[18], c[19]]),
                // Other flag bits are for later versions: ignored.
                extended: c[20] & 1 != 0,
            }
        })
        .collect())
}

fn partition_list(v: &[u8]) -> Result<Partitions, DecodeError> {
    let mut r = ValueReader::new(v, "partitions");
    let n = usize::from(r.u16()?);
    if n > MAX_PARTITIONS {
        return Err(TypesError::TooManyPartitions(n).into());
    }
    // Each name needs at least its 2-byte length: reject an impossible count
    // before reserving space for it.
    if r.remaining() < 2 * n {
        return Err(r.malformed("count exceeds the names present"));
    }
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        let len = usize::from(r.u16()?);
        let bytes = r.take(len)?;
        names.push(text(bytes, "partition name")?.to_owned());
    }
    r.end()?;
    Ok(Partitions::new(names)?)
}
