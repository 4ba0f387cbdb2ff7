//! Canonical JSON (RFC 8785, after NFC) and request identity.
//!
//! A request's identity keys durable decisions, so two requests a human
//! would call identical must hash alike however their JSON was encoded:
//! key order, whitespace, `\u00e9` versus `é`, decomposed versus precomposed
//! accents, `1` versus `1.0` versus `1e0`. The canonical form is RFC 8785
//! (JCS) applied after NFC-normalising every string, keys included.
//!
//! The canonicaliser streams: it walks the value (a [`Value`], or any
//! [`Json`] view of one) once (by recursion to a fixed depth, then from an
//! explicit stack, so no depth can overflow the stack) and writes into a
//! [`Sink`] through a small buffer, handing on whole 64-byte blocks a few
//! at a time: a hasher's rounds over one piece (a chain of dependent
//! instructions) then run beside the canonicalising of the next, on the
//! same core. Strings that are ASCII or pass
//! Unicode's NFC quick check are written without allocating. One pass over
//! each string both escapes it and checks it is NFC: a branch-free mask per
//! 32 bytes (SSE2 compares on x86-64) finds the next byte that needs a look
//! (an escape, or a lead byte of U+0300 or above), and only a character that
//! is not known to be inert sends the rest of the string through the quick
//! check.
//!
//! Identities must never drift between releases: `tests/cases/identity/vectors.json`
//! freezes them.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::sync::OnceLock;

use serde::Serialize;
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

use crate::json::{Json, Kind, Object};

mod normal;
#[cfg(test)]
mod view_tests;

use normal::normal_fields;
pub use normal::{is_default_ignorable, presentation_normal, presentation_text};

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
        Digest::update(self, bytes);
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn put(&mut self, bytes: &[u8]) {
        (**self).put(bytes);
    }
}

/// Counts canonical bytes without keeping them (see [`canonical_len`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ByteCount(pub u64);

impl Sink for ByteCount {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len() as u64;
    }
}

/// Writes the RFC 8785 form of `value`, every string (keys included) NFC-normalised.
///
/// Object keys are sorted by the UTF-16 code units of their NFC form, never
/// by the map's own iteration order (serde_json's `preserve_order` feature
/// would make that insertion order). Two keys of one object that are equal
/// only after NFC (strict request parsing rejects those) are ordered by their
/// original form, so the output still never depends on map order.
///
/// Numbers follow ECMAScript's `Number.prototype.toString`, as RFC 8785
/// requires: integers beyond ±2^53 go through `f64` as a JavaScript parser
/// would take them. A non-finite number (possible only with serde_json's
/// `arbitrary_precision`) is written as `null`, as `JSON.stringify` does.
pub fn write_canonical(value: &Value, out: &mut impl Sink) {
    write_canonical_of(value, out);
}

/// [`write_canonical`] of any view of a JSON value: a [`Value`], or the
/// strict reader's borrowed tree, whose objects are in document order.
/// Both give the same bytes (`identity::view_tests`).
pub(crate) fn write_canonical_of<J: Json>(value: &J, out: &mut impl Sink) {
    let mut writer = Writer::new(out);
    writer.value(value);
    writer.flush();
}

/// The canonical bytes of `value` (see [`write_canonical`]).
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

/// The length in bytes of the canonical form of `value`, without building it.
pub fn canonical_len(value: &Value) -> u64 {
    let mut count = ByteCount::default();
    write_canonical(value, &mut count);
    count.0
}

/// Writes the canonical form of the identity payload
/// `{f: params[f] or null for f in fields}`.
///
/// Field names are looked up in `params` exactly as given; a field listed
/// twice appears once.
pub fn write_identity_payload<F: AsRef<str>>(
    params: &Map<String, Value>,
    fields: &[F],
    out: &mut impl Sink,
) {
    write_payload_of(looked_up(params, fields), out);
}

/// Each of `fields` with its value in `params` (`None`: absent).
fn looked_up<'a, O: Object, F: AsRef<str>>(
    params: &'a O,
    fields: &'a [F],
) -> impl Iterator<Item = (&'a str, Option<&'a O::Value>)> {
    fields.iter().map(|field| {
        let field = field.as_ref();
        (field, params.get(field))
    })
}

/// Writes the canonical object of `members` (a `None` value: `null`), in
/// any order; a key given twice is written once.
fn write_payload_of<'a, J: Json + 'a>(
    members: impl Iterator<Item = (&'a str, Option<&'a J>)>,
    out: &mut impl Sink,
) {
    let mut entries: Vec<Entry<'a, Option<&'a J>>> = members
        .map(|(raw, value)| Entry {
            key: nfc(raw),
            raw,
            value,
        })
        .collect();
    entries.sort_by(Entry::cmp);
    entries.dedup_by(|later, earlier| later.raw == earlier.raw);

    let mut writer = Writer::new(out);
    writer.payload(&entries);
    writer.flush();
}

/// A request's identity: `server_id + ":" +` the first 32 lowercase hex
/// characters of the SHA-256 of the canonical identity payload.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct RequestIdentity(String);

impl RequestIdentity {
    /// The identity as text, e.g. `release-notes:3f2a…` (32 hex digits).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The identity as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for RequestIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RequestIdentity {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The identity of a request from `server_id` with these `params`, over the
/// policy's identity `fields` (`docs/spec/identity.md`).
///
/// Absent fields count as `null`; every other member of `params` (such as
/// `maxTokens` or `temperature`) leaves the identity unchanged.
pub fn request_identity<F: AsRef<str>>(
    server_id: &str,
    params: &Map<String, Value>,
    fields: &[F],
) -> RequestIdentity {
    // Server ids key stored decisions in NFC, like every string of the payload.
    identity_of(server_id, looked_up(params, fields))
}

/// [`request_identity`] of the payload of `members` (see [`write_payload_of`]).
fn identity_of<'a, J: Json + 'a>(
    server_id: &str,
    members: impl Iterator<Item = (&'a str, Option<&'a J>)>,
) -> RequestIdentity {
    let server_id = &*crate::glob::nfc(server_id);
    let mut hasher = Sha256::new();
    write_payload_of(members, &mut hasher);
    let digest = hasher.finalize();

    let mut text = String::with_capacity(server_id.len() + 33);
    text.push_str(server_id);
    text.push(':');
    push_hex(&mut text, &digest[..16]);
    RequestIdentity(text)
}

/// The refusal key of a request (`docs/spec/identity.md`, "The refusal
/// key"): [`request_identity`] of the identity fields after
/// [`presentation_normal`], so that every variant a user cannot tell apart
/// from a refused request (a spelled-out default, `_meta`, `annotations`,
/// an unknown member, a model priority, an invisible character) has the
/// same key. For a request already in presentation-normal form it is
/// [`request_identity`] itself, so denials stored before the two keys
/// existed keep replaying for such requests. Stored denials, policy and
/// user, are keyed by it; the retry-loop alert counts by it.
pub fn refusal_key<F: AsRef<str>>(
    server_id: &str,
    params: &Map<String, Value>,
    fields: &[F],
) -> RequestIdentity {
    refusal_key_of(server_id, params, fields)
}

/// [`refusal_key`] of params read through any view (`docs/spec/identity.md`,
/// "The refusal key"): a request decided from the strict reader's tree
/// has the key it would have as a [`Value`].
pub(crate) fn refusal_key_of<O: Object, F: AsRef<str>>(
    server_id: &str,
    params: &O,
    fields: &[F],
) -> RequestIdentity {
    // The normal form borrows every part of `params` already normal: a
    // request as most clients write it is hashed without a copy.
    let normal = normal_fields(params, fields);
    identity_of(
        server_id,
        fields.iter().map(|field| {
            let field = field.as_ref();
            let value = normal
                .iter()
                .find(|(name, _)| *name == field)
                .map(|(_, value)| &**value);
            (field, value)
        }),
    )
}

/// Domain tag of the approval key's hash: no refusal payload (a canonical
/// JSON object, which begins with `{`) begins with it.
const APPROVAL_TAG: &[u8] = b"mcpolicy approval key v1\n";

/// What separates an approval key's hash from its server id: a refusal key
/// is `server:` + 32 hex digits, so no approval key of a server can equal
/// a refusal key of the same server.
pub const APPROVAL_KEY_MARK: &str = "approval:";

/// The approval key of a request (`docs/spec/identity.md`, "The approval
/// key"): `server_id + ":approval:" +` the first 32 hex digits of the
/// SHA-256 of a domain tag and the canonical form of the params **as
/// forwarded to the client** (after the trims), without `_meta` and
/// `task`. Everything the client runs with is covered: `tools`,
/// `toolChoice`, `maxTokens`, `temperature`, `stopSequences`, `metadata`
/// and every member of the prompt as written. A stored `user.approved` is
/// keyed by it, so an approval covers exactly what the user was shown.
pub fn approval_key(server_id: &str, forwarded: &Map<String, Value>) -> RequestIdentity {
    approval_key_of(server_id, forwarded)
}

/// [`approval_key`] of forwarded params read through any view
/// (`docs/spec/identity.md`, "The approval key"): the same key for the
/// strict reader's tree as for a [`Value`].
pub(crate) fn approval_key_of<O: Object>(server_id: &str, forwarded: &O) -> RequestIdentity {
    let server_id = &*crate::glob::nfc(server_id);
    let mut hasher = Sha256::new();
    Digest::update(&mut hasher, APPROVAL_TAG);
    // The covered members written in place: a request of a million hints
    // is not copied to be hashed.
    let covered = forwarded
        .members()
        .filter(|(key, _)| !matches!(*key, "_meta" | "task"))
        .map(|(key, value)| (key, Some(value)));
    write_payload_of(covered, &mut hasher);
    let digest = hasher.finalize();
    let mut text = String::with_capacity(server_id.len() + 1 + APPROVAL_KEY_MARK.len() + 32);
    text.push_str(server_id);
    text.push(':');
    text.push_str(APPROVAL_KEY_MARK);
    push_hex(&mut text, &digest[..16]);
    RequestIdentity(text)
}

fn push_hex(text: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
}

/// One member of an object being written: its NFC key, original key, and
/// value `V` (a `&J`; for the identity payload an `Option<&J>`, `None`
/// being `null`).
struct Entry<'a, V> {
    key: Cow<'a, str>,
    raw: &'a str,
    value: V,
}

