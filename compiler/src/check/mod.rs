//! The checker: every rule of `docs/spec/language.md`, each finding with a code, a
//! precise span, a label and a help line. It reads the whole tree and keeps
//! going after each error, so one bad item never hides the next.

mod codes_rule;
pub mod fix;
mod reread;
mod servers;
mod suppress;
mod values;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use mcpolicy_runtime::table::{
    BudgetMetric, CalendarUnit, ProtocolRevision, ReasonSpec, Ttl, Window, builtin,
};

use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Vocabulary, did_you_mean};
use crate::model::{PartialBlock, PolicyModel};
use crate::statements::{self, Shape, StatementDecl, Unit, Value};
use crate::syntax::*;

pub use codes_rule::{DEFAULT_ERROR_CODE, suggested_code};

/// The `sampling/createMessage` params an identity may list.
pub const IDENTITY_FIELDS: &[&str] = &mcpolicy_runtime::table::IDENTITY_FIELDS;
/// The identity a policy gets when it does not say.
pub const DEFAULT_IDENTITY: &[&str] = &mcpolicy_runtime::table::DEFAULT_IDENTITY;
const KNOBS: &[&str] = &["maxTokens", "temperature", "stopSequences", "metadata"];

/// The checker's result: findings and, errors or not, the model lowering reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Analysis {
    /// Every finding, in source order.
    pub diagnostics: Vec<Diagnostic>,
    /// The policy's meaning, as far as it could be read.
    pub model: PolicyModel,
}

/// Checks a parsed file.
pub fn check(file: &SourceFile) -> Analysis {
    check_with(file, &check_block, &|| {})
}

/// What the check of one `defaults` or `server` block reads from the rest
/// of the file: the protocol revision and the names of the declared
/// reasons. Nothing else: a block's findings are a function of its text and
/// of this, so an editor can keep them per block (`db::block_checks`) and
/// re-check only the block an edit touched.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockContext {
    /// The file's protocol revision.
    pub protocol: ProtocolRevision,
    /// The reasons the file declares, sorted; shared by every block's
    /// check, so that checking a block costs nothing per declared reason.
    pub declared: Arc<[String]>,
}

/// What checking one block found: the findings, what it states, and the
/// reasons it names, for the file-level rules that read every block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockCheck {
    diagnostics: Vec<Diagnostic>,
    /// Shared, not copied, by each check that reads this one from its memo.
    block: Arc<PartialBlock>,
    /// Each accepted `as NAME`: (statement, name, span of NAME), in order.
    clauses: Vec<(Statement, String, Span)>,
    /// Who produces each reason named (by name, sorted): by a budget, by
    /// these other statements, and the spans of its `as` uses.
    producers: Vec<(String, bool, Vec<Statement>, Vec<Span>)>,
    /// The span of the block's last statement (where a missing `}` is
    /// reported), so that the file-level rules need not read the
    /// statements.
    last: Option<Span>,
}

impl Shift for BlockCheck {
    fn shift(&mut self, by: usize) {
        let BlockCheck {
            diagnostics,
            block: _,
            clauses,
            producers,
            last,
        } = self;
        diagnostics.shift(by);
        if let Some(last) = last {
            last.shift(by);
        }
        for (_, _, span) in clauses {
            span.shift(by);
        }
        for (_, _, _, uses) in producers {
            uses.shift(by);
        }
    }
}

/// Checks one `defaults` (`is_server` false) or `server` block in
/// `context`. Its `}` is not looked at: a missing one is a file-level
/// finding (it depends on the items around it).
pub fn check_block(block: &Block<Stmt>, is_server: bool, context: &BlockContext) -> BlockCheck {
    let mut checker = Checker {
        protocol: context.protocol,
        context_declared: Arc::clone(&context.declared),
        ..Checker::default()
    };
    let last = block.stmts.last().map(|s| s.span);
    let block = checker.block(block, is_server);
    let mut producers: Vec<(String, bool, Vec<Statement>, Vec<Span>)> = checker
        .producers
        .into_iter()
        .map(|(name, p)| (name, p.by_budget, p.by_other, p.uses))
        .collect();
    producers.sort_by(|a, b| a.0.cmp(&b.0));
    BlockCheck {
        diagnostics: checker.diagnostics,
        block: Arc::new(block),
        clauses: checker
            .clauses
            .into_iter()
            .map(|(_, statement, name, span)| (statement, name, span))
            .collect(),
        producers,
        last,
    }
}

/// Whether `comment` is a suppression (`# mcpolicy: …`), which reads the
/// statements around it: a block holding one keeps its statements in the
/// tree the file-level rules read (`parse::assemble_with`).
pub fn is_suppression(comment: &crate::syntax::Comment) -> bool {
    suppress::is_suppression(comment)
}

/// [`check`], with each block's check from `blocks` (given the block, with
/// spans in the file, whether it is a server block, and the context): the
/// same result as long as `blocks` gives what [`check_block`] would.
///
/// `interrupt` is called between the steps of the file-level rules that
/// can take long (one per server pattern compared); the editor's database
/// unwinds there when a newer edit cancels the check.
pub fn check_with(
    file: &SourceFile,
    blocks: &dyn Fn(&Block<Stmt>, bool, &BlockContext) -> BlockCheck,
    interrupt: &dyn Fn(),
) -> Analysis {
    let mut checker = Checker::default();
    checker.run(file, blocks, interrupt);
    let mut diagnostics = checker.diagnostics;
    diagnostics.sort_by_key(|d| (d.span.start, d.span.end, d.code));
    suppress::apply(file, &mut diagnostics);
    Analysis {
        diagnostics,
        model: checker.model,
    }
}

/// How many declared reasons on each side of an undeclared name, in
/// sorted order, an E0401 suggestion is chosen from.
const SUGGEST_AROUND: usize = 128;

