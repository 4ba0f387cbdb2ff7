//! The tasks extension of MCP 2026-07-28 (`tasks/get`, `tasks/update`,
//! `notifications/tasks`): sampling entries in a task's `inputRequests` are
//! decided like an `input_required` result's, bound to the task the proxy
//! saw created on one call.

use super::*;

impl Session {
    /// A server response to a client call: the creation of an extension
    /// task (`resultType: "task"`), the answer to a `tasks/get` the client
    /// sent, or anything else (forwarded unchanged). `input_requests`: the
    /// result has a member `inputRequests`, as the probe read its keys.
    pub(super) fn ext_task_response(
        &self,
        raw: &[u8],
        line: &[u8],
        call_id: &Value,
        created: bool,
        input_requests: bool,
    ) {
        let key = call_key(call_id);
        let polled = lock(&self.state).flights.polled(&key);
        if !created && polled.is_none() {
            // Sampling entries in an answer the proxy cannot tie to a task
            // it follows (a `tasks/get` keyed otherwise, say): a client may
            // still read them as its task's, so they do not pass undecided.
            // Read from the parsed answer, never from its bytes: a method
            // spelt `sampling\/createMessage` is the sampling method to
            // every JSON reader.
            let undecided = input_requests
                && serde_json::from_slice::<Value>(line)
                    .ok()
                    .is_some_and(|v| undecided_sampling(&v));
            if undecided {
                self.refuse_answer(
                    call_id,
                    format_args!("server answered call {key} with input requests of no task the proxy follows"),
                    "input requests of no task this call polled",
                );
                return;
            }
            self.send_client(raw);
            return;
        }
        let Ok(mut value) = serde_json::from_slice::<Value>(line) else {
            self.send_client(raw);
            return;
        };
        let reported = value.pointer("/result/taskId").map(task_key);
        let task_id = match (polled, reported) {
            (None, None) => {
                self.send_client(raw);
                return;
            }
            // A task id is the server's: it names one task, created on one call.
            (None, Some(reported)) => {
                if let Err(message) = self.ext_task_created(&reported, &key) {
                    self.refuse_answer(
                        call_id,
                        format_args!("server answered call {key} with task {reported}: {message}"),
                        &message,
                    );
                    return;
                }
                reported
            }
            // The client reads the answer as about the task it polled.
            (Some(polled), None) => polled,
            (Some(polled), Some(reported)) if polled == reported => polled,
            (Some(polled), Some(reported)) => {
                self.refuse_answer(
                    call_id,
                    format_args!(
                        "server answered tasks/get {key} for task {polled} with task {reported}"
                    ),
                    "tasks/get answered about another task",
                );
                return;
            }
        };
        let Some(body) = value.get_mut("result") else {
            self.send_client(raw);
            return;
        };
        match self.ext_task_body(&task_id, body, Some(call_id), line.len()) {
            Ok(false) => self.send_client(raw),
            Ok(true) => self.send_client(value.to_string().as_bytes()),
            Err(frame) => self.send_client(&frame),
        }
    }

    /// A server answer to the client's call `call_id` that does not pass:
    /// `what` logged, the client answered -32603 "Invalid result from the
    /// server: `message`".
    fn refuse_answer(&self, call_id: &Value, what: std::fmt::Arguments<'_>, message: &str) {
        self.log
            .line(format_args!("{what}; answered -32603, not forwarded"));
        self.send_client(&frame::request_error_response(
            Some(call_id),
            jsonrpc::INTERNAL_ERROR,
            &format!("Invalid result from the server: {message}"),
        ));
    }