impl<V> Entry<'_, V> {
    fn cmp(a: &Self, b: &Self) -> Ordering {
        cmp_utf16(&a.key, &b.key).then_with(|| cmp_utf16(a.raw, b.raw))
    }
}

/// A container being written.
enum Frame<'a, J> {
    Array(std::slice::Iter<'a, J>),
    /// An object whose keys are already NFC, its members in canonical order
    /// as `members[start..end]` of [`Open`], `next` the one to write.
    InOrder {
        start: usize,
        next: usize,
        end: usize,
    },
    Sorted(Box<std::vec::IntoIter<Entry<'a, &'a J>>>),
}

/// The containers being written, innermost last, and the members of the
/// objects among them written from `members`, innermost last: one walk
/// per object both checks its order and collects them.
struct Open<'a, J> {
    frames: Vec<Frame<'a, J>>,
    members: Vec<(&'a str, &'a J)>,
}

impl<J> Default for Open<'_, J> {
    fn default() -> Self {
        Open {
            frames: Vec::new(),
            members: Vec::new(),
        }
    }
}

/// The writer's buffer: a flush's worth and the most written between checks.
const BUFFER: usize = 1024;

/// Long strings are handed on once this much is buffered, in whole blocks
/// of [`BLOCK`] bytes. Small, so that SHA-256's rounds over these bytes
/// (one chain of dependent instructions, each waiting for the last) overlap
/// with canonicalising the next ones (`runtime/BENCHMARKS.md`, "Why it is
/// fast"; measured in `docs/performance.md`, "Request identity").
const FLUSH_AT: usize = 256;

/// SHA-256's block size: a sink given whole blocks hashes them in place.
const BLOCK: usize = 64;

// Below `FLUSH_AT`, room for what `Writer::body` writes before it checks
// again: a chunk, its escapes and the chunk after, or a short tail escaped.
const _: () = assert!(FLUSH_AT + 8 * CHUNK <= BUFFER);

/// Containers nested deeper than this are written from an explicit stack
/// (see [`Writer::deep`]); shallower ones, nearly all, by recursion.
const RECURSION: u32 = 32;

/// Writes canonical JSON into a sink through a fixed buffer.
struct Writer<'s, S: Sink + ?Sized> {
    sink: &'s mut S,
    buf: [u8; BUFFER],
    len: usize,
    /// Whether an object that says it iterates in byte order
    /// ([`Object::in_byte_order`]) is taken at its word; off only in tests,
    /// to write such objects as if they did not.
    trust_order: bool,
    /// The depth from which containers go to [`Writer::deep`].
    recursion: u32,
}

impl<'s, S: Sink + ?Sized> Writer<'s, S> {
    fn new(sink: &'s mut S) -> Self {
        Writer {
            sink,
            buf: [0; BUFFER],
            len: 0,
            trust_order: true,
            recursion: RECURSION,
        }
    }

    fn flush(&mut self) {
        if self.len > 0 {
            self.sink.put(&self.buf[..self.len]);
            self.len = 0;
        }
    }

    #[inline]
    fn byte(&mut self, byte: u8) {
        if self.len == BUFFER {
            self.flush();
        }
        self.buf[self.len] = byte;
        self.len += 1;
    }

    #[inline]
    fn bytes(&mut self, bytes: &[u8]) {
        if bytes.len() <= BUFFER - self.len {
            self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            self.bytes_slow(bytes);
        }
    }

    #[cold]
    fn bytes_slow(&mut self, bytes: &[u8]) {
        self.flush();
        if bytes.len() >= BUFFER {
            // A long clean run goes to the sink as it is, without a copy.
            self.sink.put(bytes);
        } else {
            self.buf[..bytes.len()].copy_from_slice(bytes);
            self.len = bytes.len();
        }
    }

    /// Writes `root`.
    fn value<J: Json>(&mut self, root: &J) {
        self.nested(root, 0, &mut Vec::new());
    }

