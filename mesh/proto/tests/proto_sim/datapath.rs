//! THE DATA PATH OF A SIMULATED NODE: a stand-in for the shard core, to be replaced by it.
//!
//! It plays one data shard: it takes the control core's [`ToShard`] commands (links handed
//! over after their handshake, routing table changes, frames to send, Sync, Stop), reads and
//! writes the links' byte streams (records in a secured mesh), runs each link's liveness
//! ([`Link`]) and routes Data with [`Router`], and answers with [`ToControl`] reports. Everything
//! it does goes out as [`ShardOut`] values; the simulation (`mod.rs`) never looks inside.
//!
//! When the shard core lands, this file is the one place to swap: keep `on_cmd`, `on_bytes`,
//! `on_eof`, `originate`, `poll_timeout`, `handle_timeout` and `ShardOut`.

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_proto::config::MeshConfig;
use shoal_proto::crypto::{RecordReader, RecordSealer};
use shoal_proto::wire::{take_frame, Data, Frame};
use shoal_proto::{
    CloseReason, DataMeta, DataVerdict, FrameAction, Link, LinkEvent, LinkId, MsgId, MsgIdGen,
    NeighbourLinks, PeerId, Router,
};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// What a frame is, for the traffic counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Data,
    Membership,
    Other,
}

impl Kind {
    fn of(f: &Frame) -> Kind {
        match f {
            Frame::Data(_) => Kind::Data,
            Frame::Membership(_) => Kind::Membership,
            _ => Kind::Other,
        }
    }
}

/// What the data path asks of the simulation.
#[derive(Debug)]
pub enum ShardOut {
    /// Write bytes on `link`'s socket (one frame of `kind`, `len` plaintext bytes).
    Send {
        link: LinkId,
        bytes: Bytes,
        kind: Kind,
        len: u64,
    },
    /// A frame of `kind` (`len` bytes) arrived.
    Received { kind: Kind, len: u64 },
    /// Close `link`'s socket (after the sends before).
    Close { link: LinkId },
    /// A report for the control core.
    Report(ToControl),
    /// A message for the application.
    Deliver(Data),
    /// A link closed for this reason.
    Closed(CloseReason),
    /// A frame was lost on purpose (simulated loss).
    Lost,
}

enum Reader {
    Plain(BytesMut),
    Sealed(Box<RecordReader>, BytesMut),
}

struct ShardLink {
    link: Link,
    sealer: Option<RecordSealer>,
    reader: Reader,
}

/// One simulated data shard.
pub struct DataPath {
    max: u32,
    links: BTreeMap<LinkId, ShardLink>,
    pub table: NeighbourLinks,
    pub router: Router,
    ids: MsgIdGen,
    /// Install commands applied, per peer (the held-event check compares against it).
    pub installs: HashMap<PeerId, u64>,
    /// Links handed over with record keys (secured handshakes that completed).
    pub secured_links: u64,
    /// Probability that a Data, Membership or identity frame is not sent.
    pub loss: f64,
    rng: StdRng,
}

impl DataPath {
    pub fn new(me: PeerId, cfg: &MeshConfig, seed: u64, now: Instant) -> DataPath {
        let mut rng = StdRng::seed_from_u64(seed);
        DataPath {
            max: cfg.max_message_bytes,
            links: BTreeMap::new(),
            table: NeighbourLinks::new(),
            router: Router::new(
                me,
                cfg.initial_ttl,
                cfg.max_dedup_entries,
                cfg.dedup_ttl,
                now,
            ),
            ids: MsgIdGen::new(me, rng.gen()),
            installs: HashMap::new(),
            secured_links: 0,
            loss: 0.0,
            rng,
        }
    }

    /// True when `link` lives here.
    pub fn owns(&self, link: LinkId) -> bool {
        self.links.contains_key(&link)
    }

