//! `textDocument/formatting`: the same formatter as `mcpc fmt`.

use lsp_types::{DocumentFormattingParams, TextEdit};
use mcpolicy_compiler::format;
use mcpolicy_compiler::syntax::Span;

use super::Result;
use crate::world::World;

/// One edit replacing the whole text (formatted from the tree the
/// database already holds), or none when it is already formatted.
/// A file with syntax errors is left as it is (the formatter refuses to
/// guess), so that format-on-save never garbles a half-written policy.
pub fn handle(world: &World, params: DocumentFormattingParams) -> Result<Option<Vec<TextEdit>>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let text = snapshot.text();
    let parsed = mcpolicy_compiler::db::parse_file(snapshot.db, snapshot.document.source);
    let Ok(formatted) = format::format_parsed(parsed, text) else {
        return Ok(None);
    };
    if formatted == text {
        return Ok(Some(Vec::new()));
    }
    Ok(Some(vec![TextEdit {
        range: snapshot.range(Span::new(0, text.len())),
        new_text: formatted,
    }]))
}
