//! shoal-mesh (being built).

pub mod id;
pub use id::{MsgId, PeerId};
