//! What an idle link holds in its node's heap: in a full mesh of 60 nodes every node keeps 59
//! of them. (Alone in its test binary: its allocator counts every allocation of the process,
//! and its tests take turns.)

mod node_support;

use node_support::*;
use shoal_mesh::wire::Frame;
use shoal_mesh::PeerId;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// One test at a time: each measures the whole process's heap.
static SERIAL: Mutex<()> = Mutex::new(());

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's own arguments, so `System`'s
// guarantees are this allocator's; the counter is a side effect that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` needs.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static HEAP: Counting = Counting;

/// Dials the node as a plain v1 peer and says Hello; the node keeps the link while the test
/// holds the socket (its heartbeat timeout is longer than the test).
fn link(port: u16) -> (TcpStream, PeerId) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let hello = plain_hello();
    let id = hello.node_id;
    let mut bytes = Vec::new();
    Frame::Hello(hello).encode(&mut bytes).unwrap();
    s.write_all(&bytes).unwrap();
    (s, id)
}

/// Sends every link a heartbeat and waits until the node has read them all: each link's
/// reader has then made room for a read at least once after its handshake.
fn heartbeat_all(m: &Node, socks: &mut [TcpStream]) {
    let mut hb = Vec::new();
    Frame::Heartbeat.encode(&mut hb).unwrap();
    let before = m.mesh.stats().total.bytes_in;
    for s in socks.iter_mut() {
        s.write_all(&hb).unwrap();
    }
    let want = before + (socks.len() * hb.len()) as u64;
    wait_until(20, "every link's heartbeat was read", || {
        m.mesh.stats().total.bytes_in >= want
    });
}

/// 48 idle links after 8 that warm the node up (its tables and pools grown). Each link's
/// writer reserved room for 1 024 buffers up front (32 KiB) and each posted read 64 KiB:
/// 106 KiB per idle link here, 5.7 MiB of a 60-node full mesh node's heap. Both now grow
/// with what the link carries: an idle link holds 13–17 KiB (its read block, its two tasks,
/// its queues, and its share of the node's tables, which grow by doubling).
#[test]
fn an_idle_link_holds_no_room_for_traffic_it_does_not_carry() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const WARM: usize = 8;
    const LINKS: usize = 48;
    let m = Node::start(fast().heartbeat_timeout(Duration::from_secs(120)));
    let mut warm: Vec<TcpStream> = (0..WARM).map(|_| link(m.port()).0).collect();
    wait_until(20, "the warm-up links are up", || {
        m.open_links() == WARM as u64
    });
    heartbeat_all(&m, &mut warm);
    let before = LIVE.load(Ordering::Relaxed);
    let mut socks: Vec<TcpStream> = (0..LINKS).map(|_| link(m.port()).0).collect();
    wait_until(20, "every link is up", || {
        m.open_links() == (WARM + LINKS) as u64
    });
    heartbeat_all(&m, &mut socks);
    let per_link = LIVE.load(Ordering::Relaxed).saturating_sub(before) / LINKS;
    assert!(
        per_link < 32 * 1024,
        "an idle link holds {per_link} bytes of its node's heap"
    );
    assert_eq!(m.open_links(), (WARM + LINKS) as u64, "the links stayed up");
}
