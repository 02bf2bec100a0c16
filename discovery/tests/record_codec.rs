//! The announcement record format: round trips, defaults for absent
//! policies, whole-record rejection for out-of-range ones, extensibility,
//! bounds, and no panic on any input.
//!
//! Length: one test per rule of the format (`src/record/mod.rs`) on shared record editors
//! (`rewrite`, `replace`, `remove`), then the property tests, whose value strategies for
//! every policy and locator take about 150 lines.

use proptest::prelude::*;
use shoal_discovery::qos::{
    AccessScope, Deadline, DestinationOrderKind, DurabilityKind, EndpointQos, History,
    LatencyBudget, Lifespan, Limit, Liveliness, LivelinessKind, OwnershipKind, Policy,
    Presentation, QosDuration, Reliability, ReliabilityKind, ResourceLimits,
};
use shoal_discovery::record::{
    decode, decode_endpoint, decode_participant, encode_endpoint, encode_participant,
    endpoint_field as ef, participant_field as pf, DecodeError, EncodeError, RawRecord, Record,
    RecordKind, RecordWriter, HEADER_LEN, MAX_FIELDS, MAX_RECORD_LEN,
};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, LinkReport, Locator, LocatorKind,
    ParticipantInfo, Partitions, TopicName, TypeHash, TypeName, TypesError, MAX_LINK_REPORTS,
    MAX_LOCATORS, MAX_NAME_LEN, MAX_PARTITIONS,
};

// ---------------------------------------------------------------- helpers

fn link(n: u8, rtt_us: u32, extended: bool) -> LinkReport {
    LinkReport {
        peer: [n; 16],
        rtt_us,
        extended,
    }
}

/// A participant's start time and its links with their round-trip times (observer fields)
/// survive the round trip; absent, they decode as "not said" and "none".
#[test]
fn started_and_link_reports_round_trip_and_default_to_absent() {
    let mut p = participant();
    p.started_ms = Some(1_700_000_000_123);
    p.links = vec![link(2, 180, true), link(3, 0, false)];
    let rec = encode_participant(&p).unwrap();
    assert_eq!(decode_participant(&rec).unwrap(), p);
    let bare = participant();
    let rec = encode_participant(&bare).unwrap();
    let raw = RawRecord::parse(&rec).unwrap();
    assert!(
        raw.fields()
            .all(|f| ![pf::STARTED, pf::LINKS].contains(&f.unwrap().id)),
        "absent observer fields are not written"
    );
    let back = decode_participant(&rec).unwrap();
    assert_eq!((back.started_ms, back.links.len()), (None, 0));
}

/// Link reports are bounded on both sides, and a list whose length disagrees with its count
/// rejects the record; unknown flag bits are ignored (room for later versions).
#[test]
fn link_reports_are_bounded_and_checked() {
    let mut p = participant();
    p.links = (0..=MAX_LINK_REPORTS as u8)
        .map(|n| link(n, 1, true))
        .collect();
    assert_eq!(
        encode_participant(&p).unwrap_err(),
        EncodeError::Invalid(TypesError::TooManyLinkReports(MAX_LINK_REPORTS + 1))
    );
    p.links.truncate(1);
    p.started_ms = Some(5);
    let rec = encode_participant(&p).unwrap();
    let mut long = 2u16.to_be_bytes().to_vec();
    long.extend_from_slice(&[9; 21]);
    assert!(matches!(
        decode_participant(&replace(&rec, pf::LINKS, &long)),
        Err(DecodeError::Malformed { field: "links", .. })
    ));
    let mut many = ((MAX_LINK_REPORTS + 1) as u16).to_be_bytes().to_vec();
    many.extend(std::iter::repeat_n(0u8, 21 * (MAX_LINK_REPORTS + 1)));
    assert_eq!(
        decode_participant(&replace(&rec, pf::LINKS, &many)),
        Err(DecodeError::from(TypesError::TooManyLinkReports(
            MAX_LINK_REPORTS + 1
        )))
    );
    let mut flags = 1u16.to_be_bytes().to_vec();
    flags.extend_from_slice(&[4; 16]);
    flags.extend_from_slice(&7u32.to_be_bytes());
    flags.push(0b1111_1110);
    let got = decode_participant(&replace(&rec, pf::LINKS, &flags)).unwrap();
    assert_eq!(got.links, vec![link(4, 7, false)]);
    assert!(matches!(
        decode_participant(&replace(&rec, pf::STARTED, &[1, 2, 3])),
        Err(DecodeError::Malformed { .. })
    ));
}

