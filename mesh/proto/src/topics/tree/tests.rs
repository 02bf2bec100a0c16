//! Tests of the route trees and slots.
//!
//! Length: one test per behaviour of the issue-12 rule plus the small mesh harness they all
//! share (records, links, following routes hop by hop); splitting would part the harness
//! from its only users.

use super::*;
use proptest::prelude::*;

fn p(n: u8) -> PeerId {
    PeerId([n; 16])
}

/// An endpoint GUID on `node`: the node's 12-byte prefix, then entity `e`.
fn guid(node: PeerId, e: u16) -> EndpointGuid {
    let mut g = [0u8; 16];
    g[..12].copy_from_slice(&node.0[..12]);
    g[14..].copy_from_slice(&e.to_be_bytes());
    g
}

/// A writer and the nodes hosting its matched readers (one reader per node).
#[derive(Debug, Clone)]
struct Spec {
    e: u16,
    node: PeerId,
    readers: Vec<PeerId>,
}

impl Spec {
    fn writer(&self) -> EndpointGuid {
        guid(self.node, self.e)
    }
    fn reader_on(&self, node: PeerId) -> EndpointGuid {
        guid(node, self.e | 0x8000)
    }
}

/// A test mesh: every node's membership record, the capable nodes, one link id per
/// undirected edge (both ends use it, so a link names its two ends).
struct Net {
    records: Vec<(PeerId, Vec<PeerId>)>,
    capable: AHashSet<PeerId>,
    ids: AHashMap<(PeerId, PeerId), LinkId>,
}

fn key(a: PeerId, b: PeerId) -> (PeerId, PeerId) {
    (a.min(b), a.max(b))
}

impl Net {
    /// Every node capable, every edge listed by both ends.
    fn new(nodes: &[PeerId], edges: &[(PeerId, PeerId)]) -> Net {
        let mut net = Net {
            records: nodes.iter().map(|n| (*n, Vec::new())).collect(),
            capable: nodes.iter().copied().collect(),
            ids: AHashMap::new(),
        };
        for &(a, b) in edges {
            net.list(a, b);
            net.list(b, a);
        }
        net
    }

    /// `a`'s record lists `b` (and a link between them exists).
    fn list(&mut self, a: PeerId, b: PeerId) {
        let next = LinkId(self.ids.len() as u64 + 1);
        self.ids.entry(key(a, b)).or_insert(next);
        let r = &mut self.records.iter_mut().find(|r| r.0 == a).unwrap().1;
        if !r.contains(&b) {
            r.push(b);
        }
    }

    /// `a`'s record no longer lists `b`.
    fn unlist(&mut self, a: PeerId, b: PeerId) {
        self.records
            .iter_mut()
            .find(|r| r.0 == a)
            .unwrap()
            .1
            .retain(|x| *x != b);
    }

    fn link(&self, a: PeerId, b: PeerId) -> LinkId {
        self.ids[&key(a, b)]
    }

    /// The other end of `l` from `from`.
    fn across(&self, from: PeerId, l: LinkId) -> PeerId {
        let (&(a, b), _) = self.ids.iter().find(|(_, v)| **v == l).unwrap();
        if a == from {
            b
        } else {
            assert_eq!(b, from, "{l:?} does not touch the sender");
            a
        }
    }

    /// `me`'s links: one per node its record lists.
    fn links_of(&self, me: PeerId) -> AHashMap<PeerId, LinkId> {
        let r = &self.records.iter().find(|r| r.0 == me).unwrap().1;
        r.iter().map(|b| (*b, self.link(me, *b))).collect()
    }

    fn route(&self, me: PeerId, specs: &[Spec]) -> RouteOutput {
        self.route_with(me, specs, &self.links_of(me), &self.records)
    }

    fn route_with(
        &self,
        me: PeerId,
        specs: &[Spec],
        links: &AHashMap<PeerId, LinkId>,
        records: &[(PeerId, Vec<PeerId>)],
    ) -> RouteOutput {
        let adjacency = records.iter().map(|(o, l)| (o, l.as_slice()));
        compute_routes(me, adjacency, &self.capable, links, &inputs(me, specs))
    }
}

/// What discovery would hand node `me` for `specs`.
fn inputs(me: PeerId, specs: &[Spec]) -> Vec<WriterInput> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| WriterInput {
            guid: s.writer(),
            node: s.node,
            slot: i as u32,
            topic: Arc::new(TopicCounters::default()),
            reader_nodes: s.readers.iter().copied().filter(|r| *r != me).collect(),
            local_readers: if s.readers.contains(&me) {
                vec![s.reader_on(me)]
            } else {
                Vec::new()
            },
            reliable: None,
        })
        .collect()
}

