//! Signed records in the control core: Membership records and Discovery frames are verified
//! against their origin's key before anything is applied, this node's own are signed, and
//! the rule for unsigned records in identity mode (`mesh/proto/protocol/signed-records.md` has the
//! bytes and test vectors).
//!
//! **Owns:** which records need a signature, verifying them (through
//! [`SignerBook`](crate::crypto::SignerBook)) and which frame type each neighbour gets.
//! **Must not touch:** what a verified record changes (membership, the topics core) or the
//! signatures' bytes (`wire`, `crypto`).
//!
//! # Verification
//!
//! A record that carries a signature (a SignedMembership frame, a Discovery frame ending with
//! a Signature entry) is verified on every node, identity or not, before it is applied or
//! relayed, so a relayed forgery is always the sending peer's: the signer's key must hash to
//! the record's origin, the trust policy must admit it (allowlist, revocation) and the
//! signature must verify. A forgery is dropped, counted (`bad_record_signatures`) and closes
//! the link that carried it; an untrusted key is dropped and counted
//! (`untrusted_record_signers`) only, since trust policies are per node. What is stale
//! anyway costs no verification: a Membership record not newer than the one held, a
//! Discovery frame whose `seq` is not above the highest that verified for its origin.
//!
//! # Unsigned records in identity mode
//!
//! Identity mode means this node has an identity. Every Shoal identity node signs its own
//! records; a multimaster node (or a Shoal node without identity, admitted by
//! `require_identity = false`) cannot. So an unsigned record is a multimaster node's word at
//! best, and it is taken only where nothing better can exist:
//!
//! - An unsigned **Membership** record is refused (counted in `unsigned_records_refused`,
//!   the link stays) when `require_signed_membership` is set, when it came on a link that
//!   signs (the peer advertised signed records and its identity was verified: it relays
//!   records of others signed, and a multimaster node's record only toward links that do
//!   not sign), or when its origin is known to sign: this node, a neighbour that signs, an
//!   origin whose signed record verified, or whose stored record came signed. So a
//!   multimaster node's record enters the signed part of a mesh only at the Shoal nodes
//!   linked to it: farther Shoal nodes see that node through the signed records of its
//!   Shoal neighbours (which list it), and do not see a multimaster node behind it. A
//!   forged unsigned record can thus reach no farther than its sender's neighbours.
//! - An unsigned **Discovery** frame is refused (counted) unless `require_identity = false`
//!   and its origin is not known to sign (a Shoal node without identity).
//!
//! Outside identity mode unsigned records are taken as before.
//!
//! # Sending
//!
//! The own Membership record is signed (once per version) and goes as a SignedMembership
//! frame to neighbours that advertised signed records, as an unsigned type 6 frame to the
//! others (multimaster peers never see type 15); a relayed record goes the same way with the
//! signature it was stored with. An unsigned record is not relayed to a neighbour that signs
//! (it would refuse it), counted in `unsigned_records_withheld`. Own Discovery frames get
//! their Signature entry as they are encoded; relays re-send a frame's signature unchanged.

use super::{Action, ControlCore, ControlErrorKind, ControlEvent, Placed};
use crate::cmd::ToShard;
use crate::crypto::{sign_discovery, sign_membership, IdentityPolicy};
use crate::membership::{Dest, MemberTransmit};
use crate::wire::{Discovery, Frame, Membership, RecordSignature, SignedMembership};
use crate::{LinkId, PeerId};
use bytes::{Bytes, BytesMut};
use std::time::Instant;

/// Work units (about a nanosecond of control-plane CPU each, see `TopicsConfig`'s work
/// budgets) one signature verification is charged: Ed25519 verification of a record costs
/// 76–350 µs on the reference machine, more the longer the frame.
const VERIFY_WORK: u64 = 100_000;

impl ControlCore {
    /// True in identity mode: this node has an Ed25519 identity.
    pub(super) fn identity_mode(&self) -> bool {
        self.secure.as_ref().is_some_and(|c| c.identity().is_some())
    }

    /// True when records of `origin` are expected signed (see the module docs).
    fn known_to_sign(&self, origin: &PeerId) -> bool {
        *origin == self.me
            || self.signers.knows(origin)
            || self.membership.is_signed(origin)
            || self.placed.values().any(|p| p.signs && p.peer == *origin)
    }

