//! Whether an endpoint writes or reads: the one word of [`crate::types`] that [`crate::qos`]
//! (whose defaults differ by kind) needs too, so it sits below both. Re-exported as
//! [`crate::types::EndpointKind`].
//!
//! **Owns:** [`EndpointKind`]. **Must not touch:** anything else.

/// Whether an endpoint sends (writer) or receives (reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EndpointKind {
    /// Offers samples.
    Writer,
    /// Requests samples.
    Reader,
}
