//! The physical-limit baselines over bare blocking TCP with std threads and a `BufWriter`, so
//! a run can compare Shoal with what the kernel and loopback allow: [`Framing::Data`] carries
//! the same frames as a Shoal link (58-byte Data header + payload, byte for byte), and
//! [`Framing::LengthPrefixed`] the payload alone behind a 4-byte big-endian length (the
//! smallest framing a stream of messages can have: the topic benchmark's baseline).

use crate::traffic::{Receiver, Sink, SinkError};
use shoal_mesh::wire::{DataHeader, DATA_HEADER_LEN, LENGTH_PREFIX_LEN};
use shoal_mesh::{MsgId, PeerId};
use std::io::{BufWriter, ErrorKind, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Write batching: frames are gathered up to this many bytes (or until the publisher is ahead
/// of its schedule) before one `write`.
pub const BATCH_BYTES: usize = 64 * 1024;
/// Bytes after the length prefix and before the payload (type byte + fixed Data fields).
const BODY_BEFORE_PAYLOAD: usize = DATA_HEADER_LEN - LENGTH_PREFIX_LEN;
/// Largest frame a raw reader accepts (the mesh default `max_message_bytes`).
const MAX_FRAME: usize = shoal_mesh::wire::MAX_MESSAGE_BYTES as usize;

/// How a raw stream delimits its messages (`pub`/`sub --raw --framing`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Framing {
    /// Shoal's Data frames (58-byte header + payload).
    #[default]
    Data,
    /// `u32 length (big-endian) | payload` (raw-lp).
    #[value(name = "lp")]
    LengthPrefixed,
}

impl Framing {
    /// The transport label of runs with this framing.
    pub fn label(self) -> &'static str {
        match self {
            Framing::Data => "raw-tcp",
            Framing::LengthPrefixed => "raw-lp",
        }
    }
}

/// Builds Data headers as a Shoal originator would (own id, counting message ids).
#[derive(Debug, Clone)]
pub struct Framer {
    src: PeerId,
    counter: u64,
}

impl Default for Framer {
    fn default() -> Self {
        Framer {
            src: PeerId::random(),
            counter: 0,
        }
    }
}

impl Framer {
    /// The header of the next broadcast frame carrying `len` payload bytes.
    pub fn next_header(&mut self, len: usize) -> DataHeader {
        self.counter += 1;
        let id = MsgId::new(&self.src, self.counter);
        DataHeader::new(&self.src, &PeerId::ZERO, &id, 8, len).expect("payload fits a frame")
    }
}

/// Writes whole frames to one or more connections (a broadcast to every neighbour).
pub struct RawSink {
    conns: Vec<BufWriter<TcpStream>>,
    framer: Framer,
    framing: Framing,
}

impl RawSink {
    /// Sends messages framed as `framing` to every stream in `conns` (TCP_NODELAY set here).
    pub fn with_framing(conns: Vec<TcpStream>, framing: Framing) -> RawSink {
        RawSink {
            framing,
            conns: conns
                .into_iter()
                .map(|s| {
                    let _ = s.set_nodelay(true);
                    BufWriter::with_capacity(BATCH_BYTES, s)
                })
                .collect(),
            framer: Framer::default(),
        }
    }
}

fn fatal(e: std::io::Error) -> SinkError {
    SinkError::Fatal(e.to_string())
}

