//! One connection's state machine: handshake, mode checks, heartbeat, liveness, Goodbye.
//!
//! **Owns:** one connection's state: handshake, heartbeat, liveness, Goodbye. **Must not touch:**
//! its bytes: the cores feed it frames and send what it returns.
//!
//! The acceptor sends HelloAck at once; the dialer sends Hello when its connect completes;
//! neither waits for the other. The peer's Hello is checked (protocol version, group, secured
//! mode, not ourselves); a mismatch closes the link with a typed [`CloseReason`]. On a
//! plaintext mesh the link is then established; on a secured mesh it waits in
//! [`LinkState::AwaitingAuth`] until the crypto layer, which runs the AuthConfirm exchange of
//! `mesh/proto/protocol/secured.md`, reports [`Link::auth_confirmed`] or [`Link::auth_failed`].
//!
//! Liveness: a Heartbeat goes out only when nothing was sent for `heartbeat_interval`; the link
//! is dead when it made no progress for `heartbeat_timeout`, unless its peer is still taking
//! what this node sends ([`Link::on_delivered`]: its kernel acknowledged new data within
//! `heartbeat_timeout`, and nothing short of progress arrived since the last progress), and
//! then for [`DELIVERING_GRACE`] times as long at most: a lossy path
//! in retransmission backoff delays the peer's frames for seconds while it delivers ours, and
//! closing it lost everything its queue and its kernel held (the fault suite at the node's
//! defaults: every message the lossy subscribers missed, in both forwarding modes, and none
//! with the link kept). Progress is a whole frame
//! ([`Link::on_frame`], [`Link::on_data`], [`Link::on_samples`]) or, inside a frame, every [`PROGRESS_BYTES`] of it
//! ([`Link::on_bytes_read`]), so a peer streaming a large frame or a stream of Data never needs
//! heartbeats to stay alive, while a peer that trickles a frame a byte at a time cannot keep a
//! link (and the buffer of its partial frame) forever: it is closed with
//! [`CloseReason::Stalled`]. The
//! driver must feed all received input before calling [`Link::handle_timeout`]: a receiver that
//! was too busy to read for a while then sees the backlog first and does not kill a link that
//! was talking all along (the C++ library's failure mode under load).
//!
//! Driving: create with [`Link::dialer`] / [`Link::acceptor`] on the link's shard; call
//! [`Link::on_connected`] when a dial's connect completes; pass every decoded frame to
//! [`Link::on_frame`] and act on the returned [`FrameAction`]; report every frame the driver
//! itself queues (Data, Membership, ...) with [`Link::on_sent`]; send the frames of
//! [`Link::poll_transmit`]; react to [`Link::poll_event`]; timers via
//! [`Link::poll_timeout`] / [`Link::handle_timeout`]. After [`LinkEvent::Closed`], flush what
//! `poll_transmit` still yields (a Goodbye) and close the socket.

use super::LinkId;
use crate::wire::{peer_accepts_frame_type, Frame, Hello, ShoalExtension};
use crate::PeerId;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Bytes of a partial frame that count as progress for liveness: a link that receives fewer
/// than this, and no whole frame, within `heartbeat_timeout` is closed as stalled. A healthy
/// peer sends a frame or this much of one far more often (about 1.4 KiB/s at the default
/// 3 s timeout); a peer trickling a giant frame does not.
pub const PROGRESS_BYTES: usize = 4096;

/// A link that receives nothing but whose peer keeps acknowledging what it is sent
/// ([`Link::on_delivered`]) is dead only after this many times `heartbeat_timeout` (12 s at
/// the default): long enough for a lossy path's retransmission backoff (the fault suite's
/// loss lasts 7.5 s), short enough that a peer whose kernel still acknowledges while its
/// application sends nothing (a writer hung behind a live reader) does not hold the link.
pub const DELIVERING_GRACE: u32 = 4;

/// Which side opened the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We connected; we send Hello.
    Dialer,
    /// We accepted; we send HelloAck.
    Acceptor,
}

/// Where the link is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Dialer waiting for its TCP connect to complete.
    Connecting,
    /// Own Hello sent, peer's not yet received.
    Handshaking,
    /// Secured mesh: Hellos exchanged, waiting for the AuthConfirm verification.
    AwaitingAuth,
    /// Usable for Data.
    Established,
    /// Done; nothing more is sent except a pending Goodbye.
    Closed,
}

