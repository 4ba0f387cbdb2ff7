//! LSP over stdin/stdout. lsp-server's own stdio transport stops reading at
//! the first malformed message; this one answers it with a JSON-RPC error
//! and goes on reading, so that no input ends a session or makes it deaf.
//!
//! Framing rules (what [`read_incoming`] accepts):
//!
//! - A frame is a header block, lines ending in `\n` (a `\r` before it is
//!   dropped) up to an empty line, then a body of exactly `Content-Length`
//!   bytes. Header lines are bytes, not text: a line that is not UTF-8 is an
//!   unknown header and is ignored like any other.
//! - The body is at most [`MAX_FRAME_BYTES`] (64 MiB). A larger declared
//!   length is answered (-32600) and its body is not read: the reader scans
//!   forward for the next `Content-Length` header instead, so a client that
//!   declared a huge length and then sends ordinary frames is answered again
//!   from its next frame on, and memory never grows past the bound.
//! - A header block without a readable `Content-Length` is answered
//!   (-32700) and skipped. Whatever body followed it is read as header
//!   lines until the next `Content-Length` header: that header is found
//!   even at the end of a line, glued after a body that had no line break
//!   of its own. Only the last [`HEADER_TAIL`] bytes of a header line are
//!   kept, so an endless line costs no memory.
//! - A body that is not JSON is answered (-32700); JSON that is not a
//!   message is answered (-32600) when it carries an `id`, echoed when it is
//!   a string or a number and `null` otherwise.
//!
//! Every answer to an unreadable frame is a JSON-RPC error response; its id
//! is `null` unless the body's `id` was readable.

use std::io::{self, BufRead, Read, Write};
use std::thread;

use crossbeam_channel::{Receiver, Sender, unbounded};
use lsp_server::{Connection, ErrorCode, Message};
use serde_json::{Value, json};

/// The largest frame body read, in bytes (64 MiB). Far above any document an
/// editor sends (a 10 MB policy is about 10 MB of JSON), and low enough that
/// a lying header cannot make the server allocate without bound.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// How many bytes of one header line are kept: its tail, enough to hold a
/// `Content-Length` header glued after garbage on the same line.
pub const HEADER_TAIL: usize = 1024;

/// JSON-RPC 2.0 "Parse error", as lsp-server defines it (one definition of
/// the protocol's codes for the whole server).
const PARSE_ERROR: i32 = ErrorCode::ParseError as i32;
/// JSON-RPC 2.0 "Invalid Request".
const INVALID_REQUEST: i32 = ErrorCode::InvalidRequest as i32;

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
    // Without a reader the session ends at once (the main loop sees the
    // channel closed): say why rather than exit quietly.
    if let Err(e) = thread::Builder::new()
        .name("mcpolicy-lsp-reader".to_owned())
        .spawn(move || read_loop(&mut io::stdin().lock(), &reader_sender))
    {
        eprintln!("mcpolicy-lsp: cannot start the thread reading stdin: {e}");
    }
    let writer = thread::Builder::new()
        .name("mcpolicy-lsp-writer".to_owned())
        .spawn(move || write_loop(&writer_receiver))
        .unwrap_or_else(|_| thread::spawn(|| Err(io::Error::other("no writer thread"))));
    (Connection { sender, receiver }, Writer(writer))
}

fn write_loop(receiver: &Receiver<Message>) -> io::Result<()> {
    for message in receiver {
        match raw_frame(&message) {
            Some((head, raw)) => {
                // Written in parts: the raw text is not copied again.
                let mut out = io::stdout().lock();
                let length = head.len() + raw.len() + 1;
                write!(out, "Content-Length: {length}\r\n\r\n{head}")?;
                out.write_all(raw.as_bytes())?;
                out.write_all(b"}")?;
                out.flush()?;
            }
            None => message.write(&mut io::stdout().lock())?,
        }
    }
    Ok(())
}

/// Marks a result or params already serialised to JSON text, carried in a
/// `Value::String` (see [`raw_json`]). No result or params the server
/// sends is a string, let alone one starting with a NUL.
const RAW_JSON: &str = "\u{0}mcpolicy-lsp raw JSON\u{0}";

