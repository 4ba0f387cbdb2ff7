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
//!   lock hand-offs (measured in `docs/performance.md`, "SQLite store").

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Row, params};

mod admin;

use super::checkpointer::Checkpointer;
use super::{
    Admission, Assessed, CounterUsage, DecisionFilter, DecisionKey, DecisionStore, Evaluation,
    Integrity, LimitCheck, LimitWindow, Millis, PRUNE_BATCH, Pruned, ReplayOrAdmit, Reservation,
    ServerStats, StoreAdmin, StoreError, StoreSize, StoredDecision, StoredEntry, Verdict,
    WALK_LIMIT, may_replace, pending, prune_cut, retention, window_changed, window_floor,
};

/// The schema version this runtime writes and reads (`PRAGMA user_version`).
/// Version 1, 2 and 3 files are migrated at open.
pub const SCHEMA_VERSION: i64 = 4;

/// `PRAGMA application_id` of an mcpolicy store: ASCII "mcpo".
const APPLICATION_ID: i64 = 0x6d63_706f;

const SCHEMA_V4: &str = "
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
    recomputable INTEGER NOT NULL DEFAULT 0,
    statement   TEXT,
    PRIMARY KEY (server_id, identity)
) WITHOUT ROWID;
-- Every counter's ledger, clustered by counter and time: a window is one
-- contiguous key range, and pruning deletes its left end. Two kinds of row:
--   spend:  (server, counter, at, reservation >= 1, amount), one per counter
--           per admission, found again by settle() from its reservation;
--   total:  (server, counter, at = i64::MAX, reservation = 0, sum of the
--           counter's spend rows), kept in step with every insert, prune and
--           settle, so an admission costs the same however full its window is.
--   floor:  (server, counter, at = i64::MAX, reservation = -1, the floor):
--           the total counts the spend rows at or after it (schema 3);
--   pruned: (server, counter, at = i64::MAX, reservation = -2, a time):
--           spend rows before it may have been deleted (schema 3);
--   window: (server, counter, at = i64::MAX, reservation = -3, ms): the
--           rolling window the counter was last admitted with (schema 3).
-- These rows sit at the right end of their counter's range, on the page
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

/// Added by schema 2, created with [`SCHEMA_V4`] and by the migration.
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

/// The tables of the current schema, checked at every open.
const TABLES: [&str; 4] = ["decisions", "spend", "meta", "servers"];

/// Added by schema 3, created with [`SCHEMA_V4`] and by the migration: the
/// decisions' eviction order (see `store::eviction_key`) and each server's
/// count of stored and evicted decisions.
const SERVERS_V3: &str = "
CREATE INDEX decisions_eviction ON decisions
    (server_id, recomputable DESC, IFNULL(expires_at, 9223372036854775807), decided_at, identity);
CREATE TABLE servers (
    server_id           TEXT    PRIMARY KEY,
    stored              INTEGER NOT NULL,
    evicted             INTEGER NOT NULL,
    evicted_represented INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Schema 2 → 3, in the open's write transaction, after [`SERVERS_V3`]
/// (the index is created after the new column). Decisions made by a
/// switch or an input limit (by their built-in reason names: a policy's own
/// names for them are kept as not recomputable, the safe side) become
/// recomputable; each server's count is taken. A counter gets no floor row
/// (its total counts every remaining row, as schema 2's did) and no prune
/// mark: where schema 2 pruned is not recorded, so a clock step back over
/// spend pruned before the migration is not detected (STORE.md, "Clock
/// steps"); spend pruned after it is.
const MIGRATE_V2_TO_V3_COLUMN: &str = "
ALTER TABLE decisions ADD COLUMN recomputable INTEGER NOT NULL DEFAULT 0;
UPDATE decisions SET recomputable = 1 WHERE verdict = 'deny' AND reason IN
    ('policy.sampling_disabled', 'policy.tools_disabled', 'policy.input_too_large');
";
const MIGRATE_V2_TO_V3_ROWS: &str = "
INSERT INTO servers (server_id, stored, evicted, evicted_represented)
    SELECT server_id, COUNT(*), 0, 0 FROM decisions GROUP BY server_id;
";

/// Schema 3 → 4, in the open's write transaction: each decision records the
/// statement that decided (`Statement::stored_name`). A row stored before
/// is left NULL (not known): the engine derives its statement from the
/// reason, as schema 3's replays did.
const MIGRATE_V3_TO_V4: &str = "
ALTER TABLE decisions ADD COLUMN statement TEXT;
";

/// `reservation` of a counter's floor row (at [`TOTAL_AT`]).
const FLOOR_ROW: i64 = -1;

/// `reservation` of a counter's prune mark row (at [`TOTAL_AT`]).
const PRUNED_ROW: i64 = -2;

/// `reservation` of the row holding the rolling window a counter was last
/// admitted with (at [`TOTAL_AT`]; see `store::window_changed`).
const ROLLING_ROW: i64 = -3;

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
    /// Also run `PRAGMA quick_check`, which reads every page, at open.
    /// Off by default: it is linear in the file (about 1.5 s at a million
    /// decisions) and every open would pay it. Without it an open checks
    /// the header, the schema and the `meta` row (constant time), and a
    /// damaged page is found by SQLite when an operation reads it, which
    /// fails with [`StoreError::Corrupt`]; [`SqliteStore::verify`] runs the
    /// full check on demand. See STORE.md, "Opening".
    pub verify_on_open: bool,
    /// Checkpoint the WAL on a thread of the store's own instead of inside
    /// the commit that fills it, so no decision waits for a checkpoint's
    /// fsyncs (see `store/checkpointer.rs`). Off: SQLite's automatic
    /// checkpoint only, and no thread.
    pub background_checkpoint: bool,
    /// The most decisions kept per server (at least one); past it,
    /// `record` evicts in the documented order (STORE.md, "Bounded
    /// decisions"). A store shared by processes should be opened with one
    /// value: each enforces its own when it records.
    pub max_decisions_per_server: u64,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            verify_on_open: false,
            background_checkpoint: true,
            max_decisions_per_server: super::DEFAULT_MAX_DECISIONS_PER_SERVER,
        }
    }
}

