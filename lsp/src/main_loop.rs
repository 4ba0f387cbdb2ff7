//! The initialize handshake and the message loop.
//!
//! The main thread owns the [`World`]: it reads messages, applies edits
//! (setting a `SourceText` input) and answers requests, in order. It drains
//! every message already queued before it starts a check, so a burst of
//! `didChange` is checked once, for its last version.
//!
//! Diagnostics, the expensive part, are computed on a worker thread (one,
//! long-lived, fed by a channel) over a clone of the database
//! ([`World::check_job`]), inside `salsa::Cancelled::catch`. When a newer edit arrives the main thread sets
//! the input; salsa raises the cancellation flag and waits until every clone
//! is dropped; the worker unwinds with `Cancelled` at its next query (each
//! item's parse is one, and `diagnostics::all` checks between conversions)
//! and publishes nothing. The file-level rules (`check::check_with`, over
//! the pieces, `db::analyze_pieces`) read no query but each block's
//! memoised check; they are given a probe that unwinds the same way
//! between server patterns, whose comparison is the one rule that can take
//! long (its work is bounded, `docs/spec/language.md`, "Server patterns"),
//! so an edit never waits for a stale check to end
//! (`lsp/tests/slow_checks.rs`).
//!
//! The worker publishes a check's diagnostics itself, so that typing
//! latency does not include the requests this thread answers meanwhile (an
//! editor asks for symbols, tokens, folding and hints after each edit), but
//! only if the document still has the generation the check was made for
//! (every open, change and save makes a new one): it publishes holding the
//! document's gate (`World`), which this thread sets to the new generation
//! before it changes the text and to 0 when it closes the document. So a
//! diagnostics notification always carries the version it was computed
//! for, and never one older than a version already published, nor follows
//! the empty list of a close. The outcome comes back here for the
//! bookkeeping. A check cancelled by an edit to another document is
//! started again. A client that pulls diagnostics
//! (`textDocument/diagnostic`) is pushed none.
//!
//! A request after an edit starts the edit's check first, so the worker
//! checks while this thread answers.
//!
//! A check that panics (a bug in the checker, never the user's text) is
//! not published as an empty list, which would look like a clean file: the
//! document gets one error at its start, [`crate::diagnostics::crashed`],
//! and the panic's message and location go to the log (`window/logMessage`
//! and stderr). The crash stays published until the next edit, which checks
//! again. A panicking request handler answers `InternalError` and logs the
//! same way; so does a notification handler, which has no one to answer.
//!
//! Requests stay on the main thread: once a version is checked they read
//! memoised queries (hover, completion and the rest take well under a
//! millisecond on 10,000 lines), answering them in order keeps them
//! consistent with the edits before them, and no request outlives an edit,
//! so there is nothing to answer with `ContentModified`. A request right
//! after an edit waits for the check it needs (on a worker, salsa blocks on
//! the query in progress rather than computing it twice).

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Once};

use crossbeam_channel::{Receiver, Sender, select, unbounded};

