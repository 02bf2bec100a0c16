//! Membership anti-entropy through the control core's public inputs, against peers played by
//! the test: a plain multimaster peer (no Shoal extension) still gets the own record every
//! `membership_interval`, a Shoal peer that advertised the digest gets Summaries instead, and
//! a MembershipDigest on a link that did not negotiate it closes that link.

use bytes::BytesMut;
use shoal_proto::cmd::{ToControl, ToShard};
use shoal_proto::config::MeshConfig;
use shoal_proto::control::{ControlCore, ControlInit, Handshaking};
use shoal_proto::wire::{
    Features, FrameType, Hello, MembershipDigest, ShoalExtension, NO_LEGACY, PROTOCOL_VERSION,
    SHOAL_EXT_VERSION,
};
use shoal_proto::{LinkId, LinkTimers, PeerId, Role};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const WALL: u64 = 1_700_000_000_000;

fn core(now: Instant) -> ControlCore {
    ControlCore::new(
        ControlInit {
            me: PeerId([1; 16]),
            cfg: MeshConfig {
                scouting: false,
                ..MeshConfig::default()
            },
            shards: 1,
            listen_port: 7001,
            secure: None,
            seed: [1; 32],
            epoch: now,
            listen_addrs: vec!["10.0.0.1:7001".parse().unwrap()],
        },
        now,
        WALL,
    )
}

/// Peer `id` connects; `ext`: its Hello's extension features (`None`: a multimaster node).
fn connect(c: &mut ControlCore, id: u8, ext: Option<Features>, now: Instant) -> LinkId {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, id));
    let link = c.on_accepted(Some(ip), now, WALL).unwrap();
    let hello = Hello {
        node_id: PeerId([id; 16]),
        protocol_version: PROTOCOL_VERSION,
        tcp_listen_port: 7000 + u16::from(id),
        group_name: "default".into(),
        nonce: u64::from(id),
        eph_pub_key: None,
        identity: None,
        shoal: ext.map(|f| ShoalExtension::new(SHOAL_EXT_VERSION, f)),
    };
    let mut out = BytesMut::new();
    let _peer = Handshaking::start(
        LinkId(1),
        Role::Dialer,
        hello,
        None,
        LinkTimers::from_config(&MeshConfig::default()),
        MeshConfig::default().max_message_bytes,
        None,
        now,
        &mut out,
    );
    c.on_bytes(link, &out, now, WALL);
    assert!(!c.is_handshaking(link));
    link
}

/// Frames queued per (link, frame type); answers Syncs as the shards would.
fn drain(c: &mut ControlCore, now: Instant, seen: &mut HashMap<(LinkId, u8), usize>) {
    while let Some((_, cmd)) = c.poll_to_shard() {
        match cmd {
            ToShard::SendRaw { link, frame } => *seen.entry((link, frame[4])).or_default() += 1,
            ToShard::Sync(t) => c.on_shard_report(ToControl::Synced(t), now, WALL),
            _ => {}
        }
    }
}

#[test]
fn a_multimaster_peer_gets_every_periodic_flood_and_a_digest_peer_summaries() {
    let t0 = Instant::now();
    let mut c = core(t0);
    let mm = connect(&mut c, 2, None, t0);
    let shoal = connect(
        &mut c,
        3,
        Some(Features::EXTENDED_FRAMES.union(Features::MEMBERSHIP_DIGEST)),
        t0,
    );
    let mut seen = HashMap::new();
    drain(&mut c, t0, &mut seen);
    let start = seen.clone();
    let interval = MeshConfig::default().membership_interval;
    let end = t0 + interval * 10 + Duration::from_millis(1);
    let mut now = t0;
    while now < end {
        now = c
            .poll_timeout()
            .max(now + Duration::from_millis(1))
            .min(end);
        let wall = WALL + (now - t0).as_millis() as u64;
        c.handle_timeout(now, wall);
        drain(&mut c, now, &mut seen);
        if now == end {
            break;
        }
    }
    let got = |l: LinkId, t: FrameType| {
        seen.get(&(l, t as u8)).copied().unwrap_or(0)
            - start.get(&(l, t as u8)).copied().unwrap_or(0)
    };
    assert_eq!(
        got(mm, FrameType::Membership),
        10,
        "one own record per interval"
    );
    assert_eq!(got(mm, FrameType::MembershipDigest), 0);
    assert_eq!(got(shoal, FrameType::Membership), 0, "no periodic flood");
    assert_eq!(
        got(shoal, FrameType::MembershipDigest),
        10,
        "one Summary per interval"
    );
    // The digest peer says it is next to a multimaster node: it wants refreshes now.
    let d = MembershipDigest {
        legacy_hops: 0,
        count: 1,
        digest: 0,
        versions: None,
    };
    c.on_shard_report(
        ToControl::DigestIn {
            link: shoal,
            digest: Box::new(d),
        },
        now,
        WALL,
    );
    drain(&mut c, now, &mut seen);
    let before = seen.get(&(shoal, FrameType::Membership as u8)).copied();
    let later = now + interval;
    c.handle_timeout(later, WALL + (later - t0).as_millis() as u64);
    drain(&mut c, later, &mut seen);
    assert_eq!(
        seen.get(&(shoal, FrameType::Membership as u8)).copied(),
        Some(before.unwrap_or(0) + 1)
    );
}

#[test]
fn a_digest_on_a_link_that_did_not_negotiate_it_closes_the_link() {
    let t0 = Instant::now();
    let mut c = core(t0);
    let plain = connect(&mut c, 2, Some(Features::EXTENDED_FRAMES), t0);
    let mut seen = HashMap::new();
    drain(&mut c, t0, &mut seen);
    let d = MembershipDigest {
        legacy_hops: NO_LEGACY,
        count: 1,
        digest: 0,
        versions: None,
    };
    c.on_shard_report(
        ToControl::DigestIn {
            link: plain,
            digest: Box::new(d),
        },
        t0,
        WALL,
    );
    let mut closed = false;
    while let Some((_, cmd)) = c.poll_to_shard() {
        closed |= matches!(cmd, ToShard::Close { link, .. } if link == plain);
    }
    assert!(closed, "the link must close");
    assert_eq!(c.stats().digest_violations, 1);
}
