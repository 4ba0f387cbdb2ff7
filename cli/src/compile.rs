//! `mcpc compile POLICY [-o TABLE]`

use std::process::ExitCode;

use mcpolicy_compiler::input;

use super::policy::{LoadFailure, compile_loaded};
use super::{ColorChoice, emit, fail};

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
    let table = match compile_loaded(loaded, args.color) {
        Ok(table) => table,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => return ExitCode::from(1),
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
