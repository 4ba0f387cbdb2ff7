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
//!     ├─ server cancels ──► cancelled ─ client answers / linger ─► gone (answer dropped,
//!     │                                                              consent still resolved)
//!     ├─ deadline passes ─► expired ── late answer / linger ─────► gone (answer dropped)
//!     └─ client answers with a task handle ─► task running
//!                         ├─ status completed ─► task approved ─ tasks/result ─► answered
//!                         ├─ status failed ────► task refused ── tasks/result ─► answered (policy frame)
//!                         ├─ status cancelled ─► gone (consent abandoned, budget refunded)
//!                         └─ deadline passes ──► task missed ─── tasks/result ─► answered (policy frame)
//! ```
//!
//! `received` and `decided` last one call of `Session::from_server`;
//! `answered` is the removal of the entry. An id is free again once its
//! entry is gone: a server that reuses it earlier is refused, because the
//! client's answer could not be told apart.

use std::collections::HashMap;
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

/// At most this many requests and tasks are tracked; beyond it a new server
/// request is answered with an error (lapsed entries are dropped first).
pub const MAX_TRACKED: usize = 65_536;

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
}

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
}

/// A reason a server request cannot be tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The id is still in flight (forwarded, cancelled or expired and not yet answered).
    InFlight,
    /// [`MAX_TRACKED`] requests are in flight.
    Full,
}

impl Refusal {
    /// The message of the error frame the server receives.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::InFlight => {
                "Invalid request: id already in flight (the client has not answered the earlier request with this id)"
            }
            Refusal::Full => "Invalid request: too many requests in flight",
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
}

/// Every server → client request in flight, by the JSON text of its id, and
/// every task followed, by task id.
#[derive(Debug, Default)]
pub struct InFlight {
    requests: HashMap<String, Flight>,
    tasks: HashMap<String, Task>,
}

impl InFlight {
    /// `received`: may a server request with this id be forwarded? Lapsed
    /// entries are dropped first.
    pub fn admit(&mut self, key: &str, now: Instant) -> Result<(), Refusal> {
        if let Some(flight) = self.requests.get(key) {
            if !flight.lapsed(now) {
                return Err(Refusal::InFlight);
            }
            self.requests.remove(key);
        }
        if self.requests.len() + self.tasks.len() >= MAX_TRACKED {
            self.sweep_lapsed(now);
            if self.requests.len() + self.tasks.len() >= MAX_TRACKED {
                return Err(Refusal::Full);
            }
        }
        Ok(())
    }

    /// `forwarded`: the request went to the client. Call [`InFlight::admit`] first.
    pub fn forward(&mut self, key: String, flight: Flight) {
        self.requests.insert(key, flight);
    }

    /// The client answered `key`: the entry leaves the table, whatever its
    /// state; `None` when the proxy tracks no such request.
    pub fn answer(&mut self, key: &str) -> Option<Flight> {
        self.requests.remove(key)
    }

    /// The server cancelled `key`: it stays tracked as `cancelled` until
    /// the client answers or [`CANCELLED_LINGER`] passes. Returns whether
    /// it was tracked.
    pub fn cancel(&mut self, key: &str, now: Instant) -> bool {
        let Some(flight) = self.requests.remove(key) else {
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
        self.requests.insert(key.to_owned(), next);
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
            ..
        } = sampling;
        self.tasks.insert(
            task_id,
            Task {
                origin: id,
                requested,
                state: TaskState::Running(awaiting),
                deadline,
                until: now + ttl,
            },
        );
    }

    /// Whether `task_id` is a task the proxy follows.
    pub fn follows(&self, task_id: &str) -> bool {
        self.tasks.contains_key(task_id)
    }

    /// Takes a followed task out to move it on (put it back with [`InFlight::put_task`]).
    pub fn take_task(&mut self, task_id: &str) -> Option<Task> {
        self.tasks.remove(task_id)
    }

    /// Puts a task back after a transition that did not end it.
    pub fn put_task(&mut self, task_id: String, task: Task) {
        self.tasks.insert(task_id, task);
    }

