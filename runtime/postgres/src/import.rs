//! Moving an SQLite store into PostgreSQL (`mcpc store migrate`): every
//! stored decision as it is (its `represented` count included), each
//! server's tallies, and every counter exactly: all its spend rows (those
//! an admission would prune next too: the copy prunes them as the source
//! would), its prune mark and its rolling window, its total counting every
//! copied row from a floor at the beginning of time (which the next
//! admission moves as the source's would). So budgets and rates carry on
//! where they were, also for a clock stepped back (`docs/spec/store.md`,
//! "Moving a store"; property `migration_round_trips_every_counter_and_decision`).
//!
//! The SQLite file is first opened by the runtime's own `SqliteStore`
//! (which checks it and migrates it to the current schema), then read in
//! one read transaction; everything is written to PostgreSQL in one
//! transaction, into a store that must be empty.

use std::path::Path;

use mcpolicy_runtime::store::{SqliteStore, StoreError};
use postgres::types::ToSql;

use super::PostgresStore;

/// What [`PostgresStore::import_sqlite`] copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Imported {
    /// Stored decisions.
    pub decisions: u64,
    /// Servers with tallies (stored and evicted counts).
    pub servers: u64,
    /// Counters (rate and budget states).
    pub counters: u64,
    /// Spend rows.
    pub spend_rows: u64,
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The SQLite store could not be opened or read.
    #[error("{0}")]
    Source(StoreError),
    /// Reading the SQLite file failed.
    #[error("reading {path}: {source}")]
    Read {
        /// The SQLite file.
        path: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The PostgreSQL store already holds decisions or spend.
    #[error(
        "{target} is not empty ({decisions} decisions, {counters} counters); migrate into a new \
         schema (schema=NAME) or forget its contents first"
    )]
    NotEmpty {
        /// The target store.
        target: String,
        /// Its decisions.
        decisions: i64,
        /// Its counters.
        counters: i64,
    },
    /// Writing to PostgreSQL failed.
    #[error("{0}")]
    Target(StoreError),
}

/// A decision row as both schemas hold it.
type DecisionRow = (
    String,
    String,
    String,
    String,
    String,
    Option<i64>,
    Option<String>,
    i64,
    i64,
    bool,
    Option<String>,
);

/// Everything read from the SQLite file.
#[derive(Default)]
struct Snapshot {
    decisions: Vec<DecisionRow>,
    servers: Vec<(String, i64, i64, i64)>,
    /// (server, counter, pruned mark, rolling ms)
    counters: Vec<(String, String, Option<i64>, Option<i64>)>,
    /// (server, counter, at, reservation, amount)
    spend: Vec<(String, String, i64, i64, i64)>,
}

/// `reservation` values of SQLite's per-counter state rows (at `i64::MAX`).
const PRUNED_ROW: i64 = -2;
const ROLLING_ROW: i64 = -3;

fn read_snapshot(path: &Path) -> Result<Snapshot, ImportError> {
    // Checks the file and brings it to the current schema.
    drop(SqliteStore::open(path).map_err(ImportError::Source)?);
    let read = |source| ImportError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(read)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(read)?;
    let tx = conn.transaction().map_err(read)?;
    let mut snapshot = Snapshot::default();
    {
        let mut stmt = tx
            .prepare(
                "SELECT server_id, identity, verdict, reason, digest, expires_at, data, \
                 represented, decided_at, recomputable, statement FROM decisions",
            )
            .map_err(read)?;
        snapshot.decisions = stmt
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get::<_, i64>(9)? != 0,
                    r.get(10)?,
                ))
            })
            .and_then(|rows| rows.collect())
            .map_err(read)?;
        let mut stmt = tx
            .prepare("SELECT server_id, stored, evicted, evicted_represented FROM servers")
            .map_err(read)?;
        snapshot.servers = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .and_then(|rows| rows.collect())
            .map_err(read)?;
        let mut stmt = tx
            .prepare(
                "SELECT server_id, counter, \
                 MAX(CASE WHEN reservation = ?1 THEN amount END), \
                 MAX(CASE WHEN reservation = ?2 THEN amount END) \
                 FROM spend GROUP BY server_id, counter",
            )
            .map_err(read)?;
        snapshot.counters = stmt
            .query_map([PRUNED_ROW, ROLLING_ROW], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .and_then(|rows| rows.collect())
            .map_err(read)?;
        // Every spend row: leaving out the ones an admission would prune
        // next would make the copy refuse (or count less) where the source
        // counts them, after a clock step back.
        let mut stmt = tx
            .prepare(
                "SELECT server_id, counter, at, reservation, amount FROM spend \
                 WHERE reservation > 0",
            )
            .map_err(read)?;
        snapshot.spend = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|rows| rows.collect())
            .map_err(read)?;
    }
    Ok(snapshot)
}

