//! [`PostgresStore`]: the decision store of a fleet. Many proxies and gateway
//! replicas share one PostgreSQL database, so a budget of 100 requests a day
//! is 100 across all of them and a refusal given on one machine is replayed
//! on every other.
//!
//! The semantics are the SQLite store's (`runtime/STORE.md`); the same
//! model-based, contract and contention tests run against both. Every
//! operation is one statement or one transaction:
//!
//! - admission is one call of the server-side function `admit`, which locks
//!   the server's counter rows (in counter order), checks every limit and
//!   records every spend before the statement's commit; concurrent
//!   admissions of one server from this process's threads are combined into
//!   one call of `admit_batch` (one transaction, one commit), which runs
//!   `admit` for each in arrival order ([`PostgresOptions::max_batch`],
//!   `src/batch.rs`);
//! - `replay_or_admit` reads the decision first; a miss (a fresh request,
//!   the common case) is then admitted by one more statement, and a hit is
//!   counted in one transaction that holds the decision row (`UPDATE …
//!   RETURNING`) while the engine's pure `evaluate` runs and the admission
//!   is made, before `COMMIT`;
//! - `record`, `settle` and `purge_stale` are one function call each.
//!
//! Each policy (or environment) gets a PostgreSQL schema of its own
//! ([`PostgresOptions::schema`]); the schema is versioned
//! ([`SCHEMA_VERSION`], table `schema_version`) and migrated at open.
//!
//! Connections are pooled; when the database cannot be reached every
//! operation fails with [`StoreError::Unavailable`], which the engine turns
//! into `runtime.store_unavailable`, and the store connects again on the
//! next operation. See the crate's `README.md` and the repository README, "Run a fleet".

mod batch;
mod config;
mod import;
mod schema;
mod session;
mod tls;

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mcpolicy_runtime::store::{
    Admission, CounterUsage, DecisionFilter, DecisionKey, DecisionStore, Evaluation, Integrity,
    LimitCheck, LimitWindow, Millis, Pruned, ReplayOrAdmit, Reservation, ServerStats, StoreAdmin,
    StoreError, StoreSize, StoredDecision, StoredEntry, Verdict, in_calendar, may_replace,
    prune_cut, refuse_outside_calendar, usage_outside_calendar,
};
use session::{ConnectError, Session, Trip};
use tokio_postgres::{Row, Statement};

pub use batch::BatchStats;
pub use config::{ConfigError, StoreSpec};
pub use import::{ImportError, Imported};
#[doc(hidden)]
pub use schema::MIGRATIONS;
pub use schema::SCHEMA_VERSION;
pub use tls::{RootCert, SslMode, TlsSpec};

/// How a [`PostgresStore`] connects and behaves.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The PostgreSQL schema holding this store's tables: one per policy
    /// that must not share counters and decisions with another (a lowercase
    /// identifier, `[a-z_][a-z0-9_]*`, at most 63 bytes).
    pub schema: String,
    /// The most connections the store opens at once; an operation waits
    /// (up to `connect_timeout`) for one when all are busy.
    pub pool_size: usize,
    /// How long connecting may take, and how long an operation waits for a
    /// free connection, before [`StoreError::Unavailable`].
    pub connect_timeout: Duration,
    /// The server cancels any statement running longer (`statement_timeout`),
    /// and any wait for a row lock longer (`lock_timeout`).
    pub statement_timeout: Duration,
    /// The bound on every store call, enforced by the client (so that it
    /// holds while the server is hung and cannot time anything out):
    /// waiting for a pooled connection, connecting, and every round trip
    /// of the call. A call that misses it fails
    /// [`StoreError::Unavailable`] (the engine fails closed) and its
    /// connection is discarded, never reused (`docs/spec/store.md`,
    /// "Bounded calls"). Default 5 s.
    pub call_timeout: Duration,
    /// How far a caller's `now` may lie from the database's clock
    /// (`clock_timestamp()`): a fleet's windows need one clock. A replay,
    /// an admission, a record (its `decided_at`) or a purge whose `now` is
    /// further away fails [`StoreError::Backend`] (the engine fails closed)
    /// and changes nothing, so a node a day behind cannot spend a second
    /// daily budget and a node in the year 9999 cannot fill every window of
    /// the fleet (`docs/spec/store.md`, "One clock for a fleet"). Default
    /// 10 s. `None`: not checked, for a caller that injects its own instant
    /// on purpose (`mcpc eval --now`, tests of fixed instants).
    pub max_clock_skew: Option<Duration>,
    /// The most decisions kept per server; past it `record` evicts in the
    /// documented order (STORE.md, "Bounded decisions").
    pub max_decisions_per_server: u64,
    /// PostgreSQL's `synchronous_commit` for this store's sessions. `true`
    /// (the default, PostgreSQL's own): a commit is acknowledged once its
    /// WAL is flushed, so a server crash loses nothing acknowledged. `false`:
    /// acknowledged before the flush; a crash of the database server (not of
    /// a client) may forget up to about 0.6 s of spend and decisions
    /// (`3 × wal_writer_delay`), which a budget then admits again. See the
    /// README's benchmark for what it buys.
    pub synchronous_commit: bool,
    /// Create the schema and its tables when there is no store yet, and
    /// migrate an older schema (what a proxy does). `false`: a schema
    /// without a store is refused ([`StoreError::Backend`]), so an
    /// inspection (`mcpc store`) of a mistyped schema does not create an
    /// empty one, and an older schema is refused
    /// ([`StoreError::SchemaTooOld`]) rather than converted.
    pub create: bool,
    /// The most admissions of one server one transaction carries. Concurrent
    /// admissions for a server from this process's threads are combined: the
    /// first takes the lock and the commit for every one queued when it
    /// starts (at most this many), the others wait for its answer. `1`: one
    /// transaction per admission.
    pub max_batch: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: "mcpolicy".to_owned(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(5),
            max_clock_skew: Some(Duration::from_secs(10)),
            max_batch: 64,
            max_decisions_per_server: mcpolicy_runtime::store::DEFAULT_MAX_DECISIONS_PER_SERVER,
            synchronous_commit: true,
            create: true,
        }
    }
}

/// A [`DecisionStore`] in a PostgreSQL schema, shared by every process that
/// opens the same database and schema.
pub struct PostgresStore {
    config: tokio_postgres::Config,
    /// `sslmode` and the rest, for messages and `allow`'s second try.
    tls_spec: TlsSpec,
    /// The TLS connector; `None` under `sslmode=disable` (or a Unix socket).
    tls: Option<postgres_native_tls::MakeTlsConnector>,
    /// Where the store is, for messages: hosts, database and schema, never the password.
    target: String,
    max_per_server: i64,
    /// [`PostgresOptions::call_timeout`].
    bound: Duration,
    /// [`PostgresOptions::max_clock_skew`], in ms.
    max_skew: Option<i64>,
    /// The database's clock as last read (ms) and when, on this process's
    /// monotonic clock (the middle of the round trip that read it).
    db_clock: Mutex<Option<(Millis, Instant)>>,
    pool: Pool,
    /// Groups concurrent admissions of one server into one transaction.
    combiner: batch::Combiner,
    max_batch: usize,
}

