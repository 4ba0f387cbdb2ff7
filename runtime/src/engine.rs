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
            Decision::Allow(grant) | Decision::Trim(grant) => grant.alert.as_ref(),
            Decision::Deny(denial) => denial.alert.as_ref(),
            Decision::NeedsConsent(pending) => pending.grant.alert.as_ref(),
        }
    }

    fn set_alert(&mut self, alert: Alert) {
        match self {
            Decision::Allow(grant) | Decision::Trim(grant) => grant.alert = Some(alert),
            Decision::Deny(denial) => denial.alert = Some(alert),
            Decision::NeedsConsent(pending) => pending.grant.alert = Some(alert),
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
    alert: Option<Alert>,
}

impl Grant {
    /// Milliseconds the completion may take; on a miss call
    /// [`Grant::deadline_missed`]. `None`: the block sets no deadline.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.deadline_ms
    }

    /// Whether the policy narrowed the request (a [`Decision::Trim`]).
    pub fn is_trim(&self) -> bool {
        !self.annotations.is_empty()
    }

    /// The changes a trim made to the request's params (empty for an allow).
    pub fn lowered(&self) -> &Lowered {
        &self.lowered
    }

    /// What the result's `_meta` announces (empty for an allow).
    pub fn annotations(&self) -> &Annotations {
        &self.annotations
    }

    /// The params to send to the model: `original` with the trims applied.
    pub fn params(&self, original: &Map<String, Value>) -> Map<String, Value> {
        let mut params = original.clone();
        self.lowered.apply(&mut params);
        params
    }

    /// Adds the trim annotations to a `CreateMessageResult` under `_meta`
    /// (created if absent; keys already there are kept). `false`, changing
    /// nothing, when the result or its `_meta` is not an object.
    pub fn annotate(&self, result: &mut Value) -> bool {
        frame::annotate_result(result, &self.annotations)
    }

    /// Why the request may run.
    pub fn cause(&self) -> &Cause {
        &self.cause
    }

    /// The alert the decision raised ([`Decision::alert`]).
    pub fn alert(&self) -> Option<&Alert> {
        self.alert.as_ref()
    }

    /// The request was allowed on a stored approval (consent not asked again).
    pub fn replayed(&self) -> bool {
        self.cause.replayed
    }

    /// The server the request came from (NFC).
    pub fn server_id(&self) -> &str {
        &self.ticket.server_id
    }

    /// The request identity: its refusal key (`docs/spec/identity.md`),
    /// which a denial of it is stored under.
    pub fn identity(&self) -> &str {
        &self.ticket.identity
    }

    /// The approval key (`docs/spec/identity.md`) the user's approval of
    /// this request is stored under; `None` unless the block's consent is
    /// `first`, the one mode that stores approvals.
    pub fn approval_key(&self) -> Option<&str> {
        self.ticket.approval.as_deref()
    }

    /// The store's handle of what the admission counted
    /// ([`Reservation::NONE`] when the block has neither rate nor budgets).
    pub fn reservation(&self) -> Reservation {
        self.ticket.reservation
    }

    /// The model globs (`models`) the request may run on, `None` when the
    /// block allows any. The client picks its model from these, whether or
    /// not the request carried hints.
    pub fn allowed_models(&self) -> Option<impl ExactSizeIterator<Item = &str> + '_> {
        self.ticket
            .engine
            .block(self.ticket.entry)
            .models
            .as_ref()
            .map(|models| models.iter().map(String::as_str))
    }

    /// Whether `model` (the model the client is about to run, or ran) is
    /// allowed for this request.
    pub fn model_allowed(&self, model: &str) -> bool {
        self.ticket
            .engine
            .block(self.ticket.entry)
            .models
            .as_ref()
            .is_none_or(|globs| globs.iter().any(|g| glob::matches(g, &glob::nfc(model))))
    }

    /// The completion ran: settle the token budgets with the real usage
    /// (input + output tokens as the provider reported them). Request
    /// budgets and the rate keep their count.
    pub fn complete(self, usage_tokens: u64) -> Result<(), Error> {
        self.ticket.engine.settle(&self.ticket, usage_tokens)
    }

    /// The client ran `model` (the result's `model`), outside the block's
    /// `models`: the completion must not reach the server. The tokens it
    /// used are settled first (`usage_tokens`; `None` leaves the
    /// reservation counted: it ran), then the denial is `policy.model`'s
    /// (`docs/spec/frames.md`, "A result from a model outside `models`").
    /// Nothing is stored: the next request is decided afresh. Send the
    /// denial's reply in place of the result.
    pub fn model_refused(self, usage_tokens: Option<u64>) -> Result<Denial, Error> {
        if let Some(tokens) = usage_tokens {
            self.ticket.engine.settle(&self.ticket, tokens)?;
        }
        self.ticket.engine.report_model_refused(&self.ticket)
    }

    /// The completion missed its deadline: the identity is denied with the
    /// block's deadline reason (stored per its ttl, so an immediate
    /// identical retry is answered from the store). Send the denial's reply.
    pub fn deadline_missed(self) -> Result<Denial, Error> {
        self.ticket.engine.report_deadline_miss(&self.ticket)
    }

    /// The client asked its user anyway (after a replayed approval, or
    /// under `consent never`) and the user refused: the user's word, taken
    /// exactly as [`PendingConsent::refuse`] takes it (`user.denied`
    /// stored, the budget spend returned).
    pub fn refused_by_user(self) -> Refused {
        let engine = self.ticket.engine.clone();
        engine.refuse(self.ticket)
    }
}

/// A request waiting for the user. It holds its rate and budget
/// reservation until it is approved, refused or abandoned (dropped
/// unresolved, it keeps it).
#[derive(Debug)]
pub struct PendingConsent {
    grant: Grant,
}

impl PendingConsent {
    /// The server asking (NFC).
    pub fn server_id(&self) -> &str {
        self.grant.server_id()
    }

    /// The request identity (its refusal key): a refusal is stored under it.
    pub fn identity(&self) -> &str {
        self.grant.identity()
    }

    /// The approval key an approval is stored under (`consent first` only).
    pub fn approval_key(&self) -> Option<&str> {
        self.grant.approval_key()
    }

    /// What the request will run with if approved (show these to the user).
    pub fn lowered(&self) -> &Lowered {
        &self.grant.lowered
    }

    /// The params that will run if approved: `original` with the trims applied.
    pub fn params(&self, original: &Map<String, Value>) -> Map<String, Value> {
        self.grant.params(original)
    }

    /// The trims that will be announced in the result.
    pub fn annotations(&self) -> &Annotations {
        &self.grant.annotations
    }

    /// Why consent is asked ([`Statement::Consent`], [`Step::Consent`]).
    pub fn cause(&self) -> &Cause {
        &self.grant.cause
    }

    /// The user approved: the request may run (with `consent first` the
    /// approval is stored as `user.approved`).
    pub fn approve(self) -> Result<Grant, Error> {
        let engine = self.grant.ticket.engine.clone();
        engine.approve(self.grant)
    }

    /// The user refused: stored as `user.denied`; the reserved budget is
    /// returned (the rate spend stays: the server did ask). Send the
    /// denial's reply ([`Refused::denial`]) whether or not the store took
    /// it: the user's word is the same either way. A refusal the store did
    /// not take comes back as [`Refused::unrecorded`], to record later.
    pub fn refuse(self) -> Refused {
        let engine = self.grant.ticket.engine.clone();
        engine.refuse(self.grant.ticket)
    }

