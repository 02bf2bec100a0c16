//! Build-Announcements / Announce-Cycle: records built once, resent as the
//! same bytes, re-encoded only on change, never describing a foreign
//! endpoint.

use bytes::Bytes;
use shoal_discovery::announce::{build_announcements, AnnounceError, Announcer, Upsert};
use shoal_discovery::qos::ReliabilityKind;
use shoal_discovery::record::{decode, Record};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, Locator, ParticipantInfo, TopicName,
    TypeHash, TypeName,
};

const ME: GuidPrefix = GuidPrefix([1; 12]);
const OTHER: GuidPrefix = GuidPrefix([2; 12]);

fn ep(prefix: GuidPrefix, n: u8, kind: EndpointKind) -> EndpointInfo {
    EndpointInfo::new(
        Guid::new(prefix, EntityId([0, 0, n, 0])),
        kind,
        TopicName::new("t").unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([n; 16]),
    )
}

fn me() -> ParticipantInfo {
    ParticipantInfo::new(ME, "me")
}

fn cycle(a: &mut Announcer) -> Vec<Bytes> {
    let mut out = Vec::new();
    a.announce_cycle(|b| out.push(b.clone()));
    out
}

fn same_buffers(a: &[Bytes], b: &[Bytes]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.as_ptr() == y.as_ptr() && x.len() == y.len())
}

#[test]
fn cycles_resend_the_same_bytes() {
    let mut a = build_announcements(
        me(),
        vec![
            ep(ME, 2, EndpointKind::Reader),
            ep(ME, 1, EndpointKind::Writer),
        ],
        8,
    )
    .unwrap();
    assert_eq!(a.stats().encodes, 3);
    let first = cycle(&mut a);
    assert_eq!(first.len(), 3);
    for _ in 0..5 {
        assert!(same_buffers(&first, &cycle(&mut a)));
    }
    assert_eq!(a.stats().encodes, 3, "no re-encoding across cycles");
    assert_eq!(a.stats().cycles, 6);
    // Order: participant, then endpoints by GUID.
    assert!(matches!(decode(&first[0]), Ok(Record::Participant(_))));
    let guids: Vec<_> = first[1..]
        .iter()
        .map(|b| match decode(b).unwrap() {
            Record::Endpoint(e) => e.guid.entity.0[2],
            Record::Participant(_) => panic!("participant record out of place"),
        })
        .collect();
    assert_eq!(guids, vec![1, 2]);
    // `records` yields the same buffers as a cycle.
    let listed: Vec<Bytes> = a.records().cloned().collect();
    assert!(same_buffers(&first, &listed));
}

#[test]
fn unchanged_upserts_do_not_reencode() {
    let mut a = Announcer::new(me(), 4).unwrap();
    let w = ep(ME, 1, EndpointKind::Writer);
    assert_eq!(a.upsert_endpoint(w.clone()), Ok(Upsert::Added));
    let before = a.endpoint_record(&w.guid).unwrap().clone();
    let encodes = a.stats().encodes;
    assert_eq!(a.upsert_endpoint(w.clone()), Ok(Upsert::Unchanged));
    assert_eq!(a.set_participant(me()), Ok(false));
    assert_eq!(a.stats().encodes, encodes);
    assert_eq!(
        a.endpoint_record(&w.guid).unwrap().as_ptr(),
        before.as_ptr()
    );
}