/// Why a link closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// The peer's protocol version differs.
    #[error("protocol version mismatch: ours {ours}, theirs {theirs}")]
    VersionMismatch {
        /// Ours.
        ours: u8,
        /// Theirs.
        theirs: u8,
    },
    /// The peer is in another group.
    #[error("group mismatch: theirs {theirs:?}")]
    GroupMismatch {
        /// Their group.
        theirs: String,
    },
    /// One side runs a secured mesh, the other does not.
    #[error("secured mode mismatch: ours {ours}, theirs {theirs}")]
    SecuredModeMismatch {
        /// Our mode.
        ours: bool,
        /// Theirs.
        theirs: bool,
    },
    /// The Hello carries our own node id: we connected to ourselves.
    #[error("connected to self")]
    SelfConnection,
    /// The handshake did not finish within `handshake_timeout`.
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// Nothing received for `heartbeat_timeout`.
    #[error("nothing received for the heartbeat timeout")]
    HeartbeatTimeout,
    /// Bytes of a frame arrived, but fewer than [`PROGRESS_BYTES`] and no whole frame within
    /// `heartbeat_timeout`: a trickle that would hold the link and its buffer forever.
    #[error("a partial frame made no progress for the heartbeat timeout")]
    Stalled,
    /// The peer sent Goodbye.
    #[error("peer said goodbye")]
    Goodbye,
    /// The crypto layer rejected the peer's AuthConfirm.
    #[error("authentication failed")]
    AuthFailed,
    /// A frame arrived that is not legal in the current state.
    #[error("protocol violation: {0}")]
    ProtocolViolation(&'static str),
    /// This node closed the link ([`Link::close`]).
    #[error("closed locally")]
    Local,
}

/// What the driver does with a frame it passed to [`Link::on_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameAction {
    /// Fully handled by the link (Hello, Heartbeat).
    Consumed,
    /// Hand it on: Data and Samples to the shard core, Membership and Discovery to the control
    /// plane, AuthConfirm and IdentityRecord to the crypto/identity layer.
    Process,
    /// The link is closed (reason in [`LinkEvent::Closed`]); drop the frame.
    Close,
}

/// A notable change of the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// Secured mesh: the peer's Hello passed the checks; run the AuthConfirm exchange with
    /// its ephemeral key, then call [`Link::auth_confirmed`] or [`Link::auth_failed`].
    AuthRequired {
        /// The peer's Hello (for its ephemeral key and identity).
        hello: Box<Hello>,
    },
    /// The link is usable: report it to the peer table ([`super::PeerManager::on_handshake`]).
    Established {
        /// The peer's node id.
        peer: PeerId,
        /// The peer's TCP listen port (for dialing it back).
        listen_port: u16,
        /// The peer's Shoal extension, `None` for a plain multimaster node.
        shoal: Option<ShoalExtension>,
    },
    /// The link is closed; report it to the peer table ([`super::PeerManager::on_closed`]).
    Closed(CloseReason),
}

/// Timing settings of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkTimers {
    /// Send a Heartbeat after this long without sending anything.
    pub heartbeat_interval: Duration,
    /// Dead after this long without receiving anything (up to [`DELIVERING_GRACE`] times as
    /// long while the peer acknowledges what it is sent: [`Link::on_delivered`]).
    pub heartbeat_timeout: Duration,
    /// Dead if not established this long after creation.
    pub handshake_timeout: Duration,
}

impl LinkTimers {
    /// The timers of a [`crate::config::MeshConfig`].
    pub fn from_config(cfg: &crate::config::MeshConfig) -> LinkTimers {
        LinkTimers {
            heartbeat_interval: cfg.heartbeat_interval,
            heartbeat_timeout: cfg.heartbeat_timeout,
            handshake_timeout: cfg.handshake_timeout,
        }
    }
}

/// Counters of a link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Heartbeats sent.
    pub heartbeats_sent: u64,
    /// Frames received.
    pub frames_received: u64,
}

