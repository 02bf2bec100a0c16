//! The per-connection state machine: handshake checks, heartbeat only when idle, liveness from
//! any received frame (busy receivers and busy senders), timeouts, Goodbye, extension gating.

use bytes::Bytes;
use shoal_proto::wire::{
    Data, Discovery, DiscoveryEntry, Features, Frame, Hello, Samples, ShoalExtension,
    PROTOCOL_VERSION,
};
use shoal_proto::{CloseReason, FrameAction, Link, LinkEvent, LinkId, LinkState, LinkTimers};
use shoal_proto::{MsgId, PeerId};
use std::time::{Duration, Instant};

const ME: PeerId = PeerId([1; 16]);
const PEER: PeerId = PeerId([2; 16]);

fn timers() -> LinkTimers {
    LinkTimers {
        heartbeat_interval: Duration::from_millis(1000),
        heartbeat_timeout: Duration::from_millis(3000),
        handshake_timeout: Duration::from_millis(2000),
    }
}

fn hello(id: PeerId) -> Hello {
    Hello {
        node_id: id,
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 7000,
        group_name: "default".into(),
        nonce: 42,
        eph_pub_key: None,
        identity: None,
        shoal: None,
    }
}

fn ms(t: Instant, n: u64) -> Instant {
    t + Duration::from_millis(n)
}

fn data() -> Frame {
    Frame::Data(Data {
        src: PEER,
        dst: PeerId::ZERO,
        msg_id: MsgId::new(&PEER, 1),
        ttl: 8,
        payload: Bytes::from_static(b"x"),
    })
}

fn events(l: &mut Link) -> Vec<LinkEvent> {
    std::iter::from_fn(|| l.poll_event()).collect()
}

fn transmits(l: &mut Link) -> Vec<Frame> {
    std::iter::from_fn(|| l.poll_transmit()).collect()
}

fn established(t0: Instant) -> Link {
    let mut l = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
    assert!(matches!(transmits(&mut l)[..], [Frame::HelloAck(_)]));
    assert_eq!(
        l.on_frame(&Frame::Hello(hello(PEER)), t0),
        FrameAction::Consumed
    );
    assert!(matches!(
        events(&mut l)[..],
        [LinkEvent::Established {
            peer: PEER,
            listen_port: 7000,
            shoal: None
        }]
    ));
    l
}

#[test]
fn acceptor_sends_helloack_at_once_dialer_sends_hello_on_connect() {
    let t0 = Instant::now();
    let mut a = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
    assert!(matches!(transmits(&mut a)[..], [Frame::HelloAck(ref h)] if h.node_id == ME));
    let mut d = Link::dialer(LinkId(2), hello(ME), timers(), t0);
    assert!(transmits(&mut d).is_empty());
    assert_eq!(d.state(), LinkState::Connecting);
    d.on_connected(ms(t0, 5));
    assert!(matches!(transmits(&mut d)[..], [Frame::Hello(_)]));
    // Neither waits: the dialer is established by the acceptor's HelloAck.
    d.on_frame(&Frame::HelloAck(hello(PEER)), ms(t0, 6));
    assert_eq!(d.state(), LinkState::Established);
}

#[test]
fn handshake_mismatches_close_with_typed_reasons() {
    let t0 = Instant::now();
    let cases: Vec<(Hello, CloseReason)> = vec![
        (
            Hello {
                protocol_version: 2,
                ..hello(PEER)
            },
            CloseReason::VersionMismatch { ours: 1, theirs: 2 },
        ),
        (
            Hello {
                group_name: "other".into(),
                ..hello(PEER)
            },
            CloseReason::GroupMismatch {
                theirs: "other".into(),
            },
        ),
        (
            Hello {
                eph_pub_key: Some([7; 32]),
                ..hello(PEER)
            },
            CloseReason::SecuredModeMismatch {
                ours: false,
                theirs: true,
            },
        ),
        (hello(ME), CloseReason::SelfConnection),
    ];
    for (h, reason) in cases {
        let mut l = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
        assert_eq!(l.on_frame(&Frame::Hello(h), t0), FrameAction::Close);
        assert_eq!(events(&mut l), vec![LinkEvent::Closed(reason)]);
        assert_eq!(l.state(), LinkState::Closed);
    }
    // A secured node meeting a plaintext one.
    let secured = Hello {
        eph_pub_key: Some([3; 32]),
        ..hello(ME)
    };
    let mut l = Link::acceptor(LinkId(1), secured, timers(), t0);
    l.on_frame(&Frame::Hello(hello(PEER)), t0);
    assert_eq!(
        events(&mut l),
        vec![LinkEvent::Closed(CloseReason::SecuredModeMismatch {
            ours: true,
            theirs: false
        })]
    );
}