fn get<'a>(out: &'a RouteOutput, w: &EndpointGuid) -> Option<&'a WriterRoute> {
    out.routes.iter().find(|r| r.writer == *w)
}

type Summary = Vec<(EndpointGuid, u32, bool, Vec<LinkId>, Vec<EndpointGuid>)>;

fn summary(out: &RouteOutput) -> Summary {
    out.routes
        .iter()
        .map(|r| {
            (
                r.writer,
                r.slot,
                r.local,
                r.links.clone(),
                r.readers.clone(),
            )
        })
        .collect()
}

/// Follows every node's routes for `w` from its node: how often each node received the
/// sample and how often each link was crossed.
fn follow(
    net: &Net,
    tables: &AHashMap<PeerId, RouteOutput>,
    w: &Spec,
) -> (AHashMap<PeerId, u32>, AHashMap<LinkId, u32>) {
    let mut received = AHashMap::new();
    let mut crossed = AHashMap::new();
    let mut queue = vec![w.node];
    while let Some(x) = queue.pop() {
        let Some(r) = get(&tables[&x], &w.writer()) else {
            continue;
        };
        for &l in &r.links {
            *crossed.entry(l).or_insert(0) += 1;
            let y = net.across(x, l);
            let n = received.entry(y).or_insert(0);
            *n += 1;
            if *n == 1 {
                queue.push(y);
            }
        }
    }
    (received, crossed)
}

#[test]
fn line_relays_through_the_middle_node_only() {
    let (a, b, c) = (p(1), p(2), p(3));
    let net = Net::new(&[a, b, c], &[(a, b), (b, c)]);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![c],
    };
    // A writer nobody reads still gets its node's entry (its counters count what it writes).
    let lonely = Spec {
        e: 2,
        node: b,
        readers: vec![],
    };
    let specs = [w.clone(), lonely.clone()];

    let at_a = net.route(a, &specs);
    let r = get(&at_a, &w.writer()).unwrap();
    assert!(r.local);
    assert_eq!(r.links, vec![net.link(a, b)]);
    assert!(r.readers.is_empty());
    assert!(get(&at_a, &lonely.writer()).is_none());

    let at_b = net.route(b, &specs);
    let r = get(&at_b, &w.writer()).unwrap();
    assert!(!r.local);
    assert_eq!(r.links, vec![net.link(b, c)]);
    assert!(r.readers.is_empty());
    let r = get(&at_b, &lonely.writer()).unwrap();
    assert!(r.local && r.links.is_empty() && r.readers.is_empty());

    let at_c = net.route(c, &specs);
    let r = get(&at_c, &w.writer()).unwrap();
    assert!(r.links.is_empty());
    assert_eq!(r.readers, vec![w.reader_on(c)]);
    assert!(get(&at_c, &lonely.writer()).is_none());
    for out in [&at_a, &at_b, &at_c] {
        assert_eq!(out.stats.unreachable_readers + out.stats.skipped_no_link, 0);
    }
}

#[test]
fn full_mesh_sends_on_the_direct_links() {
    let n = [p(1), p(2), p(3), p(4)];
    let mut edges = Vec::new();
    for i in 0..4 {
        for j in i + 1..4 {
            edges.push((n[i], n[j]));
        }
    }
    let net = Net::new(&n, &edges);
    let w = Spec {
        e: 1,
        node: n[0],
        readers: vec![n[1], n[2], n[3]],
    };
    let specs = [w.clone()];
    let at_writer = net.route(n[0], &specs);
    let mut direct: Vec<LinkId> = n[1..].iter().map(|x| net.link(n[0], *x)).collect();
    direct.sort();
    assert_eq!(get(&at_writer, &w.writer()).unwrap().links, direct);
    for x in &n[1..] {
        let out = net.route(*x, &specs);
        let r = get(&out, &w.writer()).unwrap();
        assert!(r.links.is_empty(), "{x:?} forwards");
        assert_eq!(r.readers, vec![w.reader_on(*x)]);
    }
}