/// Idle connections and the count of open ones.
#[derive(Debug)]
struct Pool {
    state: Mutex<PoolState>,
    freed: Condvar,
    size: usize,
}

#[derive(Debug, Default)]
struct PoolState {
    idle: Vec<Conn>,
    /// Connections in use or idle.
    open: usize,
}

/// One connection and its prepared statements.
struct Conn {
    client: Session,
    st: Statements,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").finish_non_exhaustive()
    }
}

/// Prepared once per connection: each operation then costs one
/// bind-and-execute round trip, no parsing or planning.
struct Statements {
    peek: Statement,
    replay: Statement,
    get: Statement,
    admit: Statement,
    admit_batch: Statement,
    settle: Statement,
    record: Statement,
    purge: Statement,
    stats: Statement,
}

const DECISION_COLUMNS: &str =
    "verdict, reason, digest, expires_at, data, represented, decided_at, recomputable, statement";

impl Statements {
    fn prepare(client: &Session) -> Result<Statements, Trip> {
        // `$5`: only a decision with this verdict is a hit (the two probes
        // of `replay_or_admit`); NULL for any.
        let live = "server_id = $1 AND identity = $2 AND digest = $3 \
                    AND (expires_at IS NULL OR expires_at > $4::bigint) \
                    AND ($5::text IS NULL OR verdict = $5)";
        Ok(Statements {
            peek: client.prepare(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions WHERE {live}"
            ))?,
            replay: client.prepare(&format!(
                "UPDATE decisions SET represented = sat(represented::numeric + 1) WHERE {live} \
                 RETURNING {DECISION_COLUMNS}"
            ))?,
            get: client.prepare(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions WHERE server_id = $1 AND identity = $2"
            ))?,
            admit: client.prepare(
                "SELECT o_refused, o_available_at, o_reservation FROM admit($1::text, \
                 $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], \
                 $7::bigint[], $8::bigint[], $9::bigint)",
            )?,
            admit_batch: client.prepare(
                "SELECT o_refused, o_available_at, o_reservation FROM admit_batch($1::text, \
                 $2::integer[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], \
                 $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])",
            )?,
            settle: client
                .prepare("SELECT settle($1::text, $2::bigint, $3::bigint, $4::text, $5::bigint)")?,
            record: client.prepare(
                "SELECT record($1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint, \
                 $7::text, $8::bigint, $9::boolean, $10::text, $11::bigint)",
            )?,
            purge: client.prepare("SELECT purge_stale($1::text, $2::text, $3::bigint)")?,
            stats: client.prepare(
                "SELECT stored, evicted, evicted_represented FROM servers WHERE server_id = $1",
            )?,
        })
    }
}

/// Why a call failed, before it becomes a [`StoreError`].
enum Fail {
    Pg(postgres::Error),
    Store(StoreError),
    /// A round trip missed the call's deadline ([`PostgresOptions::call_timeout`]).
    TimedOut,
}

impl From<postgres::Error> for Fail {
    fn from(error: postgres::Error) -> Self {
        Fail::Pg(error)
    }
}

impl From<Trip> for Fail {
    fn from(trip: Trip) -> Self {
        match trip {
            Trip::Pg(error) => Fail::Pg(error),
            Trip::TimedOut => Fail::TimedOut,
        }
    }
}

/// SQLSTATEs after which the same operation is simply run again: the
/// transaction was rolled back whole (a deadlock between two admissions
/// that named counters in a different order, a serialization failure).
fn retryable(error: &postgres::Error) -> bool {
    error
        .code()
        .is_some_and(|code| matches!(code.code(), "40P01" | "40001"))
}

/// The server asked for a password and none was found: where one may come
/// from (`docs/spec/clients.md`, "Which store"). An MCP client passes a
/// proxy only the variables its entry's `env` names, so `PGPASSWORD` set in
/// the user's shell is not enough.
const PASSWORD_MISSING: &str = "the server asks for a password and none was given: set \
     PGPASSWORD in the environment (for a proxy an MCP client starts, in the server entry's \
     `env`), or add a line for this host, port, database and user to a password file \
     (passfile=PATH in the store spec, PGPASSFILE, or ~/.pgpass, mode 0600); a password in the \
     store spec itself is refused";

