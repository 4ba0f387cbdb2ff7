//! Opening a decision store from the `--store SPEC` of `mcpc proxy`,
//! `mcpc eval` and `mcpc store`: one place that knows which specs name which
//! store, so every command reaches the same store the same way.
//!
//! - a path (anything without a `scheme://` prefix): the SQLite store file;
//! - a PostgreSQL store: a `postgres://` / `postgresql://` URL or a libpq
//!   `key=value` string (`host=… dbname=…`), with `schema=NAME` to pick the
//!   store's schema and libpq's `sslmode`/`sslrootcert`/`sslcert`/`sslkey`
//!   for TLS; never with a password in it (`PGPASSWORD` or a password file
//!   give it);
//! - any other `scheme://…`: refused, naming the schemes that are known.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mcpolicy_runtime::store::{SqliteStore, StoreAdmin, StoreError};
use mcpolicy_store_postgres::{ConfigError, PostgresOptions, PostgresStore, StoreSpec};

/// Whether opening may create a store that is not there yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    /// Create the store, and a SQLite file's directory, if absent: what the
    /// proxy does (its default path may be in a directory not made yet).
    WithDirectory,
    /// Create the store if absent, in an existing directory: what
    /// `mcpc eval --store` does.
    IfMissing,
    /// Refuse a store that does not exist: what `mcpc store forget` and
    /// `prune` do, which maintain one (an empty new file would hide a
    /// mistyped path).
    MustExist,
    /// Open an existing store for reading only, never creating, converting
    /// or migrating it: what `mcpc store ls`, `show`, `budgets`, `stats` and
    /// `verify` do (a SQLite file with `SqliteStore::open_read_only`, so a
    /// read-only file or directory is enough).
    ReadOnly,
}

/// Whose clock the caller decides by: what a PostgreSQL store checks a
/// caller's `now` against (`docs/spec/store.md`, "One clock for a fleet").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// The machine's clock (a proxy, or a command without `--now`): a fleet
    /// store refuses it past `max_clock_skew` from the database's clock.
    System,
    /// An instant the operator gave (`--now`), on purpose not the
    /// database's: not checked.
    Given,
}

