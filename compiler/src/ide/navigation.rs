//! Go to definition and find references, for reasons.

use mcpolicy_runtime::table::builtin;

use super::symbols::symbol_index;
use crate::db::{SourceText, parse_file};
use crate::syntax::{Block, ItemKind, ReasonStmtKind, Span, Stmt, StmtKind};

/// The declaration of the reason written at `offset`: the span of the name
/// under the cursor and the declared name's span. A built-in reason the
/// file does not redeclare has no definition in the file.
pub fn definition(
    db: &dyn salsa::Database,
    source: SourceText,
    offset: usize,
) -> Option<(Span, Span)> {
    let index = symbol_index(db, source);
    let (name, origin) = index.reason_at(offset)?;
    let def = index.definition(name)?;
    Some((origin, def.name_span))
}

/// Every place the reason at `offset` is written: its uses, and its
/// declarations when `include_declaration`.
pub fn references(
    db: &dyn salsa::Database,
    source: SourceText,
    offset: usize,
    include_declaration: bool,
) -> Vec<Span> {
    let index = symbol_index(db, source);
    let Some((name, _)) = index.reason_at(offset) else {
        return Vec::new();
    };
    let mut spans: Vec<Span> = index
        .reason_defs
        .iter()
        .filter(|d| include_declaration && d.name == name)
        .map(|d| d.name_span)
        .chain(
            index
                .reason_refs
                .iter()
                .filter(|r| r.name == name)
                .map(|r| r.span),
        )
        .collect();
    spans.sort();
    spans
}

/// What a rename at `offset` would rename: `None` when no reason name is
/// there (nothing to rename), `Err` with the reason the editor shows when
/// there is one but renaming it would change the policy's meaning or miss
/// some of its uses, and the name's span otherwise. `prepareRename` and
/// `rename` both go through this, so they always agree.
pub fn prepare_rename(
    db: &dyn salsa::Database,
    source: SourceText,
    offset: usize,
) -> Option<Result<Span, String>> {
    let index = symbol_index(db, source);
    let (name, span) = index.reason_at(offset)?;
    Some(renameable(db, source, name).map(|()| span))
}

/// Why the reason `name` cannot be renamed, if it cannot.
fn renameable(db: &dyn salsa::Database, source: SourceText, name: &str) -> Result<(), String> {
    let index = symbol_index(db, source);
    if builtin::get(name).is_some() {
        // `rate` and the other statements produce a built-in reason by its
        // name whatever the file declares: renaming the declaration would
        // leave them producing the built-in, with other properties.
        return Err(format!(
            "`{name}` is a built-in reason: the statements that deny with it produce it by \
             this name, so a new name would change what the policy does. To give a denial a \
             reason of your own, declare one (like `acme.{}`) and name it with `as`",
            name.rsplit('.').next().unwrap_or(name)
        ));
    }
    if index.definition(name).is_none() {
        return Err(format!(
            "`{name}` is not declared in this file, so there is no declaration to rename \
             with its uses"
        ));
    }
    if let Some(line) = unread_use(db, source, name) {
        return Err(format!(
            "`{name}` is also written on line {line}, in text that does not parse; fix the \
             syntax error there first, so that every use is renamed"
        ));
    }
    Ok(())
}

/// The first line (1-based) where `name` is written as a whole word inside
/// text the parser could not read (a bad item or statement), outside
/// comments: a use the symbol index cannot see.
fn unread_use(db: &dyn salsa::Database, source: SourceText, name: &str) -> Option<usize> {
    let text = source.text(db);
    let file = &parse_file(db, source).file;
    let mut unread: Vec<Span> = Vec::new();
    for item in &file.items {
        match &item.kind {
            ItemKind::Bad(_) => unread.push(item.span),
            ItemKind::Defaults(block) => bad_stmts(block, &mut unread),
            ItemKind::Server(server) => bad_stmts(&server.body, &mut unread),
            ItemKind::Reason(decl) => unread.extend(
                decl.body
                    .stmts
                    .iter()
                    .filter(|s| matches!(s.kind, ReasonStmtKind::Bad(_)))
                    .map(|s| s.span),
            ),
            _ => {}
        }
    }
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    for span in unread {
        let Some(within) = text.get(span.start..span.end) else {
            continue;
        };
        for (at, _) in within.match_indices(name) {
            let start = span.start + at;
            let end = start + name.len();
            let whole = !text[..start].chars().next_back().is_some_and(is_name)
                && !text[end..].chars().next().is_some_and(is_name);
            let commented = file
                .comments
                .iter()
                .any(|c| c.span.start <= start && end <= c.span.end);
            if whole && !commented {
                return Some(text[..start].matches('\n').count() + 1);
            }
        }
    }
    None
}

fn bad_stmts(block: &Block<Stmt>, out: &mut Vec<Span>) {
    out.extend(
        block
            .stmts
            .iter()
            .filter(|s| matches!(s.kind, StmtKind::Bad(_)))
            .map(|s| s.span),
    );
}

/// Renames the reason at `offset` everywhere in the file: the spans to
/// replace with `new_name`, or why it cannot be done (the editor shows it).
pub fn rename(
    db: &dyn salsa::Database,
    source: SourceText,
    offset: usize,
    new_name: &str,
) -> Result<Vec<Span>, String> {
    let index = symbol_index(db, source);
    let Some((name, _)) = index.reason_at(offset) else {
        return Err("only reasons can be renamed".to_owned());
    };
    renameable(db, source, name)?;
    let valid = !new_name.is_empty()
        && new_name.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if !valid {
        return Err(format!(
            "`{new_name}` is not a reason name (like `acme.hourly_cap`)"
        ));
    }
    if !new_name.contains('.') {
        return Err(format!(
            "`{new_name}` has no namespace: a declared reason's name is dotted, like \
             `acme.{new_name}` (E0406)"
        ));
    }
    if new_name != name
        && (index.definition(new_name).is_some() || builtin::get(new_name).is_some())
    {
        return Err(format!("a reason named `{new_name}` already exists"));
    }
    if new_name.starts_with("policy.") || new_name.starts_with("user.") {
        return Err(format!(
            "`{new_name}`: the `policy.` and `user.` namespaces are reserved for built-in \
             reasons (E0405); use your own, like `acme.{}`",
            new_name.rsplit('.').next().unwrap_or(new_name)
        ));
    }
    Ok(references(db, source, offset, true))
}
