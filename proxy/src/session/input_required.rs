//! MCP 2026-07-28: sampling entries in a server's `input_required` result
//! are decided here (a denial answers the client's own pending call), and
//! the client's retry with `inputResponses` settles exactly the entries its
//! `requestState` token names (`docs/spec/evaluation.md`, "MCP 2026-07-28:
//! `inputRequests`").

use super::*;

impl Session {
    /// MCP 2026-07-28: a result asking the client for input. `call_id` is
    /// the id of the client's own pending call.
    pub(super) fn input_required(&self, raw: &[u8], line: &[u8], call_id: &Value) {
        self.record_unrecorded();
        let mut value = match request::parse_strict(line) {
            Ok(value) => value,
            Err(error) => {
                self.log.line(format_args!(
                    "malformed input_required result refused: {error}"
                ));
                self.send_client(&frame::request_error_response(
                    Some(call_id),
                    error.code(),
                    &format!("Invalid result from the server: {error}"),
                ));
                return;
            }
        };
        let Some(result) = value.get("result") else {
            self.send_client(raw);
            return;
        };
        // The server's `requestState` is data, not a key: the entries are
        // remembered under a token the proxy mints (below).
        let server_state = result.get("requestState").cloned();
        // Bounded before anything is decided: at the bound the call is
        // answered, retryable, and nothing is reserved.
        if let Err(refusal) = lock(&self.state)
            .flights
            .admit_round(line.len(), self.now())
        {
            self.log.line(format_args!(
                "input_required result for call {call_id} refused: the in-flight bound is reached"
            ));
            self.send_client(&self.refusal_frame(Some(call_id), refusal));
            return;
        }
        // The runtime reads the result object itself (its `inputRequests`);
        // the line was strict JSON, so these bytes are its exact content.
        let bytes = serde_json::to_vec(result).unwrap_or_default();
        let decisions =
            match self
                .engine
                .decide_input_required(&self.server_id, &bytes, &self.ctx())
            {
                Ok(decisions) => decisions,
                Err(error) => {
                    self.log.line(format_args!(
                        "malformed input_required result refused: {error}"
                    ));
                    self.send_client(&frame::request_error_response(
                        Some(call_id),
                        error.code(),
                        &format!("Invalid result from the server: {}", error.message()),
                    ));
                    return;
                }
            };
        let Decided {
            refusal,
            rewrites,
            remembered,
        } = self.decide_entries(decisions, Some(call_id), "inputRequests");
        if let Some(refusal) = refusal {
            // Whoever made the call learns why; the other entries' grants are
            // dropped with their reservations counted (the safe side).
            self.send_client(&refusal);
            return;
        }
        if remembered.is_empty() && rewrites.is_empty() {
            self.send_client(raw);
            return;
        }
        if !remembered.is_empty() {
            // Bind the entries to this result alone: the client echoes the
            // token in its retry, and only this round's entries settle.
            let Some(token) = mint_state_token() else {
                self.log.line(format_args!(
                    "input_required result for call {call_id} refused: no randomness for its requestState token"
                ));
                let frame = self.refusal_frame(Some(call_id), Refusal::Full);
                self.send_client(&frame);
                return;
            };
            if let Some(result) = value.get_mut("result").and_then(Value::as_object_mut) {
                result.insert("requestState".to_owned(), Value::from(token.as_str()));
            }
            let now = self.now();
            lock(&self.state)
                .flights
                .ask(token, server_state, remembered, line.len(), now);
        }
        if let Some(requests) = value.pointer_mut("/result/inputRequests") {
            for (key, params) in rewrites {
                let entry = match requests {
                    Value::Object(map) => map.get_mut(&key),
                    Value::Array(list) => key.parse::<usize>().ok().and_then(|i| list.get_mut(i)),
                    _ => None,
                };
                if let Some(Value::Object(entry)) = entry {
                    entry.insert("params".to_owned(), Value::Object(params));
                }
            }
        }
        self.send_client(value.to_string().as_bytes());
    }

