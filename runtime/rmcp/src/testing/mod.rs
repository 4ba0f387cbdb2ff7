//! Test support (the `testing` feature): stand-ins for the provider and the
//! consent dialog that count what they were asked, and an rmcp server that
//! samples from inside its tool calls. This crate's tests, the adapter
//! contract (`tests/contract.rs`) and the proxy's end-to-end tests
//! (`cli/tests/proxy_e2e.rs`) run them; a client's own tests may too.

mod adversary;
mod fake;

pub use adversary::Adversary;
pub use fake::{FakeProvider, ScriptedConsent};
