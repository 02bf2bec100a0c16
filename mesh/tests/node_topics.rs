//! Topics on live nodes in one process, on loopback: writers and readers matched across the
//! mesh, samples with their writer, sequence number and payload, match / unmatch /
//! incompatible events with their reasons, introspection, backpressure, configuration.
//! Every wait is for a condition (bounded), never a fixed sleep.
//!
//! Length: one short test per behaviour of the topics API a user relies on, all on the same
//! loopback helpers (`star`, `samples`, `matched`); the routes across relays, reliability
//! and trust have test files of their own.

mod node_support;

use node_support::{block_on, ep, fast, wait_connected, wait_until, Node};
use shoal_mesh::topics::{
    EndpointGuid, Incompatibility, LocalSide, Policy, Reasons, Topic, TopicError,
};
use shoal_mesh::{Event, MeshBuilder, MeshError, OverflowPolicy, PublishError};
use std::sync::{Arc, Mutex};

const IMU: &str = "sensors/imu";

/// A hub and `n` spokes with the hub as static peer, every link up both ways.
fn star(n: usize, spoke: impl Fn(usize) -> MeshBuilder) -> Vec<Node> {
    let hub = Node::start(fast());
    let mut nodes = vec![hub];
    for i in 0..n {
        let port = nodes[0].port();
        nodes.push(Node::start(spoke(i).static_peer(ep(port))));
    }
    let pairs: Vec<(usize, usize)> = (1..=n).map(|i| (0, i)).collect();
    wait_connected(&nodes, &pairs);
    nodes
}

/// The (writer, seq, payload) of every sample `n` delivered to `reader`.
fn samples(n: &Node, reader: EndpointGuid) -> Vec<(EndpointGuid, u64, Vec<u8>)> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Sample {
                reader: r,
                writer,
                seq,
                payload,
            } if r == reader => Some((writer, seq, payload.to_vec())),
            _ => None,
        })
        .collect()
}

fn matched(n: &Node, w: EndpointGuid, r: EndpointGuid) -> bool {
    n.rec
        .has(|e| matches!(e, Event::Matched { writer, reader, .. } if *writer == w && *reader == r))
}

/// The reasons of the `Incompatible` events `n` raised for the pair.
fn incompatible(n: &Node, w: EndpointGuid, r: EndpointGuid) -> Vec<Reasons> {
    n.rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Incompatible {
                writer,
                reader,
                reasons,
                ..
            } if writer == w && reader == r => Some(reasons),
            _ => None,
        })
        .collect()
}

