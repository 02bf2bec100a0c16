//! A compiled `*`/`?` pattern: a bit-parallel NFA that matches a name in one pass.
//!
//! **Owns:** the compiled form of one pattern and the run over one name. **Must not
//! touch:** which names are patterns or how partition lists overlap ([`crate::partition`]
//! decides; this module only answers "does this pattern cover this name").
//!
//! The seed's greedy matcher backtracks to the last `*`, which costs |pattern| · |name|
//! byte comparisons for patterns like `*aaaa…ab*`: 64 such patterns against 64 names of
//! 256 bytes took ~150 ms. Here the pattern's non-`*` bytes are NFA states, one bit each,
//! and every name byte advances all states at once with a few word operations per 64
//! states (Baeza-Yates–Gonnet shift-and, with self-loops for `*`): a run costs
//! |name| · ceil((tokens + 1) / 64) word steps, whatever the pattern's shape, and never
//! backtracks.
//!
//! Semantics are the seed's ([`crate::partition`]): `*` matches any run of characters
//! (including none and `/`), `?` exactly one UTF-8 character, every other byte itself.
//! The NFA works on bytes: `?` advances on a byte that starts a character and its state
//! then stays through the character's continuation bytes (`10xxxxxx`). Names and patterns
//! are `&str`, so a literal byte of the pattern that follows a wildcard always starts a
//! character and a `*` can never stop inside one and still match.
//!
//! Literal text before the first and after the last wildcard is compared directly (the
//! common `prefix/*` costs one prefix comparison), so the NFA holds only the middle,
//! which starts and ends with a wildcard.

/// True for the two wildcard bytes.
pub(crate) fn is_wild(b: &u8) -> bool {
    *b == b'*' || *b == b'?'
}

/// True for a UTF-8 continuation byte (`10xxxxxx`).
fn is_continuation(b: u8) -> bool {
    b & 0xc0 == 0x80
}

/// State words a run keeps on the stack; longer patterns (only through the public
/// one-shot functions: stored names are at most 256 bytes, 5 words) use the heap.
const STACK_WORDS: usize = 8;

/// One compiled pattern (a name with at least one wildcard).
///
/// States are numbered 0..=m over the m non-`*` bytes of the middle (state j: the first
/// j of them matched); state 0 is the start, state m accepts. Masks, each `words` long,
/// sit in one slice: `*` self-loops, `?` states, then one mask per distinct literal byte
/// (the states that byte advances into), indexed through `class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    /// Literal bytes before the first wildcard.
    head: u16,
    /// Literal bytes after the last wildcard.
    tail: u16,
    /// Words per mask.
    words: u16,
    /// The accepting state (m).
    accept: u16,
    /// Byte -> its literal class (0: the byte is not a literal of the middle).
    class: Box<[u8; 256]>,
    /// `[star | qmark | class 1 | class 2 | …]`, `words` each.
    masks: Box<[u64]>,
}

/// The shape of a pattern's middle: (tokens, distinct literal bytes).
fn shape(mid: &[u8]) -> (usize, usize) {
    let mut seen = [false; 256];
    let (mut tokens, mut classes) = (0, 0);
    for &b in mid {
        if b == b'*' {
            continue;
        }
        tokens += 1;
        if b != b'?' && !seen[usize::from(b)] {
            seen[usize::from(b)] = true;
            classes += 1;
        }
    }
    (tokens, classes)
}

/// The middle of a pattern: from its first wildcard to its last, both included.
fn middle(p: &[u8]) -> (usize, usize) {
    let first = p.iter().position(is_wild).unwrap_or(0);
    let last = p.iter().rposition(is_wild).unwrap_or(first);
    (first, last)
}

impl Glob {
    /// Heap bytes [`Glob::compile`] would allocate for `pattern`, without compiling it.
    /// O(|pattern|).
    pub(crate) fn heap_estimate(pattern: &str) -> usize {
        let p = pattern.as_bytes();
        let (first, last) = middle(p);
        let (tokens, classes) = shape(&p[first..=last]);
        let words = (tokens + 1).div_ceil(64);
        256 + (2 + classes) * words * 8
    }

    /// Compiles `pattern`, which must contain a wildcard. O(|pattern| + 256).
    pub(crate) fn compile(pattern: &str) -> Glob {
        let p = pattern.as_bytes();
        debug_assert!(p.iter().any(is_wild), "compile needs a pattern");
        let (first, last) = middle(p);
        let mid = &p[first..=last];
        let (tokens, classes) = shape(mid);
        let words = (tokens + 1).div_ceil(64);
        let mut class = Box::new([0u8; 256]);
        let mut next = 0u8;
        for &b in mid.iter().filter(|b| !is_wild(b)) {
            if class[usize::from(b)] == 0 {
                // At most 254 distinct non-wildcard byte values exist: u8 holds them.
                next += 1;
                class[usize::from(b)] = next;
            }
        }
        debug_assert_eq!(usize::from(next), classes);
        let mut masks = vec![0u64; (2 + classes) * words];
        let mut set = |mask: usize, state: usize| {
            masks[mask * words + state / 64] |= 1 << (state % 64);
        };
        let mut state = 0usize;
        for &b in mid {
            match b {
                b'*' => set(0, state),
                b'?' => {
                    state += 1;
                    set(1, state);
                }
                _ => {
                    state += 1;
                    set(1 + usize::from(class[usize::from(b)]), state);
                }
            }
        }
        let narrow = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        Glob {
            head: narrow(first),
            tail: narrow(p.len() - last - 1),
            words: narrow(words),
            accept: narrow(tokens),
            class,
            masks: masks.into_boxed_slice(),
        }
    }

