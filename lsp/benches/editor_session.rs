//! An editor-like session, over stdio against the built
//! `mcpolicy-lsp`: a generated policy of about 10,000 lines
//! (`compiler/examples/gen_policy.rs`, seed 1) is opened, then a character
//! is typed (or deleted) inside a `server` block in the middle of the file
//! every 120 ms, and each edit is followed at once, as an editor does, by
//! `documentSymbol`, semantic tokens (`full`, or `full/delta` when the
//! server offers it), `foldingRange` and `inlayHint` for the visible lines.
//! Printed: typing latency (the `didChange` until the `publishDiagnostics`
//! of that version or a later one), `documentSymbol` latency and response
//! size, the server's CPU per edit and its RSS.
//!
//! A second session opens a file with 3,000 warnings (W0604 in 1,000
//! `sampling off` blocks) and times edits alone, every 120 ms: the
//! server's CPU per edit from `/proc/PID/stat`, once as a client that only
//! takes pushed diagnostics and once, when the server offers it, as a
//! client that pulls them (`textDocument/diagnostic` with the previous
//! result id after each edit).
//!
//! ```sh
//! cargo bench -p mcpolicy-lsp --bench editor_session
//! ```
//!
//! `MCPOLICY_BENCH_EDITS` (default 150), `MCPOLICY_BENCH_LINES` (default
//! 10,000), `MCPOLICY_BENCH_WARNINGS` (default 3,000),
//! `MCPOLICY_BENCH_INTERVAL_MS` (default 120); `MCPOLICY_LSP_BIN` drives
//! another build of the server (to compare two commits the same way).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Server, URI, cpu_time, env_usize, percentile, status_kib};

#[path = "../../compiler/examples/gen_policy.rs"]
#[allow(dead_code)]
mod gen_policy;

/// A generated policy of at least `lines` lines (the fewest servers that
/// reach it).
fn policy(lines: usize) -> String {
    let generate = |servers| {
        gen_policy::generate(gen_policy::Options {
            servers,
            seed: 1,
            globs_percent: 5,
        })
    };
    let sample = generate(1_000).lines().count();
    let mut servers = (lines * 1_000 / sample).max(2);
    loop {
        let text = generate(servers);
        if text.lines().count() >= lines {
            return text;
        }
        servers += 10;
    }
}

/// A policy with `warnings` findings of W0604 ("statement has no effect"):
/// blocks that say `sampling off` and three statements more, and in the
/// middle one clean block where the edits are made.
fn warnings_policy(warnings: usize) -> String {
    let mut text =
        String::from("mcpolicy 1\nprotocol 2025-11-25\n\ndefaults {\n  max_tokens 4096\n}\n");
    let blocks = warnings.div_ceil(3);
    for i in 0..blocks {
        if i == blocks / 2 {
            // Where the typing happens: a block without findings, so an
            // edit changes none of the 3,000 (as when one types anywhere
            // in a file whose findings are elsewhere).
            text.push_str("\nserver \"typing-here\" {\n  max_tokens 4096\n}\n");
        }
        text.push_str(&format!(
            "\nserver \"team-{i}\" {{\n  sampling off\n  max_tokens 100\n  deadline 5s\n  consent always\n}}\n"
        ));
    }
    text
}

fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    format!(
        "p50 {:.2?}, p95 {:.2?}, max {:.2?} ({} samples)",
        percentile(samples, 0.5),
        percentile(samples, 0.95),
        samples.last().copied().unwrap_or_default(),
        samples.len()
    )
}

/// A server initialized with VS Code's capabilities for what the session
/// uses: hierarchical symbols, semantic tokens with delta, and pull
/// diagnostics when `pull`.
fn start(pull: bool) -> Server {
    let mut text_document = json!({
        "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
        "semanticTokens": {"requests": {"full": {"delta": true}, "range": true},
            "tokenTypes": [], "tokenModifiers": [], "formats": ["relative"]},
        "publishDiagnostics": {"versionSupport": true},
    });
    if pull {
        text_document["diagnostic"] = json!({"dynamicRegistration": false});
    }
    Server::start(json!({"textDocument": text_document}))
}

/// Where to type: after the number of the first `max_tokens N` past the
/// middle of the file (a digit typed, then deleted: 4096 → 40960 → 4096).
fn edit_point(text: &str) -> (u32, u32) {
    let middle = text.lines().count() / 2;
    let (line, shown) = text
        .lines()
        .enumerate()
        .skip(middle)
        .find(|(_, l)| {
            let l = l.trim_start();
            (l.starts_with("max_tokens") || l.starts_with("max_messages")) && !l.contains('#')
        })
        .unwrap();
    let word = shown
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let column = shown.find(&word).unwrap() + word.len();
    (line as u32, column as u32)
}