/// Whether the connection is gone (or the server is going): it is dropped,
/// with every idle one, and the operation fails as unavailable.
fn connection_lost(error: &postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        // Class 08: connection exceptions; 57P01-57P03: the server is shutting
        // down or starting; 53300: too many connections.
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
        }
        // No SQLSTATE: an I/O error, a timeout, a protocol error.
        None => error.as_db_error().is_none(),
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .field("tls", &self.tls_spec)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `spec` (a `postgres://` URL or a libpq `key=value`
    /// string, see [`StoreSpec`]) and opens the store with default options.
    pub fn open(spec: &str) -> Result<PostgresStore, StoreError> {
        Self::open_with(spec, &PostgresOptions::default())
    }

    /// Connects to `spec` and opens the store in `options.schema`, creating
    /// or migrating its tables (under an advisory lock, so processes opening
    /// one store at once do it once). A schema written by a newer version is
    /// refused ([`StoreError::SchemaTooNew`]); a schema holding tables that
    /// are not a store's is refused ([`StoreError::ForeignSchema`]).
    pub fn open_with(spec: &str, options: &PostgresOptions) -> Result<PostgresStore, StoreError> {
        let parsed = StoreSpec::parse(spec).map_err(|error| StoreError::Unavailable {
            store: "postgres".to_owned(),
            detail: error.to_string(),
        })?;
        let mut options = options.clone();
        if let Some(schema) = &parsed.schema {
            options.schema.clone_from(schema);
        }
        Self::open_spec(parsed, &options)
    }

    /// [`PostgresStore::open_with`] from a parsed connection string; its
    /// `schema=`, if any, has been put in `options` by the caller.
    pub fn open_spec(
        spec: StoreSpec,
        options: &PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let StoreSpec {
            mut config,
            tls: tls_spec,
            ..
        } = spec;
        let target = config::describe(&config, &options.schema);
        let tls = tls::connector(&tls_spec).map_err(|detail| StoreError::Unavailable {
            store: target.clone(),
            detail,
        })?;
        if !config::valid_schema(&options.schema) {
            return Err(StoreError::Backend {
                store: target,
                detail: format!(
                    "`{}` is not a valid schema name (lowercase letters, digits and `_`, not \
                     starting with a digit, at most 63 bytes)",
                    options.schema
                ),
            });
        }
        config.connect_timeout(options.connect_timeout);
        config.application_name("mcpolicy");
        let ms = options.statement_timeout.as_millis().max(1);
        config.options(format!(
            "-c search_path={schema} -c statement_timeout={ms} -c lock_timeout={ms} \
             -c idle_in_transaction_session_timeout={idle} -c synchronous_commit={sync}",
            schema = options.schema,
            idle = ms.saturating_mul(2),
            sync = if options.synchronous_commit {
                "on"
            } else {
                "off"
            },
        ));
        let store = PostgresStore {
            config,
            tls_spec,
            tls,
            target,
            max_per_server: int(options.max_decisions_per_server.max(1)),
            bound: options.call_timeout.max(Duration::from_millis(1)),
            max_skew: options
                .max_clock_skew
                .map(|skew| i64::try_from(skew.as_millis()).unwrap_or(i64::MAX)),
            db_clock: Mutex::new(None),
            pool: Pool {
                state: Mutex::new(PoolState::default()),
                freed: Condvar::new(),
                size: options.pool_size.max(1),
            },
            combiner: batch::Combiner::default(),
            max_batch: options.max_batch.max(1),
        };
        store.migrate(&options.schema, options.create)?;
        Ok(store)
    }

    /// Where the store is (hosts, database, schema), for messages.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// How many admissions went in a transaction shared with others (the
    /// group admission of [`PostgresOptions::max_batch`]) since the store
    /// was opened.
    pub fn batch_stats(&self) -> BatchStats {
        self.combiner.stats()
    }

    /// Admits `requests` (each its checks and its instant) for `server_id`
    /// in one `admit_batch` transaction, in order, bypassing the combiner:
    /// what a batch of the combiner does, for the tests that compare it
    /// with successive [`DecisionStore::admit`] calls. A request without
    /// checks is admitted with no reservation, as `admit` does.
    #[doc(hidden)]
    pub fn admit_batch(
        &self,
        server_id: &str,
        requests: &[(Vec<LimitCheck>, Millis)],
    ) -> Result<Vec<Admission>, StoreError> {
        let batch: Vec<batch::Request> = requests
            .iter()
            .filter(|(checks, now)| !checks.is_empty() && in_calendar(*now))
            .map(|(checks, now)| batch::Request::new(checks.clone(), *now, self.deadline()))
            .collect();
        let mut answers = if batch.is_empty() {
            Vec::new()
        } else {
            self.run(|conn| admit_batch_on(&conn.client, &conn.st.admit_batch, server_id, &batch))?
        }
        .into_iter();
        requests
            .iter()
            .map(|(checks, now)| {
                if checks.is_empty() {
                    return Some(Admission::Admitted {
                        reservation: Reservation::NONE,
                    });
                }
                refuse_outside_calendar(checks, *now).or_else(|| answers.next())
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| StoreError::Backend {
                store: self.target.clone(),
                detail: "admit_batch answered fewer admissions than it was given".to_owned(),
            })
    }

    /// Admits `checks` (not empty) through the combiner: alone when nothing
    /// else for `server_id` is in flight, else in the next batch.
    fn admit_grouped(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
        deadline: Instant,
    ) -> Result<Admission, StoreError> {
        if let Some(refused) = refuse_outside_calendar(checks, now) {
            return Ok(refused);
        }
        self.combiner
            .admit(server_id, checks, now, deadline, self.max_batch, &|batch| {
                // The batch answers by the earliest deadline among its
                // requests: no caller waits past its own bound.
                let by = batch
                    .iter()
                    .map(|request| request.deadline)
                    .min()
                    .unwrap_or(deadline);
                self.run_by(by, |conn| match batch {
                    [one] => Ok(vec![admit_on(
                        &conn.client,
                        &conn.st.admit,
                        server_id,
                        &one.checks,
                        one.now,
                    )?]),
                    _ => admit_batch_on(&conn.client, &conn.st.admit_batch, server_id, batch),
                })
            })
    }

    /// The deadline of a store call starting now.
    fn deadline(&self) -> Instant {
        Instant::now() + self.bound
    }

    /// Refuses a `now` further than [`PostgresOptions::max_clock_skew`]
    /// from the database's clock, estimated from its last reading (taken
    /// again when older than [`CLOCK_READING_AGE`]) plus the monotonic time
    /// since: one round trip a minute, not one per call.
    fn check_clock(&self, now: Millis, deadline: Instant) -> Result<(), StoreError> {
        let Some(bound) = self.max_skew else {
            return Ok(());
        };
        let reading = *self.db_clock.lock().map_err(|_| StoreError::Poisoned)?;
        let (db_ms, at) = match reading {
            Some(reading) if reading.1.elapsed() < CLOCK_READING_AGE => reading,
            _ => {
                let reading = self.run_by(deadline, |conn| {
                    let before = Instant::now();
                    let db_ms: i64 = conn
                        .client
                        .query_one(
                            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                            &[],
                        )?
                        .try_get(0)?;
                    Ok((db_ms, before + before.elapsed() / 2))
                })?;
                *self.db_clock.lock().map_err(|_| StoreError::Poisoned)? = Some(reading);
                reading
            }
        };
        let elapsed = i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX);
        let db_now = db_ms.saturating_add(elapsed);
        let skew = now.saturating_sub(db_now);
        if skew.unsigned_abs() <= bound.unsigned_abs() {
            return Ok(());
        }
        Err(StoreError::Backend {
            store: self.target.clone(),
            detail: format!(
                "this node's clock ({}) is {} s {} the database's ({}), more than the {} s a \
                 fleet allows (max_clock_skew): refused, so that every node's windows follow \
                 one clock; fix the node's time (NTP)",
                mcpolicy_runtime::clock::format_rfc3339(now),
                skew.unsigned_abs() / 1000,
                if skew > 0 { "ahead of" } else { "behind" },
                mcpolicy_runtime::clock::format_rfc3339(db_now),
                bound / 1000
            ),
        })
    }

    /// Creates or migrates the schema in one transaction.
    fn migrate(&self, schema: &str, create: bool) -> Result<(), StoreError> {
        let client = self.connect_client(self.deadline())?;
        let result = (|| -> Result<(), Fail> {
            let tx = client.transaction()?;
            // One opener at a time per schema, across every process.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('mcpolicy-store:' || $1::text))",
                &[&schema],
            )?;
            let exists = tx
                .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])?
                .is_some();
            if !exists && !create {
                return Err(Fail::Store(StoreError::Backend {
                    store: self.target.clone(),
                    detail: format!("no decision store: schema `{schema}` does not exist"),
                }));
            }
            if !exists {
                tx.batch_execute(&format!("CREATE SCHEMA {schema}"))?;
            }
            let versioned = tx
                .query_opt(
                    "SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'schema_version'",
                    &[&schema],
                )?
                .is_some();
            let version: i32 = if versioned {
                tx.query_one("SELECT version FROM schema_version", &[])?
                    .try_get(0)?
            } else {
                let tables: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
                        &[&schema],
                    )?
                    .try_get(0)?;
                if tables > 0 {
                    return Err(Fail::Store(StoreError::ForeignSchema {
                        path: self.target.clone().into(),
                        detail: format!(
                            "schema `{schema}` has {tables} tables but no `schema_version`"
                        ),
                    }));
                }
                if !create {
                    return Err(Fail::Store(StoreError::Backend {
                        store: self.target.clone(),
                        detail: format!("no decision store in schema `{schema}`"),
                    }));
                }
                0
            };
            if version > SCHEMA_VERSION {
                return Err(Fail::Store(StoreError::SchemaTooNew {
                    path: self.target.clone().into(),
                    found: i64::from(version),
                    supported: i64::from(SCHEMA_VERSION),
                }));
            }
            if version < SCHEMA_VERSION && !create {
                // An inspection reads; it never converts a store.
                return Err(Fail::Store(StoreError::SchemaTooOld {
                    path: self.target.clone().into(),
                    found: i64::from(version),
                    current: i64::from(SCHEMA_VERSION),
                }));
            }
            for (index, step) in schema::MIGRATIONS.iter().enumerate() {
                let to = i32::try_from(index + 1).unwrap_or(i32::MAX);
                if to > version {
                    tx.batch_execute(step)?;
                    tx.execute("UPDATE schema_version SET version = $1", &[&to])?;
                }
            }
            tx.commit()?;
            Ok(())
        })();
        result.map_err(|fail| self.finish(fail))
    }

    /// Runs `body` on a pooled connection. A lost connection is dropped with
    /// every idle one (they were most likely connected to the same, now
    /// gone, server) and the operation fails as unavailable; the next one
    /// connects afresh. A rolled-back deadlock is run again.
    fn run<T>(&self, body: impl FnMut(&mut Conn) -> Result<T, Fail>) -> Result<T, StoreError> {
        self.run_by(self.deadline(), body)
    }

    /// [`PostgresStore::run`] by `deadline`: the checkout, a connection
    /// made for it and every round trip of `body` (and of its repeats)
    /// answer by then, or the call fails unavailable and the connection is
    /// discarded (`docs/spec/store.md`, "Bounded calls").
    fn run_by<T>(
        &self,
        deadline: Instant,
        mut body: impl FnMut(&mut Conn) -> Result<T, Fail>,
    ) -> Result<T, StoreError> {
        let mut conn = self.checkout(deadline)?;
        conn.client.serve_until(deadline);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let answer = body(&mut conn);
            if conn.client.is_broken() {
                // Timed out, or closed: whatever it would still say is
                // never read. Its idle siblings were most likely connected
                // to the same, now hung or gone, server.
                drop(conn);
                self.discard(true);
                return match answer {
                    Ok(value) => Ok(value),
                    Err(Fail::Pg(error)) if connection_lost(&error) => Err(self.map_pg(&error)),
                    Err(Fail::Store(error)) => Err(error),
                    Err(_) => Err(self.timed_out()),
                };
            }
            match answer {
                Ok(value) => {
                    self.checkin(conn);
                    return Ok(value);
                }
                Err(Fail::TimedOut) => {
                    drop(conn);
                    self.discard(true);
                    return Err(self.timed_out());
                }
                Err(Fail::Pg(error)) if connection_lost(&error) => {
                    self.discard(true);
                    return Err(self.map_pg(&error));
                }
                Err(Fail::Pg(error)) if retryable(&error) && attempts < 4 => continue,
                Err(fail) => {
                    // A statement error leaves the connection usable (the
                    // transaction, if any, was rolled back when it dropped).
                    self.checkin(conn);
                    return Err(self.finish(fail));
                }
            }
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, PoolState>, StoreError> {
        self.pool.state.lock().map_err(|_| StoreError::Poisoned)
    }

    /// The error of a call that missed its deadline.
    fn timed_out(&self) -> StoreError {
        StoreError::Unavailable {
            store: self.target.clone(),
            detail: format!(
                "no answer within {:?} (the call's bound); the database may be hung or \
                 unreachable; its connection was dropped",
                self.bound
            ),
        }
    }

    /// An idle connection, or a new one if fewer than the pool's size are
    /// open, or the next one freed, by `deadline`.
    fn checkout(&self, deadline: Instant) -> Result<Conn, StoreError> {
        let mut state = self.lock()?;
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(conn);
            }
            if state.open < self.pool.size {
                state.open += 1;
                drop(state);
                return self.connect(deadline).inspect_err(|_| self.discard(false));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StoreError::Unavailable {
                    store: self.target.clone(),
                    detail: format!(
                        "all {} connections stayed busy for {:?} (the call's bound)",
                        self.pool.size, self.bound
                    ),
                });
            }
            state = self
                .pool
                .freed
                .wait_timeout(state, left)
                .map_err(|_| StoreError::Poisoned)?
                .0;
        }
    }

    /// A new session, in TLS as `sslmode` says: under `allow`, in plain
    /// text first and in TLS only when the server refuses that.
    /// By `deadline` (and the connect timeout for reaching the host).
    fn connect_client(&self, deadline: Instant) -> Result<Session, StoreError> {
        let session = match &self.tls {
            None => Session::connect(deadline, || self.config.connect(tokio_postgres::NoTls)),
            Some(tls) if self.tls_spec.mode != SslMode::Allow => {
                Session::connect(deadline, || self.config.connect(tls.clone()))
            }
            Some(tls) => {
                match Session::connect(deadline, || self.config.connect(tokio_postgres::NoTls)) {
                    Err(ConnectError::Pg(error)) if error.as_db_error().is_some() => {
                        let mut config = self.config.clone();
                        config.ssl_mode(tokio_postgres::config::SslMode::Require);
                        Session::connect(deadline, || config.connect(tls.clone()))
                    }
                    plain => plain,
                }
            }
        };
        session.map_err(|error| match error {
            ConnectError::Pg(error) => self.map_pg(&error),
            ConnectError::TimedOut => StoreError::Unavailable {
                store: self.target.clone(),
                detail: format!(
                    "no session within {:?} (the call's bound): the server accepted the \
                     connection but did not answer; it may be hung",
                    self.bound
                ),
            },
            ConnectError::Runtime(error) => StoreError::Unavailable {
                store: self.target.clone(),
                detail: format!("cannot start the client's I/O runtime: {error}"),
            },
        })
    }

    /// Whether this store's sessions are encrypted: PostgreSQL's own view
    /// (`pg_stat_ssl`) of a pooled connection, `Some(TLS version)` or
    /// `None` in plain text.
    #[doc(hidden)]
    pub fn session_tls(&self) -> Result<Option<String>, StoreError> {
        self.run(|conn| {
            let row = conn.client.query_one(
                "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )?;
            let ssl: bool = row.try_get(0)?;
            Ok(if ssl { row.try_get(1)? } else { None })
        })
    }

    fn connect(&self, deadline: Instant) -> Result<Conn, StoreError> {
        let client = self.connect_client(deadline)?;
        let st = Statements::prepare(&client).map_err(|trip| self.finish(trip.into()))?;
        Ok(Conn { client, st })
    }

    fn checkin(&self, conn: Conn) {
        if let Ok(mut state) = self.pool.state.lock() {
            state.idle.push(conn);
        }
        self.pool.freed.notify_one();
    }

    /// Forgets one open connection (already dropped by the caller), and with
    /// `all_idle` every idle one too.
    fn discard(&self, all_idle: bool) {
        if let Ok(mut state) = self.pool.state.lock() {
            state.open = state.open.saturating_sub(1);
            if all_idle {
                let idle = state.idle.len();
                state.idle.clear();
                state.open = state.open.saturating_sub(idle);
            }
        }
        self.pool.freed.notify_all();
    }

    fn map_pg(&self, error: &postgres::Error) -> StoreError {
        let detail = match error.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => {
                // The client's own text plus its cause (the I/O error): "error connecting
                // to server: No such file or directory".
                match std::error::Error::source(error) {
                    Some(source) if source.to_string() == "password missing" => {
                        PASSWORD_MISSING.to_owned()
                    }
                    Some(source) => self.tls_detail(error, source),
                    None => error.to_string(),
                }
            }
        };
        if connection_lost(error) {
            StoreError::Unavailable {
                store: self.target.clone(),
                detail,
            }
        } else {
            StoreError::Backend {
                store: self.target.clone(),
                detail,
            }
        }
    }

    /// The message of a client error with a cause; a TLS failure names the
    /// parameters it comes from (`sslmode=verify-full sslrootcert=…`).
    fn tls_detail(
        &self,
        error: &postgres::Error,
        source: &(dyn std::error::Error + 'static),
    ) -> String {
        let tls = tls::describe(&self.tls_spec);
        if let Some(handshake) = source.downcast_ref::<native_tls::Error>() {
            // OpenSSL's verify results: "hostname mismatch", "IP address mismatch".
            let text = handshake.to_string();
            let what = if self.tls_spec.mode == SslMode::VerifyFull && text.contains("mismatch)") {
                "the server's certificate does not name the host connected to (verify-ca checks \
                 the chain alone)"
            } else if self.tls_spec.root_cert.is_some()
                && text.contains("certificate verify failed")
            {
                "the server's certificate does not verify against the root certificates"
            } else {
                "the TLS handshake failed"
            };
            return format!("{tls}: {what}: {handshake}");
        }
        let cause = source.to_string();
        if cause == "server does not support TLS" {
            return format!(
                "{tls}: the server does not offer TLS (its `ssl` setting is off); turn it on, \
                 or lower sslmode to prefer to allow plain text"
            );
        }
        if cause == "no hostname provided for TLS handshake" {
            return format!("{tls}: TLS needs host=NAME to check the certificate against");
        }
        format!("{error}: {source}")
    }

    fn finish(&self, fail: Fail) -> StoreError {
        match fail {
            Fail::Pg(error) => self.map_pg(&error),
            Fail::Store(error) => error,
            Fail::TimedOut => self.timed_out(),
        }
    }

    /// The store file's stand-in in row errors.
    fn bad_row(&self, detail: String) -> Fail {
        Fail::Store(StoreError::BadRow {
            path: self.target.clone().into(),
            detail,
        })
    }

    fn decision(&self, row: &Row) -> Result<StoredDecision, Fail> {
        let verdict: &str = row.try_get(0)?;
        let verdict = Verdict::parse(verdict)
            .ok_or_else(|| self.bad_row(format!("unknown verdict `{verdict}`")))?;
        Ok(StoredDecision {
            verdict,
            reason: Arc::from(row.try_get::<_, &str>(1)?),
            digest: Arc::from(row.try_get::<_, &str>(2)?),
            expires_at: row.try_get(3)?,
            data: row.try_get::<_, Option<&str>>(4)?.map(Arc::from),
            represented: uint(row.try_get(5)?),
            decided_at: row.try_get(6)?,
            recomputable: row.try_get(7)?,
            statement: row.try_get::<_, Option<&str>>(8)?.map(Arc::from),
        })
    }
}

