//! The Node.js binding of `mcpolicy-runtime` (napi-rs): the native half of
//! the npm package in this directory. `index.js` is the JavaScript API over
//! it and `sdk.js` the adapter for `@modelcontextprotocol/sdk`
//! (`README.md`).
//!
//! Every call that may touch a decision store (deciding, approving,
//! refusing, settling, opening a store) runs on libuv's thread pool as an
//! [`AsyncTask`] and returns a Promise: the event loop never waits on
//! SQLite's fsync or a PostgreSQL round trip (`test/slow_store.test.mjs`).
//! Only a memory engine also decides synchronously (`decideSync`).
//!
//! Failures reach JavaScript as `Error`s whose `code` is a stable name
//! (`table.*`, `store.*`, `request.invalid`, `binding.*`), never as a Rust
//! panic: every exported function catches unwinding.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::engine::{
    Answer, ClientContext, Decision as Verdict, Denial, Grant, PendingConsent,
};
use mcpolicy_runtime::identity::request_identity;
use mcpolicy_runtime::store::{DecisionStore, MemoryStore, SqliteStore};
use mcpolicy_runtime::{Engine as RtEngine, Error as RtError, Policy as RtPolicy};
use mcpolicy_store_postgres::PostgresStore;
use napi::bindgen_prelude::{AsyncTask, Buffer, Either, Env, JsObjectValue, Status};
use napi::{JsValue, Task};
use napi_derive::napi;
use serde_json::{Map, Value};

/// A failure as JavaScript sees it: a stable `code` and a message.
#[derive(Debug)]
pub struct Failure {
    code: String,
    message: String,
}

impl Failure {
    fn new(code: &str, message: impl Into<String>) -> Failure {
        Failure {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// The runtime's error under its stable name: the store's
    /// (`docs/spec/store.md`, "Reading a store"), the table's, or the request's.
    fn runtime(error: &RtError) -> Failure {
        let code = match error {
            RtError::Store { source, .. } => source.code(),
            RtError::Table(table) => table.code(),
            RtError::Request(_) => "request.invalid",
            _ => "runtime.error",
        };
        Failure::new(code, error.to_string())
    }

    /// A handle whose decision was already carried out (approved, refused,
    /// completed...): each transition consumes it, as in the Rust API.
    fn settled(what: &str) -> Failure {
        Failure::new(
            "binding.decision_settled",
            format!("{what}: this decision was already carried out"),
        )
    }

    fn panicked() -> Failure {
        Failure::new(
            "binding.panic",
            "the mcpolicy runtime failed unexpectedly (a bug): the request is refused",
        )
    }

    /// A JavaScript `Error` with `code` set to the stable name.
    fn into_js(self, env: &Env) -> napi::Error {
        let built = env
            .create_error(napi::Error::new(Status::GenericFailure, &self.message))
            .and_then(|mut error| {
                error.set_named_property("code", self.code.as_str())?;
                Ok(napi::Error::from(error.to_unknown()))
            });
        built.unwrap_or_else(|_| {
            napi::Error::new(
                Status::GenericFailure,
                format!("{}: {}", self.code, self.message),
            )
        })
    }
}

/// Runs `body`, turning a panic into [`Failure::panicked`]: a bug in the
/// runtime refuses the request instead of aborting the node process.
fn guarded<T>(body: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| Err(Failure::panicked()))
}

/// A Promise's work on the thread pool: `work` runs there, `finish` turns
/// its output into the JavaScript value on the main thread.
pub struct Job<T, J> {
    work: Option<Box<dyn FnOnce() -> Result<T, Failure> + Send>>,
    finish: fn(T) -> Result<J, Failure>,
}

impl<T: Send + 'static, J: napi::bindgen_prelude::ToNapiValue + napi::bindgen_prelude::TypeName>
    Job<T, J>
{
    fn spawn(
        work: impl FnOnce() -> Result<T, Failure> + Send + 'static,
        finish: fn(T) -> Result<J, Failure>,
    ) -> AsyncTask<Job<T, J>> {
        AsyncTask::new(Job {
            work: Some(Box::new(work)),
            finish,
        })
    }

    /// A Promise that rejects with `failure` (a misuse found before any work).
    fn reject(failure: Failure) -> AsyncTask<Job<T, J>> {
        let failure = Mutex::new(Some(failure));
        Job::spawn(
            move || {
                Err(failure
                    .lock()
                    .ok()
                    .and_then(|mut slot| slot.take())
                    .unwrap_or_else(Failure::panicked))
            },
            |_| Err(Failure::panicked()),
        )
    }
}

impl<T: Send + 'static, J: napi::bindgen_prelude::ToNapiValue + napi::bindgen_prelude::TypeName>
    Task for Job<T, J>
{
    type Output = Result<T, Failure>;
    type JsValue = J;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        Ok(match self.work.take() {
            Some(work) => guarded(work),
            None => Err(Failure::panicked()),
        })
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> napi::Result<J> {
        let finish = self.finish;
        output
            .and_then(|value| guarded(|| finish(value)))
            .map_err(|failure| failure.into_js(&env))
    }
}

impl<T, J> std::fmt::Debug for Job<T, J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("pending", &self.work.is_some())
            .finish()
    }
}

