//! `textDocument/foldingRange`: reason, defaults and server blocks.

use lsp_types::{FoldingRange, FoldingRangeKind, FoldingRangeParams};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// One range per block that spans more than one line.
pub fn handle(world: &World, params: FoldingRangeParams) -> Result<Option<Vec<FoldingRange>>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    Ok(Some(
        ide::folding_ranges(snapshot.db, snapshot.document.source)
            .into_iter()
            .filter_map(|span| {
                let range = snapshot.range(span);
                (range.end.line > range.start.line).then_some(FoldingRange {
                    start_line: range.start.line,
                    start_character: None,
                    end_line: range.end.line,
                    end_character: None,
                    kind: Some(FoldingRangeKind::Region),
                    collapsed_text: None,
                })
            })
            .collect(),
    ))
}
