//! `textDocument/completion`.

use lsp_types::{
    CompletionItem, CompletionItemKind, CompletionParams, CompletionResponse, CompletionTextEdit,
    Documentation, InsertReplaceEdit, MarkupContent, MarkupKind, TextEdit,
};
use mcpolicy_compiler::ide::{self, CompletionKind};

use super::Result;
use crate::world::World;

/// What may be written at the cursor.
pub fn handle(world: &World, params: CompletionParams) -> Result<Option<CompletionResponse>> {
    let at = params.text_document_position;
    let snapshot = world.snapshot(&at.text_document.uri)?;
    let offset = snapshot.offset(at.position);
    let items = ide::completions(snapshot.db, snapshot.document.source, offset)
        .into_iter()
        .map(|c| CompletionItem {
            kind: Some(match c.kind {
                CompletionKind::Keyword => CompletionItemKind::KEYWORD,
                CompletionKind::Statement => CompletionItemKind::PROPERTY,
                CompletionKind::Value => CompletionItemKind::ENUM_MEMBER,
                CompletionKind::Reason => CompletionItemKind::REFERENCE,
                CompletionKind::Unit => CompletionItemKind::UNIT,
            }),
            detail: c.detail,
            documentation: c.documentation.map(|value| {
                Documentation::MarkupContent(MarkupContent {
                    kind: MarkupKind::Markdown,
                    value,
                })
            }),
            filter_text: Some(c.filter),
            // Insert over the word typed so far, or, where the client
            // offers the choice, replace the whole word around the cursor.
            text_edit: Some(if world.client.insert_replace && c.word != c.replace {
                CompletionTextEdit::InsertAndReplace(InsertReplaceEdit {
                    new_text: c.insert,
                    insert: snapshot.range(c.replace),
                    replace: snapshot.range(c.word),
                })
            } else {
                CompletionTextEdit::Edit(TextEdit {
                    range: snapshot.range(c.replace),
                    new_text: c.insert,
                })
            }),
            label: c.label,
            ..CompletionItem::default()
        })
        .collect();
    Ok(Some(CompletionResponse::Array(items)))
}
