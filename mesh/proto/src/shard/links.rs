//! The links a shard serves: their state, their lifecycle (attach, close, timers, teardown)
//! and the accounting of what a closing link loses.
//!
//! **Owns:** each served link's [`Link`] state machine, outbound queue, read and record state,
//! and the single exit of a link ([`ShardCore::teardown`]). **Must not touch:** routing (see
//! `fan_out`) or the bytes of reads and writes (see `read` and `write`).

use super::action::{IfBusy, LinkError, LinkFault, ShardAction};
use super::read::{Rx, READ_CHUNK};
use super::unacked::Ledger;
use super::write::{Taken, Tx};
use super::ShardCore;
use crate::budget::LinkBudget;
use crate::cmd::{NewLink, Out, ToControl};
use crate::crypto::RecordReader;
use crate::link::{CloseReason, Link, LinkEvent};
use crate::stats::{add, inc};
use crate::{LinkId, PeerId};
use ahash::AHashMap;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The grid the timers of a shard's links fire on: a link's deadline is rounded up to the
/// next multiple of this from the shard's start, so links due within the same grain are
/// served in one wake-up of the shard's thread instead of one each (issue 29: an idle node
/// of a 40-node full mesh woke for each of its links' timers). A heartbeat then goes out at
/// most this much after its interval, and a dead link is found at most this much after its
/// timeout; both are seconds. The timer does not poll: a Disconnect-policy kill wakes it
/// through [`LinkBudget::killed`].
pub const TIMER_GRAIN: Duration = Duration::from_millis(100);

/// Links that left a shard lately (replaced in its table by a dial race's winner, or torn
/// down) whose peers it remembers, for what was meant for them before they went (see
/// [`ShardCore::take_over`], and a Block wait's link in `unblock`).
pub(super) const GONE_REMEMBERED: usize = 64;

/// The state of dial-race hand-overs on a shard.
#[derive(Debug, Default)]
pub(super) struct Handover {
    /// Winners that took their loser's queue while the loser had a write in progress, as
    /// (loser, winner): the winner writes after that write (see `ShardCore::pass_queue`).
    pub(super) holding: Vec<(LinkId, LinkId)>,
    /// The last [`GONE_REMEMBERED`] links that left this shard (replaced in the table by a
    /// dial race's winner, or torn down here), with their peers.
    pub(super) gone: VecDeque<(LinkId, PeerId)>,
    /// Winners whose frames wait for their loser's end (see `race_order`).
    pub(super) behind: Vec<super::race_order::Behind>,
}

