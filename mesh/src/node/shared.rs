//! State shared by the executors of one node and its API handle, and the channel helpers.

use super::event::EventHub;
use super::msg::Msg;
use super::stats::Counters;
use crate::config::MeshConfig;
use crate::crypto::SecureContext;
use crate::PeerId;
use futures_util::lock::Mutex as AsyncMutex;
use shoal_proto::{LinkBudget, OverflowPolicy, SlowLinkPolicy};
use shoal_runtime::channel::Sender;
use shoal_runtime::{ExecutorId, TrySendError};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// What the control plane publishes for the query methods of [`crate::Mesh`].
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) connected: Vec<PeerId>,
    pub(crate) known: Vec<PeerId>,
    pub(crate) members: Vec<PeerId>,
    /// Budgets of the installed links (for the non-waiting `try_*` checks).
    pub(crate) budgets: Vec<Arc<LinkBudget>>,
}

/// Node-wide, thread-safe state. Nothing on the message path locks it: the shards only touch
/// their own counters (atomics) and the event hub.
pub(crate) struct NodeShared {
    pub(crate) me: PeerId,
    pub(crate) cfg: MeshConfig,
    pub(crate) policy: OverflowPolicy,
    pub(crate) slow_link: SlowLinkPolicy,
    pub(crate) shards: usize,
    /// One set per shard, then the control plane's.
    pub(crate) counters: Vec<Counters>,
    pub(crate) hub: Arc<EventHub>,
    pub(crate) snapshot: Mutex<Snapshot>,
    pub(crate) connected: AtomicUsize,
    pub(crate) stopping: AtomicBool,
    /// Messages of [`super::Publisher`]s dropped on an executor thread with no room to hand
    /// them over (the only counter application threads write).
    pub(crate) unflushed_discarded: AtomicU64,
    pub(crate) epoch: Instant,
    /// Secured mesh: the handshake context. Replaced (never mutated) when the trust policy
    /// changes; a handshake keeps the context it started with and is re-checked at the end.
    pub(crate) secure: Option<RwLock<Arc<SecureContext>>>,
    /// Signed names of identity nodes: verified neighbours and gossiped identity records
    /// (bounded: entries leave with their member).
    pub(crate) names: Mutex<ahash::AHashMap<PeerId, Box<str>>>,
}

impl NodeShared {
    /// The current secure context (`None` in a plaintext mesh).
    pub(crate) fn secure_ctx(&self) -> Option<Arc<SecureContext>> {
        self.secure
            .as_ref()
            .map(|l| l.read().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Records (`Some`) or forgets (`None`) the signed name of identity node `id`.
    pub(crate) fn set_name(&self, id: PeerId, name: Option<&str>) {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        match name {
            Some(n) => names.insert(id, n.into()),
            None => names.remove(&id),
        };
    }

    pub(crate) fn control_counters(&self) -> &Counters {
        &self.counters[self.shards]
    }
}

/// Slot of an executor in per-executor vectors: shards first, then the control plane.
pub(crate) fn slot(id: ExecutorId, shards: usize) -> usize {
    match id {
        ExecutorId::Shard(i) => i,
        ExecutorId::Control => shards,
    }
}

/// What [`Channels::offer`] did.
pub(crate) enum Offer {
    /// Queued.
    Sent,
    /// The receiving executor is gone; the message is dropped.
    Gone,
    /// No room now (or another task of this executor is waiting to send there).
    Busy(Msg),
}

/// One executor's senders to every other executor. Several tasks of the executor share them;
/// the async mutex keeps a waiting send from interleaving with another.
pub(crate) struct Channels {
    senders: Vec<Option<Rc<AsyncMutex<Sender<Msg>>>>>,
}

impl Channels {
    pub(crate) fn new(list: Vec<(ExecutorId, Sender<Msg>)>, shards: usize) -> Channels {
        let mut senders: Vec<Option<Rc<AsyncMutex<Sender<Msg>>>>> =
            (0..=shards).map(|_| None).collect();
        for (id, s) in list {
            senders[slot(id, shards)] = Some(Rc::new(AsyncMutex::new(s)));
        }
        Channels { senders }
    }

    /// Sends `msg` to executor slot `to` if there is room now; hands it back otherwise, so the
    /// caller can wait (see [`Channels::send`]) only when it must.
    pub(crate) fn offer(&self, to: usize, msg: Msg) -> Offer {
        let Some(s) = self.senders.get(to).and_then(|s| s.as_ref()) else {
            return Offer::Gone;
        };
        let Some(mut g) = s.try_lock() else {
            return Offer::Busy(msg);
        };
        match g.try_send(msg) {
            Ok(()) => Offer::Sent,
            Err(TrySendError::Closed(_)) => Offer::Gone,
            Err(TrySendError::Full(m)) => Offer::Busy(m),
        }
    }

    /// Sends `msg` to executor slot `to`, waiting for room. False if `to` is gone.
    pub(crate) async fn send(&self, to: usize, msg: Msg) -> bool {
        let Some(s) = self.senders.get(to).and_then(|s| s.clone()) else {
            return false;
        };
        let mut msg = msg;
        if let Some(mut g) = s.try_lock() {
            match g.try_send(msg) {
                Ok(()) => return true,
                Err(TrySendError::Closed(_)) => return false,
                Err(TrySendError::Full(m)) => msg = m,
            }
        }
        let mut g = s.lock().await;
        g.send(msg).await.is_ok()
    }
}
