//! Where the proxy writes: the diagnostic log (stderr or `--log FILE`) and the
//! `--audit FILE` decision log. Never standard output, which is the client's
//! JSON-RPC stream.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use mcpolicy_runtime::alert::Alert;
use mcpolicy_runtime::clock::{Clock, SystemClock, format_rfc3339};
use mcpolicy_runtime::engine::Cause;
use mcpolicy_runtime::frame::Annotations;
use serde_json::{Map, Value};

/// `text` with every character that could change how a terminal or an
/// editor shows it, or where a line ends, written as an escape: C0 and C1
/// controls and DEL (`\n`, `\r`, `\t`, else `\u{…}`; ESC is how ANSI
/// sequences start), the line and paragraph separators U+2028 and U+2029,
/// and the bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E,
/// U+2066–U+2069), which can make text read in another order. A backslash
/// is doubled, so an escape cannot be forged. Every text output of the
/// proxy and `mcpc audit` writes what a server controls through this
/// (`docs/threat-model.md`, "A newline, ANSI escapes or bidi controls in a
/// `method`, an id or a model name").
pub fn escape_text(text: &str) -> Cow<'_, str> {
    fn escaped(c: char) -> bool {
        c.is_control()
            || c == '\\'
            || matches!(
                c,
                '\u{2028}'
                    | '\u{2029}'
                    | '\u{061c}'
                    | '\u{200e}'
                    | '\u{200f}'
                    | '\u{202a}'..='\u{202e}'
                    | '\u{2066}'..='\u{2069}'
            )
    }
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if escaped(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn now_rfc3339() -> String {
    format_rfc3339(SystemClock.now())
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Human-readable diagnostics, one line each, prefixed with the time and the
/// server id. Write failures are ignored: logging must never stop the proxy.
/// Clones share the sink (a transport's log and its sessions' write one file).
#[derive(Clone)]
pub struct Log {
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
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
            sink: Arc::new(Mutex::new(sink)),
            prefix: format!("mcpc proxy [{server_id}]"),
        }
    }

    /// The same sink under another prefix (`mcpc gateway [route]` for one
    /// gateway route's sessions).
    pub fn with_prefix(&self, prefix: impl Into<String>) -> Log {
        Log {
            sink: Arc::clone(&self.sink),
            prefix: prefix.into(),
        }
    }

    /// Writes one line. The message is written through [`escape_text`]:
    /// whatever of it a server chose (a method, an id, a model name) can
    /// neither end the line nor reach the terminal as a control.
    pub fn line(&self, message: impl std::fmt::Display) {
        let message = message.to_string();
        let text = format!(
            "{} {}: {}\n",
            now_rfc3339(),
            escape_text(&self.prefix),
            escape_text(&message)
        );
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
/// Clones share the sink: every session of a gateway writes one file.
#[derive(Clone)]
pub struct Audit {
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
}

/// One audit line. `requested`/`applied` hold `includeContext`,
/// `maxTokens` and the model hint names of the request as the server sent it
/// and as it ran (`applied` is `None` for a denial: nothing ran). The format
/// is `runtime/schema/mcpolicy-audit-1.schema.json`, described in
/// `proxy/PROXY.md` ("The audit log").
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
    /// `allow`, `trim`, `deny`, `consent` (forwarded for the user to
    /// decide), or `failed` (a consent request that ended without the
    /// user's word: nothing stored).
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
    /// What a trim changed and why (a `trim`, or a `consent` shown
    /// narrowed): written as `trims` (the result's `_meta` notes) and
    /// `reasons` (their reason names, in `_meta` order).
    pub trims: Option<&'a Annotations>,
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

/// `includeContext`, `maxTokens` and `modelHints` of a params object, each
/// `null` when absent. `modelHints` lists the names of
/// `modelPreferences.hints` in order (`null` for a hint without a string
/// name), so that a model trim shows what was asked and what was kept.
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
            let hints = params
                .get("modelPreferences")
                .and_then(|prefs| prefs.get("hints"))
                .and_then(Value::as_array)
                .map_or(Value::Null, |hints| {
                    Value::Array(
                        hints
                            .iter()
                            .map(|hint| {
                                hint.get("name")
                                    .and_then(Value::as_str)
                                    .map_or(Value::Null, Value::from)
                            })
                            .collect(),
                    )
                });
            out.insert("modelHints".to_owned(), hints);
            Value::Object(out)
        }
    }
}

/// The trim notes (as the result's `_meta` carries them) and their reasons.
fn trim_json(trims: &Annotations) -> (Value, Value) {
    let meta = trims.to_meta();
    let reasons = meta
        .values()
        .filter_map(|note| note.get("reason").cloned())
        .collect();
    (Value::Object(meta), Value::Array(reasons))
}

