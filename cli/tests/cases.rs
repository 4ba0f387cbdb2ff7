//! Data-driven tests of `mcpc check`.
//!
//! - `tests/cases/check/*.mcpolicy` (repository root): each case's `# expect:`
//!   lines list the findings it must produce, as `CODE` or `CODE@LINE:COLUMN`
//!   (`# expect: nothing` for a clean file); the plain human rendering and the
//!   JSON are snapshotted.
//! - `examples/invalid/<CODE>.mcpolicy`: one file per code in `Code::ALL`
//!   (E0005 and E0006 are generated here), same `# expect:` convention.
//! - `examples/*.mcpolicy`: clean, even under `--deny-warnings`, and they compile.
//! - Bad input through the built `mcpc` binary: exit codes, messages, no
//!   panic, no hang, and the shape of every output format.
//!
//! Regenerate snapshots with `INSTA_UPDATE=always cargo test -p
//! mcpc --test cases` and read the `.snap` files before committing.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcpolicy_compiler::codes::{Code, Severity};
use mcpolicy_compiler::db::{self, Database, SourceText, diagnostics};
use mcpolicy_compiler::line_index::LineIndex;
use mcpolicy_compiler::render::{self, FileReport, Style};

// ------------------------------------------------------------------ helpers

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compiler/ lives in the repository root")
        .to_path_buf()
}

