//! The decision thread: what needs the decision store is decided off the
//! thread that reads the server (`proxy/PROXY.md`, "Decisions off the reader").
//!
//! A decision may wait for the store up to its bound (5 s by default for
//! PostgreSQL, `docs/spec/store.md`, "Bounded calls"). Decided on the
//! reader, it held up every frame behind it: a server's `ping`, its
//! notifications, its answers to the client's calls. With the decision
//! thread, the reader registers a sampling request's id (so a second
//! request with it is still refused at once), queues the request, and
//! reads on; frames that need no store pass at once. The thread decides
//! the queued work in the order the server wrote it. A
//! `notifications/cancelled` read while decisions are queued or running is
//! queued behind them, so that the client never sees a cancellation before
//! the request it cancels.
//!
//! The proxy starts the thread ([`Session::spawn_decider`]); a session
//! without one (the unit tests, the model test, the fuzz target) decides
//! on the calling thread, as before.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use serde_json::Value;

use super::{Session, body, lock};

/// Work the decision thread does, in the order the server wrote it.
#[derive(Debug)]
pub(super) enum Job {
    /// A sampling request (its id already registered; `key` empty for a
    /// request without id).
    Sampling { raw: Vec<u8>, key: String },
    /// A result with `resultType: "input_required"` answering the client's call `id`.
    InputRequired { raw: Vec<u8>, id: Value },
    /// A `notifications/cancelled` read while decisions were queued.
    Cancelled { raw: Vec<u8> },
}

#[derive(Debug, Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// A job is being decided.
    busy: bool,
    /// No more jobs will come: the thread ends once the queue is empty.
    closed: bool,
}

