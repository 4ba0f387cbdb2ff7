//! One PostgreSQL session whose every round trip is bounded on the client's
//! side (`docs/spec/store.md`, "Bounded calls").
//!
//! The server's own `statement_timeout` cannot fire on a server that does
//! not run: a host that hangs without closing its connections (every
//! process stopped, a VM paused, a network that drops packets while the
//! kernel at the other end still acknowledges them) leaves a blocking read
//! waiting forever, and TCP's timeouts never fire while the peer's kernel
//! acknowledges. So each session is a `tokio-postgres` client driven by a
//! current-thread tokio runtime of its own (what the blocking `postgres`
//! crate does inside, without a way to bound a call), and every round trip
//! is awaited under the store call's deadline. A round trip that misses it
//! marks the session broken: the pool discards it (its socket is closed,
//! whatever the server does later is never read) and the call fails
//! [`StoreError::Unavailable`](mcpolicy_runtime::store::StoreError), which
//! the engine answers `runtime.store_unavailable` (fail closed). The tokio
//! runtime never leaves this crate: callers see synchronous calls.

use std::cell::Cell;
use std::future::Future;
use std::ops::Deref;
use std::time::Instant;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Row, Statement, ToStatement};

/// Why a round trip failed.
#[derive(Debug)]
pub(crate) enum Trip {
    /// The client or the server reported an error.
    Pg(Error),
    /// No answer before the call's deadline: the session is broken.
    TimedOut,
}

impl From<Error> for Trip {
    fn from(error: Error) -> Self {
        Trip::Pg(error)
    }
}

/// A connected session: the client, the runtime that drives its
/// connection, and the deadline of the store call it serves.
pub(crate) struct Session {
    runtime: tokio::runtime::Runtime,
    client: Client,
    deadline: Cell<Instant>,
    broken: Cell<bool>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("broken", &self.broken.get())
            .finish_non_exhaustive()
    }
}

/// A current-thread runtime with timers and I/O, for one session.
fn runtime() -> Result<tokio::runtime::Runtime, std::io::Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Awaits `future` on `runtime` until `deadline`.
fn until<T>(
    runtime: &tokio::runtime::Runtime,
    deadline: Instant,
    future: impl Future<Output = Result<T, Error>>,
) -> Result<T, Trip> {
    let at = tokio::time::Instant::from_std(deadline);
    match runtime.block_on(async { tokio::time::timeout_at(at, future).await }) {
        Ok(answer) => answer.map_err(Trip::Pg),
        Err(_elapsed) => Err(Trip::TimedOut),
    }
}

/// Why connecting failed.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The client or the server refused, or the connection broke.
    Pg(Error),
    /// No session before the deadline (a hung server accepts the socket and
    /// never answers the startup message).
    TimedOut,
    /// The runtime could not be built (out of file descriptors).
    Runtime(std::io::Error),
}

impl Session {
    /// Connects with `connect` (a `tokio_postgres::Config::connect` call,
    /// TLS or not), by `deadline`.
    pub(crate) fn connect<S, T, F>(
        deadline: Instant,
        connect: impl FnOnce() -> F,
    ) -> Result<Session, ConnectError>
    where
        F: Future<Output = Result<(Client, tokio_postgres::Connection<S, T>), Error>>,
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let runtime = runtime().map_err(ConnectError::Runtime)?;
        let (client, connection) = match until(&runtime, deadline, connect()) {
            Ok(pair) => pair,
            Err(Trip::Pg(error)) => return Err(ConnectError::Pg(error)),
            Err(Trip::TimedOut) => return Err(ConnectError::TimedOut),
        };
        // The connection's I/O runs while a call blocks on the runtime; it
        // ends (and its socket closes) when the runtime is dropped.
        runtime.spawn(async move {
            let _ = connection.await;
        });
        Ok(Session {
            runtime,
            client,
            deadline: Cell::new(deadline),
            broken: Cell::new(false),
        })
    }

    /// The deadline of the store call this session serves from now on.
    pub(crate) fn serve_until(&self, deadline: Instant) {
        self.deadline.set(deadline);
    }

    /// Whether a round trip timed out, or the connection closed: the
    /// session must not be used again.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.get() || self.client.is_closed()
    }

    fn trip<T>(&self, future: impl Future<Output = Result<T, Error>>) -> Result<T, Trip> {
        let answer = until(&self.runtime, self.deadline.get(), future);
        if matches!(answer, Err(Trip::TimedOut)) {
            self.broken.set(true);
        }
        answer
    }

    pub(crate) fn prepare(&self, query: &str) -> Result<Statement, Trip> {
        self.trip(self.client.prepare(query))
    }

    pub(crate) fn execute<Q: ?Sized + ToStatement>(
        &self,
        query: &Q,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Trip> {
        self.trip(self.client.execute(query, params))
    }

    pub(crate) fn query<Q: ?Sized + ToStatement>(
        &self,
        query: &Q,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Trip> {
        self.trip(self.client.query(query, params))
    }

    pub(crate) fn query_one<Q: ?Sized + ToStatement>(
        &self,
        query: &Q,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Trip> {
        self.trip(self.client.query_one(query, params))
    }

    pub(crate) fn query_opt<Q: ?Sized + ToStatement>(
        &self,
        query: &Q,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Trip> {
        self.trip(self.client.query_opt(query, params))
    }

    pub(crate) fn batch_execute(&self, query: &str) -> Result<(), Trip> {
        self.trip(self.client.batch_execute(query))
    }

    /// `BEGIN`: the transaction commits with [`Transaction::commit`] and
    /// rolls back when dropped otherwise.
    pub(crate) fn transaction(&self) -> Result<Transaction<'_>, Trip> {
        self.batch_execute("BEGIN")?;
        Ok(Transaction {
            session: self,
            open: true,
        })
    }
}

/// An open transaction on a [`Session`] (every call of the session goes
/// in it).
pub(crate) struct Transaction<'a> {
    session: &'a Session,
    open: bool,
}

impl Transaction<'_> {
    /// `COMMIT`.
    pub(crate) fn commit(mut self) -> Result<(), Trip> {
        self.open = false;
        self.session.batch_execute("COMMIT")
    }
}

impl Deref for Transaction<'_> {
    type Target = Session;

    fn deref(&self) -> &Session {
        self.session
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        // A statement failed (a deadlock, a refused row): roll back so that
        // the session can serve the next call. When even that fails (the
        // deadline passed, the connection broke), the session is broken
        // and discarded with its transaction.
        if self.open && self.session.batch_execute("ROLLBACK").is_err() {
            self.session.broken.set(true);
        }
    }
}
