//! The decision store contract, run against both implementations, plus the
//! SQLite store's durability (reopen, `kill -9`, several processes) and its
//! refusal of corrupt, foreign and unreadable files.
//!
//! The crash and multi-process tests re-run this very test binary as a child:
//! the `child_process` test is a no-op unless `MCPOLICY_STORE_CHILD` is set.

#[cfg(feature = "sqlite")]
use mcpolicy_runtime::store::SqliteStore;
use mcpolicy_runtime::store::{DEFAULT_MAX_DECISIONS_PER_SERVER, MemoryStore};

#[macro_use]
#[path = "store_shared/contract.rs"]
mod contract;
pub use contract::*;

fn memory() -> Fixture {
    Fixture {
        store: Arc::new(MemoryStore::with_max_decisions_per_server(TEST_BOUND)),
        max_per_server: TEST_BOUND,
        _dir: None,
    }
}

#[cfg(feature = "sqlite")]
fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = mcpolicy_runtime::store::SqliteOptions {
        max_decisions_per_server: TEST_BOUND,
        ..Default::default()
    };
    let store = SqliteStore::open_with(dir.path().join("store.db"), &options).expect("open store");
    Fixture {
        store: Arc::new(store),
        max_per_server: TEST_BOUND,
        _dir: Some(dir),
    }
}

/// Instantiates a generic contract test for both stores.
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn memory() {
                super::$name(super::memory());
            }
            #[cfg(feature = "sqlite")]
            #[test]
            fn sqlite() {
                super::$name(super::sqlite());
            }
        }
    )*};
}

each_contract_test!(both);

#[test]
fn the_default_bound_holds_a_flood() {
    // The default store, 12,000 distinct denials of one server: a store
    // before the bound kept all of them (`docs/spec/store.md`, "Bounds and eviction").
    let s = MemoryStore::new();
    for n in 0..12_000 {
        s.record(&key("srv", n), &static_denial(n)).expect("record");
    }
    assert_eq!(s.len(), DEFAULT_MAX_DECISIONS_PER_SERVER as usize);
    assert_eq!(
        s.server_stats("srv").expect("stats").evicted,
        12_000 - DEFAULT_MAX_DECISIONS_PER_SERVER
    );
}

// ---------------------------------------------------------------------------
// SQLite only: durability and damaged files.

