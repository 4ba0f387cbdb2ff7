//! End to end through the real SDK: an adversary MCP server built on rmcp
//! samples from inside a tool call; the `PolicyClient` (rmcp client, mcpolicy
//! runtime embedded, SQLite store in a temp dir) answers. The policy is
//! compiled from `.mcpolicy` text by the compiler. Time is a manual clock.
//!
//! The seed's `test_retry_cannot_bypass_denial`, restated: a denied request
//! re-sent byte for byte gets the same `error.data`, the user was asked once,
//! nothing was spent on either, and `represented` is 1.
#![expect(deprecated, reason = "sampling/createMessage is what is under test")]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_rmcp::PolicyClient;
use mcpolicy_rmcp::testing::{Adversary, FakeProvider, ScriptedConsent};
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::store::{DecisionKey, DecisionStore, SqliteStore};
use mcpolicy_runtime::{Engine, Policy};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, ContextInclusion, CreateMessageRequestParams, ProtocolVersion,
    SamplingMessage,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService, ServiceError,
};
use serde_json::{Value, json};

/// The same product under MCP 2026-07-28, where codes inside
/// -32768..-32000 are the spec's: the policy picks one outside.
const POLICY_2026: &str = r#"
mcpolicy 1
protocol 2026-07-28
error_code -42010
identity systemPrompt, messages, includeContext, modelPreferences

defaults {
  max_context thisServer
  consent first
}
"#;

const POLICY: &str = r#"
mcpolicy 1
protocol 2025-11-25
error_code -32010
identity systemPrompt, messages, includeContext, modelPreferences

defaults {
  max_context allServers
  max_tokens 4096
  rate 100 per 1m
  deadline 10s
  consent never
}

# The seed's server: one request a day, and the user is asked once.
server "release-notes" {
  budget 1 requests per day
  consent first
}

# A server the user refuses.
server "web-fetch" {
  consent first
}

# May see its own context, never other servers'.
server "summarizer" {
  max_context thisServer
}

# A tight rate limit.
server "chatty" {
  rate 3 per 1m
}

# Runs on Claude models only.
server "pinned" {
  models "claude-*"
}

# A completion must finish in 50 ms.
server "slow" {
  deadline 50ms
}
"#;

/// 2026-03-10T12:00:00Z, frozen: windows and retryAfter are deterministic.
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 12, 0, 0,
    )))
}

/// The policy compiled by the compiler, loaded as a client loads `mcpc compile` output.
fn table() -> Policy {
    compile(POLICY)
}

fn compile(policy: &str) -> Policy {
    let db = Database::default();
    let source = SourceText::new(&db, "e2e.mcpolicy".into(), policy.into());
    let Some(table) = db::lower_file(&db, source).clone() else {
        panic!("policy has errors: {:#?}", db::diagnostics(&db, source));
    };
    Policy::from_json(table.to_json().as_bytes()).unwrap()
}

fn engine(path: &Path, clock: Arc<ManualClock>) -> (Engine, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open(path).unwrap());
    let engine = Engine::new(table(), store.clone(), clock);
    (engine, store)
}

type Client = PolicyClient<FakeProvider, ScriptedConsent>;

/// One connection: the adversary in a task, the policy client serving the
/// other end of an in-process duplex pipe.
struct Connection {
    client: Client,
    session: RunningService<RoleClient, Client>,
}