fn writer() -> EndpointInfo {
    EndpointInfo::new(
        Guid::new(GuidPrefix([1; 12]), EntityId([0, 0, 1, 2])),
        EndpointKind::Writer,
        TopicName::new("robot/arm").unwrap(),
        TypeName::new("Pose").unwrap(),
        TypeHash([7; 16]),
    )
}

/// A writer whose every policy differs from the writer default.
fn unusual_writer() -> EndpointInfo {
    let mut e = writer();
    e.partitions = Partitions::new(["robot/*", "diagnostics"]).unwrap();
    e.locators = vec![Locator::udp_v4([10, 0, 0, 5], 7411)];
    e.qos = EndpointQos {
        reliability: Reliability {
            kind: ReliabilityKind::BestEffort,
            max_blocking_time: QosDuration::from_millis(7),
        },
        durability: DurabilityKind::TransientLocal,
        deadline: Deadline {
            period: QosDuration::from_millis(50),
        },
        latency_budget: LatencyBudget {
            duration: QosDuration::from_millis(3),
        },
        ownership: OwnershipKind::Exclusive,
        ownership_strength: -12,
        liveliness: Liveliness {
            kind: LivelinessKind::ManualByTopic,
            lease_duration: QosDuration::from_secs(2),
        },
        destination_order: DestinationOrderKind::BySourceTimestamp,
        presentation: Presentation {
            access_scope: AccessScope::Group,
            coherent_access: true,
            ordered_access: true,
        },
        history: History::KeepAll,
        resource_limits: ResourceLimits {
            max_samples: Limit::AtMost(100),
            max_instances: Limit::AtMost(4),
            max_samples_per_instance: Limit::AtMost(25),
        },
        lifespan: Lifespan {
            duration: QosDuration::from_secs(30),
        },
    };
    assert_ne!(e.qos, EndpointQos::writer_default());
    e
}

fn participant() -> ParticipantInfo {
    let mut p = ParticipantInfo::new(GuidPrefix([1; 12]), "node-a");
    p.discovery_locators = vec![Locator::udp_v4([239, 255, 0, 1], 7400)];
    p.user_locators = vec![
        Locator::udp_v4([10, 0, 0, 1], 7410),
        Locator::udp_v6(std::net::Ipv6Addr::LOCALHOST.octets(), 7411),
    ];
    p.shared_memory = true;
    p.lease_duration = QosDuration::from_secs(30);
    p
}

/// Rebuilds `rec` field by field through `edit`, which may drop a field
/// (return empty vec), replace it, or add fields after it.
fn rewrite(rec: &[u8], mut edit: impl FnMut(u16, &[u8]) -> Vec<(u16, Vec<u8>)>) -> Vec<u8> {
    let raw = RawRecord::parse(rec).unwrap();
    let mut w = RecordWriter::new(raw.kind(), rec.len());
    for f in raw.fields() {
        let f = f.unwrap();
        for (id, v) in edit(f.id, f.value) {
            w.field(id, &v).unwrap();
        }
    }
    w.finish().unwrap().to_vec()
}

fn replace(rec: &[u8], id: u16, value: &[u8]) -> Vec<u8> {
    rewrite(rec, |fid, v| {
        if fid == id {
            vec![(fid, value.to_vec())]
        } else {
            vec![(fid, v.to_vec())]
        }
    })
}

fn remove(rec: &[u8], id: u16) -> Vec<u8> {
    rewrite(rec, |fid, v| {
        if fid == id {
            vec![]
        } else {
            vec![(fid, v.to_vec())]
        }
    })
}

fn field_ids(rec: &[u8]) -> Vec<u16> {
    RawRecord::parse(rec)
        .unwrap()
        .fields()
        .map(|f| f.unwrap().id)
        .collect()
}

fn set_body_len(rec: &mut [u8]) {
    let body = (rec.len() - HEADER_LEN) as u32;
    rec[8..12].copy_from_slice(&body.to_be_bytes());
}

// ---------------------------------------------------------------- examples

#[test]
fn round_trip_examples() {
    let p = participant();
    let bytes = encode_participant(&p).unwrap();
    assert_eq!(&bytes[..4], b"SHRD");
    assert_eq!(decode(&bytes), Ok(Record::Participant(p.clone())));
    assert_eq!(decode_participant(&bytes), Ok(p));
    for e in [writer(), unusual_writer()] {
        let bytes = encode_endpoint(&e).unwrap();
        assert_eq!(decode_endpoint(&bytes), Ok(e));
    }
}