/// The arguments of the `admit` function for `checks` at `now`.
struct AdmitArgs<'a> {
    counters: Vec<&'a str>,
    amounts: Vec<i64>,
    limits: Vec<i64>,
    ms: Vec<Option<i64>>,
    floors: Vec<i64>,
    cuts: Vec<i64>,
    ends: Vec<i64>,
}

impl<'a> AdmitArgs<'a> {
    fn new(checks: &'a [LimitCheck], now: Millis) -> AdmitArgs<'a> {
        let mut args = AdmitArgs {
            counters: Vec::with_capacity(checks.len()),
            amounts: Vec::with_capacity(checks.len()),
            limits: Vec::with_capacity(checks.len()),
            ms: Vec::with_capacity(checks.len()),
            floors: Vec::with_capacity(checks.len()),
            cuts: Vec::with_capacity(checks.len()),
            ends: Vec::with_capacity(checks.len()),
        };
        for check in checks {
            let floor = window_floor(check.window, now);
            args.counters.push(&check.counter);
            args.amounts.push(int(check.amount));
            args.limits.push(int(check.limit));
            args.floors.push(floor);
            args.cuts
                .push(floor.saturating_sub(retention(check.window)));
            match check.window {
                LimitWindow::Rolling { ms } => {
                    args.ms.push(Some(int(ms)));
                    args.ends.push(Millis::MAX);
                }
                LimitWindow::Fixed { end, .. } => {
                    args.ms.push(None);
                    args.ends.push(end);
                }
            }
        }
        args
    }
}

/// The floor of `window` at `now` (the runtime's `store::window_floor`):
/// spend at or after it may count.
fn window_floor(window: LimitWindow, now: Millis) -> Millis {
    match window {
        LimitWindow::Rolling { ms } => now.saturating_sub(int(ms)).saturating_add(1),
        LimitWindow::Fixed { start, .. } => start,
    }
}

/// How long spend is kept below a window's floor (the runtime's
/// `store::retention`): one window length and an eighth, at least a minute,
/// so a clock step back within it counts exactly what an unpruned store would.
fn retention(window: LimitWindow) -> Millis {
    let length = match window {
        LimitWindow::Rolling { ms } => int(ms),
        LimitWindow::Fixed { start, end } => end.saturating_sub(start),
    };
    length.saturating_add(length / 8).max(60_000)
}

/// Runs `admit` for `checks` on `client` (a connection, or one in a transaction).
fn admit_on(
    client: &Session,
    statement: &Statement,
    server_id: &str,
    checks: &[LimitCheck],
    now: Millis,
) -> Result<Admission, Fail> {
    let args = AdmitArgs::new(checks, now);
    let row = client.query_one(
        statement,
        &[
            &server_id,
            &args.counters,
            &args.amounts,
            &args.limits,
            &args.ms,
            &args.floors,
            &args.cuts,
            &args.ends,
            &now,
        ],
    )?;
    let refused: Option<i32> = row.try_get(0)?;
    Ok(match refused {
        None => Admission::Admitted {
            reservation: Reservation {
                id: uint(row.try_get::<_, Option<i64>>(2)?.unwrap_or(0)),
                at: now,
            },
        },
        Some(index) => {
            let index = usize::try_from(index).unwrap_or(0);
            Admission::Refused {
                index,
                counter: checks
                    .get(index)
                    .map(|check| check.counter.clone())
                    .unwrap_or_default(),
                available_at: row.try_get::<_, Option<i64>>(1)?.unwrap_or(Millis::MAX),
            }
        }
    })
}

/// Runs `admit_batch` for the requests of `batch` (in arrival order) on
/// `client`, in one statement: one answer per request.
fn admit_batch_on(
    client: &Session,
    statement: &Statement,
    server_id: &str,
    batch: &[batch::Request],
) -> Result<Vec<Admission>, Fail> {
    let mut sizes = Vec::with_capacity(batch.len());
    let mut nows = Vec::with_capacity(batch.len());
    let mut all = AdmitArgs::new(&[], 0);
    for request in batch {
        let args = AdmitArgs::new(&request.checks, request.now);
        sizes.push(i32::try_from(request.checks.len()).unwrap_or(i32::MAX));
        nows.push(request.now);
        all.counters.extend(args.counters);
        all.amounts.extend(args.amounts);
        all.limits.extend(args.limits);
        all.ms.extend(args.ms);
        all.floors.extend(args.floors);
        all.cuts.extend(args.cuts);
        all.ends.extend(args.ends);
    }
    // One statement outside an explicit transaction is one transaction: its
    // commit is done (flushed, with synchronous_commit on) before the row
    // comes back, so nothing is answered before it.
    let row = client.query_one(
        statement,
        &[
            &server_id,
            &sizes,
            &all.counters,
            &all.amounts,
            &all.limits,
            &all.ms,
            &all.floors,
            &all.cuts,
            &all.ends,
            &nows,
        ],
    )?;
    let refused: Vec<Option<i32>> = row.try_get(0)?;
    let available: Vec<Option<i64>> = row.try_get(1)?;
    let reservations: Vec<Option<i64>> = row.try_get(2)?;
    let mut answers = Vec::with_capacity(batch.len());
    for (i, request) in batch.iter().enumerate() {
        let answer = match refused.get(i).copied().flatten() {
            None => Admission::Admitted {
                reservation: Reservation {
                    id: uint(reservations.get(i).copied().flatten().unwrap_or(0)),
                    at: request.now,
                },
            },
            Some(index) => {
                let index = usize::try_from(index).unwrap_or(0);
                Admission::Refused {
                    index,
                    counter: request
                        .checks
                        .get(index)
                        .map(|check| check.counter.clone())
                        .unwrap_or_default(),
                    available_at: available.get(i).copied().flatten().unwrap_or(Millis::MAX),
                }
            }
        };
        answers.push(answer);
    }
    Ok(answers)
}

impl DecisionStore for PostgresStore {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        let deadline = self.deadline();
        self.check_clock(now, deadline)?;
        self.run_by(deadline, |conn| {
            let any: Option<&str> = None;
            let row = conn.client.query_opt(
                &conn.st.replay,
                &[&key.server_id, &key.identity, &digest, &now, &any],
            )?;
            row.map(|row| self.decision(&row)).transpose()
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
        let deadline = self.deadline();
        self.check_clock(now, deadline)?;
        self.admit_grouped(server_id, checks, now, deadline)
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
        let id = int(reservation.id);
        let status: i32 = self.run(|conn| {
            Ok(conn
                .client
                .query_one(
                    &conn.st.settle,
                    &[&server_id, &id, &reservation.at, &counter, &int(actual)],
                )?
                .try_get(0)?)
        })?;
        if status == 1 {
            return Err(StoreError::UnknownReservation {
                reservation: reservation.id,
                counter: counter.to_owned(),
            });
        }
        Ok(())
    }

    /// One transaction: the server's row is locked first (the order the
    /// `record` function locks in), then the key's stored decision is read;
    /// a user's answer in force is kept (`store::may_replace`), anything
    /// else is replaced by the `record` function.
    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        let deadline = self.deadline();
        self.check_clock(decision.decided_at, deadline)?;
        self.run_by(deadline, |conn| {
            let tx = conn.client.transaction()?;
            tx.execute(
                "INSERT INTO servers (server_id) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&key.server_id],
            )?;
            tx.execute(
                "SELECT 1 FROM servers WHERE server_id = $1 FOR UPDATE",
                &[&key.server_id],
            )?;
            let old = tx.query_opt(&conn.st.get, &[&key.server_id, &key.identity])?;
            if let Some(old) = old.map(|row| self.decision(&row)).transpose()?
                && !may_replace(&old, decision)
            {
                tx.commit()?;
                return Ok(());
            }
            tx.execute(
                &conn.st.record,
                &[
                    &key.server_id,
                    &key.identity,
                    &decision.verdict.as_str(),
                    &&*decision.reason,
                    &&*decision.digest,
                    &decision.expires_at,
                    &decision.data.as_deref(),
                    &decision.decided_at,
                    &decision.recomputable,
                    &decision.statement.as_deref(),
                    &self.max_per_server,
                ],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
        self.run(|conn| {
            let row = conn
                .client
                .query_opt(&conn.st.get, &[&key.server_id, &key.identity])?;
            row.map(|row| self.decision(&row)).transpose()
        })
    }

    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        let deadline = self.deadline();
        self.check_clock(now, deadline)?;
        self.run_by(deadline, |conn| {
            let removed: i64 = conn
                .client
                .query_one(&conn.st.purge, &[&server_id, &digest, &now])?
                .try_get(0)?;
            Ok(uint(removed))
        })
    }

    /// Every count is written by the transaction that makes it.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn server_stats(&self, server_id: &str) -> Result<ServerStats, StoreError> {
        self.run(|conn| {
            let row = conn.client.query_opt(&conn.st.stats, &[&server_id])?;
            Ok(match row {
                Some(row) => ServerStats {
                    stored: uint(row.try_get(0)?),
                    evicted: uint(row.try_get(1)?),
                    evicted_represented: uint(row.try_get(2)?),
                },
                None => ServerStats::default(),
            })
        })
    }

    /// A miss (nothing stored for the key under this digest) is read
    /// without a lock and admitted by one more statement: with nothing to
    /// hold there is nothing a transaction around the two could protect
    /// (PostgreSQL takes no lock on an absent row), exactly as a miss in the
    /// SQLite store is one read. A hit is counted in one transaction that
    /// keeps the decision row locked (`UPDATE … RETURNING`) while `evaluate`
    /// runs and the admission is made, until `COMMIT`.
    fn replay_or_admit(
        &self,
        key: &DecisionKey,
        approval: Option<&str>,
        digest: &str,
        now: Millis,
        checks: &mut Vec<LimitCheck>,
        evaluate: &mut dyn FnMut(Option<&StoredDecision>, &mut Vec<LimitCheck>) -> Evaluation,
    ) -> Result<ReplayOrAdmit, StoreError> {
        // `evaluate` runs at most once, even if a deadlock makes `run` repeat
        // the transaction: its answer is kept for the repeat.
        let mut decided: Option<(Option<StoredDecision>, Evaluation)> = None;
        // The probes, in order: the refusal key answers with a denial, then
        // the approval key with an approval (`store::answers_probe`).
        let approval = approval.map(|a| DecisionKey::new(key.server_id.as_str(), a));
        let probes: Vec<(&DecisionKey, &str)> = std::iter::once((key, Verdict::Deny.as_str()))
            .chain(approval.iter().map(|a| (a, Verdict::Allow.as_str())))
            .collect();
        // One bound for the whole call: the clock, the read, and then the
        // admission.
        let deadline = self.deadline();
        self.check_clock(now, deadline)?;
        let answered = self.run_by(deadline, |conn| {
            let hit = match &decided {
                Some((replayed, _)) => replayed.is_some(),
                None => {
                    let mut hit = false;
                    for (probe, verdict) in &probes {
                        let verdict = Some(*verdict);
                        let args: [&(dyn postgres::types::ToSql + Sync); 5] =
                            [&probe.server_id, &probe.identity, &digest, &now, &verdict];
                        if conn.client.query_opt(&conn.st.peek, &args)?.is_some() {
                            hit = true;
                            break;
                        }
                    }
                    hit
                }
            };
            if !hit {
                // A miss: the connection goes back to the pool before the
                // admission, which may wait for another thread's batch.
                return Ok(None);
            }
            let tx = conn.client.transaction()?;
            let mut replayed = None;
            for (probe, verdict) in &probes {
                let verdict = Some(*verdict);
                let args: [&(dyn postgres::types::ToSql + Sync); 5] =
                    [&probe.server_id, &probe.identity, &digest, &now, &verdict];
                if let Some(row) = tx.query_opt(&conn.st.replay, &args)? {
                    replayed = Some(self.decision(&row)?);
                    break;
                }
            }
            let evaluation = match &decided {
                Some((_, evaluation)) => *evaluation,
                None => {
                    checks.clear();
                    let evaluation = evaluate(replayed.as_ref(), checks);
                    decided = Some((replayed.clone(), evaluation));
                    evaluation
                }
            };
            let admission = match evaluation {
                Evaluation::Answered => None,
                Evaluation::Admit if checks.is_empty() => Some(Admission::Admitted {
                    reservation: Reservation::NONE,
                }),
                Evaluation::Admit if !in_calendar(now) => refuse_outside_calendar(checks, now),
                Evaluation::Admit => {
                    Some(admit_on(&tx, &conn.st.admit, &key.server_id, checks, now)?)
                }
            };
            tx.commit()?;
            Ok(Some(ReplayOrAdmit {
                replayed,
                admission,
            }))
        })?;
        if let Some(answer) = answered {
            return Ok(answer);
        }
        checks.clear();
        let admission = match evaluate(None, checks) {
            Evaluation::Answered => None,
            Evaluation::Admit if checks.is_empty() => Some(Admission::Admitted {
                reservation: Reservation::NONE,
            }),
            Evaluation::Admit => Some(self.admit_grouped(&key.server_id, checks, now, deadline)?),
        };
        Ok(ReplayOrAdmit {
            replayed: None,
            admission,
        })
    }
}

/// The `WHERE` clause of a [`DecisionFilter`] over `$1..$4` (NULL: any).
const FILTER: &str = "($1::text IS NULL OR server_id = $1) AND ($2::text IS NULL OR identity = $2) \
     AND ($3::text IS NULL OR reason = $3) AND ($4::text IS NULL OR verdict = $4)";

/// Locks the servers rows a filter's decisions belong to (in key order, as
/// `record` takes one), so counts stay exact while the rows go.
const LOCK_SERVERS: &str = "SELECT 1 FROM servers WHERE ($1::text IS NULL OR server_id = $1) \
     ORDER BY server_id FOR UPDATE";

impl PostgresStore {
    fn entries(&self, rows: &[Row]) -> Result<Vec<StoredEntry>, Fail> {
        rows.iter()
            .map(|row| {
                let key = DecisionKey::new(row.try_get::<_, &str>(9)?, row.try_get::<_, &str>(10)?);
                Ok(StoredEntry {
                    key,
                    decision: self.decision(row)?,
                })
            })
            .collect()
    }

