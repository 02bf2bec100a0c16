//! What a link's reader hands the core: read buffers sized by what arrives, and the frames
//! parsed from them (Data and Samples frames through fast lanes that build no `Frame`;
//! payloads are slices of the read buffer).
//!
//! Secured links read ciphertext straight into their [`RecordReader`]'s buffer; records are
//! opened in place, one as the parser needs it, and frames are parsed from the plaintext
//! where it was decrypted, exactly as in plaintext mode (frames may span records). A record
//! that does not authenticate closes that link only.
//!
//! **Owns:** read buffer sizing, frame parsing and the link step of each received frame.
//! **Must not touch:** the socket (the driver reads into the buffer it is given).
//!
//! Length: about 490 lines of code and docs (the plaintext and secured read paths share the
//! per-frame dispatch); the rest are the unit tests of that dispatch and of buffer sizing.

use super::action::{decode_fault, IfBusy, LinkFault, ShardAction};
use super::ShardCore;
use crate::cmd::{RelFrame, ToControl};
use crate::crypto::{OpenError, RecordReader};
use crate::link::{CloseReason, FrameAction};
use crate::stats::{add, inc};
use crate::wire::{
    peek_frame_len, take_data, take_frame, take_samples, Data, DecodeError, DecodeStatus, Frame,
    Samples,
};
use crate::LinkId;
use bytes::BytesMut;
use std::time::Instant;

/// Bytes reserved for a read when the buffer has less room: from [`READ_CHUNK`], doubled
/// up to [`READ_CHUNK_MAX`] while reads fill what was asked (a busy link), back to the
/// minimum when a read comes back small, so idle links keep small buffers. Reads of 256 KiB
/// made 1 KiB throughput ~15 % higher than reads of 64 KiB (`bench/notes/throughput.md`).
/// The minimum is what every idle link holds for as long as its read is posted (the ring
/// owns the buffer until bytes arrive): at 64 KiB, 59 idle links of a 60-node full mesh held
/// ~3.8 MB of each node's ~6 MB; a busy link reaches the maximum in six reads.
pub(super) const READ_CHUNK: usize = 4 * 1024;
/// The largest read a busy link grows to. A frame larger than a read is read into room
/// that grows with what of it arrived, up to the frame's size.
pub(super) const READ_CHUNK_MAX: usize = 256 * 1024;

/// A read this long after the link's previous one came after a quiet spell: a buffer kept
/// from busier times (room for large frames) may go (see [`ShardCore::read_rested`]). Reads
/// of a busy link follow each other within microseconds; an idle one's come with its peer's
/// heartbeats.
pub const READ_REST: std::time::Duration = std::time::Duration::from_millis(100);

/// Room for the next read: a chunk, or inside a frame (a record) that still needs `rest`
/// bytes, up to as much as is already buffered. The buffer grows with what arrives (at most
/// doubling per read, so copying stays linear), never to a length a peer merely announced: a
/// 5-byte header announcing 16 MiB used to reserve 16 MiB for that link.
pub(super) fn read_room(rest: usize, buffered: usize, chunk: usize) -> usize {
    chunk.max(rest.min(buffered))
}

/// The size of the next read, given the last one: see [`READ_CHUNK`].
pub(super) fn next_chunk(chunk: usize, read: usize) -> usize {
    if read >= chunk {
        (chunk * 2).min(READ_CHUNK_MAX)
    } else if read < chunk / 4 {
        READ_CHUNK
    } else {
        chunk
    }
}

/// Actions one [`ShardCore::read_frames`] call collects at most before it returns, so the
/// driver carries them out while they are still in the cache (a 256 KiB read holds thousands
/// of small frames).
const ACTIONS_PER_CALL: usize = 64;

/// What a link's reader does after [`ShardCore::read_frames`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStep {
    /// More whole frames are buffered: carry out the actions, then call again.
    More,
    /// Every whole frame is handled: read more bytes.
    NeedBytes,
    /// The link's frames wait for a dial race's loser to be read to its end (see
    /// `race_order`): read nothing more on it until [`ShardAction::ReadOn`] names it, then
    /// call again.
    Hold,
    /// The link is gone: the reader stops.
    Gone,
}