use lsp_server::{Connection, ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types::notification::{
    DidChangeConfiguration, DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument,
    DidSaveTextDocument, LogMessage, Notification as _, PublishDiagnostics,
};
use lsp_types::request::{
    CodeActionRequest, Completion, DocumentDiagnosticRequest, DocumentHighlightRequest,
    DocumentSymbolRequest, FoldingRangeRequest, Formatting, GotoDefinition, HoverRequest,
    InlayHintRequest, PrepareRenameRequest, RangeFormatting, References, Rename, Request as _,
    SelectionRangeRequest, SemanticTokensFullDeltaRequest, SemanticTokensFullRequest,
    SemanticTokensRangeRequest, WorkspaceSymbolRequest,
};
use lsp_types::{
    CodeActionKind, CodeActionOptions, CodeActionProviderCapability, CompletionOptions,
    DiagnosticOptions, DiagnosticServerCapabilities, FoldingRangeProviderCapability,
    InitializeParams, LogMessageParams, MessageType, OneOf, PositionEncodingKind,
    PublishDiagnosticsParams, RenameOptions, SaveOptions, SemanticTokensFullOptions,
    SemanticTokensOptions, SemanticTokensServerCapabilities, ServerCapabilities,
    TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
    TextDocumentSyncSaveOptions, Uri,
};
use mcpolicy_compiler::db::Database;
use mcpolicy_compiler::line_index::Encoding;
use salsa::{Cancelled, Database as _};
use serde::de::DeserializeOwned;
use serde::{Deserialize as _, Serialize};

use crate::handlers::{self, ResponseError};
use crate::world::{CheckJob, World};

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
        document_range_formatting_provider: Some(OneOf::Left(true)),
        workspace_symbol_provider: Some(OneOf::Left(true)),
        document_highlight_provider: Some(OneOf::Left(true)),
        selection_range_provider: Some(lsp_types::SelectionRangeProviderCapability::Simple(true)),
        code_action_provider: Some(CodeActionProviderCapability::Options(CodeActionOptions {
            code_action_kinds: Some(vec![
                CodeActionKind::QUICKFIX,
                CodeActionKind::SOURCE_FIX_ALL,
            ]),
            ..CodeActionOptions::default()
        })),
        inlay_hint_provider: Some(OneOf::Left(true)),
        diagnostic_provider: Some(DiagnosticServerCapabilities::Options(DiagnosticOptions {
            identifier: Some("mcpolicy".to_owned()),
            inter_file_dependencies: false,
            workspace_diagnostics: false,
            work_done_progress_options: Default::default(),
        })),
        semantic_tokens_provider: Some(SemanticTokensServerCapabilities::SemanticTokensOptions(
            SemanticTokensOptions {
                legend: handlers::semantic_tokens::legend(),
                full: Some(SemanticTokensFullOptions::Delta { delta: Some(true) }),
                range: Some(true),
                ..SemanticTokensOptions::default()
            },
        )),
        ..ServerCapabilities::default()
    }
}

/// What became of a diagnostics check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckOutcome {
    /// Its diagnostics were published.
    Published,
    /// Salsa cancelled it: an input was set while it ran.
    Cancelled,
    /// It finished, but the document had changed (or closed) meanwhile; its
    /// diagnostics were dropped.
    Superseded,
    /// It panicked: the crash was published as the document's one
    /// diagnostic and logged.
    Crashed,
}

/// A hook on the worker thread, before a check: its clone of the database,
/// the document and the version being checked.
pub type BeforeCheck = dyn Fn(&Database, &Uri, i32) + Send + Sync;
/// A hook on the main thread, when a check's result arrives.
pub type CheckDone = dyn Fn(&Uri, i32, CheckOutcome) + Send + Sync;

/// Observation points for tests ([`run_with`]); the binary sets none.
#[derive(Clone, Default)]
pub struct Hooks {
    /// Runs on the worker, inside `Cancelled::catch`, before the check.
    pub before_check: Option<Arc<BeforeCheck>>,
    /// Runs on the main thread with each check's outcome.
    pub check_done: Option<Arc<CheckDone>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("before_check", &self.before_check.is_some())
            .field("check_done", &self.check_done.is_some())
            .finish()
    }
}

/// Runs a whole session on `connection`: the handshake, then messages
/// until `exit` or until the client goes away.
pub fn run(connection: &Connection) -> Result<Exit, Error> {
    run_with(connection, Hooks::default())
}

/// [`run`] on a connection made by [`crate::transport::stdio`]: results
/// and diagnostics go to its writer as JSON text
/// ([`crate::transport::raw_json`]), never through a `serde_json::Value`.
pub fn run_stdio(connection: &Connection) -> Result<Exit, Error> {
    serve(connection, Hooks::default(), true)
}

/// [`run`] with [`Hooks`].
pub fn run_with(connection: &Connection, hooks: Hooks) -> Result<Exit, Error> {
    serve(connection, hooks, false)
}

