//! The links of the shard core, driven with virtual time and `C = ()`: the writer's wake-ups,
//! what a closing, closed or lingering link does with what still arrives, teardown
//! accounting, a stop's flush, secured records, and malformed input (a dial race's hand-over:
//! `races.rs`).

use super::*;

/// Whether `l` was notified (polled once, without waiting).
fn notified(l: &mut std::pin::Pin<Box<event_listener::EventListener>>) -> bool {
    use std::future::Future;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    l.as_mut().poll(&mut cx).is_ready()
}

/// A writer that went idle is woken by the next frame queued for it, once; while it has
/// work it is not notified per frame (each notification is a fence and a mutex), and it
/// still writes every frame.
#[test]
fn an_idle_writer_is_woken_once_by_new_work_and_a_busy_one_not_per_frame() {
    let (mut s, b) = Sim::two_links();
    assert!(s.written(B, s.at(0)).is_empty(), "B's writer is idle");
    let mut idle = Box::pin(b.wake.listen());
    assert!(s.feed(A, &data_frame(PC, PeerId::ZERO, 1, 8, b"one"), s.at(1)));
    assert!(notified(&mut idle), "the idle writer hears of its work");

    // Woken, not yet written: more frames queue without more notifications.
    let mut busy = Box::pin(b.wake.listen());
    for n in 2..=4 {
        assert!(s.feed(A, &data_frame(PC, PeerId::ZERO, n, 8, b"more"), s.at(1)));
    }
    assert!(
        !notified(&mut busy),
        "a writer with work is not notified per frame"
    );
    assert_eq!(frames(&s.written(B, s.at(2))).len(), 4, "nothing was lost");

    // Idle again (a writer holds one listener at a time): the next frame wakes it again.
    drop((idle, busy));
    let mut again = Box::pin(b.wake.listen());
    assert!(s.feed(A, &data_frame(PC, PeerId::ZERO, 5, 8, b"five"), s.at(3)));
    assert!(notified(&mut again));
    assert_eq!(frames(&s.written(B, s.at(3))).len(), 1);
}

/// The Data lane of a plaintext link runs the link's step like every other frame: while the
/// link closes politely (its peer has no other link here) what the peer still sends is
/// counted and dropped, neither delivered nor forwarded; a Data frame behind the peer's
/// Goodbye in the same read ends the link before it is routed.
#[test]
fn data_on_a_closing_or_closed_link_is_neither_delivered_nor_forwarded() {
    let (mut s, _) = Sim::two_links();
    let close: ToShard<()> = ToShard::Close {
        link: A,
        goodbye: true,
    };
    assert!(s.core.on_command(close, s.at(1), &mut s.out).is_none());
    assert!(s.feed(A, &data_frame(PC, PeerId::ZERO, 1, 8, b"late"), s.at(2)));
    assert!(deliveries(&s.take()).is_empty());
    assert!(frames(&s.written(B, s.at(2))).is_empty(), "not forwarded");
    assert_eq!((s.stats().delivered, s.stats().frames_in), (0, 1));
    assert_eq!(s.stats().dropped_link_closing, 1, "counted");

    // On B: the peer's Goodbye, then a Data frame in the same read.
    let mut wire = BytesMut::new();
    Frame::Goodbye.encode(&mut wire).unwrap();
    wire.extend_from_slice(&data_frame(PC, PeerId::ZERO, 2, 8, b"after"));
    assert!(!s.feed(B, &wire, s.at(3)), "the Goodbye ends the link");
    assert!(deliveries(&s.take()).is_empty());
    assert_eq!(s.stats().delivered, 0);
}

