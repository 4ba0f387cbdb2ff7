//! Opening a large SQLite store, and its first decision: opening costs the
//! same at any size (`docs/spec/store.md`, "Durability").
//!
//! Builds once, and keeps in `target/mcpolicy-bench/store-1m.db`, a store
//! of 1,000,000 decisions: 100 servers at the default bound of 10,000
//! each, every one a stored static denial under a block digest that has
//! since changed, and 2,000 spend rows per server (a rolling 24 h token
//! budget and a daily request budget) recorded two days before the bench's
//! clock, so all of them are past their windows and their retention. Then:
//!
//! - `open`: [`SqliteStore::open`] with the default options (header,
//!   schema and `meta` checked; no `quick_check`);
//! - `open_verified`: the same with `verify_on_open` (the full
//!   `quick_check` every open used to run), fewer samples;
//! - `first_decision`: open, then the engine's first decision for a server
//!   with the dearest store work: `replay_or_admit` (a miss, and an
//!   admission of both budgets, which moves their floors over the old
//!   spend and prunes it), then `purge_stale` (all 10,000 stored decisions
//!   of the server are of the old digest: the engine purges them before
//!   its first record) and `record` of the new denial. Each sample uses
//!   another server, so each meets the untouched state.
//!
//! Prints the median and the range of each. Run:
//! `cargo bench -p mcpolicy-runtime --bench store_open`
//! (delete `target/mcpolicy-bench/` to rebuild the store).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, Evaluation, LimitCheck, LimitWindow, Millis,
    SCHEMA_VERSION, SqliteOptions, SqliteStore, StoredDecision, Verdict,
};

const SERVERS: u64 = 100;
const PER_SERVER: u64 = 10_000;
const SPEND_PER_COUNTER: u64 = 1_000;
const DAY: Millis = 86_400_000;
/// The bench's clock: 2026-03-10T12:00:00Z.
const NOW: Millis = 1_773_144_000_000;
const OLD_DIGEST: &str = "0ld0ld0ld0ld0ld0ld0ld0ld0ld0ld00";
const NEW_DIGEST: &str = "3f1c9a0e5b7d2468ace013579bdf2468";

fn server(n: u64) -> String {
    format!("srv-{n:02}")
}

fn checks(now: Millis) -> Vec<LimitCheck> {
    let day_start = now - now.rem_euclid(DAY);
    vec![
        LimitCheck {
            counter: "budget:tokens:rolling:86400000".into(),
            amount: 1_024,
            limit: 1_000_000_000,
            window: LimitWindow::Rolling { ms: 86_400_000 },
        },
        LimitCheck {
            counter: "budget:requests:day".into(),
            amount: 1,
            limit: 1_000_000,
            window: LimitWindow::Fixed {
                start: day_start,
                end: day_start + DAY,
            },
        },
    ]
}

/// Builds the store with plain SQL in one transaction (a million `record`
/// calls would take minutes); the schema is the store's own, created by
/// opening it first.
fn build(path: &Path) {
    let _ = std::fs::remove_file(path);
    drop(SqliteStore::open(path).expect("create the store"));
    let conn = rusqlite::Connection::open(path).expect("sqlite");
    let data = r#"{"reason":"policy.sampling_disabled","server":"srv-00","retryable":false}"#;
    let started = Instant::now();
    conn.execute_batch(&format!(
        "BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {total} - 1)
         INSERT INTO decisions (server_id, identity, verdict, reason, digest, expires_at, data,
                                represented, decided_at, recomputable)
         SELECT printf('srv-%02d', i % {SERVERS}),
                printf('srv-%02d:%032x', i % {SERVERS}, i),
                'deny', 'policy.sampling_disabled', '{OLD_DIGEST}', NULL, '{data}',
                i % 7, {decided} + i, 1
         FROM n;
         INSERT INTO servers (server_id, stored, evicted, evicted_represented)
         SELECT printf('srv-%02d', i), {PER_SERVER}, 0, 0 FROM
             (WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {SERVERS} - 1)
              SELECT i FROM s);
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {spend} - 1)
         INSERT INTO spend (server_id, counter, at, reservation, amount)
         SELECT printf('srv-%02d', i % {SERVERS}),
                CASE WHEN (i / {SERVERS}) % 2 = 0 THEN 'budget:tokens:rolling:86400000'
                     ELSE 'budget:requests:day' END,
                {spent_at} + i, i + 1, 1
         FROM n;
         INSERT INTO spend (server_id, counter, at, reservation, amount)
         SELECT server_id, counter, 9223372036854775807, 0, SUM(amount) FROM spend
         WHERE reservation > 0 GROUP BY server_id, counter;
         COMMIT;",
        total = SERVERS * PER_SERVER,
        decided = NOW - 3 * DAY,
        spend = SERVERS * SPEND_PER_COUNTER * 2,
        spent_at = NOW - 2 * DAY - DAY / 2,
    ))
    .expect("build the store");
    drop(conn);
    // Fold the WAL into the main file, as a store closed cleanly would be.
    drop(SqliteStore::open(path).expect("reopen"));
    eprintln!(
        "built {} ({} MB) in {:.1} s",
        path.display(),
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) / 1_000_000,
        started.elapsed().as_secs_f64()
    );
}

