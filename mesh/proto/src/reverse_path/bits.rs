//! Sets of bits, one row of `words` words per node: the level walks of `near.rs` (a bit per
//! counted neighbour) and `farther.rs` (a bit per candidate relay) keep their sets in it.
//!
//! **Owns:** the layout. **Must not touch:** what a bit means (the callers').

/// `nodes` rows of `words` words each, all clear at first.
pub(super) struct Bits {
    words: usize,
    v: Vec<u64>,
}

impl Bits {
    pub(super) fn new(nodes: usize, words: usize) -> Bits {
        Bits {
            words,
            v: vec![0; nodes * words],
        }
    }

    pub(super) fn row(&self, x: u32) -> &[u64] {
        &self.v[x as usize * self.words..(x as usize + 1) * self.words]
    }

    pub(super) fn set(&mut self, x: u32, bit: usize) {
        self.v[x as usize * self.words + bit / 64] |= 1 << (bit % 64);
    }

    /// `self[x] |= from[y]` (`from` may be `self`).
    pub(super) fn or_from(&mut self, x: u32, y: u32, from: Option<&Bits>) {
        let w = self.words;
        for k in 0..w {
            let add = match from {
                Some(f) => f.v[y as usize * w + k],
                None => self.v[y as usize * w + k],
            };
            self.v[x as usize * w + k] |= add;
        }
    }

    /// Keeps of `self[x]` the bits `seen[x]` lacks and adds them to `seen[x]`: a BFS
    /// level's new arrivals at `x`.
    pub(super) fn keep_new(&mut self, x: u32, seen: &mut Bits) {
        let w = self.words;
        for k in x as usize * w..(x as usize + 1) * w {
            self.v[k] &= !seen.v[k];
            seen.v[k] |= self.v[k];
        }
    }

    /// `self[x] = from[x]`.
    pub(super) fn copy_row(&mut self, x: u32, from: &Bits) {
        let w = self.words;
        let r = x as usize * w..(x as usize + 1) * w;
        self.v[r.clone()].copy_from_slice(&from.v[r]);
    }

    /// Clears every row.
    pub(super) fn clear(&mut self) {
        self.v.fill(0);
    }
}
