//! The answering end: echoes one ping's probes and pings over Shoal, inline or raw TCP,
//! answers its goodbye with the report, and sums up what it did.

use super::{PingPongRun, PongReport, GOODBYE_WAIT, PROBE_PUBLISHER};
use crate::demo::RunError;
use crate::latency::read_one;
use crate::latency::PING_PUBLISHER;
use crate::raw::{write_frame, FrameReader, Framer};
use crate::shoal::SetupError;
use crate::stamp::Stamp;
use crate::usage::Usage;
use bytes::Bytes;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::{Event, EventReceiver, Mesh, PeerId};
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a pong did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PongSummary {
    /// `pong`.
    pub mode: String,
    /// `shoal`, `shoal-inline`, `raw-tcp` (`-psk` when secured).
    pub transport: String,
    /// The ping it served (node id, or address for raw TCP).
    pub ping: Option<String>,
    /// Pings echoed.
    pub echoed: u64,
    /// Probes echoed.
    pub probes: u64,
    /// Echoes refused by the node (no route yet, full).
    pub failed: u64,
    /// `goodbye`, `link-down` or `deadline`.
    pub ended_by: String,
    /// CPU and memory from the first probe to the goodbye (or to the end).
    pub usage: Usage,
}

impl PongSummary {
    /// The human-readable summary.
    pub fn print(&self) {
        println!(
            "== pong over {}: served {} | echoed {} pings, {} probes | {} refused | ended by {}",
            self.transport,
            self.ping.as_deref().unwrap_or("nobody"),
            self.echoed,
            self.probes,
            self.failed,
            self.ended_by
        );
        let u = &self.usage;
        println!(
            "   cpu user {:.2} s | sys {:.2} s | peak rss {} KiB",
            u.cpu_user_s, u.cpu_sys_s, u.peak_rss_kib
        );
    }
}

/// A pong's state, shared by its callback or echo loop and its main thread.
#[derive(Default)]
pub(super) struct Pong {
    echoed: AtomicU64,
    probes: AtomicU64,
    failed: AtomicU64,
    /// Usage at the first probe or ping.
    first: Mutex<Option<Usage>>,
    /// The goodbye's report, once it came.
    bye: Mutex<Option<PongReport>>,
    pub(super) ping: Mutex<Option<String>>,
    /// The served ping's link went down.
    pub(super) link_down: AtomicBool,
}

/// What to send back for one received payload.
pub(super) enum Answer {
    /// The payload itself.
    Echo,
    /// This (the answer to a goodbye).
    Report(Vec<u8>),
    /// Nothing.
    Nothing,
}

impl Pong {
    pub(super) fn answer(&self, from: impl FnOnce() -> String, payload: &[u8]) -> Answer {
        let stamp = Stamp::read(payload);
        {
            let mut first = self.first.lock().expect("pong lock");
            if first.is_none() {
                *first = Some(Usage::now());
                *self.ping.lock().expect("pong lock") = Some(from());
            }
        }
        match stamp {
            Ok(Stamp::Data {
                publisher: PING_PUBLISHER,
                ..
            }) => {
                self.echoed.fetch_add(1, Ordering::Relaxed);
                Answer::Echo
            }
            Ok(Stamp::Data {
                publisher: PROBE_PUBLISHER,
                ..
            }) => {
                self.probes.fetch_add(1, Ordering::Relaxed);
                Answer::Echo
            }
            Ok(Stamp::End {
                publisher: PING_PUBLISHER,
                ..
            }) => {
                let rep = self.report();
                *self.bye.lock().expect("pong lock") = Some(rep);
                Answer::Report(rep.encode())
            }
            _ => Answer::Nothing,
        }
    }

    fn usage(&self) -> Usage {
        let now = Usage::now();
        match *self.first.lock().expect("pong lock") {
            Some(first) => now.since(&first),
            None => Usage {
                peak_rss_kib: now.peak_rss_kib,
                ..Usage::default()
            },
        }
    }

