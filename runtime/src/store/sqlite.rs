//! [`SqliteStore`]: the durable decision store, one SQLite file.
//!
//! - WAL journal; every mutating trait method is one `BEGIN IMMEDIATE`
//!   transaction, so the write lock is taken before anything is read and two
//!   threads or processes can never both see room under a limit.
//! - `synchronous=NORMAL` by default: in WAL mode a committed transaction is in
//!   the WAL file (the OS page cache) before `COMMIT` returns, so killing the
//!   process (`kill -9`) loses nothing acknowledged; only an OS crash or power
//!   loss can drop the last transactions (never corrupting the file).
//!   [`Synchronous::Full`] fsyncs the WAL on every commit for power-loss
//!   durability at a large throughput cost; see `runtime/STORE.md`.
//! - The file is marked with an `application_id` and a schema `user_version`;
//!   a foreign database or a newer schema is refused rather than touched.
//! - Threads share one connection behind a mutex: every operation is a write
//!   transaction, which SQLite serialises anyway, so a pool would only add
//!   lock hand-offs (measured in `runtime/STORE.md`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Row, params};

use super::checkpointer::Checkpointer;
use super::{
    Admission, DecisionKey, DecisionStore, LimitCheck, LimitWindow, Millis, ReplayThenAdmit,
    Reservation, StoreError, StoredDecision, Verdict, must_free, rolling_available_at,
    rolling_floor,
};

/// The schema version this runtime writes and reads (`PRAGMA user_version`).
/// Version 1 files are migrated at open.
pub const SCHEMA_VERSION: i64 = 2;

/// `PRAGMA application_id` of an mcpolicy store: ASCII "mcpo".
const APPLICATION_ID: i64 = 0x6d63_706f;

const SCHEMA_V2: &str = "
CREATE TABLE decisions (
    server_id   TEXT    NOT NULL,
    identity    TEXT    NOT NULL,
    verdict     TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    digest      TEXT    NOT NULL,
    expires_at  INTEGER,
    data        TEXT,
    represented INTEGER NOT NULL DEFAULT 0,
    decided_at  INTEGER NOT NULL,
    PRIMARY KEY (server_id, identity)
) WITHOUT ROWID;
-- Every counter's ledger, clustered by counter and time: a window is one
-- contiguous key range, and pruning deletes its left end. Two kinds of row:
--   spend:  (server, counter, at, reservation >= 1, amount), one per counter
--           per admission, found again by settle() from its reservation;
--   total:  (server, counter, at = i64::MAX, reservation = 0, sum of the
--           counter's spend rows), kept in step with every insert, prune and
--           settle, so an admission costs the same however full its window is.
-- The total row sits at the right end of its counter's range, on the page
-- where new spend rows go: an admission usually writes one page.
CREATE TABLE spend (
    server_id   TEXT    NOT NULL,
    counter     TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    reservation INTEGER NOT NULL,
    amount      INTEGER NOT NULL,
    PRIMARY KEY (server_id, counter, at, reservation)
) WITHOUT ROWID;
";

/// Added by schema 2, created by [`SCHEMA_V2`] and by the migration.
const META_V2: &str = "
-- `epoch`: bumped by every open; a store's reservation ids are its epoch in
-- the high 32 bits and a count in the low 32, so no two opens (processes)
-- ever issue the same id and no admission writes an id counter.
CREATE TABLE meta (
    key         TEXT    PRIMARY KEY,
    value       INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Schema 1 → 2, in the open's write transaction. Version 1 kept running
/// totals in `counters` and one `reservations` row per admission (three
/// pages written per admission); version 2 keeps the totals as rows of
/// `spend` and carries the admission time in the reservation handle. The
/// first epoch starts past every version 1 id, so ids stay unique. Runs
/// after [`META_V2`].
const MIGRATE_V1_TO_V2: &str = "
INSERT INTO meta (key, value)
    SELECT 'epoch', COALESCE(MAX(id), 0) >> 32 FROM reservations;
INSERT INTO spend (server_id, counter, at, reservation, amount)
    SELECT server_id, counter, 9223372036854775807, 0, total FROM counters;
DROP TABLE counters;
DROP TABLE reservations;
";

/// `at` of a counter's total row (with reservation 0): after every spend
/// row's, so it sits where the counter's new spend rows are written.
const TOTAL_AT: Millis = Millis::MAX;

/// Bits of a reservation id below its epoch.
const EPOCH_SHIFT: u32 = 32;

/// Page size of a new store file (bytes). Each commit writes whole pages to the WAL.
const PAGE_SIZE: i64 = 4096;

/// WAL pages after which a commit checkpoints the WAL into the main file
/// (SQLite's default is 1,000): a checkpoint copies each page once however
/// often it was rewritten, so rarer checkpoints copy fewer pages per decision
/// and fsync less often (see STORE.md). The WAL file is then up to 40 MiB.
/// With the [`Checkpointer`] thread this is only its backstop, four times higher.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 10000;

/// How hard SQLite works to make a commit durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `synchronous=NORMAL` with WAL: survives process crashes and `kill -9`;
    /// an OS crash or power loss may lose the most recent commits (not corrupt).
    #[default]
    Normal,
    /// `synchronous=FULL`: the WAL is fsynced at every commit; survives power loss.
    Full,
}

/// How a [`SqliteStore`] is opened.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Durability of each commit.
    pub synchronous: Synchronous,
    /// How long to wait for another process's write lock before [`StoreError::Busy`].
    pub busy_timeout: Duration,
    /// Run `PRAGMA quick_check` at open, so a damaged file fails at open, not
    /// at some later request. Linear in the file size (see STORE.md).
    pub verify_on_open: bool,
    /// Checkpoint the WAL on a thread of the store's own instead of inside
    /// the commit that fills it, so no decision waits for a checkpoint's
    /// fsyncs (see `store/checkpointer.rs`). Off: SQLite's automatic
    /// checkpoint only, and no thread.
    pub background_checkpoint: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            verify_on_open: true,
            background_checkpoint: true,
        }
    }
}

