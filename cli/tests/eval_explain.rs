//! `mcpc eval --explain` through the real binary: the summary line it adds
//! on standard error names the evaluation step, the block and the statement
//! the engine's cause names, with the statement's source line; the report
//! after it shows the block matching, the provenance and steps 1–10; stdout
//! and the exit code are those of `mcpc eval` without it. `--format json`
//! carries the same in one document.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const POLICY: &str = "mcpolicy 1

defaults {
  consent never
  max_tokens 100
  budget 2 requests per day
  budget 5000 tokens per day
}

server \"off\" {
  sampling off
}

server \"asks\" {
  consent first
}
";

fn request(text: &str, max_tokens: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{{"messages":[{{"role":"user","content":{{"type":"text","text":"{text}"}}}}],"maxTokens":{max_tokens}}}}}"#
    )
}

struct Run {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

fn eval(dir: &std::path::Path, server: &str, body: &str, extra: &[&str]) -> Run {
    let policy = dir.join("p.mcpolicy");
    std::fs::write(&policy, POLICY).expect("write policy");
    let store = dir.join("decisions.sqlite3");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("eval")
        .arg(&policy)
        .args(["--server", server, "--request", "-", "--store"])
        .arg(&store)
        .args(["--now", "2026-03-10T12:00:00Z", "--color", "never"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpc");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write request");
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("mcpc runs");
    Run {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        code: status.code(),
    }
}

fn explained(run: &Run) -> &str {
    run.stderr
        .lines()
        .find(|l| l.starts_with("explain: "))
        .unwrap_or_else(|| panic!("no explain line in {:?}", run.stderr))
}

#[test]
fn explain_names_step_block_and_statement() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let cases = [
        (
            "off",
            request("a", 10),
            vec![],
            "explain: step 4 (switches) for server \"off\": `sampling off` (server \"off\", line 11)",
        ),
        (
            "any",
            request("b", 500),
            vec![],
            "explain: step 6 (trims) for defaults: `max_tokens 100` (defaults, line 5)",
        ),
        (
            "asks",
            request("c", 10),
            vec![],
            "explain: step 9 (consent) for server \"asks\": `consent first` (server \"asks\", line 15)",
        ),
        (
            "asks",
            request("c", 10),
            vec!["--consent", "deny"],
            "explain: step 9 (consent) for server \"asks\": `consent first` (server \"asks\", line 15)",
        ),
        (
            "any",
            request("d", 10),
            vec![],
            "explain: step 10 (allow) for defaults: no statement stops it",
        ),
        // The store now holds two admissions for "any" (b, d): the third
        // request is over `budget 2 requests per day`, not the token budget.
        (
            "any",
            request("e", 10),
            vec![],
            "explain: step 8 (budgets) for defaults: `budget 2 requests per day` (defaults, line 6)",
        ),
        (
            "any",
            request("e", 10),
            vec![],
            "explain: step 3 (replay) for defaults: `budget 2 requests per day` (defaults, line 6), answered from the store (the statement recorded with the decision)",
        ),
    ];
    for (server, body, extra, expected) in cases {
        let mut args = vec!["--explain"];
        args.extend(extra.iter().copied());
        let run = eval(dir, server, &body, &args);
        assert_eq!(explained(&run), expected, "{server} {body} {extra:?}");
    }
}

#[test]
fn explain_changes_neither_stdout_nor_the_exit_code() {
    for (server, body) in [
        ("off", request("a", 10)),
        ("any", request("b", 500)),
        ("asks", request("c", 10)),
    ] {
        let plain_dir = tempfile::tempdir().expect("temp dir");
        let explained_dir = tempfile::tempdir().expect("temp dir");
        let plain = eval(plain_dir.path(), server, &body, &[]);
        let with = eval(explained_dir.path(), server, &body, &["--explain"]);
        assert_eq!(plain.stdout, with.stdout, "{server}");
        assert_eq!(plain.code, with.code, "{server}");
        assert!(!plain.stderr.contains("explain: "), "{}", plain.stderr);
        // The explanation follows the summary eval prints without it.
        assert!(
            with.stderr.starts_with(&plain.stderr),
            "{}\n---\n{}",
            plain.stderr,
            with.stderr
        );
        assert!(with.stderr.contains("\nsteps:\n"), "{}", with.stderr);
    }
}

/// `--explain --format json`: one document on stdout, with the frame inside.
fn explain_json(
    dir: &std::path::Path,
    server: &str,
    body: &str,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec!["--explain", "--format", "json"];
    args.extend(extra.iter().copied());
    let run = eval(dir, server, body, &args);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

fn verdicts(doc: &serde_json::Value) -> Vec<String> {
    doc["explain"]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["verdict"].as_str().expect("verdict").to_owned())
        .collect()
}

/// The statement (value, origin, line) that decided step `n`.
fn decided_by(doc: &serde_json::Value, n: usize) -> Vec<(String, String, Option<u64>)> {
    doc["explain"]["steps"][n - 1]["by"]
        .as_array()
        .expect("by")
        .iter()
        .map(|s| {
            (
                s["value"].as_str().unwrap_or("").to_owned(),
                s["origin"].as_str().unwrap_or("").to_owned(),
                s["line"].as_u64(),
            )
        })
        .collect()
}

#[test]
fn json_steps_carry_each_verdict_and_the_deciding_statement() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let p = "passed";
    let nr = "not reached";
    let row = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();

