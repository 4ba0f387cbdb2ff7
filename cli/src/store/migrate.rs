//! `mcpc store migrate --from SQLITE_PATH --to POSTGRES_SPEC`: moves a
//! proxy's SQLite store into a PostgreSQL store, so a fleet starts with
//! what one machine remembered (decisions with their `represented` counts,
//! server tallies, and every rate and budget counter exactly as it was).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::Format;
use crate::store_open::{self, Create};
use crate::{emit, fail, plural};

/// The exit codes of `mcpc store migrate`.
pub(super) const EXIT_CODES: &str = "Exit codes: 0 copied; 2 usage error, an unreadable SQLite \
store, an unreachable or non-empty PostgreSQL store (nothing is copied then).";

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The SQLite store file to copy (it is opened, checked and brought to the current schema).
    #[arg(long, value_name = "SQLITE_PATH")]
    from: PathBuf,
    /// The PostgreSQL store to copy into: `postgres://USER@HOST/DB?schema=NAME` or
    /// `host=… dbname=… user=… schema=NAME`; the password comes from PGPASSWORD or a
    /// password file, never from here; TLS as libpq (`sslmode=verify-full
    /// sslrootcert=CA.pem`). Its schema must hold no decisions or spend yet.
    #[arg(long, value_name = "POSTGRES")]
    to: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

pub(super) fn run(args: MigrateArgs) -> Result<ExitCode, ExitCode> {
    if !args.from.is_file() {
        return Err(fail(format!(
            "--from {}: no SQLite store there",
            args.from.display()
        )));
    }
    if !mcpolicy_store_postgres::StoreSpec::looks_like_postgres(&args.to) {
        return Err(fail(format!(
            "--to {}: not a PostgreSQL store (give a postgres:// URL or host=… dbname=…)",
            args.to
        )));
    }
    let target = store_open::open_postgres(&args.to, Create::IfMissing, store_open::Now::System)
        .map_err(fail)?;
    let copied = target.import_sqlite(&args.from).map_err(fail)?;
    match args.format {
        Format::Human => emit(&format!(
            "copied {} {}, {} server {}, {} {} and {} spend {} from {} to {}\n",
            copied.decisions,
            plural(copied.decisions, "decision", "decisions"),
            copied.servers,
            plural(copied.servers, "tally", "tallies"),
            copied.counters,
            plural(copied.counters, "counter", "counters"),
            copied.spend_rows,
            plural(copied.spend_rows, "row", "rows"),
            args.from.display(),
            target.target()
        )),
        Format::Json => emit(&format!(
            "{}\n",
            json!({
                "from": args.from.display().to_string(),
                "to": target.target(),
                "decisions": copied.decisions,
                "servers": copied.servers,
                "counters": copied.counters,
                "spendRows": copied.spend_rows,
            })
        )),
    }
    Ok(ExitCode::SUCCESS)
}
