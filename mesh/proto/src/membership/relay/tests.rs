//! Which links a stored record is relayed on (`super`): pruned toward the nodes the record
//! lists, left to one relay toward the nodes it does not.

use super::super::tests::{drain, new, p};
use super::super::MemberGraph;
use super::super::{Dest, Record, RecordOutcome};
use crate::LinkId;
use std::time::Instant;

#[test]
fn relays_skip_the_origin_and_the_neighbours_it_lists() {
    let now = Instant::now();
    let mut m = new(1, now);
    for (peer, link) in [(2, 12), (3, 13), (4, 14), (5, 15)] {
        m.neighbour_up(p(peer), LinkId(link), 0, now);
    }
    drain(&mut m);
    // From 3, a record of 2 that lists 3 and 4: 2 sent it to 3 and 4 itself, so only 5
    // still needs it (and not 2, its origin).
    let r = Record {
        origin: p(2),
        version: 7,
        neighbours: vec![p(4), p(3), p(1)],
    };
    assert_eq!(m.on_record(LinkId(13), &r, 0, now), RecordOutcome::Stored);
    let t = drain(&mut m);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].dest, Dest::Link(LinkId(15)));
    assert_eq!(
        t[0].record,
        Record {
            neighbours: vec![p(1), p(3), p(4)],
            ..r.clone()
        },
        "relayed as the set it lists, sorted (stored once)"
    );
    assert_eq!(t[0].signature, None);
    assert_eq!(m.stats().relays_pruned, 2);
    // A new neighbour 6 gets the record in its catch-up; 4 would not (2 lists it).
    m.neighbour_up(p(6), LinkId(16), 0, now);
    let t = drain(&mut m);
    assert!(t
        .iter()
        .any(|t| t.dest == Dest::Link(LinkId(16)) && t.record.version == r.version));
    // A record of 4 that lists this node and 2: 3, 5 and 6 still need it, from this relay:
    // one transmit naming their three links (the record copied and encoded once).
    let r4 = Record {
        origin: p(4),
        version: 3,
        neighbours: vec![p(1), p(2)],
    };
    assert_eq!(m.on_record(LinkId(14), &r4, 0, now), RecordOutcome::Stored);
    let t = drain(&mut m);
    assert_eq!(t.len(), 1);
    let three = [13, 15, 16].map(LinkId).to_vec();
    assert_eq!((&t[0].dest, &t[0].record), (&Dest::Links(three), &r4));
    assert!(t[0].dest.includes(LinkId(13), false) && !t[0].dest.includes(LinkId(14), true));
}

/// A joiner's record reaches a node it does not list from the lowest-id node listed by the
/// joiner and linked to it (issue 29: one copy per version instead of one per listed relay
/// and per unlisted member); toward a legacy link, or where no such node is linked to the
/// neighbour, the relay still sends.
#[test]
fn a_relay_leaves_an_unlisted_neighbour_to_the_lowest_common_relay() {
    let now = Instant::now();
    let run = |digest: bool| {
        let mut m = new(3, now).with_digest(true);
        for (peer, link) in [(1, 11), (2, 12), (5, 15), (6, 16)] {
            m.neighbour_up_on(p(peer), LinkId(link), digest, 0, now);
        }
        // 1, 2 and 5 form a full mesh with this node; 6 is linked to this node only.
        for (origin, link, nbrs) in [
            (1, 11, vec![2, 3, 5]),
            (2, 12, vec![1, 3, 5]),
            (5, 15, vec![1, 2, 3]),
            (6, 16, vec![3]),
        ] {
            let r = Record {
                origin: p(origin),
                version: 5,
                neighbours: nbrs.into_iter().map(p).collect(),
            };
            assert_eq!(m.on_record(LinkId(link), &r, 0, now), RecordOutcome::Stored);
        }
        drain(&mut m);
        let mut relay = |origin: u8, listed: Vec<u8>| {
            let j = Record {
                origin: p(origin),
                version: 7,
                neighbours: listed.into_iter().map(p).collect(),
            };
            assert_eq!(m.on_record(LinkId(11), &j, 0, now), RecordOutcome::Stored);
            let mut to: Vec<u64> = drain(&mut m)
                .iter()
                .filter(|t| t.record.origin == p(origin))
                .flat_map(|t| match &t.dest {
                    Dest::Link(l) => vec![l.0],
                    Dest::Links(v) => v.iter().map(|l| l.0).collect(),
                    Dest::AllExcept(x) => {
                        [11, 12, 15, 16].into_iter().filter(|l| *l != x.0).collect()
                    }
                    d => panic!("a relay, got {d:?}"),
                })
                .collect();
            to.sort_unstable();
            to
        };
        // Joiner 9 is linked to 1 and to this node so far; its record came from 1.
        let listed_here = relay(9, vec![1, 3]);
        // Joiner 8 is linked to 1 only: this node is as far from it as 2 and 5 are.
        let two_hops = relay(8, vec![1]);
        (listed_here, two_hops, m.stats().relays_deferred)
    };
    // 2 and 5 get both records from 1 (listed by the joiner, linked to both, lower id); 6,
    // linked to no node the joiners list but this one, only from here.
    assert_eq!(run(true), (vec![16], vec![16], 4));
    // Legacy links (no digest to repair a miss, or a multimaster peer): every copy, as before.
    assert_eq!(run(false), (vec![12, 15, 16], vec![12, 15, 16], 0));
}

