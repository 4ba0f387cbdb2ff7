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
        .collect::<Vec<_>>();
    let mut actions = actions;
    if wants(
        params.context.only.as_deref(),
        &CodeActionKind::SOURCE_FIX_ALL,
    ) {
        let edits: Vec<TextEdit> = ide::fix_all(snapshot.db, snapshot.document.source)
            .into_iter()
            .map(|e| TextEdit {
                range: snapshot.range(e.span),
                new_text: e.text,
            })
            .collect();
        if !edits.is_empty() {
            actions.push(CodeActionOrCommand::CodeAction(CodeAction {
                title: format!(
                    "Apply every certain fix ({} edit{})",
                    edits.len(),
                    if edits.len() == 1 { "" } else { "s" }
                ),
                kind: Some(CodeActionKind::SOURCE_FIX_ALL),
                edit: Some(WorkspaceEdit {
                    changes: Some(HashMap::from([(snapshot.document.uri.clone(), edits)])),
                    ..WorkspaceEdit::default()
                }),
                ..CodeAction::default()
            }));
        }
    }
    if let Some(only) = &params.context.only {
        // Asked for some kinds only (on save, `source.fixAll`): the quick
        // fixes go only to a client that asked for them.
        actions.retain(|a| match a {
            CodeActionOrCommand::CodeAction(a) => {
                a.kind.as_ref().is_some_and(|kind| wants(Some(only), kind))
            }
            CodeActionOrCommand::Command(_) => false,
        });
    }
    Ok(Some(actions))
}

/// Whether a request limited to `only` (none: every kind) wants actions of
/// `kind`: a kind is wanted when an asked kind is it or a prefix of it
/// (`source` wants `source.fixAll`).
fn wants(only: Option<&[CodeActionKind]>, kind: &CodeActionKind) -> bool {
    only.is_none_or(|only| {
        only.iter().any(|asked| {
            kind.as_str() == asked.as_str()
                || kind
                    .as_str()
                    .strip_prefix(asked.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    })
}