/// The state machine of one connection.
#[derive(Debug)]
pub struct Link {
    id: LinkId,
    role: Role,
    state: LinkState,
    local: Hello,
    timers: LinkTimers,
    created: Instant,
    last_sent: Instant,
    last_recv: Instant,
    /// When the peer last acknowledged new data ([`Link::on_delivered`]).
    last_delivered: Instant,
    /// When bytes were last read, progress or not ([`Link::on_bytes_read`]).
    last_read: Instant,
    /// Bytes read since the last progress (see [`PROGRESS_BYTES`]).
    unframed: usize,
    peer: Option<PeerId>,
    peer_listen_port: u16,
    peer_shoal: Option<ShoalExtension>,
    transmits: VecDeque<Frame>,
    events: VecDeque<LinkEvent>,
    stats: LinkStats,
}

impl Link {
    /// A dialed connection, before its connect completed. `local` is the Hello this node sends
    /// (fresh nonce and, on a secured mesh, this connection's ephemeral key).
    pub fn dialer(id: LinkId, local: Hello, timers: LinkTimers, now: Instant) -> Link {
        Link::new(id, Role::Dialer, LinkState::Connecting, local, timers, now)
    }

    /// An accepted connection: HelloAck is queued at once.
    pub fn acceptor(id: LinkId, local: Hello, timers: LinkTimers, now: Instant) -> Link {
        let mut l = Link::new(
            id,
            Role::Acceptor,
            LinkState::Handshaking,
            local,
            timers,
            now,
        );
        let hello = l.local.clone();
        l.send(Frame::HelloAck(hello), now);
        l
    }

    fn new(
        id: LinkId,
        role: Role,
        state: LinkState,
        local: Hello,
        timers: LinkTimers,
        now: Instant,
    ) -> Link {
        Link {
            id,
            role,
            state,
            local,
            timers,
            created: now,
            last_sent: now,
            last_recv: now,
            last_delivered: now,
            last_read: now,
            unframed: 0,
            peer: None,
            peer_listen_port: 0,
            peer_shoal: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: LinkStats::default(),
        }
    }

    /// This link's id.
    pub fn id(&self) -> LinkId {
        self.id
    }

    /// Dialer or acceptor.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Current state.
    pub fn state(&self) -> LinkState {
        self.state
    }

    /// The peer's id once its Hello arrived.
    pub fn peer(&self) -> Option<PeerId> {
        self.peer
    }

    /// The peer's Shoal extension (`None`: plain multimaster node, or Hello not yet received).
    pub fn peer_shoal(&self) -> Option<&ShoalExtension> {
        self.peer_shoal.as_ref()
    }

    /// Whether a frame of type `frame_type` may be sent to this peer: types above 8 only if
    /// it advertised extended frames, since the C++ library drops the link on unknown types.
    pub fn can_send_frame_type(&self, frame_type: u8) -> bool {
        peer_accepts_frame_type(self.peer_shoal.as_ref(), frame_type)
    }

    /// Counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The dialer's connect completed: send Hello.
    pub fn on_connected(&mut self, now: Instant) {
        if self.state == LinkState::Connecting {
            self.state = LinkState::Handshaking;
            let hello = self.local.clone();
            self.send(Frame::Hello(hello), now);
        }
    }

    /// Proof the peer is alive (a whole frame, or the driver's word that the link is busy on
    /// our side, e.g. its reader waits for room to hand over what it read).
    pub fn on_bytes_received(&mut self, now: Instant) {
        self.last_recv = self.last_recv.max(now);
        self.unframed = 0;
    }

    /// The driver saw the peer acknowledge new data (the kernel's count of bytes acknowledged
    /// grew since its last look): the peer is alive and reading, so a silence on our side is
    /// a slow path, not a dead one, for up to [`DELIVERING_GRACE`] times `heartbeat_timeout`.
    /// Not a dribble: a peer that sent bytes since its last progress, short of it, trickles
    /// (acknowledging our heartbeats all the while) and is closed as stalled at the timeout.
    pub fn on_delivered(&mut self, now: Instant) {
        self.last_delivered = self.last_delivered.max(now);
    }

    /// When the peer last acknowledged new data ([`on_delivered`](Self::on_delivered)), or
    /// the link was made if it never has.
    pub fn last_delivered(&self) -> Instant {
        self.last_delivered
    }

