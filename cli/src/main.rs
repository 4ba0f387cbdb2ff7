//! `mcpc`: check, format, compile, test and explain `.mcpolicy` files, and run
//! an MCP server behind a policy (`mcpc proxy`, the `mcpolicy-proxy` crate).
//!
//! The command line. Exit codes: 0 clean, 1 findings, 2 usage or I/O error.

/// `eprint!` that never panics: standard error closed by its reader
/// (`mcpc … 2>&1 | head`) is never fatal to a command.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::emit_err(&format!($($arg)*))
    };
}

/// `eprintln!` that never panics (see [`say!`]).
macro_rules! sayln {
    ($($arg:tt)*) => {
        $crate::emit_err(&format!("{}\n", format_args!($($arg)*)))
    };
}

mod audit;
mod check;
mod compile;
mod completions;
mod diff;
mod eval;
mod explain;
mod fmt;
mod identity;
mod inputs;
mod policy;
mod proxy;
mod show;
mod store;
mod store_open;
mod test;
mod user_config;
mod wrap;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// mcpc — the mcpolicy compiler.
#[derive(Debug, Parser)]
#[command(
    name = "mcpc",
    version,
    about = "Check, format and compile .mcpolicy files",
    after_help = "Exit codes: 0 success; 1 findings, failed cases or a denial; 2 usage or I/O error. Each command's --help gives its own.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Report on the proxy's --audit logs, per server.
    Audit(audit::Args),
    /// Check policies and report every finding.
    #[command(
        after_help = "Exit codes: 0 no errors (and no warnings with --deny-warnings); 1 findings that fail the check; 2 usage or I/O error."
    )]
    Check(check::Args),
    /// Rewrite policies in the canonical layout (`--check` only reports).
    #[command(
        after_help = "Exit codes: 0 formatted (or nothing to change); 1 a file has syntax errors, or with --check/--diff is not formatted; 2 usage or I/O error."
    )]
    Fmt(fmt::Args),
    /// Compile a policy into its decision table (mcpolicy-table/1 JSON).
    Compile(compile::Args),
    /// Decide one sampling request against a policy and print the frame or the forwarded request.
    // Its exit codes and the --explain JSON shape are in eval.rs (EVAL_HELP).
    Eval(eval::Args),
    /// Print the canonical identity of a sampling request.
    Identity(identity::Args),
    /// Explain a diagnostic code, e.g. `mcpc explain E0103`.
    Explain(explain::Args),
    /// Run an MCP server behind a policy: a stdio proxy the client launches in its place.
    #[command(
        after_help = "Exit codes: the server's own when it exits (128 + N when signal N ended it); 130, 143 or 129 when SIGINT, SIGTERM or SIGHUP stopped the proxy: the server's input is closed, then it gets SIGTERM after 2 s and SIGKILL after 2 s more, and the log says why it stopped; 2 when the proxy cannot start (usage, policy, store, server command)."
    )]
    Proxy(proxy::Args),
    /// Run policy unit tests (TOML cases) and report coverage.
    #[command(
        after_help = "Exit codes: 0 every case passed (and coverage met --threshold); 1 a case failed, coverage fell short, or a policy has errors; 2 usage, I/O or a malformed test file."
    )]
    Test(test::Args),
    /// See and undo what the decision store remembers: ls, show, forget, budgets, stats, prune.
    Store(store::Args),
    /// Show which block governs a server id, and each statement's value and origin.
    Show(show::Args),
    /// Compare two policies: which blocks' stored decisions an edit invalidates, and why.
    Diff(diff::Args),
    /// Put every stdio server of an MCP client's configuration behind `mcpc proxy` (`--undo`, `--list`).
    Wrap(wrap::Args),
    /// Print a shell completion script: `mcpc completions bash|zsh|fish|elvish|powershell`.
    Completions(completions::CompletionsArgs),
    /// Print the manual page (`mcpc man | man -l -`), or write every page with `--dir`.
    Man(completions::ManArgs),
}

/// How to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal unless NO_COLOR is set.
    Auto,
    /// Always colour (still off under NO_COLOR).
    Always,
    /// Never colour.
    Never,
}

pub(crate) fn human_style(choice: ColorChoice) -> mcpolicy_compiler::render::Style {
    use mcpolicy_compiler::render::Style;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let tty = std::io::stderr().is_terminal();
    match choice {
        ColorChoice::Never => Style::Plain,
        _ if no_color => {
            if tty {
                Style::FancyNoColor
            } else {
                Style::Plain
            }
        }
        ColorChoice::Always => Style::Fancy,
        ColorChoice::Auto if tty => Style::Fancy,
        ColorChoice::Auto => Style::Plain,
    }
}

/// Writes to stdout, treating a closed pipe as success.
pub(crate) fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Writes a frame (or any bytes) and a newline to stdout, treating a closed
/// pipe as success.
pub(crate) fn emit_line(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(bytes)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}

/// Writes to stderr, treating a closed pipe as success: `eprint!` panics
/// when the reader of a log pipe has gone (`mcpc proxy … 2>&1 | head`), and a
/// closed log is never fatal.
pub(crate) fn emit_err(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// Prints a usage or I/O error and returns exit code 2.
pub(crate) fn fail(message: impl std::fmt::Display) -> ExitCode {
    emit_err(&format!("mcpc: error: {message}\n"));
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() { 2 } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Audit(args) => audit::run(args),
        Command::Check(args) => check::run(args),
        Command::Compile(args) => compile::run(args),
        Command::Fmt(args) => fmt::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Identity(args) => identity::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Test(args) => test::run(args),
        Command::Store(args) => store::run(args),
        Command::Show(args) => show::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Wrap(args) => wrap::run(args),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
    }
}