/// A node whose links come up one by one mints a version per link; toward a quiet digest
/// neighbour it does not list, the versions that follow the first within the relay gap go
/// as one relay of the newest at the gap's end, and none when the newest lists the
/// neighbour (it has it from the origin). A legacy link still gets every version at once.
/// (At 60 nodes starting at once, ~85 % of the relays' copies arrived after a newer version.)
#[test]
fn versions_in_a_burst_reach_a_quiet_neighbour_as_the_first_and_the_newest() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + std::time::Duration::from_millis(n);
    let run = |gap: std::time::Duration| {
        let mut m = new(3, t0).with_digest(true).with_relay_gap(gap);
        // 1 on a digest link (the joiner's first neighbour), 6 on a quiet digest link,
        // 7 on a legacy link.
        for (peer, link, digest) in [(1, 11, true), (6, 16, true), (7, 17, false)] {
            m.neighbour_up_on(p(peer), LinkId(link), digest, 0, t0);
        }
        drain(&mut m);
        let mut sent: Vec<(u64, u64, u64)> = Vec::new(); // (ms, link, version)
        let mut take = |m: &mut MemberGraph, at: u64| {
            for t in drain(m).into_iter().filter(|t| t.record.origin == p(9)) {
                for l in [16, 17] {
                    if t.dest.includes(LinkId(l), l == 17) {
                        sent.push((at, l, t.record.version));
                    }
                }
            }
        };
        // Joiner 9's versions, all from 1: its links come up one by one, the last to 6.
        for (at, version, listed) in [
            (10, 5, vec![1]),
            (20, 6, vec![1, 2]),
            (30, 7, vec![1, 2, 4]),
            (160, 8, vec![1, 2, 4, 6]),
        ] {
            // The paced relays due before this version, as the driver would run them.
            while m.poll_timeout() <= ms(at) {
                let due = m.poll_timeout();
                m.handle_timeout(0, due);
                take(&mut m, due.duration_since(t0).as_millis() as u64);
            }
            let r = Record {
                origin: p(9),
                version,
                neighbours: listed.into_iter().map(p).collect(),
            };
            assert_eq!(
                m.on_record(LinkId(11), &r, 0, ms(at)),
                RecordOutcome::Stored
            );
            take(&mut m, at);
        }
        while m.poll_timeout() <= ms(1_000) {
            let due = m.poll_timeout();
            m.handle_timeout(0, due);
            take(&mut m, due.duration_since(t0).as_millis() as u64);
        }
        let to = |l: u64| -> Vec<(u64, u64)> {
            sent.iter()
                .filter(|s| s.1 == l)
                .map(|s| (s.0, s.2))
                .collect()
        };
        (to(16), to(17), m.stats().relays_paced)
    };
    let legacy = vec![(10, 5), (20, 6), (30, 7), (160, 8)];
    // Paced: version 5 at once, 7 (not 6) at the gap's end, rounded up to the quarter-gap
    // grid (110 → 125 ms); 8 lists 6: nothing more.
    assert_eq!(
        run(super::RELAY_GAP),
        (vec![(10, 5), (125, 7)], legacy.clone(), 3)
    );
    // No gap: every version at once, as before.
    assert_eq!(
        run(std::time::Duration::ZERO),
        (vec![(10, 5), (20, 6), (30, 7)], legacy, 0)
    );
}
