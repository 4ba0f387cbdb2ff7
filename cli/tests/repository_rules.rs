//! Rules of the repository's shape that `ARCHITECTURE.md` states, held here
//! so that they stay true:
//!
//! - no Rust source under a crate's `src/` is over 2,000 lines ("Files a
//!   reader can hold");
//! - nothing cites an issue by number ("The repository explains itself");
//! - a statement is named in few Rust sources: the runtime's declaration,
//!   the engine's check, the table's validation and the compiler's syntax
//!   entry ("A statement is declared once"). `max_messages` stands for every
//!   statement; tests and benches (whose policies and blocks are inputs) do
//!   not count.

use std::path::{Path, PathBuf};

/// The longest a Rust source under `src/` may be.
const MAX_LINES: usize = 2_000;

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ sits in the repository's root")
        .to_path_buf()
}

/// Every file of the repository, paths relative to its root: what git
/// tracks and what it would (untracked, not ignored), so build output,
/// installed packages and CI's own virtualenv stay out.
fn files() -> Vec<PathBuf> {
    let root = repository_root();
    let out = std::process::Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(&root)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git ls-files failed");
    let mut files: Vec<PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .filter(|p| root.join(p).is_file())
        .collect();
    files.sort();
    files.dedup();
    files
}

fn has_component(path: &Path, name: &str) -> bool {
    path.components().any(|c| c.as_os_str() == name)
}

fn rust_sources() -> Vec<(PathBuf, String)> {
    let root = repository_root();
    files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            let text = std::fs::read_to_string(root.join(&p))
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

#[test]
fn no_rust_source_under_src_is_over_2000_lines() {
    let long: Vec<String> = rust_sources()
        .into_iter()
        .filter(|(path, _)| has_component(path, "src"))
        .map(|(path, text)| (path, text.lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(path, lines)| format!("  {}: {lines} lines", path.display()))
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines; split by concern (ARCHITECTURE.md, \"Files a reader can hold\"):\n{}",
        long.join("\n")
    );
}

/// Whether `line` cites an issue by number: the word, a space, a digit, in
/// any case.
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_lowercase();
    let word = "issue ";
    lower.match_indices(word).any(|(at, _)| {
        lower[at + word.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

#[test]
fn nothing_cites_an_issue_by_number() {
    let root = repository_root();
    let mut found = Vec::new();
    for path in files() {
        // Binary files (fuzz inputs among them) are not read as text.
        let Ok(text) = std::fs::read_to_string(root.join(&path)) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if cites_an_issue(line) {
                found.push(format!("  {}:{}: {line}", path.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/spec/, docs/threat-model.md or a test's name, never an issue:\n{}",
        found.join("\n")
    );
    assert!(cites_an_issue(&format!("see Issue {}", 12)));
    assert!(!cites_an_issue("an issue with 3 parts"));
}

#[test]
fn a_statement_is_named_in_at_most_four_sources() {
    let named = |line: &str| {
        let lower = line.to_lowercase();
        lower.contains("max_messages") || lower.contains("maxmessages")
    };
    let mut sources = Vec::new();
    let mut lines = Vec::new();
    for (path, text) in rust_sources() {
        if has_component(&path, "tests") || has_component(&path, "benches") {
            continue;
        }
        let here: Vec<String> = text
            .lines()
            .enumerate()
            .filter(|(_, line)| named(line))
            .map(|(n, line)| format!("  {}:{}: {}", path.display(), n + 1, line.trim()))
            .collect();
        if !here.is_empty() {
            sources.push(path.display().to_string());
            lines.extend(here);
        }
    }
    assert!(
        sources.len() <= 4 && lines.len() <= 14,
        "`max_messages` is named in {} sources on {} lines (at most 4 and 14: the \
         declaration, the engine, the table, the compiler's syntax entry; derive the \
         rest from the statement table):\n{}",
        sources.len(),
        lines.len(),
        lines.join("\n")
    );
}
