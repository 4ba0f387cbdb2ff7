//! `mcpolicy._mcpolicy`: the mcpolicy runtime as a CPython extension module
//! (PyO3, abi3). The Python package around it (`python/mcpolicy/`) adds
//! the adapter for the official `mcp` SDK and the typed stubs.
//!
//! Every call that may touch the decision store releases the GIL
//! ([`Python::detach`]): an SQLite commit or a PostgreSQL round trip never
//! holds up another Python thread, and the `*_async` methods run the same
//! call on a worker thread (`asyncio.to_thread`) so an event loop never
//! waits on the store. JSON crosses the boundary as text, read by the
//! runtime's own strict parser (`docs/spec/evaluation.md`, "Step 1:
//! Validation"), so an identity computed here is the Rust runtime's, byte
//! for byte (`docs/spec/identity.md`).
//!
//! Nothing reaches Python as a panic: every runtime failure is an
//! `mcpolicy.Error` with a stable `code`, and a panic inside the runtime
//! (a bug) is caught and reported as `binding.panic`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use mcpolicy_runtime::clock::{Clock, SystemClock};
use mcpolicy_runtime::engine::{self, Answer, ClientContext, Decision};
use mcpolicy_runtime::frame::{Annotations, Timing};
use mcpolicy_runtime::jsonrpc::{INTERNAL_ERROR, SAMPLING_METHOD};
use mcpolicy_runtime::store::{DecisionStore, MemoryStore, SqliteStore, StoreError};
use mcpolicy_runtime::{identity, request};
use mcpolicy_store_postgres::{PostgresOptions, PostgresStore};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use serde_json::{Map, Value};

create_exception!(
    _mcpolicy,
    Error,
    PyException,
    "A failure of the policy runtime. `code` is stable (`store.busy`, `table.digest_mismatch`, `request.invalid_params`, ...), `jsonrpc_code` the JSON-RPC code of the frame, `reply` the JSON-RPC error response to send (id as given), `data` its `error.data` or None."
);

/// What an `mcpolicy.Error` carries, built without the GIL.
struct Failure {
    code: String,
    jsonrpc_code: i32,
    message: String,
    data: Option<Value>,
    reply: Option<Vec<u8>>,
}

impl Failure {
    fn engine(error: &mcpolicy_runtime::Error, id: Option<&Value>) -> Failure {
        let code = match error {
            mcpolicy_runtime::Error::Store { source, .. } => source.code().to_owned(),
            mcpolicy_runtime::Error::Table(table) => table.code().to_owned(),
            mcpolicy_runtime::Error::Request(request) => request_code(request.code()).to_owned(),
            _ => "runtime.error".to_owned(),
        };
        Failure {
            code,
            jsonrpc_code: error.code(),
            message: error.message(),
            data: error.data().map(|data| data.to_value()),
            reply: Some(error.reply(id)),
        }
    }

    fn store(error: &StoreError) -> Failure {
        Failure {
            code: error.code().to_owned(),
            jsonrpc_code: INTERNAL_ERROR,
            message: error.to_string(),
            data: None,
            reply: None,
        }
    }

    fn rejection(rejection: &request::Rejection) -> Failure {
        Failure {
            code: request_code(rejection.code()).to_owned(),
            jsonrpc_code: rejection.code(),
            message: rejection.error.to_string(),
            data: None,
            reply: Some(rejection.reply()),
        }
    }

    /// A failure of this binding itself (a misuse, a caught panic).
    fn binding(code: &str, message: impl Into<String>) -> Failure {
        Failure {
            code: code.to_owned(),
            jsonrpc_code: INTERNAL_ERROR,
            message: message.into(),
            data: None,
            reply: None,
        }
    }

    fn into_py(self, py: Python<'_>) -> PyErr {
        let err = Error::new_err(self.message.clone());
        let value = err.value(py);
        let data = match &self.data {
            Some(data) => to_py(py, data),
            None => Ok(py.None().into_bound(py)),
        };
        let set = (|| -> PyResult<()> {
            value.setattr("code", &self.code)?;
            value.setattr("jsonrpc_code", self.jsonrpc_code)?;
            value.setattr("message", &self.message)?;
            value.setattr("data", data?)?;
            match &self.reply {
                Some(reply) => value.setattr("reply", PyBytes::new(py, reply))?,
                None => value.setattr("reply", py.None())?,
            }
            Ok(())
        })();
        match set {
            Ok(()) => err,
            Err(other) => other,
        }
    }
}