/// Bytes from a string or a Buffer.
fn bytes_of(input: &Either<String, Buffer>) -> &[u8] {
    match input {
        Either::A(text) => text.as_bytes(),
        Either::B(buffer) => buffer,
    }
}

/// A compiled policy table, verified (`docs/table-format.md`).
#[napi]
#[derive(Debug)]
pub struct Policy {
    inner: RtPolicy,
}

#[napi]
impl Policy {
    /// The table `mcpc compile` writes, as text or bytes. A table of an
    /// unknown format, or whose digests do not match, throws (`code`:
    /// `table.*`).
    #[napi(factory, catch_unwind)]
    pub fn from_json(env: Env, table: Either<String, Buffer>) -> napi::Result<Policy> {
        guarded(|| {
            RtPolicy::from_json(bytes_of(&table))
                .map(|inner| Policy { inner })
                .map_err(|error| Failure::runtime(&error))
        })
        .map_err(|failure| failure.into_js(&env))
    }

    /// The MCP revision the table was compiled for.
    #[napi(getter, catch_unwind)]
    pub fn protocol(&self) -> String {
        self.inner.table().protocol.as_str().to_owned()
    }

    /// The identity fields the table hashes (`docs/spec/identity.md`).
    #[napi(getter, catch_unwind)]
    pub fn identity_fields(&self) -> Vec<String> {
        self.inner.table().identity.clone()
    }
}

/// Which store an engine decides against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    Memory,
    Sqlite,
    Postgres,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }
}

/// The engine: a policy, a decision store and the system clock.
#[napi]
#[derive(Debug)]
pub struct Engine {
    inner: RtEngine,
    kind: StoreKind,
}

fn engine_with(policy: RtPolicy, store: Arc<dyn DecisionStore>, kind: StoreKind) -> Engine {
    Engine {
        inner: RtEngine::new(policy, store, Arc::new(SystemClock)),
        kind,
    }
}

fn keep<T>(value: T) -> Result<T, Failure> {
    Ok(value)
}

#[napi]
impl Engine {
    /// An engine over a memory store: decisions last as long as the engine.
    #[napi(factory, catch_unwind)]
    pub fn memory(policy: &Policy) -> Engine {
        engine_with(
            policy.inner.clone(),
            Arc::new(MemoryStore::new()),
            StoreKind::Memory,
        )
    }

    /// An engine over the SQLite store at `path` (created if missing),
    /// opened on the thread pool (`docs/spec/store.md`).
    #[napi(catch_unwind, ts_return_type = "Promise<Engine>")]
    pub fn open_sqlite(policy: &Policy, path: String) -> AsyncTask<Job<Engine, Engine>> {
        let policy = policy.inner.clone();
        Job::spawn(
            move || {
                let store = SqliteStore::open(&path)
                    .map_err(|error| Failure::new(error.code(), error.to_string()))?;
                Ok(engine_with(policy, Arc::new(store), StoreKind::Sqlite))
            },
            keep,
        )
    }

    /// An engine over the PostgreSQL store at `url` (a libpq connection
    /// string or URL; `runtime/postgres/README.md`), opened on the thread pool.
    #[napi(catch_unwind, ts_return_type = "Promise<Engine>")]
    pub fn open_postgres(policy: &Policy, url: String) -> AsyncTask<Job<Engine, Engine>> {
        let policy = policy.inner.clone();
        Job::spawn(
            move || {
                let store = PostgresStore::open(&url)
                    .map_err(|error| Failure::new(error.code(), error.to_string()))?;
                Ok(engine_with(policy, Arc::new(store), StoreKind::Postgres))
            },
            keep,
        )
    }

