//! State shared by the executors of one node and its API handle, and the channel helpers.
//!
//! **Owns:** what the executors and the application threads share: channels, snapshots, counters.
//! **Must not touch:** decisions.

use super::event::EventHub;
use super::stats::Counters;
use crate::config::MeshConfig;
use crate::crypto::SecureContext;
use crate::PeerId;
use futures_util::lock::Mutex as AsyncMutex;
use shoal_proto::{LinkBudget, OverflowPolicy, SlowLinkPolicy};
use shoal_runtime::channel::Sender;
use shoal_runtime::{ExecutorId, TrySendError};
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Instant;

/// What the control plane hands out for the query methods of [`crate::Mesh`].
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) connected: Vec<PeerId>,
    /// The installed links of the connected peers, with their record suites.
    pub(crate) links: Vec<shoal_proto::control::LinkInfo>,
    pub(crate) known: Vec<PeerId>,
    pub(crate) members: Vec<PeerId>,
    /// Budgets of the installed links (for the non-waiting `try_*` checks).
    pub(crate) budgets: Vec<Arc<LinkBudget>>,
    /// The topics core's view (`Mesh::topics`), replaced whole when it changed.
    pub(crate) topics: Option<Arc<shoal_proto::topics::TopicsView>>,
}

/// The control plane's [`Snapshot`], for the query methods (which lock it) and for the
/// non-waiting publish calls, which check the link budgets without taking the lock: each
/// thread keeps its own copy of a node's budget list and takes the lock only to refresh that
/// copy after the control plane has replaced the snapshot (links come and go; messages do not
/// change the list).
pub(crate) struct SnapshotCell {
    /// Process-unique, so a thread's copies of several nodes never mix.
    node: u64,
    /// Bumped with every replacement of `snap`, while its lock is held.
    generation: AtomicU64,
    snap: Mutex<Snapshot>,
}

/// Exclusive access to a [`SnapshotCell`]'s snapshot; dropping it announces the change to the
/// threads' budget copies.
pub(crate) struct SnapshotGuard<'a> {
    cell: &'a SnapshotCell,
    snap: MutexGuard<'a, Snapshot>,
}

impl Deref for SnapshotGuard<'_> {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        &self.snap
    }
}

impl DerefMut for SnapshotGuard<'_> {
    fn deref_mut(&mut self) -> &mut Snapshot {
        &mut self.snap
    }
}

impl Drop for SnapshotGuard<'_> {
    fn drop(&mut self) {
        // Before `snap` unlocks (fields drop after this body): a thread refreshing its copy
        // under the lock reads a generation and budgets that belong together.
        self.cell.generation.fetch_add(1, Ordering::Release);
    }
}

/// Nodes whose budget lists one thread keeps (an application rarely publishes to more nodes
/// from one thread); past that the oldest copy goes.
const CACHED_NODES: usize = 8;

/// One thread's copy of one node's link budgets.
struct BudgetCopy {
    node: u64,
    generation: u64,
    budgets: Vec<Arc<LinkBudget>>,
}

thread_local! {
    static BUDGET_COPIES: RefCell<Vec<BudgetCopy>> = const { RefCell::new(Vec::new()) };
}

impl SnapshotCell {
    pub(crate) fn new() -> SnapshotCell {
        static NEXT_NODE: AtomicU64 = AtomicU64::new(0);
        SnapshotCell {
            node: NEXT_NODE.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            snap: Mutex::new(Snapshot::default()),
        }
    }

    /// Locks the snapshot (a poisoned lock is recovered: the snapshot is replaced whole, never
    /// left half-written). `Err` never happens; the shape is `Mutex::lock`'s.
    pub(crate) fn lock(&self) -> Result<SnapshotGuard<'_>, PoisonError<()>> {
        let snap = self.snap.lock().unwrap_or_else(|e| e.into_inner());
        Ok(SnapshotGuard { cell: self, snap })
    }

    /// Reads the snapshot under its lock (the query methods).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Snapshot) -> T) -> T {
        f(&self.snap.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether some installed link's outbound queue has no room for `bytes` now. Reads this
    /// thread's copy of the budget list: one atomic load and no lock unless the control plane
    /// replaced the snapshot since this thread last looked.
    pub(crate) fn any_link_full_for(&self, bytes: usize) -> bool {
        let now = self.generation.load(Ordering::Acquire);
        let full = |budgets: &[Arc<LinkBudget>]| budgets.iter().any(|b| b.is_full_for(bytes));
        BUDGET_COPIES
            .try_with(|copies| {
                let mut copies = copies.borrow_mut();
                let i = match copies.iter().position(|c| c.node == self.node) {
                    Some(i) => i,
                    None => {
                        if copies.len() == CACHED_NODES {
                            copies.remove(0);
                        }
                        copies.push(BudgetCopy {
                            node: self.node,
                            generation: now.wrapping_sub(1),
                            budgets: Vec::new(),
                        });
                        copies.len() - 1
                    }
                };
                let copy = &mut copies[i];
                if copy.generation != now {
                    let snap = self.snap.lock().unwrap_or_else(|e| e.into_inner());
                    copy.generation = self.generation.load(Ordering::Relaxed);
                    copy.budgets.clone_from(&snap.budgets);
                }
                full(&copy.budgets)
            })
            // This thread is exiting (a publisher dropped by a thread-local destructor).
            .unwrap_or_else(|_| self.read(|s| full(&s.budgets)))
    }
}