/// A link's read state.
#[derive(Debug)]
pub(super) enum Rx {
    /// Plaintext: the bytes read and not yet parsed.
    Plain(BytesMut),
    /// Secured: ciphertext, and the plaintext opened in place before it.
    Secure(RecordReader),
}

/// A frame taken off a link's read buffer that the Data lane declined: Samples unboxed and
/// apart, since a `Frame` is larger and moved by value. (Data frames never come this way:
/// see `read_frames`; a Data frame the lane declines is `take_frame`'s to judge.)
enum Incoming {
    Samples(Samples),
    Frame(Frame),
}

// Moved once per frame on the hot path: keep the fast lanes' values small.
const _: () = assert!(std::mem::size_of::<Samples>() <= 72);

/// What a received frame did to its link.
enum Step {
    /// Route the frame or hand it over as received on this link: the one it came on, or
    /// the peer's installed link when it came on a dial race's loser (retiring or closing:
    /// see [`ShardCore::successor`]).
    Process(LinkId),
    /// Taken by the link (or the link's own frame while it closes): read on.
    Consumed,
    /// A payload frame on a link this node is closing, with no other link to its peer to
    /// take it over: dropped (the caller counts it).
    Discarded,
    /// The link closed: the reader stops.
    Closed,
}

/// Why a link's bytes cannot be read on.
enum Unreadable {
    Decode(DecodeError),
    Open(OpenError),
}

/// Splits the next whole frame off a secured link's plaintext (opening records as the parser
/// needs them), `None` when more bytes are needed. The frame shares the buffer, so Data
/// payloads are not copied.
fn next_secure_frame(rr: &mut RecordReader, max: u32) -> Result<Option<BytesMut>, Unreadable> {
    loop {
        let len = match peek_frame_len(rr.plaintext(), max) {
            Ok(DecodeStatus::Complete { len, .. }) => len,
            // Frames that fit their records are never moved: the next record is opened only
            // once the plaintext before it holds no whole frame.
            Ok(DecodeStatus::NeedMore { .. }) => match rr.open_next() {
                Ok(true) => continue,
                Ok(false) => return Ok(None),
                Err(e) => return Err(Unreadable::Open(e)),
            },
            Err(e) => return Err(Unreadable::Decode(e)),
        };
        return Ok(Some(rr.split_plaintext(len)));
    }
}

/// The next frame after the Data lane declined it (see `read_frames`): Samples frames take
/// their fast lane (no `Frame` built); anything else goes through `take_frame`, which
/// decides.
fn take_one(buf: &mut BytesMut, max: u32) -> Result<Option<Incoming>, DecodeError> {
    if let Some(s) = take_samples(buf, max) {
        return Ok(Some(Incoming::Samples(s)));
    }
    Ok(take_frame(buf, max)?.map(Incoming::Frame))
}

impl ShardCore {
    /// Handles the whole frames buffered on `link`, until they are all handled or a batch of
    /// actions is collected.
    pub fn read_frames(
        &mut self,
        link: LinkId,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) -> ReadStep {
        self.begin_call();
        if !self.handover.behind.is_empty() && self.held_for_loser(link, now) {
            return ReadStep::Hold;
        }
        let Some(slot) = self.links.slot(link) else {
            return ReadStep::Gone;
        };
        let max = self.cfg.max_message_bytes;
        loop {
            if out.len() >= ACTIONS_PER_CALL {
                return ReadStep::More;
            }
            // Data frames go straight to routing, never wrapped in an `Incoming`: its tag
            // moves the frame's fields to other offsets, and copying them there and back cost
            // the receiving shard about a fifth of its reader's time per 64 B message (stores
            // and loads of different widths; `perf annotate`).
            let frame = match &mut self.links.at(slot).rx {
                Rx::Plain(buf) => {
                    if let Some(d) = take_data(buf, max) {
                        if !self.data_in(slot, link, d, now, out) {
                            return ReadStep::Gone;
                        }
                        continue;
                    }
                    take_one(buf, max).map_err(Unreadable::Decode)
                }
                Rx::Secure(rr) => match next_secure_frame(rr, max) {
                    Ok(Some(mut raw)) => {
                        if let Some(d) = take_data(&mut raw, max) {
                            if !self.data_in(slot, link, d, now, out) {
                                return ReadStep::Gone;
                            }
                            continue;
                        }
                        take_one(&mut raw, max)
                            .map(|f| Some(f.expect("peek_frame_len said the frame is complete")))
                            .map_err(Unreadable::Decode)
                    }
                    Ok(None) => Ok(None),
                    Err(e) => Err(e),
                },
            };
            let frame = match frame {
                Ok(Some(f)) => f,
                Ok(None) => return ReadStep::NeedBytes,
                Err(Unreadable::Decode(e)) => {
                    let fault = decode_fault(&e, &self.counters);
                    let err = self.error(link, fault, e.to_string());
                    self.teardown(link, err, None, now, out);
                    return ReadStep::Gone;
                }
                Err(Unreadable::Open(e)) => {
                    self.record_failure(link, e.to_string(), now, out);
                    return ReadStep::Gone;
                }
            };
            if !self.on_frame(slot, link, frame, now, out) {
                return ReadStep::Gone;
            }
        }
    }

