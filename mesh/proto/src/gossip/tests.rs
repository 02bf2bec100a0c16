use super::*;
use std::sync::Arc;

fn p(n: u8) -> PeerId {
    PeerId([n; 16])
}

fn setup() -> (Gossip, NeighbourLinks, Instant) {
    let now = Instant::now();
    let r = Gossip::new(p(1), 8, 1000, Duration::from_secs(30), now);
    let mut t = NeighbourLinks::new();
    t.insert(p(2), LinkId(2));
    t.insert(p(3), LinkId(3));
    (r, t, now)
}

fn meta(src: u8, dst: PeerId, n: u64, ttl: u8) -> DataMeta {
    DataMeta {
        src: p(src),
        dst,
        msg_id: MsgId::new(&p(src), n),
        ttl,
    }
}

#[test]
fn broadcast_is_delivered_once_and_forwarded_with_split_horizon() {
    let (mut r, t, now) = setup();
    let m = meta(2, PeerId::ZERO, 1, 8);
    assert_eq!(
        r.on_data(&t, LinkId(2), &m, now),
        DataVerdict::DeliverAndForward {
            except: LinkId(2),
            ttl: 7
        }
    );
    assert_eq!(
        r.on_data(&t, LinkId(3), &m, now),
        DataVerdict::Drop(DropReason::Duplicate)
    );
    assert_eq!(r.stats().delivered, 1);
    assert_eq!(r.stats().dropped_duplicate, 1);
}

#[test]
fn broadcast_ttl_one_is_delivered_not_forwarded() {
    let (mut r, t, now) = setup();
    assert_eq!(
        r.on_data(&t, LinkId(2), &meta(2, PeerId::ZERO, 1, 1), now),
        DataVerdict::Deliver
    );
    assert_eq!(r.stats().ttl_exhausted, 1);
}

#[test]
fn targeted_rules() {
    let (mut r, t, now) = setup();
    assert_eq!(
        r.on_data(&t, LinkId(2), &meta(2, p(1), 1, 3), now),
        DataVerdict::Deliver
    );
    assert_eq!(
        r.on_data(&t, LinkId(2), &meta(2, p(3), 2, 3), now),
        DataVerdict::Unicast {
            link: LinkId(3),
            ttl: 2
        }
    );
    assert_eq!(
        r.on_data(&t, LinkId(2), &meta(2, p(9), 3, 3), now),
        DataVerdict::Forward {
            except: Some(LinkId(2)),
            ttl: 2
        }
    );
    assert_eq!(
        r.on_data(&t, LinkId(2), &meta(2, p(9), 4, 1), now),
        DataVerdict::Drop(DropReason::TtlExpired)
    );
    assert_eq!(r.stats().dropped_ttl, 1);
}

#[test]
fn relay_with_no_other_link_is_no_route() {
    let now = Instant::now();
    let mut r = Gossip::new(p(1), 8, 10, Duration::from_secs(1), now);
    let mut t = NeighbourLinks::new();
    t.insert(p(2), LinkId(2));
    assert_eq!(
        r.on_data(&t, LinkId(2), &meta(2, p(9), 1, 5), now),
        DataVerdict::Drop(DropReason::NoRoute)
    );
    assert_eq!(r.stats().dropped_no_route, 1);
}

#[test]
fn originated_message_is_never_echoed() {
    let (mut r, t, now) = setup();
    let mut g = MsgIdGen::new(p(1), 41);
    let id = g.next_id();
    assert_eq!(id.counter(), 42);
    assert_eq!(
        r.originate(&t, PeerId::ZERO),
        DataVerdict::Forward {
            except: None,
            ttl: 8
        }
    );
    let back = DataMeta {
        src: p(1),
        dst: PeerId::ZERO,
        msg_id: id,
        ttl: 6,
    };
    assert_eq!(
        r.on_data(&t, LinkId(3), &back, now),
        DataVerdict::Drop(DropReason::Duplicate)
    );
    assert_eq!(
        r.originate(&t, p(2)),
        DataVerdict::Unicast {
            link: LinkId(2),
            ttl: 8
        }
    );
    assert_eq!(
        r.originate(&t, p(7)),
        DataVerdict::Forward {
            except: None,
            ttl: 8
        }
    );
}

