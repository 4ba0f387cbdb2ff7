//! Denials, fresh and replayed: how each is built, stored (per its
//! reason's ttl) and worded, and how a replayed one's cause and
//! placeholders are derived again from the (unchanged) block
//! (`docs/spec/evaluation.md`, "The cause of a decision").

use super::*;

impl Engine {
    /// The denial for an admission the store refused at `checks[index]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refuse_limit(
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
    pub(super) fn refuse_consent_cooldown(
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
    pub(super) fn deny(
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

    pub(super) fn denial(
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
    pub(super) fn unrecorded_denial(
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
    pub(super) fn replayed_denial<P: Object>(
        &self,
        key: DecisionKey,
        entry: usize,
        stored: StoredDecision,
        params: &P,
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
}

impl Denial {
    /// The reason name (`data.reason`), e.g. `policy.budget_exhausted`.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The alert the decision raised ([`Decision::alert`]).
    pub fn alert(&self) -> Option<&Alert> {
        self.alert.as_deref()
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
                    replay_statement(
                        block,
                        &self.reason,
                        self.timing(),
                        *input_limit,
                        *decided_at,
                    )
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
                        None => replay_limit_window(
                            block,
                            *input_limit,
                            &self.reason,
                            timing,
                            *decided_at,
                        ),
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

/// When a decision with `ttl`, made at `now`, expires. A fixed ttl never
/// outlives the condition that produced the denial (`reset`).
pub(super) fn expiry(ttl: Ttl, now: Millis, reset: Option<Millis>) -> Expiry {
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

pub(super) fn ms_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// `{window}` of a budget: `hourly`, `daily`, `weekly`, `monthly`, or the rolling length (`24h`).
pub(super) fn window_label(budget: &Budget) -> String {
    match budget.window {
        Window::Calendar(CalendarUnit::Hour) => "hourly".to_owned(),
        Window::Calendar(CalendarUnit::Day) => "daily".to_owned(),
        Window::Calendar(CalendarUnit::Week) => "weekly".to_owned(),
        Window::Calendar(CalendarUnit::Month) => "monthly".to_owned(),
        Window::RollingMs(ms) => frame::format_duration(ms),
    }
}

/// `{limit}` and `{window}` for a denial by `budget`, fresh or replayed:
/// e.g. `50 requests` and `daily`, or `200000 tokens` and `24h`.
pub(super) fn budget_labels(budget: &Budget) -> (String, String) {
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
pub(super) fn rate_labels(rate: &Rate) -> (String, String) {
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
pub(super) fn stored_statement(name: &Option<Arc<str>>) -> Option<Statement> {
    name.as_deref().and_then(Statement::from_stored_name)
}

/// `{limit}` and `{window}` of a replayed denial whose statement the store
/// recorded (schema 4): that statement's, as the fresh denial wrote them
/// (none for a statement without a limit).
pub(super) fn statement_limit_window(
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
pub(super) fn replay_limit_window(
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
pub(super) fn replay_input_limit<P: Object>(
    block: &EffectiveBlock,
    reason: &str,
    params: &P,
) -> Option<Statement> {
    let mut naming = INPUT_LIMITS
        .iter()
        .filter_map(|input| Some((input, (input.of)(block).filter(|l| l.reason == reason)?)))
        .peekable();
    while let Some((input, limit)) = naming.next() {
        if naming.peek().is_none() || input.measure.exceeded(params, limit.max) {
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
pub(super) fn replay_statement(
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
pub(super) fn replay_budget(
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
