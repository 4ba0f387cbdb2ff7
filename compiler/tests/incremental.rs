//! The database parses a file item by item (`parse::item_starts`,
//! `db::parse_item`, `parse::assemble`); these tests hold it to the
//! whole-file parse, `parse::parse`, which stays the reference:
//!
//! - every policy in the repository (`tests/cases/**`, `examples/**`),
//!   generated policies, hostile inputs, and thousands of randomly edited
//!   versions of them give an EQUAL tree, comment list and findings (the
//!   whole `Parsed` value, spans included) and equal diagnostics, both
//!   without a database and through one salsa database that sees every
//!   edit in turn (so its reused items are exercised), and through a
//!   one-pass (`Database::default`, as `mcpc`) database;
//! - an edit inside one `server` block re-parses that item alone, even when
//!   it moves every item after it (salsa's `WillExecute` events).

use std::path::{Path, PathBuf};

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::parse;
use salsa::Setter;

#[path = "../examples/gen_policy.rs"]
#[allow(dead_code)]
mod gen_policy;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compiler/ lives in the repository root")
        .to_path_buf()
}

fn policies_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            policies_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "mcpolicy") {
            out.push(path);
        }
    }
}

/// Every policy in the repository, generated ones, and hostile inputs.
fn corpus() -> Vec<(String, String)> {
    let root = repo_root();
    let mut paths = Vec::new();
    policies_under(&root.join("tests/cases"), &mut paths);
    policies_under(&root.join("examples"), &mut paths);
    paths.sort();
    let mut corpus: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            (p.display().to_string(), text)
        })
        .collect();
    assert!(
        corpus.len() >= 100,
        "expected the repository's policies, found {}",
        corpus.len()
    );
    for (seed, globs_percent) in [(1, 5), (2, 50), (3, 0)] {
        corpus.push((
            format!("generated seed {seed}"),
            gen_policy::generate(gen_policy::Options {
                servers: 25,
                seed,
                globs_percent,
            }),
        ));
    }
    let hostile = [
        String::new(),
        "{".repeat(10_000),
        "}".repeat(10_000),
        "\0\0\0".to_owned(),
        "server \"a\" { models \"\\".to_owned(),
        "servr \"x\" {\nserver \"a\" { sampling off }\n}\nserver \"b\" {}\n".to_owned(),
        "server \"a\" {\n  sampling off\nserver \"b\" { sampling on }\nreason r {\n".to_owned(),
        "server \"a\" { foo \"}\" }\nserver \"b\" {}\n# {\nserver \"c\" {}\n".to_owned(),
        "mcpolicy 1\r\nserver \"a\" {}\rserver \"b\" {}\r\n\rreason x {}\n".to_owned(),
        "server\t\u{FEFF} \"a\" {}\nserver# x\nserver\"b\"{}\nservers \"c\" {}\n".to_owned(),
        "defaults {\n max_tokens 1\n}\nmcpolicy.x\nreason_x\nidentity\u{0}a\nerror_code -1\n"
            .to_owned(),
        (0..300)
            .map(|i| match i % 4 {
                0 => format!("reason r{i}\n"),
                1 => format!("server \"s{i}\" {{}}\n"),
                2 => format!(
                    "server \"t{i}\" {{\n  sampling off\n  max_tokens {i}\n  consent first\n}}\n"
                ),
                _ => format!("identity messages\nerror_code -{i}\n"),
            })
            .collect(),
    ];
    for (i, text) in hostile.into_iter().enumerate() {
        corpus.push((format!("hostile {i}"), text));
    }
    corpus
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Text an edit inserts: everything the splitter and the grammar treat
/// specially, whole items, and fragments of them.
const SNIPPETS: &[&str] = &[
    "{",
    "}",
    "\"",
    "#",
    "\n",
    "\r",
    "\r\n",
    ";",
    "\\",
    " ",
    "\t",
    "\0",
    "\u{FEFF}",
    "é",
    "😀",
    "x",
    "0",
    "server",
    "server \"",
    "\nserver \"n\" {",
    "\nserver \"n\" { sampling off }\n",
    "\nreason acme.r { ttl 1s }\n",
    "\nreason ",
    "\ndefaults {\n",
    "\nmcpolicy 1\n",
    "\nprotocol 2025-11-25\n",
    "\nidentity messages\n",
    "\nerror_code -32010",
    "\n}\n",
    "# {\n",
    "models \"a}\", \"{b\"",
    "message \"\\u{7D}\"",
    "max_tokens 4096",
    "budget 5 tokens per day as acme.r",
    "\nservr \"y\" {",
];

