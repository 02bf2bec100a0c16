//! The sample path of the shard core, driven with virtual time and `C = ()` (deliveries are
//! read off the harness's recording sink).

use super::*;
use crate::shard::samples_shard;
use crate::stats::{TopicCounters, TopicStats};
use crate::topics::{EndpointGuid, WriterRoute};
use crate::wire::{SampleRunWriter, Samples};
use crate::PeerId;

pub(super) const W: EndpointGuid = [0xa; 16];
pub(super) const R1: EndpointGuid = [0x71; 16];
pub(super) const R2: EndpointGuid = [0x72; 16];

/// A run of `payloads` of writer `W` numbered from `first`, with `ttl`, as one frame.
pub(super) fn run(first: u64, ttl: u8, payloads: &[&[u8]]) -> Vec<u8> {
    let mut b = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut b, W, ttl, first, 1 << 20);
    for p in payloads {
        w.push(p).unwrap();
    }
    w.finish();
    b.to_vec()
}

pub(super) fn routes(
    s: &mut Sim,
    links: &[LinkId],
    readers: &[EndpointGuid],
    local: bool,
) -> Arc<TopicCounters> {
    let topic = Arc::new(TopicCounters::new(1));
    let r = WriterRoute {
        writer: W,
        slot: 3,
        topic: topic.clone(),
        local,
        links: links.to_vec(),
        readers: readers.to_vec(),
        unreached: 0,
        upstream: None,
        // Another node's writer is taken from both test links (both closer to its node, as
        // while views differ); see `a_run_from_a_link_its_writer_does_not_send_on_...`.
        accept_from: if local { Vec::new() } else { vec![A, B] },
        toward: Vec::new(),
        reliable: None,
    };
    let t = Arc::new(SampleRoutes::new(1, vec![r]));
    let cmd: ToShard<()> = ToShard::SampleRoutes(t);
    assert!(s.core.on_command(cmd, s.t0, &mut s.out).is_none());
    topic
}

/// The (reader, seqs, payloads) of every run delivered, in order.
pub(super) fn delivered(t: &Handed) -> Vec<(EndpointGuid, Vec<u64>, Vec<Vec<u8>>)> {
    t.delivered()
        .filter_map(|d| match d {
            Delivered::Samples(r) => Some((
                r.reader,
                r.samples.seqs().collect(),
                r.samples.payloads().map(|p| p.to_vec()).collect(),
            )),
            _ => None,
        })
        .collect()
}

/// The Samples frames in `wire`.
pub(super) fn runs(wire: &[u8]) -> Vec<Samples> {
    let mut b = BytesMut::from(wire);
    let mut v = Vec::new();
    while let Some(f) = crate::wire::take_frame(&mut b, u32::MAX).unwrap() {
        if let crate::wire::Frame::Samples(s) = f {
            v.push(s);
        }
    }
    assert!(b.is_empty());
    v
}

/// A batch of this node's writer `W`: `payloads` numbered from `first`, packed into frames of
/// at most `max` bytes; the publish and the batch's bytes.
pub(super) fn own_batch(first: u64, max: u32, payloads: &[&[u8]]) -> (Publish, Vec<u8>) {
    let mut frames = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut frames, W, 8, first, max);
    for p in payloads {
        w.push(p).unwrap();
    }
    w.finish();
    let bytes = frames.to_vec();
    let count = payloads.len();
    (
        Publish::Samples {
            writer: W,
            frames,
            count,
        },
        bytes,
    )
}

pub(super) fn stats(t: &TopicCounters) -> TopicStats {
    t.snapshot()
}

#[test]
fn a_run_goes_out_on_its_route_with_one_hop_less_and_to_each_local_reader_once() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    let topic = routes(&mut s, &[B], &[R1, R2], false);
    s.take();
    assert!(s.feed(A, &run(1, 5, &[b"one", b"two"]), s.at(1)));
    let got = delivered(&s.take());
    assert_eq!(
        got,
        vec![
            (R1, vec![1, 2], vec![b"one".to_vec(), b"two".to_vec()]),
            (R2, vec![1, 2], vec![b"one".to_vec(), b"two".to_vec()]),
        ]
    );
    let out = runs(&s.written(B, s.at(1)));
    assert_eq!(out.len(), 1, "one frame for the run");
    assert_eq!((out[0].ttl, out[0].first_seq, out[0].count), (4, 1, 2));
    assert!(
        runs(&s.written(A, s.at(1))).is_empty(),
        "never back where it came from"
    );
    let t = stats(&topic);
    assert_eq!((t.delivered, t.forwarded), (4, 2));
}