/// A durable [`DecisionStore`] in one SQLite file, shareable between threads
/// (`Send + Sync`) and safe to open from several processes at once.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    session: Mutex<Session>,
    checkpointer: Option<Checkpointer>,
}

/// The connection and this open's reservation ids, behind one mutex.
#[derive(Debug)]
struct Session {
    conn: Connection,
    ids: Ids,
}

/// Reservation ids of one open: `epoch << 32 | count`, count from 1.
#[derive(Debug, Clone, Copy)]
struct Ids {
    epoch: i64,
    /// The last count issued in this epoch (0: none yet).
    issued: u32,
}

impl Ids {
    fn id(self) -> u64 {
        uint(self.epoch << EPOCH_SHIFT | i64::from(self.issued))
    }
}

/// Failures inside a transaction: SQLite's, or ours (a row that does not decode).
enum Fail {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for Fail {
    fn from(error: rusqlite::Error) -> Self {
        Fail::Sql(error)
    }
}

impl SqliteStore {
    /// Opens (creating if absent) the store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, &SqliteOptions::default())
    }

    /// Opens (creating if absent) the store at `path`: checks the file is an
    /// mcpolicy store of a schema this runtime reads, creates or migrates the
    /// schema, switches to WAL and applies `options`.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: &SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        preflight(&path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).map_err(|e| map_sql(&path, e))?;
        let epoch = initialise(&path, &conn, options)?;
        let checkpointer = if options.background_checkpoint {
            Checkpointer::start(&path, synchronous_level(options.synchronous))
        } else {
            None
        };
        if checkpointer.is_some() {
            conn.pragma_update(None, "wal_autocheckpoint", 4 * WAL_AUTOCHECKPOINT_PAGES)
                .map_err(|e| map_sql(&path, e))?;
        }
        Ok(SqliteStore {
            path,
            session: Mutex::new(Session {
                conn,
                ids: Ids { epoch, issued: 0 },
            }),
            checkpointer,
        })
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many decisions are stored (expired ones included until purged).
    pub fn len(&self) -> Result<u64, StoreError> {
        let session = self.lock()?;
        let count: i64 = session
            .conn
            .query_row("SELECT COUNT(*) FROM decisions", [], |row| row.get(0))
            .map_err(|e| map_sql(&self.path, e))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Whether no decision is stored.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Session>, StoreError> {
        self.session.lock().map_err(|_| StoreError::Poisoned)
    }

    /// [`in_immediate`] on the session's connection, counting the commit
    /// for the checkpoint thread.
    fn write<T>(
        &self,
        session: &Session,
        body: impl FnOnce(&Connection) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        let result = in_immediate(&self.path, &session.conn, body);
        if let (Ok(_), Some(checkpointer)) = (&result, &self.checkpointer) {
            checkpointer.committed();
        }
        result
    }

    /// The next reservation id, with a new epoch when this one's 2^32 ids
    /// are used up (its own committed transaction, so no id is issued twice
    /// even if the admission that asked rolls back).
    fn next_id(&self, session: &mut Session) -> Result<u64, StoreError> {
        if session.ids.issued == u32::MAX {
            let epoch = self.write(session, |conn| new_epoch(&self.path, conn))?;
            session.ids = Ids { epoch, issued: 0 };
        }
        session.ids.issued += 1;
        Ok(session.ids.id())
    }
}

/// Opens the store's schema on `conn`: checks the file is an mcpolicy store
/// of a schema this runtime reads, creates or migrates the schema, switches
/// to WAL, applies `options`, and takes a new epoch of reservation ids.
fn initialise(path: &Path, conn: &Connection, options: &SqliteOptions) -> Result<i64, StoreError> {
    let sql = |e| map_sql(path, e);
    conn.busy_timeout(options.busy_timeout).map_err(sql)?;
    conn.set_prepared_statement_cache_capacity(32);
    // Read-only look first: a foreign or newer file must not even be switched to WAL.
    check_identity(path, conn)?;
    // Takes effect only on a file that has no pages yet; an existing store keeps its size.
    conn.pragma_update(None, "page_size", PAGE_SIZE)
        .map_err(sql)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io {
            path: path.to_path_buf(),
            source: io::Error::other(format!(
                "cannot switch to WAL journal mode (got `{mode}`); is the file on a network or read-only file system?"
            )),
        });
    }
    let level = synchronous_level(options.synchronous);
    conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
        .map_err(sql)?;
    // 8 MiB of page cache (SQLite's default is 2 MiB): the hot pages of a
    // busy store are the counters and the right edge of each table.
    conn.pragma_update(None, "cache_size", -8192).map_err(sql)?;
    conn.pragma_update(None, "synchronous", level)
        .map_err(sql)?;
    if options.verify_on_open {
        quick_check(path, conn)?;
    }
    // Create or migrate under the write lock; another process may be doing the same.
    in_immediate(path, conn, |conn| {
        let (app, version, tables) = identity_of(conn)?;
        if tables == 0 && app == 0 && version == 0 {
            conn.execute_batch(SCHEMA_V2)?;
            conn.execute_batch(META_V2)?;
            conn.execute("INSERT INTO meta (key, value) VALUES ('epoch', 0)", [])?;
            conn.pragma_update(None, "application_id", APPLICATION_ID)?;
            conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        } else {
            judge_identity(path, app, version, tables).map_err(Fail::Store)?;
            // One step per version.
            if version == 1 {
                conn.execute_batch(META_V2)?;
                conn.execute_batch(MIGRATE_V1_TO_V2)?;
                conn.pragma_update(None, "user_version", 2)?;
            }
        }
        new_epoch(path, conn)
    })
}

