//! Byte offsets ⇄ line/column positions: the one line index of the
//! workspace.
//!
//! Two kinds of position come out of it:
//!
//! - [`Position`]: 1-based line and column, in characters and in UTF-16
//!   units, for reports (`mcpc check`'s human, JSON, SARIF and GitHub
//!   outputs). A byte-order mark is not a column.
//! - [`LineColumn`]: 0-based line and column in the [`Encoding`] an editor
//!   protocol negotiated (UTF-8 bytes or UTF-16 units), both ways, for the
//!   language server. A byte-order mark is a character like any other, as
//!   the editor's buffer holds it.
//!
//! `\n`, `\r\n` and a lone `\r` all end a line, as in the grammar and the
//! LSP specification.
//!
//! The index holds no text: every look-up takes the text it was built
//! from, so that the language server keeps one copy of a document (in the
//! database) and an index beside it.

/// How a [`LineColumn`]'s column counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// UTF-8 bytes.
    Utf8,
    /// UTF-16 code units (LSP's default): an astral character is two.
    Utf16,
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

/// A 0-based line and column, the column in the units of an [`Encoding`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LineColumn {
    /// 0-based line.
    pub line: usize,
    /// 0-based column, in bytes (UTF-8) or code units (UTF-16).
    pub column: usize,
}

impl LineColumn {
    /// Line `line`, column `column`.
    pub fn new(line: usize, column: usize) -> Self {
        LineColumn { line, column }
    }
}

/// Line starts of one text, for repeated position look-ups.
///
/// A look-up costs O(log n) plus at most [`CHECKPOINT`] bytes of counting,
/// whatever the line's length: columns are counted from a checkpoint of
/// running character and UTF-16 totals, never from the line's start, so
/// that many findings on one long line cost linear time, not quadratic.
#[derive(Debug, Clone, Default)]
pub struct LineIndex {
    /// Byte offset where each line starts; the first is 0.
    starts: Vec<usize>,
    counts: Checkpoints,
    /// The indexed text's length, to catch a look-up on another text.
    len: usize,
}

/// The most bytes a position look-up counts after its checkpoint.
const CHECKPOINT: usize = 256;

/// Running character and UTF-16 totals of one text, at character
/// boundaries about every [`CHECKPOINT`] bytes from offset 0: a column is
/// counted from the nearest checkpoint, never from the line's start.
#[derive(Debug, Clone)]
struct Checkpoints(Vec<Checkpoint>);

/// Characters and UTF-16 units before byte `byte`.
#[derive(Debug, Clone, Copy)]
struct Checkpoint {
    byte: usize,
    chars: usize,
    units: usize,
}

const ORIGIN: Checkpoint = Checkpoint {
    byte: 0,
    chars: 0,
    units: 0,
};

impl Default for Checkpoints {
    fn default() -> Self {
        Checkpoints(vec![ORIGIN])
    }
}

impl Checkpoints {
    fn new(text: &str) -> Self {
        let mut checkpoints = vec![ORIGIN];
        let mut last = ORIGIN;
        while text.len() - last.byte > CHECKPOINT {
            let mut next = last.byte + CHECKPOINT;
            while !text.is_char_boundary(next) {
                next -= 1;
            }
            let piece = &text[last.byte..next];
            last = Checkpoint {
                byte: next,
                chars: last.chars + piece.chars().count(),
                units: last.units + utf16_len(piece),
            };
            checkpoints.push(last);
        }
        Checkpoints(checkpoints)
    }

    /// Characters and UTF-16 units of `text` (the text these checkpoints
    /// were made from) before `offset`, a char boundary.
    fn before(&self, text: &str, offset: usize) -> (usize, usize) {
        let at = self
            .0
            .partition_point(|c| c.byte <= offset)
            .saturating_sub(1);
        let c = self.0.get(at).copied().unwrap_or(ORIGIN);
        let rest = &text[c.byte.min(offset)..offset];
        #[cfg(test)]
        tests::COUNTED.with(|n| n.set(n.get() + rest.len()));
        (c.chars + rest.chars().count(), c.units + utf16_len(rest))
    }

    /// The last checkpoint with at most `units` UTF-16 units before it.
    fn at_units(&self, units: usize) -> Checkpoint {
        let at = self
            .0
            .partition_point(|c| c.units <= units)
            .saturating_sub(1);
        self.0.get(at).copied().unwrap_or(ORIGIN)
    }
}

