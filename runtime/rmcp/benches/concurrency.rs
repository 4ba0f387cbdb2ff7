//! 64 requests in flight through `PolicyClient::answer` (what rmcp's
//! `create_message` runs), on a tokio runtime with two workers: each store,
//! each `StoreCalls`. Reports throughput, the median and 99th-percentile
//! latency of a request, and how late another task's 1 ms timer fires
//! meanwhile (the cost a store call on an async worker puts on every other
//! task). The figures and the command are in `README.md`, "Store calls".
//!
//! `cargo bench -p mcpolicy-rmcp --bench concurrency` (one run, about 30 s).
//! `-- --quick` runs a tenth of the requests.
#![expect(deprecated, reason = "sampling/createMessage is what is timed")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_rmcp::testing::{FakeProvider, ScriptedConsent};
use mcpolicy_rmcp::{PolicyClient, StoreCalls};
use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, Evaluation, LimitCheck, MemoryStore, Millis,
    ReplayOrAdmit, Reservation, ServerStats, SqliteStore, StoreError, StoredDecision,
};
use mcpolicy_runtime::{Engine, Policy};
use rmcp::model::{CreateMessageRequestParams, SamplingMessage};

/// Requests in flight at once.
const IN_FLIGHT: usize = 64;

/// A token budget: every request is admitted (a write) and settled (another).
const POLICY: &str = r#"
mcpolicy 1
defaults {
  max_tokens 4096
  consent never
}
server "bench" {
  budget 1000000000 tokens per day
}
"#;

fn policy() -> Policy {
    let db = Database::default();
    let source = SourceText::new(&db, "bench.mcpolicy".into(), POLICY.into());
    let table = db::lower_file(&db, source)
        .clone()
        .expect("the policy compiles");
    Policy::from_json(table.to_json().as_bytes()).unwrap()
}

/// An SQLite store on a slow disk: `delay` more for every transaction that
/// writes (admission, settlement, a recorded decision).
#[derive(Debug)]
struct Slow {
    inner: SqliteStore,
    delay: Duration,
}

impl Slow {
    fn wait(&self) {
        std::thread::sleep(self.delay);
    }
}

impl DecisionStore for Slow {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        self.inner.replay(key, digest, now)
    }
    fn admit(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
    ) -> Result<Admission, StoreError> {
        self.wait();
        self.inner.admit(server_id, checks, now)
    }
    fn settle(
        &self,
        server_id: &str,
        reservation: Reservation,
        counter: &str,
        actual: u64,
    ) -> Result<(), StoreError> {
        self.wait();
        self.inner.settle(server_id, reservation, counter, actual)
    }
    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        self.wait();
        self.inner.record(key, decision)
    }
    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
        self.inner.get(key)
    }
    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        self.inner.purge_stale(server_id, digest, now)
    }
    fn server_stats(&self, server_id: &str) -> Result<ServerStats, StoreError> {
        self.inner.server_stats(server_id)
    }
    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }
    fn replay_or_admit(
        &self,
        key: &DecisionKey,
        approval: Option<&str>,
        digest: &str,
        now: Millis,
        checks: &mut Vec<LimitCheck>,
        evaluate: &mut dyn FnMut(Option<&StoredDecision>, &mut Vec<LimitCheck>) -> Evaluation,
    ) -> Result<ReplayOrAdmit, StoreError> {
        self.wait();
        self.inner
            .replay_or_admit(key, approval, digest, now, checks, evaluate)
    }
}

struct Figures {
    throughput: f64,
    median: Duration,
    p99: Duration,
    timer_median: Duration,
    timer_max: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a short list"
    )]
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at]
}

/// `per_task` requests from each of [`IN_FLIGHT`] tasks, all different,
/// while another task sleeps 1 ms at a time and records how late it wakes.
async fn run(client: PolicyClient<FakeProvider, ScriptedConsent>, per_task: usize) -> Figures {
    let done = Arc::new(AtomicBool::new(false));
    let ticker = tokio::spawn({
        let done = done.clone();
        async move {
            let mut late = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await;
                late.push(start.elapsed().saturating_sub(Duration::from_millis(1)));
            }
            late
        }
    });
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..IN_FLIGHT {
        let client = client.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(per_task);
            for i in 0..per_task {
                let params = CreateMessageRequestParams::new(
                    vec![SamplingMessage::user_text(format!("request {task}/{i}"))],
                    100,
                );
                // A request arrives from the transport: the task yields
                // between two, as a connection's reader does.
                tokio::task::yield_now().await;
                let start = Instant::now();
                let answer = client.answer(params, std::future::pending()).await;
                latencies.push(start.elapsed());
                assert!(answer.is_ok(), "{answer:?}");
            }
            latencies
        });
    }
    let mut latencies: Vec<Duration> = tasks.join_all().await.into_iter().flatten().collect();
    let wall = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let mut late = ticker.await.unwrap();
    latencies.sort();
    late.sort();
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let throughput = latencies.len() as f64 / wall.as_secs_f64();
    Figures {
        throughput,
        median: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        timer_median: percentile(&late, 0.5),
        timer_max: late.last().copied().unwrap_or_default(),
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let scale = |n: usize| if quick { n.div_ceil(10) } else { n };
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let policy = policy();
    let sqlite = |name: &str| SqliteStore::open(dir.path().join(name)).unwrap();
    let slow = |name: &str| Slow {
        inner: sqlite(name),
        delay: Duration::from_millis(2),
    };
    type Case = (&'static str, Arc<dyn DecisionStore>, StoreCalls, usize);
    let cases: Vec<Case> = vec![
        (
            "memory",
            Arc::new(MemoryStore::new()),
            StoreCalls::Inline,
            scale(400),
        ),
        (
            "memory",
            Arc::new(MemoryStore::new()),
            StoreCalls::Blocking,
            scale(400),
        ),
        (
            "SQLite",
            Arc::new(sqlite("a.sqlite3")),
            StoreCalls::Blocking,
            scale(40),
        ),
        (
            "SQLite",
            Arc::new(sqlite("b.sqlite3")),
            StoreCalls::Inline,
            scale(40),
        ),
        (
            "slow SQLite (+2 ms a write)",
            Arc::new(slow("c.sqlite3")),
            StoreCalls::Blocking,
            scale(10),
        ),
        (
            "slow SQLite (+2 ms a write)",
            Arc::new(slow("d.sqlite3")),
            StoreCalls::Inline,
            scale(10),
        ),
    ];
    println!(
        "| store | `StoreCalls` | requests | throughput (req/s) | latency median | latency p99 | 1 ms timer late, median | 1 ms timer late, max |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (store, decisions, calls, per_task) in cases {
        let engine = Engine::new(policy.clone(), decisions, Arc::new(SystemClock));
        let client = PolicyClient::new(
            engine,
            "bench",
            FakeProvider::new("ok", 50),
            ScriptedConsent::approve(),
        )
        .with_store_calls(calls);
        let figures = runtime.block_on(run(client, per_task));
        println!(
            "| {store} | `{calls:?}` | {} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
            per_task * IN_FLIGHT,
            figures.throughput,
            figures.median.as_secs_f64() * 1e3,
            figures.p99.as_secs_f64() * 1e3,
            figures.timer_median.as_secs_f64() * 1e3,
            figures.timer_max.as_secs_f64() * 1e3,
        );
    }
}
