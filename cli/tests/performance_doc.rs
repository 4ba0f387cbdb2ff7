//! `docs/performance.md` is where every measurement lives, and each of its
//! tables says where its figures come from: the section names its bench
//! (`Bench: `crate/benches/NAME.rs``) and the command that reproduces it
//! (`Command: `cargo bench -p PACKAGE --bench NAME``), and that command runs
//! that bench: the package is a workspace member whose manifest declares
//! the bench, in the file named. Every other `cargo bench` the page gives
//! names a bench that exists too.

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
