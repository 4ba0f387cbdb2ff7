//! Frames: what the far side of the connection sees
//! (`docs/spec/frames.md`).
//!
//! - [`DenialData`] is the typed `error.data` object of a denial, written as
//!   JSON text with a fixed key order (`reason`, `server`, `retryable`, then
//!   `resetsAt` or `retryAfter`). The text is stored with the decision so a
//!   replay sends the same bytes.
//! - Every reply is written here, as bytes: a denial's
//!   ([`crate::engine::Denial::reply`]), a failure's
//!   ([`crate::Error::reply`]), and [`request_error_response`] for requests
//!   that never reached the policy (-32700/-32600/-32602, `id` null when it
//!   cannot be known).
//! - [`Annotations`] are the `_meta.context`, `_meta.maxTokens` and
//!   `_meta.model` members a trimmed `CreateMessageResult` carries
//!   ([`crate::engine::Grant::annotate`]).
//!
//! Every function here returns text or edits a value; none can panic on input.

use serde_json::{Map, Value};

use crate::jsonrpc;
use crate::store::Millis;
use crate::table::ContextScope;
use crate::{calendar, table::builtin};

/// When a denied request may be tried again, as the frame states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// `resetsAt`: the instant the budget window resets (RFC 3339 UTC).
    ResetsAt(Millis),
    /// `retryAfter`: whole seconds, rounded up.
    RetryAfter(u64),
}

/// The `error.data` object of a denial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenialData {
    /// The stable, machine-readable reason name: what a server branches on.
    pub reason: String,
    /// The server id as the client names it.
    pub server: String,
    /// Whether retrying later can succeed. Unknown is `false`.
    pub retryable: bool,
    /// `resetsAt` or `retryAfter`, when the reason has one.
    pub timing: Option<Timing>,
}

impl DenialData {
    /// The `data` of a request refused because the decision store failed:
    /// reason `runtime.store_unavailable`, retryable (the store may recover).
    pub fn store_unavailable(server: &str) -> DenialData {
        DenialData {
            reason: STORE_UNAVAILABLE.to_owned(),
            server: server.to_owned(),
            retryable: true,
            timing: None,
        }
    }

    /// The same object as a JSON value, for an SDK that builds its error
    /// from a `serde_json::Value` (the members are the same; their order is
    /// the SDK's).
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("reason".to_owned(), Value::from(self.reason.as_str()));
        map.insert("server".to_owned(), Value::from(self.server.as_str()));
        map.insert("retryable".to_owned(), Value::from(self.retryable));
        match self.timing {
            Some(Timing::ResetsAt(at)) => {
                map.insert(
                    "resetsAt".to_owned(),
                    Value::from(calendar::format_rfc3339(at)),
                );
            }
            Some(Timing::RetryAfter(seconds)) => {
                map.insert("retryAfter".to_owned(), Value::from(seconds));
            }
            None => {}
        }
        Value::Object(map)
    }

    /// Reads back text [`DenialData::to_json`] wrote (a stored denial's
    /// `data`), by a typed parse. `None` when it is not such an object
    /// (a damaged or foreign row).
    pub(crate) fn from_json(text: &str) -> Option<DenialData> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            #[serde(borrow)]
            reason: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            server: std::borrow::Cow<'a, str>,
            retryable: bool,
            #[serde(borrow, default)]
            resets_at: Option<std::borrow::Cow<'a, str>>,
            #[serde(default)]
            retry_after: Option<u64>,
        }
        let wire: Wire<'_> = serde_json::from_str(text).ok()?;
        let timing = match (wire.resets_at, wire.retry_after) {
            (Some(at), None) => Some(Timing::ResetsAt(calendar::parse_rfc3339(&at)?)),
            (None, Some(seconds)) => Some(Timing::RetryAfter(seconds)),
            (None, None) => None,
            (Some(_), Some(_)) => return None,
        };
        Some(DenialData {
            reason: wire.reason.into_owned(),
            server: wire.server.into_owned(),
            retryable: wire.retryable,
            timing,
        })
    }

    /// The JSON text, keys in the order `reason`, `server`, `retryable`,
    /// then `resetsAt` or `retryAfter`; no whitespace.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + self.reason.len() + self.server.len());
        out.push_str("{\"reason\":");
        push_json_string(&mut out, &self.reason);
        out.push_str(",\"server\":");
        push_json_string(&mut out, &self.server);
        out.push_str(if self.retryable {
            ",\"retryable\":true"
        } else {
            ",\"retryable\":false"
        });
        match self.timing {
            Some(Timing::ResetsAt(at)) => {
                out.push_str(",\"resetsAt\":");
                push_json_string(&mut out, &calendar::format_rfc3339(at));
            }
            Some(Timing::RetryAfter(seconds)) => {
                out.push_str(",\"retryAfter\":");
                out.push_str(&seconds.to_string());
            }
            None => {}
        }
        out.push('}');
        out
    }
}

