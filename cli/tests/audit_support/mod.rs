//! A real proxy run that writes an audit file: `mcpc proxy … -- cat`, so
//! that every line the test writes comes back to the proxy as the server's
//! (the `cat` server echoes it), is decided, and lands in `--audit`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

pub const POLICY: &str = r#"mcpolicy 1
protocol 2025-11-25
identity systemPrompt, messages, includeContext, modelPreferences

defaults {
  max_context thisServer
  max_tokens 500
  consent never
}

server "looper" {
  sampling off
  retry_alert 3 per 10m
}

server "asker" {
  consent always
}

server "greedy" {
  models "claude-*"
}
"#;

pub fn mcpc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcpc"))
}

/// One proxy process for one server id.
pub struct Proxy {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Receiver<String>,
}

impl Proxy {
    pub fn start(dir: &Path, server: &str) -> Proxy {
        let policy = dir.join("policy.mcpolicy");
        std::fs::write(&policy, POLICY).unwrap();
        let mut child = mcpc()
            .arg("proxy")
            .arg("--policy")
            .arg(&policy)
            .arg("--store")
            .arg(dir.join("store.sqlite3"))
            .arg("--audit")
            .arg(dir.join("audit.jsonl"))
            .arg("--log")
            .arg(dir.join("proxy.log"))
            .args(["--server-id", server, "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, out) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Proxy { child, stdin, out }
    }

    /// Writes a line and returns the one line the client then receives.
    pub fn exchange(&mut self, line: &Value) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let got = self
            .out
            .recv_timeout(Duration::from_secs(20))
            .expect("the proxy answers");
        serde_json::from_str(&got).unwrap()
    }

    pub fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A sampling request.
pub fn sampling(id: u64, text: &str, extra: Value) -> Value {
    let mut params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": 100,
    });
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": params})
}

/// A real run over three servers: a retry loop (`looper`, six identical
/// refused requests, threshold 3), consent prompts (`asker`, one approved,
/// one refused) and a server asking wider than it may on every call
/// (`greedy`, 22 requests with `maxTokens` 100000, `allServers` context
/// and a hint outside `models`: the trim alert). Returns the audit file.
pub fn real_run(dir: &Path) -> PathBuf {
    let mut looper = Proxy::start(dir, "looper");
    for i in 0..6 {
        let answer = looper.exchange(&sampling(i, "again", json!({})));
        assert_eq!(answer["error"]["code"], -32010, "{answer}");
    }
    looper.finish();

    let mut asker = Proxy::start(dir, "asker");
    let forwarded = asker.exchange(&sampling(1, "may I", json!({})));
    assert_eq!(forwarded["method"], "sampling/createMessage");
    asker.exchange(
        &json!({"jsonrpc": "2.0", "id": 1, "result": {"role": "assistant",
        "model": "claude-3", "content": {"type": "text", "text": "ok"}}}),
    );
    let forwarded = asker.exchange(&sampling(2, "may I again", json!({})));
    assert_eq!(forwarded["method"], "sampling/createMessage");
    asker.exchange(
        &json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "User rejected"}}),
    );
    asker.finish();

    let mut greedy = Proxy::start(dir, "greedy");
    for i in 0..22 {
        let wide = json!({
            "maxTokens": 100_000 + i,
            "includeContext": "allServers",
            "modelPreferences": {"hints": [{"name": "gpt-4o"}, {"name": "claude-3"}]},
        });
        let forwarded = greedy.exchange(&sampling(i, &format!("wide {i}"), wide));
        assert_eq!(forwarded["params"]["maxTokens"], 500, "{forwarded}");
    }
    // One modest request: allowed as sent.
    greedy.exchange(&sampling(99, "modest", json!({"maxTokens": 10})));
    greedy.finish();
    dir.join("audit.jsonl")
}

/// The Python interpreter to validate with: `MCPOLICY_PYTHON` (CI sets it to
/// a virtual environment with `jsonschema`), else `python3`.
pub fn python_with(module: &str) -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var_os("MCPOLICY_REQUIRE_PYTHON").is_none(),
        "{python} cannot import {module}, and MCPOLICY_REQUIRE_PYTHON is set"
    );
    eprintln!("skipping: {python} cannot import {module}");
    None
}
