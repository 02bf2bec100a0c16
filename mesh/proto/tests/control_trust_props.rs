//! Property (issue 24, identity mode): no sequence of frames from peers other than V changes
//! V's local endpoints or any node's view of V's endpoints. Node V and node A are real
//! control cores linked by a real secured handshake (identity on both ends); A learned V's
//! endpoints from V's signed frames. Authenticated members (their own Ed25519 identities,
//! linked to V and to A over the same handshake; one presents itself as a multimaster node)
//! send any sequence of Discovery and Membership frames: unsigned, signed with their own
//! key, carrying V's genuine signature copied onto altered fields, V's genuine frames
//! replayed, under origin V, a V-prefix twin, A, themselves or anyone, with any seq, cycle and
//! entries; a member whose link a forgery closed connects again. Meanwhile V and A keep
//! exchanging their own frames and time passes. After every frame, V's and A's discovery
//! graphs hold under V's prefix exactly what they held (V's participant and endpoint
//! records, and at V that they are local); at the end V's own endpoints and their matches,
//! and A's view of V's endpoints (bound to node V), are what they were, and V's next
//! genuine frame is still taken by A. (`topics_trust.rs` has the plaintext half.)
//!
//! Length: the harness (two cores over a real handshake, members that connect again) and
//! the grammar of the attacks live together; neither is of use without the other.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use shoal_discovery::qos::{EndpointQos, QosDuration};
use shoal_discovery::record::{encode_endpoint, encode_participant};
use shoal_discovery::types::{
    EndpointInfo, EndpointKind, EntityId, Guid, GuidPrefix, ParticipantInfo, Partitions, TopicName,
    TypeHash, TypeName,
};
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_proto::config::MeshConfig;
use shoal_proto::control::{Action, ControlCore, ControlInit, Handshaking, Progress};
use shoal_proto::crypto::{
    sign_discovery, sign_membership, Handshake, Identity, IdentityPolicy, PskKeys, SecureContext,
};
use shoal_proto::topics::core::prefix_of;
use shoal_proto::wire::{
    decode_frame, DecodeStatus, Discovery, DiscoveryEntry, Frame, Hello, Membership,
    RecordSignature, ShoalExtension, SignedMembership, PROTOCOL_VERSION,
};
use shoal_proto::{DialTarget, LinkId, LinkTimers, PeerId, Role};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WALL: u64 = 1_700_000_000_000;
const PSK: &[u8] = b"signed-records";
const V: u8 = 1;
const A: u8 = 2;
/// The members: two Shoal nodes and one that presents itself as multimaster.
const MEMBERS: [(u8, bool); 3] = [(3, true), (4, true), (5, false)];

fn identity(seed: u8) -> Identity {
    Identity::from_seed(&[seed; 32], &format!("n{seed}")).unwrap()
}

fn id_of(seed: u8) -> PeerId {
    identity(seed).node_id()
}

fn ip(seed: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, seed))
}

fn context(seed: u8, require: bool) -> Arc<SecureContext> {
    let c = SecureContext::new(PskKeys::derive(PSK).unwrap(), b"default").unwrap();
    Arc::new(c.with_identity(identity(seed), IdentityPolicy::open(require)))
}

/// An identity node (V or A); V dials A.
fn node(seed: u8, require: bool, now: Instant) -> ControlCore {
    let cfg = MeshConfig {
        scouting: false,
        psk: "x".into(),
        identity_seed_hex: hex::encode([seed; 32]),
        static_peers: if seed == V {
            vec![format!("10.0.0.{A}:700{A}")]
        } else {
            Vec::new()
        },
        ..MeshConfig::default()
    };
    ControlCore::new(
        ControlInit {
            me: id_of(seed),
            cfg,
            shards: 1,
            listen_port: 7000 + u16::from(seed),
            secure: Some(context(seed, require)),
            seed: [seed; 32],
            epoch: now,
            listen_addrs: vec![format!("10.0.0.{seed}:700{seed}").parse().unwrap()],
        },
        now,
        WALL,
    )
}

fn actions(c: &mut ControlCore) -> Vec<Action> {
    std::iter::from_fn(|| c.poll_action()).collect()
}