#[test]
fn equal_paths_tie_break_on_the_lower_id() {
    // a–b–d and a–c–d: both two hops; b < c, so d's parent is b on every node.
    let (a, b, c, d) = (p(1), p(2), p(3), p(4));
    let net = Net::new(&[a, b, c, d], &[(a, c), (c, d), (a, b), (b, d)]);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![d],
    };
    let specs = [w.clone()];
    assert_eq!(
        get(&net.route(a, &specs), &w.writer()).unwrap().links,
        vec![net.link(a, b)]
    );
    assert_eq!(
        get(&net.route(b, &specs), &w.writer()).unwrap().links,
        vec![net.link(b, d)]
    );
    assert!(get(&net.route(c, &specs), &w.writer()).is_none());
}

/// A 3×3 grid (many equal-length paths) with writers on several nodes.
fn grid() -> (Net, Vec<PeerId>, Vec<Spec>) {
    // Ids not in grid order, so ascending ids differ from construction order.
    let nodes: Vec<PeerId> = [9u8, 4, 7, 1, 8, 2, 6, 3, 5]
        .iter()
        .map(|&n| p(n))
        .collect();
    let mut edges = Vec::new();
    for r in 0..3 {
        for c in 0..3 {
            if c < 2 {
                edges.push((nodes[r * 3 + c], nodes[r * 3 + c + 1]));
            }
            if r < 2 {
                edges.push((nodes[r * 3 + c], nodes[r * 3 + c + 3]));
            }
        }
    }
    let net = Net::new(&nodes, &edges);
    let specs = vec![
        Spec {
            e: 1,
            node: nodes[0],
            readers: vec![nodes[8], nodes[4], nodes[2]],
        },
        Spec {
            e: 2,
            node: nodes[4],
            readers: nodes.clone(),
        },
        Spec {
            e: 3,
            node: nodes[0],
            readers: vec![nodes[6]],
        },
    ];
    (net, nodes, specs)
}

#[test]
fn same_graph_in_any_order_gives_the_same_routes() {
    let (net, nodes, specs) = grid();
    let mut reversed = net.records.clone();
    reversed.reverse();
    for r in &mut reversed {
        r.1.reverse();
    }
    let mut rotated = net.records.clone();
    rotated.rotate_left(4);
    let mut shuffled_specs = specs.clone();
    shuffled_specs.reverse();
    for me in &nodes {
        let links = net.links_of(*me);
        let base = summary(&net.route(*me, &specs));
        assert_eq!(
            base,
            summary(&net.route_with(*me, &specs, &links, &reversed))
        );
        assert_eq!(
            base,
            summary(&net.route_with(*me, &specs, &links, &rotated))
        );
        // Slots follow the writer, not its position.
        let mut moved = net.route(*me, &shuffled_specs);
        for r in &mut moved.routes {
            r.slot = specs.iter().position(|s| s.writer() == r.writer).unwrap() as u32;
        }
        assert_eq!(base, summary(&moved));
    }
}

#[test]
fn a_multimaster_node_is_routed_around() {
    // a–m–b is the lower-id path, a–c–b the other; m does not speak topics.
    let (a, m, b, c) = (p(1), p(2), p(3), p(4));
    let mut net = Net::new(&[a, m, b, c], &[(a, m), (m, b), (a, c), (c, b)]);
    net.capable.remove(&m);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![b],
    };
    let specs = [w.clone()];
    // `a`'s links include the one to `m` here: the tree, not the link map, keeps m out.
    let at_a = net.route(a, &specs);
    assert_eq!(get(&at_a, &w.writer()).unwrap().links, vec![net.link(a, c)]);
    assert_eq!(
        at_a.stats,
        RouteStats {
            trees_built: 1,
            ..RouteStats::default()
        }
    );
    assert_eq!(
        get(&net.route(c, &specs), &w.writer()).unwrap().links,
        vec![net.link(c, b)]
    );
}

#[test]
fn readers_only_behind_a_multimaster_node_are_unreachable_and_counted() {
    let (a, m, b) = (p(1), p(2), p(3));
    let mut net = Net::new(&[a, m, b], &[(a, m), (m, b)]);
    net.capable.remove(&m);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![b],
    };
    let specs = [w.clone()];
    let at_a = net.route(a, &specs);
    let r = get(&at_a, &w.writer()).unwrap();
    assert!(r.local && r.links.is_empty());
    assert_eq!(at_a.stats.unreachable_readers, 1);
    assert_eq!(at_a.stats.skipped_no_link, 0);
    let at_b = net.route(b, &specs);
    // Still delivers locally should a sample arrive, and says it is cut off.
    assert_eq!(
        get(&at_b, &w.writer()).unwrap().readers,
        vec![w.reader_on(b)]
    );
    assert_eq!(at_b.stats.unreached_here, 1);
}

