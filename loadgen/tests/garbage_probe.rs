//! Issue 24, logs: a `sub` run with `RUST_LOG=warn` that a stranger floods with 500 garbage
//! TCP connections and 5 000 junk discovery datagrams prints at most 100 lines in all (it
//! printed one WARN line per error event: 535). The node aggregates its own warnings; the
//! role aggregates the error events it receives the same way (`shoal_mesh::ErrorLog`), and
//! still says how many there were. The probe waits for the node's counters, never for time.

use std::io::Write;
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

mod support;

use support::{field, http_get, Proc};

/// Waits (at most `secs`) for `p` to end by itself and for its last line; every line it
/// wrote.
fn finish(mut p: Proc, secs: u64) -> Vec<String> {
    let status = p.wait_end(secs);
    p.drain();
    assert!(status.success(), "failed: {status}; output {:?}", p.seen);
    std::mem::take(&mut p.seen)
}

/// The control plane's counter `name` on the metrics page at `host`.
fn control(host: &str, name: &str) -> u64 {
    let page = http_get(host);
    let key = format!("shoal_{name}_total{{shard=\"control\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} on the metrics page"))
}

fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_garbage_flood_gives_a_sub_at_most_a_hundred_lines() {
    probe(&[]);
}

/// The same with `--topic`: the topic subscriber's receive loop.
#[test]
fn a_garbage_flood_gives_a_topic_sub_at_most_a_hundred_lines() {
    probe(&["--topic", "probe"]);
}

/// Runs the garbage probe against `sub` (with `extra` arguments, given to the publisher that
/// ends it too) and checks its output.
fn probe(extra: &[&str]) {
    // A discovery port and group of its own: parallel tests never hear each other.
    let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!(
        "shoal-garbage-probe-{}-{}",
        std::process::id(),
        extra.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("mesh.toml");
    std::fs::write(&cfg, format!("multicast_port = {port}\n")).unwrap();
    let group = format!("garbage-probe-{}-{}", std::process::id(), extra.len());
    let mut sub_args = vec![
        "sub",
        "--listen",
        "127.0.0.1:0",
        "--group",
        &group,
        "--multicast-interface",
        "127.0.0.1",
        "--config",
        cfg.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
        "--warmup-ms",
        "0",
        "--duration-ms",
        "200",
        "--linger-ms",
        "300000",
        "--publishers",
        "1",
    ];
    sub_args.extend(extra);
    let mut sub = Proc::start(&sub_args, &[("RUST_LOG", "warn")], true);
    let ready = sub.line("sub ready:", 60);
    let listen = field(&ready, "listen").to_string();
    let url = sub.line("metrics: http://", 60);
    let host = url
        .split_whitespace()
        .nth(1)
        .expect("url")
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();

    // 500 garbage connections: half an HTTP request (its first four bytes read as a frame
    // length far above the bound: Oversize), half a frame of an unknown type (Malformed).
    for i in 0..500 {
        let mut s = TcpStream::connect(listen.as_str()).expect("connect");
        let junk: &[u8] = if i % 2 == 0 {
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        } else {
            &[0, 0, 0, 1, 0xee]
        };
        let _ = s.write_all(junk);
    }
    wait_until(120, "the sub handled every garbage connection", || {
        [
            "malformed_frames",
            "oversize_frames",
            "handshakes_evicted",
            "connections_refused",
        ]
        .iter()
        .map(|n| control(&host, n))
        .sum::<u64>()
            >= 500
    });
    // 5 000 junk datagrams on its discovery port, in batches its socket buffer keeps.
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut sent = 0u64;
    while sent < 5000 {
        let base = control(&host, "announces_dropped");
        for _ in 0..50 {
            tx.send_to(b"junk", ("127.0.0.1", port)).unwrap();
        }
        sent += 50;
        wait_until(30, "the junk batch counted", || {
            control(&host, "announces_dropped") >= base + 50
        });
    }

    // A publisher's end marker ends the sub, which prints its summary.
    let mut pub_args = vec![
        "pub",
        "--listen",
        "127.0.0.1:0",
        "--group",
        &group,
        "--static-peer",
        &listen,
        "--warmup-ms",
        "0",
        "--duration-ms",
        "200",
        "--rate",
        "100",
        "--quiet",
    ];
    pub_args.extend(extra);
    let publisher = Proc::start(&pub_args, &[("RUST_LOG", "warn")], true);
    let lines = finish(sub, 120);
    drop(publisher);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        lines.len() <= 100,
        "{} lines for 5 500 bad inputs:\n{}",
        lines.len(),
        lines.join("\n")
    );
    // Aggregated, not silenced: each kind's first error, and then how many more there were.
    let has = |s: &str| lines.iter().any(|l| l.contains(s));
    assert!(has("mesh error kind=Oversize"), "{lines:#?}");
    assert!(has("more 'mesh error kind="), "{lines:#?}");
}