    /// When the link is dead if nothing arrives meanwhile: `heartbeat_timeout` after the last
    /// progress, or after the peer's last acknowledgement if that came later, and never more
    /// than [`DELIVERING_GRACE`] times `heartbeat_timeout` after the last progress.
    fn dead_at(&self) -> Instant {
        let timeout = self.timers.heartbeat_timeout;
        let silent = self.last_recv + timeout;
        if self.last_read > self.last_recv {
            // Bytes came after the last progress without making it: a trickle, not a path
            // that delivers nothing for a while.
            return silent;
        }
        let cap = self.last_recv + timeout * DELIVERING_GRACE;
        silent.max((self.last_delivered + timeout).min(cap))
    }

    /// `n` bytes were read from the socket (whole frames among them are reported on their
    /// own): every [`PROGRESS_BYTES`] of them count as progress, fewer do not.
    pub fn on_bytes_read(&mut self, n: usize, now: Instant) {
        self.last_read = self.last_read.max(now);
        self.unframed = self.unframed.saturating_add(n);
        if self.unframed >= PROGRESS_BYTES {
            self.on_bytes_received(now);
        }
    }

    /// The driver queued a frame of its own (Data, Membership, ...) on this link.
    pub fn on_sent(&mut self, now: Instant) {
        self.last_sent = self.last_sent.max(now);
    }

    /// A whole frame arrived.
    pub fn on_frame(&mut self, frame: &Frame, now: Instant) -> FrameAction {
        if self.state == LinkState::Closed {
            return FrameAction::Close;
        }
        self.on_bytes_received(now);
        self.stats.frames_received += 1;
        match frame {
            Frame::Hello(h) | Frame::HelloAck(h) => {
                if self.state != LinkState::Handshaking || self.peer.is_some() {
                    return self.fail(CloseReason::ProtocolViolation("unexpected Hello"));
                }
                if let Err(reason) = self.check_hello(h) {
                    return self.fail(reason);
                }
                self.peer = Some(h.node_id);
                self.peer_listen_port = h.tcp_listen_port;
                self.peer_shoal = h.shoal.clone();
                if self.local.is_secure() {
                    self.state = LinkState::AwaitingAuth;
                    self.events.push_back(LinkEvent::AuthRequired {
                        hello: Box::new(h.clone()),
                    });
                } else {
                    self.establish(h.tcp_listen_port);
                }
                FrameAction::Consumed
            }
            Frame::Heartbeat => FrameAction::Consumed,
            Frame::Goodbye => {
                self.state = LinkState::Closed;
                self.events
                    .push_back(LinkEvent::Closed(CloseReason::Goodbye));
                FrameAction::Close
            }
            Frame::AuthConfirm(_) => {
                if self.state == LinkState::AwaitingAuth {
                    FrameAction::Process
                } else {
                    self.fail(CloseReason::ProtocolViolation(
                        "AuthConfirm outside AwaitingAuth",
                    ))
                }
            }
            // The link's own frames are above: the rest is payload (`is_payload` lists it).
            _ => self.payload_frame(),
        }
    }

    /// True for the frames an established link hands on (Data, Samples, Membership, ...),
    /// false for the link's own (handshake, Heartbeat, Goodbye).
    pub fn is_payload(frame: &Frame) -> bool {
        match frame {
            Frame::Hello(_)
            | Frame::HelloAck(_)
            | Frame::Heartbeat
            | Frame::Goodbye
            | Frame::AuthConfirm(_) => false,
            Frame::Data(_)
            | Frame::Membership(_)
            | Frame::IdentityRecord(_)
            | Frame::Discovery(_)
            | Frame::Samples(_)
            | Frame::WriterHeartbeat(_)
            | Frame::AckNack(_)
            | Frame::Repair(_)
            | Frame::Gap(_)
            | Frame::SignedMembership(_)
            | Frame::MembershipDigest(_) => true,
        }
    }

    /// [`on_frame`](Self::on_frame) for a Data frame, given without the frame: the read
    /// path's fast lane decodes Data frames without building a [`Frame`].
    pub fn on_data(&mut self, now: Instant) -> FrameAction {
        if self.state == LinkState::Closed {
            return FrameAction::Close;
        }
        self.on_bytes_received(now);
        self.stats.frames_received += 1;
        self.payload_frame()
    }

