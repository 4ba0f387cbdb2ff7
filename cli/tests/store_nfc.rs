//! `mcpc store ls/forget/budgets --server ID` find a server however its id
//! is normalised: the engine keys the store by the id in NFC, and the filter
//! is put in NFC the same way, so `cafe\u{301}` (decomposed, as macOS file
//! names spell it) and `caf\u{e9}` name one server. Runs the real binary.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use serde_json::Value;

const POLICY: &str = "mcpolicy 1\nprotocol 2025-11-25\ndefaults {\n  max_messages 1\n  budget 5 requests per day\n  consent never\n}\n";

const COMPOSED: &str = "caf\u{e9}";
const DECOMPOSED: &str = "cafe\u{301}";

fn mcpc(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A store holding one denial (too many messages) and one allow, both
/// decided for the server as `spelled`.
fn store_for(dir: &std::path::Path, spelled: &str) -> (String, String) {
    let policy = dir.join("policy.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let store = dir.join("store.sqlite3");
    let message = serde_json::json!({"role": "user", "content": {"type": "text", "text": "a"}});
    for (i, count) in [(0, 2), (1, 1)] {
        let request = dir.join(format!("r{i}.json"));
        let body = serde_json::json!({"messages": vec![message.clone(); count], "maxTokens": 10});
        std::fs::write(&request, body.to_string()).unwrap();
        let now = format!("2026-03-10T12:00:0{i}Z");
        let (code, _, stderr) = mcpc(&[
            "eval",
            policy.to_str().unwrap(),
            "--server",
            spelled,
            "--request",
            request.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--now",
            &now,
        ]);
        assert!(code <= 1, "{stderr}");
    }
    (store.display().to_string(), policy.display().to_string())
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let (code, stdout, stderr) = mcpc(&all);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn server_filters_are_compared_in_nfc() {
    for (stored, typed) in [(COMPOSED, DECOMPOSED), (DECOMPOSED, COMPOSED)] {
        let dir = tempfile::tempdir().unwrap();
        let (store, policy) = store_for(dir.path(), stored);
        let at = ["--now", "2026-03-10T12:00:10Z"];
        let mut ls = vec!["store", "ls", "--store", &store, "--server", typed];
        ls.extend(at);
        let listed = json(&ls);
        let decisions = listed["decisions"].as_array().unwrap();
        assert_eq!(decisions.len(), 1, "{stored:?} by {typed:?}: {listed}");
        assert_eq!(decisions[0]["server"], COMPOSED);

        let mut budgets = vec![
            "store", "budgets", "--store", &store, "--policy", &policy, "--server", typed,
        ];
        budgets.extend(at);
        let spent = json(&budgets);
        assert_eq!(spent["servers"][0]["server"], COMPOSED, "{spent}");
        assert_eq!(spent["servers"][0]["limits"][0]["spent"], 1, "{spent}");

        let (code, stdout, stderr) =
            mcpc(&["store", "forget", "--store", &store, "--server", typed]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("removed 1 stored decision;"), "{stdout}");
        let mut ls_all = vec!["store", "ls", "--store", &store];
        ls_all.extend(at);
        assert!(json(&ls_all)["decisions"].as_array().unwrap().is_empty());
    }
}
