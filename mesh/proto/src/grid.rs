//! Timer grids: a deadline rounded up to the next multiple of a grain after an epoch, so that
//! the deadlines of many things due within one grain fire in one wake-up of the thread that
//! serves them (the shard's link timers, the paced membership relays).
//!
//! **Owns:** the rounding. **Must not touch:** what a grid's deadlines are for.

use std::time::{Duration, Instant};

/// `at` rounded up to the next multiple of `grain` after `epoch` (`epoch` itself if `at` is
/// not later; a zero grain is taken as one nanosecond).
pub(crate) fn on_grid(epoch: Instant, at: Instant, grain: Duration) -> Instant {
    let grain = grain.as_nanos().max(1);
    let since = at.saturating_duration_since(epoch).as_nanos();
    let steps = since.div_ceil(grain);
    epoch + Duration::from_nanos(u64::try_from(steps * grain).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_to_the_next_grain_point() {
        let e = Instant::now();
        let ms = |n| Duration::from_millis(n);
        let g = ms(25);
        assert_eq!(on_grid(e, e, g), e);
        assert_eq!(on_grid(e, e + ms(1), g), e + ms(25));
        assert_eq!(on_grid(e, e + ms(25), g), e + ms(25));
        assert_eq!(on_grid(e, e + ms(110), g), e + ms(125));
        // Before the epoch: the epoch.
        assert_eq!(on_grid(e + ms(50), e, g), e + ms(50));
        assert_eq!(on_grid(e, e + ms(7), Duration::ZERO), e + ms(7));
    }
}
