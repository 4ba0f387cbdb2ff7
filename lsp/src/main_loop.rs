//! The initialize handshake and the message loop.
//!
//! Cancellation: the loop drains every message already queued before it
//! analyses anything, applies edits in order, answers requests in order
//! against the text as of that point, and publishes diagnostics once, at the
//! end of the batch, for the documents edited in it. A burst of `didChange`
//! therefore coalesces: only the last version is checked, and a check never
//! runs for a version a newer edit has already replaced. We chose this over
//! salsa's cancellation (clone the db into worker threads, catch
//! `salsa::Cancelled`) because a whole-file check of a 10,000-line policy
//! takes a few milliseconds: a worker thread would add synchronisation and a
//! second copy of every revision for no measurable gain. Should checks grow
//! long, handlers already take a read-only `Snapshot`, so moving them onto
//! threads over `db.clone()` is a local change.

use std::panic::{AssertUnwindSafe, catch_unwind};

use lsp_server::{Connection, ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, DidSaveTextDocument,
    Notification as _, PublishDiagnostics,
};
use lsp_types::request::{
    CodeActionRequest, Completion, DocumentSymbolRequest, FoldingRangeRequest, Formatting,
    GotoDefinition, HoverRequest, InlayHintRequest, PrepareRenameRequest, References, Rename,
    Request as _, SemanticTokensFullRequest,
};
use lsp_types::{
    CodeActionKind, CodeActionOptions, CodeActionProviderCapability, CompletionOptions,
    FoldingRangeProviderCapability, InitializeParams, OneOf, PositionEncodingKind,
    PublishDiagnosticsParams, RenameOptions, SaveOptions, SemanticTokensFullOptions,
    SemanticTokensOptions, SemanticTokensServerCapabilities, ServerCapabilities,
    TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
    TextDocumentSyncSaveOptions, Uri,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::handlers::{self, ResponseError};
use crate::line_index::Encoding;
use crate::world::World;

/// Errors that end the server: the connection is gone.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How the session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `exit` after `shutdown`: exit code 0.
    Clean,
    /// `exit` without `shutdown`, or the client went away: exit code 1.
    Abrupt,
}

/// The encoding both sides speak: UTF-8 when the client offers it.
pub fn negotiate(params: &InitializeParams) -> Encoding {
    let utf8 = params
        .capabilities
        .general
        .as_ref()
        .and_then(|g| g.position_encodings.as_ref())
        .is_some_and(|encodings| encodings.contains(&PositionEncodingKind::UTF8));
    if utf8 {
        Encoding::Utf8
    } else {
        Encoding::Utf16
    }
}

/// What the server offers.
pub fn capabilities(encoding: Encoding) -> ServerCapabilities {
    ServerCapabilities {
        position_encoding: Some(match encoding {
            Encoding::Utf8 => PositionEncodingKind::UTF8,
            Encoding::Utf16 => PositionEncodingKind::UTF16,
        }),
        text_document_sync: Some(TextDocumentSyncCapability::Options(
            TextDocumentSyncOptions {
                open_close: Some(true),
                change: Some(TextDocumentSyncKind::INCREMENTAL),
                save: Some(TextDocumentSyncSaveOptions::SaveOptions(SaveOptions {
                    include_text: Some(false),
                })),
                ..TextDocumentSyncOptions::default()
            },
        )),
        hover_provider: Some(true.into()),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![" ".to_owned()]),
            ..CompletionOptions::default()
        }),
        definition_provider: Some(OneOf::Left(true)),
        references_provider: Some(OneOf::Left(true)),
        rename_provider: Some(OneOf::Right(RenameOptions {
            prepare_provider: Some(true),
            work_done_progress_options: Default::default(),
        })),
        document_symbol_provider: Some(OneOf::Left(true)),
        folding_range_provider: Some(FoldingRangeProviderCapability::Simple(true)),
        document_formatting_provider: Some(OneOf::Left(true)),
        code_action_provider: Some(CodeActionProviderCapability::Options(CodeActionOptions {
            code_action_kinds: Some(vec![CodeActionKind::QUICKFIX]),
            ..CodeActionOptions::default()
        })),
        inlay_hint_provider: Some(OneOf::Left(true)),
        semantic_tokens_provider: Some(SemanticTokensServerCapabilities::SemanticTokensOptions(
            SemanticTokensOptions {
                legend: handlers::semantic_tokens::legend(),
                full: Some(SemanticTokensFullOptions::Bool(true)),
                range: None,
                ..SemanticTokensOptions::default()
            },
        )),
        ..ServerCapabilities::default()
    }
}

/// Runs a whole session on `connection`: the handshake, then messages
/// until `exit` or until the client goes away.
pub fn run(connection: &Connection) -> Result<Exit, Error> {
    let (id, params) = connection.initialize_start()?;
    // Unreadable initialize params are treated as a client with no capabilities.
    let params: InitializeParams = serde_json::from_value(params).unwrap_or_default();
    let encoding = negotiate(&params);
    let result = serde_json::json!({
        "capabilities": capabilities(encoding),
        "serverInfo": { "name": "mcpolicy-lsp", "version": env!("CARGO_PKG_VERSION") },
    });
    connection.initialize_finish(id, result)?;
    let mut world = World::new(encoding);
    main_loop(connection, &mut world)
}

