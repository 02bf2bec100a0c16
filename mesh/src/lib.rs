//! shoal-mesh: the multimaster v1 mesh — nodes that find each other, link over TCP and flood
//! or relay messages, byte-compatible with the C++ `multimaster` library.
//!
//! **Owns:** the wire protocol ([`wire`]: the discovery datagram, the eight frame types and
//! Shoal's Hello extension block), the protocol logic as sans-I/O state machines ([`proto`]:
//! announce schedule, peer table and dial races, link handshake and liveness, gossip routing
//! and dedup, membership), the secured-mesh cryptography ([`crypto`], byte-exact, driven by
//! the node when a PSK is set), the settings ([`config`]) and the live node ([`node`], re-exported
//! here as [`Mesh`]) that drives those state machines on `shoal-runtime`'s executors.
//!
//! **Must not touch:** topics, types, QoS or discovery graphs (that is `shoal-discovery`,
//! driven from the control plane); the mesh moves opaque payloads along the routes it is
//! given. It never names compio or io_uring: all I/O goes through `shoal-runtime`, so the
//! executor can change without touching this crate.
//!
//! Start with [`Mesh::builder`]; the threading contract and the backpressure rules are in
//! the [`node`] module docs, the Hello extension layout in [`wire`].

pub mod config;
pub mod crypto;
pub mod id;
pub mod node;
pub mod proto;
pub mod wire;
pub use config::MeshConfig;
pub use id::{MsgId, PeerId};
pub use node::{
    ErrorKind, Event, EventReceiver, Mesh, MeshBuilder, MeshError, MeshStats, NodeOptions,
    OverflowPolicy, PublishError, Publisher, ShardStats, SlowLinkAction, SlowLinkPolicy,
};