#[test]
fn a_cut_link_moves_the_route_to_the_relay_path() {
    let (a, b, c) = (p(1), p(2), p(3));
    let mut net = Net::new(&[a, b, c], &[(a, b), (b, c), (a, c)]);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![c],
    };
    let specs = [w.clone()];
    assert_eq!(
        get(&net.route(a, &specs), &w.writer()).unwrap().links,
        vec![net.link(a, c)]
    );
    assert!(get(&net.route(b, &specs), &w.writer()).is_none());

    net.unlist(a, c);
    net.unlist(c, a);
    assert_eq!(
        get(&net.route(a, &specs), &w.writer()).unwrap().links,
        vec![net.link(a, b)]
    );
    assert_eq!(
        get(&net.route(b, &specs), &w.writer()).unwrap().links,
        vec![net.link(b, c)]
    );
}

/// A remote writer's samples are taken only from links to neighbours closer to its node (the
/// tree parent among them), never from one as far as this node or farther; a node its view
/// does not connect to the writer's node yet takes them from a direct link only; the
/// writer's own node from no link.
#[test]
fn samples_are_taken_only_from_neighbours_closer_to_the_writers_node() {
    let (a, b, c, d) = (p(1), p(2), p(3), p(4));
    // a–b, a–c, b–c, b–d, c–d: d is two hops from a, over b (the parent) or c.
    let net = Net::new(&[a, b, c, d], &[(a, b), (a, c), (b, c), (b, d), (c, d)]);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![b, d],
    };
    let specs = [w.clone()];
    let route = |net: &Net, at| get(&net.route(at, &specs), &w.writer()).unwrap().clone();
    let at_d = route(&net, d);
    assert_eq!(at_d.upstream, Some(net.link(d, b)));
    let mut both = vec![net.link(d, b), net.link(d, c)];
    both.sort_unstable();
    assert_eq!(at_d.accept_from, both, "b and c are both one hop from a");
    let at_b = route(&net, b);
    assert_eq!(
        at_b.accept_from,
        vec![net.link(b, a)],
        "not c (as far), not d"
    );
    assert!(at_b.accepts_from(net.link(b, a)));
    assert!(!at_b.accepts_from(net.link(b, c)) && !at_b.accepts_from(net.link(b, d)));
    assert!(route(&net, a).accept_from.is_empty(), "a local writer");
    // e links to a, but a's record does not list e yet: e's view does not reach a, so only
    // the direct link is taken (a sends on it once its view has the edge).
    let e = p(5);
    let mut net = Net::new(&[a, b, e], &[(a, b)]);
    net.list(e, a);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![e],
    };
    let at_e = get(&net.route(e, std::slice::from_ref(&w)), &w.writer())
        .unwrap()
        .clone();
    assert_eq!(at_e.upstream, None);
    assert_eq!(at_e.accept_from, vec![net.link(e, a)]);
}

/// Acknowledgements go toward the writer's node hop by hop: each node's `upstream` is its
/// link to its parent in the writer's tree; the writer's own node has none.
#[test]
fn upstream_is_the_link_to_the_tree_parent() {
    let (a, b, c) = (p(1), p(2), p(3));
    let mut net = Net::new(&[a, b, c], &[(a, b), (b, c), (a, c)]);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![b, c],
    };
    let specs = [w.clone()];
    let up = |net: &Net, at| get(&net.route(at, &specs), &w.writer()).unwrap().upstream;
    assert_eq!(up(&net, a), None, "the writer's node is the root");
    assert_eq!(up(&net, b), Some(net.link(b, a)));
    assert_eq!(up(&net, c), Some(net.link(c, a)));
    // Repairs for one reader take the branch toward its node only.
    let ra = get(&net.route(a, &specs), &w.writer()).unwrap().clone();
    let reader_on = |n: PeerId| {
        let mut g = [0u8; 16];
        g[..12].copy_from_slice(&n.0[..12]);
        g
    };
    assert_eq!(ra.link_toward(&reader_on(b)), Some(net.link(a, b)));
    assert_eq!(ra.link_toward(&reader_on(c)), Some(net.link(a, c)));
    assert_eq!(
        ra.link_toward(&reader_on(a)),
        None,
        "no branch toward itself"
    );
    // Without the a–c edge, c's parent is b, and a reaches c through b.
    net.unlist(a, c);
    net.unlist(c, a);
    assert_eq!(up(&net, c), Some(net.link(c, b)));
    assert_eq!(up(&net, b), Some(net.link(b, a)));
    let ra = get(&net.route(a, &specs), &w.writer()).unwrap().clone();
    assert_eq!(ra.link_toward(&reader_on(c)), Some(net.link(a, b)));
    let rb = get(&net.route(b, &specs), &w.writer()).unwrap().clone();
    assert_eq!(rb.link_toward(&reader_on(c)), Some(net.link(b, c)));
}

