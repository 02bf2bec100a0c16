//! One handshaking connection as one state machine: the [`Link`] (Hello exchange, mode and
//! group checks) composed with the secured mesh's [`Handshake`] (X25519, AuthConfirm,
//! identity), over the raw bytes of the socket.
//!
//! The driver feeds every byte read ([`Handshaking::on_bytes`]), the end of the stream
//! ([`Handshaking::on_eof`]) and the clock ([`Handshaking::handle_timeout`]); each returns a
//! [`Progress`] and appends to `out` the bytes to write (Hello/HelloAck, AuthConfirm). Our
//! AuthConfirm is written as soon as the peer's Hello passed the checks; the peer's is parsed
//! only after that, and parsing stops at the frame that establishes the link, so the bytes after
//! it (records, in a secured mesh) are handed over unread ([`Exchanged::leftover`]).
//!
//! Bounds: before the link is up only handshake frames are valid, so a frame longer than
//! [`MAX_HANDSHAKE_FRAME_LEN`] (or `max_message_bytes`, if lower) fails the handshake, and the
//! whole exchange must end within `handshake_timeout` of its start.
//!
//! **Owns:** one connection from its first byte to Established (or refusal). **Must not
//! touch:** the peer table (the core reports the outcome), sockets, the clock.

use super::output::ControlErrorKind;
use crate::crypto::{Established, Handshake, HandshakeError};
use crate::link::{CloseReason, FrameAction, Link, LinkEvent, LinkTimers, Role};
use crate::wire::{take_frame, DecodeError, Frame, Hello, MAX_HANDSHAKE_FRAME_LEN};
use crate::{LinkId, PeerId};
use bytes::BytesMut;
use std::net::IpAddr;
use std::time::Instant;

/// Why a handshake failed, when it is worth telling the application (quiet refusals, such as
/// another group or a peer that hung up, carry none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The class of failure.
    pub kind: ControlErrorKind,
    /// Human-readable detail.
    pub message: String,
}

/// A completed handshake.
#[derive(Debug)]
pub struct Exchanged {
    /// The peer's node id.
    pub peer: PeerId,
    /// The peer's TCP listen port.
    pub listen_port: u16,
    /// Bytes read after the establishing frame (records, in a secured mesh).
    pub leftover: BytesMut,
    /// Secured mesh: the record keys and the verified identity.
    pub secure: Option<Established>,
    /// The link's state machine, Established.
    pub link: Link,
}

/// Where a handshake stands after an input.
#[derive(Debug)]
pub enum Progress {
    /// Waiting for more bytes.
    Pending,
    /// Established: take the result with [`Handshaking::into_exchanged`].
    Done,
    /// Refused or failed; close the connection.
    Failed(Option<Failure>),
}

/// One connection in its handshake.
#[derive(Debug)]
pub struct Handshaking {
    link: Link,
    crypto: Option<Handshake>,
    established: Option<Established>,
    buf: BytesMut,
    max_frame: u32,
    deadline: Instant,
    remote: Option<IpAddr>,
    /// The peer and its listen port, once established.
    done: Option<(PeerId, u16)>,
}

