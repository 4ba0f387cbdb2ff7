//! Reading choices out of fuzz input, for the structure-aware targets.
//! Exhausted input reads as zeros, so every input is a complete script.

/// A cursor over the fuzzer's bytes.
#[derive(Debug, Clone)]
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 once exhausted).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&first, rest)) => {
                self.data = rest;
                first
            }
            None => 0,
        }
    }

    /// A number below `n` (`n` > 0), from one or two bytes.
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 256 {
            usize::from(self.byte()) % n
        } else {
            (usize::from(self.byte()) << 8 | usize::from(self.byte())) % n
        }
    }

    /// One of `items` (not empty).
    pub fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }

    /// A little-endian `u64` from eight bytes.
    pub fn u64(&mut self) -> u64 {
        let mut value = 0u64;
        for i in 0..8 {
            value |= u64::from(self.byte()) << (8 * i);
        }
        value
    }

    /// The bytes up to the next `0xff` (which is consumed), or to the end:
    /// a free-form chunk whose length the fuzzer controls.
    pub fn chunk(&mut self) -> &'a [u8] {
        let end = self
            .data
            .iter()
            .position(|&b| b == 0xff)
            .unwrap_or(self.data.len());
        let (chunk, rest) = self.data.split_at(end);
        self.data = rest.get(1..).unwrap_or_default();
        chunk
    }
}
