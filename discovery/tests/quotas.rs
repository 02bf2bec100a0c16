//! Bounded work and memory: the partition-bytes cap, per-participant quotas, the
//! remote byte ceiling, the lease cap, and the matching work each admission reports.
//! Every refusal is counted and changes nothing.

use shoal_discovery::footprint::endpoint_footprint;
use shoal_discovery::graph::*;
use shoal_discovery::qos::*;
use shoal_discovery::types::*;

fn prefix(n: u8) -> GuidPrefix {
    GuidPrefix([n; 12])
}

fn ep(p: u8, e: u16, kind: EndpointKind, parts: &[String]) -> EndpointInfo {
    let [hi, lo] = e.to_be_bytes();
    let mut i = EndpointInfo::new(
        Guid::new(prefix(p), EntityId([hi, lo, 0, 2])),
        kind,
        TopicName::new("t").unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([9; 16]),
    );
    i.partitions = Partitions::new(parts.iter().cloned()).unwrap();
    i
}

fn plain(p: u8, e: u16, kind: EndpointKind) -> EndpointInfo {
    ep(p, e, kind, &[])
}

/// Local participant 1, remote participants 2 and 3, global scope (as the mesh runs).
fn graph(caps: Capacities) -> DiscoveryGraph {
    let mut g = DiscoveryGraph::new(GraphConfig {
        capacities: caps,
        scope: MatchScope::All,
    });
    g.add_local_participant(ParticipantInfo::new(prefix(1), "local"))
        .unwrap();
    for p in [2, 3] {
        g.admit_participant(ParticipantInfo::new(prefix(p), "remote"), Time(0))
            .unwrap();
    }
    g
}

/// Everything observable, for "a refusal changes nothing".
fn snapshot(g: &DiscoveryGraph) -> impl PartialEq + std::fmt::Debug {
    let eps: Vec<_> = g
        .endpoints()
        .into_iter()
        .map(|id| (id, g.endpoint(id).cloned()))
        .collect();
    let usage: Vec<_> = [1, 2, 3].map(|p| g.participant_usage(&prefix(p))).to_vec();
    (eps, g.matches(), usage, g.remote_endpoint_bytes())
}

/// `n` names of `len` bytes each.
fn names(n: usize, len: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:x<len$}")).collect()
}

/// The hostile names: `aaaa…a-<i>`, 256 bytes each.
fn hostile_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let s = format!("-{i}");
            "a".repeat(256 - s.len()) + &s
        })
        .collect()
}

/// The hostile patterns: `*aaaa…ab*`, 256 bytes each (the last letter varies
/// so no two are the same text). Against `hostile_names` the seed's matcher compared
/// ~253²/2 bytes per pattern and name.
fn hostile_patterns(n: usize) -> Vec<String> {
    ('b'..='z')
        .chain('A'..='Z')
        .chain("!#%&+,.:;=@_~".chars())
        .take(n)
        .map(|c| format!("*{}{c}*", "a".repeat(253)))
        .collect()
}

#[test]
fn partition_bytes_cap_refuses_remote_and_local_records() {
    let caps = Capacities::default();
    assert_eq!(caps.endpoint_partition_bytes, 2048);
    let mut g = graph(caps);
    // At the cap: admitted.
    let at_cap = names(8, 256);
    g.admit_endpoint(ep(2, 1, EndpointKind::Writer, &at_cap))
        .unwrap();
    let before = snapshot(&g);
    // One byte over: a counted rejection of that record only, nothing else changes.
    let mut over = at_cap.clone();
    over.push("z".into());
    let err = g
        .admit_endpoint(ep(2, 2, EndpointKind::Reader, &over))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::PartitionBytes);
    assert!(matches!(
        err,
        AdmitError::PartitionBytes {
            bytes: 2049,
            cap: 2048,
            ..
        }
    ));
    assert_eq!(
        g.rejections()
            .get(Table::RemoteReaders, RejectCause::PartitionBytes),
        1
    );
    // A known endpoint re-announced over the cap keeps its old record.
    let err = g
        .admit_endpoint(ep(2, 1, EndpointKind::Writer, &over))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::PartitionBytes);
    assert_eq!(snapshot(&g), before);
    // A local endpoint over the cap is an error at creation.
    let err = g
        .add_local_endpoint(ep(1, 1, EndpointKind::Reader, &over))
        .unwrap_err();
    assert_eq!(err.table(), Table::LocalEndpoints);
    assert_eq!(err.cause(), RejectCause::PartitionBytes);
    g.check_invariants().unwrap();
}

