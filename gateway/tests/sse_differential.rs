//! The gateway's SSE parser (`gateway/src/sse.rs`) against two readers it
//! did not write (`docs/threat-model.md`, the parser differential):
//!
//! - a reference written here from the WHATWG HTML standard's "event
//!   stream interpretation" over the whole decoded stream, under arbitrary
//!   chunk splits (proptest: the same items whichever way the bytes are
//!   split);
//! - `eventsource-parser`, the parser the TypeScript SDK's
//!   `StreamableHTTPClientTransport` reads SSE with (behind a streaming
//!   `TextDecoder`, as the SDK does), run with node on the same bytes split
//!   the same way (`tests/sse/eventsource_parser.mjs`). Both must read the
//!   same events, and the gateway's canonical re-emission must read back as
//!   the same events in both.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use mcpolicy_gateway::sse::{self, Event, Item, Parser};
use proptest::prelude::*;
use serde_json::{Value, json};

/// The WHATWG algorithm over the whole stream, written plainly: decode
/// (replacing bad bytes), drop one leading U+FEFF, split into lines at
/// CRLF, LF or CR (an unterminated last line is never processed), and
/// process each line.
fn reference(bytes: &[u8]) -> Vec<Item> {
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(&text);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                lines.push(std::mem::take(&mut line));
            }
            '\n' => lines.push(std::mem::take(&mut line)),
            c => line.push(c),
        }
    }
    let mut out = Vec::new();
    let (mut data, mut event, mut id): (Option<String>, Option<String>, Option<String>) =
        (None, None, None);
    for line in lines {
        if line.is_empty() {
            let event = event.take().filter(|e| !e.is_empty());
            let (id, data) = (id.take(), data.take());
            if id.is_some() || data.is_some() {
                out.push(Item::Event(Event { id, event, data }));
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.find(':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line.as_str(), ""),
        };
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => {
                data = Some(match data.take() {
                    Some(before) => format!("{before}\n{value}"),
                    None => value.to_owned(),
                });
            }
            "id" if !value.contains('\0') => id = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                out.push(Item::Retry(value.to_owned()));
            }
            _ => {}
        }
    }
    out
}

fn parse_split(bytes: &[u8], splits: &[usize]) -> Vec<Item> {
    let mut parser = Parser::new(usize::MAX);
    let mut out = Vec::new();
    let mut at = 0;
    for &end in splits.iter().chain(std::iter::once(&bytes.len())) {
        let end = end.clamp(at, bytes.len());
        parser.feed(&bytes[at..end], &mut out);
        at = end;
    }
    out
}

/// The pieces streams are made of: field names and values that exercise
/// every rule (CR, LF, NUL, BOM, U+2028, bytes that are not UTF-8, a
/// multi-byte character to split).
const PIECES: &[&[u8]] = &[
    b"data",
    b"data:",
    b"data: ",
    b"id:",
    b"id: ",
    b"event:",
    b"event: ",
    b"retry:",
    b"retry: ",
    b":",
    b": comment",
    b"dat",
    b"Data:",
    b" data:",
    b"x",
    b"{\"a\":1}",
    b"1",
    b"42",
    b" ",
    b"\0",
    b"\xEF\xBB\xBF",
    b"\xE2\x80\xA8",
    b"\xC3\xA9",
    b"\xFF",
    b"\xC3",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"\r\r",
    b"1.0",
];

fn stream() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    (
        any::<bool>(),
        prop::collection::vec(prop::sample::select(PIECES), 0..40),
        prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    )
        .prop_map(|(bom, pieces, splits)| {
            let mut bytes = if bom {
                b"\xEF\xBB\xBF".to_vec()
            } else {
                Vec::new()
            };
            for piece in pieces {
                bytes.extend_from_slice(piece);
            }
            let mut splits: Vec<usize> = splits.iter().map(|i| i.index(bytes.len() + 1)).collect();
            splits.sort_unstable();
            (bytes, splits)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The same items whichever way the bytes are split, and the items the
    /// WHATWG reference reads.
    #[test]
    fn any_split_reads_what_the_whatwg_reference_reads((bytes, splits) in stream()) {
        let whole = parse_split(&bytes, &[]);
        prop_assert_eq!(&parse_split(&bytes, &splits), &whole);
        prop_assert_eq!(&whole, &reference(&bytes));
    }
}

/// The gateway's canonical form of what it read (data as the session would
/// emit it: one line).
fn canonical(items: &[Item]) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        match item {
            Item::Event(event) => sse::write_event(
                &mut out,
                event.id.as_deref(),
                event.event.as_deref(),
                event.data.as_deref().map(str::as_bytes),
            ),
            Item::Retry(retry) => sse::write_retry(&mut out, retry),
            Item::Overlong { .. } => unreachable!("unbounded parser"),
        }
    }
    out
}

