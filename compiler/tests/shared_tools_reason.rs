//! E0413 ("`tools` and another statement deny as the same reason") against
//! a reference that looks at every block. The checker computes effective
//! blocks only for the blocks that can yield the finding (those with a
//! `tools … as` clause of their own, or all of them when `defaults` has
//! one); on random policies of a `defaults` and two `server` blocks, each
//! with or without `tools off [as R]` and other statements naming a reason,
//! it reports E0413 exactly when the reference finds a block whose
//! effective `tools` reason is another statement's, both named by a clause
//! of the block or of `defaults`.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use mcpolicy_compiler::codes::{Code, Severity};
use mcpolicy_compiler::db::{Database, SourceText, analyze};
use mcpolicy_compiler::lower;
use proptest::prelude::*;

const REASONS: [&str; 2] = ["acme.a", "acme.b"];

/// One statement of a block: its keyword, its text without a reason, and
/// the reason its clause names (`None`: no `as`).
type Line = (&'static str, &'static str, Option<usize>);

const STATEMENTS: [(&str, &str); 3] = [
    ("tools", "tools off"),
    ("max_messages", "max_messages 1"),
    ("rate", "rate 5 per 1m"),
];

fn block() -> impl Strategy<Value = Vec<Line>> {
    prop::collection::vec(
        (0..STATEMENTS.len(), prop::option::of(0..REASONS.len())),
        0..=STATEMENTS.len(),
    )
    .prop_map(|picked| {
        let mut seen = Vec::new();
        picked
            .into_iter()
            .filter(|(s, _)| {
                let new = !seen.contains(s);
                seen.push(*s);
                new
            })
            .map(|(s, reason)| (STATEMENTS[s].0, STATEMENTS[s].1, reason))
            .collect()
    })
}

fn text(blocks: &[Vec<Line>]) -> String {
    let mut out = String::from("mcpolicy 1\n");
    for reason in REASONS {
        out.push_str(&format!(
            "reason {reason} {{ retryable false; ttl forever }}\n"
        ));
    }
    for (i, lines) in blocks.iter().enumerate() {
        out.push_str(&match i {
            0 => "defaults {\n".to_owned(),
            i => format!("server \"s{i}\" {{\n"),
        });
        for (_, statement, reason) in lines {
            out.push_str("  ");
            out.push_str(statement);
            if let Some(r) = reason {
                out.push_str(&format!(" as {}", REASONS[*r]));
            }
            out.push('\n');
        }
        out.push_str("}\n");
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn e0413_is_found_exactly_where_some_block_shares_the_tools_reason(
        blocks in prop::collection::vec(block(), 3),
    ) {
        let text = text(&blocks);
        let db = Database::default();
        let source = SourceText::new(&db, "p.mcpolicy".into(), text.clone());
        let analysis = analyze(&db, source);
        let found = analysis.diagnostics.iter().any(|d| d.code == Code::E0413);
        let others: Vec<_> = analysis
            .diagnostics
            .iter()
            .filter(|d| d.code != Code::E0413 && d.severity() == Severity::Error)
            .collect();
        prop_assume!(others.is_empty());
        let model = &analysis.model;
        let mut effective = vec![lower::effective_defaults(model)];
        effective.extend(model.servers.iter().map(|(_, b)| lower::effective_server(model, b)));
        // The clause naming `reason` on `keyword` that block `id` inherits.
        let clause = |id: usize, keyword: &str, reason: &str| {
            let names = |block: &Vec<Line>| {
                block.iter().any(|(k, _, r)| *k == keyword && r.map(|r| REASONS[r]) == Some(reason))
            };
            names(&blocks[id]) || names(&blocks[0])
        };
        let expected = effective.iter().enumerate().any(|(id, block)| {
            block.statement_reasons().into_iter().any(|(statement, reason)| {
                block.shares_tools_reason(statement, reason)
                    && clause(id, "tools", &block.tools.reason)
                    && clause(id, statement, reason)
            })
        });
        prop_assert_eq!(found, expected, "text:\n{}", text);
    }
}
