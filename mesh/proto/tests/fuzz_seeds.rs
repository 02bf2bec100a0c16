//! The fuzz targets' properties (`mesh/fuzz/fuzz_targets`), replayed on their seed corpora
//! on stable, so CI builds and runs what `cargo +nightly fuzz` runs (the fuzz crate itself is
//! kept out of the workspace: it needs nightly and libFuzzer). Each target's properties live
//! in one module shared with its libFuzzer wrapper; a seed that breaks one fails here.

use std::fs;
use std::path::{Path, PathBuf};

#[path = "../../fuzz/fuzz_targets/control_plane_props.rs"]
mod control_plane_props;
#[path = "../../fuzz/fuzz_targets/frame_props.rs"]
mod frame_props;
#[path = "../../fuzz/fuzz_targets/record_common.rs"]
mod record_common;

/// Every file of `mesh/fuzz/seeds/<target>`, sorted; at least one (an empty or moved corpus
/// would make the test pass without running anything).
fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a readable seed directory").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect()
}

#[test]
fn frame_decode_seeds_hold_the_decoder_properties() {
    for (path, data) in seeds("frame_decode") {
        eprintln!("{}", path.display());
        frame_props::run(&data);
    }
}

#[test]
fn control_plane_seeds_keep_the_node_bounded_and_its_endpoints_intact() {
    for (path, data) in seeds("control_plane") {
        eprintln!("{}", path.display());
        control_plane_props::run(&data);
    }
}

/// The record targets have no corpus (any bytes do): the frame seeds, sealed and opened as
/// a stream under both suites (odd first byte) and read as ciphertext (even).
#[test]
fn record_stream_properties_hold_on_the_frame_seeds() {
    use shoal_proto::crypto::RecordSuite;
    for (_, data) in seeds("frame_decode") {
        for mode in [0u8, 1, 0x41, 0xff] {
            let mut input = vec![mode];
            input.extend_from_slice(&data);
            record_common::run(RecordSuite::ChaCha20Poly1305, &input);
            record_common::run(RecordSuite::Aes256Gcm, &input);
        }
    }
}
