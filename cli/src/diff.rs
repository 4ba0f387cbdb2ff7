//! `mcpc diff OLD NEW [--format human|json]`
//!
//! What an edit of a policy does to the decisions a store remembers. A
//! stored decision applies only while its server's effective block keeps
//! its digest (`docs/spec/evaluation.md`, "Step 3: Replay"), so the diff is
//! read from the two compiled tables: server patterns whose digest changes,
//! with the statements (by the statement table's names) and reasons that
//! changed; blocks added, removed or reordered; changes to `defaults` with
//! every block they reach (the compiler's provenance,
//! `mcpolicy_compiler::explain`); and a changed `identity`, which re-keys
//! every request.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;

use mcpolicy_compiler::explain::{self, Origin, Provenance};
use mcpolicy_compiler::line_index::LineIndex;
use mcpolicy_compiler::statements::{self, Statement};
use mcpolicy_runtime::table::{ReasonSpec, ServerEntry, Table, pattern};
use serde_json::{Value, json};

use super::policy::{LoadFailure, PolicySource, load_policy_with_source};
use super::show::Format;
use super::{ColorChoice, emit, fail};

const DIFF_HELP: &str = "\
A decision the store remembers applies only while its server's effective block keeps
its digest. A block is named by its pattern; `defaults` is the block of ids no server
block matches.

JSON (--format json): one object
  old, new      the paths
  invalidates   whether the exit code is 1
  changed       [{block, pattern, old_line, new_line, old_digest, new_digest,
                  statements: [{statement, old: [lines], new: [lines]}],
                  reasons: [{reason, old, new, properties: [{property, old, new}]}]}]:
                  blocks whose digest changes
  added         [{block, pattern, line, digest, was_governed_by, invalidates}]
                  (was_governed_by: the old block of the id, for a pattern without wildcards)
  removed       [{block, pattern, line, digest, now_governed_by}]
  reordered     [{first, second, invalidates}]: pairs whose order flips
  defaults      [{statement, old: [lines], new: [lines], reaches: [blocks]}], or null
                  when either side is a compiled table
  policy        [{setting, old, new}]: protocol, error_code, identity

Exit codes:
  0  nothing stored is invalidated
  1  something is: a block's digest changes, a block is removed, an added or reordered
     block takes ids from a block with another digest, or `identity` changes
  2  usage or I/O error, or either policy fails to check (its diagnostics are printed)";

#[derive(Debug, clap::Args)]
#[command(after_help = DIFF_HELP)]
pub struct Args {
    /// The policy before the edit (`.mcpolicy`, or a compiled table `.json`).
    #[arg(value_name = "OLD")]
    old: String,
    /// The policy after the edit.
    #[arg(value_name = "NEW")]
    new: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

/// One side of the diff.
struct Side {
    path: String,
    table: Table,
    source: Option<PolicySource>,
    /// Each block's line: the server blocks, then `defaults`.
    block_lines: Vec<Option<usize>>,
    /// Each pattern's first server block (a later one is unreachable).
    first: HashMap<String, usize>,
}

impl Side {
    fn load(path: &str, color: ColorChoice) -> Result<Side, ExitCode> {
        match load_policy_with_source(path, color) {
            Ok((policy, source)) => {
                let table = policy.table().clone();
                let count = table.servers.len();
                let block_lines = match &source {
                    Some(s) => {
                        let lines = LineIndex::new(&s.text);
                        let provenance = Provenance::new(&s.model, &s.file);
                        (0..count)
                            .map(Some)
                            .chain([None])
                            .map(|entry| {
                                let span = provenance.block_span(entry)?;
                                Some(lines.position(&s.text, span.start).line)
                            })
                            .collect()
                    }
                    None => vec![None; count + 1],
                };
                let mut first = HashMap::new();
                for (i, entry) in table.servers.iter().enumerate() {
                    first.entry(entry.pattern.clone()).or_insert(i);
                }
                Ok(Side {
                    path: path.to_owned(),
                    table,
                    source,
                    block_lines,
                    first,
                })
            }
            Err(LoadFailure::Usage(message)) => Err(fail(message)),
            // The diagnostics are printed; a policy that does not check
            // cannot be compared.
            Err(LoadFailure::Findings) => Err(fail(format!("{path} does not check"))),
        }
    }

    /// The entry at `entry` (`None`: the fallback).
    fn entry(&self, entry: Option<usize>) -> &ServerEntry {
        entry
            .and_then(|i| self.table.servers.get(i))
            .unwrap_or(&self.table.fallback)
    }

