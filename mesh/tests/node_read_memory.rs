//! A frame header is a promise, not bytes: links that announce giant frames and send little
//! of them must not make the node reserve what they announced. (Alone in its test binary so
//! the address space it measures is this test's own.)

mod node_support;

use node_support::*;
use shoal_mesh::wire::Frame;
use std::io::Write;

/// 40 links each announcing a 16 MiB Data frame right after their Hello, then 100 bytes of
/// it. A read buffer sized from the announced length reserved 16 MiB per link (640 MiB of
/// address space here); buffers that grow with what arrives stay near one read chunk each.
#[test]
fn announced_lengths_do_not_size_read_buffers() {
    const LINKS: usize = 40;
    let m = Node::start(fast().heartbeat_timeout(std::time::Duration::from_secs(60)));
    let before = proc_status_kib("VmSize:");
    let mut socks = Vec::new();
    for _ in 0..LINKS {
        let hello = plain_hello();
        let peer = hello.node_id;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", m.port())).unwrap();
        let mut bytes = Vec::new();
        Frame::Hello(hello).encode(&mut bytes).unwrap();
        bytes.extend_from_slice(&[0x01, 0x00, 0x00, 0x00, 4]);
        s.write_all(&bytes).unwrap();
        wait_until(10, "node links the peer", || {
            m.mesh.connected_peers().contains(&peer)
        });
        // Read by the link's shard, after the header (the handshake may have read that).
        s.write_all(&[9u8; 100]).unwrap();
        socks.push(s);
    }
    wait_until(10, "every link's bytes were read", || {
        m.mesh.stats().total.bytes_in >= (LINKS * 100) as u64
    });
    let grown_mib = proc_status_kib("VmSize:").saturating_sub(before) / 1024;
    assert!(
        grown_mib < 200,
        "{LINKS} links announcing 16 MiB grew the address space by {grown_mib} MiB"
    );
    assert_eq!(m.open_links(), LINKS as u64, "the links are still up");
}
