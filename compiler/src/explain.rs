//! What the operator's commands (`mcpc show`, `mcpc eval --explain`, `mcpc
//! diff`) ask of the compiler: which block a server id selects and why each
//! block before it does not ([`select`]), and where each statement of an
//! effective block comes from ([`effective_statements`]).
//!
//! Provenance is the merge's own account ([`statements::merge_traced`]): the
//! same two merges lowering runs (built-ins ← `defaults` ← server block),
//! each saying which layer every item was taken from. Nothing here compares
//! values after the fact. Block selection is the runtime's
//! (`table::pattern`, `docs/spec/language.md`, "Server patterns"); this
//! module only adds, for a pattern that does not match, which part of it
//! the id fails.

use std::fmt;

use mcpolicy_runtime::table::EffectiveBlock;
use mcpolicy_runtime::table::pattern;

use crate::model::PolicyModel;
use crate::statements::{self, Statement, Taken};
use crate::syntax::{ItemKind, SourceFile, Span, Stmt, StmtKind};

/// Where an effective statement's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The server block at this index states it.
    Server(usize),
    /// The `defaults` block states it.
    Defaults,
    /// Nobody wrote it: the built-in default.
    BuiltIn,
}

/// One item of an effective block, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveStatement {
    /// Which statement.
    pub statement: Statement,
    /// The effective value written back as a statement (`max_tokens 4096`);
    /// `None` when it imposes nothing (an unset limit).
    pub line: Option<String>,
    /// The layer it was taken from.
    pub origin: Origin,
    /// The source statement that states it; `None` for a built-in, or when
    /// the syntax tree does not hold the block the model names.
    pub span: Option<Span>,
}

/// The statements of the block at `entry` (`None`: the `defaults` alone,
/// the table's fallback) with their provenance, in declaration order, one
/// per item (each budget its own, in the effective block's order, which is
/// the order the engine's `Statement::Budget(i)` indexes). `file` is the
/// syntax tree `model` was checked from, for the statements' spans. For
/// many blocks of one policy, build a [`Provenance`] once.
pub fn effective_statements(
    model: &PolicyModel,
    file: &SourceFile,
    entry: Option<usize>,
) -> (EffectiveBlock, Vec<EffectiveStatement>) {
    Provenance::new(model, file).effective_statements(entry)
}

/// The source span of the server block at `entry` (`None`: `defaults`),
/// from its keyword to its `}`.
pub fn block_span(model: &PolicyModel, file: &SourceFile, entry: Option<usize>) -> Option<Span> {
    Provenance::new(model, file).block_span(entry)
}

/// Provenance over one checked policy: its blocks indexed once, so that
/// asking about every block of a large policy stays linear.
#[derive(Debug)]
pub struct Provenance<'a> {
    model: &'a PolicyModel,
    blocks: SourceBlocks<'a>,
    /// The `defaults` layer: built-ins merged with `defaults`, and its trace.
    defaults: (EffectiveBlock, Vec<(Statement, Vec<Taken>)>),
}

impl<'a> Provenance<'a> {
    /// Indexes `file`, the syntax tree `model` was checked from.
    pub fn new(model: &'a PolicyModel, file: &'a SourceFile) -> Self {
        Provenance {
            model,
            blocks: SourceBlocks::of(file, model),
            defaults: statements::merge_traced(&statements::built_in_defaults(), &model.defaults),
        }
    }

    /// The source span of the block at `entry` (`None`: `defaults`).
    pub fn block_span(&self, entry: Option<usize>) -> Option<Span> {
        match entry {
            Some(i) => self.blocks.servers.as_ref()?.get(i).map(|(span, _)| *span),
            None => self.blocks.defaults.map(|(span, _)| span),
        }
    }

