//! Inline suppressions (`docs/spec/language.md`, "Suppressing a warning"):
//! a comment `# mcpolicy: allow W0305` silences the named warnings on its
//! line, or, on a line of its own, in the item or statement that follows it
//! (a whole block when a block follows). Errors are never suppressed. A
//! suppression that silences nothing, or names something that is not a
//! warning code, is itself a finding (W0701, W0702), which cannot be
//! suppressed.

use crate::codes::{Code, Severity};
use crate::diagnostic::{Diagnostic, Vocabulary};
use crate::syntax::{Comment, ItemKind, SourceFile, Span};

/// What starts a suppression comment, after `#` and blanks.
pub(super) const PREFIX: &str = "mcpolicy:";

/// One code named by a suppression.
struct Named {
    code: Option<Code>,
    text: String,
    span: Span,
}

/// A parsed suppression comment.
struct Suppression<'a> {
    comment: &'a Comment,
    /// The source the suppression covers.
    covers: Span,
    names: Vec<Named>,
}

/// Whether a code can be suppressed: warnings, except the findings about
/// suppressions themselves.
pub(super) fn suppressible(code: Code) -> bool {
    code.severity() == Severity::Warning && !matches!(code, Code::W0701 | Code::W0702)
}

/// Drops the findings that suppressions cover, and adds the findings about
/// the suppressions. `diagnostics` stays in source order.
pub(super) fn apply(file: &SourceFile, diagnostics: &mut Vec<Diagnostic>) {
    let mut suppressions = Vec::new();
    let mut findings = Vec::new();
    for comment in &file.comments {
        if let Some(parsed) = parse(file, comment, &mut findings) {
            suppressions.push(parsed);
        }
    }
    if suppressions.is_empty() && findings.is_empty() {
        return;
    }
    let mut used: Vec<Vec<bool>> = suppressions
        .iter()
        .map(|s| vec![false; s.names.len()])
        .collect();
    diagnostics.retain(|d| {
        if !suppressible(d.code) {
            return true;
        }
        let mut silenced = false;
        for (s, used) in suppressions.iter().zip(used.iter_mut()) {
            if !(s.covers.start <= d.span.start && d.span.start < s.covers.end) {
                continue;
            }
            for (name, used) in s.names.iter().zip(used.iter_mut()) {
                if name.code == Some(d.code) {
                    *used = true;
                    silenced = true;
                }
            }
        }
        !silenced
    });
    for (s, used) in suppressions.iter().zip(&used) {
        let live: Vec<&str> = s
            .names
            .iter()
            .zip(used)
            .filter(|(n, u)| **u || n.code.is_none())
            .map(|(n, _)| n.text.as_str())
            .collect();
        for (name, _) in s
            .names
            .iter()
            .zip(used)
            .filter(|(n, u)| !**u && n.code.is_some())
        {
            let fix = if live.is_empty()
                && s.names
                    .iter()
                    .zip(used)
                    .all(|(n, u)| !u && n.code.is_some())
            {
                (
                    "remove the suppression".to_owned(),
                    s.comment.removal,
                    String::new(),
                )
            } else {
                let kept: Vec<&str> = s
                    .names
                    .iter()
                    .filter(|n| n.span != name.span)
                    .map(|n| n.text.as_str())
                    .collect();
                (
                    format!("stop allowing `{}`", name.text),
                    s.comment.span,
                    rewrite(&s.comment.text, &kept),
                )
            };
            let at = if s.comment.own_line {
                "in what follows"
            } else {
                "on this line"
            };
            findings.push(
                Diagnostic::new(
                    Code::W0701,
                    name.span,
                    format!("`# mcpolicy: allow {}` suppresses nothing: no {} {at}", name.text, name.text),
                    "suppresses nothing",
                )
                .help("remove it: a stale suppression would hide the warning when it comes back somewhere unexpected")
                .fix(fix.0, fix.1, fix.2),
            );
        }
    }
    diagnostics.extend(findings);
    diagnostics.sort_by_key(|d| (d.span.start, d.span.end, d.code));
}

/// The comment with `codes` as its list, its tail (`-- why`) kept.
fn rewrite(comment: &str, codes: &[&str]) -> String {
    let tail = comment.find("--").map_or("", |at| &comment[at..]);
    let mut out = format!("# {PREFIX} allow {}", codes.join(", "));
    if !tail.is_empty() {
        out.push(' ');
        out.push_str(tail);
    }
    out
}

/// The text after `# mcpolicy:`, if the comment starts so.
fn after_prefix(text: &str) -> Option<&str> {
    text.strip_prefix('#')?.trim_start().strip_prefix(PREFIX)
}

/// Whether `comment` is a suppression, well-formed or not.
pub(super) fn is_suppression(comment: &Comment) -> bool {
    after_prefix(&comment.text).is_some()
}

