//! One node of a `storm`: the hidden `storm-node` subcommand that `storm` starts once per
//! process. It links by multicast scouting, keeps its member set from the node's events, and
//! answers its parent on stdin/stdout: `s` prints one [`NodeSample`] as a JSON line, `q` (or
//! the end of stdin, when the parent died) stops the node and ends the process.
//!
//! **Owns:** the child's side of that line protocol. **Must not touch:** timing and the
//! report (the parent, `storm.rs`, measures; the child only answers what it was asked, so an
//! idle node does no work for the measurement between two requests).

use crate::demo::RunError;
use crate::shoal::SetupError;
use shoal_mesh::{Event, MeshBuilder, PeerId};
use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The settings one storm node is started with (the parent passes them on its command line).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StormNodeArgs {
    /// Mesh group name.
    #[arg(long)]
    pub(crate) group: String,
    /// UDP port of the multicast scouting group (one per storm, so parallel runs never
    /// hear each other).
    #[arg(long)]
    pub(crate) multicast_port: u16,
    /// Interface address for multicast scouting; the node listens on it too.
    #[arg(long)]
    pub(crate) multicast_interface: Ipv4Addr,
    /// Mesh settings file (TOML, `MeshBuilder::from_toml_str`); the flags above override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// `max_links` (overrides the settings file).
    #[arg(long)]
    pub(crate) max_links: Option<usize>,
    /// `nice`: the node's executors' niceness (overrides the settings file).
    #[arg(long)]
    pub(crate) nice: Option<i32>,
    /// Lead a session of its own ([`lead_new_session`]) before anything else.
    #[arg(long)]
    pub(crate) own_session: bool,
    /// Join the cgroup whose `cgroup.procs` this is (the storm's `--cpu-max`) before the
    /// node starts, so every thread of the node is in it.
    #[arg(long)]
    pub(crate) cgroup_procs: Option<PathBuf>,
}

/// Makes this process the leader of a new session (and process group), as a service, a
/// container or a terminal of its own would be; returns the session's id (this pid).
pub(crate) fn lead_new_session() -> std::io::Result<u32> {
    // SAFETY: setsid takes no arguments and touches no memory of this process; it fails
    // (EPERM) only for a process group leader, which a freshly spawned child is not.
    let sid = unsafe { libc::setsid() };
    if sid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(sid as u32)
}

/// What a storm node answers to `s`: its member set and the counters the parent turns into
/// rates (the parent reads CPU time from `/proc` itself).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct NodeSample {
    /// This node's id.
    pub(crate) id: String,
    /// Its member set (from `MemberJoined` / `MemberLeft` events), ids sorted.
    pub(crate) members: Vec<String>,
    /// Wall-clock time (ms since the Unix epoch) of the last change of that set: once the set
    /// is the one expected, the time it became so, whenever it is asked.
    pub(crate) members_changed_unix_ms: u64,
    /// Peers with an established link.
    pub(crate) connected: usize,
    /// Wall-clock time (ms since the Unix epoch) of the last `PeerConnected` or
    /// `PeerDisconnected`: once every peer is linked, the time the last link came up.
    #[serde(default)]
    pub(crate) links_changed_unix_ms: u64,
    /// Frames read from links, every kind (in an idle mesh: control frames alone).
    pub(crate) frames_in: u64,
    /// Bytes read from links.
    pub(crate) bytes_in: u64,
    /// Bytes written to links.
    pub(crate) bytes_out: u64,
    /// Data frames queued on links (zero in an idle mesh: the check that it is idle).
    pub(crate) data_frames_queued: u64,
    /// Links opened and closed so far.
    pub(crate) links_opened: u64,
    /// See `links_opened`.
    pub(crate) links_closed: u64,
    /// Announces of unknown peers ignored for the new-peer budget, and dials to never-linked
    /// peers postponed by it (`announces_rate_limited`, `dials_rate_limited`).
    #[serde(default)]
    pub(crate) announces_rate_limited: u64,
    /// See `announces_rate_limited`.
    #[serde(default)]
    pub(crate) dials_rate_limited: u64,
    /// Connections refused as late claims of a linked peer's id (`claims_refused`).
    #[serde(default)]
    pub(crate) claims_refused: u64,
}

