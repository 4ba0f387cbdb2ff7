//! The policy front end: hostile policy text through parse, check, render,
//! the editor's item-by-item parse, lowering, the table's JSON round trip,
//! the engine, and the formatter.

use std::sync::Arc;

use mcpolicy_compiler::codes::{Code, Severity};
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::diagnostic::Diagnostic;
use mcpolicy_compiler::render::{self, FileReport, Style};
use mcpolicy_compiler::syntax::Span;
use mcpolicy_compiler::{check, format, ide, input, lower, parse};
use mcpolicy_runtime::clock::FixedClock;
use mcpolicy_runtime::engine::ClientContext;
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::table::Table;
use mcpolicy_runtime::{Engine, Policy};

/// The text `mcpc` would check: bytes as `input::from_bytes` decodes them
/// (lossily when they are not UTF-8, with a finding), as a file would be.
fn text_of(data: &[u8]) -> (String, Option<Diagnostic>) {
    let loaded = input::from_bytes("fuzz.mcpolicy".to_owned(), data.to_vec());
    (loaded.text, loaded.problem)
}

fn assert_span(text: &str, span: Span, what: &str) {
    assert!(
        span.start <= span.end && span.end <= text.len(),
        "{what}: span {span:?} outside a text of {} bytes",
        text.len()
    );
    assert!(
        text.is_char_boundary(span.start) && text.is_char_boundary(span.end),
        "{what}: span {span:?} splits a character"
    );
}

/// `policy_check`: no panic from text to table; every span a renderer or
/// the editor slices by lies on character boundaries; the editor's
/// item-by-item parse equals the one-pass parse; the human report renders;
/// an error-free policy lowers to a table that survives its own JSON round
/// trip and decides a request.
pub fn check(data: &[u8]) {
    let (text, problem) = text_of(data);
    let parsed = parse::parse(&text);
    let analysis = db::analyze_parsed(&parsed);
    for d in &analysis.diagnostics {
        assert_span(&text, d.span, d.code.as_str());
        for related in &d.related {
            assert_span(&text, related.span, "related span");
        }
        if let Some(fix) = &d.fix {
            assert_span(&text, fix.span, "fix");
        }
    }
    // ARCHITECTURE: item-by-item parsing equals the one-pass parse.
    let by_items = parse::parse_by_items(&text);
    assert!(
        by_items == parsed,
        "the item-by-item parse differs from the one-pass parse"
    );
    let mut diagnostics = analysis.diagnostics.clone();
    diagnostics.extend(problem);
    let _ = render::human(&[report(&text, diagnostics)], Style::Plain);

    // A certain fix applied: the result is still checked without a panic.
    if let Some(fix) = analysis.diagnostics.iter().find_map(|d| d.fix.as_ref()) {
        let mut fixed = text.clone();
        fixed.replace_range(fix.span.start..fix.span.end, &fix.replacement);
        let _ = check::check(&parse::parse(&fixed).file);
    }
    if is_clean(&analysis.diagnostics) {
        compile(&lower::lower(&analysis.model));
    }
}

fn report(text: &str, diagnostics: Vec<Diagnostic>) -> FileReport {
    FileReport {
        path: "fuzz.mcpolicy".to_owned(),
        text: text.to_owned(),
        diagnostics,
    }
}

fn is_clean(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().all(|d| d.severity() != Severity::Error)
}

/// `policy_ide`: what an editor and CI do with a hostile policy: the
/// machine-readable reports (JSON and SARIF are valid JSON, GitHub
/// annotations render), the batch and the editor's databases lower to the
/// same table, and the language server's queries run at a few offsets,
/// all without a panic.
pub fn ide(data: &[u8]) {
    let (text, problem) = text_of(data);
    let mut diagnostics = db::analyze_parsed(&parse::parse(&text)).diagnostics;
    let clean = is_clean(&diagnostics);
    diagnostics.extend(problem);
    let reports = [report(&text, diagnostics)];
    let _ = render::github(&reports);
    for (name, out) in [
        ("json", render::json(&reports)),
        ("sarif", render::sarif(&reports)),
    ] {
        if let Err(e) = serde_json::from_str::<serde_json::Value>(&out) {
            panic!("render::{name} wrote invalid JSON ({e})");
        }
    }
    editor(&text, clean);
}

/// The table's JSON round trip and one decision.
fn compile(table: &Table) {
    let json = table.to_json();
    let back = match Table::from_json(json.as_bytes()) {
        Ok(back) => back,
        Err(e) => panic!("the compiled table does not load back: {e}\n{json}"),
    };
    assert!(back == *table, "the table changed in its JSON round trip");
    let policy = match Policy::verify(back) {
        Ok(policy) => policy,
        Err(e) => panic!("the compiled table does not verify: {e}\n{json}"),
    };
    let engine = Engine::new(
        policy,
        Arc::new(MemoryStore::new()),
        Arc::new(FixedClock(1_773_144_000_000)),
    );
    for server in ["fuzz", "a", ""] {
        let _ = engine.decide(server, SAMPLE, &ClientContext::default());
    }
}

