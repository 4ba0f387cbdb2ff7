//! The formatter: one canonical layout for every `.mcpolicy` file.
//!
//! It works from the typed syntax tree plus the list of comments the parser
//! keeps, and refuses a file with syntax errors rather than guess what it
//! meant. The layout:
//!
//! - Items stay in the order written (the version line wherever it was
//!   written); one item per line; `;` separators become line breaks. Output
//!   uses `\n` line breaks (CRLF and lone CR are read as breaks), no byte-order
//!   mark, no trailing whitespace, and ends with exactly one `\n` (an empty
//!   file stays empty).
//! - Blank lines: a run of blank lines (lines holding only whitespace or `;`)
//!   between two items, statements or full-line comments becomes one blank
//!   line; none is kept at the start or end of the file or of a block. An
//!   item that takes more than one line (every non-empty `defaults` and
//!   `server` block, a multi-line `reason`) always has a blank line before it
//!   (before its leading comments) and after it.
//! - Blocks: `server "id" {`, each statement on its own line indented two
//!   spaces, `}`. A block with no statements and no comments inside is
//!   `defaults {}`.
//! - `reason` declarations stay on one line, `reason r { retryable true; ttl 60s }`,
//!   when they have at most four properties and no comment inside the braces;
//!   otherwise they are laid out like other blocks.
//! - Inside statements: single spaces between tokens, `, ` in lists,
//!   `as r` after the values.
//! - Quantities: durations and counts joined (`60s`, `200k`), sizes apart
//!   (`64 KiB`). Integers keep the digits and `_` separators written.
//! - Strings are re-quoted from their value: `\\`, `\"`, `\n`, `\t`, and
//!   every other control character as `\u{HEX}` (upper-case hex); every other
//!   character is written as itself.
//! - Comments are never dropped or reworded (trailing whitespace aside). A
//!   comment alone on its line stays above the item or statement that
//!   follows it, at that item's indentation, or at the end of its block or
//!   of the file when nothing follows. A comment after code stays on that
//!   line, two spaces after the last element the line holds: an item, a
//!   statement, a block's `{` or its `}`.
//!
//! Formatting is idempotent and never changes meaning: the formatted file
//! lowers to the same table (the tests in `compiler/tests/format.rs` check
//! both on every case).

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::check;
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::parse::{self, Parsed};
use crate::statements::{Shape, Unit};
use crate::syntax::*;

/// Why a file was not formatted: it has syntax errors, and the formatter
/// does not guess what was meant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the file has {} syntax error{}",
    .diagnostics.len(),
    if .diagnostics.len() == 1 { "" } else { "s" }
)]
pub struct FormatError {
    /// The syntax findings (unreadable items and statements, unclosed
    /// blocks, lexical errors), in source order.
    pub diagnostics: Vec<Diagnostic>,
}

/// Formats a policy, or says why it cannot: the text must parse with no
/// unreadable item or statement, no unclosed block and no lexical finding.
pub fn format(text: &str) -> Result<String, FormatError> {
    format_parsed(&parse::parse(text), text)
}

/// `format` over a tree already parsed from `text` (the language server
/// keeps one in its database).
pub fn format_parsed(parsed: &Parsed, text: &str) -> Result<String, FormatError> {
    let problems = syntax_problems(&parsed.file);
    if parsed.diagnostics.is_empty() && problems.is_empty() {
        return Ok(format_file(&parsed.file, text));
    }
    let mut diagnostics = parsed.diagnostics.clone();
    if !problems.is_empty() {
        let checked = check::check(&parsed.file).diagnostics;
        for problem in &problems {
            let found: Vec<&Diagnostic> =
                checked.iter().filter(|d| problem.explained_by(d)).collect();
            if found.is_empty() {
                diagnostics.push(problem.fallback());
            }
            diagnostics.extend(found.into_iter().cloned());
        }
    }
    diagnostics.sort_by_key(|d| (d.span.start, d.span.end, d.code));
    diagnostics.dedup();
    Err(FormatError { diagnostics })
}

/// Whether `text` is already in canonical layout. A file with syntax errors
/// is reported as the error `format` gives.
pub fn is_formatted(text: &str) -> Result<bool, FormatError> {
    format(text).map(|formatted| formatted == text)
}