/// Where a reason is produced: by which statement kinds.
#[derive(Default)]
struct Producers {
    /// By a statement whose windows reset (a budget).
    by_budget: bool,
    /// By these other statements.
    by_other: Vec<Statement>,
    uses: Vec<Span>,
}

#[derive(Default)]
struct Checker {
    diagnostics: Vec<Diagnostic>,
    model: PolicyModel,
    protocol: ProtocolRevision,
    /// Declared reasons: name → declaration span.
    declared: HashMap<String, Span>,
    /// In a block's check, the file's declared reasons, sorted
    /// (`BlockContext::declared`).
    context_declared: Arc<[String]>,
    producers: HashMap<String, Producers>,
    /// Blocks left open because another block was written inside them, by
    /// the span of their `{`: the inner block's keyword and name.
    nested: HashMap<Span, (&'static str, &'static str, Span)>,
    /// The `}` items that close such a block after the inner one: consequences
    /// of the nesting, not findings of their own.
    nested_closers: HashSet<Span>,
    /// The block being checked: 0 for `defaults`, 1 + i for server block i.
    current_block: usize,
    /// Every accepted `as NAME`: (block, statement, name, span of NAME).
    clauses: Vec<(usize, Statement, String, Span)>,
}

/// A block item's keyword, its `{` and its `}` (if found).
fn block_of(kind: &ItemKind) -> Option<(&'static str, Span, Option<Span>)> {
    match kind {
        ItemKind::Defaults(body) => Some(("defaults", body.open, body.close)),
        ItemKind::Server(server) => Some(("server", server.body.open, server.body.close)),
        ItemKind::Reason(decl) => Some(("reason", decl.body.open, decl.body.close)),
        _ => None,
    }
}

impl Checker {
    fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    /// Finds `defaults { … server "x" { … } }`: the parser ends the outer
    /// block where the inner item starts (blocks do not nest) and reads the
    /// last `}` as a stray one. Said as one finding on the outer block.
    fn find_nesting(&mut self, items: &[Item]) {
        for window in items.windows(3) {
            let [outer, inner, closer] = window else {
                continue;
            };
            let (Some((outer_kw, open, None)), Some((inner_kw, _, Some(_)))) =
                (block_of(&outer.kind), block_of(&inner.kind))
            else {
                continue;
            };
            if matches!(&closer.kind, ItemKind::Bad(text) if text.trim_start().starts_with('}')) {
                self.nested
                    .insert(open, (outer_kw, inner_kw, inner.keyword));
                self.nested_closers.insert(closer.span);
            }
        }
    }

    /// The finding for a block whose `}` is missing.
    fn unclosed(&mut self, open: Span, last: Option<Span>) {
        let Some(&(outer, inner, inner_at)) = self.nested.get(&open) else {
            self.push(unclosed(open, last));
            return;
        };
        self.push(
            Diagnostic::new(
                Code::E0003,
                open,
                format!("`{outer}` is still open where `{inner}` begins: blocks do not nest"),
                "unclosed `{`",
            )
            .related(inner_at, format!("`{inner}` starts here, inside `{outer}`"))
            .help(format!(
                "close `{outer}` with `}}` before `{inner}`, and remove the `}}` that follows the `{inner}` block"
            )),
        );
    }

