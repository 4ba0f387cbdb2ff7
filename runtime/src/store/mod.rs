//! The decision store: what is remembered between requests.
//!
//! One trait, [`DecisionStore`], with two implementations: [`MemoryStore`]
//! (one process, gone on exit) and, behind the `sqlite` feature (on by
//! default), [`SqliteStore`], one file that survives restarts and `kill -9`.
//!
//! The store holds two kinds of state, both keyed by server:
//! - stored decisions, keyed by (server_id, identity): a verdict, a reason, an
//!   expiry, the effective-block digest that produced it and a `represented`
//!   counter — never a completion;
//! - spend against rate and budget limits, recorded atomically at admission
//!   and settled afterwards with real token usage.
//!
//! Every operation is atomic at the level the engine needs — never a
//! read-modify-write split across calls — so a networked store for a fleet of
//! gateway replicas (Redis, PostgreSQL) can implement each in one round trip.
//! See `runtime/STORE.md` for the design and `docs/performance.md`, "SQLite
//! store", for the measured figures.

#[cfg(feature = "sqlite")]
mod checkpointer;
mod memory;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use memory::MemoryStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore, Synchronous};

use std::path::PathBuf;
use std::sync::Arc;

/// Unix epoch milliseconds, UTC.
pub type Millis = i64;

/// Where a stored decision lives: one request identity of one server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DecisionKey {
    /// The server the request came from, as the client names it.
    pub server_id: String,
    /// The request identity (`server_id:` + 32 hex), see [`crate::identity`].
    pub identity: String,
}

impl DecisionKey {
    /// A key from its two parts.
    pub fn new(server_id: impl Into<String>, identity: impl Into<String>) -> Self {
        DecisionKey {
            server_id: server_id.into(),
            identity: identity.into(),
        }
    }
}

/// The outcome a stored decision replays. Trims are never stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The request may run (consent was given).
    Allow,
    /// The request is refused with the stored reason and `data`.
    Deny,
}

impl Verdict {
    /// The stable text form, `allow` or `deny`, as stored on disk.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        }
    }

    /// Parses [`Verdict::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Verdict> {
        match text {
            "allow" => Some(Verdict::Allow),
            "deny" => Some(Verdict::Deny),
            _ => None,
        }
    }
}

/// What is remembered about one request identity: a verdict and a reason, never a completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDecision {
    /// Allow or deny.
    pub verdict: Verdict,
    /// The reason name, e.g. `policy.budget_exhausted` or `user.approved`.
    /// Shared text (`Arc<str>`): a replay hands it out without copying.
    pub reason: Arc<str>,
    /// The effective-block digest that produced it; a lookup with another digest misses.
    pub digest: Arc<str>,
    /// None = no expiry (until the block changes).
    pub expires_at: Option<Millis>,
    /// The exact `error.data` JSON text sent with a denial (so a replay is byte-identical); None for allow.
    pub data: Option<Arc<str>>,
    /// How many times this identity was re-presented and answered from the store.
    pub represented: u64,
    /// When the decision was made.
    pub decided_at: Millis,
    /// Whether the policy alone gives this answer again (a switch or an
    /// input limit: `policy.sampling_disabled`, `policy.tools_disabled`,
    /// `policy.input_too_large`, or a policy's own reason in their place).
    /// When a server reaches its bound of stored decisions these go first:
    /// dropping one loses nothing but its `represented` count, which the
    /// store adds to the server's evicted tally ([`ServerStats`]).
    pub recomputable: bool,
    /// The statement that decided, by its stable stored name
    /// ([`crate::engine::Statement::stored_name`]: `max_input`, `consent`,
    /// `budget:1`, …), so that a replay names the statement the first answer
    /// named (schema 4). `None`: not known (a row migrated from schema 3, or
    /// written by another tool); the engine then derives it from the reason.
    pub statement: Option<Arc<str>>,
}

impl StoredDecision {
    /// Whether this is the user's answer: a reason of the reserved `user.`
    /// namespace (`user.denied`, `user.approved`), which only the user's
    /// word produces (`docs/spec/language.md`, reserved reasons).
    pub fn is_users_answer(&self) -> bool {
        self.reason.starts_with("user.")
    }