#[test]
fn secured_link_waits_for_auth_confirm() {
    let t0 = Instant::now();
    let mine = Hello {
        eph_pub_key: Some([3; 32]),
        ..hello(ME)
    };
    let theirs = Hello {
        eph_pub_key: Some([4; 32]),
        ..hello(PEER)
    };
    let mut l = Link::acceptor(LinkId(1), mine.clone(), timers(), t0);
    l.on_frame(&Frame::Hello(theirs.clone()), t0);
    assert!(
        matches!(&events(&mut l)[..], [LinkEvent::AuthRequired { hello }] if **hello == theirs)
    );
    assert_eq!(l.state(), LinkState::AwaitingAuth);
    // Data before the AuthConfirm verified is a protocol violation.
    let mut early = Link::acceptor(LinkId(2), mine.clone(), timers(), t0);
    early.on_frame(&Frame::Hello(theirs.clone()), t0);
    assert_eq!(early.on_frame(&data(), t0), FrameAction::Close);
    l.auth_confirmed(t0);
    assert!(matches!(
        events(&mut l)[..],
        [LinkEvent::Established { peer: PEER, .. }]
    ));
    let mut bad = Link::acceptor(LinkId(3), mine, timers(), t0);
    bad.on_frame(&Frame::Hello(theirs), t0);
    events(&mut bad);
    bad.auth_failed(t0);
    assert_eq!(
        events(&mut bad),
        vec![LinkEvent::Closed(CloseReason::AuthFailed)]
    );
}

#[test]
fn handshake_timeout() {
    let t0 = Instant::now();
    let mut l = Link::dialer(LinkId(1), hello(ME), timers(), t0);
    assert_eq!(l.poll_timeout(), Some(ms(t0, 2000)));
    l.handle_timeout(ms(t0, 1999));
    assert_eq!(l.state(), LinkState::Connecting);
    l.handle_timeout(ms(t0, 2000));
    assert_eq!(
        events(&mut l),
        vec![LinkEvent::Closed(CloseReason::HandshakeTimeout)]
    );
}

#[test]
fn heartbeat_only_when_idle() {
    let t0 = Instant::now();
    let mut l = established(t0);
    transmits(&mut l);
    // The driver sends Data every 400 ms: no heartbeat ever, whatever the timer says.
    for k in 1..=20 {
        let now = ms(t0, 400 * k);
        l.on_sent(now);
        l.on_frame(&Frame::Heartbeat, now); // the peer stays alive too
        l.handle_timeout(now);
        assert!(transmits(&mut l).is_empty(), "no heartbeat on a busy link");
    }
    assert_eq!(l.stats().heartbeats_sent, 0);
    // Idle from 8000 ms on: one heartbeat after exactly one interval, then one per interval.
    assert_eq!(l.poll_timeout(), Some(ms(t0, 9000)));
    l.handle_timeout(ms(t0, 8999));
    assert!(transmits(&mut l).is_empty());
    l.on_frame(&Frame::Heartbeat, ms(t0, 9000));
    l.handle_timeout(ms(t0, 9000));
    assert_eq!(transmits(&mut l), vec![Frame::Heartbeat]);
    l.handle_timeout(ms(t0, 9500));
    assert!(transmits(&mut l).is_empty());
}

#[test]
fn dead_after_heartbeat_timeout_of_silence() {
    let t0 = Instant::now();
    let mut l = established(t0);
    events(&mut l);
    l.handle_timeout(ms(t0, 2999));
    assert_ne!(l.state(), LinkState::Closed);
    l.handle_timeout(ms(t0, 3000));
    assert_eq!(
        events(&mut l),
        vec![LinkEvent::Closed(CloseReason::HeartbeatTimeout)]
    );
}

#[test]
fn a_busy_sender_without_heartbeats_stays_alive() {
    // The peer is streaming Data and therefore never sends Heartbeat: Data is liveness.
    let t0 = Instant::now();
    let mut l = established(t0);
    for k in 1..=100 {
        let now = ms(t0, 500 * k);
        assert_eq!(l.on_frame(&data(), now), FrameAction::Process);
        l.handle_timeout(now);
    }
    assert_eq!(l.state(), LinkState::Established);
    // Partial bytes of one huge frame count as well, a chunk at a time.
    for k in 101..=120 {
        l.on_bytes_read(64 * 1024, ms(t0, 500 * k));
        l.handle_timeout(ms(t0, 500 * k));
    }
    assert_eq!(l.state(), LinkState::Established);
}

