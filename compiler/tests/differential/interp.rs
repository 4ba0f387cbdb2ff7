//! A direct interpreter of a checked `.mcpolicy` syntax tree: the reference
//! model the compiled table and the runtime's `Engine` are tested against.
//!
//! It is written from the specification (`docs/spec/language.md`, `evaluation.md`,
//! the built-in reason table) and reads the syntax tree itself: not the
//! checker's model, not the lowered table, not the engine's helpers. Its
//! glob matcher, calendar, unit conversions, block merge, built-in reasons,
//! spend history and decision memory are its own, kept as plain as possible
//! (a recursive glob, a list of spend rows, a map of decisions) so that they
//! are easy to read against the specification.
//!
//! One thing is borrowed from the runtime on purpose, because it is tested
//! on its own elsewhere: the byte count of RFC 8785 canonical JSON
//! (`identity::canonical_len`, for `max_input`; `tests/cases/identity` and
//! `runtime/tests/identity.rs` hold it). Request identity is modelled as an
//! equivalence (a sorted-key JSON text of the identity payload, integral
//! numbers written as integers), which is what the decision memory needs;
//! the identity hash itself is tested against frozen vectors elsewhere.
//! (The harness, not the interpreter, uses the runtime's identity and
//! `Table::entry_for` to find the engine's stored rows.)
//!
//! Where the original design left an order open (`docs/spec/evaluation.md` now fixes it), the interpreter states the choice it
//! shares with the engine: `max_messages` is checked before `max_input`;
//! an effective block's budgets are the inherited ones (not overridden) in
//! `defaults` order, then the server's own in source order, and the first
//! that does not fit refuses (after the rate). Rules the specification states and the
//! interpreter spells out: a token budget reserves `maxTokens` as trimmed;
//! a refusal of consent returns the budgets' reservation but not the rate's
//! (the server did ask); a fixed ttl never outlives the window that produced
//! a rate or budget denial; a stored `tools off` denial answers only a
//! request that offers tools (tools are not part of the identity); a
//! reported deadline miss under a block without `deadline` is
//! `policy.deadline`; a hint without a string name is dropped by `models`.

use std::collections::BTreeMap;

use mcpolicy_compiler::syntax::{
    Args, ItemKind, Quantity, ReasonStmtKind, SourceFile, Statement, Stmt, StmtKind, TtlSyntax,
    WindowSyntax,
};
use serde_json::{Map, Value};

pub type Millis = i64;

// ------------------------------------------------------------------ reasons

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    After(u64),
    UntilReset,
    Forever,
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub retryable: bool,
    pub ttl: Ttl,
    pub code: i64,
    /// The declared message template; `None`: the built-in one.
    pub message: Option<String>,
}

/// The built-in reason table (`docs/spec/language.md`, "Built-in reasons"): name, retryable, ttl, fixed code
/// (`None`: the policy's `error_code`).
const BUILT_IN: &[(&str, bool, Ttl, Option<i64>)] = &[
    ("policy.sampling_disabled", false, Ttl::Forever, None),
    ("policy.tools_disabled", false, Ttl::Forever, None),
    ("policy.input_too_large", false, Ttl::Forever, None),
    ("policy.max_scope", false, Ttl::None, None),
    ("policy.max_tokens", false, Ttl::None, None),
    ("policy.model", false, Ttl::None, None),
    ("policy.rate_limit", true, Ttl::After(60_000), None),
    ("policy.budget_exhausted", false, Ttl::UntilReset, None),
    ("policy.deadline", true, Ttl::After(30_000), None),
    ("user.denied", false, Ttl::Forever, Some(-1)),
    ("user.approved", false, Ttl::Forever, None),
    ("policy.consent_cooldown", true, Ttl::UntilReset, None),
];

/// The consent cooldown (`docs/spec/evaluation.md`, "Consent cooldown"): a
/// server with this many prompts the user did not approve in the last
/// hour is not asked again until one leaves it.
const COOLDOWN_PROMPTS: u64 = 3;
const COOLDOWN_MS: Millis = 3_600_000;

