//! `textDocument/semanticTokens/full`, `…/full/delta` and `…/range`.
//!
//! Each `full` or `full/delta` answer carries a result id, and the tokens it
//! stands for are kept (the last ones per document, in
//! [`World::semantic_tokens`]). A `full/delta` naming that id gets one edit:
//! the tokens between the longest common prefix and suffix of the old and
//! new lists. Tokens are encoded relative to the one before, so an edit
//! changes only the tokens it touched and the first one after it, and the
//! answer to a keystroke is a few tokens, not the file's tens of thousands.
//!
//! `full` and `full/delta` compute the tokens piece by piece
//! (`db::file_pieces`, cut where the incremental parse cuts the file): each
//! piece's tokens, positioned within the piece, are kept
//! ([`World::token_fragments`]) under its text, so an edit re-tokenises only
//! the piece it touched, and the answer is the kept pieces placed at the
//! lines they start on. A file's tokens are its pieces' tokens
//! (`ide::tokens_of`), so the answer equals the whole-file one that `range`
//! still computes (`lsp/tests/semantic_tokens.rs`, `lsp/tests/kept_features.rs`).

use lsp_types::{
    SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokens, SemanticTokensDelta,
    SemanticTokensDeltaParams, SemanticTokensEdit, SemanticTokensFullDeltaResult,
    SemanticTokensLegend, SemanticTokensParams, SemanticTokensRangeParams,
    SemanticTokensRangeResult, SemanticTokensResult,
};
use std::hash::{DefaultHasher, Hash, Hasher};

use lsp_types::Uri;
use mcpolicy_compiler::db;
use mcpolicy_compiler::ide::{self, TokenKind, TokenModifier};
use mcpolicy_compiler::line_index::{Encoding, LineIndex};
use mcpolicy_compiler::syntax::{SourceFile, Span};

use super::Result;
use crate::world::{Snapshot, TokenFragment, TokenFragments, World};

fn token_type(kind: TokenKind) -> SemanticTokenType {
    match kind {
        TokenKind::Keyword => SemanticTokenType::KEYWORD,
        TokenKind::Property => SemanticTokenType::PROPERTY,
        TokenKind::EnumMember => SemanticTokenType::ENUM_MEMBER,
        TokenKind::Number => SemanticTokenType::NUMBER,
        TokenKind::Unit => SemanticTokenType::TYPE,
        TokenKind::String => SemanticTokenType::STRING,
        TokenKind::Reason => SemanticTokenType::VARIABLE,
        TokenKind::Field => SemanticTokenType::PARAMETER,
        TokenKind::Comment => SemanticTokenType::COMMENT,
    }
}

/// The legend announced in the server's capabilities.
pub fn legend() -> SemanticTokensLegend {
    SemanticTokensLegend {
        token_types: TokenKind::ALL.iter().map(|k| token_type(*k)).collect(),
        token_modifiers: vec![SemanticTokenModifier::DECLARATION],
    }
}

/// The tokens overlapping `range` (every token when `None`), each encoded
/// relative to the one before it, the first relative to the document's
/// start, in the negotiated position encoding.
fn encode(snapshot: &Snapshot<'_>, range: Option<Span>) -> Vec<SemanticToken> {
    let mut data = Vec::new();
    let (mut line, mut character) = (0, 0);
    for (span, kind, modifier) in ide::semantic_tokens(snapshot.db, snapshot.document.source) {
        if let Some(range) = range
            && (span.end <= range.start || span.start >= range.end)
        {
            continue;
        }
        let start = snapshot.position(span.start);
        let end = snapshot.position(span.end);
        if end.line != start.line {
            continue; // tokens never span lines in this grammar; be safe anyway
        }
        let delta_line = start.line - line;
        let delta_start = if delta_line == 0 {
            start.character - character
        } else {
            start.character
        };
        data.push(SemanticToken {
            delta_line,
            delta_start,
            length: end.character - start.character,
            token_type: TokenKind::ALL.iter().position(|k| *k == kind).unwrap_or(0) as u32,
            token_modifiers_bitset: u32::from(modifier == Some(TokenModifier::Declaration)),
        });
        (line, character) = (start.line, start.character);
    }
    data
}

/// The tokens of a piece (`file` parsed from `text`, which starts at the
/// start of a line or, for the first piece, of the file), each as (line in
/// the piece, column, length, type, modifiers).
fn piece_tokens(text: &str, file: &SourceFile, encoding: Encoding) -> Vec<[u32; 5]> {
    let index = LineIndex::new(text);
    // An ASCII piece has the same columns in both encodings; UTF-8 counts
    // none.
    let encoding = if text.is_ascii() {
        Encoding::Utf8
    } else {
        encoding
    };
    let mut out = Vec::new();
    for (span, kind, modifier) in ide::tokens_of(text, file) {
        let start = index.line_column(text, span.start, encoding);
        let end = index.line_column(text, span.end, encoding);
        if end.line != start.line {
            continue; // as in `encode`
        }
        out.push([
            saturate(start.line),
            saturate(start.column),
            saturate(end.column - start.column),
            TokenKind::ALL.iter().position(|k| *k == kind).unwrap_or(0) as u32,
            u32::from(modifier == Some(TokenModifier::Declaration)),
        ]);
    }
    out
}

