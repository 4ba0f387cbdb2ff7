//! The compiled decision table, format `mcpolicy-table/1`.
//!
//! The compiler lowers a checked policy into a [`Table`]; the runtime loads it
//! with no compiler in its dependency tree. The JSON form is deterministic:
//! maps are `BTreeMap`s, lists keep source order, and [`Table::to_json`] writes
//! the same bytes for the same value. Each server entry carries the sha256
//! digest of its effective block together with the reasons that block can
//! produce, so that an edit to one block invalidates that server's stored
//! decisions and nothing else.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::glob;
use crate::identity;

/// The only format version this runtime reads.
pub const TABLE_FORMAT: &str = "mcpolicy-table/1";

/// The `sampling/createMessage` params an identity may list
/// (`docs/spec/language.md`, "`identity`").
pub const IDENTITY_FIELDS: [&str; 10] = [
    "systemPrompt",
    "messages",
    "includeContext",
    "modelPreferences",
    "maxTokens",
    "temperature",
    "stopSequences",
    "metadata",
    "tools",
    "toolChoice",
];

/// The identity a policy gets when it does not say.
pub const DEFAULT_IDENTITY: [&str; 4] = [
    "systemPrompt",
    "messages",
    "includeContext",
    "modelPreferences",
];

/// The largest count, size or duration a table holds: 2^53. The digest's
/// canonical form (RFC 8785) writes numbers as doubles, which hold no
/// larger integer exactly, so two tables that differ above it would share a
/// digest; the checker refuses such values (`E0105`) and the loader too.
pub const MAX_INTEGER: u64 = 1 << 53;

/// Why a table was refused. The runtime fails closed on every one of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The bytes are not a JSON table of the expected shape.
    #[error("the table is not valid mcpolicy-table JSON: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The `format` field names a version this runtime cannot execute.
    #[error("unknown table format `{found}`; this runtime reads `{TABLE_FORMAT}`")]
    UnknownFormat {
        /// The format the table declared.
        found: String,
    },
    /// A server entry's digest does not match its contents.
    #[error(
        "digest mismatch for server pattern `{pattern}`: table says {declared}, contents hash to {actual}"
    )]
    DigestMismatch {
        /// The pattern of the entry whose digest is wrong.
        pattern: String,
        /// The digest written in the table.
        declared: String,
        /// The digest of the entry's contents.
        actual: String,
    },
    /// A statement denies with a reason whose meaning belongs to something
    /// else: a `user.*` reason (the user's answer to a consent prompt) or a
    /// `policy.*` reason of another statement. The engine relies on those
    /// meanings (a stored `user.denied` is the user's refusal; a stored
    /// tools denial is skipped for a request without tools), so such a table
    /// could replay the wrong decisions.
    #[error(
        "server pattern `{pattern}`: `{statement}` denies as `{reason}`, a reserved reason that `{statement}` does not produce; a statement may deny only as its own built-in reason or a reason outside `policy.` and `user.`"
    )]
    ReservedReason {
        /// The pattern of the offending entry.
        pattern: String,
        /// The statement (`tools`, `rate`, …).
        statement: &'static str,
        /// The reason it names.
        reason: String,
    },
    /// The `tools` statement shares its reason with another statement of the
    /// same block. The engine tells a stored tools denial (skipped for a
    /// request without tools) from every other denial by its reason, so the
    /// reason of `tools` must be its own.
    #[error(
        "server pattern `{pattern}`: `tools` and `{statement}` both deny as `{reason}`; the reason of `tools` must be its own, or a stored denial of one would be replayed as the other"
    )]
    SharedToolsReason {
        /// The pattern of the offending entry.
        pattern: String,
        /// The other statement.
        statement: &'static str,
        /// The shared reason.
        reason: String,
    },
    /// A code (`error_code` or a reason's `code`) does not fit a JSON-RPC
    /// error code, a 32-bit signed integer (`i32`, the type of every code
    /// in this crate). Found by [`Table::from_json`] before the table is
    /// read into its types.
    #[error("{what} has code {code}, outside the 32-bit range of JSON-RPC error codes")]
    CodeOutOfRange {
        /// `error_code`, or the reason whose code it is.
        what: String,
        /// The integer found, which is not a JSON-RPC code.
        code: i64,
    },
    /// A block references a reason the table does not define.
    #[error("server pattern `{pattern}` references undefined reason `{reason}`")]
    UndefinedReason {
        /// The pattern of the offending entry.
        pattern: String,
        /// The reason it names.
        reason: String,
    },
    /// The bytes are not strict JSON: an object with a key twice (which a
    /// lenient reader would resolve last-wins, so two readers would read two
    /// tables), invalid UTF-8, a lone surrogate, or too deep.
    #[error("the table is not strict JSON: {0}")]
    Json(crate::request::RequestError),
    /// A count, size, duration or limit of 0, or above [`MAX_INTEGER`]:
    /// the compiler writes neither (`E0105`).
    #[error("{what} is {value}; a table holds integers from 1 to 2^53 (9007199254740992)")]
    OutOfRange {
        /// Where: `server pattern `x`: rate.window_ms`, `reason `r`: ttl.after_ms`.
        what: String,
        /// The value found.
        value: u64,
    },
    /// The table's `identity` is empty, names a field that is not a
    /// `sampling/createMessage` param, or names one twice.
    #[error("identity {problem}")]
    InvalidIdentity {
        /// What is wrong, e.g. "is empty" or "names `x`, not a param of sampling/createMessage".
        problem: String,
    },
    /// A code the compiler refuses (`docs/spec/language.md`, "Error codes").
    #[error("{what} has code {code}: {rule}")]
    ForbiddenCode {
        /// `error_code`, or the reason whose code it is.
        what: String,
        /// The code.
        code: i32,
        /// Why it is refused.
        rule: &'static str,
    },
    /// A reason the compiler cannot write: a name that is not a namespaced
    /// identifier, a `policy.`/`user.` name that is not built in, a missing
    /// built-in reason, or one that is retryable and stored forever.
    #[error("reason `{reason}` {problem}")]
    InvalidReason {
        /// The reason's name.
        reason: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A server entry the compiler cannot write: an empty pattern, a
    /// fallback whose pattern is not `*`, an empty or repeated `models`
    /// pattern, or two budgets of one metric and window.
    #[error("server pattern `{pattern}`: {problem}")]
    InvalidEntry {
        /// The entry's pattern.
        pattern: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl TableError {
    /// A stable name for the kind of refusal (`table.digest_mismatch`, …),
    /// for logs and tests that must not depend on the prose.
    pub fn code(&self) -> &'static str {
        match self {
            TableError::Malformed(_) => "table.malformed",
            TableError::UnknownFormat { .. } => "table.unknown_format",
            TableError::DigestMismatch { .. } => "table.digest_mismatch",
            TableError::ReservedReason { .. } => "table.reserved_reason",
            TableError::SharedToolsReason { .. } => "table.shared_tools_reason",
            TableError::CodeOutOfRange { .. } => "table.code_out_of_range",
            TableError::UndefinedReason { .. } => "table.undefined_reason",
            TableError::Json(_) => "table.json",
            TableError::OutOfRange { .. } => "table.out_of_range",
            TableError::InvalidIdentity { .. } => "table.invalid_identity",
            TableError::ForbiddenCode { .. } => "table.forbidden_code",
            TableError::InvalidReason { .. } => "table.invalid_reason",
            TableError::InvalidEntry { .. } => "table.invalid_entry",
        }
    }
}

/// The MCP revision the client speaks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub enum ProtocolRevision {
    /// MCP 2025-06-18.
    #[serde(rename = "2025-06-18")]
    V2025_06_18,
    /// MCP 2025-11-25, the default.
    #[default]
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    /// MCP 2026-07-28: sampling arrives inside `InputRequiredResult.inputRequests`.
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
}

