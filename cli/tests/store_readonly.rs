//! `mcpc store` inspection reads and never writes (`docs/spec/store.md`,
//! "Reading a store"): `ls`, `show`, `budgets`, `stats` and `verify` work on
//! a read-only file in a read-only directory, leave every byte and mtime as
//! they were, and refuse a missing, empty or older store with a stable code
//! instead of creating or converting it. `mcpc store verify` finds a damaged
//! page that decisions never read.
//!
//! Permissions bind nobody when the tests run as root (as CI does): then the
//! commands that must be refused run as the unprivileged user `nobody`,
//! through util-linux's `setpriv`.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

const POLICY: &str = r#"mcpolicy 1
defaults {
  budget 5 requests per day
  consent never
}
server "git" { consent first }
"#;

const REQUEST: &str =
    r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10}"#;

/// Whether this process is root (permission bits do not bind it).
fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// `mcpc ARGS…` as a user the permission bits bind: `nobody` when root.
/// Exit code, stdout, stderr.
fn mcpc_as_user(args: &[&str]) -> (i32, String, String) {
    let mut command = if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            env!("CARGO_BIN_EXE_mcpc"),
        ]);
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_mcpc"))
    };
    let output = command.args(args).env("NO_COLOR", "1").output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (
        output.status.code().unwrap(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// A world-readable scratch directory (a temporary directory is 0700, and
/// `nobody` must reach into it).
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    dir
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every file of `dir` with its bytes and mtime: what "untouched" means.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, SystemTime)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let meta = std::fs::metadata(&path).unwrap();
            let bytes = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            (path, bytes, meta.modified().unwrap())
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// A store written by `mcpc eval` (as this process's user) in `store/` of
/// `dir`, with the policy and request beside it: (policy, request, store).
fn written_store(dir: &Path) -> (String, String, String) {
    let policy = dir.join("policy.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let request = dir.join("request.json");
    std::fs::write(&request, REQUEST).unwrap();
    std::fs::create_dir(dir.join("store")).unwrap();
    let store = dir.join("store/decisions.sqlite3");
    let (policy, request, store) = (
        policy.display().to_string(),
        request.display().to_string(),
        store.display().to_string(),
    );
    for consent in ["deny", "approve"] {
        let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
            .args(["eval", &policy, "--server", consent, "--request", &request])
            .args(["--store", &store, "--consent", consent])
            .output()
            .unwrap();
        assert!(out.status.code().unwrap() <= 1, "{out:?}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["eval", &policy, "--server", "git", "--request", &request])
        .args(["--store", &store, "--consent", "deny"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    (policy, request, store)
}

/// The inspecting subcommands, each with the arguments it needs.
fn inspections<'a>(policy: &'a str, identity: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        vec!["ls"],
        vec!["ls", "--policy", policy],
        vec!["show", identity],
        vec!["budgets", "--policy", policy],
        vec!["stats"],
        vec!["verify"],
    ]
}

#[test]
fn inspection_reads_a_read_only_store_in_a_read_only_directory_and_changes_nothing() {
    let dir = scratch();
    let (policy, _, store) = written_store(dir.path());
    let store_dir = dir.path().join("store");
    // What a proxy leaves when it stops: the file alone (its log checkpointed away).
    assert_eq!(snapshot(&store_dir).len(), 1, "{:?}", snapshot(&store_dir));
    let (code, listing, stderr) = mcpc_as_user(&["store", "ls", "--store", &store]);
    assert_eq!(code, 0, "{stderr}");
    let identity = listing
        .split_whitespace()
        .find(|word| word.starts_with("git:"))
        .unwrap()
        .to_owned();
    chmod(Path::new(&store), 0o444);
    chmod(&store_dir, 0o555);
    let before = snapshot(&store_dir);
    for sub in inspections(&policy, &identity) {
        let mut args = vec!["store"];
        args.extend(&sub);
        args.extend(["--store", &store]);
        let (code, stdout, stderr) = mcpc_as_user(&args);
        assert_eq!(code, 0, "{sub:?}: {stderr}");
        assert!(!stdout.is_empty(), "{sub:?}");
        assert_eq!(snapshot(&store_dir), before, "{sub:?} changed the store");
    }
    // Maintenance writes, and says why it cannot.
    let (code, _, stderr) =
        mcpc_as_user(&["store", "forget", "--server", "git", "--store", &store]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("store.permission"), "{stderr}");
    assert_eq!(snapshot(&store_dir), before);
    chmod(&store_dir, 0o755);
}

#[test]
fn inspection_never_creates_or_converts_a_store() {
    let dir = scratch();
    let empty = dir.path().join("empty.sqlite3");
    std::fs::write(&empty, b"").unwrap();
    let schema3 = dir.path().join("schema3.sqlite3");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/tests/fixtures/schema3/store.db"),
        &schema3,
    )
    .unwrap();
    let missing = dir.path().join("missing.sqlite3");
    let policy = dir.path().join("policy.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.display().to_string();
    let before = snapshot(dir.path());
    for (store, code) in [
        (&empty, "store.empty"),
        (&schema3, "store.schema_too_old"),
        (&missing, "store.missing"),
    ] {
        let store = store.display().to_string();
        for sub in inspections(&policy, "git:00000000000000000000000000000000") {
            let mut args = vec!["store"];
            args.extend(&sub);
            args.extend(["--store", &store]);
            let (exit, stdout, stderr) = mcpc_as_user(&args);
            assert_eq!(exit, 2, "{sub:?} {store}: {stdout}{stderr}");
            assert!(stderr.contains(code), "{sub:?} {store}: {stderr}");
            assert!(
                stderr.contains(&store),
                "{sub:?}: the path is named: {stderr}"
            );
            assert_eq!(snapshot(dir.path()), before, "{sub:?} touched {store}");
        }
    }
}

#[test]
fn a_new_store_in_a_read_only_directory_names_the_path_and_why() {
    let dir = scratch();
    let policy = dir.path().join("policy.mcpolicy");
    std::fs::write(&policy, POLICY).unwrap();
    let request = dir.path().join("request.json");
    std::fs::write(&request, REQUEST).unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    chmod(&locked, 0o555);
    let store = locked.join("decisions.sqlite3").display().to_string();
    let (code, _, stderr) = mcpc_as_user(&[
        "eval",
        &policy.display().to_string(),
        "--server",
        "git",
        "--request",
        &request.display().to_string(),
        "--store",
        &store,
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(&store), "{stderr}");
    assert!(
        stderr.contains("cannot create a new store file in")
            && stderr.contains("Permission denied"),
        "{stderr}"
    );
    assert!(!stderr.contains("unable to open database file"), "{stderr}");
    assert!(!Path::new(&store).exists());
}

#[test]
fn verify_finds_a_damaged_last_page_that_decisions_never_read() {
    let dir = scratch();
    let (policy, request, store) = written_store(dir.path());
    // Grow the file with decisions of a server the request never asks about,
    // keeping the schema's invariants (the server's stored count).
    {
        let conn = rusqlite::Connection::open(&store).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        for i in 0..2000 {
            conn.execute(
                "INSERT INTO decisions (server_id, identity, verdict, reason, digest, \
                 expires_at, data, represented, decided_at, recomputable, statement) \
                 VALUES ('zz-filler', ?1, 'deny', 'user.denied', 'sha256:0', NULL, \
                 '{\"reason\":\"user.denied\"}', 0, 0, 0, 'consent')",
                [format!("zz-filler:{i:032}")],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO servers (server_id, stored, evicted, evicted_represented) \
             VALUES ('zz-filler', 2000, 0, 0)",
            [],
        )
        .unwrap();
        conn.execute_batch("COMMIT; PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
    }
    let (code, stdout, stderr) = mcpc_as_user(&["store", "verify", "--store", &store]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    assert!(stdout.ends_with(": sound\n"), "{stdout}");
    // Garbage over the last page.
    let mut bytes = std::fs::read(&store).unwrap();
    let len = bytes.len();
    assert!(len > 8 * 4096, "{len}");
    for (i, byte) in bytes[len - 4096..].iter_mut().enumerate() {
        *byte = (i * 7 + 13) as u8;
    }
    std::fs::write(&store, &bytes).unwrap();
    // A decision that never reads the page still succeeds…
    let out = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(["eval", &policy, "--server", "git", "--request", &request])
        .args(["--store", &store, "--consent", "deny"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("deny user.denied"), "{said}");
    // …and verify finds the damage, in both formats.
    let (code, stdout, stderr) = mcpc_as_user(&["store", "verify", "--store", &store]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("damaged: "), "{stdout}");
    assert!(stdout.contains("found\n"), "{stdout}");
    let (code, stdout, _) =
        mcpc_as_user(&["store", "verify", "--store", &store, "--format", "json"]);
    assert_eq!(code, 1);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["sound"], false);
    assert!(!json["findings"].as_array().unwrap().is_empty(), "{json}");
}
