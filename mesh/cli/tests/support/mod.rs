//! A loopback mesh for the command tests: nodes with static peers (no multicast), fast
//! timers and a short announce period; an observer joined the way `shoal` joins; a plain
//! multimaster v1 peer driven by hand; bounded waits on conditions.
#![allow(dead_code)]

use shoal_cli::args::Cli;
use shoal_cli::observer::Observer;
use shoal_mesh::topics::TopicsConfig;
use shoal_mesh::wire::{Frame, Hello, Membership, PROTOCOL_VERSION};
use shoal_mesh::{Mesh, MeshBuilder, PeerId};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A node builder: loopback, no multicast, fast timers, 200 ms announce period, named.
pub fn node(name: &str) -> MeshBuilder {
    Mesh::builder()
        .scouting(false)
        .listen_addr(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .node_name(name)
        .heartbeat_interval(Duration::from_millis(200))
        .heartbeat_timeout(Duration::from_millis(3000))
        .reconnect_base(Duration::from_millis(100))
        .reconnect_max(Duration::from_millis(800))
        .membership_interval(Duration::from_millis(300))
        .membership_timeout(Duration::from_millis(3000))
        .topics(TopicsConfig {
            announce_period: Duration::from_millis(200),
            participant_lease: Duration::from_secs(5),
            ..TopicsConfig::default()
        })
}

/// Starts a node.
pub fn start(b: MeshBuilder) -> Mesh {
    let m = b.build().expect("valid settings");
    m.start().expect("starts");
    m
}

pub fn ep(m: &Mesh) -> String {
    format!("127.0.0.1:{}", m.listen_port())
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after `secs` seconds.
pub fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The command line of `shoal` with `args` (global options first, then the command).
pub fn cli(args: &[&str]) -> Cli {
    use clap::Parser;
    Cli::try_parse_from(std::iter::once("shoal").chain(args.iter().copied()))
        .expect("a valid command line")
}

/// An observer joined to `m` by static peer, as `shoal <command>` joins.
pub fn observer(m: &Mesh, command: &str) -> Observer {
    // The mesh options only: which command runs is the caller's.
    let c = cli(&[
        "--no-multicast",
        "--static-peer",
        &ep(m),
        "--listen",
        "127.0.0.1:0",
        "nodes",
    ]);
    Observer::join(&c.mesh, command).expect("the observer joins")
}

/// A plain multimaster v1 peer: dials a node with a Hello that has no Shoal extension,
/// heartbeats, reads and drops everything, and can send Membership records.
/// Membership records a [`V1Peer`] keeps sending: (origin, its neighbours).
type Claims = Arc<Mutex<Vec<(PeerId, Vec<PeerId>)>>>;

pub struct V1Peer {
    pub id: PeerId,
    claims: Claims,
    stop: Arc<AtomicBool>,
}

fn send(s: &mut TcpStream, f: Frame) {
    let mut b = Vec::new();
    f.encode(&mut b).unwrap();
    let _ = s.write_all(&b);
}

pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

impl V1Peer {
    pub fn dial(m: &Mesh) -> V1Peer {
        let id = PeerId::random();
        let mut s = TcpStream::connect(("127.0.0.1", m.listen_port())).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        send(
            &mut s,
            Frame::Hello(Hello {
                node_id: id,
                protocol_version: PROTOCOL_VERSION,
                tcp_listen_port: 1,
                group_name: "default".into(),
                nonce: 7,
                eph_pub_key: None,
                identity: None,
                shoal: None,
            }),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let claims: Claims = Arc::default();
        let (mut rd, st, cl) = (s.try_clone().unwrap(), stop.clone(), claims.clone());
        let mut hb = s;
        std::thread::spawn(move || {
            let mut chunk = vec![0u8; 64 * 1024];
            while !st.load(Ordering::Acquire) {
                send(&mut hb, Frame::Heartbeat);
                // Membership records, refreshed before they expire (a newer version each).
                for (origin, neighbours) in cl.lock().unwrap().iter() {
                    send(
                        &mut hb,
                        Frame::Membership(Membership {
                            origin: *origin,
                            version: wall_ms(),
                            neighbours: neighbours.clone(),
                        }),
                    );
                }
                match rd.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
        });
        V1Peer { id, claims, stop }
    }

    /// From now on, keeps sending `origin`'s Membership record listing `neighbours` (as a
    /// v1 node relays the records of the nodes behind it).
    pub fn membership(&self, origin: PeerId, neighbours: Vec<PeerId>) {
        self.claims.lock().unwrap().push((origin, neighbours));
    }
}

impl Drop for V1Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