/// One link served by this shard.
#[derive(Debug)]
pub(super) struct Served {
    pub(super) id: LinkId,
    pub(super) peer: PeerId,
    pub(super) state: Link,
    pub(super) queue: VecDeque<Out>,
    pub(super) budget: Arc<LinkBudget>,
    /// Closing politely: the writer flushes the queue, then Goodbye; nothing more is queued.
    pub(super) closing: bool,
    /// A dial race's loser (`ToShard::Retire`), until then: read as the peer's installed
    /// link, nothing more queued on it (see [`ShardCore::take_over`]), closed politely when
    /// its peer sends on the winner or at this deadline, unless the peer closes it first.
    pub(super) retiring: Option<Instant>,
    /// A dial race's winner took this link's place in the table (its queue passed on): what
    /// another shard still routes here goes to the winner ([`ShardCore::take_over`]). The
    /// table says so too, but this saves a lookup per cross-shard frame; and retiring the
    /// link here already, ahead of the control plane's `Retire`, measured worse (it closes
    /// sooner, and a peer whose other shards have not switched yet loses frames: 1 of 60 and
    /// 2 of 100 loaded live runs, against 0 of 150).
    pub(super) replaced: bool,
    /// The reader waits on something other than its socket (event room, a hop): it is busy,
    /// not dead, so the timer refreshes its liveness.
    pub(super) stalled: bool,
    /// What the writer took off `queue` for the write in progress: lost with the link if it
    /// closes before the write completes (counted then, with what is still queued).
    pub(super) in_flight: Taken,
    pub(super) rx: Rx,
    /// The size of the next read (see `read::next_chunk`).
    pub(super) chunk: usize,
    /// When the last read completed, and whether it came after a quiet spell (see
    /// `read::READ_REST`).
    pub(super) last_read: Option<Instant>,
    pub(super) rested: bool,
    pub(super) tx: Tx,
    /// The writer found nothing to write and waits for `budget.wake` (see
    /// [`Served::wake_writer`]).
    pub(super) writer_idle: bool,
    /// Its Discovery frames are dropped here until then: the control plane found its work
    /// budget spent ([`crate::cmd::ToShard::PauseDiscovery`]).
    pub(super) discovery_paused: Option<Instant>,
    /// A frame this node originated was queued since the backlog's last look
    /// (`ShardCore::on_send_queue`): only an origin's link lags (`budget/lag.rs`).
    pub(super) originated: bool,
    /// The kernel's count of bytes its peer acknowledged, and the writes it holds that the
    /// peer has not acknowledged yet: lost if the link closes now (`unacked_link_closed`).
    pub(super) ledger: Ledger,
    /// The last look of the link's timer that found nothing of its writes in flight: a
    /// link whose peer acknowledges nothing new is judged from the later of this and the
    /// peer's last acknowledgement of new data (`Link::last_delivered`;
    /// `ShardCore::on_ack_sample`).
    pub(super) drained_at: Option<Instant>,
}

impl Served {
    /// Tells an idle writer that its queue has work. A writer that is not idle takes the
    /// queue when its write completes, so it is not notified: a notification is a SeqCst
    /// fence and a mutex in `event-listener`, which a busy link used to pay per frame read
    /// and per frame queued (`bench/benches/shard.rs`).
    pub(super) fn wake_writer(&mut self) {
        if std::mem::take(&mut self.writer_idle) {
            self.budget.wake.notify(1);
        }
    }

    /// Queues `o` (its bytes reserved on this link; `originated` by this node) and wakes the
    /// writer if idle.
    pub(super) fn push(&mut self, o: Out, originated: bool, now: Instant) {
        self.originated |= originated;
        self.queue.push_back(o);
        self.state.on_sent(now);
        self.wake_writer();
    }

    /// Moves the link state machine's control frames into the queue; returns a close reason
    /// if the state machine closed the link.
    pub(super) fn pull(&mut self) -> Option<CloseReason> {
        while let Some(f) = self.state.poll_transmit() {
            let mut b = BytesMut::with_capacity(f.encoded_len());
            if f.encode(&mut b).is_ok() {
                self.queue.push_back(Out::Raw(b.freeze(), 0, 0));
            }
        }
        let mut closed = None;
        while let Some(ev) = self.state.poll_event() {
            if let LinkEvent::Closed(r) = ev {
                closed = Some(r);
            }
        }
        if !self.queue.is_empty() {
            self.wake_writer();
        }
        closed
    }
}

/// The served links, in slots so a reader's batch finds its link once, not once per frame.
#[derive(Debug, Default)]
pub(super) struct Links {
    slots: Vec<Option<Served>>,
    free: Vec<usize>,
    index: AHashMap<LinkId, usize>,
}