/// Appends `text` as a JSON string literal.
fn push_json_string(out: &mut String, text: &str) {
    match serde_json::to_string(text) {
        Ok(quoted) => out.push_str(&quoted),
        // Serialising a &str cannot fail; keep the frame valid regardless.
        Err(_) => out.push_str("\"\""),
    }
}

/// Appends a JSON-RPC id: the value when it is a string or a number, else `null`.
fn push_id(out: &mut String, id: Option<&Value>) {
    match id {
        Some(Value::String(s)) => push_json_string(out, s),
        Some(Value::Number(n)) => out.push_str(&n.to_string()),
        _ => out.push_str("null"),
    }
}

/// The JSON-RPC error object `{"code":…,"message":…,"data":…}`; `data_json`
/// is inserted verbatim (it must be JSON text, e.g. [`DenialData::to_json`]).
pub(crate) fn error_object(code: i32, message: &str, data_json: Option<&str>) -> String {
    let mut out = String::with_capacity(64 + message.len() + data_json.map_or(0, str::len));
    out.push_str("{\"code\":");
    out.push_str(&code.to_string());
    out.push_str(",\"message\":");
    push_json_string(&mut out, message);
    if let Some(data) = data_json {
        out.push_str(",\"data\":");
        out.push_str(data);
    }
    out.push('}');
    out
}

/// The JSON-RPC error response
/// `{"jsonrpc":"2.0","id":<id>,"error":{"code":…,"message":…,"data":…}}`.
/// An id that is absent or not a string/number is written as `null`.
pub(crate) fn error_response(
    id: Option<&Value>,
    code: i32,
    message: &str,
    data_json: Option<&str>,
) -> String {
    let object = error_object(code, message, data_json);
    let mut out = String::with_capacity(32 + object.len());
    out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    push_id(&mut out, id);
    out.push_str(",\"error\":");
    out.push_str(&object);
    out.push('}');
    out
}

/// The error frame for a request that failed validation, or that a
/// forwarder refuses on its own (`code` -32700, -32600 or -32602, see
/// [`jsonrpc`]; `message` says what was wrong). No `data`: these are
/// JSON-RPC's own errors, not policy decisions.
pub fn request_error_response(id: Option<&Value>, code: i32, message: &str) -> Vec<u8> {
    error_response(id, code, message, None).into_bytes()
}

/// The reason of a request refused because the decision store failed.
const STORE_UNAVAILABLE: &str = "runtime.store_unavailable";

/// The message of a request refused because the decision store failed:
/// the same words whatever failed. What failed (a host, a port, a database,
/// a schema, a file, an OS error) is the operator's to read in the log, never
/// the policed server's (`docs/spec/frames.md`, "Store failures").
pub(crate) const STORE_UNAVAILABLE_MESSAGE: &str = "Sampling denied: decision store unavailable";

/// Values for the placeholders of a reason's message template.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placeholders<'a> {
    /// `{server}`.
    pub server: &'a str,
    /// `{reason}`.
    pub reason: &'a str,
    /// `{limit}`, e.g. `64 KiB` or `50 messages`.
    pub limit: Option<String>,
    /// `{window}`, e.g. `daily` or `24h`.
    pub window: Option<String>,
    /// `{resetsAt}` (RFC 3339).
    pub resets_at: Option<Millis>,
    /// `{retryAfter}` (seconds).
    pub retry_after: Option<u64>,
    /// `{deadline}`, e.g. `60s`.
    pub deadline: Option<String>,
}

