//! A scripted LSP client: the real server in-process over
//! `Connection::memory()`, or the built binary over stdio.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, unbounded};
use lsp_server::{Connection, Message, Notification, Request, RequestId, Response};
use mcpolicy_lsp::Exit;
use mcpolicy_lsp::main_loop::Hooks;
use serde_json::{Value, json};

mod frame;

/// Repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fixture under `tests/cases/lsp/`.
pub fn fixture(name: &str) -> String {
    std::fs::read_to_string(root().join("tests/cases/lsp").join(name)).unwrap()
}

pub const URI: &str = "file:///work/session.mcpolicy";

enum Transport {
    Memory {
        connection: Connection,
        server: Option<JoinHandle<Exit>>,
    },
    Stdio {
        child: Child,
        stdin: Option<ChildStdin>,
        receiver: Receiver<Value>,
        /// What the binary wrote to stderr, when it was captured.
        stderr: Option<Captured>,
    },
}

/// A child's stderr as it is read, and the thread reading it.
type Captured = (Arc<Mutex<Vec<u8>>>, JoinHandle<()>);

/// One client session.
pub struct Client {
    transport: Transport,
    next_id: i32,
    /// Every message the server sent, in order.
    pub transcript: Vec<Value>,
}

// Generous: debug builds on a shared machine; the 10 MB case parses twice.
const TIMEOUT: Duration = Duration::from_secs(300);

impl Client {
    /// The server on a thread of this process.
    pub fn memory() -> Client {
        Client::memory_with(Hooks::default())
    }

    /// The server on a thread of this process, with test hooks.
    pub fn memory_with(hooks: Hooks) -> Client {
        let (server, client) = Connection::memory();
        let handle = std::thread::spawn(move || {
            mcpolicy_lsp::main_loop::run_with(&server, hooks).expect("session")
        });
        Client {
            transport: Transport::Memory {
                connection: client,
                server: Some(handle),
            },
            next_id: 0,
            transcript: Vec::new(),
        }
    }