/// The stable code of a request refused at validation, by its JSON-RPC code.
fn request_code(code: i32) -> &'static str {
    match code {
        mcpolicy_runtime::jsonrpc::PARSE_ERROR => "request.parse_error",
        mcpolicy_runtime::jsonrpc::INVALID_REQUEST => "request.invalid_request",
        _ => "request.invalid_params",
    }
}

/// Runs `work` without the GIL; a panic in it becomes `binding.panic`.
fn detached<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> Result<T, Failure> + Send,
) -> PyResult<T> {
    let outcome = py.detach(|| {
        catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| {
            Err(Failure::binding(
                "binding.panic",
                "the policy runtime panicked (a bug; the request is refused)",
            ))
        })
    });
    outcome.map_err(|failure| failure.into_py(py))
}

static JSON: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
static TO_THREAD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn json_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(JSON
        .get_or_try_init(py, || py.import("json").map(Bound::unbind))?
        .bind(py))
}

/// A JSON value as Python objects (`json.loads` of its text).
fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value)
        .map_err(|err| Failure::binding("binding.json", err.to_string()).into_py(py))?;
    json_module(py)?.call_method1("loads", (text,))
}

/// JSON text of `obj`: bytes and str are taken as written (the runtime's
/// strict parser reads them); anything else is written by `json.dumps`
/// (NaN and infinities refused: JSON has none).
fn json_text(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    if let Ok(text) = obj.cast::<PyString>() {
        return Ok(text.to_str()?.as_bytes().to_vec());
    }
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("allow_nan", false)?;
    kwargs.set_item("separators", (",", ":"))?;
    let text = json_module(py)?.call_method("dumps", (obj,), Some(&kwargs))?;
    Ok(text.cast::<PyString>()?.to_str()?.as_bytes().to_vec())
}

/// JSON text of a JSON-RPC id (a Python int or str; anything else is
/// written by `json.dumps` and judged by the runtime's validation).
fn id_text(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(text) = obj.cast::<PyString>() {
        let quoted = serde_json::to_vec(text.to_str()?)
            .map_err(|err| Failure::binding("binding.json", err.to_string()).into_py(obj.py()))?;
        return Ok(quoted);
    }
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("allow_nan", false)?;
    let text = json_module(py)?.call_method("dumps", (obj,), Some(&kwargs))?;
    Ok(text.cast::<PyString>()?.to_str()?.as_bytes().to_vec())
}

/// `obj` read as a JSON object (the params of a request, a result).
fn json_object(obj: &Bound<'_, PyAny>) -> PyResult<Map<String, Value>> {
    let text = json_text(obj)?;
    match serde_json::from_slice(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(
            Failure::binding("binding.not_an_object", "expected a JSON object").into_py(obj.py()),
        ),
        Err(err) => Err(Failure::binding("binding.json", err.to_string()).into_py(obj.py())),
    }
}

/// `asyncio.to_thread(call, *args, **kwargs)`: an awaitable that runs
/// `call` on the loop's default executor.
fn to_thread<'py>(
    call: Bound<'py, PyAny>,
    args: Vec<Bound<'py, PyAny>>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = call.py();
    let to_thread = TO_THREAD.get_or_try_init(py, || {
        py.import("asyncio")?
            .getattr("to_thread")
            .map(Bound::unbind)
    })?;
    let mut items = Vec::with_capacity(args.len() + 1);
    items.push(call);
    items.extend(args);
    to_thread.bind(py).call(PyTuple::new(py, items)?, kwargs)
}

/// A verified policy table (`mcpc compile policy.mcpolicy -o policy.table.json`).
#[pyclass(module = "mcpolicy._mcpolicy", frozen)]
struct Policy {
    inner: mcpolicy_runtime::Policy,
}

