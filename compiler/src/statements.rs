//! Every statement of the language, declared once (as `codes.rs` declares
//! every diagnostic code, and ruff every rule).
//!
//! A policy statement is declared by the runtime (`runtime/src/statements.rs`:
//! its keyword, its `EffectiveBlock` field with the built-in default, its
//! built-in reason, its step) and given its syntax here, by an exhaustive
//! match ([`syntax`]): the grammar rule that reads it, the [`Shape`] of its
//! values (which decides how they are read, checked, laid out, completed and
//! re-read when they are wrong), and its documentation. [`statements!`]
//! reads both. Everything else is derived from them: the keyword
//! lists, hover and explain text, completion, [`PartialBlock`] and the merge
//! of `defaults` into each server block ([`merge`]), the effective block
//! written back as statements ([`effective_lines`]), what an unset statement
//! shows ([`Statement::unset_text`]), and the checker's handling of the
//! statement.
//!
//! Adding a statement whose values have an existing shape and whose runtime
//! field has an existing type touches exactly the places `ARCHITECTURE.md`
//! lists ("A statement is declared once"): five in code (the runtime's
//! entry, the grammar rule with the TextMate keyword, the engine's check
//! with the loader's range check, the [`syntax`] entry here, the tests), and
//! four documents that list statements by hand, which
//! `compiler/tests/language_table.rs` holds to the declaration. The
//! language is specified in `docs/spec/language.md` (section "Statements"),
//! whose statement table is generated from here.
//!
//! The `reason` properties and the top-level items are declared here too
//! ([`REASON_PROPERTIES`], [`ITEMS`]), as documentation tables: their meaning
//! is fixed by the reason table and the file layout, not by a block.

use std::fmt::Debug;
use std::sync::LazyLock;

use mcpolicy_grammar::Rule;
use mcpolicy_runtime::table::{
    Budget, BudgetMetric, CalendarUnit, Consent, ContextScope, Deadline, EffectiveBlock, Limit,
    ProtocolRevision, Rate, RetryAlert, Switch, Ttl, Window,
};

use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::syntax::{Args, Stmt};

/// A keyword's documentation, for hovers, completion and `mcpc explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeywordDoc {
    /// The keyword.
    pub keyword: &'static str,
    /// How it is written.
    pub syntax: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// What happens to a request it stops (empty for declarations).
    pub outcome: &'static str,
}

/// The unit a quantity is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// A plain number with an optional `k` or `M`: `4096`, `200k`.
    Count,
    /// Bytes, with a unit written apart: `64 KiB`.
    Size,
    /// Milliseconds, with a unit joined: `60s`.
    Duration,
}

impl Unit {
    /// The grammar rule a quantity of this unit is read with.
    pub fn rule(self) -> Rule {
        match self {
            Unit::Count => Rule::count,
            Unit::Size => Rule::size,
            Unit::Duration => Rule::duration,
        }
    }

    /// The units or suffixes it accepts.
    pub fn suffixes(self) -> &'static [&'static str] {
        match self {
            Unit::Count => COUNT_SUFFIXES,
            Unit::Size => SIZE_UNITS,
            Unit::Duration => DURATION_UNITS,
        }
    }

    /// Its value in base units (ones, bytes, milliseconds), as written back.
    pub fn render(self, value: u64) -> String {
        match self {
            Unit::Count => value.to_string(),
            Unit::Size => size(value),
            Unit::Duration => duration(value),
        }
    }
}

/// What a statement's values look like after its keyword. The shape decides
/// the syntax node ([`Args`]), the checks, the layout and the completion, so
/// statements of one shape share all of that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// `on|off`.
    Switch,
    /// One word of the statement's `values`: `max_context none`.
    Word,
    /// One quantity: `max_input 64 KiB`, `max_tokens 4096`, `deadline 60s`.
    Quantity(Unit),
    /// `COUNT per DURATION`.
    Rate,
    /// `COUNT requests|tokens per CALENDAR-UNIT|DURATION`; a block may state
    /// several, one per metric and window, and its windows reset.
    Budget,
    /// `"GLOB", …`.
    Strings,
}

/// A statement-specific check beyond its shape (a revision rule, say).
pub type Lint = fn(ProtocolRevision, &Stmt) -> Option<Diagnostic>;

/// One statement, as declared.
#[derive(Debug, Clone, Copy)]
pub struct StatementDecl {
    /// Which statement.
    pub statement: Statement,
    /// The grammar rule that reads it.
    pub rule: Rule,
    /// Its keyword and documentation.
    pub doc: KeywordDoc,
    /// The shape of its values.
    pub shape: Shape,
    /// The built-in reason its denial carries. `Some` means it denies and
    /// takes `as REASON`.
    pub reason: Option<&'static str>,
    /// A complete example, for help texts.
    pub example: &'static str,
    /// The words it takes (shapes `Switch` and `Word`), each with its meaning.
    pub values: &'static [(&'static str, &'static str)],
    /// What one of those words is, for messages: `a context scope`.
    pub noun: &'static str,
    /// A check of its own, beyond the shape's.
    pub lint: Option<Lint>,
}

impl StatementDecl {
    /// The keyword.
    pub fn keyword(&self) -> &'static str {
        self.doc.keyword
    }

    /// Whether it denies, and so takes `as REASON`.
    pub fn denies(&self) -> bool {
        self.reason.is_some()
    }

    /// Whether its denials can wait for a window to reset (`ttl until_reset`).
    pub fn resets(&self) -> bool {
        self.shape == Shape::Budget
    }
}

/// What the compiler adds to a statement the runtime declares: how it is
/// read and written, and its documentation ([`syntax`]).
struct Syntax {
    rule: Rule,
    shape: Shape,
    syntax: &'static str,
    meaning: &'static str,
    outcome: &'static str,
    example: &'static str,
    values: &'static [(&'static str, &'static str)],
    noun: &'static str,
    lint: Option<Lint>,
}

/// A statement's values after checking, by shape, before they become the
/// runtime's type for the statement's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `on` or `off`.
    Switch(bool),
    /// One of the statement's words.
    Word(String),
    /// A quantity in base units.
    Number(u64),
    /// `COUNT per DURATION`.
    Rate {
        /// Requests per window.
        count: u64,
        /// The window.
        window_ms: u64,
    },
    /// A budget.
    Budget {
        /// The limit.
        limit: u64,
        /// What it counts.
        metric: BudgetMetric,
        /// Over which window.
        window: Window,
    },
    /// A list of strings.
    Strings(Vec<String>),
}

/// Where one item of a merged field was taken from: what [`merge_traced`]
/// records as it merges, so that provenance (`mcpc show`, `mcpc eval
/// --explain`, `mcpc diff`) is the merge's own account, not a comparison of
/// values after the fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Taken {
    /// The `i`-th item of the inherited field (a single-valued field has
    /// one item, set or not).
    Base(usize),
    /// The `j`-th item the block states itself, in the order it states them.
    Over(usize),
}

