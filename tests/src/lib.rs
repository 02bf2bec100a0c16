//! Cross-crate integration tests live in `tests/`; this library holds their shared helpers.
