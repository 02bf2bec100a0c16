//! Fuzzes the secured mesh's record reader with ChaCha20-Poly1305 records (multimaster's
//! suite); the properties are in `record_common`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::crypto::RecordSuite;

mod record_common;

fuzz_target!(|data: &[u8]| record_common::run(RecordSuite::ChaCha20Poly1305, data));
