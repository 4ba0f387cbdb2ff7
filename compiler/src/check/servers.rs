//! Server patterns: empty, duplicate, and unreachable (shadowed by an earlier
//! glob; the first matching block wins).

use std::borrow::Cow;
use std::collections::HashMap;

use mcpolicy_runtime::table::pattern as glob;

use super::Checker;
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::syntax::{ServerDecl, Span};

/// Checks every pattern against those before it. Exact ids are looked up in
/// a map; globs are bucketed by their first literal character so that a
/// policy of 10,000 exact ids and a few hundred globs stays near-linear.
///
/// Patterns are compared in NFC, as the runtime matches them; a pattern
/// written in another form gets W0304 with its NFC spelling.
pub(super) fn check_patterns(checker: &mut Checker, servers: &[&ServerDecl]) {
    let normalized: Vec<Cow<'_, str>> = servers
        .iter()
        .map(|server| glob::nfc(&server.pattern.value))
        .collect();
    let mut exact: HashMap<&str, Span> = HashMap::new();
    let mut globs_by_first: HashMap<char, Vec<(&str, Span)>> = HashMap::new();
    let mut globs_wild: Vec<(&str, Span)> = Vec::new();
    let mut all_globs: HashMap<&str, Span> = HashMap::new();
    for (server, pattern) in servers.iter().zip(&normalized) {
        let pattern: &str = pattern;
        let span = server.pattern.span;
        if pattern != server.pattern.value {
            checker.push(not_nfc(span, pattern));
        }
        if pattern.is_empty() {
            checker.push(
                Diagnostic::new(
                    Code::E0303,
                    span,
                    "empty server pattern",
                    "matches no server",
                )
                .help(
                    "write the server's id as your client names it, or a glob like `\"github-*\"`",
                ),
            );
            continue;
        }
        let first_seen = if glob::is_glob(pattern) {
            all_globs.get(pattern)
        } else {
            exact.get(pattern)
        };
        if let Some(first) = first_seen {
            checker.push(
                Diagnostic::new(
                    Code::E0301,
                    span,
                    format!("a block for `{pattern}` already exists"),
                    "duplicate block",
                )
                .related(*first, "first block here")
                .help("merge the two blocks into one"),
            );
            continue;
        }
        let first_char = pattern.chars().next().filter(|c| *c != '*' && *c != '?');
        let candidates = globs_wild.iter().chain(
            first_char
                .and_then(|c| globs_by_first.get(&c))
                .into_iter()
                .flatten(),
        );
        if let Some((outer, outer_span)) = candidates.clone().find(|(outer, _)| {
            pattern.starts_with(literal_prefix(outer)) && glob::covers(outer, pattern)
        }) {
            checker.push(
                Diagnostic::new(
                    Code::E0302,
                    span,
                    format!("this block never applies: `{outer}` above already matches every id `{pattern}` matches"),
                    "unreachable",
                )
                .related(*outer_span, format!("`{outer}` matches first"))
                .help(format!("move this block above the `{outer}` block; the first matching block wins")),
            );
            continue;
        }
        if glob::is_glob(pattern) {
            all_globs.insert(pattern, span);
            match first_char {
                Some(c) => globs_by_first.entry(c).or_default().push((pattern, span)),
                None => globs_wild.push((pattern, span)),
            }
        } else {
            exact.insert(pattern, span);
        }
    }
}

/// W0304: the pattern is not in NFC; the help and the fix give its NFC
/// spelling as a string literal.
fn not_nfc(span: Span, nfc: &str) -> Diagnostic {
    let mut literal = String::with_capacity(nfc.len() + 2);
    literal.push('"');
    for c in nfc.chars() {
        match c {
            '"' => literal.push_str("\\\""),
            '\\' => literal.push_str("\\\\"),
            '\n' => literal.push_str("\\n"),
            '\t' => literal.push_str("\\t"),
            c if c.is_control() => literal.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => literal.push(c),
        }
    }
    literal.push('"');
    Diagnostic::new(
        Code::W0304,
        span,
        "the server pattern is not in Unicode NFC; it is matched as its NFC spelling",
        "not in NFC",
    )
    .help(format!("write it in NFC: `server {literal}`"))
    .fix("write the pattern in NFC", span, literal)
}

/// The text before a glob's first wildcard. `covers(outer, inner)` matches
/// these characters one for one against `inner`'s first ones, so an `inner`
/// that does not start with them is never covered: a cheap test that spares
/// `covers` (which allocates) on most pairs without changing its answer.
fn literal_prefix(glob: &str) -> &str {
    glob.find(['*', '?']).map_or(glob, |at| &glob[..at])
}
