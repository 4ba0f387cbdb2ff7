//! `mcpc proxy` end to end, through the real rmcp SDK on both sides:
//!
//! client (rmcp, a scripted user + fake model) ⇄ the real `mcpc` binary ⇄
//! the rmcp adversary server (`mcpolicy_rmcp::testing::Adversary`).
//!
//! The adversary runs as a child of `mcpc`. It is this very test binary,
//! re-executed with `MCPOLICY_E2E_ROLE=adversary`: `CARGO_BIN_EXE_mcpc` is
//! only defined for tests of the crate that owns `mcpc`, and a test cannot
//! reliably find another package's binary (it may be missing or stale), so
//! the server must come from the same build as the test. Hence `harness =
//! false`: `main` picks the role before any test output reaches stdout.
//!
//! The policy is `.mcpolicy` text compiled by `mcpc` itself; the store is a
//! SQLite file in a temp dir; time is the real clock.
#![expect(deprecated, reason = "sampling/createMessage is what is under test")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_rmcp::testing::Adversary;
use mcpolicy_runtime::identity;
use mcpolicy_runtime::store::{DecisionKey, DecisionStore, SqliteStore};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ContextInclusion,
    CreateMessageRequestParams, CreateMessageResult, ErrorCode, Implementation, MetaObject,
    ProtocolVersion, SamplingCapability, SamplingMessage,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RequestContext, RoleClient, RunningService, ServiceError,
};
use rmcp::{ClientHandler, ErrorData, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::process::{Child, Command};

/// The policy both proxy end-to-end suites (rmcp and Python) run under.
const POLICY: &str = include_str!("../../tests/e2e/proxy.mcpolicy");

/// MCP 2026-07-28: codes inside -32768..-32000 are the spec's.
const POLICY_2026: &str = r#"
mcpolicy 1
protocol 2026-07-28
error_code -42010
identity systemPrompt, messages, includeContext, modelPreferences

defaults {
  max_context thisServer
  rate 1 per 1m
  consent never
}
"#;

// ------------------------------------------------------------------ roles

fn main() -> ExitCode {
    match std::env::var("MCPOLICY_E2E_ROLE").as_deref() {
        Ok("adversary") => return serve_adversary(),
        Ok("raw") => return raw_server(),
        Ok("late") => return late_server(),
        _ => {}
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        (
            "retry_50_identical_costs_one_evaluation",
            retry_50_identical_costs_one_evaluation,
        ),
        (
            "refused_consent_asked_once_over_50_retries",
            refused_consent_asked_once_over_50_retries,
        ),
        (
            "fifty_one_character_variants_hit_the_rate_limit",
            fifty_one_character_variants_hit_the_rate_limit,
        ),
        (
            "twenty_concurrent_requests_admit_exactly_the_rate",
            twenty_concurrent_requests_admit_exactly_the_rate,
        ),
        (
            "trim_arrives_with_meta_context",
            trim_arrives_with_meta_context,
        ),
        (
            "sigkill_then_restart_replays_the_stored_denial",
            sigkill_then_restart_replays_the_stored_denial,
        ),
        (
            "deadline_answers_the_server_and_drops_the_late_answer",
            deadline_answers_the_server_and_drops_the_late_answer,
        ),
        ("input_required_2026_07_28", input_required_2026_07_28),
        (
            "malformed_frames_through_the_binary",
            malformed_frames_through_the_binary,
        ),
        (
            "late_answer_after_the_deadline_is_dropped",
            late_answer_after_the_deadline_is_dropped,
        ),
        (
            "non_sampling_traffic_is_forwarded_and_exit_status_kept",
            non_sampling_traffic_is_forwarded_and_exit_status_kept,
        ),
    ];
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    // libtest's command line, as far as it applies: filters, `--exact`,
    // `--skip NAME`; other options (and the values of those that take one) ignored.
    const WITH_VALUE: &[&str] = &[
        "--test-threads",
        "--format",
        "--color",
        "--logfile",
        "--shuffle-seed",
        "-Z",
    ];
    let mut filters: Vec<&String> = Vec::new();
    let mut skips: Vec<&String> = Vec::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if word == "--skip" {
            skips.extend(words.next());
        } else if WITH_VALUE.contains(&word.as_str()) {
            words.next();
        } else if !word.starts_with('-') {
            filters.push(word);
        }
    }
    let exact = args.iter().any(|a| a == "--exact");
    let selected: Vec<_> = tests
        .iter()
        .filter(|(name, _)| !skips.iter().any(|s| name.contains(s.as_str())))
        .filter(|(name, _)| {
            filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                })
        })
        .collect();
    println!("\nrunning {} tests", selected.len());
    let mut failed = Vec::new();
    for (name, test) in &selected {
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(test);
        let verdict = if outcome.is_ok() { "ok" } else { "FAILED" };
        println!("test {name} ... {verdict} ({:.2?})", started.elapsed());
        if outcome.is_err() {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The adversary on this process's stdio, until the proxy closes it.
fn serve_adversary() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let running = Adversary
            .serve((tokio::io::stdin(), tokio::io::stdout()))
            .await
            .unwrap();
        let _ = running.waiting().await;
    });
    ExitCode::SUCCESS
}