    /// Whether the decision has expired at `now` (expiry is exclusive: at
    /// `expires_at` it is already gone, so a denial expires exactly at `resetsAt`).
    pub fn is_expired(&self, now: Millis) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

/// Whether `new` may replace `old`, stored under the same key
/// (`docs/spec/store.md`, "What a later decision may replace"): a user's
/// answer replaces anything; a policy decision replaces anything but a
/// user's answer that is still in force (same digest, not expired when
/// `new` was decided). Every store's [`DecisionStore::record`] follows it.
pub fn may_replace(old: &StoredDecision, new: &StoredDecision) -> bool {
    new.is_users_answer()
        || !old.is_users_answer()
        || *old.digest != *new.digest
        || old.is_expired(new.decided_at)
}

/// Whether a stored decision with `verdict` answers the probe of
/// [`DecisionStore::replay_or_admit`] by this kind of key: the refusal key
/// answers with denials only, the approval key with approvals only (an
/// approval stored under a refusal key, as before the two keys, is never
/// replayed).
pub fn answers_probe(verdict: &Verdict, approval_probe: bool) -> bool {
    match verdict {
        Verdict::Deny => !approval_probe,
        Verdict::Allow => approval_probe,
    }
}

/// One limit the engine asks the store to enforce atomically at admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitCheck {
    /// Stable key of the counter within the server, e.g. "rate", "budget:requests:day", "budget:tokens:rolling:86400000".
    pub counter: String,
    /// How much this request spends (1 for requests and rate; reserved maxTokens for token budgets).
    pub amount: u64,
    /// The most that may be spent in the window.
    pub limit: u64,
    /// The window the limit counts over.
    pub window: LimitWindow,
}

/// The window a [`LimitCheck`] counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitWindow {
    /// Spend with timestamps in (now - ms, now] counts.
    Rolling {
        /// The window's length in milliseconds.
        ms: u64,
    },
    /// A calendar window [start, end) computed by the engine; spend recorded in it counts; resets at `end`.
    Fixed {
        /// The window's first millisecond.
        start: Millis,
        /// The first millisecond after the window: its reset.
        end: Millis,
    },
}

/// Where an admission's spend rows are, for [`DecisionStore::settle`]: issued
/// by `admit`, handed back unchanged with the same server id.
///
/// It carries the admission time so that a store can find the rows directly
/// (SQLite: one primary-key look-up) without keeping an index of
/// reservations, which would cost every admission one more page written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reservation {
    /// Unique among the admissions of one store; 0 = nothing was counted.
    pub id: u64,
    /// The admission's `now`: every spend row it wrote is recorded at this time.
    pub at: Millis,
}

impl Reservation {
    /// The reservation of an admission that counted nothing (no checks);
    /// settling it is a no-op.
    pub const NONE: Reservation = Reservation { id: 0, at: 0 };

    /// Whether nothing was counted.
    pub fn is_none(&self) -> bool {
        self.id == 0
    }
}

/// The answer to [`DecisionStore::admit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Every check fitted; all were recorded atomically. `reservation` identifies the spend rows for settle().
    Admitted {
        /// Handle for [`DecisionStore::settle`]; its id is unique within the store.
        reservation: Reservation,
    },
    /// The first check (in the given order) that did not fit; nothing was recorded.
    Refused {
        /// Index of the refusing check in the slice given to `admit`.
        index: usize,
        /// Its counter name.
        counter: String,
        /// When enough spend leaves a rolling window for `amount` to fit, or the fixed window's end.
        /// `Millis::MAX` when it can never fit (e.g. `amount` alone exceeds a rolling window's limit).
        available_at: Millis,
    },
}