/// A durable [`DecisionStore`] in one SQLite file, shareable between threads
/// (`Send + Sync`) and safe to open from several processes at once.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    /// [`SqliteOptions::max_decisions_per_server`].
    max_per_server: u64,
    session: Mutex<Session>,
    checkpointer: Option<Checkpointer>,
    /// [`SqliteStore::open_read_only`]: a replay hit writes at once (and fails).
    read_only: bool,
}

/// The connection and this open's reservation ids, behind one mutex.
#[derive(Debug)]
struct Session {
    conn: Connection,
    ids: Ids,
    unflushed: Unflushed,
}

/// Writes the unflushed re-presentation counts after at most this many
/// replay hits answered from a read…
const FLUSH_EVERY: u64 = 256;
/// …or once the oldest of them is this old (checked at each hit and at
/// each write; `docs/spec/store.md`, "Durability").
const FLUSH_AFTER: Duration = Duration::from_millis(500);

/// Re-presentations this open answered from a read and has not written yet:
/// a replay of a stored denial changes nothing but `represented`, so it
/// takes no write lock and writes no WAL page; the counts are added to
/// their rows by the next write transaction of this open (each write
/// flushes first), after [`FLUSH_EVERY`] hits or [`FLUSH_AFTER`], before a
/// read that reports them, on [`DecisionStore::flush`] and when the store
/// is dropped.
#[derive(Debug, Default)]
struct Unflushed {
    /// (server id, identity) → (the row's `decided_at`, hits not written).
    counts: std::collections::HashMap<(String, String), (Millis, u64)>,
    hits: u64,
    since: Option<std::time::Instant>,
}

impl Unflushed {
    fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// One more hit of `key`, whose row was read as `found`; `found`'s
    /// count becomes the row's plus this open's unwritten hits.
    fn count(&mut self, key: &DecisionKey, found: &mut StoredDecision) {
        let entry = self
            .counts
            .entry((key.server_id.clone(), key.identity.clone()))
            .or_insert((found.decided_at, 0));
        if entry.0 != found.decided_at {
            // Another process replaced the row: its count started again at 0.
            *entry = (found.decided_at, 0);
        }
        entry.1 += 1;
        found.represented = found.represented.saturating_add(entry.1);
        self.hits += 1;
        self.since.get_or_insert_with(std::time::Instant::now);
    }

    /// The unwritten hits of `key`'s row decided at `decided_at`.
    fn of(&self, key: &DecisionKey, decided_at: Millis) -> u64 {
        self.counts
            .get(&(key.server_id.clone(), key.identity.clone()))
            .filter(|(at, _)| *at == decided_at)
            .map_or(0, |(_, hits)| *hits)
    }

    fn due(&self) -> bool {
        self.hits >= FLUSH_EVERY
            || self
                .since
                .is_some_and(|since| since.elapsed() >= FLUSH_AFTER)
    }

