//! Every server → client request in flight through the proxy, each in its
//! own state. This file is the whole state machine; `session.rs` drives it
//! (parsing, engine calls, I/O) and this file decides nothing about bytes.
//!
//! ```text
//!  received ── id still in flight ──────────────► answered here (-32600), not forwarded
//!     │
//!  decided ─── denied / invalid ────────────────► answered here (policy frame)
//!     │ not sampling, allowed, trimmed, consent
//!     ▼
//!  forwarded (Passthrough | Sampling: Grant or Consent)
//!     ├─ client answers ────────────────────────► answered (consent resolved, settled)
//!     ├─ the same text again, on a stream the ──► forwarded (the same frame again;
//!     │  client resumed before it (HTTP)             nothing decided or counted)
//!     ├─ server cancels ──► cancelled ─ client answers / linger ─► gone (answer dropped,
//!     │                                   consent still resolved; a consent the linger
//!     │                                   ends unanswered is closed `unanswered`)
//!     ├─ deadline passes ─► expired ── late answer / linger ─────► gone (answer dropped)
//!     └─ client answers with a task handle ─► task running
//!                         ├─ status completed ─► task approved ─ tasks/result ─► answered
//!                         ├─ status failed ────► task refused ── tasks/result ─► answered (policy frame)
//!                         │   (MCP's rejection message; any other failure waits: task failed ─
//!                         │    tasks/result -1 ─► refused, other answer / ttl ─► abandoned)
//!                         ├─ status cancelled ─► gone (consent abandoned, budget refunded)
//!                         └─ deadline passes ──► task missed ─── tasks/result ─► answered (policy frame)
//! ```
//!
//! Beside the server's requests: each 2026-07-28 round of `inputRequests`
//! remembered under the proxy's `requestState` token until the client's
//! retry (`ask` ─ retry ─► settled ─ linger ─► gone), each extension task
//! with entries decided (`put_ext_task` … `take_ext_task`), and each of the
//! client's `tasks/get` calls until the server answers it (`poll` ─►
//! `polled`).
//!
//! At the session's end every consent still held is closed `unanswered`
//! ([`InFlight::unanswered`]), as is one whose linger, or whose 2026-07-28
//! round's, ends first: nothing is stored or refunded, the prompt stays
//! counted.
//!
//! `received` and `decided` last one call of `Session::from_server`;
//! `answered` is the removal of the entry. An id is free again once its
//! entry is gone: a server that reuses it earlier is refused, because the
//! client's answer could not be told apart.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use mcpolicy_runtime::engine::{Denial, Grant, PendingConsent};
use serde_json::{Map, Value};

/// How long a request the server cancelled stays tracked for the client's
/// answer: the user may still be looking at the dialog.
pub const CANCELLED_LINGER: Duration = Duration::from_secs(600);

/// How long a request answered at its deadline stays tracked for the
/// client's late answer (the client was told to cancel).
pub const EXPIRED_LINGER: Duration = Duration::from_secs(60);

/// How long a task is followed when its creation reply names no `ttl`, and
/// the most a `ttl` can ask for.
pub const TASK_TTL_DEFAULT: Duration = Duration::from_secs(3600);
/// See [`TASK_TTL_DEFAULT`].
pub const TASK_TTL_MAX: Duration = Duration::from_secs(24 * 3600);

/// At most this many requests, tasks and remembered `inputRequests` rounds
/// are tracked; beyond it a new server request (or `input_required`
/// result) is answered with a retryable error (lapsed entries are dropped
/// first; nothing pending is evicted).
pub const MAX_TRACKED: usize = 65_536;

/// At most this many bytes of server text are held for requests, tasks and
/// rounds in flight (each is charged the length of the line it came in,
/// an upper bound of what is kept of it); beyond it a new one is answered
/// as at [`MAX_TRACKED`]. A request the runtime accepts (16 MiB at most)
/// always fits an empty table.
pub const MAX_RETAINED_BYTES: usize = 64 << 20;

/// How long an `InputRequiredResult`'s remembered entries wait for the
/// client's retry, and how long a settled round's server `requestState` is
/// kept for a repeated retry. A round never retried lapses then: its
/// grants keep their reservations, its consent stays unresolved (nothing
/// stored).
pub const ROUND_LINGER: Duration = Duration::from_secs(3600);

/// What the proxy waits for from the client on a sampling request.
#[derive(Debug)]
pub enum Awaiting {
    /// The user decides in the client's own approval UI.
    Consent(PendingConsent),
    /// The completion runs under the grant (deadline, settlement, `_meta`).
    Grant(Grant),
}

