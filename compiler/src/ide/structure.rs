//! The file's structure for editor requests that read it whole: the
//! top-level items as workspace symbols, the highlights of the thing under
//! the cursor, nested selection ranges and comment blocks to fold.

use super::hover::word_at;
use super::navigation::references;
use super::symbols::symbol_index;
use crate::db::{SourceText, parse_file};
use crate::syntax::*;

/// A top-level item, for `workspace/symbol`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ItemSymbol {
    /// The name shown: a reason's name, a server's pattern, `defaults`, or
    /// a setting's keyword.
    pub name: String,
    /// What the item is.
    pub kind: super::SymbolKind,
    /// The item's name (or keyword) as written.
    pub span: Span,
}

/// Every top-level item of the file whose name matches `query`: its
/// characters in order, case-insensitively (`gha` matches `github-actions`);
/// an empty query matches every item.
pub fn item_symbols(db: &dyn salsa::Database, source: SourceText, query: &str) -> Vec<ItemSymbol> {
    let query: Vec<char> = query.to_lowercase().chars().collect();
    let matches = |name: &str| {
        let mut wanted = query.iter().peekable();
        for c in name.to_lowercase().chars() {
            if wanted.peek() == Some(&&c) {
                wanted.next();
            }
        }
        wanted.peek().is_none()
    };
    parse_file(db, source)
        .file
        .items
        .iter()
        .filter_map(|item| {
            let (name, kind, span) = match &item.kind {
                ItemKind::Reason(decl) => (
                    decl.name.value.clone(),
                    super::SymbolKind::Reason,
                    decl.name.span,
                ),
                ItemKind::Server(server) => (
                    server.pattern.value.clone(),
                    super::SymbolKind::Server,
                    server.pattern.span,
                ),
                ItemKind::Defaults(_) => (
                    "defaults".to_owned(),
                    super::SymbolKind::Defaults,
                    item.keyword,
                ),
                ItemKind::Version(_) => (
                    "mcpolicy".to_owned(),
                    super::SymbolKind::Setting,
                    item.keyword,
                ),
                ItemKind::Protocol(_) => (
                    "protocol".to_owned(),
                    super::SymbolKind::Setting,
                    item.keyword,
                ),
                ItemKind::ErrorCode(_) => (
                    "error_code".to_owned(),
                    super::SymbolKind::Setting,
                    item.keyword,
                ),
                ItemKind::Identity(_) => (
                    "identity".to_owned(),
                    super::SymbolKind::Setting,
                    item.keyword,
                ),
                ItemKind::Bad(_) => return None,
            };
            matches(&name).then_some(ItemSymbol { name, kind, span })
        })
        .collect()
}

/// A span to highlight, and whether it declares what it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Highlight {
    /// The text highlighted.
    pub span: Span,
    /// A reason's declaration (the others are uses).
    pub declaration: bool,
}

/// What to highlight for the cursor at `offset`: a reason's declarations
/// and uses; or, on a statement's keyword, that statement in every block.
pub fn highlights(db: &dyn salsa::Database, source: SourceText, offset: usize) -> Vec<Highlight> {
    let index = symbol_index(db, source);
    if index.reason_at(offset).is_some() {
        let declared: Vec<Span> = index.reason_defs.iter().map(|d| d.name_span).collect();
        return references(db, source, offset, true)
            .into_iter()
            .map(|span| Highlight {
                span,
                declaration: declared.contains(&span),
            })
            .collect();
    }
    let file = &parse_file(db, source).file;
    let blocks = || {
        file.items.iter().filter_map(|item| match &item.kind {
            ItemKind::Defaults(block) => Some(block),
            ItemKind::Server(server) => Some(&server.body),
            _ => None,
        })
    };
    let Some(statement) = blocks()
        .flat_map(|b| &b.stmts)
        .find(|s| s.keyword.contains(offset))
        .and_then(|s| s.kind.statement())
    else {
        return Vec::new();
    };
    blocks()
        .flat_map(|b| &b.stmts)
        .filter(|s| s.kind.statement() == Some(statement))
        .map(|s| Highlight {
            span: s.keyword,
            declaration: false,
        })
        .collect()
}