/// Lays out a parsed file. `text` is the source `file` was parsed from (the
/// comments' and blank lines' positions are read from it). The file should
/// be free of syntax errors (`format` checks); unreadable items and
/// statements are copied as written, and a missing `}` is supplied.
pub fn format_file(file: &SourceFile, text: &str) -> String {
    Formatter::new(file, text).run()
}

/// A syntax error the formatter refuses to format over.
enum Problem {
    BadItem(Span),
    BadStmt(Span),
    Unclosed(Span),
}

impl Problem {
    fn explained_by(&self, diagnostic: &Diagnostic) -> bool {
        match self {
            Problem::BadItem(span) | Problem::BadStmt(span) => {
                // Findings about the text the grammar could not read; an
                // empty span (such as "no version line" at offset 0) is a
                // consequence, not the error itself.
                diagnostic.severity() == crate::codes::Severity::Error
                    && !diagnostic.span.is_empty()
                    && span.start <= diagnostic.span.start
                    && diagnostic.span.end <= span.end
            }
            Problem::Unclosed(open) => diagnostic.code == Code::E0003 && diagnostic.span == *open,
        }
    }

    fn fallback(&self) -> Diagnostic {
        match self {
            Problem::BadItem(span) => Diagnostic::new(
                Code::E0001,
                *span,
                "unreadable top-level item",
                "not an item",
            ),
            Problem::BadStmt(span) => Diagnostic::new(
                Code::E0002,
                *span,
                "unreadable statement",
                "not a statement",
            ),
            Problem::Unclosed(span) => Diagnostic::new(
                Code::E0003,
                *span,
                "unclosed block",
                "this `{` is not closed",
            ),
        }
    }
}

fn syntax_problems(file: &SourceFile) -> Vec<Problem> {
    fn block<S>(problems: &mut Vec<Problem>, block: &Block<S>, bad: impl Fn(&S) -> Option<Span>) {
        problems.extend(
            block
                .stmts
                .iter()
                .filter_map(|s| bad(s).map(Problem::BadStmt)),
        );
        if block.close.is_none() {
            problems.push(Problem::Unclosed(block.open));
        }
    }
    let policy = |s: &Stmt| matches!(s.kind, StmtKind::Bad(_)).then_some(s.span);
    let mut problems = Vec::new();
    for item in &file.items {
        match &item.kind {
            ItemKind::Bad(_) => problems.push(Problem::BadItem(item.span)),
            ItemKind::Reason(decl) => block(&mut problems, &decl.body, |s: &ReasonStmt| {
                matches!(s.kind, ReasonStmtKind::Bad(_)).then_some(s.span)
            }),
            ItemKind::Defaults(body) => block(&mut problems, body, policy),
            ItemKind::Server(decl) => block(&mut problems, &decl.body, policy),
            _ => {}
        }
    }
    problems
}

/// Where a comment is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Anchor {
    /// A whole item (simple items), or above an item (leading comments).
    Item(usize),
    /// A block's `{` line.
    Open(usize),
    /// A block's `}` line.
    Close(usize),
    /// A statement of item `.0`'s block.
    Stmt(usize, usize),
    /// The end of item `.0`'s block, after its last statement.
    BlockEnd(usize),
    /// The end of the file.
    FileEnd,
}

/// One output line: its text (indentation included) and whether a blank
/// line precedes it.
struct Line {
    text: String,
    blank_before: bool,
}

/// A block's statements, already rendered, with their spans.
struct BlockView {
    item: usize,
    head: String,
    stmts: Vec<(Span, String)>,
    /// At most this many statements, and no comment inside, keep it on one line.
    one_line_max: usize,
}

struct Formatter<'a> {
    file: &'a SourceFile,
    text: &'a str,
    leading: HashMap<Anchor, Vec<&'a Comment>>,
    trailing: HashMap<Anchor, Vec<&'a Comment>>,
}

impl<'a> Formatter<'a> {
    fn new(file: &'a SourceFile, text: &'a str) -> Self {
        let mut formatter = Formatter {
            file,
            text,
            leading: HashMap::new(),
            trailing: HashMap::new(),
        };
        formatter.attach_comments();
        formatter
    }

