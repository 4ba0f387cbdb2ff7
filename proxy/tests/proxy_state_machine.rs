//! The proxy's per-request state machine (`src/inflight.rs`, driven by
//! `src/session.rs` and its modules under `src/session/`) against a small reference model, over random
//! interleavings of:
//!
//! - server requests: sampling (plain or as a task), pings, `tasks/get` and
//!   `tasks/result` polls, all drawing ids from a small pool so ids are
//!   reused while in flight, and `notifications/cancelled`;
//! - client answers: approve, refuse (`-1`), another error, a task handle,
//!   task statuses, answers after a cancellation or a deadline, second
//!   answers, and never (requests left unanswered);
//! - clock steps (the store's clock forward and back, the monotonic clock
//!   forward) and proxy restarts (a new `Session` over the same SQLite file).
//!
//! Invariants checked after every step:
//!
//! 1. a refused identity is never forwarded again while its refusal is stored;
//! 2. no budget is overspent (`budget 4 requests per day`);
//! 3. every server request gets exactly one answer (none after the server
//!    cancelled it), and each answer is the one for that request (the
//!    client's answers carry the request's tag);
//! 4. every client answer reaches the request it belongs to or is dropped
//!    with a log line.
//!
//! A failure prints the seed and the minimal case (proptest shrinks it).
//! Fast by default (64 cases); long mode:
//! `PROPTEST_CASES=20000 cargo test -p mcpolicy-proxy --test proxy_state_machine`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::store::SqliteStore;
use mcpolicy_runtime::{Engine, Policy};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};

mod model;

use model::{How, Op, POLICY, START_MS, Shell, check, op, run, run_seeded};

use mcpolicy_proxy::capture::Captured as Buf;

fn policy() -> Policy {
    let db = Database::default();
    let source = SourceText::new(&db, "p.mcpolicy".into(), POLICY.into());
    Policy::verify(db::lower_file(&db, source).clone().unwrap()).unwrap()
}

/// The session itself, called directly: no pipes, a stepped store clock
/// and a stepped monotonic clock.
struct Core {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    mono: Arc<Mutex<Duration>>,
    base: Instant,
    session: Session,
    server: Buf,
    client: Buf,
    log: Buf,
    audit: Buf,
}

impl Core {
    fn new() -> Core {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(START_MS));
        let mono = Arc::new(Mutex::new(Duration::ZERO));
        let (server, client, log, audit) = (
            Buf::default(),
            Buf::default(),
            Buf::default(),
            Buf::default(),
        );
        let base = Instant::now();
        let session = Core::session(&dir, &clock, &mono, base, [&server, &client, &log, &audit]);
        Core {
            dir,
            clock,
            mono,
            base,
            session,
            server,
            client,
            log,
            audit,
        }
    }

    fn session(
        dir: &tempfile::TempDir,
        clock: &Arc<ManualClock>,
        mono: &Arc<Mutex<Duration>>,
        base: Instant,
        bufs: [&Buf; 4],
    ) -> Session {
        let store = SqliteStore::open(dir.path().join("store.db")).unwrap();
        let engine = Engine::new(policy(), Arc::new(store), clock.clone());
        let [server, client, log, audit] = bufs;
        let mono = mono.clone();
        Session::new(
            engine,
            "s",
            Box::new(server.clone()),
            Box::new(client.clone()),
            Log::to(Box::new(log.clone()), "s"),
            Some(Audit::to(Box::new(audit.clone()))),
        )
        .with_monotonic(move || base + *mono.lock().unwrap())
        .resumable()
    }
}

impl Shell for Core {
    fn carries(&self, _: &Op) -> bool {
        true
    }

    fn steps(&self) -> bool {
        true
    }

    fn server_says(&mut self, frame: &[u8]) {
        self.session.from_server(frame);
    }

    fn server_again(&mut self, frame: &[u8]) {
        self.session.from_server_again(frame);
    }

