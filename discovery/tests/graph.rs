//! Discovery graph: matching, admission, removal, expiry, explanations, and a
//! model-based property test against a naive all-pairs matcher.
//!
//! Length: the graph is one data structure (`src/graph.rs`); its behaviours share the
//! builders at the top, and the property test (about 140 lines with its naive model) needs
//! the same ones. Quotas and partition costs are in `quotas.rs`.

use shoal_discovery::graph::*;
use shoal_discovery::matching::{self, Incompatibility, QosRule};
use shoal_discovery::qos::*;
use shoal_discovery::types::*;

fn prefix(n: u8) -> GuidPrefix {
    GuidPrefix([n; 12])
}

fn guid(p: u8, e: u16) -> Guid {
    let [hi, lo] = e.to_be_bytes();
    Guid::new(prefix(p), EntityId([hi, lo, 0, 2]))
}

fn ep(p: u8, e: u16, kind: EndpointKind, topic: &str) -> EndpointInfo {
    EndpointInfo::new(
        guid(p, e),
        kind,
        TopicName::new(topic).unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([9; 16]),
    )
}

fn part(n: u8, lease_ms: u64) -> ParticipantInfo {
    let mut p = ParticipantInfo::new(prefix(n), format!("p{n}"));
    p.lease_duration = QosDuration::from_millis(lease_ms);
    p
}

/// Graph with local participant 1 and remote participant 2.
fn two_party(config: GraphConfig) -> DiscoveryGraph {
    let mut g = DiscoveryGraph::new(config);
    g.add_local_participant(part(1, 1000)).unwrap();
    g.admit_participant(part(2, 1000), Time::from_millis(0))
        .unwrap();
    g
}

/// Everything observable, for "a rejection changes nothing".
fn snapshot(g: &DiscoveryGraph) -> impl PartialEq + std::fmt::Debug {
    let eps: Vec<_> = g
        .endpoints()
        .into_iter()
        .map(|id| {
            (
                id,
                g.endpoint(id).cloned(),
                g.readers_of(id).collect::<Vec<_>>(),
            )
        })
        .collect();
    let occ: Vec<_> = Table::ALL.iter().map(|&t| g.occupancy(t)).collect();
    (eps, g.matches(), occ, g.participant_prefixes())
}

#[test]
fn writer_matches_reader_once_and_lookups_are_symmetric() {
    let mut g = two_party(GraphConfig::default());
    let w = g
        .add_local_endpoint(ep(1, 1, EndpointKind::Writer, "t"))
        .unwrap();
    assert!(w.matched.is_empty());
    let r = g
        .admit_endpoint(ep(2, 1, EndpointKind::Reader, "t"))
        .unwrap();
    assert_eq!(r.matched, vec![w.id]);
    // The same announcement again (lossy networks repeat): no second match.
    let again = g
        .admit_endpoint(ep(2, 1, EndpointKind::Reader, "t"))
        .unwrap();
    assert!(again.replaced && again.matched.is_empty() && again.id == r.id);
    assert_eq!(g.readers_of(w.id).collect::<Vec<_>>(), vec![r.id]);
    assert_eq!(g.writers_of(r.id).collect::<Vec<_>>(), vec![w.id]);
    assert_eq!(g.readers_of(r.id).count(), 0, "a reader has no readers");
    assert!(g.is_matched(w.id, r.id));
    assert_eq!(g.match_count(), 1);
    // Other topic: never compared, never matched.
    let other = g
        .admit_endpoint(ep(2, 2, EndpointKind::Reader, "u"))
        .unwrap();
    assert!(other.matched.is_empty());
    let why = g.explain(w.id, other.id).unwrap_err();
    assert!(matches!(why[0], Incompatibility::Topic { .. }));
    g.check_invariants().unwrap();
}

