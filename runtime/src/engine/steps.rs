//! Steps 3–10 of one request (`docs/spec/evaluation.md`, "Order"): the
//! trims, the store's one `replay_or_admit` call with its `evaluate`
//! callback (which returns one typed [`Evaluated`]), the switches and input
//! limits, the admission checks of steps 7–8 and the consent of step 9.

use super::*;

impl Engine {
    /// Steps 3–10; `represented` is set to the store's count when a stored
    /// decision was replayed.
    // Inlined: it returns a large `Decision`, which a call would copy.
    #[inline(always)]
    #[allow(clippy::too_many_arguments, reason = "the steps' inputs, passed once")]
    pub(super) fn decide_steps<P: Object>(
        &self,
        server_id: &str,
        entry: usize,
        identity: String,
        params: &P,
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
    pub(super) fn evaluate<'b, P: Object>(
        &self,
        block: &'b EffectiveBlock,
        plan: &Plan,
        lowered: &Lowered,
        params: &P,
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

    pub(super) fn trims<P: Object>(
        &self,
        block: &EffectiveBlock,
        params: &P,
        ctx: &ClientContext,
    ) -> (Lowered, Annotations) {
        let mut lowered = Lowered::default();
        let mut annotations = Annotations::default();

        // includeContext. Absent means `none`. Validation refuses any other
        // value (-32602); a caller that built params without it still never
        // gets an unknown value widened past the block's maximum.
        let (requested, recognised) = match params.get("includeContext").map(Json::kind) {
            None | Some(Kind::Null) => (ContextScope::None, true),
            Some(Kind::String(s)) => match ContextScope::parse(s) {
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
                .and_then(Json::as_array)
        {
            let name = |hint: &P::Value| hint.get("name").and_then(Json::as_str).map(str::to_owned);
            // Each hint is normalised once and matched once, whatever the
            // number of patterns: a server chooses how large its hints are.
            let allowed: Vec<bool> = hints
                .iter()
                .map(|hint| {
                    hint.get("name").and_then(Json::as_str).is_some_and(|n| {
                        let n = glob::nfc(n);
                        models.iter().any(|m| glob::matches(m, &n))
                    })
                })
                .collect();
            if !allowed.iter().all(|a| *a) {
                let kept: Vec<&P::Value> = hints
                    .iter()
                    .zip(&allowed)
                    .filter(|(_, a)| **a)
                    .map(|(h, _)| h)
                    .collect();
                annotations.model = Some(ModelTrim {
                    requested: hints.iter().map(name).collect(),
                    applied: kept.iter().copied().filter_map(name).collect(),
                    allowed: models.clone(),
                });
                lowered.model_hints = Some(kept.into_iter().map(Json::to_value).collect());
            }
        }
        (lowered, annotations)
    }

    pub(super) fn limit_checks(
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
    pub(super) fn checks_of<'a>(
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

    /// Steps 7–8's checks for a request after its trims: `maxTokens` as
    /// lowered (else as asked, else the block's cap) is what a token budget
    /// reserves. Empty when the block has neither rate nor budgets.
    pub(super) fn admission_checks<P: Object>(
        &self,
        block: &EffectiveBlock,
        plan: &Plan,
        lowered: &Lowered,
        params: &P,
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
}

/// Whether step 9 asks the user.
pub(super) fn will_ask(consent: Consent, approved_before: bool) -> bool {
    match consent {
        Consent::Always => true,
        Consent::First => !approved_before,
        Consent::Never => false,
    }
}

/// The admission check of a prompt on [`CONSENT_COUNTER`]: it fits while
/// fewer than [`CONSENT_COOLDOWN_PROMPTS`] unapproved prompts are in the
/// window, and counts this one until the user approves it.
pub(super) fn consent_check() -> LimitCheck {
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
pub(super) fn forwarded_approval_key<P: Object>(
    server_id: &str,
    params: &P,
    lowered: &Lowered,
) -> RequestIdentity {
    if lowered.is_empty() {
        return identity::approval_key_of(server_id, params);
    }
    let mut forwarded = params.to_map();
    lowered.apply(&mut forwarded);
    identity::approval_key(server_id, &forwarded)
}

/// Steps 4–5: the denial a switch or an input limit gives this request, if any.
pub(super) fn switch_or_input_denial<'b, P: Object>(
    block: &'b EffectiveBlock,
    params: &P,
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
        let limit = (input.of)(block).filter(|l| input.measure.exceeded(params, l.max))?;
        let produced = Produced {
            limit: Some((input.label)(limit.max)),
            ..Produced::new(input.statement, Step::InputLimits).recomputable()
        };
        Some((limit.reason.as_str(), produced))
    })
}

/// The entries of `messages` (0 when absent).
pub(super) fn message_count<P: Object>(params: &P) -> u64 {
    params
        .get("messages")
        .and_then(Json::as_array)
        .map_or(0, <[P::Value]>::len) as u64
}

/// What `replay_or_admit`'s callback found, with what each answer needs.
#[derive(Debug)]
pub(super) enum Evaluated<'b> {
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

/// The store's window for a budget at `now`.
pub(super) fn limit_window(window: Window, now: Millis) -> LimitWindow {
    match window {
        Window::Calendar(unit) => {
            let (start, end) = calendar::window(unit, now);
            LimitWindow::Fixed { start, end }
        }
        Window::RollingMs(ms) => LimitWindow::Rolling { ms },
    }
}

/// `maxTokens` as validation accepts it: an integer, also when written
/// `9000.0` or `9e3` (a float must not slip past the clamp or the
/// reservation). The same reader as validation's.
pub(super) fn max_tokens_of<P: Object>(params: &P) -> Option<u64> {
    params.get("maxTokens").and_then(as_non_negative_integer)
}

/// Whether a stored denial answers this request again (step 3). `tools` is
/// not part of the identity: after a `tools off` denial, the same request
/// without tools is asking something new.
pub(super) fn stored_denial_answers<P: Object>(
    block: &EffectiveBlock,
    stored: &StoredDecision,
    params: &P,
) -> bool {
    let tools_only = !block.tools.enabled
        && *stored.reason == *block.tools.reason
        && *stored.reason != *block.sampling.reason;
    !tools_only || carries_tools(params)
}

/// Whether the request offers tools to the model (`tools` non-empty, or a
/// `toolChoice`): what `tools off` refuses.
pub(super) fn carries_tools<P: Object>(params: &P) -> bool {
    let tools = match params.get("tools").map(Json::kind) {
        None | Some(Kind::Null) => false,
        Some(Kind::Array(list)) => !list.is_empty(),
        Some(_) => true,
    };
    tools || params.get("toolChoice").is_some_and(|c| !c.is_null())
}

/// Whether the canonical bytes of `systemPrompt` + `messages` are at most
/// `max`. A cheap upper bound settles the common case without writing the
/// canonical form; only requests near the limit are counted exactly.
pub(super) fn input_fits<P: Object>(params: &P, max: u64) -> bool {
    let bound = ["systemPrompt", "messages"]
        .iter()
        .filter_map(|field| params.get(field))
        .fold(0u64, |sum, value| {
            sum.saturating_add(canonical_bound(value))
        });
    bound <= max || input_bytes(params) <= max
}

/// An upper bound of the canonical length of `value`: every byte of a
/// string becomes at most 6 (`\u001f`; NFC at most triples a non-ASCII
/// character's bytes), a number at most 32 characters.
pub(super) fn canonical_bound<J: Json>(value: &J) -> u64 {
    match value.kind() {
        Kind::Null | Kind::Bool(_) => 5,
        Kind::Number(_) => 32,
        Kind::String(s) => 6 * s.len() as u64 + 2,
        Kind::Array(items) => items.iter().fold(2 + items.len() as u64, |sum, v| {
            sum.saturating_add(canonical_bound(v))
        }),
        Kind::Object(map) => map.members().fold(2 + 2 * map.len() as u64, |sum, (k, v)| {
            sum.saturating_add(6 * k.len() as u64 + 2)
                .saturating_add(canonical_bound(v))
        }),
    }
}

/// Canonical bytes of `systemPrompt` + `messages` (absent members count 0).
pub(super) fn input_bytes<P: Object>(params: &P) -> u64 {
    let mut count = identity::ByteCount::default();
    for field in ["systemPrompt", "messages"] {
        if let Some(value) = params.get(field) {
            identity::write_canonical_of(value, &mut count);
        }
    }
    count.0
}
