//! What the thing under the cursor means, with its effective value.

use mcpolicy_runtime::table::builtin;

use super::render::ttl;
use super::symbols::symbol_index;
use super::{docs, effective_blocks, item_at, policy_model};
use crate::db::{SourceText, analyze};
use crate::statements::{self, Statement};
use crate::syntax::*;

/// A hover: the span it describes and Markdown text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hover {
    /// What the text describes.
    pub span: Span,
    /// Markdown.
    pub markdown: String,
}

/// The hover at `offset`, if anything there has a meaning to show.
pub fn hover(db: &dyn salsa::Database, source: SourceText, offset: usize) -> Option<Hover> {
    let text = source.text(db);
    let mut found = reason_hover(db, source, offset).or_else(|| item_hover(db, source, offset));
    // Findings under the cursor, with the revision or rule they cite.
    let findings: Vec<String> = analyze(db, source)
        .diagnostics
        .iter()
        .filter(|d| d.span.contains(offset))
        .map(|d| {
            let mut line = format!("**{}** {}", d.code, d.message);
            if let Some(note) = &d.note {
                line.push_str(&format!(" — {note}"));
            }
            line
        })
        .collect();
    if !findings.is_empty() {
        let hover = found.get_or_insert_with(|| Hover {
            span: word_at(text, offset),
            markdown: String::new(),
        });
        if !hover.markdown.is_empty() {
            hover.markdown.push_str("\n\n---\n\n");
        }
        hover.markdown.push_str(&findings.join("\n\n"));
    }
    found
}

/// The identifier-like word around `offset` (or an empty span there).
pub(crate) fn word_at(text: &str, offset: usize) -> Span {
    // An offset inside a character snaps back to its start (the fuzz target
    // `policy_ide` found the slice below panicking there).
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let start = text[..offset]
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_word(*c))
        .last()
        .map_or(offset, |(i, _)| i);
    let end = text[offset..]
        .char_indices()
        .find(|(_, c)| !is_word(*c))
        .map_or(text.len(), |(i, _)| offset + i);
    Span::new(start, end)
}

