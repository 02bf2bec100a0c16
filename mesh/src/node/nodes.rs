//! [`Mesh::nodes`]: the control plane's view of every member, asked for on demand.
//!
//! **Owns:** the query command and its wait. **Must not touch:** what the view holds (the
//! control core builds it: `shoal_proto::control::nodes`).

use super::control::{self, Request};
use super::{Mesh, MeshError};
use crate::nodes::NodesView;
use std::sync::mpsc;
use std::time::Duration;

/// How long [`Mesh::nodes`] waits for the control plane's answer.
const NODES_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

impl Mesh {
    /// Every member of the mesh as this node knows it: id, name, addresses, signed identity,
    /// whether it speaks Shoal's extensions or only multimaster v1, its start time and its
    /// links with their round-trip times (see [`crate::nodes`]). Asks the control plane,
    /// which builds the view on demand (nothing is kept for it); works from any thread and
    /// from an `on_event` callback. `MeshError::NotRunning` before
    /// [`start`](Self::start) or after [`stop`](Self::stop).
    pub fn nodes(&self) -> Result<NodesView, MeshError> {
        let ns = &self.inner.ns;
        if ns.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return Err(MeshError::NotRunning);
        }
        let tx = self.inner.cmd.get().ok_or(MeshError::NotRunning)?;
        let (reply, answer) = mpsc::sync_channel(1);
        if let Err(cmd) = control::run_here(ns, Request::Nodes(reply)) {
            tx.send_blocking(cmd).map_err(|_| MeshError::NotRunning)?;
        }
        match answer.recv_timeout(NODES_REPLY_TIMEOUT) {
            Ok(v) => Ok(v),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(MeshError::ControlTimeout),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(MeshError::NotRunning),
        }
    }
}
