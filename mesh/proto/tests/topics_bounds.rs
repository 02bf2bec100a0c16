//! The discovery bounds through the topics core's inputs (issue 24, findings 5 and 7):
//! a remote lease is capped at `max_lease`, an endpoint over `max_partition_bytes` is a
//! counted refusal that keeps the link, and the issue's worst Discovery frame is refused
//! before it costs any matching work.

use shoal_discovery::graph::{RejectCause, Table};
use shoal_discovery::qos::QosDuration;
use shoal_discovery::record::{encode_endpoint, encode_participant};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, ParticipantInfo, Partitions, TopicName, TypeHash,
    TypeName,
};
use shoal_proto::topics::core::prefix_of;
use shoal_proto::topics::{TopicsConfig, TopicsCore, TopicsInit, TopicsOutput, TreePlanner};
use shoal_proto::wire::{Discovery, DiscoveryEntry};
use shoal_proto::{LinkId, PeerId};
use std::time::{Duration, Instant};

const STRANGER: PeerId = PeerId([2; 16]);
const LINK: LinkId = LinkId(7);

fn core(cfg: TopicsConfig, now: Instant) -> TopicsCore {
    let mut c = TopicsCore::new(
        TopicsInit {
            me: PeerId([1; 16]),
            cfg,
            ttl: 8,
            shards: 2,
            listen_addrs: vec!["10.0.0.1:7000".parse().unwrap()],
            wall_ms: 1_000_000,
            name: String::new(),
            entity_seed: 1 << 8,
            planner: Box::new(TreePlanner::new(1024)),
            reverse_path: true,
            relay_redundancy: 2,
        },
        now,
    )
    .unwrap();
    c.link_up(LINK, STRANGER, true);
    c
}

fn participant(lease: QosDuration) -> ParticipantInfo {
    let mut p = ParticipantInfo::new(prefix_of(&STRANGER), "stranger");
    p.lease_duration = lease;
    p
}

fn endpoint(e: u8, kind: EndpointKind, parts: Vec<String>) -> EndpointInfo {
    let mut i = EndpointInfo::new(
        Guid::new(prefix_of(&STRANGER), EntityId([0, 0, e, 2])),
        kind,
        TopicName::new("t").unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([9; 16]),
    );
    i.partitions = Partitions::new(parts).unwrap();
    i
}

fn frame(seq: u64, p: &ParticipantInfo, eps: &[EndpointInfo]) -> Discovery {
    let mut entries = vec![DiscoveryEntry::Record(encode_participant(p).unwrap())];
    entries.extend(
        eps.iter()
            .map(|e| DiscoveryEntry::Record(encode_endpoint(e).unwrap())),
    );
    Discovery {
        origin: STRANGER,
        seq,
        ttl: 1,
        cycle: 0,
        part: 0,
        parts: 0,
        entries,
    }
}

fn closed_links(c: &mut TopicsCore) -> usize {
    std::iter::from_fn(|| c.poll_output())
        .filter(|o| matches!(o, TopicsOutput::CloseLink(_)))
        .count()
}

#[test]
fn an_infinite_lease_expires_after_max_lease() {
    let t0 = Instant::now();
    let cfg = TopicsConfig {
        participant_lease: Duration::from_secs(2),
        max_lease: Duration::from_secs(4),
        ..TopicsConfig::default()
    };
    let mut c = core(cfg, t0);
    let p = participant(QosDuration::INFINITE);
    let w = endpoint(1, EndpointKind::Writer, vec![]);
    c.on_discovery(LINK, frame(1, &p, &[w]), false, t0);
    // Its link goes (while up, the link would hold its lease: `cadence`).
    c.link_down(LINK);
    let g = c.graph();
    assert_eq!(
        g.participant(&p.prefix).unwrap().lease_duration,
        QosDuration::from_secs(4)
    );
    assert_eq!(g.endpoints_of(&p.prefix).len(), 1);
    c.handle_timeout(t0 + Duration::from_millis(3900));
    assert!(c.graph().knows_participant(&p.prefix), "within its lease");
    // Silent past the cap (expiry runs once per announce period): gone with its
    // endpoint, though it announced "never expire".
    c.handle_timeout(t0 + Duration::from_millis(5000));
    assert!(!c.graph().knows_participant(&p.prefix));
    assert_eq!(c.graph().endpoint_count(), 0);
    assert_eq!(c.stats().participants_expired, 1);
}

#[test]
fn an_endpoint_over_the_partition_cap_is_refused_and_the_link_kept() {
    let t0 = Instant::now();
    let mut c = core(TopicsConfig::default(), t0);
    let p = participant(QosDuration::from_secs(10));
    // 2304 bytes of names: decodes fine (an older or differently configured peer may
    // send it), over this node's 2048.
    let big = endpoint(1, EndpointKind::Writer, vec!["x".repeat(256); 9]);
    c.on_discovery(LINK, frame(1, &p, &[big]), false, t0);
    assert_eq!(closed_links(&mut c), 0, "a refusal, not a protocol error");
    let g = c.graph();
    assert!(g.knows_participant(&p.prefix));
    assert_eq!(g.endpoint_count(), 0);
    assert_eq!(
        g.rejections()
            .get(Table::RemoteWriters, RejectCause::PartitionBytes),
        1
    );
    // The same node's endpoints within the cap still get in.
    let ok = endpoint(2, EndpointKind::Writer, vec!["x".repeat(256); 8]);
    c.on_discovery(LINK, frame(2, &p, &[ok]), false, t0);
    assert_eq!(c.graph().endpoint_count(), 1);
}

/// The issue's frame: one participant, five writers with 64 names of 256 bytes and five
/// readers with 64 patterns `*aaaa…ab*` (~150 ms per pair before). Under the default cap
/// every endpoint is refused before it is compared with anything.
#[test]
fn the_issues_worst_frame_costs_no_matching_work() {
    let t0 = Instant::now();
    let mut c = core(TopicsConfig::default(), t0);
    let p = participant(QosDuration::from_secs(10));
    let names: Vec<String> = (0..64)
        .map(|i| {
            let s = format!("-{i}");
            "a".repeat(256 - s.len()) + &s
        })
        .collect();
    let patterns: Vec<String> = ('b'..='z')
        .chain('A'..='Z')
        .chain("!#%&+,.:;=@_~".chars())
        .map(|c| format!("*{}{c}*", "a".repeat(253)))
        .collect();
    let mut eps = Vec::new();
    for e in 0..5 {
        eps.push(endpoint(e, EndpointKind::Writer, names.clone()));
        eps.push(endpoint(10 + e, EndpointKind::Reader, patterns.clone()));
    }
    let f = frame(1, &p, &eps);
    assert!(f.encoded_len() > 120_000, "{}", f.encoded_len());
    c.on_discovery(LINK, f, false, t0);
    assert_eq!(closed_links(&mut c), 0);
    let g = c.graph();
    assert_eq!(g.endpoint_count(), 0);
    assert_eq!(g.match_work().units(), 0);
    let refused = g
        .rejections()
        .get(Table::RemoteWriters, RejectCause::PartitionBytes)
        + g.rejections()
            .get(Table::RemoteReaders, RejectCause::PartitionBytes);
    assert_eq!(refused, 10);
}
