//! The subcommands of `mcpc store`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use mcpolicy_compiler::explain;
use mcpolicy_compiler::statements;
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::store::{
    DecisionFilter, DecisionStore, LimitWindow, Millis, StoredEntry, Verdict,
};
use serde_json::{Value, json};

use super::output::{entry_json, expires, json_time, print_json, statement, table, time};
use super::{Access, Common, Ctx, Format, VerdictArg};
use crate::{emit, emit_err, fail, plural};

#[derive(Debug, clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    common: Common,
    /// Only this server's decisions (ids compare in Unicode NFC, as the proxy
    /// keys them).
    #[arg(long, value_name = "ID")]
    server: Option<String>,
    /// Only decisions with this reason, e.g. `user.denied`.
    #[arg(long, value_name = "NAME")]
    reason: Option<String>,
    /// Only stored approvals, or only stored denials.
    #[arg(long, value_enum, value_name = "VERDICT")]
    verdict: Option<VerdictArg>,
    /// Only decisions whose digest is no longer the server's effective block
    /// (they are never replayed again). Needs --policy.
    #[arg(long, requires = "policy", conflicts_with = "live")]
    stale: bool,
    /// Only decisions whose digest is still the server's effective block. Needs --policy.
    #[arg(long, requires = "policy")]
    live: bool,
    /// Only decisions that have expired (at --now) and wait to be pruned.
    #[arg(long)]
    expired: bool,
    /// The policy the proxy runs (`.mcpolicy` or a compiled table): adds
    /// whether each decision is still current.
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    common: Common,
    /// The request identity (`server:` and 32 hex digits, as `ls` lists it).
    #[arg(value_name = "IDENTITY")]
    identity: String,
    /// The policy the proxy runs: adds whether the decision is still current.
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("selection").required(true).multiple(true)))]
pub struct ForgetArgs {
    #[command(flatten)]
    common: Common,
    /// Forget the decision of this request identity.
    #[arg(long, value_name = "IDENTITY", group = "selection")]
    identity: Option<String>,
    /// Forget this server's decisions (ids compare in Unicode NFC, as the
    /// proxy keys them).
    #[arg(long, value_name = "ID", group = "selection")]
    server: Option<String>,
    /// Forget decisions with this reason, e.g. `user.denied`.
    #[arg(long, value_name = "NAME", group = "selection")]
    reason: Option<String>,
    /// Remove more than one decision (without it, forget refuses and exits 2).
    #[arg(long)]
    yes: bool,
}

#[derive(Debug, clap::Args)]
pub struct BudgetsArgs {
    #[command(flatten)]
    common: Common,
    /// The policy the proxy runs: its rate and budget statements are what is shown.
    #[arg(long, value_name = "POLICY")]
    policy: String,
    /// Only this server, in Unicode NFC as the proxy keys it [default: every
    /// server the store holds anything for].
    #[arg(long, value_name = "ID")]
    server: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    common: Common,
    /// How many servers and retry loops to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
}

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    #[command(flatten)]
    common: Common,
    /// The policy the proxy runs: also delete every server's stale decisions
    /// (made under a block that has since changed). Asks for --yes: every
    /// decision of another policy sharing the store is stale to this one.
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
    /// Delete the stale decisions --policy finds (without it, prune --policy
    /// lists how many each server has, deletes nothing, and exits 2; with
    /// none stale it prunes as usual).
    #[arg(long)]
    yes: bool,
}

/// A store error (it names the store) as exit 2.
fn store_fail(error: impl std::fmt::Display) -> ExitCode {
    fail(error)
}

/// Whether `entry` was made under the server's current block.
fn is_current(engine: &Engine, entry: &StoredEntry) -> bool {
    *entry.decision.digest == *engine.digest_for(&entry.key.server_id)
}

