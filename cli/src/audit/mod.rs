//! `mcpc audit FILE… [--since RFC3339] [--until RFC3339] [--format human|json|html]`
//!
//! A report over the proxy's `--audit` lines
//! (`runtime/schema/mcpolicy-audit-1.schema.json`, `proxy/PROXY.md` "The
//! audit log"): per server its outcomes, top reasons, retry loops, consent
//! prompts and trims (requested against applied), and the alerts. A server
//! that keeps asking wider than it may shows up at a glance: its trimmed
//! percentage and the widest request it made lead its row.
//!
//! Malformed lines are counted and reported with their file and line
//! number, never fatal. Exit codes: 0 report written; 2 usage error or a
//! file that cannot be read.
//!
//! Bounds: each file must be a regular file (a FIFO is refused, not waited
//! on), and all files together at most [`MAX_AUDIT_BYTES`]. Files are read
//! line by line and each line is summed up as it is read: memory is what
//! the report itself holds, never the lines (`report::Builder`). Column
//! widths in the human report are bounded (`render::columns`).

mod html;
mod human;
mod report;

use std::process::ExitCode;

use clap::ValueEnum;
use mcpolicy_runtime::clock::parse_rfc3339;

use super::{emit, fail};

/// The most audit bytes one run reads, all files together (256 MiB): a
/// larger log is cut with `--since`/`--until` upstream, or split.
pub const MAX_AUDIT_BYTES: u64 = 256 << 20;

/// How the report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table per server, for a terminal.
    Human,
    /// One JSON object (the report's structure).
    Json,
    /// One self-contained HTML page with per-server charts over time.
    Html,
}

/// `mcpc audit`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Report on the proxy's --audit logs: outcomes, reasons, retry loops, consent, trims per server",
    after_help = "Exit codes: 0 report written (malformed lines are counted and listed, not fatal); 1 every line read was malformed (the report lists them; none is an audit line); 2 usage error or an unreadable file."
)]
pub struct Args {
    /// Audit files written by `mcpc proxy --audit` (JSON lines).
    #[arg(value_name = "FILE", required = true)]
    files: Vec<String>,
    /// Only lines at or after this instant (RFC 3339, e.g. 2026-03-10T12:00:00Z).
    #[arg(long, value_name = "RFC3339")]
    since: Option<String>,
    /// Only lines before this instant (RFC 3339).
    #[arg(long, value_name = "RFC3339")]
    until: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

/// Runs `mcpc audit`.
pub fn run(args: Args) -> ExitCode {
    let instant = |name: &str, text: &Option<String>| match text {
        None => Ok(None),
        Some(text) => parse_rfc3339(text).map(Some).ok_or_else(|| {
            format!("--{name} `{text}` is not an RFC 3339 instant (e.g. 2026-03-10T12:00:00Z)")
        }),
    };
    let since = match instant("since", &args.since) {
        Ok(since) => since,
        Err(message) => return fail(message),
    };
    let until = match instant("until", &args.until) {
        Ok(until) => until,
        Err(message) => return fail(message),
    };
    let mut builder = report::Builder::new(since, until);
    let mut left = MAX_AUDIT_BYTES;
    for file in &args.files {
        let opened = match mcpolicy_compiler::input::open_regular(std::path::Path::new(file)) {
            Ok(opened) => opened,
            Err(error) => return fail(format!("cannot read {file}: {error}")),
        };
        let input = std::io::BufReader::with_capacity(64 * 1024, opened);
        match builder.read_from(file, input, &mut left) {
            Ok(()) => {}
            Err(report::ReadError::TooLarge) => {
                return fail(format!(
                    "cannot read {file}: the audit files together exceed {} MiB, the most one report reads; split them or report on fewer",
                    MAX_AUDIT_BYTES >> 20
                ));
            }
            Err(report::ReadError::Io(error)) => {
                return fail(format!("cannot read {file}: {error}"));
            }
        }
    }
    let report = builder.finish();
    match args.format {
        Format::Human => emit(&human::render(&report)),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&report).unwrap_or_default();
            text.push('\n');
            emit(&text);
        }
        Format::Html => emit(&html::render(&report)),
    }
    // Not one audit line among the lines read: the wrong file, most likely.
    if report.lines > 0 && report.counted == 0 && report.outside == 0 {
        sayln!(
            "mcpc: error: none of the {} {} read is an audit line (each is listed as malformed)",
            report.lines,
            crate::plural(report.lines as u64, "line", "lines")
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