/// The queue between the reader and the decision thread.
#[derive(Debug, Default)]
pub(super) struct Decider {
    queue: Mutex<Queue>,
    changed: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Decider {
    fn push(&self, job: Job) {
        lock(&self.queue).jobs.push_back(job);
        self.changed.notify_all();
    }

    /// Whether nothing is queued or being decided.
    fn idle(&self) -> bool {
        let queue = lock(&self.queue);
        queue.jobs.is_empty() && !queue.busy
    }

    /// The next job (marking the queue busy), or `None` once closed and empty.
    fn next(&self) -> Option<Job> {
        let mut queue = lock(&self.queue);
        queue.busy = false;
        self.changed.notify_all();
        loop {
            if let Some(job) = queue.jobs.pop_front() {
                queue.busy = true;
                return Some(job);
            }
            if queue.closed {
                return None;
            }
            queue = match self.changed.wait(queue) {
                Ok(queue) => queue,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
    }
}

impl Session {
    /// Decides, from now on, every sampling request and `input_required`
    /// result on a thread of its own, in the order the server wrote them,
    /// so that frames that need no store pass while a decision waits for
    /// it. `wake` is called when a decision added a deadline (the proxy's
    /// deadline thread must recompute). Once per session; a second call
    /// does nothing.
    pub fn spawn_decider(self: &Arc<Self>, wake: Box<dyn Fn() + Send>) -> std::io::Result<()> {
        let decider = Arc::new(Decider::default());
        if self.decider.set(Arc::clone(&decider)).is_err() {
            return Ok(());
        }
        let session = Arc::clone(self);
        let worker = Arc::clone(&decider);
        let thread = std::thread::Builder::new()
            .name("decisions".into())
            .spawn(move || {
                while let Some(job) = worker.next() {
                    session.run_job(job);
                    if session.take_new_deadline() {
                        wake();
                    }
                }
            })?;
        *lock(&decider.thread) = Some(thread);
        Ok(())
    }

    /// The server's output ended: decides what is still queued and stops
    /// the decision thread (a no-op without one).
    pub fn finish_decisions(&self) {
        let Some(decider) = self.decider.get() else {
            return;
        };
        lock(&decider.queue).closed = true;
        decider.changed.notify_all();
        if let Some(thread) = lock(&decider.thread).take()
            && thread.join().is_err()
        {
            self.log.line(format_args!("the decision thread panicked"));
        }
    }

    /// Queues `job` when a decision thread runs; else gives it back, to be
    /// done on the calling thread.
    pub(super) fn defer(&self, job: Job) -> Option<Job> {
        match self.decider.get() {
            Some(decider) => {
                decider.push(job);
                None
            }
            None => Some(job),
        }
    }

    /// Whether decisions are queued or running (a cancellation then queues
    /// behind them).
    pub(super) fn deciding(&self) -> bool {
        self.decider.get().is_some_and(|decider| !decider.idle())
    }

    pub(super) fn run_job(&self, job: Job) {
        match job {
            Job::Sampling { raw, key } => {
                self.schedule_flush();
                self.sampling_request(&raw, body(&raw), key);
            }
            Job::InputRequired { raw, id } => {
                self.schedule_flush();
                self.input_required(&raw, body(&raw), &id);
            }
            Job::Cancelled { raw } => {
                self.server_cancelled(body(&raw));
                self.send_client(&raw);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::sync::{Arc, Condvar, Mutex};
    use std::time::{Duration, Instant};

    use mcpolicy_compiler::db::{self, Database, SourceText};
    use mcpolicy_runtime::Engine;
    use mcpolicy_runtime::clock::SystemClock;
    use mcpolicy_runtime::store::{
        Admission, DecisionKey, DecisionStore, Evaluation, LimitCheck, MemoryStore, Millis,
        ReplayOrAdmit, Reservation, ServerStats, StoreError, StoredDecision,
    };
    use serde_json::Value;

    use crate::capture::Captured;
    use crate::log::Log;
    use crate::session::Session;

    /// A store whose decisions wait until the test opens its gate: a
    /// database that hangs.
    #[derive(Debug, Default)]
    struct Gated {
        inner: MemoryStore,
        open: Mutex<bool>,
        opened: Condvar,
    }

    impl Gated {
        fn wait(&self) {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
        }

        fn open(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    impl DecisionStore for Gated {
        fn replay(
            &self,
            key: &DecisionKey,
            digest: &str,
            now: Millis,
        ) -> Result<Option<StoredDecision>, StoreError> {
            self.wait();
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
            self.inner.settle(server_id, reservation, counter, actual)
        }
        fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
            self.inner.record(key, decision)
        }
        fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
            self.inner.get(key)
        }
        fn purge_stale(
            &self,
            server_id: &str,
            digest: &str,
            now: Millis,
        ) -> Result<u64, StoreError> {
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

    const SAMPLE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":100}}"#;
    const PING: &str = r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#;
    const NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
    const ANSWER: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
    const CANCEL: &str =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;

    fn lines_within(client: &Captured, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut lines = Vec::new();
        while lines.len() < n && Instant::now() < deadline {
            lines.extend(client.take());
            std::thread::sleep(Duration::from_millis(5));
        }
        lines
    }

    /// While a decision waits for the store, a `ping`, a notification and
    /// an answer from the server reach the client at once; a cancellation
    /// of the waiting request waits behind it, so the client sees the
    /// request first; then the decision completes in order.
    #[test]
    fn traffic_that_needs_no_store_passes_while_a_decision_waits() {
        let db = Database::default();
        let source = SourceText::new(
            &db,
            "t.mcpolicy".into(),
            include_str!("../../tests/fixtures/session.mcpolicy").into(),
        );
        let table = db::lower_file(&db, source).clone().unwrap();
        let policy = mcpolicy_runtime::Policy::verify(table).unwrap();
        let store = Arc::new(Gated::default());
        let engine = Engine::new(
            policy,
            Arc::clone(&store) as Arc<dyn DecisionStore>,
            Arc::new(SystemClock),
        );
        let (server, client) = (Captured::default(), Captured::default());
        let session = Arc::new(Session::new(
            engine,
            "any",
            Box::new(server.clone()),
            Box::new(client.clone()),
            Log::to(Box::new(std::io::sink()), "any"),
            None,
        ));
        session.spawn_decider(Box::new(|| {})).unwrap();
        session.from_server(SAMPLE.as_bytes());
        for frame in [PING, NOTE, ANSWER] {
            session.from_server(frame.as_bytes());
        }
        assert_eq!(lines_within(&client, 3), [PING, NOTE, ANSWER]);
        session.from_server(CANCEL.as_bytes());
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            client.take().is_empty(),
            "a cancellation passed its request"
        );
        store.open();
        let lines = lines_within(&client, 2);
        assert_eq!(lines.len(), 2, "{lines:?}");
        let forwarded: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(forwarded["method"], "sampling/createMessage");
        assert_eq!(forwarded["id"], 7);
        assert_eq!(lines[1], CANCEL);
        session.finish_decisions();
        assert!(server.take().is_empty());
    }
}