fn serve(connection: &Connection, hooks: Hooks, raw_json: bool) -> Result<Exit, Error> {
    record_panic_locations();
    // Most often someone ran the binary by hand: say what it expects.
    let (id, raw_params) = connection.initialize_start().map_err(|e| {
        format!(
            "no `initialize` request from the client ({e}); \
             an editor starts this server, see `mcpolicy-lsp --help`"
        )
    })?;
    // Unreadable initialize params are treated as a client with no
    // capabilities, and the log says so once the handshake is over.
    let (params, unreadable) = match InitializeParams::deserialize(&raw_params) {
        Ok(params) => (params, None),
        Err(e) => (InitializeParams::default(), Some(e)),
    };
    let encoding = negotiate(&params);
    let result = serde_json::json!({
        "capabilities": capabilities(encoding),
        "serverInfo": { "name": "mcpolicy-lsp", "version": env!("CARGO_PKG_VERSION") },
    });
    connection.initialize_finish(id, result)?;
    if let Some(e) = unreadable {
        log(
            connection,
            MessageType::WARNING,
            format!(
                "unreadable `initialize` params ({e}); \
                 serving as to a client with no capabilities (UTF-16 positions)"
            ),
        )?;
    }
    let (mut world, settings) = crate::settings::initial_world(encoding, &params, &raw_params);
    if let Err(why) = settings {
        log(
            connection,
            MessageType::WARNING,
            format!("initializationOptions: {why}"),
        )?;
    }
    world.raw_json = raw_json;
    // A client that pulls diagnostics is not pushed them too.
    world.pull_diagnostics = params
        .capabilities
        .text_document
        .as_ref()
        .is_some_and(|t| t.diagnostic.is_some());
    let mut checks = Checks::new(
        hooks,
        Publisher {
            sender: connection.sender.clone(),
            raw_json,
        },
    );
    let outcome = main_loop(connection, &mut world, &mut checks);
    // Ends the worker once its queue is empty; cancels the checks still
    // running or queued and waits until they let go of the database.
    drop(checks);
    world.db.trigger_cancellation();
    outcome
}

/// A check's result, sent from its worker to the main loop.
struct Checked {
    key: String,
    uri: Uri,
    version: i32,
    generation: u64,
    findings: Findings,
    /// Whether the worker published them: the document still had the
    /// generation the check was made for.
    published: bool,
}

/// What a check found.
enum Findings {
    /// The document's diagnostics.
    Done,
    /// Salsa cancelled the check: a newer edit is waiting.
    Cancelled,
    /// The check panicked: the panic's message and location.
    Crashed(String),
}

/// The checks in flight, and the worker thread that runs them.
struct Checks {
    hooks: Hooks,
    /// The generation each document's latest check was started for.
    in_flight: HashMap<String, u64>,
    /// Jobs for the worker; `None` if no thread could be started.
    jobs: Option<Sender<CheckJob>>,
    sender: Sender<Checked>,
    receiver: Receiver<Checked>,
    publisher: Publisher,
}

/// Sends `publishDiagnostics` to the client, from the main loop or from
/// the check worker.
#[derive(Clone)]
struct Publisher {
    sender: Sender<Message>,
    raw_json: bool,
}

impl Publisher {
    fn publish(
        &self,
        uri: Uri,
        version: Option<i32>,
        diagnostics: Vec<lsp_types::Diagnostic>,
    ) -> Result<(), Error> {
        let params = PublishDiagnosticsParams {
            uri,
            diagnostics,
            version,
        };
        let params = if self.raw_json {
            crate::transport::raw_json(&params)?
        } else {
            serde_json::to_value(&params)?
        };
        self.sender.send(Message::Notification(Notification {
            method: PublishDiagnostics::METHOD.to_owned(),
            params,
        }))?;
        Ok(())
    }
}

impl Checks {
    /// Starts the worker. One long-lived thread rather than one per check:
    /// a sleeping thread woken by a channel is scheduled sooner than a new
    /// one, and the allocator keeps one arena for it instead of a fresh one
    /// per check.
    fn new(hooks: Hooks, publisher: Publisher) -> Self {
        let (sender, receiver) = unbounded();
        let (jobs, queue) = unbounded::<CheckJob>();
        let results = sender.clone();
        let hook = hooks.before_check.clone();
        let worker_publisher = publisher.clone();
        let worker = std::thread::Builder::new()
            .name("mcpolicy-check".to_owned())
            .spawn(move || {
                // Ends when the loop drops its sender. Jobs queued behind a
                // cancelled one unwind at their first query, so a main
                // thread waiting to set an input is never kept waiting on
                // a queue.
                for job in queue {
                    check(job, hook.as_deref(), &results, &worker_publisher);
                }
            });
        Checks {
            hooks,
            in_flight: HashMap::new(),
            jobs: worker.is_ok().then_some(jobs),
            sender,
            receiver,
            publisher,
        }
    }