/// Why a store operation failed. The engine fails closed on every one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file exists but is not a readable mcpolicy store (garbage bytes,
    /// truncated, a directory, a damaged page).
    #[error("decision store {} is corrupt or not a decision store: {detail}", path.display())]
    Corrupt {
        /// The store file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The file is empty (0 bytes, or an SQLite database with no schema),
    /// and the caller only reads: inspection never creates a store in it.
    #[error(
        "decision store {} is empty: no proxy has written to it yet (a proxy or `mcpc eval --store` creates the store; `mcpc store` only reads one)",
        path.display()
    )]
    Empty {
        /// The store file.
        path: PathBuf,
    },
    /// The file holds an older schema, and the caller only reads: a
    /// read-only open never migrates (a read-write open does).
    #[error(
        "decision store {} has schema version {found}, older than the {current} this runtime reads; opening it read-only does not migrate it (the next proxy or `mcpc eval --store` that opens it does)",
        path.display()
    )]
    SchemaTooOld {
        /// The store file (or schema).
        path: PathBuf,
        /// The version found.
        found: i64,
        /// The version this runtime writes.
        current: i64,
    },
    /// The file was written by a newer mcpolicy (schema version above ours).
    #[error(
        "decision store {} has schema version {found}, newer than the {supported} this runtime understands; upgrade mcpolicy or use another file",
        path.display()
    )]
    SchemaTooNew {
        /// The store file.
        path: PathBuf,
        /// The version found in the file.
        found: i64,
        /// The newest version this runtime reads.
        supported: i64,
    },
    /// The file is a valid SQLite database that some other program owns.
    #[error(
        "{} is an SQLite database but not an mcpolicy decision store ({detail}); refusing to touch it",
        path.display()
    )]
    ForeignSchema {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        detail: String,
    },
    /// The file could not be opened, created or accessed.
    #[error("cannot access decision store {}: {source}", path.display())]
    Io {
        /// The store file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Another process held the store's write lock for longer than the busy timeout.
    #[error("decision store {} is busy: another process held its lock past the timeout", path.display())]
    Busy {
        /// The store file.
        path: PathBuf,
    },
    /// An SQLite error not covered above.
    #[cfg(feature = "sqlite")]
    #[error("decision store {}: {source}", path.display())]
    Sqlite {
        /// The store file.
        path: PathBuf,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored row does not decode (e.g. an unknown verdict).
    #[error("decision store {}: unreadable row: {detail}", path.display())]
    BadRow {
        /// The store file (or `<memory>`).
        path: PathBuf,
        /// What did not decode.
        detail: String,
    },
    /// `settle` named a reservation or counter the store does not hold (already
    /// pruned, or never admitted).
    #[error("no reservation {reservation} for counter `{counter}`")]
    UnknownReservation {
        /// The reservation handle.
        reservation: u64,
        /// The counter name.
        counter: String,
    },
    /// A thread panicked while holding the store's lock.
    #[error("decision store lock poisoned by a panicked thread")]
    Poisoned,
    /// A networked store (PostgreSQL) could not be reached, or its
    /// connection broke during the operation. The engine fails closed
    /// (`runtime.store_unavailable`); the store reconnects by itself.
    #[error("decision store {store} is unavailable: {detail}")]
    Unavailable {
        /// Where the store is (never its password).
        store: String,
        /// What failed.
        detail: String,
    },
    /// A networked store's database refused or failed an operation (a
    /// timeout, a missing privilege, a damaged schema).
    #[error("decision store {store}: {detail}")]
    Backend {
        /// Where the store is (never its password).
        store: String,
        /// The database's error.
        detail: String,
    },
}

impl StoreError {
    /// A stable name for the kind of failure (`store.corrupt`,
    /// `store.empty`, …), for scripts and for the operator's messages:
    /// `docs/spec/store.md`, "Reading a store".
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Corrupt { .. } | StoreError::BadRow { .. } => "store.corrupt",
            StoreError::Empty { .. } => "store.empty",
            StoreError::SchemaTooOld { .. } => "store.schema_too_old",
            StoreError::SchemaTooNew { .. } => "store.schema_too_new",
            StoreError::ForeignSchema { .. } => "store.foreign",
            StoreError::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => "store.missing",
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
                    "store.permission"
                }
                _ => "store.io",
            },
            StoreError::Busy { .. } => "store.busy",
            #[cfg(feature = "sqlite")]
            StoreError::Sqlite { .. } => "store.sqlite",
            StoreError::UnknownReservation { .. } => "store.unknown_reservation",
            StoreError::Poisoned => "store.poisoned",
            StoreError::Unavailable { .. } => "store.unavailable",
            StoreError::Backend { .. } => "store.backend",
        }
    }
}

/// What [`StoreAdmin::check_integrity`] found: each check it ran, by name,
/// and every piece of damage (empty when the store is sound).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Integrity {
    /// What was checked, in order, e.g. `PRAGMA integrity_check`.
    pub checks: Vec<String>,
    /// Each finding, naming the table, row or page it is about.
    pub findings: Vec<String>,
}