// ------------------------------------------------------------------- blocks

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    None,
    ThisServer,
    AllServers,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::None => "none",
            Scope::ThisServer => "thisServer",
            Scope::AllServers => "allServers",
        }
    }

    fn parse(text: &str) -> Option<Scope> {
        match text {
            "none" => Some(Scope::None),
            "thisServer" => Some(Scope::ThisServer),
            "allServers" => Some(Scope::AllServers),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsentMode {
    Always,
    First,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cal {
    Hour,
    Day,
    Week,
    Month,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Win {
    Cal(Cal),
    Rolling(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRule {
    pub tokens: bool,
    pub limit: u64,
    pub window: Win,
    pub reason: String,
}

impl BudgetRule {
    /// The budget as a cause names it: metric, limit and window (a block
    /// has one budget per metric and window, so this names it uniquely).
    pub fn name(&self) -> String {
        let metric = if self.tokens { "tokens" } else { "requests" };
        let window = match self.window {
            Win::Cal(Cal::Hour) => "hour".to_owned(),
            Win::Cal(Cal::Day) => "day".to_owned(),
            Win::Cal(Cal::Week) => "week".to_owned(),
            Win::Cal(Cal::Month) => "month".to_owned(),
            Win::Rolling(ms) => format!("{ms}ms"),
        };
        format!("budget {} {metric} per {window}", self.limit)
    }
}

/// Which server block (its index among the server blocks; `None`: the
/// defaults alone), which statement (its keyword; a budget by
/// [`BudgetRule::name`]) and which evaluation step (numbered as in
/// `docs/spec/evaluation.md`) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CauseView {
    pub block: Option<usize>,
    pub statement: Option<String>,
    pub step: u8,
}

/// The evaluation steps the interpreter names (`docs/spec/evaluation.md`).
pub mod step {
    pub const REPLAY: u8 = 3;
    pub const SWITCHES: u8 = 4;
    pub const INPUT_LIMITS: u8 = 5;
    pub const TRIMS: u8 = 6;
    pub const RATE: u8 = 7;
    pub const BUDGETS: u8 = 8;
    pub const CONSENT: u8 = 9;
    pub const ALLOW: u8 = 10;
}

/// The rules that govern one server, merged statement by statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub sampling: (bool, String),
    pub tools: (bool, String),
    pub max_context: Scope,
    pub max_input: Option<(u64, String)>,
    pub max_messages: Option<(u64, String)>,
    pub max_tokens: Option<u64>,
    pub rate: Option<(u64, u64, String)>,
    pub budgets: Vec<BudgetRule>,
    pub deadline: Option<(u64, String)>,
    pub consent: ConsentMode,
    pub models: Option<Vec<String>>,
}

impl Block {
    /// How many statements of the block can deny with `reason`: when more
    /// than one, a stored denial's reason (and timing) does not say which
    /// did, and the engine, which derives a replay's cause from them
    /// rather than storing it, may name another.
    pub fn deniers_of(&self, reason: &str) -> usize {
        let deadline = self
            .deadline
            .as_ref()
            .map_or("policy.deadline", |d| d.1.as_str());
        [
            (!self.sampling.0).then_some(self.sampling.1.as_str()),
            (!self.tools.0).then_some(self.tools.1.as_str()),
            self.max_messages.as_ref().map(|m| m.1.as_str()),
            self.max_input.as_ref().map(|m| m.1.as_str()),
            self.rate.as_ref().map(|r| r.2.as_str()),
            Some(deadline),
            Some("user.denied"),
        ]
        .into_iter()
        .flatten()
        .chain(self.budgets.iter().map(|b| b.reason.as_str()))
        .filter(|r| *r == reason)
        .count()
    }

    /// Whether `tools off` shares its reason with another statement of the
    /// block (via `as`): then a stored denial with that reason does not say
    /// which statement produced it, and the engine, which tells a stored
    /// tools denial by its reason name, cannot follow the rule "a tools
    /// denial answers only a request that offers tools" (a finding of this
    /// test; see `shared_tools_reason_*` in `differential.rs`).
    pub fn tools_reason_shared(&self) -> bool {
        let r = &self.tools.1;
        !self.tools.0
            && (self.sampling.1 == *r
                || self.max_input.as_ref().is_some_and(|l| l.1 == *r)
                || self.max_messages.as_ref().is_some_and(|l| l.1 == *r)
                || self.rate.as_ref().is_some_and(|l| l.2 == *r)
                || self.budgets.iter().any(|b| b.reason == *r)
                || self
                    .deadline
                    .as_ref()
                    .map_or(r == "policy.deadline", |d| d.1 == *r))
    }
}

/// What nobody wrote: everything allowed, `consent first`.
fn unwritten() -> Block {
    Block {
        sampling: (true, "policy.sampling_disabled".into()),
        tools: (true, "policy.tools_disabled".into()),
        max_context: Scope::AllServers,
        max_input: None,
        max_messages: None,
        max_tokens: None,
        rate: None,
        budgets: Vec::new(),
        deadline: None,
        consent: ConsentMode::First,
        models: None,
    }
}

fn factor(q: &Quantity, table: &[(&str, u64)]) -> u64 {
    let unit = q.unit.as_ref().map_or("", |u| u.value.as_str());
    table
        .iter()
        .find(|(name, _)| *name == unit)
        .map_or(1, |(_, f)| *f)
}

fn number(q: &Quantity) -> u64 {
    u64::try_from(q.number.value.unwrap_or(0)).unwrap_or(0)
}

fn count(q: &Quantity) -> u64 {
    number(q) * factor(q, &[("k", 1_000), ("M", 1_000_000)])
}

fn bytes(q: &Quantity) -> u64 {
    number(q)
        * factor(
            q,
            &[
                ("B", 1),
                ("KiB", 1024),
                ("MiB", 1024 * 1024),
                ("GiB", 1 << 30),
            ],
        )
}

fn millis(q: &Quantity) -> u64 {
    number(q)
        * factor(
            q,
            &[
                ("ms", 1),
                ("s", 1_000),
                ("m", 60_000),
                ("h", 3_600_000),
                ("d", 86_400_000),
            ],
        )
}

fn reason_or(clause: &Option<mcpolicy_compiler::syntax::Spanned<String>>, default: &str) -> String {
    clause
        .as_ref()
        .map_or_else(|| default.to_owned(), |c| c.value.clone())
}

/// One statement applied over what is inherited. Budgets collect separately.
fn apply(block: &mut Block, stmt: &Stmt, budgets: &mut Vec<BudgetRule>) {
    let StmtKind::Known(statement, args) = &stmt.kind else {
        return;
    };
    match (statement, args) {
        (Statement::Sampling, Args::Switch(on, r)) => {
            block.sampling = (on.value, reason_or(r, "policy.sampling_disabled"))
        }
        (Statement::Tools, Args::Switch(on, r)) => {
            block.tools = (on.value, reason_or(r, "policy.tools_disabled"))
        }
        (Statement::MaxContext, Args::Word(s)) => {
            block.max_context = Scope::parse(&s.value).unwrap_or(Scope::None)
        }
        (Statement::MaxInput, Args::Quantity(q, r)) => {
            block.max_input = Some((bytes(q), reason_or(r, "policy.input_too_large")))
        }
        (Statement::MaxMessages, Args::Quantity(q, r)) => {
            block.max_messages = Some((count(q), reason_or(r, "policy.input_too_large")))
        }
        (Statement::MaxTokens, Args::Quantity(q, _)) => block.max_tokens = Some(count(q)),
        (
            Statement::Rate,
            Args::Rate {
                count: c,
                window,
                reason,
            },
        ) => {
            block.rate = Some((
                count(c),
                millis(window),
                reason_or(reason, "policy.rate_limit"),
            ))
        }
        (
            Statement::Budget,
            Args::Budget {
                limit,
                metric,
                window,
                reason,
            },
        ) => budgets.push(BudgetRule {
            tokens: metric.value == "tokens",
            limit: count(limit),
            window: match window {
                WindowSyntax::Calendar(unit) => Win::Cal(match unit.value.as_str() {
                    "hour" => Cal::Hour,
                    "week" => Cal::Week,
                    "month" => Cal::Month,
                    _ => Cal::Day,
                }),
                WindowSyntax::Rolling(q) => Win::Rolling(millis(q)),
            },
            reason: reason_or(reason, "policy.budget_exhausted"),
        }),
        (Statement::Deadline, Args::Quantity(q, r)) => {
            block.deadline = Some((millis(q), reason_or(r, "policy.deadline")))
        }
        (Statement::Consent, Args::Word(mode)) => {
            block.consent = match mode.value.as_str() {
                "always" => ConsentMode::Always,
                "never" => ConsentMode::Never,
                _ => ConsentMode::First,
            }
        }
        (Statement::Models, Args::Strings(list)) => {
            block.models = Some(list.iter().map(|s| s.value.clone()).collect())
        }
        // The parser reads each statement with its declared shape.
        _ => {}
    }
}

/// `*` any run (also empty), `?` one character, anything else itself.
pub fn glob(pattern: &[char], text: &[char]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some(('*', rest)) => (0..=text.len()).any(|skip| glob(rest, &text[skip..])),
        Some(('?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

pub fn glob_str(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob(&p, &t)
}

// ------------------------------------------------------------------- policy

/// The policy as the interpreter reads it from the tree.
#[derive(Debug, Clone)]
pub struct Policy {
    pub protocol_2026: bool,
    pub error_code: i64,
    pub identity: Vec<String>,
    pub reasons: BTreeMap<String, Reason>,
    defaults: Vec<Stmt>,
    servers: Vec<(String, Vec<Stmt>)>,
}

impl Policy {
    pub fn read(file: &SourceFile) -> Policy {
        let mut protocol_2026 = false;
        let mut error_code = -32010;
        let mut identity: Vec<String> = [
            "systemPrompt",
            "messages",
            "includeContext",
            "modelPreferences",
        ]
        .map(str::to_owned)
        .to_vec();
        let mut decls = Vec::new();
        let mut defaults = Vec::new();
        let mut servers = Vec::new();
        for item in &file.items {
            match &item.kind {
                ItemKind::Protocol(p) => protocol_2026 = p.value == "2026-07-28",
                ItemKind::ErrorCode(code) => error_code = code.value.unwrap_or(error_code),
                ItemKind::Identity(fields) => {
                    identity = fields.iter().map(|f| f.value.clone()).collect()
                }
                ItemKind::Reason(decl) => decls.push(decl),
                ItemKind::Defaults(block) => defaults = block.stmts.clone(),
                ItemKind::Server(server) => {
                    servers.push((server.pattern.value.clone(), server.body.stmts.clone()))
                }
                ItemKind::Version(_) | ItemKind::Bad(_) => {}
            }
        }
        let mut reasons: BTreeMap<String, Reason> = BUILT_IN
            .iter()
            .map(|(name, retryable, ttl, code)| {
                (
                    (*name).to_owned(),
                    Reason {
                        retryable: *retryable,
                        ttl: *ttl,
                        code: code.unwrap_or(error_code),
                        message: None,
                    },
                )
            })
            .collect();
        for decl in decls {
            // A custom reason: not retryable, stored until the block changes.
            let reason = reasons.entry(decl.name.value.clone()).or_insert(Reason {
                retryable: false,
                ttl: Ttl::Forever,
                code: error_code,
                message: None,
            });
            for stmt in &decl.body.stmts {
                match &stmt.kind {
                    ReasonStmtKind::Retryable(b) => reason.retryable = b.value,
                    ReasonStmtKind::Ttl(TtlSyntax::Duration(q)) => {
                        reason.ttl = Ttl::After(millis(q))
                    }
                    ReasonStmtKind::Ttl(TtlSyntax::Keyword(k)) => {
                        reason.ttl = match k.value.as_str() {
                            "until_reset" => Ttl::UntilReset,
                            "forever" => Ttl::Forever,
                            _ => Ttl::None,
                        }
                    }
                    ReasonStmtKind::Code(c) => reason.code = c.value.unwrap_or(reason.code),
                    ReasonStmtKind::Message(m) => reason.message = Some(m.value.clone()),
                    ReasonStmtKind::Bad(_) => {}
                }
            }
        }
        Policy {
            protocol_2026,
            error_code,
            identity,
            reasons,
            defaults,
            servers,
        }
    }

    /// The block of the first server pattern that matches, merged over
    /// `defaults`; `None` for the pattern: no block matched.
    pub fn block_for(&self, server_id: &str) -> (Option<usize>, Block) {
        let mut block = unwritten();
        let mut inherited = Vec::new();
        for stmt in &self.defaults {
            apply(&mut block, stmt, &mut inherited);
        }
        let found = self
            .servers
            .iter()
            .position(|(pattern, _)| glob_str(pattern, server_id));
        let mut own = Vec::new();
        if let Some(i) = found {
            for stmt in &self.servers[i].1 {
                apply(&mut block, stmt, &mut own);
            }
        }
        inherited.retain(|b| {
            !own.iter()
                .any(|o| o.tokens == b.tokens && o.window == b.window)
        });
        inherited.extend(own);
        block.budgets = inherited;
        (found, block)
    }

    pub fn reason(&self, name: &str) -> Reason {
        self.reasons.get(name).cloned().unwrap_or(Reason {
            retryable: false,
            ttl: Ttl::None,
            code: self.error_code,
            message: None,
        })
    }

    /// What a server's stored decisions depend on: its merged block and
    /// every reason that block can give a request (its statements', the
    /// trims', the user's, and the deadline miss's, which a client can
    /// report under any block). `docs/spec/store.md`, "Digests and staleness": an edit that changes any of it
    /// invalidates the server's stored decisions, and nothing else does.
    pub fn meaning(&self, server_id: &str) -> (Block, Vec<(String, Reason)>) {
        let (_, block) = self.block_for(server_id);
        let mut names: Vec<String> = vec![
            block.sampling.1.clone(),
            block.tools.1.clone(),
            "policy.max_scope".into(),
            "policy.max_tokens".into(),
            "policy.model".into(),
            "user.denied".into(),
            "user.approved".into(),
            block
                .deadline
                .as_ref()
                .map_or_else(|| "policy.deadline".to_owned(), |d| d.1.clone()),
        ];
        names.extend(block.max_input.iter().map(|l| l.1.clone()));
        names.extend(block.max_messages.iter().map(|l| l.1.clone()));
        names.extend(block.rate.iter().map(|r| r.2.clone()));
        names.extend(block.budgets.iter().map(|b| b.reason.clone()));
        names.sort();
        names.dedup();
        let reasons = names
            .into_iter()
            .map(|n| {
                let r = self.reason(&n);
                (n, r)
            })
            .collect();
        (block, reasons)
    }
}

// ----------------------------------------------------------------- calendar

const DAY: i64 = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_of(y: i64, m: i64, d: i64) -> i64 {
    let mut days = 0i64;
    if y >= 1970 {
        for year in 1970..y {
            days += if leap(year) { 366 } else { 365 };
        }
    } else {
        for year in y..1970 {
            days -= if leap(year) { 366 } else { 365 };
        }
    }
    for month in 1..m {
        days += month_len(y, month);
    }
    days + d - 1
}

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn month_len(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if leap(y) => 29,
        _ => 28,
    }
}

/// (year, month, day) of a day number.
fn date_of(mut days: i64) -> (i64, i64, i64) {
    let mut y = 1970;
    loop {
        let len = if leap(y) { 366 } else { 365 };
        if days < 0 {
            y -= 1;
            days += if leap(y) { 366 } else { 365 };
        } else if days >= len {
            days -= len;
            y += 1;
        } else {
            break;
        }
    }
    let mut m = 1;
    while days >= month_len(y, m) {
        days -= month_len(y, m);
        m += 1;
    }
    (y, m, days + 1)
}

pub fn timestamp(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Millis {
    days_of(y, mo, d) * DAY + ((h * 60 + mi) * 60 + s) * 1000
}

/// `[start, end)` of the UTC calendar unit containing `now`.
fn calendar_window(unit: Cal, now: Millis) -> (Millis, Millis) {
    let day = now.div_euclid(DAY);
    match unit {
        Cal::Hour => {
            let start = now.div_euclid(3_600_000) * 3_600_000;
            (start, start + 3_600_000)
        }
        Cal::Day => (day * DAY, (day + 1) * DAY),
        Cal::Week => {
            // 1970-01-01 was a Thursday: Monday is 3 days before it.
            let monday = day - (day + 3).rem_euclid(7);
            (monday * DAY, (monday + 7) * DAY)
        }
        Cal::Month => {
            let (y, m, _) = date_of(day);
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            (days_of(y, m, 1) * DAY, days_of(ny, nm, 1) * DAY)
        }
    }
}

pub fn rfc3339(ms: Millis) -> String {
    let day = ms.div_euclid(DAY);
    let rest = ms.rem_euclid(DAY);
    let (y, m, d) = date_of(day);
    let (h, mi, s, milli) = (
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000,
    );
    if milli == 0 {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
    }
}

// ----------------------------------------------------------------- requests

/// What a decided request looks like from outside, for both sides.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// Refused before any decision, with this JSON-RPC code.
    Invalid { code: i64 },
    /// A denial frame.
    Deny(DenyView),
    /// Allowed (or trimmed); `pending`: the user was asked and never answered.
    Grant(GrantView),
}

#[derive(Debug, Clone, PartialEq)]
pub struct DenyView {
    pub consent_asked: bool,
    pub reason: String,
    pub code: i64,
    pub retryable: bool,
    /// `error.data`, parsed.
    pub data: Value,
    pub replayed: bool,
    pub represented: u64,
    /// What decided it (for a replay: the stored decision's statement).
    pub cause: Option<CauseView>,
}

/// Model hints trimmed: (requested names, kept names, allowed globs).
pub type ModelView = (Vec<Option<String>>, Vec<String>, Vec<String>);

#[derive(Debug, Clone, PartialEq, Default)]
pub struct GrantView {
    pub consent_asked: bool,
    pub pending: bool,
    pub replayed: bool,
    pub deadline_ms: Option<u64>,
    /// (requested, applied) of `includeContext`.
    pub context: Option<(String, String)>,
    /// (requested, applied) of `maxTokens`.
    pub max_tokens: Option<(u64, u64)>,
    /// (requested names, kept names, allowed globs) of the model hints.
    pub model: Option<ModelView>,
    /// The params the completion runs with.
    pub params: Value,
    /// What decided it: the first trim, `consent` when the user was asked.
    pub cause: Option<CauseView>,
}

/// What the test does with a request the user is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Approve,
    Refuse,
    /// The dialog is never answered.
    Never,
}

/// A stored decision: what the decision memory holds for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    pub allow: bool,
    pub reason: String,
    /// `None`: until the block changes.
    pub expires_at: Option<Millis>,
    pub represented: u64,
    /// `error.data` text of a denial.
    pub data: Option<Value>,
    /// The denial came from `tools off`: tools are not part of a request's
    /// identity, so it answers only a request that offers tools.
    pub by_tools: bool,
    /// The statement that decided a denial.
    pub statement: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum CounterKey {
    Rate,
    Budget(bool, Win),
}

/// One limit an admission must fit: the rate or a budget.
struct Check {
    counter: CounterKey,
    amount: u64,
    limit: u64,
    /// A calendar window `[start, end)`; `None`: rolling over `ms`.
    fixed: Option<(Millis, Millis)>,
    ms: u64,
    reason: String,
    /// The statement, as a cause names it.
    statement: String,
}

#[derive(Debug, Clone, Copy)]
struct Row {
    at: Millis,
    amount: u64,
    admission: u64,
}

/// What one admission spent: for settling and refunds.
#[derive(Debug, Clone)]
pub struct Admitted {
    server: String,
    admission: u64,
    block: Block,
}

/// The interpreter's state: decisions and spend of every server.
#[derive(Debug, Default)]
pub struct State {
    pub memory: BTreeMap<(String, String), Memory>,
    spend: BTreeMap<(String, CounterKey), Vec<Row>>,
    /// Each server's consent prompts: 1 while not approved, 0 once approved.
    prompts: BTreeMap<String, Vec<Row>>,
    admissions: u64,
}

/// The `error.data` of a denial.
fn data(reason: &str, server: &str, retryable: bool, timing: Option<(&str, Value)>) -> Value {
    let mut map = Map::new();
    map.insert("reason".into(), reason.into());
    map.insert("server".into(), server.into());
    map.insert("retryable".into(), retryable.into());
    if let Some((key, value)) = timing {
        map.insert(key.into(), value);
    }
    Value::Object(map)
}

/// A request validated: its params, or the JSON-RPC code that refuses it.
pub fn validate(request: &Value) -> Result<Map<String, Value>, i64> {
    let Value::Object(object) = request else {
        return Err(-32600);
    };
    if object.get("jsonrpc") != Some(&Value::from("2.0"))
        || object.get("method") != Some(&Value::from("sampling/createMessage"))
        || !matches!(object.get("id"), Some(Value::String(_) | Value::Number(_)))
    {
        return Err(-32600);
    }
    let Some(Value::Object(params)) = object.get("params") else {
        return Err(-32602);
    };
    if !matches!(params.get("messages"), Some(Value::Array(_))) {
        return Err(-32602);
    }
    let Some(max_tokens) = whole(params.get("maxTokens")) else {
        return Err(-32602);
    };
    match params.get("includeContext") {
        None => {}
        Some(Value::String(s)) if Scope::parse(s).is_some() => {}
        // `docs/spec/evaluation.md` step 1: an unknown `includeContext` is -32602, never widened.
        Some(_) => return Err(-32602),
    }
    // `docs/spec/evaluation.md` step 1: each field of the schema's type (MCP's
    // `CreateMessageRequest`; only the types the generator varies).
    let typed = |field: &str, ok: fn(&Value) -> bool| params.get(field).is_none_or(ok);
    let hints_ok =
        |prefs: &Value| prefs.is_object() && prefs.get("hints").is_none_or(Value::is_array);
    if !(typed("systemPrompt", Value::is_string)
        && typed("tools", Value::is_array)
        && typed("toolChoice", Value::is_object)
        && params.get("modelPreferences").is_none_or(hints_ok)
        && typed("temperature", Value::is_number))
    {
        return Err(-32602);
    }
    // `docs/spec/evaluation.md`, step 1: an integral `maxTokens` written `9000.0` is handed
    // on as the integer it is, which an integer-typed client accepts.
    let mut params = params.clone();
    params.insert("maxTokens".into(), max_tokens.into());
    Ok(params)
}

/// A non-negative whole number however it is written (`500`, `500.0`).
fn whole(value: Option<&Value>) -> Option<u64> {
    let number = value?.as_number()?;
    if let Some(n) = number.as_u64() {
        return Some(n);
    }
    let f = number.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0).then_some(f as u64)
}

/// A text equal for two payloads exactly when their canonical forms are.
fn canonical_text(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for key in keys {
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                canonical_text(&map[key], out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical_text(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Number(n) => match whole(Some(value)) {
            Some(w) => out.push_str(&w.to_string()),
            None => out.push_str(&n.to_string()),
        },
        other => out.push_str(&other.to_string()),
    }
}

/// The refusal key's payload (`docs/spec/identity.md`, "The refusal key"):
/// each identity field as the user is shown it, read here from the
/// specification's list, not from the runtime's code.
fn identity_of(policy: &Policy, params: &Map<String, Value>) -> String {
    let mut payload = Map::new();
    for field in &policy.identity {
        let shown = params.get(field).and_then(|value| shown(field, value));
        payload.insert(field.clone(), shown.unwrap_or(Value::Null));
    }
    let mut out = String::new();
    canonical_text(&Value::Object(payload), &mut out);
    out
}

/// The approval key's payload (`docs/spec/identity.md`, "The approval
/// key"): the forwarded params without `_meta` and `task`, tagged so that
/// it never equals a refusal payload.
fn approval_of(forwarded: &Value) -> String {
    let mut covered = forwarded.as_object().cloned().unwrap_or_default();
    covered.remove("_meta");
    covered.remove("task");
    let mut out = String::from("approval ");
    canonical_text(&Value::Object(covered), &mut out);
    out
}

/// Unicode's default-ignorable code points (`DerivedCoreProperties.txt`).
fn invisible(c: char) -> bool {
    matches!(u32::from(c),
        0xAD | 0x34F | 0x61C | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFF8 | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0000..=0xE0FFF)
}

/// Text as shown: invisible characters gone, ends trimmed.
fn shown_text(value: &Value) -> Value {
    match value {
        Value::String(s) => {
            let visible: String = s.chars().filter(|c| !invisible(*c)).collect();
            Value::from(visible.trim())
        }
        Value::Array(items) => Value::Array(items.iter().map(shown_text).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), shown_text(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Only `keep`'s members of an object, each as shown.
fn only(value: &Value, keep: &[&str]) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| keep.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), shown_text(v)))
                .collect(),
        ),
        other => shown_text(other),
    }
}

/// One content block as shown, by its type.
fn shown_block(block: &Value) -> Value {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => only(block, &["type", "text"]),
        "image" | "audio" => only(block, &["type", "data", "mimeType"]),
        "tool_use" => only(block, &["type", "name", "input"]),
        "resource_link" => only(
            block,
            &["type", "uri", "name", "title", "description", "mimeType"],
        ),
        "resource" => {
            let mut out = only(block, &["type"]);
            if let (Value::Object(out), Some(resource)) = (&mut out, block.get("resource")) {
                out.insert(
                    "resource".into(),
                    only(resource, &["uri", "mimeType", "text", "blob"]),
                );
            }
            out
        }
        "tool_result" => {
            let mut out = only(block, &["type", "structuredContent", "isError"]);
            if let Value::Object(out) = &mut out {
                if out.get("isError") == Some(&Value::Bool(false)) {
                    out.remove("isError");
                }
                if let Some(content) = block.get("content") {
                    let content = match content {
                        Value::Array(blocks) => {
                            Value::Array(blocks.iter().map(shown_block).collect())
                        }
                        one => shown_block(one),
                    };
                    out.insert("content".into(), content);
                }
            }
            out
        }
        _ => match block {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| *k != "_meta" && *k != "annotations")
                    .map(|(k, v)| (k.clone(), shown_text(v)))
                    .collect(),
            ),
            other => shown_text(other),
        },
    }
}

