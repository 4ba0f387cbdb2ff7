//! The stdio client both benches drive `mcpolicy-lsp` with (`mod support;`
//! in `latency.rs` and `editor_session.rs`): the server process, LSP
//! framing, requests and notifications, messages stamped when their last
//! byte arrives, and the server's RSS and CPU time from `/proc`.
//!
//! `MCPOLICY_LSP_BIN` drives another build of the server (to compare two
//! commits the same way); by default the one cargo built with the bench.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "../../tests/common/frame.rs"]
mod frame;

/// The document the benches open.
pub const URI: &str = "file:///bench/policy.mcpolicy";

/// `name` from the environment as a number, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn write(stdin: &mut ChildStdin, value: &Value) {
    let body = value.to_string();
    write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    stdin.flush().unwrap();
}

/// One message's body, when its last byte was read. Parsed on another
/// thread (see [`Server::start`]): a large answer takes the client a while
/// to parse, which is not the server's time, and must not delay the
/// stamping of the messages behind it.
fn read(reader: &mut impl BufRead) -> Option<(Instant, Vec<u8>)> {
    let body = frame::read_body(reader)?;
    Some((Instant::now(), body))
}

/// A field of `/proc/PID/status` in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
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
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // utime and stime are the 12th and 13th fields after the command name
    // (in parentheses), in clock ticks of 10 ms.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// The `p` quantile of sorted samples (zero when there are none).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// A running server and the messages it sends, stamped on arrival.
pub struct Server {
    child: Child,
    stdin: ChildStdin,
    /// Each message: when its last byte arrived, the message, its size in
    /// bytes.
    pub messages: Receiver<(Instant, Value, usize)>,
    next_id: i64,
    /// What the server answered `initialize` with.
    #[allow(dead_code, reason = "editor_session reads it, latency does not")]
    pub capabilities: Value,
}

impl Server {
    /// Spawns the server and initializes it with the client `capabilities`.
    pub fn start(capabilities: Value) -> Server {
        let binary = std::env::var("MCPOLICY_LSP_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcpolicy-lsp").to_owned());
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn mcpolicy-lsp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        // One thread reads and stamps each message as its last byte
        // arrives; another parses them, in order.
        let (raw_sender, raw) = mpsc::channel::<(Instant, Vec<u8>)>();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            while let Some(message) = read(&mut reader) {
                if raw_sender.send(message).is_err() {
                    break;
                }
            }
        });
        let (sender, messages) = mpsc::channel();
        std::thread::spawn(move || {
            for (at, body) in raw {
                let size = body.len();
                let Ok(message) = serde_json::from_slice::<Value>(&body) else {
                    break;
                };
                if sender.send((at, message, size)).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            stdin,
            messages,
            next_id: 1,
            capabilities: Value::Null,
        };
        let id = server.request("initialize", json!({"capabilities": capabilities}));
        let (_, answer, _) = server.wait(|m| m["id"] == id);
        server.capabilities = answer["result"]["capabilities"].clone();
        server.notify("initialized", json!({}));
        server
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        write(
            &mut self.stdin,
            &json!({"jsonrpc": "2.0", "method": method, "params": params}),
        );
    }

    /// Sends a request; its id.
    pub fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        write(
            &mut self.stdin,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        id
    }

    /// The next message `pred` accepts (those before it are dropped).
    pub fn wait(&self, pred: impl Fn(&Value) -> bool) -> (Instant, Value, usize) {
        loop {
            let message = self
                .messages
                .recv_timeout(Duration::from_secs(120))
                .expect("server answered");
            if pred(&message.1) {
                return message;
            }
        }
    }

    /// Opens `text` as [`URI`]: the time until its first diagnostics.
    pub fn open(&mut self, text: &str) -> Duration {
        let opened = Instant::now();
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": URI, "languageId": "mcpolicy", "version": 1, "text": text}}),
        );
        let (at, _, _) = self.wait(|m| m["method"] == "textDocument/publishDiagnostics");
        at - opened
    }

    /// Shuts the server down; its exit code.
    pub fn stop(mut self) -> Option<i32> {
        let id = self.request("shutdown", Value::Null);
        self.wait(|m| m["id"] == id);
        self.notify("exit", Value::Null);
        self.child.wait().expect("exit").code()
    }
}