#[test]
fn teardown_counts_queued_and_in_flight_frames_and_frees_their_bytes() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let budget = s.serve(A, PA, 1 << 20);
    s.take();
    for _ in 0..3 {
        s.publish(PeerId::ZERO, b"in flight", s.at(1));
    }
    let mut bufs = Vec::new();
    assert_eq!(
        s.core.next_write(A, &mut bufs, s.at(1), &mut s.out),
        WriteStep::Write
    );
    for _ in 0..2 {
        s.publish(PeerId::ZERO, b"queued", s.at(2));
    }
    assert!(budget.queued() > 0);
    // The write fails (or the peer resets) before it completes.
    s.core.on_link_lost(A, s.at(3), &mut s.out);
    assert_eq!(s.stats().dropped_link_closed, 5);
    assert_eq!(s.stats().links_closed, 1);
    assert_eq!(budget.queued(), 0);
    assert!(budget.is_closed());
    let acts = s.take();
    assert!(
        matches!(
            &acts[..],
            [
                ShardAction::Ended(A, _),
                ShardAction::Report {
                    msg: ToControl::LinkClosed { link: A },
                    busy: IfBusy::Detach
                }
            ]
        ),
        "{acts:?}"
    );
    assert!(s.core.read_buffer(A).is_none(), "forgotten");
    // Reserved bytes that reach a gone link come back and are counted.
    let b2 = Arc::new(LinkBudget::new(1000, s.t0));
    b2.try_reserve(70).unwrap();
    s.install(B, PB, 0, &b2);
    let h = DataHeader::new(&ME, &PeerId::ZERO, &MsgId::new(&ME, 1), 8, 12).unwrap();
    let t = ShardToShard::Transmit {
        link: B,
        out: Out::Data(h, Bytes::from_static(&[0; 12])),
        frames: 1,
        originated: true,
    };
    s.core.on_hop(t, s.at(4), &mut s.out);
    assert_eq!(b2.queued(), 0);
    assert_eq!(s.stats().dropped_no_route, 1);
}

#[test]
fn a_stop_waits_for_the_links_to_flush_then_closes_the_rest() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.take();
    s.core.on_command(ToShard::<()>::Stop, s.at(0), &mut s.out);
    assert!(s.take().is_empty(), "a link is still up");
    assert_eq!(s.core.poll_timeout(), s.at(1000));
    s.core.handle_timeout(s.at(1000), &mut s.out);
    let acts = s.take();
    assert!(matches!(
        acts.last(),
        Some(ShardAction::Report {
            msg: ToControl::Stopped(0),
            ..
        })
    ));
    assert!(acts.iter().any(|a| matches!(a, ShardAction::Ended(A, _))));
}

#[test]
fn a_secured_link_opens_records_in_place_and_a_forged_one_closes_only_it() {
    let key = [5u8; 32];
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    let limit = 1 << 16;
    let pair = (
        RecordSealer::new(&key, limit),
        RecordOpener::new(&key, limit),
    );
    s.serve_with(A, PA, 1 << 20, Some(pair));
    s.take();
    let mut peer = RecordSealer::new(&key, limit);
    let mut q = VecDeque::new();
    for i in 0..2 {
        let f = data_frame(PC, ME, i, 8, b"secret");
        q.push_back(Out::Raw(Bytes::from(f), 0, 0));
    }
    let mut wire = BytesMut::new();
    seal_batch(
        &mut q,
        &mut peer,
        &mut wire,
        &mut Taken::default(),
        DEFAULT_RECORD_BYTES,
    )
    .unwrap();
    // The records arrive in two reads, cut mid-record.
    let cut = wire.len() / 2;
    assert!(s.feed(A, &wire[..cut], s.at(1)));
    assert!(s.feed(A, &wire[cut..], s.at(1)));
    let acts = s.take();
    assert_eq!(deliveries(&acts).len(), 2);
    // A tampered record: this link goes, with a Crypto error.
    let mut q = VecDeque::from([Out::Raw(Bytes::from(data_frame(PC, ME, 3, 8, b"x")), 0, 0)]);
    let mut wire = BytesMut::new();
    seal_batch(
        &mut q,
        &mut peer,
        &mut wire,
        &mut Taken::default(),
        DEFAULT_RECORD_BYTES,
    )
    .unwrap();
    let last = wire.len() - 1;
    wire[last] ^= 1;
    assert!(!s.feed(A, &wire, s.at(2)));
    assert_eq!(s.stats().record_failures, 1);
    assert!(s.take().iter().any(|a| matches!(
        a,
        ShardAction::Error(LinkError {
            fault: LinkFault::Crypto,
            ..
        })
    )));
    // What this side writes is sealed: the peer opens it.
    let mut s2 = Sim::new(0, 1, OverflowPolicy::Block);
    let pair = (
        RecordSealer::new(&key, limit),
        RecordOpener::new(&key, limit),
    );
    s2.serve_with(B, PB, 1 << 20, Some(pair));
    s2.publish(PeerId::ZERO, b"out", s2.at(1));
    let sealed = s2.written(B, s2.at(1));
    let mut rr = RecordReader::new(RecordOpener::new(&key, limit), &sealed);
    rr.decrypt().unwrap();
    let got = frames(rr.plaintext());
    assert_eq!(&got[0].payload[..], b"out");
}

