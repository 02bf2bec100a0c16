//! Admission under a flood of fresh records: a million records of new participants and
//! endpoints never overfill a table (records patched from templates, not encoded one by one).

use super::*;

/// A record template whose 16 bytes `at..at + 16` (a GUID, or a 12-byte prefix and 4 more)
/// are patched per use: fresh records without paying an encoder per record.
struct Template {
    bytes: Vec<u8>,
    at: usize,
}

impl Template {
    fn new(bytes: Bytes, marker: &[u8]) -> Template {
        let at = bytes
            .windows(marker.len())
            .position(|w| w == marker)
            .expect("marker in record");
        Template {
            bytes: bytes.to_vec(),
            at,
        }
    }

    fn with(&self, id: &[u8]) -> Bytes {
        let mut b = self.bytes.clone();
        b[self.at..self.at + id.len()].copy_from_slice(id);
        Bytes::from(b)
    }
}

#[test]
fn a_million_fresh_records_never_overfill_a_table() {
    let now = Instant::now();
    let c = TopicsConfig {
        max_remote_participants: 16,
        max_remote_writers: 64,
        max_remote_readers: 48,
        max_matches: 300,
        max_dedup_origins: 32,
        max_reported_incompatible: 16,
        // The tables' bounds are under test, not the work budgets.
        origin_work_burst: u64::MAX,
        link_work_burst: u64::MAX,
        ..cfg()
    };
    let mut a = core_with(1, c, now);
    let caps = a.cfg.capacities();
    reader(&mut a, "t0", &[], now);
    let mut rng = StdRng::seed_from_u64(12);
    let marker = [0xAB; 16];
    let mut pm = ParticipantInfo::new(GuidPrefix([0xAB; 12]), "p");
    pm.lease_duration = QosDuration::from_secs(3);
    let participant = Template::new(encode_participant(&pm).unwrap(), &marker[..12]);
    let mut endpoints = Vec::new();
    for t in 0..8 {
        for kind in [EndpointKind::Writer, EndpointKind::Reader] {
            let e = endpoint_info(GuidPrefix([0xAB; 12]), 0xABAB_ABAB, kind, &format!("t{t}"));
            endpoints.push(Template::new(encode_endpoint(&e).unwrap(), &marker));
        }
    }
    let (mut fed, mut seq, mut round) = (0u64, 0u64, 0u64);
    while fed < 1_000_000 {
        round += 1;
        // Mostly endpoints of a few known origins, sometimes a fresh random participant.
        let origin = if rng.gen_bool(0.05) {
            let mut fresh = [0u8; 16];
            rng.fill(&mut fresh);
            PeerId(fresh)
        } else {
            id(rng.gen_range(2..24))
        };
        let prefix = &origin.0[..12];
        let mut recs = vec![participant.with(prefix)];
        for _ in 0..19 {
            let mut g = [0u8; 16];
            g[..12].copy_from_slice(prefix);
            rng.fill(&mut g[12..]);
            recs.push(endpoints[rng.gen_range(0..endpoints.len())].with(&g));
        }
        fed += recs.len() as u64;
        seq += 1;
        let mut f = frame(0, seq, 1, recs);
        f.origin = origin;
        deliver(&mut a, f, now + Duration::from_micros(round));
        while a.poll_output().is_some() {}
        while a.poll_event().is_some() {}
        if round % 64 == 0 {
            for t in Table::ALL {
                let (o, cap) = a.occupancy(t);
                assert!(o <= cap, "{t:?}: {o} > {cap}");
            }
            assert!(a.graph().match_count() <= caps.matches);
            // Origins with an admitted participant are pinned besides the 32 others.
            assert!(a.dedup_len() <= 32 + 16 && a.reported_len() <= 16);
        }
    }
    let rej = a.graph().rejections();
    for t in [Table::RemoteWriters, Table::RemoteReaders] {
        let full = rej.get(t, RejectCause::TableFull) + rej.get(t, RejectCause::MatchCapacity);
        assert!(full > 0, "{t:?} never refused");
    }
    assert!(rej.get(Table::RemoteParticipants, RejectCause::TableFull) > 0);
    assert!(rej.get(Table::RemoteWriters, RejectCause::UnknownParticipant) > 0);
    assert!(a.stats().dedup_evicted > 0);
    assert_eq!(a.occupancy(Table::RemoteParticipants).0, 16);
    let v = a.view();
    assert_eq!(v.rejections, *a.graph().rejections());
    assert!(v.match_occupancy.0 <= 300);
}
