//! `mcpc proxy` in front of `@modelcontextprotocol/server-everything`, with a
//! client written with the official TypeScript SDK (both from npm, pinned
//! in `tests/e2e/typescript/package-lock.json`): task-augmented sampling
//! (MCP 2025-11-25 tasks) is decided on the task's terminal state, not on
//! the task-creation reply (`docs/spec/evaluation.md`, "Tasks").
//!
//! Needs node (≥ 20) and `tests/e2e/typescript/setup.sh` (`npm ci`) run.
//! Without them the test is skipped with a message, unless
//! `MCPOLICY_REQUIRE_NODE=1`, when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod sdk_driver;

use std::path::PathBuf;

use sdk_driver::{Run, drive, repo, typescript_node};
use serde_json::Value;

fn suite() -> PathBuf {
    repo().join("tests/e2e/typescript")
}

#[test]
fn a_refused_sampling_task_is_replayed_from_the_store() {
    let Some(node) = typescript_node() else {
        return;
    };
    let Run {
        report,
        audit: lines,
        log: log_text,
    } = drive(&node, &suite().join("drive.mjs"), &suite());
    assert!(
        report["tools"]
            .as_array()
            .unwrap()
            .contains(&Value::from("trigger-sampling-request-async")),
        "server-everything offers task sampling to a client with the tasks capability: {report}"
    );

    // The user was asked once, as a task; the task failed (the refusal).
    let asked = report["asked"].as_array().unwrap();
    assert_eq!(
        asked.len(),
        1,
        "asked again after refusing: {report}\n{log_text}"
    );
    assert_eq!(asked[0]["task"]["ttl"], 300_000, "{report}");
    let calls = report["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{report}");
    let first = calls[0]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(first.starts_with("[FAILED] User rejected"), "{first}");
    // The identical request again: refused from the store, the client never asked.
    let second = &calls[1]["result"];
    assert_eq!(second["isError"], true, "{report}");
    let text = second["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("MCP error -1"), "{text}");

    let events: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["event"].as_str().unwrap(),
                l["via"].as_str().unwrap(),
                l["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("decision", "request", "consent"),
            ("consent", "task", "deny"),
            ("decision", "request", "deny"),
        ],
        "{lines:#?}"
    );
    assert_eq!(lines[1]["reason"], "user.denied");
    assert_eq!(lines[2]["reason"], "user.denied");
    assert_eq!(lines[2]["replayed"], true);
    assert_eq!(lines[0]["identity"], lines[2]["identity"]);
}
