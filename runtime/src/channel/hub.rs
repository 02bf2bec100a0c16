//! A hub and its members: a full mesh of SPSC rings among the members plus a ring from the hub
//! to each member and one from each member to the hub, each direction with its own message
//! type (`D` down from the hub, `U` up to it, `T` across between members).
//!
//! A member's [`MemberReceiver`] drains its ring from the hub and its rings from the other
//! members behind one [`Notify`], so one task waits for both kinds with one registration and
//! one fence when it parks, and a message of either kind wakes it. The hub's receiver is a
//! [`MeshReceiver`] of the members' up rings.
//!
//! **Order.** Each ring is FIFO. Across rings a member's batch keeps causality with the hub:
//! the receiver takes the members' rings first, then everything queued on the hub's ring, so a
//! hub message that was sent before a member message was sent (the member reacted to a later
//! message of the hub, say) is in the same batch as that member message or an earlier one. A
//! caller that handles a batch's hub messages before its member messages therefore never
//! handles a member message before a hub message it depends on.

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::mesh::{Fan, MeshReceiver};
use super::notify::Notify;
use super::p2p::Sender;
use super::spsc::{Consumer, Ring};
use crate::error::Closed;
use crate::id::ExecutorId;

/// Builds a hub and its members: one ring of at least `capacity` messages from `hub` to each
/// member (`D`), from each member to `hub` (`U`), and per ordered pair of distinct members
/// (`T`).
///
/// Returns the hub's endpoint and one [`MemberEndpoint`] per member, in the order of
/// `members`; move each into its executor (e.g. with
/// [`Runtime::spawn_on`](crate::Runtime::spawn_on)).
pub fn channel_hub<T: Send, D: Send, U: Send>(
    hub: ExecutorId,
    members: &[ExecutorId],
    capacity: usize,
) -> HubChannels<T, D, U> {
    let n = members.len();
    let hub_notify = Arc::new(Notify::default());
    let notifies: Vec<Arc<Notify>> = (0..n).map(|_| Arc::new(Notify::default())).collect();
    let mut across_tx: Vec<Vec<(ExecutorId, Sender<T>)>> = (0..n).map(|_| Vec::new()).collect();
    let mut across_rx: Vec<Vec<(ExecutorId, Consumer<T>)>> = (0..n).map(|_| Vec::new()).collect();
    for (from, &from_id) in members.iter().enumerate() {
        for (to, &to_id) in members.iter().enumerate() {
            if from == to {
                continue;
            }
            let ring = Arc::new(Ring::new(capacity, notifies[to].clone()));
            across_tx[from].push((to_id, Sender::new(ring.clone())));
            across_rx[to].push((from_id, Consumer::new(ring)));
        }
    }
    let mut down_tx = Vec::with_capacity(n);
    let mut up_rx = Vec::with_capacity(n);
    let mut ends = Vec::with_capacity(n);
    for ((&id, notify), (senders, rings)) in members
        .iter()
        .zip(notifies)
        .zip(across_tx.into_iter().zip(across_rx))
    {
        let down = Arc::new(Ring::new(capacity, notify.clone()));
        down_tx.push((id, Sender::new(down.clone())));
        let up = Arc::new(Ring::new(capacity, hub_notify.clone()));
        up_rx.push((id, Consumer::new(up.clone())));
        ends.push(MemberEndpoint {
            id,
            members: senders,
            hub: Sender::new(up),
            receiver: MemberReceiver {
                hub: Consumer::new(down),
                members: Fan { rings, next: 0 },
                notify,
            },
        });
    }
    let hub = HubEndpoint {
        id: hub,
        senders: down_tx,
        receiver: MeshReceiver::new(up_rx, hub_notify),
    };
    (hub, ends)
}

/// What [`channel_hub`] builds: the hub's endpoint and the members', in their order.
pub type HubChannels<T, D, U> = (HubEndpoint<D, U>, Vec<MemberEndpoint<T, D, U>>);

