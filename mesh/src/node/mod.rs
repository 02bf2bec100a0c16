//! The live mesh node: the protocol state machines of [`crate::proto`] driven on the
//! thread-per-core runtime (`shoal-runtime`), behind the application API [`Mesh`].
//!
//! **Owns:** the live node and its application API. **Must not touch:** protocol decisions: they
//! are in `shoal_proto`'s cores.
//!
//! # Threading model
//!
//! A started [`Mesh`] owns one runtime: `shards` data-shard executors (1 by default) and one
//! control-plane executor, each a thread with its own io_uring. None is pinned unless
//! [`MeshBuilder::pin_to_cpus`] asks; then the shards take the listed CPUs in turn and the
//! control plane the last one.
//!
//! - **Control plane**: the TCP listener, dialing and reconnecting (the peer table), the Hello
//!   exchange of every new connection, membership, multicast scouting, the query snapshots:
//!   `node/control/` drives `shoal_proto::control::ControlCore`, which takes every decision.
//!   An established connection is detached and handed, with the bytes that followed the
//!   peer's Hello, to its **data shard** `link_shard(peer, shards)`.
//! - **Data shards**: each serves the links it owns (reads, batched vectored writes, heartbeat
//!   and liveness) and owns the dedup state of the originators that hash to it (same hash). A
//!   message that arrives straight from its originator is deduplicated and routed without
//!   leaving its shard; only relayed traffic hops to the owning shard, over the runtime's
//!   lock-free channels. The control plane pushes routing tables (neighbour → link → shard);
//!   no shard asks it anything on the message path.
//! - **Application threads** enter through a bounded ingress queue into the shard that owns
//!   this node's own id, which originates every message (ids, fan-out). A [`Publisher`]
//!   hands over whole batches of encoded frames instead (one ingress entry per batch, routed
//!   once, queued on each link as one buffer); the ingress bounds the messages it holds, not
//!   its entries, so batches run no further ahead than single messages.
//!
//! **Locks.** No lock is shared between shards, and Shoal's own code takes none on the path
//! of a message: rings, queues, budgets and counters are atomics. The non-waiting publish
//! calls read link budgets from a per-thread copy (`SnapshotCell` in `shared.rs`; its lock is
//! taken only to refresh the copy after a link came or went). The lock a message does meet is
//! the short `std` mutex of `event-listener`'s wait list, which that crate takes on every
//! notify: the origin shard once per batch it drains from the ingress (waking publishers that
//! wait for room), a shard once per batch of Message events it hands to the event queue, an
//! [`EventReceiver`] once per queue entry it takes, and any thread that goes to sleep on one
//! of them. It is uncontended unless a thread is registering to sleep at that moment. Within
//! one executor, the tasks that send to another executor take turns through an async mutex
//! (never a blocking lock). The query methods ([`Mesh::connected_peers`], ...), names and the
//! secured-mesh context are behind mutexes that messages never touch.
//!
//! # Backpressure and loss
//!
//! Each link's outbound queue is bounded by `max_outbound_queue_bytes`; the bytes of a frame
//! are reserved before it is queued, so the [`OverflowPolicy`] only ever acts on a whole new
//! frame. Under `Block` (the default) [`Mesh::broadcast`] / [`Mesh::send`] (and their
//! `_blocking` forms) wait for room; relayed traffic never waits (it would stall the shard)
//! and is dropped and counted instead. `try_*` never wait and say why with [`PublishError`].
//!
//! **No peer holds a publisher hostage.** A link that stays congested for
//! [`SlowLinkPolicy::after`] (1 s) while another link drains at least twice as fast is
//! declared slow (`slow_links`, an [`ErrorKind::SlowPeer`] event) and, by default, dropped for
//! until it has drained to half its bound (`dropped_slow_link`);
//! [`SlowLinkAction::Disconnect`] closes it instead. When the links drain alike (or there is
//! one) the publisher is faster than the mesh and simply waits.
//!
//! **No silent loss.** Every message not delivered nor sent on is counted by cause in
//! [`Mesh::stats`], including what was still queued on (or being written to) a link when it
//! closed (`dropped_link_closed`), what the link's kernel still held unacknowledged then
//! (`unacked_link_closed`, an upper bound), and what a peer still sent on a link this node was closing
//! (`dropped_link_closing`: a dial race's loser stays open until its peer resolved the race
//! too, what comes on it counting as come on the winner, so nothing sent during a race is
//! lost). **At
//! most once:** a copy delayed past the dedup cache's
//! bound is dropped as `dropped_too_old`, never delivered twice (see [`crate::proto::dedup`]).
//!
//! A reader that waits for event-queue room or for a hop is busy, not dead: its liveness is
//! refreshed. A whole frame counts as liveness, and so does every 4 KiB of a partial one; a
//! peer trickling a frame slower than that is closed ([`ErrorKind::Stalled`]). Before its
//! handshake a connection may announce no frame above 4 KiB
//! ([`crate::wire::MAX_HANDSHAKE_FRAME_LEN`]), and read buffers grow with the bytes that
//! arrive, never with a length a peer announced.
//!
//! # Events
//!
//! [`Mesh::events`] gives an [`EventReceiver`] (async `recv`, a `Stream`, blocking
//! `recv_timeout`); see [`event`] for the bounded queue's policy (Message events apply
//! backpressure to the reading shard; control events never block and are counted when lost).
//! Callbacks registered with [`MeshBuilder::on_event`] run **on the executor thread that raised
//! the event** — the control plane for peer and member events, scouting and handshake errors, a
//! data shard for Message events and link errors — before the event is queued. A callback
//! must return quickly and never block: it may call the `try_*` methods and the query methods,
//! but not the waiting or blocking ones. [`Mesh::stop`] may be called: from an executor it
//! is handed to a helper thread and returns at once.
//!
//! A callback is also the lowest-latency way to answer a message: a reply sent from it with
//! [`Mesh::try_send`] is originated on the shard that read the request (with one shard, the
//! same thread, in the same pass of its executor), so a round trip crosses the two sockets and
//! no application thread. An application thread receiving through [`EventReceiver`] and
//! sending through the ingress adds two thread hand-offs per direction, each a wake-up of a
//! parked thread (`shoal-loadgen latency --inline --compare` measures both).
//!
//! Peer and member events (and the peer lists of the query methods) are released only once
//! every shard has applied the routing changes behind them: after `PeerConnected`, a message
//! to that peer is never lost to a routing table that is not there yet. Peer events pair up
//! (see [`crate::proto::peers`]): every `PeerDisconnected` follows its `PeerConnected`.
//!
//! # Topics
//!
//! [`Mesh::writer`] and [`Mesh::reader`] ([`crate::topics`]) create endpoints through a
//! command to the control plane that waits for its answer; from the control executor itself
//! (a peer or match event callback) the command is carried out on the spot, so it never
//! waits for its own thread. A [`crate::topics::Writer`] packs Samples frames on the
//! application thread and hands them to the origin shard as a [`Publisher`] hands Data
//! frames, with the same backpressure. Samples reach local readers as
//! [`Event::Sample`] (message-class: callbacks on the shard that read them, backpressure on
//! the queue); `Matched`, `Unmatched` and `Incompatible` are control events.
//! [`Mesh::topics`] reads the control plane's published view; dropping a handle's last clone
//! removes its endpoint.
//!
//! # Strangers and floods
//!
//! The control plane admits never-linked peers from announces, and dials them, within a
//! budget (`new_peer_rate` node-wide, `new_peer_rate_per_source` per source address), so fake
//! announces cannot turn the node into a connection amplifier; in a full peer table, peers
//! that were only announced give way to new ones, and a completed handshake is refused only
//! when every entry is a linked or static peer. Inbound connections in their handshake are
//! bounded by `max_pending_handshakes`; a newcomer evicts the oldest of the busiest source
//! address, so sockets that never send a Hello cannot lock peers out. Junk on the scouting
//! port is counted. Everything refused or evicted is counted in [`MeshStats::control`], and
//! the warnings such input triggers are aggregated: the first is logged, then one line with
//! the count per 10 s.
//!
//! # Secured mesh
//!
//! With a PSK (`mesh/proto/protocol/secured.md`) the node MACs its announces and drops announces of
//! the other mode; the control plane runs the X25519 handshake (ephemeral key in the Hello,
//! AuthConfirm) and refuses a peer of the other mode, another PSK or a refused identity with an
//! [`Event::Error`] ([`ErrorKind::ModeMismatch`], [`ErrorKind::Crypto`], [`ErrorKind::Identity`]).
//! The established link reaches its shard with its record keys: the reader opens ChaCha20-Poly1305
//! records in place and parses frames from the plaintext, the writer seals each batch of queued
//! frames into as few records as fit (the counter is assigned when a record is sealed, i.e.
//! committed, never for a frame the queue dropped). A record that does not authenticate closes only
//! that link.
//!
//! With an identity too (`identity_file` or `identity_seed_hex`), the node id is the hash of
//! the Ed25519 key, the handshake is signed and checked against `trusted_keys` /
//! `require_identity` (on by default in an identity mesh, as in the C++ library: a peer that
//! shows no identity is refused unless `require_identity` is set to false), signed identity
//! records are sent to each new neighbour and re-flooded (deduplicated by version) so
//! [`Mesh::node_name`] knows non-neighbours, and [`Mesh::revoke_key`] closes a node's link and
//! keeps it out. The [`SecureContext`] is built once at [`MeshBuilder::build`] and only
//! replaced, never mutated, when a key is revoked.