/// How a statement's field of the runtime's `EffectiveBlock` is stated by a
/// block, merged over an inherited one, and written back. Implemented per
/// field type, not per statement: statements with fields of one type share it.
pub trait Slot: Sized {
    /// What one statement states.
    type Item;
    /// What one block states (`None` or empty inherits).
    type Partial: Clone + Debug + Default + PartialEq + Eq;
    /// Whether a block may state it more than once (each with its own key).
    const REPEATABLE: bool = false;
    /// The help of a finding for two statements with one key.
    const REPEATED_HELP: &'static str = "";

    /// The statement's item from its checked value and reason (`None` when
    /// the value does not fit, which the checker has reported).
    fn item(value: Value, reason: Option<String>) -> Option<Self::Item>;
    /// Records an item; `Err(i)` when the `i`-th item stated before has its key.
    fn state(partial: &mut Self::Partial, item: Self::Item) -> Result<(), usize>;
    /// Whether the block states it.
    fn is_stated(partial: &Self::Partial) -> bool;
    /// Whether the block states the line `line` (as [`Slot::lines`] writes it).
    fn states_line(partial: &Self::Partial, _decl: &StatementDecl, _line: &str) -> bool {
        Self::is_stated(partial)
    }
    /// `over` applied on top of `base`.
    fn merge(base: &Self, over: &Self::Partial) -> Self;
    /// [`Slot::merge`], also saying where each item of the result was taken
    /// from. The default is a single-valued field's: the block's own value
    /// when it states one, else the inherited one.
    fn merge_traced(base: &Self, over: &Self::Partial) -> (Self, Vec<Taken>) {
        let taken = if Self::is_stated(over) {
            Taken::Over(0)
        } else {
            Taken::Base(0)
        };
        (Self::merge(base, over), vec![taken])
    }
    /// The effective value as statements; empty when it imposes nothing.
    fn lines(&self, decl: &StatementDecl) -> Vec<String>;
}

/// An optional field's item: how it is made and written back.
pub trait Stated: Clone {
    /// The item from a checked value and reason.
    fn item(value: Value, reason: Option<String>) -> Option<Self>;
    /// The statement that states it.
    fn line(&self, decl: &StatementDecl) -> String;
}

impl<T: Stated + Debug + PartialEq + Eq> Slot for Option<T> {
    type Item = T;
    type Partial = Option<T>;

    fn item(value: Value, reason: Option<String>) -> Option<T> {
        T::item(value, reason)
    }
    fn state(partial: &mut Option<T>, item: T) -> Result<(), usize> {
        *partial = Some(item);
        Ok(())
    }
    fn is_stated(partial: &Option<T>) -> bool {
        partial.is_some()
    }
    fn merge(base: &Self, over: &Option<T>) -> Self {
        Self::merge_traced(base, over).0
    }
    fn merge_traced(base: &Self, over: &Option<T>) -> (Self, Vec<Taken>) {
        match over {
            Some(item) => (Some(item.clone()), vec![Taken::Over(0)]),
            None => (base.clone(), vec![Taken::Base(0)]),
        }
    }
    fn lines(&self, decl: &StatementDecl) -> Vec<String> {
        self.iter().map(|item| item.line(decl)).collect()
    }
}

/// Fields that always hold a value: a block states it or inherits it.
macro_rules! required_slot {
    ($($ty:ty),*) => {$(
        impl Slot for $ty {
            type Item = $ty;
            type Partial = Option<$ty>;

            fn item(value: Value, reason: Option<String>) -> Option<$ty> {
                <$ty as Stated>::item(value, reason)
            }
            fn state(partial: &mut Option<$ty>, item: $ty) -> Result<(), usize> {
                *partial = Some(item);
                Ok(())
            }
            fn is_stated(partial: &Option<$ty>) -> bool {
                partial.is_some()
            }
            fn merge(base: &Self, over: &Option<$ty>) -> Self {
                Self::merge_traced(base, over).0
            }
            fn merge_traced(base: &Self, over: &Option<$ty>) -> (Self, Vec<Taken>) {
                match over {
                    Some(item) => (item.clone(), vec![Taken::Over(0)]),
                    None => (base.clone(), vec![Taken::Base(0)]),
                }
            }
            fn lines(&self, decl: &StatementDecl) -> Vec<String> {
                vec![self.line(decl)]
            }
        }
    )*};
}
required_slot!(Switch, ContextScope, Consent);

/// ` as REASON` when the reason is not the statement's own.
fn as_clause(reason: &str, decl: &StatementDecl) -> String {
    match decl.reason {
        Some(own) if own != reason => format!(" as {reason}"),
        _ => String::new(),
    }
}

impl Stated for Switch {
    fn item(value: Value, reason: Option<String>) -> Option<Self> {
        match value {
            Value::Switch(enabled) => Some(Switch {
                enabled,
                reason: reason.unwrap_or_default(),
            }),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        let word = if self.enabled { "on" } else { "off" };
        format!("{} {word}{}", decl.keyword(), as_clause(&self.reason, decl))
    }
}

impl Stated for ContextScope {
    fn item(value: Value, _: Option<String>) -> Option<Self> {
        match value {
            Value::Word(word) => Some(ContextScope::parse(&word).unwrap_or(ContextScope::None)),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        format!("{} {}", decl.keyword(), self.as_str())
    }
}

impl Stated for Consent {
    fn item(value: Value, _: Option<String>) -> Option<Self> {
        match value {
            Value::Word(word) => Some(match word.as_str() {
                "always" => Consent::Always,
                "never" => Consent::Never,
                _ => Consent::First,
            }),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        let word = match self {
            Consent::Always => "always",
            Consent::First => "first",
            Consent::Never => "never",
        };
        format!("{} {word}", decl.keyword())
    }
}

/// The unit of a one-quantity statement (counts for any other shape).
fn unit_of(decl: &StatementDecl) -> Unit {
    match decl.shape {
        Shape::Quantity(unit) => unit,
        _ => Unit::Count,
    }
}

impl Stated for Limit {
    fn item(value: Value, reason: Option<String>) -> Option<Self> {
        match value {
            Value::Number(max) => Some(Limit {
                max,
                reason: reason.unwrap_or_default(),
            }),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        format!(
            "{} {}{}",
            decl.keyword(),
            unit_of(decl).render(self.max),
            as_clause(&self.reason, decl)
        )
    }
}

impl Stated for u64 {
    fn item(value: Value, _: Option<String>) -> Option<Self> {
        match value {
            Value::Number(n) => Some(n),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        format!("{} {}", decl.keyword(), unit_of(decl).render(*self))
    }
}

impl Stated for Deadline {
    fn item(value: Value, reason: Option<String>) -> Option<Self> {
        match value {
            Value::Number(ms) => Some(Deadline {
                ms,
                reason: reason.unwrap_or_default(),
            }),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        format!(
            "{} {}{}",
            decl.keyword(),
            duration(self.ms),
            as_clause(&self.reason, decl)
        )
    }
}

impl Stated for Rate {
    fn item(value: Value, reason: Option<String>) -> Option<Self> {
        match value {
            Value::Rate { count, window_ms } => Some(Rate {
                count,
                window_ms,
                reason: reason.unwrap_or_default(),
            }),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        format!(
            "{} {} per {}{}",
            decl.keyword(),
            self.count,
            duration(self.window_ms),
            as_clause(&self.reason, decl)
        )
    }
}

impl Stated for RetryAlert {
    fn item(value: Value, _: Option<String>) -> Option<Self> {
        match value {
            Value::Rate { count, window_ms } => Some(RetryAlert { count, window_ms }),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        format!(
            "{} {} per {}",
            decl.keyword(),
            self.count,
            duration(self.window_ms)
        )
    }
}

impl Stated for Vec<String> {
    fn item(value: Value, _: Option<String>) -> Option<Self> {
        match value {
            Value::Strings(list) => Some(list),
            _ => None,
        }
    }
    fn line(&self, decl: &StatementDecl) -> String {
        let list: Vec<String> = self.iter().map(|m| format!("{m:?}")).collect();
        format!("{} {}", decl.keyword(), list.join(", "))
    }
}

/// The key under which a budget overrides an inherited one.
pub fn budget_key(budget: &Budget) -> (BudgetMetric, Window) {
    (budget.metric, budget.window)
}

impl PartialBlock {
    /// The key under which a budget overrides an inherited one.
    pub fn budget_key(budget: &Budget) -> (BudgetMetric, Window) {
        budget_key(budget)
    }
}

impl Slot for Vec<Budget> {
    type Item = Budget;
    type Partial = Vec<Budget>;
    const REPEATABLE: bool = true;
    const REPEATED_HELP: &'static str =
        "two budgets count the same metric over the same window; keep the one you mean";

