//! Group admission: the concurrent admissions of one server from this
//! process's threads share one transaction (a leader/follower combiner).
//!
//! A request joins its server's queue. When no transaction is in flight for
//! the server, the request's own thread becomes the leader: it takes what is
//! queued at that moment (at most the batch cap, oldest first), runs them as
//! one `admit_batch` call and one commit, hands every request its answer and
//! wakes the waiters. Requests that arrive while the transaction is in flight
//! wait in the queue and make the next batch. There is no timer: a lone
//! request is a batch of one and runs at once.
//!
//! Nothing is answered before the commit: a request's answer is written only
//! after the leader's `run` returned, and a failed transaction (the commit
//! included) answers every request in it with the same error.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use mcpolicy_runtime::store::{Admission, LimitCheck, Millis, StoreError};

/// One answer: the admission, or the error every request of the failed
/// transaction gets.
pub(crate) type Answer = Result<Admission, StoreError>;

/// Runs one batch: one admission per request, in order, or the error that
/// fails them all.
pub(crate) type Execute<'a> = dyn Fn(&[Request]) -> Result<Vec<Admission>, StoreError> + 'a;

/// One queued admission.
pub(crate) struct Request {
    ticket: u64,
    /// The admission's checks (never empty).
    pub(crate) checks: Vec<LimitCheck>,
    /// When it was made.
    pub(crate) now: Millis,
    /// When its caller's store call must have answered: a batch answers by
    /// the earliest of its requests' deadlines.
    pub(crate) deadline: Instant,
}

impl Request {
    /// A request outside the combiner (its ticket is never looked up).
    pub(crate) fn new(checks: Vec<LimitCheck>, now: Millis, deadline: Instant) -> Request {
        Request {
            ticket: u64::MAX,
            checks,
            now,
            deadline,
        }
    }
}

/// One server's queue.
#[derive(Default)]
struct Lane {
    queue: VecDeque<Request>,
    /// A leader's transaction for this server is in flight.
    busy: bool,
    /// Answers not yet taken by their requester, by ticket.
    done: HashMap<u64, Answer>,
    /// Requests queued, in flight or answered but not yet returned: the lane
    /// is dropped when none is left.
    members: usize,
}

/// Every server's queue, under one lock (held only to queue, take a batch
/// and hand out answers; never across a round trip).
#[derive(Default)]
pub(crate) struct Combiner {
    lanes: Mutex<Lanes>,
    answered: Condvar,
    /// Requests that went in a transaction of two or more.
    batched: AtomicU64,
    /// Transactions of two or more requests.
    batches: AtomicU64,
}

#[derive(Default)]
struct Lanes {
    by_server: HashMap<String, Lane>,
    next_ticket: u64,
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner")
            .field("batched", &self.batched.load(Ordering::Relaxed))
            .field("batches", &self.batches.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// How much the combiner has grouped since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Transactions that carried two or more admissions.
    pub batches: u64,
    /// Admissions that went in such a transaction.
    pub batched: u64,
}

impl Combiner {
    pub(crate) fn stats(&self) -> BatchStats {
        BatchStats {
            batches: self.batches.load(Ordering::Relaxed),
            batched: self.batched.load(Ordering::Relaxed),
        }
    }