/// A sampling request the proxy let through.
#[derive(Debug)]
pub struct Sampling {
    /// The id the server gave its request.
    pub id: Value,
    /// The params the server asked for (before trims), for the audit.
    pub requested: Map<String, Value>,
    pub awaiting: Awaiting,
    pub deadline: Option<Instant>,
    /// `params.task` was present: the client may answer with a task handle.
    pub task: bool,
    /// The length of the request's line: what it is charged against
    /// [`MAX_RETAINED_BYTES`].
    pub bytes: usize,
    /// The client was sent a re-serialised request (a trim, or a text
    /// the runtime reads in a rewritten form), not the server's bytes.
    pub rewritten: bool,
}

/// The SHA-256 of a forwarded request's text as the server wrote it: what
/// a message delivered again must repeat to be the same request
/// ([`InFlight::redeliverable`]).
pub type TextDigest = [u8; 32];

/// Which task request the server sent about a task the proxy follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskMethod {
    Get,
    Result,
    Cancel,
}

impl TaskMethod {
    /// The task method named `method`, if it is one.
    pub fn of(method: &str) -> Option<TaskMethod> {
        match method {
            "tasks/get" => Some(TaskMethod::Get),
            "tasks/result" => Some(TaskMethod::Result),
            "tasks/cancel" => Some(TaskMethod::Cancel),
            _ => None,
        }
    }
}

/// The state of one server → client request id.
#[derive(Debug)]
pub enum Flight {
    /// Forwarded, not sampling: the client's answer goes on unchanged.
    Passthrough,
    /// A sampling request forwarded to the client.
    Sampling(Sampling),
    /// A `tasks/*` request about a task the proxy follows.
    TaskQuery { task_id: String, method: TaskMethod },
    /// The server cancelled it. The client may still answer: a consent
    /// answer is still recorded; nothing goes to the server.
    Cancelled {
        sampling: Option<Sampling>,
        until: Instant,
    },
    /// The proxy answered it at its deadline; the client's late answer is dropped.
    Expired { until: Instant },
}

impl Flight {
    fn lapsed(&self, now: Instant) -> bool {
        match self {
            Flight::Cancelled { until, .. } | Flight::Expired { until } => *until <= now,
            _ => false,
        }
    }

    /// The state's name, for logs and tests.
    pub fn name(&self) -> &'static str {
        match self {
            Flight::Passthrough => "forwarded",
            Flight::Sampling(s) => match s.awaiting {
                Awaiting::Consent(_) => "awaiting consent",
                Awaiting::Grant(_) => "forwarded",
            },
            Flight::TaskQuery { .. } => "forwarded",
            Flight::Cancelled { .. } => "cancelled",
            Flight::Expired { .. } => "expired",
        }
    }
}

/// Where a task the client runs for a sampling request stands.
#[derive(Debug)]
pub enum TaskState {
    /// Running; the user's answer (consent) or the completion (grant) is awaited.
    Running(Awaiting),
    /// Completed (approved, when consent was asked): `tasks/result` settles and is annotated.
    Approved(Grant),
    /// Failed without the user's rejection: its `tasks/result` decides (`-1`
    /// refuses, anything else abandons); its `ttl` abandons it.
    Failed(Awaiting),
    /// Refused by the user (recorded): `tasks/result` is answered with the policy's frame.
    Refused(Denial),
    /// The deadline passed while it ran (recorded): `tasks/result` is answered with the policy's frame.
    Missed(Denial),
}

/// A task the client created for a sampling request.
#[derive(Debug)]
pub struct Task {
    /// The id of the sampling request that created it (for the audit).
    pub origin: Value,
    pub requested: Map<String, Value>,
    pub state: TaskState,
    pub deadline: Option<Instant>,
    /// Followed until then (the task's `ttl`); afterwards it is dropped.
    pub until: Instant,
    /// Charged against [`MAX_RETAINED_BYTES`] (its sampling request's).
    pub bytes: usize,
}

/// A reason a server request cannot be tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The id is still in flight (forwarded, cancelled or expired and not yet answered).
    InFlight,
    /// [`MAX_TRACKED`] entries or [`MAX_RETAINED_BYTES`] bytes are held.
    Full,
}

