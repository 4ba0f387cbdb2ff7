//! From source text to the typed syntax tree. The parser never fails: text
//! the grammar cannot read becomes a `Bad` node that the checker reports.

use mcpolicy_grammar::{PolicyParser, Rule};
use pest::Parser;
use pest::iterators::Pair;

use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::statements::Shape;
use crate::syntax::*;

/// The tree and the findings made while building it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Parsed {
    /// The syntax tree.
    pub file: SourceFile,
    /// Lexical findings (bad escapes, control characters).
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses a policy, the whole text in one pest run. The salsa database
/// parses item by item instead ([`item_starts`], [`parse_chunk`],
/// [`assemble`]); both give equal trees and findings (tested in
/// `compiler/tests/incremental.rs`), and this function is the reference.
pub fn parse(text: &str) -> Parsed {
    parse_chunk(text).parsed
}

/// One piece of a file parsed on its own, spans relative to its first byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ChunkParse {
    /// The piece's items, comments and findings. The findings are the
    /// control characters first, then the rest in the builder's order.
    pub parsed: Parsed,
    /// How many of `parsed.diagnostics` are control-character findings.
    pub controls: usize,
}

/// Parses a piece of a file (or a whole file) on its own.
pub fn parse_chunk(text: &str) -> ChunkParse {
    let mut builder = Builder::default();
    builder.control_characters(text);
    let controls = builder.diagnostics.len();
    match PolicyParser::parse(Rule::file, text) {
        Ok(mut pairs) => {
            if let Some(file) = pairs.next() {
                for pair in file.into_inner() {
                    builder.top(pair);
                }
            }
        }
        // The grammar accepts every input by construction; this is a guard
        // against a grammar bug, reported rather than panicking.
        Err(error) => {
            let at = match error.location {
                pest::error::InputLocation::Pos(p) => p,
                pest::error::InputLocation::Span((s, _)) => s,
            };
            builder.diagnostics.push(
                Diagnostic::new(
                    Code::E0001,
                    Span::new(at, at),
                    "the grammar could not read the file",
                    "here",
                )
                .note(format!(
                    "internal parser error: {}",
                    error.variant.message()
                )),
            );
        }
    }
    builder.comments.sort_by_key(|c| c.span.start);
    ChunkParse {
        parsed: Parsed {
            file: SourceFile {
                items: builder.items,
                comments: builder.comments,
            },
            diagnostics: builder.diagnostics,
        },
        controls,
    }
}

/// Where the text can be cut into pieces that parse on their own exactly as
/// they do inside the whole file: the first offset is always 0, and each
/// further one starts a line at which the whole-file parser is certainly
/// between two top-level items.
///
/// Why a cut at `p` is safe. Only two things in the grammar run across a
/// line break: the `sep` of the top-level and block loops, and the
/// `brace_run` of a `bad_item`, which reads from a `{` to the first `}`
/// whatever lies between (strings and comments included). So at the start
/// of a line the parser is in the top-level loop, in a block's loop, or in a
/// `brace_run`. A cut is made only where
///
/// - the last `{` or `}` byte before `p` (anywhere: in a string, a comment,
///   a bad item) is not a `{`, so every `{` before `p` has a `}` after it and
///   before `p`, and no `brace_run` can reach `p`; and
/// - the line starts, in its first column, with what the grammar's
///   `top_start` matches (`mcpolicy`, `protocol`, `error_code`, `identity`,
///   `reason`, `defaults` as whole words, or `server` then blanks and `"`).
///   A block's loop cannot read that line as a statement (`bad_stmt`
///   refuses it), so an unclosed block ends there through `&top_start`,
///   just as it ends through `&EOI` when the piece is parsed alone; with no
///   blank before the keyword, no implicit whitespace is skipped either way.
///
/// So at `p` the whole-file parser starts a top-level item, as the parser
/// of the piece does at its start; and nothing read before `p` looks past
/// the line break that ends the piece (lookaheads read at most to the end
/// of their line), so each piece's tree is the whole file's tree for it.
/// Unbalanced braces only make the pieces larger: after a `{` left open,
/// nothing is cut until a `}`.
///
/// Any subset of these boundaries is safe too, and not every one is used: a
/// piece costs the database about a kilobyte (an interned text, a memo, a
/// second copy of its tree), which a file of a million one-line items would
/// otherwise pay a million times. A boundary is cut when the item before it
/// has at least [`SMALL_ITEM`] bytes, or else when a hash of its own first
/// line picks it (one in [`SMALL_RUN`]), so a run of small items becomes
/// pieces of about that many items. Both tests read only the text between
/// the previous boundary and the end of this one's first line, so an edit
/// moves no cut far from itself and the pieces after it are reused.
pub fn item_starts(text: &str) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut starts = vec![0];
    let mut previous = 0;
    let mut open = false;
    for (i, &b) in bytes.iter().enumerate() {
        let line_start = match b {
            b'{' => {
                open = true;
                continue;
            }
            b'}' => {
                open = false;
                continue;
            }
            b'\n' => true,
            b'\r' => bytes.get(i + 1) != Some(&b'\n'),
            _ => false,
        };
        // `{`, `}`, `\n` and `\r` never occur inside a UTF-8 sequence, so
        // `i + 1` after one of the last two is a character boundary.
        let p = i + 1;
        if line_start && !open && p < bytes.len() && starts_item(&bytes[p..]) {
            if p - previous >= SMALL_ITEM || first_line_hash(&bytes[p..]).is_multiple_of(SMALL_RUN)
            {
                starts.push(p);
            }
            previous = p;
        }
    }
    starts
}

