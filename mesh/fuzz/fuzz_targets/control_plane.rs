//! Fuzzes the topic control plane: one node's real control core and shard core with four
//! links played by the input; the operations and the invariants are in `control_plane_props`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod control_plane_props;

fuzz_target!(|data: &[u8]| control_plane_props::run(data));
