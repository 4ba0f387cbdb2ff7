//! The reference model of a proxied session, shared by the model test
//! (`proxy/tests/proxy_state_machine.rs`, which drives the session
//! directly) and by `cli/tests/model_shells.rs` (which drives the same ops
//! through the real `mcpc proxy` and `mcpc gateway`): the ops, the
//! `World` that plays server and client and checks the invariants
//! (`proxy_state_machine.rs` lists them), and the `Shell` a session is
//! reached through.
#![allow(dead_code, reason = "each includer uses its part")]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Value, json};

pub const POLICY: &str = r#"
mcpolicy 1
protocol 2025-11-25
error_code -32010
identity messages

defaults {
  max_tokens 1000
}

server "s" {
  consent first
  deadline 5s
  budget 4 requests per day
}
"#;

/// The session under test behind one of its transports: called directly
/// (`proxy_state_machine.rs`), or through the real `mcpc proxy` and
/// `mcpc gateway` (`cli/tests/model_shells.rs`). A shell that carries
/// messages over a real transport makes each `take_*` see everything its
/// inputs so far caused (it synchronises first).
pub trait Shell {
    /// Whether it can carry `op` (a real transport has no stepped clock,
    /// and only HTTP resumes streams).
    fn carries(&self, op: &Op) -> bool;
    /// Whether its clocks can be stepped (`Op::Step`).
    fn steps(&self) -> bool;
    /// A line the server wrote.
    fn server_says(&mut self, frame: &[u8]);
    /// A line the server sent again on a stream resumed ahead of it.
    fn server_again(&mut self, frame: &[u8]);
    /// A line the client wrote.
    fn client_says(&mut self, frame: &[u8]);
    /// The store's clock forward `ms` (and the monotonic clock), or back;
    /// the deadlines run. Returns the trace line.
    fn step(&mut self, ms: u32, back: bool) -> String;
    /// The session ends (the proxy process exits): consents never
    /// answered are closed in the audit.
    fn end(&mut self);
    /// A new session over the same store, after [`Shell::end`].
    fn restart(&mut self);
    fn take_server(&mut self) -> Vec<String>;
    fn take_client(&mut self) -> Vec<String>;
    fn take_log(&mut self) -> Vec<String>;
    fn take_audit(&mut self) -> Vec<String>;
}

pub const BUDGET: i64 = 4;
/// 2026-03-10T01:00:00Z: steps stay within this day (see `Op::Step`).
pub const START_MS: i64 = 1_773_104_400_000;
const CANCELLED_LINGER: Duration = Duration::from_secs(600);
const EXPIRED_LINGER: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
pub enum How {
    Approve,
    Refuse,
    Fail,
    Task,
}

#[derive(Clone, Debug)]
pub enum Op {
    /// A sampling request; `task` asks the client to run it as a task.
    Sample {
        id: u8,
        prompt: u8,
        task: bool,
    },
    Ping {
        id: u8,
    },
    /// `tasks/get` (or `tasks/result`) about the `pick`-th task the server knows.
    Poll {
        id: u8,
        pick: u8,
        result: bool,
    },
    /// The server cancels the `pick`-th of its requests in flight.
    Cancel {
        pick: u8,
    },
    /// The client answers the `pick`-th request it has not answered.
    Answer {
        pick: u8,
        how: How,
    },
    /// The client answers the `pick`-th request it already answered, again.
    Again {
        pick: u8,
    },
    /// The server sends the `pick`-th request the client received again,
    /// as on a stream resumed ahead of it (`Session::from_server_again`).
    Resend {
        pick: u8,
    },
    /// The client announces a status for the `pick`-th of its tasks.
    Status {
        pick: u8,
        how: How,
    },
    /// Both clocks forward `ms` (the deadline sweep runs), or the store's
    /// clock back (`back`).
    Step {
        ms: u32,
        back: bool,
    },
    Restart,
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![
        Just(How::Approve),
        Just(How::Refuse),
        Just(How::Fail),
        Just(How::Task)
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..5, 0u8..4, any::<bool>()).prop_map(|(id, prompt, task)| Op::Sample { id, prompt, task }),
        1 => (0u8..5).prop_map(|id| Op::Ping { id }),
        3 => (0u8..5, any::<u8>(), any::<bool>()).prop_map(|(id, pick, result)| Op::Poll { id, pick, result }),
        2 => any::<u8>().prop_map(|pick| Op::Cancel { pick }),
        6 => (any::<u8>(), how()).prop_map(|(pick, how)| Op::Answer { pick, how }),
        1 => any::<u8>().prop_map(|pick| Op::Again { pick }),
        1 => any::<u8>().prop_map(|pick| Op::Resend { pick }),
        1 => (any::<u8>(), how()).prop_map(|(pick, how)| Op::Status { pick, how }),
        // Up to 10 min per step and at most 60 steps: the case stays in
        // one calendar day (budget windows are item 9's, tested in the store).
        2 => (0u32..600_000, any::<bool>()).prop_map(|(ms, back)| Op::Step { ms, back }),
        1 => Just(Op::Restart),
    ]
}