/// Frames a hostile or broken server might write. The proxy must answer the
/// first four itself and pass the fifth through byte for byte.
const RAW_FRAMES: [&str; 5] = [
    "this is not json",
    r#"[{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":9}}]"#,
    r#"{"jsonrpc":"2.0","id":2,"method":"roots/list","method":"sampling/createMessage","params":{"messages":[],"maxTokens":9}}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"sampling\/createMessage","params":{"messages":[],"maxTokens":9}}"#,
    r#"{ "jsonrpc":"2.0", "method":"notifications/message", "params":{"level":"info","data":"  spaced  "} }"#,
];

/// The sampling request [`late_server`] sends.
const LATE_REQUEST: &str = r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"slow"}}],"maxTokens":10}}"#;

/// A server that sends [`LATE_REQUEST`], then records every line it
/// receives, until its stdin closes, in `MCPOLICY_E2E_RAW_OUT`.
fn late_server() -> ExitCode {
    use std::io::{BufRead, Write};
    let mut out = std::io::stdout().lock();
    writeln!(out, "{LATE_REQUEST}").unwrap();
    out.flush().unwrap();
    let seen: Vec<String> = std::io::stdin()
        .lock()
        .lines()
        .map_while(Result::ok)
        .collect();
    std::fs::write(
        std::env::var("MCPOLICY_E2E_RAW_OUT").unwrap(),
        seen.join("\n"),
    )
    .unwrap();
    ExitCode::SUCCESS
}