/// `PRAGMA synchronous`'s value for `level`.
fn synchronous_level(level: Synchronous) -> &'static str {
    match level {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    }
}

/// Takes the next epoch of reservation ids (inside a write transaction).
fn new_epoch(path: &Path, conn: &Connection) -> Result<i64, Fail> {
    let epoch: Option<i64> = conn
        .prepare_cached("UPDATE meta SET value = value + 1 WHERE key = 'epoch' RETURNING value")?
        .query_row([], |row| row.get(0))
        .optional()?;
    let epoch = epoch.ok_or_else(|| missing_epoch(path))?;
    // Ids are positive i64s: 2^31 epochs (opens) of 2^32 ids each.
    if epoch >= 1 << (63 - EPOCH_SHIFT) {
        return Err(Fail::Store(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("reservation id epochs exhausted (epoch {epoch})"),
        }));
    }
    Ok(epoch)
}

/// A schema 2 store without its `epoch` row: damaged or edited by hand.
fn missing_epoch(path: &Path) -> Fail {
    Fail::Store(StoreError::Corrupt {
        path: path.to_path_buf(),
        detail: "the `meta` table has no `epoch` row".to_owned(),
    })
}

/// Fails clearly, naming the path, on what SQLite would report vaguely: a
/// directory, a file we may not read and write.
fn preflight(path: &Path) -> Result<(), StoreError> {
    let io_error = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(io_error(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory, not a store file",
        ))),
        Ok(_) => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map(drop)
            .map_err(io_error),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error(error)),
    }
}