    /// Adds the counts to their rows, inside the caller's write transaction;
    /// a row replaced or deleted since it was read is left alone.
    fn write(&self, conn: &Connection) -> Result<(), rusqlite::Error> {
        if self.counts.is_empty() {
            return Ok(());
        }
        let mut update = conn.prepare_cached(
            "UPDATE decisions SET represented = represented + ?3
             WHERE server_id = ?1 AND identity = ?2 AND decided_at = ?4",
        )?;
        for ((server_id, identity), (decided_at, hits)) in &self.counts {
            update.execute(params![server_id, identity, int(*hits), decided_at])?;
        }
        Ok(())
    }
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
        preflight(&path, Access::ReadWrite)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags)
            .map_err(|e| explain_cannot_open(&path, map_sql(&path, e)))?;
        let epoch = initialise(&path, &conn, options).map_err(|e| explain_cannot_open(&path, e))?;
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
            max_per_server: options.max_decisions_per_server.max(1),
            session: Mutex::new(Session {
                conn,
                ids: Ids { epoch, issued: 0 },
                unflushed: Unflushed::default(),
            }),
            checkpointer,
            read_only: false,
        })
    }

    /// Opens an existing store for reading only (`mcpc store ls`, `show`,
    /// `budgets`, `stats`, `verify`): SQLite's `SQLITE_OPEN_READ_ONLY`, so
    /// nothing is ever written, converted or created. Works on a file the
    /// caller may only read, and in a directory it may not write: when the
    /// write-ahead log's shared-memory file cannot be made there and no log
    /// is beside the file, it is opened `immutable` (nothing can be
    /// writing it: no writer could make its log there either).
    ///
    /// Refused, the file untouched: a missing file ([`StoreError::Io`],
    /// `NotFound`), an empty one ([`StoreError::Empty`]), an older schema
    /// ([`StoreError::SchemaTooOld`]; a read-write open migrates it), and
    /// everything [`SqliteStore::open`] refuses. Every write through the
    /// store fails (`attempt to write a readonly database`).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        preflight(&path, Access::ReadOnly)?;
        let conn = match open_reader(&path, false) {
            Err(StoreError::Io { .. } | StoreError::Sqlite { .. })
                if std::fs::metadata(sidecar(&path, "-wal")).is_err() =>
            {
                // No log to miss: the file alone is the whole store.
                open_reader(&path, true).map_err(|error| explain_cannot_open(&path, error))?
            }
            other => other.map_err(|error| explain_cannot_open(&path, error))?,
        };
        Ok(SqliteStore {
            path,
            max_per_server: 1,
            session: Mutex::new(Session {
                conn,
                ids: Ids {
                    epoch: 0,
                    issued: 0,
                },
                unflushed: Unflushed::default(),
            }),
            checkpointer: None,
            read_only: true,
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

    /// Reads every page of the file and checks its structure (`PRAGMA
    /// quick_check`): [`StoreError::Corrupt`] names what is damaged. Linear
    /// in the file's size; an open does not do it unless asked
    /// ([`SqliteOptions::verify_on_open`]).
    pub fn verify(&self) -> Result<(), StoreError> {
        let session = self.lock()?;
        quick_check(&self.path, &session.conn)
    }

    /// A failure inside or outside a transaction, as the caller sees it.
    fn fail(&self, fail: Fail) -> StoreError {
        match fail {
            Fail::Sql(error) => map_sql(&self.path, error),
            Fail::Store(error) => error,
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Session>, StoreError> {
        self.session.lock().map_err(|_| StoreError::Poisoned)
    }

    /// [`in_immediate`] on the session's connection, counting the commit
    /// for the checkpoint thread.
    /// Every write transaction first adds the re-presentations this open
    /// counted without writing ([`Unflushed`]); kept for the next one if it
    /// rolls back.
    fn write<T>(
        &self,
        session: &mut Session,
        body: impl FnOnce(&Connection) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        let unflushed = std::mem::take(&mut session.unflushed);
        let result = in_immediate(&self.path, &session.conn, |conn| {
            unflushed.write(conn)?;
            body(conn)
        });
        match (&result, &self.checkpointer) {
            (Ok(_), Some(checkpointer)) => checkpointer.committed(),
            (Ok(_), None) => {}
            (Err(_), _) => session.unflushed = unflushed,
        }
        result
    }

    /// Counts a replay hit answered from a read (`found`, as read, gets the
    /// count this open knows of) and writes the unflushed counts once
    /// [`FLUSH_EVERY`] of them or [`FLUSH_AFTER`] have accumulated.
    fn count_replay(
        &self,
        session: &mut Session,
        key: &DecisionKey,
        found: &mut StoredDecision,
    ) -> Result<(), StoreError> {
        session.unflushed.count(key, found);
        if self.read_only || session.unflushed.due() {
            self.write(session, |_| Ok(()))?;
        }
        Ok(())
    }

    /// Writes the unflushed re-presentation counts, if any, before a read
    /// that reports `represented`.
    fn flush_unwritten(&self, session: &mut Session) -> Result<(), StoreError> {
        if !session.unflushed.is_empty() {
            self.write(session, |_| Ok(()))?;
        }
        Ok(())
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

impl Drop for SqliteStore {
    /// Writes the re-presentation counts not written yet; a failure here
    /// loses only those counts, as a crash would.
    fn drop(&mut self) {
        if let Ok(mut session) = self.session.lock() {
            let _ = self.flush_unwritten(&mut session);
        }
    }
}

/// Whether an open may write: [`preflight`] opens the file the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    ReadWrite,
    ReadOnly,
}

/// A read-only connection to the store at `path`, its identity and
/// tables checked (the first read: where SQLite finds it cannot map the
/// log's shared memory). `immutable`: open with SQLite's `immutable=1`,
/// which takes no lock and reads no log.
fn open_reader(path: &Path, immutable: bool) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let uri = format!(
        "file:{}?mode=ro{}",
        uri_path(path),
        if immutable { "&immutable=1" } else { "" }
    );
    let conn = Connection::open_with_flags(&uri, flags).map_err(|e| map_sql(path, e))?;
    conn.busy_timeout(SqliteOptions::default().busy_timeout)
        .map_err(|e| map_sql(path, e))?;
    plan_once(&conn).map_err(|e| map_sql(path, e))?;
    let (app, version, tables) = identity_of(&conn).map_err(|e| map_sql(path, e))?;
    if tables == 0 && app == 0 && version == 0 {
        return Err(StoreError::Empty {
            path: path.to_path_buf(),
        });
    }
    judge_identity(path, app, version, tables)?;
    if version < SCHEMA_VERSION {
        return Err(StoreError::SchemaTooOld {
            path: path.to_path_buf(),
            found: version,
            current: SCHEMA_VERSION,
        });
    }
    check_tables(path, &conn).map_err(|fail| match fail {
        Fail::Sql(error) => map_sql(path, error),
        Fail::Store(error) => error,
    })?;
    Ok(conn)
}

/// `path` for an SQLite `file:` URI: `%`, `?` and `#` (which would end the
/// path or start an escape) percent-encoded, the rest as it is.
fn uri_path(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

/// SQLite's "unable to open database file" says neither which file nor
/// why. When the store's directory is what refused (a new store, or the
/// log and shared-memory files SQLite keeps beside one), says so, with the
/// system's own reason; any other error is returned as it was.
fn explain_cannot_open(path: &Path, error: StoreError) -> StoreError {
    let StoreError::Io { source, .. } = &error else {
        return error;
    };
    if source.kind() == io::ErrorKind::NotFound {
        return error;
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A file of our own name, made and removed at once: the one way to
    // learn whether this process may create files there, whatever the
    // permission bits say (root, ACLs, a read-only mount).
    let probe = dir.join(format!(".mcpolicy-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            error
        }
        Err(why) => {
            let what = if path.exists() {
                format!(
                    "SQLite keeps the store's write-ahead log and shared memory ({} and {}) beside it, and cannot create them in {}",
                    sidecar(path, "-wal").display(),
                    sidecar(path, "-shm").display(),
                    dir.display()
                )
            } else {
                format!("cannot create a new store file in {}", dir.display())
            };
            StoreError::Io {
                path: path.to_path_buf(),
                source: io::Error::new(why.kind(), format!("{what}: {why}")),
            }
        }
    }
}

/// Opens the store's schema on `conn`: checks the file is an mcpolicy store
/// of a schema this runtime reads, creates or migrates the schema, switches
/// to WAL, applies `options`, and takes a new epoch of reservation ids.
fn initialise(path: &Path, conn: &Connection, options: &SqliteOptions) -> Result<i64, StoreError> {
    let sql = |e| map_sql(path, e);
    conn.busy_timeout(options.busy_timeout).map_err(sql)?;
    plan_once(conn).map_err(sql)?;
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
            conn.execute_batch(SCHEMA_V4)?;
            conn.execute_batch(META_V2)?;
            conn.execute_batch(SERVERS_V3)?;
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
            if version <= 2 {
                conn.execute_batch(MIGRATE_V2_TO_V3_COLUMN)?;
                conn.execute_batch(SERVERS_V3)?;
                conn.execute_batch(MIGRATE_V2_TO_V3_ROWS)?;
                conn.pragma_update(None, "user_version", 3)?;
            }
            if version <= 3 {
                conn.execute_batch(MIGRATE_V3_TO_V4)?;
                conn.pragma_update(None, "user_version", 4)?;
            }
        }
        check_tables(path, conn)?;
        new_epoch(path, conn)
    })
}

/// Caches up to 32 prepared statements on `conn`, each planned once.
///
/// SQLite's query planner stability guarantee (QPSG): a statement's plan
/// never depends on the values bound to it. Without it, SQLite built with
/// STAT4 (as rusqlite's bundled copy is) marks a statement with a range over
/// a bound value (`at >= ?3`) or a bound LIMIT "re-prepare on rebind", and
/// rusqlite clears a statement's bindings when it returns it to the cache:
/// every cached statement was parsed and planned again at each use, about
/// two thirds of an admission's CPU (`docs/performance.md`, "SQLite store";
/// test `hot_statements_are_prepared_once`). The plans are the same: the
/// store never runs `ANALYZE`, so there are no statistics for the values to
/// inform, and every statement is a look-up of a key or a key range.
fn plan_once(conn: &Connection) -> Result<(), rusqlite::Error> {
    conn.set_prepared_statement_cache_capacity(32);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
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

/// Fails clearly, naming the path, on what SQLite would report vaguely (a
/// directory, a file we may not read and write), and on the damaged shapes
/// SQLite would take for something else, before SQLite touches the file:
///
/// - an empty (0-byte) file beside a non-empty write-ahead log: emptied
///   while in use. SQLite would delete the log and open a fresh store,
///   forgetting every decision and all spend;
/// - no file, but a non-empty log: deleted or moved while in use;
/// - a file shorter than SQLite's 100-byte header, or one without its magic;
/// - a file shorter than its header says (no log beside it that could hold
///   the missing pages): truncated.
///
/// Every check reads at most the first 100 bytes: the cost does not grow
/// with the store.
fn preflight(path: &Path, access: Access) -> Result<(), StoreError> {
    let io_error = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |detail: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let wal = sidecar(path, "-wal");
    let wal_len = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let len = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(io_error(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory, not a store file",
            )));
        }
        Ok(meta) => meta.len(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let logged = wal_len();
            if logged > 0 {
                return Err(corrupt(format!(
                    "the file is missing but its write-ahead log {} ({logged} bytes) is there: \
                     the store was deleted or moved while in use. Restore the file, or delete \
                     the log too to start an empty store (every stored decision and all spend \
                     are then forgotten)",
                    wal.display()
                )));
            }
            if access == Access::ReadOnly {
                return Err(io_error(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no such file (a read-only open never creates one)",
                )));
            }
            return Ok(());
        }
        Err(error) => return Err(io_error(error)),
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(access == Access::ReadWrite)
        .open(path)
        .map_err(io_error)?;
    if len == 0 {
        let logged = wal_len();
        if logged > 0 {
            return Err(corrupt(format!(
                "the file is empty but its write-ahead log {} holds {logged} bytes: the store \
                 was emptied while in use, it is damaged, not new. Restore it, or delete both \
                 files to start an empty store (every stored decision and all spend are then \
                 forgotten)",
                wal.display()
            )));
        }
        if access == Access::ReadOnly {
            return Err(StoreError::Empty {
                path: path.to_path_buf(),
            });
        }
        return Ok(()); // a new store
    }
    let mut header = [0u8; 100];
    if len < header.len() as u64 {
        return Err(corrupt(format!(
            "not an SQLite database: {len} bytes, shorter than SQLite's 100-byte header"
        )));
    }
    io::Read::read_exact(&mut file, &mut header).map_err(io_error)?;
    if &header[..16] != b"SQLite format 3\0" {
        return Err(corrupt(
            "not an SQLite database (the file does not start with SQLite's header)".to_owned(),
        ));
    }
    let be32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        size => u64::from(size),
    };
    if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(corrupt(format!(
            "damaged SQLite header: page size {page_size}"
        )));
    }
    // The header's page count is valid when its change counter (offset 24)
    // matches "version valid for" (offset 92). Only compared when no log is
    // there: a process checkpointing a log writes page 1 (with the new count)
    // before the pages that grow the file.
    let pages = u64::from(be32(28));
    if pages > 0 && be32(24) == be32(92) && len < pages * page_size && wal_len() == 0 {
        return Err(corrupt(format!(
            "truncated: its header counts {pages} pages of {page_size} bytes ({} bytes), the \
             file has {len}",
            pages * page_size
        )));
    }
    Ok(())
}

