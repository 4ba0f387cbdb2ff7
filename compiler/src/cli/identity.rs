//! `mcpc identity --server ID [--policy POLICY] FILE|-`

use std::io::Read;
use std::process::ExitCode;

use mcpolicy_compiler::check::DEFAULT_IDENTITY;
use mcpolicy_runtime::{frame, identity, request};

use super::policy::{LoadFailure, load_table};
use super::{ColorChoice, emit, fail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server id the request comes from.
    #[arg(long, value_name = "ID")]
    server: String,
    /// Take the identity fields from this policy (default: systemPrompt, messages, includeContext, modelPreferences).
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
    /// A JSON-RPC `sampling/createMessage` request or its params object; `-` reads standard input.
    #[arg(value_name = "FILE")]
    request: String,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

/// Reads a request file (or stdin) as bytes, bounded like the runtime's parser.
pub(crate) fn read_request(path: &str) -> std::io::Result<Vec<u8>> {
    let limit = request::Limits::default().max_bytes as u64 + 1;
    let mut bytes = Vec::new();
    if path == "-" {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut bytes)?;
    } else {
        std::fs::File::open(path)?
            .take(limit)
            .read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

pub fn run(args: Args) -> ExitCode {
    let fields: Vec<String> = match &args.policy {
        Some(path) => match load_table(path, args.color) {
            Ok(table) => table.identity,
            Err(LoadFailure::Usage(message)) => return fail(message),
            Err(LoadFailure::Findings) => return ExitCode::from(1),
        },
        None => DEFAULT_IDENTITY.iter().map(|s| (*s).to_owned()).collect(),
    };
    let bytes = match read_request(&args.request) {
        Ok(bytes) => bytes,
        Err(error) => return fail(format!("cannot read {}: {error}", args.request)),
    };
    let parsed = request::parse_strict(&bytes);
    let id = parsed.as_ref().ok().and_then(request::envelope_id).cloned();
    match parsed.and_then(request::validate_sampling) {
        Ok(sampling) => {
            emit(&format!(
                "{}\n",
                identity::request_identity(&args.server, &sampling.params, &fields)
            ));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "{}",
                frame::request_error_response(id.as_ref(), error.code(), &error.to_string())
            );
            ExitCode::from(1)
        }
    }
}
