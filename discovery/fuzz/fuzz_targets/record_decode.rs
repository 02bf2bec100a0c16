//! Fuzzes the announcement record decoder: no input may panic, and anything
//! that decodes must re-encode to a record that decodes to the same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_discovery::record::{decode, encode_endpoint, encode_participant, RawRecord, Record};

fuzz_target!(|data: &[u8]| {
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
});