    /// The user's answer never came: the client failed (an error other than
    /// the user's rejection), or the task it ran ended without a result.
    /// Nothing is stored, and the reserved budget is returned (the rate
    /// spend stays: the server did ask).
    pub fn abandon(self) -> Result<(), Error> {
        let ticket = &self.grant.ticket;
        ticket.engine.release_budgets(ticket)?;
        ticket.engine.release_consent(ticket)
    }
}

/// The user's refusal, taken: the denial to answer with, and the record
/// still owed to the store when it failed.
#[derive(Debug)]
pub struct Refused {
    denial: Denial,
    unrecorded: Option<UnrecordedRefusal>,
}

impl Refused {
    /// The `user.denied` denial: its reply is the server's answer, the same
    /// bytes whether or not the store took it.
    pub fn denial(&self) -> &Denial {
        &self.denial
    }

    /// The denial and, when the store failed, the record still owed.
    pub fn into_parts(self) -> (Denial, Option<UnrecordedRefusal>) {
        (self.denial, self.unrecorded)
    }

    /// The denial when the store took the refusal, else the store's error:
    /// for a caller that keeps no refusal to record later (a one-shot
    /// evaluation, a test).
    pub fn recorded(self) -> Result<Denial, Error> {
        match self.unrecorded {
            None => Ok(self.denial),
            Some(unrecorded) => Err(unrecorded.owed.error),
        }
    }
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

impl UnrecordedRefusal {
    /// The server whose request the user refused (NFC).
    pub fn server_id(&self) -> &str {
        &self.owed.ticket.server_id
    }

    /// The refused request's identity.
    pub fn identity(&self) -> &str {
        &self.owed.ticket.identity
    }

    /// Why the store did not take it (the last attempt's error).
    pub fn error(&self) -> &Error {
        &self.owed.error
    }

    /// Tries the record again: the budget spend returned (if not yet) and
    /// `user.denied` stored. On failure the refusal comes back, still owed.
    pub fn record(self) -> Result<(), UnrecordedRefusal> {
        let Owed {
            ticket,
            stored,
            released,
            ..
        } = *self.owed;
        let engine = ticket.engine.clone();
        engine.record_refusal(ticket, stored, released)
    }
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
    alert: Option<Alert>,
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

impl Denial {
    /// The reason name (`data.reason`), e.g. `policy.budget_exhausted`.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The alert the decision raised ([`Decision::alert`]).
    pub fn alert(&self) -> Option<&Alert> {
        self.alert.as_ref()
    }

    /// The server id (`data.server`, NFC).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The JSON-RPC error code (the reason's `code`).
    pub fn code(&self) -> i32 {
        self.code
    }

    /// Whether the server may usefully retry (`data.retryable`).
    pub fn retryable(&self) -> bool {
        self.retryable
    }

    /// `data.resetsAt` or `data.retryAfter`, when the reason has one.
    pub fn timing(&self) -> Option<Timing> {
        match &self.origin {
            Origin::Fresh { timing, .. } => *timing,
            Origin::Replayed { .. } => DenialData::from_json(&self.data).and_then(|d| d.timing),
        }
    }

    /// The typed `error.data` object.
    pub fn data(&self) -> DenialData {
        if let Origin::Replayed { .. } = self.origin
            && let Some(data) = DenialData::from_json(&self.data)
        {
            return data;
        }
        DenialData {
            reason: self.reason.to_string(),
            server: self.server.clone(),
            retryable: self.retryable,
            timing: self.timing(),
        }
    }

    /// The denial was answered from the store.
    pub fn replayed(&self) -> bool {
        matches!(self.origin, Origin::Replayed { .. })
    }

    /// How often the identity has been re-presented (after this replay; 0
    /// for a fresh denial).
    pub fn represented(&self) -> u64 {
        self.represented
    }

    /// How long the denial is remembered.
    pub fn expiry(&self) -> Expiry {
        self.expiry
    }

    /// Which block, statement and step denied. For a replay the statement
    /// is the one stored with the decision, or, for a row without one,
    /// derived from the stored reason and `data` against the block (see
    /// `docs/spec/evaluation.md`, "The cause of a decision").
    pub fn cause(&self) -> Cause {
        match &self.origin {
            Origin::Fresh { cause, .. } => cause.clone(),
            Origin::Replayed {
                engine,
                entry,
                decided_at,
                input_limit,
                statement,
            } => {
                let block = engine.block(*entry);
                // The stored statement when the row has one (schema 4): a
                // reason shared by two statements cannot tell them apart.
                let statement = stored_statement(statement).or_else(|| {
                    replay_statement(block, &self.reason, self.timing(), *input_limit, *decided_at)
                });
                Cause {
                    block: engine.block_ref(*entry),
                    statement,
                    step: Step::Replay,
                    replayed: true,
                }
            }
        }
    }

    /// The prose message: the reason's template with its placeholders filled.
    pub fn message(&self) -> String {
        let timing = self.timing();
        let (limit, window, deadline) = match &self.origin {
            Origin::Fresh {
                limit,
                window,
                deadline,
                ..
            } => (limit.clone(), window.clone(), deadline.clone()),
            Origin::Replayed {
                engine,
                entry,
                decided_at,
                input_limit,
                statement,
            } => {
                let rt = engine.reason(&self.reason);
                let block = engine.block(*entry);
                let statement = stored_statement(statement);
                let (limit, window) = if rt.needs_limit || rt.needs_window {
                    match statement {
                        Some(statement) => statement_limit_window(block, statement),
                        None => {
                            replay_limit_window(block, *input_limit, &self.reason, timing, *decided_at)
                        }
                    }
                } else {
                    (None, None)
                };
                // A fresh denial fills `{deadline}` only for the deadline.
                let deadline = (rt.needs_deadline
                    && statement.is_none_or(|s| s == Statement::Deadline))
                .then(|| {
                    block
                        .deadline
                        .as_ref()
                        .map(|d| frame::format_duration(d.ms))
                })
                .flatten();
                (limit, window, deadline)
            }
        };
        let values = Placeholders {
            server: &self.server,
            reason: &self.reason,
            limit,
            window,
            resets_at: match timing {
                Some(Timing::ResetsAt(at)) => Some(at),
                _ => None,
            },
            retry_after: match timing {
                Some(Timing::RetryAfter(s)) => Some(s),
                _ => None,
            },
            deadline,
        };
        frame::render_message(&self.template, &values)
    }

    /// The JSON-RPC error response refusing the request with this `id`.
    pub fn reply(&self, id: Option<&Value>) -> Vec<u8> {
        frame::error_response(id, self.code, &self.message(), Some(&self.data)).into_bytes()
    }

    /// MCP 2026-07-28: the error answering the client's own pending call
    /// (id `pending_call_id`) when a sampling entry of its
    /// `InputRequiredResult` is denied: this denial's code, message and
    /// `data` bytes.
    pub fn local_error(&self, pending_call_id: Option<&Value>) -> Vec<u8> {
        self.reply(pending_call_id)
    }
}

/// One entry of an MCP 2026-07-28 `inputRequests`, decided.
#[derive(Debug)]
pub struct InputDecision {
    /// The server-assigned key of the entry (for a list, its index).
    pub key: String,
    /// What happened to it.
    pub outcome: InputOutcome,
}

/// How one `inputRequests` entry was handled.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum InputOutcome {
    /// Not a sampling request (e.g. `elicitation/create`): not this runtime's business.
    NotSampling,
    /// A malformed sampling entry ([`Error::Request`]); answer the client's
    /// pending call with [`Error::reply`].
    Invalid(Error),
    /// Decided like any sampling request (its key as the id); a
    /// [`Decision::Deny`] is answered with [`Denial::local_error`].
    Decided {
        /// The validated request.
        request: SamplingRequest,
        /// What to do with it.
        decision: Decision,
    },
    /// The store failed; the entry is refused with [`Error::reply`].
    Failed(Error),
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
            // A verified table's codes fit (`TableError::CodeOutOfRange`).
            code: i32::try_from(spec.code).unwrap_or(jsonrpc::INTERNAL_ERROR),
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
        let request =
            match request::parse_sampling_for(bytes, &request::Limits::default(), protocol) {
                Ok(request) => request,
                Err(rejection) => return Answer::Invalid(rejection),
            };
        match self.decide_validated(server_id, &request, ctx) {
            Ok(decision) => Answer::Decided { request, decision },
            Err(error) => Answer::Failed {
                reply: error.reply(request.id.as_ref()),
                error,
            },
        }
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
        request::check_params_for(&request.params, self.table().protocol)?;
        self.decide_validated(server_id, request, ctx)
    }

