//! Ids through `mcpc proxy` as the official SDKs read them
//! (`proxy/PROXY.md`, "Framing and ids"; `docs/threat-model.md`, "An id a
//! client reads as another").
//!
//! * With the official TypeScript SDK as the client (pinned in
//!   `tests/e2e/typescript/package-lock.json`): a consent request with id
//!   `1`, then a `ping` with id `1.0`. The SDK answers the ping with id `1`;
//!   the proxy must refuse the ping (its id as written) so that the user's
//!   refusal, not the ping's `{}`, decides the consent request.
//!
//! Needs node (≥ 20) and `tests/e2e/typescript/setup.sh` (`npm ci`) run;
//! skipped with a message otherwise, unless `MCPOLICY_REQUIRE_NODE=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod sdk_driver;

use std::process::Command;

use sdk_driver::{Run, drive, repo, unavailable};
use serde_json::Value;

fn node_with_sdk() -> Option<String> {
    let node = std::env::var("MCPOLICY_NODE").unwrap_or_else(|_| "node".to_owned());
    let installed = repo()
        .join("tests/e2e/typescript/node_modules/@modelcontextprotocol/sdk/package.json")
        .is_file();
    match Command::new(&node).arg("--version").output() {
        Ok(out) if out.status.success() && installed => Some(node),
        _ => unavailable(
            "MCPOLICY_REQUIRE_NODE",
            "node or the TypeScript SDK is not available",
            "run tests/e2e/typescript/setup.sh",
        ),
    }
}

#[test]
fn a_ping_aliasing_a_consent_request_is_not_the_users_approval() {
    let Some(node) = node_with_sdk() else {
        return;
    };
    let suite = repo().join("tests/e2e/typescript");
    let Run { report, audit, log } = drive(&node, &suite.join("alias.mjs"), &suite);
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    let received: Vec<String> = report["received"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect();
    // The ping is refused with its id as written, and never reached the SDK.
    assert!(
        received
            .iter()
            .any(|l| l.starts_with(r#"{"jsonrpc":"2.0","id":1.0,"error":{"code":-32600,"#)),
        "{received:#?}\n{log}"
    );
    // Request 1 is answered once: with the user's refusal.
    let answers: Vec<Value> = received
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("method").is_none() && v["id"] == 1 && !l_is_raw_alias(v))
        .collect();
    assert_eq!(answers.len(), 1, "{received:#?}\n{log}");
    assert_eq!(
        answers[0]["error"]["data"]["reason"], "user.denied",
        "{received:#?}"
    );
    assert!(
        !audit
            .iter()
            .any(|line| line["event"] == "consent" && line["outcome"] != "deny"),
        "no approval was recorded: {audit:#?}"
    );
}

/// The refusal of the `1.0` ping also parses as id 1; it is told apart by
/// its code (the answers to request 1 are a result or the user's refusal).
fn l_is_raw_alias(v: &Value) -> bool {
    v["error"]["code"] == -32600
}
