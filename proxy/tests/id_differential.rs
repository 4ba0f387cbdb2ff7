//! The id differential (`proxy/PROXY.md`, "Framing and ids";
//! `docs/threat-model.md`, "An id a client reads as another"): of the ids
//! the proxy lets into flight, those the official TypeScript SDK or Python
//! SDK would take for the same id are the same id to the proxy.
//!
//! Id spellings (strings with escapes, integers, fractions, exponents, `-0`,
//! values beyond 2^53 and 2^64) are given to each SDK for real, in one
//! process each: the SDK reads a `ping` carrying the id with its own stdio
//! reader and writes its answer as its session would. Then the real
//! `Session`:
//!
//! * given a request with one spelling, then the SDK's answer to it, passes
//!   the answer to the server (the answer finds its request);
//! * given two requests whose ids the SDK answers with the same id, never
//!   has both in flight at the client (the second is refused), and given
//!   two it answers apart, forwards both.
//!
//! Needs node with `tests/e2e/typescript` installed and `MCPOLICY_PYTHON`
//! with the `mcp` package; each SDK is skipped with a message when missing,
//! unless `MCPOLICY_REQUIRE_NODE=1` / `MCPOLICY_REQUIRE_PYTHON=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_proxy::capture::Captured;
use mcpolicy_proxy::log::Log;
use mcpolicy_proxy::session::Session;
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::store::MemoryStore;

const POLICY: &str = include_str!("fixtures/session.mcpolicy");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The spellings: fixed hostile ones, and every value of a small range in
/// each spelling a number has.
fn spellings() -> Vec<String> {
    let mut out: Vec<String> = [
        "0",
        "1",
        "-1",
        "7",
        "10",
        "-42",
        "9007199254740991",
        "-9007199254740991",
        "9007199254740992",
        "9007199254740993",
        "-9007199254740993",
        "18446744073709551616",
        "123456789012345678901234567890",
        "1.0",
        "1.00",
        "1e0",
        "1E0",
        "1e+0",
        "10e-1",
        "0.1e1",
        "1e1",
        "10.0",
        "0.0",
        "-0.0",
        "-0",
        "0e0",
        "1.5",
        "4.2e1",
        "9007199254740993.0",
        "9.007199254740993e15",
        "1e400",
        "-1e-400",
        r#""1""#,
        r#""\u0031""#,
        r#""a""#,
        r#""\u0061""#,
        r#""""#,
        r#""1.0""#,
        r#""-0""#,
        r#""\ud800""#,
        r#""é""#,
        r#""e\u0301""#,
        r#""\u00e9""#,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for n in -2i64..=3 {
        out.push(format!("{n}.0"));
        out.push(format!("{n}e0"));
        out.push(format!("{}e-1", n * 10));
        out.push(format!("\"{n}\""));
    }
    out.sort();
    out.dedup();
    out
}

fn ping(id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

/// Runs `program args` with the spellings as a JSON array on stdin; it
/// prints a JSON array with the SDK's answer line per spelling (`null`: the
/// SDK does not answer it: refused, or read as a notification).
fn answers(program: &str, args: &[&str], cwd: &Path) -> Vec<Option<String>> {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let input = serde_json::to_string(&spellings()).unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{program}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The TypeScript SDK: its stdio `ReadBuffer` reads the ping, and the
/// answer is what its `Protocol` sends (`{result, jsonrpc, id: request.id}`
/// through `serializeMessage`).
const NODE: &str = r#"
import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js";
let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = JSON.parse(input).map((id) => {
  const buffer = new ReadBuffer();
  buffer.append(Buffer.from(`{"jsonrpc":"2.0","id":${id},"method":"ping"}\n`));
  try {
    const message = buffer.readMessage();
    if (!message || !("id" in message) || !("method" in message)) return null;
    return serializeMessage({ result: {}, jsonrpc: "2.0", id: message.id }).trimEnd();
  } catch {
    return null;
  }
});
process.stdout.write(JSON.stringify(out));
"#;

/// The Python SDK: its stdio client's `_parse_line` reads the ping, and the
/// answer is the `JSONRPCResponse` its session sends, serialised as its
/// stdio writer does.
const PYTHON: &str = r#"
import json, sys
from mcp import types
from mcp.client.stdio import _parse_line
out = []
for id in json.load(sys.stdin):
    parsed = _parse_line('{"jsonrpc":"2.0","id":%s,"method":"ping"}' % id)
    message = getattr(parsed, "message", None)
    if not isinstance(message, types.JSONRPCRequest):
        out.append(None)
        continue
    answer = types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result={})
    out.append(answer.model_dump_json(by_alias=True, exclude_unset=True))
print(json.dumps(out))
"#;

struct Rig {
    session: Session,
    server: Captured,
    client: Captured,
}

fn rig() -> Rig {
    static POLICY_ONCE: std::sync::OnceLock<mcpolicy_runtime::Policy> = std::sync::OnceLock::new();
    let policy = POLICY_ONCE
        .get_or_init(|| {
            let db = Database::default();
            let source = SourceText::new(&db, "t.mcpolicy".into(), POLICY.into());
            let table = db::lower_file(&db, source).clone().unwrap();
            mcpolicy_runtime::Policy::verify(table).unwrap()
        })
        .clone();
    let engine = Engine::new(policy, Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    let (server, client) = (Captured::default(), Captured::default());
    let session = Session::new(
        engine,
        "asks",
        Box::new(server.clone()),
        Box::new(client.clone()),
        Log::to(Box::new(std::io::sink()), "asks"),
        None,
    );
    Rig {
        session,
        server,
        client,
    }
}

fn sampling(id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"sampling/createMessage","params":{{"messages":[{{"role":"user","content":{{"type":"text","text":"hi"}}}}],"maxTokens":10}}}}"#
    )
}