impl Refusal {
    /// The message of the error frame the server receives.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::InFlight => {
                "Invalid request: id already in flight (the client has not answered the earlier request with this id)"
            }
            Refusal::Full => {
                "Request refused: too many requests in flight at the proxy (retry later)"
            }
        }
    }

    /// The JSON-RPC error code: -32600 for a reused id (the request is
    /// invalid), -32603 for the bound (the proxy cannot hold it now).
    pub fn code(self) -> i32 {
        match self {
            Refusal::InFlight => -32600,
            Refusal::Full => -32603,
        }
    }

    /// The error's `data`: the bound is retryable (`runtime.in_flight_bound`,
    /// `docs/spec/frames.md`); a reused id carries none.
    pub fn data(self, server: &str) -> Option<serde_json::Value> {
        match self {
            Refusal::InFlight => None,
            Refusal::Full => Some(serde_json::json!({
                "reason": "runtime.in_flight_bound",
                "server": server,
                "retryable": true,
            })),
        }
    }
}

/// What a deadline or linger sweep found.
#[derive(Debug, Default)]
pub struct Swept {
    /// Sampling requests whose deadline passed: answer the server, cancel at the client.
    pub expired: Vec<Sampling>,
    /// Tasks whose deadline passed while running under a grant: `(task id, grant)`.
    pub missed: Vec<(String, Task)>,
    /// Entries dropped because their linger or ttl ended (logged).
    pub lapsed: Vec<String>,
    /// Consent of tasks that lapsed undecided (the client never said):
    /// abandon them (nothing stored, budget refunded).
    pub abandoned: Vec<(Value, PendingConsent)>,
    /// Consents the proxy stopped waiting for (a cancelled request's
    /// linger, a 2026-07-28 round's, ended first): close them `unanswered`.
    pub unanswered: Vec<Unanswered>,
}

/// A consent closed without the user's answer and without a refund: the
/// audit's `via` (`request`, `task`, `inputRequests`), the request's id
/// (or entry key) and the consent.
pub type Unanswered = (&'static str, Value, PendingConsent);

/// A 2026-07-28 `inputRequests` sampling entry forwarded to the client.
#[derive(Debug)]
pub struct InputEntry {
    pub awaiting: Awaiting,
    /// The entry's key, for the audit.
    pub id: Value,
    pub deadline: Option<Instant>,
    /// The params the server asked for (before trims), for the audit.
    pub requested: Map<String, Value>,
}

/// One `InputRequiredResult` forwarded with remembered sampling entries,
/// held under the `requestState` token the proxy minted for it.
#[derive(Debug)]
pub enum Round {
    /// Forwarded; the client's retry (carrying the token) settles exactly
    /// these entries.
    Asked {
        /// The server's own `requestState` (`None`: it sent none), restored
        /// in the retry before it is forwarded.
        server_state: Option<Value>,
        entries: Vec<(String, InputEntry)>,
    },
    /// Retried and settled: only the server's state is kept, for a
    /// repeated retry (which settles nothing).
    Settled { server_state: Option<Value> },
}

/// A sampling entry of a task's `inputRequests` (the 2026-07-28 tasks
/// extension) forwarded to the client and not yet answered.
#[derive(Debug)]
pub struct TaskInput {
    pub entry: InputEntry,
    /// The entry as the server wrote it: a later poll must repeat it
    /// exactly under this key (the extension: a key names one request for
    /// the task's lifetime).
    pub request: Value,
    /// The params the client was shown, when a trim changed them.
    pub shown: Option<Map<String, Value>>,
}

/// A task of the 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`)
/// whose `inputRequests` the proxy decided, by task id.
#[derive(Debug, Default)]
pub struct ExtTask {
    /// The client call the proxy saw create it (`CreateTaskResult` on it),
    /// by the call id's text; `None` when first seen polled.
    pub created_by: Option<String>,
    /// Entries forwarded and not answered yet, by key.
    pub pending: BTreeMap<String, TaskInput>,
    /// Keys already answered: the server must not reuse them.
    pub answered: BTreeSet<String>,
}

#[derive(Debug)]
struct HeldTask {
    task: ExtTask,
    bytes: usize,
    until: Instant,
}

/// A retried round: the server's `requestState` to restore (`None`: it
/// sent none) and the round's own entries to settle.
pub type Retried = (Option<Value>, Vec<(String, InputEntry)>);

#[derive(Debug)]
struct Held<T> {
    item: T,
    /// Charged against [`MAX_RETAINED_BYTES`].
    bytes: usize,
    /// The server's text of a request, kept when its transport resumes
    /// streams ([`InFlight::redeliverable`]).
    text: Option<TextDigest>,
}

#[derive(Debug)]
struct HeldRound {
    round: Round,
    bytes: usize,
    until: Instant,
}

/// Every server → client request in flight, by the JSON text of its id,
/// every task followed, by task id, and every 2026-07-28 round remembered,
/// by the proxy's own `requestState` token; bounded together by count
/// ([`MAX_TRACKED`]) and by bytes ([`MAX_RETAINED_BYTES`]).
#[derive(Debug)]
pub struct InFlight {
    requests: HashMap<String, Held<Flight>>,
    tasks: HashMap<String, Task>,
    rounds: HashMap<String, HeldRound>,
    /// Tasks of the 2026-07-28 tasks extension with entries decided.
    ext_tasks: HashMap<String, HeldTask>,
    /// The client's own `tasks/get` calls (tasks extension) the server has
    /// not answered, by the call's key: the task each one polls, so that
    /// the entries in the answer are read as that task's.
    polls: HashMap<String, String>,
    /// Bytes charged by everything held.
    retained: usize,
    /// [`MAX_RETAINED_BYTES`], lowered by tests.
    max_bytes: usize,
    /// Consent of tasks that lapsed undecided, until the next sweep hands
    /// them out (with the id of the request that created the task).
    abandoned: Vec<(Value, PendingConsent)>,
    /// Consents whose entry lapsed unanswered, until the next sweep.
    lapsed_unanswered: Vec<Unanswered>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight::with_bytes_bound(MAX_RETAINED_BYTES)
    }
}