    /// The first server block with `pattern` (later ones are unreachable).
    fn find(&self, pattern: &str) -> Option<usize> {
        self.first.get(pattern).copied()
    }

    fn line(&self, entry: Option<usize>) -> Option<usize> {
        let i = entry.unwrap_or(self.table.servers.len());
        self.block_lines.get(i).copied().flatten()
    }

    /// The block an id selects, as a label.
    fn governing(&self, id: &str) -> Option<usize> {
        explain::select(self.table.servers.iter().map(|e| e.pattern.as_str()), id).matched
    }

    fn label(&self, entry: Option<usize>) -> String {
        match entry {
            Some(_) => format!("server \"{}\"", self.entry(entry).pattern),
            None => "defaults".to_owned(),
        }
    }

    /// Every entry: the server blocks, then the fallback.
    fn entries(&self) -> impl Iterator<Item = Option<usize>> {
        (0..self.table.servers.len()).map(Some).chain([None])
    }
}

/// The diff of two policies, as computed.
struct Diff {
    doc: Value,
    invalidates: bool,
}

pub fn run(args: Args) -> ExitCode {
    let old = match Side::load(&args.old, args.color) {
        Ok(side) => side,
        Err(code) => return code,
    };
    let new = match Side::load(&args.new, args.color) {
        Ok(side) => side,
        Err(code) => return code,
    };
    let diff = diff(&old, &new);
    match args.format {
        Format::Json => emit(&format!("{:#}\n", diff.doc)),
        Format::Human => emit(&human(&diff.doc)),
    }
    ExitCode::from(u8::from(diff.invalidates))
}

/// Statement by statement, the effective lines that differ.
fn statement_changes(old: &ServerEntry, new: &ServerEntry) -> Vec<Value> {
    let (a, b) = (
        statements::effective_lines(&old.block),
        statements::effective_lines(&new.block),
    );
    let of = |lines: &[(Statement, String)], s: Statement| -> Vec<String> {
        lines
            .iter()
            .filter(|(t, _)| *t == s)
            .map(|(_, l)| l.clone())
            .collect()
    };
    Statement::ALL
        .iter()
        .filter_map(|&s| {
            let (before, after) = (of(&a, s), of(&b, s));
            (before != after)
                .then(|| json!({ "statement": s.keyword(), "old": before, "new": after }))
        })
        .collect()
}

/// The reasons either block can produce whose declaration differs.
fn reason_changes(old: &Side, o: &ServerEntry, new: &Side, n: &ServerEntry) -> Vec<Value> {
    let names: BTreeSet<&str> = o
        .block
        .reason_names()
        .into_iter()
        .chain(n.block.reason_names())
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let (a, b) = (old.table.reasons.get(name), new.table.reasons.get(name));
            (a != b).then(|| {
                json!({
                    "reason": name,
                    "old": a,
                    "new": b,
                    "properties": reason_properties(a, b),
                })
            })
        })
        .collect()
}

/// The properties of a reason that differ, as `reason` declarations write
/// them (`ttl 30s`); a reason only one side has shows all of its own.
fn reason_properties(a: Option<&ReasonSpec>, b: Option<&ReasonSpec>) -> Vec<Value> {
    let props = |spec: Option<&ReasonSpec>| -> Vec<(&'static str, Option<String>)> {
        vec![
            ("retryable", spec.map(|r| r.retryable.to_string())),
            ("ttl", spec.map(|r| statements::ttl(r.ttl))),
            ("code", spec.map(|r| r.code.to_string())),
            ("message", spec.map(|r| format!("{:?}", r.message))),
        ]
    };
    props(a)
        .into_iter()
        .zip(props(b))
        .filter(|((_, x), (_, y))| x != y)
        .map(|((property, x), (_, y))| json!({ "property": property, "old": x, "new": y }))
        .collect()
}