    /// Verifies `sig` as `origin`'s over the bytes in `sig_scratch`. A forgery closes `link`.
    fn verify_record(&mut self, link: LinkId, origin: &PeerId, sig: &RecordSignature) -> bool {
        let open;
        let policy = match &self.secure {
            Some(c) => c.policy(),
            None => {
                open = IdentityPolicy::open(false);
                &open
            }
        };
        match self.signers.verify(policy, origin, sig, &self.sig_scratch) {
            Ok(()) => {
                self.stats.record_signatures_verified += 1;
                true
            }
            Err(e) if e.is_forgery() => {
                self.stats.bad_record_signatures += 1;
                let peer = self.placed.get(&link).map(|p| p.peer);
                let message = format!("record about {origin} from {peer:?}: {e}; link closed");
                self.warn("forged signed record, link closed", message.clone());
                self.actions.push_back(Action::Event(ControlEvent::Error {
                    peer,
                    kind: ControlErrorKind::Identity,
                    message,
                }));
                self.close(link, false);
                false
            }
            Err(e) => {
                self.stats.untrusted_record_signers += 1;
                tracing::debug!(?link, %origin, error = %e, "signed record dropped");
                false
            }
        }
    }

    /// A Membership record from `link`, with its signature when it came signed.
    pub(super) fn on_membership(
        &mut self,
        link: LinkId,
        record: Membership,
        sig: Option<RecordSignature>,
        wall_ms: u64,
        now: Instant,
    ) {
        if !self.placed.contains_key(&link) {
            // Queued before its link closed (a forgery closes it): nothing it says counts.
            return;
        }
        // Stale, invalid or oversize: counted there, and no signature paid for.
        if self
            .membership
            .precheck(&record, sig.is_some(), wall_ms)
            .is_some()
        {
            return;
        }
        match sig {
            Some(s) => {
                // A member flooding valid records of its own pays for their verifications
                // out of its link's work budget; the origin's budget pays only for what it
                // signed (see `charge_origin`).
                if !self.topics.admits_work(link, &record.origin, now) {
                    return;
                }
                self.topics.charge_link(link, VERIFY_WORK);
                self.sig_scratch.clear();
                record.signed_message(&mut self.sig_scratch);
                if !self.verify_record(link, &record.origin, &s) {
                    return;
                }
                self.topics.charge_origin(&record.origin, VERIFY_WORK);
            }
            None => {
                if let Some(why) = self.unsigned_membership_refused(link, &record.origin) {
                    self.stats.unsigned_records_refused += 1;
                    tracing::debug!(?link, origin = %record.origin, why, "unsigned membership record refused");
                    return;
                }
            }
        }
        self.membership
            .on_signed_record(link, &record, sig, wall_ms, now);
    }