    /// A Data frame from the fast lane: the link's step, then routing; false when the link
    /// closed.
    fn data_in(
        &mut self,
        slot: usize,
        link: LinkId,
        d: Data,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) -> bool {
        match self.link_step(slot, link, true, now, out, |s, now| s.on_data(now)) {
            Step::Process(from) => self.route_in(from, d, now, out),
            Step::Consumed => {}
            Step::Discarded => inc(&self.counters.dropped_link_closing),
            Step::Closed => return false,
        }
        true
    }

    /// Counts a received frame and runs it through its link's state machine (`step`),
    /// tearing the link down when the state machine closes it. `payload`: the frame is one
    /// the link hands on ([`Link::is_payload`](crate::link::Link::is_payload)).
    fn link_step(
        &mut self,
        slot: usize,
        link: LinkId,
        payload: bool,
        now: Instant,
        out: &mut Vec<ShardAction>,
        step: impl FnOnce(&mut crate::link::Link, Instant) -> FrameAction,
    ) -> Step {
        inc(&self.counters.frames_in);
        let l = self.links.at(slot);
        if l.closing {
            // This node closes the link (its writer flushes, then says Goodbye). The link's
            // own frames (Heartbeat, the peer's Goodbye) are moot. A payload frame is still
            // its peer's word: when the peer has another link here (this one lost a dial
            // race), it is handled as that link's; with none (this node stops, or dropped
            // the link for `max_links`) it is discarded, and counted.
            if !payload {
                return Step::Consumed;
            }
            let peer = l.peer;
            return match self.successor_of(peer, link) {
                Some(current) => Step::Process(current),
                None => Step::Discarded,
            };
        }
        let action = step(&mut l.state, now);
        let closed = l.pull();
        match action {
            FrameAction::Consumed => Step::Consumed,
            FrameAction::Close => {
                let err = match &closed {
                    None | Some(CloseReason::Goodbye) | Some(CloseReason::Local) => None,
                    Some(r) => {
                        inc(&self.counters.malformed_frames);
                        self.error(link, LinkFault::Malformed, r.to_string())
                    }
                };
                self.teardown(link, err, closed, now, out);
                Step::Closed
            }
            FrameAction::Process if l.retiring.is_some() => {
                Step::Process(self.successor(link).unwrap_or(link))
            }
            FrameAction::Process => Step::Process(link),
        }
    }