#[test]
fn only_the_matching_partition_receives_and_the_other_hears_why() {
    let nodes = star(2, |_| fast());
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let mut w = a
        .mesh
        .writer(Topic::new(IMU, "Imu").partitions(["robot/1"]))
        .unwrap();
    let rb = b
        .mesh
        .reader(Topic::new(IMU, "Imu").partitions(["robot/*"]))
        .unwrap();
    let rc = c
        .mesh
        .reader(Topic::new(IMU, "Imu").partitions(["arm/?"]))
        .unwrap();
    // A control topic C does read, to know when C has seen everything A sent before it.
    let mut done = a.mesh.writer(Topic::new("done", "Done")).unwrap();
    let rc_done = c.mesh.reader(Topic::new("done", "Done")).unwrap();
    wait_until(20, "A's writer matches B's reader (both sides)", || {
        matched(a, w.guid(), rb.guid()) && matched(b, w.guid(), rb.guid())
    });
    wait_until(20, "A's done writer matches C's reader", || {
        matched(a, done.guid(), rc_done.guid())
    });
    wait_until(20, "C hears why its reader does not match", || {
        !incompatible(c, w.guid(), rc.guid()).is_empty()
    });
    let why = incompatible(c, w.guid(), rc.guid());
    assert_eq!(why.len(), 1, "said once per pair: {why:?}");
    assert!(why[0].partitions(), "names the partitions: {}", why[0]);
    assert!(
        why[0].policies().is_empty(),
        "no policy at fault: {}",
        why[0]
    );
    let text = why[0].to_string();
    assert!(text.contains("robot/1") && text.contains("arm/?"), "{text}");

    for i in 1..=20u8 {
        assert_eq!(w.write_blocking(&[i; 12]).unwrap(), u64::from(i));
    }
    w.flush_blocking().unwrap();
    done.write_blocking(b"end").unwrap();
    done.flush_blocking().unwrap();
    wait_until(20, "B has all 20 samples", || {
        samples(b, rb.guid()).len() >= 20
    });
    let got = samples(b, rb.guid());
    let want: Vec<_> = (1..=20u8)
        .map(|i| (w.guid(), u64::from(i), vec![i; 12]))
        .collect();
    assert_eq!(
        got, want,
        "writer GUID, seq 1.. in order, payload, once each"
    );
    wait_until(20, "C has the end marker", || {
        !samples(c, rc_done.guid()).is_empty()
    });
    assert!(
        samples(c, rc.guid()).is_empty(),
        "the other partition gets nothing"
    );
    assert!(
        !c.rec
            .has(|e| matches!(e, Event::Sample { writer, .. } if *writer == w.guid())),
        "no sample of the writer reached C at all"
    );
    // Introspection on the writer's node.
    let t = a.mesh.topics();
    let imu = t.topic(IMU).expect("topic listed");
    assert_eq!((imu.writers, imu.readers), (1, 2), "{imu:?}");
    assert_eq!(imu.stats.written, 20, "{imu:?}");
    assert!(t.matches().contains(&(w.guid(), rb.guid())));
    assert!(!t.matches().contains(&(w.guid(), rc.guid())));
    assert!(t.writers().any(|e| e.guid == w.guid() && e.local));
    assert!(t.readers().any(|e| e.guid == rc.guid() && !e.local));
    let tb = b.mesh.topics();
    assert_eq!(tb.topic(IMU).expect("listed on B").stats.delivered, 20);
    drop((rc, rc_done));
}

#[test]
fn a_reliable_reader_and_a_best_effort_writer_name_the_policy() {
    let nodes = star(1, |_| fast());
    let (a, b) = (&nodes[0], &nodes[1]);
    let w = a.mesh.writer(Topic::new(IMU, "Imu").best_effort()).unwrap();
    let r = b.mesh.reader(Topic::new(IMU, "Imu").reliable()).unwrap();
    for n in [a, b] {
        wait_until(20, "both sides hear of the incompatible pair", || {
            !incompatible(n, w.guid(), r.guid()).is_empty()
        });
    }
    let why = &incompatible(b, w.guid(), r.guid())[0];
    assert_eq!(why.policies(), vec![Policy::Reliability], "{why}");
    assert!(!why.partitions() && !why.type_mismatch(), "{why}");
    assert!(why.to_string().contains("Reliability"), "{why}");
    assert!(!matched(a, w.guid(), r.guid()));
}

#[test]
fn a_type_mismatch_names_the_type() {
    let nodes = star(1, |_| fast());
    let (a, b) = (&nodes[0], &nodes[1]);
    let w = a.mesh.writer(Topic::new(IMU, "Imu")).unwrap();
    let r = b.mesh.reader(Topic::new(IMU, "ImuV2")).unwrap();
    wait_until(20, "the reader's node hears of the mismatch", || {
        !incompatible(b, w.guid(), r.guid()).is_empty()
    });
    let why = &incompatible(b, w.guid(), r.guid())[0];
    assert!(why.type_mismatch(), "{why}");
    assert!(
        why.iter().any(|i| matches!(
            i,
            Incompatibility::TypeName { writer, reader } if writer == "Imu" && reader == "ImuV2"
        )),
        "{why}"
    );
    // Same name, different hash: named too.
    let w2 = a
        .mesh
        .writer(Topic::new("other", "T").type_hash([1; 16]))
        .unwrap();
    let r2 = b
        .mesh
        .reader(Topic::new("other", "T").type_hash([2; 16]))
        .unwrap();
    wait_until(20, "the hash mismatch is reported", || {
        !incompatible(b, w2.guid(), r2.guid()).is_empty()
    });
    let why = &incompatible(b, w2.guid(), r2.guid())[0];
    assert!(
        why.iter()
            .any(|i| matches!(i, Incompatibility::TypeHashMismatch)),
        "{why}"
    );
}

