//! Writes a large, realistic and valid `.mcpolicy` for benchmarks:
//!
//! ```text
//! cargo run --release -p mcpolicy-compiler --example gen_policy -- \
//!     --servers 10000 [--seed N] [--globs-percent 5] [-o FILE]
//! ```
//!
//! The output is clean under `mcpc check --deny-warnings`: every custom
//! reason it declares is used, no block is shadowed (glob patterns carry a
//! `-preview-` or `-shard-` segment that no exact id has, and the catch-all
//! `"*"` comes last), no statement is repeated, and `sampling off` blocks say
//! nothing else. The same seed always gives the same bytes.
//!
//! `benches/check.rs` includes this file with `#[path]` and calls
//! [`generate`].

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Number of `server` blocks (the last is the catch-all `"*"`).
    pub servers: usize,
    /// Seed of the pseudo-random choices.
    pub seed: u64,
    /// Share of server blocks whose pattern is a glob, in percent.
    pub globs_percent: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            servers: 1_000,
            seed: 1,
            globs_percent: 5,
        }
    }
}

/// xorshift64*: tiny, deterministic, good enough for test data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // Never zero; spread small seeds over the state.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        // The modulo bias is irrelevant here.
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const VENDORS: &[&str] = &[
    "acme",
    "atlas",
    "billing",
    "confluence",
    "datadog",
    "docs",
    "figma",
    "github",
    "gitlab",
    "hr",
    "internal",
    "jira",
    "kube",
    "linear",
    "local",
    "notion",
    "oncall",
    "postgres",
    "quickbooks",
    "redis",
    "release",
    "salesforce",
    "sentry",
    "slack",
    "stripe",
    "terraform",
    "vault",
    "web",
    "xero",
    "zendesk",
];

const PRODUCTS: &[&str] = &[
    "search", "issues", "notes", "files", "wiki", "metrics", "alerts", "deploy", "reports",
    "tickets", "chat", "calendar", "mail", "crm", "ledger", "builds",
];

const MODELS: &[&str] = &[
    "claude-*",
    "claude-sonnet-*",
    "claude-haiku-*",
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1*",
    "gemini-2.5-*",
    "llama-3*",
    "mistral-large",
    "local/*",
];

const COMMENTS: &[&str] = &[
    "owned by the platform team",
    "see the runbook before raising limits",
    "reviewed last quarter",
    "noisy: keep the rate low",
    "summaries only",
    "expensive: capped per month",
    "temporary, until the migration is done",
    "used by the nightly agent",
];

/// Custom reasons: name, declaration body, and the statement that may use it.
const CUSTOM_REASONS: &[(&str, &str, Use)] = &[
    (
        "acme.offline",
        "retryable false; ttl forever; message \"Sampling is switched off for {server}\"",
        Use::SamplingOff,
    ),
    (
        "acme.no_tools",
        "retryable false; ttl forever",
        Use::ToolsOff,
    ),
    (
        "acme.too_long",
        "retryable false; ttl forever; message \"Request too large for {server} (limit {limit})\"",
        Use::Input,
    ),
    (
        "acme.slow_down",
        "retryable true; ttl 5m; message \"Too many requests; retry in {retryAfter}s\"",
        Use::Rate,
    ),
    (
        "acme.too_expensive",
        "retryable false; ttl until_reset; message \"Spend cap reached; resets at {resetsAt}\"",
        Use::Budget,
    ),
    ("acme.overdue", "retryable true; ttl 2m", Use::Deadline),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    SamplingOff,
    ToolsOff,
    Input,
    Rate,
    Budget,
    Deadline,
}

struct Gen {
    rng: Rng,
    used: [bool; CUSTOM_REASONS.len()],
    out: String,
}