impl InFlight {
    /// A table holding at most `max_bytes` (tests lower the bound).
    pub fn with_bytes_bound(max_bytes: usize) -> Self {
        InFlight {
            requests: HashMap::new(),
            tasks: HashMap::new(),
            rounds: HashMap::new(),
            ext_tasks: HashMap::new(),
            polls: HashMap::new(),
            retained: 0,
            max_bytes,
            abandoned: Vec::new(),
            lapsed_unanswered: Vec::new(),
        }
    }

    fn count(&self) -> usize {
        self.requests.len() + self.tasks.len() + self.rounds.len() + self.ext_tasks.len()
    }

    /// Whether one more entry of `bytes` fits; lapsed entries are dropped
    /// first when it does not. Nothing pending is evicted.
    fn room(&mut self, bytes: usize, now: Instant) -> Result<(), Refusal> {
        let fits =
            |t: &Self| t.count() < MAX_TRACKED && t.retained.saturating_add(bytes) <= t.max_bytes;
        if !fits(self) {
            self.sweep_lapsed(now);
            if !fits(self) {
                return Err(Refusal::Full);
            }
        }
        Ok(())
    }

    /// `received`: may a server request with this id, `bytes` long, be
    /// forwarded? Lapsed entries are dropped first.
    pub fn admit(&mut self, key: &str, bytes: usize, now: Instant) -> Result<(), Refusal> {
        if let Some(held) = self.requests.get(key) {
            if !held.item.lapsed(now) {
                return Err(Refusal::InFlight);
            }
            self.remove_request(key);
        }
        self.room(bytes, now)
    }

    fn remove_request(&mut self, key: &str) -> Option<Flight> {
        let held = self.requests.remove(key)?;
        self.retained -= held.bytes;
        Some(held.item)
    }

    fn insert_request(
        &mut self,
        key: String,
        flight: Flight,
        bytes: usize,
        text: Option<TextDigest>,
    ) {
        self.retained += bytes;
        if let Some(old) = self.requests.insert(
            key,
            Held {
                item: flight,
                bytes,
                text,
            },
        ) {
            self.retained -= old.bytes;
        }
    }

    /// `forwarded`: the request, `bytes` long, went to the client; `text`:
    /// the digest of its text, for a transport that resumes streams. Call
    /// [`InFlight::admit`] first.
    pub fn forward(&mut self, key: String, flight: Flight, bytes: usize, text: Option<TextDigest>) {
        self.insert_request(key, flight, bytes, text);
    }

    /// `forwarded`, delivered again: the request `key` when it is
    /// forwarded and unanswered (not cancelled, not expired, not a task)
    /// and its server's text was `text`. The transport judged that the
    /// client never received it (`docs/spec/transports.md`, "Resumed
    /// streams"); the entry stays as it is.
    pub fn redeliverable(&self, key: &str, text: &TextDigest) -> Option<&Flight> {
        let held = self.requests.get(key)?;
        let forwarded = matches!(
            held.item,
            Flight::Passthrough | Flight::Sampling(_) | Flight::TaskQuery { .. }
        );
        (forwarded && held.text.as_ref() == Some(text)).then_some(&held.item)
    }

    /// The client answered `key`: the entry leaves the table, whatever its
    /// state; `None` when the proxy tracks no such request.
    pub fn answer(&mut self, key: &str) -> Option<Flight> {
        self.remove_request(key)
    }