/// The text of the statement a store names `stored` (`budget:1`, `rate`)
/// in `server`'s effective block under `engine`'s policy, as `mcpc show`
/// prints it: `budget 200k tokens per 24h`. `None` for a name this runtime
/// does not know or a statement the block does not have.
fn statement_text(engine: &Engine, server: &str, stored: &str) -> Option<String> {
    let statement = mcpolicy_runtime::engine::Statement::from_stored_name(stored)?;
    let table = engine.policy().table();
    let entry = explain::select(table.servers.iter().map(|e| e.pattern.as_str()), server).matched;
    let block = &entry
        .and_then(|i| table.servers.get(i))
        .unwrap_or(&table.fallback)
        .block;
    let keyword = statements::Statement::from_keyword(statement.name())?;
    let nth = match statement {
        mcpolicy_runtime::engine::Statement::Budget(i) => i,
        _ => 0,
    };
    statements::effective_lines(block)
        .into_iter()
        .filter(|(s, _)| *s == keyword)
        .nth(nth)
        .map(|(_, line)| line)
}

/// `yes` / `stale` for the CURRENT column.
fn current_cell(current: Option<bool>) -> String {
    match current {
        Some(true) => "yes".to_owned(),
        Some(false) => "stale".to_owned(),
        None => String::new(),
    }
}

/// A `--server ID` as the store keys it: in NFC, as the engine and the proxy
/// normalise every server id before deciding (`docs/spec/identity.md`), so
/// `cafe\u{301}` typed on macOS finds the decisions of `caf\u{e9}`.
fn server_key(server: Option<&str>) -> Option<String> {
    server.map(|id| mcpolicy_runtime::table::pattern::nfc(id).into_owned())
}

