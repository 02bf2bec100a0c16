//! The event queue's tests: the hub's admission and release of room (events and bytes, a
//! property test of their accounting) and the receiver's hand-out, on one hub without a node.
//! Length: one subject (the queue both ends share); each test builds its own hub.

use super::hub::{BYTE_CREDIT_CHUNK, CREDIT_CHUNK};
use super::*;
use crate::node::stats::Counters;
use shoal_proto::shard::SampleRun;
use shoal_proto::wire::Samples;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

impl EventHub {
    /// What a shard's delivery sink does with a Message event first.
    fn try_emit_message(&self, ev: Event, outbox: &Outbox) -> Result<(), Event> {
        self.run_callbacks(&ev);
        self.try_queue_message(ev, outbox)
    }

    /// What a shard does with a Message event: try, and wait for room if need be.
    async fn emit_message(
        &self,
        ev: Event,
        counters: &Counters,
        outbox: &Outbox,
        on_wait: impl FnMut(bool),
    ) {
        if let Err(ev) = self.try_emit_message(ev, outbox) {
            let try_queue = |ev, o: &Outbox| self.try_queue_message(ev, o);
            self.queue_waiting(ev, counters, outbox, on_wait, try_queue)
                .await;
        }
    }
}

/// A byte ceiling out of the way, for the tests that are not about it.
const NO_BYTE_CEILING: usize = usize::MAX / 2;

/// A hub of `capacity` events, no callbacks, no byte ceiling to speak of.
fn hub(capacity: usize) -> Arc<EventHub> {
    Arc::new(EventHub::new(capacity, NO_BYTE_CEILING, Vec::new()))
}

fn joined(n: u8) -> Event {
    Event::MemberJoined {
        peer: PeerId([n; 16]),
    }
}

fn message(n: u8) -> Event {
    Event::Message {
        from: PeerId([n; 16]),
        payload: Bytes::from_static(b"x"),
        broadcast: true,
    }
}

#[test]
fn nothing_is_queued_without_a_receiver_and_overflow_is_counted() {
    let hub = hub(4);
    let c = Counters::default();
    hub.emit_control(joined(1), &c);
    let mut rx = EventReceiver::new(hub.clone());
    assert_eq!(
        rx.try_recv(),
        None,
        "events before subscribing are not queued"
    );
    for n in 0..10 {
        hub.emit_control(joined(n), &c);
    }
    assert_eq!(c.snapshot().dropped_event_queue_full, 6);
    assert_eq!(rx.try_recv(), Some(joined(0)), "order kept, newest dropped");
    assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Some(joined(1)));
}

/// Issue 15 item 12: a receiver never sees a `PeerDisconnected` whose `PeerConnected` the
/// full queue dropped; callbacks see both.
#[test]
fn a_disconnect_whose_connect_was_dropped_is_dropped_too() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let cb: Callback = {
        let seen = seen.clone();
        Arc::new(move |e: &Event| seen.lock().unwrap().push(e.clone()))
    };
    let hub = Arc::new(EventHub::new(4, NO_BYTE_CEILING, vec![cb]));
    let c = Counters::default();
    let mut rx = EventReceiver::new(hub.clone());
    for n in 0..4 {
        hub.emit_control(joined(n), &c);
    }
    let (p, q) = (PeerId([7; 16]), PeerId([8; 16]));
    hub.emit_control(Event::PeerConnected { peer: p }, &c);
    for n in 0..4 {
        assert_eq!(rx.try_recv(), Some(joined(n)));
    }
    hub.emit_control(Event::PeerConnected { peer: q }, &c);
    hub.emit_control(Event::PeerDisconnected { peer: p }, &c);
    hub.emit_control(Event::PeerDisconnected { peer: q }, &c);
    // p's connect was lost to the full queue, so its disconnect is withheld; q pairs up.
    assert_eq!(rx.try_recv(), Some(Event::PeerConnected { peer: q }));
    assert_eq!(rx.try_recv(), Some(Event::PeerDisconnected { peer: q }));
    assert_eq!(rx.try_recv(), None);
    assert_eq!(c.snapshot().dropped_event_queue_full, 2);
    // Reconnected later, p pairs up again.
    hub.emit_control(Event::PeerConnected { peer: p }, &c);
    hub.emit_control(Event::PeerDisconnected { peer: p }, &c);
    assert_eq!(rx.try_recv(), Some(Event::PeerConnected { peer: p }));
    assert_eq!(rx.try_recv(), Some(Event::PeerDisconnected { peer: p }));
    assert_eq!(
        seen.lock().unwrap().len(),
        4 + 4 + 2,
        "callbacks get every event"
    );
}

