//! Every audit line the session writes for random decisions matches
//! `runtime/schema/mcpolicy-audit-1.schema.json`.
//!
//! Each case is a sequence of random sampling requests (context scopes,
//! `maxTokens`, model hints, prompts drawn from a small pool so identities
//! repeat, malformed ones) to random servers of a policy that allows, trims,
//! denies, asks for consent and limits, answered by the client at random.
//! The lines of every case are validated with Python's `jsonschema` in one
//! run at the end (a failing line is printed with its case). Fast by default
//! (64 cases); long mode: `PROPTEST_CASES=2000 cargo test -p mcpolicy-proxy
//! --test audit_schema`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_proxy::capture::Captured;
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::{Engine, Policy};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

const POLICY: &str = r#"
mcpolicy 1
protocol 2025-11-25
identity systemPrompt, messages, includeContext, modelPreferences

reason acme.closed { retryable false; ttl forever }

defaults {
  max_context thisServer
  max_tokens 500
  consent never
  max_messages 3
}

server "off" { sampling off as acme.closed }
server "asks" { consent always }
server "first" { consent first }
server "models" { models "claude-*" }
server "limited" {
  rate 2 per 1m
  budget 3 requests per day
}
server "retry" {
  sampling off
  retry_alert 1 per 10m
}
"#;

const SERVERS: &[&str] = &["off", "asks", "first", "models", "limited", "retry", "open"];

#[derive(Debug, Clone)]
struct Req {
    server: usize,
    prompt: u8,
    messages: u8,
    context: Option<&'static str>,
    max_tokens: Option<u64>,
    hints: Option<Vec<Option<&'static str>>>,
    malformed: bool,
    approve: bool,
    step_ms: u64,
    /// Send the previous request again (retry loops).
    repeat: bool,
}

fn req() -> impl Strategy<Value = Req> {
    (
        0..SERVERS.len(),
        0u8..3,
        1u8..5,
        prop::option::of(prop::sample::select(vec![
            "none",
            "thisServer",
            "allServers",
        ])),
        prop::option::of(prop_oneof![1u64..1000, Just(100_000u64)]),
        prop::option::of(prop::collection::vec(
            prop::option::of(prop::sample::select(vec!["claude-3", "gpt-4o", "llama"])),
            0..3,
        )),
        prop::bool::weighted(0.05),
        any::<bool>(),
        (
            prop_oneof![Just(0u64), 1u64..120_000],
            prop::bool::weighted(0.4),
        ),
    )
        .prop_map(
            |(
                server,
                prompt,
                messages,
                context,
                max_tokens,
                hints,
                malformed,
                approve,
                (step_ms, repeat),
            )| {
                Req {
                    repeat,
                    server,
                    prompt,
                    messages,
                    context,
                    max_tokens,
                    hints,
                    malformed,
                    approve,
                    step_ms,
                }
            },
        )
}

fn frame(id: u64, r: &Req) -> String {
    if r.malformed {
        return format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"sampling/createMessage","params":{{"messages":7}}}}"#
        );
    }
    let messages: Vec<Value> = (0..r.messages)
        .map(|i| json!({"role": "user", "content": {"type": "text", "text": format!("p{} {i}", r.prompt)}}))
        .collect();
    let mut params = json!({ "messages": messages });
    if let Some(context) = r.context {
        params["includeContext"] = json!(context);
    }
    if let Some(max) = r.max_tokens {
        params["maxTokens"] = json!(max);
    }
    if let Some(hints) = &r.hints {
        let hints: Vec<Value> = hints
            .iter()
            .map(|h| h.map_or(json!({}), |name| json!({ "name": name })))
            .collect();
        params["modelPreferences"] = json!({ "hints": hints });
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": params})
        .to_string()
}

