//! The checked meaning of a policy, with no spans: what lowering needs and
//! nothing else. Because it carries no positions, an edit that changes only
//! layout or comments produces an equal model, and salsa skips lowering.

use std::collections::BTreeMap;
use std::sync::Arc;

use mcpolicy_runtime::table::{ProtocolRevision, ReasonSpec};

/// A checked policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyModel {
    /// The MCP revision.
    pub protocol: ProtocolRevision,
    /// The default denial code.
    pub error_code: i32,
    /// Identity fields in policy order.
    pub identity: Vec<String>,
    /// Every reason with effective values (built-ins merged with declarations).
    pub reasons: BTreeMap<String, ReasonSpec>,
    /// The `defaults` block's own statements.
    pub defaults: Arc<PartialBlock>,
    /// Server blocks in source order. Each block is shared with the check
    /// that produced it (`db::block_checks`, kept across edits), so a new
    /// model after an edit copies none of the blocks the edit left alone,
    /// and comparing two models compares those by address.
    pub servers: Vec<(String, Arc<PartialBlock>)>,
}

/// The statements one block states, declared with the statements.
pub use crate::statements::PartialBlock;
