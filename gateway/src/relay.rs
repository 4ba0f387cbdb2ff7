//! Messages from the server: every SSE event of a POST's response stream or
//! of the GET stream, and every JSON response body, goes through the
//! session (`Session::from_server`); what the session emits for the client
//! is written back in the canonical SSE form (`sse.rs`), what it emits for
//! the server is POSTed upstream (`docs/spec/transports.md`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use mcpolicy_runtime::jsonrpc;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use crate::headers;
use crate::server::{Body, jsonrpc_error};
use crate::sessions::{Gw, Place, Sess, request_key};
use crate::sse::{self, Item, Parser};

/// A response body fed by a channel: the relay writes events into it, and
/// so may the session's task (a frame with no stream of its own).
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
    /// Held as long as the body: the stream counts against the cap.
    _permit: Option<OwnedSemaphorePermit>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|next| next.map(|b| Ok(Frame::data(b))))
    }
}

/// The upstream's response headers as they go to the client for a body
/// the gateway rewrites: filtered, without a length, with `content_type`.
fn relayed_parts(
    mut parts: hyper::http::response::Parts,
    content_type: &'static str,
) -> hyper::http::response::Parts {
    parts.headers = headers::forwarded(&parts.headers);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    parts
}

/// Feeds one message from the server to the session, or, `again`, one
/// replayed on a resumed stream after the client's last event
/// (`Session::from_server_again`); returns what the client receives for
/// it. Frames for the server go upstream in order, in POSTs of the
/// gateway's own with `authorization` (the client's, from the request
/// whose stream carried the message).
async fn from_server(
    sess: &Arc<Sess>,
    data: String,
    authorization: Option<HeaderValue>,
    again: bool,
) -> Vec<Vec<u8>> {
    let captured = sess
        .call(move |session| {
            if again {
                session.from_server_again(data.as_bytes());
            } else {
                session.from_server(data.as_bytes());
            }
        })
        .await;
    post_all(sess, captured.to_server, authorization).await;
    captured.to_client
}

/// Queues the gateway's own frames for the server, in order
/// ([`Sess::post_own`]), with `authorization`.
pub(crate) async fn post_all(
    sess: &Sess,
    frames: Vec<Vec<u8>>,
    authorization: Option<HeaderValue>,
) {
    for frame in frames {
        sess.post_own(frame, authorization.clone()).await;
    }
}

/// Answers the server for a message too long to read (`what`: an event, a
/// body), as the stdio proxy answers a line over its bound.
async fn refuse_overlong(
    gw: &Arc<Gw>,
    sess: &Arc<Sess>,
    what: &'static str,
    authorization: Option<HeaderValue>,
) {
    let max = gw.limits.max_event;
    let captured = sess
        .call(move |session| {
            session.reject_server_line(
                jsonrpc::INVALID_REQUEST,
                &format!("Invalid frame from the server: {what} longer than {max} bytes"),
            );
        })
        .await;
    post_all(sess, captured.to_server, authorization).await;
}

/// Relays an upstream SSE response: returns the client's response at once
/// and pumps the events into it on a task of its own. `resumed`: the
/// place of the client's `Last-Event-ID` when it resumes a stream
/// (`docs/spec/transports.md`, "Resumed streams").
pub(crate) fn sse(
    gw: &Arc<Gw>,
    sess: &Arc<Sess>,
    upstream: Response<Incoming>,
    authorization: Option<HeaderValue>,
    get: bool,
    resumed: Option<Place>,
    permit: Option<OwnedSemaphorePermit>,
) -> Response<Body> {
    let (parts, body) = upstream.into_parts();
    let parts = relayed_parts(parts, "text/event-stream");
    let (tx, rx) = mpsc::channel(32);
    let stream = sess.open_stream(tx.clone(), get);
    let pumped = Pumped {
        stream,
        resumed,
        authorization,
    };
    // A resumed stream continues the one it resumes: its events are placed
    // after the client's last event there, so that a stream resumed again
    // from the same event finds what this one delivered.
    let (lineage, placed) = resumed.unwrap_or((stream, 0));
    let from = (lineage, placed);
    tokio::spawn(pump(
        Arc::clone(gw),
        Arc::clone(sess),
        pumped,
        from,
        body,
        tx,
    ));
    let body = ChannelBody {
        rx,
        _permit: permit,
    };
    Response::from_parts(parts, BodyExt::map_err(body, |e| match e {}).boxed())
}

/// One relayed stream: its id on the session, where its client resumed
/// from, and the client's credentials for the gateway's own POSTs.
struct Pumped {
    stream: u64,
    resumed: Option<Place>,
    authorization: Option<HeaderValue>,
}

