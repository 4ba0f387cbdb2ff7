//! Directories as input, and `fmt --diff`, through the real binary:
//! `check`, `fmt` and `test` take a directory for every `*.mcpolicy` under
//! it (recursively, sorted, hidden directories and `target/` skipped;
//! `test` pairs each policy with its `NAME.tests.toml`).

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn mcpc(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("mcpc runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const TIDY: &str = "mcpolicy 1\n\ndefaults {\n  sampling on\n}\n";
const MESSY: &str = "mcpolicy 1\ndefaults {   sampling on\n}\n";
const WARNED: &str = "mcpolicy 1\n\nreason acme.unused { retryable false }\n";

/// A tree: two policies to find (one messy), and policies that must be
/// skipped (hidden directory, `target/`, not `.mcpolicy`).
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = [
        ("p/b.mcpolicy", MESSY),
        ("p/a/a.mcpolicy", WARNED),
        ("p/.git/skip.mcpolicy", MESSY),
        ("p/target/skip.mcpolicy", MESSY),
        ("p/a/notes.txt", MESSY),
    ];
    for (path, content) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, content).expect("write");
    }
    dir
}

#[test]
fn check_a_directory_reads_its_policies_in_order() {
    let dir = tree();
    let out = mcpc(&["check", "--format", "json", "p"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let files: Vec<&str> = report["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter_map(|d| d["file"].as_str())
        .collect();
    assert_eq!(files, ["p/a/a.mcpolicy"]);
    let human = mcpc(&["check", "p"], dir.path());
    assert!(
        text(&human.stderr).contains("0 errors, 1 warning in 2 files"),
        "{}",
        text(&human.stderr)
    );
    let denied = mcpc(&["check", "--deny-warnings", "p"], dir.path());
    assert_eq!(denied.status.code(), Some(1));
    let empty = tempfile::tempdir().expect("temp dir");
    let none = mcpc(&["check", "."], empty.path());
    assert_eq!(none.status.code(), Some(2));
    assert!(text(&none.stderr).contains("no .mcpolicy files"));
}

#[test]
fn fmt_diff_prints_a_unified_diff_and_writes_nothing() {
    let dir = tree();
    let out = mcpc(&["fmt", "--diff", "p"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout),
        "--- a/p/b.mcpolicy\n+++ b/p/b.mcpolicy\n@@ -1,3 +1,5 @@\n mcpolicy 1\n-defaults {   sampling on\n+\n+defaults {\n+  sampling on\n }\n"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("p/b.mcpolicy")).expect("read"),
        MESSY
    );

    // Formatting the directory writes the messy file only; then --diff is quiet.
    let fmt = mcpc(&["fmt", "p"], dir.path());
    assert_eq!(fmt.status.code(), Some(0), "{}", text(&fmt.stderr));
    assert_eq!(text(&fmt.stderr), "formatted p/b.mcpolicy\n");
    assert_eq!(
        fs::read_to_string(dir.path().join("p/b.mcpolicy")).expect("read"),
        TIDY
    );
    for skipped in [
        "p/.git/skip.mcpolicy",
        "p/target/skip.mcpolicy",
        "p/a/notes.txt",
    ] {
        assert_eq!(
            fs::read_to_string(dir.path().join(skipped)).expect("read"),
            MESSY
        );
    }
    let quiet = mcpc(&["fmt", "--diff", "p"], dir.path());
    assert_eq!(quiet.status.code(), Some(0));
    assert_eq!(text(&quiet.stdout), "");
    let check = mcpc(&["fmt", "--check", "p"], dir.path());
    assert_eq!(check.status.code(), Some(0));
}

#[test]
fn fmt_diff_of_standard_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["fmt", "--diff", "-"])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(MESSY.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).starts_with("--- a/<stdin>\n+++ b/<stdin>\n"));
}

#[test]
fn test_a_directory_pairs_each_policy_with_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = mcpc(&["test", "examples", "--format", "json"], &root);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let policies: Vec<&str> = report["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .filter_map(|p| p["policy"].as_str())
        .collect();
    assert_eq!(
        policies,
        [
            "examples/ci-agent.mcpolicy",
            "examples/cost-capped.mcpolicy",
            "examples/personal-laptop.mcpolicy",
            "examples/team-gateway.mcpolicy"
        ]
    );
    assert_eq!(report["failed"], 0);
    assert!(report["passed"].as_u64().expect("passed") > 100);

    // A policy alone runs the tests beside it.
    let alone = mcpc(&["test", "examples/ci-agent.mcpolicy"], &root);
    assert_eq!(alone.status.code(), Some(0));
    assert!(text(&alone.stdout).starts_with("examples/ci-agent.tests.toml\n"));
    // A directory with test files given is a usage error.
    let both = mcpc(&["test", "examples", "examples/ci-agent.tests.toml"], &root);
    assert_eq!(both.status.code(), Some(2));
}

#[test]
fn test_a_directory_fails_when_one_policy_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("ok.mcpolicy"),
        "mcpolicy 1\ndefaults { consent never }\n",
    )
    .expect("write");
    fs::write(
        dir.path().join("ok.tests.toml"),
        "[[case]]\nname = \"allowed\"\nserver = \"x\"\nprompt = \"hi\"\nrequest = { maxTokens = 100 }\nexpect = { outcome = \"allow\" }\n",
    )
    .expect("write");
    fs::write(
        dir.path().join("off.mcpolicy"),
        "mcpolicy 1\ndefaults { sampling off }\n",
    )
    .expect("write");
    fs::write(
        dir.path().join("off.tests.toml"),
        "[[case]]\nname = \"wrongly expected\"\nserver = \"x\"\nprompt = \"hi\"\nrequest = { maxTokens = 100 }\nexpect = { outcome = \"allow\" }\n",
    )
    .expect("write");
    let out = mcpc(&["test", "."], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("== ./off.mcpolicy"), "{stdout}");
    assert!(
        stdout.contains("total: 1 passed, 1 failed (2 policies)"),
        "{stdout}"
    );
}
