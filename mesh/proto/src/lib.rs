//! All protocol logic of the mesh as sans-I/O state machines, in the style of quinn-proto.
//!
//! Nothing here touches a socket, a clock or a global RNG: every input carries `now: Instant`
//! (and, where versions are seeded from it, the wall clock in ms), randomness comes from an
//! injected [`rand::RngCore`], and every output is a value the caller executes. The same code
//! therefore runs under the real I/O driver and in deterministic multi-node simulations.
//!
//! # Pieces and where they live
//!
//! | module | state machine | lives on |
//! |---|---|---|
//! | [`scouting`] | announce schedule, datagram acceptance, dial-back address | control plane |
//! | [`peers`] | peer table, dialing, reconnect backoff, dial races, Lost | control plane |
//! | [`admission`] | budgets for admitting and dialing never-linked peers | control plane |
//! | [`membership`] | adjacency gossip and member set | control plane |
//! | [`control`] | the control core: all of the above plus handshakes, identity, placement on shards | control plane |
//! | [`link`] | one connection: handshake, heartbeat, liveness, Goodbye | the link's data shard |
//! | [`router`] + [`dedup`] | gossip routing of Data frames | each data shard |
//! | [`shard`] | the shard core: links served, queues, backpressure, origination, delivery | each data shard |
//!
//! # How a driver runs them
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
//! originator are already there; relayed ones hop once. Every shard holds the same
//! [`router::NeighbourLinks`]; a `Forward`/`Unicast` route is fanned out to the shards owning
//! the target links (again `link_shard` of each neighbour).
//!
//! Order between machines: apply a [`peers::PeerManager`]'s actions (routing-table
//! `Install`/`Uninstall`) before feeding its events to [`membership::Membership`], so a
//! membership flood triggered by `Connected` already reaches the new link.
//!
//! The control plane composes these machines in one core, [`control::ControlCore`], which the
//! live node (`shoal-mesh`, `node/control/`) and the simulation
//! (`mesh/proto/tests/proto_sim/`: whole nodes over an in-memory network with virtual time)
//! both drive.
//!
//! Links are named by [`LinkId`]s, allocated by the peer table ([`peers::PeerManager`]) for
//! every dial and every accepted socket and never reused, so a larger id is a younger
//! connection. The control plane pushes each shard a [`router::NeighbourLinks`] (neighbour to
//! link) whenever it installs or removes a link; the message path never asks it anything.

pub mod config;
pub mod crypto;
pub mod id;
pub mod wire;

pub mod admission;
pub mod budget;
pub mod cmd;
pub mod control;
pub mod dedup;
pub mod link;
pub mod membership;
pub mod peers;
pub mod router;
pub mod scouting;
pub mod shard;
pub mod stats;

pub use dedup::{dedup_shard, DedupCache, DedupStats, Seen, DEFAULT_MAX_STREAMS};
pub use link::{
    CloseReason, FrameAction, Link, LinkEvent, LinkState, LinkTimers, Role, PROGRESS_BYTES,
};
pub use membership::{Dest, MemberEvent, MemberGraph, MemberTransmit, RecordOutcome};
pub use peers::{DialTarget, PeerAction, PeerEvent, PeerManager, PeerState, PeerStats};
pub use router::{
    DataMeta, DataVerdict, DropReason, MsgIdGen, NeighbourLinks, Router, RouterStats,
};
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
    (peer.shard_hash() % shards.max(1) as u64) as usize
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