/// Pumps the upstream's events to the client; `(lineage, place)`: where
/// the stream's events are placed, after `place` on `lineage` (its own id
/// and 0 for a new stream).
async fn pump(
    gw: Arc<Gw>,
    sess: Arc<Sess>,
    pumped: Pumped,
    (lineage, mut place): Place,
    mut body: Incoming,
    tx: mpsc::Sender<Bytes>,
) {
    let stream = pumped.stream;
    let mut parser = Parser::new(gw.limits.max_event);
    let mut items = Vec::new();
    'read: loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            () = tx.closed() => break 'read,
        };
        let chunk = match frame {
            None => break,
            Some(Err(error)) => {
                sess.log.line(format_args!(
                    "reading the server's event stream failed: {error}"
                ));
                break;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(chunk) => chunk,
                Err(_) => continue,
            },
        };
        parser.feed(&chunk, &mut items);
        for item in std::mem::take(&mut items) {
            place += 1;
            let out = event(&gw, &sess, &pumped, (lineage, place), item).await;
            if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
                break 'read;
            }
        }
    }
    sess.close_stream(stream);
}

/// One parsed item of an upstream stream, at `at` on it, as the client
/// receives it.
async fn event(gw: &Arc<Gw>, sess: &Arc<Sess>, pumped: &Pumped, at: Place, item: Item) -> Vec<u8> {
    let (stream, authorization) = (pumped.stream, &pumped.authorization);
    let mut out = Vec::new();
    match item {
        Item::Retry(retry) => sse::write_retry(&mut out, &retry),
        Item::Overlong { id } => {
            sess.log.line(format_args!(
                "server sent an event over {} bytes; dropped and answered -32600",
                gw.limits.max_event
            ));
            refuse_overlong(gw, sess, "an event", authorization.clone()).await;
            // Its id still moves the client's last event id.
            if let Some(id) = id {
                sse::write_event(&mut out, Some(&id), None, None);
                sess.event_written(&id, at);
            }
        }
        Item::Event(event) => {
            let Some(data) = event.data else {
                sse::write_event(&mut out, event.id.as_deref(), event.event.as_deref(), None);
                if let Some(id) = &event.id {
                    sess.event_written(id, at);
                }
                return out;
            };
            let key = request_key(&data);
            // Replayed after the client's last event, and first delivered
            // after it too: the client never received it.
            let again = pumped
                .resumed
                .zip(key.as_deref())
                .is_some_and(|(from, key)| sess.unseen_since(key, from));
            let frames = from_server(sess, data, authorization.clone(), again).await;
            if let Some(key) = key
                && !frames.is_empty()
            {
                // Forwarded: what the session later says about this request
                // (a deadline's cancellation) goes to this stream, and a
                // stream resumed ahead of this event gets it again.
                sess.routed(key.clone(), stream);
                sess.delivered(key, event.id.is_some().then_some(at));
            }
            if let Some(id) = &event.id {
                sess.event_written(id, at);
            }
            let last = frames.len().checked_sub(1);
            for (i, frame) in frames.iter().enumerate() {
                // The id goes with the last frame: a client resuming from it
                // has seen everything this event became.
                let id = if Some(i) == last {
                    event.id.as_deref()
                } else {
                    None
                };
                sse::write_event(&mut out, id, event.event.as_deref(), Some(frame));
            }
            if frames.is_empty() && event.id.is_some() {
                // Withheld (a denied sampling request): an id-only event, so
                // `Last-Event-ID` resumption stays where the server put it.
                sse::write_event(&mut out, event.id.as_deref(), None, None);
            }
        }
    }
    out
}

/// Relays an upstream JSON response: read whole (bounded), through the
/// session; one frame for the client is the JSON body, several an SSE body,
/// none a 502 with a JSON-RPC error for the client's request `request_id`.
pub(crate) async fn json(
    gw: &Arc<Gw>,
    sess: &Arc<Sess>,
    upstream: Response<Incoming>,
    authorization: Option<HeaderValue>,
    request_id: Option<&Value>,
) -> Response<Body> {
    let (parts, body) = upstream.into_parts();
    let max = gw.limits.max_event;
    let bytes = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            sess.log.line(format_args!(
                "the server's JSON response could not be read or is over {max} bytes ({error}); answered -32600"
            ));
            refuse_overlong(gw, sess, "a body", authorization).await;
            return jsonrpc_error(
                StatusCode::BAD_GATEWAY,
                request_id,
                jsonrpc::INTERNAL_ERROR,
                "the server's response could not be read by the gateway",
            );
        }
    };
    let data = String::from_utf8_lossy(&bytes).into_owned();
    let frames = from_server(sess, data, authorization, false).await;
    match frames.len() {
        0 => jsonrpc_error(
            StatusCode::BAD_GATEWAY,
            request_id,
            jsonrpc::INTERNAL_ERROR,
            "the gateway refused the server's response (see the gateway's log)",
        ),
        1 => {
            let parts = relayed_parts(parts, "application/json");
            let body = http_body_util::Full::new(Bytes::from(frames.concat()));
            Response::from_parts(parts, body.map_err(|e| match e {}).boxed())
        }
        _ => {
            let parts = relayed_parts(parts, "text/event-stream");
            let mut out = Vec::new();
            for frame in &frames {
                sse::write_event(&mut out, None, None, Some(frame));
            }
            let body = http_body_util::Full::new(Bytes::from(out));
            Response::from_parts(parts, body.map_err(|e| match e {}).boxed())
        }
    }
}