mod builder;
mod control;
mod deadline;
mod error;
pub mod event;
mod msg;
mod nodes;
mod publisher;
mod recycle;
mod reply;
mod shard;
pub mod shard_task;
mod shared;
use shoal_proto::stats;
pub(crate) mod topics;
mod warn;
mod yield_now;

pub use builder::{MeshBuilder, NodeOptions};
pub use error::{MeshError, PublishError};
pub use event::ErrorLog;
pub use event::{Callback, ErrorKind, Event, EventReceiver, Received, SampleBatch, SampleIter};
pub use publisher::{Publisher, DEFAULT_BATCH_BYTES};
pub use shard_task::{ShardContext, ShardInbox, ShardTask, ShardTaskError, ShardWriter};
pub use shoal_proto::control::LinkInfo;
pub use shoal_proto::{OverflowPolicy, SlowLinkAction, SlowLinkPolicy};
pub use stats::{MeshStats, ShardStats, StatCounter};

use crate::config::MeshConfig;
use crate::crypto::{node_id_from_key, SecureContext};
use crate::proto::link_shard;
use crate::PeerId;
use bytes::Bytes;
use control::{ControlStart, Request};
use shard::{Publish, ShardStart};
use shared::{NodeShared, Snapshot};
use shoal_runtime::channel::{channel_hub, ingress, ingress_weighted, IngressSender};
use shoal_runtime::{ControlPlacement, ExecutorId, Placement, Runtime, TrySendError};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

