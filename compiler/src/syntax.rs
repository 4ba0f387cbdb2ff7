//! The typed syntax tree of a `.mcpolicy` file. Every node carries the byte
//! span it was read from; nothing here knows about diagnostics or meaning.

use std::fmt;

pub use crate::statements::Statement;

/// A byte range `[start, end)` in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// A span from `start` to `end`.
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }

    /// Length in bytes.
    pub fn len(self) -> usize {
        self.end - self.start
    }

    /// Whether the span covers no byte.
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    /// Whether `offset` lies inside the span (end inclusive, for cursors).
    pub fn contains(self, offset: usize) -> bool {
        self.start <= offset && offset <= self.end
    }

    /// The span moved `by` bytes on ([`Shift`] by value): a span of a
    /// piece's tree placed in the whole text.
    pub fn shifted(mut self, by: usize) -> Span {
        self.shift(by);
        self
    }
}

impl From<pest::Span<'_>> for Span {
    fn from(span: pest::Span<'_>) -> Self {
        Span::new(span.start(), span.end())
    }
}

impl From<Span> for miette::SourceSpan {
    fn from(span: Span) -> Self {
        (span.start, span.len()).into()
    }
}

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub span: Span,
}

impl<T> Spanned<T> {
    /// Pairs a value with its span.
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

/// An integer literal. `value` is `None` when it does not fit an `i64`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntLit {
    /// The parsed value, if it fits.
    pub value: Option<i64>,
    /// The literal as written (digit separators included).
    pub text: String,
    /// Where it was written.
    pub span: Span,
}

/// A whole file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SourceFile {
    /// Top-level items in source order.
    pub items: Vec<Item>,
    /// Every comment, in source order, for the formatter.
    pub comments: Vec<Comment>,
}

/// A `# …` comment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Comment {
    /// The text including `#`, without the line break.
    pub text: String,
    /// Where it was written.
    pub span: Span,
    /// Where its line starts: the code before it on the line, if any, lies
    /// in `line_start..span.start` (inline suppressions cover that code).
    pub line_start: usize,
    /// Nothing but blanks before it on its line.
    pub own_line: bool,
    /// What removing the comment takes out: with the blanks before it, and
    /// for a comment on a line of its own, the whole line and its break.
    pub removal: Span,
}

/// A top-level item.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Item {
    /// What the item is.
    pub kind: ItemKind,
    /// The leading keyword's span (the whole text for a bad item).
    pub keyword: Span,
    /// The whole item.
    pub span: Span,
}

/// The kinds of top-level item.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ItemKind {
    /// `mcpolicy 1`
    Version(IntLit),
    /// `protocol 2025-11-25`
    Protocol(Spanned<String>),
    /// `error_code -32010`
    ErrorCode(IntLit),
    /// `identity systemPrompt, messages`
    Identity(Vec<Spanned<String>>),
    /// `reason name { … }`
    Reason(ReasonDecl),
    /// `defaults { … }`
    Defaults(Block<Stmt>),
    /// `server "pattern" { … }`
    Server(ServerDecl),
    /// Text the grammar could not read as any item.
    Bad(String),
}

impl ItemKind {
    /// The keyword of an item a file may declare only once (a second one is
    /// E0203), or `None` for one it may repeat. The checker's rule, which
    /// completion follows to stop offering such an item once declared.
    pub fn declared_once(&self) -> Option<&'static str> {
        match self {
            ItemKind::Version(_) => Some("mcpolicy"),
            ItemKind::Protocol(_) => Some("protocol"),
            ItemKind::ErrorCode(_) => Some("error_code"),
            ItemKind::Identity(_) => Some("identity"),
            ItemKind::Defaults(_) => Some("defaults"),
            ItemKind::Reason(_) | ItemKind::Server(_) | ItemKind::Bad(_) => None,
        }
    }
}

/// `reason policy.rate_limit { retryable true; ttl 60s }`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReasonDecl {
    /// The reason's name.
    pub name: Spanned<String>,
    /// Its properties.
    pub body: Block<ReasonStmt>,
}

/// `server "release-notes" { … }`
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerDecl {
    /// The id or glob, unescaped.
    pub pattern: StringLit,
    /// Its statements.
    pub body: Block<Stmt>,
}

/// A braced list of statements.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Block<S> {
    /// The statements in source order.
    pub stmts: Vec<S>,
    /// The `{`.
    pub open: Span,
    /// The `}`, or `None` when it is missing.
    pub close: Option<Span>,
}

/// A string literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StringLit {
    /// The value after escapes are resolved.
    pub value: String,
    /// The literal including its quotes.
    pub span: Span,
}

/// A statement in `defaults` or a `server` block.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stmt {
    /// What it says.
    pub kind: StmtKind,
    /// The keyword's span.
    pub keyword: Span,
    /// The whole statement.
    pub span: Span,
}

/// `as acme.reason`: the reason a denial carries instead of the built-in one.
pub type AsClause = Option<Spanned<String>>;

