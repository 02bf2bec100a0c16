//! Property tests of the secured mesh's record stream, for both record suites (the same
//! properties as the `record_stream` and `record_stream_aes` fuzz targets, run in CI):
//! arbitrary ciphertext never yields plaintext or a panic; a sealed stream read in any
//! chunking opens to exactly what was sealed, and to nothing as the other suite; one flipped
//! byte anywhere stops the stream before the damaged record's plaintext.

use proptest::prelude::*;
use shoal_proto::crypto::{RecordOpener, RecordReader, RecordSealer, RecordSuite};

const KEY: [u8; 32] = [7; 32];
/// A small receiver limit, so records are cut and frames split across records often.
const MAX_MESSAGE: usize = 512;

/// Opens `stream` fed in `step`-byte reads; `Err` carries the plaintext seen before the
/// error (or by the end, if the stream stopped inside a record).
fn open_all(suite: RecordSuite, stream: &[u8], step: usize) -> Result<Vec<u8>, Vec<u8>> {
    let mut rr = RecordReader::new(RecordOpener::with_suite(suite, &KEY, MAX_MESSAGE), &[]);
    let mut out = Vec::new();
    for chunk in stream.chunks(step.max(1)) {
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

/// Seals `input` as records of at most `cut` plaintext bytes; returns the stream and each
/// record's byte range in it.
fn seal(suite: RecordSuite, input: &[u8], cut: usize) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let mut sealer = RecordSealer::with_suite(suite, &KEY, MAX_MESSAGE);
    let max = sealer.max_plaintext();
    let mut stream = Vec::new();
    let mut records = Vec::new();
    for piece in input.chunks(cut.clamp(1, max)) {
        let start = stream.len();
        sealer
            .seal_frame(&mut stream, piece)
            .expect("within the limit");
        records.push(start..stream.len());
    }
    (stream, records)
}

fn suite() -> impl Strategy<Value = RecordSuite> {
    prop_oneof![
        Just(RecordSuite::ChaCha20Poly1305),
        Just(RecordSuite::Aes256Gcm)
    ]
}

fn other(suite: RecordSuite) -> RecordSuite {
    match suite {
        RecordSuite::ChaCha20Poly1305 => RecordSuite::Aes256Gcm,
        RecordSuite::Aes256Gcm => RecordSuite::ChaCha20Poly1305,
    }
}

proptest! {
    #[test]
    fn garbage_never_opens(suite in suite(), bytes in proptest::collection::vec(any::<u8>(), 0..2048), step in 1usize..300) {
        match open_all(suite, &bytes, step) {
            Ok(plain) => prop_assert!(plain.is_empty()),
            Err(plain) => prop_assert!(plain.is_empty()),
        }
    }

    #[test]
    fn sealed_stream_opens_in_any_chunking(
        suite in suite(),
        input in proptest::collection::vec(any::<u8>(), 0..3000),
        cut in 1usize..700,
        step in 1usize..900,
    ) {
        let (stream, _) = seal(suite, &input, cut);
        if !stream.is_empty() {
            prop_assert_eq!(open_all(other(suite), &stream, step), Err(Vec::new()));
        }
        prop_assert_eq!(open_all(suite, &stream, step), Ok(input));
    }

    #[test]
    fn one_flipped_byte_stops_the_stream_at_its_record(
        suite in suite(),
        input in proptest::collection::vec(any::<u8>(), 1..3000),
        cut in 1usize..700,
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        step in 1usize..900,
    ) {
        let (mut stream, records) = seal(suite, &input, cut);
        let at = at.index(stream.len());
        stream[at] ^= flip;
        let damaged = records.iter().position(|r| r.contains(&at)).expect("in a record");
        let intact: usize = records[..damaged].iter().map(|r| r.len() - 4 - 16).sum();
        match open_all(suite, &stream, step) {
            Ok(plain) => prop_assert!(false, "flip at {} unnoticed ({} bytes out)", at, plain.len()),
            Err(before) => {
                prop_assert!(before.len() <= intact);
                prop_assert_eq!(&before[..], &input[..before.len()]);
            }
        }
    }
}
