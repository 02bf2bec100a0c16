//! `attacker`: hostile input for the multi-host flood tests, aimed only at a lab host.
//!
//! Modes (each bounded in count and time, and it exits by itself):
//! - `announces`: multicast discovery datagrams with fresh random node ids (valid plaintext
//!   announces of the victim's group), `--count` of them at `--rate` per second, each naming a
//!   `--dial-port` on this host as its dial-back address; it counts the connections made back
//!   to that port and prints them at the end (`dialed_back=`).
//! - `giants`: `--conns` connections to the victim that announce a 16 MiB frame before any
//!   Hello and then stream junk.
//! - `trickle`: `--conns` connections that send a valid Hello, announce a 1 MiB Data frame and
//!   then one byte of it every 0.5 s.
//! - `idle`: `--conns` connections that send nothing at all.
//!
//! It prints `started mode=<m>` once its traffic is under way and `done mode=<m> sent=<n>` at
//! the end; connection modes hold their sockets until `--hold-secs` passed.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use shoal_mesh::wire::{Beacon, Frame, Hello, MULTICAST_ADDR, PROTOCOL_VERSION};
use shoal_mesh::PeerId;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    Announces,
    Giants,
    Trickle,
    Idle,
}

#[derive(Parser, Debug)]
#[command(about = "Hostile input for Shoal's multi-host flood tests (lab hosts only)")]
struct Args {
    /// What to send.
    #[arg(value_enum)]
    mode: Mode,
    /// This host's lab address (multicast source interface).
    #[arg(long)]
    interface: Ipv4Addr,
    /// The victim's TCP address (`ip:port`), for the connection modes.
    #[arg(long)]
    victim: Option<SocketAddr>,
    /// The victim's mesh group (announces).
    #[arg(long, default_value = "faults")]
    group: String,
    /// Datagrams to send (announces).
    #[arg(long, default_value_t = 20_000)]
    count: u64,
    /// Datagrams per second (announces).
    #[arg(long, default_value_t = 4000)]
    rate: u64,
    /// Dial-back port named by the fake announces (this mode listens there and counts the
    /// connections the victim makes back).
    #[arg(long, default_value_t = 7009)]
    dial_port: u16,
    /// Connections to open (connection modes).
    #[arg(long, default_value_t = 48)]
    conns: usize,
    /// How long the connection modes keep their sockets, at most.
    #[arg(long, default_value_t = 20)]
    hold_secs: u64,
}

fn main() {
    let a = Args::parse();
    match a.mode {
        Mode::Announces => announces(&a),
        Mode::Giants | Mode::Trickle | Mode::Idle => connections(&a),
    }
}

fn announces(a: &Args) {
    // Count the connections the victim makes back to the address the fake announces name:
    // without a budget for strangers, one datagram bought one outbound connection.
    let listener = std::net::TcpListener::bind((a.interface, a.dial_port)).expect("listen");
    let dialed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = dialed.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(s);
        }
    });
    let sock = UdpSocket::bind((a.interface, 0)).expect("bind");
    set_multicast_if(&sock, a.interface);
    sock.set_multicast_ttl_v4(1).expect("ttl");
    let start = Instant::now();
    let mut buf = Vec::with_capacity(64);
    say("started mode=announces");
    for n in 0..a.count {
        let due = start + Duration::from_nanos(n * 1_000_000_000 / a.rate.max(1));
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        buf.clear();
        Beacon {
            protocol_version: PROTOCOL_VERSION,
            flags: 0,
            tcp_listen_port: a.dial_port,
            node_id: PeerId::random(),
            group_name: a.group.clone(),
        }
        .encode_body(&mut buf)
        .expect("encodable");
        let _ = sock.send_to(&buf, MULTICAST_ADDR);
    }
    // Dial-backs still in flight arrive within a moment.
    std::thread::sleep(Duration::from_secs(1));
    say(&format!(
        "done mode=announces sent={} secs={:.1} dialed_back={}",
        a.count,
        start.elapsed().as_secs_f64(),
        dialed.load(std::sync::atomic::Ordering::Relaxed)
    ));
}

fn connections(a: &Args) {
    let victim = a.victim.expect("--victim is needed for connection modes");
    let mut socks: Vec<TcpStream> = Vec::new();
    for _ in 0..a.conns {
        let Ok(mut s) = TcpStream::connect_timeout(&victim, Duration::from_secs(2)) else {
            continue;
        };
        let _ = s.set_nodelay(true);
        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        let first: Vec<u8> = match a.mode {
            // A "Hello" announcing 16 MiB - 1, then junk.
            Mode::Giants => {
                let mut v = vec![0x00, 0xff, 0xff, 0xff, 1];
                v.extend_from_slice(&[0xa5; 64 * 1024]);
                v
            }
            Mode::Trickle => {
                let mut v = Vec::new();
                let hello = Hello {
                    node_id: PeerId::random(),
                    protocol_version: PROTOCOL_VERSION,
                    tcp_listen_port: 9,
                    group_name: a.group.clone(),
                    nonce: rand_nonce(),
                    eph_pub_key: None,
                    identity: None,
                    shoal: None,
                };
                Frame::Hello(hello).encode(&mut v).expect("encodable");
                v.extend_from_slice(&[0x00, 0x10, 0x00, 0x00, 4]);
                v
            }
            _ => Vec::new(),
        };
        let _ = s.write_all(&first);
        socks.push(s);
    }
    say(&format!("started mode={:?} conns={}", a.mode, socks.len()));
    let end = Instant::now() + Duration::from_secs(a.hold_secs);
    let mut sent = 0u64;
    while Instant::now() < end && !socks.is_empty() {
        std::thread::sleep(Duration::from_millis(500));
        let byte: &[u8] = match a.mode {
            Mode::Giants => &[0xa5; 4096],
            Mode::Trickle => &[7],
            _ => continue,
        };
        // A socket the victim closed fails its write and is let go.
        socks.retain_mut(|s| s.write_all(byte).is_ok());
        sent += 1;
    }
    say(&format!(
        "done mode={:?} rounds={sent} open={}",
        a.mode,
        socks.len()
    ));
}

/// Sends multicast out of the lab interface (std has no setter for IP_MULTICAST_IF).
fn set_multicast_if(sock: &UdpSocket, ifa: Ipv4Addr) {
    use std::os::fd::AsRawFd;
    let addr = libc::in_addr {
        s_addr: u32::from(ifa).to_be(),
    };
    // SAFETY: the fd is an open UDP socket owned by `sock` for the whole call, and the option
    // value points at a live `in_addr` whose size is passed alongside.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF,
            (&addr as *const libc::in_addr).cast(),
            std::mem::size_of::<libc::in_addr>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "IP_MULTICAST_IF: {}",
        std::io::Error::last_os_error()
    );
}

fn rand_nonce() -> u64 {
    u64::from_be_bytes(PeerId::random().0[..8].try_into().expect("8 bytes"))
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
