//! Unit tests of the topics core on structs, in virtual time.
//!
//! One test per behaviour of the brief plus the small in-memory mesh (`Net`) its routing
//! tests share; the million-record admission test and its record templates are in
//! `tests/admission.rs`, cadence, catch-up and trust in their own files.

use super::*;
use crate::topics::config::MIN_DISCOVERY_FRAME_BYTES;
use crate::wire::DiscoveryEntry;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_discovery::graph::RejectCause;
use shoal_discovery::matching::QosRule;
use shoal_discovery::qos::{History, Limit, ReliabilityKind};
use shoal_discovery::record::{encode_endpoint, encode_participant};
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);

fn id(n: u8) -> PeerId {
    PeerId([n; 16])
}

fn cfg() -> TopicsConfig {
    TopicsConfig {
        participant_lease: Duration::from_secs(3),
        ..TopicsConfig::default()
    }
}

fn core_with(n: u8, cfg: TopicsConfig, now: Instant) -> TopicsCore {
    TopicsCore::new(
        TopicsInit {
            me: id(n),
            cfg,
            ttl: 8,
            shards: 2,
            listen_addrs: vec![format!("10.0.0.{n}:7000").parse().unwrap()],
            wall_ms: 1_000_000,
            name: String::new(),
            entity_seed: u32::from(n) << 8,
            planner: Box::new(TreePlanner::new(1024)),
            reverse_path: true,
            relay_redundancy: 2,
        },
        now,
    )
    .unwrap()
}

fn core(n: u8, now: Instant) -> TopicsCore {
    core_with(n, cfg(), now)
}

fn writer(c: &mut TopicsCore, topic: &str, parts: &[&str], now: Instant) -> EndpointGuid {
    endpoint(
        c,
        EndpointKind::Writer,
        topic,
        EndpointQos::writer_default(),
        parts,
        now,
    )
}

fn reader(c: &mut TopicsCore, topic: &str, parts: &[&str], now: Instant) -> EndpointGuid {
    endpoint(
        c,
        EndpointKind::Reader,
        topic,
        EndpointQos::reader_default(),
        parts,
        now,
    )
}

fn endpoint(
    c: &mut TopicsCore,
    kind: EndpointKind,
    topic: &str,
    qos: EndpointQos,
    parts: &[&str],
    now: Instant,
) -> EndpointGuid {
    let parts: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
    c.create_endpoint(kind, topic, "T", [7; 16], qos, &parts, now)
        .unwrap()
}

fn floods(c: &mut TopicsCore) -> Vec<(Discovery, Option<LinkId>)> {
    let mut v = Vec::new();
    while let Some(o) = c.poll_output() {
        if let TopicsOutput::Flood { frame, except } = o {
            v.push((frame, except));
        }
    }
    v
}

fn events(c: &mut TopicsCore) -> Vec<TopicEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// Node `me`'s membership view of a mesh of `n` nodes (ids 1..=n) with these links
/// (node indices from 0, link ids from 100 in order, as [`Net`] numbers them).
fn membership(me: usize, n: usize, edges: &[(usize, usize)], now: Instant) -> MemberGraph {
    let mut m = MemberGraph::new(id(me as u8 + 1), SEC * 2, SEC * 8, 64, 1, now);
    for (k, &(a, b)) in edges.iter().enumerate() {
        let l = LinkId(100 + k as u64);
        if a == me {
            m.neighbour_up(id(b as u8 + 1), l, 1, now);
        } else if b == me {
            m.neighbour_up(id(a as u8 + 1), l, 1, now);
        }
    }
    for x in (0..n).filter(|x| *x != me) {
        let mut neighbours: Vec<PeerId> = edges
            .iter()
            .filter_map(|&(a, b)| match (a == x, b == x) {
                (true, _) => Some(id(b as u8 + 1)),
                (_, true) => Some(id(a as u8 + 1)),
                _ => None,
            })
            .collect();
        neighbours.sort_unstable();
        let rec = crate::wire::Membership {
            origin: id(x as u8 + 1),
            version: 5,
            neighbours,
        };
        m.on_record(LinkId(1), &rec, 1, now);
    }
    m
}

fn records(f: &Discovery) -> Vec<Bytes> {
    f.entries
        .iter()
        .filter_map(|e| match e {
            DiscoveryEntry::Record(b) => Some(b.clone()),
            DiscoveryEntry::Withdraw(_) | DiscoveryEntry::Signature(_) => None,
        })
        .collect()
}

