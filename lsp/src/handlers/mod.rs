//! One file per LSP method. Request handlers read a [`Snapshot`] and return
//! the method's result; notification handlers change the [`World`].

pub mod code_action;
pub mod completion;
pub mod diagnostic;
pub mod did_change;
pub mod did_change_configuration;
pub mod did_close;
pub mod did_open;
pub mod did_save;
pub mod document_highlight;
pub mod document_symbol;
pub mod folding_range;
pub mod formatting;
pub mod goto_definition;
pub mod hover;
pub mod inlay_hint;
pub mod references;
pub mod rename;
pub mod selection_range;
pub mod semantic_tokens;
pub mod workspace_symbol;

pub use lsp_server::ResponseError;

#[allow(unused_imports)]
use crate::world::{Snapshot, World};

/// What a request handler returns.
pub type Result<T> = std::result::Result<T, ResponseError>;