/// (application_id, user_version, number of schema objects).
fn identity_of(conn: &Connection) -> Result<(i64, i64, i64), rusqlite::Error> {
    let app: i64 = conn.pragma_query_value(None, "application_id", |row| row.get(0))?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let tables: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |row| row.get(0))?;
    Ok((app, version, tables))
}

fn check_identity(path: &Path, conn: &Connection) -> Result<(), StoreError> {
    let (app, version, tables) = identity_of(conn).map_err(|e| map_sql(path, e))?;
    if tables == 0 && app == 0 && version == 0 {
        return Ok(()); // new or empty file: created under the write lock below
    }
    judge_identity(path, app, version, tables)
}

fn judge_identity(path: &Path, app: i64, version: i64, tables: i64) -> Result<(), StoreError> {
    if app != APPLICATION_ID {
        return Err(StoreError::ForeignSchema {
            path: path.to_path_buf(),
            detail: format!(
                "application_id is {app:#x}, not {APPLICATION_ID:#x}; {tables} schema objects"
            ),
        });
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < 1 {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("marked as an mcpolicy store but schema version is {version}"),
        });
    }
    Ok(())
}

fn quick_check(path: &Path, conn: &Connection) -> Result<(), StoreError> {
    let mut stmt = conn
        .prepare("PRAGMA quick_check(5)")
        .map_err(|e| map_sql(path, e))?;
    let findings: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| map_sql(path, e))?;
    if findings.len() == 1 && findings[0] == "ok" {
        Ok(())
    } else {
        Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("integrity check failed: {}", findings.join("; ")),
        })
    }
}

/// Runs `body` in one `BEGIN IMMEDIATE` transaction: committed if it returns
/// Ok, rolled back otherwise.
fn in_immediate<T>(
    path: &Path,
    conn: &Connection,
    body: impl FnOnce(&Connection) -> Result<T, Fail>,
) -> Result<T, StoreError> {
    let finish = |fail: Fail| match fail {
        Fail::Sql(error) => map_sql(path, error),
        Fail::Store(error) => error,
    };
    conn.prepare_cached("BEGIN IMMEDIATE")
        .and_then(|mut stmt| stmt.execute([]))
        .map_err(|e| map_sql(path, e))?;
    let outcome = body(conn).and_then(|value| {
        conn.prepare_cached("COMMIT")
            .and_then(|mut stmt| stmt.execute([]))
            .map(|_| value)
            .map_err(Fail::Sql)
    });
    if outcome.is_err() && !conn.is_autocommit() {
        // Nothing of a failed operation may stick; a failing ROLLBACK leaves SQLite to undo it.
        let _ = conn.execute_batch("ROLLBACK");
    }
    outcome.map_err(finish)
}

