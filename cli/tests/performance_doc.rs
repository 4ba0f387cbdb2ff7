//! `docs/performance.md` is where every measurement lives, and each of its
//! tables says where its figures come from: the section names its bench
//! (`Bench: `crate/benches/NAME.rs``) and the command that reproduces it
//! (`Command: `cargo bench -p PACKAGE --bench NAME``), and that command runs
//! that bench: the package is a workspace member whose manifest declares
//! the bench, in the file named. A bench that is a Cargo project of its own,
//! outside the workspace, is named by its directory (`Bench: `DIR/``) and
//! run with `cargo run --release --manifest-path DIR/Cargo.toml`. Every
//! other `cargo bench` the page gives names a bench that exists too.
//!
//! The per-crate documents (`PER_CRATE_DOCUMENTS`) keep the method (what a
//! bench measures, how to run it, why the code is fast) and link to the
//! page for the figures; they must not grow result tables again. The rule
//! (`measurements_in`), on the Markdown as parsed, code spans and code
//! blocks left out:
//!
//! - no table body cell holds a measured figure: a number followed by a
//!   unit of time, memory or rate (`µs`, `ns`, `ms`, `s`, `MiB`, `GiB`,
//!   `MB`, `GB`, `/s`) or a ratio (`×`); `KiB` is left out, since inputs
//!   are named by it (`4KiB`, `64 KiB`);
//! - no heading holds a date (`2026-12-03`) or the word "Results";
//! - no paragraph or list item holds a date, a measured figure and a word
//!   that places a run (`RUN_WORDS`: "UTC", "load", "VM", "machine",
//!   "measured"): that is a run's report ("Measured 2026-12-03 at e6e2e52
//!   … load average 4: p50 8.1 ms").
//!
//! Design constants pass: a bound or a threshold is written in prose
//! without a date (`16 MiB` cap, `≤ 300 ns` target) or in a code span
//! (`64 KiB` in a table of hover texts); a date without a run around it
//! (a schema version's history, the 2026-07-28 protocol revision beside
//! the 64 MiB bound) is not a report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ sits in the repository's root")
        .to_path_buf()
}

fn manifest(dir: &Path) -> toml::Table {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a manifest");
    text.parse().expect("the manifest is TOML")
}

/// Each workspace package by name: its directory and the benches its
/// manifest declares.
fn packages(root: &Path) -> BTreeMap<String, (PathBuf, Vec<String>)> {
    let workspace = manifest(root);
    let members = workspace["workspace"]["members"]
        .as_array()
        .expect("workspace members");
    let mut packages = BTreeMap::new();
    for member in members {
        let dir = root.join(member.as_str().expect("a member is a path"));
        let manifest = manifest(&dir);
        let name = manifest["package"]["name"]
            .as_str()
            .expect("a package name")
            .to_owned();
        let benches = manifest
            .get("bench")
            .and_then(toml::Value::as_array)
            .map(|benches| {
                benches
                    .iter()
                    .filter_map(|b| b.get("name")?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        packages.insert(name, (dir, benches));
    }
    packages
}

/// The text of the first code span on the line that starts with `label`.
fn labelled<'a>(section: &'a str, label: &str) -> Option<&'a str> {
    let line = section.lines().find(|l| l.starts_with(label))?;
    line.split('`').nth(1)
}

/// `cargo bench -p PACKAGE --bench NAME` (trailing arguments allowed), as
/// (PACKAGE, NAME).
fn bench_command(command: &str) -> Option<(&str, &str)> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let ["cargo", "bench", "-p", package, "--bench", name, ..] = words.as_slice() else {
        return None;
    };
    Some((package, name))
}

/// `cargo run --release --manifest-path DIR/Cargo.toml`: a bench that is a
/// Cargo project of its own, outside the workspace, as its manifest's path.
fn own_project_command(command: &str) -> Option<&str> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let ["cargo", "run", "--release", "--manifest-path", manifest] = words.as_slice() else {
        return None;
    };
    manifest.ends_with("/Cargo.toml").then_some(*manifest)
}

/// Whether `package` declares `bench`, and where its file is.
fn bench_file(
    packages: &BTreeMap<String, (PathBuf, Vec<String>)>,
    package: &str,
    bench: &str,
) -> Result<PathBuf, String> {
    let (dir, benches) = packages
        .get(package)
        .ok_or_else(|| format!("no workspace package `{package}`"))?;
    if !benches.iter().any(|b| b == bench) {
        return Err(format!("`{package}` declares no bench `{bench}`"));
    }
    let file = dir.join("benches").join(format!("{bench}.rs"));
    if !file.is_file() {
        return Err(format!("`{}` is missing", file.display()));
    }
    Ok(file)
}