    /// The built binary over stdio.
    pub fn stdio() -> Client {
        let child = Command::new(env!("CARGO_BIN_EXE_mcpolicy-lsp"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn mcpolicy-lsp");
        Client::over(child, None)
    }

    /// The built binary over stdio with `env` added to its environment,
    /// its stderr captured (read it with [`Client::exit_and_stderr`]).
    pub fn stdio_with_env(env: &[(&str, &str)]) -> Client {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcpolicy-lsp"));
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn mcpolicy-lsp");
        let mut pipe = child.stderr.take().unwrap();
        let captured = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&captured);
        let reader = std::thread::spawn(move || {
            let mut buffer = [0; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buffer) {
                sink.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        Client::over(child, Some((captured, reader)))
    }

    fn over(mut child: Child, stderr: Option<Captured>) -> Client {
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (sender, receiver) = unbounded();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            while let Some(value) = read_frame(&mut reader) {
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        Client {
            transport: Transport::Stdio {
                child,
                stdin,
                receiver,
                stderr,
            },
            next_id: 0,
            transcript: Vec::new(),
        }
    }

    /// Sends any message.
    pub fn send(&mut self, message: Message) {
        match &mut self.transport {
            Transport::Memory { connection, .. } => connection.sender.send(message).unwrap(),
            Transport::Stdio { stdin, .. } => {
                message.write(stdin.as_mut().unwrap()).unwrap();
            }
        }
    }

    /// Writes raw bytes (stdio only).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        if let Transport::Stdio { stdin, .. } = &mut self.transport {
            let stdin = stdin.as_mut().unwrap();
            stdin.write_all(bytes).unwrap();
            stdin.flush().unwrap();
        }
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(Message::Notification(Notification::new(
            method.to_owned(),
            params,
        )));
    }

    /// Sends a request and returns its id.
    pub fn request_async(&mut self, method: &str, params: Value) -> RequestId {
        self.next_id += 1;
        let id = RequestId::from(self.next_id);
        self.send(Message::Request(Request::new(
            id.clone(),
            method.to_owned(),
            params,
        )));
        id
    }

    /// The next message from the server, as JSON (a frame `Message` cannot
    /// express, such as an error with a null id, included).
    pub fn recv_value(&mut self) -> Value {
        let received = match &self.transport {
            Transport::Memory { connection, .. } => connection
                .receiver
                .recv_timeout(TIMEOUT)
                .map(|m| serde_json::to_value(&m).unwrap()),
            Transport::Stdio { receiver, .. } => receiver.recv_timeout(TIMEOUT),
        };
        let mut value = match received {
            Ok(value) => value,
            Err(RecvTimeoutError::Timeout) => panic!("no message from the server in {TIMEOUT:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the server hung up"),
        };
        if let Value::Object(map) = &mut value {
            map.remove("jsonrpc");
        }
        self.transcript.push(value.clone());
        value
    }

    /// The next message from the server within `timeout` (stdio only), or
    /// `None` if none came or the server hung up.
    pub fn recv_value_within(&mut self, timeout: Duration) -> Option<Value> {
        let Transport::Stdio { receiver, .. } = &self.transport else {
            panic!("recv_value_within is for the binary over stdio");
        };
        let mut value = receiver.recv_timeout(timeout).ok()?;
        if let Value::Object(map) = &mut value {
            map.remove("jsonrpc");
        }
        self.transcript.push(value.clone());
        Some(value)
    }

    /// The next message from the server.
    pub fn recv(&mut self) -> Message {
        let value = self.recv_value();
        serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("not an LSP message ({e}): {value}"))
    }

    /// Sends a request and waits for its response (notifications that come
    /// first are recorded in the transcript).
    pub fn request(&mut self, method: &str, params: Value) -> Response {
        let id = self.request_async(method, params);
        self.response(id)
    }

    /// Waits for the response to `id`.
    pub fn response(&mut self, id: RequestId) -> Response {
        loop {
            if let Message::Response(response) = self.recv()
                && response.id == id
            {
                return response;
            }
        }
    }

    /// The result of a request that must succeed.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params);
        match response.response_result {
            Ok(value) => value,
            Err(e) => panic!("{method} failed: {e:?}"),
        }
    }

    /// Waits for the next `publishDiagnostics` for `uri`.
    pub fn diagnostics(&mut self, uri: &str) -> Value {
        loop {
            if let Message::Notification(n) = self.recv()
                && n.method == "textDocument/publishDiagnostics"
                && n.params["uri"] == uri
            {
                return n.params;
            }
        }
    }

    /// Waits for the next `publishDiagnostics`, of any document.
    pub fn diagnostics_for_any(&mut self) -> Value {
        loop {
            if let Message::Notification(n) = self.recv()
                && n.method == "textDocument/publishDiagnostics"
            {
                return n.params;
            }
        }
    }

    /// Waits for the `publishDiagnostics` of document version `version`.
    pub fn diagnostics_for(&mut self, uri: &str, version: i64) -> Value {
        loop {
            let params = self.diagnostics(uri);
            if params["version"] == version {
                return params;
            }
        }
    }

    /// `initialize` + `initialized`, offering the given position encodings.
    pub fn initialize(&mut self, encodings: &[&str]) -> Value {
        let result = self.ok(
            "initialize",
            json!({
                "processId": null,
                "rootUri": null,
                "capabilities": { "general": { "positionEncodings": encodings } },
            }),
        );
        self.notify("initialized", json!({}));
        result
    }

    pub fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({ "textDocument": { "uri": uri, "languageId": "mcpolicy", "version": 1, "text": text } }),
        );
    }

    /// Whether any `publishDiagnostics` has been received: a client that
    /// pulls diagnostics must be pushed none.
    pub fn was_pushed_diagnostics(&self) -> bool {
        self.transcript
            .iter()
            .any(|m| m["method"] == "textDocument/publishDiagnostics")
    }

    pub fn change(&mut self, uri: &str, version: i64, changes: Value) {
        self.notify(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": changes }),
        );
    }

    /// `shutdown` then `exit`; the binary's exit code and what it wrote to
    /// stderr (stdio with captured stderr only).
    pub fn exit_and_stderr(mut self) -> (Option<i32>, String) {
        let result = self.ok("shutdown", Value::Null);
        assert_eq!(result, Value::Null);
        self.notify("exit", Value::Null);
        let Transport::Stdio {
            child,
            stdin,
            stderr,
            ..
        } = &mut self.transport
        else {
            panic!("exit_and_stderr is for the binary over stdio");
        };
        drop(stdin.take());
        let code = child.wait().unwrap().code();
        let (captured, reader) = stderr.take().expect("stderr captured");
        reader.join().unwrap();
        let text = String::from_utf8_lossy(&captured.lock().unwrap()).into_owned();
        (code, text)
    }

    /// Waits for the binary to exit; whether its exit code is 0.
    pub fn wait_exit_code_zero(mut self) -> bool {
        match &mut self.transport {
            Transport::Memory { server, .. } => {
                server.take().unwrap().join().unwrap() == Exit::Clean
            }
            Transport::Stdio { child, stdin, .. } => {
                drop(stdin.take());
                child.wait().unwrap().code() == Some(0)
            }
        }
    }

    /// `shutdown` then `exit`; returns whether the server ended cleanly
    /// (exit code 0 for the binary).
    pub fn shutdown(mut self) -> bool {
        let result = self.ok("shutdown", Value::Null);
        assert_eq!(result, Value::Null);
        self.notify("exit", Value::Null);
        match &mut self.transport {
            Transport::Memory { server, .. } => {
                server.take().unwrap().join().unwrap() == Exit::Clean
            }
            Transport::Stdio { child, stdin, .. } => {
                drop(stdin.take());
                let status = child.wait().unwrap();
                status.code() == Some(0)
            }
        }
    }
}