#[test]
fn a_batch_is_routed_once_and_counted_per_message() {
    let (mut r, t, _) = setup();
    assert_eq!(
        r.originate_many(&t, PeerId::ZERO, 5),
        DataVerdict::Forward {
            except: None,
            ttl: 8
        }
    );
    assert_eq!(
        r.originate_many(&t, p(2), 3),
        DataVerdict::Unicast {
            link: LinkId(2),
            ttl: 8
        }
    );
    assert_eq!(r.originate_many(&t, p(1), 2), DataVerdict::Deliver);
    let s = r.stats();
    assert_eq!((s.forwarded, s.unicast, s.delivered), (5, 3, 2));
    let empty = NeighbourLinks::new();
    assert_eq!(
        r.originate_many(&empty, PeerId::ZERO, 4),
        DataVerdict::Drop(DropReason::NoRoute)
    );
    assert_eq!(r.stats().dropped_no_route, 4);
}

#[test]
fn own_message_coming_back_is_dropped_even_when_the_cache_is_full() {
    let now = Instant::now();
    let mut r = Gossip::new(p(1), 8, 1, Duration::from_secs(30), now);
    let (_, t, _) = setup();
    let mine = meta(1, PeerId::ZERO, 1, 5);
    r.originate(&t, PeerId::ZERO);
    // Fills the one-entry cache with someone else's id.
    r.on_data(&t, LinkId(2), &meta(2, PeerId::ZERO, 1, 5), now);
    assert_eq!(
        r.on_data(&t, LinkId(2), &mine, now),
        DataVerdict::Drop(DropReason::Duplicate)
    );
    let targeted_back = meta(1, p(9), 2, 5);
    assert_eq!(
        r.on_data(&t, LinkId(3), &targeted_back, now),
        DataVerdict::Drop(DropReason::Duplicate)
    );
    assert_eq!(r.stats().self_echo_suppressed, 2);
    assert_eq!(r.stats().dropped_duplicate, 2);
    assert_eq!(r.dedup_stats().inserted, 1, "own ids never enter the cache");
}

#[test]
fn a_generator_counts_up_by_one_from_its_seed() {
    let mut g = MsgIdGen::new(p(5), u64::MAX - 1);
    assert_eq!(g.next_id(), MsgId::new(&p(5), u64::MAX));
    assert_eq!(
        g.next_id(),
        MsgId::new(&p(5), 0),
        "wraps like the C++ counter"
    );
    assert_eq!(g.next_id(), MsgId::new(&p(5), 1));
}

/// A copy delayed past the dedup bound (a lossy link, a cut that heals) used to find its id
/// forgotten and was delivered and flooded again; now it is dropped as too old.
#[test]
fn a_copy_delayed_past_the_dedup_bound_is_dropped_as_too_old() {
    let (mut r, t, now) = setup();
    let mut g = MsgIdGen::new(p(9), 0x7777_0000_0000);
    let first = g.next_id();
    let meta = |id| DataMeta {
        src: p(9),
        dst: PeerId::ZERO,
        msg_id: id,
        ttl: 5,
    };
    assert!(matches!(
        r.on_data(&t, LinkId(2), &meta(first), now),
        DataVerdict::DeliverAndForward { .. }
    ));
    for _ in 0..5000 {
        r.on_data(&t, LinkId(2), &meta(g.next_id()), now);
    }
    assert!(r.dedup_stats().evicted_by_size > 0, "the bound was reached");
    assert_eq!(
        r.on_data(&t, LinkId(3), &meta(first), now),
        DataVerdict::Drop(DropReason::TooOld)
    );
    assert_eq!(r.stats().dropped_too_old, 1);
    assert_eq!(r.stats().delivered, 5001);
}

