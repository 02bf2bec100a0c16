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
//!
//! **Owns:** these rules and a list's prepared form. **Must not touch:** where the
//! prepared form is kept or what its work is charged to (the graph decides).
//!
//! # Cost
//!
//! Matching is linear in its input: a list is prepared once ([`CompiledPartitions`]: its
//! names sorted, each pattern compiled into a bit-parallel NFA), then literal–literal and
//! pattern–pattern overlaps are one merge of two sorted lists, and only pattern–literal
//! pairs run a pattern, at |name| · ⌈(|pattern| + 1) / 64⌉ word steps each. The seed's
//! greedy matcher paid |pattern| · |name| per pair (~150 ms for 64 × 64 names of 256
//! bytes). The work spent is counted in the caller's `work` (see
//! [`crate::graph::MatchWork`]).

use std::cmp::Ordering;

use crate::glob::{is_wild, Glob};
use crate::types::Partitions;

/// True if `s` contains a wildcard.
pub fn is_pattern(s: &str) -> bool {
    s.bytes().any(|b| is_wild(&b))
}

/// Matches `name` against `pattern`, treating `*` and `?` as wildcards.
///
/// Compiles the pattern for this one call (O(|pattern| + 256), one allocation), then
/// matches in |name| · ⌈(|pattern| + 1) / 64⌉ word steps whatever the pattern's shape:
/// `*a*a*a*b` or `*aaaa…ab*` cannot blow up. To match many names, compile the list once
/// with [`CompiledPartitions`].
pub fn glob_match(pattern: &str, name: &str) -> bool {
    if !is_pattern(pattern) {
        return pattern == name;
    }
    Glob::compile(pattern).matches(pattern, name, &mut 0)
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
/// overlap is enough. Compiles both lists for this one call; linear in their
/// size (see the module's costs).
pub fn partitions_match(p: &Partitions, q: &Partitions) -> bool {
    let (pc, qc) = (CompiledPartitions::new(p), CompiledPartitions::new(q));
    overlap(p, pc.as_ref(), q, qc.as_ref(), &mut 0)
}

/// A non-default partition list prepared for matching: its literal names and its
/// patterns, each sorted by text (an overlap of equal names is one merge), and every
/// pattern compiled. It holds indices into its list, not the names: pass the list it
/// was built from beside it ([`overlap`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledPartitions {
    /// The list covers the default partition `""` (it names `""` or a pattern of
    /// `*`s only).
    covers_default: bool,
    /// Indices of the names without wildcards, sorted by name.
    literals: Box<[u8]>,
    /// Indices of the patterns, sorted by name.
    patterns: Box<[u8]>,
    /// `patterns[i]` compiled.
    globs: Box<[Glob]>,
}

/// Indices of `names` for which `keep` holds, sorted by name. A list holds at most
/// [`crate::types::MAX_PARTITIONS`] (64) names, so an index fits a byte.
fn sorted_indices(names: &[String], keep: impl Fn(&str) -> bool) -> Box<[u8]> {
    let mut v: Vec<u8> = (0..names.len())
        .filter(|&i| keep(&names[i]))
        .map(|i| u8::try_from(i).expect("at most 64 partition names"))
        .collect();
    v.sort_unstable_by(|&a, &b| names[usize::from(a)].cmp(&names[usize::from(b)]));
    v.into_boxed_slice()
}

impl CompiledPartitions {
    /// Prepares `p`; `None` for the default partition (an empty list), which needs
    /// nothing. O(total bytes + 256 per pattern + P log P name comparisons).
    pub fn new(p: &Partitions) -> Option<Self> {
        if p.is_empty() {
            return None;
        }
        let names = p.names();
        let literals = sorted_indices(names, |n| !is_pattern(n));
        let patterns = sorted_indices(names, is_pattern);
        let globs = patterns
            .iter()
            .map(|&i| Glob::compile(&names[usize::from(i)]))
            .collect();
        let covers_default = names
            .iter()
            .any(|n| n.is_empty() || (is_pattern(n) && n.bytes().all(|b| b == b'*')));
        Some(Self {
            covers_default,
            literals,
            patterns,
            globs,
        })
    }

