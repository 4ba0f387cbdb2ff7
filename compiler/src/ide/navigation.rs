//! Go to definition and find references, for reasons.

use super::symbols::symbol_index;
use crate::db::SourceText;
use crate::syntax::Span;

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

/// The name under the cursor if it can be renamed: a reason declared in
/// this file (a built-in the file does not redeclare has no declaration to
/// rename with its uses).
pub fn prepare_rename(db: &dyn salsa::Database, source: SourceText, offset: usize) -> Option<Span> {
    let index = symbol_index(db, source);
    let (name, span) = index.reason_at(offset)?;
    index.definition(name).map(|_| span)
}

/// Renames the reason at `offset` everywhere in the file: the spans to
/// replace with `new_name`, or why it cannot be done.
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
    if index.definition(name).is_none() {
        return Err(format!(
            "`{name}` is a built-in reason this policy does not declare"
        ));
    }
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
    if new_name != name
        && (index.definition(new_name).is_some()
            || mcpolicy_runtime::table::builtin::get(new_name).is_some())
    {
        return Err(format!("a reason named `{new_name}` already exists"));
    }
    Ok(references(db, source, offset, true))
}
