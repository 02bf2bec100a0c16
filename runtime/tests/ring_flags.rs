//! io_uring setup flags: refused combinations are typed errors, and every accepted set still
//! wakes executors from other threads, from other executors, from sockets and from timers.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_runtime::channel::{channel, ingress};
use shoal_runtime::net::{TcpListener, TcpStream};
use shoal_runtime::time::sleep;
use shoal_runtime::{ExecutorId, RingFlags, Runtime, RuntimeError};

#[test]
fn defer_taskrun_without_single_issuer_is_a_config_error() {
    let flags = RingFlags {
        defer_taskrun: true,
        taskrun_flag: true,
        ..RingFlags::NONE
    };
    let err = Runtime::builder().ring_flags(flags).build().unwrap_err();
    match err {
        RuntimeError::Config(msg) => assert!(msg.contains("SINGLE_ISSUER"), "{msg}"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn flags_the_kernel_refuses_are_a_typed_error_naming_them() {
    // The kernel accepts TASKRUN_FLAG only with COOP_TASKRUN or DEFER_TASKRUN (since 5.19,
    // when it appeared); older kernels refuse the flag itself. Either way: EINVAL.
    let flags = RingFlags {
        taskrun_flag: true,
        ..RingFlags::NONE
    };
    let err = Runtime::builder()
        .shards(2)
        .ring_flags(flags)
        .build()
        .unwrap_err();
    match &err {
        RuntimeError::RingFlagsRefused {
            flags: refused,
            source,
            ..
        } => {
            assert_eq!(*refused, flags);
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL));
            assert!(err.to_string().contains("TASKRUN_FLAG"), "{err}");
        }
        other => panic!("expected RingFlagsRefused, got {other:?}"),
    }
}

#[test]
fn ring_flags_display_names_the_kernel_flags() {
    assert_eq!(RingFlags::NONE.to_string(), "none");
    assert_eq!(
        RingFlags::DEFERRED.to_string(),
        "SINGLE_ISSUER|DEFER_TASKRUN|TASKRUN_FLAG"
    );
    assert_eq!(RingFlags::COOP.to_string(), "COOP_TASKRUN|TASKRUN_FLAG");
}

/// Wakes of every kind reach executors whose rings run with `flags`: spawns and ingress sends
/// from a plain thread, channel round trips between two parked shards, a TCP echo between
/// them and a timer.
fn wakes_arrive_with(flags: RingFlags) {
    let rt = Runtime::builder()
        .shards(2)
        .ring_flags(flags)
        .build()
        .unwrap();

    // A plain thread wakes a parked executor: spawns, then an ingress it drains.
    for i in 0..50u64 {
        let h = rt
            .spawn_on(
                ExecutorId::Shard((i % 2) as usize),
                move || async move { i * 2 },
            )
            .unwrap();
        assert_eq!(h.join_blocking().unwrap(), i * 2);
    }
    let (in_tx, mut in_rx) = ingress::<u64>(4);
    let drained = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            let mut sum = 0;
            while let Ok(v) = in_rx.recv().await {
                sum += v;
            }
            sum
        })
        .unwrap();
    for v in 1..=200u64 {
        in_tx.send_blocking(v).unwrap();
    }
    drop(in_tx);
    assert_eq!(drained.join_blocking().unwrap(), 200 * 201 / 2);

    // Executor to executor: one message in flight, so each side parks between messages.
    let (mut ping_tx, mut ping_rx) = channel::<u32>(1);
    let (mut pong_tx, mut pong_rx) = channel::<u32>(1);
    let ponger = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            while let Ok(v) = ping_rx.recv().await {
                pong_tx.send(v + 1).await.unwrap();
            }
        })
        .unwrap();
    let pinger = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let mut v = 0;
            for _ in 0..500 {
                ping_tx.send(v).await.unwrap();
                v = pong_rx.recv().await.unwrap();
            }
            v
        })
        .unwrap();
    assert_eq!(pinger.join_blocking().unwrap(), 500);
    ponger.join_blocking().unwrap();

    // Sockets and a timer: an echo over loopback between the two shards.
    let (mut addr_tx, mut addr_rx) = channel::<SocketAddr>(1);
    let server = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .await
                .unwrap();
            addr_tx.send(l.local_addr().unwrap()).await.unwrap();
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = BytesMut::with_capacity(256);
            loop {
                let (r, b) = s.read(buf).await;
                buf = b;
                if r.unwrap() == 0 {
                    return;
                }
                s.write_all(buf.split().freeze()).await.unwrap();
            }
        })
        .unwrap();
    let client = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            let addr = addr_rx.recv().await.unwrap();
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = BytesMut::with_capacity(256);
            for i in 0..200u8 {
                s.write_all(Bytes::from(vec![i; 32])).await.unwrap();
                while buf.len() < 32 {
                    let (r, b) = s.read(buf).await;
                    buf = b;
                    assert!(r.unwrap() > 0, "early EOF");
                }
                assert!(buf.split_to(32).iter().all(|&x| x == i));
            }
            sleep(Duration::from_millis(1)).await;
            s.shutdown().await.unwrap();
        })
        .unwrap();
    client.join_blocking().unwrap();
    server.join_blocking().unwrap();
    rt.join().unwrap();
}

#[test]
fn wakes_arrive_with_no_flags() {
    wakes_arrive_with(RingFlags::NONE);
}

#[test]
fn wakes_arrive_with_deferred_taskrun() {
    wakes_arrive_with(RingFlags::DEFERRED);
}

#[test]
fn wakes_arrive_with_coop_taskrun() {
    wakes_arrive_with(RingFlags::COOP);
}
