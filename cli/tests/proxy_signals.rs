//! `mcpc proxy` stopped by a signal (`proxy/PROXY.md`, "Signals and exit
//! codes"): SIGINT, SIGTERM and SIGHUP stop the server first (its input
//! closed, then SIGTERM, then SIGKILL, each after 2 s), the log says why,
//! and the proxy exits with 128 + the signal. Each test runs the real
//! binary and sends real signals.
#![cfg(unix)]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const POLICY: &str = include_str!("../../tests/e2e/proxy.mcpolicy");

struct Running {
    proxy: Child,
    server_pid: u32,
    log: std::path::PathBuf,
    _stdin: std::process::ChildStdin,
}

/// Starts the proxy in front of `server` (a `sh -c` script) and waits for
/// the log line naming the server's pid.
#[allow(
    clippy::zombie_processes,
    reason = "the caller waits for the proxy (`wait`)"
)]
fn start(dir: &Path, server: &str) -> Running {
    std::fs::write(dir.join("p.mcpolicy"), POLICY).unwrap();
    let log = dir.join("proxy.log");
    let mut proxy = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("proxy")
        .arg("--policy")
        .arg(dir.join("p.mcpolicy"))
        .args(["--server-id", "chatty", "--store"])
        .arg(dir.join("store.sqlite3"))
        .arg("--log")
        .arg(&log)
        .args(["--", "sh", "-c", server])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        // The server inherits it: a server a broken proxy orphans must not
        // hold the test harness's output open.
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = proxy.stdin.take().unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(pid) = text
            .split("(pid ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|pid| pid.parse().ok())
        {
            return Running {
                proxy,
                server_pid: pid,
                log,
                _stdin: stdin,
            };
        }
        assert!(Instant::now() < until, "the proxy did not start: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(sent.success());
}

fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn wait(child: &mut Child, within: Duration) -> ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("the proxy did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server that exits when its input closes: each signal stops it at
/// the first step, and the proxy exits 128 + the signal.
#[test]
fn each_signal_stops_the_server_and_exits_with_its_code() {
    for (name, code) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        let dir = tempfile::tempdir().unwrap();
        // `exec cat`: the server is the process the proxy started.
        let mut run = start(dir.path(), "exec cat");
        signal(run.proxy.id(), name);
        let status = wait(&mut run.proxy, Duration::from_secs(10));
        assert_eq!(status.code(), Some(code), "SIG{name}");
        assert!(!alive(run.server_pid), "SIG{name}: the server is gone");
        let log = std::fs::read_to_string(&run.log).unwrap();
        assert!(
            log.contains(&format!("received SIG{name}: stopping the server")),
            "{log}"
        );
        assert!(
            log.contains(&format!("stopped by SIG{name}: server exited")),
            "{log}"
        );
        assert!(log.contains(&format!("exit code {code}")), "{log}");
        assert!(!log.contains("sent SIGTERM"), "{log}");
    }
}

/// A server that ignores both the end of its input and SIGTERM is killed.
#[test]
fn a_server_that_ignores_the_stop_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(
        dir.path(),
        "trap '' TERM INT HUP; exec 0<&-; while :; do sleep 0.05; done",
    );
    let sent = Instant::now();
    signal(run.proxy.id(), "TERM");
    let status = wait(&mut run.proxy, Duration::from_secs(15));
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(143));
    assert!(!alive(run.server_pid), "the server is gone");
    assert!(
        took >= Duration::from_secs(4),
        "two grace periods: {took:?}"
    );
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(log.contains("sent SIGTERM"), "{log}");
    assert!(log.contains("sent SIGKILL"), "{log}");
    assert!(
        log.contains("stopped by SIGTERM: server exited: signal: 9"),
        "{log}"
    );
}

/// A server that ignores the end of its input but not SIGTERM stops at the
/// second step.
#[test]
fn a_server_that_keeps_running_gets_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(dir.path(), "exec 0<&-; while :; do sleep 0.05; done");
    signal(run.proxy.id(), "HUP");
    let status = wait(&mut run.proxy, Duration::from_secs(15));
    assert_eq!(status.code(), Some(129));
    assert!(!alive(run.server_pid));
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(log.contains("sent SIGTERM"), "{log}");
    assert!(!log.contains("sent SIGKILL"), "{log}");
}
