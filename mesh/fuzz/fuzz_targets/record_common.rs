//! The record reader's fuzz properties, for one record suite (shared by `record_stream`,
//! ChaCha20-Poly1305, and `record_stream_aes`, AES-256-GCM): what a hostile or broken peer can
//! put on a secured link after the handshake.
//!
//! - Arbitrary bytes as ciphertext: opening must fail cleanly or wait for more, never panic,
//!   and never yield plaintext (no record authenticates without the key).
//! - A real stream (frames from the input, sealed with batching and split into reads at
//!   input-chosen points) must open to exactly what was sealed; the same stream with one
//!   input-chosen byte flipped must fail before yielding the damaged record's plaintext; and
//!   the stream opened as the other suite, under the same key, must fail at its first record
//!   without yielding anything (a link whose ends disagree on the suite carries nothing).

use shoal_proto::crypto::{RecordOpener, RecordReader, RecordSealer, RecordSuite};

const KEY: [u8; 32] = [7; 32];
/// A small receiver limit, so records are cut and frames split across records often.
const MAX_MESSAGE: usize = 512;

/// One input: the first byte picks garbage (even) or a round trip (odd, and the record size).
pub fn run(suite: RecordSuite, data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        garbage(suite, rest);
    } else {
        round_trip(suite, mode, rest);
    }
}

fn reader(suite: RecordSuite) -> RecordReader {
    RecordReader::new(RecordOpener::with_suite(suite, &KEY, MAX_MESSAGE), &[])
}

fn garbage(suite: RecordSuite, bytes: &[u8]) {
    let mut rr = reader(suite);
    for chunk in bytes.chunks(97) {
        rr.push(chunk);
        match rr.decrypt() {
            Ok(n) => assert_eq!(n, 0, "plaintext out of unauthenticated bytes"),
            Err(_) => return,
        }
    }
    assert!(rr.plaintext().is_empty());
}

fn round_trip(suite: RecordSuite, mode: u8, input: &[u8]) {
    // Seal the input as a stream of records, cutting a record every `cut` bytes (at least 1).
    let cut = usize::from(mode >> 1).max(1);
    let mut sealer = RecordSealer::with_suite(suite, &KEY, MAX_MESSAGE);
    let max = sealer.max_plaintext();
    let mut stream = Vec::new();
    let mut records = Vec::new();
    for piece in input.chunks(cut.min(max)) {
        let start = stream.len();
        sealer
            .seal_frame(&mut stream, piece)
            .expect("within the limit");
        records.push(start..stream.len());
    }
    // Clean stream, read in uneven chunks: exactly the input comes out.
    assert_eq!(open_all(suite, &stream, cut + 1), Ok(input.to_vec()));
    if stream.is_empty() {
        return;
    }
    // The other suite, same key: nothing at all.
    let other = match suite {
        RecordSuite::ChaCha20Poly1305 => RecordSuite::Aes256Gcm,
        RecordSuite::Aes256Gcm => RecordSuite::ChaCha20Poly1305,
    };
    assert_eq!(open_all(other, &stream, cut + 3), Err(Vec::new()));
    // One flipped byte: the records before it open, the damaged one never does.
    let at = (usize::from(mode) * 7919 + input.len()) % stream.len();
    let mut bad = stream.clone();
    bad[at] ^= 0x5a;
    let damaged = records
        .iter()
        .position(|r| r.contains(&at))
        .expect("in a record");
    let intact: usize = records[..damaged].iter().map(|r| r.len() - 4 - 16).sum();
    match open_all(suite, &bad, 13) {
        Ok(plain) => panic!(
            "a flipped byte at {at} went unnoticed ({} bytes)",
            plain.len()
        ),
        Err(plain_before_error) => assert!(plain_before_error.len() <= intact),
    }
}

/// Opens `stream` fed in `step`-byte reads; `Err` carries the plaintext seen before the error
/// (or at the end, if the stream stopped inside a record).
fn open_all(suite: RecordSuite, stream: &[u8], step: usize) -> Result<Vec<u8>, Vec<u8>> {
    let mut rr = reader(suite);
    let mut out = Vec::new();
    for chunk in stream.chunks(step) {
        rr.push(chunk);
        let ok = rr.decrypt().is_ok();
        out.extend_from_slice(rr.plaintext());
        let n = rr.plaintext().len();
        rr.consume(n);
        if !ok {
            return Err(out);
        }
    }
    rr.finish().map(|()| out.clone()).map_err(|_| out)
}
