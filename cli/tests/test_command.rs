//! Data-driven tests of `mcpc test`, through the built binary.
//!
//! - `tests/cases/test/passing.tests.toml`: every case passes; the human
//!   report with coverage is snapshotted (unexercised and dead statements).
//! - `tests/cases/test/failing.tests.toml`: every way a case can fail; the
//!   human, JSON and JUnit reports are snapshotted.
//! - `tests/cases/test/malformed/*.toml`: each is refused with one
//!   `file:line:col` error and exit 2; the message is snapshotted.
//! - `examples/<name>.tests.toml`: pass against their policy with 100%
//!   coverage (the same command `.ci/run` runs).
//!
//! Regenerate snapshots with `INSTA_UPDATE=always cargo test -p
//! mcpc --test test_command` and read them before committing.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compiler/ lives in the repository root")
        .to_path_buf()
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `mcpc` from the repository root, so paths in reports are relative.
fn mcpc(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .current_dir(repo_root())
        .env("NO_COLOR", "1")
        .output()
        .expect("run mcpc");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "mcpc {args:?} panicked:\n{stderr}"
    );
    Run {
        code: output
            .status
            .code()
            .unwrap_or_else(|| panic!("mcpc {args:?} was killed by a signal")),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
    }
}

const POLICY: &str = "tests/cases/test/policy.mcpolicy";
const PASSING: &str = "tests/cases/test/passing.tests.toml";
const FAILING: &str = "tests/cases/test/failing.tests.toml";

