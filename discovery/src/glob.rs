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

/// Word counts with a run specialised for them (fixed-size state, unrolled): every stored
/// name is at most 256 bytes, so 255 states, 4 words. Longer patterns (only through the
/// public one-shot functions) take the general run.
const MAX_UNROLLED: usize = 5;

/// One compiled pattern (a name with at least one wildcard).
///
/// States are numbered 0..=m over the m non-`*` bytes of the middle (state j: the first
/// j of them matched); state 0 is the start, state m accepts. A name byte `b` moves the
/// state set `D` to `((D << 1) & advance[b]) | (D & stay[b])`. Bytes fall into classes:
/// 0 and 1 for bytes that are no literal of the middle (0: starts a character, 1: a
/// continuation byte), then one class per distinct literal byte. Masks, `words` each,
/// sit in one slice: `stay` for a starting byte (the `*` states), `stay` for a
/// continuation byte (`*` and `?` states: a `?` keeps its state through its
/// character), then `advance` per class (the states entered by a byte of that class: its
/// literal positions, and the `?` positions when the byte starts a character).
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
    /// Byte -> its class.
    class: Box<[u8; 256]>,
    /// `[stay | stay, continuation | advance class 0 | advance class 1 | …]`.
    masks: Box<[u64]>,
}

/// The shape of a pattern's middle: (tokens, distinct literal bytes).
fn shape(mid: &[u8]) -> (usize, usize) {
    let mut seen = [false; 256];
    let (mut tokens, mut literals) = (0, 0);
    for &b in mid {
        if b == b'*' {
            continue;
        }
        tokens += 1;
        if b != b'?' && !seen[usize::from(b)] {
            seen[usize::from(b)] = true;
            literals += 1;
        }
    }
    (tokens, literals)
}

/// The middle of a pattern: from its first wildcard to its last, both included.
fn middle(p: &[u8]) -> (usize, usize) {
    let first = p.iter().position(is_wild).unwrap_or(0);
    let last = p.iter().rposition(is_wild).unwrap_or(first);
    (first, last)
}

/// Masks for a middle with `literals` distinct literal bytes: two `stay`, two
/// non-literal `advance`, one `advance` per literal.
fn mask_count(literals: usize) -> usize {
    4 + literals
}

impl Glob {
    /// Heap bytes [`Glob::compile`] would allocate for `pattern`, without compiling it.
    /// O(|pattern|).
    pub(crate) fn heap_estimate(pattern: &str) -> usize {
        let p = pattern.as_bytes();
        let (first, last) = middle(p);
        let (tokens, literals) = shape(&p[first..=last]);
        let words = (tokens + 1).div_ceil(64);
        256 + mask_count(literals) * words * 8
    }

