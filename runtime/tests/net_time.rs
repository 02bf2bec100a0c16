//! Sockets and timers over 127.0.0.1.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use shoal_runtime::channel::channel;
use shoal_runtime::net::{TcpListener, TcpStream, UdpOptions, UdpSocket};
use shoal_runtime::time::{sleep, sleep_until, timeout};
use shoal_runtime::{spawn_local, ExecutorId, Runtime};

fn localhost(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

#[test]
fn tcp_echo_across_executors_with_split_and_vectored_writes() {
    let rt = Runtime::builder().shards(2).build().unwrap();
    let (mut addr_tx, mut addr_rx) = channel::<SocketAddr>(1);
    let server = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let listener = TcpListener::bind(localhost(0)).await.unwrap();
            let addr = listener.local_addr().unwrap();
            assert_ne!(addr.port(), 0);
            addr_tx.send(addr).await.unwrap();
            let (stream, peer) = listener.accept().await.unwrap();
            assert_eq!(stream.peer_addr().unwrap(), peer);
            stream.set_nodelay(true).unwrap();
            // Echo with the halves owned by two tasks on this executor.
            let (mut r, mut w) = stream.into_split();
            let (mut tx, mut rx) = channel::<Bytes>(4);
            let writer = spawn_local(async move {
                while let Ok(b) = rx.recv().await {
                    w.write_all(b).await.unwrap();
                }
                w.shutdown().await.unwrap();
            });
            let mut buf = BytesMut::with_capacity(64);
            let mut total = 0;
            loop {
                let (res, b) = r.read(buf).await;
                let n = res.unwrap();
                if n == 0 {
                    break;
                }
                total += n;
                buf = b;
                tx.send(buf.split().freeze()).await.unwrap();
            }
            drop(tx);
            writer.await.unwrap();
            total
        })
        .unwrap();
    let client = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            let addr = addr_rx.recv().await.unwrap();
            let mut s = TcpStream::connect(addr).await.unwrap();
            assert_eq!(s.peer_addr().unwrap(), addr);
            assert!(s.local_addr().unwrap().ip().is_loopback());
            let parts = vec![
                Bytes::from_static(b"hello "),
                Bytes::from_static(b"shoal "),
                Bytes::from(vec![b'x'; 5000]),
            ];
            let (res, parts) = s.write_all_vectored(parts).await;
            res.unwrap();
            assert_eq!(parts.len(), 3);
            s.write_all(Bytes::from_static(b"!")).await.unwrap();
            s.shutdown().await.unwrap();
            let mut echoed = BytesMut::new();
            loop {
                let (res, b) = s.read(echoed).await;
                echoed = b;
                if res.unwrap() == 0 {
                    break;
                }
            }
            // Data went both ways and was acknowledged: the kernel has measured the link.
            assert!(s.rtt().unwrap() > Duration::ZERO, "an RTT was measured");
            echoed
        })
        .unwrap();
    let echoed = client.join_blocking().unwrap();
    assert_eq!(echoed.len(), 12 + 5000 + 1);
    assert!(echoed.starts_with(b"hello shoal x"));
    assert!(echoed.ends_with(b"x!"));
    assert_eq!(server.join_blocking().unwrap(), echoed.len());
    rt.join().unwrap();
}

/// What the kernel says of a connection whose peer reads nothing, then everything, looked at
/// through a probe while the write half is stuck in its write: `send_queue` (what the kernel
/// holds unacknowledged) grows and falls to zero once the peer took everything; `path_state`
/// tells a peer that stopped reading from a path that stopped acknowledging (the window
/// closes with everything sent acknowledged, though the kernel holds megabytes) and counts
/// what the peer acknowledged; the probe
/// holds the connection open until it is dropped too.
#[test]
fn a_probe_sees_the_kernel_hold_what_a_peer_that_reads_nothing_has_acknowledged() {
    const TOTAL: usize = 8 << 20;
    let rt = Runtime::builder().build().unwrap();
    let h = rt
        .spawn_on(ExecutorId::Shard(0), || async {
            let l = TcpListener::bind(localhost(0)).await.unwrap();
            let s = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (mut server, _) = l.accept().await.unwrap();
            let (rd, mut writer) = s.into_split();
            let probe = writer.probe();
            assert_eq!(probe.send_queue().unwrap(), 0, "nothing written yet");
            assert_eq!(probe.path_state().unwrap().unacked, 0, "nothing sent yet");
            let wrote = spawn_local(async move {
                writer
                    .write_all(Bytes::from(vec![7u8; TOTAL]))
                    .await
                    .unwrap();
                writer
            });
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let (held, ack) = (probe.send_queue().unwrap(), probe.path_state().unwrap());
                if held >= 256 * 1024 && ack.unacked == 0 {
                    let acked = ack.bytes_acked as usize;
                    assert!(acked > 1 && acked + held <= TOTAL + 1, "{acked} acked, {held} held");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the window never closed with everything sent acknowledged: {held} held, {ack:?}"
                );
                sleep(Duration::from_millis(5)).await;
            }
            let mut got = 0;
            let mut buf = BytesMut::new();
            while got < TOTAL {
                buf.clear();
                let (res, b) = server.read(buf).await;
                buf = b;
                got += res.unwrap();
            }
            let writer = wrote.await;
            loop {
                let ack = probe.path_state().unwrap();
                if ack.unacked == 0 && probe.send_queue().unwrap() == 0 {
                    assert!(ack.since_ack < Duration::from_secs(10), "{ack:?}");
                    // The count includes the connection's opening (its SYN).
                    assert_eq!(ack.bytes_acked as usize, TOTAL + 1, "everything acknowledged");
                    break;
                }
                assert!(Instant::now() < deadline, "never drained: {ack:?}");
                sleep(Duration::from_millis(5)).await;
            }
            drop((rd, writer));
            let eof = timeout(Duration::from_millis(200), server.read(BytesMut::new())).await;
            assert!(eof.is_err(), "closed while the probe held it");
            drop(probe);
            let (res, _) = server.read(BytesMut::new()).await;
            assert_eq!(res.unwrap(), 0, "closed once the probe went");
            got
        })
        .unwrap();
    assert_eq!(h.join_blocking().unwrap(), TOTAL);
    rt.join().unwrap();
}