fn change(version: i64, i: usize, (line, column): (u32, u32)) -> Value {
    let change = if i.is_multiple_of(2) {
        json!({"range": {"start": {"line": line, "character": column},
                         "end": {"line": line, "character": column}}, "text": "0"})
    } else {
        json!({"range": {"start": {"line": line, "character": column},
                         "end": {"line": line, "character": column + 1}}, "text": ""})
    };
    json!({"textDocument": {"uri": URI, "version": version}, "contentChanges": [change]})
}

/// What the loop waits for.
#[derive(Debug)]
enum Pending {
    Symbols(Instant),
    Tokens,
    Other,
    Pull(Instant),
}

/// Runs `edits` edits one `interval` apart; after each, the requests
/// `follow` names. Returns typing latencies, symbol latencies, symbol
/// response sizes, pull latencies and CPU per edit.
struct Session {
    typing: Vec<Duration>,
    symbols: Vec<Duration>,
    symbol_bytes: Vec<usize>,
    pulls: Vec<Duration>,
    pull_unchanged: usize,
    cpu_per_edit: Option<Duration>,
    delta: bool,
}

fn session(
    server: &mut Server,
    text: &str,
    edits: usize,
    interval: Duration,
    editor: bool,
    pull: bool,
) -> Session {
    let point = edit_point(text);
    let delta = server.capabilities["semanticTokensProvider"]["full"]["delta"] == true;
    let pull = pull && server.capabilities.get("diagnosticProvider").is_some();
    let mut out = Session {
        typing: Vec::new(),
        symbols: Vec::new(),
        symbol_bytes: Vec::new(),
        pulls: Vec::new(),
        pull_unchanged: 0,
        cpu_per_edit: None,
        delta,
    };
    let mut unpublished: Vec<(i64, Instant)> = Vec::new();
    let mut pending: HashMap<i64, Pending> = HashMap::new();
    let mut tokens_result: Option<String> = None;
    let mut pull_result: Option<String> = None;
    let pid = server.pid();
    let cpu_before = cpu_time(pid);
    let start = Instant::now();
    let handle = |out: &mut Session,
                  pending: &mut HashMap<i64, Pending>,
                  unpublished: &mut Vec<(i64, Instant)>,
                  tokens_result: &mut Option<String>,
                  pull_result: &mut Option<String>,
                  (at, m, size): (Instant, Value, usize)| {
        if m["method"] == "textDocument/publishDiagnostics" {
            if let Some(v) = m["params"]["version"].as_i64() {
                unpublished.retain(|(version, sent)| {
                    if *version <= v {
                        out.typing.push(at - *sent);
                        false
                    } else {
                        true
                    }
                });
            }
        } else if let Some(id) = m["id"].as_i64() {
            match pending.remove(&id) {
                Some(Pending::Symbols(sent)) => {
                    out.symbols.push(at - sent);
                    out.symbol_bytes.push(size);
                }
                Some(Pending::Tokens) => {
                    *tokens_result = m["result"]["resultId"].as_str().map(str::to_owned);
                }
                Some(Pending::Pull(sent)) => {
                    out.pulls.push(at - sent);
                    if m["result"]["kind"] == "unchanged" {
                        out.pull_unchanged += 1;
                    }
                    *pull_result = m["result"]["resultId"].as_str().map(str::to_owned);
                }
                Some(Pending::Other) | None => {}
            }
            if let Some(e) = m.get("error") {
                panic!("request {id} failed: {e}");
            }
        }
    };
    for i in 0..edits {
        let version = 2 + i as i64;
        let sent = Instant::now();
        server.notify("textDocument/didChange", change(version, i, point));
        if !pull {
            unpublished.push((version, sent));
        }
        let doc = json!({"uri": URI});
        if editor {
            let id = server.request("textDocument/documentSymbol", json!({"textDocument": doc}));
            pending.insert(id, Pending::Symbols(Instant::now()));
            let id = match (&tokens_result, delta) {
                (Some(previous), true) => server.request(
                    "textDocument/semanticTokens/full/delta",
                    json!({"textDocument": doc, "previousResultId": previous}),
                ),
                _ => server.request(
                    "textDocument/semanticTokens/full",
                    json!({"textDocument": doc}),
                ),
            };
            pending.insert(id, Pending::Tokens);
            let id = server.request("textDocument/foldingRange", json!({"textDocument": doc}));
            pending.insert(id, Pending::Other);
            let visible = point.0.saturating_sub(30);
            let id = server.request(
                "textDocument/inlayHint",
                json!({"textDocument": doc, "range": {"start": {"line": visible, "character": 0},
                    "end": {"line": visible + 60, "character": 0}}}),
            );
            pending.insert(id, Pending::Other);
        }
        if pull {
            let id = server.request(
                "textDocument/diagnostic",
                json!({"textDocument": doc, "previousResultId": pull_result}),
            );
            pending.insert(id, Pending::Pull(Instant::now()));
        }
        let next = start + interval * (i as u32 + 1);
        loop {
            let now = Instant::now();
            if now >= next {
                break;
            }
            match server.messages.recv_timeout(next - now) {
                Ok(message) => handle(
                    &mut out,
                    &mut pending,
                    &mut unpublished,
                    &mut tokens_result,
                    &mut pull_result,
                    message,
                ),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => panic!("server gone"),
            }
        }
    }
    while !pending.is_empty() || !unpublished.is_empty() {
        let message = server
            .messages
            .recv_timeout(Duration::from_secs(120))
            .expect("server answered");
        handle(
            &mut out,
            &mut pending,
            &mut unpublished,
            &mut tokens_result,
            &mut pull_result,
            message,
        );
    }
    if let (Some(before), Some(after)) = (cpu_before, cpu_time(pid)) {
        out.cpu_per_edit = Some((after - before) / edits.max(1) as u32);
    }
    out
}