    /// `memory`, `sqlite` or `postgres`.
    #[napi(getter, catch_unwind)]
    pub fn store(&self) -> String {
        self.kind.name().to_owned()
    }

    /// Decides the raw bytes of a server's `sampling/createMessage` request
    /// (`docs/spec/evaluation.md`) on the thread pool. `server` is the id
    /// the user gave the server in the client's configuration.
    #[napi(catch_unwind, ts_return_type = "Promise<Decision>")]
    pub fn decide(
        &self,
        server: String,
        request: Either<String, Buffer>,
        sampling_context: Option<bool>,
    ) -> AsyncTask<Job<Decided, Decision>> {
        let engine = self.inner.clone();
        let bytes = bytes_of(&request).to_vec();
        let ctx = ClientContext::with_sampling_context(sampling_context.unwrap_or(false));
        Job::spawn(
            move || Ok(Decided(engine.decide(&server, &bytes, &ctx))),
            |decided| Ok(Decision::from_answer(decided.0)),
        )
    }

    /// `decide` on the calling thread, for a memory engine only (it never
    /// waits on I/O); any other store throws `binding.store_is_async`.
    #[napi(catch_unwind)]
    pub fn decide_sync(
        &self,
        env: Env,
        server: String,
        request: Either<String, Buffer>,
        sampling_context: Option<bool>,
    ) -> napi::Result<Decision> {
        if self.kind != StoreKind::Memory {
            return Err(Failure::new(
                "binding.store_is_async",
                format!(
                    "decideSync would block the event loop on the {} store: use decide",
                    self.kind.name()
                ),
            )
            .into_js(&env));
        }
        let ctx = ClientContext::with_sampling_context(sampling_context.unwrap_or(false));
        guarded(|| {
            Ok(Decision::from_answer(self.inner.decide(
                &server,
                bytes_of(&request),
                &ctx,
            )))
        })
        .map_err(|failure| failure.into_js(&env))
    }

    /// The request identity (the refusal key) of `params` from `server`
    /// under this policy (`docs/spec/identity.md`).
    #[napi(catch_unwind)]
    pub fn identity(&self, env: Env, server: String, params: Value) -> napi::Result<String> {
        let params = object_of(params).map_err(|failure| failure.into_js(&env))?;
        Ok(self.inner.identity(&server, &params).into_string())
    }
}

fn object_of(params: Value) -> Result<Map<String, Value>, Failure> {
    match params {
        Value::Object(map) => Ok(map),
        _ => Err(Failure::new(
            "binding.params_not_object",
            "params must be an object (a sampling request's params)",
        )),
    }
}

/// The request identity of `params` from `server` hashing the identity
/// `fields` (`docs/spec/identity.md`): the function the frozen vectors
/// (`tests/cases/identity/vectors.json`) pin, without a table.
#[napi(catch_unwind)]
pub fn request_identity_of(
    env: Env,
    server: String,
    params: Value,
    fields: Vec<String>,
) -> napi::Result<String> {
    let params = object_of(params).map_err(|failure| failure.into_js(&env))?;
    Ok(request_identity(&server, &params, &fields).into_string())
}

/// An answer crossing from the thread pool.
#[derive(Debug)]
pub struct Decided(Answer);

/// What the live handle of a decision can still do.
#[derive(Debug)]
enum Handle {
    Grant(Grant),
    Pending(PendingConsent),
}

/// One decision, with its frame ready to send. `kind` says which:
/// `allow` and `trim` (run the request with `params`, annotate the result,
/// then `complete`), `consent` (ask the user, then `approve` or `refuse`),
/// `deny`, `invalid` (not a valid request) and `failed` (the store failed:
/// refused, fail closed), whose `error` and `reply` are the frame
/// (`docs/spec/frames.md`).
#[napi]
#[derive(Debug)]
pub struct Decision {
    kind: &'static str,
    id: Option<Value>,
    original: Map<String, Value>,
    params: Option<Map<String, Value>>,
    meta: Option<Map<String, Value>>,
    reply: Option<Vec<u8>>,
    error: Option<Value>,
    reason: Option<String>,
    identity: Option<String>,
    deadline_ms: Option<u64>,
    replayed: bool,
    handle: Arc<Mutex<Option<Handle>>>,
}