#[test]
fn messages_wait_for_room_below_three_quarters_and_control_events_pass() {
    let hub = hub(4);
    let c = Counters::default();
    let mut rx = EventReceiver::new(hub.clone());
    let mut cx = Context::from_waker(Waker::noop());
    let outbox = Outbox::default();
    for n in 0..3 {
        let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &outbox, |_| {}));
        assert!(f.as_mut().poll(&mut cx).is_ready());
    }
    let mut waited = Vec::new();
    {
        let mut f = std::pin::pin!(hub.emit_message(message(3), &c, &outbox, |w| waited.push(w)));
        assert!(
            f.as_mut().poll(&mut cx).is_pending(),
            "three quarters full: wait"
        );
        hub.emit_control(joined(9), &c);
        assert_eq!(
            c.snapshot().dropped_event_queue_full,
            0,
            "control events use the rest"
        );
        assert_eq!(rx.try_recv(), Some(message(0)));
        assert_eq!(rx.try_recv(), Some(message(1)));
        assert!(f.as_mut().poll(&mut cx).is_ready(), "room again");
    }
    // The end of the shard's batch hands its outbox over.
    hub.wake_receivers(&outbox);
    assert_eq!(waited, vec![true, false]);
    assert_eq!(c.snapshot().event_queue_waits, 1);
    hub.close();
    let rest: Vec<Event> =
        std::iter::from_fn(|| rx.recv_timeout(Duration::from_millis(1))).collect();
    assert_eq!(rest, vec![message(2), joined(9), message(3)]);
}

#[test]
fn a_closed_hub_never_makes_a_shard_wait() {
    let hub = hub(4);
    let c = Counters::default();
    let _rx = EventReceiver::new(hub.clone());
    hub.close();
    let mut cx = Context::from_waker(Waker::noop());
    let outbox = Outbox::default();
    for n in 0..10 {
        let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &outbox, |_| {}));
        assert!(f.as_mut().poll(&mut cx).is_ready());
    }
}

#[test]
fn receivers_are_woken_once_per_batch_and_always_before_a_wait() {
    let hub = hub(8);
    let c = Counters::default();
    let mut rx = EventReceiver::new(hub.clone());
    let mut cx = Context::from_waker(Waker::noop());
    let outbox = Outbox::default();
    let mut parked = hub.ready.listen();
    for n in 0..3 {
        let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &outbox, |_| {}));
        assert!(f.as_mut().poll(&mut cx).is_ready());
    }
    assert_eq!(outbox.events.borrow().len(), 3);
    assert!(
        Pin::new(&mut parked).poll(&mut cx).is_pending(),
        "no wake per event"
    );
    hub.wake_receivers(&outbox);
    assert!(outbox.events.borrow().is_empty());
    assert!(
        Pin::new(&mut parked).poll(&mut cx).is_ready(),
        "one wake for the batch"
    );

    // A shard about to wait for room wakes the receivers first, or nobody would ever
    // drain the queue (the message limit is 6 of 8).
    let mut parked = hub.ready.listen();
    for n in 3..6 {
        let mut f = std::pin::pin!(hub.emit_message(message(n), &c, &outbox, |_| {}));
        assert!(f.as_mut().poll(&mut cx).is_ready());
    }
    let mut f = std::pin::pin!(hub.emit_message(message(6), &c, &outbox, |_| {}));
    assert!(f.as_mut().poll(&mut cx).is_pending());
    assert!(outbox.events.borrow().is_empty());
    assert!(Pin::new(&mut parked).poll(&mut cx).is_ready());
    assert_eq!(rx.try_recv(), Some(message(0)));
    assert!(f.as_mut().poll(&mut cx).is_ready());
}

