use super::*;

pub(super) fn p(n: u8) -> PeerId {
    PeerId([n; 16])
}

pub(super) fn new(me: u8, now: Instant) -> MemberGraph {
    MemberGraph::new(
        p(me),
        Duration::from_secs(2),
        Duration::from_secs(6),
        16,
        1_000,
        now,
    )
}

pub(super) fn drain(m: &mut MemberGraph) -> Vec<MemberTransmit> {
    std::iter::from_fn(|| m.poll_transmit()).collect()
}

#[test]
fn newer_records_are_stored_and_reflooded_except_inbound() {
    let now = Instant::now();
    let mut m = new(1, now);
    let r = Record {
        origin: p(2),
        version: 10,
        neighbours: vec![p(3)],
    };
    assert_eq!(
        m.on_record(LinkId(7), &r, 1_000, now),
        RecordOutcome::Stored
    );
    let t = drain(&mut m);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].dest, Dest::AllExcept(LinkId(7)));
    assert_eq!(m.on_record(LinkId(8), &r, 1_000, now), RecordOutcome::Stale);
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.stats().stale, 1);
}

#[test]
fn version_is_seeded_from_wall_clock_and_strictly_increases() {
    let now = Instant::now();
    let mut m = new(1, now);
    m.neighbour_up(p(2), LinkId(1), 500, now);
    assert_eq!(m.version(), 1_001);
    m.neighbour_down(&p(2), 5_000, now);
    assert_eq!(m.version(), 5_000);
}

#[test]
fn own_old_incarnation_is_outranked() {
    let now = Instant::now();
    let mut m = new(1, now);
    let old = Record {
        origin: p(1),
        version: 9_999,
        neighbours: vec![],
    };
    assert_eq!(
        m.on_record(LinkId(1), &old, 1_000, now),
        RecordOutcome::OwnOutranked
    );
    assert!(m.version() > 9_999);
    assert_eq!(drain(&mut m)[0].record.version, m.version());
}

#[test]
fn store_is_bounded() {
    let now = Instant::now();
    let mut m = MemberGraph::new(
        p(1),
        Duration::from_secs(1),
        Duration::from_secs(3),
        2,
        0,
        now,
    );
    for n in 2..5 {
        let r = Record {
            origin: p(n),
            version: 1,
            neighbours: vec![],
        };
        m.on_record(LinkId(1), &r, 0, now);
    }
    assert_eq!(m.stats().rejected_full, 1);
}

#[test]
fn periodic_flood_and_expiry() {
    let now = Instant::now();
    let mut m = new(1, now);
    m.neighbour_up(p(2), LinkId(1), 0, now);
    let r = Record {
        origin: p(2),
        version: 5,
        neighbours: vec![p(1), p(3)],
    };
    m.on_record(LinkId(1), &r, 0, now);
    assert!(m.is_member(&p(3)));
    drain(&mut m);
    assert_eq!(m.poll_timeout(), now + Duration::from_secs(2));
    m.handle_timeout(0, now + Duration::from_secs(2));
    assert_eq!(drain(&mut m).len(), 1);
    m.handle_timeout(0, now + Duration::from_secs(6));
    assert!(!m.is_member(&p(3)));
    assert!(
        m.is_member(&p(2)),
        "direct neighbour stays a member via the own record"
    );
    assert_eq!(m.stats().expired, 1);
}