#[test]
fn changes_reencode_only_what_changed() {
    let w1 = ep(ME, 1, EndpointKind::Writer);
    let w2 = ep(ME, 2, EndpointKind::Writer);
    let mut a = build_announcements(me(), vec![w1.clone(), w2.clone()], 4).unwrap();
    let before = cycle(&mut a);
    let mut changed = w1.clone();
    changed.qos.reliability.kind = ReliabilityKind::BestEffort;
    assert_eq!(a.upsert_endpoint(changed.clone()), Ok(Upsert::Changed));
    let after = cycle(&mut a);
    assert_eq!(
        after[0].as_ptr(),
        before[0].as_ptr(),
        "participant untouched"
    );
    assert_ne!(after[1].as_ptr(), before[1].as_ptr(), "w1 re-encoded");
    assert_eq!(after[2].as_ptr(), before[2].as_ptr(), "w2 untouched");
    assert_eq!(decode(&after[1]), Ok(Record::Endpoint(changed)));
    // Participant change re-encodes the participant record only.
    let mut p = me();
    p.user_locators = vec![Locator::udp_v4([10, 0, 0, 1], 7410)];
    assert_eq!(a.set_participant(p.clone()), Ok(true));
    let after2 = cycle(&mut a);
    assert_ne!(after2[0].as_ptr(), after[0].as_ptr());
    assert!(same_buffers(&after2[1..], &after[1..]));
    assert_eq!(decode(&after2[0]), Ok(Record::Participant(p)));
}

#[test]
fn foreign_endpoints_are_never_described() {
    // Build: one foreign endpoint among ours rejects everything.
    assert_eq!(
        build_announcements(
            me(),
            vec![
                ep(ME, 1, EndpointKind::Writer),
                ep(OTHER, 2, EndpointKind::Reader)
            ],
            8
        )
        .unwrap_err(),
        AnnounceError::ForeignEndpoint {
            endpoint: ep(OTHER, 2, EndpointKind::Reader).guid,
            participant: ME
        }
    );
    // Upsert: refused, counted, nothing changed.
    let mut a = Announcer::new(me(), 8).unwrap();
    let before = cycle(&mut a);
    assert!(matches!(
        a.upsert_endpoint(ep(OTHER, 1, EndpointKind::Writer)),
        Err(AnnounceError::ForeignEndpoint { .. })
    ));
    assert_eq!(a.stats().rejected_foreign, 1);
    assert!(same_buffers(&before, &cycle(&mut a)));
    // The participant's prefix cannot be swapped under its endpoints.
    assert!(matches!(
        a.set_participant(ParticipantInfo::new(OTHER, "me")),
        Err(AnnounceError::PrefixChanged { .. })
    ));
}

#[test]
fn capacity_is_enforced_and_counted() {
    let mut a = Announcer::new(me(), 2).unwrap();
    a.upsert_endpoint(ep(ME, 1, EndpointKind::Writer)).unwrap();
    a.upsert_endpoint(ep(ME, 2, EndpointKind::Writer)).unwrap();
    assert_eq!(
        a.upsert_endpoint(ep(ME, 3, EndpointKind::Writer)),
        Err(AnnounceError::Full { capacity: 2 })
    );
    assert_eq!(a.stats().rejected_full, 1);
    // Updating a held endpoint is a replace, not an add: allowed when full.
    let mut w = ep(ME, 2, EndpointKind::Writer);
    w.qos.ownership_strength = 9;
    assert_eq!(a.upsert_endpoint(w), Ok(Upsert::Changed));
    assert!(a.remove_endpoint(&ep(ME, 1, EndpointKind::Writer).guid));
    assert!(!a.remove_endpoint(&ep(ME, 1, EndpointKind::Writer).guid));
    assert_eq!(
        a.upsert_endpoint(ep(ME, 3, EndpointKind::Writer)),
        Ok(Upsert::Added)
    );
    assert_eq!(a.len(), 2);
    assert_eq!(
        build_announcements(
            me(),
            (1..=3).map(|n| ep(ME, n, EndpointKind::Writer)).collect(),
            2
        )
        .unwrap_err(),
        AnnounceError::Full { capacity: 2 }
    );
}

#[test]
fn duplicates_and_invalid_descriptions_rejected() {
    let w = ep(ME, 1, EndpointKind::Writer);
    assert_eq!(
        build_announcements(me(), vec![w.clone(), w.clone()], 8).unwrap_err(),
        AnnounceError::DuplicateEndpoint(w.guid)
    );
    let mut bad = w.clone();
    bad.qos.history = shoal_discovery::qos::History::KeepLast { depth: 0 };
    let mut a = Announcer::new(me(), 8).unwrap();
    assert!(matches!(
        a.upsert_endpoint(bad),
        Err(AnnounceError::Encode(_))
    ));
    assert!(a.is_empty());
}