impl Integrity {
    /// Whether nothing was found.
    pub fn is_sound(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Atomic operations at the level the engine needs — never a read-modify-write split across
/// calls — so a networked store (Redis, PostgreSQL) can implement each in one round trip.
///
/// Every method is required; none has a default a wrapping store could
/// silently fall back to. The engine calls [`DecisionStore::replay_or_admit`]
/// for every request (steps 3–8), [`DecisionStore::record`] for a decision
/// to remember, [`DecisionStore::settle`] for usage and refunds, and
/// [`DecisionStore::purge_stale`] once per server. [`DecisionStore::replay`]
/// and [`DecisionStore::admit`] are the two halves `replay_or_admit` is
/// specified by: a store implements them so that the differential model
/// tests (`runtime/tests/store_model.rs`) check each half against the same
/// reference. [`DecisionStore::get`] and [`DecisionStore::server_stats`]
/// answer inspection (`mcpc eval`, operators) without counting anything.
///
/// `Debug` is a supertrait so that `Arc<dyn DecisionStore>` can sit in a derived-`Debug` struct.
pub trait DecisionStore: Send + Sync + std::fmt::Debug {
    /// If a decision for `key` exists with this `digest` and has not expired at `now`, increment its
    /// `represented` and return it (with the incremented count). Otherwise None.
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError>;
    /// Check every limit against its window and, only if all fit, record all spends at `now`. Atomic with
    /// respect to every other call on the same store (also across processes for SQLite).
    ///
    /// A check fits when its window's spend plus its amount stays within
    /// its limit and the window is not exhausted: an amount of 0 needs room
    /// for 1, so a spent window refuses every amount (`docs/spec/store.md`,
    /// "Expiry, windows and reservations").
    ///
    /// Spend rows are pruned here once they are more than a retention (one
    /// window length and an eighth, at least a minute) before
    /// the window's floor, a few per call. A window whose floor lies before a
    /// counter's newest deleted row (a clock step back further than the
    /// retention) cannot be counted and is refused, so a step back never
    /// admits what a store that never pruned would refuse (STORE.md, "Clock
    /// steps"). A counter name must keep one window: a rolling counter checked
    /// with a longer window than before does not count what the shorter one
    /// deleted (the engine's budget counter names carry the window, e.g.
    /// `budget:tokens:rolling:86400000`).
    fn admit(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
    ) -> Result<Admission, StoreError>;
    /// Replace the reserved amount of `counter` in `reservation`, issued by
    /// `admit(server_id, …)`, with the real spend (token settlement).
    ///
    /// [`Reservation::NONE`] (an admission with no checks) and spend that has
    /// already left its window (pruned) are no-ops; a reservation id this
    /// store never issued is [`StoreError::UnknownReservation`].
    fn settle(
        &self,
        server_id: &str,
        reservation: Reservation,
        counter: &str,
        actual: u64,
    ) -> Result<(), StoreError>;
    /// Store (insert or replace) the decision for `key` (represented
    /// starts at 0), unless the stored one is a user's answer still in
    /// force and the new one is not ([`may_replace`]): then nothing
    /// changes.
    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError>;
    /// The stored decision as it is, without counting a replay (for tests and `mcpc eval`).
    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError>;
    /// Delete decisions of `server_id` whose digest differs from `digest`, and expired ones; returns how many.
    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError>;
    /// How many decisions are stored for `server_id`, and how many were
    /// evicted to keep it within the store's bound (with their `represented`).
    ///
    /// Required, like every method here: a provided answer of zeros would
    /// let a wrapping store that forgets to forward it report nothing
    /// evicted while it evicts.
    fn server_stats(&self, server_id: &str) -> Result<ServerStats, StoreError>;
    /// Writes what the store holds only in this process's memory: the
    /// SQLite store's re-presentation counts of replays, written in batches
    /// (`docs/spec/store.md`, "Durability"). A caller about to end (the
    /// proxy at the end of its session, before a stop signal's exit) calls
    /// it; dropping the store does it too. A store that writes everything
    /// as it happens answers `Ok(())`.
    ///
    /// Required, like every method here: a wrapping store that forgot to
    /// forward it would lose the counts of every session it ends.
    fn flush(&self) -> Result<(), StoreError>;

    /// Steps 3–8 of an evaluation as one atomic operation: what the engine
    /// calls for every request, and the only way it replays or admits.
    ///
    /// The store looks the request up by its two keys
    /// (`docs/spec/store.md`, "The atomic decision"): `key` (the refusal
    /// key) answers only with a stored **denial**, then, on a miss, the
    /// approval key `approval` of the same server (when given) answers only
    /// with a stored **approval**; each probe is [`DecisionStore::replay`]
    /// restricted to that verdict (counting the re-presentation of the row
    /// it hits, and only that one). It then
    /// calls `evaluate` once with that answer (`None` on a miss) and an
    /// empty `checks`. `evaluate` is pure computation (the engine's steps
    /// 4–6: no I/O, no call back into the store); it fills `checks` and
    /// answers [`Evaluation::Admit`] to have them admitted exactly as
    /// [`DecisionStore::admit`] would (for `key.server_id`, at `now`), or
    /// [`Evaluation::Answered`] when the request is already answered (a
    /// stored denial, a switch, an input limit) and nothing is counted.
    /// An empty `checks` is admitted with [`Reservation::NONE`] without
    /// touching any counter.
    ///
    /// Atomicity: nothing another caller does may fall between the replay
    /// and the admission where the store can prevent it. SQLite runs all of
    /// it in one write transaction; a PostgreSQL store runs it in one
    /// transaction (the decision row read `FOR UPDATE`, `evaluate` called
    /// while it is held, the spend rows written before `COMMIT`), which the
    /// pure, synchronous callback makes possible. The in-memory store takes
    /// its two locks in turn (the replay, then the admission), each atomic.
    ///
    /// There is no provided implementation: a store wrapping another must
    /// forward it, and one that cannot combine the two writes them out here.
    fn replay_or_admit(
        &self,
        key: &DecisionKey,
        approval: Option<&str>,
        digest: &str,
        now: Millis,
        checks: &mut Vec<LimitCheck>,
        evaluate: &mut dyn FnMut(Option<&StoredDecision>, &mut Vec<LimitCheck>) -> Evaluation,
    ) -> Result<ReplayOrAdmit, StoreError>;
}

/// What the `evaluate` callback of [`DecisionStore::replay_or_admit`]
/// decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evaluation {
    /// Admit the checks it filled in (rate first, then budgets).
    Admit,
    /// The request is answered without an admission (a stored denial
    /// answers it again, or a switch or an input limit denies it): count
    /// nothing.
    Answered,
}

/// What [`StoreAdmin`] selects: every given field must match (AND); all
/// `None` selects every decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionFilter {
    /// Only this server's decisions.
    pub server_id: Option<String>,
    /// Only the decision of this request identity.
    pub identity: Option<String>,
    /// Only decisions with this reason name.
    pub reason: Option<String>,
    /// Only allows, or only denials.
    pub verdict: Option<Verdict>,
}

