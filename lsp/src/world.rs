//! The server's state: the compiler's salsa database and the open
//! documents. An edit sets a document's `SourceText`; every answer is a
//! query over the database, which recomputes only what the edit changed.

use std::collections::{BTreeSet, HashMap};

use lsp_server::{ErrorCode, ResponseError};
use lsp_types::{Position, Range, TextDocumentContentChangeEvent, Uri};
use mcpolicy_compiler::db::{Database, SourceText};
use mcpolicy_compiler::syntax::Span;
use salsa::Setter;

use crate::line_index::{Encoding, LineIndex};
use crate::uri;

/// An open document.
#[derive(Debug)]
pub struct Document {
    /// The URI the client named it by.
    pub uri: Uri,
    /// Its text, as a salsa input.
    pub source: SourceText,
    /// The client's version of the text.
    pub version: i32,
    /// Line starts of the current text.
    pub index: LineIndex,
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
    /// Documents edited since their diagnostics were last published.
    dirty: BTreeSet<String>,
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

    /// A byte offset as a position.
    pub fn position(&self, offset: usize) -> Position {
        self.document
            .index
            .position(self.text(), offset, self.encoding)
    }

    /// A span as a range.
    pub fn range(&self, span: Span) -> Range {
        self.document.index.range(self.text(), span, self.encoding)
    }

    /// A position as a byte offset.
    pub fn offset(&self, position: Position) -> usize {
        self.document
            .index
            .offset(self.text(), position, self.encoding)
    }

    /// A range as a span.
    pub fn span(&self, range: Range) -> Span {
        self.document.index.span(self.text(), range, self.encoding)
    }
}

impl World {
    /// An empty world speaking `encoding`.
    pub fn new(encoding: Encoding) -> Self {
        World {
            db: Database::incremental(),
            documents: HashMap::new(),
            encoding,
            dirty: BTreeSet::new(),
        }
    }

    /// A read-only view of an open document, or the error a request for a
    /// document that was never opened gets.
    pub fn snapshot(&self, uri: &Uri) -> Result<Snapshot<'_>, ResponseError> {
        match self.documents.get(uri.as_str()) {
            Some(document) => Ok(Snapshot {
                db: &self.db,
                document,
                encoding: self.encoding,
            }),
            None => Err(ResponseError {
                code: ErrorCode::RequestFailed as i32,
                message: format!("document not open: {}", uri.as_str()),
                data: None,
            }),
        }
    }

    /// [`World::snapshot`] by the key a document is stored under.
    pub fn snapshot_by_key(&self, key: &str) -> Option<Snapshot<'_>> {
        self.documents.get(key).map(|document| Snapshot {
            db: &self.db,
            document,
            encoding: self.encoding,
        })
    }

    /// Opens (or reopens) a document.
    pub fn open(&mut self, uri: Uri, version: i32, text: String) {
        let key = uri::key(&uri);
        let index = LineIndex::new(&text);
        match self.documents.get_mut(&key) {
            Some(document) => {
                document.source.set_text(&mut self.db).to(text);
                document.version = version;
                document.index = index;
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
                    },
                );
            }
        }
        self.dirty.insert(key);
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
        let Some(document) = self.documents.get_mut(&key) else {
            return false;
        };
        let mut text = document.source.text(&self.db).clone();
        let mut index = std::mem::take(&mut document.index);
        for change in changes {
            match change.range {
                Some(range) => {
                    let span = index.span(&text, range, self.encoding);
                    text.replace_range(span.start..span.end, &change.text);
                }
                None => text = change.text,
            }
            index = LineIndex::new(&text);
        }
        document.index = index;
        document.version = version;
        document.source.set_text(&mut self.db).to(text);
        self.dirty.insert(key);
        true
    }

    /// Forgets a document.
    pub fn close(&mut self, uri: &Uri) -> Option<Document> {
        let key = uri::key(uri);
        self.dirty.remove(&key);
        self.documents.remove(&key)
    }

    /// Marks a document for diagnostics (on save).
    pub fn touch(&mut self, uri: &Uri) {
        let key = uri::key(uri);
        if self.documents.contains_key(&key) {
            self.dirty.insert(key);
        }
    }

    /// The documents edited since the last call.
    pub fn take_dirty(&mut self) -> Vec<String> {
        std::mem::take(&mut self.dirty).into_iter().collect()
    }
}