/// A request to `SERVERS[server]` asking wider than any block allows.
fn fixed_req(server: usize) -> Req {
    Req {
        repeat: false,
        server,
        prompt: 1,
        messages: 1,
        context: Some("allServers"),
        max_tokens: Some(100_000),
        hints: None,
        malformed: false,
        approve: true,
        step_ms: 1000,
    }
}

/// Runs one sequence through fresh sessions sharing one store and clock;
/// returns the audit lines.
fn run(reqs: &[Req]) -> Vec<String> {
    let db = Database::default();
    let source = SourceText::new(&db, "t.mcpolicy".into(), POLICY.into());
    let table = db::lower_file(&db, source)
        .clone()
        .expect("policy compiles");
    let policy = Policy::verify(table).expect("verifies");
    let clock = Arc::new(ManualClock::new(1_773_104_400_000));
    let engine = Engine::new(policy, Arc::new(MemoryStore::new()), clock.clone());
    let audit = Captured::default();
    let sessions: Vec<Session> = SERVERS
        .iter()
        .map(|server| {
            Session::new(
                engine.clone(),
                *server,
                Box::new(std::io::sink()),
                Box::new(Captured::default()),
                Log::to(Box::new(std::io::sink()), server),
                Some(Audit::to(Box::new(audit.clone()))),
            )
        })
        .collect();
    let mut previous: Option<Req> = None;
    for (i, r) in reqs.iter().enumerate() {
        clock.advance(r.step_ms as i64);
        let r = match previous {
            Some(p) if r.repeat => Req {
                approve: r.approve,
                step_ms: r.step_ms,
                ..p
            },
            _ => r.clone(),
        };
        previous = Some(r.clone());
        let r = &r;
        let id = i as u64 + 1;
        let session = &sessions[r.server];
        session.from_server(frame(id, r).as_bytes());
        // The client answers whatever reached it: an approval or a refusal.
        let answer = if r.approve {
            json!({"jsonrpc": "2.0", "id": id, "result": {"role": "assistant", "model": "claude-3",
                   "content": {"type": "text", "text": "ok"}, "usage": {"inputTokens": 3, "outputTokens": 4}}})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -1, "message": "User rejected"}})
        };
        session.from_client(answer.to_string().as_bytes());
    }
    audit
        .take_lines()
        .into_iter()
        .map(|l| String::from_utf8(l).expect("UTF-8"))
        .collect()
}

/// The Python interpreter to validate with: `MCPOLICY_PYTHON` (CI sets it to
/// a virtual environment with `jsonschema`), else `python3`.
fn python_with(module: &str) -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var_os("MCPOLICY_REQUIRE_PYTHON").is_none(),
        "{python} cannot import {module}, and MCPOLICY_REQUIRE_PYTHON is set"
    );
    eprintln!("skipping: {python} cannot import {module}");
    None
}