impl Handshaking {
    /// Starts the handshake of connection `id` (the dialer's connect completed, or the
    /// acceptor's socket was accepted): our Hello/HelloAck is written at once. `hello` is ours
    /// (the crypto fields are filled here from `crypto`); `max_message_bytes` caps the frame
    /// bound below [`MAX_HANDSHAKE_FRAME_LEN`].
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        id: LinkId,
        role: Role,
        mut hello: Hello,
        mut crypto: Option<Handshake>,
        timers: LinkTimers,
        max_message_bytes: u32,
        remote: Option<IpAddr>,
        now: Instant,
        out: &mut BytesMut,
    ) -> Handshaking {
        if let Some(c) = crypto.as_mut() {
            c.fill_hello(&mut hello);
        }
        let link = match role {
            Role::Dialer => {
                let mut l = Link::dialer(id, hello, timers, now);
                l.on_connected(now);
                l
            }
            Role::Acceptor => Link::acceptor(id, hello, timers, now),
        };
        let mut h = Handshaking {
            link,
            crypto,
            established: None,
            buf: BytesMut::new(),
            max_frame: max_message_bytes.min(MAX_HANDSHAKE_FRAME_LEN),
            deadline: now + timers.handshake_timeout,
            remote,
            done: None,
        };
        h.flush(out);
        h
    }

    /// The peer's id once its Hello arrived.
    pub fn peer(&self) -> Option<PeerId> {
        self.link.peer()
    }

    /// The socket's remote address, if known.
    pub fn remote(&self) -> Option<IpAddr> {
        self.remote
    }

    /// When the handshake times out.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Bytes read from the socket.
    pub fn on_bytes(&mut self, bytes: &[u8], now: Instant, out: &mut BytesMut) -> Progress {
        self.buf.extend_from_slice(bytes);
        self.advance(now, out)
    }

    /// The peer closed its side (or the socket failed).
    pub fn on_eof(&mut self) -> Progress {
        if self.buf.is_empty() {
            return Progress::Failed(None);
        }
        Progress::Failed(Some(Failure {
            kind: ControlErrorKind::Malformed,
            message: "connection closed inside a frame during handshake".into(),
        }))
    }

    /// Fails the handshake once its deadline passed.
    pub fn handle_timeout(&mut self, now: Instant) -> Progress {
        if now < self.deadline {
            return Progress::Pending;
        }
        if self.buf.is_empty() {
            return Progress::Failed(None);
        }
        let n = self.buf.len();
        Progress::Failed(Some(Failure {
            kind: ControlErrorKind::Malformed,
            message: format!("handshake timed out inside an incomplete frame ({n} bytes)"),
        }))
    }

    fn flush(&mut self, out: &mut BytesMut) {
        while let Some(f) = self.link.poll_transmit() {
            encode(&f, out);
        }
    }

    fn advance(&mut self, now: Instant, out: &mut BytesMut) -> Progress {
        loop {
            self.flush(out);
            if let Some(ev) = self.link.poll_event() {
                match ev {
                    LinkEvent::Established {
                        peer, listen_port, ..
                    } => return self.done(peer, listen_port),
                    LinkEvent::Closed(reason) => return Progress::Failed(refusal(&reason)),
                    LinkEvent::AuthRequired { hello } => {
                        let Some(hs) = self.crypto.as_mut() else {
                            return Progress::Failed(None);
                        };
                        // Ours goes out in plaintext at once; the peer's is parsed only after
                        // this, so the frames after it are never taken for plaintext.
                        match hs.on_peer_hello(&hello) {
                            Ok(confirm) => encode(&Frame::AuthConfirm(confirm), out),
                            Err(e) => return Progress::Failed(Some(auth_failure(e))),
                        }
                        continue;
                    }
                }
            }
            match take_frame(&mut self.buf, self.max_frame) {
                Ok(Some(f)) => {
                    let action = self.link.on_frame(&f, now);
                    if let (FrameAction::Process, Frame::AuthConfirm(confirm)) = (action, &f) {
                        let Some(hs) = self.crypto.as_mut() else {
                            return Progress::Failed(None);
                        };
                        match hs.on_peer_auth_confirm(confirm) {
                            Ok(est) => {
                                self.established = Some(est);
                                self.link.auth_confirmed(now);
                            }
                            Err(e) => {
                                self.link.auth_failed(now);
                                return Progress::Failed(Some(auth_failure(e)));
                            }
                        }
                    }
                }
                Ok(None) => return Progress::Pending,
                Err(e) => return Progress::Failed(Some(decode_failure(&e))),
            }
        }
    }

    fn done(&mut self, peer: PeerId, listen_port: u16) -> Progress {
        self.done = Some((peer, listen_port));
        Progress::Done
    }

    /// The outcome of a handshake that reported [`Progress::Done`] (`None` before).
    pub fn into_exchanged(self) -> Option<Exchanged> {
        let (peer, listen_port) = self.done?;
        Some(Exchanged {
            peer,
            listen_port,
            leftover: self.buf,
            secure: self.established,
            link: self.link,
        })
    }
}

fn encode(f: &Frame, out: &mut BytesMut) {
    // Our own handshake frames always encode (bounded fields set by this node).
    let _ = f.encode(out);
}

/// A refused secured handshake, classified for the error event.
pub(crate) fn auth_failure(e: HandshakeError) -> Failure {
    let kind = match e {
        HandshakeError::PeerNotSecured => ControlErrorKind::ModeMismatch,
        HandshakeError::Identity(_) => ControlErrorKind::Identity,
        HandshakeError::LowOrderKey
        | HandshakeError::BadTag
        | HandshakeError::UnexpectedHello
        | HandshakeError::UnexpectedAuthConfirm => ControlErrorKind::Crypto,
    };
    Failure {
        kind,
        message: format!("handshake refused: {e}"),
    }
}

fn decode_failure(e: &DecodeError) -> Failure {
    let kind = if matches!(e, DecodeError::TooLarge { .. }) {
        ControlErrorKind::Oversize
    } else {
        ControlErrorKind::Malformed
    };
    Failure {
        kind,
        message: format!("during handshake: {e}"),
    }
}

/// A link closed during the Hello exchange: a mode mismatch is reported (the operator must
/// see that one side has a PSK and the other not); the other refusals stay quiet.
fn refusal(reason: &CloseReason) -> Option<Failure> {
    match reason {
        CloseReason::SecuredModeMismatch { ours, theirs } => {
            let mode = |s: &bool| if *s { "secured (psk)" } else { "plaintext" };
            Some(Failure {
                kind: ControlErrorKind::ModeMismatch,
                message: format!(
                    "handshake refused: peer is {}, this node is {}",
                    mode(theirs),
                    mode(ours)
                ),
            })
        }
        other => {
            tracing::debug!(reason = %other, "handshake refused");
            None
        }
    }
}
