//! Fuzzes the secured mesh's record reader with AES-256-GCM records (Shoal–Shoal links,
//! `mesh/proto/protocol/aes-256-gcm.md`); the properties are in `record_common`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::crypto::RecordSuite;

mod record_common;

fuzz_target!(|data: &[u8]| record_common::run(RecordSuite::Aes256Gcm, data));
