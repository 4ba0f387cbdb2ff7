//! `textDocument/selectionRange`: word, statement, block, item, file.

use lsp_types::{SelectionRange, SelectionRangeParams};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// For each position, the chain of ranges "expand selection" steps through.
pub fn handle(world: &World, params: SelectionRangeParams) -> Result<Option<Vec<SelectionRange>>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    Ok(Some(
        params
            .positions
            .into_iter()
            .map(|position| {
                let offset = snapshot.offset(position);
                let chain = ide::selection_ranges(snapshot.db, snapshot.document.source, offset);
                let mut range: Option<SelectionRange> = None;
                for span in chain.into_iter().rev() {
                    range = Some(SelectionRange {
                        range: snapshot.range(span),
                        parent: range.map(Box::new),
                    });
                }
                range.unwrap_or(SelectionRange {
                    range: lsp_types::Range::new(position, position),
                    parent: None,
                })
            })
            .collect(),
    ))
}