    /// See [`effective_statements`].
    pub fn effective_statements(
        &self,
        entry: Option<usize>,
    ) -> (EffectiveBlock, Vec<EffectiveStatement>) {
        let (defaults, defaults_trace) = &self.defaults;
        let server = entry.and_then(|i| self.model.servers.get(i).map(|(_, block)| (i, block)));
        let (block, server_trace) = match server {
            Some((_, partial)) => {
                let (block, trace) = statements::merge_traced(defaults, partial);
                (block, Some(trace))
            }
            None => (defaults.clone(), None),
        };
        let blocks = &self.blocks;
        let lines = statements::effective_lines(&block);
        let mut out = Vec::new();
        for (index, (statement, defaults_taken)) in defaults_trace.iter().enumerate() {
            // Where each item of the `defaults` layer came from.
            let from_defaults = |taken: Taken| match taken {
                Taken::Over(j) => (Origin::Defaults, blocks.nth(None, *statement, j)),
                Taken::Base(_) => (Origin::BuiltIn, None),
            };
            let items: Vec<(Origin, Option<Span>)> = match (&server_trace, server) {
                (Some(trace), Some((i, _))) => trace[index]
                    .1
                    .iter()
                    .map(|taken| match *taken {
                        Taken::Over(j) => (Origin::Server(i), blocks.nth(Some(i), *statement, j)),
                        Taken::Base(k) => defaults_taken
                            .get(k)
                            .copied()
                            .map_or((Origin::BuiltIn, None), from_defaults),
                    })
                    .collect(),
                _ => defaults_taken.iter().copied().map(from_defaults).collect(),
            };
            let written: Vec<&String> = lines
                .iter()
                .filter(|(s, _)| s == statement)
                .map(|(_, line)| line)
                .collect();
            if items.is_empty() {
                // A repeatable statement nobody states has no item: one entry
                // says it is not set.
                out.push(EffectiveStatement {
                    statement: *statement,
                    line: None,
                    origin: Origin::BuiltIn,
                    span: None,
                });
            }
            for (n, (origin, span)) in items.into_iter().enumerate() {
                out.push(EffectiveStatement {
                    statement: *statement,
                    line: written.get(n).map(|line| (*line).clone()),
                    origin,
                    span,
                });
            }
        }
        (block, out)
    }
}

