//! `ping` on one lab host, `pong` on another, found by multicast discovery alone, on the
//! project's lab (`shoal_tests::lab`): without and with 5 ms of added delay each way on the
//! pong's host. The round trip moves by the delay (`Lab::delay` delays what the host sends
//! and what it receives, so a round trip crosses it twice: +10 ms), nothing is lost,
//! and both processes end by themselves. Needs root; otherwise it prints why it was skipped.

use shoal_tests::{HostProcess, Lab};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_shoal-loadgen");

/// Reads `p`'s stdout until it closes (the process ended) or `secs` pass; the JSON it printed.
fn json_of(p: &mut HostProcess, secs: u64, who: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let _ = p.wait_line(deadline, |_| false);
    assert!(
        Instant::now() < deadline,
        "{who} did not end by itself within {secs} s:\n{}",
        p.tail(30)
    );
    let text = p.transcript.join("\n");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{who}: not JSON ({e}):\n{text}"))
}

/// One ping (h1) / pong (h2) run found by multicast in `group`; `(ping run, pong summary)`.
fn run(lab: &Lab, group: &str) -> (serde_json::Value, serde_json::Value) {
    let node = |k: usize| {
        let addr = lab.addr(k);
        vec![
            "--group".to_string(),
            group.to_string(),
            "--multicast-interface".to_string(),
            addr.clone(),
            "--listen".to_string(),
            format!("{addr}:0"),
            "--warmup-ms".to_string(),
            "300".to_string(),
            "--duration-ms".to_string(),
            "1500".to_string(),
            "--json".to_string(),
        ]
    };
    let mut pong_args = vec!["pong".to_string(), "--linger-ms".into(), "30000".into()];
    pong_args.extend(node(2));
    let mut pong = lab.spawn(2, BIN, &pong_args);
    let mut ping_args = vec!["ping".to_string()];
    ping_args.extend(node(1));
    let mut ping = lab.spawn(1, BIN, &ping_args);
    let ping = json_of(&mut ping, 60, "ping");
    let pong = json_of(&mut pong, 20, "pong");
    (ping["runs"][0].clone(), pong)
}

fn check_nothing_lost(run: &serde_json::Value, pong: &serde_json::Value) -> f64 {
    let sent = run["round_trips"].as_u64().unwrap_or(0);
    assert!(run["measured"].as_u64().unwrap_or(0) > 0, "{run}");
    assert_eq!(run["timeouts"].as_u64(), Some(0), "{run}");
    assert_eq!(run["pong"]["echoed"].as_u64(), Some(sent), "{run}");
    assert_eq!(pong["echoed"].as_u64(), Some(sent), "{pong}");
    assert_eq!(pong["ended_by"], "goodbye", "{pong}");
    run["percentiles"]["p50_us"].as_f64().expect("p50")
}

#[test]
fn ping_pong_across_lab_hosts_moves_by_the_added_delay() {
    if shoal_tests::skip_without_lab() {
        return;
    }
    let lab = Lab::up("shP", 2);
    let (plain, pong) = run(&lab, "netlab-pp-a");
    let base = check_nothing_lost(&plain, &pong);

    lab.delay(2, 5);
    let (delayed, pong) = run(&lab, "netlab-pp-b");
    let slow = check_nothing_lost(&delayed, &pong);
    println!("p50 without delay {base:.1} µs, with 5 ms each way {slow:.1} µs");
    assert!(
        slow - base >= 9_500.0,
        "5 ms each way must add ~10 ms to the round trip: {base:.1} -> {slow:.1} µs"
    );
    assert!(
        slow - base <= 40_000.0,
        "the round trip grew by far more than the delay: {base:.1} -> {slow:.1} µs"
    );
}
