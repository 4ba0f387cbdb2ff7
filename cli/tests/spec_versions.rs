//! `docs/spec/README.md`, "Versions", states the versions the code at the
//! same commit reads and writes: the table format and the SQLite store
//! schema are read from the runtime's own constants.

use mcpolicy_runtime::store::SCHEMA_VERSION;
use mcpolicy_runtime::table::TABLE_FORMAT;

/// The "version today" cell of the row whose artefact is `artefact`.
fn version_today(artefact: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let spec = std::fs::read_to_string(root.join("docs/spec/README.md")).expect("the spec");
    let row = spec
        .lines()
        .find(|line| line.starts_with(&format!("| {artefact} |")))
        .unwrap_or_else(|| panic!("no row for {artefact}"));
    row.split('|')
        .nth(2)
        .expect("a version cell")
        .trim()
        .trim_matches('`')
        .to_owned()
}

#[test]
fn the_spec_states_the_versions_the_code_has() {
    assert_eq!(version_today("the table format"), TABLE_FORMAT);
    assert_eq!(
        version_today("the SQLite store schema"),
        SCHEMA_VERSION.to_string()
    );
}