fn writes(acts: &[Action], link: LinkId) -> Bytes {
    let mut b = BytesMut::new();
    for a in acts {
        if let Action::Write { link: l, bytes } = a {
            if *l == link {
                b.extend_from_slice(bytes);
            }
        }
    }
    b.freeze()
}

/// Member `seed` completes a secured handshake with `c` (the test plays its side); its link,
/// or `None` when the core refused it.
fn connect_member(
    c: &mut ControlCore,
    seed: u8,
    shoal: bool,
    now: Instant,
    wall: u64,
) -> Option<LinkId> {
    let link = c.on_accepted(Some(ip(seed)), now, wall)?;
    let hello = Hello {
        node_id: id_of(seed),
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 7000 + u16::from(seed),
        group_name: "default".into(),
        nonce: u64::from(seed),
        eph_pub_key: None,
        identity: None,
        shoal: shoal.then(ShoalExtension::current),
    };
    let hs = Handshake::new(
        context(seed, false),
        &mut StdRng::seed_from_u64(u64::from(seed)),
    );
    let mut out = BytesMut::new();
    let mut peer = Handshaking::start(
        LinkId(1),
        Role::Dialer,
        hello,
        Some(hs),
        LinkTimers::from_config(&MeshConfig::default()),
        MeshConfig::default().max_message_bytes,
        None,
        now,
        &mut out,
    );
    for _ in 0..4 {
        if !out.is_empty() {
            let b = out.split().freeze();
            c.on_bytes(link, &b, now, wall);
        }
        let to_peer = writes(&actions(c), link);
        if !to_peer.is_empty()
            && matches!(peer.on_bytes(&to_peer, now, &mut out), Progress::Failed(_))
        {
            return None;
        }
    }
    (!c.is_handshaking(link)).then_some(link)
}

/// Which core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    V,
    A,
}

struct Member {
    seed: u8,
    shoal: bool,
    /// Its links at V and at A while open.
    links: [Option<LinkId>; 2],
}

struct Net {
    v: ControlCore,
    a: ControlCore,
    /// The V–A link at V and at A.
    va: LinkId,
    av: LinkId,
    members: Vec<Member>,
    start: Instant,
    now: Instant,
    /// V's frames as A received them (what members copy signatures from and replay).
    v_disc: Vec<Discovery>,
    v_memb: Vec<SignedMembership>,
    /// V's endpoints.
    v_eps: Vec<[u8; 16]>,
}

impl Net {
    fn new(require: bool) -> Net {
        let now = Instant::now();
        let mut v = node(V, require, now);
        let mut a = node(A, require, now);
        v.start(now, WALL);
        a.start(now, WALL);
        let va = actions(&mut v)
            .iter()
            .find_map(|x| match x {
                Action::Dial {
                    link,
                    target: DialTarget::Endpoint(_),
                } => Some(*link),
                _ => None,
            })
            .expect("V dials A");
        v.on_dial_connected(va, Some(ip(A)), now, WALL);
        let av = a.on_accepted(Some(ip(V)), now, WALL).unwrap();
        for _ in 0..8 {
            let to_a = writes(&actions(&mut v), va);
            if !to_a.is_empty() {
                a.on_bytes(av, &to_a, now, WALL);
            }
            let to_v = writes(&actions(&mut a), av);
            if !to_v.is_empty() {
                v.on_bytes(va, &to_v, now, WALL);
            }
        }
        assert!(
            !v.is_handshaking(va) && !a.is_handshaking(av),
            "V and A linked"
        );
        let mut n = Net {
            v,
            a,
            va,
            av,
            members: Vec::new(),
            start: now,
            now,
            v_disc: Vec::new(),
            v_memb: Vec::new(),
            v_eps: Vec::new(),
        };
        for (seed, shoal) in MEMBERS {
            n.members.push(Member {
                seed,
                shoal,
                links: [None, None],
            });
        }
        for m in 0..n.members.len() {
            for at in [At::V, At::A] {
                n.link(m, at);
            }
        }
        let q = EndpointQos::default_for;
        let mk = |n: &mut Net, kind, topic: &str, parts: &[String]| {
            let (now, wall) = (n.now, n.wall());
            let g =
                n.v.create_endpoint(kind, topic, "T", [7; 16], q(kind), parts, now, wall)
                    .unwrap();
            n.v_eps.push(g);
        };
        mk(&mut n, EndpointKind::Writer, "t", &[]);
        mk(&mut n, EndpointKind::Reader, "t", &[]);
        mk(&mut n, EndpointKind::Writer, "u", &["p".to_string()]);
        let (now, wall) = (n.now, n.wall());
        n.a.create_endpoint(
            EndpointKind::Reader,
            "t",
            "T",
            [7; 16],
            q(EndpointKind::Reader),
            &[],
            now,
            wall,
        )
        .unwrap();
        for _ in 0..40 {
            n.advance(Duration::from_millis(100));
            if n.a_view_of_v().len() == n.v_eps.len() {
                break;
            }
        }
        assert_eq!(n.a_view_of_v().len(), 3, "A learned V's endpoints");
        assert!(!n.v_memb.is_empty() && !n.v_disc.is_empty());
        n
    }