    /// Where code ends inside `span`: before any comment and trailing blanks.
    fn code_end(&self, span: Span) -> usize {
        let comments = &self.file.comments;
        let first = comments.partition_point(|c| c.span.start < span.start);
        let end = comments
            .get(first)
            .filter(|c| c.span.start < span.end)
            .map_or(span.end, |c| c.span.start);
        let end = end.min(self.text.len()).max(span.start);
        let code = self.text.get(span.start..end).unwrap_or("");
        span.start + code.trim_end_matches(is_blank_char).len()
    }

    /// Every place a trailing comment can hang from, with where its code ends.
    fn anchors(&self) -> Vec<(usize, Anchor)> {
        let mut anchors = Vec::new();
        for (i, item) in self.file.items.iter().enumerate() {
            match block_parts(item) {
                Some((open, close, stmts)) => {
                    anchors.push((open.end, Anchor::Open(i)));
                    for (j, span) in stmts.into_iter().enumerate() {
                        anchors.push((self.code_end(span), Anchor::Stmt(i, j)));
                    }
                    if let Some(close) = close {
                        anchors.push((close.end, Anchor::Close(i)));
                    }
                }
                None => anchors.push((self.code_end(item.span), Anchor::Item(i))),
            }
        }
        anchors.sort_by_key(|(end, _)| *end);
        anchors
    }

    /// Decides, for every comment, what it belongs to.
    fn attach_comments(&mut self) {
        let anchors = self.anchors();
        let file = self.file;
        for comment in &file.comments {
            let start = comment.span.start;
            let before = self.text.get(..start).unwrap_or("");
            let line_start = before.rfind(['\n', '\r']).map_or(0, |i| i + 1);
            let alone = before[line_start..].chars().all(is_blank_char);
            if !alone {
                let before = anchors.partition_point(|(end, _)| *end <= start);
                if let Some((_, anchor)) = before.checked_sub(1).and_then(|k| anchors.get(k)) {
                    self.trailing.entry(*anchor).or_default().push(comment);
                    continue;
                }
            }
            let anchor = self.leading_anchor(start);
            self.leading.entry(anchor).or_default().push(comment);
        }
    }

    /// The item or statement a full-line comment at `offset` sits above.
    fn leading_anchor(&self, offset: usize) -> Anchor {
        let items = &self.file.items;
        let next = items.partition_point(|item| item.span.start <= offset);
        if let Some(i) = next.checked_sub(1)
            && let Some((open, close, stmts)) = block_parts(&items[i])
        {
            let end = close.map_or(items[i].span.end, |c| c.start);
            if open.end <= offset && offset < end {
                return stmts
                    .iter()
                    .position(|s| s.start > offset)
                    .map_or(Anchor::BlockEnd(i), |j| Anchor::Stmt(i, j));
            }
        }
        if next < items.len() {
            Anchor::Item(next)
        } else {
            Anchor::FileEnd
        }
    }

    /// Whether the user left a blank line right before `offset`.
    fn blank_before(&self, offset: usize) -> bool {
        let before = self.text.get(..offset).unwrap_or(self.text);
        let gap = &before[before
            .trim_end_matches(|c| is_blank_char(c) || c == '\n' || c == '\r')
            .len()..];
        let breaks = gap.matches('\n').count()
            + gap
                .match_indices('\r')
                .filter(|(i, _)| !gap[i + 1..].starts_with('\n'))
                .count();
        breaks >= 2
    }

    fn comment_lines(&self, anchor: Anchor, indent: &str, lines: &mut Vec<Line>) {
        for comment in self.leading.get(&anchor).into_iter().flatten() {
            lines.push(Line {
                text: format!("{indent}{}", comment.text.trim_end()),
                blank_before: self.blank_before(comment.span.start),
            });
        }
    }

    fn with_trailing(&self, anchor: Anchor, mut text: String) -> String {
        for comment in self.trailing.get(&anchor).into_iter().flatten() {
            text.push_str("  ");
            text.push_str(comment.text.trim_end());
        }
        text
    }

    fn has_comments(&self, anchor: Anchor) -> bool {
        self.leading.contains_key(&anchor) || self.trailing.contains_key(&anchor)
    }