/// Fills a message template (`docs/spec/frames.md`, "Messages"). `{{` and
/// `}}` are literal braces; `{name}` is a placeholder. A placeholder with no
/// value for this denial, and any unknown `{name}`, is left as written so the
/// gap is visible. The checker refuses a lone `}` and an unclosed `{`
/// (`E0407`), but a table can be written by hand, so both are copied as
/// written rather than refused here.
pub(crate) fn render_message(template: &str, values: &Placeholders<'_>) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let brace = &rest[at..];
        if brace.starts_with("{{") || brace.starts_with("}}") {
            out.push_str(&brace[..1]);
            rest = &brace[2..];
            continue;
        }
        if let Some(after) = brace.strip_prefix('}') {
            out.push('}');
            rest = after;
            continue;
        }
        let after = &brace[1..];
        let Some(close) = after.find('}') else {
            out.push_str(brace);
            return out;
        };
        let name = &after[..close];
        let value: Option<String> = match name {
            "server" => Some(values.server.to_owned()),
            "reason" => Some(values.reason.to_owned()),
            "limit" => values.limit.clone(),
            "window" => values.window.clone(),
            "resetsAt" => values.resets_at.map(calendar::format_rfc3339),
            "retryAfter" => values.retry_after.map(|s| s.to_string()),
            "deadline" => values.deadline.clone(),
            _ => None,
        };
        match value {
            Some(v) => out.push_str(&v),
            None => {
                out.push('{');
                out.push_str(name);
                out.push('}');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// A duration as policies write it: `500ms`, `30s`, `5m`, `24h`, `7d`.
pub(crate) fn format_duration(ms: u64) -> String {
    const DAY: u64 = 86_400_000;
    if ms != 0 && ms.is_multiple_of(DAY) && ms > DAY {
        format!("{}d", ms / DAY)
    } else if ms != 0 && ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms != 0 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms != 0 && ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

/// A size as policies write it: `512 B`, `64 KiB`, `2 MiB`.
pub(crate) fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if bytes != 0 && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes != 0 && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// `includeContext` was lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextTrim {
    /// What the request asked for. Validation refuses an unknown value; one
    /// in params that skipped validation reads as `allServers` here.
    pub requested: ContextScope,
    /// What the completion runs with.
    pub applied: ContextScope,
}

/// `maxTokens` was clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxTokensTrim {
    /// The request's `maxTokens`.
    pub requested: u64,
    /// The block's `max_tokens`.
    pub applied: u64,
}

/// Model hints were restricted to the block's `models`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTrim {
    /// The hint names the request carried, in order (hints without a string name are listed as `null`).
    pub requested: Vec<Option<String>>,
    /// The hint names that were kept.
    pub applied: Vec<String>,
    /// The globs the client must pick a model from.
    pub allowed: Vec<String>,
}

/// What a trim changed, to be written into the result's `_meta`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotations {
    /// `_meta.context`.
    pub context: Option<ContextTrim>,
    /// `_meta.maxTokens`.
    pub max_tokens: Option<MaxTokensTrim>,
    /// `_meta.model`.
    pub model: Option<ModelTrim>,
}

impl Annotations {
    /// Whether nothing was trimmed.
    pub fn is_empty(&self) -> bool {
        self.context.is_none() && self.max_tokens.is_none() && self.model.is_none()
    }

