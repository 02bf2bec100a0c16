//! A dial race's hand-over on the shard core, driven with virtual time and `C = ()`: the
//! retired loser read as the winner, which took its queue and writes after the loser's write
//! in progress; the winner read only once the loser has ended; what another shard reserved on
//! the loser going to the winner; and when the loser closes.

use super::*;

/// The winner of a dial race is installed (`A` to PA loses to `WIN`) and the loser retired:
/// each end resolves the race when its own second handshake ends, so the peer may send on
/// the loser a while longer. What comes on it is the peer's all the same, handled as come on
/// the winner: delivered once, relayed on, never sent back to the peer. The loser's queue
/// went to the winner, ahead of what is routed since, with its budget bytes, and the winner
/// wrote nothing before the loser's write in progress was on the socket: the stream leaves
/// in the order it was published.
#[test]
fn a_retired_dial_race_loser_is_read_as_the_winner_which_took_its_queue() {
    const WIN: LinkId = LinkId(3);
    let (mut s, _) = Sim::two_links();
    let loser = s.core.link_budget(A).unwrap();
    s.publish(PeerId::ZERO, b"writing", s.at(1));
    let mut bufs = Vec::new();
    let step = s.core.next_write(A, &mut bufs, s.at(1), &mut s.out);
    assert_eq!(step, WriteStep::Write, "a write in progress on the loser");
    s.publish(PeerId::ZERO, b"before", s.at(1));
    let win = s.serve(WIN, PA, 1 << 20);
    let retire: ToShard<()> = ToShard::Retire { link: A };
    assert!(s.core.on_command(retire, s.at(1), &mut s.out).is_none());
    s.publish(PeerId::ZERO, b"after", s.at(1));
    assert!(
        s.written(WIN, s.at(2)).is_empty(),
        "the winner waits for the loser's write"
    );
    assert!(
        !s.core.write_pending(WIN),
        "and its writer sleeps meanwhile"
    );
    let n: usize = bufs.iter().map(Bytes::len).sum();
    s.core.on_written(A, n, s.at(2));
    assert_eq!(
        loser.queued(),
        0,
        "the loser's bytes went with its queue or its write"
    );
    let sent: Vec<_> = frames(&s.written(WIN, s.at(2)))
        .into_iter()
        .map(|d| d.payload)
        .collect();
    assert_eq!(sent, [&b"before"[..], b"after"], "in the order published");
    assert_eq!(win.queued(), 0);
    assert!(frames(&s.written(A, s.at(2))).is_empty());
    assert_eq!(frames(&s.written(B, s.at(2))).len(), 3);
    s.take();

    let mut wire = BytesMut::new();
    wire.extend_from_slice(&data_frame(PC, PeerId::ZERO, 1, 8, b"late"));
    Frame::Heartbeat.encode(&mut wire).unwrap();
    assert!(s.feed(A, &wire, s.at(3)));
    assert_eq!(deliveries(&s.take()).len(), 1, "delivered once");
    assert_eq!(frames(&s.written(B, s.at(3))).len(), 1, "relayed on");
    assert!(
        frames(&s.written(WIN, s.at(3))).is_empty(),
        "not back to its peer"
    );
    // The same message again on the winner (read once the loser has ended): a duplicate, as
    // it would be from one link.
    assert!(s.feed(WIN, &data_frame(PC, PeerId::ZERO, 1, 8, b"late"), s.at(4)));
    let (buf, _) = s.core.read_buffer(A).unwrap();
    s.core.on_eof(A, buf, s.at(4), &mut s.out);
    assert!(s.read_on(WIN, s.at(4)));
    assert!(deliveries(&s.take()).is_empty());
    assert_eq!(s.stats().dropped_duplicate, 1);
    assert_eq!(s.stats().dropped_link_closing, 0);
}