    /// The proxy saw task `task_id` created on the client's call `call`:
    /// refused when the server already gave that task id to another call.
    pub(super) fn ext_task_created(&self, task_id: &str, call: &str) -> Result<(), String> {
        let now = self.now();
        let mut state = lock(&self.state);
        let mut task = state.flights.take_ext_task(task_id).unwrap_or_default();
        let aliased = task.created_by.as_deref().is_some_and(|c| c != call);
        if !aliased {
            task.created_by = Some(call.to_owned());
        }
        let bytes = ext_task_bytes(task_id, &task);
        if let Err((task, refusal)) =
            state
                .flights
                .put_ext_task(task_id.to_owned(), task, bytes, TASK_TTL_DEFAULT, now)
        {
            drop(state);
            self.end_ext_task_entries(task_id, task);
            return Err(refusal.message().to_owned());
        }
        if aliased {
            return Err(format!(
                "task id {task_id} already names a task of another call"
            ));
        }
        Ok(())
    }

    /// A server `notifications/tasks` (a task's status, with its
    /// `inputRequests` while `input_required`): decided like a `tasks/get`
    /// answer; a refused entry drops the notification (it answers nothing;
    /// the client's next `tasks/get` is answered with the refusal).
    pub(super) fn ext_task_notified(&self, raw: &[u8], line: &[u8]) {
        let Ok(mut value) = serde_json::from_slice::<Value>(line) else {
            self.send_client(raw);
            return;
        };
        // Whatever the task id's type, a client may read the entries.
        let task_id = value
            .pointer("/params/taskId")
            .map(task_key)
            .unwrap_or_default();
        let Some(body) = value.get_mut("params") else {
            self.send_client(raw);
            return;
        };
        match self.ext_task_body(&task_id, body, None, line.len()) {
            Ok(false) => self.send_client(raw),
            Ok(true) => self.send_client(value.to_string().as_bytes()),
            Err(_) => self.log.line(format_args!(
                "dropped the server's notifications/tasks for task {task_id}: an input request was refused"
            )),
        }
    }

