//! [`MemoryStore`]: the decision store of one process, gone when it exits.
//!
//! State is split into shards, each behind its own mutex, so that threads
//! deciding for different servers or identities rarely wait on each other:
//! decisions are sharded by their key, spend by server (every counter of one
//! server lives in one shard, which is what makes a multi-counter admission
//! atomic without a global lock).

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::{
    Admission, DecisionKey, DecisionStore, LimitCheck, LimitWindow, Millis, StoreError,
    StoredDecision, must_free, rolling_available_at, rolling_floor,
};

/// Number of shards; a power of two so a reservation can carry its shard in its low bits.
const SHARDS: usize = 16;
const SHARD_BITS: u32 = SHARDS.trailing_zeros();

/// One spend row: `amount` recorded at `at` under reservation `reservation`.
#[derive(Debug, Clone, Copy)]
struct Spend {
    at: Millis,
    amount: u64,
    reservation: u64,
}

/// The spend of one shard's servers, by (server_id, counter); rows in recording order.
type SpendShard = HashMap<(String, String), VecDeque<Spend>>;

/// An in-memory [`DecisionStore`]. Cheap to create; use one per process (or per
/// test) and share it behind an `Arc`.
#[derive(Debug)]
pub struct MemoryStore {
    hasher: RandomState,
    decisions: Vec<Mutex<HashMap<DecisionKey, StoredDecision>>>,
    spend: Vec<Mutex<SpendShard>>,
    /// The next reservation sequence number (reservation = seq << SHARD_BITS | shard).
    next_seq: AtomicU64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore {
            hasher: RandomState::new(),
            decisions: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            spend: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            next_seq: AtomicU64::new(1),
        }
    }

    /// How many decisions are stored (expired ones included until purged).
    pub fn len(&self) -> usize {
        self.decisions
            .iter()
            .map(|shard| lock(shard).map(|map| map.len()).unwrap_or(0))
            .sum()
    }

    /// Whether no decision is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn decision_shard(
        &self,
        key: &DecisionKey,
    ) -> Result<MutexGuard<'_, HashMap<DecisionKey, StoredDecision>>, StoreError> {
        let index = (self.hasher.hash_one(key) as usize) & (SHARDS - 1);
        lock(&self.decisions[index])
    }

    fn spend_shard_index(&self, server_id: &str) -> usize {
        (self.hasher.hash_one(server_id) as usize) & (SHARDS - 1)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> Result<MutexGuard<'_, T>, StoreError> {
    mutex.lock().map_err(|_| StoreError::Poisoned)
}

/// Sum of the rows of one counter that count in `window` at `now`.
fn spent_in(rows: &VecDeque<Spend>, window: LimitWindow, now: Millis) -> u64 {
    match window {
        // Rows from a clock slightly ahead (at > now) still count: fail closed.
        LimitWindow::Rolling { ms } => {
            let floor = rolling_floor(now, ms);
            rows.iter()
                .filter(|row| row.at >= floor)
                .fold(0u64, |sum, row| sum.saturating_add(row.amount))
        }
        LimitWindow::Fixed { start, end } => rows
            .iter()
            .filter(|row| row.at >= start && row.at < end)
            .fold(0u64, |sum, row| sum.saturating_add(row.amount)),
    }
}

/// Drops rows that can no longer count in `window` (it only moves forward).
fn prune(rows: &mut VecDeque<Spend>, window: LimitWindow, now: Millis) {
    let floor = match window {
        LimitWindow::Rolling { ms } => rolling_floor(now, ms),
        LimitWindow::Fixed { start, .. } => start,
    };
    // Rows are appended in call order, which is nearly time order; stop at the first keeper.
    while rows.front().is_some_and(|row| row.at < floor) {
        rows.pop_front();
    }
}

impl DecisionStore for MemoryStore {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        let mut shard = self.decision_shard(key)?;
        match shard.get_mut(key) {
            Some(found) if found.digest == digest && !found.is_expired(now) => {
                found.represented = found.represented.saturating_add(1);
                Ok(Some(found.clone()))
            }
            _ => Ok(None),
        }
    }

    fn admit(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
    ) -> Result<Admission, StoreError> {
        if checks.is_empty() {
            return Ok(Admission::Admitted { reservation: 0 });
        }
        let shard_index = self.spend_shard_index(server_id);
        let mut shard = lock(&self.spend[shard_index])?;
        for (index, check) in checks.iter().enumerate() {
            let key = (server_id.to_owned(), check.counter.clone());
            let rows = shard.entry(key).or_default();
            prune(rows, check.window, now);
            // Several checks may name one counter; count what earlier checks of this call add.
            let pending: u64 = checks[..index]
                .iter()
                .filter(|earlier| earlier.counter == check.counter)
                .map(|earlier| earlier.amount)
                .sum();
            let spent = spent_in(rows, check.window, now).saturating_add(pending);
            if spent.saturating_add(check.amount) > check.limit {
                let available_at = match check.window {
                    LimitWindow::Fixed { end, .. } => end,
                    LimitWindow::Rolling { ms } => {
                        let floor = rolling_floor(now, ms);
                        let mut counted: Vec<(Millis, u64)> = rows
                            .iter()
                            .filter(|row| row.at >= floor)
                            .map(|row| (row.at, row.amount))
                            .collect();
                        counted.sort_by_key(|(at, _)| *at);
                        rolling_available_at(
                            counted,
                            must_free(spent, check.amount, check.limit),
                            check.amount,
                            check.limit,
                            ms,
                            now,
                        )
                    }
                };
                return Ok(Admission::Refused {
                    index,
                    counter: check.counter.clone(),
                    available_at,
                });
            }
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let reservation = (seq << SHARD_BITS) | shard_index as u64;
        for check in checks {
            let key = (server_id.to_owned(), check.counter.clone());
            shard.entry(key).or_default().push_back(Spend {
                at: now,
                amount: check.amount,
                reservation,
            });
        }
        Ok(Admission::Admitted { reservation })
    }

    fn settle(&self, reservation: u64, counter: &str, actual: u64) -> Result<(), StoreError> {
        if reservation == 0 {
            return Ok(());
        }
        if reservation >> SHARD_BITS >= self.next_seq.load(Ordering::Relaxed) {
            return Err(StoreError::UnknownReservation {
                reservation,
                counter: counter.to_owned(),
            });
        }
        let shard_index = (reservation as usize) & (SHARDS - 1);
        let mut shard = lock(&self.spend[shard_index])?;
        // Rows of a window that has passed may be pruned; settling them changes nothing that counts.
        for ((_, name), rows) in shard.iter_mut() {
            if name != counter {
                continue;
            }
            if let Some(row) = rows.iter_mut().find(|row| row.reservation == reservation) {
                row.amount = actual;
                return Ok(());
            }
        }
        Ok(())
    }

    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        let mut stored = decision.clone();
        stored.represented = 0;
        self.decision_shard(key)?.insert(key.clone(), stored);
        Ok(())
    }

    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
        Ok(self.decision_shard(key)?.get(key).cloned())
    }

    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        let mut removed = 0u64;
        for shard in &self.decisions {
            let mut map = lock(shard)?;
            let before = map.len();
            map.retain(|key, decision| {
                key.server_id != server_id
                    || (decision.digest == digest && !decision.is_expired(now))
            });
            removed += (before - map.len()) as u64;
        }
        Ok(removed)
    }
}
