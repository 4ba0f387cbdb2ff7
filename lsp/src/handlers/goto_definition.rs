//! `textDocument/definition`: from a reason's use to its declaration.

use lsp_types::{GotoDefinitionParams, GotoDefinitionResponse, LocationLink};
use mcpolicy_compiler::ide;

use super::Result;
use crate::world::World;

/// The declaration of the reason under the cursor.
pub fn handle(
    world: &World,
    params: GotoDefinitionParams,
) -> Result<Option<GotoDefinitionResponse>> {
    let at = params.text_document_position_params;
    let snapshot = world.snapshot(&at.text_document.uri)?;
    let offset = snapshot.offset(at.position);
    Ok(
        ide::definition(snapshot.db, snapshot.document.source, offset).map(|(origin, target)| {
            GotoDefinitionResponse::Link(vec![LocationLink {
                origin_selection_range: Some(snapshot.range(origin)),
                target_uri: snapshot.document.uri.clone(),
                target_range: snapshot.range(target),
                target_selection_range: snapshot.range(target),
            }])
        }),
    )
}
