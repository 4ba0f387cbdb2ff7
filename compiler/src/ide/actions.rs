//! Code actions: the certain fixes diagnostics carry (preferred, and in
//! "apply every certain fix"), the corrections they offer as choices (never
//! preferred, never in `fix_all`: `docs/spec/language.md`, "Fixes"), and
//! declaring an undeclared reason.

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
        if d.fix.is_some() {
            let (title, edits) = fix_edits(db, source, d);
            actions.push(CodeAction {
                title,
                diagnostic: d.clone(),
                edits,
                preferred: true,
            });
        }
        for choice in &d.choices {
            actions.push(CodeAction {
                title: choice.title.clone(),
                diagnostic: d.clone(),
                edits: vec![TextEdit {
                    span: choice.span,
                    text: choice.replacement.clone(),
                }],
                preferred: false,
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

/// The edits of a finding's certain fix, and its title. An invalid reason
/// name (E0412) is renamed everywhere it is written the same way: each
/// occurrence has its own finding with the same fix, and renaming one
/// alone would leave the others undeclared (E0401) or unused (W0410).
fn fix_edits(
    db: &dyn salsa::Database,
    source: SourceText,
    d: &Diagnostic,
) -> (String, Vec<TextEdit>) {
    let Some(fix) = &d.fix else {
        return (String::new(), Vec::new());
    };
    let text = source.text(db);
    let one = TextEdit {
        span: fix.span,
        text: fix.replacement.clone(),
    };
    if d.code != Code::E0412 {
        return (fix.title.clone(), vec![one]);
    }
    let written = text.get(fix.span.start..fix.span.end);
    let mut edits: Vec<TextEdit> = analyze(db, source)
        .diagnostics
        .iter()
        .filter(|other| other.code == Code::E0412)
        .filter_map(|other| other.fix.as_ref())
        .filter(|f| {
            f.replacement == fix.replacement && text.get(f.span.start..f.span.end) == written
        })
        .map(|f| TextEdit {
            span: f.span,
            text: f.replacement.clone(),
        })
        .collect();
    edits.sort_by_key(|e| (e.span.start, e.span.end));
    edits.dedup();
    let title = match edits.len() {
        0 | 1 => fix.title.clone(),
        n => format!("{} ({n} occurrences)", fix.title),
    };
    if edits.is_empty() {
        edits.push(one);
    }
    (title, edits)
}

/// Every certain fix of the file at once (`source.fixAll`): the edits of
/// each finding's fix, E0412 renames covering every occurrence, in source
/// order, an edit overlapping one already taken left out (the next run
/// offers it again on the fixed text).
pub fn fix_all(db: &dyn salsa::Database, source: SourceText) -> Vec<TextEdit> {
    let mut all: Vec<TextEdit> = analyze(db, source)
        .diagnostics
        .iter()
        .filter(|d| d.fix.is_some())
        .flat_map(|d| fix_edits(db, source, d).1)
        .collect();
    all.sort_by_key(|e| (e.span.start, e.span.end));
    all.dedup();
    let mut taken: Vec<TextEdit> = Vec::new();
    for edit in all {
        let clashes = taken.last().is_some_and(|last| {
            edit.span.start < last.span.end || (edit.span == last.span && edit.span.is_empty())
        });
        if !clashes {
            taken.push(edit);
        }
    }
    taken
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
