//! Latency from a one-character `didChange` to its `publishDiagnostics`,
//! over stdio against the built `mcpolicy-lsp`, with a 10,000-line policy
//! open; and the server's resident memory. Not a timed test: it prints
//! figures for `lsp/README.md`.
//!
//! ```sh
//! CARGO_TARGET_DIR=target-lsp cargo bench -p mcpolicy-lsp --bench latency
//! ```
//!
//! `MCPOLICY_BENCH_EDITS` sets the number of edits (default 200);
//! `MCPOLICY_BENCH_LINES` the size of the policy (default 10,000);
//! `MCPOLICY_BENCH_EDIT=server` edits a `server` block in the middle of the
//! file instead of `defaults`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const URI: &str = "file:///bench/policy.mcpolicy";

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

fn write(stdin: &mut ChildStdin, value: &Value) {
    let body = value.to_string();
    write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    stdin.flush().unwrap();
}

fn read(reader: &mut impl BufRead) -> Option<Value> {
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(n) = line.strip_prefix("Content-Length: ") {
            length = n.parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

fn rss_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The server's CPU time so far (user + system), from `/proc/PID/stat`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses): utime is the
    // 12th and stime the 13th of them, in clock ticks (100 per second here).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let edits: usize = std::env::var("MCPOLICY_BENCH_EDITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let lines: usize = std::env::var("MCPOLICY_BENCH_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let binary = env!("CARGO_BIN_EXE_mcpolicy-lsp");
    let text = policy(lines);

    let mut child = Command::new(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mcpolicy-lsp");
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel::<(Instant, Value)>();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        while let Some(message) = read(&mut reader) {
            if sender.send((Instant::now(), message)).is_err() {
                break;
            }
        }
    });
    let wait_for = |pred: &dyn Fn(&Value) -> bool| -> Instant {
        loop {
            let (at, message) = receiver
                .recv_timeout(Duration::from_secs(120))
                .expect("server answered");
            if pred(&message) {
                return at;
            }
        }
    };

    write(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}),
    );
    wait_for(&|m| m["id"] == 1);
    write(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    );
    let opened = Instant::now();
    write(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": URI, "languageId": "mcpolicy", "version": 1, "text": text }}}),
    );
    let first = wait_for(&|m| m["method"] == "textDocument/publishDiagnostics");
    let open_latency = first - opened;

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
        write(
            &mut stdin,
            &json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                "textDocument": {"uri": URI, "version": version}, "contentChanges": [change]}}),
        );
        let at = wait_for(&|m| {
            m["method"] == "textDocument/publishDiagnostics" && m["params"]["version"] == version
        });
        samples.push(at - sent);
    }
    let cpu = match (cpu_before, cpu_time(pid)) {
        (Some(before), Some(after)) => Some((after - before) / edits.max(1) as u32),
        _ => None,
    };
    let rss = rss_kib(pid, "VmRSS:").unwrap_or(0);
    let peak = rss_kib(pid, "VmHWM:").unwrap_or(0);

    write(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}),
    );
    wait_for(&|m| m["id"] == 2);
    write(&mut stdin, &json!({"jsonrpc": "2.0", "method": "exit"}));
    let status = child.wait().expect("exit");

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
    println!("exit code: {:?}", status.code());
}
