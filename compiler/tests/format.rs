//! The formatter's data-driven suite.
//!
//! Every `tests/cases/format/NAME.mcpolicy` is a messy but valid policy; its
//! canonical layout is `NAME.formatted.mcpolicy` next to it (regenerate with
//! `UPDATE_EXPECT=1 cargo test -p mcpolicy-compiler --test format`). Each case
//! is also checked for idempotence, meaning preservation (the lowered table is
//! identical and no diagnostic is added), comment preservation, and stability
//! under whitespace shuffling and CRLF/BOM variants. Every file under
//! `refused/` has syntax errors and must be refused with diagnostics.

use std::fs;
use std::path::{Path, PathBuf};

use mcpolicy_compiler::codes::Severity;
use mcpolicy_compiler::format::{format, is_formatted};
use mcpolicy_compiler::{check, lower, parse};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/cases/format")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(name, input)` for every valid case, sorted by name.
fn cases() -> Vec<(String, String)> {
    let mut cases: Vec<_> = fs::read_dir(cases_dir())
        .expect("tests/cases/format exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".mcpolicy") && !name.ends_with(".formatted.mcpolicy")
        })
        .map(|p| {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_owned();
            (name, read(&p))
        })
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "too few format cases: {}", cases.len());
    cases
}

/// The valid cases plus the examples shipped in `examples/`.
fn cases_and_examples() -> Vec<(String, String)> {
    let mut all = cases();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    if let Ok(entries) = fs::read_dir(&examples) {
        let mut paths: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "mcpolicy"))
            .collect();
        paths.sort();
        for path in paths {
            all.push((format!("examples/{}", path.display()), read(&path)));
        }
    }
    all
}

fn formatted(name: &str, input: &str) -> String {
    format(input).unwrap_or_else(|e| panic!("{name}: refused: {:#?}", e.diagnostics))
}