/// A server that writes [`RAW_FRAMES`], records the next five lines it
/// receives in `MCPOLICY_E2E_RAW_OUT`, and exits with status 3.
fn raw_server() -> ExitCode {
    use std::io::{BufRead, Write};
    let mut out = std::io::stdout().lock();
    for frame in RAW_FRAMES {
        writeln!(out, "{frame}").unwrap();
    }
    out.flush().unwrap();
    let mut seen = Vec::new();
    for line in std::io::stdin().lock().lines().take(5) {
        seen.push(line.unwrap());
    }
    std::fs::write(
        std::env::var("MCPOLICY_E2E_RAW_OUT").unwrap(),
        seen.join("\n"),
    )
    .unwrap();
    ExitCode::from(3)
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

// ------------------------------------------------------------------ the client

/// The client's side: its approval dialog (the user, who always gives the
/// same answer) and its model (a fake that reports token usage). Both count.
#[derive(Debug, Clone)]
struct User {
    approve: bool,
    delay: Option<Duration>,
    prompts: Arc<AtomicU64>,
    provider_calls: Arc<AtomicU64>,
    /// Completions returned (after the delay, if any).
    answered: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<CreateMessageRequestParams>>>,
}

impl User {
    fn approving() -> User {
        User {
            approve: true,
            delay: None,
            prompts: Arc::default(),
            provider_calls: Arc::default(),
            answered: Arc::default(),
            seen: Arc::default(),
        }
    }

    fn refusing() -> User {
        User {
            approve: false,
            ..User::approving()
        }
    }

    fn slow(delay: Duration) -> User {
        User {
            delay: Some(delay),
            ..User::approving()
        }
    }

    fn prompts(&self) -> u64 {
        self.prompts.load(Ordering::SeqCst)
    }

    fn provider_calls(&self) -> u64 {
        self.provider_calls.load(Ordering::SeqCst)
    }

    fn answered(&self) -> u64 {
        self.answered.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<CreateMessageRequestParams> {
        self.seen.lock().unwrap().clone()
    }
}

impl ClientHandler for User {
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        // A client shows every sampling request to its user: a prompt.
        self.prompts.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().unwrap().push(params);
        if !self.approve {
            return Err(ErrorData::new(
                ErrorCode(-1),
                "User rejected sampling request",
                None,
            ));
        }
        self.provider_calls.fetch_add(1, Ordering::SeqCst);
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        let mut result = CreateMessageResult::new(
            SamplingMessage::assistant_text("Done."),
            "fake-model".into(),
        )
        .with_stop_reason(CreateMessageResult::STOP_REASON_END_TURN);
        let mut meta = MetaObject::default();
        meta.0.insert(
            "usage".into(),
            json!({"inputTokens": 30, "outputTokens": 12}),
        );
        result.message.meta = Some(meta);
        self.answered.fetch_add(1, Ordering::SeqCst);
        Ok(result)
    }

    fn get_info(&self) -> ClientConfig {
        let mut sampling = SamplingCapability::default();
        sampling.context = Some(Map::new());
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(sampling);
        ClientConfig::new(capabilities, Implementation::new("e2e-client", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

// ------------------------------------------------------------------ a proxied session

/// One test's files: the policy, the store, the audit and the proxy log.
struct Fixture {
    _dir: tempfile::TempDir,
    policy: PathBuf,
    store: PathBuf,
    audit: PathBuf,
    log: PathBuf,
}

impl Fixture {
    fn new(policy: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e2e.mcpolicy");
        std::fs::write(&path, policy).unwrap();
        Fixture {
            policy: path,
            store: dir.path().join("decisions.sqlite3"),
            audit: dir.path().join("audit.jsonl"),
            log: dir.path().join("proxy.log"),
            _dir: dir,
        }
    }

    /// Every audit line so far.
    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `represented` of the stored decision for `params` from `server`.
    fn represented(&self, policy: &str, server: &str, params: &CreateMessageRequestParams) -> u64 {
        let db = Database::default();
        let source = SourceText::new(&db, "e2e.mcpolicy".into(), policy.into());
        let table = db::lower_file(&db, source).clone().unwrap();
        let Value::Object(map) = serde_json::to_value(params).unwrap() else {
            unreachable!()
        };
        let id = identity::request_identity(server, &map, &table.identity);
        let store = SqliteStore::open(&self.store).unwrap();
        store
            .get(&DecisionKey::new(server, id.into_string()))
            .unwrap()
            .expect("a stored decision")
            .represented
    }
}

struct Proxied {
    user: User,
    session: RunningService<RoleClient, User>,
    proxy: Child,
}

fn proxy_command(fixture: &Fixture, server_id: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcpc"));
    command
        .arg("proxy")
        .arg("--policy")
        .arg(&fixture.policy)
        .arg("--store")
        .arg(&fixture.store)
        .arg("--server-id")
        .arg(server_id)
        .arg("--audit")
        .arg(&fixture.audit)
        .arg("--log")
        .arg(&fixture.log)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .env("MCPOLICY_E2E_ROLE", "adversary")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

async fn start(fixture: &Fixture, server_id: &str, user: User) -> Proxied {
    start_with(fixture, server_id, user, ClientLifecycleMode::Initialize).await
}

async fn start_with(
    fixture: &Fixture,
    server_id: &str,
    user: User,
    lifecycle: ClientLifecycleMode,
) -> Proxied {
    let mut proxy = proxy_command(fixture, server_id).spawn().unwrap();
    let stdout = proxy.stdout.take().unwrap();
    let stdin = proxy.stdin.take().unwrap();
    let session = user
        .clone()
        .serve_with_lifecycle((stdout, stdin), lifecycle)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "handshake through the proxy failed: {e}\n{}",
                fixture.log_text()
            )
        });
    Proxied {
        user,
        session,
        proxy,
    }
}

impl Proxied {
    /// The adversary sends `params` as a sampling request; what it received.
    async fn sample(&self, params: &CreateMessageRequestParams) -> Value {
        self.call("sample", params).await
    }

    async fn call(&self, tool: &'static str, params: &CreateMessageRequestParams) -> Value {
        let mut args = Map::new();
        args.insert("params".into(), serde_json::to_value(params).unwrap());
        match self
            .session
            .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
            .await
        {
            Ok(result) => result.structured_content.unwrap(),
            // MCP 2026-07-28: a denial answers the client's own call.
            Err(ServiceError::McpError(error)) => json!({
                "callError": {"code": error.code.0, "message": error.message, "data": error.data},
            }),
            Err(other) => panic!("{other}"),
        }
    }

    /// Closes the client side and returns the proxy's exit status.
    async fn close(mut self) -> std::process::ExitStatus {
        self.session.cancel().await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.proxy.wait())
            .await
            .expect("the proxy exits after the client closes")
            .unwrap()
    }
}

fn request(prompt: &str, context: ContextInclusion) -> CreateMessageRequestParams {
    CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 500)
        .with_system_prompt("You write release notes.")
        .with_include_context(context)
}

/// Audit lines of fresh evaluations (not replays) for requests with this prompt.
fn evaluations(audit: &[Value]) -> usize {
    audit
        .iter()
        .filter(|l| l["event"] == "decision" && l["replayed"] == false)
        .count()
}

// ------------------------------------------------------------------ tests

/// The seed's property through the proxy: after the day's one request is
/// spent, 50 byte-identical retries of a new request are one evaluation and
/// 49 replays with the same `error.data`; the client saw no prompt and made
/// no provider call for any of them; `represented` is 49.
fn retry_50_identical_costs_one_evaluation() {
    let fixture = Fixture::new(POLICY);
    block_on(async {
        let proxied = start(&fixture, "release-notes", User::approving()).await;
        let warm_up = proxied
            .sample(&request("v1.0 changes", ContextInclusion::None))
            .await;
        assert!(warm_up.get("result").is_some(), "{warm_up}");
        assert_eq!(
            (proxied.user.prompts(), proxied.user.provider_calls()),
            (1, 1)
        );

        let p = request("v1.1 changes", ContextInclusion::AllServers);
        let first = proxied.sample(&p).await;
        assert_eq!(first["error"]["code"], -32010, "{first}");
        assert_eq!(
            first["error"]["data"],
            json!({"reason": "policy.budget_exhausted", "server": "release-notes",
                   "retryable": false, "resetsAt": first["error"]["data"]["resetsAt"]})
        );
        for _ in 1..50 {
            let again = proxied.sample(&p).await;
            assert_eq!(again["dataText"], first["dataText"], "same data bytes");
            assert_eq!(again["error"], first["error"], "same code and message");
        }
        assert_eq!(
            proxied.user.prompts(),
            1,
            "only the warm-up reached the client"
        );
        assert_eq!(
            proxied.user.provider_calls(),
            1,
            "nothing was spent on a denial"
        );
        assert!(proxied.close().await.success());
    });
    assert_eq!(
        fixture.represented(
            POLICY,
            "release-notes",
            &request("v1.1 changes", ContextInclusion::AllServers)
        ),
        49
    );
    let audit = fixture.audit();
    // The warm-up (consent asked, approved) and one evaluation of the retried request.
    assert_eq!(evaluations(&audit), 2, "{audit:#?}");
    let denials: Vec<&Value> = audit.iter().filter(|l| l["outcome"] == "deny").collect();
    assert_eq!(denials.len(), 50);
    assert_eq!(denials.iter().filter(|l| l["replayed"] == true).count(), 49);
    assert_eq!(denials[49]["represented"], 49);
    assert_eq!(denials[0]["reason"], "policy.budget_exhausted");
    assert_eq!(
        denials[0]["requested"],
        json!({"includeContext": "allServers", "maxTokens": 500, "modelHints": null})
    );
    // 49 re-presentations within ten minutes: one retry-loop alert (the
    // built-in threshold is 40), after the 41st.
    let alerts: Vec<&Value> = audit.iter().filter(|l| l["event"] == "alert").collect();
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert_eq!(alerts[0]["alert"]["kind"], "retries");
    assert_eq!(alerts[0]["alert"]["count"], 41);
    assert!(
        denials[0]["identity"]
            .as_str()
            .is_some_and(|i| i.starts_with("sha256:") || !i.is_empty())
    );
    // The warm-up's approval was recorded as the client's consent.
    assert!(
        audit
            .iter()
            .any(|l| l["event"] == "consent" && l["outcome"] == "allow")
    );
}

/// `consent first`, and the user refuses in the client's own dialog: the
/// client is asked once, the refusal is recorded as `user.denied` (code -1),
/// and 49 more identical requests never reach the client.
fn refused_consent_asked_once_over_50_retries() {
    let fixture = Fixture::new(POLICY);
    let p = request("Summarise this page", ContextInclusion::AllServers);
    block_on(async {
        let proxied = start(&fixture, "web-fetch", User::refusing()).await;
        let first = proxied.sample(&p).await;
        assert_eq!(first["error"]["code"], -1, "{first}");
        assert_eq!(
            first["error"]["data"],
            json!({"reason": "user.denied", "server": "web-fetch", "retryable": false})
        );
        for _ in 1..50 {
            let again = proxied.sample(&p).await;
            assert_eq!(again["dataText"], first["dataText"]);
            assert_eq!(again["error"], first["error"]);
        }
        assert_eq!(proxied.user.prompts(), 1, "one consent prompt");
        assert_eq!(proxied.user.provider_calls(), 0, "zero provider calls");
        proxied.close().await;
    });
    assert_eq!(fixture.represented(POLICY, "web-fetch", &p), 49);
    let audit = fixture.audit();
    assert_eq!(evaluations(&audit), 1);
    let refusal: Vec<&Value> = audit.iter().filter(|l| l["event"] == "consent").collect();
    assert_eq!(refusal.len(), 1);
    assert_eq!(refusal[0]["reason"], "user.denied");
}

/// 50 requests that each differ from the last by one character are 50
/// identities: the replay cache does not stop them, `rate 3 per 1m` does.
fn fifty_one_character_variants_hit_the_rate_limit() {
    let fixture = Fixture::new(POLICY);
    block_on(async {
        let proxied = start(&fixture, "chatty", User::approving()).await;
        let alphabet: Vec<char> = ('A'..='Z').chain('a'..='x').collect();
        let mut allowed = 0;
        let mut limited = 0;
        for c in &alphabet {
            let outcome = proxied
                .sample(&request(
                    &format!("Summarise page {c}"),
                    ContextInclusion::None,
                ))
                .await;
            if outcome.get("result").is_some() {
                allowed += 1;
            } else {
                assert_eq!(
                    outcome["error"]["data"]["reason"], "policy.rate_limit",
                    "{outcome}"
                );
                assert_eq!(outcome["error"]["data"]["retryable"], true);
                assert!(
                    outcome["error"]["data"]["retryAfter"]
                        .as_u64()
                        .is_some_and(|s| (1..=60).contains(&s))
                );
                limited += 1;
            }
        }
        assert_eq!(alphabet.len(), 50);
        assert_eq!((allowed, limited), (3, 47));
        assert_eq!(proxied.user.provider_calls(), 3);
        proxied.close().await;
    });
    let audit = fixture.audit();
    assert_eq!(
        evaluations(&audit),
        50,
        "every variant is a fresh evaluation"
    );
}

/// Twenty different requests in flight at once against `rate 3 per 1m`:
/// the proxy tracks every id, exactly three reach the client, and each call
/// gets its own answer.
fn twenty_concurrent_requests_admit_exactly_the_rate() {
    let fixture = Fixture::new(POLICY);
    block_on(async {
        let proxied = start(&fixture, "chatty", User::slow(Duration::from_millis(50))).await;
        let mut burst = tokio::task::JoinSet::new();
        for i in 0..20 {
            let peer = proxied.session.peer().clone();
            let mut args = Map::new();
            let p = request(&format!("burst {i}"), ContextInclusion::None);
            args.insert("params".into(), serde_json::to_value(&p).unwrap());
            burst.spawn(async move {
                let call = CallToolRequestParams::new("sample").with_arguments(args);
                peer.call_tool(call)
                    .await
                    .unwrap()
                    .structured_content
                    .unwrap()
            });
        }
        let outcomes = burst.join_all().await;
        let allowed = outcomes
            .iter()
            .filter(|o| o.get("result").is_some())
            .count();
        let limited = outcomes
            .iter()
            .filter(|o| o["error"]["data"]["reason"] == "policy.rate_limit")
            .count();
        assert_eq!((allowed, limited), (3, 17), "{outcomes:#?}");
        assert_eq!(proxied.user.provider_calls(), 3);
        proxied.close().await;
    });
}

/// `max_context thisServer` against a request for `allServers`: the client
/// runs the narrowed request and the server learns it from `_meta.context`;
/// a `maxTokens` above the clamp likewise.
fn trim_arrives_with_meta_context() {
    let fixture = Fixture::new(POLICY);
    block_on(async {
        let proxied = start(&fixture, "summarizer", User::approving()).await;
        let outcome = proxied
            .sample(&request(
                "Summarise the session",
                ContextInclusion::AllServers,
            ))
            .await;
        let result = &outcome["result"];
        assert_eq!(
            result["_meta"]["context"],
            json!({"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"}),
            "{outcome}"
        );
        // The client's own `_meta` (its usage report) is kept next to the annotation.
        assert_eq!(
            result["_meta"]["usage"],
            json!({"inputTokens": 30, "outputTokens": 12})
        );
        assert_eq!(result["content"]["text"], "Done.");
        assert_eq!(
            proxied.user.seen()[0].include_context,
            Some(ContextInclusion::ThisServer)
        );

        let big =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text("Long one")], 9000);
        let outcome = proxied.sample(&big).await;
        assert_eq!(
            outcome["result"]["_meta"]["maxTokens"],
            json!({"requested": 9000, "applied": 4096, "reason": "policy.max_tokens"}),
            "{outcome}"
        );
        assert_eq!(proxied.user.seen()[1].max_tokens, 4096);
        proxied.close().await;
    });
    let audit = fixture.audit();
    let trims: Vec<&Value> = audit.iter().filter(|l| l["outcome"] == "trim").collect();
    assert_eq!(trims.len(), 2);
    assert_eq!(trims[0]["requested"]["includeContext"], "allServers");
    assert_eq!(trims[0]["applied"]["includeContext"], "thisServer");
    assert_eq!(trims[1]["requested"]["maxTokens"], 9000);
    assert_eq!(trims[1]["applied"]["maxTokens"], 4096);
}