/// Computes the diff of `old` and `new`.
fn diff(old: &Side, new: &Side) -> Diff {
    let mut invalidates = false;
    let mut changed = Vec::new();
    let mut removed = Vec::new();
    // Blocks in both, by pattern; the defaults fallback with itself.
    let mut pairs: Vec<(Option<usize>, Option<usize>)> = Vec::new();
    for (i, entry) in old.table.servers.iter().enumerate() {
        if old.find(&entry.pattern) != Some(i) {
            continue;
        }
        match new.find(&entry.pattern) {
            Some(j) => pairs.push((Some(i), Some(j))),
            None => {
                invalidates = true;
                let now = new.governing(&entry.pattern);
                removed.push(json!({
                    "block": old.label(Some(i)),
                    "pattern": entry.pattern,
                    "line": old.line(Some(i)),
                    "digest": entry.digest,
                    // Where the id goes now; a glob's ids may go to several.
                    "now_governed_by": (!pattern::is_glob(&entry.pattern)).then(|| new.label(now)),
                }));
            }
        }
    }
    pairs.push((None, None));
    for &(i, j) in &pairs {
        let (o, n) = (old.entry(i), new.entry(j));
        if o.digest == n.digest {
            continue;
        }
        invalidates = true;
        changed.push(json!({
            "block": old.label(i),
            "pattern": o.pattern,
            "old_line": old.line(i),
            "new_line": new.line(j),
            "old_digest": o.digest,
            "new_digest": n.digest,
            "statements": statement_changes(o, n),
            "reasons": reason_changes(old, o, new, n),
        }));
    }
    let mut added = Vec::new();
    for (j, entry) in new.table.servers.iter().enumerate() {
        if new.find(&entry.pattern) != Some(j) || old.find(&entry.pattern).is_some() {
            continue;
        }
        // An exact id went to one old block: it invalidates exactly when
        // that block's digest differs. A glob takes ids from blocks that
        // cannot be listed: counted as invalidating.
        let (before, invalidating) = if pattern::is_glob(&entry.pattern) {
            (None, true)
        } else {
            let was = old.governing(&entry.pattern);
            (Some(old.label(was)), old.entry(was).digest != entry.digest)
        };
        invalidates |= invalidating;
        added.push(json!({
            "block": new.label(Some(j)),
            "pattern": entry.pattern,
            "line": new.line(Some(j)),
            "digest": entry.digest,
            "was_governed_by": before,
            "invalidates": invalidating,
        }));
    }
    let reordered = reordered(old, new, &pairs, &mut invalidates);
    let defaults = defaults_changes(old, new);
    let mut policy = Vec::new();
    let (a, b) = (&old.table, &new.table);
    if a.protocol != b.protocol {
        policy.push(json!({ "setting": "protocol", "old": a.protocol, "new": b.protocol }));
    }
    if a.error_code != b.error_code {
        policy.push(json!({ "setting": "error_code", "old": a.error_code, "new": b.error_code }));
    }
    if a.identity != b.identity {
        // Every request gets another identity: nothing stored is found again.
        invalidates = true;
        policy.push(json!({ "setting": "identity", "old": a.identity, "new": b.identity }));
    }
    Diff {
        doc: json!({
            "old": old.path,
            "new": new.path,
            "invalidates": invalidates,
            "changed": changed,
            "added": added,
            "removed": removed,
            "reordered": reordered,
            "defaults": defaults,
            "policy": policy,
        }),
        invalidates,
    }
}

/// Pairs of blocks in both whose order flips. Ids both match change
/// blocks; that invalidates when their digests (after the edit) differ and
/// some id can match both (two exact ids never do; a glob and an exact id
/// when the glob matches it; two globs are assumed to).
fn reordered(
    old: &Side,
    new: &Side,
    pairs: &[(Option<usize>, Option<usize>)],
    invalidates: &mut bool,
) -> Vec<Value> {
    // Blocks in both, in old order, each with its new index; a flipped pair
    // is an inversion, found among the blocks before it with a larger new
    // index (n log n in the blocks, plus the pairs reported).
    let both: Vec<(usize, usize)> = pairs.iter().filter_map(|&(i, j)| Some((i?, j?))).collect();
    let mut seen: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut out = Vec::new();
    for &(i2, j2) in &both {
        for &(j1, i1) in seen.range((j2, 0)..) {
            let (p, q) = (
                &new.table.servers[j1].pattern,
                &new.table.servers[j2].pattern,
            );
            let overlap = match (pattern::is_glob(p), pattern::is_glob(q)) {
                (false, false) => false,
                (true, false) => pattern::matches(p, q),
                (false, true) => pattern::matches(q, p),
                (true, true) => true,
            };
            let invalidating =
                overlap && new.table.servers[j1].digest != new.table.servers[j2].digest;
            *invalidates |= invalidating;
            out.push(json!({
                "first": old.label(Some(i1)),
                "second": old.label(Some(i2)),
                "invalidates": invalidating,
            }));
        }
        seen.insert((j2, i2));
    }
    out
}

