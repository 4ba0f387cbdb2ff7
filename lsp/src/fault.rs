//! Fault injection, for tests of the server's crash handling: in debug
//! builds only, the environment variable [`PANIC_ON`]
//! (`MCPOLICY_LSP_PANIC_ON=<marker>`) makes every analysis of a document
//! whose text contains `<marker>` panic: the diagnostics check on the
//! worker, every request on that document, and a `didChange` whose result
//! contains it (before the document changes). An unset or empty variable
//! injects nothing. Release builds (`cargo build --release`, what
//! `cargo install` ships) compile it out: [`inject`] does nothing there.
//!
//! `tests/crash.rs` drives the built binary with it, because a checker
//! crash must reach the user through the real process: its stdio, its
//! panic hook and its threads.

/// The environment variable naming the marker text.
pub const PANIC_ON: &str = "MCPOLICY_LSP_PANIC_ON";

/// The start of the injected panic's message.
pub const INJECTED: &str = "fault injected";

/// Panics if this is a debug build, [`PANIC_ON`] names a non-empty marker
/// and `text` contains it; `what` names the analysis, for the message.
#[inline]
pub fn inject(text: &str, what: &str) {
    #[cfg(debug_assertions)]
    if let Ok(marker) = std::env::var(PANIC_ON)
        && !marker.is_empty()
        && text.contains(&marker)
    {
        panic!("{INJECTED}: {what} of a text containing {PANIC_ON}'s marker {marker:?}");
    }
    #[cfg(not(debug_assertions))]
    let _ = (text, what);
}
