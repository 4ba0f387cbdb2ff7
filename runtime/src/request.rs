//! Strict parsing and validation of incoming `sampling/createMessage` requests
//! (`docs/spec/evaluation.md`, "Step 1: Validation").
//!
//! Parsers disagree about duplicate object keys (first wins, last wins,
//! error), and keys that differ only in Unicode normalisation look identical
//! to a human and become identical in the canonical identity. Either is a way
//! to show the policy one request and the model another, so both are refused
//! anywhere in the document. Nesting and size are bounded so that no input
//! can exhaust the stack or memory, and no input makes this module panic.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::frame;
use crate::identity::nfc;
use crate::json::{Json, Kind, Node, Object};
use crate::jsonrpc;
use crate::table::ProtocolRevision;

mod fast;
mod literal;
mod recover;
mod schema;

pub use recover::IdScan;

/// serde_json refuses to nest deeper than this on its own (127 containers);
/// [`Limits::max_depth`] is capped here so our clearer error always fires first.
const SERDE_JSON_DEPTH: usize = 127;

/// Bounds on what [`parse_strict_with`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted input, in bytes. Default 16 MiB.
    pub max_bytes: usize,
    /// Deepest accepted nesting of arrays and objects (`[]` is depth 1).
    /// Default 64; values above 127 act as 127, serde_json's own bound.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 16 * 1024 * 1024,
            max_depth: 64,
        }
    }
}

/// Why a request was refused. [`RequestError::code`] gives the JSON-RPC code
/// for the error frame; the `Display` text is its message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The input is larger than [`Limits::max_bytes`]. Its code is -32600,
    /// not -32700: the bytes were never read, so nothing is known to be
    /// wrong with their JSON; the request is refused for its size alone
    /// (as the proxy refuses an over-long line).
    #[error("request is {size} bytes, larger than the limit of {limit} bytes")]
    TooLarge {
        /// Size of the input in bytes.
        size: usize,
        /// The limit it exceeded.
        limit: usize,
    },
    /// The input is not UTF-8.
    #[error("request is not valid UTF-8 (invalid byte at offset {offset})")]
    InvalidUtf8 {
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// A `\u` escape encodes half of a surrogate pair with no other half.
    #[error("lone surrogate in a \\u escape at line {line} column {column}")]
    LoneSurrogate {
        /// 1-based line of the escape.
        line: usize,
        /// 1-based column just after the escape.
        column: usize,
    },
    /// Arrays and objects nest deeper than [`Limits::max_depth`].
    #[error("nesting deeper than {limit} levels at {path}")]
    TooDeep {
        /// The limit.
        limit: usize,
        /// JSON path of the container that went one level too deep.
        path: String,
    },
    /// The input is not JSON.
    #[error("invalid JSON: {message}")]
    Syntax {
        /// serde_json's description, with line and column.
        message: String,
    },
    /// An object has the same key twice, or two keys equal after NFC.
    #[error("{}", duplicate_message(key, earlier, path))]
    DuplicateKey {
        /// The repeated key, as written.
        key: String,
        /// The key it repeats, as written (differs from `key` only in normalisation).
        earlier: String,
        /// JSON path of the object holding both.
        path: String,
    },
    /// The request is not a JSON object.
    #[error("a request must be a JSON object, got {found}")]
    NotAnObject {
        /// What was found instead.
        found: String,
    },
    /// An envelope member (`jsonrpc`, `method`, `id`) is missing or ill-typed.
    #[error("{}", invalid_message(path, expected, found.as_deref()))]
    InvalidEnvelope {
        /// JSON path of the member.
        path: String,
        /// What it must be.
        expected: &'static str,
        /// What was found, as a short description; `None` when the member is missing.
        found: Option<String>,
    },
    /// A well-formed JSON-RPC request for some other method.
    #[error("not a sampling request: method is {found}, expected \"sampling/createMessage\"")]
    WrongMethod {
        /// The method, as JSON text.
        found: String,
    },
    /// A parameter is missing or has the wrong type, range or value.
    #[error("{}", invalid_message(path, expected, found.as_deref()))]
    InvalidParams {
        /// JSON path of the parameter.
        path: String,
        /// What it must be.
        expected: &'static str,
        /// What was found, as a short description; `None` when the parameter is missing.
        found: Option<String>,
    },
}