fn reason_hover(db: &dyn salsa::Database, source: SourceText, offset: usize) -> Option<Hover> {
    let index = symbol_index(db, source);
    let (name, span) = index.reason_at(offset)?;
    let model = policy_model(db, source);
    let builtin = builtin::get(name);
    let declared = index.definition(name).is_some();
    let origin = match (builtin.is_some(), declared) {
        (true, true) => "built-in, redeclared in this policy",
        (true, false) => "built-in",
        (false, true) => "declared in this policy",
        (false, false) => "not declared",
    };
    let mut md = format!("**reason** `{name}` — {origin}");
    if let Some(b) = builtin {
        let outcome = match b.outcome {
            builtin::Outcome::Deny => "deny",
            builtin::Outcome::Trim => "trim",
            builtin::Outcome::Allow => "allow",
        };
        md.push_str(&format!("\n\n{} ({outcome}).", capitalise(b.summary)));
    }
    if let Some(spec) = model.reasons.get(name) {
        md.push_str(&format!(
            "\n\n| | |\n|---|---|\n| retryable | `{}` |\n| ttl | `{}` |\n| code | `{}` |\n| message | {} |",
            spec.retryable,
            ttl(spec.ttl),
            spec.code,
            escape_table(&spec.message)
        ));
    } else if !declared {
        md.push_str(&format!(
            "\n\nDeclare it: `reason {name} {{ retryable false; ttl forever }}`"
        ));
    }
    let uses = index.reason_refs.iter().filter(|r| r.name == name).count();
    md.push_str(&format!(
        "\n\nNamed by {uses} statement{} in this file.",
        if uses == 1 { "" } else { "s" }
    ));
    Some(Hover { span, markdown: md })
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn escape_table(text: &str) -> String {
    if text.is_empty() {
        "—".to_owned()
    } else {
        format!("`{}`", text.replace('|', "\\|"))
    }
}

fn keyword_markdown(doc: &docs::KeywordDoc) -> String {
    let mut md = format!("```mcpolicy\n{}\n```\n\n{}", doc.syntax, doc.meaning);
    if !doc.outcome.is_empty() {
        md.push_str(&format!("\n\nOutcome: {}.", doc.outcome));
    }
    // What a block that does not state it gets (`mcpc show` prints the same).
    if let Some(statement) = Statement::from_keyword(doc.keyword) {
        let applied = statement.applied_default_lines();
        if !applied.is_empty() {
            md.push_str(&format!(
                "\n\nBuilt-in default: `{}`.",
                applied.join("`, `")
            ));
        }
    }
    md
}

fn item_hover(db: &dyn salsa::Database, source: SourceText, offset: usize) -> Option<Hover> {
    let text = source.text(db);
    let (item, server_index) = item_at(db, source, offset)?;
    if let ItemKind::Bad(bad) = &item.kind {
        return unread_keyword_hover(db, source, bad, item.span.start, offset);
    }
    if item.keyword.contains(offset) {
        let word = &text[item.keyword.start..item.keyword.end];
        return docs::keyword(word).map(|doc| Hover {
            span: item.keyword,
            markdown: keyword_markdown(doc),
        });
    }
    match &item.kind {
        ItemKind::Server(server) => {
            let index = server_index?;
            if server.pattern.span.contains(offset) {
                return Some(pattern_hover(db, source, server, index));
            }
            block_hover(db, source, &server.body, Some(index), offset)
        }
        ItemKind::Defaults(block) => block_hover(db, source, block, None, offset),
        ItemKind::Reason(decl) => {
            let stmt = decl.body.stmts.iter().find(|s| s.span.contains(offset))?;
            if let ReasonStmtKind::Ttl(TtlSyntax::Duration(q)) = &stmt.kind
                && let Some(h) = unit_hover(q, offset)
            {
                return Some(h);
            }
            if let ReasonStmtKind::Bad(bad) = &stmt.kind {
                return unread_keyword_hover(db, source, &bad.text, bad.span.start, offset);
            }
            docs::keyword(stmt.kind.keyword()).map(|doc| Hover {
                span: stmt.keyword,
                markdown: keyword_markdown(doc),
            })
        }
        ItemKind::Version(_)
        | ItemKind::Protocol(_)
        | ItemKind::ErrorCode(_)
        | ItemKind::Identity(_) => {
            let word = &text[item.keyword.start..item.keyword.end];
            docs::keyword(word).map(|doc| Hover {
                span: item.span,
                markdown: keyword_markdown(doc),
            })
        }
        ItemKind::Bad(_) => None,
    }
}

/// Over the first word of text the grammar could not read (`max_tokens
/// lots`, `error_code abc`), when that word is a keyword: its syntax and
/// meaning, which is what the writer needs to correct the rest, and the
/// findings on the rest of that text (those under the cursor [`hover`]
/// adds itself). `text` starts at byte `start` of the file.
fn unread_keyword_hover(
    db: &dyn salsa::Database,
    source: SourceText,
    text: &str,
    start: usize,
    offset: usize,
) -> Option<Hover> {
    let leading = text.len() - text.trim_start().len();
    let word_len = text[leading..]
        .find(|c: char| c.is_whitespace() || matches!(c, ';' | '{' | '}' | '#'))
        .unwrap_or(text.len() - leading);
    let span = Span::new(start + leading, start + leading + word_len);
    if !span.contains(offset) || word_len == 0 {
        return None;
    }
    let doc = docs::keyword(&text[leading..leading + word_len])?;
    let mut markdown = keyword_markdown(doc);
    let whole = Span::new(start, start + text.len());
    for d in analyze(db, source).diagnostics.iter().filter(|d| {
        whole.start <= d.span.start && d.span.end <= whole.end && !d.span.contains(offset)
    }) {
        markdown.push_str(&format!("\n\n---\n\n**{}** {}", d.code, d.message));
        if let Some(help) = &d.help {
            markdown.push_str(&format!(" — {help}"));
        }
    }
    Some(Hover { span, markdown })
}

fn unit_hover(q: &Quantity, offset: usize) -> Option<Hover> {
    let unit = q.unit.as_ref().filter(|u| u.span.contains(offset))?;
    let (meaning, factor) = docs::unit(&unit.value)?;
    let mut md = format!("`{}` — {meaning}", unit.value);
    if let Some(n) = q.number.value {
        let base = match unit.value.as_str() {
            "ms" | "s" | "m" | "h" | "d" => "ms",
            "B" | "KiB" | "MiB" | "GiB" => "bytes",
            _ => "",
        };
        if let Some(total) = u64::try_from(n).ok().and_then(|n| n.checked_mul(factor)) {
            let written = if base == "bytes" {
                format!("{} {}", q.number.text, unit.value)
            } else {
                q.to_string()
            };
            md.push_str(&format!("\n\n`{written}` = {} {base}", group(total)));
        }
    }
    Some(Hover {
        span: unit.span,
        markdown: md.trim_end().to_owned(),
    })
}

/// `1234567` → `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn block_hover(
    db: &dyn salsa::Database,
    source: SourceText,
    block: &Block<Stmt>,
    server_index: Option<usize>,
    offset: usize,
) -> Option<Hover> {
    let text = source.text(db);
    let stmt = block.stmts.iter().find(|s| s.span.contains(offset))?;
    let (statement, args) = match &stmt.kind {
        StmtKind::Known(statement, args) => (statement, args),
        StmtKind::Bad(bad) => {
            return unread_keyword_hover(db, source, &bad.text, bad.span.start, offset);
        }
    };
    for q in args.quantities() {
        if let Some(h) = unit_hover(q, offset) {
            return Some(h);
        }
    }
    let word = word_at(text, offset);
    if let Some(doc) = docs::connective(&text[word.start..word.end]) {
        return Some(Hover {
            span: word,
            markdown: keyword_markdown(doc),
        });
    }
    let keyword = stmt.kind.keyword();
    let doc = docs::keyword(keyword)?;
    let mut md = keyword_markdown(doc);
    let blocks = effective_blocks(db, source);
    let model = policy_model(db, source);
    match server_index {
        Some(index) => {
            if let Some((pattern, effective)) = blocks.servers.get(index) {
                let lines: Vec<String> = statements::effective_lines(effective)
                    .into_iter()
                    .filter(|(s, _)| s == statement)
                    .map(|(_, line)| format!("`{line}`"))
                    .collect();
                if !lines.is_empty() {
                    md.push_str(&format!(
                        "\n\nEffective for `{pattern}`: {}",
                        lines.join(", ")
                    ));
                }
            }
        }
        None => {
            let overriding: Vec<String> = model
                .servers
                .iter()
                .filter(|(_, block)| block.states(*statement))
                .map(|(pattern, _)| format!("`{pattern}`"))
                .collect();
            md.push_str("\n\nInherited by every server block that does not state it");
            if overriding.is_empty() {
                md.push('.');
            } else {
                md.push_str(&format!("; stated again by {}.", overriding.join(", ")));
            }
        }
    }
    let span = if stmt.keyword.contains(offset) {
        stmt.keyword
    } else {
        stmt.span
    };
    Some(Hover { span, markdown: md })
}

