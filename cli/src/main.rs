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
mod gateway;
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
    #[command(
        after_help = "Exit codes: 0 the table was written; 1 the policy has errors (printed on stderr, nothing written); 2 usage or I/O error."
    )]
    Compile(compile::Args),
    /// Decide one sampling request against a policy and print the frame or the forwarded request.
    // Its exit codes and the --explain JSON shape are in eval.rs (EVAL_HELP).
    Eval(eval::Args),
    /// Print the canonical identity of a sampling request.
    #[command(
        after_help = "Exit codes: 0 the identity was printed; 1 the request is invalid (its JSON-RPC error frame is printed) or the policy has errors; 2 usage or I/O error."
    )]
    Identity(identity::Args),
    /// Explain a diagnostic code, e.g. `mcpc explain E0103`.
    #[command(
        after_help = "Exit codes: 0 the explanation (or the list) was printed; 2 an unknown code, or a usage error."
    )]
    Explain(explain::Args),
    /// Run an MCP server behind a policy: a stdio proxy the client launches in its place.
    #[command(
        after_help = "Exit codes: the server's own when it exits (128 + N when signal N ended it); 130, 143 or 129 when SIGINT, SIGTERM or SIGHUP stopped the proxy: the server's input is closed, then it gets SIGTERM after 2 s and SIGKILL after 2 s more, and the log says why it stopped; 2 when the proxy cannot start (usage, policy, store, server command)."
    )]
    Proxy(proxy::Args),
    /// Put remote MCP servers (Streamable HTTP) behind a policy: a reverse proxy, one route per server.
    #[command(
        after_help = "Exit codes: 0 when SIGINT or SIGTERM stopped the gateway (every session ended first: decisions in flight settled or refunded, the store's counts written); 2 when the gateway cannot start (usage, config, policy, store, listen address, TLS files)."
    )]
    Gateway(Box<gateway::Args>),
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
    #[command(
        after_help = "Exit codes: 0 the script was printed; 2 usage error (an unknown shell)."
    )]
    Completions(completions::CompletionsArgs),
    /// Print the manual page (`mcpc man | man -l -`), or write every page with `--dir`.
    #[command(
        after_help = "Exit codes: 0 the page was printed, or every page written; 2 usage error, or a page that cannot be written."
    )]
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

/// `count` followed by the noun in the number it takes: `1 decision`,
/// `2 decisions` (every count a command prints).
pub(crate) fn plural(count: u64, one: &'static str, many: &'static str) -> &'static str {
    if count == 1 { one } else { many }
}

/// Prints a usage or I/O error and returns exit code 2.
pub(crate) fn fail(message: impl std::fmt::Display) -> ExitCode {
    emit_err(&format!("mcpc: error: {message}\n"));
    ExitCode::from(2)
}

/// `mcpc proxy --policy p node server.js`: clap refuses `node` as an
/// unexpected argument; the mistake is the missing `--`, so the error says
/// where the server's command goes.
fn hint_proxy_separator(error: &mut clap::Error, args: &[std::ffi::OsString]) {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let proxy = args.get(1).is_some_and(|arg| arg == "proxy");
    let separated = args.iter().any(|arg| arg == "--");
    if error.kind() == ErrorKind::UnknownArgument && proxy && !separated {
        error.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![
                "the server's command goes after `--`: mcpc proxy --policy FILE [OPTIONS] -- SERVER_CMD ARGS…"
                    .into(),
            ]),
        );
    }
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(mut error) => {
            hint_proxy_separator(&mut error, &args);
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
        Command::Gateway(args) => gateway::run(*args),
        Command::Test(args) => test::run(args),
        Command::Store(args) => store::run(args),
        Command::Show(args) => show::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Wrap(args) => wrap::run(args),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command at every depth of clap's tree, with its path (`store ls`).
    fn every_command(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        for sub in command.get_subcommands() {
            if sub.get_name() == "help" {
                continue; // clap's own
            }
            let sub_path = format!("{path} {}", sub.get_name()).trim().to_owned();
            out.push((sub_path.clone(), sub.clone()));
            every_command(sub, &sub_path, out);
        }
    }

    /// README, "The command line": every command's `--help` ends with its
    /// exit codes. The last paragraph of each help text, short and long,
    /// starts with `Exit codes:` and names code 0 and 2.
    #[test]
    fn every_commands_help_ends_with_its_exit_codes() {
        let mut root = super::Cli::command();
        root.build();
        let mut commands = vec![("mcpc".to_owned(), root.clone())];
        every_command(&root, "", &mut commands);
        assert!(commands.len() > 20, "{}", commands.len());
        for (path, mut command) in commands {
            for help in [command.render_help(), command.render_long_help()] {
                let text = help.to_string();
                let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
                assert!(
                    last.starts_with("Exit codes:") && last.contains('0') && last.contains('2'),
                    "`mcpc {path} --help` does not end with its exit codes:\n{text}"
                );
            }
        }
    }
}