impl Links {
    pub(super) fn insert(&mut self, l: Served) {
        let id = l.id;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(l);
                s
            }
            None => {
                self.slots.push(Some(l));
                self.slots.len() - 1
            }
        };
        self.index.insert(id, slot);
    }

    pub(super) fn remove(&mut self, id: LinkId) -> Option<Served> {
        let slot = self.index.remove(&id)?;
        self.free.push(slot);
        self.slots[slot].take()
    }

    pub(super) fn slot(&self, id: LinkId) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// The link in `slot` (from [`Links::slot`], with no removal since).
    pub(super) fn at(&mut self, slot: usize) -> &mut Served {
        self.slots[slot].as_mut().expect("a live slot")
    }

    pub(super) fn get(&self, id: LinkId) -> Option<&Served> {
        self.slots[*self.index.get(&id)?].as_ref()
    }

    pub(super) fn get_mut(&mut self, id: LinkId) -> Option<&mut Served> {
        self.slots[*self.index.get(&id)?].as_mut()
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.index.keys().copied()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

impl ShardCore {
    /// Starts serving a link; hands its connection back.
    pub(super) fn add_link<C>(&mut self, nl: NewLink<C>) -> (LinkId, C) {
        let NewLink {
            link,
            peer,
            conn,
            leftover,
            state,
            secure,
            budget,
        } = nl;
        let (rx, tx) = match secure {
            Some((sealer, opener)) => (
                Rx::Secure(RecordReader::new(opener, &leftover)),
                Tx::sealed(sealer),
            ),
            None => (Rx::Plain(leftover), Tx::plain()),
        };
        self.links.insert(Served {
            id: link,
            peer,
            state,
            queue: VecDeque::new(),
            budget,
            closing: false,
            retiring: None,
            replaced: false,
            stalled: false,
            in_flight: Taken::default(),
            rx,
            chunk: READ_CHUNK,
            last_read: None,
            rested: false,
            tx,
            writer_idle: false,
            discovery_paused: None,
            originated: false,
            ledger: Ledger::default(),
            drained_at: None,
        });
        inc(&self.counters.links_opened);
        tracing::debug!(shard = self.idx, ?link, %peer, "link attached");
        (link, conn)
    }

    /// `ToShard::Close`: flush, then Goodbye if asked, then close.
    pub(super) fn close(&mut self, link: LinkId, goodbye: bool, now: Instant) {
        if let Some(l) = self.links.get_mut(link) {
            l.state.close(goodbye, now);
            l.closing = true;
            l.retiring = None;
            l.budget.wake.notify(usize::MAX);
        }
    }

    /// `ToShard::Retire`: `link` lost a dial race and its peer is installed on another link.
    /// The peer resolves the race on its own, when its handshake of the winner ends, and
    /// sends on the loser until then; so the loser is not closed at once (the peer would see
    /// a Goodbye on its only link, and what it published before the winner came up would find
    /// no route): it is read on, as the winner, and closed politely as soon as the peer
    /// sends on the winner (the winner's hold, `race_order`), or at `retire_grace`, unless
    /// the peer closed it first.
    pub(super) fn retire(&mut self, link: LinkId, now: Instant) {
        let linger = self.cfg.retire_grace;
        if let Some(l) = self.links.get_mut(link).filter(|l| !l.closing) {
            l.retiring.get_or_insert(now + linger);
            if let Some(w) = self.successor(link) {
                self.order_behind(link, w);
            }
        }
    }

    /// The dial races' losers this shard still serves, retired and not closing yet.
    pub(super) fn retiring_links(&self) -> Vec<LinkId> {
        self.links
            .ids()
            .filter(|l| self.links.get(*l).is_some_and(|s| s.retiring.is_some()))
            .collect()
    }

    /// The writer of a closing `link` sent everything and its FIN. The socket stays open and
    /// read (what comes goes to the peer's other link, or is counted and dropped: the read
    /// path's `link_step`), until the peer closes its side (the reader's EOF tears
    /// the link down) or [`ShardConfig::close_linger`] passes: closing it now, with the
    /// peer's frames unread in it, would make the kernel reset the connection, and a reset
    /// peer discards what it had received but not read yet — the tail of a stream to a
    /// reader slower than its writer, with no counter saying so.
    ///
    /// [`ShardConfig::close_linger`]: super::ShardConfig::close_linger
    pub fn on_write_shutdown(&mut self, link: LinkId, now: Instant) {
        if self.links.get(link).is_some() && !self.lingering.iter().any(|(_, l)| *l == link) {
            self.lingering.push((now + self.cfg.close_linger, link));
        }
    }

    /// Tears down lingering links whose peer did not close in time.
    pub(super) fn linger_timeout(&mut self, now: Instant, out: &mut Vec<ShardAction>) {
        if self.lingering.is_empty() {
            return;
        }
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.lingering)
            .into_iter()
            .filter(|(_, l)| self.links.get(*l).is_some())
            .partition(|(t, _)| *t <= now);
        self.lingering = keep;
        for (_, link) in due {
            self.teardown(link, None, None, now, out);
        }
    }

    /// The link that takes over what was meant for `link`: its peer's installed link, when
    /// that is another open link served here (a dial race's winner; a peer's links all live
    /// on its owner shard).
    pub(super) fn successor(&self, link: LinkId) -> Option<LinkId> {
        self.successor_of(self.links.get(link)?.peer, link)
    }

    /// True while `link` is a winner waiting for the write in progress of the loser whose
    /// queue it took (see [`pass_queue`](Self::pass_queue)).
    pub(super) fn held_back(&self, link: LinkId) -> bool {
        self.handover.holding.iter().any(|(_, w)| *w == link)
    }

    /// `loser`'s write in progress is done (on the socket, or lost with the link): the
    /// winner that waited for it writes on.
    pub(super) fn release_held(&mut self, loser: LinkId) {
        let Some(i) = self.handover.holding.iter().position(|(l, _)| *l == loser) else {
            return;
        };
        let (_, winner) = self.handover.holding.swap_remove(i);
        if let Some(w) = self.links.get_mut(winner) {
            w.wake_writer();
        }
    }

    /// Remembers that `link`, to `peer`, left this shard (see [`GONE_REMEMBERED`]).
    pub(super) fn remember_gone(&mut self, link: LinkId, peer: PeerId) {
        if self.handover.gone.len() >= GONE_REMEMBERED {
            self.handover.gone.pop_front();
        }
        self.handover.gone.push_back((link, peer));
    }

    /// The link now installed for the peer of `link`, a link that left this shard lately
    /// (a dial race's loser): what was meant for the loser goes there.
    pub(super) fn installed_instead_of(&self, link: LinkId) -> Option<LinkId> {
        let peer = self.gone_peer(link)?;
        self.table.link_to(&peer).filter(|w| *w != link)
    }

    /// The peer of `link`, a link that left this shard lately.
    fn gone_peer(&self, link: LinkId) -> Option<PeerId> {
        let (_, peer) = self.handover.gone.iter().rev().find(|(g, _)| *g == link)?;
        Some(*peer)
    }

    /// `peer`'s installed link when it is an open link served here other than `link`.
    pub(super) fn successor_of(&self, peer: PeerId, link: LinkId) -> Option<LinkId> {
        self.table.link_to(&peer).filter(|w| {
            *w != link
                && self
                    .links
                    .get(*w)
                    .is_some_and(|w| !w.closing && w.retiring.is_none())
        })
    }

    /// Where bytes reserved on `link` (`n` of them) are to be queued: `link`, unless it is
    /// replaced, retiring, closing or gone (lately: [`GONE_REMEMBERED`]) and its peer has another
    /// open link here, which then holds the reservation. What another shard reserved on a
    /// dial race's loser before its table named the winner goes to the winner instead of
    /// being dropped, even once the loser is gone.
    pub(super) fn take_over(&mut self, link: LinkId, n: usize) -> LinkId {
        let peer = match self.links.get(link) {
            Some(l) if l.replaced || l.closing || l.retiring.is_some() => l.peer,
            Some(_) => return link,
            None => match self.gone_peer(link) {
                Some(peer) => peer,
                None => return link,
            },
        };
        let Some(w) = self.successor_of(peer, link) else {
            return link;
        };
        if !self.links.get(w).is_some_and(|w| w.budget.take_moved(n)) {
            return link;
        }
        if let Some(l) = self.links.get(link) {
            l.budget.release(n);
        }
        w
    }

    /// A dial race's winner `to` replaces `from` (both served here): what `from` still has
    /// queued goes to `to`, with its budget bytes, behind the little `to` holds (its first
    /// control frames) and ahead of everything routed to it from now on, and `to` writes
    /// nothing until `from`'s write in progress is on the socket (`holding`), so the stream
    /// leaves in the order it was sent. The loser keeps its own link frames
    /// (Heartbeat, Goodbye) and that write.
    pub(super) fn pass_queue(&mut self, from: LinkId, to: LinkId) {
        if self.links.get(to).is_none_or(|t| t.closing) {
            return;
        }
        if self.links.get(from).is_none() {
            return;
        }
        self.order_behind(from, to);
        let f = self.links.get_mut(from).expect("checked above");
        f.replaced = true;
        let (keep, moved): (VecDeque<Out>, VecDeque<Out>) = std::mem::take(&mut f.queue)
            .into_iter()
            .partition(|o| o.held() == 0);
        f.queue = keep;
        if moved.is_empty() {
            return;
        }
        let n: usize = moved.iter().map(Out::held).sum();
        f.budget.release(n);
        if f.in_flight.held > 0 {
            self.handover.holding.push((from, to));
        }
        let t = self.links.get_mut(to).expect("checked above");
        if !t.budget.take_moved(n) {
            let lost: u64 = moved.iter().map(Out::frames).sum();
            add(&self.counters.dropped_link_closed, lost);
            return;
        }
        t.queue.extend(moved);
        t.wake_writer();
    }

    /// `ToShard::SendRaw`: queues a control frame if the link's budget has room.
    pub(super) fn send_raw(&mut self, link: LinkId, frame: Bytes, now: Instant) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        let n = frame.len();
        if l.closing {
            inc(&self.counters.dropped_no_route);
        } else if l.budget.try_reserve(n).is_none() {
            inc(&self.counters.dropped_queue_full);
        } else {
            l.queue.push_back(Out::Raw(frame, n, 0));
            l.state.on_sent(now);
            l.wake_writer();
        }
    }

    /// The reader of `link` waits (`true`) on something other than its socket, or no longer.
    pub fn set_stalled(&mut self, link: LinkId, stalled: bool) {
        if let Some(l) = self.links.get_mut(link) {
            l.stalled = stalled;
        }
    }

    /// The budget of a served link (its writer waits on `wake`).
    pub fn link_budget(&self, link: LinkId) -> Option<Arc<LinkBudget>> {
        self.links.get(link).map(|l| l.budget.clone())
    }

    /// The connection of `link` is unusable: a read or write failed, the writer shut it down
    /// after the last flush, or the driver could not attach it. The link goes quietly.
    pub fn on_link_lost(&mut self, link: LinkId, now: Instant, out: &mut Vec<ShardAction>) {
        self.teardown(link, None, None, now, out);
    }

    /// When the link's timer should fire next (`None`: the link is gone or closed, the timer
    /// task ends).
    ///
    /// The deadline is on the shard's timer grid (see [`TIMER_GRAIN`]), never before `now`'s
    /// grid point: links due together fire together.
    pub fn link_timeout(&self, link: LinkId, now: Instant) -> Option<Instant> {
        let l = self.links.get(link)?;
        let d = l.state.poll_timeout()?;
        let d = l.retiring.map_or(d, |r| r.min(d));
        let d = match self.handover.behind.is_empty() {
            true => d,
            false => self.hold_deadline(link).map_or(d, |h| h.min(d)),
        };
        Some(crate::grid::on_grid(
            self.timer_epoch,
            d.max(now),
            TIMER_GRAIN,
        ))
    }

    /// The link's timer fired: heartbeat, liveness, a Disconnect-policy kill. False when the
    /// link is gone (the timer task ends).
    pub fn on_link_timer(
        &mut self,
        link: LinkId,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) -> bool {
        let Some(l) = self.links.get_mut(link) else {
            return false;
        };
        if l.budget.kill_requested() {
            self.slow_peer(link, now, out);
            return false;
        }
        if l.retiring.is_some_and(|t| t <= now) {
            // Its peer neither closed it nor sent on the winner: close it now.
            self.close(link, true, now);
            return true;
        }
        if !self.handover.behind.is_empty() {
            self.hold_timer(link, now, out);
        }
        let Some(l) = self.links.get_mut(link) else {
            return false;
        };
        if l.stalled {
            l.state.on_bytes_received(now);
        }
        l.state.handle_timeout(now);
        match l.pull() {
            Some(reason @ CloseReason::Stalled) => {
                inc(&self.counters.stalled_links);
                let e = self.error(link, LinkFault::Stalled, reason.to_string());
                self.teardown(link, e, Some(reason), now, out);
                false
            }
            Some(reason) if reason != CloseReason::Local => {
                tracing::info!(shard = self.idx, peer = %l.peer, %reason, "link closed");
                self.teardown(link, None, Some(reason), now, out);
                false
            }
            _ => true,
        }
    }

    /// Closes a link whose peer stayed blocked past the policy's limit.
    pub(super) fn slow_peer(&mut self, link: LinkId, now: Instant, out: &mut Vec<ShardAction>) {
        inc(&self.counters.slow_peer_disconnects);
        let msg = "peer stayed blocked past the policy's limit (slow link)".to_owned();
        let e = self.error(link, LinkFault::SlowPeer, msg);
        self.teardown(link, e, None, now, out);
    }

    /// An error about served `link`, naming its peer.
    pub(super) fn error(
        &self,
        link: LinkId,
        fault: LinkFault,
        message: String,
    ) -> Option<LinkError> {
        Some(LinkError {
            peer: self.links.get(link).map(|l| l.peer),
            fault,
            message,
        })
    }

    /// The single exit of a link: discards what is still queued or in flight (counted in
    /// `dropped_link_closed`) and what its kernel held unacknowledged (`unacked_link_closed`,
    /// as of the driver's last look), releases and closes the budget, and asks the driver to stop
    /// its tasks and to report the close to the control plane.
    pub(super) fn teardown(
        &mut self,
        link: LinkId,
        err: Option<LinkError>,
        reason: Option<CloseReason>,
        now: Instant,
        out: &mut Vec<ShardAction>,
    ) {
        let Some(mut l) = self.links.remove(link) else {
            return;
        };
        self.lingering.retain(|(_, x)| *x != link);
        self.remember_gone(link, l.peer);
        if !self.handover.holding.is_empty() {
            self.release_held(link);
        }
        if !self.handover.behind.is_empty() {
            self.race_link_ended(link, out);
        }
        let mut lost = std::mem::take(&mut l.in_flight);
        for o in l.queue.drain(..) {
            lost.add(&o);
        }
        add(&self.counters.dropped_link_closed, lost.frames);
        add(&self.counters.unacked_link_closed, l.ledger.unacked());
        l.budget.release(lost.held);
        l.budget.close();
        l.state.close(false, now);
        inc(&self.counters.links_closed);
        out.push(ShardAction::Ended(link, reason));
        if let Some(e) = err {
            tracing::warn!(shard = self.idx, peer = %l.peer, fault = ?e.fault, message = %e.message, "link closed on error");
            out.push(ShardAction::Error(e));
        }
        out.push(ShardAction::Report {
            msg: ToControl::LinkClosed { link },
            busy: IfBusy::Detach,
        });
        self.check_stopped(out);
    }
}