#[test]
fn room_reserved_ahead_stays_within_the_limit_and_returns_with_the_batch() {
    // Capacity 200: the message limit is 150, more than one chunk of credit.
    let hub = hub(200);
    let mut rx = EventReceiver::new(hub.clone());
    let (one, two) = (Outbox::default(), Outbox::default());
    assert!(hub.try_emit_message(message(0), &one).is_ok());
    assert_eq!(
        hub.events.load(Ordering::Relaxed),
        CREDIT_CHUNK,
        "one atomic update reserved a chunk"
    );
    for n in 1..CREDIT_CHUNK as u8 {
        assert!(hub.try_emit_message(message(n), &one).is_ok());
    }
    assert_eq!(hub.events.load(Ordering::Relaxed), CREDIT_CHUNK);
    // The other shard gets the rest of the limit, never more.
    for n in 0..(150 - CREDIT_CHUNK) as u8 {
        assert!(hub.try_emit_message(message(100 + n), &two).is_ok());
    }
    assert!(hub.try_emit_message(message(1), &two).is_err(), "limit");
    assert!(hub.try_emit_message(message(1), &one).is_err(), "limit");
    assert_eq!(hub.events.load(Ordering::Relaxed), 150);
    hub.wake_receivers(&one);
    hub.wake_receivers(&two);
    assert_eq!(
        hub.events.load(Ordering::Relaxed),
        150,
        "all of it was used"
    );
    // The receiver takes the first batch (64 events) whole and returns its room at once.
    assert_eq!(rx.try_recv(), Some(message(0)));
    assert_eq!(hub.events.load(Ordering::Relaxed), 150 - CREDIT_CHUNK);
    // A new chunk is reserved for one message; the 63 unused go back with the batch.
    assert!(hub.try_emit_message(message(250), &two).is_ok());
    assert_eq!(hub.events.load(Ordering::Relaxed), 150);
    hub.wake_receivers(&two);
    assert_eq!(hub.events.load(Ordering::Relaxed), 150 - CREDIT_CHUNK + 1);
    let drained = std::iter::from_fn(|| rx.try_recv()).count();
    assert_eq!(drained, 150 - 1 + 1);
    assert_eq!(hub.events.load(Ordering::Relaxed), 0);
}

#[test]
fn a_batch_is_one_entry_and_a_dropped_clone_hands_its_rest_on() {
    let hub = hub(16);
    let c = Counters::default();
    let mut a = EventReceiver::new(hub.clone());
    let mut b = a.clone();
    let outbox = Outbox::default();
    for n in 0..5 {
        assert!(hub.try_emit_message(message(n), &outbox).is_ok());
    }
    assert_eq!(hub.queue.len(), 0, "nothing queued before the batch ends");
    hub.wake_receivers(&outbox);
    assert_eq!(hub.queue.len(), 1, "five events, one entry");
    assert_eq!(a.try_recv(), Some(message(0)));
    assert_eq!(a.try_recv(), Some(message(1)));
    assert_eq!(
        hub.events.load(Ordering::Relaxed),
        0,
        "room back once taken"
    );
    hub.emit_control(joined(7), &c);
    drop(a);
    let rest: Vec<Event> = std::iter::from_fn(|| b.try_recv()).collect();
    assert_eq!(rest, vec![joined(7), message(2), message(3), message(4)]);
    assert_eq!(hub.events.load(Ordering::Relaxed), 0);
}

#[test]
fn a_dropped_clone_never_loses_events_even_when_the_queue_is_full() {
    let hub = hub(4);
    let c = Counters::default();
    let mut a = EventReceiver::new(hub.clone());
    let mut b = a.clone();
    let outbox = Outbox::default();
    for n in 0..3 {
        assert!(hub.try_emit_message(message(n), &outbox).is_ok());
    }
    hub.wake_receivers(&outbox);
    assert_eq!(a.try_recv(), Some(message(0)));
    for n in 0..4 {
        hub.emit_control(joined(n), &c);
    }
    assert_eq!(hub.queue.len(), 4, "every entry taken");
    drop(a);
    let rest: Vec<Event> = std::iter::from_fn(|| b.try_recv()).collect();
    assert_eq!(rest.len(), 6);
    assert_eq!(
        &rest[4..],
        &[message(1), message(2)],
        "handed back behind the entries queued, then read"
    );
    assert_eq!(hub.events.load(Ordering::Relaxed), 0);
    assert_eq!(c.snapshot().dropped_event_queue_full, 0);
}

