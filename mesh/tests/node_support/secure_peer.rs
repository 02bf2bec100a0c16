//! A hand-driven identity-mode peer: it dials a node of a secured mesh, runs the secured
//! handshake with the crate's own sans-I/O code (`shoal_proto::crypto::Handshake`: X25519,
//! AuthConfirm tags, the Ed25519 transcript signature of its identity), then seals and opens
//! records with the crate's record layer. It is an authenticated member: it sends frames of
//! its own making (a member forging records about another node, in the live tests), records
//! every frame the node sends it, decoded, and keeps the link alive with sealed heartbeats.
//! It presents itself as a Shoal node ([`SecurePeer::dial`]: extended frames and signed
//! records advertised) or as a multimaster node with an identity
//! ([`SecurePeer::dial_multimaster`]: no Shoal extension).
//!
//! **Owns:** the test-side socket and its handshake. **Must not touch:** the node (driven only
//! over TCP).

use super::plain_hello;
use bytes::BytesMut;
use shoal_mesh::crypto::{
    Handshake, Identity, IdentityPolicy, PskKeys, RecordReader, RecordSealer, SecureContext,
};
use shoal_mesh::wire::{take_frame, Frame, ShoalExtension};
use shoal_mesh::PeerId;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MAX: u32 = 16 * 1024 * 1024;

/// The sending half: the socket and the record sealer, used in order.
struct Tx {
    sock: TcpStream,
    sealer: RecordSealer,
}

impl Tx {
    fn send(&mut self, f: &Frame) -> std::io::Result<()> {
        let mut plain = Vec::new();
        f.encode(&mut plain).expect("the test's frame encodes");
        let mut rec = Vec::new();
        self.sealer
            .seal_frame(&mut rec, &plain)
            .expect("the test's frame fits a record");
        self.sock.write_all(&rec)
    }
}

#[derive(Default)]
struct Log {
    frames: Vec<Frame>,
    closed: bool,
}

/// An identity-mode peer driven by hand (see the module docs).
pub struct SecurePeer {
    /// Its node id (the hash of its identity key).
    pub id: PeerId,
    /// Its identity (to sign records of its own).
    pub identity: Identity,
    tx: Arc<Mutex<Tx>>,
    log: Arc<Mutex<Log>>,
    stop: Arc<AtomicBool>,
}

impl SecurePeer {
    /// Dials `127.0.0.1:port` as a Shoal node of the mesh with `psk` (group "default"),
    /// identity from seed `[seed; 32]`, and completes the secured handshake.
    pub fn dial(port: u16, psk: &str, seed: u8) -> SecurePeer {
        SecurePeer::dial_as(port, psk, seed, Some(ShoalExtension::current()))
    }

    /// Dials like [`SecurePeer::dial`] as a multimaster node with an identity (no Shoal
    /// extension: it is sent no extended frame and its records cannot be signed).
    pub fn dial_multimaster(port: u16, psk: &str, seed: u8) -> SecurePeer {
        SecurePeer::dial_as(port, psk, seed, None)
    }

    fn dial_as(port: u16, psk: &str, seed: u8, shoal: Option<ShoalExtension>) -> SecurePeer {
        let identity = Identity::from_seed(&[seed; 32], &format!("peer-{seed}")).unwrap();
        let ctx = SecureContext::new(PskKeys::derive(psk.as_bytes()).unwrap(), b"default")
            .unwrap()
            .with_identity(identity.clone(), IdentityPolicy::open(false));
        let mut hs = Handshake::new(Arc::new(ctx), &mut rand::thread_rng());
        let mut hello = plain_hello();
        hello.shoal = shoal;
        hs.fill_hello(&mut hello);
        let id = hello.node_id;
        assert_eq!(id, identity.node_id());

        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write_plain(&mut s, &Frame::Hello(hello));
        let mut buf = BytesMut::new();
        // The node's HelloAck, then (once it checked our Hello) its AuthConfirm.
        let ack = match read_plain(&mut s, &mut buf) {
            Frame::HelloAck(h) => h,
            other => panic!("expected HelloAck, got {other:?}"),
        };
        let confirm = hs
            .on_peer_hello(&ack)
            .expect("the node's HelloAck is honest");
        write_plain(&mut s, &Frame::AuthConfirm(confirm));
        let theirs = match read_plain(&mut s, &mut buf) {
            Frame::AuthConfirm(c) => c,
            other => panic!("expected AuthConfirm, got {other:?}"),
        };
        let est = hs
            .on_peer_auth_confirm(&theirs)
            .expect("the node's AuthConfirm verifies");
        // Whatever followed the node's AuthConfirm is records already.
        let reader = RecordReader::new(est.opener, &buf);
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let tx = Arc::new(Mutex::new(Tx {
            sock: s.try_clone().unwrap(),
            sealer: est.sealer,
        }));
        let peer = SecurePeer {
            id,
            identity,
            tx: tx.clone(),
            log: Arc::default(),
            stop: Arc::default(),
        };
        let (log, stop) = (peer.log.clone(), peer.stop.clone());
        std::thread::spawn(move || read_loop(s, reader, tx, log, stop));
        peer
    }

    /// Seals and sends `f`, whatever it says.
    pub fn send_frame(&self, f: Frame) {
        // The node may have closed the link; the test's assertions say so.
        let _ = self.tx.lock().unwrap().send(&f);
    }

    /// Every frame the node sent after the handshake, decoded.
    pub fn frames(&self) -> Vec<Frame> {
        self.log.lock().unwrap().frames.clone()
    }

    /// True once the node closed the connection.
    pub fn closed(&self) -> bool {
        self.log.lock().unwrap().closed
    }
}

impl Drop for SecurePeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn write_plain(s: &mut TcpStream, f: &Frame) {
    let mut b = Vec::new();
    f.encode(&mut b).unwrap();
    s.write_all(&b).unwrap();
}

/// The next plaintext handshake frame (the bytes after it stay in `buf`).
fn read_plain(s: &mut TcpStream, buf: &mut BytesMut) -> Frame {
    loop {
        if let Some(f) = take_frame(buf, MAX).expect("the node's handshake frames decode") {
            return f;
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) => panic!("the node closed the connection in the handshake"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("the node did not answer the handshake: {e}"),
        }
    }
}

/// Opens records as they come, logs every frame, and heartbeats every read timeout.
fn read_loop(
    mut s: TcpStream,
    mut reader: RecordReader,
    tx: Arc<Mutex<Tx>>,
    log: Arc<Mutex<Log>>,
    stop: Arc<AtomicBool>,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    'run: while !stop.load(Ordering::Acquire) {
        // Far more often than the node's heartbeat timeout, whatever it sends.
        if tx.lock().unwrap().send(&Frame::Heartbeat).is_err() {
            break;
        }
        loop {
            let mut plain = BytesMut::from(reader.plaintext());
            match take_frame(&mut plain, MAX) {
                Ok(Some(f)) => {
                    let used = reader.plaintext().len() - plain.len();
                    reader.consume(used);
                    log.lock().unwrap().frames.push(f);
                }
                Ok(None) => match reader.open_next() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(_) => break 'run,
                },
                Err(_) => break 'run,
            }
        }
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reader.push(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    log.lock().unwrap().closed = true;
}