    fn run(&self) -> String {
        let mut lines: Vec<Line> = Vec::new();
        let mut previous_multi_line = false;
        for (i, item) in self.file.items.iter().enumerate() {
            let group = lines.len();
            self.comment_lines(Anchor::Item(i), "", &mut lines);
            let mut body = self.item_lines(i, item);
            if let Some(first) = body.first_mut() {
                first.blank_before = self.blank_before(item.span.start);
            }
            let multi_line = body.len() > 1;
            lines.extend(body);
            if (multi_line || previous_multi_line)
                && let Some(first) = lines.get_mut(group)
            {
                first.blank_before = true;
            }
            previous_multi_line = multi_line;
        }
        let group = lines.len();
        self.comment_lines(Anchor::FileEnd, "", &mut lines);
        if previous_multi_line && let Some(first) = lines.get_mut(group) {
            first.blank_before = true;
        }
        let mut out = String::with_capacity(self.text.len() + 16);
        for (k, line) in lines.iter().enumerate() {
            if k > 0 && line.blank_before {
                out.push('\n');
            }
            out.push_str(&line.text);
            out.push('\n');
        }
        out
    }

    fn item_lines(&self, i: usize, item: &Item) -> Vec<Line> {
        let simple = |text: String| {
            vec![Line {
                text: self.with_trailing(Anchor::Item(i), text),
                blank_before: false,
            }]
        };
        let view = match &item.kind {
            ItemKind::Version(int) => return simple(format!("mcpolicy {}", int.text)),
            ItemKind::Protocol(revision) => return simple(format!("protocol {}", revision.value)),
            ItemKind::ErrorCode(int) => return simple(format!("error_code {}", int.text)),
            ItemKind::Identity(fields) => {
                let fields: Vec<&str> = fields.iter().map(|f| f.value.as_str()).collect();
                return simple(format!("identity {}", fields.join(", ")));
            }
            ItemKind::Bad(text) => return simple(text.trim().to_owned()),
            ItemKind::Reason(decl) => BlockView {
                item: i,
                head: format!("reason {}", decl.name.value),
                stmts: decl
                    .body
                    .stmts
                    .iter()
                    .map(|s| (s.span, reason_stmt(&s.kind)))
                    .collect(),
                one_line_max: 4,
            },
            ItemKind::Defaults(body) => BlockView {
                item: i,
                head: "defaults".to_owned(),
                stmts: body
                    .stmts
                    .iter()
                    .map(|s| (s.span, policy_stmt(&s.kind)))
                    .collect(),
                one_line_max: 0,
            },
            ItemKind::Server(decl) => BlockView {
                item: i,
                head: format!("server {}", quote(&decl.pattern.value)),
                stmts: decl
                    .body
                    .stmts
                    .iter()
                    .map(|s| (s.span, policy_stmt(&s.kind)))
                    .collect(),
                one_line_max: 0,
            },
        };
        self.block_lines(&view)
    }

    fn block_lines(&self, view: &BlockView) -> Vec<Line> {
        let i = view.item;
        let commented = self.trailing.contains_key(&Anchor::Open(i))
            || self.leading.contains_key(&Anchor::BlockEnd(i))
            || (0..view.stmts.len()).any(|j| self.has_comments(Anchor::Stmt(i, j)));
        if !commented && view.stmts.len() <= view.one_line_max {
            let inner: Vec<&str> = view.stmts.iter().map(|(_, s)| s.as_str()).collect();
            let text = if inner.is_empty() {
                format!("{} {{}}", view.head)
            } else {
                format!("{} {{ {} }}", view.head, inner.join("; "))
            };
            return vec![Line {
                text: self.with_trailing(Anchor::Close(i), text),
                blank_before: false,
            }];
        }
        let mut lines = vec![Line {
            text: self.with_trailing(Anchor::Open(i), format!("{} {{", view.head)),
            blank_before: false,
        }];
        let inner = lines.len();
        for (j, (span, text)) in view.stmts.iter().enumerate() {
            self.comment_lines(Anchor::Stmt(i, j), "  ", &mut lines);
            lines.push(Line {
                text: self.with_trailing(Anchor::Stmt(i, j), format!("  {text}")),
                blank_before: self.blank_before(span.start),
            });
        }
        self.comment_lines(Anchor::BlockEnd(i), "  ", &mut lines);
        if let Some(first) = lines.get_mut(inner) {
            first.blank_before = false;
        }
        lines.push(Line {
            text: self.with_trailing(Anchor::Close(i), "}".to_owned()),
            blank_before: false,
        });
        lines
    }
}

