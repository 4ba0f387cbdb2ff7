//! The gateway's sessions: one [`Session`] per (route, `Mcp-Session-Id`),
//! created lazily, each with its deadline timer and the task that routes
//! its unsolicited frames; and the streams a session's frames for the
//! client can go to (`docs/spec/transports.md`).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::HeaderValue;
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_proxy::wire;
use mcpolicy_runtime::Engine;
use serde_json::Value;
use tokio::sync::{Notify, Semaphore, mpsc};

use crate::outlet::{Captured, Gate, Unsolicited, capturing};
use crate::upstream::{self, Client};
use crate::{Limits, Route, sse};

/// The prefix of the session ids the gateway mints for an upstream that
/// assigns none (a stateless server): such an id is never sent upstream.
pub(crate) const MINTED_PREFIX: &str = "mcpolicy-gw-";

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the whole gateway shares.
pub(crate) struct Gw {
    pub routes: HashMap<String, Route>,
    pub engine: Engine,
    pub log: Log,
    pub audit: Option<Audit>,
    pub client: Client,
    pub limits: Limits,
    pub allow_origins: Vec<String>,
    pub listen: SocketAddr,
    pub streams: Arc<Semaphore>,
    pub sessions: Mutex<HashMap<(String, String), Arc<Sess>>>,
}

/// The headers of the client's last request on a session, for the POSTs
/// the gateway makes on its own.
#[derive(Debug, Default, Clone)]
pub(crate) struct Remembered {
    pub protocol_version: Option<HeaderValue>,
    pub authorization: Option<HeaderValue>,
}

/// The SSE streams open towards the client on one session.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    next: u64,
    open: HashMap<u64, mpsc::Sender<Bytes>>,
    /// A server request's id (its key, `wire::IdKey` as text) → the stream
    /// it arrived on, so a frame about it later (a deadline's
    /// `notifications/cancelled`) goes there.
    by_request: HashMap<String, u64>,
    /// The standalone GET stream, if one is open.
    get: Option<u64>,
    /// Where each event id the client was sent stands: the stream and the
    /// event's place on it (the latest, for an id written twice), oldest
    /// forgotten first past [`MAX_EVENT_IDS`] ([`Sess::resume_point`]).
    events: HashMap<String, Place>,
    event_order: VecDeque<String>,
    /// Where each server request the client has not answered was
    /// delivered, when the event carrying it had an id: kept after its
    /// stream closes, for the stream that resumes it.
    delivered: HashMap<String, Place>,
}

/// An event's place: the stream it went out on (for a resumed stream, the
/// stream it continues), and its position among that stream's events.
pub(crate) type Place = (u64, u64);

/// The most event ids remembered per session for resumption; a
/// `Last-Event-ID` older than them resumes with nothing delivered again
/// (`docs/spec/transports.md`, "Resumed streams").
const MAX_EVENT_IDS: usize = 4096;

/// A frame the gateway writes to the server itself, with the credentials
/// to send it with.
pub(crate) type OwnPost = (Vec<u8>, Option<HeaderValue>);

/// How many of a session's own POSTs may wait to go out; past it whoever
/// produces one waits (a server flooding frames the gateway must answer
/// slows its own stream).
const MAX_OWN_POSTS: usize = 256;

/// The most server request ids remembered per session for routing; past
/// it the oldest stream's entries are forgotten (frames then go to the GET
/// stream).
const MAX_ROUTED: usize = 4096;

/// One gateway session.
pub(crate) struct Sess {
    pub route: Route,
    pub session: Arc<Session>,
    pub log: Log,
    /// The id the client knows the session by, once known.
    id: Mutex<Option<String>>,
    /// The gateway minted the id (the upstream assigned none): it is never
    /// sent upstream.
    minted: AtomicBool,
    remembered: Mutex<Remembered>,
    streams: Mutex<Streams>,
    last_active: Mutex<Instant>,
    /// Client requests being forwarded (an upstream may take long to
    /// answer one with JSON): the session is not idle meanwhile.
    requests: std::sync::atomic::AtomicUsize,
    wake: Arc<Notify>,
    ended: AtomicBool,
    /// The gateway's own POSTs to the server, sent one at a time in the
    /// order the session wrote them ([`Sess::post_own`]).
    own_posts: mpsc::Sender<OwnPost>,
}

/// A client request in progress on a session ([`Sess::busy`]).
pub(crate) struct Busy(Arc<Sess>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::AcqRel);
        self.0.touch();
    }
}

impl Sess {
    pub fn remembered(&self) -> Remembered {
        lock(&self.remembered).clone()
    }