    /// Deletes the decisions matching `where_` (over `args`) in one
    /// transaction, lowering each server's stored count, and returns them.
    fn delete_decisions(
        &self,
        where_: &str,
        args: &[&(dyn postgres::types::ToSql + Sync)],
        server: Option<&str>,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        let sql = format!(
            "WITH gone AS (DELETE FROM decisions WHERE {where_} RETURNING *), \
             counted AS (UPDATE servers AS s SET stored = GREATEST(s.stored - c.n, 0) \
                 FROM (SELECT server_id, count(*) AS n FROM gone GROUP BY server_id) AS c \
                 WHERE s.server_id = c.server_id) \
             SELECT {DECISION_COLUMNS}, server_id, identity FROM gone \
             ORDER BY server_id, identity"
        );
        self.run(|conn| {
            let tx = conn.client.transaction()?;
            tx.execute(LOCK_SERVERS, &[&server])?;
            let rows = tx.query(&sql, args)?;
            let entries = self.entries(&rows)?;
            tx.commit()?;
            Ok(entries)
        })
    }
}

impl StoreAdmin for PostgresStore {
    fn decisions(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        let verdict = filter.verdict.as_ref().map(Verdict::as_str);
        let sql = format!(
            "SELECT {DECISION_COLUMNS}, server_id, identity FROM decisions WHERE {FILTER} \
             ORDER BY server_id, identity"
        );
        self.run(|conn| {
            let rows = conn.client.query(
                &sql,
                &[
                    &filter.server_id,
                    &filter.identity,
                    &filter.reason,
                    &verdict,
                ],
            )?;
            self.entries(&rows)
        })
    }

