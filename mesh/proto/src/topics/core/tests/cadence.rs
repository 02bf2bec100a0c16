//! The announce cycle's period (issue 29): it doubles while nothing changes up to
//! `announce_idle_period` when every participant holds this node's lease by link, stays
//! within a third of the lease otherwise, and comes back to `announce_period` after a
//! change; and the lease of a neighbour is held while a link to it is up.

use super::*;

/// The times of `c`'s periodic cycles from `from` to `until` (its timer driven as the
/// control core drives it), with the frames each cycle flooded.
fn cycles(c: &mut TopicsCore, from: Instant, until: Instant) -> Vec<Instant> {
    let mut at = Vec::new();
    let mut t = from;
    while t < until {
        t = c.poll_timeout().max(t);
        if t >= until {
            break;
        }
        c.handle_timeout(t);
        if floods(c)
            .iter()
            .any(|(f, except)| f.parts > 0 && except.is_none())
        {
            at.push(t);
        }
    }
    at
}

fn gaps(at: &[Instant]) -> Vec<u64> {
    at.windows(2)
        .map(|w| (w[1] - w[0]).as_millis() as u64)
        .collect()
}

/// Node 1 and node 2 linked directly by link 5, each admitted at the other; `holds`: each
/// end's peer set Hello feature bit 4.
fn pair(cfg: TopicsConfig, holds: bool, now: Instant) -> (TopicsCore, TopicsCore) {
    let mut a = core_with(1, cfg.clone(), now);
    let mut b = core_with(2, cfg, now);
    let l = LinkId(5);
    a.link_up_with(l, id(2), holds);
    b.link_up_with(l, id(1), holds);
    a.handle_timeout(now);
    b.handle_timeout(now);
    let to_b: Vec<TopicsOutput> = std::iter::from_fn(|| a.poll_output()).collect();
    let to_a: Vec<TopicsOutput> = std::iter::from_fn(|| b.poll_output()).collect();
    for (out, rx) in [(to_b, &mut b), (to_a, &mut a)] {
        for o in out {
            if let TopicsOutput::Send { frame, .. } = o {
                rx.on_discovery(l, frame, false, now);
            }
        }
    }
    assert_eq!(a.remotes_len(), 1);
    assert_eq!(b.remotes_len(), 1);
    // Each knows the mesh is the two of them.
    a.routes_due(&membership(0, 2, &[(0, 1)], now), now);
    b.routes_due(&membership(1, 2, &[(0, 1)], now), now);
    (a, b)
}

fn idle_cfg() -> TopicsConfig {
    TopicsConfig {
        announce_period: SEC,
        announce_idle_period: SEC * 10,
        participant_lease: SEC * 10,
        ..TopicsConfig::default()
    }
}

#[test]
fn an_idle_node_heard_only_by_lease_holding_neighbours_stretches_its_cycle_to_the_idle_period() {
    let now = Instant::now();
    let (mut a, _b) = pair(idle_cfg(), true, now);
    let at = cycles(&mut a, now, now + SEC * 60);
    let g = gaps(&at);
    // From the start: 1 s, then each period twice the last.
    assert_eq!(&g[..4], &[1000, 2000, 4000, 8000], "{g:?}");
    assert!(g[4..].iter().all(|&ms| ms == 10_000), "{g:?}");
    assert_eq!(a.announce_period_now(), SEC * 10);
    // A new endpoint goes out at once and the cycle is back to a 1 s period after it.
    let t = *at.last().unwrap() + SEC * 3;
    writer(&mut a, "t", &[], t);
    floods(&mut a);
    let after = cycles(&mut a, t, t + SEC * 20);
    assert_eq!(after[0] - t, SEC, "{:?}", gaps(&after));
    assert_eq!(&gaps(&after)[..4], &[1000, 2000, 4000, 8000]);
}

#[test]
fn a_participant_that_does_not_hold_the_lease_keeps_the_cycle_within_a_third_of_it() {
    let now = Instant::now();
    // Its peer predates feature bit 4: it renews A's lease only from A's frames.
    let (mut a, _b) = pair(idle_cfg(), false, now);
    let at = cycles(&mut a, now, now + SEC * 60);
    let g = gaps(&at);
    assert!(g.iter().all(|&ms| ms <= 3333), "{g:?}");
    assert_eq!(g.last(), Some(&3333));
    // A member of the mesh without a link here (a line 1–2–3) counts the same, even when
    // every neighbour holds the lease: node 3 renews it only from frames.
    let (mut a, _b) = pair(idle_cfg(), true, now);
    a.routes_due(&membership(0, 3, &[(0, 1), (1, 2)], now), now);
    let g = gaps(&cycles(&mut a, now, now + SEC * 60));
    assert!(g.iter().all(|&ms| ms <= 3333), "{g:?}");
    assert_eq!(g.last(), Some(&3333));
    // And a mesh whose every member holds it stretches again.
    a.routes_due(&membership(0, 2, &[(0, 1)], now), now + SEC * 60);
    let g = gaps(&cycles(&mut a, now + SEC * 60, now + SEC * 120));
    assert_eq!(g.last(), Some(&10_000), "{g:?}");
}

