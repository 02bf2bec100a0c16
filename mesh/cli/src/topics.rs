//! `shoal topics`: every topic with its writers and readers, the matched pairs, every pair
//! that does not match with its reason in one line, and the silent causes of "my reader gets
//! nothing" that no event names: members whose topic records never arrive (multimaster v1
//! nodes, and nodes that every path to crosses one), topics with writers and no readers or
//! the reverse, and one topic under two types.
//!
//! Reasons come from [`shoal_mesh::topics::explain`] (the control plane's own rules) for
//! every writer/reader pair of a topic, remote ones included; pairs of one remote node are
//! matched on that node, so the observer says so instead of "matched".
//!
//! **Owns:** the analysis and its report (JSON and text). **Must not touch:** matching
//! rules (the library's).

use crate::observer::is_observer;
use crate::text::{close_names, glob, short};
use crate::CliError;
use serde::Serialize;
use shoal_mesh::nodes::{NodesView, Speaks};
use shoal_mesh::topics::{
    explain, DurabilityKind, EndpointKind, EndpointQos, EndpointView, History, LivelinessKind,
    OwnershipKind, QosDuration, ReliabilityKind, TopicsSnapshot,
};
use shoal_mesh::PeerId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

/// One writer or reader.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EndpointReport {
    /// GUID, 32 hex digits.
    pub guid: String,
    /// `writer` or `reader`.
    pub kind: &'static str,
    /// Its node.
    pub node: String,
    /// Its node's name, when known.
    pub node_name: Option<String>,
    /// Type name.
    pub type_name: String,
    /// Type hash, hex.
    pub type_hash: String,
    /// QoS in one line (reliability, durability, history, then what differs from the
    /// defaults).
    pub qos: String,
    /// Partitions (empty: the default partition).
    pub partitions: Vec<String>,
}

/// A writer/reader pair.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PairReport {
    /// The writer's GUID.
    pub writer: String,
    /// The reader's GUID.
    pub reader: String,
    /// Matched: `matched`, or `matched on its node` for a pair of one remote node. Not
    /// matched: the reasons in one line.
    pub why: String,
}

/// One topic.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TopicReport {
    /// The name.
    pub name: String,
    /// Its writers.
    pub writers: Vec<EndpointReport>,
    /// Its readers.
    pub readers: Vec<EndpointReport>,
    /// Pairs that match.
    pub matched: Vec<PairReport>,
    /// Pairs that do not, with why.
    pub unmatched: Vec<PairReport>,
    /// What is wrong with the topic as a whole (writers and no reader, two types, ...).
    pub warnings: Vec<String>,
}

/// A member invisible to topics.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SilentNode {
    /// Its id.
    pub node: String,
    /// Why its endpoints cannot be known here.
    pub why: String,
}

/// `shoal topics --json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TopicsReport {
    /// The topics shown, by name.
    pub topics: Vec<TopicReport>,
    /// Members whose topic records never arrive here.
    pub silent_nodes: Vec<SilentNode>,
}

fn kind(k: EndpointKind) -> &'static str {
    match k {
        EndpointKind::Writer => "writer",
        EndpointKind::Reader => "reader",
    }
}

fn dur(d: QosDuration) -> String {
    if d == QosDuration::INFINITE {
        "infinite".into()
    } else {
        format!("{} ms", d.as_nanos() / 1_000_000)
    }
}

/// A QoS in one line: reliability, durability and history always, the other policies when
/// they differ from the kind's defaults.
pub fn qos_line(q: &EndpointQos, k: EndpointKind) -> String {
    let d = EndpointQos::default_for(k);
    let mut parts = vec![
        match q.reliability.kind {
            ReliabilityKind::Reliable => "reliable",
            ReliabilityKind::BestEffort => "best-effort",
        }
        .to_owned(),
        match q.durability {
            DurabilityKind::Volatile => "volatile",
            DurabilityKind::TransientLocal => "transient-local",
            DurabilityKind::Transient => "transient",
            DurabilityKind::Persistent => "persistent",
        }
        .to_owned(),
        match q.history {
            History::KeepLast { depth } => format!("keep-last {depth}"),
            History::KeepAll => "keep-all".to_owned(),
        },
    ];
    if q.deadline != d.deadline {
        parts.push(format!("deadline {}", dur(q.deadline.period)));
    }
    if q.latency_budget != d.latency_budget {
        parts.push(format!("latency-budget {}", dur(q.latency_budget.duration)));
    }
    if q.ownership != d.ownership || q.ownership_strength != d.ownership_strength {
        parts.push(match q.ownership {
            OwnershipKind::Shared => "ownership shared".to_owned(),
            OwnershipKind::Exclusive => format!("ownership exclusive ({})", q.ownership_strength),
        });
    }
    if q.liveliness != d.liveliness {
        let k = match q.liveliness.kind {
            LivelinessKind::Automatic => "automatic",
            LivelinessKind::ManualByParticipant => "manual-by-participant",
            LivelinessKind::ManualByTopic => "manual-by-topic",
        };
        parts.push(format!(
            "liveliness {k} {}",
            dur(q.liveliness.lease_duration)
        ));
    }
    if q.destination_order != d.destination_order {
        parts.push(format!("destination-order {:?}", q.destination_order));
    }
    if q.presentation != d.presentation {
        parts.push(format!("presentation {:?}", q.presentation));
    }
    if q.resource_limits != d.resource_limits {
        parts.push(format!("resource-limits {:?}", q.resource_limits));
    }
    if q.lifespan != d.lifespan {
        parts.push(format!("lifespan {}", dur(q.lifespan.duration)));
    }
    parts.join(", ")
}