#[pymethods]
impl Policy {
    /// A table from its JSON (bytes or str); a table of an unknown format,
    /// or whose digests do not match, raises `Error` (`table.*`).
    #[staticmethod]
    fn from_json(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Policy> {
        let bytes = json_text(data)?;
        detached(py, move || {
            mcpolicy_runtime::Policy::from_json(&bytes)
                .map(|inner| Policy { inner })
                .map_err(|err| Failure::engine(&err, None))
        })
    }

    /// A table from a file.
    #[staticmethod]
    fn from_path(py: Python<'_>, path: PathBuf) -> PyResult<Policy> {
        detached(py, move || {
            let bytes = std::fs::read(&path).map_err(|err| {
                Failure::binding("table.unreadable", format!("{}: {err}", path.display()))
            })?;
            mcpolicy_runtime::Policy::from_json(&bytes)
                .map(|inner| Policy { inner })
                .map_err(|err| Failure::engine(&err, None))
        })
    }

    /// The MCP revision the table validates requests under.
    #[getter]
    fn protocol(&self) -> &'static str {
        self.inner.table().protocol.as_str()
    }

    /// The params members a request identity covers.
    #[getter]
    fn identity_fields(&self) -> Vec<String> {
        self.inner.table().identity.clone()
    }

    fn __repr__(&self) -> String {
        format!("Policy(protocol={:?})", self.protocol())
    }
}

/// A decision store: where decisions, approvals and spend live.
#[pyclass(module = "mcpolicy._mcpolicy", frozen)]
struct Store {
    inner: Arc<dyn DecisionStore>,
    kind: &'static str,
}

#[pymethods]
impl Store {
    /// In memory: forgotten when the process exits (tests, one-shot tools).
    #[staticmethod]
    fn memory() -> Store {
        Store {
            inner: Arc::new(MemoryStore::new()),
            kind: "memory",
        }
    }

    /// One SQLite file, durable across restarts and kill -9
    /// (`docs/spec/store.md`).
    #[staticmethod]
    fn sqlite(py: Python<'_>, path: PathBuf) -> PyResult<Store> {
        detached(py, move || {
            SqliteStore::open(&path)
                .map(|store| Store {
                    inner: Arc::new(store),
                    kind: "sqlite",
                })
                .map_err(|err| Failure::store(&err))
        })
    }

    /// A PostgreSQL store shared by a fleet (`postgres://…` or a libpq
    /// `key=value` string); `schema` keeps one policy's decisions and
    /// counters apart from another's.
    #[staticmethod]
    #[pyo3(signature = (spec, *, schema=None, call_timeout_ms=None))]
    fn postgres(
        py: Python<'_>,
        spec: String,
        schema: Option<String>,
        call_timeout_ms: Option<u64>,
    ) -> PyResult<Store> {
        detached(py, move || {
            let mut options = PostgresOptions::default();
            if let Some(schema) = schema {
                options.schema = schema;
            }
            if let Some(ms) = call_timeout_ms {
                options.call_timeout = std::time::Duration::from_millis(ms);
                options.statement_timeout = options.call_timeout;
            }
            PostgresStore::open_with(&spec, &options)
                .map(|store| Store {
                    inner: Arc::new(store),
                    kind: "postgres",
                })
                .map_err(|err| Failure::store(&err))
        })
    }

    /// `memory`, `sqlite` or `postgres`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn __repr__(&self) -> String {
        format!("Store.{}()", self.kind)
    }
}

/// A clock the test sets: `now_ms` milliseconds since the Unix epoch.
#[pyclass(module = "mcpolicy._mcpolicy", frozen)]
struct ManualClock {
    inner: Arc<mcpolicy_runtime::clock::ManualClock>,
}

#[pymethods]
impl ManualClock {
    #[new]
    fn new(now_ms: i64) -> ManualClock {
        ManualClock {
            inner: Arc::new(mcpolicy_runtime::clock::ManualClock::new(now_ms)),
        }
    }

    /// The instant, in milliseconds since the Unix epoch.
    fn now(&self) -> i64 {
        self.inner.now()
    }

    fn set(&self, now_ms: i64) {
        self.inner.set(now_ms);
    }

    /// Moves the clock by `ms` (may be negative); returns the new instant.
    fn advance(&self, ms: i64) -> i64 {
        self.inner.advance(ms)
    }
}

/// Decides `sampling/createMessage` requests with a policy and a store.
#[pyclass(module = "mcpolicy._mcpolicy", frozen)]
struct Engine {
    inner: engine::Engine,
}