/// The spans around `offset` an editor's "expand selection" steps through,
/// innermost first, each strictly inside the next: the word, the
/// statement, the block's inside, the item, the whole file.
pub fn selection_ranges(db: &dyn salsa::Database, source: SourceText, offset: usize) -> Vec<Span> {
    let text = source.text(db);
    let offset = offset.min(text.len());
    let mut spans = vec![word_at(text, offset)];
    let file = &parse_file(db, source).file;
    if let Some(item) = file.items.iter().find(|i| i.span.contains(offset)) {
        let body = match &item.kind {
            ItemKind::Defaults(block) => Some((block.open, block.close, stmt_spans(block))),
            ItemKind::Server(server) => {
                if server.pattern.span.contains(offset) {
                    spans.push(server.pattern.span);
                }
                Some((
                    server.body.open,
                    server.body.close,
                    stmt_spans(&server.body),
                ))
            }
            ItemKind::Reason(decl) => Some((
                decl.body.open,
                decl.body.close,
                decl.body.stmts.iter().map(|s| s.span).collect(),
            )),
            _ => None,
        };
        if let Some((open, close, stmts)) = body {
            if let Some(stmt) = stmts.into_iter().find(|s| s.contains(offset)) {
                spans.push(stmt);
            }
            let inside_end = close.map_or(item.span.end, |c| c.start);
            if open.end <= offset && offset <= inside_end {
                let inside = &text[open.end..inside_end];
                let lead = inside.len() - inside.trim_start().len();
                let trail = inside.len() - inside.trim_end().len();
                spans.push(Span::new(open.end + lead, inside_end - trail));
            }
        }
        spans.push(item.span);
    }
    spans.push(Span::new(0, text.len()));
    // Keep a chain where each span holds the cursor and strictly grows.
    let mut chain: Vec<Span> = Vec::new();
    for span in spans {
        if !span.contains(offset) {
            continue;
        }
        match chain.last() {
            Some(last) if !(span.start <= last.start && last.end <= span.end) || span == *last => {}
            _ => chain.push(span),
        }
    }
    chain
}

fn stmt_spans(block: &Block<Stmt>) -> Vec<Span> {
    block.stmts.iter().map(|s| s.span).collect()
}

/// Blocks of two or more consecutive lines holding only a comment, from the
/// first comment's start to the last one's end, for folding.
pub fn comment_blocks(db: &dyn salsa::Database, source: SourceText) -> Vec<Span> {
    let text = source.text(db);
    // From each piece's tree: no whole-file tree for an editor's folds.
    let comments = crate::db::trees(db, source)
        .into_iter()
        .flat_map(|(start, tree)| tree.comments.iter().map(move |c| c.span.shifted(start)));
    let mut blocks = Vec::new();
    let mut current: Option<(Span, usize)> = None; // (block, comments in it)
    for comment in comments {
        let line_start = text[..comment.start]
            .rfind(['\n', '\r'])
            .map_or(0, |i| i + 1);
        let alone = text[line_start..comment.start].trim().is_empty();
        // On the line right after the block: only blanks and one line
        // break between them (`\r\n`, `\n` or a lone `\r`).
        let follows = current.is_some_and(|(block, _)| {
            let between = &text[block.end..comment.start];
            alone
                && between.trim().is_empty()
                && between.replace("\r\n", "\n").matches(['\n', '\r']).count() == 1
        });
        current = match current {
            Some((block, n)) if follows => Some((Span::new(block.start, comment.end), n + 1)),
            previous => {
                if let Some((block, n)) = previous
                    && n > 1
                {
                    blocks.push(block);
                }
                alone.then_some((comment, 1))
            }
        };
    }
    if let Some((block, n)) = current
        && n > 1
    {
        blocks.push(block);
    }
    blocks
}