    /// Heap bytes this compiled pattern holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        256 + self.masks.len() * 8
    }

    /// True if `name` matches; `pattern` is the text this was compiled from. Adds the
    /// word steps spent to `work`.
    pub(crate) fn matches(&self, pattern: &str, name: &str, work: &mut u64) -> bool {
        let (p, n) = (pattern.as_bytes(), name.as_bytes());
        let (h, t) = (usize::from(self.head), usize::from(self.tail));
        *work += 1 + (h + t) as u64;
        if n.len() < h + t || n[..h] != p[..h] || n[n.len() - t..] != p[p.len() - t..] {
            return false;
        }
        self.run(&n[h..n.len() - t], work)
    }

    fn run(&self, name: &[u8], work: &mut u64) -> bool {
        let w = usize::from(self.words);
        let mut stack = [0u64; STACK_WORDS];
        let mut heap = Vec::new();
        let d: &mut [u64] = if w <= STACK_WORDS {
            &mut stack[..w]
        } else {
            heap.resize(w, 0);
            &mut heap
        };
        d[0] = 1;
        let (star, qmark) = (&self.masks[..w], &self.masks[w..2 * w]);
        let accept = usize::from(self.accept);
        let (aw, abit) = (accept / 64, 1u64 << (accept % 64));
        // A trailing `*` accepts as soon as its state is reached: the rest cannot undo it.
        let open_end = star[aw] & abit != 0;
        for (i, &b) in name.iter().enumerate() {
            let cont = is_continuation(b);
            let c = usize::from(self.class[usize::from(b)]);
            let lit = (c != 0).then(|| &self.masks[(1 + c) * w..(2 + c) * w]);
            let (mut carry, mut alive) = (0u64, 0u64);
            for k in 0..w {
                let old = d[k];
                let shifted = (old << 1) | carry;
                carry = old >> 63;
                let l = lit.map_or(0, |m| m[k]);
                // A `?` state is entered on a byte that starts a character and kept
                // through that character's continuation bytes.
                let (advance, stay) = if cont {
                    (l, star[k] | qmark[k])
                } else {
                    (l | qmark[k], star[k])
                };
                let next = (shifted & advance) | (old & stay);
                d[k] = next;
                alive |= next;
            }
            if alive == 0 || (open_end && d[aw] & abit != 0) {
                *work += ((i + 1) * w) as u64;
                return alive != 0;
            }
        }
        *work += (name.len() * w) as u64;
        d[aw] & abit != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, n: &str) -> bool {
        Glob::compile(p).matches(p, n, &mut 0)
    }

    #[test]
    fn wildcards_and_trimmed_literals() {
        assert!(m("robot/*", "robot/"));
        assert!(m("robot/*", "robot/arm/left"));
        assert!(!m("robot/*", "robot"));
        assert!(m("r?bot", "rébot"));
        assert!(!m("r?bot", "rbot"));
        assert!(!m("r?bot", "réébot"));
        assert!(m("*a?b*", "xxaébyy"));
        assert!(m("**", ""));
        assert!(!m("?", ""));
        assert!(m("*ö", "xxö"));
        assert!(m("*?", "ö"));
        assert!(!m("??", "ö"));
    }

    /// A pattern wider than one word (and than the stack buffer) still matches exactly.
    #[test]
    fn long_patterns_span_words() {
        let p = format!("*{}b*", "a".repeat(700));
        let yes = format!("x{}by", "a".repeat(700));
        let no = "a".repeat(2000);
        assert!(Glob::compile(&p).words as usize > STACK_WORDS);
        assert!(m(&p, &yes));
        assert!(!m(&p, &no));
    }

    #[test]
    fn heap_estimate_is_exact() {
        for p in ["*", "a*", "*aaaa?ab*", "x?y*é*z", "?", "*€*"] {
            assert_eq!(Glob::heap_estimate(p), Glob::compile(p).heap_bytes(), "{p}");
        }
    }

    /// The worst case costs |name| · words steps, not |pattern| · |name|.
    #[test]
    fn work_is_linear_in_the_name() {
        let p = format!("*{}b*", "a".repeat(253));
        assert_eq!(p.len(), 256);
        let n = "a".repeat(256);
        let mut work = 0;
        assert!(!Glob::compile(&p).matches(&p, &n, &mut work));
        // 255 states -> 4 words, one step per word per name byte, plus the head/tail check.
        assert_eq!(work, 1 + 256 * 4);
    }
}
