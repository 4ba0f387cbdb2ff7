//! The statement table of `docs/spec/language.md` ("Statements") is
//! generated from the declarations (`runtime/src/statements.rs` and
//! `compiler/src/statements.rs`) and kept equal to them here
//! (`UPDATE_EXPECT=1` rewrites it), as `docs/codes.md` is; and the runtime
//! and the compiler agree about every statement.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use mcpolicy_compiler::statements::{Statement, language_table, runtime_statement};
use mcpolicy_grammar::Rule;
use mcpolicy_runtime::table::{EffectiveBlock, builtin};

const BEGIN: &str = "<!-- Generated from runtime/src/statements.rs and compiler/src/statements.rs by `UPDATE_EXPECT=1 cargo test -p mcpolicy-compiler --test language_table`; do not edit. -->\n";
const END: &str = "<!-- End of the generated table. -->\n";

#[test]
fn the_statement_table_is_generated_from_the_declarations() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/spec/language.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (page.find(BEGIN), page.find(END)) else {
        panic!("docs/spec/language.md has no generated statement table");
    };
    let expected = format!(
        "{}{BEGIN}{}{}",
        &page[..begin],
        language_table(),
        &page[end..]
    );
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    assert!(
        page == expected,
        "docs/spec/language.md's statement table is out of date; regenerate it: \
         UPDATE_EXPECT=1 cargo test -p mcpolicy-compiler --test language_table"
    );
}

/// What the compiler says of each statement (its keyword, grammar rule,
/// outcome, built-in default) is what the runtime declares and does: a
/// statement the two see differently fails here.
#[test]
fn the_runtime_and_the_compiler_agree_about_every_statement() {
    let built_in = EffectiveBlock::built_in();
    let mut deciding = 0;
    for &statement in Statement::ALL {
        let decl = statement.decl();
        let keyword = decl.keyword();
        // The grammar reads it with the rule named after its keyword.
        assert_eq!(format!("{:?}", decl.rule), format!("{keyword}_stmt"));
        assert!(Rule::all_rules().contains(&decl.rule));
        // Its built-in reason is the runtime's, and the docs name it.
        let own = builtin::own_reason(keyword);
        assert_eq!(decl.reason.unwrap_or(""), own, "{keyword}");
        if let Some(reason) = decl.reason {
            assert!(builtin::get(reason).is_some(), "{keyword}: {reason}");
            assert!(
                decl.doc.outcome.contains(&format!("`{reason}`")),
                "{keyword}: the outcome does not name {reason}"
            );
        }
        // The runtime evaluates it under the same keyword (and stores it so).
        if let Some((_, engine)) = runtime_statement(statement) {
            deciding += 1;
            assert_eq!(engine.name(), keyword);
            let stored = engine.stored_name();
            assert_eq!(
                mcpolicy_runtime::engine::Statement::from_stored_name(&stored),
                Some(engine)
            );
        }
        // The compiler's built-in default is the runtime's.
        assert_eq!(
            mcpolicy_compiler::statements::built_in_defaults(),
            built_in,
            "{keyword}"
        );
    }
    // Every statement the runtime decides by is one the compiler reads.
    let mut block = built_in.clone();
    block.budgets = vec![];
    let runtime: Vec<&str> = mcpolicy_runtime::engine::Statement::of_block(&block)
        .into_iter()
        .map(|s| s.name())
        .collect();
    for name in &runtime {
        assert!(Statement::from_keyword(name).is_some(), "{name}");
    }
    assert_eq!(
        deciding,
        runtime.len() + 1,
        "budget, absent above, counted once"
    );
    // A block with every denying statement stated names each one's reason.
    for (keyword, _) in built_in.statement_reasons() {
        assert!(Statement::from_keyword(keyword).is_some_and(|s| s.decl().denies()));
    }
}

/// The places that list the statements by hand, which adding a statement
/// must edit besides the code (`ARCHITECTURE.md`, "A statement is declared
/// once"): the table's JSON Schema and `docs/table-format.md` name every
/// field of `EffectiveBlock`; the audit log's JSON Schema and
/// `docs/spec/evaluation.md` name every statement that decides. A
/// statement missing from one fails here, naming the place.
#[test]
fn every_hand_written_list_of_statements_names_each_statement() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let mut missing = Vec::new();
    let serde_json::Value::Object(fields) =
        serde_json::to_value(EffectiveBlock::applied()).unwrap()
    else {
        panic!("a block is an object")
    };
    for (place, quoted) in [
        ("runtime/schema/mcpolicy-table-1.schema.json", "\""),
        ("docs/table-format.md", "`"),
    ] {
        let text = read(place);
        for field in fields.keys() {
            if !text.contains(&format!("{quoted}{field}{quoted}")) {
                missing.push(format!("{place}: the field `{field}`"));
            }
        }
    }
    let deciding: Vec<_> = Statement::ALL
        .iter()
        .filter_map(|s| runtime_statement(*s))
        .map(|(_, statement)| statement)
        .collect();
    for (place, quoted) in [
        ("runtime/schema/mcpolicy-audit-1.schema.json", "\""),
        ("docs/spec/evaluation.md", "`"),
    ] {
        let text = read(place);
        for statement in &deciding {
            let name = statement.name();
            if !text.contains(&format!("{quoted}{name}{quoted}")) {
                missing.push(format!("{place}: the statement `{name}`"));
            }
        }
    }
    assert!(missing.is_empty(), "not listed:\n{}", missing.join("\n"));
}