    /// The `_meta` members, keyed `context`, `maxTokens`, `model`:
    /// `{"requested":…,"applied":…,"reason":"policy.…"}` each (the model
    /// entry also carries `"allowed": [globs]`).
    pub fn to_meta(&self) -> Map<String, Value> {
        let mut meta = Map::new();
        if let Some(c) = &self.context {
            meta.insert(
                "context".to_owned(),
                note(
                    Value::from(c.requested.as_str()),
                    Value::from(c.applied.as_str()),
                    builtin::MAX_SCOPE,
                ),
            );
        }
        if let Some(t) = &self.max_tokens {
            meta.insert(
                "maxTokens".to_owned(),
                note(
                    Value::from(t.requested),
                    Value::from(t.applied),
                    builtin::MAX_TOKENS,
                ),
            );
        }
        if let Some(m) = &self.model {
            let mut value = note(
                Value::Array(
                    m.requested
                        .iter()
                        .map(|name| name.as_deref().map_or(Value::Null, Value::from))
                        .collect(),
                ),
                Value::Array(m.applied.iter().map(|s| Value::from(s.as_str())).collect()),
                builtin::MODEL,
            );
            if let Value::Object(map) = &mut value {
                map.insert(
                    "allowed".to_owned(),
                    Value::Array(m.allowed.iter().map(|s| Value::from(s.as_str())).collect()),
                );
            }
            meta.insert("model".to_owned(), value);
        }
        meta
    }
}

fn note(requested: Value, applied: Value, reason: &str) -> Value {
    let mut map = Map::new();
    map.insert("requested".to_owned(), requested);
    map.insert("applied".to_owned(), applied);
    map.insert("reason".to_owned(), Value::from(reason));
    Value::Object(map)
}

/// Adds the trim annotations to a `CreateMessageResult` under `_meta`,
/// creating `_meta` if needed. Keys already present in `_meta` are kept as
/// they are (never clobbered). Returns `false`, changing nothing, when the
/// result is not an object or its `_meta` is not an object.
pub(crate) fn annotate_result(result: &mut Value, annotations: &Annotations) -> bool {
    let Value::Object(result) = result else {
        return false;
    };
    if annotations.is_empty() {
        return true;
    }
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return false;
    };
    for (key, value) in annotations.to_meta() {
        meta.entry(key).or_insert(value);
    }
    true
}

/// One entry of an MCP 2026-07-28 `InputRequiredResult.inputRequests`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InputRequest<'a> {
    /// The server-assigned key (for a list, the index as a decimal string).
    pub key: String,
    /// The entry's `method`, if it has a string one.
    pub method: Option<&'a str>,
    /// The whole entry (`{"method":…,"params":…}`).
    pub entry: &'a Value,
}

impl InputRequest<'_> {
    /// Whether this entry asks for sampling.
    pub fn is_sampling(&self) -> bool {
        self.method == Some(jsonrpc::SAMPLING_METHOD)
    }
}

