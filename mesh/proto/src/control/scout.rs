//! Scouting in the control core: when to send a beacon (and its bytes, MAC'd in a secured
//! mesh) and which received datagrams to believe (a validated one feeds the peer table).
//!
//! **Owns:** the beacon schedule's use and the acceptance verdicts. **Must not touch:** the
//! multicast sockets (the driver sends [`Action::Beacon`] and feeds what it receives).

use super::{Action, ControlCore, ControlErrorKind, ControlEvent};
use crate::scouting::accept_beacon;
use crate::wire::{Beacon, BeaconFilter, PROTOCOL_VERSION};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::time::Instant;

impl ControlCore {
    /// Queues a beacon when one is due.
    pub(super) fn beacon_due(&mut self, now: Instant) {
        let Some(sched) = self.beacons.as_mut() else {
            return;
        };
        if !sched.handle_timeout(now, &mut self.rng) || self.stopping {
            return;
        }
        let secured = self.secure.is_some();
        let mut b = BytesMut::new();
        if Beacon::new(self.me, self.listen_port, &self.cfg.group_name, secured)
            .encode_body(&mut b)
            .is_err()
        {
            return;
        }
        if let Some(k) = &self.secure {
            let mac = k.psk().announce_mac(&b);
            b.extend_from_slice(&mac);
        }
        self.actions.push_back(Action::Beacon(b.freeze()));
    }

    /// A datagram received on the scouting socket from `from`.
    pub fn on_datagram(&mut self, from: SocketAddr, datagram: &[u8], now: Instant, wall_ms: u64) {
        let filter = BeaconFilter {
            secured: self.secure.is_some(),
            protocol_version: PROTOCOL_VERSION,
            group_name: &self.cfg.group_name,
            own_id: self.me,
        };
        // Secured: MAC first (constant time), before anything is parsed.
        let keys = self.secure.as_ref();
        let verify = |body: &[u8], mac: &[u8; 16]| {
            keys.is_some_and(|k| k.psk().verify_announce_mac(body, mac))
        };
        match accept_beacon(datagram, from, &filter, verify) {
            Ok(a) => {
                self.peers.on_announce(a.peer, a.dial_addr, now);
                // A refresh or a refused stranger changes nothing: no round (floods of them
                // must stay cheap); counters reach the stats on the next round.
                if self.peers.has_output() {
                    self.round(now, wall_ms);
                }
            }
            Err(e) if e.is_junk() => {
                self.stats.announces_dropped += 1;
                self.warn(
                    "invalid scouting datagram dropped",
                    format!("from {from}: {e}"),
                );
            }
            Err(e) => tracing::trace!(%from, error = %e, "announce ignored"),
        }
    }

    /// The driver could not set up scouting (reported every time) or send a beacon (reported
    /// once: the next ones would fail the same way).
    pub fn on_scouting_error(&mut self, message: String, send_failure: bool) {
        if send_failure {
            if self.beacon_failure_reported {
                return;
            }
            self.beacon_failure_reported = true;
        }
        tracing::warn!(%message, "scouting");
        self.actions.push_back(Action::Event(ControlEvent::Error {
            peer: None,
            kind: ControlErrorKind::Scouting,
            message,
        }));
    }
}
