//! The test-file format of `mcpc test`: TOML, read with byte spans so every
//! complaint about a file and every failed expectation names `file:line:col`.
//!
//! ```toml
//! now = 2026-03-10T12:00:00Z          # the clock of every case (optional)
//! server = "git"                      # the server of every case (optional)
//! params = { maxTokens = 256 }        # merged under every `prompt`/`request` table
//! consent = "approve"                 # the answer to consent prompts (optional)
//!
//! [[case]]
//! name = "git: maxTokens above 512 is clamped"
//! prompt = "Write a commit message for this diff"
//! request = { maxTokens = 4000 }
//! consent = "approve"
//! expect = { outcome = "trim", reason = "policy.max_tokens", meta.maxTokens.applied = 512 }
//!
//! [[case.before]]                     # earlier requests in the same fresh store
//! now = "-30s"
//! repeat = 3
//! ```
//!
//! Everything here is checked before any case runs: an unknown key, a value
//! of the wrong type, a time without an offset, two request forms in one
//! step are all reported with their span and stop the run (exit 2).

use std::path::{Path, PathBuf};

use mcpolicy_compiler::line_index::LineIndex;
use mcpolicy_runtime::clock::parse_rfc3339;
use mcpolicy_runtime::store::Millis;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toml::Spanned;

/// The clock when neither the case nor the file says: fixed, so a test file
/// gives the same answers on every day it is run.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// The largest request file read, and the largest `prompt` × `prompt_repeat`
/// (the runtime's own request limit is lower).
const MAX_REQUEST_FILE_BYTES: u64 = 16 << 20;

/// The largest `repeat`.
const MAX_REPEAT: u64 = 100_000;

/// The most `[[case.before]]` entries of one case.
pub const MAX_BEFORE_ENTRIES: usize = 1_000;

/// The most requests one test file sends, every case's steps and every
/// repetition counted.
pub const MAX_STEPS: u64 = 1_000_000;

/// The most request bytes one test file has the engine read, summed over
/// every step it sends (`prompt` × `prompt_repeat` × `repeat` and so on):
/// each bound alone is not enough, their product is what costs.
pub const MAX_TOTAL_REQUEST_BYTES: u64 = 256 << 20;

/// What a step's outcome may be.
pub const OUTCOMES: &[&str] = &["allow", "trim", "deny", "consent", "invalid", "error"];

/// A problem in a test file, at a position.
#[derive(Debug, Clone)]
pub struct SpecError {
    /// `file:line:col: message`, ready to print.
    pub text: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A place in a test file, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The test file as given on the command line.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (Unicode scalar values).
    pub column: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A parsed, validated test file.
#[derive(Debug)]
pub struct TestFile {
    /// The path as given.
    pub path: String,
    /// Its cases in file order.
    pub cases: Vec<Case>,
}

/// One test case: earlier steps, then the step whose outcome is the test.
#[derive(Debug)]
pub struct Case {
    /// The case's name.
    pub name: String,
    /// Where `[[case]]` starts.
    pub at: Location,
    /// Steps run before, in order (repeats already expanded).
    pub before: Vec<Step>,
    /// The request under test.
    pub step: Step,
}

/// One request sent to the engine, with what to do around it.
#[derive(Debug, Clone)]
pub struct Step {
    /// `case` or `before[2]` or `before[2] #3` (the repetition).
    pub label: String,
    /// The server the request comes from.
    pub server: String,
    /// The clock at the request.
    pub now: Millis,
    /// The request the server sent, shared by every repetition of a
    /// step (never copied per repetition) and written out when run.
    request: std::sync::Arc<RequestForm>,
    /// Which repetition this is (fills `{i}`).
    repetition: u64,
    /// The answer to a consent prompt; `None` leaves it pending.
    pub consent: Option<bool>,
    /// The client declared `sampling.context`.
    pub sampling_context: bool,
    /// Tokens to settle a granted request with.
    pub usage: Option<u64>,
    /// Report a deadline miss for a granted request.
    pub deadline_missed: bool,
    /// What must hold afterwards (empty: nothing is checked).
    pub expect: Vec<Expectation>,
}

impl Step {
    /// The bytes the server sends: written when the step runs, so a file's
    /// memory holds one request at a time, not one per repetition.
    pub fn bytes(&self) -> Vec<u8> {
        self.request.bytes(self.repetition)
    }
}

/// One expected field of a step's result.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// The field under `expect`, e.g. `outcome`, `data`, `meta`.
    pub field: String,
    /// The expected value (objects match as subsets).
    pub value: Value,
    /// Where it was written.
    pub at: Location,
}

