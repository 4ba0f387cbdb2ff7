//! `mcpc diff OLD NEW` through the real binary.
//!
//! Properties, over random pairs of generated policies: diff reports a
//! digest change for a pattern exactly when the two compiled tables'
//! effective blocks for it differ in digest; its added and removed blocks
//! are the patterns only one side has; it exits 1 exactly when it says
//! something is invalidated, and always when a digest changes or a block is
//! removed. A policy compared with itself, or with its `mcpc fmt` output, is
//! an empty diff with exit code 0. Fast by default; `PROPTEST_CASES` sets a
//! long run. The examples' human output is snapshotted.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mcpolicy_compiler::{check, format, lower, parse};
use mcpolicy_runtime::table::Table;
use proptest::prelude::*;
use serde_json::Value;

fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

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

fn diff_json(old: &Path, new: &Path) -> (Value, Option<i32>) {
    let run = mcpc(&[
        "diff",
        old.to_str().expect("utf-8 path"),
        new.to_str().expect("utf-8 path"),
        "--format",
        "json",
    ]);
    let doc = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", run.stdout, run.stderr));
    (doc, run.code)
}

/// The table the compiler lowers `text` to (the test's own compilation,
/// independent of the binary's).
fn table(text: &str) -> Table {
    let analysis = check::check(&parse::parse(text).file);
    let errors: Vec<_> = analysis
        .diagnostics
        .iter()
        .filter(|d| d.severity() == mcpolicy_compiler::codes::Severity::Error)
        .collect();
    assert!(errors.is_empty(), "{text}\n{errors:?}");
    lower::lower(&analysis.model)
}

/// Pattern → digest of its first block, and `defaults` → the fallback's.
fn digests(table: &Table) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for entry in &table.servers {
        map.entry(format!("server \"{}\"", entry.pattern))
            .or_insert_with(|| entry.digest.clone());
    }
    map.insert("defaults".to_owned(), table.fallback.digest.clone());
    map
}

fn names(doc: &Value, key: &str) -> Vec<String> {
    doc[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {doc}"))
        .iter()
        .map(|v| v["block"].as_str().expect("block").to_owned())
        .collect()
}

fn is_empty(doc: &Value) -> bool {
    ["changed", "added", "removed", "reordered", "policy"]
        .iter()
        .all(|k| doc[k].as_array().is_some_and(Vec::is_empty))
        && doc["defaults"].as_array().is_some_and(Vec::is_empty)
        && doc["invalidates"] == Value::Bool(false)
}

// ---- generated policies

/// Exact ids first, then globs no earlier pattern covers, `*` last: every
/// block is reachable, so the policy checks.
const PATTERNS: &[&str] = &["a-1", "a-2", "b-1", "c", "a-*", "b-*", "*"];

fn statement() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("tools off".to_owned()),
        prop_oneof![Just("none"), Just("thisServer"), Just("allServers")]
            .prop_map(|w| format!("max_context {w}")),
        (1u64..4).prop_map(|n| format!("max_input {} KiB", n * 32)),
        (1u64..4).prop_map(|n| format!("max_messages {}", n * 10)),
        (1u64..4).prop_map(|n| format!("max_tokens {}", n * 1000)),
        (1u64..4).prop_map(|n| format!("rate {} per 1m", n * 10)),
        (1u64..4).prop_map(|n| format!("budget {} requests per day", n * 50)),
        (1u64..4).prop_map(|n| format!("budget {}k tokens per day", n * 100)),
        (1u64..4).prop_map(|n| format!("deadline {}s", n * 20)),
        prop_oneof![Just("always"), Just("first"), Just("never")]
            .prop_map(|w| format!("consent {w}")),
        Just("models \"claude-*\"".to_owned()),
    ]
}

/// A block's statements: at most one of each keyword (budgets by metric).
fn block() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        1 => Just(vec!["sampling off".to_owned()]),
        6 => prop::collection::vec(statement(), 0..5).prop_map(|stmts| {
            let mut seen = Vec::new();
            stmts
                .into_iter()
                .filter(|s| {
                    let words: Vec<&str> = s.split_whitespace().collect();
                    // A budget's key is its metric (`budget N requests`).
                    let key = match words.as_slice() {
                        ["budget", _, metric, ..] => format!("budget {metric}"),
                        [keyword, ..] => (*keyword).to_owned(),
                        [] => String::new(),
                    };
                    let fresh = !seen.contains(&key);
                    seen.push(key);
                    fresh
                })
                .collect()
        }),
    ]
}