#[test]
fn remote_pairs_are_not_matched_in_local_scope_but_are_in_global() {
    for (scope, expect) in [(MatchScope::LocalOnly, 0), (MatchScope::All, 1)] {
        let mut g = two_party(GraphConfig {
            scope,
            ..Default::default()
        });
        g.admit_participant(part(3, 1000), Time(0)).unwrap();
        let w = g
            .admit_endpoint(ep(2, 1, EndpointKind::Writer, "t"))
            .unwrap();
        let r = g
            .admit_endpoint(ep(3, 1, EndpointKind::Reader, "t"))
            .unwrap();
        assert_eq!(g.match_count(), expect);
        if expect == 0 {
            assert_eq!(
                g.explain(r.id, w.id),
                Err(vec![Incompatibility::NoLocalSide])
            );
        } else {
            assert_eq!(g.explain(r.id, w.id), Ok(()));
        }
        g.check_invariants().unwrap();
    }
}

#[test]
fn seed_partition_table_through_the_graph() {
    let mut g = two_party(GraphConfig::default());
    let mut w = ep(1, 1, EndpointKind::Writer, "t");
    w.partitions = Partitions::new(["robot/*", "diagnostics"]).unwrap();
    let w = g.add_local_endpoint(w).unwrap();
    let rows: [(&[&str], bool); 4] = [
        (&["robot/arm"], true),
        (&["telemetry", "diagnostics"], true),
        (&["robot"], false),
        (&[], false),
    ];
    for (i, (names, expect)) in rows.into_iter().enumerate() {
        let mut r = ep(2, i as u16 + 1, EndpointKind::Reader, "t");
        r.partitions = Partitions::new(names.iter().copied()).unwrap();
        let r = g.admit_endpoint(r).unwrap();
        assert_eq!(g.is_matched(w.id, r.id), expect, "{names:?}");
        if !expect {
            let why = g.explain(w.id, r.id).unwrap_err();
            assert!(matches!(why[..], [Incompatibility::Partitions { .. }]));
        }
    }
}

#[test]
fn inconsistent_endpoint_rejected_before_scan_and_counted() {
    let mut g = two_party(GraphConfig::default());
    g.add_local_endpoint(ep(1, 1, EndpointKind::Writer, "t"))
        .unwrap();
    let before = snapshot(&g);
    let mut r = ep(2, 1, EndpointKind::Reader, "t");
    r.qos.history = History::KeepLast { depth: 50 };
    r.qos.resource_limits.max_samples_per_instance = Limit::AtMost(10);
    let err = g.admit_endpoint(r).unwrap_err();
    assert_eq!(err.cause(), RejectCause::Inconsistent);
    assert_eq!(before, snapshot(&g));
    assert_eq!(
        g.rejections()
            .get(Table::RemoteReaders, RejectCause::Inconsistent),
        1
    );
    // Out-of-range value: Invalid, not a default.
    let mut r = ep(2, 1, EndpointKind::Reader, "t");
    r.qos.deadline.period = QosDuration::ZERO;
    assert_eq!(
        g.admit_endpoint(r).unwrap_err().cause(),
        RejectCause::Invalid
    );
    assert_eq!(before, snapshot(&g));
    assert_eq!(g.rejections().table_total(Table::RemoteReaders), 2);
}

#[test]
fn endpoint_never_known_before_its_participant() {
    let mut g = two_party(GraphConfig::default());
    let err = g
        .admit_endpoint(ep(7, 1, EndpointKind::Reader, "t"))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::UnknownParticipant);
    assert_eq!(g.endpoint_count(), 0);
    // A peer may not describe endpoints of our own participant, nor may we
    // add a local endpoint under a remote participant.
    let err = g
        .admit_endpoint(ep(1, 1, EndpointKind::Reader, "t"))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::WrongLocality);
    let err = g
        .add_local_endpoint(ep(2, 9, EndpointKind::Reader, "t"))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::WrongLocality);
    let err = g.admit_participant(part(1, 1000), Time(0)).unwrap_err();
    assert_eq!(err.cause(), RejectCause::WrongLocality);
    assert_eq!(g.rejections().total(), 4);
}

