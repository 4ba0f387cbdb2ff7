//! `textDocument/documentSymbol`: servers, reasons, defaults and settings,
//! each block with its statements (their values as detail).
//!
//! An editor asks for the outline after every edit, and on a large policy
//! the answer is large (1.8 MB of JSON for 10,000 lines). So it is built
//! piece by piece (`db::file_pieces`: the top-level items, cut where the
//! incremental parse cuts them), and each piece's JSON is kept
//! ([`World::symbol_fragments`]) under its text and the line it starts on:
//! an edit that keeps the line count re-encodes only the piece it touched,
//! and the answer is the kept pieces joined. Nothing is computed for the
//! whole file but its cut.

use std::hash::{DefaultHasher, Hash, Hasher};

use lsp_types::{DocumentSymbol, DocumentSymbolParams, Position, Range, SymbolKind};
use mcpolicy_compiler::db;
use mcpolicy_compiler::ide::{self, Symbol};
use mcpolicy_compiler::line_index::{Encoding, LineIndex};
use mcpolicy_compiler::syntax::Span;

use super::Result;
use crate::world::{Fragment, Fragments, World};

/// The outline, as the JSON text of a `DocumentSymbol[]` (built from
/// serde_json's output, so valid JSON; not parsed again on stdio).
pub fn handle(world: &World, params: DocumentSymbolParams) -> Result<String> {
    let uri = &params.text_document.uri;
    let snapshot = world.snapshot(uri)?;
    let pieces = db::file_pieces(snapshot.db, snapshot.document.source);
    let mut kept = world.symbol_fragments(uri);
    let mut now = Fragments::with_capacity(pieces.len());
    let mut order = Vec::with_capacity(pieces.len());
    for &(start, item) in pieces {
        let text = item.text(snapshot.db);
        let line = snapshot.position(start).line;
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let key = (hasher.finish(), line);
        let fragment = match kept.remove(&key) {
            Some(fragment) if fragment.text == *text => fragment,
            _ => {
                let parsed = &db::parse_item(snapshot.db, item).parsed.file;
                Fragment {
                    text: text.clone(),
                    json: encode(
                        text,
                        line,
                        &ide::outline(text, &parsed.items),
                        world.encoding,
                    ),
                }
            }
        };
        order.push(key);
        now.insert(key, fragment);
    }
    // Joined into one allocation of the final size, with room for the
    // transport to wrap it without a copy.
    let fragments: Vec<&str> = order
        .iter()
        .filter_map(|key| now.get(key))
        .map(|fragment| fragment.json.as_str())
        .filter(|json| !json.is_empty())
        .collect();
    let size = fragments.iter().map(|json| json.len() + 1).sum::<usize>() + 2;
    let mut json = String::with_capacity(crate::transport::RAW_TEXT_HEADROOM + size);
    json.push('[');
    for (i, fragment) in fragments.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str(fragment);
    }
    json.push(']');
    world.keep_symbol_fragments(uri, now);
    Ok(json)
}

/// The JSON of `symbols` (spans relative to `text`, a piece starting at
/// the start of line `line`), comma-separated, without brackets.
fn encode(text: &str, line: u32, symbols: &[Symbol], encoding: Encoding) -> String {
    let index = LineIndex::new(text);
    // An ASCII piece has the same columns in both encodings; UTF-8 counts
    // none.
    let encoding = if text.is_ascii() {
        Encoding::Utf8
    } else {
        encoding
    };
    let position = |offset: usize| {
        let at = index.line_column(text, offset, encoding);
        Position::new(line.saturating_add(saturate(at.line)), saturate(at.column))
    };
    let range = |span: Span| Range::new(position(span.start), position(span.end));
    let mut out = Vec::new();
    for (i, symbol) in symbols.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Serialising these types into a Vec does not fail.
        let _ = serde_json::to_writer(&mut out, &convert(&range, symbol));
    }
    // serde_json writes UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// A count as an LSP `uinteger`, the largest one if it does not fit.
fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[allow(deprecated)] // `deprecated` is a required field of the struct.
fn convert(range: &dyn Fn(Span) -> Range, symbol: &Symbol) -> DocumentSymbol {
    DocumentSymbol {
        name: symbol.name.clone(),
        detail: symbol.detail.clone(),
        kind: match symbol.kind {
            ide::SymbolKind::Setting => SymbolKind::CONSTANT,
            ide::SymbolKind::Reason => SymbolKind::ENUM_MEMBER,
            ide::SymbolKind::Defaults => SymbolKind::NAMESPACE,
            ide::SymbolKind::Server => SymbolKind::MODULE,
            ide::SymbolKind::Statement => SymbolKind::PROPERTY,
        },
        tags: None,
        deprecated: None,
        range: range(symbol.span),
        selection_range: range(symbol.selection),
        children: (!symbol.children.is_empty())
            .then(|| symbol.children.iter().map(|c| convert(range, c)).collect()),
    }
}