/// Wall-clock milliseconds since the Unix epoch (the parent and its children share the
/// host's clock).
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Default)]
struct Members {
    set: HashSet<PeerId>,
    changed_ms: u64,
    links_changed_ms: u64,
}

/// Runs one storm node until told to stop (or stdin ends).
pub(crate) fn run(a: &StormNodeArgs) -> Result<(), RunError> {
    if a.own_session {
        lead_new_session()?;
    }
    if let Some(procs) = &a.cgroup_procs {
        std::fs::write(procs, format!("{}\n", std::process::id()))?;
    }
    let text = match &a.config {
        Some(path) => std::fs::read_to_string(path).map_err(|source| SetupError::ReadConfig {
            path: path.clone(),
            source,
        })?,
        None => String::new(),
    };
    let members = Arc::new(Mutex::new(Members {
        changed_ms: unix_ms(),
        links_changed_ms: unix_ms(),
        ..Members::default()
    }));
    let seen = members.clone();
    let mut builder = MeshBuilder::from_toml_str(&text).map_err(SetupError::Mesh)?;
    if let Some(n) = a.max_links {
        builder = builder.max_links(n);
    }
    if let Some(n) = a.nice {
        builder = builder.nice(n);
    }
    let mesh = builder
        .group_name(a.group.clone())
        .listen_addr(IpAddr::V4(a.multicast_interface))
        .listen_port(0u16)
        .scouting(true)
        .multicast_interface(a.multicast_interface)
        .multicast_port(a.multicast_port)
        // A restart is a process ending and another starting: a short goodbye.
        .stop_grace(Duration::from_millis(200))
        .on_event(move |e| {
            let (peer, joined) = match e {
                Event::MemberJoined { peer } => (*peer, true),
                Event::MemberLeft { peer } => (*peer, false),
                Event::PeerConnected { .. } | Event::PeerDisconnected { .. } => {
                    let mut m = seen.lock().unwrap_or_else(|e| e.into_inner());
                    m.links_changed_ms = unix_ms();
                    return;
                }
                _ => return,
            };
            let mut m = seen.lock().unwrap_or_else(|e| e.into_inner());
            let changed = if joined {
                m.set.insert(peer)
            } else {
                m.set.remove(&peer)
            };
            if changed {
                m.changed_ms = unix_ms();
            }
        })
        .build()
        .map_err(SetupError::Mesh)?;
    mesh.start().map_err(SetupError::Mesh)?;
    let mut out = std::io::stdout().lock();
    tracing::info!(id = %mesh.id(), "storm node ready");
    writeln!(out, "ready {}", mesh.id())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "s" => {
                let t = mesh.stats().total;
                let (mut ids, changed, links_changed) = {
                    let m = members.lock().unwrap_or_else(|e| e.into_inner());
                    let ids: Vec<String> = m.set.iter().map(|p| p.to_string()).collect();
                    (ids, m.changed_ms, m.links_changed_ms)
                };
                ids.sort_unstable();
                let s = NodeSample {
                    id: mesh.id().to_string(),
                    members: ids,
                    members_changed_unix_ms: changed,
                    connected: mesh.connected_peers().len(),
                    links_changed_unix_ms: links_changed,
                    frames_in: t.frames_in,
                    bytes_in: t.bytes_in,
                    bytes_out: t.bytes_out,
                    data_frames_queued: t.frames_queued,
                    links_opened: t.links_opened,
                    links_closed: t.links_closed,
                    announces_rate_limited: t.announces_rate_limited,
                    dials_rate_limited: t.dials_rate_limited,
                    claims_refused: t.claims_refused,
                };
                writeln!(
                    out,
                    "{}",
                    serde_json::to_string(&s).map_err(std::io::Error::other)?
                )?;
                out.flush()?;
            }
            "q" => break,
            other => tracing::warn!(line = other, "storm-node: unknown request"),
        }
    }
    mesh.stop();
    Ok(())
}
