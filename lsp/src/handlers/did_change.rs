//! `textDocument/didChange`: incremental edits in the negotiated encoding.

use lsp_types::DidChangeTextDocumentParams;

use crate::world::World;

/// Applies the edits. A change to a document never opened is ignored and
/// gives `false`, for the log: the editor and the server disagree on what
/// is open.
pub fn handle(world: &mut World, params: DidChangeTextDocumentParams) -> bool {
    let doc = params.text_document;
    world.change(&doc.uri, doc.version, params.content_changes)
}
