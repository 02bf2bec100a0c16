//! Discovery announces: when to send them and which received ones to believe.
//!
//! Sending: once at start, then every `announce_interval` with ±20% jitter so that nodes
//! started together do not announce in lockstep ([`BeaconSchedule`]); once nothing changed
//! for five intervals (no peer discovered, no link lost), every `announce_idle_interval`.
//! A node already linked to everyone it hears needs no beacon: a newcomer's own beacons
//! make the others dial it. The idle interval stays short enough that a peer hears two
//! beacons within `peer_lost_timeout` (multimaster's rule for redialing a peer), and a lost
//! link brings the short interval back at both its ends.
//!
//! Receiving ([`accept_beacon`]), in the order of the protocol notes (`mesh/proto/protocol/`,
//! `v1-wire.md` "Scouting datagram", `secured.md` "The beacon MAC"): on a secured
//! mesh the datagram must be longer than the 16-byte MAC and the MAC over everything before it
//! must verify; then it must parse (magic included), its secured flag must equal our mode, its
//! version and group must equal ours, and its node id must not be ours. The dial-back address
//! is the datagram's source IP with the advertised TCP port. One rule beyond the C++ library:
//! an advertised port of 0 is rejected, since it cannot be dialed.

use crate::wire::{BeaconFilter, BeaconReject, ANNOUNCE_MAC_LEN};
use crate::PeerId;
use rand::Rng;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Intervals without a change after which a schedule goes to its idle interval.
const QUIET_INTERVALS: u32 = 5;

/// Beacon timing: due at start, then every interval ±20% (the idle interval once nothing
/// changed for `QUIET_INTERVALS` (5) intervals).
#[derive(Debug, Clone)]
pub struct BeaconSchedule {
    interval: Duration,
    idle_interval: Duration,
    last_change: Instant,
    next: Instant,
    sent: u64,
}

impl BeaconSchedule {
    /// A schedule whose first announce is due at `now`, every `interval` (no idle
    /// stretch: see [`with_idle_interval`](Self::with_idle_interval)).
    pub fn new(interval: Duration, now: Instant) -> BeaconSchedule {
        BeaconSchedule {
            interval,
            idle_interval: interval,
            last_change: now,
            next: now,
            sent: 0,
        }
    }

    /// Announces every `idle` (at least the interval) once nothing changed for five
    /// intervals.
    pub fn with_idle_interval(mut self, idle: Duration) -> BeaconSchedule {
        self.idle_interval = idle.max(self.interval);
        self
    }

    /// Something changed that others may need to hear about soon (a peer discovered, a
    /// link lost): back to the short interval, the next announce within one.
    pub fn changed(&mut self, now: Instant) {
        self.last_change = now;
        self.next = self.next.min(now + self.interval);
    }

    /// The mean interval the next announce is scheduled with at `now`.
    pub fn interval_at(&self, now: Instant) -> Duration {
        if now.saturating_duration_since(self.last_change) >= self.interval * QUIET_INTERVALS {
            self.idle_interval
        } else {
            self.interval
        }
    }

    /// When the next announce is due.
    pub fn poll_timeout(&self) -> Instant {
        self.next
    }

    /// Returns `true` when an announce is due now (send one) and schedules the next.
    pub fn handle_timeout(&mut self, now: Instant, rng: &mut dyn rand::RngCore) -> bool {
        if now < self.next {
            return false;
        }
        self.sent += 1;
        self.next = now + jittered(self.interval_at(now), rng);
        true
    }

    /// Announces sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }
}

/// `interval` scaled by a uniform factor in `[0.8, 1.2]`.
pub fn jittered(interval: Duration, rng: &mut dyn rand::RngCore) -> Duration {
    interval.mul_f64(rng.gen_range(0.8..=1.2))
}

/// Why a received datagram was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BeaconError {
    /// Secured mesh: the datagram is not longer than the MAC.
    #[error("datagram too short to carry a MAC")]
    TooShortForMac,
    /// Secured mesh: the MAC did not verify.
    #[error("announce MAC does not verify")]
    BadMac,
    /// Parse failure, mode/version/group mismatch or own announce.
    #[error(transparent)]
    Rejected(#[from] BeaconReject),
    /// The advertised TCP port is 0: nothing to dial back.
    #[error("announce advertises TCP port 0")]
    ZeroPort,
}

