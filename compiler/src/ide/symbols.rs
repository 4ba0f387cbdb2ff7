//! The file's symbols: reason declarations and uses, and the outline.

use crate::db::{ItemText, SourceText, file_pieces, parse_file, parse_item};
use crate::syntax::*;

/// A `reason NAME { … }` declaration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReasonDef {
    /// The name.
    pub name: String,
    /// The name as written.
    pub name_span: Span,
    /// The whole declaration.
    pub span: Span,
}

/// A use of a reason: `as NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReasonRef {
    /// The name.
    pub name: String,
    /// The name as written.
    pub span: Span,
}

/// What an outline entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymbolKind {
    /// `mcpolicy`, `protocol`, `error_code`, `identity`.
    Setting,
    /// `reason NAME`.
    Reason,
    /// `defaults`.
    Defaults,
    /// `server "…"`.
    Server,
    /// A statement inside a block.
    Statement,
}

/// One entry of the document outline.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// The name shown.
    pub name: String,
    /// Extra text shown beside it.
    pub detail: Option<String>,
    /// What it is.
    pub kind: SymbolKind,
    /// The whole item.
    pub span: Span,
    /// The part to select when it is chosen (its name).
    pub selection: Span,
    /// Nested entries.
    pub children: Vec<Symbol>,
}

/// Reason declarations, reason uses and the outline of one file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SymbolIndex {
    /// Declarations in source order.
    pub reason_defs: Vec<ReasonDef>,
    /// Uses in source order.
    pub reason_refs: Vec<ReasonRef>,
    /// The outline.
    pub outline: Vec<Symbol>,
}

impl SymbolIndex {
    /// The first declaration of `name`.
    pub fn definition(&self, name: &str) -> Option<&ReasonDef> {
        self.reason_defs.iter().find(|d| d.name == name)
    }

    /// The reason name written at `offset`, declared or used.
    pub fn reason_at(&self, offset: usize) -> Option<(&str, Span)> {
        self.reason_defs
            .iter()
            .map(|d| (d.name.as_str(), d.name_span))
            .chain(self.reason_refs.iter().map(|r| (r.name.as_str(), r.span)))
            .find(|(_, span)| span.contains(offset))
    }
}

/// The symbol index, recomputed only when the syntax tree changes. One
/// pass over the items, linear in the file.
#[salsa::tracked(returns(ref))]
pub fn symbol_index(db: &dyn salsa::Database, source: SourceText) -> SymbolIndex {
    let text = source.text(db);
    let file = &parse_file(db, source).file;
    let mut index = SymbolIndex::default();
    index_items(text, &file.items, &mut index);
    index
}

/// The outline of `items` parsed from `text` (spans relative to `text`):
/// a whole file, or one piece of it (`db::file_pieces`, `db::parse_item`),
/// which an editor can keep and re-send while the piece is unchanged.
pub fn outline(text: &str, items: &[Item]) -> Vec<Symbol> {
    let mut index = SymbolIndex::default();
    index_items(text, items, &mut index);
    index.outline
}

/// Adds the declarations, uses and outline entries of `items` to `index`.
fn index_items(text: &str, items: &[Item], index: &mut SymbolIndex) {
    for item in items {
        let setting = |name: &str, detail: String| Symbol {
            name: name.to_owned(),
            detail: Some(detail),
            kind: SymbolKind::Setting,
            span: item.span,
            selection: item.keyword,
            children: Vec::new(),
        };
        match &item.kind {
            ItemKind::Version(v) => index.outline.push(setting("mcpolicy", v.text.clone())),
            ItemKind::Protocol(p) => index.outline.push(setting("protocol", p.value.clone())),
            ItemKind::ErrorCode(c) => index.outline.push(setting("error_code", c.text.clone())),
            ItemKind::Identity(fields) => {
                let names: Vec<&str> = fields.iter().map(|f| f.value.as_str()).collect();
                index.outline.push(setting("identity", names.join(", ")));
            }
            ItemKind::Reason(decl) => {
                index.reason_defs.push(ReasonDef {
                    name: decl.name.value.clone(),
                    name_span: decl.name.span,
                    span: item.span,
                });
                index.outline.push(Symbol {
                    name: decl.name.value.clone(),
                    detail: Some("reason".to_owned()),
                    kind: SymbolKind::Reason,
                    span: item.span,
                    selection: decl.name.span,
                    children: decl
                        .body
                        .stmts
                        .iter()
                        .filter(|s| !matches!(s.kind, ReasonStmtKind::Bad(_)))
                        .map(|s| statement(text, s.kind.keyword(), s.keyword, s.span))
                        .collect(),
                });
            }
            ItemKind::Defaults(block) => {
                collect_refs(block, &mut index.reason_refs);
                index.outline.push(Symbol {
                    name: "defaults".to_owned(),
                    detail: None,
                    kind: SymbolKind::Defaults,
                    span: item.span,
                    selection: item.keyword,
                    children: statements(text, block),
                });
            }
            ItemKind::Server(server) => {
                collect_refs(&server.body, &mut index.reason_refs);
                index.outline.push(Symbol {
                    name: server.pattern.value.clone(),
                    detail: Some("server".to_owned()),
                    kind: SymbolKind::Server,
                    span: item.span,
                    selection: server.pattern.span,
                    children: statements(text, &server.body),
                });
            }
            ItemKind::Bad(_) => {}
        }
    }
}