/// The `defaults` and server blocks of the syntax tree, as the model
/// numbers them. The model is checked from the tree, so a policy without
/// errors has its server blocks in the same order; if they ever disagree,
/// no spans are given rather than wrong ones.
#[derive(Debug)]
struct SourceBlocks<'a> {
    defaults: Option<(Span, &'a [Stmt])>,
    servers: Option<Vec<(Span, &'a [Stmt])>>,
}

impl<'a> SourceBlocks<'a> {
    fn of(file: &'a SourceFile, model: &PolicyModel) -> Self {
        let mut defaults = None;
        let mut servers = Vec::new();
        let mut patterns = Vec::new();
        for item in &file.items {
            match &item.kind {
                ItemKind::Defaults(block) if defaults.is_none() => {
                    defaults = Some((item.span, block.stmts.as_slice()));
                }
                ItemKind::Server(decl) => {
                    servers.push((item.span, decl.body.stmts.as_slice()));
                    patterns.push(decl.pattern.value.as_str());
                }
                _ => {}
            }
        }
        let agrees = patterns.len() == model.servers.len()
            && patterns
                .iter()
                .zip(&model.servers)
                .all(|(p, (m, _))| p == m);
        SourceBlocks {
            defaults,
            servers: agrees.then_some(servers),
        }
    }

    /// The `j`-th statement of kind `statement` the block states: the
    /// checker records a block's statements in source order, one item each
    /// (a policy that loads has no duplicate or ill-valued statement).
    fn nth(&self, entry: Option<usize>, statement: Statement, j: usize) -> Option<Span> {
        let stmts = match entry {
            Some(i) => self.servers.as_ref()?.get(i)?.1,
            None => self.defaults?.1,
        };
        stmts
            .iter()
            .filter(|s| matches!(&s.kind, StmtKind::Known(k, _) if *k == statement))
            .nth(j)
            .map(|s| s.span)
    }
}

/// Why a server pattern does not match an id: the first part of the
/// pattern the id fails, reading the pattern as pieces between its `*`s
/// (the first anchored at the start, the last at the end, the others in
/// order between them). Every piece's `?` is any one character.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Mismatch {
    /// A pattern without wildcards is not the id.
    NotTheId,
    /// The id has `len` characters; the pattern needs exactly (no `*`) or
    /// at least `needs`.
    Length {
        /// The id's length in characters.
        len: usize,
        /// What the pattern needs.
        needs: usize,
        /// Whether the pattern has a `*` (then `needs` is a minimum).
        at_least: bool,
    },
    /// Without `*`: the first character (0-based) the id differs at.
    Character {
        /// Its position.
        at: usize,
        /// What the pattern has there.
        expected: char,
        /// What the id has there.
        found: char,
    },
    /// The id does not start with the pattern's first piece.
    Prefix(String),
    /// The id does not end with the pattern's last piece.
    Suffix(String),
    /// A middle piece does not occur between the start piece (and the
    /// pieces before it) and the end piece.
    Missing(String),
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let any = |piece: &str| {
            if piece.contains('?') {
                " (`?` is any one character)"
            } else {
                ""
            }
        };
        match self {
            Mismatch::NotTheId => write!(f, "the id is not this one"),
            Mismatch::Length {
                len,
                needs,
                at_least,
            } => write!(
                f,
                "the id has {len} character{}; the pattern needs {}{needs}",
                if *len == 1 { "" } else { "s" },
                if *at_least { "at least " } else { "exactly " }
            ),
            Mismatch::Character {
                at,
                expected,
                found,
            } => write!(
                f,
                "character {} of the id is `{found}`, the pattern has `{expected}`",
                at + 1
            ),
            Mismatch::Prefix(piece) => {
                write!(f, "the id does not start with `{piece}`{}", any(piece))
            }
            Mismatch::Suffix(piece) => {
                write!(f, "the id does not end with `{piece}`{}", any(piece))
            }
            Mismatch::Missing(piece) => write!(
                f,
                "`{piece}` does not occur in the id where the pattern puts it{}",
                any(piece)
            ),
        }
    }
}

/// One server block the id was tried against and did not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    /// Its index among the server blocks.
    pub entry: usize,
    /// Its pattern (NFC, as the table holds it).
    pub pattern: String,
    /// Why the id does not match it.
    pub mismatch: Mismatch,
}

/// The block a server id selects and the ones it passed on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The server id in NFC, as it is matched.
    pub id: String,
    /// Every block before the selected one, in order.
    pub tried: Vec<Tried>,
    /// The selected server block; `None`: no block matches, the `defaults`
    /// alone govern (the table's fallback).
    pub matched: Option<usize>,
}

/// The first of `patterns` (the table's server patterns, in order) that
/// matches `id`, as the engine selects it (`Table::entry_for`), and for
/// each one before it why it does not match.
pub fn select<'p>(patterns: impl IntoIterator<Item = &'p str>, id: &str) -> Selection {
    let id = pattern::nfc(id).into_owned();
    let mut tried = Vec::new();
    for (entry, p) in patterns.into_iter().enumerate() {
        let p = pattern::nfc(p);
        if pattern::matches(&p, &id) {
            return Selection {
                id,
                tried,
                matched: Some(entry),
            };
        }
        tried.push(Tried {
            entry,
            pattern: p.clone().into_owned(),
            // The runtime said no; the analysis names the failing part.
            mismatch: mismatch(&p, &id).unwrap_or(Mismatch::NotTheId),
        });
    }
    Selection {
        id,
        tried,
        matched: None,
    }
}

