//! `mcpolicy-proxy`, the library behind `mcpc proxy`: a stdio MCP proxy
//! that a client launches in place of a server. It starts the server as a
//! child process and forwards newline-delimited JSON-RPC both ways, deciding
//! every sampling request the server makes with the mcpolicy runtime (see
//! [`session`]).
//!
//! Threads, no async runtime: one reads the client (our stdin), one reads
//! the server (the child's stdout), one decides what needs the decision
//! store (sampling requests and `input_required` results, in the order the
//! server wrote them: `session/decider.rs`), one answers missed deadlines.
//! Frames that need no store pass while a decision waits for the store.
//!
//! No command-line parsing and no store of its own: the caller (the `mcpc`
//! crate) opens the decision store and builds the [`session::Session`].

pub mod capture;
pub mod inflight;
pub mod log;
pub mod server_id;
pub mod session;
pub mod wire;

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpolicy_runtime::jsonrpc;
use session::Session;

/// The longest line accepted from the server (64 MiB). A longer one is
/// discarded up to its newline and answered with -32600, so a server cannot
/// exhaust the proxy's memory with one endless line.
pub const MAX_SERVER_LINE: usize = 64 << 20;

/// Why the proxy could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No server command after `--`.
    #[error("no server command given (use `mcpc proxy --policy FILE -- SERVER_CMD ARGS…`)")]
    NoCommand,
    /// The server could not be started.
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// Waiting for the server failed.
    #[error("waiting for the server failed: {0}")]
    Wait(io::Error),
}

/// Where decisions are stored when neither `--store` nor the user's
/// `config.toml` names a store: the platform's per-user state directory,
/// found from the home directory alone. `~/.local/state/mcpolicy/decisions.sqlite3`
/// (Linux and other Unix); `~/Library/Application Support/mcpolicy/decisions.sqlite3`
/// (macOS); `%LOCALAPPDATA%\mcpolicy\decisions.sqlite3` (Windows). Every
/// proxy of a user shares it, so a server cannot escape a budget by being
/// launched twice.
///
/// Never `XDG_STATE_HOME`: MCP clients start servers with a reduced
/// environment (the TypeScript SDK passes only `HOME`, `PATH`, `SHELL`,
/// `TERM`, `USER` and `LOGNAME`), so a variable set in the user's shell
/// would send `mcpc store` to one store and the proxies to another
/// (`docs/spec/clients.md`, "Which store").
pub fn default_store_path() -> Option<PathBuf> {
    let base = if cfg!(windows) {
        std::env::var_os("LOCALAPPDATA")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)?
    } else if cfg!(target_os = "macos") {
        home_dir()?.join("Library/Application Support")
    } else {
        home_dir()?.join(".local/state")
    };
    Some(base.join("mcpolicy").join("decisions.sqlite3"))
}

/// The user's home directory: `HOME` when it is set and not empty, else the
/// system's account database (a client may start the proxy without `HOME`).
pub fn home_dir() -> Option<PathBuf> {
    std::env::home_dir().filter(|dir| !dir.as_os_str().is_empty())
}

/// Reads one `\n`-terminated line into `buf` (cleared first), at most `max`
/// bytes. `Ok(None)` at end of input; `Ok(Some(false))` when the line was
/// longer than `max` (it is consumed up to its newline and `buf` is empty).
pub fn read_line_capped<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<bool>> {
    buf.clear();
    let mut overlong = false;
    let mut read_any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(if read_any { Some(!overlong) } else { None });
        }
        read_any = true;
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..=at], true),
            None => (available, false),
        };
        let used = chunk.len();
        if !overlong {
            if buf.len() + used > max {
                overlong = true;
                buf.clear();
                buf.shrink_to(64 * 1024);
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        reader.consume(used);
        if done {
            return Ok(Some(!overlong));
        }
    }
}

/// How long the server is given at each step of a stop: after its input is
/// closed, and again after SIGTERM, before SIGKILL (`proxy/PROXY.md`,
/// "Signals and exit codes").
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// How the proxy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The server exited (the client closed its input, or it stopped on
    /// its own).
    Server(ExitStatus),
    /// SIGINT, SIGTERM or SIGHUP (the number) stopped the proxy; the server
    /// was stopped first.
    Signal(i32),
}

impl Ended {
    /// The proxy's exit code: the server's ([`exit_code`]), or 128 + the
    /// signal's number (130 SIGINT, 143 SIGTERM, 129 SIGHUP), as a shell
    /// reports a process a signal ended.
    pub fn exit_code(self) -> u8 {
        match self {
            Ended::Server(status) => exit_code(status),
            Ended::Signal(signal) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        }
    }
}