#[test]
fn seen_samples_are_dropped_and_counted_and_gaps_are_counted_as_missed() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    let topic = routes(&mut s, &[B], &[R1], false);
    assert!(s.feed(A, &run(1, 5, &[b"1", b"2", b"3"]), s.at(1)));
    // The same run again (another path while routes change): nothing passes.
    assert!(s.feed(B, &run(1, 5, &[b"1", b"2", b"3"]), s.at(2)));
    // Overlapping 2..=5: only 4 and 5 pass, delivered and forwarded without the seen head.
    assert!(s.feed(A, &run(2, 5, &[b"2", b"3", b"4", b"5"]), s.at(3)));
    // 9..=9 after 5: 6, 7 and 8 were never received.
    assert!(s.feed(A, &run(9, 5, &[b"9"]), s.at(4)));
    let got: Vec<Vec<u64>> = delivered(&s.take()).into_iter().map(|d| d.1).collect();
    assert_eq!(got, vec![vec![1, 2, 3], vec![4, 5], vec![9]]);
    let fwd: Vec<(u64, u16)> = runs(&s.written(B, s.at(4)))
        .iter()
        .map(|r| (r.first_seq, r.count))
        .collect();
    assert_eq!(fwd, vec![(1, 3), (4, 2), (9, 1)]);
    let t = stats(&topic);
    assert_eq!((t.dropped_duplicate, t.missed, t.delivered), (3 + 2, 3, 6));
}

/// Found by the `control_plane` fuzz target: a run ending at the last sequence number a
/// run may carry (`u64::MAX`, which the decoder allows) overflowed the writer's next
/// expected number (a panic with overflow checks; in release it wrapped to 0, "nothing seen",
/// so every later run passed as new). The state now stays at the end of time: the run is
/// delivered once and copies of it are duplicates.
#[test]
fn a_run_ending_at_the_last_sequence_number_does_not_overflow_the_writers_state() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    let topic = routes(&mut s, &[B], &[R1], false);
    assert!(s.feed(A, &run(1, 5, &[b"1"]), s.at(1)));
    assert!(s.feed(A, &run(u64::MAX - 1, 5, &[b"a", b"b"]), s.at(2)));
    assert!(s.feed(A, &run(u64::MAX - 1, 5, &[b"a", b"b"]), s.at(3)));
    assert!(s.feed(A, &run(2, 5, &[b"2"]), s.at(4)));
    let got: Vec<Vec<u64>> = delivered(&s.take()).into_iter().map(|d| d.1).collect();
    assert_eq!(got, vec![vec![1], vec![u64::MAX - 1, u64::MAX]]);
    let t = stats(&topic);
    assert_eq!((t.delivered, t.dropped_duplicate), (3, 2 + 1));
}

#[test]
fn runs_of_a_writer_the_table_does_not_know_yet_wait_for_it_in_order() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    // The writer's first samples overtake its announcement through the control plane.
    assert!(s.feed(A, &run(1, 5, &[b"x", b"y"]), s.at(1)));
    assert!(s.feed(A, &run(3, 5, &[b"z"]), s.at(2)));
    assert!(delivered(&s.take()).is_empty());
    assert_eq!(s.stats().sample_runs_parked, 2);
    let topic = routes(&mut s, &[B], &[R1], false);
    let got: Vec<Vec<u64>> = delivered(&s.take()).into_iter().map(|d| d.1).collect();
    assert_eq!(
        got,
        vec![vec![1, 2], vec![3]],
        "both runs, in order, once the table names W"
    );
    let fwd: Vec<u64> = runs(&s.written(B, s.at(3)))
        .iter()
        .map(|r| r.first_seq)
        .collect();
    assert_eq!(fwd, vec![1, 3]);
    assert_eq!(
        (stats(&topic).delivered, s.stats().dropped_unrouted_samples),
        (3, 0)
    );
}