/// Node-wide, thread-safe state. Nothing on the path of a message locks it: the shards touch
/// their own counters (atomics) and the event hub; the non-waiting publish calls read link
/// budgets from a per-thread copy (see [`SnapshotCell`]).
pub(crate) struct NodeShared {
    pub(crate) me: PeerId,
    pub(crate) cfg: MeshConfig,
    pub(crate) policy: OverflowPolicy,
    pub(crate) slow_link: SlowLinkPolicy,
    /// [`super::NodeOptions::record_bytes`].
    pub(crate) record_bytes: usize,
    pub(crate) shards: usize,
    /// One set per shard, then the control plane's.
    pub(crate) counters: Vec<Arc<Counters>>,
    pub(crate) hub: Arc<EventHub>,
    pub(crate) snapshot: SnapshotCell,
    pub(crate) connected: AtomicUsize,
    pub(crate) stopping: AtomicBool,
    /// Messages of [`super::Publisher`]s dropped on an executor thread with no room to hand
    /// them over (the only counter application threads write).
    pub(crate) unflushed_discarded: AtomicU64,
    /// Shard tasks that panicked (contained; see [`super::shard_task`]).
    pub(crate) shard_task_panics: AtomicU64,
    /// Time shard tasks spent in their polls, µs, and the polls of at least
    /// `shard_task::LONG_POLL` (a task hogging its shard shows there).
    pub(crate) shard_task_busy_us: AtomicU64,
    pub(crate) shard_task_long_polls: AtomicU64,
    /// The other shards hand their deliveries to the origin shard's inbox (see
    /// `shard::forward`).
    pub(crate) forwarding: super::shard::forward::Forwarding,
    pub(crate) epoch: Instant,
    /// Secured mesh: the handshake context. Replaced (never mutated) when the trust policy
    /// changes; a handshake keeps the context it started with and is re-checked at the end.
    pub(crate) secure: Option<RwLock<Arc<SecureContext>>>,
    /// Raised after [`secure`](Self::secure) was replaced: the control plane's timer wakes
    /// and hands the new context to the core (it polls for nothing: an idle node's control
    /// thread sleeps until the core's next deadline).
    pub(crate) trust_changed: event_listener::Event,
    /// Signed names of identity nodes: verified neighbours and gossiped identity records
    /// (bounded: entries leave with their member).
    pub(crate) names: Mutex<ahash::AHashMap<PeerId, Box<str>>>,
    /// The topics core's discovery counters as of the control plane's last step (apart from
    /// the snapshot: they change with every Discovery frame, the snapshot's lists do not).
    pub(crate) discovery_stats: Mutex<shoal_proto::topics::DiscoveryStats>,
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

/// What [`Lane::offer`] did.
pub(crate) enum Offer<T> {
    /// Queued.
    Sent,
    /// The receiving executor is gone; the message is handed back.
    Gone(T),
    /// No room now (or another task of this executor is waiting to send there).
    Busy(T),
}

/// One executor's sender towards one other executor. Several tasks of the executor share it;
/// the async mutex keeps a waiting send from interleaving with another.
pub(crate) struct Lane<T>(Rc<AsyncMutex<Sender<T>>>);

impl<T> Clone for Lane<T> {
    fn clone(&self) -> Self {
        Lane(self.0.clone())
    }
}

impl<T> Lane<T> {
    pub(crate) fn new(tx: Sender<T>) -> Lane<T> {
        Lane(Rc::new(AsyncMutex::new(tx)))
    }

    /// Sends `msg` if there is room now; hands it back otherwise, so the caller can wait
    /// (see [`Lane::send`]) only when it must.
    pub(crate) fn offer(&self, msg: T) -> Offer<T> {
        let Some(mut g) = self.0.try_lock() else {
            return Offer::Busy(msg);
        };
        match g.try_send(msg) {
            Ok(()) => Offer::Sent,
            Err(TrySendError::Closed(m)) => Offer::Gone(m),
            Err(TrySendError::Full(m)) => Offer::Busy(m),
        }
    }