/// An item this long or longer ends its own piece (see [`item_starts`]).
pub const SMALL_ITEM: usize = 64;
/// Smaller items are grouped, about this many to a piece.
pub const SMALL_RUN: u64 = 8;

/// FNV-1a of the first line of `rest` (at most 80 bytes of it).
fn first_line_hash(rest: &[u8]) -> u64 {
    rest.iter()
        .take(80)
        .take_while(|&&b| b != b'\n' && b != b'\r')
        .fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
            (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Whether the grammar's `top_start` matches at the start of `rest`.
fn starts_item(rest: &[u8]) -> bool {
    let word = |kw: &[u8]| {
        rest.starts_with(kw)
            && rest
                .get(kw.len())
                .is_none_or(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
    };
    const KEYWORDS: [&[u8]; 6] = [
        b"mcpolicy",
        b"protocol",
        b"error_code",
        b"identity",
        b"reason",
        b"defaults",
    ];
    if KEYWORDS.iter().any(|kw| word(kw)) {
        return true;
    }
    if !word(b"server") {
        return false;
    }
    // `kw_server ~ WHITESPACE* ~ "\""`: blanks (space, tab, U+FEFF) between.
    // The implicit COMMENT could also be skipped there, but a comment runs
    // to the end of the line, where no `"` can follow.
    let mut after = &rest[b"server".len()..];
    loop {
        if let Some(tail) = after
            .strip_prefix(b" ")
            .or_else(|| after.strip_prefix(b"\t"))
        {
            after = tail;
        } else if let Some(tail) = after.strip_prefix("\u{FEFF}".as_bytes()) {
            after = tail;
        } else {
            return after.first() == Some(&b'"');
        }
    }
}

/// A file's tree from its pieces, each given with the offset it starts at:
/// spans shifted to the whole text, the control-character findings of all
/// pieces before the other findings, as [`parse`] orders them.
pub fn assemble(pieces: &[(usize, &ChunkParse)]) -> Parsed {
    assemble_with(pieces, &|_, _| true)
}

/// [`assemble`], except that a `defaults` or `server` block keeps its
/// statements only when `keep_statements` (given the piece and the item,
/// spans in the piece) says so: the rest are copied with their `{`, `}`
/// and header alone. For a reader that takes each block's statements from
/// the piece instead (the checker's file-level rules, `db::analyze`):
/// copying them is most of the cost of a whole-file tree.
pub fn assemble_with(
    pieces: &[(usize, &ChunkParse)],
    keep_statements: &dyn Fn(&ChunkParse, &Item) -> bool,
) -> Parsed {
    let mut file = SourceFile {
        items: Vec::with_capacity(pieces.iter().map(|(_, p)| p.parsed.file.items.len()).sum()),
        comments: Vec::with_capacity(
            pieces
                .iter()
                .map(|(_, p)| p.parsed.file.comments.len())
                .sum(),
        ),
    };
    let mut diagnostics = Vec::new();
    for &(offset, piece) in pieces {
        file.items
            .extend(piece.parsed.file.items.iter().map(|item| {
                let mut item = if keep_statements(piece, item) {
                    item.clone()
                } else {
                    without_statements(item)
                };
                item.shift(offset);
                item
            }));
        file.comments
            .extend(piece.parsed.file.comments.iter().cloned().map(|mut c| {
                c.shift(offset);
                c
            }));
        diagnostics.extend(shifted(&piece.parsed.diagnostics[..piece.controls], offset));
    }
    for &(offset, piece) in pieces {
        diagnostics.extend(shifted(&piece.parsed.diagnostics[piece.controls..], offset));
    }
    Parsed { file, diagnostics }
}

/// `item`, with no statements if it is a `defaults` or `server` block.
fn without_statements(item: &Item) -> Item {
    let bare = |body: &Block<Stmt>| Block {
        stmts: Vec::new(),
        open: body.open,
        close: body.close,
    };
    let kind = match &item.kind {
        ItemKind::Defaults(body) => ItemKind::Defaults(bare(body)),
        ItemKind::Server(server) => ItemKind::Server(ServerDecl {
            pattern: server.pattern.clone(),
            body: bare(&server.body),
        }),
        other => other.clone(),
    };
    Item {
        kind,
        keyword: item.keyword,
        span: item.span,
    }
}

fn shifted(diagnostics: &[Diagnostic], offset: usize) -> impl Iterator<Item = Diagnostic> + '_ {
    diagnostics.iter().cloned().map(move |mut d| {
        d.shift(offset);
        d
    })
}

/// [`parse`] item by item, without a database: [`item_starts`], then
/// [`parse_chunk`] per piece, then [`assemble`].
pub fn parse_by_items(text: &str) -> Parsed {
    let starts = item_starts(text);
    let chunks: Vec<(usize, ChunkParse)> = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let end = starts.get(i + 1).copied().unwrap_or(text.len());
            (start, parse_chunk(&text[start..end]))
        })
        .collect();
    let pieces: Vec<(usize, &ChunkParse)> = chunks.iter().map(|(o, c)| (*o, c)).collect();
    assemble(&pieces)
}