fn main() {
    let edits = env_usize("MCPOLICY_BENCH_EDITS", 150);
    let lines = env_usize("MCPOLICY_BENCH_LINES", 10_000);
    let warnings = env_usize("MCPOLICY_BENCH_WARNINGS", 3_000);
    let interval = Duration::from_millis(env_usize("MCPOLICY_BENCH_INTERVAL_MS", 120) as u64);

    let text = policy(lines);
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at the start: {}", load.trim());
    }
    let mut server = start(false);
    let open = server.open(&text);
    let mut s = session(&mut server, &text, edits, interval, true, false);
    // The same request once the server is idle: its own cost, without the
    // queue a server that falls behind builds up.
    let mut idle = Vec::new();
    for _ in 0..20 {
        let sent = Instant::now();
        let id = server.request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": URI}}),
        );
        let (at, _, _) = server.wait(|m| m["id"] == id);
        idle.push(at - sent);
    }
    let rss = status_kib(server.pid(), "VmRSS:").unwrap_or(0);
    let peak = status_kib(server.pid(), "VmHWM:").unwrap_or(0);
    let code = server.stop();
    println!(
        "editor session: generated policy of {} lines ({} bytes), {edits} edits every {interval:?} \
         inside a server block on line {}, each followed by documentSymbol, semantic tokens ({}), \
         foldingRange, inlayHint",
        text.lines().count(),
        text.len(),
        edit_point(&text).0 + 1,
        if s.delta { "full/delta" } else { "full" },
    );
    println!("  didOpen → publishDiagnostics: {open:.2?}");
    println!(
        "  typing, didChange → publishDiagnostics: {}",
        summary(&mut s.typing)
    );
    println!("  documentSymbol: {}", summary(&mut s.symbols));
    println!(
        "  documentSymbol on an idle server, one at a time: {}",
        summary(&mut idle)
    );
    if let Some(bytes) = s.symbol_bytes.last() {
        println!("  documentSymbol response: {bytes} bytes");
    }
    if let Some(cpu) = s.cpu_per_edit {
        println!("  server CPU per edit, with its requests (user + system): {cpu:.2?}");
    }
    println!(
        "  server RSS at the end: {:.1} MiB (peak {:.1} MiB); exit code {code:?}",
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );

    let text = warnings_policy(warnings);
    for pull in [false, true] {
        let mut server = start(pull);
        if pull && server.capabilities.get("diagnosticProvider").is_none() {
            println!("  (the server does not offer pull diagnostics)");
            server.stop();
            continue;
        }
        let open = if pull {
            let opened = Instant::now();
            server.notify(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": URI, "languageId": "mcpolicy", "version": 1, "text": text}}),
            );
            let id = server.request(
                "textDocument/diagnostic",
                json!({"textDocument": {"uri": URI}}),
            );
            let (at, _, _) = server.wait(|m| m["id"] == id);
            at - opened
        } else {
            server.open(&text)
        };
        let mut s = session(&mut server, &text, edits, interval, false, pull);
        let rss = status_kib(server.pid(), "VmRSS:").unwrap_or(0);
        server.stop();
        println!(
            "{} warnings ({} lines), {edits} edits every {interval:?}, {}:",
            warnings.div_ceil(3) * 3,
            text.lines().count(),
            if pull {
                "client pulls diagnostics (textDocument/diagnostic with the previous result id)"
            } else {
                "diagnostics pushed"
            }
        );
        println!("  didOpen → first diagnostics: {open:.2?}");
        if pull {
            println!(
                "  textDocument/diagnostic: {}; {} of them `unchanged`",
                summary(&mut s.pulls),
                s.pull_unchanged
            );
        } else {
            println!(
                "  didChange → publishDiagnostics: {}",
                summary(&mut s.typing)
            );
        }
        if let Some(cpu) = s.cpu_per_edit {
            println!("  server CPU per edit (user + system): {cpu:.2?}");
        }
        println!("  server RSS: {:.1} MiB", rss as f64 / 1024.0);
    }
}
