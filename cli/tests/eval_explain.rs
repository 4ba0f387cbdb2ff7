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
            "explain: step 3 (replay) for defaults: `budget 2 requests per day` (defaults, line 6), answered from the store (the statement is derived from the stored reason)",
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