/// The member set by the documented rule, from scratch and by brute force: every pair
/// of known nodes, an edge when every end with a record lists the other (edges at self:
/// the own neighbours).
fn reference(m: &MemberGraph) -> AHashSet<PeerId> {
    let mut nodes: Vec<PeerId> = vec![m.me];
    for (o, r) in &m.records {
        nodes.push(*o);
        nodes.extend(r.sorted.iter().copied());
    }
    nodes.extend(m.neighbours.iter().copied());
    nodes.sort();
    nodes.dedup();
    nodes.retain(|p| !p.is_zero());
    let lists = |a: &PeerId, b: &PeerId| {
        if *a == m.me {
            Some(m.neighbours.contains(b))
        } else {
            m.records.get(a).map(|r| r.sorted.contains(b))
        }
    };
    let edge = |a: &PeerId, b: &PeerId| {
        if a == b {
            return false;
        }
        if *a == m.me || *b == m.me {
            let other = if *a == m.me { b } else { a };
            return m.neighbours.contains(other);
        }
        match (lists(a, b), lists(b, a)) {
            (Some(x), Some(y)) => x && y,
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => false,
        }
    };
    let mut reached = AHashSet::from_iter([m.me]);
    let mut queue = VecDeque::from([m.me]);
    while let Some(u) = queue.pop_front() {
        for v in &nodes {
            if edge(&u, v) && reached.insert(*v) {
                queue.push_back(*v);
            }
        }
    }
    reached.remove(&m.me);
    reached
}

#[test]
fn incremental_member_set_matches_the_rule_from_scratch() {
    use rand::{Rng, SeedableRng};
    for seed in 0..40u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let t0 = Instant::now();
        let mut now = t0;
        // No rate limit: the member set must match the rule after every step.
        let mut m = MemberGraph::new(
            p(1),
            Duration::from_secs(2),
            Duration::from_secs(6),
            64,
            0,
            now,
        )
        .with_limits(DEFAULT_MAX_NEIGHBOURS, Duration::ZERO);
        let mut versions = [0u64; 10];
        // Replaying the events must give the member set, too.
        let mut replay: AHashSet<PeerId> = AHashSet::new();
        for step in 0..300 {
            now += Duration::from_millis(rng.gen_range(0..400));
            match rng.gen_range(0..10) {
                0 => m.neighbour_up(p(rng.gen_range(2..10)), LinkId(step), 0, now),
                1 => m.neighbour_down(&p(rng.gen_range(2..10)), 0, now),
                2 => m.handle_timeout(0, now),
                _ => {
                    let o = rng.gen_range(2..10u8);
                    versions[o as usize] += rng.gen_range(0..3);
                    let neighbours = (0..rng.gen_range(0..5))
                        .map(|_| p(rng.gen_range(1..11)))
                        .collect();
                    let r = Record {
                        origin: p(o),
                        version: versions[o as usize],
                        neighbours,
                    };
                    m.on_record(LinkId(rng.gen_range(0..4)), &r, 0, now);
                }
            }
            drain(&mut m);
            while let Some(e) = m.poll_event() {
                match e {
                    MemberEvent::MemberJoined(x) => assert!(replay.insert(x)),
                    MemberEvent::MemberLeft(x) => assert!(replay.remove(&x)),
                }
            }
            let want = reference(&m);
            assert_eq!(m.members, want, "seed {seed} step {step}");
            assert_eq!(replay, want, "seed {seed} step {step}: events");
        }
    }
}

#[test]
fn adjacency_lists_own_neighbours_and_stored_records_sorted() {
    let now = Instant::now();
    let mut m = new(1, now);
    m.neighbour_up(p(3), LinkId(1), 1_000, now);
    m.neighbour_up(p(2), LinkId(2), 1_000, now);
    let r = Record {
        origin: p(2),
        version: 10,
        neighbours: vec![p(4), p(1), p(4)],
    };
    assert_eq!(
        m.on_record(LinkId(2), &r, 1_000, now),
        RecordOutcome::Stored
    );
    let mut adj: Vec<(PeerId, Vec<PeerId>)> =
        m.adjacency().map(|(o, l)| (*o, l.to_vec())).collect();
    adj.sort();
    assert_eq!(
        adj,
        vec![(p(1), vec![p(2), p(3)]), (p(2), vec![p(1), p(4)])]
    );
    m.neighbour_down(&p(3), 1_000, now);
    let own: Vec<PeerId> = m
        .adjacency()
        .find(|(o, _)| **o == p(1))
        .map(|(_, l)| l.to_vec())
        .unwrap();
    assert_eq!(own, vec![p(2)]);
}