impl BeaconError {
    /// True for a datagram that is not a usable announce for anyone: unparsable, another
    /// protocol version, port 0, a missing or wrong MAC, the other mode's flag. False for our
    /// own multicast echo and another group's announces, which are valid traffic for other
    /// nodes sharing the discovery port.
    pub fn is_junk(&self) -> bool {
        !matches!(
            self,
            BeaconError::Rejected(BeaconReject::OwnAnnounce | BeaconReject::GroupMismatch { .. })
        )
    }
}

/// An announce that passed every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptedBeacon {
    /// The announcing node.
    pub peer: PeerId,
    /// Where to dial it: the datagram's source IP and the advertised TCP port.
    pub dial_addr: SocketAddr,
}

/// Applies the acceptance rules to `datagram` received from `source`. On a secured mesh
/// `verify_mac(body, mac)` checks the keyed MAC (the crypto layer's job) before anything is
/// parsed; on a plaintext mesh it is not called.
pub fn accept_beacon(
    datagram: &[u8],
    source: SocketAddr,
    filter: &BeaconFilter<'_>,
    verify_mac: impl FnOnce(&[u8], &[u8; ANNOUNCE_MAC_LEN]) -> bool,
) -> Result<AcceptedBeacon, BeaconError> {
    if filter.secured {
        if datagram.len() <= ANNOUNCE_MAC_LEN {
            return Err(BeaconError::TooShortForMac);
        }
        let (body, mac) = datagram.split_at(datagram.len() - ANNOUNCE_MAC_LEN);
        let mac: &[u8; ANNOUNCE_MAC_LEN] = mac.try_into().expect("split at len - 16");
        if !verify_mac(body, mac) {
            return Err(BeaconError::BadMac);
        }
    }
    let decoded = filter.accept(datagram)?;
    let a = decoded.announce;
    if a.tcp_listen_port == 0 {
        return Err(BeaconError::ZeroPort);
    }
    Ok(AcceptedBeacon {
        peer: a.node_id,
        dial_addr: SocketAddr::new(source.ip(), a.tcp_listen_port),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Beacon, DecodeError, PROTOCOL_VERSION};
    use rand::SeedableRng;

    fn me() -> PeerId {
        PeerId([1; 16])
    }

    fn filter(secured: bool) -> BeaconFilter<'static> {
        BeaconFilter {
            secured,
            protocol_version: PROTOCOL_VERSION,
            group_name: "default",
            own_id: me(),
        }
    }

    fn datagram(id: PeerId, port: u16, group: &str, secured: bool) -> Vec<u8> {
        let mut out = Vec::new();
        Beacon::new(id, port, group, secured)
            .encode_body(&mut out)
            .unwrap();
        out
    }

    fn src() -> SocketAddr {
        "10.0.0.7:45454".parse().unwrap()
    }

    #[test]
    fn schedule_fires_at_start_then_jittered() {
        let t0 = Instant::now();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut s = BeaconSchedule::new(Duration::from_millis(1000), t0);
        assert!(s.handle_timeout(t0, &mut rng));
        assert!(!s.handle_timeout(t0, &mut rng));
        let mut distinct = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let due = s.poll_timeout();
            let prev = due;
            assert!(s.handle_timeout(due, &mut rng));
            let gap = s.poll_timeout() - prev;
            assert!(gap >= Duration::from_millis(800) && gap <= Duration::from_millis(1200));
            distinct.insert(gap.as_millis());
        }
        assert!(distinct.len() > 10, "jitter must actually vary");
        assert_eq!(s.sent(), 51);
    }

    #[test]
    fn schedule_stretches_to_the_idle_interval_when_quiet_and_comes_back_on_a_change() {
        let t0 = Instant::now();
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let sec = Duration::from_secs(1);
        let mut s = BeaconSchedule::new(sec, t0).with_idle_interval(sec * 2);
        let mut at = Vec::new();
        let mut t = t0;
        while t < t0 + sec * 30 {
            t = s.poll_timeout();
            assert!(s.handle_timeout(t, &mut rng));
            at.push(t - t0);
        }
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        // Five quiet seconds at the short interval, then the idle one.
        let short = at.iter().filter(|a| **a < sec * 5).count();
        assert!((5..=7).contains(&short), "{at:?}");
        for (a, g) in at.iter().zip(&gaps) {
            let want = if *a >= sec * 5 { sec * 2 } else { sec };
            assert!(
                *g >= want.mul_f64(0.8) && *g <= want.mul_f64(1.2),
                "a gap of {g:?} at {a:?}"
            );
        }
        // A change: the next announce within the short interval, short ones for five more.
        let now = t + Duration::from_millis(100);
        s.changed(now);
        assert!(s.poll_timeout() <= now + sec);
        assert_eq!(s.interval_at(now + sec * 4), sec);
        assert_eq!(s.interval_at(now + sec * 5), sec * 2);
        // Never below the short interval.
        let s = BeaconSchedule::new(sec, t0).with_idle_interval(sec / 2);
        assert_eq!(s.interval_at(t0 + sec * 60), sec);
    }

    #[test]
    fn accepts_and_builds_dial_back_address() {
        let peer = PeerId([2; 16]);
        let got = accept_beacon(
            &datagram(peer, 7000, "default", false),
            src(),
            &filter(false),
            |_, _| panic!("no MAC on a plaintext mesh"),
        )
        .unwrap();
        assert_eq!(got.peer, peer);
        assert_eq!(got.dial_addr, "10.0.0.7:7000".parse().unwrap());
    }

    #[test]
    fn typed_rejections() {
        let f = filter(false);
        let none = |_: &[u8], _: &[u8; 16]| true;
        let peer = PeerId([2; 16]);
        assert_eq!(
            accept_beacon(&datagram(me(), 7000, "default", false), src(), &f, none),
            Err(BeaconError::Rejected(BeaconReject::OwnAnnounce))
        );
        assert!(matches!(
            accept_beacon(&datagram(peer, 7000, "other", false), src(), &f, none),
            Err(BeaconError::Rejected(BeaconReject::GroupMismatch { .. }))
        ));
        let mut secured = datagram(peer, 7000, "default", true);
        secured.extend_from_slice(&[0; 16]);
        assert!(matches!(
            accept_beacon(&secured, src(), &f, none),
            Err(BeaconError::Rejected(BeaconReject::ModeMismatch { .. }))
        ));
        let mut bad = datagram(peer, 7000, "default", false);
        bad[0] = b'X';
        assert!(matches!(
            accept_beacon(&bad, src(), &f, none),
            Err(BeaconError::Rejected(BeaconReject::Malformed(
                DecodeError::BadMagic(_)
            )))
        ));
        let mut v2 = datagram(peer, 7000, "default", false);
        v2[4] = 2;
        assert!(matches!(
            accept_beacon(&v2, src(), &f, none),
            Err(BeaconError::Rejected(BeaconReject::VersionMismatch { .. }))
        ));
        assert_eq!(
            accept_beacon(&datagram(peer, 0, "default", false), src(), &f, none),
            Err(BeaconError::ZeroPort)
        );
    }

    #[test]
    fn junk_is_everything_but_own_echoes_and_other_groups() {
        let f = filter(false);
        let none = |_: &[u8], _: &[u8; 16]| true;
        let peer = PeerId([2; 16]);
        let verdict = |d: &[u8]| accept_beacon(d, src(), &f, none).unwrap_err().is_junk();
        assert!(!verdict(&datagram(me(), 7000, "default", false)));
        assert!(!verdict(&datagram(peer, 7000, "other", false)));
        assert!(verdict(b"garbage that is no announce at all"));
        assert!(verdict(&[]));
        assert!(verdict(&datagram(peer, 0, "default", false)));
        let mut v2 = datagram(peer, 7000, "default", false);
        v2[4] = 2;
        assert!(verdict(&v2));
        let mut secured = datagram(peer, 7000, "default", true);
        secured.extend_from_slice(&[0; 16]);
        assert!(verdict(&secured));
        assert!(BeaconError::BadMac.is_junk() && BeaconError::TooShortForMac.is_junk());
    }

    #[test]
    fn secured_mesh_checks_mac_first() {
        let f = filter(true);
        let peer = PeerId([2; 16]);
        let mut d = datagram(peer, 7000, "default", true);
        let body_len = d.len();
        d.extend_from_slice(&[0xaa; 16]);
        assert_eq!(
            accept_beacon(&d[..16], src(), &f, |_, _| true),
            Err(BeaconError::TooShortForMac)
        );
        assert_eq!(
            accept_beacon(&d, src(), &f, |_, mac| mac != &[0xaa; 16]),
            Err(BeaconError::BadMac)
        );
        let got = accept_beacon(&d, src(), &f, |body, mac| {
            body.len() == body_len && mac == &[0xaa; 16]
        })
        .unwrap();
        assert_eq!(got.peer, peer);
        // A plaintext announce on a secured mesh fails on its (absent) MAC before parsing.
        let plain = datagram(peer, 7000, "default", false);
        assert_eq!(
            accept_beacon(&plain, src(), &f, |_, _| false),
            Err(BeaconError::BadMac)
        );
    }
}