/// An endpoint's short label: its node's first 8 hex digits and its entity id.
pub fn ep_label(guid: &str) -> String {
    format!("{}:{}", short(guid), guid.get(24..).unwrap_or(""))
}

/// The names of every topic the snapshot lists.
pub fn topic_names(t: &TopicsSnapshot) -> Vec<String> {
    t.topics.iter().map(|t| t.name.clone()).collect()
}

/// [`CliError::UnknownTopic`] unless `topic` is listed, with the close names.
pub fn require_topic(t: &TopicsSnapshot, topic: &str) -> Result<(), CliError> {
    if t.topic(topic).is_some() {
        return Ok(());
    }
    let names = topic_names(t);
    Err(CliError::UnknownTopic {
        topic: topic.to_owned(),
        close: close_names(topic, names.iter().map(String::as_str)),
        known: names.len(),
    })
}

/// The analysis of what the observer sees, for the topics whose names match `pattern`. A
/// pattern without wildcards that names no topic is [`CliError::UnknownTopic`].
pub fn report(
    nodes: &NodesView,
    t: &TopicsSnapshot,
    pattern: Option<&str>,
) -> Result<TopicsReport, CliError> {
    if let Some(p) = pattern.filter(|p| !p.contains(['*', '?'])) {
        require_topic(t, p)?;
    }
    let name_of = |id: &PeerId| nodes.node(id).and_then(|n| n.name.clone());
    let ep = |e: &EndpointView| EndpointReport {
        guid: hex::encode(e.guid),
        kind: kind(e.kind),
        node: e.node.to_string(),
        node_name: name_of(&e.node),
        type_name: e.type_name.clone(),
        type_hash: hex::encode(e.type_hash.0),
        qos: qos_line(&e.qos, e.kind),
        partitions: e.partitions.clone(),
    };
    let matches: BTreeSet<_> = t.matches().iter().copied().collect();
    let mut by_topic: BTreeMap<&str, (Vec<&EndpointView>, Vec<&EndpointView>)> = BTreeMap::new();
    for e in t.writers().chain(t.readers()) {
        if pattern.is_some_and(|p| !glob(p, &e.topic)) {
            continue;
        }
        let slot = by_topic.entry(e.topic.as_str()).or_default();
        match e.kind {
            EndpointKind::Writer => slot.0.push(e),
            EndpointKind::Reader => slot.1.push(e),
        }
    }
    let mut topics = Vec::new();
    for (name, (ws, rs)) in by_topic {
        let mut matched = Vec::new();
        let mut unmatched = Vec::new();
        for w in &ws {
            for r in &rs {
                let pair = |why: String| PairReport {
                    writer: hex::encode(w.guid),
                    reader: hex::encode(r.guid),
                    why,
                };
                let why = explain(w, r);
                if matches.contains(&(w.guid, r.guid)) {
                    matched.push(pair("matched".into()));
                } else if let Err(reasons) = why {
                    unmatched.push(pair(reasons.to_string()));
                } else if w.node == r.node && !w.local {
                    matched.push(pair("matched on its node".into()));
                } else {
                    unmatched.push(pair(
                        "compatible, but not matched here (yet): a table full or the view \
                         still converging"
                            .into(),
                    ));
                }
            }
        }
        let mut warnings = Vec::new();
        let observers = |v: &[&EndpointView]| {
            v.iter()
                .filter(|e| is_observer(name_of(&e.node).as_deref()))
                .count()
        };
        if !ws.is_empty() && rs.len() == observers(&rs) {
            warnings.push(format!(
                "{} writer(s) and no reader{}: nothing written is delivered",
                ws.len(),
                if rs.is_empty() { "" } else { " but observers" }
            ));
        }
        if ws.is_empty() && !rs.is_empty() {
            warnings.push(format!(
                "{} reader(s) and no writer: nothing to read (a writer on a node whose topic \
                 records do not arrive is not seen; see the silent causes)",
                rs.len()
            ));
        }
        let types: BTreeSet<(String, String)> = ws
            .iter()
            .chain(rs.iter())
            .map(|e| (e.type_name.clone(), hex::encode(e.type_hash.0)))
            .collect();
        if types.len() > 1 {
            let list: Vec<String> = types
                .iter()
                .map(|(n, h)| format!("{n} #{}", &h[..8]))
                .collect();
            warnings.push(format!(
                "one topic under {} types: {} (only endpoints of one type match)",
                types.len(),
                list.join(", ")
            ));
        }
        topics.push(TopicReport {
            name: name.to_owned(),
            writers: ws.iter().map(|e| ep(e)).collect(),
            readers: rs.iter().map(|e| ep(e)).collect(),
            matched,
            unmatched,
            warnings,
        });
    }
    Ok(TopicsReport {
        topics,
        silent_nodes: silent_nodes(nodes),
    })
}