/// Maps SQLite's errors to the ones a caller can act on, always naming the file.
fn map_sql(path: &Path, error: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    if let rusqlite::Error::SqliteFailure(failure, message) = &error {
        let detail = message.clone().unwrap_or_else(|| failure.to_string());
        // rusqlite appends the path to an open failure; every variant names it already.
        let suffix = format!(": {}", path.display());
        let detail = detail.strip_suffix(&suffix).unwrap_or(&detail).to_owned();
        match failure.code {
            ErrorCode::NotADatabase => {
                return StoreError::Corrupt {
                    path,
                    detail: format!("not an SQLite database ({detail})"),
                };
            }
            ErrorCode::DatabaseCorrupt => return StoreError::Corrupt { path, detail },
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                return StoreError::Busy { path };
            }
            ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly
            | ErrorCode::AuthorizationForStatementDenied => {
                return StoreError::Io {
                    path,
                    source: io::Error::new(io::ErrorKind::PermissionDenied, detail),
                };
            }
            ErrorCode::CannotOpen | ErrorCode::SystemIoFailure | ErrorCode::DiskFull => {
                return StoreError::Io {
                    path,
                    source: io::Error::other(detail),
                };
            }
            _ => {}
        }
    }
    StoreError::Sqlite {
        path,
        source: error,
    }
}

/// A u64 as SQLite's i64, saturating (amounts beyond 2^63 are not meaningful).
fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// An SQLite integer back to u64 (negative never written; read as 0).
fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

const DECISION_COLUMNS: &str = "verdict, reason, digest, expires_at, data, represented, decided_at";

fn decision_from_row(path: &Path, row: &Row<'_>) -> Result<StoredDecision, Fail> {
    let verdict_text: String = row.get(0)?;
    let verdict = Verdict::parse(&verdict_text).ok_or_else(|| {
        Fail::Store(StoreError::BadRow {
            path: path.to_path_buf(),
            detail: format!("unknown verdict `{verdict_text}`"),
        })
    })?;
    Ok(StoredDecision {
        verdict,
        reason: Arc::from(row.get::<_, String>(1)?),
        digest: Arc::from(row.get::<_, String>(2)?),
        expires_at: row.get(3)?,
        data: row.get::<_, Option<String>>(4)?.map(Arc::from),
        represented: uint(row.get(5)?),
        decided_at: row.get(6)?,
    })
}

/// Adds `delta` (possibly negative) to a counter's running total.
fn add_to_total(
    conn: &Connection,
    server_id: &str,
    counter: &str,
    delta: i64,
) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(
        "INSERT INTO spend (server_id, counter, at, reservation, amount) VALUES (?1, ?2, ?3, 0, ?4)
         ON CONFLICT DO UPDATE SET amount = amount + excluded.amount",
    )?
    .execute(params![server_id, counter, TOTAL_AT, delta])?;
    Ok(())
}

/// Prunes the spend rows of `counter` below `window`'s floor and returns
/// `(counting, freed)`: the spend that counts in the window, computed from the
/// stored running total minus `already_freed` (what earlier checks of the same
/// admission pruned from this counter, not yet written back), and what this
/// prune deleted. The caller must lower the running total by `freed`.
fn prune_and_sum(
    conn: &Connection,
    server_id: &str,
    counter: &str,
    window: LimitWindow,
    now: Millis,
    already_freed: i64,
) -> Result<(u64, i64), rusqlite::Error> {
    let floor = match window {
        LimitWindow::Rolling { ms } => rolling_floor(now, ms),
        LimitWindow::Fixed { start, .. } => start,
    };
    // A fixed window counts only what was recorded before its end; a rolling
    // one also counts rows from a clock slightly ahead (at > now): fail closed.
    let until = match window {
        LimitWindow::Rolling { .. } => TOTAL_AT,
        LimitWindow::Fixed { end, .. } => end,
    };
    // One statement, two range reads, a row each: part 0, the rows below the
    // floor (to prune; never the total row, whose `at` is the largest), from
    // the left end of the counter's range; part 1, from `until` to the right
    // end, the running total and the spend rows past the window's end. A
    // UNION ALL streams its rows; aggregates joined in a FROM clause would be
    // materialised in two temporary b-trees. (No DELETE … RETURNING either:
    // SQLite buffers RETURNING rows in a temporary b-tree too.)
    let mut stmt = conn.prepare_cached(
        "SELECT 0, COUNT(*), COALESCE(SUM(amount), 0) FROM spend
         WHERE server_id = ?1 AND counter = ?2 AND at < ?3
         UNION ALL
         SELECT 1, COALESCE(SUM(CASE WHEN reservation = 0 THEN amount END), 0),
                COALESCE(SUM(CASE WHEN reservation <> 0 THEN amount END), 0)
         FROM spend WHERE server_id = ?1 AND counter = ?2 AND at >= ?4",
    )?;
    let (mut stale_rows, mut freed, mut total, mut after_end) = (0i64, 0i64, 0i64, 0i64);
    let mut rows = stmt.query(params![server_id, counter, floor, until])?;
    while let Some(row) = rows.next()? {
        let (part, first, second): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        if part == 0 {
            (stale_rows, freed) = (first, second);
        } else {
            (total, after_end) = (first, second);
        }
    }
    drop(rows);
    if stale_rows > 0 {
        // Rows before the floor can never count again (windows only move forward).
        conn.prepare_cached("DELETE FROM spend WHERE server_id = ?1 AND counter = ?2 AND at < ?3")?
            .execute(params![server_id, counter, floor])?;
    }
    let counting = total
        .saturating_sub(already_freed)
        .saturating_sub(freed)
        .saturating_sub(after_end);
    Ok((uint(counting), freed))
}

