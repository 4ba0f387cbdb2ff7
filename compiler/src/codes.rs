//! The one table of diagnostic codes. A code is declared here and nowhere
//! else; the CLI, JSON, SARIF and the language server all read this table.

use std::fmt;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; `--deny-warnings` makes it fail the check.
    Warning,
    /// The policy is wrong; it is not compiled.
    Error,
}

impl Severity {
    /// `error` or `warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

macro_rules! codes {
    ($( $code:ident $sev:ident $summary:literal => $explanation:literal, )*) => {
        /// A stable diagnostic code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code { $( #[doc = $summary] $code, )* }

        impl Code {
            /// Every code, in table order.
            pub const ALL: &'static [Code] = &[$(Code::$code,)*];

            /// The code as written: `E0101`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$code => stringify!($code),)* }
            }

            /// The code's severity.
            pub fn severity(self) -> Severity {
                match self { $(Code::$code => Severity::$sev,)* }
            }

            /// One line saying what the code means.
            pub fn summary(self) -> &'static str {
                match self { $(Code::$code => $summary,)* }
            }

            /// The long explanation as declared, before the statement
            /// lists are filled in.
            fn declared_explanation(self) -> &'static str {
                match self { $(Code::$code => $explanation,)* }
            }
        }
    };
}

impl Code {
    /// The long explanation `mcpc explain` prints. Lists of statements are
    /// filled in from `statements.rs`, so a new statement needs no edit here.
    pub fn explanation(self) -> &'static str {
        static FILLED: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
            Code::ALL
                .iter()
                .map(|c| crate::statements::fill_explanation(c.declared_explanation()))
                .collect()
        });
        // The enum's discriminants are its positions in `ALL`.
        FILLED.get(self as usize).map_or("", String::as_str)
    }

    /// Looks a code up by its text, case-insensitively (`e0101` works).
    pub fn parse(text: &str) -> Option<Code> {
        Code::ALL
            .iter()
            .copied()
            .find(|c| c.as_str().eq_ignore_ascii_case(text.trim()))
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

codes! {
    // ---- input and syntax: E00xx
    E0001 Error "unreadable top-level item" =>
"The line does not start any top-level item. A policy is a list of items, one per
line: `mcpolicy 1`, `protocol`, `error_code`, `identity`, `reason NAME { … }`,
`defaults { … }` and `server \"ID-OR-GLOB\" { … }`. Everything else is an error,
reported here and skipped, so that the items after it are still checked.

    servr \"github\" { sampling off }     # error
    server \"github\" { sampling off }    # ok",
    E0002 Error "unreadable statement" =>
"The statement does not have the shape its keyword requires. Each statement is
one line (or ends at `;` or `}`): a keyword and its values, optionally followed
by `as REASON` on statements that deny.

    max_tokens 4096 extra      # error: unexpected `extra`
    max_tokens 4096            # ok",
    E0003 Error "unclosed block" =>
"A `{` has no matching `}` before the next top-level item or the end of the file.
Blocks do not nest; close each `defaults`, `server` and `reason` block before the
next item starts.",
    E0004 Error "invalid string escape" =>
"Strings accept the escapes `\\\\`, `\\\"`, `\\n`, `\\t` and `\\u{HEX}` (a Unicode scalar
value of 1 to 6 hex digits). Any other backslash sequence is an error.",
    E0005 Error "file is not valid UTF-8" =>
"Policies are UTF-8 text. The file holds a byte sequence that is not UTF-8 at the
reported offset; re-save it as UTF-8.",
    E0006 Error "file too large" =>
"The file is larger than the compiler reads (64 MiB). A policy that large is
almost certainly not a policy; split it or generate a smaller one.",
    E0007 Error "control character in source" =>
"The file contains a NUL or another control character outside strings and comments.
Only tabs, line breaks and printable text may appear in a policy.",

    // ---- statements: E01xx
    E0101 Error "unknown statement" =>
"The word does not name any statement. Blocks (`defaults`, `server`) accept
{policy_statements}; `reason` blocks accept {reason_statements}.",
    E0102 Error "statement not allowed here" =>
"The statement exists but belongs elsewhere: reason properties (`retryable`, `ttl`,
`message`, `code`) go in a `reason` block, policy statements in `defaults` or
`server` blocks, and top-level items (`server`, `defaults`, …) cannot nest.",
    E0103 Error "wrong value for statement" =>
"The statement's value has the wrong type. Durations take a joined unit (`60s`,
`1m`, `24h`, `250ms`, `7d`); sizes take a unit (`64 KiB`, `1 MiB`, `512 B`); counts
are plain numbers with an optional `k` or `M` (`4096`, `200k`); switches are
`on` or `off`.