/// The proxy is killed with SIGKILL in the middle of a session; a new proxy
/// on the same store answers the stored refusal without asking the client.
fn sigkill_then_restart_replays_the_stored_denial() {
    let fixture = Fixture::new(POLICY);
    let p = request("Summarise this page", ContextInclusion::AllServers);
    let first = block_on(async {
        let mut proxied = start(&fixture, "web-fetch", User::refusing()).await;
        let first = proxied.sample(&p).await;
        assert_eq!(first["error"]["data"]["reason"], "user.denied", "{first}");
        assert_eq!(proxied.user.prompts(), 1);
        // Mid-session: the client is still connected, the server still running.
        proxied.proxy.start_kill().unwrap();
        let status = proxied.proxy.wait().await.unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(9));
        }
        first
    });
    block_on(async {
        // A user who would approve: the stored refusal must answer first.
        let proxied = start(&fixture, "web-fetch", User::approving()).await;
        let again = proxied.sample(&p).await;
        assert_eq!(again["dataText"], first["dataText"]);
        assert_eq!(again["error"], first["error"]);
        assert_eq!(proxied.user.prompts(), 0, "the client was not asked");
        assert_eq!(proxied.user.provider_calls(), 0);
        proxied.close().await;
    });
    assert_eq!(fixture.represented(POLICY, "web-fetch", &p), 1);
}