impl ProtocolRevision {
    /// Every revision this version of mcpolicy knows, oldest first.
    pub const ALL: [ProtocolRevision; 3] =
        [Self::V2025_06_18, Self::V2025_11_25, Self::V2026_07_28];

    /// The revision's date string, as written in policies and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// Parses a revision date string.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

/// How long a decision for a reason is remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ttl {
    /// A fixed time in milliseconds.
    AfterMs(u64),
    /// Until the budget window that produced the denial resets.
    UntilReset,
    /// Until the server's effective block changes.
    Forever,
    /// Not stored: every request is evaluated afresh.
    None,
}

/// A reason as the runtime executes it: built-in defaults merged with the
/// policy's declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonSpec {
    /// Whether a server may usefully retry later. Unknown is `false`.
    pub retryable: bool,
    /// How long a decision with this reason is stored.
    pub ttl: Ttl,
    /// The JSON-RPC error code of the denial frame.
    pub code: i32,
    /// The prose message template; placeholders in braces, e.g. `{server}`.
    pub message: String,
}

/// The widest `includeContext` a server may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ContextScope {
    /// No context beyond the request's own messages.
    #[serde(rename = "none")]
    None,
    /// Context from the requesting server's session only.
    #[serde(rename = "thisServer")]
    ThisServer,
    /// Context from every connected server.
    #[serde(rename = "allServers")]
    AllServers,
}

impl ContextScope {
    /// Every scope, narrowest first.
    pub const ALL: [ContextScope; 3] = [Self::None, Self::ThisServer, Self::AllServers];

    /// The wire spelling (`none`, `thisServer`, `allServers`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ThisServer => "thisServer",
            Self::AllServers => "allServers",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// When the user is asked before a request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Consent {
    /// Ask for every request, even one already approved.
    Always,
    /// Ask once per approval key (`docs/spec/identity.md`, "Two keys"); the
    /// answer is stored.
    First,
    /// Never ask.
    Never,
}

/// A statement that is either on or off, with the reason its denial carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// Whether the capability is allowed.
    pub enabled: bool,
    /// The reason a denial carries when it is off.
    pub reason: String,
}

/// A numeric limit and the reason its denial carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// The largest allowed value (bytes for `max_input`, a count otherwise).
    pub max: u64,
    /// The reason a denial carries.
    pub reason: String,
}

/// At most `count` admitted requests in any rolling window of `window_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Requests admitted per window.
    pub count: u64,
    /// The rolling window in milliseconds.
    pub window_ms: u64,
    /// The reason a denial carries.
    pub reason: String,
}

