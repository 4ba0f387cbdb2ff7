//! Structure-aware generators: well-typed policies (as text, so the whole
//! front end runs), request pools and step sequences.
//!
//! Values are drawn close to the limits the requests probe (a few messages,
//! a few hundred bytes, a handful of requests per window) so that every
//! branch of the evaluation is reached within a short sequence. Server ids
//! are ASCII for now: NFC normalisation of ids is held by
//! `runtime/tests/table.rs`; NFC/NFD variants could be added here.

use std::fmt::Write as _;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use serde_json::{Value, json};

/// Custom reasons a policy may declare and use with `as`.
pub const CUSTOM: &[&str] = &["acme.a", "acme.b", "acme.c"];
/// Built-in denial reasons a policy may redeclare or name after `as`.
const DENIALS: &[&str] = &[
    "policy.sampling_disabled",
    "policy.tools_disabled",
    "policy.input_too_large",
    "policy.rate_limit",
    "policy.budget_exhausted",
    "policy.deadline",
];
const PATTERNS: &[&str] = &[
    "a", "ab", "a-1", "b-x", "a*", "*-1", "?b", "b-*", "*", "a?", "*x*",
];
/// Server ids requests come from: some match the patterns, some none.
pub const SERVER_IDS: &[&str] = &["a", "ab", "a-1", "b-x", "b-1", "c", "ba", "aX", "zz-1"];
const MODELS: &[&str] = &["claude-*", "gpt-4o", "gpt-?o", "local/*", "*mini"];
const HINTS: &[&str] = &["claude-3", "gpt-4o", "gpt-4o-mini", "local/x", "o1"];
const IDENTITY_FIELDS: &[&str] = &[
    "systemPrompt",
    "messages",
    "includeContext",
    "modelPreferences",
    "maxTokens",
    "temperature",
    "tools",
    "toolChoice",
];

/// Windows of `rate`.
const RATE_WINDOWS: &[&str] = &["1s", "2s", "10s", "1m", "1h"];

/// `ttl` values a reason may declare.
const TTLS: &[&str] = &[
    "1s",
    "5s",
    "30s",
    "90s",
    "10m",
    "1h",
    "2d",
    "until_reset",
    "forever",
    "none",
];

fn as_clause() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => Just(None),
        2 => select(CUSTOM).prop_map(|r| Some(r.to_owned())),
        1 => select(DENIALS).prop_map(|r| Some(r.to_owned())),
    ]
}

fn with_as(text: String, reason: Option<String>) -> String {
    match reason {
        Some(r) => format!("{text} as {r}"),
        None => text,
    }
}

