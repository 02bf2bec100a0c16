//! Test wiring between live nodes: a TCP relay that can be cut (a link that goes away while
//! both nodes keep running) and a hand-driven peer that records every frame type it is sent:
//! a plain multimaster v1 one (no Shoal Hello extension), or a stranger posing as a Shoal
//! node (the extension advertising extended frames) that sends frames of its making.
//!
//! **Owns:** the test-side sockets. **Must not touch:** the nodes (they are driven only over
//! TCP and their public API).

use super::plain_hello;
use bytes::BytesMut;
use shoal_mesh::wire::{take_frame, Discovery, Frame, ShoalExtension, DISCOVERY_FRAME_TYPE};
use shoal_mesh::{MsgId, PeerId};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A byte relay on 127.0.0.1 toward `127.0.0.1:target`: a node dialing [`CutProxy::port`]
/// links with the target through it. [`CutProxy::cut`] closes every relayed connection and
/// refuses new ones, so the link is gone while both nodes run on, until [`CutProxy::heal`]
/// lets the dialing node's next attempt through.
pub struct CutProxy {
    port: u16,
    cut: Arc<AtomicBool>,
    socks: Arc<Mutex<Vec<TcpStream>>>,
}

impl CutProxy {
    /// Starts relaying toward `target` (a node's listen port).
    pub fn start(target: u16) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let socks: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, s) = (cut.clone(), socks.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { continue };
                if c.load(Ordering::Acquire) {
                    drop(inbound);
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                {
                    let mut keep = s.lock().unwrap();
                    keep.push(inbound.try_clone().unwrap());
                    keep.push(outbound.try_clone().unwrap());
                }
                // The cut may have come between the check and the registration.
                if c.load(Ordering::Acquire) {
                    let _ = inbound.shutdown(Shutdown::Both);
                    let _ = outbound.shutdown(Shutdown::Both);
                    continue;
                }
                pump(inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                pump(outbound, inbound);
            }
        });
        CutProxy { port, cut, socks }
    }

    /// The port to dial.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Accepts connections again (the dialing node reconnects with its backoff).
    #[allow(dead_code)]
    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
    }

    /// Closes every relayed connection and refuses all later ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for s in self.socks.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copies `from` to `to` on a thread of its own until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// A Data frame the raw peer read: `(src, dst, payload)`.
pub type RawData = (PeerId, PeerId, Vec<u8>);

#[derive(Default)]
struct RawLog {
    /// Every frame type byte the node sent, in order.
    types: Vec<u8>,
    data: Vec<RawData>,
    /// The Discovery frames, whole (length prefix included), decoded when asked for.
    discovery: Vec<Vec<u8>>,
    closed: bool,
}

/// A peer driven by hand: it dials a node, sends a Hello without Shoal's extension block (a
/// plain multimaster v1 peer, [`RawPeer::dial`]: it advertises no extended frames) or with it
/// ([`RawPeer::dial_capable`]), keeps the link alive with heartbeats, records every frame it
/// is sent by its raw type byte (it never decodes a frame it does not know, as a v1 peer would
/// drop the link on one; the Discovery frames a capable one is sent are kept and decoded on
/// demand) and sends Data frames, or any frame, of its own.
pub struct RawPeer {
    /// Its node id.
    pub id: PeerId,
    out: Arc<Mutex<TcpStream>>,
    log: Arc<Mutex<RawLog>>,
    stop: Arc<AtomicBool>,
    counter: AtomicU64,
}

impl RawPeer {
    /// Dials `127.0.0.1:port` and says Hello (plain v1, default group).
    pub fn dial(port: u16) -> RawPeer {
        let hello = plain_hello();
        assert!(hello.shoal.is_none(), "a plain v1 Hello");
        RawPeer::dial_with(port, hello)
    }

    /// Dials like [`RawPeer::dial`] under `id`: another link of the plain v1 peer `id` (a
    /// multimaster node linked to several nodes; it floods a message of its own on each of
    /// its links under one message id, as the C++ library does).
    pub fn dial_as(port: u16, id: PeerId) -> RawPeer {
        let mut hello = plain_hello();
        hello.node_id = id;
        RawPeer::dial_with(port, hello)
    }

    /// Dials like [`RawPeer::dial`], but its Hello carries Shoal's extension block with
    /// extended frames, as a Shoal node's (or a stranger's posing as one) does: the node
    /// then sends it topic frames and takes topic frames from it ([`RawPeer::send_frame`]).
    pub fn dial_capable(port: u16) -> RawPeer {
        let mut hello = plain_hello();
        hello.shoal = Some(ShoalExtension::current());
        RawPeer::dial_with(port, hello)
    }