impl Gen {
    /// ` as acme.x` now and then (always the first time, so short files use every reason).
    fn as_clause(&mut self, use_: Use) -> &'static str {
        let Some(index) = CUSTOM_REASONS.iter().position(|r| r.2 == use_) else {
            return "";
        };
        if !self.used[index] || self.rng.chance(15) {
            self.used[index] = true;
            match use_ {
                Use::SamplingOff => " as acme.offline",
                Use::ToolsOff => " as acme.no_tools",
                Use::Input => " as acme.too_long",
                Use::Rate => " as acme.slow_down",
                Use::Budget => " as acme.too_expensive",
                Use::Deadline => " as acme.overdue",
            }
        } else {
            ""
        }
    }

    fn duration(&mut self, choices: &[&str]) -> String {
        self.rng.pick(choices).to_owned()
    }

    fn statement(&mut self, kind: usize) -> String {
        let r = &mut self.rng;
        match kind {
            0 => {
                let off = r.chance(20);
                let mut s = format!("tools {}", if off { "off" } else { "on" });
                if off {
                    s.push_str(self.as_clause(Use::ToolsOff));
                }
                s
            }
            1 => format!(
                "max_context {}",
                r.pick(&["none", "thisServer", "thisServer", "allServers"])
            ),
            2 => {
                let size = match r.below(4) {
                    0 => format!("{} KiB", 16 << r.below(4)),
                    1 => format!("{}KiB", 8 * (1 + r.below(32))),
                    2 => format!("{} MiB", 1 + r.below(4)),
                    _ => format!("{} B", 4096 * (1 + r.below(64))),
                };
                format!("max_input {size}{}", self.as_clause(Use::Input))
            }
            3 => format!(
                "{} {}{}",
                count_limit(),
                5 * (1 + r.below(40)),
                self.as_clause(Use::Input)
            ),
            4 => {
                let tokens = match r.below(3) {
                    0 => format!("{}", 256 << r.below(6)),
                    1 => format!("{}k", 1 + r.below(32)),
                    _ => "8_192".to_owned(),
                };
                format!("max_tokens {tokens}")
            }
            5 => {
                let count = 1 + r.below(120);
                let window = self.duration(&["10s", "30s", "1m", "5m", "1h"]);
                format!("rate {count} per {window}{}", self.as_clause(Use::Rate))
            }
            6 => {
                let deadline = self.duration(&["250ms", "5s", "30s", "45s", "2m", "10m"]);
                format!("deadline {deadline}{}", self.as_clause(Use::Deadline))
            }
            7 => format!("consent {}", r.pick(&["first", "first", "always", "never"])),
            8 => {
                let n = 1 + r.below(3);
                let start = r.below(MODELS.len());
                let list: Vec<String> = (0..n)
                    .map(|i| format!("\"{}\"", MODELS[(start + i) % MODELS.len()]))
                    .collect();
                format!("models {}", list.join(", "))
            }
            _ => "sampling on".to_owned(),
        }
    }

    /// One or two budgets over different (metric, window) pairs.
    fn budgets(&mut self, block: &mut Vec<String>) {
        const WINDOWS: &[&str] = &["hour", "day", "week", "month", "24h", "7d", "90m", "12h"];
        let n = 1 + self.rng.below(2);
        let first = self.rng.below(WINDOWS.len());
        let metric_first = self.rng.below(2);
        for i in 0..n {
            // Different windows, so never a duplicate budget.
            let window = WINDOWS[(first + i * 3) % WINDOWS.len()];
            let metric = if (metric_first + i).is_multiple_of(2) {
                "requests"
            } else {
                "tokens"
            };
            let limit = if metric == "tokens" {
                format!("{}k", 10 * (1 + self.rng.below(100)))
            } else {
                format!("{}", 10 * (1 + self.rng.below(500)))
            };
            let as_ = self.as_clause(Use::Budget);
            block.push(format!("budget {limit} {metric} per {window}{as_}"));
        }
    }

    fn server(&mut self, pattern: &str) {
        if self.rng.chance(12) {
            let comment = self.rng.pick(COMMENTS);
            let _ = writeln!(self.out, "# {comment}");
        }
        // A few servers are switched off entirely (nothing else may be said).
        if self.rng.chance(4) {
            let as_ = self.as_clause(Use::SamplingOff);
            if self.rng.chance(50) {
                let _ = writeln!(self.out, "server \"{pattern}\" {{ sampling off{as_} }}\n");
            } else {
                let _ = writeln!(
                    self.out,
                    "server \"{pattern}\" {{\n  sampling off{as_}\n}}\n"
                );
            }
            return;
        }
        let mut stmts: Vec<String> = Vec::with_capacity(10);
        // Seven to nine distinct statement kinds out of ten, in a random order, plus budgets.
        let mut kinds: Vec<usize> = (0..10).collect();
        for i in (1..kinds.len()).rev() {
            let j = self.rng.below(i + 1);
            kinds.swap(i, j);
        }
        let take = 6 + self.rng.below(3);
        for &kind in &kinds[..take] {
            stmts.push(self.statement(kind));
        }
        if self.rng.chance(60) {
            let mut budgets = Vec::new();
            self.budgets(&mut budgets);
            let at = self.rng.below(stmts.len() + 1);
            for (i, b) in budgets.into_iter().enumerate() {
                stmts.insert(at + i, b);
            }
        }
        let _ = writeln!(self.out, "server \"{pattern}\" {{");
        for stmt in &stmts {
            if self.rng.chance(3) {
                let comment = self.rng.pick(COMMENTS);
                let _ = writeln!(self.out, "  {stmt}    # {comment}");
            } else {
                let _ = writeln!(self.out, "  {stmt}");
            }
        }
        self.out.push_str("}\n\n");
    }
}

