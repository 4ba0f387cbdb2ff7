//! `mcpc show POLICY --server ID [--format human|json]`
//!
//! Which block governs a server id, why each block before it does not, and
//! the effective block: each statement with its value and where it came
//! from (the server block, `defaults` or the built-in default), and the
//! block's digest, the one stored decisions are keyed by. The block is
//! selected as the engine selects it (`docs/spec/language.md`, "Server
//! patterns"); provenance is the compiler's merge
//! (`mcpolicy_compiler::explain`), never a comparison of values. `mcpc eval
//! --explain` prints the same report before its steps.

use std::process::ExitCode;

use clap::ValueEnum;
use mcpolicy_compiler::explain::{self, Mismatch, Origin, Provenance, Selection};
use mcpolicy_compiler::line_index::LineIndex;
use mcpolicy_compiler::render::columns;
use mcpolicy_compiler::statements::{self, Statement};
use mcpolicy_runtime::engine;
use mcpolicy_runtime::table::{ServerEntry, Table};
use serde_json::{Value, json};

use super::policy::{LoadFailure, PolicySource, load_policy_with_source};
use super::{ColorChoice, emit, fail};

/// Output formats of `show`, `eval --explain` and `diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Text for people.
    Human,
    /// One JSON document on standard output.
    Json,
}

const SHOW_HELP: &str = "\
JSON (--format json): one object
  server        the id as matched (NFC)
  block         {entry: index among the server blocks or null for the defaults alone,
                 block: `server \"PATTERN\"` or `defaults`, pattern, line, digest}
  passed_over   [{entry, pattern, line, why, part}]: the blocks tried before it, in order;
                 part is the piece of the pattern the id fails, when there is one
                 (every one; the human report lists at most 8, the nearest to the id)
  closest       [{entry, pattern, line}]: when no server block matches but the policy has
                 some, the patterns nearest the id, nearest first (at most 3); else []
  statements    [{statement, value, origin, line}]: the effective block in declaration
                 order, one entry per budget; value is the statement as it takes effect
                 (null: not set), origin `server`, `defaults`, `built-in` (null for a
                 compiled table, which keeps no provenance), line the stating statement's

Exit codes: 0 shown; 1 the policy has errors (printed); 2 usage or I/O error.";

#[derive(Debug, clap::Args)]
#[command(after_help = SHOW_HELP)]
pub struct Args {
    /// The policy (`.mcpolicy`) or a compiled table (`.json`, no provenance).
    #[arg(value_name = "POLICY")]
    policy: String,
    /// The server id to show the governing block of.
    #[arg(long, value_name = "ID")]
    server: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

pub fn run(args: Args) -> ExitCode {
    let (policy, source) = match load_policy_with_source(&args.policy, args.color) {
        Ok(loaded) => loaded,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => return ExitCode::from(1),
    };
    let report = BlockReport::governing(policy.table(), source.as_ref(), &args.server);
    match args.format {
        Format::Human => emit(&report.human()),
        Format::Json => emit(&format!("{:#}\n", report.json())),
    }
    ExitCode::SUCCESS
}

/// Where a statement came from, as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatementRow {
    /// The statement.
    pub statement: Statement,
    /// Its effective value as a statement; `None`: not set.
    pub value: Option<String>,
    /// The layer; `None` for a compiled table (no provenance kept).
    pub origin: Option<Origin>,
    /// The line of the statement that states it.
    pub line: Option<usize>,
}

/// A block the id passed over.
#[derive(Debug, Clone)]
pub(crate) struct PassedOver {
    entry: usize,
    pattern: String,
    line: Option<usize>,
    mismatch: Mismatch,
}

/// A pattern near an id that no server block matches.
#[derive(Debug, Clone)]
pub(crate) struct Near {
    entry: usize,
    pattern: String,
    line: Option<usize>,
}

/// How many blocks passed over the human report lists; past it, the
/// nearest [`PASSED_OVER_NEAREST`] and a count (a 10,000-server policy
/// would otherwise print a line per block).
const PASSED_OVER_SHOWN: usize = 8;
const PASSED_OVER_NEAREST: usize = 5;

/// Which block governs a server id and what it says, with provenance.
#[derive(Debug, Clone)]
pub(crate) struct BlockReport {
    id: String,
    entry: Option<usize>,
    pattern: String,
    line: Option<usize>,
    digest: String,
    passed_over: Vec<PassedOver>,
    /// No server block matches but the policy has some: the nearest
    /// patterns (`explain::closest`), nearest first.
    closest: Vec<Near>,
    /// The effective block's statements, one per budget.
    pub rows: Vec<StatementRow>,
    /// Block labels by entry (`None`: defaults), for step lines.
    labels: Vec<String>,
}

impl BlockReport {
    /// The report for the block that governs `id`, as the engine selects
    /// it: what `mcpc show`, `mcpc proxy` at start and `mcpc wrap --list`
    /// say (`docs/spec/clients.md`, "Which block governs a server").
    pub fn governing(table: &Table, source: Option<&PolicySource>, id: &str) -> Self {
        let selection = explain::select(table.servers.iter().map(|e| e.pattern.as_str()), id);
        BlockReport::new(table, source, &selection, selection.matched)
    }

