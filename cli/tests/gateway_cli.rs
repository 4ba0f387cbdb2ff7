//! `mcpc gateway` as a command: what it refuses before listening (each with
//! its stable code and exit code 2), a `--config` file, and the `listening
//! on http://ADDR` line with the real port of `--listen 127.0.0.1:0`, then a
//! clean stop on SIGTERM. Each test runs the real binary.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{BufRead, BufReader};
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

#[test]
fn bad_settings_are_refused_with_their_codes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store.sqlite3");
    let policy = example("personal-laptop.mcpolicy");
    let missing = dir.path().join("missing.pem").display().to_string();
    let cases: [(&[&str], &str); 11] = [
        (
            &["--route", "no/slash=http://127.0.0.1:1/mcp"],
            "gateway.route: route name `no/slash`",
        ),
        (
            &["--route", "..=http://127.0.0.1:1/mcp"],
            "gateway.route: route name `..`",
        ),
        (
            &["--route", "notes"],
            "gateway.route: `notes` is not NAME=URL",
        ),
        (
            &["--route", "notes=ftp://x/mcp"],
            "is not an http:// or https:// URL",
        ),
        (
            &["--route", "notes=http://u:p@x/mcp"],
            "the URL carries credentials",
        ),
        (&[], "gateway.route: no route"),
        (
            &[
                "--route",
                "notes=http://127.0.0.1:1/mcp",
                "--idle-timeout",
                "soon",
            ],
            "gateway.config: --idle-timeout `soon` is not a duration",
        ),
        (
            &[
                "--route",
                "notes=http://127.0.0.1:1/mcp",
                "--allow-origin",
                "http://x/path",
            ],
            "gateway.origin: `http://x/path` is not an origin",
        ),
        (
            &[
                "--route",
                "notes=http://127.0.0.1:1/mcp",
                "--tls-cert",
                &missing,
            ],
            "--tls-key",
        ),
        (
            &[
                "--route",
                "notes=http://127.0.0.1:1/mcp",
                "--tls-cert",
                &missing,
                "--tls-key",
                &missing,
            ],
            "gateway.tls: cannot read certificates from",
        ),
        (
            &[
                "--route",
                "notes=http://127.0.0.1:1/mcp",
                "--upstream-ca",
                &missing,
            ],
            "gateway.tls: cannot read certificates from",
        ),
    ];
    for (args, expected) in cases {
        let output = mcpc()
            .args(["gateway", "--policy", &policy, "--listen", "127.0.0.1:0"])
            .arg("--store")
            .arg(&store)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn a_config_file_starts_it_and_the_log_names_the_real_port() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        example("personal-laptop.mcpolicy"),
        dir.path().join("policy.mcpolicy"),
    )
    .unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        r#"policy = "policy.mcpolicy"
listen = "127.0.0.1:0"
store = "store.sqlite3"
idle_timeout = "5m"

[routes]
notes = "http://127.0.0.1:1/mcp"
"#,
    )
    .unwrap();
    // Paths in the file are the file's directory's, wherever it runs from.
    let mut child = mcpc()
        .arg("gateway")
        .arg("--config")
        .arg(&config)
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("no listening line:\n{log}");
        };
        log.push_str(&line);
        log.push('\n');
        if let Some(at) = line.find("listening on http://") {
            break line[at + "listening on http://".len()..].trim().to_owned();
        }
    };
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0);
    assert!(
        log.contains("route notes → http://127.0.0.1:1/mcp"),
        "{log}"
    );
    // The route's upstream is down: a clear 502 with a JSON-RPC error.
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    use std::io::{Read, Write};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    write!(
        stream,
        "POST /notes/mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 502"), "{response}");
    assert!(response.contains(r#""id":1"#), "{response}");
    // SIGTERM: every session ends, exit 0.
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(status.code(), Some(0), "{log}{}", rest.join("\n"));
    assert!(
        rest.iter().any(|l| l.ends_with("mcpc gateway: stopped")),
        "{rest:?}"
    );
    assert!(dir.path().join("store.sqlite3").is_file());
}