fn pattern_hover(
    db: &dyn salsa::Database,
    source: SourceText,
    server: &ServerDecl,
    index: usize,
) -> Hover {
    let blocks = effective_blocks(db, source);
    let model = policy_model(db, source);
    let pattern = &server.pattern.value;
    let glob = pattern.contains(['*', '?']);
    let mut md = format!(
        "**server** `{pattern}` — {}",
        if glob {
            "a glob: `*` matches any run of characters, `?` one; the first matching block wins"
        } else {
            "one server id"
        }
    );
    if let (Some((_, effective)), Some((_, own))) =
        (blocks.servers.get(index), model.servers.get(index))
    {
        md.push_str("\n\nEffective block:\n\n```mcpolicy\n");
        let mut lines = statements::effective_lines(effective);
        // A statement no block states has what the runtime applies to it
        // (`retry_alert`), as `mcpc show` prints it.
        for &statement in Statement::ALL {
            if !lines.iter().any(|(s, _)| *s == statement) {
                lines.extend(
                    statement
                        .applied_default_lines()
                        .into_iter()
                        .map(|line| (statement, line)),
                );
            }
        }
        lines.sort_by_key(|(s, _)| *s);
        let width = crate::render::columns::width(lines.iter().map(|(_, l)| l.chars().count()), 0);
        for (statement, line) in lines {
            let from = if own.states_line(statement, &line) {
                ""
            } else if model.defaults.states(statement) {
                "# from defaults"
            } else {
                "# built-in default"
            };
            md.push_str(
                format!("{}  {from}", crate::render::columns::pad(&line, width)).trim_end(),
            );
            md.push('\n');
        }
        md.push_str("```");
    }
    Hover {
        span: server.pattern.span,
        markdown: md,
    }
}

#[cfg(test)]
mod tests {
    use super::word_at;
    use crate::syntax::Span;

    #[test]
    fn an_offset_inside_a_character_snaps_to_its_start() {
        let text = "server \"café\" { sampling off }";
        let inside = text.find('é').map_or(0, |at| at + 1);
        assert_eq!(word_at(text, inside), word_at(text, inside - 1));
        assert_eq!(word_at("é", 1), Span::new(0, 0));
    }
}