    fn wall(&self) -> u64 {
        WALL + (self.now - self.start).as_millis() as u64
    }

    fn core(&mut self, at: At) -> &mut ControlCore {
        match at {
            At::V => &mut self.v,
            At::A => &mut self.a,
        }
    }

    /// Links member `m` to `at` if it is not (a forgery closed its link); false if refused.
    fn link(&mut self, m: usize, at: At) -> bool {
        let i = at as usize;
        if self.members[m].links[i].is_some() {
            return true;
        }
        let (seed, shoal, now, wall) = (
            self.members[m].seed,
            self.members[m].shoal,
            self.now,
            self.wall(),
        );
        let l = connect_member(self.core(at), seed, shoal, now, wall);
        self.members[m].links[i] = l;
        self.flush();
        l.is_some()
    }

    /// A shard's report on `link` of `at`.
    fn report(&mut self, at: At, r: ToControl) {
        let (now, wall) = (self.now, self.wall());
        self.core(at).on_shard_report(r, now, wall);
    }

    /// A frame read on `link` of `at`, handed over as that link's shard would.
    fn deliver(&mut self, at: At, link: LinkId, f: Frame) {
        let r = match f {
            Frame::Membership(record) => ToControl::MembershipIn { link, record },
            Frame::SignedMembership(m) => ToControl::SignedMembershipIn {
                link,
                record: Box::new(m),
            },
            Frame::Discovery(d) => ToControl::DiscoveryIn {
                link,
                frame: Box::new(d),
            },
            Frame::IdentityRecord(r) => ToControl::IdentityIn {
                link,
                record: Box::new(r),
            },
            _ => return,
        };
        self.report(at, r);
    }

    /// Carries out both cores' shard posts: V's and A's frames to each other arrive; frames
    /// to the members are dropped; a member's closed link is forgotten.
    fn flush(&mut self) {
        for _ in 0..1000 {
            let mut posts = Vec::new();
            for at in [At::V, At::A] {
                while let Some((_, p)) = self.core(at).poll_to_shard() {
                    posts.push((at, p));
                }
                actions(self.core(at));
            }
            if posts.is_empty() {
                return;
            }
            for (at, p) in posts {
                match p {
                    ToShard::Sync(t) => self.report(at, ToControl::Synced(t)),
                    ToShard::SendRaw { link, frame } => {
                        let to = match at {
                            At::V if link == self.va => (At::A, self.av),
                            At::A if link == self.av => (At::V, self.va),
                            _ => continue,
                        };
                        let f = match decode_frame(&frame, u32::MAX) {
                            Ok(DecodeStatus::Complete { frame, .. }) => frame,
                            other => panic!("a whole frame: {other:?}"),
                        };
                        if at == At::V {
                            match &f {
                                Frame::Discovery(d) if d.origin == id_of(V) => {
                                    self.v_disc.push(d.clone())
                                }
                                Frame::SignedMembership(m) if m.record.origin == id_of(V) => {
                                    self.v_memb.push(m.clone())
                                }
                                _ => {}
                            }
                        }
                        self.deliver(to.0, to.1, f);
                    }
                    ToShard::Close { link, .. } => {
                        assert!(
                            !((at == At::V && link == self.va) || (at == At::A && link == self.av)),
                            "the V–A link was closed"
                        );
                        for m in &mut self.members {
                            if m.links[at as usize] == Some(link) {
                                m.links[at as usize] = None;
                            }
                        }
                        self.report(at, ToControl::LinkClosed { link });
                    }
                    _ => {}
                }
            }
        }
        panic!("the cores never went quiet");
    }