#[cfg(feature = "sqlite")]
mod sqlite_only {
    use super::*;
    use mcpolicy_runtime::store::SCHEMA_VERSION;
    use std::io::{BufRead, BufReader, Write};
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};

    #[test]
    fn sqlite_survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.db");
        let budget = |amount| [fixed("budget:tokens:day", amount, 1_000, 0, DAY as Millis)];
        let res;
        {
            let s = SqliteStore::open(&path).expect("open");
            s.record(&key("srv", 1), &deny("d", Some(5_000), DATA))
                .expect("record");
            s.record(&key("srv", 2), &allow("d")).expect("record");
            s.replay(&key("srv", 1), "d", 10).expect("replay");
            res = reservation(s.admit("srv", &budget(700), 10).expect("admit"));
        }
        let s = SqliteStore::open(&path).expect("reopen");
        let d = s.get(&key("srv", 1)).expect("get").expect("present");
        assert_eq!(d.data.as_deref(), Some(DATA));
        assert_eq!(d.represented, 1);
        assert_eq!(d.expires_at, Some(5_000));
        assert_eq!(s.get(&key("srv", 2)).expect("get"), Some(allow("d")));
        // The budget count survived, and so did the reservation handle.
        assert!(!admitted(&s.admit("srv", &budget(301), 20).expect("admit")));
        s.settle("srv", res, "budget:tokens:day", 200)
            .expect("settle after reopen");
        assert!(admitted(&s.admit("srv", &budget(800), 20).expect("admit")));
        assert_eq!(s.len().expect("len"), 2);
    }

    #[test]
    fn sqlite_reservations_are_never_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.db");
        let check = [rolling("r", 1, 1_000, 100)];
        let mut seen = std::collections::HashSet::new();
        // Two opens of one file at once (as two processes would), then a reopen.
        {
            let a = SqliteStore::open(&path).expect("open a");
            let b = SqliteStore::open(&path).expect("open b");
            for t in 0..50 {
                for s in [&a, &b] {
                    let r = reservation(s.admit("srv", &check, t).expect("admit"));
                    assert!(seen.insert(r.id), "id {} issued twice", r.id);
                }
            }
        }
        let s = SqliteStore::open(&path).expect("reopen");
        let first = reservation(s.admit("srv", &check, 60).expect("admit"));
        assert!(seen.insert(first.id), "id {} issued twice", first.id);
        // Far later: the old row is pruned, but its id is not handed out again.
        let later = reservation(s.admit("srv", &check, 10_000).expect("admit"));
        assert!(later.id > first.id);
        s.settle("srv", first, "r", 5)
            .expect("settling a pruned reservation is a no-op");
    }

    /// WAL frames (pages) the admissions of `checks` for `servers` servers
    /// commit, per admission, once warmed up: `rounds` rounds over the
    /// servers, 60 ms apart (the decide bench's pattern at a smaller scale).
    fn wal_frames_per_admission(
        name: &str,
        servers: usize,
        rounds: usize,
        checks: &[LimitCheck],
    ) -> f64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        let s = SqliteStore::open(&path).expect("open");
        let mut now: Millis = 0;
        let mut round = |s: &SqliteStore| {
            for server in 0..servers {
                now += 60;
                let admission = s.admit(&format!("server-{server:04}"), checks, now);
                assert!(admitted(&admission.expect("admit")));
            }
        };
        for _ in 0..10 {
            round(&s);
        }
        let before = wal_frames(&path);
        for _ in 0..rounds {
            round(&s);
        }
        (wal_frames(&path) - before) as f64 / (rounds * servers) as f64
    }

    /// The layout's point: a counter's running total sits on the page where
    /// its new spend rows go, and no reservation index is written, so an
    /// admission commits one WAL frame per place it changes (each counter's
    /// newest end, and the oldest end of a window that slides), and one in all
    /// when a server's rows share a page. Version 1 also wrote a
    /// `reservations` page and a `counters` page every time.
    #[test]
    fn sqlite_admission_writes_one_page_per_counter_range() {
        let checks = [
            rolling("rate", 1, 1_000_000, 60_000),
            fixed("budget:requests:hour", 1, 1_000_000, 0, 3_600_000),
        ];
        // 100 servers, a few dozen rows each: mostly one page per admission
        // (two when a page boundary falls between the two counters' ends).
        // Schema 3 keeps a rolling window's rows for one more window length
        // (clock steps back), so the rate's range is twice as long and a
        // boundary falls between the ends more often: 1.49 → 1.68.
        let small = wal_frames_per_admission("small.db", 100, 40, &checks);
        assert!(small <= 1.8, "{small:.2} WAL frames per admission");
        // One server whose counters span pages: the budget's newest end, and
        // the rate's newest and oldest ends (a row leaves its window each time).
        let busy = wal_frames_per_admission("busy.db", 1, 3_000, &checks);
        assert!(busy <= 3.0, "{busy:.2} WAL frames per admission");
        eprintln!("WAL frames per admission: {small:.2} (100 servers), {busy:.2} (1 server)");
    }

    /// With `background_checkpoint` (the default) the WAL is copied into the
    /// main file by the store's own thread, every 4,096 commits, long before
    /// SQLite's automatic checkpoint (10,000 pages) would run in a commit;
    /// without it, nothing is copied yet at that point.
    #[test]
    fn sqlite_checkpoints_on_its_own_thread() {
        use mcpolicy_runtime::store::SqliteOptions;
        for background in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("ckpt.db");
            let options = SqliteOptions {
                background_checkpoint: background,
                ..SqliteOptions::default()
            };
            let s = SqliteStore::open_with(&path, &options).expect("open");
            let size = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let before = size();
            // One counter of one server: about one WAL page per admission.
            let checks = [fixed("budget:requests:day", 1, u64::MAX, 0, DAY as Millis)];
            for t in 0..8_200 {
                s.admit("srv", &checks, t).expect("admit");
            }
            let frames = wal_frames(&path);
            assert!(
                frames < 10_000,
                "the test needs a WAL below SQLite's own threshold, got {frames} frames"
            );
            // The thread copies in its own time: give it up to 10 s.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while background && size() == before && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(
                size() > before,
                background,
                "main file {before} -> {} bytes, background_checkpoint {background}",
                size()
            );
            // Every admission counted, checkpointed or not.
            let last = [fixed("budget:requests:day", 1, 8_200, 0, DAY as Millis)];
            assert!(!admitted(&s.admit("srv", &last, 9_000).expect("admit")));
        }
    }

    /// A version 1 file (running totals in `counters`, one `reservations`
    /// row per admission), as the previous release wrote it.
    const SCHEMA_V1: &str = "
        CREATE TABLE decisions (
            server_id TEXT NOT NULL, identity TEXT NOT NULL, verdict TEXT NOT NULL,
            reason TEXT NOT NULL, digest TEXT NOT NULL, expires_at INTEGER, data TEXT,
            represented INTEGER NOT NULL DEFAULT 0, decided_at INTEGER NOT NULL,
            PRIMARY KEY (server_id, identity)
        ) WITHOUT ROWID;
        CREATE TABLE reservations (
            id INTEGER PRIMARY KEY, server_id TEXT NOT NULL, at INTEGER NOT NULL
        );
        CREATE TABLE spend (
            server_id TEXT NOT NULL, counter TEXT NOT NULL, at INTEGER NOT NULL,
            reservation INTEGER NOT NULL, amount INTEGER NOT NULL,
            PRIMARY KEY (server_id, counter, at, reservation)
        ) WITHOUT ROWID;
        CREATE TABLE counters (
            server_id TEXT NOT NULL, counter TEXT NOT NULL, total INTEGER NOT NULL,
            PRIMARY KEY (server_id, counter)
        ) WITHOUT ROWID;
        PRAGMA application_id = 1835233391;
        PRAGMA user_version = 1;
    ";

    #[test]
    fn sqlite_migrates_a_version_1_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v1.db");
        {
            let conn = rusqlite::Connection::open(&path).expect("sqlite");
            conn.execute_batch(SCHEMA_V1).expect("v1 schema");
            conn.execute_batch(&format!(
                "INSERT INTO decisions VALUES ('srv', '{}', 'deny', 'r', 'd', NULL, '{{}}', 2, 5);
                 INSERT INTO reservations (id, server_id, at) VALUES (7, 'srv', 100), (8, 'srv', 200);
                 INSERT INTO spend VALUES
                     ('srv', 'budget:tokens:day', 100, 7, 300), ('srv', 'budget:tokens:day', 200, 8, 400),
                     ('srv', 'rate', 100, 7, 1), ('srv', 'rate', 200, 8, 1);
                 INSERT INTO counters VALUES ('srv', 'budget:tokens:day', 700), ('srv', 'rate', 2);
                 PRAGMA user_version = 1;",
                key("srv", 1).identity
            ))
            .expect("v1 rows");
        }
        let s = SqliteStore::open(&path).expect("open migrates");
        let conn = rusqlite::Connection::open(&path).expect("sqlite");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .expect("user_version");
        assert_eq!(version, SCHEMA_VERSION);
        let old_tables: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('counters', 'reservations')",
                [],
                |row| row.get(0),
            )
            .expect("tables");
        assert_eq!(old_tables, 0);
        // The stored decision and both counts carried over.
        let d = s.get(&key("srv", 1)).expect("get").expect("present");
        assert_eq!((d.represented, d.data.as_deref()), (2, Some("{}")));
        let budget = |amount| [fixed("budget:tokens:day", amount, 1_000, 0, DAY as Millis)];
        assert!(!admitted(
            &s.admit("srv", &budget(301), 300).expect("admit")
        ));
        let r = reservation(s.admit("srv", &budget(300), 300).expect("admit"));
        assert!(r.id > 8, "new ids start past version 1's");
        let rate = [rolling("rate", 1, 3, 1_000)];
        assert!(admitted(&s.admit("srv", &rate, 300).expect("admit")));
        assert!(!admitted(&s.admit("srv", &rate, 300).expect("admit")));
        // Version 1 rows still leave their windows: at 1,150 the row of 100 has.
        assert!(admitted(&s.admit("srv", &rate, 1_150).expect("admit")));
        // Settling lowers the new reservation's spend: 700 + 100 of 1,000 spent.
        s.settle("srv", r, "budget:tokens:day", 100)
            .expect("settle");
        assert!(admitted(&s.admit("srv", &budget(200), 400).expect("admit")));
        assert!(!admitted(&s.admit("srv", &budget(1), 400).expect("admit")));
        drop(s);
        // Opening a migrated store again changes nothing.
        let s = SqliteStore::open(&path).expect("reopen");
        assert!(!admitted(&s.admit("srv", &budget(1), 500).expect("admit")));
    }

    /// A version 2 file, as the release before the bound and the clock-step
    /// rule wrote it.
    const SCHEMA_V2: &str = "
        CREATE TABLE decisions (
            server_id TEXT NOT NULL, identity TEXT NOT NULL, verdict TEXT NOT NULL,
            reason TEXT NOT NULL, digest TEXT NOT NULL, expires_at INTEGER, data TEXT,
            represented INTEGER NOT NULL DEFAULT 0, decided_at INTEGER NOT NULL,
            PRIMARY KEY (server_id, identity)
        ) WITHOUT ROWID;
        CREATE TABLE spend (
            server_id TEXT NOT NULL, counter TEXT NOT NULL, at INTEGER NOT NULL,
            reservation INTEGER NOT NULL, amount INTEGER NOT NULL,
            PRIMARY KEY (server_id, counter, at, reservation)
        ) WITHOUT ROWID;
        CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        INSERT INTO meta VALUES ('epoch', 3);
        PRAGMA application_id = 1835233391;
        PRAGMA user_version = 2;
    ";

    #[test]
    fn sqlite_migrates_a_version_2_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v2.db");
        {
            let conn = rusqlite::Connection::open(&path).expect("sqlite");
            conn.execute_batch(SCHEMA_V2).expect("v2 schema");
            conn.execute_batch(&format!(
                "INSERT INTO decisions VALUES
                     ('srv', '{}', 'deny', 'policy.sampling_disabled', 'd', NULL, '{{}}', 4, 5),
                     ('srv', '{}', 'deny', 'user.denied', 'd', NULL, '{{}}', 1, 6);
                 INSERT INTO spend VALUES
                     ('srv', 'budget:tokens:day', 100, 7, 300), ('srv', 'budget:tokens:day', 200, 8, 400),
                     ('srv', 'budget:tokens:day', 9223372036854775807, 0, 700);",
                key("srv", 1).identity,
                key("srv", 2).identity
            ))
            .expect("v2 rows");
        }
        let s = SqliteStore::open(&path).expect("open migrates");
        let conn = rusqlite::Connection::open(&path).expect("sqlite");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .expect("user_version");
        assert_eq!(version, SCHEMA_VERSION);
        let static_denial = s.get(&key("srv", 1)).expect("get").expect("present");
        assert!(static_denial.recomputable);
        assert_eq!(static_denial.represented, 4);
        let user = s.get(&key("srv", 2)).expect("get").expect("present");
        assert!(!user.recomputable);
        assert_eq!(
            s.server_stats("srv").expect("stats"),
            ServerStats {
                stored: 2,
                evicted: 0,
                evicted_represented: 0
            }
        );
        // The day's 700 tokens still count.
        let budget = |amount| [fixed("budget:tokens:day", amount, 1_000, 0, DAY as Millis)];
        assert!(!admitted(
            &s.admit("srv", &budget(301), 300).expect("admit")
        ));
        assert!(admitted(&s.admit("srv", &budget(300), 300).expect("admit")));
        drop(s);
        let s = SqliteStore::open(&path).expect("reopen");
        assert!(!admitted(&s.admit("srv", &budget(1), 400).expect("admit")));
    }

    /// A re-presented denial changes only its count, so it takes no write
    /// transaction (`docs/spec/store.md`, "Durability"): answered while
    /// another connection holds the write lock (before, each replay waited
    /// out the busy timeout and failed), counted exactly by this open, and
    /// written by the next write, by close, or after 256 hits.
    #[test]
    fn sqlite_replay_hit_takes_no_write_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.db");
        let options = mcpolicy_runtime::store::SqliteOptions {
            busy_timeout: std::time::Duration::from_millis(50),
            ..Default::default()
        };
        {
            let s = SqliteStore::open_with(&path, &options).expect("open");
            s.record(&key("srv", 1), &deny("d", None, DATA))
                .expect("record");
            let other = rusqlite::Connection::open(&path).expect("second connection");
            other.execute_batch("BEGIN IMMEDIATE").expect("write lock");
            for n in 1..=3 {
                let hit = s
                    .replay(&key("srv", 1), "d", 10)
                    .expect("replay under a held lock");
                assert_eq!(hit.map(|d| d.represented), Some(n));
            }
            assert_eq!(
                s.get(&key("srv", 1)).expect("get").map(|d| d.represented),
                Some(3)
            );
            // Writes still wait for the lock, and fail closed past the timeout.
            assert!(s.record(&key("srv", 2), &deny("d", None, DATA)).is_err());
            other.execute_batch("COMMIT").expect("release");
            // The next write adds the counts; the failed one kept them.
            s.record(&key("srv", 2), &deny("d", None, DATA))
                .expect("record");
            let written: i64 = other
                .query_row(
                    "SELECT represented FROM decisions WHERE identity = ?1",
                    [key("srv", 1).identity],
                    |row| row.get(0),
                )
                .expect("read");
            assert_eq!(written, 3);
            // 300 more hits: written after the 256th without any other write.
            for _ in 0..300 {
                s.replay(&key("srv", 1), "d", 10).expect("replay");
            }
            let written: i64 = other
                .query_row(
                    "SELECT represented FROM decisions WHERE identity = ?1",
                    [key("srv", 1).identity],
                    |row| row.get(0),
                )
                .expect("read");
            assert_eq!(written, 3 + 256);
            // `flush` writes the other 47 now, with the store still open
            // (what the proxy does at the end of its session).
            s.flush().expect("flush");
            let written: i64 = other
                .query_row(
                    "SELECT represented FROM decisions WHERE identity = ?1",
                    [key("srv", 1).identity],
                    |row| row.get(0),
                )
                .expect("read");
            assert_eq!(written, 303);
            s.replay(&key("srv", 1), "d", 10).expect("replay");
        }
        // Closing writes the rest.
        let s = SqliteStore::open(&path).expect("reopen");
        assert_eq!(
            s.get(&key("srv", 1)).expect("get").map(|d| d.represented),
            Some(304)
        );
    }

    /// Environment variable selecting the child role of this binary.
    const CHILD_ENV: &str = "MCPOLICY_STORE_CHILD";

    /// Not a test by itself: the body of the child processes spawned below.
    #[test]
    fn child_process() {
        let Ok(spec) = std::env::var(CHILD_ENV) else {
            return;
        };
        let mut parts = spec.splitn(3, '|');
        let (Some(role), Some(arg), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("bad {CHILD_ENV}: {spec}");
        };
        let store = SqliteStore::open(path).expect("child open");
        let mut out = std::io::stdout().lock();
        // libtest has printed "test … ... " without a newline; start our lines clean.
        writeln!(out).expect("stdout");
        match role {
            // Record and admit until killed, acknowledging each on stdout once it returned.
            "writer" => {
                for n in 0u64.. {
                    let k = key("crash", n);
                    store.record(&k, &deny("d", None, DATA)).expect("record");
                    writeln!(out, "ACK-RECORD {}", k.identity).expect("stdout");
                    let budget = [fixed("budget", 1, u64::MAX / 2, 0, Millis::MAX)];
                    let admission = store.admit("crash", &budget, 1).expect("admit");
                    assert!(admitted(&admission));
                    writeln!(out, "ACK-ADMIT {n}").expect("stdout");
                    out.flush().expect("flush");
                }
            }
            // Try `arg` admissions against a shared limit of 500; report how many got in.
            "admitter" => {
                let tries: u64 = arg.parse().expect("count");
                let mut got = 0;
                for i in 0..tries {
                    let checks = [fixed("budget", 1, 500, 0, DAY as Millis)];
                    if admitted(&store.admit("multi", &checks, i as Millis).expect("admit")) {
                        got += 1;
                    }
                }
                writeln!(out, "ADMITTED {got}").expect("stdout");
            }
            other => panic!("unknown child role {other}"),
        }
    }

    fn child(role: &str, arg: &str, path: &Path) -> Command {
        let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
        cmd.args([
            "sqlite_only::child_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{role}|{arg}|{}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        cmd
    }

    #[test]
    fn sqlite_kill_9_loses_no_acknowledged_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("crash.db");
        // Create the schema first so the child's first write is a decision.
        drop(SqliteStore::open(&path).expect("create"));
        let mut proc = child("writer", "-", &path).spawn().expect("spawn child");
        let stdout = proc.stdout.take().expect("child stdout");
        let mut recorded: Vec<String> = Vec::new();
        let mut admits: u64 = 0;
        let mut lines = BufReader::new(stdout).lines();
        while recorded.len() < 3_000 {
            let line = match lines.next() {
                Some(line) => line.expect("read child"),
                None => panic!("child exited early after {} acks", recorded.len()),
            };
            if let Some(identity) = line.strip_prefix("ACK-RECORD ") {
                recorded.push(identity.to_owned());
            } else if line.starts_with("ACK-ADMIT ") {
                admits += 1;
            }
        }
        // SIGKILL on Unix: no destructor, no checkpoint, mid-transaction if it can be.
        proc.kill().expect("kill");
        let status = proc.wait().expect("wait");
        assert!(
            !status.success(),
            "child must have been killed, got {status:?}"
        );
        // Anything the child printed after we stopped reading was acknowledged too.
        for line in lines {
            let Ok(line) = line else { break };
            if let Some(identity) = line.strip_prefix("ACK-RECORD ") {
                recorded.push(identity.to_owned());
            } else if line.starts_with("ACK-ADMIT ") {
                admits += 1;
            }
        }

        let store = SqliteStore::open(&path).expect("store opens cleanly after kill -9");
        for identity in &recorded {
            let k = DecisionKey::new("crash", identity.clone());
            let found = store.get(&k).expect("get").unwrap_or_else(|| {
                panic!(
                    "acknowledged decision {identity} lost ({} acked)",
                    recorded.len()
                )
            });
            assert_eq!(found.data.as_deref(), Some(DATA));
        }
        // Every acknowledged admission is counted; at most one more was committed unprinted.
        let probe = |limit| [fixed("budget", 1, limit, 0, Millis::MAX)];
        assert!(!admitted(
            &store.admit("crash", &probe(admits), 2).expect("admit")
        ));
        assert!(admitted(
            &store.admit("crash", &probe(admits + 2), 2).expect("admit")
        ));
    }

    #[test]
    fn sqlite_processes_share_a_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("multi.db");
        drop(SqliteStore::open(&path).expect("create"));
        let children: Vec<_> = (0..4)
            .map(|_| child("admitter", "300", &path).spawn().expect("spawn"))
            .collect();
        let mut total = 0u64;
        for proc in children {
            let output = proc.wait_with_output().expect("child");
            assert!(output.status.success(), "child failed: {:?}", output.status);
            let text = String::from_utf8_lossy(&output.stdout);
            let got: u64 = text
                .lines()
                .find_map(|l| l.split_once("ADMITTED ").map(|(_, n)| n))
                .expect("child report")
                .trim()
                .parse()
                .expect("number");
            total += got;
        }
        assert_eq!(total, 500);
    }

    fn open_err(path: &Path) -> StoreError {
        match SqliteStore::open(path) {
            Ok(_) => panic!("{} opened, expected an error", path.display()),
            Err(error) => error,
        }
    }

    fn assert_names_path(error: &StoreError, path: &Path) {
        let text = error.to_string();
        assert!(
            text.contains(&path.display().to_string()),
            "message does not name {}: {text}",
            path.display()
        );
    }

    #[test]
    fn sqlite_refuses_garbage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("garbage.db");
        let bytes: Vec<u8> = (0..8192u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&path, bytes).expect("write");
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert_names_path(&error, &path);
        // A short text file too.
        std::fs::write(&path, "not a database\n").expect("write");
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    }

    #[test]
    fn sqlite_refuses_truncated_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("trunc.db");
        {
            let s = SqliteStore::open(&path).expect("open");
            for n in 0..2_000 {
                s.record(&key("srv", n), &deny("d", None, DATA))
                    .expect("record");
            }
        }
        // Fold the WAL into the main file, then cut the file in half.
        checkpoint(&path);
        let len = std::fs::metadata(&path).expect("meta").len();
        assert!(len > 40_000, "store unexpectedly small: {len}");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_len(len / 2).expect("truncate");
        drop(file);
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert_names_path(&error, &path);
    }

    /// A store with one day's budget of 1 spent, and what its write-ahead
    /// log held while it was open (before the clean close folded it into the
    /// main file): (main file bytes, log bytes).
    fn spent_store_and_its_wal(path: &Path) -> (Vec<u8>, Vec<u8>) {
        let options = mcpolicy_runtime::store::SqliteOptions {
            background_checkpoint: false,
            ..Default::default()
        };
        let s = SqliteStore::open_with(path, &options).expect("open");
        for n in 0..50 {
            s.record(&key("srv", n), &deny("d", None, DATA))
                .expect("record");
        }
        assert!(admitted(
            &s.admit("srv", &day_budget(1), 10).expect("admit")
        ));
        assert!(!admitted(
            &s.admit("srv", &day_budget(1), 11).expect("admit")
        ));
        let wal = std::fs::read(wal_of(path)).expect("read the live WAL");
        assert!(wal.len() > 32, "the WAL holds frames");
        drop(s);
        (std::fs::read(path).expect("read main"), wal)
    }

    fn day_budget(limit: u64) -> [LimitCheck; 1] {
        [fixed("budget:requests:day", 1, limit, 0, DAY as Millis)]
    }

    /// `docs/spec/store.md`, "Durability": a main file emptied under a running process, with
    /// its non-empty WAL beside it, used to open as a new store (SQLite
    /// deletes the WAL of an empty database) and admit past the budget.
    #[test]
    fn sqlite_refuses_an_emptied_store_with_a_wal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("emptied.db");
        let (_, wal) = spent_store_and_its_wal(&path);
        std::fs::write(&path, b"").expect("empty the main file");
        std::fs::write(wal_of(&path), &wal).expect("put the WAL back");
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert!(error.to_string().contains("emptied"), "{error}");
        assert_names_path(&error, &path);
        // Nothing was touched: the WAL is still there for a rescue.
        assert_eq!(std::fs::read(wal_of(&path)).expect("wal"), wal);
    }

    /// The main file deleted while in use, its WAL left behind.
    #[test]
    fn sqlite_refuses_a_wal_without_its_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("deleted.db");
        let (_, wal) = spent_store_and_its_wal(&path);
        std::fs::remove_file(&path).expect("delete the main file");
        std::fs::write(wal_of(&path), &wal).expect("put the WAL back");
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert!(error.to_string().contains("missing"), "{error}");
        assert!(!path.exists(), "no new store was created");
    }

    /// A header cut short, and a header whose page size is damaged.
    #[test]
    fn sqlite_refuses_a_truncated_or_damaged_header() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("header.db");
        let (main, _) = spent_store_and_its_wal(&path);
        for cut in [1, 16, 50, 99] {
            std::fs::write(&path, &main[..cut]).expect("write");
            let error = open_err(&path);
            assert!(
                matches!(error, StoreError::Corrupt { .. }),
                "{cut}: {error:?}"
            );
            assert_names_path(&error, &path);
        }
        let mut damaged = main.clone();
        damaged[16..18].copy_from_slice(&3000u16.to_be_bytes());
        std::fs::write(&path, &damaged).expect("write");
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        // Cut to its first page: the header still counts every page.
        std::fs::write(&path, &main[..4096]).expect("write");
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert!(error.to_string().contains("truncated"), "{error}");
    }

    /// Truncated while a WAL is beside it (the open cannot compare sizes:
    /// the WAL may hold the missing pages): whatever the open says, no
    /// operation ever admits past the budget; a missing page is `Corrupt`.
    #[test]
    fn sqlite_truncated_with_a_wal_never_admits_past_its_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cut.db");
        let (main, wal) = spent_store_and_its_wal(&path);
        for keep in [4096, main.len() / 2] {
            std::fs::write(&path, &main[..keep]).expect("cut the main file");
            std::fs::write(wal_of(&path), &wal).expect("put the WAL back");
            let Ok(s) = SqliteStore::open(&path) else {
                continue; // refused at open: fine
            };
            match s.admit("srv", &day_budget(1), 12) {
                Ok(admission) => assert!(!admitted(&admission), "admitted past the budget"),
                Err(error) => assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}"),
            }
            drop(s);
            let _ = std::fs::remove_file(wal_of(&path));
            let _ = std::fs::remove_file(sidecar(&path, "-shm"));
        }
    }

    fn sidecar(path: &Path, suffix: &str) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    /// `docs/spec/store.md`, "Durability": an open reads the header, the schema and the
    /// `meta` row, not every page; `verify` (or `verify_on_open`) is the
    /// full check, and finds a damaged page the open does not read.
    #[test]
    fn sqlite_verify_finds_a_damaged_page_that_open_does_not_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("page.db");
        {
            let s = SqliteStore::open(&path).expect("open");
            for n in 0..2_000 {
                s.record(&key("srv", n), &deny("d", None, DATA))
                    .expect("record");
            }
        }
        checkpoint(&path);
        // Scribble over the middle of a page in the middle of the file.
        let mut bytes = std::fs::read(&path).expect("read");
        let page = bytes.len() / 4096 / 2;
        for b in &mut bytes[page * 4096..page * 4096 + 4096] {
            *b = 0x5a;
        }
        std::fs::write(&path, &bytes).expect("write");
        let s = SqliteStore::open(&path).expect("open reads only what it needs");
        let error = s.verify().expect_err("verify reads every page");
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        drop(s);
        let options = mcpolicy_runtime::store::SqliteOptions {
            verify_on_open: true,
            ..Default::default()
        };
        let error = SqliteStore::open_with(&path, &options).expect_err("verify_on_open");
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        // An operation reading the page fails closed; none reads a wrong answer.
        let s = SqliteStore::open(&path).expect("open");
        let mut failed = false;
        for n in 0..2_000 {
            match s.get(&key("srv", n)) {
                Ok(found) => assert_eq!(found.map(|d| d.data), Some(Some(DATA.into()))),
                Err(error) => {
                    assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
                    failed = true;
                }
            }
        }
        assert!(failed, "no read met the damaged page");
    }

    /// A store whose schema lost a table (edited by hand, or damaged).
    #[test]
    fn sqlite_refuses_a_store_missing_a_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("table.db");
        drop(SqliteStore::open(&path).expect("open"));
        let conn = rusqlite::Connection::open(&path).expect("sqlite");
        conn.execute_batch("DROP TABLE spend").expect("drop");
        drop(conn);
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert!(error.to_string().contains("spend"), "{error}");
    }

    #[test]
    fn sqlite_refuses_a_store_without_its_epoch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("epoch.db");
        drop(SqliteStore::open(&path).expect("open"));
        let conn = rusqlite::Connection::open(&path).expect("sqlite");
        conn.execute("DELETE FROM meta", []).expect("delete epoch");
        drop(conn);
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
        assert!(error.to_string().contains("epoch"), "{error}");
        assert_names_path(&error, &path);
    }

    /// Opens and drops the store: the last connection to close checkpoints the
    /// WAL into the main file and deletes it.
    fn checkpoint(path: &Path) {
        drop(SqliteStore::open(path).expect("open"));
        assert!(!wal_of(path).exists(), "WAL left after a clean close");
    }

    /// Frames (pages) in the store's WAL file: a 32-byte header, then a
    /// 24-byte frame header before each 4 KiB page.
    fn wal_frames(path: &Path) -> u64 {
        let len = std::fs::metadata(wal_of(path))
            .map(|m| m.len())
            .unwrap_or(0);
        len.saturating_sub(32) / (24 + 4096)
    }

    fn wal_of(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push("-wal");
        PathBuf::from(name)
    }

    #[test]
    fn sqlite_refuses_a_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a-directory");
        std::fs::create_dir(&path).expect("mkdir");
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Io { .. }), "{error:?}");
        assert!(error.to_string().contains("directory"), "{error}");
        assert_names_path(&error, &path);
    }

    #[test]
    fn sqlite_refuses_an_unreachable_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "x").expect("write");
        let path = file.join("store.db"); // a file's child: not a directory
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Io { .. }), "{error:?}");
        assert_names_path(&error, &path);
    }

    #[cfg(unix)]
    #[test]
    fn sqlite_refuses_an_unreadable_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("locked.db");
        drop(SqliteStore::open(&path).expect("create"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        if std::fs::File::open(&path).is_ok() {
            // Running as root: permissions do not apply, nothing to test.
            eprintln!("skipped: file permissions are not enforced for this user");
            return;
        }
        let error = open_err(&path);
        assert!(matches!(error, StoreError::Io { .. }), "{error:?}");
        assert_names_path(&error, &path);
    }

    #[test]
    fn sqlite_refuses_a_foreign_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("foreign.db");
        {
            let conn = rusqlite::Connection::open(&path).expect("sqlite");
            conn.execute_batch(
                "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');",
            )
            .expect("foreign schema");
        }
        let before = std::fs::read(&path).expect("read");
        let error = open_err(&path);
        assert!(
            matches!(error, StoreError::ForeignSchema { .. }),
            "{error:?}"
        );
        assert_names_path(&error, &path);
        assert_eq!(
            std::fs::read(&path).expect("read"),
            before,
            "foreign file was modified"
        );
    }

    #[test]
    fn sqlite_refuses_a_newer_schema() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("newer.db");
        drop(SqliteStore::open(&path).expect("create"));
        // Bump user_version (header offset 60, big-endian) as a future release would.
        patch_header(&path, 60, (SCHEMA_VERSION + 1) as u32);
        let error = open_err(&path);
        match &error {
            StoreError::SchemaTooNew {
                found, supported, ..
            } => {
                assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
        assert_names_path(&error, &path);
        assert!(error.to_string().contains("newer"), "{error}");
    }

    #[test]
    fn sqlite_opens_an_empty_file_as_new() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.db");
        std::fs::write(&path, b"").expect("write");
        let s = SqliteStore::open(&path).expect("an empty file is a new store");
        s.record(&key("srv", 1), &allow("d")).expect("record");
        assert!(s.get(&key("srv", 1)).expect("get").is_some());
    }

    /// Overwrites a big-endian u32 in the database header (after a clean close,
    /// so there is no WAL to disagree with).
    fn patch_header(path: &Path, offset: u64, value: u32) {
        use std::io::{Seek, SeekFrom};
        assert!(!wal_of(path).exists(), "WAL still present");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open");
        file.seek(SeekFrom::Start(offset)).expect("seek");
        file.write_all(&value.to_be_bytes()).expect("write");
    }
}