    /// Decides the sampling entries of `inputRequests` (an
    /// `InputRequiredResult`'s or a task's): the first refusal's frame for
    /// `call_id` (the client's pending call), the params of trimmed
    /// entries, and the entries to remember.
    pub(super) fn decide_entries(
        &self,
        decisions: Vec<InputDecision>,
        call_id: Option<&Value>,
        via: &str,
    ) -> Decided {
        let mut refusal: Option<Vec<u8>> = None;
        let mut rewrites: Vec<(String, Map<String, Value>)> = Vec::new();
        let mut remembered: Vec<(String, InputEntry)> = Vec::new();
        for entry in decisions {
            let key = entry.key;
            let key_value = Value::from(key.as_str());
            match entry.outcome {
                InputOutcome::NotSampling => {}
                InputOutcome::Invalid(error) => {
                    self.audit(&Entry {
                        event: "invalid",
                        via,
                        id: Some(&key_value),
                        outcome: "deny",
                        code: Some(error.code()),
                        ..Entry::default()
                    });
                    refusal.get_or_insert_with(|| {
                        frame::request_error_response(
                            call_id,
                            error.code(),
                            &format!(
                                "Invalid sampling request from the server: {}",
                                error.message()
                            ),
                        )
                    });
                }
                InputOutcome::Failed(error) => {
                    self.log
                        .line(format_args!("decision failed, refused: {error}"));
                    refusal.get_or_insert_with(|| error.reply(call_id));
                }
                InputOutcome::Decided { request, decision } => {
                    let params = request.into_params();
                    let alert = decision.alert().cloned();
                    match decision {
                        Decision::Deny(denial) => {
                            self.audit_denial("decision", via, Some(&key_value), &params, &denial);
                            refusal.get_or_insert_with(|| denial.local_error(call_id));
                        }
                        Decision::Allow(grant) | Decision::Trim(grant) => {
                            let applied = grant.params(&params);
                            let trimmed = !grant.lowered().is_empty();
                            self.audit(&Entry {
                                replayed: grant.replayed(),
                                ..grant_entry(
                                    "decision", via, &key_value, &params, &grant, &applied,
                                )
                            });
                            let deadline = grant
                                .deadline_ms()
                                .map(|ms| self.now() + Duration::from_millis(ms));
                            if trimmed {
                                rewrites.push((key.clone(), applied));
                            }
                            remembered.push((
                                key,
                                InputEntry {
                                    awaiting: Awaiting::Grant(grant),
                                    id: key_value,
                                    deadline,
                                    requested: params,
                                },
                            ));
                        }
                        Decision::NeedsConsent(pending) => {
                            let mut shown = params.clone();
                            pending.lowered().apply(&mut shown);
                            self.audit(&Entry {
                                event: "decision",
                                via,
                                id: Some(&key_value),
                                identity: Some(pending.identity()),
                                outcome: "consent",
                                requested: Some(&params),
                                applied: Some(&shown),
                                cause: Some(pending.cause()),
                                trims: Some(pending.annotations()),
                                ..Entry::default()
                            });
                            if !pending.lowered().is_empty() {
                                rewrites.push((key.clone(), shown));
                            }
                            remembered.push((
                                key,
                                InputEntry {
                                    awaiting: Awaiting::Consent(pending),
                                    id: key_value,
                                    deadline: None,
                                    requested: params,
                                },
                            ));
                        }
                    }
                    self.raise(alert.as_ref());
                }
            }
        }
        if refusal.is_some() {
            // The round is refused whole: no entry reaches the client. A
            // consent already decided is closed `unanswered` (never shown;
            // its reservation and prompt stay counted, the safe side).
            for (_, entry) in remembered.drain(..) {
                if let Awaiting::Consent(pending) = &entry.awaiting {
                    self.close_unshown(
                        via,
                        &entry.id,
                        pending,
                        "another entry of its round was refused",
                    );
                }
            }
            rewrites.clear();
        }
        Decided {
            refusal,
            rewrites,
            remembered,
        }
    }

    /// MCP 2026-07-28: the client retries its call with `inputResponses`.
    pub(super) fn input_responses(&self, raw: &[u8], line: &[u8], call_id: Option<&Value>) {
        let Ok(mut value) = serde_json::from_slice::<Value>(line) else {
            self.send_server(raw);
            return;
        };
        // Only a token the proxy minted names remembered entries; anything
        // else (the server's own state, a forged or lapsed token) settles
        // nothing and goes on unchanged.
        let token = value
            .pointer("/params/requestState")
            .and_then(Value::as_str)
            .filter(|state| state.starts_with(STATE_TOKEN_PREFIX))
            .map(str::to_owned);
        let now = self.now();
        let round = token.and_then(|token| lock(&self.state).flights.retry(&token, now));
        let Some((server_state, mut pending)) = round else {
            self.send_server(raw);
            return;
        };
        // The server gets back exactly the state it gave (or none).
        if let Some(params) = value.get_mut("params").and_then(Value::as_object_mut) {
            match server_state {
                Some(state) => params.insert("requestState".to_owned(), state),
                None => params.remove("requestState"),
            };
        }
        pending.sort_by(|a, b| a.0.cmp(&b.0));
        let mut refusal: Option<Vec<u8>> = None;
        for (key, entry) in pending {
            let InputEntry {
                awaiting,
                id,
                deadline,
                requested,
            } = entry;
            let response = value
                .pointer_mut("/params/inputResponses")
                .and_then(|r| r.get_mut(&key));
            let answered = response.as_ref().is_some_and(|r| r.is_object());
            let grant = match awaiting {
                Awaiting::Consent(consent) if answered => match consent.approve() {
                    Ok(grant) => {
                        self.audit_consent_grant("inputRequests", &id, &requested, &grant);
                        grant
                    }
                    Err(error) => {
                        self.log.line(format_args!(
                            "recording the client's consent answer failed: {error}"
                        ));
                        continue;
                    }
                },
                Awaiting::Consent(consent) => {
                    // No response for the entry: the client declined it.
                    let denial = self.user_refused(consent.refuse(), &id);
                    self.audit_denial("consent", "inputRequests", Some(&id), &requested, &denial);
                    continue;
                }
                Awaiting::Grant(grant) => grant,
            };
            let Some(response) = response else {
                continue;
            };
            if deadline.is_some_and(|d| now > d) {
                match grant.deadline_missed() {
                    Ok(denial) => {
                        self.audit_denial(
                            "deadline",
                            "inputRequests",
                            Some(&id),
                            &requested,
                            &denial,
                        );
                        refusal.get_or_insert_with(|| denial.local_error(call_id));
                    }
                    Err(error) => {
                        refusal.get_or_insert_with(|| error.reply(call_id));
                    }
                }
                continue;
            }
            // The retry is re-written whatever settling did (the server's
            // own `requestState` is restored), so an annotation needs no flag.
            match self.settle(grant, response, "inputRequests", &id, &requested) {
                Settled::Annotated(_) => {}
                Settled::Withheld(denial) => {
                    refusal.get_or_insert_with(|| denial.local_error(call_id));
                }
                Settled::Failed(error) => {
                    refusal.get_or_insert_with(|| error.reply(call_id));
                }
            }
        }
        if let Some(refusal) = refusal {
            // The late completion never reaches the server.
            self.send_client(&refusal);
        } else {
            // Re-written: the server's own `requestState` is restored.
            self.send_server(value.to_string().as_bytes());
        }
    }
}
