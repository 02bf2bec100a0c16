//! Bounded degree (`max_links`, issue 29; the rules are in `shoal_proto::degree`): nodes that
//! all find each other by scouting keep about `max_links` links each, stay one connected
//! graph of small diameter, stop changing links once settled, refill after crashes and heal
//! a partition; without a cap the full mesh forms as before.

mod proto_sim;

use proto_sim::*;
use shoal_proto::degree::slack;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Live nodes' links as both ends see them (node index → neighbours' indices).
fn graph(sim: &Sim) -> Vec<Vec<usize>> {
    let n = sim.nodes.len();
    let index: HashMap<_, _> = (0..n).map(|i| (sim.id(i), i)).collect();
    (0..n)
        .map(|i| {
            if !sim.nodes[i].alive {
                return Vec::new();
            }
            sim.connected(i)
                .iter()
                .filter_map(|p| index.get(p).copied())
                .filter(|&j| sim.nodes[j].alive && sim.connected(j).contains(&sim.id(i)))
                .collect()
        })
        .collect()
}

/// Hops from `s` to every node (`usize::MAX`: not reached).
fn bfs(g: &[Vec<usize>], s: usize) -> Vec<usize> {
    let mut d = vec![usize::MAX; g.len()];
    d[s] = 0;
    let mut q = VecDeque::from([s]);
    while let Some(u) = q.pop_front() {
        for &v in &g[u] {
            if d[v] == usize::MAX {
                d[v] = d[u] + 1;
                q.push_back(v);
            }
        }
    }
    d
}

/// The diameter of the live nodes' graph; `None` when it is not connected.
fn diameter(sim: &Sim) -> Option<usize> {
    let g = graph(sim);
    let live: Vec<usize> = (0..g.len()).filter(|&i| sim.nodes[i].alive).collect();
    let mut worst = 0;
    for &s in &live {
        let d = bfs(&g, s);
        for &t in &live {
            if d[t] == usize::MAX {
                return None;
            }
            worst = worst.max(d[t]);
        }
    }
    Some(worst)
}

fn live(sim: &Sim) -> Vec<usize> {
    (0..sim.nodes.len())
        .filter(|&i| sim.nodes[i].alive)
        .collect()
}

/// Every live node knows every other live node as a member, links to at most `high`, and
/// the graph is connected.
fn settled(sim: &Sim, high: usize) -> bool {
    let live = live(sim);
    diameter(sim).is_some()
        && live
            .iter()
            .all(|&i| sim.connected(i).len() <= high && sim.members(i).len() + 1 == live.len())
}

/// Runs in steps of 500 ms until `cond`, at most `limit`; the time it took.
fn run_until(sim: &mut Sim, limit: Duration, cond: impl Fn(&Sim) -> bool) -> Option<Duration> {
    let step = Duration::from_millis(500);
    let mut t = Duration::ZERO;
    while t < limit {
        sim.run_for(step);
        t += step;
        if cond(sim) {
            return Some(t);
        }
    }
    None
}

/// Dials, refusals and closes of the link cap at every live node, and the peer tables' dials.
fn churn(sim: &Sim) -> Vec<(u64, u64)> {
    live(sim)
        .iter()
        .map(|&i| {
            let d = sim.nodes[i].core.degree_stats().expect("a cap is set");
            (
                d.fill_dials + d.heal_dials + d.links_refused + d.links_shed,
                sim.nodes[i].core.peers().stats().dials,
            )
        })
        .collect()
}

fn capped_mesh(seed: u64, n: usize, cap: usize) -> Sim {
    let mut sim = Sim::new(seed);
    for _ in 0..n {
        let mut c = cfg();
        c.scouting = true;
        c.max_links = cap;
        sim.add_node(c);
    }
    sim.start_all();
    sim
}

fn degrees(sim: &Sim) -> Vec<usize> {
    live(sim).iter().map(|&i| sim.connected(i).len()).collect()
}

#[test]
fn a_capped_mesh_of_32_settles_connected_with_a_small_diameter_and_no_churn() {
    let (n, cap) = (32, 6);
    let high = cap + slack(cap);
    let mut sim = capped_mesh(2901, n, cap);
    let took = run_until(&mut sim, Duration::from_secs(60), |s| settled(s, high));
    let d = degrees(&sim);
    assert!(took.is_some(), "not settled in 60 s: degrees {d:?}");
    // Settled: a quiet window without a single dial, refusal or close.
    sim.run_for(Duration::from_secs(10));
    let before = churn(&sim);
    sim.run_for(Duration::from_secs(30));
    assert_eq!(churn(&sim), before, "links changed in a quiet window");
    assert!(settled(&sim, high), "degrees {:?}", degrees(&sim));
    let diam = diameter(&sim).expect("connected");
    let d = degrees(&sim);
    let mean = d.iter().sum::<usize>() as f64 / d.len() as f64;
    eprintln!(
        "32 nodes, cap {cap}: settled after {took:?}, degrees min {} mean {mean:.1} max {}, diameter {diam}",
        d.iter().min().unwrap(),
        d.iter().max().unwrap()
    );
    assert!(diam <= 4, "diameter {diam}");
    assert!(
        d.iter().all(|&x| x >= 2),
        "every node keeps more than one link: {d:?}"
    );
    assert!(
        mean >= (cap - 1) as f64,
        "degrees filled near the cap: {d:?}"
    );
    for (i, node) in sim.nodes.iter().enumerate() {
        assert!(node.errors.is_empty(), "node {i}: {:?}", node.errors);
    }
}