/// `path` relative to the repository root, with `/`, for stable snapshots.
fn shown(path: &Path) -> String {
    let root = repo_root();
    let root = root.canonicalize().unwrap_or(root);
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Checks `text` through the library, as `mcpc check` does.
fn check_text(name: &str, text: &str) -> FileReport {
    let db = Database::default();
    let source = SourceText::new(&db, name.to_owned(), text.to_owned());
    FileReport {
        path: name.to_owned(),
        text: text.to_owned(),
        diagnostics: diagnostics(&db, source).to_vec(),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A finding as `CODE@LINE:COLUMN` (column in Unicode scalar values, from 1).
fn findings(report: &FileReport) -> Vec<String> {
    let index = LineIndex::new(&report.text);
    report
        .diagnostics
        .iter()
        .map(|d| {
            let at = index.position(&report.text, d.span.start);
            format!("{}@{}:{}", d.code, at.line, at.column)
        })
        .collect()
}

/// The `# expect:` entries of a file, anywhere in it (a BOM and CR line
/// ends allowed). `None` when the file has no `# expect:` line at all.
fn expectations(text: &str) -> Option<Vec<String>> {
    let mut found = false;
    let mut entries = Vec::new();
    for line in text.split(['\n', '\r']) {
        let line = line.trim_start_matches('\u{feff}').trim_start();
        if let Some(rest) = line.strip_prefix("# expect:") {
            found = true;
            entries.extend(
                rest.split_whitespace()
                    .filter(|e| *e != "nothing")
                    .map(str::to_owned),
            );
        }
    }
    found.then_some(entries)
}

/// Asserts that the report has exactly the expected findings: the same
/// codes, as many times each, and at the stated positions where one is given.
fn assert_expected(name: &str, report: &FileReport) {
    let expected = expectations(&report.text)
        .unwrap_or_else(|| panic!("{name}: no `# expect:` line in the header"));
    for entry in &expected {
        let code = entry.split('@').next().unwrap_or_default();
        assert!(
            Code::parse(code).is_some(),
            "{name}: `# expect:` names `{code}`, which is not a code"
        );
    }
    let actual = findings(report);
    let mut expected_codes: Vec<&str> = expected
        .iter()
        .map(|e| e.split('@').next().unwrap_or_default())
        .collect();
    let mut actual_codes: Vec<&str> = actual
        .iter()
        .map(|e| e.split('@').next().unwrap_or_default())
        .collect();
    expected_codes.sort_unstable();
    actual_codes.sort_unstable();
    let positioned_ok = expected
        .iter()
        .filter(|e| e.contains('@'))
        .all(|e| actual.contains(e));
    assert!(
        expected_codes == actual_codes && positioned_ok,
        "{name}: findings differ from the `# expect:` header\n  expected: {}\n  actual:   {}\n\n{}",
        expected.join(" "),
        actual.join(" "),
        render::human(std::slice::from_ref(report), Style::Plain),
    );
}

// ----------------------------------------------------- tests/cases/check/*

#[test]
fn check_cases() {
    insta::glob!("../../tests/cases/check", "*.mcpolicy", |path| {
        let name = shown(path);
        let report = check_text(&name, &read(path));
        assert_expected(&name, &report);
        insta::assert_snapshot!(
            "check_human",
            render::human(std::slice::from_ref(&report), Style::Plain)
        );
        insta::assert_snapshot!("check_json", render::json(std::slice::from_ref(&report)));
    });
}

/// One bad item never hides the next: the recovery case has errors in at
/// least three distinct top-level items, all reported in one run.
#[test]
fn recovery_reports_errors_in_three_items() {
    let path = repo_root().join("tests/cases/check/recovery.mcpolicy");
    let text = read(&path);
    let db = Database::default();
    let source = SourceText::new(&db, "recovery.mcpolicy".to_owned(), text);
    let items = &db::parse_file(&db, source).file.items;
    let mut hit: Vec<usize> = diagnostics(&db, source)
        .iter()
        .filter(|d| d.severity() == Severity::Error)
        .filter_map(|d| {
            items.iter().position(|i| {
                i.span.start <= d.span.start && d.span.start < i.span.end.max(i.span.start + 1)
            })
        })
        .collect();
    hit.sort_unstable();
    hit.dedup();
    assert!(
        hit.len() >= 3,
        "errors in only {} top-level items: {hit:?}",
        hit.len()
    );
}

/// Columns count Unicode scalar values in JSON and UTF-16 units in SARIF:
/// an emoji before an error on the same line shifts them differently.
#[test]
fn emoji_before_an_error_shifts_columns_correctly() {
    let text = "mcpolicy 1\nserver \"🤖-bot\" { consent sometimes }\n";
    let report = check_text("emoji.mcpolicy", text);
    let json: serde_json::Value =
        serde_json::from_str(&render::json(std::slice::from_ref(&report))).expect("JSON");
    let d = &json["diagnostics"][0];
    assert_eq!(d["code"], "E0107");
    // `server "🤖-bot" { consent ` is 25 scalar values; the error starts at 26.
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(2), Some(26))
    );
    let start = text.find("sometimes").expect("in text");
    assert_eq!(d["byte_start"].as_u64(), Some(start as u64));
    let sarif: serde_json::Value =
        serde_json::from_str(&render::sarif(std::slice::from_ref(&report))).expect("SARIF");
    let region = &sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"];
    // The robot is two UTF-16 units.
    assert_eq!(region["startColumn"].as_u64(), Some(27));
}

/// The human rendering's `file:LINE:COLUMN` agrees with JSON, SARIF and
/// GitHub output: columns in characters, not bytes.
#[test]
fn human_location_counts_characters() {
    let report = check_text(
        "emoji.mcpolicy",
        "mcpolicy 1\nserver \"🤖-bot\" { consent sometimes }\n",
    );
    let human = render::human(std::slice::from_ref(&report), Style::Plain);
    assert!(human.contains("[emoji.mcpolicy:2:26]"), "{human}");
}

/// A lone CR ends a line for the checker; the drawn snippet must agree.
#[test]
fn human_snippet_with_lone_cr_line_ends() {
    let report = check_text(
        "cr.mcpolicy",
        "mcpolicy 1\rdefaults {\r  consent sometimes\r}\r",
    );
    let human = render::human(std::slice::from_ref(&report), Style::Plain);
    assert!(human.contains("[cr.mcpolicy:3:11]"), "{human}");
    assert!(human.contains(" 3 |   consent sometimes"), "{human}");
    assert!(!human.contains('\r'), "{human:?}");
}

/// A stray control character is one mistake and should be one finding.
#[test]
fn control_character_is_one_finding() {
    let report = check_text(
        "ff.mcpolicy",
        "mcpolicy 1\ndefaults {\n  \u{c}consent first\n}\n",
    );
    assert_eq!(findings(&report), ["E0007@3:3"]);
}

/// A finding's words, for an exact expectation: code, message, label,
/// help and the fix it offers.
fn explained(d: &mcpolicy_compiler::diagnostic::Diagnostic) -> String {
    let fix = d.fix.as_ref().map_or("none".to_owned(), |f| {
        format!("{} -> {:?}", f.title, f.replacement)
    });
    format!(
        "{}: {}\nlabel: {}\nhelp: {}\nfix: {fix}",
        d.code,
        d.message,
        d.label,
        d.help.as_deref().unwrap_or("none")
    )
}

/// `1.5s` has a unit; the problem is the decimal, and the help offers the
/// same duration in a smaller unit (`1500ms`), not `1s`, which was not
/// meant, nor a complaint about a missing unit.
#[test]
fn decimal_duration_is_explained() {
    let report = check_text(
        "decimal.mcpolicy",
        "mcpolicy 1\ndefaults { deadline 1.5s }\n",
    );
    let [d] = &report.diagnostics[..] else {
        panic!("one finding: {:?}", report.diagnostics);
    };
    expect_test::expect![[r#"
        E0103: `deadline` takes whole numbers, found `1.5s`
        label: not a whole number
        help: write `1500ms`
        fix: write `1500ms` -> "1500ms""#]]
    .assert_eq(&explained(d));
}

/// The size-unit help names the unit the user wrote (`MB`), not always
/// `KB`, and the binary unit it most likely meant.
#[test]
fn size_unit_help_names_the_written_unit() {
    let report = check_text("mb.mcpolicy", "mcpolicy 1\ndefaults { max_input 1 MB }\n");
    let [d] = &report.diagnostics[..] else {
        panic!("one finding: {:?}", report.diagnostics);
    };
    expect_test::expect![[r#"
        E0104: unknown unit `MB`
        label: not a unit of size
        help: `MB` is as close to `1 MiB` as to `1 B`, which mean different things: write the one you mean
        fix: none"#]]
    .assert_eq(&explained(d));
    // Both readings are offered; `--fix` applies neither (docs/spec/language.md, "Fixes").
    let choices: Vec<&str> = d.choices.iter().map(|c| c.replacement.as_str()).collect();
    assert_eq!(choices, ["MiB", "B"]);
}

/// A bad `\u{…}` escape is one mistake: the `{…}` inside it is not a placeholder.
#[test]
fn bad_unicode_escape_is_not_also_a_placeholder() {
    let report = check_text(
        "escape.mcpolicy",
        "mcpolicy 1\nreason acme.x { retryable false; message \"bad \\u{D800}\" }\nserver \"a\" { sampling off as acme.x }\n",
    );
    let codes: Vec<Code> = report.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, [Code::E0004]);
}

/// A byte order mark is not a character an editor shows: the first
/// visible character of line 1 is column 1.
#[test]
fn bom_is_not_a_column() {
    let report = check_text("bom.mcpolicy", "\u{feff}mcpolicy 2\n");
    assert_eq!(findings(&report), ["E0202@1:10"]);
}

// ------------------------------------------------------ examples/invalid/*

/// Codes whose input cannot be committed as text; generated below.
const GENERATED: &[Code] = &[Code::E0005, Code::E0006];

#[test]
fn every_code_has_an_invalid_example() {
    let dir = repo_root().join("examples/invalid");
    for code in Code::ALL {
        if GENERATED.contains(code) {
            continue;
        }
        let path = dir.join(format!("{code}.mcpolicy"));
        assert!(path.exists(), "{} is missing", shown(&path));
        let report = check_text(&shown(&path), &read(&path));
        assert!(
            report.diagnostics.iter().any(|d| d.code == *code),
            "{} does not report {code}: {:?}",
            shown(&path),
            findings(&report)
        );
    }
    for entry in std::fs::read_dir(&dir).expect("examples/invalid") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "mcpolicy") {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            assert!(
                Code::parse(stem).is_some_and(|c| c.as_str() == stem),
                "{} is not named after a code",
                shown(&path)
            );
        }
    }
}

#[test]
fn invalid_examples() {
    insta::glob!("../../examples/invalid", "*.mcpolicy", |path| {
        let name = shown(path);
        let report = check_text(&name, &read(path));
        assert_expected(&name, &report);
        insta::assert_snapshot!(
            "invalid",
            render::human(std::slice::from_ref(&report), Style::Plain)
        );
    });
}

#[test]
fn e0005_not_utf8_is_generated() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("E0005.mcpolicy"),
        b"# E0005: a Latin-1 \xe9 in a comment, saved by an old editor.\nmcpolicy 1\n",
    )
    .expect("write");
    let run = Mcpc::new(&["check", "E0005.mcpolicy"])
        .cwd(dir.path())
        .run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("E0005"), "{run:?}");
    insta::assert_snapshot!("invalid@E0005.mcpolicy", run.stderr);
}