#[test]
fn the_shape_moves_when_edges_may_have_changed_and_not_on_a_same_list_refresh() {
    let now = Instant::now();
    let mut m = new(1, now);
    let s0 = m.shape();
    m.neighbour_up(p(2), LinkId(1), 1_000, now);
    let s1 = m.shape();
    assert!(s1 > s0, "own neighbour added");
    let rec = |version, neighbours: Vec<PeerId>| Record {
        origin: p(2),
        version,
        neighbours,
    };
    m.on_record(LinkId(1), &rec(10, vec![p(1), p(3)]), 1_000, now);
    let s2 = m.shape();
    assert!(s2 > s1, "a new record");
    // The periodic refresh: newer version, the same neighbours in another order.
    m.on_record(LinkId(1), &rec(11, vec![p(3), p(1)]), 1_000, now);
    assert_eq!(m.shape(), s2, "same edges, same shape");
    m.on_record(LinkId(1), &rec(12, vec![p(1)]), 1_000, now);
    let s3 = m.shape();
    assert!(s3 > s2, "an edge went");
    m.handle_timeout(1_000, now + Duration::from_secs(7));
    assert!(m.shape() > s3, "the record expired");
}

/// Finding 8: a record of our own id with `version = u64::MAX` made `version + 1` overflow
/// (a panic in debug builds, a wrap to 0 in release). It is refused now, and the own version
/// keeps rising; a previous run's record within the horizon still outranks as before.
#[test]
fn an_own_record_at_u64_max_neither_overflows_nor_freezes_the_own_version() {
    let now = Instant::now();
    let wall = 1_700_000_000_000;
    let mut m = MemberGraph::new(
        p(1),
        Duration::from_secs(2),
        Duration::from_secs(6),
        16,
        wall,
        now,
    );
    m.neighbour_up(p(2), LinkId(1), wall, now);
    let v = m.version();
    let forged = Record {
        origin: p(1),
        version: u64::MAX,
        neighbours: vec![],
    };
    assert!(!m.is_stale(&forged));
    assert_eq!(
        m.on_record(LinkId(1), &forged, wall, now),
        RecordOutcome::Implausible
    );
    assert_eq!(m.version(), v, "not adopted");
    assert_eq!(m.stats().implausible_versions, 1);
    m.handle_timeout(wall, now + Duration::from_secs(2));
    assert_eq!(m.version(), v + 1, "the next flood");
    // Just inside the horizon: a clock set back 30 days, the previous run's record wins.
    let old_run = Record {
        origin: p(1),
        version: wall + OWN_VERSION_HORIZON_MS,
        neighbours: vec![],
    };
    assert_eq!(
        m.on_record(LinkId(1), &old_run, wall, now),
        RecordOutcome::OwnOutranked
    );
    assert_eq!(m.version(), wall + OWN_VERSION_HORIZON_MS + 1);
}

/// Others' versions are compared, never incremented: `u64::MAX` for another origin is stored
/// (nothing overflows), cannot be refreshed, and expires; the origin's real records are taken
/// again after that.
#[test]
fn another_origin_at_u64_max_expires_and_its_real_records_return() {
    let now = Instant::now();
    let mut m = new(1, now);
    m.neighbour_up(p(2), LinkId(1), 1_000, now);
    let rec = |version| Record {
        origin: p(3),
        version,
        neighbours: vec![p(2)],
    };
    assert_eq!(
        m.on_record(LinkId(1), &rec(u64::MAX), 1_000, now),
        RecordOutcome::Stored
    );
    assert!(m.is_stale(&rec(5_000)));
    assert_eq!(
        m.on_record(LinkId(1), &rec(5_000), 1_000, now),
        RecordOutcome::Stale
    );
    m.handle_timeout(1_000, now + Duration::from_secs(7));
    assert!(!m.is_member(&p(3)), "expired");
    let later = now + Duration::from_secs(8);
    assert_eq!(
        m.on_record(LinkId(1), &rec(5_001), 1_000, later),
        RecordOutcome::Stored
    );
    assert!(m.is_member(&p(3)));
}