#[test]
fn dropping_a_reader_unmatches_it_on_both_sides() {
    let nodes = star(1, |_| fast());
    let (a, b) = (&nodes[0], &nodes[1]);
    let w = a.mesh.writer(Topic::new(IMU, "Imu")).unwrap();
    let r = b.mesh.reader(Topic::new(IMU, "Imu")).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(a, wg, rg) && matched(b, wg, rg)
    });
    assert!(a.rec.has(|e| matches!(
        e,
        Event::Matched { local: LocalSide::Writer, topic, .. } if topic == IMU
    )));
    let clone = r.clone();
    drop(r);
    assert!(
        a.mesh.topics().matches().contains(&(wg, rg)),
        "a clone keeps the reader"
    );
    drop(clone);
    let unmatched = |n: &Node| {
        n.rec.has(
            |e| matches!(e, Event::Unmatched { writer, reader, .. } if *writer == wg && *reader == rg),
        )
    };
    wait_until(20, "unmatched on both sides", || {
        unmatched(a) && unmatched(b)
    });
    wait_until(20, "the writer's node no longer lists the reader", || {
        let t = a.mesh.topics();
        !t.matches().contains(&(wg, rg)) && t.readers().all(|e| e.guid != rg)
    });
}

#[test]
fn try_write_says_why_when_a_link_is_full() {
    const BOUND: usize = 32 * 1024;
    // The reader's node takes events into a queue nobody drains: once it is full its shard
    // stops reading, TCP pushes back and the writer's link queue fills to its bound.
    let silent = fast().event_queue_capacity(64).build().unwrap();
    let _undrained = silent.events();
    silent.start().unwrap();
    let sender = fast()
        .overflow_policy(OverflowPolicy::Block)
        .max_outbound_queue_bytes(BOUND)
        .static_peer(ep(silent.listen_port()))
        .build()
        .unwrap();
    sender.start().unwrap();
    wait_until(20, "sender linked", || {
        sender.connected_peers().contains(&silent.id())
    });
    let mut w = sender
        .writer(Topic::new(IMU, "Imu"))
        .unwrap()
        .with_batch_bytes(0);
    let r = silent.reader(Topic::new(IMU, "Imu")).unwrap();
    // Both sides: the reader's node must route the writer's samples to its reader (whose
    // events nobody takes), or it drops them and its link never backs up.
    let pair = (w.guid(), r.guid());
    wait_until(20, "matched on both nodes", || {
        sender.topics().matches().contains(&pair) && silent.topics().matches().contains(&pair)
    });
    let payload = vec![5u8; 512];
    let mut accepted = 0u64;
    // As fast as it goes (no pause between writes), for at most 30 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let err = loop {
        match w.try_write(&payload) {
            Ok(seq) => {
                accepted += 1;
                assert_eq!(seq, accepted, "numbers only the samples accepted");
            }
            Err(e) => break Some(e),
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
    };
    assert_eq!(err, Some(PublishError::Full));
    assert_eq!(
        w.next_seq(),
        accepted + 1,
        "a refused sample uses no number"
    );
    assert!(matches!(
        w.try_write(&vec![0; w.max_payload() + 1]),
        Err(PublishError::TooLarge { .. })
    ));
    sender.stop();
    silent.stop();
    assert_eq!(w.try_write(b"x"), Err(PublishError::Stopped));
}

#[test]
fn bad_declarations_and_refusals_are_typed_errors() {
    let m = fast().build().unwrap();
    assert!(matches!(
        m.writer(Topic::new("", "T")),
        Err(MeshError::TopicSpec(_))
    ));
    assert!(matches!(
        m.reader(Topic::new("t", "T").history_keep_last(0)),
        Err(MeshError::TopicSpec(_))
    ));
    assert!(matches!(
        m.writer(Topic::new("t", "T")),
        Err(MeshError::NotRunning)
    ));
    m.start().unwrap();
    assert!(m.writer(Topic::new("t", "T")).is_ok());
}