#[test]
fn parked_runs_are_bounded_in_bytes_and_age_and_what_goes_is_counted() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.core.cfg.max_parked_sample_bytes = 30;
    s.serve(A, PA, 1 << 20);
    // 14-byte bodies (4 + 10): two fit the bound, the third pushes out the first.
    for n in 0..3u64 {
        assert!(s.feed(A, &run(1 + n, 5, &[b"0123456789"]), s.at(1 + n)));
    }
    assert_eq!(s.stats().dropped_unrouted_samples, 1, "the oldest gave way");
    // A run larger than the bound is not held at all.
    assert!(s.feed(A, &run(10, 5, &[&[7u8; 40]]), s.at(4)));
    assert_eq!(s.stats().dropped_unrouted_samples, 2);
    // The rest expire after the timeout, counted; the timer is armed for it.
    let due = s.core.poll_timeout();
    assert!(due <= s.at(2) + s.core.cfg.parked_sample_timeout, "{due:?}");
    let later = s.at(4) + s.core.cfg.parked_sample_timeout;
    s.core.handle_timeout(later, &mut s.out);
    assert_eq!(s.stats().dropped_unrouted_samples, 4);
    routes(&mut s, &[], &[R1], false);
    assert!(delivered(&s.take()).is_empty(), "nothing left to replay");
}

#[test]
fn a_run_with_no_hop_left_is_delivered_here_but_not_sent_on() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    let topic = routes(&mut s, &[B], &[R1], false);
    assert!(s.feed(A, &run(3, 1, &[b"z"]), s.at(2)));
    assert_eq!(s.stats().dropped_ttl, 1);
    assert!(runs(&s.written(B, s.at(2))).is_empty());
    assert_eq!(delivered(&s.take()).len(), 1, "still delivered here");
    assert_eq!(stats(&topic).delivered, 1);
}

#[test]
fn a_run_read_on_another_shard_hops_to_its_writers_shard_once() {
    let shards = 2;
    let owner = samples_shard(&W, shards);
    let mut s = Sim::new(1 - owner, shards, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    routes(&mut s, &[], &[R1], false);
    s.take();
    assert!(s.feed(A, &run(1, 5, &[b"x"]), s.at(1)));
    let a = s.take();
    assert!(delivered(&a).is_empty(), "not checked here");
    let hop = a.into_iter().find_map(|a| match a {
        ShardAction::Post {
            to,
            msg: ShardToShard::HopSamples { from, samples },
            ..
        } => Some((to, from, samples.first_seq)),
        _ => None,
    });
    assert_eq!(hop, Some((owner, A, 1)));
}

#[test]
fn what_a_local_writer_wrote_is_queued_whole_and_delivered_to_its_local_readers() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    let topic = routes(&mut s, &[A], &[R1], true);
    s.take();
    let mut frames = BytesMut::new();
    let mut w = SampleRunWriter::new(&mut frames, W, 8, 1, 64);
    for n in 0..5u8 {
        w.push(&[n; 20]).unwrap(); // 64-byte frames: 2 samples each, 3 frames
    }
    assert_eq!(w.finish(), 6);
    let batch = frames.to_vec();
    s.core.publish(
        Publish::Samples {
            writer: W,
            frames,
            count: 5,
        },
        s.at(1),
        &mut s.out,
    );
    let seqs: Vec<u64> = delivered(&s.take()).into_iter().flat_map(|d| d.1).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    assert_eq!(s.written(A, s.at(1)), batch, "the batch's bytes, untouched");
    assert!(s.written(B, s.at(1)).is_empty(), "only the route's links");
    let t = stats(&topic);
    assert_eq!((t.written, t.delivered, t.forwarded), (5, 5, 5));
    // A copy coming back over a loop: this node's own writer's samples never come in on a
    // link, so it is not even sequence-checked.
    assert!(s.feed(A, &batch, s.at(2)));
    assert!(delivered(&s.take()).is_empty());
    assert_eq!(s.stats().dropped_wrong_link, 5);
    assert_eq!(stats(&topic).dropped_duplicate, 0);
    let _ = PeerId::ZERO;
}