fn main_loop(connection: &Connection, world: &mut World) -> Result<Exit, Error> {
    let mut shutdown = false;
    while let Ok(first) = connection.receiver.recv() {
        let batch: Vec<Message> = std::iter::once(first)
            .chain(connection.receiver.try_iter())
            .collect();
        for message in batch {
            match message {
                Message::Request(request) => {
                    let response = if shutdown {
                        error(
                            request.id,
                            ErrorCode::InvalidRequest,
                            "the server is shutting down".to_owned(),
                        )
                    } else if request.method == "shutdown" {
                        shutdown = true;
                        Response::new_ok(request.id, ())
                    } else {
                        dispatch(world, request)
                    };
                    connection.sender.send(Message::Response(response))?;
                }
                Message::Notification(notification) => {
                    if notification.method == "exit" {
                        return Ok(if shutdown { Exit::Clean } else { Exit::Abrupt });
                    }
                    if !shutdown {
                        notify(connection, world, notification)?;
                    }
                }
                Message::Response(_) => {}
            }
        }
        publish_dirty(connection, world)?;
    }
    Ok(Exit::Abrupt)
}

fn error(id: RequestId, code: ErrorCode, message: String) -> Response {
    Response::new_err(id, code as i32, message)
}

/// Parses the params, runs the handler (a panic becomes an internal error,
/// never a dead server) and serialises the result.
fn respond<P, R>(
    world: &World,
    request: Request,
    handler: fn(&World, P) -> Result<R, ResponseError>,
) -> Response
where
    P: DeserializeOwned,
    R: Serialize,
{
    let params: P = match serde_json::from_value(request.params) {
        Ok(params) => params,
        Err(e) => {
            return error(
                request.id,
                ErrorCode::InvalidParams,
                format!("invalid params for {}: {e}", request.method),
            );
        }
    };
    match catch_unwind(AssertUnwindSafe(|| handler(world, params))) {
        Ok(Ok(result)) => match serde_json::to_value(result) {
            Ok(value) => Response::new_ok(request.id, value),
            Err(e) => error(request.id, ErrorCode::InternalError, e.to_string()),
        },
        Ok(Err(e)) => Response {
            id: request.id,
            response_result: Err(e),
        },
        Err(_) => error(
            request.id,
            ErrorCode::InternalError,
            format!("{} failed inside the server", request.method),
        ),
    }
}

fn dispatch(world: &World, request: Request) -> Response {
    use handlers::*;
    match request.method.as_str() {
        HoverRequest::METHOD => respond(world, request, hover::handle),
        Completion::METHOD => respond(world, request, completion::handle),
        GotoDefinition::METHOD => respond(world, request, goto_definition::handle),
        References::METHOD => respond(world, request, references::handle),
        PrepareRenameRequest::METHOD => respond(world, request, rename::prepare),
        Rename::METHOD => respond(world, request, rename::handle),
        DocumentSymbolRequest::METHOD => respond(world, request, document_symbol::handle),
        FoldingRangeRequest::METHOD => respond(world, request, folding_range::handle),
        Formatting::METHOD => respond(world, request, formatting::handle),
        CodeActionRequest::METHOD => respond(world, request, code_action::handle),
        InlayHintRequest::METHOD => respond(world, request, inlay_hint::handle),
        SemanticTokensFullRequest::METHOD => respond(world, request, semantic_tokens::handle),
        _ => error(
            request.id,
            ErrorCode::MethodNotFound,
            format!("unsupported request {}", request.method),
        ),
    }
}

/// Runs a notification handler on readable params; unknown notifications
/// and unreadable params are ignored, as the protocol asks.
fn notify(
    connection: &Connection,
    world: &mut World,
    notification: Notification,
) -> Result<(), Error> {
    fn params<P: DeserializeOwned>(n: Notification) -> Option<P> {
        serde_json::from_value(n.params).ok()
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| match notification.method.as_str() {
        DidOpenTextDocument::METHOD => {
            if let Some(p) = params(notification) {
                handlers::did_open::handle(world, p);
            }
            None
        }
        DidChangeTextDocument::METHOD => {
            if let Some(p) = params(notification) {
                handlers::did_change::handle(world, p);
            }
            None
        }
        DidSaveTextDocument::METHOD => {
            if let Some(p) = params(notification) {
                handlers::did_save::handle(world, p);
            }
            None
        }
        DidCloseTextDocument::METHOD => {
            params(notification).and_then(|p| handlers::did_close::handle(world, p))
        }
        _ => None,
    }));
    if let Ok(Some(closed)) = outcome {
        publish(connection, closed, None, Vec::new())?;
    }
    Ok(())
}

fn publish(
    connection: &Connection,
    uri: Uri,
    version: Option<i32>,
    diagnostics: Vec<lsp_types::Diagnostic>,
) -> Result<(), Error> {
    let params = PublishDiagnosticsParams {
        uri,
        diagnostics,
        version,
    };
    connection
        .sender
        .send(Message::Notification(Notification::new(
            PublishDiagnostics::METHOD.to_owned(),
            params,
        )))?;
    Ok(())
}

/// Publishes diagnostics for every document edited since the last batch.
fn publish_dirty(connection: &Connection, world: &mut World) -> Result<(), Error> {
    for key in world.take_dirty() {
        let Some(snapshot) = world.snapshot_by_key(&key) else {
            continue;
        };
        let diagnostics = catch_unwind(AssertUnwindSafe(|| crate::diagnostics::all(&snapshot)))
            .unwrap_or_default();
        let uri = snapshot.document.uri.clone();
        let version = snapshot.document.version;
        publish(connection, uri, Some(version), diagnostics)?;
    }
    Ok(())
}
