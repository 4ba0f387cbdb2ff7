//! Evaluation: deciding one `sampling/createMessage` request against a
//! verified [`Policy`], in the order of `docs/spec/evaluation.md` ("Order"):
//!
//! 1. validation (in [`Engine::decide`]; [`Engine::decide_request`] takes an
//!    already validated [`SamplingRequest`]),
//! 2. identity,
//! 3. replay of a stored decision (a stored deny is answered with the same
//!    `data` bytes; a stored allow only skips consent),
//! 4. `sampling off` / `tools off`,
//! 5. input limits,
//! 6. trims (`includeContext`, `maxTokens`, model hints),
//! 7. rate and 8. budgets, admitted atomically by the store,
//! 9. consent, 10. allow with a deadline.
//!
//! Steps 3–8 are one store call, [`DecisionStore::replay_or_admit`], with
//! steps 4–6 (pure computation) as its callback: there is one path.
//!
//! Every terminal edge yields something to send: a [`Decision`] whose
//! denial has a reply, or an [`Error`] that has one too (fail closed). Every
//! decision carries its [`Cause`]: the block, the statement and the step.
//!
//! By concern: this file the [`Engine`], its entry points and the types of
//! a decision; `steps.rs` steps 3–10; `denial.rs` denials, fresh and
//! replayed; `transitions.rs` what happens to a decision afterwards
//! (approve, refuse, complete, a missed deadline); `input_required.rs` the
//! MCP 2026-07-28 entry point.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::alert::{self, Alert, AlertTracker};
use crate::calendar;
use crate::clock::Clock;
use crate::error::Error;
use crate::frame::{
    self, Annotations, ContextTrim, DenialData, MaxTokensTrim, ModelTrim, Placeholders, Timing,
};
use crate::glob;
use crate::identity::{self, RequestIdentity};
use crate::json::{Json, Kind, Object};
use crate::jsonrpc;
use crate::policy::Policy;
use crate::request::{self, Rejection, SamplingRequest, as_non_negative_integer};
use crate::store::{
    Admission, DecisionKey, DecisionStore, Evaluation, LimitCheck, LimitWindow, Millis,
    Reservation, StoreError, StoredDecision, Verdict,
};
use crate::table::{
    Budget, BudgetMetric, CalendarUnit, Consent, ContextScope, EffectiveBlock, Limit,
    ProtocolRevision, Rate, ReasonSpec, Table, Ttl, Window, builtin,
};

mod denial;
mod input_required;
mod steps;
#[cfg(test)]
mod tests;
mod transitions;

use denial::*;
pub use input_required::{InputDecision, InputOutcome};
use steps::*;

/// What the client declared about itself, as far as the policy cares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientContext {
    /// The client declared the `sampling.context` capability. Under MCP
    /// 2026-07-28 a request for `thisServer`/`allServers` from a client
    /// without it is treated as `max_context none`.
    pub sampling_context: bool,
}

impl ClientContext {
    /// A client that declared `sampling.context` (or not).
    pub fn with_sampling_context(sampling_context: bool) -> Self {
        ClientContext { sampling_context }
    }
}

/// The evaluation steps, numbered as in `docs/spec/evaluation.md` ("Order").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// 1. The bytes are a valid sampling request.
    Validation = 1,
    /// 2. The request identity is computed.
    Identity = 2,
    /// 3. A stored decision for the identity is replayed.
    Replay = 3,
    /// 4. `sampling off`, `tools off`.
    Switches = 4,
    /// 5. `max_messages`, `max_input`.
    InputLimits = 5,
    /// 6. `max_context`, `max_tokens`, `models` narrow the request.
    Trims = 6,
    /// 7. `rate`.
    Rate = 7,
    /// 8. `budget`s.
    Budgets = 8,
    /// 9. `consent`.
    Consent = 9,
    /// 10. Allow, under the block's `deadline`.
    Allow = 10,
}

impl Step {
    /// The step's number, 1–10.
    pub fn number(self) -> u8 {
        self as u8
    }
}