#[test]
fn a_full_link_drops_a_relayed_run_whole_and_counts_it_for_its_topic() {
    let mut s = Sim::new(0, 1, OverflowPolicy::DropNewest);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 40); // less than one run: the first fits an empty queue, no other does
    let topic = routes(&mut s, &[B], &[], false);
    assert!(s.feed(A, &run(1, 5, &[b"0123456789", b"0123456789"]), s.at(1)));
    assert!(s.feed(A, &run(3, 5, &[b"0123456789", b"0123456789"]), s.at(1)));
    let t = stats(&topic);
    assert_eq!((t.forwarded, t.dropped_queue_full), (2, 2));
    assert_eq!(s.stats().dropped_queue_full, 2);
}

#[test]
fn what_a_new_writer_writes_before_its_table_arrives_waits_for_it() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    let (p, batch) = own_batch(1, 1 << 20, &[b"first"]);
    s.core.publish(p, s.at(1), &mut s.out);
    assert!(s.written(A, s.at(1)).is_empty());
    let topic = routes(&mut s, &[A], &[R1], true);
    assert_eq!(delivered(&s.take()).len(), 1);
    assert_eq!(s.written(A, s.at(1)), batch);
    assert_eq!(stats(&topic).written, 1);
}

#[test]
fn what_a_writer_writes_toward_readers_its_tree_does_not_reach_is_counted_lost() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    let topic = Arc::new(TopicCounters::new(1));
    let r = WriterRoute {
        writer: W,
        slot: 0,
        topic: topic.clone(),
        local: true,
        links: vec![A],
        readers: vec![],
        unreached: 2,
        upstream: None,
        accept_from: Vec::new(),
        toward: Vec::new(),
        reliable: None,
    };
    let cmd: ToShard<()> = ToShard::SampleRoutes(Arc::new(SampleRoutes::new(1, vec![r])));
    s.core.on_command(cmd, s.t0, &mut s.out);
    let (p, _) = own_batch(1, 1 << 20, &[b"s", b"s", b"s"]);
    s.core.publish(p, s.at(1), &mut s.out);
    let t = stats(&topic);
    assert_eq!((t.written, t.forwarded, t.dropped_no_route), (3, 3, 6));
    assert_eq!(s.stats().dropped_no_route, 6);
}

#[test]
fn a_route_naming_a_link_the_shard_no_longer_has_counts_what_it_cannot_send() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    let gone = LinkId(99);
    let topic = routes(&mut s, &[gone], &[], false);
    assert!(s.feed(A, &run(1, 5, &[b"a", b"b"]), s.at(1)));
    let t = stats(&topic);
    assert_eq!((t.forwarded, t.dropped_no_route), (0, 2));
    assert_eq!(s.stats().dropped_no_route, 2);
}

#[test]
fn a_local_writers_batch_without_local_readers_still_moves_its_sequence_state() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    let topic = routes(&mut s, &[A], &[], true);
    let payloads: Vec<[u8; 20]> = (0..5u8).map(|n| [n; 20]).collect();
    let payloads: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
    let (p, batch) = own_batch(1, 64, &payloads);
    s.core.publish(p, s.at(1), &mut s.out);
    assert_eq!(s.written(A, s.at(1)), batch);
    let table = s.core.sample_routes.clone().expect("a table");
    let route = table.get(&W).expect("the writer's route");
    assert_eq!(s.core.writer_seq_next(route), 6, "samples 1..=5 written");
    // The batch looping back is refused whole, and moves nothing.
    assert!(s.feed(A, &batch, s.at(2)));
    assert_eq!(s.stats().dropped_wrong_link, 5);
    assert_eq!(s.core.writer_seq_next(route), 6);
    assert_eq!(stats(&topic).written, 5);
}

/// A local writer's batch that waited for link room (Block policy) is counted for its topic
/// when it finally goes out, as one that found room at once (it went out uncounted).
#[test]
fn a_batch_that_waited_for_room_is_counted_for_its_topic_when_it_goes_out() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 40); // less than one batch: the first fits an empty queue, the next waits
    let topic = routes(&mut s, &[A], &[], true);
    s.take();
    let batch = |first: u64| own_batch(first, 64, &[&[1; 20], &[2; 20]]).0;
    s.core.publish(batch(1), s.at(1), &mut s.out);
    assert!(s.take().is_empty());
    s.core.publish(batch(3), s.at(1), &mut s.out);
    let Some(ShardAction::Block(b)) = s.take().pop() else {
        panic!("the second batch waits for room");
    };
    assert_eq!(stats(&topic).forwarded, 2);
    assert!(
        !s.written(A, s.at(2)).is_empty(),
        "the first batch went out"
    );
    assert!(matches!(
        s.core.unblock(b, s.at(2), &mut s.out),
        Unblock::Done
    ));
    let t = stats(&topic);
    assert_eq!((t.written, t.forwarded, t.dropped_no_route), (4, 4, 0));
}