// ------------------------------------------------------------ raw TOML

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    now: Option<Spanned<toml::Value>>,
    server: Option<Spanned<String>>,
    params: Option<Spanned<toml::Value>>,
    consent: Option<Spanned<String>>,
    sampling_context: Option<bool>,
    #[serde(default)]
    case: Vec<Spanned<RawCase>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: Spanned<String>,
    server: Option<Spanned<String>>,
    now: Option<Spanned<toml::Value>>,
    prompt: Option<Spanned<String>>,
    prompt_repeat: Option<Spanned<i64>>,
    request: Option<Spanned<toml::Value>>,
    request_json: Option<Spanned<String>>,
    request_file: Option<Spanned<String>>,
    consent: Option<Spanned<String>>,
    sampling_context: Option<bool>,
    usage: Option<Spanned<i64>>,
    deadline_missed: Option<bool>,
    #[serde(default)]
    before: Vec<Spanned<RawBefore>>,
    expect: Option<Spanned<RawExpect>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBefore {
    server: Option<Spanned<String>>,
    now: Option<Spanned<toml::Value>>,
    prompt: Option<Spanned<String>>,
    prompt_repeat: Option<Spanned<i64>>,
    request: Option<Spanned<toml::Value>>,
    request_json: Option<Spanned<String>>,
    request_file: Option<Spanned<String>>,
    repeat: Option<Spanned<i64>>,
    every: Option<Spanned<String>>,
    consent: Option<Spanned<String>>,
    sampling_context: Option<bool>,
    usage: Option<Spanned<i64>>,
    deadline_missed: Option<bool>,
    expect: Option<Spanned<RawExpect>>,
}

/// The request fields of a case or a before step.
struct RawRequest<'a> {
    prompt: Option<&'a Spanned<String>>,
    prompt_repeat: Option<&'a Spanned<i64>>,
    request: Option<&'a Spanned<toml::Value>>,
    request_json: Option<&'a Spanned<String>>,
    request_file: Option<&'a Spanned<String>>,
}

impl RawCase {
    fn request(&self) -> RawRequest<'_> {
        RawRequest {
            prompt: self.prompt.as_ref(),
            prompt_repeat: self.prompt_repeat.as_ref(),
            request: self.request.as_ref(),
            request_json: self.request_json.as_ref(),
            request_file: self.request_file.as_ref(),
        }
    }
}

impl RawBefore {
    fn request(&self) -> RawRequest<'_> {
        RawRequest {
            prompt: self.prompt.as_ref(),
            prompt_repeat: self.prompt_repeat.as_ref(),
            request: self.request.as_ref(),
            request_json: self.request_json.as_ref(),
            request_file: self.request_file.as_ref(),
        }
    }
}

impl RawRequest<'_> {
    fn is_empty(&self) -> bool {
        self.prompt.is_none()
            && self.request.is_none()
            && self.request_json.is_none()
            && self.request_file.is_none()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    outcome: Option<Spanned<toml::Value>>,
    reason: Option<Spanned<toml::Value>>,
    reasons: Option<Spanned<toml::Value>>,
    code: Option<Spanned<toml::Value>>,
    message: Option<Spanned<toml::Value>>,
    retryable: Option<Spanned<toml::Value>>,
    replayed: Option<Spanned<toml::Value>>,
    represented: Option<Spanned<toml::Value>>,
    consent_asked: Option<Spanned<toml::Value>>,
    deadline_ms: Option<Spanned<toml::Value>>,
    data: Option<Spanned<toml::Value>>,
    meta: Option<Spanned<toml::Value>>,
    params: Option<Spanned<toml::Value>>,
    frame: Option<Spanned<toml::Value>>,
}

// ------------------------------------------------------------ validation