    /// Why an unsigned Membership record about `origin` from `link` is refused, if it is.
    fn unsigned_membership_refused(&self, link: LinkId, origin: &PeerId) -> Option<&'static str> {
        if !self.identity_mode() {
            return None;
        }
        if self.cfg.require_signed_membership {
            return Some("require_signed_membership is set");
        }
        if self.placed.get(&link).is_some_and(|p| p.signs) {
            return Some("it came from a neighbour that signs");
        }
        if self.known_to_sign(origin) {
            return Some("its origin is known to sign");
        }
        None
    }

    /// A Discovery frame from `link`: verified (or refused) before the topics core sees it.
    pub(super) fn on_discovery_in(&mut self, link: LinkId, frame: Discovery, now: Instant) {
        let mut signed = false;
        if frame.origin != self.me && self.placed.get(&link).is_some_and(|p| p.capable) {
            match frame.signature().copied() {
                Some(sig) => {
                    if self.signers.discovery_seen(&frame.origin, frame.seq) {
                        // A copy (or older) of a frame that verified: the topics core would
                        // drop it as a duplicate; it is not worth a verification.
                        return;
                    }
                    // Verifying costs more than most frames' records: the link's and the
                    // origin's budgets decide before it is spent; the link pays for it, the
                    // origin only once the signature shows it said it (a forgery about an
                    // origin must not get the origin's genuine frames dropped).
                    if !self.topics.admits_work(link, &frame.origin, now) {
                        return;
                    }
                    self.topics.charge_link(link, VERIFY_WORK);
                    self.sig_scratch.clear();
                    frame.signed_message(&mut self.sig_scratch);
                    if !self.verify_record(link, &frame.origin, &sig) {
                        return;
                    }
                    self.topics.charge_origin(&frame.origin, VERIFY_WORK);
                    self.signers.discovery_verified(&frame.origin, frame.seq);
                    signed = true;
                }
                None if self.identity_mode() => {
                    let required = self
                        .secure
                        .as_ref()
                        .is_some_and(|c| c.policy().require_identity());
                    if required || self.known_to_sign(&frame.origin) {
                        self.stats.unsigned_records_refused += 1;
                        tracing::debug!(?link, origin = %frame.origin, "unsigned discovery frame refused");
                        return;
                    }
                }
                None => {}
            }
        }
        self.on_discovery(link, frame, signed, now);
    }

    /// Signs an own Discovery frame in identity mode (relayed frames keep their origin's).
    pub(super) fn sign_own_discovery(&mut self, frame: &mut Discovery) {
        if frame.origin != self.me {
            return;
        }
        if let Some(id) = self.secure.as_ref().and_then(|c| c.identity()) {
            sign_discovery(id, frame, &mut self.sig_scratch);
        }
    }

    /// The signature of the own record (identity mode), signed once per version.
    fn own_membership_signature(&mut self, record: &Membership) -> Option<RecordSignature> {
        let id = self.secure.as_ref().and_then(|c| c.identity())?;
        if let Some((r, s)) = &self.own_signed {
            if r == record {
                return Some(*s);
            }
        }
        let s = sign_membership(id, record, &mut self.sig_scratch);
        self.own_signed = Some((record.clone(), s));
        Some(s)
    }

    /// Sends a Membership transmit: signed to the neighbours that take signed records,
    /// unsigned to the others, and an unsigned relay not to neighbours that sign.
    pub(super) fn send_membership(&mut self, t: MemberTransmit) {
        let own = t.record.origin == self.me;
        let signature = if own {
            self.own_membership_signature(&t.record)
        } else {
            t.signature
        };
        let mut targets: Vec<(LinkId, usize, bool)> = Vec::new();
        let mut withheld = 0u64;
        let mut take = |l: LinkId, p: &Placed| {
            if signature.is_none() && !own && p.signs {
                withheld += 1;
            } else {
                targets.push((l, p.shard, signature.is_some() && p.signed_frames));
            }
        };
        // A relay's targets are looked up; a flood walks the links.
        let named: &[LinkId] = match &t.dest {
            Dest::Link(l) => std::slice::from_ref(l),
            Dest::Links(v) => v,
            _ => &[],
        };
        if named.is_empty() {
            for (l, p) in &self.placed {
                let refresh = matches!(t.dest, Dest::Refresh) && self.membership.refresh_wanted(*l);
                if t.dest.includes(*l, refresh) {
                    take(*l, p);
                }
            }
        } else {
            for l in named {
                if let Some(p) = self.placed.get(l) {
                    take(*l, p);
                }
            }
        }
        self.stats.unsigned_records_withheld += withheld;
        // Deterministic order (simulations replay from a seed).
        targets.sort_unstable();
        let mut plain: Option<Bytes> = None;
        let mut signed: Option<Bytes> = None;
        for (link, shard, as_signed) in targets {
            let slot = if as_signed { &mut signed } else { &mut plain };
            if slot.is_none() {
                let frame = match (as_signed, signature) {
                    (true, Some(signature)) => Frame::SignedMembership(SignedMembership {
                        record: t.record.clone(),
                        signature,
                    }),
                    _ => Frame::Membership(t.record.clone()),
                };
                let mut b = BytesMut::new();
                if frame.encode(&mut b).is_err() {
                    // More neighbours than a u16 count: the membership bounds prevent it.
                    continue;
                }
                *slot = Some(b.freeze());
            }
            let frame = slot.clone().expect("encoded above");
            self.post(shard, ToShard::SendRaw { link, frame });
        }
    }

    /// Mirrors the membership's refusals into the control counters.
    pub(super) fn sync_member_stats(&mut self) {
        let m = self.membership.stats();
        self.stats.membership_records_refused = m.rejected_oversize + m.implausible_versions;
    }
}