    fn item(value: Value, reason: Option<String>) -> Option<Budget> {
        match value {
            Value::Budget {
                limit,
                metric,
                window,
            } => Some(Budget {
                metric,
                limit,
                window,
                reason: reason.unwrap_or_default(),
            }),
            _ => None,
        }
    }
    fn state(partial: &mut Vec<Budget>, item: Budget) -> Result<(), usize> {
        if let Some(i) = partial
            .iter()
            .position(|b| budget_key(b) == budget_key(&item))
        {
            return Err(i);
        }
        partial.push(item);
        Ok(())
    }
    fn is_stated(partial: &Vec<Budget>) -> bool {
        !partial.is_empty()
    }
    fn states_line(partial: &Vec<Budget>, decl: &StatementDecl, line: &str) -> bool {
        partial.iter().any(|b| budget_line(b, decl) == line)
    }
    fn merge(base: &Self, over: &Vec<Budget>) -> Self {
        Self::merge_traced(base, over).0
    }
    /// The inherited budgets the block does not override (by key), in their
    /// order, then the block's own.
    fn merge_traced(base: &Self, over: &Vec<Budget>) -> (Self, Vec<Taken>) {
        let mut budgets = Vec::with_capacity(base.len() + over.len());
        let mut taken = Vec::with_capacity(base.len() + over.len());
        for (i, b) in base.iter().enumerate() {
            if !over.iter().any(|o| budget_key(o) == budget_key(b)) {
                budgets.push(b.clone());
                taken.push(Taken::Base(i));
            }
        }
        for (j, o) in over.iter().enumerate() {
            budgets.push(o.clone());
            taken.push(Taken::Over(j));
        }
        (budgets, taken)
    }
    fn lines(&self, decl: &StatementDecl) -> Vec<String> {
        self.iter().map(|b| budget_line(b, decl)).collect()
    }
}

fn budget_line(budget: &Budget, decl: &StatementDecl) -> String {
    let metric = match budget.metric {
        BudgetMetric::Requests => "requests",
        BudgetMetric::Tokens => "tokens",
    };
    format!(
        "{} {} {metric} per {}{}",
        decl.keyword(),
        budget.limit,
        window(budget.window),
        as_clause(&budget.reason, decl)
    )
}

/// A budget statement as written.
pub fn budget(budget: &Budget) -> String {
    budget_line(budget, Statement::Budget.decl())
}

/// The compiler's side of each statement's entry in the runtime's
/// declaration (`runtime/src/statements.rs`): [`Statement`], its
/// [`StatementDecl`] (the runtime's keyword and reason, with [`syntax`] on
/// top), [`PartialBlock`], the merge and the effective lines.
macro_rules! statements {
    (
        decides { $($decides:tt)* }
        alerts { $($alerts:tt)* }
    ) => {
        statements! { @entries $($decides)* $($alerts)* }
    };
    (@entries $(
        $(#[doc = $doc:literal])*
        $variant:ident $(($index:ty))? {
            keyword: $keyword:literal,
            $(#[$attr:meta])*
            field: $field:ident: $ty:ty = $default:expr,
            $(applied: $applied:expr,)?
            reason: $reason:expr,
            $(step: $step:ident,)?
            $(order: $order:literal,)?
        }
    )*) => {
        /// A statement of `defaults` and `server` blocks.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Statement {
            $( #[doc = concat!("`", $keyword, "`.")] $variant, )*
        }

        static DECLS: &[StatementDecl] = &[$({
            let syntax = syntax(Statement::$variant);
            StatementDecl {
                statement: Statement::$variant,
                rule: syntax.rule,
                doc: KeywordDoc {
                    keyword: $keyword,
                    syntax: syntax.syntax,
                    meaning: syntax.meaning,
                    outcome: syntax.outcome,
                },
                shape: syntax.shape,
                reason: $reason,
                example: syntax.example,
                values: syntax.values,
                noun: syntax.noun,
                lint: syntax.lint,
            }
        },)*];

        impl Statement {
            /// Every statement, in declaration order (the order of the
            /// language's documentation and of an effective block's lines).
            pub const ALL: &'static [Statement] = &[$(Statement::$variant,)*];

            /// Whether a block may state it more than once.
            pub fn repeatable(self) -> bool {
                match self {
                    $(Statement::$variant => <$ty as Slot>::REPEATABLE,)*
                }
            }

            /// The help of the finding for a repeated key of a repeatable statement.
            pub fn repeated_help(self) -> &'static str {
                match self {
                    $(Statement::$variant => <$ty as Slot>::REPEATED_HELP,)*
                }
            }
        }

        /// The statements one block states; `None` (or empty) inherits.
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct PartialBlock {
            $(
                #[doc = concat!("`", $keyword, "`.")]
                pub $field: <$ty as Slot>::Partial,
            )*
        }

        impl PartialBlock {
            /// Whether the block states `statement` itself.
            pub fn states(&self, statement: Statement) -> bool {
                match statement {
                    $(Statement::$variant => <$ty as Slot>::is_stated(&self.$field),)*
                }
            }

            /// Whether the block states `line` of `statement` itself.
            pub fn states_line(&self, statement: Statement, line: &str) -> bool {
                match statement {
                    $(Statement::$variant => <$ty as Slot>::states_line(
                        &self.$field,
                        statement.decl(),
                        line,
                    ),)*
                }
            }

            /// Records a checked statement. `Ok(false)` when the value does
            /// not fit the statement (the checker reported why); `Err(i)`
            /// when the `i`-th statement of this kind stated before has the
            /// same key.
            pub fn state(
                &mut self,
                statement: Statement,
                value: Value,
                reason: Option<String>,
            ) -> Result<bool, usize> {
                match statement {
                    $(Statement::$variant => match <$ty as Slot>::item(value, reason) {
                        Some(item) => <$ty as Slot>::state(&mut self.$field, item).map(|()| true),
                        None => Ok(false),
                    },)*
                }
            }
        }

        /// [`merge`], with where each statement's items were taken from
        /// (one [`Taken`] per item, in the order of [`effective_lines`];
        /// a single-valued statement has one, set or not), in declaration
        /// order.
        pub fn merge_traced(
            base: &EffectiveBlock,
            over: &PartialBlock,
        ) -> (EffectiveBlock, Vec<(Statement, Vec<Taken>)>) {
            let mut trace = Vec::with_capacity(Statement::ALL.len());
            let block = EffectiveBlock {$(
                $field: {
                    let (value, taken) = <$ty as Slot>::merge_traced(&base.$field, &over.$field);
                    trace.push((Statement::$variant, taken));
                    value
                },
            )*};
            (block, trace)
        }

        /// Every statement of an effective block, as `(statement, line)`, in
        /// declaration order. Statements that impose nothing (an unset
        /// limit) are left out.
        pub fn effective_lines(block: &EffectiveBlock) -> Vec<(Statement, String)> {
            let mut lines = Vec::new();
            $(
                for line in <$ty as Slot>::lines(&block.$field, Statement::$variant.decl()) {
                    lines.push((Statement::$variant, line));
                }
            )*
            lines
        }
    };
}

mcpolicy_runtime::for_each_statement!(statements);

/// What a statement nobody wrote means.
pub fn built_in_defaults() -> EffectiveBlock {
    EffectiveBlock::built_in()
}

/// What the runtime applies for each statement no block states, for
/// display ([`Statement::unset_text`]): [`built_in_defaults`], except the
/// fields the runtime fills in itself when the table leaves them unset.
/// Merge and lowering never read it.
pub fn applied_defaults() -> EffectiveBlock {
    EffectiveBlock::applied()
}

/// `over` applied on top of `base`, statement by statement.
pub fn merge(base: &EffectiveBlock, over: &PartialBlock) -> EffectiveBlock {
    merge_traced(base, over).0
}

impl Statement {
    /// Its declaration.
    pub fn decl(self) -> &'static StatementDecl {
        &DECLS[self as usize]
    }

    /// Its keyword.
    pub fn keyword(self) -> &'static str {
        self.decl().doc.keyword
    }