#[test]
fn table_replacement_and_stale_removal() {
    let mut t = NeighbourLinks::new();
    t.insert(p(2), LinkId(1));
    t.insert(p(2), LinkId(5));
    assert_eq!(t.links(), &[LinkId(5)]);
    assert!(!t.remove(&p(2), LinkId(1)));
    assert_eq!(t.link_to(&p(2)), Some(LinkId(5)));
    assert!(t.remove(&p(2), LinkId(5)));
    assert!(t.is_empty());
}

#[test]
fn an_id_not_starting_with_its_src_is_dropped_before_the_cache() {
    let (mut r, t, now) = setup();
    // Node 2 sends a frame carrying node 3's id 5.
    let forged = DataMeta {
        src: p(2),
        dst: PeerId::ZERO,
        msg_id: MsgId::new(&p(3), 5),
        ttl: 5,
    };
    assert_eq!(
        r.on_data(&t, LinkId(2), &forged, now),
        DataVerdict::Drop(DropReason::ForeignMsgId)
    );
    assert_eq!(r.stats().dropped_foreign_msg_id, 1);
    // Node 3's own id 5 was not spent.
    assert!(matches!(
        r.on_data(&t, LinkId(3), &meta(3, PeerId::ZERO, 5, 5), now),
        DataVerdict::DeliverAndForward { .. }
    ));
}

/// Node 1 is linked to 2 (which leads to 4) and to a stranger 9. The stranger sends 4's next
/// ids first; with the table they are refused and 4's real frames still get through, without
/// it they spend the ids and the real frames are dropped as duplicates.
#[test]
fn forged_next_ids_from_a_link_off_the_path_spend_nothing() {
    use crate::reverse_path::{PathTable, ReversePaths};
    let now = Instant::now();
    let mut t = NeighbourLinks::new();
    t.insert(p(2), LinkId(2));
    t.insert(p(9), LinkId(9));
    let listed = [
        (p(1), vec![p(2), p(9)]),
        (p(2), vec![p(1), p(4)]),
        (p(4), vec![p(2)]),
        // The stranger claims to be next to 4; 4's record says otherwise.
        (p(9), vec![p(1), p(4)]),
    ];
    let rp = ReversePaths::build(
        p(1),
        listed.iter().map(|(o, l)| (o, l.as_slice())),
        |_| true,
        0,
    );
    let table = Arc::new(PathTable::new(&rp, &[(p(2), LinkId(2)), (p(9), LinkId(9))]));
    for checked in [true, false] {
        let mut r = Gossip::new(p(1), 8, 1000, Duration::from_secs(30), now);
        r.set_paths(checked.then(|| table.clone()));
        for n in 100..105 {
            let broadcast = r.on_data(&t, LinkId(9), &meta(4, PeerId::ZERO, n, 8), now);
            let targeted = r.on_data(&t, LinkId(9), &meta(4, p(1), n + 50, 8), now);
            if checked {
                assert_eq!(broadcast, DataVerdict::Drop(DropReason::OffPath));
                assert_eq!(targeted, DataVerdict::Drop(DropReason::OffPath));
            } else {
                assert!(matches!(broadcast, DataVerdict::DeliverAndForward { .. }));
                assert_eq!(targeted, DataVerdict::Deliver);
            }
        }
        let real: Vec<DataVerdict> = (100..105)
            .flat_map(|n| {
                [
                    r.on_data(&t, LinkId(2), &meta(4, PeerId::ZERO, n, 7), now),
                    r.on_data(&t, LinkId(2), &meta(4, p(1), n + 50, 7), now),
                ]
            })
            .collect();
        let taken = real
            .iter()
            .filter(|v| !matches!(v, DataVerdict::Drop(_)))
            .count();
        let s = r.stats();
        if checked {
            assert_eq!(taken, 10, "every real frame is taken: {real:?}");
            assert_eq!((s.dropped_off_path, s.dropped_duplicate), (10, 0));
        } else {
            assert_eq!(taken, 0, "without the check the forgeries won: {real:?}");
            assert_eq!((s.dropped_off_path, s.dropped_duplicate), (0, 10));
        }
    }
}

