//! Clock ticks: the earliest deadline the session waits for, and what
//! expires at it (the server answered with `policy.deadline`, the client
//! told to stop).

use super::*;

impl Session {
    /// Whether a request with a deadline was remembered since the last call.
    pub fn take_new_deadline(&self) -> bool {
        self.new_deadline.swap(false, Ordering::AcqRel)
    }

    /// The earliest instant the deadline thread must wake at: a deadline of
    /// a request or task the client has not answered yet, or the store's
    /// next flush ([`Session::schedule_flush`]).
    pub fn next_deadline(&self) -> Option<Instant> {
        let flights = lock(&self.state).flights.next_deadline();
        let flush = *lock(&self.flush_at);
        match (flights, flush) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A decision was taken: its store may hold counts in memory, written
    /// [`STORE_FLUSH_AFTER`] from now unless a write is already due.
    pub(super) fn schedule_flush(&self) {
        let mut at = lock(&self.flush_at);
        if at.is_none() {
            *at = Some((self.monotonic)() + STORE_FLUSH_AFTER);
            self.new_deadline.store(true, Ordering::Release);
        }
    }

    /// Answers every request whose deadline passed by `now` with the
    /// policy's deadline denial, tells the client to stop
    /// (`notifications/cancelled`), and drops its answer when it comes. A
    /// task past its deadline is recorded the same way; its `tasks/result`
    /// is answered with the denial (the proxy sends no request of its own,
    /// so it cannot cancel the task).
    pub fn expire(&self, now: Instant) {
        let flush = {
            let mut at = lock(&self.flush_at);
            let due = at.is_some_and(|at| at <= now);
            if due {
                *at = None;
            }
            due
        };
        if flush {
            self.flush_store();
        }
        let swept = lock(&self.state).flights.sweep(now);
        for lapsed in &swept.lapsed {
            self.log.line(format_args!(
                "stopped waiting for the client's answer to {lapsed}"
            ));
        }
        for (origin, pending) in swept.abandoned {
            // A task whose ttl ended with no answer from the user.
            self.abandon(pending, &origin, None, "task");
        }
        for unanswered in swept.unanswered {
            // A cancelled request's linger, or a round's, ended first.
            self.close_consent_unanswered(unanswered, "the proxy stopped waiting");
        }
        for sampling in swept.expired {
            let Sampling {
                id,
                requested,
                awaiting: Awaiting::Grant(grant),
                ..
            } = sampling
            else {
                continue;
            };
            let id = &id;
            match grant.deadline_missed() {
                Ok(denial) => {
                    self.log.line(format_args!(
                        "request {id} missed its deadline: answered {}",
                        denial.reason()
                    ));
                    self.audit_denial("deadline", "request", Some(id), &requested, &denial);
                    self.send_server(&denial.reply(Some(id)));
                }
                Err(error) => {
                    self.log
                        .line(format_args!("request {id} missed its deadline: {error}"));
                    self.send_server(&error.reply(Some(id)));
                }
            }
            let cancel = serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "policy.deadline: the policy's deadline passed"},
            });
            self.send_client(cancel.to_string().as_bytes());
        }
        for (task_id, task) in swept.missed {
            let Task {
                origin,
                requested,
                state: TaskState::Running(Awaiting::Grant(grant)),
                deadline,
                until,
                bytes,
            } = task
            else {
                continue;
            };
            match grant.deadline_missed() {
                Ok(denial) => {
                    self.log.line(format_args!(
                        "task {task_id} of request {origin} missed its deadline: recorded {}",
                        denial.reason()
                    ));
                    self.audit_denial("deadline", "task", Some(&origin), &requested, &denial);
                    let task = Task {
                        origin,
                        requested,
                        state: TaskState::Missed(denial),
                        deadline,
                        until,
                        bytes,
                    };
                    lock(&self.state).flights.put_task(task_id, task);
                }
                Err(error) => {
                    self.log
                        .line(format_args!("task {task_id} missed its deadline: {error}"));
                }
            }
        }
    }
}
