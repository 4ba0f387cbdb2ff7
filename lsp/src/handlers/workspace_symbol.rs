//! `workspace/symbol`: the top-level items of every open document.

use lsp_types::{
    Location, SymbolInformation, SymbolKind, WorkspaceSymbolParams, WorkspaceSymbolResponse,
};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// Reasons, servers, `defaults` and settings whose name matches the query
/// (its characters in order, case-insensitively), in every open document,
/// in the order of their URIs and then of the text.
#[allow(deprecated)] // `deprecated` is a required field of the struct.
pub fn handle(
    world: &World,
    params: WorkspaceSymbolParams,
) -> Result<Option<WorkspaceSymbolResponse>> {
    let mut uris: Vec<_> = world.documents.values().map(|d| d.uri.clone()).collect();
    uris.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut found = Vec::new();
    for uri in uris {
        let snapshot = world.snapshot(&uri)?;
        for symbol in ide::item_symbols(snapshot.db, snapshot.document.source, &params.query) {
            found.push(SymbolInformation {
                name: symbol.name,
                kind: match symbol.kind {
                    ide::SymbolKind::Setting => SymbolKind::CONSTANT,
                    ide::SymbolKind::Reason => SymbolKind::ENUM_MEMBER,
                    ide::SymbolKind::Defaults => SymbolKind::NAMESPACE,
                    ide::SymbolKind::Server => SymbolKind::MODULE,
                    ide::SymbolKind::Statement => SymbolKind::PROPERTY,
                },
                tags: None,
                deprecated: None,
                location: Location {
                    uri: uri.clone(),
                    range: snapshot.range(symbol.span),
                },
                container_name: None,
            });
        }
    }
    Ok(Some(WorkspaceSymbolResponse::Flat(found)))
}