/// What `eventsource-parser` reports of `items`: events with data (it
/// dispatches nothing else), and retries as numbers.
fn as_dispatched(items: &[Item], one_line: bool) -> Value {
    let events: Vec<Value> = items
        .iter()
        .filter_map(|item| match item {
            Item::Event(Event {
                id,
                event,
                data: Some(data),
            }) => Some(json!({
                "id": id,
                "event": event,
                "data": if one_line { data.replace('\n', " ") } else { data.clone() },
            })),
            _ => None,
        })
        .collect();
    let retries: Vec<Value> = items
        .iter()
        .filter_map(|item| match item {
            Item::Retry(n) => Some(Value::from(n.parse::<u64>().unwrap())),
            _ => None,
        })
        .collect();
    json!({"events": events, "retries": retries})
}

/// A small deterministic generator (xorshift), so the node run is one
/// process for every case.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % below as u64) as usize
    }
}

#[test]
fn eventsource_parser_reads_the_same_events_and_the_same_canonical_form() {
    let modules =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/e2e/typescript/node_modules");
    assert!(
        modules.join("eventsource-parser/package.json").is_file(),
        "eventsource-parser is missing: run tests/e2e/typescript/setup.sh"
    );
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..3000 {
        let mut bytes = if rng.next(4) == 0 {
            b"\xEF\xBB\xBF".to_vec()
        } else {
            Vec::new()
        };
        for _ in 0..rng.next(40) {
            bytes.extend_from_slice(PIECES[rng.next(PIECES.len())]);
        }
        // eventsource-parser waits for the byte after a CR that ends a chunk
        // and the SDK never flushes it at the end of the stream, while the
        // WHATWG algorithm ends the line there; every case ends with LF so
        // both finish every line (`a_final_lone_cr_is_a_line_end_here`).
        bytes.push(b'\n');
        let mut splits: Vec<usize> = (0..rng.next(8))
            .map(|_| rng.next(bytes.len() + 1))
            .collect();
        splits.sort_unstable();
        let items = parse_split(&bytes, &splits);
        if items
            .iter()
            .any(|i| matches!(i, Item::Retry(n) if n.len() > 15))
        {
            // Past 2^53 a JavaScript number no longer holds the value.
            continue;
        }
        let canonical = canonical(&items);
        cases.push(json!({"raw": bytes, "splits": splits, "canonical": canonical}));
        ours.push((bytes, items, canonical));
    }
    let mut node = Command::new(std::env::var("MCPOLICY_NODE").unwrap_or_else(|_| "node".into()))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sse/eventsource_parser.mjs"))
        .arg(&modules)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs (MCPOLICY_NODE names another)");
    let input = serde_json::to_vec(&cases).unwrap();
    let mut stdin = node.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = node.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "eventsource_parser.mjs failed");
    let theirs: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(theirs.len(), ours.len());
    let mut dispatched = 0;
    for ((bytes, items, canonical), theirs) in ours.iter().zip(&theirs) {
        let raw = String::from_utf8_lossy(bytes);
        assert_eq!(
            theirs["raw"],
            as_dispatched(items, false),
            "raw stream {raw:?}"
        );
        // The canonical form reads back as the same events, in both.
        let again = parse_split(canonical, &[]);
        assert_eq!(
            as_dispatched(&again, false),
            as_dispatched(items, true),
            "canonical form of {raw:?}"
        );
        assert_eq!(
            theirs["canonical"],
            as_dispatched(items, true),
            "canonical form of {raw:?}"
        );
        // Id-only events keep their id for an EventSource.
        let ids = |items: &[Item]| -> Vec<Option<String>> {
            items
                .iter()
                .filter_map(|i| match i {
                    Item::Event(e) => Some(e.id.clone()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(ids(&again), ids(items), "canonical form of {raw:?}");
        dispatched += theirs["raw"]["events"].as_array().unwrap().len();
    }
    // The generator reaches events, not only noise.
    assert!(dispatched > 300, "{dispatched}");
}

/// Where the two readers part, and why it is safe: a stream whose last
/// byte is a CR ends a line for an `EventSource` (and here), but
/// `eventsource-parser` waits for a possible LF that never comes. The
/// gateway decides on the event and re-emits it with LF, so the SDK then
/// reads it too: it is decided, never passed around the decision.
#[test]
fn a_final_lone_cr_is_a_line_end_here() {
    let items = parse_split(b"data: {\"a\":1}\n\r", &[]);
    assert_eq!(
        items,
        vec![Item::Event(Event {
            id: None,
            event: None,
            data: Some("{\"a\":1}".into())
        })]
    );
    assert_eq!(canonical(&items), b"data: {\"a\":1}\n\n");
}