    let off = explain_json(dir, "off", &request("a", 10), &[]);
    assert_eq!(off["outcome"], "deny");
    assert_eq!(off["exit"], 1);
    assert_eq!(
        off["output"]["error"]["data"]["reason"],
        "policy.sampling_disabled"
    );
    assert_eq!(
        verdicts(&off),
        row(&[p, p, p, "denied", nr, nr, nr, nr, nr, nr])
    );
    assert_eq!(
        decided_by(&off, 4),
        [("sampling off".into(), "server".into(), Some(11))]
    );
    assert_eq!(off["explain"]["block"]["block"], "server \"off\"");
    assert_eq!(off["explain"]["cause"]["step"], 4);

    let trimmed = explain_json(dir, "any", &request("b", 500), &[]);
    assert_eq!(trimmed["outcome"], "trim");
    assert_eq!(trimmed["output"]["params"]["maxTokens"], 100);
    assert_eq!(
        verdicts(&trimmed),
        row(&[p, p, p, p, p, "trimmed", p, p, p, p])
    );
    assert_eq!(
        decided_by(&trimmed, 6),
        [("max_tokens 100".into(), "defaults".into(), Some(5))]
    );
    // The budgets step names what it checked, in the block's order.
    let checked: Vec<&str> = trimmed["explain"]["steps"][7]["checked"]
        .as_array()
        .expect("checked")
        .iter()
        .filter_map(|s| s["value"].as_str())
        .collect();
    assert_eq!(
        checked,
        ["budget 2 requests per day", "budget 5000 tokens per day"]
    );
    // The block: no server block matches; both are passed over, with why.
    assert_eq!(
        trimmed["explain"]["block"]["entry"],
        serde_json::Value::Null
    );
    let why: Vec<&str> = trimmed["explain"]["passed_over"]
        .as_array()
        .expect("passed over")
        .iter()
        .filter_map(|p| p["why"].as_str())
        .collect();
    assert_eq!(why, ["the id is not `off`", "the id is not `asks`"]);

    let asked = explain_json(dir, "asks", &request("c", 10), &[]);
    assert_eq!(asked["outcome"], "consent");
    assert_eq!(
        verdicts(&asked),
        row(&[p, p, p, p, p, p, p, p, "asked", nr])
    );
    assert_eq!(
        decided_by(&asked, 9),
        [("consent first".into(), "server".into(), Some(15))]
    );

    let refused = explain_json(dir, "asks", &request("c", 10), &["--consent", "deny"]);
    assert_eq!(
        verdicts(&refused),
        row(&[p, p, p, p, p, p, p, p, "denied", nr])
    );
    assert_eq!(refused["exit"], 1);

    let allowed = explain_json(dir, "any", &request("d", 10), &[]);
    assert_eq!(allowed["outcome"], "allow");
    assert_eq!(verdicts(&allowed), row(&[p, p, p, p, p, p, p, p, p, p]));
    assert_eq!(
        allowed["explain"]["cause"]["statement"],
        serde_json::Value::Null
    );

    // Two admissions for the defaults block (b, d) spend the request budget.
    let over = explain_json(dir, "any", &request("e", 10), &[]);
    assert_eq!(
        verdicts(&over),
        row(&[p, p, p, p, p, p, p, "denied", nr, nr])
    );
    assert_eq!(
        decided_by(&over, 8),
        [(
            "budget 2 requests per day".into(),
            "defaults".into(),
            Some(6)
        )]
    );
    assert_eq!(over["explain"]["cause"]["budget"], 0);