    fn client_says(&mut self, frame: &[u8]) {
        self.session.from_client(frame);
    }

    fn step(&mut self, ms: u32, back: bool) -> String {
        let trace = if back {
            let now = self.clock.now_ms();
            let to = (now - i64::from(ms)).max(START_MS);
            self.clock.set(to);
            format!("store clock back {} ms", now - to)
        } else {
            self.clock.advance(i64::from(ms));
            *self.mono.lock().unwrap() += Duration::from_millis(u64::from(ms));
            format!("clocks forward {ms} ms")
        };
        let now = self.base + *self.mono.lock().unwrap();
        self.session.expire(now);
        trace
    }

    fn end(&mut self) {
        self.session.close_unanswered();
    }

    fn restart(&mut self) {
        let bufs = [&self.server, &self.client, &self.log, &self.audit];
        self.session = Core::session(&self.dir, &self.clock, &self.mono, self.base, bufs);
    }

    fn take_server(&mut self) -> Vec<String> {
        self.server.take()
    }

    fn take_client(&mut self) -> Vec<String> {
        self.client.take()
    }

    fn take_log(&mut self) -> Vec<String> {
        self.log.take()
    }

    fn take_audit(&mut self) -> Vec<String> {
        self.audit.take()
    }
}

trait NowMs {
    fn now_ms(&self) -> i64;
}

impl NowMs for ManualClock {
    fn now_ms(&self) -> i64 {
        mcpolicy_runtime::clock::Clock::now(self)
    }
}

#[test]
fn random_interleavings_keep_the_invariants() {
    run_seeded(&proptest::collection::vec(op(), 1..60), |ops| {
        run(Box::new(Core::new()), &ops)
    });
}

/// A client error that is not a refusal, a reused id, a request cancelled
/// while the user decides, sampling as a task and a restart, in one
/// interleaving, as a fixed case (`docs/threat-model.md`, "A broken or slow
/// client", and the hostile server's reused ids, cancellations and tasks).
#[test]
fn client_errors_reused_ids_cancellations_and_tasks_in_one_interleaving() {
    let ops = [
        Op::Sample {
            id: 5,
            prompt: 0,
            task: false,
        },
        Op::Sample {
            id: 5,
            prompt: 1,
            task: false,
        },
        Op::Answer {
            pick: 0,
            how: How::Fail,
        },
        Op::Sample {
            id: 6,
            prompt: 0,
            task: false,
        },
        Op::Cancel { pick: 0 },
        Op::Answer {
            pick: 0,
            how: How::Refuse,
        },
        Op::Sample {
            id: 7,
            prompt: 0,
            task: false,
        },
        Op::Sample {
            id: 1,
            prompt: 2,
            task: true,
        },
        Op::Answer {
            pick: 0,
            how: How::Task,
        },
        Op::Poll {
            id: 2,
            pick: 0,
            result: false,
        },
        Op::Answer {
            pick: 0,
            how: How::Refuse,
        },
        Op::Sample {
            id: 3,
            prompt: 2,
            task: true,
        },
        Op::Restart,
        Op::Sample {
            id: 3,
            prompt: 2,
            task: false,
        },
        Op::Sample {
            id: 4,
            prompt: 0,
            task: false,
        },
    ];
    run(Box::new(Core::new()), &ops).unwrap();
}

// ------------------------------------------------------------------------
// MCP 2026-07-28: `InputRequiredResult`s and retries, and the tasks
// extension (`tasks/get`, `tasks/update`), against a server that shares
// every key it may choose: concurrent calls get `requestState`s and entry
// keys from pools of two, tasks get task ids from a pool of two, and
// retries may carry a state the proxy never gave (the server's own, a
// forged token). Each entry's prompt is its own (`e<n>`), so the audit
// says which entry a decision was about.
//
// Invariants, after every step:
//
// 1. a retry settles exactly its own call's entries (an approval for each
//    response, a refusal for each entry without one), and reaches the
//    server with the `requestState` the server gave that call;
// 2. a retry whose state the proxy did not give settles nothing and goes
//    on unchanged;
// 3. the completions the client ran never exceed `budget 3 requests per
//    day` (an entry forwarded and approved is one; a refusal is refunded);
// 4. within a task, an entry is decided once, however often it is polled,
//    and `tasks/update` settles only the entries it answers.

