//! shoal-proto: the multimaster v1 mesh protocol as code without I/O, in the style of
//! quinn-proto: the wire codec, the secured-mesh cryptography, the settings, the state
//! machines, and the two cores that compose them into a node ([`control::ControlCore`] and
//! [`shard::ShardCore`]).
//!
//! **Owns:** every protocol decision of a node: what goes on the wire and when, whom to dial,
//! which links win a race, what is routed where, what is counted, dropped or delivered.
//! **Must not touch:** sockets, executors, tasks, threads, channels, the clock, the file
//! system or the OS random source. `cargo tree -p shoal-proto` holds no `shoal-runtime`.
//! Every input carries `now: Instant` (and, where versions are minted from it, the wall clock
//! in ms); randomness is injected as a seed or an [`rand::RngCore`]; every output is a value
//! the caller carries out. The same code runs under the live driver (`shoal-mesh`) and in
//! the deterministic multi-node simulation of `mesh/proto/tests/proto_sim/`.
//!
//! **What it shares between threads.** Each core runs on one thread, but three kinds of
//! value here are made to be shared (behind an `Arc`) by the driver's threads, so they hold
//! atomics and wake-ups instead of plain fields: [`LinkBudget`] (a link queue's byte count
//! and slow-link clock: reserved by every shard that sends on the link, released by the
//! link's writer; its `wake` and room signals are `event-listener` events that the driver's
//! link writer and Block-policy publishers wait on), [`topics::WriterCredit`] (a keep-all
//! writer's highest writable sequence number: moved by the shard that keeps the history,
//! waited on by the application's writer handle) and the counters of [`stats`] (each set
//! written by one executor with relaxed stores, read by `Mesh::stats` from any thread).
//! `event-listener` is a wait list, not an executor: `notify` takes its short `std` mutex,
//! and no code here waits on a listener or parks a thread (the driver does). Everything else
//! handed between threads is immutable once built and travels as an `Arc` or by value: the
//! route tables ([`topics::SampleRoutes`], [`reverse_path::PathTable`]), the topics view and
//! the commands of [`cmd`].
//!
//! # The house
//!
//! | module | what | lives on |
//! |---|---|---|
//! | [`wire`] | codec: the scouting beacon, the eight v1 frame types, Shoal's Hello extension block and its eight extended frames (Discovery 9, Samples 10, the reliability frames 11–14, SignedMembership 15, MembershipDigest 16: only to peers whose Hello advertised them) | both |
//! | [`crypto`] | PSK keys, beacon MAC, X25519 handshake, records, Ed25519 identity, signed records | both |
//! | [`config`] | [`MeshConfig`], the settings a user writes (builder and TOML) | both |
//! | [`id`] | node and message ids | both |
//! | [`control`] | **the control core**: composes the machines below, handshakes, identity records, signed records, held events, commands to shards | control plane |
//! | [`scouting`] | beacon schedule, acceptance, dial-back address | control core |
//! | [`peers`] | peer table, dialing, reconnect backoff, dial races, Lost | control core |
//! | [`admission`] | budgets for admitting and dialing never-linked peers | control core |
//! | [`membership`] | [`MemberGraph`]: adjacency gossip and the member set | control core |
//! | [`reverse_path`] | per origin, the neighbours its frames may come from (the reverse-path check) | control core (tables pushed to the shards) |
//! | `counted_graph` | the membership graph as the topic trees and the reverse paths count it (an edge counts when both ends list it) | control core |
//! | [`topics`] | the **topics core** (`topics::core`: own endpoints and their announcements, the Discovery flood and its checks, the discovery graph of `shoal-discovery`, match events), the sample route trees (`tree`), the immutable route table (`routes`), the `[topics]` settings (`config`) and a keep-all writer's write credit (`credit`) | control core (route tables and credits read by the shards) |
//! | [`shard`] | **the shard core**: links, queues, backpressure, origination, Data and sample routing, reliable topics' per-shard state, delivery, teardown | each data shard |
//! | [`link`] | one connection: handshake, heartbeat, liveness, Goodbye | handshake: control core; then its shard core |
//! | [`gossip`] + [`dedup`] | gossip routing of Data frames | shard core |
//! | [`budget`] | [`LinkBudget`]: a link queue's byte bound, shared by the shards that send on it | shard cores (and the application's `try_*` checks) |
//! | [`reliable`] | reliable topics: a writer's history, acks, repairs and gaps; a reader's ordering and loss accounting (frames 11–14) | the shard cores of the writer's and the readers' nodes |
//! | [`cmd`] | the commands between cores, one enum per direction | between executors |
//! | [`stats`] | the counters, one set per executor | each core |
//!
//! # How a driver runs a state machine
//!
//! Every state machine follows the same loop:
//! 1. feed inputs as they happen (`on_*` methods), always with the current `now`;
//! 2. drain outputs (`poll_action` / `poll_transmit` / `poll_event`, or the returned value);
//! 3. arm one timer at `poll_timeout()` and call `handle_timeout(now)` when it fires (calling
//!    it early is harmless: it only does what is due).
//!
//! Ordering rule that makes liveness robust under load: on every wake-up, feed everything that
//! was received (bytes and frames) *before* calling a link's `handle_timeout`, so a receiver
//! that was busy does not declare a talking peer dead (see [`link`]).
//!
//! Sharding: a link lives on shard [`link_shard`]`(peer)`. Dials to discovered peers know the
//! peer up front; inbound, static and seed connections learn it from the Hello, so the driver
//! runs the handshake wherever the socket landed and moves the link to its shard when
//! [`link::LinkEvent::Established`] names the peer. Data is routed on shard
//! [`dedup_shard`]`(msg_id)` (the originator's shard): frames arriving straight from their
//! originator are already there; others hop once. Every shard holds the same
//! [`gossip::NeighbourLinks`]; a `Forward`/`Unicast` route is fanned out to the shards owning
//! the target links (again `link_shard` of each neighbour). A topic writer's samples and
//! reliability frames are sequenced on [`shard::samples_shard`]`(writer)`, the shard of the
//! writer's node id. All three are one hash of a node's id, [`id::node_shard`], so a node's
//! own writers are sequenced where they publish and a run read on another shard hops there
//! once.
//!
//! Order between machines: apply a [`peers::PeerManager`]'s actions (routing-table
//! `Install`/`Uninstall`) before feeding its events to [`membership::MemberGraph`], so a
//! membership flood triggered by `Connected` already reaches the new link.
//!
//! The control plane composes these machines in one core, [`control::ControlCore`], which the
//! live node (`shoal-mesh`, `node/control/`) and the simulation
//! (`mesh/proto/tests/proto_sim/`: whole nodes over an in-memory network with virtual time)
//! both drive.
//!
//! Links are named by [`LinkId`]s, allocated by the peer table ([`peers::PeerManager`]) for
//! every dial and every accepted socket and never reused, so a larger id is a younger
//! connection. The control plane pushes each shard a [`gossip::NeighbourLinks`] (neighbour to
//! link) whenever it installs or removes a link; the message path never asks it anything.

