//! `mcpc completions SHELL` and `mcpc man [--dir DIR]`: shell completion
//! scripts (clap_complete) and manual pages (clap_mangen), generated from
//! the same clap command the parser uses, so they never drift from it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

use super::{Cli, emit, fail};

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write `mcpc.1` and one `mcpc-COMMAND.1` per command into this
    /// directory instead of printing `mcpc.1` to standard output.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script, e.g. `mcpc completions bash >
/// ~/.local/share/bash-completion/completions/mcpc`.
pub fn completions(args: CompletionsArgs) -> ExitCode {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "mcpc", &mut out);
    emit(&String::from_utf8_lossy(&out));
    ExitCode::SUCCESS
}

/// Renders one page.
fn page(command: clap::Command, title: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    clap_mangen::Man::new(command)
        .title(title.to_owned())
        .render(&mut out)
        .map_err(|e| format!("cannot render the manual page: {e}"))?;
    Ok(out)
}

/// A page per subcommand of `command`, at every depth: clap_mangen's page of
/// a command refers to `NAME-SUB(1)` for each of its subcommands
/// (`mcpc-store(1)` to `mcpc-store-ls(1)`), so each of those is written.
/// `name` is the page name of `command`, `bin` its synopsis (`mcpc store`).
pub(crate) fn every_page(
    command: &clap::Command,
    name: &str,
    bin: &str,
    pages: &mut Vec<(String, clap::Command)>,
) {
    // clap's own `help` too: the pages list it among the subcommands.
    for sub in command.get_subcommands() {
        let sub_name = format!("{name}-{}", sub.get_name());
        let sub_bin = format!("{bin} {}", sub.get_name());
        // `mcpc store ls`, not `ls`, in the page's synopsis.
        pages.push((sub_name.clone(), sub.clone().bin_name(sub_bin.clone())));
        every_page(sub, &sub_name, &sub_bin, pages);
    }
}

/// Prints `mcpc.1`, or writes every page into `--dir`.
pub fn man(args: ManArgs) -> ExitCode {
    let mut command = Cli::command();
    command.build();
    let Some(dir) = args.dir else {
        return match page(command, "mcpc") {
            Ok(bytes) => {
                emit(&String::from_utf8_lossy(&bytes));
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(format!("cannot create {}: {e}", dir.display()));
    }
    let mut pages = vec![("mcpc".to_owned(), command.clone())];
    every_page(&command, "mcpc", "mcpc", &mut pages);
    for (name, page_command) in pages {
        let path = dir.join(format!("{name}.1"));
        let written = page(page_command, &name).and_then(|bytes| {
            std::fs::write(&path, bytes)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        });
        if let Err(e) = written {
            return fail(e);
        }
        sayln!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
