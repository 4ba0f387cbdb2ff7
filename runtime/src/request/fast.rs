//! The strict reader's fast path: one hand-written pass from the text to
//! a tree, with every check of [`super::parse_strict_with`] made on the
//! way (`docs/spec/evaluation.md`, "Step 1: Validation"). The tree is a
//! [`Value`], or the borrowed [`Node`] a decision from bytes is made from:
//! one reader builds both, so they accept the same texts.
//!
//! It decides acceptance only. Whatever it does not accept (a syntax error,
//! a lone surrogate, a duplicate key, nesting too deep, a number out of
//! range) it hands back as `None`, and the serde_json path reads the same
//! text again for the error and its message, so every refusal is
//! described exactly as before. What it accepts it must read as that path
//! does, value for value: `runtime/tests/strict_reader.rs` holds the two
//! equal on generated and mutated documents, and the `request` fuzz
//! target on whatever the fuzzer finds.
//!
//! Why a reader of our own: serde_json's `Value` visitor allocates every
//! key twice over (the key, then the map's), and its generic dispatch is
//! most of the time it spends on a small request. This one looks every key
//! up once, borrows strings until they are stored, and scans string bodies
//! 32 bytes at a time with the canonicaliser's byte classifier.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};

use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

use crate::identity::{CHUNK, dirty_mask, needs_escape, nfc};
use crate::json::{Members, Node};

/// The document `text` as a [`Value`], if it is one JSON value (with white
/// space around it) that nests at most `max_depth` containers deep, holds
/// no object with two keys equal after NFC, no lone surrogate and no
/// number a double cannot hold. `None` for anything else.
pub(super) fn parse(text: &str, max_depth: usize) -> Option<Value> {
    read(text, max_depth)
}

/// [`parse`] into the borrowed tree: the same acceptance and the same
/// values (`Json::to_value` of it is [`parse`]'s `Value`), with strings
/// borrowed from `text` unless an escape was decoded, and objects in
/// document order.
pub(crate) fn parse_node(text: &str, max_depth: usize) -> Option<Node<'_>> {
    read(text, max_depth)
}

fn read<'a, T: Tree<'a>>(text: &'a str, max_depth: usize) -> Option<T> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        at: 0,
        max_depth,
        keys: Vec::new(),
    };
    let value = reader.value(0)?;
    reader.space();
    (reader.at == reader.bytes.len()).then_some(value)
}

/// What the reader builds: a [`Value`], or a [`Node`] that borrows the text.
trait Tree<'a>: Sized {
    type Members: Default;
    fn null() -> Self;
    fn boolean(b: bool) -> Self;
    fn number(n: Number) -> Self;
    fn string(text: Cow<'a, str>) -> Self;
    fn array(items: Vec<Self>) -> Self;
    fn object(members: Self::Members) -> Self;
    /// For a tree whose objects find a key written twice themselves (a
    /// map, in [`Tree::insert`]): whether `key` clashes after NFC with a
    /// key of `members` or one recorded in `renormalised`, where a key not
    /// in NFC is recorded by its NFC form, as the serde path does. `None`
    /// for a tree whose objects do not (a vector): the reader then checks
    /// every key itself ([`Reader::first_of_its_form`]).
    fn clashes_in_map(
        members: &Self::Members,
        key: &str,
        renormalised: &mut HashSet<String>,
    ) -> Option<bool>;
    /// Adds a member; `false` when `members` has the key as written.
    fn insert(members: &mut Self::Members, key: Cow<'a, str>, value: Self) -> bool;
}

impl<'a> Tree<'a> for Value {
    type Members = Map<String, Value>;
    fn null() -> Self {
        Value::Null
    }
    fn boolean(b: bool) -> Self {
        Value::Bool(b)
    }
    fn number(n: Number) -> Self {
        Value::Number(n)
    }
    fn string(text: Cow<'a, str>) -> Self {
        Value::String(text.into_owned())
    }
    fn array(items: Vec<Self>) -> Self {
        Value::Array(items)
    }
    fn object(members: Self::Members) -> Self {
        Value::Object(members)
    }
    fn clashes_in_map(
        members: &Self::Members,
        key: &str,
        renormalised: &mut HashSet<String>,
    ) -> Option<bool> {
        Some(match nfc(key) {
            Cow::Owned(normal) => members.contains_key(&normal) || !renormalised.insert(normal),
            Cow::Borrowed(_) => renormalised.contains(key),
        })
    }
    fn insert(members: &mut Self::Members, key: Cow<'a, str>, value: Self) -> bool {
        match members.entry(key.into_owned()) {
            Entry::Vacant(slot) => {
                slot.insert(value);
                true
            }
            Entry::Occupied(_) => false,
        }
    }
}

impl<'a> Tree<'a> for Node<'a> {
    type Members = Members<'a>;
    fn null() -> Self {
        Node::Null
    }
    fn boolean(b: bool) -> Self {
        Node::Bool(b)
    }
    fn number(n: Number) -> Self {
        Node::Number(n)
    }
    fn string(text: Cow<'a, str>) -> Self {
        Node::String(text)
    }
    fn array(items: Vec<Self>) -> Self {
        Node::Array(items)
    }
    fn object(members: Self::Members) -> Self {
        Node::Object(members)
    }
    fn clashes_in_map(_: &Self::Members, _: &str, _: &mut HashSet<String>) -> Option<bool> {
        None
    }
    fn insert(members: &mut Self::Members, key: Cow<'a, str>, value: Self) -> bool {
        members.0.push((key, value));
        true
    }
}

