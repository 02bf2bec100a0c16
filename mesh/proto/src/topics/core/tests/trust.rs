//! The topics core believes no frame about someone else (issue 24, findings 1–4, 7, 11):
//! each test is one attack of the issue, sent as the one frame (or few) it takes, and the
//! behaviour the attacked node's users rely on afterwards.

use super::*;

/// Node 1 (V, the victim under test) with writer `w`, linked to node 5 (W, a writer's
/// node) on link 10 and to node 9 (S, a stranger) on link 11; W's participant and one
/// writer of W admitted from W itself, matched with V's reader.
struct Scene {
    v: TopicsCore,
    w_writer: EndpointInfo,
    v_reader: EndpointGuid,
    v_writer: EndpointGuid,
    now: Instant,
    w_seq: u64,
}

const W_LINK: LinkId = LinkId(10);
const S_LINK: LinkId = LinkId(11);

impl Scene {
    fn new() -> Scene {
        let now = Instant::now();
        let mut v = core(1, now);
        v.link_up(W_LINK, id(5), true);
        v.link_up(S_LINK, id(9), true);
        let v_reader = reader(&mut v, "t", &[], now);
        let v_writer = writer(&mut v, "t", &[], now);
        let w_writer = endpoint_info(prefix_of(&id(5)), 0x0100_0002, EndpointKind::Writer, "t");
        let mut s = Scene {
            v,
            w_writer,
            v_reader,
            v_writer,
            now,
            w_seq: 1_000,
        };
        s.w_sends(vec![
            participant_rec(5),
            encode_endpoint(&s.w_writer).unwrap(),
        ]);
        floods(&mut s.v);
        events(&mut s.v);
        assert!(s.matched(&s.w_writer.guid));
        s
    }

    /// W's next genuine frame (outside any cycle), from W.
    fn w_sends(&mut self, recs: Vec<Bytes>) {
        self.w_seq += 1;
        let f = frame(5, self.w_seq, 4, recs);
        self.v.on_discovery(W_LINK, f, false, self.now);
    }

    fn matched(&self, writer: &Guid) -> bool {
        let g = self.v.graph();
        let (Some(w), Some(r)) = (
            g.endpoint_id(writer),
            g.endpoint_id(&guid_of(&self.v_reader)),
        ) else {
            return false;
        };
        g.is_matched(w, r)
    }

    fn has_local_writer(&self) -> bool {
        self.v
            .graph()
            .endpoint_id(&guid_of(&self.v_writer))
            .is_some()
    }
}