    /// Starts a check for every document whose current generation has no
    /// diagnostics published and no check running.
    fn start(&mut self, world: &World) {
        if world.pull_diagnostics {
            return;
        }
        for (key, generation) in world.unpublished() {
            if self.in_flight.get(&key) == Some(&generation) {
                continue;
            }
            let Some(job) = world.check_job(&key) else {
                continue;
            };
            self.in_flight.insert(key, generation);
            let unsent = match &self.jobs {
                Some(jobs) => jobs.send(job).err().map(|e| e.into_inner()),
                None => Some(job),
            };
            if let Some(job) = unsent {
                // No worker: check on this thread, uncancellable.
                check(
                    job,
                    self.hooks.before_check.as_deref(),
                    &self.sender,
                    &self.publisher,
                );
            }
        }
    }

    /// Takes note of the checks that have ended.
    fn drain(&mut self, world: &mut World) {
        while let Ok(checked) = self.receiver.try_recv() {
            self.finish(world, checked);
        }
    }

    /// Takes note of a check's outcome (the worker published its findings
    /// if the document had not changed since); logs a crash.
    fn finish(&mut self, world: &mut World, checked: Checked) {
        if self.in_flight.get(&checked.key) == Some(&checked.generation) {
            self.in_flight.remove(&checked.key);
        }
        let current = world.is_current(&checked.key, checked.generation);
        let outcome = match checked.findings {
            Findings::Cancelled => CheckOutcome::Cancelled,
            // Logged by the worker, before it published the crash.
            Findings::Crashed(_) => {
                if checked.published {
                    // Marked published, so that the same text is not
                    // checked (and crashed on) again until it changes.
                    if current {
                        world.mark_published(&checked.key, checked.generation);
                    }
                    CheckOutcome::Crashed
                } else {
                    CheckOutcome::Superseded
                }
            }
            Findings::Done if !checked.published => CheckOutcome::Superseded,
            Findings::Done => {
                if current {
                    world.mark_published(&checked.key, checked.generation);
                }
                CheckOutcome::Published
            }
        };
        if let Some(hook) = &self.hooks.check_done {
            hook(&checked.uri, checked.version, outcome);
        }
    }
}

/// Computes a document's diagnostics over the job's clone of the database,
/// publishes them if the document still has the generation checked (under
/// its gate, see `World`), and tells the main loop: `Cancelled` when a
/// newer edit set an input meanwhile; a panic in the checker is published
/// as `Crashed`, never as no findings, and does not end the server.
///
/// Published here rather than by the main loop, so that typing latency
/// does not include the requests the main loop answers meanwhile (an
/// editor asks for symbols, tokens, folding and hints after each edit).
fn check(
    job: CheckJob,
    before: Option<&BeforeCheck>,
    results: &Sender<Checked>,
    publisher: &Publisher,
) {
    forget_panic_location();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Cancelled::catch(AssertUnwindSafe(|| {
            if let Some(hook) = before {
                hook(&job.db, &job.document.uri, job.document.version);
            }
            let diagnostics = crate::diagnostics::all(&job.snapshot());
            // Finished, but an edit is waiting for this clone: its result
            // is stale, so it is dropped here rather than published.
            job.db.unwind_if_revision_cancelled();
            diagnostics
        }))
    }));
    let (findings, diagnostics) = match outcome {
        Ok(Ok(diagnostics)) => (Findings::Done, Some(diagnostics)),
        // Another thread panicked in a query this check waited on: the
        // checker crashed, only not here.
        Ok(Err(cancelled @ Cancelled::PropagatedPanic)) => {
            let why = cancelled.to_string();
            let crash = vec![crate::diagnostics::crashed(&why)];
            (Findings::Crashed(why), Some(crash))
        }
        Ok(Err(_)) => (Findings::Cancelled, None),
        Err(payload) => {
            let why = panic_report(payload.as_ref());
            let crash = vec![crate::diagnostics::crashed(&why)];
            (Findings::Crashed(why), Some(crash))
        }
    };
    let CheckJob {
        key, db, document, ..
    } = job;
    if let Findings::Crashed(why) = &findings {
        // Logged even when superseded: a crash is a bug to report whichever
        // version it hit. Before the publication, so that a client reading
        // the crash finds its log line already there. Fails only when the
        // session has ended.
        let _ = log_to(
            &publisher.sender,
            MessageType::ERROR,
            format!(
                "the checker crashed on {} (version {}): {why}",
                document.uri.as_str(),
                document.version
            ),
        );
    }
    let mut published = false;
    if let Some(diagnostics) = diagnostics {
        let gate = document
            .gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *gate == document.generation {
            // Fails only when the session has ended.
            published = publisher
                .publish(document.uri.clone(), Some(document.version), diagnostics)
                .is_ok();
        }
    }
    // Sent while the clone is still held: a main thread waiting to set an
    // input resumes only after this result is queued, so results reach the
    // loop in the order the edits cancelled them. The receiver is gone only
    // when the session has ended.
    let _ = results.send(Checked {
        key,
        uri: document.uri,
        version: document.version,
        generation: document.generation,
        findings,
        published,
    });
    drop(db);
}

