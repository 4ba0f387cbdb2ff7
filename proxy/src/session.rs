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
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use mcpolicy_runtime::Engine;
use mcpolicy_runtime::alert::Alert;
use mcpolicy_runtime::engine::{
    Answer, ClientContext, Decision, Denial, Grant, InputDecision, InputOutcome, PendingConsent,
    Refused, UnrecordedRefusal,
};
use mcpolicy_runtime::frame;
use mcpolicy_runtime::jsonrpc;
use mcpolicy_runtime::request::{self, SamplingRequest};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::wire::{self, IdKey};

use super::inflight::{
    Awaiting, ExtTask, Flight, InFlight, InputEntry, Refusal, Sampling, TASK_TTL_DEFAULT, Task,
    TaskInput, TaskMethod, TaskState, Unanswered,
};
use super::log::{Audit, Entry, Log, alert_message};

mod deadlines;
mod decider;
mod ext_tasks;
mod from_client;
mod from_server;
mod input_required;
mod resumed;
#[cfg(test)]
mod tests;

use decider::{Decider, Job};

/// A line sink: the child's stdin or the proxy's stdout.
pub type Sink = Box<dyn Write + Send>;

/// Where a session's frames go: the transport's side of the session
/// (`docs/spec/transports.md`). The session reads frames its transport
/// hands it and says here what each side receives; it never touches a
/// pipe or a socket itself. Each call is one JSON-RPC message: one JSON
/// text, possibly followed by the line terminator it was read with
/// ([`frame_text`] drops it). Calls are made in the order the frames must
/// arrive in, from the thread that read the cause or from the decision
/// thread, never two at once for one session.
pub trait Outlet: Send + Sync {
    /// A message for the server: a frame the client sent, forwarded or
    /// rewritten, or the proxy's own answer to a server's request.
    fn to_server(&self, frame: &[u8]);
    /// A message for the client, in the form no reader splits
    /// ([`wire::for_readers`]).
    fn to_client(&self, frame: &[u8]);
    /// The client's side ended: the server's input closes (a transport
    /// with no such notion ignores it).
    fn close_server(&self) {}
}

/// A frame without its line terminator: the JSON text alone.
pub fn frame_text(frame: &[u8]) -> &[u8] {
    body(frame)
}

/// The stdio transport's outlet: one line per frame, on the child's stdin
/// and the proxy's stdout.
struct Lines {
    to_server: Mutex<Option<Sink>>,
    to_client: Mutex<Sink>,
    log: Log,
}

impl Lines {
    fn write(sink: &mut dyn Write, text: &[u8]) -> std::io::Result<()> {
        sink.write_all(text)?;
        if text.last() != Some(&b'\n') {
            sink.write_all(b"\n")?;
        }
        sink.flush()
    }
}

impl Outlet for Lines {
    fn to_server(&self, frame: &[u8]) {
        let mut guard = lock(&self.to_server);
        let Some(sink) = guard.as_mut() else {
            return;
        };
        if let Err(error) = Lines::write(sink.as_mut(), frame) {
            self.log
                .line(format_args!("writing to the server failed: {error}"));
        }
    }

    fn to_client(&self, frame: &[u8]) {
        let mut sink = lock(&self.to_client);
        if let Err(error) = Lines::write(sink.as_mut(), frame) {
            self.log
                .line(format_args!("writing to the client failed: {error}"));
        }
    }

    fn close_server(&self) {
        lock(&self.to_server).take();
    }
}

/// The `_meta` key under which MCP 2026-07-28 clients declare their
/// capabilities on each request.
const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// MCP's message for the user's rejection of a sampling request (the text
/// its sampling specification gives the `-1` error): the only form a
/// 2025-11-25 task status can carry the user's word in (`statusMessage`).
const USER_REJECTED_MESSAGE: &str = "User rejected sampling request";

fn jsonrpc_user_rejected_message() -> &'static str {
    USER_REJECTED_MESSAGE
}

