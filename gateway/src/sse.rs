//! Server-sent events as an `EventSource` reads them, and written back in
//! one canonical form.
//!
//! The gateway never forwards an upstream SSE stream's bytes: a client
//! would frame them with its own parser, and any difference between that
//! parser and ours would let a frame pass around the decision (the
//! parser differential of `docs/threat-model.md`; `docs/spec/frames.md`,
//! "Lines and ids through a proxy"). [`Parser`] reads the stream exactly as
//! the WHATWG HTML standard's event stream interpretation does (§9.2.6):
//! lines end at CRLF, LF or a lone CR; a leading U+FEFF is dropped; lines
//! starting with `:` are comments; `data` lines are joined with LF; an
//! `id` containing NUL is ignored; `retry` takes ASCII digits only; an
//! event is dispatched at a blank line, and an unterminated one at the end
//! of the stream is discarded. Bytes that are not UTF-8 are decoded with
//! replacement, line by line (CR and LF never occur inside a multi-byte
//! sequence, so this is the decoder's result for the whole stream).
//!
//! [`write_event`] writes each event back as `id:` (if the block had one),
//! `event:` (if any) and ONE `data:` line, so every reader sees the frame
//! the session decided on.

/// One thing the parser read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A blank line ended an event block.
    Event(Event),
    /// A `retry` field with a valid value (ASCII digits, kept as written):
    /// it takes effect when read, not at dispatch.
    Retry(String),
    /// An event block whose data (or one of whose lines) exceeded the
    /// parser's bound: its data is gone; the block's `id`, if any, stays.
    Overlong {
        /// The `id` field of the block, when it had one.
        id: Option<String>,
    },
}

/// One event block, at its blank line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `id` field of this block (the last one without NUL), if any.
    /// `EventSource` keeps the last event id across blocks; the TypeScript
    /// SDK's `eventsource-parser` reports it per block; both agree on which
    /// block set it.
    pub id: Option<String>,
    /// The event type, `None` for the default (`message`, or an empty
    /// `event` field).
    pub event: Option<String>,
    /// The data: every `data` line's value joined with LF; `None` when the
    /// block had no `data` line (nothing is dispatched, `EventSource` only
    /// updates its last event id).
    pub data: Option<String>,
}

/// An incremental event-stream parser bounded at `max` bytes per event.
#[derive(Debug)]
pub struct Parser {
    max: usize,
    /// The first bytes, held until we know whether they are a BOM.
    head: Option<Vec<u8>>,
    line: Vec<u8>,
    /// The current line grew past `max`: the rest of it is skipped.
    line_overlong: bool,
    /// The previous byte ended a line with CR: a following LF is the same
    /// line end.
    after_cr: bool,
    data: Option<String>,
    event: Option<String>,
    id: Option<String>,
    /// This block's data exceeded `max`.
    overlong: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Parser {
    /// A parser that holds at most `max` bytes of one event's data (and of
    /// one line).
    pub fn new(max: usize) -> Parser {
        Parser {
            max,
            head: Some(Vec::new()),
            line: Vec::new(),
            line_overlong: false,
            after_cr: false,
            data: None,
            event: None,
            id: None,
            overlong: false,
        }
    }

    /// Reads `chunk`, appending what it completes to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Item>) {
        if let Some(head) = self.head.as_mut() {
            let take = (BOM.len() - head.len()).min(chunk.len());
            head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if BOM.starts_with(head) && head.len() < BOM.len() {
                return;
            }
            let head = self.head.take().unwrap_or_default();
            if head != BOM {
                self.bytes(&head, out);
            }
        }
        self.bytes(chunk, out);
    }

    fn bytes(&mut self, mut chunk: &[u8], out: &mut Vec<Item>) {
        while !chunk.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                    continue;
                }
            }
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(at) => {
                    self.push(&chunk[..at]);
                    self.after_cr = chunk[at] == b'\r';
                    chunk = &chunk[at + 1..];
                    self.end_line(out);
                }
                None => {
                    self.push(chunk);
                    return;
                }
            }
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.line_overlong {
            return;
        }
        if self.line.len() + bytes.len() > self.max {
            self.line_overlong = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self, out: &mut Vec<Item>) {
        let line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.line_overlong) {
            // Too long to be a field we could forward: the block's data is
            // lost whatever field it was.
            self.overlong = true;
            self.data = None;
            return;
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        let line = String::from_utf8_lossy(&line);
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.overlong {
                    return;
                }
                let len = self.data.as_ref().map_or(0, |d| d.len() + 1) + value.len();
                if len > self.max {
                    self.overlong = true;
                    self.data = None;
                    return;
                }
                match self.data.as_mut() {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                }
            }
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                out.push(Item::Retry(value.to_owned()));
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<Item>) {
        let id = self.id.take();
        let event = self.event.take().filter(|e| !e.is_empty());
        let data = self.data.take();
        if std::mem::take(&mut self.overlong) {
            out.push(Item::Overlong { id });
            return;
        }
        if id.is_none() && data.is_none() {
            // A blank line with nothing before it (or only an event type):
            // nothing happens for any reader.
            return;
        }
        out.push(Item::Event(Event { id, event, data }));
    }
}

