//! Full mesh of SPSC rings between a set of executors.

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::notify::Notify;
use super::p2p::Sender;
use super::spsc::{Consumer, Ring};
use crate::error::{Closed, TryRecvError};
use crate::id::ExecutorId;

/// Builds a full mesh among `executors`: one ring of at least `capacity` messages per
/// ordered pair (from, to), from != to.
///
/// Returns one [`MeshEndpoint`] per executor, in the order of `executors`; move each into
/// its executor (e.g. with [`Runtime::spawn_on`](crate::Runtime::spawn_on)).
pub fn channel_mesh<T: Send>(executors: &[ExecutorId], capacity: usize) -> Vec<MeshEndpoint<T>> {
    let n = executors.len();
    let notifies: Vec<Arc<Notify>> = (0..n).map(|_| Arc::new(Notify::default())).collect();
    let mut senders: Vec<Vec<(ExecutorId, Sender<T>)>> = (0..n).map(|_| Vec::new()).collect();
    let mut incoming: Vec<Vec<(ExecutorId, Consumer<T>)>> = (0..n).map(|_| Vec::new()).collect();
    for (from, &from_id) in executors.iter().enumerate() {
        for (to, &to_id) in executors.iter().enumerate() {
            if from == to {
                continue;
            }
            let ring = Arc::new(Ring::new(capacity, notifies[to].clone()));
            senders[from].push((to_id, Sender::new(ring.clone())));
            incoming[to].push((from_id, Consumer::new(ring)));
        }
    }
    executors
        .iter()
        .zip(senders)
        .zip(incoming.into_iter().zip(notifies))
        .map(|((&id, senders), (rings, notify))| MeshEndpoint {
            id,
            senders,
            receiver: MeshReceiver::new(rings, notify),
        })
        .collect()
}

/// One executor's share of a mesh: senders to every other member and its receiver.
#[derive(Debug)]
pub struct MeshEndpoint<T> {
    id: ExecutorId,
    senders: Vec<(ExecutorId, Sender<T>)>,
    receiver: MeshReceiver<T>,
}

impl<T> MeshEndpoint<T> {
    /// The executor this endpoint belongs to.
    pub fn id(&self) -> ExecutorId {
        self.id
    }

    /// The sender towards `to`, or `None` if `to` is this endpoint's own executor or not
    /// a member of the mesh.
    pub fn sender(&mut self, to: ExecutorId) -> Option<&mut Sender<T>> {
        self.senders
            .iter_mut()
            .find(|(id, _)| *id == to)
            .map(|(_, s)| s)
    }

    /// The receiver draining every ring towards this executor.
    pub fn receiver(&mut self) -> &mut MeshReceiver<T> {
        &mut self.receiver
    }

    /// Splits into the senders (tagged by destination) and the receiver, so they can be
    /// owned by different tasks of the same executor.
    pub fn split(self) -> (Vec<(ExecutorId, Sender<T>)>, MeshReceiver<T>) {
        (self.senders, self.receiver)
    }
}

/// Receives from every other member of a mesh, fairly (round-robin across sources).
pub struct MeshReceiver<T> {
    fan: Fan<T>,
    notify: Arc<Notify>,
}

impl<T> std::fmt::Debug for MeshReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshReceiver")
            .field("sources", &self.fan.rings.len())
            .finish()
    }
}

impl<T> MeshReceiver<T> {
    /// A receiver of `rings`, all of which wake `notify`.
    pub(super) fn new(rings: Vec<(ExecutorId, Consumer<T>)>, notify: Arc<Notify>) -> Self {
        Self {
            fan: Fan { rings, next: 0 },
            notify,
        }
    }

