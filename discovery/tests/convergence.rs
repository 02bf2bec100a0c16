//! The seed's Converge procedure as a deterministic simulation.
//!
//! N participants each hold their own [`DiscoveryGraph`]. Every cycle each
//! live participant runs Announce-Cycle: it resends its participant record and
//! every endpoint record, encoded once with the record codec, to every other
//! participant, which decodes each before admitting it. The channel
//! drops each message independently with probability `drop` (30–90 %) and
//! delays the rest by 0–3 cycles, so records arrive out of order — an endpoint
//! record often before its participant's, which admission must refuse.
//!
//! Liveness (the seed's two assumptions hold by construction: announcements
//! repeat forever, and independent drops with `drop < 1` deliver a message
//! offered infinitely often): every run must reach, within a generous bound,
//! the state where every graph holds exactly the matches that comparing all
//! pairs with [`matching::compatible`] predicts for the live participants.
//! Then some participants crash; the others must expire them by lease and
//! converge on the smaller set.
//!
//! Safety, checked at every delivery and after every cycle:
//! * an endpoint is never known before its participant (an endpoint record
//!   admitted implies its participant was already in that graph;
//!   `check_invariants` re-verifies for every stored endpoint);
//! * no match before both sides are known: every match in a graph joins two
//!   endpoints whose participants that graph knows (one is its own).
//!   A graph cannot observe the peer's knowledge, so "both sides know each
//!   other" is checked as the seed's model states it, per graph.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_discovery::graph::{DiscoveryGraph, GraphConfig, RejectCause, Table};
use shoal_discovery::matching;
use shoal_discovery::qos::{DurabilityKind, QosDuration, ReliabilityKind};
use shoal_discovery::record::{self, Record};
use shoal_discovery::types::*;

const CYCLE_MS: u64 = 100;

/// An announcement on the wire: bytes from the record codec.
type Msg = Vec<u8>;

struct Node {
    info: ParticipantInfo,
    endpoints: Vec<EndpointInfo>,
    /// Build-Announcements: encoded once, resent unchanged every cycle.
    announcements: Vec<Msg>,
    graph: DiscoveryGraph,
    alive: bool,
}

fn make_node(rng: &mut StdRng, n: u8, lease_cycles: u64) -> Node {
    let mut prefix = [0u8; 12];
    prefix[0] = n;
    prefix[11] = 0xAA;
    let prefix = GuidPrefix(prefix);
    let mut info = ParticipantInfo::new(prefix, format!("node{n}"));
    info.lease_duration = QosDuration::from_millis(lease_cycles * CYCLE_MS);
    info.user_locators = vec![Locator::udp_v4([127, 0, 0, n], 7400 + u32::from(n))];
    let mut endpoints = Vec::new();
    for e in 0..4u8 {
        let kind = if e % 2 == 0 {
            EndpointKind::Writer
        } else {
            EndpointKind::Reader
        };
        let topic = rng.gen_range(0..3);
        let mut ep = EndpointInfo::new(
            Guid::new(prefix, EntityId([0, 0, e, 2])),
            kind,
            TopicName::new(format!("topic{topic}")).unwrap(),
            TypeName::new(format!("Type{topic}")).unwrap(),
            // One endpoint in 12 has an unknown type hash and must never match.
            TypeHash(if rng.gen_ratio(1, 12) {
                [0; 16]
            } else {
                [topic + 1; 16]
            }),
        );
        // Some readers ask for reliable or durable delivery that some writers
        // do not offer; some endpoints use partitions.
        if rng.gen_ratio(1, 3) {
            ep.qos.reliability.kind = if kind == EndpointKind::Writer {
                ReliabilityKind::BestEffort
            } else {
                ReliabilityKind::Reliable
            };
        }
        if rng.gen_ratio(1, 4) {
            ep.qos.durability = DurabilityKind::TransientLocal;
        }
        ep.partitions = match rng.gen_range(0..4) {
            0 => Partitions::new(["zone/*"]).unwrap(),
            1 => Partitions::new(["zone/a"]).unwrap(),
            _ => Partitions::default_partition(),
        };
        endpoints.push(ep);
    }
    let mut graph = DiscoveryGraph::new(GraphConfig::default());
    graph.add_local_participant(info.clone()).unwrap();
    for ep in &endpoints {
        graph.add_local_endpoint(ep.clone()).unwrap();
    }
    let mut announcements = vec![record::encode_participant(&info).unwrap().to_vec()];
    announcements.extend(
        endpoints
            .iter()
            .map(|e| record::encode_endpoint(e).unwrap().to_vec()),
    );
    Node {
        info,
        endpoints,
        announcements,
        graph,
        alive: true,
    }
}

/// The matches node `a` must hold once converged: its own endpoints paired
/// with every compatible endpoint of itself and of the live nodes.
fn expected(nodes: &[Node], a: usize) -> BTreeSet<(Guid, Guid)> {
    let mut set = BTreeSet::new();
    let visible: Vec<&EndpointInfo> = nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| *i == a || n.alive)
        .flat_map(|(_, n)| n.endpoints.iter())
        .collect();
    for w in visible.iter().filter(|e| e.kind == EndpointKind::Writer) {
        for r in visible.iter().filter(|e| e.kind == EndpointKind::Reader) {
            let local =
                w.guid.prefix == nodes[a].info.prefix || r.guid.prefix == nodes[a].info.prefix;
            if local && matching::compatible(w, r) {
                set.insert((w.guid, r.guid));
            }
        }
    }
    set
}

