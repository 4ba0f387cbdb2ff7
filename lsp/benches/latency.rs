//! Latency from a one-character `didChange` to its `publishDiagnostics`,
//! over stdio against the built `mcpolicy-lsp`, with a 10,000-line policy
//! open; and the server's resident memory. Not a timed test: it prints
//! figures for `docs/performance.md`, "Language server: one edit".
//!
//! ```sh
//! CARGO_TARGET_DIR=target-lsp cargo bench -p mcpolicy-lsp --bench latency
//! ```
//!
//! `MCPOLICY_BENCH_EDITS` sets the number of edits (default 200);
//! `MCPOLICY_BENCH_LINES` the size of the policy (default 10,000);
//! `MCPOLICY_BENCH_EDIT=server` edits a `server` block in the middle of the
//! file instead of `defaults`; `MCPOLICY_LSP_BIN` drives another build of
//! the server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Server, URI, cpu_time, env_usize, percentile, status_kib};

/// A policy of `lines` lines: reasons, defaults, and server blocks using
/// every statement. Most blocks name one server; one in ten is a glob, as in
/// a real gateway policy (the checker compares each glob with the globs
/// above it that share its first character, so a file of nothing but
/// `team-*` globs is quadratic there; see README).
fn policy(lines: usize) -> String {
    let mut text = String::from(
        "mcpolicy 1\nprotocol 2025-11-25\nerror_code -32010\n\
         identity systemPrompt, messages, includeContext, modelPreferences\n\
         reason acme.hourly_cap { retryable false; ttl until_reset }\n\
         reason acme.too_big { retryable false; ttl forever }\n\n\
         defaults {\n  max_context thisServer  # trimmed, not denied\n  max_input 64 KiB\n  \
         max_messages 50\n  max_tokens 4096\n  rate 30 per 1m\n  deadline 60s\n  consent first\n}\n",
    );
    let mut i = 0;
    while text.lines().count() < lines {
        let pattern = if i % 10 == 9 {
            format!("{}{i}-*", char::from(b'a' + (i / 10 % 26) as u8))
        } else {
            format!("team-{i}")
        };
        text.push_str(&format!(
            "\n# team {i}\nserver \"{pattern}\" {{\n  budget {} requests per day\n  \
             budget 200k tokens per 24h\n  budget 10 requests per hour as acme.hourly_cap\n  \
             max_input 32 KiB as acme.too_big\n  models \"claude-*\", \"gpt-4o\"\n  \
             consent always\n}}\n",
            50 + i % 50
        ));
        i += 1;
    }
    text
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let edits = env_usize("MCPOLICY_BENCH_EDITS", 200);
    let lines = env_usize("MCPOLICY_BENCH_LINES", 10_000);
    let text = policy(lines);

    let mut server = Server::start(json!({}));
    let pid = server.pid();
    let open_latency = server.open(&text);

    // Each edit types or deletes one character inside `max_tokens 4096`
    // (line 12, in `defaults`): 4096 → 40960 → 4096 → …, so every other
    // version is a semantic change and the whole file is re-checked each
    // time. With `MCPOLICY_BENCH_EDIT=server` the digit goes after the
    // number of the first `budget N requests per day` past the middle of
    // the file instead (an edit inside one `server` block).
    let in_server = std::env::var("MCPOLICY_BENCH_EDIT").is_ok_and(|v| v == "server");
    let (target_line, column) = if in_server {
        let middle = text.lines().count() / 2;
        let line = middle
            + text
                .lines()
                .skip(middle)
                .position(|l| {
                    l.trim_start().starts_with("budget") && l.contains("requests per day")
                })
                .unwrap();
        let shown = text.lines().nth(line).unwrap();
        let digits = shown.find("budget ").unwrap() + "budget ".len();
        let end = digits + shown[digits..].find(' ').unwrap();
        (line as u32, end as u32)
    } else {
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with("max_tokens"))
            .unwrap();
        (line as u32, text.lines().nth(line).unwrap().len() as u32)
    };
    let mut samples = Vec::with_capacity(edits);
    let cpu_before = cpu_time(pid);
    for i in 0..edits {
        let version = 2 + i as i64;
        let change = if i % 2 == 0 {
            json!({"range": {"start": {"line": target_line, "character": column},
                             "end": {"line": target_line, "character": column}}, "text": "0"})
        } else {
            json!({"range": {"start": {"line": target_line, "character": column},
                             "end": {"line": target_line, "character": column + 1}}, "text": ""})
        };
        let sent = Instant::now();
        server.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": URI, "version": version}, "contentChanges": [change]}),
        );
        let (at, _, _) = server.wait(|m| {
            m["method"] == "textDocument/publishDiagnostics" && m["params"]["version"] == version
        });
        samples.push(at - sent);
    }
    let cpu = match (cpu_before, cpu_time(pid)) {
        (Some(before), Some(after)) => Some((after - before) / edits.max(1) as u32),
        _ => None,
    };
    let rss = status_kib(pid, "VmRSS:").unwrap_or(0);
    let peak = status_kib(pid, "VmHWM:").unwrap_or(0);
    let code = server.stop();

    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len().max(1) as u32;
    println!(
        "policy: {} lines, {} bytes; {edits} one-character edits on line {}",
        text.lines().count(),
        text.len(),
        target_line + 1
    );
    println!("didOpen → publishDiagnostics: {open_latency:.2?}");
    println!(
        "didChange → publishDiagnostics: p50 {:.2?}, p95 {:.2?}, max {:.2?}, mean {mean:.2?}",
        percentile(&samples, 0.5),
        percentile(&samples, 0.95),
        samples.last().copied().unwrap_or_default()
    );
    if let Some(cpu) = cpu {
        println!("server CPU per edit (user + system): {cpu:.2?}");
    }
    println!(
        "server memory with the file open: RSS {:.1} MiB (peak {:.1} MiB)",
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    println!("exit code: {code:?}");
}
