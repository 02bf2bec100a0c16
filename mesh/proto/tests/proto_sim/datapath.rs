//! The data path of a simulated node: the live node's shard core ([`ShardCore`], one shard),
//! driven the way `shoal-mesh`'s shard driver drives it, over the simulation's byte streams.
//!
//! It takes the control core's [`ToShard`] commands, feeds the bytes that reach a link to the
//! core (`read_buffer` → `on_read` → `read_frames`), drains every link's writes
//! (`next_write` → `on_written`) after each input, and turns what the core delivered and the
//! core's actions into [`ShardOut`] values for the simulation (`mod.rs`), which never looks
//! inside. Deliveries take the live node's path: the core hands each to its delivery sink as
//! it decides it (here a [`Recording`], which takes them all, as an event queue with room
//! does), and they come out ahead of the call's actions, as the live driver queues them.
//!
//! Like the live driver, it writes only the links whose writer was woken (the link budget's
//! `wake`, which the core notifies when something is queued for an idle writer) and fires
//! only the link timers that are due (kept in a deadline index), so an event costs the
//! links it touches, not every link of the node: a full mesh of 256 nodes stays feasible.
//!
//! What the simulation adds on top, and only here: the traffic counters by frame kind (it
//! parses plaintext streams; a secured stream is counted as opaque bytes) and the simulated
//! loss. On a plaintext link a lost frame is cut out of the written stream (Data, Membership
//! and IdentityRecord frames only: losing a Hello or a Heartbeat would be a different
//! fault). A secured stream cannot lose a frame without failing authentication, and over TCP
//! it never does: there a loss is what TCP makes of it, a retransmission delay of that write
//! and of everything behind it on the link ([`ShardOut::Send::delay`]).

use bytes::{Buf, Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_proto::config::MeshConfig;
use shoal_proto::shard::{
    Delivered, Delivery, DeliverySink, Publish, ReadStep, SampleRun, ShardAction, ShardConfig,
    ShardCore, Unblock, WriteStep,
};
use shoal_proto::stats::Counters;
use shoal_proto::wire::{peek_frame_len, DecodeStatus, FrameType, DATA_HEADER_LEN};
use shoal_proto::{CloseReason, Gossip, LinkId, PeerId};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

/// How long TCP takes to resend a lost segment (the simulated retransmission timeout).
pub const RETRANSMIT_DELAY: Duration = Duration::from_millis(200);

/// What a frame is, for the traffic counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Data,
    /// Membership and SignedMembership.
    Membership,
    /// MembershipDigest.
    Digest,
    /// Discovery (topic announcements).
    Discovery,
    Other,
}

/// What the data path asks of the simulation.
#[derive(Debug)]
pub enum ShardOut {
    /// Write bytes on `link`'s socket, `delay` later than the link's latency (never before
    /// the link's earlier writes arrive).
    Send {
        link: LinkId,
        bytes: Bytes,
        delay: Duration,
    },
    /// A frame of `kind` (`len` bytes) was written (`tx`) or arrived (`!tx`).
    Traffic { tx: bool, kind: Kind, len: u64 },
    /// Close `link`'s socket (after the sends before).
    Close { link: LinkId },
    /// The writer of closing `link` sent everything: its end goes after the sends before,
    /// and the socket still reads until the peer's end arrives (the live writer's
    /// `shutdown`, then the core's `on_write_shutdown`).
    ShutdownWrite { link: LinkId },
    /// A report for the control core.
    Report(ToControl),
    /// A message for the application.
    Deliver(Delivery),
    /// A run of topic samples for a local reader.
    Samples(SampleRun),
    /// A link closed for this reason.
    Closed(CloseReason),
    /// A frame was lost on purpose (simulated loss).
    Lost,
}

/// The core's [`DeliverySink`]: takes every delivery, in order, until the data path hands
/// them to the simulation.
#[derive(Clone, Default)]
struct Recording(Rc<RefCell<Vec<Delivered>>>);