    /// The server cancelled `key`: it stays tracked as `cancelled` until
    /// the client answers or [`CANCELLED_LINGER`] passes. Returns whether
    /// it was tracked.
    pub fn cancel(&mut self, key: &str, now: Instant) -> bool {
        let Some(held) = self.requests.get(key) else {
            return false;
        };
        let (bytes, text) = (held.bytes, held.text);
        let Some(flight) = self.remove_request(key) else {
            return false;
        };
        let until = now + CANCELLED_LINGER;
        let next = match flight {
            Flight::Sampling(sampling) => Flight::Cancelled {
                sampling: Some(sampling),
                until,
            },
            Flight::Passthrough | Flight::TaskQuery { .. } => Flight::Cancelled {
                sampling: None,
                until,
            },
            // Already answered by the proxy, or already cancelled.
            other @ (Flight::Cancelled { .. } | Flight::Expired { .. }) => other,
        };
        self.insert_request(key.to_owned(), next, bytes, text);
        true
    }

    /// `task running`: the client answered a sampling request with a task handle.
    pub fn start_task(
        &mut self,
        task_id: String,
        sampling: Sampling,
        ttl: Option<u64>,
        now: Instant,
    ) {
        let ttl = ttl.map_or(TASK_TTL_DEFAULT, |ms| {
            Duration::from_millis(ms).min(TASK_TTL_MAX)
        });
        let Sampling {
            id,
            requested,
            awaiting,
            deadline,
            bytes,
            ..
        } = sampling;
        self.put_task(
            task_id,
            Task {
                origin: id,
                requested,
                state: TaskState::Running(awaiting),
                deadline,
                until: now + ttl,
                bytes,
            },
        );
    }

    /// Whether `task_id` is a task the proxy follows.
    pub fn follows(&self, task_id: &str) -> bool {
        self.tasks.contains_key(task_id)
    }

    /// Takes a followed task out to move it on (put it back with [`InFlight::put_task`]).
    pub fn take_task(&mut self, task_id: &str) -> Option<Task> {
        let task = self.tasks.remove(task_id)?;
        self.retained -= task.bytes;
        Some(task)
    }

    /// Puts a task back after a transition that did not end it.
    pub fn put_task(&mut self, task_id: String, task: Task) {
        self.retained += task.bytes;
        if let Some(old) = self.tasks.insert(task_id, task) {
            self.retained -= old.bytes;
        }
    }

    /// May an `InputRequiredResult` of `bytes` have its entries remembered?
    pub fn admit_round(&mut self, bytes: usize, now: Instant) -> Result<(), Refusal> {
        self.room(bytes, now)
    }

    /// Remembers a forwarded round under the `token` the proxy minted as its
    /// `requestState`. Call [`InFlight::admit_round`] first.
    pub fn ask(
        &mut self,
        token: String,
        server_state: Option<Value>,
        entries: Vec<(String, InputEntry)>,
        bytes: usize,
        now: Instant,
    ) {
        self.retained += bytes;
        let held = HeldRound {
            round: Round::Asked {
                server_state,
                entries,
            },
            bytes,
            until: now + ROUND_LINGER,
        };
        if let Some(old) = self.rounds.insert(token, held) {
            self.retained -= old.bytes;
        }
    }

    /// The client retried with `token`: the server's `requestState` to
    /// restore and the round's own entries to settle (none on a repeated
    /// retry). `None` when the token names no round (the server's own
    /// state, or a token lapsed or never minted).
    pub fn retry(&mut self, token: &str, now: Instant) -> Option<Retried> {
        let held = self.rounds.remove(token)?;
        self.retained -= held.bytes;
        let (server_state, entries) = match held.round {
            Round::Asked {
                server_state,
                entries,
            } => (server_state, entries),
            Round::Settled { server_state } => (server_state, Vec::new()),
        };
        let bytes = server_state.as_ref().map_or(0, |s| s.to_string().len()) + token.len();
        self.retained += bytes;
        self.rounds.insert(
            token.to_owned(),
            HeldRound {
                round: Round::Settled {
                    server_state: server_state.clone(),
                },
                bytes,
                until: now + ROUND_LINGER,
            },
        );
        Some((server_state, entries))
    }

    /// Takes out a 2026-07-28 extension task to move it on (put it back
    /// with [`InFlight::put_ext_task`]); `None` when the proxy holds none.
    pub fn take_ext_task(&mut self, task_id: &str) -> Option<ExtTask> {
        let held = self.ext_tasks.remove(task_id)?;
        self.retained -= held.bytes;
        Some(held.task)
    }