impl RequestError {
    /// The JSON-RPC error code for this refusal: -32700 (the bytes are not
    /// acceptable JSON), -32600 (not a valid sampling request, including
    /// duplicate keys and a request over the size limit) or -32602 (invalid
    /// params).
    pub fn code(&self) -> i32 {
        match self {
            RequestError::InvalidUtf8 { .. }
            | RequestError::LoneSurrogate { .. }
            | RequestError::TooDeep { .. }
            | RequestError::Syntax { .. } => jsonrpc::PARSE_ERROR,
            RequestError::TooLarge { .. }
            | RequestError::DuplicateKey { .. }
            | RequestError::NotAnObject { .. }
            | RequestError::InvalidEnvelope { .. }
            | RequestError::WrongMethod { .. } => jsonrpc::INVALID_REQUEST,
            RequestError::InvalidParams { .. } => jsonrpc::INVALID_PARAMS,
        }
    }
}

fn invalid_message(path: &str, expected: &str, found: Option<&str>) -> String {
    match found {
        Some(found) => format!("{path} must be {expected}, got {found}"),
        None => format!("{path} is missing: it must be {expected}"),
    }
}

fn duplicate_message(key: &str, earlier: &str, path: &str) -> String {
    if key == earlier {
        format!("duplicate key {} at {path}", quote(key))
    } else {
        format!(
            "duplicate key {} at {path}: equal after Unicode NFC normalisation to the earlier key {}",
            quote(key),
            quote(earlier)
        )
    }
}

/// A validated sampling request.
#[derive(Clone)]
pub struct SamplingRequest {
    /// The JSON-RPC id (a string or a number), or `None` for bare params.
    pub id: Option<Value>,
    params: Params,
    /// Set by the parser alone ([`SamplingRequest::rewritten`]).
    rewritten: bool,
}

/// A request's params: a `Map`, or, for a request decided from its bytes
/// (which never builds one to decide), the request's text, read into a
/// `Map` the first time a caller asks for it.
#[derive(Clone)]
enum Params {
    Map(Map<String, Value>),
    Text {
        text: Box<str>,
        /// The text is a JSON-RPC envelope, not bare params (known from
        /// validation, not from `id`, which a caller may change).
        envelope: bool,
        map: OnceLock<Map<String, Value>>,
    },
}

impl SamplingRequest {
    /// A request the engine decided from `text`, which the strict reader
    /// accepted and [`valid`] found valid, its id `id` (`None`: the text
    /// is bare params).
    pub(crate) fn from_text(id: Option<Value>, text: &str, rewritten: bool) -> Self {
        SamplingRequest {
            params: Params::Text {
                text: text.into(),
                envelope: id.is_some(),
                map: OnceLock::new(),
            },
            id,
            rewritten,
        }
    }

    /// The params object, valid under the revision it was validated for:
    /// `messages` is an array and `maxTokens` a positive integer (held as
    /// one however it was spelt, see [`SamplingRequest::rewritten`]).
    pub fn params(&self) -> &Map<String, Value> {
        match &self.params {
            Params::Map(map) => map,
            Params::Text {
                text,
                envelope,
                map,
            } => map.get_or_init(|| params_of_text(text, *envelope, self.rewritten)),
        }
    }

    /// The params, owned.
    pub fn into_params(self) -> Map<String, Value> {
        match self.params {
            Params::Map(map) => map,
            Params::Text {
                text,
                envelope,
                map,
            } => map
                .into_inner()
                .unwrap_or_else(|| params_of_text(&text, envelope, self.rewritten)),
        }
    }