/// The engine's side of each statement's entry (`statements.rs`): the
/// statements that decide, with their keyword, step and evaluation order.
macro_rules! deciding_statements {
    (
        decides { $(
            $(#[doc = $doc:literal])*
            $variant:ident $(($index:ty))? {
                keyword: $keyword:literal,
                $(#[$attr:meta])*
                field: $field:ident: $ty:ty = $default:expr,
                $(applied: $applied:expr,)?
                reason: $reason:expr,
                step: $step:ident,
                order: $order:literal,
            }
        )* }
        alerts { $($alerts:tt)* }
    ) => {
        /// A policy statement as the engine evaluates it, as declared in
        /// `statements.rs`. [`Statement::name`] is the policy's keyword. A
        /// repeatable statement (`Budget`) carries the index of its item in
        /// the block, in source order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Statement {
            $(
                #[doc = concat!("`", $keyword, "`.")]
                $variant $(($index))?,
            )*
        }

        impl Statement {
            /// Every statement of `block`, in evaluation order, budgets in
            /// source order: what a block can be decided by. Readers that
            /// walk a block's statements (`mcpc test` coverage) take them
            /// from here.
            pub fn of_block(block: &EffectiveBlock) -> Vec<Statement> {
                let mut ordered: Vec<(u32, Vec<Statement>)> = vec![$(
                    ($order, each_of!($variant $(($index))?, block.$field)),
                )*];
                ordered.sort_by_key(|(order, _)| *order);
                ordered.into_iter().flat_map(|(_, statements)| statements).collect()
            }

            /// The evaluation step at which the statement decides
            /// (`docs/spec/evaluation.md`, "Order"): a cause's step is its
            /// statement's, except for an answer from the store
            /// ([`Step::Replay`]). `deadline` is step 10's: the allow
            /// carries it, and a reported miss is attributed there.
            pub fn step(self) -> Step {
                match self {
                    $(Statement::$variant { .. } => Step::$step,)*
                }
            }

            /// The policy keyword (`sampling`, `max_input`, `budget`, …).
            pub fn name(self) -> &'static str {
                match self {
                    $(Statement::$variant { .. } => $keyword,)*
                }
            }

            /// Parses [`Statement::stored_name`]'s output; `None` for anything else.
            pub fn from_stored_name(text: &str) -> Option<Statement> {
                $(stored_name_arm!(text, $keyword, $variant $(($index))?);)*
                None
            }
        }
    };
}

/// A block's statements of one entry: one, or one per item of a repeatable
/// statement's field.
macro_rules! each_of {
    ($variant:ident, $field:expr) => {
        vec![Statement::$variant]
    };
    ($variant:ident($index:ty), $field:expr) => {
        (0..$field.len()).map(Statement::$variant).collect()
    };
}

/// Returns the statement whose stored name `text` is, if it is this entry's.
macro_rules! stored_name_arm {
    ($text:ident, $keyword:literal, $variant:ident) => {
        if $text == $keyword {
            return Some(Statement::$variant);
        }
    };
    ($text:ident, $keyword:literal, $variant:ident($index:ty)) => {
        if let Some(index) = $text
            .strip_prefix($keyword)
            .and_then(|rest| rest.strip_prefix(':'))
        {
            // Digits only: `+1` or ` 1` is not a name this runtime wrote.
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            return index.parse().ok().map(Statement::$variant);
        }
    };
}

crate::for_each_statement!(deciding_statements);

impl Statement {
    /// The statement's stable name in the decision store (schema 4,
    /// `docs/spec/store.md`): [`Statement::name`], and for a budget its index
    /// in the block, `budget:0`, `budget:1`, … (a stored decision is only
    /// replayed under the digest of the block that made it, so the index
    /// names the same budget).
    pub fn stored_name(self) -> Cow<'static, str> {
        match self {
            Statement::Budget(i) => Cow::Owned(format!("{}:{i}", self.name())),
            other => Cow::Borrowed(other.name()),
        }
    }
}

/// The table entry whose block governed a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockRef {
    /// Index into the table's `servers`; `None` for the fallback (`defaults`).
    pub entry: Option<usize>,
    /// The entry's server pattern (NFC), `*` for the fallback.
    pub pattern: Arc<str>,
}

/// Why a decision is what it is: which block, which statement, which step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cause {
    /// The block that governed the request.
    pub block: BlockRef,
    /// The statement that decided: the denying one, the first that trimmed,
    /// `consent` when the user was asked (or answered), `deadline` for a
    /// missed deadline; `None` for a plain allow.
    pub statement: Option<Statement>,
    /// The step that decided ([`Step::Replay`] for an answer from the store).
    pub step: Step,
    /// The decision was answered from the store (a stored denial), or the
    /// allow rests on a stored approval.
    pub replayed: bool,
}

/// How long a denial is remembered for its identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expiry {
    /// Not stored (the reason's ttl is `none`).
    NotStored,
    /// Stored until the block changes (ttl `forever`, or `until_reset` with
    /// no window behind it).
    UntilBlockChanges,
    /// Stored until this instant (exclusive).
    At(Millis),
}

impl Expiry {
    /// The stored row's `expires_at` (`None`: until the block changes).
    fn expires_at(self) -> Option<Millis> {
        match self {
            Expiry::At(at) => Some(at),
            Expiry::NotStored | Expiry::UntilBlockChanges => None,
        }
    }

    fn of_stored(expires_at: Option<Millis>) -> Expiry {
        expires_at.map_or(Expiry::UntilBlockChanges, Expiry::At)
    }
}