/// One block's statements, each kind at most once, budgets over distinct
/// (metric, window) pairs; `p` is the chance (in percent) of each kind.
fn block(p: u32) -> impl Strategy<Value = Vec<String>> {
    let maybe =
        move |s: BoxedStrategy<String>| prop::option::weighted(f64::from(p) / 100.0, s).boxed();
    let sampling = (prop::bool::weighted(0.8), as_clause())
        .prop_map(|(on, r)| with_as(format!("sampling {}", if on { "on" } else { "off" }), r))
        .boxed();
    let tools = (prop::bool::weighted(0.5), as_clause())
        .prop_map(|(on, r)| with_as(format!("tools {}", if on { "on" } else { "off" }), r))
        .boxed();
    let context = select(&["none", "thisServer", "allServers"][..])
        .prop_map(|s| format!("max_context {s}"))
        .boxed();
    let input = (
        select(&["60 B", "150 B", "400B", "1 KiB", "2 KiB"][..]),
        as_clause(),
    )
        .prop_map(|(s, r)| with_as(format!("max_input {s}"), r))
        .boxed();
    let messages = (1u32..5, as_clause())
        .prop_map(|(n, r)| with_as(format!("max_messages {n}"), r))
        .boxed();
    let tokens = select(&["50", "400", "1000", "1k", "4096"][..])
        .prop_map(|s| format!("max_tokens {s}"))
        .boxed();
    let rate = (1u32..4, select(RATE_WINDOWS), as_clause())
        .prop_map(|(n, w, r)| with_as(format!("rate {n} per {w}"), r))
        .boxed();
    let deadline = (select(&["250ms", "5s", "60s", "2m"][..]), as_clause())
        .prop_map(|(d, r)| with_as(format!("deadline {d}"), r))
        .boxed();
    let consent = select(&["always", "first", "never", "never"][..])
        .prop_map(|c| format!("consent {c}"))
        .boxed();
    let models = subsequence(MODELS, 1..=3)
        .prop_map(|m| {
            let list: Vec<String> = m.iter().map(|s| format!("\"{s}\"")).collect();
            format!("models {}", list.join(", "))
        })
        .boxed();
    let budget = (
        prop::bool::ANY,
        select(&["hour", "day", "week", "month", "30s", "10m", "24h", "1d"][..]),
        select(&["1", "2", "3", "5"][..]),
        select(&["300", "1000", "2500", "9k"][..]),
        as_clause(),
    )
        .prop_map(|(tokens, window, requests, token_limit, r)| {
            let text = if tokens {
                format!("budget {token_limit} tokens per {window}")
            } else {
                format!("budget {requests} requests per {window}")
            };
            (tokens, window, with_as(text, r))
        });
    (
        (
            maybe(sampling),
            maybe(tools),
            maybe(context),
            maybe(input),
            maybe(messages),
            maybe(tokens),
        ),
        (
            maybe(rate),
            maybe(deadline),
            maybe(consent),
            maybe(models),
            vec(budget, 0..=3),
        ),
        any::<prop::sample::Index>(),
    )
        .prop_map(|((a, b, c, d, e, f), (g, h, i, j, budgets), shuffle)| {
            let mut stmts: Vec<String> = [a, b, c, d, e, f, g, h, i, j]
                .into_iter()
                .flatten()
                .collect();
            // Distinct (metric, window): `24h` and `1d` are one window, so the
            // second is dropped like a duplicate would be refused.
            let mut seen: Vec<(bool, &str)> = Vec::new();
            for (tokens, window, text) in budgets {
                let window_key = if window == "1d" { "24h" } else { window };
                if !seen.contains(&(tokens, window_key)) {
                    seen.push((tokens, window_key));
                    stmts.push(text);
                }
            }
            // A random rotation: statement order must not matter (budgets aside).
            if !stmts.is_empty() {
                let at = shuffle.index(stmts.len());
                stmts.rotate_left(at);
            }
            stmts
        })
}

fn reason_decl(name: &'static str) -> impl Strategy<Value = String> {
    let user_denied = name == "user.denied";
    (
        option::of(prop::bool::ANY),
        option::of(select(TTLS)),
        option::weighted(
            0.3,
            select(if user_denied {
                &[-1i64, -32011, 42][..]
            } else {
                &[-32011i64, -32012, -31000, 42][..]
            }),
        ),
    )
        .prop_map(move |(retryable, ttl, code)| {
            let mut parts = Vec::new();
            if name == "user.approved" {
                // Only its ttl (and message) mean anything.
                if let Some(ttl) = ttl.filter(|t| *t != "until_reset") {
                    parts.push(format!("ttl {ttl}"));
                }
            } else {
                // A retryable reason must not be stored forever, nor
                // `until_reset` (a retry would be refused until the reset);
                // keep those combinations rare rather than rejected.
                let retryable = if name.starts_with("acme.") {
                    Some(retryable.unwrap_or(false))
                } else {
                    retryable
                };
                if let Some(r) = retryable {
                    parts.push(format!("retryable {r}"));
                }
                // A retryable reason stored forever is refused (E0403): such
                // a reason gets a duration instead.
                let stored_forever = match ttl {
                    Some(t) => t == "forever",
                    None => !matches!(
                        name,
                        "policy.rate_limit" | "policy.deadline" | "policy.budget_exhausted"
                    ),
                };
                let ttl = if retryable == Some(true) && stored_forever {
                    Some("45s")
                } else {
                    ttl
                };
                if let Some(ttl) = ttl {
                    parts.push(format!("ttl {ttl}"));
                }
                if let Some(code) = code {
                    parts.push(format!("code {code}"));
                }
            }
            format!("reason {name} {{ {} }}", parts.join("; "))
        })
}