    /// Whether `params` is not what the bytes said: an integral
    /// `maxTokens` spelt `9e2`, `-0` or `100.0` is held as the integer. A
    /// forwarder (the proxy) then passes the request on re-serialised, not
    /// as its bytes, because a client whose `maxTokens` is integer-typed
    /// refuses the spelling. Read-only: only the parser that read the
    /// bytes knows it.
    pub fn rewritten(&self) -> bool {
        self.rewritten
    }

    /// `params.maxTokens`, validated as a positive integer.
    pub fn max_tokens(&self) -> u64 {
        self.params()
            .get("maxTokens")
            .and_then(as_non_negative_integer)
            .unwrap_or(0)
    }

    /// `params.messages`, validated as an array.
    pub fn messages(&self) -> &[Value] {
        match self.params().get("messages") {
            Some(Value::Array(items)) => items,
            _ => &[],
        }
    }
}

impl PartialEq for SamplingRequest {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.rewritten == other.rewritten && self.params() == other.params()
    }
}

impl fmt::Debug for SamplingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SamplingRequest")
            .field("id", &self.id)
            .field("params", self.params())
            .field("rewritten", &self.rewritten)
            .finish()
    }
}

/// The params of a request's `text`, which the strict reader accepted and
/// [`valid`] found valid: [`params_of`] its value. Read by the reader that
/// accepted the text, so it cannot refuse it now; should it ever, the
/// params are empty.
fn params_of_text(text: &str, envelope: bool, rewritten: bool) -> Map<String, Value> {
    fast::parse(text, SERDE_JSON_DEPTH)
        .map_or_else(Map::new, |value| params_of(value, envelope, rewritten))
}

/// The params of a request `value` that [`valid`] found valid (an
/// `envelope`, or bare params), `maxTokens` held as the integer it is when
/// it was `rewritten`: as a [`SamplingRequest`] holds them. What `valid`
/// refuses has none: empty.
fn params_of(value: Value, envelope: bool, rewritten: bool) -> Map<String, Value> {
    let mut params = match value {
        Value::Object(mut object) if envelope => match object.remove("params") {
            Some(Value::Object(params)) => params,
            _ => Map::new(),
        },
        Value::Object(object) => object,
        _ => Map::new(),
    };
    if rewritten {
        respell_max_tokens(&mut params);
    }
    params
}

/// A request refused before it reached the policy: why, and the envelope's
/// id whenever it could be read, so the error frame can carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The request's id (a string or a number), or `None` when it could not
    /// be read or is not unique (the frame then says `null`).
    pub id: Option<Value>,
    /// What was wrong.
    pub error: RequestError,
}

impl Rejection {
    /// The JSON-RPC error code ([`RequestError::code`]).
    pub fn code(&self) -> i32 {
        self.error.code()
    }

    /// The JSON-RPC error response for this refusal.
    pub fn reply(&self) -> Vec<u8> {
        frame::request_error_response(self.id.as_ref(), self.code(), &self.error.to_string())
    }
}

/// Parses and validates raw request bytes under the default [`Limits`]
/// and the default revision ([`ProtocolRevision::default`]):
/// [`parse_strict`], then [`validate_sampling`]. A refusal carries the
/// envelope's id when it can be read, also when strict parsing failed
/// (see [`recover_id`]).
pub fn parse_sampling(bytes: &[u8]) -> Result<SamplingRequest, Rejection> {
    parse_sampling_with(bytes, &Limits::default())
}

/// [`parse_sampling`] under explicit limits.
pub fn parse_sampling_with(bytes: &[u8], limits: &Limits) -> Result<SamplingRequest, Rejection> {
    parse_sampling_for(bytes, limits, ProtocolRevision::default())
}