#[test]
fn every_policy_is_written_even_defaults() {
    for e in [writer(), {
        let mut r = writer();
        r.kind = EndpointKind::Reader;
        r.qos = EndpointQos::reader_default();
        r
    }] {
        let ids = field_ids(&encode_endpoint(&e).unwrap());
        for id in ef::ALL {
            assert!(ids.contains(&id), "field {id:#06x} not written");
        }
        assert_eq!(ids.len(), ef::ALL.len());
    }
    let ids =
        field_ids(&encode_participant(&ParticipantInfo::new(GuidPrefix([3; 12]), "")).unwrap());
    // Every field but the observer ones, which are written only when said.
    let said: Vec<u16> = pf::ALL
        .into_iter()
        .filter(|id| ![pf::STARTED, pf::LINKS].contains(id))
        .collect();
    assert_eq!(ids, said);
}

#[test]
fn the_encoder_copies_the_endpoints_own_policies() {
    // A best-effort writer must go out as best-effort, not as the writer
    // default (reliable): the seed's silent-mismatch fault.
    let e = unusual_writer();
    let bytes = encode_endpoint(&e).unwrap();
    let raw = RawRecord::parse(&bytes).unwrap();
    let rel = raw
        .fields()
        .map(Result::unwrap)
        .find(|f| f.id == ef::RELIABILITY)
        .unwrap();
    assert_eq!(rel.value[0], 0, "best effort on the wire");
    assert_eq!(decode_endpoint(&bytes).unwrap().qos, e.qos);
}

#[test]
fn absent_policy_means_its_default() {
    let full = encode_endpoint(&unusual_writer()).unwrap();
    let d = EndpointQos::writer_default();
    let base = unusual_writer().qos;
    for id in ef::QOS {
        let e = decode_endpoint(&remove(&full, id)).unwrap();
        let mut want = base;
        match id {
            ef::RELIABILITY => want.reliability = d.reliability,
            ef::DURABILITY => want.durability = d.durability,
            ef::DEADLINE => want.deadline = d.deadline,
            ef::LATENCY_BUDGET => want.latency_budget = d.latency_budget,
            ef::OWNERSHIP => want.ownership = d.ownership,
            ef::OWNERSHIP_STRENGTH => want.ownership_strength = d.ownership_strength,
            ef::LIVELINESS => want.liveliness = d.liveliness,
            ef::DESTINATION_ORDER => want.destination_order = d.destination_order,
            ef::PRESENTATION => want.presentation = d.presentation,
            ef::HISTORY => want.history = d.history,
            ef::RESOURCE_LIMITS => want.resource_limits = d.resource_limits,
            ef::LIFESPAN => want.lifespan = d.lifespan,
            _ => unreachable!(),
        }
        assert_eq!(e.qos, want, "field {id:#06x}");
    }
    // With every policy absent, a reader gets the reader defaults (best effort).
    let mut r = unusual_writer();
    r.kind = EndpointKind::Reader;
    let mut rec = encode_endpoint(&r).unwrap().to_vec();
    for id in ef::QOS {
        rec = remove(&rec, id);
    }
    assert_eq!(
        decode_endpoint(&rec).unwrap().qos,
        EndpointQos::reader_default()
    );
    // Optional non-QoS fields.
    let e = decode_endpoint(&remove(&full, ef::PARTITIONS)).unwrap();
    assert!(e.partitions.is_empty());
    let e = decode_endpoint(&remove(&full, ef::TYPE_HASH)).unwrap();
    assert_eq!(e.type_hash, TypeHash::UNKNOWN);
    let e = decode_endpoint(&remove(&full, ef::LOCATORS)).unwrap();
    assert!(e.locators.is_empty());
    let prec = encode_participant(&participant()).unwrap();
    let p = decode_participant(&remove(&prec, pf::LEASE_DURATION)).unwrap();
    assert_eq!(p.lease_duration, QosDuration::from_secs(10));
    let p = decode_participant(&remove(&prec, pf::SHARED_MEMORY)).unwrap();
    assert!(!p.shared_memory);
    let p = decode_participant(&remove(&prec, pf::NAME)).unwrap();
    assert_eq!(p.name, "");
}