    /// Takes one message without waiting, starting after the source served last.
    pub fn try_recv(&mut self) -> Result<(ExecutorId, T), TryRecvError> {
        match self.fan.pop_fair() {
            Some(m) => Ok(m),
            None if self.fan.all_closed() => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Waits for the next message from any source, with the id of its sender.
    /// `Closed` once every sender is gone and every ring drained.
    pub async fn recv(&mut self) -> Result<(ExecutorId, T), Closed> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Waits until something is queued, then moves up to `max` messages into `out`,
    /// taking at most `max / sources` (min 1) from one source per pass so that a busy
    /// source cannot starve the others. Returns how many were moved.
    pub async fn recv_batch(
        &mut self,
        out: &mut Vec<(ExecutorId, T)>,
        max: usize,
    ) -> Result<usize, Closed> {
        poll_fn(|cx| {
            let n = self.fan.drain(out, max);
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            match self.poll_recv(cx) {
                Poll::Ready(Ok(m)) => {
                    out.push(m);
                    Poll::Ready(Ok(1 + self.fan.drain(out, max.saturating_sub(1))))
                }
                Poll::Ready(Err(c)) => Poll::Ready(Err(c)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<(ExecutorId, T), Closed>> {
        if let Some(m) = self.fan.pop_fair() {
            return Poll::Ready(Ok(m));
        }
        self.notify.prepare_wait(cx.waker());
        if let Some(m) = self.fan.pop_fair() {
            self.notify.cancel_wait();
            return Poll::Ready(Ok(m));
        }
        if self.fan.all_closed() {
            self.notify.cancel_wait();
            return Poll::Ready(Err(Closed));
        }
        Poll::Pending
    }
}

impl<T> Drop for MeshReceiver<T> {
    fn drop(&mut self) {
        self.fan.close();
    }
}

/// The consumer ends of several rings into one receiver, drained round-robin so that a busy
/// source cannot starve the others. Its owner holds the [`Notify`] they all wake.
pub(super) struct Fan<T> {
    pub(super) rings: Vec<(ExecutorId, Consumer<T>)>,
    /// The source the next pass starts with.
    pub(super) next: usize,
}

impl<T> Fan<T> {
    /// Moves up to `max` messages into `out`, at most `max / sources` (min 1) from one source
    /// per pass, each source's in its order.
    pub(super) fn drain(&mut self, out: &mut Vec<(ExecutorId, T)>, max: usize) -> usize {
        let sources = self.rings.len();
        if sources == 0 || max == 0 {
            return 0;
        }
        let quantum = (max / sources).max(1);
        let mut n = 0;
        loop {
            let before = n;
            for k in 0..sources {
                let (id, rx) = &self.rings[(self.next + k) % sources];
                let mut taken = 0;
                while taken < quantum && n < max {
                    match rx.pop_quiet() {
                        Some(v) => {
                            out.push((*id, v));
                            taken += 1;
                            n += 1;
                        }
                        None => break,
                    }
                }
                if taken > 0 {
                    rx.release();
                }
            }
            self.next = (self.next + 1) % sources;
            if n == max || n == before {
                return n;
            }
        }
    }

    pub(super) fn pop_fair(&mut self) -> Option<(ExecutorId, T)> {
        let sources = self.rings.len();
        for k in 0..sources {
            let idx = (self.next + k) % sources;
            let (id, rx) = &self.rings[idx];
            if let Some(v) = rx.pop_quiet() {
                rx.release();
                self.next = (idx + 1) % sources;
                return Some((*id, v));
            }
        }
        None
    }

    /// Every sender gone and every ring drained.
    pub(super) fn all_closed(&self) -> bool {
        self.rings
            .iter()
            .all(|(_, rx)| rx.ring.tx_closed.load(Ordering::Acquire) && rx.is_empty())
    }

    /// The receiver leaves: senders see `Closed`, and one waiting for room wakes.
    pub(super) fn close(&self) {
        for (_, rx) in &self.rings {
            rx.ring.rx_closed.store(true, Ordering::Release);
            rx.ring.tx_notify.notify_always();
        }
    }
}