/// A run of `n` samples numbered from `first`, payload `[seq]` each.
fn run(first: u64, n: u16) -> SampleRun {
    let payloads: Vec<Vec<u8>> = (0..u64::from(n)).map(|i| vec![(first + i) as u8]).collect();
    SampleRun {
        reader: [0x71; 16],
        samples: Samples::new(8, [0xa; 16], first, payloads).unwrap(),
    }
}

fn sample(seq: u64) -> Event {
    Event::Sample {
        reader: [0x71; 16],
        writer: [0xa; 16],
        seq,
        payload: Bytes::from(vec![seq as u8]),
    }
}

#[test]
fn a_run_is_one_entry_and_the_receiver_hands_out_one_sample_event_per_sample_in_order() {
    let hub = hub(64);
    let mut rx = EventReceiver::new(hub.clone());
    let outbox = Outbox::default();
    assert!(hub.try_queue_run(run(1, 3), &outbox).is_ok());
    assert!(hub.try_emit_message(message(9), &outbox).is_ok());
    assert!(hub.try_queue_run(run(4, 2), &outbox).is_ok());
    assert_eq!(
        outbox.events.borrow().len(),
        3,
        "three entries for six events"
    );
    hub.wake_receivers(&outbox);
    assert_eq!(hub.queue.len(), 1);
    assert_eq!(
        hub.events.load(Ordering::Relaxed),
        6,
        "a run holds room per sample"
    );
    let got: Vec<Event> = std::iter::from_fn(|| rx.try_recv()).collect();
    let want = vec![
        sample(1),
        sample(2),
        sample(3),
        message(9),
        sample(4),
        sample(5),
    ];
    assert_eq!(got, want);
    assert_eq!(hub.events.load(Ordering::Relaxed), 0);
}