/// Capacity (messages) of each ring between two executors of a node.
const CHANNEL_CAPACITY: usize = 1024;
/// Commands the application may have queued for the control plane (endpoint creations wait
/// for room; removals never wait on an executor, see `topics`).
const REQUEST_QUEUE_CAPACITY: usize = 256;
/// Data frame bytes besides the payload inside the `length` field (type byte + fixed fields).
const DATA_FRAME_OVERHEAD: usize = 54;

enum RunState {
    Built,
    Running {
        rt: Runtime,
        cmd: IngressSender<Request>,
    },
    Stopped,
}

struct Inner {
    ns: Arc<NodeShared>,
    opts: NodeOptions,
    publish: OnceLock<IngressSender<Publish>>,
    /// Commands to the control plane (endpoints, stop), set at start.
    cmd: OnceLock<IngressSender<Request>>,
    listen_port: AtomicU16,
    state: Mutex<RunState>,
}

/// A mesh node. Cheap to clone (all clones are the same node); `Send + Sync`, usable from any
/// thread and from async code on any executor. Dropping the last clone stops the node, except
/// on an executor thread (inside a callback), where it cannot wait for the executors to end:
/// call [`Mesh::stop`] there. A callback that captures a clone keeps the node alive until
/// `stop` is called.
#[derive(Clone)]
pub struct Mesh {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh")
            .field("id", &self.inner.ns.me)
            .field("listen_port", &self.listen_port())
            .finish()
    }
}

impl Mesh {
    /// A builder with the v1 wire's defaults (`mesh/proto/protocol/v1-wire.md`) and
    /// [`NodeOptions::default`].
    pub fn builder() -> MeshBuilder {
        MeshBuilder::new()
    }

    /// This node's id.
    pub fn id(&self) -> PeerId {
        self.inner.ns.me
    }

    /// The mesh settings.
    pub fn config(&self) -> &MeshConfig {
        &self.inner.ns.cfg
    }

    /// The TCP port the node listens on (resolved when `listen_port` is 0); 0 before
    /// [`start`](Self::start).
    pub fn listen_port(&self) -> u16 {
        self.inner.listen_port.load(Ordering::Acquire)
    }

