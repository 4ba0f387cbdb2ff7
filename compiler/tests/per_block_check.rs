//! Per-block checking (`db::block_checks`) against the one-pass check: in
//! an editor's database (`Database::incremental`), after any chain of
//! random edits, the findings and the model equal `mcpc check`'s (a batch
//! database, one `check::check` over the whole tree); and salsa's
//! `WillExecute` log shows that an edit inside one `server` block re-checks
//! that block alone, while a change to what every block reads (the
//! protocol, the declared reasons) re-checks them all.
//! `PROPTEST_CASES` sets a long run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mcpolicy_compiler::db::{self, Database, SourceText};
use proptest::prelude::*;
use salsa::Setter;

mod edit_support;

use edit_support::{SNIPPETS, config, edited, examples, gen_policy};

proptest! {
    #![proptest_config(config(48))]

    /// After each edit of a chain, the per-block analysis of the editor's
    /// database equals the whole-file analysis of a batch database.
    #[test]
    fn per_block_check_equals_whole_file_check(
        which in 0usize..5,
        edits in prop::collection::vec((0.0..1.0f64, 0usize..40, 0..SNIPPETS.len()), 1..10),
    ) {
        let mut text = examples().swap_remove(which);
        let mut db = Database::incremental();
        let source = SourceText::new(&db, "p.mcpolicy".into(), text.clone());
        let _ = db::analyze(&db, source);
        for (at, len, snippet) in edits {
            text = edited(&text, at, len, SNIPPETS[snippet]);
            source.set_text(&mut db).to(text.clone());
            let batch = Database::default();
            let whole = SourceText::new(&batch, "p.mcpolicy".into(), text.clone());
            let expected = db::analyze(&batch, whole);
            let got = db::analyze(&db, source);
            prop_assert_eq!(&got.diagnostics, &expected.diagnostics, "text:\n{}", text);
            prop_assert_eq!(&got.model, &expected.model);
        }
    }
}

fn block_checks_run(log: &[String]) -> usize {
    log.iter().filter(|q| q.starts_with("block_checks")).count()
}

#[test]
fn an_edit_in_one_block_re_checks_that_block_alone() {
    let text = gen_policy::generate(gen_policy::Options {
        servers: 500,
        seed: 3,
        globs_percent: 5,
    });
    let mut db = Database::with_log();
    let source = SourceText::new(&db, "big.mcpolicy".into(), text.clone());
    assert!(db::diagnostics(&db, source).is_empty());
    let first = block_checks_run(&db.take_log());
    assert!(first >= 400, "only {first} pieces checked");

    // A digit typed into a statement in the middle of the file.
    let middle = text.len() / 2;
    let at = middle + text[middle..].find("max_tokens ").expect("a max_tokens") + 11;
    let mut typed = text.clone();
    typed.insert(at, '1');
    source.set_text(&mut db).to(typed.clone());
    let batch = Database::default();
    let whole = SourceText::new(&batch, "p.mcpolicy".into(), typed.clone());
    assert_eq!(db::analyze(&db, source), db::analyze(&batch, whole));
    let log = db.take_log();
    assert_eq!(block_checks_run(&log), 1, "{log:?}");

    // A protocol line changes what every block reads: all are checked again.
    let newer = typed.replacen("protocol 2025-11-25", "protocol 2026-07-28", 1);
    assert_ne!(newer, typed);
    source.set_text(&mut db).to(newer);
    let _ = db::analyze(&db, source);
    assert_eq!(block_checks_run(&db.take_log()), first);

    // Undo both: every piece and context was seen before, nothing is checked.
    source.set_text(&mut db).to(text);
    assert!(db::diagnostics(&db, source).is_empty());
    assert_eq!(block_checks_run(&db.take_log()), 0);
}