#[test]
fn a_run_larger_than_the_room_left_is_queued_in_part_and_the_rest_given_back() {
    // Capacity 8: the message share is 6.
    let hub = hub(8);
    let mut rx = EventReceiver::new(hub.clone());
    let outbox = Outbox::default();
    let rest = hub.try_queue_run(run(1, 10), &outbox).unwrap_err();
    assert_eq!((rest.samples.first_seq, rest.samples.count), (7, 4));
    assert_eq!(rest.samples.payloads().next().unwrap()[..], [7]);
    assert!(hub.try_queue_run(rest, &outbox).is_err(), "no room left");
    hub.wake_receivers(&outbox);
    let got: Vec<u64> = std::iter::from_fn(|| rx.try_recv())
        .map(|e| match e {
            Event::Sample { seq, .. } => seq,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        hub.bytes.load(Ordering::Relaxed),
        0,
        "the cut run's bytes went back"
    );
}

#[test]
fn a_receiver_dropped_inside_a_run_hands_the_rest_of_it_on() {
    let hub = hub(16);
    let mut a = EventReceiver::new(hub.clone());
    let mut b = a.clone();
    let outbox = Outbox::default();
    assert!(hub.try_queue_run(run(1, 4), &outbox).is_ok());
    assert!(hub.try_emit_message(message(3), &outbox).is_ok());
    hub.wake_receivers(&outbox);
    assert_eq!(a.try_recv(), Some(sample(1)));
    drop(a);
    let rest: Vec<Event> = std::iter::from_fn(|| b.try_recv()).collect();
    assert_eq!(rest, vec![sample(2), sample(3), sample(4), message(3)]);
    assert_eq!(hub.events.load(Ordering::Relaxed), 0);
    assert_eq!(
        hub.bytes.load(Ordering::Relaxed),
        0,
        "bytes handed on and back"
    );
}

/// A receiver of a spinning node picks up an event raised while it polls, never polls past
/// its timeout, and stops polling once the node closed.
#[test]
fn a_spinning_receive_takes_what_comes_and_keeps_to_its_timeout_and_the_close() {
    let hub = Arc::new(
        EventHub::new(16, NO_BYTE_CEILING, Vec::new()).with_receive_spin(Duration::from_secs(600)),
    );
    let c = Counters::default();
    let mut rx = EventReceiver::new(hub.clone());
    // Raised by another thread, before or while this one polls.
    let raiser = {
        let hub = hub.clone();
        std::thread::spawn(move || {
            while hub.receivers.load(Ordering::Acquire) < 2 {
                std::thread::yield_now();
            }
            hub.emit_control(joined(7), &Counters::default());
        })
    };
    let _second = EventReceiver::new(hub.clone());
    assert_eq!(rx.recv_timeout(Duration::from_secs(600)), Some(joined(7)));
    raiser.join().unwrap();
    // Nothing comes: the 600 s spin ends with the 20 ms timeout (a bound far from both).
    let t = Instant::now();
    assert_eq!(rx.recv_timeout(Duration::from_millis(20)), None);
    assert!(t.elapsed() < Duration::from_secs(300), "{:?}", t.elapsed());
    // Closed while polling: the receive ends with what is queued, then None.
    hub.emit_control(joined(8), &c);
    hub.close();
    assert_eq!(rx.recv_timeout(Duration::from_secs(600)), Some(joined(8)));
    let t = Instant::now();
    assert_eq!(rx.recv_timeout(Duration::from_secs(600)), None);
    assert!(t.elapsed() < Duration::from_secs(300), "{:?}", t.elapsed());
}

/// A batch receive hands a run out whole (payloads borrowed), events between runs in their
/// place, and the rest of a run a plain receive began as one batch; expanded, it is exactly
/// what the plain receive hands out.
#[test]
fn a_batch_receive_hands_runs_out_whole_in_the_events_order() {
    let hub = hub(64);
    let mut rx = EventReceiver::new(hub.clone());
    let outbox = Outbox::default();
    assert!(hub.try_queue_run(run(1, 3), &outbox).is_ok());
    assert!(hub.try_emit_message(message(9), &outbox).is_ok());
    assert!(hub.try_queue_run(run(4, 3), &outbox).is_ok());
    hub.wake_receivers(&outbox);
    let Some(Received::Samples(b)) = rx.recv_batch_timeout(Duration::from_secs(5)) else {
        panic!("the first run, whole");
    };
    assert_eq!(
        (b.reader(), b.writer(), b.first_seq(), b.len()),
        ([0x71; 16], [0xa; 16], 1, 3)
    );
    let walked: Vec<(u64, Vec<u8>)> = b.iter().map(|(s, p)| (s, p.to_vec())).collect();
    assert_eq!(walked, vec![(1, vec![1]), (2, vec![2]), (3, vec![3])]);
    assert_eq!(
        b.into_events().collect::<Vec<_>>(),
        vec![sample(1), sample(2), sample(3)]
    );
    assert_eq!(rx.try_recv_batch(), Some(Received::Event(message(9))));
    // A plain receive takes one sample of the next run; the batch receive gets the rest.
    assert_eq!(rx.try_recv(), Some(sample(4)));
    let Some(Received::Samples(rest)) = rx.try_recv_batch() else {
        panic!("the rest of the run");
    };
    assert_eq!((rest.first_seq(), rest.len()), (5, 2));
    assert_eq!(
        rest.payloads().collect::<Vec<_>>(),
        vec![Bytes::from(vec![5u8]), Bytes::from(vec![6u8])]
    );
    assert_eq!(rx.try_recv_batch(), None);
    assert_eq!(hub.events.load(Ordering::Relaxed), 0, "all room given back");
}

/// A slow receiver holds payloads up to the byte ceiling, not up to the event count: 100 KiB
/// messages wait once 256 KiB are queued although the count has room for 765 more, and a
/// run is held back whole; taking the queued batch gives the room back.
#[test]
fn queued_payloads_are_bounded_in_bytes_as_well_as_in_events() {
    let hub = Arc::new(EventHub::new(1024, 256 << 10, Vec::new()));
    let c = Counters::default();
    let mut rx = EventReceiver::new(hub.clone());
    let mut cx = Context::from_waker(Waker::noop());
    let outbox = Outbox::default();
    let big = |n: u8| Event::Message {
        from: PeerId([n; 16]),
        payload: Bytes::from(vec![n; 100 << 10]),
        broadcast: true,
    };
    for n in 0..3 {
        assert!(
            hub.try_emit_message(big(n), &outbox).is_ok(),
            "below the ceiling"
        );
    }
    assert!(
        hub.try_emit_message(big(3), &outbox).is_err(),
        "at the ceiling"
    );
    assert!(
        hub.try_queue_run(run(1, 4), &outbox).is_err(),
        "a run waits too"
    );
    assert!(
        hub.try_emit_message(message(7), &outbox).is_err(),
        "a small message as well"
    );
    {
        let mut f = std::pin::pin!(hub.emit_message(big(3), &c, &outbox, |_| {}));
        assert!(f.as_mut().poll(&mut cx).is_pending(), "waits for bytes");
        assert_eq!(
            rx.try_recv(),
            Some(big(0)),
            "the wait handed the outbox over"
        );
        assert!(
            f.as_mut().poll(&mut cx).is_ready(),
            "room once the batch is taken"
        );
    }
    let s = c.snapshot();
    assert_eq!((s.event_queue_waits, s.event_queue_byte_waits), (1, 1));
    hub.wake_receivers(&outbox);
    let rest: Vec<Event> = std::iter::from_fn(|| rx.try_recv()).collect();
    assert_eq!(rest, vec![big(1), big(2), big(3)]);
    assert_eq!(hub.events.load(Ordering::Relaxed), 0);
    assert_eq!(
        hub.bytes.load(Ordering::Relaxed),
        0,
        "every byte given back"
    );
    // A message larger than the whole ceiling still passes an empty queue (never a wait
    // that nothing can end), and only one at a time.
    let small = Arc::new(EventHub::new(1024, 10 << 10, Vec::new()));
    let _rx = EventReceiver::new(small.clone());
    let outbox = Outbox::default();
    assert!(
        small.try_emit_message(big(4), &outbox).is_ok(),
        "alone: admitted"
    );
    assert!(
        small.try_emit_message(big(5), &outbox).is_err(),
        "then: wait"
    );
}

/// One step a shard or the application takes on the hub, for the property below.
#[derive(Debug, Clone)]
enum Op {
    /// A Message event of this many payload bytes, from shard `0` or `1`.
    Message(usize, usize),
    /// A run of this many samples of this many bytes each, from a shard.
    Run(usize, u16, usize),
    /// A shard hands its outbox over.
    Wake(usize),
    /// A control event: an `Incompatible` one (which holds bytes) when true.
    Control(bool),
    /// Receiver `i` (modulo those alive) takes up to this many events, or runs whole.
    Take(usize, usize, bool),
    /// A receiver more (a clone).
    Clone,
    /// Receiver `i` (modulo those alive) goes.
    Drop(usize),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0usize..2, 0usize..40_000).prop_map(|(s, n)| Op::Message(s, n)),
        3 => (0usize..2, 1u16..40, 0usize..3_000).prop_map(|(s, c, n)| Op::Run(s, c, n)),
        3 => (0usize..2).prop_map(Op::Wake),
        1 => any::<bool>().prop_map(Op::Control),
        4 => (0usize..4, 1usize..30, any::<bool>()).prop_map(|(i, k, w)| Op::Take(i, k, w)),
        1 => Just(Op::Clone),
        1 => (0usize..4).prop_map(Op::Drop),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Whatever shards and receivers do, the payload bytes reserved stay within the ceiling
    /// plus what the module docs allow (an entry and a credit chunk per shard), and once
    /// everything is handed over and taken, every event and every byte is given back: a
    /// leak would hold a node's shards in backpressure for good.
    #[test]
    fn event_and_byte_room_always_comes_back(ops in proptest::collection::vec(op(), 1..120)) {
        const LIMIT: usize = 100_000;
        let hub = Arc::new(EventHub::new(64, LIMIT, Vec::new()));
        let c = Counters::default();
        let outboxes = [Outbox::default(), Outbox::default()];
        let mut rxs = vec![EventReceiver::new(hub.clone())];
        let mut largest = 0usize;
        for op in ops {
            match op {
                Op::Message(s, n) => {
                    largest = largest.max(n);
                    let ev = Event::Message {
                        from: PeerId([1; 16]),
                        payload: Bytes::from(vec![0; n]),
                        broadcast: true,
                    };
                    let _ = hub.try_emit_message(ev, &outboxes[s]);
                }
                Op::Run(s, count, each) => {
                    let payloads = (0..count).map(|_| vec![0u8; each]);
                    let samples = Samples::new(8, [0xa; 16], 1, payloads).unwrap();
                    largest = largest.max(samples.body.len());
                    let run = SampleRun { reader: [0x71; 16], samples };
                    let _ = hub.try_queue_run(run, &outboxes[s]);
                }
                Op::Wake(s) => hub.wake_receivers(&outboxes[s]),
                Op::Control(false) => hub.emit_control(joined(1), &c),
                Op::Control(true) => {
                    let ev = incompatible(1);
                    largest = largest.max(super::hub::event_bytes(&ev));
                    hub.emit_control(ev, &c);
                }
                Op::Take(i, k, whole) if !rxs.is_empty() => {
                    let n = rxs.len();
                    let rx = &mut rxs[i % n];
                    for _ in 0..k {
                        let got = if whole { rx.try_recv_batch().is_some() } else { rx.try_recv().is_some() };
                        if !got {
                            break;
                        }
                    }
                }
                Op::Take(..) => rxs.push(EventReceiver::new(hub.clone())),
                Op::Clone => match rxs.first() {
                    Some(rx) => rxs.push(rx.clone()),
                    None => rxs.push(EventReceiver::new(hub.clone())),
                },
                Op::Drop(i) if !rxs.is_empty() => {
                    let n = rxs.len();
                    drop(rxs.remove(i % n));
                }
                Op::Drop(_) => {}
            }
            let bytes = hub.bytes.load(Ordering::Relaxed);
            // Each receiver may put back one batch it took (past the bound, see its Drop).
            let slack = 2 * (BYTE_CREDIT_CHUNK + largest) + rxs.len().max(1) * largest;
            proptest::prop_assert!(bytes <= LIMIT + slack, "{bytes} reserved, limit {LIMIT}");
        }
        for o in &outboxes {
            hub.wake_receivers(o);
        }
        for rx in &mut rxs {
            while rx.try_recv().is_some() {}
        }
        // A receiver hands back what it held only when dropped; drain again after that.
        while rxs.len() > 1 {
            drop(rxs.pop());
            while rxs[0].try_recv().is_some() {}
        }
        proptest::prop_assert_eq!(hub.events.load(Ordering::Relaxed), 0);
        proptest::prop_assert_eq!(hub.bytes.load(Ordering::Relaxed), 0);
    }
}