/// The hub's share: a sender to every member and the receiver of what they send up.
#[derive(Debug)]
pub struct HubEndpoint<D, U> {
    id: ExecutorId,
    senders: Vec<(ExecutorId, Sender<D>)>,
    receiver: MeshReceiver<U>,
}

impl<D, U> HubEndpoint<D, U> {
    /// The executor this endpoint belongs to.
    pub fn id(&self) -> ExecutorId {
        self.id
    }

    /// Splits into the senders (tagged by member) and the receiver, so they can be owned by
    /// different tasks of the hub's executor.
    pub fn split(self) -> (Vec<(ExecutorId, Sender<D>)>, MeshReceiver<U>) {
        (self.senders, self.receiver)
    }
}

/// One member's share: senders to the other members and to the hub, and its receiver.
#[derive(Debug)]
pub struct MemberEndpoint<T, D, U> {
    id: ExecutorId,
    members: Vec<(ExecutorId, Sender<T>)>,
    hub: Sender<U>,
    receiver: MemberReceiver<D, T>,
}

/// The parts of a [`MemberEndpoint`]: the senders to the other members (tagged by member), the
/// sender to the hub and the receiver.
pub type MemberParts<T, D, U> = (
    Vec<(ExecutorId, Sender<T>)>,
    Sender<U>,
    MemberReceiver<D, T>,
);

impl<T, D, U> MemberEndpoint<T, D, U> {
    /// The executor this endpoint belongs to.
    pub fn id(&self) -> ExecutorId {
        self.id
    }

    /// Splits into its parts, so they can be owned by different tasks of the same executor.
    pub fn split(self) -> MemberParts<T, D, U> {
        (self.members, self.hub, self.receiver)
    }
}

/// A member's receiver: what the hub sends down (`D`) and what the other members send (`T`),
/// behind one wake-up. Each ring is FIFO; across rings, a hub message sent before a member
/// message was sent is in that member message's batch or an earlier one.
pub struct MemberReceiver<D, T> {
    hub: Consumer<D>,
    members: Fan<T>,
    notify: Arc<Notify>,
}

impl<D, T> std::fmt::Debug for MemberReceiver<D, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberReceiver")
            .field("members", &self.members.rings.len())
            .finish()
    }
}

impl<D, T> MemberReceiver<D, T> {
    /// Waits until something is queued, then moves up to `max` members' messages into
    /// `from_members` (fairly, as [`MeshReceiver::recv_batch`]) and then every message queued
    /// by the hub into `from_hub` (at most its ring's capacity). Returns how many were moved;
    /// `Closed` once the hub and every member are gone and every ring drained.
    ///
    /// Handle `from_hub` first: a hub message sent before a member message in `from_members`
    /// was sent is in this batch or an earlier one.
    pub async fn recv_batch(
        &mut self,
        from_hub: &mut Vec<D>,
        from_members: &mut Vec<(ExecutorId, T)>,
        max: usize,
    ) -> Result<usize, Closed> {
        poll_fn(|cx| self.poll_batch(cx, from_hub, from_members, max)).await
    }

    fn poll_batch(
        &mut self,
        cx: &mut Context<'_>,
        from_hub: &mut Vec<D>,
        from_members: &mut Vec<(ExecutorId, T)>,
        max: usize,
    ) -> Poll<Result<usize, Closed>> {
        let n = self.take(from_hub, from_members, max);
        if n > 0 {
            return Poll::Ready(Ok(n));
        }
        self.notify.prepare_wait(cx.waker());
        let n = self.take(from_hub, from_members, max);
        if n > 0 {
            self.notify.cancel_wait();
            return Poll::Ready(Ok(n));
        }
        if self.all_closed() {
            self.notify.cancel_wait();
            return Poll::Ready(Err(Closed));
        }
        Poll::Pending
    }