#[derive(Debug, Clone)]
struct Policy {
    rate_ttl: Option<u64>,
    defaults: Vec<String>,
    servers: Vec<(usize, Vec<String>)>,
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        prop::option::of(prop_oneof![Just(30u64), Just(60u64)]),
        block(),
        prop::collection::btree_map(0..PATTERNS.len(), block(), 0..5),
    )
        .prop_map(|(rate_ttl, defaults, servers)| Policy {
            rate_ttl,
            defaults,
            servers: servers.into_iter().collect(),
        })
}

/// An edit of `p`: change, drop or add a few things, so pairs share most
/// blocks (a pair of independent policies would differ everywhere).
fn edited(p: Policy) -> impl Strategy<Value = Policy> {
    (
        prop::bool::weighted(0.2),
        prop::option::of(prop_oneof![Just(30u64), Just(60u64)]),
        prop::bool::weighted(0.3),
        block(),
        prop::collection::vec((0..PATTERNS.len(), prop::option::of(block())), 0..3),
    )
        .prop_map(move |(edit_ttl, ttl, edit_defaults, defaults, edits)| {
            let mut q = p.clone();
            if edit_ttl {
                q.rate_ttl = ttl;
            }
            if edit_defaults {
                q.defaults = defaults;
            }
            for (pattern, block) in edits {
                q.servers.retain(|(i, _)| *i != pattern);
                if let Some(block) = block {
                    q.servers.push((pattern, block));
                }
            }
            q.servers.sort_by_key(|(i, _)| *i);
            q
        })
}

/// The policy's text, with its layout varied by `messy` (blank lines,
/// comments, indentation) so that `mcpc fmt` has something to change.
fn text(p: &Policy, messy: bool) -> String {
    let (gap, indent, note) = if messy {
        ("\n\n", "      ", "   # a comment")
    } else {
        ("\n", "  ", "")
    };
    let mut out = String::from("mcpolicy 1\n");
    if let Some(ttl) = p.rate_ttl {
        out.push_str(&format!(
            "reason policy.rate_limit {{ retryable true; ttl {ttl}s }}\n"
        ));
    }
    out.push_str(&format!("{gap}defaults {{{note}\n"));
    for s in &p.defaults {
        out.push_str(&format!("{indent}{s}\n"));
    }
    out.push_str("}\n");
    for (i, stmts) in &p.servers {
        out.push_str(&format!("{gap}server \"{}\" {{\n", PATTERNS[*i]));
        for s in stmts {
            out.push_str(&format!("{indent}{s}{note}\n"));
        }
        out.push_str("}\n");
    }
    out
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn digest_changes_are_exactly_the_tables(
        (old, new) in policy().prop_flat_map(|p| (Just(p.clone()), edited(p))),
        messy in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b) = (text(&old, false), text(&new, messy));
        let (pa, pb) = (dir.path().join("old.mcpolicy"), dir.path().join("new.mcpolicy"));
        std::fs::write(&pa, &a).expect("write");
        std::fs::write(&pb, &b).expect("write");
        let (ta, tb) = (digests(&table(&a)), digests(&table(&b)));
        let (doc, code) = diff_json(&pa, &pb);

        let mut expected_changed: Vec<String> = ta
            .iter()
            .filter(|(k, d)| tb.get(*k).is_some_and(|e| e != *d))
            .map(|(k, _)| k.clone())
            .collect();
        let mut changed = names(&doc, "changed");
        expected_changed.sort();
        changed.sort();
        prop_assert_eq!(&changed, &expected_changed, "{}\n---\n{}\n{:#}", a, b, doc);

        let mut removed = names(&doc, "removed");
        removed.sort();
        let expected_removed: Vec<String> =
            ta.keys().filter(|k| !tb.contains_key(*k)).cloned().collect();
        prop_assert_eq!(removed, expected_removed);
        let mut added = names(&doc, "added");
        added.sort();
        let expected_added: Vec<String> =
            tb.keys().filter(|k| !ta.contains_key(*k)).cloned().collect();
        prop_assert_eq!(added, expected_added);

        let invalidates = doc["invalidates"] == Value::Bool(true);
        prop_assert_eq!(code, Some(i32::from(invalidates)));
        if !changed.is_empty() || doc["removed"].as_array().is_some_and(|r| !r.is_empty()) {
            prop_assert!(invalidates);
        }
        // Every changed block names at least one statement or reason that
        // changed: a digest never changes for nothing.
        for c in doc["changed"].as_array().into_iter().flatten() {
            let said = c["statements"].as_array().is_some_and(|s| !s.is_empty())
                || c["reasons"].as_array().is_some_and(|r| !r.is_empty());
            prop_assert!(said, "{:#}", c);
        }
    }

    #[test]
    fn a_policy_against_itself_and_its_formatting_is_empty(p in policy(), messy in any::<bool>()) {
        let dir = tempfile::tempdir().expect("temp dir");
        let original = text(&p, messy);
        let formatted = format::format(&original).expect("formats");
        let (pa, pb) = (dir.path().join("a.mcpolicy"), dir.path().join("b.mcpolicy"));
        std::fs::write(&pa, &original).expect("write");
        std::fs::write(&pb, &formatted).expect("write");
        for other in [&pa, &pb] {
            let (doc, code) = diff_json(&pa, other);
            prop_assert!(is_empty(&doc), "{:#}", doc);
            prop_assert_eq!(code, Some(0));
        }
    }
}

