//! What the server sends: its requests (each `sampling/createMessage`
//! decided here; a denial answered to the server, an allow or trim
//! forwarded and remembered), its cancellations, and its responses to the
//! client's calls, which may carry sampling (MCP 2025-11-25 tasks, MCP
//! 2026-07-28 `input_required` results, the tasks extension).

use super::*;

impl Session {
    /// May an error frame for an unreadable server frame carry `id`? Only
    /// when no request of that id is in flight: the server would take the
    /// answer for that request's, and the answers would cross.
    pub(super) fn answerable(&self, id: Option<&Value>) -> bool {
        id.is_none_or(|id| {
            answer_key(id).is_none_or(|key| lock(&self.state).flights.state(&key).is_none())
        })
    }

    /// [`Session::answerable`] for an id as written.
    pub(super) fn answerable_raw(&self, id: &RawValue) -> bool {
        match wire::admit_id(id) {
            Ok(key) => lock(&self.state).flights.state(&flight_key(&key)).is_none(),
            Err(_) => serde_json::from_str::<Value>(id.get())
                .map_or(true, |value| self.answerable(Some(&value))),
        }
    }

    /// Answers a server frame with an error that echoes its id as written
    /// (`None`: `null`).
    pub(super) fn refuse_server_frame(&self, id: Option<&RawValue>, code: i32, message: &str) {
        let frame = match id {
            Some(id) if matches!(id.get().as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9')) => {
                wire::refusal_frame(id.get(), code, message)
            }
            _ => frame::request_error_response(None, code, message),
        };
        self.send_server(&frame);
    }