`mcpc check --fix` reads a size without a unit as bytes from 1 KiB up
(`65536` is `65536 B`); below that (`64`), bytes and KiB are offered as a
choice and nothing is applied. A unit word without a number (`per minute`)
is fixed to one of that unit (`1m`), except in a budget's window, where
`per days`, `per hours` and `per weeks` may mean the calendar window
(`per day`) or the rolling one (`per 1d`): both are offered, neither is
applied.",
    E0104 Error "unknown unit" =>
"The unit is not one mcpolicy knows. Durations: `ms s m h d`. Sizes: `B KiB MiB GiB`
(binary units only: `KB` is ambiguous). Counts: `k` (thousand) and `M` (million).

`mcpc check --fix` applies a unit correction only when one unit is nearer
than every other, the word is longer than one letter and it is not a unit
of another quantity: `5Ms` is `5ms`, but `64 KB` (as near `KiB` as `B`),
`5M` (`M` is a million, not a minute) and `5K` (one slip from `k` and from
`M`) are offered as choices, since units differ in scale. A week written
out is fixed to days (`2 weeks` and `2wk` are `14d`); the one letter `w` is
one slip from `s`, `m`, `h` and `d`, so `2w` is offered as `14d`, not
fixed, and `1w` in a budget's window also as the calendar `week`.",
    E0105 Error "value out of range" =>
"The number is outside what the statement accepts: rates, budgets, windows and
deadlines must be positive, limits must fit in 64 bits, and a rate or window of
zero would refuse everything (write `sampling off` for that).",
    E0106 Error "duplicate statement" =>
"A block states the same thing twice; only one can apply. Remove one. Budgets are
duplicates when they count the same metric over the same window.",
    E0107 Error "unknown value" =>
"The word is not one of the statement's values. `max_context` takes `none`,
`thisServer` or `allServers` (the MCP `includeContext` values); `consent` takes
`always`, `first` or `never`; budgets count `requests` or `tokens` per `hour`,
`day`, `week`, `month` or a rolling duration; switches are `on` or `off`.

The values of a statement mean different things (`off` refuses what `on`
allows), so `mcpc check --fix` never picks one for a misspelt word: `sampling
no` offers `on` as a choice, `sampling of` offers `off` and `on`. Only a change
of case is fixed (`Off` is `off`).",

    // ---- top-level declarations: E02xx / W02xx
    E0201 Error "missing or misplaced version line" =>
"Every policy starts with `mcpolicy 1`, the language version, before any other
item, so that a future version of the language can be told apart.",
    E0202 Error "unsupported language version" =>
"This compiler reads version 1 of the language (`mcpolicy 1`). A policy written
for another version may mean something else under version 1, so `mcpolicy 1`
is offered as a choice and never applied by `mcpc check --fix`.",
    E0203 Error "duplicate declaration" =>
"`mcpolicy`, `protocol`, `error_code`, `identity` and `defaults` may each appear once.",
    E0204 Error "unknown protocol revision" =>
"`protocol` names the MCP revision the client speaks: `2025-06-18`, `2025-11-25`
(the default) or `2026-07-28`. The revision decides which error codes are reserved
and how sampling requests arrive.",
    E0205 Error "unknown identity field" =>
"`identity` lists the `sampling/createMessage` params that make up a request's
identity: `systemPrompt`, `messages`, `includeContext`, `modelPreferences`,
`maxTokens`, `temperature`, `stopSequences`, `metadata`, `tools`, `toolChoice`.",
    E0206 Error "duplicate identity field" =>
"A field is listed twice in `identity`; list each once.",
    W0207 Warning "identity includes a tuning knob" =>
"`maxTokens`, `temperature`, `stopSequences` and `metadata` are knobs a server can
nudge without changing what it asks for. Putting them in the identity lets a server
get a fresh evaluation by moving temperature from 0.2 to 0.2000001, which defeats
stored denials. Leave them out unless you mean it.",
    W0208 Warning "identity omits messages" =>
"Without `messages` in the identity, two requests with different prompts are the
same request: a stored denial or approval of one answers the other.",

    // ---- server blocks: E03xx
    E0301 Error "duplicate server block" =>
"Two `server` blocks have the same pattern; the second can never apply. Merge them.",
    E0302 Error "unreachable server block" =>
"Server blocks are tried in order and the first whose pattern matches wins. The
earlier blocks (one glob, or several globs and ids together) already match every id
this block's pattern matches, so this block can never apply. Move the more specific
block above the glob.",
    E0303 Error "empty server pattern" =>
"A server pattern must name an id or a glob (`*` any run, `?` one character).",
    W0304 Warning "server pattern not in Unicode NFC" =>
"Server ids and patterns are compared in Unicode Normalization Form C (NFC), so
`cafe\u{301}` (an `e` followed by a combining accent, as macOS file names spell
it) and `caf\u{e9}` are the same server. The pattern is written in another form;
it is read as its NFC spelling, which the help line shows. Write that spelling,
so that what you read is what is matched.",

    W0305 Warning "server globs overlap" =>
