//! The shards' form of the reverse paths ([`PathTable`]): the links an origin's frames are
//! taken from, and the links a relay skips, settling included.

use super::*;

#[test]
fn path_table_maps_toward_neighbours_to_their_links() {
    // 1 - 2 - 4, 1 - 3 - 4, 1 - 5 (5 sent no record), seen from 1.
    let r = paths(
        1,
        &[(1, &[2, 3, 5]), (2, &[1, 4]), (3, &[1, 4]), (4, &[2, 3])],
    );
    // 3 has two links while a dial race settles; 2's link is not up on this side.
    let links = [
        (p(3), LinkId(30)),
        (p(5), LinkId(50)),
        (p(3), LinkId(31)),
        (p(2), LinkId(20)),
    ];
    let t = PathTable::new(&r, &links);
    let now = Instant::now();
    assert_eq!(t.len(), 3);
    assert_eq!(
        t.accepted(&p(4)),
        Some(&[LinkId(20), LinkId(30), LinkId(31)][..])
    );
    assert_eq!(t.check(&p(4), LinkId(31), now), PathCheck::Toward);
    assert_eq!(t.check(&p(4), LinkId(50), now), PathCheck::Off);
    assert_eq!(t.check(&p(2), LinkId(20), now), PathCheck::Toward);
    assert_eq!(t.check(&p(2), LinkId(30), now), PathCheck::Off);
    assert_eq!(
        t.check(&p(5), LinkId(30), now),
        PathCheck::Unknown,
        "5 is unknown: taken"
    );
    assert!(PathTable::default().is_empty());
}

/// The live ring failure (CI: a broadcast never reached some node of a booting ring of five):
/// two neighbours that each miss a different record both judge the other the only way to an
/// origin, and each drops the copy the other does not send. Ring 1-2-3-4-5-1, origin 5:
/// node 2 misses the record in which 5 lists 1 (so 5-1 does not count for it: 5 is three
/// hops away, behind 3), node 3 misses the record in which 4 lists 5 (5 is behind 2 for it).
/// 1 and 4 get 5's frame directly and pass it on; 2 refuses 1's copy, 3 refuses 4's, and
/// neither ever gets another.
#[test]
fn two_stale_views_lose_an_origins_frame_without_settling() {
    let ring = [(1, 2), (2, 3), (3, 4), (4, 5), (1, 5)];
    let nodes = [1, 2, 3, 4, 5];
    let recs = records_of(&nodes, &ring);
    let stale = |me: u8, who: u8, drop: u8| -> ReversePaths {
        let view: Vec<(u8, Vec<u8>)> = recs
            .iter()
            .map(|(o, l)| {
                let l = if *o == who {
                    l.iter().copied().filter(|x| *x != drop).collect()
                } else {
                    l.clone()
                };
                (*o, l)
            })
            .collect();
        let borrowed: Vec<(u8, &[u8])> = view.iter().map(|(o, l)| (*o, l.as_slice())).collect();
        paths(me, &borrowed)
    };
    let v2 = stale(2, 5, 1);
    let v3 = stale(3, 4, 5);
    assert_eq!(v2.toward(&p(5), &p(1)), PathVerdict::Off);
    assert_eq!(v2.toward(&p(5), &p(3)), PathVerdict::Toward);
    assert_eq!(v3.toward(&p(5), &p(4)), PathVerdict::Off);
    assert_eq!(v3.toward(&p(5), &p(2)), PathVerdict::Toward);
    let links: Vec<(PeerId, LinkId)> = vec![(p(1), LinkId(1)), (p(3), LinkId(3))];
    let now = Instant::now();
    let settled = PathTable::new(&v2, &links);
    assert_eq!(settled.check(&p(5), LinkId(1), now), PathCheck::Off);
    // Built as the control core builds it, after a table that did not know 5: settling.
    let settle = Duration::from_secs(4);
    let fresh = PathTable::after(&PathTable::default(), &v2, &links, &[], now, settle);
    assert_eq!(fresh.check(&p(5), LinkId(1), now), PathCheck::Settling);
    assert_eq!(fresh.check(&p(5), LinkId(3), now), PathCheck::Toward);
    assert_eq!(
        fresh.check(&p(5), LinkId(1), now + settle),
        PathCheck::Off,
        "settled: off-path copies refused again"
    );
}