// ---- the examples

const EXAMPLES: &[&str] = &["ci-agent", "cost-capped", "personal-laptop", "team-gateway"];

fn example(name: &str) -> String {
    format!("{}/../examples/{name}.mcpolicy", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_example_against_itself_and_its_formatting_is_empty() {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in EXAMPLES {
        let path = example(name);
        let text = std::fs::read_to_string(&path).expect("example");
        let formatted = dir.path().join(format!("{name}.mcpolicy"));
        std::fs::write(&formatted, format::format(&text).expect("formats")).expect("write");
        for other in [Path::new(&path), formatted.as_path()] {
            let (doc, code) = diff_json(Path::new(&path), other);
            assert!(is_empty(&doc), "{name}: {doc:#}");
            assert_eq!(code, Some(0), "{name}");
            let human = mcpc(&["diff", &path, other.to_str().expect("utf-8")]);
            assert_eq!(
                human.stdout,
                "no change: every effective block keeps its digest\nno stored decision is invalidated\n"
            );
            assert_eq!(human.code, Some(0));
        }
    }
}

/// An operator's edit of the team gateway: a tighter default, a budget
/// raised, a reason's ttl changed, a server added and one removed.
fn team_gateway_edit(dir: &Path) -> (String, String) {
    let old = example("team-gateway");
    let text = std::fs::read_to_string(&old).expect("example");
    let edited = text
        .replace("  max_tokens 4096\n", "  max_tokens 2048\n")
        .replace(
            "server \"jira\" {\n  budget 200 requests per day",
            "server \"jira\" {\n  budget 250 requests per day",
        )
        .replace(
            "reason team.vendor_quota { retryable false; ttl until_reset;",
            "reason team.vendor_quota { retryable false; ttl forever;",
        )
        .replace(
            "server \"linear\" {\n  budget 100 requests per day as team.vendor_quota\n}\n",
            "server \"zendesk\" {\n  budget 100 requests per day as team.vendor_quota\n}\n",
        );
    assert_ne!(text, edited);
    let new = dir.join("team-gateway.mcpolicy");
    std::fs::write(&new, edited).expect("write");
    (old, new.to_str().expect("utf-8").to_owned())
}

#[test]
fn team_gateway_edit_human() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (old, new) = team_gateway_edit(dir.path());
    let run = mcpc(&["diff", &old, &new]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn team_gateway_edit_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (old, new) = team_gateway_edit(dir.path());
    let (doc, code) = diff_json(Path::new(&old), Path::new(&new));
    assert_eq!(code, Some(1));
    assert_eq!(doc["invalidates"], Value::Bool(true));
    let jira = doc["changed"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["block"] == "server \"jira\""))
        .expect("jira changes");
    let budget = jira["statements"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["statement"] == "budget"))
        .expect("its budget");
    assert_eq!(
        budget["old"][0],
        "budget 200 requests per day as team.vendor_quota"
    );
    assert_eq!(
        budget["new"][0],
        "budget 250 requests per day as team.vendor_quota"
    );
    let reason = &jira["reasons"][0];
    assert_eq!(reason["reason"], "team.vendor_quota");
    assert_eq!(reason["properties"][0]["property"], "ttl");
    assert_eq!(reason["properties"][0]["old"], "until_reset");
    assert_eq!(reason["properties"][0]["new"], "forever");
    assert_eq!(names(&doc, "removed"), ["server \"linear\""]);
    assert_eq!(doc["removed"][0]["now_governed_by"], "server \"*\"");
    assert_eq!(names(&doc, "added"), ["server \"zendesk\""]);
    assert_eq!(doc["added"][0]["was_governed_by"], "server \"*\"");
    assert_eq!(doc["added"][0]["invalidates"], Value::Bool(true));
    let defaults = doc["defaults"].as_array().expect("defaults");
    assert_eq!(defaults.len(), 1);
    assert_eq!(defaults[0]["statement"], "max_tokens");
    let reaches: Vec<&str> = defaults[0]["reaches"]
        .as_array()
        .expect("reaches")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // The blocks that state their own max_tokens are not reached.
    assert!(reaches.contains(&"server \"jira\""));
    assert!(reaches.contains(&"defaults"));
    assert!(!reaches.contains(&"server \"github-actions\""));
    assert!(!reaches.contains(&"server \"sandbox-*\""));
}

