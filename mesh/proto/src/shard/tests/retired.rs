//! Writers that left: what they wrote before is still routed on their last route while it is
//! on its way (`shard::retired`), driven with virtual time as `super::samples`.

use super::samples::{delivered, own_batch, routes, run, runs, stats, R1, R2, W};
use super::*;
use crate::shard::samples_shard;
use crate::stats::TopicCounters;
use crate::topics::{EndpointGuid, WriterRoute};

/// A table without `W`: its writer is gone (`removed`), or no longer matched here.
fn drop_routes(s: &mut Sim, epoch: u64, removed: bool) {
    let gone = if removed { vec![W] } else { vec![] };
    let t = SampleRoutes::new(epoch, vec![]).with_removed(gone);
    let cmd: ToShard<()> = ToShard::SampleRoutes(Arc::new(t));
    assert!(s.core.on_command(cmd, s.t0, &mut s.out).is_none());
}

/// The writer `W`'s shard of two, with links to `A` and `B`: runs read on the other shard
/// hop here ([`hop`]).
fn writers_shard_of_two() -> Sim {
    let shards = 2;
    let mut s = Sim::new(samples_shard(&W, shards), shards, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    s.serve(B, PB, 1 << 20);
    s
}

/// `W`'s run, hopped from the shard of link `from` (read there before `W`'s withdrawal).
fn hop(s: &mut Sim, from: LinkId, wire: &[u8], ms: u64) {
    let now = s.at(ms);
    let samples = runs(wire).remove(0);
    let msg = ShardToShard::HopSamples { from, samples };
    s.core.on_hop(msg, now, &mut s.out);
}

/// The defect behind a lost tail in `node_shard_topics`: a writer wrote, then was dropped;
/// its runs hopped from the link's shard to the writer's shard over a ring, while its
/// withdrawal went through the control plane, whose table without the writer reached the
/// writer's shard first. The runs were parked for a table that never came, and dropped as
/// unrouted. The writer's route outlives its table by the parking timeout: they go on and
/// are delivered as the route said, once, and after the timeout a run is unrouted again.
#[test]
fn runs_read_before_their_writers_withdrawal_still_go_where_its_route_went() {
    let mut s = writers_shard_of_two();
    let topic = routes(&mut s, &[B], &[R1], false);
    hop(&mut s, A, &run(1, 5, &[b"1"]), 1);
    s.take();
    let _ = s.written(B, s.at(1));
    drop_routes(&mut s, 2, true);
    hop(&mut s, A, &run(2, 5, &[b"2", b"3"]), 2);
    // The same run again (a copy), and one from a link the writer's samples never came from.
    hop(&mut s, A, &run(2, 5, &[b"2", b"3"]), 3);
    let c = LinkId(3);
    hop(&mut s, c, &run(4, 5, &[b"4"]), 3);
    let got: Vec<Vec<u64>> = delivered(&s.take()).into_iter().map(|d| d.1).collect();
    assert_eq!(got, vec![vec![2, 3]], "delivered once");
    let fwd: Vec<(u64, u8)> = runs(&s.written(B, s.at(3)))
        .iter()
        .map(|r| (r.first_seq, r.ttl))
        .collect();
    assert_eq!(fwd, vec![(2, 4)], "sent on along the route, once");
    let st = s.stats();
    assert_eq!(
        (
            st.dropped_unrouted_samples,
            st.sample_runs_parked,
            st.dropped_wrong_link
        ),
        (0, 0, 1)
    );
    assert_eq!(st.sample_runs_after_removal, 3);
    assert_eq!(stats(&topic).dropped_duplicate, 2);
    // The timer is armed for the retired route; after the timeout it is gone.
    let due = s.core.poll_timeout();
    assert!(due <= s.at(0) + s.core.cfg.parked_sample_timeout, "{due:?}");
    let later = 4 + s.core.cfg.parked_sample_timeout.as_millis() as u64;
    s.core.handle_timeout(s.at(later), &mut s.out);
    hop(&mut s, A, &run(5, 5, &[b"5"]), later);
    assert!(delivered(&s.take()).is_empty());
    assert_eq!(s.stats().sample_runs_parked, 1, "unknown again: parked");
}

/// A writer withdrawn, then matched again (a new table names it): the new route is used, and
/// the state its retired route reached comes with it, so a late copy is still a duplicate.
#[test]
fn a_writer_named_again_takes_its_retired_routes_sequence_state_back() {
    let mut s = writers_shard_of_two();
    routes(&mut s, &[], &[R1], false);
    drop_routes(&mut s, 2, true);
    hop(&mut s, A, &run(1, 5, &[b"1", b"2"]), 1);
    let first: Vec<(EndpointGuid, Vec<u64>)> = delivered(&s.take())
        .into_iter()
        .map(|d| (d.0, d.1))
        .collect();
    assert_eq!(first, vec![(R1, vec![1, 2])], "on the retired route");
    // Back, on another slot (its old one went to another writer), with no local reader.
    let topic = Arc::new(TopicCounters::new(1));
    let r = WriterRoute {
        writer: W,
        slot: 7,
        topic: topic.clone(),
        local: false,
        links: vec![B],
        readers: vec![R2],
        unreached: 0,
        upstream: None,
        accept_from: vec![A],
        toward: Vec::new(),
        reliable: None,
    };
    let cmd: ToShard<()> = ToShard::SampleRoutes(Arc::new(SampleRoutes::new(3, vec![r])));
    assert!(s.core.on_command(cmd, s.t0, &mut s.out).is_none());
    assert!(delivered(&s.take()).is_empty(), "nothing was parked");
    hop(&mut s, A, &run(1, 5, &[b"1", b"2"]), 2);
    hop(&mut s, A, &run(3, 5, &[b"3"]), 3);
    let got: Vec<(EndpointGuid, Vec<u64>)> = delivered(&s.take())
        .into_iter()
        .map(|d| (d.0, d.1))
        .collect();
    assert_eq!(
        got,
        vec![(R2, vec![3])],
        "the new route's reader, the copy dropped"
    );
    assert_eq!(stats(&topic).dropped_duplicate, 2);
}

/// What a thread writer wrote before it was dropped reaches the origin shard through the
/// ingress ring, its withdrawal through the control plane: a batch that arrives after the
/// table without the writer still goes out on the writer's last route.
#[test]
fn a_local_writers_last_batch_behind_its_withdrawal_still_goes_out() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    let topic = routes(&mut s, &[A], &[R1], true);
    drop_routes(&mut s, 2, true);
    s.take();
    let (p, batch) = own_batch(1, 1 << 20, &[b"last"]);
    s.core.publish(p, s.at(1), &mut s.out);
    assert_eq!(delivered(&s.take()).len(), 1);
    assert_eq!(s.written(A, s.at(1)), batch);
    assert_eq!(stats(&topic).written, 1);
    assert_eq!(s.stats().dropped_unrouted_samples, 0);
}

/// A writer only unmatched here (its last reader here went, it still writes) keeps no route:
/// the reader that went gets nothing more, and its runs wait as any unknown writer's.
#[test]
fn a_writer_only_unmatched_here_keeps_no_route() {
    let mut s = Sim::new(0, 1, OverflowPolicy::Block);
    s.serve(A, PA, 1 << 20);
    routes(&mut s, &[], &[R1], false);
    drop_routes(&mut s, 2, false);
    s.take();
    assert!(s.feed(A, &run(1, 5, &[b"1"]), s.at(1)));
    assert!(delivered(&s.take()).is_empty());
    let st = s.stats();
    assert_eq!(
        (st.sample_runs_parked, st.sample_runs_after_removal),
        (1, 0)
    );
}
