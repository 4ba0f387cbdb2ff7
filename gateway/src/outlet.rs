//! The gateway's side of a session (`docs/spec/transports.md`): the
//! session decides synchronously on the thread that hands it a message (no
//! decision thread), so every frame it emits during that call is a
//! consequence of that one message. [`capturing`] sets a thread-local slot
//! before the call and takes it after; the [`Gate`] outlet fills the slot
//! when one is set. Frames emitted with no slot set (a deadline expiring
//! on the timer) are *unsolicited*: they go to the session's channel and
//! are routed by the session's task (`sessions.rs`).

use std::cell::RefCell;

use mcpolicy_proxy::session::{Outlet, frame_text};
use tokio::sync::mpsc::UnboundedSender;

/// What one call into the session emitted, in order per side.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    /// Frames for the server, without line terminators.
    pub to_server: Vec<Vec<u8>>,
    /// Frames for the client, without line terminators.
    pub to_client: Vec<Vec<u8>>,
}

thread_local! {
    static SLOT: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Clears the slot when dropped, even when the session call panics, so a
/// later call on this blocking thread never captures into a stale slot.
struct Clear;

impl Drop for Clear {
    fn drop(&mut self) {
        SLOT.with(|slot| slot.borrow_mut().take());
    }
}

/// Runs `call` with the capture slot set on this thread, and returns what
/// the session emitted during it.
pub(crate) fn capturing(call: impl FnOnce()) -> Captured {
    SLOT.with(|slot| *slot.borrow_mut() = Some(Captured::default()));
    let clear = Clear;
    call();
    let captured = SLOT.with(|slot| slot.borrow_mut().take());
    drop(clear);
    captured.unwrap_or_default()
}

/// A frame emitted with no capture active.
#[derive(Debug)]
pub(crate) enum Unsolicited {
    ToServer(Vec<u8>),
    ToClient(Vec<u8>),
}

/// The outlet of one gateway session.
pub(crate) struct Gate {
    pub unsolicited: UnboundedSender<Unsolicited>,
}

impl Gate {
    fn emit(&self, frame: &[u8], to_server: bool) {
        let frame = frame_text(frame).to_vec();
        let frame = SLOT.with(|slot| match slot.borrow_mut().as_mut() {
            Some(captured) => {
                if to_server {
                    captured.to_server.push(frame);
                } else {
                    captured.to_client.push(frame);
                }
                None
            }
            None => Some(frame),
        });
        if let Some(frame) = frame {
            let message = if to_server {
                Unsolicited::ToServer(frame)
            } else {
                Unsolicited::ToClient(frame)
            };
            // The receiver is gone only once the session ended.
            let _ = self.unsolicited.send(message);
        }
    }
}

impl Outlet for Gate {
    fn to_server(&self, frame: &[u8]) {
        self.emit(frame, true);
    }

    fn to_client(&self, frame: &[u8]) {
        self.emit(frame, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_takes_what_is_emitted_during_the_call_and_nothing_after() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let gate = Gate { unsolicited: tx };
        let captured = capturing(|| {
            gate.to_server(b"{\"a\":1}\n");
            gate.to_client(b"{\"b\":2}");
        });
        assert_eq!(captured.to_server, vec![b"{\"a\":1}".to_vec()]);
        assert_eq!(captured.to_client, vec![b"{\"b\":2}".to_vec()]);
        assert!(rx.try_recv().is_err());
        gate.to_client(b"{\"c\":3}");
        assert!(matches!(rx.try_recv(), Ok(Unsolicited::ToClient(f)) if f == b"{\"c\":3}"));
        // A panicking call leaves no slot behind.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            capturing(|| panic!("inside the session"));
        }));
        gate.to_server(b"{}");
        assert!(matches!(rx.try_recv(), Ok(Unsolicited::ToServer(_))));
    }
}