    pub fn link_count(&self) -> usize {
        self.links.len()
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
        match cmd {
            ToShard::AddLink(nl) => {
                let nl = *nl;
                self.secured_links += u64::from(nl.secure.is_some());
                let (sealer, reader) = match nl.secure {
                    Some((s, o)) => (
                        Some(s),
                        Reader::Sealed(
                            Box::new(RecordReader::new(o, &nl.leftover)),
                            BytesMut::new(),
                        ),
                    ),
                    None => (None, Reader::Plain(nl.leftover)),
                };
                self.links.insert(
                    nl.link,
                    ShardLink {
                        link: nl.state,
                        sealer,
                        reader,
                    },
                );
                let (more, eof) = buffered.unwrap_or_default();
                self.on_bytes(nl.link, &more, now, out);
                if eof {
                    self.on_eof(nl.link, now, out);
                }
            }
            ToShard::Install { peer, link, .. } => {
                self.table.insert(peer, link);
                *self.installs.entry(peer).or_insert(0) += 1;
            }
            ToShard::Uninstall { peer, link } => {
                self.table.remove(&peer, link);
            }
            ToShard::Close { link, goodbye } => {
                if let Some(l) = self.links.get_mut(&link) {
                    l.link.close(goodbye, now);
                    self.events(link, now, out);
                }
            }
            ToShard::SendRaw { link, frame } => {
                if let Some(f) = take_frame(&mut BytesMut::from(&frame[..]), self.max)
                    .ok()
                    .flatten()
                {
                    self.send(link, &f, now, out);
                }
            }
            ToShard::Stop => {
                let links: Vec<LinkId> = self.links.keys().copied().collect();
                for link in links {
                    if let Some(l) = self.links.get_mut(&link) {
                        l.link.close(true, now);
                    }
                    self.events(link, now, out);
                }
                out.push(ShardOut::Report(ToControl::Stopped(0)));
            }
            ToShard::Sync(t) => out.push(ShardOut::Report(ToControl::Synced(t))),
        }
    }

