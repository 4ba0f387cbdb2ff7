//! The salsa database. Source text is an input; parsing, checking and
//! lowering are tracked queries, so an editor only sets inputs and each
//! query recomputes only what an edit changed.

use std::cell::{Cell, OnceCell};
use std::sync::{Arc, Mutex};

use mcpolicy_runtime::table::Table;

use crate::check::{self, Analysis, BlockCheck, BlockContext};
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::model::PolicyModel;
use crate::parse::{self, ChunkParse, Parsed};
use crate::syntax::{Block, Item, ItemKind, Shift, SourceFile, Span, Stmt};

/// One policy file's text.
#[salsa::input(debug)]
pub struct SourceText {
    /// The file's path or URI, for messages.
    #[returns(ref)]
    pub path: String,
    /// The whole text.
    #[returns(ref)]
    pub text: String,
}

/// The text of one top-level item, or of a run of items the splitter left
/// together (`parse::item_starts`: small items are grouped, and nothing is
/// cut after a `{` left open). Interned: equal texts are one value
/// wherever they stand in the file, so an edit that moves an item does not
/// make it a new one.
#[salsa::interned(debug)]
pub struct ItemText<'db> {
    /// The item's text, from the start of its first line to the start of
    /// the next item.
    #[returns(ref)]
    pub text: String,
}

/// One piece parsed on its own, spans relative to its first byte. Re-runs
/// only for a text it has not seen: an edit inside one `server` block
/// re-parses that block's piece alone (the block, or a few small items
/// around it), even when it moves every item after it.
#[salsa::tracked(returns(ref), no_eq)]
pub fn parse_item<'db>(db: &'db dyn salsa::Database, item: ItemText<'db>) -> ChunkParse {
    parse::parse_chunk(item.text(db))
}

/// How [`parse_file`] reads a file. Set once, by [`Database::incremental`];
/// a database without it parses each file in one pass.
///
/// Item by item suits an editor: the next revision reuses every item an
/// edit did not touch. A batch run (`mcpc check`) has no next revision and
/// would only pay for a second copy of the tree (the items' memos), so it
/// keeps the whole-file parse, which a large file
/// ([`parse::PARALLEL_FROM`]) spreads over the machine's cores
/// ([`parse::parse_parallel`]). All give equal results
/// (`compiler/tests/incremental.rs`).
#[salsa::input(singleton, debug)]
pub struct ParseMode {
    /// Whether files are parsed item by item.
    #[returns(copy)]
    pub by_items: bool,
}

/// The syntax tree and lexical findings, equal to `parse::parse` of the
/// text. In a [`Database::incremental`] database: the file cut into items
/// (`parse::item_starts`), each parsed by [`parse_item`], assembled with
/// spans shifted to the whole text.
#[salsa::tracked(returns(ref), no_eq)]
pub fn parse_file(db: &dyn salsa::Database, source: SourceText) -> Parsed {
    match piece_parses(db, source) {
        Some(pieces) => parse::assemble(&pieces),
        None => {
            let text = source.text(db);
            if text.len() >= parse::PARALLEL_FROM {
                // More threads than this cut a file into runs too short to
                // pay for their thread.
                let threads = std::thread::available_parallelism()
                    .map_or(1, usize::from)
                    .min(8);
                parse::parse_parallel(text, threads)
            } else {
                parse::parse(text)
            }
        }
    }
}

/// Each piece's parse ([`parse_item`]) with the offset it starts at, in a
/// [`Database::incremental`] database; `None` in a database that parses in
/// one pass, and for a file of one piece (nothing to reuse another time
/// that the whole-file memo does not already reuse, so no interned copy).
fn piece_parses(db: &dyn salsa::Database, source: SourceText) -> Option<Vec<(usize, &ChunkParse)>> {
    if !ParseMode::try_get(db).is_some_and(|mode| mode.by_items(db)) {
        return None;
    }
    let pieces = file_pieces(db, source);
    (pieces.len() > 1).then(|| {
        pieces
            .iter()
            .map(|&(start, item)| (start, parse_item(db, item)))
            .collect()
    })
}

/// The file cut into pieces (`parse::item_starts`): each piece's offset
/// and its interned text. Computed once per revision, for the parse and
/// for the per-block checks.
#[salsa::tracked(returns(ref))]
pub fn file_pieces(db: &dyn salsa::Database, source: SourceText) -> Vec<(usize, ItemText<'_>)> {
    let text = source.text(db);
    let starts = parse::item_starts(text);
    starts
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let end = starts.get(i + 1).copied().unwrap_or(text.len());
            (start, ItemText::new(db, &text[start..end]))
        })
        .collect()
}

/// The file's trees with the offset their spans are relative to: each
/// piece's own in a [`Database::incremental`] database (no whole-file tree
/// is built), else the whole file's at offset 0. For a reader that looks
/// at a few items or comments, or shifts the spans it keeps.
pub fn trees(db: &dyn salsa::Database, source: SourceText) -> Vec<(usize, &SourceFile)> {
    match piece_parses(db, source) {
        Some(pieces) => pieces
            .into_iter()
            .map(|(start, piece)| (start, &piece.parsed.file))
            .collect(),
        None => vec![(0, &parse_file(db, source).file)],
    }
}