#[test]
fn out_of_range_policy_rejects_the_whole_record() {
    let full = encode_endpoint(&writer()).unwrap();
    let dur = |n: u64| n.to_be_bytes().to_vec();
    let cat = |a: &[u8], b: &[u8]| [a, b].concat();
    let limit = |tag: u8, n: u32| cat(&[tag], &n.to_be_bytes());
    let ok_limit = limit(0, 0);
    let cases: Vec<(u16, Vec<u8>, Policy)> = vec![
        (ef::RELIABILITY, cat(&[2], &dur(1)), Policy::Reliability),
        (ef::DURABILITY, vec![4], Policy::Durability),
        (ef::DEADLINE, dur(0), Policy::Deadline),
        (ef::OWNERSHIP, vec![2], Policy::Ownership),
        (ef::LIVELINESS, cat(&[3], &dur(5)), Policy::Liveliness),
        (ef::LIVELINESS, cat(&[0], &dur(0)), Policy::Liveliness),
        (ef::DESTINATION_ORDER, vec![2], Policy::DestinationOrder),
        (ef::PRESENTATION, vec![3, 0, 0], Policy::Presentation),
        (ef::PRESENTATION, vec![0, 2, 0], Policy::Presentation),
        (ef::PRESENTATION, vec![0, 0, 9], Policy::Presentation),
        (ef::HISTORY, cat(&[0], &0u32.to_be_bytes()), Policy::History),
        (ef::HISTORY, cat(&[1], &3u32.to_be_bytes()), Policy::History),
        (ef::HISTORY, cat(&[2], &1u32.to_be_bytes()), Policy::History),
        (
            ef::RESOURCE_LIMITS,
            [limit(1, 0), ok_limit.clone(), ok_limit.clone()].concat(),
            Policy::ResourceLimits,
        ),
        (
            ef::RESOURCE_LIMITS,
            [ok_limit.clone(), ok_limit.clone(), limit(7, 1)].concat(),
            Policy::ResourceLimits,
        ),
        (
            ef::RESOURCE_LIMITS,
            [ok_limit.clone(), limit(0, 5), ok_limit.clone()].concat(),
            Policy::ResourceLimits,
        ),
        (ef::LIFESPAN, dur(0), Policy::Lifespan),
    ];
    for (id, value, policy) in cases {
        let err = decode_endpoint(&replace(&full, id, &value)).unwrap_err();
        assert!(
            matches!(err, DecodeError::PolicyOutOfRange { policy: p, .. } if p == policy),
            "{id:#06x} {value:?}: {err:?}"
        );
    }
    // A zero participant lease is out of range too.
    let prec = encode_participant(&participant()).unwrap();
    assert!(matches!(
        decode_participant(&replace(&prec, pf::LEASE_DURATION, &dur(0))),
        Err(DecodeError::PolicyOutOfRange {
            policy: Policy::Liveliness,
            ..
        })
    ));
}

#[test]
fn inconsistent_but_in_range_qos_still_decodes() {
    // Depth beyond resource limits is the graph's business (Consistent),
    // not the codec's: the record faithfully describes the endpoint.
    let mut e = writer();
    e.qos.history = History::KeepLast { depth: 10 };
    e.qos.resource_limits.max_samples_per_instance = Limit::AtMost(5);
    assert_eq!(decode_endpoint(&encode_endpoint(&e).unwrap()), Ok(e));
}

