//! [`ExecutorId`], the name of one executor: what errors, tasks, channels and the runtime
//! all speak of, so it sits below them all.
//!
//! **Owns:** the executor names. **Must not touch:** anything else.

use std::fmt;

/// Names one executor of a [`Runtime`](crate::Runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExecutorId {
    /// Data-plane shard `i` (0-based).
    Shard(usize),
    /// The control-plane executor.
    Control,
}

impl fmt::Display for ExecutorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shard(i) => write!(f, "shard {i}"),
            Self::Control => f.write_str("control plane"),
        }
    }
}