    /// Holds `task` under `task_id`, charged `bytes`, for `ttl` from `now`;
    /// at the bound it is handed back (nothing held is evicted).
    pub fn put_ext_task(
        &mut self,
        task_id: String,
        task: ExtTask,
        bytes: usize,
        ttl: Duration,
        now: Instant,
    ) -> Result<(), (ExtTask, Refusal)> {
        if let Err(refusal) = self.room(bytes, now) {
            return Err((task, refusal));
        }
        self.retained += bytes;
        let held = HeldTask {
            task,
            bytes,
            until: now + ttl.min(TASK_TTL_MAX),
        };
        if let Some(old) = self.ext_tasks.insert(task_id, held) {
            self.retained -= old.bytes;
        }
        Ok(())
    }

    /// The client polls `task_id` with its `tasks/get` call `call`: held
    /// until the server answers it ([`InFlight::polled`]), at most
    /// [`MAX_TRACKED`] at once (past it the call is refused, nothing
    /// evicted).
    pub fn poll(&mut self, call: String, task_id: String) -> Result<(), Refusal> {
        if self.polls.len() >= MAX_TRACKED && !self.polls.contains_key(&call) {
            return Err(Refusal::Full);
        }
        self.polls.insert(call, task_id);
        Ok(())
    }

    /// The server answered the client's call `call`: the task it polled,
    /// if it was a `tasks/get` held by [`InFlight::poll`].
    pub fn polled(&mut self, call: &str) -> Option<String> {
        if self.polls.is_empty() {
            return None;
        }
        self.polls.remove(call)
    }

    /// The earliest deadline of a request or task still running under a grant.
    pub fn next_deadline(&self) -> Option<Instant> {
        let requests = self.requests.values().filter_map(|h| match &h.item {
            Flight::Sampling(s) if matches!(s.awaiting, Awaiting::Grant(_)) => s.deadline,
            _ => None,
        });
        let tasks = self.tasks.values().filter_map(|t| match t.state {
            TaskState::Running(Awaiting::Grant(_)) => t.deadline,
            _ => None,
        });
        requests.chain(tasks).min()
    }

