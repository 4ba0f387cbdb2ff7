//! The editor features computed piece by piece against the whole file:
//! in an editor's database (`Database::incremental`), after any chain of
//! random edits, the folding ranges (`ide::folding_ranges`, one memo per
//! piece) equal the whole-file outline's blocks of a batch database, and
//! the semantic tokens of the pieces (`ide::tokens_of` on each
//! `db::parse_item`, shifted by the piece's offset, which is how the
//! language server keeps them) equal `ide::semantic_tokens` of the whole
//! file. `PROPTEST_CASES` sets a long run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::ide::{self, SymbolKind};
use mcpolicy_compiler::syntax::Span;
use proptest::prelude::*;
use salsa::Setter;

#[path = "../examples/gen_policy.rs"]
#[allow(dead_code)]
mod gen_policy;

fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn examples() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut texts: Vec<String> = ["team-gateway", "cost-capped", "ci-agent", "personal-laptop"]
        .iter()
        .map(|name| {
            std::fs::read_to_string(root.join(format!("examples/{name}.mcpolicy"))).unwrap()
        })
        .collect();
    texts.push(gen_policy::generate(gen_policy::Options {
        servers: 40,
        seed: 7,
        globs_percent: 20,
    }));
    texts
}

/// What edits insert: what changes a block's findings, what every block
/// reads (protocol, reasons declared or removed), what breaks structure.
const SNIPPETS: &[&str] = &[
    "",
    "x",
    "\n",
    "{",
    "}",
    "\"",
    "# c\n",
    "\nprotocol 2025-06-18\n",
    "\nprotocol 2026-07-28\n",
    "\nreason acme.new { retryable false; ttl forever }\n",
    "reason ",
    " as acme.new",
    " as policy.rate_limit",
    "\n  tools on\n",
    "\n  max_context thisServer\n",
    "\n  sampling off\n",
    "\n  max_tokens 0\n",
    "\n  max_tokens 5\n",
    "\nserver \"team-*\" {\n  budget 5 tokens per day as acme.offline\n}\n",
    "\ndefaults {\n  rate 1 per 1s\n}\n",
    "😀",
];

/// Replaces `len` chars at about `at` of `text` by `insert`.
fn edited(text: &str, at: f64, len: usize, insert: &str) -> String {
    let mut start = (text.len() as f64 * at) as usize;
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let end = text[start..]
        .char_indices()
        .nth(len)
        .map_or(text.len(), |(i, _)| start + i);
    let mut out = text.to_owned();
    out.replace_range(start..end, insert);
    out
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn per_piece_folds_and_tokens_equal_whole_file_ones(
        which in 0usize..5,
        edits in prop::collection::vec((0.0..1.0f64, 0usize..40, 0..SNIPPETS.len()), 1..10),
    ) {
        let mut text = examples().swap_remove(which);
        let mut db = Database::incremental();
        let source = SourceText::new(&db, "p.mcpolicy".into(), text.clone());
        let _ = ide::folding_ranges(&db, source);
        for (at, len, snippet) in edits {
            text = edited(&text, at, len, SNIPPETS[snippet]);
            source.set_text(&mut db).to(text.clone());
            let batch = Database::default();
            let whole = SourceText::new(&batch, "p.mcpolicy".into(), text.clone());
            let expected: Vec<Span> = ide::symbol_index(&batch, whole)
                .outline
                .iter()
                .filter(|s| s.kind != SymbolKind::Setting)
                .map(|s| s.span)
                .collect();
            prop_assert_eq!(ide::folding_ranges(&db, source), expected, "text:\n{}", text);

            let pieces = db::file_pieces(&db, source);
            let tokens: Vec<_> = pieces
                .iter()
                .flat_map(|&(start, item)| {
                    let file = &db::parse_item(&db, item).parsed.file;
                    ide::tokens_of(item.text(&db), file)
                        .into_iter()
                        .map(move |(span, kind, modifier)| {
                            (Span::new(span.start + start, span.end + start), kind, modifier)
                        })
                })
                .collect();
            prop_assert_eq!(tokens, ide::semantic_tokens(&batch, whole), "text:\n{}", text);
        }
    }
}
