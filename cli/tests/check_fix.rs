//! `mcpc check --fix` through the real binary: the certain fixes are
//! applied and the file written, what remains is reported (in every
//! format), a second run changes nothing, standard input is refused, and a
//! file with several hard links is never written (as `mcpc fmt`).

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

const BROKEN: &str = "defaults {\n  max_token 5\n  max_input 65536\n  samplng on\n}\nreason user.denied { code -32010 }\nserver \"x\" { tools off as acme.nope }\n";
// Written in `mcpc fmt`'s layout (docs/spec/language.md, "Fixes").
const FIXED: &str = "mcpolicy 1\n\ndefaults {\n  max_tokens 5\n  max_input 65536 B\n  sampling on\n}\n\nreason user.denied { code -1 }\n\nserver \"x\" {\n  tools off as acme.nope\n}\n";

#[test]
fn fixes_are_applied_and_what_remains_is_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("p.mcpolicy"), BROKEN).expect("write");
    let out = mcpc(&["check", "--fix", "p.mcpolicy"], dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        fs::read_to_string(dir.path().join("p.mcpolicy")).expect("read"),
        FIXED
    );
    assert!(
        stderr.contains("fixed p.mcpolicy: 5 fixes applied"),
        "{stderr}"
    );
    // What remains: the undeclared reason, which has no certain fix.
    assert!(stderr.contains("E0401"), "{stderr}");
    assert!(!stderr.contains("E0101"), "{stderr}");

    // Written formatted: `fmt --check` passes right after `check --fix`.
    let fmt = mcpc(&["fmt", "--check", "p.mcpolicy"], dir.path());
    assert_eq!(
        fmt.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&fmt.stdout)
    );

    // Twice is once: nothing more to fix, the file unchanged.
    let again = mcpc(
        &["check", "--fix", "--format", "json", "p.mcpolicy"],
        dir.path(),
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&again.stderr).contains("fixed"));
    let report: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    let codes: Vec<&str> = report["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter_map(|d| d["code"].as_str())
        .collect();
    assert_eq!(codes, ["E0401"]);
    assert_eq!(
        fs::read_to_string(dir.path().join("p.mcpolicy")).expect("read"),
        FIXED
    );
}

#[test]
fn a_clean_file_is_not_written_and_exits_0() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("p.mcpolicy");
    fs::write(&path, "mcpolicy 1\ndefaults { sampling on }\n").expect("write");
    let before = fs::metadata(&path)
        .expect("meta")
        .modified()
        .expect("mtime");
    let out = mcpc(&["check", "--fix", "p.mcpolicy"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        fs::metadata(&path)
            .expect("meta")
            .modified()
            .expect("mtime"),
        before
    );
}

#[test]
fn standard_input_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mcpc(&["check", "--fix", "-"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot fix standard input"));
}

#[cfg(unix)]
#[test]
fn a_hard_linked_file_is_never_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("p.mcpolicy");
    fs::write(&path, BROKEN).expect("write");
    fs::hard_link(&path, dir.path().join("q.mcpolicy")).expect("link");
    let out = mcpc(&["check", "--fix", "p.mcpolicy"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(fs::read_to_string(&path).expect("read"), BROKEN);
}