/// An identity field as the user is shown it; `None` when it means what
/// an absent one does.
fn shown(field: &str, value: &Value) -> Option<Value> {
    match field {
        "systemPrompt" => Some(shown_text(value)),
        "includeContext" => (value != "none").then(|| value.clone()),
        "messages" => Some(match value {
            Value::Array(messages) => Value::Array(
                messages
                    .iter()
                    .map(|m| {
                        let mut out = only(m, &["role"]);
                        if let (Value::Object(out), Some(content)) = (&mut out, m.get("content")) {
                            let content = match content {
                                Value::Array(blocks) if blocks.len() == 1 => {
                                    shown_block(&blocks[0])
                                }
                                Value::Array(blocks) => {
                                    Value::Array(blocks.iter().map(shown_block).collect())
                                }
                                one => shown_block(one),
                            };
                            out.insert("content".into(), content);
                        }
                        out
                    })
                    .collect(),
            ),
            other => shown_text(other),
        }),
        "modelPreferences" => {
            let Value::Object(prefs) = value else {
                return Some(shown_text(value));
            };
            match prefs.get("hints") {
                None => None,
                Some(Value::Array(hints)) if hints.is_empty() => None,
                Some(Value::Array(hints)) => Some(serde_json::json!({
                    "hints": hints.iter().map(|h| only(h, &["name"])).collect::<Vec<_>>()
                })),
                Some(other) => Some(serde_json::json!({ "hints": shown_text(other) })),
            }
        }
        _ => Some(value.clone()),
    }
}