    /// Members first, then the hub's whole ring: the order that keeps causality (module docs).
    fn take(
        &mut self,
        from_hub: &mut Vec<D>,
        from_members: &mut Vec<(ExecutorId, T)>,
        max: usize,
    ) -> usize {
        let mut n = self.members.drain(from_members, max);
        let before = n;
        while let Some(v) = self.hub.pop_quiet() {
            from_hub.push(v);
            n += 1;
        }
        if n > before {
            self.hub.release();
        }
        n
    }

    fn all_closed(&self) -> bool {
        self.hub.ring.tx_closed.load(Ordering::Acquire)
            && self.hub.is_empty()
            && self.members.all_closed()
    }
}

impl<D, T> Drop for MemberReceiver<D, T> {
    fn drop(&mut self) {
        self.hub.ring.rx_closed.store(true, Ordering::Release);
        self.hub.ring.tx_notify.notify_always();
        self.members.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    const HUB: ExecutorId = ExecutorId::Control;
    const A: ExecutorId = ExecutorId::Shard(0);
    const B: ExecutorId = ExecutorId::Shard(1);

    type Parts = MemberParts<&'static str, u32, char>;

    fn two_members() -> (HubEndpoint<u32, char>, Parts, Parts) {
        let (hub, mut ends) = channel_hub::<&'static str, u32, char>(HUB, &[A, B], 4);
        let b = ends.pop().unwrap();
        let a = ends.pop().unwrap();
        assert_eq!((hub.id(), a.id(), b.id()), (HUB, A, B));
        (hub, a.split(), b.split())
    }

    #[test]
    fn a_hub_message_sent_first_comes_no_later_than_a_member_message_sent_after_it() {
        let (hub, (mut a_tx, _a_up, _a_rx), (_b_tx, _b_up, mut b_rx)) = two_members();
        let (mut down, _) = hub.split();
        // The hub tells B, then A; A reacts with a message to B. `max` 1 leaves room for one
        // member message only, yet the hub's earlier message comes along.
        down[1].1.try_send(7).unwrap();
        down[0].1.try_send(8).unwrap();
        a_tx[0].1.try_send("after 7").unwrap();
        let (mut from_hub, mut from_members) = (Vec::new(), Vec::new());
        let n = b_rx
            .recv_batch(&mut from_hub, &mut from_members, 1)
            .now_or_never()
            .unwrap();
        assert_eq!(n, Ok(2));
        assert_eq!(from_hub, [7]);
        assert_eq!(from_members, [(A, "after 7")]);
    }

    #[test]
    fn max_bounds_the_members_and_the_hub_ring_is_drained_whole() {
        let (hub, (mut a_tx, _a_up, _a_rx), (_b_tx, _b_up, mut b_rx)) = two_members();
        let (mut down, _) = hub.split();
        for i in 0..4 {
            down[1].1.try_send(i).unwrap();
            a_tx[0].1.try_send("x").unwrap();
        }
        let (mut from_hub, mut from_members) = (Vec::new(), Vec::new());
        let n = b_rx
            .recv_batch(&mut from_hub, &mut from_members, 2)
            .now_or_never()
            .unwrap();
        assert_eq!(n, Ok(6));
        assert_eq!(from_hub, [0, 1, 2, 3]);
        assert_eq!(from_members.len(), 2);
    }

    #[test]
    fn each_direction_has_its_type_and_closes_when_its_senders_go() {
        let (hub, (a_tx, mut a_up, a_rx), (b_tx, _b_up, mut b_rx)) = two_members();
        let (down, mut up) = hub.split();
        a_up.try_send('r').unwrap();
        assert_eq!(up.try_recv(), Ok((A, 'r')));
        drop((a_tx, a_up, a_rx));
        let (mut from_hub, mut from_members) = (Vec::new(), Vec::new());
        let pending = b_rx
            .recv_batch(&mut from_hub, &mut from_members, 8)
            .now_or_never();
        assert!(pending.is_none(), "the hub still holds its sender to B");
        drop(down);
        let closed = b_rx
            .recv_batch(&mut from_hub, &mut from_members, 8)
            .now_or_never();
        assert_eq!(closed, Some(Err(Closed)));
        drop(b_tx);
    }
}