/// Files at least this long are parsed on several threads by
/// [`parse_parallel`] (below it, a thread costs more than it saves).
pub const PARALLEL_FROM: usize = 256 << 10;

/// [`parse`] on up to `threads` threads: the file cut at item boundaries
/// ([`item_starts`]) into runs of about equal length, each parsed on its
/// own ([`parse_chunk`]), then joined with their spans shifted as
/// [`assemble`] joins pieces. Equal to [`parse`] (held by
/// `compiler/tests/incremental.rs`); a text with one item, or `threads`
/// below 2, is parsed in one pass.
pub fn parse_parallel(text: &str, threads: usize) -> Parsed {
    let starts = item_starts(text);
    let mut cuts = vec![0];
    for k in 1..threads.max(1) {
        let target = text.len() / threads * k;
        let last = cuts.last().copied().unwrap_or(0);
        if let Some(&cut) = starts.iter().find(|&&s| s >= target && s > last) {
            cuts.push(cut);
        }
    }
    if cuts.len() < 2 {
        return parse(text);
    }
    let ranges: Vec<(usize, usize)> = cuts
        .iter()
        .enumerate()
        .map(|(i, &start)| (start, cuts.get(i + 1).copied().unwrap_or(text.len())))
        .collect();
    let mut chunks: Vec<(usize, ChunkParse)> = Vec::with_capacity(ranges.len());
    std::thread::scope(|scope| {
        // The caller's thread parses the first run; each other run gets a
        // thread with the main thread's usual stack.
        let spawned: Vec<_> = ranges[1..]
            .iter()
            .map(|&(start, end)| {
                std::thread::Builder::new()
                    .stack_size(8 << 20)
                    .spawn_scoped(scope, move || parse_chunk(&text[start..end]))
                    .map_err(|_| (start, end))
            })
            .collect();
        let (start, end) = ranges[0];
        chunks.push((start, parse_chunk(&text[start..end])));
        for (handle, &(start, end)) in spawned.into_iter().zip(&ranges[1..]) {
            let chunk = match handle {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: parsed here.
                Err(_) => parse_chunk(&text[start..end]),
            };
            chunks.push((start, chunk));
        }
    });
    assemble_owned(chunks)
}

