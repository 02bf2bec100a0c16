use super::*;
use crate::LinkId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

mod spared;
mod table;

fn p(n: u8) -> PeerId {
    PeerId([n; 16])
}

/// Reverse paths of node `me` from records `(origin, listed)`; `me`'s own list is its entry;
/// every relay carries an origin's frames to the nodes farther from it (`relay_redundancy`
/// 0: see `spared.rs` for the others).
fn paths(me: u8, records: &[(u8, &[u8])]) -> ReversePaths {
    paths_k(me, records, 0)
}

/// [`paths`] with `relay_redundancy` `k`.
fn paths_k(me: u8, records: &[(u8, &[u8])], k: usize) -> ReversePaths {
    let owned: Vec<(PeerId, Vec<PeerId>)> = records
        .iter()
        .map(|(o, l)| (p(*o), l.iter().map(|x| p(*x)).collect()))
        .collect();
    ReversePaths::build(
        p(me),
        owned.iter().map(|(o, l)| (o, l.as_slice())),
        |_| true,
        k,
    )
}

/// Every node's record, from an undirected edge list.
fn records_of(nodes: &[u8], edges: &[(u8, u8)]) -> Vec<(u8, Vec<u8>)> {
    nodes
        .iter()
        .map(|&n| {
            let mut l: Vec<u8> = edges
                .iter()
                .filter_map(|&(a, b)| match (a == n, b == n) {
                    (true, _) => Some(b),
                    (_, true) => Some(a),
                    _ => None,
                })
                .collect();
            l.sort_unstable();
            (n, l)
        })
        .collect()
}

/// The `i`-th of many ids (more than a byte's worth), ascending with `i % 251`, then `i / 251`.
fn nth(i: usize) -> PeerId {
    let mut id = [7u8; 16];
    id[0] = (i % 251) as u8;
    id[1] = (i / 251) as u8;
    PeerId(id)
}

fn paths_of(me: u8, recs: &[(u8, Vec<u8>)]) -> ReversePaths {
    let v: Vec<(u8, &[u8])> = recs.iter().map(|(o, l)| (*o, l.as_slice())).collect();
    paths(me, &v)
}

#[test]
fn line_takes_each_origin_from_its_side_only() {
    // 1 - 2 - 3 - 4 - 5, seen from 3.
    let recs = records_of(&[1, 2, 3, 4, 5], &[(1, 2), (2, 3), (3, 4), (4, 5)]);
    let r = paths_of(3, &recs);
    assert_eq!(r.toward(&p(1), &p(2)), PathVerdict::Toward);
    assert_eq!(r.toward(&p(1), &p(4)), PathVerdict::Off);
    assert_eq!(r.toward(&p(2), &p(2)), PathVerdict::Direct);
    assert_eq!(r.toward(&p(2), &p(4)), PathVerdict::Off);
    assert_eq!(r.toward(&p(5), &p(4)), PathVerdict::Toward);
    assert_eq!(r.toward(&p(5), &p(2)), PathVerdict::Off);
    assert_eq!(r.accepted(&p(1)), Some(&[p(2)][..]));
    assert_eq!(r.accepted(&p(4)), Some(&[p(4)][..]));
    assert_eq!((r.hops(&p(1)), r.hops(&p(5))), (Some(2), Some(2)));
    assert_eq!(r.len(), 4, "every other node is a known origin");
    assert_eq!(r.hops(&p(3)), None, "this node is no origin of its own");
}

#[test]
fn ring_takes_the_far_origin_from_both_sides() {
    // 1 - 2 - 3 - 4 - 5 - 6 - 1, seen from 1.
    let recs = records_of(
        &[1, 2, 3, 4, 5, 6],
        &[(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 1)],
    );
    let r = paths_of(1, &recs);
    // 4 is opposite: both ways are shortest.
    assert_eq!(r.accepted(&p(4)), Some(&[p(2), p(6)][..]));
    assert_eq!(r.toward(&p(4), &p(6)), PathVerdict::Toward);
    // 3 is two hops one way, four the other.
    assert_eq!(r.toward(&p(3), &p(2)), PathVerdict::Toward);
    assert_eq!(r.toward(&p(3), &p(6)), PathVerdict::Off);
    assert_eq!(r.toward(&p(5), &p(2)), PathVerdict::Off);
    // An odd ring: the opposite pair are equally far, so neither side is toward the other.
    let recs = records_of(&[1, 2, 3, 4, 5], &[(1, 2), (2, 3), (3, 4), (4, 5), (5, 1)]);
    let r = paths_of(1, &recs);
    assert_eq!(r.accepted(&p(3)), Some(&[p(2)][..]));
    assert_eq!(r.toward(&p(3), &p(5)), PathVerdict::Off);
    assert_eq!(r.toward(&p(4), &p(5)), PathVerdict::Toward);
}