/// A statement of a policy block: which one, and its values, whose shape
/// the statement's declaration fixes (`statements.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
// `Known` is the common case; boxing it would cost an allocation per statement
// to save space only on unreadable ones.
#[allow(clippy::large_enum_variant)]
pub enum StmtKind {
    /// A statement the grammar read.
    Known(Statement, Args),
    /// A statement the grammar could not read.
    Bad(BadStmt),
}

impl StmtKind {
    /// The statement's keyword as written in source, for messages and duplicate checks.
    pub fn keyword(&self) -> &str {
        match self {
            StmtKind::Known(statement, _) => statement.keyword(),
            StmtKind::Bad(bad) => &bad.text,
        }
    }

    /// The statement, unless the grammar could not read it.
    pub fn statement(&self) -> Option<Statement> {
        match self {
            StmtKind::Known(statement, _) => Some(*statement),
            StmtKind::Bad(_) => None,
        }
    }
}

/// The values of a statement, by shape (see `statements::Shape`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Args {
    /// `on|off [as r]`
    Switch(Spanned<bool>, AsClause),
    /// One word of a closed set: `none`, `first`.
    Word(Spanned<String>),
    /// One quantity: `64 KiB [as r]`, `4096`, `60s [as r]`.
    Quantity(Quantity, AsClause),
    /// `30 per 1m [as r]`
    Rate {
        /// Requests per window.
        count: Quantity,
        /// The rolling window.
        window: Quantity,
        /// Reason override.
        reason: AsClause,
    },
    /// `50 requests per day [as r]`
    Budget {
        /// The limit.
        limit: Quantity,
        /// `requests` or `tokens`.
        metric: Spanned<String>,
        /// A calendar unit or a rolling duration.
        window: WindowSyntax,
        /// Reason override.
        reason: AsClause,
    },
    /// `"claude-*", "gpt-4o"`
    Strings(Vec<StringLit>),
}

impl Args {
    /// The `as NAME` clause, if the statement has one.
    pub fn reason(&self) -> Option<&Spanned<String>> {
        match self {
            Args::Switch(_, reason)
            | Args::Quantity(_, reason)
            | Args::Rate { reason, .. }
            | Args::Budget { reason, .. } => reason.as_ref(),
            Args::Word(_) | Args::Strings(_) => None,
        }
    }

    /// The quantities among the values, in source order.
    pub fn quantities(&self) -> Vec<&Quantity> {
        match self {
            Args::Quantity(q, _) => vec![q],
            Args::Rate { count, window, .. } => vec![count, window],
            Args::Budget { limit, window, .. } => match window {
                WindowSyntax::Rolling(q) => vec![limit, q],
                WindowSyntax::Calendar(_) => vec![limit],
            },
            Args::Switch(..) | Args::Word(_) | Args::Strings(_) => Vec::new(),
        }
    }
}

/// A budget window as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WindowSyntax {
    /// `per day`
    Calendar(Spanned<String>),
    /// `per 24h`
    Rolling(Quantity),
}

/// The statements of a `reason` declaration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReasonStmt {
    /// What it says.
    pub kind: ReasonStmtKind,
    /// The keyword's span.
    pub keyword: Span,
    /// The whole statement.
    pub span: Span,
}

/// A reason property.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReasonStmtKind {
    /// `retryable true|false`
    Retryable(Spanned<bool>),
    /// `ttl 60s|until_reset|forever|none`
    Ttl(TtlSyntax),
    /// `message "…"`
    Message(StringLit),
    /// `code -32011`
    Code(IntLit),
    /// A property the grammar could not read.
    Bad(BadStmt),
}

impl ReasonStmtKind {
    /// The property's keyword.
    pub fn keyword(&self) -> &str {
        match self {
            ReasonStmtKind::Retryable(_) => "retryable",
            ReasonStmtKind::Ttl(_) => "ttl",
            ReasonStmtKind::Message(_) => "message",
            ReasonStmtKind::Code(_) => "code",
            ReasonStmtKind::Bad(bad) => &bad.text,
        }
    }
}

/// A reason's ttl as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TtlSyntax {
    /// `ttl 60s`
    Duration(Quantity),
    /// `ttl until_reset`, `forever` or `none`.
    Keyword(Spanned<String>),
}

/// Text the grammar could not read as a statement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BadStmt {
    /// The whole text of the statement.
    pub text: String,
    /// Its span.
    pub span: Span,
}

/// A number with an optional unit: `4096`, `200k`, `64 KiB`, `60s`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Quantity {
    /// The number.
    pub number: IntLit,
    /// The unit or suffix, if any.
    pub unit: Option<Spanned<String>>,
    /// The whole quantity.
    pub span: Span,
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.number.text)?;
        if let Some(unit) = &self.unit {
            f.write_str(&unit.value)?;
        }
        Ok(())
    }
}

/// Moves every span of a node by a byte offset. The parser reads each
/// top-level item on its own, with spans relative to the item's first byte,
/// and the file's tree is assembled by shifting each item to where it stands
/// (see `parse::item_starts`). Every impl names each field, so a new field
/// with a span cannot be forgotten here.
pub trait Shift {
    /// Adds `by` to every span's start and end.
    fn shift(&mut self, by: usize);
}