impl DecisionFilter {
    /// Whether `key`'s `decision` is selected.
    pub fn matches(&self, key: &DecisionKey, decision: &StoredDecision) -> bool {
        self.server_id.as_ref().is_none_or(|s| *s == key.server_id)
            && self.identity.as_ref().is_none_or(|i| *i == key.identity)
            && self.reason.as_ref().is_none_or(|r| **r == *decision.reason)
            && self.verdict.as_ref().is_none_or(|v| *v == decision.verdict)
    }
}

/// One stored decision with its key ([`StoreAdmin::decisions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    /// Server and identity.
    pub key: DecisionKey,
    /// The decision as stored (`represented` as counted so far).
    pub decision: StoredDecision,
}

/// A read-only view of one counter ([`StoreAdmin::usage`]): the same
/// arithmetic as [`DecisionStore::admit`], recording nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterUsage {
    /// The spend counted in the check's window at `now`. When the window
    /// reaches back over spend already deleted (a clock stepped back past
    /// the retention, STORE.md "Clock steps"), what it held is unknown and
    /// the window counts as full: `spent` is the check's `limit`.
    pub spent: u64,
    /// When `check.amount` more would fit: `None` = it fits now;
    /// `Millis::MAX` = never (the amount alone exceeds a rolling limit).
    /// Exactly the `available_at` an admission refused now would carry.
    pub available_at: Option<Millis>,
}

/// Sizes for operators ([`StoreAdmin::size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreSize {
    /// Stored decisions, expired ones included until pruned.
    pub decisions: u64,
    /// Spend rows (one per counter per admission, until pruned).
    pub spend_rows: u64,
    /// Bytes on disk (SQLite: the file and its write-ahead log); `None`
    /// where the store has no such size (in memory).
    pub bytes: Option<u64>,
}

/// What [`StoreAdmin::prune_expired`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pruned {
    /// Expired decisions deleted.
    pub decisions: u64,
    /// Spend rows deleted.
    pub spend_rows: u64,
}

