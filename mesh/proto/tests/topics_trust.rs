//! Property: without identity, Discovery frames whose origin is neither the sending link's
//! peer nor behind it change nothing (issue 24). A node V is linked to an honest neighbour A
//! (behind which sits W) and to a stranger S; S sends any sequence of frames it likes, under
//! any origin, seq, cycle and entries. Afterwards V's own endpoints and V's view of A's and
//! W's endpoints are exactly what they were, and W's next genuine frame is still taken.

use bytes::Bytes;
use proptest::prelude::*;
use shoal_discovery::qos::{EndpointQos, QosDuration};
use shoal_discovery::record::{encode_endpoint, encode_participant};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, ParticipantInfo, Partitions, TopicName,
    TypeHash, TypeName,
};
use shoal_proto::topics::core::prefix_of;
use shoal_proto::topics::{TopicsConfig, TopicsCore, TopicsInit, TreePlanner};
use shoal_proto::wire::{Discovery, DiscoveryEntry, Membership};
use shoal_proto::{LinkId, MemberGraph, PeerId};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const V: u8 = 1;
const A: u8 = 2;
const W: u8 = 3;
const S: u8 = 9;
const LA: LinkId = LinkId(10);
const LS: LinkId = LinkId(11);

fn id(n: u8) -> PeerId {
    PeerId([n; 16])
}

/// An id sharing `n`'s 12-byte prefix, with other last bytes.
fn twin(n: u8, tail: u32) -> PeerId {
    let mut p = id(n);
    p.0[12..].copy_from_slice(&tail.to_be_bytes());
    p
}

fn participant(prefix: GuidPrefix) -> Bytes {
    let mut p = ParticipantInfo::new(prefix, "p");
    p.lease_duration = QosDuration::from_secs(30);
    encode_participant(&p).unwrap()
}

fn endpoint(prefix: GuidPrefix, e: u32, kind: EndpointKind, topic: &str, part: &str) -> Bytes {
    let mut info = EndpointInfo::new(
        Guid::new(prefix, EntityId(e.to_be_bytes())),
        kind,
        TopicName::new(topic).unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([7; 16]),
    );
    info.qos = EndpointQos::default_for(kind);
    info.partitions = Partitions::new([part]).unwrap();
    encode_endpoint(&info).unwrap()
}

fn guid(prefix: GuidPrefix, e: u32) -> [u8; 16] {
    let mut g = [0; 16];
    g[..12].copy_from_slice(&prefix.0);
    g[12..].copy_from_slice(&e.to_be_bytes());
    g
}

/// V's membership view: V–A, A–W, V–S, every record known.
fn membership(now: Instant) -> MemberGraph {
    let mut m = MemberGraph::new(
        id(V),
        Duration::from_secs(2),
        Duration::from_secs(60),
        64,
        1,
        now,
    );
    m.neighbour_up(id(A), LA, 1, now);
    m.neighbour_up(id(S), LS, 1, now);
    for (o, ns) in [(A, vec![id(V), id(W)]), (W, vec![id(A)]), (S, vec![id(V)])] {
        let rec = Membership {
            origin: id(o),
            version: 5,
            neighbours: ns,
        };
        m.on_record(LinkId(1), &rec, 1, now);
    }
    m
}

struct World {
    v: TopicsCore,
    m: MemberGraph,
    now: Instant,
    w_seq: u64,
    a_seq: u64,
}

impl World {
    fn new() -> World {
        let now = Instant::now();
        let mut v = TopicsCore::new(
            TopicsInit {
                me: id(V),
                cfg: TopicsConfig::default(),
                ttl: 8,
                shards: 1,
                listen_addrs: vec!["10.0.0.1:7000".parse().unwrap()],
                wall_ms: 1_000_000,
                name: String::new(),
                entity_seed: 1,
                planner: Box::new(TreePlanner::new(1024)),
                reverse_path: true,
                relay_redundancy: 2,
            },
            now,
        )
        .unwrap();
        v.link_up(LA, id(A), true);
        v.link_up(LS, id(S), true);
        let q = |k| EndpointQos::default_for(k);
        v.create_endpoint(
            EndpointKind::Writer,
            "t",
            "T",
            [7; 16],
            q(EndpointKind::Writer),
            &["p".into()],
            now,
        )
        .unwrap();
        v.create_endpoint(
            EndpointKind::Reader,
            "t",
            "T",
            [7; 16],
            q(EndpointKind::Reader),
            &["p".into()],
            now,
        )
        .unwrap();
        let m = membership(now);
        let mut w = World {
            v,
            m,
            now,
            w_seq: 5_000,
            a_seq: 7_000,
        };
        w.settle();
        w.honest(
            W,
            vec![endpoint(
                prefix_of(&id(W)),
                0x102,
                EndpointKind::Writer,
                "t",
                "p",
            )],
        );
        w.honest(
            A,
            vec![endpoint(
                prefix_of(&id(A)),
                0x107,
                EndpointKind::Reader,
                "t",
                "p",
            )],
        );
        w
    }

    /// Drains V's outputs and plans its routes (the view shows only what is routed; a
    /// plan waits for `route_plan_interval`, so a little time passes).
    fn settle(&mut self) {
        while self.v.poll_output().is_some() {}
        while self.v.poll_event().is_some() {}
        self.now += Duration::from_millis(20);
        let _ = self.v.routes_due(&self.m, self.now);
    }