    /// Heap bytes this compiled form takes when boxed (itself included).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.literals.len()
            + self.patterns.len()
            + self.globs.len() * std::mem::size_of::<Glob>()
            + self.globs.iter().map(Glob::heap_bytes).sum::<usize>()
    }

    /// What [`CompiledPartitions::heap_bytes`] of `p`'s compiled form is, without
    /// compiling it (0 for the default partition). O(total bytes).
    pub fn heap_estimate(p: &Partitions) -> usize {
        if p.is_empty() {
            return 0;
        }
        let names = p.names();
        let patterns: Vec<&String> = names.iter().filter(|n| is_pattern(n)).collect();
        std::mem::size_of::<Self>()
            + names.len()
            + patterns.len() * std::mem::size_of::<Glob>()
            + patterns
                .iter()
                .map(|n| Glob::heap_estimate(n))
                .sum::<usize>()
    }
}

/// One merge of two sorted index lists: true at the first name both hold.
fn common_name(an: &[String], ai: &[u8], bn: &[String], bi: &[u8], work: &mut u64) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < ai.len() && j < bi.len() {
        let (x, y) = (&an[usize::from(ai[i])], &bn[usize::from(bi[j])]);
        *work += 1 + x.len().min(y.len()) as u64;
        match x.cmp(y) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => return true,
        }
    }
    false
}

/// Partitions-Match on prepared lists: `ac` must be [`CompiledPartitions::new`] of `a`
/// (and `bc` of `b`). Adds the work spent to `work`: one step per name comparison plus
/// the bytes compared, and each pattern run's word steps.
pub fn overlap(
    a: &Partitions,
    ac: Option<&CompiledPartitions>,
    b: &Partitions,
    bc: Option<&CompiledPartitions>,
    work: &mut u64,
) -> bool {
    let (ac, bc) = match (ac, bc) {
        (None, None) => return true,
        (None, Some(c)) | (Some(c), None) => {
            *work += 1;
            return c.covers_default;
        }
        (Some(ac), Some(bc)) => (ac, bc),
    };
    let (an, bn) = (a.names(), b.names());
    debug_assert_eq!(ac.literals.len() + ac.patterns.len(), an.len());
    debug_assert_eq!(bc.literals.len() + bc.patterns.len(), bn.len());
    common_name(an, &ac.literals, bn, &bc.literals, work)
        || common_name(an, &ac.patterns, bn, &bc.patterns, work)
        || covers(an, ac, bn, bc, work)
        || covers(bn, bc, an, ac, work)
}