/// The server, the identity and the `alert` member of an alert line.
fn alert_json(alert: &Alert) -> (&str, &str, Value) {
    let mut out = Map::new();
    match alert {
        Alert::RetryLoop(r) => {
            out.insert("kind".into(), Value::from("retries"));
            out.insert("count".into(), Value::from(r.count));
            out.insert("threshold".into(), Value::from(r.threshold));
            out.insert("window_ms".into(), Value::from(r.window_ms));
            out.insert("since".into(), Value::from(format_rfc3339(r.since)));
            out.insert("represented".into(), Value::from(r.represented));
            (&r.server_id, &r.identity, Value::Object(out))
        }
        Alert::Trimmed(t) => {
            out.insert("kind".into(), Value::from("trims"));
            out.insert("count".into(), Value::from(t.trimmed));
            out.insert("calls".into(), Value::from(t.calls));
            out.insert("threshold".into(), Value::from(t.percent));
            out.insert("window_ms".into(), Value::from(t.window_ms));
            out.insert("since".into(), Value::from(format_rfc3339(t.since)));
            out.insert("gap".into(), Value::Object(t.gap.to_meta()));
            (&t.server_id, &t.identity, Value::Object(out))
        }
        // `Alert` is non-exhaustive: a kind this proxy does not know is
        // still written, by its debug form, rather than lost.
        other => {
            out.insert("kind".into(), Value::from(format!("{other:?}")));
            ("", "", Value::Object(out))
        }
    }
}

/// The warning the log carries for an alert.
pub fn alert_message(alert: &Alert) -> String {
    match alert {
        Alert::RetryLoop(r) => format!(
            "warning: retry loop: identity {} re-presented {} times within {} s (threshold {}; represented {} in all); the server keeps sending a request the policy refused",
            r.identity,
            r.count,
            r.window_ms / 1000,
            r.threshold,
            r.represented
        ),
        Alert::Trimmed(t) => format!(
            "warning: {} of {} requests within {} s were trimmed; last asked {}",
            t.trimmed,
            t.calls,
            t.window_ms / 1000,
            Value::Object(t.gap.to_meta())
        ),
        other => format!("warning: {other:?}"),
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
            sink: Arc::new(Mutex::new(sink)),
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
        if let Some(trims) = entry.trims.filter(|t| !t.is_empty()) {
            let (notes, reasons) = trim_json(trims);
            line.insert("trims".into(), notes);
            line.insert("reasons".into(), reasons);
        }
        self.put(line);
    }

    /// Writes an `alert` line (`proxy/PROXY.md`, "The audit log").
    pub fn alert(&self, alert: &Alert) {
        let mut line = Map::new();
        line.insert("time".into(), Value::from(now_rfc3339()));
        line.insert("event".into(), Value::from("alert"));
        let (server, identity, body) = alert_json(alert);
        line.insert("server".into(), Value::from(server));
        line.insert("identity".into(), Value::from(identity));
        line.insert("alert".into(), body);
        self.put(line);
    }

    fn put(&self, line: Map<String, Value>) {
        let mut text = Value::Object(line).to_string();
        text.push('\n');
        let mut sink = match self.sink.lock() {
            Ok(sink) => sink,
            Err(poisoned) => poisoned.into_inner(),
        };
        let _ = sink.write_all(text.as_bytes()).and_then(|()| sink.flush());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use proptest::prelude::*;

    use super::*;
    use crate::capture::Captured;

    /// A character a terminal or a line reader would act on.
    fn acts(c: char) -> bool {
        c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}'
            )
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    }

    proptest! {
        /// For any server-chosen text in a message and in the server id,
        /// each log entry is exactly one line with no character that acts.
        #[test]
        fn each_log_entry_is_one_inert_line(
            server in any::<String>(),
            chosen in proptest::collection::vec(
                prop_oneof![
                    any::<char>(),
                    proptest::sample::select(vec![
                        '\n', '\r', '\u{1b}', '\u{85}', '\u{2028}', '\u{2029}', '\u{202e}',
                        '\u{2066}', '\u{7f}', '\u{b}', '\\',
                    ]),
                ],
                0..40,
            ),
        ) {
            let chosen: String = chosen.into_iter().collect();
            let sink = Captured::default();
            let log = Log::to(Box::new(sink.clone()), &server);
            log.line(format_args!("server sent {chosen} with id 1"));
            let text = String::from_utf8(sink.take_bytes()).unwrap();
            let body = text.strip_suffix('\n').unwrap();
            prop_assert!(!body.chars().any(acts), "{:?}", body);
            // Nothing was lost: the escapes read back to the text.
            let expected = format!("server sent {} with id 1", escape_text(&chosen));
            prop_assert!(body.ends_with(&expected));
        }
    }

    #[test]
    fn escapes_are_unambiguous() {
        assert_eq!(escape_text("a\nb"), "a\\nb");
        assert_eq!(escape_text("a\\nb"), "a\\\\nb");
        assert_eq!(escape_text("\u{1b}[2J\u{202e}"), "\\u{001b}[2J\\u{202e}");
        assert!(matches!(escape_text("plain é"), Cow::Borrowed(_)));
    }
}