    fn run(
        &mut self,
        file: &SourceFile,
        blocks: &dyn Fn(&Block<Stmt>, bool, &BlockContext) -> BlockCheck,
        interrupt: &dyn Fn(),
    ) {
        self.find_nesting(&file.items);
        // Pass 1: the declarations everything else depends on.
        let mut firsts: HashMap<&'static str, Span> = HashMap::new();
        let mut version_seen = false;
        let mut error_code: Option<&IntLit> = None;
        let mut protocol_item: Option<Span> = None;
        let mut reasons: Vec<&ReasonDecl> = Vec::new();
        let mut defaults: Option<&Block<Stmt>> = None;
        let mut servers: Vec<&ServerDecl> = Vec::new();
        let mut identity: Option<&Vec<Spanned<String>>> = None;

        for (index, item) in file.items.iter().enumerate() {
            let once = item.kind.declared_once();
            if let Some(keyword) = once {
                if let Some(first) = firsts.get(keyword) {
                    self.push(
                        Diagnostic::new(
                            Code::E0203,
                            item.keyword,
                            format!("`{keyword}` is declared twice"),
                            "second declaration",
                        )
                        .related(*first, "first declared here")
                        .help(format!("keep one `{keyword}` and remove the other")),
                    );
                    continue;
                }
                firsts.insert(keyword, item.keyword);
            }
            match &item.kind {
                ItemKind::Version(version) => {
                    version_seen = true;
                    if index != 0 {
                        self.push(
                            Diagnostic::new(
                                Code::E0201,
                                item.span,
                                "the version line must come first",
                                "not the first item",
                            )
                            .help("move `mcpolicy 1` to the top of the file"),
                        );
                    }
                    if version.value != Some(1) {
                        self.push(
                            Diagnostic::new(
                                Code::E0202,
                                version.span,
                                format!("unsupported language version `{}`", version.text),
                                "this compiler reads version 1",
                            )
                            // A policy written for another version may mean
                            // something else under version 1: a choice.
                            .help("this compiler reads `mcpolicy 1`; if the policy was written for version 1, write `mcpolicy 1` (not applied by `--fix`)")
                            .choice("use version 1", version.span, "1"),
                        );
                    }
                }
                ItemKind::Protocol(revision) => {
                    protocol_item = Some(item.span);
                    match ProtocolRevision::parse(&revision.value) {
                        Some(parsed) => self.protocol = parsed,
                        None => {
                            let known = ProtocolRevision::ALL.map(ProtocolRevision::as_str);
                            let d = Diagnostic::new(
                                Code::E0204,
                                revision.span,
                                format!("unknown MCP revision `{}`", revision.value),
                                "not a revision mcpolicy knows",
                            )
                            .suggest(
                                &revision.value,
                                known,
                                revision.span,
                                Vocabulary::Name,
                                str::to_owned,
                            )
                            .unwrap_or_else(|d| d.help(format!("write one of {}", list(&known))));
                            self.push(d);
                        }
                    }
                }
                ItemKind::ErrorCode(code) => error_code = Some(code),
                ItemKind::Identity(fields) => identity = Some(fields),
                ItemKind::Reason(decl) => reasons.push(decl),
                ItemKind::Defaults(block) => defaults = Some(block),
                ItemKind::Server(server) => servers.push(server),
                ItemKind::Bad(_) if self.nested_closers.contains(&item.span) => {}
                ItemKind::Bad(text) => self.bad_item(text, item.span),
            }
        }
        if !version_seen {
            let at = file
                .items
                .first()
                .map_or(Span::new(0, 0), |i| Span::new(i.span.start, i.span.start));
            self.push(
                Diagnostic::new(
                    Code::E0201,
                    at,
                    "the policy has no version line",
                    "expected `mcpolicy 1` here",
                )
                .help("start the file with `mcpolicy 1`")
                .fix("insert `mcpolicy 1`", at, "mcpolicy 1\n"),
            );
        }

        self.model.protocol = self.protocol;
        self.model.error_code = DEFAULT_ERROR_CODE;
        match error_code {
            Some(code) => {
                if let Some(value) = values::int_value(self, code) {
                    // One outside `i32` is an error below (`code_refusal`).
                    if let Ok(code) = i32::try_from(value) {
                        self.model.error_code = code;
                    }
                    if let Some(d) = codes_rule::check(
                        value,
                        code.span,
                        self.protocol,
                        codes_rule::Use::ErrorCode,
                    ) {
                        self.push(d);
                    }
                }
            }
            None => {
                if let (Some(span), Some(d)) = (
                    protocol_item,
                    codes_rule::check(
                        i64::from(DEFAULT_ERROR_CODE),
                        Span::default(),
                        self.protocol,
                        codes_rule::Use::DefaultErrorCode,
                    ),
                ) {
                    let suggestion = suggested_code(self.protocol);
                    self.push(Diagnostic {
                        span,
                        label: "the default error_code -32010 is in the legacy band here"
                            .to_owned(),
                        fix: Some(crate::diagnostic::Fix {
                            title: format!("declare `error_code {suggestion}`"),
                            span: Span::new(span.end, span.end),
                            replacement: format!("\nerror_code {suggestion}"),
                        }),
                        ..d
                    });
                }
            }
        }
        self.identity(identity);

        // Pass 2: reasons (declarations), then blocks (uses), then reason rules that need both.
        self.model.reasons = builtin::ALL
            .iter()
            .map(|b| (b.name.to_owned(), builtin::spec(b, self.model.error_code)))
            .collect();
        let mut reason_props: Vec<(&ReasonDecl, ReasonProps)> = Vec::new();
        for decl in &reasons {
            if let Some(props) = self.reason_decl(decl) {
                reason_props.push((decl, props));
            }
        }
        let mut declared: Vec<String> = self.declared.keys().cloned().collect();
        declared.sort_unstable();
        let context = BlockContext {
            protocol: self.protocol,
            declared: declared.into(),
        };
        if let Some(block) = defaults {
            self.current_block = 0;
            self.model.defaults = self.merge_block(block, blocks(block, false, &context));
        }
        servers::check_patterns(self, &servers, interrupt);
        for (i, server) in servers.iter().enumerate() {
            self.current_block = 1 + i;
            let block = self.merge_block(&server.body, blocks(&server.body, true, &context));
            // The model holds the pattern in NFC, the form the runtime matches.
            self.model.servers.push((
                mcpolicy_runtime::table::pattern::nfc(&server.pattern.value).into_owned(),
                block,
            ));
        }
        for (decl, props) in reason_props {
            self.reason_rules(decl, props);
        }
        self.shared_tools_reasons();
    }

    /// E0413 when, in some effective block, `tools` denies as a reason that
    /// another statement also names. The runtime skips a stored tools denial
    /// for a request without tools and knows it by its reason, so a shared
    /// reason would skip (or replay) the other statement's stored denials.
    fn shared_tools_reasons(&mut self) {
        // A finding needs a `tools … as NAME` clause in the block or in
        // `defaults` (`clause` below): without one in `defaults`, only the
        // blocks with their own are looked at.
        let mut with_tools: HashSet<usize> = self
            .clauses
            .iter()
            .filter(|c| c.1 == Statement::Tools)
            .map(|c| c.0)
            .collect();
        if with_tools.is_empty() {
            return;
        }
        let every_block = with_tools.remove(&0);
        let defaults = crate::lower::effective_defaults(&self.model);
        let servers: Vec<(usize, mcpolicy_runtime::table::EffectiveBlock)> = self
            .model
            .servers
            .iter()
            .enumerate()
            .filter(|(i, _)| every_block || with_tools.contains(&(1 + i)))
            .map(|(i, (_, b))| (1 + i, crate::statements::merge(&defaults, b)))
            .collect();
        let mut blocks = Vec::with_capacity(1 + servers.len());
        if every_block {
            blocks.push((0, defaults));
        }
        blocks.extend(servers);
        // The clause naming `reason` on `statement` that block `id` inherits:
        // its own, else the defaults' one.
        let clause = |id: usize, statement: &str, reason: &str| {
            let find = |block: usize| {
                self.clauses
                    .iter()
                    .find(|c| c.0 == block && c.1.keyword() == statement && c.2 == reason)
                    .map(|c| c.3)
            };
            find(id).or_else(|| find(0))
        };
        let mut seen: HashSet<(Span, Span)> = HashSet::new();
        let mut found = Vec::new();
        for (id, block) in &blocks {
            let tools = block.tools.reason.as_str();
            for (statement, reason) in block.statement_reasons() {
                if !block.shares_tools_reason(statement, reason) {
                    continue;
                }
                if let (Some(at), Some(other)) = (
                    clause(*id, Statement::Tools.keyword(), tools),
                    clause(*id, statement, reason),
                ) && seen.insert((at, other))
                {
                    found.push((at, other, statement, reason.to_owned()));
                }
            }
        }
        for (at, other, statement, reason) in found {
            self.push(
                Diagnostic::new(
                    Code::E0413,
                    at,
                    format!("`tools` and `{statement}` both deny as `{reason}`; the reason of `tools` must be its own"),
                    "shared with another statement",
                )
                .related(other, format!("`{statement}` names it here"))
                .help(format!(
                    "declare a separate reason for `tools`, like `reason {reason}_tools {{ retryable false; ttl forever }}`, and write `as {reason}_tools` here"
                ))
                .note("the runtime skips a stored `tools` denial for a request without tools, and tells it apart by its reason"),
            );
        }
    }

