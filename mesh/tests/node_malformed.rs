//! Malformed input from a raw TCP client closes that link with an Error event; the node keeps
//! running and keeps serving its other peers.

mod node_support;

use node_support::*;
use rand::{RngCore, SeedableRng};
use shoal_mesh::wire::Frame;
use shoal_mesh::{ErrorKind, Event};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn raw_client(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn hello_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    Frame::Hello(plain_hello()).encode(&mut out).unwrap();
    out
}

/// The node must close the connection: reading ends with EOF or a reset, never a timeout.
fn assert_closed_by_node(mut s: TcpStream, what: &str) {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue, // HelloAck / Goodbye
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: the node did not close the link ({e})"),
        }
    }
}

fn error_events(n: &Node) -> Vec<ErrorKind> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Error { kind, .. } => Some(kind),
            _ => None,
        })
        .collect()
}

fn still_serves(m: &Node, p: &Node, tag: &str) {
    m.mesh.broadcast_blocking(format!("m-{tag}")).unwrap();
    p.mesh.broadcast_blocking(format!("p-{tag}")).unwrap();
    wait_until(
        10,
        &format!("both directions still work after {tag}"),
        || {
            p.rec
                .messages()
                .iter()
                .any(|x| x.1 == format!("m-{tag}").as_bytes())
                && m.rec
                    .messages()
                    .iter()
                    .any(|x| x.1 == format!("p-{tag}").as_bytes())
        },
    );
}

#[test]
fn malformed_input_closes_only_that_link() {
    for shards in [1, 2] {
        let m = Node::start(fast().shards(shards));
        let p = Node::start(fast().static_peer(ep(m.port())));
        wait_until(10, "peer connected", || {
            m.connected_to(&p) && p.connected_to(&m)
        });
        let mut errors = 0;

        // 1. Random bytes instead of a Hello.
        let mut s = raw_client(m.port());
        let mut junk = vec![0u8; 512];
        rand::rngs::StdRng::seed_from_u64(42).fill_bytes(&mut junk);
        s.write_all(&junk).unwrap();
        assert_closed_by_node(s, "random bytes");
        errors += 1;
        wait_until(10, "error event for random bytes", || {
            error_events(&m).len() == errors
        });
        still_serves(&m, &p, "random");

        // 2. An unknown frame type right after a valid Hello (handled on the link's shard).
        let mut s = raw_client(m.port());
        s.write_all(&hello_bytes()).unwrap();
        s.write_all(&[0, 0, 0, 3, 0xee, 1, 2]).unwrap();
        assert_closed_by_node(s, "unknown frame type");
        errors += 1;
        wait_until(10, "error event for unknown type", || {
            error_events(&m).len() == errors
        });
        assert_eq!(error_events(&m)[errors - 1], ErrorKind::Malformed);
        still_serves(&m, &p, "unknown");

        // 3. An oversized length after a valid Hello.
        let mut s = raw_client(m.port());
        s.write_all(&hello_bytes()).unwrap();
        s.write_all(&[0xff, 0xff, 0xff, 0xf0, 4]).unwrap();
        assert_closed_by_node(s, "oversized length");
        errors += 1;
        wait_until(10, "error event for oversize", || {
            error_events(&m).len() == errors
        });
        assert_eq!(error_events(&m)[errors - 1], ErrorKind::Oversize);
        still_serves(&m, &p, "oversize");

        // 4. A Data frame whose length is too short for its own fields.
        let mut s = raw_client(m.port());
        s.write_all(&hello_bytes()).unwrap();
        let mut bad = vec![0, 0, 0, 10, 4];
        bad.extend_from_slice(&[9u8; 9]);
        s.write_all(&bad).unwrap();
        assert_closed_by_node(s, "truncated Data body");
        errors += 1;
        wait_until(10, "error event for truncated body", || {
            error_events(&m).len() == errors
        });
        assert_eq!(error_events(&m)[errors - 1], ErrorKind::Malformed);
        still_serves(&m, &p, "truncated-body");

        // 5. Half a frame, then the client hangs up.
        let mut s = raw_client(m.port());
        s.write_all(&hello_bytes()).unwrap();
        s.write_all(&[0, 0, 0, 100, 4, 1, 2, 3]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_closed_by_node(s, "truncated frame at EOF");
        errors += 1;
        wait_until(10, "error event for truncated frame", || {
            error_events(&m).len() == errors
        });
        still_serves(&m, &p, "eof");

        let st = m.mesh.stats().total;
        assert_eq!(
            st.malformed_frames + st.oversize_frames,
            errors as u64,
            "every bad input counted once"
        );
        assert!(
            m.connected_to(&p) && p.connected_to(&m),
            "the good peer was never dropped"
        );
    }
}

/// Before its Hello, a connection could announce a frame of up to `max_message_bytes`
/// (16 MiB) and make the node buffer all of it (48 such connections: +737 MB). Now a header
/// announcing more than the largest handshake frame is refused at once, as oversize, without
/// waiting for its body.
#[test]
fn a_giant_frame_before_the_hello_is_refused_at_its_header() {
    let m = Node::start(fast().handshake_timeout(Duration::from_secs(30)));
    let mut s = raw_client(m.port());
    // A "Hello" announcing 16 MiB - 1, and not one byte of it.
    s.write_all(&[0x00, 0xff, 0xff, 0xff, 1]).unwrap();
    assert_closed_by_node(s, "giant pre-handshake frame");
    wait_until(10, "oversize error event", || !error_events(&m).is_empty());
    assert_eq!(error_events(&m), vec![ErrorKind::Oversize]);
    assert_eq!(m.mesh.stats().control.oversize_frames, 1);
}

/// After a Hello, a peer trickling one byte of a frame every 0.3 s kept its link forever (any
/// byte was liveness). Now it is closed as stalled after the heartbeat timeout, and counted.
#[test]
fn a_peer_trickling_a_frame_is_closed_as_stalled() {
    let m = Node::start(fast());
    let mut s = raw_client(m.port());
    s.write_all(&hello_bytes()).unwrap();
    // A Data frame announcing 1 MiB.
    s.write_all(&[0x00, 0x10, 0x00, 0x00, 4]).unwrap();
    let stop = std::time::Instant::now() + Duration::from_secs(30);
    let mut closed = false;
    while std::time::Instant::now() < stop {
        std::thread::sleep(Duration::from_millis(300));
        if s.write_all(&[7]).is_err() {
            closed = true;
            break;
        }
        if m.mesh.stats().total.stalled_links > 0 {
            closed = true;
            break;
        }
    }
    assert!(closed, "the trickling link was still open after 30 s");
    wait_until(10, "stalled error event", || {
        error_events(&m).contains(&ErrorKind::Stalled)
    });
    assert_eq!(m.mesh.stats().total.stalled_links, 1);
}
