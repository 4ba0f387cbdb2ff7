//! LSP over stdin/stdout. lsp-server's own stdio transport stops reading at
//! the first malformed message; this one answers it with a JSON-RPC error
//! and goes on reading, so that one bad frame never ends a session.

use std::io::{self, BufRead, Write};
use std::thread;

use crossbeam_channel::{Receiver, Sender, unbounded};
use lsp_server::{Connection, Message};
use serde_json::{Value, json};

/// The writer thread; join it after the session to flush the last replies.
#[derive(Debug)]
pub struct Writer(thread::JoinHandle<io::Result<()>>);

impl Writer {
    /// Waits until every reply has been written.
    pub fn join(self) -> io::Result<()> {
        self.0
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("writer thread panicked")))
    }
}

/// A connection over this process's stdin and stdout.
pub fn stdio() -> (Connection, Writer) {
    // Unbounded, so that a burst of edits is queued and the main loop can
    // coalesce it (see `main_loop`).
    let (reader_sender, receiver) = unbounded::<Message>();
    let (sender, writer_receiver) = unbounded::<Message>();
    thread::Builder::new()
        .name("mcpolicy-lsp-reader".to_owned())
        .spawn(move || read_loop(&mut io::stdin().lock(), &reader_sender))
        .ok();
    let writer = thread::Builder::new()
        .name("mcpolicy-lsp-writer".to_owned())
        .spawn(move || write_loop(&writer_receiver))
        .unwrap_or_else(|_| thread::spawn(|| Err(io::Error::other("no writer thread"))));
    (Connection { sender, receiver }, Writer(writer))
}

fn write_loop(receiver: &Receiver<Message>) -> io::Result<()> {
    for message in receiver {
        message.write(&mut io::stdout().lock())?;
    }
    Ok(())
}

/// Writes a frame the `Message` type cannot express (an error with a null id).
fn write_raw(value: &Value) {
    let text = value.to_string();
    let mut out = io::stdout().lock();
    let _ = write!(out, "Content-Length: {}\r\n\r\n{text}", text.len());
    let _ = out.flush();
}

fn error_frame(id: Value, code: i64, message: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// Reads frames until end of input or `exit`.
pub fn read_loop(input: &mut impl BufRead, sender: &Sender<Message>) {
    loop {
        let body = match read_frame(input) {
            Ok(Some(body)) => body,
            Ok(None) | Err(_) => return,
        };
        let value: Value = match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(e) => {
                write_raw(&error_frame(
                    Value::Null,
                    -32700,
                    format!("parse error: {e}"),
                ));
                continue;
            }
        };
        let id = value.get("id").cloned();
        let message: Message = match serde_json::from_value(value) {
            Ok(message) => message,
            Err(e) => {
                // A request we cannot read is answered; anything else is dropped.
                if let Some(id) = id {
                    write_raw(&error_frame(id, -32600, format!("invalid request: {e}")));
                }
                continue;
            }
        };
        let exit = matches!(&message, Message::Notification(n) if n.method == "exit");
        if sender.send(message).is_err() || exit {
            return;
        }
    }
}

/// One frame's body. Headers other than `Content-Length` are ignored; a
/// header block without a length is skipped.
fn read_frame(input: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    loop {
        let mut length: Option<usize> = None;
        let mut saw_header = false;
        loop {
            let mut line = String::new();
            if input.read_line(&mut line)? == 0 {
                return Ok(None);
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if saw_header {
                    break;
                }
                continue;
            }
            saw_header = true;
            if let Some((name, value)) = line.split_once(':')
                && name.trim().eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().ok();
            }
        }
        let Some(length) = length else {
            write_raw(&error_frame(
                Value::Null,
                -32700,
                "a message without a valid Content-Length header".to_owned(),
            ));
            continue;
        };
        let mut body = vec![0; length];
        input.read_exact(&mut body)?;
        return Ok(Some(body));
    }
}