/// `value` serialised straight to JSON text, wrapped for this transport's
/// writer, which writes the text as the message's result or params.
/// lsp-server's `Message` holds a `serde_json::Value`; building that tree
/// for a large answer (the outline or the semantic tokens of a 10,000-line
/// policy, thousands of findings) cost far more than the answer itself,
/// most of it allocating and freeing maps. Only for a connection made by
/// [`stdio`]: any other receiver would see the wrapper.
pub fn raw_json<T: serde::Serialize>(value: &T) -> serde_json::Result<Value> {
    let mut bytes = RAW_JSON.as_bytes().to_vec();
    serde_json::to_writer(&mut bytes, value)?;
    // serde_json writes UTF-8, and the marker is UTF-8.
    String::from_utf8(bytes)
        .map(Value::String)
        .map_err(|e| serde::ser::Error::custom(e.to_string()))
}

/// JSON text (`text`, which the caller built as JSON) wrapped as
/// [`raw_json`] wraps a serialised value: neither parsed nor re-serialised,
/// nor copied when the caller left [`RAW_TEXT_HEADROOM`] bytes of spare
/// capacity (the outline is 1.8 MB on 10,000 lines: a copy of it would be
/// the server's largest allocation).
pub fn raw_text(mut text: String) -> Value {
    text.insert_str(0, RAW_JSON);
    Value::String(text)
}

/// The spare capacity [`raw_text`] needs to wrap a text in place.
pub const RAW_TEXT_HEADROOM: usize = RAW_JSON.len();

