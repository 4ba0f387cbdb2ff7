//! What `mcpc proxy` adds to a message's latency, over real stdio pipes.
//!
//! The bench is the client. It talks newline-delimited JSON-RPC to an echo
//! server (this same binary, re-executed with `MCPOLICY_BENCH_ROLE=echo`),
//! once directly and once through the real `mcpc proxy`, and times round trips:
//!
//! * `ping`: a request the server answers at once — two messages that the
//!   proxy forwards without deciding anything;
//! * `sampling allow`: a `tools/call` during which the server sends a
//!   `sampling/createMessage` that the client answers at once — four
//!   forwarded messages, one of which the proxy decides (identity, replay
//!   lookup, rate and budget admitted in the SQLite store) and one it settles;
//! * `sampling denied (replay)`: the same, but the policy refuses the
//!   server; after the first refusal is stored, the proxy answers every
//!   identical request from the store and the client is never involved.
//!
//! Added latency = (proxied round trip − direct round trip), per percentile.
//!
//! Run: `cargo bench -p mcpc --bench proxy` (`MCPOLICY_BENCH_ITERS`
//! sets the number of timed round trips, default 20000 for ping, a quarter of
//! that for sampling).

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The policy both transports' benches run under: a `rate` and a token
/// `budget` on every server; `blocked` refused.
const POLICY: &str = include_str!("bench.mcpolicy");

fn main() -> ExitCode {
    if std::env::var_os("MCPOLICY_BENCH_ROLE").is_some_and(|r| r == "echo") {
        echo_server();
        return ExitCode::SUCCESS;
    }
    let iters: usize = std::env::var("MCPOLICY_BENCH_ITERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = dir.path().join("bench.mcpolicy");
    std::fs::write(&policy, POLICY).expect("write policy");

    let mut rows = Vec::new();
    let sampling_iters = (iters / 4).max(100);
    for (name, method, server_id, n) in [
        ("ping (not sampling)", "ping", "bench", iters),
        ("sampling allow", "tools/call", "bench", sampling_iters),
        (
            "sampling denied (replay)",
            "tools/call",
            "blocked",
            sampling_iters,
        ),
    ] {
        let direct = {
            let mut peer = Peer::direct();
            let times = peer.time(method, n);
            peer.close();
            times
        };
        let store = dir
            .path()
            .join(format!("{server_id}-{method}.sqlite3").replace('/', "_"));
        let proxied = {
            let mut peer = Peer::proxied(&policy, &store, server_id);
            let times = peer.time(method, n);
            peer.close();
            times
        };
        rows.push((name, n, direct, proxied));
    }

    println!(
        "\n| round trip | n | direct p50 | direct p99 | proxied p50 | proxied p99 | added p50 | added p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, n, direct, proxied) in &rows {
        let (d50, d99) = (pct(direct, 50.0), pct(direct, 99.0));
        let (p50, p99) = (pct(proxied, 50.0), pct(proxied, 99.0));
        println!(
            "| {name} | {n} | {} | {} | {} | {} | {} | {} |",
            us(d50),
            us(d99),
            us(p50),
            us(p99),
            signed_us(p50, d50),
            signed_us(p99, d99)
        );
    }
    println!(
        "\n`ping` crosses the proxy twice (request, response): per forwarded message, the added p50 is half the round trip's."
    );
    ExitCode::SUCCESS
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn signed_us(a: Duration, b: Duration) -> String {
    format!("{:+.1} µs", (a.as_secs_f64() - b.as_secs_f64()) * 1e6)
}

/// The client's end of a connection to the echo server.
struct Peer {
    child: Child,
    to: BufWriter<ChildStdin>,
    from: BufReader<ChildStdout>,
    line: String,
}

impl Peer {
    fn spawn(mut command: Command) -> Peer {
        let mut child = command
            .env("MCPOLICY_BENCH_ROLE", "echo")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let to = BufWriter::new(child.stdin.take().expect("stdin"));
        let from = BufReader::new(child.stdout.take().expect("stdout"));
        Peer {
            child,
            to,
            from,
            line: String::new(),
        }
    }

    fn direct() -> Peer {
        Peer::spawn(Command::new(std::env::current_exe().expect("current exe")))
    }

    fn proxied(policy: &std::path::Path, store: &std::path::Path, server_id: &str) -> Peer {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcpc"));
        command
            .arg("proxy")
            .arg("--policy")
            .arg(policy)
            .arg("--store")
            .arg(store)
            .arg("--server-id")
            .arg(server_id)
            .arg("--log")
            .arg(std::env::temp_dir().join("mcpc-proxy-bench.log"))
            .arg("--")
            .arg(std::env::current_exe().expect("current exe"));
        Peer::spawn(command)
    }

    fn send(&mut self, value: &Value) {
        writeln!(self.to, "{value}").expect("write");
        self.to.flush().expect("flush");
    }

    fn recv(&mut self) -> Value {
        self.line.clear();
        self.from.read_line(&mut self.line).expect("read");
        serde_json::from_str(&self.line).expect("a JSON line")
    }

    /// One round trip of `method`; the client answers any sampling request at once.
    fn round_trip(&mut self, method: &str, id: u64) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}}));
        loop {
            let message = self.recv();
            if message.get("method").and_then(Value::as_str) == Some("sampling/createMessage") {
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                    "role": "assistant", "model": "m", "stopReason": "endTurn",
                    "content": {"type": "text", "text": "ok"},
                    "_meta": {"usage": {"inputTokens": 10, "outputTokens": 5}}}});
                self.send(&reply);
                continue;
            }
            assert_eq!(message["id"], id, "{message}");
            return;
        }
    }

    /// Sorted round-trip times of `n` calls after a warm-up.
    fn time(&mut self, method: &str, n: usize) -> Vec<Duration> {
        for id in 0..(n as u64 / 10).max(50) {
            self.round_trip(method, 1_000_000 + id);
        }
        let mut times = Vec::with_capacity(n);
        for id in 0..n as u64 {
            let started = Instant::now();
            self.round_trip(method, id);
            times.push(started.elapsed());
        }
        times.sort();
        times
    }

    fn close(self) {
        let Peer { mut child, to, .. } = self;
        drop(to);
        let _ = child.wait();
    }
}

/// The echo server: answers `ping` at once; for `tools/call`, asks the
/// client for a completion and answers the call when the completion (or an
/// error) comes back. The same identical request every time, as a retry loop would.
fn echo_server() {
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut pending: Option<Value> = None;
    for line in stdin.lines() {
        let Ok(line) = line else { return };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let reply = match message.get("method").and_then(Value::as_str) {
            Some("ping") => json!({"jsonrpc": "2.0", "id": message["id"], "result": {}}),
            Some("tools/call") => {
                pending = Some(message["id"].clone());
                json!({"jsonrpc": "2.0", "id": "s", "method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise the release"}}],
                    "systemPrompt": "You write release notes.",
                    "maxTokens": 200}})
            }
            Some(_) => continue,
            None => {
                let Some(id) = pending.take() else { continue };
                let outcome = message
                    .get("result")
                    .cloned()
                    .unwrap_or_else(|| message["error"].clone());
                json!({"jsonrpc": "2.0", "id": id, "result": {"content": [], "structuredContent": outcome}})
            }
        };
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}
