//! Every README block fenced as ```` ```sh example ```` runs, so the
//! documentation cannot drift from the binary. Each block runs in a fresh
//! temporary directory holding a copy of `examples/`, with the built `mcpc`
//! first on `PATH`, offline:
//!
//! - a block with `$ ` prompts is a transcript: each command runs in turn
//!   (`$?` is the previous command's exit code) and what it prints, its
//!   standard error then its standard output, must be the lines that follow
//!   it, exactly;
//! - any other block is a script, run with `bash -e`: it must exit 0.
//!
//! Mark a block `sh example` only when it runs offline in well under a
//! second; a block that needs a network, a database or a running client
//! stays a plain `sh` block.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The README's example blocks: (line of the fence, body).
fn examples(readme: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in readme.lines().enumerate() {
        match &mut open {
            None => {
                let info = line.trim_start().strip_prefix("```");
                if info.is_some_and(|info| info.split_whitespace().eq(["sh", "example"])) {
                    open = Some((n + 1, String::new()));
                }
            }
            Some(_) if line.trim_start().starts_with("```") => {
                found.extend(open.take());
            }
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    assert!(open.is_none(), "an example block is never closed");
    found
}

/// A directory with a copy of `examples/`, and `PATH` with `mcpc` first.
fn sandbox() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root().join("examples"), &dir.path().join("examples"));
    let bin = Path::new(env!("CARGO_BIN_EXE_mcpc")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (dir, path)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            // Build output of the rmcp example is not an example.
            if entry.file_name() != "target" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `bash -c SCRIPT` in `dir` (with `-e` when `errexit`).
fn bash(dir: &Path, path: &str, script: &str, errexit: bool) -> std::process::Output {
    Command::new("bash")
        .args(if errexit {
            &["-e", "-c"][..]
        } else {
            &["-c"][..]
        })
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env("XDG_STATE_HOME", dir.join("state"))
        .output()
        .unwrap()
}

/// Runs a transcript block; what the commands print, in the block's form.
fn replay(dir: &Path, path: &str, body: &str) -> String {
    let mut out = String::new();
    let mut status = 0;
    for line in body.lines() {
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        out.push_str(line);
        out.push('\n');
        // `(exit N)` gives the command the previous one's `$?`.
        let run = bash(dir, path, &format!("(exit {status}); {command}"), false);
        out.push_str(&String::from_utf8_lossy(&run.stderr));
        out.push_str(&String::from_utf8_lossy(&run.stdout));
        status = run.status.code().unwrap_or(-1);
    }
    out
}

#[test]
fn every_readme_example_runs_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = examples(&readme);
    assert!(
        blocks.len() >= 2,
        "the README marks its runnable blocks ```sh example; found {}",
        blocks.len()
    );
    for (at, body) in blocks {
        let (dir, path) = sandbox();
        if body.lines().any(|l| l.starts_with("$ ")) {
            let got = replay(dir.path(), &path, &body);
            assert_eq!(
                got, body,
                "README.md:{at}: the transcript is not what mcpc prints"
            );
        } else {
            let run = bash(dir.path(), &path, &body, true);
            assert!(
                run.status.success(),
                "README.md:{at}: the block failed ({:?}):\n{body}\nstdout:\n{}\nstderr:\n{}",
                run.status,
                String::from_utf8_lossy(&run.stdout),
                String::from_utf8_lossy(&run.stderr)
            );
        }
    }
}