/// [`parse_sampling`] under explicit limits, validating the params as MCP
/// `revision` defines them ([`validate_sampling_for`]).
pub fn parse_sampling_for(
    bytes: &[u8],
    limits: &Limits,
    revision: ProtocolRevision,
) -> Result<SamplingRequest, Rejection> {
    let value = parse_strict_with(bytes, limits).map_err(|error| Rejection {
        id: recover_id_with(bytes, limits),
        error,
    })?;
    let id = envelope_id(&value).cloned();
    validate_sampling_for(value, revision).map_err(|error| Rejection {
        id,
        error: with_literal(error, bytes),
    })
}

/// Longest number literal a message quotes whole.
const LITERAL_SHOWN: usize = 64;

/// `error` with a number it describes replaced by the number's literal as
/// written: serde_json reads `18446744073709551617` as the double 2^64, and
/// a message must show what the request said, not what it was read as.
/// Needs the bytes, so only [`parse_sampling`] can do it; `bytes` parsed
/// strictly, so they are valid JSON.
fn with_literal(error: RequestError, bytes: &[u8]) -> RequestError {
    let literal = |path: &str| -> Option<String> {
        let keys: Vec<&str> = path.strip_prefix('$')?.split('.').skip(1).collect();
        let (start, end) = literal::locate(bytes, &keys)?;
        let raw = bytes.get(start..end)?;
        if !matches!(raw.first(), Some(b'-' | b'0'..=b'9')) {
            return None;
        }
        let text = std::str::from_utf8(raw).ok()?;
        Some(if text.len() > LITERAL_SHOWN {
            format!("{}…", &text[..LITERAL_SHOWN])
        } else {
            text.to_owned()
        })
    };
    match error {
        RequestError::InvalidParams {
            path,
            expected,
            found: Some(found),
        } => {
            let found = literal(&path).unwrap_or(found);
            RequestError::InvalidParams {
                path,
                expected,
                found: Some(found),
            }
        }
        RequestError::InvalidEnvelope {
            path,
            expected,
            found: Some(found),
        } => {
            let found = literal(&path).unwrap_or(found);
            RequestError::InvalidEnvelope {
                path,
                expected,
                found: Some(found),
            }
        }
        RequestError::NotAnObject { found } => RequestError::NotAnObject {
            found: literal("$").unwrap_or(found),
        },
        other => other,
    }
}

/// The top-level `id` of a request that strict parsing refused, when it can
/// still be read: the input must be JSON text whose top level is one object
/// (tolerating duplicate keys, lone surrogates, deep nesting, any size and
/// invalid UTF-8 inside strings), with exactly one member `id` (counting
/// escaped spellings), a string or a number. Otherwise `None`: an id that is
/// repeated or unreadable is not trusted. Linear in the input.
pub fn recover_id(bytes: &[u8]) -> Option<Value> {
    recover_id_with(bytes, &Limits::default())
}

/// [`recover_id`]'s id as written: its JSON text, exactly when
/// [`recover_id`] gives one.
pub fn recover_id_text(bytes: &[u8]) -> Option<String> {
    let mut scan = IdScan::new(Limits::default().max_bytes);
    scan.feed(bytes);
    scan.finish_text()
}

fn recover_id_with(bytes: &[u8], limits: &Limits) -> Option<Value> {
    recover::recover_id(bytes, limits.max_bytes)
}

/// Reads a request from `reader`, holding at most `limits.max_bytes + 1`
/// bytes. Within the limit: the bytes. Over it: a [`RequestError::TooLarge`]
/// refusal with the input's true size, the rest having been streamed
/// through [`IdScan`] so the refusal still carries a readable id.
pub fn read_bounded(
    reader: &mut impl std::io::Read,
    limits: &Limits,
) -> std::io::Result<Result<Vec<u8>, Rejection>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    reader
        .by_ref()
        .take(limits.max_bytes as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() <= limits.max_bytes {
        return Ok(Ok(bytes));
    }
    let mut scan = IdScan::new(limits.max_bytes);
    scan.feed(&bytes);
    let mut size = bytes.len();
    drop(bytes);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let read = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        scan.feed(&chunk[..read]);
        size = size.saturating_add(read);
    }
    Ok(Err(Rejection {
        id: scan.finish(),
        error: RequestError::TooLarge {
            size,
            limit: limits.max_bytes,
        },
    }))
}

