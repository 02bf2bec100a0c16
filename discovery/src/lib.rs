//! shoal-discovery (being built).