fn offers_tools(params: &Map<String, Value>) -> bool {
    let tools = match params.get("tools") {
        None | Some(Value::Null) => false,
        Some(Value::Array(list)) => !list.is_empty(),
        Some(_) => true,
    };
    tools || params.get("toolChoice").is_some_and(|c| !c.is_null())
}

/// When a decision stored at `now` expires: `None` not stored,
/// `Some(None)` until the block changes; a fixed ttl never outlives the
/// condition (`reset`) that produced the denial.
fn expiry(ttl: Ttl, now: Millis, reset: Option<Millis>) -> Option<Option<Millis>> {
    match ttl {
        Ttl::None => None,
        Ttl::Forever => Some(None),
        Ttl::UntilReset => Some(reset),
        Ttl::After(ms) => {
            let after = now + ms as i64;
            Some(Some(reset.map_or(after, |r| after.min(r))))
        }
    }
}

fn ceil_second(ms: Millis) -> Millis {
    ms.div_euclid(1000) * 1000 + if ms.rem_euclid(1000) == 0 { 0 } else { 1000 }
}

/// One step's result, and what a grant admitted (to settle or report on).
pub struct Outcome {
    pub observed: Observed,
    pub admitted: Option<Admitted>,
    /// The key a denial of the request is remembered under: its refusal key.
    pub key: Option<(String, String)>,
    /// The key an approval is remembered under (`consent first` only).
    pub approval: Option<(String, String)>,
}

