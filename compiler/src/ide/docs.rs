//! What each keyword, value and unit means, for hovers and completion.

/// A keyword's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeywordDoc {
    /// The keyword.
    pub keyword: &'static str,
    /// How it is written.
    pub syntax: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// What happens to a request it stops (empty for declarations).
    pub outcome: &'static str,
}

const fn doc(
    keyword: &'static str,
    syntax: &'static str,
    meaning: &'static str,
    outcome: &'static str,
) -> KeywordDoc {
    KeywordDoc {
        keyword,
        syntax,
        meaning,
        outcome,
    }
}

/// Statements of `defaults` and `server` blocks.
pub const POLICY: &[KeywordDoc] = &[
    doc(
        "sampling",
        "sampling on|off [as REASON]",
        "Whether the server may sample at all.",
        "deny `policy.sampling_disabled`",
    ),
    doc(
        "tools",
        "tools on|off [as REASON]",
        "Whether a request may offer `tools`/`toolChoice` to the model (MCP 2025-11-25 and later).",
        "deny `policy.tools_disabled`",
    ),
    doc(
        "max_context",
        "max_context none|thisServer|allServers",
        "The widest `includeContext` a request may ask for; wider requests are narrowed, not denied.",
        "trim `policy.max_scope`",
    ),
    doc(
        "max_input",
        "max_input SIZE [as REASON]    (64 KiB)",
        "The canonical size of `systemPrompt` + `messages`.",
        "deny `policy.input_too_large`",
    ),
    doc(
        "max_messages",
        "max_messages COUNT [as REASON]    (50)",
        "The number of entries in `messages`.",
        "deny `policy.input_too_large`",
    ),
    doc(
        "max_tokens",
        "max_tokens COUNT    (4096, 8k)",
        "A larger `maxTokens` is clamped to this.",
        "trim `policy.max_tokens`",
    ),
    doc(
        "rate",
        "rate COUNT per DURATION [as REASON]    (30 per 1m)",
        "At most this many admitted requests in any rolling window.",
        "deny `policy.rate_limit` with `retryAfter`",
    ),
    doc(
        "budget",
        "budget COUNT requests|tokens per hour|day|week|month|DURATION [as REASON]    (50 requests per day, 200k tokens per 24h)",
        "Requests or tokens per UTC calendar `hour`, `day`, `week` (ISO) or `month`, or per rolling duration. Token budgets reserve `maxTokens` at admission and settle with real usage.",
        "deny `policy.budget_exhausted` with `resetsAt`",
    ),
    doc(
        "deadline",
        "deadline DURATION [as REASON]    (60s)",
        "How long the completion may take; the client enforces it.",
        "a reported miss is `policy.deadline`",
    ),
    doc(
        "consent",
        "consent always|first|never",
        "When the user is asked: every request, once per request identity (the default), or never.",
        "`user.denied` (code -1)",
    ),
    doc(
        "models",
        "models \"GLOB\", …    (\"claude-*\", \"gpt-4o\")",
        "Model-name globs the request may run on; hints outside the list are dropped and the client picks from the list.",
        "trim `policy.model`",
    ),
];

/// Properties of `reason` declarations.
pub const REASON: &[KeywordDoc] = &[
    doc(
        "retryable",
        "retryable true|false",
        "Whether a server may usefully retry later; the denial frame's `data.retryable`. Unknown is `false`.",
        "",
    ),
    doc(
        "ttl",
        "ttl DURATION|until_reset|forever|none",
        "How long a decision with this reason is remembered, so that a retry cannot get around it. `until_reset`: until the budget window resets; `forever`: until the server's effective block changes; `none`: not stored.",
        "",
    ),
    doc(
        "message",
        "message \"TEXT with {server}\"",
        "The prose of the denial frame's `message`; placeholders in braces.",
        "",
    ),
    doc(
        "code",
        "code INTEGER    (-32011)",
        "The JSON-RPC error code of this reason's denial frames (default: the policy's `error_code`).",
        "",
    ),
];

