//! Fuzzes the announcement record decoder; the properties are in `record_props`.

#![no_main]

use libfuzzer_sys::fuzz_target;

mod record_props;

fuzz_target!(|data: &[u8]| record_props::run(data));
