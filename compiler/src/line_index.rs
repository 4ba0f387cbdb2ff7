//! Byte offsets to line/column positions, in characters or UTF-16 units.

/// Line starts of one text, for repeated position look-ups in O(log n).
#[derive(Debug, Clone)]
pub struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
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
        LineIndex { text, starts }
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
        let mut prefix = &self.text[self.starts[line]..offset];
        // A byte-order mark is not a character anyone sees: column 1 follows it.
        if line == 0 {
            prefix = prefix.strip_prefix('\u{feff}').unwrap_or(prefix);
        }
        Position {
            line: line + 1,
            column: prefix.chars().count() + 1,
            column_utf16: prefix.encode_utf16().count() + 1,
        }
    }

    /// Number of lines.
    pub fn line_count(&self) -> usize {
        self.starts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