/// The `defaults` block's own statements that changed, each with every
/// block it reaches before or after the edit (the blocks whose effective
/// statement is taken from `defaults`, by the compiler's merge).
fn defaults_changes(old: &Side, new: &Side) -> Value {
    let (Some(a), Some(b)) = (&old.source, &new.source) else {
        return Value::Null;
    };
    // Every entry's items taken from `defaults`, as (statement, line).
    let inherited = |side: &Side, source: &PolicySource| {
        let provenance = Provenance::new(&source.model, &source.file);
        side.entries()
            .map(|entry| {
                let (_, stmts) = provenance.effective_statements(entry);
                let from_defaults: Vec<(Statement, String)> = stmts
                    .into_iter()
                    .filter(|s| s.origin == Origin::Defaults)
                    .filter_map(|s| Some((s.statement, s.line?)))
                    .collect();
                (side.label(entry), from_defaults)
            })
            .collect::<Vec<_>>()
    };
    let stated = |source: &PolicySource| -> HashMap<Statement, Vec<String>> {
        let mut map: HashMap<Statement, Vec<String>> = HashMap::new();
        // The `defaults` layer alone: what the block states, merged over
        // the built-ins (so a statement's items are in effective order).
        let (_, stmts) = explain::effective_statements(&source.model, &source.file, None);
        for s in stmts {
            if let (Origin::Defaults, Some(line)) = (s.origin, s.line) {
                map.entry(s.statement).or_default().push(line);
            }
        }
        map
    };
    let (before, after) = (stated(a), stated(b));
    let (reach_old, reach_new) = (inherited(old, a), inherited(new, b));
    let mut out = Vec::new();
    for &statement in Statement::ALL {
        let none = Vec::new();
        let (o, n) = (
            before.get(&statement).unwrap_or(&none),
            after.get(&statement).unwrap_or(&none),
        );
        if o == n {
            continue;
        }
        let gone: Vec<&String> = o.iter().filter(|l| !n.contains(l)).collect();
        let came: Vec<&String> = n.iter().filter(|l| !o.contains(l)).collect();
        let mut reaches: Vec<String> = Vec::new();
        let mut add = |label: &String| {
            if !reaches.contains(label) {
                reaches.push(label.clone());
            }
        };
        for (label, items) in &reach_new {
            if items
                .iter()
                .any(|(s, l)| *s == statement && came.contains(&l))
            {
                add(label);
            }
        }
        for (label, items) in &reach_old {
            if items
                .iter()
                .any(|(s, l)| *s == statement && gone.contains(&l))
            {
                add(label);
            }
        }
        out.push(json!({
            "statement": statement.keyword(),
            "old": o,
            "new": n,
            "reaches": reaches,
        }));
    }
    Value::Array(out)
}

/// `sha256:0123456789ab…`: enough of a digest to tell two apart.
fn short(digest: &Value) -> String {
    let text = digest.as_str().unwrap_or_default();
    match text.get(..19) {
        Some(head) if text.len() > 19 => format!("{head}…"),
        _ => text.to_owned(),
    }
}

/// A statement's lines on one side; none stated: what the runtime applies
/// then (`retry_alert 40 per 10m (built-in default)`), or `(not set)`.
fn lines_text(statement: &Value, lines: &Value) -> String {
    match lines.as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => {
            let applied = Statement::from_keyword(str_of(statement))
                .map(Statement::applied_default_lines)
                .unwrap_or_default();
            if applied.is_empty() {
                "(not set)".to_owned()
            } else {
                format!("{} (built-in default)", applied.join(", "))
            }
        }
    }
}

