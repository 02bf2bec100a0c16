//! Timers, driven by the executor's io_uring loop. Only usable on executor threads.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::Elapsed;

/// Completes after `duration`.
pub async fn sleep(duration: Duration) {
    compio::time::sleep(duration).await
}

/// Completes at `deadline` (at once if it has passed).
pub async fn sleep_until(deadline: Instant) {
    compio::time::sleep_until(deadline).await
}

/// Runs `fut` for at most `duration`; [`Elapsed`] if the deadline came first (the future
/// is dropped then).
pub async fn timeout<F: Future>(duration: Duration, fut: F) -> Result<F::Output, Elapsed> {
    compio::time::timeout(duration, fut)
        .await
        .map_err(|_| Elapsed)
}