/// Keys a `Node`'s object may have before they are kept in an ordered set:
/// compared one by one up to here.
const FEW_KEYS: usize = 16;

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    /// The next byte to read.
    at: usize,
    max_depth: usize,
    /// The NFC forms of the keys of the `Node` objects being read that
    /// have few, the innermost object's last.
    keys: Vec<Cow<'a, str>>,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Skips white space, then `byte`, which must come next.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// The value starting after white space at `self.at`, inside `depth`
    /// containers.
    fn value<T: Tree<'a>>(&mut self, depth: usize) -> Option<T> {
        self.space();
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => Some(T::string(self.string()?)),
            b't' => self.word(b"true", T::boolean(true)),
            b'f' => self.word(b"false", T::boolean(false)),
            b'n' => self.word(b"null", T::null()),
            b'-' | b'0'..=b'9' => self.number().map(T::number),
            _ => None,
        }
    }

    fn word<T>(&mut self, word: &[u8], value: T) -> Option<T> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| {
            self.at = end;
            value
        })
    }

    fn array<T: Tree<'a>>(&mut self, depth: usize) -> Option<T> {
        if depth > self.max_depth {
            return None;
        }
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(T::array(items));
        }
        loop {
            items.push(self.value(depth)?);
            if !self.another(b']')? {
                return Some(T::array(items));
            }
        }
    }

    fn object<T: Tree<'a>>(&mut self, depth: usize) -> Option<T> {
        if depth > self.max_depth {
            return None;
        }
        self.at += 1;
        let mut members = T::Members::default();
        self.space();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(T::object(members));
        }
        // Two keys clash when their NFC forms are equal, as in the serde
        // path: a map's own rule, else `first_of_its_form`.
        let base = self.keys.len();
        let mut renormalised: HashSet<String> = HashSet::new();
        let mut many: Option<BTreeSet<Cow<'a, str>>> = None;
        loop {
            self.space();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.expect(b':')?;
            let clash = T::clashes_in_map(&members, &key, &mut renormalised)
                .unwrap_or_else(|| !self.first_of_its_form(&key, base, &mut many));
            if clash {
                return None;
            }
            let value = self.value(depth)?;
            if !T::insert(&mut members, key, value) {
                return None;
            }
            if !self.another(b'}')? {
                self.keys.truncate(base);
                return Some(T::object(members));
            }
        }
    }

    /// Whether no earlier key of the object being read (its keys from
    /// `base` on `self.keys`, or in `many` once it has more than
    /// [`FEW_KEYS`]) has the NFC form of `key`, which is then recorded. An
    /// ordered set is linearithmic whatever keys a sender chooses, and
    /// faster than hashing every key of a huge object (`docs/performance.md`,
    /// "Adversarial requests at the size cap").
    #[allow(
        clippy::ptr_arg,
        reason = "a key borrowed from the text keeps its NFC form borrowed too"
    )]
    fn first_of_its_form(
        &mut self,
        key: &Cow<'a, str>,
        base: usize,
        many: &mut Option<BTreeSet<Cow<'a, str>>>,
    ) -> bool {
        let normal = match key {
            Cow::Borrowed(text) => nfc(text),
            Cow::Owned(text) => Cow::Owned(nfc(text).into_owned()),
        };
        if let Some(set) = many {
            return set.insert(normal);
        }
        if self.keys[base..].contains(&normal) {
            return false;
        }
        self.keys.push(normal);
        if self.keys.len() - base > FEW_KEYS {
            *many = Some(self.keys.drain(base..).collect());
        }
        true
    }

    /// After an item or a member, reads a `,` (`true`: another follows) or
    /// `close` (`false`: the container ends).
    fn another(&mut self, close: u8) -> Option<bool> {
        self.space();
        let byte = self.peek()?;
        self.at += 1;
        match byte {
            b',' => Some(true),
            _ if byte == close => Some(false),
            _ => None,
        }
    }

    /// The string whose opening quote is at `self.at`, borrowed from the
    /// text when it has no escape.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.at += 1;
        let start = self.at;
        let stop = self.stop()?;
        if self.bytes[stop] == b'"' {
            self.at = stop + 1;
            return self.text.get(start..stop).map(Cow::Borrowed);
        }
        let mut owned = String::from(self.text.get(start..stop)?);
        self.at = stop;
        loop {
            match self.bytes[self.at] {
                b'"' => {
                    self.at += 1;
                    return Some(Cow::Owned(owned));
                }
                b'\\' => self.escape(&mut owned)?,
                // A control character, which JSON does not allow raw.
                _ => return None,
            }
            let from = self.at;
            let stop = self.stop()?;
            owned.push_str(self.text.get(from..stop)?);
            self.at = stop;
        }
    }

    /// The index of the first `"`, `\` or control character from
    /// `self.at` on: a string body's next stop. `None` when there is none.
    fn stop(&self) -> Option<usize> {
        let mut at = self.at;
        while let Some(chunk) = self
            .bytes
            .get(at..)
            .and_then(|rest| rest.first_chunk::<CHUNK>())
        {
            // 0xFF never occurs in UTF-8: only the JSON specials stop.
            let mask = dirty_mask(chunk, 0xFF);
            if mask != 0 {
                return Some(at + mask.trailing_zeros() as usize);
            }
            at += CHUNK;
        }
        // The tail shorter than a chunk: the same bytes, one at a time.
        let rest = self.bytes.get(at..)?;
        rest.iter()
            .position(|&b| needs_escape(b))
            .map(|offset| at + offset)
    }

    /// The escape at `self.at` (its backslash), appended to `out`.
    fn escape(&mut self, out: &mut String) -> Option<()> {
        let letter = *self.bytes.get(self.at + 1)?;
        self.at += 2;
        let c = match letter {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex()?;
                match unit {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed by `\u` and a low one.
                        if self.bytes.get(self.at..self.at + 2)? != b"\\u" {
                            return None;
                        }
                        self.at += 2;
                        let low = self.hex()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
                    }
                    _ => char::from_u32(unit)?,
                }
            }
            _ => return None,
        };
        out.push(c);
        Some(())
    }

    /// Four hex digits at `self.at`.
    fn hex(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        let mut unit = 0;
        for &digit in digits {
            unit = unit * 16 + char::from(digit).to_digit(16)?;
        }
        self.at += 4;
        Some(unit)
    }

    /// The number at `self.at`, as serde_json holds it: an integer without
    /// fraction or exponent that fits is a `u64` (or, negative and not
    /// zero, an `i64`); every other number the double nearest its literal
    /// (`-0` is the double −0), refused when that is infinite.
    fn number(&mut self) -> Option<Number> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => {
                self.at += 1;
                if self.peek().is_some_and(|b| b.is_ascii_digit()) {
                    return None;
                }
            }
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
            integer = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
            integer = false;
        }
        let literal = self.text.get(start..self.at)?;
        if integer {
            if negative {
                if let Ok(n) = literal.parse::<i64>()
                    && n != 0
                {
                    return Some(Number::from(n));
                }
            } else if let Ok(n) = literal.parse::<u64>() {
                return Some(Number::from(n));
            }
        }
        let double = literal.parse::<f64>().ok()?;
        Number::from_f64(double).filter(|_| double.is_finite())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }
}
