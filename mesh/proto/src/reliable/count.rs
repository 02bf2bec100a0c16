//! AckNack counts: which count of a reader's AckNack the writer takes (issue 24: a forged
//! count must not make the real reader's AckNacks stale).
//!
//! **Owns:** the order of counts and how far one may jump. **Must not touch:** what an
//! AckNack does once taken (`writer`).

/// How far a reader's AckNack count may run ahead of the last one taken and still be taken
/// at once: AckNacks the reader sent that were lost on the way (a reader sends at most one
/// per `ack_period`, 20 ms by default, so 4096 is over a minute of losing every one). A
/// bigger jump is held until the next AckNack continues from it; a forged `u32::MAX` alone
/// therefore never makes the real reader's AckNacks look stale.
pub const MAX_COUNT_STEP: u32 = 4096;

/// What an AckNack's count says, against the last one taken from its reader.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Count {
    /// Newer, within [`MAX_COUNT_STEP`] (or confirming a held jump): taken.
    Fresh,
    /// Not newer (serial-number order, so the count may wrap): ignored.
    Stale,
    /// Too far ahead: held (`far_count`), ignored.
    Far,
}

/// Judges `count` against `last` (the last taken) and `far` (a held jump), in serial-number
/// arithmetic (RFC 1982 style: a count less than 2^31 ahead is newer).
pub(super) fn count_verdict(last: Option<u32>, far: Option<u32>, count: u32) -> Count {
    let Some(last) = last else {
        return Count::Fresh;
    };
    let ahead = |from: u32| {
        let d = count.wrapping_sub(from);
        (d != 0 && d < 1 << 31).then_some(d)
    };
    match ahead(last) {
        None => Count::Stale,
        Some(d) if d <= MAX_COUNT_STEP => Count::Fresh,
        Some(_) if far.and_then(ahead).is_some_and(|d| d <= MAX_COUNT_STEP) => Count::Fresh,
        Some(_) => Count::Far,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_serial_order_with_bounded_jumps() {
        assert_eq!(count_verdict(None, None, 77), Count::Fresh);
        assert_eq!(count_verdict(Some(5), None, 6), Count::Fresh);
        assert_eq!(count_verdict(Some(5), None, 5), Count::Stale);
        assert_eq!(count_verdict(Some(5), None, 4), Count::Stale);
        assert_eq!(
            count_verdict(Some(u32::MAX), None, 0),
            Count::Fresh,
            "wraps"
        );
        assert_eq!(count_verdict(Some(5), None, u32::MAX), Count::Stale);
        let far = 5 + MAX_COUNT_STEP + 1;
        assert_eq!(
            count_verdict(Some(5), None, 5 + MAX_COUNT_STEP),
            Count::Fresh
        );
        assert_eq!(count_verdict(Some(5), None, far), Count::Far);
        assert_eq!(count_verdict(Some(5), Some(far), far + 1), Count::Fresh);
        assert_eq!(
            count_verdict(Some(5), Some(far), far),
            Count::Far,
            "not twice"
        );
    }
}