/// Every token of the document, encoded as [`encode`] does, from the
/// pieces' tokens: those of an unchanged piece are the ones kept from the
/// last call, the others are computed and kept for the next.
fn encode_pieces(world: &World, snapshot: &Snapshot<'_>, uri: &Uri) -> Vec<SemanticToken> {
    let pieces = db::file_pieces(snapshot.db, snapshot.document.source);
    let mut kept = world.token_fragments(uri);
    let mut now = TokenFragments::with_capacity(pieces.len());
    let mut data = Vec::new();
    let (mut line, mut character) = (0, 0);
    for &(start, item) in pieces {
        let text = item.text(snapshot.db);
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let key = hasher.finish();
        let fresh = || {
            let file = &db::parse_item(snapshot.db, item).parsed.file;
            piece_tokens(text, file, snapshot.encoding)
        };
        // A piece seen earlier in this file (an equal text) is already in
        // `now`; two texts of one hash keep the first.
        let collided;
        let tokens = match now.get(&key) {
            Some(fragment) if fragment.text == *text => &now[&key].tokens,
            Some(_) => {
                collided = fresh();
                &collided
            }
            None => {
                let fragment = match kept.remove(&key) {
                    Some(fragment) if fragment.text == *text => fragment,
                    _ => TokenFragment {
                        text: text.clone(),
                        tokens: fresh(),
                    },
                };
                &now.entry(key).or_insert(fragment).tokens
            }
        };
        let origin = snapshot.position(start);
        for &[piece_line, column, length, token_type, modifiers] in tokens {
            let at_line = origin.line.saturating_add(piece_line);
            let at_column = if piece_line == 0 {
                origin.character.saturating_add(column)
            } else {
                column
            };
            let delta_line = at_line - line;
            data.push(SemanticToken {
                delta_line,
                delta_start: if delta_line == 0 {
                    at_column - character
                } else {
                    at_column
                },
                length,
                token_type,
                token_modifiers_bitset: modifiers,
            });
            (line, character) = (at_line, at_column);
        }
    }
    world.keep_token_fragments(uri, now);
    data
}

/// The one edit that turns `old` into `new` (in the protocol's units: five
/// integers a token), or none when they are equal.
pub fn delta(old: &[SemanticToken], new: &[SemanticToken]) -> Vec<SemanticTokensEdit> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let removed = old.len() - prefix - suffix;
    let inserted = &new[prefix..new.len() - suffix];
    if removed == 0 && inserted.is_empty() {
        return Vec::new();
    }
    vec![SemanticTokensEdit {
        start: saturate(prefix * 5),
        delete_count: saturate(removed * 5),
        data: (!inserted.is_empty()).then(|| inserted.to_vec()),
    }]
}

/// A count as an LSP `uinteger`.
fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Every token, with a result id for a later `full/delta`.
pub fn handle(world: &World, params: SemanticTokensParams) -> Result<Option<SemanticTokensResult>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let data = encode_pieces(world, &snapshot, &params.text_document.uri);
    let result_id = world.keep_semantic_tokens(&params.text_document.uri, data.clone());
    Ok(Some(SemanticTokensResult::Tokens(SemanticTokens {
        result_id: Some(result_id),
        data,
    })))
}

/// The change since the tokens of `previousResultId`, or every token when
/// that result is no longer kept.
pub fn delta_handle(
    world: &World,
    params: SemanticTokensDeltaParams,
) -> Result<Option<SemanticTokensFullDeltaResult>> {
    let uri = &params.text_document.uri;
    let snapshot = world.snapshot(uri)?;
    let data = encode_pieces(world, &snapshot, uri);
    let previous = world.semantic_tokens(uri, &params.previous_result_id);
    let result_id = world.keep_semantic_tokens(uri, data.clone());
    Ok(Some(match previous {
        Some(old) => SemanticTokensFullDeltaResult::TokensDelta(SemanticTokensDelta {
            result_id: Some(result_id),
            edits: delta(&old, &data),
        }),
        None => SemanticTokensFullDeltaResult::Tokens(SemanticTokens {
            result_id: Some(result_id),
            data,
        }),
    }))
}

/// The tokens of a range (an editor asks for the visible lines first).
pub fn range_handle(
    world: &World,
    params: SemanticTokensRangeParams,
) -> Result<Option<SemanticTokensRangeResult>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let range = snapshot.span(params.range);
    Ok(Some(SemanticTokensRangeResult::Tokens(SemanticTokens {
        result_id: None,
        data: encode(&snapshot, Some(range)),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn token(n: u32) -> SemanticToken {
        SemanticToken {
            delta_line: n % 3,
            delta_start: n % 5,
            length: 1 + n % 2,
            token_type: n % 4,
            token_modifiers_bitset: 0,
        }
    }

    /// Applies edits as a client does: on the flat list of integers.
    fn apply(old: &[SemanticToken], edits: &[SemanticTokensEdit]) -> Vec<u32> {
        let mut flat: Vec<u32> = old
            .iter()
            .flat_map(|t| {
                [
                    t.delta_line,
                    t.delta_start,
                    t.length,
                    t.token_type,
                    t.token_modifiers_bitset,
                ]
            })
            .collect();
        for edit in edits.iter().rev() {
            let start = edit.start as usize;
            let end = start + edit.delete_count as usize;
            let data: Vec<u32> = edit
                .data
                .iter()
                .flatten()
                .flat_map(|t| {
                    [
                        t.delta_line,
                        t.delta_start,
                        t.length,
                        t.token_type,
                        t.token_modifiers_bitset,
                    ]
                })
                .collect();
            flat.splice(start..end, data);
        }
        flat
    }

    proptest! {
        /// The delta between any two token lists, applied to the first,
        /// gives the second.
        #[test]
        fn delta_applied_gives_the_new_tokens(
            old in prop::collection::vec(0u32..12, 0..60),
            new in prop::collection::vec(0u32..12, 0..60),
        ) {
            let old: Vec<SemanticToken> = old.into_iter().map(token).collect();
            let new: Vec<SemanticToken> = new.into_iter().map(token).collect();
            let edits = delta(&old, &new);
            prop_assert_eq!(apply(&old, &edits), apply(&new, &[]));
            prop_assert!(edits.len() <= 1);
        }
    }
}