pub mod config;
pub mod crypto;
pub mod id;
pub mod wire;

pub mod admission;
pub mod budget;
pub mod cmd;
pub mod control;
mod counted_graph;
pub mod dedup;
pub mod degree;
pub mod gossip;
mod grid;
pub mod link;
pub mod membership;
pub mod peers;
pub mod reliable;
pub mod reverse_path;
pub mod scouting;
pub mod shard;
pub mod stats;
pub mod topics;

pub use dedup::{dedup_shard, DedupCache, DedupStats, Seen, DEFAULT_MAX_STREAMS};
pub use gossip::{
    DataMeta, DataVerdict, DropReason, Gossip, GossipStats, MsgIdGen, NeighbourLinks,
};
pub use link::{
    CloseReason, FrameAction, Link, LinkEvent, LinkState, LinkTimers, Role, PROGRESS_BYTES,
};
pub use membership::{Dest, MemberEvent, MemberGraph, MemberTransmit, RecordOutcome};
pub use peers::{DialTarget, PeerAction, PeerEvent, PeerManager, PeerState, PeerStats};
pub use scouting::{accept_beacon, AcceptedBeacon, BeaconError, BeaconSchedule};

pub use budget::{LinkBudget, OverflowPolicy, SlowLinkAction, SlowLinkPolicy};
pub use config::MeshConfig;
pub use id::{MsgId, PeerId};

/// Names one connection (dialed or accepted). Allocated by [`peers::PeerManager`], unique for
/// the node's lifetime and increasing, so comparing two ids tells which connection is older.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u64);

/// The data shard (of `shards`) that owns the connection to `peer`.
pub fn link_shard(peer: &PeerId, shards: usize) -> usize {
    id::node_shard(&peer.0, shards)
}

/// Reconnect delay before jitter: `min(base << min(attempt, 20), max)`.
pub fn backoff_delay(
    base: std::time::Duration,
    max: std::time::Duration,
    attempt: u32,
) -> std::time::Duration {
    let shifted = base.saturating_mul(1u32 << attempt.min(20));
    shifted.min(max)
}

/// Backoff delay plus a uniformly random `0..=delay/5` of jitter, so peers that lost each
/// other at the same moment do not redial in lockstep.
pub fn backoff_with_jitter(
    base: std::time::Duration,
    max: std::time::Duration,
    attempt: u32,
    rng: &mut dyn rand::RngCore,
) -> std::time::Duration {
    use rand::Rng;
    let d = backoff_delay(base, max, attempt);
    let jitter_ns = (d / 5).as_nanos() as u64;
    d + std::time::Duration::from_nanos(if jitter_ns == 0 {
        0
    } else {
        rng.gen_range(0..=jitter_ns)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_and_caps() {
        let (b, m) = (Duration::from_millis(500), Duration::from_millis(30_000));
        let got: Vec<u64> = (0..8)
            .map(|a| backoff_delay(b, m, a).as_millis() as u64)
            .collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(backoff_delay(b, Duration::MAX, 40), b * (1 << 20));
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for a in 0..10 {
            let d = backoff_delay(b, m, a);
            let j = backoff_with_jitter(b, m, a, &mut rng);
            assert!(j >= d && j <= d + d / 5);
        }
    }
}