use crate::MemberGraph;

/// The test peer behind link 1, a capable neighbour that relays every origin's frames.
const RELAY: u8 = 200;

/// Hands `f` to `c` on link 1 (brought up first), unsigned.
fn deliver(c: &mut TopicsCore, f: Discovery, now: Instant) {
    c.link_up(LinkId(1), id(RELAY), true);
    c.on_discovery(LinkId(1), f, false, now);
}

#[test]
fn create_and_remove_endpoints_announce_at_once_and_match_locally() {
    let now = Instant::now();
    let mut a = core(1, now);
    let w = writer(&mut a, "t", &[], now);
    let r = reader(&mut a, "t", &[], now);
    assert_eq!(&w[..12], &[1; 12], "prefix = PeerId bytes 0..12");
    assert_eq!((w[15], r[15]), (0x02, 0x07), "entity kind bytes");
    assert_ne!(w, r);
    let f = floods(&mut a);
    assert_eq!(f.len(), 2, "one immediate frame per new endpoint");
    for (frame, except) in &f {
        assert_eq!((frame.parts, frame.origin, *except), (0, id(1), None));
        assert_eq!(
            records(frame).len(),
            2,
            "participant record, then the endpoint's"
        );
    }
    assert_eq!(f[1].0.seq, f[0].0.seq + 1);
    assert!(f[0].0.seq > 1_000_000, "seq seeded from the wall clock");
    assert_eq!(
        events(&mut a),
        vec![TopicEvent::Matched {
            writer: w,
            reader: r,
            topic: "t".into(),
            local: LocalSide::Both
        }]
    );
    a.remove_endpoint(r, now).unwrap();
    assert_eq!(
        events(&mut a),
        vec![TopicEvent::Unmatched {
            writer: w,
            reader: r,
            topic: "t".into(),
            local: LocalSide::Both
        }]
    );
    let f = floods(&mut a);
    assert_eq!(f.len(), 1);
    assert!(f[0].0.entries.contains(&DiscoveryEntry::Withdraw(r)));
    assert_eq!(
        a.remove_endpoint(r, now),
        Err(TopicError::UnknownEndpoint(r))
    );
}

#[test]
fn a_self_contradicting_endpoint_is_rejected_on_the_spot() {
    let now = Instant::now();
    let mut a = core(1, now);
    let mut q = EndpointQos::writer_default();
    q.history = History::KeepLast { depth: 10 };
    q.resource_limits.max_samples_per_instance = Limit::AtMost(5);
    let e = a.create_endpoint(EndpointKind::Writer, "t", "T", [7; 16], q, &[], now);
    assert!(matches!(e, Err(TopicError::Qos(_))), "{e:?}");
    let e = a.create_endpoint(
        EndpointKind::Writer,
        "",
        "T",
        [7; 16],
        EndpointQos::writer_default(),
        &[],
        now,
    );
    assert!(matches!(e, Err(TopicError::Invalid(_))), "{e:?}");
    assert!(floods(&mut a).is_empty(), "nothing announced");
    assert_eq!(a.graph().occupancy(Table::LocalEndpoints), 0);
}

#[test]
fn the_cycle_resends_the_same_bytes_packed_with_the_participant_first() {
    let now = Instant::now();
    let mut c = cfg();
    c.max_discovery_frame_bytes = MIN_DISCOVERY_FRAME_BYTES;
    let mut a = core_with(1, c, now);
    // Long topic names make records big enough that a minimal frame holds only some.
    let long = "x".repeat(250);
    for i in 0..200 {
        writer(&mut a, &format!("{long}{i}"), &[], now);
    }
    floods(&mut a);
    a.handle_timeout(now + SEC);
    let first = floods(&mut a);
    assert!(first.len() > 1, "packed into several frames");
    let parts = first.len() as u16;
    let participant = a.announcer.participant_record().clone();
    let mut total = 0;
    for (i, (f, _)) in first.iter().enumerate() {
        assert_eq!(
            (f.part, f.parts, f.cycle),
            (i as u16, parts, first[0].0.cycle)
        );
        assert_eq!(f.seq, first[0].0.seq + i as u64, "seq +1 per frame");
        let recs = records(f);
        assert_eq!(recs[0].as_ptr(), participant.as_ptr(), "participant first");
        let size: usize = DISCOVERY_HEADER_LEN_T + recs.iter().map(|r| 3 + r.len()).sum::<usize>();
        // An identity-mode node appends its signature entry: the frame still fits.
        let signed = size + crate::wire::DISCOVERY_SIGNATURE_ENTRY_LEN;
        assert!(signed <= MIN_DISCOVERY_FRAME_BYTES, "{signed}");
        total += recs.len() - 1;
    }
    assert_eq!(total, 200);
    a.handle_timeout(now + SEC * 2);
    let second = floods(&mut a);
    assert_eq!(second.len(), first.len());
    assert_eq!(second[0].0.cycle, first[0].0.cycle + 1);
    for ((f1, _), (f2, _)) in first.iter().zip(&second) {
        for (r1, r2) in records(f1).iter().zip(records(f2).iter()) {
            assert_eq!(r1.as_ptr(), r2.as_ptr(), "the same Bytes, unchanged");
            assert_eq!(r1, r2);
        }
    }
}