impl DeliverySink for Recording {
    fn try_deliver(&mut self, d: Delivered) -> Result<(), Delivered> {
        self.0.borrow_mut().push(d);
        Ok(())
    }
}

/// What the application gets of `d` (loss reports are not watched by the simulation).
fn delivered(d: Delivered, out: &mut Vec<ShardOut>) {
    match d {
        Delivered::Message(m) => out.push(ShardOut::Deliver(m)),
        Delivered::Samples(r) => out.push(ShardOut::Samples(r)),
        Delivered::Lost(_) => {}
    }
}

/// Links whose writer was woken, in link order (the order the data path writes them in).
type Woken = Arc<Mutex<BTreeSet<LinkId>>>;

/// What wakes one link's writer: marks the link for the next [`DataPath::flush`], as the
/// live driver's writer task is woken by its budget's `wake`.
struct WriterWaker {
    link: LinkId,
    woken: Woken,
}

impl Wake for WriterWaker {
    fn wake(self: Arc<Self>) {
        self.woken.lock().expect("not poisoned").insert(self.link);
    }
}

/// The simulation's view of one served link's streams.
#[derive(Default)]
struct Conn {
    secured: bool,
    /// The idle writer's wait on the link budget's `wake` (`None` while woken).
    listener: Option<event_listener::EventListener>,
    /// Its waker (made once per link).
    waker: Option<Waker>,
    /// The link's timer deadline as last asked (never later than the real one: a link's
    /// deadline only moves later, or goes away when it closes).
    timer: Option<Instant>,
    /// Plaintext not yet counted, per direction (a frame may span writes and reads).
    tx_partial: BytesMut,
    rx_partial: BytesMut,
}

/// One simulated data shard.
pub struct DataPath {
    core: ShardCore,
    /// What the core delivered in the current call.
    sink: Recording,
    conns: BTreeMap<LinkId, Conn>,
    /// Install commands applied, per peer (the held-event check compares against it).
    pub installs: HashMap<PeerId, u64>,
    /// Links handed over with record keys (secured handshakes that completed).
    pub secured_links: u64,
    /// Probability that a Data, Membership or identity frame is lost.
    pub loss: f64,
    /// Block waits given up (the simulation never waits for link room).
    pub blocked: u64,
    /// The last sample route table the control core posted.
    pub routes: Option<Arc<shoal_proto::topics::SampleRoutes>>,
    max: u32,
    rng: StdRng,
    acts: Vec<ShardAction>,
    bufs: Vec<Bytes>,
    /// Links whose writer has work (see [`WriterWaker`]).
    woken: Woken,
    /// `(deadline, link)` of every link's timer (see [`Conn::timer`]).
    timers: BTreeSet<(Instant, LinkId)>,
    /// `SHOAL_SIM_CHECK=1`: after every flush, check that no link was left with work and no
    /// timer deadline is later than the link's (the full scans the indexes replace).
    check: bool,
    /// When set, every plaintext frame written: (when, link, frame type).
    pub sent_log: Option<Vec<(Instant, LinkId, u8)>>,
}

impl DataPath {
    pub fn new(me: PeerId, cfg: &MeshConfig, seed: u64, now: Instant) -> DataPath {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sc = ShardConfig::new(me, cfg);
        sc.secure = cfg.secured();
        let sink = Recording::default();
        let seed = rng.gen();
        let core = ShardCore::new(0, 1, sc, Arc::default(), seed, now, Box::new(sink.clone()));
        DataPath {
            core,
            sink,
            conns: BTreeMap::new(),
            installs: HashMap::new(),
            secured_links: 0,
            loss: 0.0,
            blocked: 0,
            routes: None,
            max: cfg.max_message_bytes,
            rng,
            acts: Vec::new(),
            bufs: Vec::new(),
            woken: Woken::default(),
            timers: BTreeSet::new(),
            check: std::env::var("SHOAL_SIM_CHECK").is_ok_and(|v| v == "1"),
            sent_log: None,
        }
    }

