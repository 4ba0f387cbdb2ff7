//! One proxied connection: what happens to each line in each direction.
//!
//! Everything is forwarded byte for byte except what the policy must see:
//!
//! * server → client `sampling/createMessage` requests are decided; a denial
//!   is answered to the server here, an allow or trim is forwarded (a trim
//!   with the lowered params) and remembered until the client answers;
//! * server → client results with `resultType: "input_required"` (MCP
//!   2026-07-28) have each sampling entry decided; a denial answers the
//!   client's own pending call;
//! * every server → client request is tracked by its id until the client
//!   answers it (`inflight.rs` is the state machine): a second request with
//!   an id still in flight is answered `-32600` and not forwarded, and a
//!   request the server cancelled still takes the client's answer (which
//!   then goes nowhere);
//! * client → server answers to sampling requests are settled (token
//!   usage), annotated (`_meta` after a trim), or, for a consent request the
//!   user refused (`-1`), replaced by the policy's `user.denied` frame; any
//!   other client error stores nothing and refunds the reservation;
//! * a sampling request the client runs as a task (MCP 2025-11-25 tasks) is
//!   followed to the task's terminal state, which decides;
//! * client → server retries carrying `inputResponses` are treated the same way.
//!
//! The proxy never originates a request, so it never allocates an id: every
//! frame it writes answers an id the other side chose (a server's request id
//! towards the server, the client's own call id towards the client), or is a
//! notification. Malformed server frames are answered per JSON-RPC and not
//! forwarded; malformed client frames are forwarded for the server to answer.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mcpolicy_runtime::Engine;
use mcpolicy_runtime::alert::Alert;
use mcpolicy_runtime::engine::{
    Answer, ClientContext, Decision, Denial, Grant, InputOutcome, PendingConsent,
};
use mcpolicy_runtime::frame;
use mcpolicy_runtime::jsonrpc;
use mcpolicy_runtime::request::{self, SamplingRequest};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::inflight::{Awaiting, Flight, InFlight, Refusal, Sampling, Task, TaskMethod, TaskState};
use super::log::{Audit, Entry, Log, alert_message};

/// A line sink: the child's stdin or the proxy's stdout.
pub type Sink = Box<dyn Write + Send>;

/// The `_meta` key under which MCP 2026-07-28 clients declare their
/// capabilities on each request.
const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// A 2026-07-28 `inputRequests` entry forwarded to the client.
#[derive(Debug)]
struct Pending {
    awaiting: Awaiting,
    /// The entry's key.
    id: Value,
    deadline: Option<Instant>,
    requested: Map<String, Value>,
}

#[derive(Debug, Default)]
struct State {
    /// Every server request forwarded to the client, and every task followed.
    flights: InFlight,
    /// MCP 2026-07-28 entries forwarded to the client, by (requestState, key).
    inputs: HashMap<(String, String), Pending>,
}

/// How the client answered a sampling request (or its task's result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// A result: the completion (approval, when consent was asked).
    Result,
    /// The MCP user rejection (`-1`).
    Rejected,
    /// Any other error, or neither a result nor an error: the client failed,
    /// which is not a decision. The code as the client wrote it (logged only).
    Failed(Option<i64>),
}

impl Reply {
    fn of(value: &Value) -> Reply {
        if value.get("result").is_some() {
            return Reply::Result;
        }
        match value
            .get("error")
            .map(|e| e.get("code").and_then(Value::as_i64))
        {
            // The MCP user rejection: the only client error that is a refusal.
            Some(Some(code)) if code == i64::from(jsonrpc::USER_REJECTED) => Reply::Rejected,
            Some(code) => Reply::Failed(code),
            None => Reply::Failed(None),
        }
    }
}

/// The members of a server frame the proxy routes on. Derived
/// deserialisation refuses duplicate `method`/`id`/`result` members, so a
/// frame cannot show the proxy one method and the client another.
#[derive(Deserialize)]
struct ServerProbe<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    result: Option<ResultProbe<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

/// `result.resultType` when `result` is an object; any other `result`
/// (JSON-RPC allows any value) probes as `None` rather than failing.
struct ResultProbe<'a> {
    result_type: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for ResultProbe<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = ResultProbe<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON-RPC result")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut result_type: Option<Option<Cow<'a, str>>> = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "resultType" {
                        if result_type.is_some() {
                            return Err(serde::de::Error::duplicate_field("resultType"));
                        }
                        result_type = Some(map.next_value::<Option<Cow<'de, str>>>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ResultProbe {
                    result_type: result_type.flatten(),
                })
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ResultProbe { result_type: None })
            }

            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(ResultProbe { result_type: None })
            }

            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ResultProbe { result_type: None })
            }

            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ResultProbe { result_type: None })
            }

            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ResultProbe { result_type: None })
            }

            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ResultProbe { result_type: None })
            }

            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ResultProbe { result_type: None })
            }
        }

        deserializer.deserialize_any(Visitor(std::marker::PhantomData))
    }
}

/// The members of a client frame the proxy routes on.
#[derive(Deserialize)]
struct ClientProbe<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    params: Option<ParamsProbe>,
    #[serde(default)]
    result: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ParamsProbe {
    #[serde(default, rename = "inputResponses")]
    input_responses: Option<IgnoredAny>,
}

/// The text of an id, as the key of the pending maps.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// A line without its terminator.
fn body(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    raw.strip_suffix(b"\r").unwrap_or(raw)
}

/// Tokens the client reports for a completion: `usage` or `_meta.usage` of
/// the result, as `totalTokens`, or input + output tokens (camelCase,
/// snake_case or the prompt/completion spelling). `None` when the client
/// says nothing: the reservation (the request's `maxTokens`) stays counted.
pub fn usage_tokens(result: &Value) -> Option<u64> {
    let usage = result
        .get("usage")
        .or_else(|| result.get("_meta").and_then(|meta| meta.get("usage")))?;
    let number = |names: &[&str]| names.iter().find_map(|n| usage.get(*n)?.as_u64());
    if let Some(total) = number(&["totalTokens", "total_tokens"]) {
        return Some(total);
    }
    let input = number(&[
        "inputTokens",
        "input_tokens",
        "promptTokens",
        "prompt_tokens",
    ]);
    let output = number(&[
        "outputTokens",
        "output_tokens",
        "completionTokens",
        "completion_tokens",
    ]);
    match (input, output) {
        (None, None) => None,
        (input, output) => Some(input.unwrap_or(0).saturating_add(output.unwrap_or(0))),
    }
}

/// A proxied connection between one client and one server.
pub struct Session {
    engine: Engine,
    server_id: String,
    to_server: Mutex<Option<Sink>>,
    to_client: Mutex<Sink>,
    state: Mutex<State>,
    log: Log,
    audit: Option<Audit>,
    sampling_context: AtomicBool,
    /// A request with a deadline was remembered since the last
    /// [`Session::take_new_deadline`]: the deadline thread must recompute.
    new_deadline: AtomicBool,
    /// The monotonic clock of deadlines and lingers (a test steps its own).
    monotonic: Box<dyn Fn() -> Instant + Send + Sync>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("server_id", &self.server_id)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Session {
    /// A session deciding for `server_id`, writing to the server and the client.
    pub fn new(
        engine: Engine,
        server_id: impl Into<String>,
        to_server: Sink,
        to_client: Sink,
        log: Log,
        audit: Option<Audit>,
    ) -> Session {
        Session {
            engine,
            server_id: server_id.into(),
            to_server: Mutex::new(Some(to_server)),
            to_client: Mutex::new(to_client),
            state: Mutex::new(State::default()),
            log,
            audit,
            sampling_context: AtomicBool::new(false),
            new_deadline: AtomicBool::new(false),
            monotonic: Box::new(Instant::now),
        }
    }

    /// Replaces the monotonic clock deadlines and lingers are measured on
    /// (tests step it; the proxy uses [`Instant::now`]).
    pub fn with_monotonic(mut self, clock: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        self.monotonic = Box::new(clock);
        self
    }

    fn now(&self) -> Instant {
        (self.monotonic)()
    }

    /// The engine deciding for this session.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The server id the policy knows the server by.
    pub fn server_id(&self) -> &str {
        &self.server_id
    }

    /// The diagnostic log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    fn ctx(&self) -> ClientContext {
        ClientContext::with_sampling_context(self.sampling_context.load(Ordering::Relaxed))
    }