impl Sink for RawSink {
    fn send(&mut self, payload: &[u8]) -> Result<(), SinkError> {
        if self.framing == Framing::LengthPrefixed {
            let len = u32::try_from(payload.len())
                .map_err(|_| SinkError::Fatal("payload over 4 GiB".into()))?
                .to_be_bytes();
            for c in &mut self.conns {
                if payload.len() >= BATCH_BYTES / 2 {
                    c.flush().map_err(fatal)?;
                    write_all_vectored(c.get_mut(), &len, payload).map_err(fatal)?;
                } else {
                    c.write_all(&len).map_err(fatal)?;
                    c.write_all(payload).map_err(fatal)?;
                }
            }
            return Ok(());
        }
        let h = self.framer.next_header(payload.len());
        for c in &mut self.conns {
            if payload.len() >= BATCH_BYTES / 2 {
                // Large payloads skip the copy into the buffer and go out as one vectored
                // write with their header, as a mesh link writes them (not header alone, then
                // payload, which is what BufWriter would do).
                c.flush().map_err(fatal)?;
                write_all_vectored(c.get_mut(), h.as_bytes(), payload).map_err(fatal)?;
            } else {
                c.write_all(h.as_bytes()).map_err(fatal)?;
                c.write_all(payload).map_err(fatal)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        for c in &mut self.conns {
            c.flush().map_err(fatal)?;
        }
        Ok(())
    }
}

/// Writes `a ++ b` with vectored writes until all of it is out.
fn write_all_vectored(w: &mut impl Write, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let mut slices = [IoSlice::new(a), IoSlice::new(b)];
    let mut bufs = &mut slices[..];
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Why a raw frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed or closed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The bytes are not a frame of the stream's framing.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

/// Writes one frame (`header ++ payload`) to `w` without flushing.
pub fn write_frame(w: &mut impl Write, h: &DataHeader, payload: &[u8]) -> std::io::Result<()> {
    w.write_all(h.as_bytes())?;
    w.write_all(payload)
}

/// Splits a byte stream into Data frames, tolerating reads that stop anywhere (timeouts).
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    framing: Framing,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader::with_framing(Framing::Data)
    }
}

impl FrameReader {
    /// A reader of `framing`'s frames.
    pub fn with_framing(framing: Framing) -> FrameReader {
        FrameReader {
            buf: vec![0; 2 * BATCH_BYTES],
            start: 0,
            end: 0,
            framing,
        }
    }

    /// The payload of the next complete frame in the buffer, if any.
    pub fn next_payload(&mut self) -> Result<Option<&[u8]>, FrameError> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < LENGTH_PREFIX_LEN {
            return Ok(None);
        }
        let len = u32::from_be_bytes(avail[..4].try_into().expect("4 bytes")) as usize;
        if self.framing == Framing::LengthPrefixed {
            if len > MAX_FRAME {
                return Err(FrameError::Malformed("length above max_message_bytes"));
            }
            let total = LENGTH_PREFIX_LEN + len;
            if avail.len() < total {
                if total > self.buf.len() {
                    self.buf.resize(total, 0);
                }
                return Ok(None);
            }
            let at = self.start + LENGTH_PREFIX_LEN;
            self.start += total;
            return Ok(Some(&self.buf[at..self.start]));
        }
        if !(BODY_BEFORE_PAYLOAD..=MAX_FRAME).contains(&len) {
            return Err(FrameError::Malformed("frame length out of range"));
        }
        let total = LENGTH_PREFIX_LEN + len;
        if avail.len() < total {
            if total > self.buf.len() {
                self.buf.resize(total, 0);
            }
            return Ok(None);
        }
        let frame = &avail[LENGTH_PREFIX_LEN..total];
        if frame[0] != 4 {
            return Err(FrameError::Malformed("frame type is not Data"));
        }
        let p = &frame[BODY_BEFORE_PAYLOAD - 4..BODY_BEFORE_PAYLOAD];
        if u32::from_be_bytes(p.try_into().expect("4 bytes")) as usize != len - BODY_BEFORE_PAYLOAD
        {
            return Err(FrameError::Malformed(
                "payload length disagrees with frame length",
            ));
        }
        let at = self.start + DATA_HEADER_LEN;
        self.start += total;
        Ok(Some(&self.buf[at..self.start]))
    }

    /// Reads more bytes from `r`; `Ok(0)` means the peer closed.
    pub fn fill(&mut self, r: &mut impl Read) -> std::io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = r.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }
}