/// `path` with `suffix` appended (SQLite's `-wal` and `-shm` files).
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The tables each schema version must have: a store missing one is damaged.
fn check_tables(path: &Path, conn: &Connection) -> Result<(), Fail> {
    let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
    let names: Vec<String> = stmt
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for table in TABLES {
        if !names.iter().any(|name| name == table) {
            return Err(Fail::Store(StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("the schema has no `{table}` table"),
            }));
        }
    }
    Ok(())
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

/// The columns [`decision_from_row`] reads, in its order (a macro, so that
/// constant statements can `concat!` it).
macro_rules! decision_columns {
    () => {
        "verdict, reason, digest, expires_at, data, represented, decided_at, recomputable, statement"
    };
}
const DECISION_COLUMNS: &str = decision_columns!();

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
        recomputable: row.get::<_, i64>(7)? != 0,
        statement: row.get::<_, Option<String>>(8)?.map(Arc::from),
    })
}

/// A counter's running state, from the rows at its range's right end: the
/// total of the spend rows at or after `floor`, and the prune mark (spend
/// rows before `pruned` may have been deleted). Absent rows read as 0,
/// `i64::MIN` and `i64::MIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CounterState {
    total: i64,
    floor: Millis,
    pruned: Millis,
    /// The rolling window the counter was last admitted with, if any.
    rolling_ms: Option<i64>,
}

impl Default for CounterState {
    fn default() -> Self {
        CounterState {
            total: 0,
            floor: Millis::MIN,
            pruned: Millis::MIN,
            rolling_ms: None,
        }
    }
}

/// [`read_counter`]'s statement.
const READ_COUNTER: &str = "SELECT 0, 0, MIN(at) FROM spend WHERE server_id = ?1 AND counter = ?2
     UNION ALL
     SELECT 1, reservation, amount FROM spend
     WHERE server_id = ?1 AND counter = ?2 AND at >= ?3";