/// A random edit: replace a short range (possibly empty) by a snippet
/// (possibly empty), on character boundaries.
fn edit(text: &str, rng: &mut Rng) -> String {
    let mut start = rng.below(text.len() + 1);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + rng.below(4) * rng.below(8)).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let insert = if rng.below(5) == 0 {
        ""
    } else {
        SNIPPETS[rng.below(SNIPPETS.len())]
    };
    let mut out = String::with_capacity(text.len() + insert.len());
    out.push_str(&text[..start]);
    out.push_str(insert);
    out.push_str(&text[end..]);
    out
}

/// Both paths agree on `text`: without a database, and through `db`'s
/// `source` (set to `text` first).
fn assert_same(name: &str, text: &str, db: &mut Database, source: SourceText) {
    let reference = parse::parse(text);
    let by_items = parse::parse_by_items(text);
    assert!(
        by_items == reference,
        "{name}: item-by-item parse differs from the whole-file parse\n--- text ---\n{text:?}\n\
         --- whole ---\n{reference:#?}\n--- by items ---\n{by_items:#?}"
    );
    for threads in [2, 5] {
        let parallel = parse::parse_parallel(text, threads);
        assert!(
            parallel == reference,
            "{name}: the parse on {threads} threads differs from the whole-file parse\n--- text ---\n{text:?}"
        );
    }
    source.set_text(db).to(text.to_owned());
    let through_db = db::parse_file(db, source);
    assert!(
        *through_db == reference,
        "{name}: the database's parse differs from the whole-file parse\n--- text ---\n{text:?}"
    );
    let expected = db::analyze_parsed(&reference);
    assert_eq!(
        db::diagnostics(db, source),
        expected.diagnostics.as_slice(),
        "{name}: diagnostics differ\n--- text ---\n{text:?}"
    );
    assert_eq!(
        db::analyze(db, source).model,
        expected.model,
        "{name}: model differs"
    );
}

#[test]
fn item_by_item_parse_equals_whole_file_parse() {
    let mut db = Database::incremental();
    let mut batch = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), String::new());
    let batch_source = SourceText::new(&batch, "p.mcpolicy".into(), String::new());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut split = 0;
    // More with `MCPOLICY_DIFF_EDITS=2000 cargo test --release …`.
    let edits: usize = std::env::var("MCPOLICY_DIFF_EDITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    for (name, text) in corpus() {
        split += usize::from(parse::item_starts(&text).len() > 1);
        assert_same(&name, &text, &mut db, source);
        assert_same(&name, &text, &mut batch, batch_source);
        // A chain of edits, each on the text the previous one left, so the
        // later ones hit files already broken in several places.
        let mut edited = text;
        for step in 0..edits {
            edited = edit(&edited, &mut rng);
            assert_same(&format!("{name}, edit {step}"), &edited, &mut db, source);
        }
    }
    assert!(split > 50, "the splitter cut only {split} files");
}

/// The cuts are where the doc comment of `item_starts` says, and no others
/// (every item here is at least `SMALL_ITEM` bytes long, so every safe
/// boundary is cut).
#[test]
fn item_starts_cuts_only_at_certain_boundaries() {
    let text = "mcpolicy 1\n\
                server \"a\" { sampling off }\n\
                # a comment\n\
                \x20server \"indented\" {}\n\
                server \"b\" {\n  sampling off\n\
                server \"c\" { x }\n\
                reason r {\n# }\n\
                servr \"d\" {\n\
                server \"e\" {}\n\
                }\n\
                defaults {}\r\
                servers \"f\" {}\n\
                server\t\"g\"";
    // A padding line after each line: no brace, no keyword.
    let pad = format!("# {}", "-".repeat(parse::SMALL_ITEM));
    let text = text
        .split_inclusive(['\n', '\r'])
        .map(|line| match line.strip_suffix('\r') {
            Some(line) => format!("{line}\r{pad}\r"),
            None => format!("{}\n{pad}\n", line.trim_end_matches('\n')),
        })
        .collect::<String>();
    let at = |needle: &str| text.find(needle).expect("needle");
    assert_eq!(
        parse::item_starts(&text),
        vec![
            0,
            at("server \"a\""),
            // not the indented server: a blank before the keyword
            at("server \"b\""),
            // `server "c"`: after b's open `{` (its statements end there)
            at("reason r"),
            // `servr` is no item start; `server "e"` follows servr's open `{`
            at("defaults"),
            // `servers` is not the keyword
            at("server\t\"g\""),
        ]
    );
    assert_eq!(parse::parse_by_items(&text), parse::parse(&text));
}

