//! `shoal graph`: the membership graph with its links (round-trip times on them) and, for a
//! topic, each writer's tree toward its matched readers, as SVG (drawn here: nodes on a
//! circle, links as lines, trees as coloured arrows) or as Graphviz DOT.
//!
//! A writer's tree is computed as the control plane does: shortest paths from the writer's
//! node over topic-capable nodes (ties broken by the lower node id), kept only on the
//! branches that lead to a node with a matched reader.
//!
//! **Owns:** the drawing and the observer's copy of the tree rule. **Must not touch:** the
//! facts drawn (`Mesh::nodes`, `Mesh::topics`).

use crate::observer::is_observer;
use crate::text::{micros, short};
use shoal_mesh::nodes::{NodesView, Speaks};
use shoal_mesh::topics::{EndpointKind, TopicsSnapshot};
use shoal_mesh::PeerId;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// A link between two nodes, with its round-trip time when reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The lower id end.
    pub a: PeerId,
    /// The higher id end.
    pub b: PeerId,
    /// Round-trip time, µs.
    pub rtt_us: Option<u64>,
}

/// One writer's tree: directed hops from its node toward its matched readers' nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// The writer's GUID, hex.
    pub writer: String,
    /// Its node.
    pub root: PeerId,
    /// Hops (parent, child).
    pub hops: Vec<(PeerId, PeerId)>,
}

/// What is drawn.
#[derive(Debug, Clone)]
pub struct Drawing {
    /// Every node: id, label, protocol, observer.
    pub nodes: Vec<(PeerId, String, Speaks, bool)>,
    /// Every link once.
    pub edges: Vec<Edge>,
    /// The topic's trees (empty without `--topic`).
    pub trees: Vec<Tree>,
    /// The topic drawn.
    pub topic: Option<String>,
}

/// The drawing of a view (with the trees of `topic`, which must be listed).
pub fn drawing(v: &NodesView, t: &TopicsSnapshot, topic: Option<&str>) -> Drawing {
    let nodes = v
        .nodes
        .iter()
        .map(|n| {
            let label = n
                .name
                .clone()
                .unwrap_or_else(|| short(&n.id.to_string()).to_owned());
            (n.id, label, n.speaks, is_observer(n.name.as_deref()))
        })
        .collect();
    let mut edges: BTreeMap<(PeerId, PeerId), Option<u64>> = BTreeMap::new();
    for n in &v.nodes {
        for l in &n.links {
            let key = if n.id < l.peer {
                (n.id, l.peer)
            } else {
                (l.peer, n.id)
            };
            let rtt = l.rtt.map(|d| d.as_micros() as u64);
            let e = edges.entry(key).or_insert(rtt);
            *e = e.or(rtt);
        }
    }
    let edges: Vec<Edge> = edges
        .into_iter()
        .map(|((a, b), rtt_us)| Edge { a, b, rtt_us })
        .collect();
    let trees = topic.map_or_else(Vec::new, |topic| trees(v, t, topic));
    Drawing {
        nodes,
        edges,
        trees,
        topic: topic.map(str::to_owned),
    }
}

