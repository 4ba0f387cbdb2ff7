//! `mcpc gateway` (the real binary) in front of
//! `@modelcontextprotocol/server-everything` in `streamableHttp` mode, with
//! a client written with the official TypeScript SDK's
//! `StreamableHTTPClientTransport` (`tests/e2e/typescript/gateway.mjs`):
//! the server's `trigger-sampling-request` tool is allowed, trimmed, denied
//! and refused once its budget runs out; the user's refusal is remembered
//! across sessions, a rate refuses without asking, a model slower than the
//! deadline is answered by the deadline, and a budget holds across a server
//! restart; each on a route of its own, and a DELETE ends every session
//! (`docs/spec/transports.md`).
//!
//! Needs node (≥ 20) and `tests/e2e/typescript/setup.sh` (`npm ci`) run:
//! without them the test fails (it never skips).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("tests/e2e/typescript")
}

fn node() -> String {
    let node = std::env::var("MCPOLICY_NODE").unwrap_or_else(|_| "node".to_owned());
    let installed = suite()
        .join("node_modules/@modelcontextprotocol/server-everything/package.json")
        .is_file();
    assert!(
        installed,
        "the TypeScript suite's node_modules are missing: run tests/e2e/typescript/setup.sh"
    );
    node
}

const POLICY: &str = r#"mcpolicy 1
protocol 2025-11-25
identity systemPrompt, messages, includeContext, modelPreferences

defaults {
  max_tokens 4096
  rate 100 per 1m
  deadline 10s
  consent never
}

server "allowed" { }
server "trimmed" { max_tokens 20 }
server "denied" { max_input 16 B }
server "budgeted" { budget 1 requests per day }
server "consented" { consent first }
server "rated" { rate 1 per 1m }
server "slow" { deadline 300ms }
"#;

/// A child killed (by its own pid) when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads `reader` on a thread into a shared buffer; returns the buffer and
/// waits until a line contains `needle` (the text after it is returned).
fn watch(reader: impl Read + Send + 'static, needle: &'static str) -> (Arc<Mutex<String>>, String) {
    let text = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let text = Arc::clone(&text);
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(at) = line.find(needle) {
                    let _ = tx.send(line[at + needle.len()..].trim().to_owned());
                    sent = true;
                }
                let mut text = text.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
    }
    let found = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("no `{needle}` line:\n{}", text.lock().unwrap()));
    (text, found)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Fixture {
    server: Killed,
    port: u16,
    _gateway: Killed,
    log: Arc<Mutex<String>>,
    base: String,
    audit: PathBuf,
    _dir: tempfile::TempDir,
}

/// server-everything in `streamableHttp` mode on `port`, once it listens.
fn server_everything(port: u16) -> Killed {
    let mut server = Command::new(node())
        .arg(suite().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server-everything starts");
    let stderr = server.stderr.take().unwrap();
    let server = Killed(server);
    let _ = watch(stderr, "listening on port");
    server
}

fn start(routes: &[&str]) -> Fixture {
    let port = free_port();
    let server = server_everything(port);

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("gateway.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcpc"));
    command
        .arg("gateway")
        .arg("--policy")
        .arg(&policy)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--store")
        .arg(dir.path().join("decisions.sqlite3"))
        .arg("--audit")
        .arg(&audit);
    for route in routes {
        command
            .arg("--route")
            .arg(format!("{route}=http://127.0.0.1:{port}/mcp"));
    }
    let mut gateway = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcpc gateway starts");
    let stderr = gateway.stderr.take().unwrap();
    let gateway = Killed(gateway);
    let (log, base) = watch(stderr, "listening on ");
    Fixture {
        server,
        port,
        _gateway: gateway,
        log,
        base,
        audit,
        _dir: dir,
    }
}

impl Fixture {
    fn drive(&self, route: &str, calls: usize) -> Value {
        self.drive_with(route, calls, &[])
    }

    /// Restarts server-everything on its port: the gateway's sessions on
    /// it are gone, the store is not.
    fn restart_server(&mut self) {
        let _ = self.server.0.kill();
        let _ = self.server.0.wait();
        self.server = server_everything(self.port);
    }

