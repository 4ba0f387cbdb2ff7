//! `mcpc wrap` through the real binary (`docs/spec/clients.md`):
//!
//! - each client format in `tests/cases/wrap/` wrapped, as a golden file,
//!   then wrapped again (nothing changes), listed, and undone to the
//!   original bytes; the backup holds the file as it was;
//! - a proxy started with an MCP client's reduced environment writes the
//!   store `mcpc store` reads from the user's shell, `XDG_STATE_HOME` or not,
//!   and a PostgreSQL store without a password says where one may come from;
//! - the official TypeScript SDK's stdio client starts a server from a
//!   wrapped configuration, through the proxy.
//!
//! The properties (undo∘wrap is the identity, wrap is idempotent, over
//! generated configurations) are unit tests of `cli/src/wrap/edit.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

#[allow(dead_code, reason = "this suite drives its own script, not `drive`")]
mod sdk_driver;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sdk_driver::{repo, typescript_node};
use serde_json::Value;

fn mcpc(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcpc"));
    command
        .env("HOME", home)
        .env_remove("XDG_STATE_HOME")
        .env("NO_COLOR", "1");
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("mcpc runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

fn policy() -> PathBuf {
    repo().join("tests/e2e/proxy.mcpolicy")
}

#[test]
fn every_client_format_wraps_lists_and_undoes() {
    insta::glob!("../../tests/cases/wrap", "*.json", |path| {
        let home = tempfile::tempdir().expect("temp dir");
        let original = fs::read(path).expect("case");
        let config = home.path().join(path.file_name().expect("name"));
        fs::write(&config, &original).expect("copy");
        let wrap = |extra: &[&str]| {
            let mut command = mcpc(home.path());
            command
                .arg("wrap")
                .arg(&config)
                .arg("--policy")
                .arg(repo().join("tests/cases/wrap/policy.mcpolicy"))
                .args(["--mcpc", "/usr/local/bin/mcpc"])
                .args(["--store", "/var/lib/mcpolicy/decisions.sqlite3"])
                .args(extra);
            run(&mut command)
        };
        let redact = |t: &str| {
            t.replace(&repo().display().to_string(), "<repo>")
                .replace(&home.path().display().to_string(), "<home>")
        };

        let dry = wrap(&["--dry-run"]);
        assert_eq!(
            fs::read(&config).expect("read"),
            original,
            "--dry-run wrote"
        );
        let done = wrap(&[]);
        let wrapped = fs::read_to_string(&config).expect("read");
        assert_eq!(
            text(&dry.stdout),
            similar::TextDiff::from_lines(&text(&original), &wrapped)
                .unified_diff()
                .context_radius(3)
                .header(
                    &format!("a/{}", config.display()),
                    &format!("b/{}", config.display())
                )
                .to_string(),
            "--dry-run prints the diff of what it writes"
        );
        insta::assert_snapshot!(
            "wrapped",
            format!("{}\n{}", redact(&text(&done.stderr)), redact(&wrapped))
        );
        let backup = home.path().join(format!(
            "{}.mcpc-backup",
            config.file_name().unwrap().to_string_lossy()
        ));
        assert_eq!(fs::read(&backup).expect("backup"), original);

        // Wrapping twice is wrapping once.
        let again = wrap(&[]);
        assert_eq!(fs::read_to_string(&config).expect("read"), wrapped);
        assert!(
            text(&again.stderr).contains("nothing to change"),
            "{}",
            text(&again.stderr)
        );

        let listed = run(mcpc(home.path()).arg("wrap").arg("--list").arg(&config));
        insta::assert_snapshot!("listed", redact(&text(&listed.stdout)));
        // The JSON listing says what the text says, server by server.
        let as_json = run(mcpc(home.path())
            .args(["wrap", "--list", "--format", "json"])
            .arg(&config));
        let doc: serde_json::Value = serde_json::from_slice(&as_json.stdout).expect("JSON");
        let human = text(&listed.stdout);
        let servers = doc["servers"].as_array().expect("servers");
        assert_eq!(
            servers.len(),
            human
                .lines()
                .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
                .count()
        );
        for server in servers {
            let name = server["name"].as_str().expect("name");
            let state = server["state"].as_str().expect("state");
            let line = human
                .lines()
                .find(|l| l.starts_with(&format!("  {name}: ")))
                .unwrap_or_else(|| panic!("{name} not in the text listing"));
            assert_eq!(
                line.ends_with(": stdio, wrapped"),
                state == "wrapped",
                "{line} / {state}"
            );
            if state == "wrapped" {
                assert_eq!(server["serverId"], name, "the id is the name in the config");
                assert!(server["block"]["digest"].is_string(), "{server}");
            }
        }

        // Undo restores the bytes.
        run(mcpc(home.path()).arg("wrap").arg("--undo").arg(&config));
        assert_eq!(fs::read(&config).expect("read"), original, "undo");
        let undone = run(mcpc(home.path()).arg("wrap").arg("--undo").arg(&config));
        assert!(text(&undone.stderr).contains("nothing to change"));
    });
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let home = tempfile::tempdir().expect("temp dir");
    let config = home.path().join("mcp.json");
    let bad_policy = home.path().join("bad.mcpolicy");
    fs::write(&bad_policy, "mcpolicy 1\ndefaults { sampling maybe }\n").expect("write");
    let good = "{\"mcpServers\": {\"a\": {\"command\": \"x\"}}}\n";
    for (content, policy, says) in [
        ("{ \"mcpServers\": ", policy(), "not JSON or JSONC"),
        ("{\"other\": {}}", policy(), "no server map"),
        (good, bad_policy.clone(), "has errors; nothing was written"),
    ] {
        fs::write(&config, content).expect("write");
        let out = mcpc(home.path())
            .arg("wrap")
            .arg(&config)
            .arg("--policy")
            .arg(&policy)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{content}");
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
        assert_eq!(fs::read_to_string(&config).expect("read"), content);
        assert!(!home.path().join("mcp.json.mcpc-backup").exists());
    }
    let missing = mcpc(home.path())
        .args(["wrap", "no-such.json", "--policy"])
        .arg(policy())
        .output()
        .expect("runs");
    assert_eq!(missing.status.code(), Some(2));
    let no_policy = mcpc(home.path())
        .arg("wrap")
        .arg(&config)
        .output()
        .expect("runs");
    assert_eq!(no_policy.status.code(), Some(2));
    assert!(text(&no_policy.stderr).contains("--policy"));
}

/// `sampling off`: every request is denied and the denial stored, so the
/// store has a row to find.
const DENY_ALL: &str =
    "mcpolicy 1\n\ndefaults {\n  sampling off\n}\n\nserver \"notes\" {\n  sampling off\n}\n";

const SAMPLING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10}}"#;

