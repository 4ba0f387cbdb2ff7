//! `mcpolicy-lsp`: the language server for `.mcpolicy` files, over stdio.

use std::process::ExitCode;

use mcpolicy_lsp::{Exit, run, transport};

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--version" || a == "-V") {
        println!("mcpolicy-lsp {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let (connection, writer) = transport::stdio();
    let outcome = run(&connection);
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