/// Reads and validates one test file.
pub fn load(path: &str) -> Result<TestFile, SpecError> {
    let cannot = |e: &dyn std::fmt::Display| SpecError {
        text: format!("{path}: cannot read: {e}"),
    };
    let bytes = read_limited(Path::new(path)).map_err(|e| cannot(&e))?;
    let text = String::from_utf8(bytes).map_err(|_| cannot(&"not UTF-8 text"))?;
    parse(path, &text)
}

/// Validates the text of a test file read from `path`.
pub fn parse(path: &str, text: &str) -> Result<TestFile, SpecError> {
    let ctx = Ctx {
        path,
        text,
        lines: LineIndex::new(text),
        dir: Path::new(path)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
        sent: std::cell::Cell::new((0, 0)),
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let message = with_did_you_mean(e.message().trim_end());
        match e.span() {
            Some(span) => ctx.error(span, message),
            None => SpecError {
                text: format!("{path}: {message}"),
            },
        }
    })?;
    let file_now = match &raw.now {
        Some(now) => ctx.time(now, None)?,
        None => parse_rfc3339(DEFAULT_NOW).unwrap_or_default(),
    };
    let file_params = match &raw.params {
        Some(params) => match table_to_json(&ctx, params.get_ref(), params.span())? {
            Value::Object(map) => map,
            _ => {
                return Err(ctx.error(
                    params.span(),
                    "`params` is a table of `sampling/createMessage` params, e.g. { maxTokens = 256 }",
                ));
            }
        },
        None => Map::new(),
    };
    let defaults = FileDefaults {
        now: file_now,
        server: raw.server.as_ref().map(|s| s.get_ref().clone()),
        params: file_params,
        consent: ctx.consent(raw.consent.as_ref())?,
        sampling_context: raw.sampling_context.unwrap_or(false),
    };
    if raw.case.is_empty() {
        return Err(SpecError {
            text: format!("{path}: no `[[case]]` in the file; a test file holds at least one case"),
        });
    }
    let mut cases = Vec::with_capacity(raw.case.len());
    let mut names: Vec<(String, usize)> = Vec::new();
    for raw_case in &raw.case {
        let case = ctx.case(raw_case, &defaults)?;
        if let Some((_, line)) = names.iter().find(|(n, _)| *n == case.name) {
            return Err(ctx.error(
                raw_case.get_ref().name.span(),
                format!(
                    "a case named `{}` already exists (line {line}); names identify cases in reports",
                    case.name
                ),
            ));
        }
        names.push((case.name.clone(), case.at.line));
        cases.push(case);
    }
    Ok(TestFile {
        path: path.to_owned(),
        cases,
    })
}

struct FileDefaults {
    now: Millis,
    server: Option<String>,
    params: Map<String, Value>,
    consent: Option<bool>,
    sampling_context: bool,
}

struct Ctx<'a> {
    path: &'a str,
    text: &'a str,
    lines: LineIndex,
    dir: PathBuf,
    /// What the file's steps so far send: requests and their bytes.
    sent: std::cell::Cell<(u64, u64)>,
}

/// A request as written, before `{i}` is filled.
#[derive(Debug, Clone)]
enum RequestForm {
    Built {
        /// The prompt and how many times its text is repeated.
        prompt: Option<(String, usize)>,
        envelope: bool,
        value: Map<String, Value>,
    },
    Bytes(Vec<u8>),
}

impl RequestForm {
    fn bytes(&self, repetition: u64) -> Vec<u8> {
        match self {
            RequestForm::Bytes(bytes) => bytes.clone(),
            RequestForm::Built {
                prompt,
                envelope,
                value,
            } => {
                let mut value = value.clone();
                if let Some((prompt, times)) = prompt {
                    let text = prompt
                        .replace("{i}", &repetition.to_string())
                        .repeat(*times);
                    let message =
                        json!({"role": "user", "content": {"type": "text", "text": text}});
                    value.insert("messages".to_owned(), Value::Array(vec![message]));
                }
                let value = if *envelope {
                    Value::Object(value)
                } else {
                    json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": value})
                };
                serde_json::to_vec(&value).unwrap_or_default()
            }
        }
    }
}

