//! Rough one-way throughput of two live nodes on 127.0.0.1 (Block policy: nothing is lost).
//! Not a benchmark harness (those live in `bench/`): a quick sanity number.
//!
//! `cargo run --release -p shoal-mesh --example node_throughput -- [messages] [payload bytes] [shards]`

use shoal_mesh::{Event, Mesh};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let n = args.first().copied().unwrap_or(1_000_000);
    let size = args.get(1).copied().unwrap_or(64);
    let shards = args.get(2).copied().unwrap_or(1);
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let b = Mesh::builder()
        .scouting(false)
        .listen_addr(lo)
        .shards(shards)
        .build()?;
    let mut rx = b.events();
    b.start()?;
    let a = Mesh::builder()
        .scouting(false)
        .listen_addr(lo)
        .shards(shards)
        .static_peer(format!("127.0.0.1:{}", b.listen_port()))
        .build()?;
    a.start()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.connected_peers().is_empty() {
        if Instant::now() > deadline {
            return Err("no connection".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let counter = std::thread::spawn(move || {
        let mut got = 0usize;
        while got < n {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Some(Event::Message { .. }) => got += 1,
                Some(_) => {}
                None => break,
            }
        }
        (got, Instant::now())
    });
    let payload = bytes::Bytes::from(vec![7u8; size]);
    let start = Instant::now();
    for _ in 0..n {
        a.broadcast_blocking(payload.clone())?;
    }
    let (got, end) = counter.join().expect("counter thread");
    let secs = end.duration_since(start).as_secs_f64();
    println!(
        "{got}/{n} messages of {size} B, {shards} shard(s): {:.0} msg/s, {:.1} MB/s payload, {:.2} s",
        got as f64 / secs,
        (got * size) as f64 / secs / 1e6,
        secs
    );
    println!("sender: {:?}", a.stats().total);
    println!("receiver: {:?}", b.stats().total);
    a.stop();
    b.stop();
    Ok(())
}