/// What a server request is.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Sampling { prompt: u8, task: bool },
    Ping,
    TaskGet(String),
    TaskResult(String),
}

/// One request the server sent, as the server sees it.
#[derive(Debug)]
struct Sent {
    id: u64,
    kind: Kind,
    answers: u32,
    cancelled: bool,
    /// Set when the server cancelled it (for the linger).
    cancelled_at: Option<Duration>,
    /// The proxy's decision (from the audit): asked the user.
    consent: bool,
    /// The client already gave the answer that decides (first one wins).
    decided: bool,
    /// The proxy sent it on to the client.
    forwarded: bool,
    /// The client answered it.
    client_answered: bool,
    /// The proxy stops holding it for the client's answer at this time
    /// (set when the server cancels it, or the proxy answers it at its
    /// deadline; see `inflight.rs`'s lingers). `None`: held until answered.
    held_until: Option<Duration>,
    /// Its proxy process is gone (restart).
    gone: bool,
    /// Its text, as the server wrote it.
    text: String,
    /// The frame the client received for it.
    shown: Option<String>,
}

/// A task the client runs.
#[derive(Debug)]
struct ClientTask {
    origin: usize,
    /// `working`, `completed`, `failed` or `cancelled`.
    status: &'static str,
    /// The proxy learnt its terminal state (model of first-signal-wins), or
    /// never followed the task.
    decided: bool,
}

pub struct World {
    /// The session under test, behind one of its transports.
    shell: Box<dyn Shell>,
    /// The monotonic clock's advance (stepped by `Op::Step`), for the lingers.
    mono: Duration,
    /// Every request the server sent (index = tag).
    sent: Vec<Sent>,
    /// Ids with a request the server has not seen answered nor cancelled.
    live: HashMap<u64, usize>,
    /// Tasks the server learnt of (creation handles that reached it).
    server_tasks: Vec<String>,
    /// Requests the client received, by tag, in order.
    received: Vec<usize>,
    client_tasks: BTreeMap<String, ClientTask>,
    /// Identities (prompts) whose refusal is stored.
    refused: BTreeSet<u8>,
    /// Budget spent today: forwarded sampling requests minus refunds.
    spent: i64,
    /// Consent prompts the audit opened (a `decision` line with outcome
    /// `consent`) and has not closed yet (a `consent` line), by the
    /// request's id and identity.
    prompts_open: HashMap<(String, String), u32>,
    trace: Vec<String>,
}

/// Fails the case with `$msg` and the world's trace unless `$cond`
/// (every model's worlds have a `trace`).
macro_rules! check {
    ($world:expr, $cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!(
                "{}\ntrace:\n  {}",
                format!($($msg)+),
                $world.trace.join("\n  ")
            )));
        }
    };
}
#[allow(
    unused_imports,
    reason = "model_shells.rs uses only the World that calls it"
)]
pub(crate) use check;

impl World {
    pub fn new(shell: Box<dyn Shell>) -> World {
        World {
            shell,
            mono: Duration::ZERO,
            sent: Vec::new(),
            live: HashMap::new(),
            server_tasks: Vec::new(),
            received: Vec::new(),
            client_tasks: BTreeMap::new(),
            refused: BTreeSet::new(),
            spent: 0,
            prompts_open: HashMap::new(),
            trace: Vec::new(),
        }
    }

    fn mono_now(&self) -> Duration {
        self.mono
    }