    fn write(&self, sink: &mut dyn Write, text: &[u8]) -> std::io::Result<()> {
        sink.write_all(text)?;
        if text.last() != Some(&b'\n') {
            sink.write_all(b"\n")?;
        }
        sink.flush()
    }

    fn send_server(&self, text: &[u8]) {
        let mut guard = lock(&self.to_server);
        let Some(sink) = guard.as_mut() else {
            return;
        };
        if let Err(error) = self.write(sink.as_mut(), text) {
            self.log
                .line(format_args!("writing to the server failed: {error}"));
        }
    }

    fn send_client(&self, text: &[u8]) {
        let mut sink = lock(&self.to_client);
        if let Err(error) = self.write(sink.as_mut(), text) {
            self.log
                .line(format_args!("writing to the client failed: {error}"));
        }
    }

    /// Answers the server's last line with a JSON-RPC error (id `null`)
    /// instead of forwarding it, e.g. a line too long to hold.
    pub fn reject_server_line(&self, code: i32, message: &str) {
        self.send_server(&frame::request_error_response(None, code, message));
    }

    /// The client closed its side: close the server's stdin so it can exit.
    pub fn close_server_input(&self) {
        lock(&self.to_server).take();
    }

    /// Shows an alert the engine raised: a warning in the log and an
    /// `alert` audit line, once (the engine raises each once per window).
    fn raise(&self, alert: Option<&Alert>) {
        let Some(alert) = alert else {
            return;
        };
        self.log.line(alert_message(alert));
        if let Some(audit) = &self.audit {
            audit.alert(alert);
        }
    }

    fn audit(&self, entry: &Entry<'_>) {
        if let Some(audit) = &self.audit {
            audit.write(&self.server_id, entry);
        }
    }

    /// The identity of a denied request, for the audit only (a denial does
    /// not carry it; computing it costs a few microseconds).
    fn identity_for_audit(&self, params: &Map<String, Value>) -> Option<String> {
        self.audit
            .as_ref()
            .map(|_| self.engine.identity(&self.server_id, params).into_string())
    }

    fn audit_denial(
        &self,
        event: &str,
        via: &str,
        id: Option<&Value>,
        params: &Map<String, Value>,
        denial: &Denial,
    ) {
        if self.audit.is_none() {
            return;
        }
        let identity = self.identity_for_audit(params);
        let cause = denial.cause();
        self.audit(&Entry {
            event,
            via,
            id,
            identity: identity.as_deref(),
            outcome: "deny",
            reason: Some(denial.reason()),
            replayed: denial.replayed(),
            represented: Some(denial.represented()),
            requested: Some(params),
            applied: None,
            code: Some(denial.code()),
            cause: Some(&cause),
            trims: None,
        });
    }

    /// Audits a consent the client gave: what was asked, what goes on.
    fn audit_consent_grant(
        &self,
        via: &str,
        id: &Value,
        requested: &Map<String, Value>,
        grant: &Grant,
    ) {
        if self.audit.is_none() {
            return;
        }
        let applied = grant.params(requested);
        self.audit(&grant_entry("consent", via, id, requested, grant, &applied));
    }

    // ------------------------------------------------------------ server → client

    /// May an error frame for an unreadable server frame carry `id`? Only
    /// when no request of that id is in flight: the server would take the
    /// answer for that request's, and the answers would cross.
    fn answerable(&self, id: Option<&Value>) -> bool {
        id.is_none_or(|id| lock(&self.state).flights.state(&id_key(id)).is_none())
    }

    /// Handles one line read from the server (with or without its newline).
    pub fn from_server(&self, raw: &[u8]) {
        let line = body(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
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
                if contains(line, br#""sampling/createMessage""#)
                    && let Err(rejection) = request::parse_sampling(line)
                    && self.answerable(rejection.id.as_ref())
                {
                    self.log.line(format_args!(
                        "server sent an unreadable sampling request ({error}); answered {}, not forwarded",
                        rejection.code()
                    ));
                    self.send_server(&rejection.reply());
                    return;
                }
                self.log.line(format_args!(
                    "server sent a frame that is {what} ({error}); answered {code}, not forwarded"
                ));
                let message = format!("Invalid frame from the server: {what} ({error})");
                // Only a request is answered with its id; a response's id
                // names one of the client's calls.
                let id = contains(line, br#""method""#)
                    .then(|| request::recover_id(line))
                    .flatten()
                    .filter(|id| self.answerable(Some(id)));
                self.send_server(&frame::request_error_response(id.as_ref(), code, &message));
                return;
            }
        };
        if probe.method.is_some() && (probe.result.is_some() || probe.error.is_some()) {
            // A request and a response at once: the client may read it as
            // either, and as a response its `inputRequests` would go on
            // undecided. It is neither, so it does not pass.
            let id = probe.id.as_ref().filter(|id| self.answerable(Some(id)));
            self.log.line(format_args!(
                "server sent a frame with both `method` and `result`/`error`; answered -32600, not forwarded"
            ));
            self.send_server(&frame::request_error_response(
                id,
                jsonrpc::INVALID_REQUEST,
                "Invalid frame from the server: a message is a request or a response, not both",
            ));
            return;
        }
        match (probe.method.as_deref(), &probe.id) {
            (Some("notifications/cancelled"), _) => {
                self.server_cancelled(line);
                self.send_client(raw);
            }
            (Some(method), Some(id)) => {
                // `received`: an id the client has not answered yet cannot
                // name a second request, whatever its method.
                let key = id_key(id);
                let admitted = lock(&self.state).flights.admit(&key, self.now());
                if let Err(refusal) = admitted {
                    self.log.line(format_args!(
                        "server sent {method} with id {key}, {}: answered -32600, not forwarded",
                        match refusal {
                            Refusal::InFlight => "still in flight",
                            Refusal::Full => "with too many requests in flight",
                        }
                    ));
                    self.send_server(&frame::request_error_response(
                        Some(id),
                        jsonrpc::INVALID_REQUEST,
                        refusal.message(),
                    ));
                    return;
                }
                if method == jsonrpc::SAMPLING_METHOD {
                    self.sampling_request(raw, line, key);
                } else {
                    self.task_or_passthrough(raw, line, method, key);
                }
            }
            (Some(jsonrpc::SAMPLING_METHOD), None) => {
                self.sampling_request(raw, line, String::new())
            }
            (Some(_), None) => self.send_client(raw),
            (None, _) => {
                let input_required = probe.result.as_ref().and_then(|r| r.result_type.as_deref())
                    == Some("input_required");
                match (&probe.id, input_required) {
                    (Some(id), true) => self.input_required(raw, line, id),
                    _ => self.send_client(raw),
                }
            }
        }
    }

    /// A server request other than sampling: tracked so its id cannot be
    /// reused before the client answers; a `tasks/*` request about a task
    /// the proxy follows is tracked as such.
    fn task_or_passthrough(&self, raw: &[u8], line: &[u8], method: &str, key: String) {
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
        lock(&self.state).flights.forward(key, flight);
        self.send_client(raw);
    }

    /// The server gave up on a request: it stays tracked as cancelled (the
    /// client may still answer, and a refusal still counts), and nothing
    /// the client sends for it reaches the server.
    fn server_cancelled(&self, line: &[u8]) {
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if let Some(id) = value.pointer("/params/requestId") {
            let now = self.now();
            lock(&self.state).flights.cancel(&id_key(id), now);
        }
    }

    /// `decided`: a sampling request; `key` is its id's text (empty for a
    /// request without id, which is decided but not tracked).
    fn sampling_request(&self, raw: &[u8], line: &[u8], key: String) {
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

    fn decided(&self, raw: &[u8], key: String, request: SamplingRequest, decision: Decision) {
        let SamplingRequest {
            id,
            params,
            rewritten,
        } = request;
        let id = id.unwrap_or(Value::Null);
        // Written after the decision's own line, which it is about.
        let alert = decision.alert().cloned();
        self.decided_outcome(raw, key, id, params, rewritten, decision);
        self.raise(alert.as_ref());
    }

    fn decided_outcome(
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
                self.remember(key, id, Awaiting::Grant(grant), deadline, params);
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
                self.remember(key, id, Awaiting::Consent(pending), None, params);
                self.send_client(forward.as_deref().unwrap_or(raw));
            }
        }
    }