/// Like [`connect`], on MCP 2026-07-28 (`server/discover`, no initialize).
async fn connect_2026(client: Client) -> Connection {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = Adversary.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let session = client
        .clone()
        .serve_with_lifecycle(
            client_io,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    Connection { client, session }
}

async fn connect(client: Client) -> Connection {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = Adversary.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let session = client.clone().serve(client_io).await.unwrap();
    Connection { client, session }
}

impl Connection {
    /// The adversary sends `params` as a sampling request; what it received.
    async fn sample(&self, params: &CreateMessageRequestParams) -> Value {
        let mut args = serde_json::Map::new();
        args.insert("params".into(), serde_json::to_value(params).unwrap());
        let result = self
            .session
            .call_tool(CallToolRequestParams::new("sample").with_arguments(args))
            .await
            .unwrap();
        result.structured_content.unwrap()
    }

    /// MCP 2026-07-28: the server asks through `inputRequests`; rmcp's
    /// `call_tool` fulfils them with the same `create_message` handler. A
    /// denial fails the client's own call, carrying the denial's `data`.
    async fn sample_input_required(&self, params: &CreateMessageRequestParams) -> Value {
        let mut args = serde_json::Map::new();
        args.insert("params".into(), serde_json::to_value(params).unwrap());
        let call = CallToolRequestParams::new("sample_input_required").with_arguments(args);
        match self.session.call_tool(call).await {
            Ok(result) => result.structured_content.unwrap(),
            Err(ServiceError::McpError(error)) => json!({
                "error": {"code": error.code.0, "message": error.message, "data": error.data},
                "dataText": serde_json::to_string(&error.data).unwrap(),
            }),
            Err(other) => panic!("{other}"),
        }
    }

    async fn close(self) {
        self.session.cancel().await.unwrap();
    }
}

fn request(prompt: &str, context: ContextInclusion) -> CreateMessageRequestParams {
    CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 500)
        .with_system_prompt("You write release notes.")
        .with_include_context(context)
}

/// The identity the runtime stores the decision under.
fn identity_of(engine: &Engine, server: &str, params: &CreateMessageRequestParams) -> DecisionKey {
    let Value::Object(map) = serde_json::to_value(params).unwrap() else {
        panic!("params serialise to an object")
    };
    let id = engine.identity(server, &map);
    DecisionKey::new(server, id.into_string())
}

fn represented(store: &SqliteStore, key: &DecisionKey) -> u64 {
    store
        .get(key)
        .unwrap()
        .expect("a stored decision")
        .represented
}

// -------------------------------------------------------------------- tests

/// The seed's test with the budget: one request a day, spent by a first
/// (approved) request; the adversary's next request is denied, and re-sending
/// it byte for byte changes nothing but `represented`.
#[tokio::test]
async fn test_retry_cannot_bypass_denial() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(&dir.path().join("decisions.sqlite3"), clock());
    let client = PolicyClient::new(
        engine.clone(),
        "release-notes",
        FakeProvider::new("Notes.", 120),
        ScriptedConsent::approve(),
    );
    let conn = connect(client).await;

    // Spends the day's one request (the user is asked, and approves).
    let warm_up = conn
        .sample(&request("v1.0 changes", ContextInclusion::None))
        .await;
    assert!(warm_up.get("result").is_some(), "{warm_up}");
    assert_eq!(conn.client.consent().prompts(), 1);
    assert_eq!(conn.client.provider().calls(), 1);

    let p = request("v1.1 changes", ContextInclusion::AllServers);
    let first = conn.sample(&p).await;
    assert_eq!(first["error"]["code"], -32010, "{first}");
    assert_eq!(first["error"]["data"]["reason"], "policy.budget_exhausted");
    assert_eq!(first["error"]["data"]["server"], "release-notes");
    assert_eq!(first["error"]["data"]["retryable"], false);
    assert_eq!(first["error"]["data"]["resetsAt"], "2026-03-11T00:00:00Z");

    let second = conn.sample(&p).await;
    assert!(first["dataText"].is_string(), "{first}");
    assert_eq!(second["error"]["data"], first["error"]["data"]);
    assert_eq!(second["dataText"], first["dataText"], "same bytes");
    assert_eq!(second["error"], first["error"], "same code and message too");

    assert_eq!(
        conn.client.consent().prompts(),
        1,
        "the user was asked once"
    );
    assert_eq!(
        conn.client.provider().calls(),
        1,
        "nothing was spent on either denial"
    );
    let key = identity_of(&engine, "release-notes", &p);
    assert_eq!(represented(&store, &key), 1);

    let stats = conn.client.stats();
    assert_eq!((stats.denied, stats.replayed_denials), (2, 1));
    assert_eq!(stats.consent_prompts, 1);
    assert_eq!(stats.provider_calls, 1);
    conn.close().await;
}

