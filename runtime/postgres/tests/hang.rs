//! A database that hangs or is down, on a cluster of the test's own:
//!
//! - every process of the cluster stopped (`kill -STOP`: a host that hangs
//!   without closing its connections; the kernel still accepts and
//!   acknowledges, so no TCP timeout fires and the server's own
//!   `statement_timeout` cannot run): every store call, on a pooled
//!   connection or a new one, fails `Unavailable` within the client's bound
//!   (`PostgresOptions::call_timeout`), the engine fails closed, and once
//!   the cluster runs again the store answers again;
//! - the cluster shut down: the frame a server gets names nothing of the
//!   database, while the operator's error names its host and port
//!   (`docs/spec/frames.md`, "Store failures").

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_runtime::Policy;
use mcpolicy_runtime::clock::{FixedClock, timestamp};
use mcpolicy_runtime::engine::{Answer, ClientContext, Engine};
use mcpolicy_runtime::store::{
    DecisionKey, DecisionStore, LimitCheck, LimitWindow, Millis, StoreError,
};
use mcpolicy_store_postgres::{PostgresOptions, PostgresStore};

const POLICY: &str = "mcpolicy 1
protocol 2025-11-25
identity messages

server \"fleet\" {
  consent never
  budget 100 requests per day
}
";

fn now() -> Millis {
    timestamp(2026, 3, 10, 12, 0, 0)
}

fn policy() -> Policy {
    let db = Database::default();
    let text = SourceText::new(&db, "hang.mcpolicy".to_owned(), POLICY.to_owned());
    let table = db::lower_file(&db, text)
        .clone()
        .expect("the test policy compiles");
    Policy::verify(table).expect("the table verifies")
}

fn request(tag: &str) -> Vec<u8> {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": tag}}],
            "maxTokens": 5,
        }
    })
    .to_string()
    .into_bytes()
}

fn check() -> LimitCheck {
    LimitCheck {
        counter: "rate".into(),
        amount: 1,
        limit: 1_000,
        window: LimitWindow::Rolling { ms: 60_000 },
    }
}

/// The client's bound in these tests.
const BOUND: Duration = Duration::from_millis(1_500);

fn open(spec: &str, schema: &str) -> Arc<PostgresStore> {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        pool_size: 4,
        call_timeout: BOUND,
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    };
    Arc::new(PostgresStore::open_with(spec, &options).expect("open"))
}

/// Runs `call`, which must fail unavailable within the bound (and some
/// slack for a loaded machine), and returns how long it took.
fn bounded<T: std::fmt::Debug>(
    what: &str,
    call: impl FnOnce() -> Result<T, StoreError>,
) -> Duration {
    let started = Instant::now();
    let answer = call();
    let took = started.elapsed();
    match answer {
        Err(StoreError::Unavailable { detail, .. }) => {
            assert!(!detail.is_empty(), "{what}");
        }
        other => panic!("{what}: {other:?} while the database is hung"),
    }
    assert!(
        took < BOUND + Duration::from_millis(1_500),
        "{what} took {took:?}, past the bound of {BOUND:?}"
    );
    took
}

#[test]
fn a_hung_database_fails_every_call_closed_within_the_bound() {
    if support::spec().is_none() {
        return; // the same switch as every PostgreSQL test: CI has it installed
    }
    let cluster = support::OwnCluster::start("mcpolicy-pg-hang");
    let spec = cluster.spec();
    let store = open(&spec, "hang");
    let engine = Engine::new(
        policy(),
        Arc::clone(&store) as Arc<dyn DecisionStore>,
        Arc::new(FixedClock(now())),
    );
    let ctx = ClientContext::default();
    // Warm: pooled connections exist, the budget admits.
    for n in 0..4 {
        assert!(matches!(
            engine.decide("fleet", &request(&format!("warm {n}")), &ctx),
            Answer::Decided { .. }
        ));
    }
    cluster.signal("STOP");
    let key = DecisionKey::new("fleet", "fleet:00000000000000000000000000000000");
    let mut took = vec![
        bounded("admit on a pooled connection", || {
            store.admit("fleet", &[check()], now())
        }),
        bounded("replay", || store.replay(&key, "d", now())),
        bounded("get", || store.get(&key)),
    ];
    // Through the engine: the request is refused, within the bound.
    let started = Instant::now();
    match engine.decide("fleet", &request("while hung"), &ctx) {
        Answer::Failed { reply, error } => {
            let reply = String::from_utf8_lossy(&reply);
            assert!(reply.contains("runtime.store_unavailable"), "{reply}");
            assert!(error.to_string().contains("no "), "{error}");
        }
        _ => panic!("the engine decided while the database is hung"),
    }
    took.push(started.elapsed());
    assert!(started.elapsed() < BOUND + Duration::from_millis(1_500));
    // Opening a store (what `mcpc eval` and a starting proxy do) is bounded too.
    let started = Instant::now();
    let options = PostgresOptions {
        schema: "hang".to_owned(),
        call_timeout: BOUND,
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    };
    match PostgresStore::open_with(&spec, &options) {
        Err(StoreError::Unavailable { .. }) => {}
        other => panic!("opened a hung store: {other:?}"),
    }
    took.push(started.elapsed());
    assert!(started.elapsed() < BOUND + Duration::from_millis(1_500));
    eprintln!("calls while hung took {took:?} (bound {BOUND:?})");
    cluster.signal("CONT");
    // The store answers again, on fresh connections.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.admit("fleet", &[check()], now()) {
            Ok(_) => break,
            Err(error) => {
                assert!(Instant::now() < deadline, "never recovered: {error}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    assert!(matches!(
        engine.decide("fleet", &request("after"), &ctx),
        Answer::Decided { .. }
    ));
}

#[test]
fn a_store_failure_frame_names_nothing_of_the_database() {
    if support::spec().is_none() {
        return;
    }
    let cluster = support::OwnCluster::start("mcpolicy-pg-down");
    let spec = cluster.spec();
    let store = open(&spec, "secret_schema");
    let engine = Engine::new(
        policy(),
        Arc::clone(&store) as Arc<dyn DecisionStore>,
        Arc::new(FixedClock(now())),
    );
    cluster.ctl("stop");
    let Answer::Failed { reply, error } =
        engine.decide("fleet", &request("down"), &ClientContext::default())
    else {
        panic!("decided with the database down");
    };
    let reply = String::from_utf8(reply).expect("utf-8");
    assert_eq!(
        reply,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Sampling denied: decision store unavailable","data":{"reason":"runtime.store_unavailable","server":"fleet","retryable":true}}}"#
    );
    let dir = cluster.dir().display().to_string();
    for secret in [
        dir.as_str(),
        "secret_schema",
        "5432",
        "postgres",
        "os error",
    ] {
        assert!(!reply.contains(secret), "`{secret}` in the frame: {reply}");
    }
    // The operator's log line (the proxy writes `error`) names it all.
    let operator = error.to_string();
    for named in [
        dir.as_str(),
        "port=5432",
        "dbname=postgres",
        "schema=secret_schema",
    ] {
        assert!(operator.contains(named), "`{named}` not in {operator}");
    }
}