/// How many of the nearest patterns `mcpc proxy`, `mcpc show` and `mcpc
/// wrap --list` name when only the `defaults` govern a server id.
pub const CLOSEST: usize = 3;

/// The entries of the `n` patterns nearest `id`, nearest first (ties in
/// file order): what is named when no server block matches an id and only
/// the `defaults` govern it, which is seldom meant (`docs/spec/clients.md`,
/// "Which block governs a server"). A pattern whose longest literal piece (the text between its
/// wildcards) occurs in the id, ignoring case, is nearer than any that does
/// not, and nearer the more of the id it covers: `everything` for
/// `npm:@modelcontextprotocol/server-everything`. Otherwise nearness is the
/// edit similarity of the pattern's literal text to the id, or to the id's
/// last name (after its last `:` or `/`), whichever is higher. The nearest
/// is always named, the others only when their similarity is at least
/// one half.
pub fn closest<'p>(patterns: impl IntoIterator<Item = &'p str>, id: &str, n: usize) -> Vec<usize> {
    let ranked = ranked(patterns, id, n);
    // The nearest is always named; the others only when they are near.
    ranked
        .iter()
        .enumerate()
        .filter(|(rank, (score, _))| *rank == 0 || *score >= NEAR)
        .map(|(_, (_, entry))| *entry)
        .collect()
}

/// The entries of the `n` patterns nearest `id` by the measure of
/// [`closest`], nearest first, however far: what `mcpc show` lists of the
/// blocks an id passed over when they are too many to list.
pub fn nearest<'p>(patterns: impl IntoIterator<Item = &'p str>, id: &str, n: usize) -> Vec<usize> {
    ranked(patterns, id, n)
        .into_iter()
        .map(|(_, entry)| entry)
        .collect()
}

fn ranked<'p>(
    patterns: impl IntoIterator<Item = &'p str>,
    id: &str,
    n: usize,
) -> Vec<(f64, usize)> {
    let id = id.to_lowercase();
    let tail = id.rsplit([':', '/']).next().unwrap_or(&id).to_owned();
    let mut scored: Vec<(f64, usize)> = patterns
        .into_iter()
        .enumerate()
        .map(|(entry, p)| (nearness(&p.to_lowercase(), &id, &tail), entry))
        .collect();
    // Highest score first; equal scores keep file order.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(n);
    scored
}

/// The similarity below which a pattern after the nearest is not named.
const NEAR: f64 = 0.5;

fn nearness(pattern: &str, id: &str, tail: &str) -> f64 {
    let longest = pattern
        .split(['*', '?'])
        .max_by_key(|piece| piece.chars().count())
        .unwrap_or("");
    let id_len = id.chars().count().max(1);
    if longest.chars().count() >= 3 && id.contains(longest) {
        #[allow(clippy::cast_precision_loss, reason = "a ratio of two lengths")]
        return 1.0 + longest.chars().count() as f64 / id_len as f64;
    }
    let literal: String = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?'))
        .collect();
    strsim::normalized_damerau_levenshtein(&literal, id)
        .max(strsim::normalized_damerau_levenshtein(&literal, tail))
}