/// Validates JSON lines against the audit schema; `Err` names the first bad
/// line (1-based) with the validator's message.
fn validate(python: &str, lines: &[String]) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("audit.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../runtime/schema/mcpolicy-audit-1.schema.json");
    let script = "import json,sys,jsonschema\n\
                  schema=json.load(open(sys.argv[1]))\n\
                  jsonschema.Draft202012Validator.check_schema(schema)\n\
                  v=jsonschema.Draft202012Validator(schema)\n\
                  for n,line in enumerate(open(sys.argv[2]),1):\n\
                  \x20   e=jsonschema.exceptions.best_match(v.iter_errors(json.loads(line)))\n\
                  \x20   if e is not None:\n\
                  \x20       print(n, e.message, line.strip()); sys.exit(1)\n";
    let out = Command::new(python)
        .args(["-c", script])
        .arg(&schema)
        .arg(&file)
        .output()
        .expect("python runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[test]
fn lines_of_random_decisions_match_the_schema() {
    let Some(python) = python_with("jsonschema") else {
        return;
    };
    let config = Config {
        failure_persistence: None,
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(64),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let cases: std::cell::RefCell<Vec<(Vec<Req>, Vec<String>)>> = Default::default();
    runner
        .run(&prop::collection::vec(req(), 1..40), |reqs| {
            let lines = run(&reqs);
            cases.borrow_mut().push((reqs, lines));
            Ok(())
        })
        .unwrap();
    let mut cases = cases.into_inner();
    // Random sequences rarely hold twenty trims in a row: one fixed case
    // makes sure every kind of line, both alerts included, is validated.
    let fixed: Vec<Req> = std::iter::repeat_n(fixed_req(5), 4)
        .chain(std::iter::repeat_n(fixed_req(6), 22))
        .collect();
    let lines = run(&fixed);
    cases.push((fixed, lines));
    let all: Vec<String> = cases.iter().flat_map(|(_, l)| l.iter().cloned()).collect();
    let kinds: std::collections::BTreeSet<String> = all
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            format!("{}/{}{}", v["event"], v["outcome"], v["alert"]["kind"])
        })
        .collect();
    // The sample covers every kind of line the policy can produce.
    for kind in [
        "\"decision\"/\"allow\"null",
        "\"decision\"/\"trim\"null",
        "\"decision\"/\"deny\"null",
        "\"decision\"/\"consent\"null",
        "\"consent\"/\"deny\"null",
        "\"invalid\"/\"deny\"null",
        "\"alert\"/null\"retries\"",
        "\"alert\"/null\"trims\"",
    ] {
        assert!(kinds.contains(kind), "no {kind} line in {kinds:?}");
    }
    if let Err(error) = validate(&python, &all) {
        // Find the case to print it: validate each until one fails.
        for (reqs, lines) in &cases {
            if let Err(e) = validate(&python, lines) {
                panic!("{e}\ncase: {reqs:#?}");
            }
        }
        panic!("{error}");
    }
}

/// The schema is closed: a line with a member it does not define, or a
/// trim without its reasons, is refused (so the test above can fail).
#[test]
fn the_schema_refuses_what_the_format_does_not_have() {
    let Some(python) = python_with("jsonschema") else {
        return;
    };
    let good = run(&[Req {
        repeat: false,
        server: 6,
        prompt: 0,
        messages: 1,
        context: Some("allServers"),
        max_tokens: Some(100_000),
        hints: None,
        malformed: false,
        approve: true,
        step_ms: 0,
    }]);
    validate(&python, &good).unwrap();
    let line: Value = serde_json::from_str(&good[0]).unwrap();
    assert_eq!(line["outcome"], "trim");
    let mut extra = line.clone();
    extra["surprise"] = json!(1);
    let mut no_reasons = line.clone();
    no_reasons.as_object_mut().unwrap().remove("reasons");
    let mut bad_outcome = line;
    bad_outcome["outcome"] = json!("maybe");
    for bad in [extra, no_reasons, bad_outcome] {
        assert!(validate(&python, &[bad.to_string()]).is_err(), "{bad}");
    }
}

/// Twenty calls trimmed in a row raise the trim alert once, and its line
/// matches the schema.
#[test]
fn the_trim_alert_line_matches_the_schema() {
    let Some(python) = python_with("jsonschema") else {
        return;
    };
    let wide = Req {
        repeat: false,
        server: 6,
        prompt: 1,
        messages: 1,
        context: None,
        max_tokens: Some(100_000),
        hints: None,
        malformed: false,
        approve: true,
        step_ms: 1000,
    };
    let lines = run(&vec![wide; 30]);
    let alerts: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["event"] == "alert")
        .collect();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["alert"]["kind"], "trims");
    assert_eq!(alerts[0]["alert"]["calls"], 20);
    assert_eq!(alerts[0]["alert"]["gap"]["maxTokens"]["requested"], 100_000);
    assert_eq!(alerts[0]["alert"]["gap"]["maxTokens"]["applied"], 500);
    validate(&python, &lines).unwrap();
}