/// At most this many user refusals wait for the store to take them; past
/// it the oldest is dropped with a log line (`proxy/PROXY.md`, "Consent").
pub const MAX_UNRECORDED: usize = 1024;

/// The prefix of the `requestState` tokens the proxy mints (the rest is
/// 128 random bits in hex): `docs/spec/frames.md`, "Local errors".
const STATE_TOKEN_PREFIX: &str = "mcpolicy.";

/// A fresh, unguessable `requestState` token for one forwarded
/// `InputRequiredResult`; `None` when the OS has no randomness to give.
fn mint_state_token() -> Option<String> {
    let mut bits = [0u8; 16];
    getrandom::fill(&mut bits).ok()?;
    let hex: String = bits.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{STATE_TOKEN_PREFIX}{hex}"))
}

#[derive(Debug, Default)]
struct State {
    /// Every server request forwarded to the client, every task followed,
    /// every MCP 2026-07-28 round of entries remembered (by the
    /// `requestState` token the proxy minted for it), and every `tasks/get`
    /// of the client's the server has not answered.
    flights: InFlight,
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
    /// As written: its key and its echo are read from the text
    /// (`wire::admit_id`).
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    result: Option<ResultProbe<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

/// `result.resultType` when `result` is an object; any other `result`
/// (JSON-RPC allows any value) probes as `None` rather than failing. And
/// whether the object has a member `inputRequests`, its key read as the
/// client reads it (escapes decoded): a key spelt `input\u0052equests`
/// is that member, which no search of the raw bytes would find.
#[derive(Default)]
struct ResultProbe<'a> {
    result_type: Option<Cow<'a, str>>,
    input_requests: bool,
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
                let mut input_requests = false;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "resultType" {
                        if result_type.is_some() {
                            return Err(serde::de::Error::duplicate_field("resultType"));
                        }
                        result_type = Some(map.next_value::<Option<Cow<'de, str>>>()?);
                    } else {
                        input_requests |= key == "inputRequests";
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ResultProbe {
                    result_type: result_type.flatten(),
                    input_requests,
                })
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ResultProbe::default())
            }

            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(ResultProbe::default())
            }

            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ResultProbe::default())
            }

            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ResultProbe::default())
            }

            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ResultProbe::default())
            }

            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ResultProbe::default())
            }

            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ResultProbe::default())
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

/// The in-flight map's key of an id: its [`IdKey`] as text (a string id
/// quoted, an integer bare, so `"1"` and `1` stay apart). Keys of ids the
/// proxy admitted ([`wire::admit_id`]) and of ids a client echoes
/// ([`wire::value_key`]) agree.
fn flight_key(key: &IdKey) -> String {
    key.to_string()
}

/// The key of a call the client made (a `tasks/get` it polls, a call a
/// 2026-07-28 round answers): as the client reads its id when it can be
/// read so ([`answer_key`]), else its JSON text, so that the server's
/// answer finds it whichever way it spells the id.
fn call_key(id: &Value) -> String {
    answer_key(id).unwrap_or_else(|| id.to_string())
}

/// The in-flight key a client's answer (or a `requestId`) names, if any id
/// the proxy could have admitted is read this way by a client.
fn answer_key(id: &Value) -> Option<String> {
    wire::value_key(id).as_ref().map(flight_key)
}

/// What settling a client's result did.
enum Settled {
    /// Settled; whether `_meta` was written.
    Annotated(bool),
    /// Withheld: the model is outside `models`; the denial answers instead.
    Withheld(Box<Denial>),
    /// Withheld, and the store failed: its error answers instead.
    Failed(mcpolicy_runtime::Error),
}

/// A line without its terminator.
fn body(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    raw.strip_suffix(b"\r").unwrap_or(raw)
}

