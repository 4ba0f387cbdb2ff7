//! `textDocument/formatting` and `textDocument/rangeFormatting`: the same
//! formatter as `mcpc fmt`.

use lsp_server::ErrorCode;
use lsp_types::{DocumentFormattingParams, DocumentRangeFormattingParams, TextEdit};
use mcpolicy_compiler::format::{self, FormatError};
use mcpolicy_compiler::syntax::Span;

use super::{ResponseError, Result};
use crate::world::{Snapshot, World};

/// One edit replacing the whole text (formatted from the tree the
/// database already holds), or none when it is already formatted.
/// A file with syntax errors is left as it is (the formatter refuses to
/// guess, so that format-on-save never garbles a half-written policy), and
/// the answer is an error saying which finding stops it, and where.
pub fn handle(world: &World, params: DocumentFormattingParams) -> Result<Option<Vec<TextEdit>>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let text = snapshot.text();
    let parsed = mcpolicy_compiler::db::parse_file(snapshot.db, snapshot.document.source);
    let formatted = format::format_parsed(parsed, text).map_err(|e| refusal(&snapshot, 0, &e))?;
    if formatted == text {
        return Ok(Some(Vec::new()));
    }
    Ok(Some(vec![TextEdit {
        range: snapshot.range(Span::new(0, text.len())),
        new_text: formatted,
    }]))
}

/// Formats the items that overlap the range: their text, from the first
/// one's start to the last one's end, formatted on its own, so that a
/// syntax error elsewhere in the file does not stop it. No item there: no
/// edit.
pub fn range(
    world: &World,
    params: DocumentRangeFormattingParams,
) -> Result<Option<Vec<TextEdit>>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let text = snapshot.text();
    let range = snapshot.span(params.range);
    let file = &mcpolicy_compiler::db::parse_file(snapshot.db, snapshot.document.source).file;
    let mut overlapping = file
        .items
        .iter()
        .filter(|item| item.span.start <= range.end && range.start <= item.span.end)
        .filter(|item| !(item.span.end == range.start && range.start != range.end));
    let Some(first) = overlapping.next() else {
        return Ok(Some(Vec::new()));
    };
    let last = overlapping.next_back().unwrap_or(first);
    let slice = Span::new(first.span.start, last.span.end);
    let original = &text[slice.start..slice.end];
    let mut formatted =
        format::format(original).map_err(|e| refusal(&snapshot, slice.start, &e))?;
    // The formatter ends a file with one line break; the items end before
    // theirs, which stays where it is.
    if !original.ends_with('\n') {
        while formatted.ends_with('\n') {
            formatted.pop();
        }
    }
    if formatted == original {
        return Ok(Some(Vec::new()));
    }
    Ok(Some(vec![TextEdit {
        range: snapshot.range(slice),
        new_text: formatted,
    }]))
}

/// The error answered when the formatter refuses: the first syntax
/// findings with their line and column (1-based, as `mcpc` prints them).
/// `base` is where the formatted text starts in the document.
fn refusal(snapshot: &Snapshot<'_>, base: usize, error: &FormatError) -> ResponseError {
    let shown: Vec<String> = error
        .diagnostics
        .iter()
        .take(3)
        .map(|d| {
            let at = snapshot.position(base + d.span.start);
            format!(
                "{}:{}: {} {}",
                at.line + 1,
                at.character + 1,
                d.code,
                d.message
            )
        })
        .collect();
    let more = error.diagnostics.len().saturating_sub(shown.len());
    let mut message = format!(
        "not formatted: the policy has {} syntax error{} (the formatter does not guess around them); {}",
        error.diagnostics.len(),
        if error.diagnostics.len() == 1 {
            ""
        } else {
            "s"
        },
        shown.join("; ")
    );
    if more > 0 {
        message.push_str(&format!("; and {more} more"));
    }
    ResponseError {
        code: ErrorCode::RequestFailed as i32,
        message,
        data: None,
    }
}
