//! Identity records and revocation (`mesh/proto/protocol/secured.md`, "Identity"): our own
//! signed record (to each new
//! neighbour and every `membership_interval`), gossiped records of others (stored and
//! re-flooded once when new), the identity recheck at the end of a handshake, and the closing
//! of links whose key the application revoked (whose signing key is forgotten too: see
//! [`super::signed`]).
//!
//! **Owns:** the identity book and our record. **Must not touch:** the handshake's crypto
//! (see [`crate::crypto`]) or how names reach the application (an [`Action::Name`]).

use super::handshake::{auth_failure, Exchanged, Failure};
use super::{Action, ControlCore};
use crate::crypto::{
    node_id_from_key, sign_identity_record, HandshakeError, IdentityReject, RecordDrop,
    RecordVersions, SecureContext,
};
use crate::wire::{Frame, IdentityRecord};
use crate::{LinkId, PeerId};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Instant;

/// This node's own identity record, re-minted every `membership_interval`.
#[derive(Debug)]
pub(super) struct OwnRecord {
    versions: RecordVersions,
    pub(super) frame: Bytes,
    pub(super) next: Instant,
}

impl OwnRecord {
    /// Our first record (versions seeded by the wall clock); `None` without an identity.
    pub(super) fn new(ctx: &SecureContext, wall_ms: u64, next: Instant) -> Option<OwnRecord> {
        let mut versions = RecordVersions::starting_at(wall_ms);
        let frame = record_frame(ctx, &mut versions)?;
        Some(OwnRecord {
            versions,
            frame,
            next,
        })
    }
}

fn record_frame(ctx: &SecureContext, versions: &mut RecordVersions) -> Option<Bytes> {
    let id = ctx.identity()?;
    let version = versions.next_version();
    let record = IdentityRecord {
        id_pub_key: *id.public_key(),
        version,
        sig: sign_identity_record(id, version),
        name: id.name().to_owned(),
    };
    let mut b = BytesMut::new();
    Frame::IdentityRecord(record).encode(&mut b).ok()?;
    Some(b.freeze())
}

impl ControlCore {
    /// Re-mints and floods our record when due.
    pub(super) fn refresh_own_record(&mut self, now: Instant) {
        let Some(mut r) = self.own_record.take() else {
            return;
        };
        if now >= r.next {
            if let Some(f) = self
                .secure
                .clone()
                .and_then(|c| record_frame(&c, &mut r.versions))
            {
                r.frame = f;
            }
            r.next = now + self.cfg.membership_interval;
            let frame = r.frame.clone();
            self.flood(&frame, None);
        }
        self.own_record = Some(r);
    }

    /// A gossiped identity record: stored and re-flooded once when new, dropped when it is
    /// ours, untrusted, badly signed or not newer.
    pub(super) fn on_identity_record(&mut self, link: LinkId, r: IdentityRecord) {
        let Some(sc) = self.secure.clone() else {
            return;
        };
        match self.book.accept(
            sc.policy(),
            &r.id_pub_key,
            r.version,
            r.name.as_bytes(),
            &r.sig,
        ) {
            Ok(origin) => {
                if let Some(known) = self.book.get(&origin) {
                    let name = Some(known.name.clone());
                    self.actions.push_back(Action::Name { node: origin, name });
                }
                let mut b = BytesMut::new();
                if Frame::IdentityRecord(r).encode(&mut b).is_ok() {
                    self.flood(&b.freeze(), Some(link));
                }
            }
            Err(RecordDrop::Own | RecordDrop::Stale) => {}
            Err(e) => {
                self.stats.identity_records_dropped += 1;
                tracing::debug!(?link, error = %e, "identity record dropped");
            }
        }
    }

    /// The peer's verified identity against the current policy; records its name.
    pub(super) fn recheck_identity(&mut self, ex: &Exchanged) -> Result<(), Failure> {
        let Some(vp) = ex.secure.as_ref().and_then(|e| e.peer.as_ref()) else {
            return Ok(());
        };
        if let Some(c) = &self.secure {
            if let Err(e) = c.policy().admit(&vp.key) {
                return Err(auth_failure(HandshakeError::Identity(e)));
            }
        }
        tracing::debug!(peer = %vp.node_id, name = %vp.name, label = ?vp.label, "peer identity verified");
        self.actions.push_back(Action::Name {
            node: vp.node_id,
            name: Some(vp.name.clone()),
        });
        Ok(())
    }

    /// The application changed the trust policy (a new context replaces the old one): links
    /// of nodes whose key is now revoked close, their records, names and topic endpoints are
    /// forgotten (their matches end). A
    /// handshake that finishes later is checked against the new policy.
    pub fn set_secure_context(&mut self, ctx: Arc<SecureContext>, now: Instant, wall_ms: u64) {
        if self.secure.as_ref().is_some_and(|c| Arc::ptr_eq(c, &ctx)) {
            return;
        }
        let revoked: Vec<PeerId> = ctx.policy().revoked_keys().map(node_id_from_key).collect();
        self.secure = Some(ctx);
        for node in revoked {
            // Its signed records are refused from now on (the policy says so); the key is
            // forgotten too, so the book holds no revoked key.
            self.signers.remove(&node);
            // Its topic endpoints go at once, linked or not: with no record of it ever
            // accepted again, nothing would remove them before its lease ran out.
            self.topics.forget_node(&node);
            let mut links: Vec<LinkId> = self
                .placed
                .iter()
                .filter(|(_, p)| p.peer == node)
                .map(|(l, _)| *l)
                .collect();
            if links.is_empty() {
                continue;
            }
            links.sort_unstable();
            self.book.remove(&node);
            for link in links {
                self.close(link, false);
            }
            self.actions.push_back(Action::Name { node, name: None });
            let reason = HandshakeError::Identity(IdentityReject::Untrusted);
            tracing::info!(%node, %reason, "revoked node's link closed");
        }
        self.round(now, wall_ms);
    }
}