const DISCOVERY_HEADER_LEN_T: usize = crate::topics::config::DISCOVERY_HEADER_LEN;

/// A frame of `origin` with these records.
fn frame(origin: u8, seq: u64, ttl: u8, recs: Vec<Bytes>) -> Discovery {
    Discovery {
        origin: id(origin),
        seq,
        ttl,
        cycle: 0,
        part: 0,
        parts: 0,
        entries: recs.into_iter().map(DiscoveryEntry::Record).collect(),
    }
}

fn participant_rec(n: u8) -> Bytes {
    let mut p = ParticipantInfo::new(prefix_of(&id(n)), "p");
    p.lease_duration = QosDuration::from_secs(3);
    encode_participant(&p).unwrap()
}

fn endpoint_info(prefix: GuidPrefix, e: u32, kind: EndpointKind, topic: &str) -> EndpointInfo {
    let b = e.to_be_bytes();
    EndpointInfo::new(
        Guid::new(prefix, EntityId(b)),
        kind,
        TopicName::new(topic).unwrap(),
        TypeName::new("T").unwrap(),
        TypeHash([7; 16]),
    )
}

#[test]
fn flood_dedup_ttl_and_echoes() {
    let now = Instant::now();
    let mut a = core(1, now);
    a.link_up(LinkId(10), id(2), true);
    a.link_up(LinkId(11), id(3), true);
    a.link_up(LinkId(12), id(4), false);
    assert_eq!(
        a.capable_links().count(),
        2,
        "a plain multimaster link never gets one"
    );
    a.on_discovery(
        LinkId(10),
        frame(5, 100, 3, vec![participant_rec(5)]),
        false,
        now,
    );
    let f = floods(&mut a);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].0.ttl, f[0].0.seq, f[0].1), (2, 100, Some(LinkId(10))));
    assert!(a.graph().knows_participant(&prefix_of(&id(5))));
    // The same frame over another path, and an older one: duplicates.
    a.on_discovery(
        LinkId(11),
        frame(5, 100, 3, vec![participant_rec(5)]),
        false,
        now,
    );
    a.on_discovery(
        LinkId(11),
        frame(5, 99, 3, vec![participant_rec(5)]),
        false,
        now,
    );
    assert!(floods(&mut a).is_empty());
    assert_eq!(a.stats().duplicates, 2);
    // ttl 1: applied, not passed on.
    a.on_discovery(
        LinkId(10),
        frame(6, 1, 1, vec![participant_rec(6)]),
        false,
        now,
    );
    assert!(floods(&mut a).is_empty());
    assert!(a.graph().knows_participant(&prefix_of(&id(6))));
    // Our own frame coming back.
    writer(&mut a, "t", &[], now);
    let own = floods(&mut a).remove(0).0;
    a.on_discovery(LinkId(10), own, false, now);
    assert!(floods(&mut a).is_empty());
    assert_eq!(a.stats().echoes, 1);
}

#[test]
fn the_dedup_table_is_bounded_and_evicts_the_least_recently_refreshed() {
    let now = Instant::now();
    let mut c = cfg();
    c.max_dedup_origins = 2;
    let mut a = core_with(1, c, now);
    deliver(&mut a, frame(5, 10, 1, vec![]), now);
    deliver(&mut a, frame(6, 10, 1, vec![]), now);
    deliver(&mut a, frame(5, 11, 1, vec![]), now); // 5 refreshed: 6 is oldest
    deliver(&mut a, frame(7, 10, 1, vec![]), now); // evicts 6
    assert_eq!((a.dedup_len(), a.stats().dedup_evicted), (2, 1));
    deliver(&mut a, frame(5, 11, 1, vec![]), now);
    assert_eq!(a.stats().duplicates, 1, "5 is still remembered");
    deliver(&mut a, frame(6, 10, 1, vec![]), now);
    assert_eq!(a.stats().duplicates, 1, "6 was forgotten: new again");
}

