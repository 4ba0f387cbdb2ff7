//! `mcpc gateway` is transparent to everything but sampling: the MCP
//! conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/e2e/typescript/package-lock.json`) run against
//! `@modelcontextprotocol/server-everything` over Streamable HTTP gives,
//! scenario by scenario and check by check, the same outcome directly and
//! through the gateway (`docs/spec/transports.md`). The suite's client is
//! the official TypeScript SDK's; the server is the reference servers' own.
//! Neither is ours, and the comparison holds whatever either gets wrong.
//!
//! Needs node and the npm dependencies (`tests/e2e/typescript/setup.sh`);
//! skipped without them unless `MCPOLICY_REQUIRE_NODE=1` (CI), when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod sdk_driver;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sdk_driver::{POLICY, repo, typescript_node};
use serde_json::Value;

/// A child killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on now (the server binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_until_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} is not listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// server-everything over Streamable HTTP on a port of its own.
fn server_everything(node: &str) -> (Killed, String) {
    let port = free_port();
    let suite = repo().join("tests/e2e/typescript");
    let child = Command::new(node)
        .arg(suite.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .current_dir(&suite)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server-everything starts");
    let child = Killed(child);
    wait_until_listening(port, "server-everything");
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// `mcpc gateway` with one route, `everything`, in front of `upstream`;
/// its base URL as it reports it.
fn gateway(dir: &Path, upstream: &str) -> (Killed, String) {
    let policy = dir.join("e2e.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("gateway")
        .arg("--policy")
        .arg(&policy)
        .arg("--store")
        .arg(dir.join("decisions.sqlite3"))
        .args(["--listen", "127.0.0.1:0", "--route"])
        .arg(format!("everything={upstream}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcpc gateway starts");
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);
    let (found, listening) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && let Some((_, url)) = line.split_once("listening on ") {
                let url = url.split_whitespace().next().unwrap_or_default().to_owned();
                sent = found.send(url).is_ok();
            }
        }
    });
    let base = listening
        .recv_timeout(Duration::from_secs(60))
        .expect("mcpc gateway says where it listens");
    (child, base.trim_end_matches('/').to_owned())
}

/// The length of the time a results directory's name ends with
/// (`-2026-12-05T09-05-41-148Z`).
const TIME_SUFFIX: usize = "-2026-12-05T09-05-41-148Z".len();

/// Every check of every scenario the suite ran against `url`: scenario →
/// (check id, status, error message), in the order the suite wrote them.
fn conformance(node: &str, url: &str) -> BTreeMap<String, Vec<(String, String, String)>> {
    let out = tempfile::tempdir().unwrap();
    let bin = repo()
        .join("tests/e2e/typescript/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let output = Command::new(node)
        .arg(bin)
        .args(["server", "--url", url])
        .current_dir(out.path())
        .output()
        .expect("the conformance suite runs");
    let mut scenarios = BTreeMap::new();
    let results = out.path().join("results");
    let entries = std::fs::read_dir(&results).unwrap_or_else(|error| {
        panic!(
            "no results from the conformance suite ({error}):\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        // `server-NAME-2026-12-05T09-05-41-148Z`: the scenario without its
        // time (a fixed 25 characters).
        let scenario = name
            .get(..name.len().saturating_sub(TIME_SUFFIX))
            .unwrap_or(&name)
            .to_owned();
        let checks: Vec<Value> =
            serde_json::from_slice(&std::fs::read(entry.path().join("checks.json")).unwrap())
                .unwrap();
        let outcome = checks
            .iter()
            .map(|check| {
                let text = |key: &str| check[key].as_str().unwrap_or_default().to_owned();
                (text("id"), text("status"), text("errorMessage"))
            })
            .collect();
        scenarios.insert(scenario, outcome);
    }
    scenarios
}

#[test]
fn the_conformance_suite_reads_server_everything_the_same_through_the_gateway() {
    let Some(node) = typescript_node() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, upstream) = server_everything(&node);
    let (_gateway, base) = gateway(dir.path(), &upstream);

    let direct = conformance(&node, &upstream);
    let through = conformance(&node, &format!("{base}/everything/mcp"));

    // Not vacuous: the suite ran its scenarios, and some passed.
    assert!(direct.len() >= 20, "{direct:#?}");
    let passed = direct
        .values()
        .flatten()
        .filter(|(_, status, _)| status == "SUCCESS")
        .count();
    assert!(passed >= 5, "{direct:#?}");
    for (scenario, checks) in &direct {
        assert_eq!(
            through.get(scenario),
            Some(checks),
            "scenario {scenario}: directly {checks:#?}, through the gateway {:#?}",
            through.get(scenario)
        );
    }
    assert_eq!(direct.len(), through.len());
}