#[test]
fn full_mesh_takes_each_origin_only_directly() {
    let nodes = [1, 2, 3, 4, 5];
    let edges = full_mesh(5);
    let r = paths_of(3, &records_of(&nodes, &edges));
    for x in [1, 2, 4, 5] {
        assert_eq!(r.accepted(&p(x)), Some(&[p(x)][..]));
        for via in [1, 2, 4, 5] {
            let want = if via == x {
                PathVerdict::Direct
            } else {
                PathVerdict::Off
            };
            assert_eq!(r.toward(&p(x), &p(via)), want, "origin {x} via {via}");
        }
    }
}

#[test]
fn a_node_without_a_record_is_toward_nobody_and_unknown_as_origin() {
    // 1 is linked to 2 and to 9; 9 sent no record. 2 - 3; 3 lists 7, whose record is unknown.
    let r = paths(1, &[(1, &[2, 9]), (2, &[1, 3]), (3, &[2, 7])]);
    assert_eq!(r.toward(&p(3), &p(2)), PathVerdict::Toward);
    assert_eq!(r.toward(&p(3), &p(9)), PathVerdict::Off);
    assert_eq!(r.toward(&p(2), &p(9)), PathVerdict::Off);
    // 9's own frames: directly from it, anyone's otherwise (the graph cannot place it).
    assert_eq!(r.toward(&p(9), &p(9)), PathVerdict::Direct);
    assert_eq!(r.toward(&p(9), &p(2)), PathVerdict::UnknownOrigin);
    assert_eq!(r.toward(&p(7), &p(2)), PathVerdict::UnknownOrigin);
    assert_eq!(r.toward(&p(7), &p(9)), PathVerdict::UnknownOrigin);
    assert!(PathVerdict::UnknownOrigin.accepted() && !PathVerdict::Off.accepted());
}

#[test]
fn a_neighbour_that_only_claims_an_edge_is_not_toward() {
    // Stranger 9 lists 1 and 3 in its record; 3's record does not list 9.
    let r = paths(1, &[(1, &[2, 9]), (2, &[1, 3]), (3, &[2]), (9, &[1, 3])]);
    assert_eq!(r.toward(&p(3), &p(9)), PathVerdict::Off);
    assert_eq!(r.toward(&p(3), &p(2)), PathVerdict::Toward);
    // Once 3 lists 9 too, the edge counts and 9 is as close to 3 as 2 is.
    let r = paths(1, &[(1, &[2, 9]), (2, &[1, 3]), (3, &[2, 9]), (9, &[1, 3])]);
    assert_eq!(r.accepted(&p(3)), Some(&[p(2), p(9)][..]));
}

#[test]
fn an_origin_not_reached_over_two_sided_edges_is_unknown() {
    // 1's new link to 2 is not in 2's record yet: nothing is reached.
    let r = paths(1, &[(1, &[2]), (2, &[3]), (3, &[2])]);
    assert!(r.is_empty());
    assert_eq!(r.toward(&p(3), &p(2)), PathVerdict::UnknownOrigin);
    assert_eq!(r.toward(&p(2), &p(2)), PathVerdict::Direct);
}

#[test]
fn the_include_filter_routes_around_excluded_nodes() {
    // 1 - 2 - 4 and 1 - 3 - 5 - 4; 2 is left out (e.g. not topic-capable).
    let recs = records_of(&[1, 2, 3, 4, 5], &[(1, 2), (2, 4), (1, 3), (3, 5), (5, 4)]);
    let owned: Vec<(PeerId, Vec<PeerId>)> = recs
        .iter()
        .map(|(o, l)| (p(*o), l.iter().map(|x| p(*x)).collect()))
        .collect();
    let adj = || owned.iter().map(|(o, l)| (o, l.as_slice()));
    let all = ReversePaths::build(p(1), adj(), |_| true, 0);
    assert_eq!(all.accepted(&p(4)), Some(&[p(2)][..]));
    let capable = ReversePaths::build(p(1), adj(), |x| *x != p(2), 0);
    assert_eq!(capable.accepted(&p(4)), Some(&[p(3)][..]));
    assert_eq!(capable.toward(&p(4), &p(2)), PathVerdict::Off);
    assert_eq!(capable.toward(&p(2), &p(3)), PathVerdict::UnknownOrigin);
}