const SAMPLE: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":100,"includeContext":"thisServer","tools":[{"name":"t","inputSchema":{}}]}}"#;

/// The editor's database: the same table as the batch database, and the
/// position-based queries at a few offsets.
fn editor(text: &str, clean: bool) {
    let batch = Database::default();
    let batch_source = SourceText::new(&batch, String::new(), text.to_owned());
    let incremental = Database::incremental();
    let source = SourceText::new(&incremental, String::new(), text.to_owned());
    let a = db::lower_file(&batch, batch_source);
    let b = db::lower_file(&incremental, source);
    assert!(a == b, "the editor's database lowers to another table");
    assert_eq!(a.is_some(), clean, "lower_file disagrees with the findings");
    // The editor checks piece by piece, with the file-level rules over a
    // tree without the blocks' statements (`db::analyze_pieces`): the
    // findings and the model are `mcpc check`'s.
    let (a, b) = (
        db::analyze(&batch, batch_source),
        db::analyze(&incremental, source),
    );
    assert!(
        a.diagnostics == b.diagnostics,
        "the editor's database finds other diagnostics"
    );
    assert!(
        a.model == b.model,
        "the editor's database has another model"
    );
    let _ = ide::semantic_tokens(&incremental, source);
    let _ = ide::document_symbols(&incremental, source);
    let _ = ide::folding_ranges(&incremental, source);
    let whole = Span::new(0, text.len());
    // Read from the pieces' trees in the editor's database, from the whole
    // tree in the batch one.
    assert!(
        ide::inlay_hints(&incremental, source, whole)
            == ide::inlay_hints(&batch, batch_source, whole),
        "inlay hints differ between the editor's database and the batch one"
    );
    assert!(
        ide::comment_blocks(&incremental, source) == ide::comment_blocks(&batch, batch_source),
        "comment folds differ between the editor's database and the batch one"
    );
    let _ = ide::code_actions(&incremental, source, whole);
    let _ = ide::fix_all(&incremental, source);
    let _ = ide::item_symbols(&incremental, source, "a");
    // A few offsets spread over the text, snapped to a character's start
    // as the language server's position conversion does.
    for offset in [0, text.len() / 3, text.len() / 2 + 1, text.len()] {
        let mut offset = offset;
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let _ = ide::hover(&incremental, source, offset);
        let _ = ide::completions(&incremental, source, offset);
        let _ = ide::definition(&incremental, source, offset);
        let _ = ide::prepare_rename(&incremental, source, offset);
        let _ = ide::rename(&incremental, source, offset, "acme.renamed");
        let _ = ide::highlights(&incremental, source, offset);
        let _ = ide::selection_ranges(&incremental, source, offset);
    }
}

/// The codes of a text's findings, sorted.
fn codes(text: &str) -> Vec<Code> {
    let mut codes: Vec<Code> = db::analyze_parsed(&parse::parse(text))
        .diagnostics
        .iter()
        .map(|d| d.code)
        .collect();
    codes.sort();
    codes
}

/// `policy_fmt`: formatting is idempotent and never changes meaning.
/// `format(format(x)) == format(x)`; the formatted text has the same model
/// and table and no finding the input did not have; a refusal carries
/// error findings only.
pub fn fmt(data: &[u8]) {
    let (text, _) = text_of(data);
    let once = match format::format(&text) {
        Ok(once) => once,
        Err(error) => {
            assert!(!error.diagnostics.is_empty(), "refused without a finding");
            assert!(
                error
                    .diagnostics
                    .iter()
                    .all(|d| d.severity() == Severity::Error),
                "refused with a warning: {:?}",
                error.diagnostics
            );
            return;
        }
    };
    match format::format(&once) {
        Ok(twice) => assert!(twice == once, "not idempotent:\n{once}\n---\n{twice}"),
        Err(error) => panic!(
            "the formatted text has syntax errors: {:?}\n{once}",
            error.diagnostics
        ),
    }
    let before = check::check(&parse::parse(&text).file);
    let after = check::check(&parse::parse(&once).file);
    assert!(
        lower::lower(&before.model) == lower::lower(&after.model),
        "formatting changed the table:\n{once}"
    );
    let (before, after) = (codes(&text), codes(&once));
    let mut remaining = before.clone();
    for code in &after {
        match remaining.iter().position(|c| c == code) {
            Some(at) => {
                remaining.remove(at);
            }
            None => panic!("formatting added {code:?} (before {before:?}, after {after:?})"),
        }
    }
}
