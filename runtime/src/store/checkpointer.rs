//! [`Checkpointer`]: a [`super::SqliteStore`]'s WAL checkpoints, on a thread
//! of their own.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its
//! threshold: that one decision copies every page the WAL holds into the
//! main file and waits for two fsyncs (5–13 ms each on a virtual disk), a
//! stall of tens of milliseconds every few thousand decisions. Here the
//! store counts its commits and, every [`Checkpointer::EVERY`], wakes a
//! thread that runs a `PASSIVE` checkpoint on a second connection: it copies
//! what no reader still needs while writers go on appending to the WAL, so
//! no decision waits for it. Durability is unchanged: a checkpoint only moves
//! committed pages from the WAL into the main file, with the same
//! `synchronous` level, and a failed or skipped one leaves them in the WAL.
//! The store keeps SQLite's automatic checkpoint as a backstop, at a higher
//! threshold, so the WAL stays bounded if this thread falls behind.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// What the store and the thread share.
#[derive(Debug, Default)]
struct Shared {
    /// Commits since the store opened.
    commits: AtomicU64,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// A checkpoint was asked for and has not started yet.
    pending: bool,
    /// The store is closing.
    stop: bool,
}

/// The checkpoint thread of one open store; stopped and joined on drop.
#[derive(Debug)]
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Commits between two checkpoints. An admission writes one to three
    /// pages, so the WAL holds a few thousand pages (tens of MiB at most)
    /// when the thread starts copying.
    pub(super) const EVERY: u64 = 4_096;

    /// Opens the second connection and starts the thread. `None` when either
    /// fails (the store then relies on SQLite's automatic checkpoint alone).
    pub(super) fn start(path: &Path, synchronous: &str) -> Option<Checkpointer> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ok()?;
        // Never wait for a lock: a busy checkpoint is simply tried next time.
        conn.busy_timeout(Duration::ZERO).ok()?;
        // The checkpoint's fsyncs follow the store's durability level.
        conn.pragma_update(None, "synchronous", synchronous).ok()?;
        // This connection writes nothing; it must not checkpoint on its own.
        conn.pragma_update(None, "wal_autocheckpoint", 0).ok()?;
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("mcpolicy-checkpoint".to_owned())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared, &conn)
            })
            .ok()?;
        Some(Checkpointer {
            shared,
            thread: Some(thread),
        })
    }

    /// Counts one commit of the store; every [`Self::EVERY`]th wakes the thread.
    pub(super) fn committed(&self) {
        let commits = self.shared.commits.fetch_add(1, Ordering::Relaxed) + 1;
        if commits.is_multiple_of(Self::EVERY)
            && let Ok(mut state) = self.shared.state.lock()
        {
            state.pending = true;
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        if let Ok(mut state) = self.shared.state.lock() {
            state.stop = true;
            self.shared.wake.notify_one();
        }
        if let Some(thread) = self.thread.take() {
            // A panic on that thread cannot have left anything half done
            // that SQLite would not recover; there is nothing to report to.
            let _ = thread.join();
        }
    }
}

/// The thread: waits to be asked, checkpoints, until the store closes.
fn run(shared: &Shared, conn: &Connection) {
    loop {
        {
            let Ok(mut state) = shared.state.lock() else {
                return;
            };
            while !state.pending && !state.stop {
                state = match shared.wake.wait(state) {
                    Ok(state) => state,
                    Err(_) => return,
                };
            }
            if state.stop {
                return;
            }
            state.pending = false;
        }
        // PASSIVE: copies what it can without waiting for any lock; a busy
        // or failed checkpoint leaves the pages in the WAL for the next one
        // (or for SQLite's own automatic checkpoint).
        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
    }
}