impl Ctx<'_> {
    fn location(&self, offset: usize) -> Location {
        let position = self.lines.position(self.text, offset);
        Location {
            file: self.path.to_owned(),
            line: position.line,
            column: position.column,
        }
    }

    /// Counts `times` requests of `form` (repetitions from 0) against the
    /// file's bounds, before any is built: the largest repetition's size
    /// times `times` (`{i}` only lengthens a request as `i` grows).
    fn send(
        &self,
        form: &RequestForm,
        times: u64,
        span: std::ops::Range<usize>,
    ) -> Result<(), SpecError> {
        let (steps, bytes) = self.sent.get();
        let steps = steps.saturating_add(times);
        if steps > MAX_STEPS {
            return Err(self.error(
                span,
                format!(
                    "the file sends more than {MAX_STEPS} requests in all (cases, `before` entries and their `repeat`s); split it"
                ),
            ));
        }
        let size = form.bytes(times.saturating_sub(1)).len() as u64;
        let bytes = bytes.saturating_add(size.saturating_mul(times));
        if bytes > MAX_TOTAL_REQUEST_BYTES {
            return Err(self.error(
                span,
                format!(
                    "the file's requests total more than {} MiB ({times} × {size} bytes here); lower `repeat` or `prompt_repeat`, or split the file",
                    MAX_TOTAL_REQUEST_BYTES >> 20
                ),
            ));
        }
        self.sent.set((steps, bytes));
        Ok(())
    }

    fn error(&self, span: std::ops::Range<usize>, message: impl std::fmt::Display) -> SpecError {
        SpecError {
            text: format!("{}: {message}", self.location(span.start)),
        }
    }

    /// `now`: an RFC 3339 time (TOML datetime or string), or a string offset
    /// like `-30s` / `+1h30m` from `base`.
    fn time(
        &self,
        value: &Spanned<toml::Value>,
        base: Option<Millis>,
    ) -> Result<Millis, SpecError> {
        let text = match value.get_ref() {
            toml::Value::String(s) => s.clone(),
            toml::Value::Datetime(dt) => dt.to_string(),
            other => {
                return Err(self.error(
                    value.span(),
                    format!(
                        "`now` must be an RFC 3339 time like 2026-03-10T12:00:00Z or an offset like \"-30s\", not {}",
                        other.type_str()
                    ),
                ));
            }
        };
        if let Some(sign) = text.chars().next().filter(|c| *c == '+' || *c == '-') {
            let Some(base) = base else {
                return Err(self.error(
                    value.span(),
                    format!("`now = \"{text}\"` is an offset, but there is no time to count it from here; write an RFC 3339 time"),
                ));
            };
            let ms = parse_duration(&text[1..]).ok_or_else(|| {
                self.error(
                    value.span(),
                    format!("`{text}` is not an offset like \"-30s\", \"+1h30m\" or \"-1d\" (units ms, s, m, h, d)"),
                )
            })?;
            return Ok(if sign == '+' {
                base.saturating_add(ms)
            } else {
                base.saturating_sub(ms)
            });
        }
        parse_rfc3339(&text).ok_or_else(|| {
            self.error(
                value.span(),
                format!(
                    "`{text}` is not an RFC 3339 time with an offset, like 2026-03-10T12:00:00Z"
                ),
            )
        })
    }

    fn case(&self, raw: &Spanned<RawCase>, defaults: &FileDefaults) -> Result<Case, SpecError> {
        let at = self.location(raw.span().start);
        let case = raw.get_ref();
        let name = case.name.get_ref().trim().to_owned();
        if name.is_empty() {
            return Err(self.error(case.name.span(), "a case needs a non-empty `name`"));
        }
        let server = match (&case.server, &defaults.server) {
            (Some(s), _) => s.get_ref().clone(),
            (None, Some(s)) => s.clone(),
            (None, None) => {
                return Err(self.error(
                    raw.span(),
                    format!(
                        "case `{name}` names no `server` (and the file sets no top-level `server`)"
                    ),
                ));
            }
        };
        let now = match &case.now {
            Some(now) => self.time(now, Some(defaults.now))?,
            None => defaults.now,
        };
        if case.request().is_empty() {
            return Err(self.error(
                raw.span(),
                format!("case `{name}` has no request: give `prompt`, `request`, `request_json` or `request_file`"),
            ));
        }
        let form = self.request(&case.request(), &defaults.params)?;
        let consent = match &case.consent {
            Some(_) => self.consent(case.consent.as_ref())?,
            None => defaults.consent,
        };
        let usage = self.count(case.usage.as_ref(), "usage")?;
        let Some(expect) = &case.expect else {
            return Err(self.error(
                raw.span(),
                format!("case `{name}` has no `expect`; say at least `expect.outcome`"),
            ));
        };
        let expect_list = self.expect(expect)?;
        if !expect_list.iter().any(|e| e.field == "outcome") {
            return Err(self.error(
                expect.span(),
                format!(
                    "case `{name}`: `expect` must name the `outcome` (one of {})",
                    OUTCOMES.join(", ")
                ),
            ));
        }
        let sampling_context = case.sampling_context.unwrap_or(defaults.sampling_context);
        let deadline_missed = case.deadline_missed.unwrap_or(false);

        if let Some(extra) = case.before.get(MAX_BEFORE_ENTRIES) {
            return Err(self.error(
                extra.span(),
                format!(
                    "case `{name}` has more than {MAX_BEFORE_ENTRIES} `[[case.before]]` entries; use `repeat` on one"
                ),
            ));
        }
        let form = std::sync::Arc::new(form);
        let mut before = Vec::new();
        for (index, raw_before) in case.before.iter().enumerate() {
            let b = raw_before.get_ref();
            let label = format!("before[{}]", index + 1);
            let b_form = if b.request().is_empty() {
                std::sync::Arc::clone(&form)
            } else {
                std::sync::Arc::new(self.request(&b.request(), &defaults.params)?)
            };
            let repeat = match &b.repeat {
                Some(r) => {
                    let n = *r.get_ref();
                    if n < 1 || n as u64 > MAX_REPEAT {
                        return Err(self.error(
                            r.span(),
                            format!("`repeat` must be between 1 and {MAX_REPEAT}, not {n}"),
                        ));
                    }
                    n as u64
                }
                None => 1,
            };
            let b_now = match &b.now {
                Some(t) => self.time(t, Some(now))?,
                None => now,
            };
            let every = match &b.every {
                Some(e) => parse_duration(e.get_ref()).ok_or_else(|| {
                    self.error(
                        e.span(),
                        format!("`every = \"{}\"` is not a duration like \"7s\" or \"1h30m\" (units ms, s, m, h, d)", e.get_ref()),
                    )
                })?,
                None => 0,
            };
            let b_consent = match &b.consent {
                Some(_) => self.consent(b.consent.as_ref())?,
                None => consent,
            };
            let b_expect = match &b.expect {
                Some(e) => self.expect(e)?,
                None => Vec::new(),
            };
            let usage = self.count(b.usage.as_ref(), "usage")?;
            self.send(&b_form, repeat, raw_before.span())?;
            for repetition in 0..repeat {
                before.push(Step {
                    label: if repeat > 1 {
                        format!("{label} #{}", repetition + 1)
                    } else {
                        label.clone()
                    },
                    server: b
                        .server
                        .as_ref()
                        .map_or_else(|| server.clone(), |s| s.get_ref().clone()),
                    now: b_now.saturating_add(every.saturating_mul(repetition as i64)),
                    request: std::sync::Arc::clone(&b_form),
                    repetition,
                    consent: b_consent,
                    sampling_context: b.sampling_context.unwrap_or(sampling_context),
                    usage,
                    deadline_missed: b.deadline_missed.unwrap_or(false),
                    expect: b_expect.clone(),
                });
            }
        }
        self.send(&form, 1, raw.span())?;
        Ok(Case {
            name,
            at,
            before,
            step: Step {
                label: "case".to_owned(),
                server,
                now,
                request: form,
                repetition: 0,
                consent,
                sampling_context,
                usage,
                deadline_missed,
                expect: expect_list,
            },
        })
    }

    fn count(&self, value: Option<&Spanned<i64>>, what: &str) -> Result<Option<u64>, SpecError> {
        match value {
            None => Ok(None),
            Some(v) if *v.get_ref() >= 0 => Ok(Some(*v.get_ref() as u64)),
            Some(v) => Err(self.error(v.span(), format!("`{what}` must not be negative"))),
        }
    }

    fn consent(&self, value: Option<&Spanned<String>>) -> Result<Option<bool>, SpecError> {
        match value.map(|v| (v.get_ref().as_str(), v.span())) {
            None => Ok(None),
            Some(("approve", _)) => Ok(Some(true)),
            Some(("deny", _)) => Ok(Some(false)),
            Some((other, span)) => Err(self.error(
                span,
                format!("`consent` is \"approve\" or \"deny\" (leave it out to keep the prompt pending), not \"{other}\""),
            )),
        }
    }

    fn request(
        &self,
        raw: &RawRequest<'_>,
        base: &Map<String, Value>,
    ) -> Result<RequestForm, SpecError> {
        let given: Vec<(&str, std::ops::Range<usize>)> = [
            raw.request_json.map(|v| ("request_json", v.span())),
            raw.request_file.map(|v| ("request_file", v.span())),
            // `prompt` and a `request` table are one form together.
            raw.prompt
                .map(|v| ("prompt", v.span()))
                .or_else(|| raw.request.map(|v| ("request", v.span()))),
        ]
        .into_iter()
        .flatten()
        .collect();
        if given.len() > 1 {
            let names: Vec<&str> = given.iter().map(|(n, _)| *n).collect();
            return Err(self.error(
                given[1].1.clone(),
                format!(
                    "give one request form, not {}: `prompt` and a `request` table combine, `request_json` and `request_file` stand alone",
                    names.join(" and ")
                ),
            ));
        }
        if let Some(json) = raw.request_json {
            return Ok(RequestForm::Bytes(json.get_ref().as_bytes().to_vec()));
        }
        if let Some(file) = raw.request_file {
            let path = self.dir.join(file.get_ref());
            let bytes = read_limited(&path).map_err(|e| {
                self.error(
                    file.span(),
                    format!("cannot read request file {}: {e}", path.display()),
                )
            })?;
            return Ok(RequestForm::Bytes(bytes));
        }
        let table = match raw.request {
            Some(value) => match table_to_json(self, value.get_ref(), value.span())? {
                Value::Object(map) => map,
                _ => {
                    return Err(self.error(
                        value.span(),
                        "`request` is a table: the params of `sampling/createMessage`, or a whole JSON-RPC request",
                    ));
                }
            },
            None => Map::new(),
        };
        let times = match raw.prompt_repeat {
            None => 1,
            Some(r) if raw.prompt.is_none() => {
                return Err(self.error(
                    r.span(),
                    "`prompt_repeat` repeats a `prompt`, and there is none",
                ));
            }
            Some(r) => match usize::try_from(*r.get_ref()) {
                Ok(n)
                    if n >= 1
                        && raw
                            .prompt
                            .map_or(0, |p| p.get_ref().len())
                            .saturating_mul(n)
                            <= MAX_REQUEST_FILE_BYTES as usize =>
                {
                    n
                }
                _ => {
                    return Err(self.error(
                        r.span(),
                        format!(
                            "`prompt_repeat` must be at least 1 and keep the prompt within {} MiB",
                            MAX_REQUEST_FILE_BYTES >> 20
                        ),
                    ));
                }
            },
        };
        let envelope = ["jsonrpc", "method", "id", "params"]
            .iter()
            .any(|k| table.contains_key(*k));
        if envelope {
            if let Some(prompt) = raw.prompt {
                return Err(self.error(
                    prompt.span(),
                    "`prompt` fills in params, but this `request` is a whole JSON-RPC request; put the messages in its `params`",
                ));
            }
            return Ok(RequestForm::Built {
                prompt: None,
                envelope: true,
                value: table,
            });
        }
        let mut value = base.clone();
        if let (Some(prompt), true) = (raw.prompt, table.contains_key("messages")) {
            return Err(self.error(
                prompt.span(),
                "`prompt` and `request.messages` both give the messages; keep one",
            ));
        }
        value.extend(table);
        Ok(RequestForm::Built {
            prompt: raw.prompt.map(|p| (p.get_ref().clone(), times)),
            envelope: false,
            value,
        })
    }

    fn expect(&self, raw: &Spanned<RawExpect>) -> Result<Vec<Expectation>, SpecError> {
        let e = raw.get_ref();
        let fields: [(&str, &Option<Spanned<toml::Value>>, Kind); 14] = [
            ("outcome", &e.outcome, Kind::Outcome),
            ("reason", &e.reason, Kind::String),
            ("reasons", &e.reasons, Kind::Strings),
            ("code", &e.code, Kind::Integer),
            ("message", &e.message, Kind::String),
            ("retryable", &e.retryable, Kind::Bool),
            ("replayed", &e.replayed, Kind::Bool),
            ("represented", &e.represented, Kind::Integer),
            ("consent_asked", &e.consent_asked, Kind::Bool),
            ("deadline_ms", &e.deadline_ms, Kind::Integer),
            ("data", &e.data, Kind::Table),
            ("meta", &e.meta, Kind::Table),
            ("params", &e.params, Kind::Table),
            ("frame", &e.frame, Kind::Table),
        ];
        let mut list = Vec::new();
        for (field, value, kind) in fields {
            let Some(value) = value else { continue };
            let ok = match (kind, value.get_ref()) {
                (Kind::Outcome, toml::Value::String(s)) => OUTCOMES.contains(&s.as_str()),
                (Kind::String, toml::Value::String(_)) => true,
                (Kind::Strings, toml::Value::Array(items)) => {
                    items.iter().all(|i| matches!(i, toml::Value::String(_)))
                }
                (Kind::Integer, toml::Value::Integer(_)) => true,
                (Kind::Bool, toml::Value::Boolean(_)) => true,
                (Kind::Table, toml::Value::Table(_)) => true,
                _ => false,
            };
            if !ok {
                return Err(self.error(
                    value.span(),
                    format!(
                        "`expect.{field}` must be {}, not {}",
                        kind.describe(),
                        table_to_json(self, value.get_ref(), value.span())?
                    ),
                ));
            }
            list.push(Expectation {
                field: field.to_owned(),
                value: table_to_json(self, value.get_ref(), value.span())?,
                at: self.location(value.span().start),
            });
        }
        if list.is_empty() {
            return Err(self.error(raw.span(), "`expect` names no field to check"));
        }
        Ok(list)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Outcome,
    String,
    Strings,
    Integer,
    Bool,
    Table,
}

