//! `mcpc wrap CONFIG --policy FILE [--store SPEC] [--audit FILE] [--dry-run]`,
//! `mcpc wrap --undo CONFIG [--dry-run]`, `mcpc wrap --list CONFIG [--policy FILE] [--format human|json]`
//!
//! Puts every stdio server of an MCP client's configuration behind `mcpc
//! proxy` in one command, and takes it out again
//! (`docs/spec/clients.md`, "What `mcpc wrap` writes"). The text is edited
//! in place ([`edit`]); the file is backed up, then replaced atomically as
//! `mcpc fmt` replaces a policy.

mod edit;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mcpolicy_runtime::Policy;
use mcpolicy_store_postgres::StoreSpec;

use super::policy::{LoadFailure, PolicySource, load_policy_with_source};
use super::show::{BlockReport, Format};
use super::{ColorChoice, emit, fail, fmt, store_open, user_config};
use edit::{Kind, Outcome, Wrapping};
use serde_json::{Value, json};

const WRAP_HELP: &str = "\
Formats: Claude Desktop's claude_desktop_config.json, Claude Code's .mcp.json, Cursor's
and Windsurf's mcp.json (`mcpServers`), VS Code's mcp.json (`servers`, JSONC: comments and
trailing commas are kept). Each stdio server becomes `mcpc proxy --policy FILE --server-id
NAME --store SPEC -- COMMAND ARGS…`, NAME its name in the file; its `env`, `cwd` and every
other member stay as they are, and what was replaced is kept in `mcpcOriginal` for --undo.
HTTP servers are left as they are. Before a change the file is copied to CONFIG.mcpc-backup.

Exit codes: 0 written, nothing to change, or listed; 2 usage or I/O error, a file that is
not JSON/JSONC or has no server map, or a policy with errors (nothing is written).";

#[derive(Debug, clap::Args)]
#[command(after_help = WRAP_HELP)]
pub struct Args {
    /// The client's configuration file.
    #[arg(value_name = "CONFIG")]
    config: PathBuf,
    /// The policy every wrapped server runs behind (checked first).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["undo", "list"])]
    policy: Option<PathBuf>,
    /// The decision store the proxies use, written into each entry [default: the one
    /// `mcpc store` finds: `store` in ~/.config/mcpolicy/config.toml, else the platform's];
    /// a store given here is also recorded in that file when it names none.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["undo", "list"])]
    store: Option<String>,
    /// Each proxy appends its decisions to FILE (`mcpc proxy --audit`).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["undo", "list"])]
    audit: Option<PathBuf>,
    /// The mcpc the client starts [default: this mcpc's absolute path].
    #[arg(long, value_name = "PATH", conflicts_with_all = ["undo", "list"])]
    mcpc: Option<String>,
    /// Put every wrapped server back exactly as it was.
    #[arg(long, conflicts_with = "list")]
    undo: bool,
    /// List each server: whether it is wrapped and which policy block governs it.
    #[arg(long)]
    list: bool,
    /// Output format of --list: text, or one JSON document
    /// (`{"config", "servers": [{"map", "name", "state", …}]}`).
    #[arg(long, value_enum, default_value_t = Format::Human, requires = "list")]
    format: Format,
    /// Change nothing; print a unified diff of the change.
    #[arg(long, conflicts_with = "list")]
    dry_run: bool,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

pub fn run(args: Args) -> ExitCode {
    let shown = args.config.display().to_string();
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(error) => return fail(format!("cannot read {shown}: {error}")),
    };
    if args.list {
        return list(&args, &shown, &text);
    }
    let rewritten = if args.undo {
        edit::undo(&text)
    } else {
        let how = match wrapping(&args) {
            Ok(how) => how,
            Err(code) => return code,
        };
        edit::wrap(&text, &how)
    };
    let (new, outcomes) = match rewritten {
        Ok(done) => done,
        Err(error) => return fail(format!("{shown}: {error}")),
    };
    for outcome in &outcomes {
        sayln!("{}", describe(outcome, args.undo));
    }
    if new == text {
        sayln!("{shown}: nothing to change");
        return ExitCode::SUCCESS;
    }
    if args.dry_run {
        emit(&fmt::unified_diff(&shown, &text, &new));
        return ExitCode::SUCCESS;
    }
    let backup = backup_path(&args.config);
    if let Err(error) = write_backup(&args.config, &backup, &text) {
        return fail(error);
    }
    if let Err(error) = fmt::write_atomically(&args.config.to_string_lossy(), &new) {
        return fail(error);
    }
    sayln!("wrote {shown} (the file as it was: {})", backup.display());
    if let Some(store) = &args.store {
        record_store(store);
    }
    ExitCode::SUCCESS
}