pub fn ls(args: LsArgs) -> Result<ExitCode, ExitCode> {
    let ctx = Ctx::open(&args.common, Access::Read)?;
    let engine = args.policy.as_deref().map(|p| ctx.engine(p)).transpose()?;
    let filter = DecisionFilter {
        server_id: server_key(args.server.as_deref()),
        identity: None,
        reason: args.reason.clone(),
        verdict: args.verdict.map(Verdict::from),
    };
    let entries = ctx.store.decisions(&filter).map_err(store_fail)?;
    let rows: Vec<(StoredEntry, Option<bool>)> = entries
        .into_iter()
        .map(|entry| {
            let current = engine.as_ref().map(|engine| is_current(engine, &entry));
            (entry, current)
        })
        .filter(|(entry, current)| {
            (!args.expired || entry.decision.is_expired(ctx.now))
                && (!args.stale || *current == Some(false))
                && (!args.live || *current == Some(true))
        })
        .collect();
    match ctx.format {
        Format::Json => print_json(&json!({
            "store": ctx.spec,
            "now": json_time(ctx.now),
            "decisions": rows
                .iter()
                .map(|(entry, current)| entry_json(entry, ctx.now, *current))
                .collect::<Vec<_>>(),
        })),
        Format::Human if rows.is_empty() => emit("no stored decisions match\n"),
        Format::Human => {
            let mut headers = vec![
                "SERVER",
                "IDENTITY",
                "VERDICT",
                "REASON",
                "STATEMENT",
                "REPRESENTED",
                "STORED AT",
                "EXPIRES AT",
            ];
            if engine.is_some() {
                headers.push("CURRENT");
            }
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|(entry, current)| {
                    let d = &entry.decision;
                    let mut row = vec![
                        entry.key.server_id.clone(),
                        entry.key.identity.clone(),
                        d.verdict.as_str().to_owned(),
                        d.reason.to_string(),
                        // A current decision's statement is in the policy:
                        // its text; else the name the store recorded.
                        engine
                            .as_ref()
                            .filter(|_| *current == Some(true))
                            .and_then(|engine| {
                                statement_text(
                                    engine,
                                    &entry.key.server_id,
                                    d.statement.as_deref()?,
                                )
                            })
                            .unwrap_or_else(|| statement(entry)),
                        d.represented.to_string(),
                        time(d.decided_at),
                        expires(entry),
                    ];
                    if engine.is_some() {
                        row.push(current_cell(*current));
                    }
                    row
                })
                .collect();
            emit(&table(&headers, &cells));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn show(args: ShowArgs) -> Result<ExitCode, ExitCode> {
    let ctx = Ctx::open(&args.common, Access::Read)?;
    let engine = args.policy.as_deref().map(|p| ctx.engine(p)).transpose()?;
    let filter = DecisionFilter {
        identity: Some(args.identity.clone()),
        ..DecisionFilter::default()
    };
    let entries = ctx.store.decisions(&filter).map_err(store_fail)?;
    if entries.is_empty() {
        emit_err(&format!(
            "mcpc: no stored decision for identity {} in {}\n",
            args.identity, ctx.spec
        ));
        return Ok(ExitCode::from(1));
    }
    let current = |entry: &StoredEntry| engine.as_ref().map(|e| is_current(e, entry));
    match ctx.format {
        Format::Json => {
            // An identity names one server's request: one decision.
            let entry = &entries[0];
            print_json(&entry_json(entry, ctx.now, current(entry)));
        }
        Format::Human => {
            for entry in &entries {
                let d = &entry.decision;
                let mut lines = vec![
                    vec!["server".to_owned(), entry.key.server_id.clone()],
                    vec!["identity".to_owned(), entry.key.identity.clone()],
                    vec!["verdict".to_owned(), d.verdict.as_str().to_owned()],
                    vec!["reason".to_owned(), d.reason.to_string()],
                    vec![
                        "statement".to_owned(),
                        d.statement.as_deref().map_or_else(
                            || "? (not recorded: stored before schema 4)".to_owned(),
                            str::to_owned,
                        ),
                    ],
                    vec!["represented".to_owned(), d.represented.to_string()],
                    vec!["stored at".to_owned(), time(d.decided_at)],
                    vec![
                        "expires at".to_owned(),
                        match d.expires_at {
                            None => "never (until the server's block changes)".to_owned(),
                            Some(at) if d.is_expired(ctx.now) => format!("{} (expired)", time(at)),
                            Some(at) => time(at),
                        },
                    ],
                    vec!["digest".to_owned(), d.digest.to_string()],
                    vec![
                        "recomputable".to_owned(),
                        if d.recomputable { "yes" } else { "no" }.to_owned(),
                    ],
                ];
                if let Some(current) = current(entry) {
                    lines.push(vec![
                        "current".to_owned(),
                        if current {
                            "yes: the server's block is unchanged"
                        } else {
                            "no: stale, the server's block has changed"
                        }
                        .to_owned(),
                    ]);
                }
                let data = match d.data.as_deref() {
                    None => "none".to_owned(),
                    Some(text) => serde_json::from_str::<Value>(text)
                        .ok()
                        .and_then(|v| serde_json::to_string_pretty(&v).ok())
                        .unwrap_or_else(|| text.to_owned()),
                };
                lines.push(vec!["data".to_owned(), data]);
                emit(&fields(&lines));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `label  value` lines, the values aligned, a value's further lines
/// indented to its column.
fn fields(lines: &[Vec<String>]) -> String {
    let width = lines
        .iter()
        .map(|l| l[0].chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for line in lines {
        let mut value_lines = line[1].lines();
        out.push_str(&format!(
            "{:<width$}  {}\n",
            line[0],
            value_lines.next().unwrap_or("")
        ));
        for more in value_lines {
            out.push_str(&format!("{:<width$}  {more}\n", ""));
        }
    }
    out
}

pub fn forget(args: ForgetArgs) -> Result<ExitCode, ExitCode> {
    let ctx = Ctx::open(&args.common, Access::Write)?;
    let filter = DecisionFilter {
        server_id: server_key(args.server.as_deref()),
        identity: args.identity.clone(),
        reason: args.reason.clone(),
        verdict: None,
    };
    let matching = ctx.store.decisions(&filter).map_err(store_fail)?;
    if matching.is_empty() {
        emit_err(&format!(
            "mcpc: no stored decision matches; nothing removed from {}\n",
            ctx.spec
        ));
        return Ok(ExitCode::from(1));
    }
    if matching.len() > 1 && !args.yes {
        return Err(fail(format!(
            "{} stored decisions match and would be removed; pass --yes to remove them \
             (mcpc store ls with the same filters lists them)",
            matching.len()
        )));
    }
    // Without --yes exactly the one decision seen is removed, never one
    // that matched only after the count.
    let removed = if args.yes {
        ctx.store.forget(&filter)
    } else {
        ctx.store.forget(&DecisionFilter {
            server_id: Some(matching[0].key.server_id.clone()),
            identity: Some(matching[0].key.identity.clone()),
            ..filter.clone()
        })
    }
    .map_err(store_fail)?;
    if removed.is_empty() {
        emit_err("mcpc: the matching decision was already gone; nothing removed\n");
        return Ok(ExitCode::from(1));
    }
    match ctx.format {
        Format::Json => print_json(&json!({
            "store": ctx.spec,
            "removed": removed
                .iter()
                .map(|entry| entry_json(entry, ctx.now, None))
                .collect::<Vec<_>>(),
        })),
        Format::Human => {
            emit(&format!(
                "removed {} stored {}; the next identical request is decided afresh\n",
                removed.len(),
                plural(removed.len() as u64, "decision", "decisions")
            ));
            let cells: Vec<Vec<String>> = removed
                .iter()
                .map(|entry| {
                    vec![
                        entry.key.server_id.clone(),
                        entry.key.identity.clone(),
                        entry.decision.verdict.as_str().to_owned(),
                        entry.decision.reason.to_string(),
                        statement(entry),
                        entry.decision.represented.to_string(),
                    ]
                })
                .collect();
            emit(&table(
                &[
                    "SERVER",
                    "IDENTITY",
                    "VERDICT",
                    "REASON",
                    "STATEMENT",
                    "REPRESENTED",
                ],
                &cells,
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One limit of one server, as `budgets` reports it.
struct LimitRow {
    server: String,
    /// The stored name (`budget:0`), for scripts.
    statement: String,
    /// The statement as written (`budget 5 requests per day`), for people.
    text: String,
    limit: String,
    window: String,
    max: u64,
    spent: u64,
    remaining: u64,
    /// A calendar window's end; a used-up rolling window's next free moment.
    resets_at: Option<Millis>,
    /// When one more request (or token) fits: `None` = now.
    available_at: Option<Millis>,
}

pub fn budgets(args: BudgetsArgs) -> Result<ExitCode, ExitCode> {
    let ctx = Ctx::open(&args.common, Access::Read)?;
    let engine = ctx.engine(&args.policy)?;
    let servers = match server_key(args.server.as_deref()) {
        Some(server) => vec![server],
        None => ctx.store.servers().map_err(store_fail)?,
    };
    let mut per_server: Vec<(String, Vec<LimitRow>)> = Vec::new();
    for server in servers {
        let mut rows = Vec::new();
        for limit in engine.limits(&server, ctx.now) {
            let usage = ctx
                .store
                .usage(&server, &limit.check, ctx.now)
                .map_err(store_fail)?;
            let resets_at = match limit.check.window {
                LimitWindow::Fixed { end, .. } => Some(end),
                LimitWindow::Rolling { .. } => usage.available_at,
            };
            let stored = limit.statement.stored_name().into_owned();
            rows.push(LimitRow {
                server: server.clone(),
                text: statement_text(&engine, &server, &stored).unwrap_or_else(|| stored.clone()),
                statement: stored,
                limit: limit.limit,
                window: limit.window,
                max: limit.check.limit,
                spent: usage.spent,
                remaining: limit.check.limit.saturating_sub(usage.spent),
                resets_at,
                available_at: usage.available_at,
            });
        }
        per_server.push((server, rows));
    }
    match ctx.format {
        Format::Json => print_json(&json!({
            "store": ctx.spec,
            "now": json_time(ctx.now),
            "servers": per_server
                .iter()
                .map(|(server, rows)| json!({
                    "server": server,
                    "digest": engine.digest_for(server),
                    "limits": rows.iter().map(|row| json!({
                        "statement": row.statement,
                        "text": row.text,
                        "limit": row.limit,
                        "window": row.window,
                        "max": row.max,
                        "spent": row.spent,
                        "remaining": row.remaining,
                        "resetsAt": row.resets_at.map(json_time),
                        "availableAt": row.available_at.map(json_time),
                    })).collect::<Vec<_>>(),
                }))
                .collect::<Vec<_>>(),
        })),
        Format::Human => {
            let cells: Vec<Vec<String>> = per_server
                .iter()
                .flat_map(|(_, rows)| rows)
                .map(|row| {
                    vec![
                        row.server.clone(),
                        row.text.clone(),
                        row.limit.clone(),
                        row.window.clone(),
                        row.spent.to_string(),
                        row.remaining.to_string(),
                        row.resets_at.map_or_else(|| "-".to_owned(), time),
                        row.available_at.map_or_else(|| "now".to_owned(), time),
                    ]
                })
                .collect();
            if cells.is_empty() {
                emit("no rate or budget statement applies to the servers in the store\n");
            } else {
                emit(&table(
                    &[
                        "SERVER",
                        "STATEMENT",
                        "LIMIT",
                        "WINDOW",
                        "SPENT",
                        "REMAINING",
                        "RESETS AT",
                        "NEXT FITS",
                    ],
                    &cells,
                ));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A server's decisions, for `stats`.
#[derive(Default)]
struct ServerCount {
    denied: u64,
    allowed: u64,
    represented: u64,
}

pub fn stats(args: StatsArgs) -> Result<ExitCode, ExitCode> {
    let ctx = Ctx::open(&args.common, Access::Read)?;
    let entries = ctx
        .store
        .decisions(&DecisionFilter::default())
        .map_err(store_fail)?;
    let size = ctx.store.size().map_err(store_fail)?;
    let mut counts: BTreeMap<&str, ServerCount> = BTreeMap::new();
    for entry in &entries {
        let count = counts.entry(&entry.key.server_id).or_default();
        match entry.decision.verdict {
            Verdict::Deny => count.denied += 1,
            Verdict::Allow => count.allowed += 1,
        }
        count.represented = count.represented.saturating_add(entry.decision.represented);
    }
    let mut servers: Vec<(&str, ServerCount)> = counts.into_iter().collect();
    servers.sort_by(|a, b| b.1.denied.cmp(&a.1.denied).then(a.0.cmp(b.0)));
    servers.truncate(args.top);
    let mut evicted = Vec::with_capacity(servers.len());
    for (server, _) in &servers {
        evicted.push(ctx.store.server_stats(server).map_err(store_fail)?);
    }
    let mut loops: Vec<&StoredEntry> = entries
        .iter()
        .filter(|entry| entry.decision.represented > 0)
        .collect();
    loops.sort_by(|a, b| {
        b.decision
            .represented
            .cmp(&a.decision.represented)
            .then(a.key.identity.cmp(&b.key.identity))
    });
    loops.truncate(args.top);
    match ctx.format {
        Format::Json => print_json(&json!({
            "store": ctx.spec,
            "size": {
                "decisions": size.decisions,
                "spendRows": size.spend_rows,
                "bytes": size.bytes,
            },
            "servers": servers.iter().zip(&evicted).map(|((server, count), stats)| json!({
                "server": server,
                "denied": count.denied,
                "allowed": count.allowed,
                "represented": count.represented,
                "evicted": stats.evicted,
                "evictedRepresented": stats.evicted_represented,
            })).collect::<Vec<_>>(),
            "retryLoops": loops.iter().map(|entry| json!({
                "server": entry.key.server_id,
                "identity": entry.key.identity,
                "reason": &*entry.decision.reason,
                "statement": entry.decision.statement.as_deref(),
                "represented": entry.decision.represented,
                "storedAt": json_time(entry.decision.decided_at),
            })).collect::<Vec<_>>(),
        })),
        Format::Human => {
            let bytes = size
                .bytes
                .map_or_else(|| "in memory".to_owned(), |b| format!("{b} bytes"));
            emit(&format!(
                "store {}: {} {}, {} spend {}, {bytes}\n\nmost-denied servers\n",
                ctx.spec,
                size.decisions,
                plural(size.decisions, "decision", "decisions"),
                size.spend_rows,
                plural(size.spend_rows, "row", "rows"),
            ));
            let cells: Vec<Vec<String>> = servers
                .iter()
                .zip(&evicted)
                .map(|((server, count), stats)| {
                    vec![
                        (*server).to_owned(),
                        count.denied.to_string(),
                        count.allowed.to_string(),
                        count.represented.to_string(),
                        stats.evicted.to_string(),
                    ]
                })
                .collect();
            emit(&table(
                &["SERVER", "DENIED", "ALLOWED", "REPRESENTED", "EVICTED"],
                &cells,
            ));
            emit("\nhighest represented counts (retry loops)\n");
            let cells: Vec<Vec<String>> = loops
                .iter()
                .map(|entry| {
                    vec![
                        entry.key.server_id.clone(),
                        entry.key.identity.clone(),
                        entry.decision.reason.to_string(),
                        entry.decision.represented.to_string(),
                    ]
                })
                .collect();
            emit(&table(
                &["SERVER", "IDENTITY", "REASON", "REPRESENTED"],
                &cells,
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn prune(args: PruneArgs) -> Result<ExitCode, ExitCode> {
    let ctx = Ctx::open(&args.common, Access::Write)?;
    let engine = args.policy.as_deref().map(|p| ctx.engine(p)).transpose()?;
    if let Some(engine) = engine.as_ref().filter(|_| !args.yes)
        && let Some(refusal) = stale_without_yes(&ctx, engine)
    {
        return Err(refusal);
    }
    let pruned = ctx.store.prune_expired(ctx.now).map_err(store_fail)?;
    let mut stale: Vec<(String, u64)> = Vec::new();
    if let Some(engine) = &engine {
        for server in ctx.store.servers().map_err(store_fail)? {
            let removed = ctx
                .store
                .purge_stale(&server, engine.digest_for(&server), ctx.now)
                .map_err(store_fail)?;
            if removed > 0 {
                stale.push((server, removed));
            }
        }
    }
    match ctx.format {
        Format::Json => print_json(&json!({
            "store": ctx.spec,
            "now": json_time(ctx.now),
            "expiredDecisions": pruned.decisions,
            "spendRows": pruned.spend_rows,
            "stale": engine.as_ref().map(|_| stale
                .iter()
                .map(|(server, removed)| json!({"server": server, "removed": removed}))
                .collect::<Vec<_>>()),
        })),
        Format::Human => {
            emit(&format!(
                "removed {} expired {} and {} spend {} past their retention\n",
                pruned.decisions,
                plural(pruned.decisions, "decision", "decisions"),
                pruned.spend_rows,
                plural(pruned.spend_rows, "row", "rows"),
            ));
            if engine.is_some() {
                let total: u64 = stale.iter().map(|(_, n)| n).sum();
                emit(&format!(
                    "removed {total} stale {} (made under a block that has changed)\n",
                    plural(total, "decision", "decisions")
                ));
                if !stale.is_empty() {
                    let cells: Vec<Vec<String>> = stale
                        .iter()
                        .map(|(server, n)| vec![server.clone(), n.to_string()])
                        .collect();
                    emit(&table(&["SERVER", "STALE REMOVED"], &cells));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `prune --policy` without `--yes`: how many stale decisions each server
/// has under `engine`'s policy (what would go), nothing deleted, exit 2;
/// `None` when there are none, so the prune goes on (there is nothing to
/// confirm). The policy may not be the one that made them: a store shared
/// by two policies holds decisions that are stale to each other
/// (`docs/spec/store.md`, "Digests and staleness").
fn stale_without_yes(ctx: &Ctx, engine: &Engine) -> Option<ExitCode> {
    let entries = match ctx.store.decisions(&DecisionFilter::default()) {
        Ok(entries) => entries,
        Err(error) => return Some(store_fail(error)),
    };
    let mut stale: BTreeMap<&str, u64> = BTreeMap::new();
    for entry in &entries {
        if !is_current(engine, entry) {
            *stale.entry(&entry.key.server_id).or_default() += 1;
        }
    }
    let total: u64 = stale.values().sum();
    if total == 0 {
        return None;
    }
    let servers: Vec<String> = stale
        .iter()
        .map(|(server, n)| format!("{server} ({n})"))
        .collect();
    Some(fail(format!(
        "prune --policy deletes every decision this policy does not make, those of another \
         policy sharing the store included: {total} stale {} in {} {}{}; pass --yes to delete \
         them (nothing was deleted)",
        plural(total, "decision", "decisions"),
        stale.len(),
        plural(stale.len() as u64, "server", "servers"),
        if servers.is_empty() {
            String::new()
        } else {
            format!(": {}", servers.join(", "))
        }
    )))
}