    /// Time passes: both cores' timers fire (V keeps announcing, A keeps hearing it).
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let next = self.v.poll_timeout().min(self.a.poll_timeout());
            self.now = next.min(end).max(self.now);
            let (now, wall) = (self.now, self.wall());
            self.v.handle_timeout(now, wall);
            self.a.handle_timeout(now, wall);
            self.flush();
            if self.now >= end {
                return;
            }
        }
    }

    /// Every endpoint V lists under its own prefix (its own, local), and the matches among
    /// its own endpoints.
    fn v_local(&mut self) -> BTreeSet<String> {
        let prefix = prefix_of(&id_of(V)).0;
        let view = self.v.topics_view();
        let mut s: BTreeSet<String> = view
            .endpoints
            .iter()
            .filter(|e| e.local || e.guid[..12] == prefix)
            .map(|e| format!("{e:?}"))
            .collect();
        let own: BTreeSet<[u8; 16]> = self.v_eps.iter().copied().collect();
        s.extend(
            view.matches
                .iter()
                .filter(|(w, r)| own.contains(w) && own.contains(r))
                .map(|m| format!("{m:?}")),
        );
        s
    }

    /// What `at`'s discovery graph holds under V's prefix: the participant record, every
    /// endpoint record in full (QoS and locators included), and whether it is local.
    fn graph_of_v(&self, at: At) -> BTreeSet<String> {
        let c = match at {
            At::V => &self.v,
            At::A => &self.a,
        };
        let g = c.topics().graph();
        let p = prefix_of(&id_of(V));
        let mut s: BTreeSet<String> = g
            .endpoints_of(&p)
            .into_iter()
            .filter_map(|e| Some(format!("{:?}", (g.endpoint(e)?, g.is_local(e)))))
            .collect();
        s.insert(format!("{:?}", g.participant(&p)));
        s
    }

    /// A's view of every endpoint under V's prefix (GUID, kind, topic, type, partitions,
    /// node).
    fn a_view_of_v(&mut self) -> BTreeSet<String> {
        let prefix = prefix_of(&id_of(V)).0;
        self.a
            .topics_view()
            .endpoints
            .iter()
            .filter(|e| e.guid[..12] == prefix)
            .map(|e| format!("{e:?}"))
            .collect()
    }
}

/// Who a forged frame claims to be.
#[derive(Debug, Clone)]
enum Origin {
    V,
    /// An id sharing V's 12-byte prefix.
    TwinV(u32),
    A,
    /// The sender itself.
    Sender,
    /// Another member.
    Other(usize),
    Any([u8; 16]),
}

#[derive(Debug, Clone)]
enum Seq {
    /// V's latest genuine seq plus this.
    AfterV(u16),
    /// V's latest genuine seq minus this.
    BeforeV(u16),
    Max,
    Zero,
    Any(u64),
}

#[derive(Debug, Clone)]
enum Sig {
    None,
    /// Signed with the sender's own key.
    Own,
    /// The signature of one of V's genuine frames, copied.
    CopiedFromV(usize),
    /// V's key with a made-up signature.
    VKey([u8; 8]),
}

/// Which prefix a record is about.
#[derive(Debug, Clone)]
enum About {
    V,
    Origin,
    Sender,
}

#[derive(Debug, Clone)]
enum Entry {
    Participant(About, u8),
    /// An endpoint record: one of V's real GUIDs (altered) or a new entity.
    Endpoint {
        about: About,
        real: Option<usize>,
        entity: u32,
        writer: bool,
        topic: u8,
        partition: bool,
    },
    Withdraw(About, Option<usize>, u32),
}

