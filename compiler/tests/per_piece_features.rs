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

mod edit_support;

use edit_support::{SNIPPETS, config, edited, examples};

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
