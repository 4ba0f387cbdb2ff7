//! The user's refusal when the decision store fails while it is recorded
//! (`proxy/PROXY.md`, "Consent"): the server still receives the policy's
//! `user.denied` frame, not a store failure, and the refusal is recorded as
//! soon as the store can take it, so the re-sent request is refused from
//! the store without asking the user again.
//!
//! The store is a real PostgreSQL cluster of the test's own (started with
//! `runtime/postgres/scripts/pg-test-cluster.sh` in a temporary directory)
//! that the test stops while the user decides, then starts again. Without
//! PostgreSQL installed the test is skipped, unless
//! `MCPOLICY_REQUIRE_POSTGRES=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_proxy::capture::Captured as Buf;
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::{Engine, Policy};
use mcpolicy_store_postgres::PostgresStore;
use serde_json::{Value, json};

const POLICY: &str = r#"
mcpolicy 1
protocol 2025-11-25
error_code -32010
identity messages

server "s" {
  consent first
  budget 5 requests per day
}
"#;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/postgres/scripts/pg-test-cluster.sh")
}

/// A cluster in a directory of its own, stopped (immediately) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn run(&self, action: &str) -> String {
        let out = Command::new("bash")
            .arg(script())
            .args([action, self.dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg-test-cluster.sh {action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts a cluster, or `None` when PostgreSQL is not installed.
    fn start() -> Option<(Cluster, String)> {
        let installed = std::fs::read_dir("/usr/lib/postgresql").is_ok()
            || Command::new("pg_config").output().is_ok();
        if !installed {
            assert!(
                std::env::var("MCPOLICY_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "MCPOLICY_REQUIRE_POSTGRES=1 but PostgreSQL is not installed"
            );
            eprintln!("note: PostgreSQL is not installed; test not run");
            return None;
        }
        let cluster = Cluster {
            dir: tempfile::tempdir().unwrap(),
        };
        let printed = cluster.run("start");
        let spec = printed
            .lines()
            .find_map(|l| l.strip_prefix("export MCPOLICY_TEST_POSTGRES='"))
            .and_then(|l| l.strip_suffix('\''))
            .expect("the script prints the connection string")
            .to_owned();
        Some((cluster, spec))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .args(["kill", self.dir.path().to_str().unwrap()])
            .output();
    }
}

fn sample(id: u64, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": 100}})
    .to_string()
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

#[test]
fn the_users_refusal_survives_a_store_that_fails_while_it_is_recorded() {
    let Some((cluster, spec)) = Cluster::start() else {
        return;
    };
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), POLICY.into());
    let policy = Policy::verify(db::lower_file(&db, source).clone().unwrap()).unwrap();
    let store = PostgresStore::open(&spec).unwrap();
    let engine = Engine::new(policy, Arc::new(store), Arc::new(SystemClock));
    let (server, client, log) = (Buf::default(), Buf::default(), Buf::default());
    let session = Session::new(
        engine,
        "s",
        Box::new(server.clone()),
        Box::new(client.clone()),
        Log::to(Box::new(log.clone()), "s"),
        Some(Audit::to(Box::new(Buf::default()))),
    );

    session.from_server(sample(1, "x").as_bytes());
    assert_eq!(client.take().len(), 1, "forwarded for consent");

    // The database goes down while the user looks at the dialog.
    cluster.run("stop");
    session.from_client(
        br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"User rejected sampling request"}}"#,
    );
    let answer = parse(&server.take()[0]);
    assert_eq!(answer["id"], 1);
    assert_eq!(
        answer["error"]["data"]["reason"], "user.denied",
        "the user's word, not a store failure: {answer}"
    );
    assert_eq!(answer["error"]["code"], -1);
    assert!(
        log.take()
            .iter()
            .any(|l| l.contains("to be recorded when the store recovers")),
        "the failure is logged"
    );
    assert_eq!(
        session.record_unrecorded(),
        1,
        "still owed while the store is down"
    );

    // The database is back: the next store call records the refusal first,
    // and the re-sent request is refused from the store, the user not asked.
    cluster.run("start");
    session.from_server(sample(2, "x").as_bytes());
    assert!(client.take().is_empty(), "the user is not asked again");
    let answer = parse(&server.take()[0]);
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["error"]["data"]["reason"], "user.denied", "{answer}");
    assert_eq!(session.record_unrecorded(), 0);
    assert!(
        log.take()
            .iter()
            .any(|l| l.contains("that the store had failed to take")),
        "the late record is logged"
    );
}
