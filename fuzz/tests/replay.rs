//! Every file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`
//! through its target's body, without libFuzzer: the corpora are a
//! regression suite in `cargo test --workspace`, and a crash once committed
//! under `regressions/` stays fixed. `MCPOLICY_FUZZ_TARGET=NAME` replays one
//! target only.

use std::path::{Path, PathBuf};

use mcpolicy_fuzz::{TARGETS, Target};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: Target) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut count = 0;
    for kind in ["corpus", "regressions"] {
        for path in files(&root.join(kind).join(target.name)) {
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let outcome = std::panic::catch_unwind(|| (target.run)(&data));
            assert!(
                outcome.is_ok(),
                "{} failed {} (replay: cargo test -p mcpolicy-fuzz --test replay {})",
                target.name,
                path.display(),
                target.name
            );
            count += 1;
        }
    }
    count
}

fn run(name: &str) {
    if std::env::var("MCPOLICY_FUZZ_TARGET").is_ok_and(|only| only != name) {
        return;
    }
    let target = mcpolicy_fuzz::target(name).unwrap_or_else(|| panic!("no target {name}"));
    let count = replay(target);
    assert!(count > 0, "{name}: no corpus under fuzz/corpus/{name}");
}

#[test]
fn policy_check() {
    run("policy_check");
}

#[test]
fn policy_ide() {
    run("policy_ide");
}

#[test]
fn policy_fmt() {
    run("policy_fmt");
}

#[test]
fn request() {
    run("request");
}

#[test]
fn proxy() {
    run("proxy");
}

#[test]
fn reader_differential() {
    run("reader_differential");
}

#[test]
fn lsp_transport() {
    run("lsp_transport");
}

#[test]
fn every_target_has_a_test() {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "policy_check",
            "policy_ide",
            "policy_fmt",
            "request",
            "proxy",
            "reader_differential",
            "lsp_transport"
        ]
    );
}