impl State {
    /// Decides one request (`docs/spec/evaluation.md`, steps 1–10) and, when the
    /// user is asked, takes `answer` as the user's.
    pub fn decide(
        &mut self,
        policy: &Policy,
        server: &str,
        request: &Value,
        sampling_context: bool,
        answer: Answer,
        now: Millis,
    ) -> Outcome {
        // 1. Validation.
        let params = match validate(request) {
            Ok(params) => params,
            Err(code) => {
                return Outcome {
                    observed: Observed::Invalid { code },
                    admitted: None,
                    key: None,
                    approval: None,
                };
            }
        };
        let (found, block) = policy.block_for(server);
        let cause = |statement: Option<String>, step: u8| {
            Some(CauseView {
                block: found,
                statement,
                step,
            })
        };
        // 2. Identity.
        let key = (server.to_owned(), identity_of(policy, &params));

        // 6. Trims (`grant.replayed` is set after the replay).
        let mut grant = GrantView {
            deadline_ms: block.deadline.as_ref().map(|d| d.0),
            ..GrantView::default()
        };
        let mut run = params.clone();
        let requested = match params.get("includeContext") {
            Some(Value::String(s)) => Scope::parse(s).unwrap_or(Scope::AllServers),
            _ => Scope::None,
        };
        let max = if policy.protocol_2026 && !sampling_context {
            Scope::None
        } else {
            block.max_context
        };
        if requested > max {
            grant.context = Some((requested.name().into(), max.name().into()));
            run.insert("includeContext".into(), max.name().into());
        }
        let asked_tokens = whole(params.get("maxTokens"));
        let mut reserve = asked_tokens.or(block.max_tokens).unwrap_or(0);
        if let (Some(max), Some(asked)) = (block.max_tokens, asked_tokens)
            && asked > max
        {
            grant.max_tokens = Some((asked, max));
            run.insert("maxTokens".into(), max.into());
            reserve = max;
        }
        if let Some(models) = &block.models
            && let Some(hints) = params
                .get("modelPreferences")
                .and_then(|p| p.get("hints"))
                .and_then(Value::as_array)
        {
            let name = |h: &Value| h.get("name").and_then(Value::as_str).map(str::to_owned);
            let kept: Vec<Value> = hints
                .iter()
                .filter(|h| name(h).is_some_and(|n| models.iter().any(|m| glob_str(m, &n))))
                .cloned()
                .collect();
            if kept.len() != hints.len() {
                grant.model = Some((
                    hints.iter().map(name).collect(),
                    kept.iter().filter_map(name).collect(),
                    models.clone(),
                ));
                if let Some(Value::Object(prefs)) = run.get_mut("modelPreferences") {
                    prefs.insert("hints".into(), Value::Array(kept));
                }
            }
        }
        grant.params = Value::Object(run);
        // Only `consent first` stores approvals, under the approval key:
        // the forwarded params, without `_meta` and `task`.
        let approval = (block.consent == ConsentMode::First)
            .then(|| (server.to_owned(), approval_of(&grant.params)));
        let done = |observed| Outcome {
            observed,
            admitted: None,
            key: Some(key.clone()),
            approval: approval.clone(),
        };

        // 3. Replay: a denial under the refusal key, else an approval
        // under the approval key (`docs/spec/store.md`, "The atomic decision").
        let mut approved_before = false;
        let live = |m: &&mut Memory| m.expires_at.is_none_or(|at| now < at);
        let hit = match self.memory.get_mut(&key).filter(live).filter(|m| !m.allow) {
            Some(denial) => Some(denial),
            None => approval
                .as_ref()
                .and_then(|a| self.memory.get_mut(a))
                .filter(live)
                .filter(|m| m.allow),
        };
        if let Some(stored) = hit {
            stored.represented += 1;
            if stored.allow {
                approved_before = true;
            } else if !stored.by_tools || offers_tools(&params) {
                let reason = policy.reason(&stored.reason);
                return done(Observed::Deny(DenyView {
                    consent_asked: false,
                    reason: stored.reason.clone(),
                    code: reason.code,
                    retryable: reason.retryable,
                    data: stored.data.clone().unwrap_or(Value::Null),
                    replayed: true,
                    represented: stored.represented,
                    // Compared only where the reason names one statement.
                    cause: (block.deniers_of(&stored.reason) == 1)
                        .then(|| cause(stored.statement.clone(), step::REPLAY))
                        .flatten(),
                }));
            }
        }

        // 4. Switches.
        if !block.sampling.0 {
            let r = block.sampling.1.clone();
            let why = cause(Some("sampling".into()), step::SWITCHES);
            return done(self.deny(policy, &key, &r, None, None, now, false, why));
        }
        if !block.tools.0 && offers_tools(&params) {
            let r = block.tools.1.clone();
            let why = cause(Some("tools".into()), step::SWITCHES);
            return done(self.deny(policy, &key, &r, None, None, now, true, why));
        }
        // 5. Input limits.
        if let Some((max, r)) = &block.max_messages {
            let n = params["messages"].as_array().map_or(0, Vec::len) as u64;
            if n > *max {
                let why = cause(Some("max_messages".into()), step::INPUT_LIMITS);
                return done(self.deny(policy, &key, r, None, None, now, false, why));
            }
        }
        if let Some((max, r)) = &block.max_input {
            let size: u64 = ["systemPrompt", "messages"]
                .iter()
                .filter_map(|f| params.get(*f))
                .map(mcpolicy_runtime::identity::canonical_len)
                .sum();
            if size > *max {
                let why = cause(Some("max_input".into()), step::INPUT_LIMITS);
                return done(self.deny(policy, &key, r, None, None, now, false, why));
            }
        }

        // 6. Trims: computed before the replay (they are pure), since the
        // approval key covers the params as forwarded.
        grant.replayed = approved_before;

        // 7–8. Rate, then budgets: all fit and are spent, or the first that
        // does not fit refuses and nothing is spent.
        let mut checks: Vec<Check> = Vec::new();
        if let Some((n, window, r)) = &block.rate {
            checks.push(Check {
                counter: CounterKey::Rate,
                amount: 1,
                limit: *n,
                fixed: None,
                ms: *window,
                reason: r.clone(),
                statement: "rate".into(),
            });
        }
        for b in &block.budgets {
            let (fixed, ms) = match b.window {
                Win::Cal(unit) => (Some(calendar_window(unit, now)), 0),
                Win::Rolling(ms) => (None, ms),
            };
            checks.push(Check {
                counter: CounterKey::Budget(b.tokens, b.window),
                amount: if b.tokens { reserve } else { 1 },
                limit: b.limit,
                fixed,
                ms,
                reason: b.reason.clone(),
                statement: b.name(),
            });
        }
        let ask = match block.consent {
            ConsentMode::Always => true,
            ConsentMode::First => !approved_before,
            ConsentMode::Never => false,
        };
        let mut admitted = None;
        let mut prompt = None;
        if !checks.is_empty() || ask {
            for Check {
                counter,
                amount,
                limit,
                fixed,
                ms,
                reason,
                statement,
            } in &checks
            {
                let rows: Vec<Row> = self
                    .spend
                    .get(&(server.to_owned(), *counter))
                    .cloned()
                    .unwrap_or_default();
                let inside: Vec<Row> = rows
                    .into_iter()
                    .filter(|row| match fixed {
                        Some((start, end)) => *start <= row.at && row.at < *end,
                        None => row.at > now - *ms as i64,
                    })
                    .collect();
                let spent: u64 = inside.iter().map(|r| r.amount).sum();
                if spent + amount <= *limit {
                    continue;
                }
                // When it fits: a calendar window's end, or when enough of
                // the rolling window's oldest spend has left it.
                let available = match fixed {
                    Some((_, end)) => *end,
                    None if amount > limit => now + *ms as i64,
                    None => {
                        let need = spent + amount - limit;
                        let mut freed = 0;
                        let mut at = now + *ms as i64;
                        let mut sorted = inside.clone();
                        sorted.sort_by_key(|r| r.at);
                        for row in sorted {
                            freed += row.amount;
                            if freed >= need {
                                at = row.at + *ms as i64;
                                break;
                            }
                        }
                        at
                    }
                }
                .max(now);
                let observed = if *counter == CounterKey::Rate {
                    let wait = (available - now).max(1);
                    let seconds = (wait + 999) / 1000;
                    self.deny(
                        policy,
                        &key,
                        reason,
                        Some(("retryAfter", Value::from(seconds))),
                        Some(now + seconds * 1000),
                        now,
                        false,
                        cause(Some(statement.clone()), step::RATE),
                    )
                } else {
                    let resets = ceil_second(available);
                    self.deny(
                        policy,
                        &key,
                        reason,
                        Some(("resetsAt", Value::from(rfc3339(resets)))),
                        Some(resets),
                        now,
                        false,
                        cause(Some(statement.clone()), step::BUDGETS),
                    )
                };
                return done(observed);
            }
            // 9. The consent cooldown, admitted with the rest: the server's
            // prompts the user has not approved, in the last hour.
            if ask {
                let mut rows: Vec<Row> = self
                    .prompts
                    .get(server)
                    .map(|rows| {
                        rows.iter()
                            .filter(|r| r.at > now - COOLDOWN_MS)
                            .copied()
                            .collect()
                    })
                    .unwrap_or_default();
                let unapproved: u64 = rows.iter().map(|r| r.amount).sum();
                if unapproved + 1 > COOLDOWN_PROMPTS {
                    rows.sort_by_key(|r| r.at);
                    let need = unapproved + 1 - COOLDOWN_PROMPTS;
                    let mut freed = 0;
                    let mut available = now + COOLDOWN_MS;
                    for row in rows {
                        freed += row.amount;
                        if freed >= need {
                            available = row.at + COOLDOWN_MS;
                            break;
                        }
                    }
                    let seconds = ((available.max(now) - now).max(1) + 999) / 1000;
                    let fixed = Reason {
                        retryable: true,
                        ttl: Ttl::UntilReset,
                        code: policy.error_code,
                        message: None,
                    };
                    let observed = self.deny_as(
                        &fixed,
                        &key,
                        "policy.consent_cooldown",
                        Some(("retryAfter", Value::from(seconds))),
                        Some(now + seconds * 1000),
                        now,
                        false,
                        cause(Some("consent".into()), step::CONSENT),
                    );
                    return done(observed);
                }
            }
            self.admissions += 1;
            if ask {
                self.prompts
                    .entry(server.to_owned())
                    .or_default()
                    .push(Row {
                        at: now,
                        amount: 1,
                        admission: self.admissions,
                    });
                prompt = Some(self.admissions);
            }
            for Check {
                counter, amount, ..
            } in &checks
            {
                self.spend
                    .entry((server.to_owned(), *counter))
                    .or_default()
                    .push(Row {
                        at: now,
                        amount: *amount,
                        admission: self.admissions,
                    });
            }
            admitted = (!checks.is_empty()).then(|| Admitted {
                server: server.to_owned(),
                admission: self.admissions,
                block: block.clone(),
            });
        }

        // 9. Consent.
        if ask {
            grant.consent_asked = true;
            match answer {
                Answer::Never => {
                    // A pending request shows only its trims (the engine's
                    // `PendingConsent` keeps the rest to itself).
                    grant.pending = true;
                    grant.replayed = false;
                    grant.deadline_ms = None;
                }
                Answer::Refuse => {
                    // The reservation goes back (budgets only: the server did ask).
                    if let Some(a) = &admitted {
                        self.settle_budgets(a, |_| true, 0);
                    }
                    let why = cause(Some("consent".into()), step::CONSENT);
                    let mut observed =
                        self.deny(policy, &key, "user.denied", None, None, now, false, why);
                    if let Observed::Deny(d) = &mut observed {
                        d.consent_asked = true;
                    }
                    return done(observed);
                }
                Answer::Approve => {
                    // An approved prompt is not counted by the cooldown.
                    if let Some(rows) = self.prompts.get_mut(server) {
                        for row in rows.iter_mut().filter(|r| Some(r.admission) == prompt) {
                            row.amount = 0;
                        }
                    }
                    if let Some(approval) = &approval
                        && let Some(expires_at) =
                            expiry(policy.reason("user.approved").ttl, now, None)
                    {
                        self.remember(
                            approval.clone(),
                            now,
                            Memory {
                                allow: true,
                                reason: "user.approved".into(),
                                expires_at,
                                represented: 0,
                                data: None,
                                by_tools: false,
                                statement: None,
                            },
                        );
                    }
                }
            }
        }
        // The first trim names a grant's statement; `consent` when asked.
        let trimmed_by = if grant.context.is_some() {
            Some("max_context")
        } else if grant.max_tokens.is_some() {
            Some("max_tokens")
        } else if grant.model.is_some() {
            Some("models")
        } else {
            None
        };
        grant.cause = if grant.consent_asked {
            cause(Some("consent".into()), step::CONSENT)
        } else if let Some(statement) = trimmed_by {
            cause(Some(statement.into()), step::TRIMS)
        } else {
            cause(None, step::ALLOW)
        };
        // 10. Allow.
        Outcome {
            observed: Observed::Grant(grant),
            admitted,
            key: Some(key),
            approval,
        }
    }

