//! `mcpc store …`: see and undo what the decision store remembers, over the
//! store the proxy uses (same default path, same `--store SPEC`).
//!
//! Every subcommand goes through `runtime::store::StoreAdmin` (one
//! transaction per call, safe while proxies use the store) and the engine's
//! own answers for a policy (`Engine::digest_for`, `Engine::limits`): nothing
//! here re-derives what the runtime decides.
//!
//! `ls`, `show`, `budgets`, `stats` and `verify` open the store read-only
//! (a SQLite file through `SqliteStore::open_read_only`): they never
//! create, convert or migrate a store, and work on a file or directory the
//! caller may only read.
//!
//! Exit codes: 0 ok; 1 nothing matched (`show`, `forget`), or damage found
//! (`verify`); 2 usage or store error (also `forget` of more than one
//! decision, or `prune --policy`, without `--yes`).

mod admin;
mod migrate;
mod output;
mod verify;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Subcommand, ValueEnum};
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::{Clock, FixedClock, SystemClock, parse_rfc3339};
use mcpolicy_runtime::store::{Millis, StoreAdmin, Verdict};

use super::policy::{LoadFailure, load_policy};
use super::store_open::{self, Create};
use super::{ColorChoice, fail};

/// The exit codes, shown under every subcommand's `--help`.
const EXIT_CODES: &str = "Exit codes: 0 ok; 1 nothing matched (show, forget); 2 usage or store \
error, and forget of more than one decision or prune --policy without --yes.";

#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List stored decisions (filters combine: every one given must match).
    #[command(after_help = EXIT_CODES)]
    Ls(admin::LsArgs),
    /// Everything about one stored decision, its `error.data` included.
    #[command(after_help = EXIT_CODES)]
    Show(admin::ShowArgs),
    /// Delete stored decisions, so the next identical request is decided afresh.
    ///
    /// Select by --identity, --server or --reason (at least one; given
    /// together, every one must match). It says what it removed, and
    /// removes more than one decision only with --yes.
    #[command(after_help = EXIT_CODES)]
    Forget(admin::ForgetArgs),
    /// Spend and what remains of every rate and budget statement, per server.
    #[command(after_help = EXIT_CODES)]
    Budgets(admin::BudgetsArgs),
    /// The most-denied servers, the highest represented counts (retry loops), the store size.
    #[command(after_help = EXIT_CODES)]
    Stats(admin::StatsArgs),
    /// Delete expired decisions and spend past its retention (with --policy, stale decisions too).
    #[command(after_help = EXIT_CODES)]
    Prune(admin::PruneArgs),
    /// Read the whole store and check it: the storage's integrity check and the schema's invariants.
    ///
    /// SQLite: PRAGMA integrity_check (every page and index entry, what
    /// SqliteOptions::verify_on_open runs in its quick form), the file's
    /// identity and schema version, and the invariants the schema keeps
    /// (each server's stored count, each counter's total against its spend
    /// rows, …). PostgreSQL: the schema version, the tables' keys and
    /// checks, the store's functions and the same invariants. Read-only;
    /// linear in the store's size (docs/spec/store.md, "Verifying a store").
    #[command(after_help = verify::EXIT_CODES)]
    Verify(verify::VerifyArgs),
    /// Copy an SQLite store into an empty PostgreSQL store (decisions, tallies, every counter exactly).
    #[command(after_help = migrate::EXIT_CODES)]
    Migrate(migrate::MigrateArgs),
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// An aligned table, timestamps in RFC 3339 UTC.
    Human,
    /// One JSON document on standard output.
    Json,
}

/// The options every subcommand takes.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// The decision store: a SQLite file path or a PostgreSQL store (postgres://… or
    /// host=… dbname=…, password from PGPASSWORD or a password file, TLS as libpq:
    /// sslmode=verify-full sslrootcert=CA.pem) [default: the proxy's: `store` in
    /// ~/.config/mcpolicy/config.toml, else ~/.local/state/mcpolicy/decisions.sqlite3 on
    /// Linux, ~/Library/Application Support/mcpolicy/… on macOS, %LOCALAPPDATA%\mcpolicy\…
    /// on Windows].
    #[arg(long, value_name = "SPEC")]
    store: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Act as of this instant (RFC 3339, e.g. 2026-03-10T12:00:00Z) instead of now.
    #[arg(long, value_name = "RFC3339")]
    now: Option<String>,
}

/// An opened store and what every subcommand needs with it.
pub(crate) struct Ctx {
    spec: String,
    store: Arc<dyn StoreAdmin>,
    now: Millis,
    format: Format,
}

/// Whether a subcommand writes to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Inspection: the store is opened read-only, never created or converted.
    Read,
    /// Maintenance (`forget`, `prune`): an existing store, opened to write.
    Write,
}

impl Ctx {
    fn open(common: &Common, access: Access) -> Result<Ctx, ExitCode> {
        let now = match &common.now {
            Some(text) => parse_rfc3339(text).ok_or_else(|| {
                fail(format!(
                    "--now `{text}` is not an RFC 3339 time like 2026-03-10T12:00:00Z"
                ))
            })?,
            None => SystemClock.now(),
        };
        let spec = common
            .store
            .clone()
            .map_or_else(store_open::default_spec, Ok)
            .map_err(fail)?;
        let clock = match common.now {
            Some(_) => store_open::Now::Given,
            None => store_open::Now::System,
        };
        let create = match access {
            Access::Read => Create::ReadOnly,
            Access::Write => Create::MustExist,
        };
        let store = store_open::open(&spec, create, clock).map_err(fail)?;
        Ok(Ctx {
            spec,
            store,
            now,
            format: common.format,
        })
    }

    /// An engine over `path`'s policy and this store, at `now`: what tells
    /// which digest is a server's current block and what its limits are.
    fn engine(&self, path: &str) -> Result<Engine, ExitCode> {
        let policy = match load_policy(path, ColorChoice::Auto) {
            Ok(policy) => policy,
            Err(LoadFailure::Usage(message)) => return Err(fail(message)),
            Err(LoadFailure::Findings) => {
                return Err(fail(format!("{path} has errors; fix them first")));
            }
        };
        let store: Arc<dyn mcpolicy_runtime::store::DecisionStore> = self.store.clone();
        Ok(Engine::new(policy, store, Arc::new(FixedClock(self.now))))
    }
}

/// `--verdict`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerdictArg {
    /// Stored approvals (`user.approved`).
    Allow,
    /// Stored denials.
    Deny,
}

impl From<VerdictArg> for Verdict {
    fn from(arg: VerdictArg) -> Verdict {
        match arg {
            VerdictArg::Allow => Verdict::Allow,
            VerdictArg::Deny => Verdict::Deny,
        }
    }
}

pub fn run(args: Args) -> ExitCode {
    let outcome = match args.command {
        Command::Ls(args) => admin::ls(args),
        Command::Show(args) => admin::show(args),
        Command::Forget(args) => admin::forget(args),
        Command::Budgets(args) => admin::budgets(args),
        Command::Stats(args) => admin::stats(args),
        Command::Prune(args) => admin::prune(args),
        Command::Verify(args) => verify::run(args),
        Command::Migrate(args) => migrate::run(args),
    };
    outcome.unwrap_or_else(|code| code)
}