/// One frame of the server's output.
fn read_frame(reader: &mut impl std::io::BufRead) -> Option<Value> {
    serde_json::from_slice(&frame::read_body(reader)?).ok()
}

/// A `textDocument/position` params object.
pub fn at(uri: &str, line: u32, character: u32) -> Value {
    json!({ "textDocument": { "uri": uri }, "position": { "line": line, "character": character } })
}

/// Applies LSP text edits (UTF-16 positions) to `text`.
pub fn apply_edits(text: &str, edits: &[Value]) -> String {
    let mut spans: Vec<(usize, usize, String)> = edits
        .iter()
        .map(|e| {
            let start = offset(text, &e["range"]["start"]);
            let end = offset(text, &e["range"]["end"]);
            (start, end, e["newText"].as_str().unwrap().to_owned())
        })
        .collect();
    spans.sort_by_key(|s| std::cmp::Reverse(s.0));
    let mut out = text.to_owned();
    for (start, end, new) in spans {
        out.replace_range(start..end, &new);
    }
    out
}

/// A UTF-16 position as a byte offset (lines end at `\n`).
pub fn offset(text: &str, position: &Value) -> usize {
    let line = position["line"].as_u64().unwrap() as usize;
    let character = position["character"].as_u64().unwrap() as usize;
    let start: usize = text.split_inclusive('\n').take(line).map(str::len).sum();
    let mut units = 0;
    for (i, c) in text[start..].char_indices() {
        if units >= character || c == '\n' {
            return start + i;
        }
        units += c.len_utf16();
    }
    text.len()
}

/// A byte offset as a UTF-16 position.
pub fn position(text: &str, offset: usize) -> Value {
    position_in(text, offset, false)
}

/// A byte offset as an LSP position in the negotiated encoding (UTF-8
/// columns when `utf8`, else UTF-16).
pub fn position_in(text: &str, offset: usize, utf8: bool) -> Value {
    let before = &text[..offset];
    let line = before.matches('\n').count();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = if utf8 {
        offset - line_start
    } else {
        before[line_start..].encode_utf16().count()
    };
    json!({ "line": line, "character": column })
}

/// Applies a random edit to `text` and returns the `contentChanges` that
/// tell a server the same: the `length` chars after a char boundary at
/// about `at` (0.0..1.0) of the text are replaced by `insert`, the range
/// given in UTF-8 columns when `utf8`, else UTF-16.
pub fn random_edit(text: &mut String, at: f64, length: usize, insert: &str, utf8: bool) -> Value {
    let mut start = (text.len() as f64 * at) as usize;
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let end = text[start..]
        .char_indices()
        .nth(length)
        .map_or(text.len(), |(i, _)| start + i);
    let range = json!({
        "start": position_in(text, start, utf8),
        "end": position_in(text, end, utf8),
    });
    text.replace_range(start..end, insert);
    json!([{ "range": range, "text": insert }])
}

/// The property tests' configuration: `default_cases` unless
/// `PROPTEST_CASES` sets a long run.
pub fn proptest_config(default_cases: u32) -> proptest::prelude::ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    proptest::prelude::ProptestConfig {
        cases,
        ..proptest::prelude::ProptestConfig::default()
    }
}