/// `INSERT … VALUES` with `rows` groups of `columns` numbered parameters,
/// `(?1, ?2, …), (?k+1, …)`, then `tail`.
fn multi_row_sql(head: &str, rows: usize, columns: usize, tail: &str) -> String {
    let mut sql = String::from(head);
    for row in 0..rows {
        sql.push_str(if row == 0 { " VALUES (" } else { ", (" });
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("?{}", row * columns + column + 1));
        }
        sql.push(')');
    }
    sql.push(' ');
    sql.push_str(tail);
    sql
}

/// [`DecisionStore::replay`] inside a write transaction.
fn replay_in(
    path: &Path,
    conn: &Connection,
    key: &DecisionKey,
    digest: &str,
    now: Millis,
) -> Result<Option<StoredDecision>, Fail> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {DECISION_COLUMNS} FROM decisions
         WHERE server_id = ?1 AND identity = ?2 AND digest = ?3
           AND (expires_at IS NULL OR expires_at > ?4)"
    ))?;
    let mut rows = stmt.query(params![key.server_id, key.identity, digest, now])?;
    let Some(row) = rows.next()? else {
        return Ok(None); // a miss
    };
    let mut found = decision_from_row(path, row)?;
    drop(rows);
    // Same transaction, write lock held since BEGIN: nobody can count in between.
    conn.prepare_cached(
        "UPDATE decisions SET represented = represented + 1
         WHERE server_id = ?1 AND identity = ?2",
    )?
    .execute(params![key.server_id, key.identity])?;
    found.represented = found.represented.saturating_add(1);
    Ok(Some(found))
}

