//! Canonical JSON (RFC 8785 after NFC) and request identity.
//!
//! NOTE: first cut written to fix the API; the streaming canonicaliser with
//! an ASCII/NFC quick-check fast path replaces the body of `write_canonical`.

use serde_json::Value;
use sha2::Sha256;
use unicode_normalization::UnicodeNormalization;

/// Where canonical bytes go: a hasher, or a buffer.
pub trait Sink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

/// Writes the RFC 8785 form of `value`, every string (keys included) NFC-normalised.
pub fn write_canonical(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => out.put(n.to_string().as_bytes()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_canonical(item, out);
            }
            out.put(b"]");
        }
        Value::Object(map) => {
            let mut entries: Vec<(String, &Value)> =
                map.iter().map(|(k, v)| (k.nfc().collect(), v)).collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.put(b"{");
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_string(key, out);
                out.put(b":");
                write_canonical(item, out);
            }
            out.put(b"}");
        }
    }
}

fn write_string(s: &str, out: &mut impl Sink) {
    let normalised: String = s.nfc().collect();
    out.put(b"\"");
    for c in normalised.chars() {
        match c {
            '"' => out.put(b"\\\""),
            '\\' => out.put(b"\\\\"),
            '\u{8}' => out.put(b"\\b"),
            '\u{c}' => out.put(b"\\f"),
            '\n' => out.put(b"\\n"),
            '\r' => out.put(b"\\r"),
            '\t' => out.put(b"\\t"),
            c if (c as u32) < 0x20 => out.put(format!("\\u{:04x}", c as u32).as_bytes()),
            c => out.put(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out.put(b"\"");
}
