//! `RLIMIT_MEMLOCK` and io_uring: reading the limit and naming it in errors.
//!
//! Kernels before 5.12 charge each io_uring's SQ/CQ rings to `RLIMIT_MEMLOCK`; newer ones
//! charge them to the memory cgroup instead, but still charge *registered buffers* (and
//! some setups) to the limit. Either way an `ENOMEM` from `io_uring_setup` is reported as
//! [`RuntimeError::MemlockLimit`] with the limit that was in force, never papered over
//! with another driver. What was measured on this kernel is in `bench/notes/runtime.md`
//! ("memlock").

use std::io;

use crate::builder::RingFlags;
use crate::error::RuntimeError;
use crate::id::ExecutorId;

/// The calling process's `RLIMIT_MEMLOCK` as `(soft, hard)` bytes; `u64::MAX` = unlimited.
pub fn memlock_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through the valid pointer we pass.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let conv = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    Ok((conv(lim.rlim_cur), conv(lim.rlim_max)))
}

/// Turns an `io_uring_setup` failure into the right [`RuntimeError`].
pub(crate) fn classify_setup_error(
    executor: ExecutorId,
    flags: RingFlags,
    source: io::Error,
) -> RuntimeError {
    if source.raw_os_error() == Some(libc::EINVAL) && flags != RingFlags::NONE {
        tracing::error!(%executor, %flags, "io_uring_setup: EINVAL (setup flags refused)");
        return RuntimeError::RingFlagsRefused {
            executor,
            flags,
            source,
        };
    }
    if source.raw_os_error() == Some(libc::ENOMEM) {
        let (soft_limit, hard_limit) = memlock_limit().unwrap_or((0, 0));
        tracing::error!(%executor, soft_limit, hard_limit, "io_uring_setup: ENOMEM (RLIMIT_MEMLOCK)");
        RuntimeError::MemlockLimit {
            executor,
            soft_limit,
            hard_limit,
            source,
        }
    } else {
        RuntimeError::RingSetup { executor, source }
    }
}
