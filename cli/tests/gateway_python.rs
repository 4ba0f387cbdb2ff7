//! `mcpc gateway` between a server and a client both written with the
//! official MCP Python SDK over Streamable HTTP (`mcp` on PyPI, pinned in
//! `tests/e2e/python/requirements.txt`): the server samples with
//! `ctx.session.create_message` from inside a tool, on the SSE stream of the
//! client's `tools/call` POST; the client's sampling callback plays the user
//! and the model and answers in POSTs of its own. The same scenarios as
//! `proxy_python.rs` (the stdio proxy), plus what only HTTP has: several
//! sessions of one route at once, whose server request ids collide, and a
//! gateway restarted on the same store (`docs/spec/transports.md`).
//!
//! Needs a Python with `mcp`: `MCPOLICY_PYTHON` (`.ci/run` points it at a
//! virtual environment it installs the requirements into), else `python3`.
//! Without one the test is skipped with a message, unless
//! `MCPOLICY_REQUIRE_PYTHON=1`, when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod sdk_driver;

use std::path::Path;
use std::process::Command;

use sdk_driver::{Run, drive, repo, unavailable};
use serde_json::{Value, json};

/// A Python that can import the MCP SDK's HTTP client and server, or `None`
/// (skipped) unless required.
fn python_with_mcp() -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python)
        .args([
            "-c",
            "import mcp.server.mcpserver, mcp.client.streamable_http, uvicorn",
        ])
        .output();
    let ok = probe.as_ref().is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    let why = match &probe {
        Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        Err(error) => error.to_string(),
    };
    unavailable(
        "MCPOLICY_REQUIRE_PYTHON",
        &format!("{python} cannot import the MCP SDK ({why})"),
        "pip install -r tests/e2e/python/requirements.txt and set MCPOLICY_PYTHON",
    )
}

#[test]
fn python_sdk_server_and_client_over_streamable_http_behind_the_gateway() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let Run {
        report,
        audit: lines,
        log,
    } = drive(
        &python,
        &repo().join("tests/e2e/python/drive_http.py"),
        &repo().join("tests/e2e/python"),
    );

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
    // Neither a new session nor a new gateway on the same store buys a retry.
    for scenario in ["retry_new_session", "retry_after_restart"] {
        let again = &report[scenario];
        assert_eq!(again["outputs"][0]["error"], *first, "{scenario}");
        assert_eq!(again["prompts"], 0, "{scenario}: the client never saw it");
    }

    // Refused in the client's dialog: asked once, nothing run, 49 replays,
    // and the refusal outlives the gateway.
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
    let refused_again = &report["refuse_after_restart"];
    assert_eq!(refused_again["outputs"][0]["error"], outputs[0]["error"]);
    assert_eq!(refused_again["prompts"], 0);

    // One character different each time, from two sessions at once whose
    // server request ids collide: each session keeps its own ids, and the
    // rate limit is the route's.
    let variants = &report["variants"];
    let outputs = variants["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 50);
    let allowed = outputs.iter().filter(|o| o.get("result").is_some()).count();
    let limited = outputs
        .iter()
        .filter(|o| o["error"]["data"]["reason"] == "policy.rate_limit")
        .count();
    assert_eq!((allowed, limited), (3, 47), "{outputs:?}");
    assert_eq!(variants["provider_calls"], 3);

    // The trim reaches the Python server with `_meta.context` intact, and
    // the client saw the narrowed request.
    let trim = &report["trim"];
    assert_eq!(
        trim["outputs"][0]["result"]["_meta"]["context"],
        json!({"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"})
    );
    assert_eq!(trim["seen"][0]["includeContext"], "thisServer");

    // Past the deadline the gateway answers the server itself, long before
    // the slow model finishes; the late completion goes nowhere.
    let deadline = &report["deadline"];
    assert_eq!(
        deadline["outputs"][0]["error"]["data"],
        json!({"reason": "policy.deadline", "server": "slow", "retryable": true, "retryAfter": 30}),
        "{deadline}"
    );

    // The audit: one evaluation per distinct request, replays marked.
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
    // Every request carried the client's bearer token: it reached neither
    // the log nor the audit.
    let token = "mcpolicy-e2e-secret-7f3a9c";
    assert!(!log.contains(token), "{log}");
    assert!(lines.iter().all(|line| !line.to_string().contains(token)));
}
