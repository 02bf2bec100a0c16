//! Fuzzes the TCP frame decoder: arbitrary bytes as a read buffer, under two size limits; the
//! properties are in `frame_props`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod frame_props;

fuzz_target!(|data: &[u8]| frame_props::run(data));
