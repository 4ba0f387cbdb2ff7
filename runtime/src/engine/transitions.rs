//! What happens to a decision after it is made: the consuming transitions
//! of a [`Grant`] (`complete`, `deadline_missed`, `model_refused`), of a
//! [`PendingConsent`] (`approve`, `refuse`, `abandon`) and of a refusal the
//! store could not record, and the store calls behind them.

use super::*;

impl Engine {
    /// [`PendingConsent::approve`].
    pub(super) fn approve(&self, mut grant: Grant) -> Result<Grant, Error> {
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
    pub(super) fn refuse(&self, ticket: Ticket) -> Refused {
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
    pub(super) fn record_refusal(
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
    pub(super) fn release_consent(&self, ticket: &Ticket) -> Result<(), Error> {
        if !ticket.consent_counted || ticket.reservation.is_none() {
            return Ok(());
        }
        self.inner
            .store
            .settle(&ticket.server_id, ticket.reservation, CONSENT_COUNTER, 0)
            .map_err(|e| Error::store(&ticket.server_id, e))
    }

    /// Returns a reservation's budget spend (not its rate spend).
    pub(super) fn release_budgets(&self, ticket: &Ticket) -> Result<(), Error> {
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
    pub(super) fn settle(&self, ticket: &Ticket, usage_tokens: u64) -> Result<(), Error> {
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
    pub(super) fn report_deadline_miss(&self, ticket: &Ticket) -> Result<Denial, Error> {
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

    pub(super) fn report_model_refused(&self, ticket: &Ticket) -> Result<Denial, Error> {
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
        self.lowered.applied_to(original)
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
        self.alert.as_deref()
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
