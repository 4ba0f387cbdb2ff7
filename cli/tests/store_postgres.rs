//! `--store postgres://…` through the real `mcpc`: two proxies on one
//! database (a refusal stored by one is replayed byte for byte by the
//! other), `mcpc eval` and `mcpc store` on PostgreSQL, `mcpc store migrate`
//! from SQLite, and passwords refused on the command line.
//!
//! The database is `MCPOLICY_TEST_POSTGRES` (a libpq string, as
//! `runtime/postgres/scripts/pg-test-cluster.sh start DIR` prints it); each
//! test uses a schema of its own. Without it these tests pass over
//! themselves with a note, except under `MCPOLICY_REQUIRE_POSTGRES=1` (CI),
//! where they fail.

#![allow(clippy::unwrap_used, reason = "tests")]

mod postgres_spec;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use postgres_spec::store_spec;
use serde_json::Value;

fn mcpc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcpc"))
}

const NOW: &str = "2026-03-10T12:00:00Z";

const POLICY: &str = "mcpolicy 1
protocol 2025-11-25
identity messages

server \"fake\" {
  consent never
  max_input 100 B
  budget 5 requests per day
}
";

fn request(text: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": 10
        }
    })
    .to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "mcpc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// One `mcpc proxy` in front of a server that sends one sampling request
