//! The mcpolicy compiler: parses `.mcpolicy` text into a typed syntax tree,
//! checks it, lowers it into the runtime's decision table and formats it.
//! All of it runs as salsa queries over a source-text input, so that the
//! language server only sets inputs.

pub mod check;
pub mod codes;
pub mod db;
pub mod diagnostic;
pub mod explain;
pub mod format;
pub mod ide;
pub mod input;
pub mod line_index;
pub mod lower;
pub mod model;
pub mod parse;
pub mod render;
pub mod statements;
pub mod syntax;
