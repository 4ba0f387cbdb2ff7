//! Reading the envelope's `id` from a request the strict parser refused.
//!
//! JSON-RPC wants an error response to carry the request's id whenever it
//! can be determined, and a server that gets `"id": null` cannot match the
//! answer and waits for its own timeout. So when strict parsing fails for a
//! reason that leaves the document's shape readable (a duplicate key deep
//! inside, a lone surrogate, nesting too deep, too many bytes, invalid UTF-8
//! inside a string), this second pass reads only the top level.
//!
//! It is tolerant of exactly those faults and of nothing else: the whole
//! input must still be JSON text whose top level is one object. Only then is
//! the set of top-level members known, and only then can the id be trusted:
//! an id given twice (also as `"\u0069d"`), an id that is not a string or a
//! number, an id string that is not valid UTF-8 or holds a lone surrogate,
//! or a number no double holds, all give `None`, and the frame says `null`.
//!
//! The scanner is a byte-at-a-time state machine fed in chunks, so a caller
//! that refused to keep an oversize input in memory can still stream the
//! rest through it. Its work is linear in the input and its memory is one
//! byte per open container plus the id and one short key.

use serde_json::{Number, Value};

use crate::identity::nfc;

/// Longest top-level key worth decoding: `"id"` spelt with two `\u`
/// escapes is 12 bytes, and no other string is `id` after NFC.
const KEY_CAPTURE: usize = 16;

/// Deepest nesting the scanner follows before giving up (one byte of
/// memory each).
const MAX_DEPTH: usize = 1 << 24;

