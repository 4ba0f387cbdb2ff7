//! [`MemoryStore`]: the decision store of one process, gone when it exits.
//!
//! State is split into shards, each behind its own mutex, so that threads
//! deciding for different servers or identities rarely wait on each other:
//! decisions are sharded by their key, spend by server (every counter of one
//! server lives in one shard, which is what makes a multi-counter admission
//! atomic without a global lock).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::{
    Admission, Assessed, CounterUsage, DEFAULT_MAX_DECISIONS_PER_SERVER, DecisionFilter,
    DecisionKey, DecisionStore, Evaluation, EvictionKey, Integrity, LimitCheck, LimitWindow,
    Millis, PRUNE_BATCH, Pruned, ReplayOrAdmit, Reservation, ServerStats, StoreAdmin, StoreError,
    StoreSize, StoredDecision, StoredEntry, answers_probe, eviction_key, may_replace, pending,
    prune_cut, retention, window_changed, window_floor,
};

/// Number of shards; a power of two so a hash picks one with a mask.
const SHARDS: usize = 16;

/// One spend row: `amount` recorded at `at` under reservation `reservation`.
#[derive(Debug, Clone, Copy)]
struct Spend {
    at: Millis,
    amount: u64,
    reservation: u64,
}

/// The spend rows of one counter, sorted by `(at, reservation)`, with the
/// running total of those at or after `floor`, so that an admission costs
/// O(1) however many rows its window holds (the floor moves over the rows
/// between its old and new place, or the window is summed, whichever is
/// shorter). Rows below the floor are kept for [`retention`] more, so that
/// a clock step back counts them again; `pruned` is past every deleted row.
#[derive(Debug, Clone)]
struct Counter {
    rows: VecDeque<Spend>,
    total: u64,
    floor: Millis,
    /// Rows before this may have been deleted; `Millis::MIN`: none was.
    pruned: Millis,
    /// The rolling window the counter was last admitted with, if any.
    rolling_ms: Option<u64>,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            rows: VecDeque::new(),
            total: 0,
            floor: Millis::MIN,
            pruned: Millis::MIN,
            rolling_ms: None,
        }
    }
}

impl Counter {
    /// The index of the first row at or after `at`.
    fn index(&self, at: Millis) -> usize {
        self.rows.partition_point(|row| row.at < at)
    }

    fn sum(&self, range: std::ops::Range<usize>) -> u64 {
        self.rows
            .range(range)
            .fold(0u64, |sum, row| sum.saturating_add(row.amount))
    }

    /// Moves the floor to `floor`, forward or back, keeping `total` the sum
    /// of the rows at or after it.
    fn move_floor(&mut self, floor: Millis) {
        if floor == self.floor {
            return;
        }
        let (old, new) = (self.index(self.floor), self.index(floor));
        let walk = old.abs_diff(new);
        if walk <= self.rows.len() - new {
            let delta = self.sum(old.min(new)..old.max(new));
            self.total = if floor > self.floor {
                self.total.saturating_sub(delta)
            } else {
                self.total.saturating_add(delta)
            };
        } else {
            self.total = self.sum(new..self.rows.len());
        }
        self.floor = floor;
    }

    /// The spend that counts in `window`, once the floor is at its start.
    /// Rows from a clock slightly ahead (at > now) count in a rolling
    /// window: fail closed.
    fn spent(&self, window: LimitWindow) -> u64 {
        match window {
            LimitWindow::Rolling { .. } => self.total,
            LimitWindow::Fixed { end, .. } => {
                let after: u64 = self
                    .rows
                    .iter()
                    .rev()
                    .take_while(|row| row.at >= end)
                    .map(|row| row.amount)
                    .sum();
                self.total.saturating_sub(after)
            }
        }
    }

    /// A rolling check of `ms`: if the counter's window grew (a policy edit
    /// lengthening `rate`), what was deleted under the shorter window is not
    /// held against the longer one (see `window_changed`).
    fn lengthen(&mut self, ms: u64) {
        if window_changed(self.rolling_ms, ms) {
            self.pruned = Millis::MIN;
        }
        self.rolling_ms = Some(ms);
    }