#[test]
fn every_table_names_its_bench_and_the_command_that_runs_it() {
    let root = repository_root();
    let packages = packages(&root);
    let page = std::fs::read_to_string(root.join("docs/performance.md")).expect("the page");
    let mut problems = Vec::new();
    let mut tables = 0;
    for section in page.split("\n## ").skip(1) {
        let title = section.lines().next().unwrap_or_default();
        if !section.lines().any(|l| l.starts_with("|---")) {
            continue;
        }
        tables += 1;
        let (Some(bench), Some(command)) =
            (labelled(section, "Bench:"), labelled(section, "Command:"))
        else {
            problems.push(format!(
                "\"{title}\": a table without `Bench:` and `Command:`"
            ));
            continue;
        };
        if let Some(manifest) = own_project_command(command) {
            let dir = manifest.trim_end_matches("Cargo.toml");
            if bench.trim_end_matches('/') != dir.trim_end_matches('/') {
                problems.push(format!(
                    "\"{title}\": names `{bench}`, but `{command}` runs `{dir}`"
                ));
            } else if !root.join(manifest).is_file() {
                problems.push(format!("\"{title}\": `{manifest}` is missing"));
            }
            continue;
        }
        let Some((package, name)) = bench_command(command) else {
            problems.push(format!(
                "\"{title}\": `{command}` is not `cargo bench -p PACKAGE --bench NAME`"
            ));
            continue;
        };
        match bench_file(&packages, package, name) {
            Ok(file) if file == root.join(bench) => {}
            Ok(file) => problems.push(format!(
                "\"{title}\": names `{bench}`, but `{command}` runs `{}`",
                file.strip_prefix(&root).unwrap_or(&file).display()
            )),
            Err(problem) => problems.push(format!("\"{title}\": {problem}")),
        }
    }
    for command in page.split('`').filter(|s| s.starts_with("cargo bench")) {
        match bench_command(command) {
            Some((package, name)) => {
                if let Err(problem) = bench_file(&packages, package, name) {
                    problems.push(format!("`{command}`: {problem}"));
                }
            }
            None => problems.push(format!("`{command}` names no bench (`--bench NAME`)")),
        }
    }
    assert!(tables >= 8, "only {tables} tables: is this the page?");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_command_is_read_as_package_and_bench() {
    assert_eq!(
        bench_command("cargo bench -p mcpc --bench proxy"),
        Some(("mcpc", "proxy"))
    );
    assert_eq!(
        bench_command("cargo bench -p mcpolicy-runtime --bench decide -- fresh"),
        Some(("mcpolicy-runtime", "decide"))
    );
    assert_eq!(
        bench_command("cargo bench -p mcpolicy-store-postgres"),
        None
    );
    let packages = packages(&repository_root());
    assert!(bench_file(&packages, "mcpc", "proxy").is_ok());
    assert!(bench_file(&packages, "mcpolicy-proxy", "proxy").is_err());
    assert!(bench_file(&packages, "mcpc", "no_such_bench").is_err());
}

/// The per-crate documents that once held result tables: they keep the
/// method, and `docs/performance.md` the figures.
const PER_CRATE_DOCUMENTS: &[&str] = &[
    "compiler/PERF.md",
    "runtime/node/BENCHMARKS.md",
    "runtime/node/README.md",
    "runtime/python/README.md",
    "runtime/rmcp/README.md",
    "runtime/BENCHMARKS.md",
    "runtime/ENGINE.md",
    "runtime/STORE.md",
    "runtime/postgres/README.md",
    "proxy/PROXY.md",
    "lsp/README.md",
];

/// Units that make a number a measurement: time, size, rate, ratio.
const UNITS: &[&str] = &["µs", "ns", "ms", "s", "MiB", "GiB", "MB", "GB", "/s", "×"];

/// The first measured figure in `text`: a number, at most one space, then
/// one of `UNITS` not followed by a letter (`12 ms`, `6,740/s`, `1.45×`;
/// not `3 servers`, not `2 states`).
fn measured_figure(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() || (i > 0 && bytes[i - 1].is_ascii_alphabetic()) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || matches!(bytes[i], b',' | b'.')) {
            i += 1;
        }
        let number_end = i;
        let rest = &text[number_end..];
        let rest = rest
            .strip_prefix(' ')
            .or_else(|| rest.strip_prefix('\u{a0}'))
            .unwrap_or(rest);
        for unit in UNITS {
            if let Some(after) = rest.strip_prefix(unit) {
                let ends = after.chars().next().is_none_or(|c| !c.is_alphanumeric());
                if ends {
                    let end = text.len() - after.len();
                    return Some(&text[start..end]);
                }
            }
        }
    }
    None
}

/// Words that place a dated paragraph's figures in a run.
const RUN_WORDS: &[&str] = &["UTC", "load", "VM", "machine", "Measured", "measured"];

/// Whether `text` holds a date written `YYYY-MM-DD`.
fn has_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.windows(10).any(|w| {
        w.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
    })
}

