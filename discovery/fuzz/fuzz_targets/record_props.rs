//! The announcement record decoder's fuzz properties: no input may panic, and anything that
//! decodes must re-encode to a record that decodes to the same value. The `record_decode`
//! target runs them under libFuzzer; `discovery/tests/fuzz_seeds.rs` replays the seeds on
//! stable.

use shoal_discovery::record::{decode, encode_endpoint, encode_participant, RawRecord, Record};

/// Runs one input through the envelope walk and the decoder.
pub fn run(data: &[u8]) {
    // The envelope walk alone must never panic either.
    if let Ok(raw) = RawRecord::parse(data) {
        for field in raw.fields() {
            if field.is_err() {
                break;
            }
        }
    }
    let Ok(record) = decode(data) else {
        return;
    };
    let again = match &record {
        Record::Participant(p) => encode_participant(p),
        Record::Endpoint(e) => encode_endpoint(e),
    }
    .expect("a decoded record must be encodable");
    assert_eq!(
        decode(&again).as_ref(),
        Ok(&record),
        "re-encoded record differs"
    );
}