#[test]
fn a_proxy_with_a_clients_environment_writes_the_store_mcpc_store_reads() {
    let home = tempfile::tempdir().expect("temp dir");
    let policy = home.path().join("p.mcpolicy");
    fs::write(&policy, DENY_ALL).expect("write");
    // The proxy as a client starts it: the TypeScript SDK's variables only,
    // no XDG_STATE_HOME, no --store. Its server is `cat`, so the line
    // written here comes back as the server's sampling request.
    let mut proxy = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("USER", "me")
        .arg("proxy")
        .arg("--policy")
        .arg(&policy)
        .args(["--server-id", "notes", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("proxy starts");
    {
        use std::io::Write;
        let mut stdin = proxy.stdin.take().expect("stdin");
        writeln!(stdin, "{SAMPLING}").expect("write");
    }
    let out = proxy.wait_with_output().expect("proxy ends");
    let log = text(&out.stderr);
    assert!(
        log.contains("governing block: server id `notes`: server \"notes\" (line 7)"),
        "{log}"
    );
    // The user's shell: XDG_STATE_HOME set elsewhere changes nothing.
    let shell = |command: &mut Command| {
        command
            .env("HOME", home.path())
            .env("XDG_STATE_HOME", home.path().join("xdg-state"))
            .env("XDG_CONFIG_HOME", home.path().join("xdg-config"));
    };
    let mut ls = Command::new(env!("CARGO_BIN_EXE_mcpc"));
    shell(&mut ls);
    let listed = run(ls.args(["store", "ls", "--format", "json"]));
    let listed = text(&listed.stdout);
    assert!(
        listed.contains("policy.sampling_disabled"),
        "{listed}\n{log}"
    );
    assert!(
        home.path()
            .join(".local/state/mcpolicy/decisions.sqlite3")
            .is_file()
    );

    // A store named in config.toml is the one both use.
    let named = home.path().join("elsewhere.sqlite3");
    fs::create_dir_all(home.path().join(".config/mcpolicy")).expect("mkdir");
    fs::write(
        home.path().join(".config/mcpolicy/config.toml"),
        format!("store = {}\n", Value::from(named.display().to_string())),
    )
    .expect("write");
    let mut ls = Command::new(env!("CARGO_BIN_EXE_mcpc"));
    shell(&mut ls);
    let missing = ls.args(["store", "ls"]).output().expect("runs");
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains(&named.display().to_string()),
        "{}",
        text(&missing.stderr)
    );
}

#[test]
fn wrap_with_a_store_records_it_for_mcpc_store() {
    let home = tempfile::tempdir().expect("temp dir");
    let config = home.path().join("claude_desktop_config.json");
    fs::write(
        &config,
        "{\"mcpServers\": {\"notes\": {\"command\": \"notes-mcp\"}}}\n",
    )
    .expect("write");
    let store = home.path().join("team.sqlite3");
    run(mcpc(home.path())
        .arg("wrap")
        .arg(&config)
        .arg("--policy")
        .arg(policy())
        .arg("--store")
        .arg(&store));
    let recorded =
        fs::read_to_string(home.path().join(".config/mcpolicy/config.toml")).expect("recorded");
    assert_eq!(
        recorded,
        format!("store = {}\n", Value::from(store.display().to_string()))
    );
    // Without --store, wrap writes the store mcpc store finds: that one.
    fs::write(
        &config,
        "{\"mcpServers\": {\"notes\": {\"command\": \"notes-mcp\"}}}\n",
    )
    .expect("write");
    run(mcpc(home.path())
        .arg("wrap")
        .arg(&config)
        .arg("--policy")
        .arg(policy()));
    let wrapped: Value =
        serde_json::from_str(&fs::read_to_string(&config).expect("read")).expect("JSON");
    let args = wrapped["mcpServers"]["notes"]["args"]
        .as_array()
        .expect("args");
    let at = args.iter().position(|a| a == "--store").expect("--store");
    assert_eq!(args[at + 1], Value::from(store.display().to_string()));
}

#[test]
fn the_typescript_sdk_starts_a_wrapped_server_through_the_proxy() {
    let Some(node) = typescript_node() else {
        return;
    };
    let suite = repo().join("tests/e2e/typescript");
    let everything =
        suite.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let home = tempfile::tempdir().expect("temp dir");
    let node_path = Command::new(&node)
        .args(["-e", "process.stdout.write(process.execPath)"])
        .output()
        .expect("node runs");
    let config = home.path().join("claude_desktop_config.json");
    let entry = serde_json::json!({
        "mcpServers": {
            "everything": {
                "command": text(&node_path.stdout),
                "args": [everything.display().to_string(), "stdio"],
            }
        }
    });
    fs::write(&config, format!("{entry:#}\n")).expect("write");
    let audit = home.path().join("audit.jsonl");
    run(mcpc(home.path())
        .arg("wrap")
        .arg(&config)
        .arg("--policy")
        .arg(policy())
        .arg("--audit")
        .arg(&audit));

    let output = Command::new(&node)
        .arg(suite.join("wrapped.mjs"))
        .arg("--config")
        .arg(&config)
        .args(["--name", "everything"])
        .current_dir(&suite)
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path().join("xdg-state"))
        .output()
        .expect("node runs");
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    let report: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert_eq!(report["command"], env!("CARGO_BIN_EXE_mcpc"), "{report}");
    assert!(report.get("error").is_none(), "{report}\n{stderr}");
    assert_eq!(
        report["asked"],
        serde_json::json!([50]),
        "{report}\n{stderr}"
    );
    let result = report["calls"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(result.contains("a short summary"), "{report}");
    // The proxy knew the server by its name in the configuration, and said
    // which block governs it.
    assert!(
        stderr.contains("governing block: server id `everything`: server \"everything\""),
        "{stderr}"
    );
    let lines: Vec<Value> = fs::read_to_string(&audit)
        .expect("audit")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert!(!lines.is_empty());
    assert!(
        lines.iter().all(|l| l["server"] == "everything"),
        "{lines:?}"
    );
    // `mcpc store` from the shell reads what that proxy wrote.
    let mut ls = Command::new(env!("CARGO_BIN_EXE_mcpc"));
    ls.env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path().join("xdg-state"));
    let listed = run(ls.args(["store", "ls", "--format", "json"]));
    assert!(
        text(&listed.stdout).contains("everything"),
        "{}",
        text(&listed.stdout)
    );
}