/// A client slower than `deadline 300ms`: the server gets `policy.deadline`
/// before the client answers, the client's late answer is dropped, the
/// session goes on, and the identical retry is answered from the store.
///
/// How the deadline is measured is held on the session's stepped clock
/// (`proxy/src/session.rs`, `the_deadline_is_kept_to_the_millisecond_on_the_session_clock`;
/// `proxy/tests/proxy_state_machine.rs`). Real time is the point here: the
/// proxy's deadline thread must wake on its own, with no message to prompt
/// it. So the check is an order, not a bound: the server's answer arrives
/// while the client (1.2 s slower than the deadline) has not answered yet.
fn deadline_answers_the_server_and_drops_the_late_answer() {
    let fixture = Fixture::new(POLICY);
    block_on(async {
        let proxied = start(&fixture, "slow", User::slow(Duration::from_millis(1500))).await;
        let p = request("Take your time", ContextInclusion::None);
        let first = proxied.sample(&p).await;
        assert_eq!(proxied.user.provider_calls(), 1, "the client was asked");
        assert_eq!(
            proxied.user.answered(),
            0,
            "the server waited for the client's answer"
        );
        assert_eq!(
            first["error"]["data"],
            json!({"reason": "policy.deadline", "server": "slow", "retryable": true, "retryAfter": 30}),
            "{first}"
        );
        // Let the late answer arrive (if the client did not cancel), then go on.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let second = proxied.sample(&p).await;
        assert_eq!(second["dataText"], first["dataText"]);
        assert_eq!(proxied.user.provider_calls(), 1);
        let tools = proxied.session.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 2);
        proxied.close().await;
    });
    let audit = fixture.audit();
    assert_eq!(
        audit.iter().filter(|l| l["event"] == "deadline").count(),
        1,
        "{audit:#?}"
    );
}