    /// Runs a received frame through its link's state machine, then routes it or hands it
    /// to the control plane; false when the link closed.
    fn on_frame(
        &mut self,
        slot: usize,
        link: LinkId,
        frame: Incoming,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) -> bool {
        let payload = match &frame {
            Incoming::Samples(_) => true,
            Incoming::Frame(f) => crate::link::Link::is_payload(f),
        };
        let step = self.link_step(slot, link, payload, now, out, |s, now| match &frame {
            Incoming::Samples(_) => s.on_samples(now),
            Incoming::Frame(f) => s.on_frame(f, now),
        });
        let link = match step {
            Step::Consumed => return true,
            Step::Closed => return false,
            Step::Discarded => {
                let lost = match &frame {
                    Incoming::Samples(s) | Incoming::Frame(Frame::Samples(s)) => s.count.into(),
                    Incoming::Frame(Frame::Data(_)) => 1,
                    Incoming::Frame(_) => 0,
                };
                add(&self.counters.dropped_link_closing, lost);
                return true;
            }
            Step::Process(from) => from,
        };
        match frame {
            Incoming::Frame(Frame::Data(d)) => self.route_in(link, d, now, out),
            Incoming::Samples(s) | Incoming::Frame(Frame::Samples(s)) => {
                self.route_samples_in(link, s, now, out)
            }
            Incoming::Frame(Frame::WriterHeartbeat(h)) => {
                self.reliable_in(link, RelFrame::Heartbeat(h), now, out)
            }
            Incoming::Frame(Frame::AckNack(a)) => {
                self.reliable_in(link, RelFrame::AckNack(a), now, out)
            }
            Incoming::Frame(Frame::Repair(r)) => {
                self.reliable_in(link, RelFrame::Repair(r), now, out)
            }
            Incoming::Frame(Frame::Gap(g)) => self.reliable_in(link, RelFrame::Gap(g), now, out),
            Incoming::Frame(Frame::Discovery(_))
                if self
                    .links
                    .at(slot)
                    .discovery_paused
                    .is_some_and(|t| now < t) =>
            {
                inc(&self.counters.dropped_discovery_over_budget);
            }
            Incoming::Frame(Frame::Discovery(d)) => out.push(ShardAction::Report {
                msg: ToControl::DiscoveryIn {
                    link,
                    frame: Box::new(d),
                },
                busy: IfBusy::Wait,
            }),
            Incoming::Frame(Frame::Membership(record)) => out.push(ShardAction::Report {
                msg: ToControl::MembershipIn { link, record },
                busy: IfBusy::Wait,
            }),
            Incoming::Frame(Frame::SignedMembership(record)) => out.push(ShardAction::Report {
                msg: ToControl::SignedMembershipIn {
                    link,
                    record: Box::new(record),
                },
                busy: IfBusy::Wait,
            }),
            Incoming::Frame(Frame::MembershipDigest(d)) => out.push(ShardAction::Report {
                msg: ToControl::DigestIn {
                    link,
                    digest: Box::new(d),
                },
                busy: IfBusy::Wait,
            }),
            Incoming::Frame(Frame::IdentityRecord(record)) if self.cfg.secure => {
                out.push(ShardAction::Report {
                    msg: ToControl::IdentityIn {
                        link,
                        record: Box::new(record),
                    },
                    busy: IfBusy::Wait,
                })
            }
            // AuthConfirm cannot pass an established link; a plaintext mesh has no
            // identity records to learn from.
            Incoming::Frame(_) => {}
        }
        true
    }

    /// A record did not open (or could not be sealed): the stream can no longer be trusted;
    /// only this link goes.
    pub(super) fn record_failure(
        &mut self,
        link: LinkId,
        message: String,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        inc(&self.counters.record_failures);
        let err = self.error(link, LinkFault::Crypto, message);
        self.teardown(link, err, None, now, out);
    }

    /// The buffer to read `link`'s next bytes into (appending) and how many bytes of room
    /// to make for them; `None` when the link is gone. Hand it back with
    /// [`on_read`](Self::on_read) or [`on_eof`](Self::on_eof).
    pub fn read_buffer(&mut self, link: LinkId) -> Option<(BytesMut, usize)> {
        let max = self.cfg.max_message_bytes;
        let l = self.links.get_mut(link)?;
        let (rest, buf) = match &mut l.rx {
            Rx::Plain(buf) => {
                let needed = match peek_frame_len(buf, max) {
                    Ok(DecodeStatus::NeedMore { needed }) => needed,
                    _ => 0,
                };
                (needed.saturating_sub(buf.len()), std::mem::take(buf))
            }
            Rx::Secure(rr) => (rr.pending_record_bytes(), rr.take_buffer()),
        };
        let want = read_room(rest, buf.len(), l.chunk);
        Some((buf, want))
    }

    /// `n > 0` bytes were read into `buf` (from [`read_buffer`](Self::read_buffer)); call
    /// [`read_frames`](Self::read_frames) next.
    pub fn on_read(&mut self, link: LinkId, buf: BytesMut, n: usize, now: Instant) {
        add(&self.counters.bytes_in, n as u64);
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        restore(&mut l.rx, buf);
        l.chunk = next_chunk(l.chunk, n);
        l.rested = l
            .last_read
            .is_some_and(|t| now.saturating_duration_since(t) >= READ_REST);
        l.last_read = Some(now);
        l.state.on_bytes_read(n, now);
    }