#[test]
fn the_toml_topics_table_is_honoured() {
    let toml = "scouting = false\n[node]\nlisten_addr = \"127.0.0.1\"\n\
                [topics]\nmax_local_endpoints = 2\nannounce_period_ms = 200\n";
    let m = MeshBuilder::from_toml_str(toml).unwrap().build().unwrap();
    m.start().unwrap();
    let _w = m.writer(Topic::new("t", "T")).unwrap();
    let _r = m.reader(Topic::new("t", "T")).unwrap();
    match m.writer(Topic::new("u", "T")) {
        Err(MeshError::Endpoint(TopicError::Refused(e))) => {
            assert!(e.to_string().contains("full"), "{e}")
        }
        other => panic!("a third endpoint must be refused, got {other:?}"),
    }
    // The snapshot follows once the shards have the routes of what the node holds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let t = m.topics();
        let view = t.view.as_ref().expect("a started node publishes its view");
        if view.rejections.total() >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the refusal is counted in the snapshot"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    m.stop();
}

#[test]
fn endpoints_open_from_callbacks_without_deadlock() {
    // From the control plane's thread (a PeerConnected callback) and from a shard's thread
    // (a Sample callback): both wait for the control plane, which must not wait for them.
    let slot: Arc<Mutex<Option<shoal_mesh::Mesh>>> = Arc::default();
    let opened: Arc<Mutex<Vec<Result<EndpointGuid, String>>>> = Arc::default();
    let (s, o) = (slot.clone(), opened.clone());
    let keep: Arc<Mutex<Vec<shoal_mesh::topics::Reader>>> = Arc::default();
    let k = keep.clone();
    let hub = fast().on_event(move |ev| {
        let open =
            matches!(ev, Event::PeerConnected { .. }) || matches!(ev, Event::Sample { seq: 1, .. });
        if !open {
            return;
        }
        let Some(m) = s.lock().unwrap().clone() else {
            return;
        };
        let r = m
            .reader(Topic::new("from-callback", "T"))
            .map(|r| {
                let g = r.guid();
                k.lock().unwrap().push(r);
                g
            })
            .map_err(|e| e.to_string());
        o.lock().unwrap().push(r);
    });
    let a = Node::start(hub);
    *slot.lock().unwrap() = Some(a.mesh.clone());
    let reader = a.mesh.reader(Topic::new(IMU, "Imu")).unwrap();
    let b = Node::start(fast().static_peer(ep(a.port())));
    let mut w = b.mesh.writer(Topic::new(IMU, "Imu")).unwrap();
    // Both sides: samples written before the reader's node routes the writer are lost.
    wait_until(20, "matched", || {
        matched(&b, w.guid(), reader.guid()) && matched(&a, w.guid(), reader.guid())
    });
    w.write_blocking(b"one").unwrap();
    w.flush_blocking().unwrap();
    wait_until(20, "two readers opened from callbacks", || {
        opened.lock().unwrap().len() >= 2
    });
    for r in opened.lock().unwrap().iter() {
        assert!(r.is_ok(), "{r:?}");
    }
    // The snapshot lists them once the route tables that follow their creation are applied
    // (it never shows what the shards do not route yet).
    wait_until(20, "the readers listed", || {
        a.mesh
            .topics()
            .readers()
            .filter(|e| e.topic == "from-callback")
            .count()
            >= 2
    });
    *slot.lock().unwrap() = None;
    keep.lock().unwrap().clear();
}

