//! Evaluation: deciding one `sampling/createMessage` request against the
//! compiled table, in DESIGN's order (see `runtime/ENGINE.md`):
//!
//! 1. validation (in [`Engine::decide_bytes`]; [`Engine::decide`] takes an
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
//! Every terminal edge yields a [`Decision`] that turns into a frame; a store
//! failure is an [`EngineError`] that also has a frame (fail closed).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};

use crate::calendar;
use crate::clock::Clock;
use crate::frame::{
    self, Annotations, ContextTrim, DenialData, MaxTokensTrim, ModelTrim, Placeholders, Timing,
};
use crate::glob;
use crate::identity;
use crate::request::{self, SamplingRequest};
use crate::store::{
    Admission, DecisionKey, DecisionStore, LimitCheck, LimitWindow, Millis, Reservation,
    StoreError, StoredDecision, Verdict,
};
use crate::table::{
    Budget, BudgetMetric, CalendarUnit, Consent, ContextScope, EffectiveBlock, ProtocolRevision,
    Rate, ReasonSpec, Table, Ttl, Window, builtin,
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

/// Why the engine could not decide. The request must be refused: send
/// [`EngineError::frame`].
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The decision store failed.
    #[error("decision store failed: {0}")]
    Store(#[from] StoreError),
}

impl EngineError {
    /// The fail-closed frame for this error: -32603 with
    /// `data.reason` `runtime.store_unavailable`.
    pub fn frame(&self, id: Option<&Value>, server_id: &str) -> String {
        frame::internal_error_response(id, server_id, &self.to_string())
    }
}

/// The outcome of [`Engine::decide`].
#[derive(Debug)]
pub enum Decision {
    /// Run the request as sent; enforce the grant's deadline.
    Allow(Grant),
    /// Run the request narrowed by [`Grant::lowered`]; annotate the result
    /// with [`Grant::annotations`] ([`frame::annotate_result`]).
    Trim(Grant),
    /// Answer with [`Denial::frame`].
    Deny(Denial),
    /// Ask the user, then call [`Engine::resolve_consent`].
    NeedsConsent(PendingConsent),
}

impl Decision {
    /// The reason name of a denial, if this is one.
    pub fn deny_reason(&self) -> Option<&str> {
        match self {
            Decision::Deny(denial) => Some(&denial.reason),
            _ => None,
        }
    }

    /// The grant of an allow or a trim.
    pub fn grant(&self) -> Option<&Grant> {
        match self {
            Decision::Allow(grant) | Decision::Trim(grant) => Some(grant),
            _ => None,
        }
    }
}

/// Permission to run one completion.
#[derive(Debug)]
pub struct Grant {
    /// Milliseconds the completion may take; report a miss with
    /// [`Engine::report_deadline_miss`]. `None`: the block sets no deadline.
    pub deadline_ms: Option<u64>,
    /// Hand back to [`Engine::settle`] with the real token usage.
    pub ticket: Ticket,
    /// The changes a trim made to the request's params (empty for an allow).
    pub lowered: Lowered,
    /// What to write into the result's `_meta` (empty for an allow).
    pub annotations: Annotations,
    /// The request was allowed from a stored approval (consent not asked again).
    pub replayed: bool,
}

impl Grant {
    /// The params to send to the model: `original` with [`Grant::lowered`] applied.
    pub fn params(&self, original: &Map<String, Value>) -> Map<String, Value> {
        let mut params = original.clone();
        self.lowered.apply(&mut params);
        params
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

/// What an admitted request spent, to settle afterwards. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ticket {
    server_id: String,
    identity: String,
    entry: usize,
    digest: Arc<str>,
    reservation: Reservation,
    plan: Arc<Plan>,
}

impl Ticket {
    /// The server the request came from.
    pub fn server_id(&self) -> &str {
        &self.server_id
    }

    /// The request identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The store's reservation handle ([`Reservation::NONE`] when nothing was counted).
    pub fn reservation(&self) -> Reservation {
        self.reservation
    }
}

/// A request waiting for the user. Resolve it with [`Engine::resolve_consent`];
/// until then it holds its rate and budget reservation.
#[derive(Debug)]
pub struct PendingConsent {
    grant: Grant,
    trimmed: bool,
}

impl PendingConsent {
    /// The server asking.
    pub fn server_id(&self) -> &str {
        &self.grant.ticket.server_id
    }

    /// The request identity the answer will be stored under.
    pub fn identity(&self) -> &str {
        &self.grant.ticket.identity
    }

    /// What the request will run with if approved (show these to the user).
    pub fn lowered(&self) -> &Lowered {
        &self.grant.lowered
    }

    /// The trims that will be announced in the result.
    pub fn annotations(&self) -> &Annotations {
        &self.grant.annotations
    }
}

/// A refusal. [`Denial::frame`] is what the server receives.
#[derive(Debug, Clone)]
pub struct Denial {
    /// The reason name (`data.reason`).
    pub reason: Arc<str>,
    /// The server id (`data.server`).
    pub server: String,
    /// The JSON-RPC error code.
    pub code: i64,
    /// Whether the server may usefully retry (`data.retryable`).
    pub retryable: bool,
    /// The exact `error.data` JSON text (shared with the store on a replay).
    pub data: Arc<str>,
    /// This denial was answered from the store.
    pub replayed: bool,
    /// How often the identity has been re-presented (after this replay).
    pub represented: u64,
    /// When the stored decision expires; `None` for not stored or until the block changes.
    pub expires_at: Option<Millis>,
    /// Whether the decision was stored.
    pub stored: bool,
    template: Arc<str>,
    limit: Option<String>,
    window: Option<String>,
    deadline: Option<String>,
}

impl Denial {
    /// The prose message: the reason's template with its placeholders filled.
    pub fn message(&self) -> String {
        let timing = parse_timing(&self.data);
        let values = Placeholders {
            server: &self.server,
            reason: &self.reason,
            limit: self.limit.clone(),
            window: self.window.clone(),
            resets_at: match timing {
                Some(Timing::ResetsAt(at)) => Some(at),
                _ => None,
            },
            retry_after: match timing {
                Some(Timing::RetryAfter(s)) => Some(s),
                _ => None,
            },
            deadline: self.deadline.clone(),
        };
        frame::render_message(&self.template, &values)
    }

    /// The JSON-RPC error response for the request with this `id`.
    pub fn frame(&self, id: Option<&Value>) -> String {
        frame::error_response(id, self.code, &self.message(), Some(&self.data))
    }

    /// The error object alone (`{"code","message","data"}`).
    pub fn error_object(&self) -> String {
        frame::error_object(self.code, &self.message(), Some(&self.data))
    }

    /// MCP 2026-07-28: the local error answering the client's own pending
    /// call (id `pending_call_id`) with this denial's code, message and `data`.
    pub fn local_error(&self, pending_call_id: Option<&Value>) -> String {
        frame::local_error_response(
            pending_call_id,
            self.code,
            &self.message(),
            Some(&self.data),
        )
    }
}

/// Reads `resetsAt`/`retryAfter` back from data text this module wrote.
/// Inside a JSON string every `"` is escaped, so `,"name":` only occurs as a key.
fn parse_timing(data: &str) -> Option<Timing> {
    if let Some(at) = data.rfind(",\"retryAfter\":") {
        let digits: String = data[at + 14..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        return digits.parse().ok().map(Timing::RetryAfter);
    }
    if let Some(at) = data.rfind(",\"resetsAt\":\"") {
        let rest = &data[at + 13..];
        let end = rest.find('"')?;
        return calendar::parse_rfc3339(&rest[..end]).map(Timing::ResetsAt);
    }
    None
}

/// The answer to [`Engine::decide_bytes`]: always something to send.
// Returned once per request and matched at once: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Answer {
    /// The bytes are not a valid sampling request; send `frame`.
    Invalid {
        /// The JSON-RPC error frame (-32700/-32600/-32602).
        frame: String,
        /// Its code.
        code: i64,
    },
    /// The request was decided.
    Decided {
        /// The validated request.
        request: SamplingRequest,
        /// What to do with it.
        decision: Decision,
    },
    /// The store failed; send `frame` (the request is refused).
    Failed {
        /// The -32603 frame.
        frame: String,
        /// The underlying error.
        error: EngineError,
    },
}

/// One entry of an MCP 2026-07-28 `inputRequests`, decided.
#[derive(Debug)]
pub struct InputDecision {
    /// The server-assigned key of the entry.
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
    /// A malformed sampling entry; answer the client's pending call with this error.
    Invalid {
        /// -32600 or -32602.
        code: i64,
        /// What was wrong.
        message: String,
    },
    /// Decided like any sampling request.
    Decided {
        /// The validated request.
        request: SamplingRequest,
        /// What to do with it; a [`Decision::Deny`] is answered with [`Denial::local_error`].
        decision: Decision,
    },
    /// The store failed; the entry is refused.
    Failed(EngineError),
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
    spec: ReasonSpec,
    template: Arc<str>,
    needs_limit: bool,
    needs_window: bool,
    needs_deadline: bool,
}

impl ReasonRt {
    fn new(spec: ReasonSpec) -> Self {
        let has = |p: &str| spec.message.contains(p);
        ReasonRt {
            template: Arc::from(spec.message.as_str()),
            needs_limit: has("{limit}"),
            needs_window: has("{window}"),
            needs_deadline: has("{deadline}"),
            spec,
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

/// Decides sampling requests against one compiled table.
#[derive(Debug)]
pub struct Engine {
    table: Table,
    store: Arc<dyn DecisionStore>,
    clock: Arc<dyn Clock>,
    index: ServerIndex,
    plans: Vec<Arc<Plan>>,
    reasons: FastMap<String, ReasonRt>,
    purged: RwLock<HashSet<String>>,
}

/// Builds the reason spec for a name the table lacks (cannot happen with a
/// verified table): unknown retryability is `false`, nothing is stored.
fn unknown_reason(error_code: i64) -> ReasonRt {
    ReasonRt::new(ReasonSpec {
        retryable: false,
        ttl: Ttl::None,
        code: error_code,
        message: "Sampling denied: {reason} for server '{server}'".to_owned(),
    })
}

impl Engine {
    /// An engine over `table` (verify it first, e.g. with [`Table::from_json`]),
    /// remembering decisions in `store`, reading time from `clock`.
    ///
    /// Server patterns are NFC-normalised here, as every server id is at
    /// each decision: canonically equivalent spellings are one server. So
    /// are `models` patterns, as each hint's name is when it is matched.
    pub fn new(mut table: Table, store: Arc<dyn DecisionStore>, clock: Arc<dyn Clock>) -> Self {
        for entry in table.servers.iter_mut() {
            if let std::borrow::Cow::Owned(normalized) = glob::nfc(&entry.pattern) {
                entry.pattern = normalized;
            }
        }
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
        let plans = table
            .servers
            .iter()
            .chain(std::iter::once(&table.fallback))
            .map(|entry| Arc::new(plan_for(&entry.block, &entry.digest)))
            .collect();
        let reasons = table
            .reasons
            .iter()
            .map(|(name, spec)| (name.clone(), ReasonRt::new(spec.clone())))
            .collect();
        Engine {
            table,
            store,
            clock,
            index: ServerIndex { exact, globs },
            plans,
            reasons,
            purged: RwLock::new(HashSet::new()),
        }
    }

    /// The table this engine executes.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The store this engine records in.
    pub fn store(&self) -> &Arc<dyn DecisionStore> {
        &self.store
    }

    /// Index of the entry governing `server_id` (`servers.len()` = fallback);
    /// the same answer as [`Table::entry_for`].
    fn entry_index(&self, server_id: &str) -> usize {
        if let Some(&governing) = self.index.exact.get(server_id) {
            return governing;
        }
        self.index
            .globs
            .iter()
            .copied()
            .find(|&i| glob::matches(&self.table.servers[i].pattern, server_id))
            .unwrap_or(self.table.servers.len())
    }

    fn block(&self, entry: usize) -> &EffectiveBlock {
        match self.table.servers.get(entry) {
            Some(e) => &e.block,
            None => &self.table.fallback.block,
        }
    }

    fn reason(&self, name: &str) -> std::borrow::Cow<'_, ReasonRt> {
        match self.reasons.get(name) {
            Some(r) => std::borrow::Cow::Borrowed(r),
            None => std::borrow::Cow::Owned(unknown_reason(self.table.error_code)),
        }
    }

    /// Parses, validates and decides raw request bytes: every input yields
    /// something to send, never a panic.
    pub fn decide_bytes(&self, server_id: &str, bytes: &[u8], ctx: &ClientContext) -> Answer {
        let request = match request::parse_sampling(bytes) {
            Ok(request) => request,
            Err(rejection) => {
                return Answer::Invalid {
                    frame: rejection.frame(),
                    code: rejection.code(),
                };
            }
        };
        match self.decide(server_id, &request, ctx) {
            Ok(decision) => Answer::Decided { request, decision },
            Err(error) => Answer::Failed {
                frame: error.frame(request.id.as_ref(), server_id),
                error,
            },
        }
    }

    /// Decides a validated request (DESIGN "Evaluation", steps 2–10).
    pub fn decide(
        &self,
        server_id: &str,
        request: &SamplingRequest,
        ctx: &ClientContext,
    ) -> Result<Decision, EngineError> {
        // NFC once, here: the id matches, keys the store and is reported in this form.
        let server_id = glob::nfc(server_id);
        let identity =
            identity::request_identity(&server_id, &request.params, &self.table.identity);
        self.decide_with_identity(&server_id, identity.into_string(), &request.params, ctx)
    }

    /// Steps 3–10 for a request whose identity is already known. Exposed for
    /// benchmarks and for callers that computed the identity themselves; the
    /// identity must be [`identity::request_identity`] of these params.
    #[doc(hidden)]
    pub fn decide_with_identity(
        &self,
        server_id: &str,
        identity: String,
        params: &Map<String, Value>,
        ctx: &ClientContext,
    ) -> Result<Decision, EngineError> {
        let server_id = &*glob::nfc(server_id);
        let now = self.clock.now();
        let entry = self.entry_index(server_id);
        let plan = &self.plans[entry];
        let block = self.block(entry);
        let key = DecisionKey {
            server_id: server_id.to_owned(),
            identity,
        };

        // Steps 3–8 in one store call where the store can (SQLite: one
        // transaction): the replay; then, unless a stored denial answers,
        // steps 4–6 (pure computation, in `evaluate`) and the admission of
        // steps 7–8.
        let mut approved_before = false;
        let mut early: Option<(&str, Produced)> = None;
        let mut trims: Option<(Lowered, Annotations)> = None;
        let mut evaluate = |stored: Option<&StoredDecision>, checks: &mut Vec<LimitCheck>| {
            // 3. Replay.
            if let Some(stored) = stored {
                match stored.verdict {
                    Verdict::Deny if stored_denial_answers(block, stored, params) => return false,
                    Verdict::Deny => {}
                    Verdict::Allow => approved_before = true,
                }
            }
            // 4–5. Switches and input limits.
            if let Some(denial) = self.switch_or_input_denial(block, params) {
                early = Some(denial);
                return false;
            }
            // 6. Trims.
            let (lowered, annotations) = self.trims(block, params, ctx);
            // 7–8. Rate and budgets, admitted together.
            *checks = self.admission_checks(block, plan, &lowered, params, now);
            trims = Some((lowered, annotations));
            true
        };
        let mut checks = Vec::new();
        let combined =
            self.store
                .replay_then_admit(&key, &plan.digest, now, &mut checks, &mut evaluate)?;
        let (reservation, lowered, annotations) = if let Some(answer) = combined {
            let admission = match (answer.admission, early, trims) {
                (Some(admission), _, Some((lowered, annotations))) => {
                    Some((admission, lowered, annotations))
                }
                (_, Some((reason, produced)), _) => {
                    return self.deny(key, plan, reason, produced, now);
                }
                _ => None,
            };
            let Some((admission, lowered, annotations)) = admission else {
                // Not evaluated: a stored denial answers.
                return match answer.replayed {
                    Some(stored) => Ok(Decision::Deny(
                        self.replayed_denial(key, stored, block, params),
                    )),
                    // A store that skipped `evaluate` without a replay: fail closed.
                    None => Err(EngineError::Store(StoreError::BadRow {
                        path: "<store>".into(),
                        detail: "replay_then_admit answered neither a replay nor an admission"
                            .to_owned(),
                    })),
                };
            };
            let reservation = match admission {
                Admission::Admitted { reservation } => reservation,
                Admission::Refused {
                    index,
                    available_at,
                    ..
                } => {
                    return self.refuse_limit(key, plan, block, &checks, index, available_at, now);
                }
            };
            (reservation, lowered, annotations)
        } else {
            // The store does not combine them (the in-memory store, where
            // two calls are cheap): steps 3–8 one after the other.
            // 3. Replay.
            if let Some(stored) = self.store.replay(&key, &plan.digest, now)? {
                match stored.verdict {
                    Verdict::Deny if stored_denial_answers(block, &stored, params) => {
                        return Ok(Decision::Deny(
                            self.replayed_denial(key, stored, block, params),
                        ));
                    }
                    Verdict::Deny => {}
                    Verdict::Allow => approved_before = true,
                }
            }

            // 4–5. Switches and input limits.
            if let Some((reason, produced)) = self.switch_or_input_denial(block, params) {
                return self.deny(key, plan, reason, produced, now);
            }

            // 6. Trims.
            let (lowered, annotations) = self.trims(block, params, ctx);

            // 7–8. Rate and budgets, admitted together.
            let reservation = if plan.checks.is_empty() {
                Reservation::NONE
            } else {
                let checks = self.admission_checks(block, plan, &lowered, params, now);
                match self.store.admit(server_id, &checks, now)? {
                    Admission::Admitted { reservation } => reservation,
                    Admission::Refused {
                        index,
                        available_at,
                        ..
                    } => {
                        return self.refuse_limit(
                            key,
                            plan,
                            block,
                            &checks,
                            index,
                            available_at,
                            now,
                        );
                    }
                }
            };
            (reservation, lowered, annotations)
        };

        let trimmed = !annotations.is_empty();
        let grant = Grant {
            deadline_ms: block.deadline.as_ref().map(|d| d.ms),
            ticket: Ticket {
                server_id: key.server_id,
                identity: key.identity,
                entry,
                digest: plan.digest.clone(),
                reservation,
                plan: plan.clone(),
            },
            lowered,
            annotations,
            replayed: approved_before,
        };

        // 9. Consent.
        let ask = match block.consent {
            Consent::Always => true,
            Consent::First => !approved_before,
            Consent::Never => false,
        };
        if ask {
            return Ok(Decision::NeedsConsent(PendingConsent { grant, trimmed }));
        }

        // 10. Allow.
        Ok(if trimmed {
            Decision::Trim(grant)
        } else {
            Decision::Allow(grant)
        })
    }

    /// Stored decisions of a server made under another block digest (and
    /// expired ones) are dropped the first time this engine records a
    /// decision for the server. Only housekeeping: a replay never matches
    /// another digest anyway.
    fn purge_once(&self, server_id: &str, digest: &str, now: Millis) -> Result<(), EngineError> {
        let seen = self
            .purged
            .read()
            .map(|set| set.contains(server_id))
            .unwrap_or(false);
        if !seen {
            self.store.purge_stale(server_id, digest, now)?;
            if let Ok(mut set) = self.purged.write() {
                set.insert(server_id.to_owned());
            }
        }
        Ok(())
    }

    /// Steps 4–5: the denial a switch or an input limit gives this request, if any.
    fn switch_or_input_denial<'b>(
        &self,
        block: &'b EffectiveBlock,
        params: &Map<String, Value>,
    ) -> Option<(&'b str, Produced)> {
        // 4. Switches.
        if !block.sampling.enabled {
            return Some((&block.sampling.reason, Produced::recomputable()));
        }
        if !block.tools.enabled && carries_tools(params) {
            return Some((&block.tools.reason, Produced::recomputable()));
        }
        // 5. Input limits.
        if let Some(limit) = &block.max_messages {
            let count = params
                .get("messages")
                .and_then(Value::as_array)
                .map_or(0, Vec::len) as u64;
            if count > limit.max {
                let produced = Produced {
                    limit: Some(format!("{} messages", limit.max)),
                    ..Produced::recomputable()
                };
                return Some((&limit.reason, produced));
            }
        }
        if let Some(limit) = &block.max_input
            && !input_fits(params, limit.max)
        {
            let produced = Produced {
                limit: Some(frame::format_size(limit.max)),
                ..Produced::recomputable()
            };
            return Some((&limit.reason, produced));
        }
        None
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
        if self.table.protocol >= ProtocolRevision::V2026_07_28 && !ctx.sampling_context {
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
        plan.checks
            .iter()
            .filter_map(|(counter, kind)| match *kind {
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
        plan: &Plan,
        block: &EffectiveBlock,
        checks: &[LimitCheck],
        index: usize,
        available_at: Millis,
        now: Millis,
    ) -> Result<Decision, EngineError> {
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
                    ..Produced::plain()
                };
                self.deny(key, plan, reason, produced, now)
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
                    ..Produced::plain()
                };
                self.deny(key, plan, reason, produced, now)
            }
        }
    }

    /// Builds, stores (per the reason's ttl) and returns a fresh denial.
    fn deny(
        &self,
        key: DecisionKey,
        plan: &Plan,
        reason: &str,
        produced: Produced,
        now: Millis,
    ) -> Result<Decision, EngineError> {
        self.denial(key, plan, reason, produced, now)
            .map(Decision::Deny)
    }

    fn denial(
        &self,
        key: DecisionKey,
        plan: &Plan,
        reason: &str,
        produced: Produced,
        now: Millis,
    ) -> Result<Denial, EngineError> {
        let rt = self.reason(reason);
        let data = DenialData {
            reason: reason.to_owned(),
            server: key.server_id.clone(),
            retryable: rt.spec.retryable,
            timing: produced.timing,
        }
        .to_json();
        let data: Arc<str> = Arc::from(data);
        let reason: Arc<str> = Arc::from(reason);
        let expiry = expiry(rt.spec.ttl, now, produced.reset);
        if let Some(expires_at) = expiry {
            self.purge_once(&key.server_id, &plan.digest, now)?;
            self.store.record(
                &key,
                &StoredDecision {
                    verdict: Verdict::Deny,
                    reason: reason.clone(),
                    digest: plan.digest.clone(),
                    expires_at,
                    data: Some(data.clone()),
                    represented: 0,
                    decided_at: now,
                    recomputable: produced.recomputable,
                },
            )?;
        }
        Ok(Denial {
            reason,
            server: key.server_id,
            code: rt.spec.code,
            retryable: rt.spec.retryable,
            data,
            replayed: false,
            represented: 0,
            expires_at: expiry.flatten(),
            stored: expiry.is_some(),
            template: rt.template.clone(),
            limit: produced.limit,
            window: produced.window,
            deadline: produced.deadline,
        })
    }

    /// A stored denial, answered again: same `data` bytes; the message's
    /// `{limit}`, `{window}` and `{deadline}` are derived again from the
    /// (unchanged) block.
    fn replayed_denial(
        &self,
        key: DecisionKey,
        stored: StoredDecision,
        block: &EffectiveBlock,
        params: &Map<String, Value>,
    ) -> Denial {
        let rt = self.reason(&stored.reason);
        let template = rt.template.clone();
        let data = stored.data.unwrap_or_else(|| {
            // A row written without data (another tool): rebuild it.
            DenialData {
                reason: stored.reason.to_string(),
                server: key.server_id.clone(),
                retryable: rt.spec.retryable,
                timing: None,
            }
            .to_json()
            .into()
        });
        let (limit, window) = if rt.needs_limit || rt.needs_window {
            replay_limit_window(block, &stored.reason, params, &data, stored.decided_at)
        } else {
            (None, None)
        };
        let deadline = rt
            .needs_deadline
            .then(|| {
                block
                    .deadline
                    .as_ref()
                    .map(|d| frame::format_duration(d.ms))
            })
            .flatten();
        Denial {
            reason: stored.reason,
            server: key.server_id,
            code: rt.spec.code,
            retryable: rt.spec.retryable,
            data,
            replayed: true,
            represented: stored.represented,
            expires_at: stored.expires_at,
            stored: true,
            template,
            limit,
            window,
            deadline,
        }
    }

    /// The user answered a [`Decision::NeedsConsent`]. Approval runs the
    /// request (and, with `consent first`, is stored as `user.approved`);
    /// refusal is stored as `user.denied` and returns the reserved budget
    /// (the rate spend stays: the server did ask).
    pub fn resolve_consent(
        &self,
        pending: PendingConsent,
        approved: bool,
    ) -> Result<Decision, EngineError> {
        let now = self.clock.now();
        let PendingConsent { grant, trimmed } = pending;
        let ticket = &grant.ticket;
        let key = DecisionKey {
            server_id: ticket.server_id.clone(),
            identity: ticket.identity.clone(),
        };
        if approved {
            let block = self.block(ticket.entry);
            let rt = self.reason(builtin::USER_APPROVED);
            if block.consent == Consent::First
                && let Some(expires_at) = expiry(rt.spec.ttl, now, None)
            {
                self.purge_once(&key.server_id, &ticket.digest, now)?;
                self.store.record(
                    &key,
                    &StoredDecision {
                        verdict: Verdict::Allow,
                        reason: Arc::from(builtin::USER_APPROVED),
                        digest: ticket.digest.clone(),
                        expires_at,
                        data: None,
                        represented: 0,
                        decided_at: now,
                        recomputable: false,
                    },
                )?;
            }
            return Ok(if trimmed {
                Decision::Trim(grant)
            } else {
                Decision::Allow(grant)
            });
        }
        self.release_budgets(ticket)?;
        let plan = ticket.plan.clone();
        self.deny(key, &plan, builtin::USER_DENIED, Produced::plain(), now)
    }

    /// The user's answer to a [`Decision::NeedsConsent`] never came: the
    /// client failed (an error other than the user's rejection), or the task
    /// it ran ended without a result. Nothing is stored, and the reserved
    /// budget is returned (the rate spend stays: the server did ask).
    pub fn abandon_consent(&self, pending: PendingConsent) -> Result<(), EngineError> {
        self.release_budgets(&pending.grant.ticket)
    }

    /// Returns a reservation's budget spend (not its rate spend).
    fn release_budgets(&self, ticket: &Ticket) -> Result<(), EngineError> {
        if ticket.reservation.is_none() {
            return Ok(());
        }
        for (counter, kind) in &ticket.plan.checks {
            if let CheckKind::Budget(_) = kind {
                self.store
                    .settle(&ticket.server_id, ticket.reservation, counter, 0)?;
            }
        }
        Ok(())
    }

    /// The model globs (`models`) the granted request may run on, `None`
    /// when the block allows any. The client must pick its model from these,
    /// whether or not the request carried hints.
    pub fn allowed_models(&self, ticket: &Ticket) -> Option<&[String]> {
        self.block(ticket.entry).models.as_deref()
    }

    /// Whether `model` (the model the client is about to run, or ran) is
    /// allowed for the granted request.
    pub fn model_allowed(&self, ticket: &Ticket, model: &str) -> bool {
        self.allowed_models(ticket)
            .is_none_or(|globs| globs.iter().any(|g| glob::matches(g, &glob::nfc(model))))
    }

    /// Settles a completed request's token budgets with the real usage
    /// (input + output tokens as the provider reported them). Request
    /// budgets and the rate keep their count.
    pub fn settle(&self, ticket: &Ticket, usage_tokens: u64) -> Result<(), EngineError> {
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
                self.store
                    .settle(&ticket.server_id, ticket.reservation, counter, usage_tokens)?;
            }
        }
        Ok(())
    }

    /// The client reports that the completion missed its deadline: the
    /// identity is denied with the block's deadline reason (stored per its
    /// ttl, so an immediate identical retry is answered from the store).
    /// Returns the denial to send.
    pub fn report_deadline_miss(&self, ticket: &Ticket) -> Result<Denial, EngineError> {
        let now = self.clock.now();
        let block = self.block(ticket.entry);
        let reason = block
            .deadline
            .as_ref()
            .map_or(builtin::DEADLINE, |d| d.reason.as_str());
        let rt = self.reason(reason);
        let timing = match rt.spec.ttl {
            Ttl::AfterMs(ms) if rt.spec.retryable => Some(Timing::RetryAfter(ms.div_ceil(1000))),
            _ => None,
        };
        let produced = Produced {
            timing,
            deadline: block
                .deadline
                .as_ref()
                .map(|d| frame::format_duration(d.ms)),
            ..Produced::plain()
        };
        let key = DecisionKey {
            server_id: ticket.server_id.clone(),
            identity: ticket.identity.clone(),
        };
        let plan = ticket.plan.clone();
        self.denial(key, &plan, reason, produced, now)
    }

    /// MCP 2026-07-28: decides every sampling entry of an
    /// `InputRequiredResult` (or of its `inputRequests` value) received from
    /// `server_id`, given as raw bytes so duplicate keys are caught. A
    /// malformed result yields `Err((code, message))` for the client's pending call.
    pub fn decide_input_required(
        &self,
        server_id: &str,
        bytes: &[u8],
        ctx: &ClientContext,
    ) -> Result<Vec<InputDecision>, (i64, String)> {
        let value = request::parse_strict(bytes).map_err(|e| (e.code(), e.to_string()))?;
        Ok(self.decide_input_requests(server_id, &value, ctx))
    }

    /// Like [`Engine::decide_input_required`] on an already strictly parsed value.
    pub fn decide_input_requests(
        &self,
        server_id: &str,
        result: &Value,
        ctx: &ClientContext,
    ) -> Vec<InputDecision> {
        frame::input_requests(result)
            .into_iter()
            .map(|entry| {
                let outcome = if !entry.is_sampling() {
                    InputOutcome::NotSampling
                } else {
                    let mut wrapped = Map::new();
                    wrapped.insert("jsonrpc".to_owned(), Value::from("2.0"));
                    wrapped.insert("id".to_owned(), Value::from(entry.key.as_str()));
                    wrapped.insert("method".to_owned(), Value::from(frame::SAMPLING_METHOD));
                    if let Some(params) = entry.entry.get("params") {
                        wrapped.insert("params".to_owned(), params.clone());
                    }
                    match request::validate_sampling(Value::Object(wrapped)) {
                        Err(err) => InputOutcome::Invalid {
                            code: err.code(),
                            message: err.to_string(),
                        },
                        Ok(request) => match self.decide(server_id, &request, ctx) {
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
            .collect()
    }
}

/// What produced a denial, beyond its reason name.
#[derive(Debug, Default)]
struct Produced {
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
    fn plain() -> Self {
        Produced::default()
    }

    /// A switch's or an input limit's denial.
    fn recomputable() -> Self {
        Produced {
            recomputable: true,
            ..Produced::default()
        }
    }
}

/// When a decision with `ttl`, made at `now`, expires: `None` = not stored,
/// `Some(None)` = until the block changes. A fixed ttl never outlives the
/// condition that produced the denial (`reset`).
fn expiry(ttl: Ttl, now: Millis, reset: Option<Millis>) -> Option<Option<Millis>> {
    match ttl {
        Ttl::None => None,
        Ttl::Forever => Some(None),
        // A reason with no window behind it (not a budget or rate): until the block changes.
        Ttl::UntilReset => Some(reset),
        Ttl::AfterMs(ms) => {
            let after = now.saturating_add(ms_i64(ms));
            Some(Some(reset.map_or(after, |r| after.min(r))))
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
/// `9000.0` or `9e3` (a float must not slip past the clamp or the reservation).
fn max_tokens_of(params: &Map<String, Value>) -> Option<u64> {
    let Some(Value::Number(number)) = params.get("maxTokens") else {
        return None;
    };
    if let Some(n) = number.as_u64() {
        return Some(n);
    }
    let f = number.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0).then_some(f as u64)
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
/// `toolChoice`): what `tools off` refuses. Public so that tools tracing a
/// decision (`mcpc test`'s coverage) read a request exactly as the engine does.
pub fn carries_tools(params: &Map<String, Value>) -> bool {
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

/// `{limit}` and `{window}` for a replayed denial, derived again from the
/// (unchanged) block. The stored `data` says which kind of statement
/// denied: `resetsAt` a budget, `retryAfter` the rate, neither an input
/// limit; this keeps a reason shared by several statements (`as NAME`)
/// apart.
fn replay_limit_window(
    block: &EffectiveBlock,
    reason: &str,
    params: &Map<String, Value>,
    data: &str,
    decided_at: Millis,
) -> (Option<String>, Option<String>) {
    match parse_timing(data) {
        Some(Timing::ResetsAt(at)) => replay_budget(block, reason, at, decided_at)
            .map(budget_labels)
            .unzip(),
        Some(Timing::RetryAfter(_)) => block
            .rate
            .as_ref()
            .filter(|r| r.reason == reason)
            .map(rate_labels)
            .unzip(),
        None => (replay_input_limit(block, reason, params), None),
    }
}

/// `{limit}` for a replayed input denial: the limit this request exceeds.
fn replay_input_limit(
    block: &EffectiveBlock,
    reason: &str,
    params: &Map<String, Value>,
) -> Option<String> {
    let messages = block.max_messages.as_ref().filter(|l| l.reason == reason);
    let input = block.max_input.as_ref().filter(|l| l.reason == reason);
    if let Some(limit) = messages {
        let count = params
            .get("messages")
            .and_then(Value::as_array)
            .map_or(0, Vec::len) as u64;
        if count > limit.max || input.is_none() {
            return Some(format!("{} messages", limit.max));
        }
    }
    input.map(|limit| frame::format_size(limit.max))
}

/// The budget behind a replayed budget denial: the one with that reason
/// whose window reset is the stored `resetsAt`.
fn replay_budget<'b>(
    block: &'b EffectiveBlock,
    reason: &str,
    resets_at: Millis,
    decided_at: Millis,
) -> Option<&'b Budget> {
    let candidates: Vec<&Budget> = block
        .budgets
        .iter()
        .filter(|b| b.reason == reason)
        .collect();
    let calendar_match = candidates.iter().find(|b| match b.window {
        Window::Calendar(unit) => calendar::window(unit, decided_at).1 == resets_at,
        Window::RollingMs(_) => false,
    });
    calendar_match
        .or_else(|| {
            candidates
                .iter()
                .find(|b| matches!(b.window, Window::RollingMs(_)))
        })
        .or(candidates.first())
        .copied()
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
        assert_eq!(parse_timing(data), Some(Timing::RetryAfter(12)));
        let data =
            r#"{"reason":"r","server":"s","retryable":false,"resetsAt":"2026-03-11T00:00:00Z"}"#;
        assert_eq!(
            parse_timing(data),
            Some(Timing::ResetsAt(calendar::timestamp(2026, 3, 11, 0, 0, 0)))
        );
        assert_eq!(parse_timing(r#"{"reason":"r"}"#), None);
    }

    #[test]
    fn expiry_never_outlives_the_condition() {
        assert_eq!(expiry(Ttl::None, 0, Some(5)), None);
        assert_eq!(expiry(Ttl::Forever, 0, Some(5)), Some(None));
        assert_eq!(expiry(Ttl::UntilReset, 0, Some(5)), Some(Some(5)));
        assert_eq!(expiry(Ttl::UntilReset, 0, None), Some(None));
        assert_eq!(expiry(Ttl::AfterMs(10), 0, Some(5)), Some(Some(5)));
        assert_eq!(expiry(Ttl::AfterMs(10), 0, None), Some(Some(10)));
        assert_eq!(
            expiry(Ttl::AfterMs(u64::MAX), 1, None),
            Some(Some(i64::MAX))
        );
    }
}
