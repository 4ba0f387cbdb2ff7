//! `mcpc show POLICY --server ID` through the real binary: the block is the
//! one the engine's table selects (`Table::entry_for`), with its digest; the
//! blocks before it are each passed over; the statements are the effective
//! block's, in order, and a statement's origin line is a line of the policy
//! that states it, inside the block it names. Human output is snapshotted
//! on the examples.

use std::process::Command;

use mcpolicy_compiler::statements::effective_lines;
use mcpolicy_compiler::{check, lower, parse};
use mcpolicy_runtime::table::{Table, pattern};
use proptest::prelude::*;
use serde_json::Value;

struct Run {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

fn mcpc(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .args(["--color", "never"])
        .output()
        .expect("mcpc runs");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

fn example(name: &str) -> String {
    format!("{}/../examples/{name}.mcpolicy", env!("CARGO_MANIFEST_DIR"))
}

const EXAMPLES: &[&str] = &["ci-agent", "cost-capped", "personal-laptop", "team-gateway"];

fn table(text: &str) -> Table {
    lower::lower(&check::check(&parse::parse(text).file).model)
}

fn show_json(policy: &str, id: &str) -> Value {
    let run = mcpc(&["show", policy, "--server", id, "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// Everything `show` claims about `id`, checked against the table the
/// compiler lowers and against the policy's text.
fn check_show(name: &str, id: &str) -> Result<(), TestCaseError> {
    let path = example(name);
    let text = std::fs::read_to_string(&path).expect("example");
    let lines: Vec<&str> = text.lines().collect();
    let table = table(&text);
    let doc = show_json(&path, id);
    let governing = table.entry_for(id);
    let entry = table
        .servers
        .iter()
        .position(|e| std::ptr::eq(e, governing));
    prop_assert_eq!(
        doc["block"]["entry"].as_u64(),
        entry.map(|e| e as u64),
        "{}",
        id
    );
    prop_assert_eq!(
        doc["block"]["digest"].as_str(),
        Some(governing.digest.as_str())
    );
    let passed: Vec<u64> = doc["passed_over"]
        .as_array()
        .expect("passed_over")
        .iter()
        .filter_map(|p| p["entry"].as_u64())
        .collect();
    let expected: Vec<u64> = (0..entry.unwrap_or(table.servers.len()) as u64).collect();
    prop_assert_eq!(passed, expected);
    for p in doc["passed_over"].as_array().into_iter().flatten() {
        let pat = p["pattern"].as_str().expect("pattern");
        prop_assert!(!pattern::matches(pat, &pattern::nfc(id)));
        prop_assert!(p["why"].as_str().is_some_and(|w| !w.is_empty()));
    }
    let statements = doc["statements"].as_array().expect("statements");
    let values: Vec<String> = statements
        .iter()
        .filter_map(|s| s["value"].as_str().map(str::to_owned))
        .collect();
    let effective: Vec<String> = effective_lines(&governing.block)
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    prop_assert_eq!(values, effective);
    // The block's own line range, to hold "server" origins inside it.
    let block_line = doc["block"]["line"].as_u64();
    for s in statements {
        let keyword = s["statement"].as_str().expect("statement");
        match s["origin"].as_str() {
            Some("built-in") => prop_assert!(s["line"].is_null()),
            Some(origin @ ("server" | "defaults")) => {
                let line = s["line"].as_u64().expect("a stated statement has a line") as usize;
                let written = lines[line - 1].trim_start();
                prop_assert!(
                    written.starts_with(keyword),
                    "{} line {}: {}",
                    id,
                    line,
                    written
                );
                if origin == "server" {
                    prop_assert!(block_line.is_some_and(|b| (b as usize) < line));
                }
            }
            other => return Err(TestCaseError::fail(format!("origin {other:?}"))),
        }
    }
    Ok(())
}

/// Ids worth trying on every example: each of its patterns as an id (and a
/// near miss of it), and a few that match nothing.
fn ids_of(text: &str) -> Vec<String> {
    let mut ids = vec!["nobody".to_owned(), String::new(), "x".to_owned()];
    for entry in &table(text).servers {
        let id = entry.pattern.replace('*', "x").replace('?', "y");
        ids.push(format!("{id}-z"));
        ids.push(id);
    }
    ids
}

#[test]
fn every_example_and_pattern_is_shown_as_the_engine_selects() {
    for name in EXAMPLES {
        let text = std::fs::read_to_string(example(name)).expect("example");
        for id in ids_of(&text) {
            check_show(name, &id).unwrap_or_else(|e| panic!("{name} {id}: {e}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_ids_are_shown_as_the_engine_selects(
        name in prop::sample::select(EXAMPLES),
        id in "(github-|internal-|sandbox-|analytics-|)[a-z]{0,6}",
    ) {
        check_show(name, &id)?;
    }
}

#[test]
fn examples_human() {
    for (name, id) in [
        ("team-gateway", "github-enterprise"),
        ("team-gateway", "internal-oncall"),
        ("team-gateway", "unknown-vendor"),
        ("ci-agent", "code-search"),
        ("ci-agent", "some-other-server"),
        ("cost-capped", "analytics-eu"),
        ("personal-laptop", "notes"),
    ] {
        let run = mcpc(&["show", &example(name), "--server", id]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        insta::assert_snapshot!(format!("{name}-{id}"), run.stdout);
    }
}

#[test]
fn a_compiled_table_is_shown_without_provenance() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("t.json");
    let run = mcpc(&[
        "compile",
        &example("team-gateway"),
        "-o",
        json.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let doc = show_json(json.to_str().expect("utf-8"), "github-x");
    assert_eq!(doc["block"]["pattern"], "github-*");
    assert_eq!(doc["block"]["line"], Value::Null);
    for s in doc["statements"].as_array().expect("statements") {
        assert_eq!(s["origin"], Value::Null, "{s}");
    }
    let source = show_json(&example("team-gateway"), "github-x");
    assert_eq!(doc["block"]["digest"], source["block"]["digest"]);
}

#[test]
fn errors_and_help() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.mcpolicy");
    std::fs::write(&bad, "mcpolicy 1\ndefaults {\n  max_tokens lots\n}\n").expect("write");
    let run = mcpc(&["show", bad.to_str().expect("utf-8"), "--server", "a"]);
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("max_tokens"), "{}", run.stderr);
    let missing = mcpc(&["show", "/nonexistent/p.mcpolicy", "--server", "a"]);
    assert_eq!(missing.code, Some(2));
    let help = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["show", "--help"])
        .output()
        .expect("mcpc runs");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Exit codes: 0 shown"), "{help}");
    assert!(help.contains("passed_over"), "{help}");
}

/// A policy of 300 server blocks: `show` of an id none matches is a few
/// lines (the nearest blocks, a count, the warning naming the closest
/// pattern), and the proxy says the same at start.
#[test]
fn a_large_policy_gives_a_bounded_answer_with_the_closest_pattern() {
    let dir = tempfile::tempdir().expect("temp dir");
    // (The output's bound does not depend on the size; 10,000 blocks give
    // the same eight lines, but take a debug build a minute to check.)
    let mut text = String::from("mcpolicy 1\n\ndefaults {\n  max_tokens 100\n}\n");
    for i in 0..300 {
        text.push_str(&format!(
            "\nserver \"srv-{i:05}\" {{\n  max_tokens 10\n}}\n"
        ));
    }
    text.push_str("\nserver \"everything\" {\n  max_tokens 20\n}\n");
    let policy = dir.path().join("big.mcpolicy");
    std::fs::write(&policy, &text).expect("write");
    let policy = policy.to_str().expect("utf-8");

    let id = "npm:@modelcontextprotocol/server-everything";
    let run = mcpc(&["show", policy, "--server", id]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let head: Vec<&str> = run
        .stdout
        .lines()
        .take_while(|l| !l.starts_with("effective"))
        .collect();
    assert!(head.len() <= 8, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("… and 296 more server blocks before it"),
        "{}",
        run.stdout
    );
    let warning = head
        .iter()
        .find(|l| l.starts_with("warning: "))
        .expect("a warning");
    assert!(
        warning.contains("the closest pattern is server \"everything\" (line 1207)"),
        "{warning}"
    );
    assert!(warning.contains("`--server-id everything`"), "{warning}");
    let doc = show_json(policy, id);
    assert_eq!(doc["passed_over"].as_array().expect("all").len(), 301);
    assert_eq!(doc["closest"][0]["pattern"], "everything");

    // The proxy logs the same block and the same warning at start.
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["proxy", "--policy", policy, "--store"])
        .arg(dir.path().join("s.sqlite3"))
        .args(["--", "npx", "-y", "@modelcontextprotocol/server-everything"])
        .env("PATH", "/nonexistent")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runs");
    let log = String::from_utf8_lossy(&out.stderr);
    let governed = run.stdout.lines().next().expect("a first line");
    assert!(
        log.contains(&format!("governing block: {governed}")),
        "{log}"
    );
    assert!(log.contains(&format!("{}\n", warning)), "{log}");
}