    fn bad_item(&mut self, text: &str, span: Span) {
        let word: String = text
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let word_span = Span::new(span.start, span.start + word.len());
        let trimmed = text.trim();
        let items: Vec<&str> = statements::item_keywords().collect();
        let diagnostic = if trimmed.starts_with('}') {
            Diagnostic::new(
                Code::E0001,
                Span::new(span.start, span.start + 1),
                "unexpected `}`",
                "no block is open here",
            )
            .help("remove it, or check the block above for an extra `}`")
        } else if trimmed.starts_with('{') {
            Diagnostic::new(
                Code::E0001,
                span,
                "a block must follow `defaults`, `server \"ID\"` or `reason NAME`",
                "block without an item",
            )
            .help("write `server \"ID\" { … }` or `defaults { … }`")
        } else if statements::item_keywords().any(|k| k == word) {
            reread::top_level_item(&word, text, span)
        } else if Statement::from_keyword(&word).is_some() {
            Diagnostic::new(
                Code::E0102,
                word_span,
                format!("`{word}` must be inside a block"),
                "statement at top level",
            )
            .help("put it in `defaults { … }` or a `server \"ID\" { … }` block")
        } else if word.is_empty() {
            let shown: String = trimmed.chars().take(20).collect();
            Diagnostic::new(
                Code::E0001,
                span,
                format!("expected a top-level item, found `{shown}`"),
                "not an item",
            )
            .help(format!("items start with {}", list(&items)))
        } else {
            Diagnostic::new(
                Code::E0001,
                word_span,
                format!("unknown item `{word}`"),
                "not a top-level item",
            )
            .suggest(
                &word,
                statements::item_keywords(),
                word_span,
                Vocabulary::Name,
                str::to_owned,
            )
            .unwrap_or_else(|d| d.help(format!("items start with {}", list(&items))))
        };
        self.push(diagnostic);
    }

    fn identity(&mut self, fields: Option<&Vec<Spanned<String>>>) {
        let Some(fields) = fields else {
            self.model.identity = DEFAULT_IDENTITY.iter().map(|s| (*s).to_owned()).collect();
            return;
        };
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for field in fields {
            let name = field.value.as_str();
            if !IDENTITY_FIELDS.contains(&name) {
                let d = Diagnostic::new(
                    Code::E0205,
                    field.span,
                    format!("`{name}` is not a field of a sampling request"),
                    "unknown field",
                )
                .suggest(
                    name,
                    IDENTITY_FIELDS.iter().copied(),
                    field.span,
                    Vocabulary::Name,
                    str::to_owned,
                )
                .unwrap_or_else(|d| {
                    d.help(format!("identity fields are {}", list(IDENTITY_FIELDS)))
                });
                self.push(d);
                continue;
            }
            if let Some(first) = seen.get(name) {
                self.push(
                    Diagnostic::new(
                        Code::E0206,
                        field.span,
                        format!("`{name}` is listed twice"),
                        "listed again",
                    )
                    .related(*first, "first listed here")
                    .help("list each field once"),
                );
                continue;
            }
            seen.insert(name, field.span);
            if KNOBS.contains(&name) {
                self.push(
                    Diagnostic::new(
                        Code::W0207,
                        field.span,
                        format!("`{name}` is a tuning knob; a server can vary it to dodge stored denials"),
                        "knob in the identity",
                    )
                    .help(format!("remove `{name}` from `identity` unless a change in it really is a new request")),
                );
            }
            self.model.identity.push(name.to_owned());
        }
        if !seen.contains_key("messages") {
            let span = fields
                .first()
                .map_or(Span::default(), |f| f.span)
                .to(fields.last().map_or(Span::default(), |f| f.span));
            self.push(
                Diagnostic::new(
                    Code::W0208,
                    span,
                    "the identity does not include `messages`",
                    "requests with different prompts look identical",
                )
                .help("add `messages` to `identity`"),
            );
        }
    }