/// Some pattern of list `p` covers some literal of list `l`.
fn covers(
    pn: &[String],
    pc: &CompiledPartitions,
    ln: &[String],
    lc: &CompiledPartitions,
    work: &mut u64,
) -> bool {
    pc.globs.iter().zip(pc.patterns.iter()).any(|(g, &pi)| {
        let pattern = &pn[usize::from(pi)];
        lc.literals
            .iter()
            .any(|&li| g.matches(pattern, &ln[usize::from(li)], work))
    })
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

    /// Reference for long inputs: the textbook dynamic program over chars.
    fn reference_dp(p: &[char], n: &[char]) -> bool {
        // row[j]: p[..i] matches n[..j].
        let mut row = vec![false; n.len() + 1];
        row[0] = true;
        for &c in p {
            let mut next = vec![false; n.len() + 1];
            if c == '*' {
                let mut any = false;
                for j in 0..=n.len() {
                    any |= row[j];
                    next[j] = any;
                }
            } else {
                for j in 1..=n.len() {
                    next[j] = row[j - 1] && (c == '?' || n[j - 1] == c);
                }
            }
            row = next;
        }
        row[n.len()]
    }

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    /// The seed's Partitions-Match spelled out with the reference matcher.
    fn reference_lists(p: &[String], q: &[String]) -> bool {
        let pat = |a: &str, b: &str| match (is_pattern(a), is_pattern(b)) {
            (false, false) | (true, true) => a == b,
            (true, false) => reference_dp(&chars(a), &chars(b)),
            (false, true) => reference_dp(&chars(b), &chars(a)),
        };
        let dflt = [String::new()];
        let p = if p.is_empty() { &dflt[..] } else { p };
        let q = if q.is_empty() { &dflt[..] } else { q };
        p.iter().any(|a| q.iter().any(|b| pat(a, b)))
    }

    #[test]
    fn compiled_lists_report_linear_work() {
        // The worst pair: 64 names `aaaa…a-<i>` of 256 bytes against 64 patterns
        // `*aaaa…ab*` (the last letter varies): the seed's matcher compared ~253²/2
        // bytes per pattern and name.
        let names = Partitions::new((0..64).map(|i| {
            let s = format!("-{i}");
            "a".repeat(256 - s.len()) + &s
        }))
        .unwrap();
        let ends = ('b'..='z').chain('A'..='Z').chain("!#%&+,.:;=@_~".chars());
        let pats = Partitions::new(ends.map(|c| format!("*{}{c}*", "a".repeat(253)))).unwrap();
        assert_eq!(pats.names().len(), 64);
        assert!(pats.names().iter().all(|n| n.len() == 256));
        let (nc, pc) = (
            CompiledPartitions::new(&names),
            CompiledPartitions::new(&pats),
        );
        let mut work = 0;
        assert!(!overlap(&names, nc.as_ref(), &pats, pc.as_ref(), &mut work));
        // 64 × 64 runs of 256 bytes × 4 words, and the (short) merges: the seed's
        // matcher did ~256 × 256 comparisons per pair, 16× more at this size and
        // growing with the pattern.
        let runs = 64 * 64 * (1 + 256 * 4);
        assert!(work >= runs && work < runs + 64 * 64 * 2, "work {work}");
    }

    #[test]
    fn heap_estimate_matches_compiled_form() {
        for list in [
            vec!["a"],
            vec!["", "*"],
            vec!["robot/*", "diagnostics", "x?y", "*€*"],
        ] {
            let p = parts(&list);
            let c = CompiledPartitions::new(&p).unwrap();
            assert_eq!(CompiledPartitions::heap_estimate(&p), c.heap_bytes());
        }
        assert_eq!(CompiledPartitions::heap_estimate(&parts(&[])), 0);
    }

    proptest::proptest! {
        #[test]
        fn glob_agrees_with_reference(p in "[ab*?é/]{0,8}", n in "[abé/]{0,10}") {
            let pc: Vec<char> = p.chars().collect();
            let nc: Vec<char> = n.chars().collect();
            proptest::prop_assert_eq!(glob_match(&p, &n), reference(&pc, &nc));
            proptest::prop_assert_eq!(reference_dp(&pc, &nc), reference(&pc, &nc));
        }

        /// Long patterns (several words of states) and 1- to 4-byte characters.
        #[test]
        fn long_glob_agrees_with_reference(
            p in "[ab*?é€𝄞]{0,150}",
            n in "[abé€𝄞]{0,200}",
        ) {
            proptest::prop_assert_eq!(glob_match(&p, &n), reference_dp(&chars(&p), &chars(&n)));
        }

        /// A name built to match (the pattern with its wildcards filled) must match.
        #[test]
        fn filled_pattern_matches(p in "[ab*?é]{0,120}", fill in "[abé€]{0,3}") {
            let first = fill.chars().next().unwrap_or('a').to_string();
            let n = p.replace('*', &fill).replace('?', &first);
            proptest::prop_assert!(glob_match(&p, &n));
        }

        #[test]
        fn lists_agree_with_reference(
            p in proptest::collection::vec("[ab*?é]{0,5}", 0..6),
            q in proptest::collection::vec("[ab*?é]{0,5}", 0..6),
        ) {
            let (pp, qq) = (Partitions::new(p.clone()).unwrap(), Partitions::new(q.clone()).unwrap());
            let expect = reference_lists(&p, &q);
            proptest::prop_assert_eq!(partitions_match(&pp, &qq), expect);
            proptest::prop_assert_eq!(partitions_match(&qq, &pp), expect);
        }
    }
}