/// Parses `bytes` as JSON under the default [`Limits`], refusing invalid
/// UTF-8, lone surrogates, duplicate keys (including keys equal after NFC),
/// excessive nesting and excessive size.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, RequestError> {
    parse_strict_with(bytes, &Limits::default())
}

/// [`parse_strict`] under explicit limits.
pub fn parse_strict_with(bytes: &[u8], limits: &Limits) -> Result<Value, RequestError> {
    let text = text_within(bytes, limits)?;
    let max_depth = limits.max_depth.min(SERDE_JSON_DEPTH);
    if let Some(value) = fast::parse(text, max_depth) {
        return Ok(value);
    }
    // Refused, or not read by the fast path: serde_json reads it again,
    // for the error it reports (or, should the two ever differ, the value).
    serde_path(text, limits)
}

/// [`parse_strict_with`] without its fast path: serde_json's reader with
/// the same checks, which gives every refusal its error. Public only with
/// the `bench` feature, for the tests and benches that hold the fast path
/// to it.
#[cfg(feature = "bench")]
pub fn parse_strict_serde(bytes: &[u8], limits: &Limits) -> Result<Value, RequestError> {
    serde_path(text_within(bytes, limits)?, limits)
}

/// What the fast path reads into its borrowed tree ([`crate::json::Node`],
/// which a decision from bytes is made from), as a [`Value`]; `None` where
/// it hands the text to the serde_json path. Public only with the `bench`
/// feature, for the tests that hold the tree to [`parse_strict_serde`].
#[cfg(feature = "bench")]
pub fn parse_strict_tree(bytes: &[u8], limits: &Limits) -> Option<Value> {
    read_tree(bytes, limits).map(|(_, tree)| tree.to_value())
}

/// `bytes` as text and read into the borrowed tree, if the fast path
/// accepts them under `limits` (as [`parse_strict_with`] would, with the
/// same value): what a decision from bytes is made from.
pub(crate) fn read_tree<'b>(bytes: &'b [u8], limits: &Limits) -> Option<(&'b str, Node<'b>)> {
    let text = text_within(bytes, limits).ok()?;
    let tree = fast::parse_node(text, limits.max_depth.min(SERDE_JSON_DEPTH))?;
    Some((text, tree))
}

/// `bytes` as text, if they are within the size limit and UTF-8.
fn text_within<'b>(bytes: &'b [u8], limits: &Limits) -> Result<&'b str, RequestError> {
    if bytes.len() > limits.max_bytes {
        return Err(RequestError::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    std::str::from_utf8(bytes).map_err(|e| RequestError::InvalidUtf8 {
        offset: e.valid_up_to(),
    })
}

fn serde_path(text: &str, limits: &Limits) -> Result<Value, RequestError> {
    let context = Context {
        max_depth: limits.max_depth.min(SERDE_JSON_DEPTH),
        failure: RefCell::new(None),
    };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = ValueSeed {
        context: &context,
        path: Path::Root,
        depth: 0,
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value));
    match parsed {
        Ok(value) => Ok(value),
        Err(error) => Err(context
            .failure
            .into_inner()
            .unwrap_or_else(|| from_serde(&error, limits.max_depth))),
    }
}

fn from_serde(error: &serde_json::Error, max_depth: usize) -> RequestError {
    let message = error.to_string();
    if message.starts_with("lone leading surrogate")
        || message.starts_with("unexpected end of hex escape")
    {
        RequestError::LoneSurrogate {
            line: error.line(),
            column: error.column(),
        }
    } else if message.starts_with("recursion limit exceeded") {
        RequestError::TooDeep {
            limit: max_depth.min(SERDE_JSON_DEPTH),
            path: format!("line {} column {}", error.line(), error.column()),
        }
    } else {
        RequestError::Syntax { message }
    }
}

