//! The proxy's reference model (`proxy/tests/model/`), run end to end
//! through the real transports on fixed seeds: the same ops that
//! `proxy/tests/proxy_state_machine.rs` feeds the session directly go
//! through the `mcpc proxy` binary's pipes (`docs/spec/transports.md`), and
//! the same invariants are checked on what comes out of them. A shell
//! cannot step a clock, so its runs leave out `Op::Step` (and the stdio
//! transport, which resumes nothing, `Op::Resend`); the policy's deadline
//! is then longer than any run.
//!
//! Each `take_*` first synchronises: a `notifications/cancelled` for no
//! request, written as the server, is queued behind every decision under
//! way (`proxy/src/session/decider.rs`), so once the client reads it the
//! proxy has written everything the server's lines caused; then a
//! notification written as the client reaches the server behind every
//! frame the proxy wrote to it.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

#[path = "../../proxy/tests/model/mod.rs"]
mod model;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use model::{Op, POLICY, Shell, op, run, run_from_seed};

/// How long a synchronisation may take before the run fails.
const SYNC: Duration = Duration::from_secs(30);

fn mcpc() -> &'static str {
    env!("CARGO_BIN_EXE_mcpc")
}

/// The model's policy with a deadline no run reaches: a shell's clock is
/// the wall clock, which `Op::Step` cannot move.
fn shell_policy() -> String {
    let policy = POLICY.replace("deadline 5s", "deadline 10m");
    assert_ne!(policy, POLICY, "the model's policy has a deadline");
    policy
}

/// Lines read from `from` on a thread of their own, as they come.
fn lines_of(from: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// New complete lines of the file at `path` past `offset` (moved on).
fn new_lines(path: &Path, offset: &mut usize) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Some(end) = text.rfind('\n') else {
        return Vec::new();
    };
    let fresh = text.get(*offset..=end).unwrap_or_default().to_owned();
    *offset = end + 1;
    fresh.lines().map(str::to_owned).collect()
}

/// `mcpc proxy` in front of a relay the test speaks through: the relay
/// copies a FIFO the test writes to its stdout (the server's lines) and its
/// stdin (the proxy's lines to the server) to a FIFO the test reads.
struct StdioProxy {
    dir: tempfile::TempDir,
    child: Option<Child>,
    client_in: Option<ChildStdin>,
    client_out: Option<Receiver<String>>,
    server_in: Option<File>,
    server_out: Option<Receiver<String>>,
    audit_at: usize,
    log_at: usize,
    /// Lines read while synchronising, not taken yet.
    to_server: Vec<String>,
    to_client: Vec<String>,
    /// Inputs were written since the last synchronisation.
    dirty: bool,
    marks: u64,
}

impl StdioProxy {
    fn new() -> StdioProxy {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.mcpolicy"), shell_policy()).unwrap();
        for fifo in ["to-proxy", "from-proxy"] {
            let status = Command::new("mkfifo")
                .arg(dir.path().join(fifo))
                .status()
                .unwrap();
            assert!(status.success());
        }
        let mut proxy = StdioProxy {
            dir,
            child: None,
            client_in: None,
            client_out: None,
            server_in: None,
            server_out: None,
            audit_at: 0,
            log_at: 0,
            to_server: Vec::new(),
            to_client: Vec::new(),
            dirty: false,
            marks: 0,
        };
        proxy.start();
        proxy
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&mut self) {
        let mut child = Command::new(mcpc())
            .arg("proxy")
            .arg("--policy")
            .arg(self.path("p.mcpolicy"))
            .arg("--store")
            .arg(self.path("store.db"))
            .arg("--audit")
            .arg(self.path("audit.jsonl"))
            .arg("--log")
            .arg(self.path("proxy.log"))
            .args([
                "--server-id",
                "s",
                "--",
                "sh",
                "-c",
                r#"cat "$1" & exec cat > "$2""#,
                "relay",
            ])
            .arg(self.path("to-proxy"))
            .arg(self.path("from-proxy"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.client_in = child.stdin.take();
        self.client_out = Some(lines_of(child.stdout.take().unwrap()));
        // Each open waits for the relay's end of its FIFO.
        self.server_in = Some(
            File::options()
                .write(true)
                .open(self.path("to-proxy"))
                .unwrap(),
        );
        self.server_out = Some(lines_of(File::open(self.path("from-proxy")).unwrap()));
        self.child = Some(child);
    }

    fn write(to: &mut Option<impl Write>, frame: &[u8]) {
        let to = to.as_mut().expect("the proxy runs");
        to.write_all(frame).unwrap();
        if frame.last() != Some(&b'\n') {
            to.write_all(b"\n").unwrap();
        }
        to.flush().unwrap();
    }

    /// Reads `from` until `mark`, keeping the lines before it in `into`.
    fn read_to(from: &Receiver<String>, mark: &str, into: &mut Vec<String>, side: &str) {
        loop {
            match from.recv_timeout(SYNC) {
                Ok(line) if line == mark => return,
                Ok(line) => into.push(line),
                Err(error) => panic!("the {side} never received the mark {mark} ({error})"),
            }
        }
    }

    fn sync(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        self.marks += 1;
        let server_mark = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": format!("sync-{}", self.marks)}})
        .to_string();
        Self::write(&mut self.server_in, server_mark.as_bytes());
        let client_out = self.client_out.as_ref().unwrap();
        Self::read_to(client_out, &server_mark, &mut self.to_client, "client");
        let client_mark = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "debug", "data": format!("sync-{}", self.marks)}})
        .to_string();
        Self::write(&mut self.client_in, client_mark.as_bytes());
        let server_out = self.server_out.as_ref().unwrap();
        Self::read_to(server_out, &client_mark, &mut self.to_server, "server");
    }
}