#[test]
fn order_and_duplicate_entries_do_not_matter() {
    let a = paths(1, &[(1, &[2, 3]), (2, &[1, 4]), (3, &[1, 4]), (4, &[2, 3])]);
    let b = paths(
        1,
        &[
            (4, &[3, 2, 3]),
            (3, &[4]),
            (1, &[3, 2]),
            (2, &[4, 1, 1]),
            (3, &[1]),
        ],
    );
    let sorted = |r: &ReversePaths| {
        let mut v: Vec<(PeerId, Vec<PeerId>)> =
            r.origins().map(|(o, l)| (*o, l.to_vec())).collect();
        v.sort();
        v
    };
    assert_eq!(sorted(&a), sorted(&b));
    assert_eq!(a.accepted(&p(4)), Some(&[p(2), p(3)][..]));
}

fn graph(me: u8, now: Instant) -> MemberGraph {
    MemberGraph::new(
        p(me),
        Duration::from_secs(2),
        Duration::from_secs(6),
        64,
        1_000,
        now,
    )
}

/// The edges of a full mesh of nodes `1..=n`, `(low, high)`.
fn full_mesh(n: u8) -> Vec<(u8, u8)> {
    (1..=n)
        .flat_map(|a| (a + 1..=n).map(move |b| (a, b)))
        .collect()
}

/// A random connected graph of 2 to 14 nodes (ids from 1, a random tree, then up to `extra`
/// more edges per node), all nodes judging by the same records: its size, the records and
/// each node's reverse paths.
type Views = (u8, Vec<(u8, Vec<u8>)>, Vec<ReversePaths>);

/// One frame of origin `x` relayed over `recs` in a random order (`rng`), each node judging
/// by its own view and relaying to the neighbours `skips(view, w)` does not hold back.
struct Relayed {
    /// Which nodes took the frame (index = node id).
    got: Vec<bool>,
    /// Copies sent.
    copies: usize,
    /// Copies a flood would have sent.
    flood_copies: usize,
}

fn relay_once(
    views: &[ReversePaths],
    recs: &[(u8, Vec<u8>)],
    x: u8,
    rng: &mut StdRng,
    skips: impl Fn(&ReversePaths, u8) -> bool,
) -> Relayed {
    let links = |u: u8| recs[u as usize - 1].1.clone();
    let mut got = vec![false; recs.len() + 1];
    got[x as usize] = true;
    // The origin sends on every link; (to, from) copies in flight.
    let mut pending: Vec<(u8, u8)> = links(x).iter().map(|&v| (v, x)).collect();
    let mut flood_copies = pending.len();
    let mut copies = pending.len();
    while !pending.is_empty() {
        let (v, from) = pending.swap_remove(rng.gen_range(0..pending.len()));
        let view = &views[v as usize - 1];
        if got[v as usize] || !view.toward(&p(x), &p(from)).accepted() {
            continue;
        }
        got[v as usize] = true;
        for w in links(v).into_iter().filter(|&w| w != from) {
            flood_copies += 1;
            if !skips(view, w) {
                copies += 1;
                pending.push((w, v));
            }
        }
    }
    Relayed {
        got,
        copies,
        flood_copies,
    }
}
fn random_views(rng: &mut StdRng, extra: usize) -> Views {
    random_views_k(rng, extra, 0)
}