/// Locks the shared child (a poisoned lock still holds it).
fn lock_child(child: &Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    child
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits up to `grace` for the child to exit; its status if it did. The
/// child is only ever reaped under its lock, so its pid is never signalled
/// once it may have been reused.
fn exited_within(child: &Mutex<Child>, grace: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + grace;
    loop {
        if let Ok(Some(status)) = lock_child(child).try_wait() {
            return Some(status);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The signals that stop the proxy, and their names for the log.
#[cfg(unix)]
const STOP_SIGNALS: [(i32, &str); 3] = [
    (signal_hook::consts::SIGINT, "SIGINT"),
    (signal_hook::consts::SIGTERM, "SIGTERM"),
    (signal_hook::consts::SIGHUP, "SIGHUP"),
];

/// Stops the server and the proxy on the first stop signal: the server's
/// input is closed, then after [`STOP_GRACE`] it gets SIGTERM, after another
/// SIGKILL; each step is logged, and the proxy exits with 128 + the signal.
#[cfg(unix)]
fn on_stop_signals(
    session: Arc<Session>,
    child: Arc<Mutex<Child>>,
    stopping: Arc<std::sync::atomic::AtomicI32>,
) -> io::Result<()> {
    use signal_hook::iterator::Signals;
    use std::sync::atomic::Ordering;

    let mut signals = Signals::new(STOP_SIGNALS.map(|(number, _)| number))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let Some(signal) = signals.forever().next() else {
                return;
            };
            stopping.store(signal, Ordering::SeqCst);
            let name = STOP_SIGNALS
                .iter()
                .find(|(number, _)| *number == signal)
                .map_or("a signal", |(_, name)| name);
            let log = session.log();
            log.line(format_args!(
                "received {name}: stopping the server (its input closed, SIGTERM after {} s, SIGKILL after {} s more)",
                STOP_GRACE.as_secs(),
                STOP_GRACE.as_secs()
            ));
            session.close_server_input();
            let status = exited_within(&child, STOP_GRACE)
                .or_else(|| {
                    let guard = lock_child(&child);
                    let pid = rustix::process::Pid::from_child(&guard);
                    let sent = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    drop(guard);
                    log.line(format_args!(
                        "the server did not exit within {} s of its input closing: sent SIGTERM{}",
                        STOP_GRACE.as_secs(),
                        sent.err().map(|e| format!(" (failed: {e})")).unwrap_or_default()
                    ));
                    exited_within(&child, STOP_GRACE)
                })
                .or_else(|| {
                    let mut guard = lock_child(&child);
                    let sent = guard.kill();
                    log.line(format_args!(
                        "the server did not exit within {} s of SIGTERM: sent SIGKILL{}",
                        STOP_GRACE.as_secs(),
                        sent.err().map(|e| format!(" (failed: {e})")).unwrap_or_default()
                    ));
                    guard.wait().ok()
                });
            let code = Ended::Signal(signal).exit_code();
            match status {
                Some(status) => log.line(format_args!(
                    "stopped by {name}: server exited: {status}; exit code {code}"
                )),
                None => log.line(format_args!(
                    "stopped by {name}: the server's exit could not be awaited; exit code {code}"
                )),
            }
            // The server is gone; a grandchild may still hold its stdout
            // open, so the reading threads are not waited for. What the
            // store holds in memory is written first.
            session.flush_store();
            std::process::exit(i32::from(code));
        })?;
    Ok(())
}

/// Makes the proxy non-dumpable (Linux): a process of the same user, the
/// server it starts included, can then neither read the proxy's
/// `/proc/PID/environ` or memory nor attach to it with ptrace
/// (`docs/threat-model.md`, "Scope: what a local server can reach"). The
/// server itself is unaffected: `execve` makes it dumpable again.
fn not_dumpable() {
    #[cfg(target_os = "linux")]
    if let Err(error) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        // Not fatal: the guarantee is then the operating system's default.
        eprintln!("mcpc proxy: cannot make the proxy non-dumpable: {error}");
    }
}

/// Runs the proxy: starts `command` (without the environment variables
/// named in `withheld_env`), pumps both directions until the server
/// exits, and returns how it ended. `session_for` builds the session once
/// the child's stdin exists. On SIGINT, SIGTERM or SIGHUP (Unix) the server
/// is stopped (its input closed, then SIGTERM, then SIGKILL, each after
/// [`STOP_GRACE`]) and the process exits with 128 + the signal's number.
pub fn run(
    command: &[OsString],
    withheld_env: &[&str],
    session_for: impl FnOnce(session::Sink) -> Session,
) -> Result<Ended, ProxyError> {
    let Some(program) = command.first() else {
        return Err(ProxyError::NoCommand);
    };
    not_dumpable();
    let mut server = Command::new(program);
    // The proxy's own secrets (its store's password) are not the server's
    // (`docs/threat-model.md`, "Scope: what a local server can reach").
    for name in withheld_env {
        server.env_remove(name);
    }
    let mut child: Child = server
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| ProxyError::Spawn {
            command: program.to_string_lossy().into_owned(),
            source,
        })?;
    let (Some(child_in), Some(child_out)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(ProxyError::Spawn {
            command: program.to_string_lossy().into_owned(),
            source: io::Error::other("the server's stdio is not piped"),
        });
    };
    let session = Arc::new(session_for(Box::new(io::BufWriter::new(child_in))));
    session.log().line(format_args!(
        "started `{}` (pid {}) as server `{}`",
        command
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        child.id(),
        session.server_id()
    ));
    let child = Arc::new(Mutex::new(child));
    let stopping = Arc::new(std::sync::atomic::AtomicI32::new(0));
    #[cfg(unix)]
    if let Err(error) = on_stop_signals(session.clone(), child.clone(), stopping.clone()) {
        session.log().line(format_args!(
            "cannot handle SIGINT/SIGTERM/SIGHUP ({error}): a signal ends the proxy without stopping the server"
        ));
    }

    // Deadlines: woken whenever a line from the server, or a decision,
    // added one.
    let (wake, woken) = mpsc::channel::<()>();
    // Decisions that need the store go to a thread of their own, so that
    // the server's other frames pass while one waits (session/decider.rs).
    {
        let wake = wake.clone();
        session
            .spawn_decider(Box::new(move || {
                let _ = wake.send(());
            }))
            .map_err(ProxyError::Wait)?;
    }
    {
        let session = session.clone();
        std::thread::Builder::new()
            .name("deadlines".into())
            .spawn(move || deadlines(&session, &woken))
            .map_err(ProxyError::Wait)?;
    }

    {
        let session = session.clone();
        std::thread::Builder::new()
            .name("client-to-server".into())
            .spawn(move || {
                let mut reader = BufReader::with_capacity(64 * 1024, io::stdin().lock());
                let mut buf = Vec::with_capacity(8 * 1024);
                loop {
                    match read_line_capped(&mut reader, &mut buf, usize::MAX) {
                        Ok(Some(_)) => session.from_client(&buf),
                        Ok(None) => break,
                        Err(error) => {
                            session
                                .log()
                                .line(format_args!("reading the client failed: {error}"));
                            break;
                        }
                    }
                }
                // The client is gone: let the server see end of input and exit.
                session.close_server_input();
            })
            .map_err(ProxyError::Wait)?;
    }

    pump_server(&session, child_out, &wake);
    session.finish_decisions();
    drop(wake);
    // Consents closed, owed refusals retried, batched counts written.
    session.end();
    // Reaped under the lock, polling: the signal thread may need the lock
    // to signal the child meanwhile.
    let status = loop {
        if let Some(status) = lock_child(&child).try_wait().map_err(ProxyError::Wait)? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if stopping.load(std::sync::atomic::Ordering::SeqCst) != 0 {
        // A stop is under way: the signal thread logs it and exits.
        loop {
            std::thread::park();
        }
    }
    session.log().line(format_args!("server exited: {status}"));
    Ok(Ended::Server(status))
}

fn pump_server(session: &Session, out: impl Read, wake: &mpsc::Sender<()>) {
    let mut reader = BufReader::with_capacity(64 * 1024, out);
    let mut buf = Vec::with_capacity(8 * 1024);
    loop {
        match read_line_capped(&mut reader, &mut buf, MAX_SERVER_LINE) {
            Ok(Some(true)) => {
                session.from_server(&buf);
                // Only a new deadline needs the deadline thread; waking it
                // for every line would cost a context switch per message.
                if session.take_new_deadline() {
                    let _ = wake.send(());
                }
            }
            Ok(Some(false)) => {
                session.log().line(format_args!(
                    "server sent a line over {MAX_SERVER_LINE} bytes; discarded and answered -32600"
                ));
                session.reject_server_line(
                    jsonrpc::INVALID_REQUEST,
                    &format!("Invalid frame from the server: longer than {MAX_SERVER_LINE} bytes"),
                );
            }
            Ok(None) => break,
            Err(error) => {
                session
                    .log()
                    .line(format_args!("reading the server failed: {error}"));
                break;
            }
        }
    }
}

fn deadlines(session: &Session, woken: &mpsc::Receiver<()>) {
    loop {
        let wait = session
            .next_deadline()
            .map(|at| at.saturating_duration_since(Instant::now()));
        let outcome = match wait {
            Some(wait) => woken.recv_timeout(wait),
            None => woken
                .recv()
                .map_err(|mpsc::RecvError| RecvTimeoutError::Disconnected),
        };
        match outcome {
            Ok(()) | Err(RecvTimeoutError::Timeout) => session.expire(Instant::now()),
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The process exit code that reports `status` (a signal `n` becomes 128 + n,
/// as a shell reports it).
pub fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(1);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return u8::try_from(128 + (signal & 0x7f)).unwrap_or(1);
        }
    }
    1
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn capped_lines() {
        let mut input = io::Cursor::new(b"short\nthis one is too long\nok".to_vec());
        let mut reader = BufReader::with_capacity(4, &mut input);
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 8).unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"short\n");
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 8).unwrap(),
            Some(false)
        );
        assert!(buf.is_empty());
        assert_eq!(
            read_line_capped(&mut reader, &mut buf, 8).unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"ok");
        assert_eq!(read_line_capped(&mut reader, &mut buf, 8).unwrap(), None);
    }
}