    /// The statement `word` names, if any.
    pub fn from_keyword(word: &str) -> Option<Statement> {
        Self::ALL.iter().copied().find(|s| s.keyword() == word)
    }

    /// The grammar rule's statement, if it reads one.
    pub fn from_rule(rule: Rule) -> Option<Statement> {
        Self::ALL.iter().copied().find(|s| s.decl().rule == rule)
    }

    /// What the runtime applies when no block states it, as statement
    /// lines (`retry_alert 40 per 10m`, `consent first`); empty when that
    /// imposes nothing (`max_tokens`, `budget`).
    pub fn applied_default_lines(self) -> Vec<String> {
        static APPLIED: LazyLock<Vec<(Statement, String)>> =
            LazyLock::new(|| effective_lines(&applied_defaults()));
        APPLIED
            .iter()
            .filter(|(s, _)| *s == self)
            .map(|(_, line)| line.clone())
            .collect()
    }

    /// A statement no block states, as shown (`mcpc show`): what the
    /// runtime applies (`retry_alert 40 per 10m`), or `models (not set)`.
    pub fn unset_text(self) -> String {
        let lines = self.applied_default_lines();
        if lines.is_empty() {
            format!("{} (not set)", self.keyword())
        } else {
            lines.join(", ")
        }
    }
}

const SWITCH: &[(&str, &str)] = &[("on", "allowed"), ("off", "denied")];

/// The compiler's part of each statement: the grammar rule that reads it,
/// the shape of its values and its documentation. An exhaustive match: a
/// statement the runtime declares and this does not fails to compile.
const fn syntax(statement: Statement) -> Syntax {
    match statement {
        Statement::Sampling => Syntax {
            rule: Rule::sampling_stmt,
            shape: Shape::Switch,
            syntax: "sampling on|off [as REASON]",
            meaning: "Whether the server may sample at all.",
            outcome: "deny `policy.sampling_disabled`",
            example: "sampling off",
            values: SWITCH,
            noun: "",
            lint: None,
        },
        Statement::Tools => Syntax {
            rule: Rule::tools_stmt,
            shape: Shape::Switch,
            syntax: "tools on|off [as REASON]",
            meaning: "Whether a request may offer `tools`/`toolChoice` to the model (MCP 2025-11-25 and later).",
            outcome: "deny `policy.tools_disabled`",
            example: "tools off",
            values: SWITCH,
            noun: "",
            lint: Some(tools_before_2025_11_25),
        },
        Statement::MaxContext => Syntax {
            rule: Rule::max_context_stmt,
            shape: Shape::Word,
            syntax: "max_context none|thisServer|allServers",
            meaning: "The widest `includeContext` a request may ask for; wider requests are narrowed, not denied.",
            outcome: "trim `policy.max_scope`",
            example: "max_context thisServer",
            values: &[
                ("none", "no context beyond the request's own messages"),
                (
                    "thisServer",
                    "context from the requesting server's session only (deprecated in MCP 2026-07-28)",
                ),
                (
                    "allServers",
                    "context from every connected server (deprecated in MCP 2026-07-28)",
                ),
            ],
            noun: "a context scope",
            lint: Some(context_deprecated_in_2026_07_28),
        },
        Statement::MaxInput => Syntax {
            rule: Rule::max_input_stmt,
            shape: Shape::Quantity(Unit::Size),
            syntax: "max_input SIZE [as REASON]    (64 KiB)",
            meaning: "The canonical size of `systemPrompt` + `messages`.",
            outcome: "deny `policy.input_too_large`",
            example: "max_input 64 KiB",
            values: &[],
            noun: "",
            lint: None,
        },
        Statement::MaxMessages => Syntax {
            rule: Rule::max_messages_stmt,
            shape: Shape::Quantity(Unit::Count),
            syntax: "max_messages COUNT [as REASON]    (50)",
            meaning: "The number of entries in `messages`.",
            outcome: "deny `policy.input_too_large`",
            example: "max_messages 50",
            values: &[],
            noun: "",
            lint: None,
        },
        Statement::MaxTokens => Syntax {
            rule: Rule::max_tokens_stmt,
            shape: Shape::Quantity(Unit::Count),
            syntax: "max_tokens COUNT    (4096, 8k)",
            meaning: "A larger `maxTokens` is clamped to this.",
            outcome: "trim `policy.max_tokens`",
            example: "max_tokens 4096",
            values: &[],
            noun: "",
            lint: None,
        },
        Statement::Rate => Syntax {
            rule: Rule::rate_stmt,
            shape: Shape::Rate,
            syntax: "rate COUNT per DURATION [as REASON]    (30 per 1m)",
            meaning: "At most this many admitted requests in any rolling window.",
            outcome: "deny `policy.rate_limit` with `retryAfter`",
            example: "rate 30 per 1m",
            values: &[],
            noun: "",
            lint: None,
        },
        Statement::Budget => Syntax {
            rule: Rule::budget_stmt,
            shape: Shape::Budget,
            syntax: "budget COUNT requests|tokens per hour|day|week|month|DURATION [as REASON]    (50 requests per day, 200k tokens per 24h)",
            meaning: "Requests or tokens per UTC calendar `hour`, `day`, `week` (ISO) or `month`, or per rolling duration. Token budgets reserve `maxTokens` at admission and settle with real usage.",
            outcome: "deny `policy.budget_exhausted` with `resetsAt`",
            example: "budget 50 requests per day",
            values: &[],
            noun: "",
            lint: None,
        },
        Statement::Deadline => Syntax {
            rule: Rule::deadline_stmt,
            shape: Shape::Quantity(Unit::Duration),
            syntax: "deadline DURATION [as REASON]    (60s)",
            meaning: "How long the completion may take; the client enforces it.",
            outcome: "a reported miss is `policy.deadline`",
            example: "deadline 60s",
            values: &[],
            noun: "",
            lint: None,
        },
        Statement::Consent => Syntax {
            rule: Rule::consent_stmt,
            shape: Shape::Word,
            syntax: "consent always|first|never",
            meaning: "When the user is asked: every request, once per approval key (the default), or never.",
            outcome: "`user.denied` (code -1)",
            example: "consent first",
            values: &[
                ("always", "ask for every request, even one already approved"),
                (
                    "first",
                    "ask once per approval key (the params as they run); the answer is stored",
                ),
                ("never", "never ask"),
            ],
            noun: "a consent mode",
            lint: None,
        },
        Statement::Models => Syntax {
            rule: Rule::models_stmt,
            shape: Shape::Strings,
            syntax: "models \"GLOB\", …    (\"claude-*\", \"gpt-4o\")",
            meaning: "Model-name globs the request may run on; hints outside the list are dropped and the client picks from the list.",
            outcome: "trim `policy.model`",
            example: "models \"claude-*\", \"gpt-4o\"",
            values: &[],
            noun: "",
            lint: None,
        },
        Statement::RetryAlert => Syntax {
            rule: Rule::retry_alert_stmt,
            shape: Shape::Rate,
            syntax: "retry_alert COUNT per DURATION    (40 per 10m)",
            meaning: "When an identity re-presented more than COUNT times within DURATION is a retry loop, raised once per identity per window; the same window measures the trim alert (90 % of at least 20 calls trimmed). An alert decides nothing and is not part of the block's digest: changing it forgets no stored decision.",
            outcome: "an alert: a warning in the proxy's log and an `alert` audit line",
            example: "retry_alert 40 per 10m",
            values: &[],
            noun: "",
            lint: None,
        },
    }
}

/// W0602: `tools` means nothing before MCP 2025-11-25.
fn tools_before_2025_11_25(protocol: ProtocolRevision, stmt: &Stmt) -> Option<Diagnostic> {
    (protocol == ProtocolRevision::V2025_06_18).then(|| {
        Diagnostic::new(
            Code::W0602,
            stmt.keyword,
            "sampling requests carry no tools before MCP 2025-11-25",
            "no effect under 2025-06-18",
        )
        .help("remove `tools`, or declare `protocol 2025-11-25`")
        .note("cited: MCP 2025-11-25 added `tools` and `toolChoice` to `sampling/createMessage`")
    })
}

/// W0601: wide context scopes are deprecated in MCP 2026-07-28.
fn context_deprecated_in_2026_07_28(protocol: ProtocolRevision, stmt: &Stmt) -> Option<Diagnostic> {
    let crate::syntax::StmtKind::Known(_, Args::Word(scope)) = &stmt.kind else {
        return None;
    };
    let parsed = ContextScope::parse(&scope.value).unwrap_or(ContextScope::None);
    (protocol == ProtocolRevision::V2026_07_28 && parsed != ContextScope::None).then(|| {
        Diagnostic::new(
            Code::W0601,
            scope.span,
            format!("`{}` is deprecated in MCP 2026-07-28", scope.value),
            "deprecated scope",
        )
        .help("write `max_context none` unless your client declares the `sampling.context` capability")
        .note("cited: MCP 2026-07-28 deprecates includeContext thisServer/allServers; they need the client's sampling.context capability")
    })
}

/// The runtime's statement of that keyword (a budget's is the block's
/// first) and its place in evaluation order; `None` for one that decides
/// nothing (`retry_alert`).
pub fn runtime_statement(
    statement: Statement,
) -> Option<(usize, mcpolicy_runtime::engine::Statement)> {
    let mut block = EffectiveBlock::built_in();
    block.budgets.push(Budget {
        metric: BudgetMetric::Requests,
        limit: 1,
        window: Window::RollingMs(1),
        reason: String::new(),
    });
    mcpolicy_runtime::engine::Statement::of_block(&block)
        .into_iter()
        .enumerate()
        .find(|(_, s)| s.name() == statement.keyword())
}

/// The statement table of `docs/spec/language.md` ("Statements"), in
/// evaluation order, generated from the declarations (the runtime's and
/// [`syntax`]); `compiler/tests/language_table.rs` keeps the page equal to it.
pub fn language_table() -> String {
    let mut rows: Vec<(usize, String)> = Statement::ALL
        .iter()
        .map(|&statement| {
            let decl = statement.decl();
            let written = decl.doc.syntax.split("    ").next().unwrap_or_default();
            let value = match decl.shape {
                Shape::Switch => "switch",
                Shape::Word => decl.noun.trim_start_matches("a "),
                Shape::Quantity(Unit::Count) => "count",
                Shape::Quantity(Unit::Size) => "size",
                Shape::Quantity(Unit::Duration) => "duration",
                Shape::Rate => "count, duration",
                Shape::Budget => "count, metric, window",
                Shape::Strings => "string list",
            };
            let unset = statement.applied_default_lines();
            let unset = if unset.is_empty() {
                "not set".to_owned()
            } else {
                let values: Vec<&str> = unset
                    .iter()
                    .map(|line| line[decl.keyword().len()..].trim())
                    .collect();
                format!("`{}`", values.join(", "))
            };
            let runtime = runtime_statement(statement);
            let cells = [
                format!("`{written}`"),
                value.to_owned(),
                decl.doc.meaning.to_owned(),
                unset,
                decl.doc.outcome.to_owned(),
                runtime.map_or("none".to_owned(), |(_, s)| s.step().number().to_string()),
            ];
            let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
            (
                runtime.map_or(usize::MAX, |(order, _)| order),
                format!("| {} |\n", cells.join(" | ")),
            )
        })
        .collect();
    rows.sort_by_key(|(order, _)| *order);
    let mut table = String::from(
        "| statement | value | meaning | when no block says | outcome | step |\n|---|---|---|---|---|---|\n",
    );
    for (_, row) in rows {
        table.push_str(&row);
    }
    table
}

/// The keywords of `defaults` and `server` statements, in declaration order.
pub fn policy_keywords() -> impl Iterator<Item = &'static str> {
    Statement::ALL.iter().map(|s| s.keyword())
}

/// A property of `reason` declarations.
#[derive(Debug, Clone, Copy)]
pub struct PropertyDecl {
    /// Its keyword and documentation.
    pub doc: KeywordDoc,
    /// A complete example, for help texts.
    pub example: &'static str,
    /// The words it takes, each with its meaning.
    pub values: &'static [(&'static str, &'static str)],
}

/// The properties of `reason` declarations.
pub const REASON_PROPERTIES: &[PropertyDecl] = &[
    PropertyDecl {
        doc: KeywordDoc {
            keyword: "retryable",
            syntax: "retryable true|false",
            meaning: "Whether a server may usefully retry later; the denial frame's `data.retryable`. Unknown is `false`.",
            outcome: "",
        },
        example: "retryable false",
        values: &[
            ("true", "a server may usefully retry later"),
            ("false", "retrying will not help"),
        ],
    },
    PropertyDecl {
        doc: KeywordDoc {
            keyword: "ttl",
            syntax: "ttl DURATION|until_reset|forever|none",
            meaning: "How long a decision with this reason is remembered, so that a retry cannot get around it. `until_reset`: until the budget window resets; `forever`: until the server's effective block changes; `none`: not stored.",
            outcome: "",
        },
        example: "ttl 60s",
        values: &[
            (
                "until_reset",
                "until the budget window that produced the denial resets",
            ),
            ("forever", "until the server's effective block changes"),
            ("none", "not stored: every request is evaluated afresh"),
        ],
    },
    PropertyDecl {
        doc: KeywordDoc {
            keyword: "message",
            syntax: "message \"TEXT with {server}\"",
            meaning: "The prose of the denial frame's `message`; placeholders in braces.",
            outcome: "",
        },
        example: "message \"Sampling denied: {reason}\"",
        values: &[],
    },
    PropertyDecl {
        doc: KeywordDoc {
            keyword: "code",
            syntax: "code INTEGER    (-32011)",
            meaning: "The JSON-RPC error code of this reason's denial frames (default: the policy's `error_code`).",
            outcome: "",
        },
        example: "code -32011",
        values: &[],
    },
];

/// The properties of `reason` declarations, by keyword.
pub fn reason_keywords() -> impl Iterator<Item = &'static str> {
    REASON_PROPERTIES.iter().map(|p| p.doc.keyword)
}

/// The top-level items. The grammar's `top_start` matches these keywords
/// (`server` only before a quoted id); `parse::item_starts` reads the same
/// set, and a property test holds the three equal.
pub const ITEMS: &[KeywordDoc] = &[
    KeywordDoc {
        keyword: "mcpolicy",
        syntax: "mcpolicy 1",
        meaning: "The language version; always the first line.",
        outcome: "",
    },
    KeywordDoc {
        keyword: "protocol",
        syntax: "protocol 2025-06-18|2025-11-25|2026-07-28",
        meaning: "The MCP revision the client speaks (default 2025-11-25). It decides which error codes are reserved and how sampling arrives.",
        outcome: "",
    },
    KeywordDoc {
        keyword: "error_code",
        syntax: "error_code INTEGER    (default -32010)",
        meaning: "The JSON-RPC code of denial frames (default -32010). -32768..-32000 is reserved by JSON-RPC; MCP 2026-07-28 reserves -32020..-32099 and asks for application codes outside -32768..-32000.",
        outcome: "",
    },
    KeywordDoc {
        keyword: "identity",
        syntax: "identity systemPrompt, messages, …",
        meaning: "The `sampling/createMessage` params whose canonical form (RFC 8785 after NFC) identifies a request; a stored decision is replayed for the same identity.",
        outcome: "",
    },
    KeywordDoc {
        keyword: "reason",
        syntax: "reason NAME { retryable …; ttl …; message …; code … }",
        meaning: "Declares a reason, or redeclares a built-in one, for denials to carry (`as NAME`).",
        outcome: "",
    },
    KeywordDoc {
        keyword: "defaults",
        syntax: "defaults { … }",
        meaning: "Statements every server inherits; a server block overrides them statement by statement.",
        outcome: "",
    },
    KeywordDoc {
        keyword: "server",
        syntax: "server \"ID-OR-GLOB\" { … }",
        meaning: "Statements for the servers the pattern matches (`*` any run of characters, `?` one). Blocks are tried in order; the first match wins.",
        outcome: "",
    },
];

/// The top-level keywords.
pub fn item_keywords() -> impl Iterator<Item = &'static str> {
    ITEMS.iter().map(|d| d.keyword)
}

/// Connecting words inside statements.
pub const CONNECTIVES: &[KeywordDoc] = &[
    KeywordDoc {
        keyword: "per",
        syntax: "… per WINDOW",
        meaning: "The window a rate or budget counts over: a duration (`1m`, `24h`) rolls; a calendar unit (`day`) resets at its UTC boundary.",
        outcome: "",
    },
    KeywordDoc {
        keyword: "as",
        syntax: "… as REASON",
        meaning: "The reason this statement's denial carries instead of the built-in one; it must be declared with `reason`.",
        outcome: "",
    },
];

/// Duration units, joined to the number (`60s`).
pub const DURATION_UNITS: &[&str] = &["ms", "s", "m", "h", "d"];
/// Size units (`64 KiB`).
pub const SIZE_UNITS: &[&str] = &["B", "KiB", "MiB", "GiB"];
/// Count suffixes (`200k`).
pub const COUNT_SUFFIXES: &[&str] = &["k", "M"];
/// Whether `word` is a unit or suffix of any quantity, exactly as written
/// (`M`, a million, is not the minute `m`).
pub fn is_any_unit(word: &str) -> bool {
    [DURATION_UNITS, SIZE_UNITS, COUNT_SUFFIXES]
        .iter()
        .any(|units| units.contains(&word))
}
/// Calendar units of budgets.
pub const CALENDAR_UNITS: &[&str] = &["hour", "day", "week", "month"];

/// What a budget counts.
pub const METRICS: &[(&str, &str)] = &[
    ("requests", "admitted requests"),
    ("tokens", "tokens: `maxTokens` reserved, settled with usage"),
];
/// The calendar windows of budgets.
pub const CALENDAR: &[(&str, &str)] = &[
    ("hour", "from the top of each UTC hour"),
    ("day", "from each UTC midnight"),
    ("week", "from each Monday 00:00 UTC (ISO weeks)"),
    ("month", "from the first day of each UTC month"),
];

/// A calendar unit as written, or `None` for any other word.
pub fn calendar_unit(word: &str) -> Option<CalendarUnit> {
    Some(match word {
        "hour" => CalendarUnit::Hour,
        "day" => CalendarUnit::Day,
        "week" => CalendarUnit::Week,
        "month" => CalendarUnit::Month,
        _ => return None,
    })
}

/// Milliseconds as the largest exact unit: `60000` → `1m`.
pub fn duration(ms: u64) -> String {
    for (unit, factor) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms != 0 && ms.is_multiple_of(factor) {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

/// Bytes as the largest exact unit: `65536` → `64 KiB`.
pub fn size(bytes: u64) -> String {
    for (unit, factor) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes != 0 && bytes.is_multiple_of(factor) {
            return format!("{} {unit}", bytes / factor);
        }
    }
    format!("{bytes} B")
}

/// A reason's ttl as written.
pub fn ttl(ttl: Ttl) -> String {
    match ttl {
        Ttl::AfterMs(ms) => duration(ms),
        Ttl::UntilReset => "until_reset".to_owned(),
        Ttl::Forever => "forever".to_owned(),
        Ttl::None => "none".to_owned(),
    }
}

/// A budget window as written.
pub fn window(window: Window) -> String {
    match window {
        Window::Calendar(unit) => match unit {
            CalendarUnit::Hour => "hour",
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
        }
        .to_owned(),
        Window::RollingMs(ms) => duration(ms),
    }
}

/// `a`, `b` and `c` as inline code.
pub fn code_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.into_iter().map(|s| format!("`{s}`")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// Fills the statement lists into an explanation of `codes.rs`
/// (`{policy_statements}`, `{reason_statements}`) and wraps it again at 80
/// columns; a text without them is returned as it is.
pub fn fill_explanation(text: &str) -> String {
    if !text.contains("{policy_statements}") && !text.contains("{reason_statements}") {
        return text.to_owned();
    }
    let filled = text
        .replace("{policy_statements}", &code_list(policy_keywords()))
        .replace("{reason_statements}", &code_list(reason_keywords()));
    let mut out = String::new();
    let mut line = 0;
    for word in filled.split_whitespace() {
        if line > 0 && line + 1 + word.len() > 80 {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lowered table of `text` (its fallback block is what the engine
    /// applies to an id no server block matches).
    fn lowered(text: &str) -> mcpolicy_runtime::table::Table {
        let db = crate::db::Database::default();
        let source = crate::db::SourceText::new(&db, "p.mcpolicy".into(), text.into());
        crate::db::lower_file(&db, source)
            .clone()
            .expect("the policy compiles")
    }

    fn lines_of(block: &EffectiveBlock, statement: Statement) -> Vec<String> {
        effective_lines(block)
            .into_iter()
            .filter(|(s, _)| *s == statement)
            .map(|(_, line)| line)
            .collect()
    }

    /// What `mcpc show`, hover and `mcpc diff` print for an unset
    /// `retry_alert` is what the engine applies: the threshold and window of
    /// the first retry-loop alert under a policy that leaves it unset.
    #[test]
    fn an_unset_retry_alert_shows_what_the_engine_applies() {
        use std::sync::Arc;

        use mcpolicy_runtime::alert::Alert;
        use mcpolicy_runtime::clock::ManualClock;
        use mcpolicy_runtime::engine::ClientContext;
        use mcpolicy_runtime::store::MemoryStore;
        use mcpolicy_runtime::{Engine, Policy, request};

        let table = lowered("mcpolicy 1\n\ndefaults {\n  sampling off\n}\n");
        assert_eq!(table.fallback.block.retry_alert, None, "left unset");
        let shown = Statement::RetryAlert.unset_text();
        let clock = Arc::new(ManualClock::new(0));
        let policy = Policy::verify(table.clone()).expect("a compiled table verifies");
        let engine = Engine::new(policy, Arc::new(MemoryStore::new()), clock.clone());
        let request = request::validate_sampling(serde_json::json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "again"}}],
                "maxTokens": 10,
            },
        }))
        .expect("a valid request");
        let mut applied = None;
        // The same refused request again every millisecond, until the
        // engine calls it a loop.
        for decision in 1..=100_000u64 {
            clock.advance(1);
            let decided = engine
                .decide_request("any-server", &request, &ClientContext::default())
                .expect("the memory store does not fail");
            if let Some(Alert::RetryLoop(r)) = decided.alert() {
                // Re-presented one time more than the threshold.
                assert_eq!(decision - 1, r.threshold + 1, "{r:?}");
                applied = Some(RetryAlert {
                    count: r.threshold,
                    window_ms: r.window_ms,
                });
                break;
            }
        }
        let applied = applied.expect("the engine raises a retry loop");
        let mut block = table.fallback.block;
        block.retry_alert = Some(applied);
        let engine_lines = lines_of(&block, Statement::RetryAlert);
        assert_eq!(Statement::RetryAlert.applied_default_lines(), engine_lines);
        assert_eq!(shown, engine_lines.join(", "));
    }

