//! A deterministic, seeded simulation of reliable topics over a hostile network: two writers
//! (node 0: volatile keep-all; node 1: transient-local keep-last deep enough to keep all)
//! and reliable and best-effort readers on nodes 2 to 5. Every frame is encoded and decoded
//! through the wire codec. The links between a writer's node and a reader's node drop 30 % of
//! frames (on links the seed picks), duplicate and reorder some; node 4's links are cut for a
//! while; node 5 is restarted (its readers come back as new GUIDs). Virtual time only.
//!
//! Asserted per seed: every reliable reader delivers exactly the samples it is owed, once, in
//! order (the original ones from seq 1, the restarted volatile one from its start, the
//! restarted transient-local one the history first and then the rest) and reports no loss;
//! best-effort readers miss exactly what the network dropped; the keep-all writer's room hits
//! 0 while node 4 is cut and comes back after. A second test drives a keep-last writer whose
//! reader misses replaced samples: an explicit Gap, reported as `ReaderEvent::Lost`. A third
//! runs the first with a forger (issue 24): every 50 ms it tells every reliable reader that
//! everything from its next seq to `u64::MAX` is gone and exists, and sends each writer
//! AckNacks for every real reader with counts far ahead of the reader's; the same
//! exactly-once delivery holds.

use bytes::{Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::reliable::{
    HistoryKind, ReaderConfig, ReaderEvent, ReliableReader, ReliableWriter, WriterConfig, WriterOut,
};
use shoal_proto::wire::{
    decode_frame, AckNack, DecodeStatus, Frame, Gap, Heartbeat, Samples, SeqSet,
};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

const NODES: usize = 6;
const SAMPLES: u64 = 10_000;
const WRITERS: [[u8; 16]; 2] = [[0xa0; 16], [0xb0; 16]];
/// Samples each writer writes per millisecond (when it has room).
const RATE: u64 = 5;
const CUT_NODE: usize = 4;
const CUT: (u64, u64) = (500, 900);
const RESTART_NODE: usize = 5;
/// Node 5 goes down, its old readers are unmatched, it comes back with new readers.
const RESTART: (u64, u64, u64) = (1200, 1300, 1400);
const LIMIT_MS: u64 = 120_000;

fn payload(w: usize, seq: u64) -> Bytes {
    let mut v = vec![w as u8; 12];
    v[4..].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

fn encode(f: &Frame) -> Bytes {
    let mut b = BytesMut::new();
    f.encode(&mut b).expect("encodes");
    b.freeze()
}

fn reader_cfg() -> ReaderConfig {
    ReaderConfig {
        max_buffered_samples: 2048,
        max_buffered_bytes: 1 << 20,
        ack_period: Duration::from_millis(10),
        ack_every: 4096,
        nack_delay: Duration::from_millis(5),
        sync_retry: Duration::from_millis(50),
    }
}

fn writer_cfg(w: usize) -> WriterConfig {
    WriterConfig {
        history: if w == 0 {
            HistoryKind::KeepAll
        } else {
            HistoryKind::KeepLast { depth: 20_000 }
        },
        max_samples: 512,
        max_bytes: 1 << 20,
        lifespan: None,
        transient_local: w == 1,
        heartbeat_period: Duration::from_millis(20),
        repair_budget: 400,
        repair_period: Duration::from_millis(10),
        max_repair_samples: 64,
        max_repair_bytes: 16 << 10,
        nack_suppression: Duration::from_millis(30),
        ack_timeout: Some(Duration::from_secs(10)),
    }
}

/// One reliable reader and what it delivered.
struct RelReader {
    r: ReliableReader,
    writer: usize,
    got: Vec<u64>,
    /// First seq it is owed.
    owed_from: u64,
    lost_events: u64,
}

/// A best-effort reader: which seqs arrived at all.
struct BeReader {
    writer: usize,
    seen: Vec<bool>,
}

#[derive(Default)]
struct Node {
    up: bool,
    rel: Vec<RelReader>,
    be: Vec<BeReader>,
}

struct Net {
    rng: StdRng,
    /// `lossy[w][n]`: the link between writer node `w` and reader node `n` drops 30 %.
    lossy: [[bool; NODES]; 2],
    queue: BinaryHeap<Reverse<(u64, u64, usize, Bytes)>>,
    order: u64,
    /// Samples of writer `w` that never reached node `n` (their Samples frame was dropped).
    lost_samples: [[u64; NODES]; 2],
}

impl Net {
    /// Sends `f` between writer node `w` and node `to` (either direction), at `now_us`.
    fn send(&mut self, w: usize, other: usize, to: usize, f: &Frame, now_us: u64, cut: bool) {
        let samples = match f {
            Frame::Samples(s) => Some(u64::from(s.count)),
            _ => None,
        };
        let drop = cut || (self.lossy[w][other] && self.rng.gen_bool(0.3));
        if drop {
            if let Some(n) = samples {
                self.lost_samples[w][other] += n;
            }
            return;
        }
        let copies = if self.rng.gen_bool(0.02) { 2 } else { 1 };
        let bytes = encode(f);
        for _ in 0..copies {
            let at = now_us + 2_000 + self.rng.gen_range(0..3_000);
            self.order += 1;
            self.queue
                .push(Reverse((at, self.order, to, bytes.clone())));
        }
    }
}

struct Sim {
    t0: Instant,
    now_us: u64,
    net: Net,
    writers: Vec<ReliableWriter>,
    nodes: Vec<Node>,
    next_guid: u8,
    min_room_in_cut: u32,
    /// A forger sends frames of its making every 50 ms.
    forger: bool,
}

impl Sim {
    fn new(seed: u64, forger: bool) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut lossy = [[false; NODES]; 2];
        for row in &mut lossy {
            for l in row.iter_mut().skip(2) {
                *l = rng.gen_bool(0.5);
            }
        }
        lossy[(seed % 2) as usize][2 + (seed as usize % 4)] = true;
        let t0 = Instant::now();
        let mut sim = Sim {
            t0,
            now_us: 0,
            net: Net {
                rng,
                lossy,
                queue: BinaryHeap::new(),
                order: 0,
                lost_samples: [[0; NODES]; 2],
            },
            writers: (0..2)
                .map(|w| ReliableWriter::new(WRITERS[w], writer_cfg(w)))
                .collect(),
            nodes: (0..NODES).map(|_| Node::default()).collect(),
            next_guid: 1,
            min_room_in_cut: u32::MAX,
            forger,
        };
        for n in 2..NODES {
            sim.nodes[n].up = true;
            sim.add_readers(n);
            if n == 2 || n == 3 {
                for w in 0..2 {
                    sim.nodes[n].be.push(BeReader {
                        writer: w,
                        seen: vec![false; SAMPLES as usize + 1],
                    });
                }
            }
        }
        sim.match_readers();
        sim
    }

    fn now(&self) -> Instant {
        self.t0 + Duration::from_micros(self.now_us)
    }

    fn add_readers(&mut self, n: usize) {
        let now = self.now();
        for (w, writer) in WRITERS.iter().enumerate() {
            let mut guid = [n as u8; 16];
            guid[15] = self.next_guid;
            self.next_guid += 1;
            let owed_from = if w == 0 {
                self.writers[0].next_seq()
            } else {
                1
            };
            self.nodes[n].rel.push(RelReader {
                r: ReliableReader::new(*writer, guid, reader_cfg(), now),
                writer: w,
                got: Vec::new(),
                owed_from,
                lost_events: 0,
            });
        }
    }

    /// Tells each writer its matched readers: those of every node that is up.
    fn match_readers(&mut self) {
        let now = self.now();
        for w in 0..2 {
            let guids: Vec<[u8; 16]> = self
                .nodes
                .iter()
                .filter(|n| n.up)
                .flat_map(|n| n.rel.iter())
                .filter(|r| r.writer == w)
                .map(|r| r.r.reader())
                .collect();
            self.writers[w].set_readers(&guids, now);
        }
    }

    fn cut(&self, n: usize) -> bool {
        let ms = self.now_us / 1000;
        (n == CUT_NODE && (CUT.0..CUT.1).contains(&ms)) || !self.nodes[n].up
    }

    fn deliver(&mut self, to: usize, bytes: Bytes) {
        let now = self.now();
        let Ok(DecodeStatus::Complete { frame, .. }) = decode_frame(&bytes, u32::MAX) else {
            panic!("a frame the sim sent does not decode");
        };
        if to < 2 {
            let Frame::AckNack(a) = frame else {
                panic!("only AckNacks go upstream")
            };
            self.writers[to].on_acknack(&a, now);
            return;
        }
        let node = &mut self.nodes[to];
        if !node.up {
            return;
        }
        let writer_of = |g: &[u8; 16]| WRITERS.iter().position(|w| w == g).expect("a writer");
        match &frame {
            Frame::Samples(s) => {
                let w = writer_of(&s.writer);
                for be in node.be.iter_mut().filter(|b| b.writer == w) {
                    for seq in s.first_seq..=s.last_seq() {
                        be.seen[seq as usize] = true;
                    }
                }
                for rr in node.rel.iter_mut().filter(|r| r.writer == w) {
                    let got = &mut rr.got;
                    rr.r.on_samples(s.first_seq, s.payloads(), now, &mut |seq, p| {
                        assert_eq!(p, payload(w, seq));
                        got.push(seq)
                    });
                }
            }
            Frame::WriterHeartbeat(hb) => {
                let w = writer_of(&hb.writer);
                for rr in node.rel.iter_mut().filter(|r| r.writer == w) {
                    rr.r.on_heartbeat(hb, now);
                }
            }
            Frame::Repair(rep) => {
                let w = writer_of(&rep.writer);
                for rr in node.rel.iter_mut().filter(|r| r.writer == w) {
                    let got = &mut rr.got;
                    rr.r.on_repair(rep, now, &mut |seq, p| {
                        assert_eq!(p, payload(w, seq));
                        got.push(seq)
                    });
                }
            }
            Frame::Gap(g) => {
                let w = writer_of(&g.writer);
                for rr in node.rel.iter_mut().filter(|r| r.writer == w) {
                    let got = &mut rr.got;
                    rr.r.on_gap(g, now, &mut |seq, _| got.push(seq));
                }
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }

    /// One millisecond: arrivals, writes, then what every machine wants sent.
    fn step(&mut self) {
        let ms = self.now_us / 1000;
        if ms == RESTART.0 {
            self.nodes[RESTART_NODE].up = false;
        }
        if ms == RESTART.1 {
            self.nodes[RESTART_NODE].rel.clear();
            self.match_readers();
        }
        if ms == RESTART.2 {
            self.nodes[RESTART_NODE].up = true;
            self.add_readers(RESTART_NODE);
            self.match_readers();
        }
        while let Some(Reverse((at, ..))) = self.net.queue.peek() {
            if *at > self.now_us {
                break;
            }
            let Some(Reverse((_, _, to, bytes))) = self.net.queue.pop() else {
                unreachable!()
            };
            self.deliver(to, bytes);
        }
        let now = self.now();
        for (w, writer) in WRITERS.iter().enumerate() {
            let first = self.writers[w].next_seq();
            let mut n = 0;
            while n < RATE && first + n <= SAMPLES && self.writers[w].room() > 0 {
                let seq = first + n;
                self.writers[w]
                    .on_written(seq, payload(w, seq), now)
                    .expect("room was checked");
                n += 1;
            }
            if n > 0 {
                let s = Samples::new(0, *writer, first, (first..first + n).map(|q| payload(w, q)))
                    .unwrap();
                for to in 2..NODES {
                    let cut = self.cut(to);
                    self.net
                        .send(w, to, to, &Frame::Samples(s.clone()), self.now_us, cut);
                }
            }
            while let Some(out) = self.writers[w].poll_transmit(now) {
                let (frame, dest) = match out {
                    WriterOut::Heartbeat(h) => (Frame::WriterHeartbeat(h), None),
                    WriterOut::Repair(r) => (Frame::Repair(r.clone()), Some(r.reader[0])),
                    WriterOut::Gap(g) => (Frame::Gap(g), Some(g.reader[0])),
                };
                for to in 2..NODES {
                    if dest.is_none_or(|d| usize::from(d) == to) {
                        let cut = self.cut(to);
                        self.net.send(w, to, to, &frame, self.now_us, cut);
                    }
                }
            }
        }
        if self.forger && ms % 50 == 25 {
            self.forge();
        }
        if (CUT.0 + 200..CUT.1).contains(&ms) {
            self.min_room_in_cut = self.min_room_in_cut.min(self.writers[0].room());
        }
        for n in 2..NODES {
            if !self.nodes[n].up {
                continue;
            }
            let cut = self.cut(n);
            for i in 0..self.nodes[n].rel.len() {
                let rr = &mut self.nodes[n].rel[i];
                while let Some(ReaderEvent::Lost { first, last }) = rr.r.poll_event() {
                    rr.lost_events += last - first + 1;
                }
                let w = rr.writer;
                while let Some(a) = rr.r.poll_transmit(now) {
                    self.net.send(w, n, w, &Frame::AckNack(a), self.now_us, cut);
                }
            }
        }
        self.now_us += 1000;
    }

    /// What a forger that the routing layer lets through on a reader's side of a writer's
    /// tree can send a reader (Gaps and Heartbeats reaching `u64::MAX`), and AckNacks naming
    /// a real reader that the writer refuses on its own: counts far ahead of the reader's
    /// (held, never adopted) with bases beyond what was written. (An AckNack with a
    /// plausible count and base, the forger's way to release what the reader lacks, is the
    /// routing layer's to refuse: only the link toward the reader's node carries its
    /// AckNacks, see `shard::reliable`.)
    fn forge(&mut self) {
        let now = self.now();
        for node in self.nodes.iter_mut().filter(|n| n.up) {
            for rr in node.rel.iter_mut() {
                let writer = WRITERS[rr.writer];
                let reader = rr.r.reader();
                let next = rr.r.next_expected().max(1);
                let got = &mut rr.got;
                rr.r.on_gap(
                    &Gap {
                        ttl: 0,
                        writer,
                        reader,
                        first: next,
                        last: u64::MAX,
                    },
                    now,
                    &mut |seq, _| got.push(seq),
                );
                rr.r.on_heartbeat(
                    &Heartbeat {
                        ttl: 0,
                        writer,
                        first: 1,
                        last: u64::MAX,
                    },
                    now,
                );
                // The reader's own count is the number of AckNacks it sent.
                let count = rr.r.stats().acknacks_sent as u32;
                let w = &mut self.writers[rr.writer];
                for forged in [count.wrapping_add(1 << 30), count.wrapping_add(1 << 20)] {
                    w.on_acknack(
                        &AckNack {
                            ttl: 0,
                            writer,
                            reader,
                            count: forged,
                            base: w.next_seq() + 1_000,
                            missing: SeqSet::new(),
                        },
                        now,
                    );
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.writers.iter().all(|w| w.next_seq() > SAMPLES)
            && self
                .nodes
                .iter()
                .all(|n| n.rel.iter().all(|r| r.r.next_expected() == SAMPLES + 1))
    }
}

fn run(seed: u64, forger: bool) {
    let mut sim = Sim::new(seed, forger);
    while !sim.done() {
        assert!(
            sim.now_us / 1000 < LIMIT_MS,
            "seed {seed}: not converged in {LIMIT_MS} ms: writers at {:?}, readers at {:?}",
            sim.writers.iter().map(|w| w.next_seq()).collect::<Vec<_>>(),
            sim.nodes
                .iter()
                .flat_map(|n| n.rel.iter().map(|r| r.r.next_expected()))
                .collect::<Vec<_>>()
        );
        sim.step();
    }
    for (n, node) in sim.nodes.iter().enumerate() {
        for rr in &node.rel {
            let want: Vec<u64> = (rr.owed_from..=SAMPLES).collect();
            assert!(
                rr.got == want,
                "seed {seed} node {n} writer {}: delivered {} samples from {:?}, owed {} from {}",
                rr.writer,
                rr.got.len(),
                rr.got.first(),
                want.len(),
                rr.owed_from
            );
            let st = rr.r.stats();
            assert_eq!(
                (st.lost, rr.lost_events),
                (0, 0),
                "seed {seed}: nothing is lost"
            );
            assert_eq!(st.delivered, want.len() as u64);
        }
        for be in &node.be {
            let missed = (1..=SAMPLES).filter(|&s| !be.seen[s as usize]).count() as u64;
            assert_eq!(
                missed, sim.net.lost_samples[be.writer][n],
                "seed {seed} node {n}: best-effort misses are what the network dropped"
            );
        }
    }
    // The restarted node's readers are new ones; the volatile one starts where it was matched.
    let restarted = &sim.nodes[RESTART_NODE].rel;
    assert!(restarted[0].owed_from > 1 && restarted[1].owed_from == 1);
    assert_eq!(
        sim.min_room_in_cut, 0,
        "seed {seed}: node 4's cut fills the keep-all history"
    );
    let a = sim.writers[0].stats();
    let b = sim.writers[1].stats();
    assert_eq!((a.written, b.written, b.replaced), (SAMPLES, SAMPLES, 0));
    assert!(a.repaired > 0 && b.repaired > 0 && a.heartbeats > 0);
}

#[test]
fn thirty_seeds_deliver_exactly_once_in_order() {
    for seed in 0..30 {
        run(seed, false);
    }
}

/// Issue 24, findings 6 and 9: the forger's frames change nothing a reader delivers.
#[test]
fn ten_seeds_with_a_forger_deliver_exactly_once_in_order() {
    for seed in 100..110 {
        run(seed, true);
    }
}

/// A keep-last writer of depth 16 whose reader is cut off while 95 more samples are written:
/// asking for the replaced ones gets an explicit Gap, reported as lost, and delivery goes on.
#[test]
fn keep_last_replaced_samples_are_gapped_and_reported_lost() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let w_guid = [0xc0; 16];
    let r_guid = [0xd0; 16];
    let mut w = ReliableWriter::new(
        w_guid,
        WriterConfig {
            history: HistoryKind::KeepLast { depth: 16 },
            ..writer_cfg(1)
        },
    );
    let mut r = ReliableReader::new(w_guid, r_guid, reader_cfg(), at(0));
    w.set_readers(&[r_guid], at(0));
    let mut got = Vec::new();
    for seq in 1..=100u64 {
        w.on_written(seq, payload(2, seq), at(seq)).unwrap();
        if seq <= 5 {
            r.on_samples(
                seq,
                std::iter::once(payload(2, seq)),
                at(seq),
                &mut |s, _| got.push(s),
            );
        }
    }
    assert_eq!(w.stats().replaced, 84);
    // Reconnected: frames flow both ways without loss until the reader has caught up.
    let mut ms = 101;
    while r.next_expected() <= 100 {
        assert!(ms < 2_000, "the reader never caught up");
        let now = at(ms);
        while let Some(a) = r.poll_transmit(now) {
            w.on_acknack(&a, now);
        }
        while let Some(out) = w.poll_transmit(now) {
            match out {
                WriterOut::Heartbeat(h) => r.on_heartbeat(&h, now),
                WriterOut::Repair(rep) => r.on_repair(&rep, now, &mut |s, _| got.push(s)),
                WriterOut::Gap(g) => r.on_gap(&g, now, &mut |s, _| got.push(s)),
            }
        }
        ms += 1;
    }
    let want: Vec<u64> = (1..=5).chain(85..=100).collect();
    assert_eq!(got, want);
    assert_eq!(
        r.poll_event(),
        Some(ReaderEvent::Lost { first: 6, last: 84 })
    );
    assert_eq!(r.poll_event(), None);
    assert_eq!(r.stats().lost, 79);
    assert!(w.stats().gaps_sent >= 1);
}
