#![doc = include_str!("../README.md")]
// Sampling is deprecated in MCP 2026-07-28 (SEP-2577), and rmcp marks every
// sampling type `#[deprecated]`; servers speaking 2025-11-25 still send it,
// and answering it under a policy is the whole point of this crate.
#![expect(
    deprecated,
    reason = "sampling/createMessage is what this crate decides"
)]

pub mod adversary;
pub mod fake;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcpolicy_runtime::engine::{ClientContext, Decision, Denial, Engine, Grant};
use mcpolicy_runtime::frame::Annotations;
use mcpolicy_runtime::request::{self, SAMPLING_METHOD, SamplingRequest};
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ErrorCode,
    ErrorData, Implementation, MetaObject, ProtocolVersion, SamplingCapability,
};
use rmcp::service::{RequestContext, RoleClient};
use serde_json::{Map, Value, json};

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
/// Share one `Arc<Engine>` between all connections so they count against the
/// same store. Cloning is cheap and clones share counters.
#[derive(Debug)]
pub struct PolicyClient<P, C> {
    engine: Arc<Engine>,
    server_id: Arc<str>,
    provider: Arc<P>,
    consent: Arc<C>,
    config: ClientConfig,
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
    pub fn new(engine: Arc<Engine>, server_id: impl Into<String>, provider: P, consent: C) -> Self {
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

    /// The server this client talks to, as the policy knows it.
    pub fn server_id(&self) -> &str {
        &self.server_id
    }

    /// The engine deciding for this client.
    pub fn engine(&self) -> &Arc<Engine> {
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

    /// Runs `job` on tokio's blocking pool: the SQLite store commits (and
    /// fsyncs) every decision, which must not stall the connection's I/O.
    async fn on_store<T: Send + 'static>(
        &self,
        job: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, ErrorData> {
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || job(&engine))
            .await
            .map_err(|err| {
                internal(
                    &self.server_id,
                    &format!("policy engine task failed: {err}"),
                )
            })
    }

    /// Decides one request and carries the decision out. Every path answers
    /// the server: a result, or an error whose `data` says why.
    async fn decide_and_run(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = sampling_request(&params, &context)?;
        let server = self.server_id.clone();
        let ctx = self.context();
        let (request, decided) = self
            .on_store(move |engine| {
                let decided = engine.decide(&server, &request, &ctx);
                (request, decided)
            })
            .await?;
        let decision = decided.map_err(|err| {
            error_from_frame(
                &err.frame(request.id.as_ref(), &self.server_id),
                &self.server_id,
            )
        })?;

        let decision = match decision {
            Decision::NeedsConsent(pending) => {
                // Show what will actually run: the trims are already applied.
                let mut shown = request.params.clone();
                pending.lowered().apply(&mut shown);
                let prompt = ConsentRequest {
                    server_id: pending.server_id().to_owned(),
                    identity: pending.identity().to_owned(),
                    params: to_rmcp_params(shown, &self.server_id)?,
                    annotations: pending.annotations().clone(),
                };
                bump(&self.counters.consent_prompts);
                let approved = self.consent.ask(prompt).await;
                self.on_store(move |engine| engine.resolve_consent(pending, approved))
                    .await?
                    .map_err(|err| {
                        error_from_frame(
                            &err.frame(request.id.as_ref(), &self.server_id),
                            &self.server_id,
                        )
                    })?
            }
            decision => decision,
        };

        match decision {
            Decision::Deny(denial) => Err(self.deny(&denial)),
            Decision::Allow(grant) => {
                bump(&self.counters.allowed);
                self.run(grant, &request.params, context.ct.cancelled())
                    .await
            }
            Decision::Trim(grant) => {
                bump(&self.counters.trimmed);
                self.run(grant, &request.params, context.ct.cancelled())
                    .await
            }
            // `resolve_consent` answers with an allow, a trim or a denial.
            Decision::NeedsConsent(_) => Err(internal(
                &self.server_id,
                "consent was asked twice for one request",
            )),
        }
    }

    fn deny(&self, denial: &Denial) -> ErrorData {
        bump(&self.counters.denied);
        if denial.replayed {
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
        let call = within(grant.deadline_ms, self.provider.complete(params));
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
            let ticket = grant.ticket.clone();
            let denial = self
                .on_store(move |engine| engine.report_deadline_miss(&ticket))
                .await?
                .map_err(|err| {
                    error_from_frame(&err.frame(None, &self.server_id), &self.server_id)
                })?;
            return Err(self.deny(&denial));
        };
        match outcome {
            Ok(Completion {
                mut result,
                usage_tokens,
            }) => {
                self.settle(&grant, usage_tokens).await;
                annotate(&mut result, &grant.annotations);
                Ok(result)
            }
            Err(error) => {
                if let Some(used) = error.usage_tokens {
                    self.settle(&grant, used).await;
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
    async fn settle(&self, grant: &Grant, usage_tokens: u64) {
        let ticket = grant.ticket.clone();
        let settled = self
            .on_store(move |engine| engine.settle(&ticket, usage_tokens))
            .await;
        if !matches!(settled, Ok(Ok(()))) {
            bump(&self.counters.settle_failures);
        }
    }
}

impl<P: Provider, C: ConsentPrompt> ClientHandler for PolicyClient<P, C> {
    fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<CreateMessageResult, ErrorData>> + Send + '_ {
        self.decide_and_run(params, context)
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

/// rmcp's typed params back to the JSON-RPC request the runtime validates and
/// hashes. rmcp already parsed the wire bytes, so duplicate keys were
/// collapsed before we see them; identity is computed over RFC 8785 canonical
/// JSON, so re-serialising does not change it.
fn sampling_request(
    params: &CreateMessageRequestParams,
    context: &RequestContext<RoleClient>,
) -> Result<SamplingRequest, ErrorData> {
    let params = serde_json::to_value(params)
        .map_err(|err| ErrorData::invalid_params(format!("unreadable params: {err}"), None))?;
    let id = serde_json::to_value(&context.id).unwrap_or(Value::Null);
    let envelope = json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": SAMPLING_METHOD,
        "params": params,
    });
    request::validate_sampling(envelope).map_err(|err| {
        ErrorData::new(
            ErrorCode(i32::try_from(err.code()).unwrap_or(ErrorCode::INVALID_PARAMS.0)),
            err.to_string(),
            None,
        )
    })
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

/// The JSON-RPC error for a denial: its code, its message, and `data` parsed
/// from the runtime's exact `data` text (`reason`, `server`, `retryable`,
/// `resetsAt`/`retryAfter`). rmcp serialises `data` from a `serde_json::Value`,
/// so the members arrive in serde_json's key order — the same bytes on every
/// replay, since the stored text is the same.
pub fn denial_error(denial: &Denial) -> ErrorData {
    let data = match serde_json::from_str::<Value>(&denial.data) {
        Ok(data) => data,
        // The runtime writes `data` itself; unparsable means a damaged store.
        Err(err) => {
            return internal(
                &denial.server,
                &format!("stored denial data is not JSON: {err}"),
            );
        }
    };
    ErrorData::new(code(denial.code), denial.message(), Some(data))
}

/// Adds the trim annotations (`_meta.context`, `_meta.maxTokens`,
/// `_meta.model`) to the result; keys the provider already set are kept, as
/// in `mcpolicy_runtime::frame::annotate_result`. rmcp flattens the result's
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

/// A JSON-RPC code from the table (always within i32: the checker bounds it).
fn code(code: i64) -> ErrorCode {
    ErrorCode(i32::try_from(code).unwrap_or(ErrorCode::INTERNAL_ERROR.0))
}

/// A fail-closed -32603 with the runtime's `runtime.store_unavailable`-style data.
fn internal(server_id: &str, detail: &str) -> ErrorData {
    error_from_frame(
        &mcpolicy_runtime::frame::internal_error_response(None, server_id, detail),
        server_id,
    )
}

/// Turns a JSON-RPC error response written by the runtime into rmcp's error.
fn error_from_frame(frame: &str, server_id: &str) -> ErrorData {
    let parsed: Option<Value> = serde_json::from_str(frame).ok();
    let error = parsed.as_ref().and_then(|frame| frame.get("error"));
    match error {
        Some(error) => ErrorData::new(
            code(
                error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(i64::from(ErrorCode::INTERNAL_ERROR.0)),
            ),
            error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("sampling refused: policy engine failed")
                .to_owned(),
            error.get("data").cloned(),
        ),
        None => ErrorData::internal_error(
            "sampling refused: policy engine failed",
            Some(
                json!({"reason": "runtime.store_unavailable", "server": server_id, "retryable": true}),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use mcpolicy_runtime::frame::{ContextTrim, MaxTokensTrim};
    use mcpolicy_runtime::table::ContextScope;
    use rmcp::model::SamplingMessage;

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
    fn engine_failure_frames_become_fail_closed_errors() {
        let frame =
            mcpolicy_runtime::frame::internal_error_response(Some(&json!(7)), "srv", "disk full");
        let error = error_from_frame(&frame, "srv");
        assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
        let data = error.data.unwrap();
        assert_eq!(data["reason"], "runtime.store_unavailable");
        assert_eq!(data["server"], "srv");

        let garbage = error_from_frame("not json", "srv");
        assert_eq!(garbage.code, ErrorCode::INTERNAL_ERROR);
        assert_eq!(garbage.data.unwrap()["reason"], "runtime.store_unavailable");
    }
}
