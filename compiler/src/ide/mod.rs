//! Editor features over the salsa database: hover, completion, navigation,
//! document symbols, inlay hints, semantic tokens and code actions. Each is
//! a function of the database, a [`SourceText`] and a byte offset (or
//! range) that returns plain data with byte spans; the language server only
//! converts spans into its positions. Nothing here knows about LSP.

mod actions;
mod completion;
pub mod docs;
mod hover;
mod inlay;
mod navigation;
mod render;
mod semantic;
pub mod settings;
mod structure;
mod symbols;

pub use actions::{CodeAction, TextEdit, code_actions, fix_all};
pub use completion::{CompletionItem, CompletionKind, completions};
pub use hover::{Hover, hover};
pub use inlay::{InlayHint, inlay_hints};
pub use navigation::{definition, prepare_rename, references, rename};
pub use render::{duration, effective_lines, size};
pub use semantic::{TokenKind, TokenModifier, semantic_tokens, tokens_of};
pub use structure::{
    Highlight, ItemSymbol, comment_blocks, highlights, item_symbols, selection_ranges,
};
pub use symbols::{
    ReasonDef, ReasonRef, Symbol, SymbolIndex, SymbolKind, document_symbols, folding_ranges,
    outline, symbol_index,
};

use mcpolicy_runtime::table::EffectiveBlock;

use crate::db::{SourceText, analyze, parse_file};
use crate::lower;
use crate::model::PolicyModel;
use crate::syntax::{Item, ItemKind, Span};

/// The checked meaning of the file, errors or not. A narrow query between
/// `analyze` (which changes with every span) and the effective blocks: it is
/// equal across layout-only edits, so salsa backdates it and nothing that
/// reads it re-runs.
#[salsa::tracked(returns(ref))]
pub fn policy_model(db: &dyn salsa::Database, source: SourceText) -> PolicyModel {
    analyze(db, source).model.clone()
}

/// The effective rules of `defaults` and of each `server` block (in source
/// order, one per `server` item), after defaults are merged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveBlocks {
    /// `defaults` over the built-in defaults.
    pub defaults: EffectiveBlock,
    /// Each server block's pattern and effective rules.
    pub servers: Vec<(String, EffectiveBlock)>,
}

/// Every block's effective rules, computed once per semantic change.
#[salsa::tracked(returns(ref))]
pub fn effective_blocks(db: &dyn salsa::Database, source: SourceText) -> EffectiveBlocks {
    let model = policy_model(db, source);
    EffectiveBlocks {
        defaults: lower::effective_defaults(model),
        servers: model
            .servers
            .iter()
            .map(|(pattern, block)| (pattern.clone(), lower::effective_server(model, block)))
            .collect(),
    }
}

/// The top-level item under `offset` and, for a `server` item, its index
/// among the file's server blocks.
pub(crate) fn item_at(
    db: &dyn salsa::Database,
    source: SourceText,
    offset: usize,
) -> Option<(&Item, Option<usize>)> {
    let file = &parse_file(db, source).file;
    let mut server_index = 0;
    for item in &file.items {
        let this_server = matches!(item.kind, ItemKind::Server(_)).then_some(server_index);
        if item.span.contains(offset) {
            return Some((item, this_server));
        }
        if this_server.is_some() {
            server_index += 1;
        }
    }
    None
}

/// Whether two spans share a byte, or touch when one is empty.
pub(crate) fn overlaps(a: Span, b: Span) -> bool {
    a.start <= b.end && b.start <= a.end
}

#[cfg(test)]
mod tests;
