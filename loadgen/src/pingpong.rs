//! `ping` and `pong`: the two ends of a ping-pong in separate processes, on one host or two,
//! over Shoal (application threads, or `--inline` in the shard callbacks) or raw TCP
//! (`--raw`), with the measurement and output of `latency`.
//!
//! Length: both ends of one exchange share its payload formats (probe, goodbye, report) defined
//! here: the ping side over Shoal, inline and raw TCP is ~260 lines, the pong side ~330; the unit
//! tests are in `pingpong/tests.rs`.
//!
//! The exchange, all in stamped payloads ([`crate::stamp`]):
//! - **probe** (ping → everyone, broadcast, every 100 ms until one comes back): the first echo
//!   names the pong and proves that both ends of the link are up, since the pong can route its
//!   reply only once its own side is (a ping sent earlier would be lost and cost a reply
//!   timeout);
//! - **ping** (targeted, one in flight) and its echo, as `latency`;
//! - **goodbye** (ping → pong, an end marker carrying the pings sent): the pong answers with
//!   its own report (pings echoed, its CPU time from first probe to goodbye) and ends once
//!   the ping's link goes, so every run ends by itself. A pong also ends when the ping's link
//!   drops, or at warm-up + duration + linger.

use crate::demo::RunError;
use crate::latency::{self, read_one, round_trips, shoal_round_trip, LatencyRun, Settings};
use crate::latency_inline::{InlinePinger, PING_PUBLISHER};
use crate::metrics::MetricsServer;
use crate::raw::{write_frame, FrameReader, Framer};
use crate::shoal::{wait_for, SetupError};
use crate::stamp::{now_ns, Stamp, STAMP_LEN};
use crate::usage::Usage;
use bytes::Bytes;
use shoal_mesh::{Event, EventReceiver, Mesh, PeerId, PublishError};
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `publisher` of a probe's stamp.
const PROBE_PUBLISHER: u64 = 2;
/// `publisher` of the pong's answer to a goodbye.
const PONG_PUBLISHER: u64 = 3;
/// Time between probes.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// How long the ping looks for a pong (links up, a probe answered).
const FIND_PONG: Duration = Duration::from_secs(30);
/// How long each side waits for the other's goodbye step.
const GOODBYE_WAIT: Duration = Duration::from_secs(2);

/// What the pong reports back to the ping in its answer to the goodbye.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct PongReport {
    /// Pings echoed (probes not included).
    pub echoed: u64,
    /// The pong process's CPU time from its first probe to the goodbye, user mode.
    pub cpu_user_s: f64,
    /// Same, kernel.
    pub cpu_sys_s: f64,
    /// The pong process's peak RSS, KiB.
    pub peak_rss_kib: u64,
}

/// Bytes of the pong's answer: an end stamp (`total` = pings echoed), then CPU user µs, CPU
/// sys µs and peak RSS KiB, big-endian u64 each.
const REPORT_LEN: usize = STAMP_LEN + 24;

impl PongReport {
    fn encode(&self) -> Vec<u8> {
        let mut buf = vec![0u8; REPORT_LEN];
        Stamp::End {
            publisher: PONG_PUBLISHER,
            total: self.echoed,
        }
        .write(&mut buf)
        .expect("buffer holds a stamp");
        let us = |s: f64| (s * 1e6).round() as u64;
        buf[24..32].copy_from_slice(&us(self.cpu_user_s).to_be_bytes());
        buf[32..40].copy_from_slice(&us(self.cpu_sys_s).to_be_bytes());
        buf[40..48].copy_from_slice(&self.peak_rss_kib.to_be_bytes());
        buf
    }

    /// The report in `payload`, if it is one.
    fn decode(payload: &[u8]) -> Option<PongReport> {
        let Ok(Stamp::End {
            publisher: PONG_PUBLISHER,
            total,
        }) = Stamp::read(payload)
        else {
            return None;
        };
        if payload.len() < REPORT_LEN {
            return None;
        }
        let word = |i: usize| u64::from_be_bytes(payload[i..i + 8].try_into().expect("8 bytes"));
        Some(PongReport {
            echoed: total,
            cpu_user_s: word(24) as f64 / 1e6,
            cpu_sys_s: word(32) as f64 / 1e6,
            peak_rss_kib: word(40),
        })
    }
}

fn probe(size: usize, n: u64) -> Bytes {
    let mut buf = vec![0u8; size.max(STAMP_LEN)];
    Stamp::Data {
        publisher: PROBE_PUBLISHER,
        seq: n,
        sent_ns: now_ns(),
    }
    .write(&mut buf)
    .expect("buffer holds a stamp");
    Bytes::from(buf)
}