    /// A fresh denial, remembered per its reason's ttl.
    #[allow(clippy::too_many_arguments)]
    fn deny(
        &mut self,
        policy: &Policy,
        key: &(String, String),
        reason: &str,
        timing: Option<(&str, Value)>,
        reset: Option<Millis>,
        now: Millis,
        by_tools: bool,
        cause: Option<CauseView>,
    ) -> Observed {
        let spec = policy.reason(reason);
        self.deny_as(&spec, key, reason, timing, reset, now, by_tools, cause)
    }

    /// [`State::deny`] with the reason's spec given.
    #[allow(clippy::too_many_arguments)]
    fn deny_as(
        &mut self,
        spec: &Reason,
        key: &(String, String),
        reason: &str,
        timing: Option<(&str, Value)>,
        reset: Option<Millis>,
        now: Millis,
        by_tools: bool,
        cause: Option<CauseView>,
    ) -> Observed {
        let data = data(reason, &key.0, spec.retryable, timing);
        if let Some(expires_at) = expiry(spec.ttl, now, reset) {
            self.remember(
                key.clone(),
                now,
                Memory {
                    allow: false,
                    reason: reason.to_owned(),
                    expires_at,
                    represented: 0,
                    data: Some(data.clone()),
                    by_tools,
                    statement: cause.as_ref().and_then(|c| c.statement.clone()),
                },
            );
        }
        Observed::Deny(DenyView {
            consent_asked: false,
            reason: reason.to_owned(),
            code: spec.code,
            retryable: spec.retryable,
            data,
            replayed: false,
            represented: 0,
            cause,
        })
    }