const MRTR_POLICY: &str = r#"
mcpolicy 1
protocol 2025-11-25
error_code -32010
identity messages

server "s" {
  consent always
  budget 3 requests per day
}
"#;

const MRTR_BUDGET: usize = 3;

#[derive(Clone, Debug)]
enum MrtrOp {
    /// The server answers a new client call with an `InputRequiredResult`:
    /// `state` from a pool of two (or none), entries under the keys of
    /// `keys` (bits over `k0`, `k1`).
    Ask { state: u8, keys: u8 },
    /// The client retries the `pick`-th outstanding call, answering the
    /// entries in `approve` (bits) and declining the others.
    Retry { pick: u8, approve: u8 },
    /// The client retries the `pick`-th outstanding call with the server's
    /// own state or a forged token instead of what it was given.
    Forge { pick: u8, token: bool },
    /// The server creates a task with id `t<task>` on a new client call.
    Create { task: u8 },
    /// The client polls task `t<task>`; the server answers with the entries
    /// under the keys of `keys`, new ones (`fresh`) or those it showed.
    Poll { task: u8, keys: u8, fresh: bool },
    /// The client answers the entries of task `t<task>` in `approve`.
    Update { task: u8, approve: u8 },
}

fn mrtr_op() -> impl Strategy<Value = MrtrOp> {
    prop_oneof![
        4 => (0u8..3, 1u8..4).prop_map(|(state, keys)| MrtrOp::Ask { state, keys }),
        4 => (any::<u8>(), 0u8..4).prop_map(|(pick, approve)| MrtrOp::Retry { pick, approve }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(pick, token)| MrtrOp::Forge { pick, token }),
        1 => (0u8..2).prop_map(|task| MrtrOp::Create { task }),
        3 => (0u8..2, 1u8..4, any::<bool>()).prop_map(|(task, keys, fresh)| MrtrOp::Poll { task, keys, fresh }),
        2 => (0u8..2, 0u8..4).prop_map(|(task, approve)| MrtrOp::Update { task, approve }),
    ]
}

/// A call the server answered with an `InputRequiredResult` the client got.
#[derive(Debug)]
struct Call {
    /// The state the server gave (`None`: none).
    server_state: Option<String>,
    /// The state the client was given.
    client_state: Value,
    /// (key, prompt) of each sampling entry.
    entries: Vec<(String, String)>,
}

/// A task's entries as the client sees them.
#[derive(Debug, Default)]
struct ModelTask {
    /// Entries shown and not answered: key → prompt.
    shown: BTreeMap<String, String>,
    /// Keys answered (the server must not reuse them).
    answered: BTreeSet<String>,
    /// The proxy refused its creation (the id named another call's task).
    refused: bool,
}

struct Mrtr {
    session: Session,
    server: Buf,
    client: Buf,
    audit: Buf,
    _dir: tempfile::TempDir,
    next_call: u64,
    next_prompt: usize,
    outstanding: Vec<Call>,
    tasks: BTreeMap<String, ModelTask>,
    /// Entries forwarded and not refunded: what the budget counts.
    reserved: usize,
    /// Completions the client ran (responses it sent).
    completions: usize,
    /// The prompt of each entry, by its request identity (the audit names
    /// a decision by identity).
    prompts: HashMap<String, String>,
    /// Prompts forwarded for consent and not approved (an upper bound on
    /// the engine's consent cooldown count, which also returns abandoned
    /// prompts and forgets those older than its window).
    unapproved: u64,
    /// Consent prompts the audit opened and closed (`consent` lines), over
    /// the whole run.
    opened: usize,
    closed: usize,
    trace: Vec<String>,
}