    /// Writes `value`, found `depth` containers deep: by recursion, until
    /// [`Writer::deep`] takes over. `members` is [`Open::members`], shared
    /// down the recursion.
    fn nested<'a, J: Json>(
        &mut self,
        value: &'a J,
        depth: u32,
        members: &mut Vec<(&'a str, &'a J)>,
    ) {
        match value.kind() {
            Kind::Array(items) if depth < self.recursion => {
                self.byte(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.byte(b',');
                    }
                    self.nested(item, depth + 1, members);
                }
                self.byte(b']');
            }
            Kind::Object(map) if depth < self.recursion => {
                self.byte(b'{');
                match object_order(map, members, self.trust_order) {
                    Order::InOrder { start, end, plain } => {
                        for i in start..end {
                            let (key, item) = members[i];
                            self.member(i > start, key, plain);
                            self.nested(item, depth + 1, members);
                        }
                        members.truncate(start);
                    }
                    Order::Sorted(entries) => {
                        for (i, entry) in entries.iter().enumerate() {
                            self.member(i > 0, &entry.key, false);
                            self.nested(entry.value, depth + 1, members);
                        }
                    }
                }
                self.byte(b'}');
            }
            Kind::Array(_) | Kind::Object(_) => self.deep(value),
            Kind::Null => self.bytes(b"null"),
            Kind::Bool(true) => self.bytes(b"true"),
            Kind::Bool(false) => self.bytes(b"false"),
            Kind::Number(number) => self.number(number),
            Kind::String(text) => self.string(text),
        }
    }

    /// Writes `root` without recursion: nesting depth costs heap, not stack.
    fn deep<J: Json>(&mut self, root: &J) {
        let mut stack = Open::default();
        self.open(root, &mut stack);
        self.drain(&mut stack);
    }

    /// Writes the identity payload's object from entries already sorted,
    /// a `None` value as `null`.
    fn payload<J: Json>(&mut self, entries: &[Entry<'_, Option<&J>>]) {
        let mut members = Vec::new();
        self.byte(b'{');
        for (i, entry) in entries.iter().enumerate() {
            self.member(i > 0, &entry.key, false);
            match entry.value {
                Some(value) => self.nested(value, 1, &mut members),
                None => self.bytes(b"null"),
            }
        }
        self.byte(b'}');
    }

    /// Writes `,` unless this is the first member, then `"key":`; `plain`
    /// when the key [`is_plain`].
    fn member(&mut self, comma: bool, key: &str, plain: bool) {
        if comma {
            self.byte(b',');
        }
        if plain {
            self.short_quoted(key.as_bytes(), true);
        } else {
            self.escaped(key);
            self.byte(b':');
        }
    }

    /// Writes `"text"`, and `:` after it with `colon`, for a `text` shorter
    /// than a chunk that needs no look: one copy.
    #[inline]
    fn short_quoted(&mut self, text: &[u8], colon: bool) {
        let n = text.len();
        if BUFFER - self.len < CHUNK + 3 {
            self.flush();
        }
        let len = self.len;
        self.buf[len] = b'"';
        copy_short(&mut self.buf[len + 1..len + 1 + CHUNK], text);
        self.buf[len + 1 + n] = b'"';
        // Written either way, counted only when wanted.
        self.buf[len + 2 + n] = b':';
        self.len = len + n + 2 + usize::from(colon);
    }

    /// Writes a scalar, or the opening of a container (pushed on `stack`).
    fn open<'a, J: Json>(&mut self, value: &'a J, stack: &mut Open<'a, J>) {
        match value.kind() {
            Kind::Null => self.bytes(b"null"),
            Kind::Bool(true) => self.bytes(b"true"),
            Kind::Bool(false) => self.bytes(b"false"),
            Kind::Number(number) => self.number(number),
            Kind::String(text) => self.string(text),
            Kind::Array(items) => {
                self.byte(b'[');
                stack.frames.push(Frame::Array(items.iter()));
            }
            Kind::Object(map) => {
                self.byte(b'{');
                let frame = match object_order(map, &mut stack.members, self.trust_order) {
                    Order::InOrder { start, end, .. } => Frame::InOrder {
                        start,
                        next: start,
                        end,
                    },
                    Order::Sorted(entries) => Frame::Sorted(Box::new(entries.into_iter())),
                };
                stack.frames.push(frame);
            }
        }
    }

    /// Writes the remaining members of every open container.
    fn drain<'a, J: Json>(&mut self, stack: &mut Open<'a, J>) {
        // Whether the next member of the innermost container is its first.
        let mut first = true;
        while let Some(frame) = stack.frames.last_mut() {
            let next = match frame {
                Frame::Array(items) => items.next().inspect(|_| {
                    if !first {
                        self.byte(b',');
                    }
                }),
                Frame::InOrder { next, end, .. } => {
                    let member = stack.members.get(*next).filter(|_| *next < *end).copied();
                    member.map(|(key, item)| {
                        *next += 1;
                        if !first {
                            self.byte(b',');
                        }
                        self.escaped(key);
                        self.byte(b':');
                        item
                    })
                }
                Frame::Sorted(entries) => entries.next().map(|entry| {
                    if !first {
                        self.byte(b',');
                    }
                    self.escaped(&entry.key);
                    self.byte(b':');
                    entry.value
                }),
            };
            match next {
                Some(item) => {
                    let depth = stack.frames.len();
                    self.open(item, stack);
                    // A container just opened starts with its first member.
                    first = stack.frames.len() > depth;
                }
                None => {
                    let close = match stack.frames.pop() {
                        Some(Frame::Array(_)) => b']',
                        Some(Frame::InOrder { start, .. }) => {
                            stack.members.truncate(start);
                            b'}'
                        }
                        _ => b'}',
                    };
                    self.byte(close);
                    first = false;
                }
            }
        }
    }

    /// Like `flush`, but hands on whole [`BLOCK`]s only, and keeps at least
    /// the last `keep` bytes buffered so that [`Writer::string`] can still
    /// take back the character it last wrote. Leaves fewer than
    /// `BLOCK + keep` bytes buffered.
    fn flush_keeping(&mut self, keep: usize) {
        let out = self.len.saturating_sub(keep) / BLOCK * BLOCK;
        if out > 0 {
            self.sink.put(&self.buf[..out]);
            self.buf.copy_within(out..self.len, 0);
            self.len -= out;
        }
    }

    /// Writes `text` as a JSON string of its NFC form.
    ///
    /// One pass does both jobs: [`Writer::body`] copies and escapes until the
    /// first character that is neither ASCII nor [`is_inert`], and only from
    /// there is the rest checked (and, rarely, normalised).
    fn string(&mut self, text: &str) {
        if text.len() < CHUNK && !short_needs_look(text.as_bytes(), INERT_BELOW) {
            // Short, and nothing to look at: roles, types, names.
            self.short_quoted(text.as_bytes(), false);
            return;
        }
        self.byte(b'"');
        if let Some(stop) = self.body(text, true) {
            let bytes = text.as_bytes();
            // The character before may compose with this one: take it back.
            // Everything before that is NFC and stays, since a quick-check
            // `Yes` starter never composes with what precedes it.
            let mut start = stop;
            if start > 0 {
                start -= 1;
                while start > 0 && bytes[start] & 0xC0 == 0x80 {
                    start -= 1;
                }
                let written = match bytes[start] {
                    b if b < 0x80 && needs_escape(b) => ESCAPES[usize::from(b)].1,
                    b if b < 0x80 => 1,
                    _ => stop - start,
                };
                self.len = self.len.saturating_sub(written);
            }
            let rest = text.get(start..).unwrap_or_default();
            let normalised = nfc(rest);
            self.body(&normalised, false);
        }
        self.byte(b'"');
    }

    /// Writes `text` as the inside of a JSON string with RFC 8785 escaping:
    /// only `"`, `\` and control characters are escaped.
    ///
    /// With `check`, stops at the first character that is neither ASCII nor
    /// [`is_inert`] (so might not be NFC) and returns its index, everything
    /// before it written. Characters up to U+02FF are inert, so their lead
    /// bytes (below 0xCC) never stop the scan.
    ///
    /// Scans and copies 32 bytes at a time: each chunk is stored whole and
    /// the length advanced only past its clean prefix, so a later store
    /// overwrites whatever followed a byte that needed a look. After such a
    /// byte the next 32 input bytes are stored again where their output
    /// goes, and the chunk's mask, shifted, gives the next stop. The last
    /// partial chunk is scanned as the string's last 32 bytes (the bits of
    /// bytes already written shifted out); a string shorter than that is
    /// checked whole and copied, or written byte by byte when it needs a look.
    fn body(&mut self, text: &str, check: bool) -> Option<usize> {
        // Output that must stay buffered for `string` to take back.
        const KEEP: usize = 8;
        // Bytes from this one up need a look (0xFF never occurs in UTF-8).
        let limit = if check { INERT_BELOW } else { 0xFF };
        let bytes = text.as_bytes();
        // The length lives in a local so the loop keeps it in a register.
        let mut len = self.len;
        let mut at = 0;
        // Store a whole chunk, keep its clean prefix, handle the byte that
        // stopped it, and go on right after that byte.
        while let Some(chunk) = bytes.get(at..).and_then(|rest| rest.first_chunk::<CHUNK>()) {
            if len >= FLUSH_AT {
                self.len = len;
                self.flush_keeping(KEEP);
                len = self.len;
            }
            self.buf[len..len + CHUNK].copy_from_slice(chunk);
            let mut mask = dirty_mask(chunk, limit);
            // Bytes from `at` on that `mask` (shifted along) still covers.
            let mut valid = CHUNK;
            while mask != 0 {
                let clean = mask.trailing_zeros() as usize;
                len += clean;
                at += clean;
                let stop = at;
                if !self.step_past(bytes, &mut at, &mut len) {
                    return Some(at);
                }
                // Store the input after the stop where its output goes, and
                // find its next stop in the same mask, not a new one.
                let used = clean + (at - stop);
                let rest = bytes.get(at..).and_then(|rest| rest.first_chunk::<CHUNK>());
                let (Some(rest), true) = (rest, used < valid) else {
                    valid = 0;
                    break;
                };
                valid -= used;
                mask >>= used;
                if len >= FLUSH_AT {
                    self.len = len;
                    self.flush_keeping(KEEP);
                    len = self.len;
                }
                self.buf[len..len + CHUNK].copy_from_slice(rest);
            }
            len += valid;
            at += valid;
        }
        // Fewer than a chunk left. Room for all of it escaped, and a chunk.
        if len >= FLUSH_AT {
            self.len = len;
            self.flush_keeping(KEEP);
            len = self.len;
        }
        if let Some(last) = bytes.last_chunk::<CHUNK>() {
            // The string's last whole chunk overlaps what is done: scan it
            // once, and drop the bits of bytes already written.
            let last_mask = dirty_mask(last, limit);
            while at < bytes.len() {
                let left = bytes.len() - at;
                let mask = last_mask >> (CHUNK - left);
                // No bit set reads as 32 trailing zeros, more than is left.
                let clean = (mask.trailing_zeros() as usize).min(left);
                copy_short(&mut self.buf[len..len + CHUNK], &bytes[at..at + clean]);
                len += clean;
                at += clean;
                if mask == 0 {
                    break;
                }
                if !self.step_past(bytes, &mut at, &mut len) {
                    return Some(at);
                }
            }
        } else {
            // A short string, often a key: clean as a whole, or byte by byte.
            if !short_needs_look(bytes, limit) {
                copy_short(&mut self.buf[len..len + CHUNK], bytes);
                len += bytes.len();
                at = bytes.len();
            }
            while let Some(&byte) = bytes.get(at) {
                if needs_look(byte, limit) {
                    if !self.step_past(bytes, &mut at, &mut len) {
                        return Some(at);
                    }
                } else {
                    self.buf[len] = byte;
                    len += 1;
                    at += 1;
                }
            }
        }
        self.len = len;
        None
    }

    /// [`Writer::special`] for the byte at `bytes[*at]`, moving both
    /// positions past it; `false` (the length saved) when the character it
    /// starts might not be NFC, `*at` then being its index.
    #[inline(always)]
    fn step_past(&mut self, bytes: &[u8], at: &mut usize, len: &mut usize) -> bool {
        match self.special(bytes, *at, *len) {
            Some((read, wrote)) => {
                *at += read;
                *len += wrote;
                true
            }
            None => {
                self.len = *len;
                false
            }
        }
    }

    /// Writes, at `buf[len..]`, the byte at `bytes[at]` that stopped a scan:
    /// its escape, or the whole [`is_inert`] character it starts. Returns the
    /// bytes read and written, or `None` for a character that might not be NFC.
    /// The caller leaves a chunk of room and more (see `copy_short`).
    #[inline(always)]
    fn special(&mut self, bytes: &[u8], at: usize, len: usize) -> Option<(usize, usize)> {
        let byte = *bytes.get(at)?;
        if byte < 0x80 {
            let (sequence, length) = ESCAPES[usize::from(byte)];
            if length != 2 {
                return Some(self.long_escape(byte, len));
            }
            // A constant length, not the table's: once the branch above
            // is predicted, the next stop's position need not wait for
            // the byte and the table to load.
            self.buf[len..len + 8].copy_from_slice(&sequence);
            return Some((1, 2));
        }
        match decode(bytes, at) {
            Some((c, width)) if is_inert(c) => {
                // Four bytes whatever the width, where there are four: a
                // fixed-size copy, not a call to memcpy. What lies past the
                // character is overwritten by the next store.
                match bytes.get(at..at + 4) {
                    Some(four) => self.buf[len..len + 4].copy_from_slice(four),
                    None => copy_short(&mut self.buf[len..len + CHUNK], &bytes[at..at + width]),
                }
                Some((width, width))
            }
            _ => None,
        }
    }

    /// [`Writer::special`] for a control character without a two-byte
    /// escape: rare, and kept off the path of the common ones. It looks the
    /// escape up again rather than take the caller's length: a length passed
    /// in and handed back would let the compiler turn the caller's branch
    /// back into a select, and the next position would wait on the table.
    #[cold]
    #[inline(never)]
    fn long_escape(&mut self, byte: u8, len: usize) -> (usize, usize) {
        let (sequence, length) = ESCAPES[usize::from(byte & 0x7F)];
        self.buf[len..len + 8].copy_from_slice(&sequence);
        (1, length)
    }

    /// Writes `text` (already NFC) as a JSON string.
    fn escaped(&mut self, text: &str) {
        self.byte(b'"');
        self.body(text, false);
        self.byte(b'"');
    }

    fn number(&mut self, number: &Number) {
        const EXACT: u64 = 1 << 53;
        if let Some(n) = number.as_u64() {
            if n <= EXACT {
                self.integer(false, n);
            } else {
                self.float(n as f64);
            }
        } else if let Some(n) = number.as_i64() {
            if n.unsigned_abs() <= EXACT {
                self.integer(true, n.unsigned_abs());
            } else {
                self.float(n as f64);
            }
        } else {
            match number.as_f64() {
                Some(n) => self.float(n),
                None => self.bytes(b"null"),
            }
        }
    }

    fn integer(&mut self, negative: bool, mut n: u64) {
        let mut digits = [0u8; 21];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if negative {
            at -= 1;
            digits[at] = b'-';
        }
        self.bytes(&digits[at..]);
    }

    /// ECMAScript `Number.prototype.toString` for a double (ECMA-262, Number::toString).
    fn float(&mut self, x: f64) {
        if !x.is_finite() {
            self.bytes(b"null");
            return;
        }
        if x == 0.0 {
            // Both zeros print as "0".
            self.byte(b'0');
            return;
        }
        if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 {
            self.integer(x < 0.0, x.abs() as u64);
            return;
        }
        if x < 0.0 {
            self.byte(b'-');
        }
        let Some((digits, n)) = short_decimal(x.abs()).or_else(|| shortest_digits(x.abs())) else {
            self.bytes(b"null");
            return;
        };
        let s = digits.as_slice();
        let k = s.len() as i32;
        if k <= n && n <= 21 {
            self.bytes(s);
            for _ in 0..n - k {
                self.byte(b'0');
            }
        } else if 0 < n && n <= 21 {
            self.bytes(&s[..n as usize]);
            self.byte(b'.');
            self.bytes(&s[n as usize..]);
        } else if -6 < n && n <= 0 {
            self.bytes(b"0.");
            for _ in 0..-n {
                self.byte(b'0');
            }
            self.bytes(s);
        } else {
            self.byte(s[0]);
            if k > 1 {
                self.byte(b'.');
                self.bytes(&s[1..]);
            }
            self.byte(b'e');
            let e = n - 1;
            self.byte(if e < 0 { b'-' } else { b'+' });
            self.integer(false, u64::from(e.unsigned_abs()));
        }
    }
}