    let replayed = explain_json(dir, "any", &request("e", 10), &[]);
    assert_eq!(
        verdicts(&replayed),
        row(&[p, p, "replayed", nr, nr, nr, nr, nr, nr, nr])
    );
    assert_eq!(replayed["explain"]["cause"]["replayed"], true);
    assert_eq!(
        decided_by(&replayed, 3),
        [(
            "budget 2 requests per day".into(),
            "defaults".into(),
            Some(6)
        )]
    );

    let invalid = explain_json(
        dir,
        "any",
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call"}"#,
        &[],
    );
    assert_eq!(invalid["outcome"], "invalid");
    assert_eq!(invalid["exit"], 1);
    assert_eq!(invalid["output"]["error"]["code"], -32600);
    assert_eq!(
        verdicts(&invalid),
        row(&["refused", nr, nr, nr, nr, nr, nr, nr, nr, nr])
    );
}

/// README: every command takes `--format json`. Without `--explain`,
/// `eval` prints the outcome, the exit code and what stdout would carry,
/// and the frame inside it is the one plain `eval` prints.
#[test]
fn format_json_without_explain_prints_the_outcome_and_the_frame() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("p.mcpolicy");
    std::fs::write(&policy, POLICY).expect("write policy");
    let body = dir.path().join("r.json");
    std::fs::write(&body, request("a", 10)).expect("write request");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mcpc"))
            .arg("eval")
            .arg(&policy)
            .args(["--server", "any", "--request"])
            .arg(&body)
            .args(extra)
            .output()
            .expect("mcpc runs")
    };
    let plain = run(&[]);
    let out = run(&["--format", "json"]);
    assert_eq!(out.status.code(), plain.status.code());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let frame: serde_json::Value = serde_json::from_slice(&plain.stdout).expect("the frame");
    assert_eq!(doc["output"], frame);
    assert_eq!(doc["exit"], plain.status.code().expect("exit"));
    assert!(doc["outcome"].is_string(), "{doc}");
    assert!(doc.get("explain").is_none(), "{doc}");
}

#[test]
fn help_documents_exit_codes_and_the_json_shape() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["eval", "--help"])
        .output()
        .expect("mcpc runs");
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "Exit codes:",
        "  0  allowed",
        "  1  denied",
        "  2  usage",
        "steps   [{step",
    ] {
        assert!(help.contains(needle), "{needle} missing from\n{help}");
    }
}

/// The whole human explanation of a trimmed request on an example, after
/// approval: the block matching, the provenance and the ten steps.
#[test]
fn team_gateway_explained_human() {
    let policy = format!(
        "{}/../examples/team-gateway.mcpolicy",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"Summarise PROJ-1"}}],"maxTokens":9000,"includeContext":"allServers"}}"#;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("eval")
        .arg(&policy)
        .args([
            "--server",
            "jira",
            "--request",
            "-",
            "--now",
            "2026-03-10T12:00:00Z",
        ])
        .args(["--consent", "approve", "--explain", "--color", "never"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpc");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write request");
    let out = child.wait_with_output().expect("mcpc runs");
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!(String::from_utf8_lossy(&out.stderr));
}