/// The answer to [`Engine::decide`]: always something to send.
// Returned once per request and matched at once: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Answer {
    /// The bytes are not a valid sampling request: send
    /// [`Rejection::reply`] (-32700/-32600/-32602, step 1).
    Invalid(Rejection),
    /// The request was decided.
    Decided {
        /// The validated request.
        request: SamplingRequest,
        /// What to do with it.
        decision: Decision,
    },
    /// The store failed; send `reply` (the request is refused).
    Failed {
        /// The -32603 reply, with the request's id.
        reply: Vec<u8>,
        /// The underlying error.
        error: Error,
    },
}

/// What a valid `request` decided as `decided` is answered.
fn answer(request: SamplingRequest, decided: Result<Decision, Error>) -> Answer {
    match decided {
        Ok(decision) => Answer::Decided { request, decision },
        Err(error) => Answer::Failed {
            reply: error.reply(request.id.as_ref()),
            error,
        },
    }
}

/// The outcome of a decision.
#[derive(Debug)]
pub enum Decision {
    /// Run the request as sent; enforce the grant's deadline.
    Allow(Grant),
    /// Run the request narrowed by [`Grant::params`]; [`Grant::annotate`] the result.
    Trim(Grant),
    /// Send [`Denial::reply`].
    Deny(Denial),
    /// Ask the user, then [`PendingConsent::approve`] or [`PendingConsent::refuse`].
    NeedsConsent(PendingConsent),
}

impl Decision {
    /// Why the decision is what it is.
    pub fn cause(&self) -> Cause {
        match self {
            Decision::Allow(grant) | Decision::Trim(grant) => grant.cause.clone(),
            Decision::Deny(denial) => denial.cause(),
            Decision::NeedsConsent(pending) => pending.grant.cause.clone(),
        }
    }

    /// The alert this decision raised, if any (`docs/spec/evaluation.md`,
    /// "Alerts"): a retry loop or a server trimmed on nearly every call.
    /// Raised once per identity (per server) per window; show it to the
    /// operator (the proxy logs a warning and writes an `alert` audit line).
    pub fn alert(&self) -> Option<&Alert> {
        match self {
            Decision::Allow(grant) | Decision::Trim(grant) => grant.alert.as_deref(),
            Decision::Deny(denial) => denial.alert.as_deref(),
            Decision::NeedsConsent(pending) => pending.grant.alert.as_deref(),
        }
    }

    fn set_alert(&mut self, alert: Alert) {
        match self {
            Decision::Allow(grant) | Decision::Trim(grant) => grant.alert = Some(Box::new(alert)),
            Decision::Deny(denial) => denial.alert = Some(Box::new(alert)),
            Decision::NeedsConsent(pending) => pending.grant.alert = Some(Box::new(alert)),
        }
    }

    /// What a trim changed, for an evaluated request that was trimmed.
    fn trims(&self) -> Option<&Annotations> {
        match self {
            Decision::Allow(grant) | Decision::Trim(grant) => Some(&grant.annotations),
            Decision::NeedsConsent(pending) => Some(&pending.grant.annotations),
            Decision::Deny(_) => None,
        }
    }
}

/// Changes a trim makes to a request's params.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lowered {
    /// New `includeContext`.
    pub include_context: Option<ContextScope>,
    /// New `maxTokens`.
    pub max_tokens: Option<u64>,
    /// New `modelPreferences.hints` (the kept hints, in order).
    pub model_hints: Option<Vec<Value>>,
}

impl Lowered {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.include_context.is_none() && self.max_tokens.is_none() && self.model_hints.is_none()
    }

    /// Applies the changes to `params` in place.
    pub fn apply(&self, params: &mut Map<String, Value>) {
        if let Some(scope) = self.include_context {
            params.insert("includeContext".to_owned(), Value::from(scope.as_str()));
        }
        if let Some(max) = self.max_tokens {
            params.insert("maxTokens".to_owned(), Value::from(max));
        }
        if let Some(hints) = &self.model_hints
            && let Some(Value::Object(prefs)) = params.get_mut("modelPreferences")
        {
            prefs.insert("hints".to_owned(), Value::Array(hints.clone()));
        }
    }

    /// A copy of `params` with the changes applied, [`Lowered::apply`] on a
    /// clone, except that nothing a change replaces is copied first: a
    /// request of a million model hints trimmed to two copies two, not a
    /// million to drop.
    pub fn applied_to(&self, params: &Map<String, Value>) -> Map<String, Value> {
        let mut copy = Map::new();
        for (key, value) in params {
            let value = match (key.as_str(), value) {
                ("includeContext", _) if self.include_context.is_some() => continue,
                ("maxTokens", _) if self.max_tokens.is_some() => continue,
                ("modelPreferences", Value::Object(prefs)) if self.model_hints.is_some() => {
                    Value::Object(
                        prefs
                            .iter()
                            .filter(|(name, _)| name.as_str() != "hints")
                            .map(|(name, value)| (name.clone(), value.clone()))
                            .collect(),
                    )
                }
                _ => value.clone(),
            };
            copy.insert(key.clone(), value);
        }
        self.apply(&mut copy);
        copy
    }
}

