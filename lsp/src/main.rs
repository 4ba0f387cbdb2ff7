//! `mcpolicy-lsp`: the language server for `.mcpolicy` files, over stdio.

use std::ffi::OsString;
use std::process::ExitCode;

use mcpolicy_lsp::{Exit, transport};

/// `--help`'s text.
const HELP: &str = "\
mcpolicy-lsp: the language server for .mcpolicy files.

Usage: mcpolicy-lsp [--stdio]

Speaks the Language Server Protocol on stdin and stdout; an editor starts it
(see lsp/README.md in the mcpolicy repository). Exit code: 0 after
`shutdown` then `exit`, 1 when the session ends otherwise, 2 for a bad
argument.

Options:
      --stdio    Serve on stdin and stdout (the default and only transport)
  -h, --help     Print this help and exit
  -V, --version  Print the version and exit
";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Serve,
    Help,
    Version,
}

/// Reads the arguments (without the program name). `--help` and
/// `--version` win over anything after them, as in most tools; an
/// argument the server does not know is an error, not something to ignore,
/// so that a mistyped flag is not a server silently waiting on stdin.
fn command(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    for arg in args {
        match arg.to_str() {
            Some("-h" | "--help") => return Ok(Command::Help),
            Some("-V" | "--version") => return Ok(Command::Version),
            // What editors' clients pass for the stdio transport.
            Some("--stdio") => {}
            _ => return Err(format!("unknown argument `{}`", arg.to_string_lossy())),
        }
    }
    Ok(Command::Serve)
}

fn main() -> ExitCode {
    match command(std::env::args_os().skip(1)) {
        Ok(Command::Serve) => serve(),
        Ok(Command::Help) => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Ok(Command::Version) => {
            println!("mcpolicy-lsp {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!(
                "mcpolicy-lsp: {why}\nUsage: mcpolicy-lsp [--stdio]\nFor more, try `mcpolicy-lsp --help`."
            );
            ExitCode::from(2)
        }
    }
}

fn serve() -> ExitCode {
    let (connection, writer) = transport::stdio();
    let outcome = mcpolicy_lsp::main_loop::run_stdio(&connection);
    drop(connection); // closes the writer's channel so that it can finish
    let flushed = writer.join();
    match (outcome, flushed) {
        (Ok(Exit::Clean), Ok(())) => ExitCode::SUCCESS,
        (Ok(Exit::Abrupt), _) => ExitCode::from(1),
        (Err(error), _) => {
            eprintln!("mcpolicy-lsp: {error}");
            ExitCode::from(1)
        }
        (Ok(Exit::Clean), Err(error)) => {
            eprintln!("mcpolicy-lsp: {error}");
            ExitCode::from(1)
        }
    }
}