#[test]
fn golden_layout() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut failures = Vec::new();
    for (name, input) in cases() {
        let actual = formatted(&name, &input);
        let expected_path = cases_dir().join(name.replace(".mcpolicy", ".formatted.mcpolicy"));
        if update {
            fs::write(&expected_path, &actual).expect("write expected output");
            continue;
        }
        let expected = fs::read_to_string(&expected_path).unwrap_or_default();
        if actual != expected {
            failures.push(format!(
                "{name}: formatted output differs from {}\n--- expected\n{expected}\n--- actual\n{actual}",
                expected_path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(rerun with UPDATE_EXPECT=1 to accept)",
        failures.join("\n")
    );
}

#[test]
fn idempotent() {
    for (name, input) in cases_and_examples() {
        let once = formatted(&name, &input);
        let twice = formatted(&name, &once);
        assert_eq!(twice, once, "{name}: formatting is not idempotent");
        assert_eq!(is_formatted(&once).ok(), Some(true), "{name}");
    }
}

#[test]
fn expected_outputs_are_canonical() {
    for (name, _) in cases() {
        let path = cases_dir().join(name.replace(".mcpolicy", ".formatted.mcpolicy"));
        let Ok(expected) = fs::read_to_string(&path) else {
            continue;
        };
        assert_eq!(
            formatted(&name, &expected),
            expected,
            "{}: not a fixed point",
            path.display()
        );
    }
}

/// Diagnostic codes of parsing and checking, sorted.
fn codes(text: &str) -> Vec<String> {
    let parsed = parse::parse(text);
    let analysis = check::check(&parsed.file);
    let mut codes: Vec<String> = parsed
        .diagnostics
        .iter()
        .chain(&analysis.diagnostics)
        .map(|d| d.code.to_string())
        .collect();
    codes.sort();
    codes
}

#[test]
fn meaning_is_preserved() {
    for (name, input) in cases_and_examples() {
        let output = formatted(&name, &input);
        let before = lower::lower(&check::check(&parse::parse(&input).file).model);
        let after = lower::lower(&check::check(&parse::parse(&output).file).model);
        assert_eq!(after, before, "{name}: the lowered table changed");

        let (before, after) = (codes(&input), codes(&output));
        let mut remaining = before.clone();
        for code in &after {
            let Some(at) = remaining.iter().position(|c| c == code) else {
                panic!(
                    "{name}: formatting added diagnostic {code} (before {before:?}, after {after:?})"
                );
            };
            remaining.remove(at);
        }
    }
}

#[test]
fn every_comment_is_kept_in_order() {
    for (name, input) in cases_and_examples() {
        let output = formatted(&name, &input);
        let texts = |text: &str| -> Vec<String> {
            parse::parse(text)
                .file
                .comments
                .iter()
                .map(|c| c.text.trim_end().to_owned())
                .collect()
        };
        let (before, after) = (texts(&input), texts(&output));
        assert_eq!(after, before, "{name}: comments differ");
        for comment in &before {
            assert!(
                output.contains(comment.as_str()),
                "{name}: lost {comment:?}"
            );
        }
    }
}

#[test]
fn refuses_files_with_syntax_errors() {
    let dir = cases_dir().join("refused");
    let mut paths: Vec<_> = fs::read_dir(&dir)
        .expect("tests/cases/format/refused exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "mcpolicy"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 5);
    for path in paths {
        let input = fs::read_to_string(&path).expect("readable case");
        match format(&input) {
            Ok(output) => panic!("{}: formatted a broken file:\n{output}", path.display()),
            Err(error) => {
                assert!(
                    !error.diagnostics.is_empty(),
                    "{}: refused without diagnostics",
                    path.display()
                );
                assert!(
                    error
                        .diagnostics
                        .iter()
                        .all(|d| d.severity() == Severity::Error),
                    "{}: warnings in the refusal: {:?}",
                    path.display(),
                    error.diagnostics
                );
                assert!(error.to_string().contains("syntax error"));
            }
        }
    }
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn blanks(&mut self) -> String {
        (0..1 + self.below(4))
            .map(|_| if self.chance(70) { ' ' } else { '\t' })
            .collect()
    }
}

/// One lexeme of a policy, as far as whitespace shuffling needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lexeme {
    /// Spaces and tabs (and byte-order marks).
    Space,
    /// `\n`, `\r\n` or `\r`.
    Break,
    /// `# …` to the end of the line.
    Comment,
    /// `"…"`.
    Str,
    /// `{ } ; ,`.
    Punct,
    /// Anything else: keywords, numbers with their units, names.
    Word,
}

fn lex(text: &str) -> Vec<(Lexeme, &str)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let c = rest.chars().next().unwrap_or(' ');
        let len = match c {
            ' ' | '\t' | '\u{FEFF}' => rest
                .find(|c: char| !matches!(c, ' ' | '\t' | '\u{FEFF}'))
                .unwrap_or(rest.len()),
            '\r' if bytes.get(i + 1) == Some(&b'\n') => 2,
            '\n' | '\r' => 1,
            '#' => rest.find(['\n', '\r']).unwrap_or(rest.len()),
            '"' => {
                let mut end = 1;
                let mut escaped = false;
                for (k, ch) in rest.char_indices().skip(1) {
                    end = k + ch.len_utf8();
                    if escaped {
                        escaped = false;
                    } else if ch == '\\' {
                        escaped = true;
                    } else if ch == '"' {
                        break;
                    }
                }
                end
            }
            '{' | '}' | ';' | ',' => 1,
            _ => rest
                .find(|c: char| {
                    matches!(
                        c,
                        ' ' | '\t' | '\u{FEFF}' | '\n' | '\r' | '#' | '"' | '{' | '}' | ';' | ','
                    )
                })
                .unwrap_or(rest.len()),
        };
        let kind = match c {
            ' ' | '\t' | '\u{FEFF}' => Lexeme::Space,
            '\n' | '\r' => Lexeme::Break,
            '#' => Lexeme::Comment,
            '"' => Lexeme::Str,
            '{' | '}' | ';' | ',' => Lexeme::Punct,
            _ => Lexeme::Word,
        };
        out.push((kind, &rest[..len.max(1)]));
        i += len.max(1);
    }
    out
}

