//! `textDocument/didChange`: incremental edits in the negotiated encoding.

use lsp_types::DidChangeTextDocumentParams;

use crate::world::World;

/// Applies the edits; a change to a document never opened is ignored.
pub fn handle(world: &mut World, params: DidChangeTextDocumentParams) {
    let doc = params.text_document;
    world.change(&doc.uri, doc.version, params.content_changes);
}