/// Runs `mcpc eval` on an example with a request file, no store (each run
/// decides afresh), with `extra` arguments.
fn eval_example(policy: &str, server: &str, request: &std::path::Path, extra: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("eval")
        .arg(policy)
        .args(["--server", server, "--request"])
        .arg(request)
        .args(["--now", "2026-03-10T12:00:00Z", "--color", "never"])
        .args(extra)
        .output()
        .expect("mcpc runs");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

mod random {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const EXAMPLES: &[(&str, &[&str])] = &[
        (
            "team-gateway",
            &[
                "github-actions",
                "github-x",
                "internal-hr",
                "internal-oncall",
                "figma",
                "sandbox-1",
                "postgres-readonly",
                "zzz",
            ],
        ),
        (
            "cost-capped",
            &[
                "research-assistant",
                "support-triage",
                "analytics-eu",
                "other",
            ],
        ),
        ("ci-agent", &["test-log-summarizer", "code-search", "other"]),
        (
            "personal-laptop",
            &["filesystem", "notes", "web-fetch", "other"],
        ),
    ];

    fn config() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(32);
        ProptestConfig {
            cases,
            ..ProptestConfig::default()
        }
    }

    fn request() -> impl Strategy<Value = Value> {
        (
            1usize..60,
            prop_oneof![Just(10u64), Just(2000u64), Just(100_000u64)],
            prop::option::of(prop_oneof![Just("none"), Just("thisServer"), Just("allServers")]),
            any::<bool>(),
            prop::option::of(prop_oneof![Just("claude-sonnet-4"), Just("gpt-4o"), Just("llama")]),
            0usize..3000,
            prop::bool::weighted(0.1),
        )
            .prop_map(|(messages, max_tokens, context, tools, hint, pad, broken)| {
                if broken {
                    return json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {"messages": 3}});
                }
                let text = "x".repeat(pad);
                let mut params = json!({
                    "messages": (0..messages).map(|i| json!({"role": "user", "content": {"type": "text", "text": format!("{i}{text}")}})).collect::<Vec<_>>(),
                    "maxTokens": max_tokens,
                });
                if let Some(context) = context {
                    params["includeContext"] = json!(context);
                }
                if tools {
                    params["tools"] = json!([{"name": "t", "inputSchema": {"type": "object"}}]);
                }
                if let Some(hint) = hint {
                    params["modelPreferences"] = json!({"hints": [{"name": hint}]});
                }
                json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": params})
            })
    }

    proptest! {
        #![proptest_config(config())]

        /// On random requests to the examples: `--explain --format json`
        /// carries exactly what plain `eval` prints and exits with; steps
        /// before the deciding one passed (or trimmed, or replayed), steps
        /// after a denial or a question are not reached, and the deciding
        /// step names the cause's statement.
        #[test]
        fn steps_follow_the_cause(
            example in 0..EXAMPLES.len(),
            server in 0usize..8,
            body in request(),
            consent in prop_oneof![Just("pending"), Just("approve"), Just("deny")],
        ) {
            let (name, servers) = EXAMPLES[example];
            let server = servers[server % servers.len()];
            let policy = format!("{}/../examples/{name}.mcpolicy", env!("CARGO_MANIFEST_DIR"));
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("r.json");
            std::fs::write(&path, body.to_string()).expect("write");
            let plain = eval_example(&policy, server, &path, &["--consent", consent]);
            let explained = eval_example(&policy, server, &path, &["--consent", consent, "--explain", "--format", "json"]);
            let doc: Value = serde_json::from_str(&explained.stdout)
                .map_err(|e| TestCaseError::fail(format!("{e}: {}", explained.stdout)))?;
            prop_assert_eq!(plain.code, explained.code);
            prop_assert_eq!(doc["exit"].as_i64(), plain.code.map(i64::from));
            let printed: Value = serde_json::from_str(plain.stdout.trim())
                .map_err(|e| TestCaseError::fail(format!("{e}: {}", plain.stdout)))?;
            prop_assert_eq!(&doc["output"], &printed);

            let steps = doc["explain"]["steps"].as_array().expect("steps");
            prop_assert_eq!(steps.len(), 10);
            let verdicts: Vec<&str> = steps.iter().filter_map(|s| s["verdict"].as_str()).collect();
            let stop = verdicts
                .iter()
                .position(|v| matches!(*v, "denied" | "asked" | "refused") || (*v == "replayed" && doc["explain"]["cause"]["step"] == 3));
            match stop {
                Some(at) => {
                    prop_assert!(verdicts[..at].iter().all(|v| matches!(*v, "passed" | "trimmed" | "replayed")), "{:?}", verdicts);
                    prop_assert!(verdicts[at + 1..].iter().all(|v| *v == "not reached"), "{:?}", verdicts);
                    prop_assert_ne!(&doc["outcome"], "allow");
                    prop_assert_ne!(&doc["outcome"], "trim");
                }
                None => {
                    prop_assert!(verdicts.iter().all(|v| matches!(*v, "passed" | "trimmed" | "replayed")), "{:?}", verdicts);
                    let trimmed = verdicts[5] == "trimmed";
                    prop_assert_eq!(trimmed, doc["outcome"] == "trim", "{:?}", verdicts);
                }
            }
            let cause = &doc["explain"]["cause"];
            if let (Some(step), Some(statement)) = (cause["step"].as_u64(), cause["statement"].as_str()) {
                let by: Vec<&str> = steps[step as usize - 1]["by"]
                    .as_array()
                    .expect("by")
                    .iter()
                    .filter_map(|s| s["statement"].as_str())
                    .collect();
                prop_assert!(by.contains(&statement), "step {} by {:?}, cause {}", step, by, statement);
            }
            if doc["outcome"] == "invalid" {
                prop_assert_eq!(verdicts[0], "refused");
                prop_assert!(cause.is_null());
            }
        }
    }
}
