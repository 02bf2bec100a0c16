//! A Block publisher's waits and the slow-link rule that bounds them (`backpressure`, the
//! links' `LinkBudget`), driven with virtual time: DropNewest against Block, a link outpaced
//! by another declared slow, a relapse not waited out again, links jammed together (full at
//! one publish, or backed up when the wait began), a single congested link only pacing the
//! publisher, a wait moved to a dial race's winner, a wait on a link closed on its shard
//! while this shard still routes over it.

use super::*;

/// Two 60-byte frames published to A (room for 100 bytes): the second waits, on A.
fn second_frame_waits(s: &mut Sim) -> Box<Blocked> {
    s.publish(PeerId::ZERO, &[7; 60], s.at(1));
    s.publish(PeerId::ZERO, &[8; 60], s.at(1));
    let mut acts = s.take();
    let Some(ShardAction::Block(b)) = acts.pop() else {
        panic!("{acts:?}")
    };
    assert_eq!(b.link(), A);
    b
}

#[test]
fn a_full_link_makes_block_wait_and_drop_newest_drop() {
    // DropNewest: the second frame finds the queue full and is dropped, counted.
    let mut s = Sim::new(0, 1, OverflowPolicy::DropNewest);
    s.serve(A, PA, 100);
    s.publish(PeerId::ZERO, &[7; 60], s.at(1));
    s.publish(PeerId::ZERO, &[8; 60], s.at(1));
    assert!(s.take().is_empty(), "nothing to wait for");
    assert_eq!(s.stats().dropped_queue_full, 1);
    assert_eq!(frames(&s.written(A, s.at(1))).len(), 1);

    // Block: the second frame waits, and goes once the writer made room.
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let budget = s.serve(A, PA, 100);
    let b = second_frame_waits(&mut s);
    let Unblock::Wait(b, until) = s.core.unblock(b, s.at(2), &mut s.out) else {
        panic!("no room yet")
    };
    assert_eq!(
        until,
        s.at(101),
        "looks again when the link could be slow: `after` from the publish that found it full"
    );
    assert_eq!(s.stats().dropped_queue_full, 0);
    let listener = b.listen();
    let first = frames(&s.written(A, s.at(3)));
    assert_eq!(first[0].payload[0], 7);
    assert_eq!(budget.queued(), 0);
    drop(listener);
    assert!(matches!(
        s.core.unblock(b, s.at(4), &mut s.out),
        Unblock::Done
    ));
    let second = frames(&s.written(A, s.at(4)));
    assert_eq!(second[0].payload[0], 8);
    let st = s.stats();
    assert_eq!((st.frames_queued, st.dropped_queue_full), (2, 0));
}

#[test]
fn a_link_outpaced_by_another_is_declared_slow_and_not_waited_for() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let lossy = s.serve(A, PA, 100);
    s.serve_fast();
    s.publish(PA, &[1; 60], s.at(60));
    s.publish(PA, &[2; 60], s.at(60));
    let Some(ShardAction::Block(b)) = s.take().pop() else {
        panic!()
    };
    let Unblock::Wait(b, soon) = s.core.unblock(b, s.at(60), &mut s.out) else {
        panic!()
    };
    assert_eq!(soon, s.at(140), "looks again with a fifth of `after` left");
    // Woken early (some room elsewhere): still waiting for the same deadline.
    let Unblock::Wait(b, again) = s.core.unblock(b, s.at(90), &mut s.out) else {
        panic!()
    };
    assert_eq!(again, soon);
    let Unblock::Wait(b, until) = s.core.unblock(b, soon, &mut s.out) else {
        panic!("not slow yet")
    };
    assert_eq!(until, s.at(160));
    s.take();
    assert!(!lossy.is_slow() && lossy.is_slow_or_soon(), "slow soon");
    assert!(matches!(
        s.core.unblock(b, until, &mut s.out),
        Unblock::Done
    ));
    let acts = s.take();
    // The control plane is told (it stops listing the peer in its record meanwhile,
    // `control::slow`), and so is the application.
    let link = acts.iter().find_map(|a| match a {
        ShardAction::Report {
            msg: crate::cmd::ToControl::LinkSlow { link },
            ..
        } => Some(*link),
        _ => None,
    });
    assert_eq!(link, s.core.table.link_to(&PA), "{acts:?}");
    assert!(
        matches!(
            &acts[..],
            [
                ShardAction::Report { .. },
                ShardAction::Error(LinkError {
                    peer: Some(PA),
                    fault: LinkFault::SlowPeer,
                    ..
                })
            ]
        ),
        "{acts:?}"
    );
    assert_eq!((s.stats().slow_links, s.stats().dropped_slow_link), (1, 1));
    // Nobody waits for a slow link: the next message for it is dropped at once.
    s.publish(PA, &[3; 60], s.at(170));
    assert!(s.take().is_empty());
    assert_eq!(s.stats().dropped_slow_link, 2);
}