impl Decision {
    fn blank(kind: &'static str, id: Option<Value>, original: Map<String, Value>) -> Decision {
        Decision {
            kind,
            id,
            original,
            params: None,
            meta: None,
            reply: None,
            error: None,
            reason: None,
            identity: None,
            deadline_ms: None,
            replayed: false,
            handle: Arc::new(Mutex::new(None)),
        }
    }

    fn from_answer(answer: Answer) -> Decision {
        match answer {
            Answer::Invalid(rejection) => {
                Decision::refusal("invalid", None, Map::new(), rejection.reply(), None)
            }
            Answer::Failed { reply, .. } => Decision::refusal(
                "failed",
                None,
                Map::new(),
                reply,
                Some("runtime.store_unavailable".to_owned()),
            ),
            Answer::Decided { request, decision } => {
                Decision::from_verdict(decision, request.id.clone(), request.into_params())
            }
        }
    }

    /// A refusal frame: `reply` is the JSON-RPC response, `error` its member.
    fn refusal(
        kind: &'static str,
        id: Option<Value>,
        original: Map<String, Value>,
        reply: Vec<u8>,
        reason: Option<String>,
    ) -> Decision {
        let parsed: Option<Value> = serde_json::from_slice(&reply).ok();
        let id = id.or_else(|| parsed.as_ref().and_then(|frame| frame.get("id").cloned()));
        let mut decision = Decision::blank(kind, id, original);
        decision.error = parsed.and_then(|mut frame| frame.get_mut("error").map(Value::take));
        decision.reason = reason.or_else(|| {
            decision
                .error
                .as_ref()
                .and_then(|error| error.pointer("/data/reason"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        decision.reply = Some(reply);
        decision
    }

    fn denial(denial: &Denial, id: Option<Value>, original: Map<String, Value>) -> Decision {
        let mut decision = Decision::refusal(
            "deny",
            id.clone(),
            original,
            denial.reply(id.as_ref()),
            Some(denial.reason().to_owned()),
        );
        decision.replayed = denial.replayed();
        decision
    }

    fn from_verdict(verdict: Verdict, id: Option<Value>, original: Map<String, Value>) -> Decision {
        match verdict {
            Verdict::Deny(denial) => Decision::denial(&denial, id, original),
            Verdict::Allow(grant) | Verdict::Trim(grant) => Decision::granted(grant, id, original),
            Verdict::NeedsConsent(pending) => {
                let mut decision = Decision::blank("consent", id, original);
                decision.params = Some(pending.params(&decision.original));
                decision.meta = meta_of(pending.annotations().to_meta());
                decision.identity = Some(pending.identity().to_owned());
                decision.handle = Arc::new(Mutex::new(Some(Handle::Pending(pending))));
                decision
            }
        }
    }

    fn granted(grant: Grant, id: Option<Value>, original: Map<String, Value>) -> Decision {
        let kind = if grant.is_trim() { "trim" } else { "allow" };
        let mut decision = Decision::blank(kind, id, original);
        decision.params = Some(grant.params(&decision.original));
        decision.meta = meta_of(grant.annotations().to_meta());
        decision.identity = Some(grant.identity().to_owned());
        decision.deadline_ms = grant.deadline_ms();
        decision.replayed = grant.replayed();
        decision.handle = Arc::new(Mutex::new(Some(Handle::Grant(grant))));
        decision
    }

    /// Takes the live handle out (each transition consumes it).
    fn take(&self) -> Option<Handle> {
        self.handle.lock().ok().and_then(|mut slot| slot.take())
    }

    fn take_grant(&self, what: &str) -> Result<Grant, Failure> {
        match self.take() {
            Some(Handle::Grant(grant)) => Ok(grant),
            Some(other) => {
                self.put_back(other);
                Err(Failure::new(
                    "binding.not_a_grant",
                    format!("{what}: a `{}` decision has no grant", self.kind),
                ))
            }
            None => Err(self.not_live(what)),
        }
    }

    fn take_pending(&self, what: &str) -> Result<PendingConsent, Failure> {
        match self.take() {
            Some(Handle::Pending(pending)) => Ok(pending),
            Some(other) => {
                self.put_back(other);
                Err(Failure::new(
                    "binding.not_consent",
                    format!("{what}: only a `consent` decision is approved or refused"),
                ))
            }
            None => Err(self.not_live(what)),
        }
    }

    fn not_live(&self, what: &str) -> Failure {
        match self.kind {
            "allow" | "trim" | "consent" => Failure::settled(what),
            kind => Failure::new(
                "binding.not_a_grant",
                format!("{what}: a `{kind}` decision has nothing to carry out"),
            ),
        }
    }

    fn put_back(&self, handle: Handle) {
        if let Ok(mut slot) = self.handle.lock() {
            *slot = Some(handle);
        }
    }

    fn id(&self) -> Option<Value> {
        self.id.clone()
    }
}

fn meta_of(meta: Map<String, Value>) -> Option<Map<String, Value>> {
    (!meta.is_empty()).then_some(meta)
}

/// A decision crossing back from the thread pool.
#[derive(Debug)]
pub struct Next(Decision);

fn next(decision: Next) -> Result<Decision, Failure> {
    Ok(decision.0)
}

#[napi]
impl Decision {
    /// `allow`, `trim`, `consent`, `deny`, `invalid` or `failed`.
    #[napi(
        getter,
        catch_unwind,
        ts_return_type = "'allow' | 'trim' | 'consent' | 'deny' | 'invalid' | 'failed'"
    )]
    pub fn kind(&self) -> String {
        self.kind.to_owned()
    }

    /// The JSON-RPC id of the request (null when unknown).
    #[napi(
        getter,
        js_name = "id",
        catch_unwind,
        ts_return_type = "string | number | null"
    )]
    pub fn id_value(&self) -> Value {
        self.id.clone().unwrap_or(Value::Null)
    }