/// What an admitted request spent, to settle or release afterwards.
#[derive(Debug)]
struct Ticket {
    engine: Engine,
    server_id: String,
    /// The refusal key (`docs/spec/identity.md`): denials are stored under it.
    identity: String,
    /// The approval key, under `consent first` only (the one mode that
    /// stores approvals): an approval is stored under it.
    approval: Option<String>,
    /// The admission counted this request on the consent cooldown counter
    /// ([`CONSENT_COUNTER`]): the user was to be asked.
    consent_counted: bool,
    entry: usize,
    reservation: Reservation,
    plan: Arc<Plan>,
}

impl Ticket {
    /// Where a denial of this request is stored: its refusal key.
    fn key(&self) -> DecisionKey {
        DecisionKey {
            server_id: self.server_id.clone(),
            identity: self.identity.clone(),
        }
    }

    /// Where the user's approval of this request is stored: its approval
    /// key (`None` unless the block's consent is `first`).
    fn approval_key(&self) -> Option<DecisionKey> {
        self.approval
            .as_ref()
            .map(|approval| DecisionKey::new(self.server_id.as_str(), approval.as_str()))
    }
}

/// Permission to run one completion. Consumed by what happens to it:
/// [`Grant::complete`] with the real usage, or [`Grant::deadline_missed`].
/// Dropping it (a completion abandoned, a provider failure with unknown
/// usage) keeps its reservation counted, the safe side.
#[derive(Debug)]
pub struct Grant {
    ticket: Ticket,
    deadline_ms: Option<u64>,
    lowered: Lowered,
    annotations: Annotations,
    cause: Cause,
    /// Boxed: an alert is rare, and a decision is moved whole several
    /// times on its way out (an inline `Alert` is most of its size).
    alert: Option<Box<Alert>>,
}

/// A request waiting for the user. It holds its rate and budget
/// reservation until it is approved, refused or abandoned (dropped
/// unresolved, it keeps it).
#[derive(Debug)]
pub struct PendingConsent {
    grant: Grant,
}

/// The user's refusal, taken: the denial to answer with, and the record
/// still owed to the store when it failed.
#[derive(Debug)]
pub struct Refused {
    denial: Denial,
    unrecorded: Option<UnrecordedRefusal>,
}

/// A user's refusal the store has not taken yet (it failed while the
/// refusal was recorded). [`UnrecordedRefusal::record`] tries again; until
/// it succeeds the refusal is not replayed, and its budget spend may still
/// be counted (the safe side).
#[derive(Debug)]
pub struct UnrecordedRefusal {
    owed: Box<Owed>,
}

/// What an [`UnrecordedRefusal`] still owes the store.
#[derive(Debug)]
struct Owed {
    ticket: Ticket,
    stored: Option<StoredDecision>,
    released: bool,
    error: Error,
}

/// A refusal: its typed data, and the reply written from it.
#[derive(Debug, Clone)]
pub struct Denial {
    reason: Arc<str>,
    server: String,
    code: i32,
    retryable: bool,
    /// The exact `error.data` JSON text: written from [`DenialData`] when
    /// decided, stored with the decision, sent verbatim on every replay.
    data: Arc<str>,
    represented: u64,
    expiry: Expiry,
    template: Arc<str>,
    origin: Origin,
    /// The request identity (moved from the decision's key, for alerts).
    identity: String,
    /// Boxed, as [`Grant`]'s.
    alert: Option<Box<Alert>>,
}

/// What a denial's message and cause are derived from.
#[derive(Debug, Clone)]
enum Origin {
    /// Decided now: everything is known.
    Fresh {
        timing: Option<Timing>,
        limit: Option<String>,
        window: Option<String>,
        deadline: Option<String>,
        cause: Cause,
    },
    /// Answered from the store. The cause, `{limit}` and `{window}` are
    /// built when asked, from the stored statement (or, for a row without
    /// one, the stored reason and `data`) and the block (unchanged: a replay
    /// matches only its own block's digest), so that a replay costs no
    /// parsing.
    Replayed {
        engine: Engine,
        entry: usize,
        decided_at: Millis,
        /// Which of the block's input limits naming the stored reason the
        /// request exceeds ([`replay_input_limit`]).
        input_limit: Option<Statement>,
        /// The statement's stored name (schema 4), read when asked;
        /// `None` (or a name this runtime does not know) for a row that has
        /// none, whose statement is derived.
        statement: Option<Arc<str>>,
    },
}

/// One rate or budget statement of a server's block, as the engine admits
/// it ([`Engine::limits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitStatement {
    /// [`Statement::Rate`] or [`Statement::Budget`].
    pub statement: Statement,
    /// The check an admission makes for it (one request or one token).
    pub check: LimitCheck,
    /// `{limit}` as a denial writes it, e.g. `50 requests`, `200000 tokens`.
    pub limit: String,
    /// `{window}` as a denial writes it, e.g. `1m`, `daily`, `24h`.
    pub window: String,
}

