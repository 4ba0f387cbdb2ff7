//! Which statements and reasons the cases exercised.
//!
//! Each fresh decision is traced to the source statements it exercised in
//! two steps:
//!
//! 1. **Cause** ([`super::run::Hit`], recorded while running): the engine
//!    names the table entry, the deciding statement and the evaluation step
//!    of every decision (`mcpolicy_runtime::engine::Cause`): the denying
//!    switch, input limit, rate or budget (by index, so two budgets sharing
//!    a reason are told apart), `consent` when the user was asked, and
//!    `deadline` for a reported miss. A decision past step 4 also exercised
//!    `sampling on` (and `tools on`), and one allowed unasked `consent
//!    never`. Trims are read from the `_meta` members of the grant (a
//!    request may be narrowed by several).
//! 2. **Statement**: the effective block of table entry `e` is the server
//!    block's own statement of that kind if it has one, else the
//!    `defaults` statement, else a built-in (no statement). Budgets are
//!    matched by (metric, window), the key under which a server budget
//!    overrides a default one.
//!
//! A statement is *live* when some reachable entry inherits it; a
//! `defaults` statement that every block overrides (and the defaults-only
//! fallback unreachable behind a `"*"` block) is *dead* and left out of the
//! totals. Replayed denials exercise no statement (the decision they repeat
//! did) but do count for their reason.

use std::collections::BTreeMap;

use mcpolicy_compiler::line_index::LineIndex;
use mcpolicy_compiler::model::PartialBlock;
use mcpolicy_compiler::syntax::{self, Block, ItemKind, ServerDecl, Stmt, StmtKind};
use mcpolicy_runtime::engine::Statement;
use mcpolicy_runtime::table::{
    Consent, ContextScope, EffectiveBlock, ProtocolRevision, Table, builtin, pattern,
};
use serde_json::{Value, json};

use super::super::policy::PolicySource;
use super::run::Hit;

/// One statement of the policy.
#[derive(Debug, Clone)]
pub struct StatementCoverage {
    /// `defaults` or `server "pattern"`.
    pub block: String,
    /// 1-based source line.
    pub line: usize,
    /// The statement as written (whitespace collapsed, comment excluded).
    pub text: String,
    /// Some reachable table entry inherits it.
    pub live: bool,
    /// Fresh decisions it made.
    pub hits: u64,
}