    /// Keeps the protocol version and credentials of the client's latest
    /// request.
    pub fn remember(&self, headers: &hyper::HeaderMap) {
        let mut remembered = lock(&self.remembered);
        if let Some(v) = headers.get("mcp-protocol-version") {
            remembered.protocol_version = Some(v.clone());
        }
        if let Some(v) = headers.get(hyper::header::AUTHORIZATION) {
            remembered.authorization = Some(v.clone());
        }
    }

    /// The id to send upstream: `None` for a minted one.
    pub fn upstream_id(&self) -> Option<String> {
        if self.minted.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.id).clone()
    }

    pub fn is_minted(&self) -> bool {
        self.minted.load(Ordering::Acquire)
    }

    pub fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }

    /// Runs one session call on a blocking thread with the capture slot
    /// set, then wakes the timer if the call added a deadline.
    pub async fn call(&self, f: impl FnOnce(&Session) + Send + 'static) -> Captured {
        self.touch();
        let session = Arc::clone(&self.session);
        let captured = tokio::task::spawn_blocking(move || capturing(|| f(&session))).await;
        if self.session.take_new_deadline() {
            self.wake.notify_one();
        }
        match captured {
            Ok(captured) => captured,
            Err(error) => {
                self.log
                    .line(format_args!("a session call failed on its thread: {error}"));
                Captured::default()
            }
        }
    }

    /// Registers a stream towards the client; its id.
    pub fn open_stream(&self, tx: mpsc::Sender<Bytes>, get: bool) -> u64 {
        let mut streams = lock(&self.streams);
        streams.next += 1;
        let id = streams.next;
        streams.open.insert(id, tx);
        if get {
            streams.get = Some(id);
        }
        id
    }

    pub fn close_stream(&self, id: u64) {
        let mut streams = lock(&self.streams);
        streams.open.remove(&id);
        streams.by_request.retain(|_, s| *s != id);
        if streams.get == Some(id) {
            streams.get = None;
        }
        drop(streams);
        self.touch();
    }

    pub fn has_streams(&self) -> bool {
        !lock(&self.streams).open.is_empty()
    }

    /// Queues a frame of the gateway's own for the server (a denial, a
    /// refusal): the session's own POSTs go out one at a time, in the order
    /// the session wrote them (`docs/spec/transports.md`).
    pub async fn post_own(&self, frame: Vec<u8>, authorization: Option<HeaderValue>) {
        if self.own_posts.send((frame, authorization)).await.is_err() {
            self.log.line(format_args!(
                "dropped a frame for the server: the session's POSTs have stopped"
            ));
        }
    }

    /// Marks a client request in progress until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.requests.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// Whether the session has gone `idle` with no message, no request in
    /// progress and no open stream.
    fn idle_for(&self, idle: Duration) -> bool {
        self.requests.load(Ordering::Acquire) == 0
            && !self.has_streams()
            && lock(&self.last_active).elapsed() >= idle
    }

    /// A server request `key` arrived on `stream`.
    pub fn routed(&self, key: String, stream: u64) {
        let mut streams = lock(&self.streams);
        if streams.by_request.len() >= MAX_ROUTED {
            streams.by_request.clear();
        }
        streams.by_request.insert(key, stream);
    }

    /// The client answered the server request `key`.
    pub fn answered(&self, key: &str) {
        let mut streams = lock(&self.streams);
        streams.by_request.remove(key);
        streams.delivered.remove(key);
    }

    /// The event with the id `id` went to the client at `place`.
    pub fn event_written(&self, id: &str, place: Place) {
        let mut streams = lock(&self.streams);
        if streams.events.insert(id.to_owned(), place).is_none() {
            streams.event_order.push_back(id.to_owned());
            if streams.event_order.len() > MAX_EVENT_IDS
                && let Some(oldest) = streams.event_order.pop_front()
            {
                streams.events.remove(&oldest);
            }
        }
    }

    /// The server request `key` went to the client at `place`, in an event
    /// with an id (`None`: in one without, which no `Last-Event-ID` can
    /// place: it is never delivered again).
    pub fn delivered(&self, key: String, place: Option<Place>) {
        let mut streams = lock(&self.streams);
        match place {
            Some(place) => {
                if streams.delivered.len() >= MAX_ROUTED && !streams.delivered.contains_key(&key) {
                    streams.delivered.clear();
                }
                streams.delivered.insert(key, place);
            }
            None => {
                streams.delivered.remove(&key);
            }
        }
    }

    /// Where the event a client resumes after (`Last-Event-ID`) stands, if
    /// the session wrote it.
    pub fn resume_point(&self, last_event_id: &str) -> Option<Place> {
        lock(&self.streams).events.get(last_event_id).copied()
    }

    /// Whether the server request `key` was delivered on the stream a
    /// client resumes after `from`, in an event after it: the client never
    /// received it.
    pub fn unseen_since(&self, key: &str, from: Place) -> bool {
        lock(&self.streams)
            .delivered
            .get(key)
            .is_some_and(|&(stream, at)| stream == from.0 && at > from.1)
    }

    /// Where a frame for the client with no stream of its own goes: the
    /// stream its related server request arrived on, else the GET stream.
    fn stream_for(&self, frame: &[u8]) -> Option<mpsc::Sender<Bytes>> {
        let streams = lock(&self.streams);
        related_key(frame)
            .and_then(|key| streams.by_request.get(&key))
            .or(streams.get.as_ref())
            .and_then(|id| streams.open.get(id))
            .cloned()
    }

    /// Sends frames for the client that have no stream of their own
    /// (`docs/spec/transports.md`); a frame with nowhere to go is logged.
    pub async fn to_client_elsewhere(&self, frames: Vec<Vec<u8>>) {
        for frame in frames {
            let Some(tx) = self.stream_for(&frame) else {
                self.log.line(format_args!(
                    "dropped a frame for the client: no stream of this session is open to carry it"
                ));
                continue;
            };
            let mut event = Vec::with_capacity(frame.len() + 8);
            sse::write_event(&mut event, None, None, Some(&frame));
            if tx.send(Bytes::from(event)).await.is_err() {
                self.log.line(format_args!(
                    "dropped a frame for the client: its stream closed"
                ));
            }
        }
    }
}