/// Finding 8: records could list 65 535 neighbours (and were stored twice, as received and
/// sorted). Over `max_neighbours` (default 1024) they are refused and counted; the member
/// set and the relays do not see them.
#[test]
fn records_over_the_neighbour_cap_are_refused_and_counted() {
    let now = Instant::now();
    let mut m = new(1, now);
    m.neighbour_up(p(2), LinkId(1), 1_000, now);
    drain(&mut m);
    let many: Vec<PeerId> = (0..u16::MAX)
        .map(|i| {
            let mut id = [9u8; 16];
            id[..2].copy_from_slice(&i.to_be_bytes());
            PeerId(id)
        })
        .collect();
    let big = Record {
        origin: p(3),
        version: 7,
        neighbours: many.clone(),
    };
    assert_eq!(
        m.on_record(LinkId(1), &big, 1_000, now),
        RecordOutcome::TooManyNeighbours
    );
    assert_eq!(m.stats().rejected_oversize, 1);
    assert!(drain(&mut m).is_empty(), "not relayed");
    assert_eq!(m.members().count(), 1, "only the neighbour");
    // The cap is a setting: 4 lets 4 through and refuses 5.
    let mut m = new(1, now).with_limits(4, RECOMPUTE_GAP);
    let with = |n: usize| Record {
        origin: p(3),
        version: 7 + n as u64,
        neighbours: many[..n].to_vec(),
    };
    assert_eq!(
        m.on_record(LinkId(1), &with(4), 1_000, now),
        RecordOutcome::Stored
    );
    assert_eq!(
        m.on_record(LinkId(1), &with(5), 1_000, now),
        RecordOutcome::TooManyNeighbours
    );
}

/// Finding 8: every record that removed an edge ran a from-scratch recomputation. A burst
/// now costs one at once and one at the end of the gap, whatever its size; the member set
/// is then exactly the rule's again, and the events replay to it.
#[test]
fn a_burst_of_edge_removals_costs_one_recompute_per_gap() {
    let now = Instant::now();
    let mut m = MemberGraph::new(
        p(1),
        Duration::from_secs(2),
        Duration::from_secs(6),
        64,
        0,
        now,
    );
    // A chain 1 - 2 - 3 - ... - 41.
    m.neighbour_up(p(2), LinkId(2), 1_000, now);
    for n in 2..=41u8 {
        let neighbours = if n == 41 {
            vec![p(40)]
        } else {
            vec![p(n - 1), p(n + 1)]
        };
        let r = Record {
            origin: p(n),
            version: 10,
            neighbours,
        };
        m.on_record(LinkId(2), &r, 1_000, now);
    }
    assert_eq!(m.members().count(), 40);
    let mut members: AHashSet<PeerId> = AHashSet::new();
    let replay = |m: &mut MemberGraph, members: &mut AHashSet<PeerId>| {
        while let Some(e) = m.poll_event() {
            match e {
                MemberEvent::MemberJoined(x) => assert!(members.insert(x)),
                MemberEvent::MemberLeft(x) => assert!(members.remove(&x)),
            }
        }
    };
    replay(&mut m, &mut members);
    assert_eq!(members, m.members);
    let before = m.stats();
    // 40 records, each dropping the edge to its successor, in one burst.
    let t = now + Duration::from_secs(1);
    for n in 2..=41u8 {
        let r = Record {
            origin: p(n),
            version: 11,
            neighbours: vec![p(n - 1)],
        };
        m.on_record(LinkId(2), &r, 1_000, t);
    }
    let s = m.stats();
    assert_eq!(s.recomputes - before.recomputes, 1, "one at once");
    assert!(s.recomputes_deferred - before.recomputes_deferred >= 38);
    assert_eq!(m.poll_timeout(), t + RECOMPUTE_GAP);
    m.handle_timeout(1_000, t + RECOMPUTE_GAP);
    assert_eq!(
        m.stats().recomputes - before.recomputes,
        2,
        "and one at the gap's end"
    );
    assert_eq!(m.members, reference(&m));
    replay(&mut m, &mut members);
    assert_eq!(members, reference(&m), "the events replay to the set");
    assert_eq!(
        members,
        AHashSet::from_iter([p(2)]),
        "every other edge went"
    );
}

