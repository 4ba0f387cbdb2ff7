//! `textDocument/semanticTokens/full`.

use lsp_types::{
    SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokens, SemanticTokensLegend,
    SemanticTokensParams, SemanticTokensResult,
};
use mcpolicy_compiler::ide::{self, TokenKind, TokenModifier};

use super::Result;
use crate::world::World;

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

/// Every token, delta-encoded in the negotiated position encoding.
pub fn handle(world: &World, params: SemanticTokensParams) -> Result<Option<SemanticTokensResult>> {
    let snapshot = world.snapshot(&params.text_document.uri)?;
    let mut data = Vec::new();
    let (mut line, mut character) = (0, 0);
    for (span, kind, modifier) in ide::semantic_tokens(snapshot.db, snapshot.document.source) {
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
    Ok(Some(SemanticTokensResult::Tokens(SemanticTokens {
        result_id: None,
        data,
    })))
}