    /// Steps 2–10 of a request valid under the table's revision.
    fn decide_validated(
        &self,
        server_id: &str,
        request: &SamplingRequest,
        ctx: &ClientContext,
    ) -> Result<Decision, Error> {
        // NFC once, here: the id matches, keys the store and is reported in this form.
        let nfc_id = glob::nfc(server_id);
        let identity = identity::refusal_key(&nfc_id, &request.params, &self.table().identity);
        self.decide_with_identity(&nfc_id, identity.into_string(), &request.params, ctx)
            .map_err(|error| match error {
                // The fail-closed reply names the server as the caller did.
                Error::Store { source, .. } => Error::store(server_id, source),
                other => other,
            })
    }

    /// Steps 3–10 for a request whose identity is already known: what the
    /// benchmarks time, the identity excluded. The identity must be
    /// [`identity::refusal_key`] of these params. Hidden because an
    /// embedder passing a wrong identity would replay another request's
    /// decisions.
    #[doc(hidden)]
    pub fn decide_with_identity(
        &self,
        server_id: &str,
        identity: String,
        params: &Map<String, Value>,
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

    /// Steps 3–10; `represented` is set to the store's count when a stored
    /// decision was replayed.
    // Inlined: it returns a large `Decision`, which a call would copy.
    #[inline(always)]
    #[allow(clippy::too_many_arguments, reason = "the steps' inputs, passed once")]
    fn decide_steps(
        &self,
        server_id: &str,
        entry: usize,
        identity: String,
        params: &Map<String, Value>,
        ctx: &ClientContext,
        now: Millis,
        represented: &mut Option<u64>,
    ) -> Result<Decision, Error> {
        let plan = &self.inner.plans[entry];
        let block = self.block(entry);
        let key = DecisionKey {
            server_id: server_id.to_owned(),
            identity,
        };
        // 6. Trims, computed first: they are pure (the block and the client
        // context), and the approval key covers the params as forwarded,
        // trims applied (`docs/spec/identity.md`, "The approval key").
        // Only `consent first` stores approvals, so only it needs the key.
        let (lowered, annotations) = self.trims(block, params, ctx);
        let approval = (block.consent == Consent::First)
            .then(|| forwarded_approval_key(server_id, params, &lowered).into_string());

        // Steps 3–8 in one store call: the replay (a denial under the
        // refusal key, else an approval under the approval key); then,
        // unless a stored denial answers, steps 4–5 and the admission of
        // steps 7–8, with the consent cooldown's check when the user is to
        // be asked (step 9). `evaluate` says what it found as one
        // [`Evaluated`]; a store may call it again (a retried transaction),
        // and the last call is the one its answer belongs to.
        let mut evaluated: Option<Evaluated> = None;
        let mut evaluate = |stored: Option<&StoredDecision>, checks: &mut Vec<LimitCheck>| {
            let outcome = self.evaluate(block, plan, &lowered, params, now, stored, checks);
            let evaluation = outcome.evaluation();
            evaluated = Some(outcome);
            evaluation
        };
        let mut checks = Vec::new();
        let answer = self
            .inner
            .store
            .replay_or_admit(
                &key,
                approval.as_deref(),
                &plan.digest,
                now,
                &mut checks,
                &mut evaluate,
            )
            .map_err(|e| Error::store(server_id, e))?;
        *represented = answer.replayed.as_ref().map(|stored| stored.represented);
        // A store that answers without evaluating, or without admitting what
        // `evaluate` asked for, breaks `replay_or_admit`'s contract: fail closed.
        let broken = |detail: &str| {
            Err(Error::store(
                server_id,
                StoreError::BadRow {
                    path: "<store>".into(),
                    detail: format!("replay_or_admit {detail}"),
                },
            ))
        };
        let (approved_before, consent_counted) = match evaluated {
            Some(Evaluated::Replay | Evaluated::Deny { .. }) if answer.admission.is_some() => {
                return broken("admitted what evaluate did not ask for");
            }
            Some(Evaluated::Replay) => {
                return match answer.replayed {
                    Some(stored) if stored.verdict == Verdict::Deny => Ok(Decision::Deny(
                        self.replayed_denial(key, entry, stored, params),
                    )),
                    _ => broken("replayed no stored denial"),
                };
            }
            Some(Evaluated::Deny { reason, produced }) => {
                return self.deny(key, entry, plan, reason, produced, now);
            }
            Some(Evaluated::Admit {
                approved_before,
                consent_counted,
            }) => (approved_before, consent_counted),
            None => return broken("answered without evaluating the request"),
        };
        let reservation = match answer.admission {
            Some(Admission::Admitted { reservation }) => reservation,
            Some(Admission::Refused {
                index,
                available_at,
                ..
            }) => {
                return self.refuse_limit(key, entry, plan, &checks, index, available_at, now);
            }
            None => return broken("did not admit what evaluate asked for"),
        };

        // The first trim names the statement of a trim's cause.
        let trimmed_by = if annotations.context.is_some() {
            Some(Statement::MaxContext)
        } else if annotations.max_tokens.is_some() {
            Some(Statement::MaxTokens)
        } else if annotations.model.is_some() {
            Some(Statement::Models)
        } else {
            None
        };
        let mut grant = Grant {
            ticket: Ticket {
                engine: self.clone(),
                server_id: key.server_id,
                identity: key.identity,
                approval,
                consent_counted,
                entry,
                reservation,
                plan: plan.clone(),
            },
            deadline_ms: block.deadline.as_ref().map(|d| d.ms),
            lowered,
            annotations,
            cause: Cause {
                replayed: approved_before,
                ..self.cause(
                    entry,
                    trimmed_by,
                    if trimmed_by.is_some() {
                        Step::Trims
                    } else {
                        Step::Allow
                    },
                )
            },
            alert: None,
        };

        // 9. Consent.
        if will_ask(block.consent, approved_before) {
            grant.cause.statement = Some(Statement::Consent);
            grant.cause.step = Step::Consent;
            return Ok(Decision::NeedsConsent(PendingConsent { grant }));
        }

        // 10. Allow.
        Ok(if grant.is_trim() {
            Decision::Trim(grant)
        } else {
            Decision::Allow(grant)
        })
    }

    /// What `replay_or_admit`'s callback decides from the stored decision
    /// it found (step 3), the block (steps 4–5) and the trimmed request
    /// (the checks of steps 7–8, and step 9's consent cooldown check).
    #[allow(clippy::too_many_arguments, reason = "the steps' inputs, passed once")]
    fn evaluate<'b>(
        &self,
        block: &'b EffectiveBlock,
        plan: &Plan,
        lowered: &Lowered,
        params: &Map<String, Value>,
        now: Millis,
        stored: Option<&StoredDecision>,
        checks: &mut Vec<LimitCheck>,
    ) -> Evaluated<'b> {
        // 3. Replay.
        let mut approved_before = false;
        if let Some(stored) = stored {
            match stored.verdict {
                Verdict::Deny if stored_denial_answers(block, stored, params) => {
                    return Evaluated::Replay;
                }
                Verdict::Deny => {}
                Verdict::Allow => approved_before = true,
            }
        }
        // 4–5. Switches and input limits.
        if let Some((reason, produced)) = switch_or_input_denial(block, params) {
            return Evaluated::Deny { reason, produced };
        }
        // 7–8. Rate and budgets, admitted together; then the consent
        // cooldown (step 9) when the user is to be asked.
        *checks = self.admission_checks(block, plan, lowered, params, now);
        let consent_counted = will_ask(block.consent, approved_before);
        if consent_counted {
            checks.push(consent_check());
        }
        Evaluated::Admit {
            approved_before,
            consent_counted,
        }
    }

    fn trims(
        &self,
        block: &EffectiveBlock,
        params: &Map<String, Value>,
        ctx: &ClientContext,
    ) -> (Lowered, Annotations) {
        let mut lowered = Lowered::default();
        let mut annotations = Annotations::default();

        // includeContext. Absent means `none`. Validation refuses any other
        // value (-32602); a caller that built params without it still never
        // gets an unknown value widened past the block's maximum.
        let (requested, recognised) = match params.get("includeContext") {
            None | Some(Value::Null) => (ContextScope::None, true),
            Some(Value::String(s)) => match ContextScope::parse(s) {
                Some(scope) => (scope, true),
                None => (ContextScope::AllServers, false),
            },
            Some(_) => (ContextScope::AllServers, false),
        };
        let mut max = block.max_context;
        if self.table().protocol >= ProtocolRevision::V2026_07_28 && !ctx.sampling_context {
            max = ContextScope::None;
        }
        if requested > max || !recognised {
            let applied = requested.min(max);
            lowered.include_context = Some(applied);
            annotations.context = Some(ContextTrim { requested, applied });
        }

        // maxTokens.
        if let Some(max) = block.max_tokens
            && let Some(requested) = max_tokens_of(params)
            && requested > max
        {
            lowered.max_tokens = Some(max);
            annotations.max_tokens = Some(MaxTokensTrim {
                requested,
                applied: max,
            });
        }

        // Model hints.
        if let Some(models) = &block.models
            && let Some(hints) = params
                .get("modelPreferences")
                .and_then(|p| p.get("hints"))
                .and_then(Value::as_array)
        {
            let name = |hint: &Value| hint.get("name").and_then(Value::as_str).map(str::to_owned);
            let allowed = |hint: &Value| {
                hint.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| models.iter().any(|m| glob::matches(m, &glob::nfc(n))))
            };
            if !hints.iter().all(allowed) {
                let kept: Vec<Value> = hints.iter().filter(|h| allowed(h)).cloned().collect();
                annotations.model = Some(ModelTrim {
                    requested: hints.iter().map(name).collect(),
                    applied: kept.iter().filter_map(name).collect(),
                    allowed: models.clone(),
                });
                lowered.model_hints = Some(kept);
            }
        }
        (lowered, annotations)
    }

    fn limit_checks(
        &self,
        block: &EffectiveBlock,
        plan: &Plan,
        reserve_tokens: u64,
        now: Millis,
    ) -> Vec<LimitCheck> {
        Self::checks_of(block, plan, reserve_tokens, now)
            .map(|(_, check)| check)
            .collect()
    }

    /// Steps 7–8's checks with what each stands for, in admission order:
    /// the one construction of a [`LimitCheck`], for admissions and for
    /// [`Engine::limits`].
    fn checks_of<'a>(
        block: &'a EffectiveBlock,
        plan: &'a Plan,
        reserve_tokens: u64,
        now: Millis,
    ) -> impl Iterator<Item = (CheckKind, LimitCheck)> + 'a {
        plan.checks.iter().filter_map(move |(counter, kind)| {
            let check = match *kind {
                CheckKind::Rate => block.rate.as_ref().map(|rate| LimitCheck {
                    counter: counter.clone(),
                    amount: 1,
                    limit: rate.count,
                    window: LimitWindow::Rolling { ms: rate.window_ms },
                }),
                CheckKind::Budget(i) => block.budgets.get(i).map(|budget| LimitCheck {
                    counter: counter.clone(),
                    amount: match budget.metric {
                        BudgetMetric::Requests => 1,
                        BudgetMetric::Tokens => reserve_tokens,
                    },
                    limit: budget.limit,
                    window: limit_window(budget.window, now),
                }),
            };
            check.map(|check| (*kind, check))
        })
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

    /// Steps 7–8's checks for a request after its trims: `maxTokens` as
    /// lowered (else as asked, else the block's cap) is what a token budget
    /// reserves. Empty when the block has neither rate nor budgets.
    fn admission_checks(
        &self,
        block: &EffectiveBlock,
        plan: &Plan,
        lowered: &Lowered,
        params: &Map<String, Value>,
        now: Millis,
    ) -> Vec<LimitCheck> {
        if plan.checks.is_empty() {
            return Vec::new();
        }
        let reserve_tokens = lowered
            .max_tokens
            .or_else(|| max_tokens_of(params))
            .or(block.max_tokens)
            .unwrap_or(0);
        self.limit_checks(block, plan, reserve_tokens, now)
    }

    /// The denial for an admission the store refused at `checks[index]`.
    #[allow(clippy::too_many_arguments)]
    fn refuse_limit(
        &self,
        key: DecisionKey,
        entry: usize,
        plan: &Plan,
        checks: &[LimitCheck],
        index: usize,
        available_at: Millis,
        now: Millis,
    ) -> Result<Decision, Error> {
        let block = self.block(entry);
        if checks
            .get(index)
            .is_some_and(|check| check.counter == CONSENT_COUNTER)
        {
            return self.refuse_consent_cooldown(key, entry, plan, available_at, now);
        }
        let (kind, window) = match (plan.checks.get(index), checks.get(index)) {
            (Some((_, kind)), Some(check)) => (*kind, check.window),
            // A store answering with an index we did not send: refuse as rate.
            _ => (CheckKind::Rate, LimitWindow::Rolling { ms: 60_000 }),
        };
        let window_ms = match window {
            LimitWindow::Rolling { ms } => ms_i64(ms),
            LimitWindow::Fixed { start, end } => end.saturating_sub(start),
        };
        // `Millis::MAX`: the request alone exceeds the limit; it cannot fit
        // before the window has passed (and not even then).
        let available_at = if available_at == Millis::MAX {
            match window {
                LimitWindow::Fixed { end, .. } => end,
                LimitWindow::Rolling { .. } => now.saturating_add(window_ms),
            }
        } else {
            available_at.max(now)
        };
        match kind {
            CheckKind::Rate => {
                let reason = block
                    .rate
                    .as_ref()
                    .map_or(builtin::RATE_LIMIT, |r| r.reason.as_str());
                let wait_ms = available_at.saturating_sub(now).max(1);
                let seconds = (wait_ms as u64).div_ceil(1000);
                let (limit, window) = block.rate.as_ref().map(rate_labels).unzip();
                let produced = Produced {
                    timing: Some(Timing::RetryAfter(seconds)),
                    reset: Some(now.saturating_add((seconds as i64).saturating_mul(1000))),
                    limit,
                    window,
                    ..Produced::new(Statement::Rate, Step::Rate)
                };
                self.deny(key, entry, plan, reason, produced, now)
            }
            CheckKind::Budget(i) => {
                let budget = block.budgets.get(i);
                let reason = budget.map_or(builtin::BUDGET_EXHAUSTED, |b| b.reason.as_str());
                let resets_at = calendar::ceil_to_second(available_at);
                let (limit, window) = budget.map(budget_labels).unzip();
                let produced = Produced {
                    timing: Some(Timing::ResetsAt(resets_at)),
                    reset: Some(resets_at),
                    limit,
                    window,
                    ..Produced::new(Statement::Budget(i), Step::Budgets)
                };
                self.deny(key, entry, plan, reason, produced, now)
            }
        }
    }

    /// The denial of a request the user would be asked about while its
    /// server is in consent cooldown (`docs/spec/evaluation.md`, step 9):
    /// retryable, with `retryAfter` the moment enough of the server's
    /// unapproved prompts leave the window.
    fn refuse_consent_cooldown(
        &self,
        key: DecisionKey,
        entry: usize,
        plan: &Plan,
        available_at: Millis,
        now: Millis,
    ) -> Result<Decision, Error> {
        let available_at = if available_at == Millis::MAX {
            now.saturating_add(CONSENT_COOLDOWN_WINDOW_MS)
        } else {
            available_at.max(now)
        };
        let wait_ms = available_at.saturating_sub(now).max(1);
        let seconds = (wait_ms as u64).div_ceil(1000);
        let produced = Produced {
            timing: Some(Timing::RetryAfter(seconds)),
            reset: Some(now.saturating_add((seconds as i64).saturating_mul(1000))),
            ..Produced::new(Statement::Consent, Step::Consent)
        };
        self.deny(key, entry, plan, builtin::CONSENT_COOLDOWN, produced, now)
    }

    /// Builds, stores (per the reason's ttl) and returns a fresh denial.
    fn deny(
        &self,
        key: DecisionKey,
        entry: usize,
        plan: &Plan,
        reason: &str,
        produced: Produced,
        now: Millis,
    ) -> Result<Decision, Error> {
        self.denial(key, entry, plan, reason, produced, now)
            .map(Decision::Deny)
    }

    fn denial(
        &self,
        key: DecisionKey,
        entry: usize,
        plan: &Plan,
        reason: &str,
        produced: Produced,
        now: Millis,
    ) -> Result<Denial, Error> {
        let (denial, stored) = self.unrecorded_denial(key, entry, plan, reason, produced, now);
        if let Some(stored) = stored {
            let key = DecisionKey {
                server_id: denial.server.clone(),
                identity: denial.identity.clone(),
            };
            self.inner
                .store
                .record(&key, &stored)
                .map_err(|e| Error::store(&key.server_id, e))?;
        }
        Ok(denial)
    }

    /// A fresh denial and the decision to store for it (`None` when its
    /// reason is not stored), without touching the store.
    fn unrecorded_denial(
        &self,
        key: DecisionKey,
        entry: usize,
        plan: &Plan,
        reason: &str,
        produced: Produced,
        now: Millis,
    ) -> (Denial, Option<StoredDecision>) {
        let rt = self.reason(reason);
        let data = DenialData {
            reason: reason.to_owned(),
            server: key.server_id.clone(),
            retryable: rt.retryable,
            timing: produced.timing,
        }
        .to_json();
        let data: Arc<str> = Arc::from(data);
        let reason: Arc<str> = Arc::from(reason);
        let expiry = expiry(rt.ttl, now, produced.reset);
        let stored = (expiry != Expiry::NotStored).then(|| StoredDecision {
            verdict: Verdict::Deny,
            reason: reason.clone(),
            digest: plan.digest.clone(),
            expires_at: expiry.expires_at(),
            data: Some(data.clone()),
            represented: 0,
            decided_at: now,
            recomputable: produced.recomputable,
            statement: Some(Arc::from(produced.statement.stored_name())),
        });
        let denial = Denial {
            reason,
            server: key.server_id,
            identity: key.identity,
            code: rt.code,
            retryable: rt.retryable,
            data,
            represented: 0,
            expiry,
            template: rt.template.clone(),
            origin: Origin::Fresh {
                timing: produced.timing,
                limit: produced.limit,
                window: produced.window,
                deadline: produced.deadline,
                cause: self.cause(entry, Some(produced.statement), produced.step),
            },
            alert: None,
        };
        (denial, stored)
    }

    /// A stored denial, answered again: same `data` bytes; the message and
    /// the cause are derived when asked ([`Origin::Replayed`]).
    fn replayed_denial(
        &self,
        key: DecisionKey,
        entry: usize,
        stored: StoredDecision,
        params: &Map<String, Value>,
    ) -> Denial {
        let rt = self.reason(&stored.reason);
        let block = self.block(entry);
        let data = stored.data.unwrap_or_else(|| {
            // A row written without data (another tool): rebuild it.
            DenialData {
                reason: stored.reason.to_string(),
                server: key.server_id.clone(),
                retryable: rt.retryable,
                timing: None,
            }
            .to_json()
            .into()
        });
        let input_limit = replay_input_limit(block, &stored.reason, params);
        Denial {
            reason: stored.reason,
            server: key.server_id,
            identity: key.identity,
            code: rt.code,
            retryable: rt.retryable,
            data,
            represented: stored.represented,
            expiry: Expiry::of_stored(stored.expires_at),
            template: rt.template.clone(),
            origin: Origin::Replayed {
                engine: self.clone(),
                entry,
                decided_at: stored.decided_at,
                statement: stored.statement,
                input_limit,
            },
            alert: None,
        }
    }

    /// [`PendingConsent::approve`].
    fn approve(&self, mut grant: Grant) -> Result<Grant, Error> {
        let now = self.now();
        let ticket = &grant.ticket;
        let block = self.block(ticket.entry);
        let rt = self.reason(builtin::USER_APPROVED);
        let approval = expiry(rt.ttl, now, None);
        self.release_consent(ticket)?;
        if block.consent == Consent::First
            && approval != Expiry::NotStored
            && let Some(approval_key) = ticket.approval_key()
        {
            self.inner
                .store
                .record(
                    &approval_key,
                    &StoredDecision {
                        verdict: Verdict::Allow,
                        reason: Arc::from(builtin::USER_APPROVED),
                        digest: ticket.plan.digest.clone(),
                        expires_at: approval.expires_at(),
                        data: None,
                        represented: 0,
                        decided_at: now,
                        recomputable: false,
                        statement: Some(Arc::from(Statement::Consent.stored_name())),
                    },
                )
                .map_err(|e| Error::store(&ticket.server_id, e))?;
        }
        grant.cause.statement = Some(Statement::Consent);
        grant.cause.step = Step::Consent;
        Ok(grant)
    }

    /// [`PendingConsent::refuse`] and [`Grant::refused_by_user`]: the
    /// denial is built first, so the user's word is answered even when the
    /// store then fails to take it.
    fn refuse(&self, ticket: Ticket) -> Refused {
        let now = self.now();
        let (denial, stored) = self.unrecorded_denial(
            ticket.key(),
            ticket.entry,
            &ticket.plan,
            builtin::USER_DENIED,
            Produced::new(Statement::Consent, Step::Consent),
            now,
        );
        let unrecorded = self.record_refusal(ticket, stored, false).err();
        Refused { denial, unrecorded }
    }

    /// Returns a refusal's budget spend (unless `released` already) and
    /// stores its `user.denied`; on failure the refusal is still owed.
    fn record_refusal(
        &self,
        ticket: Ticket,
        stored: Option<StoredDecision>,
        released: bool,
    ) -> Result<(), UnrecordedRefusal> {
        let released = if released {
            Ok(())
        } else {
            self.release_budgets(&ticket)
        };
        let released_now = released.is_ok();
        let recorded = released.and_then(|()| match &stored {
            Some(stored) => self
                .inner
                .store
                .record(&ticket.key(), stored)
                .map_err(|e| Error::store(&ticket.server_id, e)),
            None => Ok(()),
        });
        recorded.map_err(|error| UnrecordedRefusal {
            owed: Box::new(Owed {
                released: released_now,
                ticket,
                stored,
                error,
            }),
        })
    }

    /// Returns what a prompt counted on the consent cooldown counter: an
    /// approved or abandoned prompt is not a refusal.
    fn release_consent(&self, ticket: &Ticket) -> Result<(), Error> {
        if !ticket.consent_counted || ticket.reservation.is_none() {
            return Ok(());
        }
        self.inner
            .store
            .settle(&ticket.server_id, ticket.reservation, CONSENT_COUNTER, 0)
            .map_err(|e| Error::store(&ticket.server_id, e))
    }

    /// Returns a reservation's budget spend (not its rate spend).
    fn release_budgets(&self, ticket: &Ticket) -> Result<(), Error> {
        if ticket.reservation.is_none() {
            return Ok(());
        }
        for (counter, kind) in &ticket.plan.checks {
            if let CheckKind::Budget(_) = kind {
                self.inner
                    .store
                    .settle(&ticket.server_id, ticket.reservation, counter, 0)
                    .map_err(|e| Error::store(&ticket.server_id, e))?;
            }
        }
        Ok(())
    }

    /// [`Grant::complete`].
    fn settle(&self, ticket: &Ticket, usage_tokens: u64) -> Result<(), Error> {
        if ticket.reservation.is_none() {
            return Ok(());
        }
        let block = self.block(ticket.entry);
        for (counter, kind) in &ticket.plan.checks {
            if let CheckKind::Budget(i) = kind
                && block
                    .budgets
                    .get(*i)
                    .is_some_and(|b| b.metric == BudgetMetric::Tokens)
            {
                self.inner
                    .store
                    .settle(&ticket.server_id, ticket.reservation, counter, usage_tokens)
                    .map_err(|e| Error::store(&ticket.server_id, e))?;
            }
        }
        Ok(())
    }

    /// [`Grant::deadline_missed`].
    fn report_deadline_miss(&self, ticket: &Ticket) -> Result<Denial, Error> {
        let now = self.now();
        let block = self.block(ticket.entry);
        let reason = block
            .deadline
            .as_ref()
            .map_or(builtin::DEADLINE, |d| d.reason.as_str());
        let rt = self.reason(reason);
        let timing = match rt.ttl {
            Ttl::AfterMs(ms) if rt.retryable => Some(Timing::RetryAfter(ms.div_ceil(1000))),
            _ => None,
        };
        let produced = Produced {
            timing,
            deadline: block
                .deadline
                .as_ref()
                .map(|d| frame::format_duration(d.ms)),
            ..Produced::new(Statement::Deadline, Step::Allow)
        };
        self.denial(
            ticket.key(),
            ticket.entry,
            &ticket.plan,
            reason,
            produced,
            now,
        )
    }

    fn report_model_refused(&self, ticket: &Ticket) -> Result<Denial, Error> {
        let produced = Produced::new(Statement::Models, Step::Trims);
        self.denial(
            ticket.key(),
            ticket.entry,
            &ticket.plan,
            builtin::MODEL,
            produced,
            self.now(),
        )
    }

    /// MCP 2026-07-28: decides every sampling entry of an
    /// `InputRequiredResult` (or of its `inputRequests` value) received from
    /// `server_id`, given as raw bytes so duplicate keys are caught. Entries
    /// come back in key order. A malformed result is an [`Error::Request`]
    /// whose [`Error::reply`] answers the client's pending call.
    pub fn decide_input_required(
        &self,
        server_id: &str,
        bytes: &[u8],
        ctx: &ClientContext,
    ) -> Result<Vec<InputDecision>, Error> {
        let result = request::parse_strict(bytes)?;
        Ok(frame::input_requests(&result)
            .into_iter()
            .map(|entry| {
                let outcome = if !entry.is_sampling() {
                    InputOutcome::NotSampling
                } else {
                    let mut wrapped = Map::new();
                    wrapped.insert("jsonrpc".to_owned(), Value::from("2.0"));
                    wrapped.insert("id".to_owned(), Value::from(entry.key.as_str()));
                    wrapped.insert("method".to_owned(), Value::from(jsonrpc::SAMPLING_METHOD));
                    if let Some(params) = entry.entry.get("params") {
                        wrapped.insert("params".to_owned(), params.clone());
                    }
                    match request::validate_sampling_for(
                        Value::Object(wrapped),
                        self.table().protocol,
                    ) {
                        Err(error) => InputOutcome::Invalid(error.into()),
                        Ok(request) => match self.decide_validated(server_id, &request, ctx) {
                            Ok(decision) => InputOutcome::Decided { request, decision },
                            Err(error) => InputOutcome::Failed(error),
                        },
                    }
                };
                InputDecision {
                    key: entry.key,
                    outcome,
                }
            })
            .collect())
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

/// Whether step 9 asks the user.
fn will_ask(consent: Consent, approved_before: bool) -> bool {
    match consent {
        Consent::Always => true,
        Consent::First => !approved_before,
        Consent::Never => false,
    }
}

/// The admission check of a prompt on [`CONSENT_COUNTER`]: it fits while
/// fewer than [`CONSENT_COOLDOWN_PROMPTS`] unapproved prompts are in the
/// window, and counts this one until the user approves it.
fn consent_check() -> LimitCheck {
    LimitCheck {
        counter: CONSENT_COUNTER.to_owned(),
        amount: 1,
        limit: CONSENT_COOLDOWN_PROMPTS,
        window: LimitWindow::Rolling {
            ms: CONSENT_COOLDOWN_WINDOW_MS as u64,
        },
    }
}

/// The approval key of `params` as forwarded: with `lowered` applied.
fn forwarded_approval_key(
    server_id: &str,
    params: &Map<String, Value>,
    lowered: &Lowered,
) -> RequestIdentity {
    if lowered.is_empty() {
        return identity::approval_key(server_id, params);
    }
    let mut forwarded = params.clone();
    lowered.apply(&mut forwarded);
    identity::approval_key(server_id, &forwarded)
}

/// Steps 4–5: the denial a switch or an input limit gives this request, if any.
fn switch_or_input_denial<'b>(
    block: &'b EffectiveBlock,
    params: &Map<String, Value>,
) -> Option<(&'b str, Produced)> {
    // 4. Switches.
    if !block.sampling.enabled {
        let produced = Produced::new(Statement::Sampling, Step::Switches).recomputable();
        return Some((&block.sampling.reason, produced));
    }
    if !block.tools.enabled && carries_tools(params) {
        let produced = Produced::new(Statement::Tools, Step::Switches).recomputable();
        return Some((&block.tools.reason, produced));
    }
    // 5. Input limits.
    INPUT_LIMITS.iter().find_map(|input| {
        let limit = (input.of)(block).filter(|l| (input.exceeded)(params, l.max))?;
        let produced = Produced {
            limit: Some((input.label)(limit.max)),
            ..Produced::new(input.statement, Step::InputLimits).recomputable()
        };
        Some((limit.reason.as_str(), produced))
    })
}