/// [`random_views`] with `relay_redundancy` `k`.
fn random_views_k(rng: &mut StdRng, extra: usize, k: usize) -> Views {
    let n: u8 = rng.gen_range(2..=14);
    let mut edges: Vec<(u8, u8)> = (2..=n).map(|b| (rng.gen_range(1..b), b)).collect();
    for _ in 0..rng.gen_range(0..=(n as usize * extra)) {
        let (a, b) = (rng.gen_range(1..=n), rng.gen_range(1..=n));
        if a != b && !edges.contains(&(a.min(b), a.max(b))) {
            edges.push((a.min(b), a.max(b)));
        }
    }
    let nodes: Vec<u8> = (1..=n).collect();
    let recs = records_of(&nodes, &edges);
    let views = nodes
        .iter()
        .map(|&m| {
            let v: Vec<(u8, &[u8])> = recs.iter().map(|(o, l)| (*o, l.as_slice())).collect();
            paths_k(m, &v, k)
        })
        .collect();
    (n, recs, views)
}

fn record(origin: u8, version: u64, listed: &[u8]) -> crate::wire::Membership {
    crate::wire::Membership {
        origin: p(origin),
        version,
        neighbours: listed.iter().map(|x| p(*x)).collect(),
    }
}

#[test]
fn the_paths_follow_the_graph_and_a_same_list_refresh_keeps_its_shape() {
    let now = Instant::now();
    let mut g = graph(1, now);
    g.neighbour_up(p(2), LinkId(2), 1_000, now);
    g.neighbour_up(p(3), LinkId(3), 1_000, now);
    for r in [
        record(2, 10, &[1, 4]),
        record(3, 10, &[1, 4]),
        record(4, 10, &[2, 3]),
    ] {
        g.on_record(LinkId(2), &r, 1_000, now);
    }
    // Rebuilt when the graph's shape moved (as the control core does).
    let refresh = |rp: &mut ReversePaths, g: &MemberGraph| {
        let moved = rp.shape() != Some(g.shape());
        if moved {
            *rp = ReversePaths::of_graph(p(1), g, 0);
        }
        moved
    };
    let mut rp = ReversePaths::new(p(1));
    assert_eq!(rp.toward(&p(4), &p(3)), PathVerdict::UnknownOrigin);
    assert!(refresh(&mut rp, &g));
    assert_eq!(rp.accepted(&p(4)), Some(&[p(2), p(3)][..]));
    // A periodic refresh with the same lists changes nothing.
    g.on_record(LinkId(2), &record(4, 11, &[3, 2]), 1_000, now);
    assert!(!refresh(&mut rp, &g));
    // 3 drops its link to 4: 4 is now behind 2 only.
    g.on_record(LinkId(3), &record(3, 11, &[1]), 1_000, now);
    assert!(refresh(&mut rp, &g));
    assert_eq!(rp.accepted(&p(4)), Some(&[p(2)][..]));
    assert_eq!(rp.toward(&p(4), &p(3)), PathVerdict::Off);
    assert_eq!(rp.hops(&p(4)), Some(2));
    // This node loses 2: 4 is cut off from it, so unknown.
    g.neighbour_down(&p(2), 2_000, now);
    assert!(refresh(&mut rp, &g));
    assert_eq!(rp.toward(&p(4), &p(3)), PathVerdict::UnknownOrigin);
    assert_eq!(rp.toward(&p(3), &p(3)), PathVerdict::Direct);
}

/// A random connected graph, all nodes judging by the same records: a flood of every origin
/// in any delivery order reaches every node, each taking only copies its rule accepts, and
/// every accepted first copy travelled a shortest path.
#[test]
fn floods_reach_every_node_in_any_order_when_views_agree() {
    let mut rng = StdRng::seed_from_u64(24);
    for round in 0..60 {
        let (n, recs, views) = random_views(&mut rng, 2);
        let links = |u: u8| recs[u as usize - 1].1.clone();
        for x in 1..=n {
            let mut got = vec![false; n as usize + 1];
            got[x as usize] = true;
            // (receiver, sender, hops travelled)
            let mut pending: Vec<(u8, u8, u32)> = links(x).iter().map(|&v| (v, x, 1)).collect();
            while !pending.is_empty() {
                let (v, from, hops) = pending.swap_remove(rng.gen_range(0..pending.len()));
                let view = &views[v as usize - 1];
                if got[v as usize] || !view.toward(&p(x), &p(from)).accepted() {
                    continue;
                }
                assert_eq!(
                    Some(hops),
                    view.hops(&p(x)),
                    "round {round}: not a shortest path"
                );
                got[v as usize] = true;
                pending.extend(
                    links(v)
                        .into_iter()
                        .filter(|&w| w != from)
                        .map(|w| (w, v, hops + 1)),
                );
            }
            assert!(
                got[1..].iter().all(|g| *g),
                "round {round}: origin {x} missed {got:?} over the links {recs:?}"
            );
        }
    }
}

