//! `mcpc check --fix`: applies the certain fixes the findings carry
//! ([`crate::diagnostic::Fix`]), checks again, and repeats until no fix is
//! left or a round changes nothing. Two fixes that touch the same bytes (or
//! insert at the same place) are never applied together: the first in
//! source order goes in, the other waits for the next round's check, which
//! says whether it still applies. Only certain fixes are applied, never a
//! diagnostic's `choices` (`docs/spec/language.md`, "Fixes"); what is
//! written is laid out as `mcpc fmt` lays it out ([`fix_and_format`]).

use crate::diagnostic::{Diagnostic, Fix};

/// The most rounds of fix-and-check; each round applies at least one fix,
/// and a fix that keeps coming back is not certain after all.
pub const MAX_ROUNDS: usize = 16;

/// What applying fixes did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    /// The text with every applied fix.
    pub text: String,
    /// The fixes applied, by title, in the order applied.
    pub applied: Vec<String>,
}

/// The fixes of `diagnostics` that can be applied together: sorted by
/// position, duplicates (the same edit from two findings) once, and none
/// touching bytes another already touches.
pub fn compatible(diagnostics: &[Diagnostic]) -> Vec<&Fix> {
    let mut fixes: Vec<&Fix> = diagnostics.iter().filter_map(|d| d.fix.as_ref()).collect();
    fixes.sort_by_key(|f| (f.span.start, f.span.end));
    fixes.dedup_by(|b, a| a.span == b.span && a.replacement == b.replacement);
    let mut chosen: Vec<&Fix> = Vec::new();
    for fix in fixes {
        // Overlapping ranges, or two edits starting at one point (whose
        // order would be a guess).
        let clashes = chosen.last().is_some_and(|last| {
            fix.span.start < last.span.end || fix.span.start == last.span.start
        });
        if !clashes {
            chosen.push(fix);
        }
    }
    chosen
}

/// `text` with `fixes` applied; `None` when one of them does not fit the
/// text (a span outside it or inside a character), so nothing is written.
pub fn apply(text: &str, fixes: &[&Fix]) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for fix in fixes {
        if fix.span.start < at {
            return None;
        }
        out.push_str(text.get(at..fix.span.start)?);
        text.get(fix.span.start..fix.span.end)?;
        out.push_str(&fix.replacement);
        at = fix.span.end;
    }
    out.push_str(text.get(at..)?);
    Some(out)
}

/// Fixes `text` until no certain fix is left, checking it with `check`
/// (the caller's: `mcpc check` and the tests pass the compiler's).
pub fn fix_all(text: &str, check: impl Fn(&str) -> Vec<Diagnostic>) -> Fixed {
    let mut current = text.to_owned();
    let mut applied = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let diagnostics = check(&current);
        let fixes = compatible(&diagnostics);
        if fixes.is_empty() {
            break;
        }
        let Some(next) = apply(&current, &fixes) else {
            break;
        };
        if next == current {
            break;
        }
        applied.extend(fixes.iter().map(|f| f.title.clone()));
        current = next;
    }
    Fixed {
        text: current,
        applied,
    }
}

/// What `mcpc check --fix` writes: [`fix_all`], then, when a fix was
/// applied and the text has no syntax error left, the result in the
/// canonical layout, so that `mcpc fmt --check` passes on it. The layout is
/// kept only if it compiles to the same table as the fixed text (as `mcpc
/// fmt` refuses to write otherwise). A text no fix applies to is returned as
/// it is.
pub fn fix_and_format(text: &str, check: impl Fn(&str) -> Vec<Diagnostic>) -> Fixed {
    let mut fixed = fix_all(text, check);
    if fixed.applied.is_empty() {
        return fixed;
    }
    if let Ok(formatted) = crate::format::format(&fixed.text)
        && table_of(&formatted) == table_of(&fixed.text)
    {
        fixed.text = formatted;
    }
    fixed
}

fn table_of(text: &str) -> Option<String> {
    let db = crate::db::Database::default();
    let source = crate::db::SourceText::new(&db, String::new(), text.to_owned());
    crate::db::lower_file(&db, source)
        .as_ref()
        .map(mcpolicy_runtime::table::Table::to_json)
}
