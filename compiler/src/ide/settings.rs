//! The editor's settings that change what a check reports
//! (`workspace/didChangeConfiguration`, `lsp/README.md`): a salsa input, so
//! that every clone of the database (a check on a worker) sees the settings
//! of its revision, and a change cancels checks made under the old ones.

use std::borrow::Cow;

pub use mcpolicy_runtime::table::ProtocolRevision;

use crate::db::{SourceText, analyze, analyze_parsed, analyze_pieces, parse_file, trees};
use crate::diagnostic::Diagnostic;
use crate::syntax::{Item, ItemKind, Span, Spanned};

/// The settings; absent until the editor sends some, which reads as the
/// defaults (`mcpc check` without options).
#[salsa::input(singleton, debug)]
pub struct EditorSettings {
    /// Show warnings as errors (`mcpc check --deny-warnings`).
    #[returns(copy)]
    pub deny_warnings: bool,
    /// The revision assumed by a file without a `protocol` line, instead of
    /// the language's default.
    #[returns(copy)]
    pub protocol: Option<ProtocolRevision>,
}

/// Whether warnings are to be shown as errors.
pub fn deny_warnings(db: &dyn salsa::Database) -> bool {
    EditorSettings::try_get(db).is_some_and(|s| s.deny_warnings(db))
}

/// The file's findings under the settings: exactly `mcpc check`'s
/// ([`crate::db::diagnostics`], borrowed) unless a default revision is set
/// and the file has no `protocol` line of its own.
pub fn diagnostics(db: &dyn salsa::Database, source: SourceText) -> Cow<'_, [Diagnostic]> {
    let protocol = EditorSettings::try_get(db).and_then(|s| s.protocol(db));
    match protocol {
        Some(revision) if !declares_protocol(db, source) => {
            Cow::Borrowed(under_protocol(db, source, revision))
        }
        _ => Cow::Borrowed(&analyze(db, source).diagnostics),
    }
}

fn declares_protocol(db: &dyn salsa::Database, source: SourceText) -> bool {
    trees(db, source).iter().any(|(_, tree)| {
        tree.items
            .iter()
            .any(|item| matches!(item.kind, ItemKind::Protocol(_)))
    })
}

/// The findings of the file as if it ended with `protocol REVISION`: the
/// checker reads the revision before any rule that depends on it, and an
/// item after every other one moves no span and closes no block. The one
/// finding that would point at that line (the default error code in a
/// legacy band of the revision) is shown at the start of the file.
#[salsa::tracked(returns(ref))]
fn under_protocol(
    db: &dyn salsa::Database,
    source: SourceText,
    revision: ProtocolRevision,
) -> Vec<Diagnostic> {
    let end = source.text(db).len();
    let at = Span::new(end, end);
    let protocol = Item {
        kind: ItemKind::Protocol(Spanned {
            value: revision.as_str().to_owned(),
            span: at,
        }),
        keyword: at,
        span: at,
    };
    // Item by item, as `analyze` checks: each block's check under this
    // revision is memoised too. A database that parses in one pass checks
    // the whole tree.
    let analysis = analyze_pieces(db, source, Some(protocol.clone())).unwrap_or_else(|| {
        let mut parsed = parse_file(db, source).clone();
        parsed.file.items.push(protocol);
        analyze_parsed(&parsed)
    });
    let mut findings = analysis.diagnostics;
    for d in findings.iter_mut().filter(|d| d.span == at) {
        // Its fix (declare an `error_code` after that line) still inserts
        // at the end of the file, where it reads as it should.
        d.span = Span::new(0, 0);
    }
    findings
}