/// Re-spaces a valid policy without changing what the grammar reads: runs of
/// spaces become other runs of spaces and tabs, blanks appear next to
/// punctuation, strings, comments and line starts/ends, line breaks turn
/// into CRLF, and blank lines are added only where a blank line (or the start
/// or end of the file) already is, since a single user blank line is kept.
fn shuffle(text: &str, rng: &mut Rng) -> String {
    let lexemes = lex(text);
    let mut out = String::new();
    if rng.chance(30) {
        out.push('\u{FEFF}');
    }
    if rng.chance(30) {
        out.push_str("\n\n");
    }
    let is_blank_line = |k: usize| -> bool {
        // Whether lexeme `k` (a break) is followed by an empty line.
        lexemes[k + 1..]
            .iter()
            .take_while(|(kind, _)| *kind != Lexeme::Break)
            .all(|(kind, _)| *kind == Lexeme::Space)
            && lexemes[k + 1..]
                .iter()
                .any(|(kind, _)| *kind == Lexeme::Break)
    };
    for (k, (kind, piece)) in lexemes.iter().enumerate() {
        let previous = k.checked_sub(1).map(|p| lexemes[p].0);
        let spaced = |other: Option<Lexeme>| {
            matches!(
                other,
                None | Some(Lexeme::Space | Lexeme::Break | Lexeme::Str | Lexeme::Punct)
            )
        };
        match kind {
            Lexeme::Space => out.push_str(&rng.blanks()),
            Lexeme::Break => {
                if rng.chance(30) {
                    out.push_str(&rng.blanks());
                }
                out.push_str(if rng.chance(50) { "\r\n" } else { "\n" });
                if is_blank_line(k) && rng.chance(50) {
                    out.push_str("\n \t\r\n");
                }
            }
            _ => {
                if (spaced(previous)
                    || matches!(kind, Lexeme::Str | Lexeme::Punct | Lexeme::Comment))
                    && previous != Some(Lexeme::Space)
                    && rng.chance(40)
                {
                    out.push_str(&rng.blanks());
                }
                out.push_str(piece);
            }
        }
    }
    if rng.chance(50) {
        out.push_str(" \n\r\n\t\n");
    }
    out
}

#[test]
fn whitespace_shuffling_does_not_change_the_layout() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (name, input) in cases_and_examples() {
        let expected = formatted(&name, &input);
        for round in 0..40 {
            let source = if round % 2 == 0 { &input } else { &expected };
            let shuffled = shuffle(source, &mut rng);
            let actual = format(&shuffled).unwrap_or_else(|e| {
                panic!(
                    "{name} round {round}: shuffled input refused: {:?}\n{shuffled:?}",
                    e.diagnostics
                )
            });
            assert_eq!(
                actual, expected,
                "{name} round {round}: shuffled input formats differently\n{shuffled:?}"
            );
        }
    }
}

#[test]
fn crlf_bom_and_lf_agree() {
    for (name, input) in cases() {
        let expected = formatted(&name, &input);
        let lf = input.replace("\r\n", "\n");
        for variant in [
            lf.replace('\n', "\r\n"),
            format!("\u{FEFF}{lf}"),
            format!("\u{FEFF}{}", lf.replace('\n', "\r\n")),
            lf.replace('\n', "\r"),
            lf.clone(),
        ] {
            assert_eq!(formatted(&name, &variant), expected, "{name}: {variant:?}");
        }
    }
}

#[test]
fn output_is_plain() {
    for (name, input) in cases_and_examples() {
        let output = formatted(&name, &input);
        assert!(!output.contains('\r'), "{name}: CR in output");
        assert!(!output.contains('\u{FEFF}'), "{name}: BOM in output");
        assert!(
            !output.contains(';')
                || output.lines().all(|l| {
                    // `;` survives only inside one-line reasons, strings and comments.
                    !l.contains(';')
                        || l.starts_with("reason ")
                        || l.contains('"')
                        || l.contains('#')
                }),
            "{name}: stray `;`"
        );
        for line in output.lines() {
            assert_eq!(line, line.trim_end(), "{name}: trailing whitespace");
            assert!(!line.starts_with('\t'), "{name}: tab indentation");
        }
        assert!(!output.contains("\n\n\n"), "{name}: two blank lines");
        assert!(output.is_empty() || (output.ends_with('\n') && !output.ends_with("\n\n")));
        assert!(!output.starts_with('\n'), "{name}: leading blank line");
    }
}

