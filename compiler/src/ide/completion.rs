//! Completion of what may be written at the cursor: statements valid in the
//! enclosing block, values of the statement being written, units, reasons.

use mcpolicy_runtime::table::{ProtocolRevision, builtin};

use super::docs;
use super::symbols::symbol_index;
use crate::check::IDENTITY_FIELDS;
use crate::db::{SourceText, parse_file};
use crate::statements::{self, Shape, Statement, Unit};
use crate::syntax::*;

/// What a completion inserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompletionKind {
    /// A top-level keyword.
    Keyword,
    /// A statement keyword.
    Statement,
    /// A value of the statement being written.
    Value,
    /// A reason name.
    Reason,
    /// A unit or suffix.
    Unit,
}

/// One completion.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompletionItem {
    /// What the menu shows.
    pub label: String,
    /// What it is.
    pub kind: CompletionKind,
    /// A short description beside the label.
    pub detail: Option<String>,
    /// Markdown documentation.
    pub documentation: Option<String>,
    /// The bytes the insertion replaces (the word typed so far).
    pub replace: Span,
    /// The whole word around the cursor (the word typed so far and the
    /// rest of it after the cursor): what accepting the item replaces in
    /// an editor that offers insert-or-replace (`this|Servr` → `thisServer`).
    pub word: Span,
    /// The text inserted.
    pub insert: String,
    /// The text the editor matches the typed word against.
    pub filter: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    TopLevel,
    Policy,
    Reason,
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// The block the cursor is in, and the statements it already states.
fn context(file: &SourceFile, offset: usize) -> (Context, Vec<String>) {
    for item in &file.items {
        let (open, close, context, stated) = match &item.kind {
            ItemKind::Defaults(block) => {
                (block.open, block.close, Context::Policy, keywords(block))
            }
            ItemKind::Server(server) => (
                server.body.open,
                server.body.close,
                Context::Policy,
                keywords(&server.body),
            ),
            ItemKind::Reason(decl) => (
                decl.body.open,
                decl.body.close,
                Context::Reason,
                decl.body
                    .stmts
                    .iter()
                    .map(|s| s.kind.keyword().to_owned())
                    .collect(),
            ),
            _ => continue,
        };
        let inside = offset >= open.end
            && match close {
                Some(close) => offset <= close.start,
                None => offset <= item.span.end,
            };
        if inside {
            return (context, stated);
        }
    }
    (Context::TopLevel, Vec::new())
}

/// The keywords of the items the file already has that may appear only
/// once (the checker's rule, [`ItemKind::declared_once`]), leaving out the
/// item under the cursor.
fn declared_once(file: &SourceFile, offset: usize) -> Vec<&'static str> {
    file.items
        .iter()
        .filter(|item| !item.span.contains(offset))
        .filter_map(|item| item.kind.declared_once())
        .collect()
}

fn keywords(block: &Block<Stmt>) -> Vec<String> {
    block
        .stmts
        .iter()
        .filter(|s| !matches!(s.kind, StmtKind::Bad(_)))
        .map(|s| s.kind.keyword().to_owned())
        .collect()
}

/// Completions at `offset`.
pub fn completions(
    db: &dyn salsa::Database,
    source: SourceText,
    offset: usize,
) -> Vec<CompletionItem> {
    let text = source.text(db);
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let file = &parse_file(db, source).file;
    let (context, stated) = context(file, offset);

    // The statement being written: from the last line break, `;` or `{`.
    let segment_start = text[..offset]
        .rfind(['\n', '\r', ';', '{'])
        .map_or(0, |i| i + 1);
    let segment = &text[segment_start..offset];
    let partial_len = segment
        .chars()
        .rev()
        .take_while(|c| is_word(*c))
        .map(char::len_utf8)
        .sum::<usize>();
    let partial = &segment[segment.len() - partial_len..];
    let before = &segment[..segment.len() - partial_len];
    let before = before.split('#').next().unwrap_or_default();
    if segment.contains('#') || segment.matches('"').count() % 2 == 1 {
        return Vec::new(); // in a comment or a string
    }
    let words: Vec<&str> = before
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    let replace = Span::new(offset - partial_len, offset);
    let rest_len = text[offset..]
        .chars()
        .take_while(|c| is_word(*c))
        .map(char::len_utf8)
        .sum::<usize>();
    let mut out = Completions {
        items: Vec::new(),
        replace,
        word: Span::new(replace.start, offset + rest_len),
        partial,
    };
    let numeric = !partial.is_empty() && partial.chars().all(|c| c.is_ascii_digit() || c == '_');

    match (context, words.as_slice()) {
        (Context::TopLevel, []) => {
            // An item that may appear once is not offered again, unless the
            // one the file has is the one being rewritten at the cursor.
            let declared = declared_once(file, offset);
            for keyword in statements::item_keywords().filter(|k| !declared.contains(k)) {
                out.keyword(keyword, CompletionKind::Keyword);
            }
        }
        (Context::TopLevel, ["protocol"]) => {
            for revision in ProtocolRevision::ALL {
                out.value(revision.as_str(), "MCP revision");
            }
        }
        (Context::TopLevel, ["identity", listed @ ..]) => {
            for field in IDENTITY_FIELDS.iter().filter(|f| !listed.contains(f)) {
                out.value(field, "sampling/createMessage param");
            }
        }
        (Context::TopLevel, ["reason"]) => {
            for b in builtin::ALL {
                out.push(
                    b.name,
                    CompletionKind::Reason,
                    Some("built-in reason"),
                    Some(b.summary.to_owned()),
                    b.name.to_owned(),
                );
            }
        }
        (Context::Policy, []) => {
            for statement in Statement::ALL
                .iter()
                .filter(|s| s.repeatable() || !stated.iter().any(|k| k == s.keyword()))
            {
                out.keyword(statement.keyword(), CompletionKind::Statement);
            }
        }
        (Context::Reason, []) => {
            for keyword in statements::reason_keywords().filter(|k| !stated.iter().any(|s| s == k))
            {
                out.keyword(keyword, CompletionKind::Statement);
            }
        }
        (Context::Policy, [.., "as"]) => {
            let index = symbol_index(db, source);
            let mut names: Vec<&str> = index.reason_defs.iter().map(|d| d.name.as_str()).collect();
            names.extend(
                builtin::ALL
                    .iter()
                    .filter(|b| b.outcome == builtin::Outcome::Deny)
                    .map(|b| b.name),
            );
            names.sort_unstable();
            names.dedup();
            for name in names {
                let (detail, doc) = match builtin::get(name) {
                    Some(b) => ("built-in reason", Some(b.summary.to_owned())),
                    None => ("declared reason", None),
                };
                out.push(
                    name,
                    CompletionKind::Reason,
                    Some(detail),
                    doc,
                    name.to_owned(),
                );
            }
        }
        (Context::Policy, [statement, rest @ ..]) => {
            if let Some(statement) = Statement::from_keyword(statement) {
                policy_values(&mut out, statement, rest, numeric);
            }
        }
        (Context::Reason, [statement, rest @ ..]) => match (*statement, rest.len()) {
            ("retryable", 0) => out.values("retryable"),
            ("ttl", 0) => {
                out.values("ttl");
                if numeric {
                    out.units(statements::DURATION_UNITS, true);
                }
            }
            _ => {}
        },
        _ => {}
    }
    out.items
}

