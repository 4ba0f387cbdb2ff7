//! A server message delivered again: on a resumed stream (Streamable
//! HTTP's `Last-Event-ID`), the server replays what it sent after the
//! client's last event, which may include a request the session already
//! forwarded on the stream that broke (`docs/spec/transports.md`,
//! "Resumed streams").
//!
//! The transport, which alone knows where the client's last event stands,
//! hands such a message to [`Session::from_server_again`] only when the
//! request was delivered in an event after it, so the client never
//! received it. The session then sends the client the very frame it
//! forwarded the first time (the same trim, the same consent) if the
//! request is still forwarded and unanswered and the server's text is the
//! same; nothing is decided, stored or counted again. Anything else (a
//! different text under the id, an id the client answered, one the server
//! cancelled) is read as any other message ([`Session::from_server`]), so a
//! reused id is still refused.

use sha2::{Digest, Sha256};

use super::*;
use crate::inflight::TextDigest;

/// The SHA-256 of a server message's text (without its line terminator).
fn text_digest(line: &[u8]) -> TextDigest {
    Sha256::digest(line).into()
}

impl Session {
    /// The session's transport resumes streams (Streamable HTTP): the text
    /// of every request forwarded is kept (its SHA-256) so that one sent
    /// again can be known ([`Session::from_server_again`]). Without it no
    /// request is hashed and a message sent again is read as any other.
    pub fn resumable(mut self) -> Self {
        self.resumable = true;
        self
    }

    /// What a forwarded request keeps of its text: its digest, on a
    /// resumable transport.
    pub(super) fn text_of(&self, line: &[u8]) -> Option<TextDigest> {
        self.resumable.then(|| text_digest(line))
    }

    /// Handles a message the server sent again on a resumed stream, ahead
    /// of which the client's last event stands: on a [`Session::resumable`]
    /// session, a request the session forwarded and the client has not
    /// answered goes to the client again as it went the first time;
    /// anything else is read as [`Session::from_server`] reads it.
    pub fn from_server_again(&self, raw: &[u8]) {
        match self.redelivery(raw) {
            Some((key, frame)) => {
                self.log.line(format_args!(
                    "server sent request {key} again on a resumed stream the client had not received it on: delivered again as first forwarded, nothing decided"
                ));
                self.send_client(&frame);
            }
            None => self.from_server(raw),
        }
    }

    /// The request's key and the frame the client was first sent for it,
    /// when `raw` is a request still forwarded with the same text.
    fn redelivery<'a>(&self, raw: &'a [u8]) -> Option<(String, Cow<'a, [u8]>)> {
        let line = body(raw);
        let probe: ServerProbe<'_> = serde_json::from_slice(line).ok()?;
        if probe.result.is_some() || probe.error.is_some() {
            return None;
        }
        probe.method.as_ref()?;
        let key = flight_key(&wire::admit_id(probe.id?).ok()?);
        let text = self.text_of(line)?;
        let state = lock(&self.state);
        let frame = match state.flights.redeliverable(&key, &text)? {
            Flight::Sampling(sampling) => forwarded_sampling(raw, sampling),
            _ => Cow::Borrowed(raw),
        };
        Some((key, frame))
    }
}

/// The frame a sampling request let through was forwarded as
/// (`Session::decided_outcome`): the server's bytes, or the request
/// re-serialised with the params the client may see.
fn forwarded_sampling<'a>(raw: &'a [u8], sampling: &Sampling) -> Cow<'a, [u8]> {
    let shown = match &sampling.awaiting {
        Awaiting::Grant(grant) => {
            if grant.lowered().is_empty() && !sampling.rewritten {
                return Cow::Borrowed(raw);
            }
            grant.params(&sampling.requested)
        }
        Awaiting::Consent(pending) => {
            if pending.lowered().is_empty() && !sampling.rewritten {
                return Cow::Borrowed(raw);
            }
            let mut shown = sampling.requested.clone();
            pending.lowered().apply(&mut shown);
            shown
        }
    };
    Cow::Owned(rewrite_request(&sampling.id, shown))
}
