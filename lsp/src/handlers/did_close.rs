//! `textDocument/didClose`: the document is forgotten and its diagnostics
//! cleared.

use lsp_types::{DidCloseTextDocumentParams, Uri};

use crate::world::World;

/// Forgets the document; returns its URI when its diagnostics must be cleared.
pub fn handle(world: &mut World, params: DidCloseTextDocumentParams) -> Option<Uri> {
    world.close(&params.text_document.uri).map(|d| d.uri)
}
