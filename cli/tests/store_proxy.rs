//! `mcpc store` on the store a running `mcpc proxy` is using. The proxy
//! runs `cat` as its server, so every line this test writes as the client
//! comes back to the proxy as the server's request: a sampling request
//! written here is decided by the proxy, and an allowed one is forwarded
//! back here to answer as the client.
//!
//! - While the proxy answers requests, `mcpc store ls`, `stats`, `budgets`,
//!   `forget` and `prune` run again and again; none fails, every answer the
//!   proxy gives is the policy's, and `PRAGMA integrity_check` is `ok`
//!   afterwards.
//! - A refusal forgotten with `mcpc store forget` is decided afresh by the
//!   proxy on the next identical request: the user is asked again.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

fn mcpc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcpc"))
}

/// A running `mcpc proxy … -- cat`, driven as its client.
struct Proxy {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Proxy {
    fn start(policy: &Path, store: &Path, server_id: &str) -> Proxy {
        let mut child = mcpc()
            .arg("proxy")
            .arg("--policy")
            .arg(policy)
            .arg("--store")
            .arg(store)
            .args(["--server-id", server_id, "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (send, lines) = channel();
        // A reader thread, so that a proxy that stops answering fails the
        // test instead of hanging it.
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Proxy {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, frame: &Value) {
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn read(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the proxy answers");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Closes the client's side and waits for the proxy to exit.
    fn finish(self) {
        let Proxy {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
}

fn sampling(id: u64, text: &str, messages: usize) -> Value {
    let message = json!({"role": "user", "content": {"type": "text", "text": text}});
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "sampling/createMessage",
        "params": {"messages": vec![message; messages], "maxTokens": 5},
    })
}

fn result(id: u64) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"},
    })
}

/// `mcpc store ARGS…`: exit code, stdout, stderr.
fn store(args: &[&str]) -> (i32, String, String) {
    let output = mcpc().arg("store").args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const POLICY: &str = r#"mcpolicy 1
protocol 2025-11-25
identity systemPrompt, messages

reason user.denied { retryable false; ttl forever }

defaults {
  max_messages 1
  rate 100000 per 1m
  budget 1000000 requests per day
  consent never
}

server "asker" { consent first }
"#;

#[test]
fn a_forgotten_refusal_is_decided_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let db = dir.path().join("store.sqlite3");
    let spec = db.to_str().unwrap();
    let mut proxy = Proxy::start(&policy, &db, "asker");

    // Asked, refused by the user: stored.
    proxy.send(&sampling(1, "may I", 1));
    let asked = proxy.read();
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    proxy.send(&json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}}));
    let refused = proxy.read();
    assert_eq!(
        refused["error"]["data"]["reason"], "user.denied",
        "{refused}"
    );
    // The same request again: answered from the store, nobody asked.
    proxy.send(&sampling(2, "may I", 1));
    let replayed = proxy.read();
    assert_eq!(replayed["id"], 2);
    assert_eq!(
        replayed["error"]["data"]["reason"], "user.denied",
        "{replayed}"
    );
    // The replay's count is written by the running proxy within
    // `STORE_FLUSH_AFTER` (`docs/spec/store.md`, "Durability"): another
    // process sees it then, without waiting for the proxy to exit.
    let started = std::time::Instant::now();
    let rows = loop {
        let (code, stdout, stderr) = store(&["ls", "--store", spec, "--format", "json"]);
        assert_eq!(code, 0, "{stderr}");
        let listed: Value = serde_json::from_str(&stdout).unwrap();
        let rows = listed["decisions"].as_array().unwrap().clone();
        if rows.first().is_some_and(|row| row["represented"] == 1)
            || started.elapsed() > std::time::Duration::from_secs(10)
        {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["reason"], "user.denied");
    assert_eq!(rows[0]["statement"], "consent");
    assert_eq!(rows[0]["represented"], 1, "written by the running proxy");

    // Forgotten while the proxy runs.
    let (code, stdout, stderr) = store(&["forget", "--store", spec, "--reason", "user.denied"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("removed 1 stored decision;"), "{stdout}");

    // The next identical request is decided afresh: the user is asked again.
    proxy.send(&sampling(3, "may I", 1));
    let asked = proxy.read();
    assert_eq!(asked["id"], 3);
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    proxy.send(&result(3));
    let answered = proxy.read();
    assert_eq!(answered["id"], 3);
    assert_eq!(answered["result"]["content"]["text"], "ok", "{answered}");
    let (_, stdout, _) = store(&["ls", "--store", spec, "--format", "json"]);
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    let rows = listed["decisions"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["reason"], "user.approved");
    proxy.finish();
}

#[test]
fn store_commands_share_the_store_with_a_running_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let db = dir.path().join("store.sqlite3");
    let mut proxy = Proxy::start(&policy, &db, "echo");
    // The proxy has opened (created) the store before the commands start.
    proxy.send(&sampling(0, "warm", 2));
    assert_eq!(
        proxy.read()["error"]["data"]["reason"],
        "policy.input_too_large"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let driver = {
        let (stop, answered) = (stop.clone(), answered.clone());
        std::thread::spawn(move || {
            let mut id = 1u64;
            while !stop.load(Ordering::Relaxed) {
                // Two messages exceed max_messages: denied and stored (a
                // few prompts repeat, so some are replays); one message
                // is allowed, admitted, forwarded and answered.
                proxy.send(&sampling(id, &format!("p{}", id % 7), 2));
                let denied = proxy.read();
                assert_eq!(denied["id"], id, "{denied}");
                assert_eq!(
                    denied["error"]["data"]["reason"], "policy.input_too_large",
                    "{denied}"
                );
                id += 1;
                proxy.send(&sampling(id, &format!("q{id}"), 1));
                let forwarded = proxy.read();
                assert_eq!(forwarded["id"], id, "{forwarded}");
                assert_eq!(forwarded["method"], "sampling/createMessage", "{forwarded}");
                proxy.send(&result(id));
                let back = proxy.read();
                assert_eq!(back["id"], id, "{back}");
                assert_eq!(back["result"]["content"]["text"], "ok", "{back}");
                id += 1;
                answered.fetch_add(2, Ordering::Relaxed);
            }
            proxy.finish();
        })
    };

    let spec = db.to_str().unwrap();
    let policy = policy.to_str().unwrap();
    let commands: [&[&str]; 6] = [
        &["ls", "--store", spec, "--format", "json"],
        &["stats", "--store", spec, "--format", "json"],
        &[
            "budgets", "--store", spec, "--policy", policy, "--format", "json",
        ],
        &["forget", "--store", spec, "--server", "echo", "--yes"],
        &[
            "prune", "--store", spec, "--policy", policy, "--yes", "--format", "json",
        ],
        &[
            "ls",
            "--store",
            spec,
            "--server",
            "echo",
            "--verdict",
            "deny",
        ],
    ];
    let mut forgotten = 0;
    for round in 0..12 {
        for args in commands {
            let (code, stdout, stderr) = store(args);
            let nothing_to_forget = args[0] == "forget" && code == 1;
            assert!(
                code == 0 || nothing_to_forget,
                "round {round}: mcpc store {args:?} exited {code}: {stderr}"
            );
            if args[0] == "forget" && code == 0 {
                forgotten += 1;
            }
            if args.contains(&"json") {
                let parsed: Result<Value, _> = serde_json::from_str(&stdout);
                assert!(parsed.is_ok(), "{args:?}: {stdout}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    driver.join().expect("every answer was the policy's");
    assert!(
        answered.load(Ordering::Relaxed) > 0,
        "the proxy answered while the commands ran"
    );
    assert!(forgotten > 0, "forget found stored denials to remove");

    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let (code, stdout, stderr) = store(&["stats", "--store", spec, "--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let stats: Value = serde_json::from_str(&stdout).unwrap();
    assert!(stats["size"]["spendRows"].as_u64().unwrap() > 0, "{stats}");
}