    /// Decides a task's state as the server reports it (`body`: a
    /// `DetailedTask`). A terminal status ends the task (unanswered consent
    /// is abandoned); `input_required` has its new sampling entries decided
    /// and remembered with the task, its pending ones checked unchanged.
    /// Returns whether `body` was rewritten (trims), or the frame refusing
    /// the client's call `reply_to`.
    pub(super) fn ext_task_body(
        &self,
        task_id: &str,
        body: &mut Value,
        reply_to: Option<&Value>,
        bytes: usize,
    ) -> Result<bool, Vec<u8>> {
        let status = body.get("status").and_then(Value::as_str).unwrap_or("");
        if is_terminal(status) {
            self.end_ext_task(task_id);
            return Ok(false);
        }
        // Entries are read wherever a client might read them: any status.
        let Some(requests) = body.get("inputRequests") else {
            return Ok(false);
        };
        let entries: Vec<(String, Value)> = match requests {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Value::Array(list) => list
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect(),
            _ => Vec::new(),
        };
        let refuse = |message: String| {
            self.log.line(format_args!(
                "task {task_id}: {message}; answered -32600, not forwarded"
            ));
            frame::request_error_response(
                reply_to,
                jsonrpc::INVALID_REQUEST,
                &format!("Invalid result from the server: {message}"),
            )
        };
        let now = self.now();
        let mut task = lock(&self.state)
            .flights
            .take_ext_task(task_id)
            .unwrap_or_default();
        let mut fresh = Map::new();
        for (key, request) in &entries {
            let violation = if task.answered.contains(key) {
                Some(format!("input request key {key} was already answered"))
            } else {
                task.pending
                    .get(key)
                    .filter(|pending| pending.request != *request)
                    .map(|_| format!("input request key {key} names another request"))
            };
            if let Some(message) = violation {
                self.put_back_ext_task(task_id, task, now);
                return Err(refuse(message));
            }
            if !task.pending.contains_key(key) {
                fresh.insert(key.clone(), request.clone());
            }
        }
        if !fresh.is_empty() {
            if let Err(refusal) = lock(&self.state).flights.admit_round(bytes, now) {
                self.put_back_ext_task(task_id, task, now);
                return Err(self.refusal_frame(reply_to, refusal));
            }
            let wrapped = serde_json::json!({ "inputRequests": fresh }).to_string();
            self.schedule_flush();
            let decisions = match self.engine.decide_input_required(
                &self.server_id,
                wrapped.as_bytes(),
                &self.ctx(),
            ) {
                Ok(decisions) => decisions,
                Err(error) => {
                    self.put_back_ext_task(task_id, task, now);
                    return Err(refuse(error.message().to_string()));
                }
            };
            let Decided {
                refusal,
                rewrites,
                remembered,
            } = self.decide_entries(decisions, reply_to, "task");
            if let Some(refusal) = refusal {
                self.put_back_ext_task(task_id, task, now);
                return Err(refusal);
            }
            let mut rewrites: HashMap<String, Map<String, Value>> = rewrites.into_iter().collect();
            for (key, entry) in remembered {
                let request = fresh.get(&key).cloned().unwrap_or(Value::Null);
                let shown = rewrites.remove(&key);
                task.pending.insert(
                    key,
                    TaskInput {
                        entry,
                        request,
                        shown,
                    },
                );
            }
        }
        // Every pending trim is shown again on every poll.
        let mut changed = false;
        if let Some(requests) = body.get_mut("inputRequests") {
            for (key, input) in &task.pending {
                let Some(shown) = &input.shown else {
                    continue;
                };
                let entry = match requests {
                    Value::Object(map) => map.get_mut(key),
                    Value::Array(list) => key.parse::<usize>().ok().and_then(|i| list.get_mut(i)),
                    _ => None,
                };
                if let Some(Value::Object(entry)) = entry {
                    entry.insert("params".to_owned(), Value::Object(shown.clone()));
                    changed = true;
                }
            }
        }
        let ttl = body
            .get("ttlMs")
            .and_then(Value::as_u64)
            .map_or(TASK_TTL_DEFAULT, Duration::from_millis);
        let bytes = ext_task_bytes(task_id, &task);
        if let Err((task, refusal)) =
            lock(&self.state)
                .flights
                .put_ext_task(task_id.to_owned(), task, bytes, ttl, now)
        {
            self.end_ext_task_entries(task_id, task);
            return Err(self.refusal_frame(reply_to, refusal));
        }
        Ok(changed)
    }

    pub(super) fn put_back_ext_task(&self, task_id: &str, task: ExtTask, now: Instant) {
        let bytes = ext_task_bytes(task_id, &task);
        if let Err((task, _)) = lock(&self.state).flights.put_ext_task(
            task_id.to_owned(),
            task,
            bytes,
            TASK_TTL_DEFAULT,
            now,
        ) {
            self.end_ext_task_entries(task_id, task);
        }
    }

    /// The task ended (terminal status, cancelled by the client): its
    /// unanswered consent is abandoned (nothing stored, budget refunded).
    pub(super) fn end_ext_task(&self, task_id: &str) {
        let task = lock(&self.state).flights.take_ext_task(task_id);
        if let Some(task) = task {
            self.end_ext_task_entries(task_id, task);
        }
    }

    pub(super) fn end_ext_task_entries(&self, task_id: &str, task: ExtTask) {
        for (key, input) in task.pending {
            if let Awaiting::Consent(pending) = input.entry.awaiting {
                self.abandon(
                    pending,
                    &Value::from(format!("{task_id}/{key}")),
                    None,
                    "inputRequests",
                );
            }
        }
    }