    /// `drive`, with more of the driver's options (`--answer refuse`,
    /// `--delay-ms MS`).
    fn drive_with(&self, route: &str, calls: usize, options: &[&str]) -> Value {
        let output = Command::new(node())
            .arg(suite().join("gateway.mjs"))
            .arg("--url")
            .arg(format!("{}/{route}/mcp", self.base))
            .arg("--calls")
            .arg(calls.to_string())
            .args(options)
            .current_dir(suite())
            .output()
            .expect("the driver starts");
        assert!(
            output.status.success(),
            "gateway.mjs failed: {}\n{}\ngateway log:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            self.log.lock().unwrap()
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&output.stdout));
        });
        assert_eq!(report["errors"], Value::Array(vec![]), "{report}");
        // DELETE ended the session at the gateway and at the server: the
        // old id is unknown to the server afterwards.
        assert_eq!(report["deleted"], true, "{report}");
        let after = report["afterDelete"].as_u64().unwrap();
        assert!(after == 400 || after == 404, "{report}");
        report
    }

    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Waits for the log to say something (the gateway writes it as it goes).
    fn wait_log(&self, needle: &str) {
        let until = Instant::now() + Duration::from_secs(10);
        while !self.log.lock().unwrap().contains(needle) {
            assert!(
                Instant::now() < until,
                "the log never said `{needle}`:\n{}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn text_of(call: &Value) -> &str {
    call["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn sampling_through_the_gateway_is_allowed_trimmed_denied_and_budgeted() {
    let fixture = start(&["allowed", "trimmed", "denied", "budgeted"]);

    // Allowed: the client sees the request as the server wrote it.
    let report = fixture.drive("allowed", 1);
    assert!(
        report["tools"]
            .as_array()
            .unwrap()
            .contains(&Value::from("trigger-sampling-request")),
        "{report}"
    );
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["asked"][0]["maxTokens"], 50, "{report}");
    let text = text_of(&report["calls"][0]);
    assert!(text.contains("answer 1"), "{report}");
    assert!(!text.contains("_meta"), "{report}");

    // Trimmed: the client sees the narrowed params; the server's result
    // carries the `_meta` note of the trim.
    let report = fixture.drive("trimmed", 1);
    assert_eq!(report["asked"][0]["maxTokens"], 20, "{report}");
    let text = text_of(&report["calls"][0]);
    assert!(text.contains("\"requested\": 50"), "{text}");
    assert!(text.contains("\"applied\": 20"), "{text}");
    assert!(text.contains("policy.max_tokens"), "{text}");

    // Denied: the client is never shown the request; the server's tool gets
    // the policy's error.
    let report = fixture.drive("denied", 1);
    assert_eq!(report["asked"], Value::Array(vec![]), "{report}");
    assert_eq!(report["calls"][0]["result"]["isError"], true, "{report}");
    assert!(
        text_of(&report["calls"][0]).contains("MCP error -32010"),
        "{report}"
    );

    // A budget of one request a day: the first call runs, the second is
    // refused without the client being asked.
    let report = fixture.drive("budgeted", 2);
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    assert!(
        text_of(&report["calls"][0]).contains("answer 1"),
        "{report}"
    );
    assert_eq!(report["calls"][1]["result"]["isError"], true, "{report}");
    assert!(text_of(&report["calls"][1]).contains("budget"), "{report}");

    // Every session ended on its DELETE.
    fixture.wait_log("budgeted]: session");
    fixture.wait_log("ended: the client deleted it");

    let outcomes: Vec<(String, String)> = fixture
        .audit()
        .iter()
        .filter(|l| l["event"] == "decision")
        .map(|l| {
            (
                l["server"].as_str().unwrap().to_owned(),
                l["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("allowed", "allow"),
        ("trimmed", "trim"),
        ("denied", "deny"),
        ("budgeted", "allow"),
        ("budgeted", "deny"),
    ]
    .iter()
    .map(|(s, o)| ((*s).to_owned(), (*o).to_owned()))
    .collect();
    assert_eq!(outcomes, expected);
    let log = fixture.log.lock().unwrap().clone();
    let ended = log.matches("ended: the client deleted it").count();
    assert_eq!(ended, 4, "{log}");
}

/// Consent refused and remembered, a rate, a missed deadline, and a
/// server restart, each on a route of its own, through the gateway with
/// the TypeScript SDK's client.
#[test]
fn consent_rate_deadline_and_a_server_restart_through_the_gateway() {
    let mut fixture = start(&["consented", "rated", "slow", "budgeted"]);

    // `consent first`: the user refuses; the server's tool gets the
    // policy's user.denied. In a new session the same request is refused
    // from the store, and the user is not asked again.
    let report = fixture.drive_with("consented", 1, &["--answer", "refuse"]);
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["calls"][0]["result"]["isError"], true, "{report}");
    assert!(
        text_of(&report["calls"][0]).contains("MCP error -1"),
        "{report}"
    );
    let report = fixture.drive("consented", 1);
    assert_eq!(report["asked"], Value::Array(vec![]), "{report}");
    assert!(
        text_of(&report["calls"][0]).contains("MCP error -1"),
        "{report}"
    );

    // `rate 1 per 1m`: the second call is refused without asking.
    let report = fixture.drive("rated", 2);
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    assert!(
        text_of(&report["calls"][0]).contains("answer 1"),
        "{report}"
    );
    assert_eq!(report["calls"][1]["result"]["isError"], true, "{report}");
    assert!(
        text_of(&report["calls"][1]).to_lowercase().contains("rate"),
        "{report}"
    );

    // `deadline 300ms`, a model that answers after 1.5 s: the server's
    // tool gets the deadline's refusal; the late answer goes nowhere.
    let report = fixture.drive_with("slow", 1, &["--delay-ms", "1500"]);
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["calls"][0]["result"]["isError"], true, "{report}");
    assert!(
        text_of(&report["calls"][0])
            .to_lowercase()
            .contains("deadline"),
        "{report}"
    );

    // `budget 1 requests per day`, spent before the server restarts: still
    // spent after it (the store outlives the server's sessions).
    let report = fixture.drive("budgeted", 1);
    assert_eq!(report["asked"].as_array().unwrap().len(), 1, "{report}");
    fixture.restart_server();
    let report = fixture.drive("budgeted", 1);
    assert_eq!(report["asked"], Value::Array(vec![]), "{report}");
    assert!(text_of(&report["calls"][0]).contains("budget"), "{report}");

    let audit = fixture.audit();
    let consents = audit
        .iter()
        .filter(|l| l["server"] == "consented" && l["event"] == "consent")
        .count();
    assert_eq!(consents, 1, "one prompt, refused once: {audit:?}");
}