/// What one look at a counter finds: its state, the spend recorded at or
/// after `until` (a fixed window's end: not in the window), and its oldest
/// spend row's time, if any. One statement, two range reads: the left end of
/// the counter's range, and from `until` to its right end (the state rows and
/// the spend past the window). A UNION ALL streams its rows; aggregates
/// joined in a FROM clause would be materialised in temporary b-trees.
fn read_counter(
    conn: &Connection,
    server_id: &str,
    counter: &str,
    until: Millis,
) -> Result<(CounterState, i64, Option<Millis>), rusqlite::Error> {
    let mut stmt = conn.prepare_cached(READ_COUNTER)?;
    let mut rows = stmt.query(params![server_id, counter, until])?;
    let (mut state, mut after_end, mut oldest) = (CounterState::default(), 0i64, None);
    while let Some(row) = rows.next()? {
        let (part, reservation, value): (i64, i64, Option<i64>) =
            (row.get(0)?, row.get(1)?, row.get(2)?);
        match (part, reservation) {
            (0, _) => oldest = value.filter(|&at| at != TOTAL_AT),
            (_, 0) => state.total = value.unwrap_or(0),
            (_, FLOOR_ROW) => state.floor = value.unwrap_or(Millis::MIN),
            (_, PRUNED_ROW) => state.pruned = value.unwrap_or(Millis::MIN),
            (_, ROLLING_ROW) => state.rolling_ms = value,
            _ if reservation > 0 => after_end = after_end.saturating_add(value.unwrap_or(0)),
            _ => {}
        }
    }
    Ok((state, after_end, oldest))
}

/// [`range_sum`]'s statement.
const RANGE_SUM: &str = "SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM (SELECT amount FROM spend
     WHERE server_id = ?1 AND counter = ?2 AND at >= ?3 AND at < ?4 AND reservation > 0
     LIMIT ?5)";

/// The sum of `counter`'s spend rows in `[from, to)`, walking at most
/// `limit` rows: `(rows walked, their sum)`.
fn range_sum(
    conn: &Connection,
    server_id: &str,
    counter: &str,
    from: Millis,
    to: Millis,
    limit: usize,
) -> Result<(usize, i64), rusqlite::Error> {
    conn.prepare_cached(RANGE_SUM)?.query_row(
        params![server_id, counter, from, to, limit as i64],
        |row| {
            Ok((
                usize::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                row.get(1)?,
            ))
        },
    )
}

/// Moves `state`'s floor to `floor`, forward or back, keeping its total the
/// sum of the spend rows at or after it: over the rows in between, or, if
/// there are more than [`WALK_LIMIT`] of them (a clock jump, or the first
/// admission of a calendar period), by summing from the new floor.
fn move_floor(
    conn: &Connection,
    server_id: &str,
    counter: &str,
    state: &mut CounterState,
    floor: Millis,
) -> Result<(), rusqlite::Error> {
    if floor == state.floor {
        return Ok(());
    }
    let (from, to) = (floor.min(state.floor), floor.max(state.floor));
    let (walked, delta) = range_sum(conn, server_id, counter, from, to, WALK_LIMIT)?;
    state.total = if walked < WALK_LIMIT {
        if floor > state.floor {
            state.total.saturating_sub(delta)
        } else {
            state.total.saturating_add(delta)
        }
    } else {
        range_sum(conn, server_id, counter, floor, TOTAL_AT, usize::MAX >> 1)?.1
    };
    state.floor = floor;
    Ok(())
}

/// [`prune`]'s statement.
const PRUNE_SELECT: &str = "SELECT at, reservation FROM spend
     WHERE server_id = ?1 AND counter = ?2 AND at < ?3 AND reservation > 0
     ORDER BY at, reservation LIMIT ?4";
/// [`prune`]'s statement (its deletion).
const PRUNE_DELETE: &str =
    "DELETE FROM spend WHERE server_id = ?1 AND counter = ?2 AND at = ?3 AND reservation = ?4";

/// Deletes up to [`PRUNE_BATCH`] spend rows before `cut`, oldest first, and
/// moves the prune mark past them. `oldest` is the counter's oldest row, so
/// that nothing is looked up when there is nothing to delete.
fn prune(
    conn: &Connection,
    server_id: &str,
    counter: &str,
    state: &mut CounterState,
    cut: Millis,
    oldest: Option<Millis>,
) -> Result<(), rusqlite::Error> {
    if oldest.is_none_or(|at| at >= cut) {
        return Ok(());
    }
    let doomed: Vec<(i64, i64)> = conn
        .prepare_cached(PRUNE_SELECT)?
        .query_map(
            params![server_id, counter, cut, PRUNE_BATCH as i64],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?
        .collect::<Result<_, _>>()?;
    let mut delete = conn.prepare_cached(PRUNE_DELETE)?;
    for (at, reservation) in doomed {
        delete.execute(params![server_id, counter, at, reservation])?;
        state.pruned = state.pruned.max(at.saturating_add(1));
    }
    Ok(())
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

/// Row counts whose [`upsert_spend_sql`] is built once per process: an
/// admission of a rate and up to five budgets, every state row changed.
const UPSERT_BUILT_ROWS: usize = 32;

/// [`admit_in`]'s statement for `rows` spend and state rows (at least one):
/// a spend row adds to what is there (two checks of one counter share a
/// row), a state row is set. Built once per row count, not per admission.
fn upsert_spend_sql(rows: usize) -> std::borrow::Cow<'static, str> {
    static BUILT: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let build = |rows| {
        multi_row_sql(
            "INSERT INTO spend (server_id, counter, at, reservation, amount)",
            rows,
            5,
            "ON CONFLICT DO UPDATE SET amount = CASE WHEN excluded.reservation > 0
             THEN amount + excluded.amount ELSE excluded.amount END",
        )
    };
    let built = BUILT.get_or_init(|| (1..=UPSERT_BUILT_ROWS).map(build).collect());
    match rows.checked_sub(1).and_then(|index| built.get(index)) {
        Some(sql) => std::borrow::Cow::Borrowed(sql.as_str()),
        None => std::borrow::Cow::Owned(build(rows)),
    }
}

/// [`DecisionStore::replay`] inside a write transaction.
///
/// `verdict`: only a decision with this verdict is a hit (the two probes of
/// [`DecisionStore::replay_or_admit`]); `None` for any.
fn replay_in(
    path: &Path,
    conn: &Connection,
    key: &DecisionKey,
    digest: &str,
    now: Millis,
    verdict: Option<Verdict>,
) -> Result<Option<StoredDecision>, Fail> {
    let Some(mut found) = probe(path, conn, key, digest, now, verdict)? else {
        return Ok(None); // a miss
    };
    // Same transaction, write lock held since BEGIN: nobody can count in between.
    conn.prepare_cached(
        "UPDATE decisions SET represented = represented + 1
         WHERE server_id = ?1 AND identity = ?2",
    )?
    .execute(params![key.server_id, key.identity])?;
    found.represented = found.represented.saturating_add(1);
    Ok(Some(found))
}

/// [`probe`]'s statement.
const PROBE: &str = concat!(
    "SELECT ",
    decision_columns!(),
    " FROM decisions WHERE server_id = ?1 AND identity = ?2 AND digest = ?3
       AND (expires_at IS NULL OR expires_at > ?4) AND (?5 IS NULL OR verdict = ?5)"
);

/// The decision a replay of `key` would hit, as stored, counting nothing
/// (`verdict` as in [`replay_in`]).
fn probe(
    path: &Path,
    conn: &Connection,
    key: &DecisionKey,
    digest: &str,
    now: Millis,
    verdict: Option<Verdict>,
) -> Result<Option<StoredDecision>, Fail> {
    let mut stmt = conn.prepare_cached(PROBE)?;
    let mut rows = stmt.query(params![
        key.server_id,
        key.identity,
        digest,
        now,
        verdict.as_ref().map(Verdict::as_str)
    ])?;
    match rows.next()? {
        Some(row) => Ok(Some(decision_from_row(path, row)?)),
        None => Ok(None),
    }
}

/// Where a window's count stops: a fixed window counts only what was
/// recorded before its end; a rolling one also counts rows from a clock
/// slightly ahead (at > now): fail closed.
fn until(check: &LimitCheck) -> Millis {
    match check.window {
        LimitWindow::Rolling { .. } => TOTAL_AT,
        LimitWindow::Fixed { end, .. } => end,
    }
}

/// One check as [`read_counter`] found its counter.
struct Look<'a> {
    server_id: &'a str,
    check: &'a LimitCheck,
    /// Spend recorded at or after the window's end (not in it).
    after_end: i64,
    /// The counter's oldest spend row, if any.
    oldest: Option<Millis>,
}