/// MCP 2026-07-28: sampling inside the tool call's `InputRequiredResult`.
/// A trim reaches the server inside `inputResponses` with `_meta.context`;
/// a rate-limit denial answers the client's own `tools/call` with the
/// denial's code and `data`, and the server never sees a completion.
fn input_required_2026_07_28() {
    let fixture = Fixture::new(POLICY_2026);
    block_on(async {
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let proxied = start_with(&fixture, "notes", User::approving(), lifecycle).await;
        let outcome = proxied
            .call(
                "sample_input_required",
                &request("Summarise", ContextInclusion::AllServers),
            )
            .await;
        let context = &outcome["result"]["_meta"]["context"];
        assert_eq!(context["requested"], "allServers", "{outcome}");
        assert_eq!(context["reason"], "policy.max_scope");
        assert_eq!(outcome["result"]["content"]["text"], "Done.");
        let applied = context["applied"].as_str().unwrap().to_owned();
        let seen = proxied.user.seen();
        assert_eq!(
            serde_json::to_value(&seen[0].include_context).unwrap(),
            json!(applied),
            "the client ran what the annotation says"
        );

        let denied = proxied
            .call(
                "sample_input_required",
                &request("Another one", ContextInclusion::None),
            )
            .await;
        assert_eq!(denied["callError"]["code"], -42010, "{denied}");
        assert_eq!(denied["callError"]["data"]["reason"], "policy.rate_limit");
        assert_eq!(denied["callError"]["data"]["server"], "notes");
        assert_eq!(proxied.user.provider_calls(), 1);
        proxied.close().await;
    });
    let audit = fixture.audit();
    assert!(
        audit.iter().all(|l| l["via"] == "inputRequests"),
        "{audit:#?}"
    );
    assert_eq!(audit.len(), 2);
}