fn main_loop(
    connection: &Connection,
    world: &mut World,
    checks: &mut Checks,
) -> Result<Exit, Error> {
    let mut shutdown = false;
    loop {
        let first = select! {
            recv(connection.receiver) -> message => match message {
                Ok(message) => message,
                Err(_) => return Ok(Exit::Abrupt),
            },
            recv(checks.receiver) -> checked => {
                if let Ok(checked) = checked {
                    checks.finish(world, checked);
                }
                checks.start(world);
                continue;
            }
        };
        let batch: Vec<Message> = std::iter::once(first)
            .chain(connection.receiver.try_iter())
            .collect();
        // Whether a notification since the last `start` may have changed a
        // document: a request after it starts the check first, so that the
        // worker checks while this thread answers (an editor asks for
        // symbols, tokens, folding and hints right after each edit).
        let mut edited = false;
        for message in batch {
            match message {
                Message::Request(request) => {
                    if edited {
                        checks.start(world);
                        edited = false;
                    }
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
                        dispatch(connection, world, request)
                    };
                    connection.sender.send(Message::Response(response))?;
                    // The outcome of a check that ended while this request
                    // was answered (its worker published it).
                    checks.drain(world);
                }
                Message::Notification(notification) => {
                    if notification.method == "exit" {
                        return Ok(if shutdown { Exit::Clean } else { Exit::Abrupt });
                    }
                    if !shutdown {
                        notify(connection, world, notification)?;
                        edited = true;
                    }
                }
                // The client's answer to our `workspace/diagnostic/refresh`:
                // nothing to do, but a refusal is logged.
                Message::Response(Response {
                    id,
                    response_result: Err(e),
                }) => log(
                    connection,
                    MessageType::WARNING,
                    format!(
                        "the client answered request {id} with error {}: {}",
                        e.code, e.message
                    ),
                )?,
                Message::Response(_) => {}
            }
        }
        checks.start(world);
    }
}

fn error(id: RequestId, code: ErrorCode, message: String) -> Response {
    Response::new_err(id, code as i32, message)
}

/// Parses the params, runs the handler (a panic becomes an internal error
/// and a log line, never a dead server) and serialises the result.
fn respond<P, R>(
    connection: &Connection,
    world: &World,
    request: Request,
    handler: fn(&World, P) -> Result<R, ResponseError>,
) -> Response
where
    P: DeserializeOwned,
    R: Serialize,
{
    respond_with(connection, world, request, handler, |world, result| {
        to_json(world, &result)
    })
}

/// [`respond`] for a handler whose answer is already JSON text (the
/// outline): carried as it is to the stdio writer, without the parse a
/// `RawValue` makes to validate it; parsed for any other connection.
fn respond_text<P>(
    connection: &Connection,
    world: &World,
    request: Request,
    handler: fn(&World, P) -> Result<String, ResponseError>,
) -> Response
where
    P: DeserializeOwned,
{
    respond_with(connection, world, request, handler, |world, text| {
        if world.raw_json {
            Ok(crate::transport::raw_text(text))
        } else {
            serde_json::from_str(&text)
        }
    })
}

