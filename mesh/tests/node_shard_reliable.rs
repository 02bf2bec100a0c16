//! Live nodes over 127.0.0.1: reliable topics in shard tasks. A keep-all writer of a shard
//! task waits for its readers' acknowledgements with an `.await` (its shard serves
//! everything else meanwhile) and fails with `HistoryFull` after `max_blocking_time`; a
//! reliable reader of a shard task gets its loss reports in the inbox with its runs. Every
//! wait is for a condition (bounded), never a fixed sleep.

mod node_support;

use node_support::samples::{matched, seqs, wait_complete};
use node_support::shard_tasks::{join, Guid, Step};
use node_support::wiring::CutProxy;
use node_support::*;
use shoal_mesh::node::shard_task::Delivered;
use shoal_mesh::topics::{
    Limit, QosDuration, Reliability, ReliabilityKind, ResourceLimits, Topic, TopicsConfig,
};
use shoal_mesh::{MeshBuilder, PublishError};
use std::time::{Duration, Instant};

const T: &str = "shard/reliable";

/// [`fast`] with a quick announce cycle and a lease of `lease_ms`.
fn node(lease_ms: u64) -> MeshBuilder {
    fast().topics(TopicsConfig {
        announce_period: Duration::from_millis(200),
        participant_lease: Duration::from_millis(lease_ms),
        ..TopicsConfig::default()
    })
}

fn reliable_topic() -> Topic {
    Topic::new(T, "Blob").reliable()
}

/// A reliable keep-all writer's topic whose writes wait at most `blocking`.
fn keep_all(max_samples: u32, blocking: Duration) -> Topic {
    reliable_topic()
        .history_keep_all()
        .resource_limits(ResourceLimits {
            max_samples: Limit::AtMost(max_samples),
            ..ResourceLimits::default()
        })
        .reliability(Reliability {
            kind: ReliabilityKind::Reliable,
            max_blocking_time: QosDuration::from_nanos(blocking.as_nanos() as u64),
        })
}

/// Sample `seq`'s payload: its number, then filler.
fn payload(seq: u64) -> Vec<u8> {
    let mut p = vec![0x5a; 64];
    p[..8].copy_from_slice(&seq.to_be_bytes());
    p
}

/// A (the writer's node) and B, B dialing A through a proxy that can cut and heal the link.
fn pair_through_proxy(lease_ms: u64) -> ([Node; 2], CutProxy) {
    let a = Node::start(node(lease_ms));
    let proxy = CutProxy::start(a.port());
    let b = Node::start(node(lease_ms).static_peer(ep(proxy.port())));
    let nodes = [a, b];
    wait_connected(&nodes, &[(0, 1)]);
    (nodes, proxy)
}

/// What the writing task saw once B stopped acknowledging.
#[derive(Debug)]
struct Seen {
    /// `try_write`s of the short writer accepted before it was refused, and why.
    accepted: u64,
    refused: PublishError,
    /// The short writer's `write` after its history filled.
    timed_out: PublishError,
    /// The long writer's last sequence number (its write waited for the heal).
    last_long: u64,
    last_short: u64,
}

/// Two keep-all writers of 100 samples on a shard task of A, one waiting at most 300 ms,
/// the other 30 s, and a reliable reader on B behind a cut proxy: with B cut off,
/// `try_write` says `HistoryFull` at once, `write` awaits and says it after 300 ms, and a
/// write that awaits credit leaves the shard serving other traffic (a thread writer's
/// samples to a local reader go through the same shard meanwhile) until the healed link
/// brings acknowledgements; B then has every sample of both, in order.
#[test]
fn a_shard_writer_awaits_credit_while_its_shard_serves_other_traffic() {
    let ([a, b], proxy) = pair_through_proxy(30_000);
    let r = b.mesh.reader(reliable_topic()).unwrap();
    let (short, long, step) = (Guid::default(), Guid::default(), Step::default());
    let (gs, gl, st) = (short.clone(), long.clone(), step.clone());
    let task = a
        .mesh
        .spawn_on_shard(move |ctx| async move {
            let ms300 = Duration::from_millis(300);
            let mut ws = ctx.writer(keep_all(100, ms300)).await.expect("writer");
            let wl = ctx.writer(keep_all(100, Duration::from_secs(30))).await;
            let mut wl = wl.expect("writer");
            gs.put(ws.guid());
            gl.put(wl.guid());
            st.reached(1).await;
            for seq in 1..=200 {
                ws.write(&payload(seq)).await?;
                wl.write(&payload(seq)).await?;
            }
            ws.flush().await?;
            wl.flush().await?;
            st.set(2);
            // The test cuts B off.
            st.reached(3).await;
            let mut accepted = 0;
            let refused = loop {
                match ws.try_write(&payload(ws.next_seq())) {
                    Ok(_) => accepted += 1,
                    Err(e) => break e,
                }
                assert!(accepted <= 100, "the history holds 100 unacknowledged");
            };
            let t0 = Instant::now();
            let timed_out = ws.write(&payload(ws.next_seq())).await.unwrap_err();
            assert!(t0.elapsed() >= ms300);
            // The long writer fills its history, then its write waits for the heal.
            while wl.try_write(&payload(wl.next_seq())).is_ok() {}
            st.set(4);
            let last_long = wl.write(&payload(wl.next_seq())).await?;
            st.set(5);
            wl.flush().await?;
            // The short writer goes on too, now that B acknowledges again.
            let last_short = ws.write(&payload(ws.next_seq())).await?;
            ws.flush().await?;
            Ok::<_, PublishError>(Seen {
                accepted,
                refused,
                timed_out,
                last_long,
                last_short,
            })
        })
        .expect("spawned");
    let (ws, wl) = (short.wait(), long.wait());
    wait_until(20, "both writers matched on both sides", || {
        [ws, wl]
            .iter()
            .all(|w| matched(&a, *w, r.guid()) && matched(&b, *w, r.guid()))
    });
    step.set(1);
    wait_until(30, "B has the first 200 of both", || {
        step.get() >= 2
            && seqs(&b, r.guid(), ws).len() >= 200
            && seqs(&b, r.guid(), wl).len() >= 200
    });
    proxy.cut();
    wait_until(20, "A sees the link gone", || !a.connected_to(&b));
    step.set(3);
    wait_until(30, "the long writer awaits credit", || step.get() >= 4);
    // Meanwhile the shard serves other traffic: a thread writer to a local reader.
    let other = Topic::new("shard/other", "Blob");
    let local = a.mesh.reader(other.clone()).unwrap();
    let mut w = a.mesh.writer(other).unwrap();
    wait_until(20, "the local pair matched", || {
        matched(&a, w.guid(), local.guid())
    });
    for seq in 1..=50 {
        w.write_blocking(&payload(seq)).unwrap();
    }
    w.flush_blocking().unwrap();
    wait_complete(&a, local.guid(), w.guid(), 50);
    assert_eq!(step.get(), 4, "the credit wait is still on (B is cut off)");
    proxy.heal();
    wait_until(30, "B is back", || a.connected_to(&b) && b.connected_to(&a));
    let seen = join(task, 60).expect("ran").expect("wrote");
    assert!(
        matches!(seen.refused, PublishError::HistoryFull { waited } if waited.is_zero()),
        "try_write says why at once: {seen:?}"
    );
    assert!(seen.accepted <= 100);
    assert!(
        matches!(seen.timed_out, PublishError::HistoryFull { waited } if waited >= Duration::from_millis(300)),
        "write awaits max_blocking_time, then says why: {seen:?}"
    );
    // Reliable: everything written reaches B, in order, once.
    wait_complete(&b, r.guid(), wl, seen.last_long);
    wait_complete(&b, r.guid(), ws, seen.last_short);
}

