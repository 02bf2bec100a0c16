//! What the membership state machine asks to send: a record and the links it goes on.
//!
//! **Owns:** the shape of a transmit ([`Dest`], [`MemberTransmit`]). **Must not touch:**
//! which links a record goes on (the relay and flood rules) or how it is encoded and signed
//! (the control core's).

use super::Record;
use crate::wire::RecordSignature;
use crate::LinkId;

/// Where a Membership frame goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// Every established link.
    All,
    /// Every established link except this one (the record's inbound link).
    AllExcept(LinkId),
    /// One link: catching a new neighbour up on the stored records, or the one target of a
    /// relay that skips the other neighbours.
    Link(LinkId),
    /// These links (sorted, two or more): the targets of a relay that skips some neighbours,
    /// one transmit for all of them (the record encoded once, not copied per target).
    Links(Vec<LinkId>),
    /// Every established link that wants periodic refreshes
    /// ([`super::MemberGraph::refresh_wanted`]): the periodic own flood with anti-entropy on.
    Refresh,
}

impl Dest {
    /// True when a frame for this destination goes on `link`, one of the established
    /// links (`refresh`: whether `link` wants periodic refreshes).
    pub fn includes(&self, link: LinkId, refresh: bool) -> bool {
        match self {
            Dest::All => true,
            Dest::AllExcept(x) => link != *x,
            Dest::Link(x) => link == *x,
            Dest::Links(v) => v.binary_search(&link).is_ok(),
            Dest::Refresh => refresh,
        }
    }
}

/// A Membership frame to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberTransmit {
    /// Where to send it.
    pub dest: Dest,
    /// The record (frame body).
    pub record: Record,
    /// The origin's signature stored with a relayed record (`None` for the own record, which
    /// the control core signs itself, and for unsigned records).
    pub signature: Option<RecordSignature>,
}
