//! What the client sends: its capabilities, its answers to the server's
//! requests (a sampling answer settled, annotated after a trim, or replaced
//! by the policy's `user.denied` frame), and a task's progress to the
//! terminal state that decides it (MCP 2025-11-25 tasks).

use super::*;

impl Session {
    /// Handles one line read from the client (with or without its newline).
    pub fn from_client(&self, raw: &[u8]) {
        let line = body(raw);
        let Ok(probe) = serde_json::from_slice::<ClientProbe<'_>>(line) else {
            // The client is the party the proxy works for: whatever it sends
            // goes on, and the server answers malformed frames itself.
            self.send_server(raw);
            return;
        };
        match (probe.method.as_deref(), &probe.id) {
            (None, Some(id)) if probe.result.is_some() || probe.error.is_some() => {
                // Keyed as the client read the id it echoes; a number no
                // admitted id keys to answers nothing in flight.
                let key = answer_key(id).unwrap_or_else(|| id.to_string());
                let flight = match answer_key(id) {
                    Some(key) => lock(&self.state).flights.answer(&key),
                    None => None,
                };
                match flight {
                    Some(Flight::Passthrough) => self.send_server(raw),
                    None => {
                        // Every server request is tracked until answered, so
                        // this answers none: a second answer, or one to a
                        // request whose linger ended. The server would match
                        // it to whatever it sent last with this id.
                        self.log.line(format_args!(
                            "dropped the client's answer to {key}: no server request with this id is in flight"
                        ));
                    }
                    Some(Flight::Sampling(sampling)) => {
                        self.sampling_answered(raw, line, sampling, true);
                    }
                    Some(Flight::Cancelled {
                        sampling: Some(sampling),
                        ..
                    }) => self.sampling_answered(raw, line, sampling, false),
                    Some(Flight::Cancelled { sampling: None, .. }) => {
                        self.log.line(format_args!(
                            "dropped the client's answer to request {key}: the server cancelled it"
                        ));
                    }
                    Some(Flight::Expired { .. }) => {
                        self.log.line(format_args!(
                            "dropped the client's late answer to request {key} (answered policy.deadline)"
                        ));
                    }
                    Some(Flight::TaskQuery { task_id, method }) => {
                        self.task_answered(raw, line, id, &task_id, method);
                    }
                }
            }
            (Some("notifications/tasks/status"), None) => {
                if let Ok(value) = serde_json::from_slice::<Value>(line)
                    && let Some(params) = value.get("params")
                    && let Some(task_id) = params.get("taskId").and_then(Value::as_str)
                {
                    self.task_status(task_id, params);
                }
                self.send_server(raw);
            }
            (Some(method @ ("tasks/get" | "tasks/update" | "tasks/cancel")), Some(id)) => {
                if may_contain(line, CLIENT_CAPABILITIES_META.as_bytes()) {
                    self.note_capabilities(line, false);
                }
                self.ext_task_call(raw, line, id, method);
            }
            (Some(method), _) => {
                if method == "initialize" || may_contain(line, CLIENT_CAPABILITIES_META.as_bytes())
                {
                    self.note_capabilities(line, method == "initialize");
                }
                let retry = probe
                    .params
                    .as_ref()
                    .is_some_and(|p| p.input_responses.is_some());
                if retry {
                    self.input_responses(raw, line, probe.id.as_ref());
                } else {
                    self.send_server(raw);
                }
            }
            _ => self.send_server(raw),
        }
    }

    /// Whether the client declared `sampling.context`: from `initialize`
    /// (2025-11-25) or the per-request capabilities `_meta` (2026-07-28).
    pub(super) fn note_capabilities(&self, line: &[u8], initialize: bool) {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let capabilities = if initialize {
            value.pointer("/params/capabilities")
        } else {
            value
                .get("params")
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(CLIENT_CAPABILITIES_META))
        };
        if let Some(capabilities) = capabilities {
            let declared = capabilities
                .get("sampling")
                .and_then(|s| s.get("context"))
                .is_some_and(|c| !c.is_null());
            self.sampling_context.store(declared, Ordering::Relaxed);
        }
    }

    /// The client answered a sampling request the proxy forwarded; `live`
    /// is false when the server cancelled it (the answer still decides,
    /// but nothing reaches the server).
    pub(super) fn sampling_answered(
        &self,
        raw: &[u8],
        line: &[u8],
        sampling: Sampling,
        live: bool,
    ) {
        self.record_unrecorded();
        let Ok(mut value) = serde_json::from_slice::<Value>(line) else {
            if live {
                self.send_server(raw);
            }
            return;
        };
        let id = sampling.id.clone();
        // A task handle is not the user's answer: follow the task.
        if sampling.task
            && let Some(task) = value.pointer("/result/task")
            && let Some(task_id) = task.get("taskId").and_then(Value::as_str)
        {
            let task_id = task_id.to_owned();
            let ttl = task.get("ttl").and_then(Value::as_u64);
            let report = task.clone();
            let now = self.now();
            let deadline = sampling.deadline.is_some();
            lock(&self.state)
                .flights
                .start_task(task_id.clone(), sampling, ttl, now);
            if deadline {
                self.new_deadline.store(true, Ordering::Release);
            }
            self.log.line(format_args!(
                "client runs request {id} as task {task_id}: its terminal state decides"
            ));
            self.task_status(&task_id, &report);
            if live {
                self.send_server(raw);
            } else {
                self.log.line(format_args!(
                    "dropped the client's task handle for request {id}: the server cancelled it"
                ));
            }
            return;
        }
        let Sampling {
            awaiting,
            requested,
            ..
        } = sampling;
        let forward = self.resolve(awaiting, &id, &id, &requested, &mut value, "request");
        if live {
            match forward {
                Forward::Raw => self.send_server(raw),
                Forward::Replace(bytes) => self.send_server(&bytes),
            }
        } else {
            self.log.line(format_args!(
                "dropped the client's answer to request {id}: the server cancelled it (answer recorded)"
            ));
        }
    }

    /// Takes the decision the client's answer carries: `value` answers a
    /// sampling request, or the `tasks/result` request `reply_to` about the
    /// task of sampling request `origin`. Returns what the server receives.
    pub(super) fn resolve(
        &self,
        awaiting: Awaiting,
        reply_to: &Value,
        origin: &Value,
        requested: &Map<String, Value>,
        value: &mut Value,
        via: &str,
    ) -> Forward {
        let grant = match awaiting {
            Awaiting::Consent(pending) => match Reply::of(value) {
                Reply::Result => {
                    let identity = pending.identity().to_owned();
                    match pending.approve() {
                        Ok(grant) => {
                            self.audit_consent_grant(via, origin, requested, &grant);
                            grant
                        }
                        Err(error) => {
                            self.audit_consent_failed(via, origin, &identity, None);
                            // The completion already ran: withholding it spends nothing back.
                            self.log.line(format_args!(
                                "recording the client's consent answer failed: {error}"
                            ));
                            return Forward::Raw;
                        }
                    }
                }
                Reply::Rejected => {
                    let denial = self.user_refused(pending.refuse(), origin);
                    self.log.line(format_args!(
                        "client refused request {origin} (code -1): {}",
                        denial.reason()
                    ));
                    self.audit_denial("consent", via, Some(origin), requested, &denial);
                    // The policy's frame, not the client's: a replay of
                    // this identity must send the same bytes.
                    return Forward::Replace(denial.reply(Some(reply_to)));
                }
                Reply::Failed(code) => {
                    self.abandon(pending, origin, code, via);
                    return Forward::Raw;
                }
            },
            // The client asked its user anyway (a replayed approval, `consent
            // never`) and the user said no: still the user's word.
            Awaiting::Grant(grant) if Reply::of(value) == Reply::Rejected => {
                let denial = self.user_refused(grant.refused_by_user(), origin);
                self.log.line(format_args!(
                    "client refused granted request {origin} (code -1): {}",
                    denial.reason()
                ));
                self.audit_denial("consent", via, Some(origin), requested, &denial);
                return Forward::Replace(denial.reply(Some(reply_to)));
            }
            Awaiting::Grant(grant) => grant,
        };
        // A provider failure of an allowed request: the server learns it
        // from the client's own error; the reservation stays.
        let Some(result) = value.get_mut("result") else {
            return Forward::Raw;
        };
        // A trim's result goes on re-written even when `_meta` could not be
        // added (the result is not an object): as it always has.
        let trimmed = grant.is_trim();
        match self.settle(grant, result, via, origin, requested) {
            Settled::Withheld(denial) => Forward::Replace(denial.reply(Some(reply_to))),
            Settled::Failed(error) => Forward::Replace(error.reply(Some(reply_to))),
            Settled::Annotated(_) if trimmed => Forward::Replace(value.to_string().into_bytes()),
            Settled::Annotated(_) => Forward::Raw,
        }
    }

    /// The client failed a consent request (an error other than the user's
    /// rejection, or a task that ended without result): not a decision.
    /// Nothing is stored and the reserved budget is refunded; the server
    /// receives the client's own answer.
    ///
    /// Its `consent` audit line (outcome `failed`) closes the request's
    /// `decision` line: every consent the audit shows asked is shown
    /// answered, refused or failed (`proxy/PROXY.md`, "The audit log").
    pub(super) fn abandon(
        &self,
        pending: PendingConsent,
        origin: &Value,
        code: Option<i64>,
        via: &str,
    ) {
        self.audit_consent_failed(via, origin, pending.identity(), code);
        let code = code.map_or_else(|| "none".to_owned(), |c| c.to_string());
        match pending.abandon() {
            Ok(()) => self.log.line(format_args!(
                "client failed request {origin} (code {code}): not the user's answer, nothing recorded, budget refunded"
            )),
            Err(error) => self.log.line(format_args!(
                "client failed request {origin} (code {code}); refunding its budget failed: {error}"
            )),
        }
    }

    /// The client answered a `tasks/*` request about a task the proxy follows.
    pub(super) fn task_answered(
        &self,
        raw: &[u8],
        line: &[u8],
        reply_to: &Value,
        task_id: &str,
        method: TaskMethod,
    ) {
        let Ok(mut value) = serde_json::from_slice::<Value>(line) else {
            self.send_server(raw);
            return;
        };
        if method != TaskMethod::Result {
            if let Some(report) = value.get("result") {
                self.task_status(task_id, report);
            }
            self.send_server(raw);
            return;
        }
        // `tasks/result`: the task's terminal answer.
        let Some(task) = lock(&self.state).flights.take_task(task_id) else {
            self.send_server(raw);
            return;
        };
        let forward = match task.state {
            TaskState::Running(awaiting) | TaskState::Failed(awaiting) => self.resolve(
                awaiting,
                reply_to,
                &task.origin,
                &task.requested,
                &mut value,
                "task",
            ),
            TaskState::Approved(grant) => self.resolve(
                Awaiting::Grant(grant),
                reply_to,
                &task.origin,
                &task.requested,
                &mut value,
                "task",
            ),
            TaskState::Refused(denial) | TaskState::Missed(denial) => {
                self.log.line(format_args!(
                    "task {task_id}'s result answered {} (recorded earlier)",
                    denial.reason()
                ));
                Forward::Replace(denial.reply(Some(reply_to)))
            }
        };
        match forward {
            Forward::Raw => self.send_server(raw),
            Forward::Replace(bytes) => self.send_server(&bytes),
        }
    }

    /// A followed task reported its status (`report` holds `status` and
    /// `statusMessage`: a `tasks/get` or `tasks/cancel` answer, a
    /// `notifications/tasks/status`, or the creation reply). `completed`
    /// approves and `cancelled` abandons. Only the user's word is a
    /// refusal: `failed` with MCP's user-rejection message (the only form a
    /// 2025-11-25 task status can give the `-1`; `docs/spec/evaluation.md`,
    /// "Tasks") refuses; any other `failed` waits for `tasks/result`, whose
    /// `-1` refuses and whose other answers abandon (the task's `ttl`
    /// abandons it too).
    pub(super) fn task_status(&self, task_id: &str, report: &Value) {
        let Some(status) = report.get("status").and_then(Value::as_str) else {
            return;
        };
        if !is_terminal(status) {
            return;
        }
        let rejected = report.get("statusMessage").and_then(Value::as_str)
            == Some(jsonrpc_user_rejected_message());
        let Some(mut task) = lock(&self.state).flights.take_task(task_id) else {
            return;
        };
        task.state = match (status, task.state) {
            ("completed", TaskState::Running(Awaiting::Consent(pending))) => {
                match pending.approve() {
                    Ok(grant) => {
                        self.audit_consent_grant("task", &task.origin, &task.requested, &grant);
                        TaskState::Approved(grant)
                    }
                    Err(error) => {
                        self.log.line(format_args!(
                            "recording the approval of task {task_id} failed: {error}"
                        ));
                        return;
                    }
                }
            }
            ("completed", TaskState::Running(Awaiting::Grant(grant))) => TaskState::Approved(grant),
            ("failed", TaskState::Running(Awaiting::Consent(pending))) if rejected => {
                let denial = self.user_refused(pending.refuse(), &task.origin);
                self.log.line(format_args!(
                    "task {task_id} of request {} failed with the user's rejection: recorded {}",
                    task.origin,
                    denial.reason()
                ));
                self.audit_denial(
                    "consent",
                    "task",
                    Some(&task.origin),
                    &task.requested,
                    &denial,
                );
                TaskState::Refused(denial)
            }
            ("failed", TaskState::Running(Awaiting::Consent(pending))) => {
                self.log.line(format_args!(
                    "task {task_id} of request {} failed without the user's rejection: its tasks/result decides",
                    task.origin
                ));
                TaskState::Failed(Awaiting::Consent(pending))
            }
            ("cancelled", TaskState::Running(Awaiting::Consent(pending)))
            | ("cancelled", TaskState::Failed(Awaiting::Consent(pending))) => {
                self.abandon(pending, &task.origin, None, "task");
                return;
            }
            ("failed", TaskState::Running(Awaiting::Grant(grant))) if rejected => {
                let denial = self.user_refused(grant.refused_by_user(), &task.origin);
                self.audit_denial(
                    "consent",
                    "task",
                    Some(&task.origin),
                    &task.requested,
                    &denial,
                );
                TaskState::Refused(denial)
            }
            // A task under a grant that failed or was cancelled: nothing to
            // settle, the reservation stays.
            ("failed" | "cancelled", TaskState::Running(Awaiting::Grant(_))) => return,
            // Already decided: a later status changes nothing.
            (_, state) => state,
        };
        lock(&self.state).flights.put_task(task_id.to_owned(), task);
    }

    /// Completes the grant with the token usage the result reports and
    /// annotates the result (`_meta` after a trim). A result whose `model`
    /// is outside the block's `models` is withheld: its tokens are settled
    /// and the server gets the `policy.model` denial instead
    /// (`docs/spec/frames.md`, "A result from a model outside `models`";
    /// the proxy trims hints but cannot choose the client's model, so it
    /// keeps the promise on the way back). A result that reports no usage
    /// leaves the grant's reservation counted (the safe side).
    pub(super) fn settle(
        &self,
        grant: Grant,
        result: &mut Value,
        via: &str,
        origin: &Value,
        requested: &Map<String, Value>,
    ) -> Settled {
        let tokens = usage_tokens(result);
        if let Some(model) = result.get("model").and_then(Value::as_str)
            && !grant.model_allowed(model)
        {
            let allowed: Vec<String> = grant
                .allowed_models()
                .into_iter()
                .flatten()
                .map(str::to_owned)
                .collect();
            let model = model.to_owned();
            return match grant.model_refused(tokens) {
                Ok(denial) => {
                    self.log.line(format_args!(
                        "the client ran model `{model}` for request {origin}, outside the policy's `models` {allowed:?}: result withheld, answered {}",
                        denial.reason()
                    ));
                    self.audit_denial("decision", via, Some(origin), requested, &denial);
                    Settled::Withheld(Box::new(denial))
                }
                Err(error) => {
                    self.log.line(format_args!(
                        "the client ran model `{model}` for request {origin}, outside the policy's `models`: result withheld; {error}"
                    ));
                    Settled::Failed(error)
                }
            };
        }
        let annotated = grant.is_trim() && grant.annotate(result);
        if let Some(tokens) = tokens
            && let Err(error) = grant.complete(tokens)
        {
            self.log
                .line(format_args!("settling {tokens} tokens failed: {error}"));
        }
        Settled::Annotated(annotated)
    }
}