    /// Stores a decision, unless a user's answer still in force is there and
    /// this one is not the user's (`docs/spec/store.md`, "What a later
    /// decision may replace"). Memory is dropped on every edit that
    /// changes the server's meaning, so what is here has the current digest.
    fn remember(&mut self, key: (String, String), now: Millis, memory: Memory) {
        let users = |reason: &str| reason.starts_with("user.");
        if let Some(old) = self.memory.get(&key)
            && users(&old.reason)
            && !users(&memory.reason)
            && old.expires_at.is_none_or(|at| now < at)
        {
            return;
        }
        self.memory.insert(key, memory);
    }

    fn settle_budgets(
        &mut self,
        admitted: &Admitted,
        which: impl Fn(&BudgetRule) -> bool,
        to: u64,
    ) {
        for b in admitted.block.budgets.iter().filter(|b| which(b)) {
            if let Some(rows) = self.spend.get_mut(&(
                admitted.server.clone(),
                CounterKey::Budget(b.tokens, b.window),
            )) {
                for row in rows
                    .iter_mut()
                    .filter(|r| r.admission == admitted.admission)
                {
                    row.amount = to;
                }
            }
        }
    }

    /// The real token usage of a granted request replaces its reservation.
    pub fn settle(&mut self, admitted: &Admitted, usage: u64) {
        self.settle_budgets(admitted, |b| b.tokens, usage);
    }

