//! Loading a policy for the run-time commands: `.mcpolicy` source (checked,
//! lowered and verified, findings printed) or an already compiled table
//! (verified). Either way the result is a [`Policy`], the only thing the
//! runtime's engine runs.

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::input;
use mcpolicy_compiler::model::PolicyModel;
use mcpolicy_compiler::render::{self, FileReport};
use mcpolicy_compiler::syntax::SourceFile;
use mcpolicy_runtime::Policy;
use mcpolicy_runtime::table::Table;

use super::{ColorChoice, emit_err, human_style};

/// Why no table could be had: `Usage` exits 2, `Findings` exits 1.
pub(crate) enum LoadFailure {
    Usage(String),
    Findings,
}

/// A policy file as read: already a compiled (and verified) table, or
/// source to check.
enum Read {
    Policy(Policy),
    Source(Box<input::Loaded>),
}

/// Reads `path`, recognising a compiled table by its JSON.
fn read(path: &str) -> Result<Read, LoadFailure> {
    let loaded =
        input::load(path).map_err(|e| LoadFailure::Usage(format!("cannot read {path}: {e}")))?;
    if loaded.problem.is_none() && loaded.text.trim_start().starts_with('{') {
        return Policy::from_json(loaded.text.as_bytes())
            .map(Read::Policy)
            .map_err(|e| LoadFailure::Usage(format!("{path}: {e}")));
    }
    Ok(Read::Source(Box::new(loaded)))
}

/// Reads `path` as a compiled table when it is JSON, otherwise as a policy.
pub(crate) fn load_policy(path: &str, color: ColorChoice) -> Result<Policy, LoadFailure> {
    match read(path)? {
        Read::Policy(policy) => Ok(policy),
        Read::Source(loaded) => {
            let path = loaded.path.clone();
            compile_loaded(*loaded, color).and_then(|table| verify(&path, table))
        }
    }
}

/// Like [`load_policy`], also keeping the checked source of a policy
/// (`None` for a compiled table).
pub(crate) fn load_policy_with_source(
    path: &str,
    color: ColorChoice,
) -> Result<(Policy, Option<PolicySource>), LoadFailure> {
    match read(path)? {
        Read::Policy(policy) => Ok((policy, None)),
        Read::Source(loaded) => {
            let (table, source) = compile_with_source(*loaded, color)?;
            Ok((verify(&source.path, table)?, Some(source)))
        }
    }
}

/// The runtime's verification of a table the compiler just lowered (it
/// holds by construction; a failure is a compiler bug, reported as such).
fn verify(path: &str, table: Table) -> Result<Policy, LoadFailure> {
    Policy::verify(table).map_err(|e| {
        LoadFailure::Usage(format!(
            "{path}: the compiled table does not verify (a compiler bug): {e}"
        ))
    })
}

/// The checked source behind a table, for commands that report on
/// statements (`mcpc test --coverage`).
#[derive(Debug)]
pub(crate) struct PolicySource {
    /// The path as given.
    pub path: String,
    /// The whole text.
    pub text: String,
    /// The syntax tree (statement spans).
    pub file: SourceFile,
    /// The checked meaning (which block states which statement).
    pub model: PolicyModel,
}

/// Checks a loaded policy (printing its findings) and lowers it, from one
/// salsa input so the text is parsed and checked once.
pub(crate) fn compile_loaded(
    loaded: input::Loaded,
    color: ColorChoice,
) -> Result<Table, LoadFailure> {
    compile_with(loaded, color, |_, _| Some(())).map(|(table, ())| table)
}

/// Like [`compile_loaded`], keeping the syntax tree and model as well.
fn compile_with_source(
    loaded: input::Loaded,
    color: ColorChoice,
) -> Result<(Table, PolicySource), LoadFailure> {
    compile_with(loaded, color, |db, source| {
        Some(PolicySource {
            path: source.path(db).clone(),
            text: source.text(db).clone(),
            file: db::parse_file(db, source).file.clone(),
            model: db::model(db, source).clone()?,
        })
    })
}

/// The one parse-check-lower path; `keep` takes what else the caller needs
/// from the database before it is dropped.
fn compile_with<T>(
    loaded: input::Loaded,
    color: ColorChoice,
    keep: impl FnOnce(&Database, SourceText) -> Option<T>,
) -> Result<(Table, T), LoadFailure> {
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
        emit_err(&render::human(
            std::slice::from_ref(&report),
            human_style(color),
        ));
    }
    if errors > 0 {
        return Err(LoadFailure::Findings);
    }
    let table = db::lower_file(&db, source)
        .clone()
        .ok_or(LoadFailure::Findings)?;
    let kept = keep(&db, source).ok_or(LoadFailure::Findings)?;
    Ok((table, kept))
}
