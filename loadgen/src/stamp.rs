//! The measurement stamp every load payload starts with: who sent it, its sequence number and
//! when it was sent, so receivers measure loss and latency instead of assuming them.
//!
//! Layout (big-endian, like the wire protocol): `publisher u64 | seq u64 | sent_ns u64`, then
//! filler up to the payload size. An end-of-stream marker has `seq == u64::MAX` and carries the
//! number of messages the publisher sent in place of the timestamp, so a receiver can count
//! the loss after its last received message too.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Bytes of the stamp at the start of every payload.
pub const STAMP_LEN: usize = 24;

/// Sequence number reserved for the end-of-stream marker.
const END_SEQ: u64 = u64::MAX;

/// Why a payload could not be read as a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StampError {
    /// The payload is shorter than [`STAMP_LEN`].
    #[error("payload of {0} bytes is shorter than the {STAMP_LEN}-byte stamp")]
    TooShort(usize),
}

/// What the first [`STAMP_LEN`] bytes of a payload say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// A measured message.
    Data {
        /// The publisher's id (random per publisher run).
        publisher: u64,
        /// Its sequence number, from 0, consecutive.
        seq: u64,
        /// Send time, nanoseconds since the Unix epoch (see [`now_ns`]).
        sent_ns: u64,
    },
    /// The publisher is done and sent `total` data messages.
    End {
        /// The publisher's id.
        publisher: u64,
        /// Number of data messages it sent (sequence numbers `0..total`).
        total: u64,
    },
}

impl Stamp {
    /// Writes the stamp into the first [`STAMP_LEN`] bytes of `buf`.
    pub fn write(&self, buf: &mut [u8]) -> Result<(), StampError> {
        if buf.len() < STAMP_LEN {
            return Err(StampError::TooShort(buf.len()));
        }
        let (a, b, c) = match *self {
            Stamp::Data {
                publisher,
                seq,
                sent_ns,
            } => (publisher, seq, sent_ns),
            Stamp::End { publisher, total } => (publisher, END_SEQ, total),
        };
        buf[..8].copy_from_slice(&a.to_be_bytes());
        buf[8..16].copy_from_slice(&b.to_be_bytes());
        buf[16..24].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }

    /// Reads the stamp at the start of `buf`.
    pub fn read(buf: &[u8]) -> Result<Stamp, StampError> {
        if buf.len() < STAMP_LEN {
            return Err(StampError::TooShort(buf.len()));
        }
        let word = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        let (publisher, seq, third) = (word(0), word(8), word(16));
        Ok(if seq == END_SEQ {
            Stamp::End {
                publisher,
                total: third,
            }
        } else {
            Stamp::Data {
                publisher,
                seq,
                sent_ns: third,
            }
        })
    }
}

/// Wall-clock time in nanoseconds since the Unix epoch. One clock for every node of one
/// process; across hosts latency is only as good as their clock synchronisation.
pub fn now_ns() -> u64 {
    wall_ns(Instant::now())
}

/// The wall-clock time (ns since the Unix epoch) of the monotonic instant `at`: the wall
/// clock read once per process, plus monotonic time since. Lets a hot loop stamp a message
/// with the `Instant` it already read instead of reading a second clock (a clock read costs
/// tens of nanoseconds on a VM, as much as a whole raw-TCP message).
pub fn wall_ns(at: Instant) -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let (mono, wall) = *ANCHOR.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (Instant::now(), wall)
    });
    match at.checked_duration_since(mono) {
        Some(d) => wall.saturating_add(d.as_nanos() as u64),
        None => wall.saturating_sub(mono.duration_since(at).as_nanos() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_round_trips_and_leaves_filler_alone() {
        let mut buf = vec![0xAAu8; 64];
        let s = Stamp::Data {
            publisher: 0x0102_0304_0506_0708,
            seq: 42,
            sent_ns: 1_700_000_000_123_456_789,
        };
        s.write(&mut buf).unwrap();
        assert_eq!(&buf[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(buf[STAMP_LEN..].iter().all(|&b| b == 0xAA));
        assert_eq!(Stamp::read(&buf).unwrap(), s);
    }

    #[test]
    fn end_marker_round_trips() {
        let mut buf = [0u8; STAMP_LEN];
        let s = Stamp::End {
            publisher: 7,
            total: 1234,
        };
        s.write(&mut buf).unwrap();
        assert_eq!(Stamp::read(&buf).unwrap(), s);
    }

    #[test]
    fn short_buffers_are_refused() {
        let s = Stamp::End {
            publisher: 1,
            total: 1,
        };
        assert_eq!(s.write(&mut [0u8; 23]), Err(StampError::TooShort(23)));
        assert_eq!(Stamp::read(&[0u8; 10]), Err(StampError::TooShort(10)));
    }

    #[test]
    fn wall_time_of_an_instant_follows_the_monotonic_clock() {
        let t = Instant::now();
        let a = wall_ns(t);
        assert_eq!(wall_ns(t + std::time::Duration::from_micros(5)), a + 5_000);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(
            a.abs_diff(wall) < 1_000_000_000,
            "anchored to the wall clock"
        );
    }

    #[test]
    fn clock_moves_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0 && b >= a);
    }
}