/// Members whose topic records never arrive, with why: v1 nodes carry no topic frames;
/// a Shoal node that no path of Shoal nodes from here reaches is behind them.
pub fn silent_nodes(v: &NodesView) -> Vec<SilentNode> {
    let name = |id: &PeerId| {
        v.node(id)
            .and_then(|n| n.name.clone())
            .unwrap_or_else(|| short(&id.to_string()).to_owned())
    };
    // Nodes reachable from here over topic-capable nodes only (topic frames travel so).
    let capable = |id: &PeerId| {
        v.node(id)
            .is_some_and(|n| n.speaks == Speaks::Extensions && n.topic_records)
    };
    let mut reached: BTreeSet<PeerId> = BTreeSet::new();
    let mut queue = VecDeque::from([v.me]);
    reached.insert(v.me);
    while let Some(n) = queue.pop_front() {
        for l in v.node(&n).map(|n| n.links.as_slice()).unwrap_or(&[]) {
            if capable(&l.peer) && reached.insert(l.peer) {
                queue.push_back(l.peer);
            }
        }
    }
    let mut out = Vec::new();
    for n in v.nodes.iter().filter(|n| !n.this_node && !n.topic_records) {
        let v1_neighbours: Vec<String> = n
            .links
            .iter()
            .filter(|l| v.node(&l.peer).is_some_and(|p| p.speaks == Speaks::V1Only))
            .map(|l| name(&l.peer))
            .collect();
        let next_to_reached = n.links.iter().any(|l| reached.contains(&l.peer));
        let why = match n.speaks {
            Speaks::V1Only => "speaks only multimaster v1: it carries broadcasts and \
                               membership but no topic frame, so it has no endpoints and \
                               topic samples route around it (nodes it alone connects cannot \
                               discover each other's endpoints)"
                .to_owned(),
            _ if next_to_reached => "its topic records have not arrived yet (or its lease \
                                     ran out): wait an announce period"
                .to_owned(),
            _ => format!(
                "its topic records never arrive: every path from here to it crosses a \
                 multimaster v1 node{} (which cannot carry topic frames); a writer there \
                 and a reader here, or the reverse, never match (the writer waits for \
                 matched readers that never come)",
                if v1_neighbours.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", v1_neighbours.join(", "))
                }
            ),
        };
        out.push(SilentNode {
            node: n.id.to_string(),
            why,
        });
    }
    out
}

/// The text of a report.
pub fn text(r: &TopicsReport, nodes: &NodesView) -> String {
    let mut out = String::new();
    let who = |e: &EndpointReport| {
        format!(
            "{} on {}",
            ep_label(&e.guid),
            e.node_name.as_deref().unwrap_or(short(&e.node))
        )
    };
    let label = |guid: &str, list: &[EndpointReport]| {
        list.iter()
            .find(|e| e.guid == guid)
            .map_or_else(|| ep_label(guid), who)
    };
    if r.topics.is_empty() {
        let _ = writeln!(out, "no topic");
    }
    for t in &r.topics {
        let _ = writeln!(
            out,
            "topic {}  ({} writer(s), {} reader(s), {} matched pair(s))",
            t.name,
            t.writers.len(),
            t.readers.len(),
            t.matched.len()
        );
        for e in t.writers.iter().chain(t.readers.iter()) {
            let parts = if e.partitions.is_empty() {
                "default partition".to_owned()
            } else {
                format!("partitions {:?}", e.partitions)
            };
            let _ = writeln!(
                out,
                "  {:<6} {}  type {} #{}  {}  {}",
                e.kind,
                who(e),
                e.type_name,
                &e.type_hash[..8],
                e.qos,
                parts
            );
        }
        for p in &t.matched {
            let _ = writeln!(
                out,
                "  matched      {} -> {}{}",
                label(&p.writer, &t.writers),
                label(&p.reader, &t.readers),
                if p.why == "matched" {
                    String::new()
                } else {
                    format!("  ({})", p.why)
                }
            );
        }
        for p in &t.unmatched {
            let _ = writeln!(
                out,
                "  NOT matched  {} -> {}: {}",
                label(&p.writer, &t.writers),
                label(&p.reader, &t.readers),
                p.why
            );
        }
        for w in &t.warnings {
            let _ = writeln!(out, "  ! {w}");
        }
        let _ = writeln!(out);
    }
    if !r.silent_nodes.is_empty() {
        let _ = writeln!(
            out,
            "members whose topic endpoints cannot be seen from here:"
        );
        for s in &r.silent_nodes {
            let id: PeerId = nodes
                .nodes
                .iter()
                .find(|n| n.id.to_string() == s.node)
                .map_or(PeerId::ZERO, |n| n.id);
            let name = nodes
                .node(&id)
                .and_then(|n| n.name.clone())
                .unwrap_or_else(|| "(no name)".into());
            let _ = writeln!(out, "  ! {} {name}: {}", short(&s.node), s.why);
        }
    }
    out
}