/// A block item's `{`, `}` and statement spans; `None` for other items.
fn block_parts(item: &Item) -> Option<(Span, Option<Span>, Vec<Span>)> {
    fn parts<S>(
        block: &Block<S>,
        span: impl Fn(&S) -> Span,
    ) -> Option<(Span, Option<Span>, Vec<Span>)> {
        Some((
            block.open,
            block.close,
            block.stmts.iter().map(span).collect(),
        ))
    }
    match &item.kind {
        ItemKind::Reason(decl) => parts(&decl.body, |s| s.span),
        ItemKind::Defaults(body) => parts(body, |s| s.span),
        ItemKind::Server(decl) => parts(&decl.body, |s| s.span),
        _ => None,
    }
}

/// Whitespace the grammar skips inside a line, and the `;` separator.
fn is_blank_char(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{FEFF}' | ';')
}

/// A statement in canonical layout: its keyword, then its values by shape.
fn policy_stmt(kind: &StmtKind) -> String {
    let (statement, args) = match kind {
        StmtKind::Known(statement, args) => (statement, args),
        StmtKind::Bad(bad) => return bad.text.trim().to_owned(),
    };
    let mut out = statement.keyword().to_owned();
    out.push(' ');
    match args {
        Args::Switch(on, _) => out.push_str(if on.value { "on" } else { "off" }),
        Args::Word(word) => out.push_str(&word.value),
        Args::Quantity(q, _) if statement.decl().shape == Shape::Quantity(Unit::Size) => {
            out.push_str(&apart(q));
        }
        Args::Quantity(q, _) => out.push_str(&joined(q)),
        Args::Rate { count, window, .. } => {
            let _ = write!(out, "{} per {}", joined(count), joined(window));
        }
        Args::Budget {
            limit,
            metric,
            window,
            ..
        } => {
            let window = match window {
                WindowSyntax::Calendar(unit) => unit.value.clone(),
                WindowSyntax::Rolling(duration) => joined(duration),
            };
            let _ = write!(out, "{} {} per {window}", joined(limit), metric.value);
        }
        Args::Strings(strings) => {
            let quoted: Vec<String> = strings.iter().map(|s| quote(&s.value)).collect();
            out.push_str(&quoted.join(", "));
        }
    }
    if let Some(reason) = args.reason() {
        out.push_str(" as ");
        out.push_str(&reason.value);
    }
    out
}

fn reason_stmt(kind: &ReasonStmtKind) -> String {
    match kind {
        ReasonStmtKind::Retryable(b) => format!("retryable {}", b.value),
        ReasonStmtKind::Ttl(TtlSyntax::Duration(d)) => format!("ttl {}", joined(d)),
        ReasonStmtKind::Ttl(TtlSyntax::Keyword(k)) => format!("ttl {}", k.value),
        ReasonStmtKind::Message(m) => format!("message {}", quote(&m.value)),
        ReasonStmtKind::Code(c) => format!("code {}", c.text),
        ReasonStmtKind::Bad(bad) => bad.text.trim().to_owned(),
    }
}

/// A count or duration: `200k`, `60s`.
fn joined(q: &Quantity) -> String {
    match &q.unit {
        Some(unit) => format!("{}{}", q.number.text, unit.value),
        None => q.number.text.clone(),
    }
}

/// A size: `64 KiB`.
fn apart(q: &Quantity) -> String {
    match &q.unit {
        Some(unit) => format!("{} {}", q.number.text, unit.value),
        None => q.number.text.clone(),
    }
}