    /// The report for the block at `entry` (the selection's, or the one a
    /// decision's cause names) and the blocks `selection` passed before it.
    pub fn new(
        table: &Table,
        source: Option<&PolicySource>,
        selection: &Selection,
        entry: Option<usize>,
    ) -> Self {
        let lines = source.map(|s| (s, LineIndex::new(&s.text)));
        let provenance = source.map(|s| Provenance::new(&s.model, &s.file));
        let line_of = |offset: usize| {
            lines
                .as_ref()
                .map(|(s, index)| index.position(&s.text, offset).line)
        };
        let block_line = |entry: Option<usize>| {
            let span = provenance.as_ref()?.block_span(entry)?;
            line_of(span.start)
        };
        let governing: &ServerEntry = entry
            .and_then(|i| table.servers.get(i))
            .unwrap_or(&table.fallback);
        let rows = match &provenance {
            Some(provenance) => {
                let (block, stmts) = provenance.effective_statements(entry);
                // The source and the table are one compilation; a mismatch
                // would be a compiler bug, and then provenance is not shown.
                if block == governing.block {
                    stmts
                        .into_iter()
                        .map(|st| StatementRow {
                            statement: st.statement,
                            value: st.line,
                            origin: Some(st.origin),
                            line: st.span.and_then(|span| line_of(span.start)),
                        })
                        .collect()
                } else {
                    rows_without_provenance(&governing.block)
                }
            }
            None => rows_without_provenance(&governing.block),
        };
        let passed_over = selection
            .tried
            .iter()
            .filter(|t| entry.is_none_or(|e| t.entry < e))
            .map(|t| PassedOver {
                entry: t.entry,
                pattern: t.pattern.clone(),
                line: block_line(Some(t.entry)),
                mismatch: t.mismatch.clone(),
            })
            .collect();
        let closest = match entry {
            Some(_) => Vec::new(),
            None => explain::closest(
                table.servers.iter().map(|e| e.pattern.as_str()),
                &selection.id,
                explain::CLOSEST,
            )
            .into_iter()
            .map(|i| Near {
                entry: i,
                pattern: table.servers[i].pattern.clone(),
                line: block_line(Some(i)),
            })
            .collect(),
        };
        let mut labels: Vec<String> = table
            .servers
            .iter()
            .map(|e| format!("server \"{}\"", e.pattern))
            .collect();
        labels.push("defaults".to_owned());
        BlockReport {
            id: selection.id.clone(),
            entry,
            pattern: governing.pattern.clone(),
            line: block_line(entry),
            digest: governing.digest.clone(),
            passed_over,
            closest,
            rows,
            labels,
        }
    }

    fn label(&self, entry: Option<usize>) -> &str {
        let i = entry.unwrap_or(self.labels.len() - 1);
        self.labels.get(i).map_or("defaults", String::as_str)
    }

