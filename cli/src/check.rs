//! `mcpc check FILE... | DIR... | -` and `mcpc check --fix FILE...`

use std::process::ExitCode;

use clap::ValueEnum;
use mcpolicy_compiler::check::fix;
use mcpolicy_compiler::codes::Severity;
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::input;
use mcpolicy_compiler::render::{self, FileReport};

use super::fmt::write_atomically;
use super::inputs;
use super::{ColorChoice, emit, emit_err, fail, human_style};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Drawn diagnostics for people (stderr) and a summary.
    Human,
    /// One JSON document.
    Json,
    /// SARIF 2.1.0 for code scanning.
    Sarif,
    /// GitHub Actions annotations.
    Github,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy files or directories (every `*.mcpolicy` under them, sorted;
    /// hidden directories and `target/` skipped); `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Fail (exit 1) on warnings too.
    #[arg(long)]
    deny_warnings: bool,
    /// Colour for human output.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    /// Apply the certain fixes the findings carry, check again, and report
    /// what remains. Files are rewritten atomically, as `mcpc fmt` does;
    /// two fixes that touch the same text are never applied together.
    #[arg(long)]
    fix: bool,
}

/// Checks one loaded file.
pub(crate) fn report(db: &Database, loaded: input::Loaded) -> FileReport {
    if let Some(problem) = loaded.problem {
        return FileReport {
            path: loaded.path,
            text: loaded.text,
            diagnostics: vec![problem],
        };
    }
    let source = SourceText::new(db, loaded.path.clone(), loaded.text.clone());
    let diagnostics = db::diagnostics(db, source).to_vec();
    FileReport {
        path: loaded.path,
        text: loaded.text,
        diagnostics,
    }
}

/// The compiler's findings for `text`, as `--fix` re-checks it.
fn findings(text: &str) -> Vec<mcpolicy_compiler::diagnostic::Diagnostic> {
    let db = Database::default();
    let source = SourceText::new(&db, String::new(), text.to_owned());
    db::diagnostics(&db, source).to_vec()
}

/// Applies the fixes of one loaded file and writes it; the file as it is
/// afterwards. Says what it changed on stderr.
fn fix_file(path: &str, loaded: input::Loaded) -> Result<input::Loaded, String> {
    if loaded.problem.is_some() {
        return Ok(loaded);
    }
    let fixed = fix::fix_and_format(&loaded.text, findings);
    if fixed.text == loaded.text {
        return Ok(loaded);
    }
    write_atomically(path, &fixed.text)?;
    let count = fixed.applied.len();
    let plural = if count == 1 { "" } else { "es" };
    emit_err(&format!(
        "fixed {path}: {count} fix{plural} applied ({})\n",
        fixed.applied.join("; ")
    ));
    Ok(input::Loaded {
        text: fixed.text,
        ..loaded
    })
}

pub fn run(args: Args) -> ExitCode {
    let db = Database::default();
    let mut reports = Vec::new();
    if args.fix && args.files.iter().any(|f| f == "-") {
        return fail("--fix rewrites files in place; it cannot fix standard input");
    }
    let files = match inputs::expand(&args.files) {
        Ok(files) => files,
        Err(error) => return fail(error),
    };
    for path in &files {
        let loaded = match input::load(path) {
            Ok(loaded) => loaded,
            Err(error) => return fail(format!("cannot read {path}: {error}")),
        };
        let loaded = if args.fix {
            match fix_file(path, loaded) {
                Ok(loaded) => loaded,
                Err(error) => return fail(error),
            }
        } else {
            loaded
        };
        reports.push(report(&db, loaded));
    }
    match args.format {
        Format::Human => {
            let text = render::human(&reports, human_style(args.color));
            let (errors, warnings) = render::totals(&reports);
            if errors + warnings == 0 {
                emit(&text);
            } else {
                emit_err(&text);
            }
        }
        Format::Json => emit(&render::json(&reports)),
        Format::Sarif => emit(&render::sarif(&reports)),
        Format::Github => emit(&render::github(&reports)),
    }
    let failing = reports.iter().flat_map(|r| &r.diagnostics).any(|d| {
        d.severity() == Severity::Error || (args.deny_warnings && d.severity() == Severity::Warning)
    });
    if failing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