/// Tools listing and calls that do not sample pass through; when the client
/// goes away the server sees end of input and the proxy exits with its status.
fn non_sampling_traffic_is_forwarded_and_exit_status_kept() {
    let fixture = Fixture::new(POLICY);
    block_on(async {
        let proxied = start(&fixture, "summarizer", User::approving()).await;
        let tools = proxied.session.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["sample", "sample_input_required"]);
        let status = proxied.close().await;
        assert!(status.success(), "{status:?}");
    });
    assert!(fixture.audit().is_empty());
    assert!(
        fixture.log_text().contains("server exited"),
        "{}",
        fixture.log_text()
    );
}

/// The real `mcpc proxy` in front of this binary re-run as a raw server in
/// `role` (which records what it receives in `seen`), with pipes to drive
/// it as the client, an audit and a log.
fn spawn_raw(
    fixture: &Fixture,
    server_id: &str,
    role: &str,
    seen: &std::path::Path,
) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["proxy", "--server-id", server_id, "--policy"])
        .arg(&fixture.policy)
        .arg("--store")
        .arg(&fixture.store)
        .arg("--log")
        .arg(&fixture.log)
        .arg("--audit")
        .arg(&fixture.audit)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .env("MCPOLICY_E2E_ROLE", role)
        .env("MCPOLICY_E2E_RAW_OUT", seen)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Broken and hostile frames through the real binary: the server's are
