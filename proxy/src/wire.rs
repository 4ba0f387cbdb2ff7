//! The wire as every client reads it: line framing and JSON-RPC ids.
//!
//! The proxy decides on the frames it reads; a client must read exactly
//! those frames, and must take two ids for one exactly when the proxy does.
//! Both hold only if nothing the proxy forwards can be read two ways
//! (`proxy/PROXY.md`, "Framing and ids"; `docs/spec/frames.md`, "Lines and
//! ids through a proxy").
//!
//! **Framing.** Client readers end a line at more than `\n`: Java's
//! `BufferedReader.readLine`, .NET's `StreamReader.ReadLine`, Node's
//! `readline` and Python's universal newlines also at a lone `\r`; Python's
//! `str.splitlines` also at VT, FF, FS, GS, RS, NEL (U+0085), U+2028 and
//! U+2029. In a line of valid JSON the control characters can only be a `\r`
//! between tokens (JSON whitespace; raw control characters are invalid
//! inside strings and elsewhere), and NEL, U+2028 and U+2029 can only be
//! inside strings. So [`for_readers`] writes every forwarded line as the
//! equal JSON text with no `\r` and with those three as `\u` escapes: no
//! reader can split it, and every reader parses the value the proxy read.
//!
//! **Ids.** JSON-RPC ids are strings or integers. The official TypeScript SDK
//! reads an id with `JSON.parse` (so `1`, `1.0` and `1e0` are one id and
//! `2^53 + 1` is `2^53`); the Python SDK validates it as `int | str` in
//! pydantic's lax mode (so `1.0` and `1e0` are `1`, `-0` is `0`). Each echoes
//! the id it read, so its answer to `1.0` says `1`. [`admit_id`] accepts
//! only ids every client reads as written (strings, and integers written
//! plainly within ±(2^53 − 1), not `-0`) and keys them by value
//! ([`IdKey`]); any other number is refused, and the refusal echoes it
//! byte for byte as written.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

/// The largest integer every client holds exactly (JavaScript's
/// `Number.MAX_SAFE_INTEGER`, 2^53 − 1).
pub const MAX_SAFE_ID: i64 = (1 << 53) - 1;

/// A JSON-RPC id as every client compares it: a string by its unescaped
/// value, an integer by its value. A string and an integer are never equal
/// (`"1"` is not `1` to any client).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdKey {
    /// An integer id within ±(2^53 − 1).
    Int(i64),
    /// A string id, unescaped.
    Str(String),
}

impl std::fmt::Display for IdKey {
    /// The id as JSON (a string quoted and escaped).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdKey::Int(n) => write!(f, "{n}"),
            IdKey::Str(s) => write!(f, "{}", Value::from(s.as_str())),
        }
    }
}

/// Why an id is not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdRefusal {
    /// A number that is not a plain integer within ±(2^53 − 1): a fraction
    /// (`1.0`), an exponent (`1e0`), `-0`, or an integer some client cannot
    /// hold exactly. Some client would take it for another id.
    Ambiguous,
    /// Not a string or a number (`null`, `true`, an object, an array).
    NotAnId,
}

impl IdRefusal {
    /// The message of the -32600 frame that refuses the request.
    pub fn message(self) -> &'static str {
        match self {
            IdRefusal::Ambiguous => {
                "Invalid request: a numeric id must be an integer written without fraction or exponent, within ±(2^53 - 1), and not -0"
            }
            IdRefusal::NotAnId => "Invalid request: an id must be a string or an integer",
        }
    }
}

/// The key of an id given as its JSON text, or why it is refused
/// (module documentation).
pub fn admit_id(raw: &RawValue) -> Result<IdKey, IdRefusal> {
    admit_id_text(raw.get())
}

/// [`admit_id`] over the id's JSON text (surrounding whitespace allowed).
pub fn admit_id_text(text: &str) -> Result<IdKey, IdRefusal> {
    let text = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(text)
            .map(IdKey::Str)
            .map_err(|_| IdRefusal::NotAnId),
        Some(b'-' | b'0'..=b'9') => {
            let digits = text.strip_prefix('-').unwrap_or(text);
            let plain = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'))
                && text != "-0";
            if !plain || digits.len() > 16 {
                return Err(IdRefusal::Ambiguous);
            }
            match text.parse::<i64>() {
                Ok(n) if (-MAX_SAFE_ID..=MAX_SAFE_ID).contains(&n) => Ok(IdKey::Int(n)),
                _ => Err(IdRefusal::Ambiguous),
            }
        }
        _ => Err(IdRefusal::NotAnId),
    }
}

/// The key a client gives an id it was handed as a parsed value, for ids the
/// proxy did not admit itself (a client's answer, a `requestId` in
/// `notifications/cancelled`): an integral number within ±(2^53 − 1) is that
/// integer (`1.0` is `1`, `-0` is `0`, as to every client); any other number
/// has no key. Every id the proxy admitted keys the same way here.
pub fn value_key(id: &Value) -> Option<IdKey> {
    match id {
        Value::String(s) => Some(IdKey::Str(s.clone())),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return (-MAX_SAFE_ID..=MAX_SAFE_ID)
                    .contains(&i)
                    .then_some(IdKey::Int(i));
            }
            let f = n.as_f64()?;
            #[allow(
                clippy::cast_possible_truncation,
                reason = "checked integral and in range"
            )]
            let i = f as i64;
            (f.fract() == 0.0 && f.abs() <= MAX_SAFE_ID as f64).then_some(IdKey::Int(i))
        }
        _ => None,
    }
}