/// Keep-last 20 on a thread writer of A; the reliable reader in a shard task of B, cut off
/// while 900 samples are written: once healed, the inbox has a loss report for what the
/// history replaced, then the last 20, in order, all picked out by `Reader::owns`.
#[test]
fn a_shard_task_reliable_reader_gets_its_loss_reports_in_the_inbox() {
    let ([a, b], proxy) = pair_through_proxy(30_000);
    let guid = Guid::default();
    let g = guid.clone();
    let task = b
        .mesh
        .spawn_on_shard(move |ctx| async move {
            let mut inbox = ctx.inbox(32).expect("free");
            let r = ctx.reader(reliable_topic()).await.expect("reader");
            g.put(r.guid());
            let (mut batch, mut seqs, mut lost) = (Vec::new(), Vec::new(), Vec::new());
            while seqs.last() != Some(&1000) {
                inbox.recv_batch(&mut batch).await;
                for d in batch.drain(..) {
                    assert!(r.owns(&d), "only this reader's entries: {d:?}");
                    match d {
                        Delivered::Samples(run) => seqs.extend(run.samples.seqs()),
                        Delivered::Lost(l) => {
                            assert_eq!(l.reader, r.guid());
                            lost.push((l.first, l.last));
                        }
                        Delivered::Message(m) => panic!("no messages here: {m:?}"),
                    }
                }
            }
            (seqs, lost)
        })
        .expect("spawned");
    let rg = guid.wait();
    let mut w = a
        .mesh
        .writer(reliable_topic().history_keep_last(20))
        .unwrap();
    wait_until(20, "matched on both sides", || {
        matched(&a, w.guid(), rg) && matched(&b, w.guid(), rg)
    });
    let write_to = |w: &mut shoal_mesh::topics::Writer, last: u64| {
        while w.next_seq() <= last {
            w.write_blocking(&payload(w.next_seq())).unwrap();
        }
        w.flush_blocking().unwrap();
    };
    write_to(&mut w, 100);
    wait_until(30, "B delivered the first 100", || {
        b.mesh.topics().topic(T).map_or(0, |t| t.stats.delivered) >= 100
    });
    proxy.cut();
    wait_until(20, "A sees the link gone", || !a.connected_to(&b));
    write_to(&mut w, 1000);
    proxy.heal();
    wait_until(30, "B is back", || a.connected_to(&b) && b.connected_to(&a));
    let (seqs, lost) = join(task, 60).expect("ran");
    assert_eq!(&seqs[..100], &(1..=100).collect::<Vec<_>>()[..]);
    let kept: Vec<u64> = seqs.iter().copied().filter(|s| *s > 100).collect();
    assert_eq!(
        kept,
        (981..=1000).collect::<Vec<_>>(),
        "the last 20, in order"
    );
    assert!(!lost.is_empty(), "what the history replaced was reported");
    let reported: u64 = lost.iter().map(|(f, l)| l - f + 1).sum();
    assert_eq!(reported, 880, "101..=980, once: {lost:?}");
    assert!(
        b.rec.events().iter().all(|e| !matches!(
            e,
            shoal_mesh::Event::Sample { .. } | shoal_mesh::Event::SamplesLost { .. }
        )),
        "nothing of the reader's went to the event queue"
    );
}