/// The key of the server request a frame for the client is about: a
/// cancellation's `params.requestId`, else the frame's own `id`.
fn related_key(frame: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(frame).ok()?;
    let id = value
        .get("params")
        .and_then(|p| p.get("requestId"))
        .or_else(|| value.get("id"))?;
    wire::value_key(id).map(|key| key.to_string())
}

/// The key of a server request's id as written in `data`, if `data` is a
/// request (it has a `method` and an `id` every client reads one way).
pub(crate) fn request_key(data: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(default)]
        method: Option<serde::de::IgnoredAny>,
        #[serde(borrow, default)]
        id: Option<&'a serde_json::value::RawValue>,
    }
    let probe: Probe<'_> = serde_json::from_str(data).ok()?;
    probe.method?;
    wire::admit_id(probe.id?).ok().map(|key| key.to_string())
}

impl Gw {
    /// A new session on `route` (not yet in the map).
    pub fn new_session(self: &Arc<Self>, route: &Route) -> Arc<Sess> {
        let (tx, rx) = mpsc::unbounded_channel();
        let log = self
            .log
            .with_prefix(format!("mcpc gateway [{}]", route.name));
        let session = Session::with_outlet(
            self.engine.clone(),
            route.name.clone(),
            Box::new(Gate { unsolicited: tx }),
            log.clone(),
            self.audit.clone(),
        )
        .resumable();
        let wake = Arc::new(Notify::new());
        let (own_posts, own_posts_rx) = mpsc::channel(MAX_OWN_POSTS);
        let sess = Arc::new(Sess {
            route: route.clone(),
            session: Arc::new(session),
            log,
            id: Mutex::new(None),
            minted: AtomicBool::new(false),
            remembered: Mutex::new(Remembered::default()),
            streams: Mutex::new(Streams::default()),
            last_active: Mutex::new(Instant::now()),
            requests: std::sync::atomic::AtomicUsize::new(0),
            wake: Arc::clone(&wake),
            ended: AtomicBool::new(false),
            own_posts,
        });
        tokio::spawn(unsolicited(Arc::downgrade(&sess), rx));
        tokio::spawn(poster(
            Arc::clone(self),
            Arc::downgrade(&sess),
            own_posts_rx,
        ));
        tokio::spawn(timer(Arc::downgrade(&sess), wake));
        sess
    }

    /// The session `id` names on `route`, created lazily when the gateway
    /// has not seen it (after a restart, a live session still decides);
    /// whether it was created now.
    pub fn session_for(self: &Arc<Self>, route: &Route, id: &str) -> (Arc<Sess>, bool) {
        let key = (route.name.clone(), id.to_owned());
        if let Some(sess) = lock(&self.sessions).get(&key) {
            return (Arc::clone(sess), false);
        }
        let sess = self.new_session(route);
        sess.set_id(id, id.starts_with(MINTED_PREFIX));
        let mut sessions = lock(&self.sessions);
        let entry = sessions.entry(key).or_insert_with(|| Arc::clone(&sess));
        if !Arc::ptr_eq(entry, &sess) {
            // Another request created it first.
            return (Arc::clone(entry), false);
        }
        sess.log.line(format_args!(
            "session {} on route {}: deciding from here on",
            short(id),
            route.name
        ));
        (sess, true)
    }