#[test]
fn full_table_replaces_known_keys_rejects_new_ones_and_spends_no_ids() {
    let caps = Capacities {
        remote_participants: 2,
        remote_readers: 2,
        ..Default::default()
    };
    let mut g = two_party(GraphConfig {
        capacities: caps,
        ..Default::default()
    });
    g.admit_participant(part(3, 1000), Time(0)).unwrap();
    // Participant table full: refresh allowed, new prefix refused.
    let mut renamed = part(3, 1000);
    renamed.name = "renamed".into();
    assert_eq!(
        g.admit_participant(renamed, Time(5)),
        Ok(ParticipantAdmission::Refreshed)
    );
    assert_eq!(g.participant(&prefix(3)).unwrap().name, "renamed");
    let err = g.admit_participant(part(4, 1000), Time(5)).unwrap_err();
    assert_eq!(
        err,
        AdmitError::TableFull {
            table: Table::RemoteParticipants,
            capacity: 2
        }
    );

    let a = g
        .admit_endpoint(ep(2, 1, EndpointKind::Reader, "t"))
        .unwrap();
    let b = g
        .admit_endpoint(ep(3, 1, EndpointKind::Reader, "t"))
        .unwrap();
    let before = snapshot(&g);
    for _ in 0..5 {
        let err = g
            .admit_endpoint(ep(2, 2, EndpointKind::Reader, "t"))
            .unwrap_err();
        assert_eq!(err.cause(), RejectCause::TableFull);
    }
    assert_eq!(before, snapshot(&g));
    // Known key, new address: replaced in place while full.
    let mut moved = ep(2, 1, EndpointKind::Reader, "t");
    moved.locators = vec![Locator::udp_v4([127, 0, 0, 9], 7400)];
    let re = g.admit_endpoint(moved).unwrap();
    assert!(re.replaced && re.id == a.id);
    assert_eq!(g.endpoint(a.id).unwrap().locators.len(), 1);
    assert_eq!(g.occupancy(Table::RemoteReaders), 2);
    // Five rejections spent no identifiers.
    let w = g
        .add_local_endpoint(ep(1, 1, EndpointKind::Writer, "t"))
        .unwrap();
    assert_eq!(w.id, EndpointId(b.id.0 + 1));
    assert_eq!(w.matched, vec![a.id, b.id]);
    assert_eq!(
        g.rejections()
            .get(Table::RemoteReaders, RejectCause::TableFull),
        5
    );
    assert_eq!(
        g.rejections()
            .get(Table::RemoteParticipants, RejectCause::TableFull),
        1
    );
    g.check_invariants().unwrap();
}

#[test]
fn new_matches_counted_before_anything_is_written() {
    let caps = Capacities {
        matches: 3,
        ..Default::default()
    };
    let mut g = two_party(GraphConfig {
        capacities: caps,
        ..Default::default()
    });
    for e in 1..=2 {
        g.admit_endpoint(ep(2, e, EndpointKind::Reader, "t"))
            .unwrap();
    }
    let w1 = g
        .add_local_endpoint(ep(1, 1, EndpointKind::Writer, "t"))
        .unwrap();
    assert_eq!(w1.matched.len(), 2);
    let before = snapshot(&g);
    // A second writer would add 2 matches: 4 > 3.
    let err = g
        .add_local_endpoint(ep(1, 2, EndpointKind::Writer, "t"))
        .unwrap_err();
    assert_eq!(
        err,
        AdmitError::MatchCapacity {
            table: Table::LocalEndpoints,
            would_be: 4,
            capacity: 3
        }
    );
    assert_eq!(before, snapshot(&g));
    assert!(g.endpoint_id(&guid(1, 2)).is_none());
    // A writer on another topic creates no match and is admitted, with the
    // very next id.
    let w3 = g
        .add_local_endpoint(ep(1, 3, EndpointKind::Writer, "u"))
        .unwrap();
    assert_eq!(w3.id, EndpointId(w1.id.0 + 1));
    // Replacing it onto topic "t" would add 2 matches: refused, unchanged.
    let err = g
        .add_local_endpoint(ep(1, 3, EndpointKind::Writer, "t"))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::MatchCapacity);
    assert_eq!(g.endpoint(w3.id).unwrap().topic.as_str(), "u");
    assert_eq!(
        g.rejections()
            .get(Table::LocalEndpoints, RejectCause::MatchCapacity),
        2
    );
    g.check_invariants().unwrap();
}

