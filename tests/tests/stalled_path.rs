//! A reliable reader behind a path that stalls one way for longer than its node's lease
//! (the lab's `stall_data`): two lab hosts (`shoal_tests::lab`), found by multicast; h1
//! writes `r/s` (reliable, keep-all, volatile) at a steady pace, h2 reads it. Once the
//! stream is under way every TCP segment carrying h1's data to h2 is dropped, bare
//! acknowledgements pass: the state a 30 %-lossy connection in retransmission back-off is in
//! for seconds at a time (the six-host reliable test's 24 s on CI). h2 hears nothing of h1
//! while what it sends (its announcements, its heartbeats) is delivered and acknowledged, so
//! both ends keep the link and h1 keeps the match. The stall outlasts h2's lease (6 s); h1's
//! own lease is long, so h2 keeps the match too.
//!
//! What must hold: h1 counts the link unanswered (its peer acknowledges nothing new, though
//! its segments keep coming), and its writer waits for h2 through the stall instead of
//! releasing it as dead after its lease, which made the history let go of what h2 lacked and
//! lost it to a Gap; once the path carries again h2 gets every sample, once, in order,
//! nothing reported lost. Without root the test prints why it was skipped and passes.

use std::time::{Duration, Instant};

use shoal_tests::{
    num, reliable_stream_args, skip_without_lab, wait_hosts, Lab, StartFile, TopicHost,
};

const NODE: &str = env!("CARGO_BIN_EXE_topicnode");
/// Samples the writer writes, at [`RATE`] a second.
const N: i64 = 3000;
const RATE: u64 = 200;
/// h2's lease: shorter than the stall, and long enough that h1 finds the link unanswered well
/// within it (a second without progress, then the link timer's next look, at most a heartbeat
/// interval later) on a loaded machine.
const READER_LEASE_MS: u64 = 6000;
/// The stall lasts at least this long: past h2's lease, with a second to spare.
const STALL: Duration = Duration::from_millis(READER_LEASE_MS + 1000);

fn start(lab: &Lab, k: usize, go: &StartFile) -> TopicHost {
    let lease = if k == 1 { 30_000 } else { READER_LEASE_MS };
    let mut args = reliable_stream_args(&lab.addr(k), lease, (RATE, N), go, 120);
    let (writers, readers): (&[&str], &[&str]) = if k == 1 {
        // Five seconds of the stream: full, and the writes waiting, within the stall.
        args.extend(["--keep-all", "1000"].map(String::from));
        (&["r/s"], &[])
    } else {
        (&[], &["r/s"])
    };
    TopicHost::start(lab, k, NODE, args, writers, readers)
}

#[test]
fn a_reader_whose_path_stalls_past_its_lease_is_waited_for_and_loses_nothing() {
    if skip_without_lab() {
        return;
    }
    let go = StartFile::new("stall");
    let lab = Lab::up("sS", 2);
    let mut hosts: Vec<TopicHost> = (1..=2).map(|k| start(&lab, k, &go)).collect();
    let (wg, rg) = (hosts[0].guid("r/s", true), hosts[1].guid("r/s", false));
    wait_hosts(&mut hosts, 30, "the pair to match on both ends", |h| {
        h[0].matched(&wg, &rg) && h[1].matched(&wg, &rg)
    });
    go.go();
    wait_hosts(&mut hosts, 30, "h2 to receive the first samples", |h| {
        h[1].seq("r/s", &wg) >= 300
    });

    lab.stall_data(1, 2);
    let stalled_at = Instant::now();
    // The stall is the fault itself: it lasts past h2's lease, and until the writer either
    // waits for h2 (its history full) or has given up on it.
    wait_hosts(
        &mut hosts,
        60,
        "the writer to wait for h2, or to give up on it, past h2's lease",
        |h| {
            let released = h[0]
                .last("reliable ")
                .is_some_and(|l| num(&l, "reliable_readers_released") > 0);
            let waits = h[0].last("blocked ").is_some();
            stalled_at.elapsed() >= STALL && (released || waits)
        },
    );
    let at_unstall = hosts[1].seq("r/s", &wg);
    lab.unstall_data(1, 2);

    wait_hosts(&mut hosts, 90, "h2 to receive the whole stream", |h| {
        h[1].seq("r/s", &wg) == N || !h[1].all("lost ").is_empty()
    });
    let w = hosts[0].last("reliable ").expect("a reliable line");
    assert!(
        num(&w, "links_unanswered") >= 1,
        "h1 did not count its stalled link unanswered: {w}"
    );
    assert_eq!(
        num(&w, "reliable_readers_released"),
        0,
        "the writer gave up on a reader behind a stalled path: {w}"
    );
    let h2 = &mut hosts[1];
    let lost = h2.all("lost ");
    assert!(lost.is_empty(), "h2: SamplesLost raised: {lost:?}");
    let l = h2.recv("r/s", &wg).expect("a recv line");
    assert_eq!(
        (num(&l, "n"), num(&l, "dup"), num(&l, "order_errors")),
        (N, 0, 0),
        "h2 gets every sample once, in order: {l}"
    );
    assert!(
        at_unstall < N,
        "the stall held the stream back (h2 had {at_unstall} of {N} when it ended)"
    );
    eprintln!(
        "stalled {:?}; h2 had {at_unstall} of {N} at the end of the stall; writer: {w}",
        stalled_at.elapsed()
    );
}