    /// The server sends request `kind` with `id`; returns its tag.
    fn send(&mut self, id: u64, kind: Kind) -> Result<(), TestCaseError> {
        let tag = self.sent.len();
        let frame = match &kind {
            Kind::Sampling { prompt, task } => {
                let mut params = json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": format!("prompt {prompt}")}}],
                    "maxTokens": 100,
                    "metadata": {"tag": tag},
                });
                if *task {
                    params["task"] = json!({"ttl": 86_400_000});
                }
                json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": params})
            }
            Kind::Ping => {
                json!({"jsonrpc": "2.0", "id": id, "method": "ping", "params": {"_meta": {"tag": tag}}})
            }
            Kind::TaskGet(t) => {
                json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": t, "_meta": {"tag": tag}}})
            }
            Kind::TaskResult(t) => {
                json!({"jsonrpc": "2.0", "id": id, "method": "tasks/result", "params": {"taskId": t, "_meta": {"tag": tag}}})
            }
        };
        self.sent.push(Sent {
            id,
            kind: kind.clone(),
            answers: 0,
            cancelled: false,
            cancelled_at: None,
            consent: false,
            decided: false,
            forwarded: false,
            client_answered: false,
            held_until: None,
            gone: false,
            text: frame.to_string(),
            shown: None,
        });
        // The proxy must refuse the id while it holds another request with it.
        let blocked = (0..tag).any(|t| self.sent[t].id == id && self.held(t));
        let previous = self.live.insert(id, tag);
        self.shell.server_says(frame.to_string().as_bytes());
        // Whatever the proxy answers at once with this id answers this request.
        let answered = self.observe(Some((id, tag)), previous)?;
        let in_flight = answered.iter().any(|f| {
            f["error"]["code"] == -32600
                && f["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("in flight"))
        });
        check!(
            self,
            blocked == in_flight,
            "request #{tag} (id {id}): the id is held: {blocked}, refused as in flight: {in_flight}"
        );
        Ok(())
    }

    /// The server sends request `pick` of those the client received
    /// again, on a stream resumed ahead of it: while the proxy holds it
    /// forwarded (not cancelled, not answered at its deadline), the client
    /// gets the very frame it got first, and nothing is decided, answered
    /// or audited; while the proxy holds it otherwise, the id is refused as
    /// in flight. (An id the proxy no longer holds makes a new request,
    /// which `Op::Sample` covers.)
    fn resend(&mut self, pick: u8) -> Result<(), TestCaseError> {
        if self.received.is_empty() {
            return Ok(());
        }
        let tag = self.received[pick as usize % self.received.len()];
        let id = self.sent[tag].id;
        let again = self.held(tag)
            && !self.sent[tag].cancelled
            && self.sent[tag].held_until.is_none()
            && self.live.get(&id) == Some(&tag);
        let blocked = (0..self.sent.len()).any(|t| self.sent[t].id == id && self.held(t));
        if !again && !blocked {
            return Ok(());
        }
        self.trace.push(format!(
            "server sends #{tag} (id {id}) again on a resumed stream{}",
            if again { "" } else { ", the id held otherwise" }
        ));
        let text = self.sent[tag].text.clone();
        self.shell.server_again(text.as_bytes());
        let (to_server, to_client, audit) = (
            self.shell.take_server(),
            self.shell.take_client(),
            self.shell.take_audit(),
        );
        check!(
            self,
            audit.is_empty(),
            "#{tag} sent again was decided again: {audit:?}"
        );
        if again {
            let shown: Vec<String> = self.sent[tag].shown.iter().cloned().collect();
            check!(
                self,
                to_client == shown && to_server.is_empty(),
                "#{tag} sent again: the client got {to_client:?} (first {shown:?}), the server {to_server:?}"
            );
        } else {
            let refused = to_server.len() == 1 && {
                let frame: Value = serde_json::from_str(&to_server[0]).unwrap();
                frame["id"] == id && frame["error"]["code"] == -32600
            };
            check!(
                self,
                refused && to_client.is_empty(),
                "#{tag} sent again while its id is held otherwise: the server got {to_server:?}, the client {to_client:?}"
            );
        }
        Ok(())
    }

    /// Whether the proxy still holds request `tag` for the client's answer.
    fn held(&self, tag: usize) -> bool {
        let s = &self.sent[tag];
        s.forwarded
            && !s.client_answered
            && !s.gone
            && s.held_until.is_none_or(|until| self.mono_now() < until)
    }

    /// Reads what the session wrote: answers to the server, frames to the
    /// client, the audit. `fresh` is the request of this step (its
    /// immediate answers are its own); `previous` the request that held
    /// its id before, if any, which is live again unless answered.
    fn observe(
        &mut self,
        fresh: Option<(u64, usize)>,
        previous: Option<usize>,
    ) -> Result<Vec<Value>, TestCaseError> {
        let to_server = self.shell.take_server();
        let mut fresh_answered = false;
        let mut answered = Vec::new();
        for line in &to_server {
            let frame: Value = serde_json::from_str(line).unwrap();
            if frame["method"] == "notifications/tasks/status" {
                continue; // the client's own notification, passed on
            }
            check!(
                self,
                frame.get("method").is_none(),
                "the proxy sent the server a request or notification: {line}"
            );
            let id = frame["id"].as_u64();
            let tag = match (fresh, id) {
                (Some((fid, ftag)), Some(id)) if fid == id && !fresh_answered => {
                    fresh_answered = true;
                    Some(ftag)
                }
                (_, Some(id)) => self.live.get(&id).copied().or_else(|| {
                    // The request this step's id displaced is still live.
                    previous.filter(|p| self.sent[*p].id == id)
                }),
                _ => None,
            };
            check!(
                self,
                tag.is_some(),
                "an answer matches no request in flight: {line}"
            );
            let tag = tag.unwrap();
            if let Some(carried) = carried_tag(&frame) {
                check!(
                    self,
                    carried == tag,
                    "request #{tag} received the client's answer to #{carried}: {line}"
                );
            }
            if self.sent[tag].forwarded && !self.sent[tag].client_answered {
                // The proxy answered for the client (deadline): the late answer lingers.
                self.sent[tag].held_until = Some(self.mono_now() + EXPIRED_LINGER);
            }
            if frame.pointer("/error/data/reason") == Some(&Value::from("user.denied")) {
                // Only the user refuses: the identity must be one whose
                // refusal is stored, or this is the result of a task the
                // user refused (a later approval of the same identity
                // replaced the stored refusal, not this task's answer).
                let prompt = self.prompt_of(tag);
                let task_refused = matches!(&self.sent[tag].kind,
                    Kind::TaskResult(t) if self.client_tasks.get(t).is_some_and(|c| c.status == "failed"));
                check!(
                    self,
                    task_refused || prompt.is_some_and(|p| self.refused.contains(&p)),
                    "request #{tag} (prompt {prompt:?}) answered user.denied, which the user never said: {line}"
                );
            }
            let sent = &mut self.sent[tag];
            check!(
                self,
                !sent.cancelled,
                "request #{tag} was answered after the server cancelled it: {line}"
            );
            sent.answers += 1;
            check!(
                self,
                sent.answers == 1,
                "request #{tag} answered twice: {line}"
            );
            if self.live.get(&sent.id) == Some(&tag) {
                self.live.remove(&sent.id);
            }
            if let Some(handle) = frame.pointer("/result/task/taskId").and_then(Value::as_str) {
                self.server_tasks.push(handle.to_owned());
            }
            answered.push(frame);
        }
        if let (Some((id, _)), Some(prev), true) = (fresh, previous, fresh_answered) {
            // Refused or denied at once: the earlier request keeps the id.
            if self.sent[prev].answers == 0 && !self.sent[prev].cancelled {
                self.live.insert(id, prev);
            }
        }
        for line in self.shell.take_audit() {
            let entry: Value = serde_json::from_str(&line).unwrap();
            // `proxy/PROXY.md`, "The audit log": every consent the audit
            // opens is closed by exactly one `consent` line.
            let prompt = (entry["id"].to_string(), entry["identity"].to_string());
            if entry["event"] == "decision" && entry["outcome"] == "consent" {
                *self.prompts_open.entry(prompt).or_default() += 1;
            } else if entry["event"] == "consent" {
                let open = self.prompts_open.get_mut(&prompt);
                check!(
                    self,
                    open.as_ref().is_some_and(|n| **n > 0),
                    "a consent line closes no open prompt: {line}"
                );
                if let Some(open) = open {
                    *open -= 1;
                }
            }
            // A decision is taken in the step of its request (the audit's
            // `requested` lists only the decided fields).
            if entry["event"] == "decision" && entry["outcome"] == "consent" {
                check!(
                    self,
                    fresh.is_some(),
                    "a decision outside its request's step: {line}"
                );
                if let Some((_, tag)) = fresh {
                    self.sent[tag].consent = true;
                }
            }
        }
        for line in self.shell.take_client() {
            let frame: Value = serde_json::from_str(&line).unwrap();
            if frame["method"] == "notifications/cancelled" {
                continue;
            }
            let tag = frame
                .pointer("/params/metadata/tag")
                .or_else(|| frame.pointer("/params/_meta/tag"))
                .and_then(Value::as_u64);
            check!(
                self,
                tag.is_some(),
                "the client received an untagged frame: {line}"
            );
            let tag = tag.unwrap() as usize;
            if let Kind::Sampling { prompt, .. } = self.sent[tag].kind {
                check!(
                    self,
                    !self.refused.contains(&prompt),
                    "request #{tag} (prompt {prompt}) was forwarded although its refusal is stored"
                );
                self.spent += 1;
                check!(
                    self,
                    self.spent <= BUDGET,
                    "budget overspent: {} of {BUDGET} requests today",
                    self.spent
                );
            }
            check!(
                self,
                !self.sent[tag].forwarded,
                "request #{tag} forwarded twice"
            );
            self.sent[tag].forwarded = true;
            self.sent[tag].shown = Some(line);
            self.received.push(tag);
        }
        Ok(answered)
    }

    /// The client sends `frame` answering request `tag`; it must reach the
    /// server or be dropped with a log line.
    fn client_sends(&mut self, tag: usize, frame: Value) -> Result<Vec<Value>, TestCaseError> {
        self.shell.take_log();
        self.shell.client_says(frame.to_string().as_bytes());
        let answered = self.observe(None, None)?;
        let logged = self.shell.take_log();
        let dropped = logged.iter().any(|l| l.contains("dropped"));
        check!(
            self,
            answered.len() + usize::from(dropped) == 1,
            "the client's answer to #{tag} reached the server {} times, dropped: {dropped}",
            answered.len()
        );
        Ok(answered)
    }

    /// Records the user's refusal of (or a client failure on) consent
    /// request `origin`, if it is still the deciding answer.
    fn decide(&mut self, origin: usize, outcome: Outcome) {
        let sent = &mut self.sent[origin];
        // The user's -1 is a refusal whenever it comes: also on a request
        // the proxy let through without asking (a replayed approval), unless
        // the proxy already answered it at its deadline.
        let refused_grant =
            matches!(outcome, Outcome::Refused) && !sent.consent && sent.answers == 0;
        if (!sent.consent && !refused_grant) || sent.decided {
            return;
        }
        let Kind::Sampling { prompt, .. } = sent.kind else {
            return;
        };
        sent.decided = true;
        match outcome {
            // The approval is stored under the approval key; a refusal of
            // the same request, under its refusal key, still answers first
            // (`docs/spec/identity.md`, "Two keys").
            Outcome::Approved => {}
            Outcome::Refused => {
                self.refused.insert(prompt);
                self.spent -= 1;
            }
            Outcome::Abandoned => self.spent -= 1,
        }
    }

    fn answer(&mut self, pick: u8, how: How) -> Result<(), TestCaseError> {
        let open: Vec<usize> = self
            .received
            .iter()
            .copied()
            .filter(|t| !self.sent[*t].client_answered)
            .collect();
        if open.is_empty() {
            return Ok(());
        }
        let tag = open[pick as usize % open.len()];
        let id = self.sent[tag].id;
        let kind = self.sent[tag].kind.clone();
        let held = self.held(tag);
        if !held && self.id_held_by_another(id, tag) {
            // The documented bound: after its linger, a request's late
            // answer cannot be told from the answer to a newer request
            // with its id. Not sent.
            self.sent[tag].client_answered = true;
            return Ok(());
        }
        self.sent[tag].client_answered = true;
        let cancelled = self.sent[tag].cancelled;
        let (frame, outcome) = match (&kind, how) {
            (Kind::Sampling { task: true, .. }, How::Task) => {
                let task_id = format!("t{tag}");
                self.client_tasks.insert(
                    task_id.clone(),
                    ClientTask {
                        origin: tag,
                        status: "working",
                        // The proxy follows the task only if it still held
                        // the request when the handle came.
                        decided: !held,
                    },
                );
                let frame = json!({"jsonrpc": "2.0", "id": id, "result": {
                    "task": {"taskId": task_id, "status": "working", "ttl": 86_400_000},
                    "_meta": {"tag": tag}}});
                (frame, None)
            }
            (Kind::Sampling { .. }, How::Approve | How::Task) => {
                (completion(id, tag), Some(Outcome::Approved))
            }
            (Kind::Sampling { .. }, How::Refuse) => (error(id, -1, tag), Some(Outcome::Refused)),
            (Kind::Sampling { .. }, How::Fail) => {
                (error(id, -32603, tag), Some(Outcome::Abandoned))
            }
            (Kind::Ping, _) => (
                json!({"jsonrpc": "2.0", "id": id, "result": {"_meta": {"tag": tag}}}),
                None,
            ),
            (Kind::TaskGet(t) | Kind::TaskResult(t), how) => {
                let result = matches!(kind, Kind::TaskResult(_));
                return self.answer_task_query(tag, id, t.clone(), result, how, held && !cancelled);
            }
        };
        if let (Some(outcome), true) = (outcome, held) {
            self.decide(tag, outcome);
        }
        self.trace
            .push(format!("client answers #{tag} (id {id}) {how:?}"));
        // Still waiting for this answer: not cancelled, not answered at its deadline.
        let awaited = held && !cancelled && self.sent[tag].answers == 0;
        let answered = self.client_sends(tag, frame)?;
        if matches!((&kind, how), (Kind::Sampling { .. }, How::Fail)) && awaited {
            // A client failure is not a decision: the server gets the client's own error.
            let own = answered.first().and_then(carried_tag) == Some(tag);
            check!(
                self,
                own,
                "the client's error to #{tag} did not reach the server unchanged: {answered:?}"
            );
        }
        Ok(())
    }

    /// The prompt a sampling request, or a task poll, is about.
    fn prompt_of(&self, tag: usize) -> Option<u8> {
        match &self.sent[tag].kind {
            Kind::Sampling { prompt, .. } => Some(*prompt),
            Kind::TaskGet(t) | Kind::TaskResult(t) => {
                let origin: usize = t.strip_prefix('t')?.parse().ok()?;
                match self.sent.get(origin)?.kind {
                    Kind::Sampling { prompt, .. } => Some(prompt),
                    _ => None,
                }
            }
            Kind::Ping => None,
        }
    }

    fn id_held_by_another(&self, id: u64, tag: usize) -> bool {
        (0..self.sent.len()).any(|t| t != tag && self.sent[t].id == id && self.held(t))
    }

    fn answer_task_query(
        &mut self,
        tag: usize,
        id: u64,
        task_id: String,
        result: bool,
        how: How,
        live: bool,
    ) -> Result<(), TestCaseError> {
        let Some(task) = self.client_tasks.get_mut(&task_id) else {
            let frame = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": format!("no task @{tag}@")}});
            self.client_sends(tag, frame)?;
            return Ok(());
        };
        if task.status == "working" {
            task.status = match how {
                How::Approve => "completed",
                How::Refuse => "failed",
                How::Fail => "working",
                How::Task => "cancelled",
            };
        }
        let status = task.status;
        let origin = task.origin;
        let frame = if result {
            match (status, how) {
                ("completed", _) => completion(id, tag),
                // A task the user was asked about fails with the user's
                // -1; one under a grant fails as a provider would.
                ("failed", _) if self.sent[origin].consent => error(id, -1, tag),
                ("failed", _) => error(id, -32603, tag),
                _ => error(id, -32603, tag),
            }
        } else {
            // A refused task fails with MCP's rejection message, as clients
            // of the TypeScript SDK report it (the only form a status has).
            json!({"jsonrpc": "2.0", "id": id, "result": {"taskId": task_id, "status": status,
                "statusMessage": status_message(status, self.sent[origin].consent), "_meta": {"tag": tag}}})
        };
        // The first terminal signal the proxy sees decides (see session.rs).
        if live && !self.client_tasks[&task_id].decided {
            let outcome = match (status, result) {
                ("completed", _) => Some(Outcome::Approved),
                ("failed", _) => Some(Outcome::Refused),
                ("cancelled", _) | (_, true) => Some(Outcome::Abandoned),
                _ => None,
            };
            if let Some(outcome) = outcome {
                self.client_tasks.get_mut(&task_id).unwrap().decided = true;
                self.decide(origin, outcome);
            }
        }
        if result && live {
            // `tasks/result` ends the proxy's following of the task.
            self.client_tasks.get_mut(&task_id).unwrap().decided = true;
        }
        self.trace.push(format!(
            "client answers #{tag} (id {id}, {} {task_id}) {how:?}: {status}",
            if result { "tasks/result" } else { "tasks/get" }
        ));
        self.client_sends(tag, frame)?;
        Ok(())
    }

    pub fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Sample { id, prompt, task } => {
                self.trace.push(format!(
                    "server #{} id {id}: sample prompt {prompt}{}",
                    self.sent.len(),
                    if task { " as a task" } else { "" }
                ));
                self.send(u64::from(id), Kind::Sampling { prompt, task })?;
            }
            Op::Ping { id } => {
                self.trace
                    .push(format!("server #{} id {id}: ping", self.sent.len()));
                self.send(u64::from(id), Kind::Ping)?;
            }
            Op::Poll { id, pick, result } => {
                if self.server_tasks.is_empty() {
                    return Ok(());
                }
                let task = self.server_tasks[pick as usize % self.server_tasks.len()].clone();
                self.trace.push(format!(
                    "server #{} id {id}: {} {task}",
                    self.sent.len(),
                    if result { "tasks/result" } else { "tasks/get" }
                ));
                let kind = if result {
                    Kind::TaskResult(task)
                } else {
                    Kind::TaskGet(task)
                };
                self.send(u64::from(id), kind)?;
            }
            Op::Cancel { pick } => {
                let mut live: Vec<(u64, usize)> = self.live.iter().map(|(k, v)| (*k, *v)).collect();
                if live.is_empty() {
                    return Ok(());
                }
                live.sort_unstable();
                let (id, tag) = live[pick as usize % live.len()];
                self.trace.push(format!("server cancels #{tag} (id {id})"));
                self.live.remove(&id);
                let now = self.mono_now();
                let sent = &mut self.sent[tag];
                sent.cancelled = true;
                sent.cancelled_at = Some(now);
                if sent.held_until.is_none() {
                    sent.held_until = Some(now + CANCELLED_LINGER);
                }
                let frame = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}});
                self.shell.server_says(frame.to_string().as_bytes());
                self.observe(None, None)?;
            }
            Op::Answer { pick, how } => self.answer(pick, how)?,
            Op::Again { pick } => {
                let done: Vec<usize> = self
                    .received
                    .iter()
                    .copied()
                    .filter(|t| self.sent[*t].client_answered)
                    .collect();
                if done.is_empty() {
                    return Ok(());
                }
                let tag = done[pick as usize % done.len()];
                let id = self.sent[tag].id;
                // A second answer is dropped, unless the id now names a
                // newer request in flight (then it is that request's
                // answer as far as anyone can tell: the client's mistake).
                if self.id_held_by_another(id, tag) {
                    return Ok(());
                }
                self.trace
                    .push(format!("client answers #{tag} (id {id}) again"));
                self.client_sends(tag, completion(id, tag))?;
            }
            Op::Status { pick, how } => {
                if self.client_tasks.is_empty() {
                    return Ok(());
                }
                let keys: Vec<String> = self.client_tasks.keys().cloned().collect();
                let task_id = keys[pick as usize % keys.len()].clone();
                let task = self.client_tasks.get_mut(&task_id).unwrap();
                if task.status != "working" {
                    return Ok(());
                }
                task.status = match how {
                    How::Approve => "completed",
                    How::Refuse => "failed",
                    How::Fail => return Ok(()),
                    How::Task => "cancelled",
                };
                let (status, origin, decided) = (task.status, task.origin, task.decided);
                task.decided = true;
                if !decided {
                    let outcome = match status {
                        "completed" => Outcome::Approved,
                        "failed" => Outcome::Refused,
                        _ => Outcome::Abandoned,
                    };
                    self.decide(origin, outcome);
                }
                self.trace
                    .push(format!("client: task {task_id} is {status}"));
                let frame = json!({"jsonrpc": "2.0", "method": "notifications/tasks/status",
                    "params": {"taskId": task_id, "status": status,
                        "statusMessage": status_message(status, self.sent[origin].consent)}});
                self.shell.client_says(frame.to_string().as_bytes());
                let answered = self.observe(None, None)?;
                check!(
                    self,
                    answered.is_empty(),
                    "a status notification became an answer: {answered:?}"
                );
            }
            Op::Step { ms, back } => {
                let stepped = self.shell.step(ms, back);
                self.trace.push(stepped);
                if !back {
                    self.mono += Duration::from_millis(u64::from(ms));
                }
                self.observe(None, None)?;
            }
            Op::Resend { pick } => self.resend(pick)?,
            Op::Restart => {
                self.trace
                    .push("proxy restarts (the server and client with it)".into());
                // The old process ends: what the user never answered is
                // closed in the audit.
                self.shell.end();
                self.observe(None, None)?;
                self.check_prompts_closed()?;
                self.shell.restart();
                for s in &mut self.sent {
                    // Their peers are gone with the old process.
                    s.cancelled = true;
                    s.gone = true;
                }
                self.live.clear();
                self.server_tasks.clear();
                self.received.clear();
                self.client_tasks.clear();
            }
        }
        Ok(())
    }

    /// The client answers everything it holds, the deadlines pass: every
    /// server request still live must have its one answer.
    pub fn drain(&mut self) -> Result<(), TestCaseError> {
        self.trace
            .push("drain: the client answers everything, deadlines pass".into());
        while self.received.iter().any(|t| !self.sent[*t].client_answered) {
            self.answer(0, How::Approve)?;
        }
        if self.shell.steps() {
            self.shell.step(3_600_000, false);
            self.mono += Duration::from_secs(3600);
            self.observe(None, None)?;
        }
        let open: Vec<usize> = self.live.values().copied().collect();
        check!(self, open.is_empty(), "requests never answered: {open:?}");
        self.shell.end();
        self.observe(None, None)?;
        self.check_prompts_closed()
    }

    /// Every consent prompt the audit opened has its closing line.
    fn check_prompts_closed(&mut self) -> Result<(), TestCaseError> {
        let open: Vec<&(String, String)> = self
            .prompts_open
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(prompt, _)| prompt)
            .collect();
        check!(
            self,
            open.is_empty(),
            "consent prompts the audit never closed (id, identity): {open:?}"
        );
        Ok(())
    }
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Approved,
    Refused,
    Abandoned,
}

