//! The operators' side of the SQLite store (`StoreAdmin`: `mcpc store`):
//! reads in one read transaction, the schema's invariants, pruning. The
//! engine's side is the parent module; `docs/spec/store.md`, "Reading a
//! store", is what both answer to.

use super::*;

impl SqliteStore {
    /// Runs `body` in one read transaction (a consistent snapshot of the
    /// WAL; no write lock, so proxies are never held up by a reader).
    fn read<T>(&self, body: impl FnOnce(&Connection) -> Result<T, Fail>) -> Result<T, StoreError> {
        let mut session = self.lock()?;
        // What it reads includes this open's re-presentation counts.
        self.flush_unwritten(&mut session)?;
        let conn = &session.conn;
        let finish = |fail: Fail| match fail {
            Fail::Sql(error) => map_sql(&self.path, error),
            Fail::Store(error) => error,
        };
        conn.prepare_cached("BEGIN")
            .and_then(|mut stmt| stmt.execute([]))
            .map_err(|e| map_sql(&self.path, e))?;
        let outcome = body(conn);
        // A read transaction has nothing to keep: end it either way.
        let end = conn.execute_batch(if outcome.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        });
        let value = outcome.map_err(finish)?;
        end.map_err(|e| map_sql(&self.path, e))?;
        Ok(value)
    }
}

impl StoreAdmin for SqliteStore {
    fn decisions(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        self.read(|conn| select_decisions(&self.path, conn, filter))
    }

    fn forget(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        let mut session = self.lock()?;
        self.write(&mut session, |conn| {
            let removed = select_decisions(&self.path, conn, filter)?;
            delete_entries(conn, &removed)?;
            Ok(removed)
        })
    }

    fn usage(
        &self,
        server_id: &str,
        check: &LimitCheck,
        now: Millis,
    ) -> Result<CounterUsage, StoreError> {
        if let Some(full) = crate::store::usage_outside_calendar(check, now) {
            return Ok(full);
        }
        self.read(|conn| {
            let (mut state, after_end, oldest) =
                read_counter(conn, server_id, &check.counter, until(check))?;
            let look = Look {
                server_id,
                check,
                after_end,
                oldest,
            };
            // `state` is this call's copy: nothing is written back.
            Ok(assess_in(conn, &look, &mut state, 0, now, false)?.usage())
        })
    }

    fn prune_expired(&self, now: Millis) -> Result<Pruned, StoreError> {
        let mut session = self.lock()?;
        self.write(&mut session, |conn| {
            // Expiry is exclusive: gone at `expires_at`.
            let expired: Vec<(String, i64)> = conn
                .prepare_cached(
                    "SELECT server_id, COUNT(*) FROM decisions WHERE expires_at <= ?1
                     GROUP BY server_id",
                )?
                .query_map(params![now], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            conn.prepare_cached("DELETE FROM decisions WHERE expires_at <= ?1")?
                .execute(params![now])?;
            let mut decisions = 0u64;
            for (server_id, removed) in expired {
                let mut stats = server_stats_in(conn, &server_id)?;
                stats.stored = stats.stored.saturating_sub(uint(removed));
                write_server_stats(conn, &server_id, stats)?;
                decisions = decisions.saturating_add(uint(removed));
            }
            let mut spend_rows = 0u64;
            for (server_id, counter) in counters(conn)? {
                spend_rows =
                    spend_rows.saturating_add(prune_counter(conn, &server_id, &counter, now)?);
            }
            Ok(Pruned {
                decisions,
                spend_rows,
            })
        })
    }

    fn size(&self) -> Result<StoreSize, StoreError> {
        let (decisions, spend_rows) = self.read(|conn| {
            let count = |sql: &str| -> Result<u64, rusqlite::Error> {
                conn.prepare_cached(sql)?
                    .query_row([], |row| row.get::<_, i64>(0))
                    .map(uint)
            };
            Ok((
                count("SELECT COUNT(*) FROM decisions")?,
                count("SELECT COUNT(*) FROM spend WHERE reservation > 0")?,
            ))
        })?;
        let bytes = [self.path.clone(), sidecar(&self.path, "-wal")]
            .iter()
            .filter_map(|file| std::fs::metadata(file).ok())
            .map(|meta| meta.len())
            .sum();
        Ok(StoreSize {
            decisions,
            spend_rows,
            bytes: Some(bytes),
        })
    }

    fn servers(&self) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut names: std::collections::BTreeSet<String> = conn
                .prepare_cached(
                    "SELECT server_id FROM servers UNION SELECT server_id FROM decisions",
                )?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            // The spend table by jumps, not a scan of every spend row.
            names.extend(counters(conn)?.into_iter().map(|(server_id, _)| server_id));
            Ok(names.into_iter().collect())
        })
    }

    fn check_integrity(&self) -> Result<Integrity, StoreError> {
        self.read(|conn| integrity_of(&self.path, conn))
    }
}

