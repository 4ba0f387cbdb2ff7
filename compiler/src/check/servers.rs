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
    // The globs that may apply (not duplicates, not unreachable), in order.
    let mut overlaps: Vec<(&str, Span)> = Vec::new();
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
            checker.push(unreachable(pattern, span, &[(outer, *outer_span)]));
            continue;
        }
        // `covers` is sound, not complete (`?*` covers `*a`): the exact test.
        if glob::is_glob(pattern) {
            // Only a glob whose literal start begins this one's, or one that
            // starts with a wildcard, can share its ids.
            let near: Vec<(&str, Span)> = match first_char {
                Some(c) => globs_wild
                    .iter()
                    .chain(globs_by_first.get(&c).into_iter().flatten())
                    .copied()
                    .collect(),
                None => overlaps.clone(),
            };
            if let Some(earlier) = shadowed_by(pattern, &near, &exact) {
                checker.push(unreachable(pattern, span, &earlier));
                continue;
            }
        }
        if glob::is_glob(pattern) {
            overlaps.push((pattern, span));
            all_globs.insert(pattern, span);
            match first_char {
                Some(c) => globs_by_first.entry(c).or_default().push((pattern, span)),
                None => globs_wild.push((pattern, span)),
            }
        } else {
            exact.insert(pattern, span);
        }
    }
    overlapping_globs(checker, &overlaps);
}

/// The most earlier blocks [`shadowed_by`] takes together; past it, a block
/// covered only by many blocks at once goes unreported.
const MAX_UNION: usize = 16;

