//! shoal-mesh (being built).

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
    OverflowPolicy, PublishError, ShardStats,
};
