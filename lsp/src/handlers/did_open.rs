//! `textDocument/didOpen`: the document becomes a salsa input.

use lsp_types::DidOpenTextDocumentParams;

use crate::world::World;

/// Opens the document; its diagnostics follow when the queue is drained.
pub fn handle(world: &mut World, params: DidOpenTextDocumentParams) {
    let doc = params.text_document;
    world.open(doc.uri, doc.version, doc.text);
}