/// The earlier blocks that match every id the glob `pattern` matches, when
/// the quick `covers` test missed them: one earlier glob that includes it,
/// or else the earlier globs and ids it overlaps, taken together. `globs`
/// hold every earlier reachable glob that may share an id with it (in any
/// order); `exact` the earlier ids.
fn shadowed_by<'a>(
    pattern: &str,
    globs: &[(&'a str, Span)],
    exact: &HashMap<&'a str, Span>,
) -> Option<Vec<(&'a str, Span)>> {
    let (start, end) = (literal_prefix(pattern), literal_suffix(pattern));
    // Two globs share an id only if one's literal start begins the other's,
    // and likewise for their literal ends.
    let near: Vec<(&str, Span)> = globs
        .iter()
        .copied()
        .filter(|(q, _)| {
            let (qs, qe) = (literal_prefix(q), literal_suffix(q));
            (start.starts_with(qs) || qs.starts_with(start))
                && (end.ends_with(qe) || qe.ends_with(end))
                && overlap_witness(pattern, q).is_some()
        })
        .collect();
    // A glob that includes `pattern` has a start and an end no longer than its own.
    if let Some(&one) = near.iter().find(|(q, _)| {
        start.starts_with(literal_prefix(q))
            && end.ends_with(literal_suffix(q))
            && only_in(pattern, q) == Some(false)
    }) {
        return Some(vec![one]);
    }
    // A glob matches infinitely many ids (`?` and `*` take any character),
    // so finitely many earlier ids never cover it alone.
    if near.len() < 2 && (near.is_empty() || exact.is_empty()) {
        return None;
    }
    if near.len() > MAX_UNION {
        return None;
    }
    let mut union = near;
    for (id, span) in exact {
        if glob::matches(pattern, id) {
            if union.len() >= MAX_UNION {
                return None;
            }
            union.push((id, *span));
        }
    }
    union.sort_by_key(|(_, span)| span.start);
    let patterns: Vec<&str> = union.iter().map(|(q, _)| *q).collect();
    (only_in_any(pattern, &patterns) == Some(false)).then_some(union)
}

/// E0302 for a block whose ids the `earlier` blocks all match.
fn unreachable(pattern: &str, span: Span, earlier: &[(&str, Span)]) -> Diagnostic {
    let [(outer, outer_span)] = earlier else {
        let names: Vec<String> = earlier.iter().map(|(q, _)| format!("`{q}`")).collect();
        let mut d = Diagnostic::new(
            Code::E0302,
            span,
            format!(
                "this block never applies: the blocks above ({}) together match every id `{pattern}` matches",
                names.join(", ")
            ),
            "unreachable",
        );
        for (q, q_span) in earlier {
            d = d.related(*q_span, format!("`{q}` matches some of its ids first"));
        }
        return d.help("move this block above them; the first matching block wins");
    };
    Diagnostic::new(
        Code::E0302,
        span,
        format!(
            "this block never applies: `{outer}` above already matches every id `{pattern}` matches"
        ),
        "unreachable",
    )
    .related(*outer_span, format!("`{outer}` matches first"))
    .help(format!(
        "move this block above the `{outer}` block; the first matching block wins"
    ))
}

/// The most pairs of globs compared for W0305; a policy with more globs that
/// could overlap is generated, and its author is not reading warnings one by
/// one.
const MAX_GLOB_PAIRS: usize = 200_000;

/// W0305: two globs that both match some id, neither covering the other. The
/// first one wins that id, which the author of the second may not expect.
/// A later glob covered by an earlier one is E0302 (already reported); an
/// earlier glob covered by a later one is the usual order (specific first).
///
/// Only globs whose literal starts agree (one a prefix of the other) can
/// share an id, so each glob is paired with those alone: the globs whose
/// start is a prefix of its own (looked up by each prefix) and those whose
/// start extends its own (a range of the sorted starts). A policy of many
/// globs with distinct starts stays near-linear.
fn overlapping_globs(checker: &mut Checker, globs: &[(&str, Span)]) {
    let patterns: Vec<&str> = globs.iter().map(|(g, _)| *g).collect();
    let Some(pairs) = candidate_pairs(&patterns) else {
        return;
    };
    for (i, j) in pairs {
        let ((first, first_span), (second, span)) = (globs[i], globs[j]);
        let (sa, sb) = (literal_suffix(first), literal_suffix(second));
        if !(sa.ends_with(sb) || sb.ends_with(sa)) {
            continue;
        }
        if glob::covers(second, first) || glob::covers(first, second) {
            continue;
        }
        let Some(witness) = overlap_witness(first, second) else {
            continue;
        };
        // `covers` is sound, not complete (`?*` covers `*a`): warn only
        // when each glob surely matches an id the other does not.
        if only_in(first, second) != Some(true) || only_in(second, first) != Some(true) {
            continue;
        }
        checker.push(
            Diagnostic::new(
                Code::W0305,
                span,
                format!("`{second}` overlaps `{first}` above: an id such as `{witness}` matches both and goes to `{first}`"),
                format!("`{witness}` never gets this block"),
            )
            .related(first_span, format!("`{first}` matches `{witness}` first"))
            .help(format!(
                "if `{witness}` belongs here, add a block for it (or a narrower glob) above `{first}`; otherwise make the globs disjoint"
            )),
        );
    }
}

/// The pairs `(i, j)`, `i < j`, of globs whose literal starts agree, the
/// only ones that can share an id; `None` when there are more than
/// [`MAX_GLOB_PAIRS`].
fn candidate_pairs(globs: &[&str]) -> Option<Vec<(usize, usize)>> {
    let starts: Vec<&str> = globs.iter().map(|g| literal_prefix(g)).collect();
    let mut by_start: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, start) in starts.iter().enumerate() {
        by_start.entry(start).or_default().push(i);
    }
    let mut sorted: Vec<(&str, usize)> = starts.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (i, start) in starts.iter().enumerate() {
        // Globs whose start is a prefix of this one's (including equal).
        for cut in (0..=start.len()).filter(|c| start.is_char_boundary(*c)) {
            if let Some(found) = by_start.get(&start[..cut]) {
                pairs.extend(
                    found
                        .iter()
                        .filter(|j| **j != i)
                        .map(|j| (i.min(*j), i.max(*j))),
                );
            }
        }
        // Globs whose start strictly extends this one's.
        let from = sorted.partition_point(|(s, _)| *s <= *start);
        for (other, j) in sorted[from..]
            .iter()
            .take_while(|(s, _)| s.starts_with(start))
        {
            if other.len() > start.len() {
                pairs.push((i.min(*j), i.max(*j)));
            }
        }
        if pairs.len() > 2 * MAX_GLOB_PAIRS {
            return None;
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    Some(pairs)
}

/// One glob item: `*`, `?` or a literal character.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Atom {
    Run,
    One,
    Char(char),
}

fn atoms(pattern: &str) -> Vec<Atom> {
    pattern
        .chars()
        .map(|c| match c {
            '*' => Atom::Run,
            '?' => Atom::One,
            c => Atom::Char(c),
        })
        .collect()
}

/// The most states the witness search visits; patterns are short, and a
/// pair of 1,000-character globs is not worth a warning's cost.
const MAX_STATES: usize = 1 << 20;

/// A shortest id both globs match, if there is one: a search over pairs of
/// positions in the two patterns, where a `*` may be skipped (it matched
/// nothing more) and each step reads one character that both positions
/// accept. A literal must be matched as written; where both sides are
/// wildcards the id reads `x`.
pub(crate) fn overlap_witness(a: &str, b: &str) -> Option<String> {
    let (a, b) = (atoms(a), atoms(b));
    let width = b.len() + 1;
    let states = (a.len() + 1).checked_mul(width)?;
    if states > MAX_STATES {
        return None;
    }
    // Breadth-first by characters read, with skips of `*` free (0-1 BFS):
    // the first time the end of both patterns is reached, the id is shortest.
    let mut parent: Vec<Option<(usize, Option<char>)>> = vec![None; states];
    let mut seen = vec![false; states];
    let mut queue = std::collections::VecDeque::new();
    queue.push_back(0usize);
    seen[0] = true;
    let goal = a.len() * width + b.len();
    while let Some(state) = queue.pop_front() {
        if state == goal {
            let mut id = Vec::new();
            let mut at = state;
            while let Some((from, c)) = parent[at] {
                id.extend(c);
                at = from;
            }
            id.reverse();
            return Some(id.into_iter().collect());
        }
        let (i, j) = (state / width, state % width);
        let (x, y) = (a.get(i).copied(), b.get(j).copied());
        let mut visit =
            |next: usize, c: Option<char>, queue: &mut std::collections::VecDeque<usize>| {
                if !seen[next] {
                    seen[next] = true;
                    parent[next] = Some((state, c));
                    if c.is_none() {
                        queue.push_front(next);
                    } else {
                        queue.push_back(next);
                    }
                }
            };
        if x == Some(Atom::Run) {
            visit((i + 1) * width + j, None, &mut queue);
        }
        if y == Some(Atom::Run) {
            visit(i * width + j + 1, None, &mut queue);
        }
        let (Some(x), Some(y)) = (x, y) else {
            continue;
        };
        let c = match (x, y) {
            (Atom::Char(p), Atom::Char(q)) if p != q => continue,
            (Atom::Char(p), _) | (_, Atom::Char(p)) => p,
            _ => 'x',
        };
        let ni = if x == Atom::Run { i } else { i + 1 };
        let nj = if y == Atom::Run { j } else { j + 1 };
        visit(ni * width + nj, Some(c), &mut queue);
    }
    None
}

/// The most subset states [`only_in`] explores before giving up.
const MAX_SUBSETS: usize = 4096;

/// Whether some id matches `p` and not `q`; `None` when the search is too
/// large to finish (patterns over 127 characters, or too many states).
pub(crate) fn only_in(p: &str, q: &str) -> Option<bool> {
    only_in_any(p, &[q])
}

/// Whether some id matches `p` and none of `qs`; `None` when the search is
/// too large to finish (patterns over 127 characters, or too many states).
///
/// The globs run as sets of positions (a `*` may be skipped) over an
/// alphabet of their literal characters plus one character none names,
/// which stands for every other: ids differing only in such characters are
/// matched alike. A breadth-first search over tuples of position sets finds
/// a state where `p` has matched and no `q` has, if one is reachable.
pub(crate) fn only_in_any(p: &str, qs: &[&str]) -> Option<bool> {
    let p = atoms(p);
    let qs: Vec<Vec<Atom>> = qs.iter().map(|q| atoms(q)).collect();
    if p.len() >= 128 || qs.iter().any(|q| q.len() >= 128) {
        return None;
    }
    let mut alphabet: Vec<char> = p
        .iter()
        .chain(qs.iter().flatten())
        .filter_map(|a| match a {
            Atom::Char(c) => Some(*c),
            _ => None,
        })
        .collect();
    alphabet.sort_unstable();
    alphabet.dedup();
    let other = ('a'..='z')
        .chain('0'..='9')
        .chain('\u{e000}'..='\u{f8ff}')
        .find(|c| alphabet.binary_search(c).is_err())?;
    alphabet.push(other);
    let start: (u128, Vec<u128>) = (closure(&p, 1), qs.iter().map(|q| closure(q, 1)).collect());
    let mut seen = std::collections::HashSet::from([start.clone()]);
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some((sp, sqs)) = queue.pop_front() {
        if accepts(&p, sp) && !qs.iter().zip(&sqs).any(|(q, sq)| accepts(q, *sq)) {
            return Some(true);
        }
        for &c in &alphabet {
            let np = step(&p, sp, c);
            if np == 0 {
                continue;
            }
            let next = (
                np,
                qs.iter().zip(&sqs).map(|(q, sq)| step(q, *sq, c)).collect(),
            );
            if !seen.contains(&next) {
                if seen.len() >= MAX_SUBSETS {
                    return None;
                }
                seen.insert(next.clone());
                queue.push_back(next);
            }
        }
    }
    Some(false)
}

fn accepts(atoms: &[Atom], set: u128) -> bool {
    set & (1 << atoms.len()) != 0
}

/// `set` with every position reachable by skipping `*`s.
fn closure(atoms: &[Atom], mut set: u128) -> u128 {
    for (i, atom) in atoms.iter().enumerate() {
        if *atom == Atom::Run && set & (1 << i) != 0 {
            set |= 1 << (i + 1);
        }
    }
    set
}

/// The positions after reading `c` from the positions in `set`.
fn step(atoms: &[Atom], set: u128, c: char) -> u128 {
    let mut next = 0u128;
    for (i, atom) in atoms.iter().enumerate() {
        if set & (1 << i) == 0 {
            continue;
        }
        match atom {
            Atom::Run => next |= 1 << i,
            Atom::One => next |= 1 << (i + 1),
            Atom::Char(d) if *d == c => next |= 1 << (i + 1),
            Atom::Char(_) => {}
        }
    }
    closure(atoms, next)
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

/// The text after a glob's last wildcard.
fn literal_suffix(glob: &str) -> &str {
    glob.rfind(['*', '?']).map_or(glob, |at| &glob[at + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(256)
    }

    /// Every id over `ab` of at most `len` characters.
    fn ids(len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..len {
            layer = layer
                .iter()
                .flat_map(|s| ["a", "b", "x"].map(|c| format!("{s}{c}")))
                .collect();
            all.extend(layer.iter().cloned());
        }
        all
    }

    #[test]
    fn the_issue_example() {
        assert_eq!(overlap_witness("a*", "*b").as_deref(), Some("ab"));
        assert_eq!(overlap_witness("a*", "b*"), None);
        assert_eq!(
            overlap_witness("github-*", "*-prod").as_deref(),
            Some("github-prod")
        );
        assert_eq!(only_in("*a", "?*"), Some(false));
        assert_eq!(only_in("?*", "*a"), Some(true));
    }

    /// The blocks of `patterns` (in order) the checker reports as never
    /// applying: E0302, or E0301 for a repeated pattern.
    fn reported_unreachable(patterns: &[String]) -> Vec<bool> {
        let mut text = String::from("mcpolicy 1\n");
        for p in patterns {
            text.push_str(&format!("server \"{p}\" {{ sampling on }}\n"));
        }
        let analysis = crate::db::analyze_parsed(&crate::parse::parse(&text));
        (0..patterns.len())
            .map(|i| {
                analysis.diagnostics.iter().any(|d| {
                    matches!(d.code, Code::E0302 | Code::E0301)
                        && d.span.start > 0
                        && text[..d.span.start].matches('\n').count() == i + 1
                })
            })
            .collect()
    }

    #[test]
    fn covers_misses_are_still_unreachable() {
        // `covers` misses these: every id `*a` matches has a first character.
        assert_eq!(
            reported_unreachable(&["?*".into(), "*a".into()]),
            [false, true]
        );
        // Only the two globs together, or a glob and an id, cover the third.
        assert_eq!(
            reported_unreachable(&["a*".into(), "?b*".into(), "?*".into()]),
            [false, false, false]
        );
        assert_eq!(
            reported_unreachable(&["a*".into(), "*".into(), "b*".into()]),
            [false, false, true]
        );
        assert_eq!(
            reported_unreachable(&["a?*".into(), "a".into(), "a*".into()]),
            [false, false, true]
        );
        assert_eq!(
            reported_unreachable(&["*a".into(), "*b".into(), "b*a".into(), "?*".into()]),
            [false, false, true, false]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// A block is reported as never applying exactly when every id it
        /// matches is matched by an earlier block, one or several together
        /// (brute force over every short id on `a`, `b` and one character
        /// no pattern names).
        #[test]
        fn unreachable_is_exact(patterns in prop::collection::vec("[ab*?]{1,3}", 1..5)) {
            let reported = reported_unreachable(&patterns);
            // A shortest id that only `p` matches is short: 3 characters per pattern
            // of up to 3 would do; 7 was never exceeded in 100,000 cases.
            let all = ids(7);
            for (i, p) in patterns.iter().enumerate() {
                let shadowed = all.iter().filter(|id| glob::matches(p, id)).all(|id| {
                    patterns[..i].iter().any(|q| glob::matches(q, id))
                });
                prop_assert_eq!(reported[i], shadowed, "block {} of {:?}", i, patterns);
            }
        }

        /// A witness matches both globs, and none is found only when no id
        /// (up to a length that bounds the shortest one) matches both.
        #[test]
        fn witness_matches_both_or_none_exists(a in "[ab*?]{1,5}", b in "[ab*?]{1,5}") {
            match overlap_witness(&a, &b) {
                Some(id) => {
                    prop_assert!(glob::matches(&a, &id), "{a} !~ {id}");
                    prop_assert!(glob::matches(&b, &id), "{b} !~ {id}");
                }
                None => {
                    // A shortest common id is no longer than both patterns' lengths together.
                    for id in ids(a.len() + b.len()) {
                        prop_assert!(!(glob::matches(&a, &id) && glob::matches(&b, &id)), "{a} and {b} both match {id}");
                    }
                }
            }
        }

        /// Pairing by literal starts drops no pair that shares an id.
        #[test]
        fn candidate_pairs_keep_every_overlap(globs in prop::collection::vec("[ab]{0,3}[*?][ab*?]{0,2}", 1..8)) {
            let refs: Vec<&str> = globs.iter().map(String::as_str).collect();
            let pairs = candidate_pairs(&refs).unwrap_or_default();
            for i in 0..refs.len() {
                for j in i + 1..refs.len() {
                    if overlap_witness(refs[i], refs[j]).is_some() {
                        prop_assert!(pairs.contains(&(i, j)), "{} / {}", refs[i], refs[j]);
                    }
                }
            }
        }

        /// `only_in` agrees with matching every short id.
        #[test]
        fn only_in_is_exact(a in "[ab*?]{1,4}", b in "[ab*?]{1,4}") {
            let brute = ids(a.len() + b.len() + 1).iter().any(|id| glob::matches(&a, id) && !glob::matches(&b, id));
            prop_assert_eq!(only_in(&a, &b), Some(brute));
        }

        /// The checker warns W0305 exactly when the globs overlap and neither
        /// covers the other; never for disjoint globs, nor when one shadows
        /// the other (E0302, or the usual specific-first order).
        #[test]
        fn lint_only_for_partial_overlaps(a in "[ab]{0,2}[*?][ab*]{0,2}", b in "[ab]{0,2}[*?][ab*]{0,2}") {
            prop_assume!(a != b);
            let text = format!("mcpolicy 1\nserver \"{a}\" {{ sampling on }}\nserver \"{b}\" {{ sampling on }}\n");
            let analysis = crate::db::analyze_parsed(&crate::parse::parse(&text));
            let warned: Vec<_> = analysis.diagnostics.iter().filter(|d| d.code == Code::W0305).collect();
            let shadow = only_in(&a, &b) == Some(false) || only_in(&b, &a) == Some(false);
            let overlap = overlap_witness(&a, &b);
            if shadow || overlap.is_none() {
                prop_assert!(warned.is_empty(), "{a} / {b}: {warned:?}");
            } else {
                prop_assert_eq!(warned.len(), 1, "{} / {}", a, b);
                let witness = overlap.unwrap_or_default();
                let quoted = format!("`{witness}`");
                prop_assert!(warned[0].message.contains(&quoted));
                // Neither really includes the other: each matches an id the other does not.
                let all = ids(a.len() + b.len() + 1);
                prop_assert!(all.iter().any(|id| glob::matches(&a, id) && !glob::matches(&b, id)), "{a} ⊆ {b}");
                prop_assert!(all.iter().any(|id| glob::matches(&b, id) && !glob::matches(&a, id)), "{b} ⊆ {a}");
            }
        }
    }
}