/// [`assess_in`]'s statement.
const WINDOW_ROWS: &str = "SELECT at, amount FROM spend
     WHERE server_id = ?1 AND counter = ?2 AND at >= ?3 AND reservation > 0
     ORDER BY at";

/// One check against its counter's `state` (as read, updated in place),
/// `pending` being what earlier checks of the same call add: the steps of
/// an admission, shared with [`StoreAdmin::usage`] (and with the in-memory
/// store's, step for step). `prune`: delete a few rows past the retention
/// (an admission does; a look does not).
fn assess_in(
    conn: &Connection,
    look: &Look<'_>,
    state: &mut CounterState,
    pending: u64,
    now: Millis,
    prune_rows: bool,
) -> Result<Assessed, rusqlite::Error> {
    let (server_id, check) = (look.server_id, look.check);
    let floor = window_floor(check.window, now);
    if let LimitWindow::Rolling { ms } = check.window {
        if window_changed(state.rolling_ms.map(uint), ms) {
            state.pruned = Millis::MIN;
        }
        state.rolling_ms = Some(int(ms));
    }
    if floor < state.pruned {
        // The window reaches back over deleted spend (a clock step back
        // past the retention): it cannot be counted, refuse.
        return Ok(Assessed::over_deleted(check, state.pruned));
    }
    move_floor(conn, server_id, &check.counter, state, floor)?;
    let counting = uint(state.total.saturating_sub(look.after_end));
    if prune_rows {
        prune(
            conn,
            server_id,
            &check.counter,
            state,
            floor.saturating_sub(retention(check.window)),
            look.oldest,
        )?;
    }
    Assessed::judge(check, counting.saturating_add(pending), floor, |floor| {
        conn.prepare_cached(WINDOW_ROWS)?
            .query_map(params![server_id, check.counter, floor], |row| {
                Ok((row.get::<_, i64>(0)?, uint(row.get::<_, i64>(1)?)))
            })?
            .collect()
    })
}

/// [`DecisionStore::admit`] inside a write transaction; `id` is the
/// reservation id to record if every check fits. The same steps as the
/// in-memory store's `admit_into`, on the counter's rows.
fn admit_in<'a>(
    conn: &Connection,
    server_id: &'a str,
    checks: &'a [LimitCheck],
    now: Millis,
    id: u64,
) -> Result<Admission, Fail> {
    if let Some(refused) = super::refuse_outside_calendar(checks, now) {
        return Ok(refused);
    }
    // Each counter's state as read, and as it is now: written back together
    // with the new spend, in one statement.
    let mut states: Vec<(&str, CounterState, CounterState)> = Vec::with_capacity(checks.len());
    let mut refusal = None;
    for (index, check) in checks.iter().enumerate() {
        let (read, after_end, oldest) =
            read_counter(conn, server_id, &check.counter, until(check))?;
        let at = match states.iter().position(|(c, ..)| *c == check.counter) {
            Some(at) => at,
            None => {
                states.push((&check.counter, read, read));
                states.len() - 1
            }
        };
        let state = &mut states[at].2;
        let checked = Look {
            server_id,
            check,
            after_end,
            oldest,
        };
        let assessed = assess_in(conn, &checked, state, pending(checks, index), now, true)?;
        if let Some(available_at) = assessed.available_at {
            refusal = Some(Admission::Refused {
                index,
                counter: check.counter.clone(),
                available_at,
            });
            break;
        }
    }
    // Every spend row (added to what is there: two checks of one counter
    // share a row) and every changed state row (set), in one statement.
    // The texts are bound as borrowed, never copied.
    let mut values: Vec<ToSqlOutput<'_>> = Vec::with_capacity(5 * 5 * checks.len());
    let mut row = |counter: &'a str, at: Millis, reservation: i64, amount: i64| {
        values.extend([
            ToSqlOutput::Borrowed(ValueRef::Text(server_id.as_bytes())),
            ToSqlOutput::Borrowed(ValueRef::Text(counter.as_bytes())),
            ToSqlOutput::Owned(SqlValue::Integer(at)),
            ToSqlOutput::Owned(SqlValue::Integer(reservation)),
            ToSqlOutput::Owned(SqlValue::Integer(amount)),
        ]);
    };
    if refusal.is_none() {
        for check in checks {
            row(&check.counter, now, int(id), int(check.amount));
            let state = states
                .iter_mut()
                .find(|(c, ..)| *c == check.counter)
                .map(|(_, _, state)| state);
            if let Some(state) = state
                && now >= state.floor
            {
                state.total = state.total.saturating_add(int(check.amount));
            }
        }
    }
    for (counter, read, state) in &states {
        // An admission writes spend rows for every counter it checked, and
        // a counter with spend rows has its total row, also when its spend
        // is 0 (`maxTokens` settled to 0; `check_integrity` holds this).
        if state.total != read.total || refusal.is_none() {
            row(counter, TOTAL_AT, 0, state.total);
        }
        if state.floor != read.floor {
            row(counter, TOTAL_AT, FLOOR_ROW, state.floor);
        }
        if state.pruned != read.pruned {
            row(counter, TOTAL_AT, PRUNED_ROW, state.pruned);
        }
        if let (Some(ms), true) = (state.rolling_ms, state.rolling_ms != read.rolling_ms) {
            row(counter, TOTAL_AT, ROLLING_ROW, ms);
        }
    }
    let rows = values.len() / 5;
    if rows > 0 {
        conn.prepare_cached(&upsert_spend_sql(rows))?
            .execute(rusqlite::params_from_iter(values))?;
    }
    Ok(refusal.unwrap_or(Admission::Admitted {
        reservation: Reservation { id, at: now },
    }))
}

