//! `textDocument/inlayHint`: what each server block inherits from `defaults`.

use lsp_types::{
    InlayHint, InlayHintLabel, InlayHintParams, InlayHintTooltip, MarkupContent, MarkupKind,
};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// Hints for the visible range.
pub fn handle(world: &World, params: InlayHintParams) -> Result<Option<Vec<InlayHint>>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let range = snapshot.span(params.range);
    Ok(Some(
        ide::inlay_hints(snapshot.db, snapshot.document.source, range)
            .into_iter()
            .map(|hint| InlayHint {
                position: snapshot.position(hint.offset),
                label: InlayHintLabel::String(hint.label),
                kind: None,
                text_edits: None,
                tooltip: Some(InlayHintTooltip::MarkupContent(MarkupContent {
                    kind: MarkupKind::Markdown,
                    value: hint.tooltip,
                })),
                padding_left: Some(true),
                padding_right: None,
                data: None,
            })
            .collect(),
    ))
}
