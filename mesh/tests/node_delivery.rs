//! What a live node delivers reaches the application's callbacks and its event receiver alike,
//! in one order: every sample, and every loss report, once each. The writer is a hand-driven
//! peer (its Hello advertises extended frames) so that a loss report and the samples after it
//! arrive in one read, as a writer's Gap and its next samples do when they travel together.
//! Every wait is for a condition, never a sleep.

mod node_support;

use node_support::samples::{matched, prefix};
use node_support::wiring::RawPeer;
use node_support::{quiet, wait_until, Node};
use shoal_discovery::record::{encode_endpoint, encode_participant};
use shoal_discovery::types::{EndpointInfo, EntityId, Guid, ParticipantInfo, TopicName, TypeName};
use shoal_mesh::topics::{EndpointGuid, EndpointKind, QosDuration, Topic};
use shoal_mesh::wire::{Discovery, DiscoveryEntry, Frame, Gap, Membership, Samples};
use shoal_mesh::{Event, PeerId};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T: &str = "delivery/callbacks";

/// A Sample (`Ok(seq)`) or a loss report (`Err((first, last))`) for one reader.
type Seen = Result<u64, (u64, u64)>;

/// `e` as a [`Seen`] if it is a Sample or a loss report for `reader`.
fn seen(e: &Event, reader: EndpointGuid) -> Option<Seen> {
    match e {
        Event::Sample { reader: r, seq, .. } if *r == reader => Some(Ok(*seq)),
        Event::SamplesLost {
            reader: r,
            first,
            last,
            ..
        } if *r == reader => Some(Err((*first, *last))),
        _ => None,
    }
}

/// The stranger's reliable writer of `T`: its GUID and its announcement (with its
/// participant's, lease 60 s, and its membership record naming `neighbour`).
fn strangers_writer(me: PeerId, neighbour: PeerId) -> (EndpointGuid, Vec<Frame>) {
    let spec = Topic::new(T, "Blob")
        .reliable()
        .validate(EndpointKind::Writer)
        .unwrap();
    let guid = Guid::new(prefix(me), EntityId([0, 0, 1, 0x02]));
    let mut info = EndpointInfo::new(
        guid,
        EndpointKind::Writer,
        TopicName::new(T).unwrap(),
        TypeName::new("Blob").unwrap(),
        spec.type_hash,
    );
    info.qos = spec.qos;
    let mut g = [0; 16];
    g[..12].copy_from_slice(&guid.prefix.0);
    g[12..].copy_from_slice(&guid.entity.0);
    let mut p = ParticipantInfo::new(prefix(me), "stranger");
    p.lease_duration = QosDuration::from_secs(60);
    let announce = Frame::Discovery(Discovery {
        origin: me,
        seq: 1,
        ttl: 8,
        cycle: 1,
        part: 0,
        parts: 1,
        entries: vec![
            DiscoveryEntry::Record(encode_participant(&p).unwrap()),
            DiscoveryEntry::Record(encode_endpoint(&info).unwrap()),
        ],
    });
    let membership = Frame::Membership(Membership {
        origin: me,
        version: 1,
        neighbours: vec![neighbour],
    });
    (g, vec![membership, announce])
}

fn run(writer: EndpointGuid, first: u64, count: u64) -> Frame {
    let payloads: Vec<[u8; 8]> = (first..first + count).map(|s| s.to_be_bytes()).collect();
    Frame::Samples(Samples::new(8, writer, first, payloads).unwrap())
}

/// A reliable reader with a callback registered: the writer says samples 3..=10 are gone
/// (a Gap) and sends 11 and 12 in the same write. The receiver gets 1, 2, the report, 11,
/// 12; so must the callback. Before, the samples that followed a loss report in one read
/// were queued behind it without passing through the delivery sink, where the callbacks
/// run: a callback never saw them.
#[test]
fn a_callback_sees_the_samples_after_a_loss_report_in_the_same_read() {
    let heard: Arc<Mutex<Vec<Event>>> = Arc::default();
    let log = heard.clone();
    let b = Node::start(quiet(Duration::from_millis(200)).on_event(move |e| {
        if matches!(e, Event::Sample { .. } | Event::SamplesLost { .. }) {
            log.lock().unwrap().push(e.clone());
        }
    }));
    let r = b.mesh.reader(Topic::new(T, "Blob").reliable()).unwrap();
    let rg = r.guid();
    let stranger = RawPeer::dial_capable(b.port());
    wait_until(10, "B links with the stranger", || {
        b.mesh.connected_peers().contains(&stranger.id)
    });
    let (wg, records) = strangers_writer(stranger.id, b.id());
    for f in records {
        stranger.send_frame(f);
    }
    wait_until(20, "B matches the stranger's writer", || {
        matched(&b, wg, rg)
    });
    let received = || -> Vec<Seen> { b.rec.events().iter().filter_map(|e| seen(e, rg)).collect() };
    // Until the shard has the route (the match is the control plane's), a run may wait for
    // it; 1 and 2 arrive in order either way.
    stranger.send_frame(run(wg, 1, 2));
    wait_until(20, "the reader has 1 and 2", || received().len() >= 2);
    stranger.send_frames(&[
        Frame::Gap(Gap {
            ttl: 8,
            writer: wg,
            reader: rg,
            first: 3,
            last: 10,
        }),
        run(wg, 11, 1),
        run(wg, 12, 1),
    ]);
    let want: Vec<Seen> = vec![Ok(1), Ok(2), Err((3, 10)), Ok(11), Ok(12)];
    wait_until(20, "the reader has 12", || received().len() >= want.len());
    assert_eq!(received(), want, "the receiver's stream");
    let called: Vec<Seen> = heard
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| seen(e, rg))
        .collect();
    assert_eq!(called, want, "the callback's stream");
    assert!(!stranger.closed(), "well-formed frames keep their link");
    drop(r);
}
