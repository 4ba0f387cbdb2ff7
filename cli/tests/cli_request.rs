//! `mcpc identity` and `mcpc eval` on refused requests, through the real
//! binary: both answer a refusal the same way (the JSON-RPC error frame on
//! stdout, a summary on stderr, exit code 1), frames carry a readable id,
//! and the messages say what is wrong (`docs/spec/frames.md`, "Echoing the id";
//! `docs/spec/evaluation.md`, "Step 1: Validation").

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// A policy that lets server `s` sample without consent or trims.
const OPEN_POLICY: &str = "mcpolicy 1\n\ndefaults {\n  consent never\n}\n";

fn mcpc(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpc");
    let mut input = child.stdin.take().expect("stdin");
    let bytes = stdin.to_vec();
    // Written from a thread: mcpc may answer before reading everything.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let output = child.wait_with_output().expect("mcpc runs");
    let _ = writer.join();
    output
}

fn policy(dir: &Path) -> String {
    let path = dir.join("open.mcpolicy");
    std::fs::write(&path, OPEN_POLICY).expect("write policy");
    path.to_str().expect("utf-8 path").to_owned()
}

fn identity(stdin: &[u8]) -> Output {
    mcpc(&["identity", "--server", "s", "-"], stdin)
}

fn eval(policy: &str, stdin: &[u8]) -> Output {
    mcpc(
        &[
            "eval",
            policy,
            "--server",
            "s",
            "--request",
            "-",
            "--color",
            "never",
        ],
        stdin,
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one frame a refusal prints on stdout.
fn frame(output: &Output) -> Value {
    assert_eq!(
        output.status.code(),
        Some(1),
        "stderr: {}",
        text(&output.stderr)
    );
    let stdout = text(&output.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        !text(&output.stderr).contains("jsonrpc"),
        "the frame goes to stdout only: {}",
        text(&output.stderr)
    );
    serde_json::from_str(&stdout).expect("the frame is JSON")
}

fn envelope(id: &str, params: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"sampling/createMessage","params":{params}}}"#)
        .into_bytes()
}

#[test]
fn identity_and_eval_answer_a_refusal_alike_on_stdout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = policy(dir.path());
    let cases: Vec<(Vec<u8>, i64, &str)> = vec![
        (
            envelope(
                "3",
                r#"{"messages":[],"maxTokens":1,"includeContext":"AllServers"}"#,
            ),
            -32602,
            r#"$.params.includeContext must be one of "none", "thisServer", "allServers", got "AllServers""#,
        ),
        (
            envelope("3", r#"{"messages":[]}"#),
            -32602,
            "$.params.maxTokens is missing: it must be a positive integer",
        ),
        (
            envelope("3", r#"{"messages":[],"maxTokens":18446744073709551616}"#),
            -32602,
            "$.params.maxTokens must be a positive integer, got 18446744073709551616",
        ),
        (
            envelope("3", r#"{"messages":[],"maxTokens":1,"a":{"x":1,"x":2}}"#),
            -32600,
            r#"duplicate key "x" at $.params.a"#,
        ),
    ];
    for (bytes, code, message) in cases {
        let by_identity = frame(&identity(&bytes));
        let by_eval = frame(&eval(&policy, &bytes));
        assert_eq!(by_identity, by_eval, "{}", text(&bytes));
        assert_eq!(
            by_identity,
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": code, "message": message}})
        );
    }
}

#[test]
fn strict_parse_failures_answer_with_the_readable_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = policy(dir.path());
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for bytes in [
        envelope(
            r#""a-7""#,
            r#"{"messages":[],"maxTokens":1,"a":{"x":1,"x":2}}"#,
        ),
        envelope(r#""a-7""#, r#"{"messages":[],"maxTokens":1,"s":"\ud800"}"#),
        envelope(
            r#""a-7""#,
            &format!(r#"{{"messages":{deep},"maxTokens":1}}"#),
        ),
    ] {
        for output in [identity(&bytes), eval(&policy, &bytes)] {
            assert_eq!(frame(&output)["id"], "a-7", "{}", text(&bytes));
        }
    }
}

#[test]
fn an_oversize_request_is_refused_for_its_size_with_its_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = policy(dir.path());
    // 17 MiB, the id after the part the reader keeps.
    let mut bytes = br#"{"params":{"messages":[],"maxTokens":1,"systemPrompt":""#.to_vec();
    bytes.resize(bytes.len() + 17 * 1024 * 1024, b'x');
    bytes.extend_from_slice(br#""},"jsonrpc":"2.0","method":"sampling/createMessage","id":99}"#);
    let file = dir.path().join("big.json");
    std::fs::write(&file, &bytes).expect("write");
    let file = file.to_str().expect("utf-8");
    let expected = json!({"jsonrpc": "2.0", "id": 99, "error": {
        "code": -32600,
        "message": format!("request is {} bytes, larger than the limit of 16777216 bytes", bytes.len()),
    }});
    let by_identity = mcpc(&["identity", "--server", "s", file], b"");
    assert_eq!(frame(&by_identity), expected);
    let by_eval = mcpc(&["eval", &policy, "--server", "s", "--request", file], b"");
    assert_eq!(frame(&by_eval), expected);
    // From standard input too.
    assert_eq!(frame(&identity(&bytes)), expected);
}

#[test]
fn eval_forwards_an_integral_max_tokens_as_an_integer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = policy(dir.path());
    for (written, integer) in [("9e3", "9000"), ("1e0", "1"), ("9000.0", "9000")] {
        let output = eval(
            &policy,
            &envelope("1", &format!(r#"{{"messages":[],"maxTokens":{written}}}"#)),
        );
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        let stdout = text(&output.stdout);
        assert!(
            stdout.contains(&format!(r#""maxTokens":{integer}}}"#))
                || stdout.contains(&format!(r#""maxTokens":{integer},"#)),
            "{written}: {stdout}"
        );
    }
}

#[test]
fn a_store_that_cannot_be_opened_is_named_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = policy(dir.path());
    let corrupt = dir.path().join("corrupt.db");
    std::fs::write(&corrupt, b"this is not a SQLite database, not at all....").expect("write");
    let missing = dir.path().join("no-such-dir").join("store.db");
    for store in [corrupt, missing] {
        let store = store.to_str().expect("utf-8");
        let output = mcpc(
            &[
                "eval",
                &policy,
                "--server",
                "s",
                "--request",
                "-",
                "--store",
                store,
            ],
            &envelope("1", r#"{"messages":[],"maxTokens":1}"#),
        );
        assert_eq!(output.status.code(), Some(2));
        let stderr = text(&output.stderr);
        assert_eq!(stderr.matches(store).count(), 1, "{stderr}");
    }
}