    /// A client `tasks/get`, `tasks/update` or `tasks/cancel` (2026-07-28
    /// tasks extension). `tasks/get` is remembered so its answer is read;
    /// `tasks/update` settles exactly the entries it answers (others stay
    /// pending); `tasks/cancel` abandons the task's unanswered consent.
    pub(super) fn ext_task_call(&self, raw: &[u8], line: &[u8], call_id: &Value, method: &str) {
        self.record_unrecorded();
        let Ok(mut value) = serde_json::from_slice::<Value>(line) else {
            self.send_server(raw);
            return;
        };
        // Tracked whatever the task id's type: the answer is read.
        let task_id = value
            .pointer("/params/taskId")
            .map(task_key)
            .unwrap_or_default();
        match method {
            "tasks/get" => {
                let held = lock(&self.state).flights.poll(call_key(call_id), task_id);
                if held.is_err() {
                    // Its answer could not be read: it does not go out.
                    self.send_client(&self.refusal_frame(Some(call_id), Refusal::Full));
                } else {
                    self.send_server(raw);
                }
            }
            "tasks/cancel" => {
                self.end_ext_task(&task_id);
                self.send_server(raw);
            }
            _ => {
                let Some(mut task) = lock(&self.state).flights.take_ext_task(&task_id) else {
                    self.send_server(raw);
                    return;
                };
                let now = self.now();
                let mut refusal: Option<Vec<u8>> = None;
                let mut changed = false;
                let keys: Vec<String> = task.pending.keys().cloned().collect();
                for key in keys {
                    let Some(response) = value
                        .pointer_mut("/params/inputResponses")
                        .and_then(|r| r.get_mut(&key))
                        .filter(|r| r.is_object())
                    else {
                        continue;
                    };
                    let Some(input) = task.pending.remove(&key) else {
                        continue;
                    };
                    task.answered.insert(key);
                    let InputEntry {
                        awaiting,
                        id,
                        deadline,
                        requested,
                    } = input.entry;
                    let grant = match awaiting {
                        Awaiting::Consent(consent) => match consent.approve() {
                            Ok(grant) => {
                                self.audit_consent_grant("task", &id, &requested, &grant);
                                grant
                            }
                            Err(error) => {
                                self.log.line(format_args!(
                                    "recording the client's consent answer failed: {error}"
                                ));
                                continue;
                            }
                        },
                        Awaiting::Grant(grant) => grant,
                    };
                    if deadline.is_some_and(|d| now > d) {
                        match grant.deadline_missed() {
                            Ok(denial) => {
                                self.audit_denial(
                                    "deadline",
                                    "task",
                                    Some(&id),
                                    &requested,
                                    &denial,
                                );
                                refusal.get_or_insert_with(|| denial.local_error(Some(call_id)));
                            }
                            Err(error) => {
                                refusal.get_or_insert_with(|| error.reply(Some(call_id)));
                            }
                        }
                        continue;
                    }
                    match self.settle(grant, response, "task", &id, &requested) {
                        Settled::Annotated(annotated) => changed |= annotated,
                        Settled::Withheld(denial) => {
                            refusal.get_or_insert_with(|| denial.local_error(Some(call_id)));
                        }
                        Settled::Failed(error) => {
                            refusal.get_or_insert_with(|| error.reply(Some(call_id)));
                        }
                    }
                }
                self.put_back_ext_task(&task_id, task, now);
                if let Some(refusal) = refusal {
                    self.send_client(&refusal);
                } else if changed {
                    self.send_server(value.to_string().as_bytes());
                } else {
                    self.send_server(raw);
                }
            }
        }
    }
}

/// Whether a response's result is a task that is not over (no terminal
/// `status`) and asks, among its `inputRequests`, for sampling: an entry
/// whose `method` is `sampling/createMessage`, in an object of entries or,
/// should a server send one, an array.
fn undecided_sampling(response: &Value) -> bool {
    let terminal = response
        .pointer("/result/status")
        .and_then(Value::as_str)
        .is_some_and(is_terminal);
    let sampling = |entry: &Value| {
        entry.get("method").and_then(Value::as_str) == Some(jsonrpc::SAMPLING_METHOD)
    };
    let asks = match response.pointer("/result/inputRequests") {
        Some(Value::Object(entries)) => entries.values().any(sampling),
        Some(Value::Array(entries)) => entries.iter().any(sampling),
        _ => false,
    };
    !terminal && asks
}