/// `retry_alert COUNT per DURATION`: an identity re-presented more than
/// `count` times within `window_ms` raises a retry-loop alert, and the same
/// window measures the trim alert (`docs/spec/evaluation.md`, "Alerts").
/// An observation, not a rule: it decides nothing, so it is left out of the
/// block's digest ([`block_digest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryAlert {
    /// Re-presentations per window that are still not a loop.
    pub count: u64,
    /// The window in milliseconds.
    pub window_ms: u64,
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetMetric {
    /// Admitted requests.
    Requests,
    /// Tokens: `maxTokens` reserved at admission, settled with real usage.
    Tokens,
}

/// A UTC calendar unit; a window resets at the start of the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CalendarUnit {
    /// From the top of each UTC hour.
    Hour,
    /// From each UTC midnight.
    Day,
    /// From each Monday 00:00 UTC (ISO weeks).
    Week,
    /// From the first day of each UTC month.
    Month,
}

/// The window a budget counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    /// A calendar unit in UTC.
    Calendar(CalendarUnit),
    /// A rolling window of this many milliseconds.
    RollingMs(u64),
}

/// A budget: at most `limit` of `metric` per `window`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// What is counted.
    pub metric: BudgetMetric,
    /// The most that may be spent in one window.
    pub limit: u64,
    /// The window.
    pub window: Window,
    /// The reason a denial carries.
    pub reason: String,
}

/// A deadline the client enforces; a reported miss becomes `reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deadline {
    /// Milliseconds the completion may take.
    pub ms: u64,
    /// The reason a reported miss carries.
    pub reason: String,
}

/// The table's side of each statement's entry (`statements.rs`):
/// [`EffectiveBlock`] and what a statement nobody writes means.
macro_rules! block_of_statements {
    (
        decides { $($decides:tt)* }
        alerts { $($alerts:tt)* }
    ) => {
        block_of_statements! { @entries $($decides)* $($alerts)* }
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
        /// The rules that apply to one server: its own statements with
        /// `defaults` merged in, statement by statement. One field per
        /// statement, declared in `statements.rs`.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct EffectiveBlock {
            $(
                $(#[doc = $doc])*
                $(#[$attr])*
                pub $field: $ty,
            )*
        }

        impl EffectiveBlock {
            /// What a block means when no statement is written: each
            /// statement's built-in default.
            pub fn built_in() -> EffectiveBlock {
                EffectiveBlock { $($field: $default,)* }
            }

            /// What the runtime applies for each statement no block states:
            /// [`EffectiveBlock::built_in`], except the fields the runtime
            /// fills in itself when the table leaves them unset
            /// (`retry_alert`). For display; decisions never read it.
            pub fn applied() -> EffectiveBlock {
                EffectiveBlock { $($field: applied_or_built_in!($default $(, $applied)?),)* }
            }

            /// Each statement that names a reason, with that reason, in
            /// declaration order: the switches always, a limit, the rate,
            /// each budget and the deadline when stated.
            pub fn statement_reasons(&self) -> Vec<(&'static str, &str)> {
                let mut out = Vec::new();
                $(NamesReasons::push_reasons(&self.$field, $keyword, &mut out);)*
                out
            }
        }

        /// The keyword of each statement with the built-in reason its denial
        /// carries, in declaration order.
        const OWN_REASONS: &[(&str, Option<&str>)] = &[$(($keyword, $reason),)*];
    };
}

/// An entry's `applied:` value when it has one, else its built-in default.
macro_rules! applied_or_built_in {
    ($built_in:expr) => {
        $built_in
    };
    ($built_in:expr, $applied:expr) => {
        $applied
    };
}

crate::for_each_statement!(block_of_statements);

/// The reasons a field of [`EffectiveBlock`] names: one per denying item
/// stated (a switch always names one). Implemented per field type.
trait NamesReasons {
    fn push_reasons<'a>(&'a self, keyword: &'static str, out: &mut Vec<(&'static str, &'a str)>);
}

macro_rules! names_no_reason {
    ($($ty:ty),*) => {$(
        impl NamesReasons for $ty {
            fn push_reasons<'a>(&'a self, _: &'static str, _: &mut Vec<(&'static str, &'a str)>) {}
        }
    )*};
}
names_no_reason!(
    ContextScope,
    Consent,
    Option<u64>,
    Option<Vec<String>>,
    Option<RetryAlert>
);

impl NamesReasons for Switch {
    fn push_reasons<'a>(&'a self, keyword: &'static str, out: &mut Vec<(&'static str, &'a str)>) {
        out.push((keyword, &self.reason));
    }
}

impl<T: HasReason> NamesReasons for Option<T> {
    fn push_reasons<'a>(&'a self, keyword: &'static str, out: &mut Vec<(&'static str, &'a str)>) {
        out.extend(self.iter().map(|item| (keyword, item.reason())));
    }
}

impl<T: HasReason> NamesReasons for Vec<T> {
    fn push_reasons<'a>(&'a self, keyword: &'static str, out: &mut Vec<(&'static str, &'a str)>) {
        out.extend(self.iter().map(|item| (keyword, item.reason())));
    }
}

/// An item of a denying statement.
trait HasReason {
    fn reason(&self) -> &str;
}

macro_rules! has_reason {
    ($($ty:ty),*) => {$(
        impl HasReason for $ty {
            fn reason(&self) -> &str {
                &self.reason
            }
        }
    )*};
}
has_reason!(Limit, Rate, Budget, Deadline);