/// Step 5's limits, in evaluation order: which statement, its field, whether
/// a request exceeds it, and its `{limit}` as a denial writes it.
struct InputLimit {
    statement: Statement,
    of: fn(&EffectiveBlock) -> Option<&Limit>,
    exceeded: fn(&Map<String, Value>, u64) -> bool,
    label: fn(u64) -> String,
}

const INPUT_LIMITS: [InputLimit; 2] = [
    InputLimit {
        statement: Statement::MaxMessages,
        of: |block| block.max_messages.as_ref(),
        exceeded: |params, max| message_count(params) > max,
        label: |max| format!("{max} messages"),
    },
    InputLimit {
        statement: Statement::MaxInput,
        of: |block| block.max_input.as_ref(),
        exceeded: |params, max| !input_fits(params, max),
        label: frame::format_size,
    },
];

/// The entries of `messages` (0 when absent).
fn message_count(params: &Map<String, Value>) -> u64 {
    params
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, Vec::len) as u64
}

/// What `replay_or_admit`'s callback found, with what each answer needs.
#[derive(Debug)]
enum Evaluated<'b> {
    /// 3. A stored denial answers the request again.
    Replay,
    /// 4–5. A switch or an input limit denies it, with this reason.
    Deny { reason: &'b str, produced: Produced },
    /// 7–8. Admit the checks it filled in.
    Admit {
        /// A stored approval was found (step 3): `consent first` does not ask.
        approved_before: bool,
        /// The checks include the consent cooldown's: the user is to be asked.
        consent_counted: bool,
    },
}