#[test]
fn passing_file_exits_0_and_reports_coverage() {
    let run = mcpc(&["test", POLICY, PASSING, "--coverage"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.stderr, "");
    insta::assert_snapshot!("passing_human", run.stdout);
}

#[test]
fn failing_file_exits_1_in_every_format() {
    let human = mcpc(&["test", POLICY, FAILING]);
    assert_eq!(human.code, 1, "{}", human.stderr);
    insta::assert_snapshot!("failing_human", human.stdout);

    let json = mcpc(&["test", POLICY, FAILING, "--format", "json"]);
    assert_eq!(json.code, 1);
    let report: Value = serde_json::from_str(&json.stdout).expect("JSON report");
    assert_eq!(report["passed"], 1);
    assert_eq!(report["failed"], 5);
    insta::assert_snapshot!("failing_json", json.stdout);

    let junit = mcpc(&["test", POLICY, FAILING, "--format", "junit"]);
    assert_eq!(junit.code, 1);
    assert!(junit.stdout.starts_with("<?xml"));
    assert_eq!(junit.stdout.matches("<failure ").count(), 5);
    insta::assert_snapshot!("failing_junit", junit.stdout);
}

#[test]
fn malformed_files_exit_2_with_a_position() {
    insta::glob!("../../tests/cases/test/malformed", "*.toml", |path| {
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        let shown = format!("tests/cases/test/malformed/{name}");
        let run = mcpc(&["test", POLICY, &shown]);
        assert_eq!(run.code, 2, "{shown}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{shown}: no case runs");
        assert!(
            run.stderr.starts_with(&format!("mcpc: error: {shown}")),
            "{shown}: {}",
            run.stderr
        );
        insta::assert_snapshot!("malformed", run.stderr);
    });
}

#[test]
fn one_malformed_file_stops_every_file() {
    let run = mcpc(&[
        "test",
        POLICY,
        PASSING,
        "tests/cases/test/malformed/bad-outcome.toml",
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "");
}

#[test]
fn threshold_fails_below_and_passes_at_or_above() {
    let below = mcpc(&["test", POLICY, PASSING, "--threshold", "100"]);
    assert_eq!(below.code, 1);
    assert!(
        below.stderr.contains(
            "coverage 35.3% (6/17) of tests/cases/test/policy.mcpolicy is below the threshold 100%"
        ),
        "{}",
        below.stderr
    );
    let at = mcpc(&["test", POLICY, PASSING, "--threshold", "35"]);
    assert_eq!(at.code, 0, "{}", at.stderr);
    let bad = mcpc(&["test", POLICY, PASSING, "--threshold", "120"]);
    assert_eq!(bad.code, 2);
}

#[test]
fn coverage_json_counts() {
    let run = mcpc(&["test", POLICY, PASSING, "--coverage", "--format", "json"]);
    assert_eq!(run.code, 0);
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON report");
    let coverage = &report["coverage"];
    assert_eq!(coverage["statements"]["covered"], 4);
    assert_eq!(coverage["statements"]["total"], 10);
    assert_eq!(coverage["reasons"]["covered"], 2);
    assert_eq!(coverage["reasons"]["total"], 7);
    let dead: Vec<&Value> = coverage["statement_list"]
        .as_array()
        .expect("list")
        .iter()
        .filter(|s| s["live"] == false)
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["text"], "deadline 30s");
}

/// Three token budgets of cost-capped's defaults deny with reasons two of
/// them share; coverage must credit the one the store reported refusing.
#[test]
fn coverage_credits_the_budget_that_refused() {
    let run = mcpc(&[
        "test",
        "examples/cost-capped.mcpolicy",
        "tests/cases/test/attribution.tests.toml",
        "--coverage",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON report");
    let budgets: Vec<(u64, u64)> = report["coverage"]["statement_list"]
        .as_array()
        .expect("list")
        .iter()
        .filter(|s| {
            s["block"] == "defaults" && s["text"].as_str().is_some_and(|t| t.starts_with("budget"))
        })
        .map(|s| {
            (
                s["line"].as_u64().unwrap_or(0),
                s["hits"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(budgets, vec![(32, 0), (33, 1), (34, 0)]);
    assert_eq!(report["coverage"]["unattributed"], serde_json::json!([]));
}

/// Hits of the statement at `line`, from a `--format json` coverage report.
fn hits_at(report: &Value, line: u64) -> u64 {
    report["coverage"]["statement_list"]
        .as_array()
        .expect("list")
        .iter()
        .find(|s| s["line"] == line)
        .and_then(|s| s["hits"].as_u64())
        .unwrap_or_else(|| panic!("no statement at line {line}"))
}

/// Under MCP 2026-07-28 a client without `sampling.context` has every scope
/// lowered to `none` by the protocol: such a trim is not the statement's.
#[test]
fn coverage_does_not_credit_max_context_for_the_protocol_rule() {
    let policy = "tests/cases/test/protocol-2026.mcpolicy";
    let rule = "tests/cases/test/protocol-2026-rule.tests.toml";
    let statement = "tests/cases/test/protocol-2026-statement.tests.toml";
    let only_rule = mcpc(&["test", policy, rule, "--coverage", "--format", "json"]);
    assert_eq!(
        only_rule.code, 0,
        "{}{}",
        only_rule.stdout, only_rule.stderr
    );
    let report: Value = serde_json::from_str(&only_rule.stdout).expect("JSON report");
    assert_eq!(hits_at(&report, 9), 0);
    assert_eq!(report["coverage"]["reasons"]["covered"], 1);

    let both = mcpc(&[
        "test",
        policy,
        rule,
        statement,
        "--coverage",
        "--format",
        "json",
    ]);
    assert_eq!(both.code, 0, "{}{}", both.stdout, both.stderr);
    let report: Value = serde_json::from_str(&both.stdout).expect("JSON report");
    assert_eq!(hits_at(&report, 9), 1);
}

#[test]
fn every_example_passes_with_full_coverage() {
    let examples = repo_root().join("examples");
    let mut tested = 0;
    for entry in std::fs::read_dir(&examples).expect("examples/") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("mcpolicy") {
            continue;
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).expect("stem");
        let policy = format!("examples/{stem}.mcpolicy");
        let tests = format!("examples/{stem}.tests.toml");
        assert!(
            repo_root().join(&tests).is_file(),
            "{policy} has no {tests}"
        );
        let run = mcpc(&["test", &policy, &tests, "--threshold", "100"]);
        assert_eq!(run.code, 0, "{policy}:\n{}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains(" 0 failed"), "{}", run.stdout);
        tested += 1;
    }
    assert_eq!(tested, 4);
}

#[test]
fn a_compiled_table_runs_without_coverage() {
    let dir = tempfile::tempdir().expect("temp dir");
    let table = dir.path().join("policy.json");
    let table = table.to_str().expect("utf-8 path");
    let compiled = mcpc(&["compile", POLICY, "-o", table]);
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    let run = mcpc(&["test", table, PASSING]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let coverage = mcpc(&["test", table, PASSING, "--coverage"]);
    assert_eq!(coverage.code, 2);
    assert!(coverage.stderr.contains("coverage needs the policy source"));
}

#[test]
fn usage_and_policy_errors() {
    let missing = mcpc(&["test", POLICY, "tests/cases/test/no-such.tests.toml"]);
    assert_eq!(missing.code, 2);
    assert!(
        missing.stderr.contains("no-such.tests.toml: cannot read"),
        "{}",
        missing.stderr
    );

    let no_tests = mcpc(&["test", POLICY]);
    assert_eq!(no_tests.code, 2);

    let broken = mcpc(&["test", "examples/invalid/E0101.mcpolicy", PASSING]);
    assert_eq!(
        broken.code, 1,
        "a policy with errors is a finding, as in `mcpc eval`"
    );
    assert_eq!(broken.stdout, "");
}