    /// True when `link` lives here.
    pub fn owns(&self, link: LinkId) -> bool {
        self.conns.contains_key(&link)
    }

    pub fn link_count(&self) -> usize {
        self.conns.len()
    }

    /// The core's gossip state (its statistics).
    pub fn gossip(&self) -> &Gossip {
        self.core.gossip()
    }

    /// The core's counters.
    pub fn counters(&self) -> &Counters {
        self.core.counters()
    }

    /// A command of the control core. `buffered` are bytes that reached an `AddLink`'s socket
    /// after its handshake and before the hand-over (the kernel's buffer), `eof` whether the
    /// peer closed it meanwhile.
    pub fn on_cmd(
        &mut self,
        cmd: ToShard<()>,
        buffered: Option<(BytesMut, bool)>,
        now: Instant,
        out: &mut Vec<ShardOut>,
    ) {
        match &cmd {
            ToShard::Install { peer, .. } => *self.installs.entry(*peer).or_insert(0) += 1,
            ToShard::AddLink(nl) => self.secured_links += u64::from(nl.secure.is_some()),
            ToShard::SampleRoutes(t) => self.routes = Some(t.clone()),
            _ => {}
        }
        let secured = matches!(&cmd, ToShard::AddLink(nl) if nl.secure.is_some());
        let mut acts = std::mem::take(&mut self.acts);
        let added = self.core.on_command(cmd, now, &mut acts);
        self.apply(&mut acts, now, out);
        if let Some((link, ())) = added {
            self.conns.insert(
                link,
                Conn {
                    secured,
                    ..Conn::default()
                },
            );
            // A new link's writer has not waited yet: it looks at its queue first.
            self.woken.lock().expect("not poisoned").insert(link);
            self.set_timer(link, now);
            // The handshake's leftover bytes first, as the live reader does.
            self.read_all(link, now, &mut acts, out);
            let (more, eof) = buffered.unwrap_or_default();
            if !more.is_empty() {
                self.feed(link, &more, now, &mut acts, out);
            }
            if eof {
                self.eof(link, now, &mut acts, out);
            }
        }
        self.acts = acts;
        self.flush(now, out);
    }

    /// Bytes read on `link`.
    pub fn on_bytes(&mut self, link: LinkId, bytes: &[u8], now: Instant, out: &mut Vec<ShardOut>) {
        let mut acts = std::mem::take(&mut self.acts);
        self.feed(link, bytes, now, &mut acts, out);
        self.acts = acts;
        self.flush(now, out);
    }

    /// The peer closed `link` (or the connection broke).
    pub fn on_eof(&mut self, link: LinkId, now: Instant, out: &mut Vec<ShardOut>) {
        let mut acts = std::mem::take(&mut self.acts);
        self.eof(link, now, &mut acts, out);
        self.acts = acts;
        self.flush(now, out);
    }

    /// Samples `first_seq..` of this node's writer `writer`, one run.
    pub fn write_samples(
        &mut self,
        writer: [u8; 16],
        first_seq: u64,
        payloads: &[&[u8]],
        ttl: u8,
        now: Instant,
        out: &mut Vec<ShardOut>,
    ) {
        let mut frames = BytesMut::new();
        let mut w =
            shoal_proto::wire::SampleRunWriter::new(&mut frames, writer, ttl, first_seq, self.max);
        for p in payloads {
            w.push(p).expect("a small sample fits");
        }
        w.finish();
        let mut acts = std::mem::take(&mut self.acts);
        self.core.publish(
            Publish::Samples {
                writer,
                frames,
                count: payloads.len(),
            },
            now,
            &mut acts,
        );
        self.apply(&mut acts, now, out);
        self.acts = acts;
        self.flush(now, out);
    }