/// Each invariant of the schema as a query answering one row per breach,
/// its first column the finding; the label says what is checked.
const INVARIANTS: [(&str, &str); 6] = [
    (
        "the `meta` table's epoch row",
        "SELECT 'the `meta` table has no `epoch` row'
         WHERE NOT EXISTS (SELECT 1 FROM meta WHERE key = 'epoch')",
    ),
    (
        "each decision's verdict, reason and digest",
        "SELECT printf('decision %s of server `%s`: verdict `%s`, reason `%s`, digest `%s`',
                       identity, server_id, verdict, reason, digest)
         FROM decisions
         WHERE verdict NOT IN ('allow', 'deny') OR reason = '' OR digest = ''
            OR represented < 0",
    ),
    (
        "each server's stored count against its decisions",
        "SELECT printf('server `%s` counts %d stored decisions but has %d',
                       server_id, stored, counted)
         FROM (SELECT s.server_id, s.stored,
                      (SELECT COUNT(*) FROM decisions AS d WHERE d.server_id = s.server_id)
                          AS counted
               FROM servers AS s)
         WHERE stored != counted
         UNION ALL
         SELECT printf('server `%s` has %d decisions and no count', server_id, COUNT(*))
         FROM decisions
         WHERE server_id NOT IN (SELECT server_id FROM servers)
         GROUP BY server_id",
    ),
    (
        "each counter's total against its spend rows",
        "SELECT printf('counter `%s` of server `%s`: total %d, its spend rows from its floor sum to %d',
                       counter, server_id, total, summed)
         FROM (SELECT t.server_id, t.counter, t.amount AS total,
                      (SELECT COALESCE(SUM(r.amount), 0) FROM spend AS r
                       WHERE r.server_id = t.server_id AND r.counter = t.counter
                         AND r.reservation > 0 AND r.at < 9223372036854775807
                         AND r.at >= COALESCE(
                             (SELECT f.amount FROM spend AS f
                              WHERE f.server_id = t.server_id AND f.counter = t.counter
                                AND f.at = 9223372036854775807 AND f.reservation = -1),
                             -9223372036854775808)) AS summed
               FROM spend AS t
               WHERE t.at = 9223372036854775807 AND t.reservation = 0)
         WHERE total != summed",
    ),
    (
        "each spend row's amount and place",
        "SELECT printf('spend row of counter `%s` of server `%s` at %d, reservation %d: amount %d',
                       counter, server_id, at, reservation, amount)
         FROM spend
         WHERE (reservation > 0 AND (amount < 0 OR at = 9223372036854775807))
            OR (reservation <= 0 AND at != 9223372036854775807)
            OR reservation < -3",
    ),
    (
        "each counter's spend against its prune mark",
        "SELECT printf('counter `%s` of server `%s` has no total row', server_id, counter)
         FROM (SELECT DISTINCT server_id, counter FROM spend WHERE reservation > 0) AS c
         WHERE NOT EXISTS (SELECT 1 FROM spend AS t
                           WHERE t.server_id = c.server_id AND t.counter = c.counter
                             AND t.at = 9223372036854775807 AND t.reservation = 0)",
    ),
];

