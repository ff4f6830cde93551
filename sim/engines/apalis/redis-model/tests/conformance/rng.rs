//! A seeded SplitMix64 generator: the same seed gives the same commands.

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0) has no answer");
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Between `lo` and `hi` items picked from `items`.
    pub fn some<T: Clone>(&mut self, items: &[T], lo: usize, hi: usize) -> Vec<T> {
        let n = lo + self.below(hi - lo + 1);
        (0..n).map(|_| self.pick(items).clone()).collect()
    }

    /// `word` in upper, lower or mixed case, as clients may send it.
    pub fn casing(&mut self, word: &str) -> String {
        match self.below(4) {
            0 => word.to_uppercase(),
            1 => word.to_lowercase(),
            _ => word
                .chars()
                .map(|c| if self.chance(50) { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() })
                .collect(),
        }
    }
}