    fn forget(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        let verdict = filter.verdict.as_ref().map(Verdict::as_str);
        self.delete_decisions(
            FILTER,
            &[
                &filter.server_id,
                &filter.identity,
                &filter.reason,
                &verdict,
            ],
            filter.server_id.as_deref(),
        )
    }

    fn usage(
        &self,
        server_id: &str,
        check: &LimitCheck,
        now: Millis,
    ) -> Result<CounterUsage, StoreError> {
        if let Some(full) = usage_outside_calendar(check, now) {
            return Ok(full);
        }
        let floor = window_floor(check.window, now);
        let (ms, end) = match check.window {
            LimitWindow::Rolling { ms } => (Some(int(ms)), Millis::MAX),
            LimitWindow::Fixed { end, .. } => (None, end),
        };
        self.run(|conn| {
            let row = conn.client.query_one(
                "SELECT o_spent, o_available_at FROM usage($1::text, $2::text, $3::bigint, \
                 $4::bigint, $5::bigint, $6::bigint, $7::bigint)",
                &[
                    &server_id,
                    &check.counter,
                    &int(check.amount),
                    &int(check.limit),
                    &ms,
                    &floor,
                    &end,
                ],
            )?;
            Ok(CounterUsage {
                spent: uint(row.try_get(0)?),
                available_at: row.try_get(1)?,
            })
        })
    }