    /// Dials like [`RawPeer::dial_capable`] under `id`: a second link of the peer `id` (to
    /// another node), as a stranger that says it is next to both nodes has.
    pub fn dial_capable_as(port: u16, id: PeerId) -> RawPeer {
        let mut hello = plain_hello();
        hello.node_id = id;
        hello.shoal = Some(ShoalExtension::current());
        RawPeer::dial_with(port, hello)
    }

    fn dial_with(port: u16, hello: shoal_mesh::wire::Hello) -> RawPeer {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let id = hello.node_id;
        let out = Arc::new(Mutex::new(s.try_clone().unwrap()));
        let peer = RawPeer {
            id,
            out: out.clone(),
            log: Arc::default(),
            stop: Arc::default(),
            counter: AtomicU64::new(0),
        };
        peer.send(Frame::Hello(hello));
        let (log, stop) = (peer.log.clone(), peer.stop.clone());
        std::thread::spawn(move || read_loop(s, out, log, stop));
        peer
    }

    /// Sends `f` as encoded, whatever it says.
    pub fn send_frame(&self, f: Frame) {
        self.send(f);
    }

    /// Sends `frames` encoded back to back in one write, so the node reads them together
    /// (on loopback they arrive in one read).
    pub fn send_frames(&self, frames: &[Frame]) {
        let mut bytes = Vec::new();
        for f in frames {
            f.encode(&mut bytes).unwrap();
        }
        // The node may have closed the link; the test's assertions say so.
        let _ = self.out.lock().unwrap().write_all(&bytes);
    }

    fn send(&self, f: Frame) {
        self.send_frames(&[f]);
    }

    /// Sends a Data frame from this peer to `dst` (`PeerId::ZERO`: a broadcast), ttl 8.
    pub fn send_data(&self, dst: PeerId, payload: &[u8]) {
        let counter = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let data = shoal_mesh::wire::Data {
            src: self.id,
            dst,
            msg_id: MsgId::new(&self.id, counter),
            ttl: 8,
            payload: payload.to_vec().into(),
        };
        self.send(Frame::Data(data));
    }

    /// Every frame type byte received so far.
    pub fn types(&self) -> Vec<u8> {
        self.log.lock().unwrap().types.clone()
    }

    /// Every Data frame received so far.
    pub fn data(&self) -> Vec<RawData> {
        self.log.lock().unwrap().data.clone()
    }

    /// Every Discovery frame received so far, decoded (a capable peer is sent them).
    pub fn discovery(&self) -> Vec<Discovery> {
        let raw = self.log.lock().unwrap().discovery.clone();
        raw.into_iter()
            .filter_map(|f| take_frame(&mut BytesMut::from(&f[..]), u32::MAX).ok()?)
            .filter_map(|f| match f {
                Frame::Discovery(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    /// True once the node closed the connection.
    pub fn closed(&self) -> bool {
        self.log.lock().unwrap().closed
    }
}

impl Drop for RawPeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Reads frames by hand (length, type byte, body), heartbeating every read timeout.
fn read_loop(
    mut s: TcpStream,
    out: Arc<Mutex<TcpStream>>,
    log: Arc<Mutex<RawLog>>,
    stop: Arc<AtomicBool>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let heartbeat = {
        let mut b = Vec::new();
        Frame::Heartbeat.encode(&mut b).unwrap();
        b
    };
    while !stop.load(Ordering::Acquire) {
        // Far more often than the node's heartbeat timeout, whatever it sends.
        if out.lock().unwrap().write_all(&heartbeat).is_err() {
            break;
        }
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        }
        while buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let frame: Vec<u8> = buf.drain(..4 + len).collect();
            let mut l = log.lock().unwrap();
            l.types.push(frame[4]);
            if frame[4] == DISCOVERY_FRAME_TYPE {
                l.discovery.push(frame.clone());
            }
            // Data body: src 16 | dst 16 | msgId 16 | ttl 1 | payloadLen 4 | payload.
            if frame[4] == 4 && frame.len() >= 5 + 53 {
                let b = &frame[5..];
                let src = PeerId(b[..16].try_into().unwrap());
                let dst = PeerId(b[16..32].try_into().unwrap());
                let plen = u32::from_be_bytes(b[49..53].try_into().unwrap()) as usize;
                let payload = b[53..(53 + plen).min(b.len())].to_vec();
                l.data.push((src, dst, payload));
            }
        }
    }
    log.lock().unwrap().closed = true;
}