impl EffectiveBlock {
    /// Whether `statement`, naming `reason`, shares the reason of `tools` in
    /// a way the engine cannot tell apart: any statement but `tools` itself,
    /// except `sampling off` (it denies every request before `tools` is
    /// reached, so no tools denial is ever stored under this block).
    pub fn shares_tools_reason(&self, statement: &str, reason: &str) -> bool {
        statement != "tools"
            && reason == self.tools.reason
            && (statement != "sampling" || self.sampling.enabled)
    }

    /// Every reason name this block can produce, without duplicates, sorted.
    pub fn reason_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .statement_reasons()
            .into_iter()
            .map(|(_, reason)| reason)
            .collect();
        // What any block produces: the trims' reasons and the user's answers.
        names.extend([
            builtin::MAX_SCOPE,
            builtin::MAX_TOKENS,
            builtin::MODEL,
            builtin::USER_DENIED,
            builtin::USER_APPROVED,
        ]);
        // A client may report a deadline miss under any grant; without a
        // `deadline` statement it is denied as `policy.deadline`, so that
        // reason's declaration is part of what the block means.
        if self.deadline.is_none() {
            names.push(builtin::DEADLINE);
        }
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// One `server` block (or the defaults), lowered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// The server id or glob (`*` any run, `?` one character).
    pub pattern: String,
    /// `sha256:` + hex of the canonical `{block, reasons}` this entry executes.
    pub digest: String,
    /// The effective rules.
    pub block: EffectiveBlock,
}

/// A compiled policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// Always [`TABLE_FORMAT`].
    pub format: String,
    /// The MCP revision the client speaks.
    pub protocol: ProtocolRevision,
    /// The default JSON-RPC error code of denial frames.
    pub error_code: i32,
    /// The request fields that make up a request's identity, in policy order.
    pub identity: Vec<String>,
    /// Every reason, built-in and declared, with effective values.
    pub reasons: BTreeMap<String, ReasonSpec>,
    /// Server blocks in source order; the first whose pattern matches wins.
    pub servers: Vec<ServerEntry>,
    /// What applies to a server no block matches (the `defaults` block alone).
    pub fallback: ServerEntry,
}

/// Refuses an `error_code` or a reason's `code` that is an integer outside
/// `i32` with [`TableError::CodeOutOfRange`], which names it, before serde
/// would refuse it as [`TableError::Malformed`] with a message that does
/// not. Anything else that is not an `i32` is serde's to refuse.
fn codes_fit(table: &serde_json::Value) -> Result<(), TableError> {
    let reasons = table
        .get("reasons")
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, spec)| (format!("reason `{name}`"), spec.get("code")));
    let codes = std::iter::once(("error_code".to_owned(), table.get("error_code"))).chain(reasons);
    for (what, code) in codes {
        if let Some(code) = code.and_then(serde_json::Value::as_i64)
            && i32::try_from(code).is_err()
        {
            return Err(TableError::CodeOutOfRange { what, code });
        }
    }
    Ok(())
}

impl Table {
    /// Parses and verifies a table: format version, every digest, every
    /// reason reference. Fails closed on anything unexpected.
    ///
    /// Server patterns are NFC-normalised on load (a hand-written table may
    /// spell them otherwise); the digests do not cover patterns, so this
    /// changes no digest.
    pub fn from_json(bytes: &[u8]) -> Result<Table, TableError> {
        // Strictly, as requests are read: a key twice anywhere is refused,
        // never resolved last-wins.
        let limits = crate::request::Limits {
            max_bytes: bytes.len(),
            ..crate::request::Limits::default()
        };
        let value = crate::request::parse_strict_with(bytes, &limits).map_err(TableError::Json)?;
        codes_fit(&value)?;
        let mut table: Table = serde_json::from_value(value)?;
        if table.format != TABLE_FORMAT {
            return Err(TableError::UnknownFormat {
                found: table.format,
            });
        }
        table.verify()?;
        table.normalize_patterns();
        Ok(table)
    }

    /// NFC-normalises every server pattern (the digests do not cover
    /// patterns, so no digest changes).
    pub(crate) fn normalize_patterns(&mut self) {
        for entry in self
            .servers
            .iter_mut()
            .chain(std::iter::once(&mut self.fallback))
        {
            if let std::borrow::Cow::Owned(normalized) = glob::nfc(&entry.pattern) {
                entry.pattern = normalized;
            }
        }
    }