/// A PostgreSQL server that asks for a cleartext password and then waits:
/// just enough of the protocol for a client without a password to stop.
fn password_asking_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            loop {
                let mut len = [0u8; 4];
                if stream.read_exact(&mut len).is_err() {
                    break;
                }
                let len = u32::from_be_bytes(len) as usize;
                let mut body = vec![0u8; len.saturating_sub(4)];
                if stream.read_exact(&mut body).is_err() {
                    break;
                }
                // SSLRequest (80877103): no TLS here; else the startup
                // message: AuthenticationCleartextPassword.
                let reply: &[u8] = if body == 80_877_103u32.to_be_bytes() {
                    b"N"
                } else {
                    &[b'R', 0, 0, 0, 8, 0, 0, 0, 3]
                };
                if stream.write_all(reply).is_err() {
                    break;
                }
            }
        }
    });
    port
}

#[test]
fn a_missing_postgres_password_names_where_one_may_come_from() {
    let port = password_asking_server();
    let home = tempfile::tempdir().expect("temp dir");
    let out = mcpc(home.path())
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", home.path().join("no-such-passfile"))
        .args(["store", "stats", "--store"])
        .arg(format!(
            "host=127.0.0.1 port={port} user=me dbname=decisions"
        ))
        .output()
        .expect("runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for source in [
        "PGPASSWORD",
        "`env`",
        "passfile=",
        "PGPASSFILE",
        "~/.pgpass",
    ] {
        assert!(stderr.contains(source), "{source}: {stderr}");
    }
}
