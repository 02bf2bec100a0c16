//! The node's error types: why a node could not be built or started ([`MeshError`]) and why
//! a message was not accepted ([`PublishError`]). Owns only these enums; it must not grow
//! logic (the code that raises them lives with the builder, the node and the publishers).

use crate::config::ConfigError;
use crate::crypto::{IdentityError, SecureConfigError};
use crate::PeerId;
use shoal_runtime::{RuntimeError, SpawnError};
use std::net::SocketAddr;

/// Why a node could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// The mesh settings are invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A node setting is invalid.
    #[error("invalid node option: {0}")]
    Option(&'static str),
    /// The identity could not be loaded or created (seed file, seed text, name).
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The secured mesh settings are invalid.
    #[error(transparent)]
    Secure(#[from] SecureConfigError),
    /// An explicit node id was set in an identity mesh, where the id is the hash of the key.
    #[error("node id {configured} conflicts with {derived}, the hash of the identity key")]
    NodeIdConflict {
        /// The id set with [`MeshBuilder::node_id`](super::MeshBuilder::node_id).
        configured: PeerId,
        /// `BLAKE2b-16(identity public key)`.
        derived: PeerId,
    },
    /// The operation needs a secured mesh (a PSK).
    #[error("this operation needs a secured mesh (psk)")]
    NotSecured,
    /// The runtime could not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A task could not be started on the runtime.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The TCP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// [`Mesh::start`](super::Mesh::start) was called twice, or after [`Mesh::stop`](super::Mesh::stop).
    #[error("the node was already started")]
    AlreadyStarted,
    /// The operation needs a running node (started, not stopped).
    #[error("the node is not running")]
    NotRunning,
    /// A writer or reader declaration is invalid (names, partitions, QoS, type hash);
    /// nothing reached the control plane.
    #[error(transparent)]
    TopicSpec(#[from] crate::topics::TopicSpecError),
    /// The control plane refused the endpoint (a discovery table or the match table is
    /// full, or it found the declaration invalid).
    #[error("endpoint refused: {0}")]
    Endpoint(#[from] crate::topics::TopicError),
    /// The control plane did not answer in time (it is stopping, or stalled).
    #[error("the control plane did not answer")]
    ControlTimeout,
}

/// Why a message was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// No room now: the ingress queue is full, or (Block policy) a link's outbound queue is at
    /// its bound. Only the `try_*` methods return it; the others wait.
    #[error("queue full")]
    Full,
    /// This node has no established link, so the message could reach no one.
    #[error("no route: no peer connected")]
    NoRoute,
    /// The node is not started or has stopped.
    #[error("the node is not running")]
    Stopped,
    /// The payload does not fit one frame of `max_message_bytes`.
    #[error("payload of {len} bytes exceeds the {max} bytes a frame can carry")]
    TooLarge {
        /// Payload length.
        len: usize,
        /// Largest payload accepted.
        max: usize,
    },
    /// A reliable writer that keeps all its history has `max_samples` samples that some
    /// matched reliable reader has not acknowledged yet: `try_write` says so at once, the
    /// waiting forms after waiting the writer's `max_blocking_time` (the sample is not
    /// written, its number not used). A reader that stays stalled keeps the writer waiting
    /// until it is unmatched (its lease expires).
    #[error("history full: a matched reliable reader has not acknowledged (waited {waited:?})")]
    HistoryFull {
        /// How long the write waited.
        waited: std::time::Duration,
    },
}