/// The user refuses: `user.denied` with code -1, replayed without a second
/// dialog — and still replayed after the client restarts on the same file.
#[tokio::test]
async fn consent_denial_is_asked_once_and_survives_reopening_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("decisions.sqlite3");
    let p = request("Summarise this page", ContextInclusion::AllServers);

    let first = {
        let (engine, store) = engine(&path, clock());
        let conn = connect(PolicyClient::new(
            engine.clone(),
            "web-fetch",
            FakeProvider::new("Summary.", 50),
            ScriptedConsent::deny(),
        ))
        .await;
        let first = conn.sample(&p).await;
        assert_eq!(first["error"]["code"], -1, "{first}");
        assert_eq!(
            first["error"]["data"],
            json!({"reason": "user.denied", "server": "web-fetch", "retryable": false})
        );
        let second = conn.sample(&p).await;
        assert_eq!(second["dataText"], first["dataText"]);
        assert_eq!(second["error"], first["error"]);
        assert_eq!(conn.client.consent().prompts(), 1);
        assert_eq!(conn.client.provider().calls(), 0);
        assert_eq!(
            represented(&store, &identity_of(&engine, "web-fetch", &p)),
            1
        );
        // The dialog showed what would run, after trims (none here).
        let asked = conn.client.consent().asked();
        assert_eq!(asked[0].server_id, "web-fetch");
        assert_eq!(asked[0].params, p);
        conn.close().await;
        first
    };

    // A new process: new store handle, new engine, new dialog, same file.
    let (engine, store) = engine(&path, clock());
    let conn = connect(PolicyClient::new(
        engine.clone(),
        "web-fetch",
        FakeProvider::new("Summary.", 50),
        ScriptedConsent::approve(),
    ))
    .await;
    let again = conn.sample(&p).await;
    assert_eq!(again["dataText"], first["dataText"]);
    assert_eq!(again["error"], first["error"]);
    assert_eq!(conn.client.consent().prompts(), 0, "not asked again");
    assert_eq!(conn.client.provider().calls(), 0);
    assert_eq!(
        represented(&store, &identity_of(&engine, "web-fetch", &p)),
        2
    );
    conn.close().await;
}

/// A request for `allServers` from a server allowed `thisServer` runs
/// narrowed, and the server learns it from `_meta.context`.
#[tokio::test]
async fn trim_arrives_with_meta_context() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _store) = engine(&dir.path().join("decisions.sqlite3"), clock());
    let conn = connect(PolicyClient::new(
        engine,
        "summarizer",
        FakeProvider::new("A summary.", 80),
        ScriptedConsent::approve(),
    ))
    .await;

    let outcome = conn
        .sample(&request(
            "Summarise the session",
            ContextInclusion::AllServers,
        ))
        .await;
    let result = &outcome["result"];
    assert_eq!(
        result["_meta"]["context"],
        json!({"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"}),
        "{outcome}"
    );
    assert_eq!(result["content"]["text"], "A summary.");
    assert_eq!(result["model"], "fake-model");
    assert_eq!(result["role"], "assistant");

    // The provider ran the narrowed request; nobody was asked (`consent never`).
    let seen = conn.client.provider().seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].include_context, Some(ContextInclusion::ThisServer));
    assert_eq!(conn.client.consent().prompts(), 0);
    assert_eq!(conn.client.stats().trimmed, 1);

    // maxTokens above the clamp is a trim too, announced the same way.
    let big = CreateMessageRequestParams::new(vec![SamplingMessage::user_text("Long one")], 9000);
    let outcome = conn.sample(&big).await;
    assert_eq!(
        outcome["result"]["_meta"]["maxTokens"],
        json!({"requested": 9000, "applied": 4096, "reason": "policy.max_tokens"}),
        "{outcome}"
    );
    assert_eq!(conn.client.provider().seen()[1].max_tokens, 4096);
    conn.close().await;
}