/// Receives `framing`'s frames from `stream` into `recv` until `until`, `stop`, the peer
/// closes, or `publishers` end markers arrived: each frame is split off, its payload parsed
/// (stamp) and counted by `recv`.
pub fn subscribe_framed(
    mut stream: TcpStream,
    framing: Framing,
    recv: &mut Receiver,
    publishers: usize,
    until: Instant,
    stop: &AtomicBool,
    live: &AtomicU64,
) -> Result<(), FrameError> {
    // A read timeout lets the loop notice the deadline while the publisher is silent.
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut fr = FrameReader::with_framing(framing);
    let mut n = 0u64;
    loop {
        if Instant::now() >= until || stop.load(Ordering::Relaxed) || recv.done(publishers) {
            return Ok(());
        }
        while let Some(payload) = fr.next_payload()? {
            recv.on_payload(payload);
            n += 1;
        }
        live.store(n, Ordering::Relaxed);
        match fr.fill(&mut stream) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_the_mesh_layout() {
        let mut f = Framer::default();
        let payload = b"hello raw world, twenty-four+ bytes";
        let h = f.next_header(payload.len());
        assert_eq!(h.as_bytes().len(), 58);
        assert_eq!(h.payload_len(), payload.len());
        let mut wire = Vec::new();
        write_frame(&mut wire, &h, payload).unwrap();
        write_frame(&mut wire, &f.next_header(0), b"").unwrap();
        assert_eq!(wire.len(), 58 + payload.len() + 58);
        let mut fr = FrameReader::default();
        assert_eq!(fr.fill(&mut &wire[..]).unwrap(), wire.len());
        assert_eq!(fr.next_payload().unwrap().unwrap(), payload);
        assert_eq!(fr.next_payload().unwrap().unwrap(), b"");
        assert!(fr.next_payload().unwrap().is_none());
        assert_eq!(fr.fill(&mut &[][..]).unwrap(), 0, "closed");
    }

    #[test]
    fn frame_reader_handles_frames_split_anywhere() {
        let mut f = Framer::default();
        let mut wire = Vec::new();
        let payloads: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 24 + i as usize * 7]).collect();
        for p in &payloads {
            write_frame(&mut wire, &f.next_header(p.len()), p).unwrap();
        }
        // Feed it 13 bytes at a time: every frame boundary lands mid-read somewhere.
        let mut fr = FrameReader::default();
        let mut got = Vec::new();
        for chunk in wire.chunks(13) {
            let mut r = chunk;
            fr.fill(&mut r).unwrap();
            while let Some(p) = fr.next_payload().unwrap() {
                got.push(p.to_vec());
            }
        }
        assert_eq!(got, payloads);
    }

    #[test]
    fn vectored_writes_survive_short_writes() {
        // A writer that takes at most 5 bytes per call.
        struct Trickle(Vec<u8>);
        impl Write for Trickle {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let n = b.len().min(5);
                self.0.extend_from_slice(&b[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut t = Trickle(Vec::new());
        write_all_vectored(&mut t, b"header-bytes", b"and the payload").unwrap();
        assert_eq!(t.0, b"header-bytesand the payload");
    }

    #[test]
    fn length_prefixed_frames_round_trip_split_anywhere() {
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; i as usize * 11]).collect();
        let mut wire = Vec::new();
        for p in &payloads {
            wire.extend_from_slice(&(p.len() as u32).to_be_bytes());
            wire.extend_from_slice(p);
        }
        let mut fr = FrameReader::with_framing(Framing::LengthPrefixed);
        let mut got = Vec::new();
        for chunk in wire.chunks(7) {
            fr.fill(&mut &chunk[..]).unwrap();
            while let Some(p) = fr.next_payload().unwrap() {
                got.push(p.to_vec());
            }
        }
        assert_eq!(got, payloads);
        // A length past the bound is refused, not allocated.
        let mut fr = FrameReader::with_framing(Framing::LengthPrefixed);
        fr.fill(&mut &u32::MAX.to_be_bytes()[..]).unwrap();
        assert!(matches!(fr.next_payload(), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn garbage_is_refused() {
        let mut fr = FrameReader::default();
        fr.fill(&mut &[0u8, 0, 0, 2, 4, 0][..]).unwrap();
        assert!(matches!(fr.next_payload(), Err(FrameError::Malformed(_))));
        let mut f = Framer::default();
        let mut wire = Vec::new();
        write_frame(&mut wire, &f.next_header(3), b"abc").unwrap();
        wire[4] = 5;
        let mut fr = FrameReader::default();
        fr.fill(&mut &wire[..]).unwrap();
        assert!(matches!(fr.next_payload(), Err(FrameError::Malformed(_))));
        // A payload length that disagrees with the frame length.
        let mut wire = Vec::new();
        write_frame(&mut wire, &f.next_header(3), b"abc").unwrap();
        wire.push(0);
        wire[3] += 1;
        let mut fr = FrameReader::default();
        fr.fill(&mut &wire[..]).unwrap();
        assert!(matches!(fr.next_payload(), Err(FrameError::Malformed(_))));
    }
}
