//! `mcpc fmt [--check] FILE... | -`
//!
//! Rewrites files in the canonical layout (standard input to standard
//! output). Refuses a file with syntax errors, and refuses to write any
//! output whose compiled table differs from the input's: formatting never
//! changes meaning.

use std::path::Path;
use std::process::ExitCode;

use mcpolicy_compiler::db::{Database, SourceText, lower_file};
use mcpolicy_compiler::format;
use mcpolicy_compiler::input;
use mcpolicy_compiler::render::{self, FileReport};

use super::{ColorChoice, emit, fail, human_style};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy files; `-` formats standard input to standard output.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// Change nothing; exit 1 if any file is not formatted.
    #[arg(long)]
    check: bool,
    /// Colour for diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

/// The table a text compiles to, if it compiles.
fn table_of(text: &str) -> Option<String> {
    let db = Database::default();
    let source = SourceText::new(&db, String::new(), text.to_owned());
    lower_file(&db, source).as_ref().map(|t| t.to_json())
}

/// Writes through a temporary file in the same directory, then renames, so
/// a crash never leaves a half-written policy.
fn write_atomically(path: &str, text: &str) -> std::io::Result<()> {
    let target = Path::new(path);
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("policy");
    let temp = dir.join(format!(".{name}.mcpc-fmt.tmp"));
    std::fs::write(&temp, text)?;
    if let Ok(meta) = std::fs::metadata(target) {
        std::fs::set_permissions(&temp, meta.permissions())?;
    }
    std::fs::rename(&temp, target)
}

fn first_difference(a: &str, b: &str) -> usize {
    a.lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| a.lines().count().min(b.lines().count()))
        + 1
}

pub fn run(args: Args) -> ExitCode {
    let mut failed = false;
    for path in &args.files {
        let loaded = match input::load(path) {
            Ok(loaded) => loaded,
            Err(error) => return fail(format!("cannot read {path}: {error}")),
        };
        if let Some(problem) = loaded.problem {
            let report = FileReport {
                path: loaded.path,
                text: loaded.text,
                diagnostics: vec![problem],
            };
            eprint!("{}", render::human(&[report], human_style(args.color)));
            failed = true;
            continue;
        }
        let formatted = match format::format(&loaded.text) {
            Ok(formatted) => formatted,
            Err(error) => {
                eprintln!("mcpc: {}: not formatted: {error}", loaded.path);
                let report = FileReport {
                    path: loaded.path,
                    text: loaded.text,
                    diagnostics: error.diagnostics,
                };
                eprint!("{}", render::human(&[report], human_style(args.color)));
                failed = true;
                continue;
            }
        };
        if formatted != loaded.text && table_of(&formatted) != table_of(&loaded.text) {
            return fail(format!(
                "{}: formatting would change the compiled table; nothing was written (this is a bug in mcpc fmt, please report it)",
                loaded.path
            ));
        }
        if path == "-" {
            if args.check && formatted != loaded.text {
                eprintln!(
                    "<stdin>: not formatted (first difference at line {})",
                    first_difference(&loaded.text, &formatted)
                );
                failed = true;
            } else if !args.check {
                emit(&formatted);
            }
            continue;
        }
        if formatted == loaded.text {
            continue;
        }
        if args.check {
            eprintln!(
                "{path}: not formatted (first difference at line {})",
                first_difference(&loaded.text, &formatted)
            );
            failed = true;
        } else if let Err(error) = write_atomically(path, &formatted) {
            return fail(format!("cannot write {path}: {error}"));
        } else {
            eprintln!("formatted {path}");
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