/// A lossy path in retransmission backoff delays the peer's frames for seconds while the
/// peer still takes what this node sends: the heartbeat timeout closed such links, and with
/// them everything their queue and kernel held (at the node's defaults, every message the
/// fault suite's lossy subscribers missed). A silent link whose peer keeps acknowledging new
/// data lives on, up to `DELIVERING_GRACE` heartbeat timeouts of silence; once the
/// acknowledgements stop, it is dead a heartbeat timeout after the last one.
#[test]
fn a_silent_peer_that_takes_what_it_is_sent_is_dead_only_after_the_grace() {
    use shoal_proto::link::DELIVERING_GRACE;
    let t0 = Instant::now();
    let grace = 3000 * u64::from(DELIVERING_GRACE);
    let mut l = established(t0);
    events(&mut l);
    let mut t = 0;
    while l.state() == LinkState::Established {
        t += 500;
        assert!(t <= grace, "still open after {t} ms");
        l.on_delivered(ms(t0, t));
        l.handle_timeout(ms(t0, t));
        if let Some(at) = l.poll_timeout() {
            assert!(at <= ms(t0, grace), "{t}: looks again by the grace");
        }
    }
    assert_eq!(t, grace, "dead at the grace, not before");
    assert_eq!(
        events(&mut l),
        vec![LinkEvent::Closed(CloseReason::HeartbeatTimeout)]
    );
    // The acknowledgements stop at 4 s: dead at 7 s, not at 3 s.
    let mut l = established(t0);
    for t in (500..=4000).step_by(500) {
        l.on_delivered(ms(t0, t));
        l.handle_timeout(ms(t0, t));
    }
    l.handle_timeout(ms(t0, 6999));
    assert_eq!(l.state(), LinkState::Established);
    assert_eq!(l.poll_timeout(), Some(ms(t0, 7000)));
    l.handle_timeout(ms(t0, 7000));
    assert_eq!(l.state(), LinkState::Closed);
    // A frame starts the grace again.
    let mut l = established(t0);
    for t in (500..=20_000).step_by(500) {
        if t == 10_000 {
            l.on_frame(&Frame::Heartbeat, ms(t0, t));
        }
        l.on_delivered(ms(t0, t));
        l.handle_timeout(ms(t0, t));
    }
    assert_eq!(l.state(), LinkState::Established);
    l.handle_timeout(ms(t0, 10_000 + grace));
    assert_eq!(l.state(), LinkState::Closed);
    // Bytes short of progress after the last progress: a trickle, stalled at the timeout
    // whatever is acknowledged. A partial frame read with the last progress is not one.
    let mut l = established(t0);
    l.on_frame(&Frame::Heartbeat, ms(t0, 500));
    l.on_bytes_read(100, ms(t0, 500));
    for t in (1000..=2500).step_by(500) {
        l.on_delivered(ms(t0, t));
        l.handle_timeout(ms(t0, t));
    }
    l.handle_timeout(ms(t0, 3500));
    assert_eq!(
        l.state(),
        LinkState::Established,
        "a partial tail with the progress"
    );
    l.on_bytes_read(1, ms(t0, 3600));
    l.on_delivered(ms(t0, 3600));
    l.handle_timeout(ms(t0, 3600));
    assert_eq!(
        events(&mut l).last(),
        Some(&LinkEvent::Closed(CloseReason::Stalled))
    );
}

/// A peer trickling a frame (1 byte every 0.7 s) used to keep its link, and the buffer of its
/// partial frame, forever: any byte counted as liveness. Now it is closed as stalled after
/// the heartbeat timeout, while a slow but real transfer (PROGRESS_BYTES per timeout) lives.
#[test]
fn a_trickle_inside_a_frame_is_closed_as_stalled() {
    let t0 = Instant::now();
    let mut l = established(t0);
    events(&mut l);
    let mut t = 0;
    while l.state() == LinkState::Established {
        t += 700;
        assert!(t <= 3700, "still open after {t} ms of trickle");
        l.on_bytes_read(1, ms(t0, t));
        l.handle_timeout(ms(t0, t));
    }
    assert_eq!(
        events(&mut l),
        vec![LinkEvent::Closed(CloseReason::Stalled)]
    );

    let mut slow = established(t0);
    for k in 1..=40 {
        // PROGRESS_BYTES in 1 KiB reads, one every 0.5 s: ~2 KiB/s.
        slow.on_bytes_read(1024, ms(t0, 500 * k));
        slow.handle_timeout(ms(t0, 500 * k));
    }
    assert_eq!(slow.state(), LinkState::Established);
    const { assert!(shoal_proto::PROGRESS_BYTES <= 4096) };
}