    fn report(&self) -> PongReport {
        let u = self.usage();
        PongReport {
            echoed: self.echoed.load(Ordering::Relaxed),
            cpu_user_s: u.cpu_user_s,
            cpu_sys_s: u.cpu_sys_s,
            peak_rss_kib: u.peak_rss_kib,
        }
    }

    pub(super) fn said_goodbye(&self) -> bool {
        self.bye.lock().expect("pong lock").is_some()
    }

    fn summary(&self, transport: String, ended_by: &str) -> PongSummary {
        let usage = match *self.bye.lock().expect("pong lock") {
            Some(b) => Usage {
                cpu_user_s: b.cpu_user_s,
                cpu_sys_s: b.cpu_sys_s,
                peak_rss_kib: b.peak_rss_kib,
            },
            None => self.usage(),
        };
        PongSummary {
            mode: "pong".into(),
            transport,
            ping: self.ping.lock().expect("pong lock").clone(),
            echoed: self.echoed.load(Ordering::Relaxed),
            probes: self.probes.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            ended_by: ended_by.into(),
            usage,
        }
    }
}

/// Says where this pong listens, on stderr, so scripts can start the ping.
fn ready(id: &str, ip: std::net::IpAddr, port: u16) {
    eprintln!("pong ready: id={id} listen={}", SocketAddr::new(ip, port));
}