/// Validates a parsed request under the default revision
/// ([`ProtocolRevision::default`]): [`validate_sampling_for`].
pub fn validate_sampling(value: Value) -> Result<SamplingRequest, RequestError> {
    validate_sampling_for(value, ProtocolRevision::default())
}

/// Validates a parsed request: a whole JSON-RPC `sampling/createMessage`
/// request, or a bare params object (one with none of `jsonrpc`, `method`,
/// `params`, `id`), its params as MCP `revision` defines them (each
/// member of the schema's type and enumeration, `docs/spec/evaluation.md`,
/// "Step 1: Validation").
///
/// An integral `maxTokens` written `9e3`, `9000.0` or `1e0` is rewritten as
/// the integer it is (`9000`, `1`), so params handed on for forwarding
/// carry an integer that an integer-typed client accepts.
pub fn validate_sampling_for(
    value: Value,
    revision: ProtocolRevision,
) -> Result<SamplingRequest, RequestError> {
    let Valid { id, rewritten, .. } = valid(&value, revision)?;
    let id = id.cloned();
    let params = params_of(value, id.is_some(), rewritten);
    Ok(SamplingRequest {
        id,
        params: Params::Map(params),
        rewritten,
    })
}

/// What [`valid`] found in a valid request.
pub(crate) struct Valid<'v, J: Json> {
    /// The envelope's id; `None` for bare params.
    pub(crate) id: Option<&'v J>,
    /// The params object.
    pub(crate) params: &'v J::Object,
    /// `maxTokens` is integral but not written as an integer.
    pub(crate) rewritten: bool,
}

/// The checks of [`validate_sampling_for`] on a request in either tree
/// (`docs/spec/evaluation.md`, "Step 1: Validation"): a decision from
/// bytes makes them on the borrowed tree.
pub(crate) fn valid<J: Json>(
    value: &J,
    revision: ProtocolRevision,
) -> Result<Valid<'_, J>, RequestError> {
    let Some(object) = value.as_object() else {
        return Err(RequestError::NotAnObject {
            found: describe(value),
        });
    };
    let is_envelope = ["jsonrpc", "method", "params", "id"]
        .iter()
        .any(|member| object.get(member).is_some());
    if !is_envelope {
        let rewritten = check_params(object, revision, "$")?;
        return Ok(Valid {
            id: None,
            params: object,
            rewritten,
        });
    }

    let jsonrpc = object.get("jsonrpc");
    if jsonrpc.and_then(J::as_str) != Some("2.0") {
        return Err(RequestError::InvalidEnvelope {
            path: "$.jsonrpc".into(),
            expected: "\"2.0\"",
            found: describe_option(jsonrpc),
        });
    }
    match object.get("method") {
        Some(method) if method.as_str() == Some(jsonrpc::SAMPLING_METHOD) => {}
        Some(method) if method.as_str().is_some() => {
            return Err(RequestError::WrongMethod {
                found: describe(method),
            });
        }
        other => {
            return Err(RequestError::InvalidEnvelope {
                path: "$.method".into(),
                expected: "a string",
                found: describe_option(other),
            });
        }
    }
    let id = match object.get("id") {
        Some(id) if matches!(id.kind(), Kind::String(_) | Kind::Number(_)) => id,
        other => {
            return Err(RequestError::InvalidEnvelope {
                path: "$.id".into(),
                expected: "a string or a number (a sampling request needs a response)",
                found: describe_option(other),
            });
        }
    };
    let given = object.get("params");
    let Some(params) = given.and_then(J::as_object) else {
        return Err(RequestError::InvalidParams {
            path: "$.params".into(),
            expected: "an object",
            found: describe_option(given),
        });
    };
    let rewritten = check_params(params, revision, "$.params")?;
    Ok(Valid {
        id: Some(id),
        params,
        rewritten,
    })
}