#[test]
fn e0006_too_large_is_generated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("E0006.mcpolicy");
    let mut file = std::fs::File::create(&path).expect("create");
    file.write_all(b"mcpolicy 1\n").expect("write");
    // Sparse: one byte over the limit without writing 64 MiB.
    file.set_len(mcpolicy_compiler::input::MAX_POLICY_BYTES + 1)
        .expect("set_len");
    drop(file);
    let run = Mcpc::new(&["check", "E0006.mcpolicy"])
        .cwd(dir.path())
        .limit(Duration::from_secs(120))
        .run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("E0006"), "{run:?}");
    insta::assert_snapshot!("invalid@E0006.mcpolicy", run.stderr);
}

// --------------------------------------------------------------- examples/*

#[test]
fn examples_are_clean_and_compile() {
    let mut count = 0;
    for entry in std::fs::read_dir(repo_root().join("examples")).expect("examples/") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "mcpolicy") {
            continue;
        }
        count += 1;
        let name = shown(&path);
        let text = read(&path);
        let report = check_text(&name, &text);
        assert!(
            report.diagnostics.is_empty(),
            "{name} is not clean:\n{}",
            render::human(std::slice::from_ref(&report), Style::Plain)
        );
        let db = Database::default();
        let source = SourceText::new(&db, name.clone(), text);
        assert!(
            db::lower_file(&db, source).is_some(),
            "{name} does not compile"
        );
        let run = Mcpc::new(&["check", "--deny-warnings", &name])
            .cwd(&repo_root())
            .run();
        assert_eq!(run.code, 0, "{run:?}");
        // Examples are kept in the canonical layout (`mcpc fmt`).
        let fmt = Mcpc::new(&["fmt", "--check", &name])
            .cwd(&repo_root())
            .run();
        assert_eq!(fmt.code, 0, "{name} is not formatted: {fmt:?}");
    }
    assert!(count >= 4, "only {count} examples");
}

