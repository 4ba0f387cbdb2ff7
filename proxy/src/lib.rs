//! `mcpolicy-proxy`, the library behind `mcpc proxy`: a stdio MCP proxy
//! that a client launches in place of a server. It starts the server as a
//! child process and forwards newline-delimited JSON-RPC both ways, deciding
//! every sampling request the server makes with the mcpolicy runtime (see
//! [`session`]).
//!
//! Threads, no async runtime: one reads the client (our stdin), one reads
//! the server (the child's stdout), one answers missed deadlines. A decision
//! is taken on the server-reading thread, so the server's frames reach the
//! client in the order it wrote them.
//!
//! No command-line parsing and no store of its own: the caller (the `mcpc`
//! crate) opens the decision store and builds the [`session::Session`].

pub mod capture;
pub mod inflight;
pub mod log;
pub mod server_id;
pub mod session;

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;

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

/// Where decisions are stored when `--store` is not given: the platform's
/// per-user state directory. `$XDG_STATE_HOME/mcpolicy/decisions.sqlite3`,
/// else `~/.local/state/mcpolicy/decisions.sqlite3` (Linux and other Unix);
/// `~/Library/Application Support/mcpolicy/decisions.sqlite3` (macOS);
/// `%LOCALAPPDATA%\mcpolicy\decisions.sqlite3` (Windows). Every proxy of a
/// user shares it, so a server cannot escape a budget by being launched twice.
pub fn default_store_path() -> Option<PathBuf> {
    let env_dir = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = if cfg!(windows) {
        env_dir("LOCALAPPDATA")?
    } else if cfg!(target_os = "macos") {
        env_dir("HOME")?.join("Library/Application Support")
    } else {
        match env_dir("XDG_STATE_HOME") {
            Some(dir) => dir,
            None => env_dir("HOME")?.join(".local/state"),
        }
    };
    Some(base.join("mcpolicy").join("decisions.sqlite3"))
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

/// Runs the proxy: starts `command`, pumps both directions until the server
/// exits, and returns its exit status. `session_for` builds the session once
/// the child's stdin exists.
pub fn run(
    command: &[OsString],
    session_for: impl FnOnce(session::Sink) -> Session,
) -> Result<ExitStatus, ProxyError> {
    let Some(program) = command.first() else {
        return Err(ProxyError::NoCommand);
    };
    let mut child: Child = Command::new(program)
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

    // Deadlines: woken whenever a line from the server added one.
    let (wake, woken) = mpsc::channel::<()>();
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
    drop(wake);
    let status = child.wait().map_err(ProxyError::Wait)?;
    session.log().line(format_args!("server exited: {status}"));
    Ok(status)
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