/// Appends one event in the canonical form: `id:` when given, `event:`
/// when given, one `data:` line when given, and the blank line. `id` and
/// `event` are values the parser read from one line (no CR or LF). `data`
/// is a frame the session emitted: one JSON text without CR
/// (`wire::for_readers`); an LF in it can only be whitespace between JSON
/// tokens (JSON strings hold no raw control characters), so it is written
/// as a space, the same value on one line.
pub fn write_event(out: &mut Vec<u8>, id: Option<&str>, event: Option<&str>, data: Option<&[u8]>) {
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend(one_line(id.as_bytes()));
        out.push(b'\n');
    }
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend(one_line(event.as_bytes()));
        out.push(b'\n');
    }
    if let Some(data) = data {
        out.extend_from_slice(b"data: ");
        out.extend(one_line(data));
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// A `retry` field on its own block (a blank line with no data dispatches
/// nothing).
pub fn write_retry(out: &mut Vec<u8>, retry: &str) {
    out.extend_from_slice(b"retry: ");
    out.extend(one_line(retry.as_bytes()));
    out.extend_from_slice(b"\n\n");
}

/// The bytes with CR and LF as spaces (see [`write_event`]).
fn one_line(bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    bytes
        .iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Vec<Item> {
        let mut parser = Parser::new(1 << 20);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out);
        }
        out
    }

    fn event(id: Option<&str>, event: Option<&str>, data: Option<&str>) -> Item {
        Item::Event(Event {
            id: id.map(str::to_owned),
            event: event.map(str::to_owned),
            data: data.map(str::to_owned),
        })
    }

    #[test]
    fn a_lone_cr_ends_a_line() {
        assert_eq!(
            parse(&[b"data: {\"a\":1}\rdata: 2\r\r"]),
            vec![event(None, None, Some("{\"a\":1}\n2"))]
        );
        // CR at a chunk's end, LF at the next one's start: one line end.
        assert_eq!(
            parse(&[b"data: x\r", b"\ndata: y\r", b"\n\r\n"]),
            vec![event(None, None, Some("x\ny"))]
        );
    }

    #[test]
    fn data_lines_join_with_lf_and_fields_take_one_space() {
        assert_eq!(
            parse(&[b"id:7\nevent:  x\ndata\ndata:  two\n\n"]),
            vec![event(Some("7"), Some(" x"), Some("\n two"))]
        );
    }

    #[test]
    fn a_bom_is_dropped_once_even_split() {
        assert_eq!(
            parse(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]),
            vec![event(None, None, Some("a"))]
        );
        // A second BOM is part of the first field name: an unknown field.
        assert_eq!(
            parse(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"]),
            Vec::<Item>::new()
        );
        // Not a BOM: the bytes are the line's.
        assert_eq!(
            parse(&[b"\xEFdata: a\n\ndata: b\n\n"]),
            vec![event(None, None, Some("b"))]
        );
    }

    #[test]
    fn an_id_with_nul_is_ignored_and_comments_are_skipped() {
        assert_eq!(
            parse(&[b": hello\nid: a\0b\ndata: x\n\n"]),
            vec![event(None, None, Some("x"))]
        );
        assert_eq!(parse(&[b"id: 5\n\n"]), vec![event(Some("5"), None, None)]);
    }

    #[test]
    fn retry_takes_digits_only_and_unterminated_events_are_dropped() {
        assert_eq!(
            parse(&[b"retry: 10\nretry: 1x\nretry:\ndata: a"]),
            vec![Item::Retry("10".into())]
        );
    }

    #[test]
    fn an_overlong_event_keeps_only_its_id() {
        let mut parser = Parser::new(8);
        let mut out = Vec::new();
        parser.feed(b"id: 1\ndata: 0123456789\n\ndata: ok\n\n", &mut out);
        parser.feed(b"data: 0123\ndata: 4567\n\n", &mut out);
        assert_eq!(
            out,
            vec![
                Item::Overlong {
                    id: Some("1".into())
                },
                event(None, None, Some("ok")),
                Item::Overlong { id: None },
            ]
        );
    }

    #[test]
    fn the_canonical_form_reads_back_the_same() {
        let mut out = Vec::new();
        write_event(&mut out, Some("3"), None, Some(b"{\"a\":\n1}"));
        write_event(&mut out, Some("4"), Some("message"), None);
        assert_eq!(
            out,
            b"id: 3\ndata: {\"a\": 1}\n\nid: 4\nevent: message\n\n".to_vec()
        );
        assert_eq!(
            parse(&[&out]),
            vec![
                event(Some("3"), None, Some("{\"a\": 1}")),
                event(Some("4"), Some("message"), None)
            ]
        );
    }
}