    fn reason_decl(&mut self, decl: &ReasonDecl) -> Option<ReasonProps> {
        let name = decl.name.value.as_str();
        if let Some(first) = self.declared.get(name) {
            self.push(
                Diagnostic::new(
                    Code::E0402,
                    decl.name.span,
                    format!("reason `{name}` is declared twice"),
                    "declared again",
                )
                .related(*first, "first declared here")
                .help("merge the two declarations"),
            );
            return None;
        }
        let builtin = builtin::get(name);
        if builtin.is_none() {
            if !name.contains('.') {
                self.push(
                    Diagnostic::new(
                        Code::E0406,
                        decl.name.span,
                        format!("reason `{name}` has no namespace"),
                        "needs a dotted name",
                    )
                    .help(format!(
                        "write it with your own namespace, like `acme.{name}`"
                    )),
                );
            } else if name.starts_with("policy.") || name.starts_with("user.") {
                let d = Diagnostic::new(
                    Code::E0405,
                    decl.name.span,
                    format!(
                        "`{name}` is not a built-in reason, and `policy.`/`user.` are reserved for them"
                    ),
                    "unknown built-in",
                )
                .suggest(
                    name,
                    builtin::ALL.iter().map(|b| b.name),
                    decl.name.span,
                    Vocabulary::Name,
                    str::to_owned,
                )
                .unwrap_or_else(|d| {
                    d.help("use your own namespace for a custom reason, like `acme.too_expensive`")
                });
                self.push(d);
            }
        }
        self.declared.insert(name.to_owned(), decl.name.span);
        let base = builtin.map_or(
            ReasonSpec {
                retryable: false,
                ttl: Ttl::Forever,
                code: self.model.error_code,
                message: format!("Sampling denied: {name}"),
            },
            |b| builtin::spec(b, self.model.error_code),
        );
        let mut props = ReasonProps {
            spec: base,
            retryable: None,
            ttl: None,
            code: false,
        };
        let mut seen: HashMap<&str, Span> = HashMap::new();
        let narrows = builtin.is_some_and(|b| b.outcome != builtin::Outcome::Deny);
        for stmt in &decl.body.stmts {
            let keyword = stmt.kind.keyword();
            if let ReasonStmtKind::Bad(bad) = &stmt.kind {
                self.push(reread::statement(
                    bad,
                    stmt.keyword,
                    reread::BlockKind::Reason,
                ));
                continue;
            }
            if let Some(first) = seen.get(keyword) {
                self.push(duplicate(keyword, stmt.span, *first));
                continue;
            }
            seen.insert(stmt.kind.keyword(), stmt.span);
            // The consent cooldown's reason is fixed this round: the engine
            // reads only the built-in spec (`docs/spec/language.md`).
            if name == builtin::CONSENT_COOLDOWN {
                self.push(
                    Diagnostic::new(
                        Code::E0411,
                        stmt.span,
                        format!("`{keyword}` cannot be set for `{name}`"),
                        "fixed",
                    )
                    .help(format!(
                        "`{name}` is built in and fixed; remove `{keyword}`"
                    )),
                );
                continue;
            }
            if narrows
                && !matches!(stmt.kind, ReasonStmtKind::Message(_))
                && !(name == builtin::USER_APPROVED && matches!(stmt.kind, ReasonStmtKind::Ttl(_)))
            {
                self.push(
                    Diagnostic::new(
                        Code::E0411,
                        stmt.span,
                        format!("`{keyword}` means nothing for `{name}`"),
                        "never applies",
                    )
                    .help(format!("`{name}` never denies; remove `{keyword}`")),
                );
                continue;
            }
            match &stmt.kind {
                ReasonStmtKind::Retryable(value) => {
                    props.spec.retryable = value.value;
                    props.retryable = Some(value.span);
                }
                ReasonStmtKind::Ttl(ttl) => {
                    let parsed = match ttl {
                        TtlSyntax::Duration(q) => {
                            values::duration(self, q, "ttl").map(Ttl::AfterMs)
                        }
                        TtlSyntax::Keyword(k) => match k.value.as_str() {
                            "until_reset" => Some(Ttl::UntilReset),
                            "forever" => Some(Ttl::Forever),
                            _ => Some(Ttl::None),
                        },
                    };
                    if let Some(ttl) = parsed {
                        props.spec.ttl = ttl;
                    }
                    props.ttl = Some(stmt.span);
                }
                ReasonStmtKind::Message(message) => {
                    self.placeholders(message);
                    props.spec.message = message.value.clone();
                }
                ReasonStmtKind::Code(code) => {
                    if let Some(value) = values::int_value(self, code) {
                        let use_ = if name == builtin::USER_DENIED {
                            codes_rule::Use::UserDenied
                        } else {
                            codes_rule::Use::Reason
                        };
                        if let Some(d) = codes_rule::check(value, code.span, self.protocol, use_) {
                            self.push(d);
                        }
                        // One outside `i32` is an error above.
                        if let Ok(code) = i32::try_from(value) {
                            props.spec.code = code;
                        }
                        props.code = true;
                    }
                }
                ReasonStmtKind::Bad(_) => {}
            }
        }
        if decl.body.close.is_none() {
            self.unclosed(decl.body.open, decl.body.stmts.last().map(|s| s.span));
        }
        if builtin.is_none() && props.retryable.is_none() {
            self.push(
                Diagnostic::new(Code::W0408, decl.name.span, format!("`{name}` does not say whether it is retryable"), "retryable: false")
                    .help("add `retryable false` (or `retryable true` for a transient denial) to the block"),
            );
        }
        self.model
            .reasons
            .insert(name.to_owned(), props.spec.clone());
        Some(props)
    }