#[pymethods]
impl Engine {
    /// `clock`: a `ManualClock` for tests; the system clock by default.
    #[new]
    #[pyo3(signature = (policy, store, clock=None))]
    fn new(policy: &Policy, store: &Store, clock: Option<&ManualClock>) -> Engine {
        let clock: Arc<dyn Clock> = match clock {
            Some(clock) => clock.inner.clone(),
            None => Arc::new(SystemClock),
        };
        Engine {
            inner: engine::Engine::new(policy.inner.clone(), store.inner.clone(), clock),
        }
    }

    /// Decides a request of server `server_id` (the name the user gave the
    /// server, never the one it reports) from its `params` (a dict, or
    /// JSON text as bytes or str). `id` is the request's JSON-RPC id
    /// (it goes into `Error.reply`). Returns a `Grant` (allow or trim), a
    /// `Denial` or a `PendingConsent`; raises `Error` for a request that is
    /// not valid (`request.*`) or a store that failed (`store.*`, the
    /// request refused: fail closed).
    #[pyo3(signature = (server_id, params, *, id=None, sampling_context=false))]
    fn decide<'py>(
        &self,
        py: Python<'py>,
        server_id: String,
        params: &Bound<'py, PyAny>,
        id: Option<&Bound<'py, PyAny>>,
        sampling_context: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = json_text(params)?;
        // Without an id the envelope carries 0 (a request needs one) and the
        // decision reports none: `Denial.reply()` then says `null`.
        let (id, given) = match id {
            Some(id) if !id.is_none() => (id_text(id)?, true),
            _ => (b"0".to_vec(), false),
        };
        let mut envelope = Vec::with_capacity(params.len() + id.len() + 80);
        envelope.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        envelope.extend_from_slice(&id);
        envelope.extend_from_slice(br#","method":""#);
        envelope.extend_from_slice(SAMPLING_METHOD.as_bytes());
        envelope.extend_from_slice(br#"","params":"#);
        envelope.extend_from_slice(&params);
        envelope.push(b'}');
        self.decide_bytes(py, server_id, envelope, sampling_context, given)
    }

    /// Decides a whole JSON-RPC request as received (bytes), e.g. read off
    /// a transport; its id comes from the bytes.
    #[pyo3(signature = (server_id, message, *, sampling_context=false))]
    fn decide_message<'py>(
        &self,
        py: Python<'py>,
        server_id: String,
        message: &Bound<'py, PyAny>,
        sampling_context: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let bytes = json_text(message)?;
        self.decide_bytes(py, server_id, bytes, sampling_context, true)
    }

    /// `decide` as an awaitable: runs on a worker thread, so the event
    /// loop goes on while the store answers.
    #[pyo3(signature = (server_id, params, *, id=None, sampling_context=false))]
    fn decide_async<'py>(
        slf: &Bound<'py, Self>,
        server_id: Bound<'py, PyAny>,
        params: Bound<'py, PyAny>,
        id: Option<Bound<'py, PyAny>>,
        sampling_context: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item("id", id)?;
        kwargs.set_item("sampling_context", sampling_context)?;
        to_thread(
            slf.getattr("decide")?,
            vec![server_id, params],
            Some(&kwargs),
        )
    }

    /// The request identity of `params` for `server_id` (its refusal key,
    /// `docs/spec/identity.md`), under this policy's identity fields.
    fn identity(&self, server_id: &str, params: &Bound<'_, PyAny>) -> PyResult<String> {
        let params = json_object(params)?;
        Ok(self.inner.identity(server_id, &params).into_string())
    }

    /// The policy this engine decides with.
    #[getter]
    fn policy(&self) -> Policy {
        Policy {
            inner: self.inner.policy().clone(),
        }
    }
}