#[test]
fn replacement_with_new_policies_rematches() {
    let mut g = two_party(GraphConfig::default());
    let w = g
        .add_local_endpoint(ep(1, 1, EndpointKind::Writer, "t"))
        .unwrap();
    let r = g
        .admit_endpoint(ep(2, 1, EndpointKind::Reader, "t"))
        .unwrap();
    assert!(g.is_matched(w.id, r.id));
    // The reader now asks for more than the writer offers.
    let mut strict = ep(2, 1, EndpointKind::Reader, "t");
    strict.qos.durability = DurabilityKind::TransientLocal;
    let a = g.admit_endpoint(strict.clone()).unwrap();
    assert_eq!(a.unmatched, vec![w.id]);
    assert!(!g.is_matched(w.id, r.id));
    let why = g.why_not_matched(&guid(1, 1), &guid(2, 1)).unwrap_err();
    assert_eq!(why.len(), 1);
    assert!(matches!(
        why[0],
        Incompatibility::Qos {
            rule: QosRule::Durability,
            ..
        }
    ));
    assert_eq!(why[0].policy(), Some(Policy::Durability));
    // The writer raises its offer: matched again.
    let mut w2 = ep(1, 1, EndpointKind::Writer, "t");
    w2.qos.durability = DurabilityKind::TransientLocal;
    let a = g.add_local_endpoint(w2).unwrap();
    assert_eq!(a.matched, vec![r.id]);
    // Changing kind under the same GUID is refused.
    let err = g
        .admit_endpoint(ep(2, 1, EndpointKind::Writer, "t"))
        .unwrap_err();
    assert_eq!(err.cause(), RejectCause::KindChanged);
    // Moving topics drops the match and the empty topic.
    let mut moved = strict;
    moved.topic = TopicName::new("v").unwrap();
    let a = g.admit_endpoint(moved).unwrap();
    assert_eq!(a.unmatched, vec![w.id]);
    assert_eq!(g.match_count(), 0);
    g.check_invariants().unwrap();
}

#[test]
fn expiry_removes_silent_participant_with_all_endpoints_and_matches() {
    let mut g = two_party(GraphConfig::default());
    g.admit_participant(part(3, 5000), Time::from_millis(0))
        .unwrap();
    let mut writers = Vec::new();
    for e in 0..3 {
        writers.push(
            g.add_local_endpoint(ep(1, e, EndpointKind::Writer, &format!("t{e}")))
                .unwrap()
                .id,
        );
    }
    for e in 0..3 {
        for p in [2, 3] {
            g.admit_endpoint(ep(p, e, EndpointKind::Reader, &format!("t{e}")))
                .unwrap();
        }
    }
    assert_eq!(g.match_count(), 6);
    // Participant 2 (lease 1 s) renews at 600 ms, then goes silent.
    g.admit_participant(part(2, 1000), Time::from_millis(600))
        .unwrap();
    assert_eq!(g.expire(Time::from_millis(1500)), Removal::default());
    let gone = g.expire(Time::from_millis(1601));
    assert_eq!(gone.participants, vec![prefix(2)]);
    assert_eq!(gone.endpoints.len(), 3);
    assert!(gone.endpoints.iter().all(|(_, gd)| gd.prefix == prefix(2)));
    assert_eq!(gone.matches, 3);
    assert_eq!(g.match_count(), 3);
    assert!(!g.knows_participant(&prefix(2)));
    assert_eq!(g.occupancy(Table::RemoteReaders), 3);
    assert_eq!(g.occupancy(Table::RemoteParticipants), 1);
    for w in &writers {
        assert_eq!(g.readers_of(*w).count(), 1);
    }
    g.check_invariants().unwrap();
    // Local participants never expire.
    let gone = g.expire(Time::from_millis(1_000_000));
    assert_eq!(gone.participants, vec![prefix(3)]);
    assert!(g.knows_participant(&prefix(1)));
    assert_eq!(g.match_count(), 0);
    g.check_invariants().unwrap();
}

