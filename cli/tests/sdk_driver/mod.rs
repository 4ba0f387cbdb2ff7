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