#[test]
fn an_edge_listed_by_one_side_only_is_not_used() {
    let (a, b, c) = (p(1), p(2), p(3));
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![c],
    };
    let specs = [w.clone()];
    for (lists, silent) in [(a, c), (c, a)] {
        let mut net = Net::new(&[a, b, c], &[(a, b), (b, c), (a, c)]);
        net.unlist(silent, lists);
        // `a` keeps its link to `c` either way: only the records decide.
        let mut links = net.links_of(a);
        links.insert(c, net.link(a, c));
        let at_a = net.route_with(a, &specs, &links, &net.records);
        assert_eq!(
            get(&at_a, &w.writer()).unwrap().links,
            vec![net.link(a, b)],
            "{lists:?} lists {silent:?} alone"
        );
        assert_eq!(
            get(&net.route(b, &specs), &w.writer()).unwrap().links,
            vec![net.link(b, c)]
        );
    }
}

#[test]
fn a_tree_child_without_a_capable_link_is_skipped_and_counted() {
    let (a, b) = (p(1), p(2));
    let net = Net::new(&[a, b], &[(a, b)]);
    let w = Spec {
        e: 1,
        node: a,
        readers: vec![b],
    };
    // `b`'s link did not advertise extended frames.
    let out = net.route_with(a, std::slice::from_ref(&w), &AHashMap::new(), &net.records);
    assert!(get(&out, &w.writer()).unwrap().links.is_empty());
    assert_eq!(out.stats.skipped_no_link, 1);
    assert_eq!(out.stats.unreachable_readers, 0);
}

#[test]
fn slots_are_stable_and_reused_only_after_release() {
    let w = |n: u8| [n; 16];
    let mut s = SlotAllocator::new(3);
    assert_eq!(s.assign(w(1)), Ok(0));
    assert_eq!(s.assign(w(2)), Ok(1));
    assert_eq!(s.assign(w(3)), Ok(2));
    // A recomputation asks again: same slots.
    assert_eq!(s.assign(w(2)), Ok(1));
    assert_eq!(s.assign(w(1)), Ok(0));
    assert_eq!(s.assign(w(4)), Err(SlotsFull { capacity: 3 }));
    assert_eq!(s.rejected(), 1);
    assert_eq!(s.release(&w(2)), Some(1));
    assert_eq!(s.get(&w(2)), None);
    assert_eq!(s.assign(w(4)), Ok(1));
    assert_eq!(s.retain(|g| *g != w(1) && *g != w(3)), 2);
    assert_eq!(s.len(), 1);
    assert_eq!(s.assign(w(5)), Ok(0));
    assert_eq!(s.assign(w(6)), Ok(2));
    assert_eq!(s.get(&w(4)), Some(1));

    // The slot a route carries is the one passed in, across recomputations.
    let (net, nodes, specs) = grid();
    let mut slots = SlotAllocator::new(16);
    let mut first = Vec::new();
    for round in 0..2 {
        let mut inp = inputs(nodes[4], &specs);
        if round == 1 {
            inp.reverse();
        }
        for i in &mut inp {
            i.slot = slots.assign(i.guid).unwrap();
        }
        let adj = net.records.iter().map(|(o, l)| (o, l.as_slice()));
        let out = compute_routes(nodes[4], adj, &net.capable, &net.links_of(nodes[4]), &inp);
        let got: Vec<(EndpointGuid, u32)> = out.routes.iter().map(|r| (r.writer, r.slot)).collect();
        if round == 0 {
            // Writer 3 (corner to corner along an edge) does not pass the centre.
            assert_eq!(got.len(), 2);
            first = got;
        } else {
            assert_eq!(got, first);
        }
    }
}

