//! A path that drops everything between two hosts while both still reach the rest (the lab's
//! `block`). Real processes in network namespaces (`shoal_tests::lab`), found by multicast:
//! h1 publishes a steady, light stream, h2 and h3 subscribe, and the path h1–h3 is blocked.
//!
//! The stream is far below what fills a link's queue, so no slow-link rule fires: the kernel
//! takes every write and holds it, and the link's TCP retransmits into nothing while the
//! link stays open (the heartbeat timeout is set long here). What must hold: both ends count
//! the link unanswered (`links_unanswered`: segments out, timeouts in a row, no
//! acknowledgement for a second) while it stays open, and once the path is back the stream
//! reaches h3 again, nothing twice.
//! Without root the test prints why it was skipped and passes.

use shoal_tests::pubsub::{latest, start_ready, wait_all as wait};
use shoal_tests::{skip_without_lab, HostProcess, Lab};

const NODE: &str = env!("CARGO_BIN_EXE_pubsubnode");
/// Messages per second: ~36 KB/s with headers, never near the links' queue bound.
const RATE: u64 = 400;

fn start(lab: &Lab, k: usize, extra: &[&str]) -> HostProcess {
    let mut args: Vec<String> = [
        "--interface",
        &lab.addr(k),
        "--group",
        "unanswered",
        "--payload",
        "64",
        // The node's default bound (the binary's is the fault suite's 64 KiB): the stream
        // would take minutes to fill it.
        "--queue-bytes",
        "8388608",
        // The blocked link stays open for the whole block.
        "--heartbeat-timeout-ms",
        "30000",
        "--run-for",
        "90",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    start_ready(lab, k, NODE, &args)
}

#[test]
fn a_path_that_drops_everything_is_counted_unanswered_at_both_ends_and_recovers() {
    if skip_without_lab() {
        return;
    }
    let lab = Lab::up("su", 3);
    let h2 = start(&lab, 2, &[]);
    let h3 = start(&lab, 3, &[]);
    let rate = RATE.to_string();
    let h1 = start(
        &lab,
        1,
        &[
            "--publish-rate",
            &rate,
            "--publish-secs",
            "60",
            "--publish-after-peers",
            "2",
        ],
    );
    let mut hosts = [h1, h2, h3];
    let second = RATE as i64;
    wait(
        &mut hosts,
        30,
        "both subscribers to get a second of the stream",
        |h| latest(&h[1], "sub ", "max") >= second && latest(&h[2], "sub ", "max") >= second,
    );
    for (i, h) in hosts.iter().enumerate() {
        assert_eq!(
            latest(h, "stats ", "links_unanswered"),
            0,
            "h{}: a healthy mesh",
            i + 1
        );
    }

    lab.block(1, 3);
    // Each end writes on the link (h1 its stream, h3 its heartbeats and records) and sees
    // nothing acknowledged.
    wait(
        &mut hosts,
        15,
        "both ends of the blocked link to count it unanswered",
        |h| {
            latest(&h[0], "stats ", "links_unanswered") >= 1
                && latest(&h[2], "stats ", "links_unanswered") >= 1
        },
    );
    assert_eq!(
        latest(&hosts[1], "stats ", "links_unanswered"),
        0,
        "h2's paths are fine"
    );
    assert_eq!(
        latest(&hosts[0], "stats ", "links_closed"),
        0,
        "the blocked link is still open"
    );

    // The path comes back: what h1 publishes reaches h3 again, and nothing came twice.
    lab.unblock(1, 3);
    let now = latest(&hosts[0], "pub ", "sent");
    wait(&mut hosts, 30, "h3 to get the stream again", |h| {
        latest(&h[2], "sub ", "max") >= now + second
    });
    for (i, h) in hosts.iter().enumerate().skip(1) {
        assert_eq!(
            latest(h, "sub ", "dup"),
            0,
            "h{} got a message twice",
            i + 1
        );
    }
}