/// The order to write an object's members in.
enum Order<'a, J> {
    /// The members, keys NFC, in canonical order are `members[start..end]`;
    /// `plain` when every key [`is_plain`].
    InOrder {
        start: usize,
        end: usize,
        plain: bool,
    },
    /// Keys NFC-normalised and sorted.
    Sorted(Vec<Entry<'a, &'a J>>),
}

/// The canonical order of `object`'s members (`docs/spec/identity.md`:
/// keys by the UTF-16 code units of their NFC form), in one of three ways.
///
/// - The object's own order, when that already is canonical: the members
///   are appended to `members`. An object [`Object::in_byte_order`] (a
///   [`Map`]) is, between ASCII keys, taken at its word when `trust` is on.
/// - Keys all ASCII but out of order (a [`crate::json::Node`]'s members are
///   in document order: `{"role":…,"content":…}`): the members appended to
///   `members` and that range sorted in place by key bytes. ASCII is its own
///   NFC, and for it byte order is UTF-16 order; the keys are distinct, so
///   an unstable sort orders them one way only. No allocation.
/// - Otherwise, [`Entry`]s: NFC keys in UTF-16 order, two keys equal only
///   after NFC ordered by their original form.
fn object_order<'a, O: Object>(
    object: &'a O,
    members: &mut Vec<(&'a str, &'a O::Value)>,
    trust: bool,
) -> Order<'a, O::Value> {
    let start = members.len();
    let sorted = trust && object.in_byte_order();
    // The previous key, and whether it is ASCII.
    let mut previous: Option<(&str, bool)> = None;
    let mut canonical = true;
    let mut all_ascii = true;
    let mut plain = true;
    for (key, value) in object.members() {
        let key_plain = is_plain(key);
        // ASCII keys (nearly all) are NFC without a look.
        let ascii = key_plain || key.is_ascii();
        all_ascii &= ascii;
        if canonical {
            // Between two ASCII keys of a sorted map, map order is canonical.
            canonical = (ascii || matches!(nfc(key), Cow::Borrowed(_)))
                && previous.is_none_or(|(p, p_ascii)| {
                    (sorted && ascii && p_ascii) || cmp_utf16(p, key) == Ordering::Less
                });
            previous = Some((key, ascii));
        }
        if !canonical && !all_ascii {
            return sorted_entries(object, members, start);
        }
        plain &= key_plain;
        members.push((key, value));
    }
    if !canonical {
        members[start..].sort_unstable_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
    }
    Order::InOrder {
        start,
        end: members.len(),
        plain,
    }
}