    /// Starts the executors, binds the listener (the port is resolved before anything is
    /// announced), dials static and seed peers and starts scouting. Returns once listening.
    pub fn start(&self) -> Result<(), MeshError> {
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(*state, RunState::Built) {
            return Err(MeshError::AlreadyStarted);
        }
        let ns = &self.inner.ns;
        let opts = &self.inner.opts;
        let shards = opts.shards;
        let mut b = Runtime::builder()
            .name("shoal-mesh")
            .shards(shards)
            .spin_before_park(opts.spin_before_park);
        if let Some(n) = opts.nice {
            b = b.nice(n);
        }
        if let Some(cpus) = &opts.pin_cpus {
            b = b.placement(Placement::Pinned(cpus.clone()));
            // Whoever pins wants the node off the other CPUs, the control plane included. It
            // takes the last listed CPU: its own when more CPUs than shards are listed, else
            // shared with the shard pinned there, which costs little because the control
            // plane wakes for timers, handshakes and gossip, not per message.
            if let Some(&cpu) = cpus.last() {
                b = b.control_placement(ControlPlacement::Pinned(cpu));
            }
        }
        let rt = b.build()?;
        let ids: Vec<ExecutorId> = (0..shards).map(ExecutorId::Shard).collect();
        let (control_ep, endpoints) = channel_hub(ExecutorId::Control, &ids, CHANNEL_CAPACITY);
        let (ptx, prx) = ingress_weighted(opts.publish_queue_capacity, Publish::weight);
        let (ctx_tx, ctx_rx) = ingress::<Request>(REQUEST_QUEUE_CAPACITY);
        let origin = link_shard(&ns.me, shards);
        let mut prx = Some(prx);
        let started = (|| -> Result<u16, MeshError> {
            for (idx, endpoint) in endpoints.into_iter().enumerate() {
                let init = ShardStart {
                    idx,
                    ns: ns.clone(),
                    endpoint,
                    publish: if idx == origin { prx.take() } else { None },
                    seed: rand::random(),
                };
                drop(rt.spawn_on(ExecutorId::Shard(idx), move || shard::run(init))?);
            }
            let (ready_tx, ready_rx) = mpsc::channel();
            let listen = SocketAddr::new(opts.listen_addr, ns.cfg.listen_port);
            let init = ControlStart {
                ns: ns.clone(),
                endpoint: control_ep,
                requests: ctx_rx,
                listen,
                ready: ready_tx,
                seed: rand::random(),
            };
            drop(rt.spawn_on(ExecutorId::Control, move || control::run(init))?);
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(port)) => Ok(port),
                Ok(Err(source)) => Err(MeshError::Listen {
                    addr: listen,
                    source,
                }),
                Err(_) => Err(MeshError::Listen {
                    addr: listen,
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "control plane did not start",
                    ),
                }),
            }
        })();
        match started {
            Ok(port) => {
                self.inner.listen_port.store(port, Ordering::Release);
                let _ = self.inner.publish.set(ptx);
                let _ = self.inner.cmd.set(ctx_tx.clone());
                *state = RunState::Running { rt, cmd: ctx_tx };
                Ok(())
            }
            Err(e) => {
                rt.shutdown();
                let _ = rt.join();
                *state = RunState::Stopped;
                Err(e)
            }
        }
    }

    /// Says Goodbye to every peer, closes every link and stops the executors. Idempotent;
    /// blocks while links send what is queued on them, up to `stop_grace` (default 1 s)
    /// and a margin of 2 s. From an executor thread (a callback) the work is handed to
    /// a helper thread and this returns at once.
    pub fn stop(&self) {
        if shoal_runtime::current_executor().is_some() {
            let inner = self.inner.clone();
            let _ = std::thread::Builder::new()
                .name("shoal-mesh-stop".into())
                .spawn(move || inner.stop());
            return;
        }
        self.inner.stop();
    }

    /// Broadcasts `payload` to every node, waiting for room (Block policy) asynchronously.
    pub async fn broadcast(&self, payload: impl Into<Bytes>) -> Result<(), PublishError> {
        self.publish_async(PeerId::ZERO, payload.into()).await
    }

    /// Sends `payload` to `peer` only (relayed through the mesh if it is not a neighbour),
    /// waiting for room asynchronously.
    pub async fn send(&self, peer: PeerId, payload: impl Into<Bytes>) -> Result<(), PublishError> {
        self.publish_async(peer, payload.into()).await
    }

    /// [`broadcast`](Self::broadcast) from a plain thread: blocks while there is no room.
    /// Never call it on an executor thread.
    pub fn broadcast_blocking(&self, payload: impl Into<Bytes>) -> Result<(), PublishError> {
        self.publish_blocking(PeerId::ZERO, payload.into())
    }

    /// [`send`](Self::send) from a plain thread: blocks while there is no room.
    pub fn send_blocking(
        &self,
        peer: PeerId,
        payload: impl Into<Bytes>,
    ) -> Result<(), PublishError> {
        self.publish_blocking(peer, payload.into())
    }

    /// Broadcasts without waiting; [`PublishError::Full`] when there is no room now.
    pub fn try_broadcast(&self, payload: impl Into<Bytes>) -> Result<(), PublishError> {
        self.publish_try(PeerId::ZERO, payload.into())
    }

    /// Sends to `peer` without waiting; [`PublishError::Full`] when there is no room now.
    pub fn try_send(&self, peer: PeerId, payload: impl Into<Bytes>) -> Result<(), PublishError> {
        self.publish_try(peer, payload.into())
    }

    /// A batching publisher for one application thread: many messages per hand-off to the
    /// origin shard, for high message rates (see [`Publisher`]).
    pub fn publisher(&self) -> Publisher {
        Publisher::new(self.clone())
    }

    /// A receiver of this node's events (see [`EventReceiver`]). Events are queued only while
    /// a receiver exists; take one before [`start`](Self::start) to see every event.
    pub fn events(&self) -> EventReceiver {
        EventReceiver::new(self.inner.ns.hub.clone())
    }

    /// Peers with an established link.
    pub fn connected_peers(&self) -> Vec<PeerId> {
        self.snapshot(|s| s.connected.clone())
    }

    /// The links of the connected peers, each with its record suite (`None` in a plaintext
    /// mesh): AES-256-GCM to a Shoal node that offered it as this node did, ChaCha20-Poly1305
    /// otherwise (see `record_suite` in [`MeshConfig`]).
    pub fn links(&self) -> Vec<LinkInfo> {
        self.snapshot(|s| s.links.clone())
    }

    /// Every peer in the peer table (discovered, connected, static).
    pub fn known_peers(&self) -> Vec<PeerId> {
        self.snapshot(|s| s.known.clone())
    }

    /// Nodes reachable through the mesh (self excluded).
    pub fn members(&self) -> Vec<PeerId> {
        self.snapshot(|s| s.members.clone())
    }

    /// The signed name of node `id` in an identity mesh: this node's own, a verified
    /// neighbour's (from its handshake), or one learned from gossiped identity records.
    /// `None` when unknown (or in a mesh without identities).
    pub fn node_name(&self, id: PeerId) -> Option<String> {
        let ns = &self.inner.ns;
        if id == ns.me {
            return ns
                .secure_ctx()
                .and_then(|c| c.identity().map(|i| i.name().to_owned()));
        }
        let names = ns.names.lock().unwrap_or_else(|e| e.into_inner());
        names.get(&id).map(|n| n.to_string())
    }

    /// This node's Ed25519 identity public key, in an identity mesh.
    pub fn identity_public_key(&self) -> Option<[u8; 32]> {
        self.inner
            .ns
            .secure_ctx()
            .and_then(|c| c.identity().map(|i| *i.public_key()))
    }

    /// Revokes an identity key: it is removed from the trusted keys and refused from now on
    /// (even without an allowlist), the established link of its node is closed (by the
    /// control plane, woken for it; this never waits and may be called from an event
    /// callback), its name is forgotten and its identity records are no longer accepted. Returns whether the key was
    /// on the allowlist. Needs a secured mesh. Peers that show no identity are not affected
    /// (they are refused anyway unless `require_identity` is set to false).
    pub fn revoke_key(&self, key: &[u8; 32]) -> Result<bool, MeshError> {
        let ns = &self.inner.ns;
        let lock = ns.secure.as_ref().ok_or(MeshError::NotSecured)?;
        let listed = {
            let mut cur = lock.write().unwrap_or_else(|e| e.into_inner());
            let mut next = SecureContext::clone(&cur);
            let listed = next.policy_mut().revoke(key);
            *cur = Arc::new(next);
            listed
        };
        let node = node_id_from_key(key);
        ns.set_name(node, None);
        // The policy is already replaced, so a handshake finishing after this cannot install
        // the node; the control plane, woken here, closes a link that is already up.
        ns.trust_changed.notify(usize::MAX);
        tracing::info!(%node, listed, "identity key revoked");
        Ok(listed)
    }

    /// Counters per shard, of the control plane, and their sum.
    pub fn stats(&self) -> MeshStats {
        let mut s = MeshStats::collect(&self.inner.ns.counters);
        s.unflushed_discarded = self.inner.ns.unflushed_discarded.load(Ordering::Relaxed);
        let ns = &self.inner.ns;
        s.shard_task_panics = ns.shard_task_panics.load(Ordering::Relaxed);
        s.shard_task_busy_us = ns.shard_task_busy_us.load(Ordering::Relaxed);
        s.shard_task_long_polls = ns.shard_task_long_polls.load(Ordering::Relaxed);
        s
    }

    fn snapshot<T>(&self, f: impl FnOnce(&Snapshot) -> T) -> T {
        self.inner.ns.snapshot.read(f)
    }

    /// Under the Block policy: true when some link's outbound queue has no room for `bytes`
    /// now (what the `try_*` forms answer [`PublishError::Full`] for). Takes no lock in the
    /// steady state (see
    /// [`SnapshotCell::any_link_full_for`](shared::SnapshotCell::any_link_full_for)).
    fn links_full_for(&self, bytes: usize) -> bool {
        self.inner.ns.policy == OverflowPolicy::Block
            && self.inner.ns.snapshot.any_link_full_for(bytes)
    }

    fn admit(&self, dst: PeerId, len: usize) -> Result<&IngressSender<Publish>, PublishError> {
        let ns = &self.inner.ns;
        if ns.stopping.load(Ordering::Acquire) {
            return Err(PublishError::Stopped);
        }
        let tx = self.inner.publish.get().ok_or(PublishError::Stopped)?;
        let max = (ns.cfg.max_message_bytes as usize).saturating_sub(DATA_FRAME_OVERHEAD);
        if len > max {
            return Err(PublishError::TooLarge { len, max });
        }
        if dst != ns.me && ns.connected.load(Ordering::Acquire) == 0 {
            return Err(PublishError::NoRoute);
        }
        Ok(tx)
    }

    async fn publish_async(&self, dst: PeerId, payload: Bytes) -> Result<(), PublishError> {
        let tx = self.admit(dst, payload.len())?;
        tx.send(Publish::One { dst, payload })
            .await
            .map_err(|_| PublishError::Stopped)
    }

    fn publish_blocking(&self, dst: PeerId, payload: Bytes) -> Result<(), PublishError> {
        let tx = self.admit(dst, payload.len())?;
        tx.send_blocking(Publish::One { dst, payload })
            .map_err(|_| PublishError::Stopped)
    }

    fn publish_try(&self, dst: PeerId, payload: Bytes) -> Result<(), PublishError> {
        let tx = self.admit(dst, payload.len())?;
        if self.links_full_for(crate::wire::DATA_HEADER_LEN + payload.len()) {
            return Err(PublishError::Full);
        }
        match tx.try_send(Publish::One { dst, payload }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(PublishError::Full),
            Err(TrySendError::Closed(_)) => Err(PublishError::Stopped),
        }
    }
}

