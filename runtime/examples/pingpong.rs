//! Round-trip latency and CPU cost of spin-before-park vs park-at-once.
//!
//! `cargo run --release -p shoal-runtime --example pingpong -- [rounds] [iters] [spin_us]`
//!
//! Two shards pinned to CPUs 0 and 1 play ping-pong with 64-byte messages, over TCP on
//! 127.0.0.1 and over a cross-executor channel pair. Each round builds one runtime with
//! no spin and one with `spin_us` of spin, interleaved, and prints p50/p99 round trip and
//! process CPU time per round trip.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use shoal_runtime::channel::channel;
use shoal_runtime::net::{TcpListener, TcpStream};
use shoal_runtime::{ExecutorId, Placement, Runtime};

const MSG: usize = 64;

fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the whole `rusage` we point at (zeroed, so valid either way).
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn runtime(spin: Duration) -> Runtime {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    Runtime::builder()
        .shards(2)
        .placement(Placement::Pinned((0..cpus.min(2)).collect()))
        .spin_before_park(spin)
        .build()
        .expect("runtime")
}

fn tcp(spin: Duration, iters: usize) -> (Vec<u64>, Duration) {
    let rt = runtime(spin);
    let (mut atx, mut arx) = channel::<SocketAddr>(1);
    let server = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .await
                .unwrap();
            atx.send(l.local_addr().unwrap()).await.unwrap();
            let (mut s, _) = l.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = BytesMut::with_capacity(4096);
            loop {
                while buf.len() < MSG {
                    let (r, b) = s.read(buf).await;
                    buf = b;
                    if r.unwrap() == 0 {
                        return;
                    }
                }
                let msg = buf.split_to(MSG).freeze();
                s.write_all(msg).await.unwrap();
            }
        })
        .unwrap();
    let client = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            let addr = arx.recv().await.unwrap();
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            let payload = Bytes::from(vec![7u8; MSG]);
            let mut buf = BytesMut::with_capacity(4096);
            let mut lat = Vec::with_capacity(iters);
            let cpu0 = cpu_time();
            for _ in 0..iters {
                let t = Instant::now();
                s.write_all(payload.clone()).await.unwrap();
                while buf.len() < MSG {
                    let (r, b) = s.read(buf).await;
                    buf = b;
                    r.unwrap();
                }
                buf.clear();
                lat.push(t.elapsed().as_nanos() as u64);
            }
            let cpu = cpu_time() - cpu0;
            s.shutdown().await.unwrap();
            (lat, cpu)
        })
        .unwrap();
    let out = client.join_blocking().unwrap();
    server.join_blocking().unwrap();
    rt.join().unwrap();
    out
}

fn chan(spin: Duration, iters: usize) -> (Vec<u64>, Duration) {
    let rt = runtime(spin);
    let (mut ping_tx, mut ping_rx) = channel::<[u8; MSG]>(16);
    let (mut pong_tx, mut pong_rx) = channel::<[u8; MSG]>(16);
    let echo = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            while let Ok(m) = ping_rx.recv().await {
                if pong_tx.send(m).await.is_err() {
                    break;
                }
            }
        })
        .unwrap();
    let client = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            let mut lat = Vec::with_capacity(iters);
            let cpu0 = cpu_time();
            for i in 0..iters {
                let t = Instant::now();
                ping_tx.send([i as u8; MSG]).await.unwrap();
                pong_rx.recv().await.unwrap();
                lat.push(t.elapsed().as_nanos() as u64);
            }
            (lat, cpu_time() - cpu0)
        })
        .unwrap();
    let out = client.join_blocking().unwrap();
    echo.join_blocking().unwrap();
    rt.join().unwrap();
    out
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let rounds = args.first().copied().unwrap_or(6) as usize;
    let iters = args.get(1).copied().unwrap_or(20_000) as usize;
    let spin = Duration::from_micros(args.get(2).copied().unwrap_or(50));
    type Bench = fn(Duration, usize) -> (Vec<u64>, Duration);
    for (name, f) in [("tcp", tcp as Bench), ("channel", chan as Bench)] {
        let mut all: [(Vec<u64>, Duration); 2] = Default::default();
        for _ in 0..rounds {
            for (k, s) in [Duration::ZERO, spin].into_iter().enumerate() {
                let (lat, cpu) = f(s, iters);
                all[k].0.extend(lat);
                all[k].1 += cpu;
            }
        }
        for (k, s) in [Duration::ZERO, spin].into_iter().enumerate() {
            let (lat, cpu) = &mut all[k];
            lat.sort_unstable();
            println!(
                "{name:8} spin={:>3}us  p50={:7.1}us p99={:7.1}us  cpu/rt={:6.1}us  ({} round trips)",
                s.as_micros(),
                pct(lat, 0.5),
                pct(lat, 0.99),
                cpu.as_nanos() as f64 / lat.len() as f64 / 1000.0,
                lat.len()
            );
        }
    }
}