#[test]
fn an_origin_settles_again_only_when_its_links_change() {
    // 1 - 2 - 4, 1 - 3 - 4 seen from 1; then 3 - 4 goes.
    let square = paths(1, &[(1, &[2, 3]), (2, &[1, 4]), (3, &[1, 4]), (4, &[2, 3])]);
    let cut = paths(1, &[(1, &[2, 3]), (2, &[1, 4]), (3, &[1]), (4, &[2])]);
    let links = [(p(2), LinkId(2)), (p(3), LinkId(3))];
    let t0 = Instant::now();
    let settle = Duration::from_secs(4);
    let a = PathTable::after(&PathTable::default(), &square, &links, &[], t0, settle);
    assert_eq!(a.settling_until(&p(4)), Some(t0 + settle));
    // The same graph later (a link elsewhere changed): 2 and 4 keep their time.
    let t1 = t0 + Duration::from_secs(10);
    let b = PathTable::after(&a, &square, &links, &[], t1, settle);
    assert_eq!(b.settling_until(&p(4)), Some(t0 + settle));
    assert_eq!(b.check(&p(2), LinkId(3), t1), PathCheck::Off);
    // 4 is now behind 2 only: 4 settles again, 2 does not.
    let c = PathTable::after(&b, &cut, &links, &[], t1, settle);
    assert_eq!(c.settling_until(&p(4)), Some(t1 + settle));
    assert_eq!(c.check(&p(4), LinkId(3), t1), PathCheck::Settling);
    assert_eq!(c.check(&p(2), LinkId(3), t1), PathCheck::Off);
    // A neighbour's link replaced (a dial race): its origins settle again.
    let relinked = [(p(2), LinkId(20)), (p(3), LinkId(3))];
    let d = PathTable::after(&c, &cut, &relinked, &[], t1 + settle, settle);
    assert_eq!(d.settling_until(&p(2)), Some(t1 + settle + settle));
    assert_eq!(d.settling_until(&p(3)), Some(t0 + settle));
}

#[test]
fn a_relay_skips_the_neighbours_no_farther_from_the_origin() {
    // Full mesh of five seen from 3: every other node is one hop from every origin, so a
    // relay of any origin's frame sends nobody a copy (each took it from the origin).
    let nodes = [1, 2, 3, 4, 5];
    let edges = full_mesh(5);
    let r = paths_of(3, &records_of(&nodes, &edges));
    for x in [1, 2, 4, 5] {
        assert_eq!(r.not_farther(&p(x)), Some(&[p(1), p(2), p(4), p(5)][..]));
        assert_eq!(
            r.beside(&p(x)),
            r.not_farther(&p(x)),
            "each is, or is linked to, x"
        );
    }
    // Odd ring 1-2-3-4-5-1 seen from 1: 3 is two hops away by 2; 5 is as far from 3 as 1
    // is, so 1 sends 5 none of 3's frames (5 takes them from 4) but sends 2 none either
    // (2 is nearer); of 2's frames, 1 passes them on to 5 only.
    let recs = records_of(&nodes, &[(1, 2), (2, 3), (3, 4), (4, 5), (5, 1)]);
    let r = paths_of(1, &recs);
    assert_eq!(r.not_farther(&p(3)), Some(&[p(2), p(5)][..]));
    assert_eq!(
        r.beside(&p(3)),
        Some(&[p(2)][..]),
        "2 is linked to 3, 5 is not"
    );
    assert_eq!(r.not_farther(&p(2)), Some(&[p(2)][..]));
    assert_eq!(r.beside(&p(2)), Some(&[p(2)][..]), "the origin itself");
    assert_eq!(r.not_farther(&p(7)), None, "unknown origin");
    assert_eq!(r.beside(&p(7)), None);
    // The table: while the origin settles, only the links to the origin and to neighbours
    // linked to it are skipped (they take its frames from its own link); 5, two hops from
    // 3, gets 1's copy until then.
    let links = [(p(2), LinkId(2)), (p(5), LinkId(5)), (p(9), LinkId(9))];
    let t0 = Instant::now();
    let settle = Duration::from_secs(4);
    let t = PathTable::after(&PathTable::default(), &r, &links, &[], t0, settle);
    assert_eq!(
        t.skipped_links(&p(3), t0),
        Some(&[LinkId(2)][..]),
        "settling"
    );
    assert_eq!(
        t.skipped_links(&p(3), t0 + settle),
        Some(&[LinkId(2), LinkId(5)][..])
    );
    // Multimaster links are never skipped, links of nodes without a record neither (they
    // are in no list).
    let t = PathTable::after(&PathTable::default(), &r, &links, &[LinkId(5)], t0, settle);
    assert_eq!(t.skipped_links(&p(3), t0), Some(&[LinkId(2)][..]));
    assert_eq!(t.skipped_links(&p(3), t0 + settle), Some(&[LinkId(2)][..]));
    let t = PathTable::after(&PathTable::default(), &r, &links, &[LinkId(2)], t0, settle);
    assert_eq!(t.skipped_links(&p(3), t0), Some(&[][..]));
    assert_eq!(t.skipped_links(&p(3), t0 + settle), Some(&[LinkId(5)][..]));
    assert_eq!(t.skipped_links(&p(7), t0 + settle), None);
    let t = PathTable::new(&r, &links);
    assert_eq!(
        t.skipped_links(&p(3), t0),
        Some(&[LinkId(2), LinkId(5)][..])
    );
}

