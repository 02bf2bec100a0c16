//! `bench --reliable`'s repair part: how long a reliable reader takes to be complete again
//! after a link heals, for a gap of `--repair-gap` samples written while it was cut off.
//!
//! Two loopback nodes: the reader's node dials the writer's through an in-process byte proxy
//! that can be cut and healed. The writer (reliable, keep-all, history large enough for the
//! gap) streams a first batch, the proxy is cut, the gap is written while the nodes see the
//! link gone, the proxy heals, and the clock runs from the heal until the reader has every
//! sample (the reconnect with its backoff included, then repairs over the new link).
//!
//! **Owns:** the proxy and the measurement. **Must not touch:** the mesh's internals (public
//! API only).

use crate::demo::RunError;
use crate::shoal::{wait_for, NodeArgs, SetupError};
use shoal_mesh::topics::{Limit, QosDuration, Reliability, ReliabilityKind, ResourceLimits};
use shoal_mesh::{Event, Mesh, MeshError};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Samples written before the cut (the reader is complete up to there first).
const BEFORE: u64 = 1000;

/// The repair part's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepairReport {
    /// Samples written while the link was cut.
    pub gap_samples: u64,
    /// Payload bytes per sample.
    pub payload_bytes: usize,
    /// From the heal to the link being up again on both sides, ms.
    pub relink_ms: f64,
    /// From the heal to the reader having every sample, ms.
    pub complete_ms: f64,
    /// From the link being up again to the reader having every sample, ms.
    pub repair_ms: f64,
    /// Samples the writer's node resent.
    pub samples_repaired: u64,
}

fn mesh_err(e: MeshError) -> RunError {
    RunError::Setup(SetupError::Mesh(e))
}

/// A byte proxy toward `127.0.0.1:target` that can be cut (every connection closed, new
/// ones refused) and healed.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    socks: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(target: u16) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let cut = Arc::new(AtomicBool::new(false));
        let socks: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, s) = (cut.clone(), socks.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { continue };
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                if c.load(Ordering::Acquire) {
                    continue;
                }
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let (Ok(i2), Ok(o2)) = (inbound.try_clone(), outbound.try_clone()) else {
                    continue;
                };
                s.lock().unwrap_or_else(|e| e.into_inner()).extend([i2, o2]);
                // A cut between the check above and the registration did not see these two:
                // without this, the connection would outlive the cut and carry the gap.
                if c.load(Ordering::Acquire) {
                    let _ = inbound.shutdown(Shutdown::Both);
                    let _ = outbound.shutdown(Shutdown::Both);
                    continue;
                }
                pump(&inbound, &outbound);
                pump(&outbound, &inbound);
            }
        });
        Ok(Proxy { port, cut, socks })
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for s in self
            .socks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

fn pump(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// Runs the repair part with nodes built from `template`.
pub fn run(template: &NodeArgs, gap: u64, payload: usize) -> Result<RepairReport, RunError> {
    let (a, _) = template.clone().start()?;
    let proxy = Proxy::start(a.listen_port()).map_err(|e| RunError::Usage(e.to_string()))?;
    let mut bargs = template.clone();
    bargs.static_peers = vec![format!("127.0.0.1:{}", proxy.port)];
    let (b, events) = bargs.start()?;
    let r = measure(&a, &b, events, &proxy, gap, payload);
    drop(proxy);
    b.stop();
    a.stop();
    r
}

fn measure(
    a: &Mesh,
    b: &Mesh,
    events: shoal_mesh::EventReceiver,
    proxy: &Proxy,
    gap: u64,
    payload: usize,
) -> Result<RepairReport, RunError> {
    let linked = || !a.connected_peers().is_empty() && !b.connected_peers().is_empty();
    wait_for(10, "the two nodes linked", linked)?;
    let topic = crate::topic_bench::bench_topic()
        .reliable()
        .history_keep_all()
        .resource_limits(ResourceLimits {
            max_samples: Limit::AtMost((BEFORE + gap + 1024).min(u64::from(u32::MAX)) as u32),
            ..ResourceLimits::default()
        })
        .reliability(Reliability {
            kind: ReliabilityKind::Reliable,
            max_blocking_time: QosDuration::from_secs(30),
        });
    let mut w = a.writer(topic.clone()).map_err(mesh_err)?;
    let reader = b.reader(topic).map_err(mesh_err)?;
    let (wg, rg) = (w.guid(), reader.guid());
    crate::topics::wait_matched(&[a, b], &[(wg, rg)], 10)?;
    let highest = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (h2, s2) = (highest.clone(), stop.clone());
    let counter = std::thread::spawn(move || {
        let mut events = events;
        let mut next = 1u64;
        let mut order_ok = true;
        while !s2.load(Ordering::Acquire) {
            let Some(e) = events.recv_timeout(Duration::from_millis(20)) else {
                continue;
            };
            if let Event::Sample { reader, seq, .. } = e {
                if reader == rg {
                    order_ok &= seq == next;
                    next = seq + 1;
                    h2.store(seq, Ordering::Release);
                }
            }
        }
        order_ok
    });
    let body = vec![0x5a; payload.max(8)];
    let write_to = |w: &mut shoal_mesh::topics::Writer, last: u64| -> Result<(), RunError> {
        while w.next_seq() <= last {
            w.write_blocking(&body)
                .map_err(|e| RunError::Usage(format!("write: {e}")))?;
        }
        w.flush_blocking()
            .map_err(|e| RunError::Usage(format!("flush: {e}")))
    };
    write_to(&mut w, BEFORE)?;
    wait_for(30, "the reader has the first samples", || {
        highest.load(Ordering::Acquire) >= BEFORE
    })?;
    proxy.cut();
    wait_for(30, "both nodes see the link gone", || {
        a.connected_peers().is_empty() && b.connected_peers().is_empty()
    })?;
    let repaired0 = a.stats().total.samples_repaired;
    write_to(&mut w, BEFORE + gap)?;
    let healed = Instant::now();
    proxy.heal();
    wait_for(60, "the link back up", linked)?;
    let relinked = Instant::now();
    wait_for(120, "the reader complete again", || {
        highest.load(Ordering::Acquire) >= BEFORE + gap
    })?;
    let done = Instant::now();
    stop.store(true, Ordering::Release);
    let in_order = counter.join().map_err(|_| RunError::Panicked)?;
    if !in_order {
        return Err(RunError::Usage(
            "the reliable reader got a sample out of order".into(),
        ));
    }
    drop((w, reader));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(RepairReport {
        gap_samples: gap,
        payload_bytes: payload,
        relink_ms: ms(relinked - healed),
        complete_ms: ms(done - healed),
        repair_ms: ms(done - relinked),
        samples_repaired: a.stats().total.samples_repaired - repaired0,
    })
}

/// Prints the repair part as markdown.
pub fn print(r: &RepairReport) {
    println!();
    println!(
        "Repair: a gap of {} samples of {} B written while the link was cut, then healed:",
        r.gap_samples, r.payload_bytes
    );
    println!();
    println!("| heal → link up | link up → reader complete | heal → complete | samples resent |");
    println!("|---|---|---|---|");
    println!(
        "| {:.0} ms | **{:.0} ms** | {:.0} ms | {} |",
        r.relink_ms, r.repair_ms, r.complete_ms, r.samples_repaired
    );
}