/// Operators' inspection and maintenance (`mcpc store`): never on the
/// engine's path. Every method is one transaction (SQLite: a read
/// transaction for the reads, `BEGIN IMMEDIATE` for the writes), safe while
/// proxies use the same store.
///
/// Stale decisions (made under a digest that is no longer the server's
/// effective block) are pruned with [`DecisionStore::purge_stale`] per
/// server by a caller who knows the policy.
pub trait StoreAdmin: DecisionStore {
    /// The matching decisions, expired ones included, ordered by
    /// `(server_id, identity)`.
    fn decisions(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError>;
    /// Deletes the matching decisions in one transaction and returns them
    /// (ordered as [`StoreAdmin::decisions`]). A server's stored count
    /// ([`ServerStats::stored`]) drops with them; nothing is counted as
    /// evicted.
    fn forget(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError>;
    /// How much of `check`'s window `server_id` has spent at `now`, and when
    /// `check.amount` more would fit: what [`DecisionStore::admit`] of this
    /// one check would compute, without recording or pruning anything.
    fn usage(
        &self,
        server_id: &str,
        check: &LimitCheck,
        now: Millis,
    ) -> Result<CounterUsage, StoreError>;
    /// Deletes every server's decisions expired at `now`, and spend rows
    /// recorded before [`prune_cut`]: rows an admission at `now` may delete
    /// too, so nothing that counts, or that a clock step back within the
    /// retention would count, is lost.
    fn prune_expired(&self, now: Millis) -> Result<Pruned, StoreError>;
    /// Row counts and, where the store knows it, its size in bytes.
    fn size(&self) -> Result<StoreSize, StoreError>;
    /// Every server the store holds anything for, sorted, each once: a
    /// stored decision, a tally, or a counter (made by the server's first
    /// admission with checks, admitted or refused). A server that was only
    /// ever allowed has counters and no decision.
    fn servers(&self) -> Result<Vec<String>, StoreError>;
    /// Reads the whole store and checks it: the storage's own integrity
    /// check, then the schema's invariants (every server's stored count is
    /// its number of decisions, every counter's total is the sum of its
    /// spend, …; `docs/spec/store.md`, "Verifying a store"). Linear in the
    /// store's size; writes nothing. Damage is a finding, not an error: the
    /// error is for a store that cannot be read at all.
    fn check_integrity(&self) -> Result<Integrity, StoreError>;
}

impl<S: StoreAdmin + ?Sized> StoreAdmin for std::sync::Arc<S> {
    fn decisions(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        (**self).decisions(filter)
    }
    fn forget(&self, filter: &DecisionFilter) -> Result<Vec<StoredEntry>, StoreError> {
        (**self).forget(filter)
    }
    fn usage(
        &self,
        server_id: &str,
        check: &LimitCheck,
        now: Millis,
    ) -> Result<CounterUsage, StoreError> {
        (**self).usage(server_id, check, now)
    }
    fn prune_expired(&self, now: Millis) -> Result<Pruned, StoreError> {
        (**self).prune_expired(now)
    }
    fn size(&self) -> Result<StoreSize, StoreError> {
        (**self).size()
    }
    fn servers(&self) -> Result<Vec<String>, StoreError> {
        (**self).servers()
    }
    fn check_integrity(&self) -> Result<Integrity, StoreError> {
        (**self).check_integrity()
    }
}

/// The longest fixed window [`StoreAdmin::prune_expired`] keeps spend for:
/// a store does not record a fixed window's length (the engine's calendar
/// windows are at most a month), so the spend of a counter never checked
/// with a rolling window is kept as if its window were a leap year long.
pub const LONGEST_FIXED_WINDOW_MS: Millis = 366 * 24 * 60 * 60 * 1000;

/// Spend rows recorded before this may be deleted by
/// [`StoreAdmin::prune_expired`] at `now`: for a counter last admitted with
/// a rolling window of `rolling_ms`, the cut an admission at `now` uses
/// (the window's floor less its retention); for any other counter the cut
/// of a fixed window of [`LONGEST_FIXED_WINDOW_MS`] ending at `now`, which
/// is at or before the cut of every fixed window no longer than it whose
/// period holds `now`.
pub fn prune_cut(rolling_ms: Option<u64>, now: Millis) -> Millis {
    let window = match rolling_ms {
        Some(ms) => LimitWindow::Rolling { ms },
        None => LimitWindow::Fixed {
            start: now.saturating_sub(LONGEST_FIXED_WINDOW_MS),
            end: now,
        },
    };
    window_floor(window, now).saturating_sub(retention(window))
}

/// The first instant of the calendar the runtime computes windows in and
/// writes back (RFC 3339's years 0000–9999): `0000-01-01T00:00:00Z`.
pub const CALENDAR_FIRST: Millis = -62_167_219_200_000;

/// The last instant of that calendar: `9999-12-31T23:59:59.999Z`.
pub const CALENDAR_LAST: Millis = 253_402_300_799_999;

/// Whether `now` lies in the calendar ([`CALENDAR_FIRST`] ..=
/// [`CALENDAR_LAST`]). Outside it (a clock at `Millis::MAX` or
/// `Millis::MIN`, a year past 9999) a window's floor, end and retention
/// saturate and stop meaning a window, so every store refuses every
/// admission with checks there (`docs/spec/store.md`, "Time outside the
/// calendar").
pub fn in_calendar(now: Millis) -> bool {
    (CALENDAR_FIRST..=CALENDAR_LAST).contains(&now)
}

/// What every store answers to an admission of `checks` (not empty) at a
/// `now` outside the calendar: refused by the first check, never available
/// (`Millis::MAX`), nothing recorded. `None` inside the calendar.
pub fn refuse_outside_calendar(checks: &[LimitCheck], now: Millis) -> Option<Admission> {
    let first = checks.first()?;
    (!in_calendar(now)).then(|| Admission::Refused {
        index: 0,
        counter: first.counter.clone(),
        available_at: Millis::MAX,
    })
}

/// What [`StoreAdmin::usage`] answers for `check` at a `now` outside the
/// calendar: the window counts as full and never frees (what an admission
/// there would answer). `None` inside the calendar.
pub fn usage_outside_calendar(check: &LimitCheck, now: Millis) -> Option<CounterUsage> {
    (!in_calendar(now)).then_some(CounterUsage {
        spent: check.limit,
        available_at: Some(Millis::MAX),
    })
}

/// The outcome of one check against its counter, shared by admission and
/// [`StoreAdmin::usage`] so that both compute the same figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Assessed {
    /// The window's spend, with what earlier checks of the same call add.
    pub(crate) spent: u64,
    /// `None`: `check.amount` fits; else when it would.
    pub(crate) available_at: Option<Millis>,
}

impl Assessed {
    /// A window that reaches back over deleted spend (a clock step back past
    /// the retention): it cannot be counted, so it counts as full.
    pub(crate) fn over_deleted(check: &LimitCheck, pruned: Millis) -> Assessed {
        Assessed {
            spent: check.limit,
            available_at: Some(unknown_available_at(check.window, pruned)),
        }
    }