/// Random connected graphs, all nodes judging by the same records, each relaying an origin's
/// frame only to the neighbours farther from it: every node still gets every origin's frame
/// (the copy along a shortest path always goes on), over fewer links than a flood crosses.
#[test]
fn relaying_only_to_farther_neighbours_reaches_every_node() {
    let mut rng = StdRng::seed_from_u64(29);
    let (mut pruned_total, mut flood_total) = (0usize, 0usize);
    for round in 0..60 {
        let (n, recs, views) = random_views(&mut rng, 3);
        for x in 1..=n {
            let r = relay_once(&views, &recs, x, &mut rng, |view, w| {
                view.not_farther(&p(x)).unwrap_or_default().contains(&p(w))
            });
            let got = r.got;
            assert!(
                got[1..].iter().all(|g| *g),
                "round {round}: origin {x} missed {got:?} over the links {recs:?}"
            );
            pruned_total += r.copies;
            flood_total += r.flood_copies;
        }
    }
    assert!(
        pruned_total * 2 < flood_total,
        "relaying to farther neighbours only sent {pruned_total} copies, flooding {flood_total}"
    );
}

/// Why a relay holds back only some copies while the origin settles (those for the origin,
/// its neighbours, and the neighbours it already skipped). Line 1-2-3-4-5-6, then 1 links 6. Relay 4 learns the new link first: 5 is now two
/// hops from 1 by 6, nearer than 4 (three), so 4 would skip 5. But 5 still judges by the
/// line (1's new record has not reached it): it takes 1's frames from 4 only and refuses
/// 6's. Skipping 5 at once would leave it nothing, so that skip waits for settling; a
/// neighbour linked to the origin is skipped at once (it takes the origin's frames from the
/// origin's own link, whatever its graph).
#[test]
fn a_skip_two_hops_from_the_origin_waits_for_settling() {
    let nodes = [1, 2, 3, 4, 5, 6];
    let line = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6)];
    let mut looped = line.to_vec();
    looped.push((1, 6));
    let r4 = paths_of(4, &records_of(&nodes, &looped));
    let r5_old = paths_of(5, &records_of(&nodes, &line));
    assert_eq!(r4.not_farther(&p(1)), Some(&[p(3), p(5)][..]));
    assert_eq!(
        r4.beside(&p(1)),
        Some(&[][..]),
        "neither 3 nor 5 is linked to 1"
    );
    assert_eq!(r5_old.toward(&p(1), &p(4)), PathVerdict::Toward);
    assert_eq!(r5_old.toward(&p(1), &p(6)), PathVerdict::Off);
    let links = [(p(3), LinkId(3)), (p(5), LinkId(5))];
    let t0 = Instant::now();
    let settle = Duration::from_secs(4);
    let before = PathTable::new(&paths_of(4, &records_of(&nodes, &line)), &links);
    assert_eq!(before.skipped_links(&p(1), t0), Some(&[LinkId(3)][..]));
    let t = PathTable::after(&before, &r4, &links, &[], t0, settle);
    assert_eq!(t.settling_until(&p(1)), Some(t0 + settle));
    assert_eq!(
        t.skipped_links(&p(1), t0),
        Some(&[LinkId(3)][..]),
        "5 still gets 4's copy; 3, skipped before the change, stays skipped"
    );
    assert_eq!(
        t.skipped_links(&p(1), t0 + settle),
        Some(&[LinkId(3), LinkId(5)][..])
    );
    // Of 6's frames (5 is linked to 6), 4 skips 5 at once.
    assert_eq!(r4.beside(&p(6)), Some(&[p(5)][..]));
    assert_eq!(t.skipped_links(&p(6), t0), Some(&[LinkId(5)][..]));
}