/// [`respond`] with the way the result becomes the response's JSON.
fn respond_with<P, R>(
    connection: &Connection,
    world: &World,
    request: Request,
    handler: fn(&World, P) -> Result<R, ResponseError>,
    serialize: fn(&World, R) -> serde_json::Result<serde_json::Value>,
) -> Response
where
    P: DeserializeOwned,
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
    forget_panic_location();
    match catch_unwind(AssertUnwindSafe(|| handler(world, params))) {
        Ok(Ok(result)) => match serialize(world, result) {
            Ok(value) => Response::new_ok(request.id, value),
            Err(e) => error(request.id, ErrorCode::InternalError, e.to_string()),
        },
        Ok(Err(e)) => Response {
            id: request.id,
            response_result: Err(e),
        },
        Err(payload) => {
            let why = panic_report(payload.as_ref());
            // The reply says it failed; the log says why. A log that cannot
            // be sent means the connection is gone, which the loop sees next.
            let _ = log(
                connection,
                MessageType::ERROR,
                format!("{} crashed: {why}", request.method),
            );
            error(
                request.id,
                ErrorCode::InternalError,
                format!(
                    "{} failed inside the server (a bug; the server's log says where)",
                    request.method
                ),
            )
        }
    }
}

fn dispatch(connection: &Connection, world: &World, request: Request) -> Response {
    use handlers::*;
    let c = connection;
    match request.method.as_str() {
        HoverRequest::METHOD => respond(c, world, request, hover::handle),
        Completion::METHOD => respond(c, world, request, completion::handle),
        GotoDefinition::METHOD => respond(c, world, request, goto_definition::handle),
        References::METHOD => respond(c, world, request, references::handle),
        PrepareRenameRequest::METHOD => respond(c, world, request, rename::prepare),
        Rename::METHOD => respond(c, world, request, rename::handle),
        DocumentSymbolRequest::METHOD => respond_text(c, world, request, document_symbol::handle),
        FoldingRangeRequest::METHOD => respond(c, world, request, folding_range::handle),
        Formatting::METHOD => respond(c, world, request, formatting::handle),
        RangeFormatting::METHOD => respond(c, world, request, formatting::range),
        WorkspaceSymbolRequest::METHOD => respond(c, world, request, workspace_symbol::handle),
        DocumentHighlightRequest::METHOD => respond(c, world, request, document_highlight::handle),
        SelectionRangeRequest::METHOD => respond(c, world, request, selection_range::handle),
        CodeActionRequest::METHOD => respond(c, world, request, code_action::handle),
        InlayHintRequest::METHOD => respond(c, world, request, inlay_hint::handle),
        DocumentDiagnosticRequest::METHOD => respond(c, world, request, diagnostic::handle),
        SemanticTokensFullRequest::METHOD => respond(c, world, request, semantic_tokens::handle),
        SemanticTokensFullDeltaRequest::METHOD => {
            respond(c, world, request, semantic_tokens::delta_handle)
        }
        SemanticTokensRangeRequest::METHOD => {
            respond(c, world, request, semantic_tokens::range_handle)
        }
        _ => error(
            request.id,
            ErrorCode::MethodNotFound,
            format!("unsupported request {}", request.method),
        ),
    }
}

