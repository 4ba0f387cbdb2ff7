//! Loading a policy for the run-time commands: `.mcpolicy` source (checked and
//! lowered, findings printed) or an already compiled table (verified).

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::input;
use mcpolicy_compiler::render::{self, FileReport};
use mcpolicy_runtime::table::Table;

use super::{ColorChoice, human_style};

/// Why no table could be had: `Usage` exits 2, `Findings` exits 1.
pub(crate) enum LoadFailure {
    Usage(String),
    Findings,
}

/// Reads `path` as a compiled table when it is JSON, otherwise as a policy.
pub(crate) fn load_table(path: &str, color: ColorChoice) -> Result<Table, LoadFailure> {
    let loaded =
        input::load(path).map_err(|e| LoadFailure::Usage(format!("cannot read {path}: {e}")))?;
    if loaded.problem.is_none() && loaded.text.trim_start().starts_with('{') {
        return Table::from_json(loaded.text.as_bytes())
            .map_err(|e| LoadFailure::Usage(format!("{path}: {e}")));
    }
    compile_loaded(loaded, color)
}

/// Checks a loaded policy (printing its findings) and lowers it, from one
/// salsa input so the text is parsed and checked once.
pub(crate) fn compile_loaded(
    loaded: input::Loaded,
    color: ColorChoice,
) -> Result<Table, LoadFailure> {
    let db = Database::default();
    let source = SourceText::new(&db, loaded.path.clone(), loaded.text.clone());
    let diagnostics = match loaded.problem {
        Some(problem) => vec![problem],
        None => db::diagnostics(&db, source).to_vec(),
    };
    let report = FileReport {
        path: loaded.path,
        text: loaded.text,
        diagnostics,
    };
    let (errors, warnings) = report.counts();
    if errors + warnings > 0 {
        eprint!(
            "{}",
            render::human(std::slice::from_ref(&report), human_style(color))
        );
    }
    if errors > 0 {
        return Err(LoadFailure::Findings);
    }
    db::lower_file(&db, source)
        .clone()
        .ok_or(LoadFailure::Findings)
}
