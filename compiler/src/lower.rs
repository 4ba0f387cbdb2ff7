//! Lowering: merge `defaults` into every server block, statement by
//! statement, and write the runtime's decision table.

use mcpolicy_runtime::table::{
    self, Consent, ContextScope, EffectiveBlock, ServerEntry, Switch, TABLE_FORMAT, Table, builtin,
};

use crate::model::{PartialBlock, PolicyModel};

/// What a statement nobody wrote means: no limit, except `consent first`
/// (MCP asks clients to keep a human in the loop for sampling).
fn built_in_defaults() -> EffectiveBlock {
    EffectiveBlock {
        sampling: Switch {
            enabled: true,
            reason: builtin::SAMPLING_DISABLED.to_owned(),
        },
        tools: Switch {
            enabled: true,
            reason: builtin::TOOLS_DISABLED.to_owned(),
        },
        max_context: ContextScope::AllServers,
        max_input: None,
        max_messages: None,
        max_tokens: None,
        rate: None,
        budgets: Vec::new(),
        deadline: None,
        consent: Consent::First,
        models: None,
    }
}

/// `over` applied on top of `base`.
fn merge(base: &EffectiveBlock, over: &PartialBlock) -> EffectiveBlock {
    let mut budgets: Vec<_> = base
        .budgets
        .iter()
        .filter(|b| {
            !over
                .budgets
                .iter()
                .any(|o| PartialBlock::budget_key(o) == PartialBlock::budget_key(b))
        })
        .cloned()
        .collect();
    budgets.extend(over.budgets.iter().cloned());
    EffectiveBlock {
        sampling: over
            .sampling
            .clone()
            .unwrap_or_else(|| base.sampling.clone()),
        tools: over.tools.clone().unwrap_or_else(|| base.tools.clone()),
        max_context: over.max_context.unwrap_or(base.max_context),
        max_input: over.max_input.clone().or_else(|| base.max_input.clone()),
        max_messages: over
            .max_messages
            .clone()
            .or_else(|| base.max_messages.clone()),
        max_tokens: over.max_tokens.or(base.max_tokens),
        rate: over.rate.clone().or_else(|| base.rate.clone()),
        budgets,
        deadline: over.deadline.clone().or_else(|| base.deadline.clone()),
        consent: over.consent.unwrap_or(base.consent),
        models: over.models.clone().or_else(|| base.models.clone()),
    }
}

/// The effective block of the `defaults` alone.
pub fn effective_defaults(model: &PolicyModel) -> EffectiveBlock {
    merge(&built_in_defaults(), &model.defaults)
}

/// The effective block of one server block.
pub fn effective_server(model: &PolicyModel, block: &PartialBlock) -> EffectiveBlock {
    merge(&effective_defaults(model), block)
}

/// Lowers a checked model into the decision table.
pub fn lower(model: &PolicyModel) -> Table {
    let defaults = effective_defaults(model);
    let entry = |pattern: &str, block: EffectiveBlock| ServerEntry {
        // NFC: the table's patterns are in the form server ids are matched in.
        pattern: mcpolicy_runtime::table::pattern::nfc(pattern).into_owned(),
        digest: table::block_digest(&block, &model.reasons),
        block,
    };
    Table {
        format: TABLE_FORMAT.to_owned(),
        protocol: model.protocol,
        error_code: model.error_code,
        identity: model.identity.clone(),
        reasons: model.reasons.clone(),
        servers: model
            .servers
            .iter()
            .map(|(pattern, block)| entry(pattern, merge(&defaults, block)))
            .collect(),
        fallback: entry("*", defaults.clone()),
    }
}

#[cfg(test)]
mod tests {
    use crate::{check, parse};

    /// Issue 11, item 7: the table holds server patterns in NFC, so the
    /// runtime's exact-id index finds `café` however the client spells it.
    #[test]
    fn patterns_are_written_in_nfc() {
        let text = "mcpolicy 1\nserver \"cafe\\u{301}\" { sampling off }\nserver \"\u{212b}-*\" { sampling off }\n";
        let table = super::lower(&check::check(&parse::parse(text).file).model);
        let patterns: Vec<&str> = table.servers.iter().map(|e| e.pattern.as_str()).collect();
        assert_eq!(patterns, ["caf\u{e9}", "\u{c5}-*"]);
        assert_eq!(table.entry_for("cafe\u{301}").pattern, "caf\u{e9}");
    }
}
