//! Server patterns: empty, duplicate, unreachable (shadowed by earlier
//! blocks; the first matching block wins) and overlapping globs.
//!
//! The comparisons are bounded (`docs/spec/language.md`, "Server
//! patterns"): each pattern is compared only with the earlier globs whose
//! literal start agrees with its own (a trie of starts), and the whole
//! file's comparisons share one allowance of search work ([`GLOB_WORK`]).
//! When it runs out, the patterns left are not compared and one W0306 says
//! so at the first of them, so no policy makes `mcpc check`, `compile`, the
//! proxy's start or the editor wait on it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use mcpolicy_runtime::table::pattern as glob;

use super::Checker;
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::syntax::{ServerDecl, Span};

/// The search work one file's pattern comparisons may do, in units of about
/// one state of a search or one candidate read (tens of nanoseconds each in
/// a release build; about 0.3 s of CPU when all of it is spent). The
/// 10,000-server generated policy spends a small part of it; about 900
/// globs that all share ids (`*x000123z*`) exhaust it.
pub(crate) const GLOB_WORK: usize = 4_000_000;

/// What is left of [`GLOB_WORK`].
pub(crate) struct Work {
    left: usize,
}

impl Work {
    pub(crate) fn new(units: usize) -> Self {
        Work { left: units }
    }

    /// Takes `units` of work; `None` (and nothing left) when fewer remain.
    fn spend(&mut self, units: usize) -> Option<()> {
        match self.left.checked_sub(units) {
            Some(left) if left > 0 => {
                self.left = left;
                Some(())
            }
            _ => {
                self.left = 0;
                None
            }
        }
    }

    fn exhausted(&self) -> bool {
        self.left == 0
    }
}

/// A glob that may apply (not a duplicate, not unreachable).
#[derive(Clone, Copy)]
struct Glob<'a> {
    pattern: &'a str,
    span: Span,
    /// [`literal_prefix`] and [`literal_suffix`], read once.
    start: &'a str,
    end: &'a str,
}

/// The earlier blocks, indexed so that each pattern meets only those that
/// can share an id with it.
#[derive(Default)]
struct Earlier<'a> {
    exact: BTreeMap<&'a str, Span>,
    all_globs: HashMap<&'a str, Span>,
    /// The globs that may apply, in order.
    globs: Vec<Glob<'a>>,
    /// A trie of the globs' literal starts: `(node, character)` → node;
    /// node 0 is the empty start.
    edges: HashMap<(usize, char), usize>,
    /// The globs (indexes into `globs`) whose start ends at each node.
    at_node: Vec<Vec<usize>>,
    /// Every glob's start, sorted, for the starts that extend a given one.
    starts: BTreeSet<(&'a str, usize)>,
}

impl<'a> Earlier<'a> {
    fn add_glob(&mut self, glob: Glob<'a>) {
        let index = self.globs.len();
        if self.at_node.is_empty() {
            self.at_node.push(Vec::new());
        }
        let mut node = 0;
        for c in glob.start.chars() {
            let next = self.at_node.len();
            node = *self.edges.entry((node, c)).or_insert(next);
            if node == next {
                self.at_node.push(Vec::new());
            }
        }
        self.at_node[node].push(index);
        self.starts.insert((glob.start, index));
        self.all_globs.insert(glob.pattern, glob.span);
        self.globs.push(glob);
    }

    /// The globs whose start is a prefix of `text` (equal included): a walk
    /// down the trie, one step per character of `text` at most.
    fn starting(&self, text: &str, work: &mut Work) -> Option<Vec<usize>> {
        let mut found = Vec::new();
        let mut node = 0;
        let mut chars = text.chars();
        loop {
            let here = self.at_node.get(node).map_or(&[][..], Vec::as_slice);
            work.spend(1 + here.len())?;
            found.extend_from_slice(here);
            match chars.next().and_then(|c| self.edges.get(&(node, c))) {
                Some(next) => node = *next,
                None => return Some(found),
            }
        }
    }

    /// The globs whose start strictly extends `start`.
    fn extending(&self, start: &str, work: &mut Work) -> Option<Vec<usize>> {
        let mut found = Vec::new();
        for (other, i) in self
            .starts
            .range((start, 0)..)
            .take_while(|(s, _)| s.starts_with(start))
        {
            work.spend(1)?;
            if other.len() > start.len() {
                found.push(*i);
            }
        }
        Some(found)
    }
}