"Two server globs both match some ids, and neither covers the other: `a*` then
`*b` both match `ab`, and the first matching block wins, so `ab` gets the `a*`
block. The warning names such an id. If that is meant, say so with a block for
the overlap above both (or suppress the warning); otherwise make the globs
disjoint. A glob that covers a later one entirely is E0302 instead, and a
narrower glob before a wider one is the usual order and not reported.

    server \"a*\" { max_tokens 512 }
    server \"*b\" { sampling off }     # warning: `ab` goes to `a*`",

    W0306 Warning "server patterns not compared" =>
"Each server pattern is compared with the globs above it (for E0302 and W0305),
but only with those whose literal start agrees with its own, and one file's
comparisons share a bound of work, so that no policy makes the checker, the
compiler, the proxy's start or the editor wait. Globs that all begin with a
wildcard (`*x1*`, `*x2*`, ...) share ids pairwise, and a few thousand of them
reach the bound. The patterns from the one this warning marks onwards were not
compared: an unreachable block or an overlap among them goes unreported. Give
globs literal starts of their own (`team-a-*` rather than `*-team-a*`), or
suppress the warning if the policy is generated and its order is meant.",

    // ---- reasons: E04xx / W04xx
    E0401 Error "undeclared reason" =>
"`as NAME` names a reason that is neither built in nor declared. Declare it with
`reason NAME { retryable …; ttl … }` or use a built-in reason.",
    E0402 Error "duplicate reason declaration" =>
"A reason is declared twice; merge the two declarations.",
    E0403 Error "retryable reason stored forever" =>
"A reason that tells the server to retry must not be remembered forever: the retry
would be answered from the store with the same denial, forming exactly the loop
`retryable` is meant to prevent. Give it a duration ttl or make it non-retryable.",
    E0404 Error "`until_reset` on a reason no budget produces" =>
"`ttl until_reset` expires a stored denial when the budget window that produced it
resets. Only budgets have windows that reset, so only a reason a `budget` statement
produces (`policy.budget_exhausted` or one named with `budget … as NAME`) may use it.",
    E0405 Error "unknown reason in a reserved namespace" =>
"The `policy.` and `user.` namespaces belong to mcpolicy's built-in reasons. A
declaration there must redeclare a built-in one; custom reasons use your own
namespace (`acme.too_expensive`).",
    E0406 Error "reason name without a namespace" =>
"Reason names are dotted, like `policy.rate_limit` or `acme.too_big`, so that
servers can tell built-in reasons from a policy's own.",
    E0407 Error "unknown placeholder in message" =>
"Message templates may use `{server}`, `{reason}`, `{limit}`, `{window}`,
`{resetsAt}`, `{retryAfter}` and `{deadline}`. Write `{{` and `}}` for literal braces:
the runtime renders them as `{` and `}`, so `message \"{{server}}\"` shows `{server}`. A lone `}`
and an unclosed `{` are refused too.",
    W0408 Warning "reason does not state its retryability" =>
"A declared reason without `retryable` is not retryable (unknown retryability is
`false`, the cheap direction to be wrong in). Say so explicitly.",
    E0409 Error "reason cannot be produced by this statement" =>
"Only denials can be renamed with `as`. `user.approved` allows and the trim reasons
(`policy.max_scope`, `policy.max_tokens`, `policy.model`) narrow a request; none of
them can be a denial's reason.",
    W0410 Warning "unused reason" =>
"The reason is declared but no statement can produce it. Use it with `as NAME` or
remove it.",
    E0411 Error "property does not apply to this reason" =>