/// Where `markdown` reports measurements (the rule of this file's doc
/// comment), one line per finding.
fn measurements_in(markdown: &str) -> Vec<String> {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    #[derive(PartialEq)]
    enum Block {
        Heading,
        HeadCell,
        BodyCell,
        Prose,
    }
    let mut findings = Vec::new();
    let mut open: Vec<(Block, String)> = Vec::new();
    let mut in_head = false;
    let mut in_code_block = false;
    for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => open.push((Block::Heading, String::new())),
            Event::Start(Tag::TableHead) => in_head = true,
            Event::End(TagEnd::TableHead) => in_head = false,
            Event::Start(Tag::TableCell) => open.push((
                if in_head {
                    Block::HeadCell
                } else {
                    Block::BodyCell
                },
                String::new(),
            )),
            Event::Start(Tag::Paragraph | Tag::Item) => open.push((Block::Prose, String::new())),
            Event::Start(Tag::CodeBlock(_)) => in_code_block = true,
            Event::End(TagEnd::CodeBlock) => in_code_block = false,
            Event::Text(text) if !in_code_block => {
                if let Some((_, buffer)) = open.last_mut() {
                    buffer.push_str(&text);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some((_, buffer)) = open.last_mut() {
                    buffer.push(' ');
                }
            }
            Event::End(
                TagEnd::Heading(_) | TagEnd::TableCell | TagEnd::Paragraph | TagEnd::Item,
            ) => {
                let Some((block, text)) = open.pop() else {
                    continue;
                };
                let text = text.trim();
                match block {
                    Block::Heading if has_date(text) || text.contains("Results") => {
                        findings.push(format!("a run's heading: \"{text}\""));
                    }
                    Block::BodyCell => {
                        if let Some(figure) = measured_figure(text) {
                            findings.push(format!("a table cell with `{figure}`: \"{text}\""));
                        }
                    }
                    Block::Prose
                        if has_date(text) && RUN_WORDS.iter().any(|w| text.contains(w)) =>
                    {
                        if let Some(figure) = measured_figure(text) {
                            let shown: String = text.chars().take(100).collect();
                            findings.push(format!("a dated run with `{figure}`: \"{shown}…\""));
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    findings
}

#[test]
fn per_crate_documents_hold_method_not_measurements() {
    let root = repository_root();
    let mut problems = Vec::new();
    for document in PER_CRATE_DOCUMENTS {
        let text = std::fs::read_to_string(root.join(document)).expect("a per-crate document");
        for finding in measurements_in(&text) {
            problems.push(format!("{document}: {finding}"));
        }
        if !text.contains("docs/performance.md") {
            problems.push(format!("{document}: no link to `docs/performance.md`"));
        }
    }
    assert!(
        problems.is_empty(),
        "measurements belong in docs/performance.md, in the bench's section:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_rule_finds_runs_and_spares_design_constants() {
    // Shapes the per-crate documents held before the figures moved.
    let table = "| input | SHA-256 | ratio |\n|---|---:|---:|\n| 4KiB | 3.26 µs | **2.49×** |\n";
    assert_eq!(
        measurements_in(table).len(),
        2,
        "{:?}",
        measurements_in(table)
    );
    let rate = "| clients | decisions/s |\n|---|---|\n| 16 | 6,740 / 6,467 |\n| 16 | 5,815/s |\n";
    assert_eq!(measurements_in(rate).len(), 1);
    assert_eq!(
        measurements_in("### Results (2026-12-03, 2-core AMD EPYC VM)\n").len(),
        1
    );
    assert_eq!(
        measurements_in("## Fifth pass (2026-12-03, 09:15 UTC)\n").len(),
        1
    );
    let run = "Measured 2026-12-03 at e6e2e52, load 4:\np50 8.1 ms, RSS 17.4 MiB.\n";
    assert_eq!(measurements_in(run).len(), 1);
    let item = "- On the Intel VM (2026-12-03 10:26 UTC): ping\n  +8.2 µs added.\n";
    assert_eq!(measurements_in(item).len(), 1);
    let memory = "Peak RSS 86 MiB (2026-12-04, the shared 2-core VM).\n";
    assert_eq!(measurements_in(memory).len(), 1);
    // Design constants, dates without figures, code: none is a run.
    for design in [
        "A request over the 16 MiB cap is refused; the target is ≤ 300 ns.\n",
        "**Version 3** (until 2026-12-03, late evening) did not record it.\n",
        "| feature | text |\n|---|---|\n| hover | `64 KiB` = 65,536 bytes, 3 servers |\n",
        "```\n2026-12-03 run: 12 ms\n```\n",
        "A 2026-07-28 task's entry (`45s`, `1.5×`) keeps its state.\n",
        "At most 64 MiB of 2026-07-28 rounds are held; the rest is refused.\n",
        "## Measuring the store\n",
    ] {
        assert_eq!(measurements_in(design), Vec::<String>::new(), "{design}");
    }
    assert_eq!(measured_figure("about 2× Cedar"), Some("2×"));
    assert_eq!(measured_figure("4,000 edits in 3 rounds"), None);
    assert_eq!(measured_figure("h2 and sha256 only"), None);
}