    /// A message this node sends (`dst` zero: broadcast).
    pub fn originate(
        &mut self,
        dst: PeerId,
        payload: Bytes,
        now: Instant,
        out: &mut Vec<ShardOut>,
    ) {
        let mut acts = std::mem::take(&mut self.acts);
        self.core
            .publish(Publish::One { dst, payload }, now, &mut acts);
        self.apply(&mut acts, now, out);
        self.acts = acts;
        self.flush(now, out);
    }

    /// The earliest deadline of the core and of its links. The index holds a lower bound of
    /// each link's deadline: the first entry is refreshed until it is exact, and then no
    /// other link's can be earlier.
    pub fn poll_timeout(&mut self, now: Instant) -> Instant {
        let core = self.core.poll_timeout();
        let mut t = core;
        while let Some(&(at, link)) = self.timers.first() {
            if at >= core {
                break;
            }
            if self.core.link_timeout(link, now) == Some(at) {
                t = at;
                break;
            }
            self.set_timer(link, now);
        }
        if self.check {
            let all = self
                .conns
                .keys()
                .filter_map(|l| self.core.link_timeout(*l, now))
                .fold(core, Instant::min);
            assert_eq!(all, t, "the timer index missed a link's deadline");
        }
        t
    }

    /// Files `link`'s timer deadline as the core has it now (none once it closed).
    fn set_timer(&mut self, link: LinkId, now: Instant) {
        let Some(c) = self.conns.get_mut(&link) else {
            return;
        };
        if let Some(at) = c.timer.take() {
            self.timers.remove(&(at, link));
        }
        c.timer = self.core.link_timeout(link, now);
        if let Some(at) = c.timer {
            self.timers.insert((at, link));
        }
    }

    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<ShardOut>) {
        let mut acts = std::mem::take(&mut self.acts);
        self.core.handle_timeout(now, &mut acts);
        self.apply(&mut acts, now, out);
        // In link order, as a scan of every link would find them.
        let mut due: Vec<LinkId> = self
            .timers
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, l)| *l)
            .collect();
        due.sort_unstable();
        for link in due {
            if self.core.link_timeout(link, now).is_some_and(|d| d <= now) {
                self.core.on_link_timer(link, now, &mut acts);
                self.apply(&mut acts, now, out);
            }
            self.set_timer(link, now);
        }
        self.acts = acts;
        self.flush(now, out);
    }

    fn feed(
        &mut self,
        link: LinkId,
        bytes: &[u8],
        now: Instant,
        acts: &mut Vec<ShardAction>,
        out: &mut Vec<ShardOut>,
    ) {
        let Some(c) = self.conns.get_mut(&link) else {
            return;
        };
        count(c.secured, &mut c.rx_partial, bytes, false, self.max, out);
        let Some((mut buf, _room)) = self.core.read_buffer(link) else {
            return;
        };
        buf.extend_from_slice(bytes);
        self.core.on_read(link, buf, bytes.len(), now);
        self.read_all(link, now, acts, out);
    }

    fn read_all(
        &mut self,
        link: LinkId,
        now: Instant,
        acts: &mut Vec<ShardAction>,
        out: &mut Vec<ShardOut>,
    ) {
        loop {
            let step = self.core.read_frames(link, now, acts);
            self.apply(acts, now, out);
            if step != ReadStep::More {
                break;
            }
        }
    }

    fn eof(
        &mut self,
        link: LinkId,
        now: Instant,
        acts: &mut Vec<ShardAction>,
        out: &mut Vec<ShardOut>,
    ) {
        if let Some((buf, _)) = self.core.read_buffer(link) {
            self.core.on_eof(link, buf, now, acts);
            self.apply(acts, now, out);
        }
    }

    /// Carries out the core's actions (one shard: posts to other shards cannot happen).
    /// What the call delivered comes first: the sink took it during the call.
    fn apply(&mut self, acts: &mut Vec<ShardAction>, now: Instant, out: &mut Vec<ShardOut>) {
        for d in self.sink.0.borrow_mut().drain(..) {
            delivered(d, out);
        }
        let mut read_on = Vec::new();
        for a in acts.drain(..) {
            match a {
                ShardAction::Report { msg, busy: _ } => out.push(ShardOut::Report(msg)),
                // The recording gives nothing back; were it to, this is its place in order.
                ShardAction::Deliver(d) => delivered(d, out),
                ShardAction::Error(_) => {}
                ShardAction::Ended(link, reason) => {
                    if let Some(at) = self.conns.remove(&link).and_then(|c| c.timer) {
                        self.timers.remove(&(at, link));
                    }
                    if let Some(r) = reason {
                        out.push(ShardOut::Closed(r));
                    }
                    out.push(ShardOut::Close { link });
                }
                ShardAction::Post { .. } => {
                    panic!("one shard owns every link and every dedup stream: nothing to post")
                }
                ShardAction::Block(b) => {
                    // Queues drain after every input here, so a Block wait is tried once more
                    // and otherwise given up (counted by the core as a lost wait).
                    let mut more = Vec::new();
                    if let Unblock::Wait(..) = self.core.unblock(b, now, &mut more) {
                        self.blocked += 1;
                    }
                    self.apply(&mut more, now, out);
                }
                ShardAction::ReadOn(link) => read_on.push(link),
            }
        }
        // A held reader told to read on handles what it holds after the actions before.
        for link in read_on {
            self.read_all(link, now, acts, out);
        }
    }

    /// Drains the queues of the links whose writer was woken into their sockets, in link
    /// order; a link woken meanwhile behind the one being written is written in this pass, one
    /// before it in the next (as one pass over every link in order would).
    fn flush(&mut self, now: Instant, out: &mut Vec<ShardOut>) {
        let mut acts = std::mem::take(&mut self.acts);
        let mut after = None;
        loop {
            let link = {
                let mut woken = self.woken.lock().expect("not poisoned");
                let next = match after {
                    None => woken.first().copied(),
                    Some(a) => woken
                        .range((Bound::Excluded(a), Bound::Unbounded))
                        .next()
                        .copied(),
                };
                let Some(link) = next else { break };
                woken.remove(&link);
                link
            };
            after = Some(link);
            let Some(c) = self.conns.get_mut(&link) else {
                continue;
            };
            c.listener = None;
            loop {
                self.bufs.clear();
                match self.core.next_write(link, &mut self.bufs, now, &mut acts) {
                    WriteStep::Write => {
                        let n: usize = self.bufs.iter().map(|b| b.len()).sum();
                        let mut all = BytesMut::with_capacity(n);
                        for b in &self.bufs {
                            all.extend_from_slice(b);
                        }
                        self.core.on_written(link, n, now);
                        self.send(link, all, now, out);
                    }
                    WriteStep::Shutdown => {
                        self.core.on_write_shutdown(link, now);
                        out.push(ShardOut::ShutdownWrite { link });
                        break;
                    }
                    WriteStep::Idle => {
                        self.wait_for_work(link);
                        break;
                    }
                    WriteStep::Gone => break,
                }
            }
            self.apply(&mut acts, now, out);
        }
        self.acts = acts;
        if self.check {
            for link in self.conns.keys() {
                let waits = self.conns[link].listener.is_some();
                let woken = self.woken.lock().expect("not poisoned").contains(link);
                assert!(
                    waits || woken || !self.core.write_pending(*link),
                    "{link:?} has work but its writer neither waits nor was woken"
                );
            }
        }
    }

    /// `link`'s writer found nothing to write: it waits for the budget's `wake`, the listener
    /// taken before the last look at the queue, as the live writer does.
    fn wait_for_work(&mut self, link: LinkId) {
        let (Some(budget), Some(c)) = (self.core.link_budget(link), self.conns.get_mut(&link))
        else {
            return;
        };
        let mut listener = budget.wake.listen();
        let woken = &self.woken;
        let waker = c.waker.get_or_insert_with(|| {
            Waker::from(Arc::new(WriterWaker {
                link,
                woken: woken.clone(),
            }))
        });
        let ready = self.core.write_pending(link)
            || Pin::new(&mut listener)
                .poll(&mut Context::from_waker(waker))
                .is_ready();
        if ready {
            woken.lock().expect("not poisoned").insert(link);
        } else {
            c.listener = Some(listener);
        }
    }

    /// Writes `bytes` on `link`, counting its frames and applying the simulated loss.
    fn send(&mut self, link: LinkId, mut bytes: BytesMut, now: Instant, out: &mut Vec<ShardOut>) {
        let Some(c) = self.conns.get_mut(&link) else {
            return;
        };
        if c.secured {
            count(true, &mut c.tx_partial, &bytes, true, self.max, out);
            let lost = self.loss > 0.0 && self.rng.gen_bool(self.loss);
            if lost {
                out.push(ShardOut::Lost);
            }
            let delay = if lost {
                RETRANSMIT_DELAY
            } else {
                Duration::ZERO
            };
            out.push(ShardOut::Send {
                link,
                bytes: bytes.freeze(),
                delay,
            });
            return;
        }
        // Plaintext: whole frames, one by one (the core writes whole frames only).
        let mut kept = BytesMut::with_capacity(bytes.len());
        while !bytes.is_empty() {
            let len = match peek_frame_len(&bytes, u32::MAX) {
                Ok(DecodeStatus::Complete { len, .. }) => len,
                _ => bytes.len(),
            };
            let frame = bytes.split_to(len.min(bytes.len()));
            let kind = kind_of(&frame);
            if let (Some(log), Some(t)) = (self.sent_log.as_mut(), frame.get(4)) {
                log.push((now, link, *t));
            }
            let lossy = frame.len() > 4 && is_lossy(frame[4]);
            if lossy && self.loss > 0.0 && self.rng.gen_bool(self.loss) {
                out.push(ShardOut::Lost);
                continue;
            }
            out.push(ShardOut::Traffic {
                tx: true,
                kind,
                len: frame.len() as u64,
            });
            kept.extend_from_slice(&frame);
        }
        if !kept.is_empty() {
            out.push(ShardOut::Send {
                link,
                bytes: kept.freeze(),
                delay: Duration::ZERO,
            });
        }
    }
}

