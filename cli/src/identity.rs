//! `mcpc identity --server ID [--policy POLICY] --request FILE|-`
//!
//! The request file is named by `--request`, as `mcpc eval` names it. The
//! older positional `FILE` still works, with a warning saying what to write.
//!
//! Prints a request's identity, its refusal key (`docs/spec/identity.md`), on stdout. A request the runtime refuses is
//! answered as `mcpc eval` answers it: the JSON-RPC error frame on stdout
//! (what would be sent back), a one-line summary on stderr, exit code 1.

use std::process::ExitCode;

use mcpolicy_compiler::check::DEFAULT_IDENTITY;
use mcpolicy_runtime::{identity, request};

use super::policy::{LoadFailure, load_policy};
use super::{ColorChoice, emit, emit_line, fail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server id the request comes from.
    #[arg(long, value_name = "ID")]
    server: String,
    /// Take the identity fields from this policy (default: systemPrompt, messages, includeContext, modelPreferences).
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
    /// A JSON-RPC `sampling/createMessage` request or its params object; `-` reads standard input.
    /// A refused request prints its JSON-RPC error frame on stdout (as `mcpc eval` does) and exits 1.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "positional",
        conflicts_with = "positional"
    )]
    request: Option<String>,
    /// Deprecated: the request file as a positional argument; write `--request FILE`.
    #[arg(value_name = "FILE", hide = true)]
    positional: Option<String>,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

/// Reads a request file (or stdin), holding no more than the runtime's size
/// limit: an oversize input is refused with its true size and, when it can
/// be read, its id (the rest is streamed, not kept).
pub(crate) fn read_request(path: &str) -> std::io::Result<Result<Vec<u8>, request::Rejection>> {
    let limits = request::Limits::default();
    if path == "-" {
        request::read_bounded(&mut std::io::stdin().lock(), &limits)
    } else {
        let mut file = mcpolicy_compiler::input::open_regular(std::path::Path::new(path))?;
        request::read_bounded(&mut file, &limits)
    }
}

/// Answers a refused request: the error frame on stdout, a summary on
/// stderr, exit code 1 (the same for `mcpc identity` and `mcpc eval`).
pub(crate) fn refuse(rejection: &request::Rejection) -> ExitCode {
    sayln!("invalid request ({})", rejection.code());
    emit_line(&rejection.reply());
    ExitCode::from(1)
}

pub fn run(args: Args) -> ExitCode {
    let fields: Vec<String> = match &args.policy {
        Some(path) => match load_policy(path, args.color) {
            Ok(policy) => policy.table().identity.clone(),
            Err(LoadFailure::Usage(message)) => return fail(message),
            Err(LoadFailure::Findings) => return ExitCode::from(1),
        },
        None => DEFAULT_IDENTITY.iter().map(|s| (*s).to_owned()).collect(),
    };
    let path = match (args.request, args.positional) {
        (Some(path), _) => path,
        (None, Some(path)) => {
            sayln!(
                "mcpc: warning: the request file as a positional argument is deprecated; write `mcpc identity --server {} --request {path}`, as `mcpc eval` takes it",
                args.server
            );
            path
        }
        // clap requires one of the two.
        (None, None) => return fail("--request FILE is required"),
    };
    let bytes = match read_request(&path) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(rejection)) => return refuse(&rejection),
        Err(error) => return fail(format!("cannot read {path}: {error}")),
    };
    match request::parse_sampling(&bytes) {
        Ok(sampling) => {
            emit(&format!(
                "{}\n",
                identity::refusal_key(&args.server, sampling.params(), &fields)
            ));
            ExitCode::SUCCESS
        }
        Err(rejection) => refuse(&rejection),
    }
}
