//! `mcpc proxy` between a server and a client both written with the official
//! MCP Python SDK (`mcp` on PyPI, pinned in `tests/e2e/python/requirements.txt`):
//! the server samples with `ctx.session.create_message` from inside a tool;
//! the client's sampling callback plays the user and the model.
//!
//! Needs a Python with `mcp`: `MCPOLICY_PYTHON` (`.ci/run` points it at a
//! virtual environment it installs the requirements into), else `python3`.
//! Without one the test is skipped with a message, unless
//! `MCPOLICY_REQUIRE_PYTHON=1`, when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The policy both proxy end-to-end suites (rmcp and Python) run under.
const POLICY: &str = include_str!("../../tests/e2e/proxy.mcpolicy");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A Python that can import the MCP SDK, or `None` (skipped) unless required.
fn python_with_mcp() -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver, mcp.client.stdio"])
        .output();
    let ok = probe.as_ref().is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    let why = match &probe {
        Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        Err(error) => error.to_string(),
    };
    assert!(
        std::env::var("MCPOLICY_REQUIRE_PYTHON").as_deref() != Ok("1"),
        "MCPOLICY_REQUIRE_PYTHON=1 but {python} cannot import the MCP SDK: {why}"
    );
    eprintln!(
        "skipping the Python SDK end-to-end test: {python} cannot import `mcp` ({why}); \
         pip install -r tests/e2e/python/requirements.txt and set MCPOLICY_PYTHON"
    );
    None
}

#[test]
fn python_sdk_server_and_client_behind_the_proxy() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("e2e.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let audit = dir.path().join("audit.jsonl");
    let log = dir.path().join("proxy.log");
    let output = Command::new(&python)
        .arg(repo().join("tests/e2e/python/drive.py"))
        .arg("--mcpc")
        .arg(env!("CARGO_BIN_EXE_mcpc"))
        .arg("--policy")
        .arg(&policy)
        .arg("--store")
        .arg(dir.path().join("decisions.sqlite3"))
        .arg("--audit")
        .arg(&audit)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        output.status.success(),
        "drive.py failed: {}\n{}\nproxy log:\n{log_text}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();

    // The seed: the day's one request, then 50 identical retries — denied
    // with the same error every time, and the client never asked again.
    let retry = &report["retry"];
    let outputs = retry["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 51);
    assert!(outputs[0].get("result").is_some(), "{}", outputs[0]);
    let first = &outputs[1]["error"];
    assert_eq!(first["code"], -32010, "{first}");
    assert_eq!(first["data"]["reason"], "policy.budget_exhausted");
    assert!(outputs[1..].iter().all(|o| o["error"] == *first));
    assert_eq!(
        (&retry["prompts"], &retry["provider_calls"]),
        (&json!(1), &json!(1))
    );

    // Refused in the client's dialog: asked once, nothing run, 49 replays.
    let refuse = &report["refuse"];
    let outputs = refuse["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 50);
    assert_eq!(
        outputs[0]["error"]["data"],
        json!({"reason": "user.denied", "server": "web-fetch", "retryable": false})
    );
    assert_eq!(outputs[0]["error"]["code"], -1);
    assert!(outputs.iter().all(|o| o["error"] == outputs[0]["error"]));
    assert_eq!(
        (&refuse["prompts"], &refuse["provider_calls"]),
        (&json!(1), &json!(0))
    );

    // One character different each time: the rate limit stops them.
    let variants = &report["variants"];
    let outputs = variants["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 50);
    let allowed = outputs.iter().filter(|o| o.get("result").is_some()).count();
    let limited = outputs
        .iter()
        .filter(|o| o["error"]["data"]["reason"] == "policy.rate_limit")
        .count();
    assert_eq!((allowed, limited), (3, 47));
    assert_eq!(variants["provider_calls"], 3);

    // The trim reaches the Python server with `_meta.context` intact.
    let trim = &report["trim"];
    assert_eq!(
        trim["outputs"][0]["result"]["_meta"]["context"],
        json!({"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"})
    );
    assert_eq!(trim["seen"][0]["includeContext"], "thisServer");

    // The audit: one evaluation per distinct request, replays marked.
    let lines: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |server: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["server"] == server && l["event"] == "decision")
            .collect()
    };
    let fresh = |server: &str| of(server).iter().filter(|l| l["replayed"] == false).count();
    assert_eq!(fresh("release-notes"), 2, "the warm-up and the first retry");
    assert_eq!(fresh("web-fetch"), 1);
    assert_eq!(fresh("chatty"), 50);
    let last = of("web-fetch").last().copied().unwrap().clone();
    assert_eq!(last["represented"], 49);
    assert_eq!(last["replayed"], true);
}