/// What an admission check stands for.
#[derive(Debug, Clone, Copy)]
enum CheckKind {
    Rate,
    Budget(usize),
}

/// Precomputed per server entry: digest and counter names.
#[derive(Debug)]
struct Plan {
    digest: Arc<str>,
    /// Counter, kind, limit, window length or unit, in admission order (rate first).
    checks: Vec<(String, CheckKind)>,
}

/// A reason's effective spec, shared, with what its template needs.
#[derive(Debug, Clone)]
struct ReasonRt {
    retryable: bool,
    ttl: Ttl,
    code: i32,
    template: Arc<str>,
    needs_limit: bool,
    needs_window: bool,
    needs_deadline: bool,
}

impl ReasonRt {
    fn new(spec: &ReasonSpec) -> Self {
        let has = |p: &str| spec.message.contains(p);
        ReasonRt {
            retryable: spec.retryable,
            ttl: spec.ttl,
            code: spec.code,
            template: Arc::from(spec.message.as_str()),
            needs_limit: has("{limit}"),
            needs_window: has("{window}"),
            needs_deadline: has("{deadline}"),
        }
    }
}

/// A word-at-a-time FNV-style hash. Server ids and reason names come from
/// the client's own configuration and table, not from the far side, so a
/// keyed hash buys nothing here and SipHash costs more than the rest of a
/// replay's own work.
#[derive(Debug, Clone, Copy, Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        // Fold the high bits down: hashbrown takes its bucket from the low bits.
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(word)).wrapping_mul(PRIME);
            h ^= h >> 32;
        }
        for &b in chunks.remainder() {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
        self.0 = h;
    }
}

type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;

/// Finds the governing entry of a server id fast: exact patterns by hash,
/// globs in source order.
#[derive(Debug)]
struct ServerIndex {
    /// Exact pattern → the entry governing that id: the pattern's own entry,
    /// or an earlier glob that matches it (resolved once, at construction).
    exact: FastMap<String, usize>,
    globs: Vec<usize>,
}

/// Decides sampling requests against one verified [`Policy`]. Cheap to
/// clone: clones share the policy, the store, the clock and the caches;
/// grants and consents hold one, so their transitions need no engine
/// argument.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    policy: Policy,
    store: Arc<dyn DecisionStore>,
    clock: Arc<dyn Clock>,
    index: ServerIndex,
    plans: Vec<Arc<Plan>>,
    /// Each entry's pattern, shared by every [`BlockRef`] naming it.
    patterns: Vec<Arc<str>>,
    reasons: FastMap<String, ReasonRt>,
    /// The spec of a reason the table lacks (cannot happen with a verified
    /// table): unknown retryability is `false`, nothing is stored.
    unknown_reason: ReasonRt,
    /// Retry loops and trimmed servers seen by this engine and its clones.
    alerts: AlertTracker,
}

impl Engine {
    /// An engine running `policy`, remembering decisions in `store`, reading
    /// time from `clock`.
    ///
    /// `models` patterns are NFC-normalised here, as each hint's name is
    /// when it is matched (server patterns already are, by [`Policy`]).
    pub fn new(policy: Policy, store: Arc<dyn DecisionStore>, clock: Arc<dyn Clock>) -> Self {
        let mut table: Table = policy.table().clone();
        for entry in table
            .servers
            .iter_mut()
            .chain(std::iter::once(&mut table.fallback))
        {
            for model in entry.block.models.iter_mut().flatten() {
                if let std::borrow::Cow::Owned(normalized) = glob::nfc(model) {
                    *model = normalized;
                }
            }
        }
        let mut exact = FastMap::default();
        let mut globs = Vec::new();
        for (i, entry) in table.servers.iter().enumerate() {
            if glob::is_glob(&entry.pattern) {
                globs.push(i);
            } else {
                exact.entry(entry.pattern.clone()).or_insert(i);
            }
        }
        // An exact id is governed by the first glob before its own entry that
        // matches it, if any: decided here once instead of at every lookup.
        for (pattern, governing) in exact.iter_mut() {
            if let Some(&g) = globs
                .iter()
                .take_while(|&&g| g < *governing)
                .find(|&&g| glob::matches(&table.servers[g].pattern, pattern))
            {
                *governing = g;
            }
        }
        let entries = || table.servers.iter().chain(std::iter::once(&table.fallback));
        let plans = entries()
            .map(|entry| Arc::new(plan_for(&entry.block, &entry.digest)))
            .collect();
        let patterns = entries()
            .map(|entry| Arc::from(entry.pattern.as_str()))
            .collect();
        let mut reasons: FastMap<String, ReasonRt> = table
            .reasons
            .iter()
            .map(|(name, spec)| (name.clone(), ReasonRt::new(spec)))
            .collect();
        // The consent cooldown's reason is built in and fixed this round: a
        // table compiled before it existed lacks it, and a redeclaration
        // would be covered by no block's digest, so the built-in spec (with
        // the table's `error_code`) always applies.
        if let Some(cooldown) = builtin::get(builtin::CONSENT_COOLDOWN) {
            reasons.insert(
                builtin::CONSENT_COOLDOWN.to_owned(),
                ReasonRt::new(&builtin::spec(cooldown, table.error_code)),
            );
        }
        let unknown_reason = ReasonRt::new(&ReasonSpec {
            retryable: false,
            ttl: Ttl::None,
            code: table.error_code,
            message: "Sampling denied: {reason} for server '{server}'".to_owned(),
        });
        Engine {
            inner: Arc::new(Inner {
                policy: Policy::verified(table),
                store,
                clock,
                index: ServerIndex { exact, globs },
                plans,
                patterns,
                reasons,
                unknown_reason,
                alerts: AlertTracker::default(),
            }),
        }
    }