/// A [`BlockContext`], interned so that a query can take it.
#[salsa::interned(debug)]
pub struct CheckContext<'db> {
    /// The context.
    #[returns(ref)]
    pub context: BlockContext,
}

/// The check of each `defaults` and `server` block of one piece: the
/// offset of its `{` in the piece and what [`check::check_block`] finds,
/// spans relative to the piece. Re-runs only for a piece text or a context
/// it has not seen: an edit inside one block re-checks that block's piece
/// alone, wherever it moves the blocks after it; a new `protocol` or a
/// reason declared or removed re-checks every block.
#[salsa::tracked(returns(ref), no_eq)]
pub fn block_checks<'db>(
    db: &'db dyn salsa::Database,
    item: ItemText<'db>,
    context: CheckContext<'db>,
) -> Vec<(usize, BlockCheck)> {
    let context = context.context(db);
    parse_item(db, item)
        .parsed
        .file
        .items
        .iter()
        .filter_map(|item| match &item.kind {
            ItemKind::Defaults(block) => {
                Some((block.open.start, check::check_block(block, false, context)))
            }
            ItemKind::Server(server) => Some((
                server.body.open.start,
                check::check_block(&server.body, true, context),
            )),
            _ => None,
        })
        .collect()
}

/// Every finding: the parser's and the checker's, in source order. In a
/// [`Database::incremental`] database each block's check comes from
/// [`block_checks`] (per piece, memoised), and only the file-level rules
/// (declarations, duplicates, patterns, reason rules) run again on every
/// edit, over a tree without the blocks' statements
/// ([`analyze_pieces`]); the result is equal to the one-pass check
/// (`compiler/tests/per_block_check.rs`).
#[salsa::tracked(returns(ref))]
pub fn analyze(db: &dyn salsa::Database, source: SourceText) -> Analysis {
    analyze_pieces(db, source, None).unwrap_or_else(|| analyze_parsed(parse_file(db, source)))
}

/// The analysis of `source` from its pieces, as if `extra` (an item with an
/// empty span at the end of the text) followed every other item. `None`
/// in a database that parses in one pass, for a file of one piece, and
/// (never, as blocks do not straddle pieces) when a block is not found in
/// its piece: then the caller checks the whole tree.
///
/// The file-level rules read a tree assembled from the pieces without the
/// statements of `defaults` and `server` blocks ([`parse::assemble_with`]),
/// which they take from each block's [`block_checks`]: copying the
/// statements was most of the cost of a check after an edit, and of the
/// memory a whole-file tree holds. A block with a suppression comment
/// inside keeps its statements: a suppression on a line of its own covers
/// the statement after it. Nothing here is memoised but the pieces' parses
/// and checks, so no whole-file tree outlives the check.
pub fn analyze_pieces(
    db: &dyn salsa::Database,
    source: SourceText,
    extra: Option<Item>,
) -> Option<Analysis> {
    let parsed = piece_parses(db, source)?;
    // Where each block's check is found.
    let pieces = file_pieces(db, source);
    let mut parsed = parse::assemble_with(&parsed, &|piece, item| {
        piece.parsed.file.comments.iter().any(|comment| {
            item.span.start <= comment.span.start
                && comment.span.end <= item.span.end
                && check::is_suppression(comment)
        })
    });
    parsed.file.items.extend(extra);
    // One context per check of the file: intern it once.
    let interned: OnceCell<CheckContext<'_>> = OnceCell::new();
    let missed = Cell::new(false);
    let blocks = |block: &Block<Stmt>, is_server: bool, context: &BlockContext| {
        let at = block.open.start;
        let piece = pieces
            .partition_point(|(start, _)| *start <= at)
            .checked_sub(1);
        let context_id = *interned.get_or_init(|| CheckContext::new(db, context.clone()));
        piece
            .and_then(|i| pieces.get(i))
            .filter(|_| context_id.context(db) == context)
            .and_then(|&(start, item)| {
                let (_, checked) = block_checks(db, item, context_id)
                    .iter()
                    .find(|(open, _)| start + open == at)?;
                let mut checked = checked.clone();
                checked.shift(start);
                Some(checked)
            })
            .unwrap_or_else(|| {
                missed.set(true);
                check::check_block(block, is_server, context)
            })
    };
    // An edit that cancels this check need not wait for the file-level
    // rules to end: they stop between server patterns.
    let analysis = check::check_with(&parsed.file, &blocks, &|| {
        db.unwind_if_revision_cancelled();
    });
    (!missed.get()).then(|| analyze_checked(&parsed, analysis))
}

/// What [`analyze`] computes from a parsed file: the checker's findings and
/// the parser's, in source order.
pub fn analyze_parsed(parsed: &Parsed) -> Analysis {
    analyze_checked(parsed, check::check(&parsed.file))
}

