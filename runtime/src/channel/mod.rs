//! Lock-free bounded channels between executors, and from plain threads into executors.
//!
//! * [`channel`]: point-to-point, one producer and one consumer, backed by one SPSC ring.
//! * [`channel_mesh`]: every executor gets a [`Sender`] to every other executor and one
//!   [`MeshReceiver`] that drains all its incoming rings fairly. One ring per ordered
//!   (from, to) pair, so no two producers ever share a cache line or a lock.
//! * [`channel_hub`]: a mesh among member executors plus a hub with a ring to and from each
//!   member, each of the three directions with its own message type; a member's
//!   [`MemberReceiver`] takes the hub's messages and the members' behind one wake-up.
//! * [`ingress`]: multi-producer (`Send + Clone`) handles for application threads, with
//!   async, blocking and non-blocking sends, into one executor.
//!
//! All of them are bounded: an awaiting send waits for room (backpressure), a `try_send`
//! says `Full`, and every `Full` is counted. Receivers sleep until data arrives. When the
//! other side is dropped — including because its executor panicked and its tasks were
//! dropped — the survivor sees `Closed` instead of waiting forever.

mod hub;
mod ingress;
mod mesh;
mod notify;
mod p2p;
mod spsc;

pub use hub::{channel_hub, HubChannels, HubEndpoint, MemberEndpoint, MemberParts, MemberReceiver};
pub use ingress::{ingress, ingress_weighted, IngressReceiver, IngressSender};
pub use mesh::{channel_mesh, MeshEndpoint, MeshReceiver};
pub use p2p::{channel, Receiver, Sender};