    /// `expired`: takes out every granted request and task whose deadline
    /// passed by `now`; the requests stay tracked as `expired` (their late
    /// answer is dropped). Drops lapsed entries too.
    pub fn sweep(&mut self, now: Instant) -> Swept {
        let mut swept = Swept::default();
        let keys: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, h)| match &h.item {
                Flight::Sampling(s) => {
                    matches!(s.awaiting, Awaiting::Grant(_)) && s.deadline.is_some_and(|d| d <= now)
                }
                _ => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(Flight::Sampling(sampling)) = self.remove_request(&key) {
                let bytes = key.len();
                self.insert_request(
                    key,
                    Flight::Expired {
                        until: now + EXPIRED_LINGER,
                    },
                    bytes,
                    None,
                );
                swept.expired.push(sampling);
            }
        }
        let tasks: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| {
                matches!(t.state, TaskState::Running(Awaiting::Grant(_)))
                    && t.deadline.is_some_and(|d| d <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for task_id in tasks {
            if let Some(task) = self.take_task(&task_id) {
                swept.missed.push((task_id, task));
            }
        }
        swept.lapsed = self.sweep_lapsed(now);
        swept.abandoned = self.take_abandoned();
        swept.unanswered = std::mem::take(&mut self.lapsed_unanswered);
        swept
    }

    /// Consents of tasks that lapsed undecided, not yet abandoned.
    pub fn take_abandoned(&mut self) -> Vec<(Value, PendingConsent)> {
        std::mem::take(&mut self.abandoned)
    }

    fn sweep_lapsed(&mut self, now: Instant) -> Vec<String> {
        let mut lapsed: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, h)| h.item.lapsed(now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &lapsed {
            if let Some(Flight::Cancelled {
                sampling: Some(sampling),
                ..
            }) = self.remove_request(key)
                && let Awaiting::Consent(pending) = sampling.awaiting
            {
                self.lapsed_unanswered
                    .push(("request", sampling.id, pending));
            }
        }
        let tasks: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for task_id in tasks {
            if let Some(task) = self.take_task(&task_id)
                && let TaskState::Running(Awaiting::Consent(pending))
                | TaskState::Failed(Awaiting::Consent(pending)) = task.state
            {
                self.abandoned.push((task.origin, pending));
            }
            lapsed.push(format!("task {task_id}"));
        }
        let ext_tasks: Vec<String> = self
            .ext_tasks
            .iter()
            .filter(|(_, t)| t.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for task_id in ext_tasks {
            if let Some(task) = self.take_ext_task(&task_id) {
                for (key, input) in task.pending {
                    if let Awaiting::Consent(pending) = input.entry.awaiting {
                        self.abandoned.push((Value::from(key), pending));
                    }
                }
            }
            lapsed.push(format!("the input requests of task {task_id}"));
        }
        let rounds: Vec<String> = self
            .rounds
            .iter()
            .filter(|(_, r)| r.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for token in rounds {
            if let Some(held) = self.rounds.remove(&token) {
                self.retained -= held.bytes;
                if let Round::Asked { entries, .. } = held.round {
                    for (_, entry) in entries {
                        if let Awaiting::Consent(pending) = entry.awaiting {
                            self.lapsed_unanswered
                                .push(("inputRequests", entry.id, pending));
                        }
                    }
                    lapsed.push(format!("the input requests of round {token}"));
                }
            }
        }
        lapsed
    }

    /// The session ends: takes out every consent still waiting for the
    /// user's answer, as `(via, origin, consent)` in the audit's terms
    /// (`request`, `task`, `inputRequests`), in a stable order. Everything
    /// else tracked is dropped with the table.
    pub fn unanswered(&mut self) -> Vec<Unanswered> {
        let mut out = std::mem::take(&mut self.lapsed_unanswered);
        let mut requests: Vec<(String, Held<Flight>)> = self.requests.drain().collect();
        requests.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, held) in requests {
            if let Flight::Sampling(sampling)
            | Flight::Cancelled {
                sampling: Some(sampling),
                ..
            } = held.item
                && let Awaiting::Consent(pending) = sampling.awaiting
            {
                out.push(("request", sampling.id, pending));
            }
        }
        let mut tasks: Vec<(String, Task)> = self.tasks.drain().collect();
        tasks.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, task) in tasks {
            if let TaskState::Running(Awaiting::Consent(pending))
            | TaskState::Failed(Awaiting::Consent(pending)) = task.state
            {
                out.push(("task", task.origin, pending));
            }
        }
        let mut ext_tasks: Vec<(String, HeldTask)> = self.ext_tasks.drain().collect();
        ext_tasks.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, held) in ext_tasks {
            for (_, input) in held.task.pending {
                if let Awaiting::Consent(pending) = input.entry.awaiting {
                    out.push(("task", input.entry.id, pending));
                }
            }
        }
        let mut rounds: Vec<(String, HeldRound)> = self.rounds.drain().collect();
        rounds.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, held) in rounds {
            if let Round::Asked { entries, .. } = held.round {
                for (_, entry) in entries {
                    if let Awaiting::Consent(pending) = entry.awaiting {
                        out.push(("inputRequests", entry.id, pending));
                    }
                }
            }
        }
        self.retained = 0;
        out
    }

    /// How many request ids and tasks are tracked (for tests and bounds).
    pub fn len(&self) -> (usize, usize) {
        (self.requests.len(), self.tasks.len())
    }

    /// How many rounds are held, and the bytes charged by everything held.
    pub fn held(&self) -> (usize, usize) {
        (self.rounds.len(), self.retained)
    }

    /// The state of `key`, for tests and logs.
    pub fn state(&self, key: &str) -> Option<&'static str> {
        self.requests.get(key).map(|h| h.item.name())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn an_id_is_refused_while_in_flight_and_free_after_its_linger() {
        let now = Instant::now();
        let mut table = InFlight::default();
        assert_eq!(table.admit("5", 1, now), Ok(()));
        table.forward("5".into(), Flight::Passthrough, 1, None);
        assert_eq!(table.admit("5", 1, now), Err(Refusal::InFlight));
        assert!(table.cancel("5", now));
        assert_eq!(table.state("5"), Some("cancelled"));
        assert_eq!(
            table.admit("5", 1, now + CANCELLED_LINGER / 2),
            Err(Refusal::InFlight)
        );
        assert_eq!(table.admit("5", 1, now + CANCELLED_LINGER), Ok(()));
        assert_eq!(table.len(), (0, 0));
        assert!(!table.cancel("6", now), "an unknown id is not tracked");
    }

    #[test]
    fn the_table_is_bounded_and_lapsed_entries_make_room() {
        let now = Instant::now();
        let mut table = InFlight::default();
        for i in 0..MAX_TRACKED {
            let key = i.to_string();
            assert_eq!(table.admit(&key, 1, now), Ok(()));
            table.forward(key, Flight::Passthrough, 1, None);
        }
        assert_eq!(table.admit("x", 1, now), Err(Refusal::Full));
        // A cancelled request lingers, then its slot is free again.
        assert!(table.cancel("0", now));
        assert_eq!(table.admit("x", 1, now), Err(Refusal::Full));
        assert_eq!(table.admit("x", 1, now + CANCELLED_LINGER), Ok(()));
        assert_eq!(table.len(), (MAX_TRACKED - 1, 0));
    }

    #[test]
    fn an_answer_leaves_the_table_whatever_the_state() {
        let now = Instant::now();
        let mut table = InFlight::default();
        table.forward("1".into(), Flight::Passthrough, 1, None);
        table.forward(
            "2".into(),
            Flight::Expired {
                until: now + EXPIRED_LINGER,
            },
            1,
            None,
        );
        assert!(table.cancel("1", now));
        assert!(matches!(
            table.answer("1"),
            Some(Flight::Cancelled { sampling: None, .. })
        ));
        assert!(matches!(table.answer("2"), Some(Flight::Expired { .. })));
        assert!(table.answer("1").is_none(), "a second answer finds nothing");
        assert_eq!(table.admit("1", 1, now), Ok(()));
        // An expired request lapses after its linger.
        table.forward(
            "3".into(),
            Flight::Expired {
                until: now + EXPIRED_LINGER,
            },
            1,
            None,
        );
        assert_eq!(table.admit("3", 1, now), Err(Refusal::InFlight));
        let swept = table.sweep(now + EXPIRED_LINGER);
        assert_eq!(swept.lapsed, ["3"]);
        assert_eq!(table.len(), (0, 0));
    }

    #[test]
    fn the_table_is_bounded_by_bytes_and_nothing_pending_is_evicted() {
        let now = Instant::now();
        let mut table = InFlight::default();
        let mib = 1 << 20;
        let fit = MAX_RETAINED_BYTES / mib;
        for i in 0..fit {
            let key = i.to_string();
            assert_eq!(table.admit(&key, mib, now), Ok(()));
            table.forward(key, Flight::Passthrough, mib, None);
        }
        assert_eq!(table.held().1, MAX_RETAINED_BYTES);
        assert_eq!(table.admit("x", 1, now), Err(Refusal::Full));
        assert_eq!(table.admit_round(1, now), Err(Refusal::Full));
        assert_eq!(table.len(), (fit, 0), "nothing was evicted");
        // An answer frees its bytes.
        assert!(table.answer("0").is_some());
        assert_eq!(table.admit("x", mib, now), Ok(()));
        assert_eq!(table.admit("x", mib + 1, now), Err(Refusal::Full));
        assert_eq!(Refusal::Full.code(), -32603);
        assert_eq!(
            Refusal::Full.data("s").unwrap()["retryable"],
            serde_json::Value::Bool(true)
        );
    }

    #[test]
    fn a_round_settles_once_and_lapses() {
        let now = Instant::now();
        let mut table = InFlight::default();
        assert_eq!(table.admit_round(100, now), Ok(()));
        table.ask("t1".into(), Some(Value::from("s")), Vec::new(), 100, now);
        table.ask("t2".into(), None, Vec::new(), 100, now);
        assert_eq!(table.held(), (2, 200));
        let (state, entries) = table.retry("t1", now).unwrap();
        assert_eq!(state, Some(Value::from("s")));
        assert!(entries.is_empty());
        assert_eq!(table.retry("t1", now).unwrap().0, Some(Value::from("s")));
        assert!(table.retry("t3", now).is_none(), "never minted");
        let swept = table.sweep(now + ROUND_LINGER);
        assert_eq!(swept.lapsed, ["the input requests of round t2"]);
        assert_eq!(table.held(), (0, 0));
    }

    #[test]
    fn only_a_forwarded_request_with_the_same_text_is_delivered_again() {
        let now = Instant::now();
        let mut table = InFlight::default();
        let (text, other) = ([1; 32], [2; 32]);
        table.forward("1".into(), Flight::Passthrough, 1, Some(text));
        assert!(table.redeliverable("1", &text).is_some());
        assert!(table.redeliverable("1", &other).is_none(), "another text");
        assert!(table.redeliverable("2", &text).is_none(), "another id");
        assert!(table.cancel("1", now));
        assert!(
            table.redeliverable("1", &text).is_none(),
            "the server cancelled it"
        );
        table.forward("3".into(), Flight::Passthrough, 1, Some(text));
        assert!(table.answer("3").is_some());
        assert!(
            table.redeliverable("3", &text).is_none(),
            "the client answered it"
        );
    }
}
