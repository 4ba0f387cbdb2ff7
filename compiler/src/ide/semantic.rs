//! Semantic tokens: what each word of the file is, from the syntax tree.

use crate::db::{SourceText, parse_file};
use crate::syntax::*;

/// A token's kind, in the order of [`TokenKind::ALL`] (the legend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// Top-level keywords and `per`, `as`.
    Keyword,
    /// Statement keywords.
    Property,
    /// Enumerated values: `on`, `thisServer`, `day`, `forever`.
    EnumMember,
    /// Numbers.
    Number,
    /// Units and suffixes.
    Unit,
    /// String literals (server patterns, models, messages).
    String,
    /// Reason names.
    Reason,
    /// Identity field names.
    Field,
    /// Comments.
    Comment,
}

impl TokenKind {
    /// Every kind, in legend order.
    pub const ALL: [TokenKind; 9] = [
        TokenKind::Keyword,
        TokenKind::Property,
        TokenKind::EnumMember,
        TokenKind::Number,
        TokenKind::Unit,
        TokenKind::String,
        TokenKind::Reason,
        TokenKind::Field,
        TokenKind::Comment,
    ];
}

/// A token modifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenModifier {
    /// Where a reason is declared.
    Declaration,
}

/// Every token of the file, in source order, none overlapping.
pub fn semantic_tokens(
    db: &dyn salsa::Database,
    source: SourceText,
) -> Vec<(Span, TokenKind, Option<TokenModifier>)> {
    tokens_of(source.text(db), &parse_file(db, source).file)
}

/// The tokens of `file` parsed from `text`: a whole file, or one piece of
/// it (`db::file_pieces`, `db::parse_item`, spans relative to the piece).
/// Every token lies inside its item or comment, so a file's tokens are its
/// pieces' tokens, each shifted by the piece's offset, in piece order,
/// which lets an editor keep each piece's tokens while its text is
/// unchanged.
pub fn tokens_of(text: &str, file: &SourceFile) -> Vec<(Span, TokenKind, Option<TokenModifier>)> {
    let mut tokens = Tokens {
        text,
        out: Vec::new(),
    };
    for comment in &file.comments {
        tokens.push(comment.span, TokenKind::Comment);
    }
    for item in &file.items {
        if !matches!(item.kind, ItemKind::Bad(_)) {
            tokens.push(item.keyword, TokenKind::Keyword);
        }
        match &item.kind {
            ItemKind::Version(n) | ItemKind::ErrorCode(n) => tokens.push(n.span, TokenKind::Number),
            ItemKind::Protocol(revision) => tokens.push(revision.span, TokenKind::Number),
            ItemKind::Identity(fields) => {
                for field in fields {
                    tokens.push(field.span, TokenKind::Field);
                }
            }
            ItemKind::Reason(decl) => {
                tokens.out.push((
                    decl.name.span,
                    TokenKind::Reason,
                    Some(TokenModifier::Declaration),
                ));
                for stmt in &decl.body.stmts {
                    tokens.reason_stmt(stmt);
                }
            }
            ItemKind::Defaults(block) => tokens.block(block),
            ItemKind::Server(server) => {
                tokens.push(server.pattern.span, TokenKind::String);
                tokens.block(&server.body);
            }
            ItemKind::Bad(_) => {}
        }
    }
    let mut out = tokens.out;
    out.sort_by_key(|(span, _, _)| (span.start, span.end));
    // Editors reject overlapping tokens; keep the first of any overlap.
    let mut last_end = 0;
    out.retain(|(span, _, _)| {
        let keep = span.start >= last_end && !span.is_empty();
        if keep {
            last_end = span.end;
        }
        keep
    });
    out
}

struct Tokens<'a> {
    text: &'a str,
    out: Vec<(Span, TokenKind, Option<TokenModifier>)>,
}

impl Tokens<'_> {
    fn push(&mut self, span: Span, kind: TokenKind) {
        self.out.push((span, kind, None));
    }

    fn quantity(&mut self, q: &Quantity) {
        self.push(q.number.span, TokenKind::Number);
        if let Some(unit) = &q.unit {
            self.push(unit.span, TokenKind::Unit);
        }
    }

    /// A keyword the tree does not keep (`per`, `as`): the word in `between`.
    fn connective(&mut self, word: &str, between: Span) {
        let Some(slice) = self.text.get(between.start..between.end) else {
            return;
        };
        if let Some(at) = slice.find(word) {
            let start = between.start + at;
            self.push(Span::new(start, start + word.len()), TokenKind::Keyword);
        }
    }

    fn reason(&mut self, clause: &Option<Spanned<String>>, after: Span) {
        if let Some(reason) = clause {
            self.connective("as", Span::new(after.end, reason.span.start));
            self.push(reason.span, TokenKind::Reason);
        }
    }

    fn block(&mut self, block: &Block<Stmt>) {
        for stmt in &block.stmts {
            if let StmtKind::Bad(_) = stmt.kind {
                continue;
            }
            self.push(stmt.keyword, TokenKind::Property);
            let StmtKind::Known(_, args) = &stmt.kind else {
                continue;
            };
            match args {
                Args::Switch(v, r) => {
                    self.push(v.span, TokenKind::EnumMember);
                    self.reason(r, v.span);
                }
                Args::Word(v) => self.push(v.span, TokenKind::EnumMember),
                Args::Quantity(q, r) => {
                    self.quantity(q);
                    self.reason(r, q.span);
                }
                Args::Rate {
                    count,
                    window,
                    reason,
                } => {
                    self.quantity(count);
                    self.connective("per", Span::new(count.span.end, window.span.start));
                    self.quantity(window);
                    self.reason(reason, window.span);
                }
                Args::Budget {
                    limit,
                    metric,
                    window,
                    reason,
                } => {
                    self.quantity(limit);
                    self.push(metric.span, TokenKind::EnumMember);
                    let window_span = match window {
                        WindowSyntax::Calendar(unit) => {
                            self.push(unit.span, TokenKind::EnumMember);
                            unit.span
                        }
                        WindowSyntax::Rolling(q) => {
                            self.quantity(q);
                            q.span
                        }
                    };
                    self.connective("per", Span::new(metric.span.end, window_span.start));
                    self.reason(reason, window_span);
                }
                Args::Strings(strings) => {
                    for string in strings {
                        self.push(string.span, TokenKind::String);
                    }
                }
            }
        }
    }

    fn reason_stmt(&mut self, stmt: &ReasonStmt) {
        if let ReasonStmtKind::Bad(_) = stmt.kind {
            return;
        }
        self.push(stmt.keyword, TokenKind::Property);
        match &stmt.kind {
            ReasonStmtKind::Retryable(v) => self.push(v.span, TokenKind::EnumMember),
            ReasonStmtKind::Ttl(TtlSyntax::Duration(q)) => self.quantity(q),
            ReasonStmtKind::Ttl(TtlSyntax::Keyword(k)) => self.push(k.span, TokenKind::EnumMember),
            ReasonStmtKind::Message(s) => self.push(s.span, TokenKind::String),
            ReasonStmtKind::Code(n) => self.push(n.span, TokenKind::Number),
            ReasonStmtKind::Bad(_) => {}
        }
    }
}