/// A line to the client as [`wire::for_readers`] writes it; a line that
/// needs no change keeps its bytes (and its terminator) as they are.
fn for_readers_line(text: &[u8]) -> Cow<'_, [u8]> {
    let line = body(text);
    match wire::for_readers(line) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(rewritten) => Cow::Owned(rewritten),
    }
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

/// How long after a decision the session writes the store's batched
/// re-presentation counts (the SQLite store's own bound, `docs/spec/store.md`,
/// "Durability").
pub const STORE_FLUSH_AFTER: Duration = Duration::from_millis(500);

/// A proxied connection between one client and one server.
pub struct Session {
    engine: Engine,
    server_id: String,
    /// Where frames go: the transport ([`Outlet`]).
    outlet: Box<dyn Outlet>,
    state: Mutex<State>,
    log: Log,
    audit: Option<Audit>,
    sampling_context: AtomicBool,
    /// A request with a deadline was remembered since the last
    /// [`Session::take_new_deadline`]: the deadline thread must recompute.
    new_deadline: AtomicBool,
    /// When the store's batched re-presentation counts are next written
    /// (`docs/spec/store.md`, "Durability"): [`STORE_FLUSH_AFTER`] after a
    /// decision, so that `mcpc store` and another proxy on the same file
    /// see them while this session runs, not only at its end.
    flush_at: Mutex<Option<Instant>>,
    /// The monotonic clock of deadlines and lingers (a test steps its own).
    monotonic: Box<dyn Fn() -> Instant + Send + Sync>,
    /// The decision thread, once the proxy starts it ([`Session::spawn_decider`]).
    decider: OnceLock<Arc<Decider>>,
    /// The user's refusals the store failed to take, oldest first: retried
    /// before every later store call and at exit.
    unrecorded: Mutex<VecDeque<UnrecordedRefusal>>,
    /// The transport resumes streams ([`Session::resumable`]).
    resumable: bool,
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
    /// A session deciding for `server_id` over stdio: one line per frame,
    /// written to the server's and the client's sinks.
    pub fn new(
        engine: Engine,
        server_id: impl Into<String>,
        to_server: Sink,
        to_client: Sink,
        log: Log,
        audit: Option<Audit>,
    ) -> Session {
        let lines = Lines {
            to_server: Mutex::new(Some(to_server)),
            to_client: Mutex::new(to_client),
            log: log.clone(),
        };
        Session::with_outlet(engine, server_id, Box::new(lines), log, audit)
    }