fn sig(b: u8) -> RecordSignature {
    RecordSignature {
        key: [b; 32],
        sig: [b; 64],
    }
}

/// A signed record keeps its signature: relayed and caught up with it, so every node can
/// verify it; a record stored unsigned carries none. (Verification is the control core's.)
#[test]
fn signed_records_carry_their_signature_in_relays_and_catch_up() {
    let now = Instant::now();
    let mut m = new(1, now);
    m.neighbour_up(p(2), LinkId(2), 1_000, now);
    m.neighbour_up(p(5), LinkId(5), 1_000, now);
    drain(&mut m);
    let r = Record {
        origin: p(3),
        version: 10,
        neighbours: vec![p(2), p(4)],
    };
    assert_eq!(
        m.on_signed_record(LinkId(2), &r, Some(sig(7)), 1_000, now),
        RecordOutcome::Stored
    );
    assert!(m.is_signed(&p(3)));
    let t = drain(&mut m);
    assert_eq!(t.len(), 1);
    assert_eq!(
        (&t[0].dest, &t[0].record, t[0].signature),
        (&Dest::AllExcept(LinkId(2)), &r, Some(sig(7)))
    );
    m.neighbour_up(p(6), LinkId(6), 1_000, now);
    let caught_up: Vec<_> = drain(&mut m)
        .into_iter()
        .filter(|t| t.dest == Dest::Link(LinkId(6)))
        .collect();
    assert_eq!(caught_up.len(), 1);
    assert_eq!(
        (&caught_up[0].record, caught_up[0].signature),
        (&r, Some(sig(7)))
    );
    // The own record goes out unsigned here: the control core signs it.
    assert!(drain(&mut m).iter().all(|t| t.signature.is_none()));
    // A signed list that is not strictly ascending could not be re-sent as signed.
    let unsorted = Record {
        origin: p(4),
        version: 1,
        neighbours: vec![p(3), p(2)],
    };
    assert_eq!(
        m.on_signed_record(LinkId(2), &unsorted, Some(sig(8)), 1_000, now),
        RecordOutcome::Invalid
    );
    // Stale checks, before any signature is paid for.
    assert!(m.is_stale(&r));
    assert!(!m.is_stale(&Record {
        version: 11,
        ..r.clone()
    }));
    let own = m.own_record();
    assert!(m.is_stale(&own), "the own current record is an echo");
    assert!(!m.is_stale(&Record {
        version: own.version + 1,
        ..own
    }));
}

/// A new digest link's catch-up (both ends send their stored records at link-up) is its first
/// repair: a Summary that differs within half an interval of the link-up is not answered
/// with Versions (what it counts is mostly in flight, and answering pushed thousands of stale
/// records per node in a forming mesh); one after that is.
#[test]
fn a_digest_mismatch_right_after_link_up_waits_half_an_interval() {
    use crate::wire::{MembershipDigest, NO_LEGACY};
    let now = Instant::now();
    let mut m = new(1, now).with_digest(true);
    m.neighbour_up_on(p(2), LinkId(2), true, 1_000, now);
    drain(&mut m);
    let versions_on_2 = |m: &mut MemberGraph| {
        std::iter::from_fn(|| m.poll_digest())
            .filter(|(l, d)| *l == LinkId(2) && d.versions.is_some())
            .count()
    };
    assert_eq!(versions_on_2(&mut m), 0, "a Summary went, no Versions");
    let differs = MembershipDigest {
        legacy_hops: NO_LEGACY,
        count: 5,
        digest: 42,
        versions: None,
    };
    let half = Duration::from_secs(1); // `new`: a 2 s interval
    m.on_digest(LinkId(2), &differs, 1_000, now + half / 4)
        .unwrap();
    assert_eq!(versions_on_2(&mut m), 0);
    assert_eq!(m.stats().sync.versions_rate_limited, 1);
    m.on_digest(LinkId(2), &differs, 1_000, now + half).unwrap();
    assert_eq!(versions_on_2(&mut m), 1);
}
