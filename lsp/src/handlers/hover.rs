//! `textDocument/hover`.

use lsp_types::{Hover, HoverContents, HoverParams, MarkupContent, MarkupKind};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// What the word under the cursor means, with its effective value.
pub fn handle(world: &World, params: HoverParams) -> Result<Option<Hover>> {
    let at = params.text_document_position_params;
    let snapshot = world.snapshot(&at.text_document.uri)?;
    let offset = snapshot.offset(at.position);
    Ok(
        ide::hover(snapshot.db, snapshot.document.source, offset).map(|h| Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: h.markdown,
            }),
            range: Some(snapshot.range(h.span)),
        }),
    )
}