    /// For every statement a policy leaves unset, the text shown is what
    /// the engine reads from the lowered table (its lines, or `(not set)`
    /// when it imposes nothing), except for a field the runtime fills in
    /// itself, whose shown value is the engine's (test above).
    #[test]
    fn every_unset_statement_shows_what_the_table_applies() {
        let block = lowered("mcpolicy 1\n").fallback.block;
        for &statement in Statement::ALL {
            let table_lines = lines_of(&block, statement);
            let applied = statement.applied_default_lines();
            match statement {
                Statement::RetryAlert => {
                    assert!(table_lines.is_empty());
                    assert_eq!(applied.len(), 1);
                }
                _ => assert_eq!(applied, table_lines, "{}", statement.keyword()),
            }
            let shown = statement.unset_text();
            if applied.is_empty() {
                assert_eq!(shown, format!("{} (not set)", statement.keyword()));
            } else {
                assert_eq!(shown, applied.join(", "));
            }
        }
    }

    #[test]
    fn declarations_are_consistent() {
        let mut keywords = std::collections::HashSet::new();
        for (i, s) in Statement::ALL.iter().enumerate() {
            let decl = s.decl();
            assert_eq!(decl.statement, *s, "DECLS is in enum order");
            assert_eq!(*s as usize, i);
            assert!(keywords.insert(decl.keyword()), "{} twice", decl.keyword());
            assert_eq!(Statement::from_keyword(decl.keyword()), Some(*s));
            assert_eq!(Statement::from_rule(decl.rule), Some(*s));
            assert!(decl.example.starts_with(decl.keyword()));
            assert!(decl.doc.syntax.starts_with(decl.keyword()));
            let words = matches!(decl.shape, Shape::Switch | Shape::Word);
            assert_eq!(words, !decl.values.is_empty(), "{}", decl.keyword());
            assert_eq!(decl.shape == Shape::Word, !decl.noun.is_empty());
        }
        for p in REASON_PROPERTIES {
            assert!(keywords.insert(p.doc.keyword));
            assert!(p.example.starts_with(p.doc.keyword));
        }
        for d in ITEMS.iter().chain(CONNECTIVES) {
            assert!(keywords.insert(d.keyword));
        }
    }