#[test]
fn a_record_claiming_another_participants_endpoint_is_refused() {
    let now = Instant::now();
    let mut a = core(1, now);
    let foreign = endpoint_info(prefix_of(&id(6)), 0x0102, EndpointKind::Writer, "t");
    let mine = endpoint_info(prefix_of(&id(1)), 0x0102, EndpointKind::Writer, "t");
    let f = frame(
        5,
        1,
        1,
        vec![
            participant_rec(5),
            participant_rec(6),
            encode_endpoint(&foreign).unwrap(),
            encode_endpoint(&mine).unwrap(),
        ],
    );
    deliver(&mut a, f, now);
    let mut w = frame(5, 2, 1, vec![]);
    w.entries
        .push(DiscoveryEntry::Withdraw(guid_bytes(&mine.guid)));
    deliver(&mut a, w, now);
    assert_eq!(a.stats().foreign_refused, 4);
    assert!(!a.graph().knows_participant(&prefix_of(&id(6))));
    assert_eq!(a.graph().endpoint_count(), 0);
}

#[test]
fn a_malformed_record_closes_its_link() {
    let now = Instant::now();
    let mut a = core(1, now);
    a.link_up(LinkId(1), id(5), true);
    let mut junk = participant_rec(5).to_vec();
    junk[0] = b'X';
    deliver(&mut a, frame(5, 1, 1, vec![Bytes::from(junk)]), now);
    let out: Vec<_> = std::iter::from_fn(|| a.poll_output()).collect();
    assert_eq!(out, vec![TopicsOutput::CloseLink(LinkId(1))]);
    assert_eq!(a.stats().malformed_records, 1);
}

/// An in-memory mesh of topics cores joined by links (ids unique across the mesh).
struct Net {
    now: Instant,
    cores: Vec<TopicsCore>,
    links: Vec<(usize, usize, LinkId)>,
    down: Vec<bool>,
    events: Vec<Vec<TopicEvent>>,
}

impl Net {
    fn new(n: usize, links: &[(usize, usize)], now: Instant) -> Net {
        let mut cores: Vec<TopicsCore> = (0..n).map(|i| core(i as u8 + 1, now)).collect();
        let mut ls = Vec::new();
        for (k, &(a, b)) in links.iter().enumerate() {
            let l = LinkId(100 + k as u64);
            cores[a].link_up(l, id(b as u8 + 1), true);
            cores[b].link_up(l, id(a as u8 + 1), true);
            ls.push((a, b, l));
        }
        Net {
            now,
            cores,
            links: ls,
            down: vec![false; n],
            events: vec![Vec::new(); n],
        }
    }

    /// Link `l` goes down at both ends.
    fn cut(&mut self, l: LinkId) {
        if let Some(&(a, b, _)) = self.links.iter().find(|x| x.2 == l) {
            self.cores[a].link_down(l);
            self.cores[b].link_down(l);
        }
        self.links.retain(|x| x.2 != l);
    }

    fn peer(&self, me: usize, l: LinkId) -> Option<usize> {
        self.links
            .iter()
            .find_map(|&(a, b, x)| match (x == l, a == me, b == me) {
                (true, true, _) => Some(b),
                (true, _, true) => Some(a),
                _ => None,
            })
    }

