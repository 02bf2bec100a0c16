//! Why a record cannot be encoded or decoded.

use crate::qos::Policy;
use crate::types::TypesError;

/// Why a description cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A field is outside its allowed range (name too long, too many
    /// partitions or locators, a QoS value out of range, …).
    #[error("cannot encode: {0}")]
    Invalid(#[from] TypesError),
    /// The encoded record would exceed the record size limit.
    #[error("record would be {len} bytes, more than {max}")]
    TooLarge {
        /// Size it would have.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// One field's value would not fit its 16-bit length.
    #[error("field {field:#06x} would be {len} bytes, more than 65535")]
    FieldTooLarge {
        /// Field id.
        field: u16,
        /// Its length.
        len: usize,
    },
    /// More fields than the record allows.
    #[error("more than {max} fields")]
    TooManyFields {
        /// The limit.
        max: usize,
    },
}

/// Why bytes are not a valid record. Any error rejects the whole record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the header needs.
    #[error("record truncated: {have} bytes, header needs {need}")]
    TruncatedHeader {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The input is larger than the record size limit.
    #[error("record is {len} bytes, more than {max}")]
    TooLarge {
        /// Its size (or declared size).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The magic bytes are wrong: not a record.
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// A format version this decoder does not read.
    #[error("unsupported record format version {0}")]
    UnsupportedVersion(u8),
    /// An unknown record kind code.
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    /// The record is not of the kind the caller asked for.
    #[error("expected a {expected:?} record, got a {actual:?} record")]
    WrongKind {
        /// Kind asked for.
        expected: super::RecordKind,
        /// Kind found.
        actual: super::RecordKind,
    },
    /// The header's body length disagrees with the bytes present.
    #[error("header declares {declared} body bytes, {actual} present")]
    LengthMismatch {
        /// Body length in the header.
        declared: usize,
        /// Body bytes present.
        actual: usize,
    },
    /// A field's type/length prefix or value runs past the end of the body.
    #[error("field at offset {offset} runs past the end of the record")]
    FieldOverrun {
        /// Offset of the field within the body.
        offset: usize,
    },
    /// More fields than [`super::MAX_FIELDS`].
    #[error("more than {max} fields")]
    TooManyFields {
        /// The limit.
        max: usize,
    },
    /// A known field appears twice.
    #[error("field {0:#06x} appears twice")]
    DuplicateField(u16),
    /// An unknown field with the must-understand bit set.
    #[error("unknown must-understand field {0:#06x}")]
    UnknownCriticalField(u16),
    /// A required field is absent.
    #[error("required field {0} is missing")]
    MissingField(&'static str),
    /// A known field has a value of the wrong size or shape.
    #[error("field {field} is malformed: {reason}")]
    Malformed {
        /// Which field.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A present QoS policy holds a value outside its range.
    #[error("{policy:?} out of range: {reason}")]
    PolicyOutOfRange {
        /// The policy.
        policy: Policy,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A name, partition list or locator list breaks its bound.
    #[error(transparent)]
    Invalid(TypesError),
}

impl From<TypesError> for DecodeError {
    fn from(e: TypesError) -> Self {
        match e {
            TypesError::Qos(q) => q.into(),
            other => Self::Invalid(other),
        }
    }
}

impl From<crate::qos::QosError> for DecodeError {
    fn from(e: crate::qos::QosError) -> Self {
        use crate::qos::QosError;
        match e {
            QosError::OutOfRange { policy, reason } => Self::PolicyOutOfRange { policy, reason },
            // Range validation never yields the cross-policy errors, but map
            // them to the policy they concern rather than panic.
            QosError::DepthExceedsLimit { .. } => Self::PolicyOutOfRange {
                policy: Policy::History,
                reason: "history depth exceeds resource limits",
            },
            QosError::PerInstanceExceedsTotal { .. } => Self::PolicyOutOfRange {
                policy: Policy::ResourceLimits,
                reason: "per-instance limit exceeds total",
            },
        }
    }
}