/// Runs the `pong` role: echoes one ping's messages until it says goodbye.
pub fn run_pong(r: &PingPongRun) -> Result<PongSummary, RunError> {
    if r.raw {
        return pong_raw(r);
    }
    let s = &r.settings;
    let pong = Arc::new(Pong::default());
    let slot: Arc<Mutex<Option<Mesh>>> = Arc::default();
    let mut b = s.node.builder()?;
    if r.inline {
        let (pong, slot) = (pong.clone(), slot.clone());
        b = b.on_event(move |ev| match ev {
            Event::Message { from, payload, .. } => {
                let reply = match pong.answer(|| from.to_string(), payload) {
                    Answer::Echo => payload.clone(),
                    Answer::Report(v) => Bytes::from(v),
                    Answer::Nothing => return,
                };
                let sent = match slot.lock().expect("slot lock").as_ref() {
                    Some(m) => m.try_send(*from, reply).is_ok(),
                    None => false,
                };
                if !sent {
                    pong.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Event::PeerDisconnected { peer } => pong.on_disconnect(peer),
            _ => {}
        });
    }
    let mesh = b.build().map_err(SetupError::from)?;
    *slot.lock().expect("slot lock") = Some(mesh.clone());
    let events = (!r.inline).then(|| mesh.events());
    let result = (|| {
        mesh.start().map_err(SetupError::from)?;
        if r.on_shard {
            // Cancelled when the node stops.
            drop(pong_on_shard(&mesh, pong.clone())?);
        }
        let _metrics = r.metrics_for(&mesh)?;
        ready(
            &mesh.id().to_string(),
            s.node.listen.ip(),
            mesh.listen_port(),
        );
        let deadline = Instant::now() + s.shape.warmup + s.shape.duration + r.linger;
        let ended_by = match events {
            Some(mut events) => pong_events(&mesh, &mut events, &pong, deadline),
            None => pong_wait(&pong, deadline),
        };
        Ok(pong.summary(r.transport(), ended_by))
    })();
    slot.lock().expect("slot lock").take();
    mesh.stop();
    result
}

impl Pong {
    fn on_disconnect(&self, peer: &PeerId) {
        if self.ping.lock().expect("pong lock").as_deref() == Some(&peer.to_string()) {
            self.link_down.store(true, Ordering::Relaxed);
        }
    }

    /// Why the pong is done, or `None` while it is not: after the goodbye, once the ping's
    /// link is gone (or [`GOODBYE_WAIT`] later); without a goodbye, when the link dropped.
    pub(super) fn done(
        &self,
        bye_at: &mut Option<Instant>,
        deadline: Instant,
    ) -> Option<&'static str> {
        let now = Instant::now();
        if self.said_goodbye() {
            let at = *bye_at.get_or_insert(now);
            if self.link_down.load(Ordering::Relaxed) || now >= at + GOODBYE_WAIT {
                return Some("goodbye");
            }
        } else if self.link_down.load(Ordering::Relaxed) {
            return Some("link-down");
        }
        (now >= deadline).then_some("deadline")
    }
}

/// The application-thread pong: echoes from this thread.
fn pong_events(
    mesh: &Mesh,
    events: &mut EventReceiver,
    pong: &Pong,
    deadline: Instant,
) -> &'static str {
    let mut bye_at = None;
    loop {
        if let Some(why) = pong.done(&mut bye_at, deadline) {
            return why;
        }
        match events.recv_timeout(Duration::from_millis(50)) {
            Some(Event::Message { from, payload, .. }) => {
                let reply = match pong.answer(|| from.to_string(), &payload) {
                    Answer::Echo => payload,
                    Answer::Report(v) => Bytes::from(v),
                    Answer::Nothing => continue,
                };
                if mesh.send_blocking(from, reply).is_err() {
                    pong.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(Event::PeerDisconnected { peer }) => pong.on_disconnect(&peer),
            _ => {}
        }
    }
}

/// Echoes in a shard task: pings come in the shard's inbox, echoes go straight into the
/// shard's core. The main thread watches the end through the (control) events.
fn pong_on_shard(mesh: &Mesh, pong: Arc<Pong>) -> Result<shoal_mesh::ShardTask<()>, RunError> {
    let task = mesh
        .spawn_on_shard(move |mut ctx| async move {
            let Some(mut inbox) = ctx.inbox(1024) else {
                return;
            };
            let mut batch = Vec::new();
            loop {
                inbox.recv_batch(&mut batch).await;
                for d in batch.drain(..) {
                    let Delivered::Message(m) = d else { continue };
                    let reply = match pong.answer(|| m.from.to_string(), &m.payload) {
                        Answer::Echo => m.payload,
                        Answer::Report(v) => Bytes::from(v),
                        Answer::Nothing => continue,
                    };
                    if ctx.send(m.from, reply).await.is_err() {
                        pong.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
        .map_err(SetupError::from)?;
    Ok(task)
}

/// The inline pong's main thread: the callback does the work; this only watches the end.
fn pong_wait(pong: &Pong, deadline: Instant) -> &'static str {
    let mut bye_at = None;
    loop {
        if let Some(why) = pong.done(&mut bye_at, deadline) {
            return why;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pong_raw(r: &PingPongRun) -> Result<PongSummary, RunError> {
    let s = &r.settings;
    let listener = TcpListener::bind(s.node.listen)?;
    let local = listener.local_addr()?;
    ready("raw", local.ip(), local.port());
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + s.shape.warmup + s.shape.duration + r.linger;
    let pong = Pong::default();
    let (mut b, from) = loop {
        match listener.accept() {
            Ok(conn) => break conn,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Ok(pong.summary("raw-tcp".into(), "deadline"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    };
    drop(listener);
    b.set_nonblocking(false)?;
    b.set_nodelay(true)?;
    b.set_read_timeout(Some(Duration::from_millis(50)))?;
    let (mut fr, mut framer) = (FrameReader::default(), Framer::default());
    let (mut payload, mut out) = (Vec::new(), Vec::new());
    let mut bye_at = None;
    let ended_by = loop {
        if let Some(why) = pong.done(&mut bye_at, deadline) {
            break why;
        }
        match read_one(
            &mut b,
            &mut fr,
            &mut payload,
            Instant::now() + Duration::from_millis(50),
        ) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(RunError::PeerClosed) => {
                pong.link_down.store(true, Ordering::Relaxed);
                continue;
            }
            Err(e) => return Err(e),
        }
        let reply = match pong.answer(|| from.to_string(), &payload) {
            Answer::Echo => std::mem::take(&mut payload),
            Answer::Report(v) => v,
            Answer::Nothing => continue,
        };
        out.clear();
        write_frame(&mut out, &framer.next_header(reply.len()), &reply)?;
        b.write_all(&out)?;
        payload = reply;
    };
    Ok(pong.summary("raw-tcp".into(), ended_by))
}