    /// Moves every frame until nothing moves.
    fn settle(&mut self) {
        loop {
            let mut moved = false;
            for i in 0..self.cores.len() {
                while let Some(o) = self.cores[i].poll_output() {
                    let (frame, only, except) = match o {
                        TopicsOutput::Flood { frame, except } => (frame, None, except),
                        TopicsOutput::Send { frame, links } => (frame, Some(links), None),
                        _ => continue,
                    };
                    if self.down[i] {
                        continue;
                    }
                    let ls: Vec<LinkId> = self
                        .links
                        .iter()
                        .filter(|&&(a, b, _)| a == i || b == i)
                        .map(|&(_, _, l)| l)
                        .filter(|l| Some(*l) != except)
                        .filter(|l| only.as_ref().is_none_or(|o| o.contains(l)))
                        .collect();
                    for l in ls {
                        let j = self.peer(i, l).unwrap();
                        if !self.down[j] {
                            self.cores[j].on_discovery(l, frame.clone(), false, self.now);
                            moved = true;
                        }
                    }
                }
                while let Some(e) = self.cores[i].poll_event() {
                    self.events[i].push(e);
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let next = self
                .cores
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.down[*i])
                .map(|(_, c)| c.poll_timeout())
                .min()
                .unwrap();
            if next > end {
                break;
            }
            self.now = next;
            for i in 0..self.cores.len() {
                if !self.down[i] && self.cores[i].poll_timeout() <= self.now {
                    self.cores[i].handle_timeout(self.now);
                }
            }
            self.settle();
        }
        self.now = end;
    }

    fn take_events(&mut self, i: usize) -> Vec<TopicEvent> {
        std::mem::take(&mut self.events[i])
    }
}

#[test]
fn three_nodes_match_route_and_unmatch_a_stopped_node_after_its_lease() {
    let now = Instant::now();
    // A (0) linked to B (1) and C (2).
    let mut net = Net::new(3, &[(0, 1), (0, 2)], now);
    let w = writer(&mut net.cores[0], "t", &["p"], now);
    let rb = reader(&mut net.cores[1], "t", &["p"], now);
    let rc = reader(&mut net.cores[2], "t", &["p"], now);
    let rx = reader(&mut net.cores[2], "t", &["other"], now);
    net.settle();
    let matched = |writer, reader, local| TopicEvent::Matched {
        writer,
        reader,
        topic: "t".into(),
        local,
    };
    let eb = net.take_events(1);
    assert!(eb.contains(&matched(w, rb, LocalSide::Reader)), "{eb:?}");
    let ec = net.take_events(2);
    assert!(ec.contains(&matched(w, rc, LocalSide::Reader)), "{ec:?}");
    let incompatible: Vec<_> = ec
        .iter()
        .filter_map(|e| match e {
            TopicEvent::Incompatible {
                writer,
                reader,
                reasons,
                ..
            } => Some((*writer, *reader, reasons.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(incompatible.len(), 1, "{ec:?}");
    assert_eq!((incompatible[0].0, incompatible[0].1), (w, rx));
    assert!(matches!(
        incompatible[0].2[..],
        [Incompatibility::Partitions { .. }]
    ));
    let ea = net.take_events(0);
    assert!(ea.contains(&matched(w, rb, LocalSide::Writer)));
    assert!(ea.contains(&matched(w, rc, LocalSide::Writer)));
    // Routes: A sends on both links, B and C deliver locally and forward nothing.
    let edges = [(0, 1), (0, 2)];
    let ma = membership(0, 3, &edges, now);
    let ta = net.cores[0].routes_due(&ma, now).expect("a table");
    let ra = ta.get(&w).expect("the writer is routed");
    assert_eq!(ra.links, vec![LinkId(100), LinkId(101)]);
    assert!(ra.local && ra.readers.is_empty());
    let tb = net.cores[1]
        .routes_due(&membership(1, 3, &edges, now), now)
        .unwrap();
    let rb_route = tb.get(&w).unwrap();
    assert_eq!(
        (rb_route.links.clone(), rb_route.readers.clone()),
        (vec![], vec![rb])
    );
    assert!(
        net.cores[0].routes_due(&ma, now + SEC).is_none(),
        "nothing changed: no new table"
    );
    // B's periodic membership refresh (a newer version, the same neighbours) changes nothing
    // routes depend on: no new table (it used to replan every writer on every refresh).
    let mut ma = ma;
    let refresh = |version, neighbours| crate::wire::Membership {
        origin: id(2),
        version,
        neighbours,
    };
    ma.on_record(LinkId(100), &refresh(6, vec![id(1)]), 1, now);
    assert!(
        net.cores[0].routes_due(&ma, now + SEC).is_none(),
        "a refresh is no change"
    );
    // B's list changes: a new table, at once after a quiet spell...
    ma.on_record(LinkId(100), &refresh(7, vec![id(1), id(3)]), 1, now);
    let t = now + SEC;
    assert!(
        net.cores[0].routes_due(&ma, t).is_some(),
        "an edge appeared"
    );
    // ... but a burst of changes waits for the planning interval and is planned once.
    ma.on_record(LinkId(100), &refresh(8, vec![id(1)]), 1, now);
    assert!(net.cores[0].routes_due(&ma, t).is_none());
    assert!(net.cores[0].routes_pending());
    assert_eq!(
        net.cores[0].plan_timeout(),
        Some(t + cfg().route_plan_interval)
    );
    ma.on_record(LinkId(100), &refresh(9, vec![id(1), id(3)]), 1, now);
    let later = t + cfg().route_plan_interval;
    assert!(net.cores[0].routes_due(&ma, later).is_some());
    assert!(!net.cores[0].routes_pending());
    // A topics frame that changes nothing listed leaves the view as it was.
    let v1 = net.cores[0].view();
    assert!(Arc::ptr_eq(&v1, &net.cores[0].view()));
    // Cycles keep everyone alive past several leases.
    net.advance(SEC * 10);
    assert!(net.take_events(0).is_empty(), "no flapping while alive");
    assert!(
        net.take_events(2).is_empty(),
        "incompatible said once per pair"
    );
    // C stops and its link dies: one lease later A is unmatched with C's reader (a link
    // up held C's lease), and routes only to B.
    net.down[2] = true;
    net.cut(LinkId(101));
    net.advance(SEC * 5);
    let ea = net.take_events(0);
    assert_eq!(
        ea,
        vec![TopicEvent::Unmatched {
            writer: w,
            reader: rc,
            topic: "t".into(),
            local: LocalSide::Writer
        }]
    );
    assert_eq!(net.cores[0].stats().participants_expired, 1);
    let ta2 = net.cores[0].routes_due(&ma, now + SEC * 20).unwrap();
    assert!(ta2.epoch() > ta.epoch());
    assert_eq!(ta2.get(&w).unwrap().links, vec![LinkId(100)]);
    // B relays C's frames no more, but B also expired C (heard through A).
    assert_eq!(net.cores[1].stats().participants_expired, 1);
}

/// Two linked nodes, settled: a reader on A (0), two writers on B (1), all on topic "t".
fn reader_and_two_writers(now: Instant) -> (Net, EndpointGuid, [EndpointGuid; 2]) {
    let mut net = Net::new(2, &[(0, 1)], now);
    let r = reader(&mut net.cores[0], "t", &[], now);
    let w1 = writer(&mut net.cores[1], "t", &[], now);
    let w2 = writer(&mut net.cores[1], "t", &[], now);
    net.settle();
    (net, r, [w1, w2])
}

/// A table says which writers of the last one are gone (withdrawn here: the shards keep
/// their route a while for what they wrote before), not those merely unmatched here.
#[test]
fn a_table_lists_the_writers_that_left_not_those_only_unmatched() {
    let now = Instant::now();
    let (mut net, r, [w1, w2]) = reader_and_two_writers(now);
    let ma = membership(0, 2, &[(0, 1)], now);
    let t1 = net.cores[0].routes_due(&ma, now).expect("a table");
    assert!(t1.get(&w1).is_some() && t1.get(&w2).is_some());
    assert!(t1.removed().is_empty());
    net.cores[1].remove_endpoint(w2, now).unwrap();
    net.settle();
    let t2 = net.cores[0].routes_due(&ma, now + SEC).expect("a table");
    assert!(t2.get(&w2).is_none());
    assert_eq!(t2.removed(), &[w2], "w2 was withdrawn");
    // A's reader goes: w1 is unmatched here but still writes; not listed.
    net.cores[0].remove_endpoint(r, now + SEC).unwrap();
    let t3 = net.cores[0]
        .routes_due(&ma, now + SEC * 2)
        .expect("a table");
    assert!(t3.get(&w1).is_none());
    assert!(t3.removed().is_empty(), "{:?}", t3.removed());
}

#[test]
fn a_complete_cycle_removes_an_endpoint_whose_withdrawal_was_lost() {
    let now = Instant::now();
    let (mut net, r, [w1, w2]) = reader_and_two_writers(now);
    net.advance(SEC);
    assert_eq!(net.cores[0].graph().endpoint_count(), 3);
    net.take_events(0);
    // B removes w2; its withdrawal is lost.
    net.cores[1].remove_endpoint(w2, net.now).unwrap();
    floods(&mut net.cores[1]);
    assert_eq!(net.cores[0].graph().endpoint_count(), 3);
    net.advance(SEC);
    assert_eq!(net.cores[0].stats().endpoints_pruned, 1);
    assert_eq!(net.cores[0].graph().endpoint_count(), 2);
    assert_eq!(
        net.take_events(0),
        vec![TopicEvent::Unmatched {
            writer: w2,
            reader: r,
            topic: "t".into(),
            local: LocalSide::Reader
        }]
    );
    assert!(net.cores[0].graph().endpoint_id(&guid_of(&w1)).is_some());
}

#[test]
fn lease_expiry_removes_every_endpoint_of_a_participant_in_one_pass() {
    let now = Instant::now();
    let mut a = core(1, now);
    let r = reader(&mut a, "t", &[], now);
    let p = prefix_of(&id(5));
    let ws: Vec<EndpointInfo> = (0..3)
        .map(|i| endpoint_info(p, 0x100 + i, EndpointKind::Writer, "t"))
        .collect();
    let mut recs = vec![participant_rec(5)];
    recs.extend(ws.iter().map(|w| encode_endpoint(w).unwrap()));
    deliver(&mut a, frame(5, 1, 1, recs), now);
    assert_eq!(events(&mut a).len(), 3);
    a.handle_timeout(now + SEC * 3);
    assert_eq!(
        a.graph().endpoint_count(),
        4,
        "the lease has not run out yet"
    );
    a.handle_timeout(now + SEC * 4);
    let ev = events(&mut a);
    assert_eq!(ev.len(), 3, "{ev:?}");
    for (e, w) in ev.iter().zip(&ws) {
        assert_eq!(
            *e,
            TopicEvent::Unmatched {
                writer: guid_bytes(&w.guid),
                reader: r,
                topic: "t".into(),
                local: LocalSide::Reader
            }
        );
    }
    assert_eq!(a.graph().endpoint_count(), 1);
    assert_eq!(
        (a.stats().participants_expired, a.stats().endpoints_expired),
        (1, 3)
    );
    assert!(!a.graph().knows_participant(&p));
}

#[test]
fn incompatible_pairs_say_why_once() {
    let now = Instant::now();
    let mut a = core(1, now);
    let mut q = EndpointQos::reader_default();
    q.reliability.kind = ReliabilityKind::Reliable;
    let r_rel = endpoint(&mut a, EndpointKind::Reader, "t", q, &[], now);
    let r_part = reader(&mut a, "t", &["a"], now);
    let r_type = a
        .create_endpoint(
            EndpointKind::Reader,
            "t",
            "Other",
            [9; 16],
            EndpointQos::reader_default(),
            &[],
            now,
        )
        .unwrap();
    events(&mut a);
    let p = prefix_of(&id(5));
    let mut w = endpoint_info(p, 0x102, EndpointKind::Writer, "t");
    w.qos.reliability.kind = ReliabilityKind::BestEffort;
    w.partitions = Partitions::new(["b"]).unwrap();
    let recs = vec![participant_rec(5), encode_endpoint(&w).unwrap()];
    deliver(&mut a, frame(5, 1, 1, recs.clone()), now);
    let ev = events(&mut a);
    let why = |reader: EndpointGuid| -> Vec<Incompatibility> {
        ev.iter()
            .find_map(|e| match e {
                TopicEvent::Incompatible {
                    reader: r,
                    reasons,
                    writer,
                    ..
                } if *r == reader && *writer == guid_bytes(&w.guid) => Some(reasons.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no incompatible event for {reader:?} in {ev:?}"))
    };
    assert!(why(r_rel).iter().any(|i| matches!(
        i,
        Incompatibility::Qos {
            rule: QosRule::ReliabilityKind,
            ..
        }
    )));
    assert!(why(r_part)
        .iter()
        .any(|i| matches!(i, Incompatibility::Partitions { .. })));
    let t = why(r_type);
    assert!(t
        .iter()
        .any(|i| matches!(i, Incompatibility::TypeName { .. })));
    assert!(t.contains(&Incompatibility::TypeHashMismatch));
    assert_eq!(ev.len(), 3);
    // The same announcement again (the next cycle): nothing new.
    deliver(&mut a, frame(5, 2, 1, recs), now);
    assert!(events(&mut a).is_empty());
    assert_eq!(a.reported_len(), 3);
}

#[test]
fn the_reported_set_is_bounded_and_counts_what_it_could_not_report() {
    let now = Instant::now();
    let mut c = cfg();
    c.max_reported_incompatible = 1;
    let mut a = core_with(1, c, now);
    reader(&mut a, "t", &["a"], now);
    writer(&mut a, "t", &["b"], now);
    writer(&mut a, "t", &["c"], now);
    let n = events(&mut a)
        .iter()
        .filter(|e| matches!(e, TopicEvent::Incompatible { .. }))
        .count();
    assert_eq!((n, a.stats().incompatible_unreported), (1, 1));
}

#[test]
fn dial_participants_picks_learned_then_fallback_addresses() {
    let now = Instant::now();
    let dials = |c: TopicsConfig, linked: bool| {
        let mut a = core_with(1, c, now);
        if linked {
            a.link_up(LinkId(9), id(5), true);
        }
        let mut p = ParticipantInfo::new(prefix_of(&id(5)), "p");
        p.user_locators = vec![tcp_locator(&"10.0.0.5:7000".parse().unwrap())];
        deliver(
            &mut a,
            frame(5, 1, 1, vec![encode_participant(&p).unwrap()]),
            now,
        );
        std::iter::from_fn(|| a.poll_output())
            .filter_map(|o| match o {
                TopicsOutput::Dial { peer, addr } => Some((peer, addr)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert!(dials(cfg(), false).is_empty(), "off by default");
    let on = TopicsConfig {
        dial_participants: true,
        ..cfg()
    };
    assert_eq!(
        dials(on.clone(), false),
        vec![(id(5), "10.0.0.5:7000".parse().unwrap())]
    );
    assert!(
        dials(on.clone(), true).is_empty(),
        "a linked node is not dialed"
    );
    let denied = TopicsConfig {
        locators_deny: vec!["10.0.0.0/8".into()],
        fallback_locators: vec!["192.168.1.5:7001".into()],
        ..on
    };
    assert_eq!(
        dials(denied, false),
        vec![(id(5), "192.168.1.5:7001".parse().unwrap())]
    );
}

/// A reliable writer's route names its reliable readers on other nodes (who must
/// acknowledge) and carries its history settings and credit; a reliable reader's node marks
/// it for in-order delivery and points acknowledgements upstream; best-effort pairs carry no
/// reliable side at all.
#[test]
fn routes_carry_the_reliable_side_only_where_a_reliable_reader_is() {
    let now = Instant::now();
    let mut net = Net::new(3, &[(0, 1), (0, 2)], now);
    let mut wq = EndpointQos::writer_default();
    wq.history = History::KeepAll;
    wq.resource_limits.max_samples = Limit::AtMost(500);
    let w = endpoint(&mut net.cores[0], EndpointKind::Writer, "t", wq, &[], now);
    let mut rq = EndpointQos::reader_default();
    rq.reliability.kind = ReliabilityKind::Reliable;
    let rb = endpoint(&mut net.cores[1], EndpointKind::Reader, "t", rq, &[], now);
    let _best_effort = reader(&mut net.cores[2], "t", &[], now);
    let plain = writer(&mut net.cores[0], "u", &[], now);
    let _ru = reader(&mut net.cores[1], "u", &[], now);
    net.settle();
    let edges = [(0, 1), (0, 2)];
    let ta = net.cores[0]
        .routes_due(&membership(0, 3, &edges, now), now)
        .unwrap();
    let ra = ta.get(&w).unwrap();
    let spec = ra.reliable.as_ref().unwrap().writer.as_ref().unwrap();
    assert_eq!(
        spec.readers,
        vec![rb],
        "only the reliable reader acknowledges"
    );
    assert_eq!((spec.keep_last, spec.max_samples), (None, Some(500)));
    assert!(!spec.transient_local && spec.lifespan.is_none());
    assert!(Arc::ptr_eq(
        &spec.credit,
        &net.cores[0].writer_credit(&w).unwrap()
    ));
    assert_eq!(ra.upstream, None);
    assert!(
        ta.get(&plain).unwrap().reliable.is_none(),
        "best effort only"
    );
    let tb = net.cores[1]
        .routes_due(&membership(1, 3, &edges, now), now)
        .unwrap();
    let rbr = tb.get(&w).unwrap();
    assert_eq!(rbr.reliable.as_ref().unwrap().local_readers, vec![rb]);
    assert_eq!(rbr.upstream, Some(LinkId(100)), "toward the writer's node");
    assert!(tb.get(&plain).unwrap().reliable.is_none());
    let tc = net.cores[2]
        .routes_due(&membership(2, 3, &edges, now), now)
        .unwrap();
    assert!(
        tc.get(&w).unwrap().reliable.is_none(),
        "a best-effort reader"
    );
}

mod admission;
mod cadence;
mod catch_up;
mod trust;