fn goodbye(sent: u64) -> Bytes {
    let mut buf = vec![0u8; STAMP_LEN];
    Stamp::End {
        publisher: PING_PUBLISHER,
        total: sent,
    }
    .write(&mut buf)
    .expect("buffer holds a stamp");
    Bytes::from(buf)
}

fn is_probe_echo(payload: &[u8]) -> bool {
    matches!(
        Stamp::read(payload),
        Ok(Stamp::Data {
            publisher: PROBE_PUBLISHER,
            ..
        })
    )
}

/// Settings of a `ping` or `pong` run.
#[derive(Debug, Clone)]
pub struct PingPongRun {
    /// Size, rate, duration, warm-up, node settings (ping-pong mode).
    pub settings: Settings,
    /// Answer (pong) or send the next ping (ping) in the shard callback.
    pub inline: bool,
    /// Raw TCP instead of Shoal.
    pub raw: bool,
    /// Pong: how long past warm-up + duration it waits for its ping before giving up.
    pub linger: Duration,
    /// Serve the node's counters in the Prometheus text format here.
    pub metrics: Option<SocketAddr>,
}

impl PingPongRun {
    fn transport(&self) -> String {
        let base = match (self.raw, self.inline) {
            (true, _) => return "raw-tcp".into(),
            (false, true) => "shoal-inline",
            (false, false) => "shoal",
        };
        let mut t = String::from(base);
        if self.settings.node.psk.is_some() {
            t.push_str("-psk");
        }
        // Spinning trades CPU for latency: its rows must not read as the default's.
        if self.settings.node.spin_us > 0 {
            t.push_str(&format!("-spin{}", self.settings.node.spin_us));
        }
        t
    }

    fn metrics_for(&self, mesh: &Mesh) -> Result<Option<MetricsServer>, RunError> {
        match self.metrics {
            Some(addr) => Ok(Some(crate::metrics::serve_mesh(addr, mesh)?)),
            None => Ok(None),
        }
    }
}

/// Broadcasts probes until one is echoed; returns the echoing node (the pong). Waits first
/// for a connected peer (a broadcast needs one).
fn find_pong(mesh: &Mesh, events: &mut EventReceiver, size: usize) -> Result<PeerId, RunError> {
    let deadline = Instant::now() + FIND_PONG;
    wait_for(FIND_PONG.as_secs(), "a connected peer", || {
        !mesh.connected_peers().is_empty()
    })?;
    let mut n = 0u64;
    while Instant::now() < deadline {
        match mesh.try_broadcast(probe(size, n)) {
            Ok(()) | Err(PublishError::NoRoute) | Err(PublishError::Full) => {}
            Err(e) => return Err(RunError::Usage(format!("probe: {e}"))),
        }
        n += 1;
        let next = Instant::now() + PROBE_EVERY;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Some(Event::Message { from, payload, .. }) = events.recv_timeout(left) {
                if is_probe_echo(&payload) {
                    tracing::info!(pong = %from, probes = n, "pong found");
                    return Ok(from);
                }
            }
        }
    }
    Err(SetupError::Timeout {
        secs: FIND_PONG.as_secs(),
        what: "a pong to answer a probe".into(),
    }
    .into())
}

/// Runs the `ping` role: round trips to a pong in another process.
pub fn run_ping(r: &PingPongRun) -> Result<LatencyRun, RunError> {
    if r.raw {
        return ping_raw(r);
    }
    if r.inline {
        if r.settings.shape.rate > 0.0 {
            return Err(RunError::Usage(
                "ping --inline runs at max rate only (each ping leaves from the callback that \
                 received the last pong)"
                    .into(),
            ));
        }
        return ping_inline(r);
    }
    let s = &r.settings;
    let (mesh, mut events) = s.node.start()?;
    let _metrics = r.metrics_for(&mesh)?;
    let result = (|| {
        let pong = find_pong(&mesh, &mut events, s.shape.size)?;
        let before = Usage::now();
        let trips = round_trips(s, "ping shoal", |seq| {
            shoal_round_trip(&mesh, &mut events, pong, s.shape.size, seq, &mut |_| {})
        })?;
        let usage = Usage::now().since(&before);
        // The goodbye and the pong's answer to it.
        let mut report = None;
        if mesh.send_blocking(pong, goodbye(trips.sent)).is_ok() {
            let deadline = Instant::now() + GOODBYE_WAIT;
            while report.is_none() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                if let Some(Event::Message { payload, .. }) = events.recv_timeout(left) {
                    report = PongReport::decode(&payload);
                }
            }
        }
        let mut run = trips.finish(s, &r.transport(), usage);
        run.pong = report;
        Ok(run)
    })();
    mesh.stop();
    result
}