/// [`DecisionStore::admit`] inside a write transaction; `id` is the
/// reservation id to record if every check fits.
fn admit_in(
    conn: &Connection,
    server_id: &str,
    checks: &[LimitCheck],
    now: Millis,
    id: u64,
) -> Result<Admission, Fail> {
    // What each check's prune deleted: written back to the running
    // totals together with the new spend, in one statement.
    let mut freed: Vec<i64> = Vec::with_capacity(checks.len());
    for (index, check) in checks.iter().enumerate() {
        // Several checks may name one counter; count what earlier checks of this call add
        // (and what their prunes already deleted from its stored total).
        let (pending, already_freed) = checks[..index]
            .iter()
            .zip(&freed)
            .filter(|(earlier, _)| earlier.counter == check.counter)
            .fold((0u64, 0i64), |(amount, gone), (earlier, f)| {
                (
                    amount.saturating_add(earlier.amount),
                    gone.saturating_add(*f),
                )
            });
        let (counting, pruned) = prune_and_sum(
            conn,
            server_id,
            &check.counter,
            check.window,
            now,
            already_freed,
        )?;
        freed.push(pruned);
        let spent = counting.saturating_add(pending);
        if spent.saturating_add(check.amount) <= check.limit {
            continue;
        }
        // Refused: nothing is recorded, but what was pruned stays pruned.
        for (earlier, gone) in checks.iter().zip(&freed) {
            if *gone != 0 {
                add_to_total(conn, server_id, &earlier.counter, -gone)?;
            }
        }
        let available_at = match check.window {
            LimitWindow::Fixed { end, .. } => end,
            LimitWindow::Rolling { ms } => {
                let mut stmt = conn.prepare_cached(
                    "SELECT at, amount FROM spend
                     WHERE server_id = ?1 AND counter = ?2 AND reservation <> 0 ORDER BY at",
                )?;
                let rows: Vec<(Millis, u64)> = stmt
                    .query_map(params![server_id, check.counter], |row| {
                        Ok((row.get::<_, i64>(0)?, uint(row.get::<_, i64>(1)?)))
                    })?
                    .collect::<Result<_, _>>()?;
                rolling_available_at(
                    rows,
                    must_free(spent, check.amount, check.limit),
                    check.amount,
                    check.limit,
                    ms,
                )
            }
        };
        return Ok(Admission::Refused {
            index,
            counter: check.counter.clone(),
            available_at,
        });
    }
    // Every spend row and every running total (new spend minus what was
    // pruned) in one statement: all of them add to what is there.
    let mut values: Vec<rusqlite::types::Value> = Vec::with_capacity(checks.len() * 10);
    for (check, gone) in checks.iter().zip(&freed) {
        values.extend([
            server_id.to_owned().into(),
            check.counter.clone().into(),
            now.into(),
            int(id).into(),
            int(check.amount).into(),
            server_id.to_owned().into(),
            check.counter.clone().into(),
            TOTAL_AT.into(),
            0.into(),
            int(check.amount).saturating_sub(*gone).into(),
        ]);
    }
    conn.prepare_cached(&multi_row_sql(
        "INSERT INTO spend (server_id, counter, at, reservation, amount)",
        checks.len() * 2,
        5,
        "ON CONFLICT DO UPDATE SET amount = amount + excluded.amount",
    ))?
    .execute(rusqlite::params_from_iter(values))?;
    Ok(Admission::Admitted {
        reservation: Reservation { id, at: now },
    })
}