#[test]
fn the_path_check_takes_direct_links_and_unknown_origins() {
    use crate::reverse_path::{PathTable, ReversePaths};
    let now = Instant::now();
    let listed = [
        (p(1), vec![p(2), p(3)]),
        (p(2), vec![p(1), p(3)]),
        (p(3), vec![p(1), p(2)]),
    ];
    let rp = ReversePaths::build(
        p(1),
        listed.iter().map(|(o, l)| (o, l.as_slice())),
        |_| true,
        0,
    );
    let table = Arc::new(PathTable::new(&rp, &[(p(2), LinkId(2)), (p(3), LinkId(3))]));
    let mut r = Gossip::new(p(1), 8, 1000, Duration::from_secs(30), now);
    r.set_paths(Some(table));
    let mut t = NeighbourLinks::new();
    t.insert(p(2), LinkId(2));
    t.insert(p(3), LinkId(3));
    // Full mesh: 2's frames only from 2.
    assert_eq!(
        r.on_data(&t, LinkId(3), &meta(2, PeerId::ZERO, 1, 8), now),
        DataVerdict::Drop(DropReason::OffPath)
    );
    assert!(matches!(
        r.on_data(&t, LinkId(2), &meta(2, PeerId::ZERO, 1, 8), now),
        DataVerdict::DeliverAndForward { .. }
    ));
    // 2's link was replaced (a dial race) before the next table: its own link still counts.
    t.insert(p(2), LinkId(7));
    assert!(matches!(
        r.on_data(&t, LinkId(7), &meta(2, PeerId::ZERO, 2, 8), now),
        DataVerdict::DeliverAndForward { .. }
    ));
    // An origin the graph does not know is taken from anyone.
    assert!(matches!(
        r.on_data(&t, LinkId(3), &meta(8, PeerId::ZERO, 1, 8), now),
        DataVerdict::DeliverAndForward { .. }
    ));
    r.set_paths(None);
    assert!(matches!(
        r.on_data(&t, LinkId(3), &meta(2, PeerId::ZERO, 3, 8), now),
        DataVerdict::DeliverAndForward { .. }
    ));
    assert_eq!(r.stats().dropped_off_path, 1);
}

/// The router remembers the last origin and link it took a frame from; a new table forgets it.
#[test]
fn a_new_table_is_obeyed_at_once_for_the_origin_just_taken() {
    use crate::reverse_path::{PathTable, ReversePaths};
    let now = Instant::now();
    let table = |toward: u8| {
        let listed = [
            (p(1), vec![p(2), p(3)]),
            (p(toward), vec![p(1), p(4)]),
            (p(4), vec![p(toward)]),
        ];
        let rp = ReversePaths::build(
            p(1),
            listed.iter().map(|(o, l)| (o, l.as_slice())),
            |_| true,
            0,
        );
        Arc::new(PathTable::new(&rp, &[(p(2), LinkId(2)), (p(3), LinkId(3))]))
    };
    let (mut r, t, _) = setup();
    r.set_paths(Some(table(2)));
    for n in 1..=3 {
        assert!(matches!(
            r.on_data(&t, LinkId(2), &meta(4, PeerId::ZERO, n, 8), now),
            DataVerdict::DeliverAndForward { .. }
        ));
    }
    assert_eq!(
        r.on_data(&t, LinkId(3), &meta(4, PeerId::ZERO, 4, 8), now),
        DataVerdict::Drop(DropReason::OffPath)
    );
    // 4 moved behind 3.
    r.set_paths(Some(table(3)));
    assert_eq!(
        r.on_data(&t, LinkId(2), &meta(4, PeerId::ZERO, 5, 8), now),
        DataVerdict::Drop(DropReason::OffPath)
    );
    assert!(matches!(
        r.on_data(&t, LinkId(3), &meta(4, PeerId::ZERO, 6, 8), now),
        DataVerdict::DeliverAndForward { .. }
    ));
}