/// [`assemble`], taking the pieces: their items and comments are moved,
/// not copied.
fn assemble_owned(pieces: Vec<(usize, ChunkParse)>) -> Parsed {
    let mut file = SourceFile {
        items: Vec::with_capacity(pieces.iter().map(|(_, p)| p.parsed.file.items.len()).sum()),
        comments: Vec::with_capacity(
            pieces
                .iter()
                .map(|(_, p)| p.parsed.file.comments.len())
                .sum(),
        ),
    };
    let mut controls = Vec::new();
    let mut rest = Vec::new();
    for (offset, piece) in pieces {
        let ChunkParse {
            parsed,
            controls: count,
        } = piece;
        file.items
            .extend(parsed.file.items.into_iter().map(|mut item| {
                item.shift(offset);
                item
            }));
        file.comments
            .extend(parsed.file.comments.into_iter().map(|mut comment| {
                comment.shift(offset);
                comment
            }));
        let mut diagnostics = parsed.diagnostics;
        for diagnostic in &mut diagnostics {
            diagnostic.shift(offset);
        }
        let later = diagnostics.split_off(count.min(diagnostics.len()));
        controls.extend(diagnostics);
        rest.extend(later);
    }
    controls.extend(rest);
    Parsed {
        file,
        diagnostics: controls,
    }
}

#[derive(Default)]
struct Builder {
    items: Vec<Item>,
    comments: Vec<Comment>,
    diagnostics: Vec<Diagnostic>,
}