    /// The params to run (`allow`, `trim`: narrowed by a trim) or to show
    /// the user (`consent`); null for a refusal.
    #[napi(
        getter,
        catch_unwind,
        ts_return_type = "Record<string, unknown> | null"
    )]
    pub fn params(&self) -> Value {
        self.params.clone().map_or(Value::Null, Value::Object)
    }

    /// The trim annotations the result carries in `_meta`
    /// (`docs/spec/frames.md`, "Trim annotations"); null without a trim.
    #[napi(
        getter,
        catch_unwind,
        ts_return_type = "Record<string, unknown> | null"
    )]
    pub fn meta(&self) -> Value {
        self.meta.clone().map_or(Value::Null, Value::Object)
    }

    /// The JSON-RPC error object to answer with (`deny`, `invalid`,
    /// `failed`): `{code, message, data}`; null otherwise.
    #[napi(
        getter,
        catch_unwind,
        ts_return_type = "{ code: number; message: string; data?: Record<string, unknown> } | null"
    )]
    pub fn error(&self) -> Value {
        self.error.clone().unwrap_or(Value::Null)
    }

    /// The whole JSON-RPC response of a refusal, as bytes; null otherwise.
    #[napi(getter, catch_unwind)]
    pub fn reply(&self) -> Option<Buffer> {
        self.reply.clone().map(Buffer::from)
    }

    /// The denial's reason (`policy.*`, `user.denied`, ...); null otherwise.
    #[napi(getter, catch_unwind)]
    pub fn reason(&self) -> Option<String> {
        self.reason.clone()
    }

    /// Where a refusal of this request is stored (`docs/spec/identity.md`).
    #[napi(getter, catch_unwind)]
    pub fn identity(&self) -> Option<String> {
        self.identity.clone()
    }

    /// The deadline the completion must meet (`allow`, `trim`), in ms.
    #[napi(getter, catch_unwind)]
    pub fn deadline_ms(&self) -> Option<f64> {
        // Milliseconds below 2^53 are exact in a JavaScript number.
        #[expect(
            clippy::cast_precision_loss,
            reason = "a deadline in ms is far below 2^53"
        )]
        self.deadline_ms.map(|ms| ms as f64)
    }

    /// Answered from the decision store (a replayed denial or approval).
    #[napi(getter, catch_unwind)]
    pub fn replayed(&self) -> bool {
        self.replayed
    }

    /// Whether the decision can still be carried out (`complete`,
    /// `approve`...): false once a transition consumed it.
    #[napi(getter, catch_unwind)]
    pub fn live(&self) -> bool {
        self.handle.lock().is_ok_and(|slot| slot.is_some())
    }

    /// `result` with the trim annotations added to its `_meta`
    /// (`docs/spec/frames.md`, "Trim annotations"); unchanged without a trim.
    #[napi(
        catch_unwind,
        ts_args_type = "result: Record<string, unknown>",
        ts_return_type = "Record<string, unknown>"
    )]
    pub fn annotate(&self, env: Env, result: Value) -> napi::Result<Value> {
        let mut result = result;
        let annotated = match self.handle.lock().ok().as_deref() {
            Some(Some(Handle::Grant(grant))) => {
                grant.annotate(&mut result);
                Ok(())
            }
            _ => Err(self.not_live("annotate")),
        };
        annotated
            .map(|()| result)
            .map_err(|failure| failure.into_js(&env))
    }

    /// The completion ran: settles the token budgets with `usageTokens`
    /// (input plus output, as the provider reported them;
    /// `docs/spec/evaluation.md`, "Settlement").
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn complete(&self, usage_tokens: f64) -> AsyncTask<Job<(), ()>> {
        let grant = match (tokens(usage_tokens), self.take_grant("complete")) {
            (Ok(usage), Ok(grant)) => (usage, grant),
            (Err(failure), Ok(grant)) => {
                self.put_back(Handle::Grant(grant));
                return Job::reject(failure);
            }
            (_, Err(failure)) => return Job::reject(failure),
        };
        let (usage, grant) = grant;
        Job::spawn(
            move || {
                grant
                    .complete(usage)
                    .map_err(|error| Failure::runtime(&error))
            },
            keep,
        )
    }

    /// The completion missed the deadline: resolves to the `deny` decision
    /// to answer with (`docs/spec/evaluation.md`, "Deadline miss").
    #[napi(catch_unwind, ts_return_type = "Promise<Decision>")]
    pub fn deadline_missed(&self) -> AsyncTask<Job<Next, Decision>> {
        let grant = match self.take_grant("deadlineMissed") {
            Ok(grant) => grant,
            Err(failure) => return Job::reject(failure),
        };
        let (id, original) = (self.id(), self.original.clone());
        Job::spawn(
            move || {
                let denial = grant
                    .deadline_missed()
                    .map_err(|error| Failure::runtime(&error))?;
                Ok(Next(Decision::denial(&denial, id, original)))
            },
            next,
        )
    }

    /// The user said yes: resolves to the `allow` or `trim` decision to run
    /// (`docs/spec/evaluation.md`, "Step 9: Consent").
    #[napi(catch_unwind, ts_return_type = "Promise<Decision>")]
    pub fn approve(&self) -> AsyncTask<Job<Next, Decision>> {
        let pending = match self.take_pending("approve") {
            Ok(pending) => pending,
            Err(failure) => return Job::reject(failure),
        };
        let (id, original) = (self.id(), self.original.clone());
        Job::spawn(
            move || {
                let grant = pending
                    .approve()
                    .map_err(|error| Failure::runtime(&error))?;
                Ok(Next(Decision::granted(grant, id, original)))
            },
            next,
        )
    }

    /// The user said no: resolves to the `deny` decision (`user.denied`).
    /// The user's word is answered even if the store fails to take it; the
    /// refusal is then offered to the store once more.
    #[napi(catch_unwind, ts_return_type = "Promise<Decision>")]
    pub fn refuse(&self) -> AsyncTask<Job<Next, Decision>> {
        let pending = match self.take_pending("refuse") {
            Ok(pending) => pending,
            Err(failure) => return Job::reject(failure),
        };
        let (id, original) = (self.id(), self.original.clone());
        Job::spawn(
            move || {
                let (denial, unrecorded) = pending.refuse().into_parts();
                if let Some(unrecorded) = unrecorded {
                    // A second failure leaves the refusal unstored: the user
                    // may be asked again, never answered otherwise.
                    let _still_unrecorded = unrecorded.record();
                }
                Ok(Next(Decision::denial(&denial, id, original)))
            },
            next,
        )
    }

    /// Nobody answered the consent prompt (the server cancelled, the
    /// prompt failed): nothing is stored.
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn abandon(&self) -> AsyncTask<Job<(), ()>> {
        let pending = match self.take_pending("abandon") {
            Ok(pending) => pending,
            Err(failure) => return Job::reject(failure),
        };
        Job::spawn(
            move || pending.abandon().map_err(|error| Failure::runtime(&error)),
            keep,
        )
    }
}

/// A token count from JavaScript: a non-negative integer.
fn tokens(usage: f64) -> Result<u64, Failure> {
    // 2^53: every integer below it is exact in a JavaScript number.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if usage.is_finite() && usage >= 0.0 && usage.fract() == 0.0 && usage < EXACT {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "checked above: a non-negative integer below 2^53"
        )]
        Ok(usage as u64)
    } else {
        Err(Failure::new(
            "binding.bad_usage",
            format!("usageTokens must be a non-negative integer, not {usage}"),
        ))
    }
}
