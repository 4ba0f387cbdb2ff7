//! `mcpolicy-lsp`: the language server for `.mcpolicy` files, over stdio.
//!
//! A thin loop over the compiler's salsa database: opening or editing a
//! document sets an input, and diagnostics come from the same queries (and
//! carry the same codes) as `mcpc check`.

use std::collections::HashMap;
use std::error::Error;

use lsp_server::{Connection, Message, Notification, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, Notification as _,
    PublishDiagnostics,
};
use lsp_types::{
    Diagnostic as LspDiagnostic, DiagnosticRelatedInformation, DiagnosticSeverity,
    InitializeParams, Location, NumberOrString, Position, PositionEncodingKind,
    PublishDiagnosticsParams, Range, ServerCapabilities, TextDocumentSyncCapability,
    TextDocumentSyncKind, Uri,
};
use mcpolicy_compiler::codes::Severity;
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_compiler::syntax::Span;
use salsa::Setter;

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mcpolicy-lsp: {error}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Whether positions are counted in UTF-8 bytes or UTF-16 units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8,
    Utf16,
}

struct World {
    db: Database,
    documents: HashMap<String, (Uri, SourceText)>,
    encoding: Encoding,
}

fn run() -> Result<()> {
    let (connection, io_threads) = Connection::stdio();
    let (id, params) = connection.initialize_start()?;
    let params: InitializeParams = serde_json::from_value(params)?;
    let utf8 = params
        .capabilities
        .general
        .as_ref()
        .and_then(|g| g.position_encodings.as_ref())
        .is_some_and(|encodings| encodings.contains(&PositionEncodingKind::UTF8));
    let encoding = if utf8 {
        Encoding::Utf8
    } else {
        Encoding::Utf16
    };
    let capabilities = ServerCapabilities {
        position_encoding: Some(if utf8 {
            PositionEncodingKind::UTF8
        } else {
            PositionEncodingKind::UTF16
        }),
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        ..ServerCapabilities::default()
    };
    let result = serde_json::json!({
        "capabilities": capabilities,
        "serverInfo": { "name": "mcpolicy-lsp", "version": env!("CARGO_PKG_VERSION") },
    });
    connection.initialize_finish(id, result)?;
    let mut world = World {
        db: Database::default(),
        documents: HashMap::new(),
        encoding,
    };
    main_loop(&connection, &mut world)?;
    io_threads.join()?;
    Ok(())
}

fn main_loop(connection: &Connection, world: &mut World) -> Result<()> {
    for message in &connection.receiver {
        match message {
            Message::Request(request) => {
                if connection.handle_shutdown(&request)? {
                    return Ok(());
                }
                let response = Response::new_err(
                    request.id,
                    lsp_server::ErrorCode::MethodNotFound as i32,
                    format!("unsupported request {}", request.method),
                );
                connection.sender.send(Message::Response(response))?;
            }
            Message::Notification(notification) => notify(connection, world, notification)?,
            Message::Response(_) => {}
        }
    }
    Ok(())
}

fn notify(connection: &Connection, world: &mut World, notification: Notification) -> Result<()> {
    let uri = match notification.method.as_str() {
        DidOpenTextDocument::METHOD => {
            let Ok(params) =
                serde_json::from_value::<lsp_types::DidOpenTextDocumentParams>(notification.params)
            else {
                return Ok(());
            };
            let doc = params.text_document;
            let key = doc.uri.as_str().to_owned();
            let source = SourceText::new(&world.db, key.clone(), doc.text);
            world.documents.insert(key.clone(), (doc.uri, source));
            key
        }
        DidChangeTextDocument::METHOD => {
            let Ok(params) = serde_json::from_value::<lsp_types::DidChangeTextDocumentParams>(
                notification.params,
            ) else {
                return Ok(());
            };
            let key = params.text_document.uri.as_str().to_owned();
            let Some(text) = params.content_changes.into_iter().last().map(|c| c.text) else {
                return Ok(());
            };
            let Some((_, source)) = world.documents.get(&key) else {
                return Ok(());
            };
            let source = *source;
            source.set_text(&mut world.db).to(text);
            key
        }
        DidCloseTextDocument::METHOD => {
            let Ok(params) = serde_json::from_value::<lsp_types::DidCloseTextDocumentParams>(
                notification.params,
            ) else {
                return Ok(());
            };
            if let Some((uri, _)) = world.documents.remove(params.text_document.uri.as_str()) {
                publish(connection, uri, Vec::new())?;
            }
            return Ok(());
        }
        _ => return Ok(()),
    };
    if let Some((uri, source)) = world.documents.get(&uri) {
        let text = source.text(&world.db);
        let index = LineIndex::new(text, world.encoding);
        let diagnostics = db::diagnostics(&world.db, *source)
            .iter()
            .map(|d| LspDiagnostic {
                range: index.range(d.span),
                severity: Some(match d.severity() {
                    Severity::Error => DiagnosticSeverity::ERROR,
                    Severity::Warning => DiagnosticSeverity::WARNING,
                }),
                code: Some(NumberOrString::String(d.code.as_str().to_owned())),
                source: Some("mcpolicy".to_owned()),
                message: match &d.help {
                    Some(help) => format!("{}\nhelp: {help}", d.message),
                    None => d.message.clone(),
                },
                related_information: Some(
                    d.related
                        .iter()
                        .map(|r| DiagnosticRelatedInformation {
                            location: Location {
                                uri: uri.clone(),
                                range: index.range(r.span),
                            },
                            message: r.message.clone(),
                        })
                        .collect(),
                ),
                ..LspDiagnostic::default()
            })
            .collect();
        publish(connection, uri.clone(), diagnostics)?;
    }
    Ok(())
}

fn publish(connection: &Connection, uri: Uri, diagnostics: Vec<LspDiagnostic>) -> Result<()> {
    let params = PublishDiagnosticsParams {
        uri,
        diagnostics,
        version: None,
    };
    connection
        .sender
        .send(Message::Notification(Notification::new(
            PublishDiagnostics::METHOD.to_owned(),
            params,
        )))?;
    Ok(())
}

/// Byte offsets to LSP positions in the negotiated encoding.
struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
    encoding: Encoding,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str, encoding: Encoding) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex {
            text,
            starts,
            encoding,
        }
    }

    fn position(&self, offset: usize) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let prefix = &self.text[self.starts[line]..offset];
        let character = match self.encoding {
            Encoding::Utf8 => prefix.len(),
            Encoding::Utf16 => prefix.encode_utf16().count(),
        };
        Position::new(
            u32::try_from(line).unwrap_or(u32::MAX),
            u32::try_from(character).unwrap_or(u32::MAX),
        )
    }

    fn range(&self, span: Span) -> Range {
        Range::new(self.position(span.start), self.position(span.end))
    }
}