#[test]
fn a_linked_neighbours_lease_is_held_while_the_link_is_up_and_runs_out_after_it() {
    let now = Instant::now();
    let cfg = TopicsConfig {
        participant_lease: SEC * 3,
        ..idle_cfg()
    };
    let (a, mut b) = pair(cfg, true, now);
    drop(a);
    // A says nothing more for a minute: B holds it while the link is up.
    let mut t = now;
    while t < now + SEC * 60 {
        t = b.poll_timeout().max(t + Duration::from_millis(1));
        b.handle_timeout(t);
        floods(&mut b);
    }
    assert_eq!(b.remotes_len(), 1, "held by the link");
    assert_eq!(b.stats().participants_expired, 0);
    // The link goes: the lease runs from the last renewal (at most one pass before).
    b.link_down(LinkId(5));
    let gone_by = t + SEC * 3 + SEC * 2;
    while b.remotes_len() == 1 {
        t = b.poll_timeout().max(t + Duration::from_millis(1));
        assert!(
            t <= gone_by,
            "expired within the lease and one pass of the link's end"
        );
        b.handle_timeout(t);
        floods(&mut b);
    }
    assert!(t >= now + SEC * 60 + SEC * 2, "not before its lease");
    assert_eq!(b.stats().participants_expired, 1);
}

#[test]
fn reverse_paths_are_rebuilt_at_most_once_per_planning_interval_and_the_timer_catches_up() {
    // A forming mesh changes the membership graph every round; each rebuild used to run
    // per round (60 nodes at once: 40 % of the machine, `bench/notes/start60.md`).
    let now = Instant::now();
    let (mut a, _b) = pair(idle_cfg(), true, now);
    let built = a.stats().paths_rebuilt;
    let gap = idle_cfg().route_plan_interval;
    let mut t = now + SEC;
    let mut edges = vec![(0, 1)];
    for k in 2..40 {
        edges.push((1, k));
        a.routes_due(&membership(0, k + 1, &edges, now), t);
        t += Duration::from_micros(100);
    }
    assert!(
        a.stats().paths_rebuilt - built <= 1,
        "{} rebuilds within {gap:?}",
        a.stats().paths_rebuilt - built
    );
    // The last shape waits for the timer, then is built.
    let m = membership(0, 40, &edges, now);
    let due = a.plan_timeout().expect("a rebuild waits");
    assert!(due <= t + gap);
    a.routes_due(&m, due);
    let after = a.stats().paths_rebuilt;
    a.routes_due(&m, due + gap);
    assert_eq!(a.stats().paths_rebuilt, after, "current: nothing waits");
}

#[test]
fn the_control_cores_paths_are_taken_when_every_node_is_topic_capable() {
    // The control core builds the reverse paths of the whole graph every time it changes;
    // the topics core's own build over the capable nodes is the same paths when every node
    // is capable, so it takes them (no build, no wait for its interval) when they are of the
    // graph's current shape, and waits for the control core's next build when not.
    let now = Instant::now();
    let (mut a, _b) = pair(idle_cfg(), true, now);
    let gap = idle_cfg().route_plan_interval;
    let paths = |m: &MemberGraph| Arc::new(ReversePaths::of_graph(id(1), m, 2));
    let (built, shared) = (a.stats().paths_rebuilt, a.stats().paths_shared);
    let linked = membership(0, 2, &[(0, 1)], now);
    let apart = membership(0, 2, &[], now);
    assert_ne!(linked.shape(), apart.shape());

    // Paths of another shape are not taken, and nothing is built: the control core's next
    // build is the one for this shape (its timer, not this core's, fires for it).
    let mut t = now + SEC;
    a.offer_paths(paths(&linked));
    a.routes_due(&apart, t);
    assert_eq!(a.stats().paths_rebuilt, built);
    assert_eq!(a.stats().paths_shared, shared);
    assert_eq!(a.plan_timeout(), None);
    // Those of the current shape are taken.
    t += Duration::from_micros(100);
    a.offer_paths(paths(&apart));
    a.routes_due(&apart, t);
    assert_eq!(a.stats().paths_shared, shared + 1);
    assert_eq!(a.stats().paths_rebuilt, built);
    assert_eq!(a.plan_timeout(), None, "nothing waits");

    // Without an offer (the control core's check is off) it builds its own, once per
    // interval.
    t += Duration::from_micros(100);
    a.routes_due(&linked, t);
    assert_eq!(a.stats().paths_rebuilt, built + 1);
    t += Duration::from_micros(100);
    a.routes_due(&apart, t);
    assert_eq!(a.stats().paths_rebuilt, built + 1);
    assert!(a.plan_timeout().is_some(), "a build waits for the interval");

    // A third node that never announced a participant (a plain multimaster node, say):
    // the whole graph's paths would count it, so they are not taken; its own are built.
    t += gap;
    let three = membership(0, 3, &[(0, 1), (1, 2)], now);
    a.offer_paths(paths(&three));
    a.routes_due(&three, t);
    assert_eq!(a.stats().paths_shared, shared + 1);
    assert_eq!(a.stats().paths_rebuilt, built + 2);
}
