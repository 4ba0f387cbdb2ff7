//! Byte offsets to line/column positions, in characters or UTF-16 units.

/// Line starts of one text, for repeated position look-ups.
///
/// A look-up costs O(log n) plus at most [`CHECKPOINT`] bytes of counting,
/// whatever the line's length: columns are counted from a checkpoint of
/// running character and UTF-16 totals, never from the line's start, so
/// that many findings on one long line cost linear time, not quadratic.
#[derive(Debug, Clone)]
pub struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
    counts: Checkpoints,
}

/// The most bytes a position look-up counts after its checkpoint.
const CHECKPOINT: usize = 256;

/// Running character and UTF-16 totals of one text, at character
/// boundaries about every [`CHECKPOINT`] bytes from offset 0: a column is
/// counted from the nearest checkpoint, never from the line's start, so
/// that many positions on one long line cost linear time, not quadratic.
/// The language server's UTF-16 positions use it too.
#[derive(Debug, Clone, Default)]
pub struct Checkpoints(Vec<(usize, usize, usize)>);

impl Checkpoints {
    /// The checkpoints of `text`.
    pub fn new(text: &str) -> Self {
        let mut checkpoints = vec![(0, 0, 0)];
        let (mut at, mut chars, mut units) = (0, 0, 0);
        while text.len() - at > CHECKPOINT {
            let mut next = at + CHECKPOINT;
            while !text.is_char_boundary(next) {
                next -= 1;
            }
            let piece = &text[at..next];
            chars += piece.chars().count();
            units += utf16_len(piece);
            at = next;
            checkpoints.push((at, chars, units));
        }
        Checkpoints(checkpoints)
    }

    /// Characters and UTF-16 units of `text` (the text these checkpoints
    /// were made from) before `offset`, a char boundary.
    pub fn before(&self, text: &str, offset: usize) -> (usize, usize) {
        let at = self
            .0
            .partition_point(|&(byte, _, _)| byte <= offset)
            .saturating_sub(1);
        let (byte, chars, units) = self.0.get(at).copied().unwrap_or((0, 0, 0));
        let rest = &text[byte.min(offset)..offset];
        #[cfg(test)]
        tests::COUNTED.with(|c| c.set(c.get() + rest.len()));
        (chars + rest.chars().count(), units + utf16_len(rest))
    }
}

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column in Unicode scalar values.
    pub column: usize,
    /// 1-based column in UTF-16 code units (SARIF's and LSP's default).
    pub column_utf16: usize,
}

impl<'a> LineIndex<'a> {
    /// Indexes `text`. `\n`, `\r\n` and a lone `\r` all end a line, as in the grammar.
    pub fn new(text: &'a str) -> Self {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => starts.push(i + 1),
                b'\r' if bytes.get(i + 1) != Some(&b'\n') => starts.push(i + 1),
                _ => {}
            }
            i += 1;
        }
        LineIndex {
            text,
            starts,
            counts: Checkpoints::new(text),
        }
    }

    /// Characters and UTF-16 units before `offset` (a char boundary).
    fn counts(&self, offset: usize) -> (usize, usize) {
        self.counts.before(self.text, offset)
    }

    /// The position of a byte offset (clamped to the text, snapped to a char boundary).
    pub fn position(&self, offset: usize) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let (start_chars, start_units) = self.counts(self.starts[line]);
        let (chars, units) = self.counts(offset);
        let (mut column, mut column_utf16) = (chars - start_chars, units - start_units);
        // A byte-order mark is not a character anyone sees: column 1 follows it.
        if line == 0 && offset >= 3 && self.text.starts_with('\u{feff}') {
            column -= 1;
            column_utf16 -= 1;
        }
        Position {
            line: line + 1,
            column: column + 1,
            column_utf16: column_utf16 + 1,
        }
    }

    /// Number of lines.
    pub fn line_count(&self) -> usize {
        self.starts.len()
    }
}

/// UTF-16 code units of `text`, from its bytes: one per character (counted
/// at its lead byte), two for an astral one (a 4-byte sequence, lead 0xF0..).
fn utf16_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            0x80..=0xBF => 0,
            0xF0..=0xFF => 2,
            _ => 1,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Bytes the look-ups of this thread counted character by character.
        pub(super) static COUNTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Issue 11, item 15: 50,000 findings on one 1 MB line. Each look-up
    /// counts a bounded number of bytes, so the work is linear in the number
    /// of findings; counting from the line's start (as before) would count
    /// 25 GB here.
    #[test]
    fn positions_on_one_long_line_cost_bounded_work_each() {
        let text = format!("mcpolicy 1\n{}\n", "défaults é ".repeat(80_000));
        let index = LineIndex::new(&text);
        COUNTED.with(|c| c.set(0));
        let findings = 50_000;
        for i in 0..findings {
            let offset = 11 + i * (text.len() - 12) / findings;
            let _ = index.position(offset);
        }
        let counted = COUNTED.with(std::cell::Cell::get);
        assert!(
            counted <= findings * 2 * CHECKPOINT,
            "{counted} bytes counted for {findings} look-ups"
        );
    }

    #[test]
    fn positions() {
        let index = LineIndex::new("ab\n😀x\r\ny");
        assert_eq!(
            index.position(0),
            Position {
                line: 1,
                column: 1,
                column_utf16: 1
            }
        );
        assert_eq!(
            index.position(7),
            Position {
                line: 2,
                column: 2,
                column_utf16: 3
            }
        );
        assert_eq!(
            index.position(10),
            Position {
                line: 3,
                column: 1,
                column_utf16: 1
            }
        );
        assert_eq!(index.position(999).line, 3);
    }

    /// The columns a look-up from the line's start gives: what the
    /// checkpoints must agree with.
    fn naive(text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let starts = LineIndex::new(text).starts;
        let line = starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let mut prefix = &text[starts[line]..offset];
        if line == 0 {
            prefix = prefix.strip_prefix('\u{feff}').unwrap_or(prefix);
        }
        Position {
            line: line + 1,
            column: prefix.chars().count() + 1,
            column_utf16: prefix.encode_utf16().count() + 1,
        }
    }

    proptest::proptest! {
        /// Checkpointed columns equal columns counted from the line start,
        /// for text of long lines mixing 1- to 4-byte characters, BOMs and
        /// every line break. Long mode: `PROPTEST_CASES=20000 cargo test -p
        /// mcpolicy-compiler --lib line_index`.
        #[test]
        fn checkpoints_agree_with_counting_from_the_line_start(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec!["a", "é", "€", "😀", "\n", "\r\n", "\r", "\u{feff}", "xyz", "\u{301}"]),
                0..1500,
            ),
            offsets in proptest::collection::vec(0usize..8000, 1..40),
        ) {
            let text: String = pieces.concat();
            let index = LineIndex::new(&text);
            for offset in offsets.into_iter().chain([0, text.len()]) {
                proptest::prop_assert_eq!(index.position(offset), naive(&text, offset));
            }
        }
    }
}