    /// The earliest deadline of a request or task still running under a grant.
    pub fn next_deadline(&self) -> Option<Instant> {
        let requests = self.requests.values().filter_map(|f| match f {
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
            .filter(|(_, f)| match f {
                Flight::Sampling(s) => {
                    matches!(s.awaiting, Awaiting::Grant(_)) && s.deadline.is_some_and(|d| d <= now)
                }
                _ => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(Flight::Sampling(sampling)) = self.requests.insert(
                key,
                Flight::Expired {
                    until: now + EXPIRED_LINGER,
                },
            ) {
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
            if let Some(task) = self.tasks.remove(&task_id) {
                swept.missed.push((task_id, task));
            }
        }
        swept.lapsed = self.sweep_lapsed(now);
        swept
    }

    fn sweep_lapsed(&mut self, now: Instant) -> Vec<String> {
        let mut lapsed: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, f)| f.lapsed(now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &lapsed {
            self.requests.remove(key);
        }
        let tasks: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for task_id in tasks {
            self.tasks.remove(&task_id);
            lapsed.push(format!("task {task_id}"));
        }
        lapsed
    }

    /// How many request ids and tasks are tracked (for tests and bounds).
    pub fn len(&self) -> (usize, usize) {
        (self.requests.len(), self.tasks.len())
    }

    /// The state of `key`, for tests and logs.
    pub fn state(&self, key: &str) -> Option<&'static str> {
        self.requests.get(key).map(Flight::name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_refused_while_in_flight_and_free_after_its_linger() {
        let now = Instant::now();
        let mut table = InFlight::default();
        assert_eq!(table.admit("5", now), Ok(()));
        table.forward("5".into(), Flight::Passthrough);
        assert_eq!(table.admit("5", now), Err(Refusal::InFlight));
        assert!(table.cancel("5", now));
        assert_eq!(table.state("5"), Some("cancelled"));
        assert_eq!(
            table.admit("5", now + CANCELLED_LINGER / 2),
            Err(Refusal::InFlight)
        );
        assert_eq!(table.admit("5", now + CANCELLED_LINGER), Ok(()));
        assert_eq!(table.len(), (0, 0));
        assert!(!table.cancel("6", now), "an unknown id is not tracked");
    }

    #[test]
    fn the_table_is_bounded_and_lapsed_entries_make_room() {
        let now = Instant::now();
        let mut table = InFlight::default();
        for i in 0..MAX_TRACKED {
            let key = i.to_string();
            assert_eq!(table.admit(&key, now), Ok(()));
            table.forward(key, Flight::Passthrough);
        }
        assert_eq!(table.admit("x", now), Err(Refusal::Full));
        // A cancelled request lingers, then its slot is free again.
        assert!(table.cancel("0", now));
        assert_eq!(table.admit("x", now), Err(Refusal::Full));
        assert_eq!(table.admit("x", now + CANCELLED_LINGER), Ok(()));
        assert_eq!(table.len(), (MAX_TRACKED - 1, 0));
    }

    #[test]
    fn an_answer_leaves_the_table_whatever_the_state() {
        let now = Instant::now();
        let mut table = InFlight::default();
        table.forward("1".into(), Flight::Passthrough);
        table.forward(
            "2".into(),
            Flight::Expired {
                until: now + EXPIRED_LINGER,
            },
        );
        assert!(table.cancel("1", now));
        assert!(matches!(
            table.answer("1"),
            Some(Flight::Cancelled { sampling: None, .. })
        ));
        assert!(matches!(table.answer("2"), Some(Flight::Expired { .. })));
        assert!(table.answer("1").is_none(), "a second answer finds nothing");
        assert_eq!(table.admit("1", now), Ok(()));
        // An expired request lapses after its linger.
        table.forward(
            "3".into(),
            Flight::Expired {
                until: now + EXPIRED_LINGER,
            },
        );
        assert_eq!(table.admit("3", now), Err(Refusal::InFlight));
        let swept = table.sweep(now + EXPIRED_LINGER);
        assert_eq!(swept.lapsed, ["3"]);
        assert_eq!(table.len(), (0, 0));
    }
}