#[test]
fn garbage_closes_the_link_it_came_on_with_a_malformed_error() {
    let (mut s, _) = Sim::two_links();
    assert!(!s.feed(A, &[0, 0, 0, 1, 0xee], s.at(1)));
    assert_eq!(s.stats().malformed_frames, 1);
    let acts = s.take();
    assert!(matches!(
        &acts[..],
        [
            ShardAction::Ended(A, _),
            ShardAction::Error(LinkError {
                peer: Some(PA),
                fault: LinkFault::Malformed,
                ..
            }),
            ShardAction::Report { .. }
        ]
    ));
    assert!(s.core.read_buffer(B).is_some(), "the other link stays");
}

/// A link that sent its Goodbye and FIN stays (read, what comes discarded) until its peer
/// closes too, which ends it without an error, or until the linger passes: closing at the FIN
/// could reset a peer that has not read everything yet.
#[test]
fn a_closed_link_lingers_until_its_peer_closes_or_the_linger_passes() {
    let (mut s, _) = Sim::two_links();
    let mut bufs = Vec::new();
    for link in [A, B] {
        let close = ToShard::<()>::Close {
            link,
            goodbye: true,
        };
        s.core.on_command(close, s.at(0), &mut s.out);
        assert_eq!(
            s.core.next_write(link, &mut bufs, s.at(1), &mut s.out),
            WriteStep::Write,
            "the Goodbye"
        );
        let n = bufs.iter().map(Bytes::len).sum();
        bufs.clear();
        s.core.on_written(link, n, s.at(1));
        assert_eq!(
            s.core.next_write(link, &mut bufs, s.at(1), &mut s.out),
            WriteStep::Shutdown
        );
        s.core.on_write_shutdown(link, s.at(2));
    }
    assert!(
        !s.take().iter().any(|a| matches!(a, ShardAction::Ended(..))),
        "both stay for their peers"
    );
    // A's peer still sends a frame (discarded), then closes: A ends, with no error.
    let (mut buf, _) = s.core.read_buffer(A).unwrap();
    buf.extend_from_slice(&data_frame(PA, ME, 1, 4, b"late"));
    let n = buf.len();
    s.core.on_read(A, buf, n, s.at(3));
    assert_eq!(
        s.core.read_frames(A, s.at(3), &mut s.out),
        ReadStep::NeedBytes
    );
    let (buf, _) = s.core.read_buffer(A).unwrap();
    s.core.on_eof(A, buf, s.at(4), &mut s.out);
    let acts = s.take();
    assert!(acts.iter().any(|a| matches!(a, ShardAction::Ended(A, _))));
    assert!(!acts.iter().any(|a| matches!(a, ShardAction::Error(_))));
    assert_eq!(
        s.stats().delivered,
        0,
        "what a closing link reads is discarded"
    );
    // B's peer never closes: B ends when the linger (the heartbeat timeout) passes.
    let linger = MeshConfig::default().heartbeat_timeout;
    assert!(
        s.core.poll_timeout() <= s.at(2) + linger,
        "the timer is armed for it"
    );
    s.core.handle_timeout(s.at(2) + linger, &mut s.out);
    assert!(s
        .take()
        .iter()
        .any(|a| matches!(a, ShardAction::Ended(B, _))));
    assert_eq!(s.stats().links_closed, 2);
}

/// Reads back to back are a busy link's; a read [`READ_REST`] or more after the one before
/// came after a quiet spell, and the driver may then move the link's buffer out of a large
/// block kept from busier times (`mesh/tests/node_link_memory.rs`).
#[test]
fn a_read_after_a_quiet_spell_is_rested_and_back_to_back_reads_are_not() {
    let (mut s, _) = Sim::two_links();
    let mut hb = Vec::new();
    Frame::Heartbeat.encode(&mut hb).unwrap();
    assert!(!s.core.read_rested(A), "no read yet");
    assert!(s.feed(A, &hb, s.at(1)));
    assert!(!s.core.read_rested(A), "a first read has none before it");
    assert!(s.feed(A, &hb, s.at(2)));
    assert!(!s.core.read_rested(A), "1 ms after the one before");
    let later = s.at(2) + READ_REST;
    assert!(s.feed(A, &hb, later));
    assert!(s.core.read_rested(A), "after a quiet spell");
    assert!(s.feed(A, &hb, later));
    assert!(!s.core.read_rested(A), "busy again");
    assert!(!s.core.read_rested(LinkId(99)), "no such link");
}
