//! `policy.consent_cooldown`, the built-in reason of the consent cooldown
//! (`docs/spec/evaluation.md`, "Consent cooldown"): every compiled table
//! carries its built-in spec, no block's digest covers it, and a
//! redeclaration may set nothing (`E0411`, `docs/spec/language.md`).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use mcpolicy_compiler::db::{Database, SourceText, diagnostics, lower_file};
use mcpolicy_runtime::table::{Table, Ttl, builtin};

fn compile(text: &str) -> Option<Table> {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    lower_file(&db, source).clone()
}

fn codes(text: &str) -> Vec<String> {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), text.into());
    diagnostics(&db, source)
        .iter()
        .map(|d| d.code.as_str().to_owned())
        .collect()
}

const BASE: &str = "mcpolicy 1\n\ndefaults {\n  consent always\n}\n";

#[test]
fn the_table_carries_the_built_in_spec() {
    let table = compile(BASE).expect("compiles");
    let spec = &table.reasons[builtin::CONSENT_COOLDOWN];
    assert!(spec.retryable);
    assert_eq!(spec.ttl, Ttl::UntilReset);
    assert_eq!(spec.code, table.error_code);
    // Not a reason any block produces: the digest of a block is what it
    // was before the cooldown existed.
    assert!(
        !table
            .fallback
            .block
            .reason_names()
            .contains(&builtin::CONSENT_COOLDOWN)
    );
}

#[test]
fn a_redeclaration_may_set_nothing() {
    for property in [
        "retryable false",
        "ttl 10s",
        "code -32011",
        "message \"no\"",
    ] {
        let text = format!("{BASE}\nreason policy.consent_cooldown {{ {property} }}\n");
        assert!(codes(&text).contains(&"E0411".to_owned()), "{property}");
        assert!(compile(&text).is_none(), "{property}: an error, no table");
    }
}