/// splitmix64: reproducible pseudo-random numbers for the generated graphs.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A random connected graph of `n` nodes with random ids: a random spanning tree plus each
/// other pair with probability `extra` %.
fn random_net(rng: &mut Mix, n: usize, extra: u64) -> (Net, Vec<PeerId>) {
    let mut nodes: Vec<PeerId> = Vec::with_capacity(n);
    while nodes.len() < n {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&rng.next().to_le_bytes());
        id[8..].copy_from_slice(&rng.next().to_le_bytes());
        let id = PeerId(id);
        if !id.is_zero() && !nodes.contains(&id) {
            nodes.push(id);
        }
    }
    let mut edges = Vec::new();
    for i in 1..n {
        edges.push((nodes[i], nodes[rng.below(i)]));
    }
    for i in 0..n {
        for j in i + 1..n {
            if rng.chance(extra) && !edges.contains(&(nodes[j], nodes[i])) {
                edges.push((nodes[i], nodes[j]));
            }
        }
    }
    (Net::new(&nodes, &edges), nodes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn routes_reach_every_reader_once_without_flooding(
        n in 2usize..10,
        extra in 0u64..60,
        seed in any::<u64>(),
    ) {
        let mut rng = Mix(seed);
        let (net, nodes) = random_net(&mut rng, n, extra);
        let specs: Vec<Spec> = (0..1 + rng.below(4))
            .map(|e| Spec {
                e: e as u16,
                node: nodes[rng.below(n)],
                readers: nodes.iter().copied().filter(|_| rng.chance(40)).collect(),
            })
            .collect();
        let tables: AHashMap<PeerId, RouteOutput> =
            nodes.iter().map(|x| (*x, net.route(*x, &specs))).collect();
        for x in &nodes {
            let st = tables[x].stats;
            prop_assert_eq!(st.skipped_no_link + st.unreachable_readers + st.unreached_here, 0);
            // Any order of the records, same routes.
            let mut shuffled = net.records.clone();
            for i in (1..shuffled.len()).rev() {
                let j = rng.below(i + 1);
                shuffled.swap(i, j);
                let k = shuffled[i].1.len();
                shuffled[i].1.rotate_left(rng.below(k.max(1)));
            }
            let again = net.route_with(*x, &specs, &net.links_of(*x), &shuffled);
            prop_assert_eq!(summary(&tables[x]), summary(&again));
        }
        for w in &specs {
            let (received, crossed) = follow(&net, &tables, w);
            prop_assert!(crossed.values().all(|&c| c == 1), "a link crossed twice: {:?}", crossed);
            prop_assert!(!received.contains_key(&w.node), "the sample came back to its writer");
            for r in &w.readers {
                if *r != w.node {
                    prop_assert_eq!(received.get(r).copied(), Some(1), "reader node {:?}", r);
                }
            }
            for x in &nodes {
                let entry = get(&tables[x], &w.writer());
                if *x == w.node {
                    prop_assert!(entry.is_some_and(|e| e.local));
                    continue;
                }
                // Off the tree (or on it but toward no reader): no entry, nothing received.
                prop_assert_eq!(entry.is_some(), received.contains_key(x), "node {:?}", x);
                if let Some(e) = entry {
                    prop_assert!(!e.local);
                    // Agreeing views: what a node is sent, it takes (nothing legitimate is
                    // refused as from the wrong link).
                    for &l in &e.links {
                        let y = net.across(*x, l);
                        let taken = get(&tables[&y], &w.writer()).is_some_and(|r| r.accepts_from(l));
                        prop_assert!(taken, "{:?} refuses what {:?} sends it on {:?}", y, x, l);
                    }
                    let hosts = w.readers.contains(x);
                    prop_assert!(hosts || !e.links.is_empty(), "{:?} got a sample it has no use for", x);
                    prop_assert_eq!(e.readers.clone(), if hosts { vec![w.reader_on(*x)] } else { vec![] });
                }
            }
        }
    }
}

#[test]
fn one_tree_per_distinct_writer_node() {
    let mut rng = Mix(12);
    let (net, nodes) = random_net(&mut rng, 100, 4);
    let specs: Vec<Spec> = (0..1000)
        .map(|e| Spec {
            e,
            // Writers crowd on the first 40 nodes, so many share a node.
            node: nodes[rng.below(40)],
            readers: (0..3).map(|_| nodes[rng.below(100)]).collect(),
        })
        .collect();
    let distinct: AHashSet<PeerId> = specs.iter().map(|s| s.node).collect();
    let out = net.route(nodes[0], &specs);
    println!(
        "100 nodes, {} writers on {} nodes: {} BFS runs, {} routes at one node",
        specs.len(),
        distinct.len(),
        out.stats.trees_built,
        out.routes.len()
    );
    assert_eq!(out.stats.trees_built, distinct.len() as u64);
    assert!(distinct.len() <= 40 && distinct.len() < specs.len());
}
