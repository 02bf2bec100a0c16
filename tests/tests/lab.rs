//! The lab itself (`shoal_tests::lab`): three hosts that reach each other by unicast and
//! multicast; loss, delay and a cut do what they say and go away again; the teardown leaves
//! nothing behind and the root namespace untouched. Probes are sockets opened inside the
//! hosts' namespaces by threads of this process (`Lab::in_host`), so the lab needs no program
//! of its own. Without root the test prints why it was skipped and passes.

use shoal_tests::{skip_without_lab, Lab};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 42, 98);
const PORT: u16 = 45_400;

fn ip4(s: &str) -> Ipv4Addr {
    s.parse().expect("an IPv4 address")
}

/// A socket of host `k` bound to its address (port 0: any).
fn socket(lab: &Lab, k: usize, port: u16) -> UdpSocket {
    let addr = ip4(&lab.addr(k));
    lab.in_host(k, move || UdpSocket::bind((addr, port)))
        .expect("bind in the host")
}

/// A socket of host `k` on the group's port, joined on its lab interface.
fn member(lab: &Lab, k: usize) -> UdpSocket {
    let addr = ip4(&lab.addr(k));
    let s = lab
        .in_host(k, || UdpSocket::bind((Ipv4Addr::UNSPECIFIED, PORT)))
        .expect("bind the group port");
    s.join_multicast_v4(&GROUP, &addr).expect("join");
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

/// Datagrams `s` receives until one equal to `end` (or 20 s).
fn collect_until(s: &UdpSocket, end: &[u8]) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        if let Ok(n) = s.recv(&mut buf) {
            if &buf[..n] == end {
                return got;
            }
            got.push(buf[..n].to_vec());
        }
    }
    panic!("no {:?} within 20 s", String::from_utf8_lossy(end));
}

/// Reads whatever `s` has queued (the group's traffic reaches every member).
fn drain(s: &UdpSocket) {
    let mut buf = [0u8; 1500];
    while s.recv(&mut buf).is_ok() {}
}

/// How many of `n` datagrams sent by `tx` to `to` reach `rx` (paced, read as they come, so
/// only the lab drops any); the end marker `end` is repeated until it gets through.
fn received(tx: &UdpSocket, to: SocketAddr, rx: &UdpSocket, n: u32, end: &[u8]) -> usize {
    drain(rx);
    std::thread::scope(|s| {
        let counted = s.spawn(|| collect_until(rx, end).len());
        for i in 0..n {
            tx.send_to(&i.to_be_bytes(), to).unwrap();
            if i % 20 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        while !counted.is_finished() {
            tx.send_to(end, to).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        counted.join().unwrap()
    })
}

/// Echoes datagrams on `s` until `stop`.
fn echo(s: &UdpSocket, stop: &AtomicBool) {
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::Acquire) {
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    }
}

/// Median round trip from `client` to the echo at `to`, over `n` probes (a lost one is
/// retried).
fn median_rtt(client: &UdpSocket, to: SocketAddr, n: u32) -> Duration {
    client
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for i in 0..n {
        let probe = i.to_be_bytes();
        loop {
            let t = Instant::now();
            client.send_to(&probe, to).unwrap();
            if matches!(client.recv(&mut buf), Ok(4) if buf[..4] == probe) {
                rtts.push(t.elapsed());
                break;
            }
        }
    }
    rtts.sort();
    rtts[rtts.len() / 2]
}

fn root_interfaces() -> String {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1).map(str::to_string))
        .collect();
    names.sort();
    names.join(" ")
}

#[test]
fn the_lab_connects_its_hosts_and_its_faults_come_and_go() {
    if skip_without_lab() {
        return;
    }
    let before = root_interfaces();
    let lab = Lab::up("lab", 3);
    assert_eq!(lab.hosts(), 3);

    // Multicast from h1 reaches h2 and h3 (by the route to 224.0.0.0/4 each host has).
    let (m2, m3) = (member(&lab, 2), member(&lab, 3));
    let tx = socket(&lab, 1, 0);
    let to = SocketAddr::from((GROUP, PORT));
    tx.send_to(b"hello", to).unwrap();
    tx.send_to(b"end-1", to).unwrap();
    assert_eq!(collect_until(&m2, b"end-1"), [b"hello".to_vec()]);
    assert_eq!(collect_until(&m3, b"end-1"), [b"hello".to_vec()]);

    // Loss: 30 % each way on h2's link drops about 30 % of h1's datagrams to h2.
    lab.loss(2, 30);
    let lost = 100.0 * (2000 - received(&tx, to, &m2, 2000, b"end-2")) as f64 / 2000.0;
    assert!((20.0..=40.0).contains(&lost), "{lost:.1} % lost at 30 %");
    lab.loss(2, 0);
    assert_eq!(received(&tx, to, &m2, 500, b"end-3"), 500, "loss removed");

    // Delay: 5 ms each way on h2's link adds 10 ms to a round trip through it.
    let server = socket(&lab, 2, 0);
    let at = server.local_addr().unwrap();
    let client = socket(&lab, 1, 0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| echo(&server, &stop));
        let base = median_rtt(&client, at, 30);
        lab.delay(2, 5);
        let slow = median_rtt(&client, at, 30);
        lab.delay(2, 0);
        let back = median_rtt(&client, at, 30);
        stop.store(true, Ordering::Release);
        println!("median round trip {base:?}, with 5 ms each way {slow:?}, removed {back:?}");
        assert!(
            slow >= base + Duration::from_micros(9_500),
            "{base:?} -> {slow:?}"
        );
        assert!(
            slow < base + Duration::from_millis(60),
            "{base:?} -> {slow:?}"
        );
        assert!(
            back < slow - Duration::from_millis(8),
            "removed: {slow:?} -> {back:?}"
        );
    });

    // Cut: h1's multicast reaches h3 (so it was sent) but never h2; after the heal, h2
    // hears h1 again.
    lab.cut(2);
    drain(&m2);
    drain(&m3);
    for _ in 0..5 {
        tx.send_to(b"during-cut", to).unwrap();
    }
    tx.send_to(b"end-4", to).unwrap();
    let heard = collect_until(&m3, b"end-4");
    assert!(heard.iter().all(|d| d == b"during-cut") && heard.len() == 5);
    lab.heal(2);
    std::thread::scope(|s| {
        let h2 = s.spawn(|| collect_until(&m2, b"after-heal"));
        while !h2.is_finished() {
            tx.send_to(b"after-heal", to).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        let got = h2.join().unwrap();
        assert!(
            got.iter().all(|d| d != b"during-cut"),
            "h2 heard h1 while cut: {got:?}"
        );
    });

    // Teardown: no namespace of this lab left, the root namespace as it was.
    drop((m2, m3, tx, client));
    drop(lab);
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let mine = format!("shoal-lab-{}-", std::process::id());
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(&mine),
        "namespaces left behind"
    );
    assert_eq!(root_interfaces(), before, "root namespace changed");
}