#[derive(Debug, Clone)]
enum Op {
    Discovery {
        by: usize,
        to: bool,
        origin: Origin,
        seq: Seq,
        cycle: (u32, u16, u16),
        ttl: u8,
        entries: Vec<Entry>,
        sig: Sig,
    },
    Membership {
        by: usize,
        to: bool,
        origin: Origin,
        version: Seq,
        neighbours: Vec<Origin>,
        sig: Sig,
    },
    /// One of V's genuine frames sent again (Discovery: with another ttl).
    Replay {
        by: usize,
        to: bool,
        which: usize,
        membership: bool,
        ttl: u8,
    },
    Advance(u16),
}

fn origin() -> impl Strategy<Value = Origin> {
    prop_oneof![
        3 => Just(Origin::V),
        2 => any::<u32>().prop_map(Origin::TwinV),
        1 => Just(Origin::A),
        2 => Just(Origin::Sender),
        1 => (0usize..3).prop_map(Origin::Other),
        1 => any::<[u8; 16]>().prop_map(Origin::Any),
    ]
}

fn seq() -> impl Strategy<Value = Seq> {
    prop_oneof![
        4 => (0u16..8).prop_map(Seq::AfterV),
        1 => (0u16..5000).prop_map(Seq::AfterV),
        1 => (0u16..8).prop_map(Seq::BeforeV),
        1 => Just(Seq::Max),
        1 => Just(Seq::Zero),
        1 => any::<u64>().prop_map(Seq::Any),
    ]
}

fn sig() -> impl Strategy<Value = Sig> {
    prop_oneof![
        1 => Just(Sig::None),
        1 => Just(Sig::Own),
        2 => any::<usize>().prop_map(Sig::CopiedFromV),
        1 => any::<[u8; 8]>().prop_map(Sig::VKey),
    ]
}

fn about() -> impl Strategy<Value = About> {
    prop_oneof![3 => Just(About::V), 1 => Just(About::Origin), 1 => Just(About::Sender)]
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        1 => (about(), any::<u8>()).prop_map(|(a, l)| Entry::Participant(a, l)),
        3 => (
            about(),
            proptest::option::of(0usize..3),
            any::<u32>(),
            any::<bool>(),
            0u8..3,
            any::<bool>()
        )
            .prop_map(|(about, real, entity, writer, topic, partition)| Entry::Endpoint {
                about,
                real,
                entity,
                writer,
                topic,
                partition
            }),
        2 => (about(), proptest::option::of(0usize..3), any::<u32>())
            .prop_map(|(a, r, e)| Entry::Withdraw(a, r, e)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            0usize..3,
            any::<bool>(),
            origin(),
            seq(),
            (any::<u32>(), 0u16..3, 0u16..3),
            0u8..5,
            proptest::collection::vec(entry(), 0..5),
            sig()
        )
            .prop_map(|(by, to, origin, seq, cycle, ttl, entries, sig)| Op::Discovery {
                by,
                to,
                origin,
                seq,
                cycle,
                ttl,
                entries,
                sig
            }),
        3 => (
            0usize..3,
            any::<bool>(),
            origin(),
            seq(),
            proptest::collection::vec(origin(), 0..4),
            sig()
        )
            .prop_map(|(by, to, origin, version, neighbours, sig)| Op::Membership {
                by,
                to,
                origin,
                version,
                neighbours,
                sig
            }),
        2 => (0usize..3, any::<bool>(), any::<usize>(), any::<bool>(), 0u8..9).prop_map(
            |(by, to, which, membership, ttl)| Op::Replay {
                by,
                to,
                which,
                membership,
                ttl
            }
        ),
        1 => (0u16..3000).prop_map(Op::Advance),
    ]
}

impl Net {
    fn origin_id(&self, o: &Origin, by: usize) -> PeerId {
        match o {
            Origin::V => id_of(V),
            Origin::TwinV(t) => {
                let mut p = id_of(V);
                p.0[12..].copy_from_slice(&t.to_be_bytes());
                if p == id_of(V) {
                    p.0[15] ^= 1;
                }
                p
            }
            Origin::A => id_of(A),
            Origin::Sender => id_of(self.members[by].seed),
            Origin::Other(m) => id_of(self.members[*m].seed),
            Origin::Any(b) => PeerId(*b),
        }
    }

