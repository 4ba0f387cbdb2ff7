//! The repository explains itself, and what it says still holds:
//!
//! - every repository path cited in a Markdown file or a doc comment (`//!`,
//!   `///`) exists;
//! - every relative Markdown link resolves, and so does its `#anchor`;
//! - every section a citation names (`docs/spec/store.md`, "Bounded calls")
//!   is a heading of that file, or a bold phrase or a table row's first cell
//!   (`docs/threat-model.md` is a table of rows).
//!
//! What counts as a cited path: a code span (`` `…` ``) holding one token with
//! a `/` whose first component is a directory of the repository's top level,
//! a crate's `src`, `tests` or `benches`, or a directory beside the citing
//! file or its crate; or whose last component ends in an extension the
//! repository writes (`.rs`, `.md`, `.pest`, `.mcpolicy`, …). A token with a
//! placeholder (`<name>`, `{a,b}`, `*`, `…`, `$VAR`, `~`, `NAME`, `TARGET`),
//! a hidden directory not the repository's (`.vscode/`) or a URL is prose,
//! not a path. A path may be written from the repository's root, from the
//! citing file's directory, from its crate's root (`src/<file>.rs` in a
//! crate's docs), or from its crate's `src/` (`session/<module>.rs` in
//! the proxy's sources).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// Extensions of files the repository holds: a token ending in one is a path
/// even where its first directory is not one of ours.
const EXTENSIONS: &[&str] = &[
    "rs", "md", "pest", "mcpolicy", "toml", "json", "jsonl", "snap", "sh", "py", "ts", "mjs",
    "sql", "txt", "html",
];

/// Directories inside a crate that docs name from the crate's root.
const CRATE_DIRS: &[&str] = &["src", "tests", "benches"];

/// Names that stand for any name (`fuzz/corpus/TARGET/`, `tests/cases/format/NAME.mcpolicy`).
const PLACEHOLDER_NAMES: &[&str] = &["NAME", "TARGET", "FILE", "DIR", "CRATE", "PATH", "ID"];

/// Characters that make a token a pattern or a placeholder rather than a path.
const PLACEHOLDERS: &[char] = &[
    '*', '?', '{', '}', '<', '>', '…', '$', '~', '%', '|', '[', ']', '(', ')', '=', ',', ';', '"',
    '\'', '\\',
];

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ sits in the repository's root")
        .to_path_buf()
}

/// Every file under `dir` worth reading: hidden directories, build output and
/// installed packages are not the repository's.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("directory is readable")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// A piece of Markdown and where it came from.
struct Text {
    file: PathBuf,
    /// The file's line of each line of `markdown`.
    lines: Vec<usize>,
    markdown: String,
    /// Links are checked in Markdown files only: in a doc comment `[Foo]` is
    /// rustdoc's link to an item.
    links: bool,
}

impl Text {
    fn line_at(&self, offset: usize) -> usize {
        let index = self.markdown[..offset].matches('\n').count();
        self.lines[index.min(self.lines.len() - 1)]
    }
}

/// Each run of doc-comment lines in a Rust file, as Markdown.
fn doc_comments(file: &Path, source: &str) -> Vec<Text> {
    let mut texts = Vec::new();
    let mut current: Option<(&str, Text)> = None;
    for (index, line) in source.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["//!", "///"]
            .into_iter()
            .find(|m| trimmed.starts_with(m) && !trimmed.starts_with("////"));
        match (marker, &mut current) {
            (Some(m), Some((open, text))) if *open == m => {
                let body = &trimmed[m.len()..];
                text.markdown.push('\n');
                text.markdown
                    .push_str(body.strip_prefix(' ').unwrap_or(body));
                text.lines.push(index + 1);
            }
            (Some(m), _) => {
                if let Some((_, text)) = current.take() {
                    texts.push(text);
                }
                let body = &trimmed[m.len()..];
                current = Some((
                    m,
                    Text {
                        file: file.to_path_buf(),
                        lines: vec![index + 1],
                        markdown: body.strip_prefix(' ').unwrap_or(body).to_owned(),
                        links: false,
                    },
                ));
            }
            (None, _) => {
                if let Some((_, text)) = current.take() {
                    texts.push(text);
                }
            }
        }
    }
    texts.extend(current.map(|(_, text)| text));
    texts
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as
/// hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The headings of a Markdown file, as written (code spans without their
/// backticks, whitespace collapsed).
fn headings(markdown: &str) -> Vec<String> {
    titles(markdown, false)
}

