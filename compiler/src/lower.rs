//! Lowering: merge `defaults` into every server block, statement by
//! statement (the merge each statement's declaration gives, in
//! `statements.rs`), and write the runtime's decision table.

use mcpolicy_runtime::table::{self, EffectiveBlock, ServerEntry, TABLE_FORMAT, Table};

use crate::model::{PartialBlock, PolicyModel};
use crate::statements::{built_in_defaults, merge};

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
        digest: table::entry_digest(&block, &model.reasons, &model.identity, model.protocol),
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

    /// The table holds server patterns in NFC (`docs/spec/language.md`,
    /// "Server patterns"), so the
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