    fn seq(&self, s: &Seq) -> u64 {
        let last = self.v_disc.iter().map(|d| d.seq).max().unwrap_or(WALL);
        match s {
            Seq::AfterV(d) => last.saturating_add(u64::from(*d)),
            Seq::BeforeV(d) => last.saturating_sub(u64::from(*d)),
            Seq::Max => u64::MAX,
            Seq::Zero => 0,
            Seq::Any(x) => *x,
        }
    }

    fn prefix(&self, a: &About, origin: PeerId, by: usize) -> GuidPrefix {
        match a {
            About::V => prefix_of(&id_of(V)),
            About::Origin => prefix_of(&origin),
            About::Sender => prefix_of(&id_of(self.members[by].seed)),
        }
    }

    fn guid(&self, prefix: GuidPrefix, real: Option<usize>, entity: u32) -> Guid {
        match real {
            // One of V's real endpoints (under whatever prefix was asked: V's own GUID when
            // the prefix is V's).
            Some(i) => {
                let g = self.v_eps[i % self.v_eps.len()];
                Guid::new(prefix, EntityId(g[12..].try_into().unwrap()))
            }
            None => Guid::new(prefix, EntityId(entity.to_be_bytes())),
        }
    }

    fn entry(&self, e: &Entry, origin: PeerId, by: usize) -> DiscoveryEntry {
        match e {
            Entry::Participant(a, lease) => {
                let mut p = ParticipantInfo::new(self.prefix(a, origin, by), "p");
                p.lease_duration = match lease % 3 {
                    0 => QosDuration::INFINITE,
                    1 => QosDuration::from_secs(u64::from(*lease)),
                    _ => QosDuration::from_millis(1),
                };
                DiscoveryEntry::Record(encode_participant(&p).unwrap())
            }
            Entry::Endpoint {
                about,
                real,
                entity,
                writer,
                topic,
                partition,
            } => {
                let kind = if *writer {
                    EndpointKind::Writer
                } else {
                    EndpointKind::Reader
                };
                let mut info = EndpointInfo::new(
                    self.guid(self.prefix(about, origin, by), *real, *entity),
                    kind,
                    TopicName::new(["t", "u", "x"][usize::from(*topic)]).unwrap(),
                    TypeName::new("T").unwrap(),
                    TypeHash([7; 16]),
                );
                info.qos = EndpointQos::default_for(kind);
                if *partition {
                    info.partitions = Partitions::new(["q"]).unwrap();
                }
                DiscoveryEntry::Record(encode_endpoint(&info).unwrap())
            }
            Entry::Withdraw(a, real, entity) => {
                let g = self.guid(self.prefix(a, origin, by), *real, *entity);
                let mut b = [0; 16];
                b[..12].copy_from_slice(&g.prefix.0);
                b[12..].copy_from_slice(&g.entity.0);
                DiscoveryEntry::Withdraw(b)
            }
        }
    }

    /// V's genuine signature number `i` (of its Discovery frames or Membership records).
    fn v_signature(&self, i: usize, membership: bool) -> RecordSignature {
        if membership && !self.v_memb.is_empty() {
            return self.v_memb[i % self.v_memb.len()].signature;
        }
        *self.v_disc[i % self.v_disc.len()]
            .signature()
            .expect("V signs its frames")
    }

    fn signature(&self, s: &Sig, by: usize, membership: bool) -> Option<RecordSignature> {
        match s {
            Sig::None | Sig::Own => None,
            Sig::CopiedFromV(i) => Some(self.v_signature(*i, membership)),
            Sig::VKey(b) => {
                let mut sig = [0u8; 64];
                sig[..8].copy_from_slice(b);
                sig[63] = by as u8;
                Some(RecordSignature {
                    key: *identity(V).public_key(),
                    sig,
                })
            }
        }
    }