/// A statement's entry: its keyword, and as detail its value as written
/// (`4096`, `30 per 1m as acme.slow`), spaces between words made single.
fn statement(text: &str, keyword: &str, keyword_span: Span, span: Span) -> Symbol {
    let value = without_comment(text.get(keyword_span.end..span.end).unwrap_or_default());
    let detail = value.split_whitespace().collect::<Vec<_>>().join(" ");
    Symbol {
        name: keyword.to_owned(),
        detail: (!detail.is_empty()).then_some(detail),
        kind: SymbolKind::Statement,
        span,
        selection: keyword_span,
        children: Vec::new(),
    }
}

/// `value` up to a `#` comment (a `#` inside a string is not one).
fn without_comment(value: &str) -> &str {
    let (mut in_string, mut escaped) = (false, false);
    for (i, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '#' if !in_string => return &value[..i],
            _ => {}
        }
    }
    value
}

fn statements(text: &str, block: &Block<Stmt>) -> Vec<Symbol> {
    block
        .stmts
        .iter()
        .filter(|s| !matches!(s.kind, StmtKind::Bad(_)))
        .map(|s| statement(text, s.kind.keyword(), s.keyword, s.span))
        .collect()
}

/// The `as` clause of a statement, if it has one.
pub(crate) fn as_clause(kind: &StmtKind) -> Option<&Spanned<String>> {
    match kind {
        StmtKind::Known(_, args) => args.reason(),
        StmtKind::Bad(_) => None,
    }
}

fn collect_refs(block: &Block<Stmt>, refs: &mut Vec<ReasonRef>) {
    refs.extend(block.stmts.iter().filter_map(|s| {
        as_clause(&s.kind).map(|r| ReasonRef {
            name: r.value.clone(),
            span: r.span,
        })
    }));
}

/// The outline of the file.
pub fn document_symbols(db: &dyn salsa::Database, source: SourceText) -> &[Symbol] {
    &symbol_index(db, source).outline
}

/// The blocks an editor can fold: every `reason`, `defaults` and `server`
/// item (the editor drops the ones on a single line). Piece by piece
/// (`db::file_pieces`): an item's outline depends on its own text alone,
/// so an edit recomputes the folds of the piece it touched and the others
/// are only shifted; equal to the whole file's outline
/// (`compiler/src/ide/tests.rs`).
pub fn folding_ranges(db: &dyn salsa::Database, source: SourceText) -> Vec<Span> {
    file_pieces(db, source)
        .iter()
        .flat_map(|&(start, item)| {
            piece_folds(db, item)
                .iter()
                .map(move |span| span.shifted(start))
        })
        .collect()
}

/// The folds of one piece, spans relative to the piece.
#[salsa::tracked(returns(ref))]
fn piece_folds<'db>(db: &'db dyn salsa::Database, item: ItemText<'db>) -> Vec<Span> {
    let text = item.text(db);
    outline(text, &parse_item(db, item).parsed.file.items)
        .into_iter()
        .filter(|s| s.kind != SymbolKind::Setting)
        .map(|s| s.span)
        .collect()
}