    /// Admits `checks` for `server` at `now` as part of a batch: `execute`
    /// runs one batch (the requests in arrival order) and returns one
    /// answer per request, or the error that fails them all.
    pub(crate) fn admit(
        &self,
        server: &str,
        checks: &[LimitCheck],
        now: Millis,
        deadline: Instant,
        cap: usize,
        execute: &Execute<'_>,
    ) -> Answer {
        let mut lanes = self.lanes.lock().map_err(|_| StoreError::Poisoned)?;
        let ticket = lanes.next_ticket;
        lanes.next_ticket = lanes.next_ticket.wrapping_add(1);
        let lane = lanes.by_server.entry(server.to_owned()).or_default();
        lane.members += 1;
        lane.queue.push_back(Request {
            ticket,
            checks: checks.to_vec(),
            now,
            deadline,
        });
        loop {
            let Some(lane) = lanes.by_server.get_mut(server) else {
                // Unreachable: a lane stays while it has members.
                return Err(StoreError::Poisoned);
            };
            if let Some(answer) = lane.done.remove(&ticket) {
                lane.members -= 1;
                if lane.members == 0 {
                    lanes.by_server.remove(server);
                }
                return answer;
            }
            if lane.busy {
                lanes = self
                    .answered
                    .wait(lanes)
                    .map_err(|_| StoreError::Poisoned)?;
                continue;
            }
            // Lead: take what is queued now (this request among them unless
            // more than the cap were ahead of it; it then leads again).
            lane.busy = true;
            let take = lane.queue.len().min(cap.max(1));
            let batch: Vec<Request> = lane.queue.drain(..take).collect();
            drop(lanes);
            let mut guard = Leading {
                combiner: self,
                server,
                tickets: batch.iter().map(|request| request.ticket).collect(),
                answers: None,
            };
            let result = execute(&batch);
            if batch.len() > 1 {
                self.batches.fetch_add(1, Ordering::Relaxed);
                self.batched
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            guard.answers = Some(result);
            drop(guard);
            lanes = self.lanes.lock().map_err(|_| StoreError::Poisoned)?;
        }
    }
}

/// A leader's batch: on drop (normally, or if `execute` panicked) every
/// request of it is answered and the lane is free for the next leader.
struct Leading<'a> {
    combiner: &'a Combiner,
    server: &'a str,
    tickets: Vec<u64>,
    answers: Option<Result<Vec<Admission>, StoreError>>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let answers: Vec<Answer> = match self.answers.take() {
            Some(Ok(admissions)) if admissions.len() == self.tickets.len() => {
                admissions.into_iter().map(Ok).collect()
            }
            Some(Ok(admissions)) => {
                let error = StoreError::Backend {
                    store: "postgres".to_owned(),
                    detail: format!(
                        "admit_batch answered {} of {} admissions",
                        admissions.len(),
                        self.tickets.len()
                    ),
                };
                self.tickets
                    .iter()
                    .map(|_| Err(duplicate(&error)))
                    .collect()
            }
            Some(Err(error)) => self
                .tickets
                .iter()
                .map(|_| Err(duplicate(&error)))
                .collect(),
            None => self
                .tickets
                .iter()
                .map(|_| Err(StoreError::Poisoned))
                .collect(),
        };
        let mut lanes = match self.combiner.lanes.lock() {
            Ok(lanes) => lanes,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(lane) = lanes.by_server.get_mut(self.server) {
            lane.busy = false;
            for (ticket, answer) in self.tickets.iter().zip(answers) {
                lane.done.insert(*ticket, answer);
            }
        }
        drop(lanes);
        self.combiner.answered.notify_all();
    }
}

/// The same error for every request of a failed transaction (`StoreError`
/// is not `Clone`: it may hold an I/O error).
pub(crate) fn duplicate(error: &StoreError) -> StoreError {
    match error {
        StoreError::Unavailable { store, detail } => StoreError::Unavailable {
            store: store.clone(),
            detail: detail.clone(),
        },
        StoreError::Backend { store, detail } => StoreError::Backend {
            store: store.clone(),
            detail: detail.clone(),
        },
        StoreError::BadRow { path, detail } => StoreError::BadRow {
            path: path.clone(),
            detail: detail.clone(),
        },
        StoreError::Corrupt { path, detail } => StoreError::Corrupt {
            path: path.clone(),
            detail: detail.clone(),
        },
        StoreError::ForeignSchema { path, detail } => StoreError::ForeignSchema {
            path: path.clone(),
            detail: detail.clone(),
        },
        StoreError::SchemaTooNew {
            path,
            found,
            supported,
        } => StoreError::SchemaTooNew {
            path: path.clone(),
            found: *found,
            supported: *supported,
        },
        StoreError::Busy { path } => StoreError::Busy { path: path.clone() },
        StoreError::UnknownReservation {
            reservation,
            counter,
        } => StoreError::UnknownReservation {
            reservation: *reservation,
            counter: counter.clone(),
        },
        StoreError::Poisoned => StoreError::Poisoned,
        StoreError::Io { path, source } => StoreError::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        other => StoreError::Backend {
            store: "postgres".to_owned(),
            detail: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mcpolicy_runtime::store::{Reservation, StoreError};

    use super::*;

    impl Combiner {
        fn queued(&self, server: &str) -> usize {
            self.lanes
                .lock()
                .map(|lanes| lanes.by_server.get(server).map_or(0, |l| l.queue.len()))
                .unwrap_or(0)
        }
    }

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(60)
    }

    fn checks() -> Vec<LimitCheck> {
        vec![LimitCheck {
            counter: "c".into(),
            amount: 1,
            limit: 10,
            window: mcpolicy_runtime::store::LimitWindow::Rolling { ms: 1_000 },
        }]
    }

    /// While the first request's transaction is in flight the others queue;
    /// they then go together in the next one, and each gets its own answer
    /// (or, when the transaction fails, the same error), never another's.
    fn run(followers: usize, fail: bool, cap: usize) -> (Vec<Answer>, BatchStats, Vec<usize>) {
        let combiner = Arc::new(Combiner::default());
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let execute = {
            let (combiner, sizes) = (Arc::clone(&combiner), Arc::clone(&sizes));
            move |batch: &[Request]| -> Result<Vec<Admission>, StoreError> {
                if let Ok(mut sizes) = sizes.lock() {
                    sizes.push(batch.len());
                }
                if batch.len() == 1 && batch[0].now == 0 {
                    // The leader's own transaction: hold it until every
                    // follower has queued behind it.
                    while combiner.queued("s") < followers {
                        std::thread::yield_now();
                    }
                }
                if fail {
                    return Err(StoreError::Backend {
                        store: "test".to_owned(),
                        detail: "failed".to_owned(),
                    });
                }
                Ok(batch
                    .iter()
                    .map(|request| Admission::Admitted {
                        reservation: Reservation {
                            id: 1,
                            at: request.now,
                        },
                    })
                    .collect())
            }
        };
        let execute = Arc::new(execute);
        let leader = {
            let (combiner, execute) = (Arc::clone(&combiner), Arc::clone(&execute));
            std::thread::spawn(move || combiner.admit("s", &checks(), 0, far(), cap, &*execute))
        };
        while sizes.lock().map(|s| s.is_empty()).unwrap_or(true) {
            std::thread::yield_now();
        }
        let threads: Vec<_> = (1..=followers)
            .map(|n| {
                let (combiner, execute) = (Arc::clone(&combiner), Arc::clone(&execute));
                std::thread::spawn(move || {
                    combiner.admit("s", &checks(), n as Millis, far(), cap, &*execute)
                })
            })
            .collect();
        let mut answers = vec![leader.join().expect("leader")];
        answers.extend(threads.into_iter().map(|t| t.join().expect("follower")));
        let sizes = sizes.lock().map(|s| s.clone()).unwrap_or_default();
        assert!(combiner.lanes.lock().expect("lanes").by_server.is_empty());
        (answers, combiner.stats(), sizes)
    }

    #[test]
    fn followers_share_the_next_transaction_and_get_their_own_answers() {
        let (answers, stats, sizes) = run(5, false, 64);
        assert_eq!(sizes, vec![1, 5]);
        assert_eq!(
            stats,
            BatchStats {
                batches: 1,
                batched: 5
            }
        );
        for (n, answer) in answers.iter().enumerate() {
            match answer {
                Ok(Admission::Admitted { reservation }) => assert_eq!(reservation.at, n as Millis),
                other => panic!("request {n}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_failed_transaction_fails_every_request_in_it_alike() {
        let (answers, _, sizes) = run(4, true, 64);
        assert_eq!(sizes, vec![1, 4]);
        for answer in answers {
            match answer {
                Err(StoreError::Backend { store, detail }) => {
                    assert_eq!((store.as_str(), detail.as_str()), ("test", "failed"));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn the_cap_bounds_a_batch_and_order_is_kept() {
        let (answers, stats, sizes) = run(5, false, 2);
        assert_eq!(sizes, vec![1, 2, 2, 1]);
        assert_eq!(stats.batched, 4);
        assert!(answers.iter().all(Result::is_ok));
    }
}
