//! `textDocument/foldingRange`: reason, defaults and server blocks, and
//! blocks of consecutive comment lines.

use lsp_types::{FoldingRange, FoldingRangeKind, FoldingRangeParams};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// One range per block that spans more than one line, and one per run of
/// two or more comment lines, in source order.
pub fn handle(world: &World, params: FoldingRangeParams) -> Result<Option<Vec<FoldingRange>>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let source = snapshot.document.source;
    let blocks = ide::folding_ranges(snapshot.db, source)
        .into_iter()
        .map(|span| (span, FoldingRangeKind::Region));
    let comments = ide::comment_blocks(snapshot.db, source)
        .into_iter()
        .map(|span| (span, FoldingRangeKind::Comment));
    let mut ranges: Vec<FoldingRange> = blocks
        .chain(comments)
        .filter_map(|(span, kind)| {
            let range = snapshot.range(span);
            (range.end.line > range.start.line).then_some(FoldingRange {
                start_line: range.start.line,
                start_character: None,
                end_line: range.end.line,
                end_character: None,
                kind: Some(kind),
                collapsed_text: None,
            })
        })
        .collect();
    ranges.sort_by_key(|r| (r.start_line, r.end_line));
    Ok(Some(ranges))
}