    /// Each statement's example is read by the grammar rule and the shape
    /// its declaration names, checks clean, is stated by the block, and is
    /// already in canonical layout; with `as`, if it denies. A grammar edit
    /// that the declaration does not follow fails here.
    #[test]
    fn every_example_reads_checks_and_formats_as_declared() {
        for statement in Statement::ALL {
            let decl = statement.decl();
            let mut examples = vec![decl.example.to_owned()];
            // Every word it is declared to take.
            examples.extend(
                decl.values
                    .iter()
                    .map(|(word, _)| format!("{} {word}", decl.keyword())),
            );
            if decl.denies() {
                examples.push(format!("{} as acme.denied", decl.example));
            }
            for example in examples {
                let reason = if example.contains(" as ") {
                    "reason acme.denied { retryable false; ttl forever }\n"
                } else {
                    ""
                };
                let text = format!("mcpolicy 1\n{reason}\ndefaults {{\n  {example}\n}}\n");
                let parsed = crate::parse::parse(&text);
                assert!(parsed.diagnostics.is_empty(), "{example}");
                let Some(crate::syntax::ItemKind::Defaults(block)) =
                    parsed.file.items.last().map(|i| &i.kind)
                else {
                    panic!("{example}: no defaults block");
                };
                let crate::syntax::StmtKind::Known(read, args) = &block.stmts[0].kind else {
                    panic!("{example}: not read as a statement: {:?}", block.stmts[0]);
                };
                assert_eq!(read, statement);
                assert_eq!(args.reason().is_some(), example.contains(" as "));
                let analysis = crate::check::check(&parsed.file);
                assert!(
                    analysis.diagnostics.is_empty(),
                    "{example}: {:?}",
                    analysis.diagnostics
                );
                assert!(analysis.model.defaults.states(*statement), "{example}");
                assert_eq!(crate::format::format(&text).as_deref(), Ok(text.as_str()));
                // Written back, the effective line means the same again.
                let effective = crate::lower::effective_defaults(&analysis.model);
                let lines = effective_lines(&effective);
                let line = lines
                    .iter()
                    .find(|(s, _)| s == statement)
                    .map(|(_, line)| line.clone())
                    .unwrap_or_default();
                assert!(
                    !line.is_empty(),
                    "{example}: no effective line in {lines:?}"
                );
                let again = text.replace(example.as_str(), &line);
                let reread = crate::check::check(&crate::parse::parse(&again).file);
                assert!(reread.diagnostics.is_empty(), "{again}");
                assert_eq!(crate::lower::effective_defaults(&reread.model), effective);
            }
        }
    }