/// Each writer's tree on `topic` (see the module docs).
pub fn trees(v: &NodesView, t: &TopicsSnapshot, topic: &str) -> Vec<Tree> {
    let capable: BTreeSet<PeerId> = v
        .nodes
        .iter()
        .filter(|n| n.speaks == Speaks::Extensions && n.topic_records)
        .map(|n| n.id)
        .collect();
    let adj: BTreeMap<PeerId, Vec<PeerId>> = v
        .nodes
        .iter()
        .map(|n| (n.id, n.links.iter().map(|l| l.peer).collect()))
        .collect();
    let readers: BTreeMap<[u8; 16], PeerId> = t
        .readers()
        .filter(|e| e.topic == topic)
        .map(|e| (e.guid, e.node))
        .collect();
    let mut out = Vec::new();
    for w in t
        .writers()
        .filter(|e| e.topic == topic && e.kind == EndpointKind::Writer)
    {
        let targets: BTreeSet<PeerId> = t
            .matches()
            .iter()
            .filter(|(wg, _)| *wg == w.guid)
            .filter_map(|(_, r)| readers.get(r).copied())
            .filter(|n| *n != w.node)
            .collect();
        // BFS in id order: the first parent found for a node is its lowest-id parent at
        // the least distance.
        let mut parent: BTreeMap<PeerId, PeerId> = BTreeMap::new();
        let mut seen = BTreeSet::from([w.node]);
        let mut level = vec![w.node];
        while !level.is_empty() {
            let mut next = BTreeSet::new();
            for n in &level {
                for m in adj.get(n).into_iter().flatten() {
                    if capable.contains(m) && !seen.contains(m) {
                        next.insert(*m);
                        let p = parent.entry(*m).or_insert(*n);
                        if *n < *p {
                            *p = *n;
                        }
                    }
                }
            }
            seen.extend(next.iter().copied());
            level = next.into_iter().collect();
        }
        let mut hops = BTreeSet::new();
        for target in targets {
            // Parents lead back to the root without a cycle (BFS levels); the bound only
            // makes that plain.
            let mut n = target;
            for _ in 0..v.nodes.len() {
                let Some(p) = parent.get(&n) else { break };
                hops.insert((*p, n));
                n = *p;
            }
        }
        out.push(Tree {
            writer: hex::encode(w.guid),
            root: w.node,
            hops: hops.into_iter().collect(),
        });
    }
    out
}

fn colour(s: Speaks) -> &'static str {
    match s {
        Speaks::Extensions => "#2b6cb0",
        Speaks::V1Only => "#c05621",
        Speaks::Unknown => "#718096",
    }
}