/// Runs a notification handler on readable params. Unknown notifications
/// are ignored, as the protocol asks; unreadable params of a known one,
/// and a change to a document not open, are ignored too but logged: the
/// server's text may no longer be the editor's.
fn notify(
    connection: &Connection,
    world: &mut World,
    notification: Notification,
) -> Result<(), Error> {
    fn params<P: DeserializeOwned>(n: Notification) -> Result<P, String> {
        let Notification { method, params } = n;
        serde_json::from_value(params)
            .map_err(|e| format!("unreadable `{method}` params ({e}); ignored"))
    }
    let method = notification.method.clone();
    forget_panic_location();
    let outcome = catch_unwind(AssertUnwindSafe(|| match method.as_str() {
        DidOpenTextDocument::METHOD => {
            handlers::did_open::handle(world, params(notification)?);
            Ok(None)
        }
        DidChangeTextDocument::METHOD => {
            let p: lsp_types::DidChangeTextDocumentParams = params(notification)?;
            let uri = p.text_document.uri.clone();
            if handlers::did_change::handle(world, p) {
                Ok(None)
            } else {
                Err(format!(
                    "`{method}` for a document not open ({}); ignored",
                    uri.as_str()
                ))
            }
        }
        DidSaveTextDocument::METHOD => {
            handlers::did_save::handle(world, params(notification)?);
            Ok(None)
        }
        DidCloseTextDocument::METHOD => {
            Ok(handlers::did_close::handle(world, params(notification)?))
        }
        DidChangeConfiguration::METHOD => {
            let refresh = handlers::did_change_configuration::handle(world, params(notification)?)?;
            if let Some(refresh) = refresh {
                // Fails only when the session has ended, which the loop sees next.
                let _ = connection.sender.send(Message::Request(refresh));
            }
            Ok(None)
        }
        _ => Ok(None),
    }));
    match outcome {
        Ok(Ok(Some(closed))) => publish(connection, world, closed, None, Vec::new())?,
        Ok(Ok(None)) => {}
        Ok(Err(warning)) => log(connection, MessageType::WARNING, warning)?,
        Err(payload) => log(
            connection,
            MessageType::ERROR,
            format!("{method} crashed: {}", panic_report(payload.as_ref())),
        )?,
    }
    Ok(())
}

/// Writes a line to the client's log (`window/logMessage`) and to stderr,
/// which editors also keep, for a session whose messages are lost.
fn log(connection: &Connection, typ: MessageType, message: String) -> Result<(), Error> {
    log_to(&connection.sender, typ, message)
}

/// [`log`] through a sender of the connection (the check worker has one).
fn log_to(sender: &Sender<Message>, typ: MessageType, message: String) -> Result<(), Error> {
    eprintln!("mcpolicy-lsp: {message}");
    sender.send(Message::Notification(Notification::new(
        LogMessage::METHOD.to_owned(),
        LogMessageParams { typ, message },
    )))?;
    Ok(())
}

thread_local! {
    /// Where this thread's last panic happened, recorded by the panic hook
    /// for [`panic_report`] (a caught panic's payload has no location).
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per process, a panic hook that records each panic's
/// location for [`panic_report`], then runs the hook that was there (the
/// default one prints the panic to stderr).
fn record_panic_locations() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let at = info.location().map(ToString::to_string);
            // `try_with`: a panic while the thread's locals are torn down
            // must not panic again here (that would abort).
            let _ = PANIC_AT.try_with(|slot| {
                if let Ok(mut slot) = slot.try_borrow_mut() {
                    *slot = at;
                }
            });
            previous(info);
        }));
    });
}

/// Clears this thread's recorded panic location before code whose panic
/// will be reported, so that a report never names an older panic's place.
fn forget_panic_location() {
    PANIC_AT.with(|slot| slot.borrow_mut().take());
}

/// A caught panic's message and, when this thread's panic hook recorded
/// it, its location.
fn panic_report(payload: &(dyn Any + Send)) -> String {
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(cancelled) = payload.downcast_ref::<Cancelled>() {
        cancelled.to_string()
    } else {
        "a panic without a message".to_owned()
    };
    match PANIC_AT.with(|slot| slot.borrow_mut().take()) {
        Some(at) => format!("panicked at {at}: {message}"),
        None => format!("panicked: {message}"),
    }
}

/// A result or params as the connection carries them: JSON text for the
/// stdio writer, a `Value` for any other connection.
fn to_json<T: Serialize>(world: &World, value: &T) -> serde_json::Result<serde_json::Value> {
    if world.raw_json {
        crate::transport::raw_json(value)
    } else {
        serde_json::to_value(value)
    }
}

fn publish(
    connection: &Connection,
    world: &World,
    uri: Uri,
    version: Option<i32>,
    diagnostics: Vec<lsp_types::Diagnostic>,
) -> Result<(), Error> {
    let publisher = Publisher {
        sender: connection.sender.clone(),
        raw_json: world.raw_json,
    };
    publisher.publish(uri, version, diagnostics)
}
