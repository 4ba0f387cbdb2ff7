//! The compiled table: deterministic bytes, digests that move with exactly
//! one server's block, verification on load, and the JSON Schema.

use std::path::{Path, PathBuf};
use std::process::Command;

use mcpolicy_compiler::db::{Database, SourceText, lower_file};
use mcpolicy_runtime::table::{Table, TableError};

const POLICY: &str = r#"mcpolicy 1
error_code -32010
identity systemPrompt, messages, includeContext, modelPreferences

reason policy.rate_limit { retryable true; ttl 60s }
reason acme.hourly { retryable false; ttl until_reset }

defaults {
  max_context thisServer
  max_input 64 KiB
  max_messages 50
  max_tokens 4096
  rate 30 per 1m
  deadline 60s
  consent first
}

server "release-notes" {
  budget 50 requests per day
  budget 200k tokens per 24h
  budget 10 requests per hour as acme.hourly
  max_context none
}

server "github-*" {
  sampling off
}
"#;

fn compile(text: &str) -> Table {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    lower_file(&db, source)
        .clone()
        .expect("the policy compiles")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn same_source_same_bytes_and_layout_does_not_matter() {
    let first = compile(POLICY).to_json();
    assert_eq!(first, compile(POLICY).to_json());
    let relaid = POLICY
        .replace("\n  ", "\n      ")
        .replace("}\n", "}  # end\n\n");
    assert_eq!(first, compile(&relaid).to_json());
}

#[test]
fn editing_one_server_changes_only_its_digest() {
    let before = compile(POLICY);
    let after =
        compile(&POLICY.replace("budget 50 requests per day", "budget 60 requests per day"));
    assert_ne!(before.servers[0].digest, after.servers[0].digest);
    assert_eq!(before.servers[1].digest, after.servers[1].digest);
    assert_eq!(before.fallback.digest, after.fallback.digest);

    // A default changes every server that inherits it.
    let after = compile(&POLICY.replace("deadline 60s", "deadline 90s"));
    assert!(
        before
            .servers
            .iter()
            .zip(&after.servers)
            .all(|(b, a)| b.digest != a.digest)
    );

    // Redeclaring a reason changes the servers that can produce it, only.
    let after = compile(&POLICY.replace(
        "reason acme.hourly { retryable false; ttl until_reset }",
        "reason acme.hourly { retryable false; ttl until_reset; message \"slow down\" }",
    ));
    assert_ne!(before.servers[0].digest, after.servers[0].digest);
    assert_eq!(before.servers[1].digest, after.servers[1].digest);
}

#[test]
fn load_verifies_and_fails_closed() {
    let json = compile(POLICY).to_json();
    let loaded = Table::from_json(json.as_bytes()).expect("own output loads");
    assert_eq!(loaded.to_json(), json);

    let tampered = json.replacen("\"max\": 50", "\"max\": 5000", 1);
    assert_ne!(tampered, json);
    assert!(matches!(
        Table::from_json(tampered.as_bytes()),
        Err(TableError::DigestMismatch { .. })
    ));

    let future = json.replace("mcpolicy-table/1", "mcpolicy-table/2");
    assert!(matches!(
        Table::from_json(future.as_bytes()),
        Err(TableError::UnknownFormat { .. })
    ));

    let extra = json.replacen("{\n", "{\n  \"surprise\": true,\n", 1);
    assert!(matches!(
        Table::from_json(extra.as_bytes()),
        Err(TableError::Malformed(_))
    ));

    for garbage in [&b""[..], b"null", b"[]", b"{", b"\xff\xfe"] {
        assert!(Table::from_json(garbage).is_err());
    }
}

/// The Python interpreter to validate with: `MCPOLICY_PYTHON` (CI sets it to
/// a virtual environment with `jsonschema`), else `python3`.
fn python_with(module: &str) -> Option<String> {
    let python = std::env::var("MCPOLICY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var_os("MCPOLICY_REQUIRE_PYTHON").is_none(),
        "{python} cannot import {module}, and MCPOLICY_REQUIRE_PYTHON is set"
    );
    eprintln!("skipping: {python} cannot import {module}");
    None
}

#[test]
fn every_compiled_example_matches_the_json_schema() {
    let Some(python) = python_with("jsonschema") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut tables = vec![("design".to_owned(), compile(POLICY))];
    let mut examples: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .expect("examples/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "mcpolicy"))
        .collect();
    examples.sort();
    for path in examples {
        let text = std::fs::read_to_string(&path).expect("example");
        tables.push((path.display().to_string(), compile(&text)));
    }
    let schema = repo().join("runtime/schema/mcpolicy-table-1.schema.json");
    for (name, table) in tables {
        let file = dir.path().join("table.json");
        std::fs::write(&file, table.to_json()).expect("write");
        let script = "import json,sys,jsonschema\n\
                      schema=json.load(open(sys.argv[1]))\n\
                      jsonschema.Draft202012Validator.check_schema(schema)\n\
                      jsonschema.Draft202012Validator(schema).validate(json.load(open(sys.argv[2])))";
        let out = Command::new(&python)
            .args(["-c", script])
            .arg(&schema)
            .arg(&file)
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The adapters' contract (`tests/cases/adapters/scenarios.json`) runs on a
/// committed table, since the Python and Node packages have no compiler: it
/// must be exactly what `mcpc compile` makes of the policy beside it.
#[test]
fn the_adapter_contract_table_is_its_policy_compiled() {
    let dir = repo().join("tests/cases/adapters");
    let source = std::fs::read_to_string(dir.join("policy.mcpolicy")).expect("the policy");
    let committed = std::fs::read_to_string(dir.join("policy.table.json")).expect("the table");
    let compiled = compile(&source).to_json();
    assert!(
        committed.trim_end() == compiled.trim_end(),
        "tests/cases/adapters/policy.table.json is stale: run\n  \
         mcpc compile tests/cases/adapters/policy.mcpolicy -o tests/cases/adapters/policy.table.json"
    );
}