    fn prune_expired(&self, now: Millis) -> Result<Pruned, StoreError> {
        let decisions = self
            .delete_decisions("expires_at IS NOT NULL AND expires_at <= $1", &[&now], None)?
            .len() as u64;
        let spend_rows = self.run(|conn| {
            let tx = conn.client.transaction()?;
            let rows = tx.query(
                "SELECT server_id, counter, rolling_ms FROM counters \
                 ORDER BY server_id, counter FOR UPDATE",
                &[],
            )?;
            let (mut servers, mut counters, mut cuts) = (Vec::new(), Vec::new(), Vec::new());
            for row in &rows {
                servers.push(row.try_get::<_, &str>(0)?);
                counters.push(row.try_get::<_, &str>(1)?);
                let rolling: Option<i64> = row.try_get(2)?;
                cuts.push(prune_cut(rolling.map(uint), now));
            }
            let removed: i64 = tx
                .query_one(
                    "SELECT prune_spend($1::text[], $2::text[], $3::bigint[])",
                    &[&servers, &counters, &cuts],
                )?
                .try_get(0)?;
            tx.commit()?;
            Ok(uint(removed))
        })?;
        Ok(Pruned {
            decisions,
            spend_rows,
        })
    }

    fn size(&self) -> Result<StoreSize, StoreError> {
        self.run(|conn| {
            let row = conn.client.query_one(
                "SELECT (SELECT COALESCE(sum(stored), 0)::bigint FROM servers), \
                        (SELECT count(*) FROM spend), \
                        (SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint \
                         FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace \
                         WHERE n.nspname = current_schema() AND c.relkind = 'r')",
                &[],
            )?;
            Ok(StoreSize {
                decisions: uint(row.try_get(0)?),
                spend_rows: uint(row.try_get(1)?),
                bytes: Some(uint(row.try_get(2)?)),
            })
        })
    }

