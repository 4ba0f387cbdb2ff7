//! A fleet on one PostgreSQL store: real processes (this test binary run
//! again as a child, see [`child`]), each with its own threads and
//! connections, deciding through the real engine over a compiled policy.
//!
//! - 4 processes × 8 threads against `budget 100 requests per day`:
//!   exactly 100 admitted;
//! - the same with a rolling token budget, usage settled from every process;
//! - a process killed with -9 while it holds a transaction: nothing it
//!   acknowledged is lost, nothing is overspent, its locks are released;
//! - PostgreSQL restarted in the middle of a run (a cluster of the test's
//!   own): decisions fail closed with `runtime.store_unavailable` while it is
//!   down, resume after, and nothing is overspent;
//! - two policies with different digests in one database (a schema each) do
//!   not invalidate each other's decisions.
//!
//! The proxy-to-proxy replay is in `cli/tests/store_postgres.rs`.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_runtime::Policy;
use mcpolicy_runtime::clock::{FixedClock, timestamp};
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision, Engine};
use mcpolicy_runtime::store::{
    DecisionKey, DecisionStore, Evaluation, LimitCheck, LimitWindow, Millis, StoreAdmin,
    StoredDecision, Verdict,
};
use mcpolicy_store_postgres::{PostgresOptions, PostgresStore};

/// Processes and threads per process of the contention tests.
const PROCESSES: usize = 4;
const THREADS: usize = 8;

/// Every decision of these tests happens at this instant: one day window.
fn now() -> Millis {
    timestamp(2026, 3, 10, 12, 0, 0)
}

const REQUESTS_POLICY: &str = "mcpolicy 1
protocol 2025-11-25
identity messages

server \"fleet\" {
  consent never
  budget 100 requests per day
}
";

/// The restart test's budget: large enough that its paced clients are still
/// admitting when the database comes back, however slow the stop is.
const RESTART_POLICY: &str = "mcpolicy 1
protocol 2025-11-25
identity messages

server \"fleet\" {
  consent never
  budget 1000 requests per day
}
";

const TOKENS_POLICY: &str = "mcpolicy 1
protocol 2025-11-25
identity messages

server \"fleet\" {
  consent never
  budget 5000 tokens per 24h
}
";

/// Compiles `source` with the real compiler.
fn policy(source: &str) -> Policy {
    let db = Database::default();
    let text = SourceText::new(&db, "fleet.mcpolicy".to_owned(), source.to_owned());
    let table = db::lower_file(&db, text)
        .clone()
        .unwrap_or_else(|| panic!("the test policy compiles: {:?}", db::diagnostics(&db, text)));
    Policy::verify(table).expect("the table verifies")
}

/// A sampling request whose identity is `tag`'s.
fn request(tag: &str, max_tokens: u64) -> Vec<u8> {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": tag}}],
            "maxTokens": max_tokens,
        }
    })
    .to_string()
    .into_bytes()
}

/// What one decision came to.
enum Outcome {
    Allowed(Box<mcpolicy_runtime::engine::Grant>),
    Denied(String),
    Failed(String),
}

fn decide(engine: &Engine, tag: &str, max_tokens: u64) -> Outcome {
    match engine.decide(
        "fleet",
        &request(tag, max_tokens),
        &ClientContext::default(),
    ) {
        Answer::Decided {
            decision: Decision::Allow(grant) | Decision::Trim(grant),
            ..
        } => Outcome::Allowed(Box::new(grant)),
        Answer::Decided {
            decision: Decision::Deny(denial),
            ..
        } => Outcome::Denied(denial.reason().to_owned()),
        Answer::Failed { reply, .. } => Outcome::Failed(String::from_utf8_lossy(&reply).into()),
        Answer::Decided { .. } => panic!("consent never: no consent asked"),
        Answer::Invalid(rejection) => panic!("the test request is valid: {rejection:?}"),
    }
}

fn options(schema: &str, pool: usize) -> PostgresOptions {
    PostgresOptions {
        schema: schema.to_owned(),
        pool_size: pool,
        connect_timeout: Duration::from_secs(2),
        // Thirty-two connections queue on one counter's row lock: on a loaded
        // machine a call can wait longer than the default bound. These tests
        // hold exactness under contention; `tests/hang.rs` holds the bound.
        call_timeout: Duration::from_secs(120),
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    }
}