/// One reason some reachable block can produce.
#[derive(Debug, Clone)]
pub struct ReasonCoverage {
    /// The reason's name.
    pub name: String,
    /// Its `reason` declaration line, `None` for an undeclared built-in.
    pub line: Option<usize>,
    /// Steps whose outcome carried it.
    pub hits: u64,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Coverage {
    /// The policy path.
    pub policy: String,
    /// Statements in source order.
    pub statements: Vec<StatementCoverage>,
    /// Producible reasons, sorted by name.
    pub reasons: Vec<ReasonCoverage>,
    /// Fresh denials that could not be traced to a statement.
    pub unattributed: Vec<String>,
}

/// Statement indices of the source, and how table entries inherit them.
#[derive(Debug)]
pub struct StatementMap<'a> {
    statements: Vec<StatementCoverage>,
    defaults: Vec<(usize, &'a Stmt)>,
    servers: Vec<Vec<(usize, &'a Stmt)>>,
    source: &'a PolicySource,
    table: &'a Table,
}

impl<'a> StatementMap<'a> {
    /// Indexes every statement of `source`, whose lowering is `table`.
    pub fn new(source: &'a PolicySource, table: &'a Table) -> Result<Self, String> {
        let lines = LineIndex::new(&source.text);
        let mut statements = Vec::new();
        let mut defaults = Vec::new();
        let mut servers = Vec::new();
        let mut add = |label: String, block: &'a Block<Stmt>| -> Vec<(usize, &'a Stmt)> {
            block
                .stmts
                .iter()
                .filter(|s| !matches!(s.kind, StmtKind::Bad(_)))
                .map(|stmt| {
                    let written = source
                        .text
                        .get(stmt.span.start..stmt.span.end)
                        .unwrap_or_default();
                    let text = without_comment(written)
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ");
                    statements.push(StatementCoverage {
                        block: label.clone(),
                        line: lines.position(&source.text, stmt.span.start).line,
                        text,
                        live: false,
                        hits: 0,
                    });
                    (statements.len() - 1, stmt)
                })
                .collect()
        };
        let mut decls: Vec<&ServerDecl> = Vec::new();
        for item in &source.file.items {
            match &item.kind {
                ItemKind::Defaults(block) => defaults = add("defaults".to_owned(), block),
                ItemKind::Server(decl) => {
                    decls.push(decl);
                    servers.push(add(
                        format!("server \"{}\"", decl.pattern.value),
                        &decl.body,
                    ));
                }
                _ => {}
            }
        }
        let agrees = decls.len() == source.model.servers.len()
            && decls.len() == table.servers.len()
            && decls
                .iter()
                .zip(&source.model.servers)
                .zip(&table.servers)
                .all(|((d, (m, _)), t)| d.pattern.value == *m && *m == t.pattern);
        if !agrees {
            return Err(format!(
                "{}: the syntax tree and the compiled table disagree on the server blocks; coverage cannot be computed",
                source.path
            ));
        }
        Ok(StatementMap {
            statements,
            defaults,
            servers,
            source,
            table,
        })
    }

    fn block(&self, entry: usize) -> &EffectiveBlock {
        self.table
            .servers
            .get(entry)
            .map_or(&self.table.fallback.block, |e| &e.block)
    }

    /// Entries a server id can reach: every server block (the checker
    /// refuses shadowed ones) and the defaults fallback unless a block's
    /// pattern matches every id.
    fn reachable(&self) -> Vec<usize> {
        let mut entries: Vec<usize> = (0..self.table.servers.len()).collect();
        if !self
            .table
            .servers
            .iter()
            .any(|e| pattern::covers(&e.pattern, "*"))
        {
            entries.push(self.table.servers.len());
        }
        entries
    }

    /// The statement entry `entry` inherited `statement` from.
    fn source_of(&self, entry: usize, statement: Statement) -> Option<usize> {
        let own = self.servers.get(entry);
        if let Statement::Budget(j) = statement {
            let budget = self.block(entry).budgets.get(j)?;
            let key = PartialBlock::budget_key(budget);
            let nth = |partial: &PartialBlock, stmts: &[(usize, &Stmt)]| {
                let p = partial
                    .budgets
                    .iter()
                    .position(|b| PartialBlock::budget_key(b) == key)?;
                stmts
                    .iter()
                    .filter(|(_, s)| s.kind.statement() == Some(syntax::Statement::Budget))
                    .nth(p)
                    .map(|(i, _)| *i)
            };
            if let (Some(stmts), Some((_, partial))) = (own, self.source.model.servers.get(entry))
                && let Some(i) = nth(partial, stmts)
            {
                return Some(i);
            }
            return nth(&self.source.model.defaults, &self.defaults);
        }
        // The engine's statement names are the policy's keywords.
        let keyword = statement.name();
        let find = |stmts: &[(usize, &Stmt)]| {
            stmts
                .iter()
                .find(|(_, s)| s.kind.keyword() == keyword)
                .map(|(i, _)| *i)
        };
        own.and_then(|stmts| find(stmts))
            .or_else(|| find(&self.defaults))
    }

    /// Tallies the hits and reasons of every case.
    pub fn coverage(
        &self,
        hits: &[Hit],
        reasons: &[String],
        unattributed: Vec<String>,
    ) -> Coverage {
        let mut statements = self.statements.clone();
        let mut producible: BTreeMap<String, u64> = BTreeMap::new();
        for entry in self.reachable() {
            let block = self.block(entry);
            // Behind `sampling off` nothing else of the block can act.
            let kinds: Vec<Statement> = if block.sampling.enabled {
                Statement::of_block(block)
            } else {
                vec![Statement::Sampling]
            };
            for kind in kinds {
                if let Some(i) = self.source_of(entry, kind) {
                    statements[i].live = true;
                }
            }
            for name in producible_reasons(block, self.table.protocol) {
                producible.entry(name.to_owned()).or_insert(0);
            }
        }
        for hit in hits {
            if let Some(i) = self.source_of(hit.entry, hit.statement) {
                statements[i].hits += 1;
            }
        }
        for reason in reasons {
            if let Some(count) = producible.get_mut(reason) {
                *count += 1;
            }
        }
        let lines = LineIndex::new(&self.source.text);
        let declared: BTreeMap<&str, usize> = self
            .source
            .file
            .items
            .iter()
            .filter_map(|item| match &item.kind {
                ItemKind::Reason(decl) => Some((
                    decl.name.value.as_str(),
                    lines.position(&self.source.text, item.span.start).line,
                )),
                _ => None,
            })
            .collect();
        Coverage {
            policy: self.source.path.clone(),
            statements,
            reasons: producible
                .into_iter()
                .map(|(name, hits)| ReasonCoverage {
                    line: declared.get(name.as_str()).copied(),
                    name,
                    hits,
                })
                .collect(),
            unattributed,
        }
    }
}

/// A statement's text without a trailing `# comment` (a `#` inside a
/// string literal stays).
fn without_comment(text: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '#' if !quoted => return &text[..i],
            _ => {}
        }
    }
    text
}