/// A local writer's samples dropped because their link was declared slow (Block policy) are
/// counted for the topic as slow-link drops, not as no-route drops (the link is there).
#[test]
fn samples_dropped_for_a_slow_link_count_as_slow_link_for_their_topic_not_no_route() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 40); // less than one batch: the first fits an empty queue, the next waits
    s.serve_fast();
    let topic = routes(&mut s, &[A], &[], true);
    s.take();
    let batch = |first: u64| own_batch(first, 64, &[&[1; 20], &[2; 20]]).0;
    s.core.publish(batch(1), s.at(60), &mut s.out);
    s.core.publish(batch(3), s.at(60), &mut s.out);
    let Some(ShardAction::Block(b)) = s.take().pop() else {
        panic!("the second batch waits for room");
    };
    let Unblock::Wait(b, soon) = s.core.unblock(b, s.at(60), &mut s.out) else {
        panic!("no room yet")
    };
    let Unblock::Wait(b, until) = s.core.unblock(b, soon, &mut s.out) else {
        panic!("slow soon, not yet slow")
    };
    // Outpaced by the other link until the deadline: declared slow, the waiting batch dropped.
    assert!(matches!(
        s.core.unblock(b, until, &mut s.out),
        Unblock::Done
    ));
    s.take();
    assert_eq!(s.stats().slow_links, 1);
    // Nobody waits for a slow link: the next batch is dropped at once.
    s.core.publish(batch(5), until, &mut s.out);
    let t = stats(&topic);
    assert_eq!((t.dropped_slow_link, t.dropped_no_route), (4, 0));
    assert_eq!((t.written, t.forwarded), (6, 2));
    let node = s.stats();
    assert_eq!((node.dropped_slow_link, node.dropped_no_route), (4, 0));
}

/// A stranger's run for another node's writer, numbered far ahead, on a link the writer's
/// samples do not come from: dropped whole and counted before the sequence check, so the
/// real samples after it are still delivered and sent on (it used to make every one of them
/// look seen: the writer was silenced for good by one frame).
#[test]
fn a_run_from_a_link_its_writer_does_not_send_on_is_refused_before_the_sequence_check() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    let c = LinkId(3);
    s.serve(c, PeerId([0xc; 16]), 1 << 20);
    let topic = Arc::new(TopicCounters::new(1));
    let r = WriterRoute {
        writer: W,
        slot: 0,
        topic: topic.clone(),
        local: false,
        links: vec![c],
        readers: vec![R1],
        unreached: 0,
        upstream: Some(A),
        accept_from: vec![A],
        toward: Vec::new(),
        reliable: None,
    };
    let cmd: ToShard<()> = ToShard::SampleRoutes(Arc::new(SampleRoutes::new(1, vec![r])));
    s.core.on_command(cmd, s.t0, &mut s.out);
    s.take();
    assert!(s.feed(B, &run(1 << 62, 5, &[b"forged", b"too"]), s.at(1)));
    assert!(delivered(&s.take()).is_empty());
    assert!(
        runs(&s.written(c, s.at(1))).is_empty(),
        "not sent on either"
    );
    assert_eq!(s.stats().dropped_wrong_link, 2);
    assert_eq!(stats(&topic).dropped_wrong_link, 2, "and for its topic");
    // The writer's real samples, from its side of the tree.
    assert!(s.feed(A, &run(1, 5, &[b"one", b"two"]), s.at(2)));
    let got = delivered(&s.take());
    assert_eq!(
        got,
        vec![(R1, vec![1, 2], vec![b"one".to_vec(), b"two".to_vec()])]
    );
    assert_eq!(runs(&s.written(c, s.at(2))).len(), 1);
    let t = stats(&topic);
    assert_eq!((t.delivered, t.forwarded, t.dropped_duplicate), (2, 2, 0));
    assert!(s.core.served().any(|l| l == B), "the link stays up");
}
