//! `textDocument/codeAction`: quick fixes where the fix is certain.

use std::collections::HashMap;

use lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, CodeActionParams, CodeActionResponse,
    TextEdit, WorkspaceEdit,
};
use mcpolicy_compiler::ide;

use super::Result;
use crate::diagnostics;
use crate::world::World;

/// The fixes for the findings in the requested range.
pub fn handle(world: &World, params: CodeActionParams) -> Result<Option<CodeActionResponse>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let range = snapshot.span(params.range);
    let actions = ide::code_actions(snapshot.db, snapshot.document.source, range)
        .into_iter()
        .map(|action| {
            let edits = action
                .edits
                .iter()
                .map(|e| TextEdit {
                    range: snapshot.range(e.span),
                    new_text: e.text.clone(),
                })
                .collect();
            CodeActionOrCommand::CodeAction(CodeAction {
                title: action.title,
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: Some(vec![diagnostics::to_lsp(&snapshot, &action.diagnostic)]),
                edit: Some(WorkspaceEdit {
                    changes: Some(HashMap::from([(snapshot.document.uri.clone(), edits)])),
                    ..WorkspaceEdit::default()
                }),
                is_preferred: Some(action.preferred),
                ..CodeAction::default()
            })
        })
        .collect();
    Ok(Some(actions))
}