// ------------------------------------------------------------ the binary

/// One run of the built `mcpc`, bounded in time.
struct Mcpc {
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    cwd: Option<PathBuf>,
    env: Vec<(String, Option<String>)>,
    limit: Duration,
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Mcpc {
    fn new(args: &[&str]) -> Self {
        Mcpc {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            stdin: None,
            cwd: None,
            env: vec![("NO_COLOR".to_owned(), Some("1".to_owned()))],
            limit: Duration::from_secs(60),
        }
    }

    fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    fn env(mut self, key: &str, value: Option<&str>) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.map(str::to_owned)));
        self
    }

    /// Generous: a guard against hangs in a debug build, not a benchmark.
    fn limit(mut self, limit: Duration) -> Self {
        self.limit = limit;
        self
    }

    /// Runs to completion; fails the test on a hang, a signal or a panic.
    fn run(self) -> Run {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcpc"));
        command
            .args(&self.args)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        for (key, value) in &self.env {
            match value {
                Some(v) => command.env(key, v),
                None => command.env_remove(key),
            };
        }
        let mut child = command.spawn().expect("spawn mcpc");
        let writer = self.stdin.clone().and_then(|bytes| {
            child.stdin.take().map(|mut pipe| {
                std::thread::spawn(move || {
                    // The child may stop reading early; that is its business.
                    let _ = pipe.write_all(&bytes);
                })
            })
        });
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                bytes
            })
        };
        let out = drain(Box::new(child.stdout.take().expect("stdout")));
        let err = drain(Box::new(child.stderr.take().expect("stderr")));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed() > self.limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "mcpc {:?} did not finish within {:?}",
                    self.args, self.limit
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        let stdout = String::from_utf8_lossy(&out.join().expect("stdout thread")).into_owned();
        let stderr = String::from_utf8_lossy(&err.join().expect("stderr thread")).into_owned();
        assert!(
            !stderr.contains("panicked"),
            "mcpc {:?} panicked:\n{stderr}",
            self.args
        );
        let code = status
            .code()
            .unwrap_or_else(|| panic!("mcpc {:?} was killed by a signal: {status}", self.args));
        Run {
            code,
            stdout,
            stderr,
        }
    }
}