    /// Reads a message template the way the runtime renders it
    /// (`docs/spec/frames.md`, "Messages"): `{{` and `}}` are literal braces,
    /// `{name}` is a placeholder. An unknown name, a lone `}` and an unclosed
    /// `{` are `E0407`: the runtime would copy them as written, which is never
    /// what the author meant.
    fn placeholders(&mut self, message: &StringLit) {
        let text = message.value.as_str();
        let mut pos = 0;
        while let Some(found) = text[pos..].find(['{', '}']) {
            let at = pos + found;
            let brace = &text[at..];
            if brace.starts_with("{{") || brace.starts_with("}}") {
                pos = at + 2;
                continue;
            }
            if brace.starts_with('}') {
                let span = template_span(message, at, at + 1);
                self.push(
                    Diagnostic::new(
                        Code::E0407,
                        span,
                        "lone `}` in message".to_owned(),
                        "no `{` before it",
                    )
                    .help("write `}}` for a literal brace"),
                );
                pos = at + 1;
                continue;
            }
            let Some(close) = brace.find('}') else {
                let span = template_span(message, at, at + 1);
                self.push(
                    Diagnostic::new(
                        Code::E0407,
                        span,
                        "unclosed `{` in message".to_owned(),
                        "no `}` after it",
                    )
                    .help("close the placeholder, or write `{{` for a literal brace"),
                );
                return;
            };
            let name = &brace[1..close];
            if !builtin::PLACEHOLDERS.contains(&name) {
                let span = template_span(message, at, at + close + 1);
                let mut d = Diagnostic::new(
                    Code::E0407,
                    span,
                    format!("unknown placeholder `{{{name}}}`"),
                    "not a placeholder",
                );
                d = match did_you_mean(name, builtin::PLACEHOLDERS.iter().copied()) {
                    Some(s) => d.help(format!("did you mean `{{{s}}}`?")),
                    None => d.help(format!(
                        "placeholders are {}; write `{{{{` and `}}}}` for literal braces",
                        list(builtin::PLACEHOLDERS)
                    )),
                };
                self.push(d);
            }
            pos = at + close + 1;
        }
    }

    fn reason_rules(&mut self, decl: &ReasonDecl, props: ReasonProps) {
        let name = decl.name.value.as_str();
        let (by_budget_use, others, used) = match self.producers.get(name) {
            Some(p) => (p.by_budget, p.by_other.clone(), !p.uses.is_empty()),
            None => (false, Vec::new(), false),
        };
        if props.spec.retryable && props.spec.ttl == Ttl::Forever {
            let span = props.ttl.or(props.retryable).unwrap_or(decl.name.span);
            let mut d = Diagnostic::new(
                Code::E0403,
                span,
                format!("`{name}` is retryable but stored forever: every retry would be refused from the store"),
                "contradiction",
            )
            .help("give it a duration, like `ttl 60s`, or make it `retryable false`");
            if let Some(r) = props.retryable {
                d = d.related(r, "declared retryable here");
            }
            self.push(d);
        }
        if props.spec.ttl == Ttl::UntilReset {
            let by_budget = name == builtin::BUDGET_EXHAUSTED || by_budget_use;
            if !by_budget || !others.is_empty() {
                let why = if others.is_empty() {
                    "no `budget` statement produces it".to_owned()
                } else {
                    format!(
                        "`{}` produces it, and only budgets have windows that reset",
                        others
                            .iter()
                            .map(|s| s.keyword())
                            .collect::<Vec<_>>()
                            .join("`, `")
                    )
                };
                self.push(
                    Diagnostic::new(
                        Code::E0404,
                        props.ttl.unwrap_or(decl.name.span),
                        format!("`{name}` uses `ttl until_reset` but {why}"),
                        "no window to reset",
                    )
                    .help("give it a duration, like `ttl 60s`, or `forever`"),
                );
            }
        }
        if builtin::get(name).is_none() && !used {
            self.push(
                Diagnostic::new(
                    Code::W0410,
                    decl.name.span,
                    format!("reason `{name}` is never used"),
                    "declared here",
                )
                .help(format!(
                    "produce it with `as {name}` on a statement that denies, or remove it"
                )),
            );
        }
    }

    /// Takes in a block's check as if the block had been checked here, in
    /// file order: its findings, and its reason uses for the file-level
    /// rules; then the file-level finding of a missing `}`.
    fn merge_block(&mut self, block: &Block<Stmt>, checked: BlockCheck) -> Arc<PartialBlock> {
        self.diagnostics.extend(checked.diagnostics);
        let current = self.current_block;
        self.clauses.extend(
            checked
                .clauses
                .into_iter()
                .map(|(statement, name, span)| (current, statement, name, span)),
        );
        for (name, by_budget, by_other, uses) in checked.producers {
            let entry = self.producers.entry(name).or_default();
            entry.by_budget |= by_budget;
            for statement in by_other {
                if !entry.by_other.contains(&statement) {
                    entry.by_other.push(statement);
                }
            }
            entry.uses.extend(uses);
        }
        if block.close.is_none() {
            self.unclosed(block.open, checked.last);
        }
        checked.block
    }

