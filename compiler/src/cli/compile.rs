//! `mcpc compile POLICY [-o TABLE]`

use std::process::ExitCode;

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::input;
use mcpolicy_compiler::render;

use super::{ColorChoice, emit, fail, human_style};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The policy; `-` reads standard input.
    #[arg(value_name = "POLICY")]
    policy: String,
    /// Where to write the table (standard output if absent).
    #[arg(short, long, value_name = "TABLE")]
    output: Option<String>,
    /// Colour for diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

pub fn run(args: Args) -> ExitCode {
    let loaded = match input::load(&args.policy) {
        Ok(loaded) => loaded,
        Err(error) => return fail(format!("cannot read {}: {error}", args.policy)),
    };
    let db = Database::default();
    let report = super::check::report(&db, loaded);
    let (errors, warnings) = report.counts();
    if errors + warnings > 0 {
        eprint!(
            "{}",
            render::human(std::slice::from_ref(&report), human_style(args.color))
        );
    }
    if errors > 0 {
        return ExitCode::from(1);
    }
    let source = SourceText::new(&db, report.path.clone(), report.text.clone());
    let Some(table) = db::lower_file(&db, source) else {
        return ExitCode::from(1);
    };
    let json = table.to_json();
    match args.output {
        Some(path) => match std::fs::write(&path, json) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(format!("cannot write {path}: {error}")),
        },
        None => {
            emit(&json);
            ExitCode::SUCCESS
        }
    }
}