#[test]
fn participant_endpoint_quota_counts_new_endpoints_only() {
    let caps = Capacities {
        participant_endpoints: 3,
        ..Capacities::default()
    };
    let mut g = graph(caps);
    for e in 0..3 {
        g.admit_endpoint(plain(2, e, EndpointKind::Writer)).unwrap();
    }
    let before = snapshot(&g);
    let err = g
        .admit_endpoint(plain(2, 3, EndpointKind::Reader))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::ParticipantEndpoints);
    assert_eq!(snapshot(&g), before);
    assert_eq!(
        g.rejections()
            .get(Table::RemoteReaders, RejectCause::ParticipantEndpoints),
        1
    );
    // A known endpoint is still refreshed; another participant has its own quota; the
    // local participant has none (its table bounds it).
    g.admit_endpoint(plain(2, 0, EndpointKind::Writer)).unwrap();
    for e in 0..4 {
        let admitted = g.admit_endpoint(plain(3, e, EndpointKind::Reader)).is_ok();
        assert_eq!(admitted, e < 3);
        g.add_local_endpoint(plain(1, e, EndpointKind::Reader))
            .unwrap();
    }
    assert_eq!(g.participant_usage(&prefix(3)).unwrap().0, 3);
    // A removal frees a place.
    g.remove_endpoint(&plain(2, 0, EndpointKind::Writer).guid)
        .unwrap();
    g.admit_endpoint(plain(2, 3, EndpointKind::Reader)).unwrap();
    g.check_invariants().unwrap();
}

#[test]
fn participant_byte_quota_bounds_growth_too() {
    let small = endpoint_footprint(&plain(2, 0, EndpointKind::Writer));
    let caps = Capacities {
        participant_bytes: 2 * small + 10,
        ..Capacities::default()
    };
    let mut g = graph(caps);
    g.admit_endpoint(plain(2, 0, EndpointKind::Writer)).unwrap();
    g.admit_endpoint(plain(2, 1, EndpointKind::Writer)).unwrap();
    assert_eq!(g.participant_usage(&prefix(2)), Some((2, 2 * small)));
    let before = snapshot(&g);
    let err = g
        .admit_endpoint(plain(2, 2, EndpointKind::Writer))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::ParticipantBytes);
    // A refresh that grows the record (a locator of its own) past the quota is refused
    // and the old record stays.
    let mut grown = plain(2, 1, EndpointKind::Writer);
    grown.locators.push(Locator::udp_v4([10, 0, 0, 1], 7400));
    let err = g.admit_endpoint(grown).unwrap_err();
    assert_eq!(err.cause(), RejectCause::ParticipantBytes);
    assert_eq!(snapshot(&g), before);
    assert_eq!(
        g.rejections()
            .get(Table::RemoteWriters, RejectCause::ParticipantBytes),
        2
    );
    // Other participants are not charged for participant 2.
    g.admit_endpoint(plain(3, 0, EndpointKind::Writer)).unwrap();
    g.check_invariants().unwrap();
}

#[test]
fn remote_byte_ceiling_spans_participants_and_spares_local_endpoints() {
    let small = endpoint_footprint(&plain(2, 0, EndpointKind::Writer));
    let caps = Capacities {
        remote_endpoint_bytes: 3 * small,
        ..Capacities::default()
    };
    let mut g = graph(caps);
    g.admit_endpoint(plain(2, 0, EndpointKind::Writer)).unwrap();
    g.admit_endpoint(plain(2, 1, EndpointKind::Writer)).unwrap();
    g.admit_endpoint(plain(3, 0, EndpointKind::Reader)).unwrap();
    assert_eq!(g.remote_endpoint_bytes(), 3 * small);
    let before = snapshot(&g);
    let err = g
        .admit_endpoint(plain(3, 1, EndpointKind::Reader))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::RemoteBytes);
    assert_eq!(snapshot(&g), before);
    g.add_local_endpoint(plain(1, 0, EndpointKind::Reader))
        .unwrap();
    assert_eq!(g.remote_endpoint_bytes(), 3 * small);
    // Expiry gives the bytes back.
    g.remove_participant(&prefix(2)).unwrap();
    assert_eq!(g.remote_endpoint_bytes(), small);
    g.admit_endpoint(plain(3, 1, EndpointKind::Reader)).unwrap();
    g.check_invariants().unwrap();
}