    /// What the store answers for `check` given the spend `spent` of its
    /// window (earlier checks of the call included); `rows` lists the
    /// counter's spend rows at or after `floor`, oldest first, for a rolling
    /// refusal's `available_at`.
    pub(crate) fn judge<E>(
        check: &LimitCheck,
        spent: u64,
        floor: Millis,
        rows: impl FnOnce(Millis) -> Result<Vec<(Millis, u64)>, E>,
    ) -> Result<Assessed, E> {
        // An exhausted window refuses whatever the amount: a reservation of
        // 0 needs room for 1 (`docs/spec/evaluation.md`, "Step 8: Budgets").
        let need = room_needed(check.amount);
        let available_at = if spent.saturating_add(need) <= check.limit {
            None
        } else {
            Some(match check.window {
                LimitWindow::Fixed { end, .. } => end,
                LimitWindow::Rolling { ms } => rolling_available_at(
                    rows(floor)?,
                    must_free(spent, need, check.limit),
                    need,
                    check.limit,
                    ms,
                ),
            })
        };
        Ok(Assessed {
            spent,
            available_at,
        })
    }

    /// What an operator sees of this outcome.
    pub(crate) fn usage(self) -> CounterUsage {
        CounterUsage {
            spent: self.spent,
            available_at: self.available_at,
        }
    }
}

/// What earlier checks of one call add to `checks[index]`'s counter: several
/// checks may name one counter.
pub(crate) fn pending(checks: &[LimitCheck], index: usize) -> u64 {
    checks[..index]
        .iter()
        .filter(|earlier| earlier.counter == checks[index].counter)
        .fold(0u64, |sum, earlier| sum.saturating_add(earlier.amount))
}

/// How many decisions a store keeps per server unless configured otherwise
/// ([`MemoryStore::with_max_decisions_per_server`],
/// `SqliteOptions::max_decisions_per_server`).
pub const DEFAULT_MAX_DECISIONS_PER_SERVER: u64 = 10_000;

/// What a store holds for one server, and what it dropped to stay within its
/// bound of stored decisions ([`DecisionStore::server_stats`]).
///
/// `evicted` and `evicted_represented` only grow: a reader adding
/// `evicted_represented` to the `represented` of the stored rows gets every
/// re-presentation the store has answered for the server, evicted or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerStats {
    /// Decisions stored now (expired ones included until purged).
    pub stored: u64,
    /// Decisions dropped to keep the server within its bound.
    pub evicted: u64,
    /// The sum of the evicted decisions' `represented` counts.
    pub evicted_represented: u64,
}

/// The order in which a server's stored decisions are evicted when a new
/// one would exceed its bound: recomputable ones first (the policy gives the
/// same answer again), then those that expire soonest (their effect was
/// ending anyway), those without expiry last (a user's answer), each by age
/// (`decided_at`), then identity. A smaller key is evicted first. Both
/// stores evict in exactly this order.
pub(crate) fn eviction_key(identity: &str, decision: &StoredDecision) -> EvictionKey {
    (
        u8::from(!decision.recomputable),
        decision.expires_at.unwrap_or(Millis::MAX),
        decision.decided_at,
        identity.to_owned(),
    )
}

/// See [`eviction_key`].
pub(crate) type EvictionKey = (u8, Millis, Millis, String);

/// The answer to [`DecisionStore::replay_or_admit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOrAdmit {
    /// What [`DecisionStore::replay`] answered.
    pub replayed: Option<StoredDecision>,
    /// What [`DecisionStore::admit`] answered, when `evaluate` said
    /// [`Evaluation::Admit`] (an empty `checks` is admitted with
    /// [`Reservation::NONE`]); `None` after [`Evaluation::Answered`].
    pub admission: Option<Admission>,
}

impl<S: DecisionStore + ?Sized> DecisionStore for std::sync::Arc<S> {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        (**self).replay(key, digest, now)
    }
    fn admit(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
    ) -> Result<Admission, StoreError> {
        (**self).admit(server_id, checks, now)
    }
    fn settle(
        &self,
        server_id: &str,
        reservation: Reservation,
        counter: &str,
        actual: u64,
    ) -> Result<(), StoreError> {
        (**self).settle(server_id, reservation, counter, actual)
    }
    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        (**self).record(key, decision)
    }
    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
        (**self).get(key)
    }
    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        (**self).purge_stale(server_id, digest, now)
    }
    fn server_stats(&self, server_id: &str) -> Result<ServerStats, StoreError> {
        (**self).server_stats(server_id)
    }
    fn flush(&self) -> Result<(), StoreError> {
        (**self).flush()
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
        (**self).replay_or_admit(key, approval, digest, now, checks, evaluate)
    }
}