impl DecisionStore for SqliteStore {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        let mut session = self.lock()?;
        // One read (a snapshot), without the write lock: a miss or a hit
        // seen here is one at some moment of the call, so this is
        // linearisable. A hit's count is written later ([`Unflushed`]).
        let found = probe(&self.path, &session.conn, key, digest, now, None)
            .map_err(|fail| self.fail(fail))?;
        let Some(mut found) = found else {
            return Ok(None);
        };
        self.count_replay(&mut session, key, &mut found)?;
        Ok(Some(found))
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
        self.write(&mut session, |conn| {
            admit_in(conn, server_id, checks, now, id)
        })
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
        let mut session = self.lock()?;
        let ours = session.ids;
        let epoch = int(reservation.id >> EPOCH_SHIFT);
        let count = reservation.id & u64::from(u32::MAX);
        let id = int(reservation.id);
        let at = reservation.at;
        self.write(&mut session, |conn| {
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
                // Only rows at or after the floor are in the running total.
                let floor: Option<i64> = conn
                    .prepare_cached(
                        "SELECT amount FROM spend
                         WHERE server_id = ?1 AND counter = ?2 AND at = ?3 AND reservation = ?4",
                    )?
                    .query_row(params![server_id, counter, TOTAL_AT, FLOOR_ROW], |row| {
                        row.get(0)
                    })
                    .optional()?;
                if at >= floor.unwrap_or(Millis::MIN) {
                    conn.prepare_cached(
                        "INSERT INTO spend (server_id, counter, at, reservation, amount)
                         VALUES (?1, ?2, ?3, 0, ?4)
                         ON CONFLICT DO UPDATE SET amount = amount + excluded.amount",
                    )?
                    .execute(params![
                        server_id,
                        counter,
                        TOTAL_AT,
                        int(actual).saturating_sub(old)
                    ])?;
                }
            }
            Ok(())
        })
    }

    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        let mut session = self.lock()?;
        self.write(&mut session, |conn| {
            let existing = conn
                .prepare_cached(&format!(
                    "SELECT {DECISION_COLUMNS} FROM decisions WHERE server_id = ?1 AND identity = ?2"
                ))?
                .query_row(params![key.server_id, key.identity], |row| {
                    Ok(decision_from_row(&self.path, row))
                })
                .optional()?
                .transpose()?;
            // A user's answer in force is kept (`store::may_replace`).
            if existing.as_ref().is_some_and(|old| !may_replace(old, decision)) {
                return Ok(());
            }
            let existed = existing.is_some();
            conn.prepare_cached(
                "INSERT OR REPLACE INTO decisions
                 (server_id, identity, verdict, reason, digest, expires_at, data, represented,
                  decided_at, recomputable, statement)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10)",
            )?
            .execute(params![
                key.server_id,
                key.identity,
                decision.verdict.as_str(),
                decision.reason,
                decision.digest,
                decision.expires_at,
                decision.data,
                decision.decided_at,
                i64::from(decision.recomputable),
                decision.statement,
            ])?;
            if existed {
                return Ok(()); // replaced: the count is unchanged
            }
            let mut stats = server_stats_in(conn, &key.server_id)?;
            stats.stored += 1;
            if stats.stored > self.max_per_server {
                // The eviction order of `store::eviction_key`, read from its index.
                let victims: Vec<(String, i64)> = conn
                    .prepare_cached(
                        "SELECT identity, represented FROM decisions WHERE server_id = ?1
                         ORDER BY recomputable DESC, IFNULL(expires_at, 9223372036854775807),
                                  decided_at, identity
                         LIMIT ?2",
                    )?
                    .query_map(
                        params![key.server_id, int(stats.stored - self.max_per_server)],
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )?
                    .collect::<Result<_, _>>()?;
                let mut delete = conn.prepare_cached(
                    "DELETE FROM decisions WHERE server_id = ?1 AND identity = ?2",
                )?;
                for (identity, represented) in victims {
                    delete.execute(params![key.server_id, identity])?;
                    stats.stored -= 1;
                    stats.evicted += 1;
                    stats.evicted_represented =
                        stats.evicted_represented.saturating_add(uint(represented));
                }
            }
            write_server_stats(conn, &key.server_id, stats)?;
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
        // With the re-presentations this open counted and has not written.
        result
            .map(|found| {
                found.map(|mut found| {
                    let unwritten = session.unflushed.of(key, found.decided_at);
                    found.represented = found.represented.saturating_add(unwritten);
                    found
                })
            })
            .map_err(|fail| self.fail(fail))
    }

    /// One write transaction for the replay, the evaluation and the admission.
    fn replay_or_admit(
        &self,
        key: &DecisionKey,
        approval: Option<&str>,
        digest: &str,
        now: Millis,
        checks: &mut Vec<LimitCheck>,
        evaluate: &mut dyn FnMut(Option<&StoredDecision>, &mut Vec<LimitCheck>) -> Evaluation,
    ) -> Result<ReplayOrAdmit, StoreError> {
        let mut session = self.lock()?;
        // A stored denial that answers the request again changes nothing
        // but its count: read without the write lock, counted in
        // [`Unflushed`]. Anything else runs in one write transaction.
        let denial = probe(
            &self.path,
            &session.conn,
            key,
            digest,
            now,
            Some(Verdict::Deny),
        )
        .map_err(|fail| self.fail(fail))?;
        if let Some(mut found) = denial {
            let mut counted = found.clone();
            counted.represented = counted
                .represented
                .saturating_add(session.unflushed.of(key, found.decided_at) + 1);
            checks.clear();
            if evaluate(Some(&counted), checks) == Evaluation::Answered {
                self.count_replay(&mut session, key, &mut found)?;
                return Ok(ReplayOrAdmit {
                    replayed: Some(found),
                    admission: None,
                });
            }
            // Not answered by the denial: decided again below, counted there.
        }
        // Taken before the transaction (a new epoch is a transaction of its
        // own); unused when nothing is admitted, which leaves a gap, never a repeat.
        let id = self.next_id(&mut session)?;
        self.write(&mut session, |conn| {
            // The refusal key answers with a denial only, then the approval
            // key with an approval only (`store::answers_probe`).
            let mut replayed = replay_in(&self.path, conn, key, digest, now, Some(Verdict::Deny))?;
            if replayed.is_none()
                && let Some(approval) = approval
            {
                let approval = DecisionKey::new(key.server_id.as_str(), approval);
                replayed = replay_in(
                    &self.path,
                    conn,
                    &approval,
                    digest,
                    now,
                    Some(Verdict::Allow),
                )?;
            }
            checks.clear();
            let admission = if evaluate(replayed.as_ref(), checks) == Evaluation::Admit {
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
            Ok(ReplayOrAdmit {
                replayed,
                admission,
            })
        })
    }

    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        let mut session = self.lock()?;
        self.write(&mut session, |conn| {
            let removed = conn
                .prepare_cached(
                    "DELETE FROM decisions WHERE server_id = ?1
                     AND (digest <> ?2 OR (expires_at IS NOT NULL AND expires_at <= ?3))",
                )?
                .execute(params![server_id, digest, now])? as u64;
            if removed > 0 {
                let mut stats = server_stats_in(conn, server_id)?;
                stats.stored = stats.stored.saturating_sub(removed);
                write_server_stats(conn, server_id, stats)?;
            }
            Ok(removed)
        })
    }

    fn server_stats(&self, server_id: &str) -> Result<ServerStats, StoreError> {
        let session = self.lock()?;
        server_stats_in(&session.conn, server_id).map_err(|e| map_sql(&self.path, e))
    }

    fn flush(&self) -> Result<(), StoreError> {
        let mut session = self.lock()?;
        self.flush_unwritten(&mut session)
    }
}