/// [`object_order`]'s last way: `members` back to `start`, and `object`'s
/// members as [`Entry`]s in canonical order.
#[cold]
fn sorted_entries<'a, O: Object>(
    object: &'a O,
    members: &mut Vec<(&'a str, &'a O::Value)>,
    start: usize,
) -> Order<'a, O::Value> {
    members.truncate(start);
    let mut entries: Vec<Entry<'a, &'a O::Value>> = object
        .members()
        .map(|(key, value)| Entry {
            key: nfc(key),
            raw: key,
            value,
        })
        .collect();
    entries.sort_by(Entry::cmp);
    Order::Sorted(entries)
}

/// Whether [`Map`] iterates in key order (serde_json's default `BTreeMap`)
/// rather than insertion order (its `preserve_order` feature, which any
/// crate in the build can turn on). Asked once, of a map built to tell.
pub(crate) fn maps_iterate_sorted() -> bool {
    static SORTED: OnceLock<bool> = OnceLock::new();
    *SORTED.get_or_init(|| {
        let mut probe = Map::new();
        probe.insert("b".to_owned(), Value::Null);
        probe.insert("a".to_owned(), Value::Null);
        probe.keys().next().is_some_and(|first| first == "a")
    })
}

/// A key written as it is, without a look: shorter than a chunk, and
/// printable ASCII other than `"` and `\`.
#[inline]
fn is_plain(key: &str) -> bool {
    key.len() < CHUNK - 2 && !short_needs_look(key.as_bytes(), 0x80)
}

/// The significant decimal digits (shortest that round-trip) of a positive
/// finite `x`, and `n` such that `x = 0.d1d2… × 10^n`.
fn shortest_digits(x: f64) -> Option<(Digits, i32)> {
    use std::fmt::Write as _;
    // Rust's `{:e}` prints the shortest round-tripping digits, as ECMAScript
    // does, but breaks an exact tie between two shortest candidates upwards
    // where ECMAScript (and RFC 8785) take the even one.
    let mut text = Digits::default();
    write!(text, "{x:e}").ok()?;
    let (mut digits, exponent) = split_exponential(text.as_slice())?;
    let k = digits.len;
    // A tie needs both k-digit neighbours within half an ulp of x, so
    // k >= 16 (15 for margin); and the exact value to be the k digits
    // followed by a 5, so the correctly rounded k+1 digits end in 5. Only
    // then look closer.
    let mut longer = Digits::default();
    if k >= 15 {
        write!(longer, "{x:.k$e}").ok()?;
        longer = split_exponential(longer.as_slice())?.0;
    }
    let mut n = exponent + 1;
    if k >= 15
        && longer.as_slice().last() == Some(&b'5')
        && let Some((even, even_n)) = even_tie_break(x, k)
    {
        digits = even;
        n = even_n;
    }
    while digits.len > 1 && digits.as_slice().last() == Some(&b'0') {
        digits.len -= 1;
    }
    Some((digits, n))
}

/// The common case without formatting machinery: a positive `x` below 1e9
/// that is exactly the double nearest to some `y / 10^d` with `d <= 6`
/// (0.3, 12.75, 0.000125). The smallest such `d` gives the fewest digits,
/// and there is only one such `y`: below 1e9 an ulp is under 1e-6, finer
/// than the decimals being tried, so two of them cannot round to one double.
fn short_decimal(x: f64) -> Option<(Digits, i32)> {
    const POWERS: [f64; 7] = [1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6];
    if !(1e-6..1e9).contains(&x) {
        return None;
    }
    for (d, &power) in POWERS.iter().enumerate() {
        let y = (x * power).round();
        // Both operands exact, so the quotient is the correctly rounded y/10^d.
        if y / power == x {
            let mut integer = [0u8; 20];
            let mut at = integer.len();
            let mut rest = y as u64;
            while rest > 0 {
                at -= 1;
                integer[at] = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
            let mut digits = Digits::default();
            for &b in &integer[at..] {
                digits.push(b).ok()?;
            }
            let n = digits.len as i32 - d as i32;
            while digits.len > 1 && digits.as_slice().last() == Some(&b'0') {
                digits.len -= 1;
            }
            return Some((digits, n));
        }
    }
    None
}

/// Splits Rust's `d.ddde±x` into its digits and the exponent.
fn split_exponential(rendered: &[u8]) -> Option<(Digits, i32)> {
    let e_at = rendered.iter().position(|&b| b == b'e')?;
    let exponent: i32 = std::str::from_utf8(&rendered[e_at + 1..])
        .ok()?
        .parse()
        .ok()?;
    let mut digits = Digits::default();
    for &b in &rendered[..e_at] {
        if b.is_ascii_digit() {
            digits.push(b).ok()?;
        }
    }
    Some((digits, exponent))
}

/// When `x` lies exactly halfway between two `k`-digit decimals that both
/// read back as `x`, the even one and its `n` (ECMA-262 Number::toString,
/// step 5).
#[cold]
fn even_tie_break(x: f64, k: usize) -> Option<(Digits, i32)> {
    // 767 significant digits hold any double exactly.
    let exact = format!("{x:.800e}");
    let (mantissa, exponent) = exact.split_once('e')?;
    let all: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let (head, rest) = all.split_at_checked(k)?;
    if rest.first() != Some(&b'5') || rest[1..].iter().any(|&d| d != b'0') {
        return None;
    }
    let mut candidate = Digits::default();
    for &d in head {
        candidate.push(d).ok()?;
    }
    if head.last().is_some_and(|d| (d - b'0') % 2 == 1) {
        // Round the truncation up to the even neighbour, carrying.
        let mut i = candidate.len;
        loop {
            if i == 0 {
                // All nines: 99…9 + 1 = 100…0, one digit longer.
                candidate.buf.copy_within(0..candidate.len, 1);
                candidate.buf[0] = b'1';
                candidate.len += 1;
                break;
            }
            i -= 1;
            if candidate.buf[i] == b'9' {
                candidate.buf[i] = b'0';
            } else {
                candidate.buf[i] += 1;
                break;
            }
        }
    }
    // Both neighbours are equally close; keep ours only if it reads back.
    // A carry (…9 + 1) makes the candidate one digit longer: 10^n.
    let n = exponent.parse::<i32>().ok()? + 1 + i32::from(candidate.len > k);
    let text = format!("0.{}e{n}", std::str::from_utf8(candidate.as_slice()).ok()?);
    (text.parse::<f64>().ok()? == x).then_some((candidate, n))
}

/// A small stack buffer for number text.
#[derive(Default, Clone, Copy)]
struct Digits {
    buf: [u8; 32],
    len: usize,
}

impl Digits {
    fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn push(&mut self, byte: u8) -> Result<(), fmt::Error> {
        let slot = self.buf.get_mut(self.len).ok_or(fmt::Error)?;
        *slot = byte;
        self.len += 1;
        Ok(())
    }
}

impl fmt::Write for Digits {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        s.bytes().try_for_each(|b| self.push(b))
    }
}