/// The entries of `inputRequests` in an `InputRequiredResult` (or of the
/// `inputRequests` value itself, when given directly). The schema makes it a
/// map from server-assigned keys to requests; a list is accepted too, keyed
/// by index. Anything else yields no entries.
pub(crate) fn input_requests(result: &Value) -> Vec<InputRequest<'_>> {
    // Under a result's `inputRequests` member every key is an entry, a key
    // spelt `method` included: a client reads the map that way, so an entry
    // beside such a key must still be decided (`sampling off` was bypassed).
    let (requests, member) = match result.get("inputRequests") {
        Some(inner) => (inner, true),
        None => (result, false),
    };
    fn make(key: String, entry: &Value) -> InputRequest<'_> {
        InputRequest {
            key,
            method: entry.get("method").and_then(Value::as_str),
            entry,
        }
    }
    match requests {
        // Given directly, an object with a `method` is one request, not a map.
        Value::Object(map) if member || !map.contains_key("method") => {
            map.iter().map(|(k, v)| make(k.clone(), v)).collect()
        }
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(i, v)| make(i.to_string(), v))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn data_key_order_and_escaping() {
        let data = DenialData {
            reason: "policy.budget_exhausted".into(),
            server: "rel\"ease".into(),
            retryable: false,
            timing: Some(Timing::ResetsAt(calendar::timestamp(2026, 3, 11, 0, 0, 0))),
        };
        assert_eq!(
            data.to_json(),
            r#"{"reason":"policy.budget_exhausted","server":"rel\"ease","retryable":false,"resetsAt":"2026-03-11T00:00:00Z"}"#
        );
        let frame = error_response(Some(&json!(47)), -32010, "no", Some(&data.to_json()));
        let parsed: Value = serde_json::from_str(&frame).expect("valid JSON");
        assert_eq!(parsed["id"], 47);
        assert_eq!(parsed["error"]["data"]["server"], "rel\"ease");
        assert!(error_response(Some(&json!({"x": 1})), 1, "m", None).contains("\"id\":null"));
    }

    #[test]
    fn templates() {
        let values = Placeholders {
            server: "s",
            reason: "r",
            retry_after: Some(7),
            ..Placeholders::default()
        };
        assert_eq!(
            render_message("{server} {reason} {retryAfter}s {resetsAt} {x} {", &values),
            "s r 7s {resetsAt} {x} {"
        );
        // Doubled braces are literal braces, never placeholders.
        assert_eq!(
            render_message("{{server}} is {server}; {{{reason}}} }}{{", &values),
            "{server} is s; {r} }{"
        );
        assert_eq!(format_duration(86_400_000), "24h");
        assert_eq!(format_duration(7 * 86_400_000), "7d");
        assert_eq!(format_duration(60_000), "1m");
        assert_eq!(format_duration(1_500), "1500ms");
        assert_eq!(format_size(65_536), "64 KiB");
        assert_eq!(format_size(100), "100 B");
    }

    #[test]
    fn annotate_keeps_existing_meta() {
        let ann = Annotations {
            context: Some(ContextTrim {
                requested: ContextScope::AllServers,
                applied: ContextScope::None,
            }),
            max_tokens: Some(MaxTokensTrim {
                requested: 9000,
                applied: 4096,
            }),
            model: None,
        };
        let mut result = json!({"model": "m", "_meta": {"context": "mine", "other": 1}});
        assert!(annotate_result(&mut result, &ann));
        assert_eq!(result["_meta"]["context"], "mine");
        assert_eq!(result["_meta"]["other"], 1);
        assert_eq!(
            result["_meta"]["maxTokens"],
            json!({"requested": 9000, "applied": 4096, "reason": "policy.max_tokens"})
        );
        let mut bad = json!({"_meta": 3});
        assert!(!annotate_result(&mut bad, &ann));
        assert!(!annotate_result(&mut json!([1]), &ann));
    }
}

/// The exact bytes of frames: what a server branches on must not drift.
#[cfg(test)]
mod frozen_bytes {
    use super::*;
    use crate::calendar::timestamp;
    use serde_json::json;

    #[test]
    fn the_seeds_budget_frame_byte_for_byte() {
        let data = DenialData {
            reason: "policy.budget_exhausted".into(),
            server: "release-notes".into(),
            retryable: false,
            timing: Some(Timing::ResetsAt(timestamp(2026, 3, 11, 0, 0, 0))),
        };
        let text = error_response(
            Some(&json!(47)),
            -32003,
            "Sampling denied: 24h budget for server 'release-notes' exhausted",
            Some(&data.to_json()),
        );
        assert_eq!(
            text,
            r#"{"jsonrpc":"2.0","id":47,"error":{"code":-32003,"message":"Sampling denied: 24h budget for server 'release-notes' exhausted","data":{"reason":"policy.budget_exhausted","server":"release-notes","retryable":false,"resetsAt":"2026-03-11T00:00:00Z"}}}"#
        );
    }

    #[test]
    fn retry_after_and_plain_data() {
        let rate = DenialData {
            reason: "policy.rate_limit".into(),
            server: "ünï\u{1F600}".into(),
            retryable: true,
            timing: Some(Timing::RetryAfter(12)),
        };
        assert_eq!(
            rate.to_json(),
            "{\"reason\":\"policy.rate_limit\",\"server\":\"ünï\u{1F600}\",\"retryable\":true,\"retryAfter\":12}"
        );
        let plain = DenialData {
            reason: "user.denied".into(),
            server: "a\nb".into(),
            retryable: false,
            timing: None,
        };
        assert_eq!(
            plain.to_json(),
            r#"{"reason":"user.denied","server":"a\nb","retryable":false}"#
        );
    }

