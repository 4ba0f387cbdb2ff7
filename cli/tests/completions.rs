//! `mcpc completions SHELL` and `mcpc man`, through the real binary: each
//! generates, and mentions every subcommand `mcpc --help` lists (so a new
//! subcommand cannot be left out).

use std::process::{Command, Output};

fn mcpc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .args(args)
        .output()
        .expect("mcpc runs")
}

/// The subcommands listed under `Commands:` in `mcpc --help`.
fn subcommands() -> Vec<String> {
    let help = String::from_utf8(mcpc(&["--help"]).stdout).expect("UTF-8");
    let names: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_owned)
        .collect();
    for expected in ["check", "fmt", "eval", "test", "completions", "man"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    names
}

#[test]
fn completions_mention_every_subcommand() {
    let names = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = mcpc(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8(out.stdout).expect("UTF-8");
        assert!(script.contains("mcpc"), "{shell}");
        for name in &names {
            assert!(
                script.contains(name.as_str()),
                "{shell} completions lack `{name}`"
            );
        }
    }
    // Options too: `check --fix` completes.
    let bash = String::from_utf8(mcpc(&["completions", "bash"]).stdout).expect("UTF-8");
    assert!(bash.contains("--fix") && bash.contains("--diff"));
    let bad = mcpc(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn man_page_mentions_every_subcommand() {
    let names = subcommands();
    let out = mcpc(&["man"]);
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(page.contains(".TH mcpc 1"), "{page}");
    for name in &names {
        // roff escapes `-`: `mcpc\-check(1)`.
        assert!(
            page.contains(&format!("mcpc\\-{}(1)", name.replace('-', "\\-"))),
            "man page lacks `{name}`"
        );
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let out = mcpc(&["man", "--dir", dir.path().to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(0));
    for name in names
        .iter()
        .map(|n| format!("mcpc-{n}"))
        .chain(["mcpc".to_owned()])
    {
        let page = std::fs::read_to_string(dir.path().join(format!("{name}.1")))
            .unwrap_or_else(|e| panic!("{name}.1: {e}"));
        assert!(page.contains(&format!(".TH {name} 1")), "{name}: {page}");
    }
    let check = std::fs::read_to_string(dir.path().join("mcpc-check.1")).expect("page");
    assert!(
        check.contains("\\-\\-fix") && check.contains("Exit codes"),
        "{check}"
    );
}

/// Every `mcpc-…(1)` a written page refers to (clap_mangen's SUBCOMMANDS and
/// SEE ALSO sections) is a page `mcpc man --dir` wrote, at every depth:
/// `mcpc-store.1` names `mcpc-store-ls(1)`, so `mcpc-store-ls.1` exists.
#[test]
fn every_page_a_page_refers_to_is_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = mcpc(&["man", "--dir", dir.path().to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(0));
    let written: std::collections::BTreeSet<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut references = 0;
    for page in &written {
        let text = std::fs::read_to_string(dir.path().join(page)).expect("page");
        // roff escapes the hyphens of a name: `mcpc\-store\-ls(1)`.
        let text = text.replace("\\-", "-");
        for (at, _) in text.match_indices("(1)") {
            let name: String = text[..at]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if !name.starts_with("mcpc") {
                continue;
            }
            references += 1;
            assert!(
                written.contains(&format!("{name}.1")),
                "{page} refers to {name}(1), which was not written; written: {written:?}"
            );
        }
    }
    assert!(written.contains("mcpc-store-ls.1"), "{written:?}");
    assert!(references > 20, "only {references} references found");
}