/// The cached store, built if missing or of another schema version.
fn store_path() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("mcpolicy-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join("store-1m.db");
    let version = rusqlite::Connection::open(&path)
        .and_then(|c| c.pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0)))
        .unwrap_or(0);
    let decisions = rusqlite::Connection::open(&path)
        .and_then(|c| {
            c.query_row("SELECT COUNT(*) FROM decisions", [], |row| {
                row.get::<_, i64>(0)
            })
        })
        .unwrap_or(0);
    if version != SCHEMA_VERSION || decisions != (SERVERS * PER_SERVER) as i64 {
        build(&path);
    }
    path
}

/// A scratch copy of the cached store: the decision samples change it.
fn scratch(path: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("store-open")
        .tempdir_in(path.parent().expect("parent"))
        .expect("tempdir");
    let copy = dir.path().join("store.db");
    std::fs::copy(path, &copy).expect("copy the store");
    (dir, copy)
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name:>16}: median {:8.3} ms  (min {:.3}, max {:.3}, {} samples)",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

fn first_decision(store: &SqliteStore, n: u64) {
    let server = server(n);
    let key = DecisionKey::new(server.as_str(), format!("{server}:{:032x}", u64::MAX - n));
    let mut wanted = checks(NOW);
    let mut buffer = Vec::new();
    let mut evaluate = |stored: Option<&StoredDecision>, out: &mut Vec<LimitCheck>| {
        assert!(stored.is_none());
        out.append(&mut wanted);
        Evaluation::Admit
    };
    let answer = store
        .replay_or_admit(&key, None, NEW_DIGEST, NOW, &mut buffer, &mut evaluate)
        .expect("replay_or_admit");
    assert!(matches!(answer.admission, Some(Admission::Admitted { .. })));
    let purged = store
        .purge_stale(&server, NEW_DIGEST, NOW)
        .expect("purge_stale");
    assert_eq!(purged, PER_SERVER);
    store
        .record(
            &key,
            &StoredDecision {
                verdict: Verdict::Deny,
                reason: "policy.sampling_disabled".into(),
                digest: NEW_DIGEST.into(),
                expires_at: None,
                data: Some("{}".into()),
                represented: 0,
                decided_at: NOW,
                recomputable: true,
                statement: None,
            },
        )
        .expect("record");
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let path = store_path();
    let (_dir, copy) = scratch(&path);
    let samples = if quick { 2 } else { 25 };

    let mut open = Vec::new();
    for _ in 0..samples {
        let started = Instant::now();
        let store = SqliteStore::open(&copy).expect("open");
        open.push(started.elapsed());
        drop(store);
    }
    report("open", open);

    let verified = SqliteOptions {
        verify_on_open: true,
        ..SqliteOptions::default()
    };
    let mut open_verified = Vec::new();
    for _ in 0..(if quick { 1 } else { 5 }) {
        let started = Instant::now();
        let store = SqliteStore::open_with(&copy, &verified).expect("open");
        open_verified.push(started.elapsed());
        drop(store);
    }
    report("open_verified", open_verified);

    let mut decision = Vec::new();
    for n in 0..(samples as u64).min(SERVERS) {
        let started = Instant::now();
        let store = SqliteStore::open(&copy).expect("open");
        first_decision(&store, n);
        decision.push(started.elapsed());
        drop(store);
    }
    report("first_decision", decision);
}