#[test]
fn an_unchanged_digest_exits_0_even_when_the_text_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old = example("cost-capped");
    let text = std::fs::read_to_string(&old).expect("example");
    let new = dir.path().join("c.mcpolicy");
    std::fs::write(&new, format!("# reviewed\n{text}\n\n# end\n")).expect("write");
    let run = mcpc(&["diff", &old, new.to_str().expect("utf-8")]);
    assert_eq!(run.code, Some(0), "{}", run.stdout);
}

#[test]
fn a_policy_that_does_not_check_exits_2_with_its_diagnostics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.mcpolicy");
    std::fs::write(&bad, "mcpolicy 1\ndefaults {\n  max_tokens lots\n}\n").expect("write");
    let old = example("cost-capped");
    for (a, b) in [
        (old.as_str(), bad.to_str().expect("utf-8")),
        (bad.to_str().expect("utf-8"), old.as_str()),
    ] {
        let run = mcpc(&["diff", a, b]);
        assert_eq!(run.code, Some(2));
        assert!(run.stderr.contains("max_tokens"), "{}", run.stderr);
        assert!(run.stderr.contains("does not check"), "{}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let missing = mcpc(&["diff", &old, "/nonexistent/p.mcpolicy"]);
    assert_eq!(missing.code, Some(2));
}

#[test]
fn reordering_invalidates_only_when_an_id_can_change_blocks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    // Two exact ids: no id matches both, so their order changes nothing.
    let a = write(
        "a.mcpolicy",
        "mcpolicy 1\nserver \"x\" {\n  max_tokens 1\n}\nserver \"y\" {\n  max_tokens 2\n}\n",
    );
    let b = write(
        "b.mcpolicy",
        "mcpolicy 1\nserver \"y\" {\n  max_tokens 2\n}\nserver \"x\" {\n  max_tokens 1\n}\n",
    );
    let (doc, code) = diff_json(&a, &b);
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["reordered"][0]["invalidates"], Value::Bool(false));
    // Overlapping globs with different blocks: `a-1` changes blocks.
    let c = write(
        "c.mcpolicy",
        "mcpolicy 1\nserver \"a-*\" {\n  max_tokens 1\n}\nserver \"*-1\" {\n  max_tokens 2\n}\n",
    );
    let d = write(
        "d.mcpolicy",
        "mcpolicy 1\nserver \"*-1\" {\n  max_tokens 2\n}\nserver \"a-*\" {\n  max_tokens 1\n}\n",
    );
    let (doc, code) = diff_json(&c, &d);
    assert_eq!(code, Some(1), "{doc:#}");
    assert!(doc["changed"].as_array().is_some_and(Vec::is_empty));
    assert_eq!(doc["reordered"][0]["invalidates"], Value::Bool(true));
    let human = mcpc(&[
        "diff",
        c.to_str().expect("utf-8"),
        d.to_str().expect("utf-8"),
    ]);
    assert!(human.stdout.contains("swap order"), "{}", human.stdout);
}

#[test]
fn a_compiled_table_diffs_without_defaults_provenance() {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = example("team-gateway");
    let json = dir.path().join("t.json");
    let run = mcpc(&["compile", &source, "-o", json.to_str().expect("utf-8")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (doc, code) = diff_json(&json, Path::new(&source));
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["defaults"], Value::Null);
    assert!(doc["changed"].as_array().is_some_and(Vec::is_empty));
}

#[test]
fn a_changed_identity_invalidates_everything() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old = example("cost-capped");
    let text = std::fs::read_to_string(&old).expect("example");
    let new = dir.path().join("c.mcpolicy");
    let edited = text.replacen(
        "identity systemPrompt, messages, includeContext, modelPreferences",
        "identity systemPrompt, messages",
        1,
    );
    assert_ne!(edited, text);
    std::fs::write(&new, edited).expect("write");
    let (doc, code) = diff_json(Path::new(&old), &new);
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(doc["policy"][0]["setting"], "identity");
}
