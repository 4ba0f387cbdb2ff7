//! `mcpolicy-lsp`: the language server for `.mcpolicy` files.
//!
//! A thin layer over the compiler's salsa database: opening or editing a
//! document sets a `SourceText` input; every answer (diagnostics with the
//! same codes as `mcpc check`, hover, completion, navigation, symbols,
//! formatting, quick fixes, inlay hints, semantic tokens) comes from a
//! function in `mcpolicy_compiler::ide`, and this crate only converts byte
//! spans into LSP positions (with the compiler's `line_index`).

pub mod code_docs;
pub mod diagnostics;
pub mod fault;
pub mod handlers;
pub mod main_loop;
pub mod settings;
pub mod transport;
pub mod uri;
pub mod world;

pub use main_loop::{Exit, run};
