//! Schema 3 → 4 on a real schema-3 file (`fixtures/schema3/`, written by
//! `mcpc eval` at the last schema-3 commit; its README says how): the
//! migration runs in place at open, keeps every decision and all spend,
//! leaves the old rows' statement unknown (the engine derives it, as schema
//! 3 did), records the statement of every new decision, and a file of a
//! newer schema is still refused.
#![cfg(feature = "sqlite")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcpolicy_runtime::clock::{FixedClock, timestamp};
use mcpolicy_runtime::engine::{ClientContext, Decision, Statement, Step};
use mcpolicy_runtime::request;
use mcpolicy_runtime::store::{
    DecisionFilter, DecisionKey, DecisionStore, LimitCheck, LimitWindow, SCHEMA_VERSION,
    SqliteStore, StoreAdmin, StoreError, Verdict,
};
use mcpolicy_runtime::{Engine, Policy};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/schema3")
        .join(name)
}

/// A copy of the fixture store in a fresh directory (the original is never opened).
fn copy_of_fixture(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("store.db");
    std::fs::copy(fixture("store.db"), &path).expect("copy the fixture");
    path
}

fn user_version(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version")
}

fn engine(store: Arc<SqliteStore>, at: i64) -> Engine {
    let table = std::fs::read(fixture("table.json")).expect("table");
    let policy = Policy::from_json(&table).expect("the fixture's table loads");
    Engine::new(policy, store, Arc::new(FixedClock(at)))
}

fn request(name: &str) -> request::SamplingRequest {
    let params: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture(name)).expect("request")).expect("json");
    request::validate_sampling(serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": params,
    }))
    .expect("valid request")
}

#[test]
fn a_schema_3_file_migrates_in_place_and_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = copy_of_fixture(&dir);
    assert_eq!(user_version(&path), 3, "the fixture is a schema-3 file");
    let store = Arc::new(SqliteStore::open(&path).expect("a schema-3 store opens"));
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 4);

    // Both denials are there, their statement not known.
    let all = store.decisions(&DecisionFilter::default()).expect("list");
    let reasons: Vec<(&str, &str, Option<&str>)> = all
        .iter()
        .map(|e| {
            (
                e.key.server_id.as_str(),
                &*e.decision.reason,
                e.decision.statement.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("guard", "user.denied", None),
            ("guard", "policy.input_too_large", None)
        ]
    );
    assert!(all.iter().all(|e| e.decision.verdict == Verdict::Deny));
    let too_long = &all[1];
    assert!(too_long.decision.recomputable);
    assert_eq!(
        too_long.decision.decided_at,
        timestamp(2026, 3, 10, 12, 0, 0)
    );

    // The spend of `open`'s admission still counts.
    let rate = LimitCheck {
        counter: "rate".into(),
        amount: 1,
        limit: 10,
        window: LimitWindow::Rolling { ms: 60_000 },
    };
    let usage = store
        .usage("open", &rate, timestamp(2026, 3, 10, 12, 0, 30))
        .expect("usage");
    assert_eq!((usage.spent, usage.available_at), (1, None));
    assert_eq!(store.server_stats("guard").expect("stats").stored, 2);

    // A replay of the old row derives its statement from the reason, as
    // schema 3 did: three messages exceed max_messages 2.
    let at = timestamp(2026, 3, 10, 12, 1, 0);
    let engine = engine(store.clone(), at);
    let ctx = ClientContext::with_sampling_context(true);
    let decision = engine
        .decide_request("guard", &request("three-messages.json"), &ctx)
        .expect("decide");
    let Decision::Deny(denial) = decision else {
        panic!("a stored denial answers: {decision:?}");
    };
    assert!(denial.replayed());
    assert_eq!(denial.cause().statement, Some(Statement::MaxMessages));
    assert_eq!(denial.cause().step, Step::Replay);
    assert_eq!(denial.represented(), 1);

    // A new decision records its statement.
    let decision = engine
        .decide_request("newcomer", &request("three-messages.json"), &ctx)
        .expect("decide");
    assert!(matches!(decision, Decision::Deny(_)));
    let fresh = store
        .decisions(&DecisionFilter {
            server_id: Some("newcomer".into()),
            ..DecisionFilter::default()
        })
        .expect("list");
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0].decision.statement.as_deref(), Some("max_messages"));
    let key = DecisionKey::new("newcomer", fresh[0].key.identity.clone());
    assert_eq!(
        store.get(&key).expect("get").and_then(|d| d.statement),
        Some("max_messages".into())
    );

    // Opening again changes nothing more.
    drop(engine);
    drop(store);
    let again = SqliteStore::open(&path).expect("reopen");
    assert_eq!(again.len().expect("len"), 3);
    again.verify().expect("integrity");
}

#[test]
fn a_newer_schema_is_still_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = copy_of_fixture(&dir);
    drop(SqliteStore::open(&path).expect("migrate"));
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .expect("bump");
    }
    match SqliteStore::open(&path) {
        Err(StoreError::SchemaTooNew {
            found, supported, ..
        }) => assert_eq!((found, supported), (5, 4)),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}
