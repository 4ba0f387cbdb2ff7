//! `textDocument/references`: every use of a reason.

use lsp_types::{Location, ReferenceParams};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// The reason's uses (and declaration, when asked).
pub fn handle(world: &World, params: ReferenceParams) -> Result<Option<Vec<Location>>> {
    let at = params.text_document_position;
    let snapshot = world.snapshot(&at.text_document.uri)?;
    let offset = snapshot.offset(at.position);
    let spans = ide::references(
        snapshot.db,
        snapshot.document.source,
        offset,
        params.context.include_declaration,
    );
    Ok(Some(
        spans
            .into_iter()
            .map(|span| Location {
                uri: snapshot.document.uri.clone(),
                range: snapshot.range(span),
            })
            .collect(),
    ))
}
