//! The mcpolicy runtime: loads a compiled decision table and decides MCP
//! `sampling/createMessage` requests against it.
//!
//! It depends on serde, sha2, a Unicode normalisation crate and (feature
//! `sqlite`, on by default) an embedded SQLite store; never on the compiler.

pub mod calendar;
pub mod clock;
pub mod engine;
pub mod frame;
pub mod glob;
pub mod identity;
pub mod request;
pub mod store;
pub mod table;