#[test]
fn a_renewed_lease_runs_from_the_renewal_with_the_admitted_cap_and_never_for_a_local_one() {
    let mut cfg = GraphConfig::default();
    cfg.capacities.max_lease = QosDuration::from_millis(2000);
    let mut g = DiscoveryGraph::new(cfg);
    g.add_local_participant(part(1, 1000)).unwrap();
    // Announces 5 s, admitted with the 2 s cap.
    g.admit_participant(part(3, 5000), Time::from_millis(0))
        .unwrap();
    assert_eq!(
        g.participant_expiry(&prefix(3)),
        Some(Time::from_millis(2000))
    );
    assert_eq!(
        g.renew_participant(&prefix(3), Time::from_millis(1500)),
        Some(Time::from_millis(3500))
    );
    assert_eq!(g.expire(Time::from_millis(3000)), Removal::default());
    assert_eq!(
        g.expire(Time::from_millis(3501)).participants,
        vec![prefix(3)]
    );
    // Unknown and local participants are not renewed.
    assert_eq!(
        g.renew_participant(&prefix(3), Time::from_millis(4000)),
        None
    );
    assert_eq!(
        g.renew_participant(&prefix(1), Time::from_millis(4000)),
        None
    );
    assert_eq!(g.participant_expiry(&prefix(1)), Some(Time(u64::MAX)));
    g.check_invariants().unwrap();
}

#[test]
fn removing_endpoints_keeps_other_matches_and_links() {
    let mut g = two_party(GraphConfig::default());
    let mut ws = Vec::new();
    for e in 0..4 {
        ws.push(
            g.add_local_endpoint(ep(1, e, EndpointKind::Writer, "t"))
                .unwrap()
                .id,
        );
    }
    let mut rs = Vec::new();
    for e in 0..4 {
        rs.push(
            g.admit_endpoint(ep(2, e, EndpointKind::Reader, "t"))
                .unwrap()
                .id,
        );
    }
    assert_eq!(g.match_count(), 16);
    assert_eq!(g.remove_endpoint(&guid(2, 1)), Some(4));
    assert_eq!(g.remove_endpoint(&guid(1, 0)), Some(3));
    assert_eq!(g.remove_endpoint(&guid(1, 0)), None);
    g.check_invariants().unwrap();
    assert_eq!(g.match_count(), 9);
    assert_eq!(g.endpoint(rs[1]), None);
    let mut of_w3: Vec<_> = g.readers_of(ws[3]).collect();
    of_w3.sort();
    assert_eq!(of_w3, vec![rs[0], rs[2], rs[3]]);
    let removal = g.remove_participant(&prefix(2)).unwrap();
    assert_eq!(removal.matches, 9);
    assert_eq!(g.match_count(), 0);
    g.check_invariants().unwrap();
}