/// The checks of the module documentation for one SDK's answers.
fn differential(sdk: &str, answers: &[Option<String>]) {
    let spellings = spellings();
    assert_eq!(answers.len(), spellings.len());
    let mut checked = 0;
    for (id, answer) in spellings.iter().zip(answers) {
        let Some(answer) = answer else { continue };
        let rig = rig();
        rig.session.from_server(ping(id).as_bytes());
        if rig.client.take().is_empty() {
            continue; // refused: never in flight
        }
        rig.session.from_client(answer.as_bytes());
        assert_eq!(
            rig.server.take(),
            vec![answer.clone()],
            "{sdk}: its answer {answer} to id {id} did not find the request"
        );
        checked += 1;
    }
    assert!(checked > 10, "{sdk}: only {checked} ids admitted");
    let mut aliases = 0;
    for (a, answer_a) in spellings.iter().zip(answers) {
        for (b, answer_b) in spellings.iter().zip(answers) {
            let (Some(answer_a), Some(answer_b)) = (answer_a, answer_b) else {
                continue;
            };
            if a == b {
                continue;
            }
            let same = answer_a == answer_b;
            aliases += usize::from(same);
            let rig = rig();
            rig.session.from_server(sampling(a).as_bytes());
            let first = rig.client.take().len();
            rig.session.from_server(ping(b).as_bytes());
            let second = rig.client.take().len();
            if same {
                assert!(
                    first + second < 2,
                    "{sdk} answers {a} and {b} alike ({answer_a}), and both are in flight"
                );
            } else if first == 1 {
                // Told apart by the SDK: the proxy keeps them apart too
                // (unless it refuses `b` for its spelling alone).
                let alone = rig_admits(b);
                assert_eq!(
                    second,
                    usize::from(alone),
                    "{sdk} tells {a} and {b} apart, the proxy does not"
                );
            }
        }
    }
    assert!(
        aliases > 0,
        "{sdk}: no spelling pair aliased: the test tests nothing"
    );
}

fn rig_admits(id: &str) -> bool {
    let rig = rig();
    rig.session.from_server(ping(id).as_bytes());
    !rig.client.take().is_empty()
}

#[test]
fn ids_the_typescript_sdk_takes_for_one_are_one_to_the_proxy() {
    let node = std::env::var("MCPOLICY_NODE").unwrap_or_else(|_| "node".to_owned());
    let suite = repo().join("tests/e2e/typescript");
    let available = suite
        .join("node_modules/@modelcontextprotocol/sdk/package.json")
        .is_file()
        && Command::new(&node).arg("--version").output().is_ok();
    if !available {
        assert!(
            std::env::var("MCPOLICY_REQUIRE_NODE").as_deref() != Ok("1"),
            "MCPOLICY_REQUIRE_NODE=1 but node or the TypeScript SDK is missing (tests/e2e/typescript/setup.sh)"
        );
        eprintln!("skipping: node or the TypeScript SDK is missing");
        return;
    }
    let answers = answers(&node, &["--input-type=module", "-e", NODE], &suite);
    differential("the TypeScript SDK", &answers);
}

#[test]
fn ids_the_python_sdk_takes_for_one_are_one_to_the_proxy() {
    let Ok(python) = std::env::var("MCPOLICY_PYTHON") else {
        assert!(
            std::env::var("MCPOLICY_REQUIRE_PYTHON").as_deref() != Ok("1"),
            "MCPOLICY_REQUIRE_PYTHON=1 but MCPOLICY_PYTHON is not set"
        );
        eprintln!("skipping: MCPOLICY_PYTHON is not set");
        return;
    };
    let answers = answers(&python, &["-c", PYTHON], &repo());
    differential("the Python SDK", &answers);
}

/// Ids are echoed as written in every refusal the proxy writes: an
/// ambiguous id on a readable request, and the readable id of a frame the
/// probe cannot read (two `method` members), also on a sampling request
/// the runtime refuses.
#[test]
fn refusals_echo_the_id_as_written() {
    for id in [
        "123456789012345678901234567890",
        "-0",
        "1.0",
        "1e2",
        "9007199254740993",
    ] {
        let frames = [
            ping(id),
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","method":"roots/list"}}"#),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","method":"sampling/createMessage","params":{{}}}}"#
            ),
        ];
        for frame in frames {
            let rig = rig();
            rig.session.from_server(frame.as_bytes());
            assert!(rig.client.take().is_empty(), "{frame}");
            let answer = rig.server.take();
            assert!(
                answer[0].starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"error":"#)),
                "{frame}: {answer:?}"
            );
        }
    }
}