/// Is `byte` a line end some reader honours where JSON allows it raw? Only
/// `\r` (JSON whitespace); the others are invalid in JSON text and refused
/// by parsing.
const CR: u8 = b'\r';

/// The UTF-8 of NEL (U+0085), LINE SEPARATOR (U+2028) and PARAGRAPH
/// SEPARATOR (U+2029), with their JSON escapes.
const SEPARATORS: [(&[u8], &[u8]); 3] = [
    (b"\xC2\x85", b"\\u0085"),
    (b"\xE2\x80\xA8", b"\\u2028"),
    (b"\xE2\x80\xA9", b"\\u2029"),
];

/// Does `line` hold a byte sequence some reader ends a line at, other than
/// its final `\n` / `\r\n`?
fn splittable(line: &[u8]) -> bool {
    line.iter().any(|&b| b == CR || b == 0xC2 || b == 0xE2)
}

/// `line` (one JSON text, without its terminator, valid UTF-8) written so
/// that no client reader splits it: every `\r` removed (it can only be
/// whitespace between tokens) and NEL, U+2028 and U+2029 written as `\u`
/// escapes (they can only be inside strings). The result is equal JSON;
/// a line with none of them is returned as it is.
pub fn for_readers(line: &[u8]) -> Cow<'_, [u8]> {
    if !splittable(line) {
        return Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut changed = false;
    let mut at = 0;
    'bytes: while at < line.len() {
        let rest = &line[at..];
        if rest[0] == CR {
            changed = true;
            at += 1;
            continue;
        }
        for (sequence, escape) in SEPARATORS {
            if rest.starts_with(sequence) {
                changed = true;
                out.extend_from_slice(escape);
                at += sequence.len();
                continue 'bytes;
            }
        }
        out.push(rest[0]);
        at += 1;
    }
    if !changed {
        // Only lead bytes of other characters: nothing to rewrite.
        return Cow::Borrowed(line);
    }
    Cow::Owned(out)
}

/// The error frame refusing a request whose id is given as its JSON text:
/// the id is echoed byte for byte as written (a server matches its own
/// spelling), `message` as a JSON string.
pub fn refusal_frame(raw_id: &str, code: i32, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + raw_id.len() + message.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(raw_id.as_bytes());
    out.extend_from_slice(br#","error":{"code":"#);
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(br#","message":"#);
    out.extend_from_slice(Value::from(message).to_string().as_bytes());
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn key(text: &str) -> Result<IdKey, IdRefusal> {
        admit_id_text(text)
    }

    #[test]
    fn ids_every_client_reads_as_written_are_admitted() {
        assert_eq!(key("1"), Ok(IdKey::Int(1)));
        assert_eq!(key("0"), Ok(IdKey::Int(0)));
        assert_eq!(key("-7"), Ok(IdKey::Int(-7)));
        assert_eq!(key("9007199254740991"), Ok(IdKey::Int(MAX_SAFE_ID)));
        assert_eq!(key("-9007199254740991"), Ok(IdKey::Int(-MAX_SAFE_ID)));
        assert_eq!(key(r#""1""#), Ok(IdKey::Str("1".into())));
        assert_eq!(key(r#""\u0031""#), Ok(IdKey::Str("1".into())));
    }

    #[test]
    fn numbers_a_client_could_take_for_another_id_are_refused() {
        for text in [
            "1.0",
            "1e0",
            "1E+0",
            "10e-1",
            "-0",
            "-0.0",
            "0.5",
            "9007199254740992",
            "-9007199254740992",
            "123456789012345678901234567890",
            "01",
        ] {
            assert_eq!(key(text), Err(IdRefusal::Ambiguous), "{text}");
        }
        for text in ["null", "true", "{}", "[]"] {
            assert_eq!(key(text), Err(IdRefusal::NotAnId), "{text}");
        }
    }

    #[test]
    fn value_keys_agree_with_admitted_keys() {
        for text in ["1", "-3", r#""a\u0062""#, "9007199254740991"] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(value_key(&value), key(text).ok(), "{text}");
        }
        let one: Value = serde_json::from_str("1.0").unwrap();
        assert_eq!(value_key(&one), Some(IdKey::Int(1)));
        let huge: Value = serde_json::from_str("1e300").unwrap();
        assert_eq!(value_key(&huge), None);
    }

    #[test]
    fn lines_are_written_so_no_reader_splits_them() {
        assert_eq!(
            &*for_readers(b"{\"a\":\r1,\r\"b\":\"x\xE2\x80\xA8y\xC2\x85\xE2\x80\xA9\"}"),
            br#"{"a":1,"b":"x\u2028y\u0085\u2029"}"#
        );
        let plain = "{\"a\":\"é…\"}".as_bytes();
        assert!(matches!(for_readers(plain), Cow::Borrowed(_)));
        // As many bytes removed as added: still rewritten.
        assert_eq!(
            &*for_readers("[\r\r\r\"\u{2029}\"]".as_bytes()),
            br#"["\u2029"]"#
        );
    }

    #[test]
    fn refusals_echo_the_id_as_written() {
        assert_eq!(
            refusal_frame("123456789012345678901234567890", -32600, "no"),
            br#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"error":{"code":-32600,"message":"no"}}"#
        );
        assert_eq!(
            refusal_frame("-0", -32600, "no"),
            br#"{"jsonrpc":"2.0","id":-0,"error":{"code":-32600,"message":"no"}}"#
        );
    }
}
