//! Socket operations on the ring, measured against each other in one process, interleaved:
//! single-shot recv into a caller's buffer (what `shoal_runtime::net` does) vs multishot recv
//! with a kernel-provided buffer ring, and send vs `SEND_ZC`, on a loopback TCP stream.
//!
//! `cargo run --release -p shoal-runtime --example ring_io -- [rounds] [scale]`
//!
//! Receive legs: a plain thread on CPU 1 writes 64 KiB chunks as fast as the socket takes
//! them; a compio executor on CPU 0 reads them with reads of at most 64 B or 16 KiB:
//! - `single`: one `recv` per read into a reused buffer (the bytes land where the caller
//!   wants them; no copy after);
//! - `multi+copy`: one multishot `recv` with a provided buffer ring, each kernel buffer copied
//!   into the caller's buffer (what Shoal's link reader would need today: frames are slices
//!   of the link's read buffer) and given back to the ring;
//! - `multi`: the same without the copy (the bound of a reader redesigned around ring
//!   buffers).
//!
//! Send legs: a compio executor on CPU 1 writes 16 KiB or 64 KiB buffers with `send` or
//! `SEND_ZC` (`AsyncWriteZerocopy`, waiting for the buffer-release notification before
//! reusing a buffer); a plain thread on CPU 0 reads.
//!
//! This file talks to compio directly: it measures operations `shoal_runtime::net` does not
//! offer, to decide whether it should.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::num::NonZero;
use std::time::{Duration, Instant};

use compio::io::{AsyncRead, AsyncReadMulti, AsyncWrite, AsyncWriteZerocopy};
use futures_util::StreamExt;

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

fn pin(cpu: usize) {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // SAFETY: all-zero is a valid `cpu_set_t`; CPU_SET sets a bit inside it (index reduced
    // modulo the CPU count, far below CPU_SETSIZE); sched_setaffinity reads it for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % cpus, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn compio_rt(pool_buffers: u16, pool_len: usize) -> compio::runtime::Runtime {
    let mut p = compio::driver::ProactorBuilder::new();
    p.capacity(256)
        .buffer_pool_size(NonZero::new(pool_buffers).expect("non-zero"))
        .buffer_pool_buffer_len(pool_len);
    compio::runtime::RuntimeBuilder::new()
        .with_proactor(p)
        .build()
        .expect("compio runtime")
}

fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).expect("bind");
    let a = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    (a, b)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recv {
    Single,
    MultiCopy,
    Multi,
}

/// Bytes per second and receive operations (completions) for one receive leg.
fn recv_leg(mode: Recv, len: usize, total: usize) -> (f64, u64, Duration) {
    let (tx, rx) = pair();
    let writer = std::thread::spawn(move || {
        pin(1);
        let mut tx = tx;
        let chunk = vec![7u8; 64 * 1024];
        let mut left = total;
        while left > 0 {
            let n = left.min(chunk.len());
            tx.write_all(&chunk[..n]).expect("write");
            left -= n;
        }
    });
    pin(0);
    let pool_buffers = if len <= 1024 { 1024 } else { 64 };
    let rt = compio_rt(pool_buffers, len);
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let ops = rt.block_on(async move {
        let mut s = compio::net::TcpStream::from_std(rx).expect("attach");
        let mut got = 0usize;
        let mut ops = 0u64;
        let mut sink: Vec<u8> = Vec::with_capacity(len);
        match mode {
            Recv::Single => {
                while got < total {
                    sink.clear();
                    let compio::BufResult(r, b) = s.read(sink).await;
                    sink = b;
                    let n = r.expect("read");
                    assert!(n > 0, "early EOF");
                    got += n;
                    ops += 1;
                }
            }
            Recv::Multi | Recv::MultiCopy => {
                let stream = s.read_multi(len);
                let mut stream = std::pin::pin!(stream);
                while got < total {
                    match stream.next().await {
                        Some(Ok(buf)) => {
                            if mode == Recv::MultiCopy {
                                sink.clear();
                                sink.extend_from_slice(&buf);
                                std::hint::black_box(&sink);
                            }
                            got += buf.len();
                            ops += 1;
                        }
                        // The ring ran out of buffers: the kernel ended the multishot
                        // receive; the stream submits a new one on the next poll.
                        Some(Err(e)) if e.kind() == std::io::ErrorKind::ResourceBusy => {}
                        Some(Err(e)) => panic!("multishot recv: {e}"),
                        None => panic!("early EOF"),
                    }
                }
            }
        }
        ops
    });
    let wall = t0.elapsed();
    let cpu = cpu_time() - cpu0;
    writer.join().expect("writer");
    (total as f64 / wall.as_secs_f64(), ops, cpu)
}

