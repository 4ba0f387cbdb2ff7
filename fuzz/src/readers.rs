//! The reader differential: what every client reader sees of the stream
//! the proxy writes to the client (`docs/threat-model.md`, "A line another
//! reader splits"; `proxy/PROXY.md`, "Framing and ids").
//!
//! A script of server lines, built to smuggle (a sampling request inside a
//! notification, a response or a ping, with CR, LF, VT, FF, FS/GS/RS, NEL,
//! U+2028 or U+2029 inserted anywhere, raw or inside strings), is fed to
//! `mcpc proxy`'s `Session` line by line as the proxy's shell reads it. The
//! bytes it writes to the client are then framed by every reader model
//! ([`READERS`]), and:
//!
//! * each reader's frames, parsed as JSON, are exactly the proxy's lines
//!   (equal JSON values, one frame per line, in order);
//! * every sampling request a reader sees was decided (an audit `decision`
//!   line that let it on, with its id), and under `sampling off` none is
//!   seen at all.

use std::io::{BufReader, Cursor};
use std::sync::Arc;

use mcpolicy_proxy::capture::Captured;
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::store::MemoryStore;
use serde_json::{Value, json};

use crate::bytes::Bytes;

/// A client's line reader: how it cuts a byte stream into frames.
#[derive(Debug, Clone, Copy)]
pub struct Reader {
    /// Who reads this way.
    pub name: &'static str,
    /// The frames of a stream (without terminators).
    pub frames: fn(&[u8]) -> Vec<Vec<u8>>,
}

/// Every reader model: the line ends each honours.
pub const READERS: &[Reader] = &[
    Reader {
        name: "LF only (a plain `split('\\n')`)",
        frames: lf,
    },
    Reader {
        name: "the TypeScript SDK's ReadBuffer (LF, one trailing CR dropped)",
        frames: ts_read_buffer,
    },
    Reader {
        name: "the Python SDK's stdio reader (UTF-8 text split at LF)",
        frames: lf,
    },
    Reader {
        name: "Java BufferedReader.readLine / .NET StreamReader.ReadLine (LF, CR, CRLF)",
        frames: lf_cr_crlf,
    },
    Reader {
        name: "Node readline (/\\r?\\n|\\r(?!\\n)/)",
        frames: lf_cr_crlf,
    },
    Reader {
        name: "Python universal newlines (TextIOWrapper newline=None)",
        frames: lf_cr_crlf,
    },
    Reader {
        name: "Python str.splitlines (also VT, FF, FS, GS, RS, NEL, U+2028, U+2029)",
        frames: splitlines,
    },
];

fn lf(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut frames: Vec<Vec<u8>> = stream.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    // The text after the last LF is not a frame yet.
    frames.pop();
    frames
}

fn ts_read_buffer(stream: &[u8]) -> Vec<Vec<u8>> {
    lf(stream)
        .into_iter()
        .map(|mut f| {
            if f.last() == Some(&b'\r') {
                f.pop();
            }
            f
        })
        .collect()
}

fn lf_cr_crlf(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut current = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        match stream[at] {
            b'\n' => frames.push(std::mem::take(&mut current)),
            b'\r' => {
                frames.push(std::mem::take(&mut current));
                if stream.get(at + 1) == Some(&b'\n') {
                    at += 1;
                }
            }
            byte => current.push(byte),
        }
        at += 1;
    }
    frames
}

fn splitlines(stream: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(stream);
    let mut frames = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                frames.push(std::mem::take(&mut current).into_bytes());
            }
            '\n' | '\u{b}' | '\u{c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}'
            | '\u{2029}' => frames.push(std::mem::take(&mut current).into_bytes()),
            c => current.push(c),
        }
    }
    frames
}

/// A frame as a reader's JSON parser reads it (`None`: not JSON), blank
/// frames skipped as every reader skips them.
fn parsed(frames: Vec<Vec<u8>>) -> Vec<Option<Value>> {
    frames
        .into_iter()
        .filter(|f| !f.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n')))
        .map(|f| serde_json::from_slice::<Value>(&f).ok())
        .collect()
}

const SERVERS: &[&str] = &["off", "asks", "first", "slow", "tight", "unknown"];

/// What may be inserted: every line end some reader honours, whitespace,
/// and bytes that are not UTF-8 (which readers decode each their own way).
const SPLITTERS: &[&[u8]] = &[
    b"\r",
    b"\n",
    b"\r\n",
    b"\x0b",
    b"\x0c",
    b"\x1c",
    b"\x1d",
    b"\x1e",
    "\u{85}".as_bytes(),
    "\u{2028}".as_bytes(),
    "\u{2029}".as_bytes(),
    b" ",
    b"\t",
    b"\r\r",
    b"\xff",
    b"\xe2\x80",
];

fn text(bytes: &mut Bytes<'_>) -> String {
    let parts = [
        "hi",
        "\u{2028}",
        "\u{2029}",
        "\u{85}",
        "\r",
        "\u{202e}",
        "\u{1b}[2J",
        "é",
    ];
    (0..bytes.below(4)).map(|_| *bytes.pick(&parts)).collect()
}

fn sampling(bytes: &mut Bytes<'_>) -> String {
    let mut request = json!({
        "jsonrpc": "2.0",
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text(bytes)}}],
            "maxTokens": 100
        }
    });
    if bytes.below(4) != 0 {
        request["id"] = json!(bytes.below(4));
    }
    request.to_string()
}

