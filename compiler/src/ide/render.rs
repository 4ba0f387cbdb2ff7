//! Effective values written back as policy statements, for hovers and hints.
//! The writing itself is declared with the statements (`statements.rs`).

use mcpolicy_runtime::table::EffectiveBlock;

pub use crate::statements::{duration, size, ttl};

/// Every statement of an effective block, as `(keyword, statement)`, in
/// declaration order. Statements that impose nothing (an unset limit) are
/// left out.
pub fn effective_lines(block: &EffectiveBlock) -> Vec<(&'static str, String)> {
    crate::statements::effective_lines(block)
        .into_iter()
        .map(|(statement, line)| (statement.keyword(), line))
        .collect()
}