/// The sets as the rule defines them, by a BFS from every neighbour this node lists (how
/// `build` computed them before `near.rs`): per origin, (toward, not farther, beside, hops).

#[test]
fn the_table_holds_each_origins_links_as_defined() {
    // Random graphs and link sets as a forming mesh has them: neighbours with two links (a
    // dial race), links to peers the graph does not know, multimaster links (flooded), and a
    // previous table whose skips are in force. Each origin's links are checked against the
    // definitions in `PathTable::after`, computed the slow way.
    let mut rng = StdRng::seed_from_u64(2961);
    let id = nth;
    let sorted = |mut v: Vec<LinkId>| {
        v.sort_unstable();
        v
    };
    let t0 = Instant::now();
    let settle = Duration::from_secs(4);
    let mut checked = 0;
    for round in 0..200 {
        let n = rng.gen_range(2..70);
        let density: f64 = [0.1, 0.5, 1.0][rng.gen_range(0..3)];
        let mut lists: Vec<Vec<PeerId>> = vec![Vec::new(); n];
        for a in 0..n {
            for b in a + 1..n {
                if rng.gen_bool(density) {
                    lists[a].push(id(b));
                    lists[b].push(id(a));
                }
            }
        }
        let records: Vec<(PeerId, Vec<PeerId>)> =
            (0..n).map(|i| (id(i), lists[i].clone())).collect();
        let me = id(0);
        let r = ReversePaths::build(
            me,
            records.iter().map(|(o, l)| (o, l.as_slice())),
            |_| true,
            0,
        );
        // This node's links: one per neighbour, a second one for some, and some to strangers.
        let mut links: Vec<(PeerId, LinkId)> = Vec::new();
        let mut next = 1u64;
        for q in lists[0]
            .iter()
            .copied()
            .chain((0..3).map(|k| id(n + 500 + k)))
        {
            for _ in 0..if rng.gen_bool(0.2) { 2 } else { 1 } {
                links.push((q, LinkId(next)));
                next += 1;
            }
        }
        use rand::seq::SliceRandom;
        links.shuffle(&mut rng);
        let flooded: Vec<LinkId> = links
            .iter()
            .filter(|_| rng.gen_bool(0.1))
            .map(|(_, l)| *l)
            .collect();
        let links_of = |q: &PeerId| {
            let q = *q;
            links.iter().filter(move |(x, _)| *x == q).map(|(_, l)| *l)
        };
        let first = PathTable::after(&PathTable::default(), &r, &links, &flooded, t0, settle);
        // A second table over the same graph, half-way through the first's settling: the
        // first's skips are then in force.
        let now = t0 + settle / 2;
        let second = PathTable::after(&first, &r, &links, &flooded, now, settle);
        for (origin, toward) in r.origins() {
            let accepted = sorted(toward.iter().flat_map(|q| links_of(q)).collect());
            let skipped: Vec<LinkId> = sorted(
                r.not_farther(origin)
                    .unwrap()
                    .iter()
                    .flat_map(|q| links_of(q))
                    .filter(|l| !flooded.contains(l))
                    .collect(),
            );
            let beside: Vec<LinkId> = r
                .beside(origin)
                .unwrap()
                .iter()
                .flat_map(|q| links_of(q))
                .collect();
            let firm = |in_force: &[LinkId]| -> Vec<LinkId> {
                skipped
                    .iter()
                    .copied()
                    .filter(|l| beside.contains(l) || in_force.contains(l))
                    .collect()
            };
            for (t, table, in_force) in [
                (t0, &first, Vec::new()),
                (
                    now,
                    &second,
                    first.skipped_links(origin, now).unwrap().to_vec(),
                ),
            ] {
                assert_eq!(
                    table.accepted(origin),
                    Some(&accepted[..]),
                    "round {round}: accepted"
                );
                // Settling (a new origin in the first table; the second keeps its time):
                // the firm skips; settled: every skip.
                assert_eq!(table.settling_until(origin), Some(t0 + settle));
                assert_eq!(
                    table.skipped_links(origin, t),
                    Some(&firm(&in_force)[..]),
                    "round {round}: firm skips of {origin}"
                );
                assert_eq!(table.skipped_links(origin, t0 + settle), Some(&skipped[..]));
            }
            checked += 1;
        }
    }
    assert!(checked > 2_000, "only {checked} origins checked");
}