/// The checker's analysis of `parsed` with the parser's findings merged in.
fn analyze_checked(parsed: &Parsed, mut analysis: Analysis) -> Analysis {
    if !parsed.diagnostics.is_empty() {
        // A control character already reported (E0007) also breaks the item or
        // statement around it; that second finding would only repeat the first.
        let controls: Vec<Span> = parsed
            .diagnostics
            .iter()
            .filter(|d| d.code == Code::E0007)
            .map(|d| d.span)
            .collect();
        analysis.diagnostics.retain(|d| {
            let broken_by_control = matches!(d.code, Code::E0001 | Code::E0002)
                && controls
                    .iter()
                    .any(|c| c.start < d.span.end && d.span.start < c.end);
            !broken_by_control
        });
        analysis
            .diagnostics
            .extend(parsed.diagnostics.iter().cloned());
        analysis
            .diagnostics
            .sort_by_key(|d| (d.span.start, d.span.end, d.code));
    }
    analysis
}

/// The diagnostics alone.
pub fn diagnostics(db: &dyn salsa::Database, source: SourceText) -> &[Diagnostic] {
    &analyze(db, source).diagnostics
}

/// The span-free meaning. Equal across layout-only edits, so salsa backdates
/// it and `lower_file` does not re-run.
#[salsa::tracked(returns(ref))]
pub fn model(db: &dyn salsa::Database, source: SourceText) -> Option<PolicyModel> {
    let analysis = analyze(db, source);
    let clean = analysis
        .diagnostics
        .iter()
        .all(|d| d.severity() != crate::codes::Severity::Error);
    clean.then(|| analysis.model.clone())
}

/// The decision table, or `None` when the policy has errors.
#[salsa::tracked(returns(ref))]
pub fn lower_file(db: &dyn salsa::Database, source: SourceText) -> Option<Table> {
    model(db, source).as_ref().map(crate::lower::lower)
}

/// The database. Records which queries executed when logging is on (for
/// tests that prove incrementality).
#[salsa::db]
#[derive(Clone, Default)]
pub struct Database {
    storage: salsa::Storage<Self>,
    log: Arc<Mutex<Option<Vec<String>>>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").finish_non_exhaustive()
    }
}

impl Database {
    /// A database for an editor: files are parsed item by item
    /// ([`ParseMode`]), so an edit re-parses only the items it touched.
    pub fn incremental() -> Self {
        let db = Database::default();
        ParseMode::new(&db, true);
        db
    }

    /// An [`incremental`](Database::incremental) database that records the
    /// queries it executes.
    pub fn with_log() -> Self {
        let log: Arc<Mutex<Option<Vec<String>>>> = Arc::new(Mutex::new(Some(Vec::new())));
        let sink = log.clone();
        let storage = salsa::Storage::new(Some(Box::new(move |event: salsa::Event| {
            if let salsa::EventKind::WillExecute { database_key } = event.kind
                && let Ok(mut guard) = sink.lock()
                && let Some(entries) = guard.as_mut()
            {
                entries.push(format!("{database_key:?}"));
            }
        })));
        let db = Database { storage, log };
        ParseMode::new(&db, true);
        db
    }

    /// The queries executed since the last call, and clears the record.
    pub fn take_log(&self) -> Vec<String> {
        self.log
            .lock()
            .map(|mut g| g.as_mut().map(std::mem::take).unwrap_or_default())
            .unwrap_or_default()
    }
}

#[salsa::db]
impl salsa::Database for Database {}

#[cfg(test)]
mod tests {
    use salsa::Setter;

    use super::*;

    const POLICY: &str =
        "mcpolicy 1\ndefaults {\n  max_tokens 4096\n}\nserver \"a\" { sampling off }\n";

    #[test]
    fn layout_only_edit_does_not_re_lower() {
        let mut db = Database::with_log();
        let source = SourceText::new(&db, "p.mcpolicy".into(), POLICY.into());
        assert!(lower_file(&db, source).is_some());
        db.take_log();
        source
            .set_text(&mut db)
            .to(POLICY.replace("  max_tokens", "    max_tokens   ") + "# a comment\n");
        assert!(lower_file(&db, source).is_some());
        let log = db.take_log();
        assert!(log.iter().any(|q| q.contains("analyze")), "{log:?}");
        assert!(
            !log.iter().any(|q| q.contains("lower_file")),
            "lowering re-ran: {log:?}"
        );
    }

    #[test]
    fn semantic_edit_re_lowers() {
        let mut db = Database::with_log();
        let source = SourceText::new(&db, "p.mcpolicy".into(), POLICY.into());
        let before = lower_file(&db, source).clone();
        db.take_log();
        source.set_text(&mut db).to(POLICY.replace("4096", "2048"));
        let after = lower_file(&db, source).clone();
        assert!(db.take_log().iter().any(|q| q.contains("lower_file")));
        assert_ne!(before, after);
    }
}
