//! What the end-to-end suites with the official MCP SDKs (Python, TypeScript)
//! share: each runs a driver script of its SDK that starts the real `mcpc
//! proxy` under the one e2e policy and prints a JSON report.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The policy every proxy end-to-end suite runs under.
pub const POLICY: &str = include_str!("../../../tests/e2e/proxy.mcpolicy");

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compiler/ has a parent")
        .to_path_buf()
}

/// A suite whose SDK cannot run: fails when `require_var` is `1` (as in
/// CI), else skips with `hint`. Always `None`, for the caller to return.
pub fn unavailable<T>(require_var: &str, why: &str, hint: &str) -> Option<T> {
    assert!(
        std::env::var(require_var).as_deref() != Ok("1"),
        "{require_var}=1 but {why} ({hint})"
    );
    eprintln!("skipping: {why}; {hint}");
    None
}

/// What one driver run left behind.
#[allow(
    dead_code,
    reason = "each suite compiles this module; the conformance suite runs no driver"
)]
pub struct Run {
    /// The driver's JSON report (its standard output).
    pub report: Value,
    /// The proxy's `--audit` lines.
    pub audit: Vec<Value>,
    /// The proxy's `--log`.
    #[allow(
        dead_code,
        reason = "each suite compiles this module; not every one reads the log"
    )]
    pub log: String,
}

/// Runs `interpreter script --mcpc … --policy … --store … --audit … --log …`
/// in `cwd` and asserts that it succeeded.
#[allow(
    dead_code,
    reason = "each suite compiles this module; the conformance suite runs no driver"
)]
pub fn drive(interpreter: &str, script: &Path, cwd: &Path) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let policy = dir.path().join("e2e.mcpolicy");
    std::fs::write(&policy, POLICY).expect("the policy is written");
    let audit = dir.path().join("audit.jsonl");
    let log = dir.path().join("proxy.log");
    let output = Command::new(interpreter)
        .arg(script)
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
        .current_dir(cwd)
        .output()
        .expect("the driver starts");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        output.status.success(),
        "{} failed: {}\n{}\nproxy log:\n{log}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let report = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)));
    let audit = std::fs::read_to_string(&audit)
        .expect("the audit log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("an audit line is JSON"))
        .collect();
    Run { report, audit, log }
}

/// `node` for the TypeScript SDK suite (`tests/e2e/typescript`), when it
/// runs and the npm dependencies are installed; `None` (skipped) unless
/// `MCPOLICY_REQUIRE_NODE=1`.
#[allow(
    dead_code,
    reason = "each suite compiles this module; the Python one does not run node"
)]
pub fn typescript_node() -> Option<String> {
    let node = std::env::var("MCPOLICY_NODE").unwrap_or_else(|_| "node".to_owned());
    let suite = repo().join("tests/e2e/typescript");
    let probe = Command::new(&node).arg("--version").output();
    let why = match &probe {
        Ok(output) if output.status.success() => {
            let installed = [
                "@modelcontextprotocol/sdk",
                "@modelcontextprotocol/server-everything",
            ]
            .iter()
            .all(|p| {
                suite
                    .join("node_modules")
                    .join(p)
                    .join("package.json")
                    .is_file()
            });
            if installed {
                return Some(node);
            }
            "the npm dependencies are not installed".to_owned()
        }
        Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        Err(error) => format!("{node}: {error}"),
    };
    unavailable(
        "MCPOLICY_REQUIRE_NODE",
        &format!("the TypeScript SDK suite cannot run: {why}"),
        "run tests/e2e/typescript/setup.sh",
    )
}

/// A Python that can `import` each of `modules` (the MCP SDK's, for
/// `tests/e2e/python`): `MCPOLICY_PYTHON`, else `python3`; `None` (skipped)
/// unless `MCPOLICY_REQUIRE_PYTHON=1`.
#[allow(
    dead_code,
    reason = "each suite compiles this module; the TypeScript ones run node"
)]
pub fn python_importing(modules: &str) -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output();
    if probe.as_ref().is_ok_and(|o| o.status.success()) {
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

/// What the Python SDK's scenarios give on every transport (`drive.py`
/// through `mcpc proxy`, `drive_http.py` through `mcpc gateway`): the
/// report's `retry`, `refuse`, `variants` and `trim`, and the audit's
/// fresh evaluations.
#[allow(
    dead_code,
    reason = "each suite compiles this module; only the Python ones run these scenarios"
)]
pub fn assert_the_python_scenarios(report: &Value, lines: &[Value]) {
    use serde_json::json;

    // The seed: the day's one request, then 50 identical retries — denied
    // with the same error every time, and the client never asked again.
    let retry = &report["retry"];
    let outputs = retry["outputs"].as_array().expect("outputs");
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
    let outputs = refuse["outputs"].as_array().expect("outputs");
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
    let outputs = variants["outputs"].as_array().expect("outputs");
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

    // The audit: one evaluation per distinct request.
    let fresh = |server: &str| {
        lines
            .iter()
            .filter(|l| l["server"] == server && l["event"] == "decision" && l["replayed"] == false)
            .count()
    };
    assert_eq!(fresh("release-notes"), 2, "the warm-up and the first retry");
    assert_eq!(fresh("web-fetch"), 1);
    assert_eq!(fresh("chatty"), 50);
}
