//! Alerts: what an operator should see without reading a log
//! (`docs/spec/evaluation.md`, "Alerts"). An alert decides nothing; the
//! engine attaches it to the decision that raised it ([`crate::engine::Decision::alert`]).
//!
//! - A **retry loop**: an identity re-presented (answered from the store)
//!   more than the block's `retry_alert` count within its window (built-in:
//!   [`DEFAULT_RETRIES`] in [`DEFAULT_WINDOW_MS`]).
//! - A **trimmed server**: at least [`TRIM_ALERT_PERCENT`] % of at least
//!   [`TRIM_ALERT_MIN_CALLS`] evaluated decisions for one server within the
//!   same window were trims (a stored denial answered again is not
//!   evaluated, and not counted).
//!
//! Each is raised once per identity (per server) per window. Windows are
//! tumbling: one starts at the first event after the previous one ended and
//! lasts `window_ms`. Re-presentations are counted with the store's
//! `represented` (fleet-wide: a replay returns the count every process
//! sharing the store incremented), as the rise since the window began.
//!
//! Memory is bounded: at most [`MAX_TRACKED_IDENTITIES`] identities and
//! [`MAX_TRACKED_SERVERS`] servers are tracked. A new one past the bound
//! first drops the windows that have ended, then the eighth that began
//! longest ago; an evicted identity that comes back starts a new window (so
//! under that pressure it may alert a second time within what would have
//! been one window, never fail to be counted afresh).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::frame::Annotations;
use crate::store::Millis;
use crate::table::RetryAlert;

/// Re-presentations within a window that are still not a loop (built-in).
pub const DEFAULT_RETRIES: u64 = 40;
/// The built-in window: 10 minutes.
pub const DEFAULT_WINDOW_MS: u64 = 10 * 60 * 1000;
/// The trim alert needs at least this many decisions in the window.
pub const TRIM_ALERT_MIN_CALLS: u64 = 20;
/// The trim alert needs at least this percentage of them to be trims.
pub const TRIM_ALERT_PERCENT: u64 = 90;
/// The most identities whose re-presentations are tracked at once.
pub const MAX_TRACKED_IDENTITIES: usize = 10_000;
/// The most servers whose trims are tracked at once.
pub const MAX_TRACKED_SERVERS: usize = 1_024;

/// The setting of a block without `retry_alert`.
pub const DEFAULT_SETTING: RetryAlert = RetryAlert {
    count: DEFAULT_RETRIES,
    window_ms: DEFAULT_WINDOW_MS,
};

/// Something an operator should see.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Alert {
    /// An identity keeps being re-presented.
    RetryLoop(RetryLoop),
    /// A server's requests are trimmed on nearly every call.
    Trimmed(TrimmedServer),
}

/// An identity re-presented more than `threshold` times within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryLoop {
    /// The server (NFC).
    pub server_id: String,
    /// The request identity.
    pub identity: String,
    /// Re-presentations since the window began (fleet-wide).
    pub count: u64,
    /// The block's `retry_alert` count.
    pub threshold: u64,
    /// The window's length.
    pub window_ms: u64,
    /// When the window began.
    pub since: Millis,
    /// The store's `represented` count of the identity.
    pub represented: u64,
}

/// A server trimmed on at least [`TRIM_ALERT_PERCENT`] % of its calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimmedServer {
    /// The server (NFC).
    pub server_id: String,
    /// The identity of the request that raised it.
    pub identity: String,
    /// Trimmed decisions in the window.
    pub trimmed: u64,
    /// All decisions in the window.
    pub calls: u64,
    /// [`TRIM_ALERT_PERCENT`].
    pub percent: u64,
    /// The window's length.
    pub window_ms: u64,
    /// When the window began.
    pub since: Millis,
    /// What the request that raised it asked for against what it got.
    pub gap: Annotations,
}

#[derive(Debug)]
struct RetryWindow {
    since: Millis,
    ends: Millis,
    /// `represented` just before the window's first re-presentation.
    base: u64,
    alerted: bool,
}

#[derive(Debug)]
struct TrimWindow {
    since: Millis,
    ends: Millis,
    calls: u64,
    trimmed: u64,
    alerted: bool,
}