/// Recovers the top-level `id` of `bytes` (see the module documentation).
pub(crate) fn recover_id(bytes: &[u8], max_id_bytes: usize) -> Option<Value> {
    let mut scan = IdScan::new(max_id_bytes);
    scan.feed(bytes);
    scan.finish()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Before the top-level value.
    Start,
    /// A value is expected (after `:` or `,` in an array, or after `[`
    /// when `close` allows `]`).
    Value { close: bool },
    /// A key is expected (after `,` in an object, or after `{` when
    /// `close` allows `}`).
    Key { close: bool },
    /// `:` is expected after a key.
    Colon,
    /// `,` or the container's close is expected.
    After,
    /// Inside a string; `escape` counts what is left of an escape (1 after
    /// `\`, 4..1 for the hex digits of `\u`, 0 for none).
    Str { key: bool, escape: u8 },
    /// Inside a number.
    Num(Num),
    /// Inside `true`, `false` or `null`: the bytes still to come.
    Literal(&'static [u8]),
    /// The top-level value is complete; only whitespace may follow.
    Done,
    /// Not readable: the answer is `None`.
    Failed,
}

/// Where a number is in JSON's grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

impl Num {
    /// Whether the number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::ExpDigits)
    }

    /// The state after `byte`, or `None` if `byte` does not continue the number.
    fn next(self, byte: u8) -> Option<Num> {
        match (self, byte) {
            (Num::Minus, b'0') => Some(Num::Zero),
            (Num::Minus, b'1'..=b'9') => Some(Num::Int),
            (Num::Int, b'0'..=b'9') => Some(Num::Int),
            (Num::Zero | Num::Int, b'.') => Some(Num::Dot),
            (Num::Dot | Num::Frac, b'0'..=b'9') => Some(Num::Frac),
            (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Some(Num::Exp),
            (Num::Exp, b'+' | b'-') => Some(Num::ExpSign),
            (Num::Exp | Num::ExpSign | Num::ExpDigits, b'0'..=b'9') => Some(Num::ExpDigits),
            _ => None,
        }
    }
}

/// What the scanner learnt about `id` members at the top level.
#[derive(Debug)]
enum Id {
    /// None seen yet.
    Absent,
    /// One seen, its raw JSON text (a string with its quotes, or a number).
    Raw(Vec<u8>),
    /// One seen that cannot be echoed (not a string or number, or too long).
    Unusable,
    /// Two or more seen.
    Repeated,
}

/// Reads the top-level `id` of a request in chunks, for an input too large
/// to hold (see [`crate::request::recover_id`] for what it accepts).
#[derive(Debug)]
pub struct IdScan {
    mode: Mode,
    /// Open containers, `{` or `[`; the top-level object is `stack[0]`.
    stack: Vec<u8>,
    /// Raw bytes of the current top-level key (up to [`KEY_CAPTURE`] + 1).
    key: Vec<u8>,
    /// The member being read is a top-level `id`: its value is captured.
    capturing: bool,
    id: Id,
    max_id_bytes: usize,
}

impl IdScan {
    /// A scanner that gives up on an id longer than `max_id_bytes`.
    pub fn new(max_id_bytes: usize) -> Self {
        IdScan {
            mode: Mode::Start,
            stack: Vec::new(),
            key: Vec::new(),
            capturing: false,
            id: Id::Absent,
            max_id_bytes,
        }
    }

    /// Feeds the next bytes of the input.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut at = 0;
        while at < bytes.len() {
            if self.mode == Mode::Failed {
                return;
            }
            // Fast path: the body of a string nobody captures.
            if let Mode::Str { key, escape: 0 } = self.mode
                && !self.capturing
                && !(key && self.stack.len() == 1)
            {
                let rest = &bytes[at..];
                let stop = rest
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    .unwrap_or(rest.len());
                at += stop;
                if at == bytes.len() {
                    return;
                }
            }
            self.byte(bytes[at]);
            at += 1;
        }
    }

    /// The id, once the whole input has been fed.
    pub fn finish(self) -> Option<Value> {
        // The top level is an object (anything else failed at once), so a
        // complete input always ends in `Done`.
        if self.mode != Mode::Done {
            return None;
        }
        match self.id {
            Id::Raw(raw) => match raw.first() {
                Some(b'"') => serde_json::from_slice::<String>(&raw)
                    .ok()
                    .map(Value::String),
                _ => serde_json::from_slice::<Number>(&raw)
                    .ok()
                    .map(Value::Number),
            },
            Id::Absent | Id::Unusable | Id::Repeated => None,
        }
    }

    /// The id as written (its JSON text, a string with its quotes), exactly
    /// when [`IdScan::finish`] gives one: a frame that echoes this answers
    /// the spelling the sender used (`-0`, `1.0`, an integer no double
    /// holds), which the parsed number cannot (`docs/spec/frames.md`,
    /// "Echoing the id").
    pub fn finish_text(self) -> Option<String> {
        let text = match &self.id {
            Id::Raw(raw) => String::from_utf8(raw.clone()).ok()?,
            _ => return None,
        };
        self.finish().map(|_| text)
    }

    fn fail(&mut self) {
        self.mode = Mode::Failed;
    }

    /// Records one byte of the id's value, if it is being captured.
    fn capture(&mut self, byte: u8) {
        if self.capturing
            && let Id::Raw(raw) = &mut self.id
        {
            if raw.len() < self.max_id_bytes {
                raw.push(byte);
            } else {
                self.id = Id::Unusable;
                self.capturing = false;
            }
        }
    }

    /// A value is starting with `byte` (already known not to be whitespace).
    fn begin_value(&mut self, byte: u8) {
        let top_member = self.stack.len() == 1 && self.capturing;
        if top_member {
            // Only strings and numbers can be echoed as an id.
            match byte {
                b'"' | b'-' | b'0'..=b'9' => {
                    if matches!(self.id, Id::Absent) {
                        self.id = Id::Raw(Vec::new());
                    }
                }
                _ => {
                    self.id = Id::Unusable;
                    self.capturing = false;
                }
            }
        }
        self.capture(byte);
        match byte {
            b'{' | b'[' => {
                if self.stack.len() >= MAX_DEPTH {
                    return self.fail();
                }
                self.stack.push(byte);
                self.mode = if byte == b'{' {
                    Mode::Key { close: true }
                } else {
                    Mode::Value { close: true }
                };
            }
            b'"' => {
                self.mode = Mode::Str {
                    key: false,
                    escape: 0,
                }
            }
            b'-' => self.mode = Mode::Num(Num::Minus),
            b'0' => self.mode = Mode::Num(Num::Zero),
            b'1'..=b'9' => self.mode = Mode::Num(Num::Int),
            b't' => self.mode = Mode::Literal(b"rue"),
            b'f' => self.mode = Mode::Literal(b"alse"),
            b'n' => self.mode = Mode::Literal(b"ull"),
            _ => self.fail(),
        }
    }

    /// A value has ended.
    fn end_value(&mut self) {
        if self.stack.len() == 1 {
            self.capturing = false;
        }
        self.mode = if self.stack.is_empty() {
            Mode::Done
        } else {
            Mode::After
        };
    }

    /// A top-level key has ended: is it `id`?
    fn end_top_key(&mut self) {
        let is_id = self.key.len() <= KEY_CAPTURE
            && serde_json::from_slice::<String>(&self.key)
                .is_ok_and(|key| key == "id" || nfc(&key) == "id");
        self.key.clear();
        if is_id {
            self.capturing = true;
            if !matches!(self.id, Id::Absent) {
                self.id = Id::Repeated;
            }
        }
    }

    fn byte(&mut self, byte: u8) {
        let space = matches!(byte, b' ' | b'\t' | b'\n' | b'\r');
        match self.mode {
            Mode::Failed => {}
            Mode::Start => {
                if space {
                } else if byte == b'{' {
                    self.stack.push(byte);
                    self.mode = Mode::Key { close: true };
                } else {
                    // The top level must be an object to have an id.
                    self.fail();
                }
            }
            Mode::Done => {
                if !space {
                    self.fail();
                }
            }
            Mode::Value { close } => {
                if space {
                } else if close && byte == b']' {
                    self.close(byte);
                } else {
                    self.begin_value(byte);
                }
            }
            Mode::Key { close } => {
                if space {
                } else if close && byte == b'}' {
                    self.close(byte);
                } else if byte == b'"' {
                    if self.stack.len() == 1 {
                        self.key.clear();
                        self.key.push(byte);
                    }
                    self.mode = Mode::Str {
                        key: true,
                        escape: 0,
                    };
                } else {
                    self.fail();
                }
            }
            Mode::Colon => {
                if space {
                } else if byte == b':' {
                    self.mode = Mode::Value { close: false };
                } else {
                    self.fail();
                }
            }
            Mode::After => {
                if space {
                } else if byte == b',' {
                    self.mode = match self.stack.last() {
                        Some(b'{') => Mode::Key { close: false },
                        _ => Mode::Value { close: false },
                    };
                } else if byte == b'}' || byte == b']' {
                    self.close(byte);
                } else {
                    self.fail();
                }
            }
            Mode::Str { key, escape } => self.string_byte(byte, key, escape),
            Mode::Num(num) => match num.next(byte) {
                Some(next) => {
                    self.capture(byte);
                    self.mode = Mode::Num(next);
                }
                None if num.complete() => {
                    self.end_value();
                    self.byte(byte);
                }
                None => self.fail(),
            },
            Mode::Literal(rest) => match rest.split_first() {
                Some((&expected, tail)) if expected == byte => {
                    if tail.is_empty() {
                        self.end_value();
                    } else {
                        self.mode = Mode::Literal(tail);
                    }
                }
                _ => self.fail(),
            },
        }
    }

    fn string_byte(&mut self, byte: u8, key: bool, escape: u8) {
        let top_key = key && self.stack.len() == 1;
        if top_key && self.key.len() <= KEY_CAPTURE {
            self.key.push(byte);
        }
        if !key {
            self.capture(byte);
        }
        // 0: no escape; 1: after `\`; 5..=2: 4..=1 hex digits of `\u` to come.
        let escape = match escape {
            0 => match byte {
                b'"' => {
                    if key {
                        if top_key {
                            self.end_top_key();
                        }
                        self.mode = Mode::Colon;
                    } else {
                        self.end_value();
                    }
                    return;
                }
                b'\\' => 1,
                0..0x20 => return self.fail(),
                _ => 0,
            },
            1 => match byte {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 0,
                b'u' => 5,
                _ => return self.fail(),
            },
            digits => {
                if !byte.is_ascii_hexdigit() {
                    return self.fail();
                }
                if digits == 2 { 0 } else { digits - 1 }
            }
        };
        self.mode = Mode::Str { key, escape };
    }

    fn close(&mut self, byte: u8) {
        let open = if byte == b'}' { b'{' } else { b'[' };
        if self.stack.pop() != Some(open) {
            return self.fail();
        }
        self.end_value();
    }
}