/// Validates the params of a `sampling/createMessage` an SDK already read
/// (rmcp's typed params through `serde_json::to_value`, say) as MCP
/// `revision` defines them: what [`validate_sampling_for`] checks of a
/// request's params, with no envelope to build or to sniff for (params
/// that happen to hold a member `id` or `method` are still params). The
/// request has no id. Nothing is serialised: the identity is computed over
/// these params as over the same params read from bytes
/// (`docs/spec/identity.md`), so both paths decide alike.
pub fn validate_params_for(
    params: Map<String, Value>,
    revision: ProtocolRevision,
) -> Result<SamplingRequest, RequestError> {
    let rewritten = check_params(&params, revision, "$.params")?;
    Ok(SamplingRequest {
        id: None,
        params: Params::Map(params_of(Value::Object(params), false, rewritten)),
        rewritten,
    })
}

/// The id of a JSON-RPC request, if it has a valid one (a string or a
/// number). Read it before [`validate_sampling`] so that an error frame for
/// an invalid-params request can still echo the id; JSON-RPC wants `null`
/// only when the id itself could not be determined.
pub fn envelope_id(value: &Value) -> Option<&Value> {
    match value.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        _ => None,
    }
}

/// Checks params already read (by an SDK, say) as MCP `revision` defines
/// them: what [`validate_sampling_for`] checks of a request's params. The
/// engine checks a [`SamplingRequest`] handed to it this way against its
/// table's revision, whichever revision it was validated under.
pub fn check_params_for(
    params: &Map<String, Value>,
    revision: ProtocolRevision,
) -> Result<(), RequestError> {
    schema::check_params(params, revision, "$.params")
}

/// Checks `params`; `Ok(true)` when `maxTokens` was respelt as an integer.
///
/// An unknown `includeContext` is refused, not read as some scope: a client
/// would refuse it, and a refusal re-sent under another unknown spelling
/// would get a new identity for the same forwarded bytes. A member of
/// another type is refused, never read past: a `hints` that is a string is
/// no list the `models` trim could narrow, and the client would refuse what
/// the policy let through.
fn check_params<O: Object>(
    params: &O,
    revision: ProtocolRevision,
    at: &str,
) -> Result<bool, RequestError> {
    schema::check_params(params, revision, at)?;
    // The schema checked it; refused again rather than assumed.
    let given = params.get("maxTokens");
    if given.and_then(as_non_negative_integer).is_none() {
        return Err(RequestError::InvalidParams {
            path: format!("{at}.maxTokens"),
            expected: "a positive integer",
            found: describe_option(given),
        });
    }
    Ok(!given
        .and_then(Json::as_number)
        .is_some_and(serde_json::Number::is_u64))
}

/// `maxTokens` held as the integer it is (see [`check_params`]).
fn respell_max_tokens(params: &mut Map<String, Value>) {
    if let Some(max_tokens) = params.get("maxTokens").and_then(as_non_negative_integer) {
        params.insert("maxTokens".to_owned(), Value::from(max_tokens));
    }
}

/// A non-negative integer, written as `5`, `5.0` or `5e0` (JSON does not tell
/// them apart, and neither does the canonical form).
pub(crate) fn as_non_negative_integer<J: Json>(value: &J) -> Option<u64> {
    let number = value.as_number()?;
    if let Some(n) = number.as_u64() {
        return Some(n);
    }
    let f = number.as_f64()?;
    // Only integers a double represents exactly: 2^53 and below.
    (f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0).then_some(f as u64)
}