/// A word-at-a-time multiply-xor hash seeded with a per-process random key.
/// An identity ends in 32 hex digits of a cryptographic hash of the
/// request, so a server can choose one only by grinding prompts, and
/// without the seed it cannot aim at a bucket; SipHash over the whole
/// identity costs a replay more than the rest of the tracker does.
#[derive(Debug, Clone)]
struct SeededWords(u64);

impl Default for SeededWords {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut seed = std::collections::hash_map::RandomState::new().build_hasher();
        seed.write_u8(0);
        SeededWords(seed.finish() | 1)
    }
}

impl std::hash::BuildHasher for SeededWords {
    type Hasher = WordHasher;
    fn build_hasher(&self) -> WordHasher {
        WordHasher(self.0)
    }
}

#[derive(Debug)]
struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(word)).wrapping_mul(PRIME);
            h ^= h >> 29;
        }
        for &b in chunks.remainder() {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
        self.0 = h;
    }
}

/// A map keyed by an already keyed hash: the hasher passes it through.
#[derive(Debug, Default)]
struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type ByKey<V> = HashMap<u64, V, std::hash::BuildHasherDefault<PassThrough>>;

/// The engine's tracker, shared by its clones (behind its `Arc`). Windows
/// are keyed by a 64-bit keyed hash of the identity (or server id), not
/// the text: a replay then touches one bucket and no second allocation.
/// Two identities whose hashes collide (a chance of 2^-64 per pair, the
/// seed unknown to the far side) would share a window.
#[derive(Debug, Default)]
pub(crate) struct AlertTracker {
    seed: SeededWords,
    identities: Mutex<ByKey<RetryWindow>>,
    servers: Mutex<ByKey<TrimWindow>>,
}

fn end_of(now: Millis, window_ms: u64) -> Millis {
    now.saturating_add(i64::try_from(window_ms).unwrap_or(i64::MAX))
}