impl Engine {
    fn decide_bytes<'py>(
        &self,
        py: Python<'py>,
        server_id: String,
        bytes: Vec<u8>,
        sampling_context: bool,
        id_given: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let engine = self.inner.clone();
        let ctx = ClientContext::with_sampling_context(sampling_context);
        let (request, decision) =
            detached(py, move || match engine.decide(&server_id, &bytes, &ctx) {
                Answer::Decided { request, decision } => Ok((request, decision)),
                Answer::Invalid(rejection) => Err(Failure::rejection(&rejection)),
                Answer::Failed { error, .. } => Err(Failure::engine(&error, None)),
            })?;
        let id = request.id.clone().filter(|_| id_given);
        let params = Arc::new(request.into_params());
        match decision {
            Decision::Allow(grant) | Decision::Trim(grant) => {
                Ok(Bound::new(py, Grant::new(grant, &params, id))?.into_any())
            }
            Decision::Deny(denial) => Ok(Bound::new(py, Denial::new(denial, None, id))?.into_any()),
            Decision::NeedsConsent(pending) => Ok(Bound::new(
                py,
                PendingConsent {
                    inner: Mutex::new(Some(pending)),
                    params,
                    id,
                },
            )?
            .into_any()),
        }
    }
}

/// Takes the one-shot state out of `slot`, or says it was used.
fn take<T>(slot: &Mutex<Option<T>>, what: &str) -> PyResult<T> {
    lock(slot).take().ok_or_else(|| {
        Python::attach(|py| {
            Failure::binding(
                "binding.consumed",
                format!("this {what} was already settled; each decision is settled once"),
            )
            .into_py(py)
        })
    })
}

