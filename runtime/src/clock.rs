//! Where the engine's time comes from: always an injected [`Clock`], never
//! the system directly, so tests can move time across window boundaries.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::store::Millis;

/// A source of the current time in Unix epoch milliseconds (UTC).
pub trait Clock: Send + Sync + Debug {
    /// The current time.
    fn now(&self) -> Millis;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => Millis::try_from(since.as_millis()).unwrap_or(Millis::MAX),
            // A clock set before 1970: report the (negative) distance.
            Err(before) => Millis::try_from(before.duration().as_millis())
                .map(|ms| -ms)
                .unwrap_or(Millis::MIN),
        }
    }
}

/// A clock that always reads the same instant.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub Millis);

impl Clock for FixedClock {
    fn now(&self) -> Millis {
        self.0
    }
}

/// A clock tests move by hand; shareable across threads.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock reading `now`.
    pub fn new(now: Millis) -> Self {
        ManualClock {
            now: AtomicI64::new(now),
        }
    }

    /// Sets the time.
    pub fn set(&self, now: Millis) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Moves the time by `ms` (negative moves it back) and returns the new time.
    pub fn advance(&self, ms: i64) -> Millis {
        self.now.fetch_add(ms, Ordering::SeqCst).saturating_add(ms)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// Instants as frames and policies write them: `resetsAt` is RFC 3339 UTC
/// with whole seconds (`2026-03-11T00:00:00Z`). Calendar windows themselves
/// stay inside the engine.
pub use crate::calendar::{format_rfc3339, parse_rfc3339, timestamp};