    /// The policy this engine runs (`models` patterns in NFC).
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// The store this engine records in (to inspect it: `get`, `server_stats`).
    pub fn store(&self) -> &dyn DecisionStore {
        &*self.inner.store
    }

    fn table(&self) -> &Table {
        self.inner.policy.table()
    }

    /// Index of the entry governing `server_id` (`servers.len()` = fallback);
    /// the same answer as [`Table::entry_for`].
    fn entry_index(&self, server_id: &str) -> usize {
        if let Some(&governing) = self.inner.index.exact.get(server_id) {
            return governing;
        }
        let servers = &self.table().servers;
        self.inner
            .index
            .globs
            .iter()
            .copied()
            .find(|&i| glob::matches(&servers[i].pattern, server_id))
            .unwrap_or(servers.len())
    }

    fn block(&self, entry: usize) -> &EffectiveBlock {
        let table = self.table();
        match table.servers.get(entry) {
            Some(e) => &e.block,
            None => &table.fallback.block,
        }
    }

    fn block_ref(&self, entry: usize) -> BlockRef {
        let fallback = entry >= self.table().servers.len();
        BlockRef {
            entry: (!fallback).then_some(entry),
            pattern: self.inner.patterns[entry.min(self.inner.patterns.len() - 1)].clone(),
        }
    }

    fn cause(&self, entry: usize, statement: Option<Statement>, step: Step) -> Cause {
        Cause {
            block: self.block_ref(entry),
            statement,
            step,
            replayed: false,
        }
    }

    fn reason(&self, name: &str) -> &ReasonRt {
        self.inner
            .reasons
            .get(name)
            .unwrap_or(&self.inner.unknown_reason)
    }

    fn now(&self) -> Millis {
        self.inner.clock.now()
    }

    /// The request identity of `params` from `server_id` under this policy's
    /// identity fields: its refusal key (`docs/spec/identity.md`, "The
    /// refusal key"), which stored denials are keyed by.
    pub fn identity(&self, server_id: &str, params: &Map<String, Value>) -> RequestIdentity {
        identity::refusal_key(&glob::nfc(server_id), params, &self.table().identity)
    }

    /// The approval key of `params` from `server_id` for a client with
    /// `ctx` (`docs/spec/identity.md`, "The approval key"): the hash of the
    /// params as they would be forwarded, after this policy's trims.
    pub fn approval_key(
        &self,
        server_id: &str,
        params: &Map<String, Value>,
        ctx: &ClientContext,
    ) -> RequestIdentity {
        let server_id = glob::nfc(server_id);
        let block = self.block(self.entry_index(&server_id));
        let (lowered, _) = self.trims(block, params, ctx);
        forwarded_approval_key(&server_id, params, &lowered)
    }

    /// Parses, validates and decides the raw bytes of a server's
    /// `sampling/createMessage` request (steps 1–10): every input yields
    /// something to send, never a panic.
    pub fn decide(&self, server_id: &str, bytes: &[u8], ctx: &ClientContext) -> Answer {
        let protocol = self.table().protocol;
        let limits = request::Limits::default();
        // Read into the borrowed tree and decided from it: no `Value` is
        // built unless a caller asks for the params. A request the tree
        // refuses, or that is not valid, is read again by the path below,
        // for its exact error.
        if let Some((text, tree)) = request::read_tree(bytes, &limits)
            && let Ok(valid) = request::valid(&tree, protocol)
        {
            let decided = self.decide_validated(server_id, valid.params, ctx);
            let request =
                SamplingRequest::from_text(valid.id.map(Json::to_value), text, valid.rewritten);
            return answer(request, decided);
        }
        let request = match request::parse_sampling_for(bytes, &limits, protocol) {
            Ok(request) => request,
            Err(rejection) => return Answer::Invalid(rejection),
        };
        let decided = self.decide_validated(server_id, request.params(), ctx);
        answer(request, decided)
    }