type Sets = Vec<(PeerId, Vec<PeerId>, Vec<PeerId>, Vec<PeerId>, u32)>;

fn by_bfs_from_every_neighbour(me: PeerId, records: &[(PeerId, Vec<PeerId>)]) -> Sets {
    use crate::counted_graph::{CountedGraph, FAR};
    let g = CountedGraph::build(me, records.iter().map(|(o, l)| (o, l.as_slice())), |_| true);
    let n = g.ids.len();
    let me_i = g.index[&me];
    let mut queue = std::collections::VecDeque::new();
    let mut dist_me = vec![FAR; n];
    g.bfs(me_i, &mut dist_me, &mut queue);
    let mut dist_of = Vec::new();
    for &nb in &g.own {
        let mut d = vec![FAR; n];
        g.bfs(nb, &mut d, &mut queue);
        dist_of.push((g.ids[nb as usize], d));
    }
    let mut out = Vec::new();
    for x in 0..n {
        let dm = dist_me[x];
        if x == me_i as usize || dm == FAR {
            continue;
        }
        let (mut t, mut nf, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for (id, d) in &dist_of {
            let dn = d[x];
            if dn <= dm {
                nf.push(*id);
                if dn <= 1 {
                    b.push(*id);
                }
                if dn < dm {
                    t.push(*id);
                }
            }
        }
        out.push((g.ids[x], t, nf, b, dm));
    }
    out
}

/// A random graph's records as a booting mesh holds them, sparse to full: edges listed by one
/// end only (this node's too: a neighbour it lists over an edge that does not count yet),
/// listed ids without a record, parts this node (`nth(0)`) does not reach, more than 64
/// neighbours (two words of bits) every fifth round or so.
fn random_records(rng: &mut StdRng, round: usize) -> Vec<(PeerId, Vec<PeerId>)> {
    let id = nth;
    let n = match round % 5 {
        0 => rng.gen_range(2..8),
        1 => rng.gen_range(8..30),
        2 => rng.gen_range(60..90),
        _ => rng.gen_range(10..60),
    };
    let density: f64 = [0.05, 0.2, 0.5, 0.9, 1.0][rng.gen_range(0..5)];
    let one_sided: f64 = [0.0, 0.02, 0.2][rng.gen_range(0..3)];
    let mut lists: Vec<Vec<PeerId>> = vec![Vec::new(); n];
    for a in 0..n {
        for b in a + 1..n {
            if rng.gen_bool(density) {
                if !rng.gen_bool(one_sided) {
                    lists[a].push(id(b));
                }
                if !rng.gen_bool(one_sided) {
                    lists[b].push(id(a));
                }
            }
        }
        if rng.gen_bool(0.1) {
            lists[a].push(id(n + 1000)); // no record
        }
    }
    (0..n)
        .filter(|&i| i == 0 || !rng.gen_bool(0.05)) // some nodes' records not known yet
        .map(|i| (id(i), lists[i].clone()))
        .collect()
}

#[test]
fn the_level_walk_finds_the_sets_a_bfs_from_every_neighbour_finds() {
    let mut rng = StdRng::seed_from_u64(2960);
    let mut checked = 0;
    for round in 0..300 {
        let records = random_records(&mut rng, round);
        let me = nth(0);
        let r = ReversePaths::build(
            me,
            records.iter().map(|(o, l)| (o, l.as_slice())),
            |_| true,
            0,
        );
        let want = by_bfs_from_every_neighbour(me, &records);
        assert_eq!(r.len(), want.len(), "round {round}: origins");
        for (x, t, nf, b, hops) in want {
            assert_eq!(r.accepted(&x), Some(&t[..]), "round {round}: toward {x}");
            assert_eq!(
                r.not_farther(&x),
                Some(&nf[..]),
                "round {round}: not farther {x}"
            );
            assert_eq!(r.beside(&x), Some(&b[..]), "round {round}: beside {x}");
            assert_eq!(r.hops(&x), Some(hops), "round {round}: hops {x}");
            checked += 1;
        }
    }
    assert!(checked > 5_000, "only {checked} origins checked");
}