    /// Checks a `defaults` or `server` block and returns what it states.
    /// Each statement is checked by the shape of its values and recorded as
    /// its declaration says (`statements.rs`). Only `sampling` is named
    /// here: `sampling off` leaves the rest of a server block unreachable.
    fn block(&mut self, block: &Block<Stmt>, is_server: bool) -> PartialBlock {
        let mut out = PartialBlock::default();
        let mut seen: HashMap<Statement, Span> = HashMap::new();
        // The spans of a repeatable statement's recorded items, in order.
        let mut repeated: HashMap<Statement, Vec<Span>> = HashMap::new();
        let mut sampling_off: Option<Span> = None;
        for stmt in &block.stmts {
            let StmtKind::Known(statement, args) = &stmt.kind else {
                if let StmtKind::Bad(bad) = &stmt.kind {
                    self.push(reread::statement(
                        bad,
                        stmt.keyword,
                        reread::BlockKind::Policy,
                    ));
                }
                continue;
            };
            let statement = *statement;
            let decl = statement.decl();
            if !statement.repeatable() {
                if let Some(first) = seen.get(&statement) {
                    self.push(duplicate(decl.keyword(), stmt.span, *first));
                    continue;
                }
                seen.insert(statement, stmt.span);
            }
            if let Some(d) = decl.lint.and_then(|lint| lint(self.protocol, stmt)) {
                self.push(d);
            }
            let reason = decl
                .reason
                .map(|own| self.reason_use(args.reason(), own, statement));
            if let Args::Switch(on, _) = args
                && statement == Statement::Sampling
                && !on.value
            {
                sampling_off = Some(stmt.span);
            }
            let Some(value) = self.value(decl, args) else {
                continue;
            };
            match out.state(statement, value, reason) {
                Ok(true) if statement.repeatable() => {
                    repeated.entry(statement).or_default().push(stmt.span);
                }
                Ok(_) => {}
                Err(i) => {
                    let first = repeated
                        .get(&statement)
                        .and_then(|spans| spans.get(i))
                        .copied()
                        .unwrap_or(stmt.span);
                    self.push(
                        duplicate(decl.keyword(), stmt.span, first).help(statement.repeated_help()),
                    );
                }
            }
        }
        if let (true, Some(off)) = (is_server, sampling_off) {
            for stmt in &block.stmts {
                // `retry_alert` watches the refusals `sampling off` gives.
                if !matches!(
                    stmt.kind,
                    StmtKind::Known(Statement::Sampling | Statement::RetryAlert, _)
                        | StmtKind::Bad(_)
                ) {
                    self.push(
                        Diagnostic::new(
                            Code::W0604,
                            stmt.span,
                            format!(
                                "`{}` has no effect: sampling is off for this server",
                                stmt.kind.keyword()
                            ),
                            "never reached",
                        )
                        .related(off, "sampling is turned off here")
                        .help("remove the statement, or turn sampling on"),
                    );
                }
            }
        }
        out
    }

    /// A statement's values, checked by their shape; `None` after a finding.
    fn value(&mut self, decl: &StatementDecl, args: &Args) -> Option<Value> {
        let keyword = decl.keyword();
        match (decl.shape, args) {
            (Shape::Switch, Args::Switch(on, _)) => Some(Value::Switch(on.value)),
            (Shape::Word, Args::Word(word)) => Some(Value::Word(word.value.clone())),
            (Shape::Quantity(unit), Args::Quantity(q, _)) => {
                // Zero would refuse every request: say how to do that on purpose.
                let zero = if decl.denies() && unit != Unit::Duration {
                    values::Zero::Limit
                } else {
                    values::Zero::Plain
                };
                values::quantity(self, q, unit, keyword, zero).map(Value::Number)
            }
            (
                Shape::Rate,
                Args::Rate {
                    count,
                    window,
                    reason: _,
                },
            ) => {
                // Zero refuses everything only for a statement that denies
                // (`rate`); for `retry_alert` it is merely not positive.
                let zero = if decl.denies() {
                    values::Zero::Refuses
                } else {
                    values::Zero::Plain
                };
                let count = values::quantity(self, count, Unit::Count, keyword, zero);
                let window = values::quantity(
                    self,
                    window,
                    Unit::Duration,
                    &format!("{keyword} window"),
                    values::Zero::Plain,
                );
                Some(Value::Rate {
                    count: count?,
                    window_ms: window?,
                })
            }
            (
                Shape::Budget,
                Args::Budget {
                    limit,
                    metric,
                    window,
                    reason: _,
                },
            ) => {
                let metric = if metric.value == "tokens" {
                    BudgetMetric::Tokens
                } else {
                    BudgetMetric::Requests
                };
                let window = match window {
                    WindowSyntax::Calendar(unit) => Some(Window::Calendar(
                        statements::calendar_unit(&unit.value).unwrap_or(CalendarUnit::Day),
                    )),
                    WindowSyntax::Rolling(q) => values::quantity(
                        self,
                        q,
                        Unit::Duration,
                        &format!("{keyword} window"),
                        values::Zero::Plain,
                    )
                    .map(Window::RollingMs),
                };
                let limit =
                    values::quantity(self, limit, Unit::Count, keyword, values::Zero::Refuses);
                Some(Value::Budget {
                    limit: limit?,
                    metric,
                    window: window?,
                })
            }
            (Shape::Strings, Args::Strings(strings)) => {
                let mut list = Vec::new();
                let mut seen: HashSet<&str> = HashSet::new();
                for string in strings {
                    if string.value.is_empty() {
                        self.push(
                            Diagnostic::new(
                                Code::E0603,
                                string.span,
                                "empty model pattern",
                                "names no model",
                            )
                            .help("write a model name or a glob, like `\"claude-*\"`"),
                        );
                    } else if !seen.insert(&string.value) {
                        self.push(
                            Diagnostic::new(
                                Code::E0106,
                                string.span,
                                format!("model `{}` is listed twice", string.value),
                                "listed again",
                            )
                            .help("list each model once"),
                        );
                    } else {
                        list.push(string.value.clone());
                    }
                }
                Some(Value::Strings(list))
            }
            // The parser reads each statement's values by its shape, so
            // these never disagree.
            _ => None,
        }
    }

