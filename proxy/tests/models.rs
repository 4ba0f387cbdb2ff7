//! `models` holds through the proxy (`docs/spec/frames.md`, "A result from
//! a model outside `models`"; `docs/threat-model.md`): the proxy cannot
//! choose the client's model, so a result naming a model outside the
//! block's `models` is withheld and the server gets the `policy.model`
//! denial instead; its tokens are settled; nothing is stored.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_proxy::capture::Captured;
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::store::MemoryStore;
use serde_json::{Value, json};

const POLICY: &str = include_str!("fixtures/session.mcpolicy");

fn session() -> (Session, Captured, Captured, Captured) {
    let db = Database::default();
    let source = SourceText::new(&db, "t.mcpolicy".into(), POLICY.into());
    let table = db::lower_file(&db, source).clone().unwrap();
    let policy = mcpolicy_runtime::Policy::verify(table).unwrap();
    let engine = Engine::new(policy, Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    let (server, client, audit) = (
        Captured::default(),
        Captured::default(),
        Captured::default(),
    );
    let session = Session::new(
        engine,
        "tight",
        Box::new(server.clone()),
        Box::new(client.clone()),
        Log::to(Box::new(std::io::sink()), "tight"),
        Some(Audit::to(Box::new(audit.clone()))),
    );
    (session, server, client, audit)
}

fn sample(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        "maxTokens": 5}})
    .to_string()
}

fn result(id: u64, model: &str, tokens: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"role": "assistant", "model": model,
        "content": {"type": "text", "text": "secret"}, "usage": {"totalTokens": tokens}}})
    .to_string()
}

#[test]
fn a_result_from_a_model_outside_models_is_withheld() {
    let (session, server, client, audit) = session();
    session.from_server(sample(3).as_bytes());
    assert_eq!(client.take().len(), 1);
    session.from_client(result(3, "gpt-4o", 7).as_bytes());
    let answers = server.take();
    assert_eq!(answers.len(), 1);
    let answer: Value = serde_json::from_str(&answers[0]).unwrap();
    assert_eq!(answer["id"], 3);
    assert!(
        answer.get("result").is_none(),
        "the completion is withheld: {answer}"
    );
    assert_eq!(answer["error"]["data"]["reason"], "policy.model");
    assert_eq!(answer["error"]["code"], -32010);
    assert!(!answers[0].contains("secret"));
    let lines: Vec<Value> = audit
        .take()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["outcome"] == "deny" && l["reason"] == "policy.model" && l["id"] == 3),
        "{lines:#?}"
    );
    // Nothing stored: the same request is decided afresh, and an allowed
    // model's result passes.
    session.from_server(sample(4).as_bytes());
    assert_eq!(client.take().len(), 1);
    session.from_client(result(4, "claude-3", 7).as_bytes());
    let answer: Value = serde_json::from_str(&server.take()[0]).unwrap();
    assert_eq!(answer["result"]["model"], "claude-3");
}

/// The withheld completion's tokens count: `budget 200 tokens per 1h`
/// is spent by the 190 tokens the client reports.
#[test]
fn a_withheld_result_still_spends_its_tokens() {
    let (session, server, client, _) = session();
    session.from_server(sample(1).as_bytes());
    client.take();
    session.from_client(result(1, "gpt-4o", 196).as_bytes());
    server.take();
    session.from_server(sample(2).as_bytes());
    assert!(client.take().is_empty(), "the budget is spent");
    let answer: Value = serde_json::from_str(&server.take()[0]).unwrap();
    assert_eq!(answer["error"]["data"]["reason"], "policy.budget_exhausted");
}
