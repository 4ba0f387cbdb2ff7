//! `textDocument/rename` and `textDocument/prepareRename`, for reasons
//! declared in the file.

use std::collections::HashMap;

use lsp_server::ErrorCode;
use lsp_types::{
    PrepareRenameResponse, RenameParams, TextDocumentPositionParams, TextEdit, WorkspaceEdit,
};
use mcpolicy_compiler::ide;

use super::{ResponseError, Result};
use crate::world::World;

/// The range of the name that would be renamed.
pub fn prepare(
    world: &World,
    params: TextDocumentPositionParams,
) -> Result<Option<PrepareRenameResponse>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let offset = snapshot.offset(params.position);
    // A reason that cannot be renamed is an error the editor shows, with
    // the same words `rename` would answer; elsewhere there is nothing to
    // rename (null).
    match ide::prepare_rename(snapshot.db, snapshot.document.source, offset) {
        None => Ok(None),
        Some(Ok(span)) => Ok(Some(PrepareRenameResponse::Range(snapshot.range(span)))),
        Some(Err(message)) => Err(ResponseError {
            code: ErrorCode::RequestFailed as i32,
            message,
            data: None,
        }),
    }
}

/// The declaration and every use, renamed.
pub fn handle(world: &World, params: RenameParams) -> Result<Option<WorkspaceEdit>> {
    let at = params.text_document_position;
    let snapshot = world.snapshot(&at.text_document.uri)?;
    let offset = snapshot.offset(at.position);
    let spans = ide::rename(
        snapshot.db,
        snapshot.document.source,
        offset,
        &params.new_name,
    )
    .map_err(|message| ResponseError {
        code: ErrorCode::RequestFailed as i32,
        message,
        data: None,
    })?;
    let edits = spans
        .into_iter()
        .map(|span| TextEdit {
            range: snapshot.range(span),
            new_text: params.new_name.clone(),
        })
        .collect();
    Ok(Some(WorkspaceEdit {
        changes: Some(HashMap::from([(snapshot.document.uri.clone(), edits)])),
        ..WorkspaceEdit::default()
    }))
}