    /// True when `link`'s last read came [`READ_REST`] or more after the one before: the
    /// driver may then move what its read buffer holds out of a block kept from busier times.
    pub fn read_rested(&self, link: LinkId) -> bool {
        self.links.get(link).is_some_and(|l| l.rested)
    }

    /// The peer closed `link`'s connection; `buf` is what [`read_buffer`](Self::read_buffer)
    /// gave out. An error if it ended inside a frame or a record.
    pub fn on_eof(
        &mut self,
        link: LinkId,
        buf: BytesMut,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        restore(&mut l.rx, buf);
        if l.closing {
            // The peer closed after our FIN (see `on_write_shutdown`): whatever it left
            // unfinished was going to be discarded anyway.
            return self.teardown(link, None, None, now, out);
        }
        let partial = match &l.rx {
            Rx::Plain(buf) => buf.len(),
            Rx::Secure(rr) => match rr.finish() {
                Err(e) => return self.record_failure(link, e.to_string(), now, out),
                Ok(()) => rr.plaintext().len(),
            },
        };
        let err = (partial > 0).then(|| {
            inc(&self.counters.malformed_frames);
            let msg = format!("connection closed inside a frame ({partial} bytes of it received)");
            self.error(link, LinkFault::Malformed, msg)
        });
        self.teardown(link, err.flatten(), None, now, out);
    }
}