/// `text` in NFC, borrowed when it already is (no allocation on the common path).
pub(crate) fn nfc(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut at = 0;
    // Skip ASCII eight bytes at a time, and common non-ASCII characters
    // that cannot take part in normalisation one at a time.
    while let Some(next) = next_non_ascii(bytes, at) {
        let Some((c, width)) = decode(bytes, next) else {
            return nfc_from(text, 0);
        };
        if !is_inert(c) {
            return nfc_from(text, next);
        }
        at = next + width;
    }
    Cow::Borrowed(text)
}

/// The code point starting at `bytes[at]` of valid UTF-8, and its width.
#[inline]
fn decode(bytes: &[u8], at: usize) -> Option<(u32, usize)> {
    let lead = u32::from(*bytes.get(at)?);
    let cont = |i: usize| bytes.get(at + i).map(|&b| u32::from(b) & 0x3f);
    if lead < 0x80 {
        Some((lead, 1))
    } else if lead < 0xE0 {
        Some((((lead & 0x1f) << 6) | cont(1)?, 2))
    } else if lead < 0xF0 {
        Some((((lead & 0x0f) << 12) | (cont(1)? << 6) | cont(2)?, 3))
    } else {
        Some((
            ((lead & 0x07) << 18) | (cont(1)? << 12) | (cont(2)? << 6) | cont(3)?,
            4,
        ))
    }
}

/// The quick check over `text[from..]`, everything before being ASCII or
/// [`is_inert`]; then, only if needed, the full normalisation.
fn nfc_from(text: &str, from: usize) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut at = from;
    // ASCII characters reset the quick check's state, so each non-ASCII run
    // can be checked on its own and the verdicts combined.
    let mut maybe = false;
    while let Some(start) = next_non_ascii(bytes, at) {
        let end = next_ascii(bytes, start);
        let Some(run) = text.get(start..end) else {
            maybe = true;
            break;
        };
        match is_nfc_quick(run.chars()) {
            IsNormalized::Yes => {}
            IsNormalized::Maybe => maybe = true,
            IsNormalized::No => return Cow::Owned(text.nfc().collect()),
        }
        at = end;
    }
    if maybe {
        // One normalisation, kept if it differs (comparing first and
        // normalising again would do the work twice for every key written
        // decomposed).
        let normal: String = text.nfc().collect();
        if normal != text {
            return Cow::Owned(normal);
        }
    }
    Cow::Borrowed(text)
}

/// Characters with NFC quick check `Yes` and combining class 0: like ASCII,
/// they are normalised and leave the quick check's state as they found it,
/// so a string of them and ASCII is NFC. A unit test checks every one.
#[inline]
fn is_inert(c: u32) -> bool {
    match INERT_BMP.get((c >> 6) as usize) {
        Some(bits) => bits >> (c & 63) & 1 != 0,
        None => INERT_ASTRAL.contains(&c),
    }
}

/// The inert characters of the Basic Multilingual Plane (see [`is_inert`]).
const INERT_RANGES: [(u32, u32); 17] = [
    (0x0080, 0x02FF), // C1, Latin-1, Latin Extended-A/B, IPA, modifier letters
    (0x0388, 0x03FF), // Greek (after the singletons U+0374, U+037E, U+0387)
    (0x0400, 0x0482), // Cyrillic
    (0x048A, 0x052F),
    (0x2010, 0x2027), // dashes, quotes, ellipsis
    (0x2030, 0x205E),
    (0x20A0, 0x20C0), // currency
    (0x2190, 0x2328), // arrows, mathematical operators, technical
    (0x232B, 0x23FF),
    (0x2500, 0x2ADB), // box drawing, shapes, symbols, dingbats
    (0x2ADD, 0x2BFF),
    (0x3000, 0x3029), // CJK punctuation
    (0x3041, 0x3096), // Hiragana
    (0x30A1, 0x30FF), // Katakana
    (0x4E00, 0x9FFF), // CJK unified ideographs
    (0xAC00, 0xD7A3), // Hangul syllables
    (0xFF01, 0xFFEF), // fullwidth and halfwidth forms
];

/// The inert characters beyond the BMP: emoji and pictographs.
const INERT_ASTRAL: std::ops::RangeInclusive<u32> = 0x1F000..=0x1FAFF;

/// [`INERT_RANGES`] as one bit per code point, 64 to a word: one load
/// answers for any BMP character.
static INERT_BMP: [u64; 0x10000 / 64] = {
    let mut bits = [0u64; 0x10000 / 64];
    let mut range = 0;
    while range < INERT_RANGES.len() {
        let (first, last) = INERT_RANGES[range];
        let mut c = first;
        while c <= last {
            bits[(c >> 6) as usize] |= 1 << (c & 63);
            c += 1;
        }
        range += 1;
    }
    bits
};

const HIGHS: u64 = 0x8080_8080_8080_8080;

#[inline]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut chunk = [0u8; 8];
    chunk.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(chunk)
}

