//! CPU time and peak memory of this process, from `getrusage`.

/// Resource usage of the whole process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Usage {
    /// CPU seconds in user mode.
    pub cpu_user_s: f64,
    /// CPU seconds in the kernel.
    pub cpu_sys_s: f64,
    /// Peak resident set size, KiB (`ru_maxrss` on Linux).
    pub peak_rss_kib: u64,
}

impl Usage {
    /// Reads the process's usage now; zeros if the call fails.
    pub fn now() -> Usage {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `ru` points to writable memory of the size of `rusage` (zeroed, so it is a
        // valid value even if the kernel wrote nothing), and RUSAGE_SELF is a valid `who`.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
        if rc != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "getrusage failed");
            return Usage::default();
        }
        // SAFETY: zero-initialised above and filled by a successful getrusage.
        let ru = unsafe { ru.assume_init() };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Usage {
            cpu_user_s: secs(ru.ru_utime),
            cpu_sys_s: secs(ru.ru_stime),
            peak_rss_kib: ru.ru_maxrss.max(0) as u64,
        }
    }

    /// CPU spent between `earlier` and `self` (peak RSS stays `self`'s: it is a maximum).
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            cpu_user_s: (self.cpu_user_s - earlier.cpu_user_s).max(0.0),
            cpu_sys_s: (self.cpu_sys_s - earlier.cpu_sys_s).max(0.0),
            peak_rss_kib: self.peak_rss_kib,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_memory_and_monotonic_cpu() {
        let a = Usage::now();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = Usage::now();
        assert!(b.peak_rss_kib > 0);
        assert!(b.cpu_user_s + b.cpu_sys_s >= a.cpu_user_s + a.cpu_sys_s);
    }
}