#[test]
fn the_congestion_control_is_set_on_the_listener_and_each_stream() {
    // Reno is built into every Linux kernel and allowed to every process.
    let rt = Runtime::builder().build().unwrap();
    let h = rt
        .spawn_on(ExecutorId::Shard(0), || async {
            let l = TcpListener::bind(localhost(0)).await.unwrap();
            l.set_congestion("reno").unwrap();
            let s = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (accepted, _) = l.accept().await.unwrap();
            let inherited = accepted.congestion().unwrap();
            s.set_congestion("reno").unwrap();
            let set = s.congestion().unwrap();
            let unknown = s.set_congestion("no_such_cc").unwrap_err().kind();
            (inherited, set, unknown, s.congestion().unwrap())
        })
        .unwrap();
    let (inherited, set, unknown, after) = h.join_blocking().unwrap();
    assert_eq!(
        inherited, "reno",
        "an accepted stream starts with the listener's"
    );
    assert_eq!(set, "reno");
    assert_eq!(unknown, std::io::ErrorKind::NotFound);
    assert_eq!(after, "reno", "a refused name changes nothing");
    rt.join().unwrap();
}

#[test]
fn vectored_write_rejects_too_many_buffers() {
    let rt = Runtime::builder().build().unwrap();
    let h = rt
        .spawn_on(ExecutorId::Shard(0), || async {
            let l = TcpListener::bind(localhost(0)).await.unwrap();
            let mut s = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let bufs = vec![Bytes::from_static(b"x"); shoal_runtime::net::MAX_IOVECS + 1];
            let (res, back) = s.write_all_vectored(bufs).await;
            (res.unwrap_err().kind(), back.len())
        })
        .unwrap();
    assert_eq!(
        h.join_blocking().unwrap(),
        (std::io::ErrorKind::InvalidInput, 1025)
    );
    rt.join().unwrap();
}

#[test]
fn udp_unicast_and_reuseport() {
    let rt = Runtime::builder().build().unwrap();
    let h = rt
        .spawn_on(ExecutorId::Shard(0), || async {
            let opts = UdpOptions {
                reuse_addr: true,
                reuse_port: true,
            };
            let a = UdpSocket::bind(localhost(0), opts).await.unwrap();
            let port = a.local_addr().unwrap().port();
            // SO_REUSEPORT lets a second socket share the port.
            let _a2 = UdpSocket::bind(localhost(port), opts).await.unwrap();
            let b = UdpSocket::bind(localhost(0), UdpOptions::default())
                .await
                .unwrap();
            let b_addr = b.local_addr().unwrap();
            assert_eq!(
                a.send_to(Bytes::from_static(b"ping"), b_addr)
                    .await
                    .unwrap(),
                4
            );
            let (res, buf) = b.recv_from(BytesMut::new()).await;
            let (n, from) = res.unwrap();
            assert_eq!(from.port(), port);
            buf[..n].to_vec()
        })
        .unwrap();
    assert_eq!(h.join_blocking().unwrap(), b"ping");
    rt.join().unwrap();
}

#[test]
fn udp_multicast_on_loopback() {
    let group = Ipv4Addr::new(239, 255, 77, 1);
    let iface = Ipv4Addr::LOCALHOST;
    let rt = Runtime::builder().build().unwrap();
    let h = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            let opts = UdpOptions {
                reuse_addr: true,
                reuse_port: true,
            };
            let rx = UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), opts)
                .await
                .unwrap();
            let port = rx.local_addr().unwrap().port();
            rx.join_multicast_v4(group, iface).unwrap();
            let tx = UdpSocket::bind(localhost(0), UdpOptions::default())
                .await
                .unwrap();
            tx.set_multicast_if_v4(iface).unwrap();
            tx.set_multicast_ttl_v4(1).unwrap();
            tx.set_multicast_loop_v4(true).unwrap();
            tx.send_to(
                Bytes::from_static(b"hello group"),
                SocketAddr::from((group, port)),
            )
            .await
            .unwrap();
            let (res, buf) = timeout(
                Duration::from_secs(5),
                rx.recv_from(BytesMut::with_capacity(1500)),
            )
            .await
            .expect("multicast datagram");
            let (n, _) = res.unwrap();
            rx.leave_multicast_v4(group, iface).unwrap();
            buf[..n].to_vec()
        })
        .unwrap();
    assert_eq!(h.join_blocking().unwrap(), b"hello group");
    rt.join().unwrap();
}

#[test]
fn timers_sleep_and_timeout() {
    let rt = Runtime::builder().build().unwrap();
    let h = rt
        .spawn_on(ExecutorId::Control, || async {
            let start = Instant::now();
            sleep(Duration::from_millis(10)).await;
            let slept = start.elapsed() >= Duration::from_millis(10);
            let deadline = Instant::now() + Duration::from_millis(5);
            sleep_until(deadline).await;
            let until = Instant::now() >= deadline;
            let expired = timeout(Duration::from_millis(5), std::future::pending::<()>()).await;
            let in_time = timeout(Duration::from_secs(5), async { 3 }).await;
            (slept, until, expired.is_err(), in_time)
        })
        .unwrap();
    assert_eq!(h.join_blocking().unwrap(), (true, true, true, Ok(3)));
    rt.join().unwrap();
}
