//! The `topic_pub` and `topic_sub` examples end to end, in one process: the test includes
//! each example's source and calls its `run` with the arguments a user would type.

#[allow(dead_code)]
#[path = "../examples/topic_pub.rs"]
mod topic_pub;
#[allow(dead_code)]
#[path = "../examples/topic_sub.rs"]
mod topic_sub;

use clap::Parser;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn topic_sub_prints_what_topic_pub_writes() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let sub_args = topic_sub::Args::parse_from([
        "topic_sub",
        "--topic",
        "demo/e2e",
        "--partition",
        "robot/*",
        "--reliable",
        "--no-multicast",
        "--listen",
        &listen,
        "--count",
        "3",
    ]);
    let peer = listen.clone();
    let pub_args = topic_pub::Args::parse_from([
        "topic_pub",
        "--topic",
        "demo/e2e",
        "--partition",
        "robot/1",
        "--no-multicast",
        "--listen",
        "127.0.0.1:0",
        "--peer",
        &peer,
        "--rate",
        "50",
        "--wait-match",
    ]);
    let stop = Arc::new(AtomicBool::new(false));
    let sub_stop = Arc::new(AtomicBool::new(false));
    let (done, result) = std::sync::mpsc::channel();
    let ss = sub_stop.clone();
    let sub = std::thread::spawn(move || {
        let mut out = Vec::new();
        let got = topic_sub::run(&sub_args, &ss, &mut out).unwrap();
        let _ = done.send(());
        (got, String::from_utf8(out).unwrap())
    });
    let s = stop.clone();
    let publisher = std::thread::spawn(move || {
        let mut out = Vec::new();
        let n = topic_pub::run(&pub_args, &s, &mut out).unwrap();
        (n, String::from_utf8(out).unwrap())
    });
    // The subscriber ends by itself after three samples; if they never come, it is told to
    // stop after 30 s and the assertions below say what it saw.
    if result.recv_timeout(Duration::from_secs(30)).is_err() {
        sub_stop.store(true, Ordering::Relaxed);
    }
    let (got, sub_out) = sub.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (written, pub_out) = publisher.join().unwrap();
    assert_eq!(got, 3, "subscriber:\n{sub_out}\npublisher:\n{pub_out}");
    assert!(written >= 3, "{pub_out}");
    // The subscriber's own `matched` line may come after its samples (control events and
    // samples are ordered each in their class only), or after it exited: not checked.
    let seqs: Vec<u64> = sub_out
        .lines()
        .filter_map(|l| l.strip_prefix("sample writer="))
        .map(|l| {
            assert!(l.contains(" len="), "{l}");
            let seq = l.split(" seq=").nth(1).unwrap().split(' ').next().unwrap();
            seq.parse().unwrap()
        })
        .collect();
    assert_eq!(seqs.len(), 3, "{sub_out}");
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "in order: {seqs:?}"
    );
    assert!(pub_out.contains("matched reader="), "{pub_out}");
    assert!(pub_out.contains("wrote seq=1 "), "{pub_out}");
}
