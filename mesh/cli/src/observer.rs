//! The observer node: a `shoal_mesh` node with no endpoints of its own (echo, hz and bw add
//! a reader), named so that others can tell it is one, joined by multicast scouting or
//! static peers; and the waits every command starts with (a link, then a view that stopped
//! changing).
//!
//! **Owns:** the observer's settings and lifetime, and the "no mesh found" diagnosis.
//! **Must not touch:** what the commands show.

use crate::args::MeshArgs;
use crate::CliError;
use shoal_mesh::nodes::NodesView;
use shoal_mesh::topics::TopicsSnapshot;
use shoal_mesh::{EventReceiver, Mesh, MeshConfig};
use std::time::{Duration, Instant};

/// The prefix of every observer's node name: `shoal nodes` marks such nodes as observers.
pub const OBSERVER_PREFIX: &str = "shoal-observer/";

/// How often the waits look again.
const POLL: Duration = Duration::from_millis(20);

/// A joined observer node.
pub struct Observer {
    /// The node.
    pub mesh: Mesh,
    /// Its events (taken before start: nothing is missed).
    pub events: EventReceiver,
}

/// The mesh settings of an observer for `command` from the command line.
pub fn config(a: &MeshArgs, command: &str) -> Result<MeshConfig, CliError> {
    let mut cfg = match &a.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| CliError::ReadConfig {
                path: path.clone(),
                source,
            })?;
            MeshConfig::from_toml_str(&text)?
        }
        None => MeshConfig::default(),
    };
    cfg.group_name.clone_from(&a.group);
    cfg.listen_port = a.listen.port();
    cfg.static_peers.extend(a.static_peers.iter().cloned());
    if a.no_multicast {
        cfg.scouting = false;
    }
    if let Some(i) = a.multicast_interface {
        cfg.multicast_interface = Some(i);
    }
    if let Some(g) = a.multicast_group {
        cfg.multicast_group = g;
    }
    if let Some(p) = a.multicast_port {
        cfg.multicast_port = p;
    }
    if let Some(psk) = &a.psk {
        cfg.psk.clone_from(psk);
    }
    if let Some(f) = &a.identity_file {
        cfg.identity_file = Some(f.clone());
    }
    cfg.node_name = match &a.name {
        Some(n) => n.clone(),
        None => default_name(command),
    };
    Ok(cfg)
}

/// `shoal-observer/<command>@<host>`, cut to the 255 bytes a name may have.
pub fn default_name(command: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let mut n = format!("{OBSERVER_PREFIX}{command}@{host}");
    while n.len() > 255 {
        n.pop();
    }
    n
}

/// Whether a node name is an observer's.
pub fn is_observer(name: Option<&str>) -> bool {
    name.is_some_and(|n| n.starts_with(OBSERVER_PREFIX))
}

impl Observer {
    /// Starts an observer for `command` and waits (at most `--wait-ms`) for its first link;
    /// [`CliError::NoMesh`] says where it looked when none came.
    pub fn join(a: &MeshArgs, command: &str) -> Result<Observer, CliError> {
        let cfg = config(a, command)?;
        let tried = Tried::of(&cfg);
        let mesh = Mesh::builder()
            .config(cfg)
            .listen_addr(a.listen.ip())
            .build()?;
        let events = mesh.events();
        mesh.start()?;
        let o = Observer { mesh, events };
        let deadline = Instant::now() + Duration::from_millis(a.wait_ms);
        while o.mesh.connected_peers().is_empty() {
            if Instant::now() >= deadline {
                o.mesh.stop();
                return Err(CliError::NoMesh {
                    waited_ms: a.wait_ms,
                    tried,
                });
            }
            std::thread::sleep(POLL);
        }
        Ok(o)
    }

    /// What the observer sees now: the members and the topics.
    pub fn look(&self) -> Result<(NodesView, TopicsSnapshot), CliError> {
        Ok((self.mesh.nodes()?, self.mesh.topics()))
    }

    /// Waits until the view stopped changing for `settle` (members, their records and
    /// links, endpoints, matches), at most `limit`; returns the last view either way.
    pub fn settle(
        &self,
        settle: Duration,
        limit: Duration,
    ) -> Result<(NodesView, TopicsSnapshot), CliError> {
        let end = Instant::now() + limit;
        let mut last = self.look()?;
        let mut since = Instant::now();
        loop {
            let now = Instant::now();
            if now.duration_since(since) >= settle || now >= end {
                return Ok(last);
            }
            std::thread::sleep(POLL);
            let next = self.look()?;
            if shape(&next) != shape(&last) {
                since = Instant::now();
            }
            last = next;
        }
    }
}

/// What a settled view must no longer change in (RTTs and counters may).
fn shape(
    v: &(NodesView, TopicsSnapshot),
) -> (Vec<(shoal_mesh::PeerId, bool, usize)>, usize, usize) {
    let nodes =
        v.0.nodes
            .iter()
            .map(|n| (n.id, n.topic_records, n.links.len()))
            .collect();
    (
        nodes,
        v.1.writers().count() + v.1.readers().count(),
        v.1.matches().len(),
    )
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.mesh.stop();
    }
}

/// Where an observer looked for the mesh (for the "no mesh found" message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    /// The group name.
    pub group: String,
    /// Multicast scouting: `group:port` and the interface (`None`: the kernel's choice).
    pub multicast: Option<(std::net::SocketAddrV4, Option<std::net::Ipv4Addr>)>,
    /// The static peers dialed.
    pub static_peers: Vec<String>,
    /// Secured (PSK) or plaintext: a mesh of the other mode never answers.
    pub secured: bool,
}

impl Tried {
    fn of(cfg: &MeshConfig) -> Tried {
        Tried {
            group: cfg.group_name.clone(),
            multicast: cfg.scouting.then(|| {
                (
                    std::net::SocketAddrV4::new(cfg.multicast_group, cfg.multicast_port),
                    cfg.multicast_interface,
                )
            }),
            static_peers: cfg.static_peers.clone(),
            secured: !cfg.psk.is_empty(),
        }
    }
}

impl std::fmt::Display for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "group {:?}", self.group)?;
        match &self.multicast {
            Some((g, Some(i))) => write!(f, ", multicast {g} on interface {i}")?,
            Some((g, None)) => write!(
                f,
                ", multicast {g} on the kernel's default interface (try --multicast-interface IP)"
            )?,
            None => write!(f, ", no multicast")?,
        }
        if self.static_peers.is_empty() {
            write!(f, ", no static peer")?;
        } else {
            write!(f, ", static peers {}", self.static_peers.join(", "))?;
        }
        write!(
            f,
            ", {}",
            if self.secured {
                "secured (PSK)"
            } else {
                "plaintext (a secured mesh needs --psk)"
            }
        )
    }
}
