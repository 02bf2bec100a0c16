//! The frame type byte: the eight types of multimaster v1 and Shoal's extended ones, each
//! number named once.
//!
//! **Owns:** the frame type numbers. **Must not touch:** the bodies (their own files) or the
//! framing (`frame`). Every other file of `wire` may import it; it imports none.

/// The frame types: the eight of multimaster v1 and Shoal's extended ones (above
/// [`FrameType::MAX_V1`], sent only to peers that advertised
/// [`super::Features::EXTENDED_FRAMES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Sent by the dialer when its connect completes.
    Hello = 1,
    /// Sent by the acceptor as soon as it accepts.
    HelloAck = 2,
    /// Liveness on an idle link; empty body.
    Heartbeat = 3,
    /// Gossip envelope carrying application bytes.
    Data = 4,
    /// Polite close; empty body.
    Goodbye = 5,
    /// A node's direct-neighbour list.
    Membership = 6,
    /// PSK confirmation tag (and handshake signature on an identity mesh).
    AuthConfirm = 7,
    /// A node's signed name (identity mesh).
    IdentityRecord = 8,
    /// Extended: a batch of one origin's topic discovery records, flooded.
    Discovery = 9,
    /// Extended: a run of one writer's topic samples, sent along its routes.
    Samples = 10,
    /// Extended: a reliable writer's heartbeat (which sequence numbers its node holds).
    WriterHeartbeat = 11,
    /// Extended: a reliable reader's acknowledgement and repair requests.
    AckNack = 12,
    /// Extended: samples resent for one reliable reader.
    Repair = 13,
    /// Extended: samples that will never come for one reliable reader.
    Gap = 14,
    /// Extended (with [`super::Features::SIGNED_RECORDS`]): a Membership record signed by
    /// its origin.
    SignedMembership = 15,
    /// Extended (with [`super::Features::MEMBERSHIP_DIGEST`]): a summary of the sender's
    /// membership store, or its per-origin versions (anti-entropy between Shoal nodes).
    MembershipDigest = 16,
}

impl FrameType {
    /// The highest frame type a plain multimaster v1 peer understands.
    pub const MAX_V1: u8 = 8;

    /// The frame type for a wire byte, if it is a known one.
    pub fn from_u8(b: u8) -> Option<FrameType> {
        Some(match b {
            1 => FrameType::Hello,
            2 => FrameType::HelloAck,
            3 => FrameType::Heartbeat,
            4 => FrameType::Data,
            5 => FrameType::Goodbye,
            6 => FrameType::Membership,
            7 => FrameType::AuthConfirm,
            8 => FrameType::IdentityRecord,
            9 => FrameType::Discovery,
            10 => FrameType::Samples,
            11 => FrameType::WriterHeartbeat,
            12 => FrameType::AckNack,
            13 => FrameType::Repair,
            14 => FrameType::Gap,
            15 => FrameType::SignedMembership,
            16 => FrameType::MembershipDigest,
            _ => return None,
        })
    }
}

/// Frame type of [`Discovery`](super::Discovery).
pub const DISCOVERY_FRAME_TYPE: u8 = FrameType::Discovery as u8;
/// Frame type of [`Samples`](super::Samples).
pub const SAMPLES_FRAME_TYPE: u8 = FrameType::Samples as u8;
/// Frame type of [`Heartbeat`](super::Heartbeat) (the reliable writer's, not the v1 link
/// heartbeat 3).
pub const RELIABLE_HEARTBEAT_FRAME_TYPE: u8 = FrameType::WriterHeartbeat as u8;
/// Frame type of [`AckNack`](super::AckNack).
pub const ACKNACK_FRAME_TYPE: u8 = FrameType::AckNack as u8;
/// Frame type of [`Repair`](super::Repair).
pub const REPAIR_FRAME_TYPE: u8 = FrameType::Repair as u8;
/// Frame type of [`Gap`](super::Gap).
pub const GAP_FRAME_TYPE: u8 = FrameType::Gap as u8;
/// Frame type of [`SignedMembership`](super::SignedMembership).
pub const SIGNED_MEMBERSHIP_FRAME_TYPE: u8 = FrameType::SignedMembership as u8;
/// Frame type of [`MembershipDigest`](super::MembershipDigest).
pub const MEMBERSHIP_DIGEST_FRAME_TYPE: u8 = FrameType::MembershipDigest as u8;