    /// `forwarded`: tracks a sampling request sent on to the client.
    fn remember(
        &self,
        key: String,
        id: Value,
        awaiting: Awaiting,
        deadline: Option<Instant>,
        requested: Map<String, Value>,
    ) {
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
            }),
        );
    }

    /// MCP 2026-07-28: a result asking the client for input. `call_id` is
    /// the id of the client's own pending call.
    fn input_required(&self, raw: &[u8], line: &[u8], call_id: &Value) {
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
        let request_state = result
            .get("requestState")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
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
        let mut refusal: Option<Vec<u8>> = None;
        let mut rewrites: Vec<(String, Map<String, Value>)> = Vec::new();
        let mut remembered: Vec<(String, Pending)> = Vec::new();
        for entry in decisions {
            let key = entry.key;
            let key_value = Value::from(key.as_str());
            match entry.outcome {
                InputOutcome::NotSampling => {}
                InputOutcome::Invalid(error) => {
                    self.audit(&Entry {
                        event: "invalid",
                        via: "inputRequests",
                        id: Some(&key_value),
                        outcome: "deny",
                        code: Some(error.code()),
                        ..Entry::default()
                    });
                    refusal.get_or_insert_with(|| {
                        frame::request_error_response(
                            Some(call_id),
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
                    refusal.get_or_insert_with(|| error.reply(Some(call_id)));
                }
                InputOutcome::Decided { request, decision } => {
                    let params = request.params;
                    let alert = decision.alert().cloned();
                    match decision {
                        Decision::Deny(denial) => {
                            self.audit_denial(
                                "decision",
                                "inputRequests",
                                Some(&key_value),
                                &params,
                                &denial,
                            );
                            refusal.get_or_insert_with(|| denial.local_error(Some(call_id)));
                        }
                        Decision::Allow(grant) | Decision::Trim(grant) => {
                            let applied = grant.params(&params);
                            let trimmed = !grant.lowered().is_empty();
                            self.audit(&Entry {
                                replayed: grant.replayed(),
                                ..grant_entry(
                                    "decision",
                                    "inputRequests",
                                    &key_value,
                                    &params,
                                    &grant,
                                    &applied,
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
                                Pending {
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
                                via: "inputRequests",
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
                                Pending {
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
        if let Some(refusal) = refusal {
            // Whoever made the call learns why; the other entries' grants are
            // dropped with their reservations counted (the safe side).
            self.send_client(&refusal);
            return;
        }
        if !remembered.is_empty() {
            let mut state = lock(&self.state);
            for (key, pending) in remembered {
                state.inputs.insert((request_state.clone(), key), pending);
            }
        }
        if rewrites.is_empty() {
            self.send_client(raw);
            return;
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

    // ------------------------------------------------------------ client → server

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
                let key = id_key(id);
                let flight = lock(&self.state).flights.answer(&key);
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
                    && let (Some(task_id), Some(status)) = (
                        value.pointer("/params/taskId").and_then(Value::as_str),
                        value.pointer("/params/status").and_then(Value::as_str),
                    )
                {
                    self.task_status(task_id, status);
                }
                self.send_server(raw);
            }
            (Some(method), _) => {
                if method == "initialize" || contains(line, CLIENT_CAPABILITIES_META.as_bytes()) {
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
    fn note_capabilities(&self, line: &[u8], initialize: bool) {
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
    fn sampling_answered(&self, raw: &[u8], line: &[u8], sampling: Sampling, live: bool) {
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
            let status = task
                .get("status")
                .and_then(Value::as_str)
                .map(str::to_owned);
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
            if let Some(status) = status {
                self.task_status(&task_id, &status);
            }
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
    fn resolve(
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
                Reply::Result => match pending.approve() {
                    Ok(grant) => {
                        self.audit_consent_grant(via, origin, requested, &grant);
                        grant
                    }
                    Err(error) => {
                        // The completion already ran: withholding it spends nothing back.
                        self.log.line(format_args!(
                            "recording the client's consent answer failed: {error}"
                        ));
                        return Forward::Raw;
                    }
                },
                Reply::Rejected => {
                    return match pending.refuse() {
                        Ok(denial) => {
                            self.log.line(format_args!(
                                "client refused request {origin} (code -1): recorded {}",
                                denial.reason()
                            ));
                            self.audit_denial("consent", via, Some(origin), requested, &denial);
                            // The policy's frame, not the client's: a replay of
                            // this identity must send the same bytes.
                            Forward::Replace(denial.reply(Some(reply_to)))
                        }
                        Err(error) => {
                            self.log.line(format_args!(
                                "recording the client's refusal failed: {error}"
                            ));
                            Forward::Replace(error.reply(Some(reply_to)))
                        }
                    };
                }
                Reply::Failed(code) => {
                    self.abandon(pending, origin, code);
                    return Forward::Raw;
                }
            },
            Awaiting::Grant(grant) => grant,
        };
        // A provider failure or a refusal of an allowed request: the server
        // learns it from the client's own error; the reservation stays.
        let Some(result) = value.get_mut("result") else {
            return Forward::Raw;
        };
        // A trim's result goes on re-written even when `_meta` could not be
        // added (the result is not an object): as it always has.
        let trimmed = grant.is_trim();
        self.settle(grant, result);
        if trimmed {
            Forward::Replace(value.to_string().into_bytes())
        } else {
            Forward::Raw
        }
    }

    /// The client failed a consent request (an error other than the user's
    /// rejection, or a task that ended without result): not a decision.
    /// Nothing is stored and the reserved budget is refunded; the server
    /// receives the client's own answer.
    fn abandon(&self, pending: PendingConsent, origin: &Value, code: Option<i64>) {
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
    fn task_answered(
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
            if let Some(status) = value.pointer("/result/status").and_then(Value::as_str) {
                self.task_status(task_id, status);
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
            TaskState::Running(awaiting) => self.resolve(
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

    /// A followed task reported `status` (a `tasks/get` or `tasks/cancel`
    /// answer, a `notifications/tasks/status`, or the creation reply).
    /// `completed` approves, `failed` refuses (2025-11-25 tasks carry no
    /// error code: a failed consent task is the user's refusal, the safe
    /// side), `cancelled` abandons.
    fn task_status(&self, task_id: &str, status: &str) {
        if !matches!(status, "completed" | "failed" | "cancelled") {
            return;
        }
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
            ("failed", TaskState::Running(Awaiting::Consent(pending))) => match pending.refuse() {
                Ok(denial) => {
                    self.log.line(format_args!(
                        "task {task_id} of request {} failed: recorded {}",
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
                Err(error) => {
                    self.log.line(format_args!(
                        "recording the refusal of task {task_id} failed: {error}"
                    ));
                    return;
                }
            },
            ("cancelled", TaskState::Running(Awaiting::Consent(pending))) => {
                self.abandon(pending, &task.origin, None);
                return;
            }
            // A task under a grant that failed or was cancelled: nothing to
            // settle, the reservation stays.
            ("failed" | "cancelled", TaskState::Running(Awaiting::Grant(_))) => return,
            // Already decided: a later status changes nothing.
            (_, state) => state,
        };
        lock(&self.state).flights.put_task(task_id.to_owned(), task);
    }

    /// Completes the grant with the token usage the result reports,
    /// annotates the result (`_meta` after a trim), and warns when the
    /// client ran a model outside the block's `models` (the proxy trims
    /// hints but cannot choose the client's model; the completion has run,
    /// so it is not withheld). A result that reports no usage leaves the
    /// grant's reservation counted (the grant is dropped, the safe side).
    /// Returns whether `_meta` was written.
    fn settle(&self, grant: Grant, result: &mut Value) -> bool {
        let outside = result
            .get("model")
            .and_then(Value::as_str)
            .filter(|model| !grant.model_allowed(model))
            .map(|model| {
                let allowed: Vec<&str> = grant.allowed_models().into_iter().flatten().collect();
                format!("warning: the client ran model `{model}`, outside the policy's `models` {allowed:?}")
            });
        let tokens = usage_tokens(result);
        let annotated = grant.is_trim() && grant.annotate(result);
        if let Some(tokens) = tokens
            && let Err(error) = grant.complete(tokens)
        {
            self.log
                .line(format_args!("settling {tokens} tokens failed: {error}"));
        }
        if let Some(warning) = outside {
            self.log.line(warning);
        }
        annotated
    }

    /// MCP 2026-07-28: the client retries its call with `inputResponses`.
    fn input_responses(&self, raw: &[u8], line: &[u8], call_id: Option<&Value>) {
        let Ok(mut value) = serde_json::from_slice::<Value>(line) else {
            self.send_server(raw);
            return;
        };
        let request_state = value
            .pointer("/params/requestState")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut pending: Vec<(String, Pending)> = {
            let mut state = lock(&self.state);
            let keys: Vec<(String, String)> = state
                .inputs
                .keys()
                .filter(|(s, _)| *s == request_state)
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|k| state.inputs.remove(&k).map(|p| (k.1, p)))
                .collect()
        };
        if pending.is_empty() {
            self.send_server(raw);
            return;
        }
        pending.sort_by(|a, b| a.0.cmp(&b.0));
        // The session's clock, as for every other deadline: a test steps it.
        let now = self.now();
        let mut changed = false;
        let mut refusal: Option<Vec<u8>> = None;
        for (key, entry) in pending {
            let Pending {
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
                Awaiting::Consent(consent) => match consent.refuse() {
                    Ok(denial) => {
                        // No response for the entry: the client declined it.
                        self.audit_denial(
                            "consent",
                            "inputRequests",
                            Some(&id),
                            &requested,
                            &denial,
                        );
                        continue;
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
            changed |= self.settle(grant, response);
        }
        if let Some(refusal) = refusal {
            // The late completion never reaches the server.
            self.send_client(&refusal);
        } else if changed {
            self.send_server(value.to_string().as_bytes());
        } else {
            self.send_server(raw);
        }
    }

    // ------------------------------------------------------------ deadlines

    /// Whether a request with a deadline was remembered since the last call.
    pub fn take_new_deadline(&self) -> bool {
        self.new_deadline.swap(false, Ordering::AcqRel)
    }

    /// The earliest deadline of a request or task the client has not answered yet.
    pub fn next_deadline(&self) -> Option<Instant> {
        lock(&self.state).flights.next_deadline()
    }

    /// Answers every request whose deadline passed by `now` with the
    /// policy's deadline denial, tells the client to stop
    /// (`notifications/cancelled`), and drops its answer when it comes. A
    /// task past its deadline is recorded the same way; its `tasks/result`
    /// is answered with the denial (the proxy sends no request of its own,
    /// so it cannot cancel the task).
    pub fn expire(&self, now: Instant) {
        let swept = lock(&self.state).flights.sweep(now);
        for lapsed in &swept.lapsed {
            self.log.line(format_args!(
                "stopped waiting for the client's answer to {lapsed}"
            ));
        }
        for sampling in swept.expired {
            let Sampling {
                id,
                requested,
                awaiting: Awaiting::Grant(grant),
                ..
            } = sampling
            else {
                continue;
            };
            let id = &id;
            match grant.deadline_missed() {
                Ok(denial) => {
                    self.log.line(format_args!(
                        "request {id} missed its deadline: answered {}",
                        denial.reason()
                    ));
                    self.audit_denial("deadline", "request", Some(id), &requested, &denial);
                    self.send_server(&denial.reply(Some(id)));
                }
                Err(error) => {
                    self.log
                        .line(format_args!("request {id} missed its deadline: {error}"));
                    self.send_server(&error.reply(Some(id)));
                }
            }
            let cancel = serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "policy.deadline: the policy's deadline passed"},
            });
            self.send_client(cancel.to_string().as_bytes());
        }
        for (task_id, task) in swept.missed {
            let Task {
                origin,
                requested,
                state: TaskState::Running(Awaiting::Grant(grant)),
                deadline,
                until,
            } = task
            else {
                continue;
            };
            match grant.deadline_missed() {
                Ok(denial) => {
                    self.log.line(format_args!(
                        "task {task_id} of request {origin} missed its deadline: recorded {}",
                        denial.reason()
                    ));
                    self.audit_denial("deadline", "task", Some(&origin), &requested, &denial);
                    let task = Task {
                        origin,
                        requested,
                        state: TaskState::Missed(denial),
                        deadline,
                        until,
                    };
                    lock(&self.state).flights.put_task(task_id, task);
                }
                Err(error) => {
                    self.log
                        .line(format_args!("task {task_id} missed its deadline: {error}"));
                }
            }
        }
    }
}

/// What the server receives for a client's answer.
enum Forward {
    /// The client's bytes, unchanged.
    Raw,
    /// These bytes instead (the policy's frame, or the annotated result).
    Replace(Vec<u8>),
}

/// A `sampling/createMessage` request with new params and the server's id.
fn rewrite_request(id: &Value, params: Map<String, Value>) -> Vec<u8> {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": jsonrpc::SAMPLING_METHOD,
        "params": params,
    })
    .to_string()
    .into_bytes()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The audit line for a request let through: what was asked, what goes on
/// (`replayed` is left `false` for the caller to set).
fn grant_entry<'a>(
    event: &'a str,
    via: &'a str,
    id: &'a Value,
    requested: &'a Map<String, Value>,
    grant: &'a Grant,
    applied: &'a Map<String, Value>,
) -> Entry<'a> {
    Entry {
        event,
        via,
        id: Some(id),
        identity: Some(grant.identity()),
        outcome: if grant.lowered().is_empty() {
            "allow"
        } else {
            "trim"
        },
        requested: Some(requested),
        applied: Some(applied),
        cause: Some(grant.cause()),
        trims: Some(grant.annotations()),
        ..Entry::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::sync::Arc;

    use mcpolicy_runtime::clock::SystemClock;
    use mcpolicy_runtime::store::MemoryStore;
    use serde_json::json;

    use super::*;
    use mcpolicy_compiler::db::{self, Database, SourceText};

    /// One server per behaviour; the fuzz target (`fuzz/src/proxy.rs`)
    /// runs the same policy.
    const POLICY: &str = include_str!("../tests/fixtures/session.mcpolicy");

    use crate::capture::Captured as Buf;

    struct Rig {
        session: Session,
        server: Buf,
        client: Buf,
        audit: Buf,
    }

    fn rig(server_id: &str) -> Rig {
        let db = Database::default();
        let source = SourceText::new(&db, "t.mcpolicy".into(), POLICY.into());
        let table = db::lower_file(&db, source).clone().unwrap();
        let policy = mcpolicy_runtime::Policy::verify(table).unwrap();
        let engine = Engine::new(policy, Arc::new(MemoryStore::new()), Arc::new(SystemClock));
        let (server, client, audit) = (Buf::default(), Buf::default(), Buf::default());
        let session = Session::new(
            engine,
            server_id,
            Box::new(server.clone()),
            Box::new(client.clone()),
            Log::to(Box::new(std::io::sink()), server_id),
            Some(Audit::to(Box::new(audit.clone()))),
        );
        Rig {
            session,
            server,
            client,
            audit,
        }
    }

    fn parse(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    const SAMPLE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":100}}"#;

    #[test]
    fn non_sampling_frames_pass_byte_for_byte() {
        let rig = rig("any");
        let odd = "{ \"jsonrpc\" : \"2.0\", \"id\":1 ,\"method\":\"roots/list\" }\n";
        rig.session.from_server(odd.as_bytes());
        assert_eq!(rig.client.take(), [odd.trim_end()]);
        let from_client = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"roots\":[]}}  \n";
        rig.session.from_client(from_client.as_bytes());
        assert_eq!(rig.server.take(), [from_client.trim_end_matches('\n')]);
        // JSON-RPC allows any result; only MCP's objects are probed.
        for result in [
            "5",
            "[1,{\"a\":2}]",
            "null",
            "\"text\"",
            "{\"resultType\":\"complete\"}",
        ] {
            let frame = format!("{{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{result}}}");
            rig.session.from_server(frame.as_bytes());
            assert_eq!(rig.client.take(), [frame]);
        }
        let twice = r#"{"jsonrpc":"2.0","id":9,"result":{"resultType":"complete","resultType":"input_required"}}"#;
        rig.session.from_server(twice.as_bytes());
        assert!(rig.client.take().is_empty());
        assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
        assert!(!rig.session.take_new_deadline());
        // Garbage from the client is the server's to answer.
        rig.session.from_client(b"not json at all\n");
        assert_eq!(rig.server.take(), ["not json at all"]);
        assert!(rig.audit.take().is_empty());
    }

    #[test]
    fn malformed_server_frames_are_answered_not_forwarded() {
        let rig = rig("any");
        rig.session.from_server(b"{not json\n");
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["error"]["code"], -32700);
        assert_eq!(answer["id"], Value::Null);
        // A batch could hide a sampling request from a proxy that only reads objects.
        rig.session.from_server(format!("[{SAMPLE}]\n").as_bytes());
        assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
        // Two `method` members: the client might read the second one.
        rig.session.from_server(
            br#"{"jsonrpc":"2.0","id":3,"method":"roots/list","method":"sampling/createMessage","params":{}}"#,
        );
        assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
        assert!(rig.client.take().is_empty());
    }

    /// Issue 11 item 16 through the proxy: a frame the probe cannot read is
    /// still answered with its id when the id can be read and names no
    /// request in flight.
    #[test]
    fn unreadable_frames_are_answered_with_their_readable_id() {
        let rig = rig("asks");
        // Two `method` members hiding a sampling request: the runtime's
        // refusal, with the id.
        let twice = br#"{"jsonrpc":"2.0","id":41,"method":"ping","method":"sampling/createMessage","params":{}}"#;
        rig.session.from_server(twice);
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 41);
        assert_eq!(answer["error"]["code"], -32600);
        // Any request the probe refuses (two `method` members): its id.
        let twice_ping = br#"{"jsonrpc":"2.0","id":"p","method":"ping","method":"roots/list"}"#;
        rig.session.from_server(twice_ping);
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], "p");
        assert!(rig.client.take().is_empty());
        // An id still in flight is never echoed: the answers would cross.
        rig.session.from_server(sample(5, "a").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        let twice_five = br#"{"jsonrpc":"2.0","id":5,"method":"ping","method":"roots/list"}"#;
        rig.session.from_server(twice_five);
        assert_eq!(parse(&rig.server.take()[0])["id"], Value::Null);
    }

    /// Found by the `proxy` fuzz target: a frame with `method` and an
    /// `input_required` result was routed as a request and its sampling
    /// entries reached the client undecided under `sampling off`.
    #[test]
    fn a_frame_that_is_request_and_response_at_once_does_not_pass() {
        let rig = rig("off");
        let both = br#"{"jsonrpc":"2.0","id":1,"method":"allServers","result":{"resultType":"input_required","requestState":"s1","inputRequests":{"k0":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}}}}"#;
        rig.session.from_server(both);
        assert!(rig.client.take().is_empty(), "never reaches the client");
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 1);
        assert_eq!(answer["error"]["code"], -32600);
        let with_error =
            br#"{"jsonrpc":"2.0","id":2,"method":"ping","error":{"code":1,"message":"x"}}"#;
        rig.session.from_server(with_error);
        assert!(rig.client.take().is_empty());
        assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    }

    /// Issue 11 item 17 through the proxy: an allowed request whose
    /// `maxTokens` is spelt `9e2` or `-0` goes on with the integer.
    #[test]
    fn an_integral_max_tokens_goes_on_as_an_integer() {
        let rig = rig("any");
        for (spelt, integer) in [("9e2", 900), ("-0", 0), ("100.0", 100)] {
            let request = SAMPLE.replace(r#""maxTokens":100"#, &format!(r#""maxTokens":{spelt}"#));
            rig.session.from_server(request.as_bytes());
            let forwarded = rig.client.take();
            assert_eq!(forwarded.len(), 1, "{spelt}");
            assert!(
                forwarded[0].contains(&format!(r#""maxTokens":{integer}"#)),
                "{spelt}: {}",
                forwarded[0]
            );
            rig.session.from_client(
                br#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m"}}"#,
            );
            rig.server.take();
        }
        // A plain integer still goes on byte for byte.
        rig.session.from_server(SAMPLE.as_bytes());
        assert_eq!(rig.client.take(), [SAMPLE.to_owned()]);
    }

    #[test]
    fn an_escaped_method_name_is_still_decided() {
        let rig = rig("off");
        let escaped = SAMPLE.replace("sampling/createMessage", "sampling\\/createMessage");
        rig.session.from_server(escaped.as_bytes());
        assert!(rig.client.take().is_empty(), "never reaches the client");
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 7);
        assert_eq!(
            answer["error"]["data"]["reason"],
            "policy.sampling_disabled"
        );
    }

    #[test]
    fn an_invalid_sampling_request_is_answered_with_its_id() {
        let rig = rig("any");
        rig.session.from_server(
            br#"{"jsonrpc":"2.0","id":"a","method":"sampling/createMessage","params":{"maxTokens":5}}"#,
        );
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], "a");
        assert_eq!(answer["error"]["code"], -32602);
        assert_eq!(parse(&rig.audit.take()[0])["event"], "invalid");
    }

    #[test]
    fn trim_forwards_lowered_params_and_annotates_the_result() {
        let rig = rig("any");
        let wide = SAMPLE.replace(
            "\"maxTokens\":100",
            "\"maxTokens\":5000,\"includeContext\":\"allServers\"",
        );
        rig.session.from_server(wide.as_bytes());
        let forwarded = parse(&rig.client.take()[0]);
        assert_eq!(forwarded["id"], 7);
        assert_eq!(forwarded["params"]["includeContext"], "thisServer");
        assert_eq!(forwarded["params"]["maxTokens"], 1000);
        rig.session.from_client(
            br#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"ok"},"usage":{"inputTokens":3,"outputTokens":4}}}"#,
        );
        let result = parse(&rig.server.take()[0]);
        assert_eq!(
            result["result"]["_meta"]["context"]["applied"],
            "thisServer"
        );
        assert_eq!(result["result"]["_meta"]["maxTokens"]["requested"], 5000);
        let audit = parse(&rig.audit.take()[0]);
        assert_eq!(audit["outcome"], "trim");
        assert_eq!(
            audit["applied"],
            json!({"includeContext": "thisServer", "maxTokens": 1000, "modelHints": null})
        );
        assert_eq!(
            audit["reasons"],
            json!(["policy.max_scope", "policy.max_tokens"])
        );
        assert_eq!(audit["trims"]["maxTokens"]["requested"], 5000);
    }

    #[test]
    fn a_refused_consent_is_answered_with_the_policy_frame() {
        let rig = rig("asks");
        rig.session.from_server(SAMPLE.as_bytes());
        assert_eq!(rig.client.take(), [SAMPLE], "forwarded unchanged");
        rig.session.from_client(
            br#"{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"User rejected"}}"#,
        );
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], -1);
        assert_eq!(
            answer["error"]["data"],
            json!({"reason": "user.denied", "server": "asks", "retryable": false})
        );
        // The refusal is stored: the same request is refused without the client.
        rig.session.from_server(SAMPLE.as_bytes());
        assert!(rig.client.take().is_empty());
        assert_eq!(parse(&rig.server.take()[0]), answer);
    }

    #[test]
    fn a_missed_deadline_answers_the_server_and_drops_the_late_answer() {
        let rig = rig("slow");
        rig.session.from_server(SAMPLE.as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        assert!(rig.session.take_new_deadline());
        assert!(!rig.session.take_new_deadline());
        assert!(rig.session.next_deadline().is_some());
        rig.session.expire(Instant::now() + Duration::from_secs(1));
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["data"]["reason"], "policy.deadline");
        let cancel = parse(&rig.client.take()[0]);
        assert_eq!(cancel["method"], "notifications/cancelled");
        assert_eq!(cancel["params"]["requestId"], 7);
        assert!(cancel.get("id").is_none(), "a notification: no id of ours");
        rig.session.from_client(
            br#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"late"}}}"#,
        );
        assert!(rig.server.take().is_empty(), "the late answer is dropped");
        assert!(rig.session.next_deadline().is_none());
    }

    /// A monotonic clock that moves only when the test steps it.
    #[derive(Clone)]
    struct Stepped {
        base: Instant,
        offset: Arc<Mutex<Duration>>,
    }

    impl Stepped {
        fn now(&self) -> Instant {
            self.base + *self.offset.lock().unwrap()
        }

        fn step(&self, by: Duration) {
            *self.offset.lock().unwrap() += by;
        }
    }

    /// [`rig`] on a [`Stepped`] clock: deadlines are measured on it alone,
    /// so nothing here depends on how fast the machine runs the test.
    fn stepped_rig(server_id: &str) -> (Rig, Stepped) {
        let clock = Stepped {
            base: Instant::now(),
            offset: Arc::default(),
        };
        let mut rig = rig(server_id);
        let moved = clock.clone();
        rig.session = rig.session.with_monotonic(move || moved.now());
        (rig, clock)
    }

    /// `deadline 10ms`, on the session's clock: an answer 1 ms before the
    /// deadline goes on; at the deadline the server is answered
    /// `policy.deadline` and the client told to stop, not a moment before.
    #[test]
    fn the_deadline_is_kept_to_the_millisecond_on_the_session_clock() {
        let (rig, clock) = stepped_rig("slow");
        let decided_at = clock.now();
        rig.session.from_server(sample(7, "late").as_bytes());
        rig.session.from_server(sample(8, "on time").as_bytes());
        assert_eq!(rig.client.take().len(), 2);
        assert_eq!(
            rig.session.next_deadline(),
            Some(decided_at + Duration::from_millis(10))
        );

        clock.step(Duration::from_millis(9));
        rig.session.expire(clock.now());
        assert!(rig.server.take().is_empty(), "answered before the deadline");
        assert!(rig.client.take().is_empty());
        rig.session
            .from_client(result_frame(8, COMPLETION).as_bytes());
        let on_time = parse(&rig.server.take()[0]);
        assert_eq!(on_time["id"], 8);
        assert!(on_time.get("result").is_some(), "{on_time}");

        clock.step(Duration::from_millis(1));
        rig.session.expire(clock.now());
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["data"]["reason"], "policy.deadline");
        let cancel = parse(&rig.client.take()[0]);
        assert_eq!(cancel["method"], "notifications/cancelled");
        assert_eq!(cancel["params"]["requestId"], 7);

        rig.session
            .from_client(result_frame(7, COMPLETION).as_bytes());
        assert!(rig.server.take().is_empty(), "the late answer is dropped");
        assert!(rig.session.next_deadline().is_none());
    }

    /// MCP 2026-07-28: a response carried by the client's retry is on time
    /// or late by the session's clock too (it once read the wall clock).
    #[test]
    fn an_input_response_is_late_by_the_session_clock() {
        let ask = |state: &str, text: &str| {
            json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
                "inputRequests": {"s": parse(&sample(5, text))},
                "requestState": state}})
            .to_string()
        };
        let retry = |id: u64, state: &str| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "t", "requestState": state,
                "inputResponses": {"s": parse(COMPLETION)}}})
            .to_string()
        };
        let (rig, clock) = stepped_rig("slow");
        rig.session.from_server(ask("r1", "on time").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        clock.step(Duration::from_millis(10));
        rig.session.from_client(retry(2, "r1").as_bytes());
        assert_eq!(
            rig.server.take(),
            [retry(2, "r1")],
            "at the deadline: on time"
        );

        rig.session.from_server(ask("r2", "late").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        clock.step(Duration::from_millis(11));
        rig.session.from_client(retry(3, "r2").as_bytes());
        assert!(
            rig.server.take().is_empty(),
            "the late completion is kept back"
        );
        let refusal = parse(&rig.client.take()[0]);
        assert_eq!(refusal["id"], 3, "the client's own call");
        assert_eq!(refusal["error"]["data"]["reason"], "policy.deadline");
    }

    /// Every decision's audit line carries the engine's cause: the server
    /// block (`null` for `defaults`), the statement, the evaluation step.
    #[test]
    fn audit_lines_carry_the_cause() {
        let cases = [
            (
                "off",
                100,
                json!({"block": "off", "statement": "sampling", "step": 4}),
            ),
            (
                "any",
                5000,
                json!({"block": null, "statement": "max_tokens", "step": 6}),
            ),
            (
                "any",
                100,
                json!({"block": null, "statement": null, "step": 10}),
            ),
            (
                "asks",
                100,
                json!({"block": "asks", "statement": "consent", "step": 9}),
            ),
        ];
        for (server, max_tokens, expected) in cases {
            let rig = rig(server);
            let mut request = parse(SAMPLE);
            request["params"]["maxTokens"] = json!(max_tokens);
            rig.session.from_server(request.to_string().as_bytes());
            let audit = parse(&rig.audit.take()[0]);
            assert_eq!(audit["cause"], expected, "{server}: {audit}");
        }
    }

    #[test]
    fn input_required_denial_answers_the_clients_own_call() {
        let rig = rig("off");
        let result = format!(
            r#"{{"jsonrpc":"2.0","id":42,"result":{{"resultType":"input_required","inputRequests":{{"s":{{"method":"sampling/createMessage","params":{}}}}},"requestState":"r1"}}}}"#,
            parse(SAMPLE)["params"]
        );
        rig.session.from_server(result.as_bytes());
        assert!(rig.server.take().is_empty());
        let answer = parse(&rig.client.take()[0]);
        assert_eq!(answer["id"], 42, "the client's call id, not one of ours");
        assert_eq!(
            answer["error"]["data"]["reason"],
            "policy.sampling_disabled"
        );
    }

    /// An `inputRequests` key spelt `method` beside a sampling entry: a
    /// client reads every key as an entry, so the entry is decided (here
    /// refused under `sampling off`), never forwarded undecided. The fuzzer's
    /// oracle found it once it read the map on its own.
    #[test]
    fn an_input_requests_key_named_method_hides_no_entry() {
        let rig = rig("off");
        let result = json!({"jsonrpc": "2.0", "id": "a", "result": {
            "resultType": "input_required", "requestState": "s",
            "inputRequests": {
                "k0": parse(SAMPLE),
                "method": {"status": "working", "taskId": "t1"}}}});
        rig.session.from_server(result.to_string().as_bytes());
        let answer = parse(&rig.client.take()[0]);
        assert_eq!(answer["id"], "a", "{answer}");
        assert_eq!(
            answer["error"]["data"]["reason"],
            "policy.sampling_disabled"
        );
        assert!(rig.server.take().is_empty());
    }

    #[test]
    fn input_required_trim_is_annotated_in_the_retry() {
        let rig = rig("any");
        let params = json!({"messages": [], "maxTokens": 50, "includeContext": "allServers"});
        let result = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
            "inputRequests": {"s": {"method": "sampling/createMessage", "params": params}},
            "requestState": "r1"}});
        rig.session.from_server(result.to_string().as_bytes());
        let forwarded = parse(&rig.client.take()[0]);
        assert_eq!(
            forwarded["result"]["inputRequests"]["s"]["params"]["includeContext"], "thisServer",
            "the capability rule is 2026-07-28's; this table is 2025-11-25"
        );
        let retry = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "t", "requestState": "r1",
            "inputResponses": {"s": {"role": "assistant", "model": "m",
                                     "content": {"type": "text", "text": "ok"}}}}});
        rig.session.from_client(retry.to_string().as_bytes());
        let sent = parse(&rig.server.take()[0]);
        assert_eq!(
            sent["params"]["inputResponses"]["s"]["_meta"]["context"],
            json!({"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"})
        );
    }

    #[test]
    fn input_required_consent_is_resolved_by_the_retry() {
        let rig = rig("asks");
        let ask = |state: &str, text: &str| {
            json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
                "inputRequests": {"s": {"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
                    "maxTokens": 50}}},
                "requestState": state}})
            .to_string()
        };
        // Approved: the retry carries the response and goes on unchanged.
        rig.session.from_server(ask("r1", "one").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        let retry = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "t", "requestState": "r1", "inputResponses": {"s": {"role": "assistant",
            "model": "m", "content": {"type": "text", "text": "ok"}}}}})
        .to_string();
        rig.session.from_client(retry.as_bytes());
        assert_eq!(rig.server.take(), [retry]);
        // Declined: the retry has no response for the entry.
        rig.session.from_server(ask("r2", "two").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        let declined = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "t", "requestState": "r2", "inputResponses": {}}})
        .to_string();
        rig.session.from_client(declined.as_bytes());
        assert_eq!(
            rig.server.take().len(),
            1,
            "forwarded for the server to handle"
        );
        let audit: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
        let events: Vec<(&str, &str)> = audit
            .iter()
            .map(|l| (l["event"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
            .collect();
        assert_eq!(
            events,
            [
                ("decision", "consent"),
                ("consent", "allow"),
                ("decision", "consent"),
                ("consent", "deny")
            ]
        );
        assert_eq!(audit[3]["reason"], "user.denied");
        // The declined request again: refused from the store, on the client's call.
        rig.session.from_server(ask("r3", "two").as_bytes());
        let answer = parse(&rig.client.take()[0]);
        assert_eq!(answer["id"], 1);
        assert_eq!(answer["error"]["data"]["reason"], "user.denied");
    }

    /// A sampling request with prompt `text` and JSON-RPC id `id`.
    fn sample(id: u64, text: &str) -> String {
        json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": 100}})
        .to_string()
    }

    /// The same, run by the client as a task (MCP 2025-11-25 `params.task`).
    fn task_sample(id: u64, text: &str, extra: Value) -> String {
        let mut value = parse(&sample(id, text));
        value["params"]["task"] = json!({"ttl": 300_000});
        if let (Some(params), Value::Object(extra)) = (value["params"].as_object_mut(), extra) {
            params.extend(extra);
        }
        value.to_string()
    }

    const COMPLETION: &str = r#"{"role":"assistant","model":"m","content":{"type":"text","text":"ok"},"usage":{"inputTokens":3,"outputTokens":4}}"#;

    fn result_frame(id: u64, result: &str) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
    }

    fn error_frame(id: u64, code: i64, message: &str) -> String {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
    }

    /// Issue 11 item 1: only the MCP user rejection (-1) is a refusal.
    #[test]
    fn a_client_error_is_not_a_refusal() {
        let rig = rig("once");
        rig.session.from_server(sample(7, "hi").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        let failure = error_frame(7, -32603, "upstream LLM API timeout");
        rig.session.from_client(failure.as_bytes());
        assert_eq!(
            rig.server.take(),
            [failure],
            "the client's error, unchanged"
        );
        // Nothing stored, and the one request of today's budget was refunded.
        rig.session.from_server(sample(8, "hi").as_bytes());
        assert_eq!(rig.client.take().len(), 1, "asked again");
        assert!(rig.server.take().is_empty());
        // The user's rejection is still a refusal.
        rig.session
            .from_client(error_frame(8, -1, "User rejected").as_bytes());
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["error"]["data"]["reason"], "user.denied");
        rig.session.from_server(sample(9, "hi").as_bytes());
        assert!(rig.client.take().is_empty());
        assert_eq!(
            parse(&rig.server.take()[0])["error"]["data"]["reason"],
            "user.denied"
        );
    }

    /// Issue 11 item 2: a second request with an id still in flight is
    /// answered with an error frame, never forwarded, and the first
    /// request's answer stays its own.
    #[test]
    fn a_reused_in_flight_id_is_refused_not_forwarded() {
        let rig = rig("asks");
        rig.session.from_server(sample(5, "a").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        rig.session.from_server(sample(5, "b").as_bytes());
        assert!(rig.client.take().is_empty(), "B never reaches the client");
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 5);
        assert_eq!(answer["error"]["code"], -32600);
        // Any request kind: a ping with the id of the pending sampling too.
        rig.session
            .from_server(br#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#);
        assert!(rig.client.take().is_empty());
        assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
        // The user refuses A: A is what is stored, B can still be asked.
        rig.session
            .from_client(error_frame(5, -1, "User rejected").as_bytes());
        assert_eq!(
            parse(&rig.server.take()[0])["error"]["data"]["reason"],
            "user.denied"
        );
        rig.session.from_server(sample(6, "a").as_bytes());
        assert!(rig.client.take().is_empty(), "A is refused from the store");
        assert_eq!(rig.server.take().len(), 1);
        rig.session.from_server(sample(5, "b").as_bytes());
        assert_eq!(
            rig.client.take().len(),
            1,
            "B is asked, the id is free again"
        );
    }

    /// Issue 11 item 3: a request the server cancelled stays tracked; the
    /// user's refusal is still recorded and nothing reaches the server.
    #[test]
    fn a_cancelled_request_still_records_the_refusal() {
        let rig = rig("asks");
        rig.session.from_server(sample(7, "a").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
        rig.session.from_server(cancel.as_bytes());
        assert_eq!(rig.client.take(), [cancel], "the client is told");
        // The server may not reuse the id while the client can still answer.
        rig.session.from_server(sample(7, "b").as_bytes());
        assert!(rig.client.take().is_empty());
        assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
        rig.session
            .from_client(error_frame(7, -1, "User rejected").as_bytes());
        assert!(
            rig.server.take().is_empty(),
            "no response after cancellation"
        );
        rig.session.from_server(sample(8, "a").as_bytes());
        assert!(rig.client.take().is_empty(), "refused from the store");
        assert_eq!(
            parse(&rig.server.take()[0])["error"]["data"]["reason"],
            "user.denied"
        );
    }

    /// Issue 11 item 3: an approval of a cancelled request still settles and,
    /// under `consent first`, is remembered; the server hears nothing.
    #[test]
    fn a_cancelled_request_still_records_the_approval() {
        let rig = rig("first");
        rig.session.from_server(sample(7, "a").as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        rig.session.from_server(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
        );
        rig.client.take();
        rig.session
            .from_client(result_frame(7, COMPLETION).as_bytes());
        assert!(
            rig.server.take().is_empty(),
            "no response after cancellation"
        );
        let audit: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
        assert_eq!(audit.last().unwrap()["event"], "consent");
        assert_eq!(audit.last().unwrap()["outcome"], "allow");
    }

    /// Issue 11 item 4: the task-creation reply is not the user's answer; a
    /// task that fails is a refusal, stored, and replayed.
    #[test]
    fn a_failed_sampling_task_is_a_refusal() {
        let rig = rig("first");
        rig.session
            .from_server(task_sample(7, "a", json!({})).as_bytes());
        assert_eq!(rig.client.take().len(), 1);
        let created = result_frame(
            7,
            r#"{"task":{"taskId":"t1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttl":300000}}"#,
        );
        rig.session.from_client(created.as_bytes());
        assert_eq!(
            rig.server.take(),
            [created],
            "the creation reply, unchanged"
        );
        let poll = r#"{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":{"taskId":"t1"}}"#;
        rig.session.from_server(poll.as_bytes());
        assert_eq!(rig.client.take(), [poll]);
        let failed = result_frame(
            8,
            r#"{"taskId":"t1","status":"failed","statusMessage":"User rejected sampling request","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:01Z","ttl":300000}"#,
        );
        rig.session.from_client(failed.as_bytes());
        assert_eq!(rig.server.take(), [failed], "the status goes on");
        // The same request again is refused from the store, task or not.
        rig.session
            .from_server(task_sample(9, "a", json!({})).as_bytes());
        assert!(rig.client.take().is_empty(), "never asked again");
        assert_eq!(
            parse(&rig.server.take()[0])["error"]["data"]["reason"],
            "user.denied"
        );
    }

    /// Issue 11 item 4: a `-1` answer to `tasks/result` is the refusal; the
    /// server receives the policy's frame on its `tasks/result` id.
    #[test]
    fn a_rejected_task_result_is_a_refusal() {
        let rig = rig("asks");
        rig.session
            .from_server(task_sample(7, "a", json!({})).as_bytes());
        rig.client.take();
        rig.session.from_client(
            result_frame(7, r#"{"task":{"taskId":"t1","status":"working"}}"#).as_bytes(),
        );
        rig.server.take();
        rig.session.from_server(
            br#"{"jsonrpc":"2.0","id":8,"method":"tasks/result","params":{"taskId":"t1"}}"#,
        );
        rig.client.take();
        rig.session
            .from_client(error_frame(8, -1, "User rejected sampling request").as_bytes());
        let answer = parse(&rig.server.take()[0]);
        assert_eq!(answer["id"], 8);
        assert_eq!(answer["error"]["data"]["reason"], "user.denied");
        rig.session
            .from_server(task_sample(9, "a", json!({})).as_bytes());
        assert!(rig.client.take().is_empty());
    }

    /// Issue 11 item 4: the trim annotations land on the task's final result
    /// (`tasks/result`), not on the creation reply.
    #[test]
    fn a_trimmed_task_is_annotated_on_its_result() {
        let rig = rig("any");
        rig.session.from_server(
            task_sample(
                7,
                "a",
                json!({"maxTokens": 5000, "includeContext": "allServers"}),
            )
            .as_bytes(),
        );
        let forwarded = parse(&rig.client.take()[0]);
        assert_eq!(forwarded["params"]["maxTokens"], 1000);
        assert_eq!(forwarded["params"]["task"], json!({"ttl": 300_000}));
        let created = result_frame(7, r#"{"task":{"taskId":"t1","status":"working"}}"#);
        rig.session.from_client(created.as_bytes());
        assert_eq!(
            rig.server.take(),
            [created],
            "no _meta on the creation reply"
        );
        rig.session.from_server(
            br#"{"jsonrpc":"2.0","id":8,"method":"tasks/result","params":{"taskId":"t1"}}"#,
        );
        rig.client.take();
        rig.session
            .from_client(result_frame(8, COMPLETION).as_bytes());
        let result = parse(&rig.server.take()[0]);
        assert_eq!(result["id"], 8);
        assert_eq!(result["result"]["_meta"]["maxTokens"]["requested"], 5000);
    }

    #[test]
    fn usage_is_read_from_the_usual_spellings() {
        assert_eq!(
            usage_tokens(&json!({"usage": {"inputTokens": 3, "outputTokens": 4}})),
            Some(7)
        );
        assert_eq!(
            usage_tokens(&json!({"_meta": {"usage": {"total_tokens": 9}}})),
            Some(9)
        );
        assert_eq!(
            usage_tokens(&json!({"usage": {"prompt_tokens": 2}})),
            Some(2)
        );
        assert_eq!(usage_tokens(&json!({"model": "m"})), None);
    }
}