#[test]
fn malformed_known_fields_are_rejected() {
    let full = encode_endpoint(&writer()).unwrap();
    for (id, value) in [
        (ef::GUID, vec![0u8; 15]),
        (ef::KIND, vec![2]),
        (ef::KIND, vec![0, 0]),
        (ef::TYPE_HASH, vec![1; 17]),
        (ef::DEADLINE, vec![0; 7]),
        (ef::RELIABILITY, vec![1; 10]),
        (ef::TOPIC, vec![0xff, 0xfe]),
        (ef::PARTITIONS, vec![0, 1, 0, 5, b'a']),
        (ef::PARTITIONS, vec![0, 0, 0]),
        (ef::LOCATORS, vec![1; 20]),
    ] {
        assert!(
            matches!(
                decode_endpoint(&replace(&full, id, &value)),
                Err(DecodeError::Malformed { .. })
            ),
            "{id:#06x} {value:?}"
        );
    }
    assert_eq!(
        decode_endpoint(&replace(&full, ef::TOPIC, b"")),
        Err(DecodeError::Invalid(TypesError::EmptyName {
            what: "topic name"
        }))
    );
    let prec = encode_participant(&participant()).unwrap();
    assert!(matches!(
        decode_participant(&replace(&prec, pf::SHARED_MEMORY, &[2])),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn required_fields() {
    let full = encode_endpoint(&writer()).unwrap();
    for (id, name) in [
        (ef::GUID, "guid"),
        (ef::KIND, "endpoint kind"),
        (ef::TOPIC, "topic name"),
        (ef::TYPE_NAME, "type name"),
    ] {
        assert_eq!(
            decode_endpoint(&remove(&full, id)),
            Err(DecodeError::MissingField(name))
        );
    }
    let prec = encode_participant(&participant()).unwrap();
    assert_eq!(
        decode_participant(&remove(&prec, pf::GUID_PREFIX)),
        Err(DecodeError::MissingField("guid prefix"))
    );
}

#[test]
fn unknown_fields_skipped_unless_must_understand() {
    let e = unusual_writer();
    let full = encode_endpoint(&e).unwrap();
    let extended = rewrite(&full, |id, v| {
        let mut out = vec![(id, v.to_vec())];
        if id == ef::GUID {
            out.push((0x0200, b"future extension".to_vec()));
            out.push((0x0200, vec![])); // unknown duplicates are not checked
            out.push((0x7fff, vec![0xff; 300]));
        }
        out
    });
    assert_eq!(decode_endpoint(&extended), Ok(e));
    let critical = rewrite(&full, |id, v| {
        let mut out = vec![(id, v.to_vec())];
        if id == ef::LIFESPAN {
            out.push((0x8123, vec![1]));
        }
        out
    });
    assert_eq!(
        decode_endpoint(&critical),
        Err(DecodeError::UnknownCriticalField(0x8123))
    );
    // Unknown locator kinds inside a known list are skipped.
    let mut weird = vec![3u8];
    weird.extend_from_slice(&9u32.to_be_bytes());
    weird.extend_from_slice(&[0; 16]);
    let mut list = weird.clone();
    let good = Locator::udp_v4([10, 0, 0, 9], 1);
    list.push(good.kind.code() as u8);
    list.extend_from_slice(&good.port.to_be_bytes());
    list.extend_from_slice(&good.address);
    let d = decode_endpoint(&replace(&full, ef::LOCATORS, &list)).unwrap();
    assert_eq!(d.locators, vec![good]);
}

#[test]
fn field_order_does_not_matter() {
    let e = unusual_writer();
    let full = encode_endpoint(&e).unwrap();
    let raw = RawRecord::parse(&full).unwrap();
    let mut fields: Vec<_> = raw.fields().map(Result::unwrap).collect();
    fields.reverse();
    let mut w = RecordWriter::new(RecordKind::Endpoint, full.len());
    for f in fields {
        w.field(f.id, f.value).unwrap();
    }
    assert_eq!(decode_endpoint(&w.finish().unwrap()), Ok(e));
}

#[test]
fn duplicate_known_fields_rejected() {
    let full = encode_endpoint(&writer()).unwrap();
    let dup = rewrite(&full, |id, v| {
        if id == ef::DEADLINE {
            vec![(id, v.to_vec()), (id, v.to_vec())]
        } else {
            vec![(id, v.to_vec())]
        }
    });
    assert_eq!(
        decode_endpoint(&dup),
        Err(DecodeError::DuplicateField(ef::DEADLINE))
    );
}

#[test]
fn header_checks() {
    let good = encode_participant(&participant()).unwrap().to_vec();
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(decode(&bad), Err(DecodeError::BadMagic(_))));
    let mut bad = good.clone();
    bad[4] = 2;
    assert_eq!(decode(&bad), Err(DecodeError::UnsupportedVersion(2)));
    let mut bad = good.clone();
    bad[5] = 3;
    assert_eq!(decode(&bad), Err(DecodeError::UnknownKind(3)));
    // Reserved bytes are ignored.
    let mut ok = good.clone();
    ok[6] = 0xaa;
    assert!(decode(&ok).is_ok());
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(matches!(
        decode(&trailing),
        Err(DecodeError::LengthMismatch { .. })
    ));
    assert_eq!(
        decode_endpoint(&good),
        Err(DecodeError::WrongKind {
            expected: RecordKind::Endpoint,
            actual: RecordKind::Participant
        })
    );
}

#[test]
fn bounds_on_decode() {
    let full = encode_endpoint(&writer()).unwrap();
    // Too many locators.
    let one = {
        let l = Locator::udp_v4([10, 0, 0, 1], 1);
        let mut v = vec![l.kind.code() as u8];
        v.extend_from_slice(&l.port.to_be_bytes());
        v.extend_from_slice(&l.address);
        v
    };
    let list = one.repeat(MAX_LOCATORS + 1);
    assert_eq!(
        decode_endpoint(&replace(&full, ef::LOCATORS, &list)),
        Err(DecodeError::Invalid(TypesError::TooManyLocators(
            MAX_LOCATORS + 1
        )))
    );
    assert!(decode_endpoint(&replace(&full, ef::LOCATORS, &one.repeat(MAX_LOCATORS))).is_ok());
    // Name too long.
    let long = vec![b'a'; MAX_NAME_LEN + 1];
    assert!(matches!(
        decode_endpoint(&replace(&full, ef::TOPIC, &long)),
        Err(DecodeError::Invalid(TypesError::NameTooLong { .. }))
    ));
    // Too many partitions.
    let mut parts = ((MAX_PARTITIONS + 1) as u16).to_be_bytes().to_vec();
    for _ in 0..=MAX_PARTITIONS {
        parts.extend_from_slice(&[0, 1, b'p']);
    }
    assert_eq!(
        decode_endpoint(&replace(&full, ef::PARTITIONS, &parts)),
        Err(DecodeError::Invalid(TypesError::TooManyPartitions(
            MAX_PARTITIONS + 1
        )))
    );
    // Too many fields (all unknown, each tiny).
    let mut many = full.to_vec();
    for _ in 0..MAX_FIELDS {
        many.extend_from_slice(&[0x02, 0x00, 0, 0]);
    }
    set_body_len(&mut many);
    assert_eq!(
        decode_endpoint(&many),
        Err(DecodeError::TooManyFields { max: MAX_FIELDS })
    );
    // Too large overall.
    let mut huge = full.to_vec();
    while huge.len() <= MAX_RECORD_LEN {
        huge.extend_from_slice(&[0x02, 0x00, 0x10, 0x00]);
        huge.extend_from_slice(&[0; 0x1000]);
    }
    set_body_len(&mut huge);
    assert!(matches!(decode(&huge), Err(DecodeError::TooLarge { .. })));
}

#[test]
fn bounds_on_encode() {
    let mut p = participant();
    p.user_locators = vec![Locator::udp_v4([10, 0, 0, 1], 1); MAX_LOCATORS + 1];
    assert_eq!(
        encode_participant(&p),
        Err(EncodeError::Invalid(TypesError::TooManyLocators(
            MAX_LOCATORS + 1
        )))
    );
    let mut p = participant();
    p.name = "n".repeat(MAX_NAME_LEN + 1);
    assert!(matches!(
        encode_participant(&p),
        Err(EncodeError::Invalid(_))
    ));
    let mut e = writer();
    e.qos.deadline.period = QosDuration::ZERO;
    assert!(matches!(encode_endpoint(&e), Err(EncodeError::Invalid(_))));
    // The largest valid endpoint record still fits.
    let mut e = writer();
    let name = "x".repeat(MAX_NAME_LEN);
    e.topic = TopicName::new(name.clone()).unwrap();
    e.type_name = TypeName::new(name.clone()).unwrap();
    e.partitions = Partitions::new(vec![name; MAX_PARTITIONS]).unwrap();
    e.locators = vec![Locator::udp_v4([10, 0, 0, 1], 1); MAX_LOCATORS];
    let bytes = encode_endpoint(&e).unwrap();
    assert!(bytes.len() <= MAX_RECORD_LEN);
    assert_eq!(decode_endpoint(&bytes), Ok(e));
}

#[test]
fn truncation_at_every_split_is_an_error() {
    for rec in [
        encode_endpoint(&unusual_writer()).unwrap(),
        encode_participant(&participant()).unwrap(),
    ] {
        for cut in 0..rec.len() {
            assert!(decode(&rec[..cut]).is_err(), "cut at {cut}");
            // Even with the header's length patched to agree, a cut inside a
            // field is caught by the field walk; a cut on a field boundary
            // drops whole fields, which may decode (absent = default) or
            // fail (missing required field), but never panics.
            if cut >= HEADER_LEN {
                let mut patched = rec[..cut].to_vec();
                set_body_len(&mut patched);
                let boundary = field_boundaries(&rec).contains(&cut);
                let r = decode(&patched);
                if !boundary {
                    assert!(r.is_err(), "mid-field cut at {cut} decoded");
                }
            }
        }
    }
}

fn field_boundaries(rec: &[u8]) -> Vec<usize> {
    let raw = RawRecord::parse(rec).unwrap();
    let mut at = HEADER_LEN;
    let mut out = vec![at];
    for f in raw.fields() {
        at += 4 + f.unwrap().value.len();
        out.push(at);
    }
    out
}

// ---------------------------------------------------------------- properties

fn arb_duration() -> impl Strategy<Value = QosDuration> {
    prop_oneof![
        Just(QosDuration::INFINITE),
        (1u64..u64::MAX).prop_map(QosDuration::from_nanos),
    ]
}

fn arb_limit() -> impl Strategy<Value = Limit> {
    prop_oneof![Just(Limit::Unlimited), (1u32..).prop_map(Limit::AtMost)]
}

fn arb_qos() -> impl Strategy<Value = EndpointQos> {
    (
        (
            any::<bool>(),
            any::<u64>(),
            0u8..4,
            arb_duration(),
            any::<u64>(),
            any::<bool>(),
            any::<i32>(),
        ),
        (
            0u8..3,
            arb_duration(),
            any::<bool>(),
            (0u8..3, any::<bool>(), any::<bool>()),
            prop_oneof![
                Just(History::KeepAll),
                (1u32..).prop_map(|depth| History::KeepLast { depth })
            ],
            (arb_limit(), arb_limit(), arb_limit()),
            arb_duration(),
        ),
    )
        .prop_map(
            |((rel, mbt, dur, dl, lb, own, strength), (lk, lease, src, pres, history, rl, ls))| {
                EndpointQos {
                    reliability: Reliability {
                        kind: if rel {
                            ReliabilityKind::Reliable
                        } else {
                            ReliabilityKind::BestEffort
                        },
                        max_blocking_time: QosDuration::from_nanos(mbt),
                    },
                    durability: [
                        DurabilityKind::Volatile,
                        DurabilityKind::TransientLocal,
                        DurabilityKind::Transient,
                        DurabilityKind::Persistent,
                    ][usize::from(dur)],
                    deadline: Deadline { period: dl },
                    latency_budget: LatencyBudget {
                        duration: QosDuration::from_nanos(lb),
                    },
                    ownership: if own {
                        OwnershipKind::Exclusive
                    } else {
                        OwnershipKind::Shared
                    },
                    ownership_strength: strength,
                    liveliness: Liveliness {
                        kind: [
                            LivelinessKind::Automatic,
                            LivelinessKind::ManualByParticipant,
                            LivelinessKind::ManualByTopic,
                        ][usize::from(lk)],
                        lease_duration: lease,
                    },
                    destination_order: if src {
                        DestinationOrderKind::BySourceTimestamp
                    } else {
                        DestinationOrderKind::ByReceptionTimestamp
                    },
                    presentation: Presentation {
                        access_scope: [
                            AccessScope::Instance,
                            AccessScope::Topic,
                            AccessScope::Group,
                        ][usize::from(pres.0)],
                        coherent_access: pres.1,
                        ordered_access: pres.2,
                    },
                    history,
                    resource_limits: ResourceLimits {
                        max_samples: rl.0,
                        max_instances: rl.1,
                        max_samples_per_instance: rl.2,
                    },
                    lifespan: Lifespan { duration: ls },
                }
            },
        )
}

fn arb_locator() -> impl Strategy<Value = Locator> {
    (
        prop::sample::select(vec![
            LocatorKind::UdpV4,
            LocatorKind::UdpV6,
            LocatorKind::TcpV4,
            LocatorKind::TcpV6,
            LocatorKind::Shm,
        ]),
        any::<[u8; 16]>(),
        any::<u32>(),
    )
        .prop_map(|(kind, address, port)| Locator {
            kind,
            address,
            port,
        })
}

fn arb_locators() -> impl Strategy<Value = Vec<Locator>> {
    prop::collection::vec(arb_locator(), 0..=MAX_LOCATORS)
}

fn arb_participant() -> impl Strategy<Value = ParticipantInfo> {
    (
        any::<[u8; 12]>(),
        "\\PC{0,60}",
        arb_duration(),
        arb_locators(),
        arb_locators(),
        any::<bool>(),
        any::<Option<u64>>(),
        prop::collection::vec(
            (any::<[u8; 16]>(), any::<u32>(), any::<bool>()).prop_map(
                |(peer, rtt_us, extended)| LinkReport {
                    peer,
                    rtt_us,
                    extended,
                },
            ),
            0..=MAX_LINK_REPORTS,
        ),
    )
        .prop_map(
            |(prefix, name, lease, disc, user, shm, started_ms, links)| ParticipantInfo {
                prefix: GuidPrefix(prefix),
                name,
                lease_duration: lease,
                discovery_locators: disc,
                user_locators: user,
                shared_memory: shm,
                started_ms,
                links,
            },
        )
}

fn arb_endpoint() -> impl Strategy<Value = EndpointInfo> {
    (
        any::<[u8; 12]>(),
        any::<[u8; 4]>(),
        any::<bool>(),
        "\\PC{1,60}",
        "[A-Za-z_:]{1,40}",
        any::<[u8; 16]>(),
        prop::collection::vec("[a-z/*?]{0,20}", 0..8),
        arb_qos(),
        arb_locators(),
    )
        .prop_map(
            |(prefix, entity, is_writer, topic, ty, hash, parts, qos, locators)| EndpointInfo {
                guid: Guid::new(GuidPrefix(prefix), EntityId(entity)),
                kind: if is_writer {
                    EndpointKind::Writer
                } else {
                    EndpointKind::Reader
                },
                topic: TopicName::new(topic).unwrap(),
                type_name: TypeName::new(ty).unwrap(),
                type_hash: TypeHash(hash),
                partitions: Partitions::new(parts).unwrap(),
                qos,
                locators,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn participant_round_trip(p in arb_participant()) {
        let bytes = encode_participant(&p).unwrap();
        prop_assert_eq!(decode(&bytes), Ok(Record::Participant(p.clone())));
        // Encoding is a function of the description alone.
        prop_assert_eq!(encode_participant(&p).unwrap(), bytes);
    }

    #[test]
    fn endpoint_round_trip(e in arb_endpoint()) {
        let bytes = encode_endpoint(&e).unwrap();
        prop_assert_eq!(decode(&bytes), Ok(Record::Endpoint(e.clone())));
        prop_assert_eq!(encode_endpoint(&e).unwrap(), bytes);
    }

    /// Arbitrary bytes, and arbitrary corruptions of valid records, never
    /// panic; whatever decodes re-encodes to a record that decodes the same.
    #[test]
    fn no_panic_on_corruption(
        e in arb_endpoint(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = encode_endpoint(&e).unwrap().to_vec();
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(rec) = decode(&bytes) {
            let again = match &rec {
                Record::Participant(p) => encode_participant(p).unwrap(),
                Record::Endpoint(e) => encode_endpoint(e).unwrap(),
            };
            prop_assert_eq!(decode(&again), Ok(rec));
        }
    }

    #[test]
    fn no_panic_on_noise(mut bytes in prop::collection::vec(any::<u8>(), 0..512), kind in 1u8..=2) {
        // Give half the inputs a valid header so the field walk is exercised.
        if bytes.len() >= HEADER_LEN && bytes[0] & 1 == 0 {
            bytes[..4].copy_from_slice(b"SHRD");
            bytes[4] = 1;
            bytes[5] = kind;
            set_body_len(&mut bytes);
        }
        let _ = decode(&bytes);
    }
}

// ---------------------------------------------------------------- fuzz seeds

/// The seed corpus of the `record_decode` fuzz target is a set of encoded
/// records; this keeps it in step with the encoder. Regenerate with
/// `SHOAL_WRITE_FUZZ_SEEDS=1 cargo test -p shoal-discovery --test record_codec fuzz_seeds`.
#[test]
fn fuzz_seeds_are_current() {
    let mut reader = writer();
    reader.kind = EndpointKind::Reader;
    reader.qos = EndpointQos::reader_default();
    let extended = rewrite(&encode_endpoint(&reader).unwrap(), |id, v| {
        let mut out = vec![(id, v.to_vec())];
        if id == ef::TOPIC {
            out.push((0x0200, b"extension".to_vec()));
        }
        out
    });
    let seeds: [(&str, Vec<u8>); 4] = [
        (
            "participant.bin",
            encode_participant(&participant()).unwrap().to_vec(),
        ),
        (
            "writer.bin",
            encode_endpoint(&unusual_writer()).unwrap().to_vec(),
        ),
        ("reader.bin", encode_endpoint(&reader).unwrap().to_vec()),
        ("reader_extended.bin", extended),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/record_decode");
    let write = std::env::var_os("SHOAL_WRITE_FUZZ_SEEDS").is_some();
    if write {
        std::fs::create_dir_all(&dir).unwrap();
    }
    for (name, bytes) in seeds {
        assert!(decode(&bytes).is_ok(), "{name}");
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &bytes).unwrap();
        } else {
            let on_disk = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{}: {e}; regenerate the seeds", path.display()));
            assert_eq!(on_disk, bytes, "{name} is stale; regenerate the seeds");
        }
    }
}