/// Index of the first byte at or after `at` that is `>= 0x80`.
#[inline]
fn next_non_ascii(bytes: &[u8], mut at: usize) -> Option<usize> {
    while at + 8 <= bytes.len() {
        let high = word(bytes, at) & HIGHS;
        if high != 0 {
            return Some(at + (high.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    bytes[at..]
        .iter()
        .position(|&b| b >= 0x80)
        .map(|offset| at + offset)
}

/// Index of the first ASCII byte at or after `at`, or `bytes.len()`.
/// Always a character boundary.
#[inline]
fn next_ascii(bytes: &[u8], at: usize) -> usize {
    bytes[at..]
        .iter()
        .position(|&b| b < 0x80)
        .map_or(bytes.len(), |offset| at + offset)
}

/// Bytes scanned per step on the fast path.
pub(crate) const CHUNK: usize = 32;

/// Lead bytes below this start characters up to U+02FF, all [`is_inert`]:
/// a scan that checks NFC stops only at this byte and above.
const INERT_BELOW: u8 = 0xCC;

/// Bit `i` set when `chunk[i]` needs escaping or is `>= limit`.
///
/// On x86-64: four SSE2 compares and one `pmovmskb` per 16 bytes, through
/// `safe_arch`'s safe wrappers (this crate forbids `unsafe`). Elsewhere,
/// [`dirty_mask_portable`].
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(crate) fn dirty_mask(chunk: &[u8; CHUNK], limit: u8) -> u32 {
    dirty_mask_portable(chunk, limit)
}

/// Bit `i` set when `chunk[i]` needs escaping or is `>= limit`: see above.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(crate) fn dirty_mask(chunk: &[u8; CHUNK], limit: u8) -> u32 {
    use safe_arch::{
        add_i8_m128i, bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, min_u8_m128i,
        move_mask_i8_m128i, set_splat_i8_m128i,
    };
    // Adding `0x100 - limit` turns the bytes from `limit` up into
    // 0..=0xFF - limit and the controls into the range right above, so
    // both are one unsigned "at most" (a `min` equality). Exact while
    // `limit` is above 0x20, so the two ranges do not overlap.
    debug_assert!(limit > 0x20);
    let shift = set_splat_i8_m128i(limit.wrapping_neg() as i8);
    let ceiling = set_splat_i8_m128i(0x1Fu8.wrapping_sub(limit) as i8);
    let quote = set_splat_i8_m128i(b'"' as i8);
    let backslash = set_splat_i8_m128i(b'\\' as i8);
    let (halves, _) = chunk.as_chunks::<16>();
    halves.iter().enumerate().fold(0, |mask, (k, half)| {
        let v = load_unaligned_m128i(half);
        let moved = add_i8_m128i(v, shift);
        let flags = bitor_m128i(
            cmp_eq_mask_i8_m128i(min_u8_m128i(moved, ceiling), moved),
            bitor_m128i(
                cmp_eq_mask_i8_m128i(v, quote),
                cmp_eq_mask_i8_m128i(v, backslash),
            ),
        );
        // The sign bit of each byte, 16 of them: the cast keeps the bits.
        mask | ((move_mask_i8_m128i(flags) as u32 & 0xFFFF) << (16 * k))
    })
}

/// [`dirty_mask`] without SSE2 (and its oracle in the tests).
///
/// The flags are computed without branches (a few SIMD compares), then
/// gathered eight at a time by a multiply: byte `i` of `w` (0 or 1) lands
/// on bit `56 + i` of `w * 0x0102040810204080`, and no two partial
/// products collide, so nothing carries into the top byte.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
#[inline]
fn dirty_mask_portable(chunk: &[u8; CHUNK], limit: u8) -> u32 {
    let mut flags = [0u8; CHUNK];
    for (flag, &b) in flags.iter_mut().zip(chunk) {
        *flag = u8::from(needs_look(b, limit));
    }
    let mut mask = 0u32;
    for (k, group) in flags.chunks_exact(8).enumerate() {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(group);
        let w = u64::from_le_bytes(eight);
        mask |= ((w.wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32) << (8 * k);
    }
    mask
}

/// Whether a byte of `bytes` (shorter than a chunk) needs a look (see
/// [`needs_look`]): eight bytes at a time, in overlapping little-endian
/// words read straight from `bytes` (never from a copy, which would stall
/// on store forwarding).
#[inline(always)]
fn short_needs_look(bytes: &[u8], limit: u8) -> bool {
    let n = bytes.len();
    // A word that cannot be read reads as zeros, which need a look: the
    // byte-by-byte path then decides.
    let word = |at: usize| {
        bytes
            .get(at..)
            .and_then(|rest| rest.first_chunk::<8>())
            .map_or(0, |eight| u64::from_le_bytes(*eight))
    };
    let half = |at: usize| {
        bytes
            .get(at..)
            .and_then(|rest| rest.first_chunk::<4>())
            .map_or(0, |four| u64::from(u32::from_le_bytes(*four)))
    };
    let look = |w: u64| word_needs_look(w, limit);
    match n {
        16.. => look(word(0)) | look(word(8)) | look(word(n - 16)) | look(word(n - 8)),
        8.. => look(word(0)) | look(word(n - 8)),
        4.. => look(half(0) | (half(n - 4) << 32)),
        1.. => {
            // Every byte of the word is one of the (up to three) bytes.
            let pick = |at: usize| u64::from(bytes.get(at).copied().unwrap_or(0));
            let three = pick(0) | (pick(n / 2) << 8) | (pick(n - 1) << 16);
            look(three | (three << 24) | (pick(0) << 48) | (pick(0) << 56))
        }
        0 => false,
    }
}

/// Whether a byte of `w` needs escaping or is `>= limit` (at least 0x80).
/// Exact, whatever the neighbouring bytes (the tests try every byte value
/// at every position).
#[inline]
fn word_needs_look(w: u64, limit: u8) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // `"` (0x22) becomes 0x20 and controls stay below it: one "below
    // 0x21" test. A borrow only ever starts at a byte that is below.
    let y = w ^ (ONES * 0x02);
    let below = y.wrapping_sub(ONES * 0x21) & !y;
    let z = w ^ (ONES * u64::from(b'\\'));
    let backslash = z.wrapping_sub(ONES) & !z;
    // Bytes with the top bit set whose low seven bits reach `limit`'s.
    let high = ((w & !HIGHS) + ONES * u64::from(0x80 - (limit & 0x7F))) & w;
    (below | backslash | high) & HIGHS != 0
}

/// Copies `src` (shorter than a chunk) to the start of `dst` (a chunk long)
/// as two overlapping fixed-size copies, never a call to memcpy.
#[inline]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n >= 16 {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..n].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..n].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..n].copy_from_slice(&src[n - 4..]);
    } else if n > 0 {
        // Up to three bytes: the first, the middle and the last.
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

#[inline]
pub(crate) fn needs_escape(byte: u8) -> bool {
    (byte < 0x20) | (byte == b'"') | (byte == b'\\')
}

/// Whether a scan stops at `byte`: it needs escaping, or is `>= limit` (see
/// [`Writer::body`]). Without short-circuits, so loops over it vectorise.
#[inline]
fn needs_look(byte: u8, limit: u8) -> bool {
    needs_escape(byte) | (byte >= limit)
}

/// The escape sequence (padded to eight bytes) and its length, by byte;
/// only the entries for `"`, `\` and controls are ever used.
static ESCAPES: [([u8; 8], usize); 128] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut table = [([0u8; 8], 0usize); 128];
    let mut byte = 0;
    while byte < 128 {
        table[byte] = match byte as u8 {
            b'"' => (*b"\\\"      ", 2),
            b'\\' => (*b"\\\\      ", 2),
            0x08 => (*b"\\b      ", 2),
            0x0c => (*b"\\f      ", 2),
            b'\n' => (*b"\\n      ", 2),
            b'\r' => (*b"\\r      ", 2),
            b'\t' => (*b"\\t      ", 2),
            b => (
                [
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(b >> 4) as usize],
                    HEX[(b & 0xf) as usize],
                    b' ',
                    b' ',
                ],
                6,
            ),
        };
        byte += 1;
    }
    table
};

/// Compares two strings by their UTF-16 code units, as RFC 8785 sorts keys.
pub(crate) fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let Some(common) = x.iter().zip(y).position(|(p, q)| p != q) else {
        return x.len().cmp(&y.len());
    };
    // UTF-8 byte order is code point order, which UTF-16 keeps except
    // between U+E000..U+FFFF (lead 0xEE, 0xEF) and astral (0xF0..).
    if x[common] < 0xEE || y[common] < 0xEE {
        return x[common].cmp(&y[common]);
    }
    // The byte prefixes agree, so a boundary in `a` is one in `b` too.
    let mut start = common;
    while !a.is_char_boundary(start) {
        start -= 1;
    }
    match (a[start..].chars().next(), b[start..].chars().next()) {
        (Some(p), Some(q)) => utf16_weight(p).cmp(&utf16_weight(q)),
        _ => x[common].cmp(&y[common]),
    }
}