fn restore(rx: &mut Rx, buf: BytesMut) {
    match rx {
        Rx::Plain(b) => *b = buf,
        Rx::Secure(rr) => rr.restore_buffer(buf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::LinkBudget;
    use crate::cmd::{NewLink, ToShard};
    use crate::config::MeshConfig;
    use crate::shard::tests::{established, Record, ME, PA};
    use crate::shard::ShardConfig;
    use crate::wire::{Discovery, DiscoveryEntry, SampleRunWriter};
    use crate::PeerId;
    use bytes::Bytes;
    use std::sync::Arc;

    /// A shard core serving `link`, established, whose peer sent `bytes` after its Hello.
    fn core_reading(link: LinkId, bytes: &[u8], t0: Instant) -> ShardCore {
        let (me, peer) = (ME, PA);
        let state = established(link, peer, t0);
        let cfg = ShardConfig::new(me, &MeshConfig::default());
        let sink = Box::new(Record::default());
        let mut core = ShardCore::new(0, 1, cfg, Arc::default(), 7, t0, sink);
        let nl = NewLink {
            link,
            peer,
            conn: (),
            leftover: BytesMut::from(bytes),
            secure: None,
            state,
            budget: Arc::new(LinkBudget::new(1 << 20, t0)),
        };
        core.on_command(ToShard::AddLink(Box::new(nl)), t0, &mut Vec::new());
        core
    }

    /// Discovery frames go to the control plane whole; Samples frames, by either lane, reach
    /// the (for now counting) sample path; the link stays up.
    #[test]
    fn topic_frames_are_routed_by_kind() {
        let t0 = Instant::now();
        let link = LinkId(1);
        let d = Discovery {
            origin: PeerId([0xa; 16]),
            seq: 9,
            ttl: 4,
            cycle: 1,
            part: 0,
            parts: 1,
            entries: vec![DiscoveryEntry::Record(Bytes::from_static(b"record"))],
        };
        let mut bytes = BytesMut::new();
        d.encode(&mut bytes).unwrap();
        let mut w = SampleRunWriter::new(&mut bytes, [0xa; 16], 8, 1, 130);
        for _ in 0..3 {
            w.push(&[7; 40]).unwrap(); // two frames: 29 + 2 × 44 = 117 fits 130, a third not
        }
        assert_eq!(w.frames(), 2);
        drop(w);
        let mut core = core_reading(link, &bytes, t0);
        let mut out = Vec::new();
        assert_eq!(core.read_frames(link, t0, &mut out), ReadStep::NeedBytes);
        let reports: Vec<&Discovery> = out
            .iter()
            .filter_map(|a| match a {
                ShardAction::Report {
                    msg: ToControl::DiscoveryIn { link: l, frame },
                    busy: IfBusy::Wait,
                } if *l == link => Some(&**frame),
                _ => None,
            })
            .collect();
        assert_eq!(reports, vec![&d]);
        assert_eq!(out.len(), 1, "nothing else: {out:?}");
        let s = core.counters().snapshot();
        // No table names the writer yet: its two runs wait for one.
        assert_eq!((s.frames_in, s.sample_runs_parked), (3, 2));
        assert_eq!(core.served().collect::<Vec<_>>(), vec![link]);
    }

    /// A link whose work budget the control plane found spent: its Discovery frames are
    /// dropped on arrival (counted) until the pause ends, then handed over again; the link
    /// stays up.
    #[test]
    fn discovery_frames_of_a_paused_link_are_dropped_until_the_pause_ends() {
        let t0 = Instant::now();
        let link = LinkId(1);
        let frame = |seq: u64| {
            let d = Discovery {
                origin: PeerId([0xa; 16]),
                seq,
                ttl: 4,
                cycle: 0,
                part: 0,
                parts: 0,
                entries: vec![DiscoveryEntry::Record(Bytes::from_static(b"record"))],
            };
            let mut b = BytesMut::new();
            d.encode(&mut b).unwrap();
            b
        };
        let reported = |out: &[ShardAction]| {
            out.iter()
                .filter(|a| {
                    matches!(
                        a,
                        ShardAction::Report {
                            msg: ToControl::DiscoveryIn { .. },
                            ..
                        }
                    )
                })
                .count()
        };
        let mut core = core_reading(link, &frame(1), t0);
        let until = t0 + std::time::Duration::from_secs(1);
        core.on_command(
            ToShard::<()>::PauseDiscovery { link, until },
            t0,
            &mut Vec::new(),
        );
        let mut out = Vec::new();
        core.read_frames(link, t0, &mut out);
        assert_eq!(reported(&out), 0, "paused: dropped here");
        assert_eq!(core.counters().snapshot().dropped_discovery_over_budget, 1);
        let (mut buf, _) = core.read_buffer(link).unwrap();
        let next = frame(2);
        buf.extend_from_slice(&next);
        core.on_read(link, buf, next.len(), until);
        let mut out = Vec::new();
        core.read_frames(link, until, &mut out);
        assert_eq!(reported(&out), 1, "the pause is over");
        assert_eq!(core.served().collect::<Vec<_>>(), vec![link]);
    }

    /// A SignedMembership frame goes to the control plane whole (which verifies it), like
    /// Membership; the link stays.
    #[test]
    fn signed_membership_frames_go_to_the_control_plane() {
        let t0 = Instant::now();
        let link = LinkId(1);
        let m = crate::wire::SignedMembership {
            record: crate::wire::Membership {
                origin: PeerId([0xa; 16]),
                version: 3,
                neighbours: vec![PeerId([0xb; 16])],
            },
            signature: crate::wire::RecordSignature {
                key: [1; 32],
                sig: [2; 64],
            },
        };
        let mut bytes = BytesMut::new();
        Frame::SignedMembership(m.clone())
            .encode(&mut bytes)
            .unwrap();
        let mut core = core_reading(link, &bytes, t0);
        let mut out = Vec::new();
        assert_eq!(core.read_frames(link, t0, &mut out), ReadStep::NeedBytes);
        assert!(
            matches!(&out[..], [ShardAction::Report {
                msg: ToControl::SignedMembershipIn { link: l, record },
                busy: IfBusy::Wait,
            }] if *l == link && **record == m),
            "{out:?}"
        );
        assert_eq!(core.served().collect::<Vec<_>>(), vec![link]);
    }

    /// A malformed Samples frame, declined by the fast lane, is `take_frame`'s to reject: the
    /// link goes, counted as malformed.
    #[test]
    fn a_malformed_samples_frame_drops_the_link() {
        let t0 = Instant::now();
        let link = LinkId(1);
        let mut bytes = BytesMut::new();
        SampleRunWriter::new(&mut bytes, [0xa; 16], 8, 1, 100)
            .push(b"abc")
            .unwrap();
        bytes[6] = 0x01; // an unknown flag bit
        let mut core = core_reading(link, &bytes, t0);
        let mut out = Vec::new();
        assert_eq!(core.read_frames(link, t0, &mut out), ReadStep::Gone);
        let s = core.counters().snapshot();
        assert_eq!((s.malformed_frames, s.dropped_unrouted_samples), (1, 0));
        assert!(out.iter().any(|a| matches!(a, ShardAction::Error(_))));
        assert_eq!(core.served().count(), 0);
    }

    /// A MembershipDigest frame goes to the control plane; a malformed one (here a Summary
    /// with a byte after its digest) drops the link, counted as malformed.
    #[test]
    fn membership_digest_frames_go_up_and_a_malformed_one_drops_the_link() {
        let t0 = Instant::now();
        let link = LinkId(1);
        let d = crate::wire::MembershipDigest {
            legacy_hops: crate::wire::NO_LEGACY,
            count: 3,
            digest: 0x0123_4567_89ab_cdef,
            versions: None,
        };
        let mut bytes = BytesMut::new();
        Frame::MembershipDigest(d.clone())
            .encode(&mut bytes)
            .unwrap();
        let mut core = core_reading(link, &bytes, t0);
        let mut out = Vec::new();
        assert_eq!(core.read_frames(link, t0, &mut out), ReadStep::NeedBytes);
        assert!(
            matches!(&out[..], [ShardAction::Report {
                msg: ToControl::DigestIn { link: l, digest },
                busy: IfBusy::Wait,
            }] if *l == link && **digest == d),
            "{out:?}"
        );
        // The same frame with one byte more in its body (length prefix raised to match).
        let mut bad = BytesMut::from(&bytes[..]);
        bad.extend_from_slice(&[0]);
        let len = u32::from_be_bytes([bad[0], bad[1], bad[2], bad[3]]) + 1;
        bad[..4].copy_from_slice(&len.to_be_bytes());
        let mut core = core_reading(link, &bad, t0);
        let mut out = Vec::new();
        assert_eq!(core.read_frames(link, t0, &mut out), ReadStep::Gone);
        assert_eq!(core.counters().snapshot().malformed_frames, 1);
        assert!(out.iter().any(|a| matches!(a, ShardAction::Error(_))));
        assert_eq!(core.served().count(), 0);
    }

    #[test]
    fn read_buffers_grow_with_what_arrives_not_with_what_is_announced() {
        // A header announcing 16 MiB, then 5 bytes: one ordinary chunk.
        assert_eq!(read_room(16 << 20, 5, READ_CHUNK), READ_CHUNK);
        // A frame that fits a chunk gets a chunk.
        assert_eq!(read_room(1000, 300_000, READ_CHUNK), READ_CHUNK);
        // A large frame arriving for real: the room doubles what is buffered, up to the rest.
        assert_eq!(read_room(16 << 20, 1 << 20, READ_CHUNK), 1 << 20);
        assert_eq!(read_room(100_000, 1 << 20, READ_CHUNK), 100_000);
        // Receiving a 16 MiB frame up to 64 KiB per read (no more than the room) never
        // holds more than twice what arrived plus a chunk.
        let total = 16 << 20;
        let mut buffered = 0usize;
        let mut cap = 0usize;
        while buffered < total {
            let want = read_room(total - buffered, buffered, READ_CHUNK);
            if cap - buffered < want {
                cap = buffered + want;
            }
            assert!(cap <= 2 * buffered + READ_CHUNK, "{cap} for {buffered}");
            buffered += (64 << 10).min(cap - buffered).min(total - buffered);
        }
    }

    #[test]
    fn reads_grow_on_a_busy_link_and_shrink_on_an_idle_one() {
        let mut c = READ_CHUNK;
        for _ in 0..10 {
            c = next_chunk(c, c); // every read fills what was asked
        }
        assert_eq!(c, READ_CHUNK_MAX, "grows, never past the maximum");
        assert_eq!(next_chunk(c, c / 2), c, "a half-full read keeps the size");
        assert_eq!(
            next_chunk(c, 100),
            READ_CHUNK,
            "a small read shrinks it at once"
        );
        assert_eq!(next_chunk(READ_CHUNK, 10), READ_CHUNK);
    }
}
