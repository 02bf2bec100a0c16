//! Which links a stored record is relayed on (`super`): pruned toward the nodes the record
//! lists, left to one relay toward the nodes it does not.

use super::super::tests::{drain, new, p};
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