/// A policy in parts, so that an edit can replace one part.
#[derive(Debug, Clone)]
pub struct Parts {
    protocol: Option<&'static str>,
    error_code: Option<i64>,
    identity: Option<Vec<&'static str>>,
    reasons: Vec<(&'static str, String)>,
    defaults: Option<Vec<String>>,
    servers: Vec<(&'static str, Vec<String>)>,
}

impl Parts {
    /// The policy text: header, reasons, `defaults`, server blocks.
    pub fn render(&self) -> String {
        let mut out = String::from("mcpolicy 1\n");
        if let Some(p) = self.protocol {
            let _ = writeln!(out, "protocol {p}");
        }
        if let Some(c) = self.error_code {
            let _ = writeln!(out, "error_code {c}");
        }
        if let Some(fields) = &self.identity {
            let _ = writeln!(out, "identity {}", fields.join(", "));
        }
        for (_, r) in &self.reasons {
            let _ = writeln!(out, "{r}");
        }
        if let Some(stmts) = &self.defaults {
            let _ = writeln!(out, "defaults {{");
            for s in stmts {
                let _ = writeln!(out, "  {s}");
            }
            out.push_str("}\n");
        }
        for (pattern, stmts) in &self.servers {
            let _ = writeln!(out, "server \"{pattern}\" {{ {} }}", stmts.join("; "));
        }
        out
    }
}

const ERROR_CODES: &[i64] = &[-32010, -32011, -32001, -31010, 1, 42];

fn parts() -> impl Strategy<Value = Parts> {
    // The custom reasons are always declared (a statement may name them),
    // the built-ins now and then.
    let reasons = subsequence(
        &[
            "policy.sampling_disabled",
            "policy.tools_disabled",
            "policy.input_too_large",
            "policy.rate_limit",
            "policy.budget_exhausted",
            "policy.deadline",
            "user.denied",
            "user.approved",
        ][..],
        0..=4,
    )
    .prop_flat_map(|names| {
        CUSTOM
            .iter()
            .copied()
            .chain(names)
            .map(|name| reason_decl(name).prop_map(move |d| (name, d)))
            .collect::<Vec<_>>()
    });
    // Exact ids first, then globs, `*` last: fewer blocks shadowed by an
    // earlier glob (E0302); the order among them is random.
    let servers = subsequence(PATTERNS, 0..=4)
        .prop_shuffle()
        .prop_map(|mut patterns| {
            patterns.sort_by_key(|p| (p.contains(['*', '?']), *p == "*"));
            patterns
        })
        .prop_flat_map(|patterns| {
            patterns
                .into_iter()
                .map(|p| block(30).prop_map(move |b| (p, b)))
                .collect::<Vec<_>>()
        });
    (
        option::of(select(&["2025-06-18", "2025-11-25", "2026-07-28"][..])),
        option::weighted(0.5, select(ERROR_CODES)),
        option::weighted(0.3, subsequence(IDENTITY_FIELDS, 1..=5).prop_shuffle()),
        reasons,
        option::weighted(0.8, block(45)),
        servers,
    )
        .prop_map(
            |(protocol, error_code, identity, reasons, defaults, servers)| Parts {
                protocol,
                error_code,
                identity,
                reasons,
                defaults,
                servers,
            },
        )
}

/// A policy as text.
pub fn policy() -> impl Strategy<Value = String> {
    parts().prop_map(|p| p.render())
}

/// A policy and an edit of it: nothing changed (only re-compiled), the
/// `defaults` or one server block rewritten, one reason redeclared, the
/// `error_code` changed, or every `rate` given another window.
pub fn edited_policy() -> impl Strategy<Value = (String, String)> {
    parts().prop_flat_map(|before| {
        let servers = before.servers.len();
        let reasons = before.reasons.len();
        let keep = before.clone();
        (
            Just(before),
            0u8..6,
            any::<prop::sample::Index>(),
            block(45),
            block(30),
            select(ERROR_CODES),
            select(RATE_WINDOWS),
        )
            .prop_flat_map(
                move |(before, what, index, defaults, server, code, window)| {
                    let mut after = before.clone();
                    let redeclare: BoxedStrategy<Option<(usize, String)>> = match what {
                        1 => {
                            after.defaults = Some(defaults);
                            Just(None).boxed()
                        }
                        2 if servers > 0 => {
                            after.servers[index.index(servers)].1 = server;
                            Just(None).boxed()
                        }
                        3 if reasons > 0 => {
                            let at = index.index(reasons);
                            reason_decl(keep.reasons[at].0)
                                .prop_map(move |d| Some((at, d)))
                                .boxed()
                        }
                        4 => {
                            after.error_code = Some(code);
                            Just(None).boxed()
                        }
                        5 => {
                            // Every `rate` keeps its count and gets another window.
                            let blocks = after
                                .defaults
                                .iter_mut()
                                .chain(after.servers.iter_mut().map(|(_, b)| b));
                            for stmt in blocks.flatten() {
                                if let Some(rest) = stmt.strip_prefix("rate ") {
                                    let mut words: Vec<&str> = rest.split(' ').collect();
                                    if words.len() >= 3 {
                                        words[2] = window;
                                        *stmt = format!("rate {}", words.join(" "));
                                    }
                                }
                            }
                            Just(None).boxed()
                        }
                        _ => Just(None).boxed(),
                    };
                    (Just(before), Just(after), redeclare).prop_map(|(before, mut after, r)| {
                        if let Some((at, decl)) = r {
                            after.reasons[at].1 = decl;
                        }
                        (before.render(), after.render())
                    })
                },
            )
    })
}

fn text(len: usize) -> String {
    "abcdefghij".chars().cycle().take(len).collect()
}

/// One request (the whole JSON-RPC envelope), mostly valid.
fn request() -> impl Strategy<Value = Value> {
    // Unknown `includeContext` values (refused -32602) and `maxTokens`
    // written as `9000.0` (handed on as an integer) can be left out to run
    // against an older build: MCPOLICY_DIFF_SKIP_PENDING=1.
    let unknown = u32::from(std::env::var_os("MCPOLICY_DIFF_SKIP_PENDING").is_none());
    // Fields of the wrong type, which `docs/spec/evaluation.md` step 1 refuses with -32602
    // (`fields_of_the_wrong_type_are_invalid_params`).
    let typed = 1;
    let wrong_type = prop_oneof![
        30 => Just(None),
        typed => select(vec![
            ("systemPrompt", json!(5)),
            ("tools", json!({})),
            ("toolChoice", json!("auto")),
            ("modelPreferences", json!("claude")),
            ("modelPreferences", json!({"hints": "gpt-4o"})),
            ("temperature", json!("hot")),
        ])
        .prop_map(Some),
    ];
    let message = select(&[0usize, 3, 40, 120, 400][..])
        .prop_map(|len| json!({"role": "user", "content": {"type": "text", "text": text(len)}}));
    let include = prop_oneof![
        4 => Just(None),
        2 => Just(Some(json!("none"))),
        3 => Just(Some(json!("thisServer"))),
        3 => Just(Some(json!("allServers"))),
        unknown => select(&["ThisServer", "AllServers", "everything"][..]).prop_map(|s| Some(json!(s))),
        unknown => Just(Some(json!(7))),
    ];
    let max_tokens = prop_oneof![
        16 => select(&[1u64, 50, 400, 1000, 3000, 9000][..]).prop_map(|n| Some(json!(n))),
        2 * unknown => select(&[400.0f64, 9000.0][..]).prop_map(|n| Some(json!(n))),
        1 => select(vec![json!(-1), json!("10"), json!(2.5)]).prop_map(Some),
        1 => Just(None),
    ];
    let hints = option::weighted(
        0.5,
        vec(
            prop_oneof![
                6 => select(HINTS).prop_map(|h| json!({"name": h})),
                1 => Just(json!({})),
            ],
            0..=3,
        ),
    );
    let tools = prop_oneof![
        3 => Just(None),
        1 => Just(Some(json!([]))),
        2 => Just(Some(json!([{"name": "search", "inputSchema": {"type": "object"}}]))),
    ];
    let envelope = prop_oneof![
        30 => Just(0u8),
        1 => Just(1u8),
        1 => Just(2u8),
        1 => Just(3u8),
        1 => Just(4u8),
    ];
    (
        vec(message, 0..=5),
        option::weighted(0.4, select(&[0usize, 30, 200][..])),
        include,
        max_tokens,
        hints,
        tools,
        option::weighted(0.15, Just(json!({"mode": "auto"}))),
        option::weighted(0.2, Just(json!(0.5))),
        (envelope, wrong_type),
        0u32..1000,
    )
        .prop_map(
            |(
                messages,
                system,
                include,
                max_tokens,
                hints,
                tools,
                choice,
                temperature,
                (envelope, wrong),
                id,
            )| {
                let mut params = serde_json::Map::new();
                params.insert("messages".into(), Value::Array(messages));
                if let Some(len) = system {
                    params.insert("systemPrompt".into(), json!(text(len)));
                }
                if let Some(v) = include {
                    params.insert("includeContext".into(), v);
                }
                if let Some(v) = max_tokens {
                    params.insert("maxTokens".into(), v);
                }
                if let Some(h) = hints {
                    params.insert("modelPreferences".into(), json!({ "hints": h }));
                }
                if let Some(t) = tools {
                    params.insert("tools".into(), t);
                }
                if let Some(c) = choice {
                    params.insert("toolChoice".into(), c);
                }
                if let Some(t) = temperature {
                    params.insert("temperature".into(), t);
                }
                if let Some((field, value)) = wrong {
                    params.insert(field.into(), value);
                }
                let mut envelope_value = json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "method": "sampling/createMessage",
                    "params": Value::Object(params),
                });
                match envelope {
                    1 => envelope_value["jsonrpc"] = json!("1.0"),
                    2 => envelope_value["method"] = json!("tools/call"),
                    3 => envelope_value["params"] = json!([1]),
                    4 => {
                        if let Some(p) = envelope_value["params"].as_object_mut() {
                            p.remove("messages");
                        }
                    }
                    _ => {}
                }
                envelope_value
            },
        )
}

