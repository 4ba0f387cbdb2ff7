//! `mcpc audit` on the audit file of a real proxy run (`mcpc proxy -- cat`
//! behind three server ids): the report per server, `--since`/`--until`,
//! JSON and HTML, malformed lines, and the audit lines against their JSON
//! Schema. Each test runs the real binaries.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod audit_support;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;

use audit_support::{mcpc, python_with, real_run};
use serde_json::Value;

/// One real run shared by the tests of this file (the proxies take a few
/// seconds to start).
fn run_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        real_run(dir.path());
        dir
    })
    .path()
}

fn audit(args: &[&str]) -> Output {
    mcpc().arg("audit").args(args).output().unwrap()
}

fn json_report(args: &[&str]) -> Value {
    let file = run_dir().join("audit.jsonl");
    let mut all = vec![file.to_str().unwrap(), "--format", "json"];
    all.extend_from_slice(args);
    let out = audit(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn server<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["server"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report:#}"))
}

#[test]
fn the_report_shows_outcomes_loops_consent_and_trims_per_server() {
    let report = json_report(&[]);
    assert!(report["malformed"].as_array().unwrap().is_empty());
    // The greedy server leads: trimmed on 22 of 23 calls.
    assert_eq!(report["servers"][0]["server"], "greedy");
    let greedy = server(&report, "greedy");
    assert_eq!(greedy["decisions"], 23);
    assert_eq!(greedy["outcomes"]["trim"], 22);
    assert_eq!(greedy["outcomes"]["allow"], 1);
    assert_eq!(greedy["trimmed_percent"], 95.7);
    assert_eq!(greedy["widest_max_tokens"]["requested"], 100_021);
    assert_eq!(greedy["widest_max_tokens"]["applied"], 500);
    assert_eq!(greedy["trims"].as_array().unwrap().len(), 22);
    assert_eq!(greedy["gaps"]["context"][0]["requested"], "allServers");
    assert_eq!(greedy["gaps"]["context"][0]["applied"], "thisServer");
    assert_eq!(greedy["gaps"]["context"][0]["times"], 22);
    assert_eq!(
        greedy["gaps"]["model"][0]["requested"],
        serde_json::json!(["gpt-4o", "claude-3"])
    );
    assert_eq!(
        greedy["gaps"]["model"][0]["applied"],
        serde_json::json!(["claude-3"])
    );
    let reasons: Vec<&str> = greedy["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert!(reasons.contains(&"policy.max_tokens"), "{reasons:?}");
    // 20 trims of the first 20 calls: the trim alert, with its gap.
    let alerts = greedy["trim_alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0]["calls"], 20);
    assert_eq!(alerts[0]["gap"]["maxTokens"]["requested"], 100_019);

    let looper = server(&report, "looper");
    assert_eq!(looper["outcomes"]["deny"], 6);
    assert_eq!(looper["replayed"], 5);
    let loops = looper["retry_loops"].as_array().unwrap();
    assert_eq!(loops[0]["alerts"], 1);
    assert_eq!(loops[0]["max_count"], 4);
    assert_eq!(loops[0]["represented"], 5);
    assert_eq!(looper["reasons"][0][0], "policy.sampling_disabled");

    let asker = server(&report, "asker");
    assert_eq!(asker["consent"]["prompts"], 2);
    assert_eq!(asker["consent"]["approved"], 1);
    assert_eq!(asker["consent"]["refused"], 1);

    // The proxy's log carries the warnings.
    let log = std::fs::read_to_string(run_dir().join("proxy.log")).unwrap();
    assert!(log.contains("warning: retry loop"), "{log}");
    assert!(log.contains("were trimmed"), "{log}");
}

#[test]
fn the_human_report_flags_the_server_that_asks_wider() {
    let file = run_dir().join("audit.jsonl");
    let out = audit(&[file.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("! greedy"))
        .unwrap_or_else(|| panic!("no flagged greedy row in\n{text}"));
    assert!(row.contains("95.7%"), "{row}");
    assert!(row.contains("100021→500"), "{row}");
    assert!(text.contains("! asks wider than it may: 95.7% of 23 decisions trimmed"));
    assert!(text.contains("retry loop: looper:"), "{text}");
    assert!(
        text.contains("consent: 2 prompts, 1 approved, 1 refused"),
        "{text}"
    );
    assert!(text.contains("context allServers→thisServer ×22"), "{text}");
    assert!(text.contains("trim alert at "), "{text}");
}

#[test]
fn since_and_until_select_lines_by_time() {
    let all = json_report(&[]);
    let lines: Vec<Value> = std::fs::read_to_string(run_dir().join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // From the first `greedy` line on, only greedy remains.
    let start = lines.iter().find(|l| l["server"] == "greedy").unwrap()["time"]
        .as_str()
        .unwrap()
        .to_owned();
    let later = json_report(&["--since", &start]);
    let names: Vec<&str> = later["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["server"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["greedy"]);
    assert_eq!(
        later["counted"].as_u64().unwrap() + later["outside"].as_u64().unwrap(),
        all["counted"].as_u64().unwrap()
    );
    let earlier = json_report(&["--until", &start]);
    assert!(
        earlier["servers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["server"] != "greedy")
    );
    assert_eq!(
        earlier["counted"].as_u64().unwrap() + later["counted"].as_u64().unwrap(),
        all["counted"].as_u64().unwrap()
    );
    let bad = audit(&[
        run_dir().join("audit.jsonl").to_str().unwrap(),
        "--since",
        "yesterday",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not an RFC 3339 instant"));
}

#[test]
fn malformed_lines_are_counted_with_their_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(run_dir().join("audit.jsonl")).unwrap();
    let mut lines: Vec<&str> = original.lines().collect();
    lines.insert(2, "{not json");
    lines.insert(
        5,
        r#"{"time":"later","event":"decision","server":"x","outcome":"allow"}"#,
    );
    lines.insert(7, "[1,2]");
    let file = dir.path().join("broken.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n\n").unwrap();
    let report = {
        let out = audit(&[file.to_str().unwrap(), "--format", "json"]);
        assert!(out.status.success());
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let malformed: Vec<(u64, String)> = report["malformed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["line"].as_u64().unwrap(),
                m["error"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(malformed.len(), 3, "{malformed:?}");
    assert_eq!(malformed[0].0, 3);
    assert!(malformed[0].1.starts_with("not JSON"));
    assert_eq!(malformed[1].0, 6);
    assert!(malformed[1].1.contains("not RFC 3339"));
    assert_eq!(malformed[2].0, 8);
    assert_eq!(report["counted"], json_report(&[])["counted"]);
    let human = audit(&[file.to_str().unwrap()]);
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(
        text.contains(&format!("malformed {}:3: not JSON", file.display())),
        "{text}"
    );
    // A missing file is an error; an empty one is an empty report.
    let missing = audit(&[dir.path().join("nope.jsonl").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = audit(&[empty.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no decisions"));
}

#[test]
fn the_html_report_is_one_self_contained_page() {
    let file = run_dir().join("audit.jsonl");
    let out = audit(&[file.to_str().unwrap(), "--format", "html"]);
    assert!(out.status.success());
    let html = String::from_utf8(out.stdout).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for id in ["chart-0", "chart-1", "chart-2", "audit-data"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
    // Nothing is fetched: no external script, style, image or font.
    for needle in ["src=", "href=", "@import", "url(", "http://", "https://"] {
        let hits: Vec<&str> = html
            .match_indices(needle)
            .map(|(i, _)| &html[i.saturating_sub(20)..(i + 40).min(html.len())])
            // The SVG namespace is an identifier, not a fetch.
            .filter(|s| !s.contains("www.w3.org/2000/svg"))
            .collect();
        assert!(hits.is_empty(), "{needle}: {hits:?}");
    }
    // A server id cannot break out of the embedded data or the markup.
    let dir = tempfile::tempdir().unwrap();
    let evil = dir.path().join("evil.jsonl");
    std::fs::write(
        &evil,
        r#"{"time":"2026-03-10T12:00:00.000Z","event":"decision","via":"request","server":"</script><img src=x onerror=alert(1)>","id":1,"identity":null,"outcome":"allow","reason":null,"replayed":false,"requested":null,"applied":null}"#,
    )
    .unwrap();
    let out = audit(&[evil.to_str().unwrap(), "--format", "html"]);
    let html = String::from_utf8(out.stdout).unwrap();
    assert!(!html.contains("<img"), "{html}");
    assert_eq!(html.matches("</script>").count(), 2);
}

#[test]
fn real_audit_lines_match_the_json_schema() {
    let Some(python) = python_with("jsonschema") else {
        return;
    };
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../runtime/schema/mcpolicy-audit-1.schema.json");
    let file = run_dir().join("audit.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let kinds: std::collections::BTreeSet<String> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            format!("{}/{}/{}", v["event"], v["outcome"], v["alert"]["kind"])
        })
        .collect();
    assert!(kinds.len() >= 7, "{kinds:?}");
    let script = "import json,sys,jsonschema\n\
                  schema=json.load(open(sys.argv[1]))\n\
                  jsonschema.Draft202012Validator.check_schema(schema)\n\
                  v=jsonschema.Draft202012Validator(schema)\n\
                  for n,line in enumerate(open(sys.argv[2]),1):\n\
                  \x20   v.validate(json.loads(line))\n";
    let out = Command::new(&python)
        .args(["-c", script])
        .arg(&schema)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Server-chosen text (a server id and model hint names carrying ANSI
/// escapes, a newline and bidi controls) reaches the human report as
/// escapes: no control character, no forged line, no reordering.
#[test]
fn the_human_report_shows_server_text_inert() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(run_dir().join("audit.jsonl")).unwrap();
    let hostile_hint = "gpt\u{1b}[2J\u{1b}]8;;http://x\u{7}\u{202e}o4\nserver \"forged\"";
    let hostile_server = "greedy\u{1b}[31m\u{2066}\r\n  ! forged";
    let hint = serde_json::to_string(hostile_hint).unwrap();
    let server = serde_json::to_string(hostile_server).unwrap();
    let edited = original
        .replace("\"gpt-4o\"", &hint)
        .replace("\"greedy\"", &server);
    assert_ne!(edited, original);
    let file = dir.path().join("hostile.jsonl");
    std::fs::write(&file, edited).unwrap();
    let out = audit(&[file.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let acts = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    assert!(!text.chars().any(acts), "{text:?}");
    assert!(
        !text.lines().any(|l| l.starts_with("server \"forged\"")),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.starts_with("  ! forged")), "{text}");
    assert!(text.contains("gpt\\u{001b}[2J"), "{text}");
}

/// A file of which not one line is an audit line (the wrong file, most
/// likely) exits 1, after the report listing every line as malformed; one
/// good line among bad ones is a report, exit 0; an empty file reads
/// nothing and is not an error.
#[test]
fn a_file_without_one_audit_line_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "not json\n{\"event\":\"decision\"}\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("audit")
        .arg(&bad)
        .output()
        .expect("mcpc runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("2 malformed"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("none of the 2 lines read is an audit line"),
        "{stderr}"
    );
    let good = std::fs::read_to_string(run_dir().join("audit.jsonl")).expect("audit");
    let first = good.lines().next().expect("a line");
    let mixed = dir.path().join("mixed.jsonl");
    std::fs::write(&mixed, format!("not json\n{first}\n")).expect("write");
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").expect("write");
    for file in [&mixed, &empty] {
        let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
            .arg("audit")
            .arg(file)
            .output()
            .expect("mcpc runs");
        assert_eq!(out.status.code(), Some(0), "{file:?}: {out:?}");
    }
}