/// Five different requests in a burst against `rate 3 per 1m`: three run,
/// two are refused as retryable with `retryAfter`; re-sending a refused one
/// is answered from the store.
#[tokio::test]
async fn rate_limited_burst() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, store) = engine(&dir.path().join("decisions.sqlite3"), clock());
    let conn = connect(PolicyClient::new(
        engine.clone(),
        "chatty",
        FakeProvider::new("ok", 10),
        ScriptedConsent::approve(),
    ))
    .await;

    let mut outcomes = Vec::new();
    for i in 0..5 {
        let p = request(&format!("variant {i}"), ContextInclusion::None);
        outcomes.push((p.clone(), conn.sample(&p).await));
    }
    let allowed = outcomes
        .iter()
        .filter(|(_, o)| o.get("result").is_some())
        .count();
    assert_eq!(allowed, 3);
    for (_, denied) in &outcomes[3..] {
        assert_eq!(
            denied["error"]["data"],
            json!({"reason": "policy.rate_limit", "server": "chatty", "retryable": true, "retryAfter": 60}),
            "{denied}"
        );
    }
    assert_eq!(conn.client.provider().calls(), 3);

    let (p, denied) = &outcomes[4];
    let again = conn.sample(p).await;
    assert_eq!(again["dataText"], denied["dataText"]);
    assert_eq!(represented(&store, &identity_of(&engine, "chatty", p)), 1);
    assert_eq!(conn.client.provider().calls(), 3);
    conn.close().await;
}

/// Twenty different requests at once against `rate 3 per 1m`: concurrent
/// decisions through the SQLite store admit exactly three.
#[tokio::test]
async fn concurrent_burst_never_overspends() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _store) = engine(&dir.path().join("decisions.sqlite3"), clock());
    let conn = connect(PolicyClient::new(
        engine,
        "chatty",
        FakeProvider::new("ok", 10),
        ScriptedConsent::approve(),
    ))
    .await;

    let mut burst = tokio::task::JoinSet::new();
    for i in 0..20 {
        let peer = conn.session.peer().clone();
        let mut args = serde_json::Map::new();
        let p = request(&format!("burst {i}"), ContextInclusion::None);
        args.insert("params".into(), serde_json::to_value(&p).unwrap());
        burst.spawn(async move {
            let call = CallToolRequestParams::new("sample").with_arguments(args);
            peer.call_tool(call)
                .await
                .unwrap()
                .structured_content
                .unwrap()
        });
    }
    let outcomes = burst.join_all().await;
    let allowed = outcomes
        .iter()
        .filter(|o| o.get("result").is_some())
        .count();
    let limited = outcomes
        .iter()
        .filter(|o| o["error"]["data"]["reason"] == "policy.rate_limit")
        .count();
    assert_eq!((allowed, limited), (3, 17));
    assert_eq!(conn.client.provider().calls(), 3);
    conn.close().await;
}

/// A completion slower than `deadline 50ms` is abandoned and answered with
/// `policy.deadline`; the immediate identical retry is refused from the store
/// without calling the provider again.
#[tokio::test]
async fn deadline_miss_is_a_retryable_denial() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _store) = engine(&dir.path().join("decisions.sqlite3"), clock());
    let conn = connect(PolicyClient::new(
        engine,
        "slow",
        FakeProvider::new("late", 10).with_delay(Duration::from_secs(30)),
        ScriptedConsent::approve(),
    ))
    .await;

    let p = request("Take your time", ContextInclusion::None);
    let started = std::time::Instant::now();
    let first = conn.sample(&p).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        first["error"]["data"],
        json!({"reason": "policy.deadline", "server": "slow", "retryable": true, "retryAfter": 30}),
        "{first}"
    );
    let second = conn.sample(&p).await;
    assert_eq!(second["dataText"], first["dataText"]);
    assert_eq!(conn.client.provider().calls(), 1);
    assert_eq!(conn.client.stats().deadline_misses, 1);
    conn.close().await;
}