/// Reads a comment; `None` when it is not a suppression, or names nothing
/// that can be suppressed (its findings pushed).
fn parse<'a>(
    file: &SourceFile,
    comment: &'a Comment,
    findings: &mut Vec<Diagnostic>,
) -> Option<Suppression<'a>> {
    let text = comment.text.as_str();
    let rest = after_prefix(text)?;
    let offset_of = |part: &str| part.as_ptr() as usize - text.as_ptr() as usize;
    let rest_trimmed = rest.trim_start();
    let Some(list) = rest_trimmed.strip_prefix("allow") else {
        let word: String = rest_trimmed
            .chars()
            .take_while(|c| c.is_alphanumeric())
            .collect();
        let start = comment.span.start + offset_of(rest_trimmed);
        findings.push(
            Diagnostic::new(
                Code::W0702,
                Span::new(start, start + word.len()),
                format!("`# {PREFIX}` expects `allow CODE`, found `{word}`"),
                "not a suppression",
            )
            .help(format!("write `# {PREFIX} allow W0305` (a warning code), or drop `{PREFIX}` from an ordinary comment")),
        );
        return None;
    };
    // The list ends at `--`, where an explanation may follow.
    let list = list.split("--").next().unwrap_or_default();
    let mut names = Vec::new();
    let mut at = offset_of(list);
    for part in list.split([',', ' ', '\t']) {
        let start = at;
        at += part.len() + 1;
        if part.is_empty() {
            continue;
        }
        let span = Span::new(
            comment.span.start + start,
            comment.span.start + start + part.len(),
        );
        let code = Code::parse(part);
        match code {
            Some(code) if suppressible(code) => names.push(Named {
                code: Some(code),
                text: code.as_str().to_owned(),
                span,
            }),
            Some(code) if code.severity() == Severity::Error => findings.push(
                Diagnostic::new(
                    Code::W0702,
                    span,
                    format!("{code} is an error, and errors cannot be suppressed"),
                    "an error",
                )
                .help(format!(
                    "fix the error instead (`mcpc explain {code}`); only warnings can be allowed"
                )),
            ),
            Some(code) => findings.push(
                Diagnostic::new(
                    Code::W0702,
                    span,
                    format!("{code} is about suppressions and cannot itself be suppressed"),
                    "cannot be suppressed",
                )
                .help("remove or correct the suppression it reports"),
            ),
            None => {
                let warnings: Vec<&str> = Code::ALL
                    .iter()
                    .filter(|c| suppressible(**c))
                    .map(|c| c.as_str())
                    .collect();
                let d = Diagnostic::new(
                    Code::W0702,
                    span,
                    format!("`{part}` is not a diagnostic code"),
                    "unknown code",
                )
                .suggest(part, warnings, span, Vocabulary::Name, str::to_owned)
                .unwrap_or_else(|d| {
                    d.help("name a warning code, like `W0305`; `mcpc explain CODE` describes each")
                });
                findings.push(d);
            }
        }
    }
    if names.is_empty() {
        if !list.split([',', ' ', '\t']).any(|p| !p.is_empty()) {
            findings.push(
                Diagnostic::new(
                    Code::W0702,
                    comment.span,
                    "the suppression names no code",
                    "allows nothing",
                )
                .help(format!("name the warning: `# {PREFIX} allow W0305`")),
            );
        }
        return None;
    }
    Some(Suppression {
        comment,
        covers: covered(file, comment),
        names,
    })
}

/// The source a suppression covers: its line before it, or, on a line of
/// its own, the item or statement that follows it.
fn covered(file: &SourceFile, comment: &Comment) -> Span {
    if !comment.own_line {
        // After a block's `}` it covers the whole block: `fmt` lays a
        // one-line block out over several lines and leaves the comment
        // after the `}`, and the suppression must mean the same after.
        let line = Span::new(comment.line_start, comment.span.start);
        let closed_here = file.items.iter().find(|item| {
            let close = match &item.kind {
                ItemKind::Defaults(block) => block.close,
                ItemKind::Server(server) => server.body.close,
                ItemKind::Reason(decl) => decl.body.close,
                _ => None,
            };
            close.is_some_and(|c| line.start <= c.start && c.start < line.end)
        });
        return match closed_here {
            Some(item) => Span::new(item.span.start.min(line.start), line.end),
            None => line,
        };
    }
    let after = comment.span.end;
    let mut next: Option<Span> = None;
    let mut consider = |span: Span| {
        if span.start >= after && next.is_none_or(|n| span.start < n.start) {
            next = Some(span);
        }
    };
    for item in &file.items {
        consider(item.span);
        match &item.kind {
            ItemKind::Defaults(block) => block.stmts.iter().for_each(|s| consider(s.span)),
            ItemKind::Server(server) => server.body.stmts.iter().for_each(|s| consider(s.span)),
            ItemKind::Reason(decl) => decl.body.stmts.iter().for_each(|s| consider(s.span)),
            _ => {}
        }
    }
    next.unwrap_or(Span::new(after, after))
}