impl Kind {
    fn describe(self) -> String {
        match self {
            Kind::Outcome => format!("one of {}", OUTCOMES.join(", ")),
            Kind::String => "a string".to_owned(),
            Kind::Strings => "an array of strings".to_owned(),
            Kind::Integer => "an integer".to_owned(),
            Kind::Bool => "true or false".to_owned(),
            Kind::Table => "a table (its keys are matched as a subset)".to_owned(),
        }
    }
}

/// serde's "unknown field `expct`, expected one of `name`, …" with the
/// nearest field named first: "…; did you mean `expect`?".
fn with_did_you_mean(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((field, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match mcpolicy_compiler::diagnostic::did_you_mean(field, candidates) {
        Some(near) => format!(
            "unknown field `{field}`: did you mean `{near}`? ({})",
            expected.trim_start_matches(", ")
        ),
        None => message.to_owned(),
    }
}

fn read_limited(path: &Path) -> std::io::Result<Vec<u8>> {
    mcpolicy_compiler::input::read_regular(path, MAX_REQUEST_FILE_BYTES)
}

/// `1h30m`, `30s`, `250ms`, `2d` to milliseconds.
pub(crate) fn parse_duration(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else {
            match rest.chars().next()? {
                's' => (1_000, 1),
                'm' => (60_000, 1),
                'h' => (3_600_000, 1),
                'd' => (86_400_000, 1),
                _ => return None,
            }
        };
        rest = &rest[len..];
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    Some(total)
}

/// TOML to JSON: datetimes become their RFC 3339 text; NaN and infinities
/// have no JSON form and are refused.
fn table_to_json(
    ctx: &Ctx<'_>,
    value: &toml::Value,
    span: std::ops::Range<usize>,
) -> Result<Value, SpecError> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => Value::Number(n),
            None => return Err(ctx.error(span, format!("{f} has no JSON form"))),
        },
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(dt) => Value::String(dt.to_string()),
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| table_to_json(ctx, i, span.clone()))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => Value::Object(
            table
                .iter()
                .map(|(k, v)| Ok((k.clone(), table_to_json(ctx, v, span.clone())?)))
                .collect::<Result<_, SpecError>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(30_000));
        assert_eq!(parse_duration("1h30m"), Some(5_400_000));
        assert_eq!(parse_duration("250ms"), Some(250));
        assert_eq!(parse_duration("2d"), Some(172_800_000));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("s"), None);
    }

    fn file_with_before(entries: usize, repeat: u64) -> String {
        let mut text = String::from(
            "[[case]]\nname = \"c\"\nserver = \"s\"\nprompt = \"hi\"\nexpect = { outcome = \"allow\" }\n",
        );
        for _ in 0..entries {
            text.push_str(&format!("[[case.before]]\nrepeat = {repeat}\n"));
        }
        text
    }

    /// `[[case.before]]` entries: the bound is accepted, one more refused.
    #[test]
    fn before_entries_are_bounded() {
        let at = parse("t.toml", &file_with_before(MAX_BEFORE_ENTRIES, 1)).expect("at the bound");
        assert_eq!(at.cases[0].before.len(), MAX_BEFORE_ENTRIES);
        let over = parse("t.toml", &file_with_before(MAX_BEFORE_ENTRIES + 1, 1))
            .expect_err("over the bound");
        assert!(
            over.text.contains("more than 1000 `[[case.before]]`"),
            "{over}"
        );
    }

    /// Every repetition shares its step's request: one request, however
    /// many steps.
    #[test]
    fn repetitions_share_one_request() {
        let file = parse("t.toml", &file_with_before(1, 300)).expect("valid");
        let before = &file.cases[0].before;
        assert_eq!(before.len(), 300);
        assert!(
            before
                .iter()
                .all(|s| std::sync::Arc::ptr_eq(&s.request, &file.cases[0].step.request))
        );
        assert_eq!(before[0].bytes(), file.cases[0].step.bytes());
    }

    /// The product `prompt` × `prompt_repeat` × `repeat`: a file whose
    /// requests total just under the bound is read, one request more is
    /// refused before any is built (the 1,177-byte file that asked for
    /// 300 copies of a 15 MiB prompt).
    #[test]
    #[ignore = "full size: builds 15 MiB requests (run by .ci/run's full-size step)"]
    fn request_bytes_of_a_file_are_bounded() {
        let prompt = |repeat: u64| {
            format!(
                "[[case]]\nname = \"c\"\nserver = \"s\"\nprompt = \"{}\"\nprompt_repeat = 15728640\nexpect = {{ outcome = \"deny\" }}\n[[case.before]]\nrepeat = {repeat}\n",
                "x"
            )
        };
        let one = parse("t.toml", &prompt(1)).expect("two requests");
        let size = one.cases[0].step.bytes().len() as u64;
        // Steps that fit: the case itself and `repeat` before it.
        let fit = MAX_TOTAL_REQUEST_BYTES / size;
        assert!(
            parse("t.toml", &prompt(fit - 1)).is_ok(),
            "{fit} requests of {size} bytes fit"
        );
        let over = parse("t.toml", &prompt(fit)).expect_err("one more does not");
        assert!(over.text.contains("more than 256 MiB"), "{over}");
        let hostile = parse("t.toml", &prompt(300)).expect_err("300 copies");
        assert!(hostile.text.contains("more than 256 MiB"), "{hostile}");
    }

    /// The number of requests a file sends: the bound, and one more.
    #[test]
    #[ignore = "full size: builds a million steps (run by .ci/run's full-size step)"]
    fn requests_of_a_file_are_bounded() {
        // 10 entries of `repeat = 100000` is the bound with the case itself
        // one over; 9 entries plus 99,999 leave room for it.
        let mut under = file_with_before(9, MAX_REPEAT);
        under.push_str(&format!("[[case.before]]\nrepeat = {}\n", MAX_REPEAT - 1));
        let file = parse("t.toml", &under).expect("at the bound");
        assert_eq!(file.cases[0].before.len() as u64 + 1, MAX_STEPS);
        let over = parse("t.toml", &file_with_before(10, MAX_REPEAT)).expect_err("one more");
        assert!(over.text.contains("more than 1000000 requests"), "{over}");
    }
}