/// Each end of a dial race moves its stream to the winner as it resolves the race, and the
/// receiver reads two connections: the winner's first frames may be read before the loser's
/// last. So the winner's reader holds what it read while the loser is served (closing the
/// loser: its peer now sends on the winner), the loser is read to its end, as the winner,
/// and then the winner reads on: the application gets the stream in the order it was sent,
/// whether the winner was installed before the loser's `Retire` or after. A loser that does
/// not end holds the winner back for `race_hold` at most (the winner's timer ends the hold),
/// and the waiting winner is not taken for dead.
#[test]
fn a_dial_race_winner_is_read_after_its_loser_has_ended() {
    const WIN: LinkId = LinkId(3);
    let ends_after_goodbye = |s: &mut Sim, link, ms| {
        let mut bufs = Vec::new();
        loop {
            match s.core.next_write(link, &mut bufs, s.at(ms), &mut s.out) {
                WriteStep::Write => {
                    let n: usize = bufs.drain(..).map(|b| b.len()).sum();
                    s.core.on_written(link, n, s.at(ms));
                }
                step => return step == WriteStep::Shutdown,
            }
        }
    };
    let sent = |n: u64| data_frame(PC, PeerId::ZERO, n, 8, format!("m{n}").as_bytes());
    let order = |t: &Handed| -> Vec<String> {
        deliveries(t)
            .iter()
            .map(|d| String::from_utf8(d.payload.to_vec()).unwrap())
            .collect()
    };
    for installed_first in [true, false] {
        let (mut s, _) = Sim::two_links();
        if installed_first {
            // The winner came second here: installed, then the loser retired.
            s.serve(WIN, PA, 1 << 20);
            let retire: ToShard<()> = ToShard::Retire { link: A };
            assert!(s.core.on_command(retire, s.at(1), &mut s.out).is_none());
        } else {
            // Only the winner's `Install` so far (the loser replaced in the table).
            s.serve(WIN, PA, 1 << 20);
        }
        s.take();
        assert!(s.feed(WIN, &sent(3), s.at(2)), "held, not closed");
        assert!(order(&s.take()).is_empty(), "the winner waits");
        assert!(
            ends_after_goodbye(&mut s, A, 2),
            "the loser is closed: its peer sends on the winner"
        );
        assert!(s.feed(A, &[sent(1), sent(2)].concat(), s.at(3)));
        assert!(s.feed(WIN, &sent(4), s.at(3)));
        assert_eq!(order(&s.take()), ["m1", "m2"], "the loser's frames first");
        let (buf, _) = s.core.read_buffer(A).unwrap();
        s.core.on_eof(A, buf, s.at(4), &mut s.out);
        let t = s.take();
        assert!(
            t.actions
                .iter()
                .any(|a| matches!(a, ShardAction::ReadOn(l) if *l == WIN)),
            "the loser ended: the winner reads on ({:?})",
            t.actions
        );
        assert!(s.read_on(WIN, s.at(4)));
        assert_eq!(
            order(&s.take()),
            ["m3", "m4"],
            "then the winner's, in order"
        );
        let on_b: Vec<_> = frames(&s.written(B, s.at(4)))
            .into_iter()
            .map(|d| d.payload)
            .collect();
        assert_eq!(on_b, [&b"m1"[..], b"m2", b"m3", b"m4"], "relayed in order");
        assert!(s.feed(WIN, &sent(5), s.at(5)), "no longer held");
        assert_eq!(order(&s.take()), ["m5"]);
    }

    // The loser does not end: the winner reads on after `race_hold`, kept alive meanwhile.
    let (mut s, _) = Sim::two_links();
    s.serve(WIN, PA, 1 << 20);
    let hold = s.core.cfg.race_hold;
    assert!(s.feed(WIN, &sent(1), s.at(1)));
    assert!(order(&s.take()).is_empty());
    let mut t = s.at(1);
    let ended = loop {
        t = s.core.link_timeout(WIN, t).expect("the winner is served");
        assert!(t <= s.at(1) + hold + TIMER_GRAIN, "the hold ends by then");
        assert!(
            s.core.on_link_timer(WIN, t, &mut s.out),
            "not taken for dead"
        );
        if s.take()
            .actions
            .iter()
            .any(|a| matches!(a, ShardAction::ReadOn(l) if *l == WIN))
        {
            break t;
        }
    };
    assert!(ended >= s.at(1) + hold);
    assert!(s.read_on(WIN, ended));
    assert_eq!(order(&s.take()), ["m1"]);
}