    /// Checks that every entry's digest matches its contents, that every
    /// reason it names is defined, that no statement denies as a reserved
    /// reason it does not produce ([`builtin::may_deny_as`]), and that the
    /// reason of `tools` is its own within each block.
    pub fn verify(&self) -> Result<(), TableError> {
        let codes = std::iter::once(("error_code".to_owned(), self.error_code, false)).chain(
            self.reasons.iter().map(|(name, spec)| {
                (
                    format!("reason `{name}`"),
                    spec.code,
                    name == builtin::USER_DENIED,
                )
            }),
        );
        for (what, code, user_denied) in codes {
            if let Some(rule) = builtin::code_refusal(i64::from(code), self.protocol, user_denied) {
                return Err(TableError::ForbiddenCode { what, code, rule });
            }
        }
        self.verify_identity()?;
        self.verify_reasons()?;
        if self.fallback.pattern != "*" {
            return Err(TableError::InvalidEntry {
                pattern: self.fallback.pattern.clone(),
                problem: "the fallback's pattern must be `*`".to_owned(),
            });
        }
        for entry in self.servers.iter().chain(std::iter::once(&self.fallback)) {
            verify_entry(entry)?;
            if let Some((statement, reason)) =
                entry
                    .block
                    .statement_reasons()
                    .into_iter()
                    .find(|(statement, reason)| {
                        !builtin::may_deny_as(builtin::own_reason(statement), reason)
                    })
            {
                return Err(TableError::ReservedReason {
                    pattern: entry.pattern.clone(),
                    statement,
                    reason: reason.to_owned(),
                });
            }
            if let Some((statement, reason)) = entry
                .block
                .statement_reasons()
                .into_iter()
                .find(|(statement, reason)| entry.block.shares_tools_reason(statement, reason))
            {
                return Err(TableError::SharedToolsReason {
                    pattern: entry.pattern.clone(),
                    statement,
                    reason: reason.to_owned(),
                });
            }
            if let Some(reason) = entry
                .block
                .reason_names()
                .into_iter()
                .find(|name| !self.reasons.contains_key(*name))
            {
                return Err(TableError::UndefinedReason {
                    pattern: entry.pattern.clone(),
                    reason: reason.to_owned(),
                });
            }
            let actual = self.digest_of(&entry.block);
            if actual != entry.digest {
                return Err(TableError::DigestMismatch {
                    pattern: entry.pattern.clone(),
                    declared: entry.digest.clone(),
                    actual,
                });
            }
        }
        Ok(())
    }

    /// The digest of `block` as an entry of this table ([`entry_digest`]
    /// under this table's reasons, identity and protocol).
    pub fn digest_of(&self, block: &EffectiveBlock) -> String {
        entry_digest(block, &self.reasons, &self.identity, self.protocol)
    }

    /// `identity`: at least one field, each a param of
    /// `sampling/createMessage`, none twice (`E0205`, `E0206`).
    fn verify_identity(&self) -> Result<(), TableError> {
        if self.identity.is_empty() {
            return Err(TableError::InvalidIdentity {
                problem: "is empty; it lists at least one param".to_owned(),
            });
        }
        for (index, field) in self.identity.iter().enumerate() {
            if !IDENTITY_FIELDS.contains(&field.as_str()) {
                return Err(TableError::InvalidIdentity {
                    problem: format!(
                        "names `{field}`, not a param of sampling/createMessage (one of {})",
                        IDENTITY_FIELDS.join(", ")
                    ),
                });
            }
            if self.identity[..index].contains(field) {
                return Err(TableError::InvalidIdentity {
                    problem: format!("names `{field}` twice"),
                });
            }
        }
        Ok(())
    }

    /// Reasons: every built-in present; names namespaced identifiers, and
    /// in `policy.`/`user.` only the built-in ones (`E0405`, `E0406`,
    /// `E0412`); none retryable and stored forever (`E0403`); a ttl
    /// duration from 1 to [`MAX_INTEGER`].
    fn verify_reasons(&self) -> Result<(), TableError> {
        // The consent cooldown is answered with its built-in spec whatever
        // a table says (`docs/spec/evaluation.md`, "Consent cooldown"), so a
        // table written before it existed still loads.
        if let Some(missing) = builtin::ALL
            .iter()
            .filter(|b| b.name != builtin::CONSENT_COOLDOWN)
            .find(|b| !self.reasons.contains_key(b.name))
        {
            return Err(TableError::InvalidReason {
                reason: missing.name.to_owned(),
                problem: "is missing: a table defines every built-in reason",
            });
        }
        for (name, spec) in &self.reasons {
            let invalid = |problem| {
                Err(TableError::InvalidReason {
                    reason: name.clone(),
                    problem,
                })
            };
            if !is_reason_name(name) {
                return invalid(
                    "is not a reason name: identifiers (a letter or `_`, then letters, digits or `_`) joined by `.`, at least two",
                );
            }
            if (name.starts_with("policy.") || name.starts_with("user."))
                && builtin::get(name).is_none()
            {
                return invalid(
                    "is in a reserved namespace (`policy.`, `user.`) but is not built in",
                );
            }
            if spec.retryable && spec.ttl == Ttl::Forever {
                return invalid(
                    "is retryable and stored forever: every retry would be answered with the same denial",
                );
            }
            if let Ttl::AfterMs(ms) = spec.ttl {
                in_range(ms, || format!("reason `{name}`: ttl.after_ms"))?;
            }
        }
        Ok(())
    }

    /// The deterministic JSON form: pretty-printed, keys in declaration
    /// order for structs and sorted order for maps, with a final newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| unreachable!("a Table always serialises: {e}"));
        text.push('\n');
        text
    }

    /// The entry that governs `server_id`: the first matching block, or the
    /// fallback. Id and patterns are compared in NFC.
    pub fn entry_for(&self, server_id: &str) -> &ServerEntry {
        let server_id = glob::nfc(server_id);
        self.servers
            .iter()
            .find(|entry| glob::matches(&glob::nfc(&entry.pattern), &server_id))
            .unwrap_or(&self.fallback)
    }
}

