//! The server's state: the compiler's salsa database and the open
//! documents. An edit sets a document's `SourceText`; every answer is a
//! query over the database, which recomputes only what the edit changed.
//!
//! Each open, change or save gives the document a new `generation` (a
//! counter over the whole world, so a document closed and reopened never
//! reuses one); diagnostics are published only for a document's current
//! generation (`main_loop.rs`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lsp_server::{ErrorCode, ResponseError};
use lsp_types::{Position, Range, SemanticToken, TextDocumentContentChangeEvent, Uri};
use mcpolicy_compiler::db::{Database, SourceText};
use mcpolicy_compiler::line_index::{Encoding, LineColumn, LineIndex};
use mcpolicy_compiler::syntax::Span;
use salsa::Setter;

use crate::uri;

/// A document's outline fragments, by a hash of the piece's text and the
/// line it starts on.
pub type Fragments = HashMap<(u64, u32), Fragment>;

/// One piece's part of the outline, as sent.
#[derive(Debug, Clone)]
pub struct Fragment {
    /// The piece's text (compared on a hit: the key is only a hash).
    pub text: String,
    /// Its symbols' JSON, comma-separated, without brackets.
    pub json: String,
}

/// A document's semantic tokens piece by piece, by a hash of the piece's
/// text (`handlers::semantic_tokens`).
pub type TokenFragments = HashMap<u64, TokenFragment>;

/// One piece's semantic tokens, positioned within the piece.
#[derive(Debug, Clone)]
pub struct TokenFragment {
    /// The piece's text (compared on a hit: the key is only a hash).
    pub text: String,
    /// Each token as (line in the piece, column, length, type, modifiers);
    /// the column of a token on the piece's first line counts from the
    /// piece's start.
    pub tokens: Vec<[u32; 5]>,
}

/// An open document.
#[derive(Debug, Clone)]
pub struct Document {
    /// The URI the client named it by.
    pub uri: Uri,
    /// Its text, as a salsa input.
    pub source: SourceText,
    /// The client's version of the text.
    pub version: i32,
    /// Line starts of the current text (shared with checks in flight).
    pub index: Arc<LineIndex>,
    /// Whether the current text is all ASCII: then a UTF-16 column is its
    /// byte column, and positions need no counting (most policies are).
    pub ascii: bool,
    /// Bumped by every open, change and save of this document.
    pub generation: u64,
    /// The generation whose diagnostics may be published, shared with the
    /// check worker, which publishes while holding it (0 once the document
    /// is closed). Set before the text changes, so a check of an older
    /// text is never published after a newer one, nor after the empty list
    /// a close publishes.
    pub gate: Arc<Mutex<u64>>,
    /// The generation whose diagnostics were last published.
    published: Option<u64>,
}

/// Everything the server knows.
#[derive(Debug)]
pub struct World {
    /// The compiler's database.
    pub db: Database,
    /// Open documents by URI.
    pub documents: HashMap<String, Document>,
    /// The negotiated position encoding.
    pub encoding: Encoding,
    /// What the client said it supports, where an answer depends on it.
    pub client: crate::settings::ClientSupport,
    /// The last generation given to a document.
    generation: u64,
    /// Whether results go out as JSON text (`transport::raw_json`): set
    /// for the stdio transport, whose writer understands it.
    pub raw_json: bool,
    /// Whether the client pulls diagnostics (`textDocument/diagnostic`):
    /// then none are pushed.
    pub pull_diagnostics: bool,
    /// The semantic tokens last sent for each document, by result id, for
    /// `semanticTokens/full/delta`. Requests read the world through a
    /// shared reference, on the main thread only.
    semantic_tokens: RefCell<HashMap<String, (String, Vec<SemanticToken>)>>,
    /// The outline of each document piece by piece, as last sent
    /// (`handlers::document_symbol`): by a hash of the piece's text and
    /// the line it starts on.
    symbol_fragments: RefCell<HashMap<String, Fragments>>,
    /// The semantic tokens of each document piece by piece, as last
    /// computed (`handlers::semantic_tokens`).
    token_fragments: RefCell<HashMap<String, TokenFragments>>,
    /// The last result id given (semantic tokens, pulled diagnostics).
    result_id: Cell<u64>,
}

/// What a diagnostics check needs, owned, for a worker thread: a clone of
/// the database (salsa cancels it when the main thread sets an input) and a
/// copy of the document as of the generation to check.
#[derive(Debug)]
pub struct CheckJob {
    /// The key the document is stored under.
    pub key: String,
    /// The database, cloned.
    pub db: Database,
    /// The document as it was when the job was made.
    pub document: Document,
    /// The negotiated encoding.
    pub encoding: Encoding,
}

