//! `mcpc explain CODE` and `mcpc explain --list`

use std::process::ExitCode;

use mcpolicy_compiler::codes::Code;
use mcpolicy_compiler::diagnostic::did_you_mean;

use super::{emit, fail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The code, e.g. E0103.
    #[arg(value_name = "CODE", required_unless_present = "list")]
    code: Option<String>,
    /// List every code with its summary.
    #[arg(long)]
    list: bool,
}

pub fn run(args: Args) -> ExitCode {
    if args.list {
        let mut out = String::new();
        for code in Code::ALL {
            out.push_str(&format!(
                "{}  {:<7}  {}\n",
                code,
                code.severity().as_str(),
                code.summary()
            ));
        }
        emit(&out);
        return ExitCode::SUCCESS;
    }
    let text = args.code.unwrap_or_default();
    match Code::parse(&text) {
        Some(code) => {
            emit(&format!(
                "{code} ({}): {}\n\n{}\n",
                code.severity().as_str(),
                code.summary(),
                code.explanation()
            ));
            ExitCode::SUCCESS
        }
        None => {
            let upper = text.to_ascii_uppercase();
            match did_you_mean(&upper, Code::ALL.iter().map(|c| c.as_str())) {
                Some(s) => fail(format!(
                    "unknown code `{text}`; did you mean `{s}`? (`mcpc explain --list` lists them)"
                )),
                None => fail(format!(
                    "unknown code `{text}` (`mcpc explain --list` lists them)"
                )),
            }
        }
    }
}