/// Drives a wait from a look at `t` ms as the driver does when no room appears, a look at
/// each deadline it names; returns when it ended (queued, or given up), in ms.
fn wait_out(s: &mut Sim, mut step: Unblock, t: u64) -> u64 {
    let mut t = s.at(t);
    for _ in 0..100 {
        match step {
            Unblock::Done => return (t - s.t0).as_millis() as u64,
            Unblock::Wait(b, until) => {
                t = until;
                step = s.core.unblock(b, until, &mut s.out);
            }
        }
    }
    panic!("still waiting after 100 looks")
}

/// Publishes two frames for A at `t`, the second of which waits; returns the driver's first
/// look at that wait.
fn jam(s: &mut Sim, t: u64) -> Unblock {
    s.publish(PA, &[1; 60], s.at(t));
    s.publish(PA, &[2; 60], s.at(t));
    let Some(ShardAction::Block(b)) = s.take().pop() else {
        panic!("no wait at {t} ms")
    };
    s.core.unblock(b, s.at(t), &mut s.out)
}

/// A link that drains and jams again soon after a slow period is not waited out again (only
/// a quarter of `after`, to measure its pace): every wait holds the publisher's other links
/// too (the fault suite's healthy subscriber stood still ~1 s per episode). Long after, it is
/// waited for as before.
#[test]
fn a_link_that_jams_again_soon_after_being_slow_is_not_waited_out_again() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let lossy = s.serve(A, PA, 100);
    let fast = s.serve_fast();
    // The first episode is waited out for `after` (100 ms here), then A is slow.
    let step = jam(&mut s, 60);
    assert_eq!(wait_out(&mut s, step, 60), 160);
    assert_eq!(s.stats().slow_links, 1);
    s.take();
    // A drains (no longer slow), then jams again 100 ms later and stays jammed: slow after a
    // quarter of `after`.
    s.written(A, s.at(200));
    assert!(!lossy.is_slow());
    let step = jam(&mut s, 300);
    assert!(
        matches!(step, Unblock::Wait(..)),
        "a relapse is looked at once more"
    );
    assert!(
        lossy.is_slow_or_soon() && !lossy.is_slow(),
        "a relapse's peer is unlisted from its first look"
    );
    assert_eq!(
        wait_out(&mut s, step, 300),
        325,
        "a relapse is not waited out for `after` again"
    );
    assert_eq!(s.stats().slow_links, 2);
    s.take();
    // Drained again at 400; a jam more than ten `after`s later is a new episode.
    s.written(A, s.at(400));
    fast.written(1 << 20, s.at(1400));
    let step = jam(&mut s, 1401);
    assert_eq!(
        wait_out(&mut s, step, 1401),
        1501,
        "long after, waited for a whole `after` again"
    );
    assert_eq!(s.stats().slow_links, 3);
}