/// The lock of a one-shot slot; a poisoned lock (a panic while held) still
/// holds a consistent `Option`.
fn lock<T>(slot: &Mutex<Option<T>>) -> MutexGuard<'_, Option<T>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn meta<'py>(py: Python<'py>, annotations: &Annotations) -> PyResult<Bound<'py, PyAny>> {
    if annotations.is_empty() {
        Ok(py.None().into_bound(py))
    } else {
        to_py(py, &Value::Object(annotations.to_meta()))
    }
}

/// Permission to run the request (an allow, or a trim whose `params()` are
/// narrowed). Enforce `deadline_ms`; then settle it exactly once:
/// `complete(usage_tokens)`, `deadline_missed()`, `model_refused(...)` or
/// `refused_by_user()` (`docs/spec/evaluation.md`, "After the decision").
#[pyclass(module = "mcpolicy._mcpolicy", frozen)]
struct Grant {
    inner: Mutex<Option<engine::Grant>>,
    /// The params as the grant lets them run (narrowed by a trim).
    params: Value,
    id: Option<Value>,
    trim: bool,
    deadline_ms: Option<u64>,
    server_id: String,
    identity: String,
    replayed: bool,
    annotations: Annotations,
    allowed_models: Option<Vec<String>>,
}

impl Grant {
    fn new(grant: engine::Grant, original: &Map<String, Value>, id: Option<Value>) -> Grant {
        Grant {
            params: Value::Object(grant.params(original)),
            trim: grant.is_trim(),
            deadline_ms: grant.deadline_ms(),
            server_id: grant.server_id().to_owned(),
            identity: grant.identity().to_owned(),
            replayed: grant.replayed(),
            annotations: grant.annotations().clone(),
            allowed_models: grant
                .allowed_models()
                .map(|models| models.map(str::to_owned).collect()),
            inner: Mutex::new(Some(grant)),
            id,
        }
    }
}

#[pymethods]
impl Grant {
    /// `allow` or `trim`.
    #[getter]
    fn kind(&self) -> &'static str {
        if self.trim { "trim" } else { "allow" }
    }

    #[getter]
    fn is_trim(&self) -> bool {
        self.trim
    }

    /// Milliseconds the completion may take (`None`: no deadline).
    #[getter]
    fn deadline_ms(&self) -> Option<u64> {
        self.deadline_ms
    }

    #[getter]
    fn server_id(&self) -> &str {
        &self.server_id
    }

    /// The request identity (its refusal key).
    #[getter]
    fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether a stored approval answered (no prompt was shown).
    #[getter]
    fn replayed(&self) -> bool {
        self.replayed
    }

    /// The request's JSON-RPC id, as decided.
    #[getter]
    fn id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.id {
            Some(id) => to_py(py, id),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// The params to run the model with: as sent, narrowed by a trim
    /// (`includeContext`, `maxTokens`, model hints).
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.params)
    }

    /// The `_meta` members a trim adds to the result (`None` for an allow;
    /// `docs/spec/frames.md`, "Trim annotations").
    #[getter]
    fn meta<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        meta(py, &self.annotations)
    }

    /// The result (a dict, or JSON text) with the trim's annotations added
    /// under `_meta` (keys already there kept); returned as a new dict.
    /// `Grant.annotate` of the runtime, which this grant may no longer
    /// hold once settled: the same rule, `_meta` created if absent and its
    /// keys kept (`docs/spec/frames.md`, "Trim annotations").
    fn annotate<'py>(
        &self,
        py: Python<'py>,
        result: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut result = json_object(result)?;
        if !self.annotations.is_empty() {
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(meta) = meta else {
                return Err(Failure::binding(
                    "binding.not_an_object",
                    "the result's `_meta` is not an object",
                )
                .into_py(py));
            };
            for (key, value) in self.annotations.to_meta() {
                meta.entry(key).or_insert(value);
            }
        }
        to_py(py, &Value::Object(result))
    }

    /// The model globs the block allows (`None`: any model).
    #[getter]
    fn allowed_models(&self) -> Option<Vec<String>> {
        self.allowed_models.clone()
    }

    /// Whether a result from `model` may reach the server.
    fn model_allowed(&self, model: &str) -> PyResult<bool> {
        match lock(&self.inner).as_ref() {
            Some(grant) => Ok(grant.model_allowed(model)),
            None => Ok(true),
        }
    }

    /// Whether this grant has been settled.
    #[getter]
    fn settled(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// The completion ran: settle the token budgets with the tokens the
    /// provider reported (input plus output).
    fn complete(&self, py: Python<'_>, usage_tokens: u64) -> PyResult<()> {
        let grant = take(&self.inner, "grant")?;
        let id = self.id.clone();
        detached(py, move || {
            grant
                .complete(usage_tokens)
                .map_err(|err| Failure::engine(&err, id.as_ref()))
        })
    }

    /// The completion missed `deadline_ms`: the denial to send instead.
    fn deadline_missed(&self, py: Python<'_>) -> PyResult<Denial> {
        let grant = take(&self.inner, "grant")?;
        let id = self.id.clone();
        detached(py, move || Denial::of(grant.deadline_missed(), id))
    }

    /// The result came from a model outside `allowed_models`: the denial to
    /// send instead (`docs/spec/frames.md`, "A result from a model outside
    /// `models`"). `usage_tokens` settles what it cost; `None` keeps the
    /// reservation counted.
    #[pyo3(signature = (usage_tokens=None))]
    fn model_refused(&self, py: Python<'_>, usage_tokens: Option<u64>) -> PyResult<Denial> {
        let grant = take(&self.inner, "grant")?;
        let id = self.id.clone();
        detached(py, move || {
            Denial::of(grant.model_refused(usage_tokens), id)
        })
    }

    /// The client asked its user anyway and the user said no: stored as
    /// `user.denied`, as a refused prompt is.
    fn refused_by_user(&self, py: Python<'_>) -> PyResult<Denial> {
        let grant = take(&self.inner, "grant")?;
        let id = self.id.clone();
        detached(py, move || Ok(Denial::refusal(grant.refused_by_user(), id)))
    }

    fn complete_async<'py>(
        slf: &Bound<'py, Self>,
        usage_tokens: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("complete")?, vec![usage_tokens], None)
    }

    fn deadline_missed_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("deadline_missed")?, vec![], None)
    }

    #[pyo3(signature = (usage_tokens=None))]
    fn model_refused_async<'py>(
        slf: &Bound<'py, Self>,
        usage_tokens: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let usage = usage_tokens.unwrap_or_else(|| py.None().into_bound(py));
        to_thread(slf.getattr("model_refused")?, vec![usage], None)
    }

    fn refused_by_user_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("refused_by_user")?, vec![], None)
    }

    fn __repr__(&self) -> String {
        format!(
            "Grant(kind={:?}, server_id={:?}, identity={:?})",
            self.kind(),
            self.server_id,
            self.identity
        )
    }
}

/// The policy asks the user first (`consent always` or `first`): show
/// `params()` (what will run, trims applied), then `approve()` or
/// `refuse()`; `abandon()` if the client failed before an answer
/// (`docs/spec/evaluation.md`, "Step 9: Consent").
#[pyclass(module = "mcpolicy._mcpolicy", frozen)]
struct PendingConsent {
    inner: Mutex<Option<engine::PendingConsent>>,
    params: Arc<Map<String, Value>>,
    id: Option<Value>,
}