/// What a sequence does at one step.
#[derive(Debug, Clone)]
pub enum Step {
    /// The clock moves forward.
    Advance(i64),
    /// A request from `server` (an index into the sequence's ids): `request`
    /// (an index into its pool); the user answers `answer` if asked; a
    /// grant then reports `usage` tokens and maybe a deadline miss.
    Request {
        server: usize,
        request: usize,
        answer: super::interp::Answer,
        usage: Option<u64>,
        missed: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    use super::interp::Answer;
    prop_oneof![
        1 => select(&[0i64, 1, 500, 999, 1000, 1500, 9_999, 30_000, 59_999, 60_000,
                      600_000, 3_600_000, 86_400_000, 604_800_000, 2_678_400_000][..])
            .prop_map(Step::Advance),
        3 => (
            0usize..3,
            0usize..5,
            select(&[Answer::Approve, Answer::Approve, Answer::Refuse, Answer::Never][..]),
            option::weighted(0.3, select(&[0u64, 10, 500, 5000][..])),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(server, request, answer, usage, missed)| Step::Request {
                server,
                request,
                answer,
                usage,
                missed,
            }),
    ]
}

/// A whole run: start time, client capability, server ids, request pool, steps.
#[derive(Debug, Clone)]
pub struct Run {
    pub start: i64,
    pub sampling_context: bool,
    pub servers: Vec<&'static str>,
    pub requests: Vec<Value>,
    pub steps: Vec<Step>,
}

pub fn run(steps: usize) -> impl Strategy<Value = Run> {
    use super::interp::timestamp;
    let start = select(vec![
        timestamp(2026, 3, 10, 15, 30, 0),
        timestamp(2026, 3, 10, 23, 59, 59) + 500,
        timestamp(2026, 3, 15, 23, 59, 0),
        timestamp(2026, 3, 31, 23, 59, 58),
        timestamp(2026, 12, 31, 23, 59, 59),
        timestamp(2028, 2, 28, 23, 0, 0),
    ])
    .prop_flat_map(|base| (Just(base), 0i64..120_000).prop_map(|(b, off)| b + off));
    (
        start,
        prop::bool::ANY,
        subsequence(SERVER_IDS, 1..=3).prop_shuffle(),
        vec(request(), 1..=5),
        vec(step(), 1..=steps),
        vec((0usize..5, 0usize..VARIATIONS), 0..=3),
    )
        .prop_map(
            |(start, sampling_context, servers, mut requests, steps, variants)| {
                // Variants of pool entries along the axes a refusal must
                // cover and an approval must not (`docs/spec/identity.md`,
                // "Two keys"): both sides must agree on which is which.
                for (of, how) in variants {
                    let mut variant = requests[of % requests.len()].clone();
                    vary(&mut variant, how);
                    requests.push(variant);
                }
                Run {
                    start,
                    sampling_context,
                    servers,
                    requests,
                    steps,
                }
            },
        )
}

/// How many ways [`vary`] changes a request.
const VARIATIONS: usize = 10;

/// One change to a request: the first seven are unseen by the user (a
/// spelled-out default, `_meta`, `annotations`, an undefined member, a
/// priority, invisible characters), the rest are seen (tools, `maxTokens`,
/// visible text).
fn vary(request: &mut Value, how: usize) {
    let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) else {
        return;
    };
    let first_text = |params: &mut serde_json::Map<String, Value>| {
        params
            .get_mut("messages")
            .and_then(|m| m.get_mut(0))
            .and_then(|m| m.get_mut("content"))
            .and_then(|c| c.get_mut("text"))
            .and_then(|t| t.as_str().map(str::to_owned))
    };
    match how {
        0 => {
            params
                .entry("includeContext")
                .or_insert_with(|| json!("none"));
        }
        1 => {
            params
                .entry("modelPreferences")
                .or_insert_with(|| json!({"hints": []}));
        }
        2 => {
            if let Some(Value::Object(prefs)) = params.get_mut("modelPreferences") {
                prefs.insert("costPriority".into(), json!(0.500_000_000_000_000_1));
            }
        }
        3 => {
            if let Some(Value::Object(message)) =
                params.get_mut("messages").and_then(|m| m.get_mut(0))
            {
                message.insert("_meta".into(), json!({"trace": 1}));
            }
        }
        4 => {
            if let Some(Value::Object(content)) = params
                .get_mut("messages")
                .and_then(|m| m.get_mut(0))
                .and_then(|m| m.get_mut("content"))
            {
                content.insert("annotations".into(), json!({"priority": 1}));
            }
        }
        5 => {
            if let Some(text) = first_text(params) {
                params["messages"][0]["content"]["text"] = json!(format!("{text}\u{200B}"));
            }
        }
        6 => {
            if let Some(Value::Array(hints)) = params
                .get_mut("modelPreferences")
                .and_then(|p| p.get_mut("hints"))
                && let Some(Value::Object(hint)) = hints.get_mut(0)
            {
                hint.insert("vendor".into(), json!("x"));
            }
        }
        7 => {
            params.insert(
                "tools".into(),
                json!([{"name": "exec", "inputSchema": {"type": "object"}}]),
            );
        }
        8 => {
            params.insert("maxTokens".into(), json!(100_000));
        }
        _ => {
            if let Some(text) = first_text(params) {
                params["messages"][0]["content"]["text"] = json!(format!("{text}!"));
            }
        }
    }
}
