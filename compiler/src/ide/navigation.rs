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