impl LineIndex {
    /// Indexes `text`.
    pub fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'\n' => starts.push(i + 1),
                b'\r' if bytes.get(i + 1) != Some(&b'\n') => starts.push(i + 1),
                _ => {}
            }
        }
        LineIndex {
            starts,
            counts: Checkpoints::new(text),
            len: text.len(),
        }
    }

    /// Number of lines (a text ending in a line break has an empty last line).
    pub fn line_count(&self) -> usize {
        self.starts.len()
    }

    /// `offset` clamped to `text` and snapped back to a char boundary.
    fn clamp(&self, text: &str, offset: usize) -> usize {
        debug_assert_eq!(text.len(), self.len, "a look-up on a text not indexed");
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        offset
    }

    /// The 0-based line holding `offset` (a clamped offset).
    fn line_of(&self, offset: usize) -> usize {
        self.starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// The byte range of line `line` (which exists) without its line break.
    fn line_bounds(&self, text: &str, line: usize) -> (usize, usize) {
        let start = self.starts[line];
        let mut end = self.starts.get(line + 1).copied().unwrap_or(text.len());
        let bytes = text.as_bytes();
        if end > start && bytes.get(end - 1) == Some(&b'\n') {
            end -= 1;
        }
        if end > start && bytes.get(end - 1) == Some(&b'\r') {
            end -= 1;
        }
        (start, end)
    }

    /// The 1-based position of a byte offset in `text` (the text indexed),
    /// clamped to the text and snapped back to a char boundary.
    pub fn position(&self, text: &str, offset: usize) -> Position {
        let offset = self.clamp(text, offset);
        let line = self.line_of(offset);
        let (start_chars, start_units) = self.counts.before(text, self.starts[line]);
        let (chars, units) = self.counts.before(text, offset);
        let (mut column, mut column_utf16) = (chars - start_chars, units - start_units);
        // A byte-order mark is not a character anyone sees: column 1 follows it.
        if line == 0 && offset >= 3 && text.starts_with('\u{feff}') {
            column -= 1;
            column_utf16 -= 1;
        }
        Position {
            line: line + 1,
            column: column + 1,
            column_utf16: column_utf16 + 1,
        }
    }

    /// The 0-based line and column of a byte offset in `text` (the text
    /// indexed), clamped to the text and snapped back to a char boundary.
    /// An offset between the `\r` and `\n` of a line break is on the line
    /// that break ends, one column past the `\r`.
    pub fn line_column(&self, text: &str, offset: usize, encoding: Encoding) -> LineColumn {
        let offset = self.clamp(text, offset);
        let line = self.line_of(offset);
        let start = self.starts[line];
        let column = match encoding {
            Encoding::Utf8 => offset - start,
            Encoding::Utf16 => {
                self.counts.before(text, offset).1 - self.counts.before(text, start).1
            }
        };
        LineColumn { line, column }
    }

    /// The byte offset of a line and column in `text` (the text indexed).
    /// A line past the end is the end of the text; a column past the end of
    /// its line is the line's end, before its line break (as the LSP
    /// specification asks); a column inside a character (half a surrogate
    /// pair, a byte inside a UTF-8 sequence) snaps to that character's start.
    pub fn offset(&self, text: &str, at: LineColumn, encoding: Encoding) -> usize {
        debug_assert_eq!(text.len(), self.len, "a look-up on a text not indexed");
        if at.line >= self.starts.len() {
            return text.len();
        }
        let (start, end) = self.line_bounds(text, at.line);
        match encoding {
            Encoding::Utf8 => {
                let mut offset = start.saturating_add(at.column).min(end);
                while !text.is_char_boundary(offset) {
                    offset -= 1;
                }
                offset
            }
            Encoding::Utf16 => {
                let line_units = self.counts.before(text, start).1;
                let wanted = line_units.saturating_add(at.column);
                // Count from the nearest checkpoint at or before the wanted
                // column (within the line), not from the line's start.
                let checkpoint = self.counts.at_units(wanted);
                let (from, mut units) = if checkpoint.byte > start {
                    (checkpoint.byte.min(end), checkpoint.units)
                } else {
                    (start, line_units)
                };
                let found = text[from..end]
                    .char_indices()
                    .find_map(|(i, c)| {
                        units += c.len_utf16();
                        (units > wanted).then_some(from + i)
                    })
                    .unwrap_or(end);
                #[cfg(test)]
                tests::COUNTED.with(|n| n.set(n.get() + (found - from)));
                found
            }
        }
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
    use proptest::prelude::*;

    thread_local! {
        /// Bytes the look-ups of this thread counted character by character.
        pub(super) static COUNTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// 50,000 findings on one 1 MB line (`docs/threat-model.md`, "A hostile
    /// policy file (or a policy written in a hurry)"). Each look-up
    /// counts a bounded number of bytes, so the work is linear in the number
    /// of findings; counting from the line's start (as before) would count
    /// 25 GB here. The same holds for LSP positions, both ways.
    #[test]
    fn positions_on_one_long_line_cost_bounded_work_each() {
        let text = format!("mcpolicy 1\n{}\n", "défaults é ".repeat(80_000));
        let index = LineIndex::new(&text);
        COUNTED.with(|c| c.set(0));
        let findings = 50_000;
        for i in 0..findings {
            let offset = 11 + i * (text.len() - 12) / findings;
            let _ = index.position(&text, offset);
            let at = index.line_column(&text, offset, Encoding::Utf16);
            // And back, as the language server reads a request's position.
            let _ = index.offset(&text, at, Encoding::Utf16);
        }
        let counted = COUNTED.with(std::cell::Cell::get);
        assert!(
            counted <= findings * 6 * CHECKPOINT,
            "{counted} bytes counted for {findings} look-ups"
        );
    }

    #[test]
    fn positions() {
        let text = "ab\n😀x\r\ny";
        let index = LineIndex::new(text);
        let at = |line, column, column_utf16| Position {
            line,
            column,
            column_utf16,
        };
        assert_eq!(index.position(text, 0), at(1, 1, 1));
        assert_eq!(index.position(text, 7), at(2, 2, 3));
        assert_eq!(index.position(text, 10), at(3, 1, 1));
        assert_eq!(index.position(text, 999), at(3, 2, 2));
        assert_eq!(index.line_count(), 3);
    }

    /// The cases the language server relied on, kept from its own index.
    #[test]
    fn astral_characters_count_two_utf16_units() {
        let text = "a😀b\r\nx\ry";
        let index = LineIndex::new(text);
        let lc = LineColumn::new;
        // `b` is byte 5, UTF-16 unit 3, UTF-8 byte 5.
        assert_eq!(index.line_column(text, 5, Encoding::Utf16), lc(0, 3));
        assert_eq!(index.line_column(text, 5, Encoding::Utf8), lc(0, 5));
        assert_eq!(index.offset(text, lc(0, 3), Encoding::Utf16), 5);
        // Half a surrogate pair snaps to the emoji's start; so does a byte
        // inside its UTF-8 sequence.
        assert_eq!(index.offset(text, lc(0, 2), Encoding::Utf16), 1);
        assert_eq!(index.offset(text, lc(0, 3), Encoding::Utf8), 1);
        // Past the line's end is the line's end, before `\r\n`.
        assert_eq!(index.offset(text, lc(0, 99), Encoding::Utf16), 6);
        assert_eq!(index.offset(text, lc(0, 99), Encoding::Utf8), 6);
        assert_eq!(index.offset(text, lc(1, 0), Encoding::Utf16), 8);
        assert_eq!(index.offset(text, lc(2, 1), Encoding::Utf16), 11);
        assert_eq!(index.offset(text, lc(9, 0), Encoding::Utf16), text.len());
        assert_eq!(index.line_column(text, 99, Encoding::Utf16), lc(2, 1));
        // Between `\r` and `\n`: on the line the break ends.
        assert_eq!(index.line_column(text, 7, Encoding::Utf8), lc(0, 7));
    }

    /// Lines as the grammar reads them, split by hand: the model the index
    /// must agree with. Each line's text, without its break, and its start.
    fn model_lines(text: &str) -> Vec<(usize, &str)> {
        let mut lines = Vec::new();
        let (mut start, mut i) = (0, 0);
        let bytes = text.as_bytes();
        while i < bytes.len() {
            let width = match bytes[i] {
                b'\r' if bytes.get(i + 1) == Some(&b'\n') => 2,
                b'\r' | b'\n' => 1,
                _ => 0,
            };
            if width > 0 {
                lines.push((start, &text[start..i]));
                start = i + width;
                i += width;
            } else {
                i += 1;
            }
        }
        lines.push((start, &text[start..]));
        lines
    }

    fn width(c: char, encoding: Encoding) -> usize {
        match encoding {
            Encoding::Utf8 => c.len_utf8(),
            Encoding::Utf16 => c.len_utf16(),
        }
    }

    /// The 0-based position of a char-boundary offset, counted from the
    /// line's start (an offset inside a `\r\n` sits one past the `\r`).
    fn model_line_column(
        text: &str,
        lines: &[(usize, &str)],
        offset: usize,
        encoding: Encoding,
    ) -> LineColumn {
        let line = lines.iter().rposition(|&(s, _)| s <= offset).unwrap_or(0);
        let start = lines[line].0;
        let column = text[start..offset]
            .chars()
            .map(|c| width(c, encoding))
            .sum();
        LineColumn { line, column }
    }

    /// The offset of a position: clamped to the text, to the line's end, and
    /// back to the start of the character it falls in.
    fn model_offset(text: &str, at: LineColumn, encoding: Encoding) -> usize {
        let lines = model_lines(text);
        let Some(&(start, line)) = lines.get(at.line) else {
            return text.len();
        };
        let mut units = 0;
        for (i, c) in line.char_indices() {
            units += width(c, encoding);
            if units > at.column {
                return start + i;
            }
        }
        start + line.len()
    }

    /// The 1-based position, counted from the line start.
    fn model_position(text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let lines = model_lines(text);
        let LineColumn { line, .. } = model_line_column(text, &lines, offset, Encoding::Utf8);
        let start = lines[line].0;
        let mut prefix = &text[start..offset];
        if line == 0 {
            prefix = prefix.strip_prefix('\u{feff}').unwrap_or(prefix);
        }
        Position {
            line: line + 1,
            column: prefix.chars().count() + 1,
            column_utf16: prefix.encode_utf16().count() + 1,
        }
    }

    /// Text of short and long lines mixing 1- to 4-byte characters, BOMs,
    /// combining marks and every line break (`\r\n`, `\n`, lone `\r`).
    fn text() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "a", "é", "€", "😀", "\n", "\r\n", "\r", "\u{feff}", "xyz", "\u{301}",
        ])
        .prop_map(str::to_owned);
        // Long runs without a break too, so that checkpoints fall mid-line.
        let long = prop::sample::select(vec!["é😀a", "abcdefgh"]).prop_map(|s| s.repeat(60));
        prop::collection::vec(prop_oneof![8 => piece, 1 => long], 0..200).prop_map(|p| p.concat())
    }

    fn encoding() -> impl Strategy<Value = Encoding> {
        prop_oneof![Just(Encoding::Utf8), Just(Encoding::Utf16)]
    }

    // Fast by default; long mode: `PROPTEST_CASES=20000 cargo test -p
    // mcpolicy-compiler --lib line_index`.
    proptest! {
        /// Checkpointed 1-based columns equal columns counted from the line
        /// start, at every offset (past the end and inside characters too).
        #[test]
        fn positions_agree_with_counting_from_the_line_start(
            text in text(),
            offsets in prop::collection::vec(0usize..8000, 1..40),
        ) {
            let index = LineIndex::new(&text);
            for offset in offsets.into_iter().chain([0, text.len(), text.len() + 1]) {
                prop_assert_eq!(index.position(&text, offset), model_position(&text, offset));
            }
        }

        /// Every char-boundary offset round-trips through its line and
        /// column, in both encodings, except one between `\r` and `\n`
        /// (not a place in any line), which maps to the end of its line.
        #[test]
        fn offsets_round_trip(text in text(), encoding in encoding()) {
            let index = LineIndex::new(&text);
            let lines = model_lines(&text);
            prop_assert_eq!(index.line_count(), lines.len());
            for offset in (0..=text.len()).filter(|&o| text.is_char_boundary(o)) {
                let at = index.line_column(&text, offset, encoding);
                prop_assert_eq!(at, model_line_column(&text, &lines, offset, encoding), "offset {}", offset);
                let back = index.offset(&text, at, encoding);
                let inside_crlf = offset > 0
                    && text.as_bytes()[offset - 1] == b'\r'
                    && text.as_bytes().get(offset) == Some(&b'\n');
                if inside_crlf {
                    prop_assert_eq!(back, offset - 1);
                } else {
                    prop_assert_eq!(back, offset);
                }
            }
        }

        /// Any line and column, in range or not, gives the model's clamped
        /// offset: a char boundary within the text, never a panic. Read back,
        /// it gives the position it was clamped to.
        #[test]
        fn positions_clamp_to_the_text(
            text in text(),
            encoding in encoding(),
            positions in prop::collection::vec((0usize..60, 0usize..2000), 1..60),
        ) {
            let index = LineIndex::new(&text);
            let extremes = [(usize::MAX, 0), (0, usize::MAX), (usize::MAX, usize::MAX)];
            for (line, column) in positions.into_iter().chain(extremes) {
                let at = LineColumn { line, column };
                let offset = index.offset(&text, at, encoding);
                prop_assert_eq!(offset, model_offset(&text, at, encoding), "{:?}", at);
                prop_assert!(text.is_char_boundary(offset));
                let again = index.line_column(&text, offset, encoding);
                // Clamping only moves back, and never off the line asked for
                // unless that line does not exist.
                prop_assert!(again <= at, "{:?} -> {:?}", at, again);
                prop_assert_eq!(again.line, line.min(index.line_count() - 1));
                prop_assert_eq!(index.offset(&text, again, encoding), offset);
            }
        }

        /// Offsets past the end or inside a character clamp like the
        /// 1-based positions do, in both encodings.
        #[test]
        fn offsets_clamp_to_the_text(text in text(), encoding in encoding(), offset in 0usize..10_000) {
            let index = LineIndex::new(&text);
            let mut snapped = offset.min(text.len());
            while !text.is_char_boundary(snapped) {
                snapped -= 1;
            }
            prop_assert_eq!(
                index.line_column(&text, offset, encoding),
                model_line_column(&text, &model_lines(&text), snapped, encoding)
            );
        }
    }
}