/// How much of `amount` cannot fit: the spend that must leave a rolling
/// window before `amount` fits under `limit`, given `spent` so far.
/// The room an amount needs in its window to fit: the amount, and at least
/// 1, so that an exhausted window (`spent == limit`) refuses a reservation
/// of 0 as it refuses any other. What is recorded stays the amount itself.
pub(crate) fn room_needed(amount: u64) -> u64 {
    amount.max(1)
}

fn must_free(spent: u64, amount: u64, limit: u64) -> u64 {
    spent.saturating_add(amount).saturating_sub(limit)
}

/// When a rolling-window refusal clears: walk spend rows oldest first
/// (`(at, amount)`, sorted by `at`) until `need` has been freed; that row
/// leaves the window `ms` after it was recorded. If `amount > limit` nothing
/// will ever fit, and `Millis::MAX` is returned.
fn rolling_available_at(
    rows: impl IntoIterator<Item = (Millis, u64)>,
    need: u64,
    amount: u64,
    limit: u64,
    ms: u64,
) -> Millis {
    if amount > limit {
        return Millis::MAX;
    }
    let mut freed: u64 = 0;
    for (at, spent) in rows {
        freed = freed.saturating_add(spent);
        if freed >= need {
            // A row recorded at `at` counts while at > now - ms, i.e. until now = at + ms.
            return at.saturating_add(ms_as_millis(ms));
        }
    }
    // Even an empty window leaves no room: what this same call adds to the
    // counter in earlier checks already exceeds the limit. It can never fit.
    Millis::MAX
}

/// A window length as [`Millis`], saturating (a window longer than the epoch
/// range behaves as "forever").
fn ms_as_millis(ms: u64) -> Millis {
    Millis::try_from(ms).unwrap_or(Millis::MAX)
}

/// Spend rows an admission deletes per counter at most, oldest first: the
/// deletion keeps pace with the one row per admission a counter gains, and a
/// backlog (a window that passed while nothing was admitted) is worked off
/// over the following admissions instead of in one.
pub(crate) const PRUNE_BATCH: usize = 16;

/// A counter's floor moves over at most this many rows before the store
/// sums its window from the floor instead (both are exact; this picks the
/// shorter walk). Only the SQLite store walks rows.
#[cfg(feature = "sqlite")]
pub(crate) const WALK_LIMIT: usize = 256;

/// The floor of `window` at `now`: rows at or after it may count (a fixed
/// window also stops at its `end`).
pub(crate) fn window_floor(window: LimitWindow, now: Millis) -> Millis {
    match window {
        LimitWindow::Rolling { ms } => rolling_floor(now, ms),
        LimitWindow::Fixed { start, .. } => start,
    }
}

/// Rows recorded before `window_floor(window, now) - retention(window)` may
/// be deleted. One window length and an eighth (so that a step back into
/// the previous calendar period, up to 31 days before a 28-day one, still
/// finds all of it), and at least a minute: a clock step back, or a
/// process sharing the store whose clock is behind, within that span counts
/// exactly what an unpruned store would.
pub(crate) fn retention(window: LimitWindow) -> Millis {
    let length = match window {
        LimitWindow::Rolling { ms } => ms_as_millis(ms),
        LimitWindow::Fixed { start, end } => end.saturating_sub(start),
    };
    length.saturating_add(length / 8).max(60_000)
}

/// Whether a counter last admitted with a rolling window of `before` ms is
/// now checked with a longer one, `ms`: a policy edit lengthening `rate`
/// (the one engine counter whose name does not carry its window). Its prune
/// mark is then dropped: spend deleted under the shorter window is not
/// counted by the longer one (as before schema 3: a counter name keeps one
/// window), instead of refusing every admission until that spend would have
/// left the new window, up to its whole length after the edit.
pub(crate) fn window_changed(before: Option<u64>, ms: u64) -> bool {
    before.is_some_and(|before| ms > before)
}

/// When a refusal for spend that may have been deleted (`window`'s floor at
/// `now` lies below the counter's prune mark `pruned`) can clear: a rolling
/// window's floor passes the mark at `pruned + ms - 1`; a fixed window is
/// asked again at its end.
pub(crate) fn unknown_available_at(window: LimitWindow, pruned: Millis) -> Millis {
    match window {
        LimitWindow::Rolling { ms } => pruned.saturating_add(ms_as_millis(ms)).saturating_sub(1),
        LimitWindow::Fixed { end, .. } => end,
    }
}

/// The first timestamp that still counts in a rolling window of `ms` at `now`:
/// rows with `at >= rolling_floor(now, ms)` are inside `(now - ms, now]`.
fn rolling_floor(now: Millis, ms: u64) -> Millis {
    now.saturating_sub(ms_as_millis(ms)).saturating_add(1)
}