/// The policy text for `options`.
pub fn generate(options: Options) -> String {
    let mut g = Gen {
        rng: Rng::new(options.seed),
        used: [false; CUSTOM_REASONS.len()],
        out: String::with_capacity(options.servers * 260 + 4096),
    };
    // Blocks first (they decide which custom reasons are used), header after.
    let servers = options.servers;
    let mut glob_serial = 0usize;
    for i in 0..servers {
        if i + 1 == servers && servers > 1 {
            // Everything not listed: off. Last, so it shadows nothing.
            g.out
                .push_str("# every other server\nserver \"*\" {\n  sampling off\n}\n");
            break;
        }
        let vendor = g.rng.pick(VENDORS);
        let product = g.rng.pick(PRODUCTS);
        let glob = g.rng.below(100) < options.globs_percent as usize;
        let pattern = if glob {
            // `-preview-` and `-shard-` appear in no exact id and the serial
            // is unique, so no glob covers another block, before or after.
            glob_serial += 1;
            if g.rng.chance(70) {
                format!("{vendor}-{product}-preview-{glob_serial}-*")
            } else {
                format!("{vendor}-shard-{glob_serial}-?")
            }
        } else {
            // The index makes every exact id unique.
            format!("{vendor}-{product}-{i:05}")
        };
        g.server(&pattern);
    }

    let mut head = String::with_capacity(2048);
    let _ = writeln!(
        head,
        "# Generated by gen_policy: {servers} servers, seed {}, {}% globs.\nmcpolicy 1\nprotocol 2025-11-25\nerror_code -32010                      # implementation band\nidentity systemPrompt, messages, includeContext, modelPreferences\n",
        options.seed, options.globs_percent
    );
    head.push_str(
        "# Built-in reasons, restated.\n\
         reason policy.rate_limit        { retryable true;  ttl 60s }\n\
         reason policy.deadline          { retryable true;  ttl 30s }\n\
         reason policy.budget_exhausted  { retryable false; ttl until_reset }\n\
         reason user.denied {\n  retryable false\n  ttl forever\n  message \"The user declined sampling for {server}\"\n}\n\n\
         # Our own.\n",
    );
    for (index, (name, body, _)) in CUSTOM_REASONS.iter().enumerate() {
        if g.used[index] {
            let _ = writeln!(head, "reason {name} {{ {body} }}");
        }
    }
    let _ = write!(
        head,
        "\ndefaults {{\n\
         \x20 max_context thisServer               # wider requests are trimmed\n\
         \x20 max_input 64 KiB\n\
         \x20 {} 50\n\
         \x20 max_tokens 4096\n\
         \x20 rate 30 per 1m\n\
         \x20 budget 2M tokens per month\n\
         \x20 deadline 60s\n\
         \x20 consent first\n\
         \x20 models \"claude-*\", \"gpt-4o\"\n\
         }}\n\n",
        count_limit()
    );
    head.push_str(&g.out);
    head
}

/// The keyword of the count limit that denies (the message count), read
/// from the statement table so that the generator names no statement the
/// table does not hold.
fn count_limit() -> &'static str {
    use mcpolicy_compiler::statements::{Shape, Statement, Unit};
    Statement::ALL
        .iter()
        .map(|s| s.decl())
        .find(|d| d.shape == Shape::Quantity(Unit::Count) && d.denies())
        .map_or("max_input", |d| d.keyword())
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: gen_policy --servers N [--seed N] [--globs-percent P] [-o FILE]\n\
         writes a valid .mcpolicy with N server blocks (stdout unless -o)"
    );
    ExitCode::from(2)
}

#[allow(dead_code)]
fn main() -> ExitCode {
    let mut options = Options::default();
    let mut output: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        if flag == "-h" || flag == "--help" {
            usage();
            return ExitCode::SUCCESS;
        }
        let Some(value) = inline.or_else(|| args.next()) else {
            eprintln!("gen_policy: {flag} needs a value");
            return usage();
        };
        let bad = |what: &str| {
            eprintln!("gen_policy: {flag} expects {what}, found `{value}`");
            usage()
        };
        match flag.as_str() {
            "--servers" => match value.parse() {
                Ok(n) => options.servers = n,
                Err(_) => return bad("a count"),
            },
            "--seed" => match value.parse() {
                Ok(n) => options.seed = n,
                Err(_) => return bad("an integer"),
            },
            "--globs-percent" => match value.parse() {
                Ok(n) if n <= 100 => options.globs_percent = n,
                _ => return bad("a percentage from 0 to 100"),
            },
            "-o" | "--output" => output = Some(value),
            _ => {
                eprintln!("gen_policy: unknown argument `{arg}`");
                return usage();
            }
        }
    }
    let text = generate(options);
    let written = match &output {
        Some(path) if path != "-" => std::fs::write(path, &text),
        _ => std::io::stdout().lock().write_all(text.as_bytes()),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "gen_policy: cannot write {}: {error}",
                output.as_deref().unwrap_or("stdout")
            );
            ExitCode::from(2)
        }
    }
}
