//! The node's channels, one typed direction each ([`shoal_runtime::channel::channel_hub`] with
//! the control plane as the hub and the shards as its members): control plane → shard
//! ([`ShardCmd`]), shard → shard ([`ShardToShard`]) and shard → control plane ([`ToControl`]).
//! The application → shard direction is the origin shard's ingress (`Publish`). A receiver
//! matches only what can reach it.
//!
//! **Order.** Each ring is FIFO (a shard sees the control plane's commands in the order the
//! control core posted them, and another shard's messages in the order that shard sent them).
//! A shard takes a batch's commands before its shard messages, and the batch holds every
//! command sent before any of its shard messages was sent (see `channel_hub`): a message from
//! a shard that reacted to a command (an `Install` after which it posts a `Transmit` to the
//! link's owner) is never handled before a command the control plane sent earlier (the
//! owner's `AddLink` of that link). Nothing orders commands and shard messages that are not
//! so linked: a shard's samples may still arrive before the route table that names their
//! writer reaches the receiving shard (they are parked, `ShardCore`'s `replay_parked`).
//!
//! **Owns:** the channel types of the node. **Must not touch:** the commands' meaning
//! (`shoal_proto::cmd`).

use shoal_proto::cmd::{ShardToShard, ToControl, ToShard};
use shoal_runtime::channel::{HubEndpoint, MemberEndpoint};

/// A control-plane command with its TCP stream (detached from the control plane's executor;
/// re-attached on the shard).
pub(crate) type ShardCmd = ToShard<std::net::TcpStream>;

/// The control plane's end: a sender of commands to each shard, the receiver of their reports.
pub(crate) type ControlEndpoint = HubEndpoint<ShardCmd, ToControl>;

/// A shard's end: senders to the other shards and to the control plane, and one receiver of
/// commands and shard messages.
pub(crate) type ShardEndpoint = MemberEndpoint<ShardToShard, ShardCmd, ToControl>;