    /// The row of an engine statement: budgets by their index in the
    /// effective block, the others by keyword (the engine's names are the
    /// statement table's keywords).
    pub fn row_of(&self, statement: engine::Statement) -> Option<usize> {
        let keyword = Statement::from_keyword(statement.name())?;
        let nth = match statement {
            engine::Statement::Budget(i) => i,
            _ => 0,
        };
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.statement == keyword)
            .nth(nth)
            .map(|(i, _)| i)
    }

    /// `max_tokens 100` (defaults, line 5), as a step names a statement.
    pub fn describe_row(&self, row: &StatementRow) -> String {
        format!("`{}` ({})", value_text(row), self.origin_text(row))
    }

    fn origin_text(&self, row: &StatementRow) -> String {
        let at = |line: Option<usize>| line.map_or(String::new(), |l| format!(", line {l}"));
        match row.origin {
            Some(Origin::Server(i)) => format!("{}{}", self.label(Some(i)), at(row.line)),
            Some(Origin::Defaults) => format!("defaults{}", at(row.line)),
            Some(Origin::BuiltIn) => "built in".to_owned(),
            None => "compiled table".to_owned(),
        }
    }

    fn block_text(&self) -> String {
        let line = self.line.map_or(String::new(), |l| format!(" (line {l})"));
        match self.entry {
            Some(_) => format!("server \"{}\"{line}", self.pattern),
            None => format!("defaults{line}: no server block matches"),
        }
    }

    /// The governing block in one line: `server id `X`: server "P" (line 9)`.
    pub fn governed_by(&self) -> String {
        format!("server id `{}`: {}", self.id, self.block_text())
    }

    /// When only `defaults` govern although the policy has server blocks
    /// (seldom meant: an id derived from a command, or a name spelt
    /// differently), a warning naming the nearest patterns.
    pub fn warning(&self) -> Option<String> {
        let (nearest, others) = self.closest.split_first()?;
        let name = |n: &Near| {
            let line = n.line.map_or(String::new(), |l| format!(" (line {l})"));
            format!("server \"{}\"{line}", n.pattern)
        };
        let mut text = format!(
            "no server block matches server id `{}`, so only `defaults` govern it; the closest pattern is {}",
            self.id,
            name(nearest)
        );
        if !others.is_empty() {
            let rest: Vec<String> = others.iter().map(name).collect();
            text.push_str(&format!(" (then {})", rest.join(", ")));
        }
        let meant = if nearest.pattern.contains(['*', '?']) {
            "an id that pattern matches".to_owned()
        } else {
            format!("`--server-id {}`", nearest.pattern)
        };
        text.push_str(&format!(
            ". If that block is meant for this server, give the proxy {meant} \
             (`mcpc wrap` sets each server's id to its name in the client's configuration)"
        ));
        Some(text)
    }

    /// The human report.
    pub fn human(&self) -> String {
        let mut out = format!("{}\n", self.governed_by());
        let listed: Vec<&PassedOver> = if self.passed_over.len() <= PASSED_OVER_SHOWN {
            self.passed_over.iter().collect()
        } else {
            let mut nearest = explain::nearest(
                self.passed_over.iter().map(|p| p.pattern.as_str()),
                &self.id,
                PASSED_OVER_NEAREST,
            );
            nearest.sort_unstable();
            nearest.iter().map(|&i| &self.passed_over[i]).collect()
        };
        for p in &listed {
            let line = p.line.map_or(String::new(), |l| format!(" (line {l})"));
            out.push_str(&format!(
                "  not server \"{}\"{line}: {}\n",
                p.pattern,
                why(&p.pattern, &p.mismatch)
            ));
        }
        let unlisted = self.passed_over.len() - listed.len();
        if unlisted > 0 {
            out.push_str(&format!(
                "  … and {unlisted} more server block{} before it (those above are the nearest \
                 to the id; `--format json` lists every one)\n",
                if unlisted == 1 { "" } else { "s" }
            ));
        }
        if let Some(warning) = self.warning() {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out.push_str(&format!("effective block, digest {}:\n", self.digest));
        let width = columns::width(self.rows.iter().map(|r| value_text(r).chars().count()), 0);
        for row in &self.rows {
            let value = columns::pad(&value_text(row), width);
            out.push_str(&format!(
                "  {value}  {}\n",
                self.origin_text(row)
                    .replace("built in", "built-in default")
            ));
        }
        out
    }

    /// The JSON report (the shape `mcpc show --help` documents).
    pub fn json(&self) -> Value {
        json!({
            "server": self.id,
            "block": {
                "entry": self.entry,
                "block": self.label(self.entry),
                "pattern": self.pattern,
                "line": self.line,
                "digest": self.digest,
            },
            "passed_over": self.passed_over.iter().map(|p| json!({
                "entry": p.entry,
                "pattern": p.pattern,
                "line": p.line,
                "why": why(&p.pattern, &p.mismatch),
                "part": part(&p.mismatch),
            })).collect::<Vec<_>>(),
            "closest": self.closest.iter().map(|n| json!({
                "entry": n.entry,
                "pattern": n.pattern,
                "line": n.line,
            })).collect::<Vec<_>>(),
            "statements": self.rows.iter().map(|r| self.row_json(r)).collect::<Vec<_>>(),
        })
    }

    /// One statement row as JSON.
    pub fn row_json(&self, row: &StatementRow) -> Value {
        json!({
            "statement": row.statement.keyword(),
            "value": row.value,
            "origin": row.origin.map(|o| match o {
                Origin::Server(_) => "server",
                Origin::Defaults => "defaults",
                Origin::BuiltIn => "built-in",
            }),
            "line": row.line,
        })
    }
}

/// The statements of a compiled table's block: values, no provenance.
fn rows_without_provenance(block: &mcpolicy_runtime::table::EffectiveBlock) -> Vec<StatementRow> {
    let lines = statements::effective_lines(block);
    let mut rows = Vec::new();
    for statement in Statement::ALL {
        let mine: Vec<&String> = lines
            .iter()
            .filter(|(s, _)| s == statement)
            .map(|(_, l)| l)
            .collect();
        if mine.is_empty() {
            // Repeatable statements have no item when unset; one row says so.
            rows.push(StatementRow {
                statement: *statement,
                value: None,
                origin: None,
                line: None,
            });
        }
        for line in mine {
            rows.push(StatementRow {
                statement: *statement,
                value: Some(line.clone()),
                origin: None,
                line: None,
            });
        }
    }
    rows
}

/// A row's value; unset: what the runtime applies then (from the statement
/// table, as hover and `mcpc diff` show it), or `models (not set)`.
fn value_text(row: &StatementRow) -> String {
    row.value
        .clone()
        .unwrap_or_else(|| row.statement.unset_text())
}

/// Why a pattern does not match, as a sentence.
fn why(pattern: &str, mismatch: &Mismatch) -> String {
    match mismatch {
        Mismatch::NotTheId => format!("the id is not `{pattern}`"),
        other => other.to_string(),
    }
}

/// The piece of the pattern the id fails, when the mismatch names one.
fn part(mismatch: &Mismatch) -> Option<&str> {
    match mismatch {
        Mismatch::Prefix(p) | Mismatch::Suffix(p) | Mismatch::Missing(p) => Some(p),
        _ => None,
    }
}