/// A string literal for `value`, escaped the one canonical way.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:X}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    fn check(input: &str, expected: Expect) {
        let formatted = format(input).expect("formats");
        expected.assert_eq(&formatted);
        assert_eq!(format(&formatted).expect("formats again"), formatted);
    }

    #[test]
    fn a_complete_policy_in_every_spacing() {
        check(
            r#"mcpolicy 1
error_code -32010                      # implementation-defined band
identity systemPrompt,messages ,  includeContext, modelPreferences

reason policy.rate_limit        { retryable true;  ttl 60s }
reason policy.budget_exhausted  { retryable false; ttl until_reset }
defaults {
  max_context thisServer               # wider requests are trimmed, not denied
  max_input 64KiB ; max_tokens 4096


  rate 30 per 1m
}
server "release-notes" { budget 50 requests per day; budget 200k tokens per 24h }  # rn
server "github-*" {}
# the end
"#,
            expect![[r#"
                mcpolicy 1
                error_code -32010  # implementation-defined band
                identity systemPrompt, messages, includeContext, modelPreferences

                reason policy.rate_limit { retryable true; ttl 60s }
                reason policy.budget_exhausted { retryable false; ttl until_reset }

                defaults {
                  max_context thisServer  # wider requests are trimmed, not denied
                  max_input 64 KiB
                  max_tokens 4096

                  rate 30 per 1m
                }

                server "release-notes" {
                  budget 50 requests per day
                  budget 200k tokens per 24h
                }  # rn

                server "github-*" {}
                # the end
            "#]],
        );
    }

    #[test]
    fn trailing_comment_goes_to_the_last_element_of_its_line() {
        check(
            "mcpolicy 1; protocol 2025-11-25  # both\nserver \"a\" { sampling off; tools off  # tools\n}\n",
            expect![[r#"
                mcpolicy 1
                protocol 2025-11-25  # both

                server "a" {
                  sampling off
                  tools off  # tools
                }
            "#]],
        );
    }

    #[test]
    fn reason_layout_depends_on_size_and_comments() {
        check(
            "reason a.b {\n  retryable true\n  ttl 1s\n}\nreason a.c { # why\n  ttl 2s }\nreason a.d { ttl 1s; ttl 2s; ttl 3s; ttl 4s; ttl 5s }\n",
            expect![[r#"
                reason a.b { retryable true; ttl 1s }

                reason a.c {  # why
                  ttl 2s
                }

                reason a.d {
                  ttl 1s
                  ttl 2s
                  ttl 3s
                  ttl 4s
                  ttl 5s
                }
            "#]],
        );
    }

    #[test]
    fn quantities_and_lists() {
        check(
            "defaults { max_input 64KiB; max_input 1\tMiB ;rate 1_0 per 1m; models \"a\",\"b\" }\n",
            expect![[r#"
                defaults {
                  max_input 64 KiB
                  max_input 1 MiB
                  rate 1_0 per 1m
                  models "a", "b"
                }
            "#]],
        );
    }

    #[test]
    fn strings_are_requoted_canonically() {
        assert_eq!(quote("plain"), r#""plain""#);
        assert_eq!(quote("a\\b\"c"), r#""a\\b\"c""#);
        assert_eq!(
            quote("\n\t\r\0\u{7f}\u{85}é😀"),
            r#""\n\t\u{D}\u{0}\u{7F}\u{85}é😀""#
        );
        check(
            "server \"\\u{41}\\u{9}\" {}\n",
            expect![[r#"
                server "A\t" {}
            "#]],
        );
    }

    #[test]
    fn refuses_broken_files_with_their_diagnostics() {
        let error = format("mcpolicy 1\nserver \"a\" {\n  sampling off\n").expect_err("unclosed");
        assert_eq!(error.diagnostics.len(), 1);
        assert_eq!(error.diagnostics[0].code, Code::E0003);
        assert_eq!(error.to_string(), "the file has 1 syntax error");
        assert!(format("mcpolicy 1\nservr \"x\" {}\n").is_err());
        assert!(format("mcpolicy 1\ndefaults { max_tokens lots }\n").is_err());
        assert!(format("mcpolicy 1\nserver \"\\q\" {}\n").is_err());
        assert_eq!(format(""), Ok(String::new()));
        assert_eq!(is_formatted("mcpolicy 1\n"), Ok(true));
        assert_eq!(is_formatted("mcpolicy  1\n"), Ok(false));
    }
}