/// How a glob compares with the blocks before it.
enum Compared<'a> {
    /// The earlier blocks that together match every id it matches.
    Unreachable(Vec<(&'a str, Span)>),
    /// It may apply; the first earlier glob it overlaps, with a shortest id
    /// both match.
    Reachable(Option<(Glob<'a>, String)>),
}

/// Checks every pattern against those before it, calling `interrupt`
/// before each (the editor's check unwinds there when an edit cancels it).
///
/// Patterns are compared in NFC, as the runtime matches them; a pattern
/// written in another form gets W0304 with its NFC spelling.
pub(super) fn check_patterns(checker: &mut Checker, servers: &[&ServerDecl], interrupt: &dyn Fn()) {
    let normalized: Vec<Cow<'_, str>> = servers
        .iter()
        .map(|server| glob::nfc(&server.pattern.value))
        .collect();
    let mut earlier = Earlier::default();
    let mut work = Work::new(GLOB_WORK);
    // The first pattern left uncompared, and how many were.
    let mut uncompared: Option<(Span, usize)> = None;
    for (server, pattern) in servers.iter().zip(&normalized) {
        interrupt();
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
        let is_glob = glob::is_glob(pattern);
        let first_seen = if is_glob {
            earlier.all_globs.get(pattern)
        } else {
            earlier.exact.get(pattern)
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
        let compared = if uncompared.is_some() {
            None
        } else if is_glob {
            compare_glob(pattern, &earlier, &mut work)
        } else {
            covering_glob(pattern, &earlier, &mut work).map(|outer| match outer {
                Some(outer) => Compared::Unreachable(vec![(outer.pattern, outer.span)]),
                None => Compared::Reachable(None),
            })
        };
        let glob = Glob {
            pattern,
            span,
            start: literal_prefix(pattern),
            end: literal_suffix(pattern),
        };
        match compared {
            Some(Compared::Unreachable(outer)) => {
                checker.push(unreachable(pattern, span, &outer));
                continue;
            }
            Some(Compared::Reachable(overlap)) => {
                if let Some((first, witness)) = overlap {
                    checker.push(overlaps(first, glob, &witness));
                }
            }
            None => {
                let (_, count) = uncompared.get_or_insert((span, 0));
                *count += 1;
            }
        }
        if is_glob {
            earlier.add_glob(glob);
        } else {
            earlier.exact.insert(pattern, span);
        }
    }
    if let Some((span, count)) = uncompared {
        checker.push(not_compared(span, count));
    }
}

/// The first earlier glob that matches the id `id`; `None` when the work
/// ran out.
fn covering_glob<'a>(id: &str, earlier: &Earlier<'a>, work: &mut Work) -> Option<Option<Glob<'a>>> {
    // Only a glob whose literal start begins the id can match it.
    let mut candidates = earlier.starting(id, work)?;
    candidates.sort_unstable();
    for i in candidates {
        let outer = earlier.globs[i];
        work.spend(1 + id.len() / 16)?;
        if glob::matches(outer.pattern, id) {
            return Some(Some(outer));
        }
    }
    Some(None)
}

/// Compares the glob `pattern` with the earlier blocks; `None` when the
/// work ran out first.
fn compare_glob<'a>(
    pattern: &'a str,
    earlier: &Earlier<'a>,
    work: &mut Work,
) -> Option<Compared<'a>> {
    let (start, end) = (literal_prefix(pattern), literal_suffix(pattern));
    // Two globs share an id only if one's literal start begins the other's:
    // the earlier starts that begin this one's, and those that extend it.
    let mut before = earlier.starting(start, work)?;
    before.sort_unstable();
    // The quick, sound test first: an earlier glob that covers it has a
    // start that begins its own.
    for &i in &before {
        let outer = earlier.globs[i];
        work.spend(1 + (outer.pattern.len() + pattern.len()) / 16)?;
        if glob::covers(outer.pattern, pattern) {
            return Some(Compared::Unreachable(vec![(outer.pattern, outer.span)]));
        }
    }
    // `covers` is sound, not complete (`?*` covers `*a`): the exact test,
    // on the globs whose start and end are no longer than its own.
    let own_sample = sample(pattern);
    for &i in &before {
        let q = earlier.globs[i];
        if end.ends_with(q.end)
            && only_in_sampled(pattern, &own_sample, q.pattern, work)? == Some(false)
        {
            return Some(Compared::Unreachable(vec![(q.pattern, q.span)]));
        }
    }
    let mut candidates = before;
    candidates.extend(earlier.extending(start, work)?);
    candidates.sort_unstable();
    // Likewise for their literal ends.
    candidates.retain(|&i| {
        let q = earlier.globs[i].end;
        end.ends_with(q) || q.ends_with(end)
    });
    let mut near: Vec<(Glob<'a>, String)> = Vec::new();
    let mut rest = candidates.into_iter();
    // The earlier globs that share an id with it, up to one more than
    // several blocks are ever taken together.
    for i in rest.by_ref() {
        let q = earlier.globs[i];
        if let Some(witness) = overlap_witness(q.pattern, pattern, work) {
            near.push((q, witness));
            if near.len() > MAX_UNION {
                break;
            }
        }
        if work.exhausted() {
            return None;
        }
    }
    if near.len() <= MAX_UNION
        && let Some(shadow) = shadowed_together(pattern, start, &near, earlier, work)
    {
        return Some(Compared::Unreachable(shadow));
    }
    if work.exhausted() {
        return None;
    }
    // W0305 with the first earlier glob that shares ids with it, neither
    // covering the other. `covers` is sound, not complete: warn only when
    // each glob surely matches an id the other does not.
    let mut found = near.into_iter();
    loop {
        let (q, witness) = match found.next() {
            Some(near) => near,
            None => {
                let Some(i) = rest.next() else {
                    break;
                };
                let q = earlier.globs[i];
                match overlap_witness(q.pattern, pattern, work) {
                    Some(witness) => (q, witness),
                    None if work.exhausted() => return None,
                    None => continue,
                }
            }
        };
        work.spend(1 + (q.pattern.len() + pattern.len()) / 16)?;
        if glob::covers(pattern, q.pattern) || glob::covers(q.pattern, pattern) {
            continue;
        }
        if only_in_sampled(q.pattern, &sample(q.pattern), pattern, work)? == Some(true)
            && only_in_sampled(pattern, &own_sample, q.pattern, work)? == Some(true)
        {
            return Some(Compared::Reachable(Some((q, witness))));
        }
    }
    Some(Compared::Reachable(None))
}

/// One id the glob matches: its stars empty, each `?` a character no
/// pattern is likely to name.
fn sample(glob: &str) -> String {
    glob.chars()
        .filter(|c| *c != '*')
        .map(|c| if c == '?' { '\u{e000}' } else { c })
        .collect()
}

/// [`only_in`]`(p, q)`, cheaply when `p`'s [`sample`] is itself an id
/// that `q` does not match. `None` when the work ran out.
fn only_in_sampled(p: &str, sample: &str, q: &str, work: &mut Work) -> Option<Option<bool>> {
    work.spend(1 + (sample.len() + q.len()) / 16)?;
    if !glob::matches(q, sample) {
        return Some(Some(true));
    }
    let answer = only_in(p, q, work);
    (!work.exhausted()).then_some(answer)
}

/// The most earlier blocks [`shadowed_together`] takes together; past it,
/// a block covered only by many blocks at once goes unreported.
const MAX_UNION: usize = 16;

/// The earlier globs and ids that together match every id the glob
/// `pattern` matches. `near` holds every earlier glob that shares an id
/// with it (in order, at most [`MAX_UNION`]).
fn shadowed_together<'a>(
    pattern: &str,
    start: &str,
    near: &[(Glob<'a>, String)],
    earlier: &Earlier<'a>,
    work: &mut Work,
) -> Option<Vec<(&'a str, Span)>> {
    // A glob matches infinitely many ids (`?` and `*` take any character),
    // so finitely many earlier ids never cover it alone.
    if near.len() < 2 && (near.is_empty() || earlier.exact.is_empty()) {
        return None;
    }
    let mut union: Vec<(&str, Span)> = near.iter().map(|(q, _)| (q.pattern, q.span)).collect();
    // The ids it matches begin with its literal start.
    for (id, span) in earlier
        .exact
        .range::<str, _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
        .take_while(|(id, _)| id.starts_with(start))
    {
        work.spend(1 + id.len() / 16)?;
        if glob::matches(pattern, id) {
            if union.len() >= MAX_UNION {
                return None;
            }
            union.push((id, *span));
        }
    }
    union.sort_by_key(|(_, span)| span.start);
    let patterns: Vec<&str> = union.iter().map(|(q, _)| *q).collect();
    (only_in_any(pattern, &patterns, work) == Some(false)).then_some(union)
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

/// W0305: two globs that both match some id, neither covering the other. The
/// first one wins that id, which the author of the second may not expect.
/// A later glob covered by an earlier one is E0302; an earlier glob covered
/// by a later one is the usual order (specific first). Each glob is warned
/// once, with the first earlier glob it overlaps, so the findings grow with
/// the globs, not with their pairs.
fn overlaps(first: Glob<'_>, second: Glob<'_>, witness: &str) -> Diagnostic {
    let (a, b) = (first.pattern, second.pattern);
    Diagnostic::new(
        Code::W0305,
        second.span,
        format!("`{b}` overlaps `{a}` above: an id such as `{witness}` matches both and goes to `{a}`"),
        format!("`{witness}` never gets this block"),
    )
    .related(first.span, format!("`{a}` matches `{witness}` first"))
    .help(format!(
        "if `{witness}` belongs here, add a block for it (or a narrower glob) above `{a}`; otherwise make the globs disjoint"
    ))
}

/// W0306: the comparisons' work ran out at this pattern; it and the
/// `count` patterns from here on (itself included) were not compared with
/// the globs above them.
fn not_compared(span: Span, count: usize) -> Diagnostic {
    let patterns = if count == 1 {
        "this pattern was".to_owned()
    } else {
        format!("this pattern and the {} after it were", count - 1)
    };
    Diagnostic::new(
        Code::W0306,
        span,
        format!(
            "{patterns} not compared with the globs above them for E0302 and W0305: the comparison's allowance of work ran out"
        ),
        "not compared from here on",
    )
    .help(
        "give globs literal starts of their own (`team-a-*` rather than `*-team-a*`): a glob is compared only with those whose starts agree",
    )
}

/// The text before a glob's first wildcard. `covers(outer, inner)` matches
/// these characters one for one against `inner`'s first ones, so an `inner`
/// that does not start with them is never covered.
fn literal_prefix(glob: &str) -> &str {
    glob.find(['*', '?']).map_or(glob, |at| &glob[..at])
}

/// The text after a glob's last wildcard.
fn literal_suffix(glob: &str) -> &str {
    glob.rfind(['*', '?']).map_or(glob, |at| &glob[at + 1..])
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
/// wildcards the id reads `x`. Spends one unit of `work` per state it
/// allocates; `None` also when the work ran out.
pub(crate) fn overlap_witness(a: &str, b: &str, work: &mut Work) -> Option<String> {
    let (a, b) = (atoms(a), atoms(b));
    let width = b.len() + 1;
    let states = (a.len() + 1).checked_mul(width)?;
    if states > MAX_STATES {
        return None;
    }
    work.spend(states)?;
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
/// large to finish (patterns over 127 characters, too many states, or the
/// work ran out).
pub(crate) fn only_in(p: &str, q: &str, work: &mut Work) -> Option<bool> {
    only_in_any(p, &[q], work)
}

/// Whether some id matches `p` and none of `qs`; `None` when the search is
/// too large to finish (patterns over 127 characters, too many states, or
/// the work ran out).
///
/// The globs run as sets of positions (a `*` may be skipped) over an
/// alphabet of their literal characters plus one character none names,
/// which stands for every other: ids differing only in such characters are
/// matched alike. A breadth-first search over tuples of position sets finds
/// a state where `p` has matched and no `q` has, if one is reachable.
pub(crate) fn only_in_any(p: &str, qs: &[&str], work: &mut Work) -> Option<bool> {
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
    // What one state costs: a step of every pattern on every character.
    let per_state = alphabet.len() * (1 + qs.len());
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
                work.spend(per_state)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn free() -> Work {
        Work::new(usize::MAX)
    }

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
        assert_eq!(
            overlap_witness("a*", "*b", &mut free()).as_deref(),
            Some("ab")
        );
        assert_eq!(overlap_witness("a*", "b*", &mut free()), None);
        assert_eq!(
            overlap_witness("github-*", "*-prod", &mut free()).as_deref(),
            Some("github-prod")
        );
        assert_eq!(only_in("*a", "?*", &mut free()), Some(false));
        assert_eq!(only_in("?*", "*a", &mut free()), Some(true));
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

    /// `n` globs that all begin and end with a wildcard: every pair shares
    /// ids (`x000001zx000002z`), none covers another.
    fn wild_globs(n: usize) -> String {
        let mut text = String::from("mcpolicy 1\n");
        for i in 0..n {
            text.push_str(&format!("server \"*x{i:06}z*\" {{ sampling on }}\n"));
        }
        text
    }

    fn codes(text: &str) -> Vec<Code> {
        let analysis = crate::db::analyze_parsed(&crate::parse::parse(text));
        analysis.diagnostics.iter().map(|d| d.code).collect()
    }

    /// W0305 is said once per glob, never once per pair: 500 such globs
    /// used to give 124,750 warnings.
    #[test]
    fn overlapping_globs_are_warned_once_each() {
        let found = codes(&wild_globs(500));
        let overlaps = found.iter().filter(|c| **c == Code::W0305).count();
        assert!(overlaps < 500, "{overlaps} W0305 for 500 globs");
        assert!(overlaps > 0, "{found:?}");
    }

    /// A hang guard, not a speed target (`docs/performance.md`, "Compiler", has
    /// the figures):
    /// 4,000 globs that all share ids took over a minute in a release build.
    /// The work runs out, and one W0306 marks the first pattern left
    /// uncompared.
    #[test]
    fn globs_that_all_overlap_are_compared_within_the_bound() {
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let text = wild_globs(4000);
            let analysis = crate::db::analyze_parsed(&crate::parse::parse(&text));
            let _ = send.send((text, analysis.diagnostics));
        });
        let (text, found) = receive
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("checked within the bound");
        let summaries: Vec<_> = found.iter().filter(|d| d.code == Code::W0306).collect();
        assert_eq!(summaries.len(), 1, "{:?}", summaries);
        let at = &text[summaries[0].span.start..summaries[0].span.end];
        assert!(at.starts_with("\"*x") && at.ends_with("z*\""), "{at}");
        let overlaps = found.iter().filter(|d| d.code == Code::W0305).count();
        assert!(overlaps < 4000, "{overlaps}");
        // Every pattern after the marked one is counted in its message.
        let line = text[..summaries[0].span.start].matches('\n').count();
        let left = 4000 - line;
        assert!(
            summaries[0]
                .message
                .contains(&format!("the {} after it", left)),
            "{}",
            summaries[0].message
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
            match overlap_witness(&a, &b, &mut free()) {
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

        /// The trie of literal starts drops no earlier glob that shares an
        /// id with a later one.
        #[test]
        fn start_index_keeps_every_overlap(globs in prop::collection::vec("[ab]{0,3}[*?][ab*?]{0,2}", 1..8)) {
            let mut earlier = Earlier::default();
            for (i, g) in globs.iter().enumerate() {
                let start = literal_prefix(g);
                let mut work = free();
                let mut near = earlier.starting(start, &mut work).unwrap_or_default();
                near.extend(earlier.extending(start, &mut work).unwrap_or_default());
                for (j, h) in globs[..i].iter().enumerate() {
                    if overlap_witness(h, g, &mut free()).is_some() {
                        prop_assert!(near.contains(&j), "{} / {}", h, g);
                    }
                }
                let span = Span { start: i, end: i + 1 };
                earlier.add_glob(Glob { pattern: g, span, start, end: literal_suffix(g) });
            }
        }

        /// `only_in` agrees with matching every short id.
        #[test]
        fn only_in_is_exact(a in "[ab*?]{1,4}", b in "[ab*?]{1,4}") {
            let brute = ids(a.len() + b.len() + 1).iter().any(|id| glob::matches(&a, id) && !glob::matches(&b, id));
            prop_assert_eq!(only_in(&a, &b, &mut free()), Some(brute));
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
            let shadow = only_in(&a, &b, &mut free()) == Some(false) || only_in(&b, &a, &mut free()) == Some(false);
            let overlap = overlap_witness(&a, &b, &mut free());
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