/// A key that orders characters as their first UTF-16 units do: astral
/// characters (surrogate pairs, 0xD800..) sort between U+D7FF and U+E000.
fn utf16_weight(c: char) -> u32 {
    let c = u32::from(c);
    if c < 0xE000 {
        c
    } else if c <= 0xFFFF {
        c + 0x10_0000
    } else {
        c - 0x1_0000 + 0xD800
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(text: &str) -> String {
        let value: Value = serde_json::from_str(text).expect("test JSON");
        String::from_utf8(canonical_bytes(&value)).expect("canonical JSON is UTF-8")
    }

    /// Canonical bytes of `value` written with the given map flavour and
    /// recursion limit.
    fn canonical_with(value: &Value, sorted_maps: bool, recursion: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut writer = Writer::new(&mut out);
        writer.trust_order = sorted_maps;
        writer.recursion = recursion;
        writer.value(value);
        writer.flush();
        out
    }

    #[test]
    fn every_default_ignorable_begins_with_an_ignorable_lead() {
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let mut utf8 = [0u8; 4];
            let lead = c.encode_utf8(&mut utf8).as_bytes()[0];
            if normal::is_default_ignorable(c) {
                assert!(
                    normal::IGNORABLE_LEADS[usize::from(lead)],
                    "U+{:04X}",
                    u32::from(c)
                );
            }
        }
        // No continuation or ASCII byte is a lead: the scan decodes only
        // at a character's first byte.
        assert!((0..0xC2).all(|b| !normal::IGNORABLE_LEADS[b]));
    }

    #[test]
    fn recursion_and_explicit_stack_write_alike() {
        let long = "k".repeat(40);
        let docs = [
            json!({"b": [1, {"z": null, "a": true}], "a": {}, "c": []}),
            json!([{"é": 1, "e\u{301}x": 2, "\u{E000}": 3, "\u{1F600}": 4, "z": 5}]),
            json!({"a\"b": 1, "\n": [2, 3], "plain": {"x": "y\u{301}"}, long.clone(): 6}),
            json!([[[[{"d": [[{"c": {"b": {"a": "deep"}}}]]}]]], [], {}]),
            json!({"role": "user", "content": {"type": "text", "text": "hi \"there\"\n"}}),
        ];
        for doc in &docs {
            let expected = canonical_with(doc, false, 0);
            for sorted_maps in [false, true] {
                for recursion in [0, 1, 2, 3, RECURSION] {
                    assert_eq!(
                        canonical_with(doc, sorted_maps, recursion),
                        expected,
                        "{doc} sorted={sorted_maps} recursion={recursion}"
                    );
                }
            }
        }
        assert!(maps_iterate_sorted(), "serde_json without preserve_order");
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(
            canon("[1.0, 1e0, -0.0, 0.0, 1e21, 1e20, 1e-7, 1e-6, 123.456]"),
            "[1,1,0,0,1e+21,100000000000000000000,1e-7,0.000001,123.456]"
        );
        assert_eq!(
            canon("[9007199254740993, -9007199254740993, 18446744073709551615]"),
            "[9007199254740992,-9007199254740992,18446744073709552000]"
        );
        assert_eq!(
            canon("[5e-324, 1.7976931348623157e308, 4.5, 2e-7, 1.5e300]"),
            "[5e-324,1.7976931348623157e+308,4.5,2e-7,1.5e+300]"
        );
    }

    #[test]
    fn utf16_order_puts_astral_before_private_use() {
        assert_eq!(cmp_utf16("\u{1F600}", "\u{E000}"), Ordering::Less);
        assert_eq!(cmp_utf16("\u{D7FF}", "\u{1F600}"), Ordering::Less);
        assert_eq!(cmp_utf16("ab", "abc"), Ordering::Less);
        assert_eq!(cmp_utf16("é", "ê"), Ordering::Less);
    }

    #[test]
    fn special_bytes_escaped_at_every_offset() {
        for (special, escape) in [
            ("\"", "\\\""),
            ("\\", "\\\\"),
            ("\u{0}", "\\u0000"),
            ("\u{1f}", "\\u001f"),
            ("\n", "\\n"),
        ] {
            for at in 0..20 {
                let text = format!("{}{special}{}", "a".repeat(at), "\u{ff}".repeat(3));
                let expected = format!("\"{}{escape}{}\"", "a".repeat(at), "\u{ff}".repeat(3));
                let out = canonical_bytes(&Value::String(text));
                assert_eq!(String::from_utf8(out).expect("UTF-8"), expected, "{at}");
            }
        }
    }

    #[test]
    fn composing_after_any_prefix_and_across_flushes() {
        for prefix in ["a", "\\", "\u{1}", "\u{e9}", "\u{4e00}"] {
            // Past several flushes, at every offset within one.
            for repeat in (0..40).chain(200..330).chain(1000..1030) {
                let head = prefix.repeat(repeat);
                for tail in [
                    "e\u{301}x",
                    "\u{301}",
                    "\u{5d3}\u{5bc}",
                    "\u{fb33}",
                    "\u{1100}\u{1161}",
                ] {
                    let text = format!("{head}{tail}");
                    let expected = canonical_bytes_naive(&text);
                    assert_eq!(
                        canonical_bytes(&Value::String(text)),
                        expected,
                        "{prefix:?}×{repeat} {tail:?}"
                    );
                }
            }
        }
    }

    /// NFC, then JCS string escaping, the slow and obvious way.
    fn canonical_bytes_naive(text: &str) -> Vec<u8> {
        let mut out = String::from("\"");
        for c in text.nfc() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
        out.into_bytes()
    }

    #[test]
    fn simd_mask_agrees_with_portable_mask() {
        for limit in [0xCC, 0xFF] {
            for byte in 0..=255u8 {
                for at in 0..CHUNK {
                    let mut chunk = [b'a'; CHUNK];
                    chunk[at] = byte;
                    chunk[(at + 7) % CHUNK] = byte.wrapping_mul(37);
                    assert_eq!(
                        dirty_mask(&chunk, limit),
                        dirty_mask_portable(&chunk, limit),
                        "byte {byte:#x} at {at}, limit {limit:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_length_and_offset_through_chunk_and_tail() {
        for special in [
            "\n",
            "\"",
            "\u{1}",
            "\u{2019}",
            "\u{3b1}",
            "e\u{301}",
            "\u{301}",
            "\u{1F642}",
        ] {
            for len in 0..80 {
                for at in 0..=len {
                    let text = format!("{}{special}{}", "a".repeat(at), "b".repeat(len - at));
                    assert_eq!(
                        canonical_bytes(&Value::String(text.clone())),
                        canonical_bytes_naive(&text),
                        "{text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn short_check_agrees_with_bytewise_check() {
        for limit in [0xCC, 0xFF] {
            for n in 0..CHUNK {
                for at in 0..n.max(1) {
                    for byte in 0..=255u8 {
                        for filler in [b'a', 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80, 0xCB, 0xFE] {
                            let mut text = vec![filler; n];
                            if n > 0 {
                                text[at] = byte;
                            }
                            let expected = text.iter().any(|&b| needs_look(b, limit));
                            assert_eq!(
                                short_needs_look(&text, limit),
                                expected,
                                "{text:x?}, limit {limit:#x}"
                            );
                            let mut out = [0u8; CHUNK];
                            copy_short(&mut out, &text);
                            assert_eq!(&out[..n], &text[..]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn two_stops_at_every_pair_of_offsets() {
        // Stops after the first in a chunk come from the same mask, the
        // input after each stop stored again one escape further right.
        let stops = ["\n", "\u{1}", "\u{2019}", "\u{3b1}", "\u{1F642}", "\u{301}"];
        for first in stops {
            for second in stops {
                for len in [33, 64, 70] {
                    for i in 0..len {
                        for j in i..len {
                            let text = format!(
                                "{}{first}{}{second}{}",
                                "a".repeat(i),
                                "b".repeat(j - i),
                                "c".repeat(len - j)
                            );
                            assert_eq!(
                                canonical_bytes(&Value::String(text.clone())),
                                canonical_bytes_naive(&text),
                                "{text:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn inert_characters_are_nfc_starters() {
        use unicode_normalization::char::canonical_combining_class;
        for c in (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|&c| is_inert(u32::from(c)))
        {
            assert_eq!(
                is_nfc_quick(std::iter::once(c)),
                IsNormalized::Yes,
                "{:04X}",
                u32::from(c)
            );
            assert_eq!(canonical_combining_class(c), 0, "{:04X}", u32::from(c));
        }
    }

    #[test]
    fn nfc_borrows_when_already_normal() {
        assert!(matches!(nfc("café 🚀 漢字 한국"), Cow::Borrowed(_)));
        assert!(matches!(nfc("cafe\u{301}"), Cow::Owned(ref s) if s == "café"));
        assert!(
            matches!(nfc("é\u{301}"), Cow::Borrowed(_)),
            "nothing composes"
        );
        assert!(matches!(nfc("\u{212B}"), Cow::Owned(ref s) if s == "\u{C5}"));
        // An inert starter followed by a combining mark that composes with it.
        assert!(matches!(nfc("x\u{e0}\u{323}"), Cow::Owned(ref s) if s == "x\u{1EA1}\u{300}"));
        assert!(matches!(nfc("\u{AC00}\u{11A8}"), Cow::Owned(ref s) if s == "\u{AC01}"));
    }
}
