//! `textDocument/didSave`: diagnostics are published again.

use lsp_types::DidSaveTextDocumentParams;

use crate::world::World;

/// Marks the document for diagnostics (a client may clear them on save).
pub fn handle(world: &mut World, params: DidSaveTextDocumentParams) {
    world.touch(&params.text_document.uri);
}