/// A link that recovered, caught soon after its slow period in a burst that fills every link
/// (a publisher resuming after a wait), is not slow for that: it drains like the others. A
/// relapse is judged on its rate since the jam, which needs a moment to mean anything; slow at
/// the very first look, every such link was dropped for, and what the publisher sent before
/// the relays took over was lost to its subscriber (the fault suite: up to ~1 300 messages at
/// a subscriber whose loss had ended, when the cut host's wait ended).
#[test]
fn a_recovered_link_caught_in_a_burst_soon_after_being_slow_is_not_slow_for_it() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let lossy = s.serve(A, PA, 100);
    s.serve_fast();
    // A's first episode: waited out for `after` (100 ms here), then slow; then it catches up.
    let step = jam(&mut s, 60);
    wait_out(&mut s, step, 60);
    assert_eq!(s.stats().slow_links, 1);
    s.take();
    s.written(A, s.at(200));
    assert!(!lossy.is_slow());
    // 100 ms later a burst fills A (a relapse by the clock) ...
    let dropped = s.stats().dropped_slow_link;
    let Unblock::Wait(b, until) = jam(&mut s, 300) else {
        panic!("a relapse is given a moment to show its pace")
    };
    assert_eq!(until, s.at(325), "a quarter of `after`");
    // (Its peer is unlisted meanwhile: a few relay copies if it turns out needless.)
    assert!(lossy.is_slow_or_soon() && !lossy.is_slow());
    // ... and A drains at once: the frame goes, nothing is dropped, A is not slow, its peer
    // listed again.
    s.written(A, s.at(305));
    assert!(matches!(
        s.core.unblock(b, s.at(305), &mut s.out),
        Unblock::Done
    ));
    assert!(!lossy.is_slow_or_soon());
    assert_eq!(s.stats().slow_links, 1);
    assert_eq!(s.stats().dropped_slow_link, dropped);
    assert_eq!(frames(&s.written(A, s.at(306)))[0].payload[0], 2);
}