fn ping_inline(r: &PingPongRun) -> Result<LatencyRun, RunError> {
    let s = &r.settings;
    let report: Arc<Mutex<Option<PongReport>>> = Arc::default();
    let pinger = {
        let report = report.clone();
        InlinePinger::new(s.shape.size, move |ev| {
            if let Event::Message { payload, .. } = ev {
                if let Some(rep) = PongReport::decode(payload) {
                    *report.lock().expect("report lock") = Some(rep);
                }
            }
        })
    };
    let mesh = s
        .node
        .builder()?
        .on_event(pinger.callback())
        .build()
        .map_err(SetupError::from)?;
    pinger.attach(&mesh);
    let mut events = mesh.events();
    let result = (|| {
        mesh.start().map_err(SetupError::from)?;
        let _metrics = r.metrics_for(&mesh)?;
        let pong = find_pong(&mesh, &mut events, s.shape.size)?;
        // From now on Message events go to the callback only, never to a queue.
        drop(events);
        let before = Usage::now();
        let res = pinger.run(
            pong,
            s.shape.warmup,
            s.shape.duration,
            "ping shoal-inline",
            s.quiet,
        );
        let usage = Usage::now().since(&before);
        if mesh.send_blocking(pong, goodbye(res.sent)).is_ok() {
            let _ = wait_for(GOODBYE_WAIT.as_secs(), "the pong's report", || {
                report.lock().expect("report lock").is_some()
            });
        }
        let mut run = latency::finish(
            s,
            &r.transport(),
            res.hist,
            res.measured,
            res.timeouts,
            usage,
        );
        run.round_trips = res.sent;
        run.pong = *report.lock().expect("report lock");
        Ok(run)
    })();
    pinger.detach();
    mesh.stop();
    result
}

fn connect_raw(r: &PingPongRun) -> Result<TcpStream, RunError> {
    let Some(peer) = r.settings.node.static_peers.first() else {
        return Err(RunError::Usage(
            "ping --raw needs --static-peer host:port of the raw pong".into(),
        ));
    };
    let deadline = Instant::now() + FIND_PONG;
    loop {
        match TcpStream::connect(peer.as_str()) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%peer, error = %e, "raw pong not up yet");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn ping_raw(r: &PingPongRun) -> Result<LatencyRun, RunError> {
    let s = &r.settings;
    let mut a = connect_raw(r)?;
    a.set_nodelay(true)?;
    a.set_read_timeout(Some(Duration::from_millis(50)))?;
    let (mut fr, mut framer) = (FrameReader::default(), Framer::default());
    let (mut out, mut reply) = (Vec::new(), Vec::new());
    let before = Usage::now();
    let trips = round_trips(s, "ping raw", |seq| {
        latency::raw_round_trip(
            &mut a,
            &mut fr,
            &mut framer,
            &mut out,
            &mut reply,
            s.shape.size,
            seq,
        )
    })?;
    let usage = Usage::now().since(&before);
    let bye = goodbye(trips.sent);
    out.clear();
    write_frame(&mut out, &framer.next_header(bye.len()), &bye)?;
    a.write_all(&out)?;
    let deadline = Instant::now() + GOODBYE_WAIT;
    let mut report = None;
    while report.is_none() && read_one(&mut a, &mut fr, &mut reply, deadline)? {
        report = PongReport::decode(&reply);
    }
    let mut run = trips.finish(s, "raw-tcp", usage);
    run.pong = report;
    Ok(run)
}

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
struct Pong {
    echoed: AtomicU64,
    probes: AtomicU64,
    failed: AtomicU64,
    /// Usage at the first probe or ping.
    first: Mutex<Option<Usage>>,
    /// The goodbye's report, once it came.
    bye: Mutex<Option<PongReport>>,
    ping: Mutex<Option<String>>,
    /// The served ping's link went down.
    link_down: AtomicBool,
}

/// What to send back for one received payload.
enum Answer {
    /// The payload itself.
    Echo,
    /// This (the answer to a goodbye).
    Report(Vec<u8>),
    /// Nothing.
    Nothing,
}

impl Pong {
    fn answer(&self, from: impl FnOnce() -> String, payload: &[u8]) -> Answer {
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

    fn said_goodbye(&self) -> bool {
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
    fn done(&self, bye_at: &mut Option<Instant>, deadline: Instant) -> Option<&'static str> {
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

#[cfg(test)]
mod tests;