/// Makes room for one more key: drops ended windows, then the eighth of the
/// rest that began longest ago.
fn make_room<V, S>(
    map: &mut HashMap<u64, V, S>,
    cap: usize,
    now: Millis,
    times: fn(&V) -> (Millis, Millis),
) {
    if map.len() < cap {
        return;
    }
    map.retain(|_, v| now < times(v).1);
    if map.len() < cap {
        return;
    }
    let mut starts: Vec<Millis> = map.values().map(|v| times(v).0).collect();
    starts.sort_unstable();
    let drop = (cap / 8).max(1);
    let cutoff = starts[drop.min(starts.len()) - 1];
    let mut dropped = 0;
    map.retain(|_, v| {
        if dropped < drop && times(v).0 <= cutoff {
            dropped += 1;
            false
        } else {
            true
        }
    });
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AlertTracker {
    fn key(&self, text: &str) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = self.seed.build_hasher();
        hasher.write(text.as_bytes());
        hasher.finish()
    }

    /// How many identities are tracked now.
    #[cfg(test)]
    pub(crate) fn tracked_identities(&self) -> usize {
        lock(&self.identities).len()
    }

    /// A replay answered `identity` with the store's new `represented`.
    pub(crate) fn replayed(
        &self,
        server_id: &str,
        identity: &str,
        represented: u64,
        now: Millis,
        setting: RetryAlert,
    ) -> Option<Alert> {
        let key = self.key(identity);
        let mut map = lock(&self.identities);
        let fresh = match map.get(&key) {
            // A count below the window's base: the decision was recorded
            // anew (its count restarts at 0), so a new window begins.
            Some(w) => now >= w.ends || represented <= w.base,
            None => true,
        };
        if fresh {
            if !map.contains_key(&key) {
                make_room(&mut *map, MAX_TRACKED_IDENTITIES, now, |w: &RetryWindow| {
                    (w.since, w.ends)
                });
            }
            map.insert(
                key,
                RetryWindow {
                    since: now,
                    ends: end_of(now, setting.window_ms),
                    base: represented.saturating_sub(1),
                    alerted: false,
                },
            );
        }
        let window = map.get_mut(&key)?;
        let count = represented - window.base;
        if count <= setting.count || window.alerted {
            return None;
        }
        window.alerted = true;
        Some(Alert::RetryLoop(RetryLoop {
            server_id: server_id.to_owned(),
            identity: identity.to_owned(),
            count,
            threshold: setting.count,
            window_ms: setting.window_ms,
            since: window.since,
            represented,
        }))
    }

    /// A decision for `server_id`; `trims` when its request was trimmed.
    pub(crate) fn decided(
        &self,
        server_id: &str,
        identity: &str,
        trims: Option<&Annotations>,
        now: Millis,
        setting: RetryAlert,
    ) -> Option<Alert> {
        let key = self.key(server_id);
        let mut map = lock(&self.servers);
        let fresh = map.get(&key).is_none_or(|w| now >= w.ends);
        if fresh {
            if !map.contains_key(&key) {
                make_room(&mut *map, MAX_TRACKED_SERVERS, now, |w: &TrimWindow| {
                    (w.since, w.ends)
                });
            }
            map.insert(
                key,
                TrimWindow {
                    since: now,
                    ends: end_of(now, setting.window_ms),
                    calls: 0,
                    trimmed: 0,
                    alerted: false,
                },
            );
        }
        let window = map.get_mut(&key)?;
        window.calls += 1;
        let gap = trims.filter(|t| !t.is_empty())?;
        window.trimmed += 1;
        let nearly_all = window.trimmed * 100 >= window.calls * TRIM_ALERT_PERCENT;
        if window.alerted || window.calls < TRIM_ALERT_MIN_CALLS || !nearly_all {
            return None;
        }
        window.alerted = true;
        Some(Alert::Trimmed(TrimmedServer {
            server_id: server_id.to_owned(),
            identity: identity.to_owned(),
            trimmed: window.trimmed,
            calls: window.calls,
            percent: TRIM_ALERT_PERCENT,
            window_ms: setting.window_ms,
            since: window.since,
            gap: gap.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTING: RetryAlert = RetryAlert {
        count: 3,
        window_ms: 1000,
    };

    /// The tracker never holds more identities than its bound, however many
    /// come, and a tracked identity still alerts.
    #[test]
    fn identities_stay_bounded() {
        let tracker = AlertTracker::default();
        for i in 0..(MAX_TRACKED_IDENTITIES * 2 + 7) {
            tracker.replayed("s", &format!("s:{i}"), 1, 0, SETTING);
            assert!(tracker.tracked_identities() <= MAX_TRACKED_IDENTITIES);
        }
        let alerts: Vec<_> = (1..=5)
            .filter_map(|r| tracker.replayed("s", "s:last", r, 1, SETTING))
            .collect();
        assert_eq!(alerts.len(), 1);
    }

    /// Ended windows are dropped before live ones.
    #[test]
    fn ended_windows_go_first() {
        let tracker = AlertTracker::default();
        for i in 0..MAX_TRACKED_IDENTITIES {
            tracker.replayed("s", &format!("s:{i}"), 1, 0, SETTING);
        }
        tracker.replayed("s", "s:new", 1, 5_000, SETTING);
        assert_eq!(tracker.tracked_identities(), 1);
    }

    /// The trim alert needs the minimum number of calls and the percentage.
    #[test]
    fn trims_alert_at_ninety_percent_of_twenty() {
        let tracker = AlertTracker::default();
        let gap = Annotations {
            max_tokens: Some(crate::frame::MaxTokensTrim {
                requested: 9000,
                applied: 500,
            }),
            ..Annotations::default()
        };
        // Two untrimmed calls, then trims: 18 of 20 is exactly 90 %.
        assert!(tracker.decided("s", "s:a", None, 0, SETTING).is_none());
        assert!(tracker.decided("s", "s:a", None, 0, SETTING).is_none());
        let raised: Vec<_> = (0..30)
            .filter_map(|_| tracker.decided("s", "s:a", Some(&gap), 1, SETTING))
            .collect();
        assert_eq!(raised.len(), 1);
        let Alert::Trimmed(t) = &raised[0] else {
            panic!("a trim alert")
        };
        assert_eq!((t.trimmed, t.calls), (18, 20));
        assert_eq!(t.gap, gap);
        // Three untrimmed calls of 20: 85 %, no alert.
        let tracker = AlertTracker::default();
        for _ in 0..3 {
            tracker.decided("s", "s:a", None, 0, SETTING);
        }
        assert!(
            (0..17)
                .filter_map(|_| tracker.decided("s", "s:a", Some(&gap), 0, SETTING))
                .next()
                .is_none()
        );
    }
}