#[test]
fn handles_dropped_while_unwinding_remove_their_endpoints_without_aborting() {
    let a = Node::start(fast());
    let m = a.mesh.clone();
    // Keeps the topic (and its counters) listed after the unwinding handles are gone.
    let outside = m.reader(Topic::new(IMU, "Imu")).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut w = m
            .writer(Topic::new(IMU, "Imu"))
            .unwrap()
            .with_batch_bytes(1 << 16);
        let _r = m.reader(Topic::new(IMU, "Imu")).unwrap();
        w.try_write(b"pending").unwrap();
        assert_eq!(w.pending(), 1);
        panic!("unwinding with a pending writer and a reader");
    }));
    assert!(
        r.is_err(),
        "the closure panicked, and the process is still here"
    );
    wait_until(20, "both endpoints removed", || {
        let t = a.mesh.topics();
        t.writers().count() == 0 && t.readers().count() == 1
    });
    // The pending sample was handed over (written on the topic, or dropped by a shard that
    // had no route for the writer any more) or counted as discarded: never lost uncounted.
    wait_until(20, "the pending sample is accounted for", || {
        let written = a.mesh.topics().topic(IMU).map_or(0, |t| t.stats.written);
        let s = a.mesh.stats();
        written + s.total.dropped_unrouted_samples + s.unflushed_discarded == 1
    });
    drop(outside);
}

#[test]
fn samples_cross_a_relay_in_order() {
    // A line a - b - c: c's reader hears a's writer through b, which has no endpoint.
    let a = Node::start(fast());
    let b = Node::start(fast().static_peer(ep(a.port())));
    let c = Node::start(fast().static_peer(ep(b.port())));
    let nodes = [a, b, c];
    wait_connected(&nodes, &[(0, 1), (1, 2)]);
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let w = a.mesh.writer(Topic::new(IMU, "Imu")).unwrap();
    let r = c.mesh.reader(Topic::new(IMU, "Imu")).unwrap();
    wait_until(20, "matched at both ends", || {
        matched(a, w.guid(), r.guid()) && matched(c, w.guid(), r.guid())
    });
    // `Matched` can come before the relay's route does (the route needs b's membership
    // records of both links): probe, one sample at a time, until c hears one.
    let mut w = w.with_batch_bytes(0);
    let mut probes = 0u64;
    wait_until(20, "a sample reaches c through b", || {
        probes += 1;
        w.write_blocking(b"probe").unwrap();
        !samples(c, r.guid()).is_empty()
    });
    // Then one batch of many samples and single ones: every one arrives, once, in order.
    let mut w = w.with_batch_bytes(1 << 16);
    for i in 0..100u32 {
        w.write_blocking(&i.to_be_bytes()).unwrap();
    }
    w.flush_blocking().unwrap();
    let mut w = w.with_batch_bytes(0);
    for i in 100..110u32 {
        w.write_blocking(&i.to_be_bytes()).unwrap();
    }
    let last = probes + 110;
    wait_until(20, "c has every sample after the first it heard", || {
        samples(c, r.guid()).last().is_some_and(|s| s.1 == last)
    });
    let got = samples(c, r.guid());
    let first = got[0].1;
    let seqs: Vec<u64> = got.iter().map(|s| s.1).collect();
    assert_eq!(
        seqs,
        (first..=last).collect::<Vec<_>>(),
        "once each, in order"
    );
    for (writer, seq, payload) in &got {
        assert_eq!(*writer, w.guid());
        if *seq > probes {
            assert_eq!(payload[..], ((seq - probes - 1) as u32).to_be_bytes());
        }
    }
    assert!(
        !b.rec.has(|e| matches!(e, Event::Sample { .. })),
        "the relay delivers nothing locally"
    );
    let bt = b.mesh.topics();
    assert!(
        bt.topic(IMU).is_some_and(|t| t.stats.forwarded >= 110),
        "the relay counts what it forwarded: {:?}",
        bt.topic(IMU)
    );
}

