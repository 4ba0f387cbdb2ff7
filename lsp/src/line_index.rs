//! Byte offsets ⇄ LSP positions, in the negotiated encoding. LSP counts a
//! position's `character` in UTF-16 code units unless client and server
//! agree on UTF-8; an astral character (an emoji) is two UTF-16 units.

use lsp_types::{Position, Range};
use mcpolicy_compiler::line_index::Checkpoints;
use mcpolicy_compiler::syntax::Span;

/// How a position's `character` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// UTF-8 bytes (negotiated through `general.positionEncodings`).
    Utf8,
    /// UTF-16 code units (LSP's default).
    Utf16,
}

/// Where each line starts. `\n`, `\r\n` and a lone `\r` end a line, as in
/// the grammar and the LSP specification.
#[derive(Debug, Clone, Default)]
pub struct LineIndex {
    starts: Vec<usize>,
    /// Running UTF-16 totals, so that many diagnostics on one long line
    /// convert in linear time, not quadratic.
    utf16: Checkpoints,
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
            utf16: Checkpoints::new(text),
        }
    }

    /// UTF-16 units of `text` before `offset` (a char boundary).
    fn utf16_before(&self, text: &str, offset: usize) -> usize {
        self.utf16.before(text, offset).1
    }

    /// The byte range of line `line` without its line break.
    fn line(&self, text: &str, line: usize) -> (usize, usize) {
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

    /// The position of a byte offset (clamped to the text and snapped back
    /// to a character boundary).
    pub fn position(&self, text: &str, offset: usize, encoding: Encoding) -> Position {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let start = self.starts[line];
        let character = match encoding {
            Encoding::Utf8 => offset - start,
            Encoding::Utf16 => self.utf16_before(text, offset) - self.utf16_before(text, start),
        };
        Position::new(saturate(line), saturate(character))
    }

    /// The byte offset of a position. A line past the end is the end of
    /// the text; a character past the end of its line is the line's end
    /// (as the specification asks); a position inside a character (half a
    /// surrogate pair, a byte inside a UTF-8 sequence) snaps to its start.
    pub fn offset(&self, text: &str, position: Position, encoding: Encoding) -> usize {
        let line = position.line as usize;
        if line >= self.starts.len() {
            return text.len();
        }
        let (start, end) = self.line(text, line);
        let wanted = position.character as usize;
        let mut units = 0;
        for (i, c) in text[start..end].char_indices() {
            let width = match encoding {
                Encoding::Utf8 => c.len_utf8(),
                Encoding::Utf16 => c.len_utf16(),
            };
            if units + width > wanted {
                return start + i;
            }
            units += width;
        }
        end
    }

    /// A span as an LSP range.
    pub fn range(&self, text: &str, span: Span, encoding: Encoding) -> Range {
        Range::new(
            self.position(text, span.start, encoding),
            self.position(text, span.end, encoding),
        )
    }

    /// An LSP range as a span (start and end ordered).
    pub fn span(&self, text: &str, range: Range, encoding: Encoding) -> Span {
        let a = self.offset(text, range.start, encoding);
        let b = self.offset(text, range.end, encoding);
        Span::new(a.min(b), a.max(b))
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checkpointed UTF-16 columns equal counting from the line's start, at
    /// every offset of long lines mixing 1- to 4-byte characters.
    #[test]
    fn utf16_checkpoints_agree_with_counting_from_the_line_start() {
        let pieces = ["a", "é", "€", "😀", "\n", "\r\n", "\r", "xyz"];
        let mut seed = 7u64;
        let mut text = String::new();
        for i in 0..4000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Long stretches without line breaks, a few breaks between.
            let pick = (seed >> 33) as usize % if i % 1000 == 999 { 8 } else { 4 };
            text.push_str(pieces[pick]);
        }
        let index = LineIndex::new(&text);
        for offset in 0..=text.len() + 2 {
            let mut at = offset.min(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let line = index.starts.partition_point(|&s| s <= at) - 1;
            let expected = text[index.starts[line]..at].encode_utf16().count();
            assert_eq!(
                index.position(&text, offset, Encoding::Utf16),
                Position::new(line as u32, expected as u32),
                "offset {offset}"
            );
        }
    }

    #[test]
    fn astral_characters_count_two_utf16_units() {
        let text = "a😀b\r\nx\ry";
        let index = LineIndex::new(text);
        // `b` is byte 5, UTF-16 unit 3, UTF-8 byte 5.
        assert_eq!(
            index.position(text, 5, Encoding::Utf16),
            Position::new(0, 3)
        );
        assert_eq!(index.position(text, 5, Encoding::Utf8), Position::new(0, 5));
        assert_eq!(index.offset(text, Position::new(0, 3), Encoding::Utf16), 5);
        // Half a surrogate pair snaps to the emoji's start.
        assert_eq!(index.offset(text, Position::new(0, 2), Encoding::Utf16), 1);
        // Past the line's end is the line's end, before `\r\n`.
        assert_eq!(index.offset(text, Position::new(0, 99), Encoding::Utf16), 6);
        assert_eq!(index.offset(text, Position::new(1, 0), Encoding::Utf16), 8);
        assert_eq!(index.offset(text, Position::new(2, 1), Encoding::Utf16), 11);
        assert_eq!(
            index.offset(text, Position::new(9, 0), Encoding::Utf16),
            text.len()
        );
        assert_eq!(
            index.position(text, 99, Encoding::Utf16),
            Position::new(2, 1)
        );
    }
}