fn at(line: &Value) -> String {
    line.as_u64()
        .map_or(String::new(), |l| format!(" (line {l})"))
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// The human report, read from the JSON document so the two cannot differ.
fn human(doc: &Value) -> String {
    let list = |key: &str| doc[key].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    let changed = list("changed");
    if !changed.is_empty() {
        out.push_str("invalidated: the effective block's digest changes; decisions stored under it no longer apply\n");
        for c in &changed {
            let lines = match (c["old_line"].as_u64(), c["new_line"].as_u64()) {
                (Some(a), Some(b)) if a == b => format!(" (line {a})"),
                (Some(a), Some(b)) => format!(" (line {a} → {b})"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "  {}{lines}: {} → {}\n",
                str_of(&c["block"]),
                short(&c["old_digest"]),
                short(&c["new_digest"])
            ));
            for s in c["statements"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "    {}: {} → {}\n",
                    str_of(&s["statement"]),
                    lines_text(&s["statement"], &s["old"]),
                    lines_text(&s["statement"], &s["new"])
                ));
            }
            for r in c["reasons"].as_array().into_iter().flatten() {
                let text = |v: &Value| v.as_str().unwrap_or("(not declared)").to_owned();
                let props: Vec<String> = r["properties"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{} {} → {}",
                            str_of(&p["property"]),
                            text(&p["old"]),
                            text(&p["new"])
                        )
                    })
                    .collect();
                out.push_str(&format!(
                    "    reason {}: {}\n",
                    str_of(&r["reason"]),
                    props.join(", ")
                ));
            }
        }
    }
    let added = list("added");
    if !added.is_empty() {
        out.push_str("added:\n");
        for a in &added {
            let before = match a["was_governed_by"].as_str() {
                Some(was) => format!("the id was governed by {was}"),
                None => "takes the ids it matches from the blocks after it".to_owned(),
            };
            let verdict = if a["invalidates"].as_bool() == Some(true) {
                "invalidates"
            } else {
                "same digest, invalidates nothing"
            };
            out.push_str(&format!(
                "  {}{}: {before} ({verdict})\n",
                str_of(&a["block"]),
                at(&a["line"])
            ));
        }
    }
    let removed = list("removed");
    if !removed.is_empty() {
        out.push_str("removed (invalidates its stored decisions):\n");
        for r in &removed {
            let now = r["now_governed_by"]
                .as_str()
                .map_or(String::new(), |now| format!(": the id now goes to {now}"));
            out.push_str(&format!(
                "  {}{}{now}\n",
                str_of(&r["block"]),
                at(&r["line"])
            ));
        }
    }
    let reordered = list("reordered");
    if !reordered.is_empty() {
        out.push_str("reordered:\n");
        for r in &reordered {
            let verdict = if r["invalidates"].as_bool() == Some(true) {
                "ids both match change blocks: invalidates"
            } else {
                "no id changes to a block with another digest"
            };
            out.push_str(&format!(
                "  {} and {} swap order ({verdict})\n",
                str_of(&r["first"]),
                str_of(&r["second"])
            ));
        }
    }
    let defaults = list("defaults");
    if !defaults.is_empty() {
        out.push_str("defaults:\n");
        for d in &defaults {
            let reaches: Vec<&str> = d["reaches"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let reaches = if reaches.is_empty() {
                "reaches no block (each overrides it)".to_owned()
            } else {
                format!("reaches {}", reaches.join(", "))
            };
            out.push_str(&format!(
                "  {}: {} → {}; {reaches}\n",
                str_of(&d["statement"]),
                lines_text(&d["statement"], &d["old"]),
                lines_text(&d["statement"], &d["new"])
            ));
        }
    }
    let policy = list("policy");
    if !policy.is_empty() {
        out.push_str("policy:\n");
        for p in &policy {
            out.push_str(&format!(
                "  {}: {} → {}\n",
                str_of(&p["setting"]),
                p["old"],
                p["new"]
            ));
        }
    }
    if out.is_empty() {
        out.push_str("no change: every effective block keeps its digest\n");
    }
    out.push_str(if doc["invalidates"].as_bool() == Some(true) {
        "stored decisions are invalidated (exit 1)\n"
    } else {
        "no stored decision is invalidated\n"
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement one side does not state shows what applies there: the
    /// runtime's built-in (`retry_alert`, `consent`), as `mcpc show` prints
    /// it, or `(not set)` when that imposes nothing.
    #[test]
    fn an_unstated_side_shows_what_applies_there() {
        let doc = json!({
            "invalidates": false,
            "defaults": [
                {"statement": "consent", "old": ["consent never"], "new": [], "reaches": []},
                {"statement": "models", "old": [], "new": ["models \"a-*\""], "reaches": []},
                {"statement": "retry_alert", "old": ["retry_alert 5 per 1m"], "new": [], "reaches": []},
            ],
        });
        let text = human(&doc);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1..4],
            [
                "  consent: consent never → consent first (built-in default); reaches no block (each overrides it)",
                "  models: (not set) → models \"a-*\"; reaches no block (each overrides it)",
                &format!(
                    "  retry_alert: retry_alert 5 per 1m → {} (built-in default); reaches no block (each overrides it)",
                    Statement::RetryAlert.unset_text()
                ),
            ],
            "{text}"
        );
    }
}