#[test]
fn crashed_nodes_leave_the_rest_connected_and_degrees_refill() {
    let (n, cap) = (32, 6);
    let high = cap + slack(cap);
    let mut sim = capped_mesh(2902, n, cap);
    assert!(run_until(&mut sim, Duration::from_secs(60), |s| settled(s, high)).is_some());
    sim.run_for(Duration::from_secs(5));
    // The four best-linked nodes crash: their neighbours each lose a link.
    let mut by_degree: Vec<usize> = (0..n).collect();
    by_degree.sort_by_key(|&i| std::cmp::Reverse(sim.connected(i).len()));
    let crashed = &by_degree[..4];
    let hit: Vec<usize> = (0..n)
        .filter(|i| !crashed.contains(i))
        .filter(|&i| {
            crashed
                .iter()
                .any(|&c| sim.connected(i).contains(&sim.id(c)))
        })
        .collect();
    for &c in crashed {
        sim.crash_node(c);
    }
    let took = run_until(&mut sim, Duration::from_secs(60), |s| {
        settled(s, high) && live(s).iter().all(|&i| s.connected(i).len() >= cap - 1)
    });
    assert!(
        took.is_some(),
        "not refilled in 60 s: degrees {:?}",
        degrees(&sim)
    );
    let d = degrees(&sim);
    eprintln!(
        "after 4 crashes ({} neighbours hit): refilled in {took:?}, degrees {d:?}, diameter {:?}",
        hit.len(),
        diameter(&sim)
    );
    assert!(diameter(&sim).is_some_and(|x| x <= 5));
}

#[test]
fn a_mesh_cut_in_two_heals_when_the_cut_goes() {
    let (n, cap) = (24, 6);
    let high = cap + slack(cap);
    let mut sim = capped_mesh(2903, n, cap);
    assert!(run_until(&mut sim, Duration::from_secs(60), |s| settled(s, high)).is_some());
    let half = n / 2;
    for a in 0..half {
        for b in half..n {
            sim.partition(a, b);
        }
    }
    // Each side forms its own connected mesh (links across time out; a side split inside
    // heals itself).
    let side = |i: usize| if i < half { 0..half } else { half..n };
    let apart = run_until(&mut sim, Duration::from_secs(60), |s| {
        (0..n).all(|i| {
            let m = s.members(i);
            m.len() + 1 == half && side(i).all(|j| j == i || m.contains(&s.id(j)))
        })
    });
    assert!(apart.is_some(), "the sides did not settle apart");
    for a in 0..half {
        for b in half..n {
            sim.heal(a, b);
        }
    }
    let healed = run_until(&mut sim, Duration::from_secs(60), |s| settled(s, high));
    let d = degrees(&sim);
    assert!(healed.is_some(), "not healed in 60 s: degrees {d:?}");
    let heals: u64 = (0..n)
        .map(|i| sim.nodes[i].core.degree_stats().unwrap().heal_dials)
        .sum();
    eprintln!(
        "cut in two: apart after {apart:?}, one mesh again {healed:?} after the cut went, {heals} heal dials, degrees {d:?}, diameter {:?}",
        diameter(&sim)
    );
    // Which dial heals it is not the point: with membership digests on (the default since
    // they were merged) another dial across the healed cut (a fill dial or the peer table's
    // redial, not traced) came before any heal dial was due: healed after 2 s with 0 heal
    // dials, against 6 s and 13 with the periodic floods. The heal dial itself is covered by
    // `degree::tests`; what a user relies on, one mesh again and no churn, is asserted here.
    sim.run_for(Duration::from_secs(10));
    let before = churn(&sim);
    sim.run_for(Duration::from_secs(20));
    assert_eq!(
        churn(&sim),
        before,
        "links changed in a quiet window after the heal"
    );
}

#[test]
fn without_a_cap_scouting_still_builds_the_full_mesh() {
    let n = 12;
    let mut sim = Sim::new(2904);
    for _ in 0..n {
        let mut c = cfg();
        c.scouting = true;
        sim.add_node(c);
    }
    sim.start_all();
    let full = run_until(&mut sim, Duration::from_secs(20), |s| {
        (0..n).all(|i| s.connected(i).len() == n - 1)
    });
    assert!(full.is_some(), "degrees {:?}", degrees(&sim));
    assert!(sim.nodes[0].core.degree_stats().is_none());
}

/// The settled case over more seeds and a 40-node mesh with cap 8 (the storm's size), with
/// the same checks: `cargo test -p shoal-proto --test proto_degree -- --ignored --nocapture`.
#[test]
#[ignore]
fn seed_sweep() {
    for (seed, n, cap) in [
        (1, 32, 6),
        (2, 32, 6),
        (3, 32, 6),
        (4, 32, 6),
        (5, 40, 8),
        (6, 40, 8),
    ] {
        let high = cap + slack(cap);
        let mut sim = capped_mesh(seed, n, cap);
        let took = run_until(&mut sim, Duration::from_secs(60), |s| settled(s, high));
        sim.run_for(Duration::from_secs(10));
        let before = churn(&sim);
        sim.run_for(Duration::from_secs(20));
        let quiet = churn(&sim) == before;
        let d = degrees(&sim);
        let diam = diameter(&sim);
        eprintln!(
            "seed {seed}, {n} nodes, cap {cap}: settled after {took:?}, degrees {}..{} mean {:.1}, diameter {diam:?}, quiet {quiet}",
            d.iter().min().unwrap(),
            d.iter().max().unwrap(),
            d.iter().sum::<usize>() as f64 / n as f64
        );
        assert!(took.is_some() && quiet && diam.is_some_and(|x| x <= 4));
    }
}