/// What a citation may name in a Markdown file: its headings and, with
/// `all`, also each bold phrase (`**Tasks**` leads a list item in
/// `proxy/PROXY.md`) and each table row's first cell (the rows of
/// `docs/threat-model.md`).
fn titles(markdown: &str, all: bool) -> Vec<String> {
    let mut titles = Vec::new();
    let mut current: Option<String> = None;
    let mut first_cell = false;
    for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => current = Some(String::new()),
            Event::Start(Tag::Strong) if all && current.is_none() => current = Some(String::new()),
            Event::Start(Tag::TableRow | Tag::TableHead) => first_cell = true,
            Event::Start(Tag::TableCell) if all && first_cell => current = Some(String::new()),
            Event::End(TagEnd::Heading(_) | TagEnd::Strong | TagEnd::TableCell) => {
                first_cell = false;
                titles.extend(current.take().map(|h| collapse(&h)));
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = &mut current {
                    h.push_str(&t);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(h) = &mut current {
                    h.push(' ');
                }
            }
            _ => {}
        }
    }
    titles
}

/// Whether `section` names one of `titles`: equal, or its start up to a
/// parenthesis or punctuation (`"Local errors"` for "Local errors
/// (`2026-07-28`)"), ignoring case and backticks.
fn names_a_title(titles: &[String], section: &str) -> bool {
    let plain = |s: &str| s.replace('`', "").to_lowercase();
    let section = plain(section);
    titles.iter().map(|t| plain(t)).any(|title| {
        title == section
            || title.strip_prefix(&section).is_some_and(|rest| {
                rest.starts_with(|c: char| !c.is_alphanumeric() && c != ' ')
                    || rest.starts_with(" (")
            })
    })
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The anchors a Markdown file defines, duplicates numbered as GitHub does.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for heading in headings(markdown) {
        let base = slug(&heading);
        let count = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    anchors
}

struct Repository {
    root: PathBuf,
    top_dirs: BTreeSet<String>,
    markdown: BTreeMap<PathBuf, String>,
}

impl Repository {
    /// The directories a path cited in `file` may be written from: the
    /// repository's root, the file's own directory and its crate's root.
    fn bases(&self, file: &Path) -> Vec<PathBuf> {
        let mut bases = vec![self.root.clone()];
        let dir = file.parent().expect("a file has a directory").to_path_buf();
        let crate_root = dir
            .ancestors()
            .find(|d| d.join("Cargo.toml").is_file())
            .map(Path::to_path_buf);
        bases.push(dir);
        if let Some(crate_root) = crate_root {
            bases.push(crate_root.join("src"));
            bases.push(crate_root);
        }
        bases
    }

    /// The path a code span cites, if it cites one.
    fn cited_path<'a>(&self, file: &Path, token: &'a str) -> Option<&'a str> {
        if token.contains("://")
            || token
                .chars()
                .any(|c| c.is_whitespace() || PLACEHOLDERS.contains(&c))
            || token.starts_with('/')
        {
            return None;
        }
        // `file.rs:120`, `file.rs::a_test` and `file.md#anchor` cite the file.
        let token = token.split('#').next().unwrap_or(token);
        let token = token.split(':').next().unwrap_or(token);
        if token
            .split('/')
            .any(|c| PLACEHOLDER_NAMES.contains(&c.split('.').next().unwrap_or(c)))
        {
            return None;
        }
        let token = token.strip_prefix("./").unwrap_or(token);
        if !token.contains('/') {
            return None;
        }
        let first = token.split('/').next().unwrap_or("");
        // Cargo's build output (`target/mcpolicy-bench/`, where a bench
        // keeps its inputs) exists only once something was built.
        if first == "target" {
            return None;
        }
        let last = token.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        let known_extension = last
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext));
        // A hidden directory that is not the repository's own (`.ci/`) is the
        // user's (`.vscode/mcp.json`).
        if first.starts_with('.') && first != ".." && !self.top_dirs.contains(first) {
            return None;
        }
        let ours = self.top_dirs.contains(first)
            || CRATE_DIRS.contains(&first)
            || (first != ".." && self.bases(file)[1..].iter().any(|b| b.join(first).is_dir()));
        (known_extension || ours).then_some(token)
    }

    fn resolve(&self, file: &Path, path: &str) -> Option<PathBuf> {
        self.bases(file)
            .into_iter()
            .map(|base| normalize(&base.join(path)))
            .find(|p| p.exists())
    }

    fn relative<'p>(&self, path: &'p Path) -> &'p Path {
        path.strip_prefix(&self.root).unwrap_or(path)
    }
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The section a citation names right after a Markdown file's path:
/// `` `docs/spec/store.md`, "Bounded calls" ``.
fn cited_section(after: &str) -> Option<String> {
    let rest = after.strip_prefix(',')?.trim_start();
    let (open, close) = if rest.starts_with('"') {
        ('"', '"')
    } else if rest.starts_with('“') {
        ('“', '”')
    } else {
        return None;
    };
    let rest = &rest[open.len_utf8()..];
    let end = rest.find(close)?;
    Some(collapse(&rest[..end]))
}