impl Shell for StdioProxy {
    fn carries(&self, op: &Op) -> bool {
        !matches!(op, Op::Step { .. } | Op::Resend { .. })
    }

    fn steps(&self) -> bool {
        false
    }

    fn server_says(&mut self, frame: &[u8]) {
        Self::write(&mut self.server_in, frame);
        self.dirty = true;
    }

    fn server_again(&mut self, _: &[u8]) {
        unreachable!("the stdio transport resumes nothing")
    }

    fn client_says(&mut self, frame: &[u8]) {
        Self::write(&mut self.client_in, frame);
        self.dirty = true;
    }

    fn step(&mut self, _: u32, _: bool) -> String {
        unreachable!("a shell's clock is the wall clock")
    }

    fn end(&mut self) {
        self.sync();
        // The client goes: the proxy closes the server's input; the relay's
        // other half ends when the test's FIFO closes; the server exits and
        // the proxy ends its session.
        drop(self.client_in.take());
        drop(self.server_in.take());
        let mut child = self.child.take().unwrap();
        let status = child.wait().unwrap();
        assert!(status.success() || status.code().is_some(), "{status}");
        for line in self.client_out.take().unwrap().iter() {
            self.to_client.push(line);
        }
        for line in self.server_out.take().unwrap().iter() {
            self.to_server.push(line);
        }
    }

    fn restart(&mut self) {
        self.start();
    }

    fn take_server(&mut self) -> Vec<String> {
        self.sync();
        std::mem::take(&mut self.to_server)
    }

    fn take_client(&mut self) -> Vec<String> {
        self.sync();
        std::mem::take(&mut self.to_client)
    }

    fn take_log(&mut self) -> Vec<String> {
        self.sync();
        let path = self.path("proxy.log");
        new_lines(&path, &mut self.log_at)
    }

    fn take_audit(&mut self) -> Vec<String> {
        self.sync();
        let path = self.path("audit.jsonl");
        new_lines(&path, &mut self.audit_at)
    }
}

impl Drop for StdioProxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(self.client_in.take());
            drop(self.server_in.take());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The fixed seeds and cases per seed, or `MCPOLICY_SEED` and
/// `PROPTEST_CASES` (a failure prints its seed) to replay or explore.
fn seeds() -> (Vec<u64>, u32) {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    match env("MCPOLICY_SEED") {
        Some(seed) => (vec![seed], env("PROPTEST_CASES").map_or(4, |c| c as u32)),
        None => (vec![1, 2, 3], 4),
    }
}

/// The model's random interleavings through `mcpc proxy`.
#[test]
fn the_model_holds_through_mcpc_proxy() {
    let (seeds, cases) = seeds();
    for seed in seeds {
        run_from_seed(
            &proptest::collection::vec(op(), 1..60),
            seed,
            cases,
            |ops| run(Box::new(StdioProxy::new()), &ops),
        );
    }
}