    /// Resolves `as NAME` (or the built-in default) and records who produces it.
    fn reason_use(
        &mut self,
        clause: Option<&Spanned<String>>,
        default: &str,
        statement: Statement,
    ) -> String {
        let Some(clause) = clause else {
            self.produced_by(default, statement);
            return default.to_owned();
        };
        let name = clause.value.as_str();
        match builtin::get(name) {
            Some(b) if b.outcome != builtin::Outcome::Deny => {
                self.push(
                    Diagnostic::new(
                        Code::E0409,
                        clause.span,
                        format!("`{name}` is not a denial reason"),
                        "cannot deny",
                    )
                    .help(format!(
                        "remove `as {name}`, or name a denial reason such as `{default}`"
                    )),
                );
                return default.to_owned();
            }
            Some(b) if !builtin::may_deny_as(default, name) => {
                self.push(borrowed_reason(clause.span, b, default, statement));
                return default.to_owned();
            }
            Some(_) => {}
            None if !self.declared.contains_key(name)
                && self
                    .context_declared
                    .binary_search_by(|d| d.as_str().cmp(name))
                    .is_err() =>
            {
                // The declared names nearest in sorted order, a bounded
                // number: a suggestion costs no more in a file of 100,000
                // reasons than in one of a hundred.
                let around = self.context_declared.partition_point(|d| d.as_str() < name);
                let near = &self.context_declared[around.saturating_sub(SUGGEST_AROUND)
                    ..(around + SUGGEST_AROUND).min(self.context_declared.len())];
                let candidates: Vec<String> = near
                    .iter()
                    .cloned()
                    .chain(
                        builtin::ALL
                            .iter()
                            .filter(|b| b.outcome == builtin::Outcome::Deny)
                            .map(|b| b.name.to_owned()),
                    )
                    .collect();
                let mut candidates: Vec<&str> = candidates.iter().map(String::as_str).collect();
                candidates.sort_unstable();
                let declare =
                    format!("declare it: `reason {name} {{ retryable false; ttl forever }}`");
                let d = Diagnostic::new(
                    Code::E0401,
                    clause.span,
                    format!("reason `{name}` is not declared"),
                    "undeclared reason",
                )
                .suggest(
                    name,
                    candidates,
                    clause.span,
                    Vocabulary::Name,
                    str::to_owned,
                )
                .map(|d| {
                    let help = d.help.clone().unwrap_or_default();
                    d.help(format!("{help} Otherwise {declare}"))
                })
                .unwrap_or_else(|d| d.help(declare));
                self.push(d);
                return default.to_owned();
            }
            None => {}
        }
        self.clauses
            .push((self.current_block, statement, name.to_owned(), clause.span));
        self.producers
            .entry(name.to_owned())
            .or_default()
            .uses
            .push(clause.span);
        self.produced_by(name, statement);
        name.to_owned()
    }

    /// Records that `statement` produces `reason`.
    fn produced_by(&mut self, reason: &str, statement: Statement) {
        let entry = self.producers.entry(reason.to_owned()).or_default();
        if statement.decl().resets() {
            entry.by_budget = true;
        } else if !entry.by_other.contains(&statement) {
            entry.by_other.push(statement);
        }
    }
}

struct ReasonProps {
    spec: ReasonSpec,
    retryable: Option<Span>,
    ttl: Option<Span>,
    code: bool,
}

/// E0413: `as` names a built-in deny reason that belongs to something else
/// (the user's refusal, or another statement's reason).
fn borrowed_reason(
    span: Span,
    borrowed: &builtin::Builtin,
    own: &str,
    statement: Statement,
) -> Diagnostic {
    let name = borrowed.name;
    let resets = statement.decl().resets();
    let statement = statement.keyword();
    let (message, label) = if name.starts_with("user.") {
        (
            format!(
                "`{name}` is the user's answer to a consent prompt, not a reason `{statement}` can deny with"
            ),
            "reserved for the user",
        )
    } else {
        // The first statement declared with this reason as its own.
        let owner = Statement::ALL
            .iter()
            .find(|s| s.decl().reason == Some(name))
            .map_or("another statement", |s| s.keyword());
        (
            format!("`{name}` is the reason of `{owner}`, not of `{statement}`"),
            "another statement's reason",
        )
    };
    let ttl = match borrowed.ttl {
        Ttl::AfterMs(ms) => format!("{}s", ms.div_ceil(1000)),
        Ttl::UntilReset if resets => "until_reset".to_owned(),
        Ttl::UntilReset | Ttl::Forever => "forever".to_owned(),
        Ttl::None => "none".to_owned(),
    };
    let custom = format!("acme.{statement}_denied");
    Diagnostic::new(Code::E0413, span, message, label)
        .help(format!(
            "declare a reason of your own, `reason {custom} {{ retryable {}; ttl {ttl} }}`, and write `as {custom}`; or remove `as {name}` to deny as `{own}`",
            borrowed.retryable
        ))
        .note("the runtime relies on what built-in reasons mean: a stored `user.denied` is replayed as the user's refusal, and a stored `tools` denial is skipped for requests without tools")
}

fn duplicate(keyword: &str, span: Span, first: Span) -> Diagnostic {
    Diagnostic::new(
        Code::E0106,
        span,
        format!("`{keyword}` is stated twice in this block"),
        "stated again",
    )
    .related(first, "first stated here")
    .help("remove one of the two; only one can apply")
}

fn unclosed(open: Span, last: Option<Span>) -> Diagnostic {
    let at = last.map_or(open.end, |s| s.end);
    Diagnostic::new(
        Code::E0003,
        open,
        "this block is never closed",
        "unclosed `{`",
    )
    .help("add `}` after the block's last statement")
    .fix("insert `}`", Span::new(at, at), "\n}")
}

/// `a`, `b` or `c` as inline code.
pub(crate) fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("`{s}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// The reason table, for hovers and `mcpc explain`.
pub fn reason_docs() -> BTreeMap<&'static str, &'static str> {
    builtin::ALL.iter().map(|b| (b.name, b.summary)).collect()
}

/// The span of `start..end` of a message's value. The literal's span
/// covers the source text; escapes can shift offsets, so point inside
/// only when there are none.
fn template_span(message: &StringLit, start: usize, end: usize) -> Span {
    let raw_len = message.span.len().saturating_sub(2);
    if raw_len == message.value.len() {
        let base = message.span.start + 1;
        Span::new(base + start, base + end)
    } else {
        message.span
    }
}
