//! Where the proxy writes: the diagnostic log (stderr or `--log FILE`) and the
//! `--audit FILE` decision log. Never standard output, which is the client's
//! JSON-RPC stream.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use mcpolicy_runtime::clock::{Clock, SystemClock, format_rfc3339};
use mcpolicy_runtime::engine::Cause;
use serde_json::{Map, Value};

fn now_rfc3339() -> String {
    format_rfc3339(SystemClock.now())
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Human-readable diagnostics, one line each, prefixed with the time and the
/// server id. Write failures are ignored: logging must never stop the proxy.
pub struct Log {
    sink: Mutex<Box<dyn Write + Send>>,
    prefix: String,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").finish_non_exhaustive()
    }
}

impl Log {
    /// Logs to standard error.
    pub fn stderr(server_id: &str) -> Log {
        Log::to(Box::new(io::stderr()), server_id)
    }

    /// Logs by appending to `path`.
    pub fn file(path: &Path, server_id: &str) -> io::Result<Log> {
        Ok(Log::to(Box::new(append(path)?), server_id))
    }

    /// Logs into any writer (tests).
    pub fn to(sink: Box<dyn Write + Send>, server_id: &str) -> Log {
        Log {
            sink: Mutex::new(sink),
            prefix: format!("mcpc proxy [{server_id}]"),
        }
    }

    /// Writes one line.
    pub fn line(&self, message: impl std::fmt::Display) {
        let text = format!("{} {}: {message}\n", now_rfc3339(), self.prefix);
        let mut sink = match self.sink.lock() {
            Ok(sink) => sink,
            Err(poisoned) => poisoned.into_inner(),
        };
        let _ = sink.write_all(text.as_bytes()).and_then(|()| sink.flush());
    }
}

/// The `--audit` log: one JSON object per line for every decision the proxy
/// makes or resolves. Each line is flushed to the OS as it is written, so a
/// `kill -9` of the proxy loses none that were acted on.
pub struct Audit {
    sink: Mutex<Box<dyn Write + Send>>,
}

/// One audit line. `requested`/`applied` hold `includeContext` and
/// `maxTokens` of the request as the server sent it and as it ran (`applied`
/// is `None` for a denial: nothing ran).
#[derive(Debug, Clone, Default)]
pub struct Entry<'a> {
    /// `decision` (the engine decided a request), `consent` (the client
    /// answered a consent request), `deadline` (the client missed the
    /// deadline), `invalid` (the request was malformed), `error` (the store failed).
    pub event: &'a str,
    /// How the request arrived: `request` (a server-to-client
    /// `sampling/createMessage`), `inputRequests` (MCP 2026-07-28), or
    /// `task` (the terminal decision of a task-augmented sampling request;
    /// `id` is the sampling request's id).
    pub via: &'a str,
    /// The JSON-RPC id of the request (or the `inputRequests` key).
    pub id: Option<&'a Value>,
    /// The canonical request identity the decision is stored under.
    pub identity: Option<&'a str>,
    /// `allow`, `trim`, `deny` or `consent` (forwarded for the user to decide).
    pub outcome: &'a str,
    /// The reason name of a denial.
    pub reason: Option<&'a str>,
    /// A stored denial was replayed (no evaluation, nothing spent).
    pub replayed: bool,
    /// How often the identity has been re-presented, for denials.
    pub represented: Option<u64>,
    /// The request's params as sent.
    pub requested: Option<&'a Map<String, Value>>,
    /// The params as forwarded (after trims).
    pub applied: Option<&'a Map<String, Value>>,
    /// A JSON-RPC error code, for `invalid` and `error` events.
    pub code: Option<i32>,
    /// What decided, as the engine names it (for decisions, consents and
    /// deadline misses): written as `cause`.
    pub cause: Option<&'a Cause>,
}

/// `{"block": PATTERN|null, "statement": KEYWORD|null, "budget": INDEX?,
/// "step": N}`: the server block's pattern (`null` for `defaults`), the
/// deciding statement, the evaluation step (`docs/spec/evaluation.md`).
fn cause_json(cause: &Cause) -> Value {
    let mut out = Map::new();
    out.insert(
        "block".into(),
        match cause.block.entry {
            Some(_) => Value::from(&*cause.block.pattern),
            None => Value::Null,
        },
    );
    out.insert(
        "statement".into(),
        cause
            .statement
            .map_or(Value::Null, |s| Value::from(s.name())),
    );
    if let Some(mcpolicy_runtime::engine::Statement::Budget(i)) = cause.statement {
        out.insert("budget".into(), Value::from(i));
    }
    out.insert("step".into(), Value::from(cause.step.number()));
    Value::Object(out)
}

/// `includeContext` and `maxTokens` of a params object, `null` when absent.
fn sizing(params: Option<&Map<String, Value>>) -> Value {
    match params {
        None => Value::Null,
        Some(params) => {
            let mut out = Map::new();
            for key in ["includeContext", "maxTokens"] {
                out.insert(
                    key.to_owned(),
                    params.get(key).cloned().unwrap_or(Value::Null),
                );
            }
            Value::Object(out)
        }
    }
}

impl Audit {
    /// Appends to `path` (created if missing).
    pub fn file(path: &Path) -> io::Result<Audit> {
        Ok(Audit::to(Box::new(append(path)?)))
    }

    /// Audits into any writer (tests).
    pub fn to(sink: Box<dyn Write + Send>) -> Audit {
        Audit {
            sink: Mutex::new(sink),
        }
    }

    /// Writes `entry` for `server`.
    pub fn write(&self, server: &str, entry: &Entry<'_>) {
        let mut line = Map::new();
        line.insert("time".into(), Value::from(now_rfc3339()));
        line.insert("event".into(), Value::from(entry.event));
        line.insert("via".into(), Value::from(entry.via));
        line.insert("server".into(), Value::from(server));
        line.insert("id".into(), entry.id.cloned().unwrap_or(Value::Null));
        line.insert(
            "identity".into(),
            entry.identity.map_or(Value::Null, Value::from),
        );
        line.insert("outcome".into(), Value::from(entry.outcome));
        line.insert(
            "reason".into(),
            entry.reason.map_or(Value::Null, Value::from),
        );
        line.insert("replayed".into(), Value::from(entry.replayed));
        if let Some(represented) = entry.represented {
            line.insert("represented".into(), Value::from(represented));
        }
        if let Some(code) = entry.code {
            line.insert("code".into(), Value::from(code));
        }
        line.insert("requested".into(), sizing(entry.requested));
        line.insert("applied".into(), sizing(entry.applied));
        if let Some(cause) = entry.cause {
            line.insert("cause".into(), cause_json(cause));
        }
        let mut text = Value::Object(line).to_string();
        text.push('\n');
        let mut sink = match self.sink.lock() {
            Ok(sink) => sink,
            Err(poisoned) => poisoned.into_inner(),
        };
        let _ = sink.write_all(text.as_bytes()).and_then(|()| sink.flush());
    }
}
