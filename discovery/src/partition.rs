//! Partition comparison: the seed's Partitions-Match and Pattern-Match.
//!
//! Patterns follow `fnmatch` without flags, restricted to two wildcards:
//! `*` matches any run of characters, including none and including `/`;
//! `?` matches exactly one character. No other character is special.
//!
//! `*` must be able to match nothing, because the seed says a pattern can
//! cover the default partition `""`, and only a pattern of `*`s can do that.
//! Consequently `robot/*` covers `robot/` as well as `robot/arm` (the seed's
//! table only requires that it not cover `robot`, which lacks the slash).
//!
//! When both names are patterns they match only if they are the same text:
//! two patterns describe sets of names, and overlap of two sets is not what
//! either side asked for (this is the DDS rule).

use crate::types::Partitions;

/// True if `s` contains a wildcard.
pub fn is_pattern(s: &str) -> bool {
    s.bytes().any(|b| b == b'*' || b == b'?')
}

/// Matches `name` against `pattern`, treating `*` and `?` as wildcards.
///
/// Linear-time greedy matching with one backtrack point, so a hostile pattern
/// like `*a*a*a*b` cannot blow up: O(|pattern| · |name|) worst case, no
/// allocation.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    // Literal text before the first and after the last wildcard must match
    // byte for byte: a cheap early reject for the usual `prefix/*` names,
    // and it leaves a middle that starts and ends with a wildcard.
    let is_wild = |b: &u8| *b == b'*' || *b == b'?';
    let Some(first) = p.iter().position(is_wild) else {
        return p == n;
    };
    let last = p.iter().rposition(is_wild).unwrap_or(first);
    let (head, tail) = (&p[..first], &p[last + 1..]);
    if n.len() < head.len() + tail.len() || !n.starts_with(head) || !n.ends_with(tail) {
        return false;
    }
    glob_middle(&p[first..=last], &n[head.len()..n.len() - tail.len()])
}

fn glob_middle(p: &[u8], n: &[u8]) -> bool {
    let (mut pi, mut ni) = (0usize, 0usize);
    // Position after the last `*` seen, and the name position it resumes at.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    pi += 1;
                    star = Some((pi, ni));
                    continue;
                }
                // `?` consumes one whole UTF-8 character, not one byte.
                b'?' => {
                    pi += 1;
                    ni += utf8_len(n[ni]);
                    continue;
                }
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                // Let the last `*` swallow one more character and retry.
                let next = sn + utf8_len(n[sn]);
                star = Some((sp, next));
                pi = sp;
                ni = next;
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xff => 4,
        // A continuation byte cannot start a char in valid UTF-8 (&str).
        _ => 1,
    }
}

/// The seed's Pattern-Match: either side may be a pattern.
pub fn pattern_match(p: &str, q: &str) -> bool {
    match (is_pattern(p), is_pattern(q)) {
        (false, false) | (true, true) => p == q,
        (true, false) => glob_match(p, q),
        (false, true) => glob_match(q, p),
    }
}

/// The seed's Partitions-Match: an empty list stands for `⟨""⟩`, and any
/// overlap is enough. O(P · Q · L).
pub fn partitions_match(p: &Partitions, q: &Partitions) -> bool {
    fn or_default(list: &[String]) -> impl Iterator<Item = &str> {
        let default = list.is_empty().then_some("");
        list.iter().map(String::as_str).chain(default)
    }
    or_default(p.names()).any(|a| or_default(q.names()).any(|b| pattern_match(a, b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(names: &[&str]) -> Partitions {
        Partitions::new(names.iter().copied()).unwrap()
    }

    /// The seed's worked table, row by row.
    #[test]
    fn seed_worked_table() {
        let writer = parts(&["robot/*", "diagnostics"]);
        let rows: [(&[&str], bool); 4] = [
            (&["robot/arm"], true),
            (&["telemetry", "diagnostics"], true),
            (&["robot"], false),
            (&[], false),
        ];
        for (reader, expect) in rows {
            assert_eq!(
                partitions_match(&writer, &parts(reader)),
                expect,
                "reader {reader:?}"
            );
            assert_eq!(partitions_match(&parts(reader), &writer), expect);
        }
    }

    #[test]
    fn default_partition_rules() {
        assert!(partitions_match(&parts(&[]), &parts(&[])));
        assert!(partitions_match(&parts(&[]), &parts(&[""])));
        assert!(partitions_match(&parts(&["*"]), &parts(&[])));
        assert!(!partitions_match(&parts(&["?"]), &parts(&[])));
        assert!(!partitions_match(&parts(&["a"]), &parts(&[])));
    }

    #[test]
    fn glob_semantics() {
        assert!(glob_match("robot/*", "robot/"));
        assert!(glob_match("robot/*", "robot/arm/left"));
        assert!(!glob_match("robot/*", "robot"));
        assert!(glob_match("r?bot", "robot"));
        assert!(!glob_match("r?bot", "rbot"));
        assert!(glob_match("r?bot", "rébot"));
        assert!(glob_match("*a*b", "xxaxxab"));
        assert!(!glob_match("*a*b", "xxaxxa"));
        assert!(glob_match("**", ""));
        assert!(glob_match("a*", "a"));
        assert!(!glob_match("a", "ab"));
        assert!(glob_match("*ö", "xxö"));
        let long = "a".repeat(200);
        assert!(!glob_match("*a*a*a*a*a*a*b", &long));
    }

    #[test]
    fn two_patterns_match_only_when_identical() {
        assert!(pattern_match("a*", "a*"));
        assert!(!pattern_match("a*", "*"));
        assert!(pattern_match("x", "x"));
        assert!(!pattern_match("x", "y"));
    }

    /// Reference: a straightforward recursive matcher over chars.
    fn reference(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len()).any(|k| reference(rest, &n[k..])),
            Some(('?', rest)) => !n.is_empty() && reference(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && reference(rest, &n[1..]),
        }
    }

    proptest::proptest! {
        #[test]
        fn glob_agrees_with_reference(p in "[ab*?é/]{0,8}", n in "[abé/]{0,10}") {
            let pc: Vec<char> = p.chars().collect();
            let nc: Vec<char> = n.chars().collect();
            proptest::prop_assert_eq!(glob_match(&p, &n), reference(&pc, &nc));
        }
    }
}
