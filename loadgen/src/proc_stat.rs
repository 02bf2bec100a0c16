//! `/proc/…/stat` lines: a field by its number, a process's or thread's CPU time.
//!
//! **Owns:** the line's format (the command name, field 2, may hold spaces and parens) and
//! the kernel's clock tick rate. **Must not touch:** which files are read (the callers').

/// Field `n` (numbered from 1 as in `proc(5)`, `n` ≥ 3) of a `stat` line. The fields after
/// the command name are counted from its last closing paren.
pub fn stat_field(stat: &str, n: usize) -> Option<&str> {
    stat.get(stat.rfind(')')? + 2..)?
        .split(' ')
        .nth(n.checked_sub(3)?)
}

/// utime + stime (fields 14 and 15) of a `stat` line, in clock ticks.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let utime: u64 = stat_field(stat, 14)?.parse().ok()?;
    let stime: u64 = stat_field(stat, 15)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second of `/proc` times.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_fields_are_read_after_the_name() {
        // A name with spaces and a parenthesis must not shift the fields.
        let line = "4242 (a b) c) S 1 2 3 4 5 6 7 8 9 10 17 25 0 0 20 0 1 0 100 0 0";
        assert_eq!(cpu_ticks(line), Some(17 + 25));
        assert_eq!(cpu_ticks("4242 (x) S 1 2"), None);
        assert_eq!(cpu_ticks("no name"), None);
    }

    #[test]
    fn stat_fields_count_from_the_last_paren_of_the_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 10 0 0 0 7 3 0 0 20 5 4";
        assert_eq!(stat_field(line, 3), Some("S"));
        assert_eq!(stat_field(line, 6), Some("4242"));
        assert_eq!(stat_field(line, 14), Some("7"));
        assert_eq!(stat_field(line, 15), Some("3"));
        assert_eq!(stat_field(line, 2), None);
        assert_eq!(stat_field(line, 40), None);
    }
}