/// Top-level items.
pub const TOP_LEVEL: &[KeywordDoc] = &[
    doc(
        "mcpolicy",
        "mcpolicy 1",
        "The language version; always the first line.",
        "",
    ),
    doc(
        "protocol",
        "protocol 2025-06-18|2025-11-25|2026-07-28",
        "The MCP revision the client speaks (default 2025-11-25). It decides which error codes are reserved and how sampling arrives.",
        "",
    ),
    doc(
        "error_code",
        "error_code INTEGER    (default -32010)",
        "The JSON-RPC code of denial frames (default -32010). -32768..-32000 is reserved by JSON-RPC; MCP 2026-07-28 reserves -32020..-32099 and asks for application codes outside -32768..-32000.",
        "",
    ),
    doc(
        "identity",
        "identity systemPrompt, messages, …",
        "The `sampling/createMessage` params whose canonical form (RFC 8785 after NFC) identifies a request; a stored decision is replayed for the same identity.",
        "",
    ),
    doc(
        "reason",
        "reason NAME { retryable …; ttl …; message …; code … }",
        "Declares a reason, or redeclares a built-in one, for denials to carry (`as NAME`).",
        "",
    ),
    doc(
        "defaults",
        "defaults { … }",
        "Statements every server inherits; a server block overrides them statement by statement.",
        "",
    ),
    doc(
        "server",
        "server \"ID-OR-GLOB\" { … }",
        "Statements for the servers the pattern matches (`*` any run of characters, `?` one). Blocks are tried in order; the first match wins.",
        "",
    ),
];

/// Connecting words inside statements.
pub const CONNECTIVES: &[KeywordDoc] = &[
    doc(
        "per",
        "… per WINDOW",
        "The window a rate or budget counts over: a duration (`1m`, `24h`) rolls; a calendar unit (`day`) resets at its UTC boundary.",
        "",
    ),
    doc(
        "as",
        "… as REASON",
        "The reason this statement's denial carries instead of the built-in one; it must be declared with `reason`.",
        "",
    ),
];

/// The documentation of any keyword.
pub fn keyword(word: &str) -> Option<&'static KeywordDoc> {
    POLICY
        .iter()
        .chain(REASON)
        .chain(TOP_LEVEL)
        .chain(CONNECTIVES)
        .find(|d| d.keyword == word)
}

/// A unit's meaning and its factor in the base unit (milliseconds, bytes, or ones).
pub fn unit(unit: &str) -> Option<(&'static str, u64)> {
    Some(match unit {
        "ms" => ("milliseconds", 1),
        "s" => ("seconds", 1_000),
        "m" => ("minutes", 60_000),
        "h" => ("hours", 3_600_000),
        "d" => ("days", 86_400_000),
        "B" => ("bytes", 1),
        "KiB" => ("kibibytes (1,024 bytes)", 1 << 10),
        "MiB" => ("mebibytes (1,048,576 bytes)", 1 << 20),
        "GiB" => ("gibibytes (1,073,741,824 bytes)", 1 << 30),
        "k" => ("thousand", 1_000),
        "M" => ("million", 1_000_000),
        _ => return None,
    })
}

/// Duration units, joined to the number (`60s`).
pub const DURATION_UNITS: &[&str] = &["ms", "s", "m", "h", "d"];
/// Size units (`64 KiB`).
pub const SIZE_UNITS: &[&str] = &["B", "KiB", "MiB", "GiB"];
/// Count suffixes (`200k`).
pub const COUNT_SUFFIXES: &[&str] = &["k", "M"];
/// Calendar units of budgets.
pub const CALENDAR_UNITS: &[&str] = &["hour", "day", "week", "month"];

/// The values an enumerated statement takes, each with its meaning.
pub fn values(statement: &str) -> &'static [(&'static str, &'static str)] {
    match statement {
        "sampling" | "tools" => &[("on", "allowed"), ("off", "denied")],
        "max_context" => &[
            ("none", "no context beyond the request's own messages"),
            (
                "thisServer",
                "context from the requesting server's session only (deprecated in MCP 2026-07-28)",
            ),
            (
                "allServers",
                "context from every connected server (deprecated in MCP 2026-07-28)",
            ),
        ],
        "consent" => &[
            ("always", "ask for every request, even one already approved"),
            (
                "first",
                "ask once per request identity; the answer is stored",
            ),
            ("never", "never ask"),
        ],
        "retryable" => &[
            ("true", "a server may usefully retry later"),
            ("false", "retrying will not help"),
        ],
        "ttl" => &[
            (
                "until_reset",
                "until the budget window that produced the denial resets",
            ),
            ("forever", "until the server's effective block changes"),
            ("none", "not stored: every request is evaluated afresh"),
        ],
        "metric" => &[
            ("requests", "admitted requests"),
            ("tokens", "tokens: `maxTokens` reserved, settled with usage"),
        ],
        "calendar" => &[
            ("hour", "from the top of each UTC hour"),
            ("day", "from each UTC midnight"),
            ("week", "from each Monday 00:00 UTC (ISO weeks)"),
            ("month", "from the first day of each UTC month"),
        ],
        _ => &[],
    }
}