    /// Member `by` sends `f` to V or A (linking again first if a forgery cost it its link).
    fn send(&mut self, by: usize, to_v: bool, f: Frame) {
        let at = if to_v { At::V } else { At::A };
        if !self.link(by, at) {
            return;
        }
        let link = self.members[by].links[at as usize].expect("linked");
        self.deliver(at, link, f);
        self.flush();
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Discovery {
                by,
                to,
                origin,
                seq,
                cycle,
                ttl,
                entries,
                sig,
            } => {
                let o = self.origin_id(origin, *by);
                let mut f = Discovery {
                    origin: o,
                    seq: self.seq(seq),
                    ttl: *ttl,
                    cycle: cycle.0,
                    part: cycle.1,
                    parts: cycle.2,
                    entries: entries.iter().map(|e| self.entry(e, o, *by)).collect(),
                };
                match self.signature(sig, *by, false) {
                    Some(s) => f.entries.push(DiscoveryEntry::Signature(s)),
                    None if matches!(sig, Sig::Own) => {
                        sign_discovery(&identity(self.members[*by].seed), &mut f, &mut Vec::new())
                    }
                    None => {}
                }
                self.send(*by, *to, Frame::Discovery(f));
            }
            Op::Membership {
                by,
                to,
                origin,
                version,
                neighbours,
                sig,
            } => {
                let mut ns: Vec<PeerId> =
                    neighbours.iter().map(|n| self.origin_id(n, *by)).collect();
                ns.sort_unstable();
                ns.dedup();
                let record = Membership {
                    origin: self.origin_id(origin, *by),
                    version: match version {
                        // Membership versions are wall-clock ms too: around V's own.
                        Seq::AfterV(d) => self.wall() + u64::from(*d),
                        Seq::BeforeV(d) => WALL - u64::from(*d),
                        _ => self.seq(version),
                    },
                    neighbours: ns,
                };
                let f = match (sig, self.signature(sig, *by, true)) {
                    (_, Some(signature)) => {
                        Frame::SignedMembership(SignedMembership { record, signature })
                    }
                    (Sig::Own, None) => Frame::SignedMembership(SignedMembership {
                        signature: sign_membership(
                            &identity(self.members[*by].seed),
                            &record,
                            &mut Vec::new(),
                        ),
                        record,
                    }),
                    _ => Frame::Membership(record),
                };
                self.send(*by, *to, f);
            }
            Op::Replay {
                by,
                to,
                which,
                membership,
                ttl,
            } => {
                let f = if *membership && !self.v_memb.is_empty() {
                    Frame::SignedMembership(self.v_memb[which % self.v_memb.len()].clone())
                } else {
                    let mut d = self.v_disc[which % self.v_disc.len()].clone();
                    d.ttl = *ttl;
                    Frame::Discovery(d)
                };
                self.send(*by, *to, f);
            }
            Op::Advance(ms) => self.advance(Duration::from_millis(u64::from(*ms))),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_frame_from_others_changes_vs_endpoints_anywhere(
        require in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..32),
    ) {
        let mut n = Net::new(require);
        n.advance(Duration::from_millis(20));
        let v_before = n.v_local();
        let a_before = n.a_view_of_v();
        prop_assert_eq!(a_before.len(), 3);
        let graphs = [n.graph_of_v(At::V), n.graph_of_v(At::A)];
        prop_assert_eq!(graphs[0].len(), 4, "V's participant and 3 endpoints at V");
        for o in &ops {
            n.run(o);
            prop_assert_eq!(&n.graph_of_v(At::V), &graphs[0], "V's graph after {:?}", o);
            prop_assert_eq!(&n.graph_of_v(At::A), &graphs[1], "A's graph after {:?}", o);
        }
        // Routes planned, views current.
        n.advance(Duration::from_millis(50));
        prop_assert_eq!(&n.v_local(), &v_before, "V's own endpoints");
        prop_assert_eq!(&n.a_view_of_v(), &a_before, "A's view of V's endpoints");
        // V's next genuine frame is still taken: a new endpoint of V reaches A.
        let (now, wall) = (n.now, n.wall());
        let g = n
            .v
            .create_endpoint(
                EndpointKind::Writer,
                "t",
                "T",
                [7; 16],
                EndpointQos::default_for(EndpointKind::Writer),
                &[],
                now,
                wall,
            )
            .unwrap();
        n.flush();
        n.advance(Duration::from_millis(50));
        let after = n.a_view_of_v();
        prop_assert_eq!(after.len(), a_before.len() + 1, "A took V's next frame");
        let listed = after.iter().any(|e| e.contains(&format!("{g:?}")));
        prop_assert!(listed, "V's new endpoint at A");
        prop_assert!(a_before.is_subset(&after));
    }
}
