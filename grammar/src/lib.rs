//! The `.mcpolicy` grammar (`mcpolicy.pest` beside this crate's manifest)
//! and the pest parser derived from it. Nothing else lives here.

use pest_derive::Parser;

/// The parser derived from `mcpolicy.pest`.
#[derive(Parser, Debug)]
#[grammar = "../mcpolicy.pest"]
pub struct PolicyParser;