/// One server line (its terminator added by the caller).
fn line(bytes: &mut Bytes<'_>) -> Vec<u8> {
    let inner = sampling(bytes);
    let mut line = match bytes.below(6) {
        0 => inner.into_bytes(),
        1 => format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":{inner}}}}}"#
        )
        .into_bytes(),
        2 => format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":{}}}],"x":{inner}}}}}"#,
            bytes.below(4),
            Value::from(text(bytes))
        )
        .into_bytes(),
        3 => format!(r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#, bytes.below(9)).into_bytes(),
        // The smuggle: separators around a whole request in a notification.
        _ => {
            let s1 = *bytes.pick(SPLITTERS);
            let s2 = *bytes.pick(SPLITTERS);
            let mut line =
                br#"{"jsonrpc":"2.0","method":"notifications/message","params":"#.to_vec();
            line.extend_from_slice(s1);
            line.extend_from_slice(inner.as_bytes());
            line.extend_from_slice(s2);
            line.push(b'}');
            line
        }
    };
    for _ in 0..bytes.below(4) {
        let splitter = *bytes.pick(SPLITTERS);
        let mut at = bytes.below(line.len() + 1);
        // At a character boundary, so the line stays UTF-8 unless the
        // fuzzer's raw bytes say otherwise.
        while at < line.len() && (line[at] & 0xC0) == 0x80 {
            at += 1;
        }
        line.splice(at..at, splitter.iter().copied());
    }
    if bytes.below(16) == 0 {
        line.extend_from_slice(bytes.chunk());
    }
    line
}

/// The server's stream of a script.
fn script(bytes: &mut Bytes<'_>) -> Vec<u8> {
    let mut stream = Vec::new();
    let mut lines = 0;
    while !bytes.is_empty() && lines < 16 {
        stream.extend(line(bytes));
        stream.extend_from_slice(if bytes.below(3) == 0 { b"\r\n" } else { b"\n" });
        lines += 1;
    }
    stream
}

/// The session's output for a server stream under server `server`: the
/// bytes written to the client and the audit lines.
pub fn proxy(server: &str, stream: &[u8]) -> (Vec<u8>, Vec<Value>) {
    let engine = Engine::new(
        crate::proxy::policy(),
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::new(1_773_144_000_000)),
    );
    let (to_server, to_client, audit) = (
        Captured::default(),
        Captured::default(),
        Captured::default(),
    );
    let session = Session::new(
        engine,
        server,
        Box::new(to_server),
        Box::new(to_client.clone()),
        Log::to(Box::new(std::io::sink()), server),
        Some(Audit::to(Box::new(audit.clone()))),
    );
    // As the proxy's shell reads the server: `\n`-terminated lines.
    let mut reader = BufReader::new(Cursor::new(stream));
    let mut buf = Vec::new();
    while let Ok(Some(whole)) =
        mcpolicy_proxy::read_line_capped(&mut reader, &mut buf, mcpolicy_proxy::MAX_SERVER_LINE)
    {
        if whole {
            session.from_server(&buf);
        }
    }
    let audit = audit
        .take()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect();
    (to_client.take_bytes(), audit)
}

/// The checks of the module documentation over the client stream `out`.
pub fn check(server: &str, out: &[u8], audit: &[Value]) {
    let proxy_lines = parsed(lf(out));
    assert!(
        proxy_lines.iter().all(Option::is_some),
        "the proxy wrote a line that is not JSON: {:?}",
        String::from_utf8_lossy(out)
    );
    for reader in READERS {
        let frames = parsed((reader.frames)(out));
        assert_eq!(
            frames,
            proxy_lines,
            "{} reads other frames than the proxy wrote: {:?}",
            reader.name,
            String::from_utf8_lossy(out)
        );
        for frame in frames.iter().flatten() {
            if frame.get("method").and_then(Value::as_str) != Some("sampling/createMessage") {
                continue;
            }
            assert_ne!(
                server, "off",
                "{}: a sampling request under `sampling off`",
                reader.name
            );
            let decided = audit.iter().any(|entry| {
                entry["event"] == "decision"
                    && entry["via"] == "request"
                    && entry["id"] == frame.get("id").cloned().unwrap_or(Value::Null)
                    && entry["outcome"] != "deny"
            });
            assert!(
                decided,
                "{}: an undecided sampling request {frame}",
                reader.name
            );
        }
    }
}

/// The server id and the server's stream a fuzz input stands for.
pub fn scenario(data: &[u8]) -> (&'static str, Vec<u8>) {
    let mut bytes = Bytes::new(data);
    let server = *bytes.pick(SERVERS);
    (server, script(&mut bytes))
}

/// The fuzz target's body.
pub fn run(data: &[u8]) {
    let (server, stream) = scenario(data);
    let (out, audit) = proxy(server, &stream);
    check(server, &out, &audit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_split_as_their_readers_do() {
        let stream = "a\rb\r\nc\nd\u{2028}e\u{b}f\n".as_bytes();
        assert_eq!(lf(stream).len(), 3);
        assert_eq!(lf_cr_crlf(stream).len(), 4);
        assert_eq!(splitlines(stream).len(), 6);
        assert_eq!(ts_read_buffer(b"x\r\n"), vec![b"x".to_vec()]);
    }
}