impl Evaluated<'_> {
    /// What the store is told.
    fn evaluation(&self) -> Evaluation {
        match self {
            Evaluated::Admit { .. } => Evaluation::Admit,
            Evaluated::Replay | Evaluated::Deny { .. } => Evaluation::Answered,
        }
    }
}

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

/// When a decision with `ttl`, made at `now`, expires. A fixed ttl never
/// outlives the condition that produced the denial (`reset`).
fn expiry(ttl: Ttl, now: Millis, reset: Option<Millis>) -> Expiry {
    match ttl {
        // Outside the calendar every limit refuses and never frees
        // (`docs/spec/store.md`, "Time outside the calendar"): an expiry
        // counted from such a `now` would keep the denial until
        // `Millis::MAX`, for every later, sane, clock. Answered, not stored.
        Ttl::UntilReset | Ttl::AfterMs(_) if !crate::store::in_calendar(now) => Expiry::NotStored,
        Ttl::None => Expiry::NotStored,
        Ttl::Forever => Expiry::UntilBlockChanges,
        // A reason with no window behind it (not a budget or rate): until the block changes.
        Ttl::UntilReset => reset.map_or(Expiry::UntilBlockChanges, Expiry::At),
        Ttl::AfterMs(ms) => {
            let after = now.saturating_add(ms_i64(ms));
            Expiry::At(reset.map_or(after, |r| after.min(r)))
        }
    }
}