    /// Every statement rule and keyword of the grammar is declared here, so
    /// a statement added to the grammar alone fails this test (and one
    /// declared here alone fails `every_example_reads_checks_and_formats_as_declared`).
    #[test]
    fn the_grammar_has_no_undeclared_statement_or_keyword() {
        let reason_rules = [
            Rule::retryable_stmt,
            Rule::ttl_stmt,
            Rule::message_stmt,
            Rule::code_stmt,
        ];
        let keywords: Vec<&str> = policy_keywords()
            .chain(reason_keywords())
            .chain(item_keywords())
            .chain(CONNECTIVES.iter().map(|d| d.keyword))
            .collect();
        for rule in Rule::all_rules() {
            let name = format!("{rule:?}");
            // `policy_stmt` and `reason_stmt` are the alternatives themselves.
            let choice = [Rule::bad_stmt, Rule::policy_stmt, Rule::reason_stmt];
            if name.ends_with("_stmt") && !choice.contains(rule) {
                assert!(
                    Statement::from_rule(*rule).is_some() || reason_rules.contains(rule),
                    "the grammar's `{name}` is not declared in statements.rs"
                );
            }
            if let Some(word) = name.strip_prefix("kw_") {
                assert!(
                    keywords.contains(&word),
                    "the keyword `{word}` is not declared"
                );
            }
        }
    }