/// An `Incompatible` event whose partition lists are at the limits a remote announcement may
/// use (64 names of 256 bytes on each side): ~33 KiB of heap.
fn incompatible(n: u8) -> Event {
    let names = |c: u8| vec![String::from_utf8(vec![c; 256]).unwrap(); 64];
    Event::Incompatible {
        writer: [n; 16],
        reader: [n ^ 0xff; 16],
        topic: "t".into(),
        reasons: vec![crate::topics::Incompatibility::Partitions {
            writer: names(b'w'),
            reader: names(b'r'),
        }]
        .into(),
    }
}

/// Issue 24 finding 7: `Incompatible` events carry partition lists a stranger chooses; they
/// count against `event_queue_bytes` like payloads, so a flood of them queues at most about
/// the byte ceiling (dropped and counted beyond it), and their bytes come back when taken.
#[test]
fn incompatible_events_are_bounded_in_bytes_like_payloads() {
    let ceiling = 256 << 10;
    let hub = Arc::new(EventHub::new(4096, ceiling, Vec::new()));
    let c = Counters::default();
    let mut rx = EventReceiver::new(hub.clone());
    let one = super::hub::event_bytes(&incompatible(0));
    assert!(one > 32 << 10, "the reasons' heap is counted: {one}");
    for n in 0..1000u32 {
        hub.emit_control(incompatible(n as u8), &c);
    }
    let queued = hub.events.load(Ordering::Relaxed);
    let bytes = hub.bytes.load(Ordering::Relaxed);
    assert!(
        bytes <= ceiling + one,
        "{bytes} bytes queued for a ceiling of {ceiling}"
    );
    assert_eq!(
        queued,
        ceiling.div_ceil(one),
        "admitted while below the ceiling"
    );
    let s = c.snapshot();
    assert_eq!(s.dropped_event_queue_full, 1000 - queued as u64);
    // Peer events hold no bytes: they still pass.
    hub.emit_control(joined(1), &c);
    assert_eq!(hub.events.load(Ordering::Relaxed), queued + 1);
    // Taking them gives every byte back; then they are admitted again.
    let taken = std::iter::from_fn(|| rx.try_recv()).count();
    assert_eq!(taken, queued + 1);
    assert_eq!(hub.bytes.load(Ordering::Relaxed), 0);
    assert_eq!(hub.events.load(Ordering::Relaxed), 0);
    hub.emit_control(incompatible(7), &c);
    assert_eq!(rx.try_recv(), Some(incompatible(7)));
    assert_eq!(hub.bytes.load(Ordering::Relaxed), 0);
}