"Trim reasons (`policy.max_scope`, `policy.max_tokens`, `policy.model`) never deny and
are never stored, so `retryable`, `ttl` and `code` mean nothing for them; only
`message` may be set. `policy.consent_cooldown` is built in and fixed: no property
may be set (no block's digest would cover it).",
    E0412 Error "invalid reason name" =>
"A reason name is one or more dotted parts, each an ASCII identifier: a letter or
`_`, then letters, digits or `_` (`acme.too_big`, `policy.rate_limit`). Servers
branch on `data.reason`, so the name stays plain ASCII: no accents, hyphens or
spaces. The help line gives the nearest valid name.",
    E0413 Error "reason belongs to something else" =>
"`as NAME` may name the statement's own built-in reason or a reason of your own
namespace, never another built-in one. `user.denied` and `user.approved` are the
user's answers to a consent prompt, and each `policy.` reason is produced by one
statement (`policy.rate_limit` by `rate`, `policy.budget_exhausted` by `budget`,
…). The runtime relies on those meanings: a stored `user.denied` is replayed as the
user's refusal, a stored `tools` denial is skipped for a request without tools,
and servers branch on `data.reason` (a `policy.budget_exhausted` frame carries
`resetsAt`). Borrowing one makes stored decisions replay wrongly. Declare your own:

    reason acme.tools_off { retryable false; ttl forever }
    server \"x\" { tools off as acme.tools_off }",

    // ---- error codes: E05xx / W05xx
    E0501 Error "error code reserved by JSON-RPC" =>
"JSON-RPC 2.0 defines -32700 (parse error), -32600 (invalid request), -32601
(method not found), -32602 (invalid params) and -32603 (internal error). A policy
denial must not look like a protocol failure.",
    E0502 Error "error code in JSON-RPC's reserved range" =>
"JSON-RPC 2.0 reserves -32768..-32000 for pre-defined errors; only -32099..-32000
is left to implementations (\"server error\"). Pick a code in that band or, under
MCP 2026-07-28, outside the reserved range altogether.",
    E0503 Error "error code used by the MCP revision" =>
"The declared MCP revision gives this code a meaning of its own: 2025-06-18 and
2025-11-25 use -32002 (resource not found); 2025-11-25 uses -32042 (URL
elicitation required); 2026-07-28 reserves -32020..-32099 for the specification
(-32020 HeaderMismatch, -32021 MissingRequiredClientCapability, -32022
UnsupportedProtocolVersion). A client is entitled to parse such a frame's `data`
with the spec's shape.",
    W0504 Warning "error code in a legacy band" =>
"MCP 2026-07-28 calls -32000..-32019 legacy and says new application codes SHOULD
lie outside -32768..-32000. The default `error_code` -32010 is in that band; under
2026-07-28 write an explicit code outside it, such as -31010.",
    E0505 Error "error code means user refusal" =>
"MCP asks clients to answer a user's refusal of sampling with -1; the built-in
`user.denied` uses it. A policy denial with -1 would be indistinguishable from the
user saying no.",
    E0506 Error "error code out of range" =>
"JSON-RPC error codes are integers; mcpolicy keeps them within a 32-bit signed
integer so that every client and language can represent them exactly.",

    W0507 Warning "`user.denied` answers with a code other than -1" =>
"MCP asks clients to answer a user's refusal of sampling with -1, in every
revision mcpolicy knows, and the runtime treats a client's -1 as the user's
refusal (docs/spec/frames.md, \"Codes\"). A redeclared `user.denied` with another
code makes a stored refusal replay as something a server cannot tell from a
policy denial. Write `code -1`, or leave `code` out (the built-in is -1).

    reason user.denied { code -32010 }   # warning
    reason user.denied { ttl 1h }        # ok: the code stays -1",

    // ---- statement semantics: E06xx / W06xx
    W0601 Warning "context scope deprecated in this revision" =>
"MCP 2026-07-28 deprecates `includeContext` `thisServer` and `allServers`: they need
the client's `sampling.context` capability. A request for them from a client that
did not declare it is treated as `max_context none`.",
    W0602 Warning "tools in sampling need MCP 2025-11-25" =>
"Sampling requests carry `tools`/`toolChoice` from MCP 2025-11-25 on; under
2025-06-18 the `tools` statement has no effect.",
    E0603 Error "empty model pattern" =>
"A `models` entry must name a model or a glob such as `claude-*`.",
    W0604 Warning "statement has no effect" =>
"The block says `sampling off`, so every request is denied before this statement
is reached. Remove it, or turn sampling on.",

    // ---- suppressions: W07xx (these two cannot themselves be suppressed)
    W0701 Warning "suppression suppresses nothing" =>
"`# mcpolicy: allow CODE` names a warning that is not reported where the
comment applies: on its line (the whole block when the line ends a block with
`}`), or, for a comment on a line of its own, in the item or statement that
follows (the whole block when a block follows). A stale suppression would
silently hide the warning if it came back, so remove it; `mcpc check --fix`
does.

    server \"a*\" { max_tokens 512 }   # mcpolicy: allow W0305   <- nothing to allow",
    W0702 Warning "suppression names no warning code" =>
"A suppression reads `# mcpolicy: allow CODE[, CODE…] [-- why]`. Each CODE
must be a warning code (`mcpc explain CODE` lists what it means). Errors cannot
be suppressed: a policy with an error is not compiled. W0701 and W0702 cannot
be suppressed either.

    # mcpolicy: allow W0305 -- a-prod is meant to get the a* block
    server \"*-prod\" { sampling off }",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            let prefix = match code.severity() {
                Severity::Error => 'E',
                Severity::Warning => 'W',
            };
            assert!(
                code.as_str().starts_with(prefix),
                "{code} has the wrong letter"
            );
            assert!(!code.explanation().is_empty());
        }
        assert_eq!(Code::parse("e0101"), Some(Code::E0101));
        assert_eq!(Code::parse("X9999"), None);
    }
}