impl PostgresStore {
    /// Copies the SQLite store at `path` into this (empty) store, in one
    /// transaction: decisions as they are, server tallies, counters with
    /// their spend rows, prune marks and rolling windows, so that the copy
    /// answers every admission, settlement and look as the source would.
    /// Reservation ids issued here afterwards start past every copied one.
    pub fn import_sqlite(&self, path: &Path) -> Result<Imported, ImportError> {
        let snapshot = read_snapshot(path)?;
        let imported = Imported {
            decisions: snapshot.decisions.len() as u64,
            servers: snapshot.servers.len() as u64,
            counters: snapshot.counters.len() as u64,
            spend_rows: snapshot.spend.len() as u64,
        };
        let mut not_empty = None;
        self.run(|conn| {
            let tx = conn.client.transaction()?;
            let row = tx.query_one(
                "SELECT (SELECT count(*) FROM decisions), (SELECT count(*) FROM counters)",
                &[],
            )?;
            let (decisions, counters): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
            if decisions > 0 || counters > 0 {
                not_empty = Some((decisions, counters));
                return Ok(());
            }
            let insert_decision = tx.prepare(
                "INSERT INTO decisions (server_id, identity, verdict, reason, digest, \
                 expires_at, data, represented, decided_at, recomputable, statement) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )?;
            for d in &snapshot.decisions {
                let args: [&(dyn ToSql + Sync); 11] = [
                    &d.0, &d.1, &d.2, &d.3, &d.4, &d.5, &d.6, &d.7, &d.8, &d.9, &d.10,
                ];
                tx.execute(&insert_decision, &args)?;
            }
            let insert_server = tx.prepare(
                "INSERT INTO servers (server_id, stored, evicted, evicted_represented) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (server_id) DO UPDATE SET \
                 stored = excluded.stored, evicted = excluded.evicted, \
                 evicted_represented = excluded.evicted_represented",
            )?;
            for s in &snapshot.servers {
                tx.execute(&insert_server, &[&s.0, &s.1, &s.2, &s.3])?;
            }
            let insert_spend = tx.prepare(
                "INSERT INTO spend (server_id, counter, at, reservation, amount) \
                 VALUES ($1, $2, $3, $4, $5)",
            )?;
            for s in &snapshot.spend {
                tx.execute(&insert_spend, &[&s.0, &s.1, &s.2, &s.3, &s.4])?;
            }
            // Each counter's total counts every copied row (floor at the
            // beginning of time); its prune mark and window come along. The
            // sum is made 0 before `sat`: `sat(NULL)` is i64::MAX
            // (PostgreSQL's LEAST and GREATEST skip NULLs), which made a
            // counter without spend rows (all aged out and pruned) full
            // forever.
            let insert_counter = tx.prepare(
                "INSERT INTO counters (server_id, counter, total, pruned, rolling_ms, oldest, \
                     newest) \
                 SELECT $1::text, $2::text, sat(COALESCE(sum(amount), 0)), \
                     COALESCE($3::bigint, -9223372036854775808), $4::bigint, min(at), max(at) \
                 FROM spend WHERE server_id = $1 AND counter = $2",
            )?;
            for c in &snapshot.counters {
                tx.execute(&insert_counter, &[&c.0, &c.1, &c.2, &c.3])?;
            }
            tx.execute(
                "SELECT setval('reservation_ids', GREATEST( \
                     (SELECT COALESCE(max(reservation), 1) FROM spend), \
                     (SELECT last_value FROM reservation_ids)))",
                &[],
            )?;
            tx.commit()?;
            Ok(())
        })
        .map_err(ImportError::Target)?;
        if let Some((decisions, counters)) = not_empty {
            return Err(ImportError::NotEmpty {
                target: self.target.clone(),
                decisions,
                counters,
            });
        }
        Ok(imported)
    }
}