impl Shift for Span {
    fn shift(&mut self, by: usize) {
        self.start += by;
        self.end += by;
    }
}

impl<T: Shift> Shift for Option<T> {
    fn shift(&mut self, by: usize) {
        if let Some(inner) = self {
            inner.shift(by);
        }
    }
}

impl<T: Shift> Shift for Vec<T> {
    fn shift(&mut self, by: usize) {
        for inner in self {
            inner.shift(by);
        }
    }
}

/// The value of a `Spanned` carries no span (it is a `String` or a `bool`).
impl<T> Shift for Spanned<T> {
    fn shift(&mut self, by: usize) {
        let Spanned { value: _, span } = self;
        span.shift(by);
    }
}

impl Shift for IntLit {
    fn shift(&mut self, by: usize) {
        let IntLit {
            value: _,
            text: _,
            span,
        } = self;
        span.shift(by);
    }
}

impl Shift for Comment {
    fn shift(&mut self, by: usize) {
        let Comment {
            text: _,
            span,
            line_start,
            own_line: _,
            removal,
        } = self;
        span.shift(by);
        *line_start += by;
        removal.shift(by);
    }
}

impl Shift for Item {
    fn shift(&mut self, by: usize) {
        let Item {
            kind,
            keyword,
            span,
        } = self;
        kind.shift(by);
        keyword.shift(by);
        span.shift(by);
    }
}

impl Shift for ItemKind {
    fn shift(&mut self, by: usize) {
        match self {
            ItemKind::Version(int) | ItemKind::ErrorCode(int) => int.shift(by),
            ItemKind::Protocol(revision) => revision.shift(by),
            ItemKind::Identity(fields) => fields.shift(by),
            ItemKind::Reason(ReasonDecl { name, body }) => {
                name.shift(by);
                body.shift(by);
            }
            ItemKind::Defaults(body) => body.shift(by),
            ItemKind::Server(ServerDecl { pattern, body }) => {
                pattern.shift(by);
                body.shift(by);
            }
            ItemKind::Bad(_) => {}
        }
    }
}

impl<S: Shift> Shift for Block<S> {
    fn shift(&mut self, by: usize) {
        let Block { stmts, open, close } = self;
        stmts.shift(by);
        open.shift(by);
        close.shift(by);
    }
}

impl Shift for StringLit {
    fn shift(&mut self, by: usize) {
        let StringLit { value: _, span } = self;
        span.shift(by);
    }
}

impl Shift for Stmt {
    fn shift(&mut self, by: usize) {
        let Stmt {
            kind,
            keyword,
            span,
        } = self;
        kind.shift(by);
        keyword.shift(by);
        span.shift(by);
    }
}

impl Shift for StmtKind {
    fn shift(&mut self, by: usize) {
        match self {
            StmtKind::Known(_, args) => args.shift(by),
            StmtKind::Bad(bad) => bad.shift(by),
        }
    }
}

impl Shift for Args {
    fn shift(&mut self, by: usize) {
        match self {
            Args::Switch(switch, reason) => {
                switch.shift(by);
                reason.shift(by);
            }
            Args::Word(word) => word.shift(by),
            Args::Quantity(quantity, reason) => {
                quantity.shift(by);
                reason.shift(by);
            }
            Args::Rate {
                count,
                window,
                reason,
            } => {
                count.shift(by);
                window.shift(by);
                reason.shift(by);
            }
            Args::Budget {
                limit,
                metric,
                window,
                reason,
            } => {
                limit.shift(by);
                metric.shift(by);
                window.shift(by);
                reason.shift(by);
            }
            Args::Strings(strings) => strings.shift(by),
        }
    }
}

impl Shift for WindowSyntax {
    fn shift(&mut self, by: usize) {
        match self {
            WindowSyntax::Calendar(unit) => unit.shift(by),
            WindowSyntax::Rolling(quantity) => quantity.shift(by),
        }
    }
}

impl Shift for ReasonStmt {
    fn shift(&mut self, by: usize) {
        let ReasonStmt {
            kind,
            keyword,
            span,
        } = self;
        kind.shift(by);
        keyword.shift(by);
        span.shift(by);
    }
}

impl Shift for ReasonStmtKind {
    fn shift(&mut self, by: usize) {
        match self {
            ReasonStmtKind::Retryable(value) => value.shift(by),
            ReasonStmtKind::Ttl(TtlSyntax::Duration(quantity)) => quantity.shift(by),
            ReasonStmtKind::Ttl(TtlSyntax::Keyword(word)) => word.shift(by),
            ReasonStmtKind::Message(message) => message.shift(by),
            ReasonStmtKind::Code(code) => code.shift(by),
            ReasonStmtKind::Bad(bad) => bad.shift(by),
        }
    }
}

impl Shift for BadStmt {
    fn shift(&mut self, by: usize) {
        let BadStmt { text: _, span } = self;
        span.shift(by);
    }
}

impl Shift for Quantity {
    fn shift(&mut self, by: usize) {
        let Quantity { number, unit, span } = self;
        number.shift(by);
        unit.shift(by);
        span.shift(by);
    }
}