impl Builder {
    /// Reports NUL and other control characters outside strings and comments
    /// once per run of them.
    fn control_characters(&mut self, text: &str) {
        let mut in_comment = false;
        let mut in_string = false;
        let mut escaped = false;
        let mut reported_until = 0;
        for (offset, c) in text.char_indices() {
            match c {
                '\n' | '\r' => {
                    in_comment = false;
                    in_string = false;
                }
                '#' if !in_string => in_comment = true,
                '"' if !in_comment && !escaped => in_string = !in_string,
                _ => {}
            }
            escaped = in_string && c == '\\' && !escaped;
            let control = c.is_control() && !matches!(c, '\n' | '\r' | '\t');
            if control && offset >= reported_until && (c == '\0' || !(in_comment || in_string)) {
                let end = text[offset..]
                    .char_indices()
                    .find(|(_, c)| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
                    .map_or(text.len(), |(i, _)| offset + i);
                reported_until = end;
                let shown = format!("U+{:04X}", c as u32);
                self.diagnostics.push(
                    Diagnostic::new(
                        Code::E0007,
                        Span::new(offset, end),
                        format!("control character {shown} in the policy"),
                        "control character",
                    )
                    .help("remove it; policies are plain text"),
                );
            }
        }
    }

    fn collect_comments(&mut self, pair: &Pair<'_, Rule>) {
        for inner in pair.clone().into_inner().flatten() {
            if inner.as_rule() == Rule::COMMENT {
                self.comments.push(comment(&inner));
            }
        }
    }

    fn top(&mut self, pair: Pair<'_, Rule>) {
        let span: Span = pair.as_span().into();
        match pair.as_rule() {
            Rule::COMMENT => {
                self.comments.push(comment(&pair));
                return;
            }
            Rule::EOI => return,
            _ => {}
        }
        self.collect_comments(&pair);
        let read = self.item(pair.clone());
        let (kind, keyword) = match read {
            Some((kind, keyword)) => (kind, keyword),
            None => (ItemKind::Bad(pair.as_str().to_owned()), span),
        };
        self.items.push(Item {
            kind,
            keyword,
            span,
        });
    }

    /// A top-level item and its keyword's span; `None` for a `bad_item`
    /// (or an item whose children are not what this reader expects, which
    /// the tests in `grammar/tests` and below rule out).
    fn item(&mut self, pair: Pair<'_, Rule>) -> Option<(ItemKind, Span)> {
        let rule = pair.as_rule();
        let mut c = Children::new(pair);
        let (kind, keyword) = match rule {
            Rule::version_decl => {
                let kw = c.take(Rule::kw_mcpolicy)?;
                (ItemKind::Version(int_lit(&c.take(Rule::int)?)), kw)
            }
            Rule::protocol_decl => {
                let kw = c.take(Rule::kw_protocol)?;
                (
                    ItemKind::Protocol(spanned_str(&c.take(Rule::revision)?)),
                    kw,
                )
            }
            Rule::error_code_decl => {
                let kw = c.take(Rule::kw_error_code)?;
                (ItemKind::ErrorCode(int_lit(&c.take(Rule::int)?)), kw)
            }
            Rule::identity_decl => {
                let kw = c.take(Rule::kw_identity)?;
                let fields = c.take_all(Rule::field_name).map(|p| spanned_str(&p));
                (ItemKind::Identity(fields.collect()), kw)
            }
            Rule::reason_decl => {
                let kw = c.take(Rule::kw_reason)?;
                let name = spanned_str(&c.take(Rule::reason_name)?);
                let body = self.block(c.take(Rule::reason_body)?, Self::reason_stmt);
                (ItemKind::Reason(ReasonDecl { name, body }), kw)
            }
            Rule::defaults_decl => {
                let kw = c.take(Rule::kw_defaults)?;
                let body = self.block(c.take(Rule::policy_body)?, Self::policy_stmt);
                (ItemKind::Defaults(body), kw)
            }
            Rule::server_decl => {
                let kw = c.take(Rule::kw_server)?;
                let pattern = self.string(&c.take(Rule::string)?);
                let body = self.block(c.take(Rule::policy_body)?, Self::policy_stmt);
                (ItemKind::Server(ServerDecl { pattern, body }), kw)
            }
            _ => return None,
        };
        c.finished()?;
        Some((kind, keyword.as_span().into()))
    }

    fn block<S>(
        &mut self,
        pair: Pair<'_, Rule>,
        stmt: fn(&mut Self, Pair<'_, Rule>) -> S,
    ) -> Block<S> {
        let mut open = Span::from(pair.as_span());
        let mut close = None;
        let mut stmts = Vec::new();
        for inner in pair.into_inner() {
            match inner.as_rule() {
                Rule::open_brace => open = inner.as_span().into(),
                Rule::close_brace => close = Some(inner.as_span().into()),
                Rule::COMMENT => {}
                _ => stmts.push(stmt(self, inner)),
            }
        }
        Block { stmts, open, close }
    }

    fn policy_stmt(&mut self, pair: Pair<'_, Rule>) -> Stmt {
        let span: Span = pair.as_span().into();
        match self.known_stmt(pair.clone()) {
            Some((statement, args, keyword)) => Stmt {
                kind: StmtKind::Known(statement, args),
                keyword,
                span,
            },
            None => Stmt {
                kind: StmtKind::Bad(BadStmt {
                    text: pair.as_str().to_owned(),
                    span,
                }),
                keyword: first_word(pair.as_str(), span),
                span,
            },
        }
    }

    /// A statement the grammar read, its values read by the shape its
    /// declaration gives (`statements.rs`).
    fn known_stmt(&mut self, pair: Pair<'_, Rule>) -> Option<(Statement, Args, Span)> {
        let statement = Statement::from_rule(pair.as_rule())?;
        let decl = statement.decl();
        let mut c = Children::new(pair);
        let keyword = c.next().filter(|k| k.as_str() == decl.keyword())?;
        let args = match decl.shape {
            Shape::Switch => {
                let on = switch(&c.take(Rule::switch)?);
                Args::Switch(on, c.as_clause())
            }
            // The declaration lists the words; the grammar must read no other.
            Shape::Word => {
                Args::Word(spanned_str(&c.next().filter(|w| {
                    decl.values.iter().any(|(word, _)| *word == w.as_str())
                })?))
            }
            Shape::Quantity(unit) => {
                let q = quantity(&c.take(unit.rule())?);
                Args::Quantity(q, c.as_clause())
            }
            Shape::Rate => {
                let count = quantity(&c.take(Rule::count)?);
                c.take(Rule::kw_per)?;
                let window = quantity(&c.take(Rule::duration)?);
                Args::Rate {
                    count,
                    window,
                    reason: c.as_clause(),
                }
            }
            Shape::Budget => {
                let limit = quantity(&c.take(Rule::count)?);
                let metric = spanned_str(&c.take(Rule::metric)?);
                c.take(Rule::kw_per)?;
                let window = match c.take(Rule::duration) {
                    Some(d) => WindowSyntax::Rolling(quantity(&d)),
                    None => WindowSyntax::Calendar(spanned_str(&c.take(Rule::calendar_unit)?)),
                };
                Args::Budget {
                    limit,
                    metric,
                    window,
                    reason: c.as_clause(),
                }
            }
            Shape::Strings => {
                let strings: Vec<_> = c.take_all(Rule::string).collect();
                Args::Strings(strings.iter().map(|p| self.string(p)).collect())
            }
        };
        c.finished()?;
        Some((statement, args, keyword.as_span().into()))
    }

    fn reason_stmt(&mut self, pair: Pair<'_, Rule>) -> ReasonStmt {
        let span: Span = pair.as_span().into();
        match self.known_reason_stmt(pair.clone()) {
            Some((kind, keyword)) => ReasonStmt {
                kind,
                keyword,
                span,
            },
            None => ReasonStmt {
                kind: ReasonStmtKind::Bad(BadStmt {
                    text: pair.as_str().to_owned(),
                    span,
                }),
                keyword: first_word(pair.as_str(), span),
                span,
            },
        }
    }

    fn known_reason_stmt(&mut self, pair: Pair<'_, Rule>) -> Option<(ReasonStmtKind, Span)> {
        let rule = pair.as_rule();
        let mut c = Children::new(pair);
        let (kind, keyword) = match rule {
            Rule::retryable_stmt => {
                let kw = c.take(Rule::kw_retryable)?;
                let value = c.take(Rule::boolean)?;
                let kind = ReasonStmtKind::Retryable(Spanned::new(
                    value.as_str() == "true",
                    value.as_span().into(),
                ));
                (kind, kw)
            }
            Rule::ttl_stmt => {
                let kw = c.take(Rule::kw_ttl)?;
                let ttl = match c.take(Rule::duration) {
                    Some(d) => TtlSyntax::Duration(quantity(&d)),
                    None => TtlSyntax::Keyword(spanned_str(&c.take_any(&[
                        Rule::until_reset,
                        Rule::forever,
                        Rule::none,
                    ])?)),
                };
                (ReasonStmtKind::Ttl(ttl), kw)
            }
            Rule::message_stmt => {
                let kw = c.take(Rule::kw_message)?;
                (
                    ReasonStmtKind::Message(self.string(&c.take(Rule::string)?)),
                    kw,
                )
            }
            Rule::code_stmt => {
                let kw = c.take(Rule::kw_code)?;
                (ReasonStmtKind::Code(int_lit(&c.take(Rule::int)?)), kw)
            }
            _ => return None,
        };
        c.finished()?;
        Some((kind, keyword.as_span().into()))
    }

    /// Resolves a string literal's escapes, reporting bad ones.
    fn string(&mut self, pair: &Pair<'_, Rule>) -> StringLit {
        let span: Span = pair.as_span().into();
        let raw = pair.as_str();
        let body = raw.get(1..raw.len().saturating_sub(1)).unwrap_or("");
        let (value, errors) = unescape(body, span.start + 1);
        for (at, message) in errors {
            self.diagnostics.push(
                Diagnostic::new(Code::E0004, at, message, "invalid escape")
                    .help(r#"write `\\` for a backslash, `\"` for a quote, or `\u{E9}` for a character by code"#),
            );
        }
        StringLit { value, span }
    }
}

/// Typed access to a pair's children: they are read in order, each by the
/// grammar rule it must be (comments skipped). Rules are names the grammar
/// derives, so a rule renamed or removed fails to compile here; a rule whose
/// children change makes a read return `None`, which the parser turns into
/// an unreadable node instead of panicking, and the tests (each statement's
/// declared example, `grammar/tests`) fail. No child is read by position.
struct Children<'i> {
    pairs: std::iter::Peekable<pest::iterators::Pairs<'i, Rule>>,
}

impl<'i> Children<'i> {
    fn new(pair: Pair<'i, Rule>) -> Self {
        Children {
            pairs: pair.into_inner().peekable(),
        }
    }

    fn skip_comments(&mut self) {
        while self
            .pairs
            .next_if(|p| p.as_rule() == Rule::COMMENT)
            .is_some()
        {}
    }

    /// The next child, whatever its rule.
    fn next(&mut self) -> Option<Pair<'i, Rule>> {
        self.skip_comments();
        self.pairs.next()
    }

    /// The next child if it is a `rule`.
    fn take(&mut self, rule: Rule) -> Option<Pair<'i, Rule>> {
        self.take_any(&[rule])
    }