impl Inner {
    /// Stops the node; stopping wakes the executors' tasks and waits for them, so a node
    /// dropped during a panic stops outside the unwind.
    fn stop(&self) {
        shoal_runtime::outside_unwind(|| self.stop_now());
    }

    fn stop_now(&self) {
        let running = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *state, RunState::Stopped)
        };
        self.ns.stopping.store(true, Ordering::Release);
        if let RunState::Running { rt, cmd } = running {
            // No shard may keep waiting for event-queue room while it should be closing links.
            self.ns.hub.close();
            let (tx, rx) = mpsc::channel();
            if cmd.try_send(Request::Stop(tx)).is_ok() {
                // Goodbyes flushed, or give up waiting: stopping must not hang on a dead peer
                // (the shards close what is left after the grace; this is their margin).
                let _ = rx.recv_timeout(self.ns.cfg.stop_grace + Duration::from_secs(2));
            }
            rt.shutdown();
            if let Err(e) = rt.join() {
                tracing::error!(error = %e, "mesh runtime stopped with an error");
            }
            tracing::info!(id = %self.ns.me, "mesh node stopped");
        } else {
            self.ns.hub.close();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if shoal_runtime::current_executor().is_none() {
            self.stop();
        }
    }
}

// The application handle crosses threads; the receiver moves to the thread that reads it.
const _: () = {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    fn check() {
        send_sync::<Mesh>();
        send::<EventReceiver>();
    }
    let _ = check;
};