/// A run of small items is cut into pieces of a few items each, not one
/// piece per item (a piece costs the database about a kilobyte), and an
/// edit in the run re-parses only the pieces around it.
#[test]
fn small_items_are_grouped() {
    let text: String = (0..2_000).map(|i| format!("reason r{i}\n")).collect();
    let pieces = parse::item_starts(&text).len();
    assert!((100..=600).contains(&pieces), "{pieces} pieces");
    let mut db = Database::with_log();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.clone());
    assert_eq!(*db::parse_file(&db, source), parse::parse(&text));
    db.take_log();
    let edited = text.replacen("reason r1000\n", "reason r1000x\n", 1);
    source.set_text(&mut db).to(edited.clone());
    assert_eq!(*db::parse_file(&db, source), parse::parse(&edited));
    let log = db.take_log();
    let parsed = log.iter().filter(|q| q.starts_with("parse_item")).count();
    assert!((1..=2).contains(&parsed), "{log:?}");
}

/// A one-pass database does not parse item by item.
#[test]
fn batch_database_parses_in_one_pass() {
    let block = format!("{{\n  # {}\n}}\n", "-".repeat(parse::SMALL_ITEM));
    let text = &format!("mcpolicy 1 # {block}server \"a\" {block}server \"b\" {block}");
    let mut db = Database::with_log();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    assert_eq!(*db::parse_file(&db, source), parse::parse(text));
    let log = db.take_log();
    assert_eq!(
        log.iter().filter(|q| q.starts_with("parse_item")).count(),
        3,
        "{log:?}"
    );
    db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    assert_eq!(*db::parse_file(&db, source), parse::parse(text));
    assert!(db::ParseMode::try_get(&db).is_none());
}

/// A batch database parses a file past `parse::PARALLEL_FROM` on several
/// threads: the same tree and findings as one pass, for the file as
/// generated and after random edits (which break it in places, some
/// across the cuts between threads).
#[test]
fn a_large_file_parsed_on_several_threads_is_parsed_as_in_one_pass() {
    let text = gen_policy::generate(gen_policy::Options {
        servers: 2_000,
        seed: 7,
        globs_percent: 5,
    });
    assert!(text.len() >= parse::PARALLEL_FROM, "{} bytes", text.len());
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut edited = text;
    for step in 0..6 {
        let db = Database::default();
        let source = SourceText::new(&db, "big.mcpolicy".into(), edited.clone());
        let reference = parse::parse(&edited);
        assert!(
            *db::parse_file(&db, source) == reference,
            "edit {step}: the batch parse differs from one pass"
        );
        assert_eq!(
            db::diagnostics(&db, source),
            db::analyze_parsed(&reference).diagnostics.as_slice(),
            "edit {step}"
        );
        for _ in 0..20 {
            edited = edit(&edited, &mut rng);
        }
    }
}

/// An edit inside one `server` block of a 1,111-server policy re-parses
/// that block's item alone, though the edit moves every later item; the
/// untouched items' parses are reused, and the result is still the
/// whole-file parse.
#[test]
fn edit_in_one_server_block_reparses_only_that_item() {
    let text = gen_policy::generate(gen_policy::Options {
        servers: 1_111,
        seed: 3,
        globs_percent: 5,
    });
    let items = parse::item_starts(&text).len();
    // A few generated blocks are shorter than `SMALL_ITEM` and share a piece.
    assert!(items >= 1_000, "only {items} pieces");
    let mut db = Database::with_log();
    let source = SourceText::new(&db, "big.mcpolicy".into(), text.clone());
    assert!(db::diagnostics(&db, source).is_empty());
    let first = db.take_log();
    let parsed_items = |log: &[String]| log.iter().filter(|q| q.starts_with("parse_item")).count();
    assert_eq!(parsed_items(&first), items, "{:?}", &first[..5]);

    // Lengthen a statement in the middle of the file by one character.
    let middle = text.len() / 2;
    let server = middle + 1 + text[middle..].find("\nserver \"").expect("a server");
    let line_end = server + text[server..].find('\n').expect("a line break");
    let statement_end = line_end + 1 + text[line_end + 1..].find('\n').expect("a statement");
    let mut edited = text.clone();
    edited.insert_str(statement_end, "  # edited");
    source.set_text(&mut db).to(edited.clone());
    assert_eq!(*db::parse_file(&db, source), parse::parse(&edited));
    let log = db.take_log();
    assert_eq!(parsed_items(&log), 1, "{log:?}");
    assert!(log.iter().any(|q| q.starts_with("parse_file")), "{log:?}");

    // Undo: every piece's text is known again, so nothing is parsed.
    source.set_text(&mut db).to(text.clone());
    assert_eq!(*db::parse_file(&db, source), parse::parse(&text));
    let log = db.take_log();
    assert_eq!(parsed_items(&log), 0, "{log:?}");
}