/// Data, Membership and IdentityRecord frames may be lost; the link's own frames may not.
fn is_lossy(frame_type: u8) -> bool {
    [
        FrameType::Data,
        FrameType::Membership,
        FrameType::IdentityRecord,
        FrameType::MembershipDigest,
    ]
    .iter()
    .any(|t| *t as u8 == frame_type)
}

fn kind_of(frame: &[u8]) -> Kind {
    match frame.get(4) {
        Some(t) if *t == FrameType::Data as u8 => Kind::Data,
        Some(t) if *t == FrameType::Membership as u8 || *t == FrameType::SignedMembership as u8 => {
            Kind::Membership
        }
        Some(t) if *t == FrameType::MembershipDigest as u8 => Kind::Digest,
        Some(t) if *t == FrameType::Discovery as u8 => Kind::Discovery,
        _ => Kind::Other,
    }
}

/// Counts the whole frames of a plaintext stream (`partial` keeps a frame that spans calls);
/// a secured stream counts as opaque bytes.
fn count(
    secured: bool,
    partial: &mut BytesMut,
    bytes: &[u8],
    tx: bool,
    max: u32,
    out: &mut Vec<ShardOut>,
) {
    if secured {
        out.push(ShardOut::Traffic {
            tx,
            kind: Kind::Other,
            len: bytes.len() as u64,
        });
        return;
    }
    if tx {
        return; // counted frame by frame in `send`
    }
    partial.extend_from_slice(bytes);
    while let Ok(DecodeStatus::Complete { len, .. }) =
        peek_frame_len(partial, max.max(DATA_HEADER_LEN as u32))
    {
        if len > partial.len() {
            break;
        }
        out.push(ShardOut::Traffic {
            tx,
            kind: kind_of(partial),
            len: len as u64,
        });
        partial.advance(len);
    }
}
