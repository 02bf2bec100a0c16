//! The TCP frame decoder's fuzz properties: arbitrary bytes as a read buffer, under two size
//! limits. The `frame_decode` target runs them under libFuzzer; `mesh/proto/tests/fuzz_seeds.rs`
//! replays the seeds on stable.

use bytes::{Bytes, BytesMut};
use shoal_proto::wire::{
    decode_frame, take_data, take_frame, take_samples, DecodeStatus, Frame, MAX_MESSAGE_BYTES,
};

/// Runs one input through every decoder, under both limits.
pub fn run(data: &[u8]) {
    let buf = Bytes::copy_from_slice(data);
    for max in [MAX_MESSAGE_BYTES, 256] {
        match decode_frame(&buf, max) {
            Ok(DecodeStatus::Complete { frame, len }) => {
                assert!(len <= data.len(), "decoded length beyond the buffer");
                // Whatever decodes must encode, and encode to something that decodes back the same.
                let mut out = BytesMut::new();
                frame.encode(&mut out).expect("a decoded frame re-encodes");
                assert_eq!(out.len(), frame.encoded_len());
                match decode_frame(&out.freeze(), u32::MAX) {
                    Ok(DecodeStatus::Complete { frame: again, .. }) => assert_eq!(again, frame),
                    other => panic!("re-encoded frame does not decode: {other:?}"),
                }
            }
            Ok(DecodeStatus::NeedMore { needed }) => assert!(needed > data.len()),
            Err(_) => {}
        }
        // The fast lanes take exactly what take_frame would, or decline leaving the buffer as
        // it was.
        let mut slow = BytesMut::from(data);
        let taken = take_frame(&mut slow, max);
        let mut fast = BytesMut::from(data);
        match take_data(&mut fast, max) {
            Some(d) => assert_eq!((taken.clone(), &fast), (Ok(Some(Frame::Data(d))), &slow)),
            None => assert_eq!(&fast[..], data),
        }
        let mut fast = BytesMut::from(data);
        match take_samples(&mut fast, max) {
            Some(s) => assert_eq!((taken, &fast), (Ok(Some(Frame::Samples(s))), &slow)),
            None => {
                assert_eq!(&fast[..], data);
                assert!(
                    !matches!(taken, Ok(Some(Frame::Samples(_)))),
                    "declined a Samples frame"
                );
            }
        }
        // The read path: split frames off a stream until it stops; never more than was given.
        let mut stream = BytesMut::from(data);
        loop {
            let before = stream.len();
            match take_frame(&mut stream, max) {
                Ok(Some(_)) => assert!(stream.len() + 5 <= before, "a frame is at least 5 bytes"),
                Ok(None) | Err(_) => {
                    assert_eq!(stream.len(), before, "no bytes consumed without a frame");
                    break;
                }
            }
        }
    }
}