/// `WHERE` clause of a [`DecisionFilter`] over `decisions`, parameters ?1–?4.
const FILTER_SQL: &str = "(?1 IS NULL OR server_id = ?1) AND (?2 IS NULL OR identity = ?2)
     AND (?3 IS NULL OR reason = ?3) AND (?4 IS NULL OR verdict = ?4)";

/// The decisions `filter` selects, ordered by key.
fn select_decisions(
    path: &Path,
    conn: &Connection,
    filter: &DecisionFilter,
) -> Result<Vec<StoredEntry>, Fail> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {DECISION_COLUMNS}, server_id, identity FROM decisions WHERE {FILTER_SQL}
         ORDER BY server_id, identity"
    ))?;
    let mut rows = stmt.query(params![
        filter.server_id,
        filter.identity,
        filter.reason,
        filter.verdict.as_ref().map(Verdict::as_str),
    ])?;
    let mut found = Vec::new();
    while let Some(row) = rows.next()? {
        let decision = decision_from_row(path, row)?;
        found.push(StoredEntry {
            key: DecisionKey::new(row.get::<_, String>(9)?, row.get::<_, String>(10)?),
            decision,
        });
    }
    Ok(found)
}

/// Deletes `removed` (already selected in this transaction) and lowers each
/// server's stored count by its share.
fn delete_entries(conn: &Connection, removed: &[StoredEntry]) -> Result<(), rusqlite::Error> {
    let mut delete =
        conn.prepare_cached("DELETE FROM decisions WHERE server_id = ?1 AND identity = ?2")?;
    for entry in removed {
        delete.execute(params![entry.key.server_id, entry.key.identity])?;
    }
    // Entries come ordered by server: one stats update per server.
    for group in removed.chunk_by(|a, b| a.key.server_id == b.key.server_id) {
        let server_id = &group[0].key.server_id;
        let mut stats = server_stats_in(conn, server_id)?;
        stats.stored = stats.stored.saturating_sub(group.len() as u64);
        write_server_stats(conn, server_id, stats)?;
    }
    Ok(())
}

/// A server's row of `servers` (zeros if it has none).
fn server_stats_in(conn: &Connection, server_id: &str) -> Result<ServerStats, rusqlite::Error> {
    Ok(conn
        .prepare_cached(
            "SELECT stored, evicted, evicted_represented FROM servers WHERE server_id = ?1",
        )?
        .query_row(params![server_id], |row| {
            Ok(ServerStats {
                stored: uint(row.get(0)?),
                evicted: uint(row.get(1)?),
                evicted_represented: uint(row.get(2)?),
            })
        })
        .optional()?
        .unwrap_or_default())
}

fn write_server_stats(
    conn: &Connection,
    server_id: &str,
    stats: ServerStats,
) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(
        "INSERT INTO servers (server_id, stored, evicted, evicted_represented)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO UPDATE SET stored = excluded.stored, evicted = excluded.evicted,
             evicted_represented = excluded.evicted_represented",
    )?
    .execute(params![
        server_id,
        int(stats.stored),
        int(stats.evicted),
        int(stats.evicted_represented)
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests;