    /// Compiles `pattern`, which must contain a wildcard. O(|pattern| + 256).
    pub(crate) fn compile(pattern: &str) -> Glob {
        let p = pattern.as_bytes();
        debug_assert!(p.iter().any(is_wild), "compile needs a pattern");
        let (first, last) = middle(p);
        let mid = &p[first..=last];
        let (tokens, literals) = shape(mid);
        let words = (tokens + 1).div_ceil(64);
        let mut class = Box::new([0u8; 256]);
        for (b, c) in class.iter_mut().enumerate() {
            *c = u8::from(is_continuation(b as u8));
        }
        let mut next = 1usize;
        let mut is_literal = [false; 256];
        for &b in mid.iter().filter(|b| !is_wild(b)) {
            if !is_literal[usize::from(b)] {
                is_literal[usize::from(b)] = true;
                next += 1;
                // UTF-8 text holds at most 241 distinct non-wildcard byte values, so
                // classes 2.. fit a byte.
                class[usize::from(b)] = u8::try_from(next).expect("at most 243 classes");
            }
        }
        debug_assert_eq!(next - 1, literals);
        let mut masks = vec![0u64; mask_count(literals) * words];
        let mut set = |mask: usize, state: usize| {
            masks[mask * words + state / 64] |= 1 << (state % 64);
        };
        const STAY: usize = 0;
        const STAY_CONT: usize = 1;
        let advance = |class: u8| 2 + usize::from(class);
        let mut state = 0usize;
        for &b in mid {
            match b {
                b'*' => {
                    set(STAY, state);
                    set(STAY_CONT, state);
                }
                b'?' => {
                    state += 1;
                    set(STAY_CONT, state);
                    // Entered by any byte that starts a character.
                    set(advance(0), state);
                    for lit in (0..=255u8).filter(|&l| is_literal[usize::from(l)]) {
                        if !is_continuation(lit) {
                            set(advance(class[usize::from(lit)]), state);
                        }
                    }
                }
                _ => {
                    state += 1;
                    set(advance(class[usize::from(b)]), state);
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
        let mid = &n[h..n.len() - t];
        let (hit, bytes) = match usize::from(self.words) {
            1 => self.run::<1>(mid),
            2 => self.run::<2>(mid),
            3 => self.run::<3>(mid),
            4 => self.run::<4>(mid),
            5 => self.run::<5>(mid),
            _ => self.run_wide(mid),
        };
        *work += (bytes * usize::from(self.words)) as u64;
        hit
    }

    /// The accepting state's word and bit, and whether it has a `*` self-loop (then it
    /// accepts as soon as it is reached: nothing later can undo it).
    fn accept(&self) -> (usize, u64, bool) {
        let a = usize::from(self.accept);
        let (word, bit) = (a / 64, 1u64 << (a % 64));
        (word, bit, self.masks[word] & bit != 0)
    }

    /// The run with `N` state words held in registers. Returns (matched, bytes read).
    fn run<const N: usize>(&self, name: &[u8]) -> (bool, usize) {
        debug_assert!(N <= MAX_UNROLLED && usize::from(self.words) == N);
        let masks = &self.masks;
        let word_set = |i: usize| -> &[u64; N] {
            masks[i * N..(i + 1) * N]
                .try_into()
                .expect("masks hold whole word sets")
        };
        let stay = [word_set(0), word_set(1)];
        let (aw, abit, open_end) = self.accept();
        let mut d = [0u64; N];
        d[0] = 1;
        for (i, &b) in name.iter().enumerate() {
            let advance = word_set(2 + usize::from(self.class[usize::from(b)]));
            let stay = stay[usize::from(is_continuation(b))];
            let (mut carry, mut alive) = (0u64, 0u64);
            for k in 0..N {
                let old = d[k];
                let next = (((old << 1) | carry) & advance[k]) | (old & stay[k]);
                carry = old >> 63;
                d[k] = next;
                alive |= next;
            }
            if alive == 0 {
                return (false, i + 1);
            }
            if open_end && d[aw] & abit != 0 {
                return (true, i + 1);
            }
        }
        (d[aw] & abit != 0, name.len())
    }

    /// The same run for any width, its state on the heap.
    fn run_wide(&self, name: &[u8]) -> (bool, usize) {
        let w = usize::from(self.words);
        let word_set = |i: usize| &self.masks[i * w..(i + 1) * w];
        let (aw, abit, open_end) = self.accept();
        let mut d = vec![0u64; w];
        d[0] = 1;
        for (i, &b) in name.iter().enumerate() {
            let advance = word_set(2 + usize::from(self.class[usize::from(b)]));
            let stay = word_set(usize::from(is_continuation(b)));
            let (mut carry, mut alive) = (0u64, 0u64);
            for k in 0..w {
                let old = d[k];
                let next = (((old << 1) | carry) & advance[k]) | (old & stay[k]);
                carry = old >> 63;
                d[k] = next;
                alive |= next;
            }
            if alive == 0 {
                return (false, i + 1);
            }
            if open_end && d[aw] & abit != 0 {
                return (true, i + 1);
            }
        }
        (d[aw] & abit != 0, name.len())
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
        assert!(Glob::compile(&p).words as usize > MAX_UNROLLED);
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