/// Same operations, two graphs (each with its own random hash seeds): the
/// same ids, the same match lists in the same order.
#[test]
fn deterministic_across_instances() {
    let build = || {
        let mut g = DiscoveryGraph::new(GraphConfig::default());
        g.add_local_participant(part(1, 1000)).unwrap();
        for p in 2..6 {
            g.admit_participant(part(p, 1000), Time(0)).unwrap();
        }
        for i in 0..200u16 {
            let p = 1 + (i % 5) as u8;
            let kind = if i % 3 == 0 {
                EndpointKind::Writer
            } else {
                EndpointKind::Reader
            };
            let info = ep(p, i, kind, &format!("t{}", i % 7));
            if p == 1 {
                g.add_local_endpoint(info).unwrap();
            } else {
                g.admit_endpoint(info).unwrap();
            }
            if i % 11 == 0 {
                g.remove_endpoint(&guid(1 + ((i / 2) % 5) as u8, i / 2));
            }
        }
        g.remove_participant(&prefix(3));
        g.endpoints()
            .into_iter()
            .map(|id| {
                let mut v: Vec<_> = g.readers_of(id).collect();
                v.extend(g.writers_of(id));
                (id, v)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(build(), build());
}

mod model {
    //! Random operation sequences against a naive model: a list of admitted
    //! records, with the expected match set recomputed from scratch by
    //! comparing every pair.
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone)]
    enum Op {
        Participant(u8, u64),
        Endpoint {
            p: u8,
            e: u16,
            writer: bool,
            topic: u8,
            part: u8,
            rel: bool,
            dur: bool,
        },
        RemoveEndpoint(u8, u16),
        RemoveParticipant(u8),
        Expire(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (2u8..6, 0u64..50).prop_map(|(p, t)| Op::Participant(p, t)),
            6 => (1u8..6, 0u16..12, any::<bool>(), 0u8..3, 0u8..4, any::<bool>(), any::<bool>())
                .prop_map(|(p, e, writer, topic, part, rel, dur)| Op::Endpoint { p, e, writer, topic, part, rel, dur }),
            1 => (1u8..6, 0u16..12).prop_map(|(p, e)| Op::RemoveEndpoint(p, e)),
            1 => (2u8..6).prop_map(Op::RemoveParticipant),
            1 => (0u64..80).prop_map(Op::Expire),
        ]
    }

    fn info(
        p: u8,
        e: u16,
        writer: bool,
        topic: u8,
        part: u8,
        rel: bool,
        dur: bool,
    ) -> EndpointInfo {
        let kind = if writer {
            EndpointKind::Writer
        } else {
            EndpointKind::Reader
        };
        let mut i = ep(p, e, kind, &format!("t{topic}"));
        i.partitions = match part {
            0 => Partitions::default_partition(),
            1 => Partitions::new(["a"]).unwrap(),
            2 => Partitions::new(["a*"]).unwrap(),
            _ => Partitions::new(["ab", "*"]).unwrap(),
        };
        i.qos.reliability.kind = if rel {
            ReliabilityKind::Reliable
        } else {
            ReliabilityKind::BestEffort
        };
        i.qos.durability = if dur {
            DurabilityKind::TransientLocal
        } else {
            DurabilityKind::Volatile
        };
        i
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn graph_agrees_with_naive_model(ops in proptest::collection::vec(op(), 1..120)) {
            let caps = Capacities { remote_writers: 12, remote_readers: 12, matches: 40, ..Default::default() };
            let mut g = DiscoveryGraph::new(GraphConfig { capacities: caps, scope: MatchScope::LocalOnly });
            g.add_local_participant(part(1, 10)).unwrap();
            // Model: participant -> expiry; guid -> record.
            let mut parts: BTreeMap<u8, u64> = BTreeMap::new();
            let mut eps: BTreeMap<Guid, EndpointInfo> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Participant(p, t) => {
                        if g.admit_participant(part(p, 10), Time(t)).is_ok() {
                            parts.insert(p, t + QosDuration::from_millis(10).as_nanos());
                        }
                    }
                    Op::Endpoint { p, e, writer, topic, part, rel, dur } => {
                        let i = info(p, e, writer, topic, part, rel, dur);
                        let res = if p == 1 { g.add_local_endpoint(i.clone()) } else { g.admit_endpoint(i.clone()) };
                        let known_part = p == 1 || parts.contains_key(&p);
                        match res {
                            Ok(_) => { prop_assert!(known_part); eps.insert(i.guid, i); }
                            Err(err) => {
                                if !known_part {
                                    prop_assert_eq!(err.cause(), RejectCause::UnknownParticipant);
                                }
                            }
                        }
                    }
                    Op::RemoveEndpoint(p, e) => {
                        let had = eps.remove(&guid(p, e)).is_some();
                        prop_assert_eq!(g.remove_endpoint(&guid(p, e)).is_some(), had);
                    }
                    Op::RemoveParticipant(p) => {
                        let had = parts.remove(&p).is_some();
                        eps.retain(|gd, _| gd.prefix != prefix(p));
                        prop_assert_eq!(g.remove_participant(&prefix(p)).is_some(), had);
                    }
                    Op::Expire(t) => {
                        let dead: BTreeSet<u8> = parts.iter().filter(|(_, &exp)| exp < t).map(|(&p, _)| p).collect();
                        parts.retain(|p, _| !dead.contains(p));
                        eps.retain(|gd, _| !dead.iter().any(|&p| gd.prefix == prefix(p)));
                        let removal = g.expire(Time(t));
                        let got: BTreeSet<u8> = removal.participants.iter().map(|p| p.0[0]).collect();
                        prop_assert_eq!(got, dead);
                    }
                }
                g.check_invariants().map_err(TestCaseError::fail)?;
                // Same endpoints as the model.
                let known: BTreeSet<Guid> = g.endpoints().into_iter().map(|id| g.endpoint(id).unwrap().guid).collect();
                prop_assert_eq!(&known, &eps.keys().copied().collect::<BTreeSet<_>>());
                // Same matches as comparing every pair from scratch.
                let mut expect = BTreeSet::new();
                for w in eps.values().filter(|i| i.kind == EndpointKind::Writer) {
                    for r in eps.values().filter(|i| i.kind == EndpointKind::Reader) {
                        let local = w.guid.prefix == prefix(1) || r.guid.prefix == prefix(1);
                        if local && matching::compatible(w, r) {
                            expect.insert((w.guid, r.guid));
                        }
                    }
                }
                let got: BTreeSet<(Guid, Guid)> = g.matches().into_iter()
                    .map(|(w, r)| (g.endpoint(w).unwrap().guid, g.endpoint(r).unwrap().guid))
                    .collect();
                prop_assert_eq!(got, expect);
            }
        }
    }
}

/// A remote participant's own writer and reader are not matched in the relay scope: they
/// meet on their own node, and one participant cannot fill the match table with its own
/// pairs (issue 24, finding 7). Across participants they are.
#[test]
fn one_remote_participants_own_pairs_are_not_matched_across_participants() {
    let mut g = two_party(GraphConfig {
        scope: MatchScope::AcrossParticipants,
        ..Default::default()
    });
    g.admit_participant(part(3, 1000), Time(0)).unwrap();
    let w = g
        .admit_endpoint(ep(2, 1, EndpointKind::Writer, "t"))
        .unwrap();
    let r_same = g
        .admit_endpoint(ep(2, 2, EndpointKind::Reader, "t"))
        .unwrap();
    assert_eq!(g.match_count(), 0, "one participant's own pair");
    assert_eq!(
        g.explain(w.id, r_same.id),
        Err(vec![Incompatibility::SameRemoteParticipant])
    );
    let r_other = g
        .admit_endpoint(ep(3, 1, EndpointKind::Reader, "t"))
        .unwrap();
    assert_eq!(r_other.matched, vec![w.id], "across participants");
    assert_eq!(g.match_count(), 1);
    g.check_invariants().unwrap();
}