impl CheckJob {
    /// A read-only view, as request handlers get.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            db: &self.db,
            document: &self.document,
            encoding: self.encoding,
        }
    }
}

/// A document and the database, for handlers that only read.
#[derive(Clone, Copy)]
pub struct Snapshot<'a> {
    /// The database.
    pub db: &'a Database,
    /// The document.
    pub document: &'a Document,
    /// The negotiated encoding.
    pub encoding: Encoding,
}

impl std::fmt::Debug for Snapshot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("uri", &self.document.uri)
            .finish_non_exhaustive()
    }
}

impl<'a> Snapshot<'a> {
    /// The document's text.
    pub fn text(&self) -> &'a str {
        self.document.source.text(self.db)
    }

    /// The encoding positions are counted in: UTF-8 for an ASCII text,
    /// where both encodings give the same columns and UTF-8 counts nothing.
    fn counting(&self) -> Encoding {
        if self.document.ascii {
            Encoding::Utf8
        } else {
            self.encoding
        }
    }

    /// A byte offset as a position (clamped to the text).
    pub fn position(&self, offset: usize) -> Position {
        position(&self.document.index, self.text(), offset, self.counting())
    }

    /// A span as a range.
    pub fn range(&self, span: Span) -> Range {
        Range::new(self.position(span.start), self.position(span.end))
    }

    /// A position as a byte offset (clamped to the text, see
    /// [`LineIndex::offset`]).
    pub fn offset(&self, position: Position) -> usize {
        offset(&self.document.index, self.text(), position, self.counting())
    }

    /// A range as a span (start and end ordered).
    pub fn span(&self, range: Range) -> Span {
        span(&self.document.index, self.text(), range, self.counting())
    }
}

/// An LSP position in `text`, indexed by `index`.
fn position(index: &LineIndex, text: &str, offset: usize, encoding: Encoding) -> Position {
    let at = index.line_column(text, offset, encoding);
    Position::new(saturate(at.line), saturate(at.column))
}

/// The byte offset of an LSP position in `text`, indexed by `index`.
fn offset(index: &LineIndex, text: &str, position: Position, encoding: Encoding) -> usize {
    let at = LineColumn::new(position.line as usize, position.character as usize);
    index.offset(text, at, encoding)
}

/// An LSP range in `text` as a span, start and end ordered.
fn span(index: &LineIndex, text: &str, range: Range, encoding: Encoding) -> Span {
    let a = offset(index, text, range.start, encoding);
    let b = offset(index, text, range.end, encoding);
    Span::new(a.min(b), a.max(b))
}

/// Lets a check of `generation` publish (0: none). Waits for a publication
/// in progress.
fn set_gate(gate: &Mutex<u64>, generation: u64) {
    // A worker that panicked while holding the gate held only a number.
    *gate
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = generation;
}

