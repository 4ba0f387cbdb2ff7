//! `mcpc`: check, format, compile and explain `.mcpolicy` files.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