/// Finding 1: an origin sharing V's 12-byte prefix withdraws V's own writer.
#[test]
fn a_remote_frame_never_removes_a_local_endpoint() {
    let mut s = Scene::new();
    let mut origin = id(1);
    origin.0[12..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let mut f = frame(0, 1, 4, vec![]);
    f.origin = origin;
    f.entries.push(DiscoveryEntry::Withdraw(s.v_writer));
    s.v.on_discovery(S_LINK, f, false, s.now);
    assert!(s.has_local_writer(), "V still has its writer");
    assert!(
        !events(&mut s.v)
            .iter()
            .any(|e| matches!(e, TopicEvent::Unmatched { .. })),
        "no Unmatched for a local pair"
    );
    assert!(floods(&mut s.v).is_empty(), "not passed on");
    assert_eq!(s.v.stats().foreign_refused, 1);
}

/// Finding 2: an empty one-part "cycle" of W prunes W's endpoints.
#[test]
fn a_cycle_without_the_participant_record_prunes_nothing() {
    let mut s = Scene::new();
    s.w_seq += 1;
    let mut f = frame(5, s.w_seq, 4, vec![]);
    (f.cycle, f.part, f.parts) = (7, 0, 1);
    s.v.on_discovery(W_LINK, f, false, s.now);
    assert!(s.matched(&s.w_writer.guid), "W's writer is still known");
    assert_eq!(s.v.stats().endpoints_pruned, 0);
    // A genuine one-part cycle (participant record first, no endpoint) does prune.
    s.w_seq += 1;
    let mut f = frame(5, s.w_seq, 4, vec![participant_rec(5)]);
    (f.cycle, f.part, f.parts) = (8, 0, 1);
    s.v.on_discovery(W_LINK, f, false, s.now);
    assert!(!s.matched(&s.w_writer.guid));
    assert_eq!(s.v.stats().endpoints_pruned, 1);
}

/// Finding 3: `seq = u64::MAX` under W's id silences W for good.
#[test]
fn a_far_jump_of_a_relayed_seq_is_held_and_the_origin_is_still_heard() {
    let mut s = Scene::new();
    let f = frame(5, u64::MAX, 4, vec![participant_rec(5)]);
    s.v.on_discovery(S_LINK, f, false, s.now);
    assert_eq!(s.v.stats().seq_jumps_held, 1);
    assert!(floods(&mut s.v).is_empty(), "a held frame is not passed on");
    // W's genuine frames keep arriving and keep its lease.
    for k in 1..=4u32 {
        s.now += SEC;
        s.w_sends(vec![participant_rec(5)]);
        s.v.handle_timeout(s.now);
        assert!(s.matched(&s.w_writer.guid), "second {k}: W still matched");
    }
    assert_eq!(s.v.stats().duplicates, 0);
    assert_eq!(s.v.stats().participants_expired, 0);
}

/// Finding 3, the other half: the origin itself may jump (it restarted), and so may a
/// jump confirmed over a second path.
#[test]
fn a_jump_from_the_origin_itself_or_over_two_paths_is_taken() {
    let mut s = Scene::new();
    s.w_seq += 1_000_000;
    s.w_sends(vec![participant_rec(5)]);
    assert_eq!(s.v.stats().seq_jumps_held, 0, "straight from W");
    let relay = LinkId(12);
    s.v.link_up(relay, id(6), true);
    let j = s.w_seq + 1_000_000;
    s.v.on_discovery(
        S_LINK,
        frame(5, j, 4, vec![participant_rec(5)]),
        false,
        s.now,
    );
    s.v.on_discovery(
        relay,
        frame(5, j + 1, 4, vec![participant_rec(5)]),
        false,
        s.now,
    );
    assert_eq!(
        s.v.stats().seq_jumps_held,
        1,
        "the second path confirms the first"
    );
    assert_eq!(s.v.dedup_len(), 1);
}

/// Finding 4: a participant record for W's prefix under another origin X rebinds W's
/// writers to X (trees rooted at X).
#[test]
fn a_prefix_stays_bound_to_the_origin_that_announced_it() {
    let mut s = Scene::new();
    let mut x = id(5);
    x.0[12..].copy_from_slice(&[1, 2, 3, 4]);
    let mut f = frame(0, 1, 4, vec![participant_rec(5)]);
    f.origin = x;
    s.v.on_discovery(S_LINK, f, false, s.now);
    assert_eq!(s.v.stats().prefix_conflicts, 1);
    let m = membership(0, 9, &[(0, 4), (0, 8)], s.now);
    let table = s.v.routes_due(&m, s.now + SEC).expect("a table");
    let route = table
        .get(&guid_bytes(&s.w_writer.guid))
        .expect("W's writer is routed");
    assert_eq!(
        route.accept_from,
        vec![W_LINK],
        "W's samples come from W, not from X"
    );
}

/// The reverse-path check: in a mesh V–W, V–S (S is not on any path to W), S's copy of
/// W's frame is refused, W's own is taken.
#[test]
fn a_frame_from_a_link_not_toward_its_origin_is_refused() {
    let mut s = Scene::new();
    // V (1) linked to W (5) and S (9); S has no link to W.
    let m = membership(0, 9, &[(0, 4), (0, 8)], s.now);
    s.v.routes_due(&m, s.now);
    let mut fake = endpoint_info(prefix_of(&id(5)), 0x0200_0002, EndpointKind::Writer, "t");
    fake.partitions = shoal_discovery::types::Partitions::new(["x"]).unwrap();
    s.w_seq += 1;
    let f = frame(
        5,
        s.w_seq,
        4,
        vec![participant_rec(5), encode_endpoint(&fake).unwrap()],
    );
    s.v.on_discovery(S_LINK, f, false, s.now);
    assert_eq!(s.v.stats().off_path, 1);
    assert!(s.v.graph().endpoint_id(&fake.guid).is_none());
    // The same origin's genuine next frame from W is taken (not a duplicate).
    s.w_sends(vec![participant_rec(5), encode_endpoint(&fake).unwrap()]);
    assert!(s.v.graph().endpoint_id(&fake.guid).is_some());
}

/// Finding 7: a cycle that never completes is given up, and an origin that lists more
/// endpoints than a node may have prunes nothing.
#[test]
fn incomplete_cycles_expire() {
    let mut s = Scene::new();
    s.w_seq += 1;
    let mut f = frame(5, s.w_seq, 4, vec![participant_rec(5)]);
    (f.cycle, f.part, f.parts) = (3, 0, 1000);
    s.v.on_discovery(W_LINK, f, false, s.now);
    s.v.handle_timeout(s.now + SEC * 3);
    assert_eq!(s.v.stats().cycles_expired, 1);
}

/// The work budgets: an origin past its budget is dropped (counted) until it refills.
#[test]
fn an_origin_past_its_work_budget_waits_for_it_to_refill() {
    let now = Instant::now();
    let c = TopicsConfig {
        origin_work_per_sec: 100_000,
        origin_work_burst: 1_000,
        ..cfg()
    };
    let mut v = core_with(1, c, now);
    v.link_up(W_LINK, id(5), true);
    let recs: Vec<Bytes> = std::iter::once(participant_rec(5))
        .chain((0..20).map(|i| {
            let e = endpoint_info(prefix_of(&id(5)), 0x100 + i, EndpointKind::Writer, "t");
            encode_endpoint(&e).unwrap()
        }))
        .collect();
    v.on_discovery(W_LINK, frame(5, 1, 4, recs), false, now);
    assert_eq!(
        v.graph().endpoint_count(),
        20,
        "one frame goes through whole"
    );
    v.on_discovery(W_LINK, frame(5, 2, 4, vec![participant_rec(5)]), false, now);
    assert_eq!(v.stats().budget_dropped, 1, "in debt: dropped");
    v.on_discovery(
        W_LINK,
        frame(5, 3, 4, vec![participant_rec(5)]),
        false,
        now + SEC * 3,
    );
    assert_eq!(v.stats().budget_dropped, 1, "refilled");
}

/// A link past its work budget: its frames are dropped (counted), and its shard is told
/// once to drop its Discovery frames until the budget refills, not once per frame.
#[test]
fn a_link_past_its_work_budget_is_paused_on_its_shard_once_per_spell() {
    let now = Instant::now();
    let c = TopicsConfig {
        link_work_per_sec: 100_000,
        link_work_burst: 1_000,
        ..cfg()
    };
    let mut v = core_with(1, c, now);
    v.link_up(W_LINK, id(5), true);
    let big: Vec<Bytes> = std::iter::once(participant_rec(5))
        .chain((0..20).map(|i| {
            let e = endpoint_info(prefix_of(&id(5)), 0x100 + i, EndpointKind::Writer, "t");
            encode_endpoint(&e).unwrap()
        }))
        .collect();
    v.on_discovery(W_LINK, frame(5, 1, 4, big), false, now);
    let pauses = |v: &mut TopicsCore| {
        std::iter::from_fn(|| v.poll_output())
            .filter_map(|o| match o {
                TopicsOutput::PauseDiscovery { link, until } => Some((link, until)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert!(pauses(&mut v).is_empty(), "the first frame had credit");
    for seq in 2..5 {
        v.on_discovery(
            W_LINK,
            frame(5, seq, 4, vec![participant_rec(5)]),
            false,
            now,
        );
    }
    let p = pauses(&mut v);
    assert_eq!(p.len(), 1, "{p:?}");
    let (link, until) = p[0];
    assert!(link == W_LINK && until > now);
    assert_eq!(v.stats().budget_dropped, 3);
    v.on_discovery(
        W_LINK,
        frame(5, 9, 4, vec![participant_rec(5)]),
        false,
        until,
    );
    assert_eq!(
        v.stats().budget_dropped,
        3,
        "credit again when the pause ends"
    );
}

/// Finding 11: a revoked node's endpoints go at once.
#[test]
fn forgetting_a_node_removes_its_endpoints_with_their_matches() {
    let mut s = Scene::new();
    s.v.forget_node(&id(5));
    assert!(!s.matched(&s.w_writer.guid));
    assert!(!s.v.graph().knows_participant(&prefix_of(&id(5))));
    assert!(events(&mut s.v)
        .iter()
        .any(|e| matches!(e, TopicEvent::Unmatched { .. })));
    assert!(s.has_local_writer());
}

/// A withdrawal forgets only its own reported pairs (it used to walk every reported pair).
#[test]
fn a_withdrawal_forgets_its_own_reported_pairs_only() {
    let mut s = Scene::new();
    let _other = reader(&mut s.v, "t", &["nope"], s.now);
    let mut w2 = endpoint_info(prefix_of(&id(5)), 0x0300_0002, EndpointKind::Writer, "t");
    w2.partitions = shoal_discovery::types::Partitions::new(["elsewhere"]).unwrap();
    s.w_sends(vec![participant_rec(5), encode_endpoint(&w2).unwrap()]);
    let before = s.v.reported_len();
    assert!(before >= 2, "{before}");
    s.w_seq += 1;
    let mut f = frame(5, s.w_seq, 4, vec![]);
    f.entries
        .push(DiscoveryEntry::Withdraw(guid_bytes(&w2.guid)));
    s.v.on_discovery(W_LINK, f, false, s.now);
    assert!(s.v.reported_len() < before);
    assert!(
        s.v.reported_len() > 0,
        "the other writer's pair is still reported"
    );
}