#[test]
fn a_busy_receiver_reads_its_backlog_before_judging_liveness() {
    // The receiver's loop stalls for 10 s while the peer keeps sending; when it wakes up it
    // first reads what is queued in the socket (the driver's ordering rule), then runs timers.
    let t0 = Instant::now();
    let mut l = established(t0);
    let wake = ms(t0, 10_000);
    for _ in 0..5 {
        l.on_frame(&data(), wake);
    }
    l.handle_timeout(wake);
    assert_eq!(l.state(), LinkState::Established);
    // Whereas a peer that really went silent is declared dead.
    l.handle_timeout(ms(t0, 13_000));
    assert_eq!(l.state(), LinkState::Closed);
}

#[test]
fn goodbye_closes_and_local_close_sends_goodbye() {
    let t0 = Instant::now();
    let mut l = established(t0);
    assert_eq!(l.on_frame(&Frame::Goodbye, t0), FrameAction::Close);
    assert_eq!(
        events(&mut l),
        vec![LinkEvent::Closed(CloseReason::Goodbye)]
    );
    let mut l = established(t0);
    transmits(&mut l);
    l.close(true, t0);
    assert_eq!(transmits(&mut l), vec![Frame::Goodbye]);
    assert_eq!(events(&mut l), vec![LinkEvent::Closed(CloseReason::Local)]);
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.on_frame(&data(), t0), FrameAction::Close);
}

#[test]
fn data_before_handshake_and_second_hello_are_violations() {
    let t0 = Instant::now();
    let mut l = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
    assert_eq!(l.on_frame(&data(), t0), FrameAction::Close);
    assert!(matches!(
        events(&mut l)[..],
        [LinkEvent::Closed(CloseReason::ProtocolViolation(_))]
    ));
    let mut l = established(t0);
    assert_eq!(
        l.on_frame(&Frame::Hello(hello(PEER)), t0),
        FrameAction::Close
    );
}

fn discovery() -> Frame {
    Frame::Discovery(Discovery {
        origin: PEER,
        seq: 1,
        ttl: 8,
        cycle: 0,
        part: 0,
        parts: 0,
        entries: vec![DiscoveryEntry::Withdraw([3; 16])],
    })
}

fn samples() -> Frame {
    Frame::Samples(Samples::new(8, [4; 16], 1, [b"s"]).unwrap())
}

/// Topic frames are payload frames like Data: handed on once established, a protocol
/// violation before, and liveness either way (a peer streaming samples needs no heartbeat).
#[test]
fn topic_frames_are_payload_frames() {
    let t0 = Instant::now();
    let mut l = established(t0);
    for k in 1..=20 {
        let now = ms(t0, 500 * k);
        let action = match k % 3 {
            0 => l.on_frame(&discovery(), now),
            1 => l.on_frame(&samples(), now),
            _ => l.on_samples(now),
        };
        assert_eq!(action, FrameAction::Process);
        l.handle_timeout(now);
    }
    assert_eq!(l.state(), LinkState::Established);
    assert_eq!(
        l.stats().frames_received,
        21,
        "the Hello and 20 topic frames"
    );

    for early in [discovery(), samples()] {
        let mut l = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
        assert_eq!(l.on_frame(&early, t0), FrameAction::Close);
        assert!(matches!(
            events(&mut l)[..],
            [LinkEvent::Closed(CloseReason::ProtocolViolation(_))]
        ));
    }
    let mut l = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
    assert_eq!(l.on_samples(t0), FrameAction::Close);
    assert_eq!(l.state(), LinkState::Closed);
    assert_eq!(l.on_samples(t0), FrameAction::Close, "closed stays closed");
}

#[test]
fn extended_frames_only_to_peers_that_said_so() {
    let t0 = Instant::now();
    let plain = established(t0);
    assert!(plain.can_send_frame_type(8));
    assert!(!plain.can_send_frame_type(9));
    let ext = ShoalExtension::new(1, Features::EXTENDED_FRAMES);
    let mut l = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
    l.on_frame(
        &Frame::Hello(Hello {
            shoal: Some(ext.clone()),
            ..hello(PEER)
        }),
        t0,
    );
    assert_eq!(l.peer_shoal(), Some(&ext));
    assert!(l.can_send_frame_type(9));
    let mut l = Link::acceptor(LinkId(1), hello(ME), timers(), t0);
    l.on_frame(
        &Frame::Hello(Hello {
            shoal: Some(ShoalExtension::new(1, Features::NONE)),
            ..hello(PEER)
        }),
        t0,
    );
    assert!(
        !l.can_send_frame_type(9),
        "a Shoal peer without the feature bit gets v1 types only"
    );
}
