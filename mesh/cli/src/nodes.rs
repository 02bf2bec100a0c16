//! `shoal nodes`: every member with its name, protocol, uptime, addresses, identity and
//! links with round-trip times, from [`shoal_mesh::Mesh::nodes`].
//!
//! **Owns:** the report's shape (JSON) and its text. **Must not touch:** how the facts are
//! gathered (the library's view says whose word each one is; this only shows it).

use crate::observer::is_observer;
use crate::text::{duration, short};
use serde::Serialize;
use shoal_mesh::nodes::{NodesView, Speaks};
use shoal_mesh::PeerId;
use std::fmt::Write as _;

/// One node, as `--json` prints it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodeReport {
    /// Node id, 32 hex digits.
    pub id: String,
    /// Its announced name (`null`: no record of it arrived).
    pub name: Option<String>,
    /// The node running this command.
    pub this_node: bool,
    /// An observer (a `shoal` command), by its name.
    pub observer: bool,
    /// Linked to the observer directly.
    pub neighbour: bool,
    /// `shoal` (Shoal's extended frames), `multimaster-v1` or `unknown`.
    pub protocol: &'static str,
    /// Whose word `protocol` is (node id), `null` when unknown.
    pub protocol_per: Option<String>,
    /// Its topic records arrive here.
    pub topic_records: bool,
    /// Listen and scouting addresses.
    pub addresses: Vec<String>,
    /// Signed identity (identity mesh).
    pub identity: Option<IdentityReport>,
    /// Start time, ms since the Unix epoch (its clock).
    pub started_ms: Option<u64>,
    /// Uptime by the observer's clock, ms (clocks may differ between hosts).
    pub uptime_ms: Option<u64>,
    /// Its links.
    pub links: Vec<LinkReport>,
}

/// A signed identity.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IdentityReport {
    /// Ed25519 public key, hex.
    pub key: String,
    /// Signed name.
    pub name: String,
}

/// One link of a node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LinkReport {
    /// The node at the other end.
    pub peer: String,
    /// Its name, when known.
    pub peer_name: Option<String>,
    /// Round-trip time, µs (`null`: not reported).
    pub rtt_us: Option<u64>,
    /// The end that measured it.
    pub measured_by: Option<String>,
}

/// `shoal nodes --json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodesReport {
    /// The observer's id.
    pub me: String,
    /// Every member, the observer first.
    pub nodes: Vec<NodeReport>,
}

/// The protocol name of a [`Speaks`].
pub fn protocol(s: Speaks) -> &'static str {
    match s {
        Speaks::Extensions => "shoal",
        Speaks::V1Only => "multimaster-v1",
        Speaks::Unknown => "unknown",
    }
}

/// The report of a view.
pub fn report(v: &NodesView) -> NodesReport {
    let name_of = |id: &PeerId| v.node(id).and_then(|n| n.name.clone());
    let nodes = v
        .nodes
        .iter()
        .map(|n| NodeReport {
            id: n.id.to_string(),
            name: n.name.clone(),
            this_node: n.this_node,
            observer: is_observer(n.name.as_deref()),
            neighbour: n.neighbour,
            protocol: protocol(n.speaks),
            protocol_per: n.speaks_per.map(|p| p.to_string()),
            topic_records: n.topic_records,
            addresses: n.addresses.iter().map(ToString::to_string).collect(),
            identity: n.identity.as_ref().map(|i| IdentityReport {
                key: hex::encode(i.key),
                name: i.name.clone(),
            }),
            started_ms: n.started_ms,
            uptime_ms: n.started_ms.map(|s| v.wall_ms.saturating_sub(s)),
            links: n
                .links
                .iter()
                .map(|l| LinkReport {
                    peer: l.peer.to_string(),
                    peer_name: name_of(&l.peer),
                    rtt_us: l.rtt.map(|d| d.as_micros() as u64),
                    measured_by: l.measured_by.map(|p| p.to_string()),
                })
                .collect(),
        })
        .collect();
    NodesReport {
        me: v.me.to_string(),
        nodes,
    }
}

/// The text of a report: one block per node.
pub fn text(r: &NodesReport) -> String {
    let mut out = String::new();
    let members = r.nodes.iter().filter(|n| !n.this_node).count();
    let _ = writeln!(
        out,
        "{members} member(s) seen from observer {} (this node, listed first)",
        short(&r.me)
    );
    let name_of = |id: &str| {
        r.nodes
            .iter()
            .find(|n| n.id == id)
            .and_then(|n| n.name.clone())
    };
    for n in &r.nodes {
        let mut tags = Vec::new();
        if n.this_node {
            tags.push("this node");
        }
        if n.observer {
            tags.push("observer");
        }
        if n.neighbour {
            tags.push("neighbour");
        }
        let tags = if tags.is_empty() {
            String::new()
        } else {
            format!("  [{}]", tags.join(", "))
        };
        let _ = writeln!(
            out,
            "\n{}  {}{tags}",
            short(&n.id),
            n.name.as_deref().unwrap_or("(no name: no topic record)")
        );
        let per = match (&n.protocol_per, n.this_node) {
            (_, true) => String::new(),
            (Some(p), _) if *p == n.id => " (its own record)".to_owned(),
            (Some(p), _) if *p == r.me => " (our link to it)".to_owned(),
            (Some(p), _) => format!(
                " (per {}'s link)",
                name_of(p).unwrap_or_else(|| short(p).to_owned())
            ),
            (None, _) => String::new(),
        };
        let proto = match n.protocol {
            "shoal" => "Shoal extensions",
            "multimaster-v1" => "multimaster v1 only",
            _ => "unknown",
        };
        let _ = writeln!(out, "  protocol   {proto}{per}");
        if !n.topic_records {
            let _ = writeln!(
                out,
                "  topics     its topic records do not arrive here (see `shoal topics`)"
            );
        }
        let _ = writeln!(
            out,
            "  uptime     {}",
            n.uptime_ms.map_or_else(
                || "unknown".to_owned(),
                |ms| duration(std::time::Duration::from_millis(ms))
            )
        );
        let _ = writeln!(
            out,
            "  addresses  {}",
            if n.addresses.is_empty() {
                "unknown".to_owned()
            } else {
                n.addresses.join(", ")
            }
        );
        if let Some(i) = &n.identity {
            let _ = writeln!(out, "  identity   {} (key {})", i.name, &i.key[..16]);
        }
        if n.links.is_empty() {
            let _ = writeln!(out, "  links      none");
        }
        for (i, l) in n.links.iter().enumerate() {
            let rtt = match (l.rtt_us, &l.measured_by) {
                (Some(us), Some(by)) => format!(
                    "rtt {} (measured by {})",
                    crate::text::micros(us),
                    if *by == r.me {
                        "us".to_owned()
                    } else if *by == n.id {
                        "it".to_owned()
                    } else {
                        name_of(by).unwrap_or_else(|| short(by).to_owned())
                    }
                ),
                _ => "rtt not reported".to_owned(),
            };
            let _ = writeln!(
                out,
                "  {}  {}  {:<28} {rtt}",
                if i == 0 { "links    " } else { "         " },
                short(&l.peer),
                l.peer_name.as_deref().unwrap_or("-"),
            );
        }
    }
    out
}