/// Bytes per second for one send leg.
fn send_leg(zc: bool, len: usize, total: usize) -> (f64, Duration) {
    let (tx, rx) = pair();
    let reader = std::thread::spawn(move || {
        pin(0);
        let mut rx = rx;
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < total {
            let n = rx.read(&mut buf).expect("read");
            assert!(n > 0, "early EOF");
            got += n;
        }
    });
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        pin(1);
        let rt = compio_rt(8, 8192);
        rt.block_on(async move {
            let mut s = compio::net::TcpStream::from_std(tx).expect("attach");
            let mut buf = vec![7u8; len];
            let mut sent = 0usize;
            while sent < total {
                if zc {
                    let compio::BufResult(r, ready) = s.write_zerocopy(buf).await;
                    let n = r.expect("send_zc");
                    // The kernel holds the buffer until it says it is done with it.
                    buf = ready.await;
                    sent += n;
                } else {
                    let compio::BufResult(r, b) = s.write(buf).await;
                    buf = b;
                    sent += r.expect("send");
                }
            }
            let _ = s.shutdown().await;
        });
    })
    .join()
    .expect("sender");
    reader.join().expect("reader");
    let wall = t0.elapsed();
    (total as f64 / wall.as_secs_f64(), cpu_time() - cpu0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let scale: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    for len in [64usize, 16 * 1024] {
        let total = scale * if len <= 1024 { 16 << 20 } else { 1 << 30 };
        let modes = [Recv::Single, Recv::MultiCopy, Recv::Multi];
        let mut rate: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut cpu_per_gb: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        for r in 0..rounds {
            let mut order: Vec<usize> = (0..modes.len()).collect();
            order.rotate_left(r % modes.len());
            let mut this = vec![0.0; modes.len()];
            for &i in &order {
                let (bps, ops, cpu) = recv_leg(modes[i], len, total);
                println!(
                    "recv {len:>5} B reads {:>10}: {:>8.1} MB/s, {:>8} ops ({:>6.0} B/op), cpu {:.3} s",
                    format!("{:?}", modes[i]),
                    bps / 1e6,
                    ops,
                    total as f64 / ops as f64,
                    cpu.as_secs_f64()
                );
                this[i] = bps;
                rate[i].push(bps);
                cpu_per_gb[i].push(cpu.as_secs_f64() / (total as f64 / 1e9));
            }
            for i in 0..modes.len() {
                ratios[i].push(this[i] / this[0]);
            }
        }
        for i in 0..modes.len() {
            let pairs: Vec<String> = ratios[i].iter().map(|x| format!("{x:.2}")).collect();
            println!(
                "SUMMARY recv {len} B {:?}: median {:.1} MB/s, cpu {:.3} s/GB, vs single per round [{}] median {:.2}",
                modes[i],
                median(&mut rate[i]) / 1e6,
                median(&mut cpu_per_gb[i]),
                pairs.join(", "),
                median(&mut ratios[i].clone())
            );
        }
    }
    for len in [16 * 1024usize, 64 * 1024] {
        let total = scale << 30;
        let mut rate = [Vec::new(), Vec::new()];
        let mut ratios = Vec::new();
        for r in 0..rounds {
            let mut this = [0.0; 2];
            let order = if r % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for zc in order {
                let (bps, cpu) = send_leg(zc, len, total);
                println!(
                    "send {len:>5} B writes {:>7}: {:>8.1} MB/s, cpu {:.3} s",
                    if zc { "SEND_ZC" } else { "send" },
                    bps / 1e6,
                    cpu.as_secs_f64()
                );
                this[usize::from(zc)] = bps;
                rate[usize::from(zc)].push(bps);
            }
            ratios.push(this[1] / this[0]);
        }
        let pairs: Vec<String> = ratios.iter().map(|x| format!("{x:.2}")).collect();
        println!(
            "SUMMARY send {len} B: send median {:.1} MB/s, SEND_ZC median {:.1} MB/s, ZC/send per round [{}] median {:.2}",
            median(&mut rate[0]) / 1e6,
            median(&mut rate[1]) / 1e6,
            pairs.join(", "),
            median(&mut ratios)
        );
    }
}
