//! Issue 15 item 7: hostile input must not become one log line each. 1 000 garbage
//! connections and 1 000 junk discovery datagrams produce a handful of warnings, not
//! thousands. Alone in its binary: it captures every warning of the process.

mod node_support;

use node_support::*;
use std::io::Write;
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tracing::{span, Event, Level, Metadata, Subscriber};

/// Counts warn and error events of the `shoal_mesh` crate (and keeps their messages).
struct WarnCounter {
    lines: AtomicUsize,
    seen: Mutex<Vec<String>>,
}

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for &'static WarnCounter {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= Level::WARN
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, e: &Event<'_>) {
        if e.metadata().target().starts_with("shoal_mesh") {
            self.lines.fetch_add(1, Ordering::AcqRel);
            let mut m = Message(String::new());
            e.record(&mut m);
            self.seen.lock().unwrap().push(m.0);
        }
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

#[test]
fn garbage_connections_and_junk_datagrams_give_a_bounded_number_of_log_lines() {
    let counter: &'static WarnCounter = Box::leak(Box::new(WarnCounter {
        lines: AtomicUsize::new(0),
        seen: Mutex::new(Vec::new()),
    }));
    tracing::subscriber::set_global_default(counter).expect("first subscriber");
    let (b, port) = loopback_scouting("log-flood");
    let a = Node::start(b);
    let start = Instant::now();
    let ctl = || a.mesh.stats().control;
    // 1 000 connections that send a frame of an unknown type instead of a Hello.
    for _ in 0..1000 {
        let mut s = TcpStream::connect(("127.0.0.1", a.port())).expect("connect");
        let _ = s.write_all(&[0, 0, 0, 1, 0xee]);
    }
    wait_until(30, "A handled every garbage connection", || {
        let c = ctl();
        c.malformed_frames + c.oversize_frames + c.handshakes_evicted >= 1000
    });
    // 1 000 junk datagrams on the discovery port, in batches the socket buffer keeps.
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut sent = 0;
    while sent < 1000 {
        let base = ctl().announces_dropped;
        for _ in 0..25 {
            tx.send_to(b"junk", ("127.0.0.1", port)).unwrap();
        }
        sent += 25;
        wait_until(10, "the junk batch is counted", || {
            ctl().announces_dropped >= base + 25
        });
    }
    let lines = counter.lines.load(Ordering::Acquire);
    // Per kind of warning, at most two lines per 10 s window (the first occurrence, then
    // the count). Four kinds could be involved here.
    let windows = 1 + start.elapsed().as_secs() as usize / 10;
    assert!(
        lines <= 4 * 2 * (windows + 1),
        "{lines} warning lines for 2 000 bad inputs: {:?}",
        counter.seen.lock().unwrap()
    );
    assert!(lines >= 2, "the first of each is still logged");
}