    /// The client reports that a granted request missed its deadline.
    pub fn deadline_missed(
        &mut self,
        policy: &Policy,
        key: &(String, String),
        now: Millis,
    ) -> Observed {
        let (found, block) = policy.block_for(&key.0);
        let reason = block
            .deadline
            .as_ref()
            .map_or_else(|| "policy.deadline".to_owned(), |d| d.1.clone());
        let spec = policy.reason(&reason);
        let timing = match spec.ttl {
            Ttl::After(ms) if spec.retryable => {
                Some(("retryAfter", Value::from(ms.div_ceil(1000))))
            }
            _ => None,
        };
        let cause = Some(CauseView {
            block: found,
            statement: Some("deadline".into()),
            step: step::ALLOW,
        });
        self.deny(policy, key, &reason, timing, None, now, false, cause)
    }

    /// The policy was edited: the stored decisions of every server whose
    /// meaning changed are gone; spend stays (it happened).
    pub fn edit(&mut self, before: &Policy, after: &Policy) {
        self.memory
            .retain(|(server, _), _| before.meaning(server) == after.meaning(server));
    }

    /// The decision remembered for `key` that is still in force at `now`.
    pub fn live(&self, key: &(String, String), now: Millis) -> Option<&Memory> {
        self.memory
            .get(key)
            .filter(|m| m.expires_at.is_none_or(|at| now < at))
    }
}