/// A reason name as the language writes it: identifiers joined by `.`, at
/// least two (`docs/spec/language.md`, "Identifiers").
fn is_reason_name(name: &str) -> bool {
    let mut parts = 0;
    let all = name.split('.').all(|part| {
        parts += 1;
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    all && parts >= 2
}

/// `value` is a count, size or duration the compiler writes: 1 to [`MAX_INTEGER`].
fn in_range(value: u64, what: impl FnOnce() -> String) -> Result<(), TableError> {
    if (1..=MAX_INTEGER).contains(&value) {
        Ok(())
    } else {
        Err(TableError::OutOfRange {
            what: what(),
            value,
        })
    }
}

/// One entry's values as the compiler writes them: a pattern that is not
/// empty; every count, size and duration from 1 to [`MAX_INTEGER`];
/// `models` patterns neither empty nor repeated (`E0603`, `E0106`); no two
/// budgets of one metric and window (`E0106`).
fn verify_entry(entry: &ServerEntry) -> Result<(), TableError> {
    let pattern = &entry.pattern;
    let invalid = |problem: String| {
        Err(TableError::InvalidEntry {
            pattern: pattern.clone(),
            problem,
        })
    };
    if pattern.is_empty() {
        return invalid("the pattern is empty".to_owned());
    }
    let block = &entry.block;
    let at = |field: &str| format!("server pattern `{pattern}`: {field}");
    let mut values: Vec<(u64, String)> = Vec::new();
    if let Some(limit) = &block.max_input {
        values.push((limit.max, at("max_input.max")));
    }
    if let Some(limit) = &block.max_messages {
        values.push((limit.max, at("max_messages.max")));
    }
    if let Some(max) = block.max_tokens {
        values.push((max, at("max_tokens")));
    }
    if let Some(rate) = &block.rate {
        values.push((rate.count, at("rate.count")));
        values.push((rate.window_ms, at("rate.window_ms")));
    }
    for (index, budget) in block.budgets.iter().enumerate() {
        values.push((budget.limit, at(&format!("budgets[{index}].limit"))));
        if let Window::RollingMs(ms) = budget.window {
            values.push((ms, at(&format!("budgets[{index}].window.rolling_ms"))));
        }
        if block.budgets[..index]
            .iter()
            .any(|earlier| earlier.metric == budget.metric && earlier.window == budget.window)
        {
            return invalid(format!(
                "budgets[{index}] counts the metric and window of an earlier budget"
            ));
        }
    }
    if let Some(deadline) = &block.deadline {
        values.push((deadline.ms, at("deadline.ms")));
    }
    if let Some(alert) = &block.retry_alert {
        values.push((alert.count, at("retry_alert.count")));
        values.push((alert.window_ms, at("retry_alert.window_ms")));
    }
    for (value, what) in values {
        in_range(value, || what)?;
    }
    if let Some(models) = &block.models {
        for (index, model) in models.iter().enumerate() {
            if model.is_empty() {
                return invalid(format!("models[{index}] is empty"));
            }
            if models[..index].contains(model) {
                return invalid(format!("models[{index}] repeats `{model}`"));
            }
        }
    }
    Ok(())
}

/// The digest of an entry of a table with the default identity
/// ([`DEFAULT_IDENTITY`]) and protocol ([`ProtocolRevision::default`]):
/// [`entry_digest`] with those.
pub fn block_digest(block: &EffectiveBlock, reasons: &BTreeMap<String, ReasonSpec>) -> String {
    let identity: Vec<String> = DEFAULT_IDENTITY.iter().map(|f| (*f).to_owned()).collect();
    entry_digest(block, reasons, &identity, ProtocolRevision::default())
}

/// `sha256:` + hex over the RFC 8785 canonical JSON of
/// `{"block": block, "reasons": {name: spec for each reason the block can produce}}`,
/// the block without its `retry_alert` (an observation, not a rule).
///
/// with the table's `identity` and `protocol` added when they are not the
/// defaults ([`DEFAULT_IDENTITY`], [`ProtocolRevision::default`]): both
/// decide (what a stored decision covers; how a request is validated and
/// trimmed), and leaving out the defaults keeps the digests, and so the
/// stored decisions, of tables written before they were covered.
///
/// Including the reasons means that redeclaring a reason (its ttl, code or
/// retryability) invalidates the decisions of exactly the servers that can
/// produce it.
pub fn entry_digest(
    block: &EffectiveBlock,
    reasons: &BTreeMap<String, ReasonSpec>,
    identity: &[String],
    protocol: ProtocolRevision,
) -> String {
    let used: BTreeMap<&str, Option<&ReasonSpec>> = block
        .reason_names()
        .into_iter()
        .map(|name| (name, reasons.get(name)))
        .collect();
    // `retry_alert` decides nothing: changing a threshold must not forget
    // stored refusals, so the digest covers the block without it (and a
    // block without it serialises without the member: digests of tables
    // written before it existed are unchanged).
    let mut value = if block.retry_alert.is_some() {
        let decisive = EffectiveBlock {
            retry_alert: None,
            ..block.clone()
        };
        serde_json::json!({ "block": decisive, "reasons": used })
    } else {
        serde_json::json!({ "block": block, "reasons": used })
    };
    if !identity.iter().map(String::as_str).eq(DEFAULT_IDENTITY) {
        value["identity"] = serde_json::json!(identity);
    }
    if protocol != ProtocolRevision::default() {
        value["protocol"] = serde_json::json!(protocol.as_str());
    }
    let mut hasher = Sha256::new();
    identity::write_canonical(&value, &mut hasher);
    let digest = hasher.finalize();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// Server and model patterns as the table format defines them
/// (`docs/table-format.md`): a pattern is matched against a server id or a
/// model name after both are NFC-normalised; `*` matches any run of
/// characters, `?` exactly one. The compiler uses the same functions, so that what it checks
/// (a pattern covered by an earlier one) is what the engine matches.
pub mod pattern {
    pub use crate::glob::{covers, is_glob, matches, nfc};
}

/// The built-in reasons and their defaults (`docs/spec/language.md`, "Built-in reasons").
pub mod builtin {
    use super::{ReasonSpec, Ttl};

    /// `sampling off`.
    pub const SAMPLING_DISABLED: &str = "policy.sampling_disabled";
    /// `tools off` and the request carries tools.
    pub const TOOLS_DISABLED: &str = "policy.tools_disabled";
    /// An input limit (step 5) exceeded.
    pub const INPUT_TOO_LARGE: &str = "policy.input_too_large";
    /// `includeContext` trimmed to `max_context`.
    pub const MAX_SCOPE: &str = "policy.max_scope";
    /// `maxTokens` clamped to `max_tokens`.
    pub const MAX_TOKENS: &str = "policy.max_tokens";
    /// Model hints restricted to `models`.
    pub const MODEL: &str = "policy.model";
    /// `rate` exceeded.
    pub const RATE_LIMIT: &str = "policy.rate_limit";
    /// A `budget` exhausted.
    pub const BUDGET_EXHAUSTED: &str = "policy.budget_exhausted";
    /// A reported deadline miss.
    pub const DEADLINE: &str = "policy.deadline";
    /// The user refused consent.
    pub const USER_DENIED: &str = "user.denied";
    /// The user gave consent.
    pub const USER_APPROVED: &str = "user.approved";
    /// The server drew too many prompts the user did not approve; it is
    /// not prompted again until one leaves the window
    /// (`docs/spec/evaluation.md`, step 9, "Consent cooldown"). Not in a
    /// block's [`super::EffectiveBlock::reason_names`]: it is built in and
    /// fixed this round, so block digests stay as they were.
    pub const CONSENT_COOLDOWN: &str = "policy.consent_cooldown";

    /// The JSON-RPC code MCP asks a client to use when the user refuses
    /// sampling ([`crate::jsonrpc::USER_REJECTED`]).
    pub const USER_REFUSAL_CODE: i32 = crate::jsonrpc::USER_REJECTED;

    /// What a built-in reason does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Outcome {
        /// The request is refused with a frame.
        Deny,
        /// The request goes on, narrowed; the result carries `_meta`.
        Trim,
        /// The request goes on.
        Allow,
    }

    /// One row of the built-in reason table.
    #[derive(Debug, Clone, Copy)]
    pub struct Builtin {
        /// The reason name.
        pub name: &'static str,
        /// Deny, trim or allow.
        pub outcome: Outcome,
        /// Default retryability.
        pub retryable: bool,
        /// Default ttl.
        pub ttl: Ttl,
        /// `Some(code)` for a fixed code; `None` uses the table's `error_code`.
        pub code: Option<i32>,
        /// Default message template.
        pub message: &'static str,
        /// One line for hover texts and `mcpc explain`.
        pub summary: &'static str,
    }

    /// Every built-in reason.
    pub const ALL: &[Builtin] = &[
        Builtin {
            name: SAMPLING_DISABLED,
            outcome: Outcome::Deny,
            retryable: false,
            ttl: Ttl::Forever,
            code: None,
            message: "Sampling denied: sampling is disabled for server '{server}'",
            summary: "the server's block says `sampling off`",
        },
        Builtin {
            name: TOOLS_DISABLED,
            outcome: Outcome::Deny,
            retryable: false,
            ttl: Ttl::Forever,
            code: None,
            message: "Sampling denied: server '{server}' may not offer tools to the model",
            summary: "the request carries `tools` or `toolChoice` and the block says `tools off`",
        },
        Builtin {
            name: INPUT_TOO_LARGE,
            outcome: Outcome::Deny,
            retryable: false,
            ttl: Ttl::Forever,
            code: None,
            message: "Sampling denied: the request from server '{server}' exceeds {limit}",
            summary: "the request is over `max_input` or `max_messages`",
        },
        Builtin {
            name: MAX_SCOPE,
            outcome: Outcome::Trim,
            retryable: false,
            ttl: Ttl::None,
            code: None,
            message: "includeContext lowered to the server's max_context",
            summary: "`includeContext` was wider than `max_context` and was lowered",
        },
        Builtin {
            name: MAX_TOKENS,
            outcome: Outcome::Trim,
            retryable: false,
            ttl: Ttl::None,
            code: None,
            message: "maxTokens clamped to the server's max_tokens",
            summary: "`maxTokens` was above `max_tokens` and was clamped",
        },
        Builtin {
            name: MODEL,
            outcome: Outcome::Trim,
            retryable: false,
            ttl: Ttl::None,
            code: None,
            message: "model hints restricted to the server's models",
            summary: "model hints outside `models` were dropped",
        },
        Builtin {
            name: RATE_LIMIT,
            outcome: Outcome::Deny,
            retryable: true,
            ttl: Ttl::AfterMs(60_000),
            code: None,
            message: "Sampling denied: rate limit for server '{server}' reached; retry after {retryAfter}s",
            summary: "the server sent more requests than `rate` allows",
        },
        Builtin {
            name: BUDGET_EXHAUSTED,
            outcome: Outcome::Deny,
            retryable: false,
            ttl: Ttl::UntilReset,
            code: None,
            message: "Sampling denied: {window} budget for server '{server}' exhausted",
            summary: "a `budget` of the server is spent until its window resets",
        },
        Builtin {
            name: DEADLINE,
            outcome: Outcome::Deny,
            retryable: true,
            ttl: Ttl::AfterMs(30_000),
            code: None,
            message: "Sampling denied: the completion for server '{server}' missed its {deadline} deadline",
            summary: "the client reported that the completion missed `deadline`",
        },
        Builtin {
            name: USER_DENIED,
            outcome: Outcome::Deny,
            retryable: false,
            ttl: Ttl::Forever,
            code: Some(USER_REFUSAL_CODE),
            message: "Sampling denied: the user declined the request from server '{server}'",
            summary: "the user refused consent",
        },
        Builtin {
            name: USER_APPROVED,
            outcome: Outcome::Allow,
            retryable: false,
            ttl: Ttl::Forever,
            code: None,
            message: "Sampling approved by the user",
            summary: "the user gave consent; the approval is stored",
        },
        Builtin {
            name: CONSENT_COOLDOWN,
            outcome: Outcome::Deny,
            retryable: true,
            ttl: Ttl::UntilReset,
            code: None,
            message: "Sampling denied: server '{server}' has asked the user too often without approval; retry after {retryAfter}s",
            summary: "the server drew too many prompts the user did not approve within the hour",
        },
    ];

    /// The built-in reason of that name.
    pub fn get(name: &str) -> Option<&'static Builtin> {
        ALL.iter().find(|b| b.name == name)
    }

    /// The built-in reason a statement denies with when it names none
    /// (`""` for a word that is not a denying statement), as declared in
    /// `statements.rs`.
    pub fn own_reason(statement: &str) -> &'static str {
        super::OWN_REASONS
            .iter()
            .find(|(keyword, _)| *keyword == statement)
            .and_then(|(_, reason)| *reason)
            .unwrap_or("")
    }

    /// Whether a statement whose own built-in reason is `own` may deny as
    /// `reason`: its own reason, or any reason outside the reserved
    /// `policy.` and `user.` namespaces.
    ///
    /// The reserved reasons mean something the engine and servers rely on:
    /// a stored `user.denied` is the user's refusal, never recomputed; a
    /// stored `policy.tools_disabled` (the tools statement's reason) is
    /// skipped for a request without tools; `policy.budget_exhausted`
    /// carries `resetsAt` and `policy.rate_limit` `retryAfter`. Naming one on
    /// another statement would replay or describe the wrong decision.
    pub fn may_deny_as(own: &str, reason: &str) -> bool {
        reason == own || !(reason.starts_with("policy.") || reason.starts_with("user."))
    }

    /// Why the compiler refuses `code` on a reason (or as `error_code`)
    /// under `protocol` (`docs/spec/language.md`, "Error codes": `E0501`,
    /// `E0502`, `E0503`, `E0505`, `E0506`), or `None` when it may be
    /// written. `user_denied`: the code of `user.denied`, which alone may
    /// be -1. The checker's findings and the table loader both use it.
    ///
    /// `code` is any integer a policy wrote, not yet a JSON-RPC code (an
    /// `i32`): one outside `i32` is refused here, so the checker reports it
    /// as it reports every other code it refuses.
    pub fn code_refusal(
        code: i64,
        protocol: super::ProtocolRevision,
        user_denied: bool,
    ) -> Option<&'static str> {
        use super::ProtocolRevision::{V2025_06_18, V2025_11_25, V2026_07_28};
        if i32::try_from(code).is_err() {
            return Some("outside the 32-bit range of JSON-RPC error codes");
        }
        match (code, protocol) {
            (-1, _) if user_denied => None,
            (-1, _) => Some(
                "-1 is the code of the user's refusal of sampling, which a policy denial must not take",
            ),
            (-32700 | -32600 | -32601 | -32602 | -32603, _) => {
                Some("one of JSON-RPC 2.0's pre-defined errors")
            }
            (-32768..=-32100, _) => {
                Some("reserved by JSON-RPC 2.0 outside its server-error band -32099..-32000")
            }
            (-32099..=-32020, V2026_07_28) => {
                Some("reserved for the specification by MCP 2026-07-28")
            }
            (-32002, V2025_06_18 | V2025_11_25) => Some("MCP's \"resource not found\""),
            (-32042, V2025_11_25) => Some("MCP 2025-11-25's \"URL elicitation required\""),
            _ => None,
        }
    }

    /// The built-in reason's defaults as a spec, given the table's `error_code`.
    pub fn spec(builtin: &Builtin, error_code: i32) -> ReasonSpec {
        ReasonSpec {
            retryable: builtin.retryable,
            ttl: builtin.ttl,
            code: builtin.code.unwrap_or(error_code),
            message: builtin.message.to_owned(),
        }
    }

    /// Placeholders a message template may use.
    pub const PLACEHOLDERS: &[&str] = &[
        "server",
        "reason",
        "limit",
        "window",
        "resetsAt",
        "retryAfter",
        "deadline",
    ];
}