#[test]
fn refusal_reports_each_problem() {
    let input = "mcpolicy 1\nservr \"x\" { sampling off }\nserver \"a\" {\n  max_tokens lots\n}\nreason a.b { retryable true\n";
    let error = format(input).expect_err("broken file refused");
    let codes: Vec<String> = error
        .diagnostics
        .iter()
        .map(|d| d.code.to_string())
        .collect();
    assert!(codes.contains(&"E0001".to_owned()), "{codes:?}");
    assert!(codes.contains(&"E0003".to_owned()), "{codes:?}");
    assert!(codes.len() >= 3, "{codes:?}");
}

#[test]
fn large_policy_formats() {
    let mut input = String::from("mcpolicy 1\ndefaults { max_tokens 4096; rate 30 per 1m }\n");
    for i in 0..2_000 {
        input.push_str(&format!(
            "server \"srv-{i}\" {{ budget {i} requests per day; max_input 64KiB }}  # server {i}\n"
        ));
    }
    let once = format(&input).expect("formats");
    assert_eq!(once.lines().count(), 6 + 2_000 * 5);
    assert_eq!(format(&once).expect("formats again"), once);
}

/// Random edits (deleting, duplicating or inserting characters the grammar
/// cares about) turn the cases into many odd files. The formatter must never
/// panic; whenever it accepts one, the result must be idempotent, keep the
/// meaning and keep every comment.
#[test]
fn mutated_inputs_are_refused_or_formatted_faithfully() {
    const PIECES: &[&str] = &[
        "{",
        "}",
        ";",
        "\n",
        "\r\n",
        "\r",
        " ",
        "\t",
        "# c",
        "#",
        "\"",
        ",",
        "server \"m\" {",
        "}\n",
        "defaults {",
        "reason m.n {",
        "ttl 1s",
        "sampling off",
        "\u{FEFF}",
        "1",
        "k",
        " KiB",
        "\\",
        "\\u{41}",
        "mcpolicy 1\n",
    ];
    // More rounds for a longer hunt: FORMAT_MUTATION_ROUNDS=5000.
    let rounds = std::env::var("FORMAT_MUTATION_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(80);
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut accepted = 0;
    for (name, input) in cases() {
        for round in 0..rounds {
            let mut text = input.clone();
            for _ in 0..1 + rng.below(3) {
                let boundaries: Vec<usize> = (0..=text.len())
                    .filter(|&i| text.is_char_boundary(i))
                    .collect();
                let at = boundaries[rng.below(boundaries.len() as u64) as usize];
                match rng.below(3) {
                    0 => {
                        let end = boundaries.iter().copied().find(|&b| b > at).unwrap_or(at);
                        text.replace_range(at..end, "");
                    }
                    _ => {
                        let piece = PIECES[rng.below(PIECES.len() as u64) as usize];
                        text.insert_str(at, piece);
                    }
                }
            }
            let Ok(once) = format(&text) else {
                continue;
            };
            accepted += 1;
            let context = format!("{name} round {round}: {text:?}");
            assert_eq!(
                format(&once).as_ref(),
                Ok(&once),
                "{context}: not idempotent"
            );
            let before = lower::lower(&check::check(&parse::parse(&text).file).model);
            let after = lower::lower(&check::check(&parse::parse(&once).file).model);
            assert_eq!(after, before, "{context}: meaning changed");
            let comments = |t: &str| -> Vec<String> {
                parse::parse(t)
                    .file
                    .comments
                    .iter()
                    .map(|c| c.text.trim_end().to_owned())
                    .collect()
            };
            assert_eq!(
                comments(&once),
                comments(&text),
                "{context}: comments changed"
            );
            assert!(
                codes(&once).len() <= codes(&text).len(),
                "{context}: diagnostics added"
            );
        }
    }
    assert!(
        accepted > rounds,
        "only {accepted} mutated files were accepted"
    );
}

// `mcpc fmt FILE` on the file system, through the real binary (symlinks,
// permissions, hard links): `cli/tests/fmt.rs`, beside the binary.
