//! The reader differential with the official SDKs' own stdio readers, run
//! for real (`mcpolicy_fuzz::readers` holds the models): smuggling streams
//! go through the proxy's `Session`, and what it writes to the client is
//! read by
//!
//! * the TypeScript SDK's `ReadBuffer` (node, `tests/e2e/typescript`), fed in
//!   7-byte chunks;
//! * the Python SDK's `stdio_client` (`MCPOLICY_PYTHON`), with `cat FILE` as
//!   the "server", so its own stdout reader and parser run.
//!
//! Each SDK must yield one message or one parse error per proxy line, and
//! its messages must be the proxy's lines (same `id` and `method`, in
//! order); a sampling request among them must be one the proxy decided.
//! Skipped with a message when node or python is missing, unless
//! `MCPOLICY_REQUIRE_NODE=1` / `MCPOLICY_REQUIRE_PYTHON=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Deterministic fuzz-like inputs, and the smuggles spelt out.
fn inputs() -> Vec<Vec<u8>> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out: Vec<Vec<u8>> = (0..80)
        .map(|_| {
            let len = 20 + (next() % 200) as usize;
            (0..len).map(|_| next() as u8).collect()
        })
        .collect();
    // server "off", smuggle template, CR / U+2028 / NEL around the request.
    for splitter in [0u8, 9, 8, 13] {
        out.push(vec![0, 0, 0, 1, 2, 4, splitter, splitter, 0, 1]);
    }
    out
}

struct Case {
    file: PathBuf,
    /// `(id, method)` of each proxy line.
    lines: Vec<(Value, Value)>,
    decided: Vec<Value>,
}

fn cases(dir: &Path) -> Vec<Case> {
    inputs()
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let (server, stream) = mcpolicy_fuzz::readers::scenario(data);
            let (out, audit) = mcpolicy_fuzz::readers::proxy(server, &stream);
            mcpolicy_fuzz::readers::check(server, &out, &audit);
            let file = dir.join(format!("stream-{i}"));
            std::fs::write(&file, &out).unwrap();
            let lines = out
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let v: Value = serde_json::from_slice(l).unwrap();
                    (v["id"].clone(), v["method"].clone())
                })
                .collect();
            let decided = audit
                .iter()
                .filter(|a| a["event"] == "decision" && a["outcome"] != "deny")
                .map(|a| a["id"].clone())
                .collect();
            Case {
                file,
                lines,
                decided,
            }
        })
        .collect()
}

/// Each SDK's reading of each stream: a list of messages (`{"id", "method"}`)
/// or `{"error": …}` per frame.
fn compare(sdk: &str, cases: &[Case], read: &[Vec<Value>]) {
    assert_eq!(read.len(), cases.len());
    let mut messages = 0;
    for (case, frames) in cases.iter().zip(read) {
        assert_eq!(
            frames.len(),
            case.lines.len(),
            "{sdk} reads {} frames where the proxy wrote {} lines ({}): {frames:?}",
            frames.len(),
            case.lines.len(),
            case.file.display()
        );
        for (frame, (id, method)) in frames.iter().zip(&case.lines) {
            if frame.get("error").is_some() {
                continue; // the SDK's schema refused a line: it acts on nothing
            }
            messages += 1;
            let got = (
                frame.get("id").cloned().unwrap_or(Value::Null),
                frame.get("method").cloned().unwrap_or(Value::Null),
            );
            assert_eq!(
                &got,
                &(id.clone(), method.clone()),
                "{sdk}: {}",
                case.file.display()
            );
            if got.1 == "sampling/createMessage" {
                assert!(
                    case.decided.contains(&got.0),
                    "{sdk}: undecided sampling request {frame}"
                );
            }
        }
    }
    assert!(messages > 20, "{sdk} parsed only {messages} messages");
}

const NODE: &str = r#"
import { readFileSync } from "node:fs";
import { ReadBuffer } from "@modelcontextprotocol/sdk/shared/stdio.js";
const out = process.argv.slice(1).map((file) => {
  const bytes = readFileSync(file);
  const buffer = new ReadBuffer();
  const frames = [];
  for (let at = 0; at < bytes.length; at += 7) {
    buffer.append(bytes.subarray(at, at + 7));
    for (;;) {
      let message;
      try {
        message = buffer.readMessage();
      } catch (error) {
        frames.push({ error: String(error).slice(0, 80) });
        continue;
      }
      if (message === null) break;
      frames.push({ id: message.id ?? null, method: message.method ?? null });
    }
  }
  return frames;
});
process.stdout.write(JSON.stringify(out));
"#;

const PYTHON: &str = r#"
import json, sys
import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client

async def read(path):
    frames = []
    async with stdio_client(StdioServerParameters(command="cat", args=[path])) as (reader, _writer):
        async for item in reader:
            if isinstance(item, Exception):
                frames.append({"error": type(item).__name__})
            else:
                message = json.loads(item.message.model_dump_json(by_alias=True, exclude_unset=True))
                frames.append({"id": message.get("id"), "method": message.get("method")})
    return frames

async def main():
    return [await read(path) for path in sys.argv[1:]]

print(json.dumps(anyio.run(main)))
"#;

fn run(program: &str, args: &[String], cwd: &Path) -> Vec<Vec<Value>> {
    let output = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_typescript_sdk_reads_exactly_the_proxys_lines() {
    let node = std::env::var("MCPOLICY_NODE").unwrap_or_else(|_| "node".to_owned());
    let suite = repo().join("tests/e2e/typescript");
    if !suite
        .join("node_modules/@modelcontextprotocol/sdk/package.json")
        .is_file()
        || Command::new(&node).arg("--version").output().is_err()
    {
        assert!(
            std::env::var("MCPOLICY_REQUIRE_NODE").as_deref() != Ok("1"),
            "MCPOLICY_REQUIRE_NODE=1 but node or the TypeScript SDK is missing"
        );
        eprintln!("skipping: node or the TypeScript SDK is missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = cases(dir.path());
    let mut args = vec![
        "--input-type=module".to_owned(),
        "-e".to_owned(),
        NODE.to_owned(),
    ];
    args.extend(cases.iter().map(|c| c.file.display().to_string()));
    compare("the TypeScript SDK", &cases, &run(&node, &args, &suite));
}

#[test]
fn the_python_sdk_reads_exactly_the_proxys_lines() {
    let Ok(python) = std::env::var("MCPOLICY_PYTHON") else {
        assert!(
            std::env::var("MCPOLICY_REQUIRE_PYTHON").as_deref() != Ok("1"),
            "MCPOLICY_REQUIRE_PYTHON=1 but MCPOLICY_PYTHON is not set"
        );
        eprintln!("skipping: MCPOLICY_PYTHON is not set");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cases = cases(dir.path());
    let mut args = vec!["-c".to_owned(), PYTHON.to_owned()];
    args.extend(cases.iter().map(|c| c.file.display().to_string()));
    compare("the Python SDK", &cases, &run(&python, &args, &repo()));
}