    /// The next child if it is one of `rules`.
    fn take_any(&mut self, rules: &[Rule]) -> Option<Pair<'i, Rule>> {
        self.skip_comments();
        self.pairs.next_if(|p| rules.contains(&p.as_rule()))
    }

    /// Every next child that is a `rule`.
    fn take_all(&mut self, rule: Rule) -> impl Iterator<Item = Pair<'i, Rule>> + '_ {
        std::iter::from_fn(move || self.take(rule))
    }

    /// An optional `as NAME`.
    fn as_clause(&mut self) -> AsClause {
        let clause = self.take(Rule::as_clause)?;
        let mut inner = Children::new(clause);
        inner.take(Rule::kw_as)?;
        inner.take(Rule::reason_name).map(|p| spanned_str(&p))
    }

    /// `Some` when every child was read.
    fn finished(&mut self) -> Option<()> {
        self.next().is_none().then_some(())
    }
}

fn spanned_str(pair: &Pair<'_, Rule>) -> Spanned<String> {
    Spanned::new(pair.as_str().to_owned(), pair.as_span().into())
}

fn switch(pair: &Pair<'_, Rule>) -> Spanned<bool> {
    Spanned::new(pair.as_str() == "on", pair.as_span().into())
}

fn int_lit(pair: &Pair<'_, Rule>) -> IntLit {
    let text = pair.as_str().to_owned();
    let value = text.replace('_', "").parse::<i64>().ok();
    IntLit {
        value,
        text,
        span: pair.as_span().into(),
    }
}

