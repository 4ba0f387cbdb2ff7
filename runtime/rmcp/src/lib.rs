#![doc = include_str!("../README.md")]
// Sampling is deprecated in MCP 2026-07-28 (SEP-2577), and rmcp marks every
// sampling type `#[deprecated]`; servers speaking 2025-11-25 still send it,
// and answering it under a policy is the whole point of this crate.
#![expect(
    deprecated,
    reason = "sampling/createMessage is what this crate decides"
)]

#[cfg(feature = "testing")]
pub mod testing;
mod typed;

pub use typed::typed_request;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcpolicy_runtime::engine::{ClientContext, Decision, Denial, Grant};
use mcpolicy_runtime::frame::{Annotations, DenialData};
use mcpolicy_runtime::{Engine, Error};
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ErrorCode,
    ErrorData, Implementation, MetaObject, ProtocolVersion, SamplingCapability,
};
use rmcp::service::{RequestContext, RoleClient};
use serde_json::{Map, Value};

/// The LLM call: the one part of a client this crate does not have.
///
/// It receives the request *as the policy lets it run* (includeContext,
/// maxTokens and model hints already lowered by a trim) and returns the
/// completion with the tokens it consumed, which settle the server's token
/// budgets. The future is dropped when the policy's deadline passes, so an
/// implementation should cancel its HTTP call on drop (reqwest does).
pub trait Provider: Send + Sync + 'static {
    /// Runs one completion.
    fn complete(
        &self,
        params: CreateMessageRequestParams,
    ) -> impl Future<Output = Result<Completion, ProviderError>> + Send;
}

/// A completion and what it cost.
#[derive(Debug, Clone)]
pub struct Completion {
    /// What the server receives (the policy adds `_meta` to it after a trim).
    pub result: CreateMessageResult,
    /// Input plus output tokens as the provider billed them.
    pub usage_tokens: u64,
}

/// The provider failed; the server receives a -32603 error with this message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    /// What went wrong, for the server and the logs.
    pub message: String,
    /// Tokens billed despite the failure, if the provider said; `None` keeps
    /// the whole `maxTokens` reservation counted against the budget (the safe side).
    pub usage_tokens: Option<u64>,
}

/// Asks the user whether a server may run a request (`consent always` or
/// `first` in the policy). With `consent first` the answer is remembered per
/// request identity, durably with the SQLite store: the user is asked once.
pub trait ConsentPrompt: Send + Sync + 'static {
    /// Shows the request and resolves to the user's answer (`true` = approve).
    fn ask(&self, request: ConsentRequest) -> impl Future<Output = bool> + Send;
}

/// What a consent dialog shows.
#[derive(Debug, Clone)]
pub struct ConsentRequest {
    /// The server asking, as the user named it in the client's configuration.
    pub server_id: String,
    /// The request identity the answer is stored under.
    pub identity: String,
    /// The request as it will run if approved (after trims).
    pub params: CreateMessageRequestParams,
    /// The trims the policy made, e.g. `includeContext` narrowed.
    pub annotations: Annotations,
}

/// Counters a client can show or alert on; every one is also what the
/// end-to-end test asserts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Consent dialogs shown.
    pub consent_prompts: u64,
    /// Calls into the [`Provider`] (completions started).
    pub provider_calls: u64,
    /// Requests that ran as sent.
    pub allowed: u64,
    /// Requests that ran narrowed, answered with `_meta` annotations.
    pub trimmed: u64,
    /// Requests refused with a policy or user denial (replays included).
    pub denied: u64,
    /// Denials answered from the decision store (no consent, no spend).
    pub replayed_denials: u64,
    /// Completions that missed the policy's deadline.
    pub deadline_misses: u64,
    /// Token settlements that failed (the reservation stays counted).
    pub settle_failures: u64,
}

/// Where the engine's calls (each one a store transaction) run.
///
/// The engine's API is synchronous. A durable store waits on the disk (the
/// SQLite store commits and fsyncs every decision) or on the network (the
/// PostgreSQL store, which also drives a tokio runtime of its own and so
/// must not be entered from an async worker); run on an async worker, that
/// wait stalls every other task the worker would have polled, the
/// connection's own I/O included. The memory store never waits on I/O: a
/// call takes microseconds, less than the hop to another thread.
/// `README.md`, "Store calls", has the measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreCalls {
    /// On tokio's blocking pool (`tokio::task::spawn_blocking`): for the
    /// SQLite and PostgreSQL stores, and any store that can block. The
    /// default: safe with every store.
    #[default]
    Blocking,
    /// On the task that handles the request: for the memory store alone.
    Inline,
}