    /// Decides a request already validated by
    /// [`request::validate_sampling`] (steps 2–10), for a client whose SDK
    /// parsed the wire bytes itself. Its params are checked again as the
    /// table's revision defines them ([`request::check_params_for`]): a
    /// request validated under another revision may not be one under this.
    pub fn decide_request(
        &self,
        server_id: &str,
        request: &SamplingRequest,
        ctx: &ClientContext,
    ) -> Result<Decision, Error> {
        request::check_params_for(request.params(), self.table().protocol)?;
        self.decide_validated(server_id, request.params(), ctx)
    }

    /// Steps 2–10 of params valid under the table's revision, in either
    /// tree.
    fn decide_validated<P: Object>(
        &self,
        server_id: &str,
        params: &P,
        ctx: &ClientContext,
    ) -> Result<Decision, Error> {
        // NFC once, here: the id matches, keys the store and is reported in this form.
        let nfc_id = glob::nfc(server_id);
        let identity = identity::refusal_key_of(&nfc_id, params, &self.table().identity);
        self.decide_known_identity(&nfc_id, identity.into_string(), params, ctx)
            .map_err(|error| match error {
                // The fail-closed reply names the server as the caller did.
                Error::Store { source, .. } => Error::store(server_id, source),
                other => other,
            })
    }

    /// Steps 3–10 for a request whose identity is already known: what the
    /// benchmarks time, the identity excluded. The identity must be
    /// [`identity::refusal_key`] of these params. Not part of the API: an
    /// embedder passing a wrong identity would replay another request's
    /// decisions. It exists only with the `bench` feature, which this
    /// crate's benches turn on (a dev-dependency on itself) and nothing
    /// else should.
    #[cfg(feature = "bench")]
    pub fn decide_with_identity(
        &self,
        server_id: &str,
        identity: String,
        params: &Map<String, Value>,
        ctx: &ClientContext,
    ) -> Result<Decision, Error> {
        self.decide_known_identity(server_id, identity, params, ctx)
    }

    /// Steps 3–10 for a request whose identity, [`identity::refusal_key`]
    /// of these params, is already known.
    fn decide_known_identity<P: Object>(
        &self,
        server_id: &str,
        identity: String,
        params: &P,
        ctx: &ClientContext,
    ) -> Result<Decision, Error> {
        let server_id = &*glob::nfc(server_id);
        let now = self.now();
        let entry = self.entry_index(server_id);
        let mut represented = None;
        let mut decision = self.decide_steps(
            server_id,
            entry,
            identity,
            params,
            ctx,
            now,
            &mut represented,
        )?;
        if let Some(alert) = self.observe(server_id, entry, &decision, represented, now) {
            decision.set_alert(alert);
        }
        Ok(decision)
    }

    /// Feeds a decision to the alert tracker: its replay's `represented`
    /// count, and, for an evaluated request, whether it was trimmed (a
    /// stored denial answered again never reaches the trims, and is not a
    /// call of the trim alert). The retry-loop alert wins when both would
    /// be raised by one decision (the trim one is raised by the next
    /// trimmed call).
    fn observe(
        &self,
        server_id: &str,
        entry: usize,
        decision: &Decision,
        represented: Option<u64>,
        now: Millis,
    ) -> Option<Alert> {
        let setting = self
            .block(entry)
            .retry_alert
            .unwrap_or(alert::DEFAULT_SETTING);
        let (identity, evaluated) = match decision {
            // An allow on a stored approval re-presented the approval key's
            // row: its count is that row's.
            Decision::Allow(grant) | Decision::Trim(grant) => (
                grant
                    .approval_key()
                    .filter(|_| grant.replayed())
                    .unwrap_or(grant.identity()),
                true,
            ),
            Decision::NeedsConsent(pending) => (pending.identity(), true),
            Decision::Deny(denial) => (denial.identity.as_str(), !denial.replayed()),
        };
        let retry = represented.and_then(|represented| {
            self.inner
                .alerts
                .replayed(server_id, identity, represented, now, setting)
        });
        let trim = evaluated
            .then(|| {
                self.inner
                    .alerts
                    .decided(server_id, identity, decision.trims(), now, setting)
            })
            .flatten();
        retry.or(trim)
    }

    /// The digest of the effective block governing `server_id` (NFC first,
    /// as [`Engine::decide`] does): the digest its decisions are stored and
    /// replayed under. A stored decision with another digest is stale.
    pub fn digest_for(&self, server_id: &str) -> &str {
        &self.inner.plans[self.entry_index(&glob::nfc(server_id))].digest
    }