/// Why a store spec could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// `scheme://…` of a store this build does not know.
    UnknownScheme {
        /// The spec as given.
        spec: String,
        /// Its scheme.
        scheme: String,
    },
    /// [`Create::MustExist`] and there is no store at the path.
    Missing(PathBuf),
    /// The directory of a new SQLite file could not be created.
    Directory {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store refused to open (its error names the file).
    Store(StoreError),
    /// A PostgreSQL connection string that cannot be used (e.g. it holds a password).
    Postgres(ConfigError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::UnknownScheme { spec, scheme } => write!(
                f,
                "--store {spec}: unknown store scheme `{scheme}://`; give a file path for a \
                 SQLite store, or a postgres:// URL"
            ),
            OpenError::Missing(path) => write!(
                f,
                "store.missing: no decision store at {} (a proxy creates it with its first stored decision; \
                 pass --store to name another)",
                path.display()
            ),
            OpenError::Directory { dir, source } => {
                write!(f, "cannot create {}: {source}", dir.display())
            }
            OpenError::Store(error) => write!(f, "{}: {error}", error.code()),
            OpenError::Postgres(error) => write!(f, "--store: {error}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// The store `mcpc proxy` and `mcpc store` use when `--store` is not given:
/// the `store` of the user's `config.toml` ([`crate::user_config`]), else
/// the platform's default path ([`mcpolicy_proxy::default_store_path`]).
/// Both are found from the home directory alone, so a proxy started by an
/// MCP client with a reduced environment and a command in the user's shell
/// agree (`docs/spec/clients.md`, "Which store").
pub fn default_spec() -> Result<String, String> {
    if let Some(store) = crate::user_config::read()?.store {
        return Ok(store);
    }
    mcpolicy_proxy::default_store_path()
        .map(|path| path.to_string_lossy().into_owned())
        .ok_or_else(|| "no home directory to find the decision store in; pass --store".to_owned())
}

/// The scheme of a `scheme://…` spec (RFC 3986 letters), `None` for a path.
/// A Windows path (`C:\…`) has no `//` after its colon, so it is a path.
fn scheme(spec: &str) -> Option<&str> {
    let (scheme, _) = spec.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// Opens the store `spec` names (see the module documentation).
pub fn open(spec: &str, create: Create, now: Now) -> Result<Arc<dyn StoreAdmin>, OpenError> {
    if StoreSpec::looks_like_postgres(spec) {
        return Ok(Arc::new(open_postgres(spec, create, now)?));
    }
    match scheme(spec) {
        None => open_sqlite(Path::new(spec), create),
        Some(scheme) => Err(OpenError::UnknownScheme {
            spec: spec.to_owned(),
            scheme: scheme.to_owned(),
        }),
    }
}

/// Opens the PostgreSQL store `spec` names (see [`StoreSpec`]); with
/// [`Create::MustExist`] a schema that holds no store is refused; with
/// [`Now::Given`] the caller's instants are not checked against the
/// database's clock.
pub fn open_postgres(spec: &str, create: Create, now: Now) -> Result<PostgresStore, OpenError> {
    let parsed = StoreSpec::parse(spec).map_err(OpenError::Postgres)?;
    let defaults = PostgresOptions::default();
    let mut options = PostgresOptions {
        create: matches!(create, Create::WithDirectory | Create::IfMissing),
        max_clock_skew: match now {
            Now::System => defaults.max_clock_skew,
            Now::Given => None,
        },
        ..defaults
    };
    if let Some(schema) = &parsed.schema {
        options.schema.clone_from(schema);
    }
    PostgresStore::open_spec(parsed, &options).map_err(OpenError::Store)
}

fn open_sqlite(path: &Path, create: Create) -> Result<Arc<dyn StoreAdmin>, OpenError> {
    match create {
        Create::MustExist | Create::ReadOnly if !path.exists() => {
            return Err(OpenError::Missing(path.to_owned()));
        }
        Create::ReadOnly => {
            let store = SqliteStore::open_read_only(path).map_err(OpenError::Store)?;
            return Ok(Arc::new(store));
        }
        Create::MustExist | Create::IfMissing => {}
        Create::WithDirectory => {
            if let Some(dir) = path.parent()
                && !dir.as_os_str().is_empty()
                && let Err(source) = std::fs::create_dir_all(dir)
            {
                return Err(OpenError::Directory {
                    dir: dir.to_owned(),
                    source,
                });
            }
        }
    }
    let store = SqliteStore::open(path).map_err(OpenError::Store)?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_told_from_paths() {
        assert_eq!(scheme("postgres://db/x"), Some("postgres"));
        assert_eq!(scheme("redis+tls://h"), Some("redis+tls"));
        assert_eq!(scheme("/var/lib/mcpolicy/decisions.sqlite3"), None);
        assert_eq!(scheme("decisions.sqlite3"), None);
        assert_eq!(scheme(r"C:\Users\me\decisions.sqlite3"), None);
        assert_eq!(scheme("./odd://name"), None);
        assert_eq!(scheme("://x"), None);
    }

    #[test]
    fn a_postgres_url_with_a_password_is_refused_before_connecting() {
        for spec in [
            "postgres://u:secret@db/x",
            "host=db dbname=x password=secret",
        ] {
            let error = open(spec, Create::IfMissing, Now::System).expect_err("refused");
            assert!(matches!(error, OpenError::Postgres(_)), "{spec}");
            assert!(error.to_string().contains("PGPASSWORD"), "{error}");
            assert!(!error.to_string().contains("secret"), "{error}");
        }
    }

    #[test]
    fn an_unknown_scheme_is_refused_by_name() {
        let error =
            open("redis://localhost/0", Create::IfMissing, Now::System).expect_err("refused");
        assert!(matches!(error, OpenError::UnknownScheme { .. }));
        assert!(error.to_string().contains("`redis://`"), "{error}");
    }
}