    /// Bytes read on `link`.
    pub fn on_bytes(&mut self, link: LinkId, bytes: &[u8], now: Instant, out: &mut Vec<ShardOut>) {
        let max = self.max;
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        let buf = match &mut l.reader {
            Reader::Plain(b) => {
                b.extend_from_slice(bytes);
                b
            }
            Reader::Sealed(r, plain) => {
                r.push(bytes);
                if r.decrypt().is_err() {
                    l.link.close(false, now);
                    out.push(ShardOut::Closed(CloseReason::ProtocolViolation(
                        "record did not open",
                    )));
                    self.events(link, now, out);
                    return;
                }
                let n = r.plaintext().len();
                plain.extend_from_slice(&r.split_plaintext(n));
                plain
            }
        };
        let mut frames = Vec::new();
        let mut bad = false;
        loop {
            match take_frame(buf, max) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(_) => {
                    bad = true;
                    break;
                }
            }
        }
        for f in frames {
            if !self.links.contains_key(&link) {
                return;
            }
            self.on_frame(link, f, now, out);
        }
        if bad {
            if let Some(l) = self.links.get_mut(&link) {
                l.link.close(false, now);
                out.push(ShardOut::Closed(CloseReason::ProtocolViolation(
                    "malformed",
                )));
            }
        }
        self.events(link, now, out);
    }

    /// The peer closed `link` (or the connection broke).
    pub fn on_eof(&mut self, link: LinkId, now: Instant, out: &mut Vec<ShardOut>) {
        if let Some(mut l) = self.links.remove(&link) {
            l.link.close(false, now);
            out.push(ShardOut::Closed(CloseReason::ProtocolViolation("eof")));
            out.push(ShardOut::Close { link });
            out.push(ShardOut::Report(ToControl::LinkClosed { link }));
        }
    }

    fn on_frame(&mut self, link: LinkId, f: Frame, now: Instant, out: &mut Vec<ShardOut>) {
        out.push(ShardOut::Received {
            kind: Kind::of(&f),
            len: f.encoded_len() as u64,
        });
        let l = self.links.get_mut(&link).expect("caller checked");
        if l.link.on_frame(&f, now) != FrameAction::Process {
            return;
        }
        match f {
            Frame::Data(d) => {
                let meta = DataMeta {
                    src: d.src,
                    dst: d.dst,
                    msg_id: d.msg_id,
                    ttl: d.ttl,
                };
                let v = self.router.on_data(&self.table, link, &meta, now);
                self.route(v, d, now, out);
            }
            Frame::Membership(record) => {
                out.push(ShardOut::Report(ToControl::MembershipIn { link, record }))
            }
            Frame::IdentityRecord(r) => out.push(ShardOut::Report(ToControl::IdentityIn {
                link,
                record: Box::new(r),
            })),
            _ => {}
        }
    }

    /// A message this node sends (`dst` zero: broadcast).
    pub fn originate(
        &mut self,
        src: PeerId,
        dst: PeerId,
        payload: Bytes,
        now: Instant,
        out: &mut Vec<ShardOut>,
    ) -> MsgId {
        let msg_id = self.ids.next_id();
        let v = self.router.originate(&self.table, dst);
        let data = Data {
            src,
            dst,
            msg_id,
            ttl: self.router.initial_ttl(),
            payload,
        };
        self.route(v, data, now, out);
        msg_id
    }

    fn route(&mut self, v: DataVerdict, mut data: Data, now: Instant, out: &mut Vec<ShardOut>) {
        let targets: Vec<LinkId> = match v {
            DataVerdict::Deliver => {
                out.push(ShardOut::Deliver(data));
                return;
            }
            DataVerdict::DeliverAndForward { except, ttl } => {
                out.push(ShardOut::Deliver(data.clone()));
                data.ttl = ttl;
                self.table
                    .links()
                    .iter()
                    .copied()
                    .filter(|l| *l != except)
                    .collect()
            }
            DataVerdict::Forward { except, ttl } => {
                data.ttl = ttl;
                self.table
                    .links()
                    .iter()
                    .copied()
                    .filter(|l| Some(*l) != except)
                    .collect()
            }
            DataVerdict::Unicast { link, ttl } => {
                data.ttl = ttl;
                vec![link]
            }
            DataVerdict::Drop(_) => return,
        };
        let f = Frame::Data(data);
        for l in targets {
            self.send(l, &f, now, out);
        }
    }

    /// Sends `f` on `link` (sealed in a secured mesh), unless the simulated loss takes it.
    fn send(&mut self, link: LinkId, f: &Frame, now: Instant, out: &mut Vec<ShardOut>) {
        let lossy = matches!(
            f,
            Frame::Data(_) | Frame::Membership(_) | Frame::IdentityRecord(_)
        );
        if lossy && self.loss > 0.0 && self.rng.gen_bool(self.loss) {
            out.push(ShardOut::Lost);
            return;
        }
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        l.link.on_sent(now);
        write(link, l, f, out);
    }

    pub fn poll_timeout(&self) -> Instant {
        let mut t = self.router.poll_timeout();
        for l in self.links.values() {
            if let Some(d) = l.link.poll_timeout() {
                t = t.min(d);
            }
        }
        t
    }

    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<ShardOut>) {
        self.router.handle_timeout(now);
        let ids: Vec<LinkId> = self.links.keys().copied().collect();
        for link in ids {
            if let Some(l) = self.links.get_mut(&link) {
                l.link.handle_timeout(now);
            }
            self.events(link, now, out);
        }
    }

    /// Sends the link's own frames (Heartbeat, Goodbye) and acts on its events.
    fn events(&mut self, link: LinkId, _now: Instant, out: &mut Vec<ShardOut>) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        while let Some(f) = l.link.poll_transmit() {
            write(link, l, &f, out);
        }
        let mut closed = false;
        while let Some(ev) = l.link.poll_event() {
            if let LinkEvent::Closed(reason) = ev {
                out.push(ShardOut::Closed(reason));
                closed = true;
            }
        }
        if closed {
            self.links.remove(&link);
            out.push(ShardOut::Close { link });
            out.push(ShardOut::Report(ToControl::LinkClosed { link }));
        }
    }
}

fn write(link: LinkId, l: &mut ShardLink, f: &Frame, out: &mut Vec<ShardOut>) {
    let mut plain = BytesMut::new();
    if f.encode(&mut plain).is_err() {
        return;
    }
    let len = plain.len() as u64;
    let bytes = match &mut l.sealer {
        None => plain.freeze(),
        Some(s) => {
            let mut rec = BytesMut::new();
            if s.seal_frame(&mut rec, &plain).is_err() {
                return;
            }
            rec.freeze()
        }
    };
    out.push(ShardOut::Send {
        link,
        bytes,
        kind: Kind::of(f),
        len,
    });
}