/// MCP 2026-07-28: sampling arrives inside the tool call's
/// `InputRequiredResult`. The same handler decides it; a denial answers the
/// client's own pending `tools/call` with the same `data` (the server never
/// gets a completion), is asked once, spends nothing, and is replayed; a
/// trim reaches the server inside its `inputResponses` with `_meta.context`.
#[tokio::test]
async fn input_required_2026_07_28() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("decisions.sqlite3")).unwrap());
    let engine = Engine::new(compile(POLICY_2026), store.clone(), clock());

    let refuse = connect_2026(PolicyClient::new(
        engine.clone(),
        "web-fetch",
        FakeProvider::new("Summary.", 50),
        ScriptedConsent::deny(),
    ))
    .await;
    let negotiated = refuse.session.peer_info().unwrap().protocol_version.clone();
    assert_eq!(negotiated, ProtocolVersion::V_2026_07_28);
    let p = request("Summarise this page", ContextInclusion::None);
    let first = refuse.sample_input_required(&p).await;
    assert_eq!(first["error"]["code"], -1, "{first}");
    assert_eq!(
        first["error"]["data"],
        json!({"reason": "user.denied", "server": "web-fetch", "retryable": false})
    );
    let second = refuse.sample_input_required(&p).await;
    assert_eq!(second["dataText"], first["dataText"]);
    assert_eq!(second["error"], first["error"]);
    assert_eq!(refuse.client.consent().prompts(), 1);
    assert_eq!(refuse.client.provider().calls(), 0);
    assert_eq!(
        represented(&store, &identity_of(&engine, "web-fetch", &p)),
        1
    );
    refuse.close().await;

    let approve = connect_2026(PolicyClient::new(
        engine.clone(),
        "summarizer",
        FakeProvider::new("A summary.", 80),
        ScriptedConsent::approve(),
    ))
    .await;
    let outcome = approve
        .sample_input_required(&request(
            "Summarise the session",
            ContextInclusion::AllServers,
        ))
        .await;
    assert_eq!(
        outcome["result"]["_meta"]["context"],
        json!({"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"}),
        "{outcome}"
    );
    assert_eq!(outcome["result"]["content"]["text"], "A summary.");
    assert_eq!(approve.client.consent().prompts(), 1);
    assert_eq!(approve.client.provider().calls(), 1);
    approve.close().await;
}

/// `models "claude-*"`: a provider that answers from another model does not
/// get its completion to the server, which receives `policy.model`'s denial
/// instead (`docs/spec/frames.md`, "A result from a model outside
/// `models`"); a provider on an allowed model answers as usual.
#[tokio::test]
async fn a_result_from_a_model_outside_models_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _store) = engine(&dir.path().join("decisions.sqlite3"), clock());
    let p = request("Which model?", ContextInclusion::None);

    let elsewhere = connect(PolicyClient::new(
        engine.clone(),
        "pinned",
        FakeProvider::new("from elsewhere", 30),
        ScriptedConsent::approve(),
    ))
    .await;
    let refused = elsewhere.sample(&p).await;
    assert!(refused.get("result").is_none(), "{refused}");
    assert_eq!(
        refused["error"]["data"]["reason"], "policy.model",
        "{refused}"
    );
    assert_eq!(refused["error"]["data"]["server"], "pinned");
    assert_eq!(elsewhere.client.provider().calls(), 1);
    elsewhere.close().await;

    let claude = connect(PolicyClient::new(
        engine,
        "pinned",
        FakeProvider::new("from claude", 30).with_model("claude-sonnet"),
        ScriptedConsent::approve(),
    ))
    .await;
    let answered = claude.sample(&p).await;
    assert_eq!(answered["result"]["model"], "claude-sonnet", "{answered}");
    claude.close().await;
}
