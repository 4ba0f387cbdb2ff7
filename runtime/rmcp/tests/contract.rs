//! The adapter contract (`tests/cases/adapters/scenarios.json`, its "about"
//! says what each member means) through this adapter, as rmcp calls it: for
//! every step, an rmcp server (`testing::Adversary`) sends the step's
//! `request` as `sampling/createMessage` from inside a tool call, over an
//! in-process duplex pipe, to an rmcp client serving a `PolicyClient`; the
//! outcome the server receives is checked against every expectation. The
//! Python and Node adapters run the same file.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcpolicy_rmcp::testing::{Adversary, FakeProvider, ScriptedConsent};
use mcpolicy_rmcp::{PolicyClient, StoreCalls};
use mcpolicy_runtime::clock::{self, ManualClock};
use mcpolicy_runtime::store::{DecisionStore, MemoryStore, SqliteStore};
use mcpolicy_runtime::{Engine, Policy};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value, json};

fn cases() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases/adapters")
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}

/// What the user's consent function and sampling callback answer in one step.
fn client_for(
    engine: &Engine,
    server: &str,
    step: &Value,
    store_calls: StoreCalls,
) -> PolicyClient<FakeProvider, ScriptedConsent> {
    let model = &step["model"];
    let mut provider =
        FakeProvider::new("ok", model["usageTokens"].as_u64().unwrap()).with_model("test-model");
    if let Some(delay) = model.get("delayMs") {
        provider = provider.with_delay(Duration::from_millis(delay.as_u64().unwrap()));
    }
    // A step that says nothing about consent refuses: `asked` catches a
    // step that asked anyway.
    let consent = if step["consent"] == json!(true) {
        ScriptedConsent::approve()
    } else {
        ScriptedConsent::deny()
    };
    PolicyClient::new(engine.clone(), server, provider, consent).with_store_calls(store_calls)
}

/// One step: a fresh connection (the adversary in a task, the client on the
/// other end of a duplex pipe); what the server received (`result` or
/// `error`), and what the client's two stand-ins saw.
async fn run_step(client: &PolicyClient<FakeProvider, ScriptedConsent>, request: &Value) -> Value {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let running = Adversary.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let session = client.clone().serve(client_io).await.unwrap();
    let mut args = Map::new();
    args.insert("params".into(), request.clone());
    let outcome = session
        .call_tool(CallToolRequestParams::new("sample").with_arguments(args))
        .await
        .unwrap()
        .structured_content
        .unwrap();
    session.cancel().await.unwrap();
    server.await.unwrap();
    outcome
}

/// Checks every expectation of `expect`; a member this test does not know
/// fails it, so the contract cannot grow an expectation no adapter checks.
fn check(
    at: &str,
    expect: &Value,
    outcome: &Value,
    client: &PolicyClient<FakeProvider, ScriptedConsent>,
) {
    let expect = expect.as_object().unwrap();
    for key in expect.keys() {
        assert!(
            ["asked", "called", "params", "meta", "error"].contains(&key.as_str()),
            "{at}: unknown expectation {key}"
        );
    }
    let asked = client.consent().prompts() > 0;
    assert_eq!(Some(&json!(asked)), expect.get("asked"), "{at}: asked");
    let seen = client.provider().seen();
    assert_eq!(
        Some(&json!(!seen.is_empty())),
        expect.get("called"),
        "{at}: called"
    );
    if let Some(params) = expect.get("params") {
        let seen = serde_json::to_value(&seen[0]).unwrap();
        for (member, value) in params.as_object().unwrap() {
            assert_eq!(&seen[member], value, "{at}: params.{member} in {seen}");
        }
    }
    match expect.get("error") {
        Some(error) => {
            assert!(outcome.get("result").is_none(), "{at}: {outcome}");
            let got = &outcome["error"];
            assert_eq!(got["code"], error["code"], "{at}: code in {outcome}");
            let data = &got["data"];
            assert_eq!(data["reason"], error["reason"], "{at}: reason in {outcome}");
            if let Some(retryable) = error.get("retryable") {
                assert_eq!(
                    &data["retryable"], retryable,
                    "{at}: retryable in {outcome}"
                );
            }
            if let Some(timing) = error.get("timing") {
                let timing = timing.as_str().unwrap();
                assert!(data.get(timing).is_some(), "{at}: no {timing} in {outcome}");
            }
            for member in error.as_object().unwrap().keys() {
                assert!(
                    ["code", "reason", "retryable", "timing"].contains(&member.as_str()),
                    "{at}: unknown error expectation {member}"
                );
            }
        }
        None => {
            let result = &outcome["result"];
            assert!(result.is_object(), "{at}: no result in {outcome}");
            assert_eq!(result["role"], "assistant", "{at}");
            assert_eq!(
                result["content"],
                json!({"type": "text", "text": "ok"}),
                "{at}"
            );
            assert_eq!(result["model"], "test-model", "{at}");
            assert_eq!(result["stopReason"], "endTurn", "{at}");
            let meta = result.get("_meta").cloned().unwrap_or(Value::Null);
            assert_eq!(Some(&meta), expect.get("meta"), "{at}: _meta");
        }
    }
}

enum Store {
    Memory,
    Sqlite(PathBuf),
}

impl Store {
    fn open(&self) -> (Arc<dyn DecisionStore>, StoreCalls) {
        match self {
            Store::Memory => (Arc::new(MemoryStore::new()), StoreCalls::Inline),
            Store::Sqlite(path) => (
                Arc::new(SqliteStore::open(path).unwrap()),
                StoreCalls::Blocking,
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_of_the_adapter_contract() {
    let contract = read_json(&cases().join("scenarios.json"));
    let policy = Policy::from_json(&std::fs::read(cases().join("policy.table.json")).unwrap())
        .expect("the contract's table loads");
    let scenarios = contract["scenarios"].as_array().unwrap();
    assert!(!scenarios.is_empty());
    let mut steps_run = 0;
    for scenario in scenarios {
        let name = scenario["name"].as_str().unwrap();
        let server = scenario["server"].as_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = match scenario["store"].as_str().unwrap() {
            "memory" => Store::Memory,
            "sqlite" => Store::Sqlite(dir.path().join("decisions.sqlite3")),
            other => panic!("{name}: unknown store {other}"),
        };
        // A fixed noon: no day boundary falls inside a scenario.
        let clock = Arc::new(ManualClock::new(clock::timestamp(2026, 3, 10, 12, 0, 0)));
        let (decisions, mut store_calls) = store.open();
        let mut engine = Engine::new(policy.clone(), decisions, clock.clone());
        for (i, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
            let at = format!("{name}, step {i}");
            if step["reopen"] == json!(true) {
                assert!(
                    matches!(store, Store::Sqlite(_)),
                    "{at}: reopen needs a file"
                );
                drop(engine);
                let (decisions, calls) = store.open();
                store_calls = calls;
                engine = Engine::new(policy.clone(), decisions, clock.clone());
            }
            let client = client_for(&engine, server, step, store_calls);
            let outcome = run_step(&client, &step["request"]).await;
            check(&at, &step["expect"], &outcome, &client);
            steps_run += 1;
        }
    }
    let declared: usize = scenarios
        .iter()
        .map(|s| s["steps"].as_array().unwrap().len())
        .sum();
    assert_eq!(steps_run, declared);
}
