//! Calls per second of `Mesh::try_broadcast` from `threads` application threads at once, on a
//! node with one linked peer (Block policy, 64 B payloads). Counts every call, accepted or
//! `Full`: what it measures is the cost of the non-waiting checks plus the ingress hand-over,
//! and how it holds up when several threads publish into one node. Not a benchmark harness
//! (those live in `bench/`): an A/B probe, run before and after a change in one script.
//!
//! `cargo run --release -p shoal-mesh --example try_publish -- [threads] [duration ms]`

use shoal_mesh::{Mesh, PublishError};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let threads = args.first().copied().unwrap_or(1) as usize;
    let duration = Duration::from_millis(args.get(1).copied().unwrap_or(2000));
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let b = Mesh::builder().scouting(false).listen_addr(lo).build()?;
    b.start()?;
    let a = Mesh::builder()
        .scouting(false)
        .listen_addr(lo)
        .static_peer(format!("127.0.0.1:{}", b.listen_port()))
        .build()?;
    a.start()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.connected_peers().is_empty() {
        if Instant::now() > deadline {
            return Err("no connection".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let payload = bytes::Bytes::from_static(&[7u8; 64]);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let counts: Vec<(u64, u64)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let (mut ok, mut full) = (0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        match a.try_broadcast(payload.clone()) {
                            Ok(()) => ok += 1,
                            Err(PublishError::Full) => full += 1,
                            Err(e) => panic!("try_broadcast: {e}"),
                        }
                    }
                    (ok, full)
                })
            })
            .collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let ok: u64 = counts.iter().map(|c| c.0).sum();
    let full: u64 = counts.iter().map(|c| c.1).sum();
    println!(
        "threads={threads} calls/s={:.0} accepted/s={:.0} full/s={:.0}",
        (ok + full) as f64 / secs,
        ok as f64 / secs,
        full as f64 / secs
    );
    a.stop();
    b.stop();
    Ok(())
}