impl PendingConsent {
    fn read<T>(&self, what: impl FnOnce(&engine::PendingConsent) -> T) -> PyResult<T> {
        match lock(&self.inner).as_ref() {
            Some(pending) => Ok(what(pending)),
            None => Err(Python::attach(|py| {
                Failure::binding(
                    "binding.consumed",
                    "this consent was already answered; read the Grant or Denial it gave",
                )
                .into_py(py)
            })),
        }
    }
}

#[pymethods]
impl PendingConsent {
    #[getter]
    fn kind(&self) -> &'static str {
        "needs_consent"
    }

    #[getter]
    fn server_id(&self) -> PyResult<String> {
        self.read(|p| p.server_id().to_owned())
    }

    /// The request identity: a refusal is stored under it.
    #[getter]
    fn identity(&self) -> PyResult<String> {
        self.read(|p| p.identity().to_owned())
    }

    /// The params the request will run with if approved (trims applied).
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let params = self.read(|p| p.params(&self.params))?;
        to_py(py, &Value::Object(params))
    }

    /// The trims the policy made, as `_meta` members (`None`: none).
    #[getter]
    fn meta<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let annotations = self.read(|p| p.annotations().clone())?;
        meta(py, &annotations)
    }

    /// The user said yes: the grant to run (under `consent first` the
    /// approval is stored).
    fn approve(&self, py: Python<'_>) -> PyResult<Grant> {
        let pending = take(&self.inner, "consent")?;
        let params = self.params.clone();
        let id = self.id.clone();
        detached(py, move || match pending.approve() {
            Ok(grant) => Ok(Grant::new(grant, &params, id)),
            Err(err) => Err(Failure::engine(&err, id.as_ref())),
        })
    }

    /// The user said no: the denial to send (`user.denied`, stored). If the
    /// store failed to take it the denial is still returned, with
    /// `recorded` false and `record()` to try again.
    fn refuse(&self, py: Python<'_>) -> PyResult<Denial> {
        let pending = take(&self.inner, "consent")?;
        let id = self.id.clone();
        detached(py, move || Ok(Denial::refusal(pending.refuse(), id)))
    }

    /// The client failed before the user answered: no decision; the budget
    /// spend and the prompt's cooldown count are returned.
    fn abandon(&self, py: Python<'_>) -> PyResult<()> {
        let pending = take(&self.inner, "consent")?;
        let id = self.id.clone();
        detached(py, move || {
            pending
                .abandon()
                .map_err(|err| Failure::engine(&err, id.as_ref()))
        })
    }

    fn approve_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("approve")?, vec![], None)
    }

    fn refuse_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("refuse")?, vec![], None)
    }

    fn abandon_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("abandon")?, vec![], None)
    }
}

/// A refusal, with the frame to send (`docs/spec/frames.md`, "Denial frames").
#[pyclass(module = "mcpolicy._mcpolicy", frozen)]
struct Denial {
    inner: engine::Denial,
    unrecorded: Mutex<Option<engine::UnrecordedRefusal>>,
    id: Option<Value>,
    message: String,
    data: Value,
}

impl Denial {
    fn new(
        inner: engine::Denial,
        unrecorded: Option<engine::UnrecordedRefusal>,
        id: Option<Value>,
    ) -> Denial {
        Denial {
            message: inner.message(),
            data: inner.data().to_value(),
            inner,
            unrecorded: Mutex::new(unrecorded),
            id,
        }
    }

    /// The denial a transition gave, or its failure.
    fn of(
        outcome: Result<engine::Denial, mcpolicy_runtime::Error>,
        id: Option<Value>,
    ) -> Result<Denial, Failure> {
        match outcome {
            Ok(denial) => Ok(Denial::new(denial, None, id)),
            Err(err) => Err(Failure::engine(&err, id.as_ref())),
        }
    }

    /// The user's refusal: answered even when the store did not take it
    /// (then `recorded` is false and `record()` tries again).
    fn refusal(refused: engine::Refused, id: Option<Value>) -> Denial {
        let (denial, unrecorded) = refused.into_parts();
        Denial::new(denial, unrecorded, id)
    }
}