fn quantity(pair: &Pair<'_, Rule>) -> Quantity {
    let mut number = None;
    let mut unit = None;
    for inner in pair.clone().into_inner() {
        match inner.as_rule() {
            Rule::int => number = Some(int_lit(&inner)),
            _ => unit = Some(spanned_str(&inner)),
        }
    }
    let span: Span = pair.as_span().into();
    let number = number.unwrap_or(IntLit {
        value: None,
        text: String::new(),
        span,
    });
    Quantity { number, unit, span }
}

fn first_word(text: &str, span: Span) -> Span {
    let len = text
        .char_indices()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '.' || *c == '-'))
        .map_or(text.len(), |(i, _)| i);
    let len = if len == 0 {
        text.chars().next().map_or(0, char::len_utf8)
    } else {
        len
    };
    Span::new(span.start, span.start + len)
}

/// Resolves `\\ \" \n \t \u{HEX}`; returns the value and each bad escape's span and message.
pub fn unescape(body: &str, offset: usize) -> (String, Vec<(Span, String)>) {
    let mut value = String::with_capacity(body.len());
    let mut errors = Vec::new();
    let mut chars = body.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '\\' {
            value.push(c);
            continue;
        }
        let Some((j, e)) = chars.next() else {
            errors.push((
                Span::new(offset + i, offset + i + 1),
                "a string cannot end with `\\`".to_owned(),
            ));
            break;
        };
        let end = offset + j + e.len_utf8();
        match e {
            '\\' => value.push('\\'),
            '"' => value.push('"'),
            'n' => value.push('\n'),
            't' => value.push('\t'),
            'u' => {
                let rest = &body[j + 1..];
                let parsed = rest
                    .strip_prefix('{')
                    .and_then(|r| r.find('}').map(|close| &r[..close]))
                    .filter(|hex| (1..=6).contains(&hex.len()))
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok().map(|n| (hex.len(), n)));
                match parsed.and_then(|(len, n)| char::from_u32(n).map(|c| (len, c))) {
                    Some((len, c)) => {
                        value.push(c);
                        for _ in 0..len + 2 {
                            chars.next();
                        }
                    }
                    None => {
                        // The braces belong to the bad escape, not to the text (nor to a placeholder).
                        let braced = rest
                            .strip_prefix('{')
                            .and_then(|r| r.find('}'))
                            .map(|close| close + 2);
                        let skip = braced.filter(|len| *len <= 10).unwrap_or(0);
                        for _ in 0..rest[..skip].chars().count() {
                            chars.next();
                        }
                        errors.push((
                            Span::new(offset + i, end + skip),
                            "`\\u` must be followed by `{HEX}` naming a Unicode scalar value"
                                .to_owned(),
                        ));
                    }
                }
            }
            other => errors.push((
                Span::new(offset + i, end),
                format!("unknown escape `\\{other}`"),
            )),
        }
    }
    (value, errors)
}

