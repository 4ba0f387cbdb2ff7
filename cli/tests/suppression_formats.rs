//! Inline suppressions give the same findings in every `mcpc check` format
//! (they are applied in the compiler's check, which every format renders).

use std::path::Path;
use std::process::Command;

const CASE: &str = "tests/cases/check/suppression.mcpolicy";

fn check(format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["check", "--format", format, CASE])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("NO_COLOR", "1")
        .output()
        .expect("mcpc runs");
    assert_eq!(out.status.code(), Some(1), "{format}");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `(code, line)` of every finding, sorted.
fn sorted(mut v: Vec<(String, u64)>) -> Vec<(String, u64)> {
    v.sort();
    v
}

#[test]
fn every_format_reports_the_same_findings() {
    let json: serde_json::Value = serde_json::from_str(&check("json")).expect("JSON");
    let from_json = sorted(
        json["diagnostics"]
            .as_array()
            .expect("diagnostics")
            .iter()
            .map(|d| {
                (
                    d["code"].as_str().expect("code").to_owned(),
                    d["line"].as_u64().expect("line"),
                )
            })
            .collect(),
    );
    let sarif: serde_json::Value = serde_json::from_str(&check("sarif")).expect("SARIF");
    let from_sarif = sorted(
        sarif["runs"][0]["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| {
                (
                    r["ruleId"].as_str().expect("rule").to_owned(),
                    r["locations"][0]["physicalLocation"]["region"]["startLine"]
                        .as_u64()
                        .expect("line"),
                )
            })
            .collect(),
    );
    let from_github = sorted(
        check("github")
            .lines()
            .filter_map(|l| {
                let line = l.split("line=").nth(1)?.split(',').next()?.parse().ok()?;
                let code = l.split("title=").nth(1)?.split(' ').next()?.to_owned();
                Some((code, line))
            })
            .collect(),
    );
    let human = check("human");
    assert_eq!(from_json, from_sarif);
    assert_eq!(from_json, from_github);
    for (code, _) in &from_json {
        assert!(human.contains(code.as_str()));
    }
    // The suppressed ones are absent everywhere: line 11's W0305.
    assert!(!from_json.iter().any(|(c, l)| c == "W0305" && *l == 11));
    assert!(from_json.iter().any(|(c, _)| c == "W0701"));
}