fn actual(g: &DiscoveryGraph) -> BTreeSet<(Guid, Guid)> {
    g.matches()
        .into_iter()
        .map(|(w, r)| (g.endpoint(w).unwrap().guid, g.endpoint(r).unwrap().guid))
        .collect()
}

/// Every live node knows exactly the live participants and holds exactly
/// the expected matches.
fn converged(nodes: &[Node]) -> bool {
    let mut live: Vec<GuidPrefix> = nodes
        .iter()
        .filter(|n| n.alive)
        .map(|n| n.info.prefix)
        .collect();
    live.sort();
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.alive)
        .all(|(i, n)| {
            n.graph.participant_prefixes() == live && actual(&n.graph) == expected(nodes, i)
        })
}

struct Sim {
    rng: StdRng,
    nodes: Vec<Node>,
    drop: f64,
    cycle: u64,
    /// In flight: (deliver at cycle, to node, message).
    queue: Vec<(u64, usize, Msg)>,
}

impl Sim {
    fn step(&mut self) {
        let n = self.nodes.len();
        for from in 0..n {
            if !self.nodes[from].alive {
                continue;
            }
            for to in (0..n).filter(|&t| t != from) {
                for msg in &self.nodes[from].announcements {
                    if self.rng.gen_bool(self.drop) {
                        continue;
                    }
                    let at = self.cycle + self.rng.gen_range(0..4);
                    self.queue.push((at, to, msg.clone()));
                }
            }
        }
        let now = Time::from_millis(self.cycle * CYCLE_MS);
        // Deliver what is due, in a random order.
        let mut due: Vec<(usize, Msg)> = Vec::new();
        self.queue.retain(|(at, to, msg)| {
            if *at <= self.cycle {
                due.push((*to, msg.clone()));
                false
            } else {
                true
            }
        });
        for i in (1..due.len()).rev() {
            due.swap(i, self.rng.gen_range(0..=i));
        }
        for (to, msg) in due {
            let node = &mut self.nodes[to];
            if !node.alive {
                continue;
            }
            match record::decode(&msg).expect("own records decode") {
                Record::Participant(p) => {
                    node.graph.admit_participant(p, now).unwrap();
                }
                Record::Endpoint(e) => {
                    let knew = node.graph.knows_participant(&e.guid.prefix);
                    match node.graph.admit_endpoint(e.clone()) {
                        Ok(adm) => {
                            assert!(knew, "endpoint admitted before its participant");
                            for peer in adm.matched {
                                let peer = node.graph.endpoint(peer).unwrap().guid.prefix;
                                assert!(node.graph.is_local_participant(&peer) && knew);
                            }
                        }
                        Err(err) => {
                            assert!(!knew, "known participant's record refused: {err}");
                            assert_eq!(err.cause(), RejectCause::UnknownParticipant);
                        }
                    }
                }
            }
        }
        for node in self.nodes.iter_mut().filter(|n| n.alive) {
            node.graph.expire(now);
            node.graph.check_invariants().unwrap();
            for (w, r) in node.graph.matches() {
                for id in [w, r] {
                    let p = node.graph.endpoint(id).unwrap().guid.prefix;
                    assert!(node.graph.knows_participant(&p));
                }
            }
        }
        self.cycle += 1;
    }

    /// Runs until converged or `max_cycles`; returns cycles used.
    fn run_until_converged(&mut self, max_cycles: u64) -> u64 {
        let start = self.cycle;
        while !converged(&self.nodes) {
            assert!(
                self.cycle - start < max_cycles,
                "not converged after {max_cycles} cycles (drop {})",
                self.drop
            );
            self.step();
        }
        self.cycle - start
    }
}

fn scenario(seed: u64, n: u8, drop: f64, lease_cycles: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let nodes = (1..=n)
        .map(|i| make_node(&mut rng, i, lease_cycles))
        .collect();
    let mut sim = Sim {
        rng,
        nodes,
        drop,
        cycle: 0,
        queue: Vec::new(),
    };
    let total_expected: usize = (0..sim.nodes.len())
        .map(|i| expected(&sim.nodes, i).len())
        .sum();
    assert!(
        total_expected > 2 * usize::from(n),
        "scenario too sparse to prove anything"
    );
    let cycles = sim.run_until_converged(2_000);
    // Refused early endpoint records show the reordering was exercised.
    let refused: u64 = sim
        .nodes
        .iter()
        .map(|n| {
            n.graph
                .rejections()
                .get(Table::RemoteWriters, RejectCause::UnknownParticipant)
                + n.graph
                    .rejections()
                    .get(Table::RemoteReaders, RejectCause::UnknownParticipant)
        })
        .sum();
    eprintln!("seed {seed} n {n} drop {drop}: converged in {cycles} cycles, {total_expected} matches, {refused} early records refused");

    // Two participants crash: the rest must expire them and reconverge.
    sim.nodes[0].alive = false;
    sim.nodes[usize::from(n) / 2].alive = false;
    let cycles = sim.run_until_converged(lease_cycles + 2_000);
    assert!(cycles >= lease_cycles, "expired before the lease ran out");
    for node in sim.nodes.iter().filter(|n| n.alive) {
        for dead in [0, usize::from(n) / 2] {
            assert!(!node.graph.knows_participant(&sim.nodes[dead].info.prefix));
        }
    }
}

#[test]
fn converges_with_30_percent_loss() {
    scenario(1, 8, 0.3, 20);
}

#[test]
fn converges_with_60_percent_loss() {
    scenario(2, 12, 0.6, 60);
}

#[test]
fn converges_with_90_percent_loss() {
    scenario(3, 16, 0.9, 250);
}