/// Writes `bytes` to `name` in a fresh temporary directory.
fn temp_file(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write temp file");
    (dir, path)
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

const WARNING_ONLY: &str = "mcpolicy 1\nreason acme.unused { retryable false; ttl forever }\n";
const ONE_ERROR: &str = "mcpolicy 1\ndefaults {\n  max_tokens 4096\n  consent sometimes\n}\n";

#[test]
fn bad_input_not_utf8() {
    let (_dir, path) = temp_file(
        "latin1.mcpolicy",
        b"mcpolicy 1\nserver \"caf\xe9\" { sampling off }\n",
    );
    let run = Mcpc::new(&["check", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("E0005"), "{run:?}");
    assert!(run.stderr.contains("not valid UTF-8"), "{run:?}");
    assert!(run.stderr.contains("offset 22"), "{run:?}");
}

#[test]
fn bad_input_empty_file() {
    let (_dir, path) = temp_file("empty.mcpolicy", b"");
    let run = Mcpc::new(&["check", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("E0201"), "{run:?}");
    assert!(run.stderr.contains("no version line"), "{run:?}");
}

#[test]
fn bad_input_one_megabyte() {
    bad_input_of_size(1 << 20);
}

/// The full-size case costs seconds in a debug build, so `cargo test` runs
/// the 1 MiB one and `.ci/run` runs this with `--ignored`.
#[test]
#[ignore = "10 MiB: run by .ci/run with --ignored"]
fn bad_input_ten_megabytes() {
    bad_input_of_size(10 << 20);
}

/// A policy of at least `bytes` bytes, mostly valid with one line in ten
/// garbage: `mcpc check` reports it, capped, within the time limit.
fn bad_input_of_size(bytes: usize) {
    let mut text = String::from("mcpolicy 1\n");
    let mut i = 0u64;
    while text.len() < bytes {
        // Mostly valid blocks, one line in ten garbage of some kind; every
        // line padded with a comment to about 100 bytes.
        let line = match i % 10 {
            0 => format!("server \"svc-{i:07}\" {{"),
            1 => format!("  max_tokens {}", 1000 + i % 512),
            2 => "  rate 30 per 1m".to_owned(),
            3 => "  consent sometimes".to_owned(),
            4 => "}".to_owned(),
            5 => format!("this is garbage {i} !!! ))) ??? {{{{"),
            6 => "}".to_owned(),
            7 => format!("reason acme.r{i} {{ retryable true; ttl forever }}"),
            8 => format!("server \"x{i}\" {{ max_tokns 5; max_input 64 KB }}"),
            _ => "defaults { deadline 60 }".to_owned(),
        };
        text.push_str(&format!(
            "{line:<60} # padding to a realistic line length ....\n"
        ));
        i += 1;
    }
    assert!(text.len() >= bytes);
    let (_dir, path) = temp_file("big.mcpolicy", text.as_bytes());
    // A bound against a hang, not a speed target (speed lives in the
    // benches). The check is linear in the input (it once copied every
    // declared reason into each block's check: 1 MiB 9 s, 2 MiB 24 s in this
    // debug build); a release build checks 8 MiB of it in 1.4 s of CPU, and
    // this debug build 1 MiB in a few seconds.
    let run = Mcpc::new(&["check", path_str(&path)])
        .limit(Duration::from_secs(300))
        .run();
    assert_eq!(
        run.code,
        1,
        "{}",
        run.stderr.chars().take(2000).collect::<String>()
    );
    assert!(
        run.stderr.contains("more findings in"),
        "human output is capped"
    );
    assert!(run.stderr.contains("errors,"), "summary line");
}

#[test]
fn bad_input_one_megabyte_line_of_words() {
    let text = format!("mcpolicy 1\n{}\n", "bad ".repeat(1 << 18));
    let (_dir, path) = temp_file("wide.mcpolicy", text.as_bytes());
    let run = Mcpc::new(&["check", "--format", "json", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(json["diagnostics"][0]["code"], "E0001");
}

#[test]
fn bad_input_one_megabyte_server_id() {
    let text = format!(
        "mcpolicy 1\nserver \"{}\" {{ sampling off }}\n",
        "a".repeat(1 << 20)
    );
    let (_dir, path) = temp_file("long-id.mcpolicy", text.as_bytes());
    let run = Mcpc::new(&["check", path_str(&path)]).run();
    assert_eq!(run.code, 0, "{run:?}");
}

#[test]
fn bad_input_error_after_a_one_megabyte_id() {
    let text = format!(
        "mcpolicy 1\nserver \"{}\" {{ consent sometimes }}\n",
        "a".repeat(1 << 20)
    );
    let (_dir, path) = temp_file("long-id.mcpolicy", text.as_bytes());
    let run = Mcpc::new(&["check", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("E0107"), "{run:?}");
}

#[test]
fn bad_input_one_megabyte_word() {
    let text = format!("mcpolicy 1\n{}\n", "x".repeat(1 << 20));
    let (_dir, path) = temp_file("word.mcpolicy", text.as_bytes());
    let run = Mcpc::new(&["check", "--format", "json", path_str(&path)])
        .limit(Duration::from_secs(20))
        .run();
    assert_eq!(run.code, 1, "{run:?}");
}

#[test]
fn bad_input_ten_thousand_nested_braces() {
    for text in [
        format!("mcpolicy 1\n{}{}\n", "{".repeat(10_000), "}".repeat(10_000)),
        format!(
            "mcpolicy 1\ndefaults {}\n{}\n",
            "{".repeat(10_000),
            "}".repeat(10_000)
        ),
        format!("mcpolicy 1\nserver \"a\" {}\n", "{".repeat(10_000)),
    ] {
        let (_dir, path) = temp_file("braces.mcpolicy", text.as_bytes());
        let run = Mcpc::new(&["check", "--format", "json", path_str(&path)]).run();
        assert_eq!(run.code, 1, "{run:?}");
        let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
        assert!(json["summary"]["errors"].as_u64() >= Some(1));
        let human = Mcpc::new(&["check", path_str(&path)]).run();
        assert_eq!(human.code, 1);
    }
}

#[test]
fn bad_input_nul_byte() {
    let (_dir, path) = temp_file(
        "nul.mcpolicy",
        b"mcpolicy 1\ndefaults {\n  max_tokens 4096\n}\n\0\n",
    );
    let run = Mcpc::new(&["check", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("E0007"), "{run:?}");
    assert!(run.stderr.contains("U+0000"), "{run:?}");
}

/// A directory is read for its policies (cli/tests/directories.rs); one
/// with none is a usage error.
#[test]
fn bad_input_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Mcpc::new(&["check", path_str(dir.path())]).run();
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("no .mcpolicy files in this directory"),
        "{run:?}"
    );
}

#[test]
fn bad_input_missing_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nope.mcpolicy");
    let run = Mcpc::new(&["check", path_str(&missing)]).run();
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("cannot read"), "{run:?}");
    assert!(run.stderr.contains("nope.mcpolicy"), "{run:?}");
    // One missing file among good ones is still an I/O error.
    let (_keep, good) = temp_file("good.mcpolicy", b"mcpolicy 1\n");
    let run = Mcpc::new(&["check", path_str(&good), path_str(&missing)]).run();
    assert_eq!(run.code, 2, "{run:?}");
}

#[test]
fn usage_errors_exit_2() {
    for (args, says) in [
        (
            &["check"][..],
            "error: the following required arguments were not provided:",
        ),
        (
            &["check", "--format", "xml", "x.mcpolicy"],
            "error: invalid value 'xml' for '--format <FORMAT>'",
        ),
        (
            &["check", "--bogus", "x.mcpolicy"],
            "error: unexpected argument '--bogus' found",
        ),
        (
            &["frobnicate"],
            "error: unrecognized subcommand 'frobnicate'",
        ),
    ] {
        let run = Mcpc::new(args).run();
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        // The first line says why; the rest is usage.
        assert_eq!(run.stderr.lines().next(), Some(says), "{args:?}: {run:?}");
        assert!(
            run.stderr.contains("For more information, try '--help'."),
            "{args:?}: {run:?}"
        );
        assert_eq!(run.stdout, "", "{args:?}");
    }
}

#[test]
fn stdin_via_dash() {
    let clean = Mcpc::new(&["check", "-"]).stdin("mcpolicy 1\n").run();
    assert_eq!(clean.code, 0, "{clean:?}");
    assert!(clean.stdout.contains("<stdin>"), "{clean:?}");
    let bad = Mcpc::new(&["check", "-"]).stdin(ONE_ERROR).run();
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("<stdin>:4:11"), "{bad:?}");
    let not_utf8 = Mcpc::new(&["check", "-"])
        .stdin(&b"mcpolicy 1\n\xff\n"[..])
        .run();
    assert_eq!(not_utf8.code, 1, "{not_utf8:?}");
    assert!(not_utf8.stderr.contains("E0005"), "{not_utf8:?}");
    let empty = Mcpc::new(&["check", "-"]).stdin("").run();
    assert_eq!(empty.code, 1, "{empty:?}");
}

#[test]
fn format_json_parses() {
    let (_dir, path) = temp_file("one.mcpolicy", ONE_ERROR.as_bytes());
    let run = Mcpc::new(&["check", "--format", "json", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    let d = &json["diagnostics"][0];
    assert_eq!(d["code"], "E0107");
    assert_eq!(d["severity"], "error");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(4), Some(11))
    );
    assert_eq!(
        d["byte_start"].as_u64(),
        ONE_ERROR.find("sometimes").map(|b| b as u64)
    );
    // The words are the library's, unchanged.
    let library = &check_text("one.mcpolicy", ONE_ERROR).diagnostics[0];
    assert!(library.message.contains("sometimes"), "{library:?}");
    assert_eq!(d["message"], library.message.as_str());
    assert_eq!(d["label"], library.label.as_str());
    assert_eq!(d["help"].as_str(), library.help.as_deref());
    assert!(d["help"].is_string());
    assert_eq!(json["summary"]["errors"], 1);
    let clean = Mcpc::new(&["check", "--format", "json", "-"])
        .stdin("mcpolicy 1\n")
        .run();
    assert_eq!(clean.code, 0);
    let json: serde_json::Value = serde_json::from_str(&clean.stdout).expect("JSON");
    assert_eq!(json["diagnostics"].as_array().map(Vec::len), Some(0));
}

#[test]
fn format_sarif_has_the_2_1_0_shape() {
    let (_dir, path) = temp_file("one.mcpolicy", ONE_ERROR.as_bytes());
    let run = Mcpc::new(&["check", "--format", "sarif", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    let sarif: serde_json::Value = serde_json::from_str(&run.stdout).expect("SARIF is JSON");
    assert_eq!(sarif["version"], "2.1.0");
    let run0 = &sarif["runs"][0];
    let rules = run0["tool"]["driver"]["rules"].as_array().expect("rules");
    assert!(run0["tool"]["driver"]["name"].is_string());
    let ids: Vec<&str> = rules.iter().filter_map(|r| r["id"].as_str()).collect();
    for code in Code::ALL {
        assert!(ids.contains(&code.as_str()), "rule {code} missing");
    }
    let results = run0["results"].as_array().expect("results");
    assert_eq!(results.len(), 1);
    for result in results {
        let rule = result["ruleId"].as_str().expect("ruleId");
        assert!(ids.contains(&rule));
        if let Some(index) = result["ruleIndex"].as_u64() {
            assert_eq!(
                rules[index as usize]["id"], rule,
                "ruleIndex points at its rule"
            );
        }
        assert!(["error", "warning", "note"].contains(&result["level"].as_str().unwrap_or("")));
        assert!(result["message"]["text"].is_string());
        let physical = &result["locations"][0]["physicalLocation"];
        assert!(physical["artifactLocation"]["uri"].is_string());
        let region = &physical["region"];
        assert_eq!(region["startLine"].as_u64(), Some(4));
        assert_eq!(region["startColumn"].as_u64(), Some(11));
        assert!(region["endColumn"].as_u64() > region["startColumn"].as_u64());
    }
}

#[test]
fn format_github_annotations() {
    let (_dir, warn) = temp_file("warn.mcpolicy", WARNING_ONLY.as_bytes());
    let (_dir2, err) = temp_file("err.mcpolicy", ONE_ERROR.as_bytes());
    let run = Mcpc::new(&[
        "check",
        "--format",
        "github",
        path_str(&warn),
        path_str(&err),
    ])
    .run();
    assert_eq!(run.code, 1, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(lines.iter().any(|l| l.starts_with("::warning ")), "{run:?}");
    assert!(lines.iter().any(|l| l.starts_with("::error ")), "{run:?}");
    for line in lines {
        assert!(
            line.starts_with("::error ") || line.starts_with("::warning "),
            "{line}"
        );
        assert!(line.contains(",line=") && line.contains(",col="), "{line}");
    }
}

#[test]
fn deny_warnings_flips_the_exit_code() {
    let (_dir, path) = temp_file("warn.mcpolicy", WARNING_ONLY.as_bytes());
    let lenient = Mcpc::new(&["check", path_str(&path)]).run();
    assert_eq!(lenient.code, 0, "{lenient:?}");
    assert!(lenient.stderr.contains("W0410"), "{lenient:?}");
    let strict = Mcpc::new(&["check", "--deny-warnings", path_str(&path)]).run();
    assert_eq!(strict.code, 1, "{strict:?}");
    for format in ["json", "sarif", "github"] {
        let run = Mcpc::new(&[
            "check",
            "--deny-warnings",
            "--format",
            format,
            path_str(&path),
        ])
        .run();
        assert_eq!(run.code, 1, "{format}: {run:?}");
    }
}

#[test]
fn no_color_means_no_escape_bytes() {
    let (_dir, path) = temp_file("one.mcpolicy", ONE_ERROR.as_bytes());
    // Colour forced on: the control, so that the test can fail.
    let coloured = Mcpc::new(&["check", "--color", "always", path_str(&path)])
        .env("NO_COLOR", None)
        .run();
    assert!(coloured.stderr.contains('\u{1b}'), "--color always colours");
    for args in [
        &["check", "--color", "always", path_str(&path)][..],
        &["check", path_str(&path)],
    ] {
        let run = Mcpc::new(args).env("NO_COLOR", Some("1")).run();
        assert_eq!(run.code, 1);
        assert!(
            !run.stderr.contains('\u{1b}'),
            "ESC under NO_COLOR: {run:?}"
        );
        assert!(!run.stdout.contains('\u{1b}'));
        assert!(run.stderr.is_ascii(), "plain output is ASCII: {run:?}");
    }
    // Not a terminal and no NO_COLOR: still plain.
    let piped = Mcpc::new(&["check", path_str(&path)])
        .env("NO_COLOR", None)
        .run();
    assert!(!piped.stderr.contains('\u{1b}'), "{piped:?}");
}

#[test]
fn explain_prints_the_long_text() {
    let run = Mcpc::new(&["explain", "E0103"]).run();
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("E0103"), "{run:?}");
    assert!(run.stdout.contains(Code::E0103.summary()), "{run:?}");
    assert!(run.stdout.contains(Code::E0103.explanation()), "{run:?}");
    let lower = Mcpc::new(&["explain", "e0103"]).run();
    assert_eq!(lower.stdout, run.stdout);
    let list = Mcpc::new(&["explain", "--list"]).run();
    assert_eq!(list.code, 0);
    for code in Code::ALL {
        assert!(list.stdout.contains(code.as_str()), "{code} not listed");
    }
}

#[test]
fn explain_unknown_code_exits_2() {
    let run = Mcpc::new(&["explain", "E9999"]).run();
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("E9999"), "{run:?}");
    assert!(run.stdout.is_empty());
}

#[test]
fn compile_refuses_a_policy_with_errors() {
    let (_dir, path) = temp_file("one.mcpolicy", ONE_ERROR.as_bytes());
    let run = Mcpc::new(&["compile", path_str(&path)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.is_empty(), "no table for a broken policy");
    assert!(run.stderr.contains("E0107"), "{run:?}");
}

#[test]
fn several_files_in_one_run() {
    let (_a, clean) = temp_file("clean.mcpolicy", b"mcpolicy 1\n");
    let (_b, warn) = temp_file("warn.mcpolicy", WARNING_ONLY.as_bytes());
    let (_c, err) = temp_file("err.mcpolicy", ONE_ERROR.as_bytes());
    let run = Mcpc::new(&["check", path_str(&clean), path_str(&warn), path_str(&err)]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("1 error, 1 warning in 3 files"),
        "{run:?}"
    );
    let json = Mcpc::new(&[
        "check",
        "--format",
        "json",
        path_str(&clean),
        path_str(&warn),
    ])
    .run();
    assert_eq!(json.code, 0, "{json:?}");
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(doc["files"].as_array().map(Vec::len), Some(2));
    assert_eq!(doc["summary"]["warnings"], 1);
}

#[test]
fn compile_writes_a_table_for_each_example() {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["personal-laptop", "team-gateway", "ci-agent", "cost-capped"] {
        let policy = repo_root().join(format!("examples/{name}.mcpolicy"));
        let table = dir.path().join(format!("{name}.json"));
        let run = Mcpc::new(&["compile", path_str(&policy), "-o", path_str(&table)]).run();
        assert_eq!(run.code, 0, "{name}: {run:?}");
        let doc: serde_json::Value =
            serde_json::from_str(&read(&table)).expect("the table is JSON");
        assert_eq!(doc["format"], "mcpolicy-table/1", "{name}");
        assert!(
            doc["servers"].as_array().is_some_and(|s| !s.is_empty()),
            "{name}"
        );
    }
}