/// One line per server of what the rewrite did.
fn describe(outcome: &Outcome, undo: bool) -> String {
    let name = &outcome.name;
    if let Some(why) = &outcome.skipped {
        return format!("left `{name}` as it is: {why}");
    }
    match (&outcome.kind, outcome.changed, undo) {
        (Kind::Wrapped, true, true) => format!("restored `{name}`"),
        (_, false, true) => format!("`{name}` is not wrapped"),
        (Kind::Stdio, true, false) => format!("wrapped `{name}`"),
        (Kind::Wrapped, true, false) => format!("rewrapped `{name}` with the new settings"),
        (Kind::Wrapped, false, false) => format!("`{name}` is wrapped already"),
        (_, _, _) => format!("left `{name}` as it is"),
    }
}

/// The settings every wrapped entry gets, with the policy checked first.
fn wrapping(args: &Args) -> Result<Wrapping, ExitCode> {
    let policy = args
        .policy
        .as_ref()
        .ok_or_else(|| fail("--policy FILE is required"))?;
    let policy_text = policy.to_string_lossy();
    match load_policy_with_source(&policy_text, args.color) {
        Ok(_) => {}
        Err(LoadFailure::Usage(message)) => return Err(fail(message)),
        Err(LoadFailure::Findings) => {
            return Err(fail(format!(
                "{policy_text} has errors; nothing was written"
            )));
        }
    }
    let store = match &args.store {
        Some(store) => store.clone(),
        None => store_open::default_spec().map_err(fail)?,
    };
    // A client starts the proxy in a working directory of its own choosing:
    // every path is made absolute here.
    let store = if StoreSpec::looks_like_postgres(&store) {
        store
    } else {
        absolute(Path::new(&store))?
    };
    let mcpc = match &args.mcpc {
        Some(mcpc) => mcpc.clone(),
        None => std::env::current_exe()
            .map_err(|e| {
                fail(format!(
                    "cannot find this mcpc's path ({e}); pass --mcpc PATH"
                ))
            })?
            .to_string_lossy()
            .into_owned(),
    };
    Ok(Wrapping {
        mcpc,
        policy: absolute(policy)?,
        store,
        audit: args.audit.as_deref().map(absolute).transpose()?,
    })
}

fn absolute(path: &Path) -> Result<String, ExitCode> {
    std::path::absolute(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| fail(format!("cannot make {} absolute: {e}", path.display())))
}

/// `CONFIG.mcpc-backup`, beside the file.
fn backup_path(config: &Path) -> PathBuf {
    let mut name = config.as_os_str().to_owned();
    name.push(".mcpc-backup");
    PathBuf::from(name)
}

/// Writes the file as it was to `backup`, with its permissions (a client's
/// configuration may hold secrets in `env`), through a temporary file.
fn write_backup(config: &Path, backup: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;

    let cannot = |e: std::io::Error| format!("cannot write the backup {}: {e}", backup.display());
    let permissions = std::fs::metadata(config)
        .map_err(|e| format!("cannot read {}: {e}", config.display()))?
        .permissions();
    let dir = match backup.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".mcpc-wrap-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(cannot)?;
    temp.as_file()
        .set_permissions(permissions)
        .map_err(cannot)?;
    temp.write_all(text.as_bytes()).map_err(cannot)?;
    temp.as_file().sync_all().map_err(cannot)?;
    temp.persist(backup).map_err(|e| cannot(e.error))?;
    Ok(())
}

/// Records a store given to wrap in the user's configuration, so `mcpc
/// store` finds the store these proxies write (`docs/spec/clients.md`,
/// "Which store"); says so when that file names another.
fn record_store(store: &str) {
    let Some(path) = user_config::path() else {
        return;
    };
    match user_config::record_store(&path, store) {
        Ok(recorded) if recorded == store => {
            sayln!("mcpc store reads this store: {} names it", path.display());
        }
        Ok(recorded) => sayln!(
            "note: {} names the store {recorded}; `mcpc store` reads that one unless given --store {store}",
            path.display()
        ),
        Err(error) => sayln!("note: the store was not recorded: {error}"),
    }
}

/// The value of `--option` among proxy arguments (before `--`).
fn option<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    let end = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let args = &argv[..end];
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .or_else(|| {
            let prefix = format!("{name}=");
            args.iter().find_map(|a| a.strip_prefix(&prefix))
        })
}

type Loaded = Result<(Policy, Option<PolicySource>), String>;

/// One server of `--list`.
#[derive(Default)]
struct Listed {
    /// The server map's key (`mcpServers`, `servers`) and the clients that use it.
    map: &'static str,
    clients: &'static str,
    name: String,
    /// `stdio`, `wrapped`, `by-hand`, `http` or `unknown`.
    state: &'static str,
    /// What was not understood (`unknown`).
    why: Option<String>,
    policy: Option<String>,
    server_id: Option<String>,
    /// The governing block (`mcpc show --format json`'s `block`), and its
    /// one-line description.
    block: Option<(Value, String)>,
    warning: Option<String>,
    /// Why no block could be named (no id, a policy that does not load).
    error: Option<String>,
}