/// Why `pattern` does not match `id` (both NFC), or `None` when it matches.
/// It reads the pattern the way matching defines it (`*` any run, `?` one
/// character), so it agrees with `table::pattern::matches`; a property
/// test holds the two equal.
pub fn mismatch(pattern: &str, id: &str) -> Option<Mismatch> {
    let text: Vec<char> = id.chars().collect();
    let pieces: Vec<Vec<char>> = pattern.split('*').map(|p| p.chars().collect()).collect();
    let fixed: usize = pieces.iter().map(Vec::len).sum();
    let piece_at = |piece: &[char], at: usize| {
        piece
            .iter()
            .zip(&text[at..])
            .all(|(p, t)| *p == '?' || p == t)
    };
    let show = |piece: &[char]| piece.iter().collect::<String>();
    if pieces.len() == 1 {
        let only = &pieces[0];
        if !only.contains(&'?') {
            return (pattern != id).then_some(Mismatch::NotTheId);
        }
        if text.len() != only.len() {
            return Some(Mismatch::Length {
                len: text.len(),
                needs: only.len(),
                at_least: false,
            });
        }
        return only
            .iter()
            .zip(&text)
            .position(|(p, t)| *p != '?' && p != t)
            .map(|at| Mismatch::Character {
                at,
                expected: only[at],
                found: text[at],
            });
    }
    if text.len() < fixed {
        return Some(Mismatch::Length {
            len: text.len(),
            needs: fixed,
            at_least: true,
        });
    }
    let (first, last) = (&pieces[0], &pieces[pieces.len() - 1]);
    if !piece_at(first, 0) {
        return Some(Mismatch::Prefix(show(first)));
    }
    let end = text.len() - last.len();
    if !piece_at(last, end) {
        return Some(Mismatch::Suffix(show(last)));
    }
    // Middle pieces, each at its leftmost place after the one before: the
    // leftmost place leaves the most room for the rest, so this finds a
    // match whenever there is one.
    let mut at = first.len();
    for piece in &pieces[1..pieces.len() - 1] {
        let found = (at..=end)
            .take_while(|start| start + piece.len() <= end)
            .find(|start| piece_at(piece, *start));
        match found {
            Some(start) => at = start + piece.len(),
            None => return Some(Mismatch::Missing(show(piece))),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(2048);
        ProptestConfig {
            cases,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// The explanation is honest: it finds a failing part exactly when
        /// the runtime's matcher says the pattern does not match.
        #[test]
        fn mismatch_agrees_with_the_runtime(
            pattern in "[ab*?é]{0,8}",
            id in "[abé]{0,8}",
        ) {
            let found = mismatch(&pattern, &id);
            prop_assert_eq!(found.is_none(), pattern::matches(&pattern, &id), "{:?}", found);
        }

        /// `select` picks the entry `Table::entry_for` picks.
        #[test]
        fn select_is_the_engines_choice(
            patterns in proptest::collection::vec("[ab*?]{0,4}", 0..5),
            id in "[ab]{0,5}",
        ) {
            let selection = select(patterns.iter().map(String::as_str), &id);
            let expected = patterns.iter().position(|p| pattern::matches(p, &id));
            prop_assert_eq!(selection.matched, expected);
            prop_assert_eq!(selection.tried.len(), expected.unwrap_or(patterns.len()));
        }
    }

    #[test]
    fn the_closest_pattern_is_the_one_the_id_contains() {
        let patterns = [
            "github-*",
            "everything",
            "server-every*",
            "everything-else",
            "slack",
        ];
        let id = "npm:@modelcontextprotocol/server-everything";
        assert_eq!(select(patterns, id).matched, None);
        // Both contained, the one covering more of the id first; the far
        // ones (`github-*`, `everything-else`) are not named.
        assert_eq!(closest(patterns, id, CLOSEST), [2, 1]);
        assert_eq!(nearest(patterns, id, 5).len(), 5);
        // A typo is near by edit distance.
        assert_eq!(closest(patterns, "slak", 1), [4]);
        assert!(closest([], "x", CLOSEST).is_empty());
    }

    proptest! {
        #![proptest_config(config())]

        /// With server blocks there is always a closest pattern and never
        /// more than asked; when a pattern's literal piece occurs in the id,
        /// such a pattern is named first.
        #[test]
        fn closest_is_bounded_and_prefers_a_contained_name(
            patterns in proptest::collection::vec("[a-d*]{1,6}", 1..20),
            prefix in "[a-z:/@]{0,8}",
            pick in any::<proptest::sample::Index>(),
        ) {
            let named = pick.get(&patterns).replace('*', "");
            let id = format!("{prefix}{named}");
            let found = closest(patterns.iter().map(String::as_str), &id, CLOSEST);
            prop_assert!(!found.is_empty());
            prop_assert!(found.len() <= CLOSEST);
            let lower = id.to_lowercase();
            let contained = |p: &str| nearness(&p.to_lowercase(), &lower, &lower) > 1.0;
            if patterns.iter().any(|p| contained(p)) {
                prop_assert!(contained(&patterns[found[0]]));
            }
        }
    }

    fn statement() -> impl Strategy<Value = &'static str> {
        // Every statement's example from the statement table, and more values.
        let examples = Statement::ALL.iter().map(|s| s.decl().example);
        prop::sample::select(
            examples
                .chain([
                    "sampling off",
                    "tools off",
                    "max_context none",
                    "max_input 32 KiB",
                    "max_tokens 100",
                    "max_tokens 200",
                    "rate 5 per 1m",
                    "budget 5 requests per day",
                    "budget 7 requests per day",
                    "budget 9 tokens per day",
                    "budget 11 tokens per 1h",
                    "deadline 20s",
                    "consent never",
                    "models \"claude-*\"",
                ])
                .collect::<Vec<_>>(),
        )
    }

    /// A block's text: statements without a repeated key.
    fn block() -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(statement(), 0..6).prop_map(|stmts| {
            let mut keys = Vec::new();
            stmts
                .into_iter()
                .filter(|s| {
                    let words: Vec<&str> = s.split_whitespace().collect();
                    let key = match words.as_slice() {
                        ["budget", _, metric, _, window] => format!("{metric} {window}"),
                        [keyword, ..] => (*keyword).to_owned(),
                        [] => String::new(),
                    };
                    let fresh = !keys.contains(&key);
                    keys.push(key);
                    fresh
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(config())]

        /// On random policies, provenance agrees with lowering and with an
        /// oracle read off the text: a statement comes from the server block
        /// when that block states it (a budget: one of its metric and
        /// window), else from `defaults` when it states it, else built in;
        /// each span is a statement of that keyword inside the block named.
        #[test]
        fn provenance_agrees_with_lowering_and_the_text(
            defaults in block(),
            servers in prop::collection::vec(block(), 0..4),
        ) {
            let mut text = String::from("mcpolicy 1\n\ndefaults {\n");
            for s in &defaults {
                text.push_str(&format!("  {s}\n"));
            }
            text.push_str("}\n");
            for (i, stmts) in servers.iter().enumerate() {
                text.push_str(&format!("\nserver \"s{i}\" {{\n"));
                for s in stmts {
                    text.push_str(&format!("  {s}\n"));
                }
                text.push_str("}\n");
            }
            let parsed = crate::parse::parse(&text);
            let model = crate::check::check(&parsed.file).model;
            let table = crate::lower::lower(&model);
            let key = |line: &str| -> String {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["budget", _, metric, _, window, ..] => format!("budget {metric} {window}"),
                    [keyword, ..] => (*keyword).to_owned(),
                    [] => String::new(),
                }
            };
            let states = |stmts: &[&str], line: &str| stmts.iter().any(|s| key(s) == key(line));
            for entry in (0..servers.len()).map(Some).chain([None]) {
                let (block, stmts) = effective_statements(&model, &parsed.file, entry);
                let lowered = entry.map_or(&table.fallback, |i| &table.servers[i]);
                prop_assert_eq!(&block, &lowered.block);
                let lines: Vec<String> = stmts.iter().filter_map(|s| s.line.clone()).collect();
                let expected: Vec<String> = statements::effective_lines(&block)
                    .into_iter()
                    .map(|(_, l)| l)
                    .collect();
                prop_assert_eq!(lines, expected);
                for s in &stmts {
                    let Some(line) = &s.line else {
                        prop_assert_eq!(s.origin, Origin::BuiltIn);
                        continue;
                    };
                    let own = entry.is_some_and(|i| states(&servers[i], line));
                    let expected = if own {
                        Origin::Server(entry.unwrap_or_default())
                    } else if states(&defaults, line) {
                        Origin::Defaults
                    } else {
                        Origin::BuiltIn
                    };
                    prop_assert_eq!(s.origin, expected, "{}\n{}", text, line);
                    match (s.origin, s.span) {
                        (Origin::BuiltIn, span) => prop_assert_eq!(span, None),
                        (origin, Some(span)) => {
                            let written = &text[span.start..span.end];
                            prop_assert!(written.starts_with(s.statement.keyword()));
                            let within = block_span(
                                &model,
                                &parsed.file,
                                match origin { Origin::Server(i) => Some(i), _ => None },
                            )
                            .expect("block span");
                            prop_assert!(within.start < span.start && span.end <= within.end);
                        }
                        (_, None) => return Err(TestCaseError::fail("a stated statement without a span")),
                    }
                }
            }
        }
    }

    #[test]
    fn mismatches_name_the_failing_part() {
        let cases = [
            ("github-actions", "github-x", "the id is not this one"),
            (
                "github-*",
                "internal-x",
                "the id does not start with `github-`",
            ),
            ("*-prod", "api-dev", "the id does not end with `-prod`"),
            (
                "a*mid*z",
                "a-x-z",
                "`mid` does not occur in the id where the pattern puts it",
            ),
            (
                "a??",
                "ab",
                "the id has 2 characters; the pattern needs exactly 3",
            ),
            (
                "ab*cd",
                "abc",
                "the id has 3 characters; the pattern needs at least 4",
            ),
            (
                "a?c",
                "abd",
                "character 3 of the id is `d`, the pattern has `c`",
            ),
        ];
        for (p, id, expected) in cases {
            assert_eq!(
                mismatch(p, id).map(|m| m.to_string()).as_deref(),
                Some(expected),
                "{p} {id}"
            );
        }
        assert_eq!(mismatch("github-*", "github-x"), None);
    }

    /// Provenance is the merge's: every layer is named, budgets by key.
    #[test]
    fn provenance_names_each_layer() {
        let text = "mcpolicy 1\n\ndefaults {\n  max_tokens 100\n  budget 5 requests per day\n  budget 9 tokens per day\n}\n\nserver \"a\" {\n  max_tokens 50\n  budget 7 requests per day\n}\n";
        let parsed = crate::parse::parse(text);
        let model = crate::check::check(&parsed.file).model;
        let (block, stmts) = effective_statements(&model, &parsed.file, Some(0));
        assert_eq!(block, crate::lower::lower(&model).servers[0].block);
        let shown: Vec<(Option<&str>, Origin, Option<&str>)> = stmts
            .iter()
            .map(|s| {
                (
                    s.line.as_deref(),
                    s.origin,
                    s.span.map(|sp| &text[sp.start..sp.end]),
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                (Some("sampling on"), Origin::BuiltIn, None),
                (Some("tools on"), Origin::BuiltIn, None),
                (Some("max_context allServers"), Origin::BuiltIn, None),
                (None, Origin::BuiltIn, None),
                (None, Origin::BuiltIn, None),
                (
                    Some("max_tokens 50"),
                    Origin::Server(0),
                    Some("max_tokens 50")
                ),
                (None, Origin::BuiltIn, None),
                (
                    Some("budget 9 tokens per day"),
                    Origin::Defaults,
                    Some("budget 9 tokens per day")
                ),
                (
                    Some("budget 7 requests per day"),
                    Origin::Server(0),
                    Some("budget 7 requests per day")
                ),
                (None, Origin::BuiltIn, None),
                (Some("consent first"), Origin::BuiltIn, None),
                (None, Origin::BuiltIn, None),
                // `retry_alert`, unset: the runtime's built-in 40 per 10m.
                (None, Origin::BuiltIn, None),
            ]
        );
    }
}