/// The body of a message whose result or params [`raw_json`] wrapped, in
/// two parts: what comes before the raw JSON, with the members in
/// lsp-server's order, and the raw JSON (a `}` closes it). `None` for any
/// other message.
fn raw_frame(message: &Message) -> Option<(String, &str)> {
    fn raw(value: &Value) -> Option<&str> {
        match value {
            Value::String(s) => s.strip_prefix(RAW_JSON),
            _ => None,
        }
    }
    match message {
        Message::Response(response) => {
            let result = raw(response.response_result.as_ref().ok()?)?;
            let id = serde_json::to_string(&response.id).ok()?;
            Some((format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#), result))
        }
        Message::Notification(notification) => {
            let params = raw(&notification.params)?;
            let method = serde_json::to_string(&notification.method).ok()?;
            Some((
                format!(r#"{{"jsonrpc":"2.0","method":{method},"params":"#),
                params,
            ))
        }
        _ => None,
    }
}

/// Writes a frame the `Message` type cannot express (an error with a null
/// id). One lock for the whole frame, so it never interleaves with the
/// writer thread's frames.
fn write_raw(value: &Value) {
    let text = value.to_string();
    let mut out = io::stdout().lock();
    let _ = write!(out, "Content-Length: {}\r\n\r\n{text}", text.len());
    let _ = out.flush();
}

/// What one read from the client's byte stream gave.
#[derive(Debug)]
pub enum Incoming {
    /// A message for the main loop.
    Message(Message),
    /// A frame that could not be read, and the JSON-RPC error response that
    /// answers it.
    Rejected(Value),
}

/// The JSON-RPC error response for a frame that could not be read.
pub fn error_frame(id: Value, code: i32, message: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// Reads frames until end of input, a read error or `exit`: messages go to
/// `sender`, unreadable frames are answered on stdout.
pub fn read_loop(input: &mut impl BufRead, sender: &Sender<Message>) {
    // A read error (stdin closed under us) ends the session like end of
    // input, the main loop seeing the channel close; stderr says which.
    loop {
        let incoming = match read_incoming(input) {
            Ok(Some(incoming)) => incoming,
            Ok(None) => break,
            Err(e) => {
                eprintln!("mcpolicy-lsp: reading stdin failed, ending the session: {e}");
                break;
            }
        };
        match incoming {
            Incoming::Rejected(answer) => write_raw(&answer),
            Incoming::Message(message) => {
                let exit = matches!(&message, Message::Notification(n) if n.method == "exit");
                if sender.send(message).is_err() || exit {
                    return;
                }
            }
        }
    }
}

/// Reads the next frame from `input`: a message, or the answer to a frame
/// that could not be read (see the module documentation for the rules).
/// `Ok(None)` at end of input, including end of input inside a frame.
///
/// Never panics, allocates at most [`MAX_FRAME_BYTES`] plus
/// [`HEADER_TAIL`] and a few buffers, and consumes at least one byte per
/// `Some` returned, so any input is read to its end.
pub fn read_incoming(input: &mut impl BufRead) -> io::Result<Option<Incoming>> {
    let length = match read_header_block(input)? {
        None => return Ok(None),
        Some(Length::Valid(length)) => length,
        Some(Length::TooLarge(declared)) => {
            return Ok(Some(Incoming::Rejected(error_frame(
                Value::Null,
                INVALID_REQUEST,
                format!(
                    "a frame of {declared} bytes is larger than the limit of {MAX_FRAME_BYTES} bytes; its body is skipped up to the next Content-Length header"
                ),
            ))));
        }
        Some(Length::Invalid(shown)) => {
            return Ok(Some(Incoming::Rejected(error_frame(
                Value::Null,
                PARSE_ERROR,
                format!("invalid Content-Length header value {shown:?}"),
            ))));
        }
        Some(Length::Missing) => {
            return Ok(Some(Incoming::Rejected(error_frame(
                Value::Null,
                PARSE_ERROR,
                "a message without a Content-Length header".to_owned(),
            ))));
        }
    };
    // Grows as bytes arrive: a length declared but never sent costs nothing.
    let mut body = Vec::with_capacity(length.min(64 * 1024));
    input.take(length as u64).read_to_end(&mut body)?;
    if body.len() < length {
        return Ok(None);
    }
    Ok(Some(decode(&body)))
}

/// A frame body as a message, or the answer to it.
fn decode(body: &[u8]) -> Incoming {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            return Incoming::Rejected(error_frame(
                Value::Null,
                PARSE_ERROR,
                format!("parse error: {e}"),
            ));
        }
    };
    let id = value.get("id").cloned();
    match serde_json::from_value(value) {
        Ok(message) => Incoming::Message(message),
        Err(e) => {
            let answer = match id {
                // JSON-RPC ids are strings or numbers; anything else is
                // answered with `null`, which the client can always read.
                Some(id) => {
                    let id = match id {
                        Value::String(_) | Value::Number(_) => id,
                        _ => Value::Null,
                    };
                    error_frame(id, INVALID_REQUEST, format!("invalid request: {e}"))
                }
                // Not a request (no id to answer to): still answered with a
                // null id, so that a client never waits in silence.
                None => error_frame(
                    Value::Null,
                    INVALID_REQUEST,
                    format!("invalid message: {e}"),
                ),
            };
            Incoming::Rejected(answer)
        }
    }
}

/// What a header block said about the body's length.
#[derive(Debug, PartialEq, Eq)]
enum Length {
    Valid(usize),
    /// Digits, but more than [`MAX_FRAME_BYTES`] (the digits as written, cut).
    TooLarge(String),
    /// A value that is not a decimal number (as written, cut, lossy).
    Invalid(String),
    Missing,
}

/// Reads header lines up to the empty line that ends a block (empty lines
/// before the first header are skipped). `None` at end of input.
fn read_header_block(input: &mut impl BufRead) -> io::Result<Option<Length>> {
    let mut length = Length::Missing;
    let mut saw_header = false;
    let mut line = Vec::with_capacity(128);
    loop {
        if !read_line_tail(input, &mut line)? {
            return Ok(None);
        }
        let text = trim_line_end(&line);
        if text.is_empty() {
            if saw_header {
                return Ok(Some(length));
            }
            continue;
        }
        saw_header = true;
        if let Some(value) = content_length_value(text) {
            // The last one wins, as the last one read is the one that
            // starts the frame when garbage came before it.
            length = parse_length(value);
        }
    }
}

/// Reads one line (through its `\n`, or to end of input) into `line`,
/// keeping only its last [`HEADER_TAIL`] bytes. `false` at end of input
/// with nothing read.
fn read_line_tail(input: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<bool> {
    line.clear();
    let mut read_any = false;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..=at], true),
            None => (available, false),
        };
        let used = chunk.len();
        line.extend_from_slice(chunk);
        if line.len() > HEADER_TAIL {
            line.drain(..line.len() - HEADER_TAIL);
        }
        input.consume(used);
        if done {
            return Ok(true);
        }
    }
}

fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The value of the last `Content-Length:` header on the line (any case,
/// blanks before the colon allowed), wherever on the line it starts.
fn content_length_value(line: &[u8]) -> Option<&[u8]> {
    const NAME: &[u8] = b"content-length";
    let mut found = None;
    let mut from = 0;
    while let Some(at) = line[from..]
        .windows(NAME.len())
        .position(|w| w.eq_ignore_ascii_case(NAME))
    {
        let start = from + at;
        let after = &line[start + NAME.len()..];
        let colon = after.iter().position(|&b| b != b' ' && b != b'\t');
        if let Some(colon) = colon
            && after[colon] == b':'
        {
            found = Some(&after[colon + 1..]);
        }
        from = start + 1;
    }
    found
}

fn parse_length(value: &[u8]) -> Length {
    let value = value.trim_ascii();
    let shown = || {
        let cut = &value[..value.len().min(40)];
        String::from_utf8_lossy(cut).into_owned()
    };
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Length::Invalid(shown());
    }
    // All digits: a value that overflows is simply too large.
    match std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(length) if length <= MAX_FRAME_BYTES as u64 => {
            Length::Valid(usize::try_from(length).unwrap_or(MAX_FRAME_BYTES))
        }
        _ => Length::TooLarge(shown()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

    /// Every outcome of reading `bytes` to the end.
    fn read_all(bytes: &[u8]) -> Vec<Incoming> {
        let mut input = bytes;
        let mut out = Vec::new();
        while let Some(incoming) = read_incoming(&mut input).unwrap() {
            out.push(incoming);
        }
        out
    }

    fn code(incoming: &Incoming) -> i64 {
        match incoming {
            Incoming::Rejected(answer) => answer["error"]["code"].as_i64().unwrap(),
            Incoming::Message(m) => panic!("expected a rejection, got {m:?}"),
        }
    }

    fn is_ping(incoming: &Incoming) -> bool {
        matches!(incoming, Incoming::Message(Message::Request(r)) if r.method == "ping")
    }

    #[test]
    fn the_length_limit_is_inclusive() {
        // Exactly the limit: accepted, and the body is awaited (here: the
        // input ends first, which ends the session, no rejection).
        let header = format!("Content-Length: {MAX_FRAME_BYTES}\r\n\r\n{{}}");
        assert!(read_all(header.as_bytes()).is_empty());
        let over = format!("Content-Length: {}\r\n\r\n", MAX_FRAME_BYTES + 1);
        let mut bytes = over.into_bytes();
        bytes.extend(frame(PING));
        let read = read_all(&bytes);
        assert_eq!(read.len(), 2);
        assert_eq!(code(&read[0]), i64::from(INVALID_REQUEST));
        assert!(is_ping(&read[1]));
    }

    #[test]
    fn a_header_glued_after_a_body_is_found() {
        let mut bytes = b"X-Other: 1\r\n\r\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}".to_vec();
        bytes.extend(frame(PING));
        let read = read_all(&bytes);
        assert_eq!(read.len(), 2);
        assert_eq!(code(&read[0]), i64::from(PARSE_ERROR));
        assert!(is_ping(&read[1]));
        // After a line far longer than what is kept of it.
        let mut bytes = vec![b'x'; 100_000];
        bytes.extend(frame(PING));
        let read = read_all(&bytes);
        assert_eq!(read.len(), 1);
        assert!(is_ping(&read[0]));
    }

    #[test]
    fn header_names_and_values() {
        assert_eq!(
            content_length_value(b"content-LENGTH :  12"),
            Some(&b"  12"[..])
        );
        assert_eq!(content_length_value(b"Content-Length"), None);
        assert_eq!(content_length_value(b"Content-Lengthy: 3"), None);
        assert_eq!(
            content_length_value(b"Content-Length: 1 Content-Length: 2"),
            Some(&b" 2"[..])
        );
        assert_eq!(parse_length(b" 0 "), Length::Valid(0));
        assert_eq!(parse_length(b"+1"), Length::Invalid("+1".into()));
        assert_eq!(parse_length(b""), Length::Invalid(String::new()));
        assert!(matches!(
            parse_length(b"99999999999999999999999999"),
            Length::TooLarge(_)
        ));
    }

    #[test]
    fn ids_of_invalid_messages_are_echoed_only_when_valid() {
        for (body, id) in [
            (r#"{"id":"a","x":1}"#, json!("a")),
            (r#"{"id":1.5,"x":1}"#, json!(1.5)),
            (r#"{"id":{"a":1},"x":1}"#, Value::Null),
            (r#"{"id":[1],"x":1}"#, Value::Null),
            (r#"[1,2]"#, Value::Null),
        ] {
            let read = read_all(&frame(body));
            let Incoming::Rejected(answer) = &read[0] else {
                panic!("{body}: accepted");
            };
            assert_eq!(answer["id"], id, "{body}");
            assert_eq!(answer["error"]["code"], INVALID_REQUEST, "{body}");
        }
    }
}