/// Everything cited in one piece of text that does not hold.
fn check(repo: &Repository, text: &Text, problems: &mut Vec<String>) {
    let file = &text.file;
    let here = repo.relative(file).display().to_string();
    let mut report = |offset: usize, what: String| {
        problems.push(format!("{here}:{}: {what}", text.line_at(offset)));
    };
    for (event, range) in Parser::new_ext(&text.markdown, Options::empty()).into_offset_iter() {
        match event {
            Event::Code(code) => {
                let Some(path) = repo.cited_path(file, &code) else {
                    continue;
                };
                let Some(target) = repo.resolve(file, path) else {
                    report(range.start, format!("`{code}` names no file or directory"));
                    continue;
                };
                let Some(section) = cited_section(&text.markdown[range.end..]) else {
                    continue;
                };
                if let Some(markdown) = repo.markdown.get(&target)
                    && !names_a_title(&titles(markdown, true), &section)
                {
                    report(
                        range.start,
                        format!("`{code}` has no section \"{section}\""),
                    );
                }
            }
            Event::Start(Tag::Link { dest_url, .. }) if text.links => {
                let dest = dest_url.to_string();
                if dest.contains(':') || dest.starts_with("//") {
                    continue; // a URL or mailto:, not the repository's
                }
                let (path, anchor) = match dest.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (dest.as_str(), None),
                };
                let target = if path.is_empty() {
                    file.clone()
                } else {
                    let dir = file.parent().expect("a file has a directory");
                    normalize(&dir.join(path))
                };
                if !target.exists() {
                    report(range.start, format!("link `{dest}` resolves to nothing"));
                    continue;
                }
                if let (Some(anchor), Some(markdown)) = (anchor, repo.markdown.get(&target))
                    && !anchors(markdown).contains(anchor)
                {
                    report(
                        range.start,
                        format!("link `{dest}`: no heading has that anchor"),
                    );
                }
            }
            _ => {}
        }
    }
}

fn read_repository() -> (Repository, Vec<Text>) {
    let root = repository_root();
    let mut files = Vec::new();
    walk(&root, &mut files);
    let top_dirs = std::fs::read_dir(&root)
        .expect("the root is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_dir())
        .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
        .filter(|name| name != "target" && name != ".git")
        .collect();
    let mut markdown = BTreeMap::new();
    let mut texts = Vec::new();
    for file in files {
        match file.extension().and_then(|e| e.to_str()) {
            Some("md") => {
                let source = std::fs::read_to_string(&file).expect("Markdown is UTF-8");
                texts.push(Text {
                    file: file.clone(),
                    lines: (1..=source.lines().count().max(1)).collect(),
                    markdown: source.clone(),
                    links: true,
                });
                markdown.insert(file, source);
            }
            Some("rs") => {
                let source = std::fs::read_to_string(&file).expect("Rust source is UTF-8");
                texts.extend(doc_comments(&file, &source));
            }
            _ => {}
        }
    }
    let repo = Repository {
        root,
        top_dirs,
        markdown,
    };
    (repo, texts)
}

#[test]
fn every_cited_path_link_and_section_exists() {
    let (repo, texts) = read_repository();
    let mut problems = Vec::new();
    for text in &texts {
        check(&repo, text, &mut problems);
    }
    let mut message = String::new();
    for problem in &problems {
        let _ = writeln!(message, "  {problem}");
    }
    assert!(
        problems.is_empty(),
        "{} citations name nothing the repository holds:\n{message}",
        problems.len()
    );
}

#[test]
fn the_checker_tells_paths_from_prose() {
    let (repo, _) = read_repository();
    let readme = repo.root.join("README.md");
    let path = |token: &'static str| repo.cited_path(&readme, token);
    assert_eq!(path("docs/spec/store.md"), Some("docs/spec/store.md"));
    assert_eq!(
        path("proxy/src/session.rs:120"),
        Some("proxy/src/session.rs")
    );
    assert_eq!(path("src/proxy/inflight.rs"), Some("src/proxy/inflight.rs"));
    assert_eq!(path("benches/proxy.rs"), Some("benches/proxy.rs"));
    assert_eq!(path("docs/spec/"), Some("docs/spec/"));
    for prose in [
        "application/json",
        "text/event-stream",
        "examples/<name>.tests.toml",
        "tests/cases/{check,compile}/…",
        "https://example.invalid/a.md",
        "~/.config/mcpolicy/policy.mcpolicy",
        "/usr/bin/time",
        "allow/trim/deny",
        "NAME.tests.toml",
    ] {
        assert_eq!(path(prose), None, "{prose}");
    }
    assert_eq!(
        cited_section(", \"Bounded\n calls\" and more"),
        Some("Bounded calls".to_owned())
    );
    assert_eq!(cited_section(" and \"x\""), None);
    assert_eq!(slug("The cause of a decision"), "the-cause-of-a-decision");
    assert_eq!(slug("`mcpc test`: unit tests"), "mcpc-test-unit-tests");
}