/// answered per JSON-RPC and never reach the client (an escaped method name
/// is still recognised and decided); the client's pass through unchanged;
/// the proxy survives all of it and exits with the server's status.
fn malformed_frames_through_the_binary() {
    use std::io::{BufRead, BufReader, Write};
    let fixture = Fixture::new(
        "mcpolicy 1\nprotocol 2025-11-25\nerror_code -32010\nidentity messages\n\nserver \"raw\" {\n  sampling off\n}\n",
    );
    let seen_path = fixture.store.with_extension("seen");
    let mut proxy = spawn_raw(&fixture, "raw", "raw", &seen_path);
    let mut from_proxy = BufReader::new(proxy.stdout.take().unwrap());
    let mut line = String::new();
    from_proxy.read_line(&mut line).unwrap();
    assert_eq!(line, format!("{}\n", RAW_FRAMES[4]), "byte for byte");
    let mut to_proxy = proxy.stdin.take().unwrap();
    to_proxy.write_all(b"{broken from the client\n").unwrap();
    to_proxy.flush().unwrap();
    let status = proxy.wait().unwrap();
    assert_eq!(status.code(), Some(3), "{}", fixture.log_text());
    line.clear();
    assert_eq!(
        from_proxy.read_line(&mut line).unwrap(),
        0,
        "nothing else reached the client: {line}"
    );

    let seen: Vec<String> = std::fs::read_to_string(&seen_path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(
        seen.contains(&"{broken from the client".to_owned()),
        "{seen:?}"
    );
    let answers: Vec<Value> = seen
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let codes: Vec<(Value, Value)> = answers
        .iter()
        .map(|a| (a["id"].clone(), a["error"]["code"].clone()))
        .collect();
    assert_eq!(
        codes,
        [
            (Value::Null, json!(-32700)),
            (Value::Null, json!(-32600)),
            // Two `method` members: refused, with its readable id (item 16).
            (json!(2), json!(-32600)),
            (json!(3), json!(-32010)),
        ]
    );
    assert_eq!(
        answers[3]["error"]["data"]["reason"],
        "policy.sampling_disabled"
    );
}

/// A client that answers after the deadline: the server gets the
/// `policy.deadline` denial once, never the late result; the client is told
/// the request was cancelled; later traffic flows as before.
fn late_answer_after_the_deadline_is_dropped() {
    use std::io::{BufRead, BufReader, Write};
    let fixture = Fixture::new(
        "mcpolicy 1\nprotocol 2025-11-25\nerror_code -32010\nidentity messages\n\nserver \"late\" {\n  deadline 200ms\n  consent never\n}\n",
    );
    let seen_path = fixture.store.with_extension("seen");
    let mut proxy = spawn_raw(&fixture, "late", "late", &seen_path);
    let mut from_proxy = BufReader::new(proxy.stdout.take().unwrap());
    let mut to_proxy = proxy.stdin.take().unwrap();

    let mut line = String::new();
    from_proxy.read_line(&mut line).unwrap();
    let forwarded: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(forwarded["method"], "sampling/createMessage", "{line}");
    assert_eq!(forwarded["id"], 7);
    line.clear();
    from_proxy.read_line(&mut line).unwrap();
    let cancelled: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(cancelled["method"], "notifications/cancelled", "{line}");
    assert_eq!(cancelled["params"]["requestId"], 7, "{line}");

    let late = r#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","content":{"type":"text","text":"too late"},"model":"m","stopReason":"endTurn"}}"#;
    let marker = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    writeln!(to_proxy, "{late}").unwrap();
    writeln!(to_proxy, "{marker}").unwrap();
    to_proxy.flush().unwrap();
    drop(to_proxy);
    let status = proxy.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", fixture.log_text());

    let seen: Vec<Value> = std::fs::read_to_string(&seen_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert_eq!(seen[0]["id"], 7);
    assert_eq!(
        seen[0]["error"]["data"],
        json!({"reason": "policy.deadline", "server": "late", "retryable": true, "retryAfter": 30}),
        "{seen:#?}"
    );
    assert_eq!(seen[1]["method"], "notifications/initialized", "{seen:#?}");
    let audit = fixture.audit();
    assert_eq!(
        audit.iter().filter(|l| l["event"] == "deadline").count(),
        1,
        "{audit:#?}"
    );
}