    /// Sends `msg`, waiting for room. False if the receiver is gone.
    pub(crate) async fn send(&self, msg: T) -> bool {
        self.send_or_return(msg).await.is_ok()
    }

    /// [`send`](Self::send), handing `msg` back if the receiver is gone.
    pub(crate) async fn send_or_return(&self, msg: T) -> Result<(), T> {
        let mut msg = msg;
        if let Some(mut g) = self.0.try_lock() {
            match g.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(m)) => return Err(m),
                Err(TrySendError::Full(m)) => msg = m,
            }
        }
        let mut g = self.0.lock().await;
        g.send(msg).await.map_err(|e| e.0)
    }
}

/// One executor's lanes to the shards, by shard index.
pub(crate) struct ShardLanes<T> {
    lanes: Vec<Option<Lane<T>>>,
}

impl<T> ShardLanes<T> {
    /// The lanes of `list` (senders tagged by shard) among `shards` shards.
    pub(crate) fn new(list: Vec<(ExecutorId, Sender<T>)>, shards: usize) -> ShardLanes<T> {
        let mut lanes: Vec<Option<Lane<T>>> = (0..shards).map(|_| None).collect();
        for (id, tx) in list {
            if let ExecutorId::Shard(i) = id {
                lanes[i] = Some(Lane::new(tx));
            }
        }
        ShardLanes { lanes }
    }

    /// [`Lane::offer`] to shard `to`; `Gone` if this executor has no lane there.
    pub(crate) fn offer(&self, to: usize, msg: T) -> Offer<T> {
        match self.lanes.get(to).and_then(|l| l.as_ref()) {
            Some(l) => l.offer(msg),
            None => Offer::Gone(msg),
        }
    }

    /// [`Lane::send`] to shard `to`.
    pub(crate) async fn send(&self, to: usize, msg: T) -> bool {
        self.send_or_return(to, msg).await.is_ok()
    }

    /// [`Lane::send_or_return`] to shard `to`.
    pub(crate) async fn send_or_return(&self, to: usize, msg: T) -> Result<(), T> {
        match self.lanes.get(to).and_then(|l| l.clone()) {
            Some(l) => l.send_or_return(msg).await,
            None => Err(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A link budget of 100 bytes with 80 queued: full for 50 more.
    fn busy_link() -> Arc<LinkBudget> {
        let b = Arc::new(LinkBudget::new(100, Instant::now()));
        assert!(b.try_reserve(80).is_some());
        b
    }

    fn install(cell: &SnapshotCell, budgets: Vec<Arc<LinkBudget>>) {
        if let Ok(mut s) = cell.lock() {
            *s = Snapshot {
                budgets,
                ..Snapshot::default()
            };
        }
    }

    #[test]
    fn budget_copies_follow_every_replacement_and_never_mix_nodes() {
        let (a, b) = (SnapshotCell::new(), SnapshotCell::new());
        assert!(!a.any_link_full_for(50));
        install(&a, vec![busy_link()]);
        assert!(
            a.any_link_full_for(50),
            "the copy is refreshed after a replacement"
        );
        assert!(!a.any_link_full_for(10), "80 + 10 fits in 100");
        assert!(!b.any_link_full_for(50), "another node's copy is its own");
        install(&a, Vec::new());
        assert!(
            !a.any_link_full_for(50),
            "a removed link is no longer checked"
        );
        install(&b, vec![busy_link()]);
        std::thread::scope(|s| {
            s.spawn(|| assert!(b.any_link_full_for(50), "another thread sees it too"));
        });
    }

    #[test]
    fn checking_budgets_takes_no_lock_once_the_copy_is_current() {
        let cell = SnapshotCell::new();
        install(&cell, vec![busy_link()]);
        let (ask, asked) = mpsc::channel::<()>();
        let (tell, told) = mpsc::channel();
        std::thread::scope(|s| {
            let cell = &cell;
            s.spawn(move || {
                // The first check takes this thread's copy.
                tell.send(cell.any_link_full_for(50)).unwrap();
                while asked.recv().is_ok() {
                    tell.send(cell.any_link_full_for(50)).unwrap();
                }
            });
            assert!(told.recv().unwrap());
            // Holding the snapshot's lock (as the control plane does while it replaces the
            // snapshot) must not stop a publisher from checking.
            let held = cell.snap.lock().unwrap();
            ask.send(()).unwrap();
            let answer = told.recv_timeout(Duration::from_secs(30));
            drop(held);
            drop(ask);
            assert_eq!(answer, Ok(true), "the check waited for the snapshot lock");
        });
    }
}