const TREE_COLOURS: [&str; 6] = [
    "#2f855a", "#b7791f", "#6b46c1", "#c53030", "#2c7a7b", "#97266d",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Graphviz DOT: links undirected (labelled with their RTT), tree hops as coloured arrows.
pub fn dot(d: &Drawing) -> String {
    let mut s = String::from("digraph mesh {\n  layout=neato; overlap=false; splines=true;\n");
    let _ = writeln!(
        s,
        "  node [shape=box, style=rounded, fontname=\"sans-serif\"];"
    );
    for (id, label, speaks, observer) in &d.nodes {
        let _ = writeln!(
            s,
            "  \"{id}\" [label=\"{}\\n{}\", color=\"{}\"{}];",
            esc(label),
            short(&id.to_string()),
            colour(*speaks),
            if *observer {
                ", style=\"rounded,dashed\""
            } else {
                ""
            }
        );
    }
    for e in &d.edges {
        let _ = writeln!(
            s,
            "  \"{}\" -> \"{}\" [dir=none{}];",
            e.a,
            e.b,
            e.rtt_us
                .map(|us| format!(", label=\"{}\"", micros(us)))
                .unwrap_or_default()
        );
    }
    for (i, t) in d.trees.iter().enumerate() {
        for (p, c) in &t.hops {
            let _ = writeln!(
                s,
                "  \"{p}\" -> \"{c}\" [color=\"{}\", penwidth=2, label=\"{}\"];",
                TREE_COLOURS[i % TREE_COLOURS.len()],
                crate::topics::ep_label(&t.writer)
            );
        }
    }
    s.push_str("}\n");
    s
}

/// SVG: nodes on a circle (the observer's own node at the top), links as grey lines with
/// their RTT, each writer's tree as coloured arrows, a legend.
pub fn svg(d: &Drawing) -> String {
    let n = d.nodes.len().max(1);
    let radius = 60.0 + 45.0 * n as f64;
    let (w, h) = (2.0 * radius + 360.0, 2.0 * radius + 220.0);
    let (cx, cy) = (radius + 180.0, radius + 110.0);
    let pos: BTreeMap<PeerId, (f64, f64)> = d
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (id, ..))| {
            let a = -std::f64::consts::FRAC_PI_2 + 2.0 * std::f64::consts::PI * i as f64 / n as f64;
            (*id, (cx + radius * a.cos(), cy + radius * a.sin()))
        })
        .collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"sans-serif\" font-size=\"13\">"
    );
    s.push_str(
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">\
         <path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"context-stroke\"/></marker></defs>\n",
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let title = match &d.topic {
        Some(t) => format!(
            "Shoal mesh: {} nodes, {} links; topic {t}",
            n,
            d.edges.len()
        ),
        None => format!("Shoal mesh: {} nodes, {} links", n, d.edges.len()),
    };
    let _ = writeln!(
        s,
        "<text x=\"20\" y=\"28\" font-size=\"16\" font-weight=\"bold\">{}</text>",
        esc(&title)
    );
    for e in &d.edges {
        let (Some(&(x1, y1)), Some(&(x2, y2))) = (pos.get(&e.a), pos.get(&e.b)) else {
            continue;
        };
        let _ = writeln!(
            s,
            "<line class=\"link\" data-a=\"{}\" data-b=\"{}\" x1=\"{x1:.1}\" y1=\"{y1:.1}\" \
             x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"#a0aec0\" stroke-width=\"2\"/>",
            e.a, e.b
        );
        if let Some(us) = e.rtt_us {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#4a5568\" font-size=\"11\" \
                 text-anchor=\"middle\">{}</text>",
                (x1 + x2) / 2.0,
                (y1 + y2) / 2.0 - 4.0,
                esc(&micros(us))
            );
        }
    }
    for (i, t) in d.trees.iter().enumerate() {
        let c = TREE_COLOURS[i % TREE_COLOURS.len()];
        // Each tree a little off the link line, so several stay apart.
        let off = 5.0 + 4.0 * i as f64;
        for (p, ch) in &t.hops {
            let (Some(&(x1, y1)), Some(&(x2, y2))) = (pos.get(p), pos.get(ch)) else {
                continue;
            };
            let (dx, dy) = (x2 - x1, y2 - y1);
            let len = (dx * dx + dy * dy).sqrt().max(1.0);
            let (ox, oy) = (-dy / len * off, dx / len * off);
            // Stop short of the node's circle.
            let shrink = 34.0 / len;
            let _ = writeln!(
                s,
                "<line class=\"hop\" data-writer=\"{}\" data-from=\"{p}\" data-to=\"{ch}\" \
                 x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" \
                 stroke-width=\"3\" marker-end=\"url(#arrow)\"/>",
                t.writer,
                x1 + dx * shrink + ox,
                y1 + dy * shrink + oy,
                x2 - dx * shrink + ox,
                y2 - dy * shrink + oy
            );
        }
    }
    for (id, label, speaks, observer) in &d.nodes {
        let (x, y) = pos[id];
        let _ = writeln!(
            s,
            "<g class=\"node\" data-id=\"{id}\"><circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"30\" \
             fill=\"#f7fafc\" stroke=\"{}\" stroke-width=\"3\"{}/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" \
             fill=\"#4a5568\">{}</text></g>",
            colour(*speaks),
            if *observer {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            },
            y + 48.0,
            esc(label),
            y + 4.0,
            short(&id.to_string())
        );
    }
    let mut ly = h - 80.0;
    for (what, c, dash) in [
        ("Shoal node", colour(Speaks::Extensions), ""),
        ("multimaster v1 node", colour(Speaks::V1Only), ""),
        ("protocol unknown", colour(Speaks::Unknown), ""),
        (
            "observer (dashed)",
            colour(Speaks::Extensions),
            " stroke-dasharray=\"6 4\"",
        ),
    ] {
        let _ = writeln!(
            s,
            "<circle cx=\"30\" cy=\"{ly:.0}\" r=\"7\" fill=\"#f7fafc\" stroke=\"{c}\" \
             stroke-width=\"3\"{dash}/><text x=\"45\" y=\"{:.0}\">{what}</text>",
            ly + 4.0
        );
        ly += 18.0;
    }
    for (i, t) in d.trees.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{}\">tree of writer {}</text>",
            w - 260.0,
            h - 80.0 + 18.0 * i as f64,
            TREE_COLOURS[i % TREE_COLOURS.len()],
            crate::topics::ep_label(&t.writer)
        );
    }
    s.push_str("</svg>\n");
    s
}
