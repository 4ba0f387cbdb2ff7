//! The binary's command line: `--help` and `--version` print and exit 0
//! (they used to start the server, which printed "disconnected channel"
//! when stdin closed), an unknown argument exits 2 saying so, and
//! `--stdio` (what editors' clients pass) serves as no argument does.
//!
//! Stdin is closed for every run, so a run that starts the server by
//! mistake ends with exit code 1 rather than hanging.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the built binary with `args`, stdin closed, for at most a minute.
fn run(args: &[&str]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpolicy-lsp"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpolicy-lsp");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("mcpolicy-lsp {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Run {
        code: status.code(),
        stdout,
        stderr,
    }
}

#[test]
fn help_prints_usage_and_exits_0() {
    for flag in ["--help", "-h"] {
        let run = run(&[flag]);
        assert_eq!(run.code, Some(0), "{flag}: {}", run.stderr);
        assert_eq!(run.stderr, "", "{flag}");
        insta::with_settings!({ snapshot_path => "../../tests/cases/lsp/snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("cli_help", run.stdout);
        });
    }
    // Help wins over what follows it, even an unknown argument.
    assert_eq!(run(&["--stdio", "--help", "--bogus"]).code, Some(0));
}

#[test]
fn version_prints_the_version_and_exits_0() {
    for flag in ["--version", "-V"] {
        let run = run(&[flag]);
        assert_eq!(run.code, Some(0), "{flag}: {}", run.stderr);
        assert_eq!(
            run.stdout,
            format!("mcpolicy-lsp {}\n", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(run.stderr, "");
    }
}

#[test]
fn an_unknown_argument_exits_2_saying_which() {
    for (args, shown) in [
        (&["--bogus"][..], "--bogus"),
        (&["--stdio", "policy.mcpolicy"], "policy.mcpolicy"),
        (&["-x"], "-x"),
    ] {
        let run = run(args);
        assert_eq!(run.code, Some(2), "{args:?}");
        assert_eq!(run.stdout, "", "{args:?}");
        assert_eq!(
            run.stderr,
            format!(
                "mcpolicy-lsp: unknown argument `{shown}`\n\
                 Usage: mcpolicy-lsp [--stdio]\n\
                 For more, try `mcpolicy-lsp --help`.\n"
            ),
            "{args:?}"
        );
    }
}

/// `--stdio` and no argument both serve: with stdin closed before
/// `initialize`, the server says what it expected and exits 1.
#[test]
fn stdio_serves_like_no_argument() {
    for args in [&[][..], &["--stdio"]] {
        let run = run(args);
        assert_eq!(run.code, Some(1), "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
        assert_eq!(
            run.stderr,
            "mcpolicy-lsp: no `initialize` request from the client (disconnected channel); \
             an editor starts this server, see `mcpolicy-lsp --help`\n",
            "{args:?}"
        );
    }
}