    /// The rate and budget statements of the block governing `server_id`,
    /// in admission order, each with the [`LimitCheck`] an admission at
    /// `now` makes for it (built by the admission's own code; the amount is
    /// one request, or one token for a token budget) and its `{limit}` and
    /// `{window}` as a denial writes them: what `mcpc store budgets` asks
    /// the store's [`crate::store::StoreAdmin::usage`] about.
    pub fn limits(&self, server_id: &str, now: Millis) -> Vec<LimitStatement> {
        let entry = self.entry_index(&glob::nfc(server_id));
        let block = self.block(entry);
        Self::checks_of(block, &self.inner.plans[entry], 1, now)
            .map(|(kind, check)| {
                let (statement, (limit, window)) = match kind {
                    CheckKind::Rate => (
                        Statement::Rate,
                        block.rate.as_ref().map(rate_labels).unwrap_or_default(),
                    ),
                    CheckKind::Budget(i) => (
                        Statement::Budget(i),
                        block.budgets.get(i).map(budget_labels).unwrap_or_default(),
                    ),
                };
                LimitStatement {
                    statement,
                    check,
                    limit,
                    window,
                }
            })
            .collect()
    }
}

/// The counter of a server's prompts the user did not approve (refused,
/// or not answered yet), for the consent cooldown
/// (`docs/spec/evaluation.md`, step 9). Not a `rate` or `budget:` name, so
/// it never meets a policy's counter.
pub const CONSENT_COUNTER: &str = "consent:unapproved";

/// A server with this many prompts the user did not approve within
/// [`CONSENT_COOLDOWN_WINDOW_MS`] is not prompted again
/// (`policy.consent_cooldown`) until one leaves the window.
pub const CONSENT_COOLDOWN_PROMPTS: u64 = 3;

/// The rolling window of the consent cooldown: one hour.
pub const CONSENT_COOLDOWN_WINDOW_MS: i64 = 60 * 60 * 1000;

/// Step 5's limits, in evaluation order: which statement, its field, whether
/// a request exceeds it, and its `{limit}` as a denial writes it.
struct InputLimit {
    statement: Statement,
    of: fn(&EffectiveBlock) -> Option<&Limit>,
    measure: Measure,
    label: fn(u64) -> String,
}

/// What an input limit measures of a request.
#[derive(Clone, Copy)]
enum Measure {
    /// The entries of `messages`.
    Messages,
    /// The canonical bytes of `systemPrompt` and `messages`.
    Input,
}

impl Measure {
    /// Whether `params` measure more than `max`.
    fn exceeded<P: Object>(self, params: &P, max: u64) -> bool {
        match self {
            Measure::Messages => message_count(params) > max,
            Measure::Input => !input_fits(params, max),
        }
    }
}

const INPUT_LIMITS: [InputLimit; 2] = [
    InputLimit {
        statement: Statement::MaxMessages,
        of: |block| block.max_messages.as_ref(),
        measure: Measure::Messages,
        label: |max| format!("{max} messages"),
    },
    InputLimit {
        statement: Statement::MaxInput,
        of: |block| block.max_input.as_ref(),
        measure: Measure::Input,
        label: frame::format_size,
    },
];

/// What produced a denial, beyond its reason name.
#[derive(Debug)]
struct Produced {
    statement: Statement,
    step: Step,
    timing: Option<Timing>,
    /// The instant the denial stops being true (rate: retryAfter; budget: resetsAt).
    reset: Option<Millis>,
    limit: Option<String>,
    window: Option<String>,
    deadline: Option<String>,
    /// The policy alone gives this denial again (a switch or an input
    /// limit): the store evicts such decisions first.
    recomputable: bool,
}

impl Produced {
    fn new(statement: Statement, step: Step) -> Self {
        Produced {
            statement,
            step,
            timing: None,
            reset: None,
            limit: None,
            window: None,
            deadline: None,
            recomputable: false,
        }
    }

    /// A switch's or an input limit's denial.
    fn recomputable(self) -> Self {
        Produced {
            recomputable: true,
            ..self
        }
    }
}

/// Stable counter names: they do not depend on the block's position or
/// limit, so editing a block does not reset what was spent.
fn plan_for(block: &EffectiveBlock, digest: &str) -> Plan {
    let mut checks: Vec<(String, CheckKind)> = Vec::new();
    if block.rate.is_some() {
        checks.push(("rate".to_owned(), CheckKind::Rate));
    }
    for (i, budget) in block.budgets.iter().enumerate() {
        let metric = match budget.metric {
            BudgetMetric::Requests => "requests",
            BudgetMetric::Tokens => "tokens",
        };
        let window = match budget.window {
            Window::Calendar(CalendarUnit::Hour) => "hour".to_owned(),
            Window::Calendar(CalendarUnit::Day) => "day".to_owned(),
            Window::Calendar(CalendarUnit::Week) => "week".to_owned(),
            Window::Calendar(CalendarUnit::Month) => "month".to_owned(),
            Window::RollingMs(ms) => format!("rolling:{ms}"),
        };
        let mut counter = format!("budget:{metric}:{window}");
        // Two budgets over the same metric and window (the checker normally
        // refuses this) still get separate counters.
        let mut n = 2;
        while checks.iter().any(|(c, _)| *c == counter) {
            counter = format!("budget:{metric}:{window}#{n}");
            n += 1;
        }
        checks.push((counter, CheckKind::Budget(i)));
    }
    Plan {
        digest: Arc::from(digest),
        checks,
    }
}