    /// Files a session under the id the upstream assigned (or the gateway
    /// minted) in its `initialize` response.
    pub fn insert(&self, id: &str, minted: bool, sess: &Arc<Sess>) {
        sess.set_id(id, minted);
        let old =
            lock(&self.sessions).insert((sess.route.name.clone(), id.to_owned()), Arc::clone(sess));
        if let Some(old) = old
            && !Arc::ptr_eq(&old, sess)
        {
            tokio::spawn(async move { old.finish("replaced by a new initialize").await });
        }
    }

    /// Ends the session `id` on `route`, if the gateway holds it.
    pub async fn end(&self, route: &str, id: &str, why: &str) {
        let removed = lock(&self.sessions).remove(&(route.to_owned(), id.to_owned()));
        if let Some(sess) = removed {
            sess.finish(why).await;
        }
    }

    /// Ends sessions idle for longer than the idle timeout (no message, no
    /// request in progress, no open stream).
    pub async fn reap_idle(&self) {
        let idle = self.limits.idle_timeout;
        let expired: Vec<Arc<Sess>> = {
            let mut sessions = lock(&self.sessions);
            let keys: Vec<(String, String)> = sessions
                .iter()
                .filter(|(_, s)| s.idle_for(idle))
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| sessions.remove(k)).collect()
        };
        for sess in expired {
            sess.finish("idle timeout").await;
        }
    }

    /// Ends every session (the gateway stops).
    pub async fn end_all(&self) {
        let all: Vec<Arc<Sess>> = lock(&self.sessions).drain().map(|(_, s)| s).collect();
        for sess in all {
            sess.finish("the gateway stopped").await;
        }
    }
}

impl Sess {
    fn set_id(&self, id: &str, minted: bool) {
        *lock(&self.id) = Some(id.to_owned());
        self.minted.store(minted, Ordering::Release);
    }

    /// Ends the session as the stdio proxy ends its one: every decision in
    /// flight settled or refunded, every consent still waiting closed, the
    /// store's batched counts written (`docs/spec/transports.md`).
    pub async fn finish(&self, why: &str) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        self.wake.notify_one();
        let captured = self.call(|session| session.end()).await;
        if !captured.to_server.is_empty() || !captured.to_client.is_empty() {
            self.log.line(format_args!(
                "dropped {} frame(s) emitted as the session ended",
                captured.to_server.len() + captured.to_client.len()
            ));
        }
        let id = lock(&self.id).clone().unwrap_or_default();
        self.log
            .line(format_args!("session {} ended: {why}", short(&id)));
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

/// A session id for the log: its first characters only (an id may be a
/// bearer of access on some servers).
pub(crate) fn short(id: &str) -> String {
    let prefix: String = id.chars().take(8).collect();
    if prefix.len() < id.len() {
        format!("{prefix}…")
    } else {
        prefix
    }
}

/// Routes a session's unsolicited frames until the session is gone.
async fn unsolicited(sess: Weak<Sess>, mut rx: mpsc::UnboundedReceiver<Unsolicited>) {
    while let Some(message) = rx.recv().await {
        let Some(sess) = sess.upgrade() else {
            return;
        };
        match message {
            Unsolicited::ToServer(frame) => sess.post_own(frame, None).await,
            Unsolicited::ToClient(frame) => sess.to_client_elsewhere(vec![frame]).await,
        }
    }
}

/// Sends a session's own POSTs, one at a time, until the session is gone.
async fn poster(gw: Arc<Gw>, sess: Weak<Sess>, mut rx: mpsc::Receiver<OwnPost>) {
    while let Some((frame, authorization)) = rx.recv().await {
        let Some(sess) = sess.upgrade() else {
            return;
        };
        upstream::post_frame(&gw, &sess, frame, authorization).await;
    }
}

/// The session's deadlines: [`Session::expire`] at each
/// [`Session::next_deadline`], woken when a call adds one.
async fn timer(sess: Weak<Sess>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(sess) = sess.upgrade() else {
                return;
            };
            if sess.ended() {
                return;
            }
            sess.session.next_deadline()
        };
        let sleep = match next {
            Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)),
            None => tokio::time::sleep(Duration::from_secs(60)),
        };
        tokio::select! {
            () = wake.notified() => {}
            () = sleep => {
                let Some(sess) = sess.upgrade() else {
                    return;
                };
                if next.is_some() {
                    // No capture: what expiring emits is unsolicited.
                    let session = Arc::clone(&sess.session);
                    let _ = tokio::task::spawn_blocking(move || session.expire(Instant::now())).await;
                }
            }
        }
    }
}