    /// The editor grammar colours every keyword.
    #[test]
    fn the_textmate_grammar_names_every_keyword() {
        let grammar = include_str!("../../lsp/editors/vscode/syntaxes/mcpolicy.tmLanguage.json");
        for keyword in policy_keywords()
            .chain(reason_keywords())
            .chain(item_keywords())
        {
            assert!(
                grammar.contains(&format!("|{keyword}|"))
                    || grammar.contains(&format!("({keyword}|"))
                    || grammar.contains(&format!("|{keyword})")),
                "{keyword} is missing from mcpolicy.tmLanguage.json"
            );
        }
    }

    #[test]
    fn the_e0101_explanation_is_filled_in_as_written_before() {
        assert_eq!(
            Code::E0101.explanation(),
            "The word does not name any statement. Blocks (`defaults`, `server`) accept
`sampling`, `tools`, `max_context`, `max_input`, `max_messages`, `max_tokens`,
`rate`, `budget`, `deadline`, `consent`, `models` and `retry_alert`; `reason`
blocks accept `retryable`, `ttl`, `message` and `code`."
        );
    }

    #[test]
    fn the_e0101_explanation_lists_every_statement() {
        let text = Code::E0101.explanation();
        for keyword in policy_keywords().chain(reason_keywords()) {
            assert!(text.contains(&format!("`{keyword}`")), "{keyword}");
        }
        assert!(text.lines().all(|l| l.len() <= 80));
    }

    #[test]
    fn units() {
        assert_eq!(duration(60_000), "1m");
        assert_eq!(duration(90_000), "90s");
        assert_eq!(duration(250), "250ms");
        assert_eq!(duration(86_400_000), "1d");
        assert_eq!(size(65_536), "64 KiB");
        assert_eq!(size(1000), "1000 B");
    }
}