fn mrtr_policy() -> Policy {
    let db = Database::default();
    let source = SourceText::new(&db, "m.mcpolicy".into(), MRTR_POLICY.into());
    Policy::verify(db::lower_file(&db, source).clone().unwrap()).unwrap()
}

fn keys_of(bits: u8) -> Vec<String> {
    (0..2)
        .filter(|i| bits & (1 << i) != 0)
        .map(|i| format!("k{i}"))
        .collect()
}

impl Mrtr {
    fn new() -> Mrtr {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("store.db")).unwrap();
        let engine = Engine::new(
            mrtr_policy(),
            Arc::new(store),
            Arc::new(ManualClock::new(START_MS)),
        );
        let (server, client, audit) = (Buf::default(), Buf::default(), Buf::default());
        let session = Session::new(
            engine,
            "s",
            Box::new(server.clone()),
            Box::new(client.clone()),
            Log::to(Box::new(std::io::sink()), "s"),
            Some(Audit::to(Box::new(audit.clone()))),
        );
        Mrtr {
            session,
            server,
            client,
            audit,
            _dir: dir,
            next_call: 1,
            next_prompt: 0,
            outstanding: Vec::new(),
            tasks: BTreeMap::new(),
            reserved: 0,
            completions: 0,
            prompts: HashMap::new(),
            unapproved: 0,
            opened: 0,
            closed: 0,
            trace: Vec::new(),
        }
    }

    /// Whether `frame` is an error the model allows: the budget, or the
    /// consent cooldown once enough prompts went unapproved
    /// (`docs/spec/evaluation.md`, "Consent cooldown").
    fn allowed_refusal(&self, frame: &Value) -> bool {
        match frame.pointer("/error/data/reason").and_then(Value::as_str) {
            Some("policy.budget_exhausted") => true,
            Some("policy.consent_cooldown") => {
                self.unapproved >= mcpolicy_runtime::engine::CONSENT_COOLDOWN_PROMPTS
            }
            _ => false,
        }
    }

    fn entry(&mut self) -> (String, Value) {
        let prompt = format!("e{}", self.next_prompt);
        self.next_prompt += 1;
        let request = json!({"method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
            "maxTokens": 10}});
        let params = request["params"].as_object().unwrap();
        let identity = self.session.engine().identity("s", params).into_string();
        self.prompts.insert(identity, prompt.clone());
        (prompt, request)
    }

    /// Consent decisions the audit recorded since the last call: (prompt,
    /// approved), and how many entries were forwarded for consent.
    fn audited(&mut self) -> (Vec<(String, bool)>, usize) {
        let mut settled = Vec::new();
        let mut asked = 0;
        for line in self.audit.take() {
            let entry: Value = serde_json::from_str(&line).unwrap();
            let prompt = entry["identity"]
                .as_str()
                .and_then(|i| self.prompts.get(i))
                .cloned()
                .unwrap_or_default();
            match (entry["event"].as_str(), entry["outcome"].as_str()) {
                // A refused or unanswered prompt stays counted
                // (`docs/spec/evaluation.md`, "Consent cooldown").
                (Some("consent"), Some(outcome)) => {
                    self.closed += 1;
                    settled.push((prompt, !matches!(outcome, "deny" | "unanswered")));
                }
                (Some("decision"), Some("consent")) => asked += 1,
                _ => {}
            }
        }
        self.opened += asked;
        settled.sort();
        self.unapproved += asked as u64;
        let approved = settled.iter().filter(|(_, yes)| *yes).count() as u64;
        self.unapproved = self.unapproved.saturating_sub(approved);
        (settled, asked)
    }

    fn step(&mut self, op: &MrtrOp) -> Result<(), TestCaseError> {
        match *op {
            MrtrOp::Ask { state, keys } => {
                let call = self.next_call;
                self.next_call += 1;
                let server_state = (state < 2).then(|| format!("s{state}"));
                let mut requests = serde_json::Map::new();
                let mut entries = Vec::new();
                for key in keys_of(keys) {
                    let (prompt, request) = self.entry();
                    requests.insert(key.clone(), request);
                    entries.push((key, prompt));
                }
                let mut result = json!({"resultType": "input_required", "inputRequests": requests});
                if let Some(state) = &server_state {
                    result["requestState"] = json!(state);
                }
                self.trace.push(format!(
                    "server: call {call} needs {entries:?}, state {server_state:?}"
                ));
                let frame = json!({"jsonrpc": "2.0", "id": call, "result": result});
                self.session.from_server(frame.to_string().as_bytes());
                let out = self.client.take();
                check!(self, out.len() == 1, "one frame for call {call}: {out:?}");
                let frame: Value = serde_json::from_str(&out[0]).unwrap();
                check!(
                    self,
                    frame["id"] == call,
                    "the answer is the call's: {frame}"
                );
                let (_, asked) = self.audited();
                if frame.get("result").is_none() {
                    check!(
                        self,
                        self.allowed_refusal(&frame),
                        "only the budget (or the consent cooldown) refuses here: {frame}"
                    );
                    return Ok(());
                }
                check!(self, asked == entries.len(), "every entry asked once");
                let client_state = frame["result"]["requestState"].clone();
                check!(
                    self,
                    self.outstanding
                        .iter()
                        .all(|c| c.client_state != client_state),
                    "two calls were given one requestState: {client_state}"
                );
                self.reserved += entries.len();
                check!(
                    self,
                    self.reserved <= MRTR_BUDGET,
                    "{} entries reserved under a budget of {MRTR_BUDGET}",
                    self.reserved
                );
                self.outstanding.push(Call {
                    server_state,
                    client_state,
                    entries,
                });
            }
            MrtrOp::Retry { pick, approve } => {
                if self.outstanding.is_empty() {
                    return Ok(());
                }
                let call = self
                    .outstanding
                    .remove(pick as usize % self.outstanding.len());
                let approved: Vec<String> = keys_of(approve);
                let mut responses = serde_json::Map::new();
                let mut expected = Vec::new();
                for (key, prompt) in &call.entries {
                    let yes = approved.contains(key);
                    if yes {
                        responses.insert(
                            key.clone(),
                            json!({"role": "assistant", "model": "m",
                            "content": {"type": "text", "text": prompt}}),
                        );
                        self.completions += 1;
                    } else {
                        self.reserved -= 1;
                    }
                    expected.push((prompt.clone(), yes));
                }
                expected.sort();
                self.trace.push(format!(
                    "client retries {:?} with {:?}, approving {approved:?}",
                    call.entries, call.client_state
                ));
                let retry = json!({"jsonrpc": "2.0", "id": 1000 + self.next_call, "method": "tools/call",
                    "params": {"name": "t", "requestState": call.client_state, "inputResponses": responses}});
                self.session.from_client(retry.to_string().as_bytes());
                let sent = self.server.take();
                check!(
                    self,
                    sent.len() == 1,
                    "the retry reaches the server: {sent:?}"
                );
                let sent: Value = serde_json::from_str(&sent[0]).unwrap();
                check!(
                    self,
                    sent["params"].get("requestState").and_then(Value::as_str)
                        == call.server_state.as_deref(),
                    "the server's own state is restored: {sent}"
                );
                let (settled, _) = self.audited();
                check!(
                    self,
                    settled == expected,
                    "the retry settled {settled:?}, its own entries are {expected:?}"
                );
                check!(
                    self,
                    self.completions <= MRTR_BUDGET,
                    "the client ran {} completions under a budget of {MRTR_BUDGET}",
                    self.completions
                );
            }
            MrtrOp::Forge { pick, token } => {
                if self.outstanding.is_empty() {
                    return Ok(());
                }
                let call = &self.outstanding[pick as usize % self.outstanding.len()];
                let state = if token {
                    json!("mcpolicy.00000000000000000000000000000000")
                } else {
                    json!(call.server_state.clone().unwrap_or_default())
                };
                let responses: serde_json::Map<String, Value> = call
                    .entries
                    .iter()
                    .map(|(k, p)| {
                        (
                            k.clone(),
                            json!({"role": "assistant", "model": "m",
                        "content": {"type": "text", "text": p}}),
                        )
                    })
                    .collect();
                self.trace.push(format!(
                    "client retries with state {state} it was not given"
                ));
                let retry = json!({"jsonrpc": "2.0", "id": 5000, "method": "tools/call",
                    "params": {"name": "t", "requestState": state, "inputResponses": responses}});
                self.session.from_client(retry.to_string().as_bytes());
                let sent = self.server.take();
                check!(self, sent.len() == 1, "forwarded: {sent:?}");
                let sent: Value = serde_json::from_str(&sent[0]).unwrap();
                check!(self, sent == retry, "unchanged: {sent}");
                let (settled, _) = self.audited();
                check!(self, settled.is_empty(), "settled nothing: {settled:?}");
            }
            MrtrOp::Create { task } => {
                let task_id = format!("t{task}");
                let call = self.next_call;
                self.next_call += 1;
                self.trace
                    .push(format!("server creates {task_id} on call {call}"));
                let frame = json!({"jsonrpc": "2.0", "id": call, "result": {"resultType": "task",
                    "taskId": task_id, "status": "working", "ttlMs": 600000,
                    "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z"}});
                self.session.from_server(frame.to_string().as_bytes());
                let out: Value = serde_json::from_str(&self.client.take()[0]).unwrap();
                let known = self.tasks.contains_key(&task_id);
                check!(
                    self,
                    out.get("error").is_some() == known,
                    "a task id given to a second call is refused, the first accepted: {out}"
                );
                self.tasks.entry(task_id).or_default().refused |= known;
            }
            MrtrOp::Poll { task, keys, fresh } => {
                let task_id = format!("t{task}");
                let Some(model) = self.tasks.get(&task_id) else {
                    return Ok(());
                };
                let (shown, answered) = (model.shown.clone(), model.answered.clone());
                let mut requests = serde_json::Map::new();
                let mut new = Vec::new();
                for key in keys_of(keys) {
                    if answered.contains(&key) {
                        continue; // a well-behaved server; reuse is refused (unit tests)
                    }
                    match shown.get(&key) {
                        Some(prompt) if !fresh => {
                            let request = json!({"method": "sampling/createMessage", "params": {
                                "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                                "maxTokens": 10}});
                            requests.insert(key, request);
                        }
                        Some(_) => {}
                        None => {
                            let (prompt, request) = self.entry();
                            requests.insert(key.clone(), request);
                            new.push((key, prompt));
                        }
                    }
                }
                if requests.is_empty() {
                    return Ok(());
                }
                let call = self.next_call;
                self.next_call += 1;
                self.trace
                    .push(format!("client polls {task_id} (call {call}): new {new:?}"));
                let get = json!({"jsonrpc": "2.0", "id": call, "method": "tasks/get", "params": {"taskId": task_id}});
                self.session.from_client(get.to_string().as_bytes());
                self.server.take();
                let answer = json!({"jsonrpc": "2.0", "id": call, "result": {"resultType": "complete",
                    "taskId": task_id, "status": "input_required", "ttlMs": 600000,
                    "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
                    "inputRequests": requests}});
                self.session.from_server(answer.to_string().as_bytes());
                let out: Value = serde_json::from_str(&self.client.take()[0]).unwrap();
                let (_, asked) = self.audited();
                if out.get("error").is_some() {
                    check!(
                        self,
                        self.allowed_refusal(&out),
                        "only the budget (or the consent cooldown) refuses a poll: {out}"
                    );
                    return Ok(());
                }
                check!(
                    self,
                    asked == new.len(),
                    "{asked} decisions for {} new entries: a repeated poll is not decided again",
                    new.len()
                );
                self.reserved += new.len();
                check!(
                    self,
                    self.reserved <= MRTR_BUDGET,
                    "{} entries reserved under a budget of {MRTR_BUDGET}",
                    self.reserved
                );
                let model = self.tasks.get_mut(&task_id).unwrap();
                model.shown.extend(new);
            }
            MrtrOp::Update { task, approve } => {
                let task_id = format!("t{task}");
                let Some(model) = self.tasks.get_mut(&task_id) else {
                    return Ok(());
                };
                let approved: Vec<(String, String)> = keys_of(approve)
                    .into_iter()
                    .filter_map(|k| model.shown.remove(&k).map(|p| (k, p)))
                    .collect();
                if approved.is_empty() {
                    return Ok(());
                }
                let mut responses = serde_json::Map::new();
                for (key, prompt) in &approved {
                    model.answered.insert(key.clone());
                    responses.insert(
                        key.clone(),
                        json!({"role": "assistant", "model": "m",
                        "content": {"type": "text", "text": prompt}}),
                    );
                }
                self.completions += approved.len();
                self.trace
                    .push(format!("client updates {task_id}: answers {approved:?}"));
                let update = json!({"jsonrpc": "2.0", "id": 9000 + self.next_call, "method": "tasks/update",
                    "params": {"taskId": task_id, "inputResponses": responses}});
                self.next_call += 1;
                self.session.from_client(update.to_string().as_bytes());
                check!(
                    self,
                    self.server.take().len() == 1,
                    "the update reaches the server"
                );
                let (settled, _) = self.audited();
                let mut expected: Vec<(String, bool)> =
                    approved.into_iter().map(|(_, p)| (p, true)).collect();
                expected.sort();
                check!(
                    self,
                    settled == expected,
                    "tasks/update settled {settled:?}, it answered {expected:?}"
                );
                check!(
                    self,
                    self.completions <= MRTR_BUDGET,
                    "the client ran {} completions under a budget of {MRTR_BUDGET}",
                    self.completions
                );
            }
        }
        Ok(())
    }
}

fn run_mrtr(ops: &[MrtrOp]) -> Result<(), TestCaseError> {
    let mut world = Mrtr::new();
    for op in ops {
        world.step(op)?;
    }
    // The session ends: every prompt the audit opened is closed once
    // (`proxy/PROXY.md`, "The audit log").
    world.session.close_unanswered();
    world.audited();
    prop_assert_eq!(
        world.opened,
        world.closed,
        "prompts opened and closed in the audit"
    );
    Ok(())
}

#[test]
fn servers_that_share_keys_never_cross_entries() {
    run_seeded(&proptest::collection::vec(mrtr_op(), 1..40), |ops| {
        run_mrtr(&ops)
    });
}

/// Two calls given one `requestState` and one key, the client approving
/// one and declining the other: each retry settles its own entry.
#[test]
fn two_calls_sharing_state_and_key_settle_apart() {
    let ops = [
        MrtrOp::Ask { state: 0, keys: 1 },
        MrtrOp::Ask { state: 0, keys: 1 },
        MrtrOp::Retry {
            pick: 1,
            approve: 0,
        },
        MrtrOp::Retry {
            pick: 0,
            approve: 1,
        },
        MrtrOp::Ask { state: 0, keys: 3 },
        MrtrOp::Forge {
            pick: 0,
            token: false,
        },
        MrtrOp::Create { task: 0 },
        MrtrOp::Create { task: 0 },
        MrtrOp::Poll {
            task: 0,
            keys: 1,
            fresh: true,
        },
        MrtrOp::Poll {
            task: 0,
            keys: 1,
            fresh: false,
        },
    ];
    run_mrtr(&ops).unwrap();
}