    /// A session deciding for `server_id` on any transport: the frames for
    /// either side go to `outlet`.
    pub fn with_outlet(
        engine: Engine,
        server_id: impl Into<String>,
        outlet: Box<dyn Outlet>,
        log: Log,
        audit: Option<Audit>,
    ) -> Session {
        Session {
            engine,
            server_id: server_id.into(),
            outlet,
            state: Mutex::new(State::default()),
            log,
            audit,
            sampling_context: AtomicBool::new(false),
            new_deadline: AtomicBool::new(false),
            flush_at: Mutex::new(None),
            monotonic: Box::new(Instant::now),
            decider: OnceLock::new(),
            unrecorded: Mutex::new(VecDeque::new()),
            resumable: false,
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

    fn send_server(&self, text: &[u8]) {
        self.outlet.to_server(text);
    }

    /// Writes one line to the client, in the form no client reader splits
    /// (`wire::for_readers`): every line the proxy forwards or writes is one
    /// JSON text it read or made, so the rewrite keeps its value.
    fn send_client(&self, text: &[u8]) {
        self.outlet.to_client(&for_readers_line(text));
    }

    /// Answers the server's last line with a JSON-RPC error (id `null`)
    /// instead of forwarding it, e.g. a line too long to hold.
    pub fn reject_server_line(&self, code: i32, message: &str) {
        self.send_server(&frame::request_error_response(None, code, message));
    }

    /// The session is ending: writes what the store still holds in memory
    /// (`docs/spec/store.md`, "Durability": the re-presentation counts of
    /// replays), so that the next session, `mcpc store` and the alerts see
    /// every one. A failure loses only those counts, and is logged.
    pub fn flush_store(&self) {
        if let Err(error) = self.engine.store().flush() {
            self.log.line(format_args!(
                "writing the store's re-presentation counts failed: {error}"
            ));
        }
    }

    /// The session ends, on any transport (`docs/spec/transports.md`):
    /// every consent still waiting gets its closing audit line, the user's
    /// refusals the store could not take yet get a last try (a log line
    /// says how many are still owed), and the store's batched counts are
    /// written.
    pub fn end(&self) {
        self.close_unanswered();
        let owed = self.record_unrecorded();
        if owed > 0 {
            self.log.line(format_args!(
                "{owed} user refusal(s) could not be recorded at the session's end: the store is still failing"
            ));
        }
        self.flush_store();
    }

    /// Records the user's refusals the store failed to take, oldest first,
    /// until one fails again (the store is still down). Runs before every
    /// store call a server or client line causes, and at exit. Returns how
    /// many are still owed.
    pub fn record_unrecorded(&self) -> usize {
        let mut queue = lock(&self.unrecorded);
        while let Some(refusal) = queue.pop_front() {
            let identity = refusal.identity().to_owned();
            match refusal.record() {
                Ok(()) => self.log.line(format_args!(
                    "recorded the user's refusal of {identity} (user.denied) that the store had failed to take"
                )),
                Err(refusal) => {
                    queue.push_front(refusal);
                    break;
                }
            }
        }
        queue.len()
    }

    /// The user refused (`-1`, or a task failed with MCP's rejection
    /// message): the `user.denied` denial to answer with, whether or not
    /// the store took it; a refusal the store failed to take is queued and
    /// recorded as soon as it can be.
    fn user_refused(&self, refused: Refused, origin: &Value) -> Denial {
        let (denial, unrecorded) = refused.into_parts();
        if let Some(unrecorded) = unrecorded {
            self.log.line(format_args!(
                "recording the user's refusal of request {origin} failed ({}): answered user.denied, to be recorded when the store recovers",
                unrecorded.error()
            ));
            let mut queue = lock(&self.unrecorded);
            if queue.len() >= MAX_UNRECORDED
                && let Some(lost) = queue.pop_front()
            {
                self.log.line(format_args!(
                    "dropped the unrecorded refusal of {} ({MAX_UNRECORDED} waiting): it will not be replayed",
                    lost.identity()
                ));
            }
            queue.push_back(unrecorded);
        }
        denial
    }

    /// The client closed its side: close the server's stdin so it can exit.
    pub fn close_server_input(&self) {
        self.outlet.close_server();
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

    /// Audits a consent request that ended without the user's word: the
    /// client failed it (`code`, when the client gave one), its task ended
    /// or was cancelled, or recording the approval failed.
    fn audit_consent_failed(&self, via: &str, id: &Value, identity: &str, code: Option<i64>) {
        self.audit(&Entry {
            event: "consent",
            via,
            id: Some(id),
            identity: Some(identity),
            outcome: "failed",
            code: code.and_then(|c| i32::try_from(c).ok()),
            ..Entry::default()
        });
    }

    /// The session ends (`proxy/PROXY.md`, "The audit log"): every consent
    /// still waiting for the user gets its
    /// closing `consent` line, outcome `unanswered`. Nothing is stored and
    /// nothing refunded: the reservation and the prompt stay counted, as for
    /// a prompt the user never answers (`docs/spec/evaluation.md`, "Consent
    /// cooldown"), so ending a session cannot buy a server new prompts.
    /// Tasks that lapsed undecided are abandoned first, as a sweep would.
    /// Returns how many consents were left unanswered.
    pub fn close_unanswered(&self) -> usize {
        let (abandoned, unanswered) = {
            let mut state = lock(&self.state);
            (state.flights.take_abandoned(), state.flights.unanswered())
        };
        for (origin, pending) in abandoned {
            self.abandon(pending, &origin, None, "task");
        }
        let count = unanswered.len();
        for unanswered in unanswered {
            self.close_consent_unanswered(unanswered, "the session ended");
        }
        count
    }

    /// Closes a consent the proxy stops waiting for (`why`) with its
    /// `unanswered` audit line; the consent is dropped with nothing stored
    /// and nothing refunded.
    fn close_consent_unanswered(&self, (via, origin, pending): Unanswered, why: &str) {
        self.close_unshown(via, &origin, &pending, why);
    }

    /// The `unanswered` closing line (and log line) of `pending`.
    fn close_unshown(&self, via: &str, origin: &Value, pending: &PendingConsent, why: &str) {
        self.audit(&Entry {
            event: "consent",
            via,
            id: Some(origin),
            identity: Some(pending.identity()),
            outcome: "unanswered",
            ..Entry::default()
        });
        self.log.line(format_args!(
            "{why} before the user answered the consent request {origin}: nothing recorded, its budget and prompt stay counted"
        ));
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

    /// The frame answering a request the in-flight table cannot take:
    /// -32600 for a reused id; at the bound, -32603 with the retryable
    /// `runtime.in_flight_bound` data (`docs/spec/frames.md`).
    /// [`Session::refusal_frame`] for a server's request id, echoed as
    /// written (an id [`wire::admit_id`] admitted: a string or a plain integer).
    fn refusal_frame_raw(&self, id: &RawValue, refusal: Refusal) -> Vec<u8> {
        match refusal.data(&self.server_id) {
            None => wire::refusal_frame(id.get(), refusal.code(), refusal.message()),
            Some(data) => format!(
                r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":{},"message":{},"data":{}}}}}"#,
                id.get(),
                refusal.code(),
                Value::from(refusal.message()),
                data
            )
            .into_bytes(),
        }
    }

    fn refusal_frame(&self, id: Option<&Value>, refusal: Refusal) -> Vec<u8> {
        match refusal.data(&self.server_id) {
            None => frame::request_error_response(id, refusal.code(), refusal.message()),
            Some(data) => serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": refusal.code(), "message": refusal.message(), "data": data},
            })
            .to_string()
            .into_bytes(),
        }
    }
}

/// The key of an extension task: its id, or the JSON text of a task id that
/// is not a string (a client may still read the task's entries).
fn task_key(task_id: &Value) -> String {
    task_id
        .as_str()
        .map_or_else(|| task_id.to_string(), str::to_owned)
}

/// What an extension task is charged against the byte bound: its id and
/// the entries it holds, as the server wrote them.
fn ext_task_bytes(task_id: &str, task: &ExtTask) -> usize {
    let entries: usize = task
        .pending
        .iter()
        .map(|(key, input)| key.len() + input.request.to_string().len())
        .sum();
    let answered: usize = task.answered.iter().map(String::len).sum();
    task_id.len() + entries + answered
}

/// The sampling entries of one `inputRequests`, decided.
struct Decided {
    /// The frame answering the client's call when an entry is refused.
    refusal: Option<Vec<u8>>,
    /// Trimmed entries' new params, by key.
    rewrites: Vec<(String, Map<String, Value>)>,
    /// Allowed and consent entries, by key.
    remembered: Vec<(String, InputEntry)>,
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

/// Whether a task `status` is one a task ends in (MCP's tasks: a task
/// `completed`, `failed` or `cancelled` does not change again).
fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// Whether a JSON text may hold `needle` (a key or string written without
/// escapes) as a JSON reader reads it: its bytes are there, or the text has
/// an escape, and a string spelt another way (`sampling\/createMessage`,
/// `\u0073ampling…`) always holds one. A filter before a parse, never a
/// decision: `false` is certain, `true` means parse and see.
fn may_contain(text: &[u8], needle: &[u8]) -> bool {
    text.contains(&b'\\') || text.windows(needle.len()).any(|w| w == needle)
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
