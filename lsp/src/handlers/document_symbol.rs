//! `textDocument/documentSymbol`: servers, reasons, defaults and settings.

use lsp_types::{DocumentSymbol, DocumentSymbolParams, DocumentSymbolResponse, SymbolKind};
use mcpolicy_compiler::ide::{self, Symbol};

use super::Result;
use crate::world::{Snapshot, World};

/// The outline.
pub fn handle(
    world: &World,
    params: DocumentSymbolParams,
) -> Result<Option<DocumentSymbolResponse>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let symbols = ide::document_symbols(snapshot.db, snapshot.document.source)
        .iter()
        .map(|s| convert(&snapshot, s))
        .collect();
    Ok(Some(DocumentSymbolResponse::Nested(symbols)))
}

#[allow(deprecated)] // `deprecated` is a required field of the struct.
fn convert(snapshot: &Snapshot<'_>, symbol: &Symbol) -> DocumentSymbol {
    DocumentSymbol {
        name: symbol.name.clone(),
        detail: symbol.detail.clone(),
        kind: match symbol.kind {
            ide::SymbolKind::Setting => SymbolKind::CONSTANT,
            ide::SymbolKind::Reason => SymbolKind::ENUM_MEMBER,
            ide::SymbolKind::Defaults => SymbolKind::NAMESPACE,
            ide::SymbolKind::Server => SymbolKind::MODULE,
            ide::SymbolKind::Statement => SymbolKind::PROPERTY,
        },
        tags: None,
        deprecated: None,
        range: snapshot.range(symbol.span),
        selection_range: snapshot.range(symbol.selection),
        children: (!symbol.children.is_empty()).then(|| {
            symbol
                .children
                .iter()
                .map(|c| convert(snapshot, c))
                .collect()
        }),
    }
}