/// [`StoreAdmin::check_integrity`] on `conn`, inside a read transaction.
fn integrity_of(path: &Path, conn: &Connection) -> Result<Integrity, Fail> {
    let mut integrity = Integrity::default();
    integrity
        .checks
        .push("PRAGMA integrity_check (every page, every index entry)".to_owned());
    let findings: Vec<String> = conn
        .prepare("PRAGMA integrity_check(100)")?
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    let damaged = !(findings.len() == 1 && findings[0] == "ok");
    if damaged {
        integrity.findings.extend(findings);
    }
    integrity
        .checks
        .push("application id, schema version and tables".to_owned());
    let (app, version, tables) = identity_of(conn)?;
    if let Err(error) = judge_identity(path, app, version, tables) {
        integrity.findings.push(error.to_string());
    } else if version != SCHEMA_VERSION {
        integrity
            .findings
            .push(format!("schema version {version}, not {SCHEMA_VERSION}"));
    }
    if let Err(fail) = check_tables(path, conn) {
        match fail {
            Fail::Store(error) => integrity.findings.push(error.to_string()),
            Fail::Sql(error) => return Err(Fail::Sql(error)),
        }
        return Ok(integrity);
    }
    for (label, sql) in INVARIANTS {
        integrity.checks.push(label.to_owned());
        // A damaged page can fail the query itself: that is a finding too.
        let rows = conn.prepare(sql).and_then(|mut stmt| {
            stmt.query_map([], |row| row.get::<_, String>(0))?
                .take(100)
                .collect::<Result<Vec<_>, _>>()
        });
        match rows {
            Ok(found) => integrity.findings.extend(found),
            Err(error) => integrity.findings.push(format!("{label}: {error}")),
        }
    }
    Ok(integrity)
}

/// Every `(server_id, counter)` of `spend`, found by jumping from one to the
/// next along the primary key (one index look-up per counter, however many
/// rows each holds).
fn counters(conn: &Connection) -> Result<Vec<(String, String)>, rusqlite::Error> {
    let mut first = conn.prepare_cached(
        "SELECT server_id, counter FROM spend ORDER BY server_id, counter LIMIT 1",
    )?;
    let mut next = conn.prepare_cached(
        "SELECT server_id, counter FROM spend WHERE (server_id, counter) > (?1, ?2)
         ORDER BY server_id, counter LIMIT 1",
    )?;
    let pair = |row: &Row<'_>| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?));
    let mut found = Vec::new();
    let mut at = first.query_row([], pair).optional()?;
    while let Some((server_id, counter)) = at {
        at = next
            .query_row(params![server_id, counter], pair)
            .optional()?;
        found.push((server_id, counter));
    }
    Ok(found)
}

/// Deletes every spend row of one counter recorded before its
/// [`prune_cut`], moving its floor up to the cut first (so its total never
/// counts a deleted row) and its prune mark past them; answers how many went.
fn prune_counter(
    conn: &Connection,
    server_id: &str,
    counter: &str,
    now: Millis,
) -> Result<u64, rusqlite::Error> {
    let (read, _, _) = read_counter(conn, server_id, counter, TOTAL_AT)?;
    let cut = prune_cut(read.rolling_ms.map(uint), now);
    let mut state = read;
    if cut > state.floor {
        move_floor(conn, server_id, counter, &mut state, cut)?;
    }
    let newest: Option<i64> = conn
        .prepare_cached(
            "SELECT MAX(at) FROM spend
             WHERE server_id = ?1 AND counter = ?2 AND at < ?3 AND reservation > 0",
        )?
        .query_row(params![server_id, counter, cut], |row| row.get(0))?;
    let Some(newest) = newest else {
        return Ok(0);
    };
    let removed = conn
        .prepare_cached(
            "DELETE FROM spend
             WHERE server_id = ?1 AND counter = ?2 AND at < ?3 AND reservation > 0",
        )?
        .execute(params![server_id, counter, cut])? as u64;
    state.pruned = state.pruned.max(newest.saturating_add(1));
    let mut set = conn.prepare_cached(
        "INSERT INTO spend (server_id, counter, at, reservation, amount)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT DO UPDATE SET amount = excluded.amount",
    )?;
    for (reservation, before, after) in [
        (0, read.total, state.total),
        (FLOOR_ROW, read.floor, state.floor),
        (PRUNED_ROW, read.pruned, state.pruned),
    ] {
        if before != after {
            set.execute(params![server_id, counter, TOTAL_AT, reservation, after])?;
        }
    }
    Ok(removed)
}
