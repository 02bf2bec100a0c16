//! The `record_decode` fuzz target's properties (`discovery/fuzz/fuzz_targets/record_props.rs`),
//! replayed on its seed corpus on stable, so CI builds and runs what `cargo +nightly fuzz`
//! runs (the fuzz crate is kept out of the workspace: it needs nightly and libFuzzer).

#[path = "../fuzz/fuzz_targets/record_props.rs"]
mod record_props;

#[test]
fn record_decode_seeds_hold_the_decoder_properties() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/record_decode");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a readable seed directory").path())
        .collect();
    files.sort();
    // An empty or moved corpus would pass without running anything.
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    for path in files {
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        record_props::run(&data);
        // Every prefix too: a record cut short is what a truncated announce looks like.
        for cut in 0..data.len() {
            record_props::run(&data[..cut]);
        }
    }
}