    /// A genuine frame of `origin` (A or W), arriving from A.
    fn honest(&mut self, origin: u8, recs: Vec<Bytes>) {
        let seq = if origin == W {
            self.w_seq += 1;
            self.w_seq
        } else {
            self.a_seq += 1;
            self.a_seq
        };
        let mut entries = vec![DiscoveryEntry::Record(participant(prefix_of(&id(origin))))];
        entries.extend(recs.into_iter().map(DiscoveryEntry::Record));
        let f = Discovery {
            origin: id(origin),
            seq,
            ttl: 4,
            cycle: 0,
            part: 0,
            parts: 0,
            entries,
        };
        self.v.on_discovery(LA, f, false, self.now);
        self.settle();
    }

    /// What must not move: V's endpoints, and V's view of A's and W's (GUID, topic,
    /// partitions, node).
    fn guarded(&mut self) -> BTreeSet<String> {
        let view = self.v.view();
        let guarded: BTreeSet<[u8; 12]> = [V, A, W].iter().map(|n| prefix_of(&id(*n)).0).collect();
        view.endpoints
            .iter()
            .filter(|e| guarded.contains(&<[u8; 12]>::try_from(&e.guid[..12]).unwrap()))
            .map(|e| {
                format!(
                    "{:?}",
                    (e.guid, e.kind, &e.topic, &e.partitions, e.local, e.node)
                )
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
enum Entry {
    Participant(u8, u32),
    Endpoint(u8, u32, u32, bool, bool),
    Withdraw(u8, u32),
}

fn prefix_pick(who: u8, tail: u32) -> GuidPrefix {
    match who % 5 {
        0 => prefix_of(&id(V)),
        1 => prefix_of(&id(A)),
        2 => prefix_of(&id(W)),
        3 => prefix_of(&id(S)),
        _ => prefix_of(&twin(S, tail)),
    }
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        (any::<u8>(), any::<u32>()).prop_map(|(w, t)| Entry::Participant(w, t)),
        (
            any::<u8>(),
            any::<u32>(),
            0u32..4,
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(w, t, e, k, tp)| Entry::Endpoint(w, t, e, k, tp)),
        (any::<u8>(), 0u32..0x200).prop_map(|(w, e)| Entry::Withdraw(w, e)),
    ]
}

#[derive(Debug, Clone)]
struct Attack {
    origin: (u8, u32),
    seq: u64,
    cycle: (u32, u16, u16),
    entries: Vec<Entry>,
}

fn attack() -> impl Strategy<Value = Attack> {
    (
        (0u8..7, any::<u32>()),
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            5_000u64..5_100,
            7_000u64..7_100,
            any::<u64>()
        ],
        (0u32..3, 0u16..3, 0u16..3),
        proptest::collection::vec(entry(), 0..6),
    )
        .prop_map(|(origin, seq, cycle, entries)| Attack {
            origin,
            seq,
            cycle,
            entries,
        })
}

fn origin_of((k, tail): (u8, u32)) -> PeerId {
    match k {
        0 => id(W),
        1 => id(A),
        2 => twin(V, tail),
        3 => twin(W, tail),
        4 => twin(A, tail),
        5 => id(S),
        _ => PeerId({
            let mut b = [0xee; 16];
            b[12..].copy_from_slice(&tail.to_be_bytes());
            b
        }),
    }
}

fn build(a: &Attack) -> Discovery {
    let entries = a
        .entries
        .iter()
        .map(|e| match *e {
            Entry::Participant(w, t) => DiscoveryEntry::Record(participant(prefix_pick(w, t))),
            Entry::Endpoint(w, t, e, writer, topic) => {
                let kind = if writer {
                    EndpointKind::Writer
                } else {
                    EndpointKind::Reader
                };
                let e = if writer {
                    0x100 + e * 8 + 2
                } else {
                    0x100 + e * 8 + 7
                };
                let topic = if topic { "t" } else { "u" };
                DiscoveryEntry::Record(endpoint(prefix_pick(w, t), e, kind, topic, "p"))
            }
            Entry::Withdraw(w, e) => DiscoveryEntry::Withdraw(guid(prefix_pick(w, 0), e)),
        })
        .collect();
    Discovery {
        origin: origin_of(a.origin),
        seq: a.seq,
        ttl: 4,
        cycle: a.cycle.0,
        part: a.cycle.1,
        parts: a.cycle.2,
        entries,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn frames_from_off_the_origins_paths_change_nothing(attacks in proptest::collection::vec(attack(), 1..24)) {
        let mut w = World::new();
        let before = w.guarded();
        prop_assert!(before.len() == 4, "{before:?}");
        for a in &attacks {
            // The stranger's frames, some a second apart (leases run, cycles expire).
            w.v.on_discovery(LS, build(a), false, w.now);
            w.settle();
            if a.seq % 3 == 0 {
                w.now += Duration::from_secs(1);
                w.v.handle_timeout(w.now);
                w.settle();
            }
        }
        prop_assert_eq!(&w.guarded(), &before);
        // W is still heard: its next genuine frame brings a new endpoint.
        w.honest(W, vec![endpoint(prefix_of(&id(W)), 0x1f2, EndpointKind::Writer, "t", "p")]);
        prop_assert_eq!(w.guarded().len(), before.len() + 1);
    }
}