/// What another shard reserved on a dial race's loser before its table named the winner
/// reaches the owner shard after the switch: it goes to the winner, behind what the loser
/// passed on, whether only the winner's `Install` came (the loser replaced), the control
/// plane's `Retire` too, or the loser is already gone; the reservation moves with it.
#[test]
fn a_transmit_reserved_on_a_replaced_or_gone_loser_goes_to_the_winner() {
    const WIN: LinkId = LinkId(3);
    // The bytes are reserved on the loser by the other shard, when it routes the frame.
    let reserve = |budget: &LinkBudget| {
        budget
            .try_reserve(crate::wire::DATA_HEADER_LEN + 1)
            .unwrap();
    };
    let transmit = |s: &mut Sim, n: u64, ms| {
        let h = DataHeader::new(&ME, &PeerId::ZERO, &MsgId::new(&ME, n), 8, 1).unwrap();
        let t = ShardToShard::Transmit {
            link: A,
            out: Out::Data(h, Bytes::copy_from_slice(&[n as u8])),
            frames: 1,
            originated: true,
        };
        s.core.on_hop(t, s.at(ms), &mut s.out);
    };
    let (mut s, _) = Sim::two_links();
    let loser = s.core.link_budget(A).unwrap();
    let win = s.serve(WIN, PA, 1 << 20);
    for _ in 0..3 {
        reserve(&loser);
    }
    transmit(&mut s, 1, 1); // the winner installed, the control plane's `Retire` not yet here
    let retire: ToShard<()> = ToShard::Retire { link: A };
    assert!(s.core.on_command(retire, s.at(1), &mut s.out).is_none());
    transmit(&mut s, 2, 1); // `Retire` too
                            // The loser goes (its peer closed it); a transmit reserved before still finds the winner.
    let (buf, _) = s.core.read_buffer(A).unwrap();
    s.core.on_eof(A, buf, s.at(2), &mut s.out);
    assert!(s.core.link_budget(A).is_none(), "gone");
    transmit(&mut s, 3, 2);
    let sent: Vec<u8> = frames(&s.written(WIN, s.at(3)))
        .iter()
        .map(|d| d.payload[0])
        .collect();
    assert_eq!(sent, [1, 2, 3], "all on the winner, in order");
    assert!(frames(&s.written(A, s.at(3))).is_empty());
    assert_eq!(s.stats().dropped_no_route, 0);
    assert_eq!(
        win.queued(),
        0,
        "the winner's reservations were released as written"
    );
}

/// A retired loser closes politely (Goodbye, then its end) as soon as its peer sends on the
/// winner (the peer has the winner up, so it resolved the race too), else at `retire_grace`;
/// at once, without a Goodbye of its own, when its peer closes it first; and at a stop.
#[test]
fn a_retired_loser_closes_when_its_peer_sends_on_the_winner_or_closes_it_or_at_its_deadline_or_a_stop(
) {
    const WIN: LinkId = LinkId(3);
    let goodbye_written = |s: &mut Sim, link, ms| {
        let mut b = BytesMut::from(&s.written(link, s.at(ms))[..]);
        let mut bye = false;
        while let Some(f) = crate::wire::take_frame(&mut b, u32::MAX).unwrap() {
            bye |= matches!(f, Frame::Goodbye);
        }
        bye
    };
    let retire = |s: &mut Sim, ms| {
        s.serve(WIN, PA, 1 << 20);
        let cmd: ToShard<()> = ToShard::Retire { link: A };
        assert!(s.core.on_command(cmd, s.at(ms), &mut s.out).is_none());
    };

    // The peer sends on the winner.
    let (mut s, _) = Sim::two_links();
    retire(&mut s, 1);
    assert!(!goodbye_written(&mut s, A, 1), "waits for its peer");
    assert!(s.feed(WIN, &data_frame(PC, PeerId::ZERO, 1, 8, b"x"), s.at(2)));
    assert!(
        goodbye_written(&mut s, A, 2),
        "closed once its peer sent on the winner"
    );

    // Nothing from the peer: closed at the deadline (the link's timer).
    let (mut s, _) = Sim::two_links();
    retire(&mut s, 1);
    let linger = s.core.cfg.retire_grace;
    let due = s.core.link_timeout(A, s.at(1)).unwrap();
    assert!(due <= s.at(1) + linger + TIMER_GRAIN, "due by the deadline");
    let mut heartbeat = BytesMut::new();
    Frame::Heartbeat.encode(&mut heartbeat).unwrap();
    let mut t = s.at(1);
    while !goodbye_written(&mut s, A, 1) {
        t = s.core.link_timeout(A, t).expect("served until closed");
        assert!(
            t <= s.at(1) + linger + TIMER_GRAIN,
            "closed by the deadline"
        );
        // The peer's heartbeats keep the loser alive meanwhile.
        assert!(s.feed(A, &heartbeat, t));
        assert!(s.core.on_link_timer(A, t, &mut s.out));
    }

    // The peer closes it first: its Goodbye ends the loser; the winner serves on.
    let (mut s, _) = Sim::two_links();
    retire(&mut s, 1);
    let mut bye = BytesMut::new();
    Frame::Goodbye.encode(&mut bye).unwrap();
    assert!(
        !s.feed(A, &bye, s.at(2)),
        "the peer's Goodbye ends the loser"
    );
    assert!(s.core.link_budget(A).is_none());
    assert!(s.feed(WIN, &data_frame(PC, PeerId::ZERO, 2, 8, b"next"), s.at(3)));
    assert_eq!(deliveries(&s.take()).len(), 1, "the winner serves on");

    // A stop closes it at once (the control plane, which closes the links it knows, already
    // forgot it).
    let (mut s, _) = Sim::two_links();
    retire(&mut s, 1);
    let stop: ToShard<()> = ToShard::Stop;
    assert!(s.core.on_command(stop, s.at(2), &mut s.out).is_none());
    assert!(goodbye_written(&mut s, A, 2), "closed by the stop");
}
