//! Server patterns: empty, duplicate, and unreachable (shadowed by an earlier
//! glob; the first matching block wins).

use std::collections::HashMap;

use mcpolicy_runtime::glob;

use super::Checker;
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::syntax::{ServerDecl, Span};

/// Checks every pattern against those before it. Exact ids are looked up in
/// a map; globs are bucketed by their first literal character so that a
/// policy of 10,000 exact ids and a few hundred globs stays near-linear.
pub(super) fn check_patterns(checker: &mut Checker, servers: &[&ServerDecl]) {
    let mut exact: HashMap<&str, Span> = HashMap::new();
    let mut globs_by_first: HashMap<char, Vec<(&str, Span)>> = HashMap::new();
    let mut globs_wild: Vec<(&str, Span)> = Vec::new();
    let mut all_globs: HashMap<&str, Span> = HashMap::new();
    for server in servers {
        let pattern = server.pattern.value.as_str();
        let span = server.pattern.span;
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

/// The text before a glob's first wildcard. `covers(outer, inner)` matches
/// these characters one for one against `inner`'s first ones, so an `inner`
/// that does not start with them is never covered: a cheap test that spares
/// `covers` (which allocates) on most pairs without changing its answer.
fn literal_prefix(glob: &str) -> &str {
    glob.find(['*', '?']).map_or(glob, |at| &glob[..at])
}
