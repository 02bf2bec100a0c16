//! A new capable neighbour's catch-up (issue 29): this node's cycle on the new link only,
//! numbered as a cycle of its own, which its receiver completes and prunes by, passes on to
//! nobody, and which leaves the periodic cycle's schedule alone.

use super::*;

fn outputs(c: &mut TopicsCore) -> Vec<TopicsOutput> {
    std::iter::from_fn(|| c.poll_output()).collect()
}

#[test]
fn a_new_link_gets_a_complete_cycle_of_its_own_and_the_periodic_schedule_holds() {
    let now = Instant::now();
    let mut a = core(1, now);
    let mut b = core(2, now);
    let kept = writer(&mut a, "t", &[], now);
    let gone = writer(&mut a, "u", &[], now);
    // B hears both writers through a relay, then A removes one and B misses the withdrawal.
    for (f, _) in floods(&mut a) {
        deliver(&mut b, f, now);
    }
    assert!(b.graph().endpoint_id(&guid_of(&gone)).is_some());
    a.remove_endpoint(gone, now).unwrap();
    floods(&mut a);
    floods(&mut b);
    let periodic = a.poll_timeout();
    assert!(periodic > now);
    // A direct link A–B comes up: the catch-up is due at once, on that link only.
    let l = LinkId(7);
    a.link_up(l, id(2), true);
    b.link_up(l, id(1), true);
    assert!(a.poll_timeout() <= now);
    let t = now + Duration::from_millis(3);
    assert!(a.announce_due(t));
    a.handle_timeout(t);
    let out = outputs(&mut a);
    let mut frames = Vec::new();
    for o in out {
        let TopicsOutput::Send { frame, links } = o else {
            panic!("only the new link's catch-up goes out, nothing flooded: {o:?}");
        };
        assert_eq!(links, vec![l]);
        assert_eq!(frame.ttl, 1, "not passed on");
        frames.push(frame);
    }
    assert_eq!(frames.len(), 1);
    assert_eq!((frames[0].part, frames[0].parts), (0, 1));
    assert_eq!(
        a.poll_timeout(),
        periodic,
        "the periodic cycle keeps its schedule"
    );
    assert!(!a.announce_due(t));
    // B takes it as A's whole cycle: the missed withdrawal is repaired, and nothing is
    // passed on.
    for f in frames {
        b.on_discovery(l, f, false, t);
    }
    assert_eq!(b.stats().cycles_completed, 1);
    assert!(b.graph().endpoint_id(&guid_of(&gone)).is_none());
    assert!(b.graph().endpoint_id(&guid_of(&kept)).is_some());
    assert!(floods(&mut b).is_empty());
    // The periodic cycle floods as before, to every link (the new one included).
    a.handle_timeout(periodic);
    let out = outputs(&mut a);
    assert!(!out.is_empty());
    assert!(out
        .iter()
        .all(|o| matches!(o, TopicsOutput::Flood { frame, except: None } if frame.ttl == 8)));
}

#[test]
fn a_link_that_goes_before_its_catch_up_gets_none_and_the_periodic_cycle_takes_the_rest() {
    let now = Instant::now();
    let mut a = core(1, now);
    writer(&mut a, "t", &[], now);
    floods(&mut a);
    a.link_up(LinkId(7), id(2), true);
    a.link_up(LinkId(8), id(3), true);
    a.link_down(LinkId(7));
    a.handle_timeout(now);
    let out = outputs(&mut a);
    assert!(!out.is_empty());
    assert!(out
        .iter()
        .all(|o| matches!(o, TopicsOutput::Send { links, .. } if *links == vec![LinkId(8)])));
    // A link up in the same tick as the periodic cycle gets that cycle and no catch-up.
    let periodic = a.poll_timeout();
    a.link_up(LinkId(9), id(4), true);
    a.handle_timeout(periodic);
    let out = outputs(&mut a);
    assert!(!out.is_empty());
    assert!(out
        .iter()
        .all(|o| matches!(o, TopicsOutput::Flood { except: None, .. })));
    assert!(a.poll_timeout() > periodic);
}