    fn servers(&self) -> Result<Vec<String>, StoreError> {
        self.run(|conn| {
            // Counters stand for spend: a counter row is made by a server's
            // first admission with checks, admitted or refused, and stays.
            let rows = conn.client.query(
                "SELECT server_id FROM servers UNION SELECT server_id FROM decisions \
                 UNION SELECT server_id FROM counters ORDER BY 1",
                &[],
            )?;
            rows.iter()
                .map(|row| Ok(row.try_get::<_, String>(0)?))
                .collect()
        })
    }

    fn check_integrity(&self) -> Result<Integrity, StoreError> {
        self.run(|conn| {
            let tx = conn.client.transaction()?;
            // One snapshot for every check, and nothing written.
            tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
            let mut integrity = Integrity::default();
            integrity.checks.push("the schema version".to_owned());
            let versions: Vec<i32> = tx
                .query("SELECT version FROM schema_version", &[])?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<_, _>>()?;
            if versions != [SCHEMA_VERSION] {
                integrity.findings.push(format!(
                    "schema_version holds {versions:?}; this build reads [{SCHEMA_VERSION}]"
                ));
            }
            for (label, sql) in INVARIANTS {
                integrity.checks.push(label.to_owned());
                for row in tx.query(sql, &[])? {
                    integrity.findings.push(row.try_get(0)?);
                }
            }
            tx.commit()?;
            Ok(integrity)
        })
    }
}

/// Each invariant of the schema (`schema.rs`) as a query answering one row
/// per breach, its one column the finding; the label says what is checked
/// (`docs/spec/store.md`, "Verifying a store").
const INVARIANTS: [(&str, &str); 6] = [
    (
        "the tables' keys and checks",
        "SELECT format('constraint %s is missing', expected) \
         FROM unnest(ARRAY['decisions_pkey', 'servers_pkey', 'counters_pkey', 'spend_pkey', \
                           'decisions_verdict_check']) AS expected \
         WHERE NOT EXISTS (SELECT 1 FROM pg_constraint AS c \
                           JOIN pg_namespace AS n ON n.oid = c.connamespace \
                           WHERE n.nspname = current_schema() AND c.conname = expected)",
    ),
    (
        "the store's functions",
        "SELECT format('function %s is missing', expected) \
         FROM unnest(ARRAY['admit', 'admit_batch', 'settle', 'record', 'purge_stale', \
                           'usage', 'prune_spend', 'sat']) AS expected \
         WHERE NOT EXISTS (SELECT 1 FROM pg_proc AS p \
                           JOIN pg_namespace AS n ON n.oid = p.pronamespace \
                           WHERE n.nspname = current_schema() AND p.proname = expected)",
    ),
    (
        "each server's stored count against its decisions",
        "SELECT format('server `%s` counts %s stored decisions but has %s', \
                s.server_id, s.stored, count(d.identity)) \
         FROM servers AS s LEFT JOIN decisions AS d ON d.server_id = s.server_id \
         GROUP BY s.server_id, s.stored HAVING s.stored != count(d.identity) \
         UNION ALL \
         SELECT format('server `%s` has %s decisions and no count', d.server_id, count(*)) \
         FROM decisions AS d WHERE NOT EXISTS \
             (SELECT 1 FROM servers AS s WHERE s.server_id = d.server_id) \
         GROUP BY d.server_id",
    ),
    (
        "each counter's total against its spend rows",
        "SELECT format('counter `%s` of server `%s`: total %s, its spend rows from its floor sum to %s', \
                c.counter, c.server_id, c.total, COALESCE(sum(r.amount), 0)) \
         FROM counters AS c LEFT JOIN spend AS r \
             ON r.server_id = c.server_id AND r.counter = c.counter AND r.at >= c.floor \
         GROUP BY c.server_id, c.counter, c.total \
         HAVING c.total != COALESCE(sum(r.amount), 0)",
    ),
    (
        "each counter's bounds on its spend rows",
        "SELECT format('counter `%s` of server `%s`: spend from %s to %s outside its bounds %s..%s', \
                c.counter, c.server_id, min(r.at), max(r.at), c.oldest, c.newest) \
         FROM counters AS c JOIN spend AS r \
             ON r.server_id = c.server_id AND r.counter = c.counter \
         GROUP BY c.server_id, c.counter, c.oldest, c.newest \
         HAVING c.oldest IS NULL OR c.newest IS NULL \
             OR min(r.at) < c.oldest OR max(r.at) > c.newest",
    ),
    (
        "each spend row's counter and amount",
        "SELECT format('spend row of counter `%s` of server `%s` at %s: %s', \
                r.counter, r.server_id, r.at, \
                CASE WHEN r.amount < 0 THEN format('amount %s', r.amount) \
                     ELSE 'no counter row' END) \
         FROM spend AS r \
         WHERE r.amount < 0 OR NOT EXISTS (SELECT 1 FROM counters AS c \
             WHERE c.server_id = r.server_id AND c.counter = r.counter)",
    ),
];

/// How long a reading of the database's clock is trusted before it is read
/// again ([`PostgresStore::check_clock`]).
const CLOCK_READING_AGE: Duration = Duration::from_secs(60);

/// A u64 as PostgreSQL's bigint, saturating.
fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A bigint back to u64 (negative never written; read as 0).
fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
