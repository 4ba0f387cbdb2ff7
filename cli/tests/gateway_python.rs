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

use sdk_driver::{Run, assert_the_python_scenarios, drive, python_importing, repo};
use serde_json::json;

#[test]
fn python_sdk_server_and_client_over_streamable_http_behind_the_gateway() {
    let Some(python) =
        python_importing("mcp.server.mcpserver, mcp.client.streamable_http, uvicorn")
    else {
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

    // As through the stdio proxy; `variants` ran as two sessions at once
    // whose server request ids collide, sharing the route's rate.
    assert_the_python_scenarios(&report, &lines);
    let first = &report["retry"]["outputs"][1]["error"];

    // Neither a new session nor a new gateway on the same store buys a retry.
    for scenario in ["retry_new_session", "retry_after_restart"] {
        let again = &report[scenario];
        assert_eq!(again["outputs"][0]["error"], *first, "{scenario}");
        assert_eq!(again["prompts"], 0, "{scenario}: the client never saw it");
    }

    // The refusal outlives the gateway.
    let refused = &report["refuse"]["outputs"][0]["error"];
    let refused_again = &report["refuse_after_restart"];
    assert_eq!(refused_again["outputs"][0]["error"], *refused);
    assert_eq!(refused_again["prompts"], 0);

    // Past the deadline the gateway answers the server itself, long before
    // the slow model finishes; the late completion goes nowhere.
    let deadline = &report["deadline"];
    assert_eq!(
        deadline["outputs"][0]["error"]["data"],
        json!({"reason": "policy.deadline", "server": "slow", "retryable": true, "retryAfter": 30}),
        "{deadline}"
    );

    // Every request carried the client's bearer token: it reached neither
    // the log nor the audit.
    let token = "mcpolicy-e2e-secret-7f3a9c";
    assert!(!log.contains(token), "{log}");
    assert!(lines.iter().all(|line| !line.to_string().contains(token)));
}