impl DecisionStore for SqliteStore {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        let session = self.lock()?;
        let conn = &session.conn;
        // A miss (the common case: a fresh request) is answered by one read
        // transaction, without the write lock. A miss seen here is a miss at
        // some moment of the call, so this is still linearisable; only a hit
        // has something to count, and is looked up again under the lock.
        let hit = conn
            .prepare_cached(
                "SELECT 1 FROM decisions
                 WHERE server_id = ?1 AND identity = ?2 AND digest = ?3
                   AND (expires_at IS NULL OR expires_at > ?4)",
            )
            .and_then(|mut stmt| stmt.exists(params![key.server_id, key.identity, digest, now]))
            .map_err(|e| map_sql(&self.path, e))?;
        if !hit {
            return Ok(None);
        }
        self.write(&session, |conn| {
            replay_in(&self.path, conn, key, digest, now)
        })
    }

    fn admit(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
    ) -> Result<Admission, StoreError> {
        if checks.is_empty() {
            return Ok(Admission::Admitted {
                reservation: Reservation::NONE,
            });
        }
        let mut session = self.lock()?;
        let id = self.next_id(&mut session)?;
        self.write(&session, |conn| admit_in(conn, server_id, checks, now, id))
    }

    fn settle(
        &self,
        server_id: &str,
        reservation: Reservation,
        counter: &str,
        actual: u64,
    ) -> Result<(), StoreError> {
        if reservation.is_none() {
            return Ok(());
        }
        let session = self.lock()?;
        let ours = session.ids;
        let epoch = int(reservation.id >> EPOCH_SHIFT);
        let count = reservation.id & u64::from(u32::MAX);
        let id = int(reservation.id);
        let at = reservation.at;
        self.write(&session, |conn| {
            let newest: Option<i64> = conn
                .prepare_cached("SELECT value FROM meta WHERE key = 'epoch'")?
                .query_row([], |row| row.get(0))
                .optional()?;
            let newest = newest.ok_or_else(|| missing_epoch(&self.path))?;
            if epoch > newest || (epoch == ours.epoch && count > u64::from(ours.issued)) {
                return Err(Fail::Store(StoreError::UnknownReservation {
                    reservation: reservation.id,
                    counter: counter.to_owned(),
                }));
            }
            // Rows of a window that has passed may be pruned: nothing that
            // still counts would change.
            let old: Option<i64> = conn
                .prepare_cached(
                    "SELECT amount FROM spend
                     WHERE server_id = ?1 AND counter = ?2 AND at = ?3 AND reservation = ?4",
                )?
                .query_row(params![server_id, counter, at, id], |row| row.get(0))
                .optional()?;
            if let Some(old) = old {
                conn.prepare_cached(
                    "UPDATE spend SET amount = ?5
                     WHERE server_id = ?1 AND counter = ?2 AND at = ?3 AND reservation = ?4",
                )?
                .execute(params![server_id, counter, at, id, int(actual)])?;
                add_to_total(conn, server_id, counter, int(actual).saturating_sub(old))?;
            }
            Ok(())
        })
    }

    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        let session = self.lock()?;
        self.write(&session, |conn| {
            conn.prepare_cached(
                "INSERT OR REPLACE INTO decisions
                 (server_id, identity, verdict, reason, digest, expires_at, data, represented, decided_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)",
            )?
            .execute(params![
                key.server_id,
                key.identity,
                decision.verdict.as_str(),
                decision.reason,
                decision.digest,
                decision.expires_at,
                decision.data,
                decision.decided_at
            ])?;
            Ok(())
        })
    }

    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
        let session = self.lock()?;
        // A single SELECT reads one consistent snapshot; no write lock needed.
        let result = (|| -> Result<Option<StoredDecision>, Fail> {
            let mut stmt = session.conn.prepare_cached(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions WHERE server_id = ?1 AND identity = ?2"
            ))?;
            let mut rows = stmt.query(params![key.server_id, key.identity])?;
            match rows.next()? {
                Some(row) => Ok(Some(decision_from_row(&self.path, row)?)),
                None => Ok(None),
            }
        })();
        result.map_err(|fail| match fail {
            Fail::Sql(error) => map_sql(&self.path, error),
            Fail::Store(error) => error,
        })
    }

    /// One write transaction for the replay, the evaluation and the admission.
    fn replay_then_admit(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
        checks: &mut Vec<LimitCheck>,
        evaluate: &mut dyn FnMut(Option<&StoredDecision>, &mut Vec<LimitCheck>) -> bool,
    ) -> Result<Option<ReplayThenAdmit>, StoreError> {
        let mut session = self.lock()?;
        // Taken before the transaction (a new epoch is a transaction of its
        // own); unused when nothing is admitted, which leaves a gap, never a repeat.
        let id = self.next_id(&mut session)?;
        self.write(&session, |conn| {
            let replayed = replay_in(&self.path, conn, key, digest, now)?;
            let admission = if evaluate(replayed.as_ref(), checks) {
                Some(if checks.is_empty() {
                    Admission::Admitted {
                        reservation: Reservation::NONE,
                    }
                } else {
                    admit_in(conn, &key.server_id, checks, now, id)?
                })
            } else {
                None
            };
            Ok(Some(ReplayThenAdmit {
                replayed,
                admission,
            }))
        })
    }

    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        let session = self.lock()?;
        self.write(&session, |conn| {
            let removed = conn
                .prepare_cached(
                    "DELETE FROM decisions WHERE server_id = ?1
                     AND (digest <> ?2 OR (expires_at IS NOT NULL AND expires_at <= ?3))",
                )?
                .execute(params![server_id, digest, now])?;
            Ok(removed as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_ints() {
        assert_eq!(int(u64::MAX), i64::MAX);
        assert_eq!(uint(-1), 0);
        assert_eq!(uint(int(42)), 42);
    }
}