/// A count as an LSP `uinteger`, the largest one if it does not fit.
fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl World {
    /// An empty world speaking `encoding`.
    pub fn new(encoding: Encoding) -> Self {
        World {
            db: Database::incremental(),
            documents: HashMap::new(),
            encoding,
            client: crate::settings::ClientSupport::default(),
            generation: 0,
            raw_json: false,
            pull_diagnostics: false,
            semantic_tokens: RefCell::default(),
            symbol_fragments: RefCell::default(),
            token_fragments: RefCell::default(),
            result_id: Cell::new(0),
        }
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// A read-only view of an open document, or the error a request for a
    /// document that was never opened gets.
    pub fn snapshot(&self, uri: &Uri) -> Result<Snapshot<'_>, ResponseError> {
        match self.documents.get(uri.as_str()) {
            Some(document) => {
                let snapshot = Snapshot {
                    db: &self.db,
                    document,
                    encoding: self.encoding,
                };
                crate::fault::inject(snapshot.text(), "a request");
                Ok(snapshot)
            }
            None => Err(ResponseError {
                code: ErrorCode::RequestFailed as i32,
                message: format!("document not open: {}", uri.as_str()),
                data: None,
            }),
        }
    }

    /// The documents whose current generation has no diagnostics published
    /// yet, with that generation.
    pub fn unpublished(&self) -> Vec<(String, u64)> {
        let mut keys: Vec<(String, u64)> = self
            .documents
            .iter()
            .filter(|(_, d)| d.published != Some(d.generation))
            .map(|(key, d)| (key.clone(), d.generation))
            .collect();
        keys.sort();
        keys
    }

    /// A check of the document stored under `key`, over a clone of the
    /// database.
    pub fn check_job(&self, key: &str) -> Option<CheckJob> {
        self.documents.get(key).map(|document| CheckJob {
            key: key.to_owned(),
            db: self.db.clone(),
            document: document.clone(),
            encoding: self.encoding,
        })
    }

    /// Whether `generation` is the current one of the document under `key`.
    pub fn is_current(&self, key: &str, generation: u64) -> bool {
        self.documents
            .get(key)
            .is_some_and(|d| d.generation == generation)
    }

    /// Records that `generation`'s diagnostics were published.
    pub fn mark_published(&mut self, key: &str, generation: u64) {
        if let Some(document) = self.documents.get_mut(key) {
            document.published = Some(generation);
        }
    }

    /// Opens (or reopens) a document.
    pub fn open(&mut self, uri: Uri, version: i32, text: String) {
        let key = uri::key(&uri);
        let index = Arc::new(LineIndex::new(&text));
        let ascii = text.is_ascii();
        let generation = self.next_generation();
        match self.documents.get_mut(&key) {
            Some(document) => {
                // Cancels checks in flight and waits until they let go of
                // their clones of the database.
                set_gate(&document.gate, generation);
                document.source.set_text(&mut self.db).to(text);
                document.version = version;
                document.index = index;
                document.ascii = ascii;
                document.generation = generation;
            }
            None => {
                let source = SourceText::new(&self.db, uri::display(&uri), text);
                self.documents.insert(
                    key.clone(),
                    Document {
                        uri,
                        source,
                        version,
                        index,
                        ascii,
                        generation,
                        gate: Arc::new(Mutex::new(generation)),
                        published: None,
                    },
                );
            }
        }
    }

    /// Applies a `didChange`'s edits in order: each range is read against
    /// the text the previous edit left, in the negotiated encoding.
    pub fn change(
        &mut self,
        uri: &Uri,
        version: i32,
        changes: Vec<TextDocumentContentChangeEvent>,
    ) -> bool {
        let key = uri::key(uri);
        let generation = self.next_generation();
        let Some(document) = self.documents.get_mut(&key) else {
            return false;
        };
        let mut text = document.source.text(&self.db).clone();
        let mut index = Arc::clone(&document.index);
        for change in changes {
            match change.range {
                Some(range) => {
                    let span = span(&index, &text, range, self.encoding);
                    text.replace_range(span.start..span.end, &change.text);
                }
                None => text = change.text,
            }
            index = Arc::new(LineIndex::new(&text));
        }
        crate::fault::inject(&text, "an edit");
        document.ascii = text.is_ascii();
        document.index = index;
        document.version = version;
        document.generation = generation;
        set_gate(&document.gate, generation);
        // Cancels checks in flight (salsa unwinds them with `Cancelled` at
        // their next query) and waits until they drop their clones.
        document.source.set_text(&mut self.db).to(text);
        true
    }

    /// Forgets a document. Its gate is closed: no check publishes for it
    /// any more.
    pub fn close(&mut self, uri: &Uri) -> Option<Document> {
        self.semantic_tokens.get_mut().remove(&uri::key(uri));
        self.symbol_fragments.get_mut().remove(&uri::key(uri));
        self.token_fragments.get_mut().remove(&uri::key(uri));
        let document = self.documents.remove(&uri::key(uri))?;
        set_gate(&document.gate, 0);
        Some(document)
    }

    /// A new result id, never given before in this session.
    pub fn next_result_id(&self) -> String {
        let id = self.result_id.get() + 1;
        self.result_id.set(id);
        id.to_string()
    }

    /// Keeps `tokens` as the document's last semantic tokens; their new
    /// result id.
    pub fn keep_semantic_tokens(&self, uri: &Uri, tokens: Vec<SemanticToken>) -> String {
        let id = self.next_result_id();
        self.semantic_tokens
            .borrow_mut()
            .insert(uri::key(uri), (id.clone(), tokens));
        id
    }

    /// Takes the outline fragments last kept for the document.
    pub fn symbol_fragments(&self, uri: &Uri) -> Fragments {
        self.symbol_fragments
            .borrow_mut()
            .remove(&uri::key(uri))
            .unwrap_or_default()
    }

    /// Keeps the outline fragments of the document's latest outline (and
    /// only those: a piece edited away is forgotten).
    pub fn keep_symbol_fragments(&self, uri: &Uri, fragments: Fragments) {
        self.symbol_fragments
            .borrow_mut()
            .insert(uri::key(uri), fragments);
    }

    /// Takes the semantic-token fragments last kept for the document.
    pub fn token_fragments(&self, uri: &Uri) -> TokenFragments {
        self.token_fragments
            .borrow_mut()
            .remove(&uri::key(uri))
            .unwrap_or_default()
    }

    /// Keeps the semantic-token fragments of the document's latest tokens
    /// (and only those: a piece edited away is forgotten).
    pub fn keep_token_fragments(&self, uri: &Uri, fragments: TokenFragments) {
        self.token_fragments
            .borrow_mut()
            .insert(uri::key(uri), fragments);
    }

    /// Takes the document's last semantic tokens if their result id is
    /// `result_id`.
    pub fn semantic_tokens(&self, uri: &Uri, result_id: &str) -> Option<Vec<SemanticToken>> {
        let mut kept = self.semantic_tokens.borrow_mut();
        let key = uri::key(uri);
        if kept.get(&key).is_some_and(|(id, _)| id == result_id) {
            kept.remove(&key).map(|(_, tokens)| tokens)
        } else {
            None
        }
    }

    /// Marks a document for diagnostics (on save).
    pub fn touch(&mut self, uri: &Uri) {
        let generation = self.next_generation();
        if let Some(document) = self.documents.get_mut(&uri::key(uri)) {
            document.generation = generation;
            set_gate(&document.gate, generation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The byte offset of an LSP position, by hand: split the text into
    /// lines at `\r\n`, `\n` and a lone `\r`, clamp the line to the last one
    /// and the column to the line's end, and snap a column inside a
    /// character back to its start.
    fn model_offset(text: &str, position: Position, encoding: Encoding) -> usize {
        let mut starts = vec![0];
        let bytes = text.as_bytes();
        for i in 0..bytes.len() {
            let ends_line =
                bytes[i] == b'\n' || (bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
            if ends_line {
                starts.push(i + 1);
            }
        }
        let Some(&start) = starts.get(position.line as usize) else {
            return text.len();
        };
        let rest = &text[start..];
        let line = &rest[..rest.find(['\r', '\n']).unwrap_or(rest.len())];
        let mut units = 0;
        for (i, c) in line.char_indices() {
            units += match encoding {
                Encoding::Utf8 => c.len_utf8(),
                Encoding::Utf16 => c.len_utf16(),
            };
            if units > position.character as usize {
                return start + i;
            }
        }
        start + line.len()
    }

    fn text() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec!["a", "é", "€", "😀", "\n", "\r\n", "\r", "xy", " "]);
        prop::collection::vec(piece, 0..80).prop_map(|p| p.concat())
    }

    fn position() -> impl Strategy<Value = Position> {
        // Mostly in range, sometimes far out of it.
        let n = prop_oneof![6 => 0u32..12, 1 => Just(u32::MAX), 1 => 12u32..100_000];
        (n.clone(), n).prop_map(|(line, character)| Position::new(line, character))
    }

    proptest! {
        /// A `didChange` applies each edit, in order, to the text the
        /// previous one left, at the offsets the positions name in the
        /// negotiated encoding (out-of-range positions clamped, a range's
        /// ends in either order), exactly as the hand-split model does.
        /// Long mode: `PROPTEST_CASES=20000 cargo test -p mcpolicy-lsp --lib`.
        #[test]
        fn edits_apply_where_their_positions_point(
            initial in text(),
            edits in prop::collection::vec((position(), position(), text(), any::<bool>()), 1..6),
            utf8 in any::<bool>(),
        ) {
            let encoding = if utf8 { Encoding::Utf8 } else { Encoding::Utf16 };
            let uri: Uri = "file:///p.mcpolicy".parse().expect("a URI");
            let mut world = World::new(encoding);
            world.open(uri.clone(), 1, initial.clone());
            let mut model = initial;
            let mut changes = Vec::new();
            for (a, b, new_text, whole) in edits {
                let range = (!whole).then_some(Range::new(a, b));
                match range {
                    Some(_) => {
                        let (x, y) = (
                            model_offset(&model, a, encoding),
                            model_offset(&model, b, encoding),
                        );
                        model.replace_range(x.min(y)..x.max(y), &new_text);
                    }
                    None => model = new_text.clone(),
                }
                changes.push(TextDocumentContentChangeEvent {
                    range,
                    range_length: None,
                    text: new_text,
                });
            }
            prop_assert!(world.change(&uri, 2, changes));
            let document = &world.documents[&uri::key(&uri)];
            prop_assert_eq!(document.source.text(&world.db), &model);
            // And positions read back from the final text agree with it.
            let snapshot = world.snapshot(&uri).expect("open");
            for offset in (0..=model.len()).filter(|&o| model.is_char_boundary(o)) {
                let inside_crlf = offset > 0
                    && model.as_bytes()[offset - 1] == b'\r'
                    && model.as_bytes().get(offset) == Some(&b'\n');
                if !inside_crlf {
                    prop_assert_eq!(model_offset(&model, snapshot.position(offset), encoding), offset);
                }
            }
        }
    }
}
