//! The connecting sockets of the control core: a handshake begins on an accepted socket or a
//! connected dial, its progress becomes writes, and its end the peer table's input (or an
//! error event, counted).
//!
//! **Owns:** the step from a socket's bytes to the peer table's verdict. **Must not touch:** the
//! handshake's rules (see [`super::handshake`]) or the shards.

use super::handshake::{Exchanged, Failure, Handshaking, Progress};
use super::{Action, Conn, ControlCore, ControlErrorKind, ControlEvent};
use crate::crypto::Handshake;
use crate::link::{LinkTimers, Role};
use crate::wire::{Features, Frame, Hello, ShoalExtension, PROTOCOL_VERSION};
use crate::{LinkId, PeerId};
use bytes::BytesMut;
use rand::Rng;
use std::net::IpAddr;
use std::time::Instant;

impl ControlCore {
    pub(super) fn local_hello(&mut self) -> Hello {
        Hello {
            node_id: self.me,
            protocol_version: PROTOCOL_VERSION,
            tcp_listen_port: self.listen_port,
            group_name: self.cfg.group_name.clone(),
            nonce: self.rng.gen(),
            eph_pub_key: None,
            identity: None,
            shoal: Some({
                // Every node holds its neighbours' Discovery leases by link (bit 4); the
                // digest is a setting (bit 3).
                let mut e = ShoalExtension::current();
                e.features = e.features.union(Features::DISCOVERY_LEASE_HOLD);
                if self.cfg.membership_digest {
                    e.features = e.features.union(Features::MEMBERSHIP_DIGEST);
                }
                e
            }),
        }
    }

    pub(super) fn begin_handshake(
        &mut self,
        link: LinkId,
        role: Role,
        remote: Option<IpAddr>,
        now: Instant,
    ) {
        let hello = self.local_hello();
        let crypto = self
            .secure
            .clone()
            .map(|c| Handshake::new(c, &mut self.rng));
        let mut out = BytesMut::new();
        let h = Handshaking::start(
            link,
            role,
            hello,
            crypto,
            LinkTimers::from_config(&self.cfg),
            self.cfg.max_message_bytes,
            remote,
            now,
            &mut out,
        );
        self.conns.insert(link, Conn::Handshaking(Box::new(h)));
        self.write(link, out);
    }

    pub(super) fn write(&mut self, link: LinkId, out: BytesMut) {
        if !out.is_empty() {
            self.actions.push_back(Action::Write {
                link,
                bytes: out.freeze(),
            });
        }
    }

    /// Acts on a handshake's progress: writes, and on its end the peer table's verdict.
    pub(super) fn progress(
        &mut self,
        link: LinkId,
        p: Progress,
        out: BytesMut,
        now: Instant,
        wall: u64,
    ) {
        self.write(link, out);
        match p {
            Progress::Pending => {}
            Progress::Done => {
                let Some(Conn::Handshaking(h)) = self.conns.remove(&link) else {
                    return;
                };
                let remote = h.remote();
                let Some(ex) = h.into_exchanged() else {
                    return;
                };
                self.handshake_done(link, ex, remote, now, wall);
            }
            Progress::Failed(failure) => {
                let peer = match self.conns.remove(&link) {
                    Some(Conn::Handshaking(h)) => h.peer(),
                    _ => None,
                };
                if let Some(f) = failure {
                    self.handshake_failed(link, peer, f);
                }
                self.actions.push_back(Action::Close { link });
                self.peers.on_closed(link, now);
            }
        }
    }

    pub(super) fn handshake_failed(&mut self, link: LinkId, peer: Option<PeerId>, f: Failure) {
        match f.kind {
            ControlErrorKind::Malformed => self.stats.malformed_frames += 1,
            ControlErrorKind::Oversize => self.stats.oversize_frames += 1,
            ControlErrorKind::ModeMismatch
            | ControlErrorKind::Crypto
            | ControlErrorKind::Identity => self.stats.auth_failures += 1,
            ControlErrorKind::Scouting => {}
        }
        self.warn(
            "handshake failed on bad input",
            format!("{link:?} {:?}: {}", f.kind, f.message),
        );
        self.actions.push_back(Action::Event(ControlEvent::Error {
            peer,
            kind: f.kind,
            message: f.message,
        }));
    }

    pub(super) fn handshake_done(
        &mut self,
        link: LinkId,
        ex: Exchanged,
        remote: Option<IpAddr>,
        now: Instant,
        wall: u64,
    ) {
        // The key may have been revoked while the handshake ran on the context it started
        // with: check it against the current policy.
        if let Err(f) = self.recheck_identity(&ex) {
            let peer = Some(ex.peer);
            self.handshake_failed(link, peer, f);
            self.actions.push_back(Action::Close { link });
            self.peers.on_closed(link, now);
            return;
        }
        if self.stopping {
            self.goodbye_close(link, ex);
            self.peers.on_closed(link, now);
            return;
        }
        let (peer, port) = (ex.peer, ex.listen_port);
        let shoal_peer = ex.link.peer_shoal().is_some();
        if self.degree_refuses(link, peer, shoal_peer) {
            self.goodbye_close(link, ex);
            return;
        }
        self.conns.insert(link, Conn::Ready(Box::new(ex)));
        self.peers
            .on_handshake(link, peer, remote, port, shoal_peer, now);
        self.round(now, wall);
        // Neither installed nor closed (the table refused it silently): drop it.
        if matches!(self.conns.get(&link), Some(Conn::Ready(_))) {
            self.conns.remove(&link);
            self.actions.push_back(Action::Close { link });
        }
    }

    /// Says Goodbye on an established link that never reached a shard (sealed as its first
    /// record in a secured mesh), then closes it.
    pub(super) fn goodbye_close(&mut self, link: LinkId, ex: Exchanged) {
        let mut b = BytesMut::new();
        let _ = Frame::Goodbye.encode(&mut b);
        let out = match ex.secure {
            None => b,
            Some(mut est) => {
                let mut rec = BytesMut::new();
                match est.sealer.seal_frame(&mut rec, &b) {
                    Ok(_) => rec,
                    Err(_) => BytesMut::new(),
                }
            }
        };
        self.write(link, out);
        self.actions.push_back(Action::Close { link });
    }
}