/// What may follow the words `rest` of `statement`, by the shape of its values.
fn policy_values(out: &mut Completions<'_>, statement: Statement, rest: &[&str], numeric: bool) {
    let decl = statement.decl();
    let as_clause = |out: &mut Completions<'_>| {
        if decl.denies() {
            out.keyword("as", CompletionKind::Keyword);
        }
    };
    let joined_number = rest
        .last()
        .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit() || c == '_'));
    match (decl.shape, rest.len()) {
        (Shape::Switch | Shape::Word, 0) => out.values(decl.keyword()),
        (Shape::Switch, 1) => as_clause(out),
        (Shape::Quantity(Unit::Size), 0) if numeric => out.units(statements::SIZE_UNITS, false),
        (Shape::Quantity(Unit::Size), 1) if joined_number => {
            out.units(statements::SIZE_UNITS, true);
        }
        (Shape::Quantity(Unit::Size), 1 | 2) => as_clause(out),
        (Shape::Quantity(unit), 0) if numeric => out.units(unit.suffixes(), true),
        (Shape::Quantity(_), 1) => as_clause(out),
        (Shape::Rate | Shape::Budget, 0) if numeric => {
            out.units(statements::COUNT_SUFFIXES, true);
        }
        (Shape::Rate, 1) | (Shape::Budget, 2) => out.keyword("per", CompletionKind::Keyword),
        (Shape::Rate, 2) if numeric => out.units(statements::DURATION_UNITS, true),
        (Shape::Rate, 3) | (Shape::Budget, 4) => as_clause(out),
        (Shape::Budget, 1) => out.values("metric"),
        (Shape::Budget, 3) => {
            out.values("calendar");
            if numeric {
                out.units(statements::DURATION_UNITS, true);
            }
        }
        _ => {}
    }
}

struct Completions<'a> {
    items: Vec<CompletionItem>,
    replace: Span,
    word: Span,
    partial: &'a str,
}

impl Completions<'_> {
    fn push(
        &mut self,
        label: &str,
        kind: CompletionKind,
        detail: Option<&str>,
        documentation: Option<String>,
        insert: String,
    ) {
        self.items.push(CompletionItem {
            label: label.to_owned(),
            kind,
            detail: detail.map(str::to_owned),
            documentation,
            replace: self.replace,
            word: self.word,
            filter: insert.clone(),
            insert,
        });
    }

    fn keyword(&mut self, keyword: &str, kind: CompletionKind) {
        let doc = docs::keyword(keyword);
        self.push(
            keyword,
            kind,
            doc.map(|d| d.syntax),
            doc.map(|d| {
                let mut md = d.meaning.to_owned();
                if !d.outcome.is_empty() {
                    md.push_str(&format!("\n\nOutcome: {}.", d.outcome));
                }
                md
            }),
            keyword.to_owned(),
        );
    }

    fn value(&mut self, value: &str, detail: &str) {
        self.push(
            value,
            CompletionKind::Value,
            Some(detail),
            None,
            value.to_owned(),
        );
    }

    fn values(&mut self, statement: &str) {
        for (value, meaning) in docs::values(statement) {
            self.push(
                value,
                CompletionKind::Value,
                Some(meaning),
                None,
                (*value).to_owned(),
            );
        }
    }

    /// Units after a number: joined to the number typed so far (`60` → `60s`),
    /// or on their own after a number already written.
    fn units(&mut self, units: &[&str], joined: bool) {
        for unit in units {
            let meaning = docs::unit(unit).map(|(m, _)| m);
            let number = self.partial.chars().all(|c| c.is_ascii_digit() || c == '_');
            let insert = if self.partial.is_empty() || !number {
                (*unit).to_owned()
            } else if joined {
                format!("{}{unit}", self.partial)
            } else {
                format!("{} {unit}", self.partial)
            };
            self.push(unit, CompletionKind::Unit, meaning, None, insert);
        }
    }
}