    /// Deletes up to [`PRUNE_BATCH`] rows before `cut` (never after the
    /// floor), oldest first, and moves the prune mark past them.
    fn prune(&mut self, cut: Millis) {
        for _ in 0..PRUNE_BATCH {
            match self.rows.front() {
                Some(row) if row.at < cut => {
                    self.pruned = self.pruned.max(row.at.saturating_add(1));
                    self.rows.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Deletes every row before `cut` ([`StoreAdmin::prune_expired`]),
    /// moving the floor up to it first so that the total never counts a
    /// deleted row; answers how many went.
    fn prune_before(&mut self, cut: Millis) -> u64 {
        let doomed = self.index(cut);
        if doomed == 0 {
            return 0;
        }
        if cut > self.floor {
            self.move_floor(cut);
        }
        for row in self.rows.drain(..doomed) {
            self.pruned = self.pruned.max(row.at.saturating_add(1));
        }
        doomed as u64
    }

    fn push(&mut self, spend: Spend) {
        if spend.at >= self.floor {
            self.total = self.total.saturating_add(spend.amount);
        }
        if self.rows.back().is_none_or(|last| last.at <= spend.at) {
            self.rows.push_back(spend);
        } else {
            // A caller with an older `now` (another thread's clock read): keep rows sorted.
            let at = self.rows.partition_point(|row| row.at <= spend.at);
            self.rows.insert(at, spend);
        }
    }
}

/// Hashes a key's precomputed 64-bit hash to itself: a decision key is hashed
/// once (SipHash, keyed per store) to pick its shard and its bucket.
#[derive(Debug, Default, Clone, Copy)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; fold anything else rather than misbehave.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The decisions of one shard, by the key's hash; collisions share a bucket.
type DecisionShard =
    HashMap<u64, Vec<(DecisionKey, StoredDecision)>, BuildHasherDefault<PassThrough>>;

/// The counters of the servers of one shard, by the server id's hash (the
/// one that picked the shard); servers whose hashes collide share a bucket.
type SpendShard = HashMap<u64, Named<Counters>, BuildHasherDefault<PassThrough>>;

/// One server's counters by name.
type Counters = Named<Counter>;

/// A few values by name, searched in order: a block has a handful of
/// counters (the rate and each budget) and a bucket rarely more than one
/// server, so a linear search of short names beats hashing them.
#[derive(Debug)]
struct Named<T>(Vec<(String, T)>);

impl<T> Default for Named<T> {
    fn default() -> Self {
        Named(Vec::new())
    }
}

impl<T> Named<T> {
    fn get(&self, name: &str) -> Option<&T> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut T> {
        self.0.iter_mut().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

impl<T: Default> Named<T> {
    /// The value named `name`, a default one added if there is none.
    fn get_or_insert(&mut self, name: &str) -> &mut T {
        let at = match self.0.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.0.push((name.to_owned(), T::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }
}

/// What the store knows about one server's stored decisions: their count,
/// what was evicted, and their eviction order.
#[derive(Debug, Default)]
struct ServerEntry {
    stats: ServerStats,
    /// Every stored decision of the server by [`eviction_key`]: the first is
    /// the next to go.
    order: BTreeSet<EvictionKey>,
}

/// The servers of one shard (by the server id's hash), by name.
type ServerShard = HashMap<String, ServerEntry>;

/// An in-memory [`DecisionStore`]. Cheap to create; use one per process (or per
/// test) and share it behind an `Arc`.
///
/// Lock order: a server shard before a decision shard, and never two
/// decision shards at once.
#[derive(Debug)]
pub struct MemoryStore {
    hasher: RandomState,
    decisions: Vec<Mutex<DecisionShard>>,
    spend: Vec<Mutex<SpendShard>>,
    servers: Vec<Mutex<ServerShard>>,
    /// The most decisions kept per server.
    max_per_server: u64,
    /// The next reservation id (ids start at 1; 0 means nothing was counted).
    next_seq: AtomicU64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store keeping up to [`DEFAULT_MAX_DECISIONS_PER_SERVER`]
    /// decisions per server.
    pub fn new() -> Self {
        Self::with_max_decisions_per_server(DEFAULT_MAX_DECISIONS_PER_SERVER)
    }

    /// An empty store keeping up to `max` decisions per server (at least
    /// one); past it, [`DecisionStore::record`] evicts in the documented
    /// order (`runtime/STORE.md`, "Bounded decisions").
    pub fn with_max_decisions_per_server(max: u64) -> Self {
        MemoryStore {
            hasher: RandomState::new(),
            decisions: (0..SHARDS)
                .map(|_| Mutex::new(DecisionShard::default()))
                .collect(),
            spend: (0..SHARDS)
                .map(|_| Mutex::new(SpendShard::default()))
                .collect(),
            servers: (0..SHARDS)
                .map(|_| Mutex::new(ServerShard::default()))
                .collect(),
            max_per_server: max.max(1),
            next_seq: AtomicU64::new(1),
        }
    }

    /// How many decisions are stored (expired ones included until purged).
    pub fn len(&self) -> usize {
        self.decisions
            .iter()
            .map(|shard| {
                lock(shard)
                    .map(|map| map.values().map(Vec::len).sum())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Whether no decision is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key's hash and its shard. The shard comes from middle bits, so the
    /// map's bucket (low bits) and tag (top bits) keep their entropy.
    fn decision_shard(
        &self,
        key: &DecisionKey,
    ) -> Result<(u64, MutexGuard<'_, DecisionShard>), StoreError> {
        // The identity alone: it already starts with the server id, and
        // keys with equal identities share a bucket and are told apart there.
        let hash = self.hasher.hash_one(key.identity.as_str());
        let index = ((hash >> 32) as usize) & (SHARDS - 1);
        Ok((hash, lock(&self.decisions[index])?))
    }

    /// The server shard of `server_id`.
    fn server_shard(&self, server_id: &str) -> Result<MutexGuard<'_, ServerShard>, StoreError> {
        let hash = self.hasher.hash_one(server_id);
        lock(&self.servers[((hash >> 32) as usize) & (SHARDS - 1)])
    }

    /// Removes `key`'s decision, answering its `represented` (None if absent).
    fn remove(&self, key: &DecisionKey) -> Result<Option<u64>, StoreError> {
        let (hash, mut shard) = self.decision_shard(key)?;
        let Some(bucket) = shard.get_mut(&hash) else {
            return Ok(None);
        };
        let Some(at) = bucket.iter().position(|(k, _)| k == key) else {
            return Ok(None);
        };
        let (_, removed) = bucket.swap_remove(at);
        if bucket.is_empty() {
            shard.remove(&hash);
        }
        Ok(Some(removed.represented))
    }

    /// The server id's hash and its spend shard (from middle bits, as for decisions).
    fn spend_shard(
        &self,
        server_id: &str,
    ) -> Result<(u64, MutexGuard<'_, SpendShard>), StoreError> {
        let hash = self.hasher.hash_one(server_id);
        let index = ((hash >> 32) as usize) & (SHARDS - 1);
        Ok((hash, lock(&self.spend[index])?))
    }
}

impl MemoryStore {
    /// Every server shard, locked in index order: what an operation over
    /// all servers holds first, so that no `record` or `purge_stale` (which
    /// take one server shard before a decision shard) falls inside it.
    fn all_servers(&self) -> Result<Vec<MutexGuard<'_, ServerShard>>, StoreError> {
        self.servers.iter().map(lock).collect()
    }

    /// Removes the decisions `doomed` selects, with every server shard held,
    /// keeping each server's count and eviction order; answers them,
    /// ordered by key.
    fn remove_where(
        &self,
        servers: &mut [MutexGuard<'_, ServerShard>],
        mut doomed: impl FnMut(&DecisionKey, &StoredDecision) -> bool,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        let mut removed = Vec::new();
        for shard in &self.decisions {
            let mut map = lock(shard)?;
            map.retain(|_, bucket| {
                bucket.retain(|(key, decision)| {
                    let keep = !doomed(key, decision);
                    if !keep {
                        removed.push(StoredEntry {
                            key: key.clone(),
                            decision: decision.clone(),
                        });
                    }
                    keep
                });
                !bucket.is_empty()
            });
        }
        for entry in &removed {
            let hash = self.hasher.hash_one(entry.key.server_id.as_str());
            let shard = &mut servers[((hash >> 32) as usize) & (SHARDS - 1)];
            if let Some(server) = shard.get_mut(&entry.key.server_id) {
                server
                    .order
                    .remove(&eviction_key(&entry.key.identity, &entry.decision));
                server.stats.stored = server.stats.stored.saturating_sub(1);
            }
        }
        sort_entries(&mut removed);
        Ok(removed)
    }
}

/// Orders entries by `(server_id, identity)`, as [`StoreAdmin`] answers them.
fn sort_entries(entries: &mut [StoredEntry]) {
    entries.sort_by(|a, b| {
        (&a.key.server_id, &a.key.identity).cmp(&(&b.key.server_id, &b.key.identity))
    });
}

impl StoreAdmin for MemoryStore {
    fn decisions(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        // Held so that no record or purge lands half-way through the scan.
        let _servers = self.all_servers()?;
        let mut found = Vec::new();
        for shard in &self.decisions {
            let map = lock(shard)?;
            found.extend(
                map.values()
                    .flatten()
                    .filter(|(key, decision)| filter.matches(key, decision))
                    .map(|(key, decision)| StoredEntry {
                        key: key.clone(),
                        decision: decision.clone(),
                    }),
            );
        }
        sort_entries(&mut found);
        Ok(found)
    }

    fn forget(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        let mut servers = self.all_servers()?;
        self.remove_where(&mut servers, |key, decision| filter.matches(key, decision))
    }

    fn usage(
        &self,
        server_id: &str,
        check: &LimitCheck,
        now: Millis,
    ) -> Result<CounterUsage, StoreError> {
        if let Some(full) = super::usage_outside_calendar(check, now) {
            return Ok(full);
        }
        let (hash, shard) = self.spend_shard(server_id)?;
        // A copy: the admission's steps move the floor and may forget a
        // prune mark, and a look must change nothing.
        let mut counter = shard
            .get(&hash)
            .and_then(|bucket| bucket.get(server_id))
            .and_then(|counters| counters.get(check.counter.as_str()))
            .cloned();
        drop(shard);
        Ok(assess(counter.as_mut(), check, 0, now, false).usage())
    }

    fn prune_expired(&self, now: Millis) -> Result<Pruned, StoreError> {
        let mut servers = self.all_servers()?;
        let decisions = self
            .remove_where(&mut servers, |_, decision| decision.is_expired(now))?
            .len() as u64;
        drop(servers);
        let mut spend_rows = 0u64;
        for shard in &self.spend {
            let mut map = lock(shard)?;
            for counter in map
                .values_mut()
                .flat_map(|servers| servers.0.iter_mut())
                .flat_map(|(_, counters)| counters.0.iter_mut())
                .map(|(_, counter)| counter)
            {
                spend_rows = spend_rows
                    .saturating_add(counter.prune_before(prune_cut(counter.rolling_ms, now)));
            }
        }
        Ok(Pruned {
            decisions,
            spend_rows,
        })
    }

    fn size(&self) -> Result<StoreSize, StoreError> {
        let servers = self.all_servers()?;
        let decisions = servers
            .iter()
            .flat_map(|shard| shard.values())
            .map(|server| server.stats.stored)
            .sum();
        drop(servers);
        let mut spend_rows = 0u64;
        for shard in &self.spend {
            let map = lock(shard)?;
            for counter in map
                .values()
                .flat_map(|servers| servers.0.iter())
                .flat_map(|(_, counters)| counters.0.iter())
                .map(|(_, counter)| counter)
            {
                spend_rows = spend_rows.saturating_add(counter.rows.len() as u64);
            }
        }
        Ok(StoreSize {
            decisions,
            spend_rows,
            bytes: None,
        })
    }

    fn servers(&self) -> Result<Vec<String>, StoreError> {
        let mut names = BTreeSet::new();
        for shard in self.all_servers()? {
            names.extend(shard.keys().cloned());
        }
        for shard in &self.spend {
            let map = lock(shard)?;
            names.extend(
                map.values()
                    .flat_map(|servers| servers.0.iter())
                    .map(|(name, _)| name.clone()),
            );
        }
        Ok(names.into_iter().collect())
    }

    fn check_integrity(&self) -> Result<Integrity, StoreError> {
        // Nothing is on disk to damage; the one invariant across maps is
        // each server's stored count against its decisions.
        let mut stored: BTreeMap<String, u64> = BTreeMap::new();
        for shard in self.all_servers()?.iter() {
            for (name, server) in shard.iter() {
                stored.insert(name.clone(), server.stats.stored);
            }
        }
        let mut counted: BTreeMap<String, u64> = BTreeMap::new();
        for entry in self.decisions(&DecisionFilter::default())? {
            *counted.entry(entry.key.server_id).or_default() += 1;
        }
        let mut integrity = Integrity {
            checks: vec!["each server's stored count against its decisions".to_owned()],
            findings: Vec::new(),
        };
        for (server, count) in &counted {
            let recorded = stored.get(server).copied().unwrap_or(0);
            if recorded != *count {
                integrity.findings.push(format!(
                    "server `{server}` counts {recorded} stored decisions but has {count}"
                ));
            }
        }
        Ok(integrity)
    }
}

/// Whether two strings are equal; the engine passes the very digest text it
/// stored (one `Arc<str>`), so the pointers usually settle it without a compare.
#[inline]
fn same_text(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

fn lock<T>(mutex: &Mutex<T>) -> Result<MutexGuard<'_, T>, StoreError> {
    mutex.lock().map_err(|_| StoreError::Poisoned)
}

/// One check against its counter (`None`: never admitted), `pending`
/// being what earlier checks of the same call add: the steps of an
/// admission, shared with [`StoreAdmin::usage`]. `prune`: delete a few
/// rows past the retention (an admission does; a look does not).
fn assess(
    mut counter: Option<&mut Counter>,
    check: &LimitCheck,
    pending: u64,
    now: Millis,
    prune: bool,
) -> Assessed {
    let floor = window_floor(check.window, now);
    let spent = match counter.as_deref_mut() {
        Some(counter) => {
            if let LimitWindow::Rolling { ms } = check.window {
                counter.lengthen(ms);
            }
            if floor < counter.pruned {
                // The window reaches back over deleted spend (a clock step
                // back past the retention): it cannot be counted, refuse.
                return Assessed::over_deleted(check, counter.pruned);
            }
            counter.move_floor(floor);
            let spent = counter.spent(check.window);
            if prune {
                counter.prune(floor.saturating_sub(retention(check.window)));
            }
            spent
        }
        None => 0,
    };
    let rows = |floor: Millis| -> Result<Vec<(Millis, u64)>, std::convert::Infallible> {
        Ok(counter
            .as_deref()
            .map(|counter| {
                counter
                    .rows
                    .range(counter.index(floor)..)
                    .map(|row| (row.at, row.amount))
                    .collect()
            })
            .unwrap_or_default())
    };
    match Assessed::judge(check, spent.saturating_add(pending), floor, rows) {
        Ok(assessed) => assessed,
        Err(never) => match never {},
    }
}

/// Checks `checks` against one server's counters and records them all if every one fits.
fn admit_into(
    counters: &mut Counters,
    checks: &[LimitCheck],
    now: Millis,
    reservation: impl FnOnce() -> Reservation,
) -> Admission {
    for (index, check) in checks.iter().enumerate() {
        let counter = counters.get_mut(check.counter.as_str());
        let assessed = assess(counter, check, pending(checks, index), now, true);
        if let Some(available_at) = assessed.available_at {
            return Admission::Refused {
                index,
                counter: check.counter.clone(),
                available_at,
            };
        }
    }
    let reservation = reservation();
    for check in checks {
        let spend = Spend {
            at: now,
            amount: check.amount,
            reservation: reservation.id,
        };
        let counter = counters.get_or_insert(&check.counter);
        // A new counter learns its window here, as the SQLite store's does
        // (an existing one already did in `assess`).
        if let LimitWindow::Rolling { ms } = check.window {
            counter.rolling_ms = Some(ms);
        }
        counter.push(spend);
    }
    Admission::Admitted { reservation }
}

impl MemoryStore {
    /// [`DecisionStore::replay`] of a decision that `answers` accepts.
    fn replay_where(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
        answers: impl Fn(&StoredDecision) -> bool,
    ) -> Result<Option<StoredDecision>, StoreError> {
        let (hash, mut shard) = self.decision_shard(key)?;
        let found = shard
            .get_mut(&hash)
            .and_then(|bucket| bucket.iter_mut().find(|(k, _)| k == key));
        match found {
            Some((_, found))
                if same_text(&found.digest, digest) && !found.is_expired(now) && answers(found) =>
            {
                found.represented = found.represented.saturating_add(1);
                Ok(Some(found.clone()))
            }
            _ => Ok(None),
        }
    }
}

impl DecisionStore for MemoryStore {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        self.replay_where(key, digest, now, |_| true)
    }

    fn admit(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
    ) -> Result<Admission, StoreError> {
        if checks.is_empty() {
            return Ok(Admission::Admitted {
                reservation: Reservation::NONE,
            });
        }
        if let Some(refused) = super::refuse_outside_calendar(checks, now) {
            return Ok(refused);
        }
        let (hash, mut shard) = self.spend_shard(server_id)?;
        let reservation = || Reservation {
            id: self.next_seq.fetch_add(1, Ordering::Relaxed),
            at: now,
        };
        let counters = shard.entry(hash).or_default().get_or_insert(server_id);
        Ok(admit_into(counters, checks, now, reservation))
    }

    fn settle(
        &self,
        server_id: &str,
        reservation: Reservation,
        counter: &str,
        actual: u64,
    ) -> Result<(), StoreError> {
        if reservation.is_none() {
            return Ok(());
        }
        if reservation.id >= self.next_seq.load(Ordering::Relaxed) {
            return Err(StoreError::UnknownReservation {
                reservation: reservation.id,
                counter: counter.to_owned(),
            });
        }
        let (hash, mut shard) = self.spend_shard(server_id)?;
        // Rows of a window that has passed may be pruned; settling them changes nothing that counts.
        let Some(counter) = shard
            .get_mut(&hash)
            .and_then(|bucket| bucket.get_mut(server_id))
            .and_then(|counters| counters.get_mut(counter))
        else {
            return Ok(());
        };
        // Rows are sorted by time: the admission's rows start where `at` does.
        let first = counter.rows.partition_point(|row| row.at < reservation.at);
        let row = counter
            .rows
            .range_mut(first..)
            .take_while(|row| row.at == reservation.at)
            .find(|row| row.reservation == reservation.id);
        if let Some(row) = row {
            let old = std::mem::replace(&mut row.amount, actual);
            // Only rows at or after the floor are in the running total.
            if reservation.at >= counter.floor {
                counter.total = counter.total.saturating_sub(old).saturating_add(actual);
            }
        }
        Ok(())
    }

    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        let mut stored = decision.clone();
        stored.represented = 0;
        let rank = eviction_key(&key.identity, &stored);
        let mut servers = self.server_shard(&key.server_id)?;
        let entry = servers.entry(key.server_id.clone()).or_default();
        let replaced = {
            let (hash, mut shard) = self.decision_shard(key)?;
            let bucket = shard.entry(hash).or_default();
            match bucket.iter_mut().find(|(k, _)| k == key) {
                // A user's answer in force is kept (`store::may_replace`).
                Some((_, slot)) if !may_replace(slot, &stored) => return Ok(()),
                Some((_, slot)) => Some(std::mem::replace(slot, stored)),
                None => {
                    bucket.push((key.clone(), stored));
                    None
                }
            }
        };
        match replaced {
            Some(old) => {
                entry.order.remove(&eviction_key(&key.identity, &old));
            }
            None => entry.stats.stored += 1,
        }
        entry.order.insert(rank);
        while entry.stats.stored > self.max_per_server {
            let Some((_, _, _, identity)) = entry.order.pop_first() else {
                break;
            };
            let victim = DecisionKey::new(key.server_id.as_str(), identity);
            if let Some(represented) = self.remove(&victim)? {
                entry.stats.stored -= 1;
                entry.stats.evicted += 1;
                entry.stats.evicted_represented =
                    entry.stats.evicted_represented.saturating_add(represented);
            }
        }
        Ok(())
    }

    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
        let (hash, shard) = self.decision_shard(key)?;
        Ok(shard
            .get(&hash)
            .and_then(|bucket| bucket.iter().find(|(k, _)| k == key))
            .map(|(_, decision)| decision.clone()))
    }

    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        let mut servers = self.server_shard(server_id)?;
        let Some(entry) = servers.get_mut(server_id) else {
            return Ok(0);
        };
        let mut removed = 0u64;
        for shard in &self.decisions {
            let mut map = lock(shard)?;
            map.retain(|_, bucket| {
                bucket.retain(|(key, decision)| {
                    let keep = key.server_id != server_id
                        || (*decision.digest == *digest && !decision.is_expired(now));
                    if !keep {
                        entry.order.remove(&eviction_key(&key.identity, decision));
                        removed += 1;
                    }
                    keep
                });
                !bucket.is_empty()
            });
        }
        entry.stats.stored -= removed;
        Ok(removed)
    }

    fn server_stats(&self, server_id: &str) -> Result<ServerStats, StoreError> {
        Ok(self
            .server_shard(server_id)?
            .get(server_id)
            .map(|entry| entry.stats)
            .unwrap_or_default())
    }

    /// Every count is written as it happens: nothing to flush.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The replay, then (unless `evaluate` answers) the admission: each
    /// takes its own shard lock, as two calls would. In one process the
    /// two are as cheap as one, and a request's own identity cannot be
    /// decided twice at once in a way the order of the locks could change:
    /// the replay only counts, the admission only spends.
    fn replay_or_admit(
        &self,
        key: &DecisionKey,
        approval: Option<&str>,
        digest: &str,
        now: Millis,
        checks: &mut Vec<LimitCheck>,
        evaluate: &mut dyn FnMut(Option<&StoredDecision>, &mut Vec<LimitCheck>) -> Evaluation,
    ) -> Result<ReplayOrAdmit, StoreError> {
        let mut replayed =
            self.replay_where(key, digest, now, |d| answers_probe(&d.verdict, false))?;
        if replayed.is_none()
            && let Some(approval) = approval
        {
            let approval = DecisionKey::new(key.server_id.as_str(), approval);
            replayed =
                self.replay_where(&approval, digest, now, |d| answers_probe(&d.verdict, true))?;
        }
        checks.clear();
        let admission = match evaluate(replayed.as_ref(), checks) {
            Evaluation::Admit => Some(self.admit(&key.server_id, checks, now)?),
            Evaluation::Answered => None,
        };
        Ok(ReplayOrAdmit {
            replayed,
            admission,
        })
    }
}
