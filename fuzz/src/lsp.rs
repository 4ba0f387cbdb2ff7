//! The language server's stdio framing (`mcpolicy_lsp::transport`) over
//! hostile bytes.

use lsp_server::Message;
use mcpolicy_lsp::transport::{Incoming, read_incoming};
use serde_json::Value;

/// Everything read from `bytes`, to the end.
pub fn read_all(mut bytes: &[u8]) -> Vec<Incoming> {
    let mut out = Vec::new();
    let before = bytes.len();
    loop {
        let left = bytes.len();
        match read_incoming(&mut bytes) {
            Ok(Some(incoming)) => out.push(incoming),
            Ok(None) => break,
            Err(e) => panic!("reading a byte slice failed: {e}"),
        }
        assert!(
            bytes.len() < left,
            "a frame was read without consuming input"
        );
    }
    assert!(out.len() <= before, "more frames than bytes");
    out
}

/// A well-formed frame.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

const PROBE: &[u8] =
    br#"{"jsonrpc":"2.0","id":"resync-probe","method":"$/probe","params":[1,"\u00e9"]}"#;

fn is_probe(incoming: Option<&Incoming>) -> bool {
    matches!(incoming, Some(Incoming::Message(Message::Request(r)))
        if r.method == "$/probe" && r.id == lsp_server::RequestId::from("resync-probe".to_owned()))
}

fn assert_answer(answer: &Value) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert!(
        matches!(
            answer.get("id"),
            Some(Value::Null | Value::String(_) | Value::Number(_))
        ),
        "not a JSON-RPC id: {answer}"
    );
    assert!(
        matches!(answer["error"]["code"].as_i64(), Some(-32700 | -32600)),
        "{answer}"
    );
    assert!(answer["error"]["message"].is_string(), "{answer}");
    // The frame the server writes for it is itself well-formed.
    let text = answer.to_string();
    let again = read_all(&frame(text.as_bytes()));
    assert!(
        matches!(
            again.as_slice(),
            [Incoming::Message(Message::Response(_))] | [Incoming::Rejected(_)]
        ),
        "{text}"
    );
}

/// `lsp_transport`: no panic; every input is read to its end, at least one
/// byte per frame; every rejection is a JSON-RPC error response; every
/// message read writes back as a frame that reads as the same message; and
/// resynchronisation: after any bytes that do not mention `content-length`
/// (any case), a well-formed frame is read as itself.
pub fn run(data: &[u8]) {
    for incoming in read_all(data) {
        match incoming {
            Incoming::Rejected(answer) => assert_answer(&answer),
            Incoming::Message(message) => {
                let mut written = Vec::new();
                if let Err(e) = message.write(&mut written) {
                    panic!("writing {message:?} failed: {e}");
                }
                let again = read_all(&written);
                let same = match again.as_slice() {
                    [Incoming::Message(m)] => {
                        serde_json::to_value(m).ok() == serde_json::to_value(&message).ok()
                    }
                    _ => false,
                };
                assert!(same, "{message:?} did not survive its own framing");
            }
        }
    }
    let mentions_length = data
        .windows(b"content-length".len())
        .any(|w| w.eq_ignore_ascii_case(b"content-length"));
    if !mentions_length {
        let mut input = data.to_vec();
        input.extend(frame(PROBE));
        let read = read_all(&input);
        assert!(
            is_probe(read.last()),
            "no resynchronisation after {:?}",
            String::from_utf8_lossy(data)
        );
    }
}
