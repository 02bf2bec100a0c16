//! The one message type of the node's channel mesh: the three typed command directions of
//! [`shoal_proto::cmd`], with the live node's connection type.
//!
//! **Owns:** the single message type of the channel mesh. **Must not touch:** the commands' meaning
//! (`shoal_proto::cmd`).

use shoal_proto::cmd::{ShardToShard, ToControl, ToShard};

/// A control-plane command with its TCP stream (detached from the control plane's executor;
/// re-attached on the shard).
pub(crate) type ShardCmd = ToShard<std::net::TcpStream>;

/// One message on the channel mesh.
#[derive(Debug)]
pub(crate) enum Msg {
    /// Control plane → shard.
    ToShard(ShardCmd),
    /// Shard → shard.
    Peer(ShardToShard),
    /// Shard → control plane.
    ToControl(ToControl),
}

impl From<ShardCmd> for Msg {
    fn from(c: ShardCmd) -> Msg {
        Msg::ToShard(c)
    }
}

impl From<ShardToShard> for Msg {
    fn from(c: ShardToShard) -> Msg {
        Msg::Peer(c)
    }
}

impl From<ToControl> for Msg {
    fn from(c: ToControl) -> Msg {
        Msg::ToControl(c)
    }
}
