//! The checked meaning of a policy, with no spans: what lowering needs and
//! nothing else. Because it carries no positions, an edit that changes only
//! layout or comments produces an equal model, and salsa skips lowering.

use std::collections::BTreeMap;

use mcpolicy_runtime::table::{
    Budget, BudgetMetric, Consent, ContextScope, Deadline, Limit, ProtocolRevision, Rate,
    ReasonSpec, Switch, Window,
};

/// A checked policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyModel {
    /// The MCP revision.
    pub protocol: ProtocolRevision,
    /// The default denial code.
    pub error_code: i64,
    /// Identity fields in policy order.
    pub identity: Vec<String>,
    /// Every reason with effective values (built-ins merged with declarations).
    pub reasons: BTreeMap<String, ReasonSpec>,
    /// The `defaults` block's own statements.
    pub defaults: PartialBlock,
    /// Server blocks in source order.
    pub servers: Vec<(String, PartialBlock)>,
}

/// The statements one block states; `None` inherits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartialBlock {
    /// `sampling`.
    pub sampling: Option<Switch>,
    /// `tools`.
    pub tools: Option<Switch>,
    /// `max_context`.
    pub max_context: Option<ContextScope>,
    /// `max_input`.
    pub max_input: Option<Limit>,
    /// `max_messages`.
    pub max_messages: Option<Limit>,
    /// `max_tokens`.
    pub max_tokens: Option<u64>,
    /// `rate`.
    pub rate: Option<Rate>,
    /// `budget` statements; each overrides the inherited budget of the same metric and window.
    pub budgets: Vec<Budget>,
    /// `deadline`.
    pub deadline: Option<Deadline>,
    /// `consent`.
    pub consent: Option<Consent>,
    /// `models`.
    pub models: Option<Vec<String>>,
}

impl PartialBlock {
    /// The key under which a budget overrides an inherited one.
    pub fn budget_key(budget: &Budget) -> (BudgetMetric, Window) {
        (budget.metric, budget.window)
    }
}