/// A short description of a JSON value for messages. Numbers are written
/// exactly: an integral double (such as 2^64, which serde_json reads as a
/// double) in full decimal, never in exponent form.
fn describe<J: Json>(value: &J) -> String {
    match value.kind() {
        Kind::Array(_) => "an array".into(),
        Kind::Object(_) => "an object".into(),
        Kind::String(s) => {
            let mut shown: String = s.chars().take(40).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            quote(&shown)
        }
        Kind::Number(n) => match n.as_f64() {
            Some(f) if !n.is_u64() && !n.is_i64() && f.is_finite() && f.fract() == 0.0 => {
                // `{:.0}` prints a double's exact value; `-0` keeps its sign.
                let digits = format!("{f:.0}");
                if f == 0.0 && f.is_sign_negative() && !digits.starts_with('-') {
                    format!("-{digits}")
                } else {
                    digits
                }
            }
            _ => n.to_string(),
        },
        Kind::Bool(b) => b.to_string(),
        Kind::Null => "null".into(),
    }
}

fn describe_option<J: Json>(value: Option<&J>) -> Option<String> {
    value.map(describe)
}

/// JSON string text, with non-ASCII written as `\u` escapes so that keys
/// that differ only in normalisation look different in a message.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// A JSON path, built on the stack as the parser descends and rendered only
/// for an error.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => f.write_str("$"),
            Path::Key(parent, key) => {
                let plain = !key.is_empty()
                    && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !key.as_bytes()[0].is_ascii_digit();
                if plain {
                    write!(f, "{parent}.{key}")
                } else {
                    write!(f, "{parent}[{}]", quote(key))
                }
            }
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

/// Shared by every seed of one parse: the limit, and the structured error
/// that serde's error type cannot carry.
struct Context {
    max_depth: usize,
    failure: RefCell<Option<RequestError>>,
}

impl Context {
    fn fail<E: de::Error>(&self, error: RequestError) -> E {
        let message = error.to_string();
        *self.failure.borrow_mut() = Some(error);
        E::custom(message)
    }
}

/// Deserialises one JSON value into a [`Value`], enforcing depth and key
/// uniqueness on the way down.
struct ValueSeed<'c, 'p> {
    context: &'c Context,
    path: Path<'p>,
    depth: usize,
}

impl ValueSeed<'_, '_> {
    fn enter<E: de::Error>(&self) -> Result<usize, E> {
        let depth = self.depth + 1;
        if depth > self.context.max_depth {
            return Err(self.context.fail(RequestError::TooDeep {
                limit: self.context.max_depth,
                path: self.path.to_string(),
            }));
        }
        Ok(depth)
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let mut items = Vec::new();
        loop {
            let seed = ValueSeed {
                context: self.context,
                path: Path::Index(&self.path, items.len()),
                depth,
            };
            match seq.next_element_seed(seed)? {
                Some(item) => items.push(item),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let mut map = Map::new();
        // NFC forms of the keys that were not NFC as written: hashed, so
        // that many such keys cost linear time, not quadratic (SipHash with
        // a random key, so colliding keys cannot be chosen).
        let mut renormalised: HashSet<String> = HashSet::new();
        while let Some(key) = access.next_key::<String>()? {
            let normal = nfc(&key);
            // A key already present as written is NFC (as `normal` is), so
            // it clashes; so does one whose NFC form we recorded (the key it
            // repeats is looked for only then, once, for the message).
            let earlier = if map.contains_key(normal.as_ref()) {
                Some(normal.to_string())
            } else if renormalised.contains(normal.as_ref()) {
                map.keys().find(|k| nfc(k) == normal).cloned()
            } else {
                None
            };
            if let Some(earlier) = earlier {
                return Err(self.context.fail(RequestError::DuplicateKey {
                    key,
                    earlier,
                    path: self.path.to_string(),
                }));
            }
            if let Cow::Owned(normal) = normal {
                renormalised.insert(normal);
            }
            let value = access.next_value_seed(ValueSeed {
                context: self.context,
                path: Path::Key(&self.path, &key),
                depth,
            })?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}
