//! shoal-runtime (being built).
