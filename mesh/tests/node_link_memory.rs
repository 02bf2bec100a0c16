//! What an idle link holds in its node's heap: in a full mesh of 60 nodes every node keeps 59
//! of them. (Alone in its test binary: its allocator counts every allocation of the process,
//! and its tests take turns.)

mod node_support;

use node_support::*;
use shoal_mesh::proto::shard::READ_REST;
use shoal_mesh::wire::Data;
use shoal_mesh::wire::Frame;
use shoal_mesh::{Event, MsgId, PeerId};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// A node with one plain v1 peer linked and read from, a short `dedup_ttl` so the shard's
/// timer runs often; the peer sends `count` broadcasts of `len` bytes in one write, the
/// application takes and drops them, then the peer sends heartbeats spaced as an idle peer's
/// while the test waits (up to 20 s) for the node's heap to come back within `bound` of what
/// it was before the broadcasts. Returns what it held last (measured after a failed wait's
/// panic, it would count the panic's own backtrace).
fn held_after_traffic_then_idle(count: u64, len: usize, bound: usize) -> usize {
    let m = fast()
        .heartbeat_timeout(Duration::from_secs(120))
        .dedup_ttl(Duration::from_secs(2))
        .build()
        .expect("valid config");
    let mut events = m.events();
    m.start().expect("node starts");
    let (mut s, src) = link(m.listen_port());
    let open = |m: &shoal_mesh::Mesh| {
        let t = m.stats().total;
        t.links_opened - t.links_closed
    };
    wait_until(20, "the link is up", || open(&m) == 1);
    let mut hb = Vec::new();
    Frame::Heartbeat.encode(&mut hb).unwrap();
    let read_before = m.stats().total.bytes_in;
    s.write_all(&hb).unwrap();
    wait_until(20, "the link reads", || {
        m.stats().total.bytes_in > read_before
    });
    let before = LIVE.load(Ordering::Relaxed);
    let mut wire = Vec::new();
    for n in 1..=count {
        Frame::Data(Data {
            src,
            dst: PeerId::ZERO,
            msg_id: MsgId::new(&src, n),
            ttl: 8,
            payload: vec![5u8; len].into(),
        })
        .encode(&mut wire)
        .unwrap();
    }
    s.write_all(&wire).unwrap();
    drop(wire);
    let mut got = 0;
    wait_until(20, "every broadcast is delivered", || {
        while let Some(ev) = events.try_recv() {
            if let Event::Message { payload, .. } = ev {
                assert_eq!(payload.len(), len);
                got += 1;
            }
        }
        got == count
    });
    let held = || LIVE.load(Ordering::Relaxed).saturating_sub(before);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = held();
    while last >= bound && Instant::now() < deadline {
        std::thread::sleep(READ_REST + Duration::from_millis(20));
        s.write_all(&hb).unwrap();
        last = held();
    }
    assert_eq!(open(&m), 1, "the link stayed up");
    last
}

/// One 8 MiB broadcast in, delivered, dropped by the application, then the link idle again.
/// Its read buffer grew block by block with the frame (each block copied into the next, twice
/// the size), and every block was kept for reuse: the spares, and the last block, whose room
/// after the frame the link went on reading small frames into, held 1.7–2× the message
/// (14.6–17 MB) for as long as the node ran. Now the link leaves a block much larger than its
/// read at its first read after a quiet spell, and spares unused for a round of the shard's
/// timer (at least every quarter of `dedup_ttl`) are let go.
#[test]
fn a_large_message_leaves_nothing_behind_once_dropped() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const LEN: usize = 8 << 20;
    let held = held_after_traffic_then_idle(1, LEN, LEN / 8);
    assert!(
        held < LEN / 8,
        "an {LEN}-byte message, dropped, left {held} bytes in the node's heap"
    );
}

/// 2 000 broadcasts of 1 KiB in one write, delivered and dropped, then the link idle. The
/// link's reads grew to 256 KiB with the burst, and its buffer and the shard's spares kept
/// the blocks it grew through for as long as the node ran: 1.35 MB. Now 72 kB.
#[test]
fn a_burst_leaves_nothing_behind_once_the_link_is_idle() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const BOUND: usize = 128 << 10;
    let held = held_after_traffic_then_idle(2000, 1024, BOUND);
    assert!(
        held < BOUND,
        "a burst of 2 000 1 KiB messages, dropped, left {held} bytes in the node's heap"
    );
}
