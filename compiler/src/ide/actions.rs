//! Code actions: the certain fixes diagnostics carry, and declaring an
//! undeclared reason.

use super::overlaps;
use crate::codes::Code;
use crate::db::{SourceText, analyze, parse_file};
use crate::diagnostic::Diagnostic;
use crate::syntax::{ItemKind, Span};

/// Replace `span` with `text`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TextEdit {
    /// The bytes replaced (empty for an insertion).
    pub span: Span,
    /// The new text.
    pub text: String,
}

/// A quick fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeAction {
    /// The menu title.
    pub title: String,
    /// The finding it fixes.
    pub diagnostic: Diagnostic,
    /// The edits.
    pub edits: Vec<TextEdit>,
    /// Whether the editor may apply it without asking (the fix is certain).
    pub preferred: bool,
}

/// Quick fixes for the findings that overlap `range`.
pub fn code_actions(db: &dyn salsa::Database, source: SourceText, range: Span) -> Vec<CodeAction> {
    let mut actions = Vec::new();
    for d in &analyze(db, source).diagnostics {
        if !overlaps(d.span, range) {
            continue;
        }
        if let Some(fix) = &d.fix {
            actions.push(CodeAction {
                title: fix.title.clone(),
                diagnostic: d.clone(),
                edits: vec![TextEdit {
                    span: fix.span,
                    text: fix.replacement.clone(),
                }],
                preferred: true,
            });
        }
        if d.code == Code::E0401
            && let Some(action) = declare_reason(db, source, d)
        {
            actions.push(action);
        }
    }
    actions
}

/// `reason NAME { retryable false; ttl forever }` before the first block
/// that can use it, so that the declaration reads before its uses.
fn declare_reason(
    db: &dyn salsa::Database,
    source: SourceText,
    d: &Diagnostic,
) -> Option<CodeAction> {
    let text = source.text(db);
    let name = text.get(d.span.start..d.span.end)?;
    let file = &parse_file(db, source).file;
    let at = file
        .items
        .iter()
        .find(|item| matches!(item.kind, ItemKind::Defaults(_) | ItemKind::Server(_)))
        .map_or(text.len(), |item| item.span.start);
    let mut insert = format!("reason {name} {{ retryable false; ttl forever }}\n");
    if at == text.len() && !text.is_empty() && !text.ends_with('\n') {
        insert.insert(0, '\n');
    }
    Some(CodeAction {
        title: format!("declare reason `{name}`"),
        diagnostic: d.clone(),
        edits: vec![TextEdit {
            span: Span::new(at, at),
            text: insert,
        }],
        preferred: d.fix.is_none(),
    })
}
