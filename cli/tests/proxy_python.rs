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

mod sdk_driver;

use std::path::Path;

use sdk_driver::{Run, assert_the_python_scenarios, drive, python_importing, repo};
use serde_json::Value;

#[test]
fn python_sdk_server_and_client_behind_the_proxy() {
    let Some(python) = python_importing("mcp.server.mcpserver, mcp.client.stdio") else {
        return;
    };
    let Run {
        report,
        audit: lines,
        ..
    } = drive(
        &python,
        &repo().join("tests/e2e/python/drive.py"),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    );

    assert_the_python_scenarios(&report, &lines);

    // Replays are marked, and counted.
    let of = |server: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["server"] == server && l["event"] == "decision")
            .collect()
    };
    let last = of("web-fetch").last().copied().unwrap().clone();
    assert_eq!(last["represented"], 49);
    assert_eq!(last["replayed"], true);
}