// ---------------------------------------------------------------------------
// The child side: `MCPOLICY_FLEET_CHILD` names its role.

/// Runs in a child process only (a no-op in the parent's test run).
#[test]
fn child() {
    let Ok(role) = std::env::var("MCPOLICY_FLEET_CHILD") else {
        return;
    };
    let spec = std::env::var("MCPOLICY_FLEET_SPEC").expect("spec");
    let schema = std::env::var("MCPOLICY_FLEET_SCHEMA").expect("schema");
    let process = std::env::var("MCPOLICY_FLEET_PROCESS").expect("process");
    match role.as_str() {
        "requests" => child_decide(&spec, &schema, &process, REQUESTS_POLICY, 40, 1, 1),
        "tokens" => child_decide(&spec, &schema, &process, TOKENS_POLICY, 40, 100, 40),
        "hold" => child_hold(&spec, &schema),
        other => panic!("unknown child role {other}"),
    }
}

/// 8 threads, each with a store (a connection) of its own, each deciding
/// `attempts` distinct requests reserving `max_tokens` and settling
/// `used`; prints `fleet: admitted N`.
fn child_decide(
    spec: &str,
    schema: &str,
    process: &str,
    source: &str,
    attempts: usize,
    max_tokens: u64,
    used: u64,
) {
    let policy = policy(source);
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (policy, admitted) = (policy.clone(), Arc::clone(&admitted));
            let (spec, schema, process) = (spec.to_owned(), schema.to_owned(), process.to_owned());
            std::thread::spawn(move || {
                let store = PostgresStore::open_with(&spec, &options(&schema, 1)).expect("open");
                let engine = Engine::new(policy, Arc::new(store), Arc::new(FixedClock(now())));
                for attempt in 0..attempts {
                    let tag = format!("p{process} t{thread} a{attempt}");
                    match decide(&engine, &tag, max_tokens) {
                        Outcome::Allowed(grant) => {
                            grant.complete(used).expect("settle");
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Denied(reason) => assert_eq!(reason, "policy.budget_exhausted"),
                        Outcome::Failed(reply) => panic!("store failed: {reply}"),
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    println!("fleet: admitted {}", admitted.load(Ordering::Relaxed));
}

/// Replays a stored allow in a transaction that holds its row while the
/// (slow) evaluation runs, admitting one request each time; prints `fleet:
/// ack` after every acknowledged admission, until killed.
fn child_hold(spec: &str, schema: &str) {
    let store = PostgresStore::open_with(spec, &options(schema, 1)).expect("open");
    let key = held_key();
    loop {
        let mut checks = Vec::new();
        let answer = store
            // The allow is probed as an approval: the refusal key answers
            // only with denials (`docs/spec/store.md`, "The atomic decision").
            .replay_or_admit(
                &key,
                Some(&key.identity),
                "d",
                now(),
                &mut checks,
                &mut |stored, out| {
                    assert!(stored.is_some(), "the allow is stored");
                    // Killed here, most of the time: mid-transaction, row locked.
                    std::thread::sleep(Duration::from_millis(3));
                    out.push(held_budget());
                    Evaluation::Admit
                },
            )
            .expect("replay_or_admit");
        match answer.admission {
            Some(mcpolicy_runtime::store::Admission::Admitted { .. }) => {
                println!("fleet: ack");
            }
            _ => println!("fleet: refused"),
        }
    }
}

fn held_key() -> DecisionKey {
    DecisionKey::new("fleet", "fleet:held")
}

/// `budget 60 requests per day`, as the engine would check it.
fn held_budget() -> LimitCheck {
    let day = 86_400_000;
    let start = now() - now().rem_euclid(day);
    LimitCheck {
        counter: "budget:requests:day".into(),
        amount: 1,
        limit: 60,
        window: LimitWindow::Fixed {
            start,
            end: start + day,
        },
    }
}

fn spawn(role: &str, spec: &str, schema: &str, process: usize) -> Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("MCPOLICY_FLEET_CHILD", role)
        .env("MCPOLICY_FLEET_SPEC", spec)
        .env("MCPOLICY_FLEET_SCHEMA", schema)
        .env("MCPOLICY_FLEET_PROCESS", process.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a child")
}

/// Waits for a child and returns its `fleet: admitted N`.
fn admitted_by(child: Child) -> u64 {
    let output = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "child failed: {text}");
    text.lines()
        // libtest may print `test child ... ` before it on the same line.
        .find_map(|line| line.split("fleet: admitted ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in the child's output: {text}"))
}

// ---------------------------------------------------------------------------
// The tests.

#[test]
fn four_processes_of_eight_threads_admit_exactly_the_budget() {
    let Some(spec) = support::spec() else { return };
    let schema = support::fresh_schema("fleet_requests");
    // Created once here, so the children only open it.
    let store = PostgresStore::open_with(&spec, &options(&schema, 1)).expect("open");
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| spawn("requests", &spec, &schema, p))
        .collect();
    let per_process: Vec<u64> = children.into_iter().map(admitted_by).collect();
    let total: u64 = per_process.iter().sum();
    eprintln!("admitted per process: {per_process:?}, total {total} of 1280 attempts");
    assert_eq!(total, 100, "{per_process:?}");
    assert_eq!(
        store
            .usage("fleet", &requests_per_day(100), now())
            .expect("usage")
            .spent,
        100
    );
}

/// The engine's counter for `budget LIMIT requests per day` at [`now`].
fn requests_per_day(limit: u64) -> LimitCheck {
    let day = 86_400_000;
    let start = now() - now().rem_euclid(day);
    LimitCheck {
        counter: "budget:requests:day".into(),
        amount: 1,
        limit,
        window: LimitWindow::Fixed {
            start,
            end: start + day,
        },
    }
}

#[test]
fn a_rolling_token_budget_holds_across_processes_with_settled_usage() {
    let Some(spec) = support::spec() else { return };
    let schema = support::fresh_schema("fleet_tokens");
    let store = PostgresStore::open_with(&spec, &options(&schema, 1)).expect("open");
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| spawn("tokens", &spec, &schema, p))
        .collect();
    let per_process: Vec<u64> = children.into_iter().map(admitted_by).collect();
    let total: u64 = per_process.iter().sum();
    // Each admission reserves 100 tokens and settles 40.
    let check = LimitCheck {
        counter: "budget:tokens:rolling:86400000".into(),
        amount: 100,
        limit: 5000,
        window: LimitWindow::Rolling { ms: 86_400_000 },
    };
    let usage = store.usage("fleet", &check, now()).expect("usage");
    eprintln!("admitted per process: {per_process:?}, total {total}; spent {usage:?}");
    // Every process's settlement is in the store: nothing reserved is left over.
    assert_eq!(usage.spent, 40 * total, "{per_process:?}");
    // Never more than the budget at any admission, and when one was refused
    // at most 31 others were in flight with their 100 tokens reserved.
    assert!(usage.spent <= 5000);
    assert!(usage.spent + 100 > 5000 - 31 * 60, "{usage:?}");
    assert!(per_process.iter().all(|&n| n > 0), "{per_process:?}");
}

#[test]
fn a_client_killed_mid_transaction_loses_nothing_acknowledged_and_overspends_nothing() {
    let Some(spec) = support::spec() else { return };
    let schema = support::fresh_schema("fleet_kill");
    let store = PostgresStore::open_with(&spec, &options(&schema, 2)).expect("open");
    store
        .record(
            &held_key(),
            &StoredDecision {
                verdict: Verdict::Allow,
                reason: "user.approved".into(),
                digest: "d".into(),
                expires_at: None,
                data: None,
                represented: 0,
                decided_at: now(),
                recomputable: false,
                statement: None,
            },
        )
        .expect("record");
    let mut acknowledged = 0u64;
    let mut killed = 0;
    // Three kills at different points of the run.
    for round in 0..3u64 {
        let mut child = spawn("hold", &spec, &schema, 0);
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        while seen < 8 + 3 * round {
            match lines.next() {
                Some(Ok(line)) if line.ends_with("fleet: ack") => {
                    seen += 1;
                    acknowledged += 1;
                }
                Some(Ok(_)) => {}
                _ => panic!("the child stopped early"),
            }
        }
        // SIGKILL while it sleeps in its transaction, holding the row.
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
        killed += 1;
        for line in lines.map_while(Result::ok) {
            if line.ends_with("fleet: ack") {
                acknowledged += 1;
            }
        }
    }
    // The held row is free again (the server rolled back the dead session's
    // transaction) and every acknowledged admission is counted; at most one
    // per kill committed without its acknowledgement reaching us.
    //
    // The replay comes first: it locks the held row, so it waits until the
    // dead session's transaction has ended on the server (a COMMIT the child
    // sent just before the kill can still land after the child is reaped);
    // the spend read after it then belongs to the same settled state.
    let started = Instant::now();
    let replayed = store
        .replay(&held_key(), "d", now())
        .expect("replay after the kills")
        .expect("still stored")
        .represented;
    let spent = store
        .usage("fleet", &held_budget(), now())
        .expect("usage")
        .spent;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the lock was held"
    );
    eprintln!(
        "killed {killed} times; acknowledged {acknowledged}, spent {spent}, represented {replayed}"
    );
    assert!(spent >= acknowledged, "an acknowledged admission was lost");
    assert!(
        spent <= acknowledged + killed,
        "{spent} > {acknowledged} + {killed}"
    );
    // The replay count moves with the admissions (one transaction each).
    assert_eq!(
        replayed - 1,
        spent,
        "replays and admissions are one transaction"
    );
    // Now spend the rest: the budget stops at exactly 60.
    let mut more = 0;
    loop {
        let mut checks = Vec::new();
        let answer = store
            .replay_or_admit(&held_key(), None, "d", now(), &mut checks, &mut |_, out| {
                out.push(held_budget());
                Evaluation::Admit
            })
            .expect("replay_or_admit");
        match answer.admission {
            Some(mcpolicy_runtime::store::Admission::Admitted { .. }) => more += 1,
            _ => break,
        }
    }
    assert_eq!(spent + more, 60);
    assert_eq!(
        store
            .usage("fleet", &held_budget(), now())
            .expect("usage")
            .spent,
        60
    );
}

#[test]
fn a_database_restart_fails_closed_then_resumes_without_overspending() {
    if support::spec().is_none() {
        return; // the same switch: CI has PostgreSQL installed
    }
    let cluster = support::OwnCluster::start("mcpolicy-pg-restart");
    let spec = cluster.spec();
    let schema = support::fresh_schema("fleet_restart");
    let store = Arc::new(PostgresStore::open_with(&spec, &options(&schema, 8)).expect("open"));
    let policy = policy(RESTART_POLICY);
    let (allowed, unavailable, after_restart) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let exhausted = Arc::new(AtomicU64::new(0));
    let restarted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let engine = Engine::new(
                policy.clone(),
                Arc::clone(&store) as Arc<dyn DecisionStore>,
                Arc::new(FixedClock(now())),
            );
            let exhausted = Arc::clone(&exhausted);
            let (allowed, unavailable, after_restart, restarted, stop) = (
                Arc::clone(&allowed),
                Arc::clone(&unavailable),
                Arc::clone(&after_restart),
                Arc::clone(&restarted),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut attempt = 0;
                while !stop.load(Ordering::Relaxed) {
                    attempt += 1;
                    match decide(&engine, &format!("t{thread} a{attempt}"), 1) {
                        Outcome::Allowed(_) => {
                            allowed.fetch_add(1, Ordering::Relaxed);
                            if restarted.load(Ordering::Relaxed) {
                                after_restart.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Outcome::Denied(reason) => {
                            assert_eq!(reason, "policy.budget_exhausted");
                            exhausted.fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Failed(reply) => {
                            assert!(reply.contains("runtime.store_unavailable"), "{reply}");
                            unavailable.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // Paced (at most 200 decisions/s in all), so the budget
                    // lasts across the restart.
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for("admissions", &|| allowed.load(Ordering::Relaxed) >= 20);
    cluster.ctl("stop");
    let before = unavailable.load(Ordering::Relaxed);
    wait_for("failures while down", &|| {
        unavailable.load(Ordering::Relaxed) >= before + 20
    });
    let allowed_while_down = allowed.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        allowed.load(Ordering::Relaxed),
        allowed_while_down,
        "admitted while the database was down"
    );
    cluster.ctl("start");
    restarted.store(true, Ordering::Relaxed);
    wait_for("admissions after the restart", &|| {
        after_restart.load(Ordering::Relaxed) >= 10
    });
    wait_for("the budget to run out", &|| {
        exhausted.load(Ordering::Relaxed) >= 4
    });
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("thread");
    }
    let spent = store
        .usage("fleet", &requests_per_day(1000), now())
        .expect("usage after the restart")
        .spent;
    eprintln!(
        "allowed {} ({} after the restart), {} failed closed while down, spent {spent}",
        allowed.load(Ordering::Relaxed),
        after_restart.load(Ordering::Relaxed),
        unavailable.load(Ordering::Relaxed)
    );
    // The budget is spent exactly. An admission whose commit raced the
    // shutdown may be counted without its answer reaching the engine (it
    // failed closed): at most one per thread, never one too many.
    assert_eq!(spent, 1000);
    let allowed = allowed.load(Ordering::Relaxed);
    assert!((996..=1000).contains(&allowed), "allowed {allowed}");
}

#[test]
fn two_policies_in_one_database_keep_each_others_decisions() {
    let Some(spec) = support::spec() else { return };
    // The same server under two policies whose blocks (digests) differ.
    let strict = policy(
        "mcpolicy 1\nprotocol 2025-11-25\nidentity messages\n\nserver \"fleet\" {\n  consent never\n  max_input 1 KiB\n}\n",
    );
    let open = policy(
        "mcpolicy 1\nprotocol 2025-11-25\nidentity messages\n\nserver \"fleet\" {\n  consent never\n  max_input 64 KiB\n}\n",
    );
    let (schema_a, schema_b) = (
        support::fresh_schema("fleet_policy_a"),
        support::fresh_schema("fleet_policy_b"),
    );
    let engine = |policy: &Policy, schema: &str| {
        let store = PostgresStore::open_with(&spec, &options(schema, 2)).expect("open");
        Engine::new(policy.clone(), Arc::new(store), Arc::new(FixedClock(now())))
    };
    let big = "x".repeat(4096);
    let strict_engine = engine(&strict, &schema_a);
    // Stored by the strict policy: a denial for the big request.
    assert!(
        matches!(decide(&strict_engine, &big, 1), Outcome::Denied(r) if r == "policy.input_too_large")
    );
    // The other policy, in the same database, decides for the same server
    // (and purges what is stale under its digest): its own schema only.
    let open_engine = engine(&open, &schema_b);
    assert!(matches!(decide(&open_engine, &big, 1), Outcome::Allowed(_)));
    assert!(matches!(
        decide(&open_engine, "small", 1),
        Outcome::Allowed(_)
    ));
    // A fresh process of the strict policy still replays its stored denial.
    let strict_again = engine(&strict, &schema_a);
    let admin = PostgresStore::open_with(&spec, &options(&schema_a, 1)).expect("open");
    let stored = admin
        .decisions(&Default::default())
        .expect("decisions")
        .into_iter()
        .next()
        .expect("the strict policy's denial is still stored");
    assert_eq!(stored.decision.represented, 0);
    match strict_again.decide("fleet", &request(&big, 1), &ClientContext::default()) {
        Answer::Decided {
            decision: Decision::Deny(denial),
            ..
        } => assert!(denial.replayed(), "answered from the store"),
        _ => panic!("the strict policy's denial is not replayed"),
    }
}

/// Two policies for one server id in one schema (two clients, or a policy
/// edited while an older session runs): the user's refusal under A
/// survives B's decisions and is replayed to A (`docs/spec/store.md`,
/// "Digests and staleness").
#[test]
fn two_policies_in_one_schema_keep_each_others_user_answers() {
    let Some(spec) = support::spec() else { return };
    let asking = policy(
        "mcpolicy 1\nprotocol 2025-11-25\nidentity messages\n\nserver \"fleet\" {\n  consent first\n}\n",
    );
    let limited = policy(
        "mcpolicy 1\nprotocol 2025-11-25\nidentity messages\n\nserver \"fleet\" {\n  consent first\n  max_input 1 KiB\n}\n",
    );
    let schema = support::fresh_schema("fleet_two_policies");
    let engine = |policy: &Policy| {
        let store = PostgresStore::open_with(&spec, &options(&schema, 2)).expect("open");
        Engine::new(policy.clone(), Arc::new(store), Arc::new(FixedClock(now())))
    };
    let ctx = ClientContext::default();
    let (a, b) = (engine(&asking), engine(&limited));
    let Answer::Decided {
        decision: Decision::NeedsConsent(pending),
        ..
    } = a.decide("fleet", &request("mail", 1), &ctx)
    else {
        panic!("A asks its user");
    };
    assert_eq!(
        pending.refuse().recorded().expect("store").reason(),
        "user.denied"
    );
    assert!(
        matches!(decide(&b, &"x".repeat(4096), 1), Outcome::Denied(r) if r == "policy.input_too_large")
    );
    let Answer::Decided {
        decision: Decision::NeedsConsent(pending),
        ..
    } = b.decide("fleet", &request("other", 1), &ctx)
    else {
        panic!("B asks its user");
    };
    pending.approve().expect("store");
    match engine(&asking).decide("fleet", &request("mail", 1), &ctx) {
        Answer::Decided {
            decision: Decision::Deny(denial),
            ..
        } => {
            assert_eq!(denial.reason(), "user.denied");
            assert!(denial.replayed(), "answered from the store");
        }
        _ => panic!("A asked its user again"),
    }
}

/// A fleet's admissions follow one clock, the database's: a node whose
/// clock is a day behind cannot spend a second daily budget, and a node in
/// the year 9999 cannot fill the rolling windows of the whole fleet; each
/// fails closed (`runtime.store_unavailable`) and records nothing, while a
/// node on time spends the budget exactly (`docs/spec/store.md`, "One
/// clock for a fleet").
#[test]
fn nodes_whose_clocks_are_off_fail_closed_and_the_budget_holds() {
    use mcpolicy_runtime::clock::{Clock, SystemClock};
    let Some(spec) = support::spec() else { return };
    let policy = policy(
        "mcpolicy 1\nprotocol 2025-11-25\nidentity messages\n\nserver \"fleet\" {\n  consent never\n  budget 40 requests per day\n  budget 100000 tokens per 24h\n}\n",
    );
    let schema = support::fresh_schema("fleet_skew");
    let node = |at: Millis| {
        let options = PostgresOptions {
            schema: schema.clone(),
            pool_size: 2,
            ..PostgresOptions::default()
        };
        let store = PostgresStore::open_with(&spec, &options).expect("open");
        Engine::new(policy.clone(), Arc::new(store), Arc::new(FixedClock(at)))
    };
    let on_time = SystemClock.now();
    let behind = node(on_time - 86_400_000);
    let far_ahead = node(timestamp(9999, 6, 1, 0, 0, 0));
    let correct = node(on_time);
    let refused = |engine: &Engine, tag: &str, tokens: u64, direction: &str| match engine.decide(
        "fleet",
        &request(tag, tokens),
        &ClientContext::default(),
    ) {
        Answer::Failed { reply, error } => {
            let reply = String::from_utf8_lossy(&reply);
            assert!(reply.contains("runtime.store_unavailable"), "{reply}");
            assert!(error.to_string().contains(direction), "{error}");
        }
        _ => panic!("a node {direction} the database's clock decided"),
    };
    for n in 0..40 {
        refused(&behind, &format!("behind {n}"), 1, "behind");
    }
    refused(&far_ahead, "year 9999", 99_999, "ahead of");
    let (mut allowed, mut exhausted) = (0, 0);
    for n in 0..41 {
        match decide(&correct, &format!("on time {n}"), 1) {
            Outcome::Allowed(_) => allowed += 1,
            Outcome::Denied(reason) => {
                assert_eq!(reason, "policy.budget_exhausted");
                exhausted += 1;
            }
            Outcome::Failed(reply) => panic!("the node on time failed: {reply}"),
        }
    }
    assert_eq!((allowed, exhausted), (40, 1));
}