#[test]
fn infinite_and_long_leases_are_capped() {
    let caps = Capacities {
        max_lease: QosDuration::from_secs(60),
        ..Capacities::default()
    };
    let mut g = graph(caps);
    let mut forever = ParticipantInfo::new(prefix(4), "forever");
    forever.lease_duration = QosDuration::INFINITE;
    g.admit_participant(forever, Time::from_millis(1000))
        .unwrap();
    let mut short = ParticipantInfo::new(prefix(5), "short");
    short.lease_duration = QosDuration::from_secs(5);
    g.admit_participant(short, Time::from_millis(1000)).unwrap();
    assert_eq!(
        g.participant(&prefix(4)).unwrap().lease_duration,
        QosDuration::from_secs(60)
    );
    assert_eq!(
        g.participant_expiry(&prefix(4)),
        Some(Time::from_millis(61_000))
    );
    // A shorter lease is kept as announced.
    assert_eq!(
        g.participant_expiry(&prefix(5)),
        Some(Time::from_millis(6_000))
    );
    g.admit_endpoint(plain(4, 0, EndpointKind::Writer)).unwrap();
    assert!(g.expire(Time::from_millis(61_000)).endpoints.is_empty());
    let gone = g.expire(Time::from_millis(61_001));
    assert!(gone.participants.contains(&prefix(4)));
    assert_eq!(gone.endpoints.len(), 1);
    g.check_invariants().unwrap();
}

#[test]
fn admission_reports_linear_matching_work() {
    // The worst pair, allowed through by raising the cap to the record limit:
    // 64 writer names of 256 bytes, 64 reader patterns `*aaaa…ab*` of 256 bytes.
    let caps = Capacities {
        endpoint_partition_bytes: MAX_PARTITIONS * MAX_NAME_LEN,
        ..Capacities::default()
    };
    let mut g = graph(caps);
    let w = g
        .admit_endpoint(ep(2, 0, EndpointKind::Writer, &hostile_names(64)))
        .unwrap();
    assert_eq!(w.work.pairs, 0, "no reader to compare with yet");
    let before = g.match_work();
    let r = g
        .admit_endpoint(ep(3, 0, EndpointKind::Reader, &hostile_patterns(64)))
        .unwrap();
    assert!(r.matched.is_empty());
    assert_eq!(r.work.pairs, 1);
    // Preparing 16 KiB of patterns, then 64 × 64 runs over 256 bytes at 4 words each
    // (255 states): linear in the names, where the seed's matcher compared up to
    // 256 × 256 bytes per run.
    let runs = 64 * 64 * (1 + 256 * 4);
    let steps = r.work.steps - 64 * 256;
    assert!((runs..runs + 64 * 64).contains(&steps), "{steps}");
    let after = g.match_work();
    assert_eq!(after.pairs - before.pairs, 1);
    assert_eq!(after.steps - before.steps, r.work.steps);
    assert_eq!(r.work.units(), r.work.pairs + r.work.steps);
    // A refresh that changes nothing matchable costs nothing.
    let again = g
        .admit_endpoint(ep(3, 0, EndpointKind::Reader, &hostile_patterns(64)))
        .unwrap();
    assert_eq!(again.work, MatchWork::default());
}

#[test]
fn refused_admissions_are_charged_their_work() {
    let caps = Capacities {
        matches: 1,
        ..Capacities::default()
    };
    let mut g = graph(caps);
    g.admit_endpoint(plain(2, 0, EndpointKind::Writer)).unwrap();
    g.admit_endpoint(plain(2, 1, EndpointKind::Writer)).unwrap();
    let before = g.match_work();
    // Two matches would exceed the capacity: refused after comparing both writers.
    let err = g
        .admit_endpoint(plain(3, 0, EndpointKind::Reader))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::MatchCapacity);
    assert_eq!(g.match_work().pairs - before.pairs, 2);
    // Over the partition cap: refused before any matching.
    let before = g.match_work();
    g.admit_endpoint(ep(3, 1, EndpointKind::Reader, &names(9, 256)))
        .unwrap_err();
    assert_eq!(g.match_work(), before);
}