#[pymethods]
impl Denial {
    #[getter]
    fn kind(&self) -> &'static str {
        "deny"
    }

    /// The JSON-RPC error code (`error.code`).
    #[getter]
    fn code(&self) -> i32 {
        self.inner.code()
    }

    /// `error.message`.
    #[getter]
    fn message(&self) -> &str {
        &self.message
    }

    /// `error.data` (`reason`, `server`, `retryable`, `resetsAt` or
    /// `retryAfter`, ...).
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.data)
    }

    /// The reason name, e.g. `policy.budget_exhausted`.
    #[getter]
    fn reason(&self) -> &str {
        self.inner.reason()
    }

    #[getter]
    fn retryable(&self) -> bool {
        self.inner.retryable()
    }

    /// `("resetsAt", rfc3339)`, `("retryAfter", seconds)` or `None`.
    #[getter]
    fn timing<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.inner.timing() {
            Some(Timing::ResetsAt(ms)) => {
                Ok(("resetsAt", mcpolicy_runtime::clock::format_rfc3339(ms))
                    .into_pyobject(py)?
                    .into_any())
            }
            Some(Timing::RetryAfter(seconds)) => {
                Ok(("retryAfter", seconds).into_pyobject(py)?.into_any())
            }
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// Whether the store answered (a replay of a stored denial).
    #[getter]
    fn replayed(&self) -> bool {
        self.inner.replayed()
    }

    #[getter]
    fn server_id(&self) -> &str {
        self.inner.server()
    }

    /// The JSON-RPC error response to send, for `id` (the decided
    /// request's id when not given).
    #[pyo3(signature = (id=None))]
    fn reply<'py>(
        &self,
        py: Python<'py>,
        id: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let given = match id {
            Some(id) if !id.is_none() => Some(
                serde_json::from_slice::<Value>(&id_text(id)?)
                    .map_err(|err| Failure::binding("binding.json", err.to_string()).into_py(py))?,
            ),
            _ => None,
        };
        let id = given.as_ref().or(self.id.as_ref());
        Ok(PyBytes::new(py, &self.inner.reply(id)))
    }

    /// `{"code", "message", "data"}`: the fields of the `mcp` SDK's
    /// `ErrorData` (`mcp.types.ErrorData(**denial.error_data())`).
    fn error_data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("code", self.inner.code())?;
        dict.set_item("message", &self.message)?;
        dict.set_item("data", to_py(py, &self.data)?)?;
        Ok(dict)
    }

    /// False when the user's refusal is not yet in the store (it failed);
    /// `record()` tries again.
    #[getter]
    fn recorded(&self) -> bool {
        lock(&self.unrecorded).is_none()
    }

    /// Stores a refusal the store failed to take; no-op when recorded.
    fn record(&self, py: Python<'_>) -> PyResult<()> {
        let Some(owed) = lock(&self.unrecorded).take() else {
            return Ok(());
        };
        let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(|| owed.record())));
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(still)) => {
                let failure = Failure::engine(still.error(), self.id.as_ref());
                *lock(&self.unrecorded) = Some(still);
                Err(failure.into_py(py))
            }
            Err(_) => {
                Err(Failure::binding("binding.panic", "the policy runtime panicked").into_py(py))
            }
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Denial(code={}, reason={:?}, retryable={})",
            self.inner.code(),
            self.inner.reason(),
            self.inner.retryable()
        )
    }
}

/// The request identity of `params` for `server_id` over `fields`
/// (`docs/spec/identity.md`): the frozen vectors' function, byte for byte.
#[pyfunction]
fn request_identity(
    server_id: &str,
    params: &Bound<'_, PyAny>,
    fields: Vec<String>,
) -> PyResult<String> {
    let params = json_object(params)?;
    Ok(identity::request_identity(server_id, &params, &fields).into_string())
}

#[pymodule]
fn _mcpolicy(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_class::<Policy>()?;
    m.add_class::<Store>()?;
    m.add_class::<ManualClock>()?;
    m.add_class::<Engine>()?;
    m.add_class::<Grant>()?;
    m.add_class::<PendingConsent>()?;
    m.add_class::<Denial>()?;
    m.add_function(wrap_pyfunction!(request_identity, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