#[test]
fn dropping_a_writer_flushes_its_samples_then_unmatches() {
    let nodes = star(1, |_| fast());
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut w = a
        .mesh
        .writer(Topic::new(IMU, "Imu"))
        .unwrap()
        .with_batch_bytes(1 << 16);
    let r = b.mesh.reader(Topic::new(IMU, "Imu")).unwrap();
    let (wg, rg) = (w.guid(), r.guid());
    wait_until(20, "matched on both sides", || {
        matched(a, wg, rg) && matched(b, wg, rg)
    });
    for i in 1..=5u8 {
        w.write_blocking(&[i]).unwrap();
    }
    assert_eq!(w.pending(), 5, "batched, not handed over yet");
    drop(w);
    wait_until(20, "the reader has the five samples", || {
        samples(b, rg).len() >= 5
    });
    let seqs: Vec<u64> = samples(b, rg).iter().map(|s| s.1).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    wait_until(20, "unmatched on the reader's side", || {
        b.rec
            .has(|e| matches!(e, Event::Unmatched { writer, .. } if *writer == wg))
    });
}

#[test]
fn async_writes_and_flushes_deliver_like_blocking_ones() {
    let nodes = star(1, |_| fast());
    let (a, b) = (&nodes[0], &nodes[1]);
    let mut w = a
        .mesh
        .writer(Topic::new(IMU, "Imu"))
        .unwrap()
        .with_batch_bytes(64);
    let r = b.mesh.reader(Topic::new(IMU, "Imu")).unwrap();
    wait_until(20, "matched on both sides", || {
        matched(a, w.guid(), r.guid()) && matched(b, w.guid(), r.guid())
    });
    let seqs = block_on(
        async {
            let mut seqs = Vec::new();
            for i in 0..40u8 {
                seqs.push(w.write(&[i; 10]).await.unwrap());
            }
            w.flush().await.unwrap();
            seqs
        },
        20,
    );
    assert_eq!(seqs, (1..=40).collect::<Vec<u64>>());
    wait_until(20, "40 samples", || samples(b, r.guid()).len() >= 40);
    let got = samples(b, r.guid());
    assert_eq!(
        got.iter().map(|s| s.1).collect::<Vec<_>>(),
        (1..=40).collect::<Vec<u64>>()
    );
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, s)| s.2 == vec![i as u8; 10]));
}

/// The discovery counters a snapshot shows follow every frame, even when nothing the view
/// lists changes (a steady re-announcement): they once changed only with the view or every
/// 64 control steps, so a quiet node (slow heartbeats, one announcing neighbour) showed the
/// same counts for many seconds and a measurement over a window read zero.
#[test]
fn discovery_counters_follow_each_reannouncement_of_an_unchanged_neighbour() {
    let quiet = || node_support::quiet(std::time::Duration::from_millis(300));
    let a = Node::start(quiet());
    let b = Node::start(quiet().static_peer(ep(a.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    let (a, b) = (&nodes[0], &nodes[1]);
    let w = a.mesh.writer(Topic::new(IMU, "Imu")).unwrap();
    let r = b.mesh.reader(Topic::new(IMU, "Imu")).unwrap();
    wait_until(20, "matched on both sides", || {
        matched(a, w.guid(), r.guid()) && matched(b, w.guid(), r.guid())
    });
    // B re-announces the same reader every 300 ms and A hears only B. A's counts must keep
    // up with what B built: each frame shows before B builds five more (measured in B's
    // frames, not in time, so a slow machine slows both alike).
    let (a0, b0) = (
        a.mesh.topics().discovery.frames_in,
        b.mesh.topics().discovery.frames_built,
    );
    let cycles0 = a.mesh.topics().discovery.cycles_completed;
    for _ in 0..5 {
        let target = b.mesh.topics().discovery.frames_built + 1;
        wait_until(20, "B's next frame", || {
            b.mesh.topics().discovery.frames_built >= target
        });
        wait_until(20, "A's snapshot to count B's frames", || {
            let built = b.mesh.topics().discovery.frames_built;
            let seen = a.mesh.topics().discovery.frames_in;
            assert!(
                built <= target + 5,
                "B built {} frames since the start, A's snapshot still shows {} of them",
                built - b0,
                seen - a0
            );
            seen - a0 >= target - b0
        });
    }
    assert!(a.mesh.topics().discovery.cycles_completed >= cycles0 + 5);
    let view = a.mesh.topics().view.expect("started");
    assert!(
        view.endpoints.len() == 2 && view.matches.len() == 1,
        "nothing listed changed: {view:?}"
    );
}