/// A publish that finds two links full waits for them one after the other (the driver
/// awaits its waits in order), but both congestion clocks start at the publish: the second
/// link is not waited out for a whole `after` once the first has been.
#[test]
fn links_jammed_together_are_waited_out_together() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 100);
    s.serve(LinkId(3), PC, 100);
    s.serve_fast();
    s.publish(PeerId::ZERO, &[1; 60], s.at(60));
    s.publish(PeerId::ZERO, &[2; 60], s.at(60));
    let blocked: Vec<Box<Blocked>> = s
        .take()
        .actions
        .into_iter()
        .filter_map(|a| match a {
            ShardAction::Block(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(blocked.len(), 2, "A and C are full");
    let mut blocked = blocked.into_iter();
    let first = blocked.next().unwrap();
    let step = s.core.unblock(first, s.at(60), &mut s.out);
    let until = wait_out(&mut s, step, 60);
    assert_eq!(until, 160);
    // The driver looks at the second wait only now: its link has been congested as long.
    let second = blocked.next().unwrap();
    assert!(matches!(
        s.core.unblock(second, s.at(until), &mut s.out),
        Unblock::Done
    ));
    assert_eq!(s.stats().slow_links, 2);
}

/// A link that is backed up but not yet full when the publisher begins to wait for another
/// is jammed with it: its clock starts with the wait, and once the first link is slow and the
/// publisher resumes, the second is not waited out for a whole `after` of its own (the fault
/// suite's two lossy links held the healthy subscriber ~1 s each, one after the other). A
/// link that drained to half meanwhile is waited for as usual.
#[test]
fn a_link_backed_up_while_the_publisher_waits_for_another_is_waited_out_with_it() {
    // One 60-byte message's frame, in bytes.
    let f = {
        let mut p = Sim::new(0, 1, OverflowPolicy::Block);
        let b = p.serve(A, PA, 1 << 20);
        p.publish(PeerId::ZERO, &[1; 60], p.at(0));
        b.queued()
    };
    for drains in [false, true] {
        let mut s = Sim::new(0, 1, OverflowPolicy::Block);
        s.serve(A, PA, f);
        // C takes two frames, more than half its bound, and not a third.
        let c = LinkId(3);
        let jammed = s.serve(c, PC, 2 * f + f / 2);
        s.serve_fast();
        s.publish(PeerId::ZERO, &[1; 60], s.at(60));
        s.publish(PeerId::ZERO, &[2; 60], s.at(60));
        let Some(ShardAction::Block(b)) = s.take().pop() else {
            panic!("A is full")
        };
        assert_eq!(b.link(), A);
        assert_eq!(jammed.queued(), 2 * f, "C took both: backed up, not full");
        let step = s.core.unblock(b, s.at(60), &mut s.out);
        if drains {
            s.written(c, s.at(100));
        }
        assert_eq!(wait_out(&mut s, step, 60), 160);
        assert_eq!(s.stats().slow_links, 1);
        s.take();
        // The publisher resumes: A is slow (dropped for), C is full.
        s.publish(PeerId::ZERO, &[3; 60], s.at(160));
        if drains {
            s.publish(PeerId::ZERO, &[4; 60], s.at(160));
            s.publish(PeerId::ZERO, &[5; 60], s.at(160));
        }
        let Some(ShardAction::Block(b)) = s.take().pop() else {
            panic!("C is full (drains: {drains})")
        };
        assert_eq!(b.link(), c);
        let step = s.core.unblock(b, s.at(160), &mut s.out);
        if drains {
            assert!(
                matches!(step, Unblock::Wait(..)),
                "a link that drained to half is waited for"
            );
            assert_eq!(
                wait_out(&mut s, step, 160),
                260,
                "for a whole `after` from its jam"
            );
        } else {
            assert!(
                matches!(step, Unblock::Done),
                "backed up since the first wait began: slow at once"
            );
            assert_eq!(s.stats().slow_links, 2);
        }
    }
}

#[test]
fn a_single_congested_link_is_never_slow_the_publisher_just_waits() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let a = s.serve(A, PA, 100);
    s.publish(PA, &[1; 60], s.at(0));
    s.publish(PA, &[2; 60], s.at(0));
    let Some(ShardAction::Block(mut b)) = s.take().pop() else {
        panic!()
    };
    for t in [0, 80, 100, 125, 150, 1000] {
        match s.core.unblock(b, s.at(t), &mut s.out) {
            Unblock::Wait(next, until) => {
                assert!(until > s.at(t));
                b = next;
            }
            Unblock::Done => panic!("gave up at {t} ms"),
        }
    }
    assert_eq!(s.stats().slow_links, 0);
    assert!(!a.is_slow_or_soon(), "never about to be slow either");
    assert!(s.take().is_empty(), "nothing reported");
}

/// A Block publisher waiting for room on a link that then loses a dial race waits for the
/// winner instead (its frame goes there, in order, once there is room): the loser's end
/// would have dropped it as unroutable.
#[test]
fn a_wait_on_a_dial_race_loser_moves_to_the_winner() {
    const WIN: LinkId = LinkId(3);
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let loser = s.serve(A, PA, 100);
    let b = second_frame_waits(&mut s);
    // The winner comes (taking the loser's queue), the loser is retired, then goes.
    let win = s.serve(WIN, PA, 100);
    let retire: ToShard<()> = ToShard::Retire { link: A };
    assert!(s.core.on_command(retire, s.at(2), &mut s.out).is_none());
    let (buf, _) = s.core.read_buffer(A).unwrap();
    s.core.on_eof(A, buf, s.at(2), &mut s.out);
    assert!(loser.is_closed());
    let b = match s.core.unblock(b, s.at(3), &mut s.out) {
        Unblock::Wait(b, _) => b,
        Unblock::Done => panic!("the winner holds the first frame: no room yet"),
    };
    assert_eq!(b.link(), WIN, "waits for the winner now");
    assert_eq!(frames(&s.written(WIN, s.at(4)))[0].payload[0], 7);
    assert!(win.queued() == 0);
    assert!(matches!(
        s.core.unblock(b, s.at(4), &mut s.out),
        Unblock::Done
    ));
    assert_eq!(frames(&s.written(WIN, s.at(5)))[0].payload[0], 8);
    assert_eq!(s.stats().dropped_no_route, 0);
}

/// A dial race's loser, owned by another shard, closes there (its peer closed it once it
/// sent on the winner) before this shard's table names the winner. A Block publish that
/// finds the loser's budget closed waits for this shard's table to change instead of
/// dropping the frame: the winner's `Install` wakes the wait and the frame goes to the
/// winner; an `Uninstall` (the peer gone), a stop (no table follows it) or `after` without a
/// change gives it up, counted.
#[test]
fn a_publish_on_a_link_closed_on_its_shard_waits_for_this_shards_table() {
    const WIN: LinkId = LinkId(3);
    for end in ["install", "uninstall", "stop", "nothing"] {
        let mut s = Sim::new(0, 2, OverflowPolicy::Block);
        let after = s.core.cfg.slow_link.after;
        let loser = Arc::new(LinkBudget::new(1 << 20, s.t0));
        s.install(A, PA, 1, &loser);
        loser.close();
        s.publish(PeerId::ZERO, b"abc", s.at(1));
        let mut acts = s.take();
        let Some(ShardAction::Block(b)) = acts.pop() else {
            panic!("{end}: waits, not dropped: {acts:?}")
        };
        assert_eq!(s.stats().dropped_no_route, 0);
        let mut room = Box::pin(b.listen());
        let Unblock::Wait(b, until) = s.core.unblock(b, s.at(2), &mut s.out) else {
            panic!("{end}: the table still routes over the loser: it waits");
        };
        assert_eq!(until, s.at(2) + after, "{end}: for `after` at most");
        let win = Arc::new(LinkBudget::new(1 << 20, s.t0));
        let at = match end {
            "install" => {
                s.install(WIN, PA, 1, &win);
                s.at(3)
            }
            "uninstall" => {
                let cmd: ToShard<()> = ToShard::Uninstall { peer: PA, link: A };
                assert!(s.core.on_command(cmd, s.at(3), &mut s.out).is_none());
                s.at(3)
            }
            "stop" => {
                let cmd: ToShard<()> = ToShard::Stop;
                assert!(s.core.on_command(cmd, s.at(3), &mut s.out).is_none());
                s.at(3)
            }
            _ => until,
        };
        if end != "nothing" {
            use std::future::Future;
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(
                room.as_mut().poll(&mut cx).is_ready(),
                "{end}: the table's change wakes the wait"
            );
        }
        assert!(matches!(s.core.unblock(b, at, &mut s.out), Unblock::Done));
        let acts = s.take();
        let sent: Vec<LinkId> = acts
            .iter()
            .filter_map(|a| match a {
                ShardAction::Post {
                    to: 1,
                    msg: ShardToShard::Transmit { link, .. },
                    ..
                } => Some(*link),
                _ => None,
            })
            .collect();
        if end == "install" {
            assert_eq!(sent, [WIN], "the frame goes to the winner");
            assert_eq!(s.stats().dropped_no_route, 0);
            assert_eq!(win.queued(), 58 + 3);
        } else {
            assert!(sent.is_empty(), "{end}: {acts:?}");
            assert_eq!(s.stats().dropped_no_route, 1, "{end}: given up, counted");
        }
        if end == "stop" {
            s.publish(PeerId::ZERO, b"def", s.at(4));
            assert!(s.take().is_empty(), "stopping: no wait");
            assert_eq!(s.stats().dropped_no_route, 2);
        }
    }
}
