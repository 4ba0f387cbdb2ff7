//! `mcpc proxy` as a command: how it starts, names its server, and survives
//! its own log going away. Each test runs the real binary.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

fn mcpc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcpc"))
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
        .display()
        .to_string()
}

/// A command whose server id cannot be read for certain is refused before
/// anything runs, with the command and the remedy in the message.
#[test]
fn an_underivable_server_id_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let cases: [(&[&str], &str); 3] = [
        (&["node", "/opt/srv/index.js"], "`node /opt/srv/index.js`"),
        (
            &["python3", "-W", "ignore", "/opt/notes.py"],
            "`python3 -W ignore /opt/notes.py`",
        ),
        (
            &["sh", "-c", &format!("touch {}", marker.display())],
            "`sh -c '",
        ),
    ];
    for (command, named) in cases {
        let output = mcpc()
            .args(["proxy", "--policy", &example("personal-laptop.mcpolicy")])
            .arg("--store")
            .arg(dir.path().join("store.sqlite3"))
            .arg("--")
            .args(command)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(
            stderr.contains("cannot derive a server id from"),
            "{stderr}"
        );
        assert!(stderr.contains(named), "{stderr}");
        assert!(stderr.contains("--server-id"), "{stderr}");
    }
    assert!(!marker.exists(), "the refused command must not run");
}

/// The proxy keeps serving when the reader of its standard error exits
/// (`mcpc proxy … 2>&1 | head -5`): the policy's 3,001 warnings are written
/// into a closed pipe, and the session goes on.
#[test]
fn a_closed_log_pipe_is_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("warnings.mcpolicy");
    let mut text = String::from("mcpolicy 1\nprotocol 2026-07-28\n");
    for i in 0..3000 {
        text.push_str(&format!("server \"s{i}\" {{ max_context thisServer }}\n"));
    }
    std::fs::write(&policy, text).unwrap();
    let mut child = mcpc()
        .arg("proxy")
        .arg("--policy")
        .arg(&policy)
        .arg("--store")
        .arg(dir.path().join("store.sqlite3"))
        .args(["--server-id", "echo", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The log's reader goes away before the proxy has written a byte.
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    for id in 1..=3 {
        // `cat` echoes it back, so it comes out as a server request.
        writeln!(stdin, r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(
            line.trim_end(),
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
        );
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the proxy exits with the server's status"
    );
}

/// `docs/threat-model.md`, "Scope: what a local server can reach": on
/// Linux the proxy is non-dumpable, so the server it starts (same user)
/// cannot read the proxy's `/proc/PID/environ` (nor its memory, nor attach
/// with ptrace). Root may read any process's, so as root both run as
/// `nobody` under `setpriv`, as any user's proxy and server would.
#[test]
#[cfg(target_os = "linux")]
fn the_server_cannot_read_the_proxys_environment() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let policy = dir.path().join("p.mcpolicy");
    std::fs::write(&policy, "mcpolicy 1\n").unwrap();
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let mut command = if root {
        let mut setpriv = Command::new("setpriv");
        setpriv
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_mcpc"));
        setpriv
    } else {
        mcpc()
    };
    let server = r#"{ if tr '\0' '\n' < /proc/$PPID/environ 2>/dev/null | grep -q '^MCPOLICY_SCOPE_CANARY='; then echo "server: read the proxy's environ"; elif [ -r /proc/$PPID/environ ]; then echo "server: environ readable but empty"; else echo "server: proxy's environ unreadable"; fi; } >&2"#;
    let out = command
        .arg("proxy")
        .arg("--policy")
        .arg(&policy)
        .arg("--store")
        .arg(dir.path().join("store.sqlite3"))
        .args(["--server-id", "s", "--", "sh", "-c", server])
        .env("MCPOLICY_SCOPE_CANARY", "1")
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Whole lines: the proxy's log quotes the server's command, script and all.
    assert!(
        stderr
            .lines()
            .any(|l| l == "server: proxy's environ unreadable"),
        "{stderr}"
    );
}