/// and writes the line it gets back to `out`.
fn proxy_once(dir: &Path, policy: &str, store: &str, out: &Path) {
    let server = write(
        dir,
        "server.sh",
        &format!(
            "#!/bin/sh\nprintf '%s\\n' '{}'\nhead -n 1 > \"$1\"\n",
            request(&"x".repeat(200))
        ),
    );
    let mut child = mcpc()
        .args(["proxy", "--policy", policy, "--store", store])
        .args(["--server-id", "fake", "--", "sh", &server])
        .arg(out)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The client side stays open until the server has its answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::metadata(out).map_or(true, |m| m.len() == 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "no answer reached the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_refusal_stored_by_one_proxy_is_replayed_byte_for_byte_by_another() {
    let Some(store) = store_spec("replay") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.mcpolicy", POLICY);
    let (first, second) = (
        dir.path().join("first.json"),
        dir.path().join("second.json"),
    );
    proxy_once(dir.path(), &policy, &store, &first);
    proxy_once(dir.path(), &policy, &store, &second);
    let (first, second) = (
        std::fs::read(first).unwrap(),
        std::fs::read(second).unwrap(),
    );
    assert_eq!(first, second, "the replay differs");
    let reply: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(reply["error"]["data"]["reason"], "policy.input_too_large");
    // The second proxy answered from the store: the decision was re-presented once.
    let listed = json(
        &mcpc()
            .args(["store", "ls", "--store", &store, "--format", "json"])
            .output()
            .unwrap(),
    );
    let decisions = listed["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{listed}");
    assert_eq!(decisions[0]["represented"], 1, "{listed}");
}

#[test]
fn eval_and_store_work_on_postgres_like_on_sqlite() {
    let Some(store) = store_spec("eval") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.mcpolicy", POLICY);
    let small = write(dir.path(), "small.json", &request("hi"));
    let big = write(dir.path(), "big.json", &request(&"x".repeat(200)));
    let sqlite = dir.path().join("s.db").display().to_string();
    for spec in [&sqlite, &store] {
        for request in [&small, &small, &big] {
            let output = mcpc()
                .args(["eval", &policy, "--server", "fake", "--request", request])
                .args(["--store", spec, "--now", NOW])
                .output()
                .unwrap();
            assert!(
                output.status.code().is_some_and(|code| code <= 1),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    let view = |spec: &str, what: &[&str]| {
        let mut cmd = mcpc();
        cmd.args(["store"])
            .args(what)
            .args(["--store", spec, "--format", "json", "--now", NOW]);
        let mut value = json(&cmd.output().unwrap());
        value.as_object_mut().unwrap().remove("store");
        value
    };
    assert_eq!(
        view(&sqlite, &["ls"])["decisions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    for what in [&["ls"][..], &["budgets", "--policy", &policy][..]] {
        let (on_sqlite, on_postgres) = (view(&sqlite, what), view(&store, what));
        // Stored-at times differ (each eval stored at its own wall clock): compare the rest.
        let strip = |mut v: Value| {
            if let Some(rows) = v["decisions"].as_array_mut() {
                for row in rows {
                    row.as_object_mut().unwrap().remove("storedAt");
                    row.as_object_mut().unwrap().remove("decidedAt");
                }
            }
            v
        };
        assert_eq!(strip(on_sqlite), strip(on_postgres), "store {what:?}");
    }
}

#[test]
fn migrate_copies_decisions_and_spend_from_sqlite() {
    let Some(store) = store_spec("migrate") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.mcpolicy", POLICY);
    let big = write(dir.path(), "big.json", &request(&"x".repeat(200)));
    let sqlite = dir.path().join("s.db").display().to_string();
    for (n, text) in ["a", "b", "c"].iter().enumerate() {
        let small = write(dir.path(), &format!("small{n}.json"), &request(text));
        mcpc()
            .args(["eval", &policy, "--server", "fake", "--request", &small])
            .args(["--store", &sqlite, "--now", NOW])
            .output()
            .unwrap();
    }
    // A denial, answered twice more from the store.
    for _ in 0..3 {
        mcpc()
            .args(["eval", &policy, "--server", "fake", "--request", &big])
            .args(["--store", &sqlite, "--now", NOW])
            .output()
            .unwrap();
    }
    let migrate = |format: &str| {
        mcpc()
            .args(["store", "migrate", "--from", &sqlite, "--to", &store])
            .args(["--format", format])
            .output()
            .unwrap()
    };
    let copied = json(&migrate("json"));
    assert_eq!(copied["decisions"], 1, "{copied}");
    assert_eq!(copied["spendRows"], 3, "{copied}");
    let view = |spec: &str, what: &[&str]| {
        let mut cmd = mcpc();
        cmd.args(["store"])
            .args(what)
            .args(["--store", spec, "--format", "json", "--now", NOW]);
        let mut value = json(&cmd.output().unwrap());
        value.as_object_mut().unwrap().remove("store");
        value
    };
    for what in [&["ls"][..], &["budgets", "--policy", &policy][..]] {
        assert_eq!(view(&sqlite, what), view(&store, what), "store {what:?}");
    }
    let budgets = view(&store, &["budgets", "--policy", &policy]);
    assert_eq!(budgets["servers"][0]["limits"][0]["spent"], 3, "{budgets}");
    assert_eq!(view(&store, &["ls"])["decisions"][0]["represented"], 2);
    // The budget carries on in PostgreSQL: two more fit, the sixth does not.
    let mut verdicts = Vec::new();
    for n in 0..3 {
        let small = write(
            dir.path(),
            &format!("more{n}.json"),
            &request(&format!("m{n}")),
        );
        let output = mcpc()
            .args(["eval", &policy, "--server", "fake", "--request", &small])
            .args(["--store", &store, "--now", NOW])
            .output()
            .unwrap();
        verdicts.push(output.status.code());
    }
    assert_eq!(verdicts, [Some(0), Some(0), Some(1)]);
    // A second migration into the same, no longer empty, store copies nothing.
    let again = migrate("human");
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_password_on_the_command_line_is_refused_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.mcpolicy", POLICY);
    let small = write(dir.path(), "small.json", &request("hi"));
    let url = "postgres://mcpolicy:hunter2@db.example/decisions";
    let runs: [Vec<&str>; 4] = [
        vec![
            "proxy",
            "--policy",
            &policy,
            "--store",
            url,
            "--server-id",
            "s",
            "--",
            "true",
        ],
        vec![
            "eval",
            &policy,
            "--server",
            "fake",
            "--request",
            &small,
            "--store",
            url,
        ],
        vec![
            "store",
            "ls",
            "--store",
            "host=db.example dbname=d password=hunter2",
        ],
        vec!["store", "migrate", "--from", &policy, "--to", url],
    ];
    for args in runs {
        let output = mcpc().args(&args).stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        if args[1] != "migrate" {
            assert!(stderr.contains("PGPASSWORD"), "{args:?}: {stderr}");
        }
        assert!(
            !stderr.contains("hunter2"),
            "{args:?} echoes the password: {stderr}"
        );
    }
}

/// The TLS test cluster (`pg-test-cluster.sh start-tls DIR`) as a spec with
/// a fresh `schema=`, and its certificate directory; None (the test
/// returns) unless configured, and a failure under `MCPOLICY_REQUIRE_POSTGRES=1`.
fn tls_spec(prefix: &str) -> Option<(String, String)> {
    let [tls, certs] = postgres_spec::configured(
        [
            "MCPOLICY_TEST_POSTGRES_TLS",
            "MCPOLICY_TEST_POSTGRES_TLS_CERTS",
        ],
        "PostgreSQL TLS test",
    )?;
    Some((postgres_spec::fresh_schema(&tls, prefix), certs))
}

#[test]
fn a_store_over_verified_tls_works_and_a_wrong_ca_or_mode_is_refused_by_name() {
    let Some((store, certs)) = tls_spec("tls") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.mcpolicy", POLICY);
    let big = write(dir.path(), "big.json", &request(&"x".repeat(200)));
    let verified = format!("{store} sslmode=verify-full sslrootcert={certs}/ca.crt");
    let output = mcpc()
        .args(["eval", &policy, "--server", "fake", "--request", &big])
        .args(["--store", &verified, "--now", NOW])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed = json(
        &mcpc()
            .args(["store", "ls", "--store", &verified, "--format", "json"])
            .output()
            .unwrap(),
    );
    assert_eq!(listed["decisions"].as_array().unwrap().len(), 1, "{listed}");
    for (spec, want) in [
        (
            format!("{store} sslmode=verify-full sslrootcert={certs}/other-ca.crt"),
            format!(
                "sslmode=verify-full sslrootcert={certs}/other-ca.crt: the server's certificate \
                 does not verify"
            ),
        ),
        (
            format!("{store} sslmode=verify-everything"),
            "--store: sslmode=verify-everything is not a mode".to_owned(),
        ),
    ] {
        let output = mcpc()
            .args(["store", "ls", "--store", &spec])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(&want),
            "{stderr}"
        );
    }
}

/// `docs/threat-model.md`, "Scope: what a local server can reach": a
/// proxy whose PostgreSQL store reads its password from `PGPASSWORD` does
/// not hand it to the server (the server's other variables pass). The
/// server here is a shell that reports on its standard error and exits.
#[test]
fn the_server_does_not_inherit_the_store_password() {
    let Some(store) = store_spec("scope") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let server = r#"{ if [ -n "${PGPASSWORD+set}" ]; then echo "server: PGPASSWORD=$PGPASSWORD"; else echo "server: no PGPASSWORD"; fi
echo "server: MY_OWN=$MY_OWN"; } >&2"#;
    let out = mcpc()
        .args(["proxy", "--policy"])
        .arg(&policy)
        .args([
            "--store",
            &store,
            "--server-id",
            "fake",
            "--",
            "sh",
            "-c",
            server,
        ])
        // Trust authentication ignores it; what matters is who can read it.
        .env("PGPASSWORD", "store-secret")
        .env("MY_OWN", "kept")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Whole lines: the proxy's log quotes the server's command, script and all.
    let said = |line: &str| stderr.lines().any(|l| l == line);
    assert!(said("server: no PGPASSWORD"), "{stderr}");
    assert!(!stderr.contains("store-secret"), "{stderr}");
    assert!(said("server: MY_OWN=kept"), "{stderr}");
    assert!(
        stderr.contains("PGPASSWORD is withheld from the server"),
        "{stderr}"
    );
}