/// A comment as read, with the start of its line (inline suppressions,
/// `docs/spec/language.md`, "Suppressing a warning").
fn comment(pair: &Pair<'_, Rule>) -> Comment {
    let span = pair.as_span();
    let input = span.get_input();
    let before = input.get(..span.start()).unwrap_or_default();
    let line_start = before.rfind(['\n', '\r']).map_or(0, |at| at + 1);
    let own_line = before[line_start..].trim().is_empty();
    let text = pair.as_str().trim_end();
    let end = span.start() + text.len();
    let removal = if own_line {
        let after = input.get(end..).unwrap_or_default();
        let break_len = if after.starts_with("\r\n") {
            2
        } else {
            usize::from(after.starts_with(['\n', '\r']))
        };
        Span::new(line_start, end + break_len)
    } else {
        Span::new(before.trim_end().len(), end)
    };
    Comment {
        text: text.to_owned(),
        span: Span::new(span.start(), end),
        line_start,
        own_line,
        removal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_complete_policy() {
        let text = r#"mcpolicy 1
error_code -32010                      # implementation-defined band
identity systemPrompt, messages, includeContext, modelPreferences

reason policy.rate_limit        { retryable true;  ttl 60s }
reason policy.budget_exhausted  { retryable false; ttl until_reset }

defaults {
  max_context thisServer               # wider requests are trimmed, not denied
  max_input 64 KiB
  max_tokens 4096
  rate 30 per 1m
  consent first
}

server "release-notes" {
  budget 50 requests per day
  budget 200k tokens per 24h
  max_context none
}

server "github-*" { sampling off }
"#;
        let parsed = parse(text);
        assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
        let kinds: Vec<_> = parsed
            .file
            .items
            .iter()
            .map(|i| std::mem::discriminant(&i.kind))
            .collect();
        assert_eq!(kinds.len(), 8);
        assert!(
            parsed
                .file
                .items
                .iter()
                .all(|i| !matches!(i.kind, ItemKind::Bad(_)))
        );
        assert_eq!(parsed.file.comments.len(), 2);
        let ItemKind::Server(release) = &parsed.file.items[6].kind else {
            panic!("not a server")
        };
        assert_eq!(release.pattern.value, "release-notes");
        assert_eq!(release.body.stmts.len(), 3);
        assert!(
            release
                .body
                .stmts
                .iter()
                .all(|s| !matches!(s.kind, StmtKind::Bad(_)))
        );
    }

    #[test]
    fn recovers_per_item_and_statement() {
        let text = "mcpolicy 1\nservr \"x\" { sampling off }\nserver \"a\" {\n  max_tokens lots\n  rate 3 per 1m\n}\nreason foo\n";
        let parsed = parse(text);
        let items = &parsed.file.items;
        assert!(matches!(items[1].kind, ItemKind::Bad(_)));
        let ItemKind::Server(a) = &items[2].kind else {
            panic!("server expected")
        };
        assert!(matches!(a.body.stmts[0].kind, StmtKind::Bad(_)));
        assert!(matches!(
            a.body.stmts[1].kind,
            StmtKind::Known(Statement::Rate, Args::Rate { .. })
        ));
        assert!(matches!(items[3].kind, ItemKind::Bad(_)));
    }

    #[test]
    fn unclosed_block_ends_at_next_item() {
        let parsed =
            parse("mcpolicy 1\nserver \"a\" {\n  sampling off\nserver \"b\" { sampling on }\n");
        let ItemKind::Server(a) = &parsed.file.items[1].kind else {
            panic!("server expected")
        };
        assert!(a.body.close.is_none());
        assert!(matches!(parsed.file.items[2].kind, ItemKind::Server(_)));
    }

    /// `starts_item` is the grammar's `top_start`, byte for byte.
    fn agrees_with_top_start(text: &str) -> Result<(), proptest::test_runner::TestCaseError> {
        let grammar = PolicyParser::parse(Rule::top_start, text).is_ok();
        proptest::prop_assert_eq!(starts_item(text.as_bytes()), grammar, "{:?}", text);
        Ok(())
    }

    #[test]
    fn starts_item_agrees_with_top_start_on_every_keyword() {
        for word in crate::statements::item_keywords()
            .chain(crate::statements::policy_keywords())
            .chain(crate::statements::reason_keywords())
        {
            for tail in [
                "",
                " ",
                "x",
                "_",
                "1",
                " \"",
                "\t\"",
                "\u{feff}\"",
                " # \"",
                "\n\"",
            ] {
                agrees_with_top_start(&format!("{word}{tail}")).expect("agrees");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn starts_item_agrees_with_top_start(
            text in "(mcpolicy|protocol|error_code|identity|reason|defaults|server|serve|max_tokens|#)?[ \t\u{feff}\"#a_1\n]{0,4}[a-z\"]?"
        ) {
            agrees_with_top_start(&text)?;
        }
    }

    #[test]
    fn escapes() {
        assert_eq!(unescape(r"a\u{e9}\n", 0).0, "aé\n");
        assert_eq!(unescape(r"\q", 0).1.len(), 1);
        assert_eq!(unescape(r"\u{110000}", 0).1.len(), 1);
    }

    #[test]
    fn hostile_inputs_do_not_panic() {
        for text in [
            String::new(),
            "{".repeat(10_000),
            "}".repeat(10_000),
            "\0\0\0".to_owned(),
            format!("server \"{}\" {{", "x".repeat(1 << 20)),
            "server \"a\" { models \"\\".to_owned(),
        ] {
            let _ = parse(&text);
        }
    }
}