    /// Handles one line read from the server (with or without its newline).
    pub fn from_server(&self, raw: &[u8]) {
        let line = body(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if std::str::from_utf8(line).is_err() {
            // JSON text is UTF-8; a client decodes other bytes its own way
            // (replaced, or the whole stream refused), so it does not pass.
            self.log.line(format_args!(
                "server sent a frame that is not UTF-8; answered -32700, not forwarded"
            ));
            self.send_server(&frame::request_error_response(
                None,
                jsonrpc::PARSE_ERROR,
                "Invalid frame from the server: not UTF-8",
            ));
            return;
        }
        let probe: ServerProbe<'_> = match serde_json::from_slice(line) {
            Ok(probe) => probe,
            Err(error) => {
                // Not one JSON object with unique routing members: the client
                // might read it differently than we do, so it does not pass.
                let valid_json = serde_json::from_slice::<IgnoredAny>(line).is_ok();
                let (code, what) = if valid_json {
                    (
                        jsonrpc::INVALID_REQUEST,
                        "not a single JSON-RPC message object",
                    )
                } else {
                    (jsonrpc::PARSE_ERROR, "not JSON")
                };
                // A sampling request the probe could not read (two `method`
                // members, say) gets the runtime's own refusal: the precise
                // message, and the id when it can be read.
                if may_contain(line, br#""sampling/createMessage""#)
                    && let Err(rejection) = request::parse_sampling(line)
                    && self.answerable(rejection.id.as_ref())
                {
                    self.log.line(format_args!(
                        "server sent an unreadable sampling request ({error}); answered {}, not forwarded",
                        rejection.code()
                    ));
                    // The id as written when it was read (`-0`, an integer
                    // no double holds), else the runtime's frame.
                    let reply = match (&rejection.id, request::recover_id_text(line)) {
                        (Some(_), Some(text)) => wire::refusal_frame(
                            &text,
                            rejection.code(),
                            &rejection.error.to_string(),
                        ),
                        _ => rejection.reply(),
                    };
                    self.send_server(&reply);
                    return;
                }
                self.log.line(format_args!(
                    "server sent a frame that is {what} ({error}); answered {code}, not forwarded"
                ));
                let message = format!("Invalid frame from the server: {what} ({error})");
                // Only a request is answered with its id; a response's id
                // names one of the client's calls.
                let id = may_contain(line, br#""method""#)
                    .then(|| request::recover_id(line))
                    .flatten()
                    .filter(|id| self.answerable(Some(id)));
                match id.and_then(|_| request::recover_id_text(line)) {
                    Some(text) => self.send_server(&wire::refusal_frame(&text, code, &message)),
                    None => self.send_server(&frame::request_error_response(None, code, &message)),
                }
                return;
            }
        };
        if probe.method.is_some() && (probe.result.is_some() || probe.error.is_some()) {
            // A request and a response at once: the client may read it as
            // either, and as a response its `inputRequests` would go on
            // undecided. It is neither, so it does not pass.
            let id = probe.id.filter(|id| self.answerable_raw(id));
            self.log.line(format_args!(
                "server sent a frame with both `method` and `result`/`error`; answered -32600, not forwarded"
            ));
            self.refuse_server_frame(
                id,
                jsonrpc::INVALID_REQUEST,
                "Invalid frame from the server: a message is a request or a response, not both",
            );
            return;
        }
        if let (Some(method), Some(id)) = (probe.method.as_deref(), probe.id)
            && method.starts_with("notifications/")
            && method != "notifications/cancelled"
        {
            // A notification's method with an id: a client that dispatches
            // on the method reads a notification (`notifications/tasks` with
            // its `inputRequests`), one that looks at the id a request. It
            // is neither, so it does not pass (`docs/spec/frames.md`).
            let id = Some(id).filter(|id| self.answerable_raw(id));
            self.log.line(format_args!(
                "server sent the notification {} with an id; answered -32600, not forwarded",
                method
            ));
            self.refuse_server_frame(
                id,
                jsonrpc::INVALID_REQUEST,
                "Invalid frame from the server: a notification carries no id",
            );
            return;
        }
        match (probe.method.as_deref(), probe.id) {
            (Some("notifications/tasks"), None) => self.ext_task_notified(raw, line),
            (Some("notifications/cancelled"), _) => {
                // Never ahead of a request still being decided.
                let job = Job::Cancelled { raw: raw.to_vec() };
                if let Some(job) = if self.deciding() {
                    self.defer(job)
                } else {
                    Some(job)
                } {
                    self.run_job(job);
                }
            }
            (Some(method), Some(id)) => {
                // An id some client would take for another (`1.0` for
                // `1`) is refused before it can alias one in flight.
                let key = match wire::admit_id(id) {
                    Ok(key) => flight_key(&key),
                    Err(refusal) => {
                        self.log.line(format_args!(
                            "server sent {method} with id {}, which a client could take for another id: answered -32600, not forwarded",
                            id.get()
                        ));
                        self.refuse_server_frame(
                            Some(id),
                            jsonrpc::INVALID_REQUEST,
                            refusal.message(),
                        );
                        return;
                    }
                };
                // `received`: an id the client has not answered yet cannot
                // name a second request, whatever its method.
                let admitted = lock(&self.state)
                    .flights
                    .admit(&key, line.len(), self.now());
                if let Err(refusal) = admitted {
                    self.log.line(format_args!(
                        "server sent {method} with id {key}, {}: answered {}, not forwarded",
                        match refusal {
                            Refusal::InFlight => "still in flight",
                            Refusal::Full => "with the in-flight bound reached",
                        },
                        refusal.code()
                    ));
                    self.send_server(&self.refusal_frame_raw(id, refusal));
                    return;
                }
                if method == jsonrpc::SAMPLING_METHOD {
                    // Decided off this thread when the proxy runs a decision
                    // thread: what follows needs no store and goes on.
                    let job = Job::Sampling {
                        raw: raw.to_vec(),
                        key,
                    };
                    if let Some(job) = self.defer(job) {
                        self.run_job(job);
                    }
                } else {
                    self.task_or_passthrough(raw, line, method, key, line.len());
                }
            }
            (Some(jsonrpc::SAMPLING_METHOD), None) => {
                let job = Job::Sampling {
                    raw: raw.to_vec(),
                    key: String::new(),
                };
                if let Some(job) = self.defer(job) {
                    self.run_job(job);
                }
            }
            (Some(_), None) => self.send_client(raw),
            (None, _) => {
                let result_type = probe.result.as_ref().and_then(|r| r.result_type.as_deref());
                let input_requests = probe.result.as_ref().is_some_and(|r| r.input_requests);
                let id = probe
                    .id
                    .and_then(|id| serde_json::from_str::<Value>(id.get()).ok());
                match (id, result_type) {
                    (Some(id), Some("input_required")) => {
                        let job = Job::InputRequired {
                            raw: raw.to_vec(),
                            id,
                        };
                        if let Some(job) = self.defer(job) {
                            self.run_job(job);
                        }
                    }
                    // An answer to a tracked `tasks/get` may carry sampling
                    // entries: decided here, on the reader (its store calls
                    // are bounded like every other, `docs/spec/store.md`).
                    (Some(id), result_type) => self.ext_task_response(
                        raw,
                        line,
                        &id,
                        result_type == Some("task"),
                        input_requests,
                    ),
                    _ => self.send_client(raw),
                }
            }
        }
    }

    /// A server request other than sampling: tracked so its id cannot be
    /// reused before the client answers; a `tasks/*` request about a task
    /// the proxy follows is tracked as such.
    pub(super) fn task_or_passthrough(
        &self,
        raw: &[u8],
        line: &[u8],
        method: &str,
        key: String,
        bytes: usize,
    ) {
        let mut flight = Flight::Passthrough;
        if let Some(task_method) = TaskMethod::of(method)
            && let Ok(value) = serde_json::from_slice::<Value>(line)
            && let Some(task_id) = value.pointer("/params/taskId").and_then(Value::as_str)
            && lock(&self.state).flights.follows(task_id)
        {
            flight = Flight::TaskQuery {
                task_id: task_id.to_owned(),
                method: task_method,
            };
        }
        lock(&self.state)
            .flights
            .forward(key, flight, bytes, self.text_of(line));
        self.send_client(raw);
    }

    /// The server gave up on a request: it stays tracked as cancelled (the
    /// client may still answer, and a refusal still counts), and nothing
    /// the client sends for it reaches the server.
    pub(super) fn server_cancelled(&self, line: &[u8]) {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if let Some(key) = value.pointer("/params/requestId").and_then(answer_key) {
            let now = self.now();
            lock(&self.state).flights.cancel(&key, now);
        }
    }

    /// `decided`: a sampling request; `key` is its id's text (empty for a
    /// request without id, which is decided but not tracked).
    pub(super) fn sampling_request(&self, raw: &[u8], line: &[u8], key: String) {
        self.record_unrecorded();
        match self.engine.decide(&self.server_id, line, &self.ctx()) {
            Answer::Invalid(rejection) => {
                let reply = rejection.reply();
                self.log.line(format_args!(
                    "invalid sampling request answered {}: {}",
                    rejection.code(),
                    String::from_utf8_lossy(&reply)
                ));
                self.audit(&Entry {
                    event: "invalid",
                    via: "request",
                    outcome: "deny",
                    code: Some(rejection.code()),
                    ..Entry::default()
                });
                self.send_server(&reply);
            }
            Answer::Failed { reply, error } => {
                self.log
                    .line(format_args!("decision failed, refused: {error}"));
                let reason = error.data().map(|data| data.reason);
                self.audit(&Entry {
                    event: "error",
                    via: "request",
                    outcome: "deny",
                    reason: reason.as_deref(),
                    code: Some(error.code()),
                    ..Entry::default()
                });
                self.send_server(&reply);
            }
            Answer::Decided { request, decision } => self.decided(raw, key, request, decision),
        }
    }

    pub(super) fn decided(
        &self,
        raw: &[u8],
        key: String,
        request: SamplingRequest,
        decision: Decision,
    ) {
        let rewritten = request.rewritten();
        let id = request.id.clone().unwrap_or(Value::Null);
        let params = request.into_params();
        // Written after the decision's own line, which it is about.
        let alert = decision.alert().cloned();
        self.decided_outcome(raw, key, id, params, rewritten, decision);
        self.raise(alert.as_ref());
    }

    pub(super) fn decided_outcome(
        &self,
        raw: &[u8],
        key: String,
        id: Value,
        params: Map<String, Value>,
        rewritten: bool,
        decision: Decision,
    ) {
        match decision {
            Decision::Deny(denial) => {
                self.audit_denial("decision", "request", Some(&id), &params, &denial);
                self.send_server(&denial.reply(Some(&id)));
            }
            Decision::Allow(grant) | Decision::Trim(grant) => {
                let applied = grant.params(&params);
                let trimmed = !grant.lowered().is_empty();
                self.audit(&Entry {
                    replayed: grant.replayed(),
                    ..grant_entry("decision", "request", &id, &params, &grant, &applied)
                });
                let deadline = grant
                    .deadline_ms()
                    .map(|ms| self.now() + Duration::from_millis(ms));
                let forward = (trimmed || rewritten).then(|| rewrite_request(&id, applied));
                let awaiting = Awaiting::Grant(grant);
                self.remember(key, id, awaiting, deadline, params, raw, rewritten);
                self.send_client(forward.as_deref().unwrap_or(raw));
            }
            Decision::NeedsConsent(pending) => {
                let mut shown = params.clone();
                pending.lowered().apply(&mut shown);
                self.audit(&Entry {
                    event: "decision",
                    via: "request",
                    id: Some(&id),
                    identity: Some(pending.identity()),
                    outcome: "consent",
                    requested: Some(&params),
                    applied: Some(&shown),
                    cause: Some(pending.cause()),
                    trims: Some(pending.annotations()),
                    ..Entry::default()
                });
                let forward = (!pending.lowered().is_empty() || rewritten)
                    .then(|| rewrite_request(&id, shown));
                // No deadline while the user decides: the client's approval
                // dialog and the completion are one round trip to us.
                let awaiting = Awaiting::Consent(pending);
                self.remember(key, id, awaiting, None, params, raw, rewritten);
                self.send_client(forward.as_deref().unwrap_or(raw));
            }
        }
    }

    /// `forwarded`: tracks a sampling request sent on to the client
    /// (`raw`: as the server wrote it; `rewritten`: the client was sent a
    /// re-serialised form).
    #[allow(clippy::too_many_arguments, reason = "one flight's fields")]
    pub(super) fn remember(
        &self,
        key: String,
        id: Value,
        awaiting: Awaiting,
        deadline: Option<Instant>,
        requested: Map<String, Value>,
        raw: &[u8],
        rewritten: bool,
    ) {
        let bytes = raw.len();
        if key.is_empty() {
            // A request without id is never answered; nothing to wait for.
            return;
        }
        if deadline.is_some() {
            self.new_deadline.store(true, Ordering::Release);
        }
        let task = requested.contains_key("task");
        lock(&self.state).flights.forward(
            key,
            Flight::Sampling(Sampling {
                id,
                requested,
                awaiting,
                deadline,
                task,
                bytes,
                rewritten,
            }),
            bytes,
            self.text_of(body(raw)),
        );
    }
}