#[derive(Debug, Default)]
struct Counters {
    consent_prompts: AtomicU64,
    provider_calls: AtomicU64,
    allowed: AtomicU64,
    trimmed: AtomicU64,
    denied: AtomicU64,
    replayed_denials: AtomicU64,
    deadline_misses: AtomicU64,
    settle_failures: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// An rmcp [`ClientHandler`] that decides every `sampling/createMessage` of
/// one server connection with the mcpolicy [`Engine`].
///
/// One `PolicyClient` per server connection: `server_id` is the name the
/// *user* gave that server in the client's configuration (the key the policy's
/// `server "…"` blocks match), never the name the server reports about itself.
/// Give every connection a clone of one [`Engine`] (cheap: clones share the
/// policy and the store) so they count against the same store. Cloning a
/// `PolicyClient` is cheap and clones share counters.
#[derive(Debug)]
pub struct PolicyClient<P, C> {
    engine: Engine,
    server_id: Arc<str>,
    provider: Arc<P>,
    consent: Arc<C>,
    config: ClientConfig,
    store_calls: StoreCalls,
    counters: Arc<Counters>,
}

impl<P, C> Clone for PolicyClient<P, C> {
    fn clone(&self) -> Self {
        PolicyClient {
            engine: self.engine.clone(),
            server_id: self.server_id.clone(),
            provider: self.provider.clone(),
            consent: self.consent.clone(),
            config: self.config.clone(),
            store_calls: self.store_calls,
            counters: self.counters.clone(),
        }
    }
}

impl<P: Provider, C: ConsentPrompt> PolicyClient<P, C> {
    /// A client for the server the user calls `server_id`.
    ///
    /// It declares the `sampling` capability with `context` (the policy decides
    /// how much context a request gets) and speaks MCP 2025-11-25, the last
    /// revision in which servers send `sampling/createMessage` as a request.
    pub fn new(engine: Engine, server_id: impl Into<String>, provider: P, consent: C) -> Self {
        let mut sampling = SamplingCapability::default();
        sampling.context = Some(Map::new());
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(sampling);
        let config = ClientConfig::new(
            capabilities,
            Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
        PolicyClient {
            engine,
            server_id: Arc::from(server_id.into()),
            provider: Arc::new(provider),
            consent: Arc::new(consent),
            config,
            store_calls: StoreCalls::default(),
            counters: Arc::default(),
        }
    }

    /// Replaces what the client announces in `initialize` (name, other
    /// capabilities). Whether it declares `sampling.context` is what the
    /// policy is told about the client.
    pub fn with_config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// Where the engine's calls run ([`StoreCalls::Blocking`] unless set):
    /// [`StoreCalls::Inline`] only with a [`MemoryStore`](mcpolicy_runtime::store::MemoryStore).
    pub fn with_store_calls(mut self, store_calls: StoreCalls) -> Self {
        self.store_calls = store_calls;
        self
    }

    /// The server this client talks to, as the policy knows it.
    pub fn server_id(&self) -> &str {
        &self.server_id
    }

    /// The engine deciding for this client.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The provider this client calls.
    pub fn provider(&self) -> &P {
        &self.provider
    }

    /// The consent prompt this client shows.
    pub fn consent(&self) -> &C {
        &self.consent
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ClientStats {
        let c = &*self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ClientStats {
            consent_prompts: get(&c.consent_prompts),
            provider_calls: get(&c.provider_calls),
            allowed: get(&c.allowed),
            trimmed: get(&c.trimmed),
            denied: get(&c.denied),
            replayed_denials: get(&c.replayed_denials),
            deadline_misses: get(&c.deadline_misses),
            settle_failures: get(&c.settle_failures),
        }
    }

    fn context(&self) -> ClientContext {
        let declared = self
            .config
            .capabilities
            .sampling
            .as_ref()
            .is_some_and(|sampling| sampling.context.is_some());
        ClientContext::with_sampling_context(declared)
    }

    /// Runs `job`, an engine call, where [`StoreCalls`] says.
    async fn on_store<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ErrorData> {
        match self.store_calls {
            StoreCalls::Inline => Ok(job()),
            StoreCalls::Blocking => tokio::task::spawn_blocking(job).await.map_err(|err| {
                internal(
                    &self.server_id,
                    &format!("policy engine task failed: {err}"),
                )
            }),
        }
    }

    /// What [`ClientHandler::create_message`] runs: decides `params` and
    /// carries the decision out, abandoning the completion when `cancelled`
    /// resolves (rmcp passes its request's cancellation). Every path answers
    /// the server: a result, or an error whose `data` says why. Public for a
    /// caller outside rmcp's service loop (a benchmark, another transport).
    pub async fn answer(
        &self,
        params: CreateMessageRequestParams,
        cancelled: impl Future<Output = ()>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = typed_request(&params, self.engine.policy().table().protocol)
            .map_err(|err| ErrorData::new(ErrorCode(err.code()), err.to_string(), None))?;
        let server = self.server_id.clone();
        let ctx = self.context();
        let engine = self.engine.clone();
        let (request, decided) = self
            .on_store(move || {
                let decided = engine.decide_request(&server, &request, &ctx);
                (request, decided)
            })
            .await?;
        let decision = decided.map_err(|err| engine_error(&err))?;

        let grant = match decision {
            Decision::Deny(denial) => return Err(self.deny(&denial)),
            Decision::Allow(grant) | Decision::Trim(grant) => grant,
            Decision::NeedsConsent(pending) => {
                // Show what will actually run: the trims are already applied.
                let prompt = ConsentRequest {
                    server_id: pending.server_id().to_owned(),
                    identity: pending.identity().to_owned(),
                    params: to_rmcp_params(pending.params(request.params()), &self.server_id)?,
                    annotations: pending.annotations().clone(),
                };
                bump(&self.counters.consent_prompts);
                if self.consent.ask(prompt).await {
                    self.on_store(move || pending.approve())
                        .await?
                        .map_err(|err| engine_error(&err))?
                } else {
                    let denial = self
                        .on_store(move || pending.refuse().recorded())
                        .await?
                        .map_err(|err| engine_error(&err))?;
                    return Err(self.deny(&denial));
                }
            }
        };
        bump(if grant.is_trim() {
            &self.counters.trimmed
        } else {
            &self.counters.allowed
        });
        self.run(grant, request.params(), cancelled).await
    }

    fn deny(&self, denial: &Denial) -> ErrorData {
        bump(&self.counters.denied);
        if denial.replayed() {
            bump(&self.counters.replayed_denials);
        }
        denial_error(denial)
    }

    /// Runs the completion under the grant's deadline, settles the token
    /// budgets and announces any trim in `result._meta`. If the server cancels
    /// its request (`cancelled` resolves) the completion is abandoned.
    async fn run(
        &self,
        grant: Grant,
        original: &Map<String, Value>,
        cancelled: impl Future<Output = ()>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let params = to_rmcp_params(grant.params(original), &self.server_id)?;
        bump(&self.counters.provider_calls);
        let call = within(grant.deadline_ms(), self.provider.complete(params));
        // An abandoned completion (deadline or cancel) keeps its reservation
        // counted: the provider may have billed it.
        let outcome = tokio::select! {
            outcome = call => outcome,
            () = cancelled => {
                return Err(ErrorData::internal_error("sampling cancelled by the server", None));
            }
        };
        let Some(outcome) = outcome else {
            bump(&self.counters.deadline_misses);
            let denial = self
                .on_store(move || grant.deadline_missed())
                .await?
                .map_err(|err| engine_error(&err))?;
            return Err(self.deny(&denial));
        };
        match outcome {
            Ok(Completion {
                mut result,
                usage_tokens,
            }) => {
                if !grant.model_allowed(&result.model) {
                    // `docs/spec/frames.md`, "A result from a model outside
                    // `models`": the completion never reaches the server.
                    let denial = self
                        .on_store(move || grant.model_refused(Some(usage_tokens)))
                        .await?
                        .map_err(|err| engine_error(&err))?;
                    return Err(self.deny(&denial));
                }
                annotate(&mut result, grant.annotations());
                self.settle(grant, usage_tokens).await;
                Ok(result)
            }
            Err(error) => {
                if let Some(used) = error.usage_tokens {
                    self.settle(grant, used).await;
                }
                Err(ErrorData::internal_error(
                    format!("completion failed: {}", error.message),
                    None,
                ))
            }
        }
    }

    /// Replaces the `maxTokens` reservation with the real usage. A failure
    /// leaves the reservation counted (over-counting is the safe side) and
    /// does not take the paid-for completion away from the server.
    async fn settle(&self, grant: Grant, usage_tokens: u64) {
        let settled = self.on_store(move || grant.complete(usage_tokens)).await;
        if !matches!(settled, Ok(Ok(()))) {
            bump(&self.counters.settle_failures);
        }
    }
}

impl<P: Provider, C: ConsentPrompt> ClientHandler for PolicyClient<P, C> {
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.answer(params, context.ct.cancelled()).await
    }

    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }
}

/// `call` under an optional deadline; `None` when the deadline passed.
async fn within<T>(deadline_ms: Option<u64>, call: impl Future<Output = T>) -> Option<T> {
    match deadline_ms {
        Some(ms) => tokio::time::timeout(Duration::from_millis(ms), call)
            .await
            .ok(),
        None => Some(call.await),
    }
}

/// The runtime's params (possibly lowered) as rmcp's type, for the provider.
fn to_rmcp_params(
    params: Map<String, Value>,
    server_id: &str,
) -> Result<CreateMessageRequestParams, ErrorData> {
    serde_json::from_value(Value::Object(params)).map_err(|err| {
        internal(
            server_id,
            &format!("lowered request no longer fits rmcp's type: {err}"),
        )
    })
}

/// The JSON-RPC error for a denial: its code, its message and its typed
/// `data` (`reason`, `server`, `retryable`, `resetsAt`/`retryAfter`). rmcp
/// serialises `data` from a `serde_json::Value`, so the members arrive in
/// serde_json's key order: the same bytes on every replay.
pub fn denial_error(denial: &Denial) -> ErrorData {
    ErrorData::new(
        ErrorCode(denial.code()),
        denial.message(),
        Some(denial.data().to_value()),
    )
}

/// Adds the trim annotations (`_meta.context`, `_meta.maxTokens`,
/// `_meta.model`) to the result; keys the provider already set are kept, as
/// `mcpolicy_runtime::engine::Grant::annotate` does. rmcp flattens the result's
/// message into the result, so `message.meta` is `result._meta` on the wire.
pub fn annotate(result: &mut CreateMessageResult, annotations: &Annotations) {
    if annotations.is_empty() {
        return;
    }
    let meta = result.message.meta.get_or_insert_with(MetaObject::default);
    for (key, value) in annotations.to_meta() {
        meta.0.entry(key).or_insert(value);
    }
}

/// The engine could not decide (the store failed): the request is refused
/// with the runtime's fail-closed error (-32603, `runtime.store_unavailable`).
fn engine_error(error: &Error) -> ErrorData {
    ErrorData::new(
        ErrorCode(error.code()),
        error.message(),
        error.data().map(|data| data.to_value()),
    )
}

/// This client failed on its own (its blocking task, rmcp's types): refused
/// the way the runtime refuses when its store fails, so a server sees one
/// shape for "the client could not decide".
///
/// `detail` goes to this process's standard error, for its operator, and
/// never into the frame: the server gets the runtime's fixed message
/// (`docs/spec/frames.md`, "Store failures").
fn internal(server_id: &str, detail: &str) -> ErrorData {
    eprintln!("mcpolicy: sampling request of `{server_id}` refused: {detail}");
    ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        "Sampling denied: decision store unavailable",
        Some(DenialData::store_unavailable(server_id).to_value()),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use mcpolicy_runtime::frame::{ContextTrim, MaxTokensTrim};
    use mcpolicy_runtime::table::ContextScope;
    use rmcp::model::SamplingMessage;
    use serde_json::json;

    use super::*;

    #[test]
    fn annotate_writes_result_meta_and_keeps_provider_keys() {
        let annotations = Annotations {
            context: Some(ContextTrim {
                requested: ContextScope::AllServers,
                applied: ContextScope::None,
            }),
            max_tokens: Some(MaxTokensTrim {
                requested: 9000,
                applied: 4096,
            }),
            model: None,
        };
        let mut result =
            CreateMessageResult::new(SamplingMessage::assistant_text("hi"), "m".to_owned());
        let mut provider_meta = MetaObject::default();
        provider_meta
            .0
            .insert("maxTokens".into(), json!("provider's own"));
        result.message.meta = Some(provider_meta);

        annotate(&mut result, &annotations);
        let wire = serde_json::to_value(&result).unwrap();
        assert_eq!(
            wire["_meta"]["context"],
            json!({"requested": "allServers", "applied": "none", "reason": "policy.max_scope"})
        );
        assert_eq!(wire["_meta"]["maxTokens"], "provider's own");
    }

    #[test]
    fn annotate_leaves_an_allow_untouched() {
        let mut result =
            CreateMessageResult::new(SamplingMessage::assistant_text("hi"), "m".to_owned());
        annotate(&mut result, &Annotations::default());
        assert!(result.message.meta.is_none());
    }

    #[test]
    fn engine_failures_become_fail_closed_errors() {
        let failure = Error::Store {
            server: "srv".into(),
            source: mcpolicy_runtime::store::StoreError::Poisoned,
        };
        let error = engine_error(&failure);
        assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
        let data = error.data.unwrap();
        assert_eq!(data["reason"], "runtime.store_unavailable");
        assert_eq!(data["server"], "srv");
        // The same error as the runtime's own reply for it.
        let reply: Value = serde_json::from_slice(&failure.reply(Some(&json!(7)))).unwrap();
        assert_eq!(reply["error"]["message"], error.message.as_ref());
        assert_eq!(reply["error"]["data"], data);

        let own = internal("srv", "task failed");
        assert_eq!(own.code, ErrorCode::INTERNAL_ERROR);
        assert_eq!(own.data.unwrap()["reason"], "runtime.store_unavailable");
        assert_eq!(own.message, reply["error"]["message"].as_str().unwrap());
    }
}
