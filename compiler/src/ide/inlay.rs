//! Inlay hints: after each `server` block, the statements it inherits from
//! `defaults`.

use super::{overlaps, policy_model};
use crate::db::SourceText;
use crate::lower;
use crate::model::PartialBlock;
use crate::statements::{Statement, effective_lines};
use crate::syntax::{ItemKind, Span};

/// One hint: text shown at a byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlayHint {
    /// Where the hint is drawn (it is drawn after this byte).
    pub offset: usize,
    /// The text.
    pub label: String,
    /// A longer explanation.
    pub tooltip: String,
}

/// Whether a server block inherits `line` of `statement` from `defaults`.
fn inherited(
    own: &PartialBlock,
    defaults: &PartialBlock,
    statement: Statement,
    line: &str,
) -> bool {
    defaults.states_line(statement, line) && !own.states_line(statement, line)
}

/// Hints for the server blocks that overlap `range`. Only their effective
/// rules are computed (not `effective_blocks`' every block, which an edit
/// that changes a value would recompute for the whole file).
pub fn inlay_hints(db: &dyn salsa::Database, source: SourceText, range: Span) -> Vec<InlayHint> {
    let model = policy_model(db, source);
    let mut hints = Vec::new();
    // From each piece's tree, spans shifted: no whole-file tree.
    let trees = crate::db::trees(db, source);
    let servers = trees.iter().flat_map(|&(start, tree)| {
        tree.items.iter().filter_map(move |item| match &item.kind {
            ItemKind::Server(server) => Some((start, item, server)),
            _ => None,
        })
    });
    for (index, (start, item, server)) in servers.enumerate() {
        let item_span = item.span.shifted(start);
        if !overlaps(item_span, range) {
            continue;
        }
        let Some((pattern, own)) = model.servers.get(index) else {
            continue;
        };
        let effective = lower::effective_server(model, own);
        let lines: Vec<String> = effective_lines(&effective)
            .into_iter()
            .filter(|(statement, line)| inherited(own, &model.defaults, *statement, line))
            .map(|(_, line)| line)
            .collect();
        if lines.is_empty() {
            continue;
        }
        let offset = server
            .body
            .close
            .map_or(item_span.end, |close| close.shifted(start).end);
        hints.push(InlayHint {
            offset,
            label: format!("defaults: {}", lines.join(" · ")),
            tooltip: format!(
                "`{pattern}` inherits from `defaults`:\n\n```mcpolicy\n{}\n```",
                lines.join("\n")
            ),
        });
    }
    hints
}