    #[test]
    fn ids_and_error_frames() {
        assert_eq!(
            request_error_response(None, -32700, "invalid JSON"),
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"invalid JSON"}}"#
        );
        assert_eq!(
            request_error_response(Some(&json!("x\"y")), -32602, "bad"),
            br#"{"jsonrpc":"2.0","id":"x\"y","error":{"code":-32602,"message":"bad"}}"#
        );
        // A boolean or object id is not a JSON-RPC id: null.
        assert!(
            String::from_utf8_lossy(&request_error_response(Some(&json!(true)), -32600, "m"))
                .contains("\"id\":null")
        );
        let failure = crate::Error::Store {
            server: "s".into(),
            source: crate::store::StoreError::Poisoned,
        };
        let internal: serde_json::Value =
            serde_json::from_slice(&failure.reply(Some(&json!(3)))).expect("json");
        assert_eq!(internal["error"]["code"], -32603);
        assert_eq!(
            internal["error"]["data"],
            json!({"reason": "runtime.store_unavailable", "server": "s", "retryable": true})
        );
        // Whatever failed, the frame names nothing of the operator's store
        // (`docs/spec/frames.md`, "Store failures"); `Display` keeps it.
        let down = crate::Error::Store {
            server: "s".into(),
            source: crate::store::StoreError::Unavailable {
                store: "postgres host=db.internal port=6432 dbname=prod schema=team".into(),
                detail: "error connecting to server: Connection refused (os error 111)".into(),
            },
        };
        let frame = String::from_utf8(down.reply(Some(&json!(3)))).expect("utf-8");
        assert_eq!(
            frame,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Sampling denied: decision store unavailable","data":{"reason":"runtime.store_unavailable","server":"s","retryable":true}}}"#
        );
        assert!(down.to_string().contains("port=6432"), "{down}");
        assert_eq!(internal["error"]["message"], down.message());
        assert_eq!(
            error_response(
                Some(&json!(9)),
                -1,
                "no",
                Some(r#"{"reason":"user.denied"}"#)
            ),
            r#"{"jsonrpc":"2.0","id":9,"error":{"code":-1,"message":"no","data":{"reason":"user.denied"}}}"#
        );
    }

    #[test]
    fn annotation_shapes() {
        let annotations = Annotations {
            context: Some(ContextTrim {
                requested: ContextScope::AllServers,
                applied: ContextScope::None,
            }),
            max_tokens: Some(MaxTokensTrim {
                requested: 8000,
                applied: 4096,
            }),
            model: Some(ModelTrim {
                requested: vec![Some("gpt-5".into()), None],
                applied: vec![],
                allowed: vec!["claude-*".into()],
            }),
        };
        let mut result = json!({"role": "assistant", "content": {"type": "text", "text": "t"}, "model": "claude-x", "stopReason": "endTurn"});
        assert!(annotate_result(&mut result, &annotations));
        assert_eq!(
            result["_meta"],
            json!({
                "context": {"requested": "allServers", "applied": "none", "reason": "policy.max_scope"},
                "maxTokens": {"requested": 8000, "applied": 4096, "reason": "policy.max_tokens"},
                "model": {"requested": ["gpt-5", null], "applied": [], "allowed": ["claude-*"], "reason": "policy.model"},
            })
        );
        // Nothing to add: the result is untouched (no empty `_meta`).
        let mut plain = json!({"model": "m"});
        assert!(annotate_result(&mut plain, &Annotations::default()));
        assert_eq!(plain, json!({"model": "m"}));
    }

    #[test]
    fn input_request_listing() {
        let result = json!({"resultType": "input_required", "inputRequests": {
            "b": {"method": "sampling/createMessage", "params": {}},
            "a": {"method": "elicitation/create", "params": {}},
            "c": {"params": {}},
        }});
        let entries = input_requests(&result);
        let summary: Vec<(&str, bool)> = entries
            .iter()
            .map(|e| (e.key.as_str(), e.is_sampling()))
            .collect();
        assert_eq!(summary, [("a", false), ("b", true), ("c", false)]);
        // The inputRequests value on its own works too.
        assert_eq!(input_requests(&result["inputRequests"]).len(), 3);
        assert!(input_requests(&json!("x")).is_empty());
    }
}