/// Reasons a block's own statements can produce (plus consent's and the
/// trims' built-ins when their statements are in force).
fn producible_reasons(block: &EffectiveBlock, protocol: ProtocolRevision) -> Vec<&str> {
    let mut names = Vec::new();
    if !block.sampling.enabled {
        names.push(block.sampling.reason.as_str());
        // Nothing else can happen to a request of this block.
        return names;
    }
    // Every statement's own denial reason (the runtime's list), except the
    // switches that are on: they deny nothing.
    names.extend(
        block
            .statement_reasons()
            .into_iter()
            .filter(|(statement, _)| match *statement {
                "sampling" => false,
                "tools" => !block.tools.enabled,
                _ => true,
            })
            .map(|(_, reason)| reason),
    );
    if block.max_context != ContextScope::AllServers || protocol >= ProtocolRevision::V2026_07_28 {
        names.push(builtin::MAX_SCOPE);
    }
    if block.max_tokens.is_some() {
        names.push(builtin::MAX_TOKENS);
    }
    if block.models.is_some() {
        names.push(builtin::MODEL);
    }
    if block.consent != Consent::Never {
        names.push(builtin::USER_APPROVED);
        names.push(builtin::USER_DENIED);
    }
    names
}

/// Covered and total, and the percentage (100 when there is nothing to cover).
#[derive(Debug, Clone, Copy)]
pub struct Ratio {
    /// Items exercised.
    pub covered: usize,
    /// Items that could be.
    pub total: usize,
}

impl Ratio {
    /// The percentage.
    pub fn percent(self) -> f64 {
        if self.total == 0 {
            100.0
        } else {
            self.covered as f64 * 100.0 / self.total as f64
        }
    }
}

impl Coverage {
    /// Live statements exercised.
    pub fn statement_ratio(&self) -> Ratio {
        let live: Vec<_> = self.statements.iter().filter(|s| s.live).collect();
        Ratio {
            covered: live.iter().filter(|s| s.hits > 0).count(),
            total: live.len(),
        }
    }

    /// Producible reasons exercised.
    pub fn reason_ratio(&self) -> Ratio {
        Ratio {
            covered: self.reasons.iter().filter(|r| r.hits > 0).count(),
            total: self.reasons.len(),
        }
    }

    /// Statements and reasons together: what `--threshold` applies to.
    pub fn total_ratio(&self) -> Ratio {
        let (s, r) = (self.statement_ratio(), self.reason_ratio());
        Ratio {
            covered: s.covered + r.covered,
            total: s.total + r.total,
        }
    }

    /// The human report.
    pub fn human(&self) -> String {
        let mut out = String::new();
        let line = |label: &str, r: Ratio| {
            format!(
                "  {label:<11}{:>4}/{:<4} {:5.1}%\n",
                r.covered,
                r.total,
                r.percent()
            )
        };
        out.push_str(&format!("coverage of {}\n", self.policy));
        out.push_str(&line("statements", self.statement_ratio()));
        out.push_str(&line("reasons", self.reason_ratio()));
        out.push_str(&line("total", self.total_ratio()));
        let mut block = "";
        for s in &self.statements {
            if s.block != block {
                block = &s.block;
                out.push_str(&format!("  {block}\n"));
            }
            let mark = match (s.live, s.hits) {
                (false, _) => "dead".to_owned(),
                (true, 0) => "MISS".to_owned(),
                (true, n) => n.to_string(),
            };
            out.push_str(&format!("    {:>4}  {mark:>5}  {}\n", s.line, s.text));
        }
        out.push_str("  reasons\n");
        for r in &self.reasons {
            let mark = if r.hits == 0 {
                "MISS".to_owned()
            } else {
                r.hits.to_string()
            };
            let origin = r
                .line
                .map_or_else(|| "built-in".to_owned(), |l| format!("line {l}"));
            out.push_str(&format!("          {mark:>5}  {} ({origin})\n", r.name));
        }
        if self.statements.iter().any(|s| !s.live) {
            out.push_str("  dead: overridden in every block that could inherit it; not counted\n");
        }
        for u in &self.unattributed {
            out.push_str(&format!("  not traced to a statement: {u}\n"));
        }
        out
    }

    /// The JSON report.
    pub fn json(&self) -> Value {
        let ratio = |r: Ratio| json!({"covered": r.covered, "total": r.total, "percent": (r.percent() * 10.0).round() / 10.0});
        json!({
            "policy": self.policy,
            "statements": ratio(self.statement_ratio()),
            "reasons": ratio(self.reason_ratio()),
            "total": ratio(self.total_ratio()),
            "statement_list": self.statements.iter().map(|s| json!({
                "block": s.block, "line": s.line, "text": s.text, "live": s.live, "hits": s.hits,
            })).collect::<Vec<_>>(),
            "reason_list": self.reasons.iter().map(|r| json!({
                "name": r.name, "line": r.line, "hits": r.hits,
            })).collect::<Vec<_>>(),
            "unattributed": self.unattributed,
        })
    }
}