    /// [`on_frame`](Self::on_frame) for a Samples frame, given without the frame: the read
    /// path's fast lane ([`crate::wire::take_samples`]) builds no [`Frame`] either.
    pub fn on_samples(&mut self, now: Instant) -> FrameAction {
        // The same step as a Data frame: both are payload frames of an established link.
        self.on_data(now)
    }

    fn payload_frame(&mut self) -> FrameAction {
        if self.state == LinkState::Established {
            FrameAction::Process
        } else {
            self.fail(CloseReason::ProtocolViolation(
                "payload frame before Established",
            ))
        }
    }

    /// Secured mesh: the peer's AuthConfirm verified.
    pub fn auth_confirmed(&mut self, _now: Instant) {
        if self.state == LinkState::AwaitingAuth {
            let port = self.peer_listen_port;
            self.establish(port);
        }
    }

    /// Secured mesh: the peer's AuthConfirm did not verify.
    pub fn auth_failed(&mut self, _now: Instant) {
        if self.state == LinkState::AwaitingAuth {
            self.fail(CloseReason::AuthFailed);
        }
    }

    /// Closes the link from this side, sending Goodbye first when `goodbye` and our Hello
    /// went out (a Goodbye before any Hello would only confuse the peer).
    pub fn close(&mut self, goodbye: bool, now: Instant) {
        if self.state == LinkState::Closed {
            return;
        }
        if goodbye && self.state != LinkState::Connecting {
            self.send(Frame::Goodbye, now);
        }
        self.state = LinkState::Closed;
        self.events.push_back(LinkEvent::Closed(CloseReason::Local));
    }

    /// When [`handle_timeout`](Self::handle_timeout) has work next (`None` once closed).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            LinkState::Closed => None,
            LinkState::Established => {
                Some((self.last_sent + self.timers.heartbeat_interval).min(self.dead_at()))
            }
            _ => Some(self.created + self.timers.handshake_timeout),
        }
    }

    /// Enforces the handshake deadline and liveness, and sends a Heartbeat on an idle link.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            LinkState::Closed => {}
            LinkState::Established => {
                if now >= self.dead_at() {
                    self.fail(if self.unframed > 0 {
                        CloseReason::Stalled
                    } else {
                        CloseReason::HeartbeatTimeout
                    });
                } else if now.saturating_duration_since(self.last_sent)
                    >= self.timers.heartbeat_interval
                {
                    self.stats.heartbeats_sent += 1;
                    self.send(Frame::Heartbeat, now);
                }
            }
            _ => {
                if now.saturating_duration_since(self.created) >= self.timers.handshake_timeout {
                    self.fail(CloseReason::HandshakeTimeout);
                }
            }
        }
    }

    /// Next control frame to send (Hello/HelloAck, Heartbeat, Goodbye).
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.transmits.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<LinkEvent> {
        self.events.pop_front()
    }

    fn check_hello(&self, h: &Hello) -> Result<(), CloseReason> {
        if h.protocol_version != self.local.protocol_version {
            return Err(CloseReason::VersionMismatch {
                ours: self.local.protocol_version,
                theirs: h.protocol_version,
            });
        }
        if h.group_name != self.local.group_name {
            return Err(CloseReason::GroupMismatch {
                theirs: h.group_name.clone(),
            });
        }
        if h.is_secure() != self.local.is_secure() {
            return Err(CloseReason::SecuredModeMismatch {
                ours: self.local.is_secure(),
                theirs: h.is_secure(),
            });
        }
        if h.node_id == self.local.node_id {
            return Err(CloseReason::SelfConnection);
        }
        Ok(())
    }

    fn establish(&mut self, listen_port: u16) {
        self.state = LinkState::Established;
        self.peer_listen_port = listen_port;
        self.events.push_back(LinkEvent::Established {
            peer: self.peer.expect("Hello received before establishing"),
            listen_port,
            shoal: self.peer_shoal.clone(),
        });
    }

    fn fail(&mut self, reason: CloseReason) -> FrameAction {
        tracing::debug!(link = ?self.id, peer = ?self.peer, %reason, "link closed");
        self.state = LinkState::Closed;
        self.events.push_back(LinkEvent::Closed(reason));
        FrameAction::Close
    }

    fn send(&mut self, frame: Frame, now: Instant) {
        self.last_sent = self.last_sent.max(now);
        self.transmits.push_back(frame);
    }
}