fn ms_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The store's window for a budget at `now`.
fn limit_window(window: Window, now: Millis) -> LimitWindow {
    match window {
        Window::Calendar(unit) => {
            let (start, end) = calendar::window(unit, now);
            LimitWindow::Fixed { start, end }
        }
        Window::RollingMs(ms) => LimitWindow::Rolling { ms },
    }
}

/// `{window}` of a budget: `hourly`, `daily`, `weekly`, `monthly`, or the rolling length (`24h`).
fn window_label(budget: &Budget) -> String {
    match budget.window {
        Window::Calendar(CalendarUnit::Hour) => "hourly".to_owned(),
        Window::Calendar(CalendarUnit::Day) => "daily".to_owned(),
        Window::Calendar(CalendarUnit::Week) => "weekly".to_owned(),
        Window::Calendar(CalendarUnit::Month) => "monthly".to_owned(),
        Window::RollingMs(ms) => frame::format_duration(ms),
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

/// `maxTokens` as validation accepts it: an integer, also when written
/// `9000.0` or `9e3` (a float must not slip past the clamp or the
/// reservation). The same reader as validation's.
fn max_tokens_of(params: &Map<String, Value>) -> Option<u64> {
    params.get("maxTokens").and_then(as_non_negative_integer)
}

/// Whether a stored denial answers this request again (step 3). `tools` is
/// not part of the identity: after a `tools off` denial, the same request
/// without tools is asking something new.
fn stored_denial_answers(
    block: &EffectiveBlock,
    stored: &StoredDecision,
    params: &Map<String, Value>,
) -> bool {
    let tools_only = !block.tools.enabled
        && *stored.reason == *block.tools.reason
        && *stored.reason != *block.sampling.reason;
    !tools_only || carries_tools(params)
}

/// Whether the request offers tools to the model (`tools` non-empty, or a
/// `toolChoice`): what `tools off` refuses.
fn carries_tools(params: &Map<String, Value>) -> bool {
    let tools = match params.get("tools") {
        None | Some(Value::Null) => false,
        Some(Value::Array(list)) => !list.is_empty(),
        Some(_) => true,
    };
    tools || params.get("toolChoice").is_some_and(|c| !c.is_null())
}

/// Whether the canonical bytes of `systemPrompt` + `messages` are at most
/// `max`. A cheap upper bound settles the common case without writing the
/// canonical form; only requests near the limit are counted exactly.
fn input_fits(params: &Map<String, Value>, max: u64) -> bool {
    let bound = ["systemPrompt", "messages"]
        .iter()
        .filter_map(|field| params.get(*field))
        .fold(0u64, |sum, value| {
            sum.saturating_add(canonical_bound(value))
        });
    bound <= max || input_bytes(params) <= max
}

/// An upper bound of the canonical length of `value`: every byte of a
/// string becomes at most 6 (`\u001f`; NFC at most triples a non-ASCII
/// character's bytes), a number at most 32 characters.
fn canonical_bound(value: &Value) -> u64 {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 32,
        Value::String(s) => 6 * s.len() as u64 + 2,
        Value::Array(items) => items.iter().fold(2 + items.len() as u64, |sum, v| {
            sum.saturating_add(canonical_bound(v))
        }),
        Value::Object(map) => map.iter().fold(2 + 2 * map.len() as u64, |sum, (k, v)| {
            sum.saturating_add(6 * k.len() as u64 + 2)
                .saturating_add(canonical_bound(v))
        }),
    }
}

/// Canonical bytes of `systemPrompt` + `messages` (absent members count 0).
fn input_bytes(params: &Map<String, Value>) -> u64 {
    let mut count = identity::ByteCount::default();
    for field in ["systemPrompt", "messages"] {
        if let Some(value) = params.get(field) {
            identity::write_canonical(value, &mut count);
        }
    }
    count.0
}

/// `{limit}` and `{window}` for a denial by `budget`, fresh or replayed:
/// e.g. `50 requests` and `daily`, or `200000 tokens` and `24h`.
fn budget_labels(budget: &Budget) -> (String, String) {
    let unit = match (budget.metric, budget.limit) {
        (BudgetMetric::Requests, 1) => "request",
        (BudgetMetric::Requests, _) => "requests",
        (BudgetMetric::Tokens, 1) => "token",
        (BudgetMetric::Tokens, _) => "tokens",
    };
    (format!("{} {unit}", budget.limit), window_label(budget))
}

/// `{limit}` and `{window}` for a rate-limit denial, fresh or replayed:
/// e.g. `30 requests` and `1m`.
fn rate_labels(rate: &Rate) -> (String, String) {
    let unit = if rate.count == 1 {
        "request"
    } else {
        "requests"
    };
    (
        format!("{} {unit}", rate.count),
        frame::format_duration(rate.window_ms),
    )
}

/// The statement a replayed row recorded, if it has one this runtime knows.
fn stored_statement(name: &Option<Arc<str>>) -> Option<Statement> {
    name.as_deref().and_then(Statement::from_stored_name)
}

/// `{limit}` and `{window}` of a replayed denial whose statement the store
/// recorded (schema 4): that statement's, as the fresh denial wrote them
/// (none for a statement without a limit).
fn statement_limit_window(
    block: &EffectiveBlock,
    statement: Statement,
) -> (Option<String>, Option<String>) {
    match statement {
        Statement::Rate => block.rate.as_ref().map(rate_labels).unzip(),
        Statement::Budget(i) => block.budgets.get(i).map(budget_labels).unzip(),
        other => (
            INPUT_LIMITS
                .iter()
                .find(|input| input.statement == other)
                .and_then(|input| Some((input.label)((input.of)(block)?.max))),
            None,
        ),
    }
}

/// `{limit}` and `{window}` for a replayed denial, derived again from the
/// (unchanged) block. The stored `data` says which kind of statement
/// denied: `resetsAt` a budget, `retryAfter` the rate, neither an input
/// limit; this keeps a reason shared by several statements (`as NAME`)
/// apart.
fn replay_limit_window(
    block: &EffectiveBlock,
    input_limit: Option<Statement>,
    reason: &str,
    timing: Option<Timing>,
    decided_at: Millis,
) -> (Option<String>, Option<String>) {
    match timing {
        Some(Timing::ResetsAt(at)) => replay_budget(block, reason, at, decided_at)
            .and_then(|i| block.budgets.get(i))
            .map(budget_labels)
            .unzip(),
        Some(Timing::RetryAfter(_)) => block
            .rate
            .as_ref()
            .filter(|r| r.reason == reason)
            .map(rate_labels)
            .unzip(),
        None => input_limit.map_or((None, None), |statement| {
            statement_limit_window(block, statement)
        }),
    }
}

/// The input limit behind a replayed input denial with `reason`: of the
/// block's input limits naming it, the first this request exceeds, else the
/// last. The request is measured only when two limits share the reason
/// (only the limits before the last are).
fn replay_input_limit(
    block: &EffectiveBlock,
    reason: &str,
    params: &Map<String, Value>,
) -> Option<Statement> {
    let mut naming = INPUT_LIMITS
        .iter()
        .filter_map(|input| Some((input, (input.of)(block).filter(|l| l.reason == reason)?)))
        .peekable();
    while let Some((input, limit)) = naming.next() {
        if naming.peek().is_none() || (input.exceeded)(params, limit.max) {
            return Some(input.statement);
        }
    }
    None
}

/// The statement behind a replayed denial, derived from its reason, the
/// kind of its stored timing and the (unchanged) block, in the order the
/// steps run: `resetsAt` is a budget's, `retryAfter` the rate's or a
/// missed deadline's; without timing a switch, an input limit, the user's
/// refusal or a missed deadline. Only for a row that does not record its
/// statement (stored before schema 4): a replay matches only the digest of
/// the block that decided, so the derivation sees that same block, but two
/// statements sharing a reason cannot be told apart by it.
fn replay_statement(
    block: &EffectiveBlock,
    reason: &str,
    timing: Option<Timing>,
    input_limit: Option<Statement>,
    decided_at: Millis,
) -> Option<Statement> {
    let deadline = || {
        block
            .deadline
            .as_ref()
            .map_or(reason == builtin::DEADLINE, |d| d.reason == reason)
            .then_some(Statement::Deadline)
    };
    match timing {
        Some(Timing::ResetsAt(at)) => {
            replay_budget(block, reason, at, decided_at).map(Statement::Budget)
        }
        Some(Timing::RetryAfter(_)) => {
            if block.rate.as_ref().is_some_and(|r| r.reason == reason) {
                Some(Statement::Rate)
            } else {
                deadline()
            }
        }
        None => {
            if !block.sampling.enabled && block.sampling.reason == reason {
                Some(Statement::Sampling)
            } else if !block.tools.enabled && block.tools.reason == reason {
                Some(Statement::Tools)
            } else if input_limit.is_some() {
                input_limit
            } else if reason == builtin::USER_DENIED {
                Some(Statement::Consent)
            } else {
                deadline()
            }
        }
    }
}

/// The budget behind a replayed budget denial (its index): the one with
/// that reason whose window reset is the stored `resetsAt`.
fn replay_budget(
    block: &EffectiveBlock,
    reason: &str,
    resets_at: Millis,
    decided_at: Millis,
) -> Option<usize> {
    let candidates: Vec<(usize, &Budget)> = block
        .budgets
        .iter()
        .enumerate()
        .filter(|(_, b)| b.reason == reason)
        .collect();
    let calendar_match = candidates.iter().find(|(_, b)| match b.window {
        Window::Calendar(unit) => calendar::window(unit, decided_at).1 == resets_at,
        Window::RollingMs(_) => false,
    });
    calendar_match
        .or_else(|| {
            candidates
                .iter()
                .find(|(_, b)| matches!(b.window, Window::RollingMs(_)))
        })
        .or(candidates.first())
        .map(|(i, _)| *i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_bound_is_an_upper_bound() {
        let values = [
            serde_json::json!({"a\u{1}": ["\u{1f}\"\\", 1.5e300, -0.0, null, true, {"é": "e\u{301}"}]}),
            serde_json::json!("\u{0958}\u{1D160}\u{FB2C}"),
            serde_json::json!([12345678901234567890u64, -9007199254740993i64, 1e-7]),
        ];
        for value in values {
            assert!(
                canonical_bound(&value) >= identity::canonical_len(&value),
                "{value}"
            );
        }
    }

    #[test]
    fn timing_is_read_back_from_data() {
        let data =
            r#"{"reason":"r","server":",\"retryAfter\":9","retryable":true,"retryAfter":12}"#;
        let timing = |data: &str| DenialData::from_json(data).and_then(|d| d.timing);
        assert_eq!(timing(data), Some(Timing::RetryAfter(12)));
        let data =
            r#"{"reason":"r","server":"s","retryable":false,"resetsAt":"2026-03-11T00:00:00Z"}"#;
        assert_eq!(
            timing(data),
            Some(Timing::ResetsAt(calendar::timestamp(2026, 3, 11, 0, 0, 0)))
        );
        assert_eq!(
            timing(r#"{"reason":"r","server":"s","retryable":true}"#),
            None
        );
        assert_eq!(DenialData::from_json(r#"{"reason":"r"}"#), None);
    }

    #[test]
    fn expiry_never_outlives_the_condition() {
        assert_eq!(expiry(Ttl::None, 0, Some(5)), Expiry::NotStored);
        assert_eq!(expiry(Ttl::Forever, 0, Some(5)), Expiry::UntilBlockChanges);
        assert_eq!(expiry(Ttl::UntilReset, 0, Some(5)), Expiry::At(5));
        assert_eq!(expiry(Ttl::UntilReset, 0, None), Expiry::UntilBlockChanges);
        assert_eq!(expiry(Ttl::AfterMs(10), 0, Some(5)), Expiry::At(5));
        assert_eq!(expiry(Ttl::AfterMs(10), 0, None), Expiry::At(10));
        assert_eq!(
            expiry(Ttl::AfterMs(u64::MAX), 1, None),
            Expiry::At(i64::MAX)
        );
    }

    #[test]
    fn steps_are_numbered_as_the_specification() {
        let steps = [
            Step::Validation,
            Step::Identity,
            Step::Replay,
            Step::Switches,
            Step::InputLimits,
            Step::Trims,
            Step::Rate,
            Step::Budgets,
            Step::Consent,
            Step::Allow,
        ];
        let numbers: Vec<u8> = steps.iter().map(|s| s.number()).collect();
        assert_eq!(numbers, (1..=10).collect::<Vec<u8>>());
    }
}