/// `--list`: each server, whether it is wrapped, and the block that governs it.
fn list(args: &Args, shown: &str, text: &str) -> ExitCode {
    let servers = match edit::servers(text) {
        Ok(servers) => servers,
        Err(error) => return fail(format!("{shown}: {error}")),
    };
    let mut policies: HashMap<String, Loaded> = HashMap::new();
    let listed: Vec<Listed> = servers
        .iter()
        .map(|server| listed(args, &mut policies, server))
        .collect();
    match args.format {
        Format::Human => emit(&list_human(shown, &listed)),
        Format::Json => emit(&format!("{:#}\n", list_json(shown, &listed))),
    }
    ExitCode::SUCCESS
}

fn listed(args: &Args, policies: &mut HashMap<String, Loaded>, server: &edit::Server) -> Listed {
    let mut row = Listed {
        map: server.map,
        clients: edit::SERVER_MAPS
            .iter()
            .find(|(key, _)| *key == server.map)
            .map_or("", |(_, clients)| clients),
        name: server.name.clone(),
        ..Listed::default()
    };
    row.state = match &server.kind {
        Kind::Stdio => "stdio",
        Kind::Wrapped => "wrapped",
        Kind::ByHand => "by-hand",
        Kind::Http => "http",
        Kind::Unknown(why) => {
            row.why = Some(why.clone());
            "unknown"
        }
    };
    let proxied = matches!(server.kind, Kind::Wrapped | Kind::ByHand);
    row.policy = match (&args.policy, proxied) {
        (Some(policy), _) => Some(policy.to_string_lossy().into_owned()),
        (None, true) => option(&server.command, "--policy").map(str::to_owned),
        (None, false) => None,
    };
    let Some(policy) = row.policy.clone() else {
        return row;
    };
    let id = if proxied {
        match option(&server.command, "--server-id") {
            Some(id) => id.to_owned(),
            None => {
                let command = server.command.iter().skip_while(|a| *a != "--").skip(1);
                let command: Vec<std::ffi::OsString> = command.map(Into::into).collect();
                match mcpolicy_proxy::server_id::derive(&command) {
                    Ok(id) => id,
                    Err(error) => {
                        row.error = Some(format!("no server id: {error}"));
                        return row;
                    }
                }
            }
        }
    } else {
        server.name.clone()
    };
    row.server_id = Some(id.clone());
    let loaded = policies.entry(policy.clone()).or_insert_with(|| {
        load_policy_with_source(&policy, args.color).map_err(|failure| match failure {
            LoadFailure::Usage(message) => message,
            LoadFailure::Findings => format!("{policy} has errors"),
        })
    });
    match loaded {
        Ok((policy, source)) => {
            let report = BlockReport::governing(policy.table(), source.as_ref(), &id);
            row.block = Some((report.json()["block"].clone(), report.governed_by()));
            row.warning = report.warning();
        }
        Err(error) => row.error = Some(format!("policy {policy}: {error}")),
    }
    row
}

fn list_human(shown: &str, listed: &[Listed]) -> String {
    let mut out = String::new();
    let mut map = "";
    for row in listed {
        if row.map != map {
            map = row.map;
            out.push_str(&format!("{shown}: `{map}` ({})\n", row.clients));
        }
        let state = match row.state {
            "stdio" => "stdio, not wrapped".to_owned(),
            "wrapped" => "stdio, wrapped".to_owned(),
            "by-hand" => "stdio, behind mcpc proxy (written by hand)".to_owned(),
            "http" => "HTTP, left as it is (mcpc proxy runs stdio servers)".to_owned(),
            _ => format!("not understood: {}", row.why.as_deref().unwrap_or("")),
        };
        out.push_str(&format!("  {}: {state}\n", row.name));
        if row.policy.is_none() && row.state == "stdio" {
            out.push_str("    governing block: give --policy to see it\n");
        }
        if let Some((_, governed_by)) = &row.block {
            out.push_str(&format!("    governing block: {governed_by}\n"));
        }
        if let Some(warning) = &row.warning {
            out.push_str(&format!("    warning: {warning}\n"));
        }
        if let Some(error) = &row.error {
            out.push_str(&format!("    {error}\n"));
        }
    }
    out
}

fn list_json(shown: &str, listed: &[Listed]) -> Value {
    let servers: Vec<Value> = listed
        .iter()
        .map(|row| {
            json!({
                "map": row.map,
                "name": row.name,
                "state": row.state,
                "why": row.why,
                "policy": row.policy,
                "serverId": row.server_id,
                "block": row.block.as_ref().map(|(block, _)| block),
                "warning": row.warning,
                "error": row.error,
            })
        })
        .collect();
    json!({ "config": shown, "servers": servers })
}