/// The `statusMessage` of a task in `status`: a task the user was asked
/// about (`consent`) fails with the user's rejection, one under a grant as
/// a provider would.
fn status_message(status: &str, consent: bool) -> &'static str {
    match (status, consent) {
        ("failed", true) => "User rejected sampling request",
        ("failed", false) => "provider error",
        _ => "",
    }
}

fn completion(id: u64, tag: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"role": "assistant", "model": "m",
        "content": {"type": "text", "text": format!("@{tag}@")},
        "usage": {"inputTokens": 3, "outputTokens": 4}}})
}

fn error(id: u64, code: i64, tag: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": format!("@{tag}@")}})
}

/// The tag a client's answer carries (`@n@` in its text, or `_meta.tag`).
fn carried_tag(frame: &Value) -> Option<usize> {
    if let Some(tag) = frame.pointer("/result/_meta/tag").and_then(Value::as_u64) {
        return Some(tag as usize);
    }
    let text = frame
        .pointer("/result/content/text")
        .or_else(|| frame.pointer("/error/message"))
        .and_then(Value::as_str)?;
    let inner = text.strip_prefix('@')?.strip_suffix('@')?;
    inner.parse().ok()
}

/// Runs `ops` on `shell` (those it can carry), then drains.
pub fn run(shell: Box<dyn Shell>, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut world = World::new(shell);
    for op in ops {
        if world.shell.carries(op) {
            world.step(op)?;
        }
    }
    world.drain()
}

/// Runs `test` over `strategy` for `PROPTEST_CASES` cases (64 by default)
/// from a seed that a failure prints; `MCPOLICY_SEED=<n>` replays it.
pub fn run_seeded<S: Strategy>(strategy: &S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    let seed: u64 = std::env::var("MCPOLICY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
    run_from_seed(strategy, seed, cases, test);
}

/// Runs `test` over `cases` values of `strategy` drawn from `seed`; a
/// failure prints the seed and the shrunk case.
pub fn run_from_seed<S: Strategy>(
    strategy: &S,
    seed: u64,
    cases: u32,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        rng,
    );
    if let Err(error) = runner.run(strategy, test) {
        panic!("{error}\nseed {seed}: replay with MCPOLICY_SEED={seed}");
    }
}
